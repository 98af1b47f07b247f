//! The snapshot of a state directory (`state_dir`, `--state-dir`): its file
//! format and how a recovered state is installed into an [`Admitter`].
//!
//! [`crate::store`] pairs the snapshot with the journal of the changes made
//! since ([`crate::journal`]); the daemon (`topomgr serve`) and the one-shot
//! commands (`admit --state-dir`, `run`, `release --state-dir`, `provider
//! ... --state-dir`) share both formats and one lock
//! ([`crate::state_lock`]), so they can take turns on a state directory. The
//! snapshot is written atomically: a temporary file in the same directory,
//! fsync, rename over the old file, fsync of the directory. A crash leaves
//! either the old or the new file, never a torn one; a failed write (a full
//! disk) removes its temporary file.
//!
//! # The state file
//!
//! The snapshot is ONE file, [`STATE_FILE`], so the host's pod table and
//! every provider's state change together in one atomic rename (two files
//! could disagree after a crash between their renames, which could assign a
//! CPU twice). The file is a versioned envelope:
//!
//! ```text
//! {"format":"topomgr-state","version":3,"boot_id":"…","sha256":"<hex>","length":N}\n
//! <N bytes of body: {"pods": {uid: AdmitResult}, "providers": {name: "<hex of checkpoint bytes>"},
//!                    "attachments": {uid: {container: cgroup path}},
//!                    "owners": {uid: {"pid", "start_time", "boot_id"}},
//!                    "pending_releases": {provider: [[uid, container], ...]},
//!                    "generation": G}>
//! ```
//!
//! `sha256` is the SHA-256 of the boot id, a NUL byte and the body (version
//! 2 files, read too, have the SHA-256 of the body alone; version 1 files
//! also lack `owners`, `pending_releases` and `generation`). `generation` links the snapshot to the journal that continues
//! it.
//!
//! On restore the header, the length and the SHA-256 of the body are
//! verified before anything is handed to a provider; the boot id tells
//! whether the machine rebooted since. Then, when the state is installed:
//! - a configured provider without saved state while pods are admitted is
//!   refused ([`StateError::MissingProviderState`]): starting it empty
//!   could hand out what those pods hold;
//! - a provider that refuses its saved state (e.g. it names CPUs that
//!   vanished) is *held* ([`topomgr_engine::admission::HeldProvider`]): its bytes are
//!   kept, admissions are refused, pods are kept and can be released; the
//!   releases are replayed into it when it restores again;
//! - the saved state of a provider that is not configured now is kept and
//!   written back unchanged, with the same replay of releases;
//! - the pod table rebuilds the [`topomgr_engine::ledger`], which reports what
//!   vanished from the machine and anything held twice, never dropping it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::Attachments;
use crate::fsutil::PathError;
use crate::journal::JournalError;
use crate::node_state::Records;
use crate::pod_owner::Owner;
use topomgr_engine::admission::{
    AdmitResult, Admitter, HeldProvider, PendingReleases, ProviderState,
};
use topomgr_engine::ledger::Finding;
use topomgr_engine::provider::PROVIDER_TIMEOUT;
use topomgr_sdk::ProviderError;

/// Errors reading or writing a state directory; each names its path.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// An IO error on a path.
    #[error("{path}: {cause}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        cause: std::io::Error,
    },
    /// A state file that does not parse.
    #[error("{path}: corrupt state file: {reason} (move it away to start from empty state)")]
    Corrupt {
        /// The path.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A state file whose checksum or length does not match its header, or
    /// whose checked body does not parse.
    #[error("{}: state file is damaged: {reason}. Nothing was changed; `topomgr state check --state-dir {dir}` shows what the directory holds, and `topomgr state recover --state-dir {dir}` backs the files up and starts from empty state, forgetting every admitted pod (it lists those it can still read)", path.display(), dir = state_dir_of(path).display())]
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
    /// A provider failed to produce its state.
    #[error("provider {provider:?}: {message} ({path})")]
    Provider {
        /// Provider name.
        provider: String,
        /// The provider's message.
        message: String,
        /// The state file.
        path: PathBuf,
    },
    /// A provider cannot give its state now: a call of it missed its
    /// deadline and has not returned (reason
    /// [`topomgr_engine::provider::PROVIDER_TIMEOUT`]).
    #[error("provider {provider:?}: {message} ({path})")]
    ProviderStuck {
        /// Provider name.
        provider: String,
        /// The provider's message.
        message: String,
        /// The state file.
        path: PathBuf,
    },
    /// The journal could not be read, started or appended to.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The journal is damaged in a way a torn append cannot explain, or does
    /// not continue the snapshot.
    #[error("{}: {what}. Nothing was changed; `topomgr state check --state-dir {dir}` shows what the directory holds, and `topomgr state recover --state-dir {dir}` {keeps}, after a backup copy, and lists what it drops", path.display(), dir = state_dir_of(path).display())]
    JournalDamaged {
        /// The journal.
        path: PathBuf,
        /// What is wrong (file offset and record sequence number included).
        what: String,
        /// What `state recover` keeps.
        keeps: String,
    },
    /// Pods are admitted but a configured provider has no saved state.
    #[error("{path}: the state holds {pods} admitted pod(s) but no saved state for provider {provider:?}, which is configured now; started empty it could hand out what those pods hold. Release those pods before enabling the provider (topomgr release --state-dir DIR UID, with the provider not configured), or configure the state directory it was saved with")]
    MissingProviderState {
        /// The state file.
        path: PathBuf,
        /// The provider.
        provider: String,
        /// Number of admitted pods.
        pods: usize,
    },
}

