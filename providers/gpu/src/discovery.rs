//! Where the GPUs come from, in order: the configured `topology_file`, else
//! NVML, else the NVIDIA display controllers among the host's PCI devices
//! (NUMA only, no links).
//!
//! A topology file may name GPUs without PCI addresses (an `nvidia-smi topo
//! -m` capture never shows them; JSON's `pci` is optional). Such GPUs are
//! given the addresses of the machine's own NVIDIA GPUs in sysfs, in
//! address order, so that a GPU is the same device whichever source lists
//! it; when that cannot be done unambiguously they stay without one (and
//! the device toolkit holds what a pod held of them, see
//! `topomgr_sdk::devices`).
//!
//! NVML describes the host topomgr runs on. When the machine was read from
//! a recorded sysfs tree (`--sysfs-root`) that lists PCI devices but none of
//! NVML's GPUs, NVML's answer is set aside (logged at info level) and the
//! tree's own NVIDIA PCI devices are the GPUs, so what-if runs on recorded
//! machines give the same answers on hosts with and without GPUs.
//!
//! Beside the topology, each GPU's device minor, UUID and MIG devices
//! ([`crate::driver`]): from NVML where it lists the GPUs, the driver's
//! proc files under `proc_root` for GPUs NVML gives no minor and for the
//! other sources. When NVML was set aside as another machine's, the host's
//! `/proc` is too (it is read then only from a configured `proc_root`).

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use topomgr_sdk::{Machine, NumaNodeId};

use crate::config::GpuConfig;
use crate::driver::{self, DriverInfo};
use crate::nvml;
use crate::pci;
use crate::topology::GpuTopology;
use crate::topology_file::{self, TopologyFileError};

/// Which source a topology came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A topology file.
    File(PathBuf),
    /// NVML, through this library.
    Nvml(String),
    /// PCI devices in sysfs.
    Pci,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "topology file {}", p.display()),
            Source::Nvml(lib) => write!(f, "NVML ({lib})"),
            Source::Pci => f.write_str("PCI devices"),
        }
    }
}

/// GPUs that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The topology file is unreadable or malformed.
    #[error(transparent)]
    File(#[from] TopologyFileError),
    /// A GPU of the topology file is on a NUMA node the machine lacks.
    #[error("topology file {}: GPU {index} (`{id}`) is on NUMA node {numa}, which this machine does not have (nodes: {nodes})", path.display())]
    UnknownNuma {
        /// The file.
        path: PathBuf,
        /// The GPU's index.
        index: usize,
        /// Its id.
        id: String,
        /// Its NUMA node.
        numa: NumaNodeId,
        /// The machine's nodes, comma-separated.
        nodes: String,
    },
}

/// What discovery found.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The GPUs and their links.
    pub topology: GpuTopology,
    /// Where they came from.
    pub source: Source,
    /// Each GPU's device minor, UUID and MIG devices, by index, without
    /// any that two GPUs would share ([`driver::sanitize`]).
    pub driver: Vec<DriverInfo>,
}

/// The machine's GPUs, where they came from, and what the driver says of
/// each.
pub fn discover(
    config: &GpuConfig,
    config_dir: Option<&Path>,
    machine: &Machine,
) -> Result<Discovered, DiscoveryError> {
    let proc_root = config.proc_path(config_dir);
    let proc_of = |topology: &GpuTopology| driver::from_proc(&proc_root, topology.gpus());
    let done = |topology: GpuTopology, source: Source, mut driver: Vec<DriverInfo>| {
        driver::sanitize(topology.gpus(), &mut driver);
        Ok(Discovered {
            topology,
            source,
            driver,
        })
    };
    match found(config, config_dir, machine)? {
        Found::Nvml(gpus, library) => {
            let mut info = gpus.driver;
            if info.iter().any(|i| i.minor.is_none()) {
                driver::merge_minors(&mut info, &proc_of(&gpus.topology));
            }
            done(gpus.topology, Source::Nvml(library), info)
        }
        Found::File(topology, path) => {
            let info = proc_of(&topology);
            done(topology, Source::File(path), info)
        }
        Found::Pci(topology, another_machine) => {
            let info = if another_machine && config.proc_root.is_none() {
                vec![DriverInfo::default(); topology.len()]
            } else {
                proc_of(&topology)
            };
            done(topology, Source::Pci, info)
        }
    }
}

