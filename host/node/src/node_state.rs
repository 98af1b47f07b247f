//! [`NodeState`]: the admitted pods of this node with their cgroups and
//! owners — the one service through which the daemon and the one-shot
//! commands (`run`, `admit --state-dir`, `release --state-dir`) change
//! state and apply it to cgroups.
//!
//! It owns the [`Admitter`] (providers, pod table, [`topomgr_engine::ledger`]) and
//! the host's [`Records`]: which cgroup each attached container has, and
//! which process owns each pod that `topomgr run` admitted.
//!
//! # Applying to cgroups
//!
//! One rule gives a container its cpuset ([`pool::container_cpuset`]):
//! exclusive CPUs when it has them, the shared pool otherwise. The shared
//! pool is the online CPUs minus every CPU the ledger holds exclusively
//! (attached or not). Its order with durability is what keeps CPUs
//! exclusive:
//! - an admission that takes exclusive CPUs shrinks every attached
//!   shared-pool cgroup *before* it is answered (`PoolMode::Shrink`); if a
//!   shared cgroup cannot be shrunk, the admission is rolled back;
//! - a release grows the pool only after it is durable: the caller saves
//!   first, then calls [`NodeState::settle_pool`] (`PoolMode::Exact`).
//!   Until then the pool only ever shrinks, so a crash never leaves a CPU
//!   in a shared cgroup while the saved state still holds it exclusively.
//!
//! # Reading
//!
//! A shared-pool container's stored allocation holds the pool as it was at
//! admission; [`current_pool`] shows it with the pool as it is now (what
//! its cgroup gets), as the daemon's answers do.
//!
//! # Owners
//!
//! An admission made for something that can end without telling topomgr
//! records its [`Owner`] ([`crate::pod_owner`]): a process (`topomgr run`,
//! or a client admitting for itself) or a container (`topomgr oci-hook`,
//! a runtime's NRI plugin). [`NodeState::reclaim`] releases the pod of an
//! owner that is gone:
//! - a **process** owner is gone when its process is (pid gone, reused: the
//!   start time differs, another boot, or a zombie) and every cgroup of the
//!   pod is empty or gone;
//! - a **container** owner is gone when its init process is known to have
//!   ended (or the machine rebooted) and its cgroup and every attached
//!   cgroup are empty or gone;
//! - a container admitted by `topomgr oci-hook` that was never attached
//!   `ATTACH_TIMEOUT` (120 s) after its admission is released too (the hook was
//!   killed between its admission and its attach).
//!
//! The daemon reclaims at start and periodically; `run` and `admit
//! --state-dir` before they change anything. A pod whose cgroup still has
//! processes stays held, whoever started them.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use topomgr_sdk::{CpuSet, NumaMask, PodView};
use tracing::{debug, info, warn};

use crate::api::{Attached, Attachments};
use crate::followed::Followed;
use crate::pod_owner::{ContainerRuntime, Owner};
use crate::provider_states::ProviderStates;
use crate::reconciled::Conflicts;
use topomgr_cgroup::pool::{self, PoolWrite};
use topomgr_cgroup::{CgroupError, CgroupManager, CgroupPath, TOPOMGR_PARENT};
use topomgr_engine::admission::{
    AdmissionError, AdmitResult, Admitter, AssignedDevices, UNEXPECTED_ADMISSION_ERROR,
};

/// `r` with every shared-pool container's CPUs replaced by `pool` (the
/// pool now, where its allocation has the pool as it was at admission); a
/// container with exclusive CPUs, or without CPUs from any provider, is
/// shown as allocated. Borrowed when nothing differs.
pub fn current_pool<'a>(r: &'a AdmitResult, pool: &CpuSet) -> Cow<'a, AdmitResult> {
    let stale = |c: &topomgr_engine::admission::ContainerResult| {
        !c.allocation.exclusive && !c.allocation.cpus.is_empty() && c.allocation.cpus != *pool
    };
    if !r.containers.iter().any(stale) {
        return Cow::Borrowed(r);
    }
    let mut now = r.clone();
    for c in now.containers.iter_mut().filter(|c| stale(c)) {
        c.allocation.cpus = pool.clone();
    }
    Cow::Owned(now)
}

/// `GET /v1/pods` (and `topomgr pods --state-dir`): every admitted pod
/// with the shared pool as it is now ([`current_pool`]), the attachments
/// and the owners as clients tell them. The one place a pod list is built.
pub fn pod_list<'a>(
    pods: impl IntoIterator<Item = &'a AdmitResult>,
    pool: &CpuSet,
    attachments: &Attachments,
    owners: &BTreeMap<String, Owner>,
) -> crate::api::PodList {
    crate::api::PodList {
        pods: pods
            .into_iter()
            .map(|r| crate::api::Admission::from(current_pool(r, pool).as_ref()))
            .collect(),
        attachments: attachments.clone(),
        owners: owners
            .iter()
            .map(|(uid, o)| (uid.clone(), crate::api::OwnerSpec::from(o)))
            .collect(),
    }
}

/// What the host records besides the pod table and the providers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    /// The containers' cgroups.
    pub attachments: Attachments,
    /// The owners of pods admitted by `topomgr run`.
    pub owners: BTreeMap<String, Owner>,
}

/// One change to the host's part of the state, in the order it was made:
/// what the journal records ([`crate::store`]) and the daemon's readers
/// catch up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A pod was admitted, or its record rewritten (a device it holds was
    /// found again under another id): the record as it is now.
    Admitted(Box<AdmitResult>),
    /// A pod was released (or, not admitted, forgotten): it, its
    /// attachments and its owner are gone.
    Released {
        /// Pod uid.
        uid: String,
    },
    /// A container was attached to a cgroup.
    Attached {
        /// Pod uid.
        uid: String,
        /// Container name.
        container: String,
        /// Cgroup path relative to the cgroup root.
        cgroup: String,
    },
    /// An attached cgroup is gone and was forgotten.
    Detached {
        /// Pod uid.
        uid: String,
        /// Container name.
        container: String,
    },
    /// A process owns the pod (`topomgr run`).
    Owner {
        /// Pod uid.
        uid: String,
        /// The owner.
        owner: Owner,
    },
}

