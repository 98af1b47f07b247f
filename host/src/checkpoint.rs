//! Persisting admitted pods and provider state (`state_dir`, `--state-dir`).
//!
//! The daemon (`topomgr serve`) and the one-shot commands (`admit
//! --state-dir`, `run`, `provider ... --state-dir`) share one format and one
//! lock ([`crate::state_lock`]), so they can take turns on a state directory.
//! Files are written atomically: a temporary file in the same directory,
//! fsync, rename over the old file, fsync of the directory. A crash leaves
//! either the old or the new file, never a torn one.
//!
//! # The state file
//!
//! Everything is kept in ONE file, [`STATE_FILE`], so the host's
//! pod table and every provider's state change together in one atomic rename
//! (two files could disagree after a crash between their renames, which
//! could assign a CPU twice). The file is a versioned envelope:
//!
//! ```text
//! {"format":"topomgr-state","version":1,"boot_id":"…","sha256":"<hex>","length":N}\n
//! <N bytes of body: {"pods": {uid: AdmitResult}, "providers": {name: "<hex of checkpoint bytes>"},
//!                    "attachments": {uid: {container: cgroup path}}}>
//! ```
//!
//! On restore ([`restore_state`]) the header, the length and the SHA-256 of the
//! body are verified before anything is handed to a provider; the boot id
//! tells whether the machine rebooted since; the pods' allocations are checked
//! against the discovered machine and what vanished (CPUs, NUMA nodes, PCI
//! devices, providers) is reported in [`Restored::issues`], never dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use topomgr_sdk::{CpuSet, Machine, NumaMask};

use crate::admission::{AdmitResult, Admitter};

/// Errors reading or writing a state directory; each names its path.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// An IO error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A state file that does not parse.
    #[error("{path}: corrupt state file: {reason} (move it away to start from empty state)")]
    Corrupt {
        /// The path.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A state file whose checksum or length does not match its header.
    #[error("{path}: state file is damaged: {reason}; refusing to use it (move it away to start from empty state, which forgets every admitted pod)")]
    Damaged {
        /// The path.
        path: PathBuf,
        /// What did not match.
        reason: String,
    },
    /// A state file of another format or a newer version.
    #[error("{path}: {reason}")]
    Unsupported {
        /// The path.
        path: PathBuf,
        /// What is not supported.
        reason: String,
    },
    /// A provider refused its saved state or failed to produce it.
    #[error("provider {provider:?}: {message} ({path})")]
    Provider {
        /// Provider name.
        provider: String,
        /// The provider's message.
        message: String,
        /// The state file.
        path: PathBuf,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Write `data` to `path` atomically (temp file, fsync, rename, fsync dir).
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), CheckpointError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io(dir))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(data).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(io(path))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

/// Restore the state of a one-shot command (`admit --state-dir`, `run`) from
/// the same [`STATE_FILE`] the daemon uses; what the machine no longer has is
/// logged and returned in [`Restored::issues`]. Take the
/// [`crate::state_lock::StateLock`] first.
pub fn restore(
    dir: &Path,
    admitter: &mut Admitter,
    machine: &Machine,
) -> Result<Restored, CheckpointError> {
    let restored = restore_state(dir, admitter, machine, &boot_id())?;
    for issue in &restored.issues {
        tracing::warn!(state_dir = %dir.display(), %issue, "restored state names something this machine lacks");
    }
    Ok(restored)
}

/// Save after a one-shot command, keeping the daemon's cgroup attachments.
pub fn save(
    dir: &Path,
    admitter: &Admitter,
    attachments: &Attachments,
) -> Result<(), CheckpointError> {
    save_state(dir, admitter, attachments, &boot_id())
}

/// Restore one provider (`topomgr provider NAME ... --state-dir`) from its
/// part of [`STATE_FILE`], if the file has one.
pub fn restore_provider(
    dir: &Path,
    provider: &mut dyn crate::provider::HintProvider,
) -> Result<(), CheckpointError> {
    let path = dir.join(STATE_FILE);
    let Some((_, mut body)) = read_state(&path)? else {
        return Ok(());
    };
    let Some(hex) = body.providers.remove(provider.name()) else {
        return Ok(());
    };
    let bytes = from_hex(&hex).ok_or_else(|| CheckpointError::Corrupt {
        path: path.clone(),
        reason: format!("provider {:?}: state is not hex", provider.name()),
    })?;
    provider
        .restore(&bytes)
        .map_err(|e| CheckpointError::Provider {
            provider: provider.name().to_string(),
            message: e.to_string(),
            path,
        })
}

