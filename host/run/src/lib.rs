//! `topomgr run [--cpus N] [--memory Q] [--resource NAME=N]... -- CMD ARGS`:
//! a command as a one-container Guaranteed pod. The binary parses the
//! options and prints; this crate does the rest.
//!
//! 1. Build a one-container Guaranteed pod (requests = limits) from the
//!    options ([`pod`]); its uid is `run-<pid>-<nanoseconds>`, its container
//!    `main`.
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
//!
//! [`Signals::install`] comes first (before anything is admitted), then
//! [`Run::new`], [`Run::admit`], [`Run::start_and_wait`] and, whatever
//! happened, [`Run::teardown`].

use std::ffi::{CStr, CString, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::origin::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use topomgr_cgroup::{Cgroup, CgroupError, CgroupManager, CgroupPath};
use topomgr_engine::admission::AdmitResult;
use topomgr_node::config::HostConfig;
use topomgr_node::node_state::{AttachError, NodeState};
use topomgr_node::pod_owner::Owner;
use topomgr_node::setup::SetupError;
use topomgr_node::state_dir::{StateDir, StateDirError};
use topomgr_sdk::{ContainerView, Machine, PodView, QosClass, ResourceList};
use tracing::{debug, info, warn};

/// The container name of a `topomgr run` pod.
pub(crate) const CONTAINER: &str = "main";

/// Why a run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The signal handlers could not be installed.
    #[error("cannot install handlers for SIGINT, SIGTERM and SIGHUP")]
    Signals(#[source] std::io::Error),
    /// The configuration could not be turned into providers and a policy.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The signal forwarding thread could not be started.
    #[error("cannot start the signal forwarding thread")]
    ForwarderThread(#[source] std::io::Error),
    /// No cgroup hierarchy to run in.
    #[error("cannot use cgroup_root for topomgr run")]
    CgroupRoot(#[source] CgroupError),
    /// The state directory could not be opened or saved.
    #[error(transparent)]
    State(#[from] StateDirError),
    /// This process's start time (part of its owner record) is unreadable.
    #[error("cannot read this process's start time from /proc/self/stat")]
    OwnerStartTime,
    /// The pod's cgroup could not be made.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The container could not be attached to its cgroup.
    #[error(transparent)]
    Attach(#[from] AttachError),
    /// The admitted pod has no cgroup (a bug).
    #[error("internal: admitted pod {0} has no cgroup")]
    NoCgroup(String),
    /// No command to run.
    #[error("no command given after --")]
    NoCommand,
    /// The cgroup's path cannot be passed to the kernel.
    #[error("cgroup path {} contains a NUL byte", .0.display())]
    NulInCgroupPath(PathBuf),
    /// The command could not be started.
    #[error(transparent)]
    Spawn(std::io::Error),
    /// The command's pid does not fit a pid.
    #[error("child pid out of range")]
    PidOutOfRange,
    /// Waiting for the command failed.
    #[error("waiting for the command")]
    Wait(#[source] Errno),
    /// Reaping the command failed.
    #[error(transparent)]
    Reap(std::io::Error),
}

/// `e` and its causes, joined by `: ` (as the binary prints errors).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The one-container Guaranteed pod of a run requesting `resources`
/// (requests = limits).
pub fn pod(resources: ResourceList) -> PodView {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let uid = format!("run-{}-{nanos}", std::process::id());
    PodView::new(uid.clone(), uid, "default", QosClass::Guaranteed).with_containers(vec![
        ContainerView::new(CONTAINER)
            .with_requests(resources.clone())
            .with_limits(resources),
    ])
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

/// Catches SIGINT/SIGTERM/SIGHUP for the whole run and forwards them to
/// CMD once it runs; one that arrives before stops the run. Dropping it
/// gives the signals their previous handling back.
pub struct Signals {
    state: Arc<Mutex<ForwardState>>,
    handle: signal_hook::iterator::Handle,
    thread: Option<JoinHandle<()>>,
}

fn lock_state(m: &Mutex<ForwardState>) -> MutexGuard<'_, ForwardState> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Signals {
    /// Start catching the signals.
    pub fn install() -> Result<Self, RunError> {
        let mut signals = SignalsInfo::<WithOrigin>::new(FORWARDED).map_err(RunError::Signals)?;
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
            .map_err(RunError::ForwarderThread)?;
        Ok(Signals {
            state,
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for Signals {
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
pub struct Run {
    cfg: HostConfig,
    node: NodeState,
    cgroups: CgroupManager,
    uid: String,
    cgroup: Option<Cgroup>,
}

/// What the end of a run did with its pod.
#[derive(Debug, Default)]
pub struct Teardown {
    /// Steps that failed.
    pub errors: Vec<String>,
    /// Set when the pod stays held because processes remain in its cgroup.
    pub kept: Option<Vec<u32>>,
}

/// How the command ended.
#[derive(Debug)]
pub enum Ended {
    /// A signal arrived before the command started; it was not started.
    SignalBeforeStart(i32),
    /// The command could not be started in `cgroup`.
    NotStarted {
        /// Why.
        error: RunError,
        /// The cgroup's directory.
        cgroup: PathBuf,
    },
    /// The command ran and ended with this status.
    Exited(ExitStatus),
}

impl Ended {
    /// The exit status of `topomgr run`: CMD's (128 + signal when it was
    /// killed), 128 + signal for one before it started, 127 when CMD is not
    /// found, 126 when it cannot be started otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Ended::SignalBeforeStart(sig) => u8::try_from(128 + sig).unwrap_or(255),
            Ended::NotStarted {
                error: RunError::Spawn(io),
                ..
            } if io.kind() == std::io::ErrorKind::NotFound => 127,
            Ended::NotStarted { .. } => 126,
            Ended::Exited(status) => exit_code(*status),
        }
    }
}

impl Run {
    /// A run of `pod` on `machine` as `cfg` configures it: the cgroup
    /// hierarchy under its `cgroup_root`, every provider it enables (the
    /// state is restored when the pod is admitted).
    pub fn new(cfg: HostConfig, machine: &Machine, pod: &PodView) -> Result<Run, RunError> {
        let cgroups = CgroupManager::detect(&cfg.cgroup_root).map_err(RunError::CgroupRoot)?;
        let node = NodeState::from_config(&cfg, machine)?;
        Ok(Run {
            cfg,
            node,
            cgroups,
            uid: pod.uid.clone(),
            cgroup: None,
        })
    }

    /// The holders of exclusive CPUs, for a rejection's message
    /// ([`NodeState::exclusive_holders`]).
    pub fn exclusive_holders(&mut self) -> Vec<String> {
        self.node.exclusive_holders()
    }

    /// Under the lock: restore, reclaim pods of dead runs, admit, record
    /// this process as the owner, create the cgroup and attach the
    /// container to it (the shared pool shrinks first), save.
    pub fn admit(&mut self, pod: &PodView) -> Result<AdmitResult, RunError> {
        let mut held = StateDir::open(&self.cfg.state_dir, &mut self.node)?;
        held.reclaim(&mut self.node);
        let result = self.node.admit(pod);
        if !result.admitted {
            held.save(&mut self.node)?;
            return Ok(result);
        }
        let owner = Owner::current(self.node.boot_id()).ok_or(RunError::OwnerStartTime)?;
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
    /// give the CPUs back to the shared pool. Call it whatever happened
    /// after [`Run::new`] (it does only what is needed).
    pub fn teardown(mut self) -> Teardown {
        let admitted = self.node.pods().contains_key(&self.uid);
        let mut out = Teardown::default();
        if admitted {
            match StateDir::open(&self.cfg.state_dir, &mut self.node) {
                Err(e) => out.errors.push(chain(&e)),
                Ok(mut held) => {
                    if self.node.pods().contains_key(&self.uid) {
                        match self.node.processes(&self.uid) {
                            Some(pids) if pids.is_empty() => {
                                self.node.remove_cgroups(&self.uid);
                                if let Err(e) = self.node.release(&self.uid) {
                                    out.errors.push(format!("releasing the pod: {e}"));
                                }
                                if let Err(e) = held.save(&mut self.node) {
                                    out.errors.push(chain(&e));
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
fn spawn_in(cmd_args: &[OsString], cg: &Cgroup, env: &AdmitResult) -> Result<Child, RunError> {
    let Some((program, rest)) = cmd_args.split_first() else {
        return Err(RunError::NoCommand);
    };
    let procs = CString::new(cg.procs_file().as_os_str().as_bytes())
        .map_err(|_| RunError::NulInCgroupPath(cg.dir().to_path_buf()))?;
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
    cmd.spawn().map_err(RunError::Spawn)
}

/// Wait for CMD without reaping it first, so that the forwarder never
/// signals a reused pid; then mark it exited and reap it.
fn wait_child(child: &mut Child, fwd: &Signals) -> Result<ExitStatus, RunError> {
    let pid = Pid::from_raw(i32::try_from(child.id()).map_err(|_| RunError::PidOutOfRange)?);
    loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Ok(_) => break,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(RunError::Wait(e)),
        }
    }
    lock_state(&fwd.state).exited = true;
    child.wait().map_err(RunError::Reap)
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    }
}

impl Run {
    /// Start CMD (with the allocation's environment of `result`) in the
    /// pod's cgroup, unless a signal came first, and wait for it.
    pub fn start_and_wait(
        &self,
        command: &[OsString],
        result: &AdmitResult,
        signals: &Signals,
    ) -> Result<Ended, RunError> {
        let Some(cg) = self.cgroup.as_ref() else {
            return Err(RunError::NoCgroup(self.uid.clone()));
        };
        let mut child = {
            let mut st = lock_state(&signals.state);
            if let Some(sig) = st.early {
                return Ok(Ended::SignalBeforeStart(sig));
            }
            let child = match spawn_in(command, cg, result) {
                Ok(c) => c,
                Err(error) => {
                    return Ok(Ended::NotStarted {
                        error,
                        cgroup: cg.dir().to_path_buf(),
                    })
                }
            };
            st.child = i32::try_from(child.id()).ok();
            child
        };
        info!(pid = child.id(), cgroup = %cg.dir().display(), "command started");
        let status = wait_child(&mut child, signals)?;
        info!(%status, "command finished");
        Ok(Ended::Exited(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
        assert_eq!(Ended::SignalBeforeStart(2).exit_code(), 130);
        let not_started = |kind: std::io::ErrorKind| Ended::NotStarted {
            error: RunError::Spawn(kind.into()),
            cgroup: PathBuf::from("/sys/fs/cgroup/topomgr/u/main"),
        };
        assert_eq!(not_started(std::io::ErrorKind::NotFound).exit_code(), 127);
        assert_eq!(
            not_started(std::io::ErrorKind::PermissionDenied).exit_code(),
            126
        );
    }
}
