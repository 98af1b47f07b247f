//! `topomgr serve` end to end: the real binary on a Unix socket, the SDK's
//! example widget provider (or the mock), the example 2-socket 4-node machine.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use topomgr_client::http::Client;
use topomgr_node::api::{
    Admission, Admissions, Attached, ErrorBody, Health, HealthStatus, PodList,
};

/// A running daemon; killed when dropped. On the machine's cgroup
/// hierarchy it holds the [`common::NodeGuard`] (one node, one owner).
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    _node: Option<common::NodeGuard>,
}

impl Daemon {
    pub fn start(config: &Path, socket: &Path) -> Daemon {
        Self::start_with(config, socket, &[])
    }

    /// [`Daemon::start`] with more arguments of `topomgr serve`.
    pub fn start_with(config: &Path, socket: &Path, args: &[&Path]) -> Daemon {
        let node = common::node_guard_for(config);
        let child = Command::new(common::topomgr_bin())
            .arg("--config")
            .arg(config)
            .arg("serve")
            .arg("--socket")
            .arg(socket)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start topomgr serve");
        let d = Daemon {
            child,
            socket: socket.to_path_buf(),
            _node: node,
        };
        d.wait_ready();
        d
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if Client::new(&self.socket)
                .get("/v1/health")
                .is_ok_and(|r| r.status == 200)
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("daemon on {} did not become ready", self.socket.display());
    }

    pub fn client(&self) -> Client {
        Client::new(&self.socket)
    }

    /// SIGTERM and wait; returns stderr.
    pub fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let out = std::mem::replace(
            &mut self.child,
            Command::new("true").spawn().expect("spawn true"),
        )
        .wait_with_output()
        .expect("wait for daemon");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config dir using the 2s4n example machine and `providers` (TOML); its
/// `cgroup_root` is a directory with no hierarchy (nothing is applied).
fn config_dir(tag: &str, providers: &str) -> PathBuf {
    let sys = common::workspace_root().join("examples/machines/2s4n/sys");
    config_on(tag, &sys, Path::new("cgroup"), providers)
}

/// A config dir on this machine itself: its sysfs and its cgroup hierarchy
/// (tests that apply cpusets, with [`common::real_cgroups`]).
fn host_config_dir(tag: &str, providers: &str) -> PathBuf {
    config_on(
        tag,
        Path::new("/sys"),
        Path::new("/sys/fs/cgroup"),
        providers,
    )
}

fn config_on(tag: &str, sys: &Path, cgroup_root: &Path, providers: &str) -> PathBuf {
    let main = format!(
        "policy = \"single-numa-node\"\nsysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"{}\"\n{providers}",
        sys.display(),
        cgroup_root.display()
    );
    common::config_dir(tag, &main, &[])
}

/// The SDK example's widget provider, two widgets per NUMA node (TOML).
fn widgets_provider() -> String {
    format!(
        "[providers.widgets]\nlibrary = \"{}\"\n[providers.widgets.config]\nwidgets_per_node = 2\n",
        common::plugins().widgets.display()
    )
}

fn widgets_config(tag: &str) -> PathBuf {
    config_dir(tag, &widgets_provider())
}

fn example_pod(name: &str) -> String {
    fs::read_to_string(common::workspace_root().join("examples/pods").join(name)).unwrap()
}

const WIDGETS_UID: &str = "6f1c2a3e-0002-4c8e-9a51-000000000002";

fn widgets_pod_json(node: u32, ids: &[&str]) -> Value {
    json!({
        "uid": WIDGETS_UID, "name": "guaranteed-widgets", "namespace": "ml",
        "qos": "Guaranteed", "admitted": true, "reason": null, "message": null,
        "containers": [{
            "name": "trainer", "affinity": [node], "preferred": true,
            // Device providers leave `mems` to the memory provider.
            "cpus": "", "exclusive": false, "mems": "",
            "devices": {"example.com/widget": ids},
            "env": {"WIDGET_DEVICES": ids.join(",")}
        }]
    })
}

#[test]
fn api_admit_list_get_release_metrics_and_machine() {
    let dir = widgets_config("daemon-api");
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();

    let mode = fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);

    let r = c.admit(&example_pod("guaranteed-widgets.yaml")).unwrap();
    assert_eq!(r.status, 200);
    let expected = widgets_pod_json(0, &["widget-0-0", "widget-0-1"]);
    assert_eq!(r.json().unwrap(), json!({"pods": [expected.clone()]}));

    // Admitting the same uid again is idempotent.
    let r = c.admit(&example_pod("guaranteed-widgets.yaml")).unwrap();
    assert_eq!(r.json().unwrap(), json!({"pods": [expected.clone()]}));

    let r = c.get("/v1/pods").unwrap();
    assert_eq!(
        r.json().unwrap(),
        json!({"pods": [expected.clone()], "attachments": {}, "owners": {}})
    );
    let r = c.get(&format!("/v1/pods/{WIDGETS_UID}")).unwrap();
    assert_eq!((r.status, r.json().unwrap()), (200, expected.clone()));

    let machine: topomgr_node::api::Machine = c.get("/v1/machine").unwrap().parse().unwrap();
    assert_eq!(machine.numa_nodes.len(), 4);
    assert_eq!(machine.cpus.len(), 16);

    let r = c
        .post("/v1/pods", "application/yaml", b"kind: Pod\nspec: 3\n")
        .unwrap();
    assert_eq!(r.status, 400);
    assert_eq!(r.error().unwrap().reason, "BadManifest");

