//! Provider-level tests: the static policy through the SDK's `Provider` trait.

use serde_json::json;
use topomgr_sdk::{testkit, ContainerView, NumaMask, PodView, Provider, QosClass, TopologyHint};

use crate::testmachines::{dual_socket_ht, dual_socket_multi_numa_ht};
use crate::CpuManager;

fn provider(machine: &topomgr_sdk::Machine, config: serde_json::Value) -> CpuManager {
    match testkit::new_provider::<CpuManager>(machine, config) {
        Ok(p) => p,
        Err(e) => panic!("provider: {e}"),
    }
}

fn config_error(machine: &topomgr_sdk::Machine, config: serde_json::Value) -> String {
    match testkit::new_provider::<CpuManager>(machine, config) {
        Ok(_) => panic!("config accepted"),
        Err(e) => e.to_string(),
    }
}

fn cpus(n: u64) -> Vec<(&'static str, u64)> {
    vec![("cpu", n * 1000), ("memory", 1 << 30)]
}

fn pod(name: &str, qos: QosClass, init: Vec<ContainerView>, apps: Vec<ContainerView>) -> PodView {
    PodView::new(format!("{name}-uid"), name, "default", qos)
        .with_init_containers(init)
        .with_containers(apps)
}

fn hint(nodes: &[u32]) -> TopologyHint {
    TopologyHint::new(NumaMask::from_nodes(nodes.iter().copied()).unwrap(), true)
}

fn alloc(
    p: &mut CpuManager,
    pod: &PodView,
    container: &str,
    nodes: Option<&[u32]>,
) -> Result<(String, bool), String> {
    let c = pod.container(container).unwrap().clone();
    let h = match nodes {
        Some(n) => hint(n),
        None => TopologyHint {
            affinity: None,
            preferred: true,
        },
    };
    p.allocate(pod, &c, &h)
        .map(|a| {
            assert!(a.mems.is_empty(), "the CPU provider sets no mems");
            (a.cpus.to_string(), a.exclusive)
        })
        .map_err(|e| e.to_string())
}

fn hints(p: &mut CpuManager, pod: &PodView, container: &str) -> Option<Vec<String>> {
    let c = pod.container(container).unwrap().clone();
    let h = p.topology_hints(pod, &c).unwrap();
    testkit::hint_strings(&h, "cpu", &[0, 1])
}

#[test]
fn exclusive_cpus_follow_the_hint_and_skip_reserved() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({"reserved_cpus": "0"}));
    let g = testkit::guaranteed_pod("g", &cpus(2));
    assert_eq!(
        hints(&mut p, &g, "app"),
        Some(vec!["0:true".into(), "1:true".into(), "0-1:false".into()])
    );
    // Node 0 without reserved CPU 0: core 0 is half reserved, core 2 is whole.
    assert_eq!(
        alloc(&mut p, &g, "app", Some(&[0])),
        Ok(("2,8".into(), true))
    );
    let shared = testkit::guaranteed_pod("s", &[("cpu", 1500), ("memory", 1 << 30)]);
    assert_eq!(hints(&mut p, &shared, "app"), None);
    assert_eq!(
        alloc(&mut p, &shared, "app", None),
        Ok(("0-1,3-7,9-11".into(), false))
    );
    let g2 = testkit::guaranteed_pod("g2", &cpus(3));
    assert_eq!(
        alloc(&mut p, &g2, "app", Some(&[1])),
        Ok(("1,3,7".into(), true))
    );
    // Allocating again returns the same CPUs.
    assert_eq!(
        alloc(&mut p, &g2, "app", Some(&[0])),
        Ok(("1,3,7".into(), true))
    );
}

#[test]
fn burstable_and_besteffort_share_the_pool() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({}));
    let b = pod(
        "b",
        QosClass::Burstable,
        vec![],
        vec![testkit::container("web", &cpus(2))],
    );
    assert_eq!(hints(&mut p, &b, "web"), None);
    assert_eq!(p.pod_topology_hints(&b).unwrap(), None);
    assert_eq!(
        alloc(&mut p, &b, "web", Some(&[0])),
        Ok(("0-11".into(), false))
    );
}

#[test]
fn not_enough_cpus_and_smt_errors_say_what_to_do() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({}));
    let big = testkit::guaranteed_pod("big", &cpus(6));
    assert_eq!(
        alloc(&mut p, &big, "app", Some(&[0])),
        Ok(("0,2,4,6,8,10".into(), true))
    );
    let eight = testkit::guaranteed_pod("eight", &cpus(8));
    assert_eq!(hints(&mut p, &eight, "app"), Some(vec![]));
    let c = eight.containers[0].clone();
    let err = p.allocate(&eight, &c, &hint(&[0, 1])).unwrap_err();
    assert_eq!(err.reason, "UnexpectedAdmissionError");
    assert_eq!(
        err.message,
        "not enough free CPUs: requested 8, 6 free on NUMA node 1"
    );

    let mut strict = provider(&m, json!({"options": {"full-pcpus-only": "true"}}));
    let three = testkit::guaranteed_pod("three", &cpus(3));
    let c = three.containers[0].clone();
    let err = strict.allocate(&three, &c, &hint(&[0])).unwrap_err();
    assert_eq!(err.reason, "SMTAlignmentError");
    assert_eq!(
        err.message,
        "SMT alignment: request of 3 CPUs is not a multiple of 2 threads per core"
    );
    // Reserved CPU 0 takes its whole core (0 and 6) out of full-core use.
    let mut r = provider(
        &m,
        json!({"reserved_cpus": "0", "options": {"full-pcpus-only": "true"}}),
    );
    let twelve = testkit::guaranteed_pod("twelve", &cpus(12));
    let c = twelve.containers[0].clone();
    let err = r.allocate(&twelve, &c, &hint(&[0, 1])).unwrap_err();
    assert_eq!(
        err.message,
        "SMT alignment: request of 12 CPUs needs whole cores, but only 10 free CPUs lie outside \
         the cores of the reserved CPUs (2 threads per core)"
    );
    let four = testkit::guaranteed_pod("four", &cpus(4));
    assert_eq!(
        alloc(&mut r, &four, "app", Some(&[0])),
        Ok(("2,4,8,10".into(), true))
    );
}

