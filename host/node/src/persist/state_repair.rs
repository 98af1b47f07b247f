//! The operator's verbs on a state directory: `topomgr state check`
//! ([`check`]: what the snapshot and the journal hold, what a start would
//! do, and every damage found with its file, byte offset and record
//! sequence number) and `topomgr state recover` ([`recover`]: keep what is
//! intact, after a backup copy of the files, and say exactly what is
//! dropped).
//!
//! What recovery keeps, by kind of damage ([`crate::persist::store`] refuses each of
//! them at start):
//!
//! | damage | kept | dropped |
//! |---|---|---|
//! | a journal record (not a torn append) | the snapshot and the records before it | that record and every record after it, the intact ones listed with what they changed |
//! | an acknowledged record cut short, zeroed or cut off ([`crate::persist::ack`]) | the snapshot and the records before it | that record |
//! | the ack file (missing or unreadable beside a version 4 snapshot) | the snapshot and the journal's intact records | the acknowledgements, written anew |
//! | the journal's header line, a journal of another generation | the snapshot | the journal |
//! | a journal with records and no snapshot | nothing | the journal |
//! | the snapshot | nothing | the snapshot (the pods it names, when its body still reads) and the journal |
//!
//! Records after a damaged one are dropped even when intact: each was
//! written on the state the damaged one produced (a provider's state is
//! written whole), so applying them without it could hand out what a
//! dropped admission holds. The report names the pods this forgets (admitted
//! by a dropped record) and the pods it brings back (released by a dropped
//! record), with what to do about each. The new snapshot is written with
//! the next generation, so a crash before the new journal is in place
//! leaves the old journal as the one of the generation before, which a
//! start ignores.

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use crate::fsutil::{self, write_atomic};
use crate::locks::lock_holder::{Holder, Role};
use crate::locks::state_lock::{LockError, StateLock};
use crate::persist::ack::{self, Ack, AckFile, ACK_FILE};
use crate::persist::journal::{
    self, Contents, End, Entry, Journal, JournalHeader, Torn, JOURNAL_FILE,
};
use crate::persist::snapshot::{
    decode_snapshot, decode_versioned, encode, Body, StateError, STATE_FILE,
};
use crate::persist::store::{acked_of, acknowledged_loss, read_optional, recover_bytes, Record};
use crate::state::Change;

/// What `state check` found.
#[derive(Debug)]
pub struct Check {
    /// The state directory.
    pub dir: PathBuf,
    /// The snapshot.
    pub snapshot: SnapshotFound,
    /// The journal.
    pub journal: JournalFound,
    /// The acknowledgements, in words (`None`: no ack file).
    pub acks: Option<String>,
    /// What a daemon or a one-shot command would do: start on this state,
    /// or refuse.
    pub outcome: Result<Summary, StateError>,
}

/// The snapshot as found.
#[derive(Debug)]
pub enum SnapshotFound {
    /// There is none.
    Absent,
    /// Intact.
    Intact {
        /// Its generation.
        generation: u64,
        /// The boot it was written in.
        boot_id: String,
        /// Its size.
        bytes: u64,
    },
    /// Refused (damaged, or of another format or version).
    Refused {
        /// Why.
        reason: String,
        /// Its size.
        bytes: u64,
    },
}

/// The journal as found.
#[derive(Debug)]
pub struct JournalFound {
    /// What reading it found (`Contents::default()`: no journal).
    pub contents: Contents,
    /// Its size.
    pub bytes: u64,
}

/// The state a start would restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The snapshot generation (0: no snapshot).
    pub generation: u64,
    /// Journal records applied.
    pub records: u64,
    /// Admitted pods: `namespace/name (uid)`.
    pub pods: Vec<String>,
    /// Providers with saved state: name and bytes.
    pub providers: Vec<(String, usize)>,
    /// Containers attached to cgroups.
    pub attachments: usize,
    /// Pods owned by a `topomgr run`.
    pub owners: usize,
    /// A torn append the next start cuts off.
    pub torn: Option<Torn>,
}

fn pod_label(uid: &str, namespace: &str, name: &str) -> String {
    format!("{namespace}/{name} (uid {uid})")
}

