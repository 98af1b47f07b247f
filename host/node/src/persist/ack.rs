//! How far the journal was acknowledged: [`ACK_FILE`], kept beside a
//! version 4 snapshot (`crate::persist::snapshot`).
//!
//! A torn append and damage to an acknowledged record can look the same in
//! the journal alone: a last record that reads as zeros, or that is cut
//! short, is what a crash during its append leaves, and also what a disk or
//! a careless hand can do to a record that was answered. This file tells
//! them apart. After each record's `fdatasync`, and before anything in it is
//! answered, the store writes here the generation, the sequence number and
//! the journal's length up to the end of that record, and syncs it. At
//! start, every record up to the acknowledged one must be intact: one that
//! is missing, cut short or zeroed is damage, refused naming the file, the
//! byte offset and the record. Only what lies after the acknowledged record
//! may be a torn append.
//!
//! ```text
//! slot 0 (512 bytes): {"format":"topomgr-ack","generation":G,"seq":S,"length":L} <check>\n, then NUL bytes
//! slot 1 (512 bytes): the same
//! ```
//!
//! `<check>` is the first 8 hex digits of the SHA-256 of the JSON (as in
//! the journal). `length` is the journal's size up to the end of record
//! `seq` (0 when `seq` is 0). Each write overwrites the slot that does not
//! hold the latest acknowledgement, so a write torn by a crash leaves the
//! previous one readable in the other slot (its record was then never
//! answered). A compaction writes generation G+1, record 0 before it renames
//! the new snapshot in: until then the other slot still holds generation G.
//!
//! Nothing here knows what a record means.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::persist::journal::check_of;

/// File name of the acknowledgements in a state directory.
pub const ACK_FILE: &str = "state.ack";
/// The `format` field of an acknowledgement.
const ACK_FORMAT: &str = "topomgr-ack";
/// Bytes of a slot.
const SLOT: usize = 512;
/// Hex digits of a check.
const CHECK: usize = 8;

/// One acknowledgement: records 1 to `seq` of the journal of snapshot
/// `generation`, ending at byte `length`, were made durable and answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ack {
    /// The snapshot generation the journal continues.
    pub generation: u64,
    /// The last acknowledged record (0: none).
    pub seq: u64,
    /// The journal's size up to the end of record `seq` (0 when `seq` is 0).
    pub length: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Slot {
    format: String,
    generation: u64,
    seq: u64,
    length: u64,
}

/// The bytes of a slot holding `ack`.
fn slot_bytes(ack: &Ack) -> Vec<u8> {
    let json = serde_json::to_vec(&Slot {
        format: ACK_FORMAT.to_owned(),
        generation: ack.generation,
        seq: ack.seq,
        length: ack.length,
    })
    .unwrap_or_default();
    let mut out = Vec::with_capacity(SLOT);
    out.extend_from_slice(&json);
    out.push(b' ');
    out.extend_from_slice(check_of(&json).as_bytes());
    out.push(b'\n');
    out.resize(SLOT, 0);
    out
}

/// The acknowledgement in one slot, or why it does not read.
fn parse_slot(bytes: &[u8]) -> Result<Ack, String> {
    if bytes.iter().all(|b| *b == 0) {
        return Err("all zeros".to_owned());
    }
    let nl = bytes.iter().position(|b| *b == b'\n').ok_or("no line")?;
    if bytes[nl + 1..].iter().any(|b| *b != 0) {
        return Err("bytes after its line".to_owned());
    }
    let line = &bytes[..nl];
    let at = line
        .len()
        .checked_sub(CHECK + 1)
        .filter(|at| line[*at] == b' ')
        .ok_or("no check")?;
    let json = &line[..at];
    if check_of(json).as_bytes() != &line[at + 1..] {
        return Err("it does not match its check".to_owned());
    }
    let slot: Slot = serde_json::from_slice(json).map_err(|e| format!("it does not parse: {e}"))?;
    if slot.format != ACK_FORMAT {
        return Err(format!("format {:?}, not {ACK_FORMAT:?}", slot.format));
    }
    Ok(Ack {
        generation: slot.generation,
        seq: slot.seq,
        length: slot.length,
    })
}

