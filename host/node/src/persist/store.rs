//! The durable state of a state directory: a snapshot (`STATE_FILE`,
//! [`crate::persist::snapshot`]) and the journal of every change made since
//! (`JOURNAL_FILE`, `crate::persist::journal`).
//!
//! # Writing: proportional to the change
//!
//! [`Store::commit`] appends ONE record for everything changed since the
//! last commit — the daemon's state thread commits once per batch of waiting
//! requests (group commit) — and makes it durable with `fdatasync`, then
//! records it as acknowledged in the ack file ([`crate::persist::ack`],
//! synced), before the caller acknowledges anything. When the ack cannot be
//! written the record is cut off again. A directory whose snapshot is older
//! than version 4 (no ack file) is never appended to: its next commit
//! compacts. A record holds
//! - the host's changes ([`Change`]: pods admitted and released, cgroups
//!   attached and detached, owners of `run` pods), and
//! - the state of each provider that changed (was asked to allocate or
//!   release, or had a release remembered while held) and whose state
//!   differs from the one last written: providers keep their state behind
//!   the opaque `checkpoint()` of the contract, so a changed provider's
//!   state is written whole, an unchanged one not at all. The CPU, memory
//!   and device providers' states are bounded by the machine (what they
//!   hold exclusively), not by the pods held.
//!
//! A commit that changed nothing (a rejected pod whose providers gave back
//! what they were asked for) writes nothing.
//!
//! When the journal has grown past `COMPACT_MIN` and past the size of the
//! snapshot, the commit writes a new snapshot instead (generation + 1,
//! atomic rename) and starts a new journal for it: compaction costs the
//! state's size once per that many bytes of records, so the cost per change
//! stays constant on average.
//!
//! # Recovery
//!
//! [`Store::open`] reads the snapshot, then the journal when it continues
//! that snapshot's generation, and applies its records in order (each
//! carries the next sequence number). What else it finds:
//!
//! | found | what recovery does |
//! |---|---|
//! | a torn append at the journal's end (see [`crate::persist::journal`]) after the last acknowledged record ([`crate::persist::ack`]) | cut off before the next append: it was never acknowledged |
//! | an acknowledged record cut short, zeroed or cut off; a missing journal (or one of the generation before) with records of this generation acknowledged; a missing or unreadable ack file beside a version 4 snapshot | refused ([`StateError::JournalDamaged`]) |
//! | a journal of the generation before the snapshot's | ignored: a compaction crashed after the new snapshot was renamed in, and the snapshot holds all of it |
//! | a damaged record (not a torn append), a record of the wrong sequence number or one that does not parse, a damaged header line | refused ([`StateError::JournalDamaged`]) |
//! | a journal of another generation | refused |
//! | a journal with records and no snapshot | refused |
//! | a damaged snapshot | refused ([`StateError::Damaged`]) |
//!
//! A refusal changes no file (nothing compacts over damage) and names the
//! file, the byte offset and the record's sequence number, and the verbs
//! that inspect and repair the directory (`topomgr state check`, `topomgr
//! state recover`, in the `state_repair` module). The result is installed like a
//! snapshot alone (vanished resources reported, held providers, releases
//! replayed). The boot id is that of the last writer.
//!
//! A failed append or compaction (a full disk) leaves the files as they
//! were (or marks the journal to be started anew); the caller rolls its
//! memory back with [`Store::reload`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::fsutil::{self, write_atomic};
use crate::persist::ack::{self, Ack, AckFile, Acked, ACK_FILE};
use crate::persist::image::{self, provider_part, Restored};
use crate::persist::journal::{
    self, Contents, End, Entry, Journal, JournalHeader, Torn, JOURNAL_FILE,
};
use crate::persist::snapshot::{
    decode_versioned, encode, provider_bytes, provider_error, to_hex, Body, StateError,
    ACKED_STATE_VERSION, STATE_FILE,
};
use crate::state::provider_states::ProviderPart;
use crate::state::{Change, NodeState};
use topomgr_engine::provider::LoadedProvider;

/// The journal is compacted once it is larger than this and larger than
/// the snapshot.
pub(crate) const COMPACT_MIN: u64 = 1 << 20;

pub(crate) use crate::persist::Record;

impl Record {
    /// The record of journal entry `e` of `path`: it parses and carries the
    /// entry's sequence number.
    pub(crate) fn of(path: &Path, e: &Entry) -> Result<Record, StateError> {
        let damaged = |what: String| StateError::JournalDamaged {
            path: path.to_path_buf(),
            what,
            keeps: format!("keeps the snapshot and the records before record {}", e.seq),
        };
        let record = crate::persist::record_from_json(&e.payload).map_err(|err| {
            damaged(format!(
                "record {} at byte {} passes its checksums but does not parse ({err}); a topomgr of another version may have written it",
                e.seq, e.offset
            ))
        })?;
        if record.seq != e.seq {
            return Err(damaged(format!(
                "record {} at byte {} says it is record {}",
                e.seq, e.offset, record.seq
            )));
        }
        Ok(record)
    }

    pub(crate) fn apply(self, body: &mut Body) {
        for change in self.changes {
            change.apply(
                &mut body.pods,
                &mut body.attachments,
                Some(&mut body.owners),
                |r| *r,
            );
        }
        for (name, hex) in self.providers {
            body.pending_releases.remove(&name);
            body.providers.insert(name, hex);
        }
        for (name, pending) in self.pending_releases {
            if pending.is_empty() {
                body.pending_releases.remove(&name);
            } else {
                body.pending_releases.insert(name, pending);
            }
        }
    }
}

/// The journal a recovery continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Continued {
    /// Records applied.
    pub(crate) seq: u64,
    /// Its header and records: where the next append goes.
    pub(crate) valid_len: u64,
    /// The boot it was started in.
    pub(crate) boot_id: String,
    /// Its version (only the current one is appended to).
    pub(crate) version: u32,
}

/// What was read from a state directory.
#[derive(Debug, Clone)]
pub(crate) struct Recovered {
    pub(crate) body: Body,
    /// The boot of the last writer (`None`: nothing was saved yet).
    pub(crate) boot_id: Option<String>,
    pub(crate) snapshot_len: u64,
    /// The journal, when it continues the snapshot.
    pub(crate) journal: Option<Continued>,
    /// A torn append at its end (cut off before the next append).
    pub(crate) torn: Option<Torn>,
    /// How far the journal was acknowledged (`None`: the directory keeps
    /// no acknowledgements: no snapshot, or one older than version 4).
    pub(crate) acked: Option<Acked>,
}

/// What `state recover` keeps when record `seq` is dropped.
pub(crate) fn keeps_before(seq: u64) -> String {
    match seq {
        0 | 1 => "keeps the snapshot".to_owned(),
        2 => "keeps the snapshot and record 1".to_owned(),
        _ => format!("keeps the snapshot and records 1-{}", seq - 1),
    }
}

