//! The node lock: one owner of a machine's cpusets.
//!
//! Two owners with different state directories would each hand out the
//! same CPUs exclusively. So whatever writes cpusets under a cgroup root —
//! the daemon, and without a daemon `topomgr run`, `admit --state-dir` and
//! `release --state-dir` — first takes the lock of that root's hierarchy on
//! this machine, not of its state directory:
//! `<`[`lock_dir`]`>/node-<key>.lock`, the key naming the hierarchy
//! ([`Hierarchy`]: every root inside one cgroup hierarchy, nested or
//! beside another, is one key, because they all hand out the same CPUs; a
//! root that is not a cgroup filesystem is keyed by its own path).
//!
//! - The daemon holds it exclusively (`flock(LOCK_EX)`) for as long as it
//!   runs; it is refused while anything else holds it.
//! - One-shot commands hold it shared (`LOCK_SH`) for as long as they run
//!   (a `run` until its command ended and its pod is released), so several
//!   of them with **the same** state directory work side by side (the
//!   state lock orders their changes); one with another state directory is
//!   refused, and so is every one-shot while a daemon holds it.
//!
//! - *Members* own the node without holding the lock: a run placed by the
//!   daemon and the init process of a container the daemon placed through
//!   the OCI hook or NRI (for the daemon's state directory: a daemon stop
//!   does not open the node to another one while they keep their CPUs), and
//!   a process a run left in its pod's cgroup (it keeps the pod's CPUs
//!   after the run ended), recorded by [`NodeLock::join`] for as long as
//!   they live.
//!
//! Every holder records itself in the file ([`Holder`]: role, pid, start
//! time, command line, state directory, the daemon's socket); a refusal
//! names the live holders and says what to do. Holders are checked and
//! recorded under a short exclusive lock of the directory's `node.guard`,
//! so two newcomers never both see an empty node. The kernel drops a dead
//! holder's lock (a zombie holds none: its files are closed), and a
//! recorded holder counts only while its pid runs with the same start
//! time in the same boot and is not a zombie. The last holder removes the
//! lock file when it lets go and no member is recorded: under the guard,
//! holding the lock exclusively, so no one else holds it or is about to
//! open it (anything else removing it, while a process holds it, would let
//! a second owner in: the daemon's unit keeps the directory); so, under
//! the guard, does anyone who takes a lock, for the files of holders killed
//! before they let go.

use std::fs::{self, File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest as _, Sha256};
use topomgr_cgroup::hierarchy::Hierarchy;

use crate::lock_holder::{describe, Holder, Role};

/// Where root keeps node locks (the daemon's runtime directory; it must
/// outlive a stop of the daemon: `RuntimeDirectoryPreserve=yes`).
pub const LOCK_DIR: &str = "/run/topomgr";

/// The guard of the directory's node locks.
const GUARD_FILE: &str = "node.guard";

/// How long a process waits for another to finish checking the holders.
const GUARD_WAIT: Duration = Duration::from_secs(10);

/// The directory of the node locks: [`LOCK_DIR`] for root; for another
/// user (who can write only cgroups delegated to it) its runtime
/// directory's `topomgr/`, else `topomgr-<uid>` in the temporary directory.
pub fn lock_dir() -> PathBuf {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        return PathBuf::from(LOCK_DIR);
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("topomgr"),
        None => std::env::temp_dir().join(format!("topomgr-{uid}")),
    }
}