/// Save one provider's state into [`STATE_FILE`], keeping everything else
/// the file holds (pods, other providers, attachments).
pub fn save_provider(
    dir: &Path,
    provider: &dyn crate::provider::HintProvider,
) -> Result<(), CheckpointError> {
    let path = dir.join(STATE_FILE);
    let mut body = read_state(&path)?.map(|(_, b)| b).unwrap_or_default();
    let bytes = provider
        .checkpoint()
        .map_err(|e| CheckpointError::Provider {
            provider: provider.name().to_string(),
            message: e.to_string(),
            path: path.clone(),
        })?;
    body.providers
        .insert(provider.name().to_string(), to_hex(&bytes));
    write_atomic(&path, &encode(&body, &boot_id())?)
}

/// File name of the daemon's single-file state in its state directory.
pub const STATE_FILE: &str = "state.ckpt";
/// The `format` field of the state envelope.
pub const STATE_FORMAT: &str = "topomgr-state";
/// The envelope version this build writes and reads.
pub const STATE_VERSION: u32 = 1;
/// Where Linux publishes the id of the current boot.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    version: u32,
    boot_id: String,
    sha256: String,
    length: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    pods: BTreeMap<String, AdmitResult>,
    providers: BTreeMap<String, String>,
    #[serde(default)]
    attachments: Attachments,
}

/// Containers attached to cgroups: pod uid -> container -> cgroup path
/// (relative to the cgroup root).
pub type Attachments = BTreeMap<String, BTreeMap<String, String>>;

/// The id of the running boot (`/proc/sys/kernel/random/boot_id`), or
/// `"unknown"` where the kernel does not publish one.
pub fn boot_id() -> String {
    fs::read_to_string(BOOT_ID_PATH)
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() & 1 == 1 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

fn sha256_hex(data: &[u8]) -> String {
    to_hex(&Sha256::digest(data))
}

/// Serialize the admitted pods and every provider's state into one envelope.
pub fn encode_state(
    admitter: &Admitter,
    attachments: &Attachments,
    boot_id: &str,
) -> Result<Vec<u8>, CheckpointError> {
    let mut body = Body {
        pods: admitter.pods().clone(),
        providers: BTreeMap::new(),
        attachments: attachments.clone(),
    };
    for p in admitter.providers() {
        let bytes = p.checkpoint().map_err(|e| CheckpointError::Provider {
            provider: p.name().to_string(),
            message: e.to_string(),
            path: PathBuf::from(STATE_FILE),
        })?;
        body.providers.insert(p.name().to_string(), to_hex(&bytes));
    }
    encode(&body, boot_id)
}

/// The envelope: a header line (format, version, boot id, SHA-256, length)
/// and the JSON body.
fn encode(body: &Body, boot_id: &str) -> Result<Vec<u8>, CheckpointError> {
    let body = serde_json::to_vec(body).map_err(|e| CheckpointError::Corrupt {
        path: PathBuf::from(STATE_FILE),
        reason: format!("cannot serialize the state: {e}"),
    })?;
    let header = Header {
        format: STATE_FORMAT.to_owned(),
        version: STATE_VERSION,
        boot_id: boot_id.to_owned(),
        sha256: sha256_hex(&body),
        length: body.len() as u64,
    };
    let mut out = serde_json::to_vec(&header).map_err(|e| CheckpointError::Corrupt {
        path: PathBuf::from(STATE_FILE),
        reason: format!("cannot serialize the state header: {e}"),
    })?;
    out.push(b'\n');
    out.extend_from_slice(&body);
    Ok(out)
}

/// Write the daemon's state file ([`STATE_FILE`] in `dir`) atomically.
pub fn save_state(
    dir: &Path,
    admitter: &Admitter,
    attachments: &Attachments,
    boot_id: &str,
) -> Result<(), CheckpointError> {
    let bytes = encode_state(admitter, attachments, boot_id)?;
    write_atomic(&dir.join(STATE_FILE), &bytes)
}

/// Something in restored state that the machine or the config no longer has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreIssue {
    /// CPUs allocated to a container are not online on this machine.
    VanishedCpus {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// The missing CPUs.
        cpus: CpuSet,
    },
    /// NUMA nodes of a container's `mems` do not exist on this machine.
    VanishedNumaNodes {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// The missing nodes.
        nodes: NumaMask,
    },
    /// PCI devices allocated to a container are not on this machine.
    VanishedDevices {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// Resource name.
        resource: String,
        /// The missing PCI addresses.
        ids: Vec<String>,
    },
    /// The state holds a provider that is not configured now.
    MissingProvider {
        /// Provider name.
        provider: String,
    },
}

