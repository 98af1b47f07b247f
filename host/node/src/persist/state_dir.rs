//! A state directory as one-shot commands (`admit --state-dir`, `run`,
//! `release --state-dir`, `explain --state-dir`, `export nrt --state-dir`)
//! use it: locked (waiting for another command up to [`STATE_LOCK_WAIT`],
//! refused at once while a daemon holds it), restored into a [`NodeState`],
//! saved after each change. The daemon holds the lock for its lifetime
//! instead and commits through its state thread.

use std::path::Path;
use std::time::Duration;

use crate::locks::lock_holder::{Holder, Role};
use crate::locks::state_lock::{LockError, StateLock};
use crate::persist::image::Restored;
use crate::persist::snapshot::StateError;
use crate::persist::store::{CommitError, Store};
use crate::state::{NodeState, Reclaim};

/// How long a one-shot command waits for another holder of the state lock.
pub const STATE_LOCK_WAIT: Duration = Duration::from_secs(30);

/// Why a state directory could not be opened or saved.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// Another process holds the directory, or its lock file is unusable.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The saved state could not be restored.
    #[error("restoring state")]
    Restore(#[source] StateError),
    /// The changes could not be made durable.
    #[error("saving state")]
    Save(#[source] CommitError),
}

/// A state directory held by one command: its lock (released on drop) and
/// its store (snapshot and journal).
pub struct StateDir {
    _lock: StateLock,
    store: Store,
    restored: Restored,
}

impl StateDir {
    /// Lock `dir` for a command of `role` (waiting up to
    /// [`STATE_LOCK_WAIT`] for another command, not for a daemon) and
    /// restore it into `node`.
    pub fn open(dir: &Path, node: &mut NodeState, role: Role) -> Result<StateDir, StateDirError> {
        let me = Holder::current(role, dir, None);
        let lock = StateLock::acquire_within(dir, &me, STATE_LOCK_WAIT)?;
        let boot_id = node.boot_id().to_owned();
        let (store, restored) = Store::open(dir, node, &boot_id).map_err(StateDirError::Restore)?;
        // `topomgr health --state-dir` prints them as its notes: logged,
        // they would show twice.
        for issue in restored.issues.iter().filter(|_| role != Role::Health) {
            tracing::warn!(state_dir = %dir.display(), %issue, "restored state does not match the machine or the config");
        }
        Ok(StateDir {
            _lock: lock,
            store,
            restored,
        })
    }

    /// What restoring the state found when it was opened.
    pub fn restored(&self) -> &Restored {
        &self.restored
    }

    /// Make what `node` changed since it was opened (or last saved) durable.
    pub fn save(&mut self, node: &mut NodeState) -> Result<(), StateDirError> {
        self.store.commit(node).map_err(StateDirError::Save)?;
        Ok(())
    }

    /// Release the pods whose owners are gone
    /// ([`NodeState::reclaim`]); each is logged there.
    pub fn reclaim(&self, node: &mut NodeState) -> Vec<Reclaim> {
        node.reclaim()
    }
}
