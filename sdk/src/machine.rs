//! [`Machine`]: what discovery found, handed to every provider at init.
//!
//! Its JSON form is the contract of `topomgr topology --output json`. The
//! types are `#[non_exhaustive]` and read JSON leniently: a host may add a
//! field in a patch release without breaking plugins built before it (see the
//! compatibility rule in the crate documentation). Build them with their
//! constructors and `with_*` methods.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::mask::optional_node;
use crate::{CpuSet, NumaMask, NumaNodeId};

/// Hugepages of one size on one NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct HugePages {
    /// Pages configured (`nr_hugepages`).
    pub total: u64,
    /// Pages free (`free_hugepages`).
    pub free: u64,
}

impl HugePages {
    /// `total` pages configured, `free` of them free.
    pub fn new(total: u64, free: u64) -> Self {
        HugePages { total, free }
    }
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NumaNode {
    /// Node id (ids may be sparse).
    pub id: NumaNodeId,
    /// CPUs of the node (empty for CPU-less memory nodes).
    pub cpus: CpuSet,
    /// MemTotal of the node, bytes.
    pub memory_bytes: u64,
    /// MemFree of the node, bytes.
    pub memory_free_bytes: u64,
    /// Hugepages by page size; keys are `"<size>kB"` (e.g. `"2048kB"`).
    pub hugepages: BTreeMap<String, HugePages>,
    /// Distance to each node, keyed by node id (as a string in JSON).
    pub distances: BTreeMap<NumaNodeId, u32>,
}

impl NumaNode {
    /// Node `id` with `cpus`, no memory, no hugepages and no distances.
    pub fn new(id: NumaNodeId, cpus: CpuSet) -> Self {
        NumaNode {
            id,
            cpus,
            memory_bytes: 0,
            memory_free_bytes: 0,
            hugepages: BTreeMap::new(),
            distances: BTreeMap::new(),
        }
    }

    /// With `total` bytes of memory, `free` of them free.
    pub fn with_memory(mut self, total: u64, free: u64) -> Self {
        self.memory_bytes = total;
        self.memory_free_bytes = free;
        self
    }

    /// With hugepages of `size_kb` kB: `pages` configured, all free.
    pub fn with_hugepages(mut self, size_kb: u64, pages: u64) -> Self {
        self.hugepages
            .insert(format!("{size_kb}kB"), HugePages::new(pages, pages));
        self
    }

    /// With the distance row `distances` (node id -> distance).
    pub fn with_distances(mut self, distances: BTreeMap<NumaNodeId, u32>) -> Self {
        self.distances = distances;
        self
    }

    /// Hugepage size in bytes for a key such as `"2048kB"`.
    pub fn hugepage_size_bytes(key: &str) -> Option<u64> {
        key.strip_suffix("kB")?
            .parse::<u64>()
            .ok()?
            .checked_mul(1024)
    }
}

/// One logical CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Cpu {
    /// Logical CPU id.
    pub id: u32,
    /// Whether the CPU is online.
    pub online: bool,
    /// Socket (`physical_package_id`).
    pub socket: u32,
    /// Die id within the package (0 when the kernel does not say).
    pub die: u32,
    /// Core, machine-unique: the lowest CPU id among the core's hardware threads.
    pub core: u32,
    /// NUMA node of the CPU; `None` for a CPU that no node's cpulist holds
    /// (firmware with an offline node 0). Such CPUs are never handed out
    /// exclusively.
    pub numa: Option<NumaNodeId>,
    /// L3 (uncore) cache id, when known.
    pub l3: Option<u32>,
}

impl Cpu {
    /// An online CPU `id` on node `numa`, alone in its core (`core = id`),
    /// socket 0, die 0, no L3.
    pub fn new(id: u32, numa: Option<NumaNodeId>) -> Self {
        Cpu {
            id,
            online: true,
            socket: 0,
            die: 0,
            core: id,
            numa,
            l3: None,
        }
    }

