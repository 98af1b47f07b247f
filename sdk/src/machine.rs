//! [`Machine`]: what discovery found, handed to every provider at init.
//!
//! Its JSON form is the contract of `topomgr topology --output json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{CpuSet, NumaMask};

/// Hugepages of one size on one NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct HugePages {
    /// Pages configured (`nr_hugepages`).
    pub total: u64,
    /// Pages free (`free_hugepages`).
    pub free: u64,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaNode {
    /// Node id (ids may be sparse).
    pub id: u32,
    /// CPUs of the node (empty for CPU-less memory nodes).
    pub cpus: CpuSet,
    /// MemTotal of the node, bytes.
    pub memory_bytes: u64,
    /// MemFree of the node, bytes.
    pub memory_free_bytes: u64,
    /// Hugepages by page size; keys are `"<size>kB"` (e.g. `"2048kB"`).
    pub hugepages: BTreeMap<String, HugePages>,
    /// Distance to each node, keyed by node id (as a string in JSON).
    pub distances: BTreeMap<u32, u32>,
}

impl NumaNode {
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
#[serde(deny_unknown_fields)]
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
    /// NUMA node of the CPU.
    pub numa: u32,
    /// L3 (uncore) cache id, when known.
    pub l3: Option<u32>,
}

/// SR-IOV capability of a physical function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sriov {
    /// `sriov_totalvfs`.
    pub total_vfs: u32,
    /// `sriov_numvfs`.
    pub num_vfs: u32,
    /// PCI addresses of the virtual functions.
    pub vfs: Vec<String>,
}

/// One PCI device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PciDevice {
    /// PCI address (`0000:3b:00.0`).
    pub address: String,
    /// Vendor id, as in sysfs (`"0x10de"`).
    pub vendor: String,
    /// Device id, as in sysfs (`"0x20b0"`).
    pub device: String,
    /// Class code, as in sysfs (`"0x030200"`).
    pub class: String,
    /// NUMA node, `-1` when the device has none.
    pub numa: i32,
    /// Bound driver, if any.
    pub driver: Option<String>,
    /// Network interface names.
    pub net: Vec<String>,
    /// SR-IOV capability of a physical function.
    pub sriov: Option<Sriov>,
    /// Parent physical function of a virtual function.
    pub physfn: Option<String>,
}

/// Everything discovery found about the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// NUMA nodes, ascending by id.
    pub numa_nodes: Vec<NumaNode>,
    /// Logical CPUs, ascending by id.
    pub cpus: Vec<Cpu>,
    /// PCI devices, ascending by address.
    pub pci_devices: Vec<PciDevice>,
}

impl Machine {
    /// The mask of all NUMA nodes (the kubelet's default affinity).
    pub fn numa_mask(&self) -> NumaMask {
        self.numa_nodes.iter().fold(NumaMask::EMPTY, |m, n| {
            m.or(NumaMask::from_bits(1u64 << (n.id % 64)))
        })
    }

    /// NUMA node ids, ascending.
    pub fn numa_ids(&self) -> Vec<u32> {
        self.numa_nodes.iter().map(|n| n.id).collect()
    }

    /// The node with id `id`.
    pub fn numa_node(&self, id: u32) -> Option<&NumaNode> {
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
}
