//! State round trip: every state the provider writes after a history of
//! successful allocations and releases restores into a fresh provider,
//! which then answers hints and allocations exactly as the original; and no
//! NUMA node is ever over-committed.

use proptest::prelude::*;
use serde_json::json;
use topomgr_sdk::{
    testkit, ContainerView, HintSet, HugePages, Machine, NumaMask, PodView, Provider, TopologyHint,
};

use crate::MemoryProvider;

const MB: u64 = 1 << 20;
const GB: u64 = 1 << 30;

fn mask(nodes: &[u32]) -> NumaMask {
    NumaMask::from_nodes(nodes.iter().map(|&n| i64::from(n))).unwrap()
}

/// `mem_gb[i]` GiB of memory and `pages[i]` 1Gi hugepages on node `i`.
fn machine(mem_gb: &[u64], pages: &[u64]) -> Machine {
    let mut m = testkit::machine(mem_gb.len() as u32, 2);
    for (i, n) in m.numa_nodes.iter_mut().enumerate() {
        n.memory_bytes = mem_gb[i] * GB;
        let total = pages.get(i).copied().unwrap_or(0);
        n.hugepages
            .insert("1048576kB".to_owned(), HugePages { total, free: total });
    }
    m
}

fn config() -> serde_json::Value {
    json!({"reserved_memory": {"0": {"memory": "512Mi"}}})
}

fn provider(m: &Machine) -> MemoryProvider {
    match testkit::new_provider::<MemoryProvider>(m, config()) {
        Ok(p) => p,
        Err(e) => panic!("provider: {e}"),
    }
}

fn ctn(name: &str, mem: u64, huge: u64, sidecar: bool) -> ContainerView {
    let mut res = vec![("cpu", 1000), ("memory", mem)];
    if huge > 0 {
        res.push(("hugepages-1Gi", huge));
    }
    let mut c = testkit::container(name, &res);
    c.sidecar = sidecar;
    c
}

/// Checkpoints `p`, restores into a fresh provider and checks that both
/// hold the same state; returns the restored provider.
fn round_trip(m: &Machine, p: &MemoryProvider) -> Result<MemoryProvider, TestCaseError> {
    let cp = p
        .checkpoint()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut q = provider(m);
    q.restore(&cp).map_err(|e| {
        TestCaseError::fail(format!(
            "restore refused a state the provider wrote: {e}\n{}",
            String::from_utf8_lossy(&cp)
        ))
    })?;
    prop_assert_eq!(q.machine_state(), p.machine_state());
    prop_assert_eq!(q.assignments(), p.assignments());
    prop_assert_eq!(q.checkpoint().unwrap(), cp);
    Ok(q)
}

/// No node holds more than it can give, and free + reserved = allocatable.
fn no_overcommit(p: &MemoryProvider) -> Result<(), TestCaseError> {
    for (id, node) in p.machine_state() {
        prop_assert!(node.number_of_assignments >= 0, "node {id}");
        for (r, t) in &node.memory_map {
            prop_assert!(t.reserved <= t.allocatable, "node {id} {r}: {t:?}");
            prop_assert_eq!(t.free + t.reserved, t.allocatable, "node {} {}", id, r);
        }
    }
    Ok(())
}

#[test]
fn init_group_then_app_on_one_node_restores() {
    // The history of issue 10: an init container on nodes 0,3, then an app
    // container of the same pod on node 0 alone (another provider's hint
    // narrowed the merge). Node 0 ends in group {0}, node 3 in {0,3}.
    let m = machine(&[4, 4, 4, 4], &[]);
    let mut p = provider(&m);
    let mut pod = testkit::guaranteed_pod("p", &[]);
    pod.init_containers = vec![ctn("init", 2 * GB, 0, false)];
    pod.containers = vec![ctn("app", GB, 0, false)];
    let init = p
        .allocate(
            &pod,
            &pod.init_containers[0],
            &TopologyHint::new(mask(&[0, 3]), true),
        )
        .unwrap();
    assert_eq!(init.mems, mask(&[0, 3]));
    let app = p
        .allocate(
            &pod,
            &pod.containers[0],
            &TopologyHint::new(mask(&[0]), false),
        )
        .unwrap();
    assert_eq!(app.mems, mask(&[0]));
    assert_eq!(p.machine_state()[&0].cells, mask(&[0]));
    assert_eq!(p.machine_state()[&3].cells, mask(&[0, 3]));
    let cp = p.checkpoint().unwrap();
    let mut q = provider(&m);
    q.restore(&cp).unwrap();
    assert_eq!(q.machine_state(), p.machine_state());
    // Later commands work and answer alike.
    let next = testkit::guaranteed_pod("next", &[("cpu", 1000), ("memory", 2 * GB)]);
    let hp = p.topology_hints(&next, &next.containers[0]).unwrap();
    let hq = q.topology_hints(&next, &next.containers[0]).unwrap();
    assert_eq!(hp, hq);
    assert_eq!(
        testkit::hint_strings(&hq, "memory", &[0, 1, 2, 3]).unwrap(),
        ["1:true", "2:true", "1-2:false"]
    );
    let h = TopologyHint::new(mask(&[1]), true);
    assert_eq!(
        p.allocate(&next, &next.containers[0], &h).unwrap(),
        q.allocate(&next, &next.containers[0], &h).unwrap()
    );
    // Releasing the pod in any order empties the state again.
    q.release("p-uid", "app").unwrap();
    q.release("p-uid", "init").unwrap();
    q.release("next-uid", "app").unwrap();
    assert_eq!(q.machine_state(), &crate::state::default_state(&q.machine));
}

