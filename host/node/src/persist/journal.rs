//! The append-only journal of a state directory: [`JOURNAL_FILE`].
//!
//! ```text
//! {"format":"topomgr-journal","version":2,"generation":G,"boot_id":"…"} <check>\n
//! @ <seq> <len> <sha256> <check>\n<payload>\n          (one record, "frame")
//! @ <seq> <len> <sha256> <check>\n<payload>\n
//! ...
//! ```
//!
//! The header line names the snapshot generation the journal continues
//! (`crate::persist::store`); `<check>` is the first 8 hex digits of the SHA-256 of
//! the JSON before it. A record is a frame of printable text:
//!
//! | bytes | what |
//! |---|---|
//! | 1 | `@`, a marker for people and for the search of intact records; never needed to read the record |
//! | 1 | space |
//! | 16 | the record's sequence number, lowercase hex (1 for the first record of a generation) |
//! | 1 | space |
//! | 8 | the payload's length in bytes, lowercase hex |
//! | 1 | space |
//! | 64 | the SHA-256 of the payload, lowercase hex |
//! | 1 | space |
//! | 8 | the header's own check: the first 8 hex digits of the SHA-256 of the 91 bytes from the sequence number to the space before it |
//! | 1 | newline (end of the 102-byte header) |
//! | len | the payload (compact JSON: never a NUL byte) |
//! | 1 | the trailer, a newline: the frame's last byte, never needed to read it |
//!
//! A record is appended with one positioned `write` after the last one and
//! made durable with `fdatasync` before anything it holds is acknowledged.
//!
//! # A torn append, and damage
//!
//! Only one append is ever in flight, and every earlier one completed its
//! `fdatasync`. A crash during an append (power cut, kernel panic; a `kill
//! -9` cannot tear a `write`) can leave, after the last complete record:
//! the frame cut short anywhere (the file size was not yet extended to its
//! end), and within what is there, whole 512-byte blocks of the file that
//! were never written and read as zeros (the size was extended before the
//! data reached the disk; every file system allocates in blocks of at
//! least 512 bytes, aligned in the file). The frame's own bytes are never
//! zero, so a zero byte is a block that was not written. That is every
//! shape a torn append has, and it is recognised as exactly that
//! ([`is_torn`]): the region from the failing record to the end of the
//! file is torn when
//!
//! 1. no intact record follows anywhere in it (a search at every offset),
//! 2. every 512-byte block of it is either all zeros or has no zero, and
//! 3. the bytes that are there fit a frame of the next record: the header's
//!    fixed characters where they fall; a header that is all there passes
//!    its check and carries the next sequence number; nothing lies after
//!    the frame's end; and a frame whose every byte is there has a block of
//!    zeros in its payload (else its checksum would hold).
//!
//! The journal alone cannot tell such a tail from an acknowledged record that
//! was later zeroed or cut: the store checks what is read here against how
//! far the journal was acknowledged (`crate::persist::ack`), and refuses a
//! "torn" record that was acknowledged.
//!
//! Only such a tail is cut off (it was never acknowledged). Anything else is
//! damage to a complete record, and the journal is refused ([`End::Damaged`]):
//! no single changed byte of a complete journal can look torn. A changed
//! header byte fails the header's check (or its fixed characters) while the
//! header is all there; a changed payload byte fails the payload's SHA-256
//! while the frame is all there; and a byte changed to zero is surrounded,
//! in its 512-byte block, by bytes of the frame that are not zero (the
//! trailer after the payload and the marker before the header exist for
//! that: the only bytes whose block may hold nothing else of the frame are
//! the marker and the trailer, and neither is needed to read the record).
//! A changed marker or trailer byte leaves the record readable and the
//! state the same. The price is a false alarm, never a silent loss: a torn
//! append whose unwritten blocks read as something other than zeros (a
//! disk that tears a sector) is refused, and the operator decides
//! (`topomgr state recover`).
//!
//! Version 1 journals (`[u32 length][SHA-256][payload]` frames, the header
//! line without a check) are still read; their framing cannot tell a torn
//! append from damage, so anything after their last valid record is
//! refused rather than cut off. They are never appended to: the next change
//! writes a snapshot and a version 2 journal.
//!
//! Nothing here knows what a payload means.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// File name of the journal in a state directory.
pub const JOURNAL_FILE: &str = "state.journal";
/// The `format` field of the journal header.
pub const JOURNAL_FORMAT: &str = "topomgr-journal";
/// The journal version this build writes.
pub const JOURNAL_VERSION: u32 = 2;
/// The oldest journal version this build reads.
pub const OLDEST_JOURNAL_VERSION: u32 = 1;
/// Largest record payload.
pub const MAX_RECORD: usize = 256 << 20;