impl fmt::Display for RestoreIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreIssue::VanishedCpus {
                pod,
                container,
                cpus,
            } => write!(
                f,
                "pod {pod:?} container {container:?}: CPUs {cpus} are allocated but not online on this machine"
            ),
            RestoreIssue::VanishedNumaNodes {
                pod,
                container,
                nodes,
            } => write!(
                f,
                "pod {pod:?} container {container:?}: NUMA nodes {nodes} are allocated but not present on this machine"
            ),
            RestoreIssue::VanishedDevices {
                pod,
                container,
                resource,
                ids,
            } => write!(
                f,
                "pod {pod:?} container {container:?}: {resource} devices {} are allocated but not present on this machine",
                ids.join(",")
            ),
            RestoreIssue::MissingProvider { provider } => write!(
                f,
                "the state holds assignments of provider {provider:?}, which is not configured; they are kept in the pod table but no provider enforces them"
            ),
        }
    }
}

/// What [`restore_state`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Restored {
    /// Whether a state file existed.
    pub found: bool,
    /// The boot id the state was written under (`None` without a file).
    pub saved_boot_id: Option<String>,
    /// Whether that boot id differs from the current one (the machine rebooted).
    pub rebooted: bool,
    /// Number of admitted pods restored.
    pub pods: usize,
    /// What the machine or config no longer has (kept, reported).
    pub issues: Vec<RestoreIssue>,
    /// The containers' cgroup attachments.
    pub attachments: Attachments,
}

fn is_pci_address(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 12
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b':',
            10 => *c == b'.',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Check restored pods against the machine: every allocated CPU online,
/// every NUMA node present, every PCI-address device id present.
pub fn check_against_machine(
    pods: &BTreeMap<String, AdmitResult>,
    machine: &Machine,
) -> Vec<RestoreIssue> {
    let online = machine.online_cpus();
    let nodes = machine.numa_mask();
    let pci: BTreeSet<&str> = machine
        .pci_devices
        .iter()
        .map(|d| d.address.as_str())
        .collect();
    let mut issues = Vec::new();
    for (uid, r) in pods {
        for c in &r.containers {
            let a = &c.allocation;
            let gone = a.cpus.difference(&online);
            if !gone.is_empty() {
                issues.push(RestoreIssue::VanishedCpus {
                    pod: uid.clone(),
                    container: c.name.clone(),
                    cpus: gone,
                });
            }
            let gone = a.mems.and_not(nodes);
            if !gone.is_empty() {
                issues.push(RestoreIssue::VanishedNumaNodes {
                    pod: uid.clone(),
                    container: c.name.clone(),
                    nodes: gone,
                });
            }
            for (resource, ids) in &a.devices {
                let gone: Vec<String> = ids
                    .iter()
                    .filter(|id| is_pci_address(id) && !pci.contains(id.as_str()))
                    .cloned()
                    .collect();
                if !gone.is_empty() {
                    issues.push(RestoreIssue::VanishedDevices {
                        pod: uid.clone(),
                        container: c.name.clone(),
                        resource: resource.clone(),
                        ids: gone,
                    });
                }
            }
        }
    }
    issues
}

/// Read and verify the envelope of `path`; `None` when the file is absent.
fn read_state(path: &Path) -> Result<Option<(Header, Body)>, CheckpointError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let damaged = |reason: String| CheckpointError::Damaged {
        path: path.to_path_buf(),
        reason,
    };
    let nl = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| damaged("no header line".to_owned()))?;
    let header: Header = serde_json::from_slice(&bytes[..nl])
        .map_err(|e| damaged(format!("unreadable header: {e}")))?;
    if header.format != STATE_FORMAT {
        return Err(CheckpointError::Unsupported {
            path: path.to_path_buf(),
            reason: format!(
                "not a topomgr state file (format {:?}, expected {STATE_FORMAT:?})",
                header.format
            ),
        });
    }
    if header.version != STATE_VERSION {
        return Err(CheckpointError::Unsupported {
            path: path.to_path_buf(),
            reason: format!(
                "state version {} is not supported by this topomgr (it reads version {STATE_VERSION}); run the topomgr that wrote it",
                header.version
            ),
        });
    }
    let body = &bytes[nl + 1..];
    if body.len() as u64 != header.length {
        return Err(damaged(format!(
            "body is {} bytes, header says {}",
            body.len(),
            header.length
        )));
    }
    let sum = sha256_hex(body);
    if sum != header.sha256 {
        return Err(damaged(format!(
            "SHA-256 of the body is {sum}, header says {}",
            header.sha256
        )));
    }
    let body: Body = serde_json::from_slice(body).map_err(|e| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(Some((header, body)))
}

