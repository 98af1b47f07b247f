//! The kubelet's static-policy test tables, case names kept:
//! `pkg/kubelet/cm/cpumanager/policy_static_test.go` (Start, Add, reuse,
//! Remove, topology-aware allocation, reserved lists, options, pod-level
//! `AllocatePod`, SMT error texts, `validatePodScopeResources`),
//! `topology_hints_test.go` (pod guaranteed CPUs, container and pod hints,
//! align-by-socket hints) and `policy_options_test.go`, with the fixtures
//! of `upstream_tables` (`policy_test.go`).
//!
//! How the kubelet's harness maps here: its mock state (assignments and
//! default CPU set) is the policy's own state set directly; `Start` is
//! [`StaticPolicy::reconcile`] of that state (which, unlike the kubelet's,
//! never refuses: see the Start tables); `numReservedCPUs` becomes the
//! CPUs the kubelet's `takeByTopology` reserves (the lowest cores); the
//! fake topology manager's hint is the `affinity` handed to `allocate`.
//! Error texts are topomgr's (each names the same numbers as the kubelet's,
//! shown beside it).
//!
//! Not ported, and why:
//! * `TestStaticPolicyAddWithUncoreAlignment` (21 cases): its eleven
//!   `topo*Uncore` machines are defined in `policy_test.go` beyond what the
//!   reference store holds; the uncore-aware take itself is covered by the
//!   ported `cpu_assignment_test.go` tables.
//! * `TestStaticPolicyStartWithResvList` "inconsistency between
//!   numReservedCPUs and reserved": topomgr takes only the explicit
//!   `reserved_cpus` list, there is no count to disagree with.
//! * `TestPolicyOptionsAvailable`: option feature gates
//!   (`CPUManagerPolicyAlphaOptions`/`BetaOptions`) do not exist in
//!   topomgr, every known option is available; the unknown-option and
//!   stable-option cases (`TestPolicyDefaultsAvailable`) are ported.
//! * `TestValidateStaticPolicyOptions` "Align by socket enabled with
//!   topology manager single numa node": the provider cannot see the
//!   host's policy (documented difference); the other cases are ported.
//! * `TestStaticPolicyName`, the metrics counters of
//!   `TestStaticPolicyAllocatePod`: no equivalent (the host owns metrics).

use std::collections::BTreeMap;

use topomgr_sdk::quantity::parse_resource_amount;
use topomgr_sdk::{ContainerView, HintSet, NumaMask, PodResources, PodView, QosClass};

use crate::assignment::{take_packed, SortingStrategy};
use crate::options::StaticOptions;
use crate::policy::{pod_guaranteed_cpus, StaticPolicy};
use crate::state::Checkpoint;
use crate::topology::{to_cpuset, CpuTopology, Cpus};
use crate::upstream_tables::{
    cpu, dual_socket_ht, dual_socket_multi_numa_ht, dual_socket_no_ht,
    multi_socket_dual_socket_per_numa_ht, quad_socket_four_way_ht, set, show, single_socket_ht,
    topo,
};

// ---------------------------------------------------------------- helpers

fn milli(q: &str) -> u64 {
    parse_resource_amount("cpu", q).expect("a CPU quantity")
}

/// A container with `cpu` request/limit (empty: not set) and 1G of memory
/// (the kubelet helpers' `memory` of the same request and limit).
fn container(name: &str, req: &str, lim: &str, memory: u64, sidecar: bool) -> ContainerView {
    let mut requests = BTreeMap::from([("memory".to_owned(), memory)]);
    let mut limits = requests.clone();
    if !req.is_empty() {
        requests.insert("cpu".to_owned(), milli(req));
    }
    if !lim.is_empty() {
        limits.insert("cpu".to_owned(), milli(lim));
    }
    ContainerView::new(name)
        .with_requests(requests)
        .with_limits(limits)
        .with_sidecar(sidecar)
}

/// Kubernetes' QoS of containers without pod-level resources: Guaranteed
/// when every container has non-zero `cpu` and `memory` limits equal to
/// its requests.
fn qos_of(containers: &[&ContainerView]) -> QosClass {
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"]
            .iter()
            .all(|r| c.limit(r) != 0 && c.request(r) == c.limit(r))
    });
    if guaranteed {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

fn pod_of(uid: &str, init: Vec<ContainerView>, apps: Vec<ContainerView>) -> PodView {
    let all: Vec<&ContainerView> = init.iter().chain(&apps).collect();
    let qos = qos_of(&all);
    PodView::new(uid, uid, "default", qos)
        .with_init_containers(init)
        .with_containers(apps)
}

/// `makePod(podUID, containerName, cpuRequest, cpuLimit)`.
fn make_pod(uid: &str, name: &str, req: &str, lim: &str) -> PodView {
    pod_of(uid, vec![], vec![container(name, req, lim, 1 << 30, false)])
}

/// `makeMultiContainerPod` / `makeMultiContainerPodWithOptions`:
/// `initContainer-N` and `appContainer-N`; `(request, limit, sidecar)`.
fn make_multi(init: &[(&str, &str, bool)], apps: &[(&str, &str)]) -> PodView {
    let init = init
        .iter()
        .enumerate()
        .map(|(i, (r, l, s))| container(&format!("initContainer-{i}"), r, l, 1 << 30, *s))
        .collect();
    let apps = apps
        .iter()
        .enumerate()
        .map(|(i, (r, l))| container(&format!("appContainer-{i}"), r, l, 1 << 30, false))
        .collect();
    pod_of("fakePod", init, apps)
}

/// One container of a pod-level pod: `(name, cpu request, cpu limit,
/// sidecar)`; 100Mi of memory, as `makePodWithContainersAndPodLevelResources`.
type Spec<'a> = (&'a str, &'a str, &'a str, bool);

/// `makePodWithContainersAndPodLevelResources`: pod-level `cpu` request and
/// limit with 300Mi of memory; the QoS comes from the pod level.
fn pod_level(uid: &str, req: &str, lim: &str, init: &[Spec<'_>], apps: &[Spec<'_>]) -> PodView {
    let mi = 1u64 << 20;
    let build = |s: &[Spec<'_>]| -> Vec<ContainerView> {
        s.iter()
            .map(|(n, r, l, side)| container(n, r, l, 100 * mi, *side))
            .collect()
    };
    let requests = BTreeMap::from([
        ("memory".to_owned(), 300 * mi),
        ("cpu".to_owned(), milli(req)),
    ]);
    let limits = BTreeMap::from([
        ("memory".to_owned(), 300 * mi),
        ("cpu".to_owned(), milli(lim)),
    ]);
    let qos = if requests == limits {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    };
    PodView::new(uid, uid, "default", qos)
        .with_init_containers(build(init))
        .with_containers(build(apps))
        .with_resources(Some(PodResources::new(requests, limits)))
}

fn options(pairs: &[(&str, &str)]) -> StaticOptions {
    let raw = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
        .collect();
    StaticOptions::parse(&raw).expect("valid options")
}

/// The CPUs the kubelet reserves for `numReservedCPUs` (its
/// `takeByTopology` over all CPUs).
fn kubelet_reserved(t: &CpuTopology, n: usize) -> Cpus {
    take_packed(t, &t.all_cpus(), n, SortingStrategy::Packed, false).expect("reserve")
}

