//! The `numa-allocation-strategy` policy option: which of the hints the
//! merge finds equally good is taken, from how much of each NUMA node is
//! already allocated.
//!
//! Semantics follow KEP-6007 as reworked upstream (kubernetes/kubernetes
//! #142226, work in progress; the problem is #125453, the earlier proposal
//! #136431 / #138321):
//!
//! - The strategy never changes which hints are admissible nor which is
//!   preferred: the comparison is the preferred flag, then the width (and,
//!   with `prefer-closest-numa-nodes`, the average distance), and only then
//!   the allocation score; equal scores fall back to the kubelet's lowest
//!   mask value (`lowest-index`).
//! - A resource's score over a set of NUMA nodes `M` is its utilisation in
//!   whole percent, `max(1, (allocatable(M) - available(M)) * 100 /
//!   allocatable(M))` (upstream's per-provider `Score`, range 1..=100; the
//!   amounts are summed over the nodes of `M`). A mask's score is the
//!   integer average over the contended resources, those the workload
//!   requests with a topology (a hint list) that the providers report per
//!   NUMA node; `most-allocated` prefers the higher score, `least-allocated`
//!   the lower one. Upstream's default weights (`numa-score-weights` unset)
//!   are those of this average; topomgr has no weights option.
//!
//! Where upstream is not defined, or topomgr's set-based merge cannot follow
//! it, the choices are (also in `docs/configuration.md`):
//!
//! - The amounts come from the providers' inventories (SDK named call
//!   `inventory`: allocatable and available per NUMA node), asked at each
//!   decision only when a strategy other than `lowest-index` is set. A
//!   provider that reports no inventory, fails to, or does not list a
//!   requested resource leaves that resource out of the score: it is treated
//!   as not contended.
//! - A mask is scored over its own nodes. Upstream averages the scores the
//!   providers gave the hints of a permutation; for a preferred merged hint
//!   every hint has the merged mask, so the two agree. For a non-preferred
//!   one (best-effort only; the other policies refuse it) upstream's score
//!   depends on the permutation that reached the mask first, which topomgr's
//!   merge does not enumerate; the mask's own score is what it will be
//!   allocated from.
//! - A mask with no contended resource (no score) ranks after every scored
//!   mask of the same width and distance. Upstream's "either unscored: no
//!   preference" is not an order (its result depends on the enumeration
//!   order); topomgr's merge needs a total order to be a function of sets.
//! - `lowest-index` is topomgr's name of the default; upstream's spelling of
//!   it, `none`, is accepted too.

use std::collections::BTreeMap;
use std::fmt;

use topomgr_sdk::{Inventory, NodePositions, NumaMask, NumaNodeId};

/// The values of `numa-allocation-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocationStrategy {
    /// The kubelet's tie-break: the smallest mask (lowest node ids). The default.
    #[default]
    LowestIndex,
    /// Pack: among equally good masks, the most allocated.
    MostAllocated,
    /// Spread: among equally good masks, the least allocated.
    LeastAllocated,
}

impl AllocationStrategy {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AllocationStrategy::LowestIndex => "lowest-index",
            AllocationStrategy::MostAllocated => "most-allocated",
            AllocationStrategy::LeastAllocated => "least-allocated",
        }
    }

    /// Every accepted spelling (`none` is upstream's name of `lowest-index`).
    pub const ALLOWED: &'static str = "lowest-index, most-allocated or least-allocated \
         (none is accepted as upstream's spelling of lowest-index)";

    /// Parse a configured value; `None` for one that is not a strategy.
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "lowest-index" | "none" => AllocationStrategy::LowestIndex,
            "most-allocated" => AllocationStrategy::MostAllocated,
            "least-allocated" => AllocationStrategy::LeastAllocated,
            _ => return None,
        })
    }
}