impl Summary {
    fn of(body: &Body, records: u64, torn: Option<Torn>) -> Summary {
        Summary {
            generation: body.generation,
            records,
            pods: body
                .pods
                .iter()
                .map(|(uid, r)| pod_label(uid, &r.pod.namespace, &r.pod.name))
                .collect(),
            providers: body
                .providers
                .iter()
                .map(|(name, hex)| (name.clone(), hex.len() / 2))
                .collect(),
            attachments: body.attachments.values().map(|c| c.len()).sum(),
            owners: body.owners.len(),
            torn,
        }
    }
}

/// The latest acknowledgement an ack file holds, in words.
fn describe_acks(bytes: &[u8]) -> String {
    let latest = ack::latest(bytes);
    match latest {
        Some(a) if a.seq == 0 => format!(
            "generation {}, no record acknowledged yet, {} bytes",
            a.generation,
            bytes.len()
        ),
        Some(a) => format!(
            "generation {}, records 1-{} acknowledged (to byte {}), {} bytes",
            a.generation,
            a.seq,
            a.length,
            bytes.len()
        ),
        None => format!("{} bytes, no slot reads", bytes.len()),
    }
}

fn file_size(bytes: &Option<Vec<u8>>) -> u64 {
    bytes.as_ref().map_or(0, |b| b.len() as u64)
}

/// Verify the state directory `dir` and summarize it. Reads only (no lock:
/// a running daemon's directory can be checked; an append in flight then
/// shows as a torn tail). Errors: the files cannot be read.
pub fn check(dir: &Path) -> Result<Check, StateError> {
    if !dir.is_dir() {
        return Err(StateError::Io {
            path: dir.to_path_buf(),
            cause: std::io::Error::new(std::io::ErrorKind::NotFound, "no such state directory"),
        });
    }
    let snapshot_bytes = read_optional(&dir.join(STATE_FILE))?;
    // The acknowledgements before the journal: an append of a running
    // daemon in between then leaves the journal longer than they say, never
    // shorter.
    let ack_bytes = read_optional(&dir.join(ACK_FILE))?;
    let journal_bytes = read_optional(&dir.join(JOURNAL_FILE))?;
    let acks = ack_bytes.as_deref().map(describe_acks);
    let snapshot = match &snapshot_bytes {
        None => SnapshotFound::Absent,
        Some(b) => match decode_snapshot(&dir.join(STATE_FILE), b) {
            Ok((boot_id, body)) => SnapshotFound::Intact {
                generation: body.generation,
                boot_id,
                bytes: b.len() as u64,
            },
            Err(e) => SnapshotFound::Refused {
                reason: e.to_string(),
                bytes: b.len() as u64,
            },
        },
    };
    let contents = match &journal_bytes {
        Some(b) => journal::parse(&dir.join(JOURNAL_FILE), b)?,
        None => Contents::default(),
    };
    let outcome = recover_bytes(
        dir,
        snapshot_bytes.as_deref(),
        journal_bytes.as_deref(),
        ack_bytes.as_deref(),
    )
    .map(|rec| Summary::of(&rec.body, rec.journal.map_or(0, |j| j.seq), rec.torn));
    Ok(Check {
        dir: dir.to_path_buf(),
        snapshot,
        journal: JournalFound {
            contents,
            bytes: file_size(&journal_bytes),
        },
        acks,
        outcome,
    })
}

