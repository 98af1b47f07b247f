//! The state thread: the daemon's one owner of the node state.
//!
//! One OS thread owns the [`NodeState`] (and through it the [`Admitter`],
//! every provider and the ledger) and applies commands one at a time, like
//! the kubelet admits one pod at a time. HTTP handlers submit commands and
//! await the answer; they never touch providers.
//!
//! Durability with group commit: the state thread takes every command that is
//! waiting (up to [`MAX_BATCH`]), applies them in order, appends ONE record
//! of what they changed to the journal ([`Store::commit`]: checksummed,
//! `fdatasync`ed, compacted into a snapshot from time to time) and only
//! then answers them. An answer therefore always describes state that is on
//! disk: a `kill -9` at any instant loses no acknowledged change. The cost
//! of a commit is that of the change, not of the pods held. Cgroups follow
//! the order [`NodeState`] documents: an exclusive admission shrinks the
//! shared pool before it is answered; the pool grows only after the state
//! that frees CPUs is on disk.
//!
//! When the state cannot be written (a full disk), the changes of that batch
//! are answered with an error and the state thread rolls its memory (providers,
//! pods, records) back to what is on disk ([`Store::reload`]), so memory and
//! disk agree again; the next change is tried as usual, so once space is
//! freed the daemon accepts changes again without a restart.
//!
//! Reads (`pods`, `health`) are served from a view that the state thread brings
//! up to date with each commit's changes (under a short write lock), without
//! queueing behind admissions. Pods are stored as admitted; readers show a
//! shared-pool container with the pool as it is now ([`View::current`]),
//! and an admission's answer with the pool after its batch.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, RwLock};
use std::thread;
use std::time::Instant;

use tokio::sync::oneshot;
use topomgr_sdk::{AssignedDevicesRequest, CpuSet, Machine, NumaMask, PodView};
use tracing::{error, info, warn};

use super::metrics::Metrics;
use topomgr_cgroup::Cpuset;
use topomgr_engine::admission::{AdmissionError, AdmitResult, Admitter, UID_CONFLICT};
use topomgr_engine::ledger::Finding;
#[cfg(doc)]
use topomgr_node::api::AdmissionRequest;
use topomgr_node::api::OwnerSpec;
use topomgr_node::api::{Attached, Attachments};
use topomgr_node::persist::image::{RestoreIssue, Restored};
use topomgr_node::persist::snapshot;
use topomgr_node::persist::store::Store;
use topomgr_node::state::followed::{
    self, stale_siblings, CpusetUpdate, FollowedContainer, PinnedContainer,
};
use topomgr_node::state::pod_owner::{ContainerRuntime, Owner};
use topomgr_node::state::{
    current_pool, AttachError, Change, NodeState, OwnerConflict, Reclaim, Records, UnknownContainer,
};

/// The most commands applied before one state-file write.
pub(crate) const MAX_BATCH: usize = 256;

/// A request to the state thread.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    /// Admit pods in order (each sees the allocations of the ones before).
    Admit(Vec<PodView>),
    /// Admit one pod for `owner` and record the owner with it.
    AdmitOwned {
        /// The pod (checked by the caller: [`AdmissionRequest::check_pod`]).
        pod: PodView,
        /// Its owner as the client told it (checked here, where the boot
        /// id and the time of the admission are known).
        owner: OwnerSpec,
        /// The devices its containers were given (the OCI hook's CDI
        /// devices), aligned with as the NRI face's.
        assigned: AssignedDevicesRequest,
    },
    /// What the NRI face asks at one of the runtime's events.
    Container(ContainerCommand),
    /// Release the pods whose owners are gone ([`NodeState::reclaim`]).
    Reclaim,
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
    /// Build the NodeResourceTopology export (changes nothing).
    NodeResourceTopology,
    /// Admit pods in order as a what-if and undo it: their decision traces
    /// ([`topomgr_engine::explain`]); nothing changes.
    DryRun(Vec<PodView>),
    /// Reconcile with providers built anew on the machine and config as
    /// they are now ([`topomgr_node::setup::reload::reload`]), and save.
    /// (Taken once: the new providers are not `Clone`.)
    Reload(Arc<std::sync::Mutex<Option<Prepared>>>),
    /// A reload changed nothing: report why in health until one succeeds.
    ReloadFailed(String),
    /// Verify the attached cgroups (cpusets and memory nodes as written).
    CheckCgroups,
}

/// The NRI face's requests, one per runtime event, each answered with a
/// [`ContainerAnswer`] computed here from the committed state (the pods
/// and the containers followed, [`NodeState::followed`]): the face applies
/// it as it is, without reading the view again.
#[derive(Debug, Clone)]
pub(crate) enum ContainerCommand {
    /// CreateContainer: release older instances of the same container of
    /// the same sandbox still held (the runtime reported their exit late),
    /// admit the container, follow it; answer its cpuset and every
    /// followed container whose cpuset changes. An admission that would
    /// leave no CPU to the shared pool while containers need it is
    /// refused here, before the commit.
    Create(Box<NewContainer>),
    /// CreateContainer of a container left alone because it arrived with a
    /// cpuset topomgr did not give it: kept in the book as pinned (its
    /// CPUs out of exclusive use; a kubelet pod's, a health note) until it
    /// is removed.
    Pinned {
        /// The container id.
        id: String,
        /// Its sandbox and `namespace/pod/container (cpus)`.
        pinned: PinnedContainer,
    },
    /// PostCreateContainer, PostStartContainer: the runtime created the
    /// container with `cpuset` (`None`: not told); where it is not what
    /// the container must have, the follower's next round corrects it.
    Created {
        /// The container id.
        id: String,
        /// Its cpuset as the runtime has it.
        cpuset: Option<Cpuset>,
        /// Its init process (PostStart; 0: not known), recorded as an owner
        /// of the node ([`Worker::record_member`]) while it holds CPUs.
        pid: u32,
        /// PostStartContainer (not PostCreate): the container runs, and
        /// its pod and owner as at Create when topomgr places it (to
        /// admit it in place of a stale instance that never started,
        /// [`topomgr_node::state::followed::stale_siblings`]).
        started: Option<Option<Box<(PodView, OwnerSpec, AssignedDevicesRequest)>>>,
    },
    /// UpdateContainer: answer the container's cpuset and the others whose
    /// cpuset differs. A resize (`resized`: the container's one-container
    /// pod with the update's resources, changing its CPU or memory) is
    /// done in place first ([`NodeState::resize`]), or refused with its
    /// reason, changing nothing.
    Update {
        /// The container id.
        id: String,
        /// Its pod as the update would make it (`None`: the update carries
        /// no resources, or they do not map).
        resized: Option<Box<PodView>>,
    },
    /// StopContainer: release the container and stop following it; answer
    /// the others' cpusets (the CPUs it gave back).
    Stop {
        /// The container id.
        id: String,
    },
    /// RemoveContainer: release what is still held (the follower tells the
    /// others) and forget the container if it was kept as pinned. Also the
    /// face's release of a container admitted past its answer deadline
    /// whose answer came back too late to release it in its Create.
    Remove {
        /// The container id.
        id: String,
    },
    /// StopPodSandbox, RemovePodSandbox: release every container of the
    /// sandbox still held, and the sandbox's pod admitted whole (pod scope).
    RemoveSandbox {
        /// The runtime's sandbox id.
        sandbox: String,
    },
    /// Synchronize: release the pods of NRI containers the runtime no
    /// longer has (not in `existing`), admit the containers listed that are
    /// not admitted, follow exactly those listed, keep as pinned by the
    /// kubelet exactly those listed so whose pod topomgr does not hold;
    /// answer every cpuset.
    Synchronize {
        /// The ids of the containers the runtime runs.
        existing: BTreeSet<String>,
        /// The ids of the pod sandboxes the runtime has (pods admitted
        /// whole of the others are released).
        sandboxes: BTreeSet<String>,
        /// The containers listed (running, with their pod).
        listed: Vec<ListedContainer>,
    },
    /// The follower's round: every cpuset the runtime was not told, marked
    /// as on its way (nothing while one is).
    FollowerRound,
    /// The follower's update came back; `failed`: those not applied.
    FollowerSent {
        /// Container ids the runtime did not update.
        failed: Vec<String>,
    },
    /// Read the followed containers' cpusets back from their cgroups under
    /// the cgroup root; where one differs from what the runtime was told
    /// (changed behind topomgr's back, an update lost), the follower's next
    /// round repairs it.
    CheckCpusets,
    /// The book as it is: (id, what is kept, whether it holds exclusive
    /// CPUs) of every container followed (tests check it after each event).
    #[cfg(test)]
    Book,
}

/// A container to admit and follow (CreateContainer).
#[derive(Debug, Clone)]
pub(crate) struct NewContainer {
    /// The runtime's container id (the uid of its one-container pod).
    pub id: String,
    /// The one-container pod.
    pub pod: PodView,
    /// The container as owner.
    pub owner: OwnerSpec,
    /// Devices the container was given outside topomgr.
    pub assigned: Given,
    /// What the book keeps of it.
    pub follow: FollowedContainer,
    /// Its answer deadline ([`topomgr_nri::answer_deadline`]): past it
    /// when the state thread takes the request, nothing is admitted;
    /// admitted past it, it is released again in the same request.
    pub deadline: Option<std::time::Instant>,
}

