//! The test oracle of the merge: the kubelet's cross product, literally.
//! Built only for tests and, with the `test-oracle` feature, for the
//! benchmarks; never part of a production build.

use topomgr_sdk::{NumaMask, ProviderHints, TopologyHint};

use super::MergeMode;
use crate::numa::NumaInfo;

/// The kubelet's own algorithm: enumerate every permutation and fold the
/// candidates through `HintMerger.compare`, in the kubelet's order, on full
/// [`NumaMask`]s (no node positions).
///
/// Its cost is the product of the list lengths: it exists as the reference
/// that [`merge`](super::merge) is tested against and as the baseline of
/// the benchmark. Never use it to make decisions.
pub fn cross_product_merge(
    numa: &NumaInfo,
    providers: &[&ProviderHints],
    mode: MergeMode,
) -> TopologyHint {
    let machine = numa.default_mask();
    let nodes = numa.positions().ids();
    let mut lists: Vec<Vec<TopologyHint>> = Vec::new();
    for hints in providers {
        match hints {
            Some(map) if !map.is_empty() => {
                for set in map.values() {
                    lists.push(match set {
                        None => vec![TopologyHint::ANY],
                        Some(set) if set.is_unsatisfiable() => vec![TopologyHint {
                            affinity: None,
                            preferred: false,
                        }],
                        Some(set) => set.to_explicit(nodes),
                    });
                }
            }
            _ => lists.push(vec![TopologyHint::ANY]),
        }
    }
    if mode.single_numa_node {
        lists = lists
            .into_iter()
            .map(|v| {
                v.into_iter()
                    .filter(|h| h.preferred && h.affinity.is_none_or(|m| m.len() == 1))
                    .collect()
            })
            .collect();
    }
    let b = lists
        .iter()
        .filter_map(|v| v.iter().filter_map(|h| h.affinity).map(|m| m.len()).min())
        .max()
        .unwrap_or(0);
    let better = |a: NumaMask, c: NumaMask| {
        if a.len() != c.len() {
            return a.len() < c.len();
        }
        if mode.prefer_closest {
            if let (Some(da), Some(dc)) = (numa.average_distance(a), numa.average_distance(c)) {
                if da != dc {
                    return da < dc;
                }
            }
        }
        a.is_less_than(c)
    };
    let fitter = |cur: TopologyHint, cand: TopologyHint| {
        let (a, c) = (
            cur.affinity.unwrap_or_default(),
            cand.affinity.unwrap_or_default(),
        );
        if a == c || !better(c, a) {
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
                acc = acc.intersection(a);
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
        if !acc.is_empty() {
            best = Some(match best {
                None => cand,
                Some(cur) if !cur.preferred && cand.preferred => cand,
                Some(cur) if cur.preferred && !cand.preferred => cur,
                Some(cur) if cur.preferred && cand.preferred => fitter(cur, cand),
                Some(cur) => {
                    let (cc, nc) = (cur.affinity.unwrap_or_default().len(), acc.len());
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
