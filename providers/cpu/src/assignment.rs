//! The kubelet's `takeByTopology`: which free CPUs to hand out, packed
//! (`takeByTopologyNUMAPacked`) or distributed evenly over NUMA nodes
//! (`takeByTopologyNUMADistributed`).
//!
//! Packed order, as the kubelet's CPU accumulator:
//! 1. whole NUMA nodes, then whole sockets (sockets first when a socket holds
//!    several NUMA nodes), when at least that many CPUs are still needed;
//! 2. with `prefer-align-cpus-by-uncorecache`: whole uncore (L3) caches, then
//!    the first uncore cache whose lowest free cores hold exactly the rest,
//!    both passes in one cache order fixed before either;
//! 3. whole cores (skipped with `distribute-cpus-across-cores`);
//! 4. single threads, filling partly used cores first.
//!
//! Every candidate list is sorted by the kubelet's rule: fewest free CPUs
//! first, then lowest id, nested NUMA node > socket > core (or socket >
//! NUMA node > core when sockets are the larger unit).

use std::collections::{BTreeMap, BTreeSet};

use crate::topology::{CpuTopology, Cpus, Level};
use topomgr_sdk::NumaMask;

/// How single threads are picked in the last step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortingStrategy {
    /// Fill cores (the default).
    Packed,
    /// Spread over cores (`distribute-cpus-across-cores`).
    Spread,
}

/// Why a take failed (the kubelet's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TakeError {
    /// Fewer CPUs are available than requested.
    #[error("not enough cpus available to satisfy request: requested={requested}, available={available}")]
    NotEnough {
        /// CPUs requested.
        requested: usize,
        /// CPUs available.
        available: usize,
    },
    /// The accumulator ran out of candidates (uneven topologies).
    #[error("failed to allocate cpus")]
    Failed,
    /// The distributed algorithm's bookkeeping did not add up.
    #[error("accounting error, {what} CPUs allocated, remaining: {remaining}")]
    Accounting {
        /// "not enough" or "too many".
        what: &'static str,
        /// CPUs still needed (negative: taken too many).
        remaining: i64,
    },
}

struct Accumulator<'t> {
    topo: &'t CpuTopology,
    avail: Cpus,
    needed: i64,
    result: Cpus,
    numa_first: bool,
    strategy: SortingStrategy,
}

impl<'t> Accumulator<'t> {
    fn new(topo: &'t CpuTopology, available: &Cpus, num: usize, strategy: SortingStrategy) -> Self {
        let avail = available
            .iter()
            .copied()
            .filter(|c| topo.info(*c).is_some())
            .collect();
        Accumulator {
            topo,
            avail,
            needed: num as i64,
            result: Cpus::new(),
            numa_first: topo.num_sockets() >= topo.num_numa_nodes(),
            strategy,
        }
    }

    fn take(&mut self, cpus: &Cpus) {
        self.result.extend(cpus.iter().copied());
        for c in cpus {
            self.avail.remove(c);
        }
        self.needed -= cpus.len() as i64;
        tracing::trace!(taken = ?cpus, needed = self.needed, "cpu accumulator take");
    }

    fn needs_at_least(&self, n: usize) -> bool {
        self.needed >= n as i64
    }

    fn is_satisfied(&self) -> bool {
        self.needed < 1
    }

    fn is_failed(&self) -> bool {
        self.needed > self.avail.len() as i64
    }

    /// Sorts group ids by free CPUs in the group (ascending), then id.
    fn sorted(&self, ids: impl IntoIterator<Item = u32>, level: Level) -> Vec<u32> {
        let counts = self.topo.count_by(&self.avail, level);
        let mut v: Vec<u32> = ids.into_iter().collect();
        v.sort_by_key(|id| (counts.get(id).copied().unwrap_or(0), *id));
        v
    }

    /// outer id -> inner ids, over the free CPUs.
    fn children(&self, outer: Level, inner: Level) -> BTreeMap<u32, BTreeSet<u32>> {
        let mut m: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for c in &self.avail {
            if let Some(i) = self.topo.info(*c) {
                m.entry(i.at(outer)).or_default().insert(i.at(inner));
            }
        }
        m
    }

    fn nested(&self, outer_order: Vec<u32>, outer: Level, inner: Level) -> Vec<u32> {
        let kids = self.children(outer, inner);
        let mut out = Vec::new();
        for o in outer_order {
            if let Some(k) = kids.get(&o) {
                out.extend(self.sorted(k.iter().copied(), inner));
            }
        }
        out
    }

    fn sorted_numas(&self) -> Vec<u32> {
        if self.numa_first {
            self.sorted(self.topo.groups_of(&self.avail, Level::Numa), Level::Numa)
        } else {
            self.nested(self.sorted_sockets(), Level::Socket, Level::Numa)
        }
    }

