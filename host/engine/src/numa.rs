//! The machine's NUMA nodes as the policy and the merge see them: node ids,
//! their positions in a mask, and the distance table.
//!
//! Both [`crate::policy`] (which ranks hints by average distance) and
//! [`crate::merge`] (which walks masks over the present nodes) depend on this
//! module; neither depends on the other's internals through it.

use topomgr_sdk::{NodePositions, NumaMask, NumaNodeId};

/// A NUMA node list or distance table that cannot describe a machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid NUMA information: {0}")]
pub struct NumaError(String);

/// The machine's NUMA nodes and (optionally) their distance table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaInfo {
    nodes: Vec<u32>,
    mask: NumaMask,
    positions: NodePositions,
    /// `distances[i][j]`: distance from `nodes[i]` to `nodes[j]`.
    distances: Option<Vec<Vec<u64>>>,
}

impl NumaInfo {
    /// NUMA information from node ids (any order, no duplicates) and an
    /// optional distance table whose rows and columns follow `nodes`.
    pub fn new(nodes: Vec<u32>, distances: Option<Vec<Vec<u64>>>) -> Result<Self, NumaError> {
        let mut mask = NumaMask::EMPTY;
        for &n in &nodes {
            let id = NumaNodeId::new(n).map_err(|e| NumaError(e.to_string()))?;
            if mask.contains(id) {
                return Err(NumaError(format!("NUMA node {n} is listed twice")));
            }
            mask.insert(id);
        }
        let positions = NodePositions::new(mask).map_err(|e| NumaError(e.to_string()))?;
        if let Some(rows) = &distances {
            if rows.len() != nodes.len() {
                return Err(NumaError(format!(
                    "distance table has {} rows for {} NUMA nodes",
                    rows.len(),
                    nodes.len()
                )));
            }
            for (i, row) in rows.iter().enumerate() {
                if row.len() != nodes.len() {
                    return Err(NumaError(format!(
                        "distance row of node {} has {} entries, expected {}",
                        nodes[i],
                        row.len(),
                        nodes.len()
                    )));
                }
            }
        }
        Ok(NumaInfo {
            nodes,
            mask,
            positions,
            distances,
        })
    }

    /// NUMA information of a discovered machine (distances from sysfs).
    pub fn from_machine(machine: &topomgr_sdk::Machine) -> Result<Self, NumaError> {
        let nodes = machine.numa_ids();
        let complete = machine
            .numa_nodes
            .iter()
            .all(|n| nodes.iter().all(|id| n.distances.contains_key(id)));
        let distances = complete.then(|| {
            machine
                .numa_nodes
                .iter()
                .map(|n| nodes.iter().map(|id| u64::from(n.distances[id])).collect())
                .collect()
        });
        NumaInfo::new(nodes.into_iter().map(u32::from).collect(), distances)
    }

    /// True when a distance table is known.
    pub(crate) fn has_distances(&self) -> bool {
        self.distances.is_some()
    }

    /// Node ids in the order given.
    pub(crate) fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    /// All nodes as a mask (the kubelet's default affinity).
    pub fn default_mask(&self) -> NumaMask {
        self.mask
    }

    /// The nodes' positions, for 64-bit masks over the present nodes.
    pub(crate) fn positions(&self) -> &NodePositions {
        &self.positions
    }

    fn position(&self, node: NumaNodeId) -> Option<usize> {
        self.nodes.iter().position(|&n| node == n)
    }

    /// Average distance over all ordered pairs of nodes in `mask` (self pairs
    /// included), summed in the kubelet's order; `None` without a table.
    pub(crate) fn average_distance(&self, mask: NumaMask) -> Option<f64> {
        let rows = self.distances.as_ref()?;
        if mask.is_empty() {
            return Some(0.0);
        }
        let pos: Vec<usize> = mask.iter().filter_map(|n| self.position(n)).collect();
        let mut sum = 0f64;
        let mut count = 0f64;
        for &a in &pos {
            for &b in &pos {
                sum += rows[a][b] as f64;
                count += 1.0;
            }
        }
        Some(sum / count)
    }
}