#[test]
fn init_container_cpus_are_reused_by_app_containers() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({}));
    let pd = pod(
        "p",
        QosClass::Guaranteed,
        vec![testkit::container("init", &cpus(4))],
        vec![
            testkit::container("app", &cpus(4)),
            testkit::container("side", &cpus(2)),
        ],
    );
    assert_eq!(
        alloc(&mut p, &pd, "init", Some(&[1])),
        Ok(("1,3,7,9".into(), true))
    );
    // The init container's CPUs are reusable: they pin the app's hints to node 1.
    assert_eq!(
        hints(&mut p, &pd, "app"),
        Some(vec!["1:true".into(), "0-1:false".into()])
    );
    assert_eq!(
        alloc(&mut p, &pd, "app", Some(&[1])),
        Ok(("1,3,7,9".into(), true))
    );
    // Reused CPUs are no longer reusable for the next app container.
    assert_eq!(
        alloc(&mut p, &pd, "side", Some(&[1])),
        Ok(("5,11".into(), true))
    );
    // Releasing the init container keeps CPUs the app still uses.
    p.release("p-uid", "init").unwrap();
    let shared = testkit::guaranteed_pod("s", &[("cpu", 500)]);
    assert_eq!(
        alloc(&mut p, &shared, "app", None),
        Ok(("0,2,4,6,8,10".into(), false))
    );
    p.release("p-uid", "app").unwrap();
    assert_eq!(
        alloc(&mut p, &shared, "app", None),
        Ok(("0-4,6-10".into(), false))
    );
}

#[test]
fn sidecar_cpus_are_not_reused() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({}));
    let mut side = testkit::container("side", &cpus(2));
    side.sidecar = true;
    let pd = pod(
        "p",
        QosClass::Guaranteed,
        vec![side],
        vec![testkit::container("app", &cpus(2))],
    );
    assert_eq!(
        alloc(&mut p, &pd, "side", Some(&[0])),
        Ok(("0,6".into(), true))
    );
    assert_eq!(
        alloc(&mut p, &pd, "app", Some(&[0])),
        Ok(("2,8".into(), true))
    );
}

#[test]
fn pod_scope_hints_count_sidecars_and_regenerate() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({}));
    let mut side = testkit::container("side", &cpus(2));
    side.sidecar = true;
    let pd = pod(
        "p",
        QosClass::Guaranteed,
        vec![side, testkit::container("init", &cpus(5))],
        vec![testkit::container("app", &cpus(3))],
    );
    // max(2 + 5, 3 + 2) = 7: more than one node.
    let h = p.pod_topology_hints(&pd).unwrap();
    testkit::assert_hints(&h, "cpu", &[0, 1], Some(&["0-1:true"]));
    let small = pod(
        "q",
        QosClass::Guaranteed,
        vec![],
        vec![
            testkit::container("a", &cpus(2)),
            testkit::container("b", &cpus(2)),
        ],
    );
    assert_eq!(
        alloc(&mut p, &small, "a", Some(&[1])),
        Ok(("1,7".into(), true))
    );
    assert_eq!(
        alloc(&mut p, &small, "b", Some(&[1])),
        Ok(("3,9".into(), true))
    );
    // Everything allocated: hints come from the assigned CPUs only.
    let h = p.pod_topology_hints(&small).unwrap();
    testkit::assert_hints(&h, "cpu", &[0, 1], Some(&["1:true", "0-1:false"]));
    // Container scope regenerates from the container's own CPUs.
    assert_eq!(
        hints(&mut p, &small, "a"),
        Some(vec!["1:true".into(), "0-1:false".into()])
    );
    // A changed request no longer matches the assignment: no hint.
    let mut grown = small.clone();
    grown.containers[0].requests.insert("cpu".into(), 3000);
    assert_eq!(hints(&mut p, &grown, "a"), Some(vec![]));
    testkit::assert_hints(
        &p.pod_topology_hints(&grown).unwrap(),
        "cpu",
        &[0, 1],
        Some(&[]),
    );
}

#[test]
fn hybrid_machine_never_hands_out_the_reserved_cpu() {
    // kubernetes #140495: i7-14700-like, 8 two-thread P-cores and 12
    // one-thread E-cores, `--reserved-cpus=0`, a Guaranteed pod of 2 CPUs.
    let m = crate::testmachines::hybrid(8, 12);
    for options in [
        json!({}),
        json!({"distribute-cpus-across-numa": "true"}),
        json!({"prefer-align-cpus-by-uncorecache": "true"}),
    ] {
        let mut p = provider(&m, json!({"reserved_cpus": "0", "options": options}));
        let g = testkit::guaranteed_pod("g", &cpus(2));
        assert_eq!(
            alloc(&mut p, &g, "app", Some(&[0])),
            Ok(("16-17".into(), true)),
            "options {options}"
        );
        // Fill the machine one pod at a time: CPU 0 is never handed out.
        let mut held = topomgr_sdk::CpuSet::parse("16-17").unwrap();
        for i in 0..25 {
            let pod = testkit::guaranteed_pod(&format!("p{i}"), &cpus(1));
            let (got, exclusive) = alloc(&mut p, &pod, "app", None).unwrap();
            assert!(exclusive);
            let got = topomgr_sdk::CpuSet::parse(&got).unwrap();
            assert!(
                !got.contains(0),
                "pod {i} got the reserved CPU 0 ({options})"
            );
            assert!(
                got.iter().all(|c| !held.contains(c)),
                "pod {i} got a held CPU"
            );
            held = held.iter().chain(got.iter()).collect();
        }
        let last = testkit::guaranteed_pod("last", &cpus(1));
        assert!(alloc(&mut p, &last, "app", None).is_err());
    }
}

#[test]
fn align_by_socket_takes_from_the_whole_socket() {
    let m = dual_socket_multi_numa_ht();
    let mut p = provider(&m, json!({"options": {"align-by-socket": "true"}}));
    let first = testkit::guaranteed_pod("f", &cpus(18));
    assert_eq!(
        alloc(&mut p, &first, "app", Some(&[0])),
        Ok(("0-8,40-48".into(), true))
    );
    // Node 0 has 2 free CPUs; the hint (node 0) widens to socket 0 (nodes 0-1).
    let g = testkit::guaranteed_pod("g", &cpus(4));
    assert_eq!(
        alloc(&mut p, &g, "app", Some(&[0])),
        Ok(("9-10,49-50".into(), true))
    );
}

#[test]
fn strict_reservation_keeps_reserved_cpus_out_of_the_pool() {
    let m = dual_socket_ht();
    let mut p = provider(
        &m,
        json!({"reserved_cpus": "0,6", "options": {"strict-cpu-reservation": "true"}}),
    );
    let shared = testkit::guaranteed_pod("s", &[("cpu", 500)]);
    assert_eq!(
        alloc(&mut p, &shared, "app", None),
        Ok(("1-5,7-11".into(), false))
    );
}

#[test]
fn distribute_across_numa_splits_evenly() {
    let m = dual_socket_multi_numa_ht();
    let mut p = provider(
        &m,
        json!({"options": {"distribute-cpus-across-numa": "true"}}),
    );
    let g = testkit::guaranteed_pod("g", &cpus(24));
    assert_eq!(
        alloc(&mut p, &g, "app", Some(&[0, 1])),
        Ok(("0-5,10-15,40-45,50-55".into(), true))
    );
}

