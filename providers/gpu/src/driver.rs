//! What the NVIDIA driver says of each GPU beyond the topology: the minor
//! number of its device node (`/dev/nvidia<minor>`), its UUID, and the
//! UUIDs of its MIG devices, so that a container given a GPU by device node
//! (a CDI spec's `deviceNodes`, as DRA drivers inject them) or by MIG UUID
//! (`NVIDIA_VISIBLE_DEVICES=MIG-…`) is aligned with that GPU's NUMA node.
//!
//! Read from NVML where it lists the GPUs (`nvmlDeviceGetMinorNumber`,
//! `nvmlDeviceGetMigMode`, `nvmlDeviceGetMaxMigDeviceCount`,
//! `nvmlDeviceGetMigDeviceHandleByIndex` and `nvmlDeviceGetUUID` on each MIG
//! handle: see [`crate::nvml`]), else from the driver's
//! `<proc_root>/driver/nvidia/gpus/<pci>/information` ([`read_information`]:
//! its `Device Minor:`, `GPU UUID:` and `Bus Location:` lines). The proc
//! file names no MIG device: without NVML, MIG devices are known by their
//! parent's device node only (NVIDIA's CDI specs give a MIG device its
//! parent's `/dev/nvidiaN` beside its `/dev/nvidia-caps` nodes, which are
//! not mapped here: the parent's node already names the GPU).
//!
//! # In the device toolkit
//!
//! A GPU with a minor gets the attribute
//! [`DEVICE_NODE_ATTRIBUTE`](topomgr_sdk::devices::DEVICE_NODE_ATTRIBUTE)
//! `c 195:<minor>` (195 is the character major the NVIDIA driver reserves,
//! `NV_MAJOR_DEVICE_NUMBER` in open-gpu-kernel-modules'
//! `nv-chardev-numbers.h`; minors 0-247 are GPUs, 254 and 255 the modeset
//! and control devices). Without a minor (no NVML answer, no proc file)
//! it gets none, and device nodes do not name it.
//!
//! Its UUID (where its id is not already one) and each MIG UUID are serial
//! identities of the GPU ([`Device::with_serial`](topomgr_sdk::devices::Device::with_serial)),
//! which a [`DeviceRef::Uuid`](topomgr_sdk::DeviceRef::Uuid) matches.
//! Identities are also what the host's ledger keys physical devices by
//! (issue 37): a MIG device *is* part of its parent GPU, so a pod holding
//! the whole GPU and one holding a MIG slice of it through another provider
//! that lists the slice under its MIG UUID are holding one physical device,
//! and the second is refused (and setup refuses two providers listing one
//! identity). That is the intended answer: a GPU cannot be handed out whole
//! while a slice of it is in use. Two slices of one GPU keep distinct
//! UUIDs, so such a provider's slices stay distinct from each other. An
//! attribute the matching reads was the alternative; it would have needed a
//! second matching rule in the SDK and would have left the ledger blind to
//! the slice/GPU overlap. Identities change when MIG is reconfigured; saved
//! assignments are still found by the GPU's PCI address and UUID.
//!
//! # Odd input
//!
//! A provider must not fail to load because one proc file is odd: a file
//! that cannot be read (other than missing) or parsed is logged at warn
//! level with the error, which names the file and line, and that GPU gets
//! nothing from it. A minor, UUID or MIG UUID that two GPUs would share
//! (which would make a node or UUID name two devices, or fail the toolkit's
//! one-identity-one-device check) is dropped from both, with a warning.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use topomgr_sdk::devices::normalize_pci_address;

use crate::topology::Gpu;

/// The character device major the NVIDIA driver reserves for its GPUs.
pub const NVIDIA_MAJOR: u32 = 195;

/// The largest minor of a GPU's device node (`NV_MINOR_DEVICE_NUMBER_REGULAR_MAX`).
pub const MAX_GPU_MINOR: u32 = 247;

/// The proc root when `proc_root` is not configured.
pub const DEFAULT_PROC_ROOT: &str = "/proc";

/// What the driver says of one GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverInfo {
    /// The minor number of its device node `/dev/nvidia<minor>`.
    pub minor: Option<u32>,
    /// Its UUID (`GPU-…`), where the source gives one.
    pub uuid: Option<String>,
    /// The UUIDs of its MIG devices (MIG mode enabled), in NVML's order.
    pub mig: Vec<String>,
}

