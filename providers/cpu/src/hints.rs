//! CPU topology hints exactly as the kubelet's `generateCPUTopologyHints`.
//!
//! For every NUMA mask over the nodes that have CPUs (kubelet order: by width,
//! then lexicographic), the mask is a hint when every reusable CPU lies in it
//! and the reusable CPUs plus the free CPUs in it reach the request. A hint
//! is preferred when its width equals the narrowest width whose *total*
//! CPUs reach the request (the machine's node count if none does), or, with
//! `align-by-socket`, when it spans exactly the minimum number of sockets.
//!
//! Above [`EXPLICIT_MAX_NODES`] NUMA nodes the same hints are answered in
//! the SDK's compact form: the minimal masks (every superset of one is a
//! hint) and the preferred width. `align-by-socket`'s extra preferred hints
//! cannot be said in that form; there only the width rule marks preference.

use std::collections::{BTreeMap, BTreeSet};

use topomgr_sdk::{
    for_each_mask_in_kubelet_order, CompactHints, HintSet, NumaMask, NumaNodeId, TopologyHint,
};

use crate::error::CpuError;
use crate::topology::{CpuTopology, Cpus, Level};

/// Machines with more NUMA nodes (with CPUs) than this get compact hints.
pub const EXPLICIT_MAX_NODES: usize = 8;
/// The most minimal masks a compact answer may hold.
pub const MAX_MINIMAL_MASKS: usize = 65_536;

/// What the hints are computed from.
#[derive(Debug, Clone, Copy)]
pub struct HintRequest<'a> {
    /// Free CPUs (the shared pool minus reserved CPUs).
    pub available: &'a Cpus,
    /// CPUs the container may reuse (init containers', the pod's own).
    pub reusable: &'a Cpus,
    /// CPUs requested.
    pub request: usize,
    /// The `align-by-socket` option.
    pub align_by_socket: bool,
}

/// The mask of node `node` (node ids come from the machine, so always in range).
pub(crate) fn bit(node: u32) -> NumaMask {
    NumaNodeId::new(node).map_or(NumaMask::EMPTY, NumaMask::single)
}

/// Node ids as the SDK's type (node ids come from the machine).
pub(crate) fn node_ids(nodes: &[u32]) -> Vec<NumaNodeId> {
    nodes
        .iter()
        .filter_map(|&n| NumaNodeId::new(n).ok())
        .collect()
}

fn mask_sum(mask: NumaMask, per_node: &BTreeMap<u32, usize>) -> usize {
    mask.iter()
        .map(|n| per_node.get(&n.get()).copied().unwrap_or(0))
        .sum()
}

/// The narrowest width whose total CPUs reach `request` (kubelet's minAffinitySize).
fn min_affinity_size(topo: &CpuTopology, request: usize) -> u32 {
    let mut totals: Vec<usize> = topo
        .count_by(&topo.all_cpus(), Level::Numa)
        .into_values()
        .collect();
    totals.sort_unstable_by(|a, b| b.cmp(a));
    let mut sum = 0;
    for (i, t) in totals.iter().enumerate() {
        sum += t;
        if sum >= request {
            return i as u32 + 1;
        }
    }
    totals.len() as u32
}

fn socket_aligned(topo: &CpuTopology, mask: NumaMask, min_size: u32) -> bool {
    let per_socket = topo
        .num_numa_nodes()
        .checked_div(topo.num_sockets())
        .unwrap_or(0);
    if per_socket == 0 {
        return false;
    }
    let min_sockets = (min_size as usize).div_ceil(per_socket);
    let nodes: BTreeSet<u32> = mask.iter().map(NumaNodeId::get).collect();
    topo.sockets_in_numa_nodes(&nodes).len() == min_sockets
}

/// The hints for `req` on `topo`: explicit up to [`EXPLICIT_MAX_NODES`]
/// nodes, compact above.
pub fn generate(topo: &CpuTopology, req: &HintRequest<'_>) -> Result<HintSet, CpuError> {
    let nodes = topo.numa_nodes();
    let free = topo.count_by(req.available, Level::Numa);
    let reusable_mask = topo
        .groups_of(req.reusable, Level::Numa)
        .into_iter()
        .fold(NumaMask::EMPTY, |m, n| m.or(bit(n)));
    let reusable = req.reusable.len();
    let min_size = min_affinity_size(topo, req.request);
    if nodes.len() <= EXPLICIT_MAX_NODES {
        let mut hints = Vec::new();
        for_each_mask_in_kubelet_order(&node_ids(&nodes), |mask| {
            if !reusable_mask.is_subset_of(mask) {
                return;
            }
            if reusable + mask_sum(mask, &free) < req.request {
                return;
            }
            let preferred = (req.align_by_socket && socket_aligned(topo, mask, min_size))
                || mask.count() == min_size;
            hints.push(TopologyHint::new(mask, preferred));
        });
        return Ok(HintSet::Explicit(hints));
    }
    let minimal = minimal_masks(&nodes, &free, reusable_mask, reusable, req.request)?;
    if minimal.is_empty() {
        return Ok(HintSet::Explicit(Vec::new()));
    }
    Ok(HintSet::Compact(CompactHints {
        minimal,
        within: Vec::new(),
        preferred_width: min_size,
    }))
}

