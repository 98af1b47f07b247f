//! What every command reads first: the config file and the machine. The
//! rest of the set-up is the library's (`topomgr_node::setup`,
//! `topomgr_node::state_dir`).

use std::path::Path;

use anyhow::Context;
use topomgr_node::config::{self, HostConfig};
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