/// The kubelet's mock state: `(pod, container, cpus)` and the default set.
type State<'a> = (&'a [(&'a str, &'a str, &'a str)], &'a str);

fn with_state(mut p: StaticPolicy, (assignments, default): State<'_>) -> StaticPolicy {
    p.assignments.clear();
    for (pod, c, cpus) in assignments {
        p.assignments
            .entry(pod.to_string())
            .or_default()
            .insert(c.to_string(), set(cpus));
    }
    p.default_set = if default.is_empty() {
        Cpus::new()
    } else {
        set(default)
    };
    p
}

fn mask(nodes: &[u32]) -> NumaMask {
    NumaMask::from_nodes(nodes.iter().copied()).unwrap()
}

/// Sorted `"nodes:preferred"` strings of a hint answer (the kubelet's tests
/// sort both sides).
fn sorted_hints(h: Option<HintSet>, t: &CpuTopology) -> Option<Vec<String>> {
    h.map(|set| {
        let mut v: Vec<String> = set
            .to_explicit(&t.numa_nodes())
            .iter()
            .map(topomgr_sdk::testkit::hint_string)
            .collect();
        v.sort();
        v
    })
}

fn strings(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

// ------------------------------------------------- TestStaticPolicyStart

/// The kubelet's `Start` validates its state file and refuses one that does
/// not fit (the node must be drained and the file deleted); topomgr's
/// restore is reconcile (`crate::reconcile`): the assignments are kept and
/// the shared pool is recomputed from the machine and config. Each case
/// keeps its name, states the kubelet's refusal, and checks the pool
/// topomgr computes instead.
#[test]
fn test_static_policy_start() {
    // (description, reserved count, strict, assignments, saved default,
    //  the kubelet's refusal or "", topomgr's shared pool)
    type Case<'a> = (&'a str, usize, bool, State<'a>, &'a str, &'a str);
    let cases: &[Case<'_>] = &[
        (
            "non-corrupted state",
            0,
            false,
            (&[("fakePod", "0", "0")], "1-11"),
            "",
            "1-11",
        ),
        ("empty cpuset", 1, false, (&[], ""), "", "0-11"),
        (
            "reserved cores 0 & 6 are not present in available cpuset",
            2,
            false,
            (&[], "0-1"),
            "not all reserved cpus: \"0,6\" are present in defaultCpuSet: \"0-1\"",
            "0-11",
        ),
        (
            "some of reserved cores are present in available cpuset (StrictCPUReservationOption)",
            2,
            true,
            (&[], "0-1"),
            "some of strictly reserved cpus: \"0\" are present in defaultCpuSet: \"0-1\"",
            "1-5,7-11",
        ),
        (
            "assigned core 2 is still present in available cpuset",
            0,
            false,
            (&[("fakePod", "0", "0-2")], "2-11"),
            "pod: fakePod, container: 0 cpuset: \"0-2\" overlaps with default cpuset \"2-11\"",
            "3-11",
        ),
        (
            "assigned core 2 is still present in available cpuset (StrictCPUReservationOption)",
            0,
            true,
            (&[("fakePod", "0", "0-2")], "2-11"),
            "pod: fakePod, container: 0 cpuset: \"0-2\" overlaps with default cpuset \"2-11\"",
            "3-11",
        ),
        (
            "core 12 is not present in topology but is in state cpuset",
            0,
            false,
            (&[("fakePod", "0", "0-2"), ("fakePod", "1", "3-4")], "5-12"),
            "current set of available CPUs \"0-11\" doesn't match with CPUs in state \"0-12\"",
            "5-11",
        ),
        (
            "core 11 is present in topology but is not in state cpuset",
            0,
            false,
            (&[("fakePod", "0", "0-2"), ("fakePod", "1", "3-4")], "5-10"),
            "current set of available CPUs \"0-11\" doesn't match with CPUs in state \"0-10\"",
            "5-11",
        ),
    ];
    for (name, n, strict, state, _kubelet_refuses, want) in cases {
        let t = dual_socket_ht();
        let reserved = kubelet_reserved(&t, *n);
        let opts = if *strict {
            options(&[("strict-cpu-reservation", "true")])
        } else {
            StaticOptions::default()
        };
        let mut p = StaticPolicy::new(t, reserved, opts);
        let mut cp = p.checkpoint();
        cp.entries.clear();
        for (pod, c, cpus) in state.0 {
            cp.entries
                .entry(pod.to_string())
                .or_default()
                .insert(c.to_string(), to_cpuset(&set(cpus)));
        }
        cp.default_cpu_set = to_cpuset(&if state.1.is_empty() {
            Cpus::new()
        } else {
            set(state.1)
        });
        let out = p.reconcile(&cp);
        assert!(out.report.is_empty(), "{name}");
        assert_eq!(show(&p.default_set), *want, "{name}");
        assert_eq!(
            p.checkpoint().entries,
            cp.entries,
            "{name}: assignments kept"
        );
    }
}

// --------------------------------------------------- TestStaticPolicyAdd

/// One `staticPolicyTest` of an Add table.
struct AddCase<'a> {
    name: &'a str,
    topo: fn() -> CpuTopology,
    reserved: Reserved<'a>,
    options: &'a [(&'a str, &'a str)],
    state: (Vec<(&'a str, &'a str, String)>, String),
    pod: PodView,
    hint: Option<&'a [u32]>,
    /// `Ok(cpus)`: allocated; `Ok("")`: no exclusive allocation.
    want: Result<String, &'a str>,
}

/// `numReservedCPUs` (taken like the kubelet) or an explicit list.
enum Reserved<'a> {
    Count(usize),
    List(&'a str),
}

fn run_add(c: &AddCase<'_>) {
    let t = (c.topo)();
    let reserved = match c.reserved {
        Reserved::Count(n) => kubelet_reserved(&t, n),
        Reserved::List(s) => set(s),
    };
    let mut p = StaticPolicy::new(t, reserved, options(c.options));
    p.assignments.clear();
    for (pod, cn, cpus) in &c.state.0 {
        p.assignments
            .entry(pod.to_string())
            .or_default()
            .insert(cn.to_string(), set(cpus));
    }
    p.default_set = set(&c.state.1);
    let container = &c.pod.containers[0];
    let r = p.allocate(&c.pod, container, c.hint.map(mask));
    let held = p
        .assignments
        .get(&c.pod.uid)
        .and_then(|m| m.get(&container.name))
        .cloned();
    match (&c.want, r) {
        (Ok(want), Ok(placed)) if want.is_empty() => {
            assert!(!placed.exclusive, "{}: not exclusive", c.name);
            assert_eq!(held, None, "{}: no assignment", c.name);
        }
        (Ok(want), Ok(placed)) => {
            assert_eq!(show(&placed.cpus), *want, "{}", c.name);
            assert_eq!(
                held.as_ref().map(show).as_deref(),
                Some(want.as_str()),
                "{}",
                c.name
            );
            assert!(
                placed.cpus.is_disjoint(&p.default_set),
                "{}: disjoint from the pool",
                c.name
            );
        }
        (Err(want), Err(e)) => {
            assert_eq!(e.to_string(), *want, "{}", c.name);
            assert_eq!(held, None, "{}: no assignment after an error", c.name);
        }
        (want, got) => panic!("{}: want {want:?}, got {got:?}", c.name),
    }
}

#[test]
fn test_static_policy_add() {
    let quad = quad_socket_four_way_ht();
    let all = quad.all_cpus();
    let socket = |s: u32| -> Cpus { quad.all_cpus_in(crate::topology::Level::Socket, s) };
    let minus = |a: &Cpus, b: &str| -> String { show(&a.difference(&set(b)).copied().collect()) };
    let st = |a: &[(&'static str, &'static str, &str)], d: &str| {
        (
            a.iter().map(|(p, c, s)| (*p, *c, s.to_string())).collect(),
            d.to_string(),
        )
    };
    let sock1_plus = {
        let mut s = socket(1);
        s.extend(set("10,34,22,47,53,173,61,181,108,228,115,235"));
        s
    };
    let options_insensitive: Vec<AddCase<'_>> = vec![
        AddCase {
            name: "GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore",
            topo: single_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[("fakePod", "fakeContainer100", "2-3,6-7")], "0-1,4-5"),
            pod: make_pod("fakePod", "fakeContainer3", "2000m", "2000m"),
            hint: None,
            want: Ok("1,5".into()),
        },
        AddCase {
            name: "GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocket",
            topo: dual_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[("fakePod", "fakeContainer100", "2")], "0-1,3-11"),
            pod: make_pod("fakePod", "fakeContainer3", "6000m", "6000m"),
            hint: None,
            want: Ok("1,3,5,7,9,11".into()),
        },
        AddCase {
            name: "GuPodMultipleCores, DualSocketHT, ExpectAllocThreeCores",
            topo: dual_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[("fakePod", "fakeContainer100", "1,5")], "0,2-4,6-11"),
            pod: make_pod("fakePod", "fakeContainer3", "6000m", "6000m"),
            hint: None,
            want: Ok("2-4,8-10".into()),
        },
        AddCase {
            name: "GuPodMultipleCores, DualSocketNoHT, ExpectAllocOneSocket",
            topo: dual_socket_no_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[], "0-1,3-7"),
            pod: make_pod("fakePod", "fakeContainer1", "4000m", "4000m"),
            hint: None,
            want: Ok("4-7".into()),
        },
        AddCase {
            name: "GuPodMultipleCores, DualSocketNoHT, ExpectAllocFourCores",
            topo: dual_socket_no_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[("fakePod", "fakeContainer100", "4-5")], "0-1,3,6-7"),
            pod: make_pod("fakePod", "fakeContainer1", "4000m", "4000m"),
            hint: None,
            want: Ok("1,3,6-7".into()),
        },
        AddCase {
            name: "GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocketOneCore",
            topo: dual_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[("fakePod", "fakeContainer100", "2")], "0-1,3-11"),
            pod: make_pod("fakePod", "fakeContainer3", "8000m", "8000m"),
            hint: None,
            want: Ok("1,3-5,7,9-11".into()),
        },
        AddCase {
            name: "NonGuPod, SingleSocketHT, NoAlloc",
            topo: single_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[], "0-7"),
            pod: make_pod("fakePod", "fakeContainer1", "1000m", "2000m"),
            hint: None,
            want: Ok(String::new()),
        },
        AddCase {
            name: "GuPodNonIntegerCore, SingleSocketHT, NoAlloc",
            topo: single_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[], "0-7"),
            pod: make_pod("fakePod", "fakeContainer4", "977m", "977m"),
            hint: None,
            want: Ok(String::new()),
        },
        AddCase {
            name: "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocSock0",
            topo: quad_socket_four_way_ht,
            reserved: Reserved::Count(0),
            options: &[],
            state: st(
                &[("fakePod", "fakeContainer100", "3-7,11")],
                &minus(&all, "3-7,11"),
            ),
            pod: make_pod("fakePod", "fakeContainer5", "72000m", "72000m"),
            hint: None,
            want: Ok(show(&socket(0))),
        },
        AddCase {
            name: "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocAllFullCoresFromThreeSockets",
            topo: quad_socket_four_way_ht,
            reserved: Reserved::Count(0),
            options: &[],
            state: (
                vec![(
                    "fakePod",
                    "fakeContainer100",
                    minus(&all, "1,25,13,38,2,9,11,35,23,48,12,51,53,173,113,233,54,61"),
                )],
                show(&set("1,25,13,38,2,9,11,35,23,48,12,51,53,173,113,233,54,61")),
            ),
            pod: make_pod("fakePod", "fakeCcontainer5", "12000m", "12000m"),
            hint: None,
            want: Ok(show(&set("1,25,13,38,11,35,23,48,53,173,113,233"))),
        },
        AddCase {
            name: "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocAllSock1+FullCore",
            topo: quad_socket_four_way_ht,
            reserved: Reserved::Count(0),
            options: &[],
            state: (
                vec![(
                    "fakePod",
                    "fakeContainer100",
                    show(&all.difference(&sock1_plus).copied().collect()),
                )],
                show(&sock1_plus),
            ),
            pod: make_pod("fakePod", "fakeContainer5", "76000m", "76000m"),
            hint: None,
            want: Ok({
                let mut s = socket(1);
                s.extend(set("10,34,22,47"));
                show(&s)
            }),
        },
    ];
    for case in &options_insensitive {
        run_add(case);
        run_add(&AddCase {
            name: case.name,
            topo: case.topo,
            reserved: match case.reserved {
                Reserved::Count(n) => Reserved::Count(n),
                Reserved::List(s) => Reserved::List(s),
            },
            options: &[("full-pcpus-only", "true")],
            state: case.state.clone(),
            pod: case.pod.clone(),
            hint: case.hint,
            want: case.want.clone(),
        });
    }

    let default_options = vec![
        AddCase {
            name: "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
            topo: single_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[], "0-7"),
            pod: make_pod("fakePod", "fakeContainer2", "1000m", "1000m"),
            hint: None,
            // The sibling of the partial core.
            want: Ok("4".into()),
        },
        AddCase {
            name: "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocCPUs",
            topo: quad_socket_four_way_ht,
            reserved: Reserved::Count(0),
            options: &[],
            state: st(
                &[(
                    "fakePod",
                    "fakeContainer100",
                    &minus(&all, "10-11,37,52-53,55,67"),
                )],
                "10-11,52-53,67",
            ),
            pod: make_pod("fakePod", "fakeContainer5", "5000m", "5000m"),
            hint: None,
            want: Ok("10-11,52-53,67".into()),
        },
        AddCase {
            // The kubelet: not enough cpus available to satisfy request:
            // requested=8, available=7.
            name: "GuPodSingleCore, SingleSocketHT, ExpectError",
            topo: single_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[], "0-7"),
            pod: make_pod("fakePod", "fakeContainer2", "8000m", "8000m"),
            hint: None,
            want: Err("not enough free CPUs: requested 8, 7 free on NUMA node 0"),
        },
        AddCase {
            name: "GuPodMultipleCores, SingleSocketHT, ExpectSameAllocation",
            topo: single_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[("fakePod", "fakeContainer3", "2-3,6-7")], "0-1,4-5"),
            pod: make_pod("fakePod", "fakeContainer3", "4000m", "4000m"),
            hint: None,
            want: Ok("2-3,6-7".into()),
        },
        AddCase {
            // requested=10, available=8
            name: "GuPodMultipleCores, DualSocketHT, NoAllocExpectError",
            topo: dual_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[("fakePod", "fakeContainer100", "1-3")], "0,4-11"),
            pod: make_pod("fakePod", "fakeContainer5", "10000m", "10000m"),
            hint: None,
            want: Err("not enough free CPUs: requested 10, 8 free on NUMA nodes 0-1"),
        },
        AddCase {
            // requested=2, available=1
            name: "GuPodMultipleCores, SingleSocketHT, NoAllocExpectError",
            topo: single_socket_ht,
            reserved: Reserved::Count(1),
            options: &[],
            state: st(&[("fakePod", "fakeContainer100", "1-6")], "0,7"),
            pod: make_pod("fakePod", "fakeContainer5", "2000m", "2000m"),
            hint: None,
            want: Err("not enough free CPUs: requested 2, 1 free on NUMA node 0"),
        },
        AddCase {
            // requested=76, available=7
            name: "GuPodMultipleCores, topoQuadSocketFourWayHT, NoAlloc",
            topo: quad_socket_four_way_ht,
            reserved: Reserved::Count(0),
            options: &[],
            state: st(
                &[(
                    "fakePod",
                    "fakeContainer100",
                    &minus(&all, "10-11,37,52-53,55,67"),
                )],
                "10-11,37,52-53,55,67",
            ),
            pod: make_pod("fakePod", "fakeContainer5", "76000m", "76000m"),
            hint: None,
            want: Err("not enough free CPUs: requested 76, 7 free on NUMA nodes 0-3"),
        },
    ];
    for case in &default_options {
        run_add(case);
    }

    let smt_align = vec![
        AddCase {
            // SMTAlignmentError{RequestedCPUs: 1, CpusPerCore: 2}
            name: "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
            topo: single_socket_ht,
            reserved: Reserved::Count(1),
            options: &[("full-pcpus-only", "true")],
            state: st(&[], "0-7"),
            pod: make_pod("fakePod", "fakeContainer2", "1000m", "1000m"),
            hint: None,
            want: Err("SMT alignment: request of 1 CPUs is not a multiple of 2 threads per core"),
        },
        AddCase {
            // SMTAlignmentError{RequestedCPUs: 15, CpusPerCore: 4}
            name: "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocOneCPUs",
            topo: quad_socket_four_way_ht,
            reserved: Reserved::Count(8),
            options: &[("full-pcpus-only", "true")],
            state: (vec![], show(&all)),
            pod: make_pod("fakePod", "fakeContainer15", "15000m", "15000m"),
            hint: None,
            want: Err("SMT alignment: request of 15 CPUs is not a multiple of 4 threads per core"),
        },
        AddCase {
            // SMTAlignmentError{RequestedCPUs: 10, CpusPerCore: 2,
            // AvailablePhysicalCPUs: 8, CausedByPhysicalCPUs: true}
            name: "GuPodManyCores, topoDualSocketHT, ExpectDoNotAllocPartialCPU",
            topo: dual_socket_ht,
            reserved: Reserved::List("1,6"),
            options: &[("full-pcpus-only", "true")],
            state: st(&[], "0,2-5,7-11"),
            pod: make_pod("fakePod", "fakeContainerBug113537_1", "10000m", "10000m"),
            hint: None,
            want: Err(
                "SMT alignment: request of 10 CPUs needs whole cores, but only 8 free CPUs \
                       lie outside the cores of the reserved CPUs (2 threads per core)",
            ),
        },
        AddCase {
            name: "GuPodManyCores, topoDualSocketHT, AutoReserve, ExpectAllocAllCPUs",
            topo: dual_socket_ht,
            reserved: Reserved::Count(2),
            options: &[("full-pcpus-only", "true")],
            state: st(&[], "1-5,7-11"),
            pod: make_pod("fakePod", "fakeContainerBug113537_2", "10000m", "10000m"),
            hint: None,
            want: Ok("1-5,7-11".into()),
        },
        AddCase {
            name: "GuPodManyCores, topoDualSocketHT, ExpectAllocAllCPUs",
            topo: dual_socket_ht,
            reserved: Reserved::List("0,6"),
            options: &[("full-pcpus-only", "true")],
            state: st(&[], "1-5,7-11"),
            pod: make_pod("fakePod", "fakeContainerBug113537_2", "10000m", "10000m"),
            hint: None,
            want: Ok("1-5,7-11".into()),
        },
    ];
    for case in &smt_align {
        run_add(case);
    }

    let align_by_socket = vec![
        AddCase {
            name: "Align by socket: true, cpu's within same socket of numa in hint are part of allocation",
            topo: dual_socket_multi_numa_ht,
            reserved: Reserved::Count(1),
            options: &[("align-by-socket", "true")],
            state: st(&[], "2,11,21-22"),
            pod: make_pod("fakePod", "fakeContainer2", "2000m", "2000m"),
            hint: Some(&[0, 2]),
            want: Ok("2,11".into()),
        },
        AddCase {
            name: "Align by socket: false, cpu's are taken strictly from NUMA nodes in hint",
            topo: dual_socket_multi_numa_ht,
            reserved: Reserved::Count(1),
            options: &[("align-by-socket", "false")],
            state: st(&[], "2,11,21-22"),
            pod: make_pod("fakePod", "fakeContainer2", "2000m", "2000m"),
            hint: Some(&[0, 2]),
            want: Ok("2,21".into()),
        },
    ];
    for case in &align_by_socket {
        run_add(case);
    }
}

