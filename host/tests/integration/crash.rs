//! Crash test of `topomgr serve`: a storm of admissions and releases from
//! several client threads while the daemon is killed with SIGKILL at random
//! moments, restarted each time, and checked:
//! - every admission a client saw acknowledged is present after the restart,
//!   with the same devices; every acknowledged release stays released;
//! - the ledger invariant: no widget and no exclusive CPU is held by two
//!   pods (the SDK's example widget provider has 8 widgets on the example
//!   4-node machine and the real CPU provider hands out exclusive CPUs, so
//!   double assignment shows), and nothing is held for a pod that is gone:
//!   the daemon's exclusive CPUs are exactly those of the listed pods;
//! - released widgets are free again (at the end every pod is released and 8
//!   one-widget pods must all be admitted).
//!
//! A request in flight at the kill may or may not have happened; its pod is
//! then taken as the daemon reports it.
//!
//! The state is a snapshot plus a journal of records. A `kill -9` never
//! tears a `write`, so before some restarts the test tears the journal's
//! end itself, as a power cut during an append would (the next record cut
//! short, its last blocks never written, zeros where the file grew): such a
//! tail was never acknowledged, and the restarted daemon must cut it off
//! and lose nothing.

use crate::common;

use std::io::Write as _;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use proptest::prelude::{Rng as _, RngExt as _};
use proptest::test_runner::{RngAlgorithm, TestRng};
use topomgr_client::http::Client;
use topomgr_node::api::{Admission, Admissions, Health, HealthStatus, PodList};

const KILLS: usize = 50;
const THREADS: usize = 4;
const PODS_PER_THREAD: usize = 4;
const WIDGETS: usize = 8;

/// What the client side knows about one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Known {
    /// Acknowledged admitted with these widgets.
    Admitted(Vec<String>),
    /// Acknowledged absent (released, rejected, or never admitted).
    Absent,
    /// A request was in flight when the daemon died.
    Unknown,
}

/// The random choices of a run (storm, kill times, tears) from `seed`:
/// proptest's ChaCha generator, so one seed gives one sequence of choices.
fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&seed.to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// The environment variable that fixes the seed (to replay a run's choices).
const SEED_ENV: &str = "TOPOMGR_CRASH_SEED";

/// Tear the end of the journal in `state` the way kill `n` chooses, as a
/// power cut during the next append would (a `kill -9` never tears a
/// `write`); returns what was done.
fn tear(state: &Path, n: usize, rng: &mut TestRng) -> &'static str {
    let path = state.join("state.journal");
    let Ok(mut bytes) = fs::read(&path) else {
        return "no journal";
    };
    let Ok(contents) = topomgr_node::persist::journal::parse(&path, &bytes) else {
        return "no journal";
    };
    let Some(last) = contents.records.last() else {
        return "no record";
    };
    // The next record's frame (its payload as long as the last one's).
    let next = topomgr_node::persist::journal::frame(last.seq + 1, &last.payload);
    let what = match n % 3 {
        0 => {
            let cut = rng.random_range(1..next.len());
            bytes.extend_from_slice(&next[..cut]);
            "the next record cut short"
        }
        1 => {
            // All of it, but from a block boundary on never written (at
            // least a payload byte: a frame that reads whole is a record).
            let start = bytes.len();
            bytes.extend_from_slice(&next);
            let end = bytes.len();
            let boundaries: Vec<usize> = (start / 512 + 1..=end / 512)
                .map(|b| b * 512)
                .filter(|&b| b + 2 <= end)
                .collect();
            let from = match boundaries.len() {
                0 => start,
                k => boundaries[rng.random_range(0..k)],
            };
            bytes[from..].fill(0);
            "the next record with its last blocks never written"
        }
        _ => {
            bytes.extend(std::iter::repeat_n(0u8, rng.random_range(1..=1000)));
            "zeros where the file grew and nothing was written"
        }
    };
    fs::write(&path, bytes).unwrap();
    what
}

fn uid(t: usize, i: usize) -> String {
    format!("crash-{t}-{i}")
}

