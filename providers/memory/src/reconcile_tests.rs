//! Restore is reconcile: each change of the machine or the config, with no
//! pods and with pods held. The state is written by one provider and
//! restored into a new one built for the machine and config as they are
//! now, loaded through the plugin boundary (the SDK test kit's `load`),
//! which answers the report; the notes come from the provider's own
//! `reconcile` on the same bytes. After every restore: every block is kept,
//! each node's free bytes are its allocatable minus what is held there
//! (never below zero), a node holds more than it can give only where a
//! conflict says so, and the inventory is exact.

use serde_json::{json, Value};
use topomgr_sdk::testkit::{self, Loaded};
use topomgr_sdk::{HugePages, Machine, NumaMask, PodView, Provider, Reconciled, TopologyHint};

use crate::reconcile::Restored;
use crate::state::Checkpoint;
use crate::MemoryProvider;

const MB: u64 = 1 << 20;
const GB: u64 = 1 << 30;

/// Nodes of `(MiB of memory, 1Gi hugepages)`.
fn machine(nodes: &[(u64, u64)]) -> Machine {
    let mut m = testkit::machine(nodes.len() as u32, 2);
    for (n, &(mib, pages)) in m.numa_nodes.iter_mut().zip(nodes) {
        n.memory_bytes = mib * MB;
        n.hugepages
            .insert("1048576kB".to_owned(), HugePages::new(pages, pages));
    }
    m
}

/// Two nodes of 8Gi with two 1Gi pages each.
fn base() -> Machine {
    machine(&[(8192, 2), (8192, 2)])
}

/// `reserved_memory` of `mib` MiB on node 0.
fn reserved(mib: u64) -> Value {
    json!({"reserved_memory": {"0": {"memory": format!("{mib}Mi")}}})
}

fn pod(name: &str, mem_gb: u64, huge_gb: u64) -> PodView {
    let mut r = vec![("cpu", 1000), ("memory", mem_gb * GB)];
    if huge_gb > 0 {
        r.push(("hugepages-1Gi", huge_gb * GB));
    }
    testkit::guaranteed_pod(name, &r)
}

fn on(nodes: &[u32]) -> TopologyHint {
    TopologyHint::new(
        NumaMask::from_nodes(nodes.iter().map(|&n| i64::from(n))).unwrap(),
        true,
    )
}

/// Allocates `pod` on `nodes`: its memory nodes, or the error.
fn alloc(p: &mut Loaded, pod: &PodView, nodes: &[u32]) -> Result<String, String> {
    p.allocate(pod, &pod.containers[0], &on(nodes))
        .map(|a| a.mems.to_string())
        .map_err(|e| e.message)
}

/// Pod `a` (4Gi on node 0) and pod `b` (4Gi and a 1Gi page on node 1).
const AB: &[(&str, u64, u64, u32)] = &[("a", 4, 0, 0), ("b", 4, 1, 1)];

/// A provider on `m` with `cfg` that admitted `pods` (name, GiB, 1Gi
/// pages, node).
fn saved(m: &Machine, cfg: Value, pods: &[(&str, u64, u64, u32)]) -> Vec<u8> {
    let mut p = testkit::load::<MemoryProvider>(m, cfg).unwrap();
    for (name, mem, huge, node) in pods {
        assert_eq!(
            alloc(&mut p, &pod(name, *mem, *huge), &[*node]),
            Ok(node.to_string())
        );
    }
    p.checkpoint().unwrap()
}

/// `saved` restored on `m` with `cfg`: the loaded provider and what the
/// restore found; the invariants checked.
fn restored(m: &Machine, cfg: Value, saved: &[u8]) -> (Loaded, Restored) {
    let mut direct = testkit::new_provider::<MemoryProvider>(m, cfg.clone()).unwrap();
    let out = direct.reconcile(saved).unwrap();
    let mut p = testkit::load::<MemoryProvider>(m, cfg).unwrap();
    assert_eq!(p.restore(saved).unwrap(), out.report);
    assert_eq!(p.checkpoint().unwrap(), direct.checkpoint().unwrap());
    let before: Checkpoint = serde_json::from_slice(saved).unwrap();
    let after = check(&mut p, &out.report);
    assert_eq!(after.entries, before.entries, "every block is kept");
    (p, out)
}

