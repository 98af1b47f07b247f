//! The serialized admission engine.
//!
//! One OS thread owns the [`Admitter`] (and through it every provider) and
//! applies commands one at a time, like the kubelet admits one pod at a
//! time. HTTP handlers submit commands and await the answer; they never
//! touch providers.
//!
//! Durability with group commit: the engine takes every command that is
//! waiting (up to [`MAX_BATCH`]), applies them in order, writes ONE state
//! file ([`checkpoint::save_state`]: host + every provider, atomic, checksum,
//! boot id) and only then answers them. An answer therefore always describes
//! state that is on disk: a `kill -9` at any instant loses no acknowledged
//! change. When the state cannot be written the changes of that batch are
//! answered with an error and the engine refuses every later change (the
//! disk and memory may disagree; a restart restores the last saved state).
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
use topomgr_sdk::{CpuSet, Machine, NumaMask, PodView};
use tracing::{error, info, warn};

use super::metrics::Metrics;
use crate::admission::{AdmissionError, AdmitResult, Admitter};
use crate::cgroup::pool::{apply_shared_pool, PoolMember};
use crate::cgroup::{CgroupManager, CgroupPath};
use crate::checkpoint::{self, Attachments, Restored};

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

/// What a container's cgroup was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    /// Pod uid.
    pub uid: String,
    /// Container name.
    pub container: String,
    /// Cgroup path relative to the cgroup root.
    pub cgroup: String,
    /// `cpuset.cpus` written.
    pub cpus: CpuSet,
    /// `cpuset.mems` written.
    pub mems: NumaMask,
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
    /// The pod was released and saved, but providers reported errors.
    #[error("{0}")]
    ReleaseErrors(String),
    /// The cgroup could not be written.
    #[error("cannot attach: {0}")]
    Cgroup(String),
    /// The state could not be saved: the engine refuses changes.
    #[error("topomgr cannot save its state ({0}); it refuses changes until it is restarted after the cause is fixed")]
    Unavailable(String),
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
    /// Set when the engine refuses changes (state could not be saved).
    pub failure: Option<String>,
    /// What the restore at start reported (reboot, vanished resources).
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
    admitter: Admitter,
    settings: EngineSettings,
    online: CpuSet,
    numa: NumaMask,
    attachments: Attachments,
    cgroups: Option<CgroupManager>,
    metrics: Arc<Metrics>,
    failure: Option<String>,
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

