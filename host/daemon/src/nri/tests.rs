//! The NRI face driven in process, event by event as the runtime sends
//! them, over a real state thread (journal in a temporary directory) and a
//! scripted CPU provider with the kubelet static policy's shape: CPU 0
//! reserved, whole CPUs of Guaranteed containers exclusive on one NUMA node,
//! everything else in the shared pool. After every event: no CPU is held by
//! two containers, no container holds what the state does not, and each
//! container's cpuset as the runtime was told it matches the state.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use topomgr_engine::admission::Admitter;
use topomgr_engine::numa::NumaInfo;
use topomgr_engine::policy::{Policy, Scope};
use topomgr_engine::provider::LoadedProvider;
use topomgr_nri::api::{
    Container, ContainerState, ContainerUpdate, CreateContainerResponse, LinuxContainer, LinuxCpu,
    LinuxMemory, LinuxPodSandbox, LinuxResources, OptionalInt64, OptionalUInt64, PodSandbox,
};
use topomgr_sdk::testkit::FakeProvider;
use topomgr_sdk::{
    Allocation, CpuSet, HintSet, NumaMask, NumaNodeId, ProviderError, QosClass, TopologyHint,
};

use super::*;
use crate::metrics::Metrics;
use crate::state_thread::{
    Command, ContainerCommand, Late, NewContainer, StateThread, StateThreadSettings,
};
use topomgr_node::state::followed::FollowedContainer;

/// Exclusive CPUs by (pod uid, container).
type Held = Arc<Mutex<BTreeMap<(String, String), CpuSet>>>;

