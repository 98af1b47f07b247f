//! `topomgr run [--cpus N] [--memory Q] [--resource NAME=N]... -- CMD ARGS`.
//!
//! 1. Build a one-container Guaranteed pod (requests = limits) from the
//!    options; its uid is `run-<pid>-<nanoseconds>`, its container `main`.
//! 2. Under the state directory's exclusive lock: restore, admit through
//!    every configured provider, save; create the cgroup
//!    `topomgr/<uid>/main` under `cgroup_root`, write its cpuset, rewrite the
//!    shared-pool containers' cpusets. A rejected pod: its reason on stderr,
//!    exit status 1, CMD never runs.
//! 3. Start CMD (with the allocation's environment) moved into the cgroup
//!    before it execs; forward SIGINT/SIGTERM/SIGHUP to it (signals the
//!    terminal already delivered to the whole process group are not sent a
//!    second time); wait.
//! 4. Under the lock: restore, release, save; remove the cgroup; rewrite the
//!    shared pool. Exit with CMD's status (128 + signal when it was killed).
//!
//! A signal that arrives before CMD started stops the run: everything is
//! released and removed and topomgr exits with 128 + signal.

use std::ffi::{CStr, CString, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::Path;
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Args;
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::origin::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use topomgr_cgroup::{Cgroup, CgroupManager, CgroupPath};
use topomgr_engine::admission::AdmitResult;
use topomgr_manifest::quantity::parse_resource_amount;
use topomgr_node::config::HostConfig;
use topomgr_node::node_state::NodeState;
use topomgr_node::owner::Owner;
use topomgr_node::state_dir::StateDir;
use topomgr_sdk::{ContainerView, PodView, QosClass, ResourceList};
use tracing::{debug, info, warn};

use super::host;
use super::text::field;

/// The container name of a `topomgr run` pod.
pub const CONTAINER: &str = "main";

/// Exit status when the pod is rejected.
const REJECTED: u8 = 1;

/// Arguments of `topomgr run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// CPUs to request (a Kubernetes quantity: 2, 1.5, 500m). Integer counts
    /// get exclusive CPUs from a static CPU provider.
    #[arg(long, value_name = "N")]
    cpus: Option<String>,
    /// Memory to request (a Kubernetes quantity: 512Mi, 16Gi).
    #[arg(long, value_name = "Q")]
    memory: Option<String>,
    /// Another resource (hugepages-1Gi=2Gi, nvidia.com/gpu=2, ...); repeatable.
    #[arg(long = "resource", value_name = "NAME=N")]
    resources: Vec<String>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// The pod's requests (= limits) from the options; zero amounts are left out.
fn requests(args: &RunArgs) -> anyhow::Result<ResourceList> {
    let mut list = ResourceList::new();
    let mut add = |name: &str, text: &str, option: &str| -> anyhow::Result<()> {
        if list.contains_key(name) {
            bail!("{option}: resource {name:?} is requested twice (check --cpus, --memory and --resource)");
        }
        let amount = parse_resource_amount(name, text)
            .with_context(|| format!("{option}: invalid amount {text:?} for {name}"))?;
        if amount > 0 {
            list.insert(name.to_string(), amount);
        }
        Ok(())
    };
    if let Some(c) = &args.cpus {
        add("cpu", c, "--cpus")?;
    }
    if let Some(m) = &args.memory {
        add("memory", m, "--memory")?;
    }
    for r in &args.resources {
        let Some((name, amount)) = r.split_once('=') else {
            bail!("--resource {r:?}: expected NAME=N (for example nvidia.com/gpu=2)");
        };
        if name.trim().is_empty() {
            bail!("--resource {r:?}: the resource name is empty; write NAME=N");
        }
        add(name.trim(), amount.trim(), "--resource")?;
    }
    Ok(list)
}

/// The one-container Guaranteed pod of a run.
fn build_pod(args: &RunArgs) -> anyhow::Result<PodView> {
    let resources = requests(args)?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let uid = format!("run-{}-{nanos}", std::process::id());
    Ok(
        PodView::new(uid.clone(), uid, "default", QosClass::Guaranteed).with_containers(vec![
            ContainerView::new(CONTAINER)
                .with_requests(resources.clone())
                .with_limits(resources),
        ]),
    )
}

/// Signals forwarded to CMD.
const FORWARDED: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

#[derive(Debug, Default)]
struct ForwardState {
    /// CMD's pid once started.
    child: Option<i32>,
    /// CMD has exited (not reaped yet, or reaped): nothing more is sent.
    exited: bool,
    /// The first signal that arrived before CMD started.
    early: Option<i32>,
}

/// Catches SIGINT/SIGTERM/SIGHUP for the whole run and forwards them to CMD.
struct Forwarder {
    state: Arc<Mutex<ForwardState>>,
    handle: signal_hook::iterator::Handle,
    thread: Option<JoinHandle<()>>,
}

fn lock_state(m: &Mutex<ForwardState>) -> MutexGuard<'_, ForwardState> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Forwarder {
    fn install() -> anyhow::Result<Self> {
        let mut signals = SignalsInfo::<WithOrigin>::new(FORWARDED)
            .context("cannot install handlers for SIGINT, SIGTERM and SIGHUP")?;
        let handle = signals.handle();
        let state = Arc::new(Mutex::new(ForwardState::default()));
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("signal-forwarder".to_string())
            .spawn(move || {
                for origin in signals.forever() {
                    let sig = origin.signal;
                    let mut st = lock_state(&shared);
                    match (st.child, st.exited) {
                        (Some(pid), false) => {
                            if origin.cause == Cause::Kernel {
                                // The terminal sent it to the whole foreground
                                // process group: CMD has it already.
                                debug!(signal = sig, pid, "signal from the terminal; CMD received it too");
                                continue;
                            }
                            match Signal::try_from(sig) {
                                Ok(s) => {
                                    info!(signal = %s, pid, "forwarding signal to CMD");
                                    if let Err(e) = kill(Pid::from_raw(pid), s) {
                                        warn!(signal = %s, pid, error = %e, "cannot forward signal");
                                    }
                                }
                                Err(e) => warn!(signal = sig, error = %e, "unknown signal"),
                            }
                        }
                        (None, _) => {
                            info!(signal = sig, "signal before CMD started; the run stops");
                            st.early.get_or_insert(sig);
                        }
                        (Some(_), true) => {
                            debug!(signal = sig, "signal after CMD exited; cleaning up anyway");
                        }
                    }
                }
            })
            .context("cannot start the signal forwarding thread")?;
        Ok(Forwarder {
            state,
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                warn!("the signal forwarding thread panicked");
            }
        }
    }
}

