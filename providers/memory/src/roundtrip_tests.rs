//! State round trip: every state the provider writes after a history of
//! successful allocations and releases restores into a fresh provider,
//! which then answers hints and allocations exactly as the original; and no
//! NUMA node is ever over-committed.

use proptest::prelude::*;
use serde_json::json;
use topomgr_sdk::{
    testkit, ContainerView, HintSet, HugePages, Machine, NumaMask, NumaNodeId, PodView, Provider,
    TopologyHint,
};

use crate::MemoryProvider;

const MB: u64 = 1 << 20;
const GB: u64 = 1 << 30;

fn mask(nodes: &[u32]) -> NumaMask {
    NumaMask::from_nodes(nodes.iter().map(|&n| i64::from(n))).unwrap()
}

fn ids(nodes: &[u32]) -> Vec<NumaNodeId> {
    mask(nodes).nodes()
}

/// `mem_gb[i]` GiB of memory and `pages[i]` 1Gi hugepages on node `i`.
fn machine(mem_gb: &[u64], pages: &[u64]) -> Machine {
    let mut m = testkit::machine(mem_gb.len() as u32, 2);
    for (i, n) in m.numa_nodes.iter_mut().enumerate() {
        n.memory_bytes = mem_gb[i] * GB;
        let total = pages.get(i).copied().unwrap_or(0);
        n.hugepages
            .insert("1048576kB".to_owned(), HugePages::new(total, total));
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
    // A reported history: an init container on nodes 0,3, then an app
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
    assert_eq!(p.machine_state()[&NumaNodeId::from(0u8)].cells, mask(&[0]));
    assert_eq!(
        p.machine_state()[&NumaNodeId::from(3u8)].cells,
        mask(&[0, 3])
    );
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
fn states_no_history_gives_are_repaired() {
    let m = machine(&[4, 4], &[]);
    let mut p = provider(&m);
    let a = testkit::guaranteed_pod("a", &[("cpu", 1000), ("memory", GB)]);
    p.allocate(&a, &a.containers[0], &TopologyHint::new(mask(&[1]), true))
        .unwrap();
    let good_bytes = p.checkpoint().unwrap();
    let good: serde_json::Value = serde_json::from_slice(&good_bytes).unwrap();
    let repaired = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = good.clone();
        edit(&mut v);
        let mut q = provider(&m);
        let out = q.reconcile(&serde_json::to_vec(&v).unwrap()).unwrap();
        assert!(out.report.is_empty(), "{:?}", out.report);
        assert_eq!(
            q.checkpoint().unwrap(),
            good_bytes,
            "repaired to what allocations give"
        );
        out.notes
    };
    let rebuilt = |why: &str| {
        vec![format!(
            "the saved per-node memory accounting does not add up ({why}); it was rebuilt from \
             the assignments"
        )]
    };
    assert_eq!(
        repaired(&|v| v["machineState"]["1"]["memoryMap"]["memory"]["reserved"] = json!(0)),
        rebuilt("NUMA node 1 memory: 3Gi free and 0 reserved do not add up to its allocatable 4Gi")
    );
    assert_eq!(
        repaired(&|v| {
            v["machineState"]["1"]["memoryMap"]["memory"]["reserved"] = json!(512 * MB);
            v["machineState"]["1"]["memoryMap"]["memory"]["free"] = json!(3584 * MB);
        }),
        rebuilt("memory reserved on all NUMA nodes is 512Mi, less than the blocks hold (1Gi)")
    );
    // Counts and groups come from the blocks.
    let none: Vec<String> = Vec::new();
    assert_eq!(
        repaired(&|v| v["machineState"]["1"]["numberOfAssignments"] = json!(2)),
        none
    );
    assert_eq!(
        repaired(&|v| v["machineState"]["0"]["cells"] = json!([0, 1])),
        none
    );
    assert_eq!(
        repaired(&|v| v["machineState"]["1"]["cells"] = json!([0])),
        none
    );
    // No machine state at all (the none policy writes none).
    assert_eq!(
        repaired(&|v| v["machineState"] = json!({})),
        rebuilt("the saved state has no per-node accounting")
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
        HintSet::Compact(c) => c.expand(&ids(nodes)),
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
                .fold(NumaMask::EMPTY, |m, (_, &n)| m.union(mask(&[n])));
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
        // Releasing everything leaves no assignment, and the state still
        // restores (bytes the kubelet's release accounting strands stay
        // reserved, as in the kubelet).
        for pod in admitted {
            for c in pod.init_containers.iter().chain(&pod.containers) {
                p.release(&pod.uid, &c.name).unwrap();
                no_overcommit(&p)?;
                round_trip(&m, &p)?;
            }
        }
        prop_assert!(p.assignments().is_empty());
    }
}

/// A machine of nodes `(memory bytes, 1Gi hugepages)`.
fn machine_of(nodes: &[(u64, u64)]) -> Machine {
    let mut m = testkit::machine(nodes.len() as u32, 2);
    for (n, &(mem, pages)) in m.numa_nodes.iter_mut().zip(nodes) {
        n.memory_bytes = mem;
        n.hugepages
            .insert("1048576kB".to_owned(), HugePages::new(pages, pages));
    }
    m
}

/// A memory table as the checkpoint writes it.
fn table(allocatable: u64, free: u64, reserved: u64, system: u64, total: u64) -> serde_json::Value {
    json!({"total": total, "systemReserved": system, "allocatable": allocatable,
           "reserved": reserved, "free": free})
}

fn node(
    count: i64,
    cells: &[u32],
    memory: serde_json::Value,
    huge: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    map.insert("memory".to_owned(), memory);
    if let Some(h) = huge {
        map.insert("hugepages-1Gi".to_owned(), h);
    }
    json!({"numberOfAssignments": count, "memoryMap": map, "cells": cells})
}

fn block(nodes: &[u32], resource: &str, size: u64) -> serde_json::Value {
    json!({"numaAffinity": nodes, "type": resource, "size": size})
}

/// The kubelet's `TestStaticPolicyStart` table (memorymanager
/// `policy_static_test.go`), case names kept: a stored state and
/// assignments restored on a machine. The kubelet refuses every state that
/// does not match (then the node must be drained and the state file
/// deleted); topomgr reconciles (`crate::reconcile`): the assignments are
/// kept, the accounting is taken from the machine and config, and what the
/// machine cannot give is a conflict. Each case states why the kubelet
/// refuses (or "") and checks topomgr's conflicts, and whether the stored
/// machine state is kept as it is. After each: the machine's totals, and
/// free = allocatable - held, never below zero.
#[test]
fn kubelet_static_policy_start_table() {
    let m = MB;
    let g = GB;
    let one = |mem: u64, pages: u64| machine_of(&[(mem, pages)]);
    let r512 = json!({"reserved_memory": {"0": {"memory": "512Mi"}}});
    let r512x2 = json!({"reserved_memory": {"0": {"memory": "512Mi"}, "1": {"memory": "512Mi"}}});
    let free_node = node(
        0,
        &[0],
        table(1536 * m, 1536 * m, 0, 512 * m, 2 * g),
        Some(table(g, g, 0, 0, g)),
    );
    let differs = "the expected machine state is different from the stored one";
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Machine, serde_json::Value, serde_json::Value, serde_json::Value, &str, bool, Vec<&str>)> = vec![
        (
            "should fail, if machine state is empty, but it has memory assignments",
            one(2 * g, 1), r512.clone(), json!({}),
            json!({"pod": {"container1": [block(&[0], "memory", 512 * m)]}}),
            "the machine state is empty although it has memory assignments", false, vec![],
        ),
        (
            "should fill the state with default values, when the state is empty",
            one(3 * g, 1), r512.clone(), json!({}), json!({}), "", false, vec![],
        ),
        (
            "should fail when machine state does not have all NUMA nodes",
            machine_of(&[(2 * g, 1), (2 * g, 1)]), r512.clone(), json!({"0": free_node.clone()}), json!({}),
            differs, false, vec![],
        ),
        (
            "should fail when machine state does not have memory resource",
            one(2 * g, 1), r512.clone(),
            json!({"0": {"numberOfAssignments": 0, "cells": [0], "memoryMap": {"hugepages-1Gi": table(g, g, 0, 0, g)}}}),
            json!({}), differs, false, vec![],
        ),
        (
            "should fail when machine state has wrong size of total memory",
            one(2 * g, 1), r512.clone(),
            json!({"0": node(0, &[0], table(1536 * m, 1536 * m, 0, 512 * m, 1536 * m), Some(table(g, g, 0, 0, g)))}),
            json!({}), differs, false, vec![],
        ),
        (
            "should fail when machine state has wrong size of system reserved memory",
            one(2 * g, 1), r512.clone(),
            json!({"0": node(0, &[0], table(1536 * m, 1536 * m, 0, 1024, 2 * g), Some(table(g, g, 0, 0, g)))}),
            json!({}), differs, false, vec![],
        ),
        (
            // Upstream's machine (2Gi with 1Gi of hugepages) leaves 512Mi
            // allocatable, not the stored 1536Mi; 3Gi here so that the
            // reserved bytes are what differ.
            "should fail when machine state reserved memory is different from the memory of all containers memory assignments",
            one(3 * g, 1), r512.clone(),
            json!({"0": node(1, &[0], table(1536 * m, 1536 * m, 0, 512 * m, 3 * g), Some(table(g, g, 0, 0, g)))}),
            json!({"pod": {"container1": [block(&[0], "memory", 512 * m)]}}),
            differs, false, vec![],
        ),
        (
            // Upstream: 2Gi of memory with 2Gi of hugepages, which topomgr
            // refuses as config (nothing left for the 512Mi reservation);
            // here 4Gi, with the stored memory table to match.
            "should fail when machine state has wrong size of hugepages",
            one(4 * g, 2), r512.clone(),
            json!({"0": node(0, &[0], table(1536 * m, 1536 * m, 0, 512 * m, 4 * g), Some(table(g, g, 0, 0, g)))}),
            json!({}), differs, false, vec![],
        ),
        (
            "should fail when machine state has wrong size of system reserved hugepages",
            one(4 * g, 2), r512.clone(),
            json!({"0": node(0, &[0], table(1536 * m, 1536 * m, 0, 512 * m, 4 * g), Some(table(g, g, 0, g, 2 * g)))}),
            json!({}), differs, false, vec![],
        ),
        (
            // Upstream: 2Gi of memory with 4Gi of hugepages (a config
            // topomgr refuses); here 6Gi, with the memory table to match.
            // More bytes reserved than blocks hold is a state the kubelet's
            // own release accounting reaches (`releases_can_strand_bytes_*`):
            // kept as it is.
            "should fail when the hugepages reserved machine state is different from the hugepages of all containers memory assignments",
            one(6 * g, 4), r512.clone(),
            json!({"0": node(2, &[0], table(1536 * m, 1536 * m, 0, 512 * m, 6 * g), Some(table(4 * g, g, 3 * g, 0, 4 * g)))}),
            json!({"pod1": {"container1": [block(&[0], "hugepages-1Gi", g)]},
                   "pod2": {"container2": [block(&[0], "hugepages-1Gi", g)]}}),
            differs, true, vec![],
        ),
        (
            "should fail when machine state does not have NUMA node that used under the memory assignment",
            one(2 * g, 1), r512.clone(), json!({"0": free_node.clone()}),
            json!({"pod1": {"container1": [block(&[1], "memory", g)]}}),
            "the machine state does not have the NUMA node used by the assignment", false,
            vec!["container container1 of pod pod1, memory: NUMA node 1 is gone (its 1Gi block of memory is on NUMA nodes 1)"],
        ),
        (
            "should fail when machine state does not have resource that used under the memory assignment",
            one(2 * g, 1), r512.clone(),
            json!({"0": node(2, &[0], table(1536 * m, 1536 * m, 0, 512 * m, 2 * g), Some(table(g, g, 0, 0, g)))}),
            json!({"pod1": {"container1": [block(&[0], "memory", g), block(&[0], "hugepages-2Mi", g)]}}),
            "the machine state does not have the resource used by the assignment", false,
            vec![
                "container container1 of pod pod1, hugepages-2Mi: NUMA node 0 has no hugepages-2Mi now",
                "container container1 of pod pod1, memory: NUMA node 0 can give 512Mi of memory now, but 1Gi are held there (512Mi short)",
            ],
        ),
        (
            // Upstream's machine (2Gi with 1Gi of hugepages) leaves 512Mi
            // allocatable, not the stored 1536Mi; 3Gi here so that the
            // assignment count is what differs.
            "should fail when machine state number of assignments is different from the expected one",
            one(3 * g, 1), r512.clone(),
            json!({"0": node(1, &[0], table(1536 * m, 1536 * m, 0, 512 * m, 3 * g), Some(table(g, g, 0, 0, g)))}),
            json!({"pod1": {"container1": [block(&[0], "memory", g), block(&[0], "hugepages-1Gi", g)]}}),
            differs, false, vec![],
        ),
        (
            "should validate cross NUMA reserved memory vs container assignments",
            machine_of(&[(2176 * m, 1), (2176 * m, 1)]), r512x2.clone(),
            json!({"0": node(4, &[0, 1], table(640 * m, 0, 640 * m, 512 * m, 2176 * m), Some(table(g, 0, g, 0, g))),
                   "1": node(4, &[0, 1], table(640 * m, 256 * m, 384 * m, 512 * m, 2176 * m), Some(table(g, 0, g, 0, g)))}),
            json!({"pod1": {"container1": [block(&[0, 1], "memory", 768 * m), block(&[0, 1], "hugepages-1Gi", g)]},
                   "pod2": {"container2": [block(&[0, 1], "memory", 256 * m), block(&[0, 1], "hugepages-1Gi", g)]}}),
            "", true, vec![],
        ),
    ];
    for (name, machine, cfg, state, entries, _kubelet_refuses, keeps_state, want) in cases {
        let cp = json!({"policyName": "Static", "machineState": state, "entries": entries});
        let bytes = serde_json::to_vec(&cp).unwrap();
        let mut p = testkit::load::<MemoryProvider>(&machine, cfg).unwrap();
        let report = p.restore(&bytes).unwrap();
        let got: Vec<String> = report.conflicts.iter().map(|c| c.to_string()).collect();
        assert_eq!(got, want, "{name}");
        let back: serde_json::Value = serde_json::from_slice(&p.checkpoint().unwrap()).unwrap();
        assert_eq!(back["entries"], cp["entries"], "{name}: assignments kept");
        if keeps_state {
            assert_eq!(back["machineState"], cp["machineState"], "{name}");
        }
        // Whatever was stored, the accounting fits the machine now: the
        // machine's totals, free = allocatable - held (never below 0).
        for (id, node) in back["machineState"].as_object().unwrap() {
            let total = machine.numa_nodes[id.parse::<usize>().unwrap()].memory_bytes;
            assert_eq!(
                node["memoryMap"]["memory"]["total"], total,
                "{name}: node {id}"
            );
            for (r, t) in node["memoryMap"].as_object().unwrap() {
                let n = |k: &str| t[k].as_u64().unwrap();
                assert_eq!(
                    n("free"),
                    n("allocatable").saturating_sub(n("reserved")),
                    "{name}: node {id} {r}"
                );
            }
        }
    }
}

