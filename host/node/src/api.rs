//! The wire contract's types (`topomgr_contract::api`), re-exported for
//! the node's callers; the answers built from the node state are
//! [`crate::state::pod_list`] and the engine's `From<&AdmitResult>`.

pub use topomgr_contract::api::*;
