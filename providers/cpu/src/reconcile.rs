//! Restore is reconcile: a saved state is adopted on the machine and
//! config as they are *now*, never refused for a difference.
//!
//! The provider was built (`new`) from the current machine and config, so
//! the online CPUs, `reserved_cpus`, the policy and its options are the
//! current ones. From the checkpoint it takes every exclusive assignment,
//! pod-level CPU set and reusable init-container CPU set exactly as saved;
//! the saved shared pool is not read: it is recomputed as the online CPUs
//! minus every CPU held exclusively (minus the reserved CPUs with
//! `strict-cpu-reservation`).
//!
//! * A held CPU that is not usable now (offline, online in no NUMA node,
//!   or not on this machine) stays its container's: it is in no pool, no
//!   other pod gets it, and when it comes back it is still that
//!   container's. It is a [`Conflict`]. The container's cpuset is its
//!   usable CPUs (the kernel refuses offline ones).
//! * A reserved CPU that a pod holds (`reserved_cpus` grew) stays the
//!   pod's until it is released, then it is reserved. It is a note, not a
//!   conflict: nothing is missing.
//! * A policy or options change (`static` to `none`, other options, the
//!   `PodLevelResourceManagers` gate) applies to new admissions; existing
//!   assignments are kept until released.
//! * A CPU the saved state gives to two pods (a state no history of this
//!   provider writes) stays held by both records and is a conflict of the
//!   later pod; it is never given to a third.
//!
//! With no assignments any machine and config are accepted as they are.

use std::collections::BTreeMap;
use std::fmt;

use crate::policy::{Assignments, StaticPolicy};
use crate::state::Checkpoint;
use crate::topology::{from_cpuset, to_cpuset, Cpus};
use crate::RESOURCE;

/// An assignment that lost part of what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Pod uid.
    pub pod: String,
    /// Container name; `None` for a pod's pod-level CPU set.
    pub container: Option<String>,
    /// The resource (`cpu`).
    pub resource: String,
    /// The CPUs it holds that cannot be used now.
    pub cpus: Cpus,
    /// What is missing, e.g. `CPUs 5,11 are offline`.
    pub missing: String,
    /// What resolves it.
    pub remedy: String,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pod {}", self.pod)?;
        match &self.container {
            Some(c) => write!(f, " container {c:?}")?,
            None => write!(f, " (pod-level CPU set)")?,
        }
        write!(f, ": {}; {}", self.missing, self.remedy)
    }
}

/// What a restore found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Assignments that hold CPUs that cannot be used now.
    pub conflicts: Vec<Conflict>,
    /// What was kept although the config says otherwise now (reserved CPUs
    /// held by pods, pod-level sets without the gate); nothing is missing.
    pub notes: Vec<String>,
}

/// Why the CPUs of `cpus` cannot be used, grouped: offline, online in no
/// NUMA node, or not on this machine.
fn unusable(policy: &StaticPolicy, cpus: &Cpus) -> Vec<String> {
    let topo = &policy.topo;
    let pick =
        |f: &dyn Fn(u32) -> bool| -> Cpus { cpus.iter().copied().filter(|c| f(*c)).collect() };
    let offline = pick(&|c| topo.offline().contains(&c));
    let unplaced = pick(&|c| topo.unplaced().contains(&c));
    let absent = pick(&|c| {
        !topo.is_usable(c) && !topo.offline().contains(&c) && !topo.unplaced().contains(&c)
    });
    let mut out = Vec::new();
    let word = |s: &Cpus| if s.len() == 1 { "CPU" } else { "CPUs" };
    if !offline.is_empty() {
        out.push(format!(
            "{} {} {} offline",
            word(&offline),
            to_cpuset(&offline),
            if offline.len() == 1 { "is" } else { "are" }
        ));
    }
    if !unplaced.is_empty() {
        out.push(format!(
            "{} {} {} online but in no NUMA node",
            word(&unplaced),
            to_cpuset(&unplaced),
            if unplaced.len() == 1 { "is" } else { "are" }
        ));
    }
    if !absent.is_empty() {
        out.push(format!(
            "this machine has no {} {}",
            word(&absent),
            to_cpuset(&absent)
        ));
    }
    out
}

/// The remedy for CPUs that cannot be used.
fn unusable_remedy(cpus: &Cpus) -> String {
    format!(
        "they stay this pod's and its cpuset leaves them out; bring {} online again \
         (/sys/devices/system/cpu/cpuN/online) or release the pod",
        to_cpuset(cpus)
    )
}

impl StaticPolicy {
    /// Every CPU held exclusively: containers' assignments and pod-level sets.
    pub(crate) fn held(&self) -> Cpus {
        let mut held: Cpus = self.pod_sets.values().flatten().copied().collect();
        held.extend(
            self.assignments
                .values()
                .flat_map(|m| m.values())
                .flatten()
                .copied(),
        );
        held
    }

    /// The shared pool for the current machine and config: the usable CPUs
    /// minus every CPU held exclusively (minus the reserved CPUs with
    /// `strict-cpu-reservation`).
    pub(crate) fn recompute_shared_pool(&mut self) {
        let held = self.held();
        let mut pool = self.initial_default_set();
        pool.retain(|c| !held.contains(c));
        self.default_set = pool;
    }

