//! The kubelet CPU Manager's static policy: exclusive CPUs for Guaranteed
//! containers with integer CPU requests, the shared pool (the "default
//! set") for everything else, reserved CPUs never handed out exclusively,
//! init-container CPU reuse, and hints for container and pod scope.

use std::collections::BTreeMap;

use topomgr_sdk::{ContainerView, HintSet, NumaMask, PodView, QosClass};

use crate::assignment::{take_distributed, take_packed, Distribution, SortingStrategy};
use crate::error::CpuError;
use crate::hints::{generate, HintRequest};
use crate::options::StaticOptions;
use crate::topology::{CpuTopology, Cpus, Level};

/// Exclusive assignments: pod uid -> container name -> CPUs.
pub type Assignments = BTreeMap<String, BTreeMap<String, Cpus>>;

/// What a container runs on after `allocate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The CPUs.
    pub cpus: Cpus,
    /// True when they are the container's alone.
    pub exclusive: bool,
}

/// The static policy and its state.
#[derive(Debug, Clone)]
pub struct StaticPolicy {
    pub(crate) topo: CpuTopology,
    pub(crate) options: StaticOptions,
    pub(crate) reserved: Cpus,
    pub(crate) reserved_physical: Cpus,
    pub(crate) default_set: Cpus,
    pub(crate) assignments: Assignments,
    pub(crate) cpus_to_reuse: BTreeMap<String, Cpus>,
    /// The `PodLevelResourceManagers` feature gate.
    pub(crate) pod_level_managers: bool,
    /// Pod-level CPU sets (the gate's pod-scope "bubbles"), by pod uid.
    pub(crate) pod_sets: BTreeMap<String, Cpus>,
    /// The pod whose pod-scope hints were asked for last (see
    /// [`StaticPolicy::set_pod_scope`]).
    pub(crate) pod_scope: Option<String>,
    /// CPUs that containers topomgr does not place are pinned to: in the
    /// shared pool, never handed out exclusively (the host's
    /// `exclude_cpus`; not saved, the host sends them again after every
    /// restore).
    pub(crate) excluded: Cpus,
    /// The CPUs a resized container was first allocated (KEP-5554's
    /// "baseline CPUs"), kept through every resize; a container that was
    /// never resized has none here (its assignment is its baseline).
    pub(crate) baselines: Assignments,
}

/// Whole CPUs of a request in millicores; `None` when not integral.
fn whole_cpus(milli: u64) -> Option<usize> {
    milli
        .is_multiple_of(1000)
        .then(|| usize::try_from(milli / 1000).unwrap_or(0))
}

/// The kubelet's `guaranteedCPUs`: the container's integer CPU request in
/// a Guaranteed pod, else 0. With the `PodLevelResourceManagers` gate
/// (`pod_level_managers`), a container of a pod with pod-level resources
/// counts only when it is Guaranteed on its own (`cpu` and `memory`
/// requests equal to their limits).
pub fn guaranteed_cpus(
    pod: &PodView,
    container: &ContainerView,
    pod_level_managers: bool,
) -> usize {
    if pod.qos != QosClass::Guaranteed {
        return 0;
    }
    if pod_level_managers && pod.sets_pod_level_resources() && !container.is_guaranteed_equivalent()
    {
        return 0;
    }
    whole_cpus(container.request("cpu")).unwrap_or(0)
}

/// The kubelet's `podGuaranteedCPUs`: max(largest init container counting
/// the sidecars started before it, app containers + sidecars). With the
/// `PodLevelResourceManagers` gate and pod-level resources: the integer
/// pod-level `cpu` request of a Guaranteed pod.
pub fn pod_guaranteed_cpus(pod: &PodView, pod_level_managers: bool) -> usize {
    if pod_level_managers && pod.sets_pod_level_resources() {
        if pod.qos != QosClass::Guaranteed {
            return 0;
        }
        return pod
            .resources
            .as_ref()
            .and_then(|r| r.requests.get("cpu"))
            .and_then(|&milli| whole_cpus(milli))
            .unwrap_or(0);
    }
    let mut init_max = 0usize;
    let mut sidecars = 0usize;
    for c in &pod.init_containers {
        if !c.requests.contains_key("cpu") {
            continue;
        }
        let n = guaranteed_cpus(pod, c, pod_level_managers);
        if c.sidecar {
            sidecars += n;
        } else if sidecars + n > init_max {
            init_max = sidecars + n;
        }
    }
    let apps: usize = pod
        .containers
        .iter()
        .filter(|c| c.requests.contains_key("cpu"))
        .map(|c| guaranteed_cpus(pod, c, pod_level_managers))
        .sum();
    init_max.max(apps + sidecars)
}