impl Check {
    /// Whether a daemon or command can start on this directory.
    pub fn ok(&self) -> bool {
        self.outcome.is_ok()
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "state directory {}", self.dir.display())?;
        match &self.snapshot {
            SnapshotFound::Absent => writeln!(f, "snapshot {STATE_FILE}: absent")?,
            SnapshotFound::Intact {
                generation,
                boot_id,
                bytes,
            } => writeln!(
                f,
                "snapshot {STATE_FILE}: generation {generation}, {bytes} bytes, written in boot {boot_id}, intact"
            )?,
            SnapshotFound::Refused { reason, bytes } => {
                writeln!(f, "snapshot {STATE_FILE}: {bytes} bytes, REFUSED: {reason}")?
            }
        }
        let c = &self.journal.contents;
        if !c.exists {
            writeln!(f, "journal {JOURNAL_FILE}: absent")?;
        } else {
            match &c.header {
                Some(h) => writeln!(
                    f,
                    "journal {JOURNAL_FILE}: version {}, continues generation {}, started in boot {}, {} bytes, {} intact record(s){}",
                    h.version,
                    h.generation,
                    h.boot_id,
                    self.journal.bytes,
                    c.records.len(),
                    match (c.records.first(), c.records.last()) {
                        (Some(a), Some(b)) => format!(" (sequence {}-{})", a.seq, b.seq),
                        _ => String::new(),
                    }
                )?,
                None => writeln!(f, "journal {JOURNAL_FILE}: {} bytes", self.journal.bytes)?,
            }
            match &c.end {
                End::Clean => {}
                End::Torn(t) => writeln!(
                    f,
                    "  torn append at byte {}: {} bytes of record {}, never acknowledged; the next start cuts it off",
                    t.offset, t.bytes, t.seq
                )?,
                End::Damaged(d) => {
                    match d.seq {
                        Some(seq) => write!(
                            f,
                            "  DAMAGE at byte {} (record {seq}): {}",
                            d.offset, d.reason
                        )?,
                        None => write!(f, "  DAMAGE at byte 0 (header line): {}", d.reason)?,
                    }
                    match (d.later.first(), d.later.last()) {
                        (Some(a), Some(b)) => writeln!(
                            f,
                            "; intact records after it: {} (sequence {}-{})",
                            d.later.len(),
                            a.seq,
                            b.seq
                        )?,
                        _ => writeln!(f)?,
                    }
                }
            }
        }
        if let Some(acks) = &self.acks {
            writeln!(f, "acknowledgements {ACK_FILE}: {acks}")?;
        }
        match &self.outcome {
            Ok(s) => {
                writeln!(
                    f,
                    "state: generation {} + {} record(s): {} pod(s), {} attached container(s), {} run owner(s)",
                    s.generation,
                    s.records,
                    s.pods.len(),
                    s.attachments,
                    s.owners
                )?;
                for pod in &s.pods {
                    writeln!(f, "  pod {pod}")?;
                }
                for (name, bytes) in &s.providers {
                    writeln!(f, "  provider {name}: {bytes} bytes of state")?;
                }
                write!(f, "ok: a daemon or command starts on this state")
            }
            Err(e) => write!(
                f,
                "refused: a daemon or command refuses to start here:\n  {e}"
            ),
        }
    }
}

/// What one dropped record held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordContent {
    /// Its host changes and the providers whose state it wrote.
    Readable {
        /// Pods admitted: (uid, `namespace/name (uid)`).
        admitted: Vec<(String, String)>,
        /// Pod uids released.
        released: Vec<String>,
        /// Other host changes (attachments, owners), counted.
        other: usize,
        /// Providers whose state it wrote.
        providers: Vec<String>,
    },
    /// Unreadable.
    Unreadable {
        /// Why.
        reason: String,
    },
}

/// Something recovery drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dropped {
    /// The snapshot.
    Snapshot {
        /// Why it is refused.
        reason: String,
        /// The pods its body names, when it still reads.
        pods: Vec<String>,
    },
    /// The acknowledgements (they are written anew).
    Acks {
        /// Why they are refused.
        reason: String,
    },
    /// A journal record.
    Record {
        /// Its sequence number.
        seq: u64,
        /// Its byte offset.
        offset: u64,
        /// What it held.
        content: RecordContent,
    },
}

/// What `state recover` did.
#[derive(Debug)]
pub struct Recovery {
    /// The state directory.
    pub dir: PathBuf,
    /// Where the files were copied before anything was written (`None`:
    /// nothing needed recovery and nothing was written).
    pub backup: Option<PathBuf>,
    /// The state kept.
    pub kept: Summary,
    /// Whether the snapshot was kept (else recovery starts from nothing).
    pub kept_snapshot: bool,
    /// What was dropped, in file order.
    pub dropped: Vec<Dropped>,
    /// The generation of the snapshot written (`None`: nothing written).
    pub written: Option<u64>,
}

/// Why `state recover` did nothing.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// Another process (a daemon, a command) holds the directory.
    #[error("state recover refuses to change {}: {cause}; stop the daemon (or wait for the command) first", dir.display())]
    Busy {
        /// The state directory.
        dir: PathBuf,
        /// The lock's refusal (in the message: no source).
        cause: LockError,
    },
    /// The files cannot be read or written, or are of another version.
    #[error(transparent)]
    State(#[from] StateError),
    /// The backup copy could not be made (nothing was changed).
    #[error("cannot back up {} into {}: {cause}; nothing was changed (free space, or name another directory with --backup-dir)", file.display(), backup.display())]
    Backup {
        /// The file.
        file: PathBuf,
        /// The backup directory.
        backup: PathBuf,
        /// The error.
        cause: std::io::Error,
    },
}

