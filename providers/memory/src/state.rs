//! The memory manager's machine state and container assignments, in the
//! kubelet's model and JSON shape (`memory_manager_state`): per NUMA node
//! and resource the total, system-reserved, allocatable, reserved and free
//! bytes, the node's assignment count and its *cells* (the group of nodes it
//! is allocated with); per container the memory blocks it holds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use topomgr_sdk::{NumaMask, NumaNodeId};

use topomgr_sdk::quantity::BinarySi;

use crate::machine::{MachineMemory, MEMORY};

/// One resource on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryTable {
    /// Everything the node has of the resource.
    pub total: u64,
    /// Reserved for the system by config.
    pub system_reserved: u64,
    /// `total - system_reserved` (minus all hugepages for regular memory).
    pub allocatable: u64,
    /// Held by containers.
    pub reserved: u64,
    /// Still free for containers.
    pub free: u64,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeState {
    /// Memory blocks placed on this node (a container with memory and
    /// hugepages counts twice).
    pub number_of_assignments: i64,
    /// Resources of the node.
    pub memory_map: BTreeMap<String, MemoryTable>,
    /// The node and every node it is grouped with for multi-NUMA allocations.
    pub cells: NumaMask,
}

/// The whole machine, by node id.
pub type MachineState = BTreeMap<NumaNodeId, NodeState>;

/// Memory of one resource held by a container on a set of nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Block {
    /// The nodes of the block.
    pub numa_affinity: NumaMask,
    /// Resource name.
    #[serde(rename = "type")]
    pub resource: String,
    /// Bytes.
    pub size: u64,
}

/// Blocks by pod uid and container name.
pub type Assignments = BTreeMap<String, BTreeMap<String, Vec<Block>>>;

/// Init-container memory that later containers of the same pod may reuse:
/// pod uid -> node set -> resource -> bytes.
pub type Reusable = BTreeMap<String, BTreeMap<NumaMask, BTreeMap<String, u64>>>;

/// The provider's checkpoint: the kubelet's state-file fields plus the
/// reusable init-container memory (the kubelet keeps that in memory only;
/// checkpointing it lets chained `--state-dir` calls behave like one process).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checkpoint {
    /// `"Static"` or `"None"`.
    pub policy_name: String,
    /// The machine state.
    pub machine_state: MachineState,
    /// Container assignments.
    pub entries: Assignments,
    /// Reusable init-container memory.
    #[serde(default)]
    pub reusable: Vec<ReusableEntry>,
    /// Pod-level memory blocks (`PodLevelResourceManagers`) per pod uid;
    /// written only when there are some.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_entries: PodBlocks,
}

/// Pod-level memory blocks by pod uid: what a pod with pod-level resources
/// holds as a whole (its containers' blocks are shares of it).
pub type PodBlocks = BTreeMap<String, Vec<Block>>;

/// One entry of [`Reusable`] in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReusableEntry {
    /// Pod uid.
    pub pod: String,
    /// The node set of the init container's block.
    pub numa_affinity: NumaMask,
    /// Resource name.
    #[serde(rename = "type")]
    pub resource: String,
    /// Bytes.
    pub size: u64,
}

/// [`Reusable`] as checkpoint entries.
pub fn reusable_entries(r: &Reusable) -> Vec<ReusableEntry> {
    let mut out = Vec::new();
    for (pod, masks) in r {
        for (mask, per) in masks {
            for (resource, size) in per {
                out.push(ReusableEntry {
                    pod: pod.clone(),
                    numa_affinity: *mask,
                    resource: resource.clone(),
                    size: *size,
                });
            }
        }
    }
    out
}

/// Checkpoint entries back into [`Reusable`].
pub fn reusable_from_entries(entries: &[ReusableEntry]) -> Reusable {
    let mut r = Reusable::new();
    for e in entries {
        r.entry(e.pod.clone())
            .or_default()
            .entry(e.numa_affinity)
            .or_default()
            .insert(e.resource.clone(), e.size);
    }
    r
}

