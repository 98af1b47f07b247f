//! The hint merge: the kubelet's decision, without its cross product.
//!
//! The kubelet merges hints by enumerating every permutation (one hint per
//! resource of every provider), AND-ing the masks of each permutation into a
//! candidate, and folding the candidates through `HintMerger.compare`. That
//! costs `product(len(hints))` and explodes past a few NUMA nodes.
//!
//! topomgr computes the same answer from *sets*. The facts that make this exact:
//!
//! 1. A candidate is preferred only if every hint of its permutation is
//!    preferred and all non-`nil` masks are identical, so a preferred candidate
//!    is some mask `M` that every list offers as a preferred hint (or through a
//!    preferred "any" hint), or the machine mask when every list offers
//!    "any, preferred". A preferred candidate always beats a non-preferred one,
//!    and among preferred ones the comparator is a total order, so the answer
//!    is the best such `M` — independent of enumeration order.
//! 2. Both comparators (`Narrowest`, and `Closest` of prefer-closest-numa-nodes)
//!    rank by node count first. Walking the fold's cases with the
//!    best-non-preferred count `B` (the largest, over lists, of the narrowest
//!    mask's width) shows the non-preferred result is also order-independent:
//!    the best candidate of width exactly `B` if one exists; else, among
//!    narrower ones, the widest (then the best of that width); else the best
//!    of the wider ones. Only the *set* of reachable merged masks matters.
//! 3. The set of reachable merged masks is computed provider by provider
//!    (dynamic programming over distinct masks), so the cost is
//!    `providers x hints x distinct reachable masks`, never the product.
//!
//! Compact hint sets (unions of intervals "every mask `M` with
//! `a ⊆ M ⊆ u`", preferred at width w) are merged without expanding them:
//! reachable sets are kept as lattice intervals `[lo, hi]` (every mask
//! between `lo` and `hi` is reachable): an explicit mask `x` maps `[lo, hi]`
//! to `[lo & x, hi & x]`, a compact interval `[a, u]` maps it to
//! `[lo & a, hi & u]` (every `M` in between is `(M | lo) & (M | a)`, so the
//! image is exactly that interval; it is dropped when `hi & u` is empty).
//! Preferred candidates of compact lists are the width-`w` masks of
//! `[a_1 | .. | a_k, u_1 & .. & u_k]`, one interval per list. The best mask
//! of a given width inside an interval is found directly (lowest extra node
//! ids for the default comparator; an enumeration of the free nodes for
//! prefer-closest).
//!
//! `numa-allocation-strategy` ([`crate::strategy`]) adds one criterion to
//! the comparator, after the width and the distance and before the mask
//! value: the allocation score of the mask's nodes. The comparator stays a
//! total order over masks (a mask's score depends on the mask alone), so the
//! facts above still hold; only the shortcut that takes the lowest extra
//! positions of an interval gives way to an enumeration, as for
//! prefer-closest.
//!
//! Node ids go up to 255, but a machine has at most 64 nodes: the merge
//! works on 64-bit masks over the machine's node *positions*
//! ([`NodePositions`], ascending ids), which order exactly like the id
//! masks, so the kubelet's tie-break (the smaller bitmask value) is kept.
//! When every id is below 64 the positions are the ids.

use std::collections::HashSet;

use topomgr_sdk::{
    CompactHints, CompactHintsError, HintSet, NodePositions, NumaMask, ProviderHints, TopologyHint,
};

use crate::numa::NumaInfo;
use crate::strategy::{AllocationStrategy, Occupancy, PositionOccupancy};

#[cfg(any(test, feature = "test-oracle"))]
pub mod oracle;

/// A provider's hints cannot be merged: they name NUMA nodes the machine
/// does not have, or a compact set is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// A compact hint set whose `within` bounds are malformed.
    #[error("provider {provider:?} returned invalid hints for resource {resource:?}: {cause}; fix the provider's compact answer")]
    InvalidCompact {
        /// Provider name.
        provider: String,
        /// Resource name.
        resource: String,
        /// What is wrong with the set.
        cause: Box<CompactHintsError>,
    },
    /// Hints naming nodes outside the machine.
    #[error("provider {provider:?} returned hints for resource {resource:?} naming NUMA node(s) {nodes}, which this machine does not have (its nodes: {machine})")]
    UnknownNode {
        /// Provider name.
        provider: String,
        /// Resource name.
        resource: String,
        /// The offending nodes.
        nodes: NumaMask,
        /// The machine's nodes.
        machine: NumaMask,
    },
}

/// How to merge: the policy-dependent parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MergeMode {
    /// Keep only "any" and single-node preferred hints (single-numa-node policy).
    pub single_numa_node: bool,
    /// Rank masks of equal width by average NUMA distance first.
    pub prefer_closest: bool,
    /// Then (masks of equal width and distance) by allocation score, with
    /// the [`Occupancy`] given to [`merge_with`].
    pub strategy: AllocationStrategy,
}

/// Which rule chose the merged hint (for explanations; serialized as the
/// variant's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MergeRule {
    /// The best mask that every provider prefers.
    Preferred,
    /// No common preferred mask; the best reachable mask of width `B`.
    NonPreferredAtBestCount,
    /// No reachable mask of width `B`; the widest narrower one.
    NonPreferredNarrower,
    /// Only wider masks were reachable; the narrowest of them.
    NonPreferredWider,
    /// No non-empty mask was reachable; the machine mask, not preferred.
    NoCandidate,
}

