//! The NodeResourceTopology push against a real API server (etcd and
//! kube-apiserver of `.ci/install-kubernetes`, started by
//! `topomgr_runtime_harness::ApiServer`, the harness of the `kube_api::`
//! tests; the NRT CRD and `packaging/kubernetes/rbac.yaml` applied, topomgr
//! authenticated as its service account): the daemon of the other benches
//! (`topomgr_daemon::run` in this process, the real CPU provider `.so` on
//! the example 2-socket machine, state on tmpfs) with `[kubernetes]`
//! pushing the object at the default `nrt_min_interval_ms` (200 ms).
//!
//! - **push latency**: from an admission's (or release's) answer to the
//!   object on the API server showing it (its pod fingerprint changed),
//!   read by polling the object every 2 ms as the admin; each change comes
//!   after the rate limit's interval has passed (an isolated change), and
//!   then again for changes 50 ms after the previous push (inside the
//!   interval, so they wait for its end);
//! - **API requests per admission under a burst**: rounds of 15 admissions
//!   of 1-CPU Guaranteed pods (every exclusive CPU) and their 15 releases,
//!   as fast as the client sends them; the applies are counted by the API
//!   server itself (`apiserver_request_total{resource="noderesourcetopologies",verb="APPLY"}`),
//!   and the last state is checked on the API server.
//!
//! Figures are printed (no criterion: one run is minutes of a real API
//! server). Without the binaries or `openssl` it says so and measures
//! nothing. Run: `cargo bench -p topomgr-bench --bench nrt_push`.

use std::path::Path;
use std::time::{Duration, Instant};

use topomgr_bench::workspace_root;
use topomgr_client::http::Client;
use topomgr_runtime_harness::ApiServer;

mod support;

/// The node (and object) name.
const NODE: &str = "worker-1";
/// The object's path.
const NRT: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-1";
/// The push's rate limit (the config's default `nrt_min_interval_ms`).
const MIN_INTERVAL: Duration = Duration::from_millis(200);
/// Changes measured per latency case.
const CHANGES: usize = 40;
/// Rounds of the burst (15 admissions and 15 releases each).
const ROUNDS: usize = 4;
/// Exclusive CPUs of the example machine (16, CPU 0 reserved).
const EXCLUSIVE_CPUS: usize = 15;

/// An admin's client of the API server (topomgr's own HTTP client).
struct Reader {
    rt: tokio::runtime::Runtime,
    client: topomgr_kube::ApiClient,
}

impl Reader {
    fn new(api: &ApiServer) -> Reader {
        let path = api.dir.join("reader.kubeconfig");
        let text = std::fs::read_to_string(api.kubeconfig())
            .expect("read topomgr's kubeconfig")
            .replace("topomgr-token", "admin-token");
        std::fs::write(&path, text).expect("write the reader's kubeconfig");
        let access = topomgr_kube::Access::load(&topomgr_kube::Source::Kubeconfig(path))
            .expect("the reader's kubeconfig");
        Reader {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
            client: topomgr_kube::ApiClient::new(access).expect("a client"),
        }
    }

    fn get(&mut self, path: &str) -> Option<serde_json::Value> {
        let r = self
            .rt
            .block_on(
                self.client
                    .send(topomgr_kube::Method::GET, path, None, Vec::new()),
            )
            .ok()?;
        r.is_success()
            .then(|| serde_json::from_slice(&r.body).ok())
            .flatten()
    }

    /// The object's pod fingerprint, if the object is there.
    fn fingerprint(&mut self) -> Option<String> {
        let o = self.get(NRT)?;
        o["attributes"]
            .as_array()?
            .iter()
            .find(|a| a["name"] == "nodeTopologyPodsFingerprint")
            .and_then(|a| a["value"].as_str())
            .map(str::to_owned)
    }

