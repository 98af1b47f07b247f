//! Why the bounded search never falls back below 19 GPUs, and that it is
//! exact there: a model of its worst-case work, checked against the search
//! itself, and a second, plain exact search (memoised over GPU subsets, no
//! twins, no bounds) as the oracle where upstream's exhaustive search is
//! too slow (16 GPUs).

use std::collections::HashMap;

use proptest::prelude::*;

use super::besteffort::{self, exact, Options, Stats, MEMORY_LIMIT, WORK_LIMIT};
use super::{exhaustive, Scores};

/// `C(a, b)`, 0 outside `0 <= b <= a`.
fn binomial(a: i64, b: i64) -> u64 {
    if b < 0 || b > a {
        return 0;
    }
    (0..b).fold(1u64, |c, i| c * (a - i) as u64 / (i + 1) as u64)
}

/// The search's work without branch and bound on GPUs without twins (the
/// most it can do: twins and pruning only take work away): set evaluations
/// while finding the best total, and memoised remainders, for `n` GPUs in
/// sets of `size` with `r` required.
///
/// A remainder is a set `S` of GPUs (plus the padding, or not). Each step
/// removes the set holding the required GPUs (first, while they remain),
/// else a set holding the lowest remaining GPU, so after `j` such steps `S`
/// lies above the `j` removed anchors: `C(N - j, |S|)` remainders of each
/// size, where `N` counts the GPUs that are not required. A remainder of
/// `g` GPUs tries `C(g-1, size-1)` sets, plus `C(g-1, size-1-padding)`
/// padded ones while the padding remains; the required GPUs' set tries
/// `C(n-r, size-r)`. Only remainders of at least two sets are expanded
/// (with two left, the last set's score is computed, not searched).
fn unpruned(n: usize, size: usize, r: usize) -> (u64, u64) {
    if size < 2 || n < size || r > size {
        return (0, 0);
    }
    let (n, size, r) = (n as i64, size as i64, r as i64);
    let p = (size - n % size) % size;
    let tries = |g: i64, pad: bool| {
        binomial(g - 1, size - 1)
            + if pad {
                binomial(g - 1, size - 1 - p)
            } else {
                0
            }
    };
    let (mut work, mut states) = (0, 0);
    // GPUs that are not required, and how many of them leave with the
    // required GPUs' set.
    let (others, with_required) = if r > 0 {
        work += binomial(n - r, size - r);
        states += 1;
        (n - r, size - r)
    } else {
        (n, 0)
    };
    for j in 0..=n {
        for pad in [true, false] {
            if (p == 0 && pad) || (p > 0 && !pad && j == 0) {
                continue;
            }
            let g = others - with_required - j * size + if p > 0 && !pad { p } else { 0 };
            let slots = g + if pad { p } else { 0 };
            let initial = r == 0 && j == 0;
            if g < 1 || (!initial && slots < 2 * size) {
                continue;
            }
            let count = binomial(others - j, g);
            states += count;
            work += count * tries(g, pad);
        }
    }
    (work, states)
}

/// The most set evaluations rebuilding upstream's partition takes, for `n`
/// GPUs in sets of `size` with `r` required. Each of the `(n + padding) /
/// size` steps tries the sets holding the first remaining GPU, at most
/// `C(g-1, size-1) + C(g-1, size-1-padding)`. While the required GPUs
/// remain, a tried set without them leaves a remainder that holds them,
/// which the best-total search never met (it splits off the required GPUs'
/// set first): each such remainder tries its `C(g'-r, size-r)` sets for the
/// required GPUs once; what they leave is a remainder of the model.
fn rebuild_bound(n: usize, size: usize, r: usize) -> u64 {
    if size < 2 || n < size {
        return 0;
    }
    let (n, k, r) = (n as i64, size as i64, r as i64);
    let p = (k - n % k) % k;
    let steps = (n + p) / k;
    let mut total = 0;
    for j in 0..steps {
        let g = n.min(n + p - j * k);
        total += binomial(g - 1, k - 1) + binomial(g - 1, k - 1 - p);
        if r > 0 && j + 1 < steps {
            total += binomial(g - 1 - r, k - 1) * binomial(g - k - r, k - r)
                + binomial(g - 1 - r, k - 1 - p) * binomial(g - (k - p) - r, k - r);
        }
    }
    total
}