impl DriverInfo {
    /// The value of the device-node attribute: `c 195:<minor>`.
    pub fn device_node(&self) -> Option<String> {
        self.minor.map(|m| format!("c {NVIDIA_MAJOR}:{m}"))
    }
}

/// A GPU's `information` file, parsed: the lines topomgr reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Information {
    /// `GPU UUID:` (absent, or `GPU-????…` while the GPU is not
    /// initialised: `None`).
    pub uuid: Option<String>,
    /// `Bus Location:`, in the sysfs form.
    pub bus_location: Option<String>,
    /// `Device Minor:`.
    pub minor: Option<u32>,
}

/// An `information` file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// Unreadable (other than missing).
    #[error("cannot read {}: {cause}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's answer.
        cause: io::Error,
    },
    /// A line that is not what the driver writes.
    #[error("{}, line {line}: {message}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// The `information` file of the GPU at `pci` under `proc_root`.
pub fn information_path(proc_root: &Path, pci: &str) -> PathBuf {
    proc_root
        .join("driver/nvidia/gpus")
        .join(pci)
        .join("information")
}

/// Reads and parses the `information` file of the GPU at `pci` (sysfs
/// form); `Ok(None)` when there is none (driver not loaded, GPU bound to
/// another driver). Its `Bus Location:` must be `pci`.
pub fn read_information(proc_root: &Path, pci: &str) -> Result<Option<Information>, ProcError> {
    let path = information_path(proc_root, pci);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(cause) => return Err(ProcError::Read { path, cause }),
    };
    let info = parse_information(&path, &text)?;
    if let Some(at) = &info.bus_location {
        if at != pci {
            let line = line_of(&text, "Bus Location").unwrap_or(0);
            return Err(ProcError::Line {
                path,
                line,
                message: format!("Bus Location is {at}, but the file is the GPU at {pci}'s"),
            });
        }
    }
    Ok(Some(info))
}

fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| l.split_once(':').is_some_and(|(k, _)| k.trim() == key))
        .map(|i| i + 1)
}

/// Parses an `information` file (`path` for messages). The driver writes
/// `Key: \t value` lines (open-gpu-kernel-modules, `nv-procfs.c`,
/// `nv_procfs_read_gpu_info`); lines of other keys are skipped, a line
/// without `:` or a repeated or malformed `Device Minor`, `GPU UUID` or
/// `Bus Location` is an error naming the line.
pub fn parse_information(path: &Path, text: &str) -> Result<Information, ProcError> {
    let mut info = Information::default();
    let mut seen: Vec<&str> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let bad = |message: String| ProcError::Line {
            path: path.to_owned(),
            line,
            message,
        };
        if raw.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = raw.split_once(':') else {
            return Err(bad(format!("{:?} is not `Key: value`", raw.trim())));
        };
        let (key, value) = (key.trim(), value.trim());
        if !matches!(key, "Device Minor" | "GPU UUID" | "Bus Location") {
            continue;
        }
        if seen.contains(&key) {
            return Err(bad(format!("{key} is given twice")));
        }
        seen.push(key);
        match key {
            "Device Minor" => {
                let minor = value
                    .parse::<u32>()
                    .ok()
                    .filter(|m| *m <= MAX_GPU_MINOR)
                    .ok_or_else(|| {
                        bad(format!(
                            "Device Minor {value:?} is not a GPU's minor number (0-{MAX_GPU_MINOR})"
                        ))
                    })?;
                info.minor = Some(minor);
            }
            "GPU UUID" => {
                // A GPU the driver has not initialised shows its UUID as
                // `?` placeholders: not known.
                let unknown = value
                    .strip_prefix("GPU-")
                    .is_some_and(|u| u.bytes().all(|b| b == b'?' || b == b'-'));
                if !unknown {
                    if !is_uuid(value) || !value.starts_with("GPU-") {
                        return Err(bad(format!("GPU UUID {value:?} is not a GPU UUID")));
                    }
                    info.uuid = Some(value.to_owned());
                }
            }
            _ => {
                let address = normalize_pci_address(value)
                    .ok_or_else(|| bad(format!("Bus Location {value:?} is not a PCI address")))?;
                info.bus_location = Some(address);
            }
        }
    }
    Ok(info)
}