impl Change {
    /// Apply to a table of pods (values made from the admission by `wrap`),
    /// attachments and, when kept, owners.
    pub fn apply<P>(
        self,
        pods: &mut BTreeMap<String, P>,
        attachments: &mut Attachments,
        owners: Option<&mut BTreeMap<String, Owner>>,
        wrap: impl FnOnce(Box<AdmitResult>) -> P,
    ) {
        match self {
            Change::Admitted(r) => {
                pods.insert(r.pod.uid.clone(), wrap(r));
            }
            Change::Released { uid } => {
                pods.remove(&uid);
                attachments.remove(&uid);
                if let Some(o) = owners {
                    o.remove(&uid);
                }
            }
            Change::Attached {
                uid,
                container,
                cgroup,
            } => {
                attachments
                    .entry(uid)
                    .or_default()
                    .insert(container, cgroup);
            }
            Change::Detached { uid, container } => {
                if let Some(c) = attachments.get_mut(&uid) {
                    c.remove(&container);
                    if c.is_empty() {
                        attachments.remove(&uid);
                    }
                }
            }
            Change::Owner { uid, owner } => {
                if let Some(o) = owners {
                    o.insert(uid, owner);
                }
            }
        }
    }
}

/// An attached cgroup whose cpuset is not what topomgr wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// Pod uid.
    pub uid: String,
    /// Container name.
    pub container: String,
    /// The cgroup (relative to the cgroup root).
    pub cgroup: String,
    /// `cpuset.cpus` as found.
    pub found_cpus: CpuSet,
    /// `cpuset.mems` as found.
    pub found_mems: NumaMask,
    /// `cpuset.cpus` as topomgr gives it.
    pub cpus: CpuSet,
    /// `cpuset.mems` as topomgr gives it.
    pub mems: NumaMask,
}

/// What [`NodeState::check_cgroups`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupFinding {
    /// Someone else changed the cpuset; it was written back.
    Restored(Drift),
    /// The cpuset was changed again after it was written back (or cannot
    /// be written): it is left as found and reported.
    Fought(Drift),
    /// The cgroup is gone.
    Gone {
        /// Pod uid.
        uid: String,
        /// Container name.
        container: String,
        /// The cgroup (relative to the cgroup root).
        cgroup: String,
    },
}

impl std::fmt::Display for CgroupFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CgroupFinding::Restored(d) => write!(
                f,
                "cgroup {} of pod {:?} container {:?} had cpus {:?} mems {:?}, changed by someone else; topomgr wrote back cpus {} mems {}",
                d.cgroup, d.uid, d.container, d.found_cpus.to_string(), d.found_mems.to_string(), d.cpus, d.mems
            ),
            CgroupFinding::Fought(d) => write!(
                f,
                "cgroup {} of pod {:?} container {:?} has cpus {:?} mems {:?} instead of cpus {} mems {}, changed again after topomgr wrote it back; topomgr leaves it (another program manages this cgroup's cpuset: stop it, or release the pod with topomgr release {})",
                d.cgroup, d.uid, d.container, d.found_cpus.to_string(), d.found_mems.to_string(), d.cpus, d.mems, d.uid
            ),
            CgroupFinding::Gone { uid, container, cgroup } => write!(
                f,
                "cgroup {cgroup} of pod {uid:?} container {container:?} is gone; the pod still holds its resources until it is released (topomgr release {uid})"
            ),
        }
    }
}

/// How [`NodeState::sync_pool`] may change the shared-pool cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolMode {
    /// Only take CPUs away (before an exclusive container runs; changes
    /// that are not durable yet never give CPUs back).
    Shrink,
    /// Write the pool as the ledger has it (after the state is durable).
    Exact,
}

/// A container name the pod does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {uid:?} has no container {container:?} (containers: {known})")]
pub struct UnknownContainer {
    /// Pod uid.
    pub uid: String,
    /// Container name.
    pub container: String,
    /// The pod's containers, comma-separated.
    pub known: String,
}

/// An owned admission of a pod that is already admitted for another
/// owner (or for none).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {uid:?} is already admitted {}; it was asked for {asked}. Release it first, or admit under another uid", match .recorded { Some(o) => format!("for {o}"), None => "without an owner".to_owned() })]
pub struct OwnerConflict {
    /// Pod uid.
    pub uid: String,
    /// The owner recorded (`None`: admitted without one).
    pub recorded: Option<String>,
    /// The owner asked for.
    pub asked: String,
}

/// Why a container could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// No admitted pod has that uid.
    #[error("no admitted pod with uid {0:?}")]
    UnknownPod(String),
    /// The pod has no such container.
    #[error(transparent)]
    UnknownContainer(#[from] UnknownContainer),
    /// The cgroup could not be written.
    #[error("cannot attach: {0}")]
    Cgroup(CgroupError),
}

// By hand, not `#[from]`: the message carries the cgroup error, so it is not
// also chained as the source (the binary prints each cause once).
impl From<CgroupError> for AttachError {
    fn from(e: CgroupError) -> Self {
        AttachError::Cgroup(e)
    }
}

/// Why the shared pool could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PoolError {
    /// No cgroup hierarchy under the configured root.
    #[error(transparent)]
    Hierarchy(CgroupError),
    /// Exclusive CPUs cover every online CPU while shared containers exist.
    #[error(transparent)]
    Empty(CgroupError),
    /// Some shared-pool cgroups could not be written.
    #[error("cannot write the shared CPU pool {pool} to {}", describe_failures(.failed))]
    Write {
        /// The pool.
        pool: CpuSet,
        /// The cgroups and their errors.
        failed: Vec<(CgroupPath, CgroupError)>,
    },
}

fn describe_failures(failed: &[(CgroupPath, CgroupError)]) -> String {
    failed
        .iter()
        .map(|(p, e)| format!("{} ({e})", p.as_path().display()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How long a container admitted by `topomgr oci-hook` may stay
/// unattached before [`NodeState::reclaim`] releases it: the hook attaches
/// right after its admission, under a deadline far shorter than this.
pub(crate) const ATTACH_TIMEOUT: Duration = Duration::from_secs(120);

/// Why [`NodeState::reclaim`] released a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReclaimCause {
    /// Its owner is gone and its cgroups are empty or gone.
    OwnerGone,
    /// A hook's admission was never attached within `ATTACH_TIMEOUT` (120 s).
    NeverAttached,
}

impl ReclaimCause {
    /// The metric label (`owner_gone`, `never_attached`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReclaimCause::OwnerGone => "owner_gone",
            ReclaimCause::NeverAttached => "never_attached",
        }
    }
}