/// Why the node lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum NodeLockError {
    /// The daemon owns the node.
    #[error("{hierarchy} is managed by {holder}{}: {remedy} (node lock {})", if *role == Role::Serve { ", and one node has one owner".to_owned() } else { format!("; {} does not book or change its CPUs beside it", role.command()) }, lock.display())]
    Daemon {
        /// The hierarchy.
        hierarchy: String,
        /// The daemon.
        holder: Box<Holder>,
        /// The command refused.
        role: Role,
        /// What to do instead.
        remedy: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// One-shot commands of another state directory own the node.
    #[error("{hierarchy} is managed with state directory {} by {}; one node has one owner, so {} with state directory {} is refused (two state directories would hand out the same CPUs): use state directory {} (state_dir in the config, or --state-dir), or wait until they end (node lock {})", theirs.display(), describe(holders), role.command(), mine.display(), theirs.display(), lock.display())]
    OtherStateDir {
        /// The hierarchy.
        hierarchy: String,
        /// Their state directory.
        theirs: PathBuf,
        /// The live holders using it.
        holders: Vec<Holder>,
        /// The command refused.
        role: Role,
        /// Its state directory.
        mine: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// A daemon is refused while one-shot commands hold the node.
    #[error("cannot serve {hierarchy}: it is in use by {}; the daemon must be its only owner: wait until they end (or stop them), then start the daemon (node lock {})", describe(holders), lock.display())]
    InUse {
        /// The hierarchy.
        hierarchy: String,
        /// The live holders.
        holders: Vec<Holder>,
        /// The lock file.
        lock: PathBuf,
    },
    /// The lock is held by a process that recorded nothing (an older
    /// topomgr).
    #[error("{hierarchy} is locked by a process that did not record itself (an older topomgr?); stop it, or find it with `fuser -v {}` (node lock {})", lock.display(), lock.display())]
    Unknown {
        /// The hierarchy.
        hierarchy: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// The lock's directory or files could not be used.
    #[error("cannot {op} {}: {error}", path.display())]
    Io {
        /// What was attempted.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error (part of the message).
        error: std::io::Error,
    },
}

impl NodeLockError {
    /// The daemon, when the node is the daemon's.
    pub fn daemon(&self) -> Option<&Holder> {
        match self {
            NodeLockError::Daemon { holder, .. } => Some(holder),
            _ => None,
        }
    }
}

/// The held node lock; dropping it releases it.
#[derive(Debug)]
pub struct NodeLock {
    lock: Flock<File>,
    dir: PathBuf,
    path: PathBuf,
    hierarchy: Hierarchy,
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> NodeLockError {
    let path = path.to_path_buf();
    move |error| NodeLockError::Io { op, path, error }
}

fn errno(op: &'static str, path: &Path) -> impl FnOnce(Errno) -> NodeLockError {
    let io = io(op, path);
    move |e| io(std::io::Error::from(e))
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl NodeLock {
    /// Take the node lock of `cgroup_root` for `me` (in [`lock_dir`]), or
    /// fail at once naming who owns the node.
    pub fn acquire(cgroup_root: &Path, me: &Holder) -> Result<NodeLock, NodeLockError> {
        Self::acquire_in(&lock_dir(), cgroup_root, me)
    }

    /// [`NodeLock::acquire`] with the locks in `dir`.
    pub fn acquire_in(
        dir: &Path,
        cgroup_root: &Path,
        me: &Holder,
    ) -> Result<NodeLock, NodeLockError> {
        let node = Node::open(dir, cgroup_root)?;
        let described = node.hierarchy.to_string();
        let path = node.path.clone();
        // Members hold no lock (runs placed by a daemon: the daemon holds
        // it; processes a run left behind) but own the node for their state
        // directory while they run, even after the daemon or the run ended.
        let (members, holders): (Vec<Holder>, Vec<Holder>) =
            node.live.iter().cloned().partition(|h| h.role.is_member());
        let (mut lock, holders, exclusive) =
            match Flock::lock(node.file, FlockArg::LockExclusiveNonblock) {
                // No process holds it: whoever is recorded besides the
                // members is gone.
                Ok(lock) => (lock, Vec::new(), true),
                Err((file, Errno::EWOULDBLOCK)) => {
                    if let Some(d) = holders.iter().find(|h| h.role == Role::Serve) {
                        let socket = d.socket.clone().unwrap_or_default();
                        return Err(NodeLockError::Daemon {
                            hierarchy: described,
                            remedy: me.role.through_daemon(&socket),
                            holder: Box::new(d.clone()),
                            role: me.role,
                            lock: path,
                        });
                    }
                    if holders.is_empty() {
                        return Err(NodeLockError::Unknown {
                            hierarchy: described,
                            lock: path,
                        });
                    }
                    if me.role == Role::Serve {
                        return Err(NodeLockError::InUse {
                            hierarchy: described,
                            holders,
                            lock: path,
                        });
                    }
                    if let Some(e) = other_state_dir(&holders, me, &described, &path) {
                        return Err(e);
                    }
                    match Flock::lock(file, FlockArg::LockSharedNonblock) {
                        Ok(lock) => (lock, holders, false),
                        // Held exclusively by someone who recorded nothing.
                        Err((_, Errno::EWOULDBLOCK)) => {
                            return Err(NodeLockError::Unknown {
                                hierarchy: described,
                                lock: path,
                            })
                        }
                        Err((_, e)) => return Err(errno("lock", &path)(e)),
                    }
                }
                Err((_, e)) => return Err(errno("lock", &path)(e)),
            };
        let foreign: Vec<Holder> = members
            .iter()
            .filter(|m| m.state_dir != me.state_dir)
            .cloned()
            .collect();
        if !foreign.is_empty() {
            return Err(if me.role == Role::Serve {
                NodeLockError::InUse {
                    hierarchy: described,
                    holders: foreign,
                    lock: path,
                }
            } else {
                other_state_dir(&foreign, me, &described, &path).unwrap_or(NodeLockError::Unknown {
                    hierarchy: described,
                    lock: path,
                })
            });
        }
        let mut recorded = members;
        recorded.extend(holders);
        recorded.push(me.clone());
        write_holders(&mut lock, &path, &recorded)?;
        if me.role != Role::Serve && exclusive {
            // The first one-shot holder: exclusive while it wrote itself,
            // shared from now on (the guard keeps newcomers out meanwhile).
            lock.relock(FlockArg::LockSharedNonblock)
                .map_err(errno("share", &path))?;
        }
        tracing::debug!(lock = %path.display(), hierarchy = %node.hierarchy, role = ?me.role, "node lock taken");
        Ok(NodeLock {
            lock,
            dir: dir.to_path_buf(),
            path,
            hierarchy: node.hierarchy,
        })
    }

    /// The daemon that owns the node of `cgroup_root`, if one does.
    pub fn daemon(cgroup_root: &Path) -> Result<Option<Holder>, NodeLockError> {
        let node = Node::open(&lock_dir(), cgroup_root)?;
        Ok(node.live.into_iter().find(|h| h.role == Role::Serve))
    }

    /// Record `me`, a run placed by the daemon that owns the node of
    /// `cgroup_root` (`me.state_dir` and `me.socket` are the daemon's), as
    /// an owner of the node for that daemon's state directory while it
    /// runs: no lock is held (the daemon holds it); after the daemon
    /// stopped, an owner of another state directory is still refused while
    /// the run lives.
    pub fn join(cgroup_root: &Path, me: &Holder) -> Result<(), NodeLockError> {
        Self::join_in(&lock_dir(), cgroup_root, me)
    }

    /// [`NodeLock::join`] with the locks in `dir`.
    pub fn join_in(dir: &Path, cgroup_root: &Path, me: &Holder) -> Result<(), NodeLockError> {
        let mut node = Node::open(dir, cgroup_root)?;
        node.live.push(me.clone());
        write_holders(&mut node.file, &node.path, &node.live)
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The hierarchy it is the lock of.
    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }
}

impl Drop for NodeLock {
    /// Let go; the last holder removes the file when no member is
    /// recorded (see the module's documentation).
    fn drop(&mut self) {
        let Ok(_guard) = guard(&self.dir.join(GUARD_FILE)) else {
            return;
        };
        // Others hold it: they keep the file.
        if self.lock.relock(FlockArg::LockExclusiveNonblock).is_err() {
            return;
        }
        let mut text = String::new();
        if self.lock.seek(SeekFrom::Start(0)).is_err()
            || self.lock.read_to_string(&mut text).is_err()
        {
            return;
        }
        let boot = crate::process::boot_id();
        let members = Holder::parse_all(&text)
            .into_iter()
            .any(|h| h.role.is_member() && h.runs(&boot));
        if !members {
            if let Err(e) = fs::remove_file(&self.path) {
                tracing::debug!(lock = %self.path.display(), error = %e, "node lock file not removed");
            }
        }
    }
}

/// A node lock file opened and read under its guard.
struct Node {
    hierarchy: Hierarchy,
    path: PathBuf,
    file: File,
    /// The holders it records that still run.
    live: Vec<Holder>,
    _guard: Flock<File>,
}

impl Node {
    fn open(dir: &Path, cgroup_root: &Path) -> Result<Node, NodeLockError> {
        let hierarchy = Hierarchy::of(cgroup_root);
        prepare_dir(dir)?;
        let key = hierarchy.key(sha256_hex);
        let path = dir.join(format!("node-{key}.lock"));
        let guard = guard(&dir.join(GUARD_FILE))?;
        sweep(dir);
        let mut file = open(&path)?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(io("read the node lock", &path))?;
        let boot = crate::process::boot_id();
        let live = Holder::parse_all(&text)
            .into_iter()
            .filter(|h| h.runs(&boot))
            .map(Holder::with_current_command)
            .collect();
        Ok(Node {
            hierarchy,
            path,
            file,
            live,
            _guard: guard,
        })
    }
}

/// Under the guard: remove the lock files of `dir` that no process holds
/// and that record no live member (left by holders killed before they
/// could let go), as their last holder would have.
fn sweep(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let boot = crate::process::boot_id();
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("node-") && name.ends_with(".lock")) {
            continue;
        }
        let path = e.path();
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        else {
            continue;
        };
        let Ok(mut held) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
            continue;
        };
        let mut text = String::new();
        if held.read_to_string(&mut text).is_err() {
            continue;
        }
        let members = Holder::parse_all(&text)
            .into_iter()
            .any(|h| h.role.is_member() && h.runs(&boot));
        if !members {
            let _ = fs::remove_file(&path);
        }
    }
}

/// The refusal of `me` when one of `owners` has another state directory.
fn other_state_dir(
    owners: &[Holder],
    me: &Holder,
    hierarchy: &str,
    lock: &Path,
) -> Option<NodeLockError> {
    let other = owners.iter().find(|h| h.state_dir != me.state_dir)?;
    let theirs = other.state_dir.clone();
    Some(NodeLockError::OtherStateDir {
        hierarchy: hierarchy.to_owned(),
        holders: owners
            .iter()
            .filter(|h| h.state_dir == theirs)
            .cloned()
            .collect(),
        theirs,
        role: me.role,
        mine: me.state_dir.clone(),
        lock: lock.to_path_buf(),
    })
}

/// Replace the records of the lock file with `holders`.
fn write_holders(file: &mut File, path: &Path, holders: &[Holder]) -> Result<(), NodeLockError> {
    let text: String = holders.iter().map(|h| h.to_line() + "\n").collect();
    file.set_len(0).map_err(io("truncate", path))?;
    file.seek(SeekFrom::Start(0)).map_err(io("write", path))?;
    file.write_all(text.as_bytes()).map_err(io("write", path))
}

/// Create the lock directory (0755; 0700 for a user's) and check that it
/// is a directory of this user's, so no one else decides who owns a node.
fn prepare_dir(dir: &Path) -> Result<(), NodeLockError> {
    let uid = nix::unistd::geteuid();
    let mode = if uid.is_root() { 0o755 } else { 0o700 };
    match fs::DirBuilder::new().recursive(true).mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) => return Err(io("create the node lock directory", dir)(e)),
    }
    let meta = fs::symlink_metadata(dir).map_err(io("read the node lock directory", dir))?;
    if !meta.is_dir() || meta.uid() != uid.as_raw() || meta.mode() & 0o022 != 0 {
        return Err(io("use the node lock directory", dir)(std::io::Error::other(
            format!(
                "it must be a directory of uid {uid} that no one else may write (found uid {}, mode {:o}); remove it and retry",
                meta.uid(),
                meta.mode() & 0o7777
            ),
        )));
    }
    Ok(())
}

