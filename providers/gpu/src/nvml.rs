//! GPUs and links from NVML, through `nvml-wrapper`, which loads
//! `libnvidia-ml.so.1` at run time (no link-time dependency).
//!
//! What upstream (go-gpuallocator `gpuallocator/device.go` `NewDevices`,
//! `internal/links/device.go` at commit 876e7b7) reads, read the same way:
//!
//! * GPUs in NVML index order; id = UUID; PCI bus id lower-cased with the
//!   8-digit domain cut to 4 (`0000:07:00.0`, upstream's `BusID()`).
//! * NUMA node: the PCI device's `numa_node` in sysfs. The caller supplies
//!   the lookup (the provider asks the host's discovered `Machine`, which
//!   read the configured sysfs root).
//! * PCIe level of every pair: `nvmlDeviceGetTopologyCommonAncestor`
//!   (`INTERNAL` → BOARD, `SINGLE` → PIX, `MULTIPLE` → PXB, `HOSTBRIDGE` →
//!   PHB, `NODE` → NODE, `SYSTEM` → SYS).
//! * NVLinks of every pair: the active links (`nvmlDeviceGetNvLinkState`;
//!   links answering "not supported" or "invalid argument" skipped, as
//!   upstream) whose remote PCI bus id (`nvmlDeviceGetNvLinkRemotePciInfo`)
//!   is the other GPU's, at most 18.
//!
//! Beyond upstream, for [`crate::driver`]: each GPU's device minor
//! (`nvmlDeviceGetMinorNumber`) and, where its MIG mode is enabled
//! (`nvmlDeviceGetMigMode`), the UUIDs of its MIG devices
//! (`nvmlDeviceGetMaxMigDeviceCount`, then
//! `nvmlDeviceGetMigDeviceHandleByIndex` for each index, skipping those
//! without a device, and `nvmlDeviceGetUUID` on each MIG handle). These
//! never fail discovery: a GPU whose driver does not answer gets none
//! (logged), as they only add ways to name a GPU.
//!
//! # NVSwitch
//!
//! On NVSwitch machines (DGX-2, HGX A100/H100/H200) NVML reports a link's
//! remote end as the switch, so upstream counts no NVLink between any two
//! GPUs ("TODO: Handle NVSwitch semantics") while `nvidia-smi topo -m`
//! shows `NV6`/`NV12`/`NV18` for every pair. Here the links whose remote
//! device type (`nvmlDeviceGetNvLinkRemoteDeviceType`) is a switch are
//! counted per GPU, and every pair of GPUs that both have switch links is
//! credited `NV<min of their two counts>` (plus any direct links, at most
//! 18): the label nvidia-smi shows. When every available GPU has the same
//! number of switch links (a healthy machine) this adds the same score to
//! every pair, so every partition's and set's score grows by the same
//! amount and the choice is exactly upstream's; a GPU with fewer working
//! links, or none, scores lower and is paired last, where upstream would
//! not notice. Where NVML cannot tell the remote type (older drivers), no
//! switch is credited, as upstream. A remote end that is a CPU (IBM NPU)
//! is never credited.

use std::ffi::{c_uint, OsStr};
use std::path::Path;

use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use topomgr_sdk::NumaNodeId;

use crate::driver::DriverInfo;
use crate::link::{Link, PcieLevel, MAX_NVLINKS};
use crate::topology::{Gpu, GpuTopology};
use crate::topology_file::normalize_pci_address;

/// The library nvml-wrapper loads by default.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// NVML's `NVML_NVLINK_MAX_LINKS`.
const MAX_LINKS: u32 = 18;

/// `NVML_NVLINK_DEVICE_TYPE_SWITCH`.
const REMOTE_SWITCH: c_uint = 2;

/// NVML answered, but not well enough to build a topology.
#[derive(Debug, thiserror::Error)]
pub enum NvmlDiscoveryError {
    /// A call failed.
    #[error("NVML ({library}): {what}: {cause}")]
    Call {
        /// The library loaded.
        library: String,
        /// What was asked.
        what: String,
        /// NVML's answer.
        cause: NvmlError,
    },
    /// The answers do not form a topology (e.g. two GPUs with one UUID).
    #[error("NVML ({library}): {message}")]
    Invalid {
        /// The library loaded.
        library: String,
        /// What is wrong.
        message: String,
    },
}

/// The GPUs NVML reports, or `None` when NVML is not there (no library, no
/// driver, no permission): logged at debug level, the caller falls through.
/// `numa_of` maps a PCI address (`0000:07:00.0`) to its NUMA node.
pub fn discover(
    library: &OsStr,
    numa_of: &dyn Fn(&str) -> Option<NumaNodeId>,
) -> Result<Option<GpuTopology>, NvmlDiscoveryError> {
    Ok(discover_gpus(library, numa_of)?.map(|g| g.topology))
}