#[test]
fn none_policy_has_no_hints_and_shares_everything() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({"policy": "none"}));
    let g = testkit::guaranteed_pod("g", &cpus(2));
    assert_eq!(p.topology_hints(&g, &g.containers[0]).unwrap(), None);
    assert_eq!(p.pod_topology_hints(&g).unwrap(), None);
    assert_eq!(
        alloc(&mut p, &g, "app", Some(&[0])),
        Ok(("0-11".into(), false))
    );
    assert_eq!(
        String::from_utf8(p.checkpoint().unwrap()).unwrap(),
        r#"{"policy_name":"none","default_cpu_set":"","entries":{},"cpus_to_reuse":{}}"#
    );
}

#[test]
fn config_errors_name_the_key() {
    let m = dual_socket_ht();
    assert_eq!(
        config_error(&m, json!({"policy": "dynamic"})),
        "InvalidConfig: cpu provider config: policy = \"dynamic\" is unknown; use \"static\" or \"none\""
    );
    assert_eq!(
        config_error(&m, json!({"reserved": "0"})),
        "InvalidConfig: cpu provider config: unknown field `reserved`, expected one of `policy`, `reserved_cpus`, `options`, `feature_gates`"
    );
    assert_eq!(
        config_error(&m, json!({"reserved_cpus": "12-13"})),
        "InvalidConfig: cpu provider config: reserved_cpus = \"12-13\" names CPUs 12-13 that this machine does not have (its CPUs: 0-11); remove them from reserved_cpus"
    );
    assert!(config_error(&m, json!({"reserved_cpus": "x"})).starts_with(
        "InvalidConfig: cpu provider config: reserved_cpus = \"x\" is not a Linux CPU list like \"0,64\""
    ));
    assert_eq!(
        config_error(&m, json!({"policy": "none", "options": {"full-pcpus-only": "true"}})),
        "InvalidConfig: cpu provider config: None policy: received unsupported options=full-pcpus-only; options apply to policy \"static\" only"
    );
    assert_eq!(
        config_error(&m, json!({"options": {"full-pcpus-only": "true", "distribute-cpus-across-cores": "true"}})),
        "InvalidConfig: cpu provider config: static policy options full-pcpus-only and distribute-cpus-across-cores can not be used at the same time"
    );
}

#[test]
fn checkpoint_round_trip_and_validation() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({"reserved_cpus": "0"}));
    let pd = pod(
        "p",
        QosClass::Guaranteed,
        vec![testkit::container("init", &cpus(2))],
        vec![testkit::container("app", &cpus(2))],
    );
    alloc(&mut p, &pd, "init", Some(&[1])).unwrap();
    let cp = p.checkpoint().unwrap();
    assert_eq!(
        String::from_utf8(cp.clone()).unwrap(),
        r#"{"policy_name":"static","default_cpu_set":"0,2-6,8-11","entries":{"p-uid":{"init":"1,7"}},"cpus_to_reuse":{"p-uid":"1,7"}}"#
    );
    let mut q = provider(&m, json!({"reserved_cpus": "0"}));
    q.restore(&cp).unwrap();
    assert_eq!(
        alloc(&mut q, &pd, "app", Some(&[1])),
        Ok(("1,7".into(), true))
    );

    // Bytes that are not a checkpoint are the one refusal; nothing changes.
    let before = q.checkpoint().unwrap();
    let err = q.restore(b"{\"policy_name\": 1}").unwrap_err();
    assert_eq!(err.reason, "InvalidCheckpoint");
    assert_eq!(
        err.message,
        "cpu provider checkpoint: the saved state is not a checkpoint of this CPU provider \
         (invalid type: integer `1`, expected a string at line 1 column 17); only the provider \
         that wrote it (another library or version configured under this name) reads it"
    );
    assert_eq!(q.checkpoint().unwrap(), before);
}

#[test]
fn works_through_the_plugin_boundary() {
    let m = dual_socket_ht();
    let p = provider(&m, json!({}));
    let mut h = testkit::through_boundary(p);
    let g = testkit::guaranteed_pod("g", &cpus(2));
    let hints = h.topology_hints(&g, &g.containers[0]).unwrap();
    testkit::assert_hints(
        &hints,
        "cpu",
        &[0, 1],
        Some(&["0:true", "1:true", "0-1:false"]),
    );
    let a = h.allocate(&g, &g.containers[0], &hint(&[1])).unwrap();
    assert_eq!(a.cpus.to_string(), "1,7");
    assert!(a.exclusive);
}

/// Per zone `(node, capacity, allocatable, available)` of the `cpu`
/// inventory, in CPUs; `node` -1 for "no NUMA node".
pub(crate) fn cpu_zones(inv: &topomgr_sdk::Inventory) -> Vec<(i64, u64, u64, u64)> {
    let r = &inv.resources["cpu"];
    let zones: Vec<(i64, u64, u64, u64)> = r
        .zones
        .iter()
        .map(|z| {
            let a = z.amounts;
            assert!(a.capacity % 1000 == 0 && a.allocatable % 1000 == 0 && a.available % 1000 == 0);
            let node = z.numa.map_or(-1, |n| i64::from(n.get()));
            (
                node,
                a.capacity / 1000,
                a.allocatable / 1000,
                a.available / 1000,
            )
        })
        .collect();
    let sum = |f: fn(&(i64, u64, u64, u64)) -> u64| zones.iter().map(f).sum::<u64>() * 1000;
    assert_eq!(
        (r.total.capacity, r.total.allocatable, r.total.available),
        (sum(|z| z.1), sum(|z| z.2), sum(|z| z.3)),
        "the totals are the zones' sums"
    );
    zones
}

