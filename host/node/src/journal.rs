//! The append-only journal of a state directory: [`JOURNAL_FILE`].
//!
//! ```text
//! {"format":"topomgr-journal","version":1,"generation":G,"boot_id":"…"}\n
//! [u32 LE length][32 bytes SHA-256 of the payload][payload] ...
//! ```
//!
//! The header line names the snapshot generation the journal continues
//! (`crate::store`); every record is framed by its length and the SHA-256 of
//! its payload. A record is appended with one `write` and made durable with
//! `fdatasync` before anything it holds is acknowledged.
//!
//! Reading stops at the first record that is incomplete or whose checksum
//! does not match: a crash can only tear what was written after the last
//! completed `fdatasync`, so everything from there on was never
//! acknowledged, and is ignored (and cut off before the next append).
//! Nothing here knows what a payload means.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// File name of the journal in a state directory.
pub(crate) const JOURNAL_FILE: &str = "state.journal";
/// The `format` field of the journal header.
pub(crate) const JOURNAL_FORMAT: &str = "topomgr-journal";
/// The journal version this build writes and reads.
pub(crate) const JOURNAL_VERSION: u32 = 1;
/// Largest record accepted when reading (a larger length is a torn header).
pub(crate) const MAX_RECORD: usize = 256 << 20;

const FRAME_HEADER: usize = 4 + 32;

/// The header line of a journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JournalHeader {
    /// Always [`JOURNAL_FORMAT`].
    pub format: String,
    /// [`JOURNAL_VERSION`].
    pub version: u32,
    /// The snapshot generation this journal continues.
    pub generation: u64,
    /// The boot the journal was started in.
    pub boot_id: String,
}

/// Errors of the journal file; each names its path.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// An IO error.
    #[error("{}: {cause}", path.display())]
    Io {
        /// The journal.
        path: PathBuf,
        /// The error.
        cause: io::Error,
    },
    /// A header that is not a topomgr journal of a version this build reads.
    #[error("{}: {reason}", path.display())]
    Header {
        /// The journal.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// What reading a journal found.
#[derive(Debug, Default)]
pub(crate) struct Contents {
    /// Its header (`None`: no journal, or one whose header line was never
    /// completed).
    pub header: Option<JournalHeader>,
    /// The payloads of the valid records, in order.
    pub records: Vec<Vec<u8>>,
    /// Bytes of header and valid records.
    pub valid_len: u64,
    /// Bytes after them that were ignored (a torn tail).
    pub ignored: u64,
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(payload));
    out.extend_from_slice(payload);
    out
}

/// Parse journal bytes: the header, then every valid record up to the
/// first torn or damaged one. Only a header line that ends in a newline but
/// does not parse is an error (a torn header counts as no journal).
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<Contents, JournalError> {
    let Some(nl) = bytes.iter().position(|b| *b == b'\n') else {
        return Ok(Contents {
            ignored: bytes.len() as u64,
            ..Contents::default()
        });
    };
    let header: JournalHeader =
        serde_json::from_slice(&bytes[..nl]).map_err(|e| JournalError::Header {
            path: path.to_path_buf(),
            reason: format!("unreadable journal header: {e}"),
        })?;
    if header.format != JOURNAL_FORMAT || header.version != JOURNAL_VERSION {
        return Err(JournalError::Header {
            path: path.to_path_buf(),
            reason: format!(
                "journal format {:?} version {} is not {JOURNAL_FORMAT:?} version {JOURNAL_VERSION}; run the topomgr that wrote it",
                header.format, header.version
            ),
        });
    }
    let mut at = nl + 1;
    let mut records = Vec::new();
    while bytes.len() - at >= FRAME_HEADER {
        let mut len = [0u8; 4];
        len.copy_from_slice(&bytes[at..at + 4]);
        let len = u32::from_le_bytes(len) as usize;
        if len == 0 || len > MAX_RECORD || bytes.len() - at - FRAME_HEADER < len {
            break;
        }
        let payload = &bytes[at + FRAME_HEADER..at + FRAME_HEADER + len];
        if Sha256::digest(payload).as_slice() != &bytes[at + 4..at + FRAME_HEADER] {
            break;
        }
        records.push(payload.to_vec());
        at += FRAME_HEADER + len;
    }
    Ok(Contents {
        header: Some(header),
        records,
        valid_len: at as u64,
        ignored: (bytes.len() - at) as u64,
    })
}

/// Read the journal at `path` (`Contents::default()` when absent).
pub(crate) fn read(path: &Path) -> Result<Contents, JournalError> {
    match fs::read(path) {
        Ok(bytes) => parse(path, &bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Contents::default()),
        Err(source) => Err(JournalError::Io {
            path: path.to_path_buf(),
            cause: source,
        }),
    }
}

/// A journal open for appending.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    file: File,
    len: u64,
}