/// Bytes of a record's header.
const HEADER: usize = 102;
/// The smallest unit a file system writes: a torn append leaves whole
/// blocks of this size, aligned in the file, unwritten.
const BLOCK: usize = 512;
/// Hex digits of a check.
const CHECK: usize = 8;
/// Bytes of a version 1 frame's header.
const V1_HEADER: usize = 4 + 32;

/// The header line of a journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalHeader {
    /// Always [`JOURNAL_FORMAT`].
    pub format: String,
    /// The journal version.
    pub version: u32,
    /// The snapshot generation this journal continues.
    pub generation: u64,
    /// The boot the journal was started in.
    pub boot_id: String,
}

impl JournalHeader {
    /// The header of a new journal for snapshot `generation`.
    pub fn new(generation: u64, boot_id: &str) -> JournalHeader {
        JournalHeader {
            format: JOURNAL_FORMAT.to_owned(),
            version: JOURNAL_VERSION,
            generation,
            boot_id: boot_id.to_owned(),
        }
    }
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
    /// A journal of another format or a version this build does not read.
    #[error("{}: {reason}", path.display())]
    Unsupported {
        /// The journal.
        path: PathBuf,
        /// What is not supported.
        reason: String,
    },
    /// A record that cannot be appended.
    #[error("{}: {reason}", path.display())]
    Record {
        /// The journal.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// One intact record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its sequence number.
    pub seq: u64,
    /// Byte offset of its frame in the file.
    pub offset: u64,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// A torn append at the end of the journal: never acknowledged, cut off
/// before the next append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torn {
    /// Where it starts.
    pub offset: u64,
    /// Its bytes (to the end of the file).
    pub bytes: u64,
    /// The sequence number the record would have had.
    pub seq: u64,
}

/// Damage that is not a torn append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the damaged record (0: the header line).
    pub offset: u64,
    /// The sequence number the damaged record has or should have (`None`:
    /// the header line).
    pub seq: Option<u64>,
    /// What is wrong.
    pub reason: String,
    /// Intact records found after the damage, in order.
    pub later: Vec<Entry>,
}

/// How the journal ends.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum End {
    /// After its last record.
    #[default]
    Clean,
    /// With a torn append.
    Torn(Torn),
    /// With damage that is not a torn append: refuse it.
    Damaged(Damage),
}

/// What reading a journal found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Contents {
    /// Whether the file exists.
    pub exists: bool,
    /// Its header (`None`: no journal, or a damaged header line).
    pub header: Option<JournalHeader>,
    /// The intact records before any damage or torn tail, in order.
    pub records: Vec<Entry>,
    /// Bytes of header and those records: where the next append goes.
    pub valid_len: u64,
    /// How it ends.
    pub end: End,
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The first [`CHECK`] hex digits of the SHA-256 of `bytes`.
pub(crate) fn check_of(bytes: &[u8]) -> String {
    let mut s = hex(&Sha256::digest(bytes)[..CHECK / 2]);
    s.truncate(CHECK);
    s
}

/// The frame of record `seq` (see the module docs).
pub fn frame(seq: u64, payload: &[u8]) -> Vec<u8> {
    let fields = format!(
        "{seq:016x} {:08x} {} ",
        payload.len(),
        hex(&Sha256::digest(payload))
    );
    let mut out = Vec::with_capacity(HEADER + payload.len() + 1);
    out.extend_from_slice(b"@ ");
    out.extend_from_slice(fields.as_bytes());
    out.extend_from_slice(check_of(fields.as_bytes()).as_bytes());
    out.push(b'\n');
    out.extend_from_slice(payload);
    out.push(b'\n');
    out
}

/// Whether byte `b` fits position `i` (1 ≤ i < [`HEADER`]) of a record header.
fn fits_header(i: usize, b: u8) -> bool {
    match i {
        1 | 18 | 27 | 92 => b == b' ',
        101 => b == b'\n',
        _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
    }
}

