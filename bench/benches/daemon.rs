//! Daemon throughput: admit + release of a one-container Guaranteed pod (1
//! exclusive CPU from the real CPU provider .so, static policy) over the Unix
//! socket, from 1 and from 8 concurrent clients, with the state directory on
//! tmpfs (`/dev/shm`, the daemon's own cost) and on the target directory's
//! disk (every commit fsyncs; concurrent requests share one commit).
//!
//! The daemon runs in this process (`topomgr::daemon::run` on a thread, the
//! same code as `topomgr serve`); clients use `topomgr::daemon::client`.
//! Run: `cargo bench -p topomgr-bench --bench daemon`. Figures in BENCHMARKS.md.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use topomgr::config::ProviderEntry;
use topomgr::daemon::client::Client;
use topomgr::daemon::{self, Daemon};
use topomgr::policy::{NumaInfo, Policy, Scope};
use topomgr::provider::HintProvider;
use topomgr::state_lock::StateLock;

use topomgr_bench::workspace_root;

/// Build the CPU provider in release mode and return its .so.
fn cpu_plugin() -> PathBuf {
    topomgr_bench::build_release_plugins(&["topomgr-provider-cpu"])
        .remove("topomgr_provider_cpu")
        .expect("cargo built no CPU provider .so")
}

/// Start a daemon on its own thread; returns its socket.
fn start_daemon(tag: &str, state_root: &Path, plugin: &Path) -> PathBuf {
    let dir = state_root.join(format!("topomgr-bench-daemon-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create bench dir");
    let socket = dir.join("t.sock");
    let state_dir = dir.join("state");
    let lock = StateLock::acquire(&state_dir).expect("lock");
    let machine = topomgr::discover::discover(&workspace_root().join("examples/machines/2s4n/sys"))
        .expect("discover the example machine");
    let numa = NumaInfo::from_machine(&machine).expect("numa");
    let policy = Policy::new("single-numa-node", &Default::default(), numa).expect("policy");
    let entry = ProviderEntry {
        library: plugin.to_string_lossy().into_owned(),
        enabled: true,
        config: serde_json::json!({"policy": "static", "reserved_cpus": "0"}),
        defined_in: PathBuf::from("bench"),
        config_dir: PathBuf::new(),
    };
    let cpu = topomgr::plugin::load_provider("cpu", &entry, &[], &machine, &state_dir.join("cpu"))
        .expect("load the cpu provider");
    let providers: Vec<Box<dyn HintProvider>> = vec![Box::new(cpu)];
    let d = Daemon {
        socket: socket.clone(),
        group: "topomgr".to_owned(),
        provider_timeout: Duration::from_secs(10),
        state_dir,
        cgroup_root: dir.join("cgroup"),
        machine,
        policy,
        scope: Scope::Container,
        providers,
        lock,
    };
    std::thread::spawn(move || daemon::run(d));
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if Client::new(&socket)
            .get("/v1/health")
            .is_ok_and(|r| r.status == 200)
        {
            return socket;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("bench daemon did not start");
}

fn manifest(uid: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {uid}\n  uid: {uid}\nspec:\n  containers:\n  - name: app\n    resources:\n      limits:\n        cpu: \"1\"\n        memory: 1Gi\n"
    )
}

/// `iters` admit+release pairs spread over `clients` threads; wall time.
fn storm(socket: &Path, clients: u64, iters: u64) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|k| {
            let socket = socket.to_path_buf();
            let n = iters / clients + u64::from(k < iters % clients);
            std::thread::spawn(move || {
                let mut c = Client::new(&socket);
                let uid = format!("bench-{k}");
                let m = manifest(&uid);
                for _ in 0..n {
                    let r = c.admit(&m).expect("admit");
                    assert!(
                        r.status == 200 && r.body.windows(15).any(|w| w == b"\"admitted\":true"),
                        "admit failed: {}",
                        String::from_utf8_lossy(&r.body)
                    );
                    let r = c.release(&uid).expect("release");
                    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("client thread");
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let plugin = cpu_plugin();
    let shm = Path::new("/dev/shm");
    let tmpfs = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let disk = workspace_root().join("target");
    let mut g = c.benchmark_group("daemon_admit_release");
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    for (place, root) in [("tmpfs", &tmpfs), ("disk", &disk)] {
        let socket = start_daemon(place, root, &plugin);
        for clients in [1u64, 8] {
            g.bench_function(format!("{place}/clients={clients}"), |b| {
                b.iter_custom(|iters| storm(&socket, clients, iters))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
