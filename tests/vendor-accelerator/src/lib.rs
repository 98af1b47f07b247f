//! `vendor_accelerator`: a device provider for PCI accelerators of one
//! vendor, built outside the topomgr workspace on the SDK's device toolkit.
//!
//! Config:
//!
//! ```toml
//! [providers.accel.config]
//! vendor = "0x10de"                      # PCI vendor id, as sysfs writes it
//! resource = "example.com/accelerator"   # optional
//! ```
//!
//! Every PCI device of that vendor is one device, named by its PCI address,
//! on its NUMA node (devices without one have no topology). Containers get
//! `ACCELERATOR_PCI=<comma-separated addresses>`; the preferred choice keeps
//! devices of one PCI bus together.

use std::collections::BTreeMap;

use topomgr_sdk::devices::{Device, DeviceHooks, DevicePlugin, Devices};
use topomgr_sdk::serde::Deserialize;
use topomgr_sdk::{ProviderContext, ProviderError};

#[derive(Debug, Deserialize)]
#[serde(crate = "topomgr_sdk::serde", deny_unknown_fields)]
struct Config {
    vendor: String,
    #[serde(default = "default_resource")]
    resource: String,
}

fn default_resource() -> String {
    "example.com/accelerator".to_owned()
}

/// The PCI bus of an address (`0000:3b:00.0` -> `0000:3b`).
fn bus(address: &str) -> &str {
    address.rsplit_once(':').map_or(address, |(b, _)| b)
}

pub struct Accelerators;

impl DevicePlugin for Accelerators {
    fn new(ctx: &ProviderContext<'_>) -> Result<(Self, Devices), ProviderError> {
        let cfg: Config = ctx.config.parse()?;
        let vendor = cfg.vendor.to_ascii_lowercase();
        let devices: Vec<Device> = ctx
            .machine
            .pci_devices
            .iter()
            .filter(|d| d.vendor == vendor)
            .map(|d| Device::new(d.address.clone(), d.numa).with_attribute("class", d.class.clone()))
            .collect();
        if devices.is_empty() {
            return Err(ProviderError::config(format!(
                "vendor: no PCI device of vendor {vendor} on this machine"
            )));
        }
        topomgr_sdk::tracing::info!(resource = %cfg.resource, devices = devices.len(), "accelerators found");
        Ok((Accelerators, Devices::new().resource(cfg.resource, devices)))
    }
}

impl DeviceHooks for Accelerators {
    fn preferred_allocation(
        &mut self,
        _resource: &str,
        available: &[&Device],
        must_include: &[&Device],
        size: usize,
    ) -> Result<Vec<String>, ProviderError> {
        // Required devices first, then the rest ordered by how many
        // candidates share their bus (most first).
        let mut per_bus: BTreeMap<&str, usize> = BTreeMap::new();
        for d in available {
            *per_bus.entry(bus(&d.id)).or_default() += 1;
        }
        let mut rest: Vec<&&Device> = available
            .iter()
            .filter(|d| !must_include.iter().any(|m| m.id == d.id))
            .collect();
        rest.sort_by_key(|d| std::cmp::Reverse(per_bus[bus(&d.id)]));
        Ok(must_include.iter().chain(rest).take(size).map(|d| d.id.clone()).collect())
    }

    fn environment(
        &self,
        _resource: &str,
        devices: &[&Device],
    ) -> Result<BTreeMap<String, String>, ProviderError> {
        let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
        Ok(BTreeMap::from([("ACCELERATOR_PCI".to_owned(), ids.join(","))]))
    }
}

topomgr_sdk::export_device_plugin!(Accelerators);