/// The driver's word on each GPU of `gpus` (by index) from the proc files
/// under `proc_root`; a GPU without a PCI address or file gets nothing, an
/// odd file is logged (see the module docs).
pub fn from_proc(proc_root: &Path, gpus: &[Gpu]) -> Vec<DriverInfo> {
    gpus.iter()
        .map(|g| {
            let Some(pci) = g.pci.as_deref() else {
                return DriverInfo::default();
            };
            match read_information(proc_root, pci) {
                Ok(Some(info)) => DriverInfo {
                    minor: info.minor,
                    uuid: info.uuid,
                    mig: Vec::new(),
                },
                Ok(None) => {
                    tracing::debug!(
                        gpu = g.index,
                        file = %information_path(proc_root, pci).display(),
                        "no NVIDIA driver information file; no device node for this GPU"
                    );
                    DriverInfo::default()
                }
                Err(e) => {
                    tracing::warn!(
                        gpu = g.index,
                        error = %e,
                        "the NVIDIA driver's information file is ignored; no device node for this GPU"
                    );
                    DriverInfo::default()
                }
            }
        })
        .collect()
}

/// Fills in, for each GPU that `primary` gives no minor, the minor of
/// `fallback` (NVML's answers first, the proc file's where NVML had none).
pub fn merge_minors(primary: &mut [DriverInfo], fallback: &[DriverInfo]) {
    for (p, f) in primary.iter_mut().zip(fallback) {
        if p.minor.is_none() {
            p.minor = f.minor;
        }
    }
}

/// Drops what would make one node or UUID name two GPUs: a minor two GPUs
/// share, a UUID or MIG UUID that is another GPU's id, UUID or MIG UUID
/// (dropped from every GPU that has it), or a MIG UUID that is empty or
/// holds a comma or whitespace (ids are comma-joined in environment
/// variables). Each drop is logged at warn level. `infos` is by GPU index.
pub fn sanitize(gpus: &[Gpu], infos: &mut [DriverInfo]) {
    let mut minors: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, info) in infos.iter().enumerate() {
        if let Some(m) = info.minor {
            minors.entry(m).or_default().push(i);
        }
    }
    for (minor, holders) in minors.into_iter().filter(|(_, h)| h.len() > 1) {
        tracing::warn!(
            minor,
            gpus = ?holders,
            "GPUs report one device minor; neither is known by a device node"
        );
        for i in holders {
            infos[i].minor = None;
        }
    }

    // Every name a GPU would be known by, and the GPUs that have it.
    let mut names: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, g) in gpus.iter().enumerate() {
        let mut own: Vec<&str> = vec![g.id.as_str()];
        if let Some(info) = infos.get(i) {
            own.extend(info.uuid.as_deref());
            own.extend(info.mig.iter().map(String::as_str));
        }
        own.sort_unstable();
        own.dedup();
        for name in own {
            names.entry(name.to_owned()).or_default().push(i);
        }
    }
    let shared = |name: &str| names.get(name).is_some_and(|h| h.len() > 1);
    for (i, info) in infos.iter_mut().enumerate() {
        if let Some(u) = info.uuid.take() {
            if shared(&u) {
                tracing::warn!(gpu = i, uuid = %u, "another GPU has this UUID too; dropped");
            } else {
                info.uuid = Some(u);
            }
        }
        info.mig.retain(|u| {
            let odd = u.is_empty() || u.contains(|c: char| c == ',' || c.is_whitespace());
            if odd || shared(u) {
                tracing::warn!(
                    gpu = i,
                    mig = %u,
                    "MIG device UUID dropped: {}",
                    if odd { "not a usable id" } else { "another GPU has it too" }
                );
                return false;
            }
            true
        });
    }
}