/// CPUs 0-3: node 0 has 0-1, node 1 has 2-3; CPU 0 is reserved.
fn cpu_provider(held: &Held) -> FakeProvider {
    let node_cpus = |n: u32| CpuSet::parse(if n == 0 { "1" } else { "2-3" }).unwrap();
    let free_on = {
        let held = Arc::clone(held);
        move |n: u32| {
            let taken = held
                .lock()
                .unwrap()
                .values()
                .fold(CpuSet::new(), |a, c| a.union(c));
            node_cpus(n).difference(&taken)
        }
    };
    let whole = |pod: &topomgr_sdk::PodView, c: &topomgr_sdk::ContainerView| -> Option<usize> {
        let cpu = *c.requests.get("cpu")?;
        (pod.qos == QosClass::Guaranteed && cpu % 1000 == 0).then_some((cpu / 1000) as usize)
    };
    let hints_free = free_on.clone();
    let pod_free = free_on.clone();
    let resize_free = free_on.clone();
    let held_alloc = Arc::clone(held);
    let held_release = Arc::clone(held);
    let held_resize = Arc::clone(held);
    FakeProvider::new()
        .with_pod_hints(move |pod| {
            // Pod scope: the pod's whole CPUs (its largest init container,
            // or all its app containers together) on one node.
            let apps: usize = pod.containers.iter().filter_map(|c| whole(pod, c)).sum();
            let inits = pod
                .init_containers
                .iter()
                .filter_map(|c| whole(pod, c))
                .max();
            let n = inits.unwrap_or(0).max(apps);
            if n == 0 {
                return Ok(None);
            }
            let hints: Vec<TopologyHint> = (0..2)
                .filter(|&node| pod_free(node).len() >= n)
                .map(|node| TopologyHint::new(NumaMask::single(NumaNodeId::from(node as u8)), true))
                .collect();
            Ok(Some(BTreeMap::from([(
                "cpu".to_owned(),
                Some(if hints.is_empty() {
                    HintSet::unsatisfiable()
                } else {
                    HintSet::Explicit(hints)
                }),
            )])))
        })
        .with_hints(move |pod, c| {
            let Some(n) = whole(pod, c) else {
                return Ok(None);
            };
            let hints: Vec<TopologyHint> = (0..2)
                .filter(|&node| hints_free(node).len() >= n)
                .map(|node| TopologyHint::new(NumaMask::single(NumaNodeId::from(node as u8)), true))
                .collect();
            Ok(Some(BTreeMap::from([(
                "cpu".to_owned(),
                Some(if hints.is_empty() {
                    HintSet::unsatisfiable()
                } else {
                    HintSet::Explicit(hints)
                }),
            )])))
        })
        .with_allocate(move |pod, c, hint| {
            if c.name.starts_with("ctr-slower") {
                // Slow enough to hold others queued behind it.
                std::thread::sleep(std::time::Duration::from_millis(1000));
            } else if c.name == "ctr-slow" {
                // An allocation slower than a test's answer deadline.
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            let Some(n) = whole(pod, c) else {
                return Ok(Allocation::default());
            };
            let node = hint.affinity.and_then(|m| m.first()).map_or(0, |n| n.get());
            let free = free_on(node);
            let cpus: CpuSet = free.iter().take(n).collect();
            if cpus.len() < n {
                return Err(ProviderError::admission("not enough CPUs"));
            }
            held_alloc
                .lock()
                .unwrap()
                .insert((pod.uid.clone(), c.name.clone()), cpus.clone());
            Ok(Allocation::default()
                .with_cpus(cpus, true)
                .with_mems(NumaMask::single(NumaNodeId::from(node as u8))))
        })
        .with_resize(move |pod, c, _current, _hint| {
            // Grows on the node it is on, shrinks keeping its first CPUs; a
            // shared container stays shared; "ctr-stubborn" does not resize.
            if c.name == "ctr-stubborn" {
                return Ok(None);
            }
            let key = (pod.uid.clone(), c.name.clone());
            let mut held = held_resize.lock().unwrap();
            let Some(now) = held.get(&key).cloned() else {
                return match whole(pod, c) {
                    Some(_) => Err(ProviderError::resize_infeasible(
                        "a shared container cannot get exclusive CPUs in a resize",
                    )),
                    None => Ok(Some(Allocation::default())),
                };
            };
            let Some(n) = whole(pod, c) else {
                return Err(ProviderError::resize_infeasible(
                    "exclusive CPUs resize by whole CPUs",
                ));
            };
            let node = if now.iter().any(|c| c >= 2) { 1 } else { 0 };
            let cpus: CpuSet = if n <= now.len() {
                now.iter().take(n).collect()
            } else {
                drop(held);
                let free = resize_free(node);
                held = held_resize.lock().unwrap();
                if free.len() < n - now.len() {
                    return Err(ProviderError::resize_infeasible(format!(
                        "needs {} more CPUs on node {node}, {} free",
                        n - now.len(),
                        free.len()
                    )));
                }
                now.union(&free.iter().take(n - now.len()).collect())
            };
            held.insert(key, cpus.clone());
            Ok(Some(
                Allocation::default()
                    .with_cpus(cpus, true)
                    .with_mems(NumaMask::single(NumaNodeId::from(node as u8))),
            ))
        })
        .with_release(move |uid, c| {
            held_release
                .lock()
                .unwrap()
                .remove(&(uid.to_owned(), c.to_owned()));
            Ok(())
        })
}

struct World {
    face: Arc<Face>,
    metrics: Arc<Metrics>,
    state: StateThread,
    held: Held,
    dir: PathBuf,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn world(tag: &str) -> World {
    world_with(tag, topomgr_sdk::testkit::machine(2, 2), |f, _| f)
}

/// [`world`] on `machine`, its face set up by `face` (given the world's
/// directory).
fn world_with(
    tag: &str,
    machine: topomgr_sdk::Machine,
    face: impl FnOnce(Face, &std::path::Path) -> Face,
) -> World {
    world_full(tag, machine, Scope::Container, Vec::new(), face)
}

/// [`world_with`] under `scope`.
fn world_in(
    tag: &str,
    machine: topomgr_sdk::Machine,
    scope: Scope,
    face: impl FnOnce(Face, &std::path::Path) -> Face,
) -> World {
    world_full(tag, machine, scope, Vec::new(), face)
}

/// [`world_with`] with `more` providers after the CPU provider.
fn world_with_providers(
    tag: &str,
    machine: topomgr_sdk::Machine,
    more: Vec<LoadedProvider>,
    face: impl FnOnce(Face, &std::path::Path) -> Face,
) -> World {
    world_full(tag, machine, Scope::Container, more, face)
}

/// [`world_with`] under `scope`, with `more` providers after the CPU
/// provider.
fn world_full(
    tag: &str,
    machine: topomgr_sdk::Machine,
    scope: Scope,
    more: Vec<LoadedProvider>,
    face: impl FnOnce(Face, &std::path::Path) -> Face,
) -> World {
    let dir = std::env::temp_dir().join(format!("topomgr-nri-face-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let held = Held::default();
    let numa = NumaInfo::new(vec![0, 1], None).unwrap();
    let policy = Policy::new("single-numa-node", &BTreeMap::new(), numa).unwrap();
    let admitter = Admitter::new(
        &machine,
        policy,
        scope,
        std::iter::once(LoadedProvider::in_process("cpu", cpu_provider(&held)))
            .chain(more)
            .collect(),
    );
    let settings = StateThreadSettings {
        state_dir: dir.join("state"),
        cgroup_root: dir.join("cgroup"),
        lift_cpu_quota: true,
        limits: Default::default(),
        members: None,
        boot_id: "boot".into(),
        export: Default::default(),
        nrt_push: None,
    };
    let metrics = Arc::new(Metrics::new());
    let (state, _) =
        StateThread::start(admitter, &machine, settings, Arc::clone(&metrics)).unwrap();
    let face = Arc::new(face(
        Face::new(
            state.clone(),
            NriStatus::enabled("/run/nri.sock".as_ref(), None),
        ),
        &dir,
    ));
    World {
        face,
        metrics,
        state,
        held,
        dir,
    }
}

fn pod(id: &str, qos: &str) -> PodSandbox {
    let uid = format!("0000{id}-0000-0000-0000-000000000000");
    let parent = match qos {
        "g" => format!("/kubepods/pod{uid}"),
        "b" => format!("/kubepods/burstable/pod{uid}"),
        _ => format!("/kubepods/besteffort/pod{uid}"),
    };
    PodSandbox {
        id: format!("sandbox-{id}"),
        name: format!("pod-{id}"),
        uid,
        namespace: "team-a".into(),
        linux: Some(LinuxPodSandbox {
            cgroup_parent: parent,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A container as containerd describes it: `cpu_m` request, `limit_m`
/// limit (0: none).
fn container(id: &str, pod: &PodSandbox, cpu_m: u64, limit_m: i64) -> Container {
    let shares = (cpu_m * 1024).div_ceil(1000).max(2);
    Container {
        id: id.into(),
        pod_sandbox_id: pod.id.clone(),
        name: format!("ctr-{id}"),
        state: ContainerState::ContainerRunning as i32,
        linux: Some(LinuxContainer {
            resources: Some(LinuxResources {
                cpu: Some(LinuxCpu {
                    shares: Some(OptionalUInt64 { value: shares }),
                    quota: (limit_m > 0).then_some(OptionalInt64 {
                        value: limit_m * 100,
                    }),
                    period: Some(OptionalUInt64 { value: 100_000 }),
                    ..Default::default()
                }),
                memory: Some(LinuxMemory::default()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn cpus_of(u: &ContainerUpdate) -> (String, String) {
    let cpu = u
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.clone())
        .unwrap();
    (u.container_id.clone(), cpu.cpus)
}

fn updates(u: &[ContainerUpdate]) -> Vec<(String, String)> {
    u.iter().map(cpus_of).collect()
}

impl World {
    /// The invariants: every exclusive CPU is held by one container; the
    /// provider holds exactly what the admitted pods hold; every container
    /// followed was told the cpuset the state gives it.
    fn check(&self) {
        let (pods, pool) = self.state.read(|v| (v.pods.clone(), v.shared_pool.clone()));
        let held = self.held.lock().unwrap().clone();
        let mut seen = CpuSet::new();
        for cpus in held.values() {
            assert!(
                seen.intersection(cpus).is_empty(),
                "a CPU held twice: {held:?}"
            );
            seen = seen.union(cpus);
        }
        for (uid, _) in held.keys() {
            assert!(
                pods.contains_key(uid),
                "{uid} holds CPUs but is not admitted"
            );
        }
        assert!(
            pool.intersection(&seen).is_empty(),
            "pool {pool} has exclusive CPUs {seen}"
        );
        for (id, c, exclusive) in self.book() {
            let told = c.told.clone().expect("every container was told");
            if exclusive {
                let uid = c.pod_uid_in(&id).to_owned();
                assert_eq!(told.cpus, held[&(uid, c.name.clone())]);
            } else {
                assert_eq!(told.cpus, pool, "{id} is told the pool");
            }
        }
    }

    /// Every container followed: (id, what is kept, exclusive).
    fn book(&self) -> Vec<(String, FollowedContainer, bool)> {
        let face = Arc::clone(&self.face);
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(face.ask(ContainerCommand::Book))
                .unwrap()
                .book
        })
        .join()
        .unwrap()
    }
}

/// The (cpus, mems) a create answer sets for the container.
fn cpuset_of(answer: &CreateContainerResponse) -> (&str, &str) {
    let cpu = answer
        .adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref())
        .expect("the answer sets the container's cpuset");
    (cpu.cpus.as_str(), cpu.mems.as_str())
}

#[tokio::test]
async fn guaranteed_burstable_refused_and_stopped_containers() {
    let w = world("flow");
    let f = &w.face;
    let g = pod("1", "g");
    let b = pod("2", "b");

    // A Burstable container first: the shared pool, every CPU.
    let burst = f
        .create(b.clone(), container("b1", &b, 100, 500))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&burst), ("0-3", "0-1"));
    assert!(burst.update.is_empty());
    w.check();

    // A Guaranteed 1-CPU container: CPU 1 on node 0, exclusive; the
    // Burstable container loses it in the same answer.
    let gr = f
        .create(g.clone(), container("g1", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&gr), ("1", "0"));
    assert_eq!(updates(&gr.update), [("b1".to_owned(), "0,2-3".to_owned())]);
    assert!(
        !gr.update[0].ignore_failure,
        "a shrink must not fail silently"
    );
    w.check();

    // Two more whole CPUs fit on node 1 only; three fit on no node.
    let g2 = f
        .create(g.clone(), container("g2", &g, 2000, 2000))
        .await
        .unwrap();
    assert_eq!(updates(&g2.update), [("b1".to_owned(), "0".to_owned())]);
    let err = f
        .create(g.clone(), container("g3", &g, 3000, 3000))
        .await
        .unwrap_err();
    assert!(
        err.message().starts_with(
            "topomgr: TopologyAffinityError: Resources cannot be allocated with Topology Locality"
        ),
        "{}",
        err.message()
    );
    assert!(!w.state.read(|v| v.pods.contains_key("g3")), "nothing held");
    w.check();

    // The kubelet's resource update keeps g1's cpuset.
    let up = f
        .update(g.clone(), container("g1", &g, 1000, 1000), None)
        .await
        .unwrap();
    assert_eq!(updates(&up.update), [("g1".to_owned(), "1".to_owned())]);

    // Stopping g1 gives CPU 1 back to b1 in the answer.
    let back = f
        .stop(g.clone(), container("g1", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(updates(&back), [("b1".to_owned(), "0-1".to_owned())]);
    assert!(
        back[0].ignore_failure,
        "a grow may fail without failing the stop"
    );
    assert!(!w.state.read(|v| v.pods.contains_key("g1")));
    w.check();
    // A second stop (containerd also reports the exit) changes nothing.
    assert!(f
        .stop(g.clone(), container("g1", &g, 1000, 1000))
        .await
        .unwrap()
        .is_empty());

    // Removing the pod releases what is still held.
    f.remove_pod(g.clone()).await;
    assert!(!w.state.read(|v| v.pods.contains_key("g2")));
    assert!(w.held.lock().unwrap().is_empty());
    assert_eq!(w.face.status().health().containers, 1);
}

/// A recorded two-node machine with two NICs, 0000:17:00.0 on node 0 and
/// 0000:af:00.0 on node 1.
fn two_node_nic_machine() -> topomgr_sdk::Machine {
    use topomgr_sdk::PciDevice;
    let base = topomgr_sdk::testkit::machine(2, 2);
    let nic = |address: &str, node: u8| {
        PciDevice::new(address, "0x15b3", "0x101d", "0x020000", Some(node.into()))
    };
    topomgr_sdk::Machine::new(
        base.numa_nodes.clone(),
        base.cpus.clone(),
        vec![nic("0000:17:00.0", 0), nic("0000:af:00.0", 1)],
    )
}

/// Under `dir`, the CDI spec of [`two_node_nic_machine`]'s NICs (device
/// `example.org/nic=a`, node `/dev/infiniband/uverbs0` 231:192, the NIC on
/// node 1; `b`, `uverbs1` 231:193, the one on node 0) and a recorded sysfs
/// that maps the nodes to the NICs; the resolver that reads them (with a
/// spec directory that does not exist first).
fn record_nic_cdi(dir: &std::path::Path) -> crate::cdi::Resolver {
    let (cdi, sys) = (dir.join("cdi"), dir.join("sys"));
    std::fs::create_dir_all(&cdi).unwrap();
    std::fs::write(
        cdi.join("nic.yaml"),
        "cdiVersion: 0.6.0\nkind: example.org/nic\ndevices:\n\
         - name: a\n  containerEdits:\n    deviceNodes:\n    - {path: /dev/infiniband/uverbs0, major: 231, minor: 192}\n\
         - name: b\n  containerEdits:\n    deviceNodes:\n    - {path: /dev/infiniband/uverbs1, major: 231, minor: 193}\n",
    )
    .unwrap();
    std::fs::create_dir_all(sys.join("dev/char")).unwrap();
    for (minor, pci) in [(192, "0000:af:00.0"), (193, "0000:17:00.0")] {
        let class = sys.join(format!(
            "devices/pci0000:00/{pci}/infiniband_verbs/uverbs{minor}"
        ));
        std::fs::create_dir_all(&class).unwrap();
        std::os::unix::fs::symlink(&class, sys.join(format!("dev/char/231:{minor}"))).unwrap();
    }
    crate::cdi::Resolver::new(vec![dir.join("absent"), cdi], sys)
}

/// Issue 35: CDI devices (a DRA driver's) on node 1 of a two-node machine,
/// found by the container's device nodes through the CDI specs and sysfs,
/// put its CPUs on node 1; devices on both nodes are refused under
/// single-numa-node, the message naming them. No provider lists them: the
/// PCI devices' NUMA nodes count.
#[tokio::test]
async fn cdi_devices_put_a_container_on_their_numa_node() {
    use topomgr_nri::api::LinuxDevice;
    let w = world_with("cdi", two_node_nic_machine(), |f, dir| {
        f.with_cdi(record_nic_cdi(dir), None)
    });
    let g = pod("1", "g");
    let node = |minor: i64| LinuxDevice {
        path: format!("/dev/infiniband/uverbs{}", minor - 192),
        r#type: "c".into(),
        major: 231,
        minor,
        ..Default::default()
    };
    let with_devices = |id: &str, minors: &[i64]| {
        let mut c = container(id, &g, 1000, 1000);
        c.linux.as_mut().unwrap().devices = minors.iter().map(|&m| node(m)).collect();
        c
    };
    // Without devices the CPU provider's first choice: node 0 (CPU 1).
    // With device a (node 1): CPU 2 or 3, memory node 1.
    let on_1 = w
        .face
        .create(g.clone(), with_devices("g1", &[192]))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&on_1), ("2", "1"));
    w.check();
    // Devices a and b span both nodes: refused, naming them.
    let err = w
        .face
        .create(g.clone(), with_devices("g2", &[192, 193]))
        .await
        .unwrap_err();
    let message = err.message();
    assert_eq!(
        message,
        "topomgr: TopologyAffinityError: Resources cannot be allocated with Topology Locality: \
         container \"ctr-g2\" needs every resource on one common NUMA node (policy single-numa-node); \
         cpu (cpu): preferred on {0} or {1}; \
         CDI device example.org/nic=a (0000:af:00.0) (CDI devices): fits on {1} or larger (preferred at 1 node(s)); \
         CDI device example.org/nic=b (0000:17:00.0) (CDI devices): fits on {0} or larger (preferred at 1 node(s))"
    );
    assert!(!w.state.read(|v| v.pods.contains_key("g2")), "nothing held");
    // A node of no CDI device says nothing: node 0 as without devices.
    let mut other = with_devices("g3", &[]);
    other.linux.as_mut().unwrap().devices = vec![LinuxDevice {
        path: "/dev/fuse".into(),
        r#type: "c".into(),
        major: 10,
        minor: 229,
        ..Default::default()
    }];
    let plain = w.face.create(g.clone(), other).await.unwrap();
    assert_eq!(cpuset_of(&plain).0, "1");
    w.check();
}

/// Issue 35, the OCI hook's face: an owned admission carrying the
/// container's device nodes (as the hook reads them from Podman's
/// `linux.devices`) or its `cdi.k8s.io/*` annotation is aligned with its
/// CDI devices exactly as the NRI face is (the same resolver): on node 1
/// for the NIC on node 1; refused under single-numa-node, naming both, for
/// devices on both nodes; nothing held then. A request without devices
/// (an older client) is placed as before, and bad devices are a 400 that
/// names the field.
#[tokio::test]
async fn an_owned_admissions_cdi_devices_put_it_on_their_numa_node() {
    use topomgr_node::api::{AdmissionRequest, ContainerDevices, DeviceNode, OwnerSpec};
    let w = world_with("cdi-http", two_node_nic_machine(), |f, _| f);
    let cdi = record_nic_cdi(&w.dir);
    let admit = |id: &str, devices: Option<ContainerDevices>| {
        let pod = topomgr_sdk::PodView::new(id, id, "podman", topomgr_sdk::QosClass::Guaranteed)
            .with_containers(vec![topomgr_sdk::ContainerView::new(id)
                .with_requests(topomgr_sdk::ResourceList::from([("cpu".to_owned(), 1000)]))
                .with_limits(topomgr_sdk::ResourceList::from([(
                    "cpu".to_owned(),
                    1000,
                )]))]);
        let body = AdmissionRequest {
            pod,
            owner: OwnerSpec::container(
                topomgr_node::state::pod_owner::ContainerRuntime::OciHook,
                id,
            ),
            attach: None,
            devices,
        };
        axum::http::Request::post("/v1/pods")
            .header("content-type", topomgr_node::api::OWNED_ADMISSION)
            .body(axum::body::Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap()
    };
    let nodes = |minors: &[u32]| ContainerDevices {
        nodes: minors
            .iter()
            .map(|m| DeviceNode::new(format!("/dev/infiniband/uverbs{}", m - 192), "c", 231, *m))
            .collect(),
        ..Default::default()
    };
    let placed = |answer: &serde_json::Value| {
        let c = &answer["pods"][0]["containers"][0];
        (
            c["cpus"].as_str().unwrap().to_owned(),
            c["mems"].as_str().unwrap().to_owned(),
        )
    };
    // By its node: device a, on node 1.
    let (status, on_1) = over_http(&w, cdi.clone(), admit("h1", Some(nodes(&[192])))).await;
    assert_eq!(status, 200, "{on_1}");
    assert_eq!(on_1["pods"][0]["admitted"], true, "{on_1}");
    assert_eq!(placed(&on_1), ("2".to_owned(), "1".to_owned()));
    // By its annotation: device a again, its node not given.
    let annotated = ContainerDevices {
        cdi_annotations: BTreeMap::from([(
            "cdi.k8s.io/nic".to_owned(),
            "example.org/nic=a".to_owned(),
        )]),
        ..Default::default()
    };
    let (status, by_name) = over_http(&w, cdi.clone(), admit("h2", Some(annotated))).await;
    assert_eq!(status, 200, "{by_name}");
    assert_eq!(placed(&by_name), ("3".to_owned(), "1".to_owned()));
    // Devices a and b span both nodes: refused, naming them (node 1's
    // CPUs are h1's and h2's now).
    let (status, spans) = over_http(&w, cdi.clone(), admit("h3", Some(nodes(&[192, 193])))).await;
    assert_eq!(status, 200, "{spans}");
    let refused = &spans["pods"][0];
    assert_eq!(refused["admitted"], false, "{spans}");
    assert_eq!(refused["reason"], "TopologyAffinityError");
    assert_eq!(
        refused["message"],
        "Resources cannot be allocated with Topology Locality: \
         container \"h3\" needs every resource on one common NUMA node (policy single-numa-node); \
         cpu (cpu): preferred on {0}; \
         CDI device example.org/nic=a (0000:af:00.0) (CDI devices): fits on {1} or larger (preferred at 1 node(s)); \
         CDI device example.org/nic=b (0000:17:00.0) (CDI devices): fits on {0} or larger (preferred at 1 node(s))"
    );
    assert!(!w.state.read(|v| v.pods.contains_key("h3")), "nothing held");
    // Without devices (an older client): the CPU provider's first choice,
    // node 0.
    let (status, plain) = over_http(&w, cdi.clone(), admit("h4", None)).await;
    assert_eq!(status, 200, "{plain}");
    assert_eq!(placed(&plain), ("1".to_owned(), "0".to_owned()));
    // A bad node: refused before anything is asked, naming the field.
    let mut bad = nodes(&[192]);
    bad.nodes[0].kind = "x".into();
    let (status, refused) = over_http(&w, cdi, admit("h5", Some(bad))).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        (&refused["reason"], &refused["error"]),
        (
            &serde_json::json!("BadManifest"),
            &serde_json::json!("devices.nodes[0].type: \"x\" is not c, b, u or p")
        )
    );
    assert!(!w.state.read(|v| v.pods.contains_key("h5")), "nothing held");
    w.check();
}

/// The OCI hook's face, device plugins: an owned admission carrying the
/// container's device-plugin variable (`PCIDEVICE_*`, as the hook reads it
/// from `process.env`) is aligned with the device a provider recognises in
/// it, as under NRI: the NIC on node 1 puts the container on node 1. A
/// value that is not a PCI address is a 400 naming the variable.
#[tokio::test]
async fn an_owned_admissions_device_plugin_variables_put_it_on_their_numa_node() {
    use topomgr_node::api::{AdmissionRequest, ContainerDevices, OwnerSpec};
    use topomgr_sdk::{AssignedDeviceHints, AssignedResource, HintSet};
    let nic = FakeProvider::new().with_assigned_device_hints(|request| {
        let found = request.devices.iter().any(|d| {
            d.source == "PCIDEVICE_EXAMPLE_COM_NIC"
                && d.ids.iter().any(|id| id.to_string() == "0000:af:00.0")
        });
        Ok(if found {
            AssignedDeviceHints::none().with(
                "example.com/nic",
                AssignedResource::new(
                    vec!["0000:af:00.0".into()],
                    vec!["0000:af:00.0".into()],
                    Some(HintSet::upward_closed(
                        vec![NumaMask::single(NumaNodeId::from(1u8))],
                        1,
                    )),
                ),
            )
        } else {
            AssignedDeviceHints::none()
        })
    });
    let w = world_with_providers(
        "env-http",
        two_node_nic_machine(),
        vec![LoadedProvider::in_process("nic", nic)],
        |f, _| f,
    );
    let admit = |id: &str, env: &str| {
        let pod =
            topomgr_sdk::PodView::new(id, id, "podman", QosClass::Guaranteed).with_containers(
                vec![topomgr_sdk::ContainerView::new(id)
                    .with_requests(topomgr_sdk::ResourceList::from([("cpu".to_owned(), 1000)]))
                    .with_limits(topomgr_sdk::ResourceList::from([("cpu".to_owned(), 1000)]))],
            );
        let body = AdmissionRequest {
            pod,
            owner: OwnerSpec::container(
                topomgr_node::state::pod_owner::ContainerRuntime::OciHook,
                id,
            ),
            attach: None,
            devices: Some(ContainerDevices {
                env: vec![env.to_owned()],
                ..Default::default()
            }),
        };
        axum::http::Request::post("/v1/pods")
            .header("content-type", topomgr_node::api::OWNED_ADMISSION)
            .body(axum::body::Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap()
    };
    let cdi = crate::cdi::Resolver::default();
    let (status, on_1) = over_http(
        &w,
        cdi.clone(),
        admit("e1", "PCIDEVICE_EXAMPLE_COM_NIC=0000:af:00.0"),
    )
    .await;
    assert_eq!(status, 200, "{on_1}");
    let c = &on_1["pods"][0]["containers"][0];
    assert_eq!(
        (&c["cpus"], &c["mems"]),
        (&serde_json::json!("2"), &serde_json::json!("1")),
        "{on_1}"
    );
    // Another NIC's variable: no provider knows it, the CPU provider's
    // first choice (node 0).
    let (status, plain) = over_http(
        &w,
        cdi.clone(),
        admit("e2", "PCIDEVICE_EXAMPLE_COM_NIC=0000:17:00.0"),
    )
    .await;
    assert_eq!(status, 200, "{plain}");
    assert_eq!(plain["pods"][0]["containers"][0]["cpus"], "1", "{plain}");
    let (status, refused) =
        over_http(&w, cdi, admit("e3", "PCIDEVICE_EXAMPLE_COM_NIC=af:00")).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["error"],
        "devices.env: environment variable PCIDEVICE_EXAMPLE_COM_NIC=\"af:00\": \"af:00\" is not a PCI address (domain:bus:device.function, e.g. 0000:3b:02.1)"
    );
    assert!(!w.state.read(|v| v.pods.contains_key("e3")), "nothing held");
    w.check();
}

/// A fake kubelet's PodResources: pod `pod-1` of `team-a`, its container
/// `ctr-k1` holding a DRA claim whose device is CDI device `device`.
struct FakeKubelet {
    device: String,
}

impl topomgr_podresources::Lister for FakeKubelet {
    fn list(&self) -> topomgr_podresources::v1::ListPodResourcesResponse {
        Default::default()
    }
    fn allocatable(&self) -> topomgr_podresources::v1::AllocatableResourcesResponse {
        Default::default()
    }
    fn get(&self, namespace: &str, name: &str) -> Option<topomgr_podresources::v1::PodResources> {
        use topomgr_podresources::v1;
        (namespace == "team-a" && name == "pod-1").then(|| v1::PodResources {
            name: name.into(),
            namespace: namespace.into(),
            containers: vec![v1::ContainerResources {
                name: "ctr-k1".into(),
                dynamic_resources: vec![v1::DynamicResource {
                    claim_name: "nic".into(),
                    claim_namespace: namespace.into(),
                    claim_resources: vec![v1::ClaimResource {
                        cdi_devices: vec![
                            v1::CdiDevice {
                                name: self.device.clone(),
                            },
                            v1::CdiDevice {
                                name: self.device.clone(),
                            },
                        ],
                        driver_name: "nic.example.org".into(),
                        pool_name: "node-a".into(),
                        device_name: "nic-1".into(),
                        share_id: None,
                    }],
                }],
                ..Default::default()
            }],
            ..Default::default()
        })
    }
}

/// Issue 35 item 2: with `[cdi] kubelet_pod_resources_socket`, the CDI
/// devices of the container's DRA claims (the kubelet's PodResources
/// `Get`) count like those its annotations name: a container without
/// device nodes or annotations whose claim holds NIC a (node 1) gets CPUs
/// of node 1. A kubelet socket that is absent or does not answer in time
/// is an error (logged) and the container is placed as without devices,
/// its creation held up no longer than the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelets_dra_claims_put_a_container_on_their_numa_node() {
    use std::time::{Duration, Instant};
    use topomgr_sdk::PciDevice;
    let machine = || {
        let base = topomgr_sdk::testkit::machine(2, 2);
        topomgr_sdk::Machine::new(
            base.numa_nodes.clone(),
            base.cpus.clone(),
            vec![PciDevice::new(
                "0000:af:00.0",
                "0x15b3",
                "0x101d",
                "0x020000",
                Some(1.into()),
            )],
        )
    };
    let specs_and_sysfs = |dir: &std::path::Path| {
        let (cdi, sys) = (dir.join("cdi"), dir.join("sys"));
        std::fs::create_dir_all(&cdi).unwrap();
        std::fs::write(
            cdi.join("nic.yaml"),
            "cdiVersion: 0.6.0\nkind: example.org/nic\ndevices:\n\
             - name: a\n  containerEdits:\n    deviceNodes:\n    - {path: /dev/infiniband/uverbs0, major: 231, minor: 192}\n",
        )
        .unwrap();
        std::fs::create_dir_all(sys.join("dev/char")).unwrap();
        let class = sys.join("devices/pci0000:00/0000:af:00.0/infiniband_verbs/uverbs0");
        std::fs::create_dir_all(&class).unwrap();
        std::os::unix::fs::symlink(&class, sys.join("dev/char/231:192")).unwrap();
        (cdi, sys)
    };
    let claims = |socket: PathBuf| convert::KubeletClaims {
        socket,
        timeout: Duration::from_millis(200),
        slices: None,
    };

    // The kubelet answers: NIC a, on node 1.
    let w = world_with("kubelet-dra", machine(), |f, dir| {
        let (cdi, sys) = specs_and_sysfs(dir);
        let socket = dir.join("kubelet.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        tokio::spawn(topomgr_podresources::serve(
            listener,
            Arc::new(FakeKubelet {
                device: "example.org/nic=a".into(),
            }),
            std::future::pending(),
            Duration::from_millis(10),
        ));
        f.with_cdi(
            crate::cdi::Resolver::new(vec![cdi], sys),
            Some(claims(socket)),
        )
    });
    let g = pod("1", "g");
    let created = w
        .face
        .create(g.clone(), container("k1", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&created), ("2", "1"));
    w.check();
    // Another container of the pod holds no claim: node 0 (CPU 1).
    let plain = w
        .face
        .create(g.clone(), container("k2", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&plain).0, "1");
    w.check();

    // A claim naming a device no spec defines: noted, placed as without.
    let dir = w.dir.clone();
    let unknown = FakeKubelet {
        device: "example.org/nic=zz".into(),
    };
    let socket = dir.join("kubelet-unknown.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(topomgr_podresources::serve(
        listener,
        Arc::new(unknown),
        std::future::pending(),
        Duration::from_millis(10),
    ));
    assert_eq!(
        claims(socket)
            .claims("team-a", "pod-1", "ctr-k1")
            .await
            .unwrap()
            .cdi,
        ["example.org/nic=zz"],
        "each name once"
    );

    // The kubelet's socket absent, or not answering: logged, placed as
    // without devices, creation held up at most about the timeout.
    let absent = dir.join("absent.sock");
    let err = claims(absent.clone())
        .claims("team-a", "pod-1", "ctr-k1")
        .await
        .unwrap_err();
    assert!(
        err.starts_with(&format!(
            "cannot connect to the PodResources socket {}",
            absent.display()
        )),
        "{err}"
    );
    let slow = dir.join("slow.sock");
    // Bound, never accepted: the connection waits in the backlog.
    let _never = std::os::unix::net::UnixListener::bind(&slow).unwrap();
    let err = claims(slow.clone())
        .claims("team-a", "pod-1", "ctr-k1")
        .await
        .unwrap_err();
    assert!(err.contains("within 200 ms"), "{err}");
    for (tag, socket) in [("absent", absent), ("slow", slow)] {
        let w = world_with(&format!("kubelet-dra-{tag}"), machine(), |f, dir| {
            let (cdi, sys) = specs_and_sysfs(dir);
            f.with_cdi(
                crate::cdi::Resolver::new(vec![cdi], sys),
                Some(claims(socket.clone())),
            )
        });
        let g = pod("1", "g");
        let started = Instant::now();
        let created = w
            .face
            .create(g.clone(), container("k1", &g, 1000, 1000))
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{tag}: held up {:?}",
            started.elapsed()
        );
        assert_eq!(cpuset_of(&created).0, "1", "{tag}: as without devices");
        w.check();
    }
}

/// A fake kubelet whose pod `pod-1` of `team-a` has container `ctr-k1`
/// holding a DRA claim on device `nic-1` of pool `node-a` of driver
/// `nic.example.org`, with no CDI device (the driver answered none).
struct NoCdiKubelet;

impl topomgr_podresources::Lister for NoCdiKubelet {
    fn list(&self) -> topomgr_podresources::v1::ListPodResourcesResponse {
        Default::default()
    }
    fn allocatable(&self) -> topomgr_podresources::v1::AllocatableResourcesResponse {
        Default::default()
    }
    fn get(&self, namespace: &str, name: &str) -> Option<topomgr_podresources::v1::PodResources> {
        use topomgr_podresources::v1;
        (namespace == "team-a" && name == "pod-1").then(|| v1::PodResources {
            name: name.into(),
            namespace: namespace.into(),
            containers: vec![v1::ContainerResources {
                name: "ctr-k1".into(),
                dynamic_resources: vec![v1::DynamicResource {
                    claim_name: "nic".into(),
                    claim_namespace: namespace.into(),
                    claim_resources: vec![v1::ClaimResource {
                        cdi_devices: vec![],
                        driver_name: "nic.example.org".into(),
                        pool_name: "node-a".into(),
                        device_name: "nic-1".into(),
                        share_id: None,
                    }],
                }],
                ..Default::default()
            }],
            ..Default::default()
        })
    }
}

/// Issue 35 item 2: a claim's device the kubelet gives by driver, pool and
/// device name only (no CDI device) is matched, with `[kubernetes]` API
/// access, through its pool's ResourceSlice and the standard
/// `resource.kubernetes.io/pciBusID` attribute to PCI device 0000:af:00.0
/// (node 1): the container gets CPUs of node 1. Without API access, or
/// when the slice does not name the device, it is placed as without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dra_device_without_a_cdi_name_is_matched_by_its_resource_slice() {
    use topomgr_sdk::PciDevice;
    let machine = || {
        let base = topomgr_sdk::testkit::machine(2, 2);
        topomgr_sdk::Machine::new(
            base.numa_nodes.clone(),
            base.cpus.clone(),
            vec![PciDevice::new(
                "0000:af:00.0",
                "0x15b3",
                "0x101d",
                "0x020000",
                Some(1.into()),
            )],
        )
    };
    // The API server: the driver's ResourceSlices, and who asked what.
    let asked: Seen = Seen::default();
    let record = Arc::clone(&asked);
    let slices = |device: &'static str| {
        format!(
            r#"{{"items":[{{"spec":{{"driver":"nic.example.org","nodeName":"n","pool":{{"name":"node-a","generation":1,"resourceSliceCount":1}},"devices":[{{"name":"{device}","attributes":{{"resource.kubernetes.io/pciBusID":{{"string":"0000:AF:00.0"}}}}}}]}}}}]}}"#
        )
    };
    let body = Arc::new(std::sync::Mutex::new(slices("nic-1")));
    let answer = Arc::clone(&body);
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let (record, answer) = (Arc::clone(&record), Arc::clone(&answer));
        async move {
            record
                .lock()
                .unwrap()
                .push(("GET".into(), uri.to_string(), serde_json::Value::Null));
            let body = answer.lock().unwrap().clone();
            (axum::http::StatusCode::OK, body)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = |dir: &std::path::Path| {
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "current-context: t\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    token: x\ncontexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n"
            ),
        )
        .unwrap();
        let access =
            topomgr_kube::Access::load(&topomgr_kube::Source::Kubeconfig(kubeconfig)).unwrap();
        topomgr_kube::ApiClient::new(access).unwrap()
    };
    let world = |tag: &str, api: bool| {
        world_with(tag, machine(), |f, dir| {
            let cdi = dir.join("cdi");
            std::fs::create_dir_all(&cdi).unwrap();
            let socket = dir.join("kubelet.sock");
            let listener = tokio::net::UnixListener::bind(&socket).unwrap();
            tokio::spawn(topomgr_podresources::serve(
                listener,
                Arc::new(NoCdiKubelet),
                std::future::pending(),
                Duration::from_millis(10),
            ));
            f.with_cdi(
                crate::cdi::Resolver::new(vec![cdi], dir.join("sys")),
                Some(convert::KubeletClaims {
                    socket,
                    timeout: Duration::from_millis(200),
                    slices: api
                        .then(|| convert::SliceReader::new(client(dir), Duration::from_secs(1))),
                }),
            )
        })
    };

    let w = world("dra-by-name", true);
    let g = pod("1", "g");
    let created = w
        .face
        .create(g.clone(), container("k1", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&created), ("2", "1"), "on the NIC's node 1");
    w.check();
    assert_eq!(
        asked
            .lock()
            .unwrap()
            .iter()
            .map(|(_, u, _)| u.as_str())
            .collect::<Vec<_>>(),
        ["/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dnic.example.org"]
    );
    // The slice does not name the device: placed as without (CPU 1).
    *body.lock().unwrap() = slices("nic-0");
    let w = world("dra-by-name-unlisted", true);
    let other = w
        .face
        .create(g.clone(), container("k1", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&other).0, "1", "as without devices");
    w.check();

    // Without API access: placed as without devices.
    let w = world("dra-by-name-no-api", false);
    let created = w
        .face
        .create(g.clone(), container("k1", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&created).0, "1", "as without devices");
    w.check();
}

#[tokio::test]
async fn sandboxes_pinned_and_opted_out_containers_are_left_alone() {
    let w = world("alone");
    let g = pod("1", "g");
    let mut pinned = container("p1", &g, 1000, 1000);
    pinned
        .linux
        .as_mut()
        .unwrap()
        .resources
        .as_mut()
        .unwrap()
        .cpu
        .as_mut()
        .unwrap()
        .cpus = "3".into();
    let mut sandbox = container("s1", &g, 0, 0);
    sandbox
        .annotations
        .insert("io.kubernetes.cri.container-type".into(), "sandbox".into());
    let mut opted = g.clone();
    opted
        .annotations
        .insert("topomgr.io/opt-out".into(), "true".into());
    for (p, c) in [
        (&g, pinned),
        (&g, sandbox),
        (&opted, container("o1", &opted, 1000, 1000)),
    ] {
        let r = w.face.create(p.clone(), c).await.unwrap();
        assert_eq!(r, Default::default());
    }
    assert!(w.state.read(|v| v.pods.is_empty()));
    // A bad annotation fails the creation, naming it.
    let mut bad = g.clone();
    bad.annotations
        .insert("topomgr.io/opt-out".into(), "maybe".into());
    let err = w
        .face
        .create(bad.clone(), container("x1", &bad, 1000, 1000))
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "topomgr cannot read container team-a/pod-1/ctr-x1: annotation topomgr.io/opt-out=\"maybe\" is not a boolean (write \"true\" or \"false\")"
    );
}

/// The notes about containers created while topomgr was away that it
/// could not admit (they run in the shared pool): each goes when its
/// container stops or is removed, or its sandbox is, not at the next
/// Synchronize (issue 37, item 9).
#[tokio::test]
async fn notes_about_containers_created_while_away_go_with_the_containers() {
    let w = world("away-notes");
    let f = &w.face;
    let g = pod("1", "g");
    let h = pod("2", "g");
    // Four CPUs each, three to give: none can be admitted.
    let listed = vec![
        container("huge-a", &g, 4000, 4000),
        container("huge-b", &g, 4000, 4000),
        container("huge-c", &g, 4000, 4000),
        container("huge-d", &h, 4000, 4000),
    ];
    f.synchronize(vec![g.clone(), h.clone()], listed.clone())
        .await
        .unwrap();
    let away = |f: &Face| -> Vec<String> {
        f.status()
            .notes()
            .into_iter()
            .filter(|n| n.contains("was created while topomgr was not connected"))
            .map(|n| n.split_whitespace().nth(2).unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(
        away(f),
        [
            "team-a/pod-1/ctr-huge-a",
            "team-a/pod-1/ctr-huge-b",
            "team-a/pod-1/ctr-huge-c",
            "team-a/pod-2/ctr-huge-d"
        ]
    );
    f.remove(listed[0].clone()).await;
    assert_eq!(
        away(f),
        [
            "team-a/pod-1/ctr-huge-b",
            "team-a/pod-1/ctr-huge-c",
            "team-a/pod-2/ctr-huge-d"
        ]
    );
    f.stop(g.clone(), listed[1].clone()).await.unwrap();
    assert_eq!(
        away(f),
        ["team-a/pod-1/ctr-huge-c", "team-a/pod-2/ctr-huge-d"]
    );
    f.remove_pod(h.clone()).await;
    assert_eq!(away(f), ["team-a/pod-1/ctr-huge-c"]);
    f.remove_pod(g.clone()).await;
    assert!(away(f).is_empty(), "{:?}", f.status().notes());
    w.check();
}

/// What the runtime lists at a (re)connection is the truth: pods of
/// containers it no longer has are released, containers topomgr never saw
/// are admitted (or followed in the shared pool when they cannot be),
/// every container is told its cpuset, and nothing is admitted twice.
#[tokio::test]
async fn synchronize_reconciles_with_what_the_runtime_has() {
    let w = world("sync");
    let f = &w.face;
    let g = pod("1", "g");
    let b = pod("2", "b");
    f.create(g.clone(), container("gone", &g, 1000, 1000))
        .await
        .unwrap();
    f.create(g.clone(), container("kept", &g, 2000, 2000))
        .await
        .unwrap();
    assert_eq!(w.held.lock().unwrap().len(), 2);

    // The runtime restarted: "gone" stopped meanwhile, "late" (Guaranteed,
    // 1 CPU) and "shared" were created without topomgr, "huge" cannot fit.
    let mut gone = container("gone", &g, 1000, 1000);
    gone.state = ContainerState::ContainerStopped as i32;
    let listed = vec![
        gone,
        container("kept", &g, 2000, 2000),
        container("late", &g, 1000, 1000),
        container("shared", &b, 100, 0),
        container("huge", &g, 4000, 4000),
    ];
    let ups = f
        .synchronize(vec![g.clone(), b.clone()], listed.clone())
        .await
        .unwrap();
    let mut got = updates(&ups);
    got.sort();
    assert_eq!(
        got,
        [
            ("huge".to_owned(), "0".to_owned()),
            ("kept".to_owned(), "2-3".to_owned()),
            ("late".to_owned(), "1".to_owned()),
            ("shared".to_owned(), "0".to_owned()),
        ]
    );
    assert!(ups.iter().all(|u| u.ignore_failure));
    let pods: Vec<String> = w.state.read(|v| v.pods.keys().cloned().collect());
    assert_eq!(pods, ["kept", "late", "shared"]);
    w.check();
    let notes = f.status().notes();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[1].starts_with("nri: container team-a/pod-1/ctr-huge (huge) was created while topomgr was not connected and cannot be admitted (topomgr: TopologyAffinityError"), "{notes:?}");

    // The same list again (another reconnection): nothing changes, nothing
    // is admitted twice, everything is told again.
    let again = f
        .synchronize(vec![g.clone(), b.clone()], listed)
        .await
        .unwrap();
    assert_eq!(again.len(), 4);
    assert_eq!(w.held.lock().unwrap().len(), 2);
    w.check();

    // A release through the HTTP API while "late" runs: it follows the
    // shared pool from then on (the follower's round, without a runtime).
    w.state
        .submit(Command::Release("late".into()))
        .await
        .unwrap();
    let book = w.book();
    let late = book.iter().find(|(id, ..)| id == "late").unwrap();
    assert!(!late.2, "late is followed in the shared pool");
    assert_eq!(book.len(), 4, "{book:?}");
}

#[tokio::test]
async fn the_health_of_a_face_follows_its_connection() {
    let w = world("health");
    let s = w.face.status();
    assert!(!s.health().connected);
    w.face.disconnected("cannot connect".into());
    assert_eq!(s.health().error.as_deref(), Some("cannot connect"));
    assert!(w.face.runtime_client().is_none());
    assert_eq!(check_scope(Scope::Container, false), Ok(()));
    assert_eq!(check_scope(Scope::Pod, true), Ok(()));
    assert_eq!(
        check_scope(Scope::Pod, false).unwrap_err().to_string(),
        "[nri] enabled with scope = \"pod\" needs [kubernetes] enabled: the runtime tells topomgr one container at a time through NRI, so pod scope reads the whole pod from the API server; set enabled = true in [kubernetes] (with its kubeconfig, or in-cluster), or set scope = \"container\""
    );
}

/// A reload onto a machine with a third NUMA node (CPUs 4-5): the face
/// gives shared containers the new pool and every memory node of the
/// machine as it is now, and tells those placed before.
#[tokio::test]
async fn the_face_follows_a_reload_onto_a_changed_machine() {
    use crate::state_thread::Prepared;
    let w = world("reload");
    let f = &w.face;
    let b = pod("2", "b");
    let first = f
        .create(b.clone(), container("b1", &b, 100, 500))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&first), ("0-3", "0-1"));
    assert_eq!(f.nodes(), NumaMask::from_nodes([0, 1]).unwrap());

    let machine = topomgr_sdk::testkit::machine(3, 2);
    let numa = NumaInfo::new(vec![0, 1, 2], None).unwrap();
    let prepared = Prepared {
        trigger: "machine check",
        machine,
        policy: Policy::new("single-numa-node", &BTreeMap::new(), numa).unwrap(),
        scope: Scope::Container,
        limits: Default::default(),
        align_unknown_devices: true,
        providers: vec![(
            "cpu".to_owned(),
            Ok(LoadedProvider::in_process("cpu", cpu_provider(&w.held))),
        )],
    };
    w.state
        .submit(Command::Reload(Arc::new(Mutex::new(Some(prepared)))))
        .await
        .unwrap();
    assert_eq!(f.nodes(), NumaMask::from_nodes([0, 1, 2]).unwrap());

    let second = f
        .create(b.clone(), container("b2", &b, 100, 500))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&second), ("0-5", "0-2"));
    // b1 is told the new pool and memory nodes in the same answer.
    assert_eq!(
        updates(&second.update),
        [("b1".to_owned(), "0-5".to_owned())]
    );
    let mems = second.update[0]
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref())
        .map(|c| c.mems.clone());
    assert_eq!(mems.as_deref(), Some("0-2"));
    w.check();
}

