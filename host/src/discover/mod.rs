//! Machine discovery from sysfs (SPEC §4).
//!
//! [`discover`] reads a sysfs tree (the live `/sys`, or the `sys` directory of
//! a recorded tree) into a [`Machine`]; [`render_table`] prints it for people.
//! The JSON form (`topomgr topology --output json`) is the serde form of
//! [`Machine`].
//!
//! What is read, and how gaps are handled:
//! - NUMA nodes from `devices/system/node/node<N>`: `cpulist` (or `cpumap`),
//!   `meminfo` (MemTotal / MemFree, kB), `hugepages/hugepages-<size>kB/`
//!   (`nr_hugepages`, `free_hugepages`; none when absent) and `distance` (the
//!   kernel's defaults [`LOCAL_DISTANCE`] / [`REMOTE_DISTANCE`] when absent).
//!   Ids must be below 64. CPU-less memory nodes are kept. Without
//!   `devices/system/node` (a kernel without NUMA) the machine is one node 0
//!   with every CPU, the memory of `<root>/../proc/meminfo` (0 when absent)
//!   and the hugepages of `kernel/mm/hugepages`.
//! - CPUs from `devices/system/cpu/cpu<N>`: online state, socket, die, core
//!   (lowest id among the thread siblings), NUMA node, L3 cache id. Offline
//!   CPUs are listed; their topology usually is gone, so their socket and die
//!   read 0, their core is their own id and `l3` is `None`; consumers must
//!   use online CPUs only.
//! - PCI devices from `bus/pci/devices/<address>`: vendor, device, class (as
//!   sysfs writes them), `numa_node` (-1 when absent, or when it names a node
//!   the machine lacks), driver, `net/` interfaces, SR-IOV (`sriov_totalvfs`,
//!   `sriov_numvfs`, `virtfn<N>` links) and `physfn`.
//!
//! Missing optional files degrade to documented defaults; a mandatory file
//! that cannot be read, or any file with content the kernel would not write,
//! is a [`DiscoveryError`] naming the path and quoting what was found.

mod cpu;
mod error;
mod node;
mod pci;
mod sysfs;
mod table;

use std::path::Path;
use std::time::Instant;

use topomgr_sdk::{CpuSet, Machine};

pub use error::DiscoveryError;
pub use node::{LOCAL_DISTANCE, REMOTE_DISTANCE};
pub use table::render_table;

/// Read the machine's topology from the sysfs tree at `sysfs_root` (`/sys` on
/// a live system).
///
/// Node cpulists are cut down to the CPUs that have a `devices/system/cpu`
/// entry, so every CPU of a node is in [`Machine::cpus`]; every CPU's `numa`
/// and every PCI device's `numa` (unless -1) is one of
/// [`Machine::numa_nodes`].
pub fn discover(sysfs_root: &Path) -> Result<Machine, DiscoveryError> {
    let start = Instant::now();
    let dirs = cpu::cpu_dirs(sysfs_root)?;
    let cpu_ids: CpuSet = dirs.iter().map(|(id, _)| *id).collect();
    let numa_nodes = node::read_nodes(sysfs_root, &cpu_ids)?;
    let cpus = cpu::read_cpus_info(sysfs_root, &dirs, &numa_nodes)?;
    let node_ids: Vec<u32> = numa_nodes.iter().map(|n| n.id).collect();
    let pci_devices = pci::read_pci(sysfs_root, &node_ids)?;
    let machine = Machine {
        numa_nodes,
        cpus,
        pci_devices,
    };
    tracing::info!(
        sysfs_root = %sysfs_root.display(),
        numa_nodes = machine.numa_nodes.len(),
        cpus = machine.cpus.len(),
        online_cpus = machine.online_cpus().len(),
        pci_devices = machine.pci_devices.len(),
        elapsed_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
        "machine discovered"
    );
    Ok(machine)
}