/// What [`found`] found: NVML's GPUs (and the library), a topology file's
/// (and the file), or the PCI devices' (and whether NVML described another
/// machine than the one discovered).
enum Found {
    Nvml(nvml::NvmlGpus, String),
    File(GpuTopology, PathBuf),
    Pci(GpuTopology, bool),
}

fn found(
    config: &GpuConfig,
    config_dir: Option<&Path>,
    machine: &Machine,
) -> Result<Found, DiscoveryError> {
    if let Some(path) = config.topology_path(config_dir) {
        let topology = topology_file::load(&path)?;
        let nodes = machine.numa_ids();
        for g in topology.gpus() {
            if let Some(numa) = g.numa.filter(|n| !nodes.iter().any(|m| m == n)) {
                return Err(DiscoveryError::UnknownNuma {
                    path,
                    index: g.index,
                    id: g.id.clone(),
                    numa,
                    nodes: nodes
                        .iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                });
            }
        }
        let mut topology = topology;
        pci_from_sysfs(&mut topology, machine, &path);
        return Ok(Found::File(topology, path));
    }
    let library = config
        .nvml_library
        .as_deref()
        .map_or_else(|| OsStr::new(nvml::DEFAULT_LIBRARY), Path::as_os_str);
    let numa_of = |address: &str| {
        machine
            .pci_devices
            .iter()
            .find(|d| d.address == address)
            .and_then(|d| d.numa)
    };
    let mut another_machine = false;
    match nvml::discover_gpus(library, &numa_of) {
        Ok(Some(gpus)) if describes_another_machine(&gpus.topology, machine) => {
            tracing::info!(
                library = %library.to_string_lossy(),
                gpus = gpus.topology.len(),
                "none of NVML's GPUs is among the machine's PCI devices (a recorded sysfs \
                 tree?); using the machine's own NVIDIA PCI devices"
            );
            another_machine = true;
        }
        Ok(Some(gpus)) => {
            return Ok(Found::Nvml(gpus, library.to_string_lossy().into_owned()));
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "NVML discovery failed; using PCI devices (no link information)")
        }
    }
    Ok(Found::Pci(pci::from_machine(machine), another_machine))
}

/// Gives the GPUs of a topology file that has no PCI address the addresses
/// of the machine's NVIDIA GPUs in sysfs that the file does not name: the
/// file's GPUs without one, in index order, are the remaining NVIDIA GPUs
/// in PCI address order (the order `nvidia-smi` and NVML number GPUs in,
/// which a capture's `GPU<i>` rows follow). Done only when it is
/// unambiguous: as many GPUs without an address as NVIDIA GPUs left, and
/// each pair on the same NUMA node (the file's node, when it gives one).
/// Otherwise nothing is given and a warning says why: those GPUs are known
/// by their ids alone.
fn pci_from_sysfs(topology: &mut GpuTopology, machine: &Machine, path: &Path) {
    let unnamed: Vec<(usize, Option<NumaNodeId>)> = topology
        .gpus()
        .iter()
        .filter(|g| g.pci.is_none())
        .map(|g| (g.index, g.numa))
        .collect();
    if unnamed.is_empty() {
        return;
    }
    let named: Vec<String> = topology
        .gpus()
        .iter()
        .filter_map(|g| {
            g.pci
                .as_deref()
                .and_then(topology_file::normalize_pci_address)
        })
        .collect();
    let sysfs = pci::from_machine(machine);
    let left: Vec<(&str, Option<NumaNodeId>)> = sysfs
        .gpus()
        .iter()
        .filter_map(|g| g.pci.as_deref().map(|a| (a, g.numa)))
        .filter(|(a, _)| !named.iter().any(|n| n == a))
        .collect();
    let why = if left.len() != unnamed.len() {
        Some(format!(
            "{} GPUs have no PCI address, but the machine has {} other NVIDIA GPUs",
            unnamed.len(),
            left.len()
        ))
    } else {
        unnamed
            .iter()
            .zip(&left)
            .find(|((_, numa), (_, node))| numa.is_some() && numa != node)
            .map(|((index, numa), (address, node))| {
                let node = node.map_or_else(|| "none".to_owned(), |n| n.to_string());
                format!(
                    "GPU {index} is on NUMA node {}, but the NVIDIA GPU it would be ({address}) is on node {node}",
                    numa.map(|n| n.to_string()).unwrap_or_default()
                )
            })
    };
    if let Some(why) = why {
        tracing::warn!(
            file = %path.display(),
            reason = %why,
            "the topology file's GPUs without a PCI address cannot be matched with the machine's; they are known by their ids alone"
        );
        return;
    }
    for ((index, _), (address, _)) in unnamed.iter().zip(left) {
        topology.set_pci(*index, address.to_owned());
    }
}