fn manifest(uid: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {uid}\n  namespace: crash\n  uid: {uid}\nspec:\n  containers:\n  - name: app\n    resources:\n      limits:\n        cpu: \"1\"\n        memory: 1Gi\n        example.com/widget: 1\n"
    )
}

fn cpus_of(pod: &Admission) -> topomgr_sdk::CpuSet {
    let c = &pod.containers[0];
    assert!(c.exclusive, "{pod:?}");
    c.cpus.clone()
}

fn widgets_of(pod: &Admission) -> Vec<String> {
    pod.containers[0]
        .devices
        .get("example.com/widget")
        .cloned()
        .unwrap_or_default()
}

fn start(config: &Path, socket: &Path) -> Child {
    let mut child = Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(config)
        .arg("serve")
        .arg("--socket")
        .arg(socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start topomgr serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if Client::new(socket)
            .get("/v1/health")
            .is_ok_and(|r| r.status == 200)
        {
            return child;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("daemon did not become ready on {}", socket.display());
}

/// One client thread: flip its pods between admitted and released until a
/// request fails (the daemon was killed).
fn storm(
    socket: PathBuf,
    t: usize,
    mut known: Vec<Known>,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> Vec<Known> {
    let mut rng = rng(seed);
    let mut c = Client::new(&socket);
    while !stop.load(Ordering::Relaxed) {
        let i = rng.random_range(0..PODS_PER_THREAD);
        let u = uid(t, i);
        let admit = known[i] == Known::Absent;
        let before = known[i].clone();
        known[i] = Known::Unknown;
        let resp = if admit {
            c.admit(&manifest(&u))
        } else {
            c.release(&u)
        };
        let Ok(resp) = resp else {
            return known;
        };
        known[i] = match (admit, resp.status) {
            (true, 200) => {
                let v: Admissions = resp.parse().expect("an admission answer");
                let pod = &v.pods[0];
                if pod.admitted {
                    Known::Admitted(widgets_of(pod))
                } else {
                    let reason = pod.reason.as_deref();
                    assert_eq!(reason, Some("TopologyAffinityError"), "{pod:?}");
                    Known::Absent
                }
            }
            (false, 200) => Known::Absent,
            (_, s) => panic!(
                "pod {u}: {} answered {s}: {} (was {before:?})",
                if admit { "admit" } else { "release" },
                resp.error_message()
            ),
        };
    }
    known
}

/// Check the restarted daemon against what clients saw; returns the truth.
fn verify(socket: &Path, known: &[Vec<Known>], kill: usize) -> Vec<Vec<Known>> {
    let mut c = Client::new(socket);
    let listed: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    let health: Health = c.get("/v1/health").unwrap().parse().unwrap();
    let mut present: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut exclusive = topomgr_sdk::CpuSet::new();
    for pod in &listed.pods {
        let w = widgets_of(pod);
        assert_eq!(w.len(), 1, "after kill {kill}: {pod:?}");
        for id in &w {
            assert!(
                taken.insert(id.clone()),
                "after kill {kill}: widget {id} assigned twice: {listed:?}"
            );
        }
        let cpus = cpus_of(pod);
        assert!(
            cpus.intersection(&exclusive).is_empty(),
            "after kill {kill}: CPUs {cpus} held twice: {listed:?}"
        );
        exclusive = exclusive.union(&cpus);
        present.insert(pod.uid.clone(), w);
    }
    // The ledger holds exactly what the listed pods hold: nothing for a
    // pod that is gone.
    assert_eq!(
        health.exclusive_cpus, exclusive,
        "after kill {kill}: {health:?}"
    );
    assert_eq!(
        health.status,
        HealthStatus::Ok,
        "after kill {kill}: {health:?}"
    );
    let mut truth = Vec::new();
    for (t, pods) in known.iter().enumerate() {
        let mut row = Vec::new();
        for (i, k) in pods.iter().enumerate() {
            let u = uid(t, i);
            match (k, present.get(&u)) {
                (Known::Admitted(w), Some(p)) => {
                    assert_eq!(w, p, "after kill {kill}: pod {u} changed widgets")
                }
                (Known::Admitted(w), None) => {
                    panic!("after kill {kill}: acknowledged pod {u} ({w:?}) is gone")
                }
                (Known::Absent, Some(p)) => {
                    panic!("after kill {kill}: released pod {u} is back with {p:?}")
                }
                (Known::Absent, None) | (Known::Unknown, _) => {}
            }
            row.push(match present.get(&u) {
                Some(w) => Known::Admitted(w.clone()),
                None => Known::Absent,
            });
        }
        truth.push(row);
    }
    truth
}

#[test]
fn kill_9_storm_loses_nothing_and_never_double_assigns() {
    let p = common::plugins();
    let dir = common::scratch_dir("crash");
    let config = dir.join("topomgr.toml");
    fs::write(
        &config,
        format!(
            "policy = \"single-numa-node\"\nsysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n[providers.widgets]\nlibrary = \"{}\"\n[providers.widgets.config]\nwidgets_per_node = 2\n[providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\npolicy = \"static\"\nreserved_cpus = \"0\"\n",
            common::workspace_root().join("examples/machines/2s4n/sys").display(),
            p.widgets.display(),
            common::cpu_plugin().display()
        ),
    )
    .unwrap();
    let socket = dir.join("t.sock");
    let seed = match std::env::var(SEED_ENV) {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|e| panic!("{SEED_ENV}={s:?}: not a seed ({e})")),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(42),
    };
    println!("crash test seed {seed} (replay its choices with {SEED_ENV}={seed})");
    let mut rng = rng(seed);
    let mut known: Vec<Vec<Known>> = vec![vec![Known::Absent; PODS_PER_THREAD]; THREADS];
    let (mut acked_ops, mut kills) = (0usize, 0usize);
    let mut torn = Vec::new();
    let started = Instant::now();
    while kills < KILLS {
        let mut child = start(&config, &socket);
        if kills > 0 {
            known = verify(&socket, &known, kills);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = known
            .iter()
            .cloned()
            .enumerate()
            .map(|(t, k)| {
                let (s, stop, seed) = (socket.clone(), Arc::clone(&stop), rng.next_u64());
                std::thread::spawn(move || storm(s, t, k, seed, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.random_range(10..130)));
        child.kill().expect("kill -9 the daemon");
        let _ = child.wait();
        kills += 1;
        if kills % 5 == 0 {
            torn.push(tear(&dir.join("state"), kills / 5, &mut rng));
        }
        stop.store(true, Ordering::Relaxed);
        let before = known.clone();
        known = handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect();
        acked_ops += before
            .iter()
            .flatten()
            .zip(known.iter().flatten())
            .filter(|(a, b)| a != b && **b != Known::Unknown)
            .count();
    }
    // Last restart: check, then release everything and prove all widgets are free.
    let child = start(&config, &socket);
    let truth = verify(&socket, &known, kills);
    let mut c = Client::new(&socket);
    for (t, row) in truth.iter().enumerate() {
        for (i, k) in row.iter().enumerate() {
            if matches!(k, Known::Admitted(_)) {
                assert_eq!(c.release(&uid(t, i)).unwrap().status, 200);
            }
        }
    }
    let mut all = BTreeSet::new();
    for n in 0..WIDGETS {
        let v: Admissions = c
            .admit(&manifest(&format!("free-{n}")))
            .unwrap()
            .parse()
            .unwrap();
        assert!(v.pods[0].admitted, "widget {n} not free: {v:?}");
        all.extend(widgets_of(&v.pods[0]));
    }
    assert_eq!(all.len(), WIDGETS);
    let health: Health = c.get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(health.pods, WIDGETS, "{health:?}");
    let mut child = child;
    let _ = child.kill();
    let _ = child.wait();
    // Written to the stderr handle itself, not through `eprintln!`, which the
    // test harness captures: CI logs show the kill count of every run.
    let _ = writeln!(
        std::io::stderr(),
        "crash test (seed {seed}): survived {kills} kill -9s ({} with a torn journal end: {}), {acked_ops} pods changed state under acknowledged requests, {:.1}s",
        torn.len(),
        torn.join(", "),
        started.elapsed().as_secs_f64()
    );
}