/// The CFS quota a create answer sets for the container.
fn quota_of(answer: &CreateContainerResponse) -> Option<i64> {
    answer
        .adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref())
        .and_then(|c| c.quota.as_ref())
        .map(|q| q.value)
}

/// As the kubelet with `DisableCPUQuotaWithExclusiveCPUs` (the default
/// since 1.33): a container given exclusive CPUs is answered an unlimited
/// quota (-1), a shared one keeps the kubelet's; with the setting off
/// (`disable_cpu_quota_with_exclusive_cpus = false`) nobody's is changed.
#[tokio::test]
async fn exclusive_containers_are_answered_an_unlimited_cfs_quota() {
    let w = world("quota");
    let g = pod("1", "g");
    let b = pod("2", "b");
    let shared = w
        .face
        .create(b.clone(), container("b1", &b, 100, 500))
        .await
        .unwrap();
    assert_eq!(quota_of(&shared), None);
    let exclusive = w
        .face
        .create(g.clone(), container("g1", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&exclusive).0, "1");
    assert_eq!(quota_of(&exclusive), Some(-1));

    let gate_off = Face::new(
        w.state.clone(),
        NriStatus::enabled("/run/nri.sock".as_ref(), None),
    )
    .with_cpu_quota_lift(false);
    let kept = gate_off
        .create(g.clone(), container("g2", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&kept).0, "2");
    assert_eq!(quota_of(&kept), None);
}