/// The state of an empty machine (the kubelet's `getDefaultMachineState`).
pub fn default_state(machine: &MachineMemory) -> MachineState {
    let mut state = MachineState::new();
    for node in &machine.nodes {
        let mut map = BTreeMap::new();
        for (resource, &total) in &node.hugepages {
            let system_reserved = machine.reserved_on(node.id, resource);
            let allocatable = total.saturating_sub(system_reserved);
            map.insert(
                resource.clone(),
                MemoryTable {
                    total,
                    system_reserved,
                    allocatable,
                    reserved: 0,
                    free: allocatable,
                },
            );
        }
        let system_reserved = machine.reserved_on(node.id, MEMORY);
        let allocatable = node
            .memory_total
            .saturating_sub(system_reserved)
            .saturating_sub(node.hugepage_bytes());
        map.insert(
            MEMORY.to_owned(),
            MemoryTable {
                total: node.memory_total,
                system_reserved,
                allocatable,
                reserved: 0,
                free: allocatable,
            },
        );
        state.insert(
            node.id,
            NodeState {
                number_of_assignments: 0,
                memory_map: map,
                cells: NumaMask::single(node.id),
            },
        );
    }
    state
}

/// Free bytes of `resource` on `node` (0 when the node lacks it).
pub fn free(state: &MachineState, node: NumaNodeId, resource: &str) -> u64 {
    table(state, node, resource).map_or(0, |t| t.free)
}

/// Allocatable bytes of `resource` on `node` (0 when the node lacks it).
pub fn allocatable(state: &MachineState, node: NumaNodeId, resource: &str) -> u64 {
    table(state, node, resource).map_or(0, |t| t.allocatable)
}

fn table<'a>(state: &'a MachineState, node: NumaNodeId, resource: &str) -> Option<&'a MemoryTable> {
    state.get(&node)?.memory_map.get(resource)
}

/// Sum of `f(node)` over the nodes of `mask`.
pub fn sum_over(mask: NumaMask, mut f: impl FnMut(NumaNodeId) -> u64) -> u64 {
    mask.iter().fold(0u64, |a, n| a.saturating_add(f(n)))
}

/// Places `size` bytes of `resource` on the nodes of `mask`, lowest node
/// first, and records one more assignment with cells `mask` on every node of
/// the mask (the kubelet's `updateMachineState`). Nodes the state lacks are
/// skipped.
pub fn reserve(state: &mut MachineState, mask: NumaMask, resource: &str, mut size: u64) {
    for id in mask.iter() {
        let Some(node) = state.get_mut(&id) else {
            continue;
        };
        node.number_of_assignments += 1;
        node.cells = mask;
        if size == 0 {
            continue;
        }
        let Some(t) = node.memory_map.get_mut(resource) else {
            continue;
        };
        if t.free == 0 {
            continue;
        }
        let take = t.free.min(size);
        t.reserved += take;
        t.free -= take;
        size -= take;
    }
}

/// Gives back a container's block (the kubelet's `RemoveContainer` loop):
/// one assignment less on every node of the block (cells reset to the node
/// itself when none is left) and `size` bytes moved from reserved to free,
/// lowest node first.
pub fn unreserve(state: &mut MachineState, block: &Block) {
    let mut size = block.size;
    for id in block.numa_affinity.iter() {
        let Some(node) = state.get_mut(&id) else {
            continue;
        };
        node.number_of_assignments -= 1;
        if node.number_of_assignments == 0 {
            node.cells = NumaMask::single(id);
        }
        if size == 0 {
            continue;
        }
        let Some(t) = node.memory_map.get_mut(&block.resource) else {
            continue;
        };
        let give = t.reserved.min(size);
        t.free += give;
        t.reserved -= give;
        size -= give;
    }
}

