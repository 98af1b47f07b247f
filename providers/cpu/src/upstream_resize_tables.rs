//! The kubelet's in-place resize tables for the static policy
//! (`InPlacePodVerticalScalingExclusiveCPUs`, KEP-5554), case names kept,
//! driven through [`StaticPolicy::resize`] with the fixtures of
//! `upstream_tables`:
//!
//! * kubernetes #140629 (the successor of #129719, still under review):
//!   `cpu_assignment_test.go`'s `commonTakeByTopologyTestCasesForResize`,
//!   the allocator's answer for a container holding `allocatedCPUs`
//!   (of which `baselineCPUs` were first allocated) that resizes to
//!   `numCPUs` out of `availableCPUs` (its own CPUs and the free ones).
//! * kubernetes v1.37 (the gate's first part, merged): the resize steps of
//!   `cpu_manager_test.go` `TestCPUManagerAddResize` and
//!   `policy_static_test.go` `TestStaticPolicyAllocateRecordsBaseline`.
//!
//! How a row maps here: the container `fakePod`/`fakeContainer` holds
//! `allocatedCPUs`; the CPUs outside `availableCPUs` are held by another
//! container; the shared pool is the rest; a baseline other than the
//! allocated set is recorded as the container's baseline. The resize has
//! no NUMA affinity (the kubelet's allocator takes from every node).
//! Where topomgr answers otherwise the upstream expectation is kept beside
//! the asserted one, with why.
//!
//! Not ported: the rows on the `topoUncore*` and
//! `topoDualSocketMultiNumaPerSocketHTLarge` machines (not in the
//! reference store, as `upstream_policy_tables` notes); the
//! `takeByTopologyNUMADistributed` resize table (`cpuGroupSize`,
//! `alignBySocket` rows), whose function has no counterpart here (a grow
//! with `distribute-cpus-across-numa` spreads over the container's nodes,
//! see `tests::resize_with_distribution_spreads_over_its_nodes`).

use std::collections::BTreeMap;

use topomgr_sdk::quantity::parse_resource_amount;
use topomgr_sdk::{ContainerView, PodView, QosClass};

use crate::options::StaticOptions;
use crate::policy::StaticPolicy;
use crate::topology::{CpuTopology, Cpus};
use crate::upstream_tables::{
    cpu, dual_socket_ht, dual_socket_multi_numa_ht, dual_socket_no_ht, quad_socket_four_way_ht,
    set, show, single_socket_ht, topo,
};

/// A Guaranteed pod `uid` of one container `name` with `cpu` CPUs (a
/// quantity) and 1G of memory, as the kubelet's `makePod`.
fn make_pod(uid: &str, name: &str, cpu: &str) -> PodView {
    let cpu = parse_resource_amount("cpu", cpu).expect("a CPU quantity");
    let res = BTreeMap::from([("memory".to_owned(), 1u64 << 30), ("cpu".to_owned(), cpu)]);
    let c = ContainerView::new(name)
        .with_requests(res.clone())
        .with_limits(res);
    PodView::new(uid, uid, "default", QosClass::Guaranteed).with_containers(vec![c])
}

fn options(spread: bool) -> StaticOptions {
    let mut raw = BTreeMap::new();
    if spread {
        raw.insert(
            "distribute-cpus-across-cores".to_owned(),
            serde_json::Value::String("true".to_owned()),
        );
    }
    StaticOptions::parse(&raw).expect("valid options")
}

/// `(description, topology, distribute-cpus-across-cores, availableCPUs,
/// allocatedCPUs, baselineCPUs, numCPUs, expected CPUs or error text)`.
type Row = (
    &'static str,
    fn() -> CpuTopology,
    bool,
    &'static str,
    &'static str,
    &'static str,
    usize,
    Result<&'static str, &'static str>,
);

/// The policy with `fakePod`/`fakeContainer` holding `allocated`, the CPUs
/// outside `available` held by `otherPod`, `baseline` recorded.
fn policy_for(
    topo: CpuTopology,
    spread: bool,
    available: &str,
    allocated: &str,
    baseline: &str,
) -> StaticPolicy {
    let mut p = StaticPolicy::new(topo, Cpus::new(), options(spread));
    let all = p.default_set().clone();
    let (available, allocated, baseline) = (set(available), set(allocated), set(baseline));
    let others: Cpus = all.difference(&available).copied().collect();
    p.assignments.clear();
    p.assignments
        .entry("fakePod".to_owned())
        .or_default()
        .insert("fakeContainer".to_owned(), allocated.clone());
    if !others.is_empty() {
        p.assignments
            .entry("otherPod".to_owned())
            .or_default()
            .insert("otherContainer".to_owned(), others);
    }
    if baseline != allocated {
        p.baselines
            .entry("fakePod".to_owned())
            .or_default()
            .insert("fakeContainer".to_owned(), baseline);
    }
    p.default_set = available.difference(&allocated).copied().collect();
    p
}

