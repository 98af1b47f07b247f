//! `topomgr state check|recover --state-dir DIR`: the operator's verbs on a
//! state directory (`topomgr_node::persist::state_repair`). Neither loads the config
//! nor any provider: they read and write the snapshot and the journal only.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use topomgr_node::persist::state_repair;

/// Arguments of `topomgr state`.
#[derive(Debug, Args)]
pub struct StateArgs {
    #[command(subcommand)]
    verb: StateVerb,
}

#[derive(Debug, Subcommand)]
enum StateVerb {
    /// Verify a state directory and summarize it: the snapshot's generation,
    /// the journal's records, pods and providers, and any damage with its
    /// file, byte offset and record number. Exit status 0: a daemon or
    /// command starts on it (a torn append, never acknowledged, is cut off
    /// then); 1: they refuse it (damage); 2: it cannot be read.
    Check {
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
    },
    /// Keep what is intact in a damaged state directory: copy its snapshot
    /// and journal into a backup directory, write what is intact as a new
    /// snapshot, and list what was dropped (and which pods that forgets or
    /// brings back). Refused while a daemon or command holds the directory;
    /// changes nothing when nothing is damaged.
    Recover {
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
        /// Where to copy the files first (a new directory; default
        /// DIR/damaged-<seconds since the epoch>).
        #[arg(long)]
        backup_dir: Option<PathBuf>,
    },
}

/// Run `topomgr state VERB`.
pub fn run(args: StateArgs) -> anyhow::Result<ExitCode> {
    match args.verb {
        StateVerb::Check { state_dir } => {
            let check = state_repair::check(&state_dir)?;
            println!("{check}");
            Ok(if check.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        StateVerb::Recover {
            state_dir,
            backup_dir,
        } => {
            let backup = backup_dir.unwrap_or_else(|| state_repair::default_backup(&state_dir));
            let recovery = state_repair::recover(&state_dir, &backup)?;
            println!("{recovery}");
            Ok(ExitCode::SUCCESS)
        }
    }
}