    let metrics = String::from_utf8(c.get("/metrics").unwrap().body).unwrap();
    for line in [
        "topology_manager_admission_requests_total 2",
        "topology_manager_admission_duration_ms_count 2",
        "admission_rejections_total{reason=\"BadManifest\"} 1",
        "topomgr_provider_call_duration_seconds_count{provider=\"widgets\",call=\"topology_hints\"} 1",
        "topomgr_provider_call_duration_seconds_count{provider=\"widgets\",call=\"allocate\"} 1",
        "cpu_manager_exclusive_cpu_allocation_count 0",
        "cpu_manager_shared_pool_size_millicores 16000",
        "topomgr_admitted_pods 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line:?} missing:\n{metrics}");
    }

    let r = c.release(WIDGETS_UID).unwrap();
    assert_eq!((r.status, r.json().unwrap()), (200, expected));
    let r = c.get(&format!("/v1/pods/{WIDGETS_UID}")).unwrap();
    assert_eq!(
        (r.status, r.json().unwrap()),
        (
            404,
            json!({"error": format!("no admitted pod with uid {WIDGETS_UID:?}"), "reason": "UnknownPod"})
        )
    );
    let health = c.get("/v1/health").unwrap().json().unwrap();
    assert_eq!(
        health,
        json!({"status": "ok", "pods": 0, "exclusive_cpus": "", "shared_pool": "0-15", "notes": [], "failure": null,
               "nri": {"enabled": false, "connected": false, "socket": null, "runtime": null, "since": null, "error": null, "containers": 0},
               "conflicts": []})
    );
    d.stop();
    assert!(!dir.join("t.sock").exists(), "socket removed on SIGTERM");
}

#[test]
fn cli_clients_match_in_process_admit() {
    let dir = widgets_config("daemon-cli");
    let config = dir.join("topomgr.toml");
    let d = Daemon::start(&config, &dir.join("t.sock"));
    let pods = common::workspace_root().join("examples/pods/two-pods.yaml");
    let topomgr = |args: &[&str]| {
        Command::new(common::topomgr_bin())
            .arg("--config")
            .arg(&config)
            .args(args)
            .output()
            .unwrap()
    };
    let via_daemon = topomgr(&[
        "admit",
        "--socket",
        &d.socket.to_string_lossy(),
        &pods.to_string_lossy(),
    ]);
    assert!(
        via_daemon.status.success(),
        "{}",
        String::from_utf8_lossy(&via_daemon.stderr)
    );
    let in_process = topomgr(&["admit", &pods.to_string_lossy()]);
    assert!(in_process.status.success());
    assert_eq!(
        String::from_utf8_lossy(&via_daemon.stdout),
        String::from_utf8_lossy(&in_process.stdout)
    );

    let listed = topomgr(&["pods", "--socket", &d.socket.to_string_lossy()]);
    let listed: PodList = serde_json::from_slice(&listed.stdout).unwrap();
    let admitted: Admissions = serde_json::from_slice(&via_daemon.stdout).unwrap();
    let mut want = admitted.pods;
    want.sort_by(|a, b| a.uid.cmp(&b.uid));
    assert_eq!(listed.pods, want);
    assert!(listed.attachments.is_empty());

    let uid = want[0].uid.clone();
    let out = topomgr(&["release", "--socket", &d.socket.to_string_lossy(), &uid]);
    assert!(out.status.success());
    let out = topomgr(&["release", "--socket", &d.socket.to_string_lossy(), &uid]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("topomgr: error: daemon answered 404: no admitted pod with uid {uid:?}\n")
    );
    let missing = topomgr(&["pods", "--socket", &dir.join("none.sock").to_string_lossy()]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).starts_with(&format!(
            "topomgr: error: cannot connect to the topomgr daemon at {}: ",
            dir.join("none.sock").display()
        ))
    );
}