impl fmt::Display for AllocationStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much of each contended resource every NUMA node has allocatable and
/// available now, for the strategy's score. Resources are kept in the order
/// added; nodes the machine does not have are ignored by the merge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Occupancy {
    resources: Vec<(String, BTreeMap<NumaNodeId, Amount>)>,
}

/// Allocatable and available amounts of one resource on one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Amount {
    allocatable: u64,
    available: u64,
}

impl Occupancy {
    /// No resource contended.
    pub fn new() -> Self {
        Occupancy::default()
    }

    /// Adds `resource` with its `(node, allocatable, available)` per NUMA
    /// node (a node listed twice adds up; `available` above `allocatable`
    /// counts as nothing allocated).
    pub fn add(
        &mut self,
        resource: impl Into<String>,
        nodes: impl IntoIterator<Item = (NumaNodeId, u64, u64)>,
    ) {
        let mut per_node: BTreeMap<NumaNodeId, Amount> = BTreeMap::new();
        for (node, allocatable, available) in nodes {
            let a = per_node.entry(node).or_default();
            a.allocatable = a.allocatable.saturating_add(allocatable);
            a.available = a.available.saturating_add(available.min(allocatable));
        }
        self.resources.push((resource.into(), per_node));
    }

    /// Adds each of `resources` that `inventory` lists, from its NUMA zones
    /// (the "no NUMA node" zone is left out: it is no node's).
    pub fn add_from_inventory<'a>(
        &mut self,
        inventory: &Inventory,
        resources: impl IntoIterator<Item = &'a str>,
    ) {
        for name in resources {
            let Some(r) = inventory.resources.get(name) else {
                continue;
            };
            self.add(
                name,
                r.zones.iter().filter_map(|z| {
                    z.numa
                        .map(|n| (n, z.amounts.allocatable, z.amounts.available))
                }),
            );
        }
    }

    /// Whether no resource was added.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
    }

    /// The contended resources, in the order added.
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        self.resources.iter().map(|(n, _)| n.as_str())
    }

    /// The score of `mask` (see the module documentation): `None` when no
    /// resource has anything allocatable on its nodes.
    pub fn score(&self, mask: NumaMask) -> Option<u64> {
        let nodes: Vec<NumaNodeId> = mask.iter().collect();
        score_of(self.resources.iter().map(|(_, per_node)| {
            nodes
                .iter()
                .filter_map(|n| per_node.get(n))
                .fold((0u64, 0u64), |(al, av), a| {
                    (
                        al.saturating_add(a.allocatable),
                        av.saturating_add(a.available),
                    )
                })
        }))
    }

    /// The table over the machine's node positions, for the merge.
    pub(crate) fn by_position(&self, pos: &NodePositions) -> PositionOccupancy {
        PositionOccupancy {
            resources: self
                .resources
                .iter()
                .map(|(_, per_node)| {
                    // Positions are below 64 (the ids themselves when every
                    // id is).
                    let mut row = vec![Amount::default(); 64];
                    for (node, a) in per_node {
                        let bit = pos.to_positions(NumaMask::single(*node));
                        if bit != 0 {
                            row[bit.trailing_zeros() as usize] = *a;
                        }
                    }
                    row
                })
                .collect(),
        }
    }
}

/// The average of the resources' scores, each from its summed
/// `(allocatable, available)`; resources with nothing allocatable take no
/// part.
fn score_of(sums: impl Iterator<Item = (u64, u64)>) -> Option<u64> {
    let (mut total, mut count) = (0u64, 0u64);
    for (allocatable, available) in sums {
        if allocatable == 0 {
            continue;
        }
        let used = u128::from(allocatable - available.min(allocatable));
        let pct = (used * 100 / u128::from(allocatable)) as u64;
        total += pct.max(1);
        count += 1;
    }
    (count > 0).then(|| total / count)
}

/// [`Occupancy`] indexed by node position (`resources[r][position]`).
#[derive(Debug, Clone)]
pub(crate) struct PositionOccupancy {
    resources: Vec<Vec<Amount>>,
}

