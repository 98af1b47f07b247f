//! The decision trace of one admission as the API and the CLI write it
//! (schema `Explain`): `topomgr explain -o json`, `GET
//! /v1/pods/{uid}/explain` and `POST /v1/pods?dry_run=true&explain=true`.
//! The engine builds it (`topomgr_engine::explain`); the policy, the scope
//! and the merge rule are written here in their wire spelling, so that a
//! renamed engine type cannot change the JSON.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use topomgr_sdk::{NumaMask, ProviderHints, QosClass};

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
