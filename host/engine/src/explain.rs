//! The decision trace of one admission as data ([`Explain`], a type of the
//! contract crate, built here): what `topomgr explain -o
//! json`, `GET /v1/pods/{uid}/explain` and `POST
//! /v1/pods?dry_run=true&explain=true` answer.
//!
//! ```json
//! {"uid": "..", "name": "..", "namespace": "..", "qos": "Guaranteed",
//!  "policy": "single-numa-node", "scope": "container",
//!  "admitted": false, "reason": "TopologyAffinityError", "message": "..",
//!  "unaligned": ["example.com/widget"],
//!  "steps": [{"container": "app",            // null: the whole pod (pod scope)
//!             "hints": {"cpu": {"cpu": [{"affinity": [0], "preferred": true}]},
//!                       "widgets": null},      // provider -> resource -> hints
//!             "merge": {"rule": "NonPreferredAtBestCount", "lists": 2,
//!                       "best_non_preferred_count": 2},   // null under policy none
//!             "affinity": [0, 1], "preferred": false, "admit": false}]}
//! ```
//!
//! Hints are shown as providers gave them, a compact hint set expanded into
//! its explicit list on machines of up to 8 NUMA nodes (the form of
//! `topomgr provider NAME hints`). `unaligned` names, for a pod the policy
//! refused, the resources of the refusing step that had no preferred hint
//! on the chosen affinity: those the policy could not align. It is empty
//! for other rejections (the `reason` then says why).

use topomgr_contract::explain;
use topomgr_sdk::{HintSet, NumaMask, NumaNodeId, ProviderHints, TopologyHint};

use crate::admission::{AdmitResult, ResizeRefusal, ResizeStep, ResizeTrace, TraceStep};
use crate::merge::MergeRule;
use crate::policy::{PolicyName, Scope};

pub use topomgr_contract::explain::{
    Explain, ExplainResize, ExplainStep, MergeSummary, RESIZES_KEPT,
};

/// The wire spelling of a policy.
fn wire_policy(p: PolicyName) -> explain::Policy {
    match p {
        PolicyName::None => explain::Policy::None,
        PolicyName::BestEffort => explain::Policy::BestEffort,
        PolicyName::Restricted => explain::Policy::Restricted,
        PolicyName::SingleNumaNode => explain::Policy::SingleNumaNode,
    }
}

/// The wire spelling of a scope.
fn wire_scope(s: Scope) -> explain::Scope {
    match s {
        Scope::Container => explain::Scope::Container,
        Scope::Pod => explain::Scope::Pod,
    }
}

/// The wire spelling of a merge rule.
fn wire_rule(r: MergeRule) -> explain::MergeRule {
    match r {
        MergeRule::Preferred => explain::MergeRule::Preferred,
        MergeRule::NonPreferredAtBestCount => explain::MergeRule::NonPreferredAtBestCount,
        MergeRule::NonPreferredNarrower => explain::MergeRule::NonPreferredNarrower,
        MergeRule::NonPreferredWider => explain::MergeRule::NonPreferredWider,
        MergeRule::NoCandidate => explain::MergeRule::NoCandidate,
    }
}

/// Expand compact hint sets on machines of up to
/// [`topomgr_sdk::hintgen::EXPLICIT_HINT_MAX_NODES`] NUMA nodes; keep them
/// compact above.
pub fn printable(hints: ProviderHints, nodes: &[NumaNodeId]) -> ProviderHints {
    let expand = nodes.len() <= topomgr_sdk::hintgen::EXPLICIT_HINT_MAX_NODES;
    hints.map(|map| {
        map.into_iter()
            .map(|(k, v)| match v {
                Some(HintSet::Compact(c)) if expand => {
                    (k, Some(HintSet::Explicit(c.expand(nodes))))
                }
                other => (k, other),
            })
            .collect()
    })
}

/// One step of the trace.
fn step(step: &TraceStep, nodes: &[NumaNodeId]) -> ExplainStep {
    ExplainStep {
        container: step.container.clone(),
        hints: step
            .hints
            .iter()
            .map(|(provider, h)| (provider.clone(), printable(h.clone(), nodes)))
            .collect(),
        merge: step.merge.as_ref().map(|m| MergeSummary {
            rule: wire_rule(m.rule),
            lists: m.lists,
            best_non_preferred_count: m.best_non_preferred_count,
        }),
        affinity: step.decision.hint.affinity,
        preferred: step.decision.hint.preferred,
        admit: step.decision.admit,
    }
}