/// The state directory of a file in it, for the remedies messages name.
fn state_dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        cause: source,
    }
}

// By hand, not `#[from]`: the message carries the path and the cause.
impl From<PathError> for StateError {
    fn from(e: PathError) -> Self {
        StateError::Io {
            path: e.path,
            cause: e.cause,
        }
    }
}

/// File name of the snapshot in a state directory.
pub const STATE_FILE: &str = "state.ckpt";
/// The `format` field of the state envelope.
pub const STATE_FORMAT: &str = "topomgr-state";
/// The envelope version this build writes (3: the checksum covers the boot
/// id too).
pub const STATE_VERSION: u32 = 3;
/// The oldest envelope version this build reads.
pub const OLDEST_STATE_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    version: u32,
    boot_id: String,
    sha256: String,
    length: u64,
}

/// What a snapshot holds (and what recovery rebuilds from the snapshot and
/// the journal before it is installed).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Body {
    pub(crate) pods: BTreeMap<String, AdmitResult>,
    /// Provider name -> hex of its checkpoint bytes.
    pub(crate) providers: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) attachments: Attachments,
    #[serde(default)]
    pub(crate) owners: BTreeMap<String, Owner>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) pending_releases: BTreeMap<String, PendingReleases>,
    /// The journal generation that continues this snapshot.
    #[serde(default)]
    pub(crate) generation: u64,
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
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

pub(crate) fn provider_bytes(
    path: &Path,
    provider: &str,
    hex: &str,
) -> Result<Vec<u8>, StateError> {
    from_hex(hex).ok_or_else(|| StateError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("provider {provider:?}: state is not hex"),
    })
}

fn sha256_hex(data: &[u8]) -> String {
    to_hex(&Sha256::digest(data))
}

/// The checksum of an envelope of `version`: of the body, and from version
/// 3 on of the boot id before it (a changed boot id would change what a
/// restart decides about `run` pods' owners).
fn checksum(version: u32, boot_id: &str, body: &[u8]) -> String {
    if version < 3 {
        return sha256_hex(body);
    }
    let mut h = Sha256::new();
    h.update(boot_id.as_bytes());
    h.update([0]);
    h.update(body);
    to_hex(&h.finalize())
}

/// Provider `name`'s failure `e` to give or take its state in `path`:
/// [`StateError::ProviderStuck`] for a provider stuck in a call that timed
/// out, else [`StateError::Provider`].
pub(crate) fn provider_error(name: &str, e: &ProviderError, path: PathBuf) -> StateError {
    let (provider, message) = (name.to_owned(), e.to_string());
    if e.reason == PROVIDER_TIMEOUT {
        StateError::ProviderStuck {
            provider,
            message,
            path,
        }
    } else {
        StateError::Provider {
            provider,
            message,
            path,
        }
    }
}

/// One provider's part of the state: its checkpoint bytes, and the
/// releases it has not seen when it is held or not configured.
pub(crate) fn provider_part(
    name: &str,
    state: ProviderState<'_>,
) -> Result<(Vec<u8>, PendingReleases), StateError> {
    match state {
        ProviderState::Live(p) => {
            let bytes = p
                .checkpoint()
                .map_err(|e| provider_error(name, &e, PathBuf::from(STATE_FILE)))?;
            Ok((bytes, Vec::new()))
        }
        ProviderState::Held(h) => Ok((h.saved.clone(), h.pending_releases.clone())),
    }
}

