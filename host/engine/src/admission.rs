//! The admission pipeline: hints -> merge -> decide -> allocate, per scope.
//!
//! [`Admitter`] owns the loaded providers, the policy and the table of
//! admitted pods. It follows the kubelet's scopes:
//! - **container**: each container in turn (init containers first, then app
//!   containers) gets hints from every provider, a merged hint, a decision,
//!   and is allocated before the next container is considered (so later
//!   containers see earlier allocations, as in the kubelet);
//! - **pod**: one set of pod-level hints, one decision, and that hint is
//!   stored for and handed to every container's allocation.
//!
//! Unlike the kubelet, an admission is all-or-nothing: if any container is
//! rejected or any provider's `allocate` fails, everything already allocated
//! for the pod is released before the rejection is reported.
//!
//! Under the `none` policy no hints are asked for (as in the kubelet's none
//! scope); every container is allocated with the hint "any, not preferred".
//!
//! Providers are not trusted with exclusivity: every provider's allocation
//! is judged by the [`Ledger`] before the admission goes on (CPUs online,
//! memory nodes present, no exclusive CPU or device held by another pod),
//! and two providers setting one environment variable to different values
//! for a container fail the admission. Both are `UnexpectedAdmissionError`
//! rejections, rolled back like any other.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use topomgr_sdk::{
    Allocation, AssignedDevicesRequest, ContainerView, HintSet, Machine, NumaMask, NumaNodeId,
    PodView, ProviderHints, ResourceMatch, TopologyHint,
};
use tracing::{debug, info, warn};

use crate::ledger::{Finding, IdentityBook, Ledger};
use crate::merge::MergeOutcome;
use crate::policy::{Decision, Policy, PolicyName, Scope};
use crate::provider::LoadedProvider;
use crate::strategy::{AllocationStrategy, Occupancy};

/// The kubelet's reason for a topology rejection.
pub const TOPOLOGY_AFFINITY_ERROR: &str = "TopologyAffinityError";
/// Reason for a provider that misbehaved (bad hints, failed call, an
/// allocation the ledger refuses).
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";
/// Reason for a pod with more than `MAX_CONTAINERS_PER_POD` containers.
pub const TOO_MANY_CONTAINERS: &str = "TooManyContainers";
/// Reason while a provider is held (it refused its saved state).
pub const PROVIDER_HELD: &str = "ProviderHeld";
/// Reason for a uid that is already admitted with another spec.
pub const UID_CONFLICT: &str = "PodUidConflict";

/// The most containers (init + app) one pod may have. Admission costs time
/// linear in the containers; the cap bounds how long one admission can keep
/// the daemon's other clients waiting.
pub(crate) const MAX_CONTAINERS_PER_POD: usize = 1024;

/// What one container received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerResult {
    /// Container name.
    pub name: String,
    /// The merged hint stored for the container.
    pub hint: TopologyHint,
    /// The union of every provider's allocation.
    pub allocation: Allocation,
}

/// The outcome of admitting one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmitResult {
    /// The pod as parsed.
    pub pod: PodView,
    /// Whether the pod was admitted.
    pub admitted: bool,
    /// Rejection reason (`TopologyAffinityError` or the provider's reason).
    pub reason: Option<String>,
    /// Rejection message: which resources could not be aligned and why.
    pub message: Option<String>,
    /// Per-container results (empty when rejected: nothing stays allocated).
    pub containers: Vec<ContainerResult>,
}

/// The answer of an admission as the API and the CLI write it (the one
/// seam from the engine's result to the wire).
impl From<&AdmitResult> for topomgr_contract::api::Admission {
    fn from(r: &AdmitResult) -> topomgr_contract::api::Admission {
        topomgr_contract::api::Admission {
            uid: r.pod.uid.clone(),
            name: r.pod.name.clone(),
            namespace: r.pod.namespace.clone(),
            qos: r.pod.qos,
            admitted: r.admitted,
            reason: r.reason.clone(),
            message: r.message.clone(),
            containers: r
                .containers
                .iter()
                .map(|c| topomgr_contract::api::ContainerAdmission {
                    name: c.name.clone(),
                    affinity: c.hint.affinity,
                    preferred: c.hint.preferred,
                    cpus: c.allocation.cpus.clone(),
                    exclusive: c.allocation.exclusive,
                    mems: c.allocation.mems,
                    devices: c.allocation.devices.clone(),
                    env: c.allocation.env.clone(),
                })
                .collect(),
        }
    }
}

/// One step of an admission, for `topomgr explain`.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceStep {
    /// The container, or `None` for a pod-scope decision.
    pub container: Option<String>,
    /// Each provider's hints.
    pub hints: Vec<(String, ProviderHints)>,
    /// The decision.
    pub decision: Decision,
    /// How the merge decided (absent under the `none` policy).
    pub merge: Option<MergeOutcome>,
}

/// Errors of operations on admitted pods.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// No admitted pod has that uid.
    #[error("no admitted pod with uid {0:?}")]
    UnknownPod(String),
    /// Releasing failed in some providers (the pod is forgotten anyway).
    #[error("pod {uid:?} released, but providers reported errors: {errors}")]
    ReleaseErrors {
        /// Pod uid.
        uid: String,
        /// The providers' messages.
        errors: String,
    },
}

/// Devices containers already hold from outside topomgr, by container name
/// (see [`Admitter::admit_assigned`]).
pub type AssignedDevices = BTreeMap<String, AssignedDevicesRequest>;

/// Owns providers, policy, admitted pods and the [`Ledger`]; admits one
/// pod at a time.
///
/// A provider may be *held* ([`Admitter::hold`]: it could not read its
/// saved state). A held provider holds only its own resources: a pod that
/// asks for one of them (a request or limit above 0, in any container, init
/// included, or at pod level, of a resource the provider's inventory
/// lists) is refused ([`PROVIDER_HELD`]); every other pod is admitted by
/// the other providers as usual. The held provider is not called for it
/// (no hints, no allocation, no release) and gives it nothing: under a held
/// CPU provider such a pod gets no CPUs of its own, so its cgroups get the
/// shared pool the ledger computes (online CPUs minus every CPU the
/// admitted pods hold exclusively); under a held memory provider, no memory
/// nodes of its own (all of them). What is kept for the held provider (its
/// saved bytes, the releases it misses) is the state layer's.
pub struct Admitter {
    policy: Policy,
    scope: Scope,
    providers: Vec<LoadedProvider>,
    /// Per provider: why it is held, when it is.
    held: Vec<Option<String>>,
    pods: BTreeMap<String, AdmitResult>,
    ledger: Ledger,
    violations: Vec<String>,
    /// The NUMA node of each PCI device of the machine that has one, for
    /// CDI devices no provider lists ([`Admitter::add_assigned`]).
    pci_numa: BTreeMap<String, NumaNodeId>,
    /// Whether such devices count in the merge (config
    /// `cdi.align_unknown_devices`; default true).
    align_unknown_devices: bool,
}

/// The name under which the hints of CDI devices that no provider lists
/// enter the merge (not a provider's: names in the config are single
/// words).
pub const UNKNOWN_DEVICES: &str = "CDI devices";

