//! The provider's view of one PCI device: everything the selectors, the
//! candidate rules and the `…_INFO` variable need, resolved (PF name, VF
//! index, link type) so the engine never looks at other devices.
//!
//! Each field says where the device plugin takes it from and which sysfs
//! file gives the same fact (paths relative to `/sys/bus/pci/devices/<address>`
//! unless absolute).

/// One PCI device as the SR-IOV provider sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceView {
    /// PCI address, `0000:3b:02.0` (the directory name).
    pub address: String,
    /// Vendor id as the plugin compares it: four lower-case hex digits without
    /// `0x` (`vendor` holds `0x8086`; see [`pci_id`]).
    pub vendor: String,
    /// Device id, same form (`device`).
    pub device: String,
    /// The 24-bit class code (`class`, `0x020000`; see [`class_code`]).
    pub class: u32,
    /// Bound driver: the name the `driver` link points to. A device without
    /// one is in no pool (the plugin cannot build it).
    pub driver: Option<String>,
    /// NUMA node (`numa_node`; `-1` is `None`).
    pub numa: Option<u32>,
    /// Network interface names, sorted (`net/*`).
    pub net: Vec<String>,
    /// Link type name for `linkTypes` ([`crate::link_type::link_type_name`]
    /// of `net/<first interface>/type`; when the device has no interface, that
    /// of its PF's first interface; `None` when neither has one).
    pub link_type: Option<String>,
    /// The physical function, for a virtual function (`physfn` link).
    pub pf: Option<PfLink>,
    /// ACPI index (`acpi_index`, trimmed), when the file exists.
    pub acpi_index: Option<String>,
    /// A PF with VFs enabled: `sriov_totalvfs` exists and `sriov_numvfs` > 0.
    /// Such a PF is no `netDevice` candidate.
    pub sriov_enabled: bool,
    /// One of the device's interfaces carries the host's IPv4 default route
    /// (`/proc/net/route`: destination and mask `00000000`). Such a device is
    /// no `netDevice` candidate.
    pub default_route: bool,
    /// RDMA device names, sorted (`infiniband/*`, e.g. `mlx5_2`).
    pub rdma: Vec<String>,
    /// RDMA character device names of those RDMA devices, sorted
    /// (`infiniband_verbs/*` and `infiniband_mad/*`: `uverbs2`, `umad2`,
    /// `issm2`); they live in `/dev/infiniband/`.
    pub rdma_char_devices: Vec<String>,
    /// IOMMU group number: the name the `iommu_group` link points to
    /// (`/dev/vfio/<group>` for a `vfio-pci` device).
    pub iommu_group: Option<String>,
    /// The UIO device of a `uio`/`igb_uio` bound device: the first entry of
    /// `uio/` (`uio0`, i.e. `/dev/uio0`).
    pub uio: Option<String>,
}

/// A virtual function's physical function.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PfLink {
    /// The PF's PCI address (the name the VF's `physfn` link points to); what
    /// `rootDevices` matches.
    pub address: String,
    /// The PF's first network interface name (sorted `physfn/net/*`); what
    /// `pfNames` matches. `None` when the PF has no interface.
    pub name: Option<String>,
    /// The VF index: `N` of the PF's `virtfn<N>` link that points to this
    /// device. `None` when no link does (then `#` ranges never select it).
    pub vf_index: Option<u32>,
}

/// Facts about the host outside the PCI tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostFacts {
    /// `/dev/vhost-net` exists (`needVhostNet` adds its info only then).
    pub vhost_net: bool,
    /// `/dev/infiniband/rdma_cm` exists (reported in an RDMA device's info).
    pub rdma_cm: bool,
}

impl HostFacts {
    /// The facts of the host this process runs on (its `/dev`).
    pub fn of_this_host() -> Self {
        HostFacts {
            vhost_net: std::path::Path::new("/dev/vhost-net").exists(),
            rdma_cm: std::path::Path::new("/dev/infiniband/rdma_cm").exists(),
        }
    }
}

