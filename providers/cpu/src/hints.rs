//! CPU topology hints exactly as the kubelet's `generateCPUTopologyHints`.
//!
//! For every NUMA mask over the nodes that have CPUs (kubelet order: by width,
//! then lexicographic), the mask is a hint when every reusable CPU lies in it
//! and the reusable CPUs plus the free CPUs in it reach the request. A hint
//! is preferred when its width equals the narrowest width whose *total*
//! CPUs reach the request (the machine's node count if none does), or, with
//! `align-by-socket`, when it spans exactly the minimum number of sockets.
//!
//! The hints are upward-closed, so the SDK's [`hintgen`] builds them: the
//! explicit list up to [`EXPLICIT_HINT_MAX_NODES`] NUMA nodes, the compact
//! form (the minimal masks and the preferred width) above.
//! `align-by-socket`'s extra preferred hints cannot be said in that form;
//! there only the width rule marks preference.

use std::collections::BTreeMap;

#[cfg(doc)]
use topomgr_sdk::hintgen::{self, EXPLICIT_HINT_MAX_NODES};
use topomgr_sdk::hintgen::{min_width_additive, upward_closed_hints};
use topomgr_sdk::{HintSet, NumaMask, NumaNodeId};

use crate::error::CpuError;
use crate::topology::{CpuTopology, Cpus, Level};

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

fn mask_sum(mask: NumaMask, per_node: &BTreeMap<u32, usize>) -> usize {
    mask.iter()
        .map(|n| per_node.get(&n.get()).copied().unwrap_or(0))
        .sum()
}

/// The narrowest width whose total CPUs reach `request` (kubelet's minAffinitySize).
fn min_affinity_size(topo: &CpuTopology, request: usize) -> u32 {
    let per_node = topo.count_by(&topo.all_cpus(), Level::Numa);
    min_width_additive(per_node.values().map(|&n| n as u64), request as u64)
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
    topo.sockets_in_numa_nodes(mask).len() == min_sockets
}

/// Whether a NUMA mask can hold `req`: it holds every reusable CPU, and
/// the reusable CPUs plus its free CPUs reach the request (monotone).
fn fitting(topo: &CpuTopology, req: &HintRequest<'_>) -> impl Fn(NumaMask) -> bool {
    let free = topo.count_by(req.available, Level::Numa);
    let reusable_mask = topo.numa_mask_of(req.reusable);
    let (reusable, request) = (req.reusable.len(), req.request);
    move |mask| reusable_mask.is_subset(mask) && reusable + mask_sum(mask, &free) >= request
}

/// The hints for `req` on `topo`: explicit up to [`EXPLICIT_HINT_MAX_NODES`]
/// nodes, compact above.
pub fn generate(topo: &CpuTopology, req: &HintRequest<'_>) -> Result<HintSet, CpuError> {
    let nodes: Vec<NumaNodeId> = topo.numa_nodes();
    let min_size = min_affinity_size(topo, req.request);
    let mut set = upward_closed_hints(&nodes, min_size, fitting(topo, req)).map_err(|source| {
        CpuError::TooManyCombinations {
            requested: req.request,
            cause: source,
        }
    })?;
    if req.align_by_socket {
        if let HintSet::Explicit(hints) = &mut set {
            for h in hints.iter_mut() {
                if let Some(mask) = h.affinity {
                    h.preferred |= socket_aligned(topo, mask, min_size);
                }
            }
        }
    }
    Ok(set)
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

    fn strings(h: &HintSet, nodes: &[NumaNodeId]) -> Vec<String> {
        h.to_explicit(nodes)
            .iter()
            .map(testkit::hint_string)
            .collect()
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
                    let req = HintRequest {
                        available: &a,
                        reusable: &r,
                        request,
                        align_by_socket: false,
                    };
                    let minimal =
                        topomgr_sdk::hintgen::minimal_masks(&nodes, fitting(&t, &req)).unwrap();
                    let compact = topomgr_sdk::CompactHints::upward_closed(
                        minimal,
                        min_affinity_size(&t, request),
                    );
                    let expanded: Vec<String> = compact
                        .expand(&nodes)
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
