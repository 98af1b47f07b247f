//! go-gpuallocator's best-effort choice in bounded time.
//!
//! Upstream (`bestEffortPolicy.Allocate`) pads the available list with
//! `size - n % size` empty slots, enumerates every partition of it into sets
//! of `size` (the padding all in one set), keeps the first partition in its
//! enumeration order with the highest total score among those with an
//! unpadded set holding every required GPU, and returns that partition's
//! best set holding the required GPUs (the first on ties).
//!
//! This module finds the same partition without enumerating them all:
//!
//! 1. **Value of a remainder.** `value(R)` is the best total score of a
//!    valid partition of the remaining slots `R` (`None` when none is
//!    valid), memoised. Every partition has exactly one set holding a given
//!    slot, so `value(R)` only branches over the sets holding one anchor
//!    (the required GPUs while they remain, else the first remaining GPU).
//!    A partition is valid exactly when each set holds all required GPUs or
//!    none, and the set holding them has no padding: that is upstream's
//!    condition, split per set.
//! 2. **Twins.** Two non-required GPUs with the same score to every other
//!    available GPU are interchangeable, so `value` depends only on how
//!    many GPUs of each twin class remain. Memo keys are those counts (a
//!    mixed-radix number); sets are enumerated as counts per class. On
//!    NVSwitch machines all GPUs are twins and the search is trivial; on a
//!    DGX-2-like PCIe tree the pairs under one switch are.
//! 3. **Upstream's order.** The first optimal partition in upstream's
//!    depth-first order is rebuilt set by set: at each step the sets holding
//!    the first remaining slot are tried in upstream's `iterateGPUSets`
//!    order (the padding as one element after every GPU, which preserves
//!    that order), and the first whose score plus `value` of the rest is
//!    still optimal is taken.
//!
//! 4. **Branch and bound.** Half the sum, over a remainder's GPUs, of each
//!    GPU's `size - 1` best pair scores bounds the remainder's value; a
//!    state tries its candidate sets best bound first and stops at the
//!    first that cannot beat the best total found. When one set remains
//!    after the one being built, that last set's score follows from the
//!    state's total and the built set's rows in constant time.
//!
//! # Cost, and when the greedy fallback can happen
//!
//! Past [`WORK_LIMIT`] set evaluations, or the memory limits
//! ([`MEMORY_LIMIT`] memoised remainders, or candidate sets of one
//! remainder), the choice falls back to a greedy pick and logs a warning.
//! That never happens for up to 18 available GPUs, whatever their scores,
//! order, required GPUs and size:
//!
//! * Without twins and without branch and bound the search's work is a
//!   function of the number of GPUs `n`, the size and the number of
//!   required GPUs (the remainders after `j` anchored sets are the subsets
//!   above the `j` anchors; tests check the formula against the search
//!   itself), plus what rebuilding upstream's partition adds (bounded per
//!   step). Twins map onto a subset of that work (a class-count remainder
//!   is the subset of each class's last members) and pruning only skips
//!   remainders, so it bounds every input.
//! * For 16 GPUs the bound is at most 1,060,921 set evaluations (size 6,
//!   one GPU required) and a few thousand remainders; for 18 GPUs
//!   6,914,882: well under the limits. For 19 GPUs it reaches 24,561,899
//!   (size 7, one required), above [`WORK_LIMIT`]: from 19 GPUs on the
//!   fallback can happen, depending on how much branch and bound prunes on
//!   the given scores.
//!
//! Time (BENCHMARKS.md): every size on a 16-GPU DGX-2-like machine in a few
//! milliseconds or less; 16 GPUs whose pair scores are all distinct (no
//! twins, the worst case) in tens of milliseconds.

use rustc_hash::FxHashMap;

use super::Scores;

/// Set evaluations allowed for one choice before the greedy fallback
/// (about a second); never reached with up to 18 GPUs (module docs).
pub const WORK_LIMIT: u64 = 20_000_000;