/// Whether NVML's GPUs belong to another machine than the one discovered:
/// the machine lists PCI devices but none of NVML's GPUs among them, as
/// when topomgr reads a recorded sysfs tree (`--sysfs-root`) on a host with
/// GPUs. NVML always describes the host it runs on; the recorded machine's
/// own GPUs are its NVIDIA PCI devices.
fn describes_another_machine(topology: &GpuTopology, machine: &Machine) -> bool {
    !topology.is_empty()
        && !machine.pci_devices.is_empty()
        && !topology.gpus().iter().any(|g| {
            g.pci
                .as_deref()
                .is_some_and(|a| machine.pci_devices.iter().any(|d| d.address == a))
        })
}

#[cfg(test)]
mod tests {
    use topomgr_sdk::{testkit, PciDevice};

    use super::*;

    fn machine() -> Machine {
        let m = testkit::machine_from_cpus(
            (0..4)
                .map(|id| {
                    topomgr_sdk::Cpu::new(id, topomgr_sdk::NumaNodeId::new(id / 2).ok())
                        .with_socket(id / 2)
                })
                .collect(),
            2,
        );
        Machine::new(
            m.numa_nodes,
            m.cpus,
            vec![PciDevice::new(
                "0000:07:00.0",
                "0x10de",
                "0x2330",
                "0x030200",
                Some(topomgr_sdk::NumaNodeId::from(1u8)),
            )
            .with_driver("nvidia")],
        )
    }

    #[test]
    fn without_file_or_nvml_the_pci_devices_are_used() {
        let config = GpuConfig {
            nvml_library: Some("/nonexistent/libnvidia-ml.so.1".into()),
            ..GpuConfig::default()
        };
        let Discovered {
            topology: t,
            source,
            ..
        } = discover(&config, None, &machine()).unwrap();
        assert_eq!(source, Source::Pci);
        assert_eq!(t.gpus()[0].id, "0000:07:00.0");
        assert_eq!(t.gpus()[0].numa, Some(NumaNodeId::from(1u8)));
    }