// ------------------------------------ reuse, no reuse, remove, allocateCPUs

#[test]
fn test_static_policy_reuse_cpus() {
    // "SingleSocketHT, DeAllocOneInitContainer"
    let t = single_socket_ht();
    let mut p = with_state(
        StaticPolicy::new(t, Cpus::new(), StaticOptions::default()),
        (&[], "0-7"),
    );
    let pod = make_multi(&[("4000m", "4000m", false)], &[("2000m", "2000m")]);
    for c in pod.init_containers.iter().chain(&pod.containers) {
        let _ = p.allocate(&pod, c, None);
    }
    assert_eq!(show(&p.default_set), "2-3,6-7");
    p.remove(&pod.uid, "initContainer-0");
    assert_eq!(show(&p.default_set), "1-3,5-7");
    assert!(!p.assignments[&pod.uid].contains_key("initContainer-0"));
}

#[test]
fn test_static_policy_do_not_reuse_cpus() {
    // "SingleSocketHT, Don't reuse CPUs of a restartable init container"
    let t = single_socket_ht();
    let mut p = with_state(
        StaticPolicy::new(t, Cpus::new(), StaticOptions::default()),
        (&[], "0-7"),
    );
    let pod = make_multi(&[("4000m", "4000m", true)], &[("2000m", "2000m")]);
    for c in pod.init_containers.iter().chain(&pod.containers) {
        p.allocate(&pod, c, None).unwrap();
    }
    assert_eq!(show(&p.default_set), "3,7");
}

