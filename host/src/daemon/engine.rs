//! The serialized admission engine.
//!
//! One OS thread owns the [`NodeState`] (and through it the [`Admitter`],
//! every provider and the ledger) and applies commands one at a time, like
//! the kubelet admits one pod at a time. HTTP handlers submit commands and
//! await the answer; they never touch providers.
//!
//! Durability with group commit: the engine takes every command that is
//! waiting (up to [`MAX_BATCH`]), applies them in order, writes ONE state
//! file ([`checkpoint::save_state`]: host + every provider, atomic, checksum,
//! boot id) and only then answers them. An answer therefore always describes
//! state that is on disk: a `kill -9` at any instant loses no acknowledged
//! change. Cgroups follow the order [`NodeState`] documents: an exclusive
//! admission shrinks the shared pool before it is answered; the pool grows
//! only after the state that frees CPUs is on disk.
//!
//! When the state cannot be written (a full disk), the changes of that batch
//! are answered with an error and the engine rolls its memory (providers,
//! pods, records) back to the last state it saved, so memory and disk agree
//! again; the next change is tried as usual, so once space is freed the
//! daemon accepts changes again without a restart.
//!
//! Reads (`pods`, `health`) are served from a snapshot published after each
//! commit, without queueing behind admissions.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, RwLock};
use std::thread;
use std::time::Instant;

use tokio::sync::oneshot;
use topomgr_sdk::{CpuSet, Machine, PodView};
use tracing::{error, info, warn};

use super::metrics::Metrics;
use crate::admission::{AdmissionError, AdmitResult, Admitter};
use crate::checkpoint::{self, Attachments, Restored, STATE_FILE};
use crate::node_state::{AttachError, NodeState, Reclaim};

pub use crate::node_state::Attached;

/// The most commands applied before one state-file write.
pub const MAX_BATCH: usize = 256;

/// A change requested from the engine.
#[derive(Debug, Clone)]
pub enum Command {
    /// Admit pods in order (each sees the allocations of the ones before).
    Admit(Vec<PodView>),
    /// Release an admitted pod.
    Release(String),
    /// Apply a container's cpuset/mems to an existing cgroup and remember it.
    Attach {
        /// Pod uid.
        uid: String,
        /// Container name.
        container: String,
        /// Cgroup path relative to the cgroup root.
        cgroup: String,
    },
}

/// The engine's answer to a [`Command`].
#[derive(Debug, Clone)]
pub enum Reply {
    /// One result per pod, in order.
    Admitted(Vec<AdmitResult>),
    /// The released pod as it was admitted.
    Released(AdmitResult),
    /// The cgroup was written.
    Attached(Attached),
}

/// Why a command failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// No admitted pod has that uid.
    #[error("no admitted pod with uid {0:?}")]
    UnknownPod(String),
    /// The pod has no such container.
    #[error("pod {uid:?} has no container {container:?} (containers: {known})")]
    UnknownContainer {
        /// Pod uid.
        uid: String,
        /// Container name.
        container: String,
        /// The pod's containers, comma-separated.
        known: String,
    },
    /// A uid is admitted with a different spec (nothing of the request was admitted).
    #[error("{0}")]
    Conflict(String),
    /// The pod was released and saved, but providers reported errors.
    #[error("{0}")]
    ReleaseErrors(String),
    /// The cgroup could not be written.
    #[error("{0}")]
    Cgroup(String),
    /// The state could not be saved: the change was undone.
    #[error("topomgr cannot save its state ({0}); the change was not made. Free space or fix the state directory, then retry")]
    Unavailable(String),
    /// Memory could not be brought back to the saved state: changes are refused.
    #[error("topomgr could not return to its saved state after a failed write ({0}); it refuses changes until it is restarted")]
    Broken(String),
    /// The engine thread is gone (shutting down).
    #[error("the admission engine has stopped")]
    Stopped,
}

/// What readers see: the state as of the last commit.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Admitted pods by uid.
    pub pods: BTreeMap<String, AdmitResult>,
    /// Cgroup attachments.
    pub attachments: Attachments,
    /// CPUs held exclusively.
    pub exclusive_cpus: CpuSet,
    /// The shared pool (online minus exclusive).
    pub shared_pool: CpuSet,
    /// Set while the last state write failed (or changes are refused).
    pub failure: Option<String>,
    /// What the restore at start reported (reboot, vanished resources,
    /// held providers, reclaimed pods).
    pub restore_notes: Vec<String>,
}

/// Settings of the engine.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Where the state file lives (already locked by the caller).
    pub state_dir: PathBuf,
    /// Root of the cgroup hierarchy for `attach`.
    pub cgroup_root: PathBuf,
    /// The current boot id.
    pub boot_id: String,
}

type Job = (Command, oneshot::Sender<Result<Reply, EngineError>>);

/// Handle to the engine thread; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    jobs: mpsc::Sender<Job>,
    snapshot: Arc<RwLock<Arc<Snapshot>>>,
}

