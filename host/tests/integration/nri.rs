//! `topomgr serve` as a real containerd 1.7's NRI plugin, driven through CRI
//! as the kubelet drives it (the runtime harness: a private containerd with
//! NRI on, busybox-static image, the kubelet's cgroupfs parents), with the
//! real CPU and memory providers on this machine. What each container gets
//! is read from inside it (`/proc/<pid>/status`) and from containerd's own
//! record (CRI ContainerStatus); after every step no CPU is held by two
//! containers, every shared container runs on exactly the shared pool, and
//! nothing is held for a container containerd no longer has.
//!
//! The daemon is configured with the commands of `docs/kubernetes.md`,
//! as written (in a scratch directory instead of `/etc/topomgr`).
//!
//! The machine this runs on has one NUMA node and CPUs 0-1; CPU 0 is
//! reserved, so CPU 1 is the one exclusive CPU.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use topomgr_node::api::{Health, PodList};
use topomgr_runtime_harness::{ContainerSpec, Containerd, CriClient, Pod, PodSpec, Qos};

use crate::common;
use crate::daemon::Daemon;

const NEEDS: &str = "needs root, a cpuset cgroup and containerd 1.7";

/// A fenced block of `docs/kubernetes.md` marked `<!-- nri-test: NAME -->`.
fn doc_block(name: &str) -> String {
    let doc = fs::read_to_string(common::workspace_root().join("docs/kubernetes.md")).unwrap();
    let marker = format!("<!-- nri-test: {name} -->");
    let after = doc
        .split_once(&marker)
        .unwrap_or_else(|| panic!("docs/kubernetes.md has no {marker}"))
        .1;
    let body = after
        .trim_start()
        .split_once('\n')
        .expect("a fenced block follows the marker")
        .1;
    body.split_once("\n```")
        .expect("the block ends")
        .0
        .to_owned()
}

/// `line` as the test runs it: without `sudo`, in `etc` instead of
/// `/etc/topomgr`, on the test daemon's socket.
fn localize(line: &str, etc: &Path, socket: &Path) -> String {
    line.replace("sudo ", "")
        .replace("/etc/topomgr", &etc.display().to_string())
        .replace("/run/topomgr/topomgr.sock", &socket.display().to_string())
}

/// Runs a shell line of the docs in the workspace root, with `topomgr` on
/// `PATH`; its stdout, or a panic naming the line and its stderr.
fn sh(line: &str) -> String {
    let bin_dir = common::topomgr_bin().parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .arg("-ec")
        .arg(line)
        .current_dir(common::workspace_root())
        .env("PATH", path)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "{line}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The machine this test expects: CPUs 0-1, one NUMA node.
pub(crate) fn require_machine() {
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let nodes = fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with("node"))
                })
                .count()
        })
        .unwrap_or(0);
    assert!(
        online.trim() == "0-1" && nodes == 1,
        "{NEEDS}, on a machine with CPUs 0-1 online and one NUMA node (found CPUs {:?}, {nodes} node(s))",
        online.trim()
    );
}

/// The daemon's config directory, made with the docs' install commands,
/// plus a drop-in with this test's paths.
pub(crate) fn configure(tag: &str, containerd: &Containerd) -> (PathBuf, PathBuf) {
    let dir = common::scratch_dir(tag);
    let etc = dir.join("etc");
    let socket = dir.join("topomgr.sock");
    for line in doc_block("install").lines() {
        sh(&localize(line, &etc, &socket));
    }
    // What a node has at the documented places, here in the scratch dir.
    let plugin_dir = common::cpu_plugin().parent().unwrap();
    assert_eq!(common::memory_plugin().parent().unwrap(), plugin_dir);
    fs::write(
        etc.join("plugins.d/99-test.toml"),
        format!(
            "plugin_dirs = [\"{}\"]\nsysfs_root = \"/sys\"\ncgroup_root = \"/sys/fs/cgroup\"\nstate_dir = \"{}\"\n\
             [daemon]\nsocket = \"{}\"\n[nri]\nsocket = \"{}\"\ncri_socket = \"{}\"\n",
            plugin_dir.display(),
            dir.join("state").display(),
            socket.display(),
            containerd.nri_socket().display(),
            containerd.socket().display()
        ),
    )
    .unwrap();
    (etc.join("topomgr.toml"), socket)
}

