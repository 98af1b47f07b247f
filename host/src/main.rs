//! The `topomgr` binary: command-line parsing and dispatch.
//!
//! Everything substantial lives in the library crates under `host/` (the
//! node, the daemon, `run`, the OCI hook, the client; ARCHITECTURE.md has
//! the map); the modules under `cli/` read input, build what those crates
//! are handed (the node state of a `run` without a daemon, `run_local.rs`),
//! call them, and print the documented JSON or tables.
//! Exit status: 0 success, 1 a provider refused (`provider ... allocate`)
//! or a state directory is damaged (`state check`), 2 unusable input (bad JSON/manifest/config, unknown policy, ...).

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    cli::init_logging(args.verbose);
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            // One line: the error and its causes. Library errors carry their
            // cause either in their message or as their source, never both
            // (thiserror: a field named `source` is the source, so fields
            // shown in the message are named otherwise), so nothing repeats.
            let msg = e
                .chain()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(": ");
            eprintln!("topomgr: error: {msg}");
            ExitCode::from(2)
        }
    }
}