/// Whether `id` is an NVML UUID: `GPU-` (or `MIG-` for a MIG instance)
/// and a UUID in its canonical form (8-4-4-4-12 hexadecimal digits).
pub fn is_uuid(id: &str) -> bool {
    let Some(uuid) = id.strip_prefix("GPU-").or_else(|| id.strip_prefix("MIG-")) else {
        return false;
    };
    let groups: Vec<&str> = uuid.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `information` file as the driver writes it (format of
    /// `nv_procfs_read_gpu_info`; values of an H100).
    fn h100(minor: &str) -> String {
        format!(
            "Model: \t\t NVIDIA H100 80GB HBM3\n\
             IRQ:   \t\t 10\n\
             GPU UUID: \t GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b\n\
             Video BIOS: \t 96.00.99.00.01\n\
             Bus Type: \t PCIe\n\
             DMA Size: \t 52 bits\n\
             DMA Mask: \t 0xfffffffffffff\n\
             Bus Location: \t 0000:62:00.0\n\
             Device Minor: \t {minor}\n\
             GPU Firmware: \t 535.129.03\n\
             GPU Excluded:\t No\n"
        )
    }

    #[test]
    fn the_drivers_format_is_read() {
        let info = parse_information(Path::new("i"), &h100("5")).unwrap();
        assert_eq!(
            info,
            Information {
                uuid: Some("GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b".into()),
                bus_location: Some("0000:62:00.0".into()),
                minor: Some(5),
            }
        );
        // A GPU not yet initialised: no UUID; older drivers: no minor line.
        let text =
            "Model: \t\t Tesla V100\nGPU UUID: \t GPU-????????-????-????-????-????????????\n";
        assert_eq!(
            parse_information(Path::new("i"), text).unwrap(),
            Information::default()
        );
    }

    #[test]
    fn a_bad_line_is_an_error_naming_the_file_and_line() {
        let path = Path::new("/proc/driver/nvidia/gpus/0000:62:00.0/information");
        let cases = [
            (
                h100("five"),
                "line 9: Device Minor \"five\" is not a GPU's minor number (0-247)",
            ),
            (
                h100("255"),
                "line 9: Device Minor \"255\" is not a GPU's minor number (0-247)",
            ),
            (
                h100("-1"),
                "line 9: Device Minor \"-1\" is not a GPU's minor number (0-247)",
            ),
            (
                h100("5\nDevice Minor: \t 6"),
                "line 10: Device Minor is given twice",
            ),
            (
                h100("5").replace("GPU-9221d5d1", "GPU-9221d5d"),
                "line 3: GPU UUID \"GPU-9221d5d-b60b-a624-bf14-0a1819cfda3b\" is not a GPU UUID",
            ),
            (
                h100("5").replace("0000:62:00.0", "62:00.0"),
                "line 8: Bus Location \"62:00.0\" is not a PCI address",
            ),
            (
                h100("5").replace("Bus Type: \t PCIe", "Bus Type PCIe"),
                "line 5: \"Bus Type PCIe\" is not `Key: value`",
            ),
        ];
        for (text, message) in cases {
            let err = parse_information(path, &text).unwrap_err();
            assert_eq!(err.to_string(), format!("{}, {message}", path.display()));
        }
    }

    #[test]
    fn the_file_must_be_its_directorys_gpu() {
        let root = std::env::temp_dir().join(format!("gpu-driver-proc-{}", std::process::id()));
        let write = |pci: &str, text: &str| {
            let f = information_path(&root, pci);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        };
        write("0000:62:00.0", &h100("5"));
        write("0000:63:00.0", &h100("6"));
        assert_eq!(
            read_information(&root, "0000:62:00.0")
                .unwrap()
                .unwrap()
                .minor,
            Some(5)
        );
        let err = read_information(&root, "0000:63:00.0").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{}, line 8: Bus Location is 0000:62:00.0, but the file is the GPU at 0000:63:00.0's",
                information_path(&root, "0000:63:00.0").display()
            )
        );
        assert!(read_information(&root, "0000:64:00.0").unwrap().is_none());
        let _ = std::fs::remove_dir_all(&root);
    }

    fn gpu(index: usize, id: &str) -> Gpu {
        Gpu {
            index,
            id: id.to_owned(),
            numa: None,
            pci: None,
        }
    }

    #[test]
    fn shared_minors_and_uuids_are_dropped_from_every_gpu_that_has_them() {
        let gpus = [gpu(0, "GPU-a"), gpu(1, "GPU-b"), gpu(2, "GPU-c")];
        let info = |minor: u32, uuid: Option<&str>, mig: &[&str]| DriverInfo {
            minor: Some(minor),
            uuid: uuid.map(str::to_owned),
            mig: mig.iter().map(|s| (*s).to_owned()).collect(),
        };
        let mut infos = vec![
            info(0, Some("GPU-a"), &["MIG-1", "MIG-2", "MIG x"]),
            info(0, Some("GPU-c"), &["MIG-2", "MIG-3"]),
            info(2, None, &["", "MIG-4"]),
        ];
        sanitize(&gpus, &mut infos);
        assert_eq!(
            infos,
            [
                info(0, Some("GPU-a"), &["MIG-1"]),
                info(0, None, &["MIG-3"]),
                info(2, None, &["MIG-4"]),
            ]
            .map(|mut i| {
                if i.minor == Some(0) {
                    i.minor = None;
                }
                i
            })
        );
        assert_eq!(infos[2].device_node().as_deref(), Some("c 195:2"));
    }
}
