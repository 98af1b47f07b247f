//! [`SriovPlugin`]: the pools as the SDK device toolkit's devices, which
//! answers hints, allocation, init-container reuse, release, checkpoints
//! and the inventory exactly as the kubelet's Device Manager does for the
//! SR-IOV network device plugin.
//!
//! * One resource per pool, its devices in the pool's order, each on the
//!   NUMA node of its sysfs `numa_node`; a device without one (`-1`) or of
//!   an `excludeTopology` resource has no topology, which the kubelet (and
//!   the toolkit) treats as "any node". Each device's id and identity is
//!   its PCI address, so a device a pod holds stays that pod's when the
//!   operator renames its resource or moves it to another pool.
//! * A pool without devices is not registered (the plugin starts no server
//!   for it): it is not in the inventory, and a pod asking for it gets no
//!   hint from this provider. One warning names every such resource.
//! * `GetPreferredAllocation`: no preference, as the plugin (it answers
//!   `GetPreferredAllocationAvailable: false`), so devices go in the
//!   toolkit's order: aligned with the merged hint first.
//! * Allocation sets `PCIDEVICE_<PREFIX>_<NAME>` and its `_INFO` JSON
//!   ([`crate::env`]); the device nodes the info names (`/dev/vfio/<group>`)
//!   are for the container runtime to expose, as with the plugin.
//! * `/dev/vhost-net` and `/dev/infiniband/rdma_cm` are looked up on the
//!   host topomgr runs on ([`HostFacts`]).

use std::collections::BTreeMap;

use topomgr_sdk::devices::{Device, DeviceHooks, DevicePlugin, Devices};
use topomgr_sdk::{NumaNodeId, ProviderContext, ProviderError};

use crate::config::SriovConfig;
use crate::device::HostFacts;
use crate::discovered::device_views;
use crate::pool::{Pool, Pools};

/// The SR-IOV provider: the registered pools, for their environment.
pub struct SriovPlugin {
    pools: Vec<Pool>,
}

impl SriovPlugin {
    /// The plugin of `config` over the views of `ctx.machine`, with `host`'s
    /// facts, and the devices to register.
    pub fn build(
        ctx: &ProviderContext<'_>,
        host: &HostFacts,
    ) -> Result<(Self, Devices), ProviderError> {
        let config = SriovConfig::from_table(&ctx.config.0, ctx.config_dir)
            .map_err(|e| ProviderError::config(e.to_string()))?;
        let built = Pools::build(&config.resources, &device_views(ctx.machine), host);
        let (pools, empty): (Vec<Pool>, Vec<Pool>) =
            built.pools.into_iter().partition(|p| !p.devices.is_empty());
        if !empty.is_empty() {
            let names: Vec<String> = empty.iter().map(Pool::resource).collect();
            tracing::warn!(
                resources = %names.join(", "),
                "SR-IOV resources without a matching device on this machine are not registered"
            );
        }
        let mut devices = Devices::new();
        for pool in &pools {
            let list = pool
                .devices
                .iter()
                .map(|d| {
                    let numa = d.numa.and_then(|n| NumaNodeId::new(n).ok());
                    // Known by its PCI address: a VF that a pod holds stays
                    // its own under a renamed resource or another pool.
                    Device::new(d.address.clone(), numa).with_pci_address(&d.address)
                })
                .collect();
            devices = devices.resource(pool.resource(), list);
        }
        Ok((SriovPlugin { pools }, devices))
    }
}

impl DevicePlugin for SriovPlugin {
    fn new(ctx: &ProviderContext<'_>) -> Result<(Self, Devices), ProviderError> {
        Self::build(ctx, &HostFacts::of_this_host())
    }
}

impl DeviceHooks for SriovPlugin {
    fn environment(
        &self,
        resource: &str,
        devices: &[&Device],
    ) -> Result<BTreeMap<String, String>, ProviderError> {
        let pool = self
            .pools
            .iter()
            .find(|p| p.resource() == resource)
            .ok_or_else(|| {
                ProviderError::admission(format!(
                    "{resource} is not an SR-IOV resource of this provider"
                ))
            })?;
        let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
        pool.env(&ids)
            .map_err(|e| ProviderError::admission(e.to_string()))
    }
}

#[cfg(test)]
mod tests;