/// The resources of a refused step that the policy could not align, in
/// provider order: with a chosen affinity, those without a preferred hint
/// on exactly it (the merged hint is the intersection of one hint per
/// resource, preferred only when all of them are); without one (the
/// single-numa-node policy found no single node), those without a preferred
/// hint on the single NUMA node that suits the most resources (the lowest
/// such node on a tie).
fn unaligned(step: &TraceStep, nodes: &[NumaNodeId]) -> Vec<String> {
    let lists: Vec<(&String, Vec<TopologyHint>)> = step
        .hints
        .iter()
        .flat_map(|(_, hints)| hints.iter().flatten())
        .filter_map(|(resource, set)| {
            let list = match set.as_ref()? {
                HintSet::Explicit(l) => l.clone(),
                HintSet::Compact(c) => c.expand(nodes),
            };
            Some((resource, list))
        })
        .collect();
    let fits = |list: &[TopologyHint], mask: &NumaMask| {
        list.iter()
            .any(|h| h.preferred && h.affinity.as_ref() == Some(mask))
    };
    let target = match step.decision.hint.affinity {
        Some(m) => m,
        None => {
            let single = |n: &NumaNodeId| NumaMask::from(*n);
            let score = |m: &NumaMask| lists.iter().filter(|(_, l)| fits(l, m)).count();
            match nodes.iter().map(single).max_by_key(|m| {
                // Most resources; on a tie the lowest node (max_by_key keeps the last).
                (score(m), std::cmp::Reverse(m.iter().next()))
            }) {
                Some(m) => m,
                None => return Vec::new(),
            }
        }
    };
    lists
        .into_iter()
        .filter(|(_, l)| !fits(l, &target))
        .map(|(r, _)| r.clone())
        .collect()
}

/// The trace of admitting `result`'s pod under `policy` and `scope` on a
/// machine of NUMA nodes `nodes`.
pub fn explain(
    policy: PolicyName,
    scope: Scope,
    nodes: &[NumaNodeId],
    result: &AdmitResult,
    trace: &[TraceStep],
) -> Explain {
    let refused = trace.iter().find(|s| !s.decision.admit);
    let unaligned = match refused {
        Some(step) if !result.admitted => unaligned(step, nodes),
        _ => Vec::new(),
    };
    let pod = &result.pod;
    Explain {
        uid: pod.uid.clone(),
        name: pod.name.clone(),
        namespace: pod.namespace.clone(),
        qos: pod.qos,
        policy: wire_policy(policy),
        scope: wire_scope(scope),
        admitted: result.admitted,
        reason: result.reason.clone(),
        message: result.message.clone(),
        unaligned,
        steps: trace.iter().map(|s| step(s, nodes)).collect(),
        resizes: Vec::new(),
    }
}

/// What `allocation` holds.
fn placement(a: &topomgr_sdk::Allocation) -> explain::Placement {
    explain::Placement {
        cpus: a.cpus.clone(),
        exclusive: a.exclusive,
        mems: a.mems,
    }
}