impl PositionOccupancy {
    /// The score of a mask of node positions.
    pub(crate) fn score(&self, mask: u64) -> Option<u64> {
        score_of(self.resources.iter().map(|row| {
            let mut m = mask;
            let (mut al, mut av) = (0u64, 0u64);
            while m != 0 {
                let p = m.trailing_zeros() as usize;
                m &= m - 1;
                if let Some(a) = row.get(p) {
                    al = al.saturating_add(a.allocatable);
                    av = av.saturating_add(a.available);
                }
            }
            (al, av)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(n: u8) -> NumaNodeId {
        NumaNodeId::from(n)
    }

    #[test]
    fn spellings_and_refusals() {
        for (s, want) in [
            ("lowest-index", AllocationStrategy::LowestIndex),
            ("none", AllocationStrategy::LowestIndex),
            ("most-allocated", AllocationStrategy::MostAllocated),
            ("least-allocated", AllocationStrategy::LeastAllocated),
        ] {
            assert_eq!(AllocationStrategy::parse(s), Some(want), "{s}");
        }
        for bad in ["", "Most-Allocated", "pack", "most_allocated", " none"] {
            assert_eq!(AllocationStrategy::parse(bad), None, "{bad:?}");
        }
        assert_eq!(AllocationStrategy::default().as_str(), "lowest-index");
    }

    #[test]
    fn scores_are_upstreams_whole_percent_averaged_over_resources() {
        let mut o = Occupancy::new();
        // cpu: node 0 has 10 of 16 used, node 1 none of 16.
        o.add("cpu", [(node(0), 16_000, 6_000), (node(1), 16_000, 16_000)]);
        let m0 = NumaMask::single(node(0));
        let m1 = NumaMask::single(node(1));
        let both = NumaMask::from_nodes([0, 1]).unwrap();
        assert_eq!(o.score(m0), Some(62)); // 10/16 = 62.5%, truncated
        assert_eq!(o.score(m1), Some(1)); // nothing used: the floor of 1
        assert_eq!(o.score(both), Some(31)); // 10/32
                                             // memory: node 1 full, node 0 empty; the average of both resources.
        o.add(
            "memory",
            [(node(0), 1 << 30, 1 << 30), (node(1), 1 << 30, 0)],
        );
        assert_eq!(o.score(m0), Some(31)); // (62 + 1) / 2
        assert_eq!(o.score(m1), Some(50)); // (1 + 100) / 2
                                           // A node with nothing allocatable of any resource has no score.
        assert_eq!(o.score(NumaMask::single(node(2))), None);
        // The position table agrees.
        let pos = NodePositions::new([node(0), node(1), node(2)]).unwrap();
        let t = o.by_position(&pos);
        for (mask, bits) in [
            (m0, 1u64),
            (m1, 2),
            (both, 3),
            (NumaMask::single(node(2)), 4),
        ] {
            assert_eq!(t.score(bits), o.score(mask), "{mask:?}");
        }
    }

    #[test]
    fn inventories_give_their_numa_zones_only() {
        use topomgr_sdk::{Amounts, ResourceInventory, Zone};
        let inv = Inventory::new().with_resource(
            "example.com/gpu",
            ResourceInventory::new(
                Amounts::new(3, 3, 1),
                vec![
                    Zone::new(Some(node(0)), Amounts::new(2, 2, 0)),
                    Zone::new(Some(node(1)), Amounts::new(1, 1, 1)),
                    Zone::new(None, Amounts::new(5, 5, 5)),
                ],
            ),
        );
        let mut o = Occupancy::new();
        o.add_from_inventory(&inv, ["example.com/gpu", "cpu"]);
        assert_eq!(o.resources().collect::<Vec<_>>(), ["example.com/gpu"]);
        assert_eq!(o.score(NumaMask::single(node(0))), Some(100));
        assert_eq!(o.score(NumaMask::single(node(1))), Some(1));
    }
}