/// The merged hint and how it was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeOutcome {
    /// The merged hint (before single-numa-node's "whole machine -> any").
    pub hint: TopologyHint,
    /// The kubelet's best-non-preferred affinity count `B`.
    pub best_non_preferred_count: u32,
    /// Number of hint lists merged (one per provider resource).
    pub lists: usize,
    /// The rule that decided.
    pub rule: MergeRule,
}

/// Refuse malformed compact sets and hints that name NUMA nodes the machine
/// does not have (for a compact set: in a minimal mask or a bound).
pub(crate) fn validate(
    numa: &NumaInfo,
    providers: &[(&str, &ProviderHints)],
) -> Result<(), MergeError> {
    let machine = numa.default_mask();
    for (name, hints) in providers {
        let Some(map) = hints else { continue };
        for (resource, set) in map {
            let Some(set) = set else { continue };
            if let HintSet::Compact(c) = set {
                c.validate().map_err(|source| MergeError::InvalidCompact {
                    provider: name.to_string(),
                    resource: resource.clone(),
                    cause: Box::new(source),
                })?;
            }
            let bad = set.nodes_named().difference(machine);
            if !bad.is_empty() {
                return Err(MergeError::UnknownNode {
                    provider: name.to_string(),
                    resource: resource.clone(),
                    nodes: bad,
                    machine,
                });
            }
        }
    }
    Ok(())
}

/// A hint over node *positions* (see [`NodePositions`]): `affinity` is a
/// 64-bit mask of the machine's present nodes, `None` for "any".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hint {
    affinity: Option<u64>,
    preferred: bool,
}

/// One resource's hints after the kubelet's filtering, over node positions.
#[derive(Debug, Clone)]
enum List {
    Explicit(Vec<Hint>),
    /// Intervals `[minimal, bound]` and the preferred width.
    Compact(Vec<(u64, u64)>, u32),
}

const ANY_PREFERRED: Hint = Hint {
    affinity: None,
    preferred: true,
};
const NONE_POSSIBLE: Hint = Hint {
    affinity: None,
    preferred: false,
};

fn width(m: u64) -> u32 {
    m.count_ones()
}

fn is_subset(a: u64, b: u64) -> bool {
    a & !b == 0
}

/// The kubelet's `filterProvidersHints`: no map or an empty map -> one
/// "any, preferred"; a resource with no preference -> "any, preferred";
/// a resource with no possible placement -> "any, not preferred". Masks are
/// turned into node positions on the way.
fn filter_providers(providers: &[&ProviderHints], pos: &NodePositions) -> Vec<List> {
    let mut lists = Vec::new();
    for hints in providers {
        match hints {
            Some(map) if !map.is_empty() => {
                for set in map.values() {
                    lists.push(match set {
                        None => List::Explicit(vec![ANY_PREFERRED]),
                        Some(HintSet::Explicit(v)) if v.is_empty() => {
                            List::Explicit(vec![NONE_POSSIBLE])
                        }
                        Some(HintSet::Explicit(v)) => List::Explicit(
                            v.iter()
                                .map(|h| Hint {
                                    affinity: h.affinity.map(|m| pos.to_positions(m)),
                                    preferred: h.preferred,
                                })
                                .collect(),
                        ),
                        Some(HintSet::Compact(c)) if c.minimal.is_empty() => {
                            List::Explicit(vec![NONE_POSSIBLE])
                        }
                        Some(HintSet::Compact(c)) => compact_list(c, pos),
                    });
                }
            }
            _ => lists.push(List::Explicit(vec![ANY_PREFERRED])),
        }
    }
    lists
}

/// A compact set's intervals over node positions.
fn compact_list(c: &CompactHints, pos: &NodePositions) -> List {
    List::Compact(
        c.intervals()
            .map(|(lo, hi)| (pos.to_positions(lo), pos.to_positions(hi)))
            .collect(),
        c.preferred_width,
    )
}

fn compact_contains(intervals: &[(u64, u64)], m: u64) -> bool {
    intervals
        .iter()
        .any(|&(lo, hi)| is_subset(lo, m) && is_subset(m, hi))
}

/// The smallest width of a compact list's hints (an empty minimal mask
/// stands for width 1).
fn compact_min_width(intervals: &[(u64, u64)]) -> Option<u32> {
    intervals.iter().map(|&(lo, _)| width(lo).max(1)).min()
}

/// single-numa-node's filter: keep "any, preferred" and preferred single-node hints.
fn filter_single_numa(lists: Vec<List>, machine: u64) -> Vec<List> {
    lists
        .into_iter()
        .map(|l| {
            let kept: Vec<Hint> = match &l {
                List::Explicit(v) => v
                    .iter()
                    .filter(|h| h.preferred && h.affinity.is_none_or(|m| width(m) == 1))
                    .copied()
                    .collect(),
                List::Compact(intervals, 1) => (0..64)
                    .map(|p| 1u64 << p)
                    .filter(|&m| m & machine != 0 && compact_contains(intervals, m))
                    .map(|m| Hint {
                        affinity: Some(m),
                        preferred: true,
                    })
                    .collect(),
                List::Compact(..) => Vec::new(),
            };
            List::Explicit(kept)
        })
        .collect()
}

