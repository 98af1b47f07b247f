//! Unit tests from the kubelet's documented static-policy behaviour
//! (inputs and expected outputs re-expressed from its test tables).

use std::collections::BTreeMap;

use serde_json::json;
use topomgr_sdk::{
    testkit, ContainerView, HintSet, HugePages, Machine, NumaMask, NumaNodeId, PodView, Provider,
    QosClass, TopologyHint,
};

use crate::MemoryProvider;

const MB: u64 = 1 << 20;
const GB: u64 = 1 << 30;

/// `nodes` NUMA nodes of `mem` bytes each with `gi_pages` 1Gi hugepages.
fn machine(nodes: u32, mem: u64, gi_pages: u64) -> Machine {
    let mut m = testkit::machine(nodes, 2);
    for n in &mut m.numa_nodes {
        n.memory_bytes = mem;
        n.hugepages
            .insert("1048576kB".to_owned(), HugePages::new(gi_pages, gi_pages));
    }
    m
}

fn provider(m: &Machine, cfg: serde_json::Value) -> MemoryProvider {
    match testkit::new_provider::<MemoryProvider>(m, cfg) {
        Ok(p) => p,
        Err(e) => panic!("provider: {e}"),
    }
}

/// 512Mi reserved on every node.
fn reserved_512(nodes: u32) -> serde_json::Value {
    let mut r = serde_json::Map::new();
    for n in 0..nodes {
        r.insert(n.to_string(), json!({"memory": "512Mi"}));
    }
    json!({ "reserved_memory": r })
}

fn pod(name: &str, mem: u64, huge_1g: u64) -> PodView {
    let mut res = vec![("cpu", 1000), ("memory", mem)];
    if huge_1g > 0 {
        res.push(("hugepages-1Gi", huge_1g));
    }
    testkit::guaranteed_pod(name, &res)
}

fn mask(nodes: &[u32]) -> NumaMask {
    NumaMask::from_nodes(nodes.iter().map(|&n| i64::from(n))).unwrap()
}

fn ids(nodes: &[u32]) -> Vec<NumaNodeId> {
    mask(nodes).nodes()
}

fn hints(p: &mut MemoryProvider, pod: &PodView, r: &str, nodes: &[u32]) -> Option<Vec<String>> {
    let h = p.topology_hints(pod, &pod.containers[0]).unwrap();
    testkit::hint_strings(&h, r, nodes)
}

#[test]
fn machine_state_like_the_kubelet() {
    // 2Gi per node with one 1Gi page; 512Mi reserved.
    let p = provider(&machine(2, 2 * GB, 1), reserved_512(2));
    let s = &p.machine_state()[&NumaNodeId::from(0u8)];
    let mem = s.memory_map["memory"];
    assert_eq!(
        (mem.total, mem.system_reserved, mem.allocatable, mem.free),
        (2 * GB, 512 * MB, 512 * MB, 512 * MB)
    );
    let huge = s.memory_map["hugepages-1Gi"];
    assert_eq!((huge.total, huge.allocatable, huge.free), (GB, GB, GB));
    assert_eq!(s.cells, mask(&[0]));
}

#[test]
fn hints_narrowest_first_and_preferred_by_capacity() {
    // 4 nodes of 2Gi with a 1Gi page each: memory allocatable 512Mi per node.
    let m = machine(4, 2 * GB, 1);
    let mut p = provider(&m, reserved_512(4));
    let nodes = [0, 1, 2, 3];
    let small = pod("a", 512 * MB, GB);
    assert_eq!(
        hints(&mut p, &small, "memory", &nodes).unwrap()[..5],
        ["0:true", "1:true", "2:true", "3:true", "0-1:false"]
    );
    assert_eq!(hints(&mut p, &small, "memory", &nodes).unwrap().len(), 15);
    // 1Gi of memory needs two nodes: preferred width 2.
    let wide = pod("b", GB, GB);
    let h = hints(&mut p, &wide, "memory", &nodes).unwrap();
    assert_eq!(h[..2], ["0-1:true", "0,2:true"]);
    assert_eq!(h.len(), 11);
    assert_eq!(hints(&mut p, &wide, "hugepages-1Gi", &nodes), Some(h));
    // Nothing fits: every requested resource cannot be satisfied (the
    // kubelet answers an empty map, "no preference", and fails at Allocate).
    let huge = pod("c", 4 * GB, 0);
    let h = p.topology_hints(&huge, &huge.containers[0]).unwrap();
    assert_eq!(
        h,
        Some(BTreeMap::from([(
            "memory".to_owned(),
            Some(HintSet::unsatisfiable())
        )]))
    );
}

