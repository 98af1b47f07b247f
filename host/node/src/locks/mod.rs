//! Locks: who may change this node and its state directory.
//!
//! Owns the node lock ([`node_lock`]: one owner of a machine's cpusets, the
//! daemon or a one-shot command), the state directory's lock
//! ([`state_lock`]) and the identity written into both ([`lock_holder`]:
//! the holder's process, boot and start time, and whether it is alive).
//!
//! May not touch: the node state or the state directory's files (it names
//! only [`crate::state::pod_owner`], for a holder's process identity, and
//! [`crate::fsutil`]); it answers who holds a lock, and the callers decide.

pub mod lock_holder;
pub mod node_lock;
pub mod state_lock;
