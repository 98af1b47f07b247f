//! The state-directory lock: one writer of a state directory at a time.
//!
//! `flock(LOCK_EX)` on `<state_dir>/topomgr.lock`. The daemon takes it once,
//! without waiting, and holds it for its lifetime (a second daemon is
//! refused); `topomgr run` and `topomgr admit --state-dir` take it around
//! each restore -> change -> save, waiting a bounded time for another command
//! to finish. The kernel drops the lock when its holder dies (kill -9
//! included), so a crash never leaves a stale lock. The holder writes its pid
//! into the file so a refused process can say who holds it.

use std::fs::{self, File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// File name of the lock inside the state directory.
pub(crate) const LOCK_FILE: &str = "topomgr.lock";

/// Why the state directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error("state directory {} is in use by another topomgr process{} (lock {}); if a daemon serves it, use the daemon (--socket) or stop it; otherwise give this one another state_dir", dir.display(), holder.map(|p| format!(" (pid {p})")).unwrap_or_default(), path.display())]
    Busy {
        /// The state directory.
        dir: PathBuf,
        /// The lock file.
        path: PathBuf,
        /// The pid written by the holder, if readable.
        holder: Option<u32>,
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

/// The held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct StateLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl StateLock {
    /// Take the lock of `state_dir`, retrying while another process holds it,
    /// for at most `wait`; then fail naming the holder.
    pub fn acquire_within(state_dir: &Path, wait: Duration) -> Result<StateLock, LockError> {
        let deadline = Instant::now() + wait;
        loop {
            match Self::acquire(state_dir) {
                Err(LockError::Busy { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => return other,
            }
        }
    }

    /// Take the lock of `state_dir` (created if missing) or fail at once.
    pub fn acquire(state_dir: &Path) -> Result<StateLock, LockError> {
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
                let holder = file
                    .read_to_string(&mut text)
                    .ok()
                    .and_then(|_| text.trim().parse().ok());
                return Err(LockError::Busy {
                    dir: state_dir.to_path_buf(),
                    path,
                    holder,
                });
            }
            Err((_, errno)) => return Err(io("lock", &path)(std::io::Error::from(errno))),
        };
        lock.set_len(0).map_err(io("truncate", &path))?;
        lock.seek(SeekFrom::Start(0)).map_err(io("write", &path))?;
        writeln!(lock, "{}", std::process::id()).map_err(io("write", &path))?;
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
        let held = StateLock::acquire(&dir).unwrap();
        // flock locks belong to the open file description: a second open in
        // the same process conflicts like another process would.
        let err = StateLock::acquire(&dir).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "state directory {} is in use by another topomgr process (pid {}) (lock {}); if a daemon serves it, use the daemon (--socket) or stop it; otherwise give this one another state_dir",
                dir.display(),
                std::process::id(),
                dir.join(LOCK_FILE).display()
            )
        );
        // A bounded wait gives up with the same error.
        let err = StateLock::acquire_within(&dir, Duration::from_millis(30)).unwrap_err();
        assert!(matches!(
            err,
            LockError::Busy {
                holder: Some(_),
                ..
            }
        ));
        drop(held);
        let again = StateLock::acquire_within(&dir, Duration::from_secs(1)).unwrap();
        assert_eq!(again.path(), dir.join(LOCK_FILE));
        drop(again);
        fs::remove_dir_all(dir).unwrap();
    }
}