#[test]
fn non_guaranteed_pods_and_policy_none_get_no_map() {
    let m = machine(2, 2 * GB, 1);
    let mut p = provider(&m, reserved_512(2));
    let mut burstable = pod("a", GB, 0);
    burstable.qos = QosClass::Burstable;
    assert_eq!(
        p.topology_hints(&burstable, &burstable.containers[0])
            .unwrap(),
        None
    );
    let a = p
        .allocate(&burstable, &burstable.containers[0], &TopologyHint::ANY)
        .unwrap();
    assert_eq!(a, Default::default());
    let mut none = provider(&m, json!({"policy": "none"}));
    let g = pod("b", GB, 0);
    assert_eq!(none.topology_hints(&g, &g.containers[0]).unwrap(), None);
    assert_eq!(none.pod_topology_hints(&g).unwrap(), None);
    let a = none
        .allocate(&g, &g.containers[0], &TopologyHint::new(mask(&[0]), true))
        .unwrap();
    assert_eq!(a, Default::default());
}

#[test]
fn multi_numa_group_rules() {
    // Kubelet table: nodes 0-1 hold a 0-1 group; pod2 asks for 1Gi + 1Gi pages.
    let m = machine(4, 2 * GB, 1);
    let mut p = provider(&m, reserved_512(4));
    let first = pod("pod1", GB, GB);
    let a = p
        .allocate(
            &first,
            &first.containers[0],
            &TopologyHint::new(mask(&[0, 1]), true),
        )
        .unwrap();
    assert_eq!(a.mems, mask(&[0, 1]));
    let s = p.machine_state();
    assert_eq!(s[&NumaNodeId::from(0u8)].cells, mask(&[0, 1]));
    assert_eq!(s[&NumaNodeId::from(0u8)].number_of_assignments, 2);
    assert_eq!(s[&NumaNodeId::from(0u8)].memory_map["memory"].free, 0);
    assert_eq!(s[&NumaNodeId::from(1u8)].memory_map["memory"].free, 0);
    assert_eq!(
        s[&NumaNodeId::from(0u8)].memory_map["hugepages-1Gi"].free,
        0
    );
    assert_eq!(
        s[&NumaNodeId::from(1u8)].memory_map["hugepages-1Gi"].free,
        GB
    );
    // A small pod: nodes 0 and 1 alone are out (they are in a group).
    let second = pod("pod2", 512 * MB, GB);
    assert_eq!(
        hints(&mut p, &second, "memory", &[0, 1, 2, 3]).unwrap(),
        ["2:true", "3:true", "2-3:false"]
    );
    // Allocating it on 2 makes 2 single-NUMA: 1-2 is then a violation.
    p.allocate(
        &second,
        &second.containers[0],
        &TopologyHint::new(mask(&[2]), true),
    )
    .unwrap();
    let third = pod("pod3", 512 * MB, 0);
    let err = p
        .allocate(
            &third,
            &third.containers[0],
            &TopologyHint::new(mask(&[2, 3]), false),
        )
        .unwrap_err();
    assert_eq!(err.reason, "UnexpectedAdmissionError");
    assert_eq!(
        err.message,
        "container \"app\" of pod default/pod3: preferred hint violates NUMA node allocation: \
         NUMA node 2 holds single-NUMA-node memory allocations, so it cannot be part of the \
         multi-node set 2-3"
    );
    // Release gives the group back: cells reset once no assignment is left.
    p.release("pod1-uid", "app").unwrap();
    let s = p.machine_state();
    assert_eq!(s[&NumaNodeId::from(0u8)].cells, mask(&[0]));
    assert_eq!(s[&NumaNodeId::from(0u8)].number_of_assignments, 0);
    assert_eq!(
        s[&NumaNodeId::from(0u8)].memory_map["memory"].free,
        512 * MB
    );
    assert_eq!(
        s[&NumaNodeId::from(1u8)].memory_map["memory"].free,
        512 * MB
    );
}

#[test]
fn extends_a_hint_that_is_too_small_and_reports_shortfalls() {
    let m = machine(2, 8 * GB, 0);
    let mut p = provider(&m, json!({"reserved_memory": {"0": {"memory": "1Gi"}}}));
    // Node 0 has 7Gi, node 1 8Gi; 6Gi first on node 1 leaves 2Gi there.
    let a = pod("a", 6 * GB, 0);
    p.allocate(&a, &a.containers[0], &TopologyHint::new(mask(&[1]), true))
        .unwrap();
    // Non-preferred hint 1 for 6Gi: extended to 0-1? No: node 1 is
    // single-NUMA, so no set containing 1 is allowed.
    let b = pod("b", 6 * GB, 0);
    let err = p
        .allocate(&b, &b.containers[0], &TopologyHint::new(mask(&[1]), false))
        .unwrap_err();
    assert_eq!(
        err.message,
        "container \"app\" of pod default/b: failed to find NUMA nodes to extend the topology \
         hint 1: not enough memory on NUMA node 1: requested 6Gi, 2Gi free, and no NUMA node set \
         containing 1 can hold the request (capacity, free memory and the multi-NUMA rules \
         considered)"
    );
    // No affinity: the default (best) hint is node 0.
    let got = p
        .allocate(&b, &b.containers[0], &TopologyHint::ANY)
        .unwrap();
    assert_eq!(got.mems, mask(&[0]));
    // A third 6Gi container fits nowhere.
    let c = pod("c", 6 * GB, 0);
    let err = p
        .allocate(
            &c,
            &c.containers[0],
            &TopologyHint {
                affinity: None,
                preferred: false,
            },
        )
        .unwrap_err();
    assert_eq!(
        err.message,
        "container \"app\" of pod default/c: failed to get the default NUMA affinity, no NUMA \
         nodes with enough memory is available: not enough memory on NUMA nodes 0-1: requested \
         6Gi, 3Gi free"
    );
}