/// Memo entries, and candidate sets of one state, allowed before the greedy
/// fallback (memory stays under a few hundred MiB).
pub const MEMORY_LIMIT: usize = 1 << 22;

/// go-gpuallocator's best-effort choice of `size` GPUs out of `available`
/// (GPU indices, distinct, in the caller's order) that includes every GPU
/// of `required` (distinct). Empty when upstream returns nothing: `size`
/// 0, fewer than `size` available, more than `size` required, or a
/// required GPU not available. The result is ordered as in `available`.
pub fn best_effort(
    scores: &Scores,
    available: &[usize],
    required: &[usize],
    size: usize,
) -> Vec<usize> {
    best_effort_within(scores, available, required, size, WORK_LIMIT)
}

/// [`best_effort`] with a work limit of `limit` set evaluations.
pub(crate) fn best_effort_within(
    scores: &Scores,
    available: &[usize],
    required: &[usize],
    size: usize,
    limit: u64,
) -> Vec<usize> {
    let options = Options { limit, prune: true };
    match exact(
        scores,
        available,
        required,
        size,
        options,
        &mut Stats::default(),
    ) {
        Ok(chosen) => chosen,
        Err(TooLarge) => {
            tracing::warn!(
                available = available.len(),
                size,
                "GPU choice exceeds the exact search's work limit; choosing greedily"
            );
            let positions: Vec<usize> = required
                .iter()
                .filter_map(|r| available.iter().position(|a| a == r))
                .collect();
            greedy(scores, available, &positions, size)
        }
    }
}

/// How [`exact`] searches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Set evaluations allowed.
    pub(crate) limit: u64,
    /// Branch and bound on (off only to measure the search's worst case).
    pub(crate) prune: bool,
}

/// What one [`exact`] search did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Set evaluations while finding the best total (memoised `value`).
    pub(crate) value_work: u64,
    /// Remainders memoised while finding the best total.
    pub(crate) value_states: usize,
    /// Set evaluations in all, rebuilding upstream's partition included.
    pub(crate) work: u64,
    /// Remainders memoised in all.
    pub(crate) states: usize,
}

/// The exact choice, or [`TooLarge`] past `options.limit` set evaluations
/// or the memory limits; `stats` says what the search did.
pub(crate) fn exact(
    scores: &Scores,
    available: &[usize],
    required: &[usize],
    size: usize,
    options: Options,
    stats: &mut Stats,
) -> Result<Vec<usize>, TooLarge> {
    if size == 0
        || available.len() < size
        || required.len() > size
        || required.len() > available.len()
    {
        return Ok(Vec::new());
    }
    let mut required_positions = Vec::with_capacity(required.len());
    for r in required {
        match available.iter().position(|a| a == r) {
            Some(p) if !required_positions.contains(&p) => required_positions.push(p),
            Some(_) => {}
            None => return Ok(Vec::new()),
        }
    }
    if size == 1 {
        // Upstream enumerates single-GPU "partitions" of score 0 and keeps
        // the first holding the required GPU.
        let position = required_positions.first().copied().unwrap_or(0);
        return Ok(vec![available[position]]);
    }
    let mut search = Search::new(scores, available, &required_positions, size, options)?;
    let positions = search.run(stats);
    stats.work = search.work;
    stats.states = search.memo.len();
    Ok(positions?.into_iter().map(|p| available[p]).collect())
}

/// The exact search would take too long (or its keys would not fit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge;

/// No valid partition of a remainder.
const INFEASIBLE: Option<i64> = None;