#[test]
fn test_static_policy_remove() {
    let cases: &[(&str, &str, State<'_>, &str)] = &[
        (
            "SingleSocketHT, DeAllocOneContainer",
            "fakeContainer1",
            (&[("fakePod", "fakeContainer1", "1-3")], "4-7"),
            "1-7",
        ),
        (
            "SingleSocketHT, DeAllocOneContainer, BeginEmpty",
            "fakeContainer1",
            (
                &[
                    ("fakePod", "fakeContainer1", "1-3"),
                    ("fakePod", "fakeContainer2", "4-7"),
                ],
                "",
            ),
            "1-3",
        ),
        (
            "SingleSocketHT, DeAllocTwoContainer",
            "fakeContainer1",
            (
                &[
                    ("fakePod", "fakeContainer1", "1,3,5"),
                    ("fakePod", "fakeContainer2", "2,4"),
                ],
                "6-7",
            ),
            "1,3,5-7",
        ),
        (
            "SingleSocketHT, NoDeAlloc",
            "fakeContainer2",
            (&[("fakePod", "fakeContainer1", "1,3,5")], "2,4,6-7"),
            "2,4,6-7",
        ),
    ];
    for (name, c, state, want) in cases {
        let t = single_socket_ht();
        let mut p = with_state(
            StaticPolicy::new(t, Cpus::new(), StaticOptions::default()),
            *state,
        );
        p.remove("fakePod", c);
        assert_eq!(show(&p.default_set), *want, "{name}");
        assert!(
            p.assignments
                .get("fakePod")
                .is_none_or(|m| !m.contains_key(*c)),
            "{name}"
        );
    }
}

#[test]
fn test_topology_aware_allocate_cpus() {
    let cases: &[(&str, usize, Option<&[u32]>, &str)] = &[
        ("Request 2 CPUs, No BitMask", 2, None, "0,6"),
        ("Request 2 CPUs, BitMask on Socket 0", 2, Some(&[0]), "0,6"),
        ("Request 2 CPUs, BitMask on Socket 1", 2, Some(&[1]), "1,7"),
        (
            "Request 8 CPUs, BitMask on Socket 0",
            8,
            Some(&[0]),
            "0-2,4,6-8,10",
        ),
        (
            "Request 8 CPUs, BitMask on Socket 1",
            8,
            Some(&[1]),
            "0-1,3,5-7,9,11",
        ),
    ];
    for (name, n, m, want) in cases {
        let mut p = StaticPolicy::new(dual_socket_ht(), Cpus::new(), StaticOptions::default());
        let got = p.allocate_cpus(*n, m.map(mask), &Cpus::new()).unwrap();
        assert_eq!(show(&got), *want, "{name}");
    }
}

// ------------------------------------------------- with --reserved-cpus

/// As `test_static_policy_start`: the kubelet refuses, topomgr reconciles.
#[test]
fn test_static_policy_start_with_resv_list() {
    // (description, reserved, strict, saved default, the kubelet's refusal
    //  or "", topomgr's shared pool)
    type Case<'a> = (&'a str, &'a str, bool, &'a str, &'a str, &'a str);
    let cases: &[Case<'_>] = &[
        ("empty cpuset", "0-1", false, "", "", "0-11"),
        (
            "empty cpuset with StrictCPUReservationOption enabled",
            "0-1",
            true,
            "",
            "",
            "2-11",
        ),
        (
            "reserved cores 0 & 1 are not present in available cpuset",
            "0-1",
            false,
            "2-5",
            "not all reserved cpus: \"0-1\" are present in defaultCpuSet: \"2-5\"",
            "0-11",
        ),
        (
            "reserved cores 0 & 1 are present in available cpuset with StrictCPUReservationOption enabled",
            "0-1",
            true,
            "0-5",
            "some of strictly reserved cpus: \"0-1\" are present in defaultCpuSet: \"0-5\"",
            "2-11",
        ),
    ];
    for (name, reserved, strict, default, _kubelet_refuses, want) in cases {
        let opts = if *strict {
            options(&[("strict-cpu-reservation", "true")])
        } else {
            StaticOptions::default()
        };
        let mut p = StaticPolicy::new(dual_socket_ht(), set(reserved), opts);
        let cp = Checkpoint {
            default_cpu_set: to_cpuset(&if default.is_empty() {
                Cpus::new()
            } else {
                set(default)
            }),
            ..p.checkpoint()
        };
        let out = p.reconcile(&cp);
        assert_eq!(out, Default::default(), "{name}");
        assert_eq!(show(&p.default_set), *want, "{name}");
    }
}

