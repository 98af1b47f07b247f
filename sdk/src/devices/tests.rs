//! The kubelet Device Manager's own test tables, ported
//! (`pkg/kubelet/cm/devicemanager/topology_hints_test.go`: `getCommonTestCases`,
//! `getPodScopeTestCases`, `TestTopologyAlignedAllocation`,
//! `TestGetPreferredAllocationParameters`, `TestGetPodDeviceRequest`;
//! `manager_test.go`: `TestFilterByAffinity`, `TestPodContainerDeviceAllocation`,
//! `TestPodContainerDeviceToAllocate`, `TestInitContainerDeviceAllocation`,
//! `TestRestartableInitContainerDeviceAllocation`), plus the toolkit's own
//! cases: compact hints against a literal port of the kubelet's enumeration,
//! sparse node ids, re-admission, release, checkpoint, inventory.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::allocate::filter_by_affinity;
use super::*;
use crate::testkit::{self, container, hint, hint_strings, sidecar};
use crate::{
    for_each_mask_in_kubelet_order, ContainerView, Machine, NumaMask, NumaNodeId, PodView,
    PreferredAllocationRequest, ProviderError, ProviderHints, TopologyHint,
};

fn n(id: u8) -> Option<NumaNodeId> {
    Some(NumaNodeId::from(id))
}

fn dev(id: &str, numa: u8) -> Device {
    Device::new(id, n(numa))
}

fn nodev(id: &str) -> Device {
    Device::new(id, None)
}

fn manager(machine: &Machine, resources: Vec<(&str, Vec<Device>)>) -> DeviceManager {
    let devices = resources
        .into_iter()
        .fold(Devices::new(), |d, (r, list)| d.resource(r, list));
    DeviceManager::new(machine, devices).unwrap_or_else(|e| panic!("manager: {e}"))
}

/// Records that (`pod`, `container`) holds `ids` of `resource` (the kubelet
/// tests' `podDevices.insert` + `allocatedDevices`).
fn hold(m: &mut DeviceManager, pod: &str, container: &str, resource: &str, ids: &[&str]) {
    let pool = m.pools.get_mut(resource).expect("resource");
    let positions: Vec<usize> = ids.iter().map(|id| pool.index[*id]).collect();
    for &i in &positions {
        pool.holders[i] += 1;
    }
    m.assignments
        .entry((pod.to_owned(), container.to_owned()))
        .or_default()
        .entry(resource.to_owned())
        .or_default()
        .extend(positions);
}

fn strings(h: &ProviderHints, resource: &str) -> Option<Vec<String>> {
    hint_strings(h, resource, &[0, 1])
}

fn one_pod(uid: &str, c: ContainerView) -> PodView {
    PodView::new(uid, uid, "default", crate::QosClass::Guaranteed).with_containers(vec![c])
}

/// The hooks of the kubelet tests' mock endpoint: a scripted preferred
/// answer and a record of every call.
#[derive(Default)]
struct Scripted {
    answer: Vec<String>,
    calls: Vec<(Vec<String>, Vec<String>, usize)>,
    env_key: Option<&'static str>,
    fail_env: bool,
}

impl DeviceHooks for Scripted {
    fn preferred_allocation(
        &mut self,
        _resource: &str,
        available: &[&Device],
        must_include: &[&Device],
        size: usize,
    ) -> Result<Vec<String>, ProviderError> {
        let ids = |d: &[&Device]| d.iter().map(|d| d.id.clone()).collect::<Vec<_>>();
        self.calls.push((ids(available), ids(must_include), size));
        Ok(self.answer.clone())
    }

    fn environment(
        &self,
        resource: &str,
        devices: &[&Device],
    ) -> Result<BTreeMap<String, String>, ProviderError> {
        if self.fail_env {
            return Err(ProviderError::new(
                "DeviceBusy",
                format!("{resource} is busy"),
            ));
        }
        let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
        Ok(self
            .env_key
            .map(|k| BTreeMap::from([(k.to_owned(), ids.join(","))]))
            .unwrap_or_default())
    }
}

// ------------------------------------------------- topology_hints_test.go

