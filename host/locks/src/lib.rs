//! Locks: who may change a node and a state directory, and who holds them.
//!
//! Owns the node lock ([`node_lock`]: one owner of a machine's cpusets, the
//! daemon or one-shot commands of one state directory), the state
//! directory's lock ([`state_lock`]: one writer at a time), the identity
//! written into both ([`lock_holder`]: the holder's role, process, boot
//! and start time, and whether it is alive) and the process probes they
//! rest on ([`process`]).
//!
//! May not touch: a node state or a state directory's other files. It
//! answers who holds a lock and waits, saying what it waits for; the
//! callers decide. A crate of its own so that every face that must respect
//! one owner per node (`topomgr run`, the one-shot commands, the daemon)
//! links it without the node's plugin loading and persistence.

pub mod lock_holder;
pub mod node_lock;
pub mod process;
pub mod state_lock;