#[test]
fn extension_of_a_fresh_machine_picks_the_narrowest_superset() {
    let m = machine(4, 4 * GB, 0);
    let mut p = provider(&m, json!({"reserved_memory": {"0": {"memory": "1Gi"}}}));
    // 6Gi on a hint of node 2 (4Gi): extended to the best set containing 2.
    let a = pod("a", 6 * GB, 0);
    let got = p
        .allocate(&a, &a.containers[0], &TopologyHint::new(mask(&[2]), true))
        .unwrap();
    assert_eq!(got.mems, mask(&[0, 2]));
    assert_eq!(
        p.machine_state()[&NumaNodeId::from(0u8)].memory_map["memory"].free,
        0
    );
    assert_eq!(
        p.machine_state()[&NumaNodeId::from(2u8)].memory_map["memory"].free,
        GB
    );
}

#[test]
fn regenerates_hints_for_an_allocated_container() {
    let m = machine(2, 2 * GB, 1);
    let mut p = provider(&m, reserved_512(2));
    let a = pod("pod1", 512 * MB, GB);
    p.allocate(&a, &a.containers[0], &TopologyHint::new(mask(&[0]), true))
        .unwrap();
    assert_eq!(
        hints(&mut p, &a, "memory", &[0, 1]),
        Some(vec!["0:true".to_owned()])
    );
    assert_eq!(
        hints(&mut p, &a, "hugepages-1Gi", &[0, 1]),
        Some(vec!["0:true".to_owned()])
    );
    // Other numbers than allocated: no map.
    let changed = pod("pod1", 256 * MB, GB);
    assert_eq!(
        p.topology_hints(&changed, &changed.containers[0]).unwrap(),
        None
    );
    // Allocate again is idempotent.
    let again = p
        .allocate(&a, &a.containers[0], &TopologyHint::new(mask(&[1]), true))
        .unwrap();
    assert_eq!(again.mems, mask(&[0]));
    assert_eq!(
        p.machine_state()[&NumaNodeId::from(0u8)].number_of_assignments,
        2
    );
}

fn ctn(name: &str, mem: u64, sidecar: bool) -> ContainerView {
    let mut c = testkit::container(name, &[("cpu", 1000), ("memory", mem)]);
    c.sidecar = sidecar;
    c
}

#[test]
fn pod_requests_like_the_kubelet() {
    let mut p = testkit::guaranteed_pod("p", &[]);
    p.init_containers = vec![ctn("side", 2 * GB, true), ctn("init", 4 * GB, false)];
    p.containers = vec![ctn("c1", GB, false), ctn("c2", 2 * GB, false)];
    assert_eq!(crate::hints::pod_requests(&p)["memory"], 6 * GB);
    p.containers = vec![ctn("c1", 2 * GB, false), ctn("c2", 3 * GB, false)];
    assert_eq!(crate::hints::pod_requests(&p)["memory"], 7 * GB);
}

#[test]
fn init_container_memory_is_reused() {
    let m = machine(2, 8 * GB, 0);
    let mut p = provider(&m, json!({"reserved_memory": {"0": {"memory": "1Gi"}}}));
    let mut pod = testkit::guaranteed_pod("p", &[]);
    pod.init_containers = vec![ctn("init", 2 * GB, false)];
    pod.containers = vec![ctn("app", 3 * GB, false)];
    let h = TopologyHint::new(mask(&[0]), true);
    p.allocate(&pod, &pod.init_containers[0], &h).unwrap();
    assert_eq!(
        p.machine_state()[&NumaNodeId::from(0u8)].memory_map["memory"].reserved,
        2 * GB
    );
    p.allocate(&pod, &pod.containers[0], &h).unwrap();
    // 2Gi reused: the pod holds 3Gi in all, the init block shrank to 0.
    assert_eq!(
        p.machine_state()[&NumaNodeId::from(0u8)].memory_map["memory"].reserved,
        3 * GB
    );
    let blocks = &p.assignments()["p-uid"];
    assert_eq!(blocks["init"][0].size, 0);
    assert_eq!(blocks["app"][0].size, 3 * GB);
    // Checkpoint round trip keeps everything, and the kubelet's validation passes.
    let cp = p.checkpoint().unwrap();
    let mut q = provider(&m, json!({"reserved_memory": {"0": {"memory": "1Gi"}}}));
    q.restore(&cp).unwrap();
    assert_eq!(q.machine_state(), p.machine_state());
    assert_eq!(q.assignments(), p.assignments());
}