#[test]
fn inventory_counts_reserved_and_exclusive_cpus_per_node() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({"reserved_cpus": "0,1"}));
    // 6 CPUs per node; CPU 0 is on node 0, CPU 1 on node 1.
    assert_eq!(
        cpu_zones(&p.inventory().unwrap()),
        [(0, 6, 5, 5), (1, 6, 5, 5)]
    );
    // The allocatable CPUs one by one, each on its node: reserved ones left out.
    let units: Vec<(String, Vec<u32>)> = p.inventory().unwrap().resources["cpu"]
        .units
        .iter()
        .map(|u| (u.id.clone(), u.numa.iter().map(|n| n.get()).collect()))
        .collect();
    let expected: Vec<(String, Vec<u32>)> = (2..12)
        .map(|cpu: u32| (cpu.to_string(), vec![cpu % 2]))
        .collect();
    assert_eq!(units, expected);
    let a = testkit::guaranteed_pod("a", &cpus(4));
    assert_eq!(
        alloc(&mut p, &a, "app", Some(&[0])),
        Ok(("2,4,8,10".into(), true))
    );
    let pd = pod(
        "p",
        QosClass::Guaranteed,
        vec![testkit::container("init", &cpus(2))],
        vec![testkit::container("app", &cpus(3))],
    );
    assert_eq!(
        alloc(&mut p, &pd, "init", Some(&[1])),
        Ok(("3,9".into(), true))
    );
    // The app container reuses the init container's CPUs: 3 CPUs held.
    assert_eq!(
        alloc(&mut p, &pd, "app", Some(&[1])),
        Ok(("3,7,9".into(), true))
    );
    // Shared-pool containers are not counted.
    let shared = testkit::guaranteed_pod("s", &[("cpu", 1500), ("memory", 1 << 30)]);
    alloc(&mut p, &shared, "app", None).unwrap();
    assert_eq!(
        cpu_zones(&p.inventory().unwrap()),
        [(0, 6, 5, 1), (1, 6, 5, 2)]
    );
    // Checkpoint and restore: the same numbers.
    let mut q = provider(&m, json!({"reserved_cpus": "0,1"}));
    q.restore(&p.checkpoint().unwrap()).unwrap();
    assert_eq!(
        cpu_zones(&q.inventory().unwrap()),
        [(0, 6, 5, 1), (1, 6, 5, 2)]
    );
    // The init container's CPUs stay held while the app container holds them.
    p.release("p-uid", "init").unwrap();
    assert_eq!(
        cpu_zones(&p.inventory().unwrap()),
        [(0, 6, 5, 1), (1, 6, 5, 2)]
    );
    p.release("p-uid", "app").unwrap();
    assert_eq!(
        cpu_zones(&p.inventory().unwrap()),
        [(0, 6, 5, 1), (1, 6, 5, 5)]
    );
    p.release("a-uid", "app").unwrap();
    assert_eq!(
        cpu_zones(&p.inventory().unwrap()),
        [(0, 6, 5, 5), (1, 6, 5, 5)]
    );
}

#[test]
fn inventory_of_cpu_less_nodes_unplaced_cpus_and_the_none_policy() {
    // Node 2 has no CPUs; CPU 8 is online but in no node.
    let mut m = testkit::machine(3, 4);
    m.cpus.retain(|c| c.numa.is_none_or(|n| n.get() != 2));
    m.numa_nodes[2].cpus = topomgr_sdk::CpuSet::new();
    m.cpus
        .push(topomgr_sdk::Cpu::new(8, None).with_socket(0).with_core(8));
    let mut p = provider(&m, json!({"reserved_cpus": "0"}));
    assert_eq!(
        cpu_zones(&p.inventory().unwrap()),
        [(0, 4, 3, 3), (1, 4, 4, 4), (2, 0, 0, 0), (-1, 1, 0, 0)]
    );
    let g = testkit::guaranteed_pod("g", &cpus(2));
    alloc(&mut p, &g, "app", Some(&[1])).unwrap();
    assert_eq!(
        cpu_zones(&p.inventory().unwrap()),
        [(0, 4, 3, 3), (1, 4, 4, 2), (2, 0, 0, 0), (-1, 1, 0, 0)]
    );
    let none = provider(&m, json!({"policy": "none"}));
    assert_eq!(
        cpu_zones(&none.inventory().unwrap()),
        [(0, 4, 0, 0), (1, 4, 0, 0), (2, 0, 0, 0), (-1, 1, 0, 0)]
    );
}

/// A Guaranteed pod with pod-level resources: `cpu` request = limit `pod_cpu`
/// (whole CPUs) and 1Gi of memory; containers `(name, cpu CPUs or 0,
/// sidecar)` with 100Mi of memory each, `cpu` request = limit when set.
fn pod_level_pod(
    uid: &str,
    pod_cpu: u64,
    init: &[(&str, u64, bool)],
    apps: &[(&str, u64)],
) -> PodView {
    use topomgr_sdk::PodResources;
    let c = |name: &str, cpu: u64, sidecar: bool| {
        let mut r = vec![("memory", 100 << 20)];
        if cpu > 0 {
            r.push(("cpu", cpu * 1000));
        }
        testkit::container(name, &r).with_sidecar(sidecar)
    };
    let level = testkit::resources(&[("cpu", pod_cpu * 1000), ("memory", 1 << 30)]);
    PodView::new(uid, uid, "default", QosClass::Guaranteed)
        .with_init_containers(init.iter().map(|(n, cpu, s)| c(n, *cpu, *s)).collect())
        .with_containers(apps.iter().map(|(n, cpu)| c(n, *cpu, false)).collect())
        .with_resources(Some(PodResources::new(level.clone(), level)))
}

#[test]
fn pod_level_resources_with_the_gate_off_get_the_shared_pool() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({"reserved_cpus": "0"}));
    let pod = pod_level_pod("pl", 4, &[], &[("gu", 2), ("shared", 0)]);
    // Container scope and pod scope: no hints (no map), as the kubelet
    // with PodLevelResourceManagers off.
    assert_eq!(p.topology_hints(&pod, &pod.containers[0]).unwrap(), None);
    assert_eq!(p.pod_topology_hints(&pod).unwrap(), None);
    for c in ["gu", "shared"] {
        assert_eq!(
            alloc(&mut p, &pod, c, Some(&[0])),
            Ok(("0-11".into(), false))
        );
    }
    assert_eq!(
        String::from_utf8(p.checkpoint().unwrap()).unwrap(),
        r#"{"policy_name":"static","default_cpu_set":"0-11","entries":{},"cpus_to_reuse":{}}"#
    );
}