    /// With `online`.
    pub fn with_online(mut self, online: bool) -> Self {
        self.online = online;
        self
    }

    /// With socket `socket`.
    pub fn with_socket(mut self, socket: u32) -> Self {
        self.socket = socket;
        self
    }

    /// With die `die`.
    pub fn with_die(mut self, die: u32) -> Self {
        self.die = die;
        self
    }

    /// With core `core` (the lowest CPU id of the core's threads).
    pub fn with_core(mut self, core: u32) -> Self {
        self.core = core;
        self
    }

    /// With L3 cache id `l3`.
    pub fn with_l3(mut self, l3: Option<u32>) -> Self {
        self.l3 = l3;
        self
    }
}

/// SR-IOV capability of a physical function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct Sriov {
    /// `sriov_totalvfs`.
    pub total_vfs: u32,
    /// `sriov_numvfs`.
    pub num_vfs: u32,
    /// PCI addresses of the virtual functions.
    pub vfs: Vec<String>,
}

impl Sriov {
    /// A physical function with `total_vfs` possible and the virtual
    /// functions `vfs` configured.
    pub fn new(total_vfs: u32, vfs: Vec<String>) -> Self {
        Sriov {
            total_vfs,
            num_vfs: u32::try_from(vfs.len()).unwrap_or(u32::MAX),
            vfs,
        }
    }
}

/// One PCI device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PciDevice {
    /// PCI address (`0000:3b:00.0`).
    pub address: String,
    /// Vendor id, as in sysfs (`"0x10de"`).
    pub vendor: String,
    /// Device id, as in sysfs (`"0x20b0"`).
    pub device: String,
    /// Class code, as in sysfs (`"0x030200"`).
    pub class: String,
    /// NUMA node; `None` (JSON `null`) when the device has none (sysfs
    /// `numa_node` is -1). JSON input may also say `-1`.
    #[serde(deserialize_with = "optional_node::deserialize")]
    pub numa: Option<NumaNodeId>,
    /// Bound driver, if any.
    pub driver: Option<String>,
    /// Network interface names.
    pub net: Vec<String>,
    /// SR-IOV capability of a physical function.
    pub sriov: Option<Sriov>,
    /// Parent physical function of a virtual function.
    pub physfn: Option<String>,
    /// The index of a virtual function: `N` of its physical function's
    /// `virtfn<N>` link (`None`: not a VF, or no link names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vf_index: Option<u32>,
    /// The link type of the device's first network interface: the kernel's
    /// `ARPHRD_*` number in `net/<interface>/type` (1: Ethernet, 32:
    /// InfiniBand). `None`: no interface, or no `type` file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_type: Option<u16>,
    /// The firmware's ACPI index of the device (`acpi_index`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acpi_index: Option<u32>,
    /// RDMA devices of the function (`infiniband/*`, e.g. `mlx5_2`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rdma: Vec<String>,
    /// RDMA character devices of those RDMA devices (`infiniband_verbs/*`
    /// and `infiniband_mad/*`: `uverbs2`, `umad2`, `issm2`; each is
    /// `/dev/infiniband/<name>`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rdma_char_devices: Vec<String>,
    /// IOMMU group number (the `iommu_group` link; `/dev/vfio/<group>` for a
    /// device bound to `vfio-pci`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu_group: Option<u32>,
    /// The UIO device of a device bound to a UIO driver (first entry of
    /// `uio/`, e.g. `uio0`, i.e. `/dev/uio0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uio: Option<String>,
    /// One of the device's network interfaces carries the host's IPv4
    /// default route (destination and mask 0 in the routing table read by
    /// discovery: `/proc/net/route` for `/sys`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default_route: bool,
}

