//! The state-directory lock: one writer of a state directory at a time.
//!
//! `flock(LOCK_EX)` on `<state_dir>/topomgr.lock`. The daemon takes it once,
//! without waiting, and holds it for its lifetime (a second daemon is
//! refused); one-shot commands (`run`, `admit --state-dir`, ...) take it
//! around each restore -> change -> save, waiting a bounded time for another
//! command to finish, but not for a daemon, which never lets go: they are
//! refused at once, naming the daemon and the form of the command that asks
//! it. The kernel drops the lock when its holder dies (kill -9 included), so
//! a crash never leaves a stale lock. The holder records itself in the file
//! ([`Holder`]) so a refused process can say who holds it.
//!
//! A command that waits says so at once, naming the holder as it recorded
//! itself ([`StateLock::acquire_within`] logs it as a warning, shown
//! without `-v`). A record whose process no longer runs (the lock is held
//! by something that did not record itself, e.g. a `flock(1)`) names no
//! holder: its pid is dead or reused, so the message says the record is
//! stale and how to find the holder.

use std::fs::{self, File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::lock_holder::{Holder, Role};

/// File name of the lock inside the state directory.
pub(crate) const LOCK_FILE: &str = "topomgr.lock";

/// Why the state directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error("state directory {} is in use by {} (lock {}); if a daemon serves it, use the daemon (--socket) or stop it; otherwise give this one another state_dir", dir.display(), holder_text(holder.as_deref(), path), path.display())]
    Busy {
        /// The state directory.
        dir: PathBuf,
        /// The lock file.
        path: PathBuf,
        /// Who holds it, as it recorded itself (`None` when the record is
        /// missing or names a process that no longer runs).
        holder: Option<String>,
    },
    /// The daemon holds the lock (for as long as it runs).
    #[error("state directory {} belongs to {holder} for as long as it runs; {} never waits for it: {remedy} (lock {})", dir.display(), role.command(), path.display())]
    Daemon {
        /// The state directory.
        dir: PathBuf,
        /// The lock file.
        path: PathBuf,
        /// The daemon.
        holder: Box<Holder>,
        /// The command refused.
        role: Role,
        /// What to do instead.
        remedy: String,
    },
    /// The lock file could not be created, locked or written.
    #[error("cannot {op} lock file {}: {error}", path.display())]
    Io {
        /// What was attempted.
        op: &'static str,
        /// The lock file.
        path: PathBuf,
        /// The error (part of the message).
        error: std::io::Error,
    },
}

/// Who holds a busy lock, for a message: the holder as it recorded itself,
/// or (no record of a live process) a pointer to find it.
fn holder_text(holder: Option<&str>, path: &Path) -> String {
    match holder {
        Some(h) => h.to_owned(),
        None => format!(
            "a process that left no live holder record (the record is missing or stale; find the holder with `fuser -v {}`)",
            path.display()
        ),
    }
}

impl LockError {
    /// What a command waiting on this lock waits for, in one line
    /// (`wait`: how long it waits at most); `None` unless it is busy.
    pub fn waiting_for(&self, wait: Duration) -> Option<String> {
        match self {
            LockError::Busy { dir, path, holder } => Some(format!(
                "waiting up to {} s for state directory {}: it is in use by {} (lock {})",
                wait.as_secs(),
                dir.display(),
                holder_text(holder.as_deref(), path),
                path.display()
            )),
            _ => None,
        }
    }
}