/// A record header at `bytes[at..]`, all there, of the right characters
/// and passing its check: (sequence number, payload length, payload SHA-256
/// in hex).
fn header_at(bytes: &[u8], at: usize) -> Option<(u64, usize, &[u8])> {
    let h = bytes.get(at..at + HEADER)?;
    if !(1..HEADER).all(|i| fits_header(i, h[i])) {
        return None;
    }
    if check_of(&h[2..93]).as_bytes() != &h[93..101] {
        return None;
    }
    let num = |r: std::ops::Range<usize>| {
        std::str::from_utf8(&h[r])
            .ok()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
    };
    let len = usize::try_from(num(19..27)?).ok()?;
    Some((num(2..18)?, len, &h[28..92]))
}

/// The intact record at `bytes[at..]`: header, payload of the right
/// SHA-256 and the trailer's place all there.
fn entry_at(bytes: &[u8], at: usize) -> Option<Entry> {
    let (seq, len, sha) = header_at(bytes, at)?;
    if len > MAX_RECORD {
        return None;
    }
    let payload = bytes.get(at + HEADER..at + HEADER + len)?;
    bytes.get(at + HEADER + len)?;
    if hex(&Sha256::digest(payload)).as_bytes() != sha {
        return None;
    }
    Some(Entry {
        seq,
        offset: at as u64,
        payload: payload.to_vec(),
    })
}

/// Bytes of the frame of an entry.
fn frame_len(e: &Entry) -> usize {
    HEADER + e.payload.len() + 1
}

impl Entry {
    /// The byte after its frame.
    pub fn end(&self) -> u64 {
        self.offset + frame_len(self) as u64
    }
}

/// Every intact record that starts after `from`, in order.
fn intact_after(bytes: &[u8], from: usize) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut q = from + 1;
    while q + HEADER <= bytes.len() {
        // The fixed characters first: most offsets fail there.
        let quick = [1, 18, 27, 92, 101]
            .iter()
            .all(|&i| fits_header(i, bytes[q + i]));
        match quick.then(|| entry_at(bytes, q)).flatten() {
            Some(e) => {
                q += frame_len(&e);
                out.push(e);
            }
            None => q += 1,
        }
    }
    out
}

/// Whether `bytes[at..]`, where record `seq` fails to read, is what a
/// torn append of that record can leave (see the module docs).
pub fn is_torn(bytes: &[u8], at: usize, seq: u64) -> bool {
    let tail = &bytes[at..];
    // Whole blocks unwritten, or written: no block mixes zeros and bytes.
    let mut start = at;
    while start < bytes.len() {
        let end = ((start / BLOCK) + 1) * BLOCK;
        let block = &bytes[start..end.min(bytes.len())];
        let zeros = block.iter().filter(|b| **b == 0).count();
        if zeros != 0 && zeros != block.len() {
            return false;
        }
        start = end;
    }
    // The header's fixed characters where they were written.
    let head = &tail[..tail.len().min(HEADER)];
    if !(1..head.len()).all(|i| head[i] == 0 || fits_header(i, head[i])) {
        return false;
    }
    // The frame's length when its length field was written.
    let written = |r: std::ops::Range<usize>| tail.get(r).filter(|s| !s.contains(&0));
    let len = written(19..27)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| usize::from_str_radix(s, 16).ok());
    if let Some(len) = len {
        if len > MAX_RECORD || tail.len() > HEADER + len + 1 {
            return false;
        }
    } else if tail.len() > HEADER + MAX_RECORD + 1 {
        return false;
    }
    if written(1..HEADER).is_some() {
        // The header was written whole: it must be the next record's.
        let Some((s, len, _)) = header_at(bytes, at) else {
            return false;
        };
        if s != seq {
            return false;
        }
        // All of the frame there (a checksum that fails): a hole in the
        // payload must explain it.
        if tail.len() > HEADER + len && !tail[HEADER..HEADER + len].contains(&0) {
            return false;
        }
    }
    true
}