impl StaticPolicy {
    /// A fresh policy: every CPU in the shared pool (reserved ones too,
    /// unless `strict-cpu-reservation`).
    pub fn new(topo: CpuTopology, reserved: Cpus, options: StaticOptions) -> Self {
        let mut reserved_physical = Cpus::new();
        for c in &reserved {
            if let Some(i) = topo.info(*c) {
                reserved_physical.extend(topo.all_cpus_in(Level::Core, i.core));
            }
        }
        let mut p = StaticPolicy {
            topo,
            options,
            reserved,
            reserved_physical,
            default_set: Cpus::new(),
            assignments: Assignments::new(),
            cpus_to_reuse: BTreeMap::new(),
            pod_level_managers: false,
            pod_sets: BTreeMap::new(),
            pod_scope: None,
            excluded: Cpus::new(),
            baselines: Assignments::new(),
        };
        p.default_set = p.initial_default_set();
        p
    }

    /// With the `PodLevelResourceManagers` feature gate on or off (off by
    /// default, as in Kubernetes 1.37).
    pub fn with_pod_level_resource_managers(mut self, on: bool) -> Self {
        self.pod_level_managers = on;
        self
    }

    /// Records which scope the host is admitting in: `Some(uid)` when it
    /// asked for the pod-scope hints of pod `uid` (its `allocate` calls
    /// follow with the pod's hint), `None` when it asked for a
    /// container's hints. With the `PodLevelResourceManagers` gate, a pod
    /// with pod-level resources admitted in pod scope gets one pod-level
    /// CPU set (see [`crate::podlevel`]); in container scope each eligible
    /// container gets its own exclusive CPUs.
    pub fn set_pod_scope(&mut self, uid: Option<&str>) {
        self.pod_scope = uid.map(str::to_owned);
    }

    /// Whether pod-level resources make the kubelet skip this pod: the
    /// gate is off and the pod sets pod-level resources (hints: no
    /// preference; allocation: the shared pool).
    fn skips_pod_level(&self, pod: &PodView) -> bool {
        !self.pod_level_managers && pod.sets_pod_level_resources()
    }

    /// The shared pool of a fresh state.
    pub(crate) fn initial_default_set(&self) -> Cpus {
        let all = self.topo.all_cpus();
        if self.options.strict_cpu_reservation {
            all.difference(&self.reserved).copied().collect()
        } else {
            all
        }
    }

    /// The shared pool (the kubelet's default CPU set).
    pub fn default_set(&self) -> &Cpus {
        &self.default_set
    }

    /// Free CPUs for exclusive use: the shared pool minus reserved CPUs
    /// and the CPUs others pinned containers to.
    pub fn available(&self) -> Cpus {
        self.default_set
            .iter()
            .filter(|c| !self.reserved.contains(c) && !self.excluded.contains(c))
            .copied()
            .collect()
    }

    /// Hand out none of `cpus` exclusively until the next call (they stay
    /// in the shared pool; what is assigned stays).
    pub fn exclude(&mut self, cpus: Cpus) {
        self.excluded = cpus;
    }

    pub(crate) fn group_size(&self) -> usize {
        self.topo.cpus_per_core().max(1)
    }

    pub(crate) fn assigned(&self, pod: &str, container: &str) -> Option<&Cpus> {
        self.assignments.get(pod).and_then(|m| m.get(container))
    }

    fn hint_set(
        &self,
        available: &Cpus,
        reusable: &Cpus,
        request: usize,
    ) -> Result<HintSet, CpuError> {
        generate(
            &self.topo,
            &HintRequest {
                available,
                reusable,
                request,
                align_by_socket: self.options.align_by_socket,
            },
        )
    }

