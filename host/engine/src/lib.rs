//! topomgr's admission engine: the kubelet Topology Manager's policies and
//! hint merge over the machine's NUMA nodes, the admission of a pod through
//! every hint provider, the ledger that keeps resources exclusive, the
//! extended-resource check, the host's handle on a loaded provider and the
//! decision trace.
//!
//! It decides and remembers in memory; it reads no files and knows nothing of
//! the daemon, the command line or how state is persisted (see
//! ARCHITECTURE.md at the repository root).

pub mod admission;
pub mod explain;
mod extended;
pub mod ledger;
pub mod merge;
pub mod numa;
pub mod policy;
pub mod provider;
pub mod strategy;
