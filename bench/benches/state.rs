//! State cost versus pods held: the daemon holds N shared-pool pods (0,
//! 100, 1,000, 2,000; the host's pod table grows, the CPU provider's state
//! does not) and one client admits and releases one exclusive pod, every
//! change durable before its answer. On tmpfs this is the daemon's own
//! cost of a change; the goal is a cost that does not grow with N.
//!
//! Run: `cargo bench -p topomgr-bench --bench state`. Figures in BENCHMARKS.md.

mod support;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use topomgr_client::http::Client;

use support::{admit_release, cpu_plugin, manifest, places, start_daemon, EXCLUSIVE, SHARED};

fn bench(c: &mut Criterion) {
    let plugin = cpu_plugin();
    let mut g = c.benchmark_group("state_admit_release_vs_pods_held");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(5));
    let [(place, root), _] = places();
    for held in [0usize, 100, 1000, 2000] {
        let socket = start_daemon(&format!("state-{held}"), &root, &plugin);
        let mut client = Client::new(&socket);
        for i in 0..held {
            let r = client
                .admit(&manifest(&format!("held-{i}"), SHARED))
                .expect("admit a held pod");
            assert_eq!(r.status, 200);
        }
        let m = manifest("probe", EXCLUSIVE);
        g.bench_with_input(BenchmarkId::new(place, held), &held, |b, _| {
            b.iter(|| admit_release(&mut client, "probe", &m))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