#[test]
fn second_daemon_on_same_state_dir_is_refused_and_restart_restores() {
    let dir = widgets_config("daemon-lock");
    let config = dir.join("topomgr.toml");
    let d = Daemon::start(&config, &dir.join("a.sock"));
    let r = d
        .client()
        .admit(&example_pod("guaranteed-widgets.yaml"))
        .unwrap();
    assert_eq!(r.status, 200);

    let serve = |config: &Path| {
        Command::new(common::topomgr_bin())
            .arg("--config")
            .arg(config)
            .args(["serve", "--socket"])
            .arg(dir.join("b.sock"))
            .output()
            .unwrap()
    };
    let state = dir.join("state");
    let first = format!(
        "the topomgr daemon (pid {}, command `{} --config {} serve --socket {}`, state directory {}, socket {})",
        d.child.id(),
        common::topomgr_bin().display(),
        config.display(),
        dir.join("a.sock").display(),
        state.display(),
        dir.join("a.sock").display()
    );
    // The same cgroup root: the node has its owner.
    let out = serve(&config);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "topomgr: error: the directory {} (not a cgroup filesystem) is managed by {first}, and one node has one owner: stop that daemon first, or use it (its socket is {}) (node lock ",
            dir.join("cgroup").display(),
            dir.join("a.sock").display()
        )),
        "{err}"
    );
    // Another cgroup root: the state directory has its daemon.
    let elsewhere = dir.join("elsewhere.toml");
    fs::write(
        &elsewhere,
        fs::read_to_string(&config)
            .unwrap()
            .replace("cgroup_root = \"cgroup\"", "cgroup_root = \"cgroup2\""),
    )
    .unwrap();
    let out = serve(&elsewhere);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "topomgr: error: state directory {} belongs to {first} for as long as it runs; topomgr serve never waits for it: stop that daemon first, or use it (its socket is {}) (lock {})\n",
            state.display(),
            dir.join("a.sock").display(),
            state.join("topomgr.lock").display()
        )
    );

    // kill -9, restart: the pod is still there, its widgets still taken.
    drop(d);
    let d = Daemon::start(&config, &dir.join("a.sock"));
    let mut c = d.client();
    let r = c.get(&format!("/v1/pods/{WIDGETS_UID}")).unwrap();
    assert_eq!(
        r.json().unwrap(),
        widgets_pod_json(0, &["widget-0-0", "widget-0-1"])
    );
    let other = example_pod("guaranteed-widgets.yaml")
        .replace(WIDGETS_UID, "other-uid")
        .replace("name: guaranteed-widgets", "name: other");
    let r: Admissions = c.admit(&other).unwrap().parse().unwrap();
    assert_eq!(
        r.pods[0].containers[0].devices,
        [(
            "example.com/widget".to_owned(),
            vec!["widget-1-0".to_owned(), "widget-1-1".to_owned()]
        )]
        .into()
    );

    // A damaged state file stops the next start with a clear message.
    d.stop();
    let path = state.join("state.ckpt");
    let mut bytes = fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 5] ^= 0x20;
    fs::write(&path, bytes).unwrap();
    let out = Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(&config)
        .args(["serve", "--socket"])
        .arg(dir.join("a.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "topomgr: error: restoring state: {}: state file is damaged: SHA-256 of the boot id and body is ",
            path.display()
        )),
        "{err}"
    );
    let recover = format!("`topomgr state recover --state-dir {}`", state.display());
    assert!(err.contains(&recover), "{err}");
    // The remedy named works: recover backs the files up, says which pods
    // it forgets, and the daemon starts (on empty state).
    let (code, out, err) = common::topomgr(
        &dir,
        &["state", "recover", "--state-dir", state.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kept: nothing (empty state)"), "{out}");
    assert!(
        out.contains("forgotten (admitted by what was dropped"),
        "{out}"
    );
    assert!(out.contains("(uid other-uid)"), "{out}");
    let d = Daemon::start(&config, &dir.join("a.sock"));
    let listed: PodList = d.client().get("/v1/pods").unwrap().parse().unwrap();
    assert!(listed.pods.is_empty());
    d.stop();
}

/// A config dir with `daemon` (TOML lines of `[daemon]`) and the mock
/// provider scripted by `mock`.
fn mock_config(tag: &str, daemon: &str, mock: &str) -> PathBuf {
    config_dir(
        tag,
        &format!(
            "[daemon]\n{daemon}\n[providers.mock]\nlibrary = \"{}\"\n[providers.mock.config]\n{mock}\n",
            common::plugins().mock.display()
        ),
    )
}

#[test]
fn provider_timeout_fails_the_admission_not_the_daemon() {
    let dir = mock_config(
        "daemon-timeout",
        "provider_timeout_ms = 200",
        // It owns the widgets the pod asks for (else the pod is refused
        // before any hint is asked: nobody serves them).
        "sleep_ms = 1500\nallocation = { devices = { \"example.com/widget\" = [\"w-0\", \"w-1\"] } }\ninventory = { resources = { \"example.com/widget\" = { total = { capacity = 2, allocatable = 2, available = 2 }, zones = [] } } }",
    );
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let pod = example_pod("guaranteed-widgets.yaml");
    let r: Admissions = c.admit(&pod).unwrap().parse().unwrap();
    assert!(!r.pods[0].admitted);
    assert_eq!(r.pods[0].reason.as_deref(), Some("ProviderTimeout"));
    assert_eq!(
        r.pods[0].message.as_deref().unwrap(),
        "provider \"mock\" failed to give hints: provider \"mock\" did not answer topology_hints within 200 ms; it is not called again until that call returns"
    );
    // While the call is stuck, the next admission fails at once.
    let start = Instant::now();
    let r: Admissions = c.admit(&pod).unwrap().parse().unwrap();
    assert!(start.elapsed() < Duration::from_millis(1000));
    assert_eq!(r.pods[0].reason.as_deref(), Some("ProviderTimeout"));
    let msg = r.pods[0].message.as_deref().unwrap();
    assert!(
        // The pod asks for an extended resource, so the first call is the
        // inventory (which provider owns it); it is refused at once too.
        msg.starts_with("provider \"mock\" failed to report which resources it owns: provider \"mock\" is still running a topology_hints call that timed out "),
        "{msg}"
    );
    let health = c.get("/v1/health").unwrap();
    assert_eq!(health.status, 200);
    let metrics = String::from_utf8(c.get("/metrics").unwrap().body).unwrap();
    for line in [
        "topology_manager_admission_errors_total 2",
        "admission_rejections_total{reason=\"ProviderTimeout\"} 2",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line:?} missing:\n{metrics}"
        );
    }
    assert!(
        metrics
            .lines()
            .any(|l| l
                == "topomgr_provider_timeouts_total{provider=\"mock\",call=\"topology_hints\"} 1"),
        "{metrics}"
    );
}

#[test]
fn reads_are_answered_while_a_slow_admission_runs() {
    // Every hint and allocate call of the mock takes 1.5 s: the admission
    // of the one-container pod holds the engine for about 3 s.
    let dir = mock_config(
        "daemon-slow-admission",
        "provider_timeout_ms = 20000",
        // It owns the widgets the pod asks for (else the pod is refused
        // before any hint is asked: nobody serves them).
        "sleep_ms = 1500\nallocation = { devices = { \"example.com/widget\" = [\"w-0\", \"w-1\"] } }\ninventory = { resources = { \"example.com/widget\" = { total = { capacity = 2, allocatable = 2, available = 2 }, zones = [] } } }",
    );
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let pod = example_pod("guaranteed-widgets.yaml");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let admission = {
        let (mut c, done) = (d.client(), std::sync::Arc::clone(&done));
        std::thread::spawn(move || {
            let r: Admissions = c.admit(&pod).unwrap().parse().unwrap();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        })
    };
    // Let the admission reach the provider, then read: every read must be
    // answered before the admission is.
    std::thread::sleep(Duration::from_millis(300));
    let mut c = d.client();
    let pods = c.get("/v1/pods").unwrap();
    assert_eq!(
        (pods.status, pods.json().unwrap()),
        (200, json!({"pods": [], "attachments": {}, "owners": {}}))
    );
    assert_eq!(c.get("/v1/health").unwrap().status, 200);
    let metrics = c.get("/metrics").unwrap();
    assert_eq!(metrics.status, 200);
    assert!(
        !done.load(std::sync::atomic::Ordering::SeqCst),
        "a read waited for the admission"
    );
    let r = admission.join().unwrap();
    assert!(r.pods[0].admitted, "{r:?}");
    let pods: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    assert_eq!(pods.pods[0].uid, WIDGETS_UID, "{pods:?}");
}