/// The kubelet's `maxOfMinAffinityCounts`.
fn best_non_preferred_count(lists: &[List]) -> u32 {
    lists
        .iter()
        .filter_map(|l| match l {
            List::Explicit(v) => v.iter().filter_map(|h| h.affinity).map(width).min(),
            List::Compact(intervals, _) => compact_min_width(intervals),
        })
        .max()
        .unwrap_or(0)
}

/// The comparator: fewer nodes first; then (prefer-closest) smaller average
/// distance; then (numa-allocation-strategy) the better allocation score, a
/// scored mask before an unscored one; then the smaller numeric value (of
/// the position mask, which orders like the node-id mask).
struct Ranker<'a> {
    numa: &'a NumaInfo,
    closest: bool,
    /// The strategy (never `LowestIndex`) and the scores it ranks by.
    scores: Option<(AllocationStrategy, PositionOccupancy)>,
}

impl Ranker<'_> {
    fn better(&self, a: u64, b: u64) -> bool {
        if width(a) != width(b) {
            return width(a) < width(b);
        }
        if self.closest {
            let pos = self.numa.positions();
            if let (Some(da), Some(db)) = (
                self.numa.average_distance(pos.to_mask(a)),
                self.numa.average_distance(pos.to_mask(b)),
            ) {
                if da != db {
                    return da < db;
                }
            }
        }
        if let Some((strategy, occupancy)) = &self.scores {
            // kubernetes/kubernetes #142226 (KEP-6007): the score decides
            // only between masks the structural comparison finds equal.
            match (occupancy.score(a), occupancy.score(b)) {
                (Some(sa), Some(sb)) if sa != sb => {
                    return match strategy {
                        AllocationStrategy::MostAllocated => sa > sb,
                        _ => sa < sb,
                    };
                }
                (Some(_), None) => return true,
                (None, Some(_)) => return false,
                _ => {}
            }
        }
        a < b
    }

    /// Whether the best of several masks of one width (and, without
    /// distances, one distance) is always the smallest value.
    fn ranks_by_value(&self) -> bool {
        (!self.closest || !self.numa.has_distances()) && self.scores.is_none()
    }

    fn offer(&self, best: &mut Option<u64>, m: u64) {
        if m != 0 && best.is_none_or(|b| self.better(m, b)) {
            *best = Some(m);
        }
    }

    /// The best mask of width `w` with `lo <= M <= hi`.
    fn best_in_interval(&self, lo: u64, hi: u64, w: u32) -> Option<u64> {
        let (nlo, nhi) = (width(lo), width(hi));
        if w < nlo || w > nhi || !is_subset(lo, hi) {
            return None;
        }
        let free = hi & !lo;
        let extra = w - nlo;
        if self.ranks_by_value() || extra == 0 || extra == width(free) {
            // Lowest extra positions give the smallest value; without
            // distances and scores (or with nothing to choose) that is
            // also the best.
            let mut add = 0u64;
            let mut rest = free;
            for _ in 0..extra {
                let low = rest & rest.wrapping_neg();
                add |= low;
                rest &= !low;
            }
            return Some(lo | add);
        }
        let mut best = None;
        for_each_combination(free, extra, &mut |add| self.offer(&mut best, lo | add));
        best
    }
}

/// Calls `f` on every subset of `pool` with exactly `k` positions.
fn for_each_combination(pool: u64, k: u32, f: &mut impl FnMut(u64)) {
    fn rec(bits: &[u64], k: usize, acc: u64, f: &mut impl FnMut(u64)) {
        if k == 0 {
            f(acc);
            return;
        }
        for i in 0..=bits.len() - k {
            rec(&bits[i + 1..], k - 1, acc | bits[i], f);
        }
    }
    let bits: Vec<u64> = (0..64)
        .map(|p| 1u64 << p)
        .filter(|b| pool & b != 0)
        .collect();
    if k as usize <= bits.len() {
        rec(&bits, k as usize, 0, f);
    }
}

/// Per explicit list: does it offer "any, preferred", and its preferred masks (sorted).
struct PreferredIndex {
    any: bool,
    masks: Vec<u64>,
}

impl PreferredIndex {
    fn of(hints: &[Hint]) -> Self {
        let mut masks: Vec<u64> = hints
            .iter()
            .filter(|h| h.preferred)
            .filter_map(|h| h.affinity)
            .collect();
        masks.sort_unstable();
        masks.dedup();
        PreferredIndex {
            any: hints.iter().any(|h| h.preferred && h.affinity.is_none()),
            masks,
        }
    }
    fn offers(&self, m: u64) -> bool {
        self.any || self.masks.binary_search(&m).is_ok()
    }
}

