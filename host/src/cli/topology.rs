//! `topomgr topology`: what discovery found.

use std::path::Path;
use std::process::ExitCode;

use super::{inputs, Output};

/// Discover and print as JSON (the contract in docs/cli.md) or a table.
pub fn run(config: &Path, sysfs_root: Option<&Path>, output: Output) -> anyhow::Result<ExitCode> {
    let cfg = inputs::load_config(config)?;
    let machine = inputs::discover(&cfg, sysfs_root)?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&machine)?),
        Output::Table => print!(
            "{}",
            super::text::lines(&topomgr_discovery::render_table(&machine))
        ),
    }
    Ok(ExitCode::SUCCESS)
}