/// The follower's next round: (container, cpus) it would send.
async fn follower_round(f: &Face) -> Vec<(String, String)> {
    let a = f.ask(ContainerCommand::FollowerRound).await.unwrap();
    f.ask(ContainerCommand::FollowerSent { failed: Vec::new() })
        .await
        .unwrap();
    a.updates
        .iter()
        .map(|(id, s)| (id.clone(), s.cpus.to_string()))
        .collect()
}

/// A container as created: its cpuset as the runtime lists it after.
fn with_cpuset(mut c: Container, cpus: &str, mems: &str) -> Container {
    let cpu = c
        .linux
        .as_mut()
        .and_then(|l| l.resources.as_mut())
        .and_then(|r| r.cpu.as_mut())
        .unwrap();
    cpu.cpus = cpus.into();
    cpu.mems = mems.into();
    c
}

/// A Burstable and a Guaranteed container created together: the shrink of
/// the Burstable one, sent in the Guaranteed one's answer while the
/// runtime was still creating it, is lost (containerd drops it). At its
/// PostCreate (or PostStart) the runtime lists the cpuset it was created
/// with, and the follower sends the right one at once.
#[tokio::test]
async fn a_shrink_lost_while_the_container_was_created_is_sent_again() {
    let w = world("lost-shrink");
    let f = &w.face;
    let b = pod("2", "b");
    let g = pod("1", "g");
    f.create(b.clone(), container("b1", &b, 100, 500))
        .await
        .unwrap();
    let gr = f
        .create(g.clone(), container("g1", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(updates(&gr.update), [("b1".to_owned(), "0,2-3".to_owned())]);
    // Nothing is due: the book says b1 was told.
    assert!(follower_round(f).await.is_empty());
    // The runtime created b1 with the cpuset of its own answer.
    f.created(
        b.clone(),
        with_cpuset(container("b1", &b, 100, 500), "0-3", "0-1"),
        false,
    )
    .await;
    assert_eq!(
        follower_round(f).await,
        [("b1".to_owned(), "0,2-3".to_owned())]
    );
    // PostStart with the right cpuset: nothing more to send.
    f.created(
        b.clone(),
        with_cpuset(container("b1", &b, 100, 500), "0,2-3", "0-1"),
        true,
    )
    .await;
    assert!(follower_round(f).await.is_empty());
    w.check();
}

/// A followed container's cgroup changed behind topomgr's back (or an
/// update lost without a PostCreate to show it) is found by reading the
/// cgroups back, sent its cpuset again, reported in health and counted.
#[tokio::test]
async fn a_cpuset_changed_behind_topomgrs_back_is_repaired() {
    let w = world("drift");
    let f = &w.face;
    let b = pod("2", "b");
    let g = pod("1", "g");
    let cgroup = format!("/kubepods/burstable/pod{}/b1", b.uid);
    let mut b1 = container("b1", &b, 100, 500);
    b1.linux.as_mut().unwrap().cgroups_path = cgroup.clone();
    f.create(b.clone(), b1).await.unwrap();
    f.create(g.clone(), container("g1", &g, 1000, 1000))
        .await
        .unwrap();
    // v1 layout under the cgroup root: the runtime applied 0,2-3.
    let dir = w
        .dir
        .join("cgroup/cpuset")
        .join(cgroup.trim_start_matches('/'));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cpuset.cpus"), "0,2-3\n").unwrap();
    std::fs::write(dir.join("cpuset.mems"), "0-1\n").unwrap();
    f.check_cpusets().await;
    assert!(follower_round(f).await.is_empty(), "nothing drifted");
    assert!(w
        .metrics
        .render()
        .contains("topomgr_nri_cpuset_repairs_total 0"));
    // Someone writes every CPU back, CPU 1 (g1's) included.
    std::fs::write(dir.join("cpuset.cpus"), "0-3\n").unwrap();
    f.check_cpusets().await;
    assert_eq!(
        follower_round(f).await,
        [("b1".to_owned(), "0,2-3".to_owned())]
    );
    assert!(w
        .metrics
        .render()
        .contains("topomgr_nri_cpuset_repairs_total 1"));
    let notes = f.status().notes();
    assert!(
        notes.iter().any(|n| n.starts_with("nri: container team-a/pod-2/ctr-b1 (b1) ran on CPUs 0-3 (memory nodes 0-1) where it must have 0,2-3 (0-1); topomgr sent its cpuset again")),
        "{notes:?}"
    );
}

/// topomgr placed a container on CPU 1, its pod was released through the
/// API while it runs, and the runtime reconnected: it lists the container
/// with `cpus = "1"` (topomgr's, kept in the spec) and topomgr's
/// annotation. It is topomgr's placement, not its user's pinning: the
/// container is admitted again and the next Guaranteed container does not
/// get CPU 1.
#[tokio::test]
async fn own_placements_are_recognised_after_a_reconnect() {
    let w = world("own");
    let f = &w.face;
    let g = pod("1", "g");
    let first = f
        .create(g.clone(), container("g1", &g, 1000, 1000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&first), ("1", "0"));
    let marks = &first.adjust.as_ref().unwrap().annotations;
    assert_eq!(
        marks.get("topomgr.io/placed-cpus").map(String::as_str),
        Some("1")
    );
    w.state.submit(Command::Release("g1".into())).await.unwrap();
    let mut listed = with_cpuset(container("g1", &g, 1000, 1000), "1", "0");
    listed.annotations = marks.clone();
    f.synchronize(vec![g.clone()], vec![listed]).await.unwrap();
    assert!(
        w.state.read(|v| v.pods.contains_key("g1")),
        "admitted again"
    );
    let book = w.book();
    assert_eq!(book.len(), 1, "{book:?}");
    let next = f
        .create(g.clone(), container("g2", &g, 1000, 1000))
        .await
        .unwrap();
    assert_ne!(cpuset_of(&next).0, "1", "CPU 1 is g1's");
    w.check();
    // Without the annotation the same cpuset is its user's: left alone.
    let w = world("own-user");
    let user = with_cpuset(container("u1", &g, 1000, 1000), "1", "0");
    w.face
        .synchronize(vec![g.clone()], vec![user])
        .await
        .unwrap();
    assert!(w.state.read(|v| v.pods.is_empty()));
}

/// containerd reported the exit of a container's older instance late: the
/// CreateContainer of the new instance (same sandbox, same name) arrives
/// while topomgr still holds the old one, which is released at create
/// (as nri-plugins does), so its CPUs are free for the new instance.
#[tokio::test]
async fn a_stale_instance_is_released_at_create() {
    let w = world("stale");
    let f = &w.face;
    let g = pod("1", "g");
    let old = container("old", &g, 2000, 2000);
    assert_eq!(
        cpuset_of(&f.create(g.clone(), old.clone()).await.unwrap()).0,
        "2-3"
    );
    let mut new = container("new", &g, 2000, 2000);
    new.name = old.name.clone();
    let answer = f.create(g.clone(), new).await.unwrap();
    assert_eq!(cpuset_of(&answer).0, "2-3", "the old instance's CPUs");
    let pods: Vec<String> = w.state.read(|v| v.pods.keys().cloned().collect());
    assert_eq!(pods, ["new"]);
    let book = w.book();
    assert_eq!(
        book.iter().map(|(id, ..)| id.as_str()).collect::<Vec<_>>(),
        ["new"]
    );
    w.check();
    // Another container of the same pod is no stale instance.
    f.create(g.clone(), container("other", &g, 100, 0))
        .await
        .unwrap();
    assert_eq!(w.book().len(), 2);
}

/// Configure: a provider deadline beyond the runtime's request budget is a
/// warning and a health note; one within it is none.
#[tokio::test]
async fn a_provider_deadline_beyond_the_request_budget_is_a_health_note() {
    let w = world("budget-note");
    let status = NriStatus::enabled("/run/nri.sock".as_ref(), None);
    let face = Face::new(w.state.clone(), Arc::clone(&status))
        .with_provider_timeout(std::time::Duration::from_secs(10));
    status.connected();
    let configure = |ms| topomgr_nri::api::ConfigureRequest {
        runtime_name: "containerd".into(),
        runtime_version: "2.1.4".into(),
        request_timeout: ms,
        ..Default::default()
    };
    face.configured(&configure(2000));
    let notes = status.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("nri: [daemon] provider_timeout_ms = 10000 exceeds the runtime's request budget of 1800 ms"),
        "{notes:?}"
    );
    // The runtime gives more time at the next registration: the note goes.
    face.configured(&configure(20_000));
    assert!(status.notes().is_empty(), "{:?}", status.notes());
}

/// A CreateContainer already past its answer deadline (queued behind other
/// work) is not admitted: the runtime got an error answer.
#[tokio::test]
async fn a_create_past_its_deadline_admits_nothing() {
    let w = world("budget-late");
    let g = pod("1", "g");
    let late = tokio::time::Instant::now();
    let err = topomgr_nri::with_answer_deadline(
        late,
        w.face.create(g.clone(), container("g1", &g, 1000, 1000)),
    )
    .await
    .unwrap_err();
    assert!(
        err.message().starts_with(
            "topomgr: container team-a/pod-1/ctr-g1 is past the runtime's request deadline before its admission"
        ),
        "{}",
        err.message()
    );
    assert!(w.state.read(|v| v.pods.is_empty()), "nothing admitted");
    assert!(w.held.lock().unwrap().is_empty());
    assert!(w.book().is_empty());
}

/// A Create that reaches the state thread past its deadline (queued
/// behind other work after the face looked) admits nothing either: the
/// state thread checks the deadline the request carries.
#[tokio::test]
async fn a_create_queued_past_its_deadline_admits_nothing() {
    let w = world("budget-queued");
    let g = pod("1", "g");
    let c = container("q1", &g, 1000, 1000);
    let request = match convert::map(&g, &c).unwrap() {
        topomgr_runtime::Mapping::Admit(r) => r,
        m => panic!("{m:?}"),
    };
    let answer = w
        .face
        .ask(ContainerCommand::Create(Box::new(NewContainer {
            id: "q1".into(),
            pod: request.pod.view,
            owner: topomgr_node::api::OwnerSpec::container(
                topomgr_node::state::pod_owner::ContainerRuntime::Nri,
                "q1",
            ),
            assigned: Default::default(),
            follow: FollowedContainer {
                sandbox: g.id.clone(),
                name: c.name.clone(),
                who: "team-a/pod-1/ctr-q1".into(),
                cgroup: None,
                told: None,
                pod_uid: String::new(),
                started: false,
                held_by: None,
            },
            deadline: Some(std::time::Instant::now()),
        })))
        .await
        .unwrap();
    assert_eq!(answer.late, Some(Late::BeforeAdmission));
    assert!(answer.admission.is_none());
    assert!(w.state.read(|v| v.pods.is_empty()), "nothing admitted");
    assert!(w.held.lock().unwrap().is_empty());
    assert!(w.book().is_empty());
}

/// An admission that completes after the answer deadline is released
/// again: the runtime already has an error answer and will not create the
/// container as placed, so nothing may stay held for it.
#[tokio::test]
async fn an_admission_completed_past_the_deadline_is_released() {
    let w = world("budget-release");
    let g = pod("1", "g");
    let mut slow = container("s1", &g, 1000, 1000);
    slow.name = "ctr-slow".into();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(100);
    let err = topomgr_nri::with_answer_deadline(deadline, w.face.create(g.clone(), slow))
        .await
        .unwrap_err();
    assert!(
        err.message()
            .contains("past the runtime's request deadline after its admission"),
        "{}",
        err.message()
    );
    assert!(w.state.read(|v| v.pods.is_empty()), "released again");
    assert!(
        w.held.lock().unwrap().is_empty(),
        "the provider holds nothing"
    );
    assert!(w.book().is_empty());
    // Within its deadline the same container is placed.
    let mut slow = container("s2", &g, 1000, 1000);
    slow.name = "ctr-slow".into();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    let ok = topomgr_nri::with_answer_deadline(deadline, w.face.create(g.clone(), slow))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&ok).0, "1");
    w.check();
}