#[test]
fn restore_refuses_only_unreadable_bytes_and_changes_nothing_then() {
    let m = machine(2, 8 * GB, 0);
    let mut p = provider(&m, json!({"reserved_memory": {"0": {"memory": "1Gi"}}}));
    let a = pod("a", 2 * GB, 0);
    p.allocate(&a, &a.containers[0], &TopologyHint::new(mask(&[1]), true))
        .unwrap();
    let cp = p.checkpoint().unwrap();
    // Another reservation: reconciled, nothing refused.
    let mut q = provider(&m, json!({"reserved_memory": {"0": {"memory": "2Gi"}}}));
    assert!(q.restore(&cp).unwrap().is_empty());
    assert_eq!(q.assignments(), p.assignments());
    let before = q.checkpoint().unwrap();
    let err = q.restore(b"{").unwrap_err();
    assert_eq!(err.reason, "InvalidCheckpoint");
    assert_eq!(
        err.message,
        "memory provider state: the saved state is not a checkpoint of this memory provider \
         (EOF while parsing an object at line 1 column 1); only the provider that wrote it \
         (another library or version configured under this name) reads it"
    );
    assert_eq!(
        q.checkpoint().unwrap(),
        before,
        "a refused restore changes nothing"
    );
    // The none policy keeps the assignments until released.
    let mut none = provider(&m, json!({"policy": "none"}));
    let out = none.reconcile(&cp).unwrap();
    assert!(out.report.is_empty());
    assert_eq!(
        out.notes,
        ["policy \"none\": pods a-uid keep their memory until released; new pods get none"]
    );
    assert_eq!(none.assignments(), p.assignments());
    none.release("a-uid", "app").unwrap();
    assert!(none.assignments().is_empty());
}

#[test]
fn config_errors() {
    let m = machine(2, 2 * GB, 1);
    let err = |v| match testkit::new_provider::<MemoryProvider>(&m, v) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        err(json!({})),
        "InvalidConfig: memory provider config: policy \"static\" needs system-reserved memory \
         (the kubelet refuses it without); add e.g. reserved_memory.0 = { memory = \"1Gi\" } to \
         this provider's config table"
    );
    assert_eq!(
        err(json!({"reserved_memory": {"5": {"memory": "1Gi"}}})),
        "InvalidConfig: memory provider config: reserved_memory.5: this machine has no NUMA node 5 \
         (its nodes are 0-1); reserve that memory on a node it has (rename the table to \
         reserved_memory.<one of 0-1>) or remove the table"
    );
    assert_eq!(
        err(json!({"reserved_memory": {"0": {"memory": "1536Mi"}}})),
        "InvalidConfig: memory provider config: reserved_memory.0.memory = 1536Mi is more than \
         NUMA node 0 can give: 2Gi total minus 1Gi of hugepages leaves 1Gi"
    );
    assert_eq!(
        err(json!({"reserved_memory": {"0": {"memory": "1Mi", "hugepages-2Mi": "2Mi"}}})),
        "InvalidConfig: memory provider config: reserved_memory.0.hugepages-2Mi: NUMA node 0 has \
         no hugepages-2Mi (it has: hugepages-1Gi)"
    );
}