/// The invariants after a change; the state.
fn check(p: &mut Loaded, report: &Reconciled) -> Checkpoint {
    let cp: Checkpoint = serde_json::from_slice(&p.checkpoint().unwrap()).unwrap();
    for (id, node) in &cp.machine_state {
        let blocks = cp
            .entries
            .values()
            .flat_map(|m| m.values())
            .flatten()
            .filter(|b| b.numa_affinity.contains(*id))
            .count();
        assert_eq!(node.number_of_assignments, blocks as i64, "node {id}");
        for (r, t) in &node.memory_map {
            assert_eq!(
                t.free,
                t.allocatable.saturating_sub(t.reserved),
                "node {id} {r}"
            );
            if t.reserved > t.allocatable {
                let said = format!("NUMA node {id} can give");
                assert!(
                    report
                        .conflicts
                        .iter()
                        .any(|c| c.resource == *r && c.missing.starts_with(&said)),
                    "node {id} {r} holds more than it can give, and no conflict says so"
                );
            }
        }
    }
    cp
}

/// Per node `(capacity, allocatable, available)` of `resource` in MiB.
fn zones(p: &mut Loaded, resource: &str) -> Vec<(u64, u64, u64)> {
    let inv = p.inventory().unwrap();
    inv.resources[resource]
        .zones
        .iter()
        .map(|z| {
            let a = z.amounts;
            (a.capacity / MB, a.allocatable / MB, a.available / MB)
        })
        .collect()
}

fn conflicts(r: &Reconciled) -> Vec<String> {
    r.conflicts.iter().map(ToString::to_string).collect()
}

#[test]
fn any_machine_and_config_is_accepted_without_pods() {
    let empty = saved(&base(), reserved(512), &[]);
    for (m, cfg, want) in [
        (
            machine(&[(7680, 0)]),
            reserved(1024),
            vec![(7680, 6656, 6656)],
        ),
        (
            machine(&[(8192, 4), (8192, 2), (4096, 0)]),
            reserved(256),
            vec![(8192, 3840, 3840), (8192, 6144, 6144), (4096, 4096, 4096)],
        ),
        (
            base(),
            json!({"policy": "none"}),
            vec![(8192, 0, 0), (8192, 0, 0)],
        ),
    ] {
        let (mut p, out) = restored(&m, cfg, &empty);
        assert_eq!(out, Restored::default());
        assert_eq!(zones(&mut p, "memory"), want);
    }
}

#[test]
fn memory_grows() {
    let now = machine(&[(8704, 2), (8192, 2)]);
    let (mut p, out) = restored(&now, reserved(512), &saved(&base(), reserved(512), &[]));
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut p, "memory"),
        [(8704, 6144, 6144), (8192, 6144, 6144)]
    );

    let (mut p, out) = restored(&now, reserved(512), &saved(&base(), reserved(512), AB));
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut p, "memory"),
        [(8704, 6144, 2048), (8192, 6144, 2048)]
    );
    assert_eq!(alloc(&mut p, &pod("c", 2, 0), &[0]), Ok("0".into()));
    assert_eq!(
        zones(&mut p, "memory"),
        [(8704, 6144, 0), (8192, 6144, 2048)]
    );
}

#[test]
fn memory_shrinks_above_what_is_held() {
    // Hot-unplug of 768Mi on node 0: 4864Mi allocatable, 4Gi held.
    let now = machine(&[(7424, 2), (8192, 2)]);
    let (mut p, out) = restored(&now, reserved(512), &saved(&base(), reserved(512), AB));
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut p, "memory"),
        [(7424, 4864, 768), (8192, 6144, 2048)]
    );
}

#[test]
fn memory_shrinks_below_what_is_held() {
    // Node 0 loses 2Gi: 3584Mi allocatable for a's 4Gi.
    let now = machine(&[(6144, 2), (8192, 2)]);
    let (mut p, out) = restored(&now, reserved(512), &saved(&base(), reserved(512), &[]));
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut p, "memory"),
        [(6144, 3584, 3584), (8192, 6144, 6144)]
    );

    let (mut p, out) = restored(&now, reserved(512), &saved(&base(), reserved(512), AB));
    assert_eq!(
        conflicts(&out.report),
        [
            "container app of pod a-uid, memory: NUMA node 0 can give 3584Mi of memory now, but \
          4Gi are held there (512Mi short)"
        ]
    );
    assert_eq!(out.report.conflicts[0].ids, Vec::<String>::new());
    assert_eq!(out.report.moves, []);
    // a keeps its 4Gi on node 0; node 0 offers nothing; node 1 goes on.
    assert_eq!(alloc(&mut p, &pod("a", 4, 0), &[0]), Ok("0".into()));
    assert_eq!(
        zones(&mut p, "memory"),
        [(6144, 3584, 0), (8192, 6144, 2048)]
    );
    let c = pod("c", 1, 0);
    let h = p.topology_hints(&c, &c.containers[0]).unwrap();
    assert_eq!(
        testkit::hint_strings(&h, "memory", &[0, 1]),
        Some(vec!["1:true".into()])
    );
    assert_eq!(alloc(&mut p, &c, &[1]), Ok("1".into()));
    assert_eq!(
        alloc(&mut p, &pod("d", 1, 0), &[0]),
        Err(
            "container \"app\" of pod default/d: failed to find NUMA nodes to extend the \
             topology hint 0: not enough memory on NUMA node 0: requested 1Gi, 0 free, and no \
             NUMA node set containing 0 can hold the request (capacity, free memory and the \
             multi-NUMA rules considered)"
                .into()
        )
    );
    let held = p.checkpoint().unwrap();
    // a released: node 0's bytes are free again, never more than it has.
    p.release("a-uid", "app").unwrap();
    assert_eq!(
        zones(&mut p, "memory"),
        [(6144, 3584, 3584), (8192, 6144, 1024)]
    );
    let (mut q, out) = restored(&now, reserved(512), &p.checkpoint().unwrap());
    assert_eq!(out, Restored::default());
    assert_eq!(alloc(&mut q, &pod("d", 3, 0), &[0]), Ok("0".into()));
    // The memory comes back while a is held: no conflict any more.
    let (mut q, out) = restored(&base(), reserved(512), &held);
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut q, "memory"),
        [(8192, 5632, 1536), (8192, 6144, 1024)]
    );
}

