//! [`Allocation`]: what a provider reserved for one container.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{CpuSet, NumaMask};

/// The resources a provider reserved for a container.
///
/// The host merges the allocations of all providers: CPU sets and NUMA masks
/// are united, device lists and environment variables are combined by key.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allocation {
    /// CPUs for the container's cpuset (empty: this provider sets none).
    pub cpus: CpuSet,
    /// True when `cpus` are exclusive to this container.
    #[serde(default)]
    pub exclusive: bool,
    /// NUMA nodes for the container's memory (`cpuset.mems`; empty: none set).
    pub mems: NumaMask,
    /// Device ids by resource name.
    pub devices: BTreeMap<String, Vec<String>>,
    /// Environment variables for the container.
    pub env: BTreeMap<String, String>,
}