/// Why a restored state is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// An assignment names a node the machine lacks.
    #[error(
        "pod {pod} container {container}: its {resource} block is on NUMA nodes {mask}, \
         but this machine has no NUMA node {node}"
    )]
    UnknownNode {
        /// Pod uid.
        pod: String,
        /// Container.
        container: String,
        /// Resource.
        resource: String,
        /// The block's nodes.
        mask: NumaMask,
        /// The missing node.
        node: NumaNodeId,
    },
    /// An assignment of a resource the node lacks.
    #[error(
        "pod {pod} container {container}: it holds {resource} on NUMA node {node}, \
         which has no {resource}"
    )]
    UnknownResource {
        /// Pod uid.
        pod: String,
        /// Container.
        container: String,
        /// Resource.
        resource: String,
        /// Node.
        node: NumaNodeId,
    },
    /// An empty block mask.
    #[error("pod {pod} container {container}: a {resource} block has no NUMA node")]
    EmptyBlock {
        /// Pod uid.
        pod: String,
        /// Container.
        container: String,
        /// Resource.
        resource: String,
    },
    /// Assignments without a machine state.
    #[error("the machine state is empty although it has memory assignments")]
    EmptyWithAssignments,
    /// The stored machine state is not what the machine, the config and the
    /// assignments give.
    #[error(
        "the expected machine state is different from the stored one: {0}; \
         the machine or reserved_memory changed since the state was saved — \
         release the pods or remove the state file"
    )]
    Mismatch(String),
}