/// What [`NodeState::reclaim`] did with one pod whose owner is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reclaim {
    /// Released.
    Released {
        /// Pod uid.
        uid: String,
        /// Its owner.
        owner: Owner,
        /// Why.
        cause: ReclaimCause,
    },
    /// Kept: the owner is gone but processes are still in its cgroups.
    Kept {
        /// Pod uid.
        uid: String,
        /// Its owner.
        owner: Owner,
        /// The processes left.
        pids: Vec<u32>,
    },
}

impl std::fmt::Display for Reclaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reclaim::Released {
                uid,
                owner,
                cause: ReclaimCause::OwnerGone,
            } => write!(
                f,
                "pod {uid:?} of {owner}, which is gone, was released (its cgroups were empty or gone)"
            ),
            Reclaim::Released {
                uid,
                owner,
                cause: ReclaimCause::NeverAttached,
            } => write!(
                f,
                "pod {uid:?} of {owner} was released: it was never attached to a cgroup within {} s of its admission",
                ATTACH_TIMEOUT.as_secs()
            ),
            Reclaim::Kept { uid, owner, pids } => write!(
                f,
                "pod {uid:?}: its owner {owner} is gone but processes {pids:?} remain in its cgroups; it stays held until they exit"
            ),
        }
    }
}

/// The admitted pods of this node, their cgroups and owners.
pub struct NodeState {
    admitter: Admitter,
    /// What the state keeps of the providers besides them.
    provider_states: ProviderStates,
    /// What the providers' restores reported that still stands.
    conflicts: Conflicts,
    /// Attached containers whose cpuset someone else changed and that
    /// were restored once (see [`NodeState::check_cgroups`]).
    drift_restored: std::collections::BTreeSet<(String, String)>,
    records: Records,
    changes: Vec<Change>,
    cgroup_root: PathBuf,
    cgroups: Option<CgroupManager>,
    applied_pool: Option<CpuSet>,
    boot_id: String,
    /// Lift the CFS quota of containers attached with exclusive CPUs
    /// ([`NodeState::with_cpu_quota_lift`]).
    lift_cpu_quota: bool,
    /// The containers a runtime face follows (not saved: made anew from
    /// the runtime's list at each registration).
    followed: Followed,
}

impl NodeState {
    /// A node state over `admitter` (pods already restored, or none),
    /// applying to cgroups under `cgroup_root` (detected when first needed).
    pub fn new(admitter: Admitter, records: Records, cgroup_root: &Path, boot_id: &str) -> Self {
        NodeState {
            provider_states: ProviderStates::new(&admitter),
            conflicts: Conflicts::default(),
            drift_restored: Default::default(),
            admitter,
            records,
            changes: Vec::new(),
            cgroup_root: cgroup_root.to_path_buf(),
            cgroups: None,
            applied_pool: None,
            boot_id: boot_id.to_owned(),
            lift_cpu_quota: true,
            followed: Followed::default(),
        }
    }

    /// Whether [`NodeState::attach`] lifts the CFS quota of a container
    /// that holds exclusive CPUs and of its kubelet pod cgroup (config
    /// `disable_cpu_quota_with_exclusive_cpus`, default true, as the
    /// kubelet's feature gate `DisableCPUQuotaWithExclusiveCPUs`).
    pub fn with_cpu_quota_lift(mut self, lift: bool) -> Self {
        self.lift_cpu_quota = lift;
        self
    }

    /// Apply through `cgroups` instead of detecting a hierarchy under the
    /// cgroup root when first needed (a test double behind
    /// [`topomgr_cgroup::ControlFs`]).
    pub fn with_cgroups(mut self, cgroups: CgroupManager) -> Self {
        self.cgroups = Some(cgroups);
        self
    }

    /// The admitter (pods, providers, ledger).
    pub fn admitter(&self) -> &Admitter {
        &self.admitter
    }

    /// Mutable access to the admitter (restore, `explain`).
    pub fn admitter_mut(&mut self) -> &mut Admitter {
        &mut self.admitter
    }

    /// What the state keeps of the providers besides them (held and absent
    /// ones, which changed since the last save).
    pub(crate) fn provider_states(&self) -> &ProviderStates {
        &self.provider_states
    }

    /// The admitter and the providers' book together (a restore changes
    /// both).
    pub(crate) fn provider_states_mut(&mut self) -> (&mut Admitter, &mut ProviderStates) {
        (&mut self.admitter, &mut self.provider_states)
    }

    /// The conflicts the providers reported when they took their state
    /// back (see [`crate::reconciled`]); a pod's end at its release.
    pub fn conflicts(&self) -> &Conflicts {
        &self.conflicts
    }

    /// The admitter, the providers' book and the conflicts together (a
    /// restore changes all three).
    pub(crate) fn restore_parts_mut(
        &mut self,
    ) -> (&mut Admitter, &mut ProviderStates, &mut Conflicts) {
        (
            &mut self.admitter,
            &mut self.provider_states,
            &mut self.conflicts,
        )
    }

    /// Put `admitter` in place of the current one, which is returned (a
    /// reload; the caller installs the state into the new one).
    pub(crate) fn swap_admitter(&mut self, admitter: Admitter) -> Admitter {
        std::mem::replace(&mut self.admitter, admitter)
    }

    /// Pod `uid`'s record changed outside an admission (a device it holds
    /// was found again under another id): journal it as it is now.
    pub(crate) fn rewritten(&mut self, uid: &str) {
        if let Some(r) = self.admitter.pods().get(uid) {
            self.changes.push(Change::Admitted(Box::new(r.clone())));
        }
    }

    /// Every provider's state is saved now (a whole snapshot was written).
    pub fn saved(&mut self) {
        self.provider_states.saved_all(&self.admitter);
    }

    /// The containers a runtime face follows.
    pub fn followed(&self) -> &Followed {
        &self.followed
    }