/// The devices the containers of a pod to admit were given outside
/// topomgr (by the kubelet's device plugins, DRA, CDI).
#[derive(Debug, Clone)]
pub(crate) enum Given {
    /// Every container of the pod holds these (a one-container pod).
    Every(AssignedDevicesRequest),
    /// By container name (a pod admitted whole under pod scope: the
    /// creating container's own, the others' as the kubelet lists them).
    ByName(BTreeMap<String, AssignedDevicesRequest>),
}

impl Default for Given {
    fn default() -> Given {
        Given::Every(AssignedDevicesRequest::default())
    }
}

impl Given {
    /// By container name, for `pod`.
    fn by_container(self, pod: &PodView) -> topomgr_engine::admission::AssignedDevices {
        match self {
            Given::Every(a) if a.is_empty() => BTreeMap::new(),
            Given::Every(a) => pod
                .init_containers
                .iter()
                .chain(&pod.containers)
                .map(|c| (c.name.clone(), a.clone()))
                .collect(),
            Given::ByName(m) => m.into_iter().filter(|(_, a)| !a.is_empty()).collect(),
        }
    }
}

/// A container the runtime lists at Synchronize.
#[derive(Debug, Clone)]
pub(crate) struct ListedContainer {
    /// The runtime's container id.
    pub id: String,
    /// What the book keeps of it.
    pub follow: FollowedContainer,
    /// Its pod and owner when topomgr places it (`None`: left alone, or not
    /// readable; followed only while its pod is admitted). Held by a pod
    /// admitted whole (`follow.held_by`): that whole pod to admit (its uid
    /// the pod's), or, when it is held already, the container's own
    /// one-container pod (to catch up a resize done while away).
    pub admit: Option<(PodView, OwnerSpec, Given)>,
    /// Left alone as a kubelet container that arrived with a cpuset and
    /// without topomgr's mark: kept as pinned unless topomgr holds its pod.
    pub pinned: Option<PinnedContainer>,
}

/// A Create past its answer deadline (the runtime already has an error
/// answer, [`topomgr_nri::answer_deadline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Late {
    /// Past it when the state thread took the request: nothing admitted.
    BeforeAdmission,
    /// Admitted past it: released again within the same request.
    AfterAdmission,
}

/// A followed container whose cgroup did not have the cpuset the runtime
/// was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Repair {
    /// The container id.
    pub id: String,
    /// `namespace/pod/container`.
    pub who: String,
    /// What its cgroup had.
    pub found: Cpuset,
    /// What it must have (sent again).
    pub want: Cpuset,
}

/// The state thread's answer to a [`ContainerCommand`].
#[derive(Debug, Clone, Default)]
pub(crate) struct ContainerAnswer {
    /// Create: the admission (a refusal says why).
    pub admission: Option<AdmitResult>,
    /// Create: past its answer deadline (nothing is held for it).
    pub late: Option<Late>,
    /// Pinned, Remove, RemoveSandbox, Synchronize: the containers kept as
    /// pinned by the kubelet after it, when it may have changed them.
    pub pinned: Option<Vec<String>>,
    /// Create, Update: the container's cpuset (marked told).
    pub cpuset: Option<Cpuset>,
    /// Update: why the resize it asks is refused (nothing changed).
    pub refusal: Option<String>,
    /// The other containers whose cpuset changes (marked told).
    pub updates: Vec<CpusetUpdate>,
    /// Create: stale instances released; Stop, Remove, RemoveSandbox: the
    /// containers no longer followed; Synchronize: the containers whose
    /// pods were released.
    pub released: Vec<String>,
    /// Synchronize: the containers admitted now, with their result or why
    /// they could not be.
    pub admitted: Vec<(String, Result<AdmitResult, String>)>,
    /// CheckCpusets: the cgroups found wrong.
    pub repairs: Vec<Repair>,
    /// Created: the runtime has another cpuset than the container must
    /// have; FollowerSent: cpusets changed while the update was on its way;
    /// RemoveSandbox: a pod admitted whole was released. The follower
    /// sends again.
    pub again: bool,
    /// The containers followed after this.
    pub followed: usize,
    /// Book: every container followed.
    #[cfg(test)]
    pub book: Vec<(String, FollowedContainer, bool)>,
    /// What is left to do after the commit.
    finish: Finish,
}

/// Whether `new` (the admitted one-container pod `held` with an update's
/// resources) changes the container's CPU, memory or hugepage requests or
/// limits: an in-place resize (an update that sets only a cpuset, as
/// topomgr's own through CRI, does not).
fn resizes(held: &AdmitResult, new: &PodView) -> bool {
    let (Some(old), Some(now)) = (held.pod.containers.first(), new.containers.first()) else {
        return false;
    };
    amounts(old, true) != amounts(now, true)
}

/// Container `name` of `pod` (an init, sidecar or app container).
fn container_named<'a>(pod: &'a PodView, name: &str) -> Option<&'a topomgr_sdk::ContainerView> {
    pod.init_containers
        .iter()
        .chain(&pod.containers)
        .find(|c| c.name == name)
}

/// The pod `held` (admitted whole, pod scope) with its container of the
/// name of `one`'s container given `one`'s requests and limits (`one`:
/// that container as a one-container pod, as the runtime's update makes
/// it), when they differ from what is held; `None` when they do not, or
/// the pod has no container of that name.
fn whole_resized(held: &AdmitResult, one: &PodView) -> Option<PodView> {
    let now = one.containers.first()?;
    let old = container_named(&held.pod, &now.name)?;
    if amounts(old, true) == amounts(now, true) {
        return None;
    }
    with_part(&held.pod, now)
}

/// `pod` with its container of `part`'s name given `part`'s requests and
/// limits; `None` when it has no container of that name.
fn with_part(pod: &PodView, part: &topomgr_sdk::ContainerView) -> Option<PodView> {
    let mut pod = pod.clone();
    let c = pod
        .init_containers
        .iter_mut()
        .chain(pod.containers.iter_mut())
        .find(|c| c.name == part.name)?;
    c.requests.clone_from(&part.requests);
    c.limits.clone_from(&part.limits);
    Some(pod)
}

/// A container's CPU, memory and hugepage amounts, by name: its request and,
/// with `limits`, its limit (a name only limited counts too); without, the
/// requests alone.
fn amounts(c: &topomgr_sdk::ContainerView, limits: bool) -> Vec<(String, u64, Option<u64>)> {
    let limited = c.limits.keys().filter(|_| limits);
    let mut k: Vec<(String, u64, Option<u64>)> = c
        .requests
        .keys()
        .chain(limited)
        .filter(|n| *n == "cpu" || *n == "memory" || n.starts_with("hugepages-"))
        .map(|n| {
            let limit = c.limits.get(n).copied().filter(|_| limits);
            (n.clone(), c.request(n), limit)
        })
        .collect();
    k.sort();
    k.dedup();
    k
}

/// The resources of `listed` (a container as the runtime lists it at
/// Synchronize) as a resize would ask them, when its requests differ from
/// those of `held`; `None` when they do not. The runtime lists the CFS
/// quota topomgr lifted for exclusive CPUs (no CPU limit): where the books
/// had a CPU limit and the listing has none, the limit is the request again,
/// as the kubelet asked it.
fn resized_requests(held: &AdmitResult, listed: PodView) -> Option<PodView> {
    resized_part(held.pod.containers.first()?, listed)
}

/// [`resized_requests`] of the container `old` of the books.
fn resized_part(old: &topomgr_sdk::ContainerView, mut listed: PodView) -> Option<PodView> {
    let now = listed.containers.first()?;
    if amounts(old, false) == amounts(now, false) {
        return None;
    }
    let lifted = old.limits.contains_key("cpu") && !now.limits.contains_key("cpu");
    if lifted {
        let c = &mut listed.containers[0];
        let cpu = c.request("cpu");
        c.limits.insert("cpu".to_owned(), cpu);
    }
    Some(listed)
}

/// Whether `deadline` has passed.
fn past(deadline: Option<std::time::Instant>) -> bool {
    deadline.is_some_and(|d| std::time::Instant::now() >= d)
}

/// What a [`ContainerCommand`] leaves for after the commit: answers are
/// computed from the committed state.
#[derive(Debug, Clone, Default)]
enum Finish {
    /// Nothing.
    #[default]
    Nothing,
    /// Follow the container created, when admitted; its cpuset and the
    /// others' updates.
    Create(String, Box<FollowedContainer>),
    /// The container's cpuset and the others' updates.
    Update(String),
    /// The updates of every container.
    Updates,
    /// Follow exactly these; every container's update.
    Synchronize(BTreeMap<String, FollowedContainer>),
    /// The follower's round.
    FollowerRound,
}

