//! The durable state of a state directory: a snapshot (`STATE_FILE`,
//! [`crate::snapshot`]) and the journal of every change made since
//! (`JOURNAL_FILE`, `crate::journal`).
//!
//! # Writing: proportional to the change
//!
//! [`Store::commit`] appends ONE record for everything changed since the
//! last commit — the daemon's state thread commits once per batch of waiting
//! requests (group commit) — and makes it durable with `fdatasync` before
//! the caller acknowledges anything. A record holds
//! - the host's changes ([`Change`]: pods admitted and released, cgroups
//!   attached and detached, owners of `run` pods), and
//! - the state of each provider that changed (was asked to allocate or
//!   release, or had a release remembered while held): providers keep their
//!   state behind the opaque `checkpoint()` of the contract, so a changed
//!   provider's state is written whole, an unchanged one not at all. The
//!   CPU, memory and device providers' states are bounded by the machine
//!   (what they hold exclusively), not by the pods held.
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
//! that snapshot's generation (a journal of an older generation is left
//! over from a compaction that crashed after the snapshot was renamed: the
//! snapshot holds all of it), applies the valid records in order (each
//! carries the next sequence number) and stops at the first torn or
//! damaged one: only what was written after the last completed `fdatasync`
//! can be torn, and none of that was acknowledged. The torn tail is cut off
//! before the next append. The result is installed like a snapshot alone
//! (vanished resources reported, held providers,
//! releases replayed). The boot id is that of the last writer.
//!
//! A failed append or compaction (a full disk) leaves the files as they
//! were (or marks the journal to be started anew); the caller rolls its
//! memory back with [`Store::reload`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::{self, write_atomic};
use crate::image::{self, provider_part, Restored};
use crate::journal::{self, Journal, JournalHeader, JOURNAL_FILE, JOURNAL_FORMAT, JOURNAL_VERSION};
use crate::node_state::{Change, NodeState};
use crate::provider_states::{PendingReleases, ProviderPart};
use crate::snapshot::{
    encode, provider_bytes, provider_error, read_snapshot, to_hex, Body, StateError, STATE_FILE,
};
use topomgr_engine::provider::LoadedProvider;

/// The journal is compacted once it is larger than this and larger than
/// the snapshot.
pub(crate) const COMPACT_MIN: u64 = 1 << 20;

/// One journal record: everything one commit changed.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    /// 1 for the first record of a generation, then +1.
    seq: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    changes: Vec<Change>,
    /// Changed providers: name -> hex of their checkpoint bytes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    providers: BTreeMap<String, String>,
    /// Changed held or absent providers: the releases they have not seen.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pending_releases: BTreeMap<String, PendingReleases>,
}