    fn sorted_sockets(&self) -> Vec<u32> {
        if self.numa_first {
            self.nested(self.sorted_numas(), Level::Numa, Level::Socket)
        } else {
            self.sorted(
                self.topo.groups_of(&self.avail, Level::Socket),
                Level::Socket,
            )
        }
    }

    fn sorted_cores(&self) -> Vec<u32> {
        if self.numa_first {
            self.nested(self.sorted_sockets(), Level::Socket, Level::Core)
        } else {
            self.nested(self.sorted_numas(), Level::Numa, Level::Core)
        }
    }

    /// Uncore caches by NUMA node order, then fewest free CPUs; a cache
    /// that spans several NUMA nodes is listed once, where it first
    /// appears (kubernetes #141026).
    fn sorted_uncores(&self) -> Vec<u32> {
        let mut seen = BTreeSet::new();
        self.nested(self.sorted_numas(), Level::Numa, Level::Uncore)
            .into_iter()
            .filter(|u| seen.insert(*u))
            .collect()
    }

    /// Free CPUs grouped by `level`, each group ascending.
    fn cpus_by(&self, level: Level) -> BTreeMap<u32, Vec<u32>> {
        let mut m: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for c in &self.avail {
            if let Some(i) = self.topo.info(*c) {
                m.entry(i.at(level)).or_default().push(*c);
            }
        }
        m
    }

    /// The kubelet's `sortAvailableCPUsPacked`: by core order, ids ascending within a core.
    fn cpus_packed(&self) -> Vec<u32> {
        let by_core = self.cpus_by(Level::Core);
        self.sorted_cores()
            .into_iter()
            .flat_map(|core| by_core.get(&core).cloned().unwrap_or_default())
            .collect()
    }

    /// The kubelet's `sortAvailableCPUsSpread` (since kubernetes #140766):
    /// sockets in socket order; within a socket, round robin over its cores
    /// in core-id order (the first free thread of every core, then the
    /// second, ...), threads ascending within a core. Spreading follows the
    /// topology, not the CPU numbering (siblings may have adjacent ids).
    fn cpus_spread(&self) -> Vec<u32> {
        let by_core = self.cpus_by(Level::Core);
        let cores = self.children(Level::Socket, Level::Core);
        let mut out = Vec::with_capacity(self.avail.len());
        for socket in self.sorted_sockets() {
            let Some(cores) = cores.get(&socket) else {
                continue;
            };
            let threads: Vec<&Vec<u32>> = cores.iter().filter_map(|c| by_core.get(c)).collect();
            let deepest = threads.iter().map(|t| t.len()).max().unwrap_or(0);
            for i in 0..deepest {
                out.extend(threads.iter().filter_map(|t| t.get(i).copied()));
            }
        }
        out
    }

    /// A group is free when every CPU it has in the topology is available.
    ///
    /// The group's own size is the measure, never a machine-wide average
    /// (`CPUsPerCore`, `CPUsPerSocket`): on hybrid machines (two-thread
    /// P-cores beside one-thread E-cores) the average is 1 and a P-core
    /// with one thread reserved would pass for free (kubernetes #140495,
    /// fixed upstream by #140498).
    fn is_free(&self, level: Level, id: u32, have: usize) -> bool {
        have > 0 && have == self.topo.size_of(level, id)
    }

    /// Takes every free group at `level`, in `order`, while at least a whole group is needed.
    fn take_full(&mut self, order: Vec<u32>, level: Level) {
        let counts = self.topo.count_by(&self.avail, level);
        let free: Vec<u32> = order
            .into_iter()
            .filter(|id| self.is_free(level, *id, counts.get(id).copied().unwrap_or(0)))
            .collect();
        for id in free {
            // A free group is wholly available; taking only its available
            // CPUs keeps an unavailable CPU out whatever `is_free` says.
            let cpus = self.topo.cpus_in(&self.avail, level, id);
            if !self.needs_at_least(cpus.len()) {
                continue;
            }
            tracing::debug!(?level, id, "takeByTopology: claiming a whole group");
            self.take(&cpus);
        }
    }

    fn take_full_numa_nodes(&mut self) {
        let order = self.sorted_numas();
        self.take_full(order, Level::Numa);
    }

    fn take_full_sockets(&mut self) {
        let order = self.sorted_sockets();
        self.take_full(order, Level::Socket);
    }

    fn take_full_cores(&mut self) {
        let order = self.sorted_cores();
        self.take_full(order, Level::Core);
    }