/// What a reload (SIGHUP, the machine check) hands the state thread to swap in.
pub(crate) struct Prepared {
    /// What asked for it (`SIGHUP`, `machine check`), for messages.
    pub trigger: &'static str,
    /// The machine as it is now.
    pub machine: Machine,
    /// The Topology Manager policy and scope of the config.
    pub policy: topomgr_engine::policy::Policy,
    /// The scope.
    pub scope: topomgr_engine::policy::Scope,
    /// The config's `[limits]`.
    pub limits: topomgr_node::state::limits::Limits,
    /// The config's `cdi.align_unknown_devices`.
    pub align_unknown_devices: bool,
    /// Every enabled provider built anew, or why it could not be.
    pub providers: Vec<(
        String,
        Result<topomgr_engine::provider::LoadedProvider, String>,
    )>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("trigger", &self.trigger)
            .field(
                "providers",
                &self.providers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The state thread's answer to a [`Command`].
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// One result per pod, in order.
    Admitted(Vec<AdmitResult>),
    /// The released pod as it was admitted.
    Released(AdmitResult),
    /// A reclaim ran (what it released is logged and counted in the
    /// metrics).
    Reclaimed,
    /// The answer to a [`ContainerCommand`].
    Container(Box<ContainerAnswer>),
    /// The cgroup was written.
    Attached(Attached),
    /// The NodeResourceTopology object ([`topomgr_node::nrt`]).
    NodeResourceTopology(topomgr_node::nrt::NodeResourceTopology),
    /// One decision trace per pod of a dry run, in order.
    DryRun(Vec<topomgr_node::api::Explain>),
    /// A reload or a check ran (what it found is logged, counted and in
    /// health).
    Done,
}

/// Why a command failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CommandError {
    /// No admitted pod has that uid.
    #[error("no admitted pod with uid {0:?}")]
    UnknownPod(String),
    /// The pod has no such container.
    #[error(transparent)]
    UnknownContainer(UnknownContainer),
    /// A uid is admitted with a different spec (nothing of the request was admitted).
    #[error("{0}")]
    Conflict(String),
    /// A uid is admitted for another owner (nothing was admitted).
    #[error(transparent)]
    OwnerConflict(OwnerConflict),
    /// The owner of an owned admission is not usable.
    #[error("{0}")]
    BadOwner(String),
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
    /// The NodeResourceTopology export could not be built.
    #[error("{0}")]
    Export(String),
    /// A reload could not be applied.
    #[error("{0}")]
    Reload(String),
    /// The state thread is gone (shutting down).
    #[error("the daemon's state thread has stopped")]
    Stopped,
}

/// What readers see: the state as of the last commit.
#[derive(Debug, Clone, Default)]
pub(crate) struct View {
    /// Admitted pods by uid.
    pub pods: BTreeMap<String, Arc<AdmitResult>>,
    /// Cgroup attachments.
    pub attachments: Attachments,
    /// The owners of owned admissions.
    pub owners: BTreeMap<String, Owner>,
    /// CPUs held exclusively.
    pub exclusive_cpus: CpuSet,
    /// The shared pool (online minus exclusive).
    pub shared_pool: CpuSet,
    /// Set while the last state write failed (or changes are refused).
    pub failure: Option<String>,
    /// What the restore at start or the last reload reported (reboot,
    /// vanished resources, held providers, reclaimed pods) that still
    /// stands: a finding about a pod ends with its release.
    pub restore_notes: Vec<String>,
    /// Decision traces of admitted and recently rejected pods.
    pub explains: topomgr_engine::explain::History,
    /// The conflicts the providers reported that still stand.
    pub conflicts: Vec<topomgr_node::api::ConflictReport>,
    /// What the last reload or cgroup check could not do.
    pub reload_notes: Vec<String>,
    /// The machine as last read (at start, at the last reload).
    pub machine: Arc<Machine>,
    /// What the PodResources API lists as allocatable, and the NUMA nodes
    /// of each device: the providers' inventories at start and at the last
    /// reload ([`crate::podresources`]).
    pub podresources: Arc<crate::podresources::Allocatable>,
}

impl View {
    /// `r` as it is now: shared-pool containers show the current shared
    /// pool, not the pool at their admission ([`current_pool`]).
    pub(crate) fn current<'a>(&self, r: &'a AdmitResult) -> Cow<'a, AdmitResult> {
        current_pool(r, &self.shared_pool)
    }
}

/// Settings of the state thread.
#[derive(Debug, Clone)]
pub(crate) struct StateThreadSettings {
    /// Where the state file lives (already locked by the caller).
    pub state_dir: PathBuf,
    /// Root of the cgroup hierarchy for `attach`.
    pub cgroup_root: PathBuf,
    /// Whether `attach` lifts the CFS quota of exclusive containers
    /// ([`NodeState::with_cpu_quota_lift`]).
    pub lift_cpu_quota: bool,
    /// The current boot id.
    pub boot_id: String,
    /// The NodeResourceTopology export.
    pub export: topomgr_node::nrt::ExportSettings,
    /// Where each new NodeResourceTopology object goes for the push to the
    /// API server (`[kubernetes]`; never waits).
    pub nrt_push: Option<topomgr_kube::nrt_push::NrtPublisher>,
    /// How many pods and containers may be held (config `[limits]`).
    pub limits: topomgr_node::state::limits::Limits,
    /// The daemon's socket, when it holds the node lock: the init process
    /// of every container it places is recorded as an owner of the node
    /// for its state directory ([`Worker::record_member`]). `None` (a face
    /// in process, tests): nothing is recorded.
    pub members: Option<PathBuf>,
}

type Job = (Command, oneshot::Sender<Result<Reply, CommandError>>);

/// Handle to the state thread; cheap to clone.
#[derive(Clone)]
pub(crate) struct StateThread {
    jobs: mpsc::Sender<Job>,
    view: Arc<RwLock<View>>,
}

struct Worker {
    node: NodeState,
    /// The state directory (for messages).
    state_dir: PathBuf,
    /// The cgroup root (the NRI containers' cgroups are read under it).
    cgroup_root: PathBuf,
    /// See [`StateThreadSettings::members`].
    members: Option<PathBuf>,
    /// What the restore at start or the last reload reported; shown while
    /// it stands ([`Worker::standing_notes`]).
    restore_notes: Vec<RestoreNote>,
    /// What the last reload and cgroup check could not do.
    reload_notes: Vec<String>,
    /// Cgroup problems found by the check (see `check_cgroups`).
    cgroup_notes: Vec<String>,
    /// Containers resized while topomgr was away that it could not resize
    /// in its books (found at Synchronize), by id: shown while held.
    away_resizes: BTreeMap<String, String>,
    machine: Machine,
    export: topomgr_node::nrt::ExportSettings,
    nrt_push: Option<topomgr_kube::nrt_push::NrtPublisher>,
    /// Policy, scope and nodes of every trace.
    setting: Arc<topomgr_engine::explain::Setting>,
    /// Traces of this batch, published with it.
    traces: Vec<topomgr_engine::explain::Traced>,
    /// Traces of this batch's resizes (pod uid, trace), published with it.
    resize_traces: Vec<(String, topomgr_engine::explain::ExplainResize)>,
    store: Store,
    metrics: Arc<Metrics>,
    failure: Option<String>,
    broken: Option<String>,
    view: Arc<RwLock<View>>,
}

/// Errors starting the state thread.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The saved state could not be restored.
    #[error("restoring state: {0}")]
    Restore(snapshot::StateError),
    /// The state thread could not be started.
    #[error("cannot start the state thread: {0}")]
    Thread(std::io::Error),
}

// By hand, not `#[from]`: the message carries the restore error, so it is
// not also chained as the source (the binary prints each cause once).
impl From<snapshot::StateError> for StartError {
    fn from(e: snapshot::StateError) -> Self {
        StartError::Restore(e)
    }
}

/// A note of the last restore (at start or at a reload).
#[derive(Debug, Clone)]
enum RestoreNote {
    /// About the node (a reboot, a held or missing provider, a pod
    /// reclaimed): shown until the next restore.
    Node(String),
    /// What the ledger found about admitted pods (a vanished CPU, node or
    /// device, something held twice): shown while it still holds, so a
    /// release of the pod it names ends it.
    Ledger(Finding),
}

fn notes_of(restored: &Restored, boot_id: &str) -> Vec<RestoreNote> {
    if restored.rebooted {
        let saved = restored.saved_boot_id.clone().unwrap_or_default();
        warn!(saved_boot_id = %saved, boot_id = %boot_id, pods = restored.pods, "state was saved before a reboot; its pods are kept until released");
    }
    for issue in &restored.issues {
        warn!(issue = %issue, "restored state does not match the machine or the config");
    }
    // The reboot's note comes first, then one per issue (`Restored::notes`).
    let all = restored.notes(boot_id);
    let node_notes = all.len().saturating_sub(restored.issues.len());
    let mut notes: Vec<RestoreNote> = all
        .into_iter()
        .take(node_notes)
        .map(RestoreNote::Node)
        .collect();
    notes.extend(restored.issues.iter().map(|issue| match issue {
        RestoreIssue::Ledger(finding) => RestoreNote::Ledger(finding.clone()),
        other => RestoreNote::Node(other.to_string()),
    }));
    notes
}