struct Search {
    size: usize,
    /// Padding slots (0 when `size` divides the number of GPUs).
    padding: usize,
    /// Position-level pair scores, `n × n`.
    w: Vec<i64>,
    n: usize,
    class_of: Vec<usize>,
    /// Members per class (its count in the full remainder).
    cap: Vec<u8>,
    /// Class-level pair scores, `m × m`; the diagonal is the score between
    /// two members of one class.
    cw: Vec<i64>,
    /// Classes of the required GPUs (one GPU each).
    required: Vec<usize>,
    is_required: Vec<bool>,
    /// Score among the required GPUs.
    required_score: i64,
    radix: Vec<u64>,
    pad_radix: u64,
    /// Per class, twice an upper bound of what one member adds to the
    /// total: the sum of its `size - 1` best pair scores. Half the sum over
    /// a remainder bounds its value (branch and bound).
    top: Vec<i64>,
    memo: FxHashMap<u64, Option<i64>>,
    work: u64,
    limit: u64,
    prune: bool,
}

/// A set being built in [`Search::extend`].
#[derive(Debug, Clone, Copy)]
struct Partial {
    /// Score of the set so far.
    score: i64,
    /// Key of the remainder without the set.
    key: u64,
    /// [`Search::top`] summed over that remainder.
    bound: i64,
    /// Sum over the set's members of their scores with every GPU of the
    /// state (see [`LastSet`]).
    row: i64,
}

/// When exactly one set remains after the one being built, the last set's
/// score is the state's total, plus the built set's score, minus the built
/// set's rows (each member's score with every GPU of the state): no
/// recursion, no memo entry.
struct LastSet {
    /// Per class (in [`Search::value`]) or per position (in
    /// [`Search::run`]): score with every other GPU of the state.
    rows: Vec<i64>,
    /// Score of the whole state as one set.
    total: i64,
}

/// One state of [`Search::value`] being expanded.
struct Level {
    /// Members left per class, without the set's anchor.
    counts: Vec<u8>,
    /// The non-required classes with members left, ascending.
    present: Vec<usize>,
    /// `suffix[i]`: members of `present[i..]`.
    suffix: Vec<usize>,
    last: Option<LastSet>,
}

/// A remainder and the total its partition must reach, while the first
/// optimal partition is rebuilt.
#[derive(Debug, Clone, Copy)]
struct Target {
    /// The remainder's key.
    key: u64,
    /// The best value of the remainder.
    score: i64,
    /// [`Search::top`] summed over the remainder.
    bound: i64,
    /// Whether the padding is still in the remainder.
    pad: bool,
    /// Slots (GPUs and padding) in the remainder.
    slots: usize,
    /// Whether the required GPUs are still in the remainder.
    required_left: bool,
}