impl PciDevice {
    /// Device `address` with the given vendor, device and class ids (as
    /// sysfs writes them: `"0x10de"`), on `numa`; no driver, no network
    /// interfaces, no SR-IOV.
    pub fn new(
        address: impl Into<String>,
        vendor: impl Into<String>,
        device: impl Into<String>,
        class: impl Into<String>,
        numa: Option<NumaNodeId>,
    ) -> Self {
        PciDevice {
            address: address.into(),
            vendor: vendor.into(),
            device: device.into(),
            class: class.into(),
            numa,
            driver: None,
            net: Vec::new(),
            sriov: None,
            physfn: None,
            vf_index: None,
            link_type: None,
            acpi_index: None,
            rdma: Vec::new(),
            rdma_char_devices: Vec::new(),
            iommu_group: None,
            uio: None,
            default_route: false,
        }
    }

    /// With the bound driver `driver`.
    pub fn with_driver(mut self, driver: impl Into<String>) -> Self {
        self.driver = Some(driver.into());
        self
    }

    /// With the network interfaces `net`.
    pub fn with_net(mut self, net: Vec<String>) -> Self {
        self.net = net;
        self
    }

    /// With the SR-IOV capability `sriov`.
    pub fn with_sriov(mut self, sriov: Sriov) -> Self {
        self.sriov = Some(sriov);
        self
    }

    /// As a virtual function of the physical function `physfn`.
    pub fn with_physfn(mut self, physfn: impl Into<String>) -> Self {
        self.physfn = Some(physfn.into());
        self
    }

    /// As virtual function number `index` of its physical function.
    pub fn with_vf_index(mut self, index: u32) -> Self {
        self.vf_index = Some(index);
        self
    }

    /// With the link type (`ARPHRD_*` number) of its first interface.
    pub fn with_link_type(mut self, link_type: u16) -> Self {
        self.link_type = Some(link_type);
        self
    }

    /// With the ACPI index `index`.
    pub fn with_acpi_index(mut self, index: u32) -> Self {
        self.acpi_index = Some(index);
        self
    }

    /// With the RDMA devices `rdma` and their character devices `char_devices`.
    pub fn with_rdma(mut self, rdma: Vec<String>, char_devices: Vec<String>) -> Self {
        self.rdma = rdma;
        self.rdma_char_devices = char_devices;
        self
    }

    /// In IOMMU group `group`.
    pub fn with_iommu_group(mut self, group: u32) -> Self {
        self.iommu_group = Some(group);
        self
    }

    /// With the UIO device `uio` (`uio0`).
    pub fn with_uio(mut self, uio: impl Into<String>) -> Self {
        self.uio = Some(uio.into());
        self
    }

    /// Carrying the host's default route (or not).
    pub fn with_default_route(mut self, default_route: bool) -> Self {
        self.default_route = default_route;
        self
    }
}

/// Everything discovery found about the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct Machine {
    /// NUMA nodes, ascending by id.
    pub numa_nodes: Vec<NumaNode>,
    /// Logical CPUs, ascending by id.
    pub cpus: Vec<Cpu>,
    /// PCI devices, ascending by address.
    pub pci_devices: Vec<PciDevice>,
}

impl Machine {
    /// A machine of these nodes, CPUs and PCI devices (each list is sorted:
    /// nodes and CPUs by id, devices by address).
    pub fn new(
        mut numa_nodes: Vec<NumaNode>,
        mut cpus: Vec<Cpu>,
        mut pci_devices: Vec<PciDevice>,
    ) -> Self {
        numa_nodes.sort_by_key(|n| n.id);
        cpus.sort_by_key(|c| c.id);
        pci_devices.sort_by(|a, b| a.address.cmp(&b.address));
        Machine {
            numa_nodes,
            cpus,
            pci_devices,
        }
    }

    /// The mask of all NUMA nodes (the kubelet's default affinity).
    pub fn numa_mask(&self) -> NumaMask {
        self.numa_nodes.iter().map(|n| n.id).collect()
    }

    /// NUMA node ids, ascending.
    pub fn numa_ids(&self) -> Vec<NumaNodeId> {
        self.numa_nodes.iter().map(|n| n.id).collect()
    }

