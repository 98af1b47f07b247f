//! Restore is reconcile: a saved state is adopted on the machine and
//! config as they are *now*, never refused for a difference.
//!
//! The provider was built (`new`) from the current machine and config, so
//! each NUMA node's capacity (MemTotal, hugepages), `reserved_memory`,
//! allocatable bytes, the policy and the feature gate are the current ones
//! (memory hot-plug moves MemTotal by hundreds of MiB on some cloud VMs,
//! hugepages get re-reserved, NUMA nodes appear). From the checkpoint it
//! keeps every container's blocks, every pod-level block and the reusable
//! init-container memory of pods that still hold memory, as saved.
//!
//! The machine state is rebuilt on the current nodes: per node and
//! resource the bytes held there are the saved ones (how multi-node blocks
//! split over their nodes depends on history, so they are not recomputed),
//! or, when the saved accounting does not add up (a state no history of
//! this provider writes), the blocks placed again lowest node first.
//! `free` is allocatable minus what is held, never below zero; the
//! assignment counts come from the blocks; a node's group (`cells`) is the
//! saved one within the current nodes.
//!
//! Conflicts ([`topomgr_sdk::Conflict`], no ids: memory is amounts):
//! * a node whose allocatable bytes of a resource fell below what is held
//!   there: every container with a block of that resource on the node,
//!   with the amounts. The assignments are kept; `free` is 0, so nothing
//!   more is placed there until enough is released;
//! * a block on a node that is gone, or of a resource its node no longer
//!   has: the assignment is kept (its bytes there are held for it and come
//!   back with the node).
//!
//! A new node is usable at once. A policy change (`Static` to `None`) or
//! the `PodLevelResourceManagers` gate turned off keeps the assignments
//! until released and applies to new admissions. With no assignments any
//! machine and config are accepted as they are.

use std::collections::{BTreeMap, BTreeSet};

use topomgr_sdk::quantity::BinarySi;
use topomgr_sdk::{Conflict, NumaMask, NumaNodeId, Reconciled};

use crate::config::Policy;
use crate::state::{
    default_state, reusable_from_entries, Assignments, Block, Checkpoint, MachineState, PodBlocks,
};
use crate::MemoryProvider;

/// What a restore found: the report the host gets, and notes for the log
/// (what was kept although the config says otherwise now, accounting that
/// was rebuilt); nothing is missing there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// The conflicts (this provider reports no moves).
    pub report: Reconciled,
    /// The notes.
    pub notes: Vec<String>,
}

/// Who holds memory: a container (`Some`) or a pod's pod-level blocks
/// (`None`). The blocks of a pod with pod-level blocks are shares of those
/// and hold nothing more.
struct Holder<'a> {
    pod: &'a str,
    blocks: &'a [Block],
}

fn holders<'a>(assignments: &'a Assignments, pod_blocks: &'a PodBlocks) -> Vec<Holder<'a>> {
    let mut out: Vec<Holder<'a>> = pod_blocks
        .iter()
        .map(|(pod, blocks)| Holder { pod, blocks })
        .collect();
    for (pod, containers) in assignments {
        if pod_blocks.contains_key(pod) {
            continue;
        }
        for blocks in containers.values() {
            out.push(Holder { pod, blocks });
        }
    }
    out
}