/// The acknowledgements of a snapshot of envelope `version` (`None`: no
/// snapshot) and `generation`, from the bytes of its ack file (`None`:
/// absent). `Ok(None)`: the directory keeps none (no snapshot, or one of a
/// version before [`ACKED_STATE_VERSION`]).
pub(crate) fn acked_of(
    dir: &Path,
    version: Option<u32>,
    generation: u64,
    bytes: Option<&[u8]>,
) -> Result<Option<Acked>, StateError> {
    if version.is_none_or(|v| v < ACKED_STATE_VERSION) {
        return Ok(None);
    }
    let refuse = |what: String| {
        StateError::JournalDamaged {
        path: dir.join(ACK_FILE),
        what,
        keeps: "keeps the snapshot and the journal's intact records and writes the acknowledgements anew".to_owned(),
    }
    };
    let Some(bytes) = bytes else {
        return Err(refuse(format!(
            "it is missing, but the snapshot {STATE_FILE} (version {ACKED_STATE_VERSION}) is kept with it: it records how far the journal {JOURNAL_FILE} was acknowledged, so whether acknowledged records were lost cannot be told"
        )));
    };
    ack::acknowledged(bytes, generation)
        .map(Some)
        .map_err(|reason| {
            refuse(format!(
                "{reason}; it records how far the journal {JOURNAL_FILE} was acknowledged, so whether acknowledged records were lost cannot be told"
            ))
        })
}

/// Acknowledged records the journal `contents` lacks: the first such
/// record, its byte offset and what is wrong. `continues`: the journal
/// continues the snapshot.
pub(crate) fn acknowledged_loss(
    contents: &Contents,
    ack: &Ack,
    continues: bool,
) -> Option<(u64, u64, String)> {
    let (s, l) = (ack.seq, ack.length);
    if s == 0 {
        return None;
    }
    let acked = format!(
        "{ACK_FILE} records that records 1-{s} of generation {} were acknowledged, ending at byte {l}",
        ack.generation
    );
    if !contents.exists {
        return Some((1, 0, format!("the journal is missing, but {acked}")));
    }
    if !continues {
        let generation = contents.header.as_ref().map_or(0, |h| h.generation);
        return Some((
            1,
            0,
            format!("it continues snapshot generation {generation}, but {acked}"),
        ));
    }
    let n = contents.records.len() as u64;
    if n < s {
        return Some(match &contents.end {
            End::Torn(t) => (
                t.seq,
                t.offset,
                format!(
                    "record {} at byte {} is cut short or zeroed ({} bytes to the end of the file), but {acked}: it is not a torn write",
                    t.seq, t.offset, t.bytes
                ),
            ),
            _ => (
                n + 1,
                contents.valid_len,
                format!(
                    "the journal ends after record {n} at byte {}, but {acked}: acknowledged records were cut off",
                    contents.valid_len
                ),
            ),
        });
    }
    let end = contents.records[(s - 1) as usize].end();
    (end != l).then(|| {
        (
            s,
            contents.records[(s - 1) as usize].offset,
            format!("record {s} ends at byte {end}, but {acked}"),
        )
    })
}

/// The journal `contents` of `path` (in the state directory of snapshot
/// generation `generation`, `None` without a snapshot) refused for damage or
/// for not continuing the snapshot; `Ok(true)`: it continues it.
pub(crate) fn journal_continues(
    path: &Path,
    contents: &Contents,
    generation: Option<u64>,
) -> Result<bool, StateError> {
    let refuse = |what: String, keeps: &str| StateError::JournalDamaged {
        path: path.to_path_buf(),
        what,
        keeps: keeps.to_owned(),
    };
    let Some(header) = &contents.header else {
        return match &contents.end {
            End::Damaged(d) => Err(refuse(
                format!("its header line is damaged: {}", d.reason),
                "keeps the snapshot and drops the journal",
            )),
            _ => Ok(false),
        };
    };
    let records = contents.records.len()
        + match &contents.end {
            End::Damaged(d) => 1 + d.later.len(),
            _ => 0,
        };
    let Some(generation) = generation else {
        if records == 0 {
            return Ok(false);
        }
        return Err(refuse(
            format!(
                "it holds {records} record(s) of snapshot generation {}, but there is no snapshot ({STATE_FILE}) for them to continue",
                header.generation
            ),
            "drops the journal and starts from empty state",
        ));
    };
    if header.generation + 1 == generation {
        tracing::info!(journal = %path.display(), generation = header.generation, snapshot_generation = generation, "journal of the snapshot generation before this one ignored (a compaction was cut short; the snapshot holds all of it)");
        return Ok(false);
    }
    if header.generation != generation {
        return Err(refuse(
            format!(
                "it continues snapshot generation {}, but the snapshot is generation {generation}",
                header.generation
            ),
            "keeps the snapshot and drops the journal",
        ));
    }
    if let End::Damaged(d) = &contents.end {
        let seq = d.seq.unwrap_or(1);
        let later = match (d.later.first(), d.later.last()) {
            (Some(a), Some(b)) if a.seq == b.seq => {
                format!(
                    "; record {} after it is intact, so this is not a torn write",
                    a.seq
                )
            }
            (Some(a), Some(b)) => format!(
                "; records {}-{} after it are intact, so this is not a torn write",
                a.seq, b.seq
            ),
            _ => " and is not what a torn write leaves".to_owned(),
        };
        return Err(refuse(
            format!(
                "record {seq} at byte {} is damaged: {}{later}",
                d.offset, d.reason
            ),
            &keeps_before(seq),
        ));
    }
    Ok(true)
}

/// Recover the state from the bytes of a state directory's snapshot and
/// journal (`None`: the file is absent).
pub(crate) fn recover_bytes(
    dir: &Path,
    snapshot: Option<&[u8]>,
    journal: Option<&[u8]>,
    acks: Option<&[u8]>,
) -> Result<Recovered, StateError> {
    let (mut boot_id, mut body, snapshot_len, version) = match snapshot {
        Some(bytes) => {
            let (version, boot, body) = decode_versioned(&dir.join(STATE_FILE), bytes)?;
            (Some(boot), body, bytes.len() as u64, Some(version))
        }
        None => (None, Body::default(), 0, None),
    };
    let path = dir.join(JOURNAL_FILE);
    let contents = match journal {
        Some(bytes) => journal::parse(&path, bytes)?,
        None => Contents::default(),
    };
    let generation = boot_id.as_ref().map(|_| body.generation);
    let mut continued = None;
    let mut torn = None;
    let acked = acked_of(dir, version, body.generation, acks)?;
    let continues = journal_continues(&path, &contents, generation)?;
    if let Some(a) = &acked {
        if let Some((seq, _, what)) = acknowledged_loss(&contents, &a.ack, continues) {
            return Err(StateError::JournalDamaged {
                path,
                what,
                keeps: keeps_before(seq),
            });
        }
    }
    if continues {
        let header = contents
            .header
            .as_ref()
            .expect("a continued journal has a header");
        let mut seq = 0;
        for e in &contents.records {
            let record = Record::of(&path, e)?;
            seq = record.seq;
            record.apply(&mut body);
        }
        if seq > 0 {
            boot_id = Some(header.boot_id.clone());
        }
        continued = Some(Continued {
            seq,
            valid_len: contents.valid_len,
            boot_id: header.boot_id.clone(),
            version: header.version,
        });
        if let End::Torn(t) = &contents.end {
            torn = Some(t.clone());
        }
    }
    Ok(Recovered {
        body,
        boot_id,
        snapshot_len,
        journal: continued,
        torn,
        acked,
    })
}

/// The bytes of `path`; `None` when it is absent.
pub(crate) fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, StateError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(cause) => Err(StateError::Io {
            path: path.to_path_buf(),
            cause,
        }),
    }
}

