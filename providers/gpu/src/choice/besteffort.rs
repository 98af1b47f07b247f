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
//! Cost: the memo holds at most one entry per reachable remainder (a 16-GPU
//! machine with no twins at all: a few thousand to a few hundred thousand
//! by size, see BENCHMARKS.md). A work limit bounds pathological inputs
//! (dozens of GPUs without twins, where upstream would run for years):
//! past it the choice falls back to a greedy pick and logs a warning.

use rustc_hash::FxHashMap;

use super::Scores;

/// Set evaluations allowed for one choice before the greedy fallback.
pub const WORK_LIMIT: u64 = 50_000_000;

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
    if size == 0
        || available.len() < size
        || required.len() > size
        || required.len() > available.len()
    {
        return Vec::new();
    }
    let mut required_positions = Vec::with_capacity(required.len());
    for r in required {
        match available.iter().position(|a| a == r) {
            Some(p) if !required_positions.contains(&p) => required_positions.push(p),
            Some(_) => {}
            None => return Vec::new(),
        }
    }
    if size == 1 {
        // Upstream enumerates single-GPU "partitions" of score 0 and keeps
        // the first holding the required GPU.
        let position = required_positions.first().copied().unwrap_or(0);
        return vec![available[position]];
    }
    match Search::new(scores, available, &required_positions, size).and_then(|s| s.run()) {
        Ok(positions) => positions.into_iter().map(|p| available[p]).collect(),
        Err(TooLarge) => {
            tracing::warn!(
                available = available.len(),
                size,
                "GPU choice exceeds the exact search's work limit; choosing greedily"
            );
            greedy(scores, available, &required_positions, size)
        }
    }
}

/// The exact search would take too long (or its keys would not fit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TooLarge;

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
    memo: FxHashMap<u64, Option<i64>>,
    work: u64,
}

