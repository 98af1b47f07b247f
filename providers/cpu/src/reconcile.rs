//! Restore is reconcile: a saved state is adopted on the machine and
//! config as they are *now*, never refused for a difference.
//!
//! The provider was built (`new`) from the current machine and config, so
//! the online CPUs, `reserved_cpus`, the policy and its options are the
//! current ones. From the checkpoint it takes every exclusive assignment,
//! pod-level CPU set and reusable init-container CPU set exactly as saved
//! (and the CPUs resized containers were first allocated, as far as they
//! still hold them);
//! the saved shared pool is not read: it is recomputed as the online CPUs
//! minus every CPU held exclusively (minus the reserved CPUs with
//! `strict-cpu-reservation`).
//!
//! * A held CPU that is not usable now (offline, online in no NUMA node,
//!   or not on this machine) stays its container's: it is in no pool, no
//!   other pod gets it, and when it comes back it is still that
//!   container's. It is a [`Conflict`] (the CPU ids in `ids`). The
//!   container's cpuset is its usable CPUs (the kernel refuses offline
//!   ones).
//! * A reserved CPU that a pod holds (`reserved_cpus` grew) stays the
//!   pod's until it is released, then it is reserved. It is a note, not a
//!   conflict: nothing is missing.
//! * A policy or options change (`static` to `none`, other options, the
//!   `PodLevelResourceManagers` gate) applies to new admissions; existing
//!   assignments are kept until released.
//! * A CPU the saved state gives to two pods (a state no history of this
//!   provider writes): the first claim (pods in uid order) keeps it; the
//!   later claim is a conflict, keeps it recorded and runs without it until
//!   the first is released. It is never given to a third pod.
//!
//! With no assignments any machine and config are accepted as they are.

use std::collections::BTreeMap;

use topomgr_sdk::{Conflict, Reconciled};

use crate::policy::{Assignments, StaticPolicy};
use crate::state::Checkpoint;
use crate::topology::{from_cpuset, to_cpuset, Cpus};
use crate::RESOURCE;

/// What a restore found: the report the host gets, and notes for the log
/// about what was kept although the config says otherwise now (reserved
/// CPUs held by pods, pod-level sets without the gate); nothing is missing
/// there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// The conflicts (this provider reports no moves).
    pub report: Reconciled,
    /// The notes.
    pub notes: Vec<String>,
}

/// `CPU 7 is offline`, `CPUs 5,11 are offline`.
fn cpus_are(cpus: &Cpus, what: &str) -> String {
    if cpus.len() == 1 {
        format!("CPU {} is {what}", to_cpuset(cpus))
    } else {
        format!("CPUs {} are {what}", to_cpuset(cpus))
    }
}

/// Why the CPUs of `cpus` cannot be used, in words: offline, online in no
/// NUMA node, or not on this machine.
fn unusable(policy: &StaticPolicy, cpus: &Cpus) -> String {
    let topo = &policy.topo;
    let pick =
        |f: &dyn Fn(u32) -> bool| -> Cpus { cpus.iter().copied().filter(|c| f(*c)).collect() };
    let offline = pick(&|c| topo.offline().contains(&c));
    let unplaced = pick(&|c| topo.unplaced().contains(&c));
    let absent = pick(&|c| {
        !topo.is_usable(c) && !topo.offline().contains(&c) && !topo.unplaced().contains(&c)
    });
    let mut out = Vec::new();
    if !offline.is_empty() {
        out.push(cpus_are(&offline, "offline"));
    }
    if !unplaced.is_empty() {
        out.push(cpus_are(&unplaced, "online but in no NUMA node"));
    }
    if !absent.is_empty() {
        let word = if absent.len() == 1 { "CPU" } else { "CPUs" };
        out.push(format!("this machine has no {word} {}", to_cpuset(&absent)));
    }
    out.join(", ")
}

