//! Merge benchmarks: topomgr's set-based merge against the kubelet's cross product.
//!
//! Run: `cargo bench -p topomgr-bench --bench merge`. Figures in BENCHMARKS.md.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use topomgr_engine::merge::oracle::cross_product_merge;
use topomgr_engine::merge::{merge, MergeMode};
use topomgr_engine::numa::NumaInfo;
use topomgr_sdk::{
    for_each_mask_in_kubelet_order, CompactHints, HintSet, NumaMask, NumaNodeId, ProviderHints,
    TopologyHint,
};

/// One provider, one resource, every mask of `nodes` in the kubelet's order;
/// masks of width `preferred_width` are preferred (0: none is).
fn all_masks(nodes: &[u32], preferred_width: u32) -> ProviderHints {
    let ids: Vec<NumaNodeId> = nodes.iter().map(|&n| NumaNodeId::new(n).unwrap()).collect();
    let mut v = Vec::new();
    for_each_mask_in_kubelet_order(&ids, |m| {
        v.push(TopologyHint::new(m, m.len() == preferred_width))
    });
    Some(BTreeMap::from([(
        "r".to_string(),
        Some(HintSet::Explicit(v)),
    )]))
}

fn compact(minimal: Vec<NumaMask>, w: u32) -> ProviderHints {
    Some(BTreeMap::from([(
        "r".to_string(),
        Some(HintSet::Compact(CompactHints {
            minimal,
            within: Vec::new(),
            preferred_width: w,
        })),
    )]))
}

fn bench(c: &mut Criterion) {
    let n8: Vec<u32> = (0..8).collect();
    let numa8 = NumaInfo::new(n8.clone(), None).unwrap();
    let md = MergeMode::default();

    // 8 NUMA nodes x 4 providers x all 255 masks.
    let pref: Vec<ProviderHints> = (0..4).map(|_| all_masks(&n8, 1)).collect();
    let pref_refs: Vec<&ProviderHints> = pref.iter().collect();
    c.bench_function("merge/8n_4p_255_preferred_single", |b| {
        b.iter(|| merge(black_box(&numa8), black_box(&pref_refs), md))
    });
    let nopref: Vec<ProviderHints> = (0..4).map(|_| all_masks(&n8, 0)).collect();
    let nopref_refs: Vec<&ProviderHints> = nopref.iter().collect();
    c.bench_function("merge/8n_4p_255_none_preferred", |b| {
        b.iter(|| merge(black_box(&numa8), black_box(&nopref_refs), md))
    });
    let closest = MergeMode {
        prefer_closest: true,
        ..MergeMode::default()
    };
    let dist: Vec<Vec<u64>> = (0..8u64)
        .map(|i| {
            (0..8u64)
                .map(|j| {
                    if i == j {
                        10
                    } else if i / 4 == j / 4 {
                        12
                    } else {
                        20
                    }
                })
                .collect()
        })
        .collect();
    let numa8d = NumaInfo::new(n8.clone(), Some(dist)).unwrap();
    c.bench_function("merge/8n_4p_255_none_preferred_closest", |b| {
        b.iter(|| merge(black_box(&numa8d), black_box(&nopref_refs), closest))
    });

    // The kubelet's cross product, on inputs it can finish.
    let two: Vec<&ProviderHints> = nopref.iter().take(2).collect();
    c.bench_function("cross_product/8n_2p_255_none_preferred", |b| {
        b.iter(|| cross_product_merge(black_box(&numa8), black_box(&two), md))
    });
    c.bench_function("merge/8n_2p_255_none_preferred", |b| {
        b.iter(|| merge(black_box(&numa8), black_box(&two), md))
    });
    let n4: Vec<u32> = (0..4).collect();
    let numa4 = NumaInfo::new(n4.clone(), None).unwrap();
    let four4: Vec<ProviderHints> = (0..4).map(|_| all_masks(&n4, 0)).collect();
    let four4_refs: Vec<&ProviderHints> = four4.iter().collect();
    c.bench_function("cross_product/4n_4p_15_none_preferred", |b| {
        b.iter(|| cross_product_merge(black_box(&numa4), black_box(&four4_refs), md))
    });
    c.bench_function("merge/4n_4p_15_none_preferred", |b| {
        b.iter(|| merge(black_box(&numa4), black_box(&four4_refs), md))
    });

    // The same worst case on 8 nodes whose ids are 248-255 (node positions
    // differ from the ids: the merge maps them).
    let high8: Vec<u32> = (248..256).collect();
    let numa8h = NumaInfo::new(high8.clone(), None).unwrap();
    let nopref_high: Vec<ProviderHints> = (0..4).map(|_| all_masks(&high8, 0)).collect();
    let nopref_high_refs: Vec<&ProviderHints> = nopref_high.iter().collect();
    c.bench_function("merge/8n_ids248-255_4p_255_none_preferred", |b| {
        b.iter(|| merge(black_box(&numa8h), black_box(&nopref_high_refs), md))
    });

    // 64 NUMA nodes, compact hints (a 4-CPU request per provider: any
    // single node), with ids 0-63 and with sparse ids 0, 4, ..., 252.
    for (label, ids) in [
        ("64n", (0..64).collect::<Vec<u32>>()),
        ("64n_ids0-252_sparse", (0..64).map(|i| i * 4).collect()),
    ] {
        let numa64 = NumaInfo::new(ids.clone(), None).unwrap();
        let id = |k: u32| i64::from(ids[k as usize]);
        let singles: Vec<NumaMask> = (0..64)
            .map(|k| NumaMask::from_nodes([id(k)]).unwrap())
            .collect();
        let c64: Vec<ProviderHints> = (0..4).map(|_| compact(singles.clone(), 1)).collect();
        let c64_refs: Vec<&ProviderHints> = c64.iter().collect();
        c.bench_function(&format!("merge/{label}_4p_compact_preferred"), |b| {
            b.iter(|| merge(black_box(&numa64), black_box(&c64_refs), md))
        });
        // No common preferred mask: each provider needs a different pair.
        let pairs: Vec<ProviderHints> = (0..4u32)
            .map(|p| {
                let mins = (0..16u32)
                    .map(|k| {
                        NumaMask::from_nodes([id(4 * k + p % 4), id((4 * k + p + 1) % 64)]).unwrap()
                    })
                    .collect();
                compact(mins, 1)
            })
            .collect();
        let pairs_refs: Vec<&ProviderHints> = pairs.iter().collect();
        c.bench_function(&format!("merge/{label}_4p_compact_none_preferred"), |b| {
            b.iter(|| merge(black_box(&numa64), black_box(&pairs_refs), md))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