/// The plan of a recovery.
struct Plan {
    body: Body,
    boot_id: Option<String>,
    records: u64,
    kept_snapshot: bool,
    dropped: Vec<Dropped>,
    /// The highest generation any file names.
    generation: u64,
}

fn content_of(path: &Path, e: &Entry) -> RecordContent {
    match Record::of(path, e) {
        Ok(r) => {
            let mut content = (Vec::new(), Vec::new(), 0);
            for change in &r.changes {
                match change {
                    Change::Admitted(a) => content.0.push((
                        a.pod.uid.clone(),
                        pod_label(&a.pod.uid, &a.pod.namespace, &a.pod.name),
                    )),
                    Change::Released { uid } => content.1.push(uid.clone()),
                    _ => content.2 += 1,
                }
            }
            RecordContent::Readable {
                admitted: content.0,
                released: content.1,
                other: content.2,
                providers: r
                    .providers
                    .keys()
                    .chain(r.pending_releases.keys())
                    .cloned()
                    .collect(),
            }
        }
        Err(e) => RecordContent::Unreadable {
            reason: e.to_string(),
        },
    }
}

/// The pods a snapshot whose checksum fails still names, if its body reads.
fn pods_named(bytes: &[u8]) -> Vec<String> {
    let Some(nl) = bytes.iter().position(|b| *b == b'\n') else {
        return Vec::new();
    };
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(&bytes[nl + 1..]) else {
        return Vec::new();
    };
    let Some(pods) = body.get("pods").and_then(|p| p.as_object()) else {
        return Vec::new();
    };
    pods.iter()
        .map(|(uid, r)| {
            let field = |f: &str| r["pod"][f].as_str().unwrap_or("?").to_owned();
            pod_label(uid, &field("namespace"), &field("name"))
        })
        .collect()
}

fn plan(
    dir: &Path,
    snapshot: Option<&[u8]>,
    journal_bytes: Option<&[u8]>,
    ack_bytes: Option<&[u8]>,
) -> Result<Plan, StateError> {
    let jpath = dir.join(JOURNAL_FILE);
    let contents = match journal_bytes {
        Some(b) => journal::parse(&jpath, b)?,
        None => Contents::default(),
    };
    let mut dropped = Vec::new();
    let mut version = None;
    let (mut boot_id, mut body) = match snapshot {
        None => (None, Body::default()),
        Some(b) => match decode_versioned(&dir.join(STATE_FILE), b) {
            Ok((v, boot, body)) => {
                version = Some(v);
                (Some(boot), body)
            }
            Err(e @ StateError::Unsupported { .. }) => return Err(e),
            Err(e) => {
                dropped.push(Dropped::Snapshot {
                    reason: e.to_string(),
                    pods: pods_named(b),
                });
                (None, Body::default())
            }
        },
    };
    let kept_snapshot = boot_id.is_some();
    let mut generation = body.generation;
    let mut records = 0;
    let (damage, later) = match &contents.end {
        End::Damaged(d) => (Some(d), d.later.as_slice()),
        _ => (None, &[][..]),
    };
    let header = contents.header.as_ref();
    if let Some(h) = header {
        generation = generation.max(h.generation);
    }
    let continues = kept_snapshot && header.is_some_and(|h| h.generation == body.generation);
    let obsolete = kept_snapshot && header.is_some_and(|h| h.generation + 1 == body.generation);
    // Acknowledged records the journal lacks (a damaged record is listed
    // below with its damage).
    let mut lost = None;
    match acked_of(dir, version, body.generation, ack_bytes) {
        Err(StateError::JournalDamaged { what, .. }) => {
            dropped.push(Dropped::Acks { reason: what })
        }
        Err(e) => return Err(e),
        Ok(Some(a)) if damage.is_none() => {
            if let Some((seq, offset, reason)) = acknowledged_loss(&contents, &a.ack, continues) {
                let whole = !contents.exists || !continues;
                lost = Some(Dropped::Record {
                    seq: if whole { 0 } else { seq },
                    offset,
                    content: RecordContent::Unreadable { reason },
                });
            }
        }
        Ok(_) => {}
    }
    let mut drop_from = 0;
    if continues {
        drop_from = contents.records.len();
        for (i, e) in contents.records.iter().enumerate() {
            match Record::of(&jpath, e) {
                Ok(r) => {
                    r.apply(&mut body);
                    records = e.seq;
                    if let Some(h) = header {
                        boot_id = Some(h.boot_id.clone());
                    }
                }
                Err(_) => {
                    drop_from = i;
                    break;
                }
            }
        }
    }
    dropped.extend(lost);
    if !obsolete {
        for e in &contents.records[drop_from..] {
            dropped.push(Dropped::Record {
                seq: e.seq,
                offset: e.offset,
                content: content_of(&jpath, e),
            });
        }
        if let Some(d) = damage {
            if let Some(seq) = d.seq {
                dropped.push(Dropped::Record {
                    seq,
                    offset: d.offset,
                    content: RecordContent::Unreadable {
                        reason: d.reason.clone(),
                    },
                });
            } else {
                dropped.push(Dropped::Record {
                    seq: 0,
                    offset: 0,
                    content: RecordContent::Unreadable {
                        reason: format!("the journal's header line: {}", d.reason),
                    },
                });
            }
            for e in later {
                dropped.push(Dropped::Record {
                    seq: e.seq,
                    offset: e.offset,
                    content: content_of(&jpath, e),
                });
            }
        }
    }
    Ok(Plan {
        body,
        boot_id,
        records,
        kept_snapshot,
        dropped,
        generation,
    })
}

