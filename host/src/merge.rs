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

use std::borrow::Cow;
use std::collections::HashSet;

use topomgr_sdk::{
    CompactHints, CompactHintsError, HintSet, NumaMask, ProviderHints, TopologyHint,
};

use crate::policy::NumaInfo;

/// A provider's hints cannot be merged: they name NUMA nodes the machine
/// does not have, or a compact set is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// A compact hint set whose `within` bounds are malformed.
    #[error("provider {provider:?} returned invalid hints for resource {resource:?}: {source}; fix the provider's compact answer")]
    InvalidCompact {
        /// Provider name.
        provider: String,
        /// Resource name.
        resource: String,
        /// What is wrong with the set.
        source: CompactHintsError,
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
}

/// Which rule chose the merged hint (for explanations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
pub fn validate(numa: &NumaInfo, providers: &[(&str, &ProviderHints)]) -> Result<(), MergeError> {
    let machine = numa.default_mask();
    for (name, hints) in providers {
        let Some(map) = hints else { continue };
        for (resource, set) in map {
            let Some(set) = set else { continue };
            if let HintSet::Compact(c) = set {
                c.validate().map_err(|source| MergeError::InvalidCompact {
                    provider: name.to_string(),
                    resource: resource.clone(),
                    source,
                })?;
            }
            let bad = set.nodes_named().and_not(machine);
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

/// One resource's hints after the kubelet's filtering.
#[derive(Debug, Clone)]
enum List<'a> {
    Explicit(Cow<'a, [TopologyHint]>),
    Compact(&'a CompactHints),
}

const ANY_PREFERRED: &[TopologyHint] = &[TopologyHint {
    affinity: None,
    preferred: true,
}];
const NONE_POSSIBLE: &[TopologyHint] = &[TopologyHint {
    affinity: None,
    preferred: false,
}];

/// The kubelet's `filterProvidersHints`: no map or an empty map -> one
/// "any, preferred"; a resource with no preference -> "any, preferred";
/// a resource with no possible placement -> "any, not preferred".
fn filter_providers<'a>(providers: &[&'a ProviderHints]) -> Vec<List<'a>> {
    let mut lists = Vec::new();
    for hints in providers {
        match hints {
            Some(map) if !map.is_empty() => {
                for set in map.values() {
                    lists.push(match set {
                        None => List::Explicit(Cow::Borrowed(ANY_PREFERRED)),
                        Some(HintSet::Explicit(v)) if v.is_empty() => {
                            List::Explicit(Cow::Borrowed(NONE_POSSIBLE))
                        }
                        Some(HintSet::Explicit(v)) => List::Explicit(Cow::Borrowed(v)),
                        Some(HintSet::Compact(c)) if c.minimal.is_empty() => {
                            List::Explicit(Cow::Borrowed(NONE_POSSIBLE))
                        }
                        Some(HintSet::Compact(c)) => List::Compact(c),
                    });
                }
            }
            _ => lists.push(List::Explicit(Cow::Borrowed(ANY_PREFERRED))),
        }
    }
    lists
}

/// single-numa-node's filter: keep "any, preferred" and preferred single-node hints.
fn filter_single_numa<'a>(lists: Vec<List<'a>>, numa: &NumaInfo) -> Vec<List<'a>> {
    lists
        .into_iter()
        .map(|l| {
            let kept: Vec<TopologyHint> = match &l {
                List::Explicit(v) => v
                    .iter()
                    .filter(|h| h.preferred && h.affinity.is_none_or(|m| m.count() == 1))
                    .copied()
                    .collect(),
                List::Compact(c) if c.preferred_width == 1 => numa
                    .nodes()
                    .iter()
                    .filter_map(|&n| NumaMask::single(n).ok())
                    .filter(|&m| c.contains(m))
                    .map(|m| TopologyHint::new(m, true))
                    .collect(),
                List::Compact(_) => Vec::new(),
            };
            List::Explicit(Cow::Owned(kept))
        })
        .collect()
}