/// The acknowledgement of snapshot generation `generation` that the bytes of
/// an ack file hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    /// The acknowledgement.
    pub ack: Ack,
    /// The slot it is in (the next write goes to the other).
    pub slot: usize,
    /// The other slot does not read (a write torn by a crash, or damage):
    /// why.
    pub other_unreadable: Option<String>,
}

/// The acknowledgement for snapshot `generation` in the bytes of an ack
/// file, or what is wrong with them (in words, for the caller to name the
/// file).
pub fn acknowledged(bytes: &[u8], generation: u64) -> Result<Acked, String> {
    if bytes.len() != 2 * SLOT {
        return Err(format!(
            "it has {} bytes, not the {} of its two slots",
            bytes.len(),
            2 * SLOT
        ));
    }
    let slots = [parse_slot(&bytes[..SLOT]), parse_slot(&bytes[SLOT..])];
    if let (Err(a), Err(b)) = (&slots[0], &slots[1]) {
        return Err(format!("neither slot reads (slot 0: {a}; slot 1: {b})"));
    }
    for ack in slots.iter().flatten() {
        let newer = match generation.checked_add(1) {
            Some(next) => ack.generation > next || (ack.generation == next && ack.seq > 0),
            None => false,
        };
        if newer {
            return Err(format!(
                "it acknowledges record {} of snapshot generation {}, but the snapshot is generation {generation}: the snapshot is older than what was acknowledged",
                ack.seq, ack.generation
            ));
        }
    }
    let best = (0..2)
        .filter_map(|i| match &slots[i] {
            Ok(a) if a.generation == generation => Some((i, *a)),
            _ => None,
        })
        .max_by_key(|(_, a)| a.seq);
    let Some((slot, ack)) = best else {
        let found: Vec<String> = slots
            .iter()
            .flatten()
            .map(|a| a.generation.to_string())
            .collect();
        return Err(format!(
            "it holds no acknowledgement of snapshot generation {generation} (only of generation {})",
            found.join(" and ")
        ));
    };
    Ok(Acked {
        ack,
        slot,
        other_unreadable: slots[1 - slot].as_ref().err().cloned(),
    })
}

/// The latest acknowledgement of any generation in the bytes of an ack
/// file (for `topomgr state check`'s summary).
pub fn latest(bytes: &[u8]) -> Option<Ack> {
    bytes
        .chunks(SLOT)
        .take(2)
        .filter_map(|slot| parse_slot(slot).ok())
        .max_by_key(|a| (a.generation, a.seq))
}

/// The ack file open for writing.
#[derive(Debug)]
pub(crate) struct AckFile {
    path: PathBuf,
    file: File,
    /// The slot the next write goes to.
    next: usize,
}

impl AckFile {
    /// Open the ack file at `path` whose latest acknowledgement is in `slot`.
    pub(crate) fn open(path: &Path, slot: usize) -> io::Result<AckFile> {
        let file = OpenOptions::new().write(true).open(path)?;
        Ok(AckFile {
            path: path.to_path_buf(),
            file,
            next: 1 - slot.min(1),
        })
    }