/// The `deviceType` of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// `netDevice` (the default): network controllers, PCI class `0x02`.
    NetDevice,
    /// `accelerator`: processing accelerators, PCI class `0x12`.
    Accelerator,
}

impl DeviceType {
    /// The name in `config.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::NetDevice => "netDevice",
            DeviceType::Accelerator => "accelerator",
        }
    }

    /// Whether the plugin's device provider for this type considers `dev` at
    /// all (`AddTargetDevices` and the device constructors):
    /// * the PCI base class is the type's (`0x02` / `0x12`) and the device
    ///   has a driver;
    /// * for `netDevice`, not a PF with VFs enabled and not an interface
    ///   carrying the host's default route.
    pub fn considers(self, dev: &DeviceView) -> bool {
        let class = match self {
            DeviceType::NetDevice => 0x02,
            DeviceType::Accelerator => 0x12,
        };
        if dev.class >> 16 != class || dev.driver.is_none() {
            return false;
        }
        match self {
            DeviceType::NetDevice => !dev.sriov_enabled && !dev.default_route,
            DeviceType::Accelerator => true,
        }
    }
}

impl std::fmt::Display for DeviceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A sysfs id (`0x8086`) in the form the plugin compares (`8086`).
pub fn pci_id(sysfs: &str) -> String {
    let s = sysfs.trim();
    s.strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s)
        .to_ascii_lowercase()
}

/// A sysfs class code (`0x020000`) as a number; `None` when it is not hex.
pub fn class_code(sysfs: &str) -> Option<u32> {
    let s = sysfs.trim();
    let hex = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u32::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(class: u32, driver: Option<&str>) -> DeviceView {
        DeviceView {
            address: "0000:3b:02.0".into(),
            class,
            driver: driver.map(str::to_owned),
            ..DeviceView::default()
        }
    }

    #[test]
    fn candidates_by_class_driver_and_pf_state() {
        let net = DeviceType::NetDevice;
        let acc = DeviceType::Accelerator;
        assert!(net.considers(&dev(0x020000, Some("iavf"))));
        assert!(
            net.considers(&dev(0x020700, Some("mlx5_core"))),
            "infiniband controller"
        );
        assert!(net.considers(&dev(0x028000, Some("vfio-pci"))));
        assert!(!net.considers(&dev(0x020000, None)), "no driver");
        assert!(!net.considers(&dev(0x120000, Some("vfio-pci"))));
        assert!(!net.considers(&dev(0x030200, Some("nvidia"))));
        let pf = DeviceView {
            sriov_enabled: true,
            ..dev(0x020000, Some("ice"))
        };
        assert!(!net.considers(&pf), "PF with VFs enabled");
        let mgmt = DeviceView {
            default_route: true,
            ..dev(0x020000, Some("igb"))
        };
        assert!(!net.considers(&mgmt), "carries the default route");

        assert!(acc.considers(&dev(0x120000, Some("vfio-pci"))));
        assert!(acc.considers(&dev(0x120100, Some("dfl-pci"))));
        assert!(!acc.considers(&dev(0x120000, None)));
        assert!(!acc.considers(&dev(0x020000, Some("iavf"))));
        let accel_pf = DeviceView {
            sriov_enabled: true,
            ..dev(0x120000, Some("vfio-pci"))
        };
        assert!(acc.considers(&accel_pf), "accelerators keep PFs with VFs");
    }

    #[test]
    fn sysfs_ids_convert() {
        assert_eq!(pci_id("0x8086\n"), "8086");
        assert_eq!(pci_id("0x15B3"), "15b3");
        assert_eq!(pci_id("1889"), "1889");
        assert_eq!(class_code("0x020000"), Some(0x020000));
        assert_eq!(class_code("0x120000\n"), Some(0x120000));
        assert_eq!(class_code("zz"), None);
    }
}