    /// Takes the rest from one uncore cache when its lowest free cores
    /// hold exactly what is needed (the kubelet's `takePartialUncore`).
    ///
    /// The cores are the cache's `ceil(needed / CPUsPerCore)` lowest free
    /// cores, or all of its free cores when it has fewer (the kubelet's
    /// `CoresNeededInUncoreCache`, kubernetes #126750): on a machine whose
    /// cores have uneven thread counts, fewer cores than that can still
    /// hold the request. For an odd request on an SMT machine the highest
    /// free CPU of those cores is left out (kubernetes #131850). The cache
    /// is claimed only when the CPUs then equal what is needed. Partly
    /// free cores are not preferred or skipped: the fix proposed for that
    /// (kubernetes #137315, #137319, #137360) was not merged.
    fn take_partial_uncore(&mut self, uncore: u32) {
        let per_core = self.topo.cpus_per_core();
        if per_core == 0 || self.needed < 1 {
            return;
        }
        let needed = self.needed as usize;
        let cores_needed = needed.div_ceil(per_core);
        let chosen: BTreeSet<u32> = self
            .avail
            .iter()
            .filter_map(|c| self.topo.info(*c))
            .filter(|i| i.uncore == uncore)
            .map(|i| i.core)
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .take(cores_needed)
            .collect();
        let mut free: Vec<u32> = self
            .avail
            .iter()
            .copied()
            .filter(|c| self.topo.info(*c).is_some_and(|i| chosen.contains(&i.core)))
            .collect();
        if !needed.is_multiple_of(2) && per_core > 1 && free.len() > needed {
            free.truncate(free.len() - 1);
        }
        if free.len() == needed {
            tracing::debug!(uncore, cpus = ?free, "takeByTopology: claiming part of an uncore cache");
            let set: Cpus = free.into_iter().collect();
            self.take(&set);
        }
    }

    /// The kubelet's `takeUncoreCache`: the caches are ordered once, before
    /// anything is taken, and that order serves both passes: whole free
    /// caches while at least a cache's worth is needed, then the first
    /// cache that holds the rest (kubernetes #141026; re-sorting after the
    /// first pass would let a NUMA node emptied by it jump ahead).
    fn take_uncore_caches(&mut self) {
        let order = self.sorted_uncores();
        self.take_full(order.clone(), Level::Uncore);
        if self.is_satisfied() {
            return;
        }
        for u in order {
            self.take_partial_uncore(u);
            if self.is_satisfied() {
                return;
            }
        }
    }

    fn take_remaining(&mut self) {
        let order = match self.strategy {
            SortingStrategy::Packed => self.cpus_packed(),
            SortingStrategy::Spread => self.cpus_spread(),
        };
        for c in order {
            self.take(&Cpus::from([c]));
            if self.is_satisfied() {
                return;
            }
        }
    }
}

/// The kubelet's `takeByTopologyNUMAPacked`: `num` CPUs from `available`.
pub fn take_packed(
    topo: &CpuTopology,
    available: &Cpus,
    num: usize,
    strategy: SortingStrategy,
    prefer_uncore: bool,
) -> Result<Cpus, TakeError> {
    let mut acc = Accumulator::new(topo, available, num, strategy);
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    if acc.is_failed() {
        return Err(TakeError::NotEnough {
            requested: num,
            available: available.len(),
        });
    }
    if acc.numa_first {
        acc.take_full_numa_nodes();
    } else {
        acc.take_full_sockets();
    }
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    if acc.numa_first {
        acc.take_full_sockets();
    } else {
        acc.take_full_numa_nodes();
    }
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    if prefer_uncore {
        acc.take_uncore_caches();
        if acc.is_satisfied() {
            return Ok(acc.result);
        }
    }
    if strategy != SortingStrategy::Spread {
        acc.take_full_cores();
        if acc.is_satisfied() {
            return Ok(acc.result);
        }
    }
    acc.take_remaining();
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    Err(TakeError::Failed)
}

/// Calls `f` on every `k`-subset of `items` in lexicographic order of
/// positions; `f` returns true to stop.
fn combinations(items: &[u32], k: usize, f: &mut dyn FnMut(&[u32]) -> bool) {
    fn rec(
        items: &[u32],
        k: usize,
        start: usize,
        acc: &mut Vec<u32>,
        f: &mut dyn FnMut(&[u32]) -> bool,
    ) -> bool {
        if k == 0 {
            return f(acc);
        }
        if items.len() < k {
            return false;
        }
        for i in start..=items.len() - k {
            acc.push(items[i]);
            let stop = rec(items, k - 1, i + 1, acc, f);
            acc.pop();
            if stop {
                return true;
            }
        }
        false
    }
    let mut acc = Vec::with_capacity(k);
    rec(items, k, 0, &mut acc, f);
}