#[test]
fn restore_refuses_states_no_history_gives() {
    let m = machine(&[4, 4], &[]);
    let mut p = provider(&m);
    let a = testkit::guaranteed_pod("a", &[("cpu", 1000), ("memory", GB)]);
    p.allocate(&a, &a.containers[0], &TopologyHint::new(mask(&[1]), true))
        .unwrap();
    let good: serde_json::Value = serde_json::from_slice(&p.checkpoint().unwrap()).unwrap();
    let refused = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = good.clone();
        edit(&mut v);
        let mut q = provider(&m);
        let err = q.restore(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(
            q.assignments().is_empty(),
            "a refused restore changes nothing"
        );
        err.message
    };
    let tail = "; the machine or reserved_memory changed since the state was saved — release the \
                pods or remove the state file";
    assert_eq!(
        refused(&|v| v["machineState"]["1"]["memoryMap"]["memory"]["reserved"] = json!(0)),
        format!(
            "memory provider state: the expected machine state is different from the stored \
             one: NUMA node 1 memory: 3Gi free and 0 reserved do not add up to its allocatable \
             4Gi{tail}"
        )
    );
    assert_eq!(
        refused(&|v| v["machineState"]["1"]["numberOfAssignments"] = json!(2)),
        format!(
            "memory provider state: the expected machine state is different from the stored \
             one: NUMA node 1 has 2 assignments, but 1 memory blocks of the containers are on \
             it{tail}"
        )
    );
    assert_eq!(
        refused(&|v| v["machineState"]["0"]["cells"] = json!([0, 1])),
        format!(
            "memory provider state: the expected machine state is different from the stored \
             one: NUMA node 0 is grouped with nodes 0-1 although no memory is allocated on it \
             (expected 0 alone){tail}"
        )
    );
    assert_eq!(
        refused(&|v| v["machineState"]["1"]["cells"] = json!([0])),
        format!(
            "memory provider state: the expected machine state is different from the stored \
             one: NUMA node 1 is grouped with nodes 0, which must include it and be nodes of \
             the machine (0-1){tail}"
        )
    );
    assert_eq!(
        refused(&|v| {
            v["machineState"]["1"]["memoryMap"]["memory"]["reserved"] = json!(2 * GB);
            v["machineState"]["1"]["memoryMap"]["memory"]["free"] = json!(2 * GB);
        }),
        format!(
            "memory provider state: the expected machine state is different from the stored \
             one: memory reserved on NUMA nodes 1 is 2Gi, but the containers' blocks there add \
             up to 1Gi{tail}"
        )
    );
}

/// One container of a generated pod.
#[derive(Debug, Clone)]
struct Spec {
    mem_halves: u64,
    huge: u64,
    sidecar: bool,
}

/// One step of a history.
#[derive(Debug, Clone)]
enum Step {
    /// Admit a pod: init containers, app containers, pod scope or not, and
    /// per container how the merged hint is chosen (index into the
    /// provider's hints, or a random other-provider mask, or none).
    Admit {
        init: Vec<Spec>,
        apps: Vec<Spec>,
        pod_scope: bool,
        picks: Vec<(u8, u8, bool)>,
    },
    /// Release the n-th admitted pod (modulo), app containers first or not.
    Release { which: usize, apps_first: bool },
}

fn spec() -> impl Strategy<Value = Spec> {
    (1u64..8, 0u64..3, proptest::bool::weighted(0.2)).prop_map(|(mem_halves, huge, sidecar)| Spec {
        mem_halves,
        huge,
        sidecar,
    })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (
            proptest::collection::vec(spec(), 0..3),
            proptest::collection::vec(spec(), 1..3),
            proptest::bool::weighted(0.3),
            proptest::collection::vec((any::<u8>(), any::<u8>(), any::<bool>()), 5),
        )
            .prop_map(|(init, apps, pod_scope, picks)| Step::Admit { init, apps, pod_scope, picks }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(which, apps_first)| Step::Release { which, apps_first }),
    ]
}

fn expand(h: &HintSet, nodes: &[u32]) -> Vec<TopologyHint> {
    match h {
        HintSet::Explicit(v) => v.clone(),
        HintSet::Compact(c) => c.expand(nodes),
    }
}

