//! Daemon throughput: admit + release of a one-container Guaranteed pod (1
//! exclusive CPU from the real CPU provider .so, static policy) over the Unix
//! socket, from 1 and from 8 concurrent clients, with the state directory on
//! tmpfs (`/dev/shm`, the daemon's own cost) and on the target directory's
//! disk (every commit fsyncs; concurrent requests share one commit).
//!
//! The daemon runs in this process (`topomgr_daemon::run` on a thread, the
//! same code as `topomgr serve`); clients use `topomgr_client::http`.
//! Run: `cargo bench -p topomgr-bench --bench daemon`. Figures in BENCHMARKS.md.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use topomgr_client::http::Client;

use support::{admit_release, cpu_plugin, manifest, places, start_daemon, EXCLUSIVE};

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
                let m = manifest(&uid, EXCLUSIVE);
                for _ in 0..n {
                    admit_release(&mut c, &uid, &m);
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
    let mut g = c.benchmark_group("daemon_admit_release");
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    for (place, root) in places() {
        let socket = start_daemon(place, &root, &plugin);
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