    /// The node with id `id`.
    pub fn numa_node(&self, id: NumaNodeId) -> Option<&NumaNode> {
        self.numa_nodes.iter().find(|n| n.id == id)
    }

    /// Online CPUs.
    pub fn online_cpus(&self) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.online)
            .map(|c| c.id)
            .collect()
    }

    /// Online CPUs that no NUMA node holds (`numa: None`): they run
    /// workloads of the shared pool but are never handed out exclusively.
    pub fn cpus_without_node(&self) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.online && c.numa.is_none())
            .map(|c| c.id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_ignores_unknown_fields_and_reads_minus_one() {
        let json = r#"{
            "numa_nodes": [{"id": 250, "cpus": "", "memory_bytes": 1, "memory_free_bytes": 1,
                            "hugepages": {}, "distances": {"250": 10}, "future": [1]}],
            "cpus": [{"id": 0, "online": true, "socket": 0, "die": 0, "core": 0, "numa": null,
                      "l3": null, "core_type": "performance"}],
            "pci_devices": [{"address": "0000:01:00.0", "vendor": "0x8086", "device": "0x1", "class": "0x020000",
                             "numa": -1, "driver": null, "net": [], "sriov": null, "physfn": null,
                             "link_speed": "100G"}],
            "added_in_a_later_sdk": {"x": 1}
        }"#;
        let m: Machine = serde_json::from_str(json).unwrap();
        let n250 = NumaNodeId::new(250).unwrap();
        assert_eq!(m.numa_ids(), vec![n250]);
        assert_eq!(m.numa_nodes[0].distances.get(&n250), Some(&10));
        assert_eq!(m.cpus[0].numa, None);
        assert_eq!(m.pci_devices[0].numa, None);
        assert_eq!(m.cpus_without_node().to_string(), "0");
        // A device without a node prints as null.
        let out = serde_json::to_value(&m.pci_devices[0]).unwrap();
        assert_eq!(out["numa"], serde_json::Value::Null);
    }

    #[test]
    fn pci_fields_added_in_0_2_are_optional_and_shown_when_set() {
        let old = r#"{"address": "0000:18:01.2", "vendor": "0x8086", "device": "0x1889",
            "class": "0x020000", "numa": 0, "driver": "vfio-pci", "net": [], "sriov": null,
            "physfn": "0000:18:00.0"}"#;
        let d: PciDevice = serde_json::from_str(old).unwrap();
        let plain = PciDevice::new(
            "0000:18:01.2",
            "0x8086",
            "0x1889",
            "0x020000",
            Some(0.into()),
        )
        .with_driver("vfio-pci")
        .with_physfn("0000:18:00.0");
        assert_eq!(d, plain);
        // Unset, the new fields are left out of the JSON.
        let mut keys: Vec<String> = serde_json::to_value(&d)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            ["address", "class", "device", "driver", "net", "numa", "physfn", "sriov", "vendor"]
        );
        let vf = plain
            .with_vf_index(2)
            .with_link_type(1)
            .with_acpi_index(7)
            .with_rdma(
                vec!["mlx5_2".into()],
                vec!["issm2".into(), "umad2".into(), "uverbs2".into()],
            )
            .with_iommu_group(16)
            .with_uio("uio0")
            .with_default_route(true);
        let v = serde_json::to_value(&vf).unwrap();
        assert_eq!(
            (
                &v["vf_index"],
                &v["link_type"],
                &v["acpi_index"],
                &v["iommu_group"],
                &v["uio"],
                &v["default_route"]
            ),
            (
                &2.into(),
                &1.into(),
                &7.into(),
                &16.into(),
                &"uio0".into(),
                &true.into()
            )
        );
        assert_eq!(v["rdma"], serde_json::json!(["mlx5_2"]));
        assert_eq!(
            v["rdma_char_devices"],
            serde_json::json!(["issm2", "umad2", "uverbs2"])
        );
        assert_eq!(serde_json::from_value::<PciDevice>(v).unwrap(), vf);
    }
}