/// The daemon applies an attached container's cpuset in the machine's
/// real cgroup hierarchy (this machine's sysfs and cgroups; ignored in a
/// plain run, and failing saying why without root or a cpuset controller).
#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn attach_writes_cpuset_and_mems_of_the_container() {
    let test = "attach_writes_cpuset_and_mems_of_the_container";
    let mgr = common::real_cgroups(test);
    let cgs = common::TestCgroups::create(mgr, "daemon-attach", &["kubepods/pod-w/trainer"]);
    let (root_cpus, root_mems) = cgs.root_cpuset();
    let leaf = cgs.path("kubepods/pod-w/trainer");
    let dir = host_config_dir("daemon-attach", &widgets_provider());
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let r = c.admit(&example_pod("guaranteed-widgets.yaml")).unwrap();
    assert!(r.parse::<Admissions>().unwrap().pods[0].admitted);
    let r = c.attach(WIDGETS_UID, "trainer", &leaf).unwrap();
    assert_eq!(
        (r.status, r.json().unwrap()),
        (
            200,
            // Only the widget provider is loaded and device providers set no
            // `mems`: a shared container gets every CPU and memory node.
            json!({"uid": WIDGETS_UID, "container": "trainer", "cgroup": leaf, "cpus": root_cpus, "mems": root_mems})
        )
    );
    // What the kernel now applies.
    assert_eq!(cgs.cpus("kubepods/pod-w/trainer"), root_cpus);
    assert_eq!(cgs.mems("kubepods/pod-w/trainer"), root_mems);
    let listed: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    assert_eq!(
        listed.attachments,
        [(
            WIDGETS_UID.to_owned(),
            [("trainer".to_owned(), leaf.clone())].into()
        )]
        .into()
    );
    let r = c.attach(WIDGETS_UID, "nope", "kubepods/x").unwrap();
    assert_eq!(
        (r.status, r.json().unwrap()),
        (
            404,
            json!({"error": format!("pod {WIDGETS_UID:?} has no container \"nope\" (containers: trainer)"), "reason": "UnknownContainer"})
        )
    );
    let r = c.attach(WIDGETS_UID, "trainer", "../escape").unwrap();
    assert_eq!(r.status, 422);
}

#[test]
#[ignore = "needs root and curl"]
fn peers_outside_root_and_the_group_get_403() {
    if !fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    {
        panic!("peers_outside_root_and_the_group_get_403 needs root (it connects as another user)");
    }
    let dir = widgets_config("daemon-access");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    // Open the file mode so only the peer-credential check stands in the way.
    fs::set_permissions(&d.socket, fs::Permissions::from_mode(0o666)).unwrap();
    let mut parent = dir.parent();
    while let Some(p) = parent {
        let m = fs::metadata(p).unwrap().permissions().mode();
        if m & 0o001 == 0 {
            panic!(
                "peers_outside_root_and_the_group_get_403 needs {} searchable by others (it connects as nobody)",
                p.display()
            );
        }
        parent = p.parent();
    }
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "--unix-socket"])
        .arg(&d.socket)
        .arg("http://topomgr/v1/pods")
        .uid(65534)
        .gid(65534)
        .output();
    let out =
        out.unwrap_or_else(|e| panic!("peers_outside_root_and_the_group_get_403 needs curl: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        "{\"error\":\"uid 65534 gid 65534 may not use topomgr: only root and members of group \\\"topomgr\\\" may\",\"reason\":\"Forbidden\"}\n403"
    );
    let log = d.stop();
    assert!(
        log.contains("connection refused: peer is neither root nor in the socket group"),
        "{log}"
    );
}

/// A config with the real CPU provider (static policy, CPU 0 reserved).
fn cpu_config(tag: &str) -> PathBuf {
    cpu_config_with(tag, "")
}

/// [`cpu_config`] with `daemon` (TOML keys of `[daemon]`).
fn cpu_config_with(tag: &str, daemon: &str) -> PathBuf {
    config_dir(tag, &cpu_provider(daemon))
}

/// `[daemon]` with `daemon` and the CPU provider, static policy, CPU 0
/// reserved (TOML).
fn cpu_provider(daemon: &str) -> String {
    format!(
        "[daemon]\n{daemon}[providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\npolicy = \"static\"\nreserved_cpus = \"0\"\n",
        common::cpu_plugin().display()
    )
}

fn pod_yaml(uid: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {uid}\n  namespace: t\n  uid: {uid}\nspec:\n  containers:\n  - name: app\n    resources:\n{resources}"
    )
}

const EXCLUSIVE: &str = "      limits:\n        cpu: \"1\"\n        memory: 1Gi\n";
const BURSTABLE: &str = "      requests:\n        cpu: 500m\n";

/// The CPUs an attach wrote.
fn attached_cpus(r: &topomgr_client::http::Response) -> String {
    assert_eq!(r.status, 200, "{}", r.error_message());
    r.parse::<Attached>().unwrap().cpus.to_string()
}

