//! A daemon for the benchmarks: `topomgr_daemon::run` on a thread of this
//! process (the same code as `topomgr serve`) over the real CPU provider
//! `.so` (static policy, CPU 0 reserved) on the example 2-socket machine.

#![allow(dead_code)] // each bench uses part of it

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use topomgr_bench::workspace_root;
use topomgr_client::http::Client;
use topomgr_daemon::{self as daemon, Daemon};
use topomgr_node::locks::lock_holder::{Holder, Role};
use topomgr_node::locks::node_lock::NodeLock;
use topomgr_node::locks::state_lock::StateLock;
use topomgr_node::setup::config::{HostConfig, ProviderEntry};
use topomgr_node::setup::AdmitterParts;

/// Build the CPU provider in release mode and return its .so.
pub fn cpu_plugin() -> PathBuf {
    topomgr_bench::build_release_plugins(&["topomgr-provider-cpu"])
        .remove("topomgr_provider_cpu")
        .expect("cargo built no CPU provider .so")
}

/// Start a daemon with its state under `state_root`; returns its socket.
pub fn start_daemon(tag: &str, state_root: &Path, plugin: &Path) -> PathBuf {
    start_daemon_with(tag, state_root, plugin, None)
}

/// [`start_daemon`] with `[kubernetes]` settings (`node`: the node's name,
/// the NodeResourceTopology object's).
pub fn start_daemon_with(
    tag: &str,
    state_root: &Path,
    plugin: &Path,
    kubernetes: Option<(daemon::KubeSettings, String)>,
) -> PathBuf {
    let dir = state_root.join(format!("topomgr-bench-daemon-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create bench dir");
    let socket = dir.join("t.sock");
    let state_dir = dir.join("state");
    let me = Holder::current(Role::Serve, &state_dir, Some(&socket));
    let node_lock = NodeLock::acquire(&dir.join("cgroup"), &me).expect("node lock");
    let lock = StateLock::acquire(&state_dir, &me).expect("lock");
    let machine = topomgr_discovery::discover(&workspace_root().join("examples/machines/2s4n/sys"))
        .expect("discover the example machine");
    // The wiring every command uses, from a config as the files would give.
    let cfg = HostConfig {
        policy: "single-numa-node".to_owned(),
        state_dir: state_dir.clone(),
        providers: [(
            "cpu".to_owned(),
            ProviderEntry {
                library: plugin.to_string_lossy().into_owned(),
                enabled: true,
                config: serde_json::json!({"policy": "static", "reserved_cpus": "0"}),
                defined_in: PathBuf::from("bench"),
                config_dir: PathBuf::new(),
            },
        )]
        .into(),
        ..HostConfig::default()
    };
    let parts = AdmitterParts::from_config(&cfg, &machine).expect("load the cpu provider");
    let d = Daemon {
        socket: socket.clone(),
        group: "topomgr".to_owned(),
        metrics_address: None,
        provider_timeout: Duration::from_secs(10),
        reclaim_interval: Duration::from_secs(10),
        state_dir,
        cgroup_root: dir.join("cgroup"),
        lift_cpu_quota: true,
        limits: cfg.limits.limits(),
        machine,
        policy: parts.policy,
        scope: parts.scope,
        providers: parts.providers,
        lock,
        node_lock,
        export: topomgr_node::nrt::ExportSettings {
            node_name: kubernetes
                .as_ref()
                .map(|(_, node)| node.clone())
                .unwrap_or_default(),
            file: None,
        },
        nri: None,
        kubernetes: kubernetes.map(|(k, _)| k),
        podresources_socket: None,
        reload: None,
        cdi_spec_dirs: Vec::new(),
        sysfs_root: "/sys".into(),
    };
    std::thread::spawn(move || daemon::run(d));
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if Client::new(&socket)
            .get("/v1/health")
            .is_ok_and(|r| r.status == 200)
        {
            return socket;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("bench daemon did not start");
}

/// A one-container pod: `limits` as YAML lines under `resources:`.
pub fn manifest(uid: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {uid}\n  uid: {uid}\nspec:\n  containers:\n  - name: app\n    resources:\n{resources}"
    )
}

/// A Guaranteed pod with one exclusive CPU.
pub const EXCLUSIVE: &str = "      limits:\n        cpu: \"1\"\n        memory: 1Gi\n";

/// A Burstable pod on the shared pool (the CPU provider keeps no state for it).
pub const SHARED: &str = "      requests:\n        cpu: 10m\n";

/// Admit `uid` and release it again; panics unless both succeed.
pub fn admit_release(c: &mut Client, uid: &str, manifest: &str) {
    let r = c.admit(manifest).expect("admit");
    assert!(
        r.status == 200 && r.body.windows(15).any(|w| w == b"\"admitted\":true"),
        "admit failed: {}",
        String::from_utf8_lossy(&r.body)
    );
    let r = c.release(uid).expect("release");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// Where state on tmpfs goes (`/dev/shm`, else the temp dir) and on disk
/// (the target directory).
pub fn places() -> [(&'static str, PathBuf); 2] {
    let shm = Path::new("/dev/shm");
    let tmpfs = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    [("tmpfs", tmpfs), ("disk", workspace_root().join("target"))]
}