    /// The pods and the containers followed together (answers are
    /// computed from both).
    pub fn followed_mut(&mut self) -> (&BTreeMap<String, AdmitResult>, &mut Followed) {
        (self.admitter.pods(), &mut self.followed)
    }

    /// The host's records (attachments, owners).
    pub fn records(&self) -> &Records {
        &self.records
    }

    /// Replace the records (after a restore); changes not taken yet are
    /// dropped (they are undone).
    pub(crate) fn set_records(&mut self, records: Records) {
        self.records = records;
        self.changes.clear();
    }

    /// The changes made since the last call, in order.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    /// The boot id this state runs under.
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }

    /// Admitted pods by uid.
    pub fn pods(&self) -> &BTreeMap<String, AdmitResult> {
        self.admitter.pods()
    }

    /// The shared pool as the ledger has it: online CPUs minus every CPU
    /// held exclusively.
    pub fn shared_pool(&self) -> CpuSet {
        let l = self.admitter.ledger();
        l.online_cpus().difference(l.exclusive_cpus())
    }

    /// The pool a shared container may be given now: never more than what
    /// the shared cgroups already have while a release is not durable.
    fn pool_now(&self) -> CpuSet {
        let target = self.shared_pool();
        match &self.applied_pool {
            Some(applied) => applied.intersection(&target),
            None => target,
        }
    }

    fn cgroups(&mut self) -> Result<&CgroupManager, CgroupError> {
        if self.cgroups.is_none() {
            self.cgroups = Some(CgroupManager::detect(&self.cgroup_root)?);
        }
        self.cgroups.as_ref().ok_or_else(|| CgroupError::NoCpuset {
            root: self.cgroup_root.clone(),
        })
    }

    /// Admit `pod`. When it takes exclusive CPUs, the shared pool is
    /// shrunk before this returns; if that fails the pod is released again
    /// and rejected with the cgroup named.
    pub fn admit(&mut self, pod: &PodView) -> AdmitResult {
        self.admit_traced(pod, &mut Vec::new())
    }

    /// [`NodeState::admit`], recording every decision into `trace`
    /// (see [`Admitter::admit_traced`]).
    pub fn admit_traced(
        &mut self,
        pod: &PodView,
        trace: &mut Vec<topomgr_engine::admission::TraceStep>,
    ) -> AdmitResult {
        self.admit_assigned(pod, &AssignedDevices::new(), trace)
    }

    /// [`NodeState::admit_traced`] aligned with devices the pod's containers
    /// already hold ([`Admitter::admit_assigned`]).
    fn admit_assigned(
        &mut self,
        pod: &PodView,
        assigned: &AssignedDevices,
        trace: &mut Vec<topomgr_engine::admission::TraceStep>,
    ) -> AdmitResult {
        let known = self.admitter.pods().contains_key(&pod.uid);
        let result = self.admitter.admit_assigned(pod, assigned, trace);
        let exclusive = result
            .containers
            .iter()
            .any(|c| !pool::is_shared(&c.allocation));
        if result.admitted && !known && !exclusive {
            self.changes
                .push(Change::Admitted(Box::new(result.clone())));
        }
        if !result.admitted || known || !exclusive {
            return result;
        }
        match self.sync_pool(PoolMode::Shrink) {
            Ok(_) => {
                self.changes
                    .push(Change::Admitted(Box::new(result.clone())));
                result
            }
            Err(e) => {
                warn!(pod = %pod.uid, error = %e, "cannot shrink the shared pool; admission rolled back");
                if let Err(err) = self.admitter.release(&pod.uid) {
                    warn!(pod = %pod.uid, error = %err, "rollback reported errors");
                }
                let cpus = result
                    .containers
                    .iter()
                    .filter(|c| !pool::is_shared(&c.allocation))
                    .fold(CpuSet::new(), |all, c| all.union(&c.allocation.cpus));
                AdmitResult {
                    pod: pod.clone(),
                    admitted: false,
                    reason: Some(UNEXPECTED_ADMISSION_ERROR.to_owned()),
                    message: Some(format!(
                        "CPUs {cpus} could not be taken out of the shared pool before the pod runs: {e}"
                    )),
                    containers: Vec::new(),
                }
            }
        }
    }

    /// Whether the state records any cgroup (an attached container, a
    /// container owner's cgroup): whether its changes may write cpusets or
    /// remove cgroups.
    pub fn has_cgroups(&self) -> bool {
        !self.records.attachments.is_empty()
            || self
                .records
                .owners
                .values()
                .any(|o| matches!(o, Owner::Container(c) if c.cgroup.is_some()))
    }

    /// Release pod `uid`: providers, ledger, its attachments and owner. The
    /// shared pool grows only at [`NodeState::settle_pool`], after the
    /// caller made the release durable.
    pub fn release(&mut self, uid: &str) -> Result<AdmitResult, AdmissionError> {
        // Released last container first, as the providers see it.
        let containers: Vec<String> = match self.admitter.pods().get(uid) {
            Some(r) => r.containers.iter().rev().map(|c| c.name.clone()).collect(),
            None => Vec::new(),
        };
        let result = self.admitter.release(uid);
        if !matches!(result, Err(AdmissionError::UnknownPod(_))) {
            self.provider_states.missed_release(uid, &containers);
            self.conflicts.released(uid);
            self.drift_restored.retain(|(u, _)| u != uid);
            self.forget(uid);
        }
        result
    }

    /// The cgroups of pod `uid`: those attached, and a container owner's
    /// own cgroup.
    fn cgroup_paths(&self, uid: &str) -> Vec<String> {
        let mut paths: Vec<String> = self
            .records
            .attachments
            .get(uid)
            .map(|c| c.values().cloned().collect())
            .unwrap_or_default();
        if let Some(Owner::Container(c)) = self.records.owners.get(uid) {
            if let Some(cg) = &c.cgroup {
                if !paths.contains(cg) {
                    paths.push(cg.clone());
                }
            }
        }
        paths
    }

    /// Drop pod `uid`'s attachments and owner.
    fn forget(&mut self, uid: &str) {
        self.records.attachments.remove(uid);
        self.records.owners.remove(uid);
        self.changes.push(Change::Released {
            uid: uid.to_owned(),
        });
    }

    /// Record who owns pod `uid` (replacing what was recorded).
    pub fn set_owner(&mut self, uid: &str, owner: Owner) {
        self.records.owners.insert(uid.to_owned(), owner.clone());
        self.changes.push(Change::Owner {
            uid: uid.to_owned(),
            owner,
        });
    }

    /// Admit `pod` for `owner` and record the owner with it, aligned with
    /// devices the pod's containers already hold (`assigned`, empty for
    /// none: [`Admitter::admit_assigned`]). A pod already admitted answers
    /// its admission when `owner` is the one recorded for it (a retry) and
    /// changes nothing; another owner's (or none) is an [`OwnerConflict`]
    /// and changes nothing either.
    pub fn admit_owned(
        &mut self,
        pod: &PodView,
        owner: Owner,
        assigned: &AssignedDevices,
        trace: &mut Vec<topomgr_engine::admission::TraceStep>,
    ) -> Result<AdmitResult, OwnerConflict> {
        if self.admitter.pods().contains_key(&pod.uid) {
            match self.records.owners.get(&pod.uid) {
                Some(o) if o.same_as(&owner) => {}
                recorded => {
                    return Err(OwnerConflict {
                        uid: pod.uid.clone(),
                        recorded: recorded.map(ToString::to_string),
                        asked: owner.to_string(),
                    })
                }
            }
        }
        let known = self.admitter.pods().contains_key(&pod.uid);
        let result = self.admit_assigned(pod, assigned, trace);
        if result.admitted && !known {
            self.set_owner(&pod.uid, owner);
        }
        Ok(result)
    }

    /// Apply the cpuset of `container` of pod `uid` to the existing cgroup
    /// `cgroup` (relative to the cgroup root) and remember it.
    pub fn attach(
        &mut self,
        uid: &str,
        container: &str,
        cgroup: &str,
    ) -> Result<Attached, AttachError> {
        let pod = self
            .admitter
            .pods()
            .get(uid)
            .ok_or_else(|| AttachError::UnknownPod(uid.to_owned()))?;
        let c = pod
            .containers
            .iter()
            .find(|c| c.name == container)
            .ok_or_else(|| UnknownContainer {
                uid: uid.to_owned(),
                container: container.to_owned(),
                known: pod
                    .containers
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let allocation = c.allocation.clone();
        let path = CgroupPath::new(cgroup)?;
        let nodes = self.admitter.ledger().numa_nodes();
        let set = pool::container_cpuset(&allocation, &self.pool_now(), nodes)?;
        let lift = self.lift_cpu_quota && allocation.exclusive && !allocation.cpus.is_empty();
        let mgr = self.cgroups()?;
        let cg = mgr.open(&path)?;
        mgr.set_cpuset(&cg, &set.cpus, &set.mems)?;
        if lift {
            // As the kubelet with exclusive CPUs (kubernetes/kubernetes
            // #127525): the container's quota, and its pod cgroup's when
            // the kubelet made one.
            for p in std::iter::once(path.clone()).chain(topomgr_cgroup::kubelet_pod_cgroup(&path))
            {
                let lifted = mgr.lift_cpu_quota(&p)?;
                debug!(pod = %uid, container, cgroup = %p, ?lifted, "CFS quota of exclusive CPUs");
            }
        }
        info!(pod = %uid, container, cgroup, cpus = %set.cpus, mems = %set.mems, quota_lifted = lift, "container attached");
        self.records
            .attachments
            .entry(uid.to_owned())
            .or_default()
            .insert(container.to_owned(), cgroup.to_owned());
        self.changes.push(Change::Attached {
            uid: uid.to_owned(),
            container: container.to_owned(),
            cgroup: cgroup.to_owned(),
        });
        Ok(Attached {
            uid: uid.to_owned(),
            container: container.to_owned(),
            cgroup: cgroup.to_owned(),
            cpus: set.cpus,
            mems: set.mems,
        })
    }

    /// Verify every attached container's cgroup: its `cpuset.cpus` and
    /// `cpuset.mems` as written are what topomgr gives it now. A cpuset
    /// someone else changed is written back once ([`CgroupFinding::Restored`]);
    /// if it is changed again it is reported, not rewritten
    /// ([`CgroupFinding::Fought`]), so topomgr never fights another writer in a
    /// loop. A cgroup that is gone is reported ([`CgroupFinding::Gone`]).
    pub fn check_cgroups(&mut self) -> Vec<CgroupFinding> {
        let mut found = Vec::new();
        if self.records.attachments.is_empty() {
            return found;
        }
        let pool = self.pool_now();
        let nodes = self.admitter.ledger().numa_nodes();
        let mut expected = Vec::new();
        for (uid, containers) in &self.records.attachments {
            let Some(pod) = self.admitter.pods().get(uid) else {
                continue;
            };
            for (name, cgroup) in containers {
                let Some(c) = pod.containers.iter().find(|c| &c.name == name) else {
                    continue;
                };
                if let Ok(set) = pool::container_cpuset(&c.allocation, &pool, nodes) {
                    expected.push((uid.clone(), name.clone(), cgroup.clone(), set));
                }
            }
        }
        let already = self.drift_restored.clone();
        let mgr = match self.cgroups() {
            Ok(m) => m,
            Err(e) => {
                warn!(error = %e, "cannot verify the attached cgroups");
                return found;
            }
        };
        let mut restored = Vec::new();
        for (uid, container, cgroup, want) in expected {
            let path = match CgroupPath::new(&cgroup) {
                Ok(p) => p,
                Err(_) => continue,
            };
            let cg = match mgr.open(&path) {
                Ok(cg) => cg,
                Err(CgroupError::Missing { .. }) => {
                    found.push(CgroupFinding::Gone {
                        uid,
                        container,
                        cgroup,
                    });
                    continue;
                }
                Err(e) => {
                    warn!(pod = %uid, container, cgroup, error = %e, "cannot open an attached cgroup to verify it");
                    continue;
                }
            };
            let now = match mgr.configured(&cg) {
                Ok(now) => now,
                Err(e) => {
                    warn!(pod = %uid, container, cgroup, error = %e, "cannot read an attached cgroup's cpuset to verify it");
                    continue;
                }
            };
            if now.cpus == want.cpus && now.mems == want.mems {
                continue;
            }
            let key = (uid.clone(), container.clone());
            let drift = Drift {
                uid,
                container,
                cgroup,
                found_cpus: now.cpus,
                found_mems: now.mems,
                cpus: want.cpus.clone(),
                mems: want.mems,
            };
            if already.contains(&key) {
                warn!(pod = %drift.uid, container = %drift.container, cgroup = %drift.cgroup, "{}", CgroupFinding::Fought(drift.clone()));
                found.push(CgroupFinding::Fought(drift));
                continue;
            }
            match mgr.set_cpuset(&cg, &want.cpus, &want.mems) {
                Ok(()) => {
                    warn!(pod = %drift.uid, container = %drift.container, cgroup = %drift.cgroup, "{}", CgroupFinding::Restored(drift.clone()));
                    restored.push(key);
                    found.push(CgroupFinding::Restored(drift));
                }
                Err(e) => {
                    warn!(pod = %drift.uid, container = %drift.container, cgroup = %drift.cgroup, error = %e, "cannot restore an attached cgroup's cpuset");
                    found.push(CgroupFinding::Fought(drift));
                }
            }
        }
        self.drift_restored.extend(restored);
        found
    }

    /// The cgroups of the attached shared-pool containers.
    fn shared_members(&self) -> Vec<CgroupPath> {
        let mut out = Vec::new();
        for (uid, containers) in &self.records.attachments {
            let Some(pod) = self.admitter.pods().get(uid) else {
                continue;
            };
            for (name, path) in containers {
                let shared = pod
                    .containers
                    .iter()
                    .find(|c| &c.name == name)
                    .is_none_or(|c| pool::is_shared(&c.allocation));
                if !shared {
                    continue;
                }
                match CgroupPath::new(path) {
                    Ok(p) => out.push(p),
                    Err(e) => {
                        warn!(pod = %uid, container = %name, error = %e, "bad attached cgroup path")
                    }
                }
            }
        }
        out
    }

    /// Write the shared pool to every attached shared-pool cgroup (see
    /// [`PoolMode`]). Cgroups that are gone are forgotten (their containers
    /// ended). Returns the pool written.
    pub(crate) fn sync_pool(&mut self, mode: PoolMode) -> Result<CpuSet, PoolError> {
        let pool = match mode {
            PoolMode::Shrink => self.pool_now(),
            PoolMode::Exact => self.shared_pool(),
        };
        if self.applied_pool.as_ref() == Some(&pool) {
            return Ok(pool);
        }
        let members = self.shared_members();
        if members.is_empty() {
            self.applied_pool = Some(pool.clone());
            return Ok(pool);
        }
        if pool.is_empty() {
            let l = self.admitter.ledger();
            return Err(PoolError::Empty(CgroupError::EmptySharedPool {
                online: l.online_cpus().to_string(),
                exclusive: l.exclusive_cpus().to_string(),
            }));
        }
        let PoolWrite { gone, failed } = match self.cgroups() {
            Ok(mgr) => pool::write_pool(mgr, &pool, &members),
            Err(e) => return Err(PoolError::Hierarchy(e)),
        };
        for path in gone {
            let p = path.as_path().to_string_lossy();
            let mut dropped = Vec::new();
            for (uid, containers) in &mut self.records.attachments {
                containers.retain(|name, c| {
                    let keep = *c != p;
                    if !keep {
                        dropped.push((uid.clone(), name.clone()));
                    }
                    keep
                });
            }
            self.records.attachments.retain(|_, c| !c.is_empty());
            for (uid, container) in dropped {
                self.changes.push(Change::Detached { uid, container });
            }
            info!(cgroup = %p, "attached cgroup is gone; forgotten");
        }
        if !failed.is_empty() {
            self.applied_pool = None;
            return Err(PoolError::Write { pool, failed });
        }
        self.applied_pool = Some(pool.clone());
        Ok(pool)
    }

    /// After the state is durable: give the shared-pool cgroups the pool
    /// as the ledger has it. A failure is logged (it concerns other
    /// containers, which keep a smaller pool until the next change).
    pub fn settle_pool(&mut self) {
        if let Err(e) = self.sync_pool(PoolMode::Exact) {
            warn!(error = %e, "cannot update the shared-pool containers' cpusets");
        }
    }

    /// The processes in pod `uid`'s cgroups (`None` when that cannot be
    /// known: no cgroup hierarchy, an unreadable cgroup).
    pub fn processes(&mut self, uid: &str) -> Option<Vec<u32>> {
        let paths = self.cgroup_paths(uid);
        if paths.is_empty() {
            return Some(Vec::new());
        }
        let mgr = self.cgroups().ok()?;
        let mut pids = Vec::new();
        for p in paths {
            let path = CgroupPath::new(&p).ok()?;
            match mgr.open(&path) {
                Ok(cg) => pids.extend(mgr.procs(&cg).ok()?),
                Err(CgroupError::Missing { .. }) => {}
                Err(_) => return None,
            }
        }
        Some(pids)
    }

    /// Remove pod `uid`'s empty cgroups under `topomgr/` (those `run`
    /// created); others belong to whoever made them.
    pub fn remove_cgroups(&mut self, uid: &str) {
        let paths = self.cgroup_paths(uid);
        let Ok(mgr) = self.cgroups() else {
            return;
        };
        for p in paths {
            let Ok(path) = CgroupPath::new(&p) else {
                continue;
            };
            if path.names().next() != Some(std::ffi::OsStr::new(TOPOMGR_PARENT)) {
                continue;
            }
            if let Ok(cg) = mgr.open(&path) {
                if let Err(e) = mgr.remove(&cg, 1) {
                    warn!(cgroup = %p, error = %e, "cannot remove a reclaimed pod's cgroup");
                }
            }
        }
    }

    /// Release every pod whose owner is gone (see the module's "Owners"),
    /// now; keep (and report) those with processes left in their cgroups.
    pub fn reclaim(&mut self) -> Vec<Reclaim> {
        self.reclaim_at(crate::pod_owner::unix_now(), ATTACH_TIMEOUT)
    }

    /// [`NodeState::reclaim`] at `now` (seconds since the Unix epoch) with
    /// `attach_timeout` for hook admissions that were never attached.
    pub(crate) fn reclaim_at(&mut self, now: u64, attach_timeout: Duration) -> Vec<Reclaim> {
        let boot = self.boot_id.clone();
        let mut candidates: Vec<(String, Owner, ReclaimCause)> = Vec::new();
        for (uid, owner) in &self.records.owners {
            let cause = match owner {
                Owner::Process(p) if !crate::pod_owner::is_alive(p, &boot) => {
                    Some(ReclaimCause::OwnerGone)
                }
                Owner::Process(_) => None,
                Owner::Container(c) if crate::pod_owner::process_ended(c, &boot) => {
                    Some(ReclaimCause::OwnerGone)
                }
                Owner::Container(c) => {
                    let attached = self
                        .records
                        .attachments
                        .get(uid)
                        .is_some_and(|a| !a.is_empty());
                    let late = now.saturating_sub(c.admitted_at) >= attach_timeout.as_secs();
                    (c.runtime == ContainerRuntime::OciHook && !attached && late)
                        .then_some(ReclaimCause::NeverAttached)
                }
            };
            if let Some(cause) = cause {
                candidates.push((uid.clone(), owner.clone(), cause));
            }
        }
        let mut out = Vec::new();
        for (uid, owner, cause) in candidates {
            if !self.admitter.pods().contains_key(&uid) {
                self.forget(&uid);
                continue;
            }
            let pids = match cause {
                // The container runs unplaced: nothing of it is topomgr's.
                ReclaimCause::NeverAttached => Some(Vec::new()),
                ReclaimCause::OwnerGone => self.processes(&uid),
            };
            match pids {
                Some(pids) if pids.is_empty() => {
                    self.remove_cgroups(&uid);
                    if let Err(e) = self.release(&uid) {
                        warn!(pod = %uid, error = %e, "reclaimed pod released with errors");
                    }
                    let r = Reclaim::Released { uid, owner, cause };
                    info!(reclaimed = %r, "pod reclaimed");
                    out.push(r);
                }
                Some(pids) => {
                    let r = Reclaim::Kept { uid, owner, pids };
                    debug!(kept = %r, "owner is gone but processes remain");
                    out.push(r);
                }
                None => {
                    warn!(pod = %uid, %owner, "owner is gone but its cgroups cannot be read; kept");
                }
            }
        }
        out
    }

    /// Who holds the exclusive CPUs, one line each, for refusal messages:
    /// the pod, container, CPUs, and for `topomgr run` pods the owner and
    /// the processes in its cgroup.
    pub fn exclusive_holders(&mut self) -> Vec<String> {
        let l = self.admitter.ledger();
        let held = l.holders_of(&l.exclusive_cpus().clone());
        let mut lines = Vec::new();
        for (h, cpus) in held {
            let mut line = format!("CPUs {cpus}: {h}");
            if let Some(o) = self.records.owners.get(&h.pod).cloned() {
                match &o {
                    Owner::Process(p) => line.push_str(&format!(
                        ", topomgr run pid {} ({})",
                        p.pid,
                        if crate::pod_owner::is_alive(p, &self.boot_id) {
                            "running"
                        } else {
                            "exited"
                        }
                    )),
                    Owner::Container(_) => line.push_str(&format!(", {o}")),
                }
                match self.processes(&h.pod) {
                    Some(p) if !p.is_empty() => {
                        let pids: Vec<String> = p.iter().map(u32::to_string).collect();
                        line.push_str(&format!(", processes {} in its cgroup", pids.join(",")));
                    }
                    _ => {}
                }
            }
            lines.push(line);
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topomgr_engine::admission::ContainerResult;
    use topomgr_sdk::{Allocation, QosClass, TopologyHint};

    fn container(name: &str, cpus: &str, exclusive: bool) -> ContainerResult {
        ContainerResult {
            name: name.to_owned(),
            hint: TopologyHint {
                affinity: None,
                preferred: true,
            },
            allocation: Allocation::default().with_cpus(CpuSet::parse(cpus).unwrap(), exclusive),
        }
    }

    #[test]
    fn shared_containers_show_the_pool_now() {
        let r = AdmitResult {
            pod: PodView::new("u", "p", "default", QosClass::Burstable),
            admitted: true,
            reason: None,
            message: None,
            containers: vec![
                container("shared", "0-7", false),
                container("pinned", "2-3", true),
                container("none", "", false),
            ],
        };
        let pool = CpuSet::parse("0-1,4-7").unwrap();
        let now = current_pool(&r, &pool);
        let cpus: Vec<String> = now
            .containers
            .iter()
            .map(|c| c.allocation.cpus.to_string())
            .collect();
        assert_eq!(cpus, ["0-1,4-7", "2-3", ""]);
        assert!(now.containers[1].allocation.exclusive);
        // Nothing to change: the result is borrowed as is.
        assert!(matches!(current_pool(&now, &pool), Cow::Borrowed(_)));
    }

    /// A node state without providers over a plain directory as its cgroup
    /// hierarchy, in boot "b".
    fn node(tag: &str) -> (NodeState, PathBuf) {
        let machine = topomgr_sdk::testkit::machine(2, 2);
        let numa = topomgr_engine::numa::NumaInfo::from_machine(&machine).unwrap();
        let policy =
            topomgr_engine::policy::Policy::new("best-effort", &BTreeMap::new(), numa).unwrap();
        let admitter = Admitter::new(
            &machine,
            policy,
            topomgr_engine::policy::Scope::Container,
            Vec::new(),
        );
        let root =
            std::env::temp_dir().join(format!("topomgr-node-state-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        // A v1 cpuset hierarchy at the root, as detection finds one.
        std::fs::write(root.join("cpuset.cpus"), "0-3").unwrap();
        let cgroups = topomgr_cgroup::directory_tree::detect(&root).unwrap();
        let node = NodeState::new(admitter, Records::default(), &root, "b").with_cgroups(cgroups);
        (node, root)
    }

    fn one_container(uid: &str) -> PodView {
        PodView::new(uid, uid, "t", QosClass::BestEffort)
            .with_containers(vec![topomgr_sdk::ContainerView::new("app")])
    }

    /// A cgroup directory with `pids` in its `cgroup.procs`.
    fn cgroup(root: &Path, path: &str, pids: &str) {
        std::fs::create_dir_all(root.join(path)).unwrap();
        std::fs::write(root.join(path).join("cgroup.procs"), pids).unwrap();
    }

    fn container_owner(id: &str, process: Option<(u32, u64)>, cgroup: Option<&str>) -> Owner {
        Owner::Container(crate::pod_owner::ContainerOwner {
            runtime: ContainerRuntime::OciHook,
            id: id.to_owned(),
            pid: process.map(|p| p.0),
            start_time: process.map(|p| p.1),
            boot_id: "b".to_owned(),
            cgroup: cgroup.map(str::to_owned),
            admitted_at: 1_000,
        })
    }

    /// A process that has ended and was reaped: its pid and a start time.
    fn ended() -> (u32, u64) {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        let start = crate::pod_owner::start_time(pid).unwrap_or(1);
        c.wait().unwrap();
        (pid, start)
    }

    #[test]
    fn owners_that_are_gone_are_reclaimed_by_the_rule_of_their_kind() {
        let (mut n, root) = node("reclaim");
        let me = crate::pod_owner::current_process("b").unwrap();
        let dead = ended();
        let admit = |n: &mut NodeState, uid: &str, owner: Owner| {
            let r = n
                .admit_owned(
                    &one_container(uid),
                    owner,
                    &AssignedDevices::new(),
                    &mut Vec::new(),
                )
                .unwrap();
            assert!(r.admitted, "{r:?}");
        };
        // A process owner that runs; one that ended (no cgroup).
        admit(&mut n, "p-alive", Owner::Process(me.clone()));
        admit(
            &mut n,
            "p-dead",
            Owner::Process(crate::pod_owner::ProcessOwner {
                pid: dead.0,
                start_time: dead.1,
                boot_id: "b".into(),
            }),
        );
        // Containers: ended with its cgroup empty; ended with a process
        // left in its cgroup; running and attached; running and never
        // attached.
        cgroup(&root, "ctr/empty", "");
        cgroup(&root, "ctr/busy", "4242\n");
        cgroup(&root, "ctr/attached", "");
        admit(
            &mut n,
            "c-empty",
            container_owner("e", Some(dead), Some("ctr/empty")),
        );
        admit(
            &mut n,
            "c-busy",
            container_owner("b", Some(dead), Some("ctr/busy")),
        );
        admit(
            &mut n,
            "c-attached",
            container_owner("a", Some((me.pid, me.start_time)), Some("ctr/attached")),
        );
        n.attach("c-attached", "app", "ctr/attached").unwrap();
        admit(
            &mut n,
            "c-unattached",
            container_owner("u", Some((me.pid, me.start_time)), None),
        );
        n.take_changes();

        // Before the attach timeout: the dead owners' pods with empty
        // cgroups go, the busy one stays.
        let r = n.reclaim_at(1_000 + 119, ATTACH_TIMEOUT);
        let released: Vec<(&str, ReclaimCause)> = r
            .iter()
            .filter_map(|r| match r {
                Reclaim::Released { uid, cause, .. } => Some((uid.as_str(), *cause)),
                Reclaim::Kept { .. } => None,
            })
            .collect();
        assert_eq!(
            released,
            [
                ("c-empty", ReclaimCause::OwnerGone),
                ("p-dead", ReclaimCause::OwnerGone)
            ]
        );
        let kept: Vec<String> = r
            .iter()
            .filter(|r| matches!(r, Reclaim::Kept { .. }))
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            kept,
            [format!(
                "pod \"c-busy\": its owner oci-hook container b (init pid {}) is gone but processes [4242] remain in its cgroups; it stays held until they exit",
                dead.0
            )]
        );
        assert_eq!(
            n.take_changes(),
            [
                Change::Released {
                    uid: "c-empty".into()
                },
                Change::Released {
                    uid: "p-dead".into()
                }
            ]
        );
        // The container's own cgroup is the runtime's: left alone.
        assert!(root.join("ctr/empty").is_dir());

        // At the attach timeout, the hook's unattached admission goes; the
        // attached one stays while its process runs.
        let r = n.reclaim_at(1_000 + 120, ATTACH_TIMEOUT);
        assert!(
            r.iter().any(|r| r.to_string()
                == "pod \"c-unattached\" of oci-hook container u (init pid ".to_owned()
                    + &me.pid.to_string()
                    + ") was released: it was never attached to a cgroup within 120 s of its admission"),
            "{r:?}"
        );
        // The busy container's process left: reclaimed now.
        std::fs::write(root.join("ctr/busy/cgroup.procs"), "").unwrap();
        let r = n.reclaim_at(1_000 + 121, ATTACH_TIMEOUT);
        assert_eq!(r.len(), 1, "{r:?}");
        let mut left: Vec<&String> = n.pods().keys().collect();
        left.sort();
        assert_eq!(left, ["c-attached", "p-alive"]);
        assert_eq!(
            n.records().owners.keys().collect::<Vec<_>>(),
            ["c-attached", "p-alive"]
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn an_owned_admission_retried_by_its_owner_answers_and_another_owner_conflicts() {
        let (mut n, root) = node("owned");
        let me = crate::pod_owner::current("b").unwrap();
        let pod = one_container("u1");
        let first = n
            .admit_owned(&pod, me.clone(), &AssignedDevices::new(), &mut Vec::new())
            .unwrap();
        assert_eq!(n.take_changes().len(), 2, "admitted and its owner");
        let again = n
            .admit_owned(&pod, me.clone(), &AssignedDevices::new(), &mut Vec::new())
            .unwrap();
        assert_eq!(again, first);
        assert!(n.take_changes().is_empty());
        let other = container_owner("x", None, None);
        let err = n
            .admit_owned(&pod, other, &AssignedDevices::new(), &mut Vec::new())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "pod \"u1\" is already admitted for {me}; it was asked for oci-hook container x. Release it first, or admit under another uid"
            )
        );
        n.admit(&one_container("plain"));
        let err = n
            .admit_owned(
                &one_container("plain"),
                me,
                &AssignedDevices::new(),
                &mut Vec::new(),
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("pod \"plain\" is already admitted without an owner;"),
            "{err}"
        );
        std::fs::remove_dir_all(root).unwrap();
    }
}