    /// Container-scope hints (`GetTopologyHints`); `None`: no hints (not exclusive).
    pub fn hints(
        &self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<Option<HintSet>, CpuError> {
        let requested = guaranteed_cpus(pod, container, self.pod_level_managers);
        if requested == 0 || self.skips_pod_level(pod) {
            return Ok(None);
        }
        if let Some(held) = self.assigned(&pod.uid, &container.name) {
            if held.len() != requested {
                tracing::info!(pod = %pod.uid, container = %container.name, requested, allocated = held.len(),
                    "CPUs already allocated to container with different number than request");
                return Ok(Some(HintSet::Explicit(Vec::new())));
            }
            return self.hint_set(held, &Cpus::new(), requested).map(Some);
        }
        let reusable = self.reusable(&pod.uid);
        self.hint_set(&self.available(), &reusable, requested)
            .map(Some)
    }

    /// Pod-scope hints (`GetPodTopologyHints`).
    pub fn pod_hints(&self, pod: &PodView) -> Result<Option<HintSet>, CpuError> {
        let requested = pod_guaranteed_cpus(pod, self.pod_level_managers);
        if requested == 0 || self.skips_pod_level(pod) {
            return Ok(None);
        }
        if self.pod_level_managers && pod.sets_pod_level_resources() {
            if let Err(e) = self.validate_pod_scope_resources(pod) {
                tracing::info!(pod = %pod.uid, error = %e, "pod-level resources leave no CPUs for the pod's shared containers; no hints");
                return Ok(Some(HintSet::unsatisfiable()));
            }
        }
        let mut assigned = Cpus::new();
        for c in pod.init_containers.iter().chain(&pod.containers) {
            let wanted = guaranteed_cpus(pod, c, self.pod_level_managers);
            if let Some(held) = self.assigned(&pod.uid, &c.name) {
                if held.len() != wanted {
                    tracing::info!(pod = %pod.uid, container = %c.name, wanted, allocated = held.len(),
                        "CPUs already allocated to container with different number than request");
                    return Ok(Some(HintSet::Explicit(Vec::new())));
                }
                assigned.extend(held.iter().copied());
            }
        }
        if assigned.len() == requested {
            return self.hint_set(&assigned, &Cpus::new(), requested).map(Some);
        }
        let mut reusable = self.reusable(&pod.uid);
        reusable.extend(assigned.into_iter().filter(|c| self.topo.is_usable(*c)));
        self.hint_set(&self.available(), &reusable, requested)
            .map(Some)
    }

    fn update_cpus_to_reuse(&mut self, pod: &PodView, container: &ContainerView, cpus: &Cpus) {
        self.cpus_to_reuse.retain(|uid, _| *uid == pod.uid);
        let entry = self.cpus_to_reuse.entry(pod.uid.clone()).or_default();
        let init = pod
            .init_containers
            .iter()
            .find(|c| c.name == container.name);
        if let Some(init) = init {
            if !init.sidecar {
                entry.extend(cpus.iter().copied());
                return;
            }
        }
        for c in cpus {
            entry.remove(c);
        }
    }

    /// Where `container` runs; exclusive CPUs are taken honouring `affinity`.
    pub fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        affinity: Option<NumaMask>,
    ) -> Result<Placement, CpuError> {
        if self.pod_level_managers
            && pod.sets_pod_level_resources()
            && self.pod_scope.as_deref() == Some(pod.uid.as_str())
        {
            return self.allocate_in_pod_set(pod, container, affinity);
        }
        let num = guaranteed_cpus(pod, container, self.pod_level_managers);
        if num == 0 || self.skips_pod_level(pod) {
            return Ok(self.shared());
        }
        // A container that holds CPUs keeps them whatever the options say
        // now (they apply to new admissions, see `crate::reconcile`); the
        // kubelet checks full-pcpus-only first.
        if let Some(held) = self.assigned(&pod.uid, &container.name).cloned() {
            self.update_cpus_to_reuse(pod, container, &held);
            tracing::info!(pod = %pod.uid, container = %container.name, "container already present in state, skipping");
            return self.held_placement(&pod.uid, &container.name, &held);
        }
        self.enforce_smt_alignment(num)?;
        let reusable = self.reusable(&pod.uid);
        let cpus = self.allocate_cpus(num, affinity, &reusable)?;
        self.assignments
            .entry(pod.uid.clone())
            .or_default()
            .insert(container.name.clone(), cpus.clone());
        self.update_cpus_to_reuse(pod, container, &cpus);
        tracing::info!(pod = %pod.uid, container = %container.name, cpus = %crate::topology::to_cpuset(&cpus), "allocated exclusive CPUs");
        Ok(Placement {
            cpus,
            exclusive: true,
        })
    }