/// The kubelet's standard deviation, rounded to 3 decimals (mean too).
fn standard_deviation(xs: &[i64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let n = xs.len() as f64;
    let mean = (xs.iter().map(|&x| x as f64).sum::<f64>() / n * 1000.0).round() / 1000.0;
    let var = xs
        .iter()
        .map(|&x| (x as f64 - mean) * (x as f64 - mean))
        .sum::<f64>()
        / n;
    (var.sqrt() * 1000.0).round() / 1000.0
}

/// How [`take_distributed`] spreads CPUs over NUMA nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Distribution {
    /// CPUs handed out together (threads per core with `full-pcpus-only`, else 1).
    pub group: usize,
    /// `align-by-socket`: a NUMA-node combination inside one socket beats
    /// any cross-socket one, whatever their balance (kubernetes #139778).
    pub align_by_socket: bool,
    /// The NUMA nodes of the merged hint: the search starts at this many
    /// nodes when that is feasible, so a multi-node hint chosen for devices
    /// is not shrunk back (kubernetes #139456); 0 when there is no hint.
    pub min_numas_from_hint: usize,
}

impl Distribution {
    /// Groups of `group` CPUs, no socket preference, no hint.
    pub fn groups_of(group: usize) -> Self {
        Distribution {
            group,
            align_by_socket: false,
            min_numas_from_hint: 0,
        }
    }
}

/// The kubelet's `takeByTopologyNUMADistributed`: spread `num` CPUs evenly,
/// in groups of `group` CPUs, over the fewest NUMA nodes that balance best
/// (inside one socket first with `align-by-socket`); falls back to
/// [`take_packed`].
pub fn take_distributed(
    topo: &CpuTopology,
    available: &Cpus,
    num: usize,
    how: Distribution,
    strategy: SortingStrategy,
) -> Result<Cpus, TakeError> {
    let group = how.group.max(1);
    if !num.is_multiple_of(group) {
        return take_packed(topo, available, num, strategy, false);
    }
    let mut acc = Accumulator::new(topo, available, num, strategy);
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    if acc.is_failed() {
        return Err(TakeError::NotEnough {
            requested: num,
            available: available.len(),
        });
    }
    let numas = acc.sorted_numas();
    let free_on: BTreeMap<u32, usize> = acc.topo.count_by(&acc.avail, Level::Numa);
    let free = |n: u32| free_on.get(&n).copied().unwrap_or(0);

    // rangeNUMANodesNeededToSatisfy
    let num_nodes = topo.num_numa_nodes().max(1);
    let groups_total = (topo.num_cpus().max(1) - 1) / group + 1;
    let groups_per_node = (groups_total - 1) / num_nodes + 1;
    let groups_needed = (num - 1) / group + 1;
    let mut min_numas = (groups_needed - 1) / groups_per_node + 1;
    let max_numas = groups_needed.min(numas.len());
    if how.min_numas_from_hint > min_numas && how.min_numas_from_hint <= max_numas {
        min_numas = how.min_numas_from_hint;
    }
    let same_socket = |combo: &[u32]| {
        how.align_by_socket
            && topo
                .sockets_in_numa_nodes(
                    // Group keys of NUMA nodes are their ids.
                    NumaMask::from_nodes(combo.iter().copied()).unwrap_or_default(),
                )
                .len()
                == 1
    };
    // A node can give at most its free CPUs, in whole groups.
    let capped = |distribution: usize, combo: &[u32]| {
        combo
            .iter()
            .fold(distribution, |d, n| d.min(free(*n) / group * group))
    };

    for k in min_numas..=max_numas {
        let mut best_balance = f64::MAX;
        let mut best_remainder: Option<Vec<u32>> = None;
        let mut best_combo: Option<Vec<u32>> = None;
        let mut best_in_one_socket = false;
        combinations(&numas, k, &mut |combo| {
            if best_balance == 0.0 && (!how.align_by_socket || best_in_one_socket) {
                return true;
            }
            let total: usize = combo.iter().map(|n| free(*n)).sum();
            if total < num {
                return false;
            }
            let groups: usize = combo.iter().map(|n| free(*n) / group).sum();
            if groups * group < num {
                return false;
            }
            let mut distribution = (num / combo.len() / group) * group;
            if how.align_by_socket {
                distribution = capped(distribution, combo);
            }
            if combo.iter().any(|n| free(*n) < distribution) {
                return false;
            }
            let mut after: BTreeMap<u32, i64> =
                numas.iter().map(|n| (*n, free(*n) as i64)).collect();
            for n in combo {
                if let Some(v) = after.get_mut(n) {
                    *v -= distribution as i64;
                }
            }
            let remainder = num as i64 - (distribution * combo.len()) as i64;
            let remainder_combo: Vec<u32> = combo
                .iter()
                .copied()
                .filter(|n| after.get(n).copied().unwrap_or(0) >= group as i64)
                .collect();
            let mut best_local = f64::MAX;
            let mut best_local_remainder: Option<Vec<u32>> = None;
            if remainder == 0 {
                best_local = standard_deviation(&after.values().copied().collect::<Vec<_>>());
            }
            let mut j = remainder_combo.len();
            while remainder > 0 && j >= 1 {
                combinations(&remainder_combo, j, &mut |subset| {
                    let mut left = remainder;
                    let mut after = after.clone();
                    let groups: i64 = subset
                        .iter()
                        .map(|n| after.get(n).copied().unwrap_or(0) / group as i64)
                        .sum();
                    if groups * (group as i64) < left {
                        return false;
                    }
                    while left > 0 {
                        for n in subset {
                            if left == 0 {
                                break;
                            }
                            let v = after.entry(*n).or_insert(0);
                            if *v < group as i64 {
                                continue;
                            }
                            *v -= group as i64;
                            left -= group as i64;
                        }
                    }
                    let balance = standard_deviation(&after.values().copied().collect::<Vec<_>>());
                    if balance < best_local {
                        best_local = balance;
                        best_local_remainder = Some(subset.to_vec());
                    }
                    false
                });
                j -= 1;
            }
            let in_one_socket = same_socket(combo);
            let better = if how.align_by_socket && in_one_socket != best_in_one_socket {
                in_one_socket
            } else {
                best_local < best_balance
            };
            if better {
                best_balance = best_local;
                best_remainder = best_local_remainder;
                best_combo = Some(combo.to_vec());
                best_in_one_socket = in_one_socket;
            }
            false
        });
        let Some(combo) = best_combo else {
            continue;
        };
        // Past the choice of nodes: never ask a node for more than it has.
        let distribution = capped((num / combo.len() / group) * group, &combo);
        for n in &combo {
            let on_node = topo.cpus_in(&acc.avail, Level::Numa, *n);
            let cpus =
                take_packed(topo, &on_node, distribution, strategy, false).unwrap_or_default();
            acc.take(&cpus);
        }
        let mut remainder = num as i64 - (distribution * combo.len()) as i64;
        let remainder_nodes = best_remainder.unwrap_or_default();
        while remainder > 0 {
            let before = remainder;
            for n in &remainder_nodes {
                if remainder == 0 {
                    break;
                }
                let on_node = topo.cpus_in(&acc.avail, Level::Numa, *n);
                if on_node.len() < group {
                    continue;
                }
                let cpus = take_packed(topo, &on_node, group, strategy, false).unwrap_or_default();
                acc.take(&cpus);
                remainder -= group as i64;
            }
            if remainder == before {
                break;
            }
        }
        if acc.needed > 0 {
            return Err(TakeError::Accounting {
                what: "not enough",
                remaining: acc.needed,
            });
        }
        if acc.needed < 0 {
            return Err(TakeError::Accounting {
                what: "too many",
                remaining: acc.needed,
            });
        }
        return Ok(acc.result);
    }
    take_packed(topo, available, num, strategy, false)
}

