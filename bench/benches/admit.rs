//! In-process admission through the real provider plugins (loaded from their
//! release `.so`, as the host does) on the recorded 64-NUMA-node machine.
//!
//! Run: `cargo bench -p topomgr-bench --bench admit`. The bench builds the
//! provider libraries with `cargo build --release` first and unpacks
//! `256ia64-64n2s2c` from `../shared/corpus`; without the corpus it prints
//! `SKIP` and measures nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use criterion::{criterion_group, criterion_main, Criterion};
use topomgr::admission::Admitter;
use topomgr::config::ProviderEntry;
use topomgr::numa::NumaInfo;
use topomgr::policy::{Policy, Scope};
use topomgr::provider::HintProvider;
use topomgr_sdk::{ContainerView, PodView, QosClass};

use topomgr_bench::workspace_root as workspace;

/// `cargo build --release` the providers; returns lib name -> .so path.
fn build_providers() -> BTreeMap<String, PathBuf> {
    topomgr_bench::build_release_plugins(&["topomgr-provider-cpu", "topomgr-provider-memory"])
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
    let machine = topomgr::discover::discover(&sys).expect("discover");
    let state = workspace().join("target/bench-state");
    let entry = |lib: &str, config: serde_json::Value| ProviderEntry {
        library: libs[lib].display().to_string(),
        enabled: true,
        config,
        defined_in: PathBuf::from("bench"),
        config_dir: PathBuf::new(),
    };
    let providers: Vec<Box<dyn HintProvider>> = vec![
        Box::new(
            topomgr::plugin::load_provider(
                "cpu",
                &entry("topomgr_provider_cpu", serde_json::json!({"policy": "static", "reserved_cpus": "0"})),
                &[],
                &machine,
                &state,
            )
            .expect("load cpu"),
        ),
        Box::new(
            topomgr::plugin::load_provider(
                "memory",
                &entry(
                    "topomgr_provider_memory",
                    serde_json::json!({"policy": "static", "reserved_memory": {"0": {"memory": "512Mi"}}}),
                ),
                &[],
                &machine,
                &state,
            )
            .expect("load memory"),
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

criterion_group!(benches, bench);
criterion_main!(benches);