#[test]
fn test_static_policy_add_with_resv_list() {
    let st = |a: &[(&'static str, &'static str, &str)], d: &str| {
        (
            a.iter().map(|(p, c, s)| (*p, *c, s.to_string())).collect(),
            d.to_string(),
        )
    };
    let cases = vec![
        AddCase {
            // requested=8, available=7
            name: "GuPodSingleCore, SingleSocketHT, ExpectError",
            topo: single_socket_ht,
            reserved: Reserved::List("0"),
            options: &[],
            state: st(&[], "0-7"),
            pod: make_pod("fakePod", "fakeContainer2", "8000m", "8000m"),
            hint: None,
            want: Err("not enough free CPUs: requested 8, 7 free on NUMA node 0"),
        },
        AddCase {
            name: "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
            topo: single_socket_ht,
            reserved: Reserved::List("0-1"),
            options: &[],
            state: st(&[], "0-7"),
            pod: make_pod("fakePod", "fakeContainer2", "1000m", "1000m"),
            hint: None,
            want: Ok("4".into()),
        },
        AddCase {
            name: "GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore",
            topo: single_socket_ht,
            reserved: Reserved::List("0-1"),
            options: &[],
            state: st(&[("fakePod", "fakeContainer100", "2-3,6-7")], "0-1,4-5"),
            pod: make_pod("fakePod", "fakeContainer3", "2000m", "2000m"),
            hint: None,
            want: Ok("4-5".into()),
        },
    ];
    for case in &cases {
        run_add(case);
    }
}

// ------------------------------------------------ TestStaticPolicyOptions

#[test]
fn test_static_policy_options() {
    let parse = |pairs: &[(&str, &str)]| {
        let raw = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
            .collect();
        StaticOptions::parse(&raw)
    };
    assert_eq!(parse(&[]), Ok(StaticOptions::default()), "empty args");
    assert!(parse(&[("badValue1", "")]).is_err(), "bad single arg");
    assert!(
        parse(&[("badValue1", ""), ("badvalue2", "aaaa")]).is_err(),
        "bad multiple arg"
    );
    assert_eq!(
        parse(&[("full-pcpus-only", "true")]),
        Ok(StaticOptions {
            full_pcpus_only: true,
            ..StaticOptions::default()
        }),
        "good arg"
    );
    assert_eq!(
        parse(&[("full-pcpus-only", "enabled!")])
            .unwrap_err()
            .to_string(),
        "bad value for option \"full-pcpus-only\": strconv.ParseBool: parsing \"enabled!\": invalid syntax",
        "good arg, bad value"
    );
    assert!(
        parse(&[("full-pcpus-only", "1"), ("badvalue2", "lorem ipsum")]).is_err(),
        "bad arg intermixed"
    );
}