#[test]
fn hugepages_are_reserved_again() {
    let held = saved(&base(), reserved(512), AB);
    // Node 1 gets 4 pages: regular memory there shrinks to b's 4Gi exactly.
    let more = machine(&[(8192, 2), (8192, 4)]);
    let (mut p, out) = restored(&more, reserved(512), &held);
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut p, "memory"),
        [(8192, 5632, 1536), (8192, 4096, 0)]
    );
    assert_eq!(
        zones(&mut p, "hugepages-1Gi"),
        [(2048, 2048, 2048), (4096, 4096, 3072)]
    );
    // Node 1 loses its pages: b's page is a conflict, its memory is not.
    let none = machine(&[(8192, 2), (8192, 0)]);
    let (mut p, out) = restored(&none, reserved(512), &held);
    assert_eq!(
        conflicts(&out.report),
        [
            "container app of pod b-uid, hugepages-1Gi: NUMA node 1 can give 0 of hugepages-1Gi \
          now, but 1Gi are held there (1Gi short)"
        ]
    );
    assert_eq!(
        zones(&mut p, "hugepages-1Gi"),
        [(2048, 2048, 2048), (0, 0, 0)]
    );
    assert_eq!(
        zones(&mut p, "memory"),
        [(8192, 5632, 1536), (8192, 8192, 4096)]
    );
    assert_eq!(alloc(&mut p, &pod("c", 1, 1), &[0]), Ok("0".into()));
    // Without pods every page count is fine.
    let (mut p, out) = restored(&none, reserved(512), &saved(&base(), reserved(512), &[]));
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut p, "hugepages-1Gi"),
        [(2048, 2048, 2048), (0, 0, 0)]
    );
}

#[test]
fn reserved_memory_grows_and_shrinks() {
    let held = saved(&base(), reserved(512), AB);
    let empty = saved(&base(), reserved(512), &[]);
    // 2Gi reserved: 4Gi allocatable on node 0, all of it a's.
    let (mut p, out) = restored(&base(), reserved(2048), &held);
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut p, "memory"),
        [(8192, 4096, 0), (8192, 6144, 2048)]
    );
    // 3Gi reserved: a holds 1Gi more than node 0 can give.
    let (mut p, out) = restored(&base(), reserved(3072), &held);
    assert_eq!(
        conflicts(&out.report),
        [
            "container app of pod a-uid, memory: NUMA node 0 can give 3Gi of memory now, but 4Gi \
          are held there (1Gi short)"
        ]
    );
    assert_eq!(
        zones(&mut p, "memory"),
        [(8192, 3072, 0), (8192, 6144, 2048)]
    );
    assert_eq!(alloc(&mut p, &pod("c", 2, 0), &[1]), Ok("1".into()));
    let (mut p, out) = restored(&base(), reserved(3072), &empty);
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut p, "memory"),
        [(8192, 3072, 3072), (8192, 6144, 6144)]
    );
    // 256Mi reserved: more room.
    let (mut p, out) = restored(&base(), reserved(256), &held);
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut p, "memory"),
        [(8192, 5888, 1792), (8192, 6144, 2048)]
    );
}

