//! Machine discovery from sysfs.
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
//!   kernel's defaults, 10 to itself and 20 to the others, when absent).
//!   Ids go up to 255 (POWER9 numbers its GPU memory nodes 250-255), at
//!   most 64 nodes at once. CPU-less memory nodes are kept. Without
//!   `devices/system/node` (a kernel without NUMA) the machine is one node 0
//!   with every CPU, the memory of `<root>/../proc/meminfo` (0 when absent)
//!   and the hugepages of `kernel/mm/hugepages`.
//! - CPUs from `devices/system/cpu/cpu<N>`: online state, socket, die, core
//!   (lowest id among the thread siblings), NUMA node, L3 cache id. Offline
//!   CPUs are listed; their topology usually is gone, so their socket and die
//!   read 0, their core is their own id and `l3` is `None`; consumers must
//!   use online CPUs only. A CPU that no node's cpulist holds has no node
//!   (`numa: None`); online ones are reported at warn level (firmware with an
//!   offline NUMA node 0 does this) and never handed out exclusively.
//! - PCI devices from `bus/pci/devices/<address>`: vendor, device, class (as
//!   sysfs writes them), `numa_node` (no node when absent, -1, or naming a
//!   node the machine lacks), driver, `net/` interfaces, SR-IOV (`sriov_totalvfs`,
//!   `sriov_numvfs`, `virtfn<N>` links), `physfn` and a VF's index (the `N`
//!   of its PF's `virtfn<N>` link), and what the SR-IOV provider selects on:
//!   the first interface's link type (`net/<if>/type`), `acpi_index`, RDMA
//!   devices (`infiniband/`) and their character devices
//!   (`infiniband_verbs/`, `infiniband_mad/`), the IOMMU group (the
//!   `iommu_group` link), the UIO device (`uio/`), each absent when its file
//!   is; and whether an interface carries the IPv4 default route, from the
//!   routing table beside the tree: `<sysfs_root>/../proc/net/route`, which
//!   for the live `/sys` is `/proc/net/route` (none when absent).
//!
//! Missing optional files degrade to documented defaults; a mandatory file
//! that cannot be read, or any file with content the kernel would not write,
//! is a [`DiscoveryError`] naming the path and quoting what was found.

mod cpu;
mod error;
mod node;
mod pci;
mod route;
mod sysfs;
mod table;

use std::path::Path;
use std::time::Instant;

use topomgr_sdk::{CpuSet, Machine, NumaNodeId};

pub use error::DiscoveryError;
pub use table::{render_table, DISTANCE_MATRIX_MAX_NODES};

/// Read the machine's topology from the sysfs tree at `sysfs_root` (`/sys` on
/// a live system).
///
/// Node cpulists are cut down to the CPUs that have a `devices/system/cpu`
/// entry, so every CPU of a node is in [`Machine::cpus`]; every CPU's `numa`
/// and every PCI device's `numa` is `None` or one of [`Machine::numa_nodes`].
pub fn discover(sysfs_root: &Path) -> Result<Machine, DiscoveryError> {
    let start = Instant::now();
    let dirs = cpu::cpu_dirs(sysfs_root)?;
    let cpu_ids: CpuSet = dirs.iter().map(|(id, _)| *id).collect();
    let numa_nodes = node::read_nodes(sysfs_root, &cpu_ids)?;
    let cpus = cpu::read_cpus_info(sysfs_root, &dirs, &numa_nodes)?;
    let node_ids: Vec<NumaNodeId> = numa_nodes.iter().map(|n| n.id).collect();
    let pci_devices = pci::read_pci(sysfs_root, &node_ids)?;
    let machine = Machine::new(numa_nodes, cpus, pci_devices);
    tracing::info!(
        sysfs_root = %sysfs_root.display(),
        numa_nodes = machine.numa_nodes.len(),
        cpus = machine.cpus.len(),
        online_cpus = machine.online_cpus().len(),
        cpus_without_node = machine.cpus_without_node().len(),
        pci_devices = machine.pci_devices.len(),
        elapsed_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
        "machine discovered"
    );
    Ok(machine)
}

#[cfg(test)]
mod fuzz {
    //! `discover` on randomly corrupted copies of the example machine
    //! (`examples/machines/2s4n/sys`, ~1,000 entries): each case overwrites
    //! up to four of its files with random or sysfs-shaped text, empties or
    //! removes them, runs discovery, and restores the tree. Discovery must
    //! return (a machine or an error naming a path), never panic. 500 cases
    //! per `cargo test` (a few seconds); `PROPTEST_CASES` raises it.

    use std::fs;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use proptest::prelude::*;

    use super::discover;

    /// The example tree copied into a temp dir, removed on drop.
    struct Copy {
        dir: PathBuf,
        files: Vec<PathBuf>,
    }

    impl Drop for Copy {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    fn regular_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                regular_files(&entry.path(), out);
            } else if kind.is_file() {
                out.push(entry.path());
            }
        }
    }

    fn copy_example() -> Copy {
        let example =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/machines/2s4n/sys");
        let dir =
            std::env::temp_dir().join(format!("topomgr-discover-fuzz-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create fuzz dir");
        let status = Command::new("cp")
            .arg("-a")
            .arg(&example)
            .arg(dir.join("sys"))
            .status()
            .expect("run cp");
        assert!(status.success(), "cp -a {} failed", example.display());
        let mut files = Vec::new();
        regular_files(&dir.join("sys"), &mut files);
        files.sort();
        assert!(files.len() > 100, "the example tree has its files");
        Copy { dir, files }
    }

    #[derive(Debug, Clone)]
    enum Damage {
        Write(Vec<u8>),
        Empty,
        Remove,
    }

    fn damage() -> impl Strategy<Value = Damage> {
        prop_oneof![
            3 => "[0-9a-fx,\\- \n]{0,24}".prop_map(|s| Damage::Write(s.into_bytes())),
            2 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Damage::Write),
            1 => Just(Damage::Empty),
            1 => Just(Damage::Remove),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        #[test]
        fn corrupted_trees_never_panic(
            hits in proptest::collection::vec((any::<proptest::sample::Index>(), damage()), 1..5)
        ) {
            thread_local! {
                static COPY: Copy = copy_example();
            }
            COPY.with(|copy| {
                let mut saved = Vec::new();
                for (index, what) in &hits {
                    let path = index.get(&copy.files);
                    let Ok(original) = fs::read(path) else { continue };
                    saved.push((path.clone(), original));
                    let _ = match what {
                        Damage::Write(bytes) => fs::write(path, bytes),
                        Damage::Empty => fs::write(path, b""),
                        Damage::Remove => fs::remove_file(path),
                    };
                }
                let result = discover(&copy.dir.join("sys"));
                for (path, original) in saved {
                    fs::write(&path, original).expect("restore the file");
                }
                if let Err(e) = result {
                    let text = e.to_string();
                    prop_assert!(text.contains(copy.dir.to_str().expect("UTF-8 temp dir")), "{}", text);
                }
                Ok(())
            })?;
        }
    }
}