impl Search {
    fn new(
        scores: &Scores,
        available: &[usize],
        required: &[usize],
        size: usize,
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
            memo: FxHashMap::default(),
            work: 0,
        })
    }

    fn count_work(&mut self, units: u64) -> Result<(), TooLarge> {
        self.work += units;
        if self.work > WORK_LIMIT {
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
        let (mut counts, pad) = self.decode(key);
        let mut best = INFEASIBLE;
        let mut chosen: Vec<(usize, u8)> = Vec::with_capacity(self.size);
        let required_left = self.required.first().is_some_and(|&c| counts[c] > 0);
        if required_left {
            // The set holding the required GPUs: no padding, the rest from
            // the other classes.
            let mut k = key;
            for &c in &self.required {
                counts[c] = 0;
                chosen.push((c, 1));
                k -= self.radix[c];
            }
            let need = self.size - self.required.len();
            let score = self.required_score;
            self.extend(&counts, 0, need, &mut chosen, score, k, &mut best)?;
        } else if let Some(anchor) = counts.iter().position(|&c| c > 0) {
            counts[anchor] -= 1;
            chosen.push((anchor, 1));
            let k = key - self.radix[anchor];
            if pad {
                if let Some(need) = (self.size - 1).checked_sub(self.padding) {
                    self.extend(&counts, 0, need, &mut chosen, 0, k - self.pad_radix, &mut best)?;
                }
            }
            self.extend(&counts, 0, self.size - 1, &mut chosen, 0, k, &mut best)?;
        }
        self.memo.insert(key, best);
        Ok(best)
    }

    /// Adds `need` more GPUs to the set `chosen` from classes `from..`, then
    /// scores the rest; keeps the best total in `best`.
    #[allow(clippy::too_many_arguments)]
    fn extend(
        &mut self,
        counts: &[u8],
        from: usize,
        need: usize,
        chosen: &mut Vec<(usize, u8)>,
        score: i64,
        key: u64,
        best: &mut Option<i64>,
    ) -> Result<(), TooLarge> {
        if need == 0 {
            self.count_work(1)?;
            if let Some(rest) = self.value(key)? {
                let total = score + rest;
                if best.is_none_or(|b| total > b) {
                    *best = Some(total);
                }
            }
            return Ok(());
        }
        let m = counts.len();
        let capacity: usize = (from..m)
            .filter(|&c| !self.is_required[c])
            .map(|c| usize::from(counts[c]))
            .sum();
        if capacity < need {
            return Ok(());
        }
        for c in from..m {
            if self.is_required[c] || counts[c] == 0 {
                continue;
            }
            // Score of one more member of `c` with the set so far.
            let with_set: i64 = chosen
                .iter()
                .map(|&(d, t)| i64::from(t) * self.cw[c * m + d])
                .sum();
            let within = self.cw[c * m + c];
            let mut added = 0i64;
            for t in 1..=counts[c].min(u8::try_from(need).unwrap_or(u8::MAX)) {
                // The t-th member pairs with the set and the t-1 before it.
                added += with_set + i64::from(t - 1) * within;
                chosen.push((c, t));
                let k = key - u64::from(t) * self.radix[c];
                self.extend(counts, c + 1, need - usize::from(t), chosen, score + added, k, best)?;
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
    fn run(mut self) -> Result<Vec<usize>, TooLarge> {
        let mut key = self.full_key();
        let Some(mut target) = self.value(key)? else {
            return Ok(Vec::new());
        };
        let mut rest: Vec<usize> = (0..self.n).collect();
        let mut pad = self.padding > 0;
        // The first optimal partition in upstream's order, set by set.
        let mut partition: Vec<(Vec<usize>, bool)> = Vec::new();
        while !rest.is_empty() {
            let mut first = vec![rest[0]];
            let step = self.search_sets(&rest, pad, 1, &mut first, key, target)?;
            let Some((set, padded, score)) = step else {
                // Unreachable when `value` is exact; refuse rather than guess.
                return Ok(Vec::new());
            };
            rest.retain(|p| !set.contains(p));
            for &p in &set {
                key -= self.radix[self.class_of[p]];
            }
            if padded {
                key -= self.pad_radix;
                pad = false;
            }
            target -= score;
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
    /// `rest[0]`) and whose score plus the best value of what remains
    /// reaches `target`: depth-first over the GPUs after position `from` of
    /// `rest`, then the padding block, in increasing order (upstream's
    /// combination order).
    fn search_sets(
        &mut self,
        rest: &[usize],
        pad: bool,
        from: usize,
        set: &mut Vec<usize>,
        key: u64,
        target: i64,
    ) -> Result<Option<(Vec<usize>, bool, i64)>, TooLarge> {
        if set.len() == self.size {
            return self.check_set(set, false, key, target);
        }
        for i in from..rest.len() {
            set.push(rest[i]);
            let found = self.search_sets(rest, pad, i + 1, set, key, target)?;
            set.pop();
            if found.is_some() {
                return Ok(found);
            }
        }
        if pad && set.len() + self.padding == self.size {
            return self.check_set(set, true, key, target);
        }
        Ok(None)
    }

    fn check_set(
        &mut self,
        set: &[usize],
        padded: bool,
        key: u64,
        target: i64,
    ) -> Result<Option<(Vec<usize>, bool, i64)>, TooLarge> {
        self.count_work(1)?;
        let required_held = self
            .required
            .iter()
            .filter(|&&c| set.iter().any(|&p| self.class_of[p] == c))
            .count();
        let valid = required_held == 0
            || (required_held == self.required.len() && !padded);
        if !valid {
            return Ok(None);
        }
        let score = self.set_score(set);
        let mut k = key;
        for &p in set {
            k -= self.radix[self.class_of[p]];
        }
        if padded {
            k -= self.pad_radix;
        }
        let found = self
            .value(k)?
            .is_some_and(|rest| score + rest == target);
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
