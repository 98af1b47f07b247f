//! [`Allocation`]: what a provider reserved for one container.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{CpuSet, NumaMask};

/// The resources a provider reserved for a container.
///
/// The host merges the allocations of all providers: CPU sets and NUMA masks
/// are united, device lists and environment variables are combined by key.
/// Who sets what (as in the kubelet): the CPU provider sets `cpus`, the
/// memory provider sets `mems`, device providers set `devices` and `env` and
/// leave `mems` empty (the kubelet's Device Manager never touches
/// `cpuset.mems`; a device's NUMA node reaches the memory placement through
/// the merged hint). An environment variable that two providers set for the
/// same container with different values is a conflict the host refuses.
///
/// Start from [`Allocation::default`] and set fields, or use the `with_*`
/// methods.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Allocation {
    /// CPUs for the container's cpuset (empty: this provider sets none).
    #[serde(default)]
    pub cpus: CpuSet,
    /// True when `cpus` are exclusive to this container.
    #[serde(default)]
    pub exclusive: bool,
    /// NUMA nodes for the container's memory (`cpuset.mems`; empty: none set).
    #[serde(default)]
    pub mems: NumaMask,
    /// Device ids by resource name.
    #[serde(default)]
    pub devices: BTreeMap<String, Vec<String>>,
    /// Environment variables for the container.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl Allocation {
    /// With `cpus`, exclusive to the container or not.
    pub fn with_cpus(mut self, cpus: CpuSet, exclusive: bool) -> Self {
        self.cpus = cpus;
        self.exclusive = exclusive;
        self
    }

    /// With memory nodes `mems`.
    pub fn with_mems(mut self, mems: NumaMask) -> Self {
        self.mems = mems;
        self
    }

    /// With the devices `ids` of `resource`.
    pub fn with_devices(mut self, resource: impl Into<String>, ids: Vec<String>) -> Self {
        self.devices.insert(resource.into(), ids);
        self
    }

    /// With the environment variable `name=value`.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }
}