/// What NVML says of the machine's GPUs.
#[derive(Debug, Clone)]
pub struct NvmlGpus {
    /// The GPUs and their links.
    pub topology: GpuTopology,
    /// Each GPU's device minor and MIG devices, by index.
    pub driver: Vec<DriverInfo>,
}

/// [`discover`], with each GPU's device minor and MIG device UUIDs.
pub fn discover_gpus(
    library: &OsStr,
    numa_of: &dyn Fn(&str) -> Option<NumaNodeId>,
) -> Result<Option<NvmlGpus>, NvmlDiscoveryError> {
    let library_name = library.to_string_lossy().into_owned();
    let nvml = match Nvml::builder().lib_path(library).init() {
        Ok(nvml) => nvml,
        Err(e) => {
            tracing::debug!(library = %library_name, error = %e, "NVML not available");
            return Ok(None);
        }
    };
    let err = |what: String| {
        let library = library_name.clone();
        move |source| NvmlDiscoveryError::Call {
            library,
            what,
            cause: source,
        }
    };

    let count = nvml.device_count().map_err(err("device count".into()))?;
    let mut devices = Vec::new();
    let mut gpus = Vec::new();
    for index in 0..count {
        let device = nvml
            .device_by_index(index)
            .map_err(err(format!("GPU {index}")))?;
        let id = device.uuid().map_err(err(format!("UUID of GPU {index}")))?;
        let raw_bus = device
            .pci_info()
            .map_err(err(format!("PCI info of GPU {index}")))?
            .bus_id;
        let pci = normalize_pci_address(&raw_bus).unwrap_or_else(|| raw_bus.to_ascii_lowercase());
        let numa = numa_of(&pci);
        if numa.is_none() {
            tracing::debug!(gpu = index, pci = %pci, "no NUMA node for the GPU's PCI device");
        }
        gpus.push(Gpu {
            index: index as usize,
            id,
            numa,
            pci: Some(pci),
        });
        devices.push(device);
    }
    let links: Vec<NvLinks> = devices
        .iter()
        .enumerate()
        .map(|(i, d)| nvlinks_of(&nvml, d).map_err(err(format!("NVLinks of GPU {i}"))))
        .collect::<Result<_, _>>()?;

    let driver: Vec<DriverInfo> = devices
        .iter()
        .enumerate()
        .map(|(i, d)| driver_info(i, d))
        .collect();

    let mut topology = GpuTopology::new(gpus.clone()).map_err(|e| NvmlDiscoveryError::Invalid {
        library: library_name.clone(),
        message: e.to_string(),
    })?;
    for a in 0..devices.len() {
        for b in a + 1..devices.len() {
            let level = nvml
                .topology_common_ancestor(&devices[a], &devices[b])
                .map_err(err(format!("common ancestor of GPUs {a} and {b}")))?;
            add(&mut topology, a, b, Link::Pcie(pcie_level(level)));
            let direct = direct_links(&links, &gpus, a, b);
            let switched = match (links[a].to_switch, links[b].to_switch) {
                (0, _) | (_, 0) => 0,
                (x, y) => x.min(y),
            };
            let total = (direct + switched).min(u32::from(MAX_NVLINKS));
            if total > 0 {
                add(&mut topology, a, b, Link::NvLink(total as u8));
            }
        }
    }
    Ok(Some(NvmlGpus { topology, driver }))
}

/// `nvmlDeviceGetMigMode`'s `NVML_DEVICE_MIG_ENABLE`.
const MIG_ENABLED: u32 = 1;

/// GPU `index`'s device minor and MIG device UUIDs; what the driver does
/// not answer is left out (logged at debug level when unsupported, warn
/// otherwise).
fn driver_info(index: usize, device: &Device<'_>) -> DriverInfo {
    let log = |what: &str, e: &NvmlError| {
        if absent(e) {
            tracing::debug!(gpu = index, error = %e, "NVML: no {what}");
        } else {
            tracing::warn!(gpu = index, error = %e, "NVML: {what} not read");
        }
    };
    let minor = device
        .minor_number()
        .map_err(|e| log("device minor", &e))
        .ok();
    let mut mig = Vec::new();
    match device.mig_mode() {
        Ok(mode) if mode.current == MIG_ENABLED => match device.mig_device_count() {
            Ok(max) => {
                for m in 0..max {
                    let uuid = device.mig_device_by_index(m).and_then(|h| h.uuid());
                    match uuid {
                        Ok(uuid) => mig.push(uuid),
                        // An index without a MIG device.
                        Err(NvmlError::NotFound) => {}
                        Err(e) => {
                            log(&format!("MIG device {m}"), &e);
                            break;
                        }
                    }
                }
            }
            Err(e) => log("MIG device count", &e),
        },
        Ok(_) => {}
        Err(e) => log("MIG mode", &e),
    }
    DriverInfo {
        minor,
        uuid: None,
        mig,
    }
}

