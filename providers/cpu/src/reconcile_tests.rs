//! Restore is reconcile: each change of the machine or the config, with no
//! pods and with pods held. The state is written by one provider and
//! restored into a new one built for the machine and config as they are
//! now, loaded through the plugin boundary (the SDK test kit's `load`),
//! which answers the report; the notes (not part of the report) come from
//! the provider's own `reconcile` on the same bytes.
//! After every step: no CPU is held by two pods, the shared pool holds no
//! held and no offline CPU, and the inventory is exact.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use topomgr_sdk::testkit::{self, Loaded};
use topomgr_sdk::{
    Conflict, ContainerView, Machine, NumaMask, PodView, QosClass, Reconciled, TopologyHint,
};

use crate::reconcile::Restored;
use crate::state::Checkpoint;
use crate::testmachines::dual_socket_ht;
use crate::tests::cpu_zones;
use crate::topology::{from_cpuset, Cpus};
use crate::CpuManager;
use topomgr_sdk::Provider;

fn set(s: &str) -> Cpus {
    from_cpuset(&topomgr_sdk::CpuSet::parse(s).unwrap())
}

fn pod(name: &str, n: u64) -> PodView {
    testkit::guaranteed_pod(name, &[("cpu", n * 1000), ("memory", 1 << 30)])
}

fn best_effort() -> PodView {
    PodView::new("be-uid", "be", "default", QosClass::BestEffort)
        .with_containers(vec![ContainerView::new("app")])
}

fn hint(nodes: &[u32]) -> TopologyHint {
    TopologyHint::new(NumaMask::from_nodes(nodes.iter().copied()).unwrap(), true)
}

/// `m` with CPUs `offline` taken offline.
fn offline(mut m: Machine, offline: &str) -> Machine {
    let off = set(offline);
    for c in &mut m.cpus {
        if off.contains(&c.id) {
            c.online = false;
        }
    }
    m
}

/// Allocates `pod`'s container on `nodes`: `(cpus, exclusive)` or the error.
fn alloc(p: &mut Loaded, pod: &PodView, nodes: &[u32]) -> Result<(String, bool), String> {
    p.allocate(pod, &pod.containers[0], &hint(nodes))
        .map(|a| (a.cpus.to_string(), a.exclusive))
        .map_err(|e| e.to_string())
}

/// A provider on `m` with `cfg` that admitted `pods` (name, CPUs, node).
fn saved(m: &Machine, cfg: Value, pods: &[(&str, u64, u32)]) -> Vec<u8> {
    let mut p = testkit::load::<CpuManager>(m, cfg).unwrap();
    for (name, n, node) in pods {
        alloc(&mut p, &pod(name, *n), &[*node]).unwrap();
    }
    p.checkpoint().unwrap()
}

/// `saved` restored on `m` with `cfg`: the loaded provider, the report it
/// answered and the notes.
fn restored(m: &Machine, cfg: Value, saved: &[u8]) -> (Loaded, Restored) {
    let mut direct = testkit::new_provider::<CpuManager>(m, cfg.clone()).unwrap();
    let out = direct.reconcile(saved).unwrap();
    let mut p = testkit::load::<CpuManager>(m, cfg).unwrap();
    assert_eq!(p.restore(saved).unwrap(), out.report);
    assert_eq!(p.checkpoint().unwrap(), direct.checkpoint().unwrap());
    let _ = check(&mut p, m);
    (p, out)
}

/// The invariants; returns the shared pool.
fn check(p: &mut Loaded, m: &Machine) -> String {
    let cp: Checkpoint = serde_json::from_slice(&p.checkpoint().unwrap()).unwrap();
    let mut owner: BTreeMap<u32, String> = BTreeMap::new();
    let mut held = Cpus::new();
    for (uid, containers) in &cp.entries {
        for cpus in containers.values() {
            for c in cpus.iter() {
                let first = owner.entry(c).or_insert_with(|| uid.clone());
                assert_eq!(first, uid, "CPU {c} held by two pods");
                held.insert(c);
            }
        }
    }
    let online: Cpus = m
        .cpus
        .iter()
        .filter(|c| c.online && c.numa.is_some())
        .map(|c| c.id)
        .collect();
    let be = best_effort();
    let a = p
        .allocate(&be, &be.containers[0], &TopologyHint::ANY)
        .unwrap();
    assert!(!a.exclusive);
    let pool = from_cpuset(&a.cpus);
    assert!(pool.is_disjoint(&held), "pool {:?} holds held CPUs", a.cpus);
    assert!(
        pool.is_subset(&online),
        "pool {:?} holds offline CPUs",
        a.cpus
    );
    a.cpus.to_string()
}

