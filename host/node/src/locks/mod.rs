//! Locks: who may change this node and its state directory.
//!
//! The locks are the `topomgr-locks` crate's (the node lock, the state
//! directory's lock and their holder records), re-exported here under the
//! names the node has always used: `topomgr run` links that crate without
//! the node (see ARCHITECTURE.md, "One owner per node").
//!
//! May not touch: anything; it only names the crate.

pub use topomgr_locks::{lock_holder, node_lock, state_lock};