impl Record {
    fn apply(self, body: &mut Body) {
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

/// What was read from a state directory.
struct Recovered {
    body: Body,
    /// The boot of the last writer (`None`: nothing was saved yet).
    boot_id: Option<String>,
    snapshot_len: u64,
    /// Records applied, the journal's valid length and the boot it was
    /// started in, when it continues the snapshot (`None`: no usable journal).
    journal: Option<(u64, u64, String)>,
}

fn recover(dir: &Path) -> Result<Recovered, StateError> {
    let snapshot = dir.join(STATE_FILE);
    let (mut boot_id, mut body, snapshot_len) = match read_snapshot(&snapshot)? {
        Some((boot, body, len)) => (Some(boot), body, len),
        None => (None, Body::default(), 0),
    };
    let path = dir.join(JOURNAL_FILE);
    let contents = journal::read(&path)?;
    let mut journal = None;
    let mut ignored = contents.ignored;
    match contents.header {
        Some(h) if h.generation == body.generation => {
            let mut seq = 0;
            for (i, payload) in contents.records.iter().enumerate() {
                let record: Record = match serde_json::from_slice(payload) {
                    Ok(r) => r,
                    Err(e) => {
                        return Err(StateError::Corrupt {
                            path: path.clone(),
                            reason: format!(
                                "record {} has a valid checksum but does not parse: {e}",
                                i + 1
                            ),
                        })
                    }
                };
                if record.seq != seq + 1 {
                    return Err(StateError::Corrupt {
                        path: path.clone(),
                        reason: format!(
                            "record {} has sequence number {}, expected {}",
                            i + 1,
                            record.seq,
                            seq + 1
                        ),
                    });
                }
                seq = record.seq;
                record.apply(&mut body);
            }
            if seq > 0 {
                boot_id = Some(h.boot_id.clone());
            }
            journal = Some((seq, contents.valid_len, h.boot_id));
        }
        Some(h) => {
            tracing::info!(journal = %path.display(), generation = h.generation, snapshot_generation = body.generation, "journal of an earlier snapshot generation ignored (the snapshot holds it)");
            ignored = 0;
        }
        None => {}
    }
    if ignored > 0 {
        tracing::info!(journal = %path.display(), bytes = ignored, "torn end of the journal ignored (a write that never completed; never acknowledged)");
    }
    Ok(Recovered {
        body,
        boot_id,
        snapshot_len,
        journal,
    })
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
    compact_min: u64,
}

/// Why a commit failed (nothing of it is durable).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct CommitError(#[from] StateError);

impl Store {
    /// Recover the state of `dir` (lock it first) into `node`: snapshot
    /// plus the valid prefix of the journal, installed with
    /// the same checks as a snapshot alone. A torn journal tail is cut off.
    pub fn open(
        dir: &Path,
        node: &mut NodeState,
        boot_id: &str,
    ) -> Result<(Store, Restored), StateError> {
        fsutil::remove_stale_temps(dir, STATE_FILE);
        let rec = recover(dir)?;
        let found = rec.boot_id.is_some();
        let generation = rec.body.generation;
        let saved_boot = rec.boot_id.clone().unwrap_or_else(|| boot_id.to_owned());
        let restored = if found {
            image::install(&dir.join(STATE_FILE), saved_boot, rec.body, node, boot_id)?
        } else {
            Restored::default()
        };
        // A journal started in another boot is not continued: its header
        // would name the wrong boot as the last writer. The next commit
        // compacts instead (until then it stays as it is for recovery).
        let mut continued = true;
        let (seq, journal) = match rec.journal {
            Some((seq, valid_len, boot)) if boot == boot_id => (
                seq,
                Some(Journal::resume(&dir.join(JOURNAL_FILE), valid_len)?),
            ),
            // Empty: nothing to keep, it is started anew below.
            Some((0, _, _)) => (0, None),
            Some((seq, _, _)) => {
                continued = false;
                (seq, None)
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
            compact_min: COMPACT_MIN,
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
        let header = JournalHeader {
            format: JOURNAL_FORMAT.to_owned(),
            version: JOURNAL_VERSION,
            generation: self.generation,
            boot_id: self.boot_id.clone(),
        };
        self.journal = Some(Journal::create(&self.dir.join(JOURNAL_FILE), &header)?);
        self.seq = 0;
        Ok(())
    }

    /// Make everything `node` changed since the last commit durable: one
    /// journal record, or a new snapshot when the journal is due for
    /// compaction. Returns the host's changes it wrote (for readers).
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
                    record.providers.insert(name, to_hex(&bytes));
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
        let payload = serde_json::to_vec(&record).map_err(|e| StateError::Corrupt {
            path: self.dir.join(JOURNAL_FILE),
            reason: format!("cannot serialize a journal record: {e}"),
        })?;
        let Some(journal) = self.journal.as_mut() else {
            return Err(StateError::Corrupt {
                path: self.dir.join(JOURNAL_FILE),
                reason: "no journal to append to".to_owned(),
            }
            .into());
        };
        if let Err(e) = journal.append(&payload) {
            if !e.clean {
                self.journal = None;
            }
            return Err(StateError::from(e.error).into());
        }
        self.seq = record.seq;
        Ok(record.changes)
    }

    /// Write the whole state as a new snapshot (generation + 1) and start a
    /// new journal for it.
    pub fn compact(&mut self, node: &NodeState) -> Result<(), CommitError> {
        let body = image::body_of(node, self.generation + 1)?;
        let bytes = encode(&body, &self.boot_id)?;
        write_atomic(&self.dir.join(STATE_FILE), &bytes).map_err(StateError::from)?;
        self.generation += 1;
        self.snapshot_len = bytes.len() as u64;
        if let Err(e) = self.new_journal() {
            // The snapshot holds everything; the next commit compacts again.
            tracing::warn!(error = %e, "cannot start a new journal after compaction");
        }
        Ok(())
    }

    /// Roll `node` back to what is durable (after a failed commit).
    pub fn reload(&mut self, node: &mut NodeState) -> Result<Restored, StateError> {
        let rec = recover(&self.dir)?;
        let saved_boot = rec.boot_id.clone().unwrap_or_else(|| self.boot_id.clone());
        self.generation = rec.body.generation;
        let restored = image::install(
            &self.dir.join(STATE_FILE),
            saved_boot,
            rec.body,
            node,
            &self.boot_id,
        )?;
        if let Some((seq, valid_len, _)) = rec.journal {
            self.seq = seq;
            if self.journal.is_some() {
                self.journal = Some(Journal::resume(&self.dir.join(JOURNAL_FILE), valid_len)?);
            }
        } else {
            self.journal = None;
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
    serde_json::to_value(&rec.body).map_err(|e| StateError::Corrupt {
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
    write_atomic(&path, &encode(&body, boot_id)?)?;
    let header = JournalHeader {
        format: JOURNAL_FORMAT.to_owned(),
        version: JOURNAL_VERSION,
        generation: body.generation,
        boot_id: boot_id.to_owned(),
    };
    Journal::create(&dir.join(JOURNAL_FILE), &header)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::fs;

    use topomgr_sdk::{
        testkit, Allocation, ContainerView, CpuSet, PodView, ProviderError, ProviderHints,
        TopologyHint,
    };

    use super::*;
    use crate::image::RestoreIssue;
    use crate::node_state::Records;
    use topomgr_engine::admission::Admitter;
    use topomgr_engine::numa::NumaInfo;
    use topomgr_engine::policy::{Policy, Scope};
    use topomgr_engine::provider::PROVIDER_TIMEOUT;

    /// Gives every container one exclusive CPU, the lowest free one; its
    /// state is the set of (pod, container, cpu) it holds.
    #[derive(Default)]
    struct Cpus(BTreeSet<(String, String, u32)>);

    impl topomgr_sdk::Provider for Cpus {
        fn new(_: &topomgr_sdk::ProviderContext<'_>) -> Result<Self, ProviderError> {
            Ok(Cpus::default())
        }
        fn topology_hints(
            &mut self,
            _: &PodView,
            _: &ContainerView,
        ) -> Result<ProviderHints, ProviderError> {
            Ok(None)
        }
        fn pod_topology_hints(&mut self, _: &PodView) -> Result<ProviderHints, ProviderError> {
            Ok(None)
        }
        fn allocate(
            &mut self,
            pod: &PodView,
            c: &ContainerView,
            _: &TopologyHint,
        ) -> Result<Allocation, ProviderError> {
            let cpu = (0..8)
                .find(|n| !self.0.iter().any(|(_, _, x)| x == n))
                .ok_or_else(|| ProviderError::admission("no CPU left"))?;
            self.0.insert((pod.uid.clone(), c.name.clone(), cpu));
            Ok(Allocation::default().with_cpus(CpuSet::from_iter([cpu]), true))
        }
        fn release(&mut self, uid: &str, c: &str) -> Result<(), ProviderError> {
            self.0.retain(|(p, n, _)| !(p == uid && n == c));
            Ok(())
        }
        fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
            Ok(serde_json::to_vec(&self.0).unwrap())
        }
        fn restore(&mut self, data: &[u8]) -> Result<topomgr_sdk::Reconciled, ProviderError> {
            self.0 = serde_json::from_slice(data)
                .map_err(|e| ProviderError::admission(e.to_string()))?;
            Ok(topomgr_sdk::Reconciled::new())
        }
    }

    fn node(dir: &Path) -> NodeState {
        node_with(dir, LoadedProvider::in_process("cpus", Cpus::default()))
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

    /// [`Cpus`] whose `allocate` for pod `slow` waits for one message.
    struct SlowCpus {
        cpus: Cpus,
        gate: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
    }

    impl topomgr_sdk::Provider for SlowCpus {
        fn new(_: &topomgr_sdk::ProviderContext<'_>) -> Result<Self, ProviderError> {
            Err(ProviderError::admission("built in the test"))
        }
        fn topology_hints(
            &mut self,
            p: &PodView,
            c: &ContainerView,
        ) -> Result<ProviderHints, ProviderError> {
            self.cpus.topology_hints(p, c)
        }
        fn pod_topology_hints(&mut self, p: &PodView) -> Result<ProviderHints, ProviderError> {
            self.cpus.pod_topology_hints(p)
        }
        fn allocate(
            &mut self,
            p: &PodView,
            c: &ContainerView,
            h: &TopologyHint,
        ) -> Result<Allocation, ProviderError> {
            if p.uid == "slow" {
                let _ = self.gate.lock().unwrap().recv();
            }
            self.cpus.allocate(p, c, h)
        }
        fn release(&mut self, uid: &str, c: &str) -> Result<(), ProviderError> {
            self.cpus.release(uid, c)
        }
        fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
            self.cpus.checkpoint()
        }
        fn restore(&mut self, data: &[u8]) -> Result<topomgr_sdk::Reconciled, ProviderError> {
            self.cpus.restore(data)
        }
    }

    /// A release made while the provider is stuck in a call that missed
    /// its deadline cannot be in the provider's saved state yet: the
    /// journal records it, and a restart (the daemon killed before the
    /// stuck call returned) replays it, so the released pod's CPU is free.
    #[test]
    fn a_release_while_a_provider_is_stuck_survives_a_crash() {
        let dir = scratch("stuck-release");
        let (open_gate, gate) = std::sync::mpsc::channel();
        let provider = LoadedProvider::in_process(
            "cpus",
            SlowCpus {
                cpus: Cpus::default(),
                gate: std::sync::Mutex::new(gate),
            },
        )
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
        // A record cut short, then garbage: a write that never completed.
        let mut torn = good.clone();
        torn.extend_from_slice(&good[good.len() - 40..good.len() - 3]);
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
        // journal of the previous generation: it is ignored.
        let path = dir.join(JOURNAL_FILE);
        let journal = fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&journal).replacen(
            &format!("\"generation\":{generation}"),
            &format!("\"generation\":{}", generation - 1),
            1,
        );
        fs::write(&path, text.as_bytes()).unwrap();
        let (_, n2, _) = open(&dir);
        assert_eq!(held(&n2).len(), 4);
        fs::remove_dir_all(dir).unwrap();
    }
}
