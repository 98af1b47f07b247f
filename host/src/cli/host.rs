//! Shared set-up for commands: config, machine, policy, providers, state.

use std::path::Path;

use anyhow::Context;
use topomgr::admission::Admitter;
use topomgr::config::HostConfig;
use topomgr::plugin;
use topomgr::policy::{NumaInfo, Policy, Scope};
use topomgr::provider::HintProvider;
use topomgr_sdk::Machine;

/// Load the config file; the default path may be absent (built-in defaults).
/// Run as root, the config file, its drop-in directory and every drop-in
/// must be protected like plugin files (`topomgr serve` always checks, see
/// [`load_config_protected`]).
pub fn load_config(path: &Path) -> anyhow::Result<HostConfig> {
    load(path, nix::unistd::geteuid().is_root())
}

/// [`load_config`] that always refuses config files others could replace.
pub fn load_config_protected(path: &Path) -> anyhow::Result<HostConfig> {
    load(path, true)
}

fn load(path: &Path, protected: bool) -> anyhow::Result<HostConfig> {
    if path == Path::new(super::DEFAULT_CONFIG) && !path.exists() {
        tracing::info!(path = %path.display(), "no config file; using built-in defaults");
        return Ok(HostConfig::default());
    }
    let env = |var: &str| std::env::var(var).ok();
    let opts = topomgr::config::LoadOptions {
        env: &env,
        protected,
    };
    Ok(topomgr::config::load_with(path, &opts)?)
}

/// Discover the machine from `--sysfs-root` or the configured root.
pub fn discover(cfg: &HostConfig, sysfs_root: Option<&Path>) -> anyhow::Result<Machine> {
    let root = sysfs_root.unwrap_or(&cfg.sysfs_root);
    topomgr::discover::discover(root)
        .with_context(|| format!("discovering the machine from {}", root.display()))
}

/// Load one configured provider.
pub fn load_provider(
    cfg: &HostConfig,
    name: &str,
    machine: &Machine,
) -> anyhow::Result<Box<dyn HintProvider>> {
    let entry = cfg.providers.get(name).with_context(|| {
        let known: Vec<&str> = cfg.providers.keys().map(String::as_str).collect();
        format!(
            "no provider {name:?} is configured (configured: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )
    })?;
    if !entry.enabled {
        anyhow::bail!(
            "provider {name:?} is disabled (enabled = false in the configuration read from {})",
            cfg.files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let dirs = plugin::search_dirs(cfg);
    let p = plugin::load_provider(name, entry, &dirs, machine, &cfg.state_dir)?;
    Ok(Box::new(p))
}

/// What an admitter is made of: the policy, the scope and the providers.
pub type EngineParts = (Policy, Scope, Vec<Box<dyn HintProvider>>);

/// The policy, the scope and every configured provider (in name order).
pub fn engine_parts(cfg: &HostConfig, machine: &Machine) -> anyhow::Result<EngineParts> {
    let numa = NumaInfo::from_machine(machine).context("reading NUMA information")?;
    let (policy, scope) = Policy::create(&cfg.policy, &cfg.scope, &cfg.policy_options, numa)
        .context("cannot create the Topology Manager policy")?;
    let providers = cfg
        .enabled_providers()
        .map(|(name, _)| load_provider(cfg, name, machine))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((policy, scope, providers))
}

/// An admitter over [`engine_parts`].
pub fn admitter(cfg: &HostConfig, machine: &Machine) -> anyhow::Result<Admitter> {
    let (policy, scope, providers) = engine_parts(cfg, machine)?;
    Ok(Admitter::new(policy, scope, providers))
}

/// How long a one-shot command waits for another holder of the state lock.
pub const STATE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A state directory held by one command: its lock (released on drop) and
/// the daemon's cgroup attachments, kept when saving.
pub struct HeldState {
    _lock: topomgr::state_lock::StateLock,
    dir: std::path::PathBuf,
    attachments: topomgr::checkpoint::Attachments,
}

/// Lock `dir` (waiting up to [`STATE_LOCK_WAIT`]) and restore it into `adm`.
pub fn open_state(
    dir: &Path,
    adm: &mut topomgr::admission::Admitter,
    machine: &Machine,
) -> anyhow::Result<HeldState> {
    let lock = topomgr::state_lock::StateLock::acquire_within(dir, STATE_LOCK_WAIT)?;
    let restored = topomgr::checkpoint::restore(dir, adm, machine).context("restoring state")?;
    Ok(HeldState {
        _lock: lock,
        dir: dir.to_path_buf(),
        attachments: restored.attachments,
    })
}

impl HeldState {
    /// Save `adm` (pods and every provider) into the held directory.
    pub fn save(&self, adm: &topomgr::admission::Admitter) -> anyhow::Result<()> {
        topomgr::checkpoint::save(&self.dir, adm, &self.attachments).context("saving state")
    }
}