/// The trace of one in-place resize: `trace` as recorded by
/// [`crate::admission::Admitter::resize_traced`], `outcome` the resized
/// pod (its container's new placement) or the refusal.
pub fn resize(trace: &ResizeTrace, outcome: Result<&AdmitResult, &ResizeRefusal>) -> ExplainResize {
    let amount = |c: Option<&topomgr_sdk::ContainerView>, r: &str| explain::Amount {
        request: c.map_or(0, |c| c.request(r)),
        limit: c.and_then(|c| c.limits.get(r).copied()),
    };
    let (before, after) = (trace.before.as_ref(), trace.after.as_ref());
    let names: std::collections::BTreeSet<&String> = [before, after]
        .into_iter()
        .flatten()
        .flat_map(|c| c.requests.keys().chain(c.limits.keys()))
        .collect();
    let resources = names
        .into_iter()
        .map(|r| {
            (
                r.clone(),
                explain::ResourceChange {
                    before: amount(before, r),
                    after: amount(after, r),
                },
            )
        })
        .collect();
    let held = &trace.current.cpus;
    let providers = trace
        .providers
        .iter()
        .map(|(name, step)| {
            let mut answer = explain::ProviderResize {
                answer: explain::ResizeAnswer::Resized,
                cpus: None,
                mems: None,
                reason: None,
                message: None,
            };
            match step {
                ResizeStep::Resized(a) => {
                    answer.cpus = (!a.cpus.is_empty()).then(|| explain::CpuChange {
                        cpus: a.cpus.clone(),
                        exclusive: a.exclusive,
                        kept: a.cpus.intersection(held),
                        added: a.cpus.difference(held),
                        returned: held.difference(&a.cpus),
                    });
                    answer.mems = (!a.mems.is_empty()).then_some(a.mems);
                }
                ResizeStep::DoesNotResize => answer.answer = explain::ResizeAnswer::DoesNotResize,
                ResizeStep::Refused { reason, message } => {
                    answer.answer = explain::ResizeAnswer::Refused;
                    answer.reason = Some(reason.clone());
                    answer.message = Some(message.clone());
                }
                ResizeStep::NotAsked => answer.answer = explain::ResizeAnswer::NotAsked,
                ResizeStep::Held => answer.answer = explain::ResizeAnswer::Held,
            }
            (name.clone(), answer)
        })
        .collect();
    let (reason, message, after) = match outcome {
        Ok(r) => (
            None,
            None,
            r.containers
                .iter()
                .find(|c| c.name == trace.container)
                .map(|c| placement(&c.allocation)),
        ),
        Err(e) => (Some(e.reason.clone()), Some(e.message.clone()), None),
    };
    ExplainResize {
        container: trace.container.clone(),
        done: outcome.is_ok(),
        reason,
        message,
        resources,
        before: placement(&trace.current),
        after,
        providers,
    }
}

/// What a trace is read against: the policy, the scope and the machine's
/// NUMA nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The policy.
    pub policy: PolicyName,
    /// The scope.
    pub scope: Scope,
    /// The machine's NUMA nodes.
    pub nodes: Vec<NumaNodeId>,
}

impl Setting {
    /// The setting of `admitter`.
    pub fn of(admitter: &crate::admission::Admitter) -> Setting {
        Setting {
            policy: admitter.policy().name(),
            scope: admitter.scope(),
            nodes: admitter.policy().numa().default_mask().iter().collect(),
        }
    }
}

/// One admission with its trace, kept as it was made; [`Traced::explain`]
/// builds the answer when it is asked for.
#[derive(Debug, Clone)]
pub struct Traced {
    /// Policy, scope, nodes.
    pub setting: std::sync::Arc<Setting>,
    /// The admission.
    pub result: AdmitResult,
    /// Its decisions.
    pub trace: Vec<TraceStep>,
}

impl Traced {
    /// The trace ([`explain()`]).
    pub fn explain(&self) -> Explain {
        let s = &self.setting;
        explain(s.policy, s.scope, &s.nodes, &self.result, &self.trace)
    }
}

/// How many rejected pods' traces [`History`] keeps at most.
pub const REJECTED_KEPT: usize = 256;
/// How many bytes of rejected pods' traces (their JSON) [`History`] keeps
/// at most; the latest rejection is kept whatever its size.
pub const REJECTED_BYTES: usize = 8 << 20;

/// The daemon's traces: one per admitted pod (while it is admitted) and
/// those of the last rejected pods (at most [`REJECTED_KEPT`] and
/// [`REJECTED_BYTES`]), so a pod rejected a moment ago can still be
/// explained. A rejection keeps its trace as answered ([`Explain`]: the
/// pod's uid, name, namespace and QoS class, the decisions), never the pod:
/// a rejected manifest may be megabytes.
#[derive(Debug, Clone, Default)]
pub struct History {
    admitted: std::collections::BTreeMap<String, std::sync::Arc<Traced>>,
    rejected: std::collections::VecDeque<Rejected>,
    rejected_bytes: usize,
    /// The last [`RESIZES_KEPT`] resizes of each admitted pod.
    resizes: std::collections::BTreeMap<String, std::collections::VecDeque<ExplainResize>>,
}

/// One kept rejection.
#[derive(Debug, Clone)]
struct Rejected {
    uid: String,
    explain: std::sync::Arc<Explain>,
    bytes: usize,
}