/// Copy `files` of `dir` that exist into `backup` (created; it must not
/// exist), each synced, then the directory.
fn back_up(dir: &Path, backup: &Path, files: &[&str]) -> Result<(), RecoverError> {
    let fail = |file: &Path| {
        let (file, backup) = (file.to_path_buf(), backup.to_path_buf());
        move |cause| RecoverError::Backup {
            file,
            backup,
            cause,
        }
    };
    fs::create_dir(backup).map_err(fail(backup))?;
    for name in files {
        let from = dir.join(name);
        if !from.exists() {
            continue;
        }
        let to = backup.join(name);
        fs::copy(&from, &to).map_err(fail(&from))?;
        fs::File::open(&to)
            .and_then(|f| f.sync_all())
            .map_err(fail(&from))?;
    }
    fs::File::open(backup)
        .and_then(|d| d.sync_all())
        .map_err(fail(backup))?;
    if let Some(parent) = backup.parent() {
        fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(fail(parent))?;
    }
    Ok(())
}

/// The backup directory recovery uses unless told: `damaged-<seconds since
/// the epoch>` in the state directory.
pub fn default_backup(dir: &Path) -> PathBuf {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    dir.join(format!("damaged-{now}"))
}

/// Recover `dir`: take its lock (refused while a daemon or command holds
/// it), and when anything is damaged copy the snapshot and the journal into
/// `backup`, then write what is intact as a new snapshot (the next
/// generation) and an empty journal. Nothing is written when nothing is
/// damaged (a torn tail is cut off by the next start).
pub fn recover(dir: &Path, backup: &Path) -> Result<Recovery, RecoverError> {
    if !dir.is_dir() {
        return Err(StateError::Io {
            path: dir.to_path_buf(),
            cause: std::io::Error::new(std::io::ErrorKind::NotFound, "no such state directory"),
        }
        .into());
    }
    let me = Holder::current(Role::StateRecover, dir, None);
    let _lock = StateLock::acquire(dir, &me).map_err(|cause| RecoverError::Busy {
        dir: dir.to_path_buf(),
        cause,
    })?;
    let snapshot = read_optional(&dir.join(STATE_FILE))?;
    let journal_bytes = read_optional(&dir.join(JOURNAL_FILE))?;
    let ack_bytes = read_optional(&dir.join(ACK_FILE))?;
    let plan = plan(
        dir,
        snapshot.as_deref(),
        journal_bytes.as_deref(),
        ack_bytes.as_deref(),
    )?;
    if plan.dropped.is_empty() {
        // Nothing damaged: what a start restores.
        let rec = recover_bytes(
            dir,
            snapshot.as_deref(),
            journal_bytes.as_deref(),
            ack_bytes.as_deref(),
        )?;
        return Ok(Recovery {
            dir: dir.to_path_buf(),
            backup: None,
            kept: Summary::of(&rec.body, rec.journal.map_or(0, |j| j.seq), rec.torn),
            kept_snapshot: snapshot.is_some(),
            dropped: Vec::new(),
            written: None,
        });
    }
    back_up(dir, backup, &[STATE_FILE, JOURNAL_FILE, ACK_FILE])?;
    let mut body = plan.body;
    let kept = Summary::of(&body, plan.records, None);
    body.generation = plan.generation + 1;
    let boot_id = plan.boot_id.unwrap_or_else(fsutil::boot_id);
    // New acknowledgements first: were this cut short before the snapshot,
    // a start refuses them and `state recover` runs again.
    let ack_path = dir.join(ACK_FILE);
    AckFile::create(
        &ack_path,
        &Ack {
            generation: body.generation,
            seq: 0,
            length: 0,
        },
    )
    .map_err(|cause| StateError::Io {
        path: ack_path,
        cause,
    })?;
    write_atomic(&dir.join(STATE_FILE), &encode(&body, &boot_id)?).map_err(StateError::from)?;
    Journal::create(
        &dir.join(JOURNAL_FILE),
        &JournalHeader::new(body.generation, &boot_id),
    )
    .map_err(StateError::from)?;
    Ok(Recovery {
        dir: dir.to_path_buf(),
        backup: Some(backup.to_path_buf()),
        kept,
        kept_snapshot: plan.kept_snapshot,
        dropped: plan.dropped,
        written: Some(body.generation),
    })
}