// --------------------------------------------- TestStaticPolicyAllocatePod

#[test]
fn test_static_policy_allocate_pod() {
    // (description, pod, expected assignments or error, expected default set)
    type Case<'a> = (
        &'a str,
        PodView,
        Result<Vec<(&'a str, &'a str)>, &'a str>,
        &'a str,
    );
    let one = |uid: &str, c: &str| pod_level(uid, "2", "2", &[], &[(c, "1", "1", false)]);
    let cases: Vec<Case<'_>> = vec![
        (
            "should successfully allocate CPUs for a guaranteed pod with pod-level resources",
            one("pod1", "container1"),
            Ok(vec![("container1", "2")]),
            "0-1,3-7,9-11",
        ),
        (
            "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and guaranteed container, PodLevelResourceManagers enabled",
            one("gu-pod-level-resources", "gu-container"),
            Ok(vec![("gu-container", "2")]),
            "0-1,3-7,9-11",
        ),
        (
            "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and non-guaranteed container, PodLevelResourceManagers enabled",
            pod_level("gu-pod-level-resources", "1", "1", &[], &[("ngu-container", "", "", false)]),
            Ok(vec![("ngu-container", "6")]),
            "0-5,7-11",
        ),
        (
            "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and mix of guaranteed and non-guaranteed containers, PodLevelResourceManagers enabled",
            pod_level(
                "gu-pod-level-mix-ctn",
                "3",
                "3",
                &[],
                &[
                    ("gu-container-1", "1", "1", false),
                    ("gu-container-2", "1", "1", false),
                    ("ngu-container", "", "", false),
                ],
            ),
            Ok(vec![
                ("gu-container-1", "6"),
                ("gu-container-2", "2"),
                ("ngu-container", "8"),
            ]),
            "0-1,3-5,7,9-11",
        ),
        (
            "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and mix of guaranteed standard and init containers, PodLevelResourceManagers enabled",
            pod_level(
                "gu-pod-level-gu-init-ctn",
                "2",
                "2",
                &[
                    ("gu-init-container-1", "1", "1", false),
                    ("gu-init-container-2", "1", "1", false),
                ],
                &[
                    ("gu-container-1", "1", "1", false),
                    ("gu-container-2", "1", "1", false),
                ],
            ),
            Ok(vec![
                ("gu-init-container-1", "2"),
                ("gu-init-container-2", "2"),
                ("gu-container-1", "2"),
                ("gu-container-2", "8"),
            ]),
            "0-1,3-7,9-11",
        ),
        (
            "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and mix of guaranteed standard and guaranteed restartable and non-guaranteed standard init containers, PodLevelResourceManagers enabled",
            pod_level(
                "gu-pod-level-gu-init-ctn",
                "3",
                "3",
                &[
                    ("ngu-init-container-1", "", "", false),
                    ("gu-init-restartable-2", "1", "1", true),
                    ("ngu-init-container-3", "", "", false),
                ],
                &[
                    ("gu-container-1", "1", "1", false),
                    ("ngu-container-2", "", "", false),
                ],
            ),
            Ok(vec![
                ("ngu-init-container-1", "2,6,8"),
                ("gu-init-restartable-2", "6"),
                ("ngu-init-container-3", "2,8"),
                ("gu-container-1", "2"),
                ("ngu-container-2", "8"),
            ]),
            "0-1,3-5,7,9-11",
        ),
        (
            "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and mix of guaranteed standard and non-guaranteed restartable init containers, PodLevelResourceManagers enabled",
            pod_level(
                "gu-pod-level-gu-init-ctn",
                "3",
                "3",
                &[
                    ("ngu-init-container-1", "", "", false),
                    ("ngu-init-restartable-2", "", "", true),
                    ("ngu-init-container-3", "", "", false),
                ],
                &[
                    ("gu-container-1", "1", "1", false),
                    ("ngu-container-2", "", "", false),
                ],
            ),
            Ok(vec![
                ("ngu-init-container-1", "2,6,8"),
                ("ngu-init-restartable-2", "2,8"),
                ("ngu-init-container-3", "2,6,8"),
                ("gu-container-1", "6"),
                ("ngu-container-2", "2,8"),
            ]),
            "0-1,3-5,7,9-11",
        ),
        (
            "scope: pod, should reject a pod that would result in an empty pod shared pool",
            pod_level(
                "gu-pod-level-empty-pod-shared-pool",
                "2",
                "2",
                &[],
                &[
                    ("gu-container-1", "1", "1", false),
                    ("gu-container-2", "1", "1", false),
                    ("ngu-container", "", "", false),
                ],
            ),
            Err("pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"),
            "0-11",
        ),
        (
            "scope: pod, should not allocate exclusive CPUs to a non-guaranteed pod with pod-level resources and guaranteed containers, PodLevelResourceManagers enabled",
            pod_level(
                "ngu-pod-level-empty-pod-shared-pool",
                "2",
                "1",
                &[],
                &[("gu-container-1", "1", "1", false)],
            ),
            Ok(vec![]),
            "0-11",
        ),
    ];
    for (name, pod, want, default) in cases {
        let mut p = StaticPolicy::new(dual_socket_ht(), set("0"), StaticOptions::default())
            .with_pod_level_resource_managers(true);
        match (p.allocate_pod(&pod, Some(mask(&[0]))), want) {
            (Ok(()), Ok(want)) => {
                let got: Vec<(String, String)> = p
                    .assignments
                    .get(&pod.uid)
                    .map(|m| m.iter().map(|(c, s)| (c.clone(), show(s))).collect())
                    .unwrap_or_default();
                let mut want: Vec<(String, String)> = want
                    .iter()
                    .map(|(c, s)| (c.to_string(), s.to_string()))
                    .collect();
                want.sort();
                assert_eq!(got, want, "{name}");
            }
            (Err(e), Err(want)) => {
                assert_eq!(e.to_string(), want, "{name}");
                assert_eq!(e.reason(), "EmptyPodSharedPoolError", "{name}");
                assert!(p.assignments.is_empty() && p.pod_sets.is_empty(), "{name}");
            }
            (got, want) => panic!("{name}: want {want:?}, got {got:?}"),
        }
        assert_eq!(show(&p.default_set), default, "{name}");
    }
}

#[test]
fn test_smt_alignment_error_text() {
    use crate::error::CpuError;
    // "base SMT alignment error": the kubelet's `SMT Alignment Error:
    // requested 15 cpus not multiple cpus per core = 4`.
    assert_eq!(
        CpuError::SmtNotMultiple {
            requested: 15,
            per_core: 4
        }
        .to_string(),
        "SMT alignment: request of 15 CPUs is not a multiple of 4 threads per core"
    );
    // "base SMT alignment error, no physical CPUs, explicit flag": `not
    // enough free physical CPUs: available physical CPUs = 0, requested
    // CPUs = 4, CPUs per core = 2`. (The "missing flag" case is a Go
    // zero-value artefact: the two errors are different types here.)
    assert_eq!(
        CpuError::SmtNotEnoughPhysical {
            requested: 4,
            available: 0,
            per_core: 2
        }
        .to_string(),
        "SMT alignment: request of 4 CPUs needs whole cores, but only 0 free CPUs lie outside \
         the cores of the reserved CPUs (2 threads per core)"
    );
}

