//! topomgr host library: discovery, policy engine, merge, admission, plugin loading.
//!
//! See ARCHITECTURE.md at the repository root for the data flow of one admission.

pub mod admission;
pub mod api;
pub mod cgroup;
pub mod checkpoint;
pub mod config;
pub mod daemon;
pub mod discover;
pub mod explain;
pub mod extended;
pub mod fsutil;
pub mod journal;
pub mod ledger;
pub mod manifest;
pub mod merge;
pub mod node_state;
pub mod nrt;
pub mod numa;
pub mod owner;
pub mod ownership;
pub mod plugin;
pub mod policy;
pub mod provider;
pub mod quantity;
pub mod setup;
pub mod state_lock;
pub mod store;