#[test]
fn pod_level_resources_in_pod_scope_share_one_pod_set() {
    let m = dual_socket_ht();
    let cfg = json!({"reserved_cpus": "0", "feature_gates": {"PodLevelResourceManagers": true}});
    let mut p = provider(&m, cfg.clone());
    let pod = pod_level_pod("pl", 3, &[("side", 1, true)], &[("gu", 1), ("shared", 0)]);
    assert_eq!(
        testkit::hint_strings(&p.pod_topology_hints(&pod).unwrap(), "cpu", &[0, 1]),
        Some(vec!["0:true".into(), "1:true".into(), "0-1:false".into()])
    );
    // The pod's set: 3 CPUs on node 0 (2,6,8); the sidecar and the
    // exclusive app container take one each, the shared container the rest.
    assert_eq!(
        alloc(&mut p, &pod, "side", Some(&[0])),
        Ok(("6".into(), true))
    );
    assert_eq!(
        alloc(&mut p, &pod, "gu", Some(&[0])),
        Ok(("2".into(), true))
    );
    assert_eq!(
        alloc(&mut p, &pod, "shared", Some(&[0])),
        Ok(("8".into(), true))
    );
    let other = testkit::guaranteed_pod("o", &cpus(1));
    assert_eq!(alloc(&mut p, &other, "app", None), Ok(("4".into(), true)));
    let cp = p.checkpoint().unwrap();
    assert_eq!(
        String::from_utf8(cp.clone()).unwrap(),
        r#"{"policy_name":"static","default_cpu_set":"0-1,3,5,7,9-11","entries":{"o-uid":{"app":"4"},"pl":{"gu":"2","shared":"8","side":"6"}},"cpus_to_reuse":{"o-uid":""},"pod_entries":{"pl":"2,6,8"}}"#
    );
    // Restore: the same state. Without the gate the pod keeps its set
    // until released (a note, not a conflict); new pods get none.
    let mut q = provider(&m, cfg);
    q.restore(&cp).unwrap();
    assert_eq!(q.checkpoint().unwrap(), cp);
    let mut off = provider(&m, json!({"reserved_cpus": "0"}));
    let out = off.reconcile(&cp).unwrap();
    assert!(out.report.is_empty());
    assert_eq!(
        out.notes,
        ["pods pl hold pod-level CPU sets although the PodLevelResourceManagers feature gate is \
          off now; they keep them until released, new pods get none"]
    );
    assert_eq!(off.checkpoint().unwrap(), cp);
    for c in ["side", "gu", "shared"] {
        off.release("pl", c).unwrap();
    }
    // Only pod o's CPU 4 is held now.
    assert_eq!(
        cpu_zones(&off.inventory().unwrap()),
        [(0, 6, 5, 4), (1, 6, 6, 6)]
    );
    // The pod's CPUs go back with its last container.
    p.release("pl", "side").unwrap();
    p.release("pl", "gu").unwrap();
    assert_eq!(
        cpu_zones(&p.inventory().unwrap()),
        [(0, 6, 5, 1), (1, 6, 6, 6)]
    );
    p.release("pl", "shared").unwrap();
    assert_eq!(
        cpu_zones(&p.inventory().unwrap()),
        [(0, 6, 5, 4), (1, 6, 6, 6)]
    );
}

#[test]
fn pod_level_resources_in_container_scope_and_an_empty_pod_pool() {
    let m = dual_socket_ht();
    let cfg = json!({"feature_gates": {"PodLevelResourceManagers": true}});
    let mut p = provider(&m, cfg);
    let pod = pod_level_pod("pl", 2, &[], &[("gu", 2), ("shared", 0)]);
    // Pod scope: the exclusive container takes the whole budget, so the
    // shared one would have no CPU: no hint, and allocation is refused.
    assert_eq!(
        testkit::hint_strings(&p.pod_topology_hints(&pod).unwrap(), "cpu", &[0, 1]),
        Some(vec![])
    );
    let err = p
        .allocate(&pod, &pod.containers[0], &hint(&[0]))
        .unwrap_err();
    assert_eq!(err.reason, "EmptyPodSharedPoolError");
    assert_eq!(
        err.message,
        "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus \
         for shared containers"
    );
    // Container scope: the eligible container gets its own CPUs, the
    // other one the node's shared pool.
    assert_eq!(
        hints(&mut p, &pod, "gu"),
        Some(vec!["0:true".into(), "1:true".into(), "0-1:false".into()])
    );
    assert_eq!(
        alloc(&mut p, &pod, "gu", Some(&[1])),
        Ok(("1,7".into(), true))
    );
    assert_eq!(hints(&mut p, &pod, "shared"), None);
    assert_eq!(
        alloc(&mut p, &pod, "shared", None),
        Ok(("0,2-6,8-11".into(), false))
    );
    // A container with CPUs but unequal memory request and limit is not
    // eligible.
    let mut odd = pod_level_pod("odd", 2, &[], &[("c", 1)]);
    odd.containers[0].limits.insert("memory".into(), 200 << 20);
    assert_eq!(hints(&mut p, &odd, "c"), None);
}

/// CPUs the host excludes (containers pinned there by others) are never
/// hinted or handed out exclusively, stay in the shared pool, and come
/// back when the host excludes them no more.
#[test]
fn excluded_cpus_are_not_handed_out_exclusively() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({"reserved_cpus": "0"}));
    let excluded = topomgr_sdk::CpuSet::parse("2,4,8,10").unwrap();
    assert_eq!(p.exclude_cpus(&excluded), Ok(true));
    let g = testkit::guaranteed_pod("g", &cpus(2));
    // Node 0 has CPU 6 left: two CPUs fit only on node 1.
    assert_eq!(
        hints(&mut p, &g, "app"),
        Some(vec!["1:true".into(), "0-1:false".into()])
    );
    assert_eq!(
        alloc(&mut p, &g, "app", Some(&[1])),
        Ok(("1,7".into(), true))
    );
    let shared = testkit::guaranteed_pod("s", &[("cpu", 1500), ("memory", 1 << 30)]);
    assert_eq!(
        alloc(&mut p, &shared, "app", None),
        Ok(("0,2-6,8-11".into(), false)),
        "excluded CPUs stay in the shared pool"
    );
    let node0 = |p: &CpuManager| {
        let inv = p.inventory().unwrap();
        inv.resources["cpu"]
            .zones
            .iter()
            .find(|z| z.numa.is_some_and(|n| n.get() == 0))
            .map(|z| z.amounts.available)
            .unwrap()
    };
    let with_exclusion = node0(&p);
    // No longer excluded: node 0 fits two CPUs again.
    assert_eq!(p.exclude_cpus(&topomgr_sdk::CpuSet::new()), Ok(true));
    // Free on node 0: CPU 6 alone, then 2, 4, 6, 8 and 10.
    assert_eq!(
        with_exclusion * 5,
        node0(&p),
        "the export's free amounts follow"
    );
    let g2 = testkit::guaranteed_pod("g2", &cpus(2));
    assert_eq!(
        hints(&mut p, &g2, "app"),
        Some(vec!["0:true".into(), "1:true".into(), "0-1:false".into()])
    );
    // The none policy hands out no CPUs: nothing to exclude.
    let mut none = provider(&m, json!({"policy": "none"}));
    assert_eq!(none.exclude_cpus(&excluded), Ok(false));
}

/// A resize of `container` of `pod` (carrying its new requests) on `nodes`.
fn resize(
    p: &mut CpuManager,
    pod: &PodView,
    container: &str,
    nodes: &[u32],
) -> Result<(String, bool), (String, String)> {
    let c = pod.container(container).unwrap().clone();
    match p.resize(pod, &c, &topomgr_sdk::Allocation::default(), &hint(nodes)) {
        Ok(Some(a)) => Ok((a.cpus.to_string(), a.exclusive)),
        Ok(None) => panic!("the CPU provider resizes"),
        Err(e) => Err((e.reason, e.message)),
    }
}