/// Attaching a shared-pool container and admitting an exclusive one both
/// leave every attached shared cgroup without the exclusive CPUs before the
/// answer; a release gives them back before its answer too (after the
/// state is saved). On this machine's real cgroup hierarchy (ignored in a
/// plain run, and failing saying why without root, a cpuset controller or a
/// second CPU).
#[test]
#[ignore = "needs root, a cpuset cgroup and two CPUs"]
fn the_shared_pool_shrinks_before_an_exclusive_container_can_run() {
    let test = "the_shared_pool_shrinks_before_an_exclusive_container_can_run";
    let mgr = common::real_cgroups(test);
    let cgs = common::TestCgroups::create(mgr, "daemon-pool", &["k/shared", "k/excl", "k/late"]);
    let (all, _) = cgs.root_cpuset();
    let all_cpus = topomgr_sdk::CpuSet::parse(&all).unwrap();
    assert!(
        all_cpus.len() >= 2,
        "{test} needs two CPUs: one CPU ({all}); CPU 0 is reserved and none is left to assign"
    );
    let dir = host_config_dir("daemon-pool", &cpu_provider(""));
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    common::admitted(&mut c, &pod_yaml("shared", BURSTABLE));
    let r = c.attach("shared", "app", &cgs.path("k/shared")).unwrap();
    assert_eq!(attached_cpus(&r), all);
    assert_eq!(cgs.cpus("k/shared"), all);

    let excl = common::admitted(&mut c, &pod_yaml("excl", EXCLUSIVE));
    let cpu = excl.containers[0].cpus.to_string();
    assert!(excl.containers[0].exclusive);
    let pool = all_cpus.difference(&topomgr_sdk::CpuSet::parse(&cpu).unwrap());
    // Shrunk in the kernel before the admission was answered.
    assert_eq!(cgs.cpus("k/shared"), pool.to_string());
    let r = c.attach("excl", "app", &cgs.path("k/excl")).unwrap();
    assert_eq!(attached_cpus(&r), cpu);
    assert_eq!(cgs.cpus("k/excl"), cpu);

    // The pods admitted before show the pool as it is now, not as it was
    // at their admission.
    let shown = |c: &mut Client| -> Vec<(String, String)> {
        let list: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
        list.pods
            .iter()
            .map(|p| {
                let one: Admission = c
                    .get(&format!("/v1/pods/{}", p.uid))
                    .unwrap()
                    .parse()
                    .unwrap();
                assert_eq!(&one, p, "GET /v1/pods/{} and GET /v1/pods agree", p.uid);
                (p.uid.clone(), p.containers[0].cpus.to_string())
            })
            .collect()
    };
    let pool_now = pool.to_string();
    assert_eq!(
        shown(&mut c),
        [
            ("excl".to_owned(), cpu.clone()),
            ("shared".to_owned(), pool_now.clone())
        ]
    );

    // A shared container attached now gets the pool without that CPU.
    let late = common::admitted(&mut c, &pod_yaml("late", BURSTABLE));
    assert_eq!(late.containers[0].cpus.to_string(), pool_now);
    let r = c.attach("late", "app", &cgs.path("k/late")).unwrap();
    assert_eq!(attached_cpus(&r), pool_now);
    assert_eq!(cgs.cpus("k/late"), pool_now);

    assert_eq!(c.release("excl").unwrap().status, 200);
    assert_eq!(cgs.cpus("k/shared"), all);
    assert_eq!(cgs.cpus("k/late"), all);
    assert_eq!(
        shown(&mut c),
        [
            ("late".to_owned(), all.clone()),
            ("shared".to_owned(), all.clone())
        ]
    );
    let health: Health = c.get("/v1/health").unwrap().parse().unwrap();
    assert!(health.exclusive_cpus.is_empty());
}

/// Re-POSTing an admitted uid: the same spec is idempotent, another spec
/// is a 409 that names the conflict, and nothing of that request is admitted.
#[test]
fn same_uid_with_another_spec_is_a_conflict() {
    let dir = widgets_config("daemon-conflict");
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let pod = example_pod("guaranteed-widgets.yaml");
    let first = c.admit(&pod).unwrap().json().unwrap();
    let again = c.admit(&pod).unwrap();
    assert_eq!((again.status, again.json().unwrap()), (200, first.clone()));
    let renamed = pod.replace("name: guaranteed-widgets", "name: impostor");
    let r = c.admit(&renamed).unwrap();
    assert_eq!(
        (r.status, r.json().unwrap()),
        (
            409,
            json!({
                "error": format!("pod uid {WIDGETS_UID:?} is already admitted as ml/guaranteed-widgets with a different spec; release it first, or give the new pod its own uid"),
                "reason": "PodUidConflict"
            })
        )
    );
    let listed: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    let first: Admissions = serde_json::from_value(first).unwrap();
    assert_eq!(listed.pods, first.pods);
}

/// The daemon counts what the ledger refuses.
#[test]
fn ledger_violations_are_refused_and_counted() {
    let dir = mock_config(
        "daemon-ledger",
        "",
        "allocation = { cpus = \"0-1000\", exclusive = true }",
    );
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let r: Admissions = c
        .admit(&pod_yaml("wide", EXCLUSIVE))
        .unwrap()
        .parse()
        .unwrap();
    assert!(!r.pods[0].admitted);
    assert_eq!(
        r.pods[0].message.as_deref().unwrap(),
        "provider \"mock\" gave pod t/wide container \"app\" CPUs 16-1000, which are not online CPUs of this machine (online: 0-15)"
    );
    let metrics = String::from_utf8(c.get("/metrics").unwrap().body).unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == "topomgr_ledger_violations_total{provider=\"mock\"} 1"),
        "{metrics}"
    );
    let health: Health = c.get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(
        (health.pods, health.exclusive_cpus.to_string()),
        (0, String::new())
    );
}