/// A NUMA lookup reading `<root>/bus/pci/devices/<address>/numa_node`
/// (`-1`, missing or unreadable: none), for callers without a discovered
/// machine (the `nvml-topology` example).
pub fn sysfs_numa(root: &Path) -> impl Fn(&str) -> Option<NumaNodeId> + '_ {
    move |address| {
        let path = root.join("bus/pci/devices").join(address).join("numa_node");
        std::fs::read_to_string(path)
            .ok()?
            .trim()
            .parse::<NumaNodeId>()
            .ok()
    }
}

/// `a` and `b` are distinct and in range, and each pair gets one link of
/// each kind: adding cannot fail.
fn add(topology: &mut GpuTopology, a: usize, b: usize, link: Link) {
    if let Err(e) = topology.add_link(a, b, link) {
        tracing::warn!(a, b, error = %e, "NVML link not recorded");
    }
}

fn pcie_level(level: TopologyLevel) -> PcieLevel {
    match level {
        TopologyLevel::Internal => PcieLevel::Board,
        TopologyLevel::Single => PcieLevel::SingleSwitch,
        TopologyLevel::Multiple => PcieLevel::MultiSwitch,
        TopologyLevel::HostBridge => PcieLevel::HostBridge,
        TopologyLevel::Node => PcieLevel::Node,
        TopologyLevel::System => PcieLevel::System,
    }
}

/// One GPU's active NVLinks.
#[derive(Debug, Default)]
struct NvLinks {
    /// Remote PCI bus id of each active link.
    remote: Vec<String>,
    /// How many of them end at an NVSwitch.
    to_switch: u32,
}

/// Whether an NVML answer means "this link is not there" (upstream skips
/// `ERROR_NOT_SUPPORTED` and `ERROR_INVALID_ARGUMENT`).
fn absent(e: &NvmlError) -> bool {
    matches!(e, NvmlError::NotSupported | NvmlError::InvalidArg)
}

fn nvlinks_of(nvml: &Nvml, device: &Device<'_>) -> Result<NvLinks, NvmlError> {
    let mut out = NvLinks::default();
    for l in 0..MAX_LINKS {
        let link = device.link_wrapper_for(l);
        match link.is_active() {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) if absent(&e) => continue,
            Err(e) => return Err(e),
        }
        let remote = match link.remote_pci_info() {
            Ok(info) => info.bus_id,
            Err(e) if absent(&e) => continue,
            Err(e) => return Err(e),
        };
        out.remote
            .push(normalize_pci_address(&remote).unwrap_or_else(|| remote.to_ascii_lowercase()));
        if remote_type(nvml, device, l) == Some(REMOTE_SWITCH) {
            out.to_switch += 1;
        }
    }
    Ok(out)
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType`, called directly: nvml-wrapper
/// 0.13's `NvLink::remote_device_type` writes the answer into a temporary
/// and always returns "unknown". `None` when the driver cannot say.
fn remote_type(nvml: &Nvml, device: &Device<'_>, link: u32) -> Option<c_uint> {
    let f = nvml
        .lib()
        .nvmlDeviceGetNvLinkRemoteDeviceType
        .as_ref()
        .ok()?;
    let mut kind: c_uint = 0xff;
    // SAFETY: `f` is NVML's `nvmlDeviceGetNvLinkRemoteDeviceType`, resolved
    // from the loaded library with its C signature; the handle comes from
    // that library's `nvmlDeviceGetHandleByIndex_v2` and `nvml` (which owns
    // the library) outlives the call; `kind` is a valid out pointer.
    let ret = unsafe { f(device.handle(), link, &mut kind) };
    (ret == 0).then_some(kind)
}

/// Direct NVLinks between GPUs `a` and `b`: the smaller of the two sides'
/// counts (a link seen from one side only is not counted twice).
fn direct_links(links: &[NvLinks], gpus: &[Gpu], a: usize, b: usize) -> u32 {
    let count = |from: usize, to: usize| {
        let target = gpus[to].pci.as_deref().unwrap_or_default();
        links[from].remote.iter().filter(|r| *r == target).count() as u32
    };
    let (ab, ba) = (count(a, b), count(b, a));
    if ab != ba {
        tracing::warn!(
            a,
            b,
            ab,
            ba,
            "NVLink counts differ between the two GPUs; using the smaller"
        );
    }
    ab.min(ba)
}

#[cfg(test)]
mod tests {
    use crate::driver::is_uuid;

    #[test]
    fn uuids_in_their_canonical_form() {
        assert!(is_uuid("GPU-8e2c1d5a-0b1c-4d3e-9f00-123456789abc"));
        assert!(is_uuid("MIG-8E2C1D5A-0B1C-4D3E-9F00-123456789ABC"));
        for not in [
            "GPU-0",
            "GPU-8e2c1d5a-0b1c-4d3e-9f00-123456789ab",
            "8e2c1d5a-0b1c-4d3e-9f00-123456789abc",
            "GPU-8e2c1d5a-0b1c-4d3e-9f00-123456789abg",
            "0000:07:00.0",
        ] {
            assert!(!is_uuid(not), "{not}");
        }
    }
}