fn run(rows: &[Row]) {
    let mut failures = Vec::new();
    for (name, topo, spread, available, allocated, baseline, num, want) in rows {
        let mut p = policy_for(topo(), *spread, available, allocated, baseline);
        let before = (
            p.assignments.clone(),
            p.default_set.clone(),
            p.baselines.clone(),
        );
        let pod = make_pod("fakePod", "fakeContainer", &num.to_string());
        let got = p
            .resize(&pod, &pod.containers[0], None)
            .map(|pl| show(&pl.cpus))
            .map_err(|e| e.to_string());
        match (&got, want) {
            (Ok(g), Ok(w)) if g == &show(&set(w)) => {
                let mut pool = p.default_set.clone();
                pool.extend(set(w));
                assert_eq!(
                    show(&pool),
                    show(&set(available).union(&before.1).copied().collect()),
                    "{name}: the shared pool is what the container does not hold"
                );
            }
            (Err(g), Err(w)) if g.contains(w) => {
                assert_eq!(
                    (p.assignments, p.default_set, p.baselines),
                    before,
                    "{name}: a refusal changes nothing"
                );
            }
            _ => failures.push(format!("{name}: got {got:?}, want {want:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// kubernetes #140629 `commonTakeByTopologyTestCasesForResize`.
#[test]
fn take_by_topology_numa_packed_for_resize() {
    let s = single_socket_ht as fn() -> CpuTopology;
    let d = dual_socket_ht as fn() -> CpuTopology;
    let n = dual_socket_no_ht as fn() -> CpuTopology;
    let m = dual_socket_multi_numa_ht as fn() -> CpuTopology;
    let q = quad_socket_four_way_ht as fn() -> CpuTopology;
    let rows: &[Row] = &[
        // upstream: Err("not enough cpus available to satisfy request: requested=5, available=4"); differs: both refuse; the kubelet counts the held CPU among the available, topomgr names the extra CPUs needed and free.
        ("take more cpus than are available from single socket with HT", s, false, "0,2,4,6", "0", "0", 5, Err("cannot grow from 1 to 5 CPUs: it needs 4 more on the node (3 free there)")),
        // upstream: Err("requested CPUs to be retained 0,2 are not a subset of reusable CPUs 0"); differs: topomgr keeps of a baseline only what the container holds (a baseline is a subset by construction: recorded at the first resize), so nothing to refuse.
        ("baselineCPUs not a subset of allocatedCPUs", s, false, "0,2,4,6", "0", "0,2", 3, Ok("0,2,4")),
        ("Allocated 1 CPUs, and take 1 cpus from single socket with HT", s, false, "0-7", "0", "0", 1, Ok("0")),
        ("Allocated 1 CPU, and take 2 cpu from single socket with HT", s, false, "0-7", "0", "0", 2, Ok("0,4")),
        ("Allocated 1 CPU, and take 2 cpu from single socket with HT, some cpus are taken, no sibling CPU of allocated CPU", s, false, "0,1,3,5,6,7", "0", "0", 2, Ok("0,6")),
        ("Allocated 1 CPU, and take 3 cpu from single socket with HT, some cpus are taken, no sibling CPU of allocated CPU", s, false, "0,1,3,5,6,7", "0", "0", 3, Ok("0,1,5")),
        ("Allocated 1 CPU, and take all cpu from single socket with HT", s, false, "0-7", "0", "0", 8, Ok("0-7")),
        ("Allocated 1 CPU, take a core from dual socket with HT", d, false, "0-11", "11", "11", 2, Ok("5,11")),
        ("Allocated 1 CPU, take a socket of cpus from dual socket with HT", d, false, "0-11", "11", "11", 6, Ok("1,3,5,7,9,11")),
        // upstream: Ok("0,1,3,5,6,7,9,11"); differs: topomgr's grow takes the extra CPUs the policy's topology-aware way over all free CPUs after the free siblings of its own cores; the kubelet's first fills the socket/NUMA node of the held CPUs.
        ("Allocated 1 CPU, take a socket of cpus and 1 core of CPU from dual socket with HT", d, false, "0-11", "11", "11", 8, Ok("0,2,4-6,8,10-11")),
        ("Allocated 1 CPU, take a socket of cpus from dual socket with multi-numa-per-socket with HT", m, false, "0-79", "39", "39", 40, Ok("20-39,60-79")),
        ("Allocated 1 CPU, take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT", m, false, "0-79", "39", "39", 20, Ok("30-39,70-79")),
        // upstream: Ok("0-19,30-59,70-79"); differs: topomgr's grow takes the extra CPUs the policy's topology-aware way over all free CPUs after the free siblings of its own cores; the kubelet's first fills the socket/NUMA node of the held CPUs.
        ("Allocated 2 CPUs, take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT", m, false, "0-79", "39,59", "39,59", 60, Ok("0-17,19-29,39-57,59-69,79")),
        ("Allocated 1 CPU, take NUMA nodes of cpus from dual socket with multi-numa-per-socket with HT, the NUMA node with allocated CPUs already taken some CPUs", m, false, "0-69", "39", "39", 40, Ok("0-8,20-30,39-48,60-69")),
        ("Allocated 1 CPU, take sibling cpu from dual socket with multi-numa-per-socket with HT, the NUMA node with allocated CPUs already taken more CPUs", m, false, "9,30-38,49", "9", "9", 2, Ok("9,49")),
        ("Allocated 1 CPU, take NUMA nodes of cpus and 1 CPU from dual socket with multi-numa-per-socket with HT, the NUMA node with allocated CPUs already taken some CPUs", m, false, "0-69", "39", "39", 41, Ok("0-19,39-59")),
        ("Allocated 1 CPUs, take a socket of cpus from single socket with HT, 3 cpus", s, true, "0-7", "7", "7", 3, Ok("0,1,7")),
        ("Allocated 1 CPUs, take a socket of cpus from dual socket with HT, 3 cpus", d, true, "0-11", "11", "11", 3, Ok("1,3,11")),
        ("Allocated 1 CPUs, take a socket of cpus from dual socket with HT, 6 cpus", d, true, "0-11", "11", "11", 6, Ok("1,3,5,7,9,11")),
        // upstream: Ok("0,1,2,3,5,7,9,11"); differs: topomgr's grow takes the extra CPUs the policy's topology-aware way over all free CPUs after the free siblings of its own cores; the kubelet's first fills the socket/NUMA node of the held CPUs.
        ("Allocated 1 CPUs, take a socket of cpus from dual socket with HT, 8 cpus", d, true, "0-11", "11", "11", 8, Ok("0-2,4,6,8,10-11")),
        ("Allocated 1 CPUs, take a socket of cpus from dual socket without HT, 2 cpus", n, true, "0-7", "7", "7", 2, Ok("4,7")),
        ("Allocated 1 CPUs, take a socket of cpus from dual socket with multi numa per socket and HT, 8 cpus", m, true, "0-79", "39", "39", 8, Ok("20-26,39")),
        ("Allocated 1 CPU, take NUMA nodes of cpus from dual socket with multi-numa-per-socket with HT, the NUMA node with allocated CPUs already taken some CPUs", m, true, "0-69", "39", "39", 40, Ok("0-9,20-39,60-69")),
        // upstream: Ok("3,4,11,12,15,16,23,60"); differs: topomgr's grow takes the extra CPUs the policy's topology-aware way over all free CPUs after the free siblings of its own cores; the kubelet's first fills the socket/NUMA node of the held CPUs.
        ("Allocated 1 CPUs, take a socket of cpus from quad socket four way with HT, 12 cpus", q, true, "0-287", "60", "60", 8, Ok("51-52,59-60,65-66,73,120")),
        // upstream: Err("not enough cpus available to satisfy request: requested=5, available=4"); differs: both refuse; the kubelet counts the held CPU among the available, topomgr names the extra CPUs needed and free.
        ("Allocated 1 CPU, take more cpus than are available from single socket with HT", s, false, "0,2,4,6", "0", "0", 5, Err("cannot grow from 1 to 5 CPUs: it needs 4 more on the node (3 free there)")),
        ("Scale up from 2 to 4 CPUs, keep baseline from single socket with HT", s, false, "0-7", "0,4", "0", 4, Ok("0,1,4,5")),
        ("Scale up from 2 to 4 CPUs, keep baseline from dual socket with HT", d, false, "0-11", "0,6", "0", 4, Ok("0,2,6,8")),
        ("Scale up from 1 to 2 CPUs, keep baseline from single socket with HT", s, false, "0-7", "0", "0", 2, Ok("0,4")),
        ("Scale up from 4 to 8 CPUs, keep baseline from dual socket with HT", d, false, "0-11", "0,2,6,8", "0,6", 8, Ok("0-2,4,6-8,10")),
        ("Scale up from 2 to 4 CPUs, keep baseline from dual socket with multi-numa-per-socket with HT", m, false, "0-79", "0,40", "0", 4, Ok("0,1,40,41")),
        ("Scale up from 2 to 6 CPUs, keep baseline from dual socket with multi-numa-per-socket with HT", m, false, "0-79", "0,40", "0,40", 6, Ok("0-2,40-42")),
        ("Scale up from 2 to 4 CPUs, allocated equals baseline from single socket with HT", s, false, "0-7", "0,4", "0,4", 4, Ok("0,1,4,5")),
        ("Scale up from 2 to 6 CPUs, allocated equals baseline from dual socket with HT", d, false, "0-11", "0,6", "0,6", 6, Ok("0,2,4,6,8,10")),
        ("Scale up to same size, allocated equals baseline equals numCPUs from single socket with HT", s, false, "0-7", "0,4", "0,4", 2, Ok("0,4")),
        ("Scale up to same size, baseline is subset of allocated equals numCPUs from dual socket with HT", d, false, "0-11", "0,2,6,8", "0,6", 4, Ok("0,2,6,8")),
        ("Scale down from 4 to 3 CPUs, baseline 1 CPU from single socket with HT", s, false, "0,2,4,6", "0,2,4,6", "0", 3, Ok("0,2,4")),
        ("Scale down from 6 to 4 CPUs, baseline 2 CPUs from dual socket with HT", d, false, "0,2,4,6,8,10", "0,2,4,6,8,10", "0,6", 4, Ok("0,2,6,8")),
        // upstream: Ok("0,2,4,6,8"); differs: topomgr gives back CPUs of cores without a baseline CPU, highest core first; the kubelet keeps the CPUs closest to the baseline (its socket) and gives back the others.
        ("Scale down from 8 to 5 CPUs, baseline 2 CPUs from dual socket with HT", d, false, "0-2,4,6-8,10", "0-2,4,6-8,10", "0,6", 5, Ok("0-2,6-7")),
        ("Scale down from 4 to 3 CPUs, baseline 1 CPU from single socket with HT, spread", s, true, "0,2,4,6", "0,2,4,6", "0", 3, Ok("0,2,4")),
        // upstream: Ok("0,2,4,6"); differs: topomgr gives back CPUs of cores without a baseline CPU, highest core first; the kubelet keeps the CPUs closest to the baseline (its socket) and gives back the others (whole cores first, also with distribute-cpus-across-cores).
        ("Scale down from 6 to 4 CPUs, baseline 2 CPUs from dual socket with HT, spread", d, true, "0,2,4,6,8,10", "0,2,4,6,8,10", "0,6", 4, Ok("0,2,6,8")),
        // upstream: Ok("0,2,4,6,8"); differs: topomgr gives back CPUs of cores without a baseline CPU, highest core first; the kubelet keeps the CPUs closest to the baseline (its socket) and gives back the others.
        ("Scale down from 8 to 5 CPUs, baseline 2 CPUs from dual socket with HT, spread", d, true, "0-2,4,6-8,10", "0-2,4,6-8,10", "0,6", 5, Ok("0-2,6-7")),
        ("Scale down from 4 to 3 CPUs, baseline 1 CPU from dual socket without HT", n, false, "0,2,4,6", "0,2,4,6", "0", 3, Ok("0,2,4")),
        ("Scale down from 6 to 4 CPUs, baseline 2 CPUs from dual socket without HT", n, false, "0-4,6", "0-4,6", "0,2", 4, Ok("0-3")),
        ("Scale down from 4 to 3 CPUs, baseline 1 CPU from dual socket with multi-numa-per-socket with HT", m, false, "0,1,40,41", "0,1,40,41", "0", 3, Ok("0,1,40")),
        ("Scale down from 6 to 4 CPUs, baseline 2 CPUs from dual socket with multi-numa-per-socket with HT", m, false, "0-2,40-42", "0-2,40-42", "0,40", 4, Ok("0,1,40,41")),
        ("Scale down to baseline, numCPUs equals baseline from single socket with HT", s, false, "0,2,4,6", "0,2,4,6", "0,4", 2, Ok("0,4")),
        ("Scale down to baseline, numCPUs equals baseline from dual socket with HT", d, false, "0,2,4,6,8,10", "0,2,4,6,8,10", "0,2,6,8", 4, Ok("0,2,6,8")),
        ("Scale up from a full NUMA node (20 CPUs) to 40 CPUs from dual socket with multi-numa-per-socket with HT", m, false, "0-79", "0-9,40-49", "0-9,40-49", 40, Ok("0-19,40-59")),
    ];
    run(rows);
}

/// kubernetes v1.37 `TestCPUManagerAddResize` on its 4-CPU single-socket
/// machine, the default set `1-3` (the kubelet's mock state also lists a
/// CPU 4 the machine does not have). Upstream the static policy skips a
/// resize of a container it never allocated (no error, state unchanged);
/// topomgr refuses it (a move from the shared pool to exclusive CPUs,
/// which the kubelet refuses at admission of the resize), also changing
/// nothing. A resize to the same CPU count keeps the CPUs either way.
#[test]
fn cpu_manager_add_resize() {
    let four = || topo((0..4).map(|i| cpu(i, i, 0, 0, 0)).collect());
    let pod = make_pod("fakePod", "fakeContainer", "2");
    let c = &pod.containers[0];
    let fresh = || {
        let mut p = StaticPolicy::new(four(), Cpus::new(), options(false));
        p.default_set = set("1-3");
        p
    };
    let refused = "container \"fakeContainer\" of pod fakePod";

    // "CPU Manager first add then resize".
    let mut p = fresh();
    assert_eq!(show(&p.allocate(&pod, c, None).unwrap().cpus), "1-2");
    assert_eq!(show(p.default_set()), "3", "first add operation");
    assert_eq!(show(&p.resize(&pod, c, None).unwrap().cpus), "1-2");
    assert_eq!(show(p.default_set()), "3", "then resize operation");

    // "CPU Manager attempt to resize" (upstream: no error, skipped).
    let mut p = fresh();
    let err = p.resize(&pod, c, None).unwrap_err().to_string();
    assert!(err.contains(refused), "{err}");
    assert_eq!(show(p.default_set()), "1-3", "nothing changed");
    assert!(p.assignments.is_empty());

    // "CPU Manager first resize then add" (upstream: the resize skipped).
    let mut p = fresh();
    assert!(p.resize(&pod, c, None).is_err());
    assert_eq!(show(p.default_set()), "1-3", "first resize operation");
    assert_eq!(show(&p.allocate(&pod, c, None).unwrap().cpus), "1-2");
    assert_eq!(show(p.default_set()), "3", "then add operation");
}

/// kubernetes v1.37 `TestStaticPolicyAllocateRecordsBaseline`: the kubelet
/// records the allocated set as the baseline at admission; topomgr records
/// none until the first resize (a container never resized has its
/// assignment as its baseline) and then records the allocated set, which a
/// shrink back to it cannot go below.
#[test]
fn static_policy_allocate_records_baseline() {
    let mut p = StaticPolicy::new(dual_socket_ht(), set("0"), options(false));
    let pod = make_pod("testPod", "testContainer", "2000m");
    let c = &pod.containers[0];
    let cset = p.allocate(&pod, c, None).unwrap().cpus;
    assert!(p.baselines.is_empty(), "no baseline before a resize");
    let grown = make_pod("testPod", "testContainer", "4");
    p.resize(&grown, &grown.containers[0], None).unwrap();
    assert_eq!(
        p.baselines
            .get("testPod")
            .and_then(|m| m.get("testContainer")),
        Some(&cset),
        "the baseline is the allocated set"
    );
    let one = make_pod("testPod", "testContainer", "1");
    let err = p.resize(&one, &one.containers[0], None).unwrap_err();
    assert!(err.to_string().contains("cannot shrink to 1 CPUs"), "{err}");
    assert_eq!(show(&p.resize(&pod, c, None).unwrap().cpus), show(&cset));
    assert!(p.baselines.is_empty(), "back to its baseline, none kept");
}