impl Search {
    fn new(
        scores: &Scores,
        available: &[usize],
        required: &[usize],
        size: usize,
        options: Options,
    ) -> Result<Self, TooLarge> {
        let n = available.len();
        let mut w = vec![0i64; n * n];
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    w[a * n + b] = scores.get(available[a], available[b]);
                }
            }
        }
        let is_required_pos: Vec<bool> = (0..n).map(|p| required.contains(&p)).collect();

        // Twin classes: same score to every third GPU. Required GPUs stay alone.
        let mut class_of = vec![usize::MAX; n];
        let mut reps: Vec<usize> = Vec::new();
        for p in 0..n {
            let twin_class = if is_required_pos[p] {
                None
            } else {
                reps.iter().position(|&r| {
                    !is_required_pos[r]
                        && (0..n).all(|k| k == p || k == r || w[p * n + k] == w[r * n + k])
                })
            };
            class_of[p] = match twin_class {
                Some(c) => c,
                None => {
                    reps.push(p);
                    reps.len() - 1
                }
            };
        }
        let m = reps.len();
        let mut cap = vec![0u8; m];
        for &c in &class_of {
            cap[c] = cap[c].checked_add(1).ok_or(TooLarge)?;
        }
        let mut cw = vec![0i64; m * m];
        for c in 0..m {
            for d in 0..m {
                cw[c * m + d] = if c != d {
                    w[reps[c] * n + reps[d]]
                } else {
                    // Two members of one class (if it has two).
                    class_of
                        .iter()
                        .enumerate()
                        .find(|&(p, &k)| k == c && p != reps[c])
                        .map_or(0, |(p, _)| w[reps[c] * n + p])
                };
            }
        }
        let required_classes: Vec<usize> = required.iter().map(|&p| class_of[p]).collect();
        let mut is_required = vec![false; m];
        for &c in &required_classes {
            is_required[c] = true;
        }
        let mut required_score = 0;
        for (i, &a) in required.iter().enumerate() {
            for &b in &required[i + 1..] {
                required_score += w[a * n + b];
            }
        }
        let mut radix = Vec::with_capacity(m);
        let mut r: u64 = 1;
        for &k in &cap {
            radix.push(r);
            r = r.checked_mul(u64::from(k) + 1).ok_or(TooLarge)?;
        }
        let pad_radix = r;
        r.checked_mul(2).ok_or(TooLarge)?;
        let top = reps
            .iter()
            .map(|&x| {
                let mut row: Vec<i64> = (0..n).filter(|&y| y != x).map(|y| w[x * n + y]).collect();
                row.sort_unstable_by(|a, b| b.cmp(a));
                row.iter().take(size - 1).sum()
            })
            .collect();
        Ok(Search {
            size,
            padding: (size - n % size) % size,
            w,
            n,
            class_of,
            cap,
            cw,
            required: required_classes,
            is_required,
            required_score,
            radix,
            pad_radix,
            top,
            memo: FxHashMap::default(),
            work: 0,
            limit: options.limit,
            prune: options.prune,
        })
    }

    fn count_work(&mut self, units: u64) -> Result<(), TooLarge> {
        self.work += units;
        if self.work > self.limit {
            Err(TooLarge)
        } else {
            Ok(())
        }
    }

    fn decode(&self, key: u64) -> (Vec<u8>, bool) {
        let counts = self
            .cap
            .iter()
            .zip(&self.radix)
            .map(|(&cap, &radix)| ((key / radix) % (u64::from(cap) + 1)) as u8)
            .collect();
        (counts, key / self.pad_radix == 1)
    }

    /// Best total score of a valid partition of the remainder `key`.
    fn value(&mut self, key: u64) -> Result<Option<i64>, TooLarge> {
        if key == 0 {
            return Ok(Some(0));
        }
        if let Some(&v) = self.memo.get(&key) {
            return Ok(v);
        }
        let (counts, pad) = self.decode(key);
        let m = counts.len();
        let bound: i64 = counts
            .iter()
            .zip(&self.top)
            .map(|(&r, &t)| i64::from(r) * t)
            .sum();
        let slots: usize = counts.iter().map(|&c| usize::from(c)).sum::<usize>()
            + if pad { self.padding } else { 0 };
        let last = (slots == 2 * self.size).then(|| {
            let rows: Vec<i64> = (0..m)
                .map(|c| {
                    let all: i64 = (0..m)
                        .map(|d| i64::from(counts[d]) * self.cw[c * m + d])
                        .sum();
                    all - self.cw[c * m + c]
                })
                .collect();
            let twice: i64 = (0..m).map(|c| i64::from(counts[c]) * rows[c]).sum();
            LastSet {
                rows,
                total: twice / 2,
            }
        });
        let row_of = |last: &Option<LastSet>, c: usize| last.as_ref().map_or(0, |l| l.rows[c]);
        let mut level = Level {
            counts,
            present: Vec::new(),
            suffix: Vec::new(),
            last,
        };
        let mut best = INFEASIBLE;
        let mut chosen: Vec<(usize, u8)> = Vec::with_capacity(self.size);
        let required_left = self.required.first().is_some_and(|&c| level.counts[c] > 0);
        let (part, need) = if required_left {
            // The set holding the required GPUs: no padding, the rest from
            // the other classes.
            let mut part = Partial {
                score: self.required_score,
                key,
                bound,
                row: 0,
            };
            for &c in &self.required {
                level.counts[c] = 0;
                chosen.push((c, 1));
                part.key -= self.radix[c];
                part.bound -= self.top[c];
                part.row += row_of(&level.last, c);
            }
            (part, self.size - self.required.len())
        } else {
            let Some(anchor) = level.counts.iter().position(|&c| c > 0) else {
                return Ok(INFEASIBLE);
            };
            level.counts[anchor] -= 1;
            chosen.push((anchor, 1));
            let part = Partial {
                score: 0,
                key: key - self.radix[anchor],
                bound: bound - self.top[anchor],
                row: row_of(&level.last, anchor),
            };
            (part, self.size - 1)
        };
        level.present = (0..m)
            .filter(|&c| !self.is_required[c] && level.counts[c] > 0)
            .collect();
        level.suffix = vec![0; level.present.len() + 1];
        for i in (0..level.present.len()).rev() {
            level.suffix[i] = level.suffix[i + 1] + usize::from(level.counts[level.present[i]]);
        }
        // With one set left after this one, each candidate is scored on
        // the spot. Otherwise the candidates are gathered, tried best bound
        // first, and the search stops at the first whose bound cannot beat
        // the best total found (branch and bound).
        let mut candidates = if level.last.is_some() {
            None
        } else {
            Some(Vec::new())
        };
        if pad && !required_left {
            let padded = Partial {
                key: part.key - self.pad_radix,
                ..part
            };
            let need = need - self.padding;
            self.extend(
                &level,
                0,
                need,
                &mut chosen,
                padded,
                &mut best,
                &mut candidates,
            )?;
        }
        self.extend(
            &level,
            0,
            need,
            &mut chosen,
            part,
            &mut best,
            &mut candidates,
        )?;
        if let Some(mut candidates) = candidates {
            candidates.sort_unstable_by_key(|p| std::cmp::Reverse(2 * p.score + p.bound));
            for p in candidates {
                if self.prune && best.is_some_and(|b| 2 * p.score + p.bound <= 2 * b) {
                    break;
                }
                if let Some(rest) = self.value(p.key)? {
                    let total = p.score + rest;
                    if best.is_none_or(|b| total > b) {
                        best = Some(total);
                    }
                }
            }
        }
        if self.memo.len() >= MEMORY_LIMIT {
            return Err(TooLarge);
        }
        self.memo.insert(key, best);
        Ok(best)
    }

    /// Adds `need` more GPUs to the set `chosen` from the classes
    /// `level.present[from..]`. Each complete set is scored with the last
    /// set (keeping the best total in `best`) or, when more sets remain,
    /// pushed to `candidates`.
    #[allow(clippy::too_many_arguments)]
    fn extend(
        &mut self,
        level: &Level,
        from: usize,
        need: usize,
        chosen: &mut Vec<(usize, u8)>,
        part: Partial,
        best: &mut Option<i64>,
        candidates: &mut Option<Vec<Partial>>,
    ) -> Result<(), TooLarge> {
        if need == 0 {
            self.count_work(1)?;
            match (&level.last, candidates) {
                // The rest is one set: no required GPU (they are placed
                // first), the padding whole: always valid.
                (Some(last), _) => {
                    let total = 2 * part.score + last.total - part.row;
                    if best.is_none_or(|b| total > b) {
                        *best = Some(total);
                    }
                }
                (None, Some(candidates)) => {
                    if candidates.len() >= MEMORY_LIMIT {
                        return Err(TooLarge);
                    }
                    candidates.push(part);
                }
                (None, None) => {}
            }
            return Ok(());
        }
        let m = level.counts.len();
        for i in from..level.present.len() {
            if level.suffix[i] < need {
                break;
            }
            let c = level.present[i];
            // Score of one more member of `c` with the set so far.
            let with_set: i64 = chosen
                .iter()
                .map(|&(d, t)| i64::from(t) * self.cw[c * m + d])
                .sum();
            let within = self.cw[c * m + c];
            let row = level.last.as_ref().map_or(0, |l| l.rows[c]);
            let mut next = part;
            let most = usize::from(level.counts[c]).min(need);
            for t in 1..=most {
                // The t-th member pairs with the set and the t-1 before it.
                next.score += with_set + (t as i64 - 1) * within;
                next.key -= self.radix[c];
                next.bound -= self.top[c];
                next.row += row;
                chosen.push((c, t as u8));
                self.extend(level, i + 1, need - t, chosen, next, best, candidates)?;
                chosen.pop();
            }
        }
        Ok(())
    }

    fn full_key(&self) -> u64 {
        let gpus: u64 = self
            .cap
            .iter()
            .zip(&self.radix)
            .map(|(&c, &r)| u64::from(c) * r)
            .sum();
        gpus + if self.padding > 0 { self.pad_radix } else { 0 }
    }

    fn set_score(&self, set: &[usize]) -> i64 {
        let mut s = 0;
        for (i, &a) in set.iter().enumerate() {
            for &b in &set[i + 1..] {
                s += self.w[a * self.n + b];
            }
        }
        s
    }

    /// The chosen set's positions (ascending).
    fn run(&mut self, stats: &mut Stats) -> Result<Vec<usize>, TooLarge> {
        let key = self.full_key();
        let value = self.value(key)?;
        stats.value_work = self.work;
        stats.value_states = self.memo.len();
        let Some(score) = value else {
            return Ok(Vec::new());
        };
        let mut rest: Vec<usize> = (0..self.n).collect();
        let mut target = Target {
            key,
            score,
            bound: rest.iter().map(|&p| self.top[self.class_of[p]]).sum(),
            pad: self.padding > 0,
            slots: self.n + self.padding,
            required_left: !self.required.is_empty(),
        };
        // The first optimal partition in upstream's order, set by set.
        let mut partition: Vec<(Vec<usize>, bool)> = Vec::new();
        while !rest.is_empty() {
            let last = (target.slots == 2 * self.size).then(|| {
                let rows: Vec<i64> = (0..self.n)
                    .map(|p| rest.iter().map(|&q| self.w[p * self.n + q]).sum())
                    .collect();
                let twice: i64 = rest.iter().map(|&p| rows[p]).sum();
                LastSet {
                    rows,
                    total: twice / 2,
                }
            });
            let mut first = vec![rest[0]];
            let found = self.search_sets(&rest, 1, &mut first, 0, target, last.as_ref())?;
            let Some((set, padded, score)) = found else {
                // Unreachable when `value` is exact; refuse rather than guess.
                return Ok(Vec::new());
            };
            rest.retain(|p| !set.contains(p));
            target = self.without(target, &set, padded);
            target.score -= score;
            partition.push((set, padded));
        }
        // The best unpadded set holding the required GPUs (all sets when
        // none are required), the first on ties.
        let mut best: Option<(&Vec<usize>, i64)> = None;
        for (set, padded) in &partition {
            let holds_required = self
                .required
                .iter()
                .all(|&c| set.iter().any(|&p| self.class_of[p] == c));
            if *padded || !holds_required {
                continue;
            }
            let score = self.set_score(set);
            if best.is_none_or(|(_, b)| score > b) {
                best = Some((set, score));
            }
        }
        Ok(best.map(|(set, _)| set.clone()).unwrap_or_default())
    }

    /// The first set (in upstream's order) that extends `set` (which holds
    /// `rest[0]`; `score` is its score so far) and whose score plus the best
    /// value of what remains reaches `target`: depth-first over the GPUs
    /// after position `from` of `rest`, then the padding block, in
    /// increasing order (upstream's combination order).
    fn search_sets(
        &mut self,
        rest: &[usize],
        from: usize,
        set: &mut Vec<usize>,
        score: i64,
        target: Target,
        last: Option<&LastSet>,
    ) -> Result<Option<(Vec<usize>, bool, i64)>, TooLarge> {
        if set.len() == self.size {
            return self.check_set(set, false, score, target, last);
        }
        for i in from..rest.len() {
            if rest.len() - i < self.size - set.len() && !target.pad {
                break;
            }
            let x = rest[i];
            let added: i64 = set.iter().map(|&y| self.w[x * self.n + y]).sum();
            set.push(x);
            let found = self.search_sets(rest, i + 1, set, score + added, target, last)?;
            set.pop();
            if found.is_some() {
                return Ok(found);
            }
        }
        if target.pad && set.len() + self.padding == self.size {
            return self.check_set(set, true, score, target, last);
        }
        Ok(None)
    }

    /// `target`'s remainder without `set` (and the padding if `padded`);
    /// the score is left to the caller.
    fn without(&self, mut target: Target, set: &[usize], padded: bool) -> Target {
        for &p in set {
            target.key -= self.radix[self.class_of[p]];
            target.bound -= self.top[self.class_of[p]];
        }
        target.slots -= set.len();
        if self
            .required
            .first()
            .is_some_and(|&c| set.iter().any(|&p| self.class_of[p] == c))
        {
            target.required_left = false;
        }
        if padded {
            target.key -= self.pad_radix;
            target.pad = false;
            target.slots -= self.padding;
        }
        target
    }

    fn check_set(
        &mut self,
        set: &[usize],
        padded: bool,
        score: i64,
        target: Target,
        last: Option<&LastSet>,
    ) -> Result<Option<(Vec<usize>, bool, i64)>, TooLarge> {
        self.count_work(1)?;
        let required_held = self
            .required
            .iter()
            .filter(|&&c| set.iter().any(|&p| self.class_of[p] == c))
            .count();
        let valid = required_held == 0 || (required_held == self.required.len() && !padded);
        if !valid {
            return Ok(None);
        }
        let rest = self.without(target, set, padded);
        let value = if let Some(last) = last {
            // The rest is one set; if it holds the required GPUs it must not
            // be padded.
            let rest_valid = !(rest.required_left && rest.pad);
            let rows: i64 = set.iter().map(|&p| last.rows[p]).sum();
            rest_valid.then_some(last.total + score - rows)
        } else if self.prune && 2 * score + rest.bound < 2 * target.score {
            return Ok(None);
        } else {
            self.value(rest.key)?
        };
        let found = value.is_some_and(|v| score + v == target.score);
        Ok(found.then(|| (set.to_vec(), padded, score)))
    }
}