/// Free CPUs (millicores) the inventory shows on NUMA node `node`.
fn free_on(p: &CpuManager, node: u32) -> u64 {
    let inv = p.inventory().unwrap();
    inv.resources["cpu"]
        .zones
        .iter()
        .find(|z| z.numa.is_some_and(|n| n.get() == node))
        .map(|z| z.amounts.available)
        .unwrap()
}

/// KEP-5554: a grow keeps the CPUs held and adds free ones of the same
/// NUMA node (a free sibling of its own core first); the shared pool, the
/// inventory and later hints follow; a shrink gives back the extra CPUs,
/// never the original one.
#[test]
fn resize_grows_on_its_node_keeping_its_cpus_and_shrinks_to_them() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({"reserved_cpus": "0"}));
    let one = testkit::guaranteed_pod("g", &cpus(1));
    assert_eq!(
        alloc(&mut p, &one, "app", Some(&[1])),
        Ok(("1".into(), true))
    );
    let node1 = free_on(&p, 1);
    // Node 1 has 5 CPUs left: a pod of 5 fits on it.
    let five = testkit::guaranteed_pod("f", &cpus(5));
    assert_eq!(
        hints(&mut p, &five, "app"),
        Some(vec!["0:true".into(), "1:true".into(), "0-1:false".into()])
    );
    let two = testkit::guaranteed_pod("g", &cpus(2));
    assert_eq!(resize(&mut p, &two, "app", &[1]), Ok(("1,7".into(), true)));
    assert_eq!(free_on(&p, 1), node1 - 1000, "the inventory follows");
    let shared = testkit::guaranteed_pod("s", &[("cpu", 1500), ("memory", 1 << 30)]);
    assert_eq!(
        alloc(&mut p, &shared, "app", None),
        Ok(("0,2-6,8-11".into(), false)),
        "the shared pool lost CPU 7"
    );
    // Node 1 has 4 CPUs left: later hints follow.
    assert_eq!(
        hints(&mut p, &five, "app"),
        Some(vec!["0:true".into(), "0-1:false".into()])
    );
    // Growing again takes whole free cores of the node.
    let four = testkit::guaranteed_pod("g", &cpus(4));
    assert_eq!(
        resize(&mut p, &four, "app", &[1]),
        Ok(("1,3,7,9".into(), true))
    );
    // An unchanged CPU count (a memory-only resize) keeps them.
    assert_eq!(
        resize(&mut p, &four, "app", &[1]),
        Ok(("1,3,7,9".into(), true))
    );
    // Shrinking gives back the extra CPUs, never the original one.
    assert_eq!(resize(&mut p, &two, "app", &[1]), Ok(("1,7".into(), true)));
    assert_eq!(resize(&mut p, &one, "app", &[1]), Ok(("1".into(), true)));
    assert_eq!(free_on(&p, 1), node1, "every extra CPU is free again");
    assert_eq!(
        alloc(&mut p, &shared, "app", None),
        Ok(("0,2-11".into(), false)),
        "the shared pool has them back"
    );
    // Released, the container leaves no trace.
    p.release("g-uid", "app").unwrap();
    let cp: serde_json::Value = serde_json::from_slice(&p.checkpoint().unwrap()).unwrap();
    assert_eq!(cp.get("baseline_entries"), None);
}

/// A grow that does not fit on the container's nodes is refused with the
/// numbers, changing nothing; it never spills to another node.
#[test]
fn resize_that_does_not_fit_on_its_node_is_refused_with_numbers() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({"reserved_cpus": "0"}));
    let one = testkit::guaranteed_pod("g", &cpus(1));
    assert_eq!(
        alloc(&mut p, &one, "app", Some(&[1])),
        Ok(("1".into(), true))
    );
    let other = testkit::guaranteed_pod("o", &cpus(4));
    assert_eq!(
        alloc(&mut p, &other, "app", Some(&[1])),
        Ok(("3,5,9,11".into(), true))
    );
    let before = p.checkpoint().unwrap();
    let three = testkit::guaranteed_pod("g", &cpus(3));
    assert_eq!(
        resize(&mut p, &three, "app", &[1]),
        Err((
            "resizeAllocateCPUsError".into(),
            "container \"app\" of pod g-uid cannot grow from 1 to 3 CPUs: it needs 2 more on \
             NUMA node 1 (1 free there)"
                .into()
        ))
    );
    assert_eq!(p.checkpoint().unwrap(), before, "nothing changed");
    // Below the CPUs first allocated: refused.
    let two = testkit::guaranteed_pod("o", &cpus(2));
    assert_eq!(
        resize(&mut p, &two, "app", &[1]),
        Err((
            "prohibitedCPUAllocationError".into(),
            "container \"app\" of pod o-uid cannot shrink to 2 CPUs: it keeps the 4 CPUs it \
             was first allocated (3,5,9,11), as KEP-5554 proposes"
                .into()
        ))
    );
    assert_eq!(p.checkpoint().unwrap(), before, "nothing changed");
}

/// Moves between exclusive CPUs and the shared pool are refused (the
/// kubelet refuses them); a shared container that stays shared gets the
/// shared pool.
#[test]
fn resize_between_shared_and_exclusive_is_refused() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({"reserved_cpus": "0"}));
    let two = testkit::guaranteed_pod("g", &cpus(2));
    assert_eq!(
        alloc(&mut p, &two, "app", Some(&[0])),
        Ok(("2,8".into(), true))
    );
    let before = p.checkpoint().unwrap();
    let fractional = testkit::guaranteed_pod("g", &[("cpu", 1500), ("memory", 1 << 30)]);
    assert_eq!(
        resize(&mut p, &fractional, "app", &[0]),
        Err((
            "inconsistentCPUAllocationError".into(),
            "container \"app\" of pod g-uid holds 2 exclusive CPUs and cannot be resized to a \
             CPU request of 1500m: the static policy resizes exclusive CPUs only by whole CPUs \
             in a Guaranteed pod, as the kubelet"
                .into()
        ))
    );
    let mut burstable = two.clone();
    burstable.qos = QosClass::Burstable;
    let err = resize(&mut p, &burstable, "app", &[0]).unwrap_err();
    assert_eq!(err.0, "inconsistentCPUAllocationError");
    assert!(
        err.1.contains("cannot be resized to a Burstable pod"),
        "{}",
        err.1
    );
    assert_eq!(p.checkpoint().unwrap(), before, "nothing changed");
    let shared = testkit::guaranteed_pod("s", &[("cpu", 1500), ("memory", 1 << 30)]);
    assert_eq!(
        alloc(&mut p, &shared, "app", None),
        Ok(("0-1,3-7,9-11".into(), false))
    );
    let whole = testkit::guaranteed_pod("s", &cpus(2));
    assert_eq!(
        resize(&mut p, &whole, "app", &[0]),
        Err((
            "inconsistentCPUAllocationError".into(),
            "container \"app\" of pod s-uid runs in the shared pool and cannot be resized to 2 \
             exclusive CPUs: only admission gives exclusive CPUs (the kubelet refuses this \
             resize too); recreate the pod"
                .into()
        ))
    );
    let bigger = testkit::guaranteed_pod("s", &[("cpu", 2500), ("memory", 1 << 30)]);
    assert_eq!(
        resize(&mut p, &bigger, "app", &[0]),
        Ok(("0-1,3-7,9-11".into(), false))
    );
    assert_eq!(p.checkpoint().unwrap(), before, "nothing changed");
    // The none policy: shared stays shared.
    let mut none = provider(&m, json!({"policy": "none"}));
    assert_eq!(
        resize(&mut none, &bigger, "app", &[0]),
        Ok(("0-11".into(), false))
    );
}

