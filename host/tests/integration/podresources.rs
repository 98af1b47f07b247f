//! The kubelet's PodResources API served by `topomgr serve`
//! (`[podresources] socket`): the real binary on the example 2-socket,
//! 8-GPU machine (`examples/machines/2s8g`, cgroups in a plain directory),
//! the real CPU (static, CPU 0 reserved), memory (static) and GPU providers
//! (the GPUs of the example's topology file), checked through the Rust
//! client ([`topomgr_podresources::PodResourcesClient`]) and through a
//! client built against the kubelet's published proto
//! (`tests/kube/cmd/podresources-client`, which `.ci/install-kubernetes`
//! builds beside the Kubernetes binaries; `TOPOMGR_PODRESOURCES_CLIENT`
//! names another build): where it is there in a plain run, always in the
//! ignored one.

use crate::common;
use crate::daemon::Daemon;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use topomgr_podresources::{v1, ClientError, Code, PodResourcesClient};

const GPU: &str = "nvidia.com/gpu";

/// The environment variable naming the Go client's binary.
const GO_CLIENT: &str = "TOPOMGR_PODRESOURCES_CLIENT";

/// The Go client: [`GO_CLIENT`], else `podresources-client` beside the
/// Kubernetes binaries of `.ci/install-kubernetes` (`TOPOMGR_KUBE_DIR`, or
/// its default directory).
pub(crate) fn go_client_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(GO_CLIENT) {
        return Some(PathBuf::from(p));
    }
    let dir = std::env::var_os("TOPOMGR_KUBE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(topomgr_runtime_harness::DEFAULT_KUBE_DIR));
    Some(dir.join("podresources-client")).filter(|p| p.is_file())
}

fn config(tag: &str) -> PathBuf {
    let machine = common::workspace_root().join("examples/machines/2s8g");
    let main = format!(
        "policy = \"single-numa-node\"\nsysfs_root = {:?}\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n\
         [podresources]\nsocket = \"pod-resources/kubelet.sock\"\n\
         {}\
         [providers.gpu]\nlibrary = {:?}\n[providers.gpu.config]\nallocation_policy = \"best-effort\"\ntopology_file = {:?}\n",
        machine.join("sys").display().to_string(),
        common::real_cpu_and_memory_providers(),
        common::gpu_plugin().display().to_string(),
        machine.join("gpu-topology.json").display().to_string(),
    );
    common::config_dir(tag, &main, &[])
}

/// A Guaranteed pod of 2 CPUs, 1 GiB and one GPU.
const TRAINER: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: trainer, namespace: ml, uid: 7a0c0000-0000-4000-8000-000000000001}\n\
spec:\n  containers:\n  - name: app\n    image: x\n    resources: {limits: {cpu: \"2\", memory: 1Gi, nvidia.com/gpu: 1}}\n";
/// A Burstable pod: the shared pool, nothing exclusive.
const WEB: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: ml, uid: 7a0c0000-0000-4000-8000-000000000002}\n\
spec:\n  containers:\n  - name: srv\n    image: x\n    resources: {requests: {cpu: 500m, memory: 64Mi}}\n";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn client(rt: &tokio::runtime::Runtime, socket: &Path) -> PodResourcesClient {
    rt.block_on(PodResourcesClient::connect(socket, Duration::from_secs(10)))
        .unwrap()
}

fn nodes(t: &Option<v1::TopologyInfo>) -> Vec<i64> {
    t.iter()
        .flat_map(|t| t.nodes.iter().map(|n| n.id))
        .collect()
}

#[test]
fn list_get_and_allocatable_show_what_the_daemon_admitted() {
    list_get_and_allocatable(go_client_binary());
}

/// The same through the kubelet's own client, which must be there.
#[test]
#[ignore = "needs the kubelet-proto client that .ci/install-kubernetes builds"]
fn the_kubelets_own_client_sees_what_the_daemon_admitted() {
    let go = go_client_binary().unwrap_or_else(|| {
        panic!(
            "no podresources-client: run .ci/install-kubernetes (it builds tests/kube/cmd/podresources-client), or set {GO_CLIENT}"
        )
    });
    list_get_and_allocatable(Some(go));
}

