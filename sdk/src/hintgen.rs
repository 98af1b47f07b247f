//! Generating upward-closed hint sets: the explicit list the kubelet would
//! enumerate on small machines, the compact form above
//! [`EXPLICIT_HINT_MAX_NODES`] nodes, and the minimal-mask search behind it.
//!
//! Most providers' hints are *upward-closed*: a NUMA mask whose resources
//! satisfy a request still does when nodes are added (CPUs, devices, memory
//! without groups). Such a hint set is described by a monotone predicate
//! `fits(mask)` and a preferred width; [`upward_closed_hints`] turns it into
//! the kubelet's explicit list (every fitting mask in the kubelet's order,
//! preferred at the width) on machines of up to 8 NUMA nodes, and into
//! [`CompactHints`] (its minimal masks) above, where `2^N` masks cannot be
//! listed. [`min_width_additive`] is the kubelet's `minAffinitySize` for
//! amounts that add up over nodes (CPUs, single-node devices).

use crate::{for_each_mask_in_kubelet_order, CompactHints, HintSet, NumaMask, NumaNodeId};
use crate::{TopologyHint, MAX_NUMA_NODES};

/// Machines with more NUMA nodes than this get compact hints: the kubelet's
/// own limit for enumerating masks (its `maxAllowableNUMANodes` default).
pub const EXPLICIT_HINT_MAX_NODES: usize = 8;

/// The most minimal masks one compact answer may hold.
pub const MAX_MINIMAL_MASKS: usize = 65_536;

/// The most steps one search for minimal masks may take: a predicate whose
/// minimal masks are few can still make the search visit many masks that
/// are not minimal (several resources that only some nodes have), and a
/// question about a large machine must end.
pub const MAX_SEARCH_STEPS: u64 = 4_000_000;

/// A request whose NUMA combinations are too many to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TooManyCombinations {
    /// More minimal masks than [`MAX_MINIMAL_MASKS`].
    #[error(
        "more than {limit} minimal NUMA combinations satisfy the request; the answer would be \
         too large to merge (request fewer resources per container, or split the workload)"
    )]
    Masks {
        /// The limit that was exceeded ([`MAX_MINIMAL_MASKS`]).
        limit: usize,
    },
    /// The search took more than [`MAX_SEARCH_STEPS`] steps.
    #[error(
        "finding the NUMA combinations that satisfy the request takes more than {limit} search \
         steps on this machine (request resources that fit on fewer NUMA nodes)"
    )]
    Steps {
        /// The limit that was exceeded ([`MAX_SEARCH_STEPS`]).
        limit: u64,
    },
}

/// Every minimal mask over `nodes` for which `fits` holds, ordered by width
/// and then in the kubelet's order (lexicographic by node id).
///
/// `fits` must be monotone (`fits(m)` implies `fits(m ∪ x)`); a mask is
/// minimal when it fits and no mask with one node fewer does. The search
/// adds nodes in ascending order and prunes every branch that cannot fit
/// even with all remaining nodes, so its cost follows the number of minimal
/// masks, not `2^N`. Fails past [`MAX_MINIMAL_MASKS`] masks or
/// [`MAX_SEARCH_STEPS`] steps.
///
/// ```
/// use topomgr_sdk::hintgen::minimal_masks;
/// use topomgr_sdk::{NumaMask, NumaNodeId};
///
/// // One device per node; a request of two devices.
/// let nodes: Vec<NumaNodeId> = (0u8..4).map(NumaNodeId::from).collect();
/// let masks = minimal_masks(&nodes, |m| m.len() >= 2).unwrap();
/// let text: Vec<String> = masks.iter().map(|m| m.to_string()).collect();
/// assert_eq!(text, ["0-1", "0,2", "0,3", "1-2", "1,3", "2-3"]);
/// ```
pub fn minimal_masks(
    nodes: &[NumaNodeId],
    mut fits: impl FnMut(NumaMask) -> bool,
) -> Result<Vec<NumaMask>, TooManyCombinations> {
    let mut nodes = nodes.to_vec();
    nodes.sort_unstable();
    nodes.dedup();
    // rest[i]: the union of nodes[i..].
    let mut rest = vec![NumaMask::EMPTY; nodes.len() + 1];
    for i in (0..nodes.len()).rev() {
        rest[i] = rest[i + 1].with(nodes[i]);
    }
    let mut out = Vec::new();
    if fits(NumaMask::EMPTY) {
        // Everything fits, even no node: every single node is minimal.
        out.extend(nodes.iter().map(|&n| NumaMask::single(n)));
        return Ok(out);
    }
    let mut steps = 0u64;
    search(
        &nodes,
        &rest,
        0,
        NumaMask::EMPTY,
        &mut fits,
        &mut out,
        &mut steps,
    )?;
    out.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.iter().cmp(b.iter())));
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn search(
    nodes: &[NumaNodeId],
    rest: &[NumaMask],
    start: usize,
    mask: NumaMask,
    fits: &mut impl FnMut(NumaMask) -> bool,
    out: &mut Vec<NumaMask>,
    steps: &mut u64,
) -> Result<(), TooManyCombinations> {
    for i in start..nodes.len() {
        *steps += 1;
        if *steps > MAX_SEARCH_STEPS {
            return Err(TooManyCombinations::Steps {
                limit: MAX_SEARCH_STEPS,
            });
        }
        if !fits(mask.union(rest[i])) {
            // Not even every remaining node is enough: later i have fewer.
            return Ok(());
        }
        let m = mask.with(nodes[i]);
        if fits(m) {
            // `mask` does not fit (else the search would not be here), so
            // only the other nodes can make `m` non-minimal.
            let minimal = mask.iter().all(|n| {
                let mut smaller = m;
                smaller.remove(n);
                !fits(smaller)
            });
            if minimal {
                out.push(m);
                if out.len() > MAX_MINIMAL_MASKS {
                    return Err(TooManyCombinations::Masks {
                        limit: MAX_MINIMAL_MASKS,
                    });
                }
            }
        } else {
            search(nodes, rest, i + 1, m, fits, out, steps)?;
        }
    }
    Ok(())
}