/// Why the saved per-node accounting cannot be used as it is, if it cannot.
fn accounting_unusable(saved: &MachineState, holders: &[Holder<'_>]) -> Option<String> {
    if saved.is_empty() {
        return (!holders.is_empty()).then(|| "the saved state has no per-node accounting".into());
    }
    for (id, node) in saved {
        for (resource, t) in &node.memory_map {
            // Free is what allocatable leaves; a node may hold more than
            // it can give (allocatable shrank), then free is 0.
            if t.free != t.allocatable.saturating_sub(t.reserved) {
                return Some(format!(
                    "NUMA node {id} {resource}: {} free and {} reserved do not add up to its \
                     allocatable {}",
                    BinarySi(t.free),
                    BinarySi(t.reserved),
                    BinarySi(t.allocatable)
                ));
            }
        }
    }
    let mut sums: BTreeMap<&str, (u128, u128)> = BTreeMap::new();
    for (resource, t) in saved.values().flat_map(|n| n.memory_map.iter()) {
        sums.entry(resource.as_str()).or_default().0 += u128::from(t.reserved);
    }
    for b in holders.iter().flat_map(|h| h.blocks) {
        sums.entry(b.resource.as_str()).or_default().1 += u128::from(b.size);
    }
    sums.into_iter().find_map(|(resource, (held, blocks))| {
        (held < blocks).then(|| {
            format!(
                "{resource} reserved on all NUMA nodes is {}, less than the blocks hold ({})",
                BinarySi(u64::try_from(held).unwrap_or(u64::MAX)),
                BinarySi(u64::try_from(blocks).unwrap_or(u64::MAX))
            )
        })
    })
}

/// Places `block` on `state` lowest node first up to each node's
/// allocatable bytes; what does not fit goes to the lowest node of the
/// block that has the resource (held there beyond what it can give).
fn place(state: &mut MachineState, block: &Block) {
    let mut left = block.size;
    let mut first = None;
    for id in block.numa_affinity.iter() {
        let Some(t) = state
            .get_mut(&id)
            .and_then(|n| n.memory_map.get_mut(&block.resource))
        else {
            continue;
        };
        first.get_or_insert(id);
        let take = t.allocatable.saturating_sub(t.reserved).min(left);
        t.reserved += take;
        left -= take;
    }
    if left > 0 {
        if let Some(t) = first
            .and_then(|id| state.get_mut(&id))
            .and_then(|n| n.memory_map.get_mut(&block.resource))
        {
            t.reserved = t.reserved.saturating_add(left);
        }
    }
}

impl MemoryProvider {
    /// Adopts `cp` on this machine and config (see the module docs); the
    /// state this provider had before is replaced.
    pub(crate) fn reconcile_checkpoint(&mut self, cp: Checkpoint) -> Restored {
        let mut out = Restored::default();
        let assignments = cp.entries;
        let pod_blocks = cp.pod_entries;
        let held = holders(&assignments, &pod_blocks);
        let mut state = default_state(&self.machine);

        // Bytes held per node and resource.
        match accounting_unusable(&cp.machine_state, &held) {
            None => {
                for (id, node) in &mut state {
                    for (resource, t) in &mut node.memory_map {
                        t.reserved = cp
                            .machine_state
                            .get(id)
                            .and_then(|n| n.memory_map.get(resource))
                            .map_or(0, |s| s.reserved);
                    }
                }
            }
            Some(why) => {
                if !held.is_empty() {
                    out.notes.push(format!(
                        "the saved per-node memory accounting does not add up ({why}); it was \
                         rebuilt from the assignments"
                    ));
                }
                let mut order: Vec<&Holder<'_>> = held.iter().collect();
                order.sort_by_key(|h| h.pod);
                for h in order {
                    for b in h.blocks {
                        place(&mut state, b);
                    }
                }
            }
        }
        for node in state.values_mut() {
            for t in node.memory_map.values_mut() {
                t.free = t.allocatable.saturating_sub(t.reserved);
            }
        }

        // Assignment counts from the blocks, groups from the saved state.
        let all = self.machine.mask();
        let mut touching: BTreeMap<NumaNodeId, (i64, NumaMask)> = BTreeMap::new();
        for b in held.iter().flat_map(|h| h.blocks) {
            for id in b.numa_affinity.iter().filter(|id| all.contains(*id)) {
                let e = touching.entry(id).or_insert((0, NumaMask::EMPTY));
                e.0 += 1;
                if e.1.is_empty() {
                    e.1 = b.numa_affinity.intersection(all);
                }
            }
        }
        for (id, node) in &mut state {
            let alone = NumaMask::single(*id);
            let Some(&(count, first_block)) = touching.get(id) else {
                continue;
            };
            node.number_of_assignments = count;
            let saved = cp.machine_state.get(id).map(|n| n.cells.intersection(all));
            node.cells = match saved {
                Some(cells) if alone.is_subset(cells) => cells,
                _ => first_block.union(alone),
            };
        }

        self.report_conflicts(&state, &assignments, &pod_blocks, &mut out.report);

        // Reusable memory of pods that still hold memory, on current nodes.
        let mut reusable = reusable_from_entries(&cp.reusable);
        let before = reusable.values().map(BTreeMap::len).sum::<usize>();
        reusable.retain(|pod, _| assignments.contains_key(pod));
        for per in reusable.values_mut() {
            per.retain(|mask, _| !mask.is_empty() && mask.is_subset(all));
        }
        reusable.retain(|_, per| !per.is_empty());
        let after = reusable.values().map(BTreeMap::len).sum::<usize>();
        if after < before {
            out.notes.push(format!(
                "{} reusable init-container memory entries were dropped (their pod holds no \
                 memory, or their nodes are gone); those pods' next containers take memory \
                 afresh",
                before - after
            ));
        }

        if !pod_blocks.is_empty() && !self.pod_level_managers {
            out.notes.push(format!(
                "pods {} hold pod-level memory although the PodLevelResourceManagers feature \
                 gate is off now; they keep it until released, new pods get none",
                pod_blocks.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        if self.policy == Policy::None && !assignments.is_empty() {
            out.notes.push(format!(
                "policy \"none\": pods {} keep their memory until released; new pods get none",
                assignments.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }

        self.state = state;
        self.assignments = assignments;
        self.pod_blocks = pod_blocks;
        self.reusable = reusable;
        self.pod_scope = None;
        for c in &out.report.conflicts {
            tracing::warn!(conflict = %c,
                "memory provider: restored assignment holds memory the machine cannot give now; \
                 it is kept and nothing more is placed there until enough is released");
        }
        for n in &out.notes {
            tracing::info!(note = %n, "memory provider: restored");
        }
        out
    }

    /// Conflicts of `state` (see the module docs), one per container,
    /// resource and cause; pod-level blocks are reported through their
    /// containers' shares.
    fn report_conflicts(
        &self,
        state: &MachineState,
        assignments: &Assignments,
        pod_blocks: &PodBlocks,
        report: &mut Reconciled,
    ) {
        // (pod, container, resource) -> what is missing, in words.
        let mut found: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
        let mut add = |pod: &str, container: &str, resource: &str, what: String| {
            found
                .entry((pod.to_owned(), container.to_owned(), resource.to_owned()))
                .or_default()
                .insert(what);
        };
        let containers = assignments.iter().flat_map(|(pod, m)| {
            m.iter()
                .map(move |(c, blocks)| (pod.as_str(), c.as_str(), blocks.as_slice()))
        });
        // Pod-level blocks of a pod without container blocks (all released
        // but the pod's record): reported under the pod.
        let pod_only = pod_blocks
            .iter()
            .filter(|(pod, _)| !assignments.contains_key(*pod))
            .map(|(pod, blocks)| (pod.as_str(), "", blocks.as_slice()));
        for (pod, container, blocks) in containers.chain(pod_only) {
            for b in blocks {
                let r = b.resource.as_str();
                if b.numa_affinity.is_empty() {
                    add(pod, container, r, "its saved block has no NUMA node".into());
                }
                for id in b.numa_affinity.iter() {
                    let Some(node) = state.get(&id) else {
                        add(
                            pod,
                            container,
                            r,
                            format!(
                                "NUMA node {id} is gone (its {} block of {r} is on NUMA nodes {})",
                                BinarySi(b.size),
                                b.numa_affinity
                            ),
                        );
                        continue;
                    };
                    let Some(t) = node.memory_map.get(r) else {
                        add(pod, container, r, format!("NUMA node {id} has no {r} now"));
                        continue;
                    };
                    if b.size > 0 && t.reserved > t.allocatable {
                        add(
                            pod,
                            container,
                            r,
                            format!(
                                "NUMA node {id} can give {} of {r} now, but {} are held there \
                                 ({} short)",
                                BinarySi(t.allocatable),
                                BinarySi(t.reserved),
                                BinarySi(t.reserved - t.allocatable)
                            ),
                        );
                    }
                }
            }
        }
        for ((pod, container, resource), what) in found {
            let words: Vec<String> = what.into_iter().collect();
            report
                .conflicts
                .push(Conflict::new(pod, container, resource, words.join("; ")));
        }
    }
}
