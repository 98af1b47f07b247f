//! The CLI side of the daemon: `topomgr health`, `pods`, `release`,
//! `attach`, and `admit --socket`. Each prints the daemon's JSON (or a table); a request
//! the daemon refuses prints its message and exits 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use topomgr_client::{ClientError, Daemon};
use topomgr_contract::api::{
    Admission, Admissions, Attached, Attachments, Health, HealthStatus, NriHealth, PodList,
};
use topomgr_manifest::STDIN_PATH;
use topomgr_node::locks::lock_holder::Role;
use topomgr_node::persist::state_dir::StateDir;
use topomgr_node::state::{pod_list, NodeState};

use super::print::{print_json, print_table};
use super::{inputs, Output};

/// `--socket PATH` (default: the configured `[daemon] socket`).
#[derive(Debug, Args)]
pub struct SocketArg {
    /// The daemon's socket (default: config [daemon] socket, /run/topomgr/topomgr.sock).
    #[arg(long)]
    pub socket: Option<PathBuf>,
}

impl SocketArg {
    /// A client of the socket.
    pub fn client(&self, config: &Path) -> anyhow::Result<Daemon> {
        let path = match &self.socket {
            Some(p) => p.clone(),
            None => inputs::load_config(config)?.daemon.socket,
        };
        Ok(Daemon::new(&path))
    }
}

/// `--state-dir` and `--sysfs-root` of `pods` and `health`: read a state
/// directory in-process instead of asking the daemon.
#[derive(Debug, Args)]
struct StateDirArg {
    /// Read this state directory in-process instead of asking the daemon:
    /// restored as the daemon would restore it, and nothing written (no
    /// daemon may serve it: ask the daemon with --socket then).
    #[arg(long, conflicts_with = "socket")]
    state_dir: Option<PathBuf>,
    /// sysfs directory to read with --state-dir (default: config sysfs_root).
    #[arg(long, requires = "state_dir")]
    sysfs_root: Option<PathBuf>,
}

/// Arguments of `topomgr pods`.
#[derive(Debug, Args)]
pub struct PodsArgs {
    #[command(flatten)]
    socket: SocketArg,
    #[command(flatten)]
    local: StateDirArg,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "json")]
    output: Output,
}

/// Arguments of `topomgr health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// Wait until the daemon answers, up to SECONDS (default 30): for
    /// scripts that start `topomgr serve` and then talk to it.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "30", conflicts_with = "state_dir")]
    pub(super) wait: Option<u64>,
    #[command(flatten)]
    local: StateDirArg,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "json")]
    output: Output,
}

/// Arguments of `topomgr attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// Pod uid.
    uid: String,
    /// Container name.
    container: String,
    /// The container's cgroup, relative to the cgroup root.
    cgroup_path: String,
}

/// `print` the daemon's answer; when the daemon refused the request,
/// print its message and exit 1.
pub(super) fn finish<T>(
    answer: Result<T, ClientError>,
    print: impl FnOnce(&T) -> anyhow::Result<()>,
) -> anyhow::Result<ExitCode> {
    match answer {
        Ok(value) => {
            print(&value)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(ClientError::Refused {
            status, message, ..
        }) => {
            eprintln!("topomgr: error: daemon answered {status}: {message}");
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(e.into()),
    }
}

/// How often `health --wait` asks again.
const HEALTH_RETRY: Duration = Duration::from_millis(100);

/// `topomgr health [--wait[=SECONDS]]`: print the daemon's `/v1/health`.
/// Exit status 0 when it is `ok` or `degraded`, 1 when it is `failing`
/// (it cannot save its state); with `--wait`, a daemon that does not answer
/// in time is an error (status 2), as is one that does not answer at all
/// without it.
pub fn health(config: &Path, args: HealthArgs) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.local.state_dir {
        let health = health_of_state_dir(config, dir, args.local.sysfs_root.as_deref())?;
        return print_health(&health, args.output);
    }
    let socket = match &args.socket.socket {
        Some(p) => p.clone(),
        None => inputs::load_config(config)?.daemon.socket,
    };
    let health = match args.wait {
        None => Daemon::new(&socket).health(),
        Some(seconds) => {
            let limit = Duration::from_secs(seconds);
            let deadline = Instant::now() + limit;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let answer = Daemon::with_deadline(&socket, left.max(HEALTH_RETRY)).health();
                match answer {
                    Ok(h) => break Ok(h),
                    Err(e @ (ClientError::Refused { .. } | ClientError::BadResponse { .. })) => {
                        break Err(e)
                    }
                    Err(e) if left.is_zero() => {
                        anyhow::bail!(
                            "no daemon answered on {} within {seconds} s (last try: {e}); check that `topomgr serve` is running there (its log says why it stopped), or wait longer with --wait=SECONDS",
                            socket.display()
                        );
                    }
                    Err(_) => std::thread::sleep(HEALTH_RETRY.min(left)),
                }
            }
        }
    };
    // A failing daemon answers 503 with its health: printed, exit status 1.
    match health {
        Ok(h) => print_health(&h, args.output),
        Err(e) => finish(Err::<Health, _>(e), |_| Ok(())),
    }
}

/// Print `health` as `output`; exit status 0 when ok or degraded, 1 when
/// failing.
fn print_health(health: &Health, output: Output) -> anyhow::Result<ExitCode> {
    match output {
        Output::Json => print_json(health)?,
        Output::Table => print!("{}", health_text(health)),
    }
    Ok(match health.status {
        HealthStatus::Ok | HealthStatus::Degraded => ExitCode::SUCCESS,
        HealthStatus::Failing => ExitCode::from(1),
    })
}