/// Pair scores with no two alike (so no twins): a seeded shuffle of
/// `1..=pairs` times 7.
fn distinct_scores(n: usize, seed: u64) -> Scores {
    let mut x = seed | 1;
    let mut values: Vec<i64> = (1..=(n * n.saturating_sub(1) / 2) as i64)
        .map(|v| 7 * v)
        .collect();
    for i in (1..values.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        values.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut w = vec![0; n * n];
    let mut it = values.into_iter();
    for a in 0..n {
        for b in a + 1..n {
            let v = it.next().unwrap_or(0);
            w[a * n + b] = v;
            w[b * n + a] = v;
        }
    }
    Scores::from_fn(n, |a, b| w[a * n + b])
}

#[test]
fn the_model_is_the_search_without_pruning() {
    for n in 2..=9 {
        let scores = distinct_scores(n, n as u64);
        // A scrambled order: the anchors are positions in `available`.
        let mut available: Vec<usize> = (0..n).rev().collect();
        available.rotate_left(n / 3);
        for size in 2..=n {
            for r in 0..=size.min(3) {
                let required: Vec<usize> = available
                    .iter()
                    .copied()
                    .skip(1)
                    .step_by(2)
                    .take(r)
                    .collect();
                if required.len() < r {
                    continue;
                }
                let mut stats = Stats::default();
                let options = Options {
                    limit: u64::MAX,
                    prune: false,
                };
                exact(&scores, &available, &required, size, options, &mut stats).unwrap();
                let (work, states) = unpruned(n, size, r);
                assert_eq!(
                    (stats.value_work, stats.value_states as u64),
                    (work, states),
                    "n {n} size {size} required {r}"
                );
                assert!(
                    stats.work - stats.value_work <= rebuild_bound(n, size, r),
                    "n {n} size {size} required {r}: rebuilding took {}",
                    stats.work - stats.value_work
                );
            }
        }
    }
}

#[test]
fn up_to_18_gpus_the_exact_search_always_finishes() {
    let worst = |n: usize| {
        (1..=n)
            .flat_map(|size| (0..=size).map(move |r| (size, r)))
            .map(|(size, r)| {
                let (work, states) = unpruned(n, size, r);
                (work + rebuild_bound(n, size, r), states, size, r)
            })
            .max()
            .unwrap_or_default()
    };
    for n in 1..=18 {
        let (work, states, size, r) = worst(n);
        assert!(
            work <= WORK_LIMIT && states <= MEMORY_LIMIT as u64,
            "{n} GPUs, size {size}, {r} required: {work} set evaluations, {states} remainders"
        );
        // One remainder's candidate sets (the other memory limit).
        assert!(binomial(n as i64 - 1, n as i64 / 2) <= MEMORY_LIMIT as u64);
    }
    // The figures the module docs and BENCHMARKS.md quote.
    assert_eq!(worst(16), (1_060_921, 3_004, 6, 1));
    assert_eq!(worst(18), (6_914_882, 6_189, 6, 1));
    assert_eq!(worst(19), (24_561_899, 18_565, 7, 1));
    assert!(
        worst(19).0 > WORK_LIMIT,
        "from 19 GPUs on the limit may be reached"
    );
}

/// A second exact search, written plainly: the best total of every
/// remainder (a bitmask of positions in `available`, plus the padding)
/// memoised without twins or bounds, then upstream's first optimal
/// partition rebuilt with upstream's own set order
/// ([`exhaustive::iterate_sets`] over the padded list), and its best set
/// holding the required GPUs.
fn reference(scores: &Scores, available: &[usize], required: &[usize], size: usize) -> Vec<usize> {
    let n = available.len();
    if size == 0 || n < size || required.len() > size {
        return Vec::new();
    }
    let Some(required_mask) = required.iter().try_fold(0u32, |m, r| {
        available.iter().position(|a| a == r).map(|p| m | 1 << p)
    }) else {
        return Vec::new();
    };
    if size == 1 {
        let first = required.first().copied().unwrap_or(available[0]);
        return vec![first];
    }
    let padding = (size - n % size) % size;
    let w: Vec<i64> = (0..n * n)
        .map(|i| scores.get(available[i / n], available[i % n]))
        .collect();
    let score = |mask: u32| -> i64 {
        let mut s = 0;
        let mut a_bits = mask;
        while a_bits != 0 {
            let a = a_bits.trailing_zeros() as usize;
            a_bits &= a_bits - 1;
            let mut b_bits = a_bits;
            while b_bits != 0 {
                let b = b_bits.trailing_zeros() as usize;
                b_bits &= b_bits - 1;
                s += w[a * n + b];
            }
        }
        s
    };
    let subsets = |from: u32, k: usize| -> Vec<u32> {
        let mut out = Vec::new();
        let bits: Vec<usize> = (0..n).filter(|&p| from >> p & 1 == 1).collect();
        let slots: Vec<Option<usize>> = bits.iter().copied().map(Some).collect();
        if k == 0 {
            return vec![0];
        }
        exhaustive::iterate_sets(&slots, k, &mut |set| {
            out.push(set.iter().flatten().fold(0, |m, &p| m | 1 << p));
        });
        out
    };
    let mut memo: HashMap<(u32, bool), Option<i64>> = HashMap::new();
    fn value(
        mask: u32,
        pad: bool,
        memo: &mut HashMap<(u32, bool), Option<i64>>,
        candidates: &dyn Fn(u32, bool) -> Vec<(u32, bool)>,
        score: &dyn Fn(u32) -> i64,
    ) -> Option<i64> {
        if mask == 0 {
            return (!pad).then_some(0);
        }
        if let Some(&v) = memo.get(&(mask, pad)) {
            return v;
        }
        let mut best: Option<i64> = None;
        for (set, padded) in candidates(mask, pad) {
            if let Some(rest) = value(mask & !set, pad && !padded, memo, candidates, score) {
                let total = score(set) + rest;
                best = Some(best.map_or(total, |b| b.max(total)));
            }
        }
        memo.insert((mask, pad), best);
        best
    }
    // Sets to split off a remainder: the required GPUs' set while they
    // remain (never padded), else the sets holding the lowest GPU.
    let candidates = |mask: u32, pad: bool| -> Vec<(u32, bool)> {
        let r = required_mask.count_ones() as usize;
        if required_mask != 0 && mask & required_mask == required_mask {
            return subsets(mask & !required_mask, size - r)
                .into_iter()
                .map(|t| (t | required_mask, false))
                .collect();
        }
        let anchor = mask & mask.wrapping_neg();
        let mut out: Vec<(u32, bool)> = subsets(mask & !anchor, size - 1)
            .into_iter()
            .map(|t| (t | anchor, false))
            .collect();
        if pad {
            out.extend(
                subsets(mask & !anchor, size - 1 - padding)
                    .into_iter()
                    .map(|t| (t | anchor, true)),
            );
        }
        out
    };
    let full = (1u32 << n) - 1;
    let Some(mut target) = value(full, padding > 0, &mut memo, &candidates, &score) else {
        return Vec::new();
    };
    // Upstream's order: the first remaining slot with every (size - 1)-set
    // of the others in lexicographic order, padding slots last, padded sets
    // only with all the padding; the first whose total stays optimal.
    let mut rest: Vec<Option<usize>> = (0..n).map(Some).chain((0..padding).map(|_| None)).collect();
    let (mut mask, mut pad) = (full, padding > 0);
    let mut partition: Vec<(u32, bool)> = Vec::new();
    while !rest.is_empty() {
        let first = rest[0];
        let mut sets: Vec<(u32, bool)> = Vec::new();
        exhaustive::iterate_sets(&rest[1..], size - 1, &mut |others| {
            let pads = others.iter().filter(|s| s.is_none()).count();
            if pads == 0 || pads == padding {
                let set = others
                    .iter()
                    .chain([&first])
                    .flatten()
                    .fold(0, |m, &p| m | 1 << p);
                sets.push((set, pads > 0));
            }
        });
        let (set, padded) = sets
            .into_iter()
            .find(|&(set, padded)| {
                let held = set & required_mask;
                let valid = held == 0 || (held == required_mask && !padded);
                valid
                    && value(mask & !set, pad && !padded, &mut memo, &candidates, &score)
                        .is_some_and(|v| score(set) + v == target)
            })
            .expect("an optimal partition continues");
        target -= score(set);
        mask &= !set;
        pad &= !padded;
        rest.retain(|s| match s {
            Some(p) => set >> p & 1 == 0,
            None => !padded,
        });
        partition.push((set, padded));
    }
    let mut best: Option<(u32, i64)> = None;
    for (set, padded) in partition {
        if padded || set & required_mask != required_mask {
            continue;
        }
        if best.is_none_or(|(_, b)| score(set) > b) {
            best = Some((set, score(set)));
        }
    }
    best.map(|(set, _)| {
        (0..n)
            .filter(|&p| set >> p & 1 == 1)
            .map(|p| available[p])
            .collect()
    })
    .unwrap_or_default()
}

/// A choice problem on `n` GPUs with all pair scores distinct: a shuffled
/// subset of at least `n - 4` GPUs, up to 3 required, any size.
fn distinct_problem(n: usize) -> impl Strategy<Value = (Scores, Vec<usize>, Vec<usize>, usize)> {
    (
        any::<u64>(),
        Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
        n.saturating_sub(4).max(1)..=n,
        0usize..=3,
        1usize..=n,
    )
        .prop_map(move |(seed, order, count, r, size)| {
            let available: Vec<usize> = order[..count].to_vec();
            let required: Vec<usize> = available.iter().rev().step_by(3).take(r).copied().collect();
            (
                distinct_scores(n, seed),
                available,
                required,
                size.min(count),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The plain exact search is upstream's answer (checked where the
    /// exhaustive search is quick), so it can stand in for it at 16 GPUs.
    #[test]
    fn the_reference_equals_the_exhaustive_search(
        (scores, available, required, size) in (2usize..=9).prop_flat_map(distinct_problem)
    ) {
        prop_assert_eq!(
            reference(&scores, &available, &required, size),
            exhaustive::best_effort(&scores, &available, &required, size)
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// 16 GPUs whose 120 pair scores are all distinct (no twins: the
    /// bounded search's worst case), random orders and required GPUs, every
    /// size: exact, and never past the work limit.
    #[test]
    fn sixteen_gpus_with_distinct_scores_are_exact_without_fallback(
        (scores, available, required, size) in distinct_problem(16)
    ) {
        let mut stats = Stats::default();
        let options = Options { limit: WORK_LIMIT, prune: true };
        let fast = exact(&scores, &available, &required, size, options, &mut stats);
        prop_assert!(fast.is_ok(), "fell back: {} GPUs, size {}", available.len(), size);
        let (bound, _) = unpruned(available.len(), size, required.len());
        let rebuild = rebuild_bound(available.len(), size, required.len());
        prop_assert!(
            stats.work <= bound + rebuild,
            "{} set evaluations ({} finding the best total), bound {} + {}",
            stats.work, stats.value_work, bound, rebuild
        );
        prop_assert_eq!(
            fast.unwrap_or_default(),
            reference(&scores, &available, &required, size)
        );
        prop_assert_eq!(
            besteffort::best_effort(&scores, &available, &required, size).len(),
            if required.len() <= size { size } else { 0 }
        );
    }
}