/// full-pcpus-only: a grow by part of a core is refused, a grow by whole
/// cores takes a whole free core.
#[test]
fn resize_with_full_pcpus_only_takes_whole_cores() {
    let m = dual_socket_ht();
    let mut p = provider(
        &m,
        json!({"reserved_cpus": "0", "options": {"full-pcpus-only": "true"}}),
    );
    let two = testkit::guaranteed_pod("g", &cpus(2));
    assert_eq!(
        alloc(&mut p, &two, "app", Some(&[0])),
        Ok(("2,8".into(), true))
    );
    let three = testkit::guaranteed_pod("g", &cpus(3));
    assert_eq!(
        resize(&mut p, &three, "app", &[0]),
        Err((
            "SMTAlignmentError".into(),
            "SMT alignment: request of 3 CPUs is not a multiple of 2 threads per core".into()
        ))
    );
    // Node 0 has one whole free core (4,10); CPU 6 shares reserved CPU 0's core.
    let four = testkit::guaranteed_pod("g", &cpus(4));
    assert_eq!(
        resize(&mut p, &four, "app", &[0]),
        Ok(("2,4,8,10".into(), true))
    );
    let six = testkit::guaranteed_pod("g", &cpus(6));
    assert_eq!(
        resize(&mut p, &six, "app", &[0]),
        Err((
            "resizeAllocateCPUsError".into(),
            "container \"app\" of pod g-uid cannot grow from 4 to 6 CPUs: it needs 2 more on \
             NUMA node 0 (0 free there)"
                .into()
        ))
    );
    assert_eq!(resize(&mut p, &two, "app", &[0]), Ok(("2,8".into(), true)));
}

/// The CPUs first allocated survive a checkpoint and restore: after it, a
/// shrink still gives back only the extra CPUs.
#[test]
fn a_resized_container_keeps_its_first_cpus_through_checkpoint_and_restore() {
    let m = dual_socket_ht();
    let config = json!({"reserved_cpus": "0"});
    let mut p = provider(&m, config.clone());
    let one = testkit::guaranteed_pod("g", &cpus(1));
    assert_eq!(
        alloc(&mut p, &one, "app", Some(&[1])),
        Ok(("1".into(), true))
    );
    let three = testkit::guaranteed_pod("g", &cpus(3));
    assert_eq!(
        resize(&mut p, &three, "app", &[1]),
        Ok(("1,3,7".into(), true))
    );
    let saved = p.checkpoint().unwrap();
    let cp: serde_json::Value = serde_json::from_slice(&saved).unwrap();
    assert_eq!(cp["baseline_entries"], json!({"g-uid": {"app": "1"}}));
    let mut q = provider(&m, config);
    assert_eq!(q.restore(&saved), Ok(Default::default()));
    assert_eq!(q.checkpoint().unwrap(), saved);
    // Not the one it started with: 3 and 7 go back.
    assert_eq!(resize(&mut q, &one, "app", &[1]), Ok(("1".into(), true)));
    let shared = testkit::guaranteed_pod("s", &[("cpu", 1500), ("memory", 1 << 30)]);
    assert_eq!(
        alloc(&mut q, &shared, "app", None),
        Ok(("0,2-11".into(), false))
    );
}

/// A checkpoint of a provider before resize (no `baseline_entries`) still
/// restores; its containers' CPUs are their first ones.
#[test]
fn a_checkpoint_without_baselines_restores() {
    let m = dual_socket_ht();
    let mut p = provider(&m, json!({"reserved_cpus": "0"}));
    let old = json!({
        "policy_name": "static",
        "default_cpu_set": "0,2-4,6,8-10",
        "entries": {"g-uid": {"app": "5,11"}},
        "cpus_to_reuse": {"g-uid": ""}
    });
    assert_eq!(
        p.restore(old.to_string().as_bytes()),
        Ok(Default::default())
    );
    let four = testkit::guaranteed_pod("g", &cpus(4));
    assert_eq!(
        resize(&mut p, &four, "app", &[1]),
        Ok(("1,5,7,11".into(), true))
    );
    let one = testkit::guaranteed_pod("g", &cpus(1));
    assert_eq!(
        resize(&mut p, &one, "app", &[1]).unwrap_err().1,
        "container \"app\" of pod g-uid cannot shrink to 1 CPUs: it keeps the 2 CPUs it was \
         first allocated (5,11), as KEP-5554 proposes"
    );
}

/// A resize crosses the plugin boundary both ways: the new allocation,
/// and a refusal's reason and message.
#[test]
fn resize_works_through_the_plugin_boundary() {
    let m = dual_socket_ht();
    let mut h = testkit::load::<CpuManager>(&m, json!({"reserved_cpus": "0"})).unwrap();
    let one = testkit::guaranteed_pod("g", &cpus(1));
    let a = h.allocate(&one, &one.containers[0], &hint(&[1])).unwrap();
    assert_eq!(a.cpus.to_string(), "1");
    let two = testkit::guaranteed_pod("g", &cpus(2));
    let grown = h.resize(&two, &two.containers[0], &a, &hint(&[1])).unwrap();
    assert_eq!(
        grown,
        Some(
            topomgr_sdk::Allocation::default()
                .with_cpus(topomgr_sdk::CpuSet::parse("1,7").unwrap(), true)
        )
    );
    let seven = testkit::guaranteed_pod("g", &cpus(7));
    let err = h
        .resize(&seven, &seven.containers[0], &grown.unwrap(), &hint(&[1]))
        .unwrap_err();
    assert_eq!(err.reason, "resizeAllocateCPUsError");
    assert_eq!(
        err.message,
        "container \"app\" of pod g-uid cannot grow from 2 to 7 CPUs: it needs 5 more on NUMA \
         node 1 (4 free there)"
    );
}