/// Every minimal mask containing `base` whose free CPUs plus `reusable`
/// reach `request`, ordered by width then node ids.
fn minimal_masks(
    nodes: &[u32],
    free: &BTreeMap<u32, usize>,
    base: NumaMask,
    reusable: usize,
    request: usize,
) -> Result<Vec<NumaMask>, CpuError> {
    let base_sum = reusable + mask_sum(base, free);
    if !base.is_empty() && base_sum >= request {
        return Ok(vec![base]);
    }
    let candidates: Vec<(u32, usize)> = nodes
        .iter()
        .filter(|n| !base.intersects(bit(**n)))
        .map(|n| (*n, free.get(n).copied().unwrap_or(0)))
        .filter(|(_, f)| *f > 0)
        .collect();
    let mut suffix = vec![0usize; candidates.len() + 1];
    for i in (0..candidates.len()).rev() {
        suffix[i] = suffix[i + 1] + candidates[i].1;
    }
    struct Walk<'a> {
        candidates: &'a [(u32, usize)],
        suffix: &'a [usize],
        request: usize,
        out: Vec<NumaMask>,
    }
    impl Walk<'_> {
        fn rec(
            &mut self,
            start: usize,
            mask: NumaMask,
            sum: usize,
            smallest: usize,
        ) -> Result<(), CpuError> {
            for i in start..self.candidates.len() {
                if sum + self.suffix[i] < self.request {
                    return Ok(());
                }
                let (node, f) = self.candidates[i];
                let m = mask.or(bit(node));
                let s = sum + f;
                let small = smallest.min(f);
                if s >= self.request {
                    if s - small < self.request {
                        self.out.push(m);
                        if self.out.len() > MAX_MINIMAL_MASKS {
                            return Err(CpuError::TooManyCombinations {
                                requested: self.request,
                                max: MAX_MINIMAL_MASKS,
                            });
                        }
                    }
                } else {
                    self.rec(i + 1, m, s, small)?;
                }
            }
            Ok(())
        }
    }
    let mut walk = Walk {
        candidates: &candidates,
        suffix: &suffix,
        request,
        out: Vec::new(),
    };
    walk.rec(0, base, base_sum, usize::MAX)?;
    let mut out = walk.out;
    out.sort_by_key(|m| (m.count(), m.nodes()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testmachines::{dual_socket_ht, dual_socket_multi_numa_ht, layered};
    use topomgr_sdk::{testkit, CpuSet};

    fn set(s: &str) -> Cpus {
        CpuSet::parse(s)
            .map(|c| c.iter().collect())
            .unwrap_or_default()
    }

    fn strings(h: &HintSet, nodes: &[u32]) -> Vec<String> {
        let list = match h {
            HintSet::Explicit(v) => v.clone(),
            HintSet::Compact(c) => c.expand(&node_ids(nodes)),
        };
        list.iter().map(testkit::hint_string).collect()
    }

    fn hints_opt(
        t: &CpuTopology,
        avail: &str,
        reuse: &str,
        request: usize,
        socket: bool,
    ) -> Vec<String> {
        let (a, r) = (set(avail), set(reuse));
        let h = generate(
            t,
            &HintRequest {
                available: &a,
                reusable: &r,
                request,
                align_by_socket: socket,
            },
        )
        .unwrap();
        strings(&h, &t.numa_nodes())
    }

    fn hints(t: &CpuTopology, avail: &str, reuse: &str, request: usize) -> Vec<String> {
        hints_opt(t, avail, reuse, request, false)
    }

    #[test]
    fn hints_like_the_kubelet_on_two_nodes() {
        let t = CpuTopology::from_machine(&dual_socket_ht());
        assert_eq!(hints(&t, "0-11", "", 1), ["0:true", "1:true", "0-1:false"]);
        assert_eq!(hints(&t, "0-11", "", 6), ["0:true", "1:true", "0-1:false"]);
        assert_eq!(hints(&t, "0-11", "", 7), ["0-1:true"]);
        // Node 0 has one free CPU: a 5-CPU request fits node 1 or both.
        assert_eq!(hints(&t, "1-3,5,7,9,11", "", 5), ["1:true", "0-1:false"]);
        // Not enough free CPUs anywhere: no hint.
        assert_eq!(hints(&t, "0-3", "", 5), Vec::<String>::new());
        assert_eq!(hints(&t, "0-11", "", 12), ["0-1:true"]);
        // More than the machine has: no hint.
        assert_eq!(hints(&t, "0-11", "", 13), Vec::<String>::new());
    }

    #[test]
    fn reusable_cpus_pin_the_mask() {
        let t = CpuTopology::from_machine(&dual_socket_ht());
        // CPUs 0 and 2 (node 0) are reusable, 1 and 3 (node 1) are free.
        assert_eq!(hints(&t, "1,3", "0,2", 3), ["0-1:false"]);
        assert_eq!(hints(&t, "1,3", "0,2", 2), ["0:true", "0-1:false"]);
    }

    #[test]
    fn align_by_socket_prefers_socket_aligned_masks() {
        let t = CpuTopology::from_machine(&dual_socket_multi_numa_ht());
        let all = "0-79";
        let plain = hints_opt(&t, all, "", 20, false);
        let by_socket = hints_opt(&t, all, "", 20, true);
        assert_eq!(
            by_socket,
            [
                "0:true",
                "1:true",
                "2:true",
                "3:true",
                "0-1:true",
                "0,2:false",
                "0,3:false",
                "1-2:false",
                "1,3:false",
                "2-3:true",
                "0-2:false",
                "0-1,3:false",
                "0,2-3:false",
                "1-3:false",
                "0-3:false"
            ]
        );
        assert_eq!(plain[4], "0-1:false");
        assert_eq!(plain[9], "2-3:false");
    }

    #[test]
    fn compact_hints_above_eight_nodes() {
        // 10 NUMA nodes of 2 CPUs (node k: CPUs 2k, 2k+1).
        let t = CpuTopology::from_machine(&layered(10, 1, 2, 1));
        let all = set("0-19");
        let none = Cpus::new();
        fn req<'a>(available: &'a Cpus, reusable: &'a Cpus, request: usize) -> HintRequest<'a> {
            HintRequest {
                available,
                reusable,
                request,
                align_by_socket: false,
            }
        }
        let h = generate(&t, &req(&all, &none, 3)).unwrap();
        let HintSet::Compact(c) = h else {
            panic!("expected compact hints, got {h:?}");
        };
        assert_eq!(c.minimal.len(), 45);
        assert_eq!(c.preferred_width, 2);
        assert_eq!(c.minimal[0].to_string(), "0-1");
        assert_eq!(c.minimal[44].to_string(), "8-9");
        // CPU 0 reusable: every hint holds node 0.
        let reuse = set("0");
        let rest = set("1-19");
        let HintSet::Compact(c) = generate(&t, &req(&rest, &reuse, 3)).unwrap() else {
            panic!("expected compact hints");
        };
        let got: Vec<String> = c.minimal.iter().map(|m| m.to_string()).collect();
        assert_eq!(
            got,
            ["0-1", "0,2", "0,3", "0,4", "0,5", "0,6", "0,7", "0,8", "0,9"]
        );
        // Nothing fits: the explicit empty list.
        assert_eq!(
            generate(&t, &req(&set("0-3"), &none, 5)).unwrap(),
            HintSet::Explicit(Vec::new())
        );
    }

    #[test]
    fn compact_form_expands_to_the_explicit_list() {
        // 8 nodes of 4 CPUs with uneven free CPUs: the compact form's
        // expansion equals the kubelet's explicit list, order included.
        let t = CpuTopology::from_machine(&layered(8, 1, 4, 1));
        let nodes = t.numa_nodes();
        for avail in ["0-31", "1-3,6-7,9,12-15,17-18,24,26-27", "5,9-10,30"] {
            for request in 1..=12 {
                for reuse in ["", "0", "4,8"] {
                    let a: Cpus = set(avail).difference(&set(reuse)).copied().collect();
                    let r = set(reuse);
                    let explicit = hints(
                        &t,
                        &crate::topology::to_cpuset(&a).to_string(),
                        reuse,
                        request,
                    );
                    let free = t.count_by(&a, Level::Numa);
                    let base = t
                        .groups_of(&r, Level::Numa)
                        .into_iter()
                        .fold(NumaMask::EMPTY, |m, n| m.or(bit(n)));
                    let minimal = minimal_masks(&nodes, &free, base, r.len(), request).unwrap();
                    let compact = CompactHints {
                        minimal,
                        within: Vec::new(),
                        preferred_width: min_affinity_size(&t, request),
                    };
                    let expanded: Vec<String> = compact
                        .expand(&node_ids(&nodes))
                        .iter()
                        .map(testkit::hint_string)
                        .collect();
                    assert_eq!(
                        expanded, explicit,
                        "avail {avail} request {request} reuse {reuse}"
                    );
                }
            }
        }
    }
}