fn list_get_and_allocatable(go: Option<PathBuf>) {
    let dir = config("podresources-daemon");
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("topomgr.sock"));
    let socket = dir.join("pod-resources/kubelet.sock");
    let rt = runtime();
    let mut c = client(&rt, &socket);
    let mut http = d.client();

    // Nothing admitted: nothing listed; allocatable is every CPU but the
    // reserved one, the 8 GPUs on their nodes, memory on both nodes.
    assert_eq!(rt.block_on(c.list()).unwrap().pod_resources, vec![]);
    let alloc = rt.block_on(c.allocatable()).unwrap();
    assert!(!alloc.cpu_ids.contains(&0), "{:?}", alloc.cpu_ids);
    assert_eq!(alloc.cpu_ids.len(), 31, "{:?}", alloc.cpu_ids);
    let gpus: Vec<(String, Vec<i64>)> = alloc
        .devices
        .iter()
        .map(|d| (d.device_ids.join(","), nodes(&d.topology)))
        .collect();
    let expected: Vec<(String, Vec<i64>)> = (0..8)
        .map(|i| (format!("GPU-{i}"), vec![i64::from(i >= 4)]))
        .collect();
    assert_eq!(gpus, expected);
    assert!(alloc.devices.iter().all(|d| d.resource_name == GPU));
    let memory_nodes: BTreeSet<i64> = alloc
        .memory
        .iter()
        .filter(|m| m.memory_type == "memory" && m.size > 0)
        .flat_map(|m| nodes(&m.topology))
        .collect();
    assert_eq!(memory_nodes, BTreeSet::from([0, 1]));

    let trainer = common::admitted(&mut http, TRAINER);
    common::admitted(&mut http, WEB);
    let app = &trainer.containers[0];
    let node = i64::from(app.affinity.unwrap().iter().next().unwrap().get());

    let listed = rt.block_on(c.list()).unwrap().pod_resources;
    let names: Vec<(&str, &str)> = listed
        .iter()
        .map(|p| (p.namespace.as_str(), p.name.as_str()))
        .collect();
    assert_eq!(names, [("ml", "trainer"), ("ml", "web")]);
    let got = &listed[0].containers[0];
    assert_eq!(got.name, "app");
    let cpus: Vec<i64> = app.cpus.iter().map(i64::from).collect();
    assert_eq!(got.cpu_ids, cpus);
    assert_eq!(got.cpu_ids.len(), 2);
    assert_eq!(
        got.devices,
        vec![v1::ContainerDevices {
            resource_name: GPU.to_owned(),
            device_ids: app.devices[GPU].clone(),
            topology: v1::topology([node]),
        }]
    );
    assert_eq!(
        got.memory,
        vec![v1::ContainerMemory {
            memory_type: "memory".to_owned(),
            size: 1 << 30,
            topology: v1::topology([node]),
        }]
    );
    // The shared-pool container lists no CPUs, memory or devices.
    let srv = &listed[1].containers[0];
    assert_eq!(
        (
            srv.name.as_str(),
            srv.cpu_ids.len(),
            srv.memory.len(),
            srv.devices.len()
        ),
        ("srv", 0, 0, 0)
    );

    // Get: the same pod; an unknown one is the kubelet's error.
    let one = rt.block_on(c.get("ml", "trainer")).unwrap();
    assert_eq!(one.pod_resources.as_ref(), Some(&listed[0]));
    match rt.block_on(c.get("ml", "nope")) {
        Err(ClientError::Call { code, message, .. }) => {
            assert_eq!(code, Code::Unknown);
            assert_eq!(message, "pod nope in namespace ml not found");
        }
        other => panic!("expected the kubelet's not-found error, got {other:?}"),
    }

    // The kubelet's own client agrees, when CI built it.
    if let Some(go) = go {
        let list = go_client(&go, &socket, &["list"]);
        let pods = list["pod_resources"].as_array().unwrap();
        assert_eq!(pods.len(), 2, "{list}");
        let app = &pods[0]["containers"][0];
        assert_eq!(pods[0]["name"], "trainer");
        let go_cpus: Vec<i64> = app["cpu_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                v.as_str()
                    .map_or_else(|| v.as_i64().unwrap(), |s| s.parse().unwrap())
            })
            .collect();
        assert_eq!(go_cpus, cpus);
        assert_eq!(
            app["devices"][0]["device_ids"][0],
            got.devices[0].device_ids[0].as_str()
        );
        assert_eq!(
            app["devices"][0]["topology"]["nodes"][0]["ID"]
                .to_string()
                .trim_matches('"'),
            node.to_string()
        );
        assert_eq!(app["memory"][0]["memory_type"], "memory");
        let get = go_client(&go, &socket, &["get", "ml", "trainer"]);
        assert_eq!(get["pod_resources"], pods[0]);
        let alloc_go = go_client(&go, &socket, &["allocatable"]);
        assert_eq!(alloc_go["cpu_ids"].as_array().unwrap().len(), 31);
        assert_eq!(alloc_go["devices"].as_array().unwrap().len(), 8);
        let out = Command::new(&go)
            .args(["-socket"])
            .arg(&socket)
            .args(["get", "ml", "nope"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            common::text(&out.stderr).trim(),
            "Unknown: pod nope in namespace ml not found"
        );
    } else {
        eprintln!("no podresources-client (see go_client_binary): the kubelet-proto client's checks are left to the ignored test");
    }

    // A release shows at once.
    let r = http.release(&trainer.uid).unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let names: Vec<String> = rt
        .block_on(c.list())
        .unwrap()
        .pod_resources
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["web"]);

    // SIGTERM stops the daemon while this client's connection is open and
    // unpolled (it never answers the server's goodbye).
    let mut d = d;
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(d.child.id().to_string())
        .status();
    assert!(
        common::poll(Duration::from_secs(15), || d
            .child
            .try_wait()
            .unwrap()
            .is_some()),
        "the daemon did not stop while a PodResources client stayed connected"
    );
    drop(c);
}

