//! `topomgr serve`: take the node and the state directory, discover, load providers, run the daemon.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use topomgr_daemon::{self as daemon, Daemon};
use topomgr_node::setup::AdmitterParts;

use topomgr_node::locks::lock_holder::{Holder, Role};
use topomgr_node::locks::node_lock::NodeLock;
use topomgr_node::locks::state_lock::StateLock;

use super::inputs;

/// Arguments of `topomgr serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Unix socket to listen on (default: config [daemon] socket, /run/topomgr/topomgr.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// sysfs directory to read (default: config sysfs_root).
    #[arg(long)]
    sysfs_root: Option<PathBuf>,
    /// State directory (default: config state_dir); one daemon per directory.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

/// The daemon's reload reads what `serve` read at start: the same config
/// file (protected, with its drop-ins and environment), the same state
/// directory and sysfs root as the command line gave.
struct Reread {
    config: PathBuf,
    state_dir: PathBuf,
    sysfs_root: Option<PathBuf>,
}

impl daemon::reload::Source for Reread {
    fn config(&self) -> Result<topomgr_node::setup::config::HostConfig, String> {
        let mut cfg = inputs::load_config_protected(&self.config).map_err(|e| format!("{e:#}"))?;
        if cfg.state_dir != self.state_dir {
            tracing::warn!(configured = %cfg.state_dir.display(), serving = %self.state_dir.display(), "state_dir changes only at a restart; the daemon keeps serving its state directory");
        }
        cfg.state_dir = self.state_dir.clone();
        Ok(cfg)
    }

    fn machine(
        &self,
        cfg: &topomgr_node::setup::config::HostConfig,
    ) -> Result<topomgr_node::api::Machine, String> {
        inputs::discover(cfg, self.sysfs_root.as_deref()).map_err(|e| format!("{e:#}"))
    }
}

/// Run the daemon until SIGTERM or SIGINT.
pub fn run(config: &Path, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = inputs::load_config_protected(config)?;
    if let Some(dir) = args.state_dir {
        cfg.state_dir = dir;
    }
    let socket = args.socket.unwrap_or_else(|| cfg.daemon.socket.clone());
    // The node first (who else writes these cpusets), then the state
    // directory; both before loading: providers may read their state
    // directories while loading.
    let me = Holder::current(Role::Serve, &cfg.state_dir, Some(&socket));
    let node_lock = NodeLock::acquire(&cfg.cgroup_root, &me)?;
    let lock = StateLock::acquire(&cfg.state_dir, &me)?;
    let machine = inputs::discover(&cfg, args.sysfs_root.as_deref())?;
    let parts = AdmitterParts::from_config(&cfg, &machine)?;
    daemon::run(Daemon {
        socket,
        group: cfg.daemon.group.clone(),
        metrics_address: cfg.daemon.metrics_address,
        provider_timeout: Duration::from_millis(cfg.daemon.provider_timeout_ms),
        reclaim_interval: Duration::from_millis(cfg.daemon.reclaim_interval_ms),
        state_dir: cfg.state_dir.clone(),
        cgroup_root: cfg.cgroup_root.clone(),
        lift_cpu_quota: cfg.disable_cpu_quota_with_exclusive_cpus,
        limits: cfg.limits.limits(),
        machine,
        policy: parts.policy,
        scope: parts.scope,
        providers: parts.providers,
        lock,
        node_lock,
        export: topomgr_node::nrt::ExportSettings {
            node_name: topomgr_node::nrt::node_name(&cfg)?,
            file: cfg.export_file.clone(),
        },
        kubernetes: kubernetes(&cfg)?,
        nri: cfg.nri.enabled.then(|| daemon::nri::NriSettings {
            socket: cfg.nri.socket.clone(),
            plugin_name: cfg.nri.plugin_name.clone(),
            plugin_index: cfg.nri.plugin_index.clone(),
            kubelet_root_dir: cfg.nri.kubelet_root_dir.clone(),
            cri_socket: cfg.nri.cri_socket.clone(),
            kubelet_pod_resources_socket: cfg.cdi.kubelet_pod_resources_socket.clone(),
        }),
        podresources_socket: cfg.podresources.socket.clone(),
        cdi_spec_dirs: cfg.cdi.spec_dirs.clone(),
        sysfs_root: args
            .sysfs_root
            .clone()
            .unwrap_or_else(|| cfg.sysfs_root.clone()),
        reload: Some(daemon::Reload {
            source: std::sync::Arc::new(Reread {
                config: config.to_path_buf(),
                state_dir: cfg.state_dir.clone(),
                sysfs_root: args.sysfs_root.clone(),
            }),
            interval: Duration::from_millis(cfg.daemon.machine_check_interval_ms),
            config: cfg,
        }),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The daemon's `[kubernetes]` settings: the access is loaded (and a bad
/// kubeconfig refused) before the daemon starts.
fn kubernetes(
    cfg: &topomgr_node::setup::config::HostConfig,
) -> anyhow::Result<Option<daemon::KubeSettings>> {
    let k = &cfg.kubernetes;
    if !k.enabled {
        return Ok(None);
    }
    let source = match &k.kubeconfig {
        Some(path) => topomgr_kube::Source::Kubeconfig(path.clone()),
        None => topomgr_kube::Source::InCluster,
    };
    let access =
        topomgr_kube::Access::load(&source).map_err(|e| anyhow::anyhow!("[kubernetes]: {e}"))?;
    let client =
        topomgr_kube::ApiClient::new(access).map_err(|e| anyhow::anyhow!("[kubernetes]: {e}"))?;
    let node_name = topomgr_node::nrt::node_name(cfg)?;
    let push = k.push_nrt.then(|| topomgr_kube::nrt_push::PushSettings {
        node_name,
        min_interval: Duration::from_millis(k.nrt_min_interval_ms),
        retry_min: Duration::from_millis(200),
        retry_max: Duration::from_millis(k.nrt_retry_max_ms),
        delete_on_shutdown: k.delete_nrt_on_shutdown,
    });
    Ok(Some(daemon::KubeSettings {
        client,
        push,
        events: k.events,
    }))
}