/// The fallback past the work limit: the required GPUs (or the best pair),
/// then repeatedly the GPU adding the most score, earliest on ties. Result
/// in the order of `available`.
fn greedy(scores: &Scores, available: &[usize], required: &[usize], size: usize) -> Vec<usize> {
    let n = available.len();
    let w = |a: usize, b: usize| scores.get(available[a], available[b]);
    let mut chosen: Vec<usize> = required.to_vec();
    if chosen.is_empty() {
        let mut best = (0, 1, i64::MIN);
        for a in 0..n {
            for b in a + 1..n {
                if w(a, b) > best.2 {
                    best = (a, b, w(a, b));
                }
            }
        }
        chosen = vec![best.0, best.1];
    }
    while chosen.len() < size {
        let next = (0..n)
            .filter(|p| !chosen.contains(p))
            .map(|p| (p, chosen.iter().map(|&c| w(p, c)).sum::<i64>()))
            .fold(None, |acc: Option<(usize, i64)>, (p, s)| match acc {
                Some((_, best)) if s <= best => acc,
                _ => Some((p, s)),
            });
        match next {
            Some((p, _)) => chosen.push(p),
            None => break,
        }
    }
    chosen.sort_unstable();
    chosen.truncate(size);
    chosen.into_iter().map(|p| available[p]).collect()
}