/// Copy the example machine's sysfs tree with `offline` CPUs taken offline.
fn machine_without(dir: &Path, offline: &topomgr_sdk::CpuSet) -> PathBuf {
    let copy = dir.join("sys-copy");
    let status = Command::new("cp")
        .arg("-a")
        .arg(common::workspace_root().join("examples/machines/2s4n/sys"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    for cpu in offline.iter() {
        fs::write(
            copy.join(format!("devices/system/cpu/cpu{cpu}/online")),
            "0\n",
        )
        .unwrap();
    }
    copy
}

/// A CPU held by a pod goes offline: the daemon starts, keeps the pod and
/// its CPU (reported in /v1/health), the CPU provider restores by
/// reconciling (it is not held), a newcomer is admitted on other CPUs, the
/// pod can be released (and health is `ok` again at once: the note named
/// it), and once the CPU is back it is free again.
#[test]
fn vanished_cpus_are_reported_and_the_pods_kept() {
    let dir = cpu_config("daemon-vanished");
    let config = dir.join("topomgr.toml");
    let socket = dir.join("t.sock");
    let d = Daemon::start(&config, &socket);
    let pod = common::admitted(&mut d.client(), &pod_yaml("holder", EXCLUSIVE));
    let cpu = pod.containers[0].cpus.to_string();
    d.stop();

    let smaller = machine_without(&dir, &topomgr_sdk::CpuSet::parse(&cpu).unwrap());
    let d = Daemon::start_with(&config, &socket, &[Path::new("--sysfs-root"), &smaller]);
    let mut c = d.client();
    let health: Health = c.get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(health.status, HealthStatus::Degraded, "{health:?}");
    let notes = health.notes;
    assert!(
        notes.contains(&format!(
            "pod \"holder\" container \"app\": CPUs {cpu} are allocated but not online on this machine"
        )),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .all(|n| !n.contains("cannot read its saved state")
                && !n.contains("state.ckpt")
                && !n.contains("move it away")),
        "{notes:?}"
    );
    let listed: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    assert_eq!(listed.pods[0], pod);
    let newcomer = common::admitted(&mut c, &pod_yaml("newcomer", EXCLUSIVE));
    let theirs = newcomer.containers[0].cpus.clone();
    assert!(
        theirs.intersection(&pod.containers[0].cpus).is_empty(),
        "the offline CPU {cpu} stays the holder's, newcomer got {theirs}"
    );
    assert_eq!(c.release("holder").unwrap().status, 200);
    // The note named the released pod: it goes with it, at once (it stayed
    // until the next machine change before).
    let health: Health = c.get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(
        (health.status, health.notes.clone()),
        (HealthStatus::Ok, Vec::<String>::new()),
        "{health:?}"
    );
    d.stop();

    // The CPU is back and free: the provider holds only the newcomer.
    let d = Daemon::start(&config, &socket);
    let mut c = d.client();
    let health: Health = c.get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(health.status, HealthStatus::Ok, "{health:?}");
    let cp: Value =
        serde_json::from_slice(&common::provider_state(&dir.join("state"), "cpu")).unwrap();
    assert_eq!(
        cp["entries"],
        json!({"newcomer": {"app": theirs.to_string()}}),
        "{cp}"
    );
    let third = common::admitted(&mut c, &pod_yaml("third", EXCLUSIVE));
    assert!(
        third.containers[0].cpus.intersection(&theirs).is_empty(),
        "{third:?}"
    );
}

/// A provider configured after pods were admitted has no saved state
/// (every save writes every provider's): it is new, starts empty and the
/// pods hold nothing of it; they stay admitted and new admissions go on.
#[test]
fn a_provider_added_while_pods_are_held_starts_empty() {
    let dir = widgets_config("daemon-missing");
    let config = dir.join("topomgr.toml");
    let d = Daemon::start(&config, &dir.join("t.sock"));
    let first = common::admitted(&mut d.client(), &example_pod("guaranteed-widgets.yaml"));
    d.stop();
    let mut text = fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[providers.mock]\nlibrary = \"{}\"\n",
        common::plugins().mock.display()
    ));
    fs::write(&config, text).unwrap();
    let d = Daemon::start(&config, &dir.join("t.sock"));
    let mut c = d.client();
    let health: Health = c.get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(health.status, HealthStatus::Ok, "{health:?}");
    assert!(health.conflicts.is_empty(), "{health:?}");
    assert_eq!(health.pods, 1);
    let pods: Value = c.get("/v1/pods").unwrap().parse().unwrap();
    assert_eq!(pods["pods"][0]["uid"], json!(first.uid), "{pods}");
    let yaml = example_pod("guaranteed-widgets.yaml")
        .replace(WIDGETS_UID, "second-uid")
        .replace("name: guaranteed-widgets", "name: second");
    let second = common::admitted(&mut c, &yaml);
    let widgets = |a: &Admission| a.containers[0].devices["example.com/widget"].clone();
    assert!(
        widgets(&second)
            .iter()
            .all(|w| !widgets(&first).contains(w)),
        "{second:?} {first:?}"
    );
    d.stop();
    // The new provider's state is saved from now on.
    assert!(common::state_body(&dir.join("state"))["providers"]
        .get("mock")
        .is_some());
}

/// A tmpfs mounted for a test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "cannot mount a tmpfs at {}: {}",
                at.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fill the filesystem of `dir` with one file; returns its path.
fn fill(dir: &Path) -> PathBuf {
    let filler = dir.join("filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=4096"])
        .arg(format!("of={}", filler.display()))
        .stderr(Stdio::null())
        .status();
    filler
}

/// A full disk: the change is refused (503) and undone, no temporary file
/// is left; once space is freed the same daemon accepts changes again, and
/// a restarted one starts from what was saved.
#[test]
#[ignore = "needs root (mounts a tmpfs)"]
fn a_full_disk_refuses_changes_until_space_is_freed() {
    assert!(
        common::is_root(),
        "a_full_disk_refuses_changes_until_space_is_freed needs root (it mounts a tmpfs)"
    );
    let dir = widgets_config("daemon-full");
    let state = dir.join("state");
    let Some(_tmpfs) = Tmpfs::mount(&state, "64k") else {
        panic!("a_full_disk_refuses_changes_until_space_is_freed needs a tmpfs mount (see the line above)");
    };
    let config = dir.join("topomgr.toml");
    let d = Daemon::start(&config, &dir.join("t.sock"));
    let mut c = d.client();
    let first = common::admitted(&mut c, &example_pod("guaranteed-widgets.yaml"));
    let filler = fill(&state);
    // The journal's last page may still have room: admit small pods until
    // a write needs space that is not there.
    let mut acked = 1;
    let refused = (0..500)
        .find_map(|i| {
            let r = c
                .admit(&pod_yaml(&format!("small-{i}"), BURSTABLE))
                .unwrap();
            if r.status == 200 {
                acked += 1;
                None
            } else {
                Some(r)
            }
        })
        .expect("the full tmpfs never refused a change");
    let second = example_pod("guaranteed-widgets.yaml")
        .replace(WIDGETS_UID, "second")
        .replace("name: guaranteed-widgets", "name: second");
    for r in [refused, c.admit(&second).unwrap()] {
        assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
        let err: ErrorBody = r.parse().unwrap();
        assert_eq!(err.reason, "StateNotSaved");
        let msg = err.error;
        assert!(
            msg.starts_with("topomgr cannot save its state (")
                && msg.contains("No space left on device")
                && msg.ends_with(
                    "the change was not made. Free space or fix the state directory, then retry"
                ),
            "{msg}"
        );
    }
    let mut names: Vec<String> = fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "filler")
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["state.ack", "state.ckpt", "state.journal", "topomgr.lock"]
    );
    let health = c.get("/v1/health").unwrap();
    assert_eq!(health.status, 503);
    let listed: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    assert_eq!(listed.pods.len(), acked);

    fs::remove_file(&filler).unwrap();
    let again = common::admitted(&mut c, &second);
    // The undone admission gave its widgets back: the retry gets the same.
    assert_eq!(
        again.containers[0].devices,
        [(
            "example.com/widget".to_owned(),
            vec!["widget-1-0".to_owned(), "widget-1-1".to_owned()]
        )]
        .into()
    );
    assert_eq!(c.get("/v1/health").unwrap().status, 200);
    d.stop();
    let d = Daemon::start(&config, &dir.join("t.sock"));
    let listed: PodList = d.client().get("/v1/pods").unwrap().parse().unwrap();
    let uids: Vec<&str> = listed.pods.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(uids.len(), acked + 1);
    assert!(uids.contains(&first.uid.as_str()));
    assert!(uids.contains(&"second"));
    drop(d);
}