/// The whole state as a snapshot body (journal `generation`).
pub(crate) fn body_of(
    admitter: &Admitter,
    records: &Records,
    generation: u64,
) -> Result<Body, StateError> {
    let mut body = Body {
        pods: admitter.pods().clone(),
        providers: BTreeMap::new(),
        attachments: records.attachments.clone(),
        owners: records.owners.clone(),
        pending_releases: BTreeMap::new(),
        generation,
    };
    for (name, state) in admitter.provider_states() {
        let (bytes, pending) = provider_part(name, state)?;
        if !pending.is_empty() {
            body.pending_releases.insert(name.to_string(), pending);
        }
        body.providers.insert(name.to_string(), to_hex(&bytes));
    }
    Ok(body)
}

/// The envelope: a header line (format, version, boot id, SHA-256, length)
/// and the JSON body.
pub(crate) fn encode(body: &Body, boot_id: &str) -> Result<Vec<u8>, StateError> {
    let body = serde_json::to_vec(body).map_err(|e| StateError::Corrupt {
        path: PathBuf::from(STATE_FILE),
        reason: format!("cannot serialize the state: {e}"),
    })?;
    let header = Header {
        format: STATE_FORMAT.to_owned(),
        version: STATE_VERSION,
        boot_id: boot_id.to_owned(),
        sha256: checksum(STATE_VERSION, boot_id, &body),
        length: body.len() as u64,
    };
    let mut out = serde_json::to_vec(&header).map_err(|e| StateError::Corrupt {
        path: PathBuf::from(STATE_FILE),
        reason: format!("cannot serialize the state header: {e}"),
    })?;
    out.push(b'\n');
    out.extend_from_slice(&body);
    Ok(out)
}

/// Something in restored state that the machine or the config no longer
/// has, or that breaks the ledger's invariant: kept and reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreIssue {
    /// What the ledger found (vanished CPUs, nodes, devices; double holds).
    Ledger(Finding),
    /// The state holds a provider that is not configured now.
    MissingProvider {
        /// Provider name.
        provider: String,
    },
    /// A configured provider refused its saved state and is held.
    ProviderHeld {
        /// Provider name.
        provider: String,
        /// Its refusal.
        reason: String,
    },
}

impl fmt::Display for RestoreIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreIssue::Ledger(finding) => finding.fmt(f),
            RestoreIssue::MissingProvider { provider } => write!(
                f,
                "the state holds assignments of provider {provider:?}, which is not configured; its state is kept unchanged (and the releases it misses are remembered) but nothing enforces it"
            ),
            RestoreIssue::ProviderHeld { provider, reason } => write!(
                f,
                "provider {provider:?} refused its saved state ({reason}); it is held: its state is kept unchanged, admitted pods are kept and can be released, new admissions are refused until topomgr starts where that state can be restored"
            ),
        }
    }
}

/// What restoring a state found ([`crate::store::Store::open`]).
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
    /// The host's records (attachments, owners).
    pub records: Records,
    /// Releases replayed into providers that missed them (the state changed:
    /// save it).
    pub replayed: usize,
}

/// Read and verify the snapshot `path`: its boot id and body, and its size;
/// `None` when the file is absent.
#[cfg(test)]
pub(crate) fn read_snapshot(path: &Path) -> Result<Option<(String, Body, u64)>, StateError> {
    match read_file(path)? {
        Some(bytes) => {
            let (boot_id, body) = decode_snapshot(path, &bytes)?;
            Ok(Some((boot_id, body, bytes.len() as u64)))
        }
        None => Ok(None),
    }
}

/// Verify and parse the bytes of snapshot `path`: its boot id and body.
pub(crate) fn decode_snapshot(path: &Path, bytes: &[u8]) -> Result<(String, Body), StateError> {
    let (header, body) = decode(path, bytes)?;
    Ok((header.boot_id, body))
}

/// The bytes of `path`; `None` when it is absent.
#[cfg(test)]
fn read_file(path: &Path) -> Result<Option<Vec<u8>>, StateError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