impl History {
    /// Remember one admission.
    pub fn record(&mut self, traced: Traced) {
        let uid = traced.result.pod.uid.clone();
        if traced.result.admitted {
            // A new admission under this uid: the resizes were another's.
            self.resizes.remove(&uid);
            self.admitted.insert(uid, std::sync::Arc::new(traced));
            return;
        }
        let explain = traced.explain();
        drop(traced);
        let bytes = serde_json::to_vec(&explain).map_or(0, |json| json.len());
        if let Some(i) = self.rejected.iter().position(|r| r.uid == uid) {
            if let Some(old) = self.rejected.remove(i) {
                self.rejected_bytes -= old.bytes;
            }
        }
        self.rejected.push_back(Rejected {
            uid,
            explain: std::sync::Arc::new(explain),
            bytes,
        });
        self.rejected_bytes += bytes;
        while self.rejected.len() > 1
            && (self.rejected.len() > REJECTED_KEPT || self.rejected_bytes > REJECTED_BYTES)
        {
            if let Some(old) = self.rejected.pop_front() {
                self.rejected_bytes -= old.bytes;
            }
        }
    }

    /// Whether admitted pod `uid`'s admission trace is kept (not: it was
    /// admitted before the daemon started).
    pub fn has_admission(&self, uid: &str) -> bool {
        self.admitted.contains_key(uid)
    }

    /// Remember one resize (done or refused) of admitted pod `uid`,
    /// shown with its admission's trace; the oldest beyond
    /// [`RESIZES_KEPT`] is dropped.
    pub fn record_resize(&mut self, uid: &str, resize: ExplainResize) {
        let kept = self.resizes.entry(uid.to_owned()).or_default();
        kept.push_back(resize);
        while kept.len() > RESIZES_KEPT {
            kept.pop_front();
        }
    }

    /// Forget the admitted pods `keep` says are gone (released, or never
    /// saved), and their resizes.
    pub fn retain_admitted(&mut self, keep: impl Fn(&str) -> bool) {
        self.admitted.retain(|uid, _| keep(uid));
        self.resizes.retain(|uid, _| keep(uid));
    }

