//! Shared set-up for commands: config file, machine, state directory; the
//! engine itself comes from the library (`topomgr_node::setup`).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use topomgr_node::config::HostConfig;
use topomgr_node::node_state::NodeState;
use topomgr_node::state_lock::StateLock;
use topomgr_node::store::Store;
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
    let opts = topomgr_node::config::LoadOptions {
        env: &env,
        protected,
    };
    Ok(topomgr_node::config::load_with(path, &opts)?)
}

/// Discover the machine from `--sysfs-root` or the configured root.
pub fn discover(cfg: &HostConfig, sysfs_root: Option<&Path>) -> anyhow::Result<Machine> {
    let root = sysfs_root.unwrap_or(&cfg.sysfs_root);
    topomgr_discovery::discover(root)
        .with_context(|| format!("discovering the machine from {}", root.display()))
}

/// How long a one-shot command waits for another holder of the state lock.
pub const STATE_LOCK_WAIT: Duration = Duration::from_secs(30);

/// A state directory held by one command: its lock (released on drop) and
/// its store (snapshot and journal).
pub struct HeldState {
    _lock: StateLock,
    store: Store,
}

/// Lock `dir` (waiting up to [`STATE_LOCK_WAIT`]) and restore it into `node`.
pub fn open_state(dir: &Path, node: &mut NodeState) -> anyhow::Result<HeldState> {
    let lock = StateLock::acquire_within(dir, STATE_LOCK_WAIT)?;
    let boot_id = node.boot_id().to_owned();
    let (store, restored) =
        Store::open(dir, node.admitter_mut(), &boot_id).context("restoring state")?;
    for issue in &restored.issues {
        tracing::warn!(state_dir = %dir.display(), %issue, "restored state does not match the machine or the config");
    }
    node.set_records(restored.records);
    Ok(HeldState { _lock: lock, store })
}

impl HeldState {
    /// Make what `node` changed since it was opened (or last saved) durable.
    pub fn save(&mut self, node: &mut NodeState) -> anyhow::Result<()> {
        self.store.commit(node).context("saving state")?;
        Ok(())
    }

    /// Release the pods of dead `topomgr run` owners whose cgroups are
    /// empty; say which stay held because processes remain.
    pub fn reclaim(&self, node: &mut NodeState) {
        for r in node.reclaim() {
            if let topomgr_node::node_state::Reclaim::Kept { uid, pids } = r {
                tracing::info!(pod = %uid, ?pids, "pod of an ended topomgr run stays held: processes remain in its cgroup");
            }
        }
    }
}
