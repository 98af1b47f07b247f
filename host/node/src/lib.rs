//! topomgr's node: the configuration, plugin loading, the node state (the
//! admitted pods applied to cgroups, with their owners) and its persistence
//! (journal, snapshot, the state directory's lock), the node lock (one
//! owner of a machine's cpusets) and the
//! NodeResourceTopology export; the JSON contract's types are
//! `topomgr-contract`'s (re-exported in [`api`]).
//!
//! See ARCHITECTURE.md at the repository root for the data flow of one
//! admission.

pub mod api;
pub mod config;
pub mod followed;
pub mod fsutil;
pub mod image;
pub mod journal;
pub mod lock_holder;
pub mod node_lock;
pub mod node_state;
pub mod nrt;
mod persist;
pub mod plugin;
pub mod pod_owner;
mod provider_states;
pub mod reconcile;
pub mod reconciled;
pub mod setup;
pub mod snapshot;
pub mod state_dir;
pub mod state_lock;
pub mod state_repair;
pub mod store;
mod trusted_file;