fn conflict(pod: &str, cpus: &str, missing: &str) -> Conflict {
    Conflict::new(pod, "app", "cpu", missing).with_ids(set(cpus).iter().map(u32::to_string))
}

fn zones(p: &mut Loaded) -> Vec<(i64, u64, u64, u64)> {
    cpu_zones(&p.inventory().unwrap())
}

fn reserved(cpus: &str) -> Value {
    json!({ "reserved_cpus": cpus })
}

/// Pods `a` (2 CPUs on node 0: 2,8) and `b` (2 CPUs on node 1: 1,7) with
/// CPU 0 reserved, on the kubelet's dual-socket HT machine.
const AB: &[(&str, u64, u32)] = &[("a", 2, 0), ("b", 2, 1)];

#[test]
fn any_machine_and_config_is_accepted_without_pods() {
    let m = dual_socket_ht();
    let empty = saved(&m, reserved("0"), &[]);
    let small = testkit::machine(1, 4);
    for (machine, cfg, want) in [
        (
            offline(dual_socket_ht(), "7,11"),
            reserved("0,1"),
            vec![(0, 6, 5, 5), (1, 4, 3, 3)],
        ),
        (small.clone(), reserved("3"), vec![(0, 4, 3, 3)]),
        (small, json!({"policy": "none"}), vec![(0, 4, 0, 0)]),
        (
            m.clone(),
            json!({"reserved_cpus": "0-1", "options": {"full-pcpus-only": "true", "strict-cpu-reservation": "true"}}),
            vec![(0, 6, 5, 5), (1, 6, 5, 5)],
        ),
    ] {
        let (mut p, report) = restored(&machine, cfg, &empty);
        assert_eq!(report, Restored::default());
        assert_eq!(zones(&mut p), want);
    }
}

#[test]
fn an_unheld_cpu_goes_offline() {
    let m = dual_socket_ht();
    let now = offline(dual_socket_ht(), "11");
    let (mut p, report) = restored(&now, reserved("0"), &saved(&m, reserved("0"), &[]));
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut p), [(0, 6, 5, 5), (1, 5, 5, 5)]);

    let (mut p, report) = restored(&now, reserved("0"), &saved(&m, reserved("0"), AB));
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut p), [(0, 6, 5, 3), (1, 5, 5, 3)]);
    assert_eq!(alloc(&mut p, &pod("a", 2), &[1]), Ok(("2,8".into(), true)));
    assert_eq!(
        alloc(&mut p, &pod("c", 3), &[1]),
        Ok(("3,5,9".into(), true))
    );
    assert_eq!(check(&mut p, &now), "0,4,6,10");
}

#[test]
fn a_held_cpu_goes_offline_and_comes_back() {
    let m = dual_socket_ht();
    let now = offline(dual_socket_ht(), "7");
    let (mut p, report) = restored(&now, reserved("0"), &saved(&m, reserved("0"), &[]));
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut p), [(0, 6, 5, 5), (1, 5, 5, 5)]);

    let before = saved(&m, reserved("0"), AB);
    let (mut p, report) = restored(&now, reserved("0"), &before);
    assert_eq!(
        report.report.conflicts,
        [conflict("b-uid", "7", "CPU 7 is offline")]
    );
    assert_eq!(report.notes, Vec::<String>::new());
    assert_eq!(
        report.report.conflicts[0].to_string(),
        "container app of pod b-uid, cpu: CPU 7 is offline"
    );
    assert_eq!(report.report.conflicts[0].ids, ["7"]);
    // b keeps 1 and 7; its cpuset is CPU 1. Node 1 offers 3,5,9,11.
    assert_eq!(alloc(&mut p, &pod("b", 2), &[1]), Ok(("1".into(), true)));
    assert_eq!(zones(&mut p), [(0, 6, 5, 3), (1, 5, 5, 4)]);
    assert_eq!(
        alloc(&mut p, &pod("c", 4), &[1]),
        Ok(("3,5,9,11".into(), true))
    );
    assert_eq!(check(&mut p, &now), "0,4,6,10");
    let after = p.checkpoint().unwrap();

    // CPU 7 is back: b's again, nobody else's, no conflict.
    let (mut q, report) = restored(&m, reserved("0"), &after);
    assert_eq!(report, Restored::default());
    assert_eq!(alloc(&mut q, &pod("b", 2), &[1]), Ok(("1,7".into(), true)));
    assert_eq!(zones(&mut q), [(0, 6, 5, 3), (1, 6, 6, 0)]);
    assert_eq!(check(&mut q, &m), "0,4,6,10");

    // Released while offline: CPU 1 is free, 7 is nobody's until it is back.
    p.release("b-uid", "app").unwrap();
    assert_eq!(zones(&mut p), [(0, 6, 5, 3), (1, 5, 5, 1)]);
    assert_eq!(check(&mut p, &now), "0-1,4,6,10");
    let (mut q, report) = restored(&m, reserved("0"), &p.checkpoint().unwrap());
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut q), [(0, 6, 5, 3), (1, 6, 6, 2)]);
    assert_eq!(alloc(&mut q, &pod("d", 2), &[1]), Ok(("1,7".into(), true)));
}