/// Verify and parse an envelope read from `path`.
fn decode(path: &Path, bytes: &[u8]) -> Result<(Header, Body), StateError> {
    let damaged = |reason: String| StateError::Damaged {
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
        return Err(StateError::Unsupported {
            path: path.to_path_buf(),
            reason: format!(
                "not a topomgr state file (format {:?}, expected {STATE_FORMAT:?})",
                header.format
            ),
        });
    }
    if !(OLDEST_STATE_VERSION..=STATE_VERSION).contains(&header.version) {
        return Err(StateError::Unsupported {
            path: path.to_path_buf(),
            reason: format!(
                "state version {} is not supported by this topomgr (it reads versions {OLDEST_STATE_VERSION} to {STATE_VERSION}); run the topomgr that wrote it",
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
    let sum = checksum(header.version, &header.boot_id, body);
    if sum != header.sha256 {
        return Err(damaged(format!(
            "SHA-256 of the {} is {sum}, header says {}",
            if header.version < 3 {
                "body"
            } else {
                "boot id and body"
            },
            header.sha256
        )));
    }
    let body: Body = serde_json::from_slice(body)
        .map_err(|e| damaged(format!("the body does not parse: {e}")))?;
    Ok((header, body))
}

/// Install a recovered state into `admitter`: refuse a configured provider
/// without state while pods are admitted, hand each provider its bytes
/// (holding those that refuse them, replaying the releases they missed),
/// install the pod table and rebuild the ledger. Nothing is re-admitted or
/// released. `path` names the state in errors; `saved_boot_id` is the boot
/// the state was last written in.
pub(crate) fn install(
    path: &Path,
    saved_boot_id: String,
    mut body: Body,
    admitter: &mut Admitter,
    current_boot_id: &str,
) -> Result<Restored, StateError> {
    let path = path.to_path_buf();
    if !body.pods.is_empty() {
        if let Some(p) = admitter
            .providers()
            .iter()
            .find(|p| !body.providers.contains_key(p.name()))
        {
            return Err(StateError::MissingProviderState {
                path,
                provider: p.name().to_owned(),
                pods: body.pods.len(),
            });
        }
    }
    admitter.forget_held();
    let mut saved: Vec<(Option<Vec<u8>>, PendingReleases)> = Vec::new();
    for p in admitter.providers() {
        let bytes = match body.providers.remove(p.name()) {
            Some(hex) => Some(provider_bytes(&path, p.name(), &hex)?),
            None => None,
        };
        let pending = body.pending_releases.remove(p.name()).unwrap_or_default();
        saved.push((bytes, pending));
    }
    let mut absent = Vec::new();
    for (name, hex) in std::mem::take(&mut body.providers) {
        let bytes = provider_bytes(&path, &name, &hex)?;
        let pending = body.pending_releases.remove(&name).unwrap_or_default();
        absent.push((name, bytes, pending));
    }
    let mut issues = Vec::new();
    let mut replayed = 0;
    let mut changed = Vec::new();
    for (i, (bytes, pending)) in saved.into_iter().enumerate() {
        let p = &mut admitter.providers_mut()[i];
        // Without saved state (and so without pods) the provider starts empty.
        let Some(bytes) = bytes else {
            continue;
        };
        let restored = p.restore(&bytes);
        match restored {
            Ok(_reconciled) => {
                replayed += pending.len();
                if !pending.is_empty() {
                    changed.push(p.name().to_owned());
                }
                for (uid, container) in &pending {
                    if let Err(e) = p.release(uid, container) {
                        tracing::warn!(provider = p.name(), pod = %uid, container = %container, error = %e, "replaying a release the provider missed failed");
                    }
                }
            }
            Err(e) => {
                let name = p.name().to_owned();
                tracing::warn!(provider = %name, error = %e, "provider refused its saved state; it is held");
                issues.push(RestoreIssue::ProviderHeld {
                    provider: name,
                    reason: e.message.clone(),
                });
                admitter.hold_provider(
                    i,
                    HeldProvider {
                        reason: e.message,
                        saved: bytes,
                        pending_releases: pending,
                    },
                );
            }
        }
    }
    admitter.keep_changed(&changed);
    for (name, bytes, pending) in absent {
        issues.push(RestoreIssue::MissingProvider {
            provider: name.clone(),
        });
        admitter.keep_absent(
            &name,
            HeldProvider {
                reason: "not configured".to_owned(),
                saved: bytes,
                pending_releases: pending,
            },
        );
    }
    let pods = body.pods.len();
    issues.extend(
        admitter
            .set_pods(body.pods)
            .into_iter()
            .map(RestoreIssue::Ledger),
    );
    Ok(Restored {
        found: true,
        rebooted: saved_boot_id != current_boot_id,
        saved_boot_id: Some(saved_boot_id),
        pods,
        issues,
        records: Records {
            attachments: body.attachments,
            owners: body.owners,
        },
        replayed,
    })
}
#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    use topomgr_sdk::testkit;
    use topomgr_sdk::{Allocation, CpuSet, NumaMask, TopologyHint};

    use topomgr_engine::numa::NumaInfo;
    use topomgr_engine::policy::{Policy, Scope};
    use topomgr_sdk::Machine;

    /// The snapshot alone (no journal), as `Store` writes it at compaction.
    fn save_state(
        dir: &Path,
        a: &Admitter,
        records: &Records,
        boot: &str,
    ) -> Result<(), StateError> {
        Ok(crate::fsutil::write_atomic(
            &dir.join(STATE_FILE),
            &encode(&body_of(a, records, 0)?, boot)?,
        )?)
    }

    fn restore_state(
        dir: &Path,
        a: &mut Admitter,
        _machine: &Machine,
        boot: &str,
    ) -> Result<Restored, StateError> {
        let path = dir.join(STATE_FILE);
        match read_snapshot(&path)? {
            Some((saved, body, _)) => install(&path, saved, body, a, boot),
            None => Ok(Restored::default()),
        }
    }

    fn admitter(machine: &Machine) -> Admitter {
        let numa = NumaInfo::from_machine(machine).unwrap();
        let policy = Policy::new("best-effort", &BTreeMap::new(), numa).unwrap();
        Admitter::new(machine, policy, Scope::Container, Vec::new())
    }

    fn pod_result(uid: &str, cpus: &str, mems: &str, devices: &[&str]) -> AdmitResult {
        let mut pod = testkit::guaranteed_pod(uid, &[("cpu", 2000)]);
        pod.uid = uid.to_owned();
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
            containers: vec![topomgr_engine::admission::ContainerResult {
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
        let mut records = Records::default();
        records
            .attachments
            .entry("p1".to_owned())
            .or_default()
            .insert("app".to_owned(), "kubepods/p1/app".to_owned());
        records.owners.insert(
            "p1".to_owned(),
            Owner {
                pid: 7,
                start_time: 99,
                boot_id: "boot-a".to_owned(),
            },
        );
        save_state(&dir, &a, &records, "boot-a").unwrap();

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
                records,
                replayed: 0,
                issues: vec![
                    RestoreIssue::Ledger(Finding::VanishedCpus {
                        pod: "p2".to_owned(),
                        container: "app".to_owned(),
                        cpus: CpuSet::parse("7-9").unwrap(),
                    }),
                    RestoreIssue::Ledger(Finding::VanishedNumaNodes {
                        pod: "p2".to_owned(),
                        container: "app".to_owned(),
                        nodes: NumaMask::parse_list("2").unwrap(),
                    }),
                    RestoreIssue::Ledger(Finding::VanishedDevices {
                        pod: "p2".to_owned(),
                        container: "app".to_owned(),
                        resource: "example.com/nic".to_owned(),
                        ids: vec!["0000:3b:00.1".to_owned()],
                    }),
                    RestoreIssue::Ledger(Finding::Conflict {
                        what: "CPUs 2".to_owned(),
                        holders: vec![
                            topomgr_engine::ledger::Holder {
                                pod: "p1".to_owned(),
                                label: "default/p1".to_owned(),
                                container: "app".to_owned(),
                            },
                            topomgr_engine::ledger::Holder {
                                pod: "p2".to_owned(),
                                label: "default/p2".to_owned(),
                                container: "app".to_owned(),
                            },
                        ],
                    }),
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
        save_state(&dir, &a, &Records::default(), "boot").unwrap();
        let path = dir.join(STATE_FILE);
        let good = fs::read(&path).unwrap();
        let remedy = format!(
            ". Nothing was changed; `topomgr state check --state-dir {dir}` shows what the directory holds, and `topomgr state recover --state-dir {dir}` backs the files up and starts from empty state, forgetting every admitted pod (it lists those it can still read)",
            dir = dir.display()
        );

        let mut flipped = good.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0x01;
        fs::write(&path, &flipped).unwrap();
        let err = restore_state(&dir, &mut admitter(&machine), &machine, "boot").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!(
                "{}: state file is damaged: SHA-256 of the boot id and body is ",
                path.display()
            )),
            "{msg}"
        );
        assert!(msg.ends_with(&remedy), "{msg}");

        fs::write(&path, &good[..good.len() - 3]).unwrap();
        let err = restore_state(&dir, &mut admitter(&machine), &machine, "boot").unwrap_err();
        let nl = good.iter().position(|b| *b == b'\n').unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: state file is damaged: body is {} bytes, header says {}{remedy}",
                path.display(),
                good.len() - nl - 4,
                good.len() - nl - 1
            )
        );

        let newer =
            String::from_utf8(good.clone())
                .unwrap()
                .replacen("\"version\":3", "\"version\":7", 1);
        fs::write(&path, newer).unwrap();
        let err = restore_state(&dir, &mut admitter(&machine), &machine, "boot").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: state version 7 is not supported by this topomgr (it reads versions 1 to 3); run the topomgr that wrote it",
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