    /// Wait until the fingerprint differs from `old`; (the new one, when).
    fn changed_from(&mut self, old: &str, limit: Duration) -> (String, Instant) {
        let start = Instant::now();
        loop {
            if let Some(f) = self.fingerprint().filter(|f| f != old) {
                return (f, Instant::now());
            }
            assert!(
                start.elapsed() < limit,
                "the object did not change within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// The applies of the object the API server counted so far.
fn applies(api: &ApiServer) -> u64 {
    let metrics = api.kubectl(&["get", "--raw", "/metrics"]);
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"noderesourcetopologies\"")
                && l.contains("verb=\"APPLY\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn admit(c: &mut Client, uid: &str) {
    let r = c
        .admit(&support::manifest(uid, support::EXCLUSIVE))
        .expect("admit");
    assert!(
        r.status == 200 && r.body.windows(15).any(|w| w == b"\"admitted\":true"),
        "admit failed: {}",
        String::from_utf8_lossy(&r.body)
    );
}

fn release(c: &mut Client, uid: &str) {
    let r = c.release(uid).expect("release");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// Latency of `CHANGES` changes, each `gap` after the previous one was on
/// the API server (an admission, then its release, in turn).
fn latencies(c: &mut Client, reader: &mut Reader, gap: Duration) -> Vec<Duration> {
    let mut current = reader.fingerprint().expect("the object is there");
    let mut out = Vec::with_capacity(CHANGES);
    for i in 0..CHANGES {
        std::thread::sleep(gap);
        if i % 2 == 0 {
            admit(c, "lat");
        } else {
            release(c, "lat");
        }
        let answered = Instant::now();
        let (new, seen) = reader.changed_from(&current, Duration::from_secs(10));
        out.push(seen - answered);
        current = new;
    }
    out.sort();
    out
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Err(e) = topomgr_runtime_harness::require_kubernetes() {
        println!(
            "nrt_push: skipped, {}: {e}",
            topomgr_runtime_harness::API_SERVER_NEEDS
        );
        return;
    }
    if !std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        println!(
            "nrt_push: skipped, {}: no openssl",
            topomgr_runtime_harness::API_SERVER_NEEDS
        );
        return;
    }
    let root = workspace_root();
    let dir = std::env::temp_dir().join(format!("topomgr-bench-nrt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let api = ApiServer::start(
        dir.join("api"),
        &[
            &root.join("tests/fixtures/nrt/crd.yaml"),
            &root.join("packaging/kubernetes/rbac.yaml"),
        ],
    );
    let node = api.dir.join("node.yaml");
    std::fs::write(
        &node,
        format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {NODE}\n"),
    )
    .expect("write the Node");
    api.kubectl(&["apply", "-f", &node.to_string_lossy()]);

    let access = topomgr_kube::Access::load(&topomgr_kube::Source::Kubeconfig(api.kubeconfig()))
        .expect("topomgr's kubeconfig");
    let kube = topomgr_daemon::KubeSettings {
        client: topomgr_kube::ApiClient::new(access).expect("topomgr's client"),
        push: Some(topomgr_kube::nrt_push::PushSettings {
            node_name: NODE.to_owned(),
            min_interval: MIN_INTERVAL,
            retry_min: Duration::from_millis(200),
            retry_max: Duration::from_secs(1),
            delete_on_shutdown: false,
        }),
        events: false,
    };
    let plugin = support::cpu_plugin();
    let [(_, tmpfs), _] = support::places();
    let socket =
        support::start_daemon_with("nrt", Path::new(&tmpfs), &plugin, Some((kube, NODE.into())));
    let mut c = Client::new(&socket);
    let mut reader = Reader::new(&api);
    let start = Instant::now();
    while reader.fingerprint().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the object never appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    println!("nrt_push: push latency, from an admission's or release's answer to the object on the API server ({CHANGES} changes each)");
    for (case, gap) in [
        (
            "isolated (after the rate limit's interval)",
            MIN_INTERVAL + Duration::from_millis(100),
        ),
        ("50 ms after the previous push", Duration::from_millis(50)),
    ] {
        let l = latencies(&mut c, &mut reader, gap);
        println!(
            "  {case}: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
            percentile(&l, 50).as_secs_f64() * 1e3,
            percentile(&l, 90).as_secs_f64() * 1e3,
            l[l.len() - 1].as_secs_f64() * 1e3,
        );
    }

    std::thread::sleep(MIN_INTERVAL * 3);
    let before = applies(&api);
    let burst = Instant::now();
    for round in 0..ROUNDS {
        for i in 0..EXCLUSIVE_CPUS {
            admit(&mut c, &format!("b{round}-{i}"));
        }
        for i in 0..EXCLUSIVE_CPUS {
            release(&mut c, &format!("b{round}-{i}"));
        }
    }
    let took = burst.elapsed();
    // The last apply (at most one interval after the burst) and the API
    // server's count of it.
    std::thread::sleep(MIN_INTERVAL * 3);
    let applied = applies(&api) - before;
    let admissions = ROUNDS * EXCLUSIVE_CPUS;
    let served: serde_json::Value = c
        .get("/v1/noderesourcetopology")
        .expect("the daemon's object")
        .json()
        .expect("JSON");
    let pushed = reader.get(NRT).expect("the object");
    let last_state =
        pushed["zones"] == served["zones"] && pushed["attributes"] == served["attributes"];
    println!(
        "nrt_push: burst of {admissions} admissions and {admissions} releases in {:.0} ms: {applied} applies ({:.3} per admission, {:.3} per change); the last state on the API server: {last_state}",
        took.as_secs_f64() * 1e3,
        applied as f64 / admissions as f64,
        applied as f64 / (2 * admissions) as f64,
    );
    assert!(last_state, "the last state is not on the API server");
    drop(api);
    let _ = std::fs::remove_dir_all(&dir);
}