/// The state thread releases an admission completed past its deadline
/// within the same request: its one answer says so, and nothing is held
/// when it comes back.
#[tokio::test]
async fn an_admission_past_its_deadline_is_released_in_the_same_request() {
    let w = world("budget-same");
    let g = pod("1", "g");
    let mut c = container("s1", &g, 1000, 1000);
    c.name = "ctr-slow".into();
    let request = match convert::map(&g, &c).unwrap() {
        topomgr_runtime::Mapping::Admit(r) => r,
        m => panic!("{m:?}"),
    };
    let answer = w
        .face
        .ask(ContainerCommand::Create(Box::new(NewContainer {
            id: "s1".into(),
            pod: request.pod.view,
            owner: topomgr_node::api::OwnerSpec::container(
                topomgr_node::state::pod_owner::ContainerRuntime::Nri,
                "s1",
            ),
            assigned: Default::default(),
            follow: FollowedContainer {
                sandbox: g.id.clone(),
                name: c.name.clone(),
                who: "team-a/pod-1/ctr-slow".into(),
                cgroup: None,
                told: None,
                pod_uid: String::new(),
                started: false,
                held_by: None,
            },
            deadline: Some(std::time::Instant::now() + std::time::Duration::from_millis(100)),
        })))
        .await
        .unwrap();
    assert_eq!(answer.late, Some(Late::AfterAdmission));
    assert!(answer.admission.as_ref().is_some_and(|r| r.admitted));
    assert!(answer.cpuset.is_none() && answer.updates.is_empty());
    assert!(w.state.read(|v| v.pods.is_empty()), "released already");
    assert!(w.held.lock().unwrap().is_empty());
    assert!(w.book().is_empty());
}

/// An admission in time in the state thread whose answer comes back past
/// the deadline (the batch it was in took long) is released by a second
/// request: B is admitted in time, but answered only after C, batched
/// with it, took its allocation's time.
#[tokio::test]
async fn an_admission_answered_past_the_deadline_is_released_after() {
    let w = world("budget-after");
    let g = pod("1", "g");
    let slow = |id: &str| {
        let mut c = container(id, &g, 1000, 1000);
        c.name = format!("ctr-slower-{id}");
        c
    };
    // A keeps the state thread busy while B and C queue behind it.
    let a = tokio::spawn({
        let (f, g, c) = (Arc::clone(&w.face), g.clone(), slow("a"));
        async move { f.create(g, c).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    // B is admitted at about 1 s (after A) and answered at about 2 s
    // (after C).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(1400);
    let b = tokio::spawn({
        let (f, g, c) = (
            Arc::clone(&w.face),
            g.clone(),
            container("b", &g, 1000, 1000),
        );
        topomgr_nri::with_answer_deadline(deadline, async move { f.create(g, c).await })
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let c = tokio::spawn({
        let (f, g, c) = (Arc::clone(&w.face), g.clone(), slow("c"));
        async move { f.create(g, c).await }
    });
    assert!(a.await.unwrap().is_ok());
    let err = b.await.unwrap().unwrap_err();
    assert!(c.await.unwrap().is_ok());
    assert!(
        err.message()
            .contains("past the runtime's request deadline after its admission"),
        "{}",
        err.message()
    );
    let pods: Vec<String> = w.state.read(|v| v.pods.keys().cloned().collect());
    assert_eq!(pods, ["a", "c"], "b released");
    let ids: Vec<String> = w.book().into_iter().map(|(id, ..)| id).collect();
    assert_eq!(ids, ["a", "c"]);
    assert!(!w.held.lock().unwrap().keys().any(|(uid, _)| uid == "b"));
}

/// `container` as it arrives with a cpuset already set.
fn pinned(id: &str, pod: &PodSandbox, cpu_m: u64, limit_m: i64, cpus: &str) -> Container {
    let mut c = container(id, pod, cpu_m, limit_m);
    if let Some(cpu) = c
        .linux
        .as_mut()
        .and_then(|l| l.resources.as_mut())
        .and_then(|r| r.cpu.as_mut())
    {
        cpu.cpus = cpus.into();
    }
    c
}

fn kubelet_notes(f: &Face) -> Vec<String> {
    f.status()
        .notes()
        .into_iter()
        .filter(|n| n.contains("kubelet"))
        .collect()
}

/// A container of the kubelet arriving at CreateContainer with a cpuset
/// (its static CPU manager) makes health degraded with the remedy, until
/// it is removed; a container outside the kubelet's cgroups pinned by its
/// user does not.
#[tokio::test]
async fn a_kubelet_container_arriving_pinned_is_a_health_note() {
    let w = world("kubelet-create");
    let f = &w.face;
    let g = pod("1", "g");
    let answer = f
        .create(g.clone(), pinned("g1", &g, 1000, 1000, "2"))
        .await
        .unwrap();
    assert!(answer.adjust.is_none(), "left alone");
    let notes = kubelet_notes(f);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with(
            "nri: 1 container(s) of the kubelet arrived with a cpuset (team-a/pod-1/ctr-g1 (2))"
        ),
        "{notes:?}"
    );
    assert!(notes[0].contains("set cpuManagerPolicy: none in the KubeletConfiguration, remove the kubelet's cpu_manager_state and restart the kubelet"));
    f.remove(pinned("g1", &g, 1000, 1000, "2")).await;
    assert!(kubelet_notes(f).is_empty());
    // Not the kubelet's: a user's pinning, no note.
    let mut own = pod("2", "g");
    own.linux = Some(LinuxPodSandbox {
        cgroup_parent: "/machine.slice".into(),
        ..Default::default()
    });
    f.create(own.clone(), pinned("u1", &own, 1000, 1000, "3"))
        .await
        .unwrap();
    assert!(kubelet_notes(f).is_empty());
    // Gone with its pod sandbox as well.
    f.create(g.clone(), pinned("g2", &g, 1000, 1000, "2"))
        .await
        .unwrap();
    assert_eq!(kubelet_notes(f).len(), 1);
    f.remove_pod(g.clone()).await;
    assert!(kubelet_notes(f).is_empty());
}

/// At Synchronize, a kubelet container with a cpuset and without
/// topomgr's mark is noted. topomgr's own placements are not: those
/// marked `topomgr.io/placed-cpus` (released through the API, or placed
/// before a restart of topomgr, which follows none then), and those whose
/// pod topomgr holds (created while it was away, placed by an update, so
/// unmarked). The note goes when the container does.
#[tokio::test]
async fn synchronize_notes_kubelet_pinned_containers_not_its_own() {
    let w = world("kubelet-sync");
    let f = &w.face;
    let g = pod("1", "g");
    let b = pod("2", "b");
    let g1 = f
        .create(g.clone(), container("g1", &g, 1000, 1000))
        .await
        .unwrap();
    f.create(b.clone(), container("b1", &b, 100, 0))
        .await
        .unwrap();
    let marked = |mut c: Container, cpus: &str| {
        c.annotations
            .insert("topomgr.io/placed-cpus".into(), cpus.into());
        c
    };
    assert_eq!(cpuset_of(&g1).0, "1");
    // Released through the API: the runtime still lists it with its cpuset.
    w.state.submit(Command::Release("g1".into())).await.unwrap();
    let listed = vec![
        marked(pinned("g1", &g, 1000, 1000, "1"), "1"),
        pinned("b1", &b, 100, 0, "0,2-3"),
        // Placed by topomgr before it restarted: not followed, its mark
        // says whose it is.
        marked(pinned("earlier", &b, 100, 0, "0,3"), "0,3"),
        pinned("kubelet", &g, 1000, 1000, "2-3"),
        // The kubelet's shared pool, which may equal topomgr's: noted.
        pinned("kubelet-shared", &b, 100, 0, "0,2-3"),
    ];
    f.synchronize(vec![g.clone(), b.clone()], listed)
        .await
        .unwrap();
    let notes = kubelet_notes(f);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("nri: 2 container(s) of the kubelet arrived with a cpuset (team-a/pod-1/ctr-kubelet (2-3), team-a/pod-2/ctr-kubelet-shared (0,2-3))"),
        "{notes:?}"
    );
    // Remove one: the note names the other.
    f.remove(pinned("kubelet", &g, 1000, 1000, "2-3")).await;
    let notes = kubelet_notes(f);
    assert!(
        notes[0].starts_with("nri: 1 container(s) of the kubelet arrived with a cpuset (team-a/pod-2/ctr-kubelet-shared (0,2-3))"),
        "{notes:?}"
    );
    f.synchronize(
        vec![g.clone(), b.clone()],
        vec![container("b1", &b, 100, 0)],
    )
    .await
    .unwrap();
    assert!(kubelet_notes(f).is_empty(), "{:?}", kubelet_notes(f));
}

/// The kubelet's state files naming the static policies are noted at
/// Configure and on the periodic check, and the note goes once they no
/// longer do.
#[tokio::test]
async fn the_kubelets_static_managers_in_its_state_files_are_noted() {
    let w = world("kubelet-files");
    let root = w.dir.join("kubelet");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("cpu_manager_state"),
        r#"{"policyName":"static","defaultCpuSet":"0-3","checksum":1}"#,
    )
    .unwrap();
    let status = NriStatus::enabled("/run/nri.sock".as_ref(), None);
    status.connected();
    let face = Face::new(w.state.clone(), Arc::clone(&status)).with_kubelet_root(root.clone());
    face.configured(&topomgr_nri::api::ConfigureRequest::default());
    let notes = status.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("nri: the kubelet's CPU manager runs policy \"static\""),
        "{notes:?}"
    );
    std::fs::write(
        root.join("memory_manager_state"),
        r#"{"policyName":"Static","machineState":{},"checksum":1}"#,
    )
    .unwrap();
    std::fs::remove_file(root.join("cpu_manager_state")).unwrap();
    face.check_kubelet_files();
    let notes = status.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("memoryManagerPolicy: None"), "{notes:?}");
    std::fs::remove_file(root.join("memory_manager_state")).unwrap();
    face.check_kubelet_files();
    assert!(status.notes().is_empty());
}