/// Read the header line of version 2 (`<json> <check>`) or 1 (`<json>`).
fn parse_header(path: &Path, line: &[u8]) -> Result<Result<JournalHeader, String>, JournalError> {
    let (json, checked) = match line.len().checked_sub(CHECK + 1) {
        Some(at) if line[at] == b' ' => (&line[..at], Some(&line[at + 1..])),
        _ => (line, None),
    };
    if let Some(check) = checked {
        if check_of(json).as_bytes() != check {
            return Ok(Err("the header line does not match its check".to_owned()));
        }
    }
    let header: JournalHeader = match serde_json::from_slice(json) {
        Ok(h) => h,
        Err(e) => return Ok(Err(format!("the header line does not parse: {e}"))),
    };
    if header.format != JOURNAL_FORMAT {
        return Err(JournalError::Unsupported {
            path: path.to_path_buf(),
            reason: format!(
                "not a topomgr journal (format {:?}, expected {JOURNAL_FORMAT:?})",
                header.format
            ),
        });
    }
    if !(OLDEST_JOURNAL_VERSION..=JOURNAL_VERSION).contains(&header.version) {
        return Err(JournalError::Unsupported {
            path: path.to_path_buf(),
            reason: format!(
                "journal version {} is not supported by this topomgr (it reads versions {OLDEST_JOURNAL_VERSION} to {JOURNAL_VERSION}); run the topomgr that wrote it",
                header.version
            ),
        });
    }
    if (header.version == JOURNAL_VERSION) != checked.is_some() {
        return Ok(Err(format!(
            "a version {} header line {} a check",
            header.version,
            if checked.is_some() { "with" } else { "without" }
        )));
    }
    Ok(Ok(header))
}

/// Parse journal bytes (see the module docs).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Contents, JournalError> {
    let damaged = |reason: String| Contents {
        exists: true,
        end: End::Damaged(Damage {
            offset: 0,
            seq: None,
            reason,
            later: intact_after(bytes, 0),
        }),
        ..Contents::default()
    };
    let Some(nl) = bytes.iter().position(|b| *b == b'\n') else {
        return Ok(damaged(format!(
            "the header line is incomplete ({} bytes, no newline); journals are created whole, so this is damage",
            bytes.len()
        )));
    };
    let header = match parse_header(path, &bytes[..nl])? {
        Ok(h) => h,
        Err(reason) => return Ok(damaged(reason)),
    };
    if header.version == 1 {
        return Ok(parse_v1(header, bytes, nl + 1));
    }
    let mut at = nl + 1;
    let mut records: Vec<Entry> = Vec::new();
    let mut end = End::Clean;
    while at < bytes.len() {
        let seq = records.last().map_or(1, |e| e.seq + 1);
        match entry_at(bytes, at) {
            Some(e) if e.seq == seq => {
                at += frame_len(&e);
                records.push(e);
                continue;
            }
            Some(e) => {
                end = End::Damaged(Damage {
                    offset: at as u64,
                    seq: Some(seq),
                    reason: format!("the record here has sequence number {}", e.seq),
                    later: intact_after(bytes, at),
                });
            }
            None => {
                let later = intact_after(bytes, at);
                end = if later.is_empty() && is_torn(bytes, at, seq) {
                    End::Torn(Torn {
                        offset: at as u64,
                        bytes: (bytes.len() - at) as u64,
                        seq,
                    })
                } else {
                    End::Damaged(Damage {
                        offset: at as u64,
                        seq: Some(seq),
                        reason: why_unreadable(bytes, at),
                        later,
                    })
                };
            }
        }
        break;
    }
    Ok(Contents {
        exists: true,
        header: Some(header),
        records,
        valid_len: at as u64,
        end,
    })
}

/// Why the record at `at` cannot be read, in words.
fn why_unreadable(bytes: &[u8], at: usize) -> String {
    let tail = &bytes[at..];
    if tail.len() < HEADER {
        return format!("{} bytes that are not a whole record header", tail.len());
    }
    match header_at(bytes, at) {
        None => "its header does not match its check".to_owned(),
        Some((_, len, _)) if tail.len() < HEADER + len + 1 => format!(
            "its header gives a frame of {} bytes, but only {} are there",
            HEADER + len + 1,
            tail.len()
        ),
        Some(_) => "its payload does not match its SHA-256".to_owned(),
    }
}