/// With `distribute-cpus-across-numa` a grow over two NUMA nodes is
/// spread evenly over them, and stays on them.
#[test]
fn resize_with_distribution_spreads_over_its_nodes() {
    let m = dual_socket_multi_numa_ht();
    let mut p = provider(
        &m,
        json!({"reserved_cpus": "0", "options": {"distribute-cpus-across-numa": "true"}}),
    );
    let four = testkit::guaranteed_pod("g", &cpus(4));
    let (first, _) = alloc(&mut p, &four, "app", Some(&[0, 1])).unwrap();
    let eight = testkit::guaranteed_pod("g", &cpus(8));
    let (grown, exclusive) = resize(&mut p, &eight, "app", &[0, 1]).unwrap();
    assert!(exclusive);
    let first = topomgr_sdk::CpuSet::parse(&first).unwrap();
    let grown = topomgr_sdk::CpuSet::parse(&grown).unwrap();
    assert!(
        first.iter().all(|c| grown.contains(c)),
        "{first} kept in {grown}"
    );
    // Node 0 is CPUs 0-9,40-49, node 1 CPUs 10-19,50-59.
    let on = |lo: u32, hi: u32| {
        grown
            .iter()
            .filter(|c| (lo..=hi).contains(c) || (lo + 40..=hi + 40).contains(c))
            .count()
    };
    assert_eq!((grown.len(), on(0, 9), on(10, 19)), (8, 4, 4), "{grown}");
}

/// The none policy keeps exclusive CPUs of the static policy until
/// release but does not resize them; its shared containers stay shared.
#[test]
fn the_none_policy_does_not_resize_kept_exclusive_cpus() {
    let m = dual_socket_ht();
    let mut s = provider(&m, json!({}));
    let one = testkit::guaranteed_pod("g", &cpus(1));
    assert_eq!(
        alloc(&mut s, &one, "app", Some(&[1])),
        Ok(("1".into(), true))
    );
    let saved = s.checkpoint().unwrap();
    let mut none = provider(&m, json!({"policy": "none"}));
    none.restore(&saved).unwrap();
    assert_eq!(resize(&mut none, &one, "app", &[1]), Ok(("1".into(), true)));
    let two = testkit::guaranteed_pod("g", &cpus(2));
    assert_eq!(
        resize(&mut none, &two, "app", &[1]),
        Err((
            "ResizeInfeasible".into(),
            "container \"app\" of pod g-uid cannot be resized: it keeps exclusive CPUs from the \
             static policy, and the none policy does not resize them"
                .into()
        ))
    );
}

/// With `prefer-align-cpus-by-uncorecache` a grow takes free CPUs of the
/// uncore (L3) caches the container already uses before any other (issue
/// 33: KEP-5554's grow follows the policy's options); without the option
/// the policy's packed take picks the lowest free CPUs.
#[test]
fn a_grow_stays_in_the_containers_uncore_cache_when_the_option_is_set() {
    use crate::testmachines::{cpu_l3, finish};
    // One socket, one NUMA node, no SMT: L3 0 has CPUs 0-3, L3 1 CPUs 4-7;
    // CPU 0 reserved.
    let m = finish((0..8).map(|id| cpu_l3(id, 0, id, 0, id / 4)).collect(), 1);
    let grown = |options: serde_json::Value| {
        let mut p = provider(&m, json!({"reserved_cpus": "0", "options": options}));
        // A pod takes L3 0's CPUs 1-3, the app CPU 4 of L3 1; once the pod
        // is gone, CPUs 1-3 are the lowest free ones.
        let three = testkit::guaranteed_pod("w", &cpus(3));
        let first = alloc(&mut p, &three, "app", Some(&[0])).unwrap().0;
        let one = testkit::guaranteed_pod("g", &cpus(1));
        let app = alloc(&mut p, &one, "app", Some(&[0])).unwrap().0;
        p.release("w-uid", "app").unwrap();
        let two = testkit::guaranteed_pod("g", &cpus(2));
        (first, app, resize(&mut p, &two, "app", &[0]).unwrap().0)
    };
    let with = grown(json!({"prefer-align-cpus-by-uncorecache": "true"}));
    assert_eq!(with, ("1-3".into(), "4".into(), "4-5".into()));
    let without = grown(json!({}));
    assert_eq!(without, ("1-3".into(), "4".into(), "1,4".into()));
}

/// Per zone, the CPUs one request aligned to that node alone would get now.
fn admissible(p: &CpuManager) -> Vec<u64> {
    p.inventory().unwrap().resources["cpu"]
        .zones
        .iter()
        .map(|z| z.max_admissible() / 1000)
        .collect()
}

/// Without `full-pcpus-only` every available CPU of a node is admissible;
/// with it only the CPUs of wholly free cores, so a reserved CPU takes its
/// sibling out too. What is advertised is then actually given, one more
/// core is not.
#[test]
fn admissible_cpus_per_zone_follow_full_pcpus_only_and_reserved_cpus() {
    let m = dual_socket_ht();
    // Node 0: cores 0,6 / 2,8 / 4,10; node 1: cores 1,7 / 3,9 / 5,11.
    let mut plain = provider(&m, json!({"reserved_cpus": "0"}));
    assert_eq!(admissible(&plain), [5, 6]);
    let one = testkit::guaranteed_pod("one", &cpus(1));
    alloc(&mut plain, &one, "app", Some(&[1])).unwrap();
    assert_eq!(admissible(&plain), [5, 5]);
    let five = testkit::guaranteed_pod("five", &cpus(5));
    assert_eq!(
        alloc(&mut plain, &five, "app", Some(&[0])).map(|(_, aligned)| aligned),
        Ok(true)
    );
    assert_eq!(admissible(&plain), [0, 5]);

    let mut full = provider(
        &m,
        json!({"reserved_cpus": "0", "options": {"full-pcpus-only": "true"}}),
    );
    // CPU 6 is free but its core holds reserved CPU 0.
    assert_eq!(
        cpu_zones(&full.inventory().unwrap()),
        [(0, 6, 5, 5), (1, 6, 6, 6)]
    );
    assert_eq!(admissible(&full), [4, 6]);
    let two = testkit::guaranteed_pod("two", &cpus(2));
    assert_eq!(
        alloc(&mut full, &two, "app", Some(&[1])),
        Ok(("1,7".into(), true))
    );
    assert_eq!(admissible(&full), [4, 4]);
    // An excluded CPU splits its core: neither thread is admissible.
    let excluded = topomgr_sdk::CpuSet::parse("3").unwrap();
    assert_eq!(full.exclude_cpus(&excluded), Ok(true));
    assert_eq!(admissible(&full), [4, 2]);
    assert_eq!(full.exclude_cpus(&topomgr_sdk::CpuSet::new()), Ok(true));
    // The advertised 4 on node 0 are given there, aligned, as whole cores.
    let four = testkit::guaranteed_pod("four", &cpus(4));
    assert_eq!(
        alloc(&mut full, &four, "app", Some(&[0])),
        Ok(("2,4,8,10".into(), true))
    );
    assert_eq!(admissible(&full), [0, 4]);
}