struct HintCase {
    description: &'static str,
    request: Vec<(&'static str, u64)>,
    devices: Vec<(&'static str, Vec<Device>)>,
    /// (pod, container, resource, devices)
    allocated: Vec<(&'static str, &'static str, &'static str, Vec<&'static str>)>,
    expected: Vec<(&'static str, Option<Vec<&'static str>>)>,
}

fn four(a: u8, b: u8, c: u8, d: u8) -> Vec<Device> {
    vec![
        dev("Dev1", a),
        dev("Dev2", b),
        dev("Dev3", c),
        dev("Dev4", d),
    ]
}

/// `getCommonTestCases`: the pod "fakePod" with the one container
/// "fakeContainer" asking for `request`.
fn common_cases() -> Vec<HintCase> {
    vec![
        HintCase {
            description: "Single Request, no alignment",
            request: vec![("testdevice", 1)],
            devices: vec![(
                "testdevice",
                vec![nodev("Dev1"), nodev("Dev2"), nodev("Dev3"), nodev("Dev4")],
            )],
            allocated: vec![],
            expected: vec![("testdevice", None)],
        },
        HintCase {
            description: "Single Request, only one with alignment",
            request: vec![("testdevice", 1)],
            devices: vec![("testdevice", vec![nodev("Dev1"), dev("Dev2", 1)])],
            allocated: vec![],
            expected: vec![("testdevice", Some(vec!["1:true", "0-1:false"]))],
        },
        HintCase {
            description: "Single Request, one device per socket",
            request: vec![("testdevice", 1)],
            devices: vec![("testdevice", vec![dev("Dev1", 0), dev("Dev2", 1)])],
            allocated: vec![],
            expected: vec![("testdevice", Some(vec!["0:true", "1:true", "0-1:false"]))],
        },
        HintCase {
            description: "Request for 2, one device per socket",
            request: vec![("testdevice", 2)],
            devices: vec![("testdevice", vec![dev("Dev1", 0), dev("Dev2", 1)])],
            allocated: vec![],
            expected: vec![("testdevice", Some(vec!["0-1:true"]))],
        },
        HintCase {
            description: "Request for 2, 2 devices per socket",
            request: vec![("testdevice", 2)],
            devices: vec![("testdevice", four(0, 1, 0, 1))],
            allocated: vec![],
            expected: vec![("testdevice", Some(vec!["0:true", "1:true", "0-1:false"]))],
        },
        HintCase {
            description: "Request for 2, optimal on 1 NUMA node, forced cross-NUMA",
            request: vec![("testdevice", 2)],
            devices: vec![("testdevice", four(0, 1, 0, 1))],
            allocated: vec![(
                "fakePod",
                "fakeOtherContainer",
                "testdevice",
                vec!["Dev1", "Dev2"],
            )],
            expected: vec![("testdevice", Some(vec!["0-1:false"]))],
        },
        HintCase {
            description: "2 device types, mixed configuration",
            request: vec![("testdevice1", 2), ("testdevice2", 1)],
            devices: vec![
                ("testdevice1", four(0, 1, 0, 1)),
                ("testdevice2", vec![dev("Dev1", 0)]),
            ],
            allocated: vec![],
            expected: vec![
                ("testdevice1", Some(vec!["0:true", "1:true", "0-1:false"])),
                ("testdevice2", Some(vec!["0:true", "0-1:false"])),
            ],
        },
        HintCase {
            description: "Single device type, more requested than available",
            request: vec![("testdevice", 6)],
            devices: vec![("testdevice", four(0, 0, 1, 1))],
            allocated: vec![],
            expected: vec![("testdevice", Some(vec![]))],
        },
        HintCase {
            description: "Single device type, all already allocated to container",
            request: vec![("testdevice", 2)],
            devices: vec![("testdevice", vec![dev("Dev1", 0), dev("Dev2", 0)])],
            allocated: vec![(
                "fakePod",
                "fakeContainer",
                "testdevice",
                vec!["Dev1", "Dev2"],
            )],
            expected: vec![("testdevice", Some(vec!["0:true", "0-1:false"]))],
        },
        HintCase {
            description: "Single device type, less already allocated to container than requested",
            request: vec![("testdevice", 4)],
            devices: vec![("testdevice", four(0, 0, 1, 1))],
            allocated: vec![(
                "fakePod",
                "fakeContainer",
                "testdevice",
                vec!["Dev1", "Dev2"],
            )],
            expected: vec![("testdevice", Some(vec![]))],
        },
        HintCase {
            description: "Single device type, more already allocated to container than requested",
            request: vec![("testdevice", 2)],
            devices: vec![("testdevice", four(0, 0, 1, 1))],
            allocated: vec![(
                "fakePod",
                "fakeContainer",
                "testdevice",
                vec!["Dev1", "Dev2", "Dev3", "Dev4"],
            )],
            expected: vec![("testdevice", Some(vec![]))],
        },
    ]
}

fn setup(case: &HintCase) -> DeviceManager {
    let machine = testkit::machine(2, 1);
    let mut m = manager(&machine, case.devices.clone());
    for (pod, c, r, ids) in &case.allocated {
        hold(&mut m, pod, c, r, ids);
    }
    m
}

fn check(case: &HintCase, got: &ProviderHints) {
    for (resource, want) in &case.expected {
        let want = want
            .as_ref()
            .map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            strings(got, resource),
            want,
            "{}: {resource}",
            case.description
        );
        assert!(
            got.as_ref().is_some_and(|m| m.contains_key(*resource)),
            "{}: {resource} is in the map",
            case.description
        );
    }
}

#[test]
fn get_topology_hints_like_the_kubelet() {
    for case in common_cases() {
        let m = setup(&case);
        let pod = one_pod("fakePod", container("fakeContainer", &case.request));
        let got = m.topology_hints(&pod, &pod.containers[0]).unwrap();
        check(&case, &got);
    }
}

/// `getPodScopeTestCases`, as pods.
fn pod_scope_cases() -> Vec<(HintCase, PodView)> {
    let td = |a: u64, b: u64| -> Vec<(&'static str, u64)> {
        let mut v = Vec::new();
        if a > 0 {
            v.push(("testdevice1", a));
        }
        if b > 0 {
            v.push(("testdevice2", b));
        }
        v
    };
    let devices = || {
        vec![
            ("testdevice1", four(0, 0, 1, 1)),
            ("testdevice2", four(0, 0, 1, 1)),
        ]
    };
    let both = || {
        vec![
            ("testdevice1", Some(vec!["0:true", "1:true", "0-1:false"])),
            ("testdevice2", Some(vec!["0:true", "1:true", "0-1:false"])),
        ]
    };
    let pod = |init: Vec<ContainerView>, apps: Vec<ContainerView>| {
        PodView::new("fakePod", "fakePod", "default", crate::QosClass::Guaranteed)
            .with_init_containers(init)
            .with_containers(apps)
    };
    vec![
        (
            HintCase {
                description: "2 device types, user container only",
                request: vec![],
                devices: devices(),
                allocated: vec![],
                expected: both(),
            },
            pod(
                vec![],
                vec![
                    container("fakeContainer1", &td(2, 0)),
                    container("fakeContainer2", &td(0, 2)),
                    container("fakeContainer3", &[("notRegistered", 2)]),
                ],
            ),
        ),
        (
            HintCase {
                description:
                    "2 device types, request resources for init containers and user container",
                request: vec![],
                devices: devices(),
                allocated: vec![],
                expected: both(),
            },
            pod(
                vec![container("init1", &td(1, 1)), container("init2", &td(1, 2))],
                vec![
                    container("fakeContainer1", &td(1, 1)),
                    container("fakeContainer2", &td(1, 1)),
                    container("fakeContainer3", &[("notRegistered", 1)]),
                ],
            ),
        ),
        (
            HintCase {
                description:
                    "2 device types, user container only, optimal on 1 NUMA node, forced cross-NUMA",
                request: vec![],
                devices: devices(),
                allocated: vec![
                    (
                        "fakeOtherPod",
                        "fakeOtherContainer",
                        "testdevice1",
                        vec!["Dev1", "Dev3"],
                    ),
                    (
                        "fakeOtherPod",
                        "fakeOtherContainer",
                        "testdevice2",
                        vec!["Dev1", "Dev3"],
                    ),
                ],
                expected: vec![
                    ("testdevice1", Some(vec!["0-1:false"])),
                    ("testdevice2", Some(vec!["0-1:false"])),
                ],
            },
            pod(
                vec![],
                vec![
                    container("fakeContainer1", &td(1, 1)),
                    container("fakeContainer2", &td(1, 1)),
                    container("fakeContainer3", &[("notRegistered", 1)]),
                ],
            ),
        ),
    ]
}

#[test]
fn get_pod_topology_hints_like_the_kubelet() {
    for case in common_cases() {
        let m = setup(&case);
        let pod = one_pod("fakePod", container("fakeContainer", &case.request));
        check(&case, &m.pod_topology_hints(&pod).unwrap());
    }
    for (case, pod) in pod_scope_cases() {
        let m = setup(&case);
        let got = m.pod_topology_hints(&pod).unwrap();
        check(&case, &got);
        assert!(
            !got.as_ref().unwrap().contains_key("notRegistered"),
            "{}",
            case.description
        );
    }
}

#[test]
fn a_container_asking_for_no_device_gets_an_empty_map() {
    let m = manager(
        &testkit::machine(2, 1),
        vec![("testdevice", vec![dev("Dev1", 0)])],
    );
    let pod = one_pod("p", container("c", &[("cpu", 1000)]));
    assert_eq!(
        m.topology_hints(&pod, &pod.containers[0]),
        Ok(Some(BTreeMap::new()))
    );
    assert_eq!(m.pod_topology_hints(&pod), Ok(Some(BTreeMap::new())));
}

/// `TestGetPodDeviceRequest`: the pod's device requests are its effective
/// limits.
#[test]
fn pod_device_requests_are_effective_limits() {
    let pod = |init: Vec<Vec<(&str, u64)>>, apps: Vec<Vec<(&str, u64)>>| {
        testkit::pod(
            "p",
            init.iter()
                .enumerate()
                .map(|(i, r)| container(&format!("i{i}"), r))
                .collect(),
            apps.iter()
                .enumerate()
                .map(|(i, r)| container(&format!("a{i}"), r))
                .collect(),
        )
    };
    let cases: Vec<(&str, PodView, u64, u64)> = vec![
        ("empty pod", pod(vec![], vec![]), 0, 0),
        (
            "Init container requests device plugin resource",
            pod(vec![vec![("cpu", 2000), ("gpu", 2)]], vec![]),
            2,
            0,
        ),
        (
            "Init containers request device plugin resource",
            pod(vec![vec![("gpu", 2)], vec![("gpu", 4)]], vec![]),
            4,
            0,
        ),
        (
            "User container requests device plugin resource",
            pod(vec![], vec![vec![("gpu", 2)]]),
            2,
            0,
        ),
        (
            "Init containers and user containers request the same amount",
            pod(
                vec![vec![("gpu", 2), ("nic", 2)], vec![("gpu", 2), ("nic", 2)]],
                vec![vec![("gpu", 1), ("nic", 1)], vec![("gpu", 1), ("nic", 1)]],
            ),
            2,
            2,
        ),
        (
            "Init containers request more than user containers",
            pod(
                vec![vec![("gpu", 2), ("nic", 1)], vec![("gpu", 3), ("nic", 2)]],
                vec![vec![("gpu", 1), ("nic", 1)], vec![("gpu", 1)]],
            ),
            3,
            2,
        ),
        (
            "User containers request more than init containers",
            pod(
                vec![vec![("gpu", 2), ("nic", 1)], vec![("gpu", 2), ("nic", 1)]],
                vec![vec![("gpu", 3), ("nic", 2)], vec![("gpu", 3), ("nic", 2)]],
            ),
            6,
            4,
        ),
    ];
    for (description, pod, gpu, nic) in cases {
        assert_eq!(pod.effective_limit("gpu"), gpu, "{description}");
        assert_eq!(pod.effective_limit("nic"), nic, "{description}");
    }
}

/// `TestTopologyAlignedAllocation`.
#[test]
fn topology_aligned_allocation_like_the_kubelet() {
    struct Case {
        description: &'static str,
        request: u64,
        devices: Vec<Device>,
        hint: &'static str,
        preferred: Vec<&'static str>,
        expected_preferred: Vec<&'static str>,
        expected_alignment: BTreeMap<u8, usize>,
        nodes: u32,
    }
    let range = |from: usize, to: usize, node: u8| -> Vec<Device> {
        (from..to).map(|i| dev(&format!("Dev{i}"), node)).collect()
    };
    let cat = |a: Vec<Device>, b: Vec<Device>| a.into_iter().chain(b).collect::<Vec<_>>();
    let six = || {
        vec![
            dev("Dev1", 0),
            dev("Dev2", 1),
            dev("Dev3", 0),
            dev("Dev4", 1),
            dev("Dev5", 0),
            dev("Dev6", 1),
        ]
    };
    let cases = vec![
        Case {
            description: "Single Request, no alignment",
            request: 1,
            devices: vec![nodev("Dev1"), nodev("Dev2")],
            hint: "0-1:true",
            preferred: vec![],
            expected_preferred: vec![],
            expected_alignment: BTreeMap::new(),
            nodes: 2,
        },
        Case {
            description: "Request for 1, partial alignment",
            request: 1,
            devices: vec![nodev("Dev1"), dev("Dev2", 1)],
            hint: "1:true",
            preferred: vec![],
            expected_preferred: vec![],
            expected_alignment: BTreeMap::from([(1, 1)]),
            nodes: 2,
        },
        Case {
            description: "Single Request, socket 0",
            request: 1,
            devices: vec![dev("Dev1", 0), dev("Dev2", 1)],
            hint: "0:true",
            preferred: vec![],
            expected_preferred: vec![],
            expected_alignment: BTreeMap::from([(0, 1)]),
            nodes: 2,
        },
        Case {
            description: "Single Request, socket 1",
            request: 1,
            devices: vec![dev("Dev1", 0), dev("Dev2", 1)],
            hint: "1:true",
            preferred: vec![],
            expected_preferred: vec![],
            expected_alignment: BTreeMap::from([(1, 1)]),
            nodes: 2,
        },
        Case {
            description: "Request for 2, socket 0",
            request: 2,
            devices: four(0, 1, 0, 1),
            hint: "0:true",
            preferred: vec![],
            expected_preferred: vec![],
            expected_alignment: BTreeMap::from([(0, 2)]),
            nodes: 2,
        },
        Case {
            description: "Request for 2, socket 1",
            request: 2,
            devices: four(0, 1, 0, 1),
            hint: "1:true",
            preferred: vec![],
            expected_preferred: vec![],
            expected_alignment: BTreeMap::from([(1, 2)]),
            nodes: 2,
        },
        Case {
            description: "Request for 4, unsatisfiable, prefer socket 0",
            request: 4,
            devices: six(),
            hint: "0:true",
            preferred: vec![],
            expected_preferred: vec![],
            expected_alignment: BTreeMap::from([(0, 3), (1, 1)]),
            nodes: 2,
        },
        Case {
            description: "Request for 4, unsatisfiable, prefer socket 1",
            request: 4,
            devices: six(),
            hint: "1:true",
            preferred: vec![],
            expected_preferred: vec![],
            expected_alignment: BTreeMap::from([(0, 1), (1, 3)]),
            nodes: 2,
        },
        Case {
            description: "Request for 4, multisocket",
            request: 4,
            devices: vec![
                dev("Dev1", 0),
                dev("Dev2", 1),
                dev("Dev3", 2),
                dev("Dev4", 3),
                dev("Dev5", 0),
                dev("Dev6", 1),
                dev("Dev7", 2),
                dev("Dev8", 3),
            ],
            hint: "1,3:true",
            preferred: vec![],
            expected_preferred: vec![],
            expected_alignment: BTreeMap::from([(1, 2), (3, 2)]),
            nodes: 4,
        },
        Case {
            description: "Request for 5, socket 0, preferred aligned accepted",
            request: 5,
            devices: cat(range(0, 100, 0), range(100, 200, 1)),
            hint: "0:true",
            preferred: vec!["Dev0", "Dev19", "Dev83", "Dev42", "Dev77"],
            expected_preferred: vec!["Dev0", "Dev19", "Dev83", "Dev42", "Dev77"],
            expected_alignment: BTreeMap::from([(0, 5)]),
            nodes: 2,
        },
        Case {
            description: "Request for 5, socket 0, preferred aligned accepted, unaligned ignored",
            request: 5,
            devices: cat(range(0, 100, 0), range(100, 200, 1)),
            hint: "0:true",
            preferred: vec!["Dev0", "Dev19", "Dev83", "Dev150", "Dev186"],
            expected_preferred: vec!["Dev0", "Dev19", "Dev83"],
            expected_alignment: BTreeMap::from([(0, 5)]),
            nodes: 2,
        },
        Case {
            description: "Request for 5, socket 1, preferred aligned accepted, bogus ignored",
            request: 5,
            devices: range(0, 100, 1),
            hint: "1:true",
            preferred: vec!["Dev0", "Dev19", "Dev83", "bogus0", "bogus1"],
            expected_preferred: vec!["Dev0", "Dev19", "Dev83"],
            expected_alignment: BTreeMap::from([(1, 5)]),
            nodes: 2,
        },
        Case {
            description: "Request for 5, multisocket, preferred accepted",
            request: 5,
            devices: cat(range(0, 3, 0), range(3, 100, 1)),
            hint: "0:true",
            preferred: vec!["Dev0", "Dev1", "Dev2", "Dev42", "Dev83"],
            expected_preferred: vec!["Dev0", "Dev1", "Dev2", "Dev42", "Dev83"],
            expected_alignment: BTreeMap::from([(0, 3), (1, 2)]),
            nodes: 2,
        },
        Case {
            description: "Request for 5, multisocket, preferred unaligned accepted, bogus ignored",
            request: 5,
            devices: cat(range(0, 3, 0), range(3, 100, 1)),
            hint: "0:true",
            preferred: vec!["Dev0", "Dev1", "Dev2", "Dev42", "bogus0"],
            expected_preferred: vec!["Dev0", "Dev1", "Dev2", "Dev42"],
            expected_alignment: BTreeMap::from([(0, 3), (1, 2)]),
            nodes: 2,
        },
    ];
    for case in cases {
        let machine = testkit::machine(case.nodes, 1);
        let mut m = manager(&machine, vec![("resource", case.devices.clone())]);
        let mut hooks = Scripted {
            answer: case.preferred.iter().map(|s| s.to_string()).collect(),
            ..Scripted::default()
        };
        let pod = one_pod(
            "podUID",
            container("containerName", &[("resource", case.request)]),
        );
        let alloc = m
            .allocate(&pod, &pod.containers[0], &hint(case.hint), &mut hooks)
            .unwrap_or_else(|e| panic!("{}: {e}", case.description));
        let got = &alloc.devices["resource"];
        assert_eq!(got.len() as u64, case.request, "{}", case.description);
        for p in &case.expected_preferred {
            assert!(
                got.iter().any(|g| g == p),
                "{}: {p} not in {got:?}",
                case.description
            );
        }
        let mut alignment = BTreeMap::new();
        for id in got {
            if let Some(d) = case.devices.iter().find(|d| &d.id == id) {
                if let Some(first) = d.numa.first() {
                    *alignment.entry(first.get() as u8).or_insert(0) += 1;
                }
            }
        }
        assert_eq!(alignment, case.expected_alignment, "{}", case.description);
    }
}

#[test]
fn aligned_allocation_is_deterministic() {
    // Where the kubelet iterates a Go set, the toolkit takes devices in the
    // provider's order, and the hooks' preferred ones in their order.
    let machine = testkit::machine(2, 1);
    let six = vec![
        dev("Dev1", 0),
        dev("Dev2", 1),
        dev("Dev3", 0),
        dev("Dev4", 1),
        dev("Dev5", 0),
        dev("Dev6", 1),
    ];
    let mut m = manager(&machine, vec![("r", six)]);
    let pod = one_pod("p", container("c", &[("r", 4)]));
    let a = m
        .allocate(&pod, &pod.containers[0], &hint("0:true"), &mut ())
        .unwrap();
    assert_eq!(a.devices["r"], ["Dev1", "Dev3", "Dev5", "Dev2"]);
    let mut m = manager(&machine, vec![("r", four(0, 0, 0, 0))]);
    let mut hooks = Scripted {
        answer: vec!["Dev4".into(), "Dev2".into()],
        ..Scripted::default()
    };
    let pod = one_pod("p", container("c", &[("r", 2)]));
    let a = m
        .allocate(&pod, &pod.containers[0], &hint("0:true"), &mut hooks)
        .unwrap();
    assert_eq!(a.devices["r"], ["Dev4", "Dev2"]);
}

/// `TestGetPreferredAllocationParameters` (with the mustInclude comparison
/// the upstream test meant to make).
#[test]
fn preferred_allocation_parameters_like_the_kubelet() {
    struct Case {
        description: &'static str,
        request: u64,
        devices: Vec<Device>,
        allocated: Vec<&'static str>,
        reusable: Vec<&'static str>,
        expected_available: Vec<&'static str>,
        expected_must: Vec<&'static str>,
    }
    let eight = |second: u8| -> Vec<Device> {
        (0..8)
            .map(|i| dev(&format!("Dev{i}"), if i < 4 { 0 } else { second }))
            .collect()
    };
    let cases = vec![
        Case {
            description: "Request for 1, socket 0, 0 already allocated, 0 reusable",
            request: 1,
            devices: (0..4).map(|i| dev(&format!("Dev{i}"), 0)).collect(),
            allocated: vec![],
            reusable: vec![],
            expected_available: vec!["Dev0", "Dev1", "Dev2", "Dev3"],
            expected_must: vec![],
        },
        Case {
            description: "Request for 4, socket 0, 2 already allocated, 2 reusable",
            request: 4,
            devices: eight(0),
            allocated: vec!["Dev0", "Dev5"],
            reusable: vec!["Dev0", "Dev5"],
            expected_available: vec![
                "Dev0", "Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6", "Dev7",
            ],
            expected_must: vec!["Dev0", "Dev5"],
        },
        Case {
            description: "Request for 4, socket 0, 4 already allocated, 2 reusable",
            request: 4,
            devices: eight(0),
            allocated: vec!["Dev0", "Dev5", "Dev4", "Dev1"],
            reusable: vec!["Dev0", "Dev5"],
            expected_available: vec!["Dev0", "Dev2", "Dev3", "Dev5", "Dev6", "Dev7"],
            expected_must: vec!["Dev0", "Dev5"],
        },
        Case {
            description: "Request for 6, multisocket, 2 already allocated, 2 reusable",
            request: 6,
            devices: eight(1),
            allocated: vec!["Dev1", "Dev6"],
            reusable: vec!["Dev1", "Dev6"],
            expected_available: vec![
                "Dev0", "Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6", "Dev7",
            ],
            expected_must: vec!["Dev0", "Dev1", "Dev2", "Dev3", "Dev6"],
        },
        Case {
            description: "Request for 6, multisocket, 4 already allocated, 2 reusable",
            request: 6,
            devices: eight(1),
            allocated: vec!["Dev0", "Dev1", "Dev6", "Dev7"],
            reusable: vec!["Dev1", "Dev6"],
            expected_available: vec!["Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6"],
            expected_must: vec!["Dev1", "Dev2", "Dev3", "Dev6"],
        },
    ];
    for case in cases {
        let mut m = manager(
            &testkit::machine(2, 1),
            vec![("resource", case.devices.clone())],
        );
        // The allocated devices are held by the pod's init container; the
        // reusable ones are what it left for reuse.
        if !case.allocated.is_empty() {
            hold(&mut m, "podUID", "init", "resource", &case.allocated);
        }
        let pool = &m.pools["resource"];
        let reusable: BTreeSet<usize> = case.reusable.iter().map(|id| pool.index[*id]).collect();
        m.reuse = Some(super::manager::Reuse {
            pod: "podUID".into(),
            devices: BTreeMap::from([("resource".to_owned(), reusable)]),
        });
        let mut hooks = Scripted::default();
        let pod = one_pod(
            "podUID",
            container("containerName", &[("resource", case.request)]),
        );
        m.allocate(&pod, &pod.containers[0], &hint("0:true"), &mut hooks)
            .unwrap_or_else(|e| panic!("{}: {e}", case.description));
        let (available, must, size) = hooks.calls.first().cloned().unwrap_or_default();
        let set = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
        let want = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            set(&available),
            want(&case.expected_available),
            "{}",
            case.description
        );
        assert_eq!(
            set(&must),
            want(&case.expected_must),
            "{}",
            case.description
        );
        assert_eq!(size as u64, case.request, "{}", case.description);
    }
}