#[test]
fn every_held_cpu_offline_refuses_only_that_container() {
    let m = dual_socket_ht();
    let now = offline(dual_socket_ht(), "1,7");
    let (mut p, report) = restored(&now, reserved("0"), &saved(&m, reserved("0"), AB));
    assert_eq!(
        report.report.conflicts,
        [conflict("b-uid", "1,7", "CPUs 1,7 are offline")]
    );
    assert_eq!(
        alloc(&mut p, &pod("b", 2), &[1]),
        Err(
            "UnexpectedAdmissionError: container \"app\" of pod b-uid holds CPUs 1,7 and can \
             run on none of them now: CPUs 1,7 are offline; release this pod, or bring CPUs 1,7 \
             online again (/sys/devices/system/cpu/cpuN/online)"
                .into()
        )
    );
    assert_eq!(alloc(&mut p, &pod("c", 2), &[1]), Ok(("3,9".into(), true)));
    assert_eq!(check(&mut p, &now), "0,4-6,10-11");
}

#[test]
fn a_cpu_comes_online() {
    let before = offline(dual_socket_ht(), "11");
    let m = dual_socket_ht();
    let (mut p, report) = restored(&m, reserved("0"), &saved(&before, reserved("0"), &[]));
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut p), [(0, 6, 5, 5), (1, 6, 6, 6)]);

    // With CPU 11 offline, core 5 was a one-thread core: b got 1 and 5.
    let (mut p, report) = restored(&m, reserved("0"), &saved(&before, reserved("0"), AB));
    assert_eq!(report, Restored::default());
    assert_eq!(alloc(&mut p, &pod("b", 2), &[1]), Ok(("1,5".into(), true)));
    assert_eq!(zones(&mut p), [(0, 6, 5, 3), (1, 6, 6, 4)]);
    assert_eq!(
        alloc(&mut p, &pod("c", 4), &[1]),
        Ok(("3,7,9,11".into(), true))
    );
    assert_eq!(check(&mut p, &m), "0,4,6,10");
}

#[test]
fn reserved_cpus_grow_over_a_held_cpu() {
    let m = dual_socket_ht();
    let (mut p, report) = restored(&m, reserved("0-1"), &saved(&m, reserved("0"), &[]));
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut p), [(0, 6, 5, 5), (1, 6, 5, 5)]);

    // b holds CPU 1, reserved now: b keeps it until released.
    let (mut p, report) = restored(&m, reserved("0-1"), &saved(&m, reserved("0"), AB));
    assert_eq!(report.report.conflicts, []);
    assert_eq!(
        report.notes,
        [
            "pod b-uid container \"app\" holds CPUs 1 of reserved_cpus; they stay its until it is \
          released, then they are reserved"
        ]
    );
    assert_eq!(alloc(&mut p, &pod("b", 2), &[1]), Ok(("1,7".into(), true)));
    assert_eq!(zones(&mut p), [(0, 6, 5, 3), (1, 6, 5, 4)]);
    p.release("b-uid", "app").unwrap();
    // CPU 1 is reserved now: in the shared pool (no strict reservation),
    // never handed out exclusively.
    assert_eq!(zones(&mut p), [(0, 6, 5, 3), (1, 6, 5, 5)]);
    assert_eq!(check(&mut p, &m), "0-1,3-7,9-11");
    assert_eq!(
        alloc(&mut p, &pod("c", 5), &[1]),
        Ok(("3,5,7,9,11".into(), true))
    );

    // With strict-cpu-reservation the released CPU leaves the shared pool.
    let strict = json!({"reserved_cpus": "0-1", "options": {"strict-cpu-reservation": "true"}});
    let (mut p, _) = restored(&m, strict, &saved(&m, reserved("0"), AB));
    assert_eq!(check(&mut p, &m), "3-6,9-11");
    p.release("b-uid", "app").unwrap();
    assert_eq!(check(&mut p, &m), "3-7,9-11");
    assert_eq!(zones(&mut p), [(0, 6, 5, 3), (1, 6, 5, 5)]);
}

