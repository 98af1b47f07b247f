//! `topomgr oci-hook [createRuntime|poststop]`: the OCI runtime hook
//! (`topomgr_oci_hook`); the options, the exit status and the messages.
//!
//! Exit status: 0 placed, left alone or released; 1 rejected (topomgr's
//! reason on stderr: the runtime fails the container with it); 2 anything
//! else (the daemon is not there or did not answer in time, an unusable
//! state or bundle).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use topomgr_oci_hook::{read_state, Hook, HookError, Stage};

use super::inputs;

/// Exit status of a rejected container.
const REJECTED: u8 = 1;

/// The hook stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StageArg {
    /// Admit and place the container (its cgroup exists, it has not started).
    #[value(name = "createRuntime")]
    CreateRuntime,
    /// Release the container.
    #[value(name = "poststop")]
    Poststop,
}

/// Arguments of `topomgr oci-hook`.
#[derive(Debug, Args)]
pub struct OciHookArgs {
    /// The stage (default: from the container's state on stdin: creating is
    /// createRuntime, stopped is poststop).
    #[arg(value_enum)]
    stage: Option<StageArg>,
    /// The daemon's socket (default: config [daemon] socket, /run/topomgr/topomgr.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Deadline of each call to the daemon, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_ms: u64,
}

/// Run the hook for the container whose OCI state is on stdin.
pub fn run(config: &Path, args: OciHookArgs) -> anyhow::Result<ExitCode> {
    let state = read_state(std::io::stdin().lock())?;
    let cfg = inputs::load_config(config)?;
    let hook = Hook {
        socket: args.socket.unwrap_or(cfg.daemon.socket),
        cgroup_root: cfg.cgroup_root,
        deadline: Duration::from_millis(args.timeout_ms),
    };
    let stage = args.stage.map(|s| match s {
        StageArg::CreateRuntime => Stage::CreateRuntime,
        StageArg::Poststop => Stage::Poststop,
    });
    match hook.run(stage, &state) {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e @ HookError::Rejected { .. }) => {
            eprintln!("topomgr: {e}");
            Ok(ExitCode::from(REJECTED))
        }
        Err(e) => Err(e.into()),
    }
}