impl Journal {
    /// Continue the journal at `path` after its `valid_len` bytes (a torn
    /// tail is cut off first).
    pub(crate) fn resume(path: &Path, valid_len: u64) -> Result<Journal, JournalError> {
        let io = |source| JournalError::Io {
            path: path.to_path_buf(),
            cause: source,
        };
        let file = OpenOptions::new().write(true).open(path).map_err(io)?;
        if file.metadata().map_err(io)?.len() != valid_len {
            file.set_len(valid_len).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            len: valid_len,
        })
    }

    /// Start a new journal at `path` for `header` (written to a temporary
    /// file, synced, renamed over the old one, directory synced).
    pub(crate) fn create(path: &Path, header: &JournalHeader) -> Result<Journal, JournalError> {
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| JournalError::Io {
                path: p,
                cause: source,
            }
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{JOURNAL_FILE}.new"));
        let mut line = serde_json::to_vec(header).map_err(|e| JournalError::Header {
            path: path.to_path_buf(),
            reason: format!("cannot serialize the journal header: {e}"),
        })?;
        line.push(b'\n');
        let written = (|| {
            let mut f = File::create(&tmp).map_err(io(&tmp))?;
            f.write_all(&line).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
            fs::rename(&tmp, path).map_err(io(path))
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))?;
        Self::resume(path, line.len() as u64)
    }

    /// Append one record and make it durable. On failure the file is cut
    /// back to where it was; when even that fails the error says so and the
    /// journal must be started anew before the next append.
    pub(crate) fn append(&mut self, payload: &[u8]) -> Result<(), AppendError> {
        let frame = frame(payload);
        let written = self
            .file
            .write_all_at(&frame, self.len)
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.len += frame.len() as u64;
                Ok(())
            }
            Err(source) => {
                // After a failed fdatasync the kernel may have dropped the
                // dirty pages: what is on disk is unknown, so cut back.
                let clean = self
                    .file
                    .set_len(self.len)
                    .and_then(|()| self.file.sync_all())
                    .is_ok();
                Err(AppendError {
                    error: JournalError::Io {
                        path: self.path.clone(),
                        cause: source,
                    },
                    clean,
                })
            }
        }
    }

    /// Bytes in the journal (header and records).
    pub(crate) fn size(&self) -> u64 {
        self.len
    }
}

/// A failed append.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub(crate) struct AppendError {
    /// What failed.
    pub error: JournalError,
    /// Whether the journal was cut back to its last record (else it must be
    /// started anew).
    pub clean: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("topomgr-journal-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn header(g: u64) -> JournalHeader {
        JournalHeader {
            format: JOURNAL_FORMAT.to_owned(),
            version: JOURNAL_VERSION,
            generation: g,
            boot_id: "boot".to_owned(),
        }
    }

    #[test]
    fn records_round_trip_and_every_torn_tail_is_ignored() {
        let dir = scratch("torn");
        let path = dir.join(JOURNAL_FILE);
        let mut j = Journal::create(&path, &header(3)).unwrap();
        let payloads: Vec<Vec<u8>> = (0..3).map(|i| format!("record {i}").into_bytes()).collect();
        for p in &payloads {
            j.append(p).unwrap();
        }
        let full = fs::read(&path).unwrap();
        let c = parse(&path, &full).unwrap();
        assert_eq!(c.header, Some(header(3)));
        assert_eq!(c.records, payloads);
        assert_eq!((c.valid_len, c.ignored), (full.len() as u64, 0));
        // Every prefix that cuts the last record: the first two survive.
        let last = frame(&payloads[2]).len();
        for cut in 1..last {
            let torn = &full[..full.len() - cut];
            let c = parse(&path, torn).unwrap();
            assert_eq!(c.records, payloads[..2], "cut {cut}");
            assert_eq!(c.ignored, (last - cut) as u64);
        }
        // A damaged last record, garbage and zeros after the records.
        let mut flipped = full.clone();
        let n = flipped.len();
        flipped[n - 1] ^= 1;
        assert_eq!(parse(&path, &flipped).unwrap().records, payloads[..2]);
        for tail in [vec![0u8; 100], vec![0xff; 7], b"\x05\0\0\0garbage".to_vec()] {
            let mut t = full.clone();
            t.extend_from_slice(&tail);
            let c = parse(&path, &t).unwrap();
            assert_eq!(c.records, payloads);
            assert_eq!(c.ignored, tail.len() as u64);
        }
        // A torn header line is no journal; a foreign one is an error.
        assert!(parse(&path, &full[..10]).unwrap().header.is_none());
        assert_eq!(
            parse(&path, b"{\"format\":\"x\",\"version\":1,\"generation\":0,\"boot_id\":\"b\"}\n")
                .unwrap_err()
                .to_string(),
            format!(
                "{}: journal format \"x\" version 1 is not \"topomgr-journal\" version 1; run the topomgr that wrote it",
                path.display()
            )
        );
        // Resuming cuts the torn tail before appending.
        fs::write(&path, &full[..full.len() - 3]).unwrap();
        let c = read(&path).unwrap();
        let mut j = Journal::resume(&path, c.valid_len).unwrap();
        j.append(b"after").unwrap();
        let c = read(&path).unwrap();
        assert_eq!(
            c.records,
            [payloads[0].clone(), payloads[1].clone(), b"after".to_vec()]
        );
        fs::remove_dir_all(dir).unwrap();
    }
}