/// What every provider's devices physically are, for the ledger (see
/// [`crate::ledger`]'s Device identity). A provider that cannot say is
/// logged; its devices are known by their ids (and PCI addresses, where
/// the ids are addresses).
fn identity_book(providers: &mut [LoadedProvider]) -> IdentityBook {
    let mut book = IdentityBook::new();
    for p in providers.iter_mut() {
        match p.device_identities() {
            Ok(Some(served)) => {
                for (resource, devices) in served.resources {
                    for d in devices {
                        book.insert((resource.clone(), d.id), d.identity);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                warn!(provider = p.name(), error = %e, "the provider cannot say what its devices are; they are known by their ids")
            }
        }
    }
    book
}

struct Rejection {
    reason: String,
    message: String,
}

impl Rejection {
    fn unexpected(message: String) -> Rejection {
        Rejection {
            reason: UNEXPECTED_ADMISSION_ERROR.to_string(),
            message,
        }
    }
}

impl Admitter {
    /// A new admitter over loaded providers (called in this order) for `machine`.
    pub fn new(
        machine: &Machine,
        policy: Policy,
        scope: Scope,
        mut providers: Vec<LoadedProvider>,
    ) -> Self {
        let mut ledger = Ledger::new(machine);
        ledger.set_identities(identity_book(&mut providers));
        Admitter {
            policy,
            scope,
            held: vec![None; providers.len()],
            providers,
            pods: BTreeMap::new(),
            ledger,
            violations: Vec::new(),
            pci_numa: machine
                .pci_devices
                .iter()
                .filter_map(|d| Some((d.address.clone(), d.numa?)))
                .collect(),
            align_unknown_devices: true,
        }
    }

    /// Whether a CDI device that no provider lists counts in the merge by
    /// its PCI device's NUMA node (config `cdi.align_unknown_devices`).
    pub fn set_align_unknown_devices(&mut self, on: bool) {
        self.align_unknown_devices = on;
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The scope.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The providers, in call order.
    pub fn providers(&self) -> &[LoadedProvider] {
        &self.providers
    }

    /// Mutable access to the providers (restore).
    pub fn providers_mut(&mut self) -> &mut [LoadedProvider] {
        &mut self.providers
    }

    /// The providers, in call order, giving up the admitter (a reload
    /// keeps those it cannot replace).
    pub fn into_providers(self) -> Vec<LoadedProvider> {
        self.providers
    }

    /// Call `providers` from now on (none held); the pods and the ledger
    /// are the caller's to install again ([`Admitter::set_pods`]).
    pub fn set_providers(&mut self, mut providers: Vec<LoadedProvider>) {
        self.ledger.set_identities(identity_book(&mut providers));
        self.held = vec![None; providers.len()];
        self.providers = providers;
    }

    /// Hold provider `name` (it could not read its saved state, `reason`):
    /// it is not called until [`Admitter::clear_holds`], and admissions
    /// that ask for its resources are refused.
    pub fn hold(&mut self, name: &str, reason: String) {
        if let Some(i) = self.providers.iter().position(|p| p.name() == name) {
            self.held[i] = Some(reason);
        }
    }

    /// Hold no provider any more (before a restore holds them again).
    pub fn clear_holds(&mut self) {
        self.held.iter_mut().for_each(|h| *h = None);
    }

    /// The held providers, in call order: (name, why).
    pub fn held(&self) -> Vec<(&str, &str)> {
        self.providers
            .iter()
            .zip(&self.held)
            .filter_map(|(p, h)| h.as_deref().map(|h| (p.name(), h)))
            .collect()
    }

    /// Admitted pods by uid.
    pub fn pods(&self) -> &BTreeMap<String, AdmitResult> {
        &self.pods
    }

    /// The ledger of what admitted pods hold.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Replace the table of admitted pods (after a restore) and rebuild the
    /// ledger from it; returns what breaks the invariant (kept, reported).
    pub fn set_pods(&mut self, pods: BTreeMap<String, AdmitResult>) -> Vec<Finding> {
        self.pods = pods;
        let table: Vec<(&PodView, Vec<(String, Allocation)>)> = self
            .pods
            .values()
            .map(|r| {
                let containers = r
                    .containers
                    .iter()
                    .map(|c| (c.name.clone(), c.allocation.clone()))
                    .collect();
                (&r.pod, containers)
            })
            .collect();
        self.ledger
            .restore(table.iter().map(|(p, c)| (*p, c.as_slice())))
    }

    /// The providers whose allocations the ledger refused since the last
    /// call (one entry per refusal), for metrics.
    pub fn take_violations(&mut self) -> Vec<String> {
        std::mem::take(&mut self.violations)
    }

    /// Why `pod` cannot be admitted under its uid: that uid is admitted
    /// with a different spec. `None` when it is new or identical.
    pub fn uid_conflict(&self, pod: &PodView) -> Option<String> {
        let existing = self.pods.get(&pod.uid)?;
        (existing.pod != *pod).then(|| {
            format!(
                "pod uid {:?} is already admitted as {}/{} with a different spec; release it first, or give the new pod its own uid",
                pod.uid, existing.pod.namespace, existing.pod.name
            )
        })
    }

    /// Admit `pod`. Admitting a uid that is already admitted returns the
    /// stored result unchanged (idempotent retries) when the spec is the
    /// same, and a [`UID_CONFLICT`] rejection when it differs.
    pub fn admit(&mut self, pod: &PodView) -> AdmitResult {
        self.admit_traced(pod, &mut Vec::new())
    }

    /// [`Admitter::admit`], recording every decision into `trace`.
    pub fn admit_traced(&mut self, pod: &PodView, trace: &mut Vec<TraceStep>) -> AdmitResult {
        self.admit_assigned(pod, &AssignedDevices::new(), trace)
    }

    /// [`Admitter::admit_traced`] for a pod whose containers already hold
    /// devices that were assigned outside topomgr (`assigned`, by container
    /// name: the kubelet's device plugins gave them). Every provider is
    /// asked which of them it knows
    /// ([`LoadedProvider::assigned_device_hints`]); the hints those devices
    /// fix are added to that provider's hints for the container (in pod
    /// scope, for the pod), so the merge aligns CPUs and memory with them.
    /// Nothing is allocated for them. A device no provider knows is logged
    /// and not aligned with.
    pub fn admit_assigned(
        &mut self,
        pod: &PodView,
        assigned: &AssignedDevices,
        trace: &mut Vec<TraceStep>,
    ) -> AdmitResult {
        if let Some(existing) = self.pods.get(&pod.uid) {
            if existing.pod == *pod {
                debug!(pod = %pod.uid, "pod already admitted; returning stored result");
                return existing.clone();
            }
        }
        let mut done: Vec<ContainerResult> = Vec::new();
        let outcome = self
            .precheck(pod)
            .and_then(|()| self.check_extended(pod))
            .and_then(|()| {
                // Every provider gets the pod once; the calls below pass this
                // object, so a pod of N containers is not sent 2N times.
                let shared = Arc::new(pod.clone());
                for p in live(&mut self.providers, &self.held) {
                    p.share_pod(&shared);
                }
                match self.scope {
                    Scope::Pod if self.policy.name() != PolicyName::None => {
                        self.admit_pod_scope(&shared, assigned, &mut done, trace)
                    }
                    _ => self.admit_container_scope(&shared, assigned, &mut done, trace),
                }
            });
        let result = match outcome {
            Ok(()) => {
                info!(pod = %pod.uid, name = %pod.name, "pod admitted");
                AdmitResult {
                    pod: pod.clone(),
                    admitted: true,
                    reason: None,
                    message: None,
                    containers: done,
                }
            }
            Err(rej) => {
                self.rollback(pod, &done);
                info!(pod = %pod.uid, name = %pod.name, reason = %rej.reason, message = %rej.message, "pod rejected");
                AdmitResult {
                    pod: pod.clone(),
                    admitted: false,
                    reason: Some(rej.reason),
                    message: Some(rej.message),
                    containers: Vec::new(),
                }
            }
        };
        if result.admitted {
            self.pods.insert(pod.uid.clone(), result.clone());
        }
        result
    }

    /// What refuses a pod before any provider is asked for hints.
    fn precheck(&mut self, pod: &PodView) -> Result<(), Rejection> {
        if let Some(message) = self.uid_conflict(pod) {
            return Err(Rejection {
                reason: UID_CONFLICT.to_string(),
                message,
            });
        }
        let n = pod.init_containers.len() + pod.containers.len();
        if n > MAX_CONTAINERS_PER_POD {
            return Err(Rejection {
                reason: TOO_MANY_CONTAINERS.to_string(),
                message: format!(
                    "pod {}/{} has {n} containers (init and app); topomgr admits at most {MAX_CONTAINERS_PER_POD} per pod",
                    pod.namespace, pod.name
                ),
            });
        }
        self.check_held(pod)
    }

    /// Refuses a pod that asks for a resource a held provider owns (see
    /// [`Admitter`]). Which resources it owns is what its inventory lists,
    /// which comes from the machine and its config, not from the state it
    /// could not read; a held provider that cannot say counts as owning
    /// everything the pod asks for.
    fn check_held(&mut self, pod: &PodView) -> Result<(), Rejection> {
        if self.held.iter().all(Option::is_none) {
            return Ok(());
        }
        let asked = asked_resources(pod);
        if asked.is_empty() {
            return Ok(());
        }
        for (p, held) in self.providers.iter_mut().zip(&self.held) {
            let Some(why) = held else { continue };
            let name = p.name().to_owned();
            let (touched, unsure) = match p.inventory() {
                Ok(inv) => (
                    asked
                        .iter()
                        .filter(|r| inv.resources.contains_key(*r))
                        .cloned()
                        .collect::<Vec<_>>(),
                    None,
                ),
                Err(e) => (asked.clone(), Some(e.message)),
            };
            if touched.is_empty() {
                continue;
            }
            let which = match &unsure {
                None => format!("the pod asks for {}, which it serves", touched.join(", ")),
                Some(e) => format!(
                    "it could not say which resources it serves ({e}), so the pod's {} may be its",
                    touched.join(", ")
                ),
            };
            return Err(Rejection {
                reason: PROVIDER_HELD.to_string(),
                message: format!(
                    "pod {}/{} cannot be admitted: provider {name:?} is held and {which}. It is held because it cannot read its saved state ({why}); pods asking for none of its resources are still admitted, and admitted pods can be listed and released. Configure the provider library that wrote that state under the name {name:?} again (or a version that reads it) and restart topomgr or send the daemon SIGHUP",
                    pod.namespace, pod.name
                ),
            });
        }
        Ok(())
    }

    /// Refuses a pod requesting an extended resource no provider owns
    /// ([`crate::extended`]); providers are asked for their inventories only
    /// when the pod requests one.
    fn check_extended(&mut self, pod: &PodView) -> Result<(), Rejection> {
        if crate::extended::requested(pod).is_empty() {
            return Ok(());
        }
        let mut owned = std::collections::BTreeSet::new();
        for p in &mut self.providers {
            let inv = p.inventory().map_err(|e| Rejection {
                reason: e.reason.clone(),
                message: format!(
                    "provider {:?} failed to report which resources it owns: {}",
                    p.name(),
                    e.message
                ),
            })?;
            owned.extend(inv.resources.into_keys());
        }
        match crate::extended::unserved(pod, &owned) {
            Some((reason, message)) => Err(Rejection { reason, message }),
            None => Ok(()),
        }
    }

    fn ordered_containers(pod: &PodView) -> impl Iterator<Item = &ContainerView> {
        pod.init_containers.iter().chain(&pod.containers)
    }

    fn admit_container_scope(
        &mut self,
        pod: &PodView,
        assigned: &AssignedDevices,
        done: &mut Vec<ContainerResult>,
        trace: &mut Vec<TraceStep>,
    ) -> Result<(), Rejection> {
        for container in Self::ordered_containers(pod) {
            let decision = if self.policy.name() == PolicyName::None {
                Decision {
                    hint: TopologyHint {
                        affinity: None,
                        preferred: false,
                    },
                    admit: true,
                }
            } else {
                let mut hints = self.collect(|p| p.topology_hints(pod, container))?;
                if let Some(request) = assigned.get(&container.name) {
                    self.add_assigned(&mut hints, request)?;
                }
                self.decide(pod, Some(&container.name), hints, trace)?
            };
            let allocation = self.allocate(pod, container, &decision.hint)?;
            done.push(ContainerResult {
                name: container.name.clone(),
                hint: decision.hint,
                allocation,
            });
        }
        Ok(())
    }

    fn admit_pod_scope(
        &mut self,
        pod: &PodView,
        assigned: &AssignedDevices,
        done: &mut Vec<ContainerResult>,
        trace: &mut Vec<TraceStep>,
    ) -> Result<(), Rejection> {
        let mut hints = self.collect(|p| p.pod_topology_hints(pod))?;
        let all = AssignedDevicesRequest::new(
            assigned
                .values()
                .flat_map(|r| r.devices.iter().cloned())
                .collect(),
        );
        self.add_assigned(&mut hints, &all)?;
        let decision = self.decide(pod, None, hints, trace)?;
        for container in Self::ordered_containers(pod) {
            let allocation = self.allocate(pod, container, &decision.hint)?;
            done.push(ContainerResult {
                name: container.name.clone(),
                hint: decision.hint,
                allocation,
            });
        }
        Ok(())
    }

    /// Ask every provider that is not held for hints.
    fn collect(
        &mut self,
        mut ask: impl FnMut(&mut LoadedProvider) -> Result<ProviderHints, topomgr_sdk::ProviderError>,
    ) -> Result<Vec<(String, ProviderHints)>, Rejection> {
        let mut all = Vec::with_capacity(self.providers.len());
        for p in live(&mut self.providers, &self.held) {
            match ask(p) {
                Ok(h) => all.push((p.name().to_string(), h)),
                Err(e) => {
                    return Err(Rejection {
                        reason: e.reason.clone(),
                        message: format!(
                            "provider {:?} failed to give hints: {}",
                            p.name(),
                            e.message
                        ),
                    })
                }
            }
        }
        Ok(all)
    }

    /// Adds to `hints` (one entry per provider, in order) the hints of the
    /// devices of `request` each provider knows (see
    /// [`Admitter::admit_assigned`]).
    ///
    /// A CDI device (a group for every resource, `ResourceMatch::Prefix("")`,
    /// as the runtime faces make them) that no provider knows counts, when
    /// [`Admitter::set_align_unknown_devices`] is on, as a device of its own
    /// under [`UNKNOWN_DEVICES`]: every mask that holds the NUMA nodes of its
    /// PCI devices, preferred at their number (the kubelet's hints for a
    /// container that holds exactly those devices). Without a NUMA node it
    /// says nothing, as a device without topology.
    fn add_assigned(
        &mut self,
        hints: &mut Vec<(String, ProviderHints)>,
        request: &AssignedDevicesRequest,
    ) -> Result<(), Rejection> {
        if request.is_empty() {
            return Ok(());
        }
        let mut known = std::collections::BTreeSet::new();
        for (p, (name, h)) in live(&mut self.providers, &self.held).zip(hints.iter_mut()) {
            let answer = p.assigned_device_hints(request).map_err(|e| Rejection {
                reason: e.reason.clone(),
                message: format!(
                    "provider {name:?} failed to say which devices assigned to the container it knows: {}",
                    e.message
                ),
            })?;
            for (resource, found) in answer.resources {
                info!(provider = %name, resource = %resource, devices = %found.devices.join(","),
                    "the container already holds these devices; aligning with them");
                known.extend(found.matched);
                h.get_or_insert_with(BTreeMap::new)
                    .insert(resource, found.hints);
            }
        }
        let any = ResourceMatch::Prefix(String::new());
        let mut unknown: BTreeMap<String, Option<HintSet>> = BTreeMap::new();
        for group in &request.devices {
            if group.resource == any {
                let named = group
                    .ids
                    .iter()
                    .map(ToString::to_string)
                    .chain(group.nodes.iter().map(|n| n.path.clone()));
                if named.clone().any(|n| known.contains(&n)) {
                    continue;
                }
                let addresses: Vec<String> = group.ids.iter().map(ToString::to_string).collect();
                let mask: NumaMask = addresses
                    .iter()
                    .filter_map(|a| self.pci_numa.get(a).copied())
                    .collect();
                if self.align_unknown_devices && !mask.is_empty() {
                    info!(source = %group.source, devices = %addresses.join(","), numa = %mask,
                        "no provider lists this CDI device; aligning with the NUMA node of its PCI device");
                    unknown.insert(
                        format!("{} ({})", group.source, addresses.join(", ")),
                        Some(HintSet::upward_closed(vec![mask], mask.len())),
                    );
                } else {
                    warn!(source = %group.source, devices = %named.collect::<Vec<_>>().join(","),
                        align_unknown_devices = self.align_unknown_devices,
                        "no provider lists this CDI device and it is not aligned with (no PCI device with a NUMA node, or cdi.align_unknown_devices = false)");
                }
                continue;
            }
            for r in group.ids.iter().filter(|r| !known.contains(&r.to_string())) {
                warn!(source = %group.source, device = %r,
                    "no provider knows this device the container holds; its CPUs and memory are not aligned with it");
            }
        }
        if !unknown.is_empty() {
            hints.push((UNKNOWN_DEVICES.to_owned(), Some(unknown)));
        }
        Ok(())
    }

    fn decide(
        &mut self,
        pod: &PodView,
        container: Option<&str>,
        hints: Vec<(String, ProviderHints)>,
        trace: &mut Vec<TraceStep>,
    ) -> Result<Decision, Rejection> {
        let refs: Vec<(&str, &ProviderHints)> =
            hints.iter().map(|(n, h)| (n.as_str(), h)).collect();
        let occupancy = self.occupancy(&hints);
        let (decision, merge) = self
            .policy
            .decide_traced(&refs, occupancy.as_ref())
            .map_err(|e| Rejection {
                reason: UNEXPECTED_ADMISSION_ERROR.to_string(),
                message: e.to_string(),
            })?;
        debug!(container = container.unwrap_or("<pod>"), affinity = ?decision.hint.affinity, preferred = decision.hint.preferred, admit = decision.admit, "merged hint");
        let rejection = if decision.admit {
            None
        } else {
            let amounts = self.capacity_notes(pod, container, &hints);
            Some(Rejection {
                reason: TOPOLOGY_AFFINITY_ERROR.to_string(),
                message: rejection_message(&self.policy, container, &hints, &amounts),
            })
        };
        trace.push(TraceStep {
            container: container.map(str::to_string),
            hints,
            decision,
            merge,
        });
        match rejection {
            Some(r) => Err(r),
            None => Ok(decision),
        }
    }

    /// What the resources `hints` ask for with a topology have allocatable
    /// and available per NUMA node, from each provider's inventory, when
    /// the policy ranks by `numa-allocation-strategy` (`None` otherwise).
    /// A provider whose inventory cannot be read, or does not list a
    /// resource, leaves it out: not contended (see [`crate::strategy`]).
    fn occupancy(&mut self, hints: &[(String, ProviderHints)]) -> Option<Occupancy> {
        if self.policy.allocation_strategy() == AllocationStrategy::LowestIndex {
            return None;
        }
        let mut occupancy = Occupancy::new();
        for (p, (_, h)) in live(&mut self.providers, &self.held).zip(hints) {
            let Some(map) = h else { continue };
            let asked: Vec<&str> = map
                .iter()
                .filter(|(_, set)| set.is_some())
                .map(|(r, _)| r.as_str())
                .collect();
            if asked.is_empty() {
                continue;
            }
            match p.inventory() {
                Ok(inventory) => occupancy.add_from_inventory(&inventory, asked),
                Err(e) => {
                    debug!(provider = p.name(), error = %e, "no inventory: its resources are not contended for numa-allocation-strategy")
                }
            }
        }
        Some(occupancy)
    }

    /// For each resource a provider says no NUMA placement can satisfy (an
    /// empty hint list): the amount requested (by `container`, or by the
    /// pod for the pod scope) and, from the provider's inventory, what is
    /// free and allocatable on each NUMA node. Under single-numa-node, also
    /// for each resource none of whose hints fits on one NUMA node (a
    /// request larger than any node): the request and the largest node's
    /// allocatable amount. A provider whose inventory cannot be read, or
    /// does not list the resource, gives the request only.
    fn capacity_notes(
        &mut self,
        pod: &PodView,
        container: Option<&str>,
        hints: &[(String, ProviderHints)],
    ) -> BTreeMap<(String, String), String> {
        let mut notes = BTreeMap::new();
        let single_node = self.policy.name() == PolicyName::SingleNumaNode;
        for (provider, h) in hints {
            let Some(map) = h else { continue };
            let unsatisfiable: Vec<&String> = map
                .iter()
                .filter(|(_, set)| set.as_ref().is_some_and(HintSet::is_unsatisfiable))
                .map(|(r, _)| r)
                .collect();
            let wider: Vec<&String> = map
                .iter()
                .filter(|(_, set)| {
                    single_node
                        && set
                            .as_ref()
                            .is_some_and(|s| !s.is_unsatisfiable() && !fits_one_node(s))
                })
                .map(|(r, _)| r)
                .collect();
            if unsatisfiable.is_empty() && wider.is_empty() {
                continue;
            }
            let inventory = self
                .providers
                .iter_mut()
                .find(|p| p.name() == provider)
                .and_then(|p| p.inventory().ok());
            let requested = |resource: &str| match container.and_then(|c| pod.container(c)) {
                Some(c) => c.request(resource),
                None => pod.effective_request(resource),
            };
            for resource in wider {
                let mut note = format!("requested {}", amount(resource, requested(resource)));
                let largest = inventory
                    .as_ref()
                    .and_then(|i| i.resources.get(resource))
                    .and_then(|r| {
                        r.zones
                            .iter()
                            .filter(|z| z.numa.is_some())
                            .map(|z| z.amounts.allocatable)
                            .max()
                    });
                if let Some(largest) = largest {
                    let _ = write!(
                        note,
                        "; the largest NUMA node has {} allocatable",
                        amount(resource, largest)
                    );
                }
                notes.insert((provider.clone(), resource.clone()), note);
            }
            for resource in unsatisfiable {
                let mut note = format!("requested {}", amount(resource, requested(resource)));
                if let Some(r) = inventory.as_ref().and_then(|i| i.resources.get(resource)) {
                    let zones: Vec<String> = r
                        .zones
                        .iter()
                        .map(|z| {
                            format!(
                                "{}: {}/{}",
                                z.numa.map_or("none".to_string(), |n| n.to_string()),
                                amount(resource, z.amounts.available),
                                amount(resource, z.amounts.allocatable)
                            )
                        })
                        .collect();
                    if !zones.is_empty() {
                        let _ = write!(
                            note,
                            "; free/allocatable by NUMA node: {}",
                            zones.join(", ")
                        );
                    }
                }
                notes.insert((provider.clone(), resource.clone()), note);
            }
        }
        notes
    }

    /// Allocate one container in every provider, each provider's part
    /// judged by the ledger and the container's environment kept free of
    /// contradictions; on failure release what this container already got.
    /// On success the container's allocation is held in the ledger.
    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, Rejection> {
        let mut merged = Allocation::default();
        let mut env_from: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..self.providers.len() {
            if self.held[i].is_some() {
                continue;
            }
            let answer = self.providers[i].allocate(pod, container, hint);
            let name = self.providers[i].name().to_owned();
            let failure = match answer {
                Err(e) => {
                    let message = format!(
                        "provider {name:?} could not allocate container {:?}: {}",
                        container.name, e.message
                    );
                    self.release_container(pod, &container.name, i);
                    return Err(Rejection {
                        reason: e.reason,
                        message,
                    });
                }
                Ok(a) => match self.judge(pod, container, i, &a, &merged) {
                    Err(v) => {
                        info!(provider = %v.provider, pod = %pod.uid, container = %container.name, violation = %v.message, "allocation refused by the ledger");
                        let message = v.message.clone();
                        self.violations.push(v.provider);
                        Rejection::unexpected(message)
                    }
                    Ok(()) => match merge_allocation(&mut merged, &mut env_from, a, i) {
                        Ok(()) => continue,
                        Err((var, first, value, other)) => Rejection::unexpected(format!(
                            "providers {:?} and {name:?} set environment variable {var:?} of container {:?} to different values ({first:?} and {value:?}); topomgr refuses contradicting environments",
                            self.providers[other].name(),
                            container.name
                        )),
                    },
                },
            };
            self.release_container(pod, &container.name, i + 1);
            return Err(failure);
        }
        self.ledger.hold(pod, &container.name, &merged);
        Ok(merged)
    }

    /// Judge provider `i`'s allocation `a` for `container`: its devices
    /// against the request and the provider's inventory (asked only when the
    /// allocation names devices or the container requests an extended
    /// resource), then everything against the ledger and what earlier
    /// providers `given` the container.
    fn judge(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        i: usize,
        a: &Allocation,
        given: &Allocation,
    ) -> Result<(), crate::ledger::Violation> {
        let wants_devices = !a.devices.is_empty()
            || container
                .requests
                .iter()
                .any(|(r, n)| *n > 0 && crate::extended::is_extended(r));
        let owns = if wants_devices {
            match self.providers[i].inventory() {
                Ok(inv) => Some(inv.resources.into_keys().collect()),
                Err(e) => {
                    debug!(provider = self.providers[i].name(), error = %e, "no inventory: the resources of its allocation are not checked against it");
                    None
                }
            }
        } else {
            None
        };
        let name = self.providers[i].name();
        self.ledger
            .check_devices(pod, &container.name, name, a, owns.as_ref())?;
        self.ledger.check(pod, &container.name, name, a, given)
    }

    /// Release `container` in the first `n` providers that are not held (a
    /// failed allocation).
    fn release_container(&mut self, pod: &PodView, container: &str, n: usize) {
        for q in live(&mut self.providers[..n], &self.held) {
            if let Err(err) = q.release(&pod.uid, container) {
                warn!(provider = q.name(), pod = %pod.uid, container, error = %err, "release during rollback failed");
            }
        }
    }

    fn rollback(&mut self, pod: &PodView, done: &[ContainerResult]) {
        for c in done.iter().rev() {
            for p in live(&mut self.providers, &self.held) {
                if let Err(err) = p.release(&pod.uid, &c.name) {
                    warn!(provider = p.name(), pod = %pod.uid, container = %c.name, error = %err, "release during rollback failed");
                }
            }
        }
        if !self.pods.contains_key(&pod.uid) {
            self.ledger.release(&pod.uid);
        }
    }

    /// Release every container of an admitted pod, last first, in every
    /// provider that is not held (the state layer remembers the releases a
    /// held provider misses).
    pub fn release(&mut self, uid: &str) -> Result<AdmitResult, AdmissionError> {
        let result = self
            .pods
            .remove(uid)
            .ok_or_else(|| AdmissionError::UnknownPod(uid.to_string()))?;
        self.ledger.release(uid);
        let mut errors = Vec::new();
        for c in result.containers.iter().rev() {
            for p in live(&mut self.providers, &self.held) {
                if let Err(e) = p.release(uid, &c.name) {
                    errors.push(format!("{}: {}", p.name(), e));
                }
            }
        }
        if errors.is_empty() {
            Ok(result)
        } else {
            Err(AdmissionError::ReleaseErrors {
                uid: uid.to_string(),
                errors: errors.join("; "),
            })
        }
    }
}

/// What one provider answered to a resize ([`ResizeTrace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResizeStep {
    /// Its new allocation.
    Resized(Allocation),
    /// `None`: it does not resize and keeps its part.
    DoesNotResize,
    /// It refused.
    Refused {
        /// Its reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// Not asked: an earlier provider refused.
    NotAsked,
    /// Not asked: the provider is held.
    Held,
}

/// The trace of one resize ([`Admitter::resize_traced`]): the container,
/// its resources before and after, what it held, each provider's answer
/// in provider order. Left at what it got when the resize is refused
/// before the providers are asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResizeTrace {
    /// The container.
    pub container: String,
    /// The container as admitted (or last resized).
    pub before: Option<ContainerView>,
    /// The container as asked.
    pub after: Option<ContainerView>,
    /// What it held.
    pub current: Allocation,
    /// (provider, its answer), in provider order.
    pub providers: Vec<(String, ResizeStep)>,
}

/// Why an in-place resize was refused ([`Admitter::resize`]): nothing
/// changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResizeRefusal {
    /// Short machine-readable reason (the provider's, or
    /// `UnexpectedAdmissionError`).
    pub reason: String,
    /// What fell short, naming the provider.
    pub message: String,
}

impl Admitter {
    /// Resize container `name` of admitted pod `uid` in place to its
    /// requests and limits in `pod` (the pod as admitted, with the new
    /// resources; kubernetes KEP-5554, issue 33). Every provider that is
    /// not held is asked with the container's merged allocation and hint
    /// ([`LoadedProvider::resize`]); the parts of a new allocation it
    /// answers (CPUs, memory nodes) replace the container's, judged by the
    /// ledger; one that does not resize keeps its part. A refusal asks the
    /// providers that resized already to resize back, and nothing changes.
    /// Extended resources (devices) cannot be resized, as in the kubelet.
    pub fn resize(
        &mut self,
        uid: &str,
        name: &str,
        pod: PodView,
    ) -> Result<AdmitResult, ResizeRefusal> {
        self.resize_traced(uid, name, pod, &mut ResizeTrace::default())
    }

    /// [`Admitter::resize`], recording into `trace` what was asked and
    /// what each provider answered (for `explain`, issue 33).
    pub fn resize_traced(
        &mut self,
        uid: &str,
        name: &str,
        pod: PodView,
        trace: &mut ResizeTrace,
    ) -> Result<AdmitResult, ResizeRefusal> {
        trace.container = name.to_owned();
        trace.providers.clear();
        let refuse = |reason: &str, message: String| ResizeRefusal {
            reason: reason.to_owned(),
            message,
        };
        let held = self.pods.get(uid).cloned().ok_or_else(|| {
            refuse(
                UNEXPECTED_ADMISSION_ERROR,
                format!("pod {uid} is not admitted: nothing to resize"),
            )
        })?;
        if pod.uid != uid {
            return Err(refuse(
                UNEXPECTED_ADMISSION_ERROR,
                format!("the resized pod {} is not pod {uid}", pod.uid),
            ));
        }
        let index = held
            .containers
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| {
                refuse(
                    UNEXPECTED_ADMISSION_ERROR,
                    format!("pod {uid} has no container {name:?} admitted"),
                )
            })?;
        let (old, new) = match (held.pod.container(name), pod.container(name)) {
            (Some(o), Some(n)) => (o.clone(), n.clone()),
            _ => {
                return Err(refuse(
                    UNEXPECTED_ADMISSION_ERROR,
                    format!("container {name:?} is not in pod {uid}'s spec"),
                ))
            }
        };
        trace.before = Some(old.clone());
        trace.after = Some(new.clone());
        trace.current = held.containers[index].allocation.clone();
        let extended = |c: &ContainerView| -> Vec<(String, u64)> {
            c.requests
                .iter()
                .chain(&c.limits)
                .filter(|(r, _)| crate::extended::is_extended(r))
                .map(|(r, n)| (r.clone(), *n))
                .collect()
        };
        if extended(&old) != extended(&new) {
            return Err(refuse(
                UNEXPECTED_ADMISSION_ERROR,
                format!("container {name:?} of pod {uid}: extended resources (devices) cannot be resized in place"),
            ));
        }
        let current = held.containers[index].allocation.clone();
        let hint = held.containers[index].hint;
        let mut merged = current.clone();
        let mut resized: Vec<(usize, Allocation)> = Vec::new();
        let mut failure = None;
        for (i, p) in self.providers.iter_mut().enumerate() {
            if self.held[i].is_some() {
                trace
                    .providers
                    .push((p.name().to_owned(), ResizeStep::Held));
                continue;
            }
            if failure.is_some() {
                trace
                    .providers
                    .push((p.name().to_owned(), ResizeStep::NotAsked));
                continue;
            }
            let answer = p.resize(&pod, &new, &current, &hint);
            trace.providers.push((
                p.name().to_owned(),
                match &answer {
                    Ok(None) => ResizeStep::DoesNotResize,
                    Ok(Some(a)) => ResizeStep::Resized(a.clone()),
                    Err(e) => ResizeStep::Refused {
                        reason: e.reason.clone(),
                        message: e.message.clone(),
                    },
                },
            ));
            match answer {
                Ok(None) => {}
                Ok(Some(a)) => {
                    if a.devices != current.devices && !a.devices.is_empty() {
                        failure = Some(refuse(
                            UNEXPECTED_ADMISSION_ERROR,
                            format!("provider {:?} changed the devices of container {name:?} in a resize; devices cannot be resized", p.name()),
                        ));
                        resized.push((i, a));
                        continue;
                    }
                    if let Err(v) =
                        self.ledger
                            .check(&pod, name, p.name(), &a, &Allocation::default())
                    {
                        failure = Some(refuse(UNEXPECTED_ADMISSION_ERROR, v.message));
                        resized.push((i, a));
                        continue;
                    }
                    if !a.cpus.is_empty() {
                        merged.cpus = a.cpus.clone();
                        merged.exclusive = a.exclusive;
                    }
                    if !a.mems.is_empty() {
                        merged.mems = a.mems;
                    }
                    resized.push((i, a));
                }
                Err(e) => {
                    failure = Some(refuse(
                        &e.reason,
                        format!("provider {:?}: {}", p.name(), e.message),
                    ));
                }
            }
        }
        // A provider that does not resize refuses a resize of what it
        // allocated: exclusive CPUs or pinned memory whose request changed
        // and that no provider resized stay as they are, so the resize is
        // refused rather than reported done on the old placement.
        if failure.is_none() {
            let amount = |c: &ContainerView, r: &str| (c.request(r), c.limits.get(r).copied());
            let cpus_resized = resized.iter().any(|(_, a)| !a.cpus.is_empty());
            let mems_resized = resized.iter().any(|(_, a)| !a.mems.is_empty());
            let memory_changed = old
                .requests
                .keys()
                .chain(old.limits.keys())
                .chain(new.requests.keys())
                .chain(new.limits.keys())
                .filter(|r| *r == "memory" || r.starts_with("hugepages-"))
                .any(|r| amount(&old, r) != amount(&new, r));
            if current.exclusive && amount(&old, "cpu") != amount(&new, "cpu") && !cpus_resized {
                failure = Some(refuse(
                    topomgr_sdk::RESIZE_INFEASIBLE,
                    format!("container {name:?} of pod {uid} holds exclusive CPUs {}, and no provider resizes them", current.cpus),
                ));
            } else if !current.mems.is_empty() && memory_changed && !mems_resized {
                failure = Some(refuse(
                    topomgr_sdk::RESIZE_INFEASIBLE,
                    format!("container {name:?} of pod {uid} has its memory pinned to NUMA nodes {}, and no provider resizes it", current.mems),
                ));
            }
        }
        if let Some(f) = failure {
            for (i, a) in resized.iter().rev() {
                let p = &mut self.providers[*i];
                if let Err(e) = p.resize(&held.pod, &old, a, &hint) {
                    warn!(provider = p.name(), pod = %uid, container = name, error = %e, "resizing back after a refused resize failed");
                }
            }
            return Err(f);
        }
        let mut record = held;
        record.pod = pod;
        record.containers[index].allocation = merged;
        self.ledger.release(uid);
        for c in &record.containers {
            self.ledger.hold(&record.pod, &c.name, &c.allocation);
        }
        self.pods.insert(uid.to_owned(), record.clone());
        Ok(record)
    }
}

