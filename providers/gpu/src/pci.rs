//! The fallback without a topology file or NVML: NVIDIA display and 3D
//! controllers (vendor `0x10de`, PCI class `0x03xxxx`) among the PCI
//! devices the host discovered in sysfs, with their NUMA nodes and no link
//! information (every pair scores 0, so best-effort choices follow the
//! order of `available`, as upstream's would with no links).
//!
//! Without NVML there is no UUID: a GPU's device id is its PCI address
//! (`0000:07:00.0`), and GPUs are indexed in address order (NVML's default
//! order on most machines).

use topomgr_sdk::Machine;

use crate::topology::{Gpu, GpuTopology};

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: &str = "0x10de";

/// Whether a sysfs PCI class (`0x030200`) is a display controller (VGA,
/// XGA, 3D or other display).
pub fn is_display_class(class: &str) -> bool {
    class
        .strip_prefix("0x")
        .is_some_and(|c| c.len() == 6 && c.starts_with("03"))
}

/// The machine's NVIDIA GPUs as PCI devices.
pub fn from_machine(machine: &Machine) -> GpuTopology {
    let mut devices: Vec<_> = machine
        .pci_devices
        .iter()
        .filter(|d| d.vendor.eq_ignore_ascii_case(NVIDIA_VENDOR) && is_display_class(&d.class))
        .collect();
    devices.sort_by(|a, b| a.address.cmp(&b.address));
    devices.dedup_by(|a, b| a.address == b.address);
    let gpus = devices
        .iter()
        .enumerate()
        .map(|(index, d)| Gpu {
            index,
            id: d.address.clone(),
            numa: d.numa,
            pci: Some(d.address.clone()),
        })
        .collect();
    // Indices 0..n-1 and distinct non-empty addresses: always valid.
    GpuTopology::new(gpus).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "PCI GPUs do not form a topology; none used");
        GpuTopology::empty()
    })
}

#[cfg(test)]
mod tests {
    use topomgr_sdk::PciDevice;

    use super::*;

    fn dev(address: &str, vendor: &str, class: &str, numa: i32) -> PciDevice {
        PciDevice::new(
            address,
            vendor,
            "0x2330",
            class,
            topomgr_sdk::NumaNodeId::try_from(i64::from(numa)).ok(),
        )
    }

    #[test]
    fn nvidia_display_controllers_only_in_address_order() {
        let machine = Machine::new(
            Vec::new(),
            Vec::new(),
            vec![
                dev("0000:b7:00.0", "0x10de", "0x030200", 1),
                dev("0000:07:00.0", "0x10de", "0x030000", 0),
                dev("0000:07:00.1", "0x10de", "0x040300", 0), // HDMI audio
                dev("0000:0a:00.0", "0x10de", "0x068000", 0), // NVSwitch
                dev("0000:0b:00.0", "0x15b3", "0x020000", 0), // NIC
                dev("0000:c0:00.0", "0x10DE", "0x030200", -1),
            ],
        );
        let t = from_machine(&machine);
        let gpus: Vec<_> = t
            .gpus()
            .iter()
            .map(|g| (g.index, g.id.as_str(), g.numa.map(u32::from)))
            .collect();
        assert_eq!(
            gpus,
            [
                (0, "0000:07:00.0", Some(0)),
                (1, "0000:b7:00.0", Some(1)),
                (2, "0000:c0:00.0", None),
            ]
        );
        assert_eq!(t.pair_score(0, 1), 0, "no link information");
    }

    #[test]
    fn display_classes() {
        for (class, yes) in [
            ("0x030000", true),
            ("0x030200", true),
            ("0x038000", true),
            ("0x040300", false),
            ("0x0302", false),
            ("030200", false),
        ] {
            assert_eq!(is_display_class(class), yes, "{class}");
        }
    }
}