/// A version 1 journal: records up to the first that fails; anything after
/// them is damage (see the module docs).
fn parse_v1(header: JournalHeader, bytes: &[u8], mut at: usize) -> Contents {
    let mut records = Vec::new();
    while bytes.len() - at >= V1_HEADER {
        let mut len = [0u8; 4];
        len.copy_from_slice(&bytes[at..at + 4]);
        let len = u32::from_le_bytes(len) as usize;
        if len == 0 || len > MAX_RECORD || bytes.len() - at - V1_HEADER < len {
            break;
        }
        let payload = &bytes[at + V1_HEADER..at + V1_HEADER + len];
        if Sha256::digest(payload).as_slice() != &bytes[at + 4..at + V1_HEADER] {
            break;
        }
        records.push(Entry {
            seq: records.len() as u64 + 1,
            offset: at as u64,
            payload: payload.to_vec(),
        });
        at += V1_HEADER + len;
    }
    let end = if at == bytes.len() {
        End::Clean
    } else {
        End::Damaged(Damage {
            offset: at as u64,
            seq: Some(records.len() as u64 + 1),
            reason: format!(
                "{} bytes after the last valid record of a version 1 journal, whose framing cannot tell a torn write from damage",
                bytes.len() - at
            ),
            later: Vec::new(),
        })
    };
    Contents {
        exists: true,
        header: Some(header),
        records,
        valid_len: at as u64,
        end,
    }
}

/// Read the journal at `path` (`Contents::default()` when absent).
pub fn read(path: &Path) -> Result<Contents, JournalError> {
    match fs::read(path) {
        Ok(bytes) => parse(path, &bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Contents::default()),
        Err(source) => Err(JournalError::Io {
            path: path.to_path_buf(),
            cause: source,
        }),
    }
}

/// The header line of `header`.
pub(crate) fn header_line(path: &Path, header: &JournalHeader) -> Result<Vec<u8>, JournalError> {
    let mut line = serde_json::to_vec(header).map_err(|e| JournalError::Record {
        path: path.to_path_buf(),
        reason: format!("cannot serialize the journal header: {e}"),
    })?;
    let check = check_of(&line);
    line.push(b' ');
    line.extend_from_slice(check.as_bytes());
    line.push(b'\n');
    Ok(line)
}

/// A journal open for appending.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    len: u64,
}