// ------------------------------------------------------------ manager_test.go

/// `TestFilterByAffinity`.
#[test]
fn filter_by_affinity_like_the_kubelet() {
    let machine = testkit::machine(3, 1);
    let m = manager(
        &machine,
        vec![(
            "res1",
            vec![
                dev("dev1", 1),
                Device::new("dev2", None).with_nodes(NumaMask::from_nodes([1, 2]).unwrap()),
                dev("dev3", 2),
                dev("dev4", 2),
                nodev("dev5"),
            ],
        )],
    );
    let pool = &m.pools["res1"];
    let ids = |p: Vec<usize>| pool.ids(&p);
    for (available, aligned, unaligned) in [
        (vec!["dev1", "dev2"], vec!["dev2"], vec!["dev1"]),
        (
            vec!["dev1", "dev2", "dev3", "dev4"],
            vec!["dev2", "dev3", "dev4"],
            vec!["dev1"],
        ),
    ] {
        let positions: Vec<usize> = available.iter().map(|id| pool.index[*id]).collect();
        let (a, u, none) = filter_by_affinity(pool, &hint("2:true"), &positions);
        assert_eq!(ids(a), aligned);
        assert_eq!(ids(u), unaligned);
        assert!(none.is_empty());
    }
    // Devices without a node, and every device under an "any" hint.
    let all: Vec<usize> = (0..5).collect();
    let (_, _, none) = filter_by_affinity(pool, &hint("2:true"), &all);
    assert_eq!(ids(none), ["dev5"]);
    let (a, u, none) = filter_by_affinity(pool, &TopologyHint::ANY, &all);
    assert!(a.is_empty() && u.is_empty());
    assert_eq!(none.len(), 5);
}