/// Fact 1: the best mask that every list offers as preferred.
fn best_preferred(lists: &[List], machine: u64, ranker: &Ranker<'_>) -> Option<u64> {
    let mut explicit = Vec::new();
    let mut compact: Vec<(&[(u64, u64)], u32)> = Vec::new();
    for l in lists {
        match l {
            List::Explicit(v) => explicit.push(PreferredIndex::of(v)),
            List::Compact(intervals, w) => compact.push((intervals, *w)),
        }
    }
    let offered_by_all = |m: u64| {
        explicit.iter().all(|e| e.offers(m))
            && compact
                .iter()
                .all(|(intervals, w)| width(m) == *w && compact_contains(intervals, m))
    };
    let mut best = None;
    if compact.is_empty() && explicit.iter().all(|e| e.any) {
        // Every list picks "any": the merged mask is the whole machine.
        ranker.offer(&mut best, machine);
    }
    if let Some(strict) = explicit
        .iter()
        .filter(|e| !e.any)
        .min_by_key(|e| e.masks.len())
    {
        // That list must pick one of its own preferred masks.
        for &m in &strict.masks {
            if offered_by_all(m) {
                ranker.offer(&mut best, m);
            }
        }
        return best;
    }
    // Every explicit list can pick "any": candidates come from any list.
    for e in &explicit {
        for &m in &e.masks {
            if offered_by_all(m) {
                ranker.offer(&mut best, m);
            }
        }
    }
    if let Some(&(_, w)) = compact.first() {
        if compact.iter().all(|&(_, cw)| cw == w) {
            // One interval per compact list: the union `U` of their minimal
            // masks and the intersection `V` of their bounds (and the
            // machine). Every width-`w` mask between `U` and `V` is offered
            // by all of them, and every mask they all offer is one.
            let mut meets: HashSet<(u64, u64)> = HashSet::from([(0, machine)]);
            for (intervals, _) in &compact {
                let mut next = HashSet::new();
                for &(u, v) in &meets {
                    for &(a, b) in intervals.iter() {
                        let (u, v) = (u | a, v & b);
                        if width(u) <= w && width(v) >= w && is_subset(u, v) {
                            next.insert((u, v));
                        }
                    }
                }
                meets = next;
            }
            for (u, v) in meets {
                if let Some(m) = ranker.best_in_interval(u, v, w) {
                    ranker.offer(&mut best, m);
                }
            }
        }
    }
    best
}

