//! topomgr's node, in four rooms and two exports:
//!
//! - [`setup`]: the configuration, plugin loading and building the
//!   admitter and node state from them, at start and again on a reload;
//! - [`state`]: [`state::NodeState`], the admitted pods applied to cgroups,
//!   with their owners, the followed containers and what the providers'
//!   restores reported;
//! - [`persist`]: the state directory (journal, snapshot, the restore of
//!   an image, repair) and the formats of its files;
//! - [`locks`]: the node lock (one owner of a machine's cpusets), the state
//!   directory's lock and the identity of a lock's holder;
//! - [`api`] (the JSON contract's types, `topomgr-contract`'s, re-exported)
//!   and [`nrt`] (the NodeResourceTopology export);
//! - [`fsutil`]: the file-system helpers the rooms share (atomic
//!   replacement, the boot id), a leaf that names no other module.
//!
//! The rooms form a layering, checked by the architecture test (no module
//! cycle): `state` names only `api`; `locks` names `state` (an owner's
//! identity) and `fsutil`; `persist` names `state`, `locks`, `api` and
//! `fsutil`; `setup` names `state`, `persist` and `fsutil`; `nrt` names
//! `setup` (the configuration) and `fsutil`.
//!
//! See ARCHITECTURE.md at the repository root for the data flow of one
//! admission.

pub mod api;
pub mod fsutil;
pub mod locks;
pub mod nrt;
pub mod persist;
pub mod setup;
pub mod state;