#[test]
fn a_numa_node_appears() {
    let now = machine(&[(8192, 2), (8192, 2), (8192, 0)]);
    let (mut p, out) = restored(&now, reserved(512), &saved(&base(), reserved(512), &[]));
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut p, "memory"),
        [(8192, 5632, 5632), (8192, 6144, 6144), (8192, 8192, 8192)]
    );
    let (mut p, out) = restored(&now, reserved(512), &saved(&base(), reserved(512), AB));
    assert_eq!(out, Restored::default());
    assert_eq!(alloc(&mut p, &pod("c", 8, 0), &[2]), Ok("2".into()));
    assert_eq!(
        zones(&mut p, "memory"),
        [(8192, 5632, 1536), (8192, 6144, 2048), (8192, 8192, 0)]
    );
}

#[test]
fn a_numa_node_vanishes_and_comes_back() {
    let now = machine(&[(8192, 2)]);
    let (mut p, out) = restored(&now, reserved(512), &saved(&base(), reserved(512), &[]));
    assert_eq!(out, Restored::default());
    assert_eq!(zones(&mut p, "memory"), [(8192, 5632, 5632)]);

    let held = saved(&base(), reserved(512), AB);
    let (mut p, out) = restored(&now, reserved(512), &held);
    assert_eq!(
        conflicts(&out.report),
        [
            "container app of pod b-uid, hugepages-1Gi: NUMA node 1 is gone (its 1Gi block of \
             hugepages-1Gi is on NUMA nodes 1)",
            "container app of pod b-uid, memory: NUMA node 1 is gone (its 4Gi block of memory \
             is on NUMA nodes 1)",
        ]
    );
    assert_eq!(zones(&mut p, "memory"), [(8192, 5632, 1536)]);
    assert_eq!(alloc(&mut p, &pod("c", 1, 0), &[0]), Ok("0".into()));
    let gone = p.checkpoint().unwrap();
    // Node 1 is back: b holds its memory there again, no conflict.
    let (mut q, out) = restored(&base(), reserved(512), &gone);
    assert_eq!(out.report, Reconciled::new());
    assert_eq!(
        zones(&mut q, "memory"),
        [(8192, 5632, 512), (8192, 6144, 2048)]
    );
    assert_eq!(
        zones(&mut q, "hugepages-1Gi"),
        [(2048, 2048, 2048), (2048, 2048, 1024)]
    );
    // Released while the node was gone: node 1 is free when it is back.
    p.release("b-uid", "app").unwrap();
    let (mut q, out) = restored(&base(), reserved(512), &p.checkpoint().unwrap());
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut q, "memory"),
        [(8192, 5632, 512), (8192, 6144, 6144)]
    );
}

#[test]
fn static_to_none_keeps_assignments_until_released() {
    let none = json!({"policy": "none"});
    let (mut p, out) = restored(&base(), none.clone(), &saved(&base(), reserved(512), AB));
    assert_eq!(out.report, Reconciled::new());
    assert_eq!(zones(&mut p, "memory"), [(8192, 0, 0), (8192, 0, 0)]);
    let c = pod("c", 1, 0);
    assert_eq!(p.topology_hints(&c, &c.containers[0]).unwrap(), None);
    assert_eq!(alloc(&mut p, &c, &[0]), Ok("".into()));
    p.release("a-uid", "app").unwrap();
    // Back to static: b still holds its memory, a's is free.
    let (mut q, out) = restored(&base(), reserved(512), &p.checkpoint().unwrap());
    assert_eq!(out, Restored::default());
    assert_eq!(
        zones(&mut q, "memory"),
        [(8192, 5632, 5632), (8192, 6144, 2048)]
    );
    assert_eq!(
        zones(&mut q, "hugepages-1Gi"),
        [(2048, 2048, 2048), (2048, 2048, 1024)]
    );
}

#[test]
fn a_released_uid_admitted_again_reuses_nothing() {
    // An init container's memory is reusable by its pod's later
    // containers; once the pod is released nothing of it is left to reuse.
    let m = base();
    let mut p = testkit::new_provider::<MemoryProvider>(&m, reserved(512)).unwrap();
    let mut pd = testkit::guaranteed_pod("p", &[]);
    pd.init_containers = vec![testkit::container(
        "init",
        &[("cpu", 1000), ("memory", 2 * GB)],
    )];
    pd.containers = vec![testkit::container(
        "app",
        &[("cpu", 1000), ("memory", 8 * GB)],
    )];
    p.allocate(&pd, &pd.init_containers[0], &on(&[0])).unwrap();
    // The app container does not fit node 0: the host rolls the pod back.
    assert!(p.allocate(&pd, &pd.containers[0], &on(&[0])).is_err());
    p.release("p-uid", "init").unwrap();
    p.release("p-uid", "app").unwrap();
    p.allocate(&pd, &pd.init_containers[0], &on(&[0])).unwrap();
    let node0 = &p.machine_state()[&topomgr_sdk::NumaNodeId::from(0u8)];
    assert_eq!(node0.memory_map["memory"].reserved, 2 * GB);
}