/// Reachable merged masks, as lattice intervals `[lo, hi]`.
fn reachable_intervals(lists: &[List], machine: u64) -> Vec<(u64, u64)> {
    let mut cur: HashSet<(u64, u64)> = HashSet::from([(machine, machine)]);
    for l in lists {
        let mut next = HashSet::new();
        for &(lo, hi) in &cur {
            match l {
                List::Explicit(v) => {
                    for h in v {
                        let x = h.affinity.unwrap_or(machine);
                        if hi & x != 0 {
                            next.insert((lo & x, hi & x));
                        }
                    }
                }
                List::Compact(intervals, _) => {
                    for &(a, u) in intervals {
                        if hi & u != 0 {
                            next.insert((lo & a, hi & u));
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur.into_iter().collect()
}

/// Reachable merged masks when every list is explicit: a dense bitset over
/// the low positions, a hash set otherwise.
fn reachable_points(lists: &[&[Hint]], machine: u64) -> Vec<u64> {
    let options: Vec<Vec<u64>> = lists
        .iter()
        .map(|v| {
            let mut o: Vec<u64> = v.iter().map(|h| h.affinity.unwrap_or(machine)).collect();
            o.sort_unstable();
            o.dedup();
            o
        })
        .collect();
    let span = 64 - machine.leading_zeros();
    if span <= 16 {
        let size = 1usize << span;
        let mut members = vec![machine];
        for opts in &options {
            let mut seen = vec![false; size];
            let mut next_members = Vec::new();
            for &r in &members {
                for &x in opts {
                    let m = r & x;
                    if m != 0 && !seen[m as usize] {
                        seen[m as usize] = true;
                        next_members.push(m);
                    }
                }
            }
            members = next_members;
        }
        members
    } else {
        let mut cur: HashSet<u64> = HashSet::from([machine]);
        for opts in &options {
            let mut next = HashSet::new();
            for &r in &cur {
                for &x in opts {
                    if r & x != 0 {
                        next.insert(r & x);
                    }
                }
            }
            cur = next;
        }
        cur.into_iter().collect()
    }
}

/// Fact 2: the non-preferred answer from the set of reachable masks.
fn best_non_preferred(
    intervals: &[(u64, u64)],
    b: u32,
    ranker: &Ranker<'_>,
) -> Option<(u64, MergeRule)> {
    let best_of_width = |w: u32| {
        let mut best = None;
        for &(lo, hi) in intervals {
            if let Some(m) = ranker.best_in_interval(lo, hi, w) {
                ranker.offer(&mut best, m);
            }
        }
        best
    };
    // Width exactly B.
    if b > 0 {
        if let Some(m) = best_of_width(b) {
            return Some((m, MergeRule::NonPreferredAtBestCount));
        }
    }
    // Narrower than B: the widest reachable width, then the best of it.
    let narrower = intervals
        .iter()
        .filter_map(|&(lo, hi)| {
            let w = width(hi).min(b.checked_sub(1)?);
            (w >= width(lo).max(1)).then_some(w)
        })
        .max();
    if let Some(w) = narrower {
        return best_of_width(w).map(|m| (m, MergeRule::NonPreferredNarrower));
    }
    // Wider than B: the narrowest reachable width, then the best of it.
    let wider = intervals
        .iter()
        .filter_map(|&(lo, hi)| {
            let w = width(lo).max(b + 1).max(1);
            (w <= width(hi)).then_some(w)
        })
        .min();
    best_of_width(wider?).map(|m| (m, MergeRule::NonPreferredWider))
}

/// Merge the providers' hints into the kubelet's merged hint.
///
/// Callers must have run `validate`; masks outside the machine are not
/// expected here (they would be AND-ed away as the kubelet does). Without
/// an [`Occupancy`] every mask is unscored, so `mode.strategy` changes
/// nothing (see [`merge_with`]).
pub fn merge(numa: &NumaInfo, providers: &[&ProviderHints], mode: MergeMode) -> MergeOutcome {
    merge_with(numa, providers, mode, None)
}

/// [`merge`], ranking masks the kubelet finds equally good by
/// `mode.strategy` over `occupancy` (ignored under
/// [`AllocationStrategy::LowestIndex`]).
pub fn merge_with(
    numa: &NumaInfo,
    providers: &[&ProviderHints],
    mode: MergeMode,
    occupancy: Option<&Occupancy>,
) -> MergeOutcome {
    let pos = numa.positions();
    let machine = pos.all();
    let mut lists = filter_providers(providers, pos);
    if mode.single_numa_node {
        lists = filter_single_numa(lists, machine);
    }
    let b = best_non_preferred_count(&lists);
    let scores = match (mode.strategy, occupancy) {
        (AllocationStrategy::LowestIndex, _) | (_, None) => None,
        (_, Some(o)) if o.is_empty() => None,
        (strategy, Some(o)) => Some((strategy, o.by_position(pos))),
    };
    let ranker = Ranker {
        numa,
        closest: mode.prefer_closest,
        scores,
    };
    let outcome = |mask: u64, preferred, rule| MergeOutcome {
        hint: TopologyHint::new(pos.to_mask(mask), preferred),
        best_non_preferred_count: b,
        lists: lists.len(),
        rule,
    };
    if let Some(m) = best_preferred(&lists, machine, &ranker) {
        return outcome(m, true, MergeRule::Preferred);
    }
    let explicit: Vec<&[Hint]> = lists
        .iter()
        .filter_map(|l| match l {
            List::Explicit(v) => Some(v.as_slice()),
            List::Compact(..) => None,
        })
        .collect();
    let intervals: Vec<(u64, u64)> = if explicit.len() == lists.len() {
        reachable_points(&explicit, machine)
            .into_iter()
            .map(|m| (m, m))
            .collect()
    } else {
        reachable_intervals(&lists, machine)
    };
    match best_non_preferred(&intervals, b, &ranker) {
        Some((m, rule)) => outcome(m, false, rule),
        None => outcome(machine, false, MergeRule::NoCandidate),
    }
}

#[cfg(test)]
mod tests {
    use super::oracle::cross_product_merge;
    use std::collections::BTreeMap;

    use super::*;

    fn m(nodes: &[u32]) -> NumaMask {
        NumaMask::from_nodes(nodes.iter().map(|&n| i64::from(n))).unwrap()
    }
    fn h(nodes: &[u32], preferred: bool) -> TopologyHint {
        TopologyHint::new(m(nodes), preferred)
    }
    fn one(resource: &str, hints: Vec<TopologyHint>) -> ProviderHints {
        Some(BTreeMap::from([(
            resource.to_string(),
            Some(HintSet::Explicit(hints)),
        )]))
    }

    fn numa2() -> NumaInfo {
        NumaInfo::new(vec![0, 1], None).unwrap()
    }

    #[test]
    fn kubelet_documentation_example() {
        // Two providers; the only common single-node preferred mask is node 0.
        let cpu = one("cpu", vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]);
        let gpu = one("gpu", vec![h(&[0], true), h(&[0, 1], false)]);
        let out = merge(&numa2(), &[&cpu, &gpu], MergeMode::default());
        assert_eq!(out.hint, h(&[0], true));
        assert_eq!(out.rule, MergeRule::Preferred);
    }

    #[test]
    fn three_cases_stay_distinct() {
        let numa = numa2();
        let no_map: ProviderHints = None;
        let dont_care: ProviderHints = Some(BTreeMap::from([("x".to_string(), None)]));
        let impossible = one("x", vec![]);
        let md = MergeMode::default();
        assert_eq!(merge(&numa, &[&no_map], md).hint, h(&[0, 1], true));
        assert_eq!(merge(&numa, &[&dont_care], md).hint, h(&[0, 1], true));
        assert_eq!(merge(&numa, &[&impossible], md).hint, h(&[0, 1], false));
        assert_eq!(merge(&numa, &[], md).hint, h(&[0, 1], true));
    }

    #[test]
    fn preferred_requires_identical_masks() {
        // Both preferred but different masks: AND is node 1... not preferred.
        let a = one("a", vec![h(&[0, 1], true)]);
        let b = one("b", vec![h(&[1], true)]);
        let out = merge(&numa2(), &[&a, &b], MergeMode::default());
        assert_eq!(out.hint, h(&[1], false));
    }

    #[test]
    fn best_non_preferred_count_rule() {
        let numa = NumaInfo::new(vec![0, 1, 2, 3], None).unwrap();
        let a = one("a", vec![h(&[0, 1, 2, 3], false), h(&[0, 1], false)]);
        let b = one("b", vec![h(&[0, 1, 2], false), h(&[0, 1, 2, 3], false)]);
        let out = merge(&numa, &[&a, &b], MergeMode::default());
        let expect = cross_product_merge(&numa, &[&a, &b], MergeMode::default());
        assert_eq!(out.hint, expect);
        // B = max(2, 3) = 3 and {0,1,2} is reachable with exactly 3 nodes.
        assert_eq!(out.hint, h(&[0, 1, 2], false));
        assert_eq!(out.rule, MergeRule::NonPreferredAtBestCount);
    }

    /// Strategies for random merge inputs. Masks are drawn as bit sets over
    /// the machine's node *positions* and made into node masks once the
    /// nodes are known ([`subset`]).
    mod gen {
        use proptest::collection::{btree_set, vec};
        use proptest::prelude::*;

        /// A hint set as drawn, its masks as position bits.
        #[derive(Debug, Clone)]
        pub(super) enum RawSet {
            /// No preference.
            Any,
            /// An empty explicit list (cannot be satisfied).
            Unsatisfiable,
            /// A compact set: minimal masks, each one's bound (when bounded)
            /// and the preferred width.
            Compact(Vec<u64>, Option<Vec<Bound>>, u32),
            /// An explicit list of (affinity, preferred).
            Explicit(Vec<(Option<u64>, bool)>),
        }

        /// The `within` bound of a compact set's minimal mask.
        #[derive(Debug, Clone)]
        pub(super) enum Bound {
            /// The minimal mask itself.
            Same,
            /// The minimal mask or-ed with another mask.
            Or(u64),
            /// Every node.
            Full,
        }

        /// Node ids of 1 to 4 nodes: dense, even, above 64, or sparse
        /// anywhere up to 255 (POWER9's GPU memory nodes are 250-255).
        pub(super) fn nodes() -> impl Strategy<Value = Vec<u32>> {
            (1u32..=4).prop_flat_map(|n| {
                prop_oneof![
                    3 => Just((0..n).collect::<Vec<u32>>()),
                    1 => Just((0..n).map(|i| i * 2).collect()),
                    1 => Just((0..n).map(|i| 64 + i * 3).collect()),
                    1 => btree_set(prop_oneof![0u32..256, 250u32..256], n as usize)
                        .prop_map(|ids| ids.into_iter().collect()),
                ]
            })
        }

        /// Position bits of a mask over `n` nodes, empty one time in ten.
        pub(super) fn mask(n: usize) -> impl Strategy<Value = u64> {
            let all = (1u64 << n) - 1;
            prop_oneof![9 => 1..=all, 1 => Just(0)]
        }

        fn set(n: usize) -> impl Strategy<Value = RawSet> {
            let bound = prop_oneof![
                Just(Bound::Same),
                mask(n).prop_map(Bound::Or),
                Just(Bound::Full)
            ];
            prop_oneof![
                1 => Just(RawSet::Any),
                1 => Just(RawSet::Unsatisfiable),
                1 => (vec(mask(n), 0..3), proptest::option::of(vec(bound, 3)), 1u32..=2)
                    .prop_map(|(minimal, within, width)| RawSet::Compact(minimal, within, width)),
                5 => vec((proptest::option::weighted(5.0 / 6.0, mask(n)), any::<bool>()), 1..=5)
                    .prop_map(RawSet::Explicit),
            ]
        }

        /// Up to 3 providers: no hints one time in eight, else one or two
        /// resources.
        pub(super) fn providers(n: usize) -> impl Strategy<Value = Vec<Option<Vec<RawSet>>>> {
            vec(
                proptest::option::weighted(7.0 / 8.0, vec(set(n), 1..=2)),
                0..4,
            )
        }

        /// Distances (`None` half the time): 10 to itself, 11..35 else.
        pub(super) fn distances(n: usize) -> impl Strategy<Value = Option<Vec<Vec<u64>>>> {
            proptest::option::of(vec(vec(11u64..36, n), n)).prop_map(move |d| {
                d.map(|mut rows| {
                    for (i, row) in rows.iter_mut().enumerate() {
                        row[i] = 10;
                    }
                    rows
                })
            })
        }

        /// Single-numa-node one time in four; prefer-closest as given (the
        /// property test is split on it so that its halves run in
        /// parallel).
        pub(super) fn mode(prefer_closest: bool) -> impl Strategy<Value = (bool, bool)> {
            (proptest::bool::weighted(0.25), Just(prefer_closest))
        }
    }

    /// The nodes of `full` at the positions set in `bits`.
    fn subset(full: NumaMask, bits: u64) -> NumaMask {
        full.iter()
            .enumerate()
            .filter(|(i, _)| bits >> i & 1 == 1)
            .map(|(_, n)| n)
            .collect()
    }

    /// The hints `raw` describes over the nodes `full`.
    fn hints_of(full: NumaMask, raw: &[Option<Vec<gen::RawSet>>]) -> Vec<ProviderHints> {
        use gen::{Bound, RawSet};
        raw.iter()
            .map(|p| {
                p.as_ref().map(|sets| {
                    sets.iter()
                        .enumerate()
                        .map(|(r, set)| {
                            let set = match set {
                                RawSet::Any => None,
                                RawSet::Unsatisfiable => Some(HintSet::Explicit(vec![])),
                                RawSet::Compact(minimal, within, width) => {
                                    let minimal: Vec<NumaMask> =
                                        minimal.iter().map(|&b| subset(full, b)).collect();
                                    let within = match within {
                                        None => Vec::new(),
                                        Some(bounds) => minimal
                                            .iter()
                                            .zip(bounds)
                                            .map(|(&a, bound)| {
                                                let u = match bound {
                                                    Bound::Same => a,
                                                    Bound::Or(b) => a.union(subset(full, *b)),
                                                    Bound::Full => full,
                                                };
                                                if u.is_empty() {
                                                    full
                                                } else {
                                                    u
                                                }
                                            })
                                            .collect(),
                                    };
                                    let c = CompactHints {
                                        minimal,
                                        within,
                                        preferred_width: *width,
                                    };
                                    assert_eq!(c.validate(), Ok(()), "{c:?}");
                                    Some(HintSet::Compact(c))
                                }
                                RawSet::Explicit(hints) => Some(HintSet::Explicit(
                                    hints
                                        .iter()
                                        .map(|&(affinity, preferred)| TopologyHint {
                                            affinity: affinity.map(|b| subset(full, b)),
                                            preferred,
                                        })
                                        .collect(),
                                )),
                            };
                            (format!("r{r}"), set)
                        })
                        .collect()
                })
            })
            .collect()
    }

    /// Nodes, distances, providers' raw hints and the merge mode.
    type Inputs = (
        Vec<u32>,
        Option<Vec<Vec<u64>>>,
        Vec<Option<Vec<gen::RawSet>>>,
        (bool, bool),
    );

    /// Random machines, distances, providers and modes: the merge equals
    /// the cross-product oracle.
    fn inputs(prefer_closest: bool) -> impl proptest::prelude::Strategy<Value = Inputs> {
        proptest::prelude::Strategy::prop_flat_map(gen::nodes(), move |nodes| {
            let n = nodes.len();
            (
                proptest::prelude::Just(nodes),
                gen::distances(n),
                gen::providers(n),
                gen::mode(prefer_closest),
            )
        })
    }

    fn check_against_cross_product(
        nodes: Vec<u32>,
        distances: Option<Vec<Vec<u64>>>,
        raw: &[Option<Vec<gen::RawSet>>],
        (single_numa_node, prefer_closest): (bool, bool),
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let full = NumaMask::from_nodes(nodes.iter().map(|&n| i64::from(n))).unwrap();
        let numa = NumaInfo::new(nodes, distances).unwrap();
        let providers = hints_of(full, raw);
        let mode = MergeMode {
            single_numa_node,
            prefer_closest,
            ..MergeMode::default()
        };
        let refs: Vec<&ProviderHints> = providers.iter().collect();
        proptest::prop_assert_eq!(
            merge(&numa, &refs, mode).hint,
            cross_product_merge(&numa, &refs, mode),
            "{:?} {:?} {:?}",
            numa,
            providers,
            mode
        );
        Ok(())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        #[test]
        fn equals_the_cross_product_on_random_inputs(
            (nodes, distances, raw, mode) in inputs(false)
        ) {
            check_against_cross_product(nodes, distances, &raw, mode)?;
        }

        #[test]
        fn equals_the_cross_product_on_random_inputs_preferring_closest(
            (nodes, distances, raw, mode) in inputs(true)
        ) {
            check_against_cross_product(nodes, distances, &raw, mode)?;
        }
    }

    /// Compact sets of 1 to 3 providers on 8 nodes: minimal masks never
    /// empty, bounds as drawn.
    fn compact_on_eight() -> impl proptest::prelude::Strategy<Value = Vec<gen::RawSet>> {
        use proptest::prelude::*;
        let bound = prop_oneof![
            Just(gen::Bound::Same),
            (0u64..256).prop_map(gen::Bound::Or),
            Just(gen::Bound::Full)
        ];
        proptest::collection::vec(
            (
                proptest::collection::vec(1u64..256, 1..=3),
                proptest::option::of(proptest::collection::vec(bound, 3)),
                1u32..=3,
            )
                .prop_map(|(minimal, within, width)| gen::RawSet::Compact(minimal, within, width)),
            1..=3,
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        #[test]
        fn compact_equals_explicit_expansion_on_eight_nodes(sets in compact_on_eight()) {
            for ids in [
                (0..8).collect::<Vec<u32>>(),
                vec![0, 3, 64, 100, 200, 250, 254, 255],
            ] {
                compact_equals_explicit_expansion_on(ids, &sets);
            }
        }
    }

    /// One provider per set of `sets` on nodes `ids`: the compact sets, and
    /// their expansion, merge alike and like the kubelet.
    fn compact_equals_explicit_expansion_on(ids: Vec<u32>, sets: &[gen::RawSet]) {
        let numa = NumaInfo::new(ids, None).unwrap();
        let full = numa.default_mask();
        let nodes = numa.positions().ids().to_vec();
        let raw: Vec<Option<Vec<gen::RawSet>>> =
            sets.iter().map(|s| Some(vec![s.clone()])).collect();
        let compact: Vec<ProviderHints> = hints_of(full, &raw)
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                // One resource per provider, named after the provider.
                p.map(|map| map.into_values().map(|v| (format!("r{i}"), v)).collect())
            })
            .collect();
        let explicit: Vec<ProviderHints> = compact
            .iter()
            .map(|p| {
                p.as_ref().map(|map| {
                    map.iter()
                        .map(|(k, v)| match v {
                            Some(HintSet::Compact(c)) => {
                                (k.clone(), Some(HintSet::Explicit(c.expand(&nodes))))
                            }
                            other => (k.clone(), other.clone()),
                        })
                        .collect()
                })
            })
            .collect();
        for mode in [
            MergeMode::default(),
            MergeMode {
                single_numa_node: true,
                ..MergeMode::default()
            },
        ] {
            let a: Vec<&ProviderHints> = compact.iter().collect();
            let b: Vec<&ProviderHints> = explicit.iter().collect();
            assert_eq!(merge(&numa, &a, mode).hint, merge(&numa, &b, mode).hint);
            assert_eq!(
                merge(&numa, &b, mode).hint,
                cross_product_merge(&numa, &b, mode)
            );
        }
    }

    #[test]
    fn bounded_compact_sets_merge_like_the_kubelet() {
        // Memory-manager shape on 4 nodes: node 0 holds a single-node
        // allocation (alone only), 2-3 are a group, node 1 is unused.
        let numa = NumaInfo::new(vec![0, 1, 2, 3], None).unwrap();
        let memory: ProviderHints = Some(BTreeMap::from([(
            "memory".to_string(),
            Some(HintSet::Compact(CompactHints {
                minimal: vec![m(&[0]), m(&[1]), m(&[2, 3])],
                within: vec![m(&[0]), m(&[1]), m(&[2, 3])],
                preferred_width: 1,
            })),
        )]));
        // The CPUs only fit on two nodes, and prefer 0-1.
        let cpu = one(
            "cpu",
            vec![h(&[0, 1], true), h(&[2, 3], true), h(&[0, 1, 2, 3], false)],
        );
        let md = MergeMode::default();
        // Without bounds 0-1 would be preferred by both; with them, nothing is:
        // the narrowest reachable masks at B = 2 are 2-3 (and 0, 1 narrower).
        let out = merge(&numa, &[&memory, &cpu], md);
        assert_eq!(out.hint, h(&[2, 3], false));
        assert_eq!(out.rule, MergeRule::NonPreferredAtBestCount);
        assert_eq!(out.hint, cross_product_merge(&numa, &[&memory, &cpu], md));
        // A memory request preferring width 2 agrees with the CPUs on 2-3 only.
        let memory2: ProviderHints = Some(BTreeMap::from([(
            "memory".to_string(),
            Some(HintSet::Compact(CompactHints {
                minimal: vec![m(&[1, 2]), m(&[2, 3])],
                within: vec![m(&[0, 1, 2]), m(&[2, 3])],
                preferred_width: 2,
            })),
        )]));
        let out = merge(&numa, &[&memory2, &cpu], md);
        assert_eq!(out.hint, h(&[2, 3], true));
        assert_eq!(out.rule, MergeRule::Preferred);
        assert_eq!(out.hint, cross_product_merge(&numa, &[&memory2, &cpu], md));
    }

    #[test]
    fn malformed_compact_sets_are_refused_naming_the_provider() {
        let numa = NumaInfo::new(vec![0, 1, 2, 3], None).unwrap();
        let set = |minimal, within| -> ProviderHints {
            Some(BTreeMap::from([(
                "memory".to_string(),
                Some(HintSet::Compact(CompactHints {
                    minimal,
                    within,
                    preferred_width: 1,
                })),
            )]))
        };
        let short = set(vec![m(&[0]), m(&[1])], vec![m(&[0, 1])]);
        assert_eq!(
            validate(&numa, &[("memory", &short)])
                .unwrap_err()
                .to_string(),
            "provider \"memory\" returned invalid hints for resource \"memory\": compact hints \
             have 2 minimal mask(s) but 1 `within` bound(s); give one bound per minimal mask, or \
             leave `within` out; fix the provider's compact answer"
        );
        let outside = set(vec![m(&[0, 1])], vec![m(&[1, 2])]);
        assert_eq!(
            validate(&numa, &[("memory", &outside)])
                .unwrap_err()
                .to_string(),
            "provider \"memory\" returned invalid hints for resource \"memory\": compact hints: \
             minimal[0] (nodes 0-1) is not inside within[0] (nodes 1-2); every bound must be a \
             non-empty superset of its minimal mask; fix the provider's compact answer"
        );
        // A bound naming a node the machine lacks is refused like any hint.
        let far = set(vec![m(&[0])], vec![m(&[0, 7])]);
        assert_eq!(
            validate(&numa, &[("memory", &far)]).unwrap_err(),
            MergeError::UnknownNode {
                provider: "memory".to_string(),
                resource: "memory".to_string(),
                nodes: m(&[7]),
                machine: m(&[0, 1, 2, 3]),
            }
        );
        let good = set(
            vec![m(&[0]), m(&[1, 2])],
            vec![m(&[0, 1, 2, 3]), m(&[1, 2])],
        );
        assert_eq!(validate(&numa, &[("memory", &good)]), Ok(()));
    }

    #[test]
    fn unknown_nodes_are_refused_naming_the_provider() {
        let numa = numa2();
        let bad = one("example.com/foo", vec![h(&[0, 5], true)]);
        let err = validate(&numa, &[("mock", &bad)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "provider \"mock\" returned hints for resource \"example.com/foo\" naming NUMA node(s) 5, which this machine does not have (its nodes: 0-1)"
        );
    }
}