#[test]
fn reserved_cpus_shrink() {
    let m = dual_socket_ht();
    let (mut p, report) = restored(&m, reserved("0"), &saved(&m, reserved("0-1"), &[]));
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut p), [(0, 6, 5, 5), (1, 6, 6, 6)]);

    // Saved with 0-1 reserved: b got the whole core 3,9.
    let (mut p, report) = restored(&m, reserved("0"), &saved(&m, reserved("0-1"), AB));
    assert_eq!(report, Restored::default());
    assert_eq!(alloc(&mut p, &pod("b", 2), &[1]), Ok(("3,9".into(), true)));
    assert_eq!(zones(&mut p), [(0, 6, 5, 3), (1, 6, 6, 4)]);
    assert_eq!(alloc(&mut p, &pod("c", 2), &[1]), Ok(("1,7".into(), true)));
    assert_eq!(check(&mut p, &m), "0,4-6,10-11");
}

#[test]
fn static_to_none_keeps_assignments_until_released() {
    let m = dual_socket_ht();
    let none = json!({"policy": "none"});
    let (mut p, report) = restored(&m, none.clone(), &saved(&m, reserved("0"), &[]));
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut p), [(0, 6, 0, 0), (1, 6, 0, 0)]);
    assert_eq!(
        alloc(&mut p, &pod("c", 2), &[1]),
        Ok(("0-11".into(), false))
    );

    let (mut p, report) = restored(&m, none, &saved(&m, reserved("0"), AB));
    assert_eq!(report, Restored::default());
    let c = pod("c", 2);
    assert_eq!(p.topology_hints(&c, &c.containers[0]).unwrap(), None);
    assert_eq!(alloc(&mut p, &c, &[1]), Ok(("0,3-6,9-11".into(), false)));
    assert_eq!(alloc(&mut p, &pod("a", 2), &[1]), Ok(("2,8".into(), true)));
    assert_eq!(zones(&mut p), [(0, 6, 0, 0), (1, 6, 0, 0)]);
    assert_eq!(
        String::from_utf8(p.checkpoint().unwrap()).unwrap(),
        r#"{"policy_name":"none","default_cpu_set":"","entries":{"a-uid":{"app":"2,8"},"b-uid":{"app":"1,7"}},"cpus_to_reuse":{"b-uid":""}}"#
    );
    p.release("a-uid", "app").unwrap();
    assert_eq!(check(&mut p, &m), "0,2-6,8-11");
    // Back to static: b is still held.
    let (mut q, report) = restored(&m, reserved("0"), &p.checkpoint().unwrap());
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut q), [(0, 6, 5, 5), (1, 6, 6, 4)]);
    assert_eq!(alloc(&mut q, &pod("b", 2), &[0]), Ok(("1,7".into(), true)));
}

#[test]
fn options_change_applies_to_new_admissions() {
    let m = dual_socket_ht();
    let smt = json!({"reserved_cpus": "0", "options": {"full-pcpus-only": "true", "strict-cpu-reservation": "true"}});
    let (mut p, report) = restored(&m, smt.clone(), &saved(&m, reserved("0"), &[]));
    assert_eq!(report, Restored::default());
    assert_eq!(check(&mut p, &m), "1-11");

    // b's 3 CPUs are not whole cores: kept as they are.
    let (mut p, report) = restored(&m, smt, &saved(&m, reserved("0"), &[("b", 3, 1)]));
    assert_eq!(report, Restored::default());
    assert_eq!(
        alloc(&mut p, &pod("b", 3), &[1]),
        Ok(("1,3,7".into(), true))
    );
    assert_eq!(
        alloc(&mut p, &pod("c", 3), &[1]),
        Err(
            "SMTAlignmentError: SMT alignment: request of 3 CPUs is not a multiple of 2 threads \
             per core"
                .into()
        )
    );
    assert_eq!(alloc(&mut p, &pod("c", 2), &[1]), Ok(("5,11".into(), true)));
    // strict-cpu-reservation: CPU 0 left the shared pool.
    assert_eq!(check(&mut p, &m), "2,4,6,8-10");
}

