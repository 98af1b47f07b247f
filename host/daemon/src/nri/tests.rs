//! The NRI face driven in process, event by event as the runtime sends
//! them, over a real state thread (journal in a temporary directory) and a
//! scripted CPU provider with the kubelet static policy's shape: CPU 0
//! reserved, whole CPUs of Guaranteed containers exclusive on one NUMA node,
//! everything else in the shared pool. After every event: no CPU is held by
//! two containers, no container holds what the state does not, and each
//! container's cpuset as the runtime was told it matches the state.

use std::collections::BTreeMap;
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
use crate::state_thread::{Command, Reply, StateThread, StateThreadSettings};

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
    let held_alloc = Arc::clone(held);
    let held_release = Arc::clone(held);
    FakeProvider::new()
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
            if c.name == "ctr-slow" {
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
    let dir = std::env::temp_dir().join(format!("topomgr-nri-face-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let machine = topomgr_sdk::testkit::machine(2, 2);
    let held = Held::default();
    let numa = NumaInfo::new(vec![0, 1], None).unwrap();
    let policy = Policy::new("single-numa-node", &BTreeMap::new(), numa).unwrap();
    let admitter = Admitter::new(
        &machine,
        policy,
        Scope::Container,
        vec![LoadedProvider::in_process("cpu", cpu_provider(&held))],
    );
    let settings = StateThreadSettings {
        state_dir: dir.join("state"),
        cgroup_root: dir.join("cgroup"),
        lift_cpu_quota: true,
        boot_id: "boot".into(),
        export: Default::default(),
    };
    let (state, _) =
        StateThread::start(admitter, &machine, settings, Arc::new(Metrics::new())).unwrap();
    let face = Arc::new(Face::new(
        state.clone(),
        NriStatus::enabled("/run/nri.sock".as_ref(), None),
    ));
    World {
        face,
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
        let t = self.face.table();
        for id in t.ids() {
            let p = t.get(&id).unwrap();
            let told = p.told.clone().expect("every container was told");
            if p.is_exclusive() {
                assert_eq!(
                    told.cpus,
                    held[&(id.clone(), p.name.rsplit('/').next().unwrap().to_owned())]
                );
            } else {
                assert_eq!(told.cpus, pool, "{id} is told the pool");
            }
            if p.allocation.is_some() {
                assert!(
                    pods.contains_key(&id),
                    "{id} followed as admitted but released"
                );
            }
        }
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
        .update(g.clone(), container("g1", &g, 1000, 1000))
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
    let reply = w
        .state
        .submit(Command::ReconcileContainers {
            runtime: topomgr_node::pod_owner::ContainerRuntime::Nri,
            existing: ["kept", "late", "shared"].map(String::from).into(),
        })
        .await
        .unwrap();
    let Reply::ContainersReconciled { released, kept } = reply else {
        panic!("{reply:?}")
    };
    assert!(released.is_empty());
    assert_eq!(
        kept.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        ["kept", "shared"]
    );
}

#[tokio::test]
async fn the_health_of_a_face_follows_its_connection() {
    let w = world("health");
    let s = w.face.status();
    assert!(!s.health().connected);
    w.face.disconnected("cannot connect".into());
    assert_eq!(s.health().error.as_deref(), Some("cannot connect"));
    assert!(w.face.runtime_client().is_none());
    assert_eq!(check_scope(Scope::Container), Ok(()));
    assert_eq!(
        check_scope(Scope::Pod).unwrap_err().to_string(),
        "[nri] enabled needs scope = \"container\" (the config says \"pod\"): the runtime tells topomgr one container at a time through NRI, never the whole pod, so pod scope cannot decide; set scope = \"container\", or set enabled = false in [nri]"
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
    assert_eq!(w.face.table().len(), 0);
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
    assert_eq!(w.face.table().len(), 0);
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
}

/// At Synchronize, a kubelet container with a cpuset topomgr did not give
/// is noted; topomgr's own placements (followed before, or the shared
/// pool) are not, and the note goes when the container does.
#[tokio::test]
async fn synchronize_notes_kubelet_pinned_containers_not_its_own() {
    let w = world("kubelet-sync");
    let f = &w.face;
    let g = pod("1", "g");
    let b = pod("2", "b");
    f.create(g.clone(), container("g1", &g, 1000, 1000))
        .await
        .unwrap();
    f.create(b.clone(), container("b1", &b, 100, 0))
        .await
        .unwrap();
    // Released through the API: the runtime still lists it with its cpuset.
    w.state.submit(Command::Release("g1".into())).await.unwrap();
    let listed = vec![
        pinned("g1", &g, 1000, 1000, "1"),
        pinned("b1", &b, 100, 0, "0,2-3"),
        // Not followed (topomgr restarted, say), on the shared pool as it
        // is now (every CPU, g1 released): topomgr's.
        pinned("new-shared", &b, 100, 0, "0-3"),
        pinned("kubelet", &g, 1000, 1000, "2-3"),
    ];
    f.synchronize(vec![g.clone(), b.clone()], listed)
        .await
        .unwrap();
    let notes = kubelet_notes(f);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("nri: 1 container(s) of the kubelet arrived with a cpuset (team-a/pod-1/ctr-kubelet (2-3))"),
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
