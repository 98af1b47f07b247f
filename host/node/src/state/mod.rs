//! The node state: [`NodeState`], the admitted pods of this node with their
//! cgroups and owners — the one service through which the daemon and the
//! one-shot commands (`run`, `admit --state-dir`, `release --state-dir`)
//! change state and apply it to cgroups.
//!
//! This room owns `NodeState` and every `impl` of it: its fields and
//! constructors here, admission and release in `admission` (private
//! module; its types are re-exported here), attachment, the shared pool
//! and drift in `attachment`, the release of pods whose owner is gone in
//! `reclaim`; beside it the owners ([`pod_owner`]), the containers a
//! runtime face follows ([`followed`]), the providers' saved states
//! (`provider_states`) and what their restores reported
//! ([`restore_reports`]).
//!
//! May not touch: the state directory's files (`crate::persist`'s) or the
//! locks (`crate::locks`), the configuration or plugin loading
//! (`crate::setup` builds a `NodeState` through [`NodeState::new`]).
//! Cgroups are written only here (the architecture test's
//! `cpusets_are_written_only_by_the_node_state`).
//!
//! It owns the [`Admitter`] (providers, pod table, [`topomgr_engine::ledger`]) and
//! the host's [`Records`]: which cgroup each attached container has, and
//! which process owns each pod that `topomgr run` admitted.
//!
//! # Applying to cgroups
//!
//! One rule gives a container its cpuset ([`topomgr_cgroup::pool::container_cpuset`]):
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
//! records its [`Owner`] ([`crate::state::pod_owner`]): a process (`topomgr run`,
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

use topomgr_sdk::CpuSet;

use crate::api::Attachments;
use crate::state::followed::Followed;
use crate::state::pod_owner::Owner;
use crate::state::provider_states::ProviderStates;
use crate::state::restore_reports::Conflicts;
use topomgr_cgroup::{CgroupError, CgroupManager};
use topomgr_engine::admission::{AdmitResult, Admitter};

mod admission;
mod attachment;
pub mod followed;
pub mod limits;
pub mod pod_owner;
pub(crate) mod provider_states;
mod reclaim;
pub mod restore_reports;