/// The merged hint the host would hand over, from `pick`: one of the
/// provider's own memory hints, a mask another provider narrowed it to,
/// or no affinity.
fn choose(hints: &[TopologyHint], nodes: &[u32], pick: (u8, u8, bool)) -> TopologyHint {
    let (kind, idx, preferred) = pick;
    match kind % 4 {
        0 | 1 if !hints.is_empty() => hints[idx as usize % hints.len()],
        2 => {
            let bits = u64::from(idx) % ((1u64 << nodes.len()) - 1) + 1;
            let m = nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| bits & (1 << i) != 0)
                .fold(NumaMask::EMPTY, |m, (_, &n)| m.or(mask(&[n])));
            TopologyHint::new(m, preferred)
        }
        _ => TopologyHint {
            affinity: None,
            preferred,
        },
    }
}

fn build_pod(n: usize, init: &[Spec], apps: &[Spec]) -> PodView {
    let mut pod = testkit::guaranteed_pod(&format!("pod{n}"), &[]);
    let mk = |prefix: &str, i: usize, s: &Spec, init: bool| {
        ctn(
            &format!("{prefix}{i}"),
            s.mem_halves * 512 * MB,
            s.huge * GB,
            init && s.sidecar,
        )
    };
    pod.init_containers = init
        .iter()
        .enumerate()
        .map(|(i, s)| mk("init", i, s, true))
        .collect();
    pod.containers = apps
        .iter()
        .enumerate()
        .map(|(i, s)| mk("app", i, s, false))
        .collect();
    pod
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn every_written_state_restores_and_answers_alike(
        mem in proptest::collection::vec(4u64..9, 1..5),
        pages in proptest::collection::vec(0u64..3, 4),
        steps in proptest::collection::vec(step(), 1..14),
        probe in (spec(), any::<(u8, u8, bool)>()),
    ) {
        let m = machine(&mem, &pages);
        let nodes: Vec<u32> = (0..mem.len() as u32).collect();
        let mut p = provider(&m);
        let mut admitted: Vec<PodView> = Vec::new();
        for (n, step) in steps.iter().enumerate() {
            match step {
                Step::Admit { init, apps, pod_scope, picks } => {
                    let pod = build_pod(n, init, apps);
                    let pod_hints = if *pod_scope {
                        p.pod_topology_hints(&pod).unwrap()
                    } else {
                        None
                    };
                    let mut ok = true;
                    for (i, c) in pod.init_containers.iter().chain(&pod.containers).enumerate() {
                        let hints = if *pod_scope {
                            pod_hints.clone()
                        } else {
                            p.topology_hints(&pod, c).unwrap()
                        };
                        let list = hints
                            .as_ref()
                            .and_then(|m| m.get("memory").cloned().flatten())
                            .map(|h| expand(&h, &nodes))
                            .unwrap_or_default();
                        let hint = choose(&list, &nodes, picks[i % picks.len()]);
                        if p.allocate(&pod, c, &hint).is_err() {
                            ok = false;
                            break;
                        }
                        no_overcommit(&p)?;
                    }
                    if ok {
                        admitted.push(pod);
                    } else {
                        // The host rolls a refused pod back.
                        for c in pod.init_containers.iter().chain(&pod.containers) {
                            p.release(&pod.uid, &c.name).unwrap();
                        }
                        prop_assert!(!p.assignments().contains_key(&pod.uid));
                    }
                }
                Step::Release { which, apps_first } => {
                    if admitted.is_empty() {
                        continue;
                    }
                    let pod = admitted.remove(which % admitted.len());
                    let mut names: Vec<&str> = pod
                        .init_containers
                        .iter()
                        .chain(&pod.containers)
                        .map(|c| c.name.as_str())
                        .collect();
                    if *apps_first {
                        names.reverse();
                    }
                    for c in names {
                        p.release(&pod.uid, c).unwrap();
                        no_overcommit(&p)?;
                        round_trip(&m, &p)?;
                    }
                }
            }
            no_overcommit(&p)?;
            let mut q = round_trip(&m, &p)?;
            // A further request: identical hints, identical allocation.
            let (s, pick) = &probe;
            let probe_pod = build_pod(1000 + n, &[], std::slice::from_ref(s));
            let c = &probe_pod.containers[0];
            let hp = p.topology_hints(&probe_pod, c).unwrap();
            prop_assert_eq!(&hp, &q.topology_hints(&probe_pod, c).unwrap());
            let list = hp
                .as_ref()
                .and_then(|m| m.get("memory").cloned().flatten())
                .map(|h| expand(&h, &nodes))
                .unwrap_or_default();
            let hint = choose(&list, &nodes, *pick);
            let mut p2 = p.clone();
            let a = p2.allocate(&probe_pod, c, &hint);
            let b = q.allocate(&probe_pod, c, &hint);
            prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
            prop_assert_eq!(p2.machine_state(), q.machine_state());
            no_overcommit(&q)?;
        }
        // Releasing everything gives the empty machine back.
        for pod in admitted {
            for c in pod.init_containers.iter().chain(&pod.containers) {
                p.release(&pod.uid, &c.name).unwrap();
            }
        }
        prop_assert!(p.assignments().is_empty());
        prop_assert_eq!(p.machine_state(), &crate::state::default_state(&p.machine));
    }
}