#[test]
fn releases_can_strand_bytes_like_the_kubelet_and_still_restore() {
    // Found by the property test. Nodes 1 (3Gi allocatable) and 2 (4Gi).
    let m = machine(&[5, 5, 4], &[0, 2, 0]);
    let mut p = provider(&m);
    let at = |nodes: &[u32]| TopologyHint::new(mask(nodes), false);
    let reserved = |p: &MemoryProvider| -> Vec<u64> {
        p.machine_state()
            .values()
            .map(|n| n.memory_map["memory"].reserved / MB)
            .collect()
    };
    let a = testkit::guaranteed_pod("a", &[("cpu", 1000), ("memory", 512 * MB)]);
    p.allocate(&a, &a.containers[0], &at(&[1, 2])).unwrap();
    let mut b = testkit::guaranteed_pod("b", &[]);
    b.containers = vec![ctn("app", 3 * GB, 0, false)];
    p.allocate(&b, &b.containers[0], &at(&[1, 2])).unwrap();
    assert_eq!(reserved(&p), [0, 3072, 512]);
    // Releasing b gives back node 1 first: a's bytes now count on node 2.
    p.release("b-uid", "app").unwrap();
    assert_eq!(reserved(&p), [0, 0, 512]);
    // Another provider narrows c's hint to node 1 alone.
    let c = testkit::guaranteed_pod("c", &[("cpu", 1000), ("memory", 512 * MB)]);
    p.allocate(&c, &c.containers[0], &at(&[1])).unwrap();
    // a's release takes node 1's bytes (c's), c's release finds none left.
    p.release("a-uid", "app").unwrap();
    p.release("c-uid", "app").unwrap();
    assert!(p.assignments().is_empty());
    assert_eq!(reserved(&p), [0, 0, 512]);
    let q = round_trip_plain(&m, &p);
    assert_eq!(q.machine_state(), p.machine_state());
}

fn round_trip_plain(m: &Machine, p: &MemoryProvider) -> MemoryProvider {
    let mut q = provider(m);
    q.restore(&p.checkpoint().unwrap()).unwrap();
    q
}