pub use admission::OwnerConflict;
pub(crate) use attachment::PoolMode;
pub use attachment::{AttachError, CgroupFinding, Drift, UnknownContainer};
pub use reclaim::{Reclaim, ReclaimCause};

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
/// what the journal records ([`crate::persist::store`]) and the daemon's readers
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
    /// The pinned CPUs last sent to the providers (`None`: to send again,
    /// the providers are new).
    excluded: Option<CpuSet>,
    /// How many pods and containers may be held ([`NodeState::with_limits`]).
    limits: limits::Limits,
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
            excluded: None,
            limits: limits::Limits::default(),
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

    /// Hold at most what `limits` allows (config `[limits]`; default
    /// [`limits::Limits::default`]): an admission past them is refused and
    /// changes nothing. Pods already held are kept whatever the limits.
    pub fn with_limits(mut self, limits: limits::Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Change the limits (a reload of the config).
    pub fn set_limits(&mut self, limits: limits::Limits) {
        self.limits = limits;
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
    /// back (see [`crate::state::restore_reports`]); a pod's end at its release.
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
        self.excluded = None;
        std::mem::replace(&mut self.admitter, admitter)
    }

    /// Tells every provider the CPUs that containers left alone as pinned
    /// run on ([`Followed::pinned_cpus`]), when they changed since the last
    /// call or the providers are new: none of them is handed out
    /// exclusively while those containers run. What went wrong, per
    /// provider (the exclusion stands where it was taken).
    pub fn exclude_pinned_cpus(&mut self) -> Vec<String> {
        let cpus = self.followed.pinned_cpus();
        if self.excluded.as_ref() == Some(&cpus) {
            return Vec::new();
        }
        let mut errors = Vec::new();
        let mut taken = false;
        for p in self.admitter.providers_mut() {
            match p.exclude_cpus(&cpus) {
                Ok(t) => taken |= t,
                Err(e) => errors.push(format!(
                    "provider {:?} cannot keep CPUs {cpus} of pinned containers out of exclusive use: {}: {}",
                    p.name(),
                    e.reason,
                    e.message
                )),
            }
        }
        if !cpus.is_empty() && !taken && errors.is_empty() {
            tracing::warn!(cpus = %cpus, "no provider keeps the CPUs of pinned containers out of exclusive use (none hands out CPUs, or it was built before SDK 0.3's exclude_cpus)");
        }
        if errors.is_empty() {
            self.excluded = Some(cpus);
        }
        errors
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
}

#[cfg(test)]
mod tests {
    use super::pod_owner::ContainerRuntime;
    use super::reclaim::ATTACH_TIMEOUT;
    use super::*;
    use topomgr_engine::admission::{AssignedDevices, ContainerResult};
    use topomgr_sdk::{Allocation, PodView, QosClass, TopologyHint};

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

    /// Issue 37 item 8: past `[limits]` an admission is refused naming the
    /// limit and its key, and changes nothing; a retry of a held pod is
    /// still answered; a release makes room again.
    #[test]
    fn admissions_past_the_limits_are_refused_and_change_nothing() {
        let (node, root) = node("limits");
        let mut node = node.with_limits(limits::Limits {
            max_pods: 2,
            max_containers: 3,
            max_containers_per_pod: 2,
        });
        assert!(node.admit(&one_container("a")).admitted);
        assert!(node.admit(&one_container("b")).admitted);
        node.take_changes();
        let r = node.admit(&one_container("c"));
        assert!(!r.admitted);
        assert_eq!(r.reason.as_deref(), Some("OutOfpods"));
        assert!(
            r.message.as_deref().unwrap().contains("[limits] max_pods"),
            "{r:?}"
        );
        assert!(node.take_changes().is_empty(), "nothing changed");
        assert_eq!(node.pods().len(), 2);
        // A retry of a held pod is answered as before.
        assert!(node.admit(&one_container("a")).admitted);
        // Owned admissions (the runtime faces, `run`) are refused alike.
        let owner = Owner::Process(pod_owner::ProcessOwner {
            pid: 1,
            start_time: 1,
            boot_id: "b".to_owned(),
        });
        let r = node
            .admit_owned(
                &one_container("d"),
                owner,
                &AssignedDevices::new(),
                &mut Vec::new(),
            )
            .unwrap();
        assert_eq!(r.reason.as_deref(), Some("OutOfpods"));
        assert!(!node.records().owners.contains_key("d"));
        assert!(node.take_changes().is_empty());
        // Too many containers for one pod, and for the node.
        let three = PodView::new("e", "e", "t", QosClass::BestEffort).with_containers(
            ["x", "y", "z"]
                .iter()
                .map(|n| topomgr_sdk::ContainerView::new(*n))
                .collect(),
        );
        node.release("a").unwrap();
        node.take_changes();
        let r = node.admit(&three);
        assert_eq!(r.reason.as_deref(), Some("TooManyContainers"));
        assert!(r
            .message
            .as_deref()
            .unwrap()
            .contains("max_containers_per_pod"));
        let two = PodView::new("f", "f", "t", QosClass::BestEffort).with_containers(
            ["x", "y"]
                .iter()
                .map(|n| topomgr_sdk::ContainerView::new(*n))
                .collect(),
        );
        assert!(node.admit(&two).admitted, "1 + 2 containers fit in 3");
        node.release("f").unwrap();
        node.admit(&one_container("g"));
        let r = node.admit(&two);
        assert_eq!(r.reason.as_deref(), Some("OutOfpods"));
        node.set_limits(limits::Limits {
            max_pods: 3,
            max_containers: 3,
            max_containers_per_pod: 2,
        });
        let r = node.admit(&two);
        assert_eq!(r.reason.as_deref(), Some("OutOfcontainers"));
        assert!(r
            .message
            .as_deref()
            .unwrap()
            .contains("[limits] max_containers;"));
        std::fs::remove_dir_all(root).unwrap();
    }

    /// A cgroup directory with `pids` in its `cgroup.procs`.
    fn cgroup(root: &Path, path: &str, pids: &str) {
        std::fs::create_dir_all(root.join(path)).unwrap();
        std::fs::write(root.join(path).join("cgroup.procs"), pids).unwrap();
    }

    fn container_owner(id: &str, process: Option<(u32, u64)>, cgroup: Option<&str>) -> Owner {
        Owner::Container(crate::state::pod_owner::ContainerOwner {
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
        let start = crate::state::pod_owner::start_time(pid).unwrap_or(1);
        c.wait().unwrap();
        (pid, start)
    }

    #[test]
    fn owners_that_are_gone_are_reclaimed_by_the_rule_of_their_kind() {
        let (mut n, root) = node("reclaim");
        let me = crate::state::pod_owner::current_process("b").unwrap();
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
            Owner::Process(crate::state::pod_owner::ProcessOwner {
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
        let me = crate::state::pod_owner::current("b").unwrap();
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