/// A TCP port free now on the loopback address.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over plain HTTP/1.1 on TCP: (status line, body).
fn http_get(port: u16, path: &str) -> (String, String) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// Every sample of a scrape by its name and labels (`name{k="v",...}`,
/// labels sorted), read with a Prometheus text-format parser.
fn scrape(port: u16) -> std::collections::BTreeMap<String, f64> {
    use prometheus_parse::{Scrape, Value as V};
    let (status, body) = http_get(port, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let parsed = Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for s in parsed.samples {
        let mut labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        labels.sort();
        let key = if labels.is_empty() {
            s.metric.clone()
        } else {
            format!("{}{{{}}}", s.metric, labels.join(","))
        };
        match s.value {
            V::Counter(v) | V::Gauge(v) | V::Untyped(v) => {
                out.insert(key, v);
            }
            V::Histogram(buckets) => {
                let inf = buckets.iter().find(|b| b.less_than.is_infinite()).unwrap();
                out.insert(format!("{key}:+Inf"), inf.count);
            }
            V::Summary(_) => {}
        }
    }
    out
}

/// `daemon.metrics_address` serves `/metrics` over TCP to anyone (nothing
/// else), in a format a Prometheus parser reads: the kubelet's metric names
/// are there at 0 before any admission and move with admissions, the
/// socket serves the same metrics, and a bad manifest is counted.
#[test]
fn metrics_over_tcp_with_the_kubelet_names() {
    let port = free_port();
    let dir = cpu_config_with(
        "daemon-metrics-tcp",
        &format!("metrics_address = \"127.0.0.1:{port}\"\n"),
    );
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let before = scrape(port);
    let kubelet = [
        "topology_manager_admission_requests_total",
        "topology_manager_admission_errors_total",
        "topology_manager_admission_duration_ms_count",
        "topology_manager_admission_duration_ms:+Inf",
        "cpu_manager_pinning_requests_total",
        "cpu_manager_pinning_errors_total",
        "memory_manager_pinning_requests_total",
        "memory_manager_pinning_errors_total",
        "cpu_manager_exclusive_cpu_allocation_count",
        "container_aligned_compute_resources_count{boundary=\"numa_node\",scope=\"container\"}",
        "container_aligned_compute_resources_count{boundary=\"numa_node\",scope=\"pod\"}",
        "container_aligned_compute_resources_failure_count{boundary=\"numa_node\",scope=\"container\"}",
        "container_aligned_compute_resources_failure_count{boundary=\"numa_node\",scope=\"pod\"}",
        "admission_rejections_total{reason=\"BadManifest\"}",
        "admission_rejections_total{reason=\"TopologyAffinityError\"}",
        "cpu_manager_allocation_per_numa{numa_node=\"0\"}",
        "cpu_manager_allocation_per_numa{numa_node=\"3\"}",
        "topomgr_ledger_violations_total{provider=\"cpu\"}",
        "topomgr_admitted_pods",
    ];
    for name in kubelet {
        assert_eq!(before.get(name), Some(&0.0), "{name} in {before:#?}");
    }
    assert_eq!(
        before.get("cpu_manager_shared_pool_size_millicores"),
        Some(&16000.0)
    );

    let mut c = d.client();
    let excl = common::admitted(&mut c, &pod_yaml("excl", EXCLUSIVE));
    let cpu: u32 = excl.containers[0].cpus.to_string().parse().unwrap();
    common::admitted(&mut c, &pod_yaml("shared", BURSTABLE));
    let r = c
        .post("/v1/pods", "application/yaml", b"kind: Pod\n")
        .unwrap();
    assert_eq!(r.status, 400);
    let node = (0..4)
        .find(|n| {
            let list = fs::read_to_string(common::workspace_root().join(format!(
                "examples/machines/2s4n/sys/devices/system/node/node{n}/cpulist"
            )))
            .unwrap();
            topomgr_sdk::CpuSet::parse(list.trim())
                .unwrap()
                .contains(cpu)
        })
        .unwrap();
    let after = scrape(port);
    for (name, want) in [
        ("topology_manager_admission_requests_total".to_owned(), 2.0),
        ("topology_manager_admission_errors_total".to_owned(), 0.0),
        (
            "topology_manager_admission_duration_ms_count".to_owned(),
            2.0,
        ),
        ("cpu_manager_pinning_requests_total".to_owned(), 1.0),
        ("cpu_manager_pinning_errors_total".to_owned(), 0.0),
        ("cpu_manager_exclusive_cpu_allocation_count".to_owned(), 1.0),
        (
            "cpu_manager_shared_pool_size_millicores".to_owned(),
            15000.0,
        ),
        (
            format!("cpu_manager_allocation_per_numa{{numa_node=\"{node}\"}}"),
            1.0,
        ),
        // single-numa-node, container scope: one container each.
        (
            "container_aligned_compute_resources_count{boundary=\"numa_node\",scope=\"container\"}"
                .to_owned(),
            2.0,
        ),
        (
            "admission_rejections_total{reason=\"BadManifest\"}".to_owned(),
            1.0,
        ),
        ("topomgr_admitted_pods".to_owned(), 2.0),
    ] {
        assert_eq!(after.get(&name), Some(&want), "{name} in {after:#?}");
    }
    // The socket serves the same exposition.
    let on_socket = String::from_utf8(c.get("/metrics").unwrap().body).unwrap();
    assert!(
        on_socket
            .lines()
            .any(|l| l == "topology_manager_admission_requests_total 2"),
        "{on_socket}"
    );
    // Nothing but the metrics over TCP.
    assert_eq!(http_get(port, "/v1/pods").0, "HTTP/1.1 404 Not Found");
    assert_eq!(http_get(port, "/v1/health").0, "HTTP/1.1 404 Not Found");
    d.stop();
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "metrics port closed on SIGTERM"
    );
}

