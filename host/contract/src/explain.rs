//! The decision trace of one admission as the API and the CLI write it
//! (schema `Explain`): `topomgr explain -o json`, `GET
//! /v1/pods/{uid}/explain` and `POST /v1/pods?dry_run=true&explain=true`;
//! the daemon's trace of an admitted pod also lists the in-place resizes
//! of its containers since (issue 33), done or refused.
//! The engine builds it (`topomgr_engine::explain`); the policy, the scope
//! and the merge rule are written here in their wire spelling, so that a
//! renamed engine type cannot change the JSON.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use topomgr_sdk::{CpuSet, NumaMask, ProviderHints, QosClass};

/// The decision trace of one admission (schema `Explain`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explain {
    /// Pod uid.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// QoS class.
    pub qos: QosClass,
    /// The policy that decided.
    pub policy: Policy,
    /// Its scope.
    pub scope: Scope,
    /// Whether the pod was admitted.
    pub admitted: bool,
    /// Why it was rejected.
    pub reason: Option<String>,
    /// The rejection's message.
    pub message: Option<String>,
    /// For a pod the policy refused: the resources it could not align.
    pub unaligned: Vec<String>,
    /// One step per decision (per container, or one for pod scope).
    pub steps: Vec<ExplainStep>,
    /// The in-place resizes of the pod's containers since its admission,
    /// done or refused, oldest first (the daemon keeps the last
    /// [`RESIZES_KEPT`] per pod; always empty in a what-if). Absent in a
    /// trace of an older daemon: read as empty.
    #[serde(default)]
    pub resizes: Vec<ExplainResize>,
}

/// How many resizes of one pod [`Explain::resizes`] keeps (the latest).
pub const RESIZES_KEPT: usize = 16;

/// One in-place resize of a container (issue 33): what was asked, what
/// each provider answered, and the outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainResize {
    /// The container.
    pub container: String,
    /// Whether it was done (`false`: refused, and nothing changed).
    pub done: bool,
    /// Why it was refused (the provider's reason, `ResizeInfeasible`,
    /// `UnexpectedAdmissionError`).
    pub reason: Option<String>,
    /// The refusal's message.
    pub message: Option<String>,
    /// Resource -> its request and limit before and after (every resource
    /// of the container, in name order; CPU in millicores, memory and
    /// hugepages in bytes).
    pub resources: IndexMap<String, ResourceChange>,
    /// What the container held before.
    pub before: Placement,
    /// What it holds after (`null`: refused, it keeps `before`).
    pub after: Option<Placement>,
    /// Provider -> its answer, in provider order.
    pub providers: IndexMap<String, ProviderResize>,
}

/// [`ExplainResize::resources`]: one resource's amounts before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceChange {
    /// As admitted (or last resized).
    pub before: Amount,
    /// As asked.
    pub after: Amount,
}

/// A request and its limit (`null`: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amount {
    /// The request.
    pub request: u64,
    /// The limit.
    pub limit: Option<u64>,
}

/// What a container holds: its CPUs and memory nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Its CPUs (empty: the shared pool).
    pub cpus: CpuSet,
    /// Whether they are exclusive.
    pub exclusive: bool,
    /// Its memory's NUMA nodes (empty: not pinned).
    pub mems: NumaMask,
}

/// [`ExplainResize::providers`]: one provider's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderResize {
    /// What it answered.
    pub answer: ResizeAnswer,
    /// The CPUs it answered (`null`: none of its own).
    pub cpus: Option<CpuChange>,
    /// The memory nodes it answered, where it books the container's
    /// memory again (`null`: none of its own).
    pub mems: Option<NumaMask>,
    /// Why it refused.
    pub reason: Option<String>,
    /// Its refusal's message.
    pub message: Option<String>,
}

/// [`ProviderResize::answer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResizeAnswer {
    /// A new allocation (its CPUs and memory nodes; neither: nothing of its
    /// own changes).
    Resized,
    /// It does not resize: it keeps its part, and refuses a resize of what
    /// it allocated.
    DoesNotResize,
    /// It refused.
    Refused,
    /// Not asked: an earlier provider refused.
    NotAsked,
    /// Not asked: the provider is held (its saved state could not be
    /// restored).
    Held,
}

/// [`ProviderResize::cpus`]: the CPUs a provider answered, against those
/// the container held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuChange {
    /// Every CPU of its answer.
    pub cpus: CpuSet,
    /// Whether they are exclusive.
    pub exclusive: bool,
    /// Those the container held already.
    pub kept: CpuSet,
    /// Those it gets.
    pub added: CpuSet,
    /// Those it gives back (to the shared pool).
    pub returned: CpuSet,
}

/// One decision of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainStep {
    /// The container (`null`: the whole pod, pod scope).
    pub container: Option<String>,
    /// Provider -> its hints, in provider order (compact sets expanded on
    /// machines of up to 8 NUMA nodes).
    pub hints: IndexMap<String, ProviderHints>,
    /// How the merge decided (`null` under policy `none`).
    pub merge: Option<MergeSummary>,
    /// The merged hint's NUMA nodes (`null`: any).
    pub affinity: Option<NumaMask>,
    /// Whether the merged hint is preferred.
    pub preferred: bool,
    /// Whether the step admits.
    pub admit: bool,
}

/// [`ExplainStep::merge`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeSummary {
    /// The rule that chose the merged hint.
    pub rule: MergeRule,
    /// Hint lists merged (one per provider resource).
    pub lists: usize,
    /// The kubelet's best-non-preferred affinity count.
    pub best_non_preferred_count: u32,
}

/// [`Explain::policy`]: a Topology Manager policy, spelled as the
/// configuration spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// `none`.
    None,
    /// `best-effort`.
    BestEffort,
    /// `restricted`.
    Restricted,
    /// `single-numa-node`.
    SingleNumaNode,
}

/// [`Explain::scope`], spelled as the configuration spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// `container`.
    Container,
    /// `pod`.
    Pod,
}

/// [`MergeSummary::rule`]: which rule chose the merged hint (written as
/// the variant's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MergeRule {
    /// The best mask that every provider prefers.
    Preferred,
    /// No common preferred mask; the best reachable mask of width `B`.
    NonPreferredAtBestCount,
    /// No reachable mask of width `B`; the widest narrower one.
    NonPreferredNarrower,
    /// Only wider masks were reachable; the narrowest of them.
    NonPreferredWider,
    /// No non-empty mask was reachable; the machine mask, not preferred.
    NoCandidate,
}