/// A container of a pod Guaranteed through pod-level resources (KEP-2837:
/// its CPU limit, the pod's, above its own request) gets the shared pool
/// and no exclusive CPU, as the kubelet's static CPU manager skips it.
#[tokio::test]
async fn a_pod_level_resources_container_gets_the_shared_pool() {
    let w = world("pod-level");
    let g = pod("1", "g");
    let answer = w
        .face
        .create(g.clone(), container("p1", &g, 2000, 4000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&answer).0, "0-3");
    assert!(w.held.lock().unwrap().is_empty(), "no exclusive CPU");
    // The same container Guaranteed on its own gets its CPUs.
    let answer = w
        .face
        .create(g.clone(), container("g1", &g, 2000, 2000))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&answer).0, "2-3");
    w.check();
}

/// The runtime went down while it created a Guaranteed container: the
/// kubelet's retry (in a new sandbox of the same pod) runs while the first
/// instance, which never started, still holds the CPU. The running one
/// takes it over, at Synchronize when it is listed running, or at its
/// PostStart when it was listed before it started.
#[tokio::test]
async fn a_running_retry_takes_the_cpus_of_an_instance_that_never_started() {
    for at_start in [false, true] {
        let w = world(&format!("stale-{at_start}"));
        let f = &w.face;
        let other = pod("2", "g");
        f.create(other.clone(), container("big", &other, 2000, 2000))
            .await
            .unwrap();
        let old = pod("1", "g");
        let new = PodSandbox {
            id: "sandbox-1-retry".into(),
            ..pod("1", "g")
        };
        f.create(old.clone(), container("stale", &old, 1000, 1000))
            .await
            .unwrap();
        let mut stale = container("stale", &old, 1000, 1000);
        stale.state = ContainerState::ContainerCreated as i32;
        let mut fresh = Container {
            name: "ctr-stale".into(),
            ..container("fresh", &new, 1000, 1000)
        };
        if at_start {
            fresh.state = ContainerState::ContainerCreated as i32;
        }
        let listed = vec![container("big", &other, 2000, 2000), stale, fresh.clone()];
        let ups = f
            .synchronize(vec![other.clone(), old.clone(), new.clone()], listed)
            .await
            .unwrap();
        let mut got = updates(&ups);
        if at_start {
            // Listed before it started: it cannot be admitted yet.
            got.sort();
            assert_eq!(
                got,
                [
                    ("big".to_owned(), "2-3".to_owned()),
                    ("fresh".to_owned(), "0".to_owned()),
                    ("stale".to_owned(), "1".to_owned()),
                ]
            );
            fresh.state = ContainerState::ContainerRunning as i32;
            f.created(new.clone(), with_cpuset(fresh, "0", "0"), true)
                .await;
            got = follower_round(f).await;
        }
        got.sort();
        let want_fresh = ("fresh".to_owned(), "1".to_owned());
        let want_stale = ("stale".to_owned(), "0".to_owned());
        assert!(got.contains(&want_fresh), "at_start {at_start}: {got:?}");
        assert!(got.contains(&want_stale), "at_start {at_start}: {got:?}");
        let pods: Vec<String> = w.state.read(|v| v.pods.keys().cloned().collect());
        assert_eq!(pods, ["big", "fresh"], "at_start {at_start}");
        w.check();
    }
}

/// The runtime's resources as an update of `cpu_m` millicores requested
/// and `limit_m` as the limit (as the kubelet sends a resize).
fn resize_to(cpu_m: u64, limit_m: i64) -> LinuxResources {
    container("x", &pod("9", "g"), cpu_m, limit_m)
        .linux
        .unwrap()
        .resources
        .unwrap()
}

/// Issue 33: a container resized while topomgr was away (the runtime
/// applied it, the kubelet reported it done) is resized in the books at
/// Synchronize; one topomgr cannot resize keeps what it held and a health
/// note says so until the container is as the books hold it again. The
/// quota topomgr lifted (the listing shows no CPU limit) is no resize.
#[tokio::test]
async fn resizes_while_away_are_caught_up_at_synchronize() {
    let w = world("resize-away");
    let f = &w.face;
    let g = pod("1", "g");
    f.create(g.clone(), container("g2", &g, 2000, 2000))
        .await
        .unwrap();
    let held = |w: &World| {
        w.state
            .read(|v| v.pods["g2"].containers[0].allocation.cpus.to_string())
    };
    let notes = |w: &World| w.state.read(|v| v.restore_notes.clone());
    assert_eq!(held(&w), "2-3");
    // Listed as it is, its quota lifted: nothing changes.
    f.synchronize(vec![g.clone()], vec![container("g2", &g, 2000, 0)])
        .await
        .unwrap();
    assert_eq!(held(&w), "2-3");
    assert!(notes(&w).is_empty(), "{:?}", notes(&w));
    // Shrunk to 1 CPU while away: the books follow.
    f.synchronize(vec![g.clone()], vec![container("g2", &g, 1000, 0)])
        .await
        .unwrap();
    assert_eq!(held(&w), "2");
    w.check();
    // Grown to 3 while away: no room on its node; it keeps CPU 2.
    f.synchronize(vec![g.clone()], vec![container("g2", &g, 3000, 0)])
        .await
        .unwrap();
    assert_eq!(held(&w), "2");
    let n = notes(&w);
    assert_eq!(n.len(), 1, "{n:?}");
    assert!(
        n[0].starts_with("container g2 was resized while topomgr was away and topomgr cannot do it (ResizeInfeasible: ")
            && n[0].ends_with("resize its pod back (kubectl patch --subresource resize) or recreate it"),
        "{n:?}"
    );
    // Patched back: the note goes.
    f.synchronize(vec![g.clone()], vec![container("g2", &g, 1000, 0)])
        .await
        .unwrap();
    assert!(notes(&w).is_empty(), "{:?}", notes(&w));
    w.check();
}