/// Under `Type=notify` (`NOTIFY_SOCKET` set), `READY=1` comes once the
/// state is restored and the socket answers, and `STOPPING=1` on SIGTERM.
#[test]
fn readiness_is_notified_once_the_restored_state_is_served() {
    use std::os::unix::net::UnixDatagram;
    let dir = cpu_config("daemon-notify");
    let (config, socket) = (dir.join("topomgr.toml"), dir.join("t.sock"));
    let d = Daemon::start(&config, &socket);
    common::admitted(&mut d.client(), &pod_yaml("kept", EXCLUSIVE));
    d.stop();

    let notify = dir.join("notify.sock");
    let rx = UnixDatagram::bind(&notify).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut child = Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .env("NOTIFY_SOCKET", &notify)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = rx.recv(&mut buf).expect("READY=1 within 30 s");
    // Right at READY=1: the socket answers with the restored pod.
    let pods: PodList = Client::new(&socket)
        .get("/v1/pods")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(pods.pods[0].uid, "kept", "{pods:?}");
    assert_eq!(
        std::str::from_utf8(&buf[..n]).unwrap(),
        format!("READY=1\nSTATUS=serving 1 pod(s) on {}\n", socket.display())
    );
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let n = rx.recv(&mut buf).expect("STOPPING=1 within 30 s");
    assert_eq!(
        std::str::from_utf8(&buf[..n]).unwrap(),
        "STOPPING=1\nSTATUS=stopping\n"
    );
    assert!(child.wait().unwrap().success());
}

/// `topomgr health`: without a daemon an error at once; `--wait=SECONDS`
/// an error naming the socket after that long; started before the daemon,
/// `--wait` returns its health (status 0) once it answers.
#[test]
fn health_waits_for_the_daemon() {
    let dir = widgets_config("daemon-health");
    let config = dir.join("topomgr.toml");
    let socket = dir.join("h.sock");
    let health = |args: &[&str]| {
        let mut cmd = Command::new(common::topomgr_bin());
        cmd.arg("--config")
            .arg(&config)
            .args(["health", "--socket"])
            .arg(&socket)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };
    let out = health(&[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with(&format!(
            "topomgr: error: cannot connect to the topomgr daemon at {}: ",
            socket.display()
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let start = Instant::now();
    let out = health(&["--wait=1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(start.elapsed() >= Duration::from_secs(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "topomgr: error: no daemon answered on {} within 1 s (last try: cannot connect to the topomgr daemon at {}: ",
            socket.display(),
            socket.display()
        )) && stderr.ends_with("); check that `topomgr serve` is running there (its log says why it stopped), or wait longer with --wait=SECONDS\n"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    // The waiting command first, then the daemon.
    let waiting = health(&["--wait"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let d = Daemon::start(&config, &socket);
    let out = waiting.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let h: Health = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(h.status, HealthStatus::Ok);
    assert_eq!(h.pods, 0);
    assert!(out.stderr.is_empty());
    drop(d);
}

/// `topomgr pods --state-dir DIR`: the pods of a state directory, as the
/// daemon lists them; refused while a daemon serves the directory, with
/// the command that asks the daemon instead (which works).
#[test]
fn pods_of_a_state_directory() {
    let dir = widgets_config("daemon-pods-state-dir");
    let config = dir.join("topomgr.toml");
    let state = dir.join("state");
    let pod = common::workspace_root().join("examples/pods/guaranteed-widgets.yaml");
    let topomgr = |args: &[&std::ffi::OsStr]| {
        Command::new(common::topomgr_bin())
            .arg("--config")
            .arg(&config)
            .args(args)
            .output()
            .unwrap()
    };
    let out = topomgr(&[
        "admit".as_ref(),
        "--state-dir".as_ref(),
        state.as_os_str(),
        pod.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let admitted: Admissions = serde_json::from_slice(&out.stdout).unwrap();
    assert!(admitted.pods[0].admitted);

    let out = topomgr(&["pods".as_ref(), "--state-dir".as_ref(), state.as_os_str()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: PodList = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.pods, admitted.pods);
    assert!(list.attachments.is_empty());
    assert!(list.owners.is_empty());

    let out = topomgr(&[
        "pods".as_ref(),
        "-o".as_ref(),
        "table".as_ref(),
        "--state-dir".as_ref(),
        state.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let table = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("POD "), "{table}");
    assert!(lines[0].ends_with(" CGROUP"), "{table}");
    assert!(lines[1].starts_with("ml/guaranteed-widgets "), "{table}");

    // A daemon serves it: refused, naming the daemon and what to do.
    let socket = dir.join("p.sock");
    let d = Daemon::start(&config, &socket);
    let out = topomgr(&["pods".as_ref(), "--state-dir".as_ref(), state.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "topomgr: error: state directory {} belongs to the topomgr daemon (pid {}, ",
            state.display(),
            d.child.id()
        )) && stderr.contains(&format!(
            "for as long as it runs; topomgr pods --state-dir never waits for it: list them through it: `topomgr pods --socket {}`",
            socket.display()
        )),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    let out = topomgr(&["pods".as_ref(), "--socket".as_ref(), socket.as_os_str()]);
    assert_eq!(out.status.code(), Some(0));
    let through: PodList = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(through.pods, admitted.pods);
    drop(d);

    // A directory that does not exist is not made.
    let missing = dir.join("nothing-here");
    let out = topomgr(&["pods".as_ref(), "--state-dir".as_ref(), missing.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "topomgr: error: no state directory at {}: check the path (topomgr serve, run and admit --state-dir create it)\n",
            missing.display()
        )
    );
    assert!(!missing.exists());
}