fn recover(dir: &Path) -> Result<Recovered, StateError> {
    let snapshot = read_optional(&dir.join(STATE_FILE))?;
    // The acknowledgements before the journal (see `state_repair::check`).
    let acks = read_optional(&dir.join(ACK_FILE))?;
    let journal = read_optional(&dir.join(JOURNAL_FILE))?;
    let rec = recover_bytes(
        dir,
        snapshot.as_deref(),
        journal.as_deref(),
        acks.as_deref(),
    )?;
    if let Some(reason) = rec.acked.as_ref().and_then(|a| a.other_unreadable.as_ref()) {
        tracing::warn!(file = %dir.join(ACK_FILE).display(), reason = %reason, "one slot of the acknowledgements does not read (a write cut short by a crash, whose record was never answered); the other is used");
    }
    if let Some(t) = &rec.torn {
        tracing::warn!(journal = %dir.join(JOURNAL_FILE).display(), offset = t.offset, bytes = t.bytes, record = t.seq, "torn end of the journal ignored (an append that never completed, so never acknowledged); it is cut off before the next append");
    }
    Ok(rec)
}

/// The SHA-256 of a provider's state as written (the hex of its bytes).
fn digest(hex: &str) -> [u8; 32] {
    Sha256::digest(hex.as_bytes()).into()
}

/// The snapshot and journal of one (locked) state directory.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    boot_id: String,
    generation: u64,
    seq: u64,
    snapshot_len: u64,
    /// `None` when the next commit must compact (no usable journal).
    journal: Option<Journal>,
    /// The acknowledgements (`None` until the first version 4 snapshot is
    /// written): there is a journal only with them.
    acks: Option<AckFile>,
    compact_min: u64,
    /// Each provider's state as last written (the digest of its hex): a
    /// changed provider whose state is the same is not written again.
    written: BTreeMap<String, [u8; 32]>,
}

/// Why a commit failed (nothing of it is durable).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct CommitError(#[from] StateError);

impl Store {
    /// Recover the state of `dir` (lock it first) into `node`: snapshot
    /// plus the journal's records, installed with the same checks as a
    /// snapshot alone. A torn journal tail is cut off; any other damage is
    /// refused, the files left as they are.
    pub fn open(
        dir: &Path,
        node: &mut NodeState,
        boot_id: &str,
    ) -> Result<(Store, Restored), StateError> {
        fsutil::remove_stale_temps(dir, STATE_FILE);
        let rec = recover(dir)?;
        let found = rec.boot_id.is_some();
        let generation = rec.body.generation;
        let written = rec
            .body
            .providers
            .iter()
            .map(|(name, hex)| (name.clone(), digest(hex)))
            .collect();
        let saved_boot = rec.boot_id.clone().unwrap_or_else(|| boot_id.to_owned());
        let restored = if found {
            image::install(&dir.join(STATE_FILE), saved_boot, rec.body, node, boot_id)?
        } else {
            Restored::default()
        };
        // A journal started in another boot is not continued: its header
        // would name the wrong boot as the last writer; nor is one of an
        // older version. The next commit compacts instead (until then it
        // stays as it is for recovery).
        // Nor is the journal of a directory without acknowledgements (a
        // snapshot before version 4): the next commit writes a version 4
        // snapshot and its acknowledgements.
        let acks = match &rec.acked {
            Some(a) => Some(AckFile::open(&dir.join(ACK_FILE), a.slot).map_err(|cause| {
                StateError::Io {
                    path: dir.join(ACK_FILE),
                    cause,
                }
            })?),
            None => None,
        };
        let mut continued = acks.is_some() || !found;
        let (seq, journal) = match rec.journal {
            Some(j)
                if acks.is_some()
                    && j.boot_id == boot_id
                    && j.version == journal::JOURNAL_VERSION =>
            {
                (
                    j.seq,
                    Some(Journal::resume(&dir.join(JOURNAL_FILE), j.valid_len)?),
                )
            }
            // Empty: nothing to keep, it is started anew below.
            Some(Continued { seq: 0, .. }) => (0, None),
            Some(j) => {
                continued = false;
                (j.seq, None)
            }
            None => (0, None),
        };
        let mut store = Store {
            dir: dir.to_path_buf(),
            boot_id: boot_id.to_owned(),
            generation,
            seq,
            snapshot_len: rec.snapshot_len,
            journal,
            acks,
            compact_min: COMPACT_MIN,
            written,
        };
        if store.journal.is_none() && found && continued {
            // No journal continues the snapshot (lost, or left from an
            // older generation): start one so changes can be appended.
            match store.new_journal() {
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the journal; the next change writes a snapshot")
                }
            }
        }
        Ok((store, restored))
    }

    /// Compact once the journal is larger than `bytes` (and the snapshot)
    /// instead of [`COMPACT_MIN`].
    #[cfg(test)]
    fn compact_above(mut self, bytes: u64) -> Store {
        self.compact_min = bytes;
        self
    }

    /// Records in the journal since the snapshot.
    pub fn records(&self) -> u64 {
        self.seq
    }

    fn new_journal(&mut self) -> Result<(), StateError> {
        self.journal = None;
        let header = JournalHeader::new(self.generation, &self.boot_id);
        self.journal = Some(Journal::create(&self.dir.join(JOURNAL_FILE), &header)?);
        self.seq = 0;
        Ok(())
    }

    /// Make everything `node` changed since the last commit durable: one
    /// journal record, or a new snapshot when the journal is due for
    /// compaction; nothing when nothing changed. Returns the host's changes
    /// it wrote (for readers).
    pub fn commit(&mut self, node: &mut NodeState) -> Result<Vec<Change>, CommitError> {
        let due = match &self.journal {
            None => true,
            Some(j) => j.size() > self.compact_min.max(self.snapshot_len),
        };
        if due {
            match self.compact(node) {
                Ok(()) => {
                    node.saved();
                    return Ok(node.take_changes());
                }
                // A provider whose call timed out cannot give its state
                // until that call returns: append now, compact later.
                Err(CommitError(e)) if is_stuck(&e) && self.journal.is_some() => {}
                Err(e) => return Err(e),
            }
        }
        let changes = node.take_changes();
        self.append(node, changes)
    }

    fn append(
        &mut self,
        node: &mut NodeState,
        changes: Vec<Change>,
    ) -> Result<Vec<Change>, CommitError> {
        let names = {
            let (admitter, states) = node.provider_states_mut();
            states.take_changed(admitter)
        };
        let mut record = Record {
            seq: self.seq + 1,
            changes,
            ..Record::default()
        };
        let parts: Vec<_> = node
            .provider_states()
            .parts(node.admitter())
            .into_iter()
            .filter(|(name, _)| names.iter().any(|n| n == name))
            .map(|(name, state)| (name.to_owned(), state, provider_part(name, state)))
            .collect();
        let mut later = Vec::new();
        for (name, state, part) in parts {
            let held = matches!(state, ProviderPart::Kept(_));
            match part {
                Ok((_, pending)) if held => {
                    record.pending_releases.insert(name, pending);
                }
                Ok((bytes, _)) => {
                    let hex = to_hex(&bytes);
                    if self.written.get(&name) != Some(&digest(&hex)) {
                        record.providers.insert(name, hex);
                    }
                }
                // A provider whose call timed out cannot answer until that
                // call returns: its state is written later. Its admissions
                // in this commit failed; the releases queued behind the
                // stuck call are recorded, so that a restore replays them
                // on the state saved before.
                Err(e) if is_stuck(&e) => {
                    if let ProviderPart::Live(p) = state {
                        let unsaved = p.unsaved_releases();
                        if !unsaved.is_empty() {
                            record.pending_releases.insert(name.clone(), unsaved);
                        }
                    }
                    later.push(name);
                }
                Err(e) => {
                    node.provider_states_mut().1.keep_changed(&names);
                    return Err(e.into());
                }
            }
        }
        node.provider_states_mut().1.keep_changed(&later);
        if record.changes.is_empty()
            && record.providers.is_empty()
            && record.pending_releases.is_empty()
        {
            return Ok(Vec::new());
        }
        let payload = crate::persist::record_to_json(&record).map_err(|e| StateError::Corrupt {
            path: self.dir.join(JOURNAL_FILE),
            reason: format!("cannot serialize a journal record: {e}"),
        })?;
        let (Some(journal), Some(acks)) = (self.journal.as_mut(), self.acks.as_mut()) else {
            return Err(StateError::Corrupt {
                path: self.dir.join(JOURNAL_FILE),
                reason: "no journal to append to".to_owned(),
            }
            .into());
        };
        let before = journal.size();
        if let Err(e) = journal.append(record.seq, &payload) {
            if !e.clean {
                self.journal = None;
            }
            return Err(StateError::from(e.error).into());
        }
        let ack = Ack {
            generation: self.generation,
            seq: record.seq,
            length: journal.size(),
        };
        if let Err(cause) = acks.write(&ack) {
            // Not acknowledged: the record is cut off again, so that what is
            // durable is what the caller rolls its memory back to.
            if journal.cut_back(before).is_err() {
                self.journal = None;
            }
            return Err(StateError::Io {
                path: acks.path().to_path_buf(),
                cause,
            }
            .into());
        }
        self.seq = record.seq;
        for (name, hex) in &record.providers {
            self.written.insert(name.clone(), digest(hex));
        }
        Ok(record.changes)
    }

    /// Write the whole state as a new snapshot (generation + 1) and start a
    /// new journal for it.
    pub fn compact(&mut self, node: &NodeState) -> Result<(), CommitError> {
        let body = image::body_of(node, self.generation + 1)?;
        let bytes = encode(&body, &self.boot_id)?;
        // The next generation's acknowledgement first (in the slot that
        // does not hold this generation's latest), then the snapshot.
        self.write_first_ack(self.generation + 1)?;
        if let Err(e) = write_atomic(&self.dir.join(STATE_FILE), &bytes) {
            if let Some(acks) = self.acks.as_mut() {
                // This generation's latest acknowledgement stays in the
                // other slot: the next one overwrites the one just written.
                acks.aim_at_last();
            }
            return Err(StateError::from(e).into());
        }
        self.generation += 1;
        self.snapshot_len = bytes.len() as u64;
        self.written = body
            .providers
            .iter()
            .map(|(name, hex)| (name.clone(), digest(hex)))
            .collect();
        if let Err(e) = self.new_journal() {
            // The snapshot holds everything; the next commit compacts again.
            tracing::warn!(error = %e, "cannot start a new journal after compaction");
        }
        Ok(())
    }

    /// Acknowledge record 0 of snapshot `generation` (before that snapshot
    /// is written): in the slot that does not hold the latest
    /// acknowledgement, or in a new ack file.
    fn write_first_ack(&mut self, generation: u64) -> Result<(), StateError> {
        let ack = Ack {
            generation,
            seq: 0,
            length: 0,
        };
        let path = self.dir.join(ACK_FILE);
        let written = match self.acks.as_mut() {
            Some(acks) => acks.write(&ack),
            None => AckFile::create(&path, &ack).map(|f| self.acks = Some(f)),
        };
        written.map_err(|cause| StateError::Io { path, cause })
    }

    /// Roll `node` back to what is durable (after a failed commit).
    pub fn reload(&mut self, node: &mut NodeState) -> Result<Restored, StateError> {
        let rec = recover(&self.dir)?;
        let saved_boot = rec.boot_id.clone().unwrap_or_else(|| self.boot_id.clone());
        self.generation = rec.body.generation;
        self.written = rec
            .body
            .providers
            .iter()
            .map(|(name, hex)| (name.clone(), digest(hex)))
            .collect();
        let restored = image::install(
            &self.dir.join(STATE_FILE),
            saved_boot,
            rec.body,
            node,
            &self.boot_id,
        )?;
        self.acks =
            match &rec.acked {
                Some(a) => Some(AckFile::open(&self.dir.join(ACK_FILE), a.slot).map_err(
                    |cause| StateError::Io {
                        path: self.dir.join(ACK_FILE),
                        cause,
                    },
                )?),
                None => None,
            };
        match rec.journal {
            Some(j) if self.acks.is_some() => {
                self.seq = j.seq;
                if self.journal.is_some() {
                    self.journal =
                        Some(Journal::resume(&self.dir.join(JOURNAL_FILE), j.valid_len)?);
                }
            }
            Some(j) => {
                self.seq = j.seq;
                self.journal = None;
            }
            None => self.journal = None,
        }
        Ok(restored)
    }
}

