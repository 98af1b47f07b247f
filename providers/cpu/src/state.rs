//! The provider's checkpoint: the shared pool, the exclusive assignments
//! and the CPUs a pod may reuse from its init containers, as JSON:
//!
//! ```json
//! {"policy_name": "static", "default_cpu_set": "0,3-11",
//!  "entries": {"<pod uid>": {"<container>": "1-2"}},
//!  "cpus_to_reuse": {"<pod uid>": "1-2"},
//!  "pod_entries": {"<pod uid>": "1-2"},
//!  "baseline_entries": {"<pod uid>": {"<container>": "1"}}}
//! ```
//!
//! `pod_entries` (pod-level CPU sets of `PodLevelResourceManagers`) is
//! written only when there are some; so is `baseline_entries`, the CPUs
//! resized containers were first allocated (see [`crate::resize`]; a
//! checkpoint without it, of a provider before resize, restores as one
//! without resized containers). Under `policy = "none"` the
//! `default_cpu_set` is empty, as the kubelet writes it, and `entries` are
//! the exclusive assignments kept from the static policy until released.
//!
//! Restoring is [`crate::reconcile`]: unlike the kubelet's `validateState`,
//! which refuses a state that does not match the machine (and so needs the
//! node drained and the state file deleted), the assignments are adopted on
//! the machine and config as they are now. Only bytes that are not a
//! checkpoint at all are refused.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use topomgr_sdk::CpuSet;

use crate::error::CpuError;
use crate::policy::StaticPolicy;
use crate::topology::to_cpuset;

/// The checkpoint format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// `"static"` or `"none"`.
    pub policy_name: String,
    /// The shared pool.
    pub default_cpu_set: CpuSet,
    /// Exclusive assignments.
    #[serde(default)]
    pub entries: BTreeMap<String, BTreeMap<String, CpuSet>>,
    /// Reusable CPUs per pod.
    #[serde(default)]
    pub cpus_to_reuse: BTreeMap<String, CpuSet>,
    /// Pod-level CPU sets (`PodLevelResourceManagers`) per pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_entries: BTreeMap<String, CpuSet>,
    /// The CPUs resized containers were first allocated.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub baseline_entries: BTreeMap<String, BTreeMap<String, CpuSet>>,
}

impl Checkpoint {
    /// Parses checkpoint bytes.
    pub fn parse(data: &[u8]) -> Result<Self, CpuError> {
        serde_json::from_slice(data).map_err(|e| {
            CpuError::Checkpoint(format!(
                "the saved state is not a checkpoint of this CPU provider ({e}); only the \
                 provider that wrote it (another library or version configured under this \
                 name) reads it"
            ))
        })
    }

    /// Serializes to bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CpuError> {
        serde_json::to_vec(self).map_err(|e| CpuError::Checkpoint(format!("encoding: {e}")))
    }
}

impl StaticPolicy {
    /// This policy's state as a checkpoint.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            policy_name: "static".to_owned(),
            default_cpu_set: to_cpuset(&self.default_set),
            entries: self
                .assignments
                .iter()
                .map(|(p, m)| {
                    (
                        p.clone(),
                        m.iter().map(|(c, s)| (c.clone(), to_cpuset(s))).collect(),
                    )
                })
                .collect(),
            cpus_to_reuse: self
                .cpus_to_reuse
                .iter()
                .map(|(p, s)| (p.clone(), to_cpuset(s)))
                .collect(),
            pod_entries: self
                .pod_sets
                .iter()
                .map(|(p, s)| (p.clone(), to_cpuset(s)))
                .collect(),
            baseline_entries: self
                .baselines
                .iter()
                .map(|(p, m)| {
                    (
                        p.clone(),
                        m.iter().map(|(c, s)| (c.clone(), to_cpuset(s))).collect(),
                    )
                })
                .collect(),
        }
    }
}