struct Worker {
    node: NodeState,
    settings: EngineSettings,
    metrics: Arc<Metrics>,
    /// The bytes of the last state written (what disk has).
    last_saved: Vec<u8>,
    failure: Option<String>,
    broken: Option<String>,
    restore_notes: Vec<String>,
    snapshot: Arc<RwLock<Arc<Snapshot>>>,
}

/// Errors starting the engine.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The saved state could not be restored.
    #[error("restoring state: {0}")]
    Restore(#[from] checkpoint::CheckpointError),
    /// The engine thread could not be started.
    #[error("cannot start the engine thread: {0}")]
    Thread(std::io::Error),
}

fn notes_of(restored: &Restored, boot_id: &str) -> Vec<String> {
    let mut notes = Vec::new();
    if restored.rebooted {
        let saved = restored.saved_boot_id.clone().unwrap_or_default();
        warn!(saved_boot_id = %saved, boot_id = %boot_id, pods = restored.pods, "state was saved before a reboot; its pods are kept until released");
        notes.push(format!(
            "state was saved under boot id {saved}, this boot is {boot_id}; its {} pod(s) are kept until released",
            restored.pods
        ));
    }
    for issue in &restored.issues {
        warn!(issue = %issue, "restored state does not match the machine or the config");
        notes.push(issue.to_string());
    }
    notes
}

impl Engine {
    /// Restore the saved state into `admitter`, reclaim pods of dead
    /// `topomgr run` owners, bring the shared pool in line, then start the
    /// engine thread.
    pub fn start(
        mut admitter: Admitter,
        machine: &Machine,
        settings: EngineSettings,
        metrics: Arc<Metrics>,
    ) -> Result<(Engine, Restored), StartError> {
        checkpoint::remove_stale_temps(&settings.state_dir);
        let restored = checkpoint::restore_state(
            &settings.state_dir,
            &mut admitter,
            machine,
            &settings.boot_id,
        )?;
        let mut notes = notes_of(&restored, &settings.boot_id);
        if restored.found {
            info!(
                pods = restored.pods,
                issues = restored.issues.len(),
                "state restored; nothing re-admitted or released"
            );
        }
        let node = NodeState::new(
            admitter,
            restored.records.clone(),
            &settings.cgroup_root,
            &settings.boot_id,
        );
        let saved = checkpoint::encode_state(node.admitter(), node.records(), &settings.boot_id)?;
        let snapshot = Arc::new(RwLock::new(Arc::new(Snapshot::default())));
        let mut worker = Worker {
            node,
            settings,
            metrics,
            last_saved: saved,
            failure: None,
            broken: None,
            restore_notes: Vec::new(),
            snapshot: Arc::clone(&snapshot),
        };
        let reclaimed = worker.node.reclaim();
        for r in &reclaimed {
            notes.push(match r {
                Reclaim::Released { uid, pid } => format!(
                    "pod {uid:?} of topomgr run pid {pid}, which is gone, was released (its cgroup was empty)"
                ),
                Reclaim::Kept { uid, pids } => format!(
                    "pod {uid:?}: its topomgr run is gone but processes {pids:?} remain in its cgroup; it stays held until they exit"
                ),
            });
        }
        let released = reclaimed
            .iter()
            .any(|r| matches!(r, Reclaim::Released { .. }));
        if released || restored.replayed > 0 {
            if let Err(e) = worker.commit() {
                error!(error = %e, "cannot save the state after reclaiming pods and replaying releases; it stays as saved");
                worker.failure = Some(e.clone());
                worker.rollback();
            }
        }
        worker.node.settle_pool();
        worker.restore_notes = notes;
        let (jobs, rx) = mpsc::channel::<Job>();
        worker.publish();
        thread::Builder::new()
            .name("admission-engine".to_owned())
            .spawn(move || worker.run(rx))
            .map_err(StartError::Thread)?;
        Ok((Engine { jobs, snapshot }, restored))
    }

    /// Submit a command and wait for its answer (sent after the state is saved).
    pub async fn submit(&self, cmd: Command) -> Result<Reply, EngineError> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send((cmd, tx))
            .map_err(|_| EngineError::Stopped)?;
        rx.await.unwrap_or(Err(EngineError::Stopped))
    }

    /// The state as of the last commit.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        let guard = self.snapshot.read().unwrap_or_else(|p| p.into_inner());
        Arc::clone(&guard)
    }
}

