//! Reading a Pod manifest as the daemon reads every `POST /v1/pods` body:
//! YAML (or JSON) parsed under the node budget, strict field validation
//! against the Pod's schema, the typed read and the API server's resource
//! checks ([`topomgr_manifest::parse_pods`]).
//!
//! - `manifest/parse/guaranteed_yaml`: the one-container Guaranteed pod the
//!   daemon benches admit (10 lines of YAML);
//! - `manifest/parse/guaranteed_json`: the same pod as JSON.
//!
//! Run: `cargo bench -p topomgr-bench --bench manifest`.

mod support;

use criterion::{criterion_group, criterion_main, Criterion};

fn bench(c: &mut Criterion) {
    let yaml = support::manifest("bench-1", support::EXCLUSIVE);
    let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"bench-1","uid":"bench-1"},"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"1","memory":"1Gi"}}}]}}"#;
    let mut g = c.benchmark_group("manifest/parse");
    for (name, text) in [
        ("guaranteed_yaml", yaml.as_str()),
        ("guaranteed_json", json),
    ] {
        assert_eq!(
            topomgr_manifest::parse_pods(text, "bench")
                .expect("the bench manifest reads")
                .len(),
            1
        );
        g.bench_function(name, |b| {
            b.iter(|| topomgr_manifest::parse_pods(std::hint::black_box(text), "bench"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