/// `health` for people: the status, then one line per note and conflict.
fn health_text(h: &Health) -> String {
    use std::fmt::Write as _;
    let status = match h.status {
        HealthStatus::Ok => "ok",
        HealthStatus::Degraded => "degraded",
        HealthStatus::Failing => "failing",
    };
    let mut out = format!(
        "status: {status}\npods: {}\nexclusive CPUs: {}\nshared pool: {}\n",
        h.pods,
        if h.exclusive_cpus.is_empty() {
            "none".to_owned()
        } else {
            h.exclusive_cpus.to_string()
        },
        if h.shared_pool.is_empty() {
            "none".to_owned()
        } else {
            h.shared_pool.to_string()
        },
    );
    if let Some(f) = &h.failure {
        let _ = writeln!(out, "failure: {f}");
    }
    for n in &h.notes {
        let _ = writeln!(out, "note: {n}");
    }
    for c in &h.conflicts {
        let ids = if c.ids.is_empty() {
            String::new()
        } else {
            format!(" ({})", c.ids.join(", "))
        };
        let _ = writeln!(
            out,
            "conflict: pod {} container {} {} (provider {}): {}{ids}",
            c.pod, c.container, c.resource, c.provider, c.missing
        );
    }
    out
}

/// The node state of the state directory `dir` under the config and the
/// machine as they are now, restored and read under its state lock for
/// `role` (refused while a daemon or command holds it); nothing is written.
fn open_state_dir(
    config: &Path,
    dir: &Path,
    sysfs_root: Option<&Path>,
    role: Role,
) -> anyhow::Result<(NodeState, StateDir)> {
    if !dir.is_dir() {
        anyhow::bail!(
            "no state directory at {}: check the path (topomgr serve, run and admit --state-dir create it)",
            dir.display()
        );
    }
    let cfg = inputs::load_node_config(config)?;
    let machine = inputs::discover(&cfg, sysfs_root)?;
    let mut node = topomgr_node::setup::node_state(&cfg, &machine)?;
    let opened = StateDir::open(dir, &mut node, role)?;
    Ok((node, opened))
}

/// What the daemon's `/v1/health` would say on the state directory `dir`
/// just after its start: the restore's notes (a reboot since, vanished
/// resources, held and unconfigured providers) and every conflict the
/// providers reported, read under the state lock. Nothing is written and
/// no pod is reclaimed.
fn health_of_state_dir(
    config: &Path,
    dir: &Path,
    sysfs_root: Option<&Path>,
) -> anyhow::Result<Health> {
    let (node, opened) = open_state_dir(config, dir, sysfs_root, Role::Health)?;
    Ok(Health::new(
        node.pods().len(),
        node.admitter().ledger().exclusive_cpus().clone(),
        node.shared_pool(),
        opened.restored().notes(node.boot_id()),
        None,
        NriHealth::disabled(),
        node.conflicts().reports(),
    ))
}

/// `topomgr pods`: the daemon's current pods and their allocations, or
/// with `--state-dir` those of a state directory.
pub fn pods(config: &Path, args: PodsArgs) -> anyhow::Result<ExitCode> {
    let print = |list: &PodList| -> anyhow::Result<()> {
        match args.output {
            Output::Json => print_json(list)?,
            Output::Table => print_table(&list.pods, Some(&list.attachments)),
        }
        Ok(())
    };
    if let Some(dir) = &args.local.state_dir {
        print(&pods_of_state_dir(
            config,
            dir,
            args.local.sysfs_root.as_deref(),
        )?)?;
        return Ok(ExitCode::SUCCESS);
    }
    finish(args.socket.client(config)?.pods(), print)
}

/// The pods of the state directory `dir`, as the daemon would list them,
/// read under its state lock (refused while a daemon or command holds it).
fn pods_of_state_dir(
    config: &Path,
    dir: &Path,
    sysfs_root: Option<&Path>,
) -> anyhow::Result<PodList> {
    let (node, _held) = open_state_dir(config, dir, sysfs_root, Role::Pods)?;
    Ok(pod_list(
        node.pods().values(),
        &node.shared_pool(),
        &node.records().attachments,
        &node.records().owners,
    ))
}

/// `topomgr release [--socket PATH] UID`: release in the daemon.
pub fn release(config: &Path, socket: &SocketArg, uid: &str) -> anyhow::Result<ExitCode> {
    finish(socket.client(config)?.release(uid), print_json::<Admission>)
}

/// `topomgr attach UID CONTAINER CGROUP_PATH`.
pub fn attach(config: &Path, args: AttachArgs) -> anyhow::Result<ExitCode> {
    let answer = args
        .socket
        .client(config)?
        .attach(&args.uid, &args.container, &args.cgroup_path);
    finish(answer, print_json::<Attached>)
}

/// `topomgr admit --socket`: check every input locally, then send each to
/// the daemon in order and print the combined answer like in-process admit.
pub fn admit(socket: &Path, inputs: &[String], output: Output) -> anyhow::Result<ExitCode> {
    let mut texts = Vec::with_capacity(inputs.len());
    if inputs.iter().filter(|p| *p == STDIN_PATH).count() > 1 {
        return Err(topomgr_manifest::ManifestError::StdinTwice.into());
    }
    for path in inputs {
        let (text, origin) = topomgr_manifest::read_input(path)?;
        topomgr_manifest::parse_pods(&text, &origin)?;
        texts.push(text);
    }
    let mut client = Daemon::new(socket);
    let mut all = Vec::new();
    for text in &texts {
        match client.admit(text) {
            Ok(answer) => all.extend(answer.pods),
            Err(e) => return finish(Err::<Admissions, _>(e), |_| Ok(())),
        }
    }
    match output {
        Output::Json => print_json(&Admissions {
            pods: all,
            attached: None,
        })?,
        Output::Table => print_table(&all, Some(&Attachments::new())),
    }
    Ok(ExitCode::SUCCESS)
}
