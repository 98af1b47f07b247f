//! The snapshot of a state directory (`state_dir`, `--state-dir`): its file
//! format. [`crate::persist::image`] takes the node state as a snapshot body and
//! installs a recovered one.
//!
//! [`crate::persist::store`] pairs the snapshot with the journal of the changes made
//! since (`crate::persist::journal`); the daemon (`topomgr serve`) and the one-shot
//! commands (`admit --state-dir`, `run`, `release --state-dir`, `provider
//! ... --state-dir`) share both formats and one lock
//! ([`crate::locks::state_lock`]), so they can take turns on a state directory. The
//! snapshot is written atomically: a temporary file in the same directory,
//! fsync, rename over the old file, fsync of the directory. A crash leaves
//! either the old or the new file, never a torn one; a failed write (a full
//! disk) removes its temporary file.
//!
//! # The state file
//!
//! The snapshot is ONE file, `STATE_FILE`, so the host's pod table and
//! every provider's state change together in one atomic rename (two files
//! could disagree after a crash between their renames, which could assign a
//! CPU twice). The file is a versioned envelope:
//!
//! ```text
//! {"format":"topomgr-state","version":4,"boot_id":"…","sha256":"<hex>","length":N}\n
//! <N bytes of body: {"pods": {uid: admitted pod}, "providers": {name: "<hex of checkpoint bytes>"},
//!                    "attachments": {uid: {container: cgroup path}},
//!                    "owners": {uid: {"kind": "process"|"container", ...}},
//!                    "pending_releases": {provider: [[uid, container], ...]},
//!                    "generation": G}>
//! ```
//!
//! The body is the record schema's `StateBody` (`crate::persist::v1`),
//! never an engine or API type.
//!
//! Version 4 is version 3 whose directory keeps the acknowledgements of its
//! journal (`crate::persist::ack`): the store checks the journal against
//! them, and a journal they name must be there. Version 3 directories (no
//! acknowledgements) are read as before and never appended to: the next
//! change writes a version 4 snapshot.
//!
//! Version 1 files (without `owners`, `pending_releases`, `generation`) are
//! read too, and so are owners saved without `kind` (process owners,
//! before containers could own pods; [`crate::state::pod_owner::Owner`]).
//! `sha256` is the SHA-256 of the boot id, a NUL byte and the body (version
//! 1 and 2 files have the SHA-256 of the body alone). `generation` links
//! the snapshot to the journal that continues it.
//!
//! On restore the header, the length and the SHA-256 of the body are
//! verified (`read_snapshot`) before anything is handed to a provider;
//! the boot id tells whether the machine rebooted since.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::fsutil::PathError;
use crate::persist::journal::JournalError;
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
    /// State that cannot be written or read back as it should (a checked
    /// file whose content still does not parse, a record that cannot be
    /// serialized).
    #[error("{}: {reason}. `topomgr state check --state-dir {dir}` shows what the directory holds", path.display(), dir = state_dir_of(path).display())]
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
pub(crate) const STATE_FILE: &str = "state.ckpt";
/// The `format` field of the state envelope.
pub(crate) const STATE_FORMAT: &str = "topomgr-state";
/// The envelope version this build writes (3: the checksum covers the boot
/// id too; 4: the directory keeps `crate::persist::ack::ACK_FILE`, how far
/// its journal was acknowledged, and a journal it names must be there).
pub(crate) const STATE_VERSION: u32 = 4;
/// The first envelope version whose directory keeps the acknowledgements.
pub(crate) const ACKED_STATE_VERSION: u32 = 4;
/// The oldest envelope version this build reads.
pub(crate) const OLDEST_STATE_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    version: u32,
    boot_id: String,
    sha256: String,
    length: u64,
}

/// What a snapshot holds, in the node's types.
pub(crate) use crate::persist::Body;

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

/// The envelope: a header line (format, version, boot id, SHA-256, length)
/// and the JSON body.
pub(crate) fn encode(body: &Body, boot_id: &str) -> Result<Vec<u8>, StateError> {
    encode_version(STATE_VERSION, body, boot_id)
}

/// The envelope of `version` (3 or later: an older one's checksum differs).
pub(crate) fn encode_version(
    version: u32,
    body: &Body,
    boot_id: &str,
) -> Result<Vec<u8>, StateError> {
    let body = crate::persist::body_to_json(body).map_err(|e| StateError::Corrupt {
        path: PathBuf::from(STATE_FILE),
        reason: format!("cannot serialize the state: {e}"),
    })?;
    let header = Header {
        format: STATE_FORMAT.to_owned(),
        version,
        boot_id: boot_id.to_owned(),
        sha256: checksum(version, boot_id, &body),
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

/// [`decode_snapshot`], with the envelope's version.
pub(crate) fn decode_versioned(
    path: &Path,
    bytes: &[u8],
) -> Result<(u32, String, Body), StateError> {
    let (header, body) = decode(path, bytes)?;
    Ok((header.version, header.boot_id, body))
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
    let body = crate::persist::body_from_json(body)
        .map_err(|e| damaged(format!("the body does not parse: {e}")))?;
    Ok((header, body))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    use topomgr_engine::admission::{AdmitResult, ContainerResult};
    use topomgr_sdk::{testkit, Allocation, CpuSet, TopologyHint};

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
    fn damaged_or_foreign_state_is_refused() {
        let dir = scratch("damaged");
        let mut pod = testkit::guaranteed_pod("p1", &[("cpu", 1000)]);
        pod.uid = "p1".to_owned();
        let mut body = Body::default();
        body.pods.insert(
            "p1".to_owned(),
            AdmitResult {
                pod,
                admitted: true,
                reason: None,
                message: None,
                containers: vec![ContainerResult {
                    name: "app".to_owned(),
                    hint: TopologyHint::ANY,
                    allocation: Allocation::default().with_cpus(CpuSet::parse("1").unwrap(), true),
                }],
            },
        );
        let path = dir.join(STATE_FILE);
        crate::fsutil::write_atomic(&path, &encode(&body, "boot").unwrap()).unwrap();
        let good = fs::read(&path).unwrap();
        let (boot, read, len) = read_snapshot(&path).unwrap().unwrap();
        assert_eq!((boot.as_str(), len), ("boot", good.len() as u64));
        assert_eq!(read.pods, body.pods);
        let remedy = format!(
            ". Nothing was changed; `topomgr state check --state-dir {dir}` shows what the directory holds, and `topomgr state recover --state-dir {dir}` backs the files up and starts from empty state, forgetting every admitted pod (it lists those it can still read)",
            dir = dir.display()
        );

        let mut flipped = good.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0x01;
        fs::write(&path, &flipped).unwrap();
        let msg = read_snapshot(&path).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!(
                "{}: state file is damaged: SHA-256 of the boot id and body is ",
                path.display()
            )),
            "{msg}"
        );
        assert!(msg.ends_with(&remedy), "{msg}");

        fs::write(&path, &good[..good.len() - 3]).unwrap();
        let nl = good.iter().position(|b| *b == b'\n').unwrap();
        assert_eq!(
            read_snapshot(&path).unwrap_err().to_string(),
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
                .replacen("\"version\":4", "\"version\":7", 1);
        fs::write(&path, newer).unwrap();
        assert_eq!(
            read_snapshot(&path).unwrap_err().to_string(),
            format!(
                "{}: state version 7 is not supported by this topomgr (it reads versions 1 to 4); run the topomgr that wrote it",
                path.display()
            )
        );
        assert!(read_snapshot(&dir.join("nowhere")).unwrap().is_none());
        fs::remove_dir_all(dir).unwrap();
    }
}
