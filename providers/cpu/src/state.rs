//! The provider's checkpoint: the shared pool, the exclusive assignments
//! and the CPUs a pod may reuse from its init containers, as JSON:
//!
//! ```json
//! {"policy_name": "static", "default_cpu_set": "0,3-11",
//!  "entries": {"<pod uid>": {"<container>": "1-2"}},
//!  "cpus_to_reuse": {"<pod uid>": "1-2"},
//!  "pod_entries": {"<pod uid>": "1-2"}}
//! ```
//!
//! `pod_entries` (pod-level CPU sets of `PodLevelResourceManagers`) is
//! written only when there are some.
//!
//! Restore checks what the kubelet's `validateState` checks (policy name,
//! reserved CPUs in — or, with strict-cpu-reservation, out of — the shared
//! pool, no assignment overlapping the pool, pool + assignments = every CPU)
//! plus that every CPU exists, and changes nothing when a check fails.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use topomgr_sdk::CpuSet;

use crate::error::CpuError;
use crate::policy::{Assignments, StaticPolicy};
use crate::topology::{from_cpuset, to_cpuset, Cpus};

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
}

impl Checkpoint {
    /// Parses checkpoint bytes.
    pub fn parse(data: &[u8]) -> Result<Self, CpuError> {
        serde_json::from_slice(data).map_err(|e| {
            CpuError::Checkpoint(format!(
                "not a CPU provider checkpoint ({e}); remove the provider's state file to start afresh"
            ))
        })
    }

    /// Serializes to bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CpuError> {
        serde_json::to_vec(self).map_err(|e| CpuError::Checkpoint(format!("encoding: {e}")))
    }

    /// The `none` policy's checkpoint.
    pub fn none() -> Self {
        Checkpoint {
            policy_name: "none".to_owned(),
            default_cpu_set: CpuSet::new(),
            entries: BTreeMap::new(),
            cpus_to_reuse: BTreeMap::new(),
            pod_entries: BTreeMap::new(),
        }
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
        }
    }

    /// Validates `cp` against this machine and adopts it; on error nothing changes.
    pub fn restore(&mut self, cp: &Checkpoint) -> Result<(), CpuError> {
        if cp.policy_name != "static" {
            return Err(CpuError::Checkpoint(format!(
                "configured policy \"static\" differs from state checkpoint policy {:?}; \
                 drain the node and remove the provider's state file",
                cp.policy_name
            )));
        }
        let all = self.topo.all_cpus();
        let default_set = from_cpuset(&cp.default_cpu_set);
        let mut assignments = Assignments::new();
        for (pod, m) in &cp.entries {
            for (c, s) in m {
                assignments
                    .entry(pod.clone())
                    .or_default()
                    .insert(c.clone(), from_cpuset(s));
            }
        }
        let reuse: BTreeMap<String, Cpus> = cp
            .cpus_to_reuse
            .iter()
            .map(|(p, s)| (p.clone(), from_cpuset(s)))
            .collect();
        let pod_sets: BTreeMap<String, Cpus> = cp
            .pod_entries
            .iter()
            .map(|(p, s)| (p.clone(), from_cpuset(s)))
            .collect();
        if !pod_sets.is_empty() && !self.pod_level_managers {
            return Err(CpuError::Checkpoint(format!(
                "it holds pod-level CPU sets (pods {}) but the PodLevelResourceManagers feature \
                 gate is off in [providers.cpu.config.feature_gates]; turn it on or release those pods",
                pod_sets.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let mut named: Cpus = default_set.clone();
        named.extend(pod_sets.values().flatten().copied());
        named.extend(
            assignments
                .values()
                .flat_map(|m| m.values())
                .flatten()
                .copied(),
        );
        named.extend(reuse.values().flatten().copied());
        let unknown: Cpus = named.difference(&all).copied().collect();
        if !unknown.is_empty() {
            return Err(CpuError::Checkpoint(format!(
                "it names CPUs {} that this machine does not have (online CPUs: {}); \
                 drain the node and remove the provider's state file",
                to_cpuset(&unknown),
                to_cpuset(&all)
            )));
        }
        let expected_all = self.initial_default_set();
        if default_set.is_empty() {
            if !assignments.is_empty() || !pod_sets.is_empty() {
                return Err(CpuError::Checkpoint(
                    "default cpuset cannot be empty while exclusive assignments exist".to_owned(),
                ));
            }
            self.default_set = expected_all;
            self.assignments = assignments;
            self.cpus_to_reuse = reuse;
            self.pod_sets = pod_sets;
            return Ok(());
        }
        if self.options.strict_cpu_reservation {
            let inside: Cpus = self.reserved.intersection(&default_set).copied().collect();
            if !inside.is_empty() {
                return Err(CpuError::Checkpoint(format!(
                    "some of strictly reserved cpus: \"{}\" are present in defaultCpuSet: \"{}\"",
                    to_cpuset(&inside),
                    to_cpuset(&default_set)
                )));
            }
        } else if !self.reserved.is_subset(&default_set) {
            return Err(CpuError::Checkpoint(format!(
                "not all reserved cpus: \"{}\" are present in defaultCpuSet: \"{}\"",
                to_cpuset(&self.reserved),
                to_cpuset(&default_set)
            )));
        }
        for (pod, m) in &assignments {
            for (c, s) in m {
                if !s.is_disjoint(&default_set) {
                    return Err(CpuError::Checkpoint(format!(
                        "pod: {pod}, container: {c} cpuset: \"{}\" overlaps with default cpuset \"{}\"",
                        to_cpuset(s),
                        to_cpuset(&default_set)
                    )));
                }
            }
        }
        for (pod, s) in &pod_sets {
            if !s.is_disjoint(&default_set) {
                return Err(CpuError::Checkpoint(format!(
                    "pod: {pod} pod-level cpuset: \"{}\" overlaps with default cpuset \"{}\"",
                    to_cpuset(s),
                    to_cpuset(&default_set)
                )));
            }
        }
        let mut known = default_set.clone();
        known.extend(pod_sets.values().flatten().copied());
        known.extend(
            assignments
                .values()
                .flat_map(|m| m.values())
                .flatten()
                .copied(),
        );
        if known != expected_all {
            return Err(CpuError::Checkpoint(format!(
                "current set of available CPUs \"{}\" doesn't match with CPUs in state \"{}\"",
                to_cpuset(&expected_all),
                to_cpuset(&known)
            )));
        }
        self.default_set = default_set;
        self.assignments = assignments;
        self.cpus_to_reuse = reuse;
        self.pod_sets = pod_sets;
        Ok(())
    }
}
