//! Topology hints as the kubelet's static memory policy generates them.
//!
//! A NUMA mask is a hint for a request when, for every requested resource,
//! the mask's *allocatable* bytes reach the request, the kubelet's
//! multi-NUMA group rules allow the mask (a node that already holds a
//! multi-node allocation can only be used with exactly that group; a node
//! with single-node allocations cannot join a multi-node mask) and the
//! mask's *free* bytes (plus init-container memory the pod may reuse on
//! exactly that mask) reach the request. Hints are listed in the kubelet's
//! `IterateBitMasks` order; a hint is preferred when its width equals the
//! smallest width whose allocatable bytes could hold the request. Every
//! requested resource gets the same list. When no mask qualifies, every
//! requested resource gets an empty list ("cannot be satisfied on any NUMA
//! node"). The kubelet's `calculateHints` answers an empty map there, which
//! its Topology Manager reads as "no preference": the pod passes the
//! topology check and fails at `Allocate` with `UnexpectedAdmissionError`
//! (kubernetes/kubernetes#128708, open). The empty lists refuse the same pods
//! under every policy (`restricted` and `single-numa-node` at the merge,
//! with `TopologyAffinityError` and the host's per-node numbers;
//! `best-effort` still admits the merged hint and the allocation fails as
//! in the kubelet), only with the reason the request deserves.
//!
//! On machines with more than [`EXPLICIT_HINT_MAX_NODES`] nodes the hints are
//! returned in the SDK's compact form, a union of lattice intervals
//! `[minimal, within]` and the preferred width (see [`Hinter::compact`]). It
//! stands for exactly the masks, order and preferred flags of the explicit
//! list, allocations and group rules included: a node holding a
//! single-node allocation appears only alone (`[{n}, {n}]`), a multi-node
//! group only as a whole (`[G, G]`), and growing masks are bounded by the
//! nodes that hold no allocation. So the host's merge gives the kubelet's
//! merged hint on every machine size.

use std::collections::BTreeMap;

use topomgr_sdk::hintgen::{minimal_masks, EXPLICIT_HINT_MAX_NODES, MAX_SEARCH_STEPS};
use topomgr_sdk::{
    for_each_mask_in_kubelet_order, CompactHints, ContainerView, HintSet, NumaMask, NumaNodeId,
    PodView, ProviderError, ProviderHints, TopologyHint,
};

use crate::config::is_memory_resource;
use crate::state::{allocatable, free, sum_over, Block, MachineState};

/// Requested bytes by resource (`memory`, `hugepages-*`).
pub type Requested = BTreeMap<String, u64>;

/// Reusable init-container memory of one pod: node set -> resource -> bytes.
pub type PodReusable = BTreeMap<NumaMask, BTreeMap<String, u64>>;