/// The kubelet's `maxOfMinAffinityCounts`.
fn best_non_preferred_count(lists: &[List<'_>]) -> u32 {
    lists
        .iter()
        .filter_map(|l| match l {
            List::Explicit(v) => v.iter().filter_map(|h| h.affinity).map(|m| m.count()).min(),
            List::Compact(c) => c.min_width(),
        })
        .max()
        .unwrap_or(0)
}

/// The comparator: fewer nodes first; then (prefer-closest) smaller average
/// distance; then the smaller 64-bit value.
struct Ranker<'a> {
    numa: &'a NumaInfo,
    closest: bool,
}

impl Ranker<'_> {
    fn better(&self, a: NumaMask, b: NumaMask) -> bool {
        if a.count() != b.count() {
            return a.count() < b.count();
        }
        if self.closest {
            if let (Some(da), Some(db)) =
                (self.numa.average_distance(a), self.numa.average_distance(b))
            {
                if da != db {
                    return da < db;
                }
            }
        }
        a.bits() < b.bits()
    }

    fn offer(&self, best: &mut Option<NumaMask>, m: NumaMask) {
        if m.count() > 0 && best.is_none_or(|b| self.better(m, b)) {
            *best = Some(m);
        }
    }

    /// The best mask of width `width` with `lo <= M <= hi`.
    fn best_in_interval(&self, lo: NumaMask, hi: NumaMask, width: u32) -> Option<NumaMask> {
        let (nlo, nhi) = (lo.count(), hi.count());
        if width < nlo || width > nhi || !lo.is_subset_of(hi) {
            return None;
        }
        let free = hi.and_not(lo);
        let extra = width - nlo;
        if !self.closest || !self.numa.has_distances() || extra == 0 || extra == free.count() {
            // Lowest extra ids give the smallest value; without distances
            // (or with nothing to choose) that is also the best.
            let add = free
                .iter()
                .take(extra as usize)
                .fold(NumaMask::EMPTY, |m, n| m.or(NumaMask::from_bits(1u64 << n)));
            return Some(lo.or(add));
        }
        let mut best = None;
        for_each_combination(free, extra, &mut |add| self.offer(&mut best, lo.or(add)));
        best
    }
}

/// Calls `f` on every subset of `pool` with exactly `k` nodes.
fn for_each_combination(pool: NumaMask, k: u32, f: &mut impl FnMut(NumaMask)) {
    fn rec(nodes: &[u32], k: usize, acc: u64, f: &mut impl FnMut(NumaMask)) {
        if k == 0 {
            f(NumaMask::from_bits(acc));
            return;
        }
        for i in 0..=nodes.len() - k {
            rec(&nodes[i + 1..], k - 1, acc | (1u64 << nodes[i]), f);
        }
    }
    let nodes = pool.nodes();
    if k as usize <= nodes.len() {
        rec(&nodes, k as usize, 0, f);
    }
}

/// Per explicit list: does it offer "any, preferred", and its preferred masks (sorted).
struct PreferredIndex {
    any: bool,
    masks: Vec<u64>,
}

impl PreferredIndex {
    fn of(hints: &[TopologyHint]) -> Self {
        let mut masks: Vec<u64> = hints
            .iter()
            .filter(|h| h.preferred)
            .filter_map(|h| h.affinity.map(NumaMask::bits))
            .collect();
        masks.sort_unstable();
        masks.dedup();
        PreferredIndex {
            any: hints.iter().any(|h| h.preferred && h.affinity.is_none()),
            masks,
        }
    }
    fn offers(&self, m: NumaMask) -> bool {
        self.any || self.masks.binary_search(&m.bits()).is_ok()
    }
}