    /// The trace of `uid`: its admission while it is admitted (with its
    /// resizes since), else its latest rejection if still kept.
    pub fn get(&self, uid: &str) -> Option<Explain> {
        if let Some(traced) = self.admitted.get(uid) {
            let mut explain = traced.explain();
            explain.resizes = self
                .resizes
                .get(uid)
                .map(|r| r.iter().cloned().collect())
                .unwrap_or_default();
            return Some(explain);
        }
        self.rejected
            .iter()
            .rev()
            .find(|r| r.uid == uid)
            .map(|r| r.explain.as_ref().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traced(uid: &str, admitted: bool, n: usize) -> Traced {
        let pod = topomgr_sdk::PodView::new(
            uid,
            format!("p{n}"),
            "ns",
            topomgr_sdk::QosClass::BestEffort,
        );
        Traced {
            setting: std::sync::Arc::new(Setting {
                policy: PolicyName::None,
                scope: Scope::Container,
                nodes: Vec::new(),
            }),
            result: AdmitResult {
                pod,
                admitted,
                reason: None,
                message: None,
                containers: Vec::new(),
            },
            trace: Vec::new(),
        }
    }

    #[test]
    fn every_form_of_hints_in_a_trace_reads_back_as_written() {
        // Provider order kept; no map, a resource without preference, an
        // explicit list and a compact set (machines above 8 nodes).
        let text = r#"{"uid":"u","name":"p","namespace":"d","qos":"Burstable","policy":"single-numa-node","scope":"pod","admitted":false,"reason":"TopologyAffinityError","message":"m","unaligned":["cpu"],"steps":[{"container":null,"hints":{"widgets":null,"cpu":{"cpu":{"minimal":[[0],[1,2]],"preferred_width":1},"example.com/x":null,"memory":[{"affinity":[0],"preferred":true},{"affinity":null,"preferred":false}]}},"merge":{"rule":"NonPreferredAtBestCount","lists":2,"best_non_preferred_count":2},"affinity":null,"preferred":false,"admit":false}],"resizes":[]}"#;
        let trace: Explain = serde_json::from_str(text).unwrap();
        // An older daemon's trace, without resizes, reads as none.
        let older = text.replace(r#","resizes":[]"#, "");
        assert_eq!(serde_json::from_str::<Explain>(&older).unwrap(), trace);
        assert_eq!(trace.policy, explain::Policy::SingleNumaNode);
        assert_eq!(trace.scope, explain::Scope::Pod);
        let step = &trace.steps[0];
        assert_eq!(step.hints.keys().collect::<Vec<_>>(), ["widgets", "cpu"]);
        assert_eq!(
            step.merge.as_ref().unwrap().rule,
            explain::MergeRule::NonPreferredAtBestCount
        );
        assert_eq!(serde_json::to_string(&trace).unwrap(), text);
    }

    #[test]
    fn history_keeps_admitted_until_gone_and_the_last_rejections() {
        let mut h = History::default();
        h.record(traced("a", true, 0));
        for i in 0..REJECTED_KEPT + 1 {
            h.record(traced(&format!("r{i}"), false, i));
        }
        assert!(h.get("r0").is_none(), "the oldest rejection is dropped");
        assert_eq!(h.get("r1").unwrap().name, "p1");
        assert!(h.get("a").unwrap().admitted);
        h.retain_admitted(|u| u != "a");
        assert!(h.get("a").is_none());
        // Rejected again: one entry, the latest.
        h.record(traced("r5", false, 99));
        assert_eq!(h.get("r5").unwrap().name, "p99");
        assert_eq!(h.rejected.len(), REJECTED_KEPT);
    }

    fn resize_of(container: &str, done: bool) -> ExplainResize {
        ExplainResize {
            container: container.to_owned(),
            done,
            reason: None,
            message: None,
            resources: Default::default(),
            before: explain::Placement {
                cpus: Default::default(),
                exclusive: false,
                mems: Default::default(),
            },
            after: None,
            providers: Default::default(),
        }
    }

    /// A pod's resizes are shown with its admission's trace, the last
    /// [`RESIZES_KEPT`] of them, while it is admitted; a new admission
    /// under its uid starts without them.
    #[test]
    fn resizes_are_shown_with_the_admission_while_it_stands() {
        let mut h = History::default();
        h.record(traced("a", true, 0));
        assert!(h.get("a").unwrap().resizes.is_empty());
        for i in 0..RESIZES_KEPT + 2 {
            h.record_resize("a", resize_of(&format!("c{i}"), i % 2 == 0));
        }
        let shown = h.get("a").unwrap().resizes;
        assert_eq!(shown.len(), RESIZES_KEPT);
        assert_eq!(shown[0].container, "c2", "the oldest are dropped");
        assert_eq!(
            shown.last().unwrap().container,
            format!("c{}", RESIZES_KEPT + 1)
        );
        h.retain_admitted(|_| true);
        assert_eq!(h.get("a").unwrap().resizes.len(), RESIZES_KEPT);
        // Admitted again under the same uid: a new pod, no resizes yet.
        h.retain_admitted(|u| u != "a");
        assert!(h.resizes.is_empty(), "released with the pod");
        h.record_resize("a", resize_of("x", true));
        h.record(traced("a", true, 1));
        assert!(h.get("a").unwrap().resizes.is_empty());
        // A rejection has none.
        h.record(traced("r", false, 2));
        assert!(h.get("r").unwrap().resizes.is_empty());
    }

    /// Rejections are kept as their traces, bounded by bytes too: a pod
    /// with a long message (a large trace) pushes the oldest out, and the
    /// latest is kept whatever its size.
    #[test]
    fn rejections_are_bounded_by_bytes() {
        let mut h = History::default();
        let large = |uid: &str, n: usize| {
            let mut t = traced(uid, false, n);
            t.result.message = Some("m".repeat(REJECTED_BYTES / 4));
            t
        };
        for i in 0..10 {
            h.record(large(&format!("big{i}"), i));
            assert!(h.rejected_bytes <= REJECTED_BYTES.max(h.rejected.back().unwrap().bytes));
            assert_eq!(
                h.rejected_bytes,
                h.rejected.iter().map(|r| r.bytes).sum::<usize>()
            );
        }
        assert_eq!(h.rejected.len(), 3);
        assert!(h.get("big6").is_none());
        assert_eq!(h.get("big9").unwrap().name, "p9");
        let mut t = traced("huge", false, 0);
        t.result.message = Some("m".repeat(2 * REJECTED_BYTES));
        h.record(t);
        assert_eq!(h.rejected.len(), 1);
        assert!(h.get("huge").is_some());
    }
}