/// The held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct StateLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl StateLock {
    /// Take the lock of `state_dir` for `me`, retrying while another
    /// command holds it, for at most `wait`; then fail naming the holder.
    /// A daemon holding it fails at once ([`LockError::Daemon`]). While it
    /// waits it says so at once, as a warning naming the holder
    /// ([`LockError::waiting_for`]).
    pub fn acquire_within(
        state_dir: &Path,
        me: &Holder,
        wait: Duration,
    ) -> Result<StateLock, LockError> {
        Self::acquire_reporting(state_dir, me, wait, |line| tracing::warn!("{line}"))
    }

    /// [`StateLock::acquire_within`], telling `waiting` what it waits for
    /// when it starts to wait, and again when the holder changes.
    pub fn acquire_reporting(
        state_dir: &Path,
        me: &Holder,
        wait: Duration,
        mut waiting: impl FnMut(&str),
    ) -> Result<StateLock, LockError> {
        let deadline = Instant::now() + wait;
        let mut told: Option<Option<String>> = None;
        loop {
            let result = Self::acquire(state_dir, me);
            let Err(busy @ LockError::Busy { holder, .. }) = &result else {
                return result;
            };
            if Instant::now() >= deadline {
                return result;
            }
            if told.as_ref() != Some(holder) {
                if let Some(line) = busy.waiting_for(wait) {
                    waiting(&line);
                }
                told = Some(holder.clone());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Take the lock of `state_dir` (created if missing) for `me` or fail
    /// at once.
    pub fn acquire(state_dir: &Path, me: &Holder) -> Result<StateLock, LockError> {
        let path = state_dir.join(LOCK_FILE);
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |error: std::io::Error| LockError::Io { op, path, error }
        };
        fs::create_dir_all(state_dir).map_err(io("create the directory of", &path))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("open", &path))?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let recorded = Holder::parse_all(&text).into_iter().next();
                let boot = crate::process::boot_id();
                return Err(match recorded {
                    Some(h) if h.role == Role::Serve && h.runs(&boot) => {
                        let socket = h.socket.clone().unwrap_or_default();
                        LockError::Daemon {
                            dir: state_dir.to_path_buf(),
                            path,
                            remedy: me.role.through_daemon(&socket),
                            role: me.role,
                            holder: Box::new(h),
                        }
                    }
                    // Named only while the recorded process runs: else the
                    // lock is held by something that did not record itself
                    // and the record's pid is dead (or another process's).
                    Some(h) => LockError::Busy {
                        dir: state_dir.to_path_buf(),
                        path,
                        holder: h.runs(&boot).then(|| h.with_current_command().to_string()),
                    },
                    // A file of an older version: its pid only, while a
                    // process of that pid runs.
                    None => LockError::Busy {
                        dir: state_dir.to_path_buf(),
                        path,
                        holder: text
                            .trim()
                            .parse::<u32>()
                            .ok()
                            .filter(|p| crate::process::start_time(*p).is_some())
                            .map(|p| format!("another topomgr process (pid {p})")),
                    },
                });
            }
            Err((_, errno)) => return Err(io("lock", &path)(std::io::Error::from(errno))),
        };
        lock.set_len(0).map_err(io("truncate", &path))?;
        lock.seek(SeekFrom::Start(0)).map_err(io("write", &path))?;
        writeln!(lock, "{}", me.to_line()).map_err(io("write", &path))?;
        lock.sync_all().map_err(io("sync", &path))?;
        Ok(StateLock { _lock: lock, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_is_refused_naming_the_holder() {
        let dir = std::env::temp_dir().join(format!("topomgr-lock-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let admit = Holder::current(Role::Admit, &dir, None);
        let held = StateLock::acquire(&dir, &admit).unwrap();
        // flock locks belong to the open file description: a second open in
        // the same process conflicts like another process would.
        let err = StateLock::acquire(&dir, &admit).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "state directory {} is in use by {admit} (lock {}); if a daemon serves it, use the daemon (--socket) or stop it; otherwise give this one another state_dir",
                dir.display(),
                dir.join(LOCK_FILE).display()
            )
        );
        // A bounded wait gives up with the same error.
        let err = StateLock::acquire_within(&dir, &admit, Duration::from_millis(30)).unwrap_err();
        assert!(
            matches!(
                err,
                LockError::Busy {
                    holder: Some(_),
                    ..
                }
            ),
            "{err}"
        );
        drop(held);
        let again = StateLock::acquire_within(&dir, &admit, Duration::from_secs(1)).unwrap();
        assert_eq!(again.path(), dir.join(LOCK_FILE));
        drop(again);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_wait_says_at_once_whom_it_waits_for() {
        let dir = std::env::temp_dir().join(format!("topomgr-lock-w-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let admit = Holder::current(Role::Admit, &dir, None);
        let held = StateLock::acquire(&dir, &admit).unwrap();
        let release = Holder::current(Role::Release, &dir, None);
        let start = Instant::now();
        let mut told = Vec::new();
        let err = StateLock::acquire_reporting(&dir, &release, Duration::from_millis(300), |l| {
            told.push((start.elapsed(), l.to_owned()))
        })
        .unwrap_err();
        assert!(matches!(err, LockError::Busy { .. }), "{err}");
        // Once (the holder did not change), at the first attempt.
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(told[0].0 < Duration::from_secs(1), "{told:?}");
        assert_eq!(
            told[0].1,
            format!(
                "waiting up to 0 s for state directory {}: it is in use by {admit} (lock {})",
                dir.display(),
                dir.join(LOCK_FILE).display()
            )
        );
        drop(held);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_stale_record_names_no_dead_pid_as_the_holder() {
        let dir = std::env::temp_dir().join(format!("topomgr-lock-s-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(LOCK_FILE);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let gone = Holder {
            pid: dead,
            start_time: 1,
            ..Holder::current(Role::Admit, &dir, None)
        };
        let release = Holder::current(Role::Release, &dir, None);
        // Held by something that records nothing (as `flock(1)` does),
        // over a record left by a process that is gone, or over an older
        // version's bare pid of it.
        for record in [gone.to_line(), dead.to_string()] {
            fs::write(&path, format!("{record}\n")).unwrap();
            let file = OpenOptions::new().read(true).open(&path).unwrap();
            let foreign = Flock::lock(file, FlockArg::LockExclusiveNonblock).unwrap();
            let mut told = Vec::new();
            let err = StateLock::acquire_reporting(&dir, &release, Duration::ZERO, |l| {
                told.push(l.to_owned())
            })
            .unwrap_err();
            let unknown = format!(
                "a process that left no live holder record (the record is missing or stale; find the holder with `fuser -v {}`)",
                path.display()
            );
            assert_eq!(
                err.to_string(),
                format!(
                    "state directory {} is in use by {unknown} (lock {}); if a daemon serves it, use the daemon (--socket) or stop it; otherwise give this one another state_dir",
                    dir.display(),
                    path.display()
                )
            );
            assert!(!err.to_string().contains(&format!("pid {dead}")), "{err}");
            assert!(told.is_empty(), "no wait: {told:?}");
            drop(foreign);
        }
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_daemon_holding_it_refuses_at_once_with_the_form_that_asks_it() {
        let dir = std::env::temp_dir().join(format!("topomgr-lock-d-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let socket = Path::new("/run/topomgr/t.sock");
        let daemon = Holder::current(Role::Serve, &dir, Some(socket));
        let _held = StateLock::acquire(&dir, &daemon).unwrap();
        let release = Holder::current(Role::Release, &dir, None);
        let start = Instant::now();
        let err = StateLock::acquire_within(&dir, &release, Duration::from_secs(30)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(30), "it waited");
        assert_eq!(
            err.to_string(),
            format!(
                "state directory {} belongs to {daemon} for as long as it runs; topomgr release --state-dir never waits for it: release through it: `topomgr release --socket /run/topomgr/t.sock UID` (lock {})",
                dir.display(),
                dir.join(LOCK_FILE).display()
            )
        );
        fs::remove_dir_all(dir).unwrap();
    }
}
