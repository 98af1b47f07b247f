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
//! `ACCELERATOR_PCI=<comma-separated addresses>`; the preferred choice puts
//! the devices on the required devices' PCI buses first.

use std::collections::BTreeMap;

use topomgr_sdk::devices::{Device, DeviceHooks, DevicePlugin, Devices};
use topomgr_sdk::{ProviderContext, ProviderError};

topomgr_sdk::provider_config! {
    struct Config {
        vendor: String,
        #[serde(default = "default_resource")]
        resource: String,
    }
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
            .map(|d| {
                Device::new(d.address.clone(), d.numa)
                    .with_pci_address(&d.address)
                    .with_attribute("class", d.class.clone())
            })
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
        // Required devices first, then the others of the required devices'
        // PCI buses, then the rest.
        let buses: Vec<&str> = must_include.iter().map(|d| bus(&d.id)).collect();
        let near = available.iter().filter(|d| buses.contains(&bus(&d.id)));
        let far = available.iter().filter(|d| !buses.contains(&bus(&d.id)));
        let mut out: Vec<String> = must_include.iter().map(|d| d.id.clone()).collect();
        for d in near.chain(far) {
            if out.len() == size {
                break;
            }
            if !out.contains(&d.id) {
                out.push(d.id.clone());
            }
        }
        Ok(out)
    }

    fn environment(
        &self,
        _resource: &str,
        devices: &[&Device],
    ) -> Result<BTreeMap<String, String>, ProviderError> {
        let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
        Ok(BTreeMap::from([(
            "ACCELERATOR_PCI".to_owned(),
            ids.join(","),
        )]))
    }
}

topomgr_sdk::export_device_plugin!(Accelerators);