/// What the run holds and must give back.
struct Session {
    cfg: HostConfig,
    node: NodeState,
    cgroups: CgroupManager,
    uid: String,
    cgroup: Option<Cgroup>,
}

/// What the end of a run did with its pod.
#[derive(Default)]
struct Teardown {
    /// Steps that failed.
    errors: Vec<String>,
    /// Set when the pod stays held because processes remain in its cgroup.
    kept: Option<Vec<u32>>,
}

impl Session {
    /// Under the lock: restore, reclaim pods of dead runs, admit, record
    /// this process as the owner, create the cgroup and attach the
    /// container to it (the shared pool shrinks first), save.
    fn admit(&mut self, pod: &PodView) -> anyhow::Result<AdmitResult> {
        let mut held = StateDir::open(&self.cfg.state_dir, &mut self.node)?;
        held.reclaim(&mut self.node);
        let result = self.node.admit(pod);
        if !result.admitted {
            held.save(&mut self.node)?;
            return Ok(result);
        }
        let owner = Owner::current(self.node.boot_id())
            .context("cannot read this process's start time from /proc/self/stat")?;
        self.node.set_owner(&self.uid, owner);
        let path = CgroupPath::container(&self.uid, CONTAINER)?;
        let cg = self.cgroups.create(&path)?;
        self.cgroup = Some(cg.clone());
        let attached = self
            .node
            .attach(&self.uid, CONTAINER, &path.as_path().to_string_lossy())?;
        info!(cgroup = %cg.dir().display(), cpus = %attached.cpus, mems = %attached.mems, "cgroup set up");
        held.save(&mut self.node)?;
        Ok(result)
    }