fn open(path: &Path) -> Result<File, NodeLockError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io("open", path))
}

/// The guard, held exclusively while the holders are checked and written.
fn guard(path: &Path) -> Result<Flock<File>, NodeLockError> {
    let deadline = Instant::now() + GUARD_WAIT;
    let mut file = open(path)?;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(g) => return Ok(g),
            Err((f, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                file = f;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(io("take the node lock's guard", path)(
                    std::io::Error::other(format!(
                    "another process has held it for {} s (stopped?); find it with `fuser -v {}`",
                    GUARD_WAIT.as_secs(),
                    path.display()
                )),
                ))
            }
            Err((_, e)) => return Err(errno("lock", path)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("topomgr-nodelock-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("locks")).unwrap();
        fs::set_permissions(
            d.join("locks"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        d
    }

    /// Holders that look like other processes (flock conflicts between
    /// two opens in one process too; the record needs another pid). Their
    /// command is recorded as a placeholder: a refusal names what the
    /// process runs now ([`Holder::with_current_command`]).
    fn other(role: Role, state_dir: &Path) -> Holder {
        // This test's parent: alive for as long as the test runs.
        let pid = std::os::unix::process::parent_id();
        let mut h = Holder::current(role, state_dir, None);
        h.pid = pid;
        h.start_time = crate::process::start_time(pid).unwrap();
        h.command = format!("other {}", role.command());
        if role == Role::Serve {
            h.socket = Some(PathBuf::from("/run/topomgr/topomgr.sock"));
        }
        h
    }

    #[test]
    fn one_shots_of_one_state_dir_share_it_and_another_state_dir_is_refused() {
        let d = scratch("oneshot");
        let locks = d.join("locks");
        let root = d.join("cgroup");
        let s1 = d.join("s1");
        let a = NodeLock::acquire_in(&locks, &root, &other(Role::Run, &s1)).unwrap();
        let b = NodeLock::acquire_in(&locks, &root, &other(Role::Admit, &s1)).unwrap();
        assert_eq!(a.path(), b.path());
        let text = fs::read_to_string(a.path()).unwrap();
        assert_eq!(Holder::parse_all(&text).len(), 2, "{text}");

        let s2 = d.join("s2");
        let me = Holder::current(Role::Release, &s2, None);
        let err = NodeLock::acquire_in(&locks, &root, &me).unwrap_err();
        // Named by what they run now, not by the recorded placeholder.
        let holder = other(Role::Run, &s1).with_current_command();
        let admit = other(Role::Admit, &s1).with_current_command();
        assert_eq!(
            err.to_string(),
            format!(
                "the directory {} (not a cgroup filesystem) is managed with state directory {} by {holder}; {admit}; one node has one owner, so topomgr release --state-dir with state directory {} is refused (two state directories would hand out the same CPUs): use state directory {} (state_dir in the config, or --state-dir), or wait until they end (node lock {})",
                root.display(),
                s1.display(),
                s2.display(),
                s1.display(),
                a.path().display()
            )
        );
        // A daemon is refused while they hold it, naming them.
        let daemon = Holder::current(Role::Serve, &s1, Some(Path::new("/t.sock")));
        let err = NodeLock::acquire_in(&locks, &root, &daemon).unwrap_err();
        assert!(
            matches!(&err, NodeLockError::InUse { holders, .. } if holders.len() == 2),
            "{err}"
        );
        // Another root is another node lock.
        let elsewhere = NodeLock::acquire_in(&locks, &d.join("other-root"), &me).unwrap();
        assert_ne!(elsewhere.path(), a.path());
        // The last one to let go removes the file; the others keep it.
        let path = a.path().to_path_buf();
        drop(a);
        assert!(path.exists());
        drop(b);
        assert!(!path.exists());
        // Gone: the daemon gets it now.
        let held = NodeLock::acquire_in(&locks, &root, &daemon).unwrap();
        drop(held);
        assert!(!path.exists());
        assert_eq!(
            fs::read_dir(&locks).unwrap().count(),
            2,
            "the guard and the other root's lock"
        );
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_daemon_owns_the_node_alone() {
        let d = scratch("daemon");
        let locks = d.join("locks");
        let root = d.join("cgroup");
        let daemon = other(Role::Serve, &d.join("s1"));
        let held = NodeLock::acquire_in(&locks, &root, &daemon).unwrap();
        let run = Holder::current(Role::Run, &d.join("s1"), None);
        let err = NodeLock::acquire_in(&locks, &root, &run).unwrap_err();
        let daemon = daemon.with_current_command();
        assert_eq!(err.daemon(), Some(&daemon));
        assert_eq!(
            err.to_string(),
            format!(
                "the directory {} (not a cgroup filesystem) is managed by {daemon}; topomgr run does not book or change its CPUs beside it: run through it: `topomgr run --socket /run/topomgr/topomgr.sock [OPTIONS] -- CMD...` (node lock {})",
                root.display(),
                held.path().display()
            )
        );
        let second = Holder::current(Role::Serve, &d.join("s2"), Some(Path::new("/b.sock")));
        let err = NodeLock::acquire_in(&locks, &root, &second).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the directory {} (not a cgroup filesystem) is managed by {daemon}, and one node has one owner: stop that daemon first, or use it (its socket is /run/topomgr/topomgr.sock) (node lock {})",
                root.display(),
                held.path().display()
            )
        );
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_run_placed_by_a_daemon_owns_the_node_for_its_state_dir_after_the_daemon_stopped() {
        let d = scratch("member");
        let locks = d.join("locks");
        let root = d.join("cgroup");
        let (s1, s2) = (d.join("s1"), d.join("s2"));
        let daemon = Holder::current(Role::Serve, &s1, Some(Path::new("/d.sock")));
        let held = NodeLock::acquire_in(&locks, &root, &daemon).unwrap();
        let member = other(Role::RunThroughDaemon, &s1);
        NodeLock::join_in(&locks, &root, &member).unwrap();
        let recorded = Holder::parse_all(&fs::read_to_string(held.path()).unwrap());
        assert_eq!(recorded, [daemon.clone(), member.clone()]);
        // From here on it is named by what it runs now.
        let member = member.with_current_command();
        drop(held);

        // The daemon is gone; its run is not.
        let run = Holder::current(Role::Run, &s2, None);
        let err = NodeLock::acquire_in(&locks, &root, &run).unwrap_err();
        assert!(
            matches!(&err, NodeLockError::OtherStateDir { holders, theirs, .. } if holders == std::slice::from_ref(&member) && *theirs == s1),
            "{err}"
        );
        assert!(
            err.to_string().contains(&format!(
                "by topomgr run (through the daemon) (pid {}, command `{}`, state directory {}",
                member.pid,
                member.command,
                s1.display()
            )),
            "{err}"
        );
        let elsewhere = Holder::current(Role::Serve, &s2, Some(Path::new("/e.sock")));
        let err = NodeLock::acquire_in(&locks, &root, &elsewhere).unwrap_err();
        assert!(
            matches!(&err, NodeLockError::InUse { holders, .. } if holders == std::slice::from_ref(&member)),
            "{err}"
        );
        // The daemon of its state directory starts again, and keeps it.
        let again = NodeLock::acquire_in(&locks, &root, &daemon).unwrap();
        let recorded = Holder::parse_all(&fs::read_to_string(again.path()).unwrap());
        assert_eq!(recorded, [member, daemon]);
        drop(again);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn dead_holders_do_not_count() {
        let d = scratch("dead");
        let locks = d.join("locks");
        let root = d.join("cgroup");
        let held = NodeLock::acquire_in(&locks, &root, &other(Role::Run, &d.join("s1"))).unwrap();
        // A record of a holder that is gone (a reused pid: another start
        // time) besides the live one.
        let mut gone = other(Role::Serve, &d.join("s9"));
        gone.start_time += 1;
        let mut f = OpenOptions::new().append(true).open(held.path()).unwrap();
        writeln!(f, "{}", gone.to_line()).unwrap();
        let me = Holder::current(Role::Admit, &d.join("s1"), None);
        let ok = NodeLock::acquire_in(&locks, &root, &me).unwrap();
        let recorded = Holder::parse_all(&fs::read_to_string(ok.path()).unwrap());
        assert_eq!(recorded.len(), 2, "the dead one is dropped: {recorded:?}");
        assert!(recorded.iter().all(|h| h.role != Role::Serve));
        drop((held, ok));

        // Files left by holders killed before they let go are swept by the
        // next one to take a lock there; one with a live member stays.
        fs::write(locks.join("node-stale.lock"), gone.to_line() + "\n").unwrap();
        let member = other(Role::LeftBehind, &d.join("s1"));
        fs::write(locks.join("node-member.lock"), member.to_line() + "\n").unwrap();
        let again = NodeLock::acquire_in(&locks, &d.join("elsewhere"), &me).unwrap();
        assert!(!locks.join("node-stale.lock").exists());
        assert!(locks.join("node-member.lock").exists());
        drop(again);
        fs::remove_dir_all(d).unwrap();
    }
}