/// Fact 1: the best mask that every list offers as preferred.
fn best_preferred(lists: &[List<'_>], numa: &NumaInfo, ranker: &Ranker<'_>) -> Option<NumaMask> {
    let machine = numa.default_mask();
    let mut explicit = Vec::new();
    let mut compact = Vec::new();
    for l in lists {
        match l {
            List::Explicit(v) => explicit.push(PreferredIndex::of(v)),
            List::Compact(c) => compact.push(*c),
        }
    }
    let offered_by_all = |m: NumaMask| {
        explicit.iter().all(|e| e.offers(m))
            && compact
                .iter()
                .all(|c| m.count() == c.preferred_width && c.contains(m))
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
            let m = NumaMask::from_bits(m);
            if offered_by_all(m) {
                ranker.offer(&mut best, m);
            }
        }
        return best;
    }
    // Every explicit list can pick "any": candidates come from any list.
    for e in &explicit {
        for &m in &e.masks {
            let m = NumaMask::from_bits(m);
            if offered_by_all(m) {
                ranker.offer(&mut best, m);
            }
        }
    }
    if let Some(first) = compact.first() {
        let width = first.preferred_width;
        if compact.iter().all(|c| c.preferred_width == width) {
            // One interval per compact list: the union `U` of their minimal
            // masks and the intersection `V` of their bounds (and the
            // machine). Every width-`width` mask between `U` and `V` is
            // offered by all of them, and every mask they all offer is one.
            let mut meets: HashSet<(u64, u64)> = HashSet::from([(0, machine.bits())]);
            for c in &compact {
                let mut next = HashSet::new();
                for &(u, v) in &meets {
                    for (a, w) in c.intervals() {
                        let (u, v) = (NumaMask::from_bits(u).or(a), NumaMask::from_bits(v).and(w));
                        if u.count() <= width && v.count() >= width && u.is_subset_of(v) {
                            next.insert((u.bits(), v.bits()));
                        }
                    }
                }
                meets = next;
            }
            for (u, v) in meets {
                let (u, v) = (NumaMask::from_bits(u), NumaMask::from_bits(v));
                if let Some(m) = ranker.best_in_interval(u, v, width) {
                    ranker.offer(&mut best, m);
                }
            }
        }
    }
    best
}