impl Engine {
    /// Restore the saved state into `admitter`, then start the engine thread.
    pub fn start(
        mut admitter: Admitter,
        machine: &Machine,
        settings: EngineSettings,
        metrics: Arc<Metrics>,
    ) -> Result<(Engine, Restored), StartError> {
        let restored = checkpoint::restore_state(
            &settings.state_dir,
            &mut admitter,
            machine,
            &settings.boot_id,
        )?;
        let mut notes = Vec::new();
        if restored.rebooted {
            let saved = restored.saved_boot_id.clone().unwrap_or_default();
            warn!(saved_boot_id = %saved, boot_id = %settings.boot_id, pods = restored.pods, "state was saved before a reboot; its pods are kept until released");
            notes.push(format!(
                "state was saved under boot id {saved}, this boot is {}; its {} pod(s) are kept until released",
                settings.boot_id, restored.pods
            ));
        }
        for issue in &restored.issues {
            warn!(issue = %issue, "restored state does not match the machine");
            notes.push(issue.to_string());
        }
        if restored.found {
            info!(
                pods = restored.pods,
                issues = restored.issues.len(),
                "state restored; nothing re-admitted or released"
            );
        }
        let snapshot = Arc::new(RwLock::new(Arc::new(Snapshot::default())));
        let (jobs, rx) = mpsc::channel::<Job>();
        let mut worker = Worker {
            admitter,
            online: machine.online_cpus(),
            numa: machine.numa_mask(),
            attachments: restored.attachments.clone(),
            cgroups: None,
            settings,
            metrics,
            failure: None,
            restore_notes: notes,
            snapshot: Arc::clone(&snapshot),
        };
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
            let mut cpus_changed = false;
            for (cmd, reply) in batch {
                if let Some(f) = &self.failure {
                    answers.push((reply, Err(EngineError::Unavailable(f.clone())), false));
                    continue;
                }
                let (result, changed, exclusive) = self.apply(cmd);
                dirty |= changed;
                cpus_changed |= exclusive;
                answers.push((reply, result, changed));
            }
            if dirty {
                let start = Instant::now();
                match checkpoint::save_state(
                    &self.settings.state_dir,
                    &self.admitter,
                    &self.attachments,
                    &self.settings.boot_id,
                ) {
                    Ok(()) => self.metrics.checkpoint(start.elapsed().as_secs_f64()),
                    Err(e) => {
                        let msg = e.to_string();
                        error!(error = %msg, "cannot save state; refusing further changes");
                        self.failure = Some(msg.clone());
                        for (_, result, changed) in &mut answers {
                            if *changed {
                                *result = Err(EngineError::Unavailable(msg.clone()));
                            }
                        }
                    }
                }
            }
            if cpus_changed && self.failure.is_none() {
                self.reapply_shared_pool();
            }
            self.publish();
            for (reply, result, _) in answers {
                let _ = reply.send(result);
            }
        }
        info!("admission engine stopped");
    }

    /// Apply one command: (answer, state changed, exclusive CPUs changed).
    fn apply(&mut self, cmd: Command) -> (Result<Reply, EngineError>, bool, bool) {
        match cmd {
            Command::Admit(pods) => {
                let mut results = Vec::with_capacity(pods.len());
                let (mut changed, mut exclusive) = (false, false);
                for pod in &pods {
                    let known = self.admitter.pods().contains_key(&pod.uid);
                    let start = Instant::now();
                    let r = self.admitter.admit(pod);
                    self.metrics
                        .admission(start.elapsed().as_secs_f64(), r.reason.as_deref());
                    if r.admitted && !known {
                        changed = true;
                        exclusive |= r.containers.iter().any(|c| c.allocation.exclusive);
                    }
                    results.push(r);
                }
                (Ok(Reply::Admitted(results)), changed, exclusive)
            }
            Command::Release(uid) => {
                let exclusive = self
                    .admitter
                    .pods()
                    .get(&uid)
                    .is_some_and(|r| r.containers.iter().any(|c| c.allocation.exclusive));
                let detached = self.attachments.remove(&uid).is_some();
                match self.admitter.release(&uid) {
                    Ok(r) => {
                        info!(pod = %uid, "pod released");
                        (Ok(Reply::Released(r)), true, exclusive)
                    }
                    Err(AdmissionError::UnknownPod(u)) => {
                        (Err(EngineError::UnknownPod(u)), detached, false)
                    }
                    Err(e) => {
                        warn!(pod = %uid, error = %e, "pod released with provider errors");
                        (
                            Err(EngineError::ReleaseErrors(e.to_string())),
                            true,
                            exclusive,
                        )
                    }
                }
            }
            Command::Attach {
                uid,
                container,
                cgroup,
            } => match self.attach(&uid, &container, &cgroup) {
                Ok(a) => (Ok(Reply::Attached(a)), true, false),
                Err(e) => (Err(e), false, false),
            },
        }
    }

    fn exclusive_cpus(&self) -> CpuSet {
        self.admitter
            .pods()
            .values()
            .flat_map(|r| &r.containers)
            .filter(|c| c.allocation.exclusive)
            .fold(CpuSet::new(), |all, c| all.union(&c.allocation.cpus))
    }

    fn cgroups(&mut self) -> Result<&CgroupManager, EngineError> {
        if self.cgroups.is_none() {
            let m = CgroupManager::detect(&self.settings.cgroup_root)
                .map_err(|e| EngineError::Cgroup(e.to_string()))?;
            self.cgroups = Some(m);
        }
        self.cgroups
            .as_ref()
            .ok_or_else(|| EngineError::Cgroup("no cgroup hierarchy".to_owned()))
    }

    fn attach(
        &mut self,
        uid: &str,
        container: &str,
        cgroup: &str,
    ) -> Result<Attached, EngineError> {
        let pod = self
            .admitter
            .pods()
            .get(uid)
            .ok_or_else(|| EngineError::UnknownPod(uid.to_owned()))?;
        let c = pod
            .containers
            .iter()
            .find(|c| c.name == container)
            .ok_or_else(|| EngineError::UnknownContainer {
                uid: uid.to_owned(),
                container: container.to_owned(),
                known: pod
                    .containers
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let cpus = if c.allocation.exclusive && !c.allocation.cpus.is_empty() {
            c.allocation.cpus.clone()
        } else {
            self.online.difference(&self.exclusive_cpus())
        };
        let mems = if c.allocation.mems.is_empty() {
            self.numa
        } else {
            c.allocation.mems
        };
        let path = CgroupPath::new(cgroup).map_err(|e| EngineError::Cgroup(e.to_string()))?;
        let mgr = self.cgroups()?;
        let cg = mgr
            .open(&path)
            .map_err(|e| EngineError::Cgroup(e.to_string()))?;
        mgr.set_cpuset(&cg, &cpus, &mems)
            .map_err(|e| EngineError::Cgroup(e.to_string()))?;
        info!(pod = %uid, container, cgroup, cpus = %cpus, mems = %mems, "container attached");
        self.attachments
            .entry(uid.to_owned())
            .or_default()
            .insert(container.to_owned(), cgroup.to_owned());
        Ok(Attached {
            uid: uid.to_owned(),
            container: container.to_owned(),
            cgroup: cgroup.to_owned(),
            cpus,
            mems,
        })
    }

    /// Rewrite the shared-pool containers' cpusets after exclusive CPUs changed.
    fn reapply_shared_pool(&mut self) {
        if self.attachments.is_empty() {
            return;
        }
        let mut members = Vec::new();
        for (uid, containers) in &self.attachments {
            let Some(pod) = self.admitter.pods().get(uid) else {
                continue;
            };
            for (name, path) in containers {
                let Some(c) = pod.containers.iter().find(|c| &c.name == name) else {
                    continue;
                };
                match CgroupPath::new(path) {
                    Ok(p) => members.push(PoolMember {
                        path: p,
                        exclusive: c.allocation.exclusive,
                        cpus: c.allocation.cpus.clone(),
                    }),
                    Err(e) => {
                        warn!(pod = %uid, container = %name, error = %e, "bad attached cgroup path")
                    }
                }
            }
        }
        let online = self.online.clone();
        match self.cgroups() {
            Ok(mgr) => {
                if let Err(e) = apply_shared_pool(mgr, &online, &members) {
                    warn!(error = %e, "cannot update the shared-pool containers' cpusets");
                }
            }
            Err(e) => warn!(error = %e, "cannot update the shared-pool containers' cpusets"),
        }
    }

    fn publish(&mut self) {
        let exclusive = self.exclusive_cpus();
        let shared = self.online.difference(&exclusive);
        self.metrics
            .cpus(exclusive.len(), shared.len(), self.admitter.pods().len());
        let snap = Snapshot {
            pods: self.admitter.pods().clone(),
            attachments: self.attachments.clone(),
            exclusive_cpus: exclusive,
            shared_pool: shared,
            failure: self.failure.clone(),
            restore_notes: self.restore_notes.clone(),
        };
        let mut guard = self.snapshot.write().unwrap_or_else(|p| p.into_inner());
        *guard = Arc::new(snap);
    }
}