/// The providers that are not held (`held`: per provider, why it is), in
/// call order.
fn live<'a>(
    providers: &'a mut [LoadedProvider],
    held: &'a [Option<String>],
) -> impl Iterator<Item = &'a mut LoadedProvider> {
    providers
        .iter_mut()
        .zip(held)
        .filter(|(_, held)| held.is_none())
        .map(|(p, _)| p)
}

/// The resources `pod` asks for: a request or limit above 0 in any
/// container (init included) or at pod level, in name order.
fn asked_resources(pod: &PodView) -> Vec<String> {
    let containers = pod.init_containers.iter().chain(&pod.containers);
    let lists = containers
        .flat_map(|c| [&c.requests, &c.limits])
        .chain(pod.resources.iter().flat_map(|r| [&r.requests, &r.limits]));
    let names: std::collections::BTreeSet<&String> = lists
        .flat_map(|l| l.iter())
        .filter(|(_, amount)| **amount > 0)
        .map(|(name, _)| name)
        .collect();
    names.into_iter().cloned().collect()
}

/// A variable two providers set differently: (name, first value, second
/// value, index of the provider that set the first).
type EnvConflict = (String, String, String, usize);

/// Combine provider `index`'s allocation into the container's.
fn merge_allocation(
    into: &mut Allocation,
    env_from: &mut BTreeMap<String, usize>,
    a: Allocation,
    index: usize,
) -> Result<(), EnvConflict> {
    for (k, v) in &a.env {
        if let Some(old) = into.env.get(k) {
            if old != v {
                return Err((k.clone(), old.clone(), v.clone(), env_from[k]));
            }
        }
    }
    into.cpus = into.cpus.union(&a.cpus);
    into.exclusive |= a.exclusive;
    into.mems = into.mems.union(a.mems);
    for (k, v) in a.devices {
        into.devices.entry(k).or_default().extend(v);
    }
    for (k, v) in a.env {
        env_from.entry(k.clone()).or_insert(index);
        into.env.insert(k, v);
    }
    Ok(())
}

