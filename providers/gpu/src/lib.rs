//! # topomgr-provider-gpu
//!
//! NVIDIA GPUs for topomgr (work in progress: the topology sources and the
//! choice of GPUs; the provider itself comes with the SDK device toolkit).

pub mod choice;
pub mod fixtures;
pub mod link;
pub mod topology;