impl Recovery {
    /// Pods admitted by a dropped record and absent from the kept state
    /// (`namespace/name (uid)`), and pods released by a dropped record but
    /// admitted in the kept state (uids).
    pub fn consequences(&self) -> (Vec<String>, Vec<String>) {
        let kept: BTreeSet<&str> = self
            .kept
            .pods
            .iter()
            .filter_map(|p| p.rsplit_once("(uid ").map(|(_, u)| u.trim_end_matches(')')))
            .collect();
        let mut forgotten = BTreeSet::new();
        let mut back = BTreeSet::new();
        for d in &self.dropped {
            match d {
                Dropped::Snapshot { pods, .. } => forgotten.extend(pods.iter().cloned()),
                Dropped::Record {
                    content:
                        RecordContent::Readable {
                            admitted, released, ..
                        },
                    ..
                } => {
                    for (uid, label) in admitted {
                        if !kept.contains(uid.as_str()) {
                            forgotten.insert(label.clone());
                        }
                    }
                    for uid in released {
                        if kept.contains(uid.as_str()) {
                            back.insert(uid.clone());
                        }
                    }
                }
                Dropped::Record { .. } | Dropped::Acks { .. } => {}
            }
        }
        (forgotten.into_iter().collect(), back.into_iter().collect())
    }
}

impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = self.dir.display();
        let Some(backup) = &self.backup else {
            write!(
                f,
                "nothing to recover in {dir}: no damage (generation {} + {} record(s), {} pod(s)); nothing was changed",
                self.kept.generation,
                self.kept.records,
                self.kept.pods.len()
            )?;
            if let Some(t) = &self.kept.torn {
                write!(
                    f,
                    "\nthe torn append at byte {} ({} bytes of record {}) is cut off by the next start",
                    t.offset, t.bytes, t.seq
                )?;
            }
            return Ok(());
        };
        writeln!(
            f,
            "backup: {STATE_FILE}, {JOURNAL_FILE} and {ACK_FILE} of {dir} as they were, in {}",
            backup.display()
        )?;
        if self.kept_snapshot {
            writeln!(
                f,
                "kept: the snapshot (generation {}) and {} journal record(s): {} pod(s)",
                self.kept.generation,
                self.kept.records,
                self.kept.pods.len()
            )?;
        } else {
            writeln!(f, "kept: nothing (empty state)")?;
        }
        for pod in &self.kept.pods {
            writeln!(f, "  pod {pod}")?;
        }
        writeln!(f, "dropped:")?;
        for d in &self.dropped {
            match d {
                Dropped::Acks { reason } => writeln!(
                    f,
                    "  the acknowledgements {ACK_FILE} (the journal's intact records are kept): {reason}"
                )?,
                Dropped::Snapshot { reason, pods } => {
                    writeln!(f, "  the snapshot {STATE_FILE}: {reason}")?;
                    for pod in pods {
                        writeln!(f, "    it named pod {pod}")?;
                    }
                }
                Dropped::Record {
                    seq: 0, content, ..
                } => writeln!(
                    f,
                    "  every record of {JOURNAL_FILE}: {}",
                    match content {
                        RecordContent::Unreadable { reason } => reason.as_str(),
                        RecordContent::Readable { .. } => "",
                    }
                )?,
                Dropped::Record {
                    seq,
                    offset,
                    content,
                } => {
                    write!(f, "  {JOURNAL_FILE} record {seq} at byte {offset}: ")?;
                    match content {
                        RecordContent::Unreadable { reason } => {
                            writeln!(f, "unreadable ({reason})")?
                        }
                        RecordContent::Readable {
                            admitted,
                            released,
                            other,
                            providers,
                        } => {
                            let mut parts: Vec<String> = admitted
                                .iter()
                                .map(|(_, label)| format!("admitted {label}"))
                                .collect();
                            parts.extend(released.iter().map(|uid| format!("released uid {uid}")));
                            if *other > 0 {
                                parts.push(format!("{other} cgroup or owner change(s)"));
                            }
                            if !providers.is_empty() {
                                parts.push(format!("state of {}", providers.join(", ")));
                            }
                            writeln!(f, "intact: {}", parts.join("; "))?
                        }
                    }
                }
            }
        }
        let (forgotten, back) = self.consequences();
        if !forgotten.is_empty() {
            writeln!(
                f,
                "forgotten (admitted by what was dropped; what they hold may now be given to other pods: stop them, or admit them again): {}",
                forgotten.join(", ")
            )?;
        }
        if !back.is_empty() {
            writeln!(
                f,
                "admitted again (released by what was dropped; release each once its workload is gone: topomgr release --state-dir {dir} UID): {}",
                back.join(", ")
            )?;
        }
        write!(
            f,
            "written: snapshot generation {} and an empty journal; a daemon or command starts on {dir} now",
            self.written.unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("topomgr-repair-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// A journal of `records` empty records for snapshot `generation`.
    fn journal(dir: &Path, generation: u64, records: u64) {
        let mut j = Journal::create(
            &dir.join(JOURNAL_FILE),
            &JournalHeader::new(generation, "boot"),
        )
        .unwrap();
        for seq in 1..=records {
            j.append(seq, format!("{{\"seq\":{seq}}}").as_bytes())
                .unwrap();
        }
    }

    #[test]
    fn a_journal_without_its_snapshot_is_refused_and_recovered() {
        let dir = scratch("orphan");
        journal(&dir, 4, 2);
        let c = check(&dir).unwrap();
        assert!(!c.ok());
        assert!(
            c.to_string().contains(
                "it holds 2 record(s) of snapshot generation 4, but there is no snapshot"
            ),
            "{c}"
        );
        let r = recover(&dir, &dir.join("backup")).unwrap();
        assert!(!r.kept_snapshot);
        assert_eq!(r.dropped.len(), 2);
        assert_eq!(r.written, Some(5));
        assert!(dir.join("backup").join(JOURNAL_FILE).is_file());
        let c = check(&dir).unwrap();
        assert!(c.ok(), "{c}");
        // Nothing damaged: recover changes nothing.
        let r = recover(&dir, &dir.join("backup-2")).unwrap();
        assert!(r.backup.is_none() && !dir.join("backup-2").exists());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_journal_of_another_generation_is_dropped_and_the_snapshot_kept() {
        let dir = scratch("generation");
        write_atomic(
            &dir.join(STATE_FILE),
            &encode(
                &Body {
                    generation: 3,
                    ..Body::default()
                },
                "boot",
            )
            .unwrap(),
        )
        .unwrap();
        journal(&dir, 7, 1);
        assert!(!check(&dir).unwrap().ok());
        let r = recover(&dir, &dir.join("backup")).unwrap();
        assert!(r.kept_snapshot);
        assert_eq!(r.written, Some(8));
        assert!(check(&dir).unwrap().ok());
        fs::remove_dir_all(dir).unwrap();
    }
}