    /// Under the lock: restore; if processes are left in the cgroup keep
    /// everything held; else remove the cgroup, release the pod, save and
    /// give the CPUs back to the shared pool.
    fn teardown(&mut self, admitted: bool) -> Teardown {
        let mut out = Teardown::default();
        if admitted {
            match StateDir::open(&self.cfg.state_dir, &mut self.node) {
                Err(e) => out.errors.push(format!("{:#}", anyhow::Error::from(e))),
                Ok(mut held) => {
                    if self.node.pods().contains_key(&self.uid) {
                        match self.node.processes(&self.uid) {
                            Some(pids) if pids.is_empty() => {
                                self.node.remove_cgroups(&self.uid);
                                if let Err(e) = self.node.release(&self.uid) {
                                    out.errors.push(format!("releasing the pod: {e}"));
                                }
                                if let Err(e) = held.save(&mut self.node) {
                                    out.errors.push(format!("{:#}", anyhow::Error::from(e)));
                                }
                            }
                            Some(pids) => {
                                out.kept = Some(pids);
                                return out;
                            }
                            None => {
                                out.errors.push(format!(
                                    "cannot read the processes in the cgroup of pod {}; it stays held until a later run or `topomgr release --state-dir` finds it empty",
                                    self.uid
                                ));
                                return out;
                            }
                        }
                    }
                    self.node.settle_pool();
                }
            }
        }
        if let Some(cg) = self.cgroup.take() {
            if cg.dir().exists() {
                if let Err(e) = self.cgroups.remove(&cg, 1) {
                    out.errors.push(e.to_string());
                }
            }
        }
        out
    }
}

/// Write this process's pid into `procs`. Runs in the forked child before
/// exec: only async-signal-safe calls, no allocation.
fn join_cgroup(procs: &CStr) -> std::io::Result<()> {
    // SAFETY: getpid has no preconditions and is async-signal-safe.
    let pid = unsafe { libc::getpid() };
    let mut buf = [0u8; 12];
    let mut at = buf.len();
    let mut n = u32::try_from(pid).unwrap_or(0);
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || at == 0 {
            break;
        }
    }
    let digits = &buf[at..];
    // SAFETY: `procs` is a valid NUL-terminated string owned by the caller;
    // open is async-signal-safe.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is open; `digits` is a live stack buffer of that length.
    let written = unsafe { libc::write(fd, digits.as_ptr().cast(), digits.len()) };
    let result = if written < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    };
    // SAFETY: `fd` is open and closed once; close is async-signal-safe.
    unsafe { libc::close(fd) };
    result
}

/// Ask the kernel to SIGKILL this (forked) process when the thread that
/// forked it dies, so a `kill -9` of topomgr does not leave CMD running on
/// CPUs nobody holds any more; fail if `parent` already died. Runs in the
/// forked child before exec: only async-signal-safe calls.
fn die_with_parent(parent: nix::unistd::Pid) -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and changes only
    // this process's attributes; it is async-signal-safe.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The parent may have died between fork and prctl: then nobody would
    // send the signal.
    if nix::unistd::getppid() != parent {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Start CMD moved into `cg` before it execs.
fn spawn_in(cmd_args: &[OsString], cg: &Cgroup, env: &AdmitResult) -> anyhow::Result<Child> {
    let Some((program, rest)) = cmd_args.split_first() else {
        bail!("no command given after --");
    };
    let procs = CString::new(cg.procs_file().as_os_str().as_bytes())
        .with_context(|| format!("cgroup path {} contains a NUL byte", cg.dir().display()))?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    if let Some(c) = env.containers.first() {
        cmd.envs(&c.allocation.env);
    }
    let parent = nix::unistd::getpid();
    // SAFETY: the closure only calls `die_with_parent` and `join_cgroup`,
    // which are async-signal-safe and do not allocate; `procs` and `parent`
    // were made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            die_with_parent(parent)?;
            join_cgroup(&procs)
        });
    }
    Ok(cmd.spawn()?)
}

/// Wait for CMD without reaping it first, so that the forwarder never
/// signals a reused pid; then mark it exited and reap it.
fn wait_child(child: &mut Child, fwd: &Forwarder) -> anyhow::Result<ExitStatus> {
    let pid = Pid::from_raw(i32::try_from(child.id()).context("child pid out of range")?);
    loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Ok(_) => break,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e).context("waiting for the command"),
        }
    }
    lock_state(&fwd.state).exited = true;
    Ok(child.wait()?)
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    }
}

/// Run CMD in an admitted, NUMA-aligned cgroup.
pub fn run(config: &Path, args: RunArgs) -> anyhow::Result<ExitCode> {
    let fwd = Forwarder::install()?;
    let pod = build_pod(&args)?;
    let cfg = host::load_config(config)?;
    let machine = host::discover(&cfg, None)?;
    let cgroups = CgroupManager::detect(&cfg.cgroup_root)
        .context("cannot use cgroup_root for topomgr run")?;
    let node = NodeState::from_config(&cfg, &machine)?;
    let mut session = Session {
        cfg,
        node,
        cgroups,
        uid: pod.uid.clone(),
        cgroup: None,
    };
    let result = match session.admit(&pod) {
        Ok(r) => r,
        Err(e) => {
            let admitted = session.node.pods().contains_key(&pod.uid);
            report_teardown(session.teardown(admitted));
            return Err(e);
        }
    };
    if !result.admitted {
        eprintln!(
            "topomgr: pod rejected: {}: {}",
            field(result.reason.as_deref().unwrap_or("rejected")),
            field(result.message.as_deref().unwrap_or(""))
        );
        let holders = session.node.exclusive_holders();
        if !holders.is_empty() {
            eprintln!(
                "topomgr: CPUs held exclusively by other workloads: {}",
                holders.join("; ")
            );
        }
        return Ok(ExitCode::from(REJECTED));
    }
    let outcome = start_and_wait(&args, &session, &result, &fwd);
    let teardown = session.teardown(true);
    drop(fwd);
    report_teardown(teardown);
    outcome
}

