//! `topomgr run [--socket PATH] [--cpus N] [--memory Q] [--resource NAME=N]... -- CMD ARGS`:
//! a command as a one-container Guaranteed pod. The binary parses the
//! options and prints; this crate does the rest.
//!
//! One node has one owner ([`topomgr_locks::node_lock`]), and [`through`]
//! asks who it is:
//! - **a daemon** (`--socket PATH`, or the node lock says a daemon serves
//!   the node: then the config's `[daemon] socket`): the daemon admits,
//!   places and releases ([`Run::through_daemon`]); `run` never allocates
//!   on its own beside it (a socket it cannot reach is an error naming it);
//! - **nobody else**: `run` holds the node lock (shared with other runs of
//!   the same state directory) for as long as it runs, and admits, places
//!   and releases itself under the state directory's lock ([`Run::new`]
//!   with a [`LocalPlacement`]: the node state, which the binary builds
//!   and hands in, so that this crate never links the node's plugin
//!   loading and persistence).
//!
//! Either way:
//!
//! 1. Build a one-container Guaranteed pod (requests = limits) from the
//!    options ([`pod`]); its uid is `run-<pid>-<nanoseconds>`, its container
//!    `main`.
//! 2. Admit it with this process as its owner (pid, start time, boot id),
//!    create the cgroup `topomgr/<uid>/main` under `cgroup_root` and have
//!    its cpuset and memory nodes written (by the daemon, or here under the
//!    state lock; the shared-pool containers shrink first). A rejected pod:
//!    its reason on stderr, exit status 1, CMD never runs.
//! 3. Start CMD (with the allocation's environment) moved into the cgroup
//!    before it execs, with a parent-death signal (a `kill -9` of `run`
//!    takes it along, and the pod's owner is then gone: the daemon, or the
//!    next one-shot command, reclaims it); forward SIGINT/SIGTERM/SIGHUP to
//!    it (signals the terminal already delivered to the whole process group
//!    are not sent a second time); wait.
//! 4. If processes are left in the cgroup, keep everything (they still run
//!    on those CPUs); else release the pod, remove the cgroup, and give the
//!    CPUs back to the shared pool. Exit with CMD's status (128 + signal
//!    when it was killed).
//!
//! A signal that arrives before CMD started stops the run: everything is
//! released and removed and topomgr exits with 128 + signal.
//!
//! [`Signals::install`] comes first (before anything is admitted), then
//! [`through`], [`Run::new`] or [`Run::through_daemon`], [`Run::admit`],
//! [`Run::start_and_wait`] and, whatever happened, [`Run::teardown`].

mod command;
mod signals;
mod via_daemon;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use topomgr_cgroup::{Cgroup, CgroupError, CgroupManager};
use topomgr_client::ClientError;
use topomgr_contract::api::Admission;
use topomgr_locks::lock_holder::{Holder, Role};
use topomgr_locks::node_lock::{NodeLock, NodeLockError};
use topomgr_sdk::{ContainerView, PodView, QosClass, ResourceList};
use tracing::info;

use signals::lock_state;
pub use signals::Signals;
use via_daemon::ViaDaemon;

/// The container name of a `topomgr run` pod.
pub const CONTAINER: &str = "main";

/// How long `run` waits for one answer of the daemon.
pub const DAEMON_DEADLINE: Duration = Duration::from_secs(60);