/// An in-place resize through UpdateContainer: a grow that does not fit
/// on the container's node is refused with the provider's reason and
/// changes nothing; a shrink keeps the first CPUs and gives the others to
/// the shared containers in the same answer; exclusive CPUs no provider
/// resizes are refused; an update that only sets a cpuset (topomgr's own,
/// through CRI) and a Burstable container's resize change nothing.
#[tokio::test]
async fn resizes_are_done_in_place_or_refused_changing_nothing() {
    let w = world("resize");
    let f = &w.face;
    let b = pod("2", "b");
    f.create(b.clone(), container("b1", &b, 100, 0))
        .await
        .unwrap();
    let g = pod("1", "g");
    let created = f
        .create(g.clone(), container("g2", &g, 2000, 2000))
        .await
        .unwrap();
    assert_eq!(
        updates(&created.update),
        [("b1".to_owned(), "0-1".to_owned())]
    );
    let cpus_of = |w: &World, id: &str| {
        w.state
            .read(|v| v.pods[id].containers[0].allocation.cpus.to_string())
    };

    // 2 -> 3 CPUs: node 1 has none left.
    let err = f
        .update(
            g.clone(),
            container("g2", &g, 2000, 2000),
            Some(resize_to(3000, 3000)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "topomgr: ResizeInfeasible: provider \"cpu\": needs 1 more CPUs on node 1, 0 free"
    );
    assert_eq!(cpus_of(&w, "g2"), "2-3", "nothing changed");
    w.check();

    // 2 -> 1 CPU: CPU 3 goes back to b1 in the same answer.
    let shrunk = f
        .update(
            g.clone(),
            container("g2", &g, 2000, 2000),
            Some(resize_to(1000, 1000)),
        )
        .await
        .unwrap();
    let mut got = updates(&shrunk.update);
    got.sort();
    assert_eq!(
        got,
        [
            ("b1".to_owned(), "0-1,3".to_owned()),
            ("g2".to_owned(), "2".to_owned())
        ]
    );
    assert_eq!(cpus_of(&w, "g2"), "2");
    let request = w
        .state
        .read(|v| v.pods["g2"].pod.containers[0].request("cpu"));
    assert_eq!(request, 1000, "the books follow");
    w.check();

    // Exclusive CPUs that no provider resizes.
    let s = pod("3", "g");
    f.create(s.clone(), container("stubborn", &s, 1000, 1000))
        .await
        .unwrap();
    let err = f
        .update(
            s.clone(),
            container("stubborn", &s, 1000, 1000),
            Some(resize_to(2000, 2000)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "topomgr: ResizeInfeasible: container \"ctr-stubborn\" of pod stubborn holds exclusive CPUs 1, and no provider resizes them"
    );

    // topomgr's own cpuset update: every other field zero.
    let mut only_cpuset = LinuxResources::cpuset("0", "0");
    if let Some(c) = only_cpuset.cpu.as_mut() {
        c.shares = Some(OptionalUInt64 { value: 0 });
        c.quota = Some(OptionalInt64 { value: 0 });
    }
    let ok = f
        .update(
            g.clone(),
            container("g2", &g, 1000, 1000),
            Some(only_cpuset),
        )
        .await
        .unwrap();
    assert_eq!(updates(&ok.update)[0], ("g2".to_owned(), "2".to_owned()));
    // A Burstable container's resize: still in the shared pool.
    let ok = f
        .update(
            b.clone(),
            container("b1", &b, 100, 0),
            Some(resize_to(300, 0)),
        )
        .await
        .unwrap();
    assert_eq!(updates(&ok.update)[0], ("b1".to_owned(), "0,3".to_owned()));
    w.check();
}

/// `GET /v1/pods/{uid}/explain` through the daemon's HTTP router (as a
/// root peer): (status, body).
async fn explain_over_http(w: &World, uid: &str) -> (u16, serde_json::Value) {
    let req = axum::http::Request::get(format!("/v1/pods/{uid}/explain"))
        .body(axum::body::Body::empty())
        .unwrap();
    over_http(w, crate::cdi::Resolver::default(), req).await
}

/// `req` through the daemon's HTTP router on `w`'s state thread, CDI
/// devices found by `cdi` (as a root peer): (status, body).
async fn over_http(
    w: &World,
    cdi: crate::cdi::Resolver,
    mut req: axum::http::Request<axum::body::Body>,
) -> (u16, serde_json::Value) {
    let app = crate::server::router(crate::server::AppState {
        state_thread: w.state.clone(),
        metrics: Arc::clone(&w.metrics),
        access: Arc::new(crate::access::AccessPolicy::for_group("topomgr")),
        nri: NriStatus::enabled("/run/nri.sock".as_ref(), None),
        nrt_push: None,
        cdi,
    });
    req.extensions_mut()
        .insert(axum::extract::ConnectInfo(crate::server::PeerConn(Some(
            crate::access::Peer {
                uid: 0,
                gid: 0,
                pid: None,
            },
        ))));
    let res = tower::ServiceExt::oneshot(app, req).await.unwrap();
    let status = res.status().as_u16();
    let body = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

/// Each resize, done or refused, is in the container's trace at the
/// daemon's explain endpoint (issue 33): the old and new request, each
/// provider's answer (the CPUs kept, added, given back) or its refusal
/// with the reason, and what the container holds after.
#[tokio::test]
async fn the_explain_endpoint_shows_each_resize_done_or_refused() {
    let w = world("resize-explain");
    let f = &w.face;
    let b = pod("2", "b");
    f.create(b.clone(), container("b1", &b, 100, 0))
        .await
        .unwrap();
    let g = pod("1", "g");
    f.create(g.clone(), container("g2", &g, 2000, 2000))
        .await
        .unwrap();
    let (status, before) = explain_over_http(&w, "g2").await;
    assert_eq!(status, 200, "{before}");
    assert_eq!(before["resizes"], serde_json::json!([]));

    // 2 -> 3 refused, then 2 -> 1 done.
    f.update(
        g.clone(),
        container("g2", &g, 2000, 2000),
        Some(resize_to(3000, 3000)),
    )
    .await
    .unwrap_err();
    f.update(
        g.clone(),
        container("g2", &g, 2000, 2000),
        Some(resize_to(1000, 1000)),
    )
    .await
    .unwrap();

    let (status, e) = explain_over_http(&w, "g2").await;
    assert_eq!(status, 200, "{e}");
    assert_eq!(e["admitted"], true, "the admission's trace is kept: {e}");
    let resizes = e["resizes"].as_array().unwrap();
    assert_eq!(resizes.len(), 2, "{e}");
    let refused = &resizes[0];
    assert_eq!(refused["done"], false);
    assert_eq!(refused["reason"], "ResizeInfeasible");
    assert_eq!(
        refused["message"],
        "provider \"cpu\": needs 1 more CPUs on node 1, 0 free"
    );
    assert_eq!(
        refused["resources"]["cpu"],
        serde_json::json!({"before": {"request": 2000, "limit": 2000}, "after": {"request": 3000, "limit": 3000}})
    );
    assert_eq!(refused["before"]["cpus"], "2-3");
    assert_eq!(refused["after"], serde_json::Value::Null);
    assert_eq!(refused["providers"]["cpu"]["answer"], "refused");
    assert_eq!(
        refused["providers"]["cpu"]["message"],
        "needs 1 more CPUs on node 1, 0 free"
    );

    let done = &resizes[1];
    assert_eq!(done["done"], true, "{done}");
    assert_eq!(done["reason"], serde_json::Value::Null);
    assert_eq!(done["resources"]["cpu"]["after"]["request"], 1000);
    assert_eq!(done["after"]["cpus"], "2");
    assert_eq!(done["after"]["exclusive"], true);
    let cpu = &done["providers"]["cpu"];
    assert_eq!(cpu["answer"], "resized");
    assert_eq!(
        cpu["cpus"],
        serde_json::json!({"cpus": "2", "exclusive": true, "kept": "2", "added": "", "returned": "3"})
    );

    // The trace goes with the container.
    f.stop(g.clone(), container("g2", &g, 1000, 1000))
        .await
        .unwrap();
    let (status, gone) = explain_over_http(&w, "g2").await;
    assert_eq!(
        (status, &gone["reason"]),
        (404, &serde_json::json!("UnknownPod"))
    );
    w.check();
}

/// Requests a fake API server got: (method, path and query, JSON body).
type Seen = Arc<Mutex<Vec<(String, String, serde_json::Value)>>>;

/// A stand-in for the API server over plain HTTP answering every request
/// `201 {}`; its port and what it got.
async fn fake_api_server() -> (u16, Seen) {
    let seen = Seen::default();
    let record = Arc::clone(&seen);
    let app = axum::Router::new().fallback(
        move |method: axum::http::Method, uri: axum::http::Uri, body: axum::body::Bytes| {
            let record = Arc::clone(&record);
            async move {
                let json = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                record
                    .lock()
                    .unwrap()
                    .push((method.to_string(), uri.to_string(), json));
                (axum::http::StatusCode::CREATED, "{}")
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, seen)
}

/// `[kubernetes] events`: each refusal of a container is recorded on its
/// pod, the kubelet's retries counting up the first Event (one POST, then
/// PATCHes of the same Event); the refusal answers as before.
#[tokio::test]
async fn refusals_are_recorded_as_events_on_the_pod() {
    let w = world("events");
    let (port, seen) = fake_api_server().await;
    let kubeconfig = w.dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "current-context: t\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    token: x\ncontexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n"
        ),
    )
    .unwrap();
    let access = topomgr_kube::Access::load(&topomgr_kube::Source::Kubeconfig(kubeconfig)).unwrap();
    let client = topomgr_kube::ApiClient::new(access).unwrap();
    let recorder = topomgr_kube::events::EventRecorder::start(client, "worker-1".into());
    let face = Face::new(
        w.state.clone(),
        NriStatus::enabled("/run/nri.sock".as_ref(), None),
    )
    .with_events(recorder);
    let g = pod("1", "g");
    for _ in 0..3 {
        let err = face
            .create(g.clone(), container("g3", &g, 3000, 3000))
            .await
            .unwrap_err();
        assert!(err
            .message()
            .starts_with("topomgr: TopologyAffinityError: "));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // An admitted container makes no Event.
    face.create(g.clone(), container("g1", &g, 1000, 1000))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let seen = seen.lock().unwrap().clone();
    let methods: Vec<&str> = seen.iter().map(|(m, _, _)| m.as_str()).collect();
    assert_eq!(methods, ["POST", "PATCH", "PATCH"], "{seen:#?}");
    let (_, path, event) = &seen[0];
    assert_eq!(path, "/api/v1/namespaces/team-a/events");
    assert_eq!(event["reason"], "TopologyAffinityError");
    assert!(
        event["message"]
            .as_str()
            .unwrap()
            .starts_with("Resources cannot be allocated with Topology Locality"),
        "{event}"
    );
    assert_eq!(event["involvedObject"]["uid"], g.uid.as_str());
    assert_eq!(event["involvedObject"]["name"], "pod-1");
    assert_eq!(event["source"]["component"], "topomgr");
    let name = event["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        seen[1].1,
        format!("/api/v1/namespaces/team-a/events/{name}")
    );
    assert_eq!(seen[1].2["count"], 2);
    assert_eq!(seen[2].2["count"], 3);
}

/// A stand-in for the API server over plain HTTP that has the pods of
/// `pods` (by name, in namespace `team-a`) and answers 404 for any other;
/// its port and how many pods it was asked for.
async fn fake_pod_api(pods: Vec<serde_json::Value>) -> (u16, Arc<Mutex<Vec<String>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&asked);
    let pods: BTreeMap<String, serde_json::Value> = pods
        .into_iter()
        .map(|p| (p["metadata"]["name"].as_str().unwrap().to_owned(), p))
        .collect();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let record = Arc::clone(&record);
        let pods = pods.clone();
        async move {
            let path = uri.path().to_owned();
            record.lock().unwrap().push(path.clone());
            let name = path
                .strip_prefix("/api/v1/namespaces/team-a/pods/")
                .unwrap_or_default();
            match pods.get(name) {
                Some(p) => (axum::http::StatusCode::OK, p.to_string()),
                None => (
                    axum::http::StatusCode::NOT_FOUND,
                    r#"{"kind":"Status","message":"not found"}"#.to_owned(),
                ),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, asked)
}

/// A client of the API server at `port` (plain HTTP), its kubeconfig
/// written under `dir`.
fn api_client(dir: &std::path::Path, port: u16) -> topomgr_kube::ApiClient {
    let kubeconfig = dir.join(format!("kubeconfig-{port}"));
    std::fs::write(
        &kubeconfig,
        format!(
            "current-context: t\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    token: x\ncontexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n"
        ),
    )
    .unwrap();
    let access = topomgr_kube::Access::load(&topomgr_kube::Source::Kubeconfig(kubeconfig)).unwrap();
    topomgr_kube::ApiClient::new(access).unwrap()
}

/// Pod `id` as the API server has it (uid as [`pod`] gives it): a
/// Guaranteed pod of one app container per `(container id, whole CPUs)`.
fn api_pod(id: &str, containers: &[(&str, u32)]) -> serde_json::Value {
    let containers: Vec<serde_json::Value> = containers
        .iter()
        .map(|(c, cpus)| {
            serde_json::json!({
                "name": format!("ctr-{c}"),
                "image": "busybox",
                "resources": {"limits": {"cpu": cpus.to_string(), "memory": "64Mi"}},
            })
        })
        .collect();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("pod-{id}"), "namespace": "team-a", "uid": pod(id, "g").uid},
        "spec": {"nodeName": "worker-1", "containers": containers},
        "status": {"phase": "Pending"},
    })
}

/// A container of the API pod `api_pod` gives: `cpus` whole CPUs.
fn whole_container(id: &str, pod: &PodSandbox, cpus: u64) -> Container {
    let mut c = container(id, pod, cpus * 1000, cpus as i64 * 1000);
    c.linux.as_mut().unwrap().resources.as_mut().unwrap().memory = Some(LinuxMemory {
        limit: Some(OptionalInt64 { value: 64 << 20 }),
        ..Default::default()
    });
    c
}

/// Pod scope under NRI (issue 34 item 4): at its first container the pod
/// is read from the API server and admitted whole, so its two one-CPU
/// containers land together on node 1, the only node with two free CPUs
/// (in container scope the first would take CPU 1 of node 0). Its second
/// container and a restarted one get their part without a second read;
/// a pod too large for one node is refused at its first container with
/// nothing held; StopPodSandbox releases the pod; a pod the API server
/// lacks is admitted container by container; an API server that cannot be
/// reached refuses the creation with the reason, holding nothing.
#[tokio::test]
async fn pod_scope_admits_the_whole_pod_at_its_first_container() {
    let (port, asked) = fake_pod_api(vec![
        api_pod("1", &[("a", 1), ("b", 1)]),
        api_pod("2", &[("c", 1)]),
        api_pod("3", &[("d", 1), ("e", 1)]),
    ])
    .await;
    let w = world_in(
        "pod-scope",
        topomgr_sdk::testkit::machine(2, 2),
        Scope::Pod,
        |f, dir| {
            f.with_pod_scope(PodSpecs::new(
                api_client(dir, port),
                std::time::Duration::from_secs(1),
            ))
        },
    );
    let cpuset = |r: &CreateContainerResponse| {
        r.adjust
            .as_ref()
            .and_then(|a| a.linux.as_ref())
            .and_then(|l| l.resources.as_ref())
            .and_then(|r| r.cpu.as_ref())
            .map(|c| c.cpus.clone())
            .unwrap()
    };
    let p1 = pod("1", "g");
    let a = w
        .face
        .create(p1.clone(), whole_container("a", &p1, 1))
        .await
        .unwrap();
    // Both containers are held on node 1 before the second one exists.
    let held = w.held.lock().unwrap().clone();
    let of = |c: &str| held[&("sandbox-1".to_owned(), format!("ctr-{c}"))].clone();
    assert_eq!(
        of("a").union(&of("b")),
        CpuSet::parse("2-3").unwrap(),
        "{held:?}"
    );
    assert_eq!(cpuset(&a), of("a").to_string());
    w.check();
    let b = w
        .face
        .create(p1.clone(), whole_container("b", &p1, 1))
        .await
        .unwrap();
    assert_eq!(cpuset(&b), of("b").to_string());
    assert_eq!(
        asked.lock().unwrap().len(),
        1,
        "read once: {:?}",
        asked.lock().unwrap()
    );
    let pods = w.state.read(|v| v.pods.clone());
    let whole = &pods["sandbox-1"];
    assert_eq!(whole.containers.len(), 2);
    assert!(!pods.contains_key("a") && !pods.contains_key("b"));
    w.check();
    // A restart of container a (a new id) gets a's CPUs back.
    w.face
        .stop(p1.clone(), whole_container("a", &p1, 1))
        .await
        .unwrap();
    assert_eq!(w.held.lock().unwrap().len(), 2, "the pod stays held");
    let a2 = w
        .face
        .create(p1.clone(), {
            let mut c = whole_container("a2", &p1, 1);
            c.name = "ctr-a".into();
            c
        })
        .await
        .unwrap();
    assert_eq!(cpuset(&a2), of("a").to_string());
    w.check();

    // Pod 3 needs two CPUs of one node; only CPU 1 is free: refused at
    // its first container, nothing held.
    let p3 = pod("3", "g");
    let err = w
        .face
        .create(p3.clone(), whole_container("d", &p3, 1))
        .await
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("topomgr: TopologyAffinityError: "),
        "{}",
        err.message()
    );
    assert!(!w.state.read(|v| v.pods.contains_key("sandbox-3")));
    assert_eq!(w.held.lock().unwrap().len(), 2);
    w.check();

    // StopPodSandbox of pod 1 releases it whole.
    w.face
        .stop(p1.clone(), whole_container("b", &p1, 1))
        .await
        .unwrap();
    topomgr_nri::Plugin::stop_pod_sandbox(&*w.face, p1.clone())
        .await
        .unwrap();
    assert!(w.held.lock().unwrap().is_empty());
    assert!(w.state.read(|v| v.pods.is_empty()));
    w.check();

    // Pod 3 fits now (node 1), both of its containers there.
    w.face
        .create(p3.clone(), whole_container("d", &p3, 1))
        .await
        .unwrap();
    w.face
        .create(p3.clone(), whole_container("e", &p3, 1))
        .await
        .unwrap();
    assert_eq!(
        w.held
            .lock()
            .unwrap()
            .values()
            .fold(CpuSet::new(), |a, c| a.union(c)),
        CpuSet::parse("2-3").unwrap()
    );
    w.check();

    // A container whose pod the face saw held, released since (its
    // sandbox stopped meanwhile): refused, nothing held or followed.
    let gone = pod("8", "g");
    let late = whole_container("y", &gone, 1);
    let answer = w
        .face
        .ask(ContainerCommand::Create(Box::new(NewContainer {
            id: "y".into(),
            pod: match convert::map(&gone, &late).unwrap() {
                topomgr_runtime::Mapping::Admit(r) => r.pod.view,
                m => panic!("{m:?}"),
            },
            owner: topomgr_node::api::OwnerSpec::container(
                topomgr_node::state::pod_owner::ContainerRuntime::NriSandbox,
                "sandbox-8",
            ),
            assigned: Default::default(),
            follow: FollowedContainer {
                sandbox: gone.id.clone(),
                name: late.name.clone(),
                who: "team-a/pod-8/ctr-y".into(),
                cgroup: None,
                told: None,
                pod_uid: gone.uid.clone(),
                started: false,
                held_by: Some("sandbox-8".into()),
            },
            deadline: None,
        })))
        .await
        .unwrap();
    let refused = answer.admission.unwrap();
    assert!(!refused.admitted);
    assert_eq!(
        refused.message.as_deref(),
        Some("container team-a/pod-8/ctr-y: its pod, admitted whole, was released (its sandbox sandbox-8 stopped)")
    );
    assert!(!w
        .state
        .read(|v| v.pods.contains_key("y") || v.pods.contains_key("sandbox-8")));
    assert!(w.book().iter().all(|(id, _, _)| id != "y"));
    w.check();

    // A pod the API server does not have: the container on its own.
    let p9 = pod("9", "g");
    w.face
        .create(p9.clone(), whole_container("z", &p9, 1))
        .await
        .unwrap();
    assert!(w.state.read(|v| v.pods.contains_key("z")));
    w.check();

    // No API server: refused with the reason, nothing held.
    let down = world_in(
        "pod-scope-down",
        topomgr_sdk::testkit::machine(2, 2),
        Scope::Pod,
        |f, dir| {
            let closed = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            f.with_pod_scope(PodSpecs::new(
                api_client(dir, closed),
                std::time::Duration::from_secs(1),
            ))
        },
    );
    let err = down
        .face
        .create(p1.clone(), whole_container("a", &p1, 1))
        .await
        .unwrap_err();
    assert!(
        err.message().starts_with("topomgr: pod scope needs the whole pod team-a/pod-1 from the API server and cannot have it: cannot connect to the API server http://127.0.0.1:"),
        "{}",
        err.message()
    );
    assert!(
        err.message()
            .ends_with("; the kubelet retries the container"),
        "{}",
        err.message()
    );
    assert!(down.state.read(|v| v.pods.is_empty()));
    assert!(down.book().is_empty());
}