/// Whether `e` is a provider that cannot answer because a call of it timed
/// out and has not returned yet.
fn is_stuck(e: &StateError) -> bool {
    matches!(e, StateError::ProviderStuck { .. })
}

/// The recovered state of `dir` as JSON (the snapshot body with the journal
/// applied): for tests and for looking at a state directory.
pub fn state_json(dir: &Path) -> Result<serde_json::Value, StateError> {
    let rec = recover(dir)?;
    crate::persist::body_to_value(&rec.body).map_err(|e| StateError::Corrupt {
        path: dir.join(STATE_FILE),
        reason: e.to_string(),
    })
}

/// Restore one provider (`topomgr provider NAME ... --state-dir`) from the
/// recovered state of `dir`, if it has a part for it.
pub fn restore_provider(dir: &Path, provider: &mut LoadedProvider) -> Result<(), StateError> {
    let rec = recover(dir)?;
    let Some(hex) = rec.body.providers.get(provider.name()) else {
        return Ok(());
    };
    let path = dir.join(STATE_FILE);
    let bytes = provider_bytes(&path, provider.name(), hex)?;
    provider
        .restore(&bytes)
        .map(|_reconciled| ())
        .map_err(|e| provider_error(provider.name(), &e, path))
}

/// Save one provider's state into `dir`, keeping everything else its state
/// holds: a new snapshot (and journal) with that provider's part replaced.
pub fn save_provider(dir: &Path, provider: &LoadedProvider) -> Result<(), StateError> {
    let boot_id = &fsutil::boot_id();
    let rec = recover(dir)?;
    let mut body = rec.body;
    let path = dir.join(STATE_FILE);
    let bytes = provider
        .checkpoint()
        .map_err(|e| provider_error(provider.name(), &e, path.clone()))?;
    body.providers
        .insert(provider.name().to_string(), to_hex(&bytes));
    body.pending_releases.remove(provider.name());
    body.generation += 1;
    let ack = Ack {
        generation: body.generation,
        seq: 0,
        length: 0,
    };
    let ack_path = dir.join(ACK_FILE);
    match &rec.acked {
        Some(a) => AckFile::open(&ack_path, a.slot).and_then(|mut f| f.write(&ack)),
        None => AckFile::create(&ack_path, &ack).map(drop),
    }
    .map_err(|cause| StateError::Io {
        path: ack_path.clone(),
        cause,
    })?;
    write_atomic(&path, &encode(&body, boot_id)?)?;
    Journal::create(
        &dir.join(JOURNAL_FILE),
        &JournalHeader::new(body.generation, boot_id),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::fs;

    use topomgr_sdk::{testkit, Allocation, CpuSet, PodView, ProviderError};

    use super::*;
    use crate::persist::image::RestoreIssue;
    use crate::state::Records;
    use topomgr_engine::admission::Admitter;
    use topomgr_engine::numa::NumaInfo;
    use topomgr_engine::policy::{Policy, Scope};
    use topomgr_engine::provider::PROVIDER_TIMEOUT;

    /// Gives every container one exclusive CPU, the lowest free one; its
    /// state is the set of (pod, container, cpu) it holds. Its `allocate`
    /// for pod `slow` first waits for one message on `gate`, when given.
    fn cpus(gate: Option<std::sync::mpsc::Receiver<()>>) -> testkit::FakeProvider {
        type Held = BTreeSet<(String, String, u32)>;
        let held = std::sync::Arc::new(std::sync::Mutex::new(Held::new()));
        let gate = gate.map(std::sync::Mutex::new);
        let (on_allocate, on_release, on_checkpoint, on_restore) =
            (held.clone(), held.clone(), held.clone(), held);
        testkit::FakeProvider::new()
            .with_allocate(move |pod, c, _| {
                if let (Some(gate), "slow") = (&gate, pod.uid.as_str()) {
                    let _ = gate.lock().unwrap().recv();
                }
                let mut held = on_allocate.lock().unwrap();
                let cpu = (0..8)
                    .find(|n| !held.iter().any(|(_, _, x)| x == n))
                    .ok_or_else(|| ProviderError::admission("no CPU left"))?;
                held.insert((pod.uid.clone(), c.name.clone(), cpu));
                Ok(Allocation::default().with_cpus(CpuSet::from_iter([cpu]), true))
            })
            .with_release(move |uid, c| {
                on_release
                    .lock()
                    .unwrap()
                    .retain(|(p, n, _)| !(p == uid && n == c));
                Ok(())
            })
            .with_checkpoint(move || {
                Ok(serde_json::to_vec(&*on_checkpoint.lock().unwrap()).unwrap())
            })
            .with_restore(move |data| {
                *on_restore.lock().unwrap() = serde_json::from_slice(data)
                    .map_err(|e| ProviderError::admission(e.to_string()))?;
                Ok(topomgr_sdk::Reconciled::new())
            })
    }

    fn node(dir: &Path) -> NodeState {
        node_with(dir, LoadedProvider::in_process("cpus", cpus(None)))
    }

    /// A node on a 1-node, 8-CPU machine, policy none, with `provider`.
    fn node_with(dir: &Path, provider: LoadedProvider) -> NodeState {
        let machine = testkit::machine(1, 8);
        let policy = Policy::new(
            "none",
            &BTreeMap::new(),
            NumaInfo::from_machine(&machine).unwrap(),
        )
        .unwrap();
        let adm = Admitter::new(&machine, policy, Scope::Container, vec![provider]);
        NodeState::new(adm, Records::default(), &dir.join("no-cgroups"), "boot")
    }

    fn open(dir: &Path) -> (Store, NodeState, Restored) {
        let mut n = node(dir);
        let (store, restored) = Store::open(dir, &mut n, "boot").unwrap();
        (store, n, restored)
    }

    fn pod(uid: &str) -> PodView {
        let mut p = testkit::guaranteed_pod(uid, &[("cpu", 1000)]);
        p.uid = uid.to_owned();
        p
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("topomgr-store-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    /// Open `dir`, admit `uids` committing each, close.
    fn commit_pods(dir: &Path, uids: &[&str]) {
        let (mut store, mut n, _) = open(dir);
        for uid in uids {
            assert!(n.admit(&pod(uid)).admitted);
            store.commit(&mut n).unwrap();
        }
    }

    fn held(n: &NodeState) -> Vec<String> {
        n.pods()
            .values()
            .map(|r| format!("{}:{}", r.pod.uid, r.containers[0].allocation.cpus))
            .collect()
    }

    /// A release made while the provider is stuck in a call that missed
    /// its deadline cannot be in the provider's saved state yet: the
    /// journal records it, and a restart (the daemon killed before the
    /// stuck call returned) replays it, so the released pod's CPU is free.
    #[test]
    fn a_release_while_a_provider_is_stuck_survives_a_crash() {
        let dir = scratch("stuck-release");
        let (open_gate, gate) = std::sync::mpsc::channel();
        let provider = LoadedProvider::in_process("cpus", cpus(Some(gate)))
            .with_deadline(std::time::Duration::from_millis(100))
            .unwrap();
        let mut n = node_with(&dir, provider);
        let (mut store, _) = Store::open(&dir, &mut n, "boot").unwrap();
        assert!(n.admit(&pod("a")).admitted);
        store.commit(&mut n).unwrap();
        assert!(n.admit(&pod("b")).admitted);
        store.commit(&mut n).unwrap();
        assert_eq!(held(&n), ["a:0", "b:1"]);
        // `slow` times out: the provider is stuck.
        let r = n.admit(&pod("slow"));
        assert_eq!(r.reason.as_deref(), Some(PROVIDER_TIMEOUT));
        assert!(n.admitter().providers()[0].is_stuck());
        n.release("a").unwrap();
        store.commit(&mut n).unwrap();
        assert_eq!(
            n.admitter().providers()[0].unsaved_releases(),
            [("a".to_owned(), "app".to_owned())]
        );
        // Killed here: the stuck call never returned. A new host restores
        // the provider's state saved with `a` and `b`, then the release.
        drop((store, n));
        let (_, mut again, r) = open(&dir);
        assert!(r.found);
        assert_eq!(held(&again), ["b:1"]);
        assert!(again.admit(&pod("c")).admitted);
        assert_eq!(held(&again), ["b:1", "c:0"]);
        open_gate.send(()).unwrap();
    }

    /// A node on the same machine without providers.
    fn bare_node(dir: &Path) -> NodeState {
        let machine = testkit::machine(1, 8);
        let policy = Policy::new(
            "none",
            &BTreeMap::new(),
            NumaInfo::from_machine(&machine).unwrap(),
        )
        .unwrap();
        let adm = Admitter::new(&machine, policy, Scope::Container, Vec::new());
        NodeState::new(adm, Records::default(), &dir.join("no-cgroups"), "boot")
    }

    /// A provider the config no longer has keeps its saved state; pods it
    /// holds can be released meanwhile (journaled as its pending releases,
    /// through a compaction too), and configured again it gets the releases
    /// replayed: the released pod's CPU is free, the other's is not.
    #[test]
    fn an_unconfigured_provider_keeps_its_state_and_gets_its_releases_back() {
        let dir = scratch("absent");
        commit_pods(&dir, &["a", "b", "c"]);
        let mut n = bare_node(&dir);
        let (mut store, r) = Store::open(&dir, &mut n, "boot").unwrap();
        assert_eq!(
            r.issues,
            [RestoreIssue::MissingProvider {
                provider: "cpus".to_owned()
            }]
        );
        n.release("a").unwrap();
        store.commit(&mut n).unwrap();
        assert!(store.records() > 0, "the release was appended");
        drop((store, n));
        let mut n = bare_node(&dir);
        let (mut store, _) = Store::open(&dir, &mut n, "boot").unwrap();
        n.release("c").unwrap();
        store.compact(&n).unwrap();
        drop((store, n));
        let (_, mut again, r) = open(&dir);
        assert_eq!(r.replayed, 2);
        assert_eq!(held(&again), ["b:1"]);
        assert!(again.admit(&pod("d")).admitted);
        assert!(again.admit(&pod("e")).admitted);
        assert_eq!(held(&again), ["b:1", "d:0", "e:2"]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn changes_are_appended_and_recovered_with_the_snapshot() {
        let dir = scratch("append");
        let (mut store, mut n, r) = open(&dir);
        assert!(!r.found);
        // The first commit writes a snapshot (no journal yet), later ones append.
        for uid in ["a", "b", "c"] {
            assert!(n.admit(&pod(uid)).admitted);
            store.commit(&mut n).unwrap();
        }
        n.release("b").unwrap();
        store.commit(&mut n).unwrap();
        assert_eq!(store.records(), 3);
        let snapshot = fs::read(dir.join(STATE_FILE)).unwrap();
        let (_, mut again, r) = open(&dir);
        assert!(r.found);
        assert_eq!(held(&again), ["a:0", "c:2"]);
        // The provider got its state back: the next CPU is the free one.
        assert!(again.admit(&pod("d")).admitted);
        assert_eq!(held(&again)[2], "d:1");
        // Appending did not touch the snapshot.
        assert_eq!(fs::read(dir.join(STATE_FILE)).unwrap(), snapshot);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_torn_tail_is_ignored_and_cut_before_the_next_append() {
        let dir = scratch("torn");
        commit_pods(&dir, &["a", "b"]);
        let path = dir.join(JOURNAL_FILE);
        let good = fs::read(&path).unwrap();
        // The next record cut short, its last block never written: an
        // append that never completed.
        let mut torn = good.clone();
        let seq = journal::read(&path).unwrap().records.len() as u64 + 1;
        torn.extend_from_slice(&journal::frame(seq, &vec![b'x'; 900])[..700]);
        let block = torn.len() - torn.len() % 512;
        if block > good.len() {
            torn[block..].fill(0);
        }
        fs::write(&path, &torn).unwrap();
        let (mut store, mut n, _) = open(&dir);
        assert_eq!(held(&n), ["a:0", "b:1"]);
        assert_eq!(fs::read(&path).unwrap(), good, "the torn tail is cut off");
        n.admit(&pod("c"));
        store.commit(&mut n).unwrap();
        let (_, n, _) = open(&dir);
        assert_eq!(held(&n), ["a:0", "b:1", "c:2"]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_journal_of_another_boot_is_compacted_not_continued() {
        let dir = scratch("boot");
        commit_pods(&dir, &["a", "b"]);
        let mut n = node(&dir);
        let (mut store, r) = Store::open(&dir, &mut n, "next-boot").unwrap();
        assert!(r.rebooted);
        assert_eq!(r.saved_boot_id.as_deref(), Some("boot"));
        n.admit(&pod("c"));
        store.commit(&mut n).unwrap();
        assert_eq!(store.records(), 0, "the commit wrote a snapshot");
        let mut n = node(&dir);
        let (_, r) = Store::open(&dir, &mut n, "next-boot").unwrap();
        assert!(!r.rebooted);
        assert_eq!(r.pods, 3);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn compaction_starts_a_new_generation_and_an_old_journal_is_ignored() {
        let dir = scratch("compact");
        let (store, mut n, _) = open(&dir);
        let mut store = store.compact_above(1);
        for uid in ["a", "b", "c", "d"] {
            n.admit(&pod(uid));
            store.commit(&mut n).unwrap();
        }
        let body = state_json(&dir).unwrap();
        assert_eq!(body["pods"].as_object().unwrap().len(), 4);
        let generation = body["generation"].as_u64().unwrap();
        assert!(generation >= 2, "{body}");
        // A crash between the new snapshot and the new journal leaves the
        // journal of the previous generation, records and all: it is
        // ignored (the snapshot holds it).
        let path = dir.join(JOURNAL_FILE);
        n.admit(&pod("e"));
        store.commit(&mut n).unwrap();
        let old = fs::read(&path).unwrap();
        assert!(!journal::read(&path).unwrap().records.is_empty());
        store.compact(&n).unwrap();
        fs::write(&path, old).unwrap();
        let (_, n2, _) = open(&dir);
        assert_eq!(held(&n2).len(), 5);
        // Any other generation is refused, naming both.
        let older =
            journal::header_line(&path, &JournalHeader::new(generation - 1, "boot")).unwrap();
        fs::write(&path, &older).unwrap();
        let mut n3 = node(&dir);
        let err = Store::open(&dir, &mut n3, "boot").unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "{}: it continues snapshot generation {}, but the snapshot is generation {}. Nothing was changed",
                path.display(),
                generation - 1,
                generation + 1
            )),
            "{err}"
        );
        assert_eq!(
            fs::read(&path).unwrap(),
            older,
            "the refused journal is left as it was"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    /// A journal of the admissions of `uids` (then the releases of
    /// `release`), one record each; returns the directory's files.
    fn files_after(dir: &Path, uids: &[String], release: &[String]) -> (Vec<u8>, Vec<u8>) {
        let (mut store, mut n, _) = open(dir);
        for uid in uids {
            n.admit(&pod(uid));
            store.commit(&mut n).unwrap();
        }
        for uid in release {
            n.release(uid).unwrap();
            store.commit(&mut n).unwrap();
        }
        (
            fs::read(dir.join(STATE_FILE)).unwrap(),
            fs::read(dir.join(JOURNAL_FILE)).unwrap(),
        )
    }

    /// The recovered state as comparable JSON (body and boot id), or the
    /// refusal.
    fn state_of(dir: &Path, snapshot: &[u8], journal: &[u8]) -> Result<serde_json::Value, String> {
        let acks = fs::read(dir.join(ACK_FILE)).ok();
        match recover_bytes(dir, Some(snapshot), Some(journal), acks.as_deref()) {
            Ok(r) => Ok(
                serde_json::json!({"body": crate::persist::body_to_value(&r.body).unwrap(), "boot": r.boot_id}),
            ),
            Err(
                e @ (StateError::JournalDamaged { .. }
                | StateError::Damaged { .. }
                | StateError::Unsupported { .. }
                | StateError::Journal(journal::JournalError::Unsupported { .. })),
            ) => Err(e.to_string()),
            Err(e) => panic!("not a refusal of damage: {e}"),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3))]

        /// Every byte of a multi-record journal and of its snapshot changed
        /// (to another value and to zero), every 512-byte block of the
        /// journal zeroed, and the journal cut at every offset: recovery
        /// gives the identical state or refuses, never a different state.
        /// Every record was acknowledged, so every cut and every zeroed
        /// block is refused (a torn append can only follow the last
        /// acknowledged record).
        #[test]
        fn no_damage_gives_a_different_state(
            admitted in 3usize..7,
            released in 1usize..3,
            mask in 1u8..=255,
        ) {
            let dir = scratch(&format!("prop-{admitted}-{released}-{mask}"));
            let uids: Vec<String> = (0..admitted).map(|i| format!("pod-{i}")).collect();
            let (snapshot, journal) = files_after(&dir, &uids, &uids[1..1 + released]);
            let full = state_of(&dir, &snapshot, &journal).unwrap();
            let entries = journal::parse(&dir.join(JOURNAL_FILE), &journal).unwrap().records;
            proptest::prop_assert!(entries.len() >= 3, "{} records", entries.len());
            let mut refused = 0;
            for i in 0..journal.len() {
                for new in [journal[i] ^ mask, 0] {
                    if new == journal[i] {
                        continue;
                    }
                    let mut b = journal.clone();
                    b[i] = new;
                    match state_of(&dir, &snapshot, &b) {
                        Ok(state) => proptest::prop_assert_eq!(&state, &full, "journal byte {} = {:#x}", i, new),
                        Err(_) => refused += 1,
                    }
                }
            }
            proptest::prop_assert!(refused > journal.len() / 2, "{refused} refusals");
            for cut in 0..journal.len() {
                proptest::prop_assert!(state_of(&dir, &snapshot, &journal[..cut]).is_err(), "cut at {} of acknowledged records was accepted", cut);
            }
            for block in (0..journal.len()).step_by(512) {
                let mut b = journal.clone();
                b[block..(block + 512).min(journal.len())].fill(0);
                proptest::prop_assert!(state_of(&dir, &snapshot, &b).is_err(), "zeroed block at {} was accepted", block);
            }
            for i in 0..snapshot.len() {
                for new in [snapshot[i] ^ mask, 0] {
                    if new == snapshot[i] {
                        continue;
                    }
                    let mut b = snapshot.clone();
                    b[i] = new;
                    if let Ok(state) = state_of(&dir, &b, &journal) {
                        proptest::prop_assert_eq!(&state, &full, "snapshot byte {} = {:#x}", i, new);
                    }
                }
            }
            for cut in 0..snapshot.len() {
                proptest::prop_assert!(state_of(&dir, &snapshot[..cut], &journal).is_err(), "snapshot cut at {}", cut);
            }
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// One changed byte in record 2 of 6 used to drop records 2-6 as a
    /// "torn tail" (and compact over them): now the start is refused naming
    /// the file, the offset and the record, and the files stay as they are.
    #[test]
    fn a_damaged_record_with_intact_records_after_it_is_refused() {
        let dir = scratch("damaged-record");
        let uids: Vec<String> = (0..7).map(|i| format!("p{i}")).collect();
        files_after(&dir, &uids, &[]);
        let path = dir.join(JOURNAL_FILE);
        let good = fs::read(&path).unwrap();
        let c = journal::parse(&path, &good).unwrap();
        assert_eq!(c.records.len(), 6);
        let at = c.records[1].offset as usize + 102 + 20;
        let mut bad = good.clone();
        bad[at] ^= 0x04;
        fs::write(&path, &bad).unwrap();
        let snapshot = fs::read(dir.join(STATE_FILE)).unwrap();
        let mut n = node(&dir);
        let err = Store::open(&dir, &mut n, "boot").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: record 2 at byte {} is damaged: its payload does not match its SHA-256; records 3-6 after it are intact, so this is not a torn write. Nothing was changed; `topomgr state check --state-dir {d}` shows what the directory holds, and `topomgr state recover --state-dir {d}` keeps the snapshot and record 1, after a backup copy, and lists what it drops",
                path.display(),
                c.records[1].offset,
                d = dir.display()
            )
        );
        assert!(n.pods().is_empty(), "nothing was installed");
        assert_eq!(fs::read(&path).unwrap(), bad);
        assert_eq!(fs::read(dir.join(STATE_FILE)).unwrap(), snapshot);
        // The remedy (`state recover`) is tested end to end in the
        // integration tests (`state.rs`).
        fs::remove_dir_all(dir).unwrap();
    }

    /// The refusal of opening `dir` (whose files must stay as they are).
    fn refusal(dir: &Path) -> String {
        let files = [STATE_FILE, JOURNAL_FILE, ACK_FILE].map(|f| fs::read(dir.join(f)).ok());
        let mut n = node(dir);
        let err = Store::open(dir, &mut n, "boot").unwrap_err().to_string();
        assert!(n.pods().is_empty(), "nothing was installed");
        let after = [STATE_FILE, JOURNAL_FILE, ACK_FILE].map(|f| fs::read(dir.join(f)).ok());
        assert!(files == after, "a refusal changed a file");
        err
    }

    /// Issue 37 item 6: an acknowledged last record zeroed (whole, or one
    /// 512-byte block of it) or cut short used to be cut off as a torn
    /// append with a WARN; now the start is refused naming the file, the
    /// offset, the record and the remedy.
    #[test]
    fn an_acknowledged_last_record_zeroed_or_cut_is_refused() {
        let dir = scratch("acked-last");
        commit_pods(&dir, &["a", "b", "c"]);
        let path = dir.join(JOURNAL_FILE);
        let good = fs::read(&path).unwrap();
        let c = journal::parse(&path, &good).unwrap();
        assert_eq!(c.records.len(), 2);
        let last = c.records[1].offset as usize;
        let remedy = format!(
            ". Nothing was changed; `topomgr state check --state-dir {d}` shows what the directory holds, and `topomgr state recover --state-dir {d}` keeps the snapshot and record 1, after a backup copy, and lists what it drops",
            d = dir.display()
        );
        let acked = format!(
            "state.ack records that records 1-2 of generation 1 were acknowledged, ending at byte {}",
            good.len()
        );
        // The whole record zeroed.
        let mut zeroed = good.clone();
        zeroed[last..].fill(0);
        fs::write(&path, &zeroed).unwrap();
        assert_eq!(
            refusal(&dir),
            format!(
                "{}: record 2 at byte {last} is cut short or zeroed ({} bytes to the end of the file), but {acked}: it is not a torn write{remedy}",
                path.display(),
                good.len() - last
            )
        );
        // One 512-byte block of it zeroed, the file at its length: what a
        // torn append could leave, but the record was acknowledged.
        let block = (last / 512 + 1) * 512;
        assert!(block < good.len(), "the last record spans two blocks");
        let mut holed = good.clone();
        holed[block..(block + 512).min(good.len())].fill(0);
        fs::write(&path, &holed).unwrap();
        assert!(refusal(&dir).contains(&format!("record 2 at byte {last} is cut short or zeroed")));
        // Cut short inside the record, and cut at its start (a whole
        // acknowledged record gone).
        fs::write(&path, &good[..last + 40]).unwrap();
        assert!(refusal(&dir).contains(&format!(
            "record 2 at byte {last} is cut short or zeroed (40 bytes to the end of the file), but {acked}"
        )));
        fs::write(&path, &good[..last]).unwrap();
        assert_eq!(
            refusal(&dir),
            format!(
                "{}: the journal ends after record 1 at byte {last}, but {acked}: acknowledged records were cut off{remedy}",
                path.display()
            )
        );
        // The remedy works: `state recover` keeps record 1, drops record 2
        // naming why, and the directory opens.
        let rec = crate::persist::state_repair::recover(&dir, &dir.join("backup")).unwrap();
        assert_eq!(rec.kept.records, 1);
        assert!(
            rec.to_string()
                .contains("acknowledged records were cut off"),
            "{rec}"
        );
        assert_eq!(
            fs::read(dir.join("backup").join(JOURNAL_FILE)).unwrap(),
            &good[..last]
        );
        let (_, n, _) = open(&dir);
        assert_eq!(held(&n), ["a:0", "b:1"]);
        fs::remove_dir_all(dir).unwrap();
    }

    /// Issue 37 item 6: a deleted journal behind a snapshot that has
    /// acknowledged records of it was accepted silently; now it is refused,
    /// and so is a deleted or damaged ack file.
    #[test]
    fn a_deleted_journal_or_ack_file_is_refused() {
        let dir = scratch("acked-deleted");
        commit_pods(&dir, &["a", "b", "c"]);
        let path = dir.join(JOURNAL_FILE);
        let good = fs::read(&path).unwrap();
        fs::remove_file(&path).unwrap();
        assert!(
            refusal(&dir).starts_with(&format!(
                "{}: the journal is missing, but state.ack records that records 1-2 of generation 1 were acknowledged, ending at byte {}. Nothing was changed",
                path.display(),
                good.len()
            )),
            "{}",
            refusal(&dir)
        );
        fs::write(&path, &good).unwrap();
        let acks = fs::read(dir.join(ACK_FILE)).unwrap();
        fs::remove_file(dir.join(ACK_FILE)).unwrap();
        assert!(refusal(&dir).starts_with(&format!(
            "{}: it is missing, but the snapshot state.ckpt (version 4) is kept with it",
            dir.join(ACK_FILE).display()
        )));
        let mut zeroed = acks.clone();
        zeroed.fill(0);
        fs::write(dir.join(ACK_FILE), &zeroed).unwrap();
        assert!(refusal(&dir).contains("neither slot reads (slot 0: all zeros; slot 1: all zeros)"));
        // `state recover` keeps the snapshot and the intact records, and
        // writes the acknowledgements anew.
        let rec = crate::persist::state_repair::recover(&dir, &dir.join("backup")).unwrap();
        assert_eq!(rec.kept.records, 2);
        let (_, n, _) = open(&dir);
        assert_eq!(held(&n), ["a:0", "b:1", "c:2"]);
        fs::remove_dir_all(dir).unwrap();
    }

    /// A directory of a snapshot before version 4 (no acknowledgements)
    /// opens as before (a torn tail cut off), is never appended to, and the
    /// next change writes a version 4 snapshot with its acknowledgements.
    #[test]
    fn a_directory_without_acknowledgements_opens_and_moves_to_version_4() {
        let dir = scratch("v3-dir");
        commit_pods(&dir, &["a", "b", "c"]);
        let (_, body) = crate::persist::snapshot::decode_snapshot(
            &dir.join(STATE_FILE),
            &fs::read(dir.join(STATE_FILE)).unwrap(),
        )
        .unwrap();
        fs::write(
            dir.join(STATE_FILE),
            crate::persist::snapshot::encode_version(3, &body, "boot").unwrap(),
        )
        .unwrap();
        fs::remove_file(dir.join(ACK_FILE)).unwrap();
        let path = dir.join(JOURNAL_FILE);
        let mut torn = fs::read(&path).unwrap();
        torn.extend_from_slice(&journal::frame(3, b"{\"never\":1}")[..30]);
        fs::write(&path, &torn).unwrap();
        let (mut store, mut n, _) = open(&dir);
        assert_eq!(held(&n), ["a:0", "b:1", "c:2"]);
        n.admit(&pod("d"));
        store.commit(&mut n).unwrap();
        assert_eq!(store.records(), 0, "the commit wrote a snapshot");
        assert!(fs::read(dir.join(STATE_FILE))
            .unwrap()
            .starts_with(b"{\"format\":\"topomgr-state\",\"version\":4,"));
        n.admit(&pod("e"));
        store.commit(&mut n).unwrap();
        assert_eq!(store.records(), 1);
        drop((store, n));
        let (_, n, _) = open(&dir);
        assert_eq!(held(&n).len(), 5);
        fs::remove_dir_all(dir).unwrap();
    }

    /// `tests/fixtures/state/v4`: a version 4 directory (snapshot, a
    /// journal of 2 records, their acknowledgements) as this build writes
    /// it (`TOPOMGR_WRITE_STATE_V4=1` writes it anew); it opens with its
    /// pods, and every later build must open it.
    #[test]
    fn state_v4_fixture_opens() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/state/v4");
        let files = [STATE_FILE, JOURNAL_FILE, ACK_FILE];
        if std::env::var_os("TOPOMGR_WRITE_STATE_V4").is_some() {
            let dir = scratch("write-v4");
            commit_pods(&dir, &["a", "b", "c"]);
            fs::create_dir_all(&fixture).unwrap();
            for f in files {
                fs::copy(dir.join(f), fixture.join(f)).unwrap();
            }
            fs::remove_dir_all(dir).unwrap();
        }
        let dir = scratch("open-v4");
        fs::create_dir_all(&dir).unwrap();
        for f in files {
            fs::copy(fixture.join(f), dir.join(f)).unwrap();
        }
        let journal_len = fs::read(dir.join(JOURNAL_FILE)).unwrap().len() as u64;
        let acked = ack::acknowledged(&fs::read(dir.join(ACK_FILE)).unwrap(), 1).unwrap();
        assert_eq!(
            acked.ack,
            Ack {
                generation: 1,
                seq: 2,
                length: journal_len
            }
        );
        let (_, n, r) = open(&dir);
        assert!(r.found);
        assert_eq!(held(&n), ["a:0", "b:1", "c:2"]);
        fs::remove_dir_all(dir).unwrap();
    }

    /// `state check` reads a directory without its lock while the daemon
    /// appends: the acknowledgements are read before the journal, so an
    /// append in between never looks like acknowledged records cut off.
    #[test]
    fn state_check_during_appends_never_sees_acknowledged_records_missing() {
        let dir = scratch("check-live");
        commit_pods(&dir, &["a"]);
        let writer = {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let (mut store, mut n, _) = open(&dir);
                for _ in 0..300 {
                    n.admit(&pod("b"));
                    store.commit(&mut n).unwrap();
                    n.release("b").unwrap();
                    store.commit(&mut n).unwrap();
                }
            })
        };
        let mut checks = 0;
        while !writer.is_finished() {
            let c = crate::persist::state_repair::check(&dir).unwrap();
            if let Err(e) = &c.outcome {
                panic!("check {checks} refused a live directory: {e}");
            }
            checks += 1;
        }
        writer.join().unwrap();
        assert!(checks > 0);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_journal_with_records_and_no_snapshot_is_refused() {
        let dir = scratch("no-snapshot");
        files_after(&dir, &["a".to_owned(), "b".to_owned()], &[]);
        fs::remove_file(dir.join(STATE_FILE)).unwrap();
        let mut n = node(&dir);
        let err = Store::open(&dir, &mut n, "boot").unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "{}: it holds 1 record(s) of snapshot generation 1, but there is no snapshot (state.ckpt) for them to continue. Nothing was changed",
                dir.join(JOURNAL_FILE).display()
            )),
            "{err}"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_commit_that_changed_nothing_writes_nothing() {
        let dir = scratch("nothing");
        files_after(&dir, &["a".to_owned(), "b".to_owned()], &[]);
        let before = fs::read(dir.join(JOURNAL_FILE)).unwrap();
        let (mut store, mut n, _) = open(&dir);
        // Admitted and released again: the provider was asked, and its
        // state is what was written.
        n.admit(&pod("c"));
        n.release("c").unwrap();
        store.commit(&mut n).unwrap();
        assert_eq!(
            fs::read(dir.join(JOURNAL_FILE)).unwrap().len(),
            before.len() + {
                // The admission and the release are host changes: one record.
                let c = journal::read(&dir.join(JOURNAL_FILE)).unwrap();
                let last = c.records.last().unwrap();
                102 + last.payload.len() + 1
            }
        );
        let after = fs::read(dir.join(JOURNAL_FILE)).unwrap();
        store.commit(&mut n).unwrap();
        assert_eq!(fs::read(dir.join(JOURNAL_FILE)).unwrap(), after);
        fs::remove_dir_all(dir).unwrap();
    }
}