#[test]
fn test_validate_pod_scope_resources() {
    let cases: Vec<(&str, PodView, bool)> = vec![
        (
            "Valid: Pod-level != Guaranteed containers, has podSharedPool containers, PLR: Enabled, PLRM: Enabled",
            pod_level("p", "4", "4", &[], &[("c1", "2", "2", false), ("c2", "", "", false)]),
            true,
        ),
        (
            "Valid: Only Guaranteed containers, PLR: Enabled, PLRM: Enabled",
            pod_level("p", "4", "4", &[], &[("c1", "2", "2", false), ("c2", "2", "2", false)]),
            true,
        ),
        (
            "Valid: Only podSharedPool containers, PLR: Enabled, PLRM: Enabled",
            pod_level("p", "4", "4", &[], &[("c1", "", "", false), ("c2", "", "", false)]),
            true,
        ),
        (
            "Valid: Pod-level == Guaranteed containers, has podSharedPool containers with request, PLR: Enabled, PLRM: Enabled",
            pod_level(
                "p",
                "6",
                "6",
                &[],
                &[
                    ("c1", "3", "3", false),
                    ("c2", "2", "2", false),
                    ("c3", "500m", "1000m", false),
                    ("c4", "", "", false),
                ],
            ),
            true,
        ),
        (
            "Failure: Pod-level == Guaranteed containers, has podSharedPool containers, PLR: Enabled, PLRM: Enabled",
            pod_level(
                "p",
                "5",
                "5",
                &[],
                &[("c1", "3", "3", false), ("c2", "2", "2", false), ("c3", "", "", false)],
            ),
            false,
        ),
        (
            "Valid: Pod-level resources with standard and restartable init containers, PLR: Enabled, PLRM: Enabled",
            pod_level(
                "p",
                "2",
                "2",
                &[
                    ("init-container1", "1", "1", false),
                    ("restartable-init-container1", "1", "1", true),
                ],
                &[("container1", "", "", false)],
            ),
            true,
        ),
        (
            "Valid: Pod-level resources equal init and standard container resources, PLR: Enabled, PLRM: Enabled",
            pod_level(
                "p",
                "2",
                "2",
                &[("init-container1", "2", "2", false)],
                &[("container1", "2", "2", false)],
            ),
            true,
        ),
        (
            "Failure: Pod-level resources with shared standard init container and no available pool, PLR: Enabled, PLRM: Enabled",
            pod_level(
                "p",
                "2",
                "2",
                &[
                    ("restartable-init-container1", "2", "2", true),
                    ("init-container1", "", "", false),
                ],
                &[],
            ),
            false,
        ),
        (
            "Valid: Pod-level resources with shared standard init container and no available pool, PLR: Enabled, PLRM: Enabled",
            pod_level(
                "p",
                "2",
                "2",
                &[
                    ("init-container1", "", "", false),
                    ("restartable-init-container1", "2", "2", true),
                ],
                &[],
            ),
            true,
        ),
        (
            "Failure: Pod-level == Restartable guaranteed init containers, has podSharedPool containers, PLR: Enabled, PLRM: Enabled",
            pod_level(
                "p",
                "2",
                "2",
                &[
                    ("restartable-init-container1", "2", "2", true),
                    ("restartable-init-container2", "", "", true),
                ],
                &[],
            ),
            false,
        ),
        (
            "Valid: Pod-level resources with only restartable one init container and one standard container, PLR: Enabled, PLRM: Enabled",
            pod_level(
                "p",
                "2",
                "2",
                &[("restartable-init-container1", "1", "1", true)],
                &[("container1", "1", "1", false)],
            ),
            true,
        ),
    ];
    for (name, pod, valid) in cases {
        let p = StaticPolicy::new(single_socket_ht(), Cpus::new(), StaticOptions::default())
            .with_pod_level_resource_managers(true);
        assert_eq!(
            p.validate_pod_scope_resources(&pod).is_ok(),
            valid,
            "{name}"
        );
    }
}

// ------------------------------------------------- topology_hints_test.go

#[test]
fn test_pod_guaranteed_cpus() {
    let zero = ("0", "0");
    let two = ("2", "2");
    let five = ("5", "5");
    let plain = |v: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str, bool)> {
        v.iter().map(|(r, l)| (*r, *l, false)).collect()
    };
    let cases: Vec<(&str, PodView, usize)> = vec![
        ("TestCase01: if requestedCPU == 0, Pod is not Guaranteed Qos", make_multi(&plain(&[zero]), &[zero]), 0),
        ("TestCase02: if requestedCPU == 0, Pod is not Guaranteed Qos", make_multi(&plain(&[zero]), &[two]), 0),
        ("TestCase03: if requestedCPU == 0, Pod is not Guaranteed Qos", make_multi(&plain(&[two]), &[zero]), 0),
        ("TestCase04: Guaranteed Pod requests 2 CPUs", make_multi(&plain(&[two]), &[two]), 2),
        ("TestCase05: Guaranteed Pod requests 5 CPUs", make_multi(&plain(&[five]), &[five]), 5),
        (
            "TestCase06: The number of CPUs requested By app is bigger than the number of CPUs requested by init",
            make_multi(&plain(&[two]), &[five]),
            5,
        ),
        (
            "TestCase07: The number of CPUs requested By init is bigger than the number of CPUs requested by app",
            make_multi(&plain(&[five]), &[two]),
            5,
        ),
        (
            "TestCase08: Sum of CPUs requested by multiple containers",
            make_multi(&plain(&[two, ("4", "4")]), &[two, ("4", "4")]),
            6,
        ),
        (
            "TestCase09: restartable init container + regular container",
            make_multi(&[("1", "1", true)], &[("1", "1")]),
            2,
        ),
        (
            "TestCase09: multiple restartable init containers",
            make_multi(
                &[("5", "5", false), ("1", "1", true), ("2", "2", true), ("3", "3", true)],
                &[("1", "1")],
            ),
            7,
        ),
        (
            "TestCase11: multiple restartable and regular init containers",
            make_multi(
                &[
                    ("5", "5", false),
                    ("1", "1", true),
                    ("2", "2", true),
                    ("5", "5", false),
                    ("3", "3", true),
                ],
                &[("1", "1")],
            ),
            8,
        ),
        (
            "TestCase12: restartable init, regular init and regular container",
            make_multi(&[("10", "10", true), ("200", "200", false)], &[("100", "100")]),
            210,
        ),
    ];
    for (name, pod, want) in cases {
        assert_eq!(pod_guaranteed_cpus(&pod, false), want, "{name}");
    }
}

