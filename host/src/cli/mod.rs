//! Command-line definitions and dispatch (the binary's edge: `anyhow` here only).

mod admit;
mod client;
mod export;
mod inputs;
mod merge;
mod oci_hook;
mod print;
mod provider;
mod release;
mod run;
mod run_local;
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
    #[arg(long, global = true, default_value = topomgr_node::setup::config::DEFAULT_CONFIG_PATH)]
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
    #[command(long_about = MERGE_HELP)]
    Merge,
    /// Show what discovery finds on this machine (or a recorded sysfs tree).
    Topology {
        /// sysfs directory to read (default: config sysfs_root, /sys).
        #[arg(long)]
        sysfs_root: Option<PathBuf>,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "json")]
        output: Output,
    },
    /// Admit Kubernetes Pod manifests in order through every enabled provider.
    #[command(long_about = ADMIT_HELP)]
    Admit(admit::AdmitArgs),
    /// Show the decision trace of admitting pods: each provider's hints, the merge, the verdict.
    Explain(admit::ExplainArgs),
    /// Call one loaded provider directly.
    Provider(provider::ProviderArgs),
    /// Run a command NUMA-aligned: admit a one-container Guaranteed pod,
    /// start the command in its cgroup with the cpuset applied, release when it ends
    /// (through the daemon when one owns the node).
    #[command(long_about = RUN_HELP)]
    Run(run::RunArgs),
    /// Run the daemon: the HTTP/JSON API on a Unix socket (docs/api.md).
    Serve(serve::ServeArgs),
    /// Show the running daemon's health (`GET /v1/health`); with --wait,
    /// wait until it answers; or with --state-dir what a daemon would
    /// report on a state directory (conflicts included). Exit status 0: ok
    /// or degraded; 1: failing; 2: no answer.
    Health(client::HealthArgs),
    /// List the running daemon's pods and their allocations, or with
    /// --state-dir those of a state directory.
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

/// `topomgr merge --help`: the input it reads.
const MERGE_HELP: &str = "\
What-if merge: read providers' hints as JSON on stdin, print the merged hint.