/// Why a run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The signal handlers could not be installed.
    #[error("cannot install handlers for SIGINT, SIGTERM and SIGHUP")]
    Signals(#[source] std::io::Error),
    /// The signal forwarding thread could not be started.
    #[error("cannot start the signal forwarding thread")]
    ForwarderThread(#[source] std::io::Error),
    /// No cgroup hierarchy to run in.
    #[error("cannot use cgroup_root for topomgr run")]
    CgroupRoot(#[source] CgroupError),
    /// The node is owned by someone else (another state directory), or
    /// its lock could not be taken.
    #[error(transparent)]
    NodeLock(Box<NodeLockError>),
    /// The run's own placement ([`LocalPlacement`]) failed: its state
    /// directory, its node state or its cgroup.
    #[error(transparent)]
    Local(LocalError),
    /// This process's start time (part of its owner record) is unreadable.
    #[error("cannot read this process's start time from /proc/self/stat")]
    OwnerStartTime,
    /// The pod's cgroup could not be made.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The daemon that owns the node cannot be reached.
    #[error("{daemon}, which manages this node's cpusets, does not answer at {}: {error}; topomgr run never places a command on its own beside a daemon{}", socket.display(), elsewhere(socket, daemon))]
    Unreachable {
        /// The socket tried.
        socket: PathBuf,
        /// The daemon the node lock names.
        daemon: Box<Holder>,
        /// What went wrong (part of the message).
        error: ClientError,
    },
    /// Talking to the daemon failed.
    #[error(transparent)]
    Client(ClientError),
    /// The daemon refused a request.
    #[error("the topomgr daemon at {} refused {route} ({status}): {message}", socket.display())]
    Refused {
        /// The socket.
        socket: PathBuf,
        /// The request.
        route: String,
        /// Its HTTP status.
        status: u16,
        /// The daemon's message.
        message: String,
    },
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

/// For [`RunError::Unreachable`]: the socket the daemon says it listens
/// on, when that is another.
fn elsewhere(tried: &Path, daemon: &Holder) -> String {
    match daemon.socket.as_deref() {
        Some(s) if s != tried => format!(
            "; it listens on {}: pass --socket {} (or set [daemon] socket to it)",
            s.display(),
            s.display()
        ),
        _ => "; see its log (journalctl -u topomgr), or stop it to run without it".to_owned(),
    }
}

/// What a run needs of the configuration.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The cgroup root the run's cgroup is made under (and whose node lock
    /// says who places it).
    pub cgroup_root: PathBuf,
    /// The state directory a run that places itself uses.
    pub state_dir: PathBuf,
    /// The daemon's socket (`[daemon] socket`), asked when the node lock
    /// says a daemon owns the node.
    pub daemon_socket: PathBuf,
}

/// Why a run's own placement failed: any error of the node state that
/// implements [`LocalPlacement`] (its message and causes are printed as
/// they are).
pub type LocalError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The node state of a run that places itself (nobody else owns the
/// node): implemented by the binary over the node crate, and handed to
/// [`Run::new`]. Each change happens under the state directory's lock:
/// restore, reclaim the pods of dead owners, change, save.
pub trait LocalPlacement {
    /// The state directory.
    fn state_dir(&self) -> &Path;

    /// Who holds exclusive CPUs, one line each, for a rejection's message.
    fn exclusive_holders(&mut self) -> Vec<String>;

    /// Admit `pod` owned by this process; when admitted, create the cgroup
    /// `topomgr/<uid>/`[`CONTAINER`] with `cgroups` (stored in `cgroup` as
    /// soon as it exists, so that teardown removes it), attach the
    /// container to it (the shared pool shrinks first) and save.
    fn admit(
        &mut self,
        pod: &PodView,
        cgroups: &CgroupManager,
        cgroup: &mut Option<Cgroup>,
    ) -> Result<Admission, LocalError>;

    /// If processes are left in the pod's cgroup keep everything held (set
    /// `out.kept`); else remove the cgroups, release the pod, save and give
    /// the CPUs back to the shared pool. Say in `out.release_later` who
    /// releases a kept pod; push what failed to `out.errors`. Whether the
    /// caller may remove the cgroup (nothing is kept).
    fn release(&mut self, uid: &str, out: &mut Teardown) -> bool;
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

/// Who places a run.
#[derive(Debug)]
pub enum Through {
    /// Nobody else owns the node: this run does, holding the node lock
    /// (shared with the other runs of its state directory).
    Itself(NodeLock),
    /// The daemon at `socket`.
    Daemon {
        /// Its socket.
        socket: PathBuf,
        /// The daemon the node lock names (none when it names none: a
        /// daemon at `--socket` serving another cgroup root).
        found: Option<Box<Holder>>,
    },
}

/// Who places a run of `cfg`: the daemon at `socket` when one is given;
/// else, when the node lock says a daemon owns the node, the daemon at
/// `cfg.daemon_socket`; else this run, which then holds the node
/// lock. Another state directory owning the node is refused
/// ([`NodeLockError`]).
///
/// A run through the daemon that owns the node records itself in the node
/// lock as an owner for that daemon's state directory while it runs
/// ([`NodeLock::join`]): should the daemon stop meanwhile, no owner of
/// another state directory gives its CPUs away.
pub fn through(cfg: &RunConfig, socket: Option<&Path>) -> Result<Through, RunError> {
    let lock_error = |e| RunError::NodeLock(Box::new(e));
    let join = |d: &Holder| {
        let me = Holder::current(Role::RunThroughDaemon, &d.state_dir, d.socket.as_deref());
        NodeLock::join(&cfg.cgroup_root, &me).map_err(lock_error)
    };
    if let Some(socket) = socket {
        let found = NodeLock::daemon(&cfg.cgroup_root).map_err(lock_error)?;
        if let Some(d) = &found {
            join(d)?;
        }
        return Ok(Through::Daemon {
            socket: socket.to_path_buf(),
            found: found.map(Box::new),
        });
    }
    let me = Holder::current(Role::Run, &cfg.state_dir, None);
    match NodeLock::acquire(&cfg.cgroup_root, &me) {
        Ok(lock) => Ok(Through::Itself(lock)),
        Err(e) => match e.daemon() {
            Some(d) => {
                info!(daemon = %d, socket = %cfg.daemon_socket.display(), "a daemon owns the node; running through it");
                join(d)?;
                Ok(Through::Daemon {
                    socket: cfg.daemon_socket.clone(),
                    found: Some(Box::new(d.clone())),
                })
            }
            None => Err(lock_error(e)),
        },
    }
}

/// Who admits, places and releases.
enum Placer {
    /// This run, over the node state it was handed; the node lock is held
    /// until the run is dropped (after the node state: fields drop in
    /// order).
    Itself {
        node: Box<dyn LocalPlacement>,
        _lock: NodeLock,
    },
    Daemon(ViaDaemon),
}

/// What the run holds and must give back.
pub struct Run {
    placer: Placer,
    cgroups: CgroupManager,
    cgroup_root: PathBuf,
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
    /// Who releases a kept pod, and how to release it now.
    pub release_later: String,
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
            Ended::Exited(status) => command::exit_code(*status),
        }
    }
}

impl Run {
    /// A run of `pod` placed by itself over `node` (its state directory's
    /// node state), its cgroup under `cfg`'s `cgroup_root`, holding the
    /// node lock `lock` until it ends.
    pub fn new(
        cfg: &RunConfig,
        node: Box<dyn LocalPlacement>,
        pod: &PodView,
        lock: NodeLock,
    ) -> Result<Run, RunError> {
        let cgroups = CgroupManager::detect(&cfg.cgroup_root).map_err(RunError::CgroupRoot)?;
        Ok(Run {
            cgroup_root: cfg.cgroup_root.clone(),
            placer: Placer::Itself { node, _lock: lock },
            cgroups,
            uid: pod.uid.clone(),
            cgroup: None,
        })
    }

    /// A run of `pod` placed by the daemon at `socket` (`found`: the daemon
    /// the node lock named), its cgroup under `cfg`'s `cgroup_root` (the
    /// daemon's: the same config).
    pub fn through_daemon(
        cfg: &RunConfig,
        socket: &Path,
        found: Option<Box<Holder>>,
        pod: &PodView,
    ) -> Result<Run, RunError> {
        let cgroups = CgroupManager::detect(&cfg.cgroup_root).map_err(RunError::CgroupRoot)?;
        Ok(Run {
            cgroup_root: cfg.cgroup_root.clone(),
            placer: Placer::Daemon(ViaDaemon::new(socket, found)),
            cgroups,
            uid: pod.uid.clone(),
            cgroup: None,
        })
    }

    /// Who held the exclusive CPUs, one line each, for a rejection's
    /// message.
    pub fn exclusive_holders(&mut self) -> Vec<String> {
        match &mut self.placer {
            Placer::Itself { node, .. } => node.exclusive_holders(),
            Placer::Daemon(d) => d.exclusive_holders(),
        }
    }

    /// Admit `pod` with this process as its owner; when admitted, create
    /// its cgroup and have the container's cpuset and memory nodes written
    /// to it.
    pub fn admit(&mut self, pod: &PodView) -> Result<Admission, RunError> {
        match &mut self.placer {
            Placer::Itself { node, .. } => node
                .admit(pod, &self.cgroups, &mut self.cgroup)
                .map_err(RunError::Local),
            Placer::Daemon(d) => d.admit(pod, &self.cgroups, &mut self.cgroup),
        }
    }

    /// If processes are left in the cgroup keep everything held; else
    /// release the pod, remove the cgroup and give the CPUs back to the
    /// shared pool. Call it whatever happened after the run was made (it
    /// does only what is needed).
    pub fn teardown(mut self) -> Teardown {
        let mut out = Teardown::default();
        let remove = match &mut self.placer {
            Placer::Itself { node, .. } => node.release(&self.uid, &mut out),
            Placer::Daemon(d) => {
                d.release(&self.uid, &self.cgroups, self.cgroup.as_ref(), &mut out)
            }
        };
        if !remove {
            if let Some(pids) = &out.kept {
                self.leave_behind(pids, &mut out.errors);
            }
            return out;
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

    /// Record the processes left in the pod's cgroup as owners of the node
    /// for the state directory that holds the pod (this run's, or its
    /// daemon's): they keep its CPUs after this run is gone, so nothing of
    /// another state directory may take the node while they live.
    fn leave_behind(&self, pids: &[u32], errors: &mut Vec<String>) {
        let (state_dir, socket) = match &self.placer {
            Placer::Itself { node, .. } => (node.state_dir().to_path_buf(), None),
            Placer::Daemon(d) => match d.daemon() {
                Some(h) => (h.state_dir.clone(), h.socket.clone()),
                None => return,
            },
        };
        for &pid in pids {
            let Some(me) = Holder::process(pid, Role::LeftBehind, &state_dir, socket.as_deref())
            else {
                continue;
            };
            if let Err(e) = NodeLock::join(&self.cgroup_root, &me) {
                errors.push(e.to_string());
            }
        }
    }

    /// Start CMD (with the environment of `admission`) in the pod's cgroup,
    /// unless a signal came first, and wait for it.
    pub fn start_and_wait(
        &self,
        cmd: &[OsString],
        admission: &Admission,
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
            let child = match command::spawn_in(cmd, cg, admission) {
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
        let status = command::wait_child(&mut child, signals)?;
        info!(%status, "command finished");
        Ok(Ended::Exited(status))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;

    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(command::exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(command::exit_code(ExitStatus::from_raw(15)), 143);
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