    #[test]
    fn a_topology_file_comes_first_and_its_numa_nodes_must_exist() {
        let dir = std::env::temp_dir().join(format!("gpu-discovery-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("ok.json"),
            r#"{"gpus": [{"index": 0, "id": "GPU-x", "numa": 0}], "links": []}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("far.json"),
            r#"{"gpus": [{"index": 0, "id": "GPU-x", "numa": 3}], "links": []}"#,
        )
        .unwrap();
        let config = |f: &str| GpuConfig {
            topology_file: Some(f.into()),
            ..GpuConfig::default()
        };
        let Discovered {
            topology: t,
            source,
            ..
        } = discover(&config("ok.json"), Some(&dir), &machine()).unwrap();
        assert_eq!(source, Source::File(dir.join("ok.json")));
        assert_eq!(t.gpus()[0].id, "GPU-x");
        let err = discover(&config("far.json"), Some(&dir), &machine()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "topology file {}: GPU 0 (`GPU-x`) is on NUMA node 3, which this machine does not have (nodes: 0,1)",
                dir.join("far.json").display()
            )
        );
        let err = discover(&config("missing.json"), Some(&dir), &machine()).unwrap_err();
        assert!(
            err.to_string().starts_with("cannot read topology file"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A machine with NVIDIA GPUs at `0000:07:00.0` (node 0), `0000:17:00.0`
    /// (node 1) and `0000:b1:00.0` (node 1), listed out of order.
    fn three_gpus() -> Machine {
        let m = machine();
        let gpu = |address: &str, node: u8| {
            PciDevice::new(
                address,
                "0x10de",
                "0x2330",
                "0x030200",
                Some(topomgr_sdk::NumaNodeId::from(node)),
            )
        };
        Machine::new(
            m.numa_nodes,
            m.cpus,
            vec![
                gpu("0000:b1:00.0", 1),
                gpu("0000:07:00.0", 0),
                gpu("0000:17:00.0", 1),
            ],
        )
    }

    fn from_file(text: &str, machine: &Machine) -> Vec<(String, Option<String>)> {
        let dir = std::env::temp_dir().join(format!(
            "gpu-discovery-pci-{}-{}",
            std::process::id(),
            text.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("t"), text).unwrap();
        let config = GpuConfig {
            topology_file: Some("t".into()),
            ..GpuConfig::default()
        };
        let t = discover(&config, Some(&dir), machine).unwrap().topology;
        let _ = std::fs::remove_dir_all(&dir);
        t.gpus()
            .iter()
            .map(|g| (g.id.clone(), g.pci.clone()))
            .collect()
    }

    /// A capture names no PCI address: its GPU<i> rows are the machine's
    /// NVIDIA GPUs in address order, when the NUMA nodes agree.
    #[test]
    fn gpus_without_pci_addresses_get_the_machines_in_address_order() {
        let capture = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n\
                       GPU0\t X \tSYS\tSYS\t0-1\t0\n\
                       GPU1\tSYS\t X \tNV2\t2-3\t1\n\
                       GPU2\tSYS\tNV2\t X \t2-3\t1\n";
        let pci = |a: &str| Some(a.to_owned());
        assert_eq!(
            from_file(capture, &three_gpus()),
            [
                ("GPU-0".to_owned(), pci("0000:07:00.0")),
                ("GPU-1".to_owned(), pci("0000:17:00.0")),
                ("GPU-2".to_owned(), pci("0000:b1:00.0")),
            ]
        );
        // JSON naming one address: the others are the remaining GPUs.
        let json = r#"{"gpus": [
            {"index": 0, "id": "a", "numa": 1, "pci": "0000:B1:00.0"},
            {"index": 1, "id": "b", "numa": 0},
            {"index": 2, "id": "c"}], "links": []}"#;
        assert_eq!(
            from_file(json, &three_gpus()),
            [
                ("a".to_owned(), pci("0000:b1:00.0")),
                ("b".to_owned(), pci("0000:07:00.0")),
                ("c".to_owned(), pci("0000:17:00.0")),
            ]
        );
        // Ambiguous: another count, or a GPU on another node than its match.
        let two = r#"{"gpus": [{"index": 0, "id": "a", "numa": 0},
            {"index": 1, "id": "b", "numa": 1}], "links": []}"#;
        assert!(from_file(two, &three_gpus())
            .iter()
            .all(|(_, p)| p.is_none()));
        let swapped = r#"{"gpus": [{"index": 0, "id": "a", "numa": 1},
            {"index": 1, "id": "b", "numa": 0}, {"index": 2, "id": "c", "numa": 1}], "links": []}"#;
        assert!(from_file(swapped, &three_gpus())
            .iter()
            .all(|(_, p)| p.is_none()));
    }
}
