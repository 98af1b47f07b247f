//! A literal port of go-gpuallocator's best-effort policy: it enumerates
//! every partition of the (padded) available GPUs, exactly as upstream's
//! `iterateGPUPartitions` / `iterateGPUSets` do, in the same order.
//!
//! Source: NVIDIA/go-gpuallocator `gpuallocator/besteffort_policy.go` at
//! commit 876e7b7609bb839919e4eb06ce00607db76e907e. Kept as the test
//! oracle of [`super::besteffort`] and the baseline of its benchmark; its
//! cost grows with the number of partitions (16 GPUs in sets of 3: 2.2·10⁷
//! of them), so production code never calls it.
//!
//! It has neither of upstream's two defects (see [`super`]): partitions are
//! owned values (no slice aliasing), and padded sets are never returned.

use super::Scores;

/// One slot of the padded list: a GPU index, or padding (upstream's `nil`).
type Slot = Option<usize>;

/// Upstream's `bestEffortPolicy.Allocate`, over GPU indices.
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
    let required: Vec<Slot> = required.iter().copied().map(Some).collect();

    let mut best: Option<(Vec<Vec<Slot>>, i64)> = None;
    iterate_partitions(available, size, &mut |candidate| {
        if !partition_contains_set_with_all(candidate, &required) {
            return;
        }
        let score = partition_score(scores, candidate);
        let better = match &best {
            None => true,
            Some((_, best_score)) => score > *best_score,
        };
        if better {
            best = Some((candidate.to_vec(), score));
        }
    });

    // Upstream keeps every set containing the required GPUs; padded sets are
    // left out here (upstream PR #80), so a result never has padding.
    let filtered: Vec<&Vec<Slot>> = best
        .as_ref()
        .map(|(partition, _)| {
            partition
                .iter()
                .filter(|set| set_contains_all(set, &required) && count_padding(set) == 0)
                .collect()
        })
        .unwrap_or_default();
    let Some((first, rest)) = filtered.split_first() else {
        return Vec::new();
    };
    let mut best_set = *first;
    let mut best_score = set_score(scores, best_set);
    for set in rest {
        let score = set_score(scores, set);
        if score > best_score {
            best_set = set;
            best_score = score;
        }
    }
    best_set.iter().flatten().copied().collect()
}

fn set_contains_all(set: &[Slot], subset: &[Slot]) -> bool {
    subset.iter().all(|gpu| set.contains(gpu))
}

fn partition_contains_set_with_all(partition: &[Vec<Slot>], subset: &[Slot]) -> bool {
    partition
        .iter()
        .any(|set| set_contains_all(set, subset) && count_padding(set) == 0)
}

fn count_padding(set: &[Slot]) -> usize {
    set.iter().filter(|s| s.is_none()).count()
}

/// Upstream's `iterateGPUSets`: every `size`-subset of `devices` in
/// lexicographic order of positions (the unrolled nested loops).
pub fn iterate_sets(devices: &[Slot], size: usize, callback: &mut dyn FnMut(&[Slot])) {
    if size == 0 || size > devices.len() {
        return;
    }
    let mut level = 0;
    let mut indices = vec![0usize; size];
    let mut set: Vec<Slot> = vec![None; size];
    loop {
        if indices[level] == devices.len() {
            if level == 0 {
                break;
            }
            level -= 1;
            indices[level] += 1;
            continue;
        }
        set[level] = devices[indices[level]];
        if level < size - 1 {
            level += 1;
            indices[level] = indices[level - 1] + 1;
            continue;
        }
        callback(&set);
        indices[level] += 1;
    }
}

/// Upstream's `iterateGPUPartitions`: every partition of `devices` (padded
/// with `None` to a multiple of `size`) into sets of `size`, the padding
/// all in one set, in upstream's order. `size == 1` yields one single-GPU
/// "partition" per device, as upstream does.
pub fn iterate_partitions(devices: &[usize], size: usize, callback: &mut dyn FnMut(&[Vec<Slot>])) {
    if size == 0 || size > devices.len() {
        return;
    }
    if size == 1 {
        for &device in devices {
            callback(&[vec![Some(device)]]);
        }
        return;
    }
    let mut padded: Vec<Slot> = devices.iter().copied().map(Some).collect();
    while !padded.len().is_multiple_of(size) {
        padded.push(None);
    }
    let padding = count_padding(&padded);
    let mut accum = Vec::new();
    iterate(&padded, size, padding, &mut accum, callback);
}

fn iterate(
    devices: &[Slot],
    size: usize,
    padding: usize,
    accum: &mut Vec<Vec<Slot>>,
    callback: &mut dyn FnMut(&[Vec<Slot>]),
) {
    if size == devices.len() {
        accum.push(devices.to_vec());
        callback(accum);
        accum.pop();
        return;
    }
    // Padding keeps `devices` a non-empty multiple of `size`.
    let Some((first, rest)) = devices.split_first() else {
        return;
    };
    iterate_sets(rest, size - 1, &mut |others| {
        let mut set = Vec::with_capacity(size);
        set.push(*first);
        set.extend_from_slice(others);
        let p = count_padding(&set);
        if p != 0 && p != padding {
            return;
        }
        let remaining: Vec<Slot> = devices
            .iter()
            .filter(|gpu| !set.contains(gpu))
            .copied()
            .collect();
        accum.push(set);
        iterate(&remaining, size, padding, accum, callback);
        accum.pop();
    });
}

/// Upstream's `calculateGPUSetScore`: the sum of the pair scores.
pub fn set_score(scores: &Scores, set: &[Slot]) -> i64 {
    let mut score = 0;
    iterate_sets(set, 2, &mut |pair| {
        if let [Some(a), Some(b)] = pair {
            if a != b {
                score += scores.get(*a, *b);
            }
        }
    });
    score
}

fn partition_score(scores: &Scores, partition: &[Vec<Slot>]) -> i64 {
    partition.iter().map(|set| set_score(scores, set)).sum()
}
