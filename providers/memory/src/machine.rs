//! Per-NUMA memory capacities taken from the SDK [`Machine`], with the
//! operator's reserved memory checked against them.

use std::collections::BTreeMap;

use topomgr_sdk::quantity::{hugepage_resource_name, BinarySi};
use topomgr_sdk::{Machine, NumaMask, NumaNode, NumaNodeId};

/// The resource name of regular memory.
pub const MEMORY: &str = "memory";

/// What one NUMA node offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMemory {
    /// Node id.
    pub id: NumaNodeId,
    /// MemTotal of the node, bytes.
    pub memory_total: u64,
    /// Total bytes of hugepages by resource name (`hugepages-2Mi`), every size
    /// the node reports (zero pages included, as cAdvisor lists them).
    pub hugepages: BTreeMap<String, u64>,
}

/// Capacities of the whole machine plus the system-reserved amounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineMemory {
    /// Nodes, ascending by id.
    pub nodes: Vec<NodeMemory>,
    /// Reserved bytes by node and resource (validated against `nodes`).
    pub reserved: BTreeMap<NumaNodeId, BTreeMap<String, u64>>,
}

/// Why the machine and the reserved memory do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    /// A hugepage size key that is not `<n>kB`.
    #[error(
        "NUMA node {node}: hugepage size {key:?} is not \"<size>kB\"; check the machine's \
         sysfs (nodeN/hugepages/hugepages-<size>kB)"
    )]
    PageSize {
        /// Node id.
        node: NumaNodeId,
        /// The key as discovered.
        key: String,
    },
    /// Hugepage bytes beyond 64 bits.
    #[error("NUMA node {node}: {pages} pages of {key} overflow a 64-bit byte count")]
    Overflow {
        /// Node id.
        node: NumaNodeId,
        /// The size key.
        key: String,
        /// Page count.
        pages: u64,
    },
    /// Reserved memory for a node the machine lacks (a node id that was
    /// never right, or a node that is gone). Refused like any config error
    /// (the kubelet refuses reserved memory it cannot place): a restart
    /// after the node went away stops here until the config is fixed; a
    /// reload keeps the running provider and says so. The pods and the
    /// saved state are kept either way.
    #[error(
        "reserved_memory.{node}: this machine has no NUMA node {node} (its nodes are {nodes}); \
         reserve that memory on a node it has (rename the table to reserved_memory.<one of \
         {nodes}>) or remove the table"
    )]
    UnknownNode {
        /// The configured node id.
        node: NumaNodeId,
        /// The machine's nodes.
        nodes: String,
    },
    /// Reserved hugepages of a size the node does not have.
    #[error(
        "reserved_memory.{node}.{resource}: NUMA node {node} has no {resource} (it has: {have})"
    )]
    UnknownResource {
        /// Node id.
        node: NumaNodeId,
        /// The resource.
        resource: String,
        /// What the node has.
        have: String,
    },
    /// More reserved than the node has.
    #[error(
        "reserved_memory.{node}.{resource} = {reserved} is more than NUMA node {node} can give: {detail}"
    )]
    TooMuch {
        /// Node id.
        node: NumaNodeId,
        /// The resource.
        resource: String,
        /// The reserved amount.
        reserved: BinarySi,
        /// What the node has.
        detail: String,
    },
}

impl NodeMemory {
    /// Bytes of all hugepages of the node.
    pub fn hugepage_bytes(&self) -> u64 {
        self.hugepages
            .values()
            .fold(0u64, |a, b| a.saturating_add(*b))
    }

    fn from_node(n: &NumaNode) -> Result<NodeMemory, MachineError> {
        let mut hugepages = BTreeMap::new();
        for (key, pages) in &n.hugepages {
            let size =
                NumaNode::hugepage_size_bytes(key).ok_or_else(|| MachineError::PageSize {
                    node: n.id,
                    key: key.clone(),
                })?;
            let total = size
                .checked_mul(pages.total)
                .ok_or_else(|| MachineError::Overflow {
                    node: n.id,
                    key: key.clone(),
                    pages: pages.total,
                })?;
            hugepages.insert(hugepage_resource_name(size), total);
        }
        Ok(NodeMemory {
            id: n.id,
            memory_total: n.memory_bytes,
            hugepages,
        })
    }
}

impl MachineMemory {
    /// Capacities of `machine`, with `reserved` checked: every node must
    /// exist, every hugepage size must exist on its node, and no reservation
    /// may exceed what the node has (for regular memory: its total minus all
    /// of its hugepages), so allocatable never goes below zero.
    pub fn new(
        machine: &Machine,
        reserved: &BTreeMap<NumaNodeId, BTreeMap<String, u64>>,
    ) -> Result<MachineMemory, MachineError> {
        let nodes = machine
            .numa_nodes
            .iter()
            .map(NodeMemory::from_node)
            .collect::<Result<Vec<_>, _>>()?;
        for (&id, per) in reserved {
            let Some(node) = nodes.iter().find(|n| n.id == id) else {
                return Err(MachineError::UnknownNode {
                    node: id,
                    nodes: machine.numa_mask().to_string(),
                });
            };
            for (resource, &bytes) in per {
                if resource == MEMORY {
                    let huge = node.hugepage_bytes();
                    let left = node.memory_total.saturating_sub(huge);
                    if bytes > left {
                        return Err(MachineError::TooMuch {
                            node: id,
                            resource: resource.clone(),
                            reserved: BinarySi(bytes),
                            detail: format!(
                                "{} total minus {} of hugepages leaves {}",
                                BinarySi(node.memory_total),
                                BinarySi(huge),
                                BinarySi(left)
                            ),
                        });
                    }
                    continue;
                }
                let Some(&total) = node.hugepages.get(resource) else {
                    let have: Vec<&str> = node.hugepages.keys().map(String::as_str).collect();
                    return Err(MachineError::UnknownResource {
                        node: id,
                        resource: resource.clone(),
                        have: if have.is_empty() {
                            "no hugepages".to_owned()
                        } else {
                            have.join(", ")
                        },
                    });
                };
                if bytes > total {
                    return Err(MachineError::TooMuch {
                        node: id,
                        resource: resource.clone(),
                        reserved: BinarySi(bytes),
                        detail: format!("it has {} of {resource}", BinarySi(total)),
                    });
                }
            }
        }
        Ok(MachineMemory {
            nodes,
            reserved: reserved.clone(),
        })
    }

    /// The bytes of `resource` reserved on `node` (0 when not configured).
    pub fn reserved_on(&self, node: NumaNodeId, resource: &str) -> u64 {
        self.reserved
            .get(&node)
            .and_then(|m| m.get(resource))
            .copied()
            .unwrap_or(0)
    }

    /// Node ids, ascending.
    pub fn node_ids(&self) -> Vec<NumaNodeId> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// All node ids as a mask.
    pub fn mask(&self) -> NumaMask {
        self.nodes.iter().fold(NumaMask::EMPTY, |m, n| m.with(n.id))
    }
}
