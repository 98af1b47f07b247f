//! What every command reads first: the config file and the machine, and
//! for a one-shot command that may write cpusets the node lock. The rest of
//! the set-up is the library's (`topomgr_node::setup`,
//! `topomgr_node::persist::state_dir`).

use std::path::Path;

use anyhow::Context;
use topomgr_node::locks::lock_holder::{Holder, Role};
use topomgr_node::locks::node_lock::NodeLock;
use topomgr_node::setup::config::{self, HostConfig};
use topomgr_node::state::NodeState;
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
    let cfg = config::load(path, true)?;
    warn_without_config(path, &cfg);
    Ok(cfg)
}

/// [`load_config`] for a command that loads providers: with no config file
/// (only the default path may be absent) it warns on stderr, whatever the
/// verbosity, that no provider is configured and how to configure one.
pub fn load_node_config(path: &Path) -> anyhow::Result<HostConfig> {
    let cfg = load_config(path)?;
    warn_without_config(path, &cfg);
    Ok(cfg)
}

/// Print [`no_config_warning`] when it applies.
pub fn warn_without_config(path: &Path, cfg: &HostConfig) {
    if let Some(warning) = no_config_warning(path, cfg) {
        eprintln!("{warning}");
    }
}

/// The warning for a configuration read from no file: the built-in
/// defaults (and `TOPOMGR_*` variables), which configure no provider.
fn no_config_warning(path: &Path, cfg: &HostConfig) -> Option<String> {
    cfg.files.is_empty().then(|| {
        format!(
            "topomgr: warning: no config file at {}; using the built-in defaults, which configure no provider: nothing is aligned and pods that request devices are refused. Create {} (the source tree's topomgr.toml and plugins.d/ are a starting point) or pass --config FILE",
            path.display(),
            path.display()
        )
    })
}

/// Discover the machine from `--sysfs-root` or the configured root.
pub fn discover(cfg: &HostConfig, sysfs_root: Option<&Path>) -> anyhow::Result<Machine> {
    let root = sysfs_root.unwrap_or(&cfg.sysfs_root);
    topomgr_discovery::discover(root)
        .with_context(|| format!("discovering the machine from {}", root.display()))
}

/// For a one-shot command of `role` on `state_dir` whose `node` (restored)
/// records cgroups, so that its changes may write cpusets: the node lock of
/// the configured cgroup root ([`node_lock`]). `None` when the state has no
/// cgroup to write.
pub fn node_lock_for(
    cfg: &HostConfig,
    state_dir: &Path,
    role: Role,
    node: &NodeState,
) -> anyhow::Result<Option<NodeLock>> {
    if !node.has_cgroups() {
        return Ok(None);
    }
    node_lock(cfg, state_dir, role).map(Some)
}

/// The node lock of the configured cgroup root for a one-shot command of
/// `role` on `state_dir`, refused at once while a daemon or another state
/// directory owns the node (`topomgr_node::locks::node_lock`). `admit
/// --state-dir` takes it even when its state records no cgroups: the CPUs
/// it books are the node's, and a daemon, a live container it placed or
/// another state directory may hold them (issue 37 item 3).
pub fn node_lock(cfg: &HostConfig, state_dir: &Path, role: Role) -> anyhow::Result<NodeLock> {
    let me = Holder::current(role, state_dir, None);
    Ok(NodeLock::acquire(&cfg.cgroup_root, &me)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_only_without_a_config_file() {
        let default = Path::new(config::DEFAULT_CONFIG_PATH);
        let none = config::defaults_with(&|_| None).unwrap();
        assert_eq!(
            no_config_warning(default, &none).unwrap(),
            "topomgr: warning: no config file at /etc/topomgr/topomgr.toml; using the built-in defaults, which configure no provider: nothing is aligned and pods that request devices are refused. Create /etc/topomgr/topomgr.toml (the source tree's topomgr.toml and plugins.d/ are a starting point) or pass --config FILE"
        );
        let mut read = none.clone();
        read.files.push(default.to_path_buf());
        assert_eq!(no_config_warning(default, &read), None);
    }
}