impl Journal {
    /// Continue the version 2 journal at `path` after its `valid_len`
    /// bytes (a torn tail is cut off first).
    pub fn resume(path: &Path, valid_len: u64) -> Result<Journal, JournalError> {
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
    pub fn create(path: &Path, header: &JournalHeader) -> Result<Journal, JournalError> {
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| JournalError::Io {
                path: p,
                cause: source,
            }
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{JOURNAL_FILE}.new"));
        let line = header_line(path, header)?;
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

    /// Append record `seq` and make it durable. On failure the file is cut
    /// back to where it was; when even that fails the error says so and the
    /// journal must be started anew before the next append.
    pub fn append(&mut self, seq: u64, payload: &[u8]) -> Result<(), AppendError> {
        if payload.contains(&0) || payload.len() > MAX_RECORD {
            return Err(AppendError {
                error: JournalError::Record {
                    path: self.path.clone(),
                    reason: format!(
                        "record {seq} ({} bytes) holds a NUL byte or is larger than {MAX_RECORD} bytes; it was not written",
                        payload.len()
                    ),
                },
                clean: true,
            });
        }
        let frame = frame(seq, payload);
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

    /// Cut the journal back to `len` bytes (an append whose
    /// acknowledgement could not be written), synced.
    pub(crate) fn cut_back(&mut self, len: u64) -> Result<(), JournalError> {
        self.file
            .set_len(len)
            .and_then(|()| self.file.sync_all())
            .map_err(|cause| JournalError::Io {
                path: self.path.clone(),
                cause,
            })?;
        self.len = len;
        Ok(())
    }

    /// Bytes in the journal (header and records).
    pub fn size(&self) -> u64 {
        self.len
    }
}

/// A failed append.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct AppendError {
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

    /// A journal of `n` records with payloads of various lengths.
    fn journal(dir: &Path, n: u64) -> (PathBuf, Vec<Vec<u8>>) {
        let path = dir.join(JOURNAL_FILE);
        let mut j = Journal::create(&path, &JournalHeader::new(3, "boot")).unwrap();
        let payloads: Vec<Vec<u8>> = (1..=n)
            .map(|i| {
                format!(
                    "{{\"seq\":{i},\"pad\":\"{}\"}}",
                    "x".repeat(i as usize * 97)
                )
                .into_bytes()
            })
            .collect();
        for (i, p) in payloads.iter().enumerate() {
            j.append(i as u64 + 1, p).unwrap();
        }
        (path, payloads)
    }

    fn payloads(c: &Contents) -> Vec<Vec<u8>> {
        c.records.iter().map(|e| e.payload.clone()).collect()
    }

    #[test]
    fn records_round_trip() {
        let dir = scratch("round");
        let (path, written) = journal(&dir, 4);
        let full = fs::read(&path).unwrap();
        let c = parse(&path, &full).unwrap();
        assert_eq!(c.header, Some(JournalHeader::new(3, "boot")));
        assert_eq!(payloads(&c), written);
        assert_eq!(
            c.records.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        assert_eq!((c.valid_len, c.end), (full.len() as u64, End::Clean));
        // The frames are text: a header line per record, then its payload.
        let text = String::from_utf8(full).unwrap();
        let second = text.lines().nth(1).unwrap();
        let len = format!("{:08x}", written[0].len());
        assert!(
            second.starts_with(&format!("@ 0000000000000001 {len} ")),
            "{second}"
        );
        assert_eq!(text.lines().nth(2).unwrap().as_bytes(), written[0]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn every_cut_and_every_unwritten_block_of_the_last_append_is_torn() {
        let dir = scratch("torn");
        let (path, written) = journal(&dir, 3);
        let full = fs::read(&path).unwrap();
        let last = parse(&path, &full).unwrap().records[2].offset as usize;
        for cut in last + 1..full.len() {
            let c = parse(&path, &full[..cut]).unwrap();
            assert_eq!(payloads(&c), written[..2], "cut at {cut}");
            assert_eq!(
                c.end,
                End::Torn(Torn {
                    offset: last as u64,
                    bytes: (cut - last) as u64,
                    seq: 3
                }),
                "cut at {cut}"
            );
        }
        // Each 512-byte block of the last frame left unwritten (zeros), with
        // the file at its full length or cut after that block.
        let first_block = last / BLOCK;
        let last_block = (full.len() - 1) / BLOCK;
        for b in first_block..=last_block {
            let mut holed = full.clone();
            for byte in holed[(b * BLOCK).max(last)..((b + 1) * BLOCK).min(full.len())].iter_mut() {
                *byte = 0;
            }
            let c = parse(&path, &holed).unwrap();
            if b == last_block && holed[full.len() - 1] == 0 && c.records.len() == 3 {
                // Only the trailer's block: the record is all there.
                continue;
            }
            assert_eq!(payloads(&c), written[..2], "block {b}");
            assert!(matches!(c.end, End::Torn(_)), "block {b}: {:?}", c.end);
        }
        // Zeros where the file was extended and nothing was written.
        let mut zeros = full.clone();
        zeros.extend_from_slice(&[0; 700]);
        let c = parse(&path, &zeros).unwrap();
        assert_eq!(payloads(&c), written);
        assert!(matches!(
            c.end,
            End::Torn(Torn {
                seq: 4,
                bytes: 700,
                ..
            })
        ));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn damage_is_never_taken_for_a_torn_append() {
        let dir = scratch("damage");
        let (path, written) = journal(&dir, 4);
        let full = fs::read(&path).unwrap();
        let c = parse(&path, &full).unwrap();
        let second = c.records[1].offset as usize;
        // A changed payload byte in record 2 of 4: records 3 and 4 are
        // intact after it.
        let mut flipped = full.clone();
        flipped[second + HEADER + 5] ^= 0x20;
        let c = parse(&path, &flipped).unwrap();
        assert_eq!(payloads(&c), written[..1]);
        let End::Damaged(d) = c.end else {
            panic!("{:?}", c.end)
        };
        assert_eq!((d.offset, d.seq), (second as u64, Some(2)));
        assert_eq!(d.reason, "its payload does not match its SHA-256");
        assert_eq!(d.later.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
        // The last record: a changed byte, or a byte set to zero, is damage.
        let last = parse(&path, &full).unwrap().records[3].offset as usize;
        for at in [
            last + 1,
            last + 10,
            last + 95,
            last + HEADER,
            full.len() - 2,
        ] {
            for new in [0u8, b'7', 0xff] {
                if full[at] == new {
                    continue;
                }
                let mut b = full.clone();
                b[at] = new;
                let c = parse(&path, &b).unwrap();
                assert!(
                    matches!(c.end, End::Damaged(Damage { seq: Some(4), .. })),
                    "byte {at} = {new}: {:?}",
                    c.end
                );
            }
        }
        // The marker and the trailer are not needed to read a record.
        for at in [last, full.len() - 1] {
            let mut b = full.clone();
            b[at] = 0;
            assert_eq!(payloads(&parse(&path, &b).unwrap()), written);
        }
        // Garbage after the last record is not a torn append either.
        let mut garbage = full.clone();
        garbage.extend_from_slice(b"\x05\0\0\0garbage");
        assert!(matches!(
            parse(&path, &garbage).unwrap().end,
            End::Damaged(Damage { seq: Some(5), .. })
        ));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_header_line_is_checked() {
        let dir = scratch("header");
        let (path, _) = journal(&dir, 1);
        let full = fs::read(&path).unwrap();
        let nl = full.iter().position(|b| *b == b'\n').unwrap();
        for (bytes, reason) in [
            (full[..10].to_vec(), "the header line is incomplete (10 bytes, no newline); journals are created whole, so this is damage"),
            (String::from_utf8(full.clone()).unwrap().replacen("\"generation\":3", "\"generation\":4", 1).into_bytes(), "the header line does not match its check"),
        ] {
            let c = parse(&path, &bytes).unwrap();
            let End::Damaged(d) = c.end else { panic!() };
            assert_eq!((d.offset, d.seq, d.reason.as_str()), (0, None, reason));
        }
        let foreign = b"{\"format\":\"x\",\"version\":1,\"generation\":0,\"boot_id\":\"b\"}\n";
        assert_eq!(
            parse(&path, foreign).unwrap_err().to_string(),
            format!(
                "{}: not a topomgr journal (format \"x\", expected \"topomgr-journal\")",
                path.display()
            )
        );
        let newer =
            b"{\"format\":\"topomgr-journal\",\"version\":9,\"generation\":0,\"boot_id\":\"b\"}\n";
        assert!(parse(&path, newer).unwrap_err().to_string().ends_with(
            "journal version 9 is not supported by this topomgr (it reads versions 1 to 2); run the topomgr that wrote it"
        ));
        assert!(nl > 0);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn version_1_journals_are_read_and_their_tails_refused() {
        let dir = scratch("v1");
        let path = dir.join(JOURNAL_FILE);
        let mut bytes =
            b"{\"format\":\"topomgr-journal\",\"version\":1,\"generation\":2,\"boot_id\":\"b\"}\n"
                .to_vec();
        for p in [&b"one"[..], b"two"] {
            bytes.extend_from_slice(&(p.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&Sha256::digest(p));
            bytes.extend_from_slice(p);
        }
        let c = parse(&path, &bytes).unwrap();
        assert_eq!(payloads(&c), [b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(c.header.unwrap().version, 1);
        assert_eq!(c.end, End::Clean);
        bytes.push(7);
        assert!(matches!(
            parse(&path, &bytes).unwrap().end,
            End::Damaged(Damage { seq: Some(3), .. })
        ));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn resuming_cuts_the_torn_tail_before_appending() {
        let dir = scratch("resume");
        let (path, written) = journal(&dir, 2);
        let full = fs::read(&path).unwrap();
        let mut torn = full.clone();
        torn.extend_from_slice(&frame(3, b"{\"never\":1}")[..50]);
        fs::write(&path, &torn).unwrap();
        let c = read(&path).unwrap();
        assert!(matches!(
            c.end,
            End::Torn(Torn {
                seq: 3,
                bytes: 50,
                ..
            })
        ));
        let mut j = Journal::resume(&path, c.valid_len).unwrap();
        j.append(3, b"{\"after\":1}").unwrap();
        let c = read(&path).unwrap();
        assert_eq!(
            payloads(&c),
            [
                written[0].clone(),
                written[1].clone(),
                b"{\"after\":1}".to_vec()
            ]
        );
        assert_eq!(c.end, End::Clean);
        // A payload the framing cannot hold is refused, the file unchanged.
        let before = fs::read(&path).unwrap();
        assert!(j.append(4, b"a\0b").unwrap_err().clean);
        assert_eq!(fs::read(&path).unwrap(), before);
        fs::remove_dir_all(dir).unwrap();
    }
}