/// Pod scope at a Synchronize: a pod created while topomgr was away is
/// read and admitted whole once for all its containers; a pod admitted
/// whole keeps its containers' parts; a pod whose sandbox the runtime no
/// longer lists is released.
#[tokio::test]
async fn pod_scope_at_synchronize_admits_whole_pods_and_releases_gone_sandboxes() {
    let (port, asked) = fake_pod_api(vec![
        api_pod("1", &[("a", 1)]),
        api_pod("2", &[("c", 1), ("d", 1)]),
    ])
    .await;
    let w = world_in(
        "pod-scope-sync",
        topomgr_sdk::testkit::machine(2, 2),
        Scope::Pod,
        |f, dir| {
            f.with_pod_scope(PodSpecs::new(
                api_client(dir, port),
                std::time::Duration::from_secs(1),
            ))
        },
    );
    let p1 = pod("1", "g");
    w.face
        .create(p1.clone(), whole_container("a", &p1, 1))
        .await
        .unwrap();
    assert!(w.state.read(|v| v.pods.contains_key("sandbox-1")));
    // Pod 1's sandbox is gone; pod 2 came while topomgr was away.
    let p2 = pod("2", "g");
    let containers = vec![whole_container("c", &p2, 1), whole_container("d", &p2, 1)];
    let updates = w
        .face
        .synchronize(vec![p2.clone()], containers)
        .await
        .unwrap();
    let pods = w.state.read(|v| v.pods.clone());
    assert!(!pods.contains_key("sandbox-1"), "released with its sandbox");
    assert_eq!(pods["sandbox-2"].containers.len(), 2);
    assert_eq!(
        updates
            .iter()
            .map(|u| cpus_of(u).1)
            .collect::<BTreeSet<_>>(),
        BTreeSet::from(["2".to_owned(), "3".to_owned()]),
        "both on node 1"
    );
    let reads = asked.lock().unwrap().clone();
    assert_eq!(
        reads.iter().filter(|p| p.ends_with("/pod-2")).count(),
        1,
        "{reads:?}"
    );
    w.check();
    // Listed again: kept as it is, not read again.
    let containers = vec![whole_container("c", &p2, 1), whole_container("d", &p2, 1)];
    w.face
        .synchronize(vec![p2.clone()], containers)
        .await
        .unwrap();
    assert_eq!(asked.lock().unwrap().len(), reads.len());
    assert_eq!(w.state.read(|v| v.pods.len()), 1);
    w.check();
}

/// Pod scope: a container's resize resizes its part of the pod admitted
/// whole, in place (its name in that pod); the other container's part and
/// the pod's admission stay; an infeasible one changes nothing.
#[tokio::test]
async fn pod_scope_resizes_a_containers_part_of_the_pod() {
    let (port, _) = fake_pod_api(vec![api_pod("6", &[("w", 2)])]).await;
    let w = world_in(
        "pod-scope-resize",
        topomgr_sdk::testkit::machine(2, 2),
        Scope::Pod,
        |f, dir| {
            f.with_pod_scope(PodSpecs::new(
                api_client(dir, port),
                std::time::Duration::from_secs(1),
            ))
        },
    );
    let p6 = pod("6", "g");
    w.face
        .create(p6.clone(), whole_container("w", &p6, 2))
        .await
        .unwrap();
    let part = |w: &World| {
        w.state.read(|v| {
            let r = &v.pods["sandbox-6"];
            (
                r.containers[0].allocation.cpus.to_string(),
                r.pod.containers[0].request("cpu"),
            )
        })
    };
    assert_eq!(part(&w), ("2-3".to_owned(), 2000));
    let err = w
        .face
        .update(
            p6.clone(),
            whole_container("w", &p6, 2),
            Some(resize_to(3000, 3000)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "topomgr: ResizeInfeasible: provider \"cpu\": needs 1 more CPUs on node 1, 0 free"
    );
    assert_eq!(part(&w), ("2-3".to_owned(), 2000), "nothing changed");
    let shrunk = w
        .face
        .update(
            p6.clone(),
            whole_container("w", &p6, 2),
            Some(resize_to(1000, 1000)),
        )
        .await
        .unwrap();
    assert_eq!(updates(&shrunk.update), [("w".to_owned(), "2".to_owned())]);
    assert_eq!(part(&w), ("2".to_owned(), 1000));
    assert_eq!(
        w.state.read(|v| v.pods.keys().cloned().collect::<Vec<_>>()),
        ["sandbox-6"]
    );
    w.check();
}

/// Pod scope with devices: the first container's CDI device (a NIC on node
/// 1) puts the whole pod on node 1 (without it, node 0's CPU 1 would be
/// the pod's): one hint for the pod, node 1, and the pod's other
/// container, created next, gets the shared pool.
#[tokio::test]
async fn pod_scope_aligns_the_pod_with_its_first_containers_devices() {
    use topomgr_nri::api::LinuxDevice;
    let mut api = api_pod("7", &[("n", 1)]);
    api["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "name": "ctr-m",
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
        }));
    let (port, _) = fake_pod_api(vec![api]).await;
    let w = world_in(
        "pod-scope-cdi",
        two_node_nic_machine(),
        Scope::Pod,
        |f, dir| {
            f.with_cdi(record_nic_cdi(dir), None)
                .with_pod_scope(PodSpecs::new(
                    api_client(dir, port),
                    std::time::Duration::from_secs(1),
                ))
        },
    );
    let p7 = pod("7", "g");
    let mut n = whole_container("n", &p7, 1);
    n.linux.as_mut().unwrap().devices = vec![LinuxDevice {
        path: "/dev/infiniband/uverbs0".into(),
        r#type: "c".into(),
        major: 231,
        minor: 192,
        ..Default::default()
    }];
    let placed = w.face.create(p7.clone(), n).await.unwrap();
    assert_eq!(cpuset_of(&placed), ("2", "1"));
    let mut m = container("m", &p7, 500, 500);
    m.linux.as_mut().unwrap().resources.as_mut().unwrap().memory = Some(LinuxMemory {
        limit: Some(OptionalInt64 { value: 64 << 20 }),
        ..Default::default()
    });
    let shared = w.face.create(p7.clone(), m).await.unwrap();
    assert_eq!(cpuset_of(&shared).0, "0-1,3", "the shared pool");
    let pods = w.state.read(|v| v.pods.clone());
    let whole = &pods["sandbox-7"];
    // One hint for the pod: node 1, for both containers.
    let hints: Vec<(&str, Option<NumaMask>)> = whole
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c.hint.affinity))
        .collect();
    let one = Some(NumaMask::single(NumaNodeId::from(1)));
    assert_eq!(hints, [("ctr-n", one), ("ctr-m", one)], "{whole:?}");
    w.check();
}

/// Pod scope with the kubelet's PodResources socket: the pod's first
/// container (an init container, no devices) is created before the
/// container whose DRA claim holds NIC a (node 1); the kubelet lists that
/// claim already, so the whole pod, its init container included, lands
/// on node 1 (without it, node 0's CPU 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_scope_aligns_the_pod_with_the_devices_the_kubelet_lists_for_later_containers() {
    let mut api = api_pod("1", &[("k1", 1)]);
    api["spec"]["initContainers"] = serde_json::json!([{
        "name": "ctr-i",
        "resources": {"limits": {"cpu": "1", "memory": "64Mi"}},
    }]);
    let (port, _) = fake_pod_api(vec![api]).await;
    let w = world_in(
        "pod-scope-kubelet",
        two_node_nic_machine(),
        Scope::Pod,
        |f, dir| {
            let socket = dir.join("kubelet.sock");
            let listener = tokio::net::UnixListener::bind(&socket).unwrap();
            tokio::spawn(topomgr_podresources::serve(
                listener,
                Arc::new(FakeKubelet {
                    device: "example.org/nic=a".into(),
                }),
                std::future::pending(),
                std::time::Duration::from_millis(10),
            ));
            f.with_cdi(
                record_nic_cdi(dir),
                Some(convert::KubeletClaims {
                    socket,
                    timeout: std::time::Duration::from_millis(500),
                    slices: None,
                }),
            )
            .with_pod_scope(PodSpecs::new(
                api_client(dir, port),
                std::time::Duration::from_secs(1),
            ))
        },
    );
    let p1 = pod("1", "g");
    let init = w
        .face
        .create(p1.clone(), whole_container("i", &p1, 1))
        .await
        .unwrap();
    assert_eq!(cpuset_of(&init).1, "1", "memory node 1");
    assert!(
        ["2", "3"].contains(&cpuset_of(&init).0),
        "{:?}",
        cpuset_of(&init)
    );
    let whole = w.state.read(|v| v.pods["sandbox-1"].clone());
    let one = Some(NumaMask::single(NumaNodeId::from(1)));
    assert!(
        whole.containers.iter().all(|c| c.hint.affinity == one),
        "{whole:?}"
    );
    w.check();
}

/// Pod scope: a container's part resized while topomgr was away is
/// caught up at the Synchronize, as in container scope (quota lifted: not
/// a resize; a shrink followed; a grow that does not fit noted until the
/// pod is patched back), and the pod stays one admission.
#[tokio::test]
async fn pod_scope_catches_up_a_part_resized_while_away() {
    let (port, asked) = fake_pod_api(vec![api_pod("6", &[("w", 2)])]).await;
    let w = world_in(
        "pod-scope-away",
        topomgr_sdk::testkit::machine(2, 2),
        Scope::Pod,
        |f, dir| {
            f.with_pod_scope(PodSpecs::new(
                api_client(dir, port),
                std::time::Duration::from_secs(1),
            ))
        },
    );
    let f = &w.face;
    let p6 = pod("6", "g");
    f.create(p6.clone(), whole_container("w", &p6, 2))
        .await
        .unwrap();
    let held = |w: &World| {
        w.state.read(|v| {
            v.pods["sandbox-6"].containers[0]
                .allocation
                .cpus
                .to_string()
        })
    };
    let notes = |w: &World| w.state.read(|v| v.restore_notes.clone());
    let listed = |cpus: u64| {
        let mut c = whole_container("w", &p6, cpus);
        let cpu = c
            .linux
            .as_mut()
            .unwrap()
            .resources
            .as_mut()
            .unwrap()
            .cpu
            .as_mut()
            .unwrap();
        cpu.quota = None;
        c
    };
    f.synchronize(vec![p6.clone()], vec![listed(2)])
        .await
        .unwrap();
    assert_eq!(held(&w), "2-3");
    assert!(notes(&w).is_empty(), "{:?}", notes(&w));
    f.synchronize(vec![p6.clone()], vec![listed(1)])
        .await
        .unwrap();
    assert_eq!(held(&w), "2");
    w.check();
    f.synchronize(vec![p6.clone()], vec![listed(3)])
        .await
        .unwrap();
    assert_eq!(held(&w), "2");
    let n = notes(&w);
    assert_eq!(n.len(), 1, "{n:?}");
    assert!(
        n[0].starts_with("container w was resized while topomgr was away and topomgr cannot do it (ResizeInfeasible: "),
        "{n:?}"
    );
    f.synchronize(vec![p6.clone()], vec![listed(1)])
        .await
        .unwrap();
    assert!(notes(&w).is_empty(), "{:?}", notes(&w));
    assert_eq!(
        w.state.read(|v| v.pods.keys().cloned().collect::<Vec<_>>()),
        ["sandbox-6"]
    );
    assert_eq!(asked.lock().unwrap().len(), 1, "read once");
    w.check();
}
