//! GPU provider benchmarks: go-gpuallocator's best-effort choice, the
//! bounded search (`choice::besteffort`) beside the literal port of
//! upstream's exhaustive partition search (`choice::exhaustive`) on inputs
//! the latter can finish.
//!
//! Machines: a 16-GPU DGX-2-like topology (NVSwitch plus a PCIe tree: GPUs
//! are twins in pairs), a 16-GPU topology with no twins at all (every pair
//! score distinct: the search's worst case), and upstream's DGX-1 Volta
//! fixture (8 GPUs). Every GPU is available, in index order.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use topomgr_provider_gpu::choice::{besteffort, exhaustive, Scores};
use topomgr_provider_gpu::fixtures;

/// 16 GPUs whose pair scores are all distinct (no two GPUs are twins).
fn no_twins_16() -> Scores {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut w = vec![0i64; 16 * 16];
    for a in 0..16 {
        for b in a + 1..16 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = 10 + (x % 1790) as i64;
            w[a * 16 + b] = s;
            w[b * 16 + a] = s;
        }
    }
    Scores::from_fn(16, |a, b| w[a * 16 + b])
}

fn bounded(c: &mut Criterion) {
    let machines = [
        ("dgx2", Scores::from_topology(&fixtures::dgx2())),
        ("no-twins-16", no_twins_16()),
    ];
    let all: Vec<usize> = (0..16).collect();
    for (name, scores) in &machines {
        let mut group = c.benchmark_group(format!("gpu_best_effort_bounded/{name}"));
        for size in 1..=16 {
            group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
                b.iter(|| besteffort::best_effort(scores, black_box(&all), &[], size))
            });
        }
        group.finish();
    }
    let volta = Scores::from_topology(&fixtures::dgx1_volta());
    let eight: Vec<usize> = (0..8).collect();
    let mut group = c.benchmark_group("gpu_best_effort_bounded/dgx1-volta");
    for size in 1..=8 {
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter(|| besteffort::best_effort(&volta, black_box(&eight), &[], size))
        });
    }
    group.finish();
}

fn exhaustive_search(c: &mut Criterion) {
    let volta = Scores::from_topology(&fixtures::dgx1_volta());
    let eight: Vec<usize> = (0..8).collect();
    let mut group = c.benchmark_group("gpu_best_effort_exhaustive/dgx1-volta");
    for size in 1..=8 {
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter(|| exhaustive::best_effort(&volta, black_box(&eight), &[], size))
        });
    }
    group.finish();

    // 16 GPUs: the sizes whose partition count stays below ~3·10⁶ (size 3
    // has 2.2·10⁷ partitions and is left out).
    let dgx2 = Scores::from_topology(&fixtures::dgx2());
    let all: Vec<usize> = (0..16).collect();
    let mut group = c.benchmark_group("gpu_best_effort_exhaustive/dgx2");
    group.sample_size(10);
    for size in [1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16] {
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter(|| exhaustive::best_effort(&dgx2, black_box(&all), &[], size))
        });
    }
    group.finish();
}

criterion_group!(benches, bounded, exhaustive_search);
criterion_main!(benches);