Input (one JSON object; unknown fields are refused):
  numa_nodes  the machine's NUMA node ids, e.g. [0, 1]
  distances   null, or each node id (a string) to its distance row in
              numa_nodes order, e.g. {\"0\": [10, 20], \"1\": [20, 10]};
              every policy but none needs it when the option
              prefer-closest-numa-nodes is \"true\"
  policy      none, best-effort, restricted or single-numa-node
  options     policy options as strings (default {}), e.g.
              {\"prefer-closest-numa-nodes\": \"true\", \"max-allowable-numa-nodes\": \"8\"}
  providers   one entry per provider: null (no preference for anything), or
              resource name -> its hints:
                null        no preference for this resource
                []          cannot be satisfied on any NUMA combination
                [{\"affinity\": [0], \"preferred\": true}, ...]
                            hints one by one (affinity null: any node)
                {\"minimal\": [[0], [1]], \"within\": [[0, 1], [1]], \"preferred_width\": 1}
                            compact form: every mask containing a minimal
                            mask and inside the within mask of the same
                            index (within, one per minimal mask, may be left
                            out: no upper bound), preferred when it has
                            preferred_width nodes

Example:
  echo '{\"numa_nodes\": [0, 1], \"distances\": {\"0\": [10, 20], \"1\": [20, 10]},
         \"policy\": \"best-effort\", \"options\": {},
         \"providers\": [{\"cpu\": [{\"affinity\": [0], \"preferred\": true}]}, null]}' \\
    | topomgr merge
  prints {\"affinity\":[0],\"preferred\":true,\"admit\":true}

Output: {\"affinity\": NODES or null, \"preferred\": BOOL, \"admit\": BOOL}.
Exit status 0 when it printed a decision (admit true or false), 2 on bad input.";

/// `topomgr run --help`: what it needs.
const RUN_HELP: &str = "\
Run a command NUMA-aligned: admit a one-container Guaranteed pod, start the
command in its cgroup with the cpuset applied, release when it ends.

Needs root and a cgroup hierarchy with the cpuset controller (cgroup v1's
cpuset, or v2 with cpuset enabled) at the config's cgroup_root
(/sys/fs/cgroup): the command runs in a cgroup made under it.

One node has one owner. When a daemon (topomgr serve) owns this machine's
cpusets, the run goes through it (its socket: --socket or the config's
[daemon] socket); otherwise the run takes the node lock itself and keeps its
pods in the config's state_dir under the state lock, and is refused while
another state directory or command owns the node, naming it.

The exit status is the command's (128+N when a signal N ended it; 127 when it
is not found, 126 when it cannot be started); 1 when the pod is rejected; 2 on
bad options, config or an unusable machine. Processes
the command leaves behind in its cgroup keep the CPUs reserved; the warning
then prints the topomgr release command that frees them.";

/// `topomgr admit --help`: its input and exit status.
const ADMIT_HELP: &str = "\
Admit Kubernetes Pod manifests in order through every enabled provider.

Input: files (or - for stdin) of Pod manifests in YAML or JSON, several
documents per file or a List (kubectl get pods -o yaml); unknown fields are
refused with their path, as kubectl's strict validation. Without --state-dir
every run starts from an empty node; with it, the admitted pods are restored
first and saved after (not with --dry-run). With --socket the pods go to the
running daemon instead.

Output: {\"pods\": [...]} (-o json) or a table (-o table), one entry per pod
with admitted, reason, message and each container's CPUs, memory nodes and
devices. Exit status 0 when every input was read, whether the pods were
admitted or rejected (see \"admitted\"); 1 when the daemon refuses a request;
2 on unusable input.";

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
        Command::Health(args) => client::health(&cli.config, args),
        Command::Pods(args) => client::pods(&cli.config, args),
        Command::Release(args) => release::run(&cli.config, args),
        Command::Attach(args) => client::attach(&cli.config, args),
        Command::Export(args) => export::run(&cli.config, args),
        Command::OciHook(args) => oci_hook::run(&cli.config, args),
        Command::State(args) => state::run(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every command with an output format takes it as `-o` and `--output`.
    #[test]
    fn every_output_format_is_dash_o() {
        fn walk(cmd: &clap::Command, path: &str, found: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                if arg.get_id() == "output" {
                    assert_eq!(arg.get_short(), Some('o'), "{path}");
                    assert_eq!(arg.get_long(), Some("output"), "{path}");
                    found.push(path.to_owned());
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), found);
            }
        }
        let mut found = Vec::new();
        walk(&Cli::command(), "topomgr", &mut found);
        assert_eq!(
            found,
            [
                "topomgr topology",
                "topomgr admit",
                "topomgr explain",
                "topomgr health",
                "topomgr pods",
                "topomgr export nrt",
            ]
        );
        for args in [
            &["topomgr", "topology", "-o", "table"][..],
            &["topomgr", "admit", "-o", "table", "pod.yaml"],
            &["topomgr", "explain", "-o", "json", "pod.yaml"],
            &["topomgr", "health", "-o", "table"],
            &["topomgr", "pods", "-o", "table"],
            &["topomgr", "export", "nrt", "-o", "yaml"],
        ] {
            Cli::try_parse_from(args).unwrap();
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `health --wait` alone waits 30 s; `--wait=N` and `--wait N` N s.
    #[test]
    fn health_wait_takes_an_optional_number() {
        let wait = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Health(h) => h.wait,
            other => panic!("{other:?}"),
        };
        assert_eq!(wait(&["topomgr", "health"]), None);
        assert_eq!(wait(&["topomgr", "health", "--wait"]), Some(30));
        assert_eq!(wait(&["topomgr", "health", "--wait=5"]), Some(5));
        assert_eq!(wait(&["topomgr", "health", "--wait", "7"]), Some(7));
    }

    /// The long help of merge, run and admit says what they need.
    #[test]
    fn long_help_describes_input_and_requirements() {
        let help = |name: &str| {
            Cli::command()
                .find_subcommand_mut(name)
                .unwrap()
                .render_long_help()
                .to_string()
        };
        let merge = help("merge");
        for want in [
            "distances",
            "options",
            "null (no preference for anything)",
            "preferred_width",
            "Exit status",
        ] {
            assert!(merge.contains(want), "{want} in {merge}");
        }
        let run = help("run");
        for want in ["root", "cpuset controller", "node lock", "state lock"] {
            assert!(run.contains(want), "{want} in {run}");
        }
        let admit = help("admit");
        for want in [
            "YAML or JSON",
            "List",
            "unknown fields are\nrefused",
            "Exit status 0",
        ] {
            assert!(admit.contains(want), "{want} in {admit}");
        }
    }
}