/// Checks a stored machine state against this machine, the config and the
/// stored assignments, the way the kubelet's `validateState` does, but
/// without depending on the order the containers were allocated in.
///
/// The kubelet replays every block on an empty machine, iterating Go maps
/// (a random order), sets each node's cells to the affinity of the last
/// block replayed on it, and compares with the stored state: per node the
/// assignment count, the cells, every resource's total, system-reserved and
/// allocatable bytes, and free and reserved bytes summed over the node's
/// cells. The replayed cells and byte split depend on the replay order, so
/// a state reached by real allocations (an init container on nodes 0,3,
/// then an app container of the same pod on node 0) passes or fails at
/// random there. Here the order-free part of each check is kept:
///
/// * the same NUMA nodes and, per node and resource, the same total,
///   system-reserved and allocatable bytes as a fresh state of this machine
///   and config (memory added or removed, reservations changed);
/// * per node, as many assignments as blocks touching it (for a pod with
///   pod-level blocks, those, not its containers' shares of them);
/// * per node, cells that contain the node, name only nodes of the machine
///   and are the node alone when nothing is allocated there (a group keeps
///   the affinity of the last block placed on the node, which may since
///   have been released, so it is not otherwise derivable);
/// * per node and resource, free + reserved = allocatable (nothing
///   over-committed);
/// * per resource, at least as many bytes reserved over the machine as the
///   blocks hold. Not "exactly as many", and not per node: the kubelet's
///   release gives a block's bytes back lowest node first from whatever its
///   nodes hold, so when a single-node block shares a node with a group's
///   block, releases can leave bytes reserved on a node no block names
///   (the kubelet's own replay then refuses its state file; here it
///   restores, and the accounting goes on exactly as the kubelet's).
pub fn validate(
    machine: &MachineMemory,
    stored: &MachineState,
    assignments: &Assignments,
    pod_blocks: &PodBlocks,
) -> Result<(), StateError> {
    let fresh = default_state(machine);
    let ids = |s: &MachineState| s.keys().fold(NumaMask::EMPTY, |m, &id| m.with(id));
    if ids(stored) != ids(&fresh) {
        return Err(StateError::Mismatch(format!(
            "it has NUMA nodes {} but the machine has {}",
            ids(stored),
            ids(&fresh)
        )));
    }
    let mut count: BTreeMap<NumaNodeId, i64> = BTreeMap::new();
    // A pod with pod-level blocks holds those; its containers' blocks are
    // shares of them and hold nothing more (the kubelet's validateState).
    let holders = assignments
        .iter()
        .flat_map(|(pod, containers)| {
            containers
                .iter()
                .map(move |(c, blocks)| (pod, c.as_str(), blocks, !pod_blocks.contains_key(pod)))
        })
        .chain(
            pod_blocks
                .iter()
                .map(|(pod, blocks)| (pod, "", blocks, true)),
        );
    for (pod, container, blocks, holds) in holders {
        for b in blocks {
            if b.numa_affinity.is_empty() {
                return Err(StateError::EmptyBlock {
                    pod: pod.clone(),
                    container: container.to_owned(),
                    resource: b.resource.clone(),
                });
            }
            for id in b.numa_affinity.iter() {
                let Some(node) = fresh.get(&id) else {
                    return Err(StateError::UnknownNode {
                        pod: pod.clone(),
                        container: container.to_owned(),
                        resource: b.resource.clone(),
                        mask: b.numa_affinity,
                        node: id,
                    });
                };
                if !node.memory_map.contains_key(&b.resource) {
                    return Err(StateError::UnknownResource {
                        pod: pod.clone(),
                        container: container.to_owned(),
                        resource: b.resource.clone(),
                        node: id,
                    });
                }
                if holds {
                    *count.entry(id).or_insert(0) += 1;
                }
            }
        }
    }
    let all = machine.mask();
    for (id, s) in stored {
        let Some(e) = fresh.get(id) else {
            continue;
        };
        let names = |n: &NodeState| n.memory_map.keys().cloned().collect::<Vec<_>>();
        if names(s) != names(e) {
            return Err(StateError::Mismatch(format!(
                "NUMA node {id} has resources [{}], expected [{}]",
                names(s).join(", "),
                names(e).join(", ")
            )));
        }
        for (resource, st) in &s.memory_map {
            let Some(et) = e.memory_map.get(resource) else {
                continue;
            };
            for (field, a, b) in [
                ("total", st.total, et.total),
                ("system-reserved", st.system_reserved, et.system_reserved),
                ("allocatable", st.allocatable, et.allocatable),
            ] {
                if a != b {
                    return Err(StateError::Mismatch(format!(
                        "NUMA node {id} {resource} {field} is {}, expected {}",
                        BinarySi(a),
                        BinarySi(b)
                    )));
                }
            }
        }
        let expected = count.get(id).copied().unwrap_or(0);
        if s.number_of_assignments != expected {
            return Err(StateError::Mismatch(format!(
                "NUMA node {id} has {} assignments, but {expected} memory blocks of the \
                 containers are on it",
                s.number_of_assignments
            )));
        }
        let alone = NumaMask::single(*id);
        if !alone.is_subset_of(s.cells) || !s.cells.is_subset_of(all) {
            return Err(StateError::Mismatch(format!(
                "NUMA node {id} is grouped with nodes {}, which must include it and be nodes of \
                 the machine ({all})",
                s.cells
            )));
        }
        if expected == 0 && s.cells != alone {
            return Err(StateError::Mismatch(format!(
                "NUMA node {id} is grouped with nodes {} although no memory is allocated on it \
                 (expected {id} alone)",
                s.cells
            )));
        }
        for (resource, st) in &s.memory_map {
            if st.free.checked_add(st.reserved) != Some(st.allocatable) {
                return Err(StateError::Mismatch(format!(
                    "NUMA node {id} {resource}: {} free and {} reserved do not add up to its \
                     allocatable {}",
                    BinarySi(st.free),
                    BinarySi(st.reserved),
                    BinarySi(st.allocatable)
                )));
            }
        }
    }
    let mut sums: BTreeMap<&str, (u128, u128)> = BTreeMap::new();
    for (resource, t) in stored.values().flat_map(|n| n.memory_map.iter()) {
        sums.entry(resource.as_str()).or_default().0 += u128::from(t.reserved);
    }
    let held = assignments
        .iter()
        .filter(|(pod, _)| !pod_blocks.contains_key(*pod))
        .flat_map(|(_, c)| c.values())
        .chain(pod_blocks.values())
        .flatten();
    for b in held {
        sums.entry(b.resource.as_str()).or_default().1 += u128::from(b.size);
    }
    for (resource, (held, blocks)) in sums {
        if held < blocks {
            return Err(StateError::Mismatch(format!(
                "{resource} reserved on all NUMA nodes is {}, less than the containers' blocks \
                 hold ({})",
                BinarySi(u64::try_from(held).unwrap_or(u64::MAX)),
                BinarySi(u64::try_from(blocks).unwrap_or(u64::MAX))
            )));
        }
    }
    Ok(())
}
