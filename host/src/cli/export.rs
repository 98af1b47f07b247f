//! `topomgr export nrt`: this node's NodeResourceTopology object
//! ([`topomgr_node::nrt`]) as JSON or YAML, an object `kubectl apply -f -`
//! accepts. From the running daemon, or with `--state-dir` from a state
//! directory in-process (no daemon may serve it).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use topomgr_node::locks::lock_holder::Role;
use topomgr_node::nrt::NodeResourceTopology;
use topomgr_node::persist::state_dir::StateDir;

use super::client::SocketArg;
use super::inputs;

/// Arguments of `topomgr export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    what: ExportWhat,
}

#[derive(Debug, Subcommand)]
enum ExportWhat {
    /// The NodeResourceTopology (topology.node.k8s.io/v1alpha2) object of this node.
    Nrt(NrtArgs),
}

/// Output format of an exported object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

#[derive(Debug, Args)]
struct NrtArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// Build it from this state directory in-process (no daemon may serve it).
    #[arg(long, conflicts_with = "socket")]
    state_dir: Option<PathBuf>,
    /// sysfs directory to read with --state-dir (default: config sysfs_root).
    #[arg(long, requires = "state_dir")]
    sysfs_root: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "json")]
    output: Format,
}

/// Run `topomgr export ...`.
pub fn run(config: &Path, args: ExportArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        ExportWhat::Nrt(a) => nrt(config, a),
    }
}

fn nrt(config: &Path, args: NrtArgs) -> anyhow::Result<ExitCode> {
    let object = match &args.state_dir {
        Some(dir) => {
            let cfg = inputs::load_node_config(config)?;
            let machine = inputs::discover(&cfg, args.sysfs_root.as_deref())?;
            let mut node = topomgr_node::setup::node_state(&cfg, &machine)?;
            let _held = StateDir::open(dir, &mut node, Role::ExportNrt)?;
            let name = topomgr_node::nrt::node_name(&cfg)?;
            topomgr_node::nrt::of_admitter(&name, &machine, node.admitter_mut())?
        }
        None => {
            let answer = args.socket.client(config)?.nrt();
            return super::client::finish(answer, |v| print(v, args.output));
        }
    };
    print(&object, args.output)?;
    Ok(ExitCode::SUCCESS)
}

/// The configured node name, or the host name.
fn print(object: &NodeResourceTopology, format: Format) -> anyhow::Result<()> {
    let text = match format {
        Format::Json => serde_json::to_string_pretty(object)? + "\n",
        Format::Yaml => serde_saphyr::to_string(object).context("writing YAML")?,
    };
    print!("{text}");
    Ok(())
}
