//! What topomgr adds to a container's creation as the runtime's NRI plugin,
//! in process: a CreateContainer request (the pod sandbox and container as
//! containerd describes them: a Guaranteed pod's cgroup parent, 1 CPU, 1 GiB)
//! to the answer (the container's adjustment and the shared containers'
//! updates), through the daemon's own code: `topomgr_daemon::nri::Face` over
//! a state thread (journal and group commit) and the real CPU and memory
//! provider `.so` files on their provider threads, on the repository's
//! example machine (`examples/machines/2s4n`: 2 sockets, 4 NUMA nodes,
//! 16 CPUs), with the state directory on tmpfs (`/dev/shm`) and on the
//! target directory's disk (each admission is made durable, `fdatasync`,
//! before it is answered). After each measured create the container is
//! stopped (not measured), which releases it.
//!
//! - `nri_create/<place>/alone`: no other container;
//! - `nri_create/<place>/beside_50_shared`: 50 Burstable containers already
//!   placed, so every answer also updates their 50 cpusets.
//!
//! After criterion's estimates it prints the 50th/99th percentile and the
//! maximum of 2000 more creates per case (criterion reports means and
//! medians only). Run: `cargo bench -p topomgr-bench --bench nri`.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use topomgr_daemon::nri::{Face, NriStatus};
use topomgr_engine::admission::Admitter;
use topomgr_node::setup::config::{HostConfig, ProviderEntry};
use topomgr_node::setup::AdmitterParts;
use topomgr_nri::api::{
    Container, ContainerState, LinuxContainer, LinuxCpu, LinuxMemory, LinuxPodSandbox,
    LinuxResources, OptionalInt64, OptionalUInt64, PodSandbox,
};

use topomgr_bench::workspace_root;

mod support;

/// A face over a fresh state thread with its state under `root`.
fn face(tag: &str, root: &Path) -> (Face, tokio::runtime::Runtime) {
    let dir = root.join(format!("topomgr-bench-nri-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create bench dir");
    let plugins =
        topomgr_bench::build_release_plugins(&["topomgr-provider-cpu", "topomgr-provider-memory"]);
    let machine = topomgr_discovery::discover(&workspace_root().join("examples/machines/2s4n/sys"))
        .expect("discover the example machine");
    let entry = |lib: &str, config: serde_json::Value| ProviderEntry {
        library: plugins[lib].to_string_lossy().into_owned(),
        enabled: true,
        config,
        defined_in: "bench".into(),
        config_dir: Default::default(),
    };
    let cfg = HostConfig {
        policy: "single-numa-node".to_owned(),
        providers: [
            (
                "cpu".to_owned(),
                entry(
                    "topomgr_provider_cpu",
                    serde_json::json!({"policy": "static", "reserved_cpus": "0"}),
                ),
            ),
            (
                "memory".to_owned(),
                entry(
                    "topomgr_provider_memory",
                    serde_json::json!({"policy": "static", "reserved_memory": {"0": {"memory": "512Mi"}}}),
                ),
            ),
        ]
        .into(),
        ..HostConfig::default()
    };
    let parts = AdmitterParts::from_config(&cfg, &machine).expect("load the providers");
    // As the daemon runs them: each on its own thread behind the deadline.
    let providers = parts
        .providers
        .into_iter()
        .map(|p| {
            p.with_deadline(Duration::from_secs(10))
                .expect("provider thread")
        })
        .collect();
    let admitter = Admitter::new(&machine, parts.policy, parts.scope, providers);
    let face = Face::with_state_thread(
        admitter,
        &machine,
        &dir.join("state"),
        &dir.join("cgroup"),
        NriStatus::enabled(Path::new("/run/nri.sock"), None),
    )
    .expect("start the state thread");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    (face, rt)
}

fn pod(n: u32, guaranteed: bool) -> PodSandbox {
    let uid = format!("b0000000-0000-4000-8000-{n:012}");
    let parent = if guaranteed {
        format!("/kubepods/pod{uid}")
    } else {
        format!("/kubepods/burstable/pod{uid}")
    };
    PodSandbox {
        id: format!("sandbox-{n}"),
        name: format!("pod-{n}"),
        uid,
        namespace: "bench".into(),
        linux: Some(LinuxPodSandbox {
            cgroup_parent: parent,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A container as containerd describes it: `shares`, `quota` (µs per
/// 100 ms), `memory` bytes.
fn container(id: &str, pod: &PodSandbox, shares: u64, quota: i64, memory: i64) -> Container {
    Container {
        id: id.into(),
        pod_sandbox_id: pod.id.clone(),
        name: "app".into(),
        state: ContainerState::ContainerCreated as i32,
        linux: Some(LinuxContainer {
            resources: Some(LinuxResources {
                cpu: Some(LinuxCpu {
                    shares: Some(OptionalUInt64 { value: shares }),
                    quota: (quota > 0).then_some(OptionalInt64 { value: quota }),
                    period: Some(OptionalUInt64 { value: 100_000 }),
                    ..Default::default()
                }),
                memory: Some(LinuxMemory {
                    limit: (memory > 0).then_some(OptionalInt64 { value: memory }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// One measured CreateContainer of a Guaranteed 1-CPU container, then its
/// stop (not measured).
fn create_and_stop(face: &Face, rt: &tokio::runtime::Runtime, i: u64) -> Duration {
    let p = pod(100_000 + (i % 1000) as u32, true);
    let c = container(&format!("g-{i}"), &p, 1024, 100_000, 1 << 30);
    let start = Instant::now();
    let answer = rt
        .block_on(face.create(p.clone(), c.clone()))
        .expect("admitted");
    let took = start.elapsed();
    assert!(answer.adjust.is_some());
    rt.block_on(face.stop(p, c)).expect("stopped");
    took
}

fn percentiles(name: &str, face: &Face, rt: &tokio::runtime::Runtime) {
    const N: usize = 2000;
    let mut times: Vec<Duration> = (0..N as u64)
        .map(|i| create_and_stop(face, rt, 1_000_000 + i))
        .collect();
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name}: CreateContainer to its answer over {N} creates: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        ms(times[N / 2]),
        ms(times[N * 99 / 100]),
        ms(times[N - 1])
    );
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("nri_create");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(5));
    let mut tails = Vec::new();
    for (place, root) in support::places() {
        for shared in [0usize, 50] {
            let case = if shared == 0 {
                "alone".to_owned()
            } else {
                format!("beside_{shared}_shared")
            };
            let (face, rt) = face(&format!("{place}-{case}"), &root);
            for k in 0..shared {
                let p = pod(k as u32, false);
                rt.block_on(face.create(p.clone(), container(&format!("b-{k}"), &p, 102, 0, 0)))
                    .expect("a shared container is placed");
            }
            let name = format!("{place}/{case}");
            g.bench_function(&name, |b| {
                b.iter_custom(|iters| (0..iters).map(|i| create_and_stop(&face, &rt, i)).sum())
            });
            tails.push((name, face, rt));
        }
    }
    g.finish();
    for (name, face, rt) in &tails {
        percentiles(name, face, rt);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
