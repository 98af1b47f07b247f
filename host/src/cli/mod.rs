//! Command-line definitions and dispatch (the binary's edge: `anyhow` here only).

mod admit;
mod client;
mod export;
mod inputs;
mod merge;
mod oci_hook;
mod provider;
mod release;
mod run;
mod serve;
mod state;
mod text;
mod topology;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// What `topomgr --version` prints: the host's version and the plugin SDK
/// version and ABI it loads (plugins must be built with an SDK of the same
/// `0.MINOR` and ABI).
pub static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} (plugin SDK {}, plugin ABI {})",
        env!("CARGO_PKG_VERSION"),
        topomgr_sdk::SDK_VERSION,
        topomgr_sdk::SDK_ABI_VERSION
    )
});

/// topomgr: a node-level NUMA topology manager with kubelet Topology Manager semantics.
#[derive(Debug, Parser)]
#[command(name = "topomgr", version = VERSION.as_str(), about)]
pub struct Cli {
    /// Configuration file (drop-ins are read from its plugins.d/).
    #[arg(long, global = true, default_value = topomgr_node::config::DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,
    /// More logging on stderr (-v info, -vv debug, -vvv trace; RUST_LOG overrides).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Stable JSON (the documented contract).
    Json,
    /// A table for people.
    Table,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// What-if merge: read providers' hints as JSON on stdin, print the merged hint.
    Merge,
    /// Show what discovery finds on this machine (or a recorded sysfs tree).
    Topology {
        /// sysfs directory to read (default: config sysfs_root, /sys).
        #[arg(long)]
        sysfs_root: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value = "json")]
        output: Output,
    },
    /// Admit Kubernetes Pod manifests in order through every enabled provider.
    Admit(admit::AdmitArgs),
    /// Show the decision trace of admitting pods: each provider's hints, the merge, the verdict.
    Explain(admit::ExplainArgs),
    /// Call one loaded provider directly.
    Provider(provider::ProviderArgs),
    /// Run a command NUMA-aligned: admit a one-container Guaranteed pod,
    /// start the command in its cgroup with the cpuset applied, release when it ends
    /// (through the daemon when one owns the node).
    Run(run::RunArgs),
    /// Run the daemon: the HTTP/JSON API on a Unix socket (docs/api.md).
    Serve(serve::ServeArgs),
    /// List the running daemon's pods and their allocations.
    Pods(client::PodsArgs),
    /// Release a pod in the running daemon, or with --state-dir in a state directory.
    Release(release::ReleaseArgs),
    /// Apply a container's cpuset/mems to its cgroup through the running daemon.
    Attach(client::AttachArgs),
    /// Export this node's state for Kubernetes (`export nrt`: the NodeResourceTopology object).
    Export(export::ExportArgs),
    /// The OCI runtime hook: place a container through the daemon at
    /// createRuntime, release it at poststop (the container's state on stdin).
    OciHook(oci_hook::OciHookArgs),
    /// Check or recover a state directory (`state check`, `state recover`).
    State(state::StateArgs),
}

/// Install the stderr logger.
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// Give SIGPIPE its default action (end the process quietly, status 141 in
/// a shell) for commands that print: `topomgr topology | head -c 10` must
/// not panic on a closed stdout.
fn quiet_on_closed_stdout() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler
    // code; it happens before any thread of ours is started.
    let reset = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        )
    };
    if let Err(e) = reset {
        tracing::debug!(error = %e, "cannot restore SIGPIPE's default action");
    }
}

/// Run one command.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // `serve` and `run` print nothing to stdout; a SIGPIPE must not end
    // the daemon, nor a run (its command would die with it).
    if !matches!(cli.command, Command::Serve(_) | Command::Run(_)) {
        quiet_on_closed_stdout();
    }
    match cli.command {
        Command::Merge => merge::run(),
        Command::Topology { sysfs_root, output } => {
            topology::run(&cli.config, sysfs_root.as_deref(), output)
        }
        Command::Admit(args) => admit::run(&cli.config, args),
        Command::Explain(args) => admit::explain(&cli.config, args),
        Command::Provider(args) => provider::run(&cli.config, args),
        Command::Run(args) => run::run(&cli.config, args),
        Command::Serve(args) => serve::run(&cli.config, args),
        Command::Pods(args) => client::pods(&cli.config, args),
        Command::Release(args) => release::run(&cli.config, args),
        Command::Attach(args) => client::attach(&cli.config, args),
        Command::Export(args) => export::run(&cli.config, args),
        Command::OciHook(args) => oci_hook::run(&cli.config, args),
        Command::State(args) => state::run(args),
    }
}