    /// Adopts `cp` on this machine and config (see the module docs); the
    /// state this provider had before is replaced.
    pub fn reconcile(&mut self, cp: &Checkpoint) -> Reconciled {
        let mut assignments = Assignments::new();
        for (pod, m) in &cp.entries {
            for (c, s) in m {
                assignments
                    .entry(pod.clone())
                    .or_default()
                    .insert(c.clone(), from_cpuset(s));
            }
        }
        let pod_sets: BTreeMap<String, Cpus> = cp
            .pod_entries
            .iter()
            .map(|(p, s)| (p.clone(), from_cpuset(s)))
            .collect();
        // Reusable CPUs are the pod's own: keep only what the pod still holds.
        let cpus_to_reuse: BTreeMap<String, Cpus> = cp
            .cpus_to_reuse
            .iter()
            .filter_map(|(p, s)| {
                let own: Cpus = assignments
                    .get(p)
                    .map(|m| m.values().flatten().copied().collect())
                    .unwrap_or_default();
                let keep: Cpus = from_cpuset(s).intersection(&own).copied().collect();
                assignments.contains_key(p).then_some((p.clone(), keep))
            })
            .collect();
        self.assignments = assignments;
        self.pod_sets = pod_sets;
        self.cpus_to_reuse = cpus_to_reuse;
        self.pod_scope = None;
        self.recompute_shared_pool();

        let mut report = Reconciled::default();
        self.report_unusable(&mut report);
        self.report_shared_between_pods(&mut report);
        self.note_reserved_held(&mut report);
        if !self.pod_sets.is_empty() && !self.pod_level_managers {
            report.notes.push(format!(
                "pods {} hold pod-level CPU sets although the PodLevelResourceManagers feature \
                 gate is off now; they keep them until released, new pods get none",
                self.pod_sets.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        for c in &report.conflicts {
            tracing::warn!(conflict = %c, "cpu provider: a restored assignment holds CPUs that cannot be used");
        }
        for n in &report.notes {
            tracing::info!(note = %n, "cpu provider: restored");
        }
        report
    }

    fn report_unusable(&self, report: &mut Reconciled) {
        let usable = |c: &u32| self.topo.is_usable(*c);
        for (pod, m) in &self.assignments {
            for (container, cpus) in m {
                let lost: Cpus = cpus.iter().copied().filter(|c| !usable(c)).collect();
                if lost.is_empty() {
                    continue;
                }
                report.conflicts.push(Conflict {
                    pod: pod.clone(),
                    container: Some(container.clone()),
                    resource: RESOURCE.to_owned(),
                    missing: unusable(self, &lost).join(", "),
                    remedy: unusable_remedy(&lost),
                    cpus: lost,
                });
            }
        }
        // A pod-level set's CPUs that none of its containers names.
        for (pod, set) in &self.pod_sets {
            let named: Cpus = self
                .assignments
                .get(pod)
                .map(|m| m.values().flatten().copied().collect())
                .unwrap_or_default();
            let lost: Cpus = set
                .iter()
                .copied()
                .filter(|c| !usable(c) && !named.contains(c))
                .collect();
            if lost.is_empty() {
                continue;
            }
            report.conflicts.push(Conflict {
                pod: pod.clone(),
                container: None,
                resource: RESOURCE.to_owned(),
                missing: unusable(self, &lost).join(", "),
                remedy: unusable_remedy(&lost),
                cpus: lost,
            });
        }
    }

    /// CPUs that the saved state gives to containers of two different pods.
    fn report_shared_between_pods(&self, report: &mut Reconciled) {
        let mut owner: BTreeMap<u32, (String, String)> = BTreeMap::new();
        let mut pod_level: BTreeMap<u32, String> = BTreeMap::new();
        for (pod, set) in &self.pod_sets {
            for c in set {
                pod_level.entry(*c).or_insert_with(|| pod.clone());
            }
        }
        for (pod, m) in &self.assignments {
            for (container, cpus) in m {
                let mut twice: BTreeMap<(String, String), Cpus> = BTreeMap::new();
                for c in cpus {
                    let first = owner
                        .entry(*c)
                        .or_insert_with(|| (pod.clone(), container.clone()));
                    if first.0 != *pod {
                        twice.entry(first.clone()).or_default().insert(*c);
                    } else if let Some(p) = pod_level.get(c).filter(|p| *p != pod) {
                        twice
                            .entry((p.clone(), String::new()))
                            .or_default()
                            .insert(*c);
                    }
                }
                for ((other, other_container), both) in twice {
                    let whose = if other_container.is_empty() {
                        format!("pod {other}'s pod-level CPU set")
                    } else {
                        format!("pod {other} container {other_container:?}")
                    };
                    report.conflicts.push(Conflict {
                        pod: pod.clone(),
                        container: Some(container.clone()),
                        resource: RESOURCE.to_owned(),
                        missing: format!(
                            "CPUs {} are also held by {whose} in the saved state",
                            to_cpuset(&both)
                        ),
                        remedy: "no other pod gets them; release one of the two pods".to_owned(),
                        cpus: both,
                    });
                }
            }
        }
    }

    fn note_reserved_held(&self, report: &mut Reconciled) {
        for (pod, m) in &self.assignments {
            for (container, cpus) in m {
                let reserved: Cpus = cpus.intersection(&self.reserved).copied().collect();
                if reserved.is_empty() {
                    continue;
                }
                report.notes.push(format!(
                    "pod {pod} container {container:?} holds CPUs {} of reserved_cpus; they stay \
                     its until it is released, then they are reserved",
                    to_cpuset(&reserved)
                ));
            }
        }
    }
}