/// `topomgr serve` as the unit's ExecStart runs it.
pub(crate) fn serve(config: &Path, socket: &Path) -> Daemon {
    let unit =
        fs::read_to_string(common::workspace_root().join("packaging/topomgr.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/bin/topomgr --config /etc/topomgr/topomgr.toml serve\n"),
        "the unit's ExecStart changed; this test starts what it starts"
    );
    Daemon::start(config, socket)
}

fn health(d: &Daemon) -> Health {
    d.client().get("/v1/health").unwrap().parse().unwrap()
}

fn pods(d: &Daemon) -> PodList {
    d.client().get("/v1/pods").unwrap().parse().unwrap()
}

/// Waits until `what` holds of the daemon (20 s).
pub(crate) fn wait_until(d: &Daemon, what: &str, ok: impl Fn(&Health, &PodList) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (h, p) = (health(d), pods(d));
        if ok(&h, &p) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not within 20 s: {what}; health {h:?}, pods {:?}",
            p.pods.iter().map(|a| &a.uid).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A CRI client used from synchronous code (the daemon's client blocks,
/// so the test is not async).
struct Cri {
    rt: tokio::runtime::Runtime,
    client: CriClient,
}

impl Cri {
    fn connect(containerd: &Containerd) -> Cri {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(containerd.cri()).unwrap();
        Cri { rt, client }
    }

    fn run_pod(&mut self, spec: &PodSpec) -> Pod {
        self.rt.block_on(self.client.run_pod(spec)).unwrap()
    }

    fn create(&mut self, pod: &Pod, spec: &ContainerSpec) -> Result<String, String> {
        self.rt
            .block_on(self.client.create_container(pod, spec))
            .map_err(|e| e.to_string())
    }

    fn run(&mut self, pod: &Pod, spec: &ContainerSpec) -> String {
        let id = self.create(pod, spec).unwrap();
        self.rt.block_on(self.client.start_container(&id)).unwrap();
        id
    }

    fn stop(&mut self, id: &str) {
        self.rt
            .block_on(self.client.stop_container(id, Duration::from_secs(1)))
            .unwrap();
    }

    fn remove(&mut self, id: &str) {
        self.rt.block_on(self.client.remove_container(id)).unwrap();
    }

    fn remove_all_pods(&mut self) {
        self.rt.block_on(self.client.remove_all_pods()).unwrap();
    }

    fn exists(&mut self, id: &str) -> Result<(), String> {
        self.rt
            .block_on(self.client.container_status(id))
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// `(cpus, mems)` that the container's processes may use.
fn inside(cri: &mut Cri, id: &str) -> (String, String) {
    let p = cri.rt.block_on(cri.client.placement(id, "1")).unwrap();
    let q = cri.rt.block_on(cri.client.placement(id, "self")).unwrap();
    assert_eq!(p, q, "the main process and a new one of {id} see the same");
    (p.cpus_allowed_list, p.mems_allowed_list)
}

/// The CFS quota of container `id` as its real cgroup holds it (v1:
/// `cpu.cfs_quota_us` in the cpu hierarchy; v2: the quota of `cpu.max`),
/// found below the harness's cgroup root.
fn cfs_quota(containerd: &Containerd, id: &str) -> String {
    fn find(dir: &Path, name: &str) -> Option<PathBuf> {
        for e in fs::read_dir(dir).ok()?.filter_map(Result::ok) {
            let p = e.path();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name() == name {
                return Some(p);
            }
            if let Some(found) = find(&p, name) {
                return Some(found);
            }
        }
        None
    }
    let below = containerd.cgroup_root().trim_start_matches('/');
    for (hierarchy, file) in [
        ("/sys/fs/cgroup/cpu", "cpu.cfs_quota_us"),
        ("/sys/fs/cgroup/cpu,cpuacct", "cpu.cfs_quota_us"),
        ("/sys/fs/cgroup", "cpu.max"),
    ] {
        if let Some(dir) = find(&Path::new(hierarchy).join(below), id) {
            let text = fs::read_to_string(dir.join(file)).unwrap_or_default();
            return text.split_whitespace().next().unwrap_or("").to_owned();
        }
    }
    panic!("no cpu cgroup of container {id} below {below}")
}

/// containerd's record of the container's cpuset.
fn recorded(cri: &mut Cri, id: &str) -> String {
    cri.rt
        .block_on(cri.client.container_status(id))
        .unwrap()
        .resources
        .and_then(|r| r.linux)
        .map(|l| l.cpuset_cpus)
        .unwrap_or_default()
}

/// Waits until containerd's record of container `id` says `cpus` (20 s): an
/// update it applies (an answer to Synchronize, an unsolicited one) lands
/// there once applied.
fn wait_recorded(cri: &mut Cri, id: &str, cpus: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = recorded(cri, id);
        if now == cpus {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "containerd's record of {id} is {now:?}, not {cpus:?}, after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The invariants, after every step: no CPU exclusive to two containers;
/// the pool is every online CPU but those; every pod topomgr holds belongs
/// to a container containerd has; each running container of `running` runs
/// on exactly its exclusive CPUs or, in the shared pool, on the pool.
fn check(d: &Daemon, cri: &mut Cri, running: &[&str]) {
    let (h, list) = (health(d), pods(d));
    let mut exclusive: BTreeMap<String, String> = BTreeMap::new();
    let mut all = topomgr_sdk::CpuSet::new();
    for pod in &list.pods {
        cri.exists(&pod.uid).unwrap_or_else(|e| {
            panic!(
                "topomgr holds pod {} but containerd has no such container: {e}",
                pod.uid
            )
        });
        for c in pod.containers.iter().filter(|c| c.exclusive) {
            assert!(
                all.intersection(&c.cpus).is_empty(),
                "CPUs {} held twice ({list:?})",
                c.cpus
            );
            all = all.union(&c.cpus);
            exclusive.insert(pod.uid.clone(), c.cpus.to_string());
        }
    }
    assert_eq!(h.exclusive_cpus, all, "health and pods agree");
    let online = topomgr_sdk::CpuSet::parse("0-1").unwrap();
    assert_eq!(h.shared_pool, online.difference(&all));
    for id in running {
        let (cpus, _) = inside(cri, id);
        let want = exclusive
            .get(*id)
            .cloned()
            .unwrap_or_else(|| h.shared_pool.to_string());
        assert_eq!(cpus, want, "container {id} runs where topomgr placed it");
        // containerd records the cpuset of an update (its own or NRI's),
        // not that of the adjustment a container was created with.
        let record = recorded(cri, id);
        assert!(
            record.is_empty() || record == want,
            "containerd's record of {id} ({record:?}) disagrees with {want:?}"
        );
    }
}

fn pod_spec(c: &Containerd, name: &str, n: u32, qos: Qos) -> PodSpec {
    let uid = format!("a0c0ffee-0000-4000-8000-{n:012}");
    PodSpec {
        name: name.to_owned(),
        cgroup_parent: c.cgroup_parent(qos, &uid),
        uid,
        namespace: "team-a".to_owned(),
    }
}

#[test]
#[ignore = "needs root, a cpuset cgroup and containerd 1.7"]
fn containers_get_their_cpus_through_nri_and_keep_them_across_restarts() {
    require_machine();
    let mut containerd = Containerd::start().unwrap_or_else(|e| panic!("{NEEDS}: {e}"));
    // The documented containerd section is what this containerd runs with.
    let config = fs::read_to_string(containerd.dir().join("config.toml")).unwrap();
    for line in doc_block("containerd-config").lines() {
        let line = line.replace(
            "/var/run/nri/nri.sock",
            &containerd.nri_socket().display().to_string(),
        );
        assert!(
            config.contains(&line),
            "the harness's containerd config lacks the documented {line:?}"
        );
    }
    let (topomgr_toml, socket) = configure("nri-containerd", &containerd);
    let mut d = serve(&topomgr_toml, &socket);
    wait_until(&d, "registered with containerd", |h, _| h.nri.connected);
    wait_until(&d, "configured by containerd", |h, _| {
        h.nri
            .runtime
            .as_deref()
            .is_some_and(|r| r.starts_with("containerd 1.7"))
    });
    let mut cri = Cri::connect(&containerd);
    let image = containerd.image();

    // A Burstable pod first: the shared pool is every CPU.
    let bpod = cri.run_pod(&pod_spec(&containerd, "burstable", 1, Qos::Burstable));
    let shared = cri.run(
        &bpod,
        &ContainerSpec::sleeper("shared", image).with_resources(100, 500, 0),
    );
    assert_eq!(inside(&mut cri, &shared), ("0-1".into(), "0".into()));
    check(&d, &mut cri, &[&shared]);

    // A Guaranteed 1-CPU container of another pod: CPU 1 exclusive and the
    // memory node the memory provider chose; the Burstable container loses
    // CPU 1 in the same answer.
    let gpod = cri.run_pod(&pod_spec(&containerd, "guaranteed", 2, Qos::Guaranteed));
    let exclusive = cri.run(
        &gpod,
        &ContainerSpec::sleeper("exclusive", image).with_resources(1000, 1000, 128 << 20),
    );
    assert_eq!(inside(&mut cri, &exclusive), ("1".into(), "0".into()));
    assert_eq!(inside(&mut cri, &shared), ("0".into(), "0".into()));
    // As the kubelet's DisableCPUQuotaWithExclusiveCPUs: the exclusive
    // container is not throttled (-1 on v1, max on v2), the shared one keeps
    // the quota of its 500m limit.
    let unlimited = cfs_quota(&containerd, &exclusive);
    assert!(
        unlimited == "-1" || unlimited == "max",
        "the exclusive container's CFS quota is {unlimited:?}"
    );
    assert_eq!(cfs_quota(&containerd, &shared), "50000");
    assert_eq!(
        recorded(&mut cri, &shared),
        "0",
        "the update reached containerd's record"
    );
    let list = pods(&d);
    let g = list
        .pods
        .iter()
        .find(|p| p.uid == exclusive)
        .expect("admitted");
    assert_eq!(
        (
            g.name.as_str(),
            g.namespace.as_str(),
            g.containers[0].name.as_str()
        ),
        ("guaranteed", "team-a", "exclusive")
    );
    let c = &g.containers[0];
    assert_eq!(
        (c.cpus.to_string(), c.exclusive, c.mems.to_string()),
        ("1".into(), true, "0".into())
    );
    check(&d, &mut cri, &[&shared, &exclusive]);

    // The documented checks.
    let out: Vec<String> = doc_block("check")
        .lines()
        .map(|l| sh(&localize(l, topomgr_toml.parent().unwrap(), &socket)))
        .collect();
    let nri: serde_json::Value = serde_json::from_str(out[0].trim()).unwrap();
    assert_eq!(
        (
            nri["enabled"].as_bool(),
            nri["connected"].as_bool(),
            nri["containers"].as_u64()
        ),
        (Some(true), Some(true), Some(2)),
        "{nri}"
    );
    let rows: Vec<Vec<&str>> = out[1]
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.contains(&vec![
            "team-a/guaranteed",
            "Guaranteed",
            "yes",
            "exclusive",
            "any",
            "true",
            "1*",
            "0",
            "-",
            "-"
        ]) && rows.contains(&vec![
            "team-a/burstable",
            "Burstable",
            "yes",
            "shared",
            "any",
            "true",
            "0",
            "-",
            "-",
            "-"
        ]),
        "{}",
        out[1]
    );

    // A container created while topomgr is down runs unadjusted, and one
    // that ends meanwhile goes unnoticed; after the restart the first is
    // admitted into the shared pool and the second released.
    let b2 = cri.run_pod(&pod_spec(&containerd, "burstable-2", 3, Qos::Burstable));
    let ephemeral = cri.run(
        &b2,
        &ContainerSpec::sleeper("ephemeral", image).with_resources(100, 0, 0),
    );
    check(&d, &mut cri, &[&shared, &exclusive, &ephemeral]);
    let log = d.stop();
    assert!(!log.contains("panicked"), "{log}");

    // Stopped, the daemon leaves its containers owning the node: a daemon
    // of another state directory is refused while they keep their CPUs,
    // naming them (issue 37 item 3).
    let other = topomgr_toml.with_file_name("plugins.d/99-zz-other-state.toml");
    let other_state = socket.with_file_name("other-state");
    fs::write(
        &other,
        format!("state_dir = \"{}\"\n", other_state.display()),
    )
    .unwrap();
    let out = common::run_topomgr(&[
        "--config",
        &topomgr_toml.to_string_lossy(),
        "serve",
        "--socket",
        &socket.with_file_name("other.sock").to_string_lossy(),
    ]);
    fs::remove_file(&other).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("a container placed by topomgr serve (OCI hook or NRI)")
            && err.contains(&format!(
                "state directory {}",
                socket.with_file_name("state").display()
            )),
        "{err}"
    );
    assert!(!other_state.exists(), "the refused daemon made its state");
    cri.stop(&ephemeral);
    cri.remove(&ephemeral);
    let late = cri.run(
        &b2,
        &ContainerSpec::sleeper("late", image).with_resources(200, 0, 0),
    );
    assert_eq!(
        inside(&mut cri, &late).0,
        "0-1",
        "unadjusted while topomgr is down"
    );
    d = serve(&topomgr_toml, &socket);
    wait_until(&d, "the restarted daemon synchronized", |h, p| {
        h.nri.connected
            && p.pods.iter().any(|a| a.uid == late)
            && !p.pods.iter().any(|a| a.uid == ephemeral)
    });
    // The Synchronize answer moves it; containerd applies it after the
    // admission is visible here.
    wait_recorded(&mut cri, &late, "0");
    assert_eq!(inside(&mut cri, &late), ("0".into(), "0".into()));
    assert_eq!(inside(&mut cri, &exclusive), ("1".into(), "0".into()));
    check(&d, &mut cri, &[&shared, &exclusive, &late]);

    // containerd restarts: topomgr registers again and loses nothing.
    let since = health(&d).nri.since;
    std::thread::sleep(Duration::from_millis(1100));
    containerd.restart().unwrap();
    wait_until(&d, "registered again after containerd's restart", |h, _| {
        h.nri.connected && h.nri.since > since
    });
    let mut cri = Cri::connect(&containerd);
    let held: Vec<String> = pods(&d).pods.into_iter().map(|p| p.uid).collect();
    let mut want = vec![exclusive.clone(), late.clone(), shared.clone()];
    want.sort();
    assert_eq!(held, want);
    check(&d, &mut cri, &[&shared, &exclusive, &late]);

    // A container that cannot be aligned: 2 exclusive CPUs on the one NUMA
    // node, where CPU 0 is reserved and CPU 1 taken. Its creation fails
    // with topomgr's reason; nothing is held for it.
    let g2 = cri.run_pod(&pod_spec(&containerd, "guaranteed-2", 4, Qos::Guaranteed));
    let err = cri
        .create(
            &g2,
            &ContainerSpec::sleeper("too-wide", image).with_resources(2000, 2000, 64 << 20),
        )
        .unwrap_err();
    assert_eq!(
        err,
        "CRI CreateContainer failed: failed to create containerd container: \
         failed to get NRI adjustment for container: rpc error: code = Unknown desc = \
         topomgr: TopologyAffinityError: Resources cannot be allocated with Topology Locality: \
         container \"too-wide\" needs every resource on one common NUMA node (policy single-numa-node); \
         cpu (cpu): cannot be satisfied on any NUMA node (requested 2; free/allocatable by NUMA node: 0: 0/1); \
         memory (memory): preferred on {0}"
    );
    assert_eq!(
        pods(&d).pods.len(),
        3,
        "nothing held for the refused container"
    );
    check(&d, &mut cri, &[&shared, &exclusive, &late]);

    // Stopping the Guaranteed container (created before containerd's
    // restart) gives CPU 1 back to the shared containers through NRI.
    cri.stop(&exclusive);
    wait_until(&d, "the stopped container released", |_, p| {
        !p.pods.iter().any(|a| a.uid == exclusive)
    });
    assert_eq!(inside(&mut cri, &shared), ("0-1".into(), "0".into()));
    assert_eq!(recorded(&mut cri, &shared), "0-1");
    assert_eq!(inside(&mut cri, &late).0, "0-1");
    check(&d, &mut cri, &[&shared, &late]);

    // An operator releases a running Guaranteed container through the API:
    // it keeps running, in the shared pool now, and every shared container
    // gets CPU 1 back, through CRI updates from the follower.
    let again = cri.run(
        &g2,
        &ContainerSpec::sleeper("again", image).with_resources(1000, 1000, 64 << 20),
    );
    assert_eq!(inside(&mut cri, &again), ("1".into(), "0".into()));
    assert_eq!(inside(&mut cri, &shared).0, "0");
    check(&d, &mut cri, &[&shared, &late, &again]);
    let r = d.client().delete(&format!("/v1/pods/{again}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    wait_recorded(&mut cri, &again, "0-1");
    for id in [&shared, &late, &again] {
        assert_eq!(inside(&mut cri, id).0, "0-1", "{id}");
        assert_eq!(recorded(&mut cri, id), "0-1", "containerd's record of {id}");
    }
    check(&d, &mut cri, &[&shared, &late, &again]);

    // Removing every pod releases everything.
    cri.remove_all_pods();
    wait_until(&d, "every container released", |h, p| {
        p.pods.is_empty() && h.nri.containers == 0 && h.exclusive_cpus.is_empty()
    });
    let log = d.stop();
    assert!(!log.contains("panicked"), "{log}");
}

/// A container its user pinned to CPU 1 (a cpuset in its spec, outside a
/// kubelet pod) is left alone, and CPU 1 is handed out exclusively to no
/// one while it exists: a Guaranteed container is refused with the
/// numbers, and gets CPU 1 once the pinned container is removed.
#[test]
#[ignore = "needs root, a cpuset cgroup and containerd 1.7"]
fn cpus_a_user_pinned_a_container_to_are_not_handed_out_exclusively() {
    require_machine();
    let containerd = Containerd::start().unwrap_or_else(|e| panic!("{NEEDS}: {e}"));
    let (topomgr_toml, socket) = configure("nri-user-pinned", &containerd);
    let d = serve(&topomgr_toml, &socket);
    wait_until(&d, "registered with containerd", |h, _| h.nri.connected);
    let mut cri = Cri::connect(&containerd);
    let image = containerd.image();
    let kubepods = containerd.cgroup_parent(Qos::Guaranteed, "x");
    let root = kubepods.strip_suffix("/kubepods/podx").unwrap();
    let user = cri.run_pod(&PodSpec {
        name: "by-hand".into(),
        uid: "b0c0ffee-0000-4000-8000-000000000001".into(),
        namespace: "default".into(),
        cgroup_parent: format!("{root}/by-hand"),
    });
    let mut spec = ContainerSpec::sleeper("pinned", image).with_resources(1000, 1000, 0);
    spec.resources.cpuset_cpus = "1".into();
    let pinned = cri.run(&user, &spec);
    assert_eq!(
        inside(&mut cri, &pinned).0,
        "1",
        "left alone, on its own cpuset"
    );
    assert!(pods(&d).pods.is_empty(), "nothing held for it");

    let gpod = cri.run_pod(&pod_spec(&containerd, "guaranteed", 7, Qos::Guaranteed));
    let g = ContainerSpec::sleeper("exclusive", image).with_resources(1000, 1000, 64 << 20);
    let err = cri.create(&gpod, &g).unwrap_err();
    assert!(
        err.contains("topomgr: TopologyAffinityError: ")
            && err.contains("(requested 1; free/allocatable by NUMA node: 0: 0/1)"),
        "{err}"
    );
    let h = health(&d);
    assert!(
        !format!("{:?}", h.notes).contains("by-hand"),
        "a container pinned outside a kubelet pod is no health note: {h:?}"
    );
    check(&d, &mut cri, &[]);

    cri.stop(&pinned);
    cri.remove(&pinned);
    let exclusive = cri.run(&gpod, &g);
    assert_eq!(inside(&mut cri, &exclusive), ("1".into(), "0".into()));
    check(&d, &mut cri, &[&exclusive]);
    cri.remove_all_pods();
    wait_until(&d, "every container released", |_, p| p.pods.is_empty());
    let log = d.stop();
    assert!(!log.contains("panicked"), "{log}");
}

/// Issue 35: CDI devices a container gets through containerd's CDI
/// (`enable_cdi`), asked for as the kubelet asks for DRA's (CRI
/// `CDIDevices`) or through a `cdi.k8s.io/*` annotation, reach topomgr as
/// the runtime injected them: the device node is in the container, and
/// topomgr finds the CDI device by its node and by its name through the
/// same spec files, and says so; this device (the host's `/dev/null`) is
/// no PCI device, so nothing is aligned with it and the container is
/// placed as without it. A name no spec defines is refused by containerd.
/// On containerd 1.7 and 2.x.
#[test]
#[ignore = "needs root, a cpuset cgroup and containerd 1.7 and 2.x"]
fn cdi_devices_reach_topomgr_as_containerd_injected_them() {
    require_machine();
    for line in [
        topomgr_runtime_harness::ContainerdLine::V1_7,
        topomgr_runtime_harness::ContainerdLine::V2,
    ] {
        let containerd = Containerd::start_line(line).unwrap_or_else(|e| panic!("{NEEDS}: {e}"));
        fs::write(
            containerd.cdi_dir().join("testdev.yaml"),
            "cdiVersion: 0.5.0\nkind: example.org/testdev\ndevices:\n\
             - name: \"null\"\n  containerEdits:\n    deviceNodes:\n\
             \x20   - {path: /dev/topomgr-null, hostPath: /dev/null, type: c, major: 1, minor: 3, permissions: rw}\n",
        )
        .unwrap();
        let (topomgr_toml, socket) = configure(&format!("nri-cdi-{line:?}"), &containerd);
        fs::write(
            topomgr_toml.with_file_name("plugins.d/99-zz-cdi.toml"),
            format!(
                "[cdi]\nspec_dirs = [\"{}\"]\n",
                containerd.cdi_dir().display()
            ),
        )
        .unwrap();
        let d = serve(&topomgr_toml, &socket);
        wait_until(&d, "registered with containerd", |h, _| h.nri.connected);
        let mut cri = Cri::connect(&containerd);
        let image = containerd.image();
        let gpod = cri.run_pod(&pod_spec(&containerd, "dra", 11, Qos::Guaranteed));
        let by_cri = cri.run(
            &gpod,
            &ContainerSpec::sleeper("claimed", image)
                .with_resources(1000, 1000, 64 << 20)
                .with_cdi_device("example.org/testdev=null"),
        );
        let bpod = cri.run_pod(&pod_spec(&containerd, "annotated", 12, Qos::Burstable));
        let by_annotation = cri.run(
            &bpod,
            &ContainerSpec::sleeper("annotated", image)
                .with_resources(100, 0, 0)
                .with_annotation("cdi.k8s.io/test", "example.org/testdev=null"),
        );
        for id in [&by_cri, &by_annotation] {
            cri.rt
                .block_on(cri.client.exec(id, &["cat", "/dev/topomgr-null"]))
                .unwrap_or_else(|e| {
                    panic!("{line:?}: containerd did not inject the CDI device into {id}: {e}")
                });
        }
        assert_eq!(
            inside(&mut cri, &by_cri),
            ("1".into(), "0".into()),
            "{line:?}"
        );
        assert_eq!(inside(&mut cri, &by_annotation).0, "0", "{line:?}");
        check(&d, &mut cri, &[&by_cri, &by_annotation]);
        let unknown = cri
            .create(
                &gpod,
                &ContainerSpec::sleeper("unknown", image)
                    .with_resources(1000, 1000, 64 << 20)
                    .with_cdi_device("example.org/testdev=absent"),
            )
            .unwrap_err();
        assert!(
            unknown.contains("example.org/testdev=absent"),
            "{line:?}: {unknown}"
        );
        cri.remove_all_pods();
        wait_until(&d, "every container released", |_, p| p.pods.is_empty());
        let log = d.stop();
        assert!(!log.contains("panicked"), "{log}");
        // One for each container (the first by its node, the second by its
        // annotation), each by the CDI device's name.
        let found = log
            .lines()
            .filter(|l| {
                l.contains("no provider lists this CDI device and it is not aligned with")
                    && l.contains(
                        "source=CDI device example.org/testdev=null devices=/dev/topomgr-null",
                    )
            })
            .count();
        assert_eq!(found, 2, "{line:?}: {log}");
    }
}

/// Wall time of CRI CreateContainer of a Guaranteed 1-CPU container without
/// and with topomgr registered (admission, exclusive CPU, journal commit),
/// printed for BENCHMARKS.md; nothing is asserted about speed.
#[test]
#[ignore = "needs root, a cpuset cgroup and containerd 1.7"]
fn create_container_wall_time_with_and_without_topomgr() {
    const N: usize = 40;
    require_machine();
    let containerd = Containerd::start().unwrap_or_else(|e| panic!("{NEEDS}: {e}"));
    let (topomgr_toml, socket) = configure("nri-timing", &containerd);
    let mut cri = Cri::connect(&containerd);
    let pod = cri.run_pod(&pod_spec(&containerd, "timing", 9, Qos::Guaranteed));
    let measure = |cri: &mut Cri, label: &str| {
        let mut times = Vec::new();
        for i in 0..N {
            let spec = ContainerSpec::sleeper(&format!("{label}-{i}"), containerd.image())
                .with_resources(1000, 1000, 64 << 20);
            let t = Instant::now();
            let id = cri.create(&pod, &spec).unwrap();
            times.push(t.elapsed());
            cri.remove(&id);
        }
        times.sort();
        times
    };
    let without = measure(&mut cri, "plain");
    let d = serve(&topomgr_toml, &socket);
    wait_until(&d, "registered", |h, _| h.nri.connected);
    let with = measure(&mut cri, "topomgr");
    wait_until(&d, "every container released", |_, p| p.pods.is_empty());
    let ms = |t: Duration| t.as_secs_f64() * 1000.0;
    let q = |v: &[Duration], q: f64| {
        ms(v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1])
    };
    println!(
        "CRI CreateContainer over {N} creates (median / p90 / max): without topomgr {:.2} / {:.2} / {:.2} ms; with topomgr {:.2} / {:.2} / {:.2} ms",
        q(&without, 0.5),
        q(&without, 0.9),
        ms(without[N - 1]),
        q(&with, 0.5),
        q(&with, 0.9),
        ms(with[N - 1]),
    );
    cri.remove_all_pods();
    drop(d);
}