fn start_and_wait(
    args: &RunArgs,
    session: &Session,
    result: &AdmitResult,
    fwd: &Forwarder,
) -> anyhow::Result<ExitCode> {
    let Some(cg) = session.cgroup.as_ref() else {
        bail!("internal: admitted pod {} has no cgroup", session.uid);
    };
    let mut child = {
        let mut st = lock_state(&fwd.state);
        if let Some(sig) = st.early {
            eprintln!("topomgr: signal {sig} before the command started; cleaning up");
            return Ok(ExitCode::from(u8::try_from(128 + sig).unwrap_or(255)));
        }
        let child = match spawn_in(&args.command, cg, result) {
            Ok(c) => c,
            Err(e) => {
                let not_found = e
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound);
                eprintln!(
                    "topomgr: cannot start {:?} in cgroup {}: {e}",
                    args.command
                        .first()
                        .map(|c| c.to_string_lossy())
                        .unwrap_or_default(),
                    cg.dir().display()
                );
                return Ok(ExitCode::from(if not_found { 127 } else { 126 }));
            }
        };
        st.child = i32::try_from(child.id()).ok();
        child
    };
    info!(pid = child.id(), cgroup = %cg.dir().display(), "command started");
    let status = wait_child(&mut child, fwd)?;
    info!(%status, "command finished");
    Ok(ExitCode::from(exit_code(status)))
}

fn report_teardown(t: Teardown) {
    if let Some(pids) = t.kept {
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        info!(pids = %pids.join(","), "processes remain in the cgroup; the pod stays held");
        eprintln!(
            "topomgr: warning: processes {} are still in the command's cgroup; its CPUs stay reserved until they exit (the next topomgr run reclaims them then; topomgr release --state-dir DIR UID releases them now)",
            pids.join(",")
        );
    }
    for e in t.errors {
        warn!(error = %e, "cleanup failed");
        eprintln!("topomgr: error during cleanup: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cpus: Option<&str>, memory: Option<&str>, res: &[&str]) -> RunArgs {
        RunArgs {
            cpus: cpus.map(str::to_string),
            memory: memory.map(str::to_string),
            resources: res.iter().map(|s| s.to_string()).collect(),
            command: vec!["true".into()],
        }
    }

    #[test]
    fn guaranteed_pod_from_options() {
        let pod = build_pod(&args(Some("2"), Some("1Gi"), &["nvidia.com/gpu=1"])).unwrap();
        assert!(pod.uid.starts_with(&format!("run-{}-", std::process::id())));
        assert_eq!(pod.qos, QosClass::Guaranteed);
        let c = &pod.containers[0];
        assert_eq!(c.name, "main");
        let want: ResourceList = [
            ("cpu".to_string(), 2000),
            ("memory".to_string(), 1 << 30),
            ("nvidia.com/gpu".to_string(), 1),
        ]
        .into_iter()
        .collect();
        assert_eq!(c.requests, want);
        assert_eq!(c.limits, want);
    }

    #[test]
    fn bad_options_are_refused() {
        let msg = |a: RunArgs| format!("{:#}", build_pod(&a).unwrap_err());
        assert_eq!(
            msg(args(None, None, &["gpu"])),
            "--resource \"gpu\": expected NAME=N (for example nvidia.com/gpu=2)"
        );
        assert_eq!(
            msg(args(Some("1"), None, &["cpu=2"])),
            "--resource: resource \"cpu\" is requested twice (check --cpus, --memory and --resource)"
        );
        assert_eq!(
            msg(args(None, None, &["=2"])),
            "--resource \"=2\": the resource name is empty; write NAME=N"
        );
        assert!(
            msg(args(Some("x"), None, &[])).starts_with("--cpus: invalid amount \"x\" for cpu: ")
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
    }
}
