//! What every command reads first: the config file and the machine, and
//! for a one-shot command that may write cpusets the node lock. The rest of
//! the set-up is the library's (`topomgr_node::setup`,
//! `topomgr_node::state_dir`).

use std::path::Path;

use anyhow::Context;
use topomgr_node::config::{self, HostConfig};
use topomgr_node::lock_holder::{Holder, Role};
use topomgr_node::node_lock::NodeLock;
use topomgr_node::node_state::NodeState;
use topomgr_sdk::Machine;

/// Load the config file ([`config::load`]; the default path may be
/// absent). Run as root, the config file, its drop-in directory and every
/// drop-in must be protected like plugin files (`topomgr serve` always
/// checks, see [`load_config_protected`]).
pub fn load_config(path: &Path) -> anyhow::Result<HostConfig> {
    Ok(config::load(path, nix::unistd::geteuid().is_root())?)
}

/// [`load_config`] that always refuses config files others could replace.
pub fn load_config_protected(path: &Path) -> anyhow::Result<HostConfig> {
    Ok(config::load(path, true)?)
}

/// Discover the machine from `--sysfs-root` or the configured root.
pub fn discover(cfg: &HostConfig, sysfs_root: Option<&Path>) -> anyhow::Result<Machine> {
    let root = sysfs_root.unwrap_or(&cfg.sysfs_root);
    topomgr_discovery::discover(root)
        .with_context(|| format!("discovering the machine from {}", root.display()))
}

/// For a one-shot command of `role` on `state_dir` whose `node` (restored)
/// records cgroups, so that its changes may write cpusets: the node lock of
/// the configured cgroup root (refused at once while a daemon or another
/// state directory owns the node: `topomgr_node::node_lock`). `None` when
/// the state has no cgroup to write.
pub fn node_lock_for(
    cfg: &HostConfig,
    state_dir: &Path,
    role: Role,
    node: &NodeState,
) -> anyhow::Result<Option<NodeLock>> {
    if !node.has_cgroups() {
        return Ok(None);
    }
    let me = Holder::current(role, state_dir, None);
    Ok(Some(NodeLock::acquire(&cfg.cgroup_root, &me)?))
}