/// `returnMachineInfo`: node 0 (socket 0) cores {0,6}, {1,7}, {2,8};
/// node 1 (socket 1) cores {3,9}, {4,10}, {5,11}.
fn hints_machine() -> CpuTopology {
    topo(
        (0..12)
            .map(|i| {
                let core = i % 6;
                let node = core / 3;
                cpu(i, core, node, node, node)
            })
            .collect(),
    )
}

/// `returnTestCases`: (name, request, assignment of the container, default
/// set, expected hints; `None` for no hints at all).
/// (name, request, assignment, default set, expected hints).
type HintCase = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Option<Vec<&'static str>>,
);

fn hint_cases() -> Vec<HintCase> {
    vec![
        (
            "Request 2 CPUs, 4 available on NUMA 0, 6 available on NUMA 1",
            "2",
            "",
            "2-11",
            Some(vec!["0:true", "1:true", "0-1:false"]),
        ),
        (
            "Request 5 CPUs, 4 available on NUMA 0, 6 available on NUMA 1",
            "5",
            "",
            "2-11",
            Some(vec!["1:true", "0-1:false"]),
        ),
        (
            "Request 7 CPUs, 4 available on NUMA 0, 6 available on NUMA 1",
            "7",
            "",
            "2-11",
            Some(vec!["0-1:true"]),
        ),
        (
            "Request 11 CPUs, 4 available on NUMA 0, 6 available on NUMA 1",
            "11",
            "",
            "2-11",
            Some(vec![]),
        ),
        (
            "Request 2 CPUs, 1 available on NUMA 0, 1 available on NUMA 1",
            "2",
            "",
            "0,3",
            Some(vec!["0-1:false"]),
        ),
        (
            "Request more CPUs than available",
            "5",
            "",
            "0-3",
            Some(vec![]),
        ),
        (
            "Regenerate Single-Node NUMA Hints if already allocated 1/2",
            "2",
            "0,6",
            "",
            Some(vec!["0:true", "0-1:false"]),
        ),
        (
            "Regenerate Single-Node NUMA Hints if already allocated 1/2",
            "2",
            "3,9",
            "",
            Some(vec!["1:true", "0-1:false"]),
        ),
        (
            "Regenerate Cross-NUMA Hints if already allocated",
            "11",
            "0-10",
            "",
            Some(vec!["0-1:true"]),
        ),
        (
            "Requested less than already allocated",
            "2",
            "0,3,6,9",
            "",
            Some(vec![]),
        ),
        (
            "Requested more than already allocated",
            "11",
            "0,3,6,9",
            "",
            Some(vec![]),
        ),
    ]
}

fn hints_policy(assigned: &str, default: &str) -> StaticPolicy {
    let assignments: &[(&str, &str, &str)] = &[("fakePod", "fakeContainer", assigned)];
    let state: State<'_> = (
        if assigned.is_empty() {
            &[]
        } else {
            assignments
        },
        default,
    );
    with_state(
        StaticPolicy::new(hints_machine(), Cpus::new(), StaticOptions::default()),
        state,
    )
}

#[test]
fn test_get_topology_hints() {
    for (name, req, assigned, default, want) in hint_cases() {
        let p = hints_policy(assigned, default);
        let pod = make_pod("fakePod", "fakeContainer", req, req);
        let got = sorted_hints(p.hints(&pod, &pod.containers[0]).unwrap(), &p.topo);
        assert_eq!(got, want.map(|w| strings(&w)), "{name}");
    }
}

#[test]
fn test_get_pod_topology_hints() {
    for (name, req, assigned, default, want) in hint_cases() {
        let p = hints_policy(assigned, default);
        let pod = make_pod("fakePod", "fakeContainer", req, req);
        let got = sorted_hints(p.pod_hints(&pod).unwrap(), &p.topo);
        assert_eq!(got, want.map(|w| strings(&w)), "{name}");
    }
}

#[test]
fn test_get_pod_topology_hints_with_policy_options() {
    let cases: &[(&str, &str, &str, &str, &[&str])] = &[
        (
            "AlignBySocket:false, Preferred hints does not contains socket aligned hints",
            "2",
            "2-3,11",
            "false",
            &[
                "0:true", "0-1:false", "0,2:false", "0,3:false", "0-2:false", "0-1,3:false",
                "0,2-3:false", "0-3:false",
            ],
        ),
        (
            "AlignBySocket:true Preferred hints contains socket aligned hints",
            "2",
            "2-3,11",
            "true",
            &[
                "0:true", "0-1:true", "0,2:false", "0,3:false", "0-2:false", "0-1,3:false",
                "0,2-3:false", "0-3:false",
            ],
        ),
        (
            "AlignBySocket:true Preferred hints are spread across socket since 2 sockets are required",
            "41",
            "0-28,40-57",
            "true",
            &["0-2:true", "0-3:true"],
        ),
    ];
    for (name, req, default, by_socket, want) in cases {
        let p = with_state(
            StaticPolicy::new(
                dual_socket_multi_numa_ht(),
                Cpus::new(),
                options(&[("align-by-socket", by_socket)]),
            ),
            (&[], default),
        );
        let pod = make_pod("fakePod", "fakeContainer", req, req);
        let got = sorted_hints(p.pod_hints(&pod).unwrap(), &p.topo);
        assert_eq!(got, Some(strings(want)), "{name}");
    }
}

// ------------------------------------------------ policy_options_test.go

#[test]
fn test_policy_defaults_available() {
    let parse = |name: &str| {
        let raw = BTreeMap::from([(name.to_owned(), serde_json::Value::String("true".into()))]);
        StaticOptions::parse(&raw)
    };
    assert!(parse("this-option-does-not-exist").is_err());
    assert!(parse("full-pcpus-only").is_ok());
}

#[test]
fn test_validate_static_policy_options() {
    let validate = |pairs: &[(&str, &str)], t: CpuTopology| options(pairs).validate(&t).is_ok();
    assert!(
        validate(&[("full-pcpus-only", "true")], dual_socket_multi_numa_ht()),
        "Align by socket not enabled"
    );
    assert!(
        !validate(
            &[("align-by-socket", "true")],
            multi_socket_dual_socket_per_numa_ht()
        ),
        "Align by socket enabled with num_sockets > num_numa"
    );
    for name in [
        "Align by socket enabled: with topology manager None policy",
        "Align by socket enabled: with topology manager best-effort policy",
        "Align by socket enabled: with topology manager restricted policy",
    ] {
        assert!(
            validate(&[("align-by-socket", "true")], dual_socket_multi_numa_ht()),
            "{name}"
        );
    }
}

#[test]
fn test_policy_options_compatibility() {
    let parse = |pairs: &[(&str, &str)]| {
        let raw = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
            .collect();
        StaticOptions::parse(&raw).is_ok()
    };
    assert!(
        parse(&[("full-pcpus-only", "true")]),
        "FullPhysicalCPUsOnly set to true only"
    );
    assert!(
        parse(&[("distribute-cpus-across-cores", "true")]),
        "DistributeCPUsAcrossCores set to true only"
    );
    assert!(
        !parse(&[
            ("full-pcpus-only", "true"),
            ("distribute-cpus-across-cores", "true")
        ]),
        "FullPhysicalCPUsOnly and DistributeCPUsAcrossCores options can not coexist"
    );
}