/// The wholly free groups at `level` in the accumulator's order (the
/// kubelet's `freeNUMANodes`, `freeSockets`, `freeCores`), for tests.
#[cfg(test)]
pub(crate) fn free_groups(topo: &CpuTopology, available: &Cpus, level: Level) -> Vec<u32> {
    let acc = Accumulator::new(topo, available, 0, SortingStrategy::Packed);
    let order = match level {
        Level::Numa => acc.sorted_numas(),
        Level::Socket => acc.sorted_sockets(),
        Level::Core => acc.sorted_cores(),
        Level::Uncore => acc.sorted_uncores(),
    };
    let counts = topo.count_by(&acc.avail, level);
    order
        .into_iter()
        .filter(|id| acc.is_free(level, *id, counts.get(id).copied().unwrap_or(0)))
        .collect()
}

/// The order in which single threads would be taken from `available` (the
/// kubelet's `freeCPUs`), for tests and diagnostics.
pub fn packed_cpu_order(topo: &CpuTopology, available: &Cpus) -> Vec<u32> {
    Accumulator::new(topo, available, 0, SortingStrategy::Packed).cpus_packed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testmachines::{
        adjacent_siblings, dual_socket_ht, dual_socket_multi_numa_ht, hybrid, layered,
        single_socket_ht,
    };
    use topomgr_sdk::CpuSet;

    fn topo(m: &topomgr_sdk::Machine) -> CpuTopology {
        CpuTopology::from_machine(m)
    }

    fn set(s: &str) -> Cpus {
        CpuSet::parse(s)
            .map(|c| c.iter().collect())
            .unwrap_or_default()
    }

    fn show(c: &Cpus) -> String {
        crate::topology::to_cpuset(c).to_string()
    }

    fn packed(t: &CpuTopology, avail: &str, n: usize) -> String {
        match take_packed(t, &set(avail), n, SortingStrategy::Packed, false) {
            Ok(c) => show(&c),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn free_cpu_order_like_the_kubelet() {
        let single = topo(&single_socket_ht());
        assert_eq!(packed_cpu_order(&single, &set("3-7")), vec![4, 5, 6, 3, 7]);
        assert_eq!(
            packed_cpu_order(&single, &set("0-7")),
            vec![0, 4, 1, 5, 2, 6, 3, 7]
        );
        let dual = topo(&dual_socket_ht());
        assert_eq!(
            packed_cpu_order(&dual, &set("0-11")),
            vec![0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]
        );
        assert_eq!(
            packed_cpu_order(&dual, &set("1-11")),
            vec![6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]
        );
        assert_eq!(
            packed_cpu_order(&dual, &set("1-5,7-11")),
            vec![2, 8, 4, 10, 1, 7, 3, 9, 5, 11]
        );
    }

    #[test]
    fn packed_takes_sockets_cores_then_threads() {
        let dual = topo(&dual_socket_ht());
        assert_eq!(packed(&dual, "0-11", 1), "0");
        assert_eq!(packed(&dual, "0-11", 6), "0,2,4,6,8,10");
        assert_eq!(packed(&dual, "1-11", 6), "1,3,5,7,9,11");
        // Whole socket 1 (6 CPUs), then a whole core of socket 0 with the fewest free CPUs.
        assert_eq!(packed(&dual, "1-11", 8), "1-3,5,7-9,11");
        // Partly used core 0 (CPU 6) is filled first when a single thread is needed.
        assert_eq!(packed(&dual, "1-11", 1), "6");
        assert_eq!(packed(&dual, "0-11", 12), "0-11");
        assert_eq!(
            packed(&dual, "0-3", 5),
            "not enough cpus available to satisfy request: requested=5, available=4"
        );
        assert_eq!(packed(&dual, "0-3", 0), "");
    }

    #[test]
    fn packed_takes_whole_numa_nodes_on_multi_numa_sockets() {
        let m = topo(&dual_socket_multi_numa_ht());
        // Sockets first (2 NUMA nodes per socket): 40 CPUs = socket 0.
        assert_eq!(packed(&m, "0-79", 40), "0-19,40-59");
        // 20 CPUs = NUMA node 0.
        assert_eq!(packed(&m, "0-79", 20), "0-9,40-49");
        // NUMA node 0 partly used: node 1 is whole.
        assert_eq!(packed(&m, "1-79", 20), "10-19,50-59");
        // 4 CPUs on a partly used socket 0: fewest free first, whole cores.
        assert_eq!(packed(&m, "2-79", 4), "2-3,42-43");
    }

    #[test]
    fn spread_takes_one_thread_per_core_first() {
        let m = topo(&adjacent_siblings(1, 4));
        let got = take_packed(&m, &set("0-7"), 4, SortingStrategy::Spread, false).unwrap();
        // One thread of every core first, though siblings have adjacent ids
        // (kubernetes #140688/#140766).
        assert_eq!(show(&got), "0,2,4,6");
        let x86 = topo(&layered(1, 1, 4, 2));
        let got = take_packed(&x86, &set("0-7"), 4, SortingStrategy::Spread, false).unwrap();
        assert_eq!(show(&got), "0-3");
        let packed = take_packed(&x86, &set("0-7"), 4, SortingStrategy::Packed, false).unwrap();
        assert_eq!(show(&packed), "0-1,4-5");
    }

    #[test]
    fn uncore_cache_alignment_prefers_one_l3() {
        // 1 socket, 1 NUMA node, 16 cores of 2 threads, 4 L3 caches of 4 cores.
        let mut m = layered(1, 1, 16, 2);
        for c in &mut m.cpus {
            c.l3 = Some(c.core / 4);
        }
        let t = topo(&m);
        // CPUs 0 and 16 (core 0) are taken: cache 0 has 3 free cores.
        let avail = set("1-15,17-31");
        let with = take_packed(&t, &avail, 8, SortingStrategy::Packed, true).unwrap();
        // A whole free uncore cache (cache 1: cores 4-7).
        assert_eq!(show(&with), "4-7,20-23");
        let without = take_packed(&t, &avail, 8, SortingStrategy::Packed, false).unwrap();
        // Plain packing takes whole cores in socket order: cores 1-4.
        assert_eq!(show(&without), "1-4,17-20");
        // 6 CPUs fit in cache 0's 3 free cores.
        let six = take_packed(&t, &avail, 6, SortingStrategy::Packed, true).unwrap();
        assert_eq!(show(&six), "1-3,17-19");
        // Odd request: 3 CPUs from 2 cores of cache 0, dropping the highest id.
        let three = take_packed(&t, &avail, 3, SortingStrategy::Packed, true).unwrap();
        assert_eq!(show(&three), "1-2,17");
    }

    #[test]
    fn uncore_cache_order_is_fixed_before_the_whole_cache_pass() {
        use crate::testmachines::{cpu_l3, finish};
        // Node 0 (socket 0): cache 0 = CPUs 0-3, cache 1 = CPUs 4-9;
        // node 1 (socket 1): cache 2 = CPUs 10-15; one thread per core.
        let cpus = (0..16)
            .map(|id| match id {
                0..=3 => cpu_l3(id, 0, id, 0, 0),
                4..=9 => cpu_l3(id, 0, id, 0, 1),
                _ => cpu_l3(id, 1, id, 1, 2),
            })
            .collect();
        let t = topo(&finish(cpus, 2));
        // Free: all of cache 0, 3 CPUs of cache 1, 4 of cache 2. Node 1
        // (4 free) sorts before node 0 (7 free): caches 2, 1, 0. The whole
        // pass takes cache 0; the partial pass keeps that order and takes 3
        // CPUs of cache 2, as the kubelet does. Sorting again after the
        // whole pass would put node 0 (3 free now) first and take cache 1.
        let got = take_packed(&t, &set("0-3,7-9,12-15"), 7, SortingStrategy::Packed, true);
        assert_eq!(show(&got.unwrap()), "0-3,12-14");
    }

    #[test]
    fn a_partial_uncore_cache_with_fewer_cores_than_needed_is_taken_when_its_cpus_fit() {
        use crate::testmachines::{cpu_l3, finish};
        // Cache 0: two-thread cores 0, 2, 4 (CPUs 0-5); cache 1: one-thread
        // cores 6-11. 12 CPUs in 9 cores: CPUsPerCore is 1.
        let cpus = (0..12)
            .map(|id| {
                if id < 6 {
                    cpu_l3(id, 0, id - id % 2, 0, 0)
                } else {
                    cpu_l3(id, 0, id, 0, 1)
                }
            })
            .collect();
        let t = topo(&finish(cpus, 1));
        assert_eq!(t.cpus_per_core(), 1);
        // 5 CPUs "need" 5 cores; cache 0 has 3 free cores (CPU 4 is taken)
        // holding exactly 5 CPUs: the kubelet's CoresNeededInUncoreCache
        // gives all 3 and the cache is claimed.
        let got = take_packed(&t, &set("0-3,5-11"), 5, SortingStrategy::Packed, true);
        assert_eq!(show(&got.unwrap()), "0-3,5");
        // 4 CPUs: the 3 cores hold 5, not 4: cache 1's lowest 4 cores.
        let got = take_packed(&t, &set("0-3,5-11"), 4, SortingStrategy::Packed, true);
        assert_eq!(show(&got.unwrap()), "6-9");
    }

    #[test]
    fn distributed_balances_over_numa_nodes() {
        let m = topo(&dual_socket_multi_numa_ht());
        let all = set("0-79");
        // 4 CPUs fit one NUMA node: no distribution needed.
        let got = take_distributed(
            &m,
            &all,
            4,
            Distribution::groups_of(1),
            SortingStrategy::Packed,
        )
        .unwrap();
        assert_eq!(show(&got), "0-1,40-41");
        // 24 CPUs need 2 nodes: 12 from each of nodes 0 and 1.
        let got = take_distributed(
            &m,
            &all,
            24,
            Distribution::groups_of(1),
            SortingStrategy::Packed,
        )
        .unwrap();
        assert_eq!(show(&got), "0-5,10-15,40-45,50-55");
        // Odd request with groups of 2 falls back to packing.
        let got = take_distributed(
            &m,
            &all,
            3,
            Distribution::groups_of(2),
            SortingStrategy::Packed,
        )
        .unwrap();
        assert_eq!(show(&got), "0-1,40");
    }

    #[test]
    fn distributed_remainder_goes_where_balance_is_best() {
        let m = topo(&dual_socket_multi_numa_ht());
        // Node 0 has 20 free, node 1 has 18 free (CPUs 10 and 11 taken).
        let avail = set("0-9,12-79");
        let got = take_distributed(
            &m,
            &avail,
            25,
            Distribution::groups_of(1),
            SortingStrategy::Packed,
        )
        .unwrap();
        // Nodes 0 and 2 leave the most even free counts (18, 7, 8, 20 after
        // 12 + 12 and the remainder CPU from node 0).
        assert_eq!(got.len(), 25);
        let on = |n: u32| m.cpus_in(&got, Level::Numa, n).len();
        assert_eq!((on(0), on(1), on(2), on(3)), (13, 0, 12, 0));
    }

    #[test]
    fn hybrid_machine_never_takes_a_reserved_sibling() {
        // kubernetes #140495: 8 two-thread P-cores (CPUs 0-15) and 12
        // one-thread E-cores (16-27), CPU 0 reserved. CPUsPerCore is
        // 28 / 20 = 1, so P-core 0 with only CPU 1 free looked "free".
        let h = topo(&hybrid(8, 12));
        assert_eq!(h.cpus_per_core(), 1);
        assert_eq!(packed(&h, "1-27", 2), "16-17");
        // Whole P-cores are taken as whole cores once E-cores run out.
        assert_eq!(packed(&h, "1-15", 2), "2-3");
        assert_eq!(packed(&h, "1-15", 3), "1-3");
        // Distributed take on one NUMA node falls back to the same packing.
        let got = take_distributed(
            &h,
            &set("1-27"),
            2,
            Distribution::groups_of(1),
            SortingStrategy::Packed,
        )
        .unwrap();
        assert_eq!(show(&got), "16-17");
        // A NUMA node (= socket) with one CPU missing is not free: node 0 is.
        let dual = topo(&dual_socket_ht());
        assert_eq!(packed(&dual, "0-10", 6), "0,2,4,6,8,10");
    }

    /// A machine of `cores` cores on `nodes` NUMA nodes (one socket each),
    /// core `k` having `threads[k]` threads (ids dense, siblings adjacent).
    fn uneven(nodes: u32, threads: &[u32]) -> topomgr_sdk::Machine {
        let per_node = (threads.len() as u32).div_ceil(nodes.max(1)).max(1);
        let mut cpus = Vec::new();
        let mut id = 0;
        for (k, t) in threads.iter().enumerate() {
            let core = id;
            let numa = (k as u32 / per_node).min(nodes.max(1) - 1);
            for _ in 0..*t {
                cpus.push(crate::testmachines::cpu_l3(id, numa, core, numa, numa));
                id += 1;
            }
        }
        crate::testmachines::finish(cpus, nodes.max(1))
    }

    proptest::proptest! {
        /// Whatever the machine (uneven threads per core, any free set),
        /// every take hands out exactly the CPUs asked for, all of them
        /// from the available set.
        #[test]
        fn takes_stay_inside_the_available_set(
            nodes in 1u32..4,
            threads in proptest::collection::vec(1u32..5, 1..24),
            holes in proptest::collection::vec(proptest::bool::weighted(0.3), 96),
            want in 0usize..96,
            group in 1usize..3,
            spread in proptest::bool::ANY,
            uncore in proptest::bool::ANY,
        ) {
            let t = topo(&uneven(nodes, &threads));
            let avail: Cpus = t.all_cpus().into_iter().filter(|c| !holes[*c as usize % holes.len()]).collect();
            let n = want % (t.num_cpus() + 1);
            let strategy = if spread { SortingStrategy::Spread } else { SortingStrategy::Packed };
            for r in [
                take_packed(&t, &avail, n, strategy, uncore && !spread),
                take_distributed(&t, &avail, n, Distribution { group, align_by_socket: uncore, min_numas_from_hint: want % 4 }, strategy),
            ] {
                match r {
                    Ok(got) => {
                        proptest::prop_assert_eq!(got.len(), n);
                        proptest::prop_assert!(got.is_subset(&avail), "took {:?} outside {:?}", got, avail);
                    }
                    Err(e) => proptest::prop_assert!(n > avail.len() || matches!(e, TakeError::Accounting { .. }), "{e}"),
                }
            }
        }
    }

    #[test]
    fn distributed_honours_the_hint_width_and_socket_alignment() {
        let m = topo(&dual_socket_multi_numa_ht());
        let all = set("0-79");
        let hinted = |min: usize, socket: bool, avail: &Cpus, n: usize, group: usize| {
            let how = Distribution {
                group,
                align_by_socket: socket,
                min_numas_from_hint: min,
            };
            show(&take_distributed(&m, avail, n, how, SortingStrategy::Packed).unwrap())
        };
        // kubernetes #139456: a 4-node hint spreads 8 CPUs over 4 nodes
        // instead of packing them on one.
        assert_eq!(hinted(0, false, &all, 8, 1), "0-3,40-43");
        assert_eq!(hinted(4, false, &all, 8, 1), "0,10,20,30,40,50,60,70");
        assert_eq!(hinted(2, false, &all, 8, 1), "0-1,10-11,40-41,50-51");
        // A hint wider than the request can use is ignored.
        assert_eq!(hinted(4, false, &all, 2, 2), "0,40");
        // kubernetes #139778: nodes 0 (20 free) and 1 (10 free) share socket
        // 0; node 2 (20 free) is on socket 1, node 3 is full. Nodes 0 and 2
        // balance best, but align-by-socket keeps to socket 0, giving node 1
        // all it has and node 0 the rest.
        let avail = set("0-14,20-29,40-54,60-69");
        assert_eq!(hinted(0, false, &avail, 24, 2), "0-5,20-25,40-45,60-65");
        assert_eq!(hinted(0, true, &avail, 24, 2), "0-6,10-14,40-46,50-54");
    }

    #[test]
    fn standard_deviation_is_rounded_like_the_kubelet() {
        assert_eq!(standard_deviation(&[1, 2, 3, 4]), 1.118);
        assert_eq!(standard_deviation(&[5, 5]), 0.0);
    }
}