/// Runs the Go client; its JSON answer.
fn go_client(go: &Path, socket: &Path, args: &[&str]) -> Value {
    let out = Command::new(go)
        .arg("-socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn an_unusable_socket_path_is_refused_at_start_naming_it() {
    let dir = config("podresources-refused");
    // A file where the socket goes.
    std::fs::create_dir_all(dir.join("pod-resources")).unwrap();
    std::fs::write(dir.join("pod-resources/kubelet.sock"), "not a socket").unwrap();
    let out = Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(dir.join("topomgr.toml"))
        .arg("serve")
        .arg("--socket")
        .arg(dir.join("topomgr.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", common::text(&out.stderr));
    let err = common::text(&out.stderr);
    assert!(
        err.contains(&format!(
            "[podresources] socket {}: exists and is not a socket; refusing to remove it",
            dir.join("pod-resources/kubelet.sock").display()
        )),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("pod-resources/kubelet.sock")).unwrap(),
        "not a socket"
    );
}

#[test]
fn allocatable_follows_a_reload() {
    let dir = config("podresources-reload");
    let config = dir.join("topomgr.toml");
    let d = Daemon::start(&config, &dir.join("topomgr.sock"));
    let rt = runtime();
    let mut c = client(&rt, &dir.join("pod-resources/kubelet.sock"));
    let before = rt.block_on(c.allocatable()).unwrap().cpu_ids;
    assert!(before.contains(&1), "{before:?}");
    // CPU 1 reserved too, then SIGHUP: the allocatable CPUs follow.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("reserved_cpus = \"0\"", "reserved_cpus = \"0,1\""),
    )
    .unwrap();
    let status = Command::new("kill")
        .arg("-HUP")
        .arg(d.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let mut after = Vec::new();
    let reloaded = common::poll(Duration::from_secs(20), || {
        after = rt.block_on(c.allocatable()).unwrap().cpu_ids;
        !after.contains(&1)
    });
    assert!(
        reloaded,
        "CPU 1 is still allocatable after the reload: {after:?}"
    );
    assert_eq!(after.len(), before.len() - 1, "{before:?} -> {after:?}");
    drop(c);
    d.stop();
}
