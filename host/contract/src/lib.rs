//! topomgr's wire contract: the JSON the daemon's HTTP API answers and the
//! CLI prints ([`api`], [`explain`]), the NodeResourceTopology object
//! ([`nrt`]) and the owners recorded with admissions ([`owner`]).
//!
//! Data types with serde only: no I/O but the text of a
//! `/proc/<pid>/stat` file read by [`owner::ProcStat`], no engine, node or
//! daemon. The engine builds the answers ([`api::Admission`] and
//! [`explain::Explain`] from its results), the node builds the NRT object
//! and checks owners, the daemon serves them and `topomgr-client` reads
//! them.
#![warn(missing_docs)]

pub mod api;
pub mod explain;
pub mod nrt;
pub mod owner;
