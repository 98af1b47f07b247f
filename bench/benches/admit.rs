//! In-process admission through the real provider plugins (loaded from their
//! release `.so`, as the host does).
//!
//! - `admit/64n_256cpu_...`: a 4-CPU pod on the recorded 64-NUMA-node
//!   machine (unpacks `256ia64-64n2s2c` from `../shared/corpus`; without the
//!   corpus it prints `SKIP` and measures nothing);
//! - `admit/many_containers/...`: admit + release of one Guaranteed pod of
//!   N containers (10 millicores and 1 MiB each) on the repository's example
//!   machine (`examples/machines/2s4n`), container scope, best-effort, every
//!   provider on its own thread behind the deadline as `topomgr admit` and
//!   the daemon call it: through the mock provider alone and through
//!   cpu + memory + mock.
//!
//! Run: `cargo bench -p topomgr-bench --bench admit`. The bench builds the
//! provider libraries with `cargo build --release` first.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use topomgr_daemon::metrics::Metrics;
use topomgr_engine::admission::Admitter;
use topomgr_engine::numa::NumaInfo;
use topomgr_engine::policy::{Policy, Scope};
use topomgr_engine::provider::{LoadedProvider, ProviderObserver};
use topomgr_node::setup::config::ProviderEntry;
use topomgr_sdk::{ContainerView, PodView, QosClass};

use topomgr_bench::workspace_root as workspace;

/// `cargo build --release` the providers; returns lib name -> .so path.
fn build_providers() -> BTreeMap<String, PathBuf> {
    topomgr_bench::build_release_plugins(&[
        "topomgr-provider-cpu",
        "topomgr-provider-memory",
        "topomgr-mock-provider",
    ])
}

/// The provider entry of library `lib` with `config`.
fn entry(libs: &BTreeMap<String, PathBuf>, lib: &str, config: serde_json::Value) -> ProviderEntry {
    ProviderEntry {
        library: libs[lib].display().to_string(),
        enabled: true,
        config,
        defined_in: PathBuf::from("bench"),
        config_dir: PathBuf::new(),
    }
}

/// Loads provider `name` from library `lib`.
fn load(
    libs: &BTreeMap<String, PathBuf>,
    name: &str,
    lib: &str,
    config: serde_json::Value,
    machine: &topomgr_sdk::Machine,
) -> LoadedProvider {
    let state = workspace().join("target/bench-state");
    topomgr_node::setup::plugin::load_provider(
        name,
        &entry(libs, lib, config),
        &[],
        machine,
        &state,
    )
    .unwrap_or_else(|e| panic!("load {name}: {e}"))
}

fn unpack(name: &str) -> Option<PathBuf> {
    let corpus = workspace().join("../shared/corpus/hwloc-linux");
    if !corpus.is_dir() {
        eprintln!("SKIP: {} is absent", corpus.display());
        return None;
    }
    let dest = workspace().join("target/bench-corpus");
    if !dest.join(name).join("sys").is_dir() {
        std::fs::create_dir_all(&dest).unwrap();
        let ok = Command::new("tar")
            .arg("xjf")
            .arg(corpus.join(format!("{name}.tar.bz2")))
            .arg("-C")
            .arg(&dest)
            .status()
            .unwrap()
            .success();
        assert!(ok, "tar failed");
    }
    Some(dest.join(name).join("sys"))
}

fn pod(uid: &str) -> PodView {
    let res = BTreeMap::from([("cpu".to_string(), 4000), ("memory".to_string(), 1 << 30)]);
    PodView::new(uid, "bench", "default", QosClass::Guaranteed).with_containers(vec![
        ContainerView::new("app")
            .with_requests(res.clone())
            .with_limits(res),
    ])
}

fn bench(c: &mut Criterion) {
    let Some(sys) = unpack("256ia64-64n2s2c") else {
        return;
    };
    let libs = build_providers();
    let machine = topomgr_discovery::discover(&sys).expect("discover");
    let providers = vec![
        load(&libs, "cpu", "topomgr_provider_cpu", cpu_config(), &machine),
        load(
            &libs,
            "memory",
            "topomgr_provider_memory",
            memory_config(),
            &machine,
        ),
    ];
    let numa = NumaInfo::from_machine(&machine).unwrap();
    let policy = Policy::new("single-numa-node", &BTreeMap::new(), numa).unwrap();
    let mut adm = Admitter::new(&machine, policy, Scope::Pod, providers);
    let p = pod("bench-pod");
    c.bench_function("admit/64n_256cpu_cpu+memory_4cpu_pod_admit+release", |b| {
        b.iter(|| {
            let r = adm.admit(&p);
            assert!(r.admitted, "{:?}", r.message);
            adm.release(&p.uid).unwrap();
        })
    });
}

fn cpu_config() -> serde_json::Value {
    serde_json::json!({"policy": "static", "reserved_cpus": "0"})
}

fn memory_config() -> serde_json::Value {
    serde_json::json!({"policy": "static", "reserved_memory": {"0": {"memory": "512Mi"}}})
}

/// A Guaranteed pod of `n` containers of 10 millicores and 1 MiB each.
fn many(uid: &str, n: usize) -> PodView {
    let res = BTreeMap::from([("cpu".to_string(), 10), ("memory".to_string(), 1 << 20)]);
    PodView::new(uid, "many", "default", QosClass::Guaranteed).with_containers(
        (0..n)
            .map(|i| {
                ContainerView::new(format!("c{i}"))
                    .with_requests(res.clone())
                    .with_limits(res.clone())
            })
            .collect(),
    )
}

fn many_containers(c: &mut Criterion) {
    let libs = build_providers();
    let sys = workspace().join("examples/machines/2s4n/sys");
    let machine = topomgr_discovery::discover(&sys).expect("discover");
    let metrics = Arc::new(Metrics::new());
    let timed = |p: LoadedProvider| -> LoadedProvider {
        p.with_deadline(Duration::from_secs(60))
            .unwrap()
            .with_observer(Arc::clone(&metrics) as Arc<dyn ProviderObserver>)
    };
    let mock = || {
        load(
            &libs,
            "mock",
            "topomgr_mock_provider",
            serde_json::json!({}),
            &machine,
        )
    };
    let sets: [(&str, Vec<LoadedProvider>); 2] = [
        ("mock", vec![timed(mock())]),
        (
            "cpu+memory+mock",
            vec![
                timed(load(
                    &libs,
                    "cpu",
                    "topomgr_provider_cpu",
                    cpu_config(),
                    &machine,
                )),
                timed(load(
                    &libs,
                    "memory",
                    "topomgr_provider_memory",
                    memory_config(),
                    &machine,
                )),
                timed(mock()),
            ],
        ),
    ];
    let mut group = c.benchmark_group("admit/many_containers");
    group.sample_size(10);
    for (label, providers) in sets {
        let numa = NumaInfo::from_machine(&machine).unwrap();
        let policy = Policy::new("best-effort", &BTreeMap::new(), numa).unwrap();
        let mut adm = Admitter::new(&machine, policy, Scope::Container, providers);
        for n in [16, 128, 1024] {
            let p = many("many", n);
            group.bench_with_input(BenchmarkId::new(label, n), &p, |b, p| {
                b.iter(|| {
                    let r = adm.admit(p);
                    assert!(r.admitted, "{:?}", r.message);
                    adm.release(&p.uid).unwrap();
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench, many_containers);
criterion_main!(benches);