/// Restore the daemon's state file from `dir` into `admitter`: verify the
/// envelope, hand each provider its bytes, install the pod table, and check
/// the pods against `machine`. Nothing is re-admitted or released.
pub fn restore_state(
    dir: &Path,
    admitter: &mut Admitter,
    machine: &Machine,
    current_boot_id: &str,
) -> Result<Restored, CheckpointError> {
    let path = dir.join(STATE_FILE);
    let Some((header, mut body)) = read_state(&path)? else {
        return Ok(Restored::default());
    };
    for p in admitter.providers_mut() {
        let Some(hex) = body.providers.remove(p.name()) else {
            continue;
        };
        let bytes = from_hex(&hex).ok_or_else(|| CheckpointError::Corrupt {
            path: path.clone(),
            reason: format!("provider {:?}: state is not hex", p.name()),
        })?;
        p.restore(&bytes).map_err(|e| CheckpointError::Provider {
            provider: p.name().to_string(),
            message: e.to_string(),
            path: path.clone(),
        })?;
    }
    let mut issues: Vec<RestoreIssue> = body
        .providers
        .into_keys()
        .map(|provider| RestoreIssue::MissingProvider { provider })
        .collect();
    issues.extend(check_against_machine(&body.pods, machine));
    let restored = Restored {
        found: true,
        rebooted: header.boot_id != current_boot_id,
        saved_boot_id: Some(header.boot_id),
        pods: body.pods.len(),
        issues,
        attachments: body.attachments,
    };
    admitter.set_pods(body.pods);
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("topomgr-ckpt-{}", std::process::id()));
        let p = dir.join("a/b.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["b.json"]);
        fs::remove_dir_all(dir).unwrap();
    }

    use topomgr_sdk::testkit;
    use topomgr_sdk::{Allocation, TopologyHint};

    use crate::policy::{NumaInfo, Policy, Scope};

    fn admitter(machine: &Machine) -> Admitter {
        let numa = NumaInfo::from_machine(machine).unwrap();
        let policy = Policy::new("best-effort", &BTreeMap::new(), numa).unwrap();
        Admitter::new(policy, Scope::Container, Vec::new())
    }

    fn pod_result(uid: &str, cpus: &str, mems: &str, devices: &[&str]) -> AdmitResult {
        let pod = testkit::guaranteed_pod(uid, &[("cpu", 2000)]);
        let mut allocation = Allocation::default()
            .with_cpus(CpuSet::parse(cpus).unwrap(), true)
            .with_mems(NumaMask::parse_list(mems).unwrap());
        if !devices.is_empty() {
            allocation.devices.insert(
                "example.com/nic".to_owned(),
                devices.iter().map(|d| d.to_string()).collect(),
            );
        }
        AdmitResult {
            pod,
            admitted: true,
            reason: None,
            message: None,
            containers: vec![crate::admission::ContainerResult {
                name: "app".to_owned(),
                hint: TopologyHint {
                    affinity: None,
                    preferred: true,
                },
                allocation,
            }],
        }
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("topomgr-ckpt-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn hex_round_trip() {
        assert_eq!(to_hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(from_hex("00ab10"), Some(vec![0, 0xab, 0x10]));
        assert_eq!(from_hex("0g"), None);
        assert_eq!(from_hex("abc"), None);
    }

    #[test]
    fn state_round_trip_reports_reboot_and_vanished_resources() {
        let machine = testkit::machine(2, 2);
        let dir = scratch("env");
        let mut a = admitter(&machine);
        let mut pods = BTreeMap::new();
        pods.insert("p1".to_owned(), pod_result("p1", "1-3", "0", &[]));
        pods.insert(
            "p2".to_owned(),
            pod_result("p2", "2,7-9", "0,2", &["0000:3b:00.1", "nic-7"]),
        );
        a.set_pods(pods.clone());
        let mut att = Attachments::new();
        att.entry("p1".to_owned())
            .or_default()
            .insert("app".to_owned(), "kubepods/p1/app".to_owned());
        save_state(&dir, &a, &att, "boot-a").unwrap();

        let mut b = admitter(&machine);
        let r = restore_state(&dir, &mut b, &machine, "boot-b").unwrap();
        assert_eq!(b.pods(), &pods);
        assert_eq!(
            r,
            Restored {
                found: true,
                saved_boot_id: Some("boot-a".to_owned()),
                rebooted: true,
                pods: 2,
                attachments: att,
                issues: vec![
                    RestoreIssue::VanishedCpus {
                        pod: "p2".to_owned(),
                        container: "app".to_owned(),
                        cpus: CpuSet::parse("7-9").unwrap(),
                    },
                    RestoreIssue::VanishedNumaNodes {
                        pod: "p2".to_owned(),
                        container: "app".to_owned(),
                        nodes: NumaMask::parse_list("2").unwrap(),
                    },
                    RestoreIssue::VanishedDevices {
                        pod: "p2".to_owned(),
                        container: "app".to_owned(),
                        resource: "example.com/nic".to_owned(),
                        ids: vec!["0000:3b:00.1".to_owned()],
                    },
                ],
            }
        );
        assert_eq!(
            r.issues[0].to_string(),
            "pod \"p2\" container \"app\": CPUs 7-9 are allocated but not online on this machine"
        );
        let same = restore_state(&dir, &mut admitter(&machine), &machine, "boot-a").unwrap();
        assert!(!same.rebooted);
        let none = restore_state(&dir.join("nowhere"), &mut admitter(&machine), &machine, "x");
        assert_eq!(none.unwrap(), Restored::default());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn damaged_or_foreign_state_is_refused() {
        let machine = testkit::machine(1, 2);
        let dir = scratch("damaged");
        let mut a = admitter(&machine);
        let mut pods = BTreeMap::new();
        pods.insert("p1".to_owned(), pod_result("p1", "1", "0", &[]));
        a.set_pods(pods);
        save_state(&dir, &a, &Attachments::new(), "boot").unwrap();
        let path = dir.join(STATE_FILE);
        let good = fs::read(&path).unwrap();

        let mut flipped = good.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0x01;
        fs::write(&path, &flipped).unwrap();
        let err = restore_state(&dir, &mut admitter(&machine), &machine, "boot").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!(
                "{}: state file is damaged: SHA-256 of the body is ",
                path.display()
            )),
            "{msg}"
        );
        assert!(msg.ends_with("; refusing to use it (move it away to start from empty state, which forgets every admitted pod)"));

        fs::write(&path, &good[..good.len() - 3]).unwrap();
        let err = restore_state(&dir, &mut admitter(&machine), &machine, "boot").unwrap_err();
        let nl = good.iter().position(|b| *b == b'\n').unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: state file is damaged: body is {} bytes, header says {}; refusing to use it (move it away to start from empty state, which forgets every admitted pod)",
                path.display(),
                good.len() - nl - 4,
                good.len() - nl - 1
            )
        );

        let newer =
            String::from_utf8(good.clone())
                .unwrap()
                .replacen("\"version\":1", "\"version\":7", 1);
        fs::write(&path, newer).unwrap();
        let err = restore_state(&dir, &mut admitter(&machine), &machine, "boot").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: state version 7 is not supported by this topomgr (it reads version 1); run the topomgr that wrote it",
                path.display()
            )
        );
        // Nothing was installed by the failed restores.
        let mut fresh = admitter(&machine);
        let _ = restore_state(&dir, &mut fresh, &machine, "boot");
        assert!(fresh.pods().is_empty());
        fs::remove_dir_all(dir).unwrap();
    }
}