    /// The CPUs pod `uid` may reuse from its init containers that can be
    /// handed out now (online, in a NUMA node).
    fn reusable(&self, uid: &str) -> Cpus {
        self.cpus_to_reuse
            .get(uid)
            .map(|s| {
                s.iter()
                    .copied()
                    .filter(|c| self.topo.is_usable(*c))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Where a container that already holds `held` runs: the CPUs of it
    /// that are online (the kernel refuses offline CPUs in a cpuset) and
    /// that no other pod claimed first in a restored state; the others stay
    /// the container's (see [`crate::reconcile`]).
    pub(crate) fn held_placement(
        &self,
        pod: &str,
        container: &str,
        held: &Cpus,
    ) -> Result<Placement, CpuError> {
        let cpus: Cpus = held
            .iter()
            .copied()
            .filter(|c| self.topo.is_usable(*c) && self.first_claim(pod, *c).is_none())
            .collect();
        if cpus.is_empty() && !held.is_empty() {
            let (why, remedy) = self.why_unusable(pod, held);
            return Err(CpuError::NoUsableCpus {
                pod: pod.to_owned(),
                container: container.to_owned(),
                held: crate::topology::to_cpuset(held),
                why,
                remedy,
            });
        }
        Ok(Placement {
            cpus,
            exclusive: true,
        })
    }

    /// The none policy's `allocate`: a container that holds exclusive CPUs
    /// (kept from the static policy) keeps them; any other gets the shared
    /// pool.
    pub(crate) fn allocate_unmanaged(
        &self,
        pod: &str,
        container: &str,
    ) -> Result<Placement, CpuError> {
        match self.assigned(pod, container) {
            Some(held) => self.held_placement(pod, container, held),
            None => Ok(self.shared()),
        }
    }

    /// The node's shared pool, for a container without exclusive CPUs.
    pub(crate) fn shared(&self) -> Placement {
        Placement {
            cpus: self.default_set.clone(),
            exclusive: false,
        }
    }

    /// The kubelet's `enforceSMTAlignment` (full-pcpus-only): `num` must
    /// be whole cores, and that many CPUs must be free outside the cores
    /// of reserved CPUs.
    pub(crate) fn enforce_smt_alignment(&self, num: usize) -> Result<(), CpuError> {
        if !self.options.full_pcpus_only {
            return Ok(());
        }
        let per_core = self.group_size();
        if !num.is_multiple_of(per_core) {
            return Err(CpuError::SmtNotMultiple {
                requested: num,
                per_core,
            });
        }
        let physical = self
            .default_set
            .iter()
            .filter(|c| !self.reserved_physical.contains(c) && !self.excluded.contains(c))
            .count();
        if num > physical {
            return Err(CpuError::SmtNotEnoughPhysical {
                requested: num,
                available: physical,
                per_core,
            });
        }
        Ok(())
    }

    pub(crate) fn aligned_cpus(&self, affinity: NumaMask, allocatable: &Cpus) -> Cpus {
        if self.options.align_by_socket {
            let sockets = self.topo.sockets_in_numa_nodes(affinity);
            return allocatable
                .iter()
                .copied()
                .filter(|c| {
                    self.topo
                        .info(*c)
                        .is_some_and(|i| sockets.contains(&i.socket))
                })
                .collect();
        }
        self.topo.cpus_on_numa_nodes(allocatable, affinity)
    }

    /// The kubelet's `takeByTopology`; `hint_numas` is the NUMA node count
    /// of the merged hint for the take from the aligned CPUs, 0 otherwise.
    pub(crate) fn take(
        &self,
        available: &Cpus,
        num: usize,
        hint_numas: usize,
    ) -> Result<Cpus, CpuError> {
        let strategy = if self.options.distribute_cpus_across_cores {
            SortingStrategy::Spread
        } else {
            SortingStrategy::Packed
        };
        let r = if self.options.distribute_cpus_across_numa {
            let group = if self.options.full_pcpus_only {
                self.group_size()
            } else {
                1
            };
            let how = Distribution {
                group,
                align_by_socket: self.options.align_by_socket,
                min_numas_from_hint: hint_numas,
            };
            take_distributed(&self.topo, available, num, how, strategy)
        } else {
            take_packed(
                &self.topo,
                available,
                num,
                strategy,
                self.options.prefer_align_by_uncore_cache,
            )
        };
        r.map_err(|source| CpuError::Take {
            requested: num,
            cause: source,
        })
    }

    /// The kubelet's `allocateCPUs`: hinted nodes first, then the rest.
    pub(crate) fn allocate_cpus(
        &mut self,
        num: usize,
        affinity: Option<NumaMask>,
        reusable: &Cpus,
    ) -> Result<Cpus, CpuError> {
        let mut allocatable = self.available();
        allocatable.extend(reusable.iter().copied());
        if allocatable.len() < num {
            let nodes = self.topo.numa_mask_of(&allocatable);
            let location = match nodes.len() {
                0 => String::new(),
                1 => format!(" on NUMA node {nodes}"),
                _ => format!(" on NUMA nodes {nodes}"),
            };
            return Err(CpuError::NotEnough {
                requested: num,
                free: allocatable.len(),
                location,
            });
        }
        let mut result = Cpus::new();
        if let Some(mask) = affinity {
            let aligned = self.aligned_cpus(mask, &allocatable);
            let n = num.min(aligned.len());
            result = self.take(&aligned, n, mask.len() as usize)?;
        }
        let rest: Cpus = allocatable.difference(&result).copied().collect();
        let more = self.take(&rest, num - result.len(), 0)?;
        result.extend(more);
        for c in &result {
            self.default_set.remove(c);
        }
        Ok(result)
    }

    /// The kubelet's `RemoveContainer`: the container's CPUs not used by
    /// its pod's other containers go back to the shared pool, a pod-level
    /// CPU set with the pod's last container. A released CPU that cannot be
    /// handed out now (offline) goes nowhere: it is free when it comes
    /// back; a reserved one is reserved again.
    pub fn remove(&mut self, pod_uid: &str, container: &str) {
        let Some(pod) = self.assignments.get_mut(pod_uid) else {
            return;
        };
        let Some(released) = pod.remove(container) else {
            return;
        };
        if pod.is_empty() {
            self.assignments.remove(pod_uid);
        }
        self.forget_baseline(pod_uid, container);
        if self.pod_sets.contains_key(pod_uid) {
            if self.assignments.contains_key(pod_uid) {
                return;
            }
            if let Some(pod_set) = self.pod_sets.remove(pod_uid) {
                tracing::info!(pod = %pod_uid, cpus = %crate::topology::to_cpuset(&pod_set), "released pod-level CPUs");
                self.return_to_pool(&pod_set);
            }
            return;
        }
        tracing::info!(pod = %pod_uid, container, cpus = %crate::topology::to_cpuset(&released), "released CPUs");
        self.return_to_pool(&released);
    }

    /// Puts `cpus` back in the shared pool, except those still held by a
    /// container or pod-level set, those that cannot be handed out now,
    /// and reserved ones with `strict-cpu-reservation`.
    pub(crate) fn return_to_pool(&mut self, cpus: &Cpus) {
        let held = self.held();
        let strict = self.options.strict_cpu_reservation;
        for &c in cpus {
            if !held.contains(&c)
                && self.topo.is_usable(c)
                && !(strict && self.reserved.contains(&c))
            {
                self.default_set.insert(c);
            }
        }
    }
}
