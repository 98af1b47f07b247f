//! What the memory provider reports for the NodeResourceTopology export:
//! `memory` and every `hugepages-<size>` per NUMA node, in bytes, from its
//! machine state (the kubelet memory manager's `machineState`, which the
//! NRT exporters read through the PodResources API):
//!
//! * `capacity`: everything the node has (MemTotal; pages x page size);
//! * `allocatable`: capacity minus `reserved_memory` (for `memory` also
//!   minus the node's hugepages, as the kubelet computes it);
//! * `available`: allocatable minus what containers hold (memory placed on
//!   several nodes counts lowest node first, as the kubelet places it).
//!
//! Every NUMA node is a zone for every resource (zero where a node lacks
//! a hugepage size). Under `policy = "none"` nothing is allocatable (the
//! kubelet's none policy reports no allocatable memory).

use std::collections::BTreeMap;

use topomgr_sdk::{Amounts, Inventory, ResourceInventory, Zone};

use crate::machine::{MachineMemory, MEMORY};
use crate::state::MachineState;

/// The inventory of `machine`; `state` is the static policy's machine
/// state (`None` under the none policy: nothing allocatable).
pub fn memory_inventory(machine: &MachineMemory, state: Option<&MachineState>) -> Inventory {
    let mut names: Vec<String> = vec![MEMORY.to_owned()];
    for n in &machine.nodes {
        names.extend(n.hugepages.keys().cloned());
    }
    names.sort();
    names.dedup();
    let mut per_resource: BTreeMap<String, ResourceInventory> = BTreeMap::new();
    for name in names {
        let zones: Vec<Zone> = machine
            .nodes
            .iter()
            .map(|node| {
                let capacity = if name == MEMORY {
                    node.memory_total
                } else {
                    node.hugepages.get(&name).copied().unwrap_or(0)
                };
                let table = state
                    .and_then(|s| s.get(&node.id))
                    .and_then(|s| s.memory_map.get(&name));
                let amounts = match table {
                    Some(t) => Amounts::new(capacity, t.allocatable, t.free),
                    None => Amounts::new(capacity, 0, 0),
                };
                Zone::new(Some(node.id), amounts)
            })
            .collect();
        let mut total = Amounts::default();
        for z in &zones {
            total.add(z.amounts);
        }
        per_resource.insert(name, ResourceInventory::new(total, zones));
    }
    per_resource
        .into_iter()
        .fold(Inventory::new(), |inv, (name, r)| {
            inv.with_resource(name, r)
        })
}