#[test]
fn a_numa_node_appears() {
    let before = testkit::machine(2, 4);
    let now = testkit::machine(3, 4);
    let (mut p, report) = restored(&now, reserved("0"), &saved(&before, reserved("0"), &[]));
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut p), [(0, 4, 3, 3), (1, 4, 4, 4), (2, 4, 4, 4)]);

    let pods = [("a", 2, 0), ("b", 4, 1)];
    let (mut p, report) = restored(&now, reserved("0"), &saved(&before, reserved("0"), &pods));
    assert_eq!(report, Restored::default());
    assert_eq!(zones(&mut p), [(0, 4, 3, 1), (1, 4, 4, 0), (2, 4, 4, 4)]);
    assert_eq!(alloc(&mut p, &pod("c", 4), &[2]), Ok(("8-11".into(), true)));
    assert_eq!(check(&mut p, &now), "0,3");
}

#[test]
fn held_cpus_the_machine_does_not_have_are_conflicts() {
    let before = testkit::machine(2, 4);
    let now = testkit::machine(1, 4);
    let (mut p, report) = restored(
        &now,
        reserved("0"),
        &saved(&before, reserved("0"), &[("a", 2, 0), ("b", 2, 1)]),
    );
    assert_eq!(
        report.report.conflicts,
        [conflict("b-uid", "4-5", "this machine has no CPUs 4-5")]
    );
    assert_eq!(zones(&mut p), [(0, 4, 3, 1)]);
    assert_eq!(alloc(&mut p, &pod("c", 1), &[0]), Ok(("3".into(), true)));
    assert_eq!(check(&mut p, &now), "0");
}

#[test]
fn a_cpu_saved_for_two_pods_stays_with_the_first_claim() {
    let m = dual_socket_ht();
    let bytes = br#"{"policy_name":"static","default_cpu_set":"0,2-6,8-11","entries":{"a-uid":{"app":"1,7"},"b-uid":{"app":"7,9"}},"cpus_to_reuse":{}}"#;
    let mut p = testkit::load::<CpuManager>(&m, reserved("0")).unwrap();
    assert_eq!(
        p.restore(bytes).unwrap(),
        Reconciled::new().with_conflict(conflict(
            "b-uid",
            "7",
            "CPU 7 is also held by pod a-uid, which claimed it first in the saved state"
        ))
    );
    // a runs on 1,7; b on 9 alone; nobody else gets 1, 7 or 9.
    assert_eq!(alloc(&mut p, &pod("a", 2), &[1]), Ok(("1,7".into(), true)));
    assert_eq!(alloc(&mut p, &pod("b", 2), &[1]), Ok(("9".into(), true)));
    assert_eq!(zones(&mut p), [(0, 6, 5, 5), (1, 6, 6, 3)]);
    let be = best_effort();
    let shared = p
        .allocate(&be, &be.containers[0], &TopologyHint::ANY)
        .unwrap();
    assert_eq!(shared.cpus.to_string(), "0,2-6,8,10-11");
    // A claim that keeps nothing cannot run; what resolves it is said.
    let mut c = testkit::load::<CpuManager>(&m, reserved("0")).unwrap();
    c.restore(br#"{"policy_name":"static","default_cpu_set":"","entries":{"a-uid":{"app":"1,7"},"c-uid":{"app":"1"}},"cpus_to_reuse":{}}"#)
        .unwrap();
    assert_eq!(
        alloc(&mut c, &pod("c", 1), &[1]),
        Err(
            "UnexpectedAdmissionError: container \"app\" of pod c-uid holds CPUs 1 and can run \
             on none of them now: CPU 1 is claimed first by pod a-uid; release this pod, or \
             release pod a-uid"
                .into()
        )
    );
    // a released: CPU 7 is b's alone now; b released: all free.
    p.release("a-uid", "app").unwrap();
    assert_eq!(zones(&mut p), [(0, 6, 5, 5), (1, 6, 6, 4)]);
    assert_eq!(check(&mut p, &m), "0-6,8,10-11");
    let (mut q, out) = restored(&m, reserved("0"), &p.checkpoint().unwrap());
    assert_eq!(out, Restored::default());
    assert_eq!(alloc(&mut q, &pod("b", 2), &[1]), Ok(("7,9".into(), true)));
    q.release("b-uid", "app").unwrap();
    assert_eq!(zones(&mut q), [(0, 6, 5, 5), (1, 6, 6, 6)]);
}