/// The memory and hugepages requests of a container (every listed request,
/// zero included, like the kubelet's `getRequestedResources`).
pub fn container_requests(c: &ContainerView) -> Requested {
    c.requests
        .iter()
        .filter(|(k, _)| is_memory_resource(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The kubelet's `getContainerRequestedResources`: [`container_requests`],
/// except that with the `PodLevelResourceManagers` gate (`gate`) a
/// container of a pod with pod-level resources requests nothing unless it
/// is Guaranteed on its own (equal `cpu` and `memory` requests and limits).
pub fn eligible_requests(pod: &PodView, c: &ContainerView, gate: bool) -> Requested {
    if gate && pod.sets_pod_level_resources() && !c.is_guaranteed_equivalent() {
        return Requested::new();
    }
    container_requests(c)
}

/// The kubelet's `getPodRequestedResources`: with the
/// `PodLevelResourceManagers` gate and pod-level resources, the pod-level
/// `memory` and `hugepages-*` requests above zero; otherwise
/// [`pod_requests`].
pub fn pod_scope_requests(pod: &PodView, gate: bool) -> Requested {
    match &pod.resources {
        Some(r) if gate && pod.sets_pod_level_resources() => r
            .requests
            .iter()
            .filter(|(k, v)| is_memory_resource(k) && **v > 0)
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        _ => pod_requests(pod),
    }
}

/// The pod-scope requests (the kubelet's `getPodRequestedResources`): for
/// every resource the app containers request, the larger of the app
/// containers plus sidecars and the largest regular init container plus the
/// sidecars started before it. Resources only init containers request are
/// left out, as in the kubelet.
pub fn pod_requests(pod: &PodView) -> Requested {
    let mut init_max: Requested = BTreeMap::new();
    let mut sidecars: Requested = BTreeMap::new();
    for c in &pod.init_containers {
        for (r, q) in container_requests(c) {
            let max = init_max.entry(r.clone()).or_insert(0);
            let side = sidecars.entry(r).or_insert(0);
            if c.sidecar {
                *side = side.saturating_add(q);
            } else if side.saturating_add(q) > *max {
                *max = side.saturating_add(q);
            }
        }
    }
    let mut apps: Requested = BTreeMap::new();
    for c in &pod.containers {
        for (r, q) in container_requests(c) {
            let e = apps.entry(r).or_insert(0);
            *e = e.saturating_add(q);
        }
    }
    apps.into_iter()
        .map(|(r, q)| {
            let long_running = q.saturating_add(sidecars.get(&r).copied().unwrap_or(0));
            let v = long_running.max(init_max.get(&r).copied().unwrap_or(0));
            (r, v)
        })
        .collect()
}

/// The hints the kubelet regenerates for a container that already holds
/// memory: each block's mask, preferred; no map when the blocks do not
/// match the requests exactly.
pub fn regenerate(blocks: &[Block], requested: &Requested) -> ProviderHints {
    if blocks.len() != requested.len() {
        tracing::info!(
            blocks = blocks.len(),
            requested = requested.len(),
            "memory blocks differ from the requested resources; no hints"
        );
        return None;
    }
    let mut lists: BTreeMap<String, Vec<TopologyHint>> =
        requested.keys().map(|r| (r.clone(), Vec::new())).collect();
    for b in blocks {
        match (requested.get(&b.resource), lists.get_mut(&b.resource)) {
            (Some(&want), Some(list)) if want == b.size => {
                list.push(TopologyHint::new(b.numa_affinity, true));
            }
            _ => {
                tracing::info!(resource = %b.resource, size = b.size, "memory already allocated with other numbers than requested; no hints");
                return None;
            }
        }
    }
    Some(
        lists
            .into_iter()
            .map(|(r, v)| (r, Some(HintSet::Explicit(v))))
            .collect(),
    )
}

/// Asks questions about one request against one machine state.
#[derive(Debug, Clone, Copy)]
pub struct Hinter<'a> {
    /// The machine state.
    pub state: &'a MachineState,
    /// The pod's reusable init-container memory, if any.
    pub reusable: Option<&'a PodReusable>,
    /// The request.
    pub requested: &'a Requested,
}

impl<'a> Hinter<'a> {
    /// Node ids, ascending.
    pub fn nodes(&self) -> Vec<NumaNodeId> {
        self.state.keys().copied().collect()
    }

    fn reusable_on(&self, mask: NumaMask, resource: &str) -> u64 {
        self.reusable
            .and_then(|m| m.get(&mask))
            .and_then(|m| m.get(resource))
            .copied()
            .unwrap_or(0)
    }

    /// Every resource's allocatable bytes on `mask` reach the request.
    pub fn allocatable_fits(&self, mask: NumaMask) -> bool {
        self.requested
            .iter()
            .all(|(r, &q)| sum_over(mask, |n| allocatable(self.state, n, r)) >= q)
    }

    /// Every resource's free bytes on `mask` reach the request (no reuse:
    /// the kubelet's `isAffinitySatisfyRequest`).
    pub fn free_fits(&self, mask: NumaMask) -> bool {
        self.requested
            .iter()
            .all(|(r, &q)| sum_over(mask, |n| free(self.state, n, r)) >= q)
    }

    fn free_fits_with_reuse(&self, mask: NumaMask) -> bool {
        self.requested.iter().all(|(r, &q)| {
            sum_over(mask, |n| free(self.state, n, r)).saturating_add(self.reusable_on(mask, r))
                >= q
        })
    }

    /// The kubelet's group rules allow `mask` as a hint.
    pub fn groups_allow(&self, mask: NumaMask) -> bool {
        if mask.len() == 1 {
            return mask
                .iter()
                .all(|n| self.state.get(&n).is_none_or(|s| s.cells.len() <= 1));
        }
        mask.iter().all(|n| match self.state.get(&n) {
            Some(s) if s.number_of_assignments > 0 => s.cells.len() > 1 && s.cells == mask,
            _ => true,
        })
    }

    /// `mask` is a hint.
    pub fn is_hint(&self, mask: NumaMask) -> bool {
        self.allocatable_fits(mask) && self.groups_allow(mask) && self.free_fits_with_reuse(mask)
    }

    /// The explicit hints, in the kubelet's order (its `calculateHints`).
    pub fn explicit(&self) -> Vec<TopologyHint> {
        let nodes = self.nodes();
        let mut min_width = nodes.len() as u32;
        let mut masks = Vec::new();
        for_each_mask_in_kubelet_order(&nodes, |mask| {
            if !self.allocatable_fits(mask) {
                return;
            }
            min_width = min_width.min(mask.len());
            if self.groups_allow(mask) && self.free_fits_with_reuse(mask) {
                masks.push(mask);
            }
        });
        masks
            .into_iter()
            .map(|m| TopologyHint::new(m, m.len() == min_width))
            .collect()
    }

    /// The smallest width whose allocatable bytes could hold the request
    /// (the machine's node count when none can).
    pub fn min_width(&self) -> Result<u32, ProviderError> {
        let nodes = self.nodes();
        let mut steps = 0u64;
        for k in 1..=nodes.len() {
            if self.exists_width(&nodes, k, 0, NumaMask::EMPTY, &mut steps)? {
                return Ok(k as u32);
            }
        }
        Ok(nodes.len() as u32)
    }

    fn exists_width(
        &self,
        nodes: &[NumaNodeId],
        left: usize,
        start: usize,
        acc: NumaMask,
        steps: &mut u64,
    ) -> Result<bool, ProviderError> {
        tick(steps)?;
        if left == 0 {
            return Ok(self.allocatable_fits(acc));
        }
        // Prune: even all remaining nodes cannot reach the request.
        let rest = nodes[start..].iter().fold(acc, |m, &n| m.with(n));
        if !self.allocatable_fits(rest) {
            return Ok(false);
        }
        for i in start..=nodes.len().saturating_sub(left) {
            let m = acc.with(nodes[i]);
            if self.exists_width(nodes, left - 1, i + 1, m, steps)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The hints in compact form, exactly the set [`Hinter::explicit`]
    /// lists; `None` when no mask is a hint.
    ///
    /// The set splits along the kubelet's group rules. With `F` the nodes
    /// holding no assignment:
    ///
    /// * multi-node masks inside `F` are hints when their free (and
    ///   allocatable) bytes reach the request, which only grows with the
    ///   mask: the intervals `[a, F]` for every minimal such mask `a` (a
    ///   minimal single node that may not stand alone, because it is grouped,
    ///   gives `[{n, m}, F]` for every other `m` of `F`);
    /// * a single node `{n}` not grouped with others: `[{n}, {n}]`;
    /// * a multi-node group `G` some node holds: `[G, G]`;
    /// * a mask with reusable init-container memory: `[R, R]`;
    ///
    /// each point interval kept only when that mask is a hint. Intervals
    /// inside another are dropped; when every bound is the whole machine the
    /// bounds are left out (the plain upward-closed form).
    pub fn compact(&self) -> Result<Option<CompactHints>, ProviderError> {
        let preferred_width = self.min_width()?;
        let machine = self.state.keys().fold(NumaMask::EMPTY, |m, &n| m.with(n));
        let free_nodes: Vec<NumaNodeId> = self
            .state
            .iter()
            .filter(|(_, s)| s.number_of_assignments <= 0)
            .map(|(&n, _)| n)
            .collect();
        let f_mask = free_nodes.iter().fold(NumaMask::EMPTY, |m, &n| m.with(n));
        // Only nodes that add free bytes of a requested resource can be in a
        // minimal mask (free never exceeds allocatable), unless one node
        // alone already fits (a zero request).
        let contributing: Vec<NumaNodeId> = free_nodes
            .iter()
            .copied()
            .filter(|&n| {
                self.requested.iter().any(|(r, &q)| {
                    q > 0 && free(self.state, n, r) > 0 && allocatable(self.state, n, r) > 0
                }) || self.free_fits(NumaMask::single(n))
                    && self.allocatable_fits(NumaMask::single(n))
            })
            .collect();
        let both = |m: NumaMask| self.allocatable_fits(m) && self.free_fits(m);
        let lows: Vec<NumaMask> = if both(NumaMask::EMPTY) {
            // Nothing is requested: every mask fits, the minimal ones are
            // the single nodes.
            free_nodes.iter().map(|&n| NumaMask::single(n)).collect()
        } else {
            minimal_masks(&contributing, both)
                .map_err(|e| ProviderError::admission(format!("memory hints: {e}")))?
        };
        // The minimal masks are an antichain sharing the bound `F`: no
        // interval among them lies inside another, so only the few pairs and
        // points below are checked for containment.
        let mut kept: Vec<(NumaMask, NumaMask)> = Vec::with_capacity(lows.len());
        let mut extra: Vec<(NumaMask, NumaMask)> = Vec::new();
        for a in lows {
            if a.len() != 1 || self.groups_allow(a) {
                kept.push((a, f_mask));
            } else {
                for &m in &free_nodes {
                    let pair = a.with(m);
                    if pair != a {
                        extra.push((pair, f_mask));
                    }
                }
            }
        }
        // Point intervals: single nodes, existing groups, reusable masks.
        let mut points: Vec<NumaMask> = self.state.keys().map(|&n| NumaMask::single(n)).collect();
        points.extend(
            self.state
                .values()
                .filter(|s| s.number_of_assignments > 0 && s.cells.len() > 1)
                .map(|s| s.cells),
        );
        if let Some(r) = self.reusable {
            points.extend(r.keys().copied());
        }
        extra.extend(
            points
                .into_iter()
                .filter(|&m| self.is_hint(m))
                .map(|m| (m, m)),
        );
        // Wider intervals first, so a narrower one is checked against them.
        extra.sort_by_key(|&(lo, hi)| (lo.len(), lo.nodes(), u32::MAX - hi.len(), hi.nodes()));
        extra.dedup();
        for (lo, hi) in extra {
            let inside = |&(l, h): &(NumaMask, NumaMask)| l.is_subset(lo) && hi.is_subset(h);
            if !kept.iter().any(inside) {
                kept.push((lo, hi));
            }
        }
        kept.sort_by_cached_key(|&(lo, hi)| {
            (lo.len(), lo.nodes(), u32::MAX - hi.len(), hi.nodes())
        });
        if kept.is_empty() {
            return Ok(None);
        }
        let (minimal, mut within): (Vec<NumaMask>, Vec<NumaMask>) = kept.into_iter().unzip();
        if within.iter().all(|&u| u == machine) {
            within.clear();
        }
        Ok(Some(CompactHints {
            minimal,
            within,
            preferred_width,
        }))
    }

    /// The hints as the provider answers them: explicit up to
    /// [`EXPLICIT_HINT_MAX_NODES`] nodes, compact beyond; when no mask
    /// qualifies, [`HintSet::unsatisfiable`] for every requested resource
    /// (the kubelet answers an empty map: see the module docs).
    pub fn answer(&self) -> Result<ProviderHints, ProviderError> {
        let set = if self.state.len() <= EXPLICIT_HINT_MAX_NODES {
            HintSet::Explicit(self.explicit())
        } else {
            self.compact()?
                .map_or_else(HintSet::unsatisfiable, HintSet::Compact)
        };
        Ok(Some(
            self.requested
                .keys()
                .map(|r| (r.clone(), Some(set.clone())))
                .collect(),
        ))
    }

    /// The best hint containing `base` (the kubelet's `findBestHint` over the
    /// hints that include `base`; `base` empty: over all hints): preferred
    /// first, then the narrowest. Since a hint is preferred exactly when it
    /// has the smallest possible width, that is the narrowest hint.
    pub fn best_containing(&self, base: NumaMask) -> Result<Option<TopologyHint>, ProviderError> {
        if self.state.len() <= EXPLICIT_HINT_MAX_NODES {
            let mut best: Option<TopologyHint> = None;
            for h in self.explicit() {
                let Some(m) = h.affinity else { continue };
                if !base.is_subset(m) {
                    continue;
                }
                best = match best {
                    None => Some(h),
                    Some(b) if h.preferred && !b.preferred => Some(h),
                    Some(b)
                        if h.preferred == b.preferred
                            && b.affinity.is_some_and(|bm| m.is_narrower_than(bm)) =>
                    {
                        Some(h)
                    }
                    keep => keep,
                };
            }
            return Ok(best);
        }
        let min_width = self.min_width()?;
        let mut found: Option<NumaMask> = None;
        let consider = |m: NumaMask, found: &mut Option<NumaMask>| {
            if base.is_subset(m) && self.is_hint(m) && found.is_none_or(|f| m.is_narrower_than(f)) {
                *found = Some(m);
            }
        };
        for (&n, s) in self.state {
            if s.number_of_assignments > 0 {
                let m = if s.cells.len() > 1 {
                    s.cells
                } else {
                    NumaMask::single(n)
                };
                consider(m, &mut found);
            }
        }
        if let Some(r) = self.reusable {
            for &m in r.keys() {
                consider(m, &mut found);
            }
        }
        let unused: Vec<NumaNodeId> = self
            .state
            .iter()
            .filter(|(&n, s)| {
                s.number_of_assignments <= 0 && s.cells.len() <= 1 && !base.contains(n)
            })
            .map(|(&n, _)| n)
            .collect();
        let base_unused = base.iter().all(|n| {
            self.state
                .get(&n)
                .is_some_and(|s| s.number_of_assignments <= 0 && s.cells.len() <= 1)
        });
        if base_unused {
            let mut steps = 0u64;
            let limit = found.map_or(u32::MAX, |f| f.len());
            let from = base.len().max(1);
            for k in from..=(base.len() + unused.len() as u32).min(limit) {
                let extra = (k - base.len()) as usize;
                let search = ValueOrderSearch {
                    nodes: &unused,
                    ok: &|m| self.is_hint(m),
                    could: &|m| self.allocatable_fits(m) && self.free_fits(m),
                };
                if let Some(m) = search.first(extra, unused.len(), base, &mut steps)? {
                    consider(m, &mut found);
                    break;
                }
            }
        }
        Ok(found.map(|m| TopologyHint::new(m, m.len() == min_width)))
    }
}

fn tick(steps: &mut u64) -> Result<(), ProviderError> {
    *steps += 1;
    if *steps > MAX_SEARCH_STEPS {
        return Err(ProviderError::admission(format!(
            "the memory request needs more than {MAX_SEARCH_STEPS} steps to search the NUMA \
             combinations of this machine; request memory that fits on fewer NUMA nodes"
        )));
    }
    Ok(())
}

/// A search over subsets of `nodes` (ascending ids) in increasing mask value.
struct ValueOrderSearch<'s> {
    nodes: &'s [NumaNodeId],
    /// The condition sought.
    ok: &'s dyn Fn(NumaMask) -> bool,
    /// A monotone necessary condition, to prune: when a mask with every
    /// remaining node added fails it, no subset of them succeeds (masks whose
    /// only chance is reusable memory are checked by the caller on their own).
    could: &'s dyn Fn(NumaMask) -> bool,
}

impl ValueOrderSearch<'_> {
    /// The `k`-subset of `nodes[..end]` which, added to `base`, gives the
    /// smallest mask value satisfying `ok`, if any: the highest node as low
    /// as possible first, then recursively below it.
    fn first(
        &self,
        k: usize,
        end: usize,
        base: NumaMask,
        steps: &mut u64,
    ) -> Result<Option<NumaMask>, ProviderError> {
        tick(steps)?;
        if k == 0 {
            return Ok((self.ok)(base).then_some(base));
        }
        let all = self.nodes[..end].iter().fold(base, |m, &n| m.with(n));
        if !(self.could)(all) {
            return Ok(None);
        }
        for top in (k - 1)..end {
            let m = base.with(self.nodes[top]);
            if let Some(found) = self.first(k - 1, top, m, steps)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{reserve, MemoryTable, NodeState};
    use proptest::prelude::{any, Just, Strategy};

    fn node_bit(n: u32) -> NumaMask {
        NumaMask::single(id(n))
    }

    fn id(n: u32) -> NumaNodeId {
        NumaNodeId::new(n).expect("a test node id")
    }

    const GB: u64 = 1 << 30;
    const HUGE: &str = "hugepages-1Gi";

    fn table(allocatable: u64) -> MemoryTable {
        MemoryTable {
            total: allocatable + GB / 2,
            system_reserved: GB / 2,
            allocatable,
            reserved: 0,
            free: allocatable,
        }
    }

    const MEMORY_KEY: &str = "memory";

    /// The nodes of `bits` among `0..n`; node 0 when none is.
    fn mask_of(bits: u64, n: u32) -> NumaMask {
        let m = (0..n)
            .filter(|i| bits & (1 << i) != 0)
            .map(node_bit)
            .fold(NumaMask::EMPTY, NumaMask::union);
        if m.is_empty() {
            node_bit(0)
        } else {
            m
        }
    }

    /// One generated machine state with a request against it.
    #[derive(Debug, Clone)]
    struct Case {
        state: MachineState,
        requested: Requested,
        reusable: Option<PodReusable>,
    }

    /// `n` nodes with 1-4Gi of memory and 0-2 1Gi hugepages each; up to 4
    /// prior allocations, each `(how its mask is chosen, node, mask bits,
    /// hugepages or memory, half-GiB units)`, mostly of the kubelet's
    /// shapes (a single node, a group of nodes without assignments, an
    /// existing group again), sometimes an arbitrary mask; sometimes a node
    /// left with a stale group and no assignment (a state only a restore
    /// can produce); a request of memory (and sometimes hugepages);
    /// sometimes reusable init-container memory.
    fn case() -> impl Strategy<Value = Case> {
        (1u32..=10)
            .prop_flat_map(|n| {
                (
                    Just(n),
                    proptest::collection::vec((1u64..=4, 0u64..3), n as usize),
                    proptest::collection::vec(
                        (
                            0u8..4,
                            0..n,
                            any::<u64>(),
                            proptest::bool::weighted(0.33),
                            0u64..4,
                        ),
                        0..5,
                    ),
                    proptest::option::weighted(0.125, (0..n, any::<u64>())),
                    (0u64..9, proptest::option::weighted(0.33, 0u64..4)),
                    proptest::option::weighted(
                        0.33,
                        proptest::collection::vec((any::<u64>(), 0u64..5), 1..=2),
                    ),
                )
            })
            .prop_map(|(n, sizes, allocs, stale, (mem, huge), reuse)| {
                let mut state: MachineState = sizes
                    .iter()
                    .enumerate()
                    .map(|(i, &(mem, pages))| {
                        let map = BTreeMap::from([
                            (MEMORY_KEY.to_owned(), table(mem * GB)),
                            (HUGE.to_owned(), table(pages * GB)),
                        ]);
                        let node = NodeState {
                            number_of_assignments: 0,
                            memory_map: map,
                            cells: node_bit(i as u32),
                        };
                        (id(i as u32), node)
                    })
                    .collect();
                for (kind, node, bits, huge, halves) in allocs {
                    let mask = match kind {
                        0 => node_bit(node),
                        1 => {
                            let m = state
                                .iter()
                                .filter(|(id, s)| {
                                    s.number_of_assignments == 0 && bits & (1 << id.get()) != 0
                                })
                                .fold(NumaMask::EMPTY, |m, (&id, _)| m.with(id));
                            if m.is_empty() {
                                continue;
                            }
                            m
                        }
                        2 => state[&id(node)].cells,
                        _ => mask_of(bits, n),
                    };
                    let resource = if huge { HUGE } else { MEMORY_KEY };
                    reserve(&mut state, mask, resource, halves * GB / 2);
                }
                if let Some((node, bits)) = stale {
                    if let Some(s) = state.get_mut(&id(node)) {
                        if s.number_of_assignments == 0 {
                            s.cells = s.cells.union(mask_of(bits, n));
                        }
                    }
                }
                let mut requested = Requested::from([(MEMORY_KEY.to_owned(), mem * GB / 2)]);
                if let Some(h) = huge {
                    requested.insert(HUGE.to_owned(), h * GB);
                }
                let reusable = reuse.map(|entries| {
                    entries
                        .into_iter()
                        .map(|(bits, halves)| {
                            let per = BTreeMap::from([(MEMORY_KEY.to_owned(), halves * GB / 2)]);
                            (mask_of(bits, n), per)
                        })
                        .collect()
                });
                Case {
                    state,
                    requested,
                    reusable,
                }
            })
    }

    fn hinter(c: &Case) -> Hinter<'_> {
        Hinter {
            state: &c.state,
            reusable: c.reusable.as_ref(),
            requested: &c.requested,
        }
    }

    fn expanded(h: &Hinter<'_>) -> Vec<TopologyHint> {
        match h.compact() {
            Ok(Some(c)) => {
                assert_eq!(c.validate(), Ok(()), "{c:?}");
                c.expand(&h.nodes())
            }
            Ok(None) => Vec::new(),
            Err(e) => panic!("compact: {e}"),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]

        /// The compact form stands for exactly the explicit list, after any
        /// prior allocations.
        #[test]
        fn compact_is_exactly_the_explicit_list_after_random_allocations(c in case()) {
            let h = hinter(&c);
            proptest::prop_assert_eq!(expanded(&h), h.explicit());
        }
    }

    /// The generator reaches the bounded compact form, and often: the
    /// property above is tested on it.
    #[test]
    fn generated_states_reach_the_bounded_form() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = case();
        let mut bounded = 0;
        for _ in 0..1000 {
            let c = strategy.new_tree(&mut runner).unwrap().current();
            if let Ok(Some(compact)) = hinter(&c).compact() {
                bounded += usize::from(!compact.within.is_empty());
            }
        }
        assert!(bounded > 300, "only {bounded} of 1000 bounded answers");
    }

    fn strings(c: &CompactHints) -> (Vec<String>, Vec<String>) {
        (
            c.minimal.iter().map(|m| m.to_string()).collect(),
            c.within.iter().map(|m| m.to_string()).collect(),
        )
    }

    #[test]
    fn group_rules_become_bounds() {
        // Four nodes of 2Gi; node 0 holds a single-node block, 2-3 a group.
        let mut state: MachineState = (0..4)
            .map(|id| {
                let map = BTreeMap::from([(MEMORY_KEY.to_owned(), table(2 * GB))]);
                let node = NodeState {
                    number_of_assignments: 0,
                    memory_map: map,
                    cells: node_bit(id),
                };
                (self::id(id), node)
            })
            .collect();
        reserve(&mut state, node_bit(0), MEMORY_KEY, GB);
        reserve(&mut state, node_bit(2).union(node_bit(3)), MEMORY_KEY, GB);
        let requested = Requested::from([(MEMORY_KEY.to_owned(), GB)]);
        let h = Hinter {
            state: &state,
            reusable: None,
            requested: &requested,
        };
        let c = h.compact().unwrap().unwrap();
        // 0 alone, 1 alone (no other unused node to grow with), 2-3 as a group.
        assert_eq!(
            strings(&c),
            (
                vec!["0".into(), "1".into(), "2-3".into()],
                vec!["0".into(), "1".into(), "2-3".into()]
            )
        );
        assert_eq!(c.preferred_width, 1);
        let got: Vec<String> = c
            .expand(&h.nodes())
            .iter()
            .map(topomgr_sdk::testkit::hint_string)
            .collect();
        assert_eq!(got, ["0:true", "1:true", "2-3:false"]);
        assert_eq!(c.expand(&h.nodes()), h.explicit());
        // 3Gi needs two nodes: only 2-3 (3Gi free) is left; 0-1 would be
        // one if node 0 were unused.
        let requested = Requested::from([(MEMORY_KEY.to_owned(), 3 * GB)]);
        let h = Hinter {
            state: &state,
            reusable: None,
            requested: &requested,
        };
        let c = h.compact().unwrap().unwrap();
        assert_eq!(strings(&c), (vec!["2-3".into()], vec!["2-3".into()]));
        assert_eq!(c.preferred_width, 2);
        assert_eq!(c.expand(&h.nodes()), h.explicit());
    }

    #[test]
    fn a_fresh_machine_keeps_the_unbounded_form() {
        let state: MachineState = (0..10)
            .map(|id| {
                let map = BTreeMap::from([(MEMORY_KEY.to_owned(), table(GB))]);
                let node = NodeState {
                    number_of_assignments: 0,
                    memory_map: map,
                    cells: node_bit(id),
                };
                (self::id(id), node)
            })
            .collect();
        let requested = Requested::from([(MEMORY_KEY.to_owned(), 3 * GB)]);
        let h = Hinter {
            state: &state,
            reusable: None,
            requested: &requested,
        };
        let c = h.compact().unwrap().unwrap();
        assert_eq!(c.within, Vec::<NumaMask>::new());
        assert_eq!(c.minimal.len(), 120);
        assert_eq!(c.minimal[0].to_string(), "0-2");
        assert_eq!(c.minimal[119].to_string(), "7-9");
        assert_eq!(c.preferred_width, 3);
        assert_eq!(c.expand(&h.nodes()), h.explicit());
    }
}