/// `TestPodContainerDeviceAllocation`.
#[test]
fn pod_container_device_allocation_like_the_kubelet() {
    let machine = testkit::machine(1, 1);
    let r1 = "domain1.com/resource1";
    let r2 = "domain2.com/resource2";
    let mut m = manager(
        &machine,
        vec![
            (r1, vec![dev("dev1", 0), dev("dev2", 0)]),
            (r2, vec![nodev("dev3"), nodev("dev4")]),
        ],
    );
    let held = |m: &DeviceManager, r: &str| m.pools[r].holders.iter().filter(|h| **h > 0).count();
    let p0 = one_pod("p0", container("c", &[(r1, 2), ("cpu", 2000), (r2, 1)]));
    let a = m
        .allocate(&p0, &p0.containers[0], &TopologyHint::ANY, &mut ())
        .unwrap();
    assert_eq!(a.devices[r1].len(), 2);
    assert_eq!(a.devices[r2].len(), 1);
    assert_eq!((held(&m, r1), held(&m, r2)), (2, 1));
    let p1 = one_pod("p1", container("c", &[(r1, 1)]));
    assert_eq!(
        m.allocate(&p1, &p1.containers[0], &TopologyHint::ANY, &mut ()),
        Err(ProviderError::admission(
            "requested number of devices unavailable for domain1.com/resource1: 1 requested, 0 available"
        ))
    );
    assert_eq!((held(&m, r1), held(&m, r2)), (2, 1));
    assert!(m.held("p1", "c", r1).is_empty());
    let p2 = one_pod("p2", container("c", &[(r2, 1)]));
    m.allocate(&p2, &p2.containers[0], &TopologyHint::ANY, &mut ())
        .unwrap();
    assert_eq!((held(&m, r1), held(&m, r2)), (2, 2));
}

