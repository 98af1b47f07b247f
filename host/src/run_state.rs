//! An exclusive lock over a state directory, so that concurrent `topomgr run`
//! processes sharing one `state_dir` never restore, admit and save at the same
//! time (which could hand one CPU to two of them).
//!
//! The lock is `flock(2)` on `<state_dir>/lock`: it is released when the
//! [`StateLock`] is dropped or the process dies (also on `kill -9`), so a
//! crashed holder never blocks the others.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use tracing::debug;

/// The lock file's name inside a state directory.
pub const LOCK_FILE: &str = "lock";

/// Why the state lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum StateLockError {
    /// The state directory or lock file could not be created or opened.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// `flock` failed.
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The error.
        source: Errno,
    },
}

/// Holds the exclusive lock of one state directory until dropped.
#[derive(Debug)]
pub struct StateLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl StateLock {
    /// Create `state_dir` if needed and wait for its exclusive lock.
    pub fn acquire(state_dir: &Path) -> Result<Self, StateLockError> {
        fs::create_dir_all(state_dir).map_err(|source| StateLockError::Io {
            op: "create state directory",
            path: state_dir.to_path_buf(),
            source,
        })?;
        let path = state_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| StateLockError::Io {
                op: "open lock file",
                path: path.clone(),
                source,
            })?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) => {
                    debug!(path = %path.display(), "state lock taken");
                    return Ok(StateLock { _lock: lock, path });
                }
                Err((f, Errno::EINTR)) => file = f,
                Err((_, source)) => return Err(StateLockError::Lock { path, source }),
            }
        }
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
    fn second_lock_waits_for_the_first() {
        let dir = std::env::temp_dir().join(format!("topomgr-lock-{}", std::process::id()));
        let first = StateLock::acquire(&dir).unwrap();
        assert_eq!(first.path(), dir.join("lock"));
        // A non-blocking attempt on another open file description fails while held.
        let other = File::open(dir.join("lock")).unwrap();
        let (other, errno) = Flock::lock(other, FlockArg::LockExclusiveNonblock).unwrap_err();
        assert_eq!(errno, Errno::EWOULDBLOCK);
        drop(first);
        let again = Flock::lock(other, FlockArg::LockExclusiveNonblock);
        assert!(again.is_ok(), "lock must be free after drop");
        drop(again);
        fs::remove_dir_all(dir).unwrap();
    }
}
