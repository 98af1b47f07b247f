//! Resource pools: which devices each resource advertises, as the device
//! plugin builds them (`cmd/sriovdp/manager.go` `initServers` and
//! `excludeAllocatedDevices`, `pkg/netdevice/netDeviceProvider.go`,
//! `pkg/accelerator/accelDeviceProvider.go`, `pkg/devices/host.go`):
//!
//! * resources in config order; inside a resource, its selectors in order,
//!   each over the devices its device type considers
//!   ([`DeviceType::considers`]), in PCI address order;
//! * a device goes to the first resource, and inside it to the first
//!   selector, that selects it: a later selector or resource never gets it
//!   (the plugin logs "Already allocated" and skips it). The selector that
//!   took a device decides its RDMA and vhost info;
//! * a device's NUMA node is its sysfs node, or none with
//!   `excludeTopology` (the kubelet then treats it as on any node).
//!
//! A resource whose selectors take no device has an empty pool (the plugin
//! does not register such a resource at all).

use std::collections::{BTreeMap, HashMap};

use crate::config::ResourceConfig;
use crate::device::{DeviceType, DeviceView, HostFacts};
use crate::env;
use crate::info::{device_info, DeviceInfo};

/// A device in a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolDevice {
    /// PCI address: the device id.
    pub address: String,
    /// The NUMA node advertised for it.
    pub numa: Option<u32>,
    /// Index of the selector (in the resource's list) that took it.
    pub selector: usize,
    /// Its info for the `…_INFO` variable.
    pub info: DeviceInfo,
}

/// One resource and its devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// The resource prefix.
    pub prefix: String,
    /// The resource name without prefix.
    pub name: String,
    /// The device type.
    pub device_type: DeviceType,
    /// The devices, in the order the selectors took them.
    pub devices: Vec<PoolDevice>,
}

/// A device id given to [`Pool::env`] that is not in the pool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("device {address} is not in pool {resource}")]
pub struct NotInPool {
    /// The device id.
    pub address: String,
    /// The pool's resource.
    pub resource: String,
}

impl Pool {
    /// The full resource name, `<prefix>/<name>`.
    pub fn resource(&self) -> String {
        format!("{}/{}", self.prefix, self.name)
    }

    /// The pool's device with this address.
    pub fn device(&self, address: &str) -> Option<&PoolDevice> {
        self.devices.iter().find(|d| d.address == address)
    }

    /// The environment for a container given these devices of the pool, in
    /// allocation order (see [`crate::env`]).
    pub fn env(&self, addresses: &[&str]) -> Result<BTreeMap<String, String>, NotInPool> {
        let devices = addresses
            .iter()
            .map(|a| {
                self.device(a)
                    .map(|d| (d.address.as_str(), &d.info))
                    .ok_or_else(|| NotInPool {
                        address: (*a).to_owned(),
                        resource: self.resource(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(env::variables(&self.prefix, &self.name, &devices))
    }
}

/// A device that a resource's selectors select but an earlier resource took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadowed {
    /// The device.
    pub address: String,
    /// The resource that did not get it.
    pub resource: String,
    /// The resource that has it.
    pub taken_by: String,
}

/// Every resource's pool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pools {
    /// One pool per configured resource, in config order.
    pub pools: Vec<Pool>,
    /// Devices selected by more than one resource, with who got them.
    pub shadowed: Vec<Shadowed>,
}

impl Pools {
    /// Build the pools of `resources` over the machine's `devices`.
    pub fn build(resources: &[ResourceConfig], devices: &[DeviceView], host: &HostFacts) -> Self {
        let mut sorted: Vec<&DeviceView> = devices.iter().collect();
        sorted.sort_by(|a, b| a.address.cmp(&b.address));
        let mut owner: HashMap<&str, String> = HashMap::new();
        let mut out = Pools::default();
        for resource in resources {
            let full_name = resource.full_name();
            let mut pool = Pool {
                prefix: resource.prefix.clone(),
                name: resource.name.clone(),
                device_type: resource.device_type,
                devices: Vec::new(),
            };
            for (index, selector) in resource.selectors.iter().enumerate() {
                for dev in sorted.iter().copied() {
                    if !resource.device_type.considers(dev) || !selector.matches(dev) {
                        continue;
                    }
                    if let Some(holder) = owner.get(dev.address.as_str()) {
                        if *holder != full_name {
                            tracing::warn!(
                                device = %dev.address,
                                resource = %full_name,
                                taken_by = %holder,
                                "device selected by two resources; the first in the config keeps it"
                            );
                            out.shadowed.push(Shadowed {
                                address: dev.address.clone(),
                                resource: full_name.clone(),
                                taken_by: holder.clone(),
                            });
                        }
                        continue;
                    }
                    owner.insert(&dev.address, full_name.clone());
                    pool.devices.push(PoolDevice {
                        address: dev.address.clone(),
                        numa: if resource.exclude_topology {
                            None
                        } else {
                            dev.numa
                        },
                        selector: index,
                        info: device_info(
                            dev,
                            resource.device_type,
                            selector,
                            resource.additional_info.as_ref(),
                            host,
                        ),
                    });
                }
            }
            tracing::debug!(resource = %full_name, devices = pool.devices.len(), "resource pool");
            out.pools.push(pool);
        }
        out
    }

    /// The pool of a full resource name.
    pub fn get(&self, resource: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.resource() == resource)
    }
}

#[cfg(test)]
mod tests;