/// Reachable merged masks, as lattice intervals `[lo, hi]`.
fn reachable_intervals(lists: &[List<'_>], machine: NumaMask) -> Vec<(NumaMask, NumaMask)> {
    let mut cur: HashSet<(u64, u64)> = HashSet::from([(machine.bits(), machine.bits())]);
    for l in lists {
        let mut next = HashSet::new();
        for &(lo, hi) in &cur {
            match l {
                List::Explicit(v) => {
                    for h in v.iter() {
                        let x = h.affinity.map_or(machine.bits(), NumaMask::bits);
                        if hi & x != 0 {
                            next.insert((lo & x, hi & x));
                        }
                    }
                }
                List::Compact(c) => {
                    for (a, u) in c.intervals() {
                        if hi & u.bits() != 0 {
                            next.insert((lo & a.bits(), hi & u.bits()));
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur.into_iter()
        .map(|(lo, hi)| (NumaMask::from_bits(lo), NumaMask::from_bits(hi)))
        .collect()
}

/// Reachable merged masks when every list is explicit: a dense bitset over
/// small node ids, a hash set otherwise.
fn reachable_points(lists: &[&[TopologyHint]], machine: NumaMask) -> Vec<NumaMask> {
    let options: Vec<Vec<u64>> = lists
        .iter()
        .map(|v| {
            let mut o: Vec<u64> = v
                .iter()
                .map(|h| h.affinity.map_or(machine.bits(), NumaMask::bits))
                .collect();
            o.sort_unstable();
            o.dedup();
            o
        })
        .collect();
    let span = 64 - machine.bits().leading_zeros();
    if span <= 16 {
        let size = 1usize << span;
        let mut cur = vec![false; size];
        cur[machine.bits() as usize] = true;
        let mut members = vec![machine.bits()];
        for opts in &options {
            let mut next = vec![false; size];
            let mut next_members = Vec::new();
            for &r in &members {
                for &x in opts {
                    let m = r & x;
                    if m != 0 && !next[m as usize] {
                        next[m as usize] = true;
                        next_members.push(m);
                    }
                }
            }
            cur = next;
            members = next_members;
        }
        let _ = cur;
        members.into_iter().map(NumaMask::from_bits).collect()
    } else {
        let mut cur: HashSet<u64> = HashSet::from([machine.bits()]);
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
        cur.into_iter().map(NumaMask::from_bits).collect()
    }
}

/// Fact 2: the non-preferred answer from the set of reachable masks.
fn best_non_preferred(
    intervals: &[(NumaMask, NumaMask)],
    b: u32,
    ranker: &Ranker<'_>,
) -> Option<(NumaMask, MergeRule)> {
    // Width exactly B.
    if b > 0 {
        let mut best = None;
        for &(lo, hi) in intervals {
            if let Some(m) = ranker.best_in_interval(lo, hi, b) {
                ranker.offer(&mut best, m);
            }
        }
        if let Some(m) = best {
            return Some((m, MergeRule::NonPreferredAtBestCount));
        }
    }
    // Narrower than B: the widest reachable width, then the best of it.
    let narrower = intervals
        .iter()
        .filter_map(|&(lo, hi)| {
            let w = hi.count().min(b.checked_sub(1)?);
            (w >= lo.count().max(1)).then_some(w)
        })
        .max();
    if let Some(w) = narrower {
        let mut best = None;
        for &(lo, hi) in intervals {
            if let Some(m) = ranker.best_in_interval(lo, hi, w) {
                ranker.offer(&mut best, m);
            }
        }
        return best.map(|m| (m, MergeRule::NonPreferredNarrower));
    }
    // Wider than B: the narrowest reachable width, then the best of it.
    let wider = intervals
        .iter()
        .filter_map(|&(lo, hi)| {
            let w = lo.count().max(b + 1).max(1);
            (w <= hi.count()).then_some(w)
        })
        .min();
    let w = wider?;
    let mut best = None;
    for &(lo, hi) in intervals {
        if let Some(m) = ranker.best_in_interval(lo, hi, w) {
            ranker.offer(&mut best, m);
        }
    }
    best.map(|m| (m, MergeRule::NonPreferredWider))
}

/// Merge the providers' hints into the kubelet's merged hint.
///
/// Callers must have run [`validate`]; masks outside the machine are not
/// expected here (they would be AND-ed away as the kubelet does).
pub fn merge(numa: &NumaInfo, providers: &[&ProviderHints], mode: MergeMode) -> MergeOutcome {
    let machine = numa.default_mask();
    let mut lists = filter_providers(providers);
    if mode.single_numa_node {
        lists = filter_single_numa(lists, numa);
    }
    let b = best_non_preferred_count(&lists);
    let ranker = Ranker {
        numa,
        closest: mode.prefer_closest,
    };
    let outcome = |hint, rule| MergeOutcome {
        hint,
        best_non_preferred_count: b,
        lists: lists.len(),
        rule,
    };
    if let Some(m) = best_preferred(&lists, numa, &ranker) {
        return outcome(TopologyHint::new(m, true), MergeRule::Preferred);
    }
    let explicit: Vec<&[TopologyHint]> = lists
        .iter()
        .filter_map(|l| match l {
            List::Explicit(v) => Some(v.as_ref()),
            List::Compact(_) => None,
        })
        .collect();
    let intervals: Vec<(NumaMask, NumaMask)> = if explicit.len() == lists.len() {
        reachable_points(&explicit, machine)
            .into_iter()
            .map(|m| (m, m))
            .collect()
    } else {
        reachable_intervals(&lists, machine)
    };
    match best_non_preferred(&intervals, b, &ranker) {
        Some((m, rule)) => outcome(TopologyHint::new(m, false), rule),
        None => outcome(TopologyHint::new(machine, false), MergeRule::NoCandidate),
    }
}

/// The kubelet's own algorithm: enumerate every permutation and fold the
/// candidates through `HintMerger.compare`, in the kubelet's order.
///
/// Its cost is the product of the list lengths: it exists as the reference
/// that [`merge`] is tested against and as the baseline of the benchmark.
/// Never use it to make decisions.
pub fn cross_product_merge(
    numa: &NumaInfo,
    providers: &[&ProviderHints],
    mode: MergeMode,
) -> TopologyHint {
    let machine = numa.default_mask();
    let mut lists: Vec<Vec<TopologyHint>> = filter_providers(providers)
        .into_iter()
        .map(|l| match l {
            List::Explicit(v) => v.into_owned(),
            List::Compact(c) => c.expand(numa.nodes()),
        })
        .collect();
    if mode.single_numa_node {
        lists = lists
            .into_iter()
            .map(|v| {
                v.into_iter()
                    .filter(|h| h.preferred && h.affinity.is_none_or(|m| m.count() == 1))
                    .collect()
            })
            .collect();
    }
    let b = lists
        .iter()
        .filter_map(|v| v.iter().filter_map(|h| h.affinity).map(|m| m.count()).min())
        .max()
        .unwrap_or(0);
    let ranker = Ranker {
        numa,
        closest: mode.prefer_closest,
    };
    let fitter = |cur: TopologyHint, cand: TopologyHint| {
        let (a, c) = (
            cur.affinity.unwrap_or_default(),
            cand.affinity.unwrap_or_default(),
        );
        if a == c || !ranker.better(c, a) {
            cur
        } else {
            cand
        }
    };
    let mut best: Option<TopologyHint> = None;
    let mut idx = vec![0usize; lists.len()];
    if lists.iter().any(|l| l.is_empty()) {
        return TopologyHint::new(machine, false);
    }
    loop {
        let mut preferred = true;
        let mut first: Option<NumaMask> = None;
        let mut acc = machine;
        for (i, l) in lists.iter().enumerate() {
            let hint = l[idx[i]];
            if let Some(a) = hint.affinity {
                acc = acc.and(a);
                match first {
                    None => first = Some(a),
                    Some(f) if f != a => preferred = false,
                    _ => {}
                }
            }
            if !hint.preferred {
                preferred = false;
            }
        }
        let cand = TopologyHint::new(acc, preferred);
        if acc.count() > 0 {
            best = Some(match best {
                None => cand,
                Some(cur) if !cur.preferred && cand.preferred => cand,
                Some(cur) if cur.preferred && !cand.preferred => cur,
                Some(cur) if cur.preferred && cand.preferred => fitter(cur, cand),
                Some(cur) => {
                    let (cc, nc) = (cur.affinity.unwrap_or_default().count(), acc.count());
                    if cc > b {
                        fitter(cur, cand)
                    } else if cc == b {
                        if nc != b {
                            cur
                        } else {
                            fitter(cur, cand)
                        }
                    } else if nc > b {
                        cur
                    } else if nc == b || nc > cc {
                        cand
                    } else if nc < cc {
                        cur
                    } else {
                        fitter(cur, cand)
                    }
                }
            });
        }
        // next permutation, last list fastest
        let mut i = lists.len();
        loop {
            if i == 0 {
                return best.unwrap_or(TopologyHint::new(machine, false));
            }
            i -= 1;
            idx[i] += 1;
            if idx[i] < lists[i].len() {
                break;
            }
            idx[i] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
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

    /// A tiny deterministic PRNG (xorshift) for randomized comparisons.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn random_case(rng: &mut Rng) -> (NumaInfo, Vec<ProviderHints>, MergeMode) {
        let n = 1 + rng.below(4) as u32;
        // Occasionally sparse node ids.
        let nodes: Vec<u32> = if rng.below(4) == 0 {
            (0..n).map(|i| i * 2).collect()
        } else {
            (0..n).collect()
        };
        let full = nodes.iter().fold(0u64, |a, &x| a | (1 << x));
        let distances = (rng.below(2) == 0).then(|| {
            nodes
                .iter()
                .enumerate()
                .map(|(i, _)| {
                    nodes
                        .iter()
                        .enumerate()
                        .map(|(j, _)| if i == j { 10 } else { 11 + rng.below(25) })
                        .collect()
                })
                .collect()
        });
        let numa = NumaInfo::new(nodes.clone(), distances).unwrap();
        let random_mask = |rng: &mut Rng| loop {
            let m = rng.next() & full;
            if m != 0 || rng.below(10) == 0 {
                return NumaMask::from_bits(m);
            }
        };
        let providers = (0..rng.below(4))
            .map(|_| match rng.below(8) {
                0 => None,
                _ => Some(
                    (0..1 + rng.below(2))
                        .map(|r| {
                            let set = match rng.below(8) {
                                0 => None,
                                1 => Some(HintSet::Explicit(vec![])),
                                2 => {
                                    Some(HintSet::Compact(random_compact(rng, full, &random_mask)))
                                }
                                _ => Some(HintSet::Explicit(
                                    (0..1 + rng.below(5))
                                        .map(|_| TopologyHint {
                                            affinity: (rng.below(6) != 0).then(|| random_mask(rng)),
                                            preferred: rng.below(2) == 0,
                                        })
                                        .collect(),
                                )),
                            };
                            (format!("r{r}"), set)
                        })
                        .collect(),
                ),
            })
            .collect();
        let mode = MergeMode {
            single_numa_node: rng.below(4) == 0,
            prefer_closest: rng.below(2) == 0,
        };
        (numa, providers, mode)
    }

    /// A random valid compact set over the nodes `full`: half the time
    /// without bounds, else each bound the minimal mask itself, a random
    /// superset of it, or every node.
    fn random_compact(
        rng: &mut Rng,
        full: u64,
        random_mask: &dyn Fn(&mut Rng) -> NumaMask,
    ) -> CompactHints {
        let minimal: Vec<NumaMask> = (0..rng.below(3)).map(|_| random_mask(rng)).collect();
        let within = if rng.below(2) == 0 {
            Vec::new()
        } else {
            minimal
                .iter()
                .map(|&a| {
                    let u = match rng.below(3) {
                        0 => a,
                        1 => a.or(random_mask(rng)),
                        _ => NumaMask::from_bits(full),
                    };
                    if u.is_empty() {
                        NumaMask::from_bits(full)
                    } else {
                        u
                    }
                })
                .collect()
        };
        let c = CompactHints {
            minimal,
            within,
            preferred_width: 1 + rng.below(2) as u32,
        };
        assert_eq!(c.validate(), Ok(()), "{c:?}");
        c
    }

    #[test]
    fn equals_the_cross_product_on_random_inputs() {
        let mut rng = Rng(0x5eed_1234_abcd_ef01);
        for case in 0..20_000 {
            let (numa, providers, mode) = random_case(&mut rng);
            let refs: Vec<&ProviderHints> = providers.iter().collect();
            let got = merge(&numa, &refs, mode).hint;
            let want = cross_product_merge(&numa, &refs, mode);
            assert_eq!(got, want, "case {case}: {numa:?} {providers:?} {mode:?}");
        }
    }

    #[test]
    fn compact_equals_explicit_expansion_on_eight_nodes() {
        let numa = NumaInfo::new((0..8).collect(), None).unwrap();
        let mut rng = Rng(42);
        for _ in 0..300 {
            let compact: Vec<ProviderHints> = (0..1 + rng.below(3))
                .map(|i| {
                    let minimal: Vec<NumaMask> = (0..1 + rng.below(3))
                        .map(|_| {
                            NumaMask::from_bits(
                                1 << rng.below(8) | (rng.next() & rng.next() & 0xff),
                            )
                        })
                        .collect();
                    let within = if rng.below(2) == 0 {
                        Vec::new()
                    } else {
                        minimal
                            .iter()
                            .map(|a| match rng.below(3) {
                                0 => *a,
                                1 => a.or(NumaMask::from_bits(rng.next() & 0xff)),
                                _ => NumaMask::from_bits(0xff),
                            })
                            .collect()
                    };
                    let c = CompactHints {
                        minimal,
                        within,
                        preferred_width: 1 + rng.below(3) as u32,
                    };
                    Some(BTreeMap::from([(
                        format!("r{i}"),
                        Some(HintSet::Compact(c)),
                    )]))
                })
                .collect();
            let explicit: Vec<ProviderHints> = compact
                .iter()
                .map(|p| {
                    p.as_ref().map(|map| {
                        map.iter()
                            .map(|(k, v)| match v {
                                Some(HintSet::Compact(c)) => {
                                    (k.clone(), Some(HintSet::Explicit(c.expand(numa.nodes()))))
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
                    prefer_closest: false,
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
