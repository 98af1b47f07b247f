//! `topomgr release --state-dir DIR UID`: release a pod from a state
//! directory without a daemon (operator repair), through the same
//! [`topomgr_node::state::NodeState`] the daemon uses. `--socket` (or no
//! `--state-dir`) asks the running daemon instead.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use topomgr_engine::admission::AdmissionError;
use topomgr_node::locks::lock_holder::Role;
use topomgr_node::persist::state_dir::StateDir;

use super::client::{self, SocketArg};
use super::inputs;

/// Arguments of `topomgr release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// Release from this state directory in-process (no daemon may serve it).
    #[arg(long, conflicts_with = "socket")]
    state_dir: Option<PathBuf>,
    /// sysfs directory to read with --state-dir (default: config
    /// sysfs_root): the machine the pods were admitted on.
    #[arg(long, requires = "state_dir")]
    sysfs_root: Option<PathBuf>,
    /// Pod uid.
    uid: String,
}

/// Release the pod in the daemon or, with `--state-dir`, in the directory.
pub fn run(config: &Path, args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let Some(dir) = &args.state_dir else {
        return client::release(config, &args.socket, &args.uid);
    };
    let cfg = inputs::load_node_config(config)?;
    let machine = inputs::discover(&cfg, args.sysfs_root.as_deref())?;
    let mut node = topomgr_node::setup::node_state(&cfg, &machine)?;
    let mut held = StateDir::open(dir, &mut node, Role::Release)?;
    // With cgroups in the state, it removes cgroups and grows the shared
    // pool: only while this command may own the node.
    let _node = inputs::node_lock_for(&cfg, dir, Role::Release, &node)?;
    let uid = &args.uid;
    if !node.pods().contains_key(uid) {
        eprintln!(
            "topomgr: error: no admitted pod with uid {uid:?} in {}",
            dir.display()
        );
        return Ok(ExitCode::from(1));
    }
    let left = node.processes(uid).unwrap_or_default();
    node.remove_cgroups(uid);
    let released = match node.release(uid) {
        Ok(r) => r,
        Err(AdmissionError::ReleaseErrors { uid: r, errors }) => {
            eprintln!(
                "topomgr: warning: pod {r:?} released, but providers reported errors: {errors}"
            );
            held.save(&mut node)?;
            node.settle_pool();
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e).context("releasing the pod"),
    };
    held.save(&mut node)?;
    node.settle_pool();
    if !left.is_empty() {
        let pids: Vec<String> = left.iter().map(u32::to_string).collect();
        eprintln!(
            "topomgr: warning: processes {} are still in the pod's cgroup and now run on CPUs that are no longer reserved for them",
            pids.join(",")
        );
    }
    super::print::print_json(&topomgr_contract::api::Admission::from(&released))?;
    Ok(ExitCode::SUCCESS)
}