fn describe(set: &Option<HintSet>) -> String {
    match set {
        None => "any NUMA node".to_string(),
        Some(HintSet::Explicit(v)) if v.is_empty() => {
            "cannot be satisfied on any NUMA node".to_string()
        }
        Some(HintSet::Explicit(v)) => {
            let preferred: Vec<String> = v
                .iter()
                .filter(|h| h.preferred)
                .map(|h| h.affinity.map_or("any".to_string(), |m| format!("{{{m}}}")))
                .collect();
            if preferred.is_empty() {
                let widths: Vec<String> = v
                    .iter()
                    .filter_map(|h| h.affinity)
                    .map(|m| format!("{{{m}}}"))
                    .take(4)
                    .collect();
                format!("no preferred placement (fits on {})", widths.join(" or "))
            } else {
                let n = preferred.len();
                let mut s = preferred
                    .into_iter()
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(" or ");
                if n > 4 {
                    let _ = write!(s, " (+{} more)", n - 4);
                }
                format!("preferred on {s}")
            }
        }
        Some(HintSet::Compact(c)) => format!(
            "fits on {} (preferred at {} node(s))",
            compact_summary(c, 4),
            c.preferred_width
        ),
    }
}

/// A compact hint set in words: each interval as `{0} or larger` (no bound)
/// or `{0} up to {0-3}`, at most `limit` of them.
pub fn compact_summary(c: &topomgr_sdk::CompactHints, limit: usize) -> String {
    let all = c.minimal.len();
    let mut parts: Vec<String> = c
        .intervals()
        .take(limit)
        .map(|(lo, hi)| {
            if c.within.is_empty() {
                format!("{{{lo}}} or larger")
            } else {
                format!("{{{lo}}} up to {{{hi}}}")
            }
        })
        .collect();
    if all > limit {
        parts.push(format!("{} more", all - limit));
    }
    parts.join(", ")
}

/// An amount of `resource` as Kubernetes writes it: CPUs from millicores
/// (`2`, `1500m`), memory and hugepages in binary units (`4Gi`), other
/// resources as counts.
fn amount(resource: &str, v: u64) -> String {
    if resource == "cpu" {
        if v.is_multiple_of(1000) {
            (v / 1000).to_string()
        } else {
            format!("{v}m")
        }
    } else if resource == "memory" || resource.starts_with("hugepages-") {
        topomgr_sdk::quantity::BinarySi(v).to_string()
    } else {
        v.to_string()
    }
}

/// Which resources could not be aligned, and what each provider offered;
/// `amounts` adds the numbers of a resource no placement satisfies
/// ([`Admitter::capacity_notes`]).
/// Whether some hint of `set` places the resource on one NUMA node (or
/// anywhere: a hint without affinity).
fn fits_one_node(set: &HintSet) -> bool {
    match set {
        HintSet::Explicit(v) => v.iter().any(|h| h.affinity.is_none_or(|m| m.len() == 1)),
        HintSet::Compact(c) => c.min_width().is_some_and(|w| w <= 1),
    }
}