    /// Write a new ack file at `path` holding `ack` in both slots (a
    /// temporary file, synced, renamed over the old one, directory synced).
    pub(crate) fn create(path: &Path, ack: &Ack) -> io::Result<AckFile> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{ACK_FILE}.new"));
        let slot = slot_bytes(ack);
        let written = (|| {
            fs::create_dir_all(dir)?;
            let mut f = File::create(&tmp)?;
            f.write_all(&slot)?;
            f.write_all(&slot)?;
            f.sync_all()?;
            fs::rename(&tmp, path)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        File::open(dir).and_then(|d| d.sync_all())?;
        Self::open(path, 1)
    }

    /// Write `ack` into the slot that does not hold the latest
    /// acknowledgement and make it durable. A failed write leaves the next
    /// write aimed at the same slot.
    pub(crate) fn write(&mut self, ack: &Ack) -> io::Result<()> {
        let offset = (self.next * SLOT) as u64;
        self.file
            .write_all_at(&slot_bytes(ack), offset)
            .and_then(|()| self.file.sync_data())?;
        self.next = 1 - self.next;
        Ok(())
    }

    /// Aim the next write at the slot written last (whose acknowledgement,
    /// of a snapshot that was not written after all, is void).
    pub(crate) fn aim_at_last(&mut self) {
        self.next = 1 - self.next;
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("topomgr-ack-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn ack(generation: u64, seq: u64) -> Ack {
        Ack {
            generation,
            seq,
            length: seq * 100,
        }
    }

    #[test]
    fn writes_alternate_slots_and_the_latest_of_the_generation_wins() {
        let dir = scratch("alternate");
        let path = dir.join(ACK_FILE);
        let mut f = AckFile::create(&path, &ack(2, 0)).unwrap();
        let read = |g| acknowledged(&fs::read(&path).unwrap(), g);
        assert_eq!(read(2).unwrap().ack, ack(2, 0));
        for seq in 1..=3 {
            f.write(&ack(2, seq)).unwrap();
            let a = read(2).unwrap();
            assert_eq!((a.ack, a.other_unreadable), (ack(2, seq), None));
        }
        // A compaction's acknowledgement of the next generation, before its
        // snapshot is renamed in: generation 2 still reads.
        f.write(&ack(3, 0)).unwrap();
        assert_eq!(read(2).unwrap().ack, ack(2, 3));
        assert_eq!(read(3).unwrap().ack, ack(3, 0));
        f.write(&ack(3, 1)).unwrap();
        assert_eq!(read(3).unwrap().ack, ack(3, 1));
        assert!(read(2)
            .unwrap_err()
            .contains("older than what was acknowledged"));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_torn_slot_leaves_the_other_and_damage_is_named() {
        let dir = scratch("torn");
        let path = dir.join(ACK_FILE);
        let mut f = AckFile::create(&path, &ack(1, 0)).unwrap();
        f.write(&ack(1, 1)).unwrap();
        f.write(&ack(1, 2)).unwrap();
        let good = fs::read(&path).unwrap();
        let latest = acknowledged(&good, 1).unwrap().slot;
        // The write of record 2 torn: record 1 is what was acknowledged.
        let mut torn = good.clone();
        torn[latest * SLOT + 5..(latest + 1) * SLOT].fill(0);
        let a = acknowledged(&torn, 1).unwrap();
        assert_eq!(a.ack, ack(1, 1));
        assert!(a.other_unreadable.is_some());
        // Both slots unreadable, cut short, or of another generation.
        let mut both = good.clone();
        both[3] ^= 1;
        both[SLOT + 3] ^= 1;
        assert!(acknowledged(&both, 1)
            .unwrap_err()
            .starts_with("neither slot reads (slot 0: it does not match its check"));
        assert_eq!(
            acknowledged(&good[..700], 1).unwrap_err(),
            "it has 700 bytes, not the 1024 of its two slots"
        );
        assert_eq!(
            acknowledged(&good, 0).unwrap_err(),
            "it acknowledges record 1 of snapshot generation 1, but the snapshot is generation 0: the snapshot is older than what was acknowledged"
        );
        let old = fs::read(&path).unwrap();
        AckFile::create(&path, &ack(0, 4)).unwrap();
        assert_eq!(
            acknowledged(&fs::read(&path).unwrap(), 1).unwrap_err(),
            "it holds no acknowledgement of snapshot generation 1 (only of generation 0 and 0)"
        );
        assert_ne!(old, fs::read(&path).unwrap());
        // A crafted generation does not overflow.
        assert!(acknowledged(&fs::read(&path).unwrap(), u64::MAX).is_err());
        fs::remove_dir_all(dir).unwrap();
    }
}