impl StateThread {
    /// Restore the saved state into `admitter` (snapshot and journal),
    /// reclaim pods of dead `topomgr run` owners, bring the shared pool in
    /// line, compact the journal when it holds anything, then start the
    /// state thread.
    pub(crate) fn start(
        admitter: Admitter,
        machine: &Machine,
        settings: StateThreadSettings,
        metrics: Arc<Metrics>,
    ) -> Result<(StateThread, Restored), StartError> {
        let setting = Arc::new(topomgr_engine::explain::Setting::of(&admitter));
        let mut node = NodeState::new(
            admitter,
            Records::default(),
            &settings.cgroup_root,
            &settings.boot_id,
        )
        .with_cpu_quota_lift(settings.lift_cpu_quota)
        .with_limits(settings.limits);
        let (store, restored) = Store::open(&settings.state_dir, &mut node, &settings.boot_id)?;
        let mut notes = notes_of(&restored, &settings.boot_id);
        if restored.found {
            info!(
                pods = restored.pods,
                issues = restored.issues.len(),
                journal_records = store.records(),
                "state restored; nothing re-admitted or released"
            );
        }
        let mut worker = Worker {
            node,
            state_dir: settings.state_dir.clone(),
            cgroup_root: settings.cgroup_root.clone(),
            members: settings.members.clone(),
            restore_notes: Vec::new(),
            reload_notes: Vec::new(),
            cgroup_notes: Vec::new(),
            away_resizes: BTreeMap::new(),
            machine: machine.clone(),
            export: settings.export.clone(),
            nrt_push: settings.nrt_push.clone(),
            setting,
            traces: Vec::new(),
            resize_traces: Vec::new(),
            store,
            metrics,
            failure: None,
            broken: None,
            view: Arc::new(RwLock::new(View::default())),
        };
        let reclaimed = worker.reclaim();
        notes.extend(reclaimed.iter().map(|r| RestoreNote::Node(r.to_string())));
        let released = reclaimed
            .iter()
            .any(|r| matches!(r, Reclaim::Released { .. }));
        if released || restored.replayed > 0 || restored.moved > 0 || worker.store.records() > 0 {
            // Start with a fresh snapshot: recovery stays short and the
            // boot id is this boot's.
            match worker.store.compact(&worker.node) {
                Ok(()) => {
                    worker.node.take_changes();
                    worker.node.saved();
                }
                Err(e) => {
                    error!(error = %e, "cannot save the state after reclaiming pods and replaying releases; it stays as saved");
                    worker.failure = Some(e.to_string());
                    worker.rollback();
                }
            }
        }
        worker.node.settle_pool();
        worker.write_export();
        worker.rebuild_view(notes);
        let (jobs, rx) = mpsc::channel::<Job>();
        let view = Arc::clone(&worker.view);
        thread::Builder::new()
            .name("state-thread".to_owned())
            .spawn(move || worker.run(rx))
            .map_err(StartError::Thread)?;
        Ok((StateThread { jobs, view }, restored))
    }