/// The kubelet's `minAffinitySize` for amounts that add up over nodes: the
/// narrowest width of a NUMA mask whose nodes' `amounts` (one per node, e.g.
/// the CPUs or single-node devices of each node) reach `request`, or the
/// number of nodes when even all of them fall short. The fullest nodes
/// first give the narrowest width, so no mask is enumerated.
///
/// ```
/// use topomgr_sdk::hintgen::min_width_additive;
/// assert_eq!(min_width_additive([4, 8, 2], 9), 2);
/// assert_eq!(min_width_additive([4, 8, 2], 8), 1);
/// assert_eq!(min_width_additive([4, 8, 2], 15), 3);
/// ```
pub fn min_width_additive(amounts: impl IntoIterator<Item = u64>, request: u64) -> u32 {
    let mut amounts: Vec<u64> = amounts.into_iter().collect();
    amounts.sort_unstable_by(|a, b| b.cmp(a));
    let mut sum = 0u64;
    for (i, a) in amounts.iter().enumerate() {
        sum = sum.saturating_add(*a);
        if sum >= request {
            return i as u32 + 1;
        }
    }
    amounts.len() as u32
}

/// The upward-closed hint set of `fits` over the machine's `nodes`,
/// preferred at `preferred_width`: on up to [`EXPLICIT_HINT_MAX_NODES`]
/// nodes the kubelet's explicit list (every fitting mask, in the kubelet's
/// order), above that the compact form of the same hints. No fitting mask
/// gives [`HintSet::unsatisfiable`].
///
/// ```
/// use topomgr_sdk::hintgen::upward_closed_hints;
/// use topomgr_sdk::{HintSet, NumaNodeId};
///
/// let nodes: Vec<NumaNodeId> = (0u8..2).map(NumaNodeId::from).collect();
/// let set = upward_closed_hints(&nodes, 1, |m| m.contains(NumaNodeId::from(1))).unwrap();
/// let text: Vec<String> = set.to_explicit(&nodes).iter()
///     .map(|h| format!("{}:{}", h.affinity.unwrap(), h.preferred)).collect();
/// assert_eq!(text, ["1:true", "0-1:false"]);
/// ```
pub fn upward_closed_hints(
    nodes: &[NumaNodeId],
    preferred_width: u32,
    mut fits: impl FnMut(NumaMask) -> bool,
) -> Result<HintSet, TooManyCombinations> {
    if nodes.len() <= EXPLICIT_HINT_MAX_NODES {
        let mut hints = Vec::new();
        for_each_mask_in_kubelet_order(nodes, |mask| {
            if fits(mask) {
                hints.push(TopologyHint::new(mask, mask.len() == preferred_width));
            }
        });
        return Ok(HintSet::Explicit(hints));
    }
    debug_assert!(nodes.len() <= MAX_NUMA_NODES as usize);
    let minimal = minimal_masks(nodes, fits)?;
    if minimal.is_empty() {
        return Ok(HintSet::unsatisfiable());
    }
    Ok(HintSet::Compact(CompactHints::upward_closed(
        minimal,
        preferred_width,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(range: std::ops::Range<u8>) -> Vec<NumaNodeId> {
        range.map(NumaNodeId::from).collect()
    }

    /// Every mask over `nodes`, by brute force, for the oracle.
    fn brute_minimal(nodes: &[NumaNodeId], fits: &dyn Fn(NumaMask) -> bool) -> Vec<NumaMask> {
        let mut all = Vec::new();
        for_each_mask_in_kubelet_order(nodes, |m| all.push(m));
        all.into_iter()
            .filter(|&m| {
                fits(m)
                    && m.iter().all(|n| {
                        let mut s = m;
                        s.remove(n);
                        !fits(s)
                    })
            })
            .collect()
    }

    #[test]
    fn equals_brute_force_on_weighted_requests() {
        // Free units per node (sparse ids), several requests and a base
        // that must be included.
        let nodes: Vec<NumaNodeId> = [0u8, 2, 3, 70, 71, 250].map(NumaNodeId::from).to_vec();
        let free = [3u32, 0, 1, 2, 5, 1];
        let weight = |m: NumaMask| -> u32 {
            nodes
                .iter()
                .zip(free)
                .filter(|(n, _)| m.contains(**n))
                .map(|(_, f)| f)
                .sum()
        };
        for request in 0..=13 {
            for base in [NumaMask::EMPTY, NumaMask::single(nodes[3])] {
                let fits = |m: NumaMask| base.is_subset(m) && weight(m) >= request;
                let got = minimal_masks(&nodes, fits).unwrap();
                let want = if fits(NumaMask::EMPTY) {
                    nodes.iter().map(|&n| NumaMask::single(n)).collect()
                } else {
                    brute_minimal(&nodes, &fits)
                };
                assert_eq!(got, want, "request {request} base {base}");
            }
        }
    }

    #[test]
    fn explicit_up_to_eight_nodes_compact_above() {
        let fits = |m: NumaMask| m.len() >= 2;
        let eight = upward_closed_hints(&ids(0..8), 2, fits).unwrap();
        let HintSet::Explicit(list) = &eight else {
            panic!("expected explicit hints on 8 nodes")
        };
        assert_eq!(list.len(), 255 - 8);
        assert!(list[0].preferred && !list[28].preferred);
        let nine = upward_closed_hints(&ids(0..9), 2, fits).unwrap();
        let HintSet::Compact(c) = &nine else {
            panic!("expected compact hints on 9 nodes")
        };
        assert_eq!(c.minimal.len(), 36);
        assert_eq!(c.preferred_width, 2);
        assert_eq!(nine.to_explicit(&ids(0..9)).len(), 511 - 9);
        assert_eq!(
            upward_closed_hints(&ids(0..9), 1, |_| false).unwrap(),
            HintSet::unsatisfiable()
        );
    }

    #[test]
    fn additive_width_equals_brute_force() {
        let nodes = ids(0..6);
        let amounts = [3u64, 0, 7, 2, 2, 5];
        for request in 0..=20 {
            let weight = |m: NumaMask| -> u64 {
                nodes
                    .iter()
                    .zip(amounts)
                    .filter(|(n, _)| m.contains(**n))
                    .map(|(_, a)| a)
                    .sum()
            };
            let mut best = nodes.len() as u32;
            for_each_mask_in_kubelet_order(&nodes, |m| {
                if weight(m) >= request {
                    best = best.min(m.len());
                }
            });
            assert_eq!(
                min_width_additive(amounts, request),
                best,
                "request {request}"
            );
        }
        assert_eq!(min_width_additive([], 1), 0);
    }

    #[test]
    fn a_search_without_end_is_cut_off() {
        // Only node 63 fits, but every set of the other 63 nodes is a path
        // the pruning cannot rule out without knowing that.
        let nodes = ids(0..64);
        let last = NumaNodeId::from(63u8);
        let err = minimal_masks(&nodes, |m| m.contains(last) && m.len() >= 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "finding the NUMA combinations that satisfy the request takes more than 4000000 \
             search steps on this machine (request resources that fit on fewer NUMA nodes)"
        );
    }

    #[test]
    fn too_many_combinations_is_an_error() {
        let err = minimal_masks(&ids(0..40), |m| m.len() >= 20).unwrap_err();
        assert_eq!(
            err.to_string(),
            "more than 65536 minimal NUMA combinations satisfy the request; the answer would be \
             too large to merge (request fewer resources per container, or split the workload)"
        );
    }
}
