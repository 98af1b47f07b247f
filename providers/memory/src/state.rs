//! The memory manager's machine state and container assignments, in the
//! kubelet's model and JSON shape (`memory_manager_state`): per NUMA node
//! and resource the total, system-reserved, allocatable, reserved and free
//! bytes, the node's assignment count and its *cells* (the group of nodes it
//! is allocated with); per container the memory blocks it holds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use topomgr_sdk::{NumaMask, NumaNodeId};

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
/// itself when none is left) and `size` bytes given back, lowest node
/// first; a node's free bytes are its allocatable minus what is still held
/// there.
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
        t.reserved -= give;
        // Allocatable may have shrunk below what was held (see
        // `crate::reconcile`): free is what is left, never more.
        t.free = t.allocatable.saturating_sub(t.reserved);
        size -= give;
    }
}