fn rejection_message(
    policy: &Policy,
    container: Option<&str>,
    hints: &[(String, ProviderHints)],
    amounts: &BTreeMap<(String, String), String>,
) -> String {
    let mut parts = Vec::new();
    for (provider, h) in hints {
        if let Some(map) = h {
            for (resource, set) in map {
                if set.is_some() {
                    let mut part = format!("{resource} ({provider}): {}", describe(set));
                    if let Some(n) = amounts.get(&(provider.clone(), resource.clone())) {
                        let _ = write!(part, " ({n})");
                    }
                    parts.push(part);
                }
            }
        }
    }
    let what = match container {
        Some(c) => format!("container {c:?}"),
        None => "the pod".to_string(),
    };
    let rule = match policy.name() {
        PolicyName::SingleNumaNode => "needs every resource on one common NUMA node",
        _ => "needs a NUMA placement that every resource prefers",
    };
    format!(
        "Resources cannot be allocated with Topology Locality: {what} {rule} (policy {}); {}",
        policy.name(),
        if parts.is_empty() {
            "no provider offered a placement".to_string()
        } else {
            parts.join("; ")
        }
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use topomgr_sdk::testkit::FakeProvider;
    use topomgr_sdk::{CpuSet, NumaMask, ProviderError, QosClass};

    use super::*;
    use crate::numa::NumaInfo;
    use crate::provider::fakes::{self, Log};

    /// An in-process provider scripted per container name: it logs every
    /// call, answers `hints` per container and `pod_hints` for the pod,
    /// refuses to allocate for container `fail_for`, and allocates `alloc`
    /// (by default CPUs 2-3, shared, and the hint's nodes as memory).
    fn scripted(
        name: &str,
        hints: BTreeMap<String, ProviderHints>,
        pod_hints: ProviderHints,
        fail_for: Option<String>,
        log: &Log,
        alloc: Option<Allocation>,
        owns: Option<Vec<&'static str>>,
    ) -> LoadedProvider {
        let logger = |log: &Log| {
            let (log, name) = (log.clone(), name.to_owned());
            move |what: String| log.lock().unwrap().push(format!("{name}:{what}"))
        };
        let (on_hints, on_pod_hints, on_allocate, on_release) =
            (logger(log), logger(log), logger(log), logger(log));
        let owned_devices = owns.clone();
        let fake = FakeProvider::new()
            .with_hints(move |_, c| {
                on_hints(format!("hints:{}", c.name));
                Ok(hints.get(&c.name).cloned().flatten())
            })
            .with_pod_hints(move |_| {
                on_pod_hints("pod_hints".to_owned());
                Ok(pod_hints.clone())
            })
            .with_allocate(move |p, c, hint| {
                let aff = hint.affinity.map_or("any".to_string(), |m| m.to_string());
                on_allocate(format!("allocate:{}:{}", c.name, aff));
                if fail_for.as_deref() == Some(c.name.as_str()) {
                    return Err(ProviderError::new(
                        "OutOfWidgets",
                        "no widgets left on node 1",
                    ));
                }
                if let Some(a) = &alloc {
                    // Like a device provider: the devices the container
                    // requests of the extended resources it owns.
                    let mut a = a.clone();
                    for r in owned_devices.iter().flatten() {
                        let n = c.request(r);
                        if n > 0 && r.contains('/') && !a.devices.contains_key(*r) {
                            let ids = (0..n).map(|k| format!("{}-{}-{k}", p.uid, c.name));
                            a.devices.insert((*r).to_owned(), ids.collect());
                        }
                    }
                    return Ok(a);
                }
                Ok(Allocation::default()
                    .with_cpus(CpuSet::parse("2-3").unwrap(), false)
                    .with_mems(hint.affinity.unwrap_or(NumaMask::EMPTY)))
            })
            .with_release(move |_, c| {
                on_release(format!("release:{c}"));
                Ok(())
            })
            .with_inventory(move || {
                use topomgr_sdk::{Amounts, Inventory, ResourceInventory};
                let owns = owns.as_ref().ok_or_else(|| {
                    ProviderError::new("InventoryError", "the inventory is broken")
                })?;
                Ok(owns.iter().fold(Inventory::new(), |inv, r| {
                    inv.with_resource(*r, ResourceInventory::new(Amounts::default(), Vec::new()))
                }))
            });
        LoadedProvider::in_process(name, fake)
    }

    fn container(name: &str, sidecar: bool) -> ContainerView {
        ContainerView::new(name)
            .with_requests(BTreeMap::from([("cpu".to_string(), 1000)]))
            .with_limits(BTreeMap::from([("cpu".to_string(), 1000)]))
            .with_sidecar(sidecar)
    }

    fn pod() -> PodView {
        PodView::new("u1", "p", "default", QosClass::Guaranteed)
            .with_init_containers(vec![container("init", false)])
            .with_containers(vec![container("app", false), container("side", false)])
    }

    fn hints(masks: &[(&[u32], bool)]) -> ProviderHints {
        Some(BTreeMap::from([(
            "example.com/r".to_string(),
            Some(HintSet::Explicit(
                masks
                    .iter()
                    .map(|(n, p)| {
                        TopologyHint::new(
                            NumaMask::from_nodes(n.iter().map(|&x| i64::from(x))).unwrap(),
                            *p,
                        )
                    })
                    .collect(),
            )),
        )]))
    }

    fn fake(
        name: &str,
        per: &[(&str, ProviderHints)],
        fail_for: Option<&str>,
        log: &Log,
    ) -> LoadedProvider {
        let hints_per = per
            .iter()
            .map(|(c, h)| (c.to_string(), h.clone()))
            .collect();
        let pod_hints = hints(&[(&[1], true)]);
        scripted(
            name,
            hints_per,
            pod_hints,
            fail_for.map(str::to_string),
            log,
            None,
            Some(Vec::new()),
        )
    }

    fn giving(name: &str, alloc: Allocation, log: &Log) -> LoadedProvider {
        scripted(
            name,
            BTreeMap::new(),
            None,
            None,
            log,
            Some(alloc),
            Some(Vec::new()),
        )
    }

    /// A plugin object that records the pod argument of every call and
    /// keeps a pod handed over by [`topomgr_sdk::ffi::METHOD_SHARE_POD`].
    struct PodRecorder(Log);

    mod recorder {
        use topomgr_sdk::abi_stable::std_types::{ROption, RResult, RSlice, RStr, RString, RVec};
        use topomgr_sdk::ffi::{
            FfiError, FfiHint, FfiProvider, FfiProviderHints, METHOD_SHARE_POD,
        };

        impl FfiProvider for super::PodRecorder {
            fn topology_hints(
                &mut self,
                pod: RStr<'_>,
                _: RStr<'_>,
            ) -> RResult<FfiProviderHints, FfiError> {
                self.0.lock().unwrap().push(format!("hints {pod}"));
                RResult::ROk(ROption::RNone)
            }
            fn pod_topology_hints(&mut self, pod: RStr<'_>) -> RResult<FfiProviderHints, FfiError> {
                self.0.lock().unwrap().push(format!("pod_hints {pod}"));
                RResult::ROk(ROption::RNone)
            }
            fn allocate(
                &mut self,
                pod: RStr<'_>,
                _: RStr<'_>,
                _: FfiHint,
            ) -> RResult<RString, FfiError> {
                self.0.lock().unwrap().push(format!("allocate {pod}"));
                RResult::ROk("{}".into())
            }
            fn release(&mut self, _: RStr<'_>, _: RStr<'_>) -> RResult<(), FfiError> {
                RResult::ROk(())
            }
            fn checkpoint(&self) -> RResult<RVec<u8>, FfiError> {
                RResult::ROk(RVec::new())
            }
            fn restore(&mut self, _: RSlice<'_, u8>) -> RResult<RString, FfiError> {
                RResult::ROk("{}".into())
            }
            fn call(
                &mut self,
                method: RStr<'_>,
                request: RStr<'_>,
            ) -> RResult<ROption<RString>, FfiError> {
                if method.as_str() != METHOD_SHARE_POD {
                    return RResult::ROk(ROption::RNone);
                }
                let uid = serde_json::from_str::<serde_json::Value>(request.as_str()).unwrap()
                    ["uid"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                self.0.lock().unwrap().push(format!("share {uid}"));
                RResult::ROk(ROption::RSome("{}".into()))
            }
        }
    }

    /// An admission hands its pod to each provider once, called directly or
    /// on the provider's thread; every later call names it by an empty
    /// argument (linear time in the pod's containers, SDK `share_pod`).
    #[test]
    fn an_admission_shares_its_pod_once_with_each_provider() {
        use topomgr_sdk::abi_stable::sabi_trait::TD_Opaque;
        use topomgr_sdk::ffi::{FfiProvider_TO, ProviderHandle};

        for threaded in [false, true] {
            let log = Log::default();
            let handle = ProviderHandle::new(FfiProvider_TO::from_value(
                PodRecorder(log.clone()),
                TD_Opaque,
            ));
            let mut p = LoadedProvider::new("recorder", None, handle);
            if threaded {
                p = p.with_deadline(std::time::Duration::from_secs(60)).unwrap();
            }
            let mut adm = admitter("restricted", Scope::Container, vec![p]);
            assert!(adm.admit(&pod()).admitted);
            assert!(adm.admit(&other_pod("u2")).admitted);
            assert_eq!(
                *log.lock().unwrap(),
                [
                    "share u1",
                    "hints ",
                    "allocate ",
                    "hints ",
                    "allocate ",
                    "hints ",
                    "allocate ",
                    "share u2",
                    "hints ",
                    "allocate ",
                ],
                "threaded: {threaded}"
            );
        }
    }

    /// A provider that misses its deadline in the middle of a pod still
    /// gets the rollback's releases of the containers it already allocated
    /// (queued behind the stuck call): nothing stays held for a pod that
    /// was not admitted.
    #[test]
    fn a_rollback_against_a_stuck_provider_releases_what_it_allocated() {
        let log = Log::default();
        let (open, gate) = std::sync::mpsc::channel();
        let p = LoadedProvider::in_process(
            "stalling",
            fakes::logging(
                &log,
                fakes::Gates {
                    hints: Some(("side", gate)),
                    ..Default::default()
                },
            ),
        )
        .with_deadline(std::time::Duration::from_millis(100))
        .unwrap();
        let mut adm = admitter("best-effort", Scope::Container, vec![p]);
        let r = adm.admit(&pod());
        assert!(!r.admitted);
        assert_eq!(r.reason.as_deref(), Some(crate::provider::PROVIDER_TIMEOUT));
        assert!(adm.pods().is_empty());
        open.send(()).unwrap();
        let start = std::time::Instant::now();
        while log.lock().unwrap().len() < 4 {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "{:?}",
                log.lock().unwrap()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            *log.lock().unwrap(),
            [
                "allocate init",
                "allocate app",
                "release app",
                "release init"
            ]
        );
        assert!(!adm.providers()[0].is_stuck());
    }

    fn exclusive(cpus: &str) -> Allocation {
        Allocation::default().with_cpus(CpuSet::parse(cpus).unwrap(), true)
    }

    fn other_pod(uid: &str) -> PodView {
        PodView::new(uid, uid, "default", QosClass::Guaranteed)
            .with_containers(vec![container("app", false)])
    }

    fn admitter(policy: &str, scope: Scope, providers: Vec<LoadedProvider>) -> Admitter {
        let numa = NumaInfo::new(vec![0, 1], None).unwrap();
        Admitter::new(
            &topomgr_sdk::testkit::machine(2, 4),
            Policy::new(policy, &BTreeMap::new(), numa).unwrap(),
            scope,
            providers,
        )
    }

    #[test]
    fn container_scope_goes_init_first_and_allocates_each_in_turn() {
        let log: Log = Default::default();
        let a = fake(
            "a",
            &[
                ("init", hints(&[(&[0], true)])),
                ("app", hints(&[(&[1], true)])),
            ],
            None,
            &log,
        );
        let mut adm = admitter("restricted", Scope::Container, vec![a]);
        let r = adm.admit(&pod());
        assert!(r.admitted);
        assert_eq!(
            *log.lock().unwrap(),
            [
                "a:hints:init",
                "a:allocate:init:0",
                "a:hints:app",
                "a:allocate:app:1",
                "a:hints:side",
                "a:allocate:side:0-1"
            ]
        );
        assert_eq!(
            r.containers[1].hint,
            TopologyHint::new(NumaMask::single(1.into()), true)
        );
        assert_eq!(r.containers[1].allocation.mems.to_string(), "1");
        // Idempotent: the same uid returns the stored result without provider calls.
        let n = log.lock().unwrap().len();
        assert_eq!(adm.admit(&pod()), r);
        assert_eq!(log.lock().unwrap().len(), n);
    }

    /// A container that already holds a GPU on node 1 (assigned by the
    /// kubelet's device plugin) gets its CPUs where the GPU is: the GPU
    /// provider's hints for it come from the named call, and are merged with
    /// the CPU provider's; a provider that knows none of the devices adds
    /// nothing, and an unknown device only costs the alignment with it.
    #[test]
    fn devices_assigned_elsewhere_steer_the_merge() {
        use topomgr_sdk::testkit::FakeProvider;
        use topomgr_sdk::{
            AssignedDeviceHints, AssignedDevices as Group, AssignedResource, DeviceRef,
            ResourceMatch,
        };
        let log: Log = Default::default();
        let cpu = fake(
            "cpu",
            &[(
                "app",
                hints(&[(&[0], true), (&[1], true), (&[0, 1], false)]),
            )],
            None,
            &log,
        );
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&asked);
        let gpu = LoadedProvider::in_process(
            "gpu",
            FakeProvider::new().with_assigned_device_hints(move |r| {
                seen.lock().unwrap().push(r.clone());
                let knows = r
                    .devices
                    .iter()
                    .flat_map(|g| &g.ids)
                    .any(|d| *d == DeviceRef::Uuid("GPU-1".into()));
                Ok(if knows {
                    let on_1 = HintSet::Explicit(vec![
                        TopologyHint::new(NumaMask::single(1.into()), true),
                        TopologyHint::new(NumaMask::from_nodes([0, 1]).unwrap(), false),
                    ]);
                    AssignedDeviceHints::none().with(
                        "nvidia.com/gpu",
                        AssignedResource::new(
                            vec!["GPU-1".into()],
                            vec!["GPU-1".into()],
                            Some(on_1),
                        ),
                    )
                } else {
                    AssignedDeviceHints::none()
                })
            }),
        );
        let mut adm = admitter("single-numa-node", Scope::Container, vec![cpu, gpu]);
        let one = PodView::new("u9", "p9", "default", QosClass::Guaranteed)
            .with_containers(vec![container("app", false)]);
        let request = AssignedDevicesRequest::new(vec![Group::new(
            "NVIDIA_VISIBLE_DEVICES",
            ResourceMatch::Prefix("nvidia.com/".into()),
            vec![
                DeviceRef::Uuid("GPU-1".into()),
                DeviceRef::Uuid("GPU-7".into()),
            ],
        )]);
        let assigned = AssignedDevices::from([("app".to_owned(), request.clone())]);
        let mut trace = Vec::new();
        let r = adm.admit_assigned(&one, &assigned, &mut trace);
        assert!(r.admitted, "{r:?}");
        assert_eq!(
            r.containers[0].hint,
            TopologyHint::new(NumaMask::single(1.into()), true)
        );
        assert_eq!(*asked.lock().unwrap(), [request]);
        let gpu_hints = &trace[0].hints[1];
        assert_eq!(gpu_hints.0, "gpu");
        assert!(gpu_hints.1.as_ref().unwrap().contains_key("nvidia.com/gpu"));
        // Without the devices the CPU provider alone picks node 0.
        let other = PodView::new("u10", "p10", "default", QosClass::Guaranteed)
            .with_containers(vec![container("app", false)]);
        let r = adm.admit(&other);
        assert_eq!(
            r.containers[0].hint,
            TopologyHint::new(NumaMask::single(0.into()), true)
        );
        assert_eq!(
            asked.lock().unwrap().len(),
            1,
            "no assigned devices, no call"
        );
    }

    /// CDI devices (DRA) that no provider lists count by their PCI
    /// device's NUMA node: a container with one on node 1 gets node 1; one
    /// whose devices span both nodes is refused under single-numa-node,
    /// the message naming the devices; with the switch off they are only
    /// logged; a device a provider lists is the provider's alone.
    #[test]
    fn cdi_devices_no_provider_lists_count_by_their_pci_numa_node() {
        use topomgr_sdk::{AssignedDevices as Group, DeviceNode, DeviceRef, PciDevice};
        let base = topomgr_sdk::testkit::machine(2, 4);
        let machine = Machine::new(
            base.numa_nodes.clone(),
            base.cpus.clone(),
            vec![
                PciDevice::new(
                    "0000:17:00.0",
                    "0x15b3",
                    "0x101d",
                    "0x020000",
                    Some(0.into()),
                ),
                PciDevice::new(
                    "0000:af:00.0",
                    "0x15b3",
                    "0x101d",
                    "0x020000",
                    Some(1.into()),
                ),
            ],
        );
        let log: Log = Default::default();
        let cpu = fake(
            "cpu",
            &[(
                "app",
                hints(&[(&[0], true), (&[1], true), (&[0, 1], false)]),
            )],
            None,
            &log,
        );
        let numa = NumaInfo::new(vec![0, 1], None).unwrap();
        let mut adm = Admitter::new(
            &machine,
            Policy::new("single-numa-node", &BTreeMap::new(), numa).unwrap(),
            Scope::Container,
            vec![cpu],
        );
        let cdi = |name: &str, addresses: &[&str]| {
            Group::new(
                format!("CDI device example.org/nic={name}"),
                ResourceMatch::Prefix(String::new()),
                addresses
                    .iter()
                    .map(|a| DeviceRef::PciAddress((*a).to_owned()))
                    .collect(),
            )
            .with_nodes(vec![DeviceNode::new(
                format!("/dev/infiniband/{name}"),
                "c",
                231,
                1,
            )])
        };
        let pod = |uid: &str| {
            PodView::new(uid, uid, "default", QosClass::Guaranteed)
                .with_containers(vec![container("app", false)])
        };
        let with = |groups: Vec<Group>| {
            AssignedDevices::from([("app".to_owned(), AssignedDevicesRequest::new(groups))])
        };
        let mut trace = Vec::new();
        let r = adm.admit_assigned(
            &pod("on-1"),
            &with(vec![cdi("a", &["0000:af:00.0"])]),
            &mut trace,
        );
        assert!(r.admitted, "{r:?}");
        assert_eq!(
            r.containers[0].hint,
            TopologyHint::new(NumaMask::single(1.into()), true)
        );
        assert_eq!(trace[0].hints[1].0, UNKNOWN_DEVICES);
        assert!(trace[0].hints[1]
            .1
            .as_ref()
            .unwrap()
            .contains_key("CDI device example.org/nic=a (0000:af:00.0)"));

        let r = adm.admit_assigned(
            &pod("spans"),
            &with(vec![
                cdi("a", &["0000:af:00.0"]),
                cdi("b", &["0000:17:00.0"]),
            ]),
            &mut Vec::new(),
        );
        assert!(!r.admitted);
        let message = r.message.clone().unwrap_or_default();
        assert_eq!(
            r.reason.as_deref(),
            Some(TOPOLOGY_AFFINITY_ERROR),
            "{message}"
        );
        assert!(
            message.contains("CDI device example.org/nic=a (0000:af:00.0)")
                && message.contains("CDI device example.org/nic=b (0000:17:00.0)"),
            "{message}"
        );

        adm.set_align_unknown_devices(false);
        let r = adm.admit_assigned(
            &pod("off"),
            &with(vec![
                cdi("a", &["0000:af:00.0"]),
                cdi("b", &["0000:17:00.0"]),
            ]),
            &mut Vec::new(),
        );
        assert!(r.admitted, "{r:?}");
        assert_eq!(
            r.containers[0].hint,
            TopologyHint::new(NumaMask::single(0.into()), true),
            "the CPU provider alone decides"
        );
    }

    #[test]
    fn pod_scope_hands_one_hint_to_every_container() {
        let log: Log = Default::default();
        let a = fake("a", &[], None, &log);
        let mut adm = admitter("single-numa-node", Scope::Pod, vec![a]);
        let r = adm.admit(&pod());
        assert!(r.admitted);
        assert_eq!(
            *log.lock().unwrap(),
            [
                "a:pod_hints",
                "a:allocate:init:1",
                "a:allocate:app:1",
                "a:allocate:side:1"
            ]
        );
    }

    #[test]
    fn failing_allocate_rolls_back_everything() {
        let log: Log = Default::default();
        let a = fake("a", &[], None, &log);
        let b = fake("b", &[], Some("app"), &log);
        let mut adm = admitter("best-effort", Scope::Container, vec![a, b]);
        let r = adm.admit(&pod());
        assert!(!r.admitted);
        assert_eq!(r.reason.as_deref(), Some("OutOfWidgets"));
        assert_eq!(
            r.message.as_deref(),
            Some("provider \"b\" could not allocate container \"app\": no widgets left on node 1")
        );
        let l = log.lock().unwrap().clone();
        let tail: Vec<&str> = l
            .iter()
            .skip_while(|s| *s != "b:allocate:app:0-1")
            .map(String::as_str)
            .collect();
        assert_eq!(
            tail,
            [
                "b:allocate:app:0-1",
                "a:release:app",
                "a:release:init",
                "b:release:init"
            ]
        );
        assert!(adm.pods().is_empty());
    }

    /// A provider that can place nothing: empty hints for `cpu` and
    /// `memory`, and an inventory of two NUMA nodes.
    fn full() -> FakeProvider {
        let nothing = || {
            Ok(Some(BTreeMap::from([
                ("cpu".to_string(), Some(HintSet::unsatisfiable())),
                ("memory".to_string(), Some(HintSet::unsatisfiable())),
            ])))
        };
        FakeProvider::new()
            .with_hints(move |_, _| nothing())
            .with_pod_hints(move |_| nothing())
            .with_allocate(|_, _, _| Err(ProviderError::admission("never asked")))
            .with_inventory(|| {
                use topomgr_sdk::{Amounts, Inventory, ResourceInventory, Zone};
                let zone = |n: u32, alloc: u64, free: u64| {
                    Zone::new(
                        Some(topomgr_sdk::NumaNodeId::new(n).unwrap()),
                        Amounts::new(alloc, alloc, free),
                    )
                };
                Ok(Inventory::new()
                    .with_resource(
                        "cpu",
                        ResourceInventory::new(
                            Amounts::new(8000, 7000, 2500),
                            vec![zone(0, 3000, 1000), zone(1, 4000, 1500)],
                        ),
                    )
                    .with_resource(
                        "memory",
                        ResourceInventory::new(
                            Amounts::new(8 << 30, 8 << 30, 3 << 30),
                            vec![zone(0, 4 << 30, 1 << 30), zone(1, 4 << 30, 2 << 30)],
                        ),
                    ))
            })
    }

    /// `numa-allocation-strategy` reads the providers' inventories: node 1
    /// is the busier, so packing places there and the default does not; a
    /// provider whose inventory fails leaves its resources uncontended.
    #[test]
    fn the_allocation_strategy_ranks_by_the_providers_inventories() {
        let provider = |inventory_fails: bool| {
            let both = || {
                Ok(Some(BTreeMap::from([(
                    "cpu".to_string(),
                    Some(HintSet::Explicit(vec![
                        TopologyHint::new(NumaMask::from_nodes([0]).unwrap(), true),
                        TopologyHint::new(NumaMask::from_nodes([1]).unwrap(), true),
                    ])),
                )])))
            };
            FakeProvider::new()
                .with_hints(move |_, _| both())
                .with_pod_hints(move |_| both())
                .with_allocate(|_, _, _| Ok(Allocation::default()))
                .with_inventory(move || {
                    use topomgr_sdk::{Amounts, Inventory, ResourceInventory, Zone};
                    if inventory_fails {
                        return Err(ProviderError::new("InventoryError", "broken"));
                    }
                    let zone = |n: u8, free: u64| {
                        Zone::new(Some(n.into()), Amounts::new(4000, 4000, free))
                    };
                    Ok(Inventory::new().with_resource(
                        "cpu",
                        ResourceInventory::new(
                            Amounts::new(8000, 8000, 4000),
                            vec![zone(0, 3000), zone(1, 1000)],
                        ),
                    ))
                })
        };
        let numa = || NumaInfo::new(vec![0, 1], None).unwrap();
        for (strategy, fails, want) in [
            ("lowest-index", false, 0),
            ("most-allocated", false, 1),
            ("least-allocated", false, 0),
            ("most-allocated", true, 0),
        ] {
            for scope in [Scope::Container, Scope::Pod] {
                let options = BTreeMap::from([(
                    "numa-allocation-strategy".to_string(),
                    strategy.to_string(),
                )]);
                let mut adm = Admitter::new(
                    &topomgr_sdk::testkit::machine(2, 4),
                    Policy::new("single-numa-node", &options, numa()).unwrap(),
                    scope,
                    vec![LoadedProvider::in_process("cpu", provider(fails))],
                );
                let r = adm.admit(&other_pod("u1"));
                assert!(r.admitted, "{strategy} {scope:?}: {:?}", r.message);
                assert_eq!(
                    r.containers[0].hint.affinity,
                    Some(NumaMask::from_nodes([want]).unwrap()),
                    "{strategy} {scope:?} (inventory fails: {fails})"
                );
            }
        }
    }

    /// A request no NUMA placement satisfies says the numbers: requested,
    /// and free/allocatable by NUMA node from the provider's inventory.
    #[test]
    fn capacity_rejections_say_the_numbers() {
        let c = |name: &str| {
            let r = BTreeMap::from([("cpu".to_string(), 4000), ("memory".to_string(), 6 << 30)]);
            ContainerView::new(name)
                .with_requests(r.clone())
                .with_limits(r)
        };
        let pod = PodView::new("u1", "p", "default", QosClass::Guaranteed)
            .with_containers(vec![c("app"), c("side")]);
        let want = |what: &str, requested: (&str, &str)| {
            format!("Resources cannot be allocated with Topology Locality: {what} needs every resource on one common NUMA node (policy single-numa-node); cpu (full): cannot be satisfied on any NUMA node (requested {}; free/allocatable by NUMA node: 0: 1/3, 1: 1500m/4); memory (full): cannot be satisfied on any NUMA node (requested {}; free/allocatable by NUMA node: 0: 1Gi/4Gi, 1: 2Gi/4Gi)", requested.0, requested.1)
        };
        for (scope, what, requested) in [
            (Scope::Container, "container \"app\"", ("4", "6Gi")),
            (Scope::Pod, "the pod", ("8", "12Gi")),
        ] {
            let full = LoadedProvider::in_process("full", full());
            let mut adm = admitter("single-numa-node", scope, vec![full]);
            let r = adm.admit(&pod);
            assert_eq!(r.reason.as_deref(), Some(TOPOLOGY_AFFINITY_ERROR));
            assert_eq!(r.message.unwrap(), want(what, requested));
        }
    }

    #[test]
    fn amounts_are_written_as_kubernetes_quantities() {
        assert_eq!(amount("cpu", 2000), "2");
        assert_eq!(amount("cpu", 1500), "1500m");
        assert_eq!(amount("memory", 3 << 30), "3Gi");
        assert_eq!(amount("hugepages-2Mi", 4 << 20), "4Mi");
        assert_eq!(amount("nvidia.com/gpu", 2), "2");
    }

    #[test]
    fn topology_rejection_names_resources_and_releases() {
        let log: Log = Default::default();
        let a = fake(
            "cpu",
            &[("app", hints(&[(&[0], true), (&[0, 1], false)]))],
            None,
            &log,
        );
        let b = fake(
            "gpu",
            &[("app", hints(&[(&[1], true), (&[0, 1], false)]))],
            None,
            &log,
        );
        let mut adm = admitter("single-numa-node", Scope::Container, vec![a, b]);
        let r = adm.admit(&pod());
        assert!(!r.admitted);
        assert_eq!(r.reason.as_deref(), Some(TOPOLOGY_AFFINITY_ERROR));
        assert_eq!(
            r.message.as_deref(),
            Some("Resources cannot be allocated with Topology Locality: container \"app\" needs every resource on one common NUMA node (policy single-numa-node); example.com/r (cpu): preferred on {0}; example.com/r (gpu): preferred on {1}")
        );
        assert!(log
            .lock()
            .unwrap()
            .contains(&"gpu:release:init".to_string()));
    }

    #[test]
    fn bad_mask_is_refused_naming_the_provider() {
        let log: Log = Default::default();
        let a = fake("mock", &[("init", hints(&[(&[3], true)]))], None, &log);
        let mut adm = admitter("best-effort", Scope::Container, vec![a]);
        let r = adm.admit(&pod());
        assert_eq!(r.reason.as_deref(), Some(UNEXPECTED_ADMISSION_ERROR));
        assert_eq!(
            r.message.as_deref(),
            Some("provider \"mock\" returned hints for resource \"example.com/r\" naming NUMA node(s) 3, which this machine does not have (its nodes: 0-1)")
        );
    }

    #[test]
    fn release_forgets_the_pod() {
        let log: Log = Default::default();
        let mut adm = admitter("none", Scope::Pod, vec![fake("a", &[], None, &log)]);
        assert!(adm.admit(&pod()).admitted);
        // `none` asks for no hints and hands "any" to allocate.
        assert_eq!(log.lock().unwrap()[0], "a:allocate:init:any");
        adm.release("u1").unwrap();
        assert_eq!(
            adm.release("u1").unwrap_err().to_string(),
            "no admitted pod with uid \"u1\""
        );
    }

    #[test]
    fn the_ledger_refuses_a_cpu_twice_and_rolls_back() {
        let log: Log = Default::default();
        let mut adm = admitter(
            "none",
            Scope::Container,
            vec![giving("mock", exclusive("1-7"), &log)],
        );
        assert!(adm.admit(&other_pod("a")).admitted);
        let r = adm.admit(&other_pod("b"));
        assert_eq!(r.reason.as_deref(), Some(UNEXPECTED_ADMISSION_ERROR));
        assert_eq!(
            r.message.as_deref(),
            Some("provider \"mock\" gave pod default/b container \"app\" CPUs 1-7 exclusively, but CPUs 1-7 are held by pod default/a (uid a) container \"app\"")
        );
        assert_eq!(adm.take_violations(), ["mock"]);
        assert!(adm.take_violations().is_empty());
        // The refused allocation was released again in the provider.
        assert_eq!(log.lock().unwrap().last().unwrap(), "mock:release:app");
        assert_eq!(adm.ledger().exclusive_cpus().to_string(), "1-7");
        adm.release("a").unwrap();
        assert!(adm.ledger().exclusive_cpus().is_empty());
        assert!(adm.admit(&other_pod("b")).admitted);

        let mut adm = admitter(
            "none",
            Scope::Container,
            vec![giving("mock", exclusive("0-1000"), &log)],
        );
        let r = adm.admit(&other_pod("c"));
        assert_eq!(
            r.message.as_deref(),
            Some("provider \"mock\" gave pod default/c container \"app\" CPUs 8-1000, which are not online CPUs of this machine (online: 0-7)")
        );
    }

    /// A resize: the providers' new parts replace the container's, judged
    /// by the ledger; a provider's refusal resizes back those that resized
    /// already and changes nothing; devices cannot be resized.
    #[test]
    fn a_resize_is_judged_by_the_ledger_and_rolled_back_on_refusal() {
        let calls: Arc<Mutex<Vec<String>>> = Default::default();
        let cpu_log = Arc::clone(&calls);
        let cpu = FakeProvider::new()
            .with_allocate(|_, _, _| Ok(exclusive("1")))
            .with_resize(move |_, c, _, _| {
                let n = c.request("cpu") / 1000;
                cpu_log.lock().unwrap().push(format!("cpu:{n}"));
                Ok(Some(exclusive(if n == 2 {
                    "1-2"
                } else if n == 3 {
                    "1-3"
                } else {
                    "1"
                })))
            });
        let mem_log = Arc::clone(&calls);
        let memory = FakeProvider::new().with_resize(move |_, c, _, _| {
            let n = c.request("cpu") / 1000;
            mem_log.lock().unwrap().push(format!("memory:{n}"));
            if n == 3 {
                return Err(ProviderError::resize_infeasible("no memory for 3"));
            }
            Ok(None)
        });
        let mut adm = admitter(
            "none",
            Scope::Container,
            vec![
                LoadedProvider::in_process("cpu", cpu),
                LoadedProvider::in_process("memory", memory),
            ],
        );
        assert!(adm.admit(&other_pod("a")).admitted);
        let sized = |uid: &str, n: u64| {
            let c = ContainerView::new("app")
                .with_requests(BTreeMap::from([("cpu".to_string(), n * 1000)]))
                .with_limits(BTreeMap::from([("cpu".to_string(), n * 1000)]));
            PodView::new(uid, uid, "default", QosClass::Guaranteed).with_containers(vec![c])
        };
        let r = adm.resize("a", "app", sized("a", 2)).unwrap();
        assert_eq!(r.containers[0].allocation.cpus.to_string(), "1-2");
        assert_eq!(adm.ledger().exclusive_cpus().to_string(), "1-2");
        assert_eq!(adm.pods()["a"].pod.containers[0].request("cpu"), 2000);

        // The memory provider refuses 3: the CPU provider is resized back.
        calls.lock().unwrap().clear();
        let err = adm.resize("a", "app", sized("a", 3)).unwrap_err();
        assert_eq!(
            (err.reason.as_str(), err.message.as_str()),
            ("ResizeInfeasible", "provider \"memory\": no memory for 3")
        );
        assert_eq!(*calls.lock().unwrap(), ["cpu:3", "memory:3", "cpu:2"]);
        assert_eq!(adm.ledger().exclusive_cpus().to_string(), "1-2");
        assert_eq!(adm.pods()["a"].pod.containers[0].request("cpu"), 2000);

        // CPUs another pod holds: the ledger refuses, nothing changes.
        let mut adm = admitter(
            "none",
            Scope::Container,
            vec![LoadedProvider::in_process(
                "cpu",
                FakeProvider::new()
                    .with_allocate(|pod, _, _| {
                        Ok(exclusive(if pod.uid == "a" { "1" } else { "2" }))
                    })
                    .with_resize(|_, _, _, _| Ok(Some(exclusive("1-2")))),
            )],
        );
        assert!(adm.admit(&other_pod("a")).admitted);
        assert!(adm.admit(&other_pod("b")).admitted);
        let err = adm.resize("a", "app", sized("a", 2)).unwrap_err();
        assert_eq!(
            err.message,
            "provider \"cpu\" gave pod default/a container \"app\" CPUs 1-2 exclusively, but CPUs 2 are held by pod default/b (uid b) container \"app\""
        );
        assert_eq!(
            adm.pods()["a"].containers[0].allocation.cpus.to_string(),
            "1"
        );
        // A pod of another uid is not this pod's resize.
        let err = adm.resize("a", "app", sized("b", 1)).unwrap_err();
        assert!(err.message.contains("is not pod a"), "{err:?}");

        // Devices cannot be resized.
        let with_gpu = |n: u64| {
            let c = ContainerView::new("app")
                .with_requests(BTreeMap::from([("example.com/gpu".to_string(), n)]))
                .with_limits(BTreeMap::from([("example.com/gpu".to_string(), n)]));
            PodView::new("a", "a", "default", QosClass::Guaranteed).with_containers(vec![c])
        };
        let err = adm.resize("a", "app", with_gpu(1)).unwrap_err();
        assert!(
            err.message
                .contains("extended resources (devices) cannot be resized"),
            "{err:?}"
        );
    }

    /// A resize's trace (issue 33, `explain`): what was asked, each
    /// provider's answer with the CPUs kept, added and given back, and the
    /// outcome; a refusal names the refusing provider, those after it are
    /// not asked, and the container keeps what it held.
    #[test]
    fn a_resize_is_traced_with_each_providers_answer() {
        use topomgr_contract::explain::ResizeAnswer;
        let node0 = NumaMask::from(topomgr_sdk::NumaNodeId::from(0u8));
        let cpu = FakeProvider::new()
            .with_allocate(|_, _, _| Ok(exclusive("1-2")))
            .with_resize(|_, c, _, _| {
                Ok(Some(exclusive(match c.request("cpu") / 1000 {
                    3 => "1-3",
                    _ => "1",
                })))
            });
        let memory = FakeProvider::new()
            .with_allocate(move |_, _, _| Ok(Allocation::default().with_mems(node0)))
            .with_resize(move |_, c, _, _| {
                if c.request("cpu") == 3000 {
                    return Err(ProviderError::resize_infeasible("no memory for 3"));
                }
                Ok(Some(Allocation::default().with_mems(node0)))
            });
        let mut adm = admitter(
            "none",
            Scope::Container,
            vec![
                LoadedProvider::in_process("cpu", cpu),
                LoadedProvider::in_process("memory", memory),
                LoadedProvider::in_process("quiet", FakeProvider::new()),
            ],
        );
        let sized = |n: u64| {
            let c = ContainerView::new("app")
                .with_requests(BTreeMap::from([("cpu".to_string(), n * 1000)]))
                .with_limits(BTreeMap::from([("cpu".to_string(), n * 1000)]));
            PodView::new("a", "a", "default", QosClass::Guaranteed).with_containers(vec![c])
        };
        assert!(adm.admit(&sized(2)).admitted);

        // 2 -> 1: CPU 1 kept, CPU 2 given back.
        let mut trace = ResizeTrace::default();
        let done = adm.resize_traced("a", "app", sized(1), &mut trace);
        let e = crate::explain::resize(&trace, done.as_ref());
        assert!(e.done && e.reason.is_none(), "{e:?}");
        assert_eq!(e.container, "app");
        let cpu = &e.resources["cpu"];
        assert_eq!((cpu.before.request, cpu.after.request), (2000, 1000));
        assert_eq!(
            (cpu.before.limit, cpu.after.limit),
            (Some(2000), Some(1000))
        );
        assert_eq!(e.before.cpus.to_string(), "1-2");
        let after = e.after.as_ref().unwrap();
        assert_eq!((after.cpus.to_string(), after.mems), ("1".into(), node0));
        let answers: Vec<(&str, ResizeAnswer)> = e
            .providers
            .iter()
            .map(|(n, a)| (n.as_str(), a.answer))
            .collect();
        assert_eq!(
            answers,
            [
                ("cpu", ResizeAnswer::Resized),
                ("memory", ResizeAnswer::Resized),
                ("quiet", ResizeAnswer::DoesNotResize)
            ]
        );
        let c = e.providers["cpu"].cpus.as_ref().unwrap();
        assert_eq!(
            (
                c.kept.to_string(),
                c.added.to_string(),
                c.returned.to_string()
            ),
            ("1".into(), "".into(), "2".into())
        );
        assert!(c.exclusive);
        assert_eq!(e.providers["memory"].mems, Some(node0));
        assert!(e.providers["memory"].cpus.is_none());

        // 1 -> 3: the memory provider refuses; the quiet one is not asked.
        let mut trace = ResizeTrace::default();
        let refused = adm.resize_traced("a", "app", sized(3), &mut trace);
        let e = crate::explain::resize(&trace, refused.as_ref());
        assert!(!e.done && e.after.is_none(), "{e:?}");
        assert_eq!(e.reason.as_deref(), Some("ResizeInfeasible"));
        assert_eq!(
            e.message.as_deref(),
            Some("provider \"memory\": no memory for 3")
        );
        assert_eq!(e.before.cpus.to_string(), "1");
        let c = e.providers["cpu"].cpus.as_ref().unwrap();
        assert_eq!(
            (
                c.kept.to_string(),
                c.added.to_string(),
                c.returned.to_string()
            ),
            ("1".into(), "2-3".into(), "".into())
        );
        let memory = &e.providers["memory"];
        assert_eq!(memory.answer, ResizeAnswer::Refused);
        assert_eq!(memory.reason.as_deref(), Some("ResizeInfeasible"));
        assert_eq!(memory.message.as_deref(), Some("no memory for 3"));
        assert_eq!(e.providers["quiet"].answer, ResizeAnswer::NotAsked);
        assert_eq!(
            adm.pods()["a"].containers[0].allocation.cpus.to_string(),
            "1",
            "nothing changed"
        );

        // Refused before any provider is asked: the reason, no answers.
        let mut trace = ResizeTrace::default();
        let refused = adm.resize_traced("a", "nope", sized(1), &mut trace);
        let e = crate::explain::resize(&trace, refused.as_ref());
        assert!(!e.done && e.providers.is_empty(), "{e:?}");
        assert_eq!(e.reason.as_deref(), Some(UNEXPECTED_ADMISSION_ERROR));
    }

    #[test]
    fn contradicting_environments_are_refused() {
        let log: Log = Default::default();
        let env = |v: &str| Allocation::default().with_env("DEV", v);
        let mut adm = admitter(
            "none",
            Scope::Container,
            vec![
                giving("gpu", env("0"), &log),
                giving("same", env("0"), &log),
                giving("nic", env("1"), &log),
            ],
        );
        let r = adm.admit(&other_pod("a"));
        assert_eq!(r.reason.as_deref(), Some(UNEXPECTED_ADMISSION_ERROR));
        assert_eq!(
            r.message.as_deref(),
            Some("providers \"gpu\" and \"nic\" set environment variable \"DEV\" of container \"app\" to different values (\"0\" and \"1\"); topomgr refuses contradicting environments")
        );
        let l = log.lock().unwrap().clone();
        assert_eq!(
            &l[l.len() - 3..],
            ["gpu:release:app", "same:release:app", "nic:release:app"]
        );
    }

    #[test]
    fn same_uid_other_spec_is_a_conflict_and_too_many_containers_are_refused() {
        let log: Log = Default::default();
        let mut adm = admitter("none", Scope::Container, vec![fake("a", &[], None, &log)]);
        let first = adm.admit(&other_pod("u"));
        assert!(first.admitted);
        assert_eq!(adm.admit(&other_pod("u")), first);
        let mut changed = other_pod("u");
        changed.name = "renamed".into();
        let r = adm.admit(&changed);
        assert_eq!(
            (r.reason.as_deref(), r.message.as_deref()),
            (
                Some(UID_CONFLICT),
                Some("pod uid \"u\" is already admitted as default/u with a different spec; release it first, or give the new pod its own uid")
            )
        );
        assert_eq!(adm.pods()["u"], first);
        let mut big = other_pod("big");
        big.containers = (0..=MAX_CONTAINERS_PER_POD)
            .map(|i| container(&format!("c{i}"), false))
            .collect();
        let r = adm.admit(&big);
        assert_eq!(r.reason.as_deref(), Some(TOO_MANY_CONTAINERS));
        assert_eq!(
            r.message.as_deref(),
            Some("pod default/big has 1025 containers (init and app); topomgr admits at most 1024 per pod")
        );
    }

    /// A provider owning `owns` (`None`: its inventory fails) that gives
    /// every container `alloc`.
    fn owning(
        name: &str,
        owns: Option<Vec<&'static str>>,
        alloc: Allocation,
        log: &Log,
    ) -> LoadedProvider {
        scripted(name, BTreeMap::new(), None, None, log, Some(alloc), owns)
    }

    /// A pod of one container `app` asking for `asks` (requests = limits),
    /// and an init container asking for `init`.
    fn asking(uid: &str, asks: &[(&str, u64)], init: &[(&str, u64)]) -> PodView {
        let c = |name: &str, r: &[(&str, u64)]| {
            let list: BTreeMap<String, u64> = r.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            ContainerView::new(name)
                .with_requests(list.clone())
                .with_limits(list)
        };
        let init = if init.is_empty() {
            Vec::new()
        } else {
            vec![c("init", init)]
        };
        PodView::new(uid, uid, "default", QosClass::Burstable)
            .with_init_containers(init)
            .with_containers(vec![c("app", asks)])
    }

    /// The CPU provider (owning `cpu`) holds CPUs 2-3 for pod `a`, the
    /// device provider a widget; then the CPU provider is held.
    fn held_cpu(log: &Log) -> Admitter {
        let cpus = owning(
            "cpu",
            Some(vec!["cpu"]),
            Allocation::default().with_cpus(CpuSet::parse("2-3").unwrap(), true),
            log,
        );
        let widgets = owning(
            "widgets",
            Some(vec!["example.com/widget"]),
            Allocation::default(),
            log,
        );
        let mut adm = admitter("best-effort", Scope::Container, vec![cpus, widgets]);
        assert!(adm.admit(&asking("a", &[("cpu", 2000)], &[])).admitted);
        adm.hold(
            "cpu",
            "the saved state is not a checkpoint of this CPU provider".to_owned(),
        );
        adm
    }

    /// While the CPU provider is held, a BestEffort pod and a pod asking
    /// only for another provider's resource are admitted by the others;
    /// the held provider is not called for them and gives them nothing.
    #[test]
    fn a_held_provider_holds_only_its_own_resources() {
        let log: Log = Default::default();
        let mut adm = held_cpu(&log);
        assert_eq!(
            adm.held(),
            [(
                "cpu",
                "the saved state is not a checkpoint of this CPU provider"
            )]
        );
        let n = log.lock().unwrap().len();
        let best_effort = PodView::new("be", "be", "default", QosClass::BestEffort)
            .with_containers(vec![ContainerView::new("app")]);
        let r = adm.admit(&best_effort);
        assert!(r.admitted, "{r:?}");
        assert!(r.containers[0].allocation.cpus.is_empty());
        let r = adm.admit(&asking("w", &[("example.com/widget", 1)], &[]));
        assert!(r.admitted, "{r:?}");
        assert!(r.containers[0].allocation.cpus.is_empty());
        // A zero request asks for nothing.
        let r = adm.admit(&asking("z", &[("cpu", 0), ("example.com/widget", 1)], &[]));
        assert!(r.admitted, "{r:?}");
        let calls: Vec<String> = log.lock().unwrap()[n..].to_vec();
        assert_eq!(
            calls,
            [
                "widgets:hints:app",
                "widgets:allocate:app:0-1",
                "widgets:hints:app",
                "widgets:allocate:app:0-1",
                "widgets:hints:app",
                "widgets:allocate:app:0-1"
            ],
            "the held provider is not called"
        );
        // What the held provider gave `a` stays `a`'s in the ledger.
        assert_eq!(adm.ledger().exclusive_cpus().to_string(), "2-3");
    }

    /// A pod asking for the held provider's resource (in any container,
    /// init included) is refused naming the provider, the resource, why it
    /// is held and what to do; nothing is called or held for it.
    #[test]
    fn a_pod_asking_for_a_held_providers_resource_is_refused() {
        let log: Log = Default::default();
        let mut adm = held_cpu(&log);
        let n = log.lock().unwrap().len();
        let want = |pod: &str| {
            format!("pod default/{pod} cannot be admitted: provider \"cpu\" is held and the pod asks for cpu, which it serves. It is held because it cannot read its saved state (the saved state is not a checkpoint of this CPU provider); pods asking for none of its resources are still admitted, and admitted pods can be listed and released. Configure the provider library that wrote that state under the name \"cpu\" again (or a version that reads it) and restart topomgr or send the daemon SIGHUP")
        };
        for pod in [
            asking("c", &[("cpu", 500), ("example.com/widget", 1)], &[]),
            asking("i", &[("example.com/widget", 1)], &[("cpu", 1000)]),
        ] {
            let r = adm.admit(&pod);
            assert!(!r.admitted);
            assert_eq!(r.reason.as_deref(), Some(PROVIDER_HELD));
            assert_eq!(r.message.unwrap(), want(&pod.uid));
            assert!(!adm.pods().contains_key(&pod.uid));
        }
        assert_eq!(log.lock().unwrap().len(), n, "no provider was called");
        assert_eq!(adm.ledger().exclusive_cpus().to_string(), "2-3");
        // Holding it no more, it is called again.
        adm.clear_holds();
        assert!(adm.held().is_empty());
        adm.release("a").unwrap();
        assert!(adm.admit(&asking("c", &[("cpu", 500)], &[])).admitted);
        assert_eq!(log.lock().unwrap()[n], "cpu:release:app");
    }

    /// A held provider whose inventory fails counts as serving everything a
    /// pod asks for; a pod asking for nothing is still admitted.
    #[test]
    fn a_held_provider_that_cannot_say_what_it_serves_refuses_what_is_asked() {
        let log: Log = Default::default();
        let broken = owning("gpu", None, Allocation::default(), &log);
        let mut adm = admitter("none", Scope::Container, vec![broken]);
        adm.hold("gpu", "unreadable".to_owned());
        let r = adm.admit(&asking("m", &[("memory", 1 << 20)], &[]));
        assert_eq!(r.reason.as_deref(), Some(PROVIDER_HELD));
        assert_eq!(
            r.message.as_deref(),
            Some("pod default/m cannot be admitted: provider \"gpu\" is held and it could not say which resources it serves (the inventory is broken), so the pod's memory may be its. It is held because it cannot read its saved state (unreadable); pods asking for none of its resources are still admitted, and admitted pods can be listed and released. Configure the provider library that wrote that state under the name \"gpu\" again (or a version that reads it) and restart topomgr or send the daemon SIGHUP")
        );
        let best_effort = PodView::new("be", "be", "default", QosClass::BestEffort)
            .with_containers(vec![ContainerView::new("app")]);
        assert!(adm.admit(&best_effort).admitted);
    }

    /// Releases skip the held provider (the state layer keeps them for
    /// it); the others release as usual.
    #[test]
    fn a_release_is_not_given_to_a_held_provider() {
        let log: Log = Default::default();
        let mut adm = held_cpu(&log);
        assert!(
            adm.admit(&asking("w", &[("example.com/widget", 1)], &[]))
                .admitted
        );
        let n = log.lock().unwrap().len();
        adm.release("a").unwrap();
        adm.release("w").unwrap();
        assert_eq!(
            log.lock().unwrap()[n..],
            ["widgets:release:app", "widgets:release:app"]
        );
        assert!(adm.ledger().exclusive_cpus().is_empty());
        assert!(adm.pods().is_empty());
    }
}