    /// Submit a command and wait for its answer (sent after the state is saved).
    pub(crate) async fn submit(&self, cmd: Command) -> Result<Reply, CommandError> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send((cmd, tx))
            .map_err(|_| CommandError::Stopped)?;
        rx.await.unwrap_or(Err(CommandError::Stopped))
    }

    /// Read the state as of the last commit (keep `f` short: the state thread
    /// waits for it to bring the view up to date).
    pub(crate) fn read<R>(&self, f: impl FnOnce(&View) -> R) -> R {
        let guard = self.view.read().unwrap_or_else(|p| p.into_inner());
        f(&guard)
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
                    answers.push((reply, Err(CommandError::Broken(b.clone())), false));
                    continue;
                }
                let (result, changed) = self.apply(cmd);
                dirty |= changed;
                answers.push((reply, result, changed));
            }
            let mut committed = Vec::new();
            if dirty {
                let start = Instant::now();
                match self.store.commit(&mut self.node) {
                    Ok(changes) => {
                        self.metrics.checkpoint(start.elapsed().as_secs_f64());
                        committed = changes;
                        if self.broken.is_none() {
                            self.failure = None;
                        }
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        error!(error = %msg, "cannot save state; the batch's changes are undone");
                        self.failure = Some(msg.clone());
                        for (_, result, changed) in &mut answers {
                            if *changed {
                                *result = Err(CommandError::Unavailable(msg.clone()));
                            }
                        }
                        // The batch's resizes are undone with it.
                        for (_, r) in &mut self.resize_traces {
                            if r.done {
                                r.done = false;
                                r.after = None;
                                r.reason = Some("StateNotSaved".to_owned());
                                r.message = Some(msg.clone());
                            }
                        }
                        self.rollback();
                    }
                }
            }
            self.node.settle_pool();
            if !committed.is_empty() {
                self.write_export();
            }
            self.publish(committed);
            let pool = self.node.shared_pool();
            for (reply, mut result, _) in answers {
                // Earlier pods of the batch show the pool after the batch.
                if let Ok(Reply::Admitted(results)) = &mut result {
                    for r in results.iter_mut() {
                        if let Cow::Owned(now) = current_pool(r, &pool) {
                            *r = now;
                        }
                    }
                }
                // Containers' answers are computed from the committed state.
                if let Ok(Reply::Container(answer)) = &mut result {
                    self.finish(answer, &pool);
                }
                let _ = reply.send(result);
            }
        }
        info!("state thread stopped");
    }

    /// Reclaim the pods of owners that are gone, counting each release.
    fn reclaim(&mut self) -> Vec<Reclaim> {
        let reclaimed = self.node.reclaim();
        for r in &reclaimed {
            if let Reclaim::Released { owner, cause, .. } = r {
                self.metrics.reclaimed(owner.kind(), cause.as_str());
            }
        }
        reclaimed
    }

    /// Reconcile with providers built anew ([`topomgr_node::setup::reload::reload`])
    /// and save the whole state (the providers' states changed).
    fn reload(&mut self, p: Prepared) -> Result<Reply, CommandError> {
        let trigger = p.trigger;
        let machine = p.machine.clone();
        match topomgr_node::setup::reload::reload(
            &mut self.node,
            &self.state_dir,
            &p.machine,
            p.policy,
            p.scope,
            p.providers,
        ) {
            Ok(r) => {
                self.node.set_limits(p.limits);
                self.node
                    .admitter_mut()
                    .set_align_unknown_devices(p.align_unknown_devices);
                // Everything that shows the machine follows it: the
                // per-NUMA-node metric series here, the readers' view (and
                // so the NRI face's memory nodes) at `rebuild_view` below.
                self.metrics.machine(&machine);
                self.machine = machine;
                self.setting = Arc::new(topomgr_engine::explain::Setting::of(self.node.admitter()));
                // What was committed before is in the snapshot too.
                match self.store.compact(&self.node) {
                    Ok(()) => {
                        self.node.take_changes();
                        self.node.saved();
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        error!(error = %msg, "{trigger}: cannot save the reconciled state; going back to the saved state");
                        self.failure = Some(msg.clone());
                        self.rollback();
                        return Err(CommandError::Unavailable(msg));
                    }
                }
                for f in &r.failures {
                    warn!("{trigger}: {f}");
                }
                self.reload_notes = r.failures.iter().map(ToString::to_string).collect();
                let notes = notes_of(&r.restored, self.node.boot_id());
                info!(
                    trigger,
                    pods = r.restored.pods,
                    conflicts = self.node.conflicts().reports().len(),
                    moved = r.restored.moved,
                    failures = r.failures.len(),
                    "reconciled with the machine and config as they are now"
                );
                self.node.settle_pool();
                self.write_export();
                self.rebuild_view(notes);
                // Counted once health shows the outcome (see `reload::failed`).
                for _ in &r.failures {
                    self.metrics.reload_failed();
                }
                self.metrics.reloaded();
                Ok(Reply::Done)
            }
            Err(e) => {
                let msg = format!("{trigger}: the providers could not be reconciled ({e}); everything runs as before");
                error!("{msg}");
                self.reload_notes = vec![msg.clone()];
                if matches!(e, topomgr_node::setup::reload::ReloadError::Installed(_)) {
                    self.rollback();
                } else {
                    self.publish(Vec::new());
                }
                // Counted once health shows it (see `reload::failed`).
                self.metrics.reload_failed();
                Err(CommandError::Reload(msg))
            }
        }
    }

    /// Verify the attached cgroups; count and report what changed.
    fn check_cgroups(&mut self) {
        use topomgr_node::state::CgroupFinding;
        let found = self.node.check_cgroups();
        for f in &found {
            if matches!(f, CgroupFinding::Restored(_)) {
                self.metrics.cpuset_drifted();
            }
        }
        let notes: Vec<String> = found
            .iter()
            .filter(|f| !matches!(f, CgroupFinding::Restored(_)))
            .map(ToString::to_string)
            .collect();
        if notes != self.cgroup_notes {
            self.cgroup_notes = notes;
            self.publish(Vec::new());
        }
    }

    /// Bring memory back to what is on disk, and the readers' view with it.
    fn rollback(&mut self) {
        match self.store.reload(&mut self.node) {
            Ok(_) => info!("memory rolled back to the saved state"),
            Err(e) => {
                let msg = e.to_string();
                error!(error = %msg, "cannot roll back to the saved state; refusing changes");
                self.broken = Some(msg.clone());
                self.failure = Some(msg);
            }
        }
        let notes = std::mem::take(&mut self.restore_notes);
        self.rebuild_view(notes);
    }

    /// The restore's notes that still stand: those about the node, and
    /// the ledger's findings that still hold. A vanished resource holds
    /// while its pod is admitted; something held twice while the ledger
    /// still finds it (a release may end it or leave fewer holders, which
    /// is then shown as the ledger finds it now).
    fn standing_notes(&self) -> Vec<String> {
        let pods = self.node.pods();
        let mut now: Option<Vec<Finding>> = None;
        let mut shown = Vec::new();
        let mut notes = Vec::new();
        for note in &self.restore_notes {
            match note {
                RestoreNote::Node(text) => notes.push(text.clone()),
                RestoreNote::Ledger(
                    Finding::VanishedCpus { pod, .. }
                    | Finding::VanishedNumaNodes { pod, .. }
                    | Finding::VanishedDevices { pod, .. },
                ) if !pods.contains_key(pod) => {}
                RestoreNote::Ledger(conflict @ Finding::Conflict { .. }) => {
                    let now = now.get_or_insert_with(|| self.node.admitter().ledger().conflicts());
                    if now.contains(conflict) {
                        notes.push(conflict.to_string());
                        shown.push(conflict);
                    }
                }
                RestoreNote::Ledger(finding) => notes.push(finding.to_string()),
            }
        }
        for conflict in now.iter().flatten() {
            if !shown.contains(&conflict) {
                notes.push(conflict.to_string());
            }
        }
        let book = self.node.followed();
        notes.extend(
            self.away_resizes
                .iter()
                .filter(|(id, _)| {
                    book.get(id).map_or(pods.contains_key(*id), |c| {
                        pods.contains_key(c.pod_uid_in(id))
                    })
                })
                .map(|(_, note)| note.clone()),
        );
        notes
    }

    /// Container `id`, held, was listed at Synchronize with resources
    /// other than its books' (`now`): resized while topomgr was away (the
    /// runtime applied it; the kubelet reported it done). Resized in the
    /// books as an update would be; where topomgr cannot do it, the
    /// container keeps its CPUs and a health note says so and what to do.
    /// Whether the books changed.
    fn resized_while_away(&mut self, id: &str, now: PodView) -> bool {
        let name = now
            .containers
            .first()
            .map(|c| c.name.clone())
            .unwrap_or_default();
        self.resized_part_while_away(id, id, &name, now)
    }

    /// [`Worker::resized_while_away`] of container `id`, whose part is
    /// container `name` of pod `uid` (its own one-container pod, or the
    /// pod admitted whole that holds it), resized to `now` (that pod with
    /// the container's new resources).
    fn resized_part_while_away(&mut self, id: &str, uid: &str, name: &str, now: PodView) -> bool {
        self.trace_untraced(uid);
        let mut trace = topomgr_engine::admission::ResizeTrace::default();
        let outcome = self.node.resize_traced(uid, name, now, &mut trace);
        self.resize_traces.push((
            uid.to_owned(),
            topomgr_engine::explain::resize(&trace, outcome.as_ref()),
        ));
        match outcome {
            Ok(_) => {
                info!(container = %id, "resized while topomgr was away: resized in place now");
                self.metrics.resize("done");
                self.away_resizes.remove(id);
                true
            }
            Err(r) => {
                warn!(container = %id, reason = %r.reason, "resized while topomgr was away, and topomgr cannot do it: {}", r.message);
                self.metrics.resize("refused");
                self.away_resizes.insert(
                    id.to_owned(),
                    format!(
                        "container {id} was resized while topomgr was away and topomgr cannot do it ({}: {}): it keeps the CPUs and memory it held; resize its pod back (kubectl patch --subresource resize) or recreate it",
                        r.reason, r.message
                    ),
                );
                false
            }
        }
    }

    /// The decision trace of `result`.
    fn explain(
        &self,
        result: &AdmitResult,
        trace: &[topomgr_engine::admission::TraceStep],
    ) -> topomgr_node::api::Explain {
        let s = &self.setting;
        topomgr_engine::explain::explain(s.policy, s.scope, &s.nodes, result, trace)
    }

    /// Admit `pods` in order on the admitter alone (no cgroup, no record),
    /// then release the ones admitted here in reverse order: providers
    /// and ledger end as they began. A pod already admitted answers its
    /// recorded trace and is left alone.
    fn dry_run(&mut self, pods: &[PodView]) -> Vec<topomgr_node::api::Explain> {
        let mut out = Vec::with_capacity(pods.len());
        let mut undo = Vec::new();
        for pod in pods {
            if self.node.pods().contains_key(&pod.uid) {
                let view = self.view.read().unwrap_or_else(|p| p.into_inner());
                let known = view.explains.get(&pod.uid);
                drop(view);
                let stored = self.node.pods()[&pod.uid].clone();
                out.push(known.unwrap_or_else(|| self.explain(&stored, &[])));
                continue;
            }
            let mut trace = Vec::new();
            let r = self.node.admitter_mut().admit_traced(pod, &mut trace);
            if r.admitted {
                undo.push(pod.uid.clone());
            }
            out.push(self.explain(&r, &trace));
        }
        for uid in undo.iter().rev() {
            if let Err(e) = self.node.admitter_mut().release(uid) {
                warn!(pod = %uid, error = %e, "undoing a dry-run admission reported errors");
            }
        }
        out
    }

    /// The NodeResourceTopology object as of now.
    fn nrt(
        &mut self,
    ) -> Result<topomgr_node::nrt::NodeResourceTopology, topomgr_node::nrt::NrtError> {
        topomgr_node::nrt::of_admitter(
            &self.export.node_name,
            &self.machine,
            self.node.admitter_mut(),
        )
    }

    /// Rewrite the export file and hand the object to the push to the
    /// API server, when they are configured (a failure is logged: the
    /// change it follows is saved and stays).
    fn write_export(&mut self) {
        if self.export.file.is_none() && self.nrt_push.is_none() {
            return;
        }
        let object = match self.nrt() {
            Ok(o) => o,
            Err(e) => {
                error!(error = %e, "cannot build the NodeResourceTopology export");
                return;
            }
        };
        if let Some(push) = &self.nrt_push {
            push.publish(&object);
        }
        let Some(path) = self.export.file.clone() else {
            return;
        };
        match topomgr_node::nrt::write(&path, &object) {
            Ok(()) => {
                tracing::debug!(path = %path.display(), "NodeResourceTopology export written")
            }
            Err(e) => {
                error!(path = %path.display(), error = %e, "cannot update the NodeResourceTopology export file")
            }
        }
    }

    /// Apply one command: (answer, state changed).
    fn apply(&mut self, cmd: Command) -> (Result<Reply, CommandError>, bool) {
        match cmd {
            Command::Admit(pods) => {
                if let Some(conflict) = self.conflict(&pods) {
                    self.metrics.request_refused(UID_CONFLICT);
                    return (Err(CommandError::Conflict(conflict)), false);
                }
                let mut results = Vec::with_capacity(pods.len());
                let mut changed = false;
                let (policy, scope) = {
                    let a = self.node.admitter();
                    (a.policy().name(), a.scope())
                };
                for pod in &pods {
                    let known = self.node.pods().contains_key(&pod.uid);
                    let start = Instant::now();
                    let mut trace = Vec::new();
                    let r = self.node.admit_traced(pod, &mut trace);
                    self.admitted(&r, known, trace, (policy, scope), start);
                    changed |= r.admitted && !known;
                    results.push(r);
                }
                (Ok(Reply::Admitted(results)), changed)
            }
            Command::AdmitOwned {
                pod,
                owner,
                assigned,
            } => match self.admit_owned(pod, owner, Given::Every(assigned)) {
                Ok((r, changed)) => (Ok(Reply::Admitted(vec![r])), changed),
                Err(e) => (Err(e), false),
            },
            Command::Container(cmd) => match self.container(cmd) {
                Ok((answer, changed)) => (Ok(Reply::Container(Box::new(answer))), changed),
                Err((e, changed)) => (Err(e), changed),
            },
            Command::Reclaim => {
                let reclaimed = self.reclaim();
                let changed = reclaimed
                    .iter()
                    .any(|r| matches!(r, Reclaim::Released { .. }));
                (Ok(Reply::Reclaimed), changed)
            }
            Command::Release(uid) => match self.node.release(&uid) {
                Ok(r) => {
                    info!(pod = %uid, "pod released");
                    (Ok(Reply::Released(r)), true)
                }
                Err(AdmissionError::UnknownPod(u)) => (Err(CommandError::UnknownPod(u)), false),
                Err(e) => {
                    warn!(pod = %uid, error = %e, "pod released with provider errors");
                    (Err(CommandError::ReleaseErrors(e.to_string())), true)
                }
            },
            Command::Attach {
                uid,
                container,
                cgroup,
            } => match self.node.attach(&uid, &container, &cgroup) {
                Ok(a) => {
                    let pid = match self.node.records().owners.get(&uid) {
                        Some(topomgr_node::state::pod_owner::Owner::Container(c)) => c.pid,
                        _ => None,
                    };
                    if let Some(pid) = pid {
                        self.record_member(pid);
                    }
                    (Ok(Reply::Attached(a)), true)
                }
                Err(AttachError::UnknownPod(u)) => (Err(CommandError::UnknownPod(u)), false),
                Err(AttachError::UnknownContainer(e)) => {
                    (Err(CommandError::UnknownContainer(e)), false)
                }
                Err(e) => (Err(CommandError::Cgroup(e.to_string())), false),
            },
            Command::DryRun(pods) => match self.conflict(&pods) {
                Some(conflict) => (Err(CommandError::Conflict(conflict)), false),
                None => (Ok(Reply::DryRun(self.dry_run(&pods))), false),
            },
            Command::Reload(prepared) => {
                let taken = prepared.lock().unwrap_or_else(|p| p.into_inner()).take();
                match taken {
                    Some(p) => (self.reload(p), false),
                    None => (Ok(Reply::Done), false),
                }
            }
            Command::ReloadFailed(message) => {
                self.reload_notes = vec![message];
                self.publish(Vec::new());
                (Ok(Reply::Done), false)
            }
            Command::CheckCgroups => {
                self.check_cgroups();
                (Ok(Reply::Done), false)
            }
            Command::NodeResourceTopology => match self.nrt() {
                Ok(object) => (Ok(Reply::NodeResourceTopology(object)), false),
                Err(e) => (Err(CommandError::Export(e.to_string())), false),
            },
        }
    }

    /// Admit `pod` for `owner`, aligned with the devices its containers
    /// were given: [`Command::AdmitOwned`], [`ContainerCommand::Create`];
    /// (its result, whether the state changed).
    fn admit_owned(
        &mut self,
        pod: PodView,
        owner: OwnerSpec,
        assigned: Given,
    ) -> Result<(AdmitResult, bool), CommandError> {
        if let Some(conflict) = self.conflict(std::slice::from_ref(&pod)) {
            self.metrics.request_refused(UID_CONFLICT);
            return Err(CommandError::Conflict(conflict));
        }
        let known = self.node.pods().contains_key(&pod.uid);
        let (policy, scope) = {
            let a = self.node.admitter();
            (a.policy().name(), a.scope())
        };
        let owner = match topomgr_node::state::pod_owner::to_owner(
            &owner,
            self.node.boot_id(),
            topomgr_node::state::pod_owner::unix_now(),
        ) {
            Ok(o) => o,
            Err(e) => return Err(CommandError::BadOwner(e)),
        };
        let assigned = assigned.by_container(&pod);
        let start = Instant::now();
        let mut trace = Vec::new();
        let r = match self.node.admit_owned(&pod, owner, &assigned, &mut trace) {
            Ok(r) => r,
            Err(e) => {
                self.metrics.request_refused(UID_CONFLICT);
                return Err(CommandError::OwnerConflict(e));
            }
        };
        self.admitted(&r, known, trace, (policy, scope), start);
        let changed = r.admitted && !known;
        Ok((r, changed))
    }

    /// The machine's NUMA nodes (the memory nodes of a container no
    /// provider gave any).
    fn nodes(&self) -> NumaMask {
        self.machine
            .numa_ids()
            .into_iter()
            .fold(NumaMask::EMPTY, |m, n| m.with(n))
    }

    /// Release container `id`'s pod when one is admitted; whether one was.
    fn release_container(&mut self, id: &str) -> bool {
        match self.node.release(id) {
            Ok(_) => {
                info!(container = id, "container released");
                true
            }
            Err(AdmissionError::UnknownPod(_)) => false,
            Err(e) => {
                warn!(container = id, error = %e, "container released with provider errors");
                true
            }
        }
    }

    /// Stop following container `id` and release its pod; (whether it was
    /// followed, whether the state changed).
    fn forget_container(&mut self, id: &str) -> (bool, bool) {
        let was = self.node.followed_mut().1.unfollow(id).is_some();
        let changed = was && self.release_container(id);
        (was, changed)
    }

    /// Records the init process `pid` of a container this daemon placed as
    /// an owner of the node for its state directory (a member of the node
    /// lock, [`topomgr_node::locks::node_lock`]): should the daemon stop,
    /// another state directory cannot take the node while the container
    /// keeps its CPUs (issue 37 item 3). Dead members are dropped at the
    /// next look at the lock.
    fn record_member(&self, pid: u32) {
        let Some(socket) = &self.members else {
            return;
        };
        let Some(me) = topomgr_node::locks::lock_holder::Holder::process(
            pid,
            topomgr_node::locks::lock_holder::Role::Container,
            &self.state_dir,
            Some(socket),
        ) else {
            return;
        };
        if let Err(e) = topomgr_node::locks::node_lock::NodeLock::join(&self.cgroup_root, &me) {
            warn!(pid, error = %e, "cannot record a container as an owner of the node");
        }
    }

    /// Container `id` started, followed in the shared pool because it
    /// could not be admitted (at a Synchronize): where a stale instance
    /// of it holds CPUs ([`stale_siblings`]), release that one and admit
    /// `id` (the follower moves both). Whether the state changed.
    fn take_over_stale(
        &mut self,
        id: &str,
        pod: PodView,
        owner: OwnerSpec,
        assigned: AssignedDevicesRequest,
    ) -> bool {
        let pods = self.node.pods();
        let book = self.node.followed();
        let Some(c) = book.get(id) else {
            return false;
        };
        // A container of a pod admitted whole has its part of that pod.
        if pods.contains_key(id) || c.held_by.is_some() {
            return false;
        }
        let stale = stale_siblings(book.iter(), id, c, pods);
        if stale.is_empty() {
            return false;
        }
        let who = c.who.clone();
        let mut changed = false;
        for s in &stale {
            info!(container = %who, stale = %s, "a started container takes over from an instance that never started");
            changed |= self.release_container(s);
        }
        match self.admit_owned(pod, owner, Given::Every(assigned)) {
            Ok((r, admitted)) => {
                if !r.admitted {
                    warn!(container = %who, reason = ?r.reason, message = ?r.message, "still cannot be admitted after its stale instance released its CPUs; it runs in the shared pool");
                }
                changed || admitted
            }
            Err(e) => {
                warn!(container = %who, error = %e, "cannot admit a started container in place of its stale instance; it runs in the shared pool");
                changed
            }
        }
    }

    /// Apply one [`ContainerCommand`] (what is answered from the committed
    /// state is left to [`Worker::finish`]): (answer, state changed), or
    /// the error and whether the state changed before it.
    fn container(
        &mut self,
        cmd: ContainerCommand,
    ) -> Result<(ContainerAnswer, bool), (CommandError, bool)> {
        let mut answer = ContainerAnswer::default();
        let mut changed = false;
        match cmd {
            ContainerCommand::Create(new) => {
                // Queued past its deadline: the runtime has an error answer
                // and creates nothing placed, so nothing is done for it.
                if past(new.deadline) {
                    info!(container = %new.follow.who, id = %new.id, "past the runtime's request deadline before its admission: not admitted");
                    answer.late = Some(Late::BeforeAdmission);
                    answer.followed = self.node.followed().len();
                    return Ok((answer, false));
                }
                // nri-plugins releases a stale instance at create as well
                // (containers/nri-plugins, resmgr's CreateContainer).
                let stale = self.node.followed().stale_instances(
                    &new.follow.sandbox,
                    &new.follow.name,
                    &new.id,
                );
                for old in stale {
                    info!(container = %new.follow.who, stale = %old, id = %new.id, "an older instance of the container is still held: released at create");
                    changed |= self.forget_container(&old).1;
                    answer.released.push(old);
                }
                let new = *new;
                let uid = new.follow.pod_uid_in(&new.id).to_owned();
                let known = self.node.pods().contains_key(&uid);
                let (mut r, admitted) = match (&new.follow.held_by, self.node.pods().get(&uid)) {
                    // Pod scope: its pod was admitted whole at an earlier
                    // container; nothing is decided for this one.
                    (Some(_), Some(held)) => (held.clone(), false),
                    // The face saw its pod held, and the pod was released
                    // since (its sandbox stopped): nothing to place it in.
                    (Some(_), None) if new.pod.uid != uid => (
                        AdmitResult {
                            admitted: false,
                            reason: Some(
                                topomgr_engine::admission::UNEXPECTED_ADMISSION_ERROR.to_owned(),
                            ),
                            message: Some(format!(
                                "container {}: its pod, admitted whole, was released (its sandbox {uid} stopped)",
                                new.follow.who
                            )),
                            containers: Vec::new(),
                            pod: new.pod,
                        },
                        false,
                    ),
                    _ => self
                        .admit_owned(new.pod, new.owner, new.assigned)
                        .map_err(|e| (e, changed))?,
                };
                changed |= admitted;
                if r.admitted && !known && self.empties_the_pool(&new.id, &new.follow) {
                    self.release_container(&uid);
                    info!(container = %new.follow.who, "refused: it would leave no CPU in the shared pool");
                    r = AdmitResult {
                        admitted: false,
                        reason: Some(topomgr_engine::admission::UNEXPECTED_ADMISSION_ERROR.to_owned()),
                        message: Some(format!(
                            "container {} would leave no CPU in the shared pool, which the containers of the shared pool need; give the CPU provider reserved CPUs (reserved_cpus)",
                            new.follow.who
                        )),
                        containers: Vec::new(),
                        ..r
                    };
                }
                if r.admitted && past(new.deadline) {
                    // Admitted too late: the runtime already has an error
                    // answer, so nothing may stay held for the container
                    // (a pod admitted whole at an earlier container stays).
                    self.node.followed_mut().1.unfollow(&new.id);
                    if new.follow.held_by.is_none() || !known {
                        changed |= self.release_container(&uid);
                    }
                    info!(container = %new.follow.who, id = %new.id, "admitted past the runtime's request deadline: released again");
                    answer.late = Some(Late::AfterAdmission);
                } else if r.admitted {
                    answer.finish = Finish::Create(new.id, Box::new(new.follow));
                }
                answer.admission = Some(r);
            }
            ContainerCommand::Pinned { id, pinned } => {
                let book = self.node.followed_mut().1;
                if book.pin(&id, pinned) {
                    answer.pinned = Some(book.pinned());
                }
            }
            ContainerCommand::Created {
                id,
                cpuset,
                pid,
                started,
            } => {
                let holds = self
                    .node
                    .followed()
                    .get(&id)
                    .is_some_and(|c| self.node.pods().contains_key(c.pod_uid_in(&id)));
                if pid != 0 && holds {
                    self.record_member(pid);
                }
                if let Some(admit) = started {
                    self.node.followed_mut().1.started(&id);
                    if let Some(admit) = admit {
                        let (pod, owner, assigned) = *admit;
                        changed |= self.take_over_stale(&id, pod, owner, assigned);
                    }
                }
                if let (Some(now), Some(c)) = (cpuset, self.node.followed().get(&id)) {
                    let pool = self.node.shared_pool();
                    let want = c.desired(self.node.pods(), &id, &pool, self.nodes());
                    answer.again = want.is_some_and(|w| w != now);
                    self.node.followed_mut().1.runtime_has(&id, Some(now));
                }
            }
            ContainerCommand::Update { id, resized } => {
                // Pod scope: the container's part of the pod admitted whole
                // is resized (its name in that pod).
                let held_by = self
                    .node
                    .followed()
                    .get(&id)
                    .and_then(|c| c.held_by.clone());
                let uid = held_by.clone().unwrap_or_else(|| id.clone());
                let asked = resized.and_then(|new| {
                    let name = new.containers.first()?.name.clone();
                    let held = self.node.pods().get(&uid)?;
                    match held_by {
                        Some(_) => whole_resized(held, &new).map(|pod| (name, pod)),
                        None => resizes(held, &new).then_some((name, *new)),
                    }
                });
                match asked {
                    None => answer.finish = Finish::Update(id),
                    Some((name, new)) => {
                        self.trace_untraced(&uid);
                        let mut trace = topomgr_engine::admission::ResizeTrace::default();
                        let outcome = self.node.resize_traced(&uid, &name, new, &mut trace);
                        self.resize_traces.push((
                            uid.clone(),
                            topomgr_engine::explain::resize(&trace, outcome.as_ref()),
                        ));
                        match outcome {
                            Ok(r) => {
                                info!(container = %id, cpus = %r.containers.first().map(|c| c.allocation.cpus.to_string()).unwrap_or_default(), "resized in place");
                                self.metrics.resize("done");
                                changed = true;
                                answer.finish = Finish::Update(id);
                            }
                            Err(r) => {
                                self.metrics.resize("refused");
                                answer.refusal =
                                    Some(format!("topomgr: {}: {}", r.reason, r.message));
                            }
                        }
                    }
                }
            }
            ContainerCommand::Stop { id } => {
                let (was, released) = self.forget_container(&id);
                changed = released;
                if was {
                    answer.released.push(id);
                }
                answer.finish = Finish::Updates;
            }
            ContainerCommand::Remove { id } => {
                let (was, released) = self.forget_container(&id);
                changed = released;
                let book = self.node.followed_mut().1;
                if book.unpin(&id) {
                    answer.pinned = Some(book.pinned());
                }
                if was {
                    answer.released.push(id);
                }
            }
            ContainerCommand::RemoveSandbox { sandbox } => {
                for id in self.node.followed().of_sandbox(&sandbox) {
                    changed |= self.forget_container(&id).1;
                    answer.released.push(id);
                }
                if self.is_sandbox_pod(&sandbox) {
                    info!(sandbox = %sandbox, "pod sandbox stopped: the pod admitted whole is released");
                    changed |= self.release_container(&sandbox);
                    // The shared containers get its CPUs from the follower.
                    answer.again = true;
                }
                let book = self.node.followed_mut().1;
                if book.unpin_sandbox(&sandbox) {
                    answer.pinned = Some(book.pinned());
                }
            }
            ContainerCommand::Synchronize {
                existing,
                sandboxes,
                listed,
            } => {
                let (released, kept) = self.reconcile_containers(ContainerRuntime::Nri, &existing);
                let (gone, _) = self.reconcile_containers(ContainerRuntime::NriSandbox, &sandboxes);
                changed = !released.is_empty() || !gone.is_empty();
                answer.released = released;
                // Pod scope: each pod admitted whole at most once here (a
                // refusal answers each of its containers).
                let mut whole: BTreeMap<String, Result<AdmitResult, String>> = BTreeMap::new();
                let mut table = BTreeMap::new();
                let mut pinned = BTreeMap::new();
                let all: BTreeMap<String, FollowedContainer> = listed
                    .iter()
                    .map(|l| (l.id.clone(), l.follow.clone()))
                    .collect();
                for l in listed {
                    if let Some(uid) = l.follow.held_by.clone() {
                        // Held already, its part resized while away: the
                        // container as listed (its own view) says so.
                        let away = match (self.node.pods().get(&uid), &l.admit) {
                            (Some(held), Some((own, _, _))) if own.uid != uid => {
                                own.containers.first().and_then(|c| {
                                    let old = container_named(&held.pod, &c.name)?;
                                    let part = resized_part(old, own.clone())?;
                                    with_part(&held.pod, part.containers.first()?)
                                })
                            }
                            _ => None,
                        };
                        match away {
                            Some(pod) => {
                                let name = l.follow.name.clone();
                                changed |= self.resized_part_while_away(&l.id, &uid, &name, pod);
                            }
                            None => {
                                self.away_resizes.remove(&l.id);
                            }
                        }
                        if !self.node.pods().contains_key(&uid) {
                            if let Some((pod, owner, assigned)) =
                                l.admit.filter(|(pod, _, _)| pod.uid == uid)
                            {
                                let outcome = match whole.get(&uid) {
                                    Some(o) => o.clone(),
                                    None => {
                                        let o = match self.admit_owned(pod, owner, assigned) {
                                            Ok((r, admitted)) => {
                                                changed |= admitted;
                                                Ok(r)
                                            }
                                            Err(e) => Err(e.to_string()),
                                        };
                                        whole.insert(uid.clone(), o.clone());
                                        o
                                    }
                                };
                                answer.admitted.push((l.id.clone(), outcome));
                            }
                        }
                        table.insert(l.id, l.follow);
                        continue;
                    }
                    if kept.contains(&l.id) {
                        let away = l.admit.and_then(|(pod, _, _)| {
                            resized_requests(self.node.pods().get(&l.id)?, pod)
                        });
                        match away {
                            Some(pod) => changed |= self.resized_while_away(&l.id, pod),
                            // As the books hold it (again): nothing to say.
                            None => {
                                self.away_resizes.remove(&l.id);
                            }
                        }
                        table.insert(l.id, l.follow);
                        continue;
                    }
                    if let Some(p) = l.pinned {
                        pinned.insert(l.id.clone(), p);
                    }
                    let Some((pod, owner, assigned)) = l.admit else {
                        continue;
                    };
                    let retry = l
                        .follow
                        .started
                        .then(|| (pod.clone(), owner.clone(), assigned.clone()));
                    let mut outcome = self.admit_owned(pod, owner, assigned);
                    // A running container refused while a stale instance
                    // of it (another sandbox, never started) holds its
                    // CPUs: the stale one gives them up.
                    if let (Some((pod, owner, assigned)), Ok((r, _))) = (retry, &outcome) {
                        let stale = stale_siblings(&all, &l.id, &l.follow, self.node.pods());
                        if !r.admitted && !stale.is_empty() {
                            for s in &stale {
                                info!(container = %l.follow.who, stale = %s, "a running container takes over from an instance that never started");
                                changed |= self.release_container(s);
                            }
                            outcome = self.admit_owned(pod, owner, assigned);
                        }
                    }
                    let outcome = match outcome {
                        Ok((r, admitted)) => {
                            changed |= admitted;
                            Ok(r)
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    answer.admitted.push((l.id.clone(), outcome));
                    table.insert(l.id, l.follow);
                }
                let book = self.node.followed_mut().1;
                book.replace_pinned(pinned);
                answer.pinned = Some(book.pinned());
                answer.finish = Finish::Synchronize(table);
            }
            ContainerCommand::FollowerRound => answer.finish = Finish::FollowerRound,
            ContainerCommand::FollowerSent { failed } => {
                answer.again = self.node.followed_mut().1.sent(&failed);
            }
            ContainerCommand::CheckCpusets => answer.repairs = self.check_cpusets(),
            #[cfg(test)]
            ContainerCommand::Book => {
                let pods = self.node.pods();
                answer.book = self
                    .node
                    .followed()
                    .iter()
                    .map(|(id, c)| (id.clone(), c.clone(), c.is_exclusive(pods, id)))
                    .collect();
            }
        }
        answer.followed = self.node.followed().len();
        if answer.pinned.is_some() {
            for e in self.node.exclude_pinned_cpus() {
                warn!("{e}");
            }
        }
        Ok((answer, changed))
    }

    /// Whether container `id` (kept as `c`), just admitted, leaves the
    /// shared pool empty while it, another container of its pod admitted
    /// whole, or another container followed needs it.
    fn empties_the_pool(&self, id: &str, c: &FollowedContainer) -> bool {
        let pods = self.node.pods();
        let pod_shares = c.held_by.as_ref().is_some_and(|uid| {
            pods.get(uid).is_some_and(|r| {
                r.containers
                    .iter()
                    .any(|x| topomgr_cgroup::pool::is_shared(&x.allocation))
            })
        });
        let needed =
            !c.is_exclusive(pods, id) || pod_shares || self.node.followed().any_shared(pods, id);
        needed && self.node.shared_pool().is_empty()
    }

    /// Whether `sandbox` is the id of a pod sandbox whose pod is admitted
    /// whole (pod scope under NRI).
    fn is_sandbox_pod(&self, sandbox: &str) -> bool {
        matches!(
            self.node.records().owners.get(sandbox),
            Some(Owner::Container(c)) if c.runtime == ContainerRuntime::NriSandbox && c.id == sandbox
        )
    }

    /// Read back the cgroups of the containers followed whose cpuset the
    /// runtime was told (and no update is on its way); each one found
    /// otherwise is marked as the runtime has it, counted and answered.
    fn check_cpusets(&mut self) -> Vec<Repair> {
        let pool = self.node.shared_pool();
        let nodes = self.nodes();
        if self.node.followed().in_flight() {
            return Vec::new();
        }
        let mut found = Vec::new();
        let pods = self.node.pods();
        for (id, c) in self.node.followed().iter() {
            let (Some(cgroup), Some(told)) = (&c.cgroup, &c.told) else {
                continue;
            };
            let Some(want) = c.desired(pods, id, &pool, nodes) else {
                continue;
            };
            if *told != want {
                continue; // an update is due anyway
            }
            match followed::read_cpuset(&self.cgroup_root, cgroup) {
                Ok(Some(now)) if now != want => found.push(Repair {
                    id: id.clone(),
                    who: c.who.clone(),
                    found: now,
                    want,
                }),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(container = %c.who, error = %e, "cannot read the container's cpuset")
                }
            }
        }
        let book = self.node.followed_mut().1;
        for r in &found {
            warn!(container = %r.who, id = %r.id, found = %r.found.cpus, want = %r.want.cpus, "a container's cgroup does not have the cpuset it was given; sent again");
            book.runtime_has(&r.id, Some(r.found.clone()));
            self.metrics.nri_cpuset_repaired();
        }
        found
    }

    /// Complete a container's answer from the committed state (`pool`: the
    /// shared pool after the batch).
    fn finish(&mut self, answer: &mut ContainerAnswer, pool: &CpuSet) {
        let nodes = self.nodes();
        let finish = std::mem::take(&mut answer.finish);
        let (pods, book) = self.node.followed_mut();
        match finish {
            Finish::Nothing => {}
            Finish::Create(id, follow) => {
                if pods.contains_key(follow.pod_uid_in(&id)) {
                    book.follow(&id, *follow);
                    answer.cpuset = book.tell(pods, &id, pool, nodes);
                    answer.updates = book.updates(pods, pool, nodes, Some(&id));
                }
                if let Some(r) = &mut answer.admission {
                    if let Cow::Owned(now) = current_pool(r, pool) {
                        *r = now;
                    }
                }
            }
            Finish::Update(id) => {
                answer.cpuset = book.tell(pods, &id, pool, nodes);
                if answer.cpuset.is_some() {
                    answer.updates = book.updates(pods, pool, nodes, Some(&id));
                }
            }
            Finish::Updates => answer.updates = book.updates(pods, pool, nodes, None),
            Finish::Synchronize(table) => {
                book.replace(table);
                answer.updates = book.updates(pods, pool, nodes, None);
            }
            Finish::FollowerRound => {
                if !book.in_flight() {
                    answer.updates = book.updates(pods, pool, nodes, None);
                    if !answer.updates.is_empty() {
                        book.sending();
                    }
                }
            }
        }
        answer.followed = book.len();
    }

    /// After one admission decided since `start` (`known`: the pod was held
    /// already, an idempotent retry): its decision trace kept for
    /// `explain`, the metrics, and the ledger violations counted.
    fn admitted(
        &mut self,
        r: &AdmitResult,
        known: bool,
        trace: Vec<topomgr_engine::admission::TraceStep>,
        (policy, scope): (
            topomgr_engine::policy::PolicyName,
            topomgr_engine::policy::Scope,
        ),
        start: Instant,
    ) {
        if !known {
            self.traces.push(topomgr_engine::explain::Traced {
                setting: Arc::clone(&self.setting),
                result: r.clone(),
                trace,
            });
        }
        self.metrics
            .admission(r, policy, scope, start.elapsed(), known);
        for provider in self.node.admitter_mut().take_violations() {
            self.metrics.ledger_violation(&provider);
        }
    }

    /// Pod `uid` is admitted without a kept trace (before this daemon
    /// started): keep one without decisions (no steps, as a what-if answers
    /// it), so that its resizes can be shown.
    fn trace_untraced(&mut self, uid: &str) {
        if self.traces.iter().any(|t| t.result.pod.uid == uid) {
            return;
        }
        let kept = self
            .view
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .explains
            .has_admission(uid);
        if let (false, Some(held)) = (kept, self.node.pods().get(uid)) {
            self.traces.push(topomgr_engine::explain::Traced {
                setting: Arc::clone(&self.setting),
                result: held.clone(),
                trace: Vec::new(),
            });
        }
    }

    /// Release the pods owned by containers of `runtime` that `existing`
    /// lacks; (released container ids, kept container ids).
    fn reconcile_containers(
        &mut self,
        runtime: ContainerRuntime,
        existing: &BTreeSet<String>,
    ) -> (Vec<String>, BTreeSet<String>) {
        let owned: Vec<(String, String)> = self
            .node
            .records()
            .owners
            .iter()
            .filter_map(|(uid, owner)| match owner {
                Owner::Container(c) if c.runtime == runtime => Some((uid.clone(), c.id.clone())),
                _ => None,
            })
            .collect();
        let (mut released, mut kept) = (Vec::new(), BTreeSet::new());
        for (uid, id) in owned {
            if existing.contains(&id) {
                if self.node.pods().contains_key(&uid) {
                    kept.insert(id);
                }
                continue;
            }
            match self.node.release(&uid) {
                Ok(_) => {
                    info!(pod = %uid, container = %id, runtime = runtime.as_str(), "the runtime no longer has this container; its pod is released")
                }
                Err(AdmissionError::UnknownPod(_)) => {}
                Err(e) => {
                    warn!(pod = %uid, container = %id, error = %e, "a container's pod released with provider errors")
                }
            }
            released.push(id);
        }
        (released, kept)
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

    /// What the providers' inventories make allocatable, for the
    /// PodResources API; a provider that cannot answer adds nothing (it is
    /// logged; the NodeResourceTopology export reports the same failure).
    fn allocatable(&mut self) -> crate::podresources::Allocatable {
        let inventories: Vec<topomgr_sdk::Inventory> = self
            .node
            .admitter_mut()
            .providers_mut()
            .iter_mut()
            .filter_map(|p| match p.inventory() {
                Ok(inv) => Some(inv),
                Err(e) => {
                    warn!(provider = p.name(), error = %e, "no inventory: the PodResources API lists none of its allocatable resources");
                    None
                }
            })
            .collect();
        crate::podresources::Allocatable::of(&inventories)
    }

    /// The readers' view from scratch (at start and after a rollback).
    fn rebuild_view(&mut self, notes: Vec<RestoreNote>) {
        self.restore_notes = notes;
        let snap = View {
            pods: self
                .node
                .pods()
                .iter()
                .map(|(uid, r)| (uid.clone(), Arc::new(r.clone())))
                .collect(),
            attachments: self.node.records().attachments.clone(),
            owners: self.node.records().owners.clone(),
            machine: Arc::new(self.machine.clone()),
            podresources: Arc::new(self.allocatable()),
            // Traces outlive a rollback; those of pods it undid are dropped
            // at the next publish.
            explains: std::mem::take(
                &mut self
                    .view
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .explains,
            ),
            ..View::default()
        };
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = snap;
        self.publish(Vec::new());
    }

    /// Bring the readers' view up to date with what was committed.
    fn publish(&mut self, committed: Vec<Change>) {
        let ledger = self.node.admitter().ledger();
        let exclusive = ledger.exclusive_cpus().clone();
        let shared = self.node.shared_pool();
        self.metrics
            .cpus(&exclusive, shared.len(), self.node.pods().len());
        let conflicts = self.node.conflicts();
        self.metrics.conflicts(&conflicts.counts());
        let conflicts = conflicts.reports();
        let restore_notes = self.standing_notes();
        let mut view = self.view.write().unwrap_or_else(|p| p.into_inner());
        let view = &mut *view;
        for change in committed {
            change.apply(
                &mut view.pods,
                &mut view.attachments,
                Some(&mut view.owners),
                Arc::from,
            );
        }
        for traced in self.traces.drain(..) {
            view.explains.record(traced);
        }
        for (uid, resize) in self.resize_traces.drain(..) {
            view.explains.record_resize(&uid, resize);
        }
        let pods = &view.pods;
        view.explains.retain_admitted(|uid| pods.contains_key(uid));
        view.exclusive_cpus = exclusive;
        view.shared_pool = shared;
        view.failure = self.failure.clone();
        view.conflicts = conflicts;
        view.restore_notes = restore_notes;
        view.reload_notes = self
            .reload_notes
            .iter()
            .chain(&self.cgroup_notes)
            .cloned()
            .collect();
    }
}