impl Worker {
    fn run(mut self, rx: mpsc::Receiver<Job>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(j) => batch.push(j),
                    Err(_) => break,
                }
            }
            let mut answers = Vec::with_capacity(batch.len());
            let mut dirty = false;
            for (cmd, reply) in batch {
                if let Some(b) = &self.broken {
                    answers.push((reply, Err(EngineError::Broken(b.clone())), false));
                    continue;
                }
                let (result, changed) = self.apply(cmd);
                dirty |= changed;
                answers.push((reply, result, changed));
            }
            if dirty {
                if let Err(msg) = self.commit() {
                    error!(error = %msg, "cannot save state; the batch's changes are undone");
                    self.failure = Some(msg.clone());
                    for (_, result, changed) in &mut answers {
                        if *changed {
                            *result = Err(EngineError::Unavailable(msg.clone()));
                        }
                    }
                    self.rollback();
                } else if self.broken.is_none() {
                    self.failure = None;
                }
            }
            self.node.settle_pool();
            self.publish();
            for (reply, result, _) in answers {
                let _ = reply.send(result);
            }
        }
        info!("admission engine stopped");
    }

    /// Write the state file; on success it is what the engine rolls back to.
    fn commit(&mut self) -> Result<(), String> {
        let start = Instant::now();
        let bytes = checkpoint::encode_state(
            self.node.admitter(),
            self.node.records(),
            &self.settings.boot_id,
        )
        .map_err(|e| e.to_string())?;
        checkpoint::write_atomic(&self.settings.state_dir.join(STATE_FILE), &bytes)
            .map_err(|e| e.to_string())?;
        self.last_saved = bytes;
        self.metrics.checkpoint(start.elapsed().as_secs_f64());
        Ok(())
    }

    /// Bring memory back to the last state written.
    fn rollback(&mut self) {
        let path = self.settings.state_dir.join(STATE_FILE);
        match checkpoint::restore_bytes(
            &path,
            &self.last_saved,
            self.node.admitter_mut(),
            &self.settings.boot_id,
        ) {
            Ok(r) => {
                self.node.set_records(r.records);
                info!("memory rolled back to the last saved state");
            }
            Err(e) => {
                let msg = e.to_string();
                error!(error = %msg, "cannot roll back to the last saved state; refusing changes");
                self.broken = Some(msg.clone());
                self.failure = Some(msg);
            }
        }
    }

    /// Apply one command: (answer, state changed).
    fn apply(&mut self, cmd: Command) -> (Result<Reply, EngineError>, bool) {
        match cmd {
            Command::Admit(pods) => {
                if let Some(conflict) = self.conflict(&pods) {
                    return (Err(EngineError::Conflict(conflict)), false);
                }
                let mut results = Vec::with_capacity(pods.len());
                let mut changed = false;
                for pod in &pods {
                    let known = self.node.pods().contains_key(&pod.uid);
                    let start = Instant::now();
                    let r = self.node.admit(pod);
                    self.metrics
                        .admission(start.elapsed().as_secs_f64(), r.reason.as_deref());
                    for provider in self.node.admitter_mut().take_violations() {
                        self.metrics.ledger_violation(&provider);
                    }
                    changed |= r.admitted && !known;
                    results.push(r);
                }
                (Ok(Reply::Admitted(results)), changed)
            }
            Command::Release(uid) => match self.node.release(&uid) {
                Ok(r) => {
                    info!(pod = %uid, "pod released");
                    (Ok(Reply::Released(r)), true)
                }
                Err(AdmissionError::UnknownPod(u)) => (Err(EngineError::UnknownPod(u)), false),
                Err(e) => {
                    warn!(pod = %uid, error = %e, "pod released with provider errors");
                    (Err(EngineError::ReleaseErrors(e.to_string())), true)
                }
            },
            Command::Attach {
                uid,
                container,
                cgroup,
            } => match self.node.attach(&uid, &container, &cgroup) {
                Ok(a) => (Ok(Reply::Attached(a)), true),
                Err(AttachError::UnknownPod(u)) => (Err(EngineError::UnknownPod(u)), false),
                Err(AttachError::UnknownContainer {
                    uid,
                    container,
                    known,
                }) => (
                    Err(EngineError::UnknownContainer {
                        uid,
                        container,
                        known,
                    }),
                    false,
                ),
                Err(e) => (Err(EngineError::Cgroup(e.to_string())), false),
            },
        }
    }

    /// A uid of `pods` admitted (or earlier in the same request) with a
    /// different spec.
    fn conflict(&self, pods: &[PodView]) -> Option<String> {
        let mut seen: BTreeMap<&str, &PodView> = BTreeMap::new();
        for pod in pods {
            if let Some(c) = self.node.admitter().uid_conflict(pod) {
                return Some(c);
            }
            if let Some(first) = seen.insert(&pod.uid, pod) {
                if first != pod {
                    return Some(format!(
                        "the request holds pod uid {:?} twice with different specs",
                        pod.uid
                    ));
                }
            }
        }
        None
    }

    fn publish(&mut self) {
        let ledger = self.node.admitter().ledger();
        let exclusive = ledger.exclusive_cpus().clone();
        let shared = self.node.shared_pool();
        self.metrics
            .cpus(exclusive.len(), shared.len(), self.node.pods().len());
        let snap = Snapshot {
            pods: self.node.pods().clone(),
            attachments: self.node.records().attachments.clone(),
            exclusive_cpus: exclusive,
            shared_pool: shared,
            failure: self.failure.clone(),
            restore_notes: self.restore_notes.clone(),
        };
        let mut guard = self.snapshot.write().unwrap_or_else(|p| p.into_inner());
        *guard = Arc::new(snap);
    }
}