/// A conflict of `container` of `pod` (`""`: the pod-level set) over `cpus`.
fn conflict(pod: &str, container: &str, cpus: &Cpus, missing: String) -> Conflict {
    Conflict::new(pod, container, RESOURCE, missing).with_ids(cpus.iter().map(u32::to_string))
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
    pub fn reconcile(&mut self, cp: &Checkpoint) -> Restored {
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
        // A resized container's baseline: what of it the container still
        // holds (it is always a subset of the assignment).
        let mut baselines = Assignments::new();
        for (pod, m) in &cp.baseline_entries {
            for (c, s) in m {
                let Some(held) = assignments.get(pod).and_then(|a| a.get(c)) else {
                    continue;
                };
                let keep: Cpus = from_cpuset(s).intersection(held).copied().collect();
                if !keep.is_empty() && keep != *held {
                    baselines
                        .entry(pod.clone())
                        .or_default()
                        .insert(c.clone(), keep);
                }
            }
        }
        self.baselines = baselines;
        self.assignments = assignments;
        self.pod_sets = pod_sets;
        self.cpus_to_reuse = cpus_to_reuse;
        self.pod_scope = None;
        self.recompute_shared_pool();

        let mut out = Restored::default();
        self.report_shared_between_pods(&mut out.report);
        self.report_unusable(&mut out.report);
        self.note_reserved_held(&mut out.notes);
        if !self.pod_sets.is_empty() && !self.pod_level_managers {
            out.notes.push(format!(
                "pods {} hold pod-level CPU sets although the PodLevelResourceManagers feature \
                 gate is off now; they keep them until released, new pods get none",
                self.pod_sets.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        for c in &out.report.conflicts {
            tracing::warn!(conflict = %c,
                "cpu provider: a restored assignment keeps CPUs it cannot use now; no other pod \
                 gets them until it is released");
        }
        for n in &out.notes {
            tracing::info!(note = %n, "cpu provider: restored");
        }
        out
    }

    fn report_unusable(&self, report: &mut Reconciled) {
        let usable = |c: &u32| self.topo.is_usable(*c);
        for (pod, m) in &self.assignments {
            for (container, cpus) in m {
                let lost: Cpus = cpus.iter().copied().filter(|c| !usable(c)).collect();
                if !lost.is_empty() {
                    let missing = unusable(self, &lost);
                    report
                        .conflicts
                        .push(conflict(pod, container, &lost, missing));
                }
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
            if !lost.is_empty() {
                let missing = format!("its pod-level CPU set: {}", unusable(self, &lost));
                report.conflicts.push(conflict(pod, "", &lost, missing));
            }
        }
    }

    /// Why pod `pod` cannot run on `held` (offline CPUs, CPUs another pod
    /// claimed first), and what resolves it.
    pub(crate) fn why_unusable(&self, pod: &str, held: &Cpus) -> (String, String) {
        let lost: Cpus = held
            .iter()
            .copied()
            .filter(|c| !self.topo.is_usable(*c))
            .collect();
        let mut why = Vec::new();
        if !lost.is_empty() {
            why.push(unusable(self, &lost));
        }
        let mut claimed: BTreeMap<&str, Cpus> = BTreeMap::new();
        for &c in held {
            if let Some(first) = self.first_claim(pod, c).filter(|_| self.topo.is_usable(c)) {
                claimed.entry(first).or_default().insert(c);
            }
        }
        for (first, cpus) in &claimed {
            why.push(cpus_are(cpus, &format!("claimed first by pod {first}")));
        }
        let mut remedy = vec!["release this pod".to_owned()];
        if !lost.is_empty() {
            remedy.push(format!(
                "bring CPUs {} online again (/sys/devices/system/cpu/cpuN/online)",
                to_cpuset(&lost)
            ));
        }
        for first in claimed.keys() {
            remedy.push(format!("release pod {first}"));
        }
        (why.join(", "), remedy.join(", or "))
    }

    /// The pod that claims `cpu` first (pods in uid order), if another
    /// than `pod` does: the saved state gave the CPU to both, the first
    /// claim keeps it.
    pub(crate) fn first_claim(&self, pod: &str, cpu: u32) -> Option<&str> {
        let in_sets = self
            .pod_sets
            .iter()
            .filter(|(_, s)| s.contains(&cpu))
            .map(|(p, _)| p.as_str());
        let in_containers = self
            .assignments
            .iter()
            .filter(|(_, m)| m.values().any(|s| s.contains(&cpu)))
            .map(|(p, _)| p.as_str());
        in_sets
            .chain(in_containers)
            .min()
            .filter(|first| *first != pod)
    }

    /// CPUs that the saved state gives to two pods: the first claim (pods
    /// in uid order) keeps them, each later claim is a conflict.
    fn report_shared_between_pods(&self, report: &mut Reconciled) {
        for (pod, m) in &self.assignments {
            for (container, cpus) in m {
                let mut lost: BTreeMap<&str, Cpus> = BTreeMap::new();
                for &c in cpus {
                    if let Some(first) = self.first_claim(pod, c) {
                        lost.entry(first).or_default().insert(c);
                    }
                }
                for (first, both) in lost {
                    let them = if both.len() == 1 { "it" } else { "them" };
                    let missing = cpus_are(
                        &both,
                        &format!(
                            "also held by pod {first}, which claimed {them} first in the saved \
                             state"
                        ),
                    );
                    report
                        .conflicts
                        .push(conflict(pod, container, &both, missing));
                }
            }
        }
    }

    fn note_reserved_held(&self, notes: &mut Vec<String>) {
        for (pod, m) in &self.assignments {
            for (container, cpus) in m {
                let reserved: Cpus = cpus.intersection(&self.reserved).copied().collect();
                if reserved.is_empty() {
                    continue;
                }
                notes.push(format!(
                    "pod {pod} container {container:?} holds CPUs {} of reserved_cpus; they stay \
                     its until it is released, then they are reserved",
                    to_cpuset(&reserved)
                ));
            }
        }
    }
}
