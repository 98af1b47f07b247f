//! The `topomgr` binary: command-line parsing and dispatch.
//!
//! Everything substantial lives in the `topomgr` library; the modules under
//! `cli/` only read input, call it, and print the documented JSON or tables.
//! Exit status: 0 success, 1 a provider refused (`provider ... allocate`),
//! 2 unusable input (bad JSON/manifest/config, unknown policy, ...).

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    cli::init_logging(args.verbose);
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            // One line: the error and its causes. Library errors put their
            // cause in their own message and do not chain it (config,
            // manifest, policy, plugin, state lock); a few still do both
            // (DiscoveryError::Read, merge's CompactHints, CheckpointError,
            // the daemon's client, socket and start errors, the cgroup
            // errors), so a cause already in the message is not repeated.
            let mut msg = e.to_string();
            for cause in e.chain().skip(1) {
                let cause = cause.to_string();
                if !msg.contains(&cause) {
                    msg.push_str(": ");
                    msg.push_str(&cause);
                }
            }
            eprintln!("topomgr: error: {msg}");
            ExitCode::from(2)
        }
    }
}