/// `TestPodContainerDeviceToAllocate` (the resource that is not registered
/// has no counterpart: a provider's resources are fixed at construction).
#[test]
fn unhealthy_devices_are_not_allocated_like_the_kubelet() {
    let machine = testkit::machine(1, 1);
    let r1 = "domain1.com/resource1";
    let r3 = "domain2.com/resource3";
    let mut m = manager(
        &machine,
        vec![
            (
                r1,
                vec![
                    dev("dev1", 0).with_health(false),
                    dev("dev2", 0).with_health(false),
                ],
            ),
            (
                r3,
                vec![
                    nodev("dev5").with_health(false),
                    nodev("dev7"),
                    nodev("dev8"),
                ],
            ),
        ],
    );
    hold(&mut m, "pod1", "con1", r1, &["dev1", "dev2"]);
    hold(&mut m, "pod3", "con3", r3, &["dev5"]);
    let p1 = one_pod("pod1", container("con1", &[(r1, 2)]));
    assert_eq!(
        m.allocate(&p1, &p1.containers[0], &TopologyHint::ANY, &mut ()),
        Err(ProviderError::admission(
            "no healthy devices of domain1.com/resource1 are present; unhealthy devices cannot be allocated"
        ))
    );
    let p3 = one_pod("pod3", container("con3", &[(r3, 1)]));
    assert_eq!(
        m.allocate(&p3, &p3.containers[0], &TopologyHint::ANY, &mut ()),
        Err(ProviderError::admission(
            "devices of domain2.com/resource3 allocated before are no longer healthy; unhealthy \
             devices cannot be allocated"
        ))
    );
    // A new container never gets an unhealthy device.
    let p4 = one_pod("pod4", container("c", &[(r3, 2)]));
    let a = m
        .allocate(&p4, &p4.containers[0], &TopologyHint::ANY, &mut ())
        .unwrap();
    assert_eq!(a.devices[r3], ["dev7", "dev8"]);
}

fn allocate_all(m: &mut DeviceManager, pod: &PodView) {
    for c in pod.init_containers.iter().chain(&pod.containers) {
        m.allocate(pod, c, &TopologyHint::ANY, &mut ())
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
    }
}

fn set_of(m: &DeviceManager, pod: &str, c: &str, r: &str) -> BTreeSet<String> {
    m.held(pod, c, r).into_iter().collect()
}

/// `TestInitContainerDeviceAllocation`.
#[test]
fn init_container_devices_are_reused_like_the_kubelet() {
    let r1 = "domain1.com/resource1";
    let r2 = "domain2.com/resource2";
    let mut m = manager(
        &testkit::machine(1, 1),
        vec![
            (r1, vec![nodev("dev1"), nodev("dev2")]),
            (r2, vec![dev("dev3", 0), dev("dev4", 0)]),
        ],
    );
    let pod = testkit::pod(
        "p",
        vec![
            container("init1", &[(r1, 1)]),
            container("init2", &[(r1, 2)]),
        ],
        vec![
            container("app1", &[(r1, 1), (r2, 1)]),
            container("app2", &[(r1, 1), (r2, 1)]),
        ],
    );
    allocate_all(&mut m, &pod);
    let (i1, i2, a1, a2) = (
        set_of(&m, "p-uid", "init1", r1),
        set_of(&m, "p-uid", "init2", r1),
        set_of(&m, "p-uid", "app1", r1),
        set_of(&m, "p-uid", "app2", r1),
    );
    assert_eq!((i1.len(), i2.len(), a1.len(), a2.len()), (1, 2, 1, 1));
    assert!(i2.is_superset(&i1) && i2.is_superset(&a1) && i2.is_superset(&a2));
    assert!(a1.is_disjoint(&a2));
    assert!(set_of(&m, "p-uid", "app1", r2).is_disjoint(&set_of(&m, "p-uid", "app2", r2)));
}

/// `TestRestartableInitContainerDeviceAllocation`.
#[test]
fn sidecar_devices_are_their_own_like_the_kubelet() {
    let r1 = "domain1.com/resource1";
    let devices: Vec<Device> = (1..=6).map(|i| nodev(&format!("dev{i}"))).collect();
    let mut m = manager(&testkit::machine(1, 1), vec![(r1, devices)]);
    let pod = testkit::pod(
        "p",
        vec![
            container("init1", &[(r1, 3)]),
            sidecar("side2", &[(r1, 1)]),
            sidecar("side3", &[(r1, 2)]),
        ],
        vec![container("app1", &[(r1, 1)]), container("app2", &[(r1, 2)])],
    );
    allocate_all(&mut m, &pod);
    let get = |c: &str| set_of(&m, "p-uid", c, r1);
    let (init1, side2, side3, app1, app2) = (
        get("init1"),
        get("side2"),
        get("side3"),
        get("app1"),
        get("app2"),
    );
    assert_eq!(
        (
            init1.len(),
            side2.len(),
            side3.len(),
            app1.len(),
            app2.len()
        ),
        (3, 1, 2, 1, 2)
    );
    assert!(init1.is_superset(&side2) && init1.is_superset(&side3));
    let dedicated = [&side2, &side3, &app1, &app2];
    for i in 0..dedicated.len() {
        for j in i + 1..dedicated.len() {
            assert!(dedicated[i].is_disjoint(dedicated[j]), "{i} {j}");
        }
    }
}

// ------------------------------------------------------------ toolkit's own

/// A literal port of the kubelet's `generateDeviceTopologyHints` (every
/// mask enumerated), the oracle for the compact form.
fn kubelet_hints(
    nodes: &[NumaNodeId],
    all: &[NumaMask],
    available: &[NumaMask],
    reusable: &[NumaMask],
    request: u64,
) -> Vec<String> {
    let mut min = nodes.len() as u32;
    let mut hints = Vec::new();
    for_each_mask_in_kubelet_order(nodes, |mask| {
        let in_mask = all.iter().filter(|d| d.intersects(mask)).count() as u64;
        if in_mask >= request && mask.len() < min {
            min = mask.len();
        }
        let mut matching = 0u64;
        for d in reusable {
            if d.is_empty() {
                continue;
            }
            if !d.intersects(mask) {
                return;
            }
            matching += 1;
        }
        matching += available.iter().filter(|d| d.intersects(mask)).count() as u64;
        if matching >= request {
            hints.push(mask);
        }
    });
    hints
        .iter()
        .map(|m| format!("{m}:{}", m.len() == min))
        .collect()
}

