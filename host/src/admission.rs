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

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use topomgr_sdk::{Allocation, ContainerView, HintSet, PodView, ProviderHints, TopologyHint};
use tracing::{debug, info, warn};

use crate::merge::MergeOutcome;
use crate::policy::{Decision, Policy, PolicyName, Scope};
use crate::provider::HintProvider;

/// The kubelet's reason for a topology rejection.
pub const TOPOLOGY_AFFINITY_ERROR: &str = "TopologyAffinityError";
/// Reason for a provider that misbehaved (bad hints, failed call).
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";

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

impl AdmitResult {
    /// The documented JSON of one admission (SPEC section 6): what
    /// `topomgr admit` prints per pod and what the daemon answers.
    pub fn to_json(&self) -> serde_json::Value {
        let containers: Vec<serde_json::Value> = self
            .containers
            .iter()
            .map(|c| {
                serde_json::json!({
                    "name": c.name,
                    "affinity": c.hint.affinity,
                    "preferred": c.hint.preferred,
                    "cpus": c.allocation.cpus.to_string(),
                    "exclusive": c.allocation.exclusive,
                    "mems": c.allocation.mems.to_string(),
                    "devices": c.allocation.devices,
                    "env": c.allocation.env,
                })
            })
            .collect();
        serde_json::json!({
            "uid": self.pod.uid,
            "name": self.pod.name,
            "namespace": self.pod.namespace,
            "qos": self.pod.qos.as_str(),
            "admitted": self.admitted,
            "reason": self.reason,
            "message": self.message,
            "containers": containers,
        })
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

/// Owns providers, policy and admitted pods; admits one pod at a time.
pub struct Admitter {
    policy: Policy,
    scope: Scope,
    providers: Vec<Box<dyn HintProvider>>,
    pods: BTreeMap<String, AdmitResult>,
}

struct Rejection {
    reason: String,
    message: String,
}

impl Admitter {
    /// A new admitter over loaded providers (called in this order).
    pub fn new(policy: Policy, scope: Scope, providers: Vec<Box<dyn HintProvider>>) -> Self {
        Admitter {
            policy,
            scope,
            providers,
            pods: BTreeMap::new(),
        }
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
    pub fn providers(&self) -> &[Box<dyn HintProvider>] {
        &self.providers
    }

    /// Mutable access to the providers (checkpoint / restore).
    pub fn providers_mut(&mut self) -> &mut [Box<dyn HintProvider>] {
        &mut self.providers
    }

    /// Admitted pods by uid.
    pub fn pods(&self) -> &BTreeMap<String, AdmitResult> {
        &self.pods
    }

    /// Replace the table of admitted pods (after a restore).
    pub fn set_pods(&mut self, pods: BTreeMap<String, AdmitResult>) {
        self.pods = pods;
    }

    /// Admit `pod`. Admitting a uid that is already admitted returns the
    /// stored result unchanged (idempotent retries).
    pub fn admit(&mut self, pod: &PodView) -> AdmitResult {
        self.admit_traced(pod, &mut Vec::new())
    }

    /// [`Admitter::admit`], recording every decision into `trace`.
    pub fn admit_traced(&mut self, pod: &PodView, trace: &mut Vec<TraceStep>) -> AdmitResult {
        if let Some(existing) = self.pods.get(&pod.uid) {
            debug!(pod = %pod.uid, "pod already admitted; returning stored result");
            return existing.clone();
        }
        let mut done: Vec<ContainerResult> = Vec::new();
        let outcome = match self.scope {
            Scope::Pod if self.policy.name() != PolicyName::None => {
                self.admit_pod_scope(pod, &mut done, trace)
            }
            _ => self.admit_container_scope(pod, &mut done, trace),
        };
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

    fn ordered_containers(pod: &PodView) -> impl Iterator<Item = &ContainerView> {
        pod.init_containers.iter().chain(&pod.containers)
    }

    fn admit_container_scope(
        &mut self,
        pod: &PodView,
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
                let hints = self.collect(|p| p.topology_hints(pod, container))?;
                self.decide(Some(&container.name), hints, trace)?
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
        done: &mut Vec<ContainerResult>,
        trace: &mut Vec<TraceStep>,
    ) -> Result<(), Rejection> {
        let hints = self.collect(|p| p.pod_topology_hints(pod))?;
        let decision = self.decide(None, hints, trace)?;
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

    /// Ask every provider for hints.
    fn collect(
        &mut self,
        mut ask: impl FnMut(&mut dyn HintProvider) -> Result<ProviderHints, topomgr_sdk::ProviderError>,
    ) -> Result<Vec<(String, ProviderHints)>, Rejection> {
        let mut all = Vec::with_capacity(self.providers.len());
        for p in &mut self.providers {
            match ask(p.as_mut()) {
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

    fn decide(
        &self,
        container: Option<&str>,
        hints: Vec<(String, ProviderHints)>,
        trace: &mut Vec<TraceStep>,
    ) -> Result<Decision, Rejection> {
        let refs: Vec<(&str, &ProviderHints)> =
            hints.iter().map(|(n, h)| (n.as_str(), h)).collect();
        let (decision, merge) = self.policy.decide_traced(&refs).map_err(|e| Rejection {
            reason: UNEXPECTED_ADMISSION_ERROR.to_string(),
            message: e.to_string(),
        })?;
        debug!(container = container.unwrap_or("<pod>"), affinity = ?decision.hint.affinity, preferred = decision.hint.preferred, admit = decision.admit, "merged hint");
        let rejection = (!decision.admit).then(|| Rejection {
            reason: TOPOLOGY_AFFINITY_ERROR.to_string(),
            message: rejection_message(&self.policy, container, &hints),
        });
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

    /// Allocate one container in every provider; on failure release what this
    /// container already got from earlier providers.
    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, Rejection> {
        let mut merged = Allocation::default();
        for i in 0..self.providers.len() {
            let p = &mut self.providers[i];
            match p.allocate(pod, container, hint) {
                Ok(a) => merge_allocation(&mut merged, a, p.name()),
                Err(e) => {
                    let message = format!(
                        "provider {:?} could not allocate container {:?}: {}",
                        p.name(),
                        container.name,
                        e.message
                    );
                    for q in &mut self.providers[..i] {
                        if let Err(err) = q.release(&pod.uid, &container.name) {
                            warn!(provider = q.name(), pod = %pod.uid, container = %container.name, error = %err, "release during rollback failed");
                        }
                    }
                    return Err(Rejection {
                        reason: e.reason,
                        message,
                    });
                }
            }
        }
        Ok(merged)
    }

    fn rollback(&mut self, pod: &PodView, done: &[ContainerResult]) {
        for c in done.iter().rev() {
            for p in &mut self.providers {
                if let Err(err) = p.release(&pod.uid, &c.name) {
                    warn!(provider = p.name(), pod = %pod.uid, container = %c.name, error = %err, "release during rollback failed");
                }
            }
        }
    }

    /// Release every container of an admitted pod in every provider.
    pub fn release(&mut self, uid: &str) -> Result<AdmitResult, AdmissionError> {
        let result = self
            .pods
            .remove(uid)
            .ok_or_else(|| AdmissionError::UnknownPod(uid.to_string()))?;
        let mut errors = Vec::new();
        for c in result.containers.iter().rev() {
            for p in &mut self.providers {
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

/// Combine one provider's allocation into the container's.
fn merge_allocation(into: &mut Allocation, a: Allocation, provider: &str) {
    into.cpus = into.cpus.union(&a.cpus);
    into.exclusive |= a.exclusive;
    into.mems = into.mems.or(a.mems);
    for (k, v) in a.devices {
        into.devices.entry(k).or_default().extend(v);
    }
    for (k, v) in a.env {
        if let Some(old) = into.env.get(&k) {
            if *old != v {
                warn!(provider, variable = %k, kept = %old, ignored = %v, "two providers set the same environment variable; keeping the first");
            }
            continue;
        }
        into.env.insert(k, v);
    }
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

/// Which resources could not be aligned, and what each provider offered.
fn rejection_message(
    policy: &Policy,
    container: Option<&str>,
    hints: &[(String, ProviderHints)],
) -> String {
    let mut parts = Vec::new();
    for (provider, h) in hints {
        if let Some(map) = h {
            for (resource, set) in map {
                if set.is_some() {
                    parts.push(format!("{resource} ({provider}): {}", describe(set)));
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

    use topomgr_sdk::{CpuSet, NumaMask, ProviderError, QosClass};

    use super::*;
    use crate::policy::NumaInfo;

    type Log = Arc<Mutex<Vec<String>>>;

    /// An in-process provider scripted per container name.
    struct Fake {
        name: String,
        hints: BTreeMap<String, ProviderHints>,
        pod_hints: ProviderHints,
        fail_for: Option<String>,
        log: Log,
    }

    impl HintProvider for Fake {
        fn name(&self) -> &str {
            &self.name
        }
        fn topology_hints(
            &mut self,
            _: &PodView,
            c: &ContainerView,
        ) -> Result<ProviderHints, ProviderError> {
            self.log
                .lock()
                .unwrap()
                .push(format!("{}:hints:{}", self.name, c.name));
            Ok(self.hints.get(&c.name).cloned().flatten())
        }
        fn pod_topology_hints(&mut self, _: &PodView) -> Result<ProviderHints, ProviderError> {
            self.log
                .lock()
                .unwrap()
                .push(format!("{}:pod_hints", self.name));
            Ok(self.pod_hints.clone())
        }
        fn allocate(
            &mut self,
            _: &PodView,
            c: &ContainerView,
            hint: &TopologyHint,
        ) -> Result<Allocation, ProviderError> {
            let aff = hint.affinity.map_or("any".to_string(), |m| m.to_string());
            self.log
                .lock()
                .unwrap()
                .push(format!("{}:allocate:{}:{}", self.name, c.name, aff));
            if self.fail_for.as_deref() == Some(c.name.as_str()) {
                return Err(ProviderError::new(
                    "OutOfWidgets",
                    "no widgets left on node 1",
                ));
            }
            Ok(Allocation::default()
                .with_cpus(CpuSet::parse("2-3").unwrap(), false)
                .with_mems(hint.affinity.unwrap_or(NumaMask::EMPTY)))
        }
        fn release(&mut self, _: &str, c: &str) -> Result<(), ProviderError> {
            self.log
                .lock()
                .unwrap()
                .push(format!("{}:release:{}", self.name, c));
            Ok(())
        }
        fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
            Ok(Vec::new())
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), ProviderError> {
            Ok(())
        }
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
    ) -> Box<dyn HintProvider> {
        Box::new(Fake {
            name: name.into(),
            hints: per
                .iter()
                .map(|(c, h)| (c.to_string(), h.clone()))
                .collect(),
            pod_hints: hints(&[(&[1], true)]),
            fail_for: fail_for.map(str::to_string),
            log: log.clone(),
        })
    }

    fn admitter(policy: &str, scope: Scope, providers: Vec<Box<dyn HintProvider>>) -> Admitter {
        let numa = NumaInfo::new(vec![0, 1], None).unwrap();
        Admitter::new(
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
}