#[test]
fn compact_hints_beyond_eight_nodes() {
    let m = machine(10, 2 * GB, 0);
    let mut p = provider(&m, reserved_512(10));
    let nodes: Vec<u32> = (0..10).collect();
    // 2Gi needs two nodes of 1.5Gi: every pair is minimal.
    let a = pod("a", 2 * GB, 0);
    let h = p.topology_hints(&a, &a.containers[0]).unwrap();
    let Some(Some(HintSet::Compact(c))) = h.as_ref().and_then(|m| m.get("memory")) else {
        panic!("expected compact hints, got {h:?}");
    };
    assert_eq!(c.preferred_width, 2);
    assert_eq!(c.minimal.len(), 45);
    assert_eq!(c.minimal[0], mask(&[0, 1]));
    // The compact form expands to what the explicit enumeration gives.
    let explicit = crate::hints::Hinter {
        state: p.machine_state(),
        reusable: None,
        requested: &crate::hints::container_requests(&a.containers[0]),
    }
    .explicit();
    assert_eq!(c.expand(&ids(&nodes)), explicit);
    // Allocation without affinity takes the best pair.
    let got = p
        .allocate(&a, &a.containers[0], &TopologyHint::ANY)
        .unwrap();
    assert_eq!(got.mems, mask(&[0, 1]));
    // Afterwards nodes 0 and 1 only come as their group 0-1 (1Gi free there).
    let b = pod("b", 1024 * MB, 0);
    let h = p.topology_hints(&b, &b.containers[0]).unwrap();
    let Some(Some(HintSet::Compact(c))) = h.as_ref().and_then(|m| m.get("memory")) else {
        panic!("expected compact hints, got {h:?}");
    };
    assert_eq!(c.preferred_width, 1);
    assert_eq!(c.minimal.len(), 9);
    assert_eq!(c.minimal[0], mask(&[2]));
    assert_eq!(c.minimal[7], mask(&[9]));
    assert_eq!(c.minimal[8], mask(&[0, 1]));
    // Exact bounds: unused nodes grow among themselves, the group stays whole.
    let unused = mask(&[2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(c.within.len(), 9);
    assert!(c.within[..8].iter().all(|&u| u == unused));
    assert_eq!(c.within[8], mask(&[0, 1]));
    let explicit = crate::hints::Hinter {
        state: p.machine_state(),
        reusable: None,
        requested: &crate::hints::container_requests(&b.containers[0]),
    }
    .explicit();
    assert_eq!(c.expand(&ids(&nodes)), explicit);
    assert!(!c.contains(mask(&[0, 1, 2])));
    assert!(!c.contains(mask(&[0])));
    // Every non-empty subset of the eight unused nodes, and the group.
    assert_eq!(explicit.len(), 255 + 1);
    // More than the machine has: cannot be satisfied, in compact form too.
    let whole = pod("c", 20 * GB, 0);
    let h = p.topology_hints(&whole, &whole.containers[0]).unwrap();
    assert_eq!(
        h,
        Some(BTreeMap::from([(
            "memory".to_owned(),
            Some(HintSet::unsatisfiable())
        )]))
    );
}

/// Per zone `(node, capacity, allocatable, available)` of `resource` in
/// MiB, after checking that the totals are the zones' sums.
fn zones(p: &MemoryProvider, resource: &str) -> Vec<(u32, u64, u64, u64)> {
    let inv = p.inventory().unwrap();
    let r = &inv.resources[resource];
    let z: Vec<(u32, u64, u64, u64)> = r
        .zones
        .iter()
        .map(|z| {
            let a = z.amounts;
            let node = z.numa.expect("every zone is a node").get();
            (node, a.capacity / MB, a.allocatable / MB, a.available / MB)
        })
        .collect();
    let sum = |f: fn(&topomgr_sdk::Zone) -> u64| r.zones.iter().map(f).sum::<u64>();
    assert_eq!(
        (r.total.capacity, r.total.allocatable, r.total.available),
        (
            sum(|z| z.amounts.capacity),
            sum(|z| z.amounts.allocatable),
            sum(|z| z.amounts.available)
        )
    );
    z
}

#[test]
fn inventory_follows_allocations_releases_and_restores() {
    // 4Gi per node with two 1Gi pages; 512Mi of memory reserved on every
    // node and one 1Gi page on node 1.
    let m = machine(2, 4 * GB, 2);
    let cfg = json!({"reserved_memory": {
        "0": {"memory": "512Mi"},
        "1": {"memory": "512Mi", "hugepages-1Gi": "1Gi"}
    }});
    let mut p = provider(&m, cfg.clone());
    let inv = p.inventory().unwrap();
    assert_eq!(
        inv.resources.keys().collect::<Vec<_>>(),
        ["hugepages-1Gi", "memory"]
    );
    // Memory allocatable: 4096 - 512 reserved - 2048 of hugepages.
    assert_eq!(
        zones(&p, "memory"),
        [(0, 4096, 1536, 1536), (1, 4096, 1536, 1536)]
    );
    assert_eq!(
        zones(&p, "hugepages-1Gi"),
        [(0, 2048, 2048, 2048), (1, 2048, 1024, 1024)]
    );
    let a = pod("a", GB, GB);
    p.allocate(&a, &a.containers[0], &TopologyHint::new(mask(&[0]), true))
        .unwrap();
    assert_eq!(
        zones(&p, "memory"),
        [(0, 4096, 1536, 512), (1, 4096, 1536, 1536)]
    );
    assert_eq!(
        zones(&p, "hugepages-1Gi"),
        [(0, 2048, 2048, 1024), (1, 2048, 1024, 1024)]
    );
    // 2Gi of memory on nodes 0-1 (a new group: node 0 has single-node
    // memory, so use a fresh provider state for the group).
    let mut q = provider(&m, cfg.clone());
    let wide = pod("w", 2 * GB, 0);
    q.allocate(
        &wide,
        &wide.containers[0],
        &TopologyHint::new(mask(&[0, 1]), true),
    )
    .unwrap();
    // Lowest node first: node 0 gives its 1536Mi, node 1 the rest.
    assert_eq!(
        zones(&q, "memory"),
        [(0, 4096, 1536, 0), (1, 4096, 1536, 1024)]
    );
    // Restored from its checkpoint: the same numbers.
    let mut r = provider(&m, cfg);
    r.restore(&q.checkpoint().unwrap()).unwrap();
    assert_eq!(
        zones(&r, "memory"),
        [(0, 4096, 1536, 0), (1, 4096, 1536, 1024)]
    );
    r.release("w-uid", "app").unwrap();
    assert_eq!(
        zones(&r, "memory"),
        [(0, 4096, 1536, 1536), (1, 4096, 1536, 1536)]
    );
    p.release("a-uid", "app").unwrap();
    assert_eq!(
        zones(&p, "memory"),
        [(0, 4096, 1536, 1536), (1, 4096, 1536, 1536)]
    );
    assert_eq!(
        zones(&p, "hugepages-1Gi"),
        [(0, 2048, 2048, 2048), (1, 2048, 1024, 1024)]
    );
    // The none policy hands out nothing.
    let none = provider(&m, json!({"policy": "none"}));
    assert_eq!(zones(&none, "memory"), [(0, 4096, 0, 0), (1, 4096, 0, 0)]);
    assert_eq!(
        zones(&none, "hugepages-1Gi"),
        [(0, 2048, 0, 0), (1, 2048, 0, 0)]
    );
}

/// A Guaranteed pod with pod-level `memory` (and 2 CPUs); app containers
/// `(name, memory)`: with memory, Guaranteed on their own (1 CPU, equal
/// requests and limits); without, requesting nothing.
fn pod_level_pod(uid: &str, memory: u64, apps: &[(&str, u64)]) -> PodView {
    let level = testkit::resources(&[("cpu", 2000), ("memory", memory)]);
    let apps = apps
        .iter()
        .map(|(n, mem)| {
            if *mem > 0 {
                testkit::container(n, &[("cpu", 1000), ("memory", *mem)])
            } else {
                ContainerView::new(*n)
            }
        })
        .collect();
    PodView::new(uid, uid, "default", QosClass::Guaranteed)
        .with_containers(apps)
        .with_resources(Some(topomgr_sdk::PodResources::new(level.clone(), level)))
}

#[test]
fn pod_level_resources_with_the_gate_off_are_not_pinned() {
    let m = machine(2, 4 * GB, 0);
    let mut p = provider(&m, reserved_512(2));
    let pod = pod_level_pod("pl", 2 * GB, &[("gu", GB), ("shared", 0)]);
    assert_eq!(p.topology_hints(&pod, &pod.containers[0]).unwrap(), None);
    assert_eq!(p.pod_topology_hints(&pod).unwrap(), None);
    for c in &pod.containers {
        let a = p
            .allocate(&pod, c, &TopologyHint::new(mask(&[0]), true))
            .unwrap();
        assert_eq!(a, Default::default());
    }
    assert!(p.assignments().is_empty());
}

#[test]
fn pod_level_resources_in_pod_scope_place_the_pod_once() {
    let m = machine(2, 4 * GB, 0);
    let mut cfg = reserved_512(2);
    cfg["feature_gates"] = json!({"PodLevelResourceManagers": true});
    let mut p = provider(&m, cfg.clone());
    let pod = pod_level_pod("pl", 2 * GB, &[("gu", GB), ("shared", 0)]);
    // Allocatable memory per node: 4Gi - 512Mi = 3.5Gi: the pod fits on one node.
    assert_eq!(
        testkit::hint_strings(&p.pod_topology_hints(&pod).unwrap(), "memory", &[0, 1]),
        Some(vec!["0:true".into(), "1:true".into(), "0-1:false".into()])
    );
    let hint = TopologyHint::new(mask(&[1]), true);
    for c in &pod.containers {
        let a = p.allocate(&pod, c, &hint).unwrap();
        assert_eq!(a.mems, mask(&[1]), "{}", c.name);
    }
    let blocks = |c: &str| -> Vec<(String, u64)> {
        p.assignments()["pl"][c]
            .iter()
            .map(|b| (b.resource.clone(), b.size / MB))
            .collect()
    };
    assert_eq!(blocks("gu"), [("memory".to_owned(), 1024)]);
    assert_eq!(blocks("shared"), [("memory".to_owned(), 1024)]);
    // The node holds the pod's 2Gi once, as one assignment.
    let node = &p.machine_state()[&NumaNodeId::from(1u8)];
    assert_eq!(node.memory_map["memory"].free, 3584 * MB - 2 * GB);
    assert_eq!(node.number_of_assignments, 1);
    // Checkpoint, restore. With the gate off the pod keeps its memory until
    // released (a note, not a conflict).
    let cp = p.checkpoint().unwrap();
    let mut q = provider(&m, cfg);
    assert!(q.restore(&cp).unwrap().is_empty());
    assert_eq!(q.checkpoint().unwrap(), cp);
    let mut off = provider(&m, reserved_512(2));
    let out = off.reconcile(&cp).unwrap();
    assert!(out.report.is_empty());
    assert_eq!(
        out.notes,
        [
            "pods pl hold pod-level memory although the PodLevelResourceManagers feature gate is \
          off now; they keep it until released, new pods get none"
        ]
    );
    assert_eq!(off.checkpoint().unwrap(), cp);
    off.release("pl", "gu").unwrap();
    off.release("pl", "shared").unwrap();
    assert_eq!(
        off.machine_state()[&NumaNodeId::from(1u8)].memory_map["memory"].free,
        3584 * MB
    );
    // The memory goes back with the last container.
    p.release("pl", "gu").unwrap();
    assert_eq!(
        p.machine_state()[&NumaNodeId::from(1u8)].memory_map["memory"].free,
        3584 * MB - 2 * GB
    );
    p.release("pl", "shared").unwrap();
    let node = &p.machine_state()[&NumaNodeId::from(1u8)];
    assert_eq!(node.memory_map["memory"].free, 3584 * MB);
    assert_eq!((node.number_of_assignments, node.cells), (0, mask(&[1])));
    assert!(p.assignments().is_empty());
}

#[test]
fn pod_level_resources_without_memory_for_shared_containers_are_refused() {
    let m = machine(2, 4 * GB, 0);
    let mut cfg = reserved_512(2);
    cfg["feature_gates"] = json!({"PodLevelResourceManagers": true});
    let mut p = provider(&m, cfg);
    let pod = pod_level_pod("pl", GB, &[("gu", GB), ("shared", 0)]);
    let h = p.pod_topology_hints(&pod).unwrap();
    assert_eq!(testkit::hint_strings(&h, "memory", &[0, 1]), Some(vec![]));
    let err = p
        .allocate(
            &pod,
            &pod.containers[0],
            &TopologyHint::new(mask(&[0]), true),
        )
        .unwrap_err();
    assert_eq!(err.reason, "EmptyPodSharedPoolError");
    assert_eq!(
        err.message,
        "pod rejected, sum of exclusive container memory requests equals pod budget, leaving no \
         memory for shared containers"
    );
    assert!(p.assignments().is_empty());
    // Container scope: the eligible container is pinned on its own, the
    // other one is not.
    let a = p
        .allocate(
            &pod,
            &pod.containers[0],
            &TopologyHint::new(mask(&[0]), true),
        )
        .map(|a| a.mems);
    assert!(
        a.is_err(),
        "still pod scope until the host asks container hints"
    );
    let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
    assert_eq!(
        testkit::hint_strings(&h, "memory", &[0, 1]).unwrap()[0],
        "0:true"
    );
    let a = p
        .allocate(
            &pod,
            &pod.containers[0],
            &TopologyHint::new(mask(&[0]), true),
        )
        .unwrap();
    assert_eq!(a.mems, mask(&[0]));
    p.topology_hints(&pod, &pod.containers[1]).unwrap();
    let a = p
        .allocate(
            &pod,
            &pod.containers[1],
            &TopologyHint::new(mask(&[0]), true),
        )
        .unwrap();
    assert_eq!(a, Default::default());
}

/// A resize of `pod`'s container (carrying its new requests): its memory
/// nodes, or the refusal's reason and message.
fn resize(p: &mut MemoryProvider, pod: &PodView) -> Result<String, (String, String)> {
    match p.resize(
        pod,
        &pod.containers[0],
        &topomgr_sdk::Allocation::default(),
        &TopologyHint::ANY,
    ) {
        Ok(Some(a)) => Ok(a.mems.to_string()),
        Ok(None) => panic!("the memory provider resizes"),
        Err(e) => Err((e.reason, e.message)),
    }
}

/// Free bytes of `resource` on node `n`.
fn free_on(p: &MemoryProvider, n: u8, resource: &str) -> u64 {
    p.machine_state()[&NumaNodeId::from(n)].memory_map[resource].free
}

/// A Guaranteed container's memory and hugepages grow and shrink on the
/// nodes it holds memory on; the books (free bytes, the inventory's
/// source) follow; a release afterwards frees exactly what it holds.
#[test]
fn resize_books_memory_again_on_its_nodes() {
    // Per node: 4Gi with two 1Gi pages, 512Mi reserved: 1.5Gi of memory
    // and 2Gi of hugepages allocatable.
    let m = machine(2, 4 * GB, 2);
    let mut p = provider(&m, reserved_512(2));
    let small = pod("g", 512 * MB, GB);
    let a = p
        .allocate(
            &small,
            &small.containers[0],
            &TopologyHint::new(mask(&[0]), true),
        )
        .unwrap();
    assert_eq!(a.mems, mask(&[0]));
    assert_eq!(free_on(&p, 0, "memory"), GB);
    assert_eq!(free_on(&p, 0, "hugepages-1Gi"), GB);
    let big = pod("g", GB, 2 * GB);
    assert_eq!(resize(&mut p, &big), Ok("0".into()));
    assert_eq!(free_on(&p, 0, "memory"), 512 * MB);
    assert_eq!(free_on(&p, 0, "hugepages-1Gi"), 0);
    assert_eq!(free_on(&p, 1, "memory"), 1536 * MB, "node 1 untouched");
    let shrunk = pod("g", 256 * MB, GB);
    assert_eq!(resize(&mut p, &shrunk), Ok("0".into()));
    assert_eq!(free_on(&p, 0, "memory"), 1280 * MB);
    assert_eq!(free_on(&p, 0, "hugepages-1Gi"), GB);
    // The books hold the new sizes: the checkpoint has them and a release
    // gives back exactly them.
    let blocks = &p.assignments()["g-uid"]["app"];
    assert_eq!(
        blocks
            .iter()
            .map(|b| (b.resource.as_str(), b.size, b.numa_affinity))
            .collect::<Vec<_>>(),
        [
            ("hugepages-1Gi", GB, mask(&[0])),
            ("memory", 256 * MB, mask(&[0]))
        ]
    );
    p.release("g-uid", "app").unwrap();
    assert_eq!(free_on(&p, 0, "memory"), 1536 * MB);
    assert_eq!(free_on(&p, 0, "hugepages-1Gi"), 2 * GB);
    assert_eq!(
        p.machine_state()[&NumaNodeId::from(0u8)].number_of_assignments,
        0
    );
}

/// A growth that does not fit on the container's nodes is refused with
/// the amounts and changes nothing; another QoS class is refused; pods
/// the provider does not pin keep their empty allocation.
#[test]
fn resize_that_does_not_fit_is_refused_and_others_are_unchanged() {
    let m = machine(2, 4 * GB, 2);
    let mut p = provider(&m, reserved_512(2));
    let g = pod("g", GB, 0);
    p.allocate(&g, &g.containers[0], &TopologyHint::new(mask(&[1]), true))
        .unwrap();
    let before = p.checkpoint().unwrap();
    let huge = pod("g", 2 * GB, 0);
    assert_eq!(
        resize(&mut p, &huge),
        Err((
            "ResizeInfeasible".into(),
            "container \"app\" of pod default/g cannot grow its memory from 1Gi to 2Gi on NUMA \
             node 1: 1Gi more needed, 512Mi free there"
                .into()
        ))
    );
    assert_eq!(p.checkpoint().unwrap(), before, "nothing changed");
    let mut burstable = g.clone();
    burstable.qos = QosClass::Burstable;
    let err = resize(&mut p, &burstable).unwrap_err();
    assert_eq!(err.0, "ResizeInfeasible");
    assert!(err.1.contains("into a Burstable pod"), "{}", err.1);
    assert_eq!(p.checkpoint().unwrap(), before, "nothing changed");
    // A Burstable pod's container holds nothing and keeps nothing.
    let mut other = pod("b", GB, 0);
    other.qos = QosClass::Burstable;
    assert_eq!(resize(&mut p, &other), Ok("".into()));
    assert_eq!(p.checkpoint().unwrap(), before, "nothing changed");
}

/// Memory on a group of NUMA nodes grows and shrinks on that group,
/// lowest node first as allocation and release place it.
#[test]
fn resize_of_multi_node_memory_stays_on_its_nodes() {
    let m = machine(2, 4 * GB, 2);
    let mut p = provider(&m, reserved_512(2));
    let g = pod("g", 2 * GB, 0);
    let a = p
        .allocate(
            &g,
            &g.containers[0],
            &TopologyHint::new(mask(&[0, 1]), true),
        )
        .unwrap();
    assert_eq!(a.mems, mask(&[0, 1]));
    let grown = pod("g", 2 * GB + 512 * MB, 0);
    assert_eq!(resize(&mut p, &grown), Ok("0-1".into()));
    assert_eq!(
        (free_on(&p, 0, "memory"), free_on(&p, 1, "memory")),
        (0, 512 * MB)
    );
    let too_big = pod("g", 4 * GB, 0);
    assert_eq!(
        resize(&mut p, &too_big).unwrap_err().1,
        "container \"app\" of pod default/g cannot grow its memory from 2560Mi to 4Gi on NUMA \
         nodes 0-1: 1536Mi more needed, 512Mi free there"
    );
    let shrunk = pod("g", GB, 0);
    assert_eq!(resize(&mut p, &shrunk), Ok("0-1".into()));
    assert_eq!(
        (free_on(&p, 0, "memory"), free_on(&p, 1, "memory")),
        (1536 * MB, 512 * MB)
    );
    p.release("g-uid", "app").unwrap();
    assert_eq!(
        (free_on(&p, 0, "memory"), free_on(&p, 1, "memory")),
        (1536 * MB, 1536 * MB)
    );
}

/// The none policy keeps memory pinned by the static policy until release:
/// a resize that leaves its size alone keeps it, one that changes it is
/// refused.
#[test]
fn the_none_policy_does_not_resize_kept_memory() {
    let m = machine(2, 4 * GB, 2);
    let mut s = provider(&m, reserved_512(2));
    let g = pod("g", GB, 0);
    s.allocate(&g, &g.containers[0], &TopologyHint::new(mask(&[1]), true))
        .unwrap();
    let saved = s.checkpoint().unwrap();
    let mut none = provider(&m, json!({"policy": "none"}));
    none.restore(&saved).unwrap();
    let before = none.checkpoint().unwrap();
    let mut cpu_only = g.clone();
    cpu_only.containers[0].requests.insert("cpu".into(), 2000);
    cpu_only.containers[0].limits.insert("cpu".into(), 2000);
    assert_eq!(resize(&mut none, &cpu_only), Ok("1".into()));
    assert_eq!(
        resize(&mut none, &pod("g", 2 * GB, 0)),
        Err((
            "ResizeInfeasible".into(),
            "container \"app\" of pod default/g keeps pinned memory from the static policy, and \
             the none policy does not resize it"
                .into()
        ))
    );
    assert_eq!(none.checkpoint().unwrap(), before, "nothing changed");
}