/// A random machine and device pool for [`hints_equal_the_kubelets_enumeration_on_random_machines`].
#[derive(Debug, Clone)]
struct RandomPool {
    /// NUMA node ids: `0..count`, or with every odd one moved above 200.
    ids: Vec<u32>,
    /// Per device: its nodes (positions in `ids`; none, one or two), and
    /// who holds it (0: another pod, 1: this pod's init container, else
    /// nobody).
    devices: Vec<(Vec<usize>, u8)>,
    request: u64,
}

fn random_pool() -> impl Strategy<Value = RandomPool> {
    (1usize..=10, proptest::bool::weighted(1.0 / 3.0)).prop_flat_map(|(count, sparse)| {
        let ids: Vec<u32> = (0..count as u32)
            .map(|i| if sparse && i % 2 == 1 { 200 + i } else { i })
            .collect();
        let node = 0..count;
        let nodes = prop_oneof![
            1 => Just(Vec::new()),
            1 => (node.clone(), node.clone()).prop_map(|(a, b)| vec![a, b]),
            4 => node.prop_map(|a| vec![a]),
        ];
        (
            Just(ids),
            proptest::collection::vec((nodes, 0u8..5), 0..14),
            0u64..5,
        )
            .prop_map(|(ids, devices, request)| RandomPool {
                ids,
                devices,
                request,
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn hints_equal_the_kubelets_enumeration_on_random_machines(case in random_pool()) {
        // Up to 8 nodes explicit, 9-10 nodes compact; uneven device
        // counts, devices without a node, devices on two nodes, sparse ids
        // above 63, devices held by other pods and reusable ones.
        let machine = testkit::machine_with_node_ids(&case.ids, 1);
        let nodes = machine.numa_ids();
        let devices: Vec<Device> = case
            .devices
            .iter()
            .enumerate()
            .map(|(i, (on, _))| {
                let mut mask = NumaMask::EMPTY;
                for &p in on {
                    mask.insert(nodes[p]);
                }
                Device::new(format!("d{i}"), None).with_nodes(mask)
            })
            .collect();
        let mut m = manager(&machine, vec![("r", devices.clone())]);
        let mut reusable = Vec::new();
        for (i, (d, (_, holder))) in devices.iter().zip(&case.devices).enumerate() {
            match holder {
                0 => hold(&mut m, "other", "c", "r", &[d.id.as_str()]),
                1 => {
                    hold(&mut m, "p", "init", "r", &[d.id.as_str()]);
                    reusable.push(i);
                }
                _ => {}
            }
        }
        m.reuse = Some(super::manager::Reuse {
            pod: "p".into(),
            devices: BTreeMap::from([("r".to_owned(), reusable.iter().copied().collect())]),
        });
        let request = case.request;
        let pod = one_pod("p", container("app", &[("r", request)]));
        let got = m.topology_hints(&pod, &pod.containers[0]).unwrap();
        let pool = &m.pools["r"];
        let all: Vec<NumaMask> = devices.iter().map(|d| d.numa).collect();
        let available: Vec<NumaMask> = pool.available().iter().map(|&i| devices[i].numa).collect();
        let reuse_masks: Vec<NumaMask> = reusable.iter().map(|&i| devices[i].numa).collect();
        let want = if !pool.aligned {
            None
        } else if (pool.available().len() + reusable.len()) < request as usize {
            Some(Vec::new())
        } else {
            Some(kubelet_hints(&nodes, &all, &available, &reuse_masks, request))
        };
        let id_list: Vec<u32> = nodes.iter().map(|n| n.get()).collect();
        prop_assert_eq!(&hint_strings(&got, "r", &id_list), &want);
        let compact = matches!(got.as_ref().unwrap()["r"], Some(crate::HintSet::Compact(_)));
        prop_assert_eq!(
            compact,
            case.ids.len() > 8 && want.as_ref().is_some_and(|w| !w.is_empty())
        );
    }
}

#[test]
fn gpu_memory_node_ids_work() {
    // POWER9-style ids: devices on nodes 250 and 255.
    let machine = testkit::machine_with_node_ids(&[0, 8, 250, 255], 1);
    let node = |i: u32| NumaNodeId::new(i).ok();
    let mut m = manager(
        &machine,
        vec![(
            "nvidia.com/gpu",
            vec![
                Device::new("gpu0", node(250)),
                Device::new("gpu1", node(255)),
                Device::new("gpu2", node(255)),
            ],
        )],
    );
    let pod = one_pod("p", container("c", &[("nvidia.com/gpu", 2)]));
    let h = m.topology_hints(&pod, &pod.containers[0]).unwrap();
    let got = hint_strings(&h, "nvidia.com/gpu", &[0, 8, 250, 255]).unwrap();
    assert_eq!(got[0], "255:true");
    assert!(got.contains(&"250,255:false".to_owned()));
    let a = m
        .allocate(&pod, &pod.containers[0], &hint("255:true"), &mut ())
        .unwrap();
    assert_eq!(a.devices["nvidia.com/gpu"], ["gpu1", "gpu2"]);
    assert!(a.mems.is_empty(), "a device provider sets no mems");
}

#[test]
fn readmission_returns_what_the_container_holds() {
    let mut m = manager(&testkit::machine(2, 1), vec![("r", four(0, 1, 0, 1))]);
    let mut hooks = Scripted {
        env_key: Some("R_DEVICES"),
        ..Scripted::default()
    };
    let pod = one_pod("p", container("c", &[("r", 2)]));
    let first = m
        .allocate(&pod, &pod.containers[0], &hint("1:true"), &mut hooks)
        .unwrap();
    assert_eq!(first.devices["r"], ["Dev2", "Dev4"]);
    assert_eq!(first.env["R_DEVICES"], "Dev2,Dev4");
    // Hints come from what it holds; allocating again changes nothing.
    let h = m.topology_hints(&pod, &pod.containers[0]).unwrap();
    assert_eq!(
        strings(&h, "r"),
        Some(vec!["1:true".into(), "0-1:false".into()])
    );
    let again = m
        .allocate(&pod, &pod.containers[0], &hint("0:true"), &mut hooks)
        .unwrap();
    assert_eq!(again, first);
    // A different request is an error and changes nothing.
    let bigger = one_pod("p", container("c", &[("r", 3)]));
    assert_eq!(
        m.allocate(
            &bigger,
            &bigger.containers[0],
            &TopologyHint::ANY,
            &mut hooks
        ),
        Err(ProviderError::admission(
            "container \"c\" of pod p changed its request for r from 2 to 3"
        ))
    );
    assert_eq!(m.held("p", "c", "r"), ["Dev2", "Dev4"]);
}

#[test]
fn failures_change_nothing() {
    let mut m = manager(
        &testkit::machine(2, 1),
        vec![("a", four(0, 1, 0, 1)), ("b", vec![dev("b0", 0)])],
    );
    // The second resource cannot be satisfied: the first is not kept.
    let pod = one_pod("p", container("c", &[("a", 1), ("b", 2)]));
    assert!(m
        .allocate(&pod, &pod.containers[0], &TopologyHint::ANY, &mut ())
        .is_err());
    assert!(m.assignments.is_empty());
    assert!(m.pools.values().all(|p| p.holders.iter().all(|h| *h == 0)));
    // A hook's error comes back as is and nothing is held.
    let mut failing = Scripted {
        fail_env: true,
        ..Scripted::default()
    };
    let pod = one_pod("p", container("c", &[("a", 1)]));
    assert_eq!(
        m.allocate(&pod, &pod.containers[0], &TopologyHint::ANY, &mut failing),
        Err(ProviderError::new("DeviceBusy", "a is busy"))
    );
    assert!(m.assignments.is_empty());
    // Two resources of one provider setting one variable differently.
    let mut shared = Scripted {
        env_key: Some("DEVICES"),
        ..Scripted::default()
    };
    let pod = one_pod("p", container("c", &[("a", 1), ("b", 1)]));
    assert_eq!(
        m.allocate(&pod, &pod.containers[0], &TopologyHint::ANY, &mut shared),
        Err(ProviderError::admission(
            "the environment variable DEVICES is set to \"Dev1\" for a and to \"b0\" for b; give \
             each resource its own variables"
        ))
    );
    assert!(m.assignments.is_empty());
}

#[test]
fn release_frees_devices_and_prunes_reuse() {
    let mut m = manager(
        &testkit::machine(1, 1),
        vec![("r", vec![nodev("d1"), nodev("d2")])],
    );
    let pod = testkit::pod(
        "p",
        vec![container("init", &[("r", 2)])],
        vec![container("app", &[("r", 1)])],
    );
    m.allocate(&pod, &pod.init_containers[0], &TopologyHint::ANY, &mut ())
        .unwrap();
    // The init container holds both; a rollback releases it before the app
    // container is allocated: nothing stays reusable.
    m.release("p-uid", "init");
    assert!(m.reuse.as_ref().unwrap().devices["r"].is_empty());
    let other = one_pod("q", container("c", &[("r", 2)]));
    m.allocate(&other, &other.containers[0], &TopologyHint::ANY, &mut ())
        .unwrap();
    // Re-admitting the first pod cannot take the other pod's devices.
    assert!(m
        .allocate(&pod, &pod.containers[0], &TopologyHint::ANY, &mut ())
        .is_err());
    m.release("q", "c");
    m.release("q", "c");
    assert!(m.pools["r"].holders.iter().all(|h| *h == 0));
}

#[test]
fn checkpoint_round_trip_and_validation() {
    let machine = testkit::machine(2, 1);
    let mut m = manager(
        &machine,
        vec![("r", four(0, 1, 0, 1)), ("s", vec![nodev("s0")])],
    );
    let pod = testkit::pod(
        "p",
        vec![container("init", &[("r", 1)])],
        vec![container("app", &[("r", 2), ("s", 1)])],
    );
    m.allocate(&pod, &pod.init_containers[0], &hint("0:true"), &mut ())
        .unwrap();
    let cp = m.checkpoint().unwrap();
    assert_eq!(
        String::from_utf8(cp.clone()).unwrap(),
        r#"{"assignments":[{"pod_uid":"p-uid","container":"init","resource":"r","devices":["Dev1"]}],"reuse":{"pod_uid":"p-uid","devices":{"r":["Dev1"]}}}"#
    );
    // A fresh manager restored from it continues the pod: the app container
    // reuses the init container's device.
    let mut fresh = manager(
        &machine,
        vec![("r", four(0, 1, 0, 1)), ("s", vec![nodev("s0")])],
    );
    fresh.restore(&cp).unwrap();
    let a = fresh
        .allocate(&pod, &pod.containers[0], &hint("0:true"), &mut ())
        .unwrap();
    assert_eq!(a.devices["r"], ["Dev1", "Dev3"]);
    let full = fresh.checkpoint().unwrap();
    let mut again = manager(
        &machine,
        vec![("r", four(0, 1, 0, 1)), ("s", vec![nodev("s0")])],
    );
    again.restore(&full).unwrap();
    assert_eq!(again.checkpoint().unwrap(), full);
    assert_eq!(again.inventory(), fresh.inventory());

    // Refused, naming what is wrong, and nothing changes: bytes that are
    // not a checkpoint (what can be read is reconciled: see reconcile/tests.rs).
    let before = again.checkpoint().unwrap();
    for (data, message) in [
        (&b"{"[..], "device assignments do not parse: EOF while parsing an object at line 1 column 1"),
        (&b" []"[..], "device assignments are a JSON list, not an object with `assignments`"),
        (
            br#"{"assignments":[{"pod_uid":"","container":"c","resource":"r","devices":["Dev1"]}]}"#,
            "an assignment has an empty pod uid, container or resource: \"\"/\"c\"/\"r\"",
        ),
    ] {
        assert_eq!(
            again.restore(data),
            Err(ProviderError::checkpoint(message)),
            "{}",
            String::from_utf8_lossy(data)
        );
        assert_eq!(again.checkpoint().unwrap(), before);
    }
}

#[test]
fn inventory_per_zone_follows_allocations() {
    let machine = testkit::machine(2, 1);
    let both = NumaMask::from_nodes([0, 1]).unwrap();
    let mut m = manager(
        &machine,
        vec![(
            "r",
            vec![
                dev("a", 0),
                dev("b", 0).with_health(false),
                dev("c", 1),
                nodev("d"),
                Device::new("e", None).with_nodes(both),
            ],
        )],
    );
    let text = |m: &DeviceManager| serde_json::to_string(&m.inventory()).unwrap();
    assert_eq!(
        text(&m),
        r#"{"resources":{"r":{"total":{"capacity":5,"allocatable":4,"available":4},"zones":[{"numa":0,"capacity":3,"allocatable":2,"available":2},{"numa":1,"capacity":2,"allocatable":2,"available":2},{"numa":null,"capacity":1,"allocatable":1,"available":1}],"units":[{"id":"a","numa":[0]},{"id":"c","numa":[1]},{"id":"d","numa":[]},{"id":"e","numa":[0,1]}]}}}"#
    );
    let pod = one_pod("p", container("x", &[("r", 2)]));
    m.allocate(&pod, &pod.containers[0], &hint("0:true"), &mut ())
        .unwrap();
    let inv = m.inventory();
    assert_eq!(inv.resources["r"].total.available, 2);
    assert_eq!(inv.resources["r"].zones[0].amounts.available, 0);
    // The units name what is allocatable, held or not (the unhealthy "b" never).
    assert_eq!(inv.resources["r"].units.len(), 4);
    m.release("p", "x");
    assert_eq!(m.inventory().resources["r"].total.available, 4);
}

#[test]
fn preferred_allocation_routes_to_the_hooks() {
    let mut m = manager(&testkit::machine(2, 1), vec![("r", four(0, 1, 0, 1))]);
    let mut hooks = Scripted {
        answer: vec!["Dev3".into(), "Dev1".into()],
        ..Scripted::default()
    };
    let req = |available: &[&str], must: &[&str], size| {
        PreferredAllocationRequest::new(
            "r",
            available.iter().map(|s| s.to_string()).collect(),
            must.iter().map(|s| s.to_string()).collect(),
            size,
        )
    };
    assert_eq!(
        m.preferred_allocation(&req(&["Dev4", "Dev1", "Dev3"], &["Dev1"], 2), &mut hooks),
        Ok(vec!["Dev3".to_owned(), "Dev1".to_owned()])
    );
    assert_eq!(
        hooks.calls,
        vec![(
            vec!["Dev4".into(), "Dev1".into(), "Dev3".into()],
            vec!["Dev1".into()],
            2
        )]
    );
    assert_eq!(
        m.preferred_allocation(&req(&["Dev9"], &[], 1), &mut hooks),
        Err(ProviderError::new(
            "InvalidRequest",
            "resource r has no device \"Dev9\""
        ))
    );
    let mut other = req(&["Dev1"], &[], 1);
    other.resource = "s".into();
    assert_eq!(
        m.preferred_allocation(&other, &mut hooks),
        Err(ProviderError::new(
            "InvalidRequest",
            "this provider has no resource \"s\" (its resources: r)"
        ))
    );
    assert_eq!(
        m.preferred_allocation(&req(&["Dev1"], &[], 2), &mut hooks),
        Err(ProviderError::new(
            "InvalidRequest",
            "size 2 is larger than the 1 available device(s)"
        ))
    );
    // No hooks: no preference.
    assert_eq!(
        m.preferred_allocation(&req(&["Dev1"], &[], 1), &mut ()),
        Ok(vec![])
    );
    m.set_health("r", "Dev1", false).unwrap();
    assert!(m.set_health("r", "nope", false).is_err());
}

#[test]
fn registration_errors_name_the_device() {
    let machine = testkit::machine(2, 1);
    let err = |d: Devices| DeviceManager::new(&machine, d).unwrap_err().to_string();
    assert_eq!(
        err(Devices::new().resource("r", vec![dev("x", 0), dev("x", 1)])),
        "InvalidConfig: resource r: device id \"x\" is listed twice"
    );
    assert_eq!(
        err(Devices::new().resource("r", vec![dev("x", 5)])),
        "InvalidConfig: resource r: device \"x\" is on NUMA node(s) 5, which this machine does not \
         have (its nodes: 0-1)"
    );
    assert_eq!(
        err(Devices::new().resource("r", vec![]).resource("r", vec![])),
        "InvalidConfig: resource r is registered twice"
    );
    assert_eq!(
        err(Devices::new().resource("r", vec![dev("", 0)])),
        "InvalidConfig: resource r: device 0 has an empty id"
    );
}

/// Devices the kubelet's device plugins already gave a container, named by
/// UUID, index or PCI address: the toolkit recognises exactly those and
/// answers the hints of a container holding them.
#[test]
fn assigned_devices_fix_the_hints_of_exactly_those_devices() {
    use crate::{AssignedDevices, AssignedDevicesRequest, DeviceRef, ResourceMatch};
    let machine = testkit::machine(2, 2);
    let gpu = |i: u8, node: u8| {
        dev(&format!("GPU-{i}"), node)
            .with_serial(&format!("GPU-{i}"))
            .with_pci_address(&format!("0000:{:02x}:00.0", 0x10 + i))
            .with_attribute(INDEX_ATTRIBUTE, i.to_string())
    };
    let m = manager(
        &machine,
        vec![
            (
                "nvidia.com/gpu",
                vec![gpu(0, 0), gpu(1, 0), gpu(2, 1), gpu(3, 1)],
            ),
            (
                "intel.com/sriov_vf",
                vec![
                    dev("0000:3b:02.0", 0).with_pci_address("0000:3b:02.0"),
                    dev("0000:af:02.0", 1).with_pci_address("0000:af:02.0"),
                ],
            ),
        ],
    );
    let nvidia = |ids: Vec<DeviceRef>| {
        AssignedDevices::new(
            "NVIDIA_VISIBLE_DEVICES",
            ResourceMatch::Prefix("nvidia.com/".into()),
            ids,
        )
    };
    let hints_of = |a: &crate::AssignedDeviceHints, resource: &str| -> Option<Vec<String>> {
        let set = a.resources.get(resource)?.hints.clone();
        let map = Some(BTreeMap::from([(resource.to_owned(), set)]));
        hint_strings(&map, resource, &[0, 1])
    };

    // One GPU on node 1, by UUID: node 1 preferred, both nodes not.
    let a = m
        .assigned_device_hints(&AssignedDevicesRequest::new(vec![nvidia(vec![
            DeviceRef::Uuid("GPU-2".into()),
        ])]))
        .unwrap();
    assert_eq!(a.resources["nvidia.com/gpu"].devices, ["GPU-2"]);
    assert_eq!(a.resources["nvidia.com/gpu"].matched, ["GPU-2"]);
    assert_eq!(
        hints_of(&a, "nvidia.com/gpu").unwrap(),
        ["1:true", "0-1:false"]
    );
    assert!(!a.resources.contains_key("intel.com/sriov_vf"));

    // Indexes 0 and 2 (nodes 0 and 1): only both nodes hold them, and two
    // GPUs fit on one node, so that hint is not preferred. An unknown UUID
    // is left out.
    let a = m
        .assigned_device_hints(&AssignedDevicesRequest::new(vec![nvidia(vec![
            DeviceRef::Index(0),
            DeviceRef::Index(2),
            DeviceRef::Uuid("GPU-9".into()),
        ])]))
        .unwrap();
    assert_eq!(a.resources["nvidia.com/gpu"].devices, ["GPU-0", "GPU-2"]);
    assert_eq!(a.resources["nvidia.com/gpu"].matched, ["0", "2"]);
    assert_eq!(hints_of(&a, "nvidia.com/gpu").unwrap(), ["0-1:false"]);

    // A VF by its PCI address (any case, short forms normalised), for the
    // resource its variable names; the GPU resource does not match.
    let a = m
        .assigned_device_hints(&AssignedDevicesRequest::new(vec![AssignedDevices::new(
            "PCIDEVICE_INTEL_COM_SRIOV_VF",
            ResourceMatch::EnvName("INTEL_COM_SRIOV_VF".into()),
            vec![DeviceRef::PciAddress("0000:AF:02.0".into())],
        )]))
        .unwrap();
    assert_eq!(
        a.resources.keys().collect::<Vec<_>>(),
        ["intel.com/sriov_vf"]
    );
    assert_eq!(a.resources["intel.com/sriov_vf"].devices, ["0000:af:02.0"]);
    assert_eq!(
        hints_of(&a, "intel.com/sriov_vf").unwrap(),
        ["1:true", "0-1:false"]
    );

    // Nothing it knows: an empty answer; devices without a node: no preference.
    let none = m
        .assigned_device_hints(&AssignedDevicesRequest::new(vec![nvidia(vec![
            DeviceRef::Uuid("GPU-7".into()),
        ])]))
        .unwrap();
    assert!(none.resources.is_empty());
    let flat = manager(&machine, vec![("nvidia.com/gpu", vec![nodev("GPU-0")])]);
    let a = flat
        .assigned_device_hints(&AssignedDevicesRequest::new(vec![nvidia(vec![
            DeviceRef::Uuid("GPU-0".into()),
        ])]))
        .unwrap();
    assert_eq!(a.resources["nvidia.com/gpu"].hints, None);
}

/// Devices injected as device nodes (a CDI spec's `deviceNodes`, as DRA
/// drivers give them): a node matches the device whose
/// `DEVICE_NODE_ATTRIBUTE` lists its type and number, through any
/// resource; `matched` names the node by its path; a provider built before
/// the field reads the request without it.
#[test]
fn assigned_device_nodes_match_the_device_that_lists_them() {
    use crate::{AssignedDevices, AssignedDevicesRequest, DeviceNode, ResourceMatch};
    let machine = testkit::machine(2, 2);
    let gpu = |i: u8, node: u8| {
        dev(&format!("GPU-{i}"), node).with_attribute(DEVICE_NODE_ATTRIBUTE, format!("c 195:{i}"))
    };
    let m = manager(
        &machine,
        vec![("nvidia.com/gpu", vec![gpu(0, 0), gpu(1, 1)])],
    );
    let group = AssignedDevices::new(
        "CDI device nvidia.com/gpu=1",
        ResourceMatch::Prefix(String::new()),
        vec![],
    )
    .with_nodes(vec![
        DeviceNode::new("/dev/nvidia1", "c", 195, 1),
        DeviceNode::new("/dev/nvidiactl", "c", 195, 255),
        // A block device with the same numbers is not the GPU.
        DeviceNode::new("/dev/sdq", "b", 195, 0),
    ]);
    let request = AssignedDevicesRequest::new(vec![group]);
    assert!(!request.is_empty());
    let a = m.assigned_device_hints(&request).unwrap();
    assert_eq!(a.resources["nvidia.com/gpu"].devices, ["GPU-1"]);
    assert_eq!(a.resources["nvidia.com/gpu"].matched, ["/dev/nvidia1"]);
    let text = serde_json::to_string(&request).unwrap();
    assert!(
        text.contains(r#""nodes":[{"path":"/dev/nvidia1","type":"c","major":195,"minor":1}"#),
        "{text}"
    );
    // An older reader (no `nodes` field) ignores it.
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Older {
        devices: Vec<OlderGroup>,
    }
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct OlderGroup {
        source: String,
        ids: Vec<crate::DeviceRef>,
    }
    let older: Older = serde_json::from_str(&text).unwrap();
    assert!(older.devices[0].ids.is_empty());
}
