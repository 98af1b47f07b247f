use std::collections::BTreeMap;
use std::sync::Arc;

use abi_stable::std_types::{ROption, RResult, RSlice, RStr, RString, RVec};

use super::convert::to_json;
use super::*;
use crate::testkit::FakeProvider;
use crate::{
    Allocation, CompactHints, CpuSet, HintSet, Inventory, NumaMask, NumaNodeId, PodView,
    PreferredAllocationRequest, ProviderError, ProviderHints, Reconciled, TopologyHint,
};

fn mask(ids: &[i64]) -> NumaMask {
    NumaMask::from_nodes(ids.iter().copied()).unwrap()
}

#[test]
fn export_symbol_name_matches_abi_stable() {
    assert_eq!(
        crate::export::ROOT_MODULE_SYMBOL,
        abi_stable::library::ROOT_MODULE_LOADER_NAME
    );
}

#[test]
fn hints_round_trip() {
    let mut map = BTreeMap::new();
    map.insert(
        "a".to_owned(),
        Some(HintSet::Explicit(vec![
            TopologyHint::new(mask(&[0, 2]), true),
            TopologyHint::ANY,
        ])),
    );
    map.insert("b".to_owned(), None);
    map.insert(
        "c".to_owned(),
        Some(HintSet::Compact(CompactHints::upward_closed(
            vec![mask(&[63]), mask(&[250, 255])],
            2,
        ))),
    );
    map.insert("d".to_owned(), Some(HintSet::Explicit(vec![])));
    map.insert(
        "e".to_owned(),
        Some(HintSet::Compact(CompactHints {
            minimal: vec![mask(&[0]), mask(&[1, 2])],
            within: vec![mask(&[0, 1, 2, 3]), mask(&[1, 2])],
            preferred_width: 1,
        })),
    );
    let hints: ProviderHints = Some(map);
    assert_eq!(hints_from_ffi(hints_to_ffi(&hints)), Ok(hints));
    assert_eq!(hints_from_ffi(hints_to_ffi(&None)), Ok(None));
    let h = TopologyHint::new(mask(&[70, 250]), false);
    assert_eq!(TopologyHint::from(FfiHint::from(h)), h);
}

#[test]
fn duplicate_resource_is_refused() {
    let entry = FfiResourceHints {
        resource: "x".into(),
        hints: ROption::RNone,
    };
    let list = ROption::RSome(vec![entry.clone(), entry].into());
    assert_eq!(
        hints_from_ffi(list),
        Err(ProviderError::new(
            "InvalidProviderOutput",
            "the provider answered hints for resource `x` twice"
        ))
    );
}

/// Panics in some calls, answers the others.
fn panicky() -> FakeProvider {
    FakeProvider::new()
        .with_hints(|_, c| {
            if c.name == "boom" {
                panic!("boom in {}", c.name);
            }
            Ok(None)
        })
        .with_pod_hints(|_| Err(ProviderError::config("nope")))
        .with_allocate(|_, c, _| {
            Ok(Allocation::default()
                .with_cpus(CpuSet::parse("0-3,8").unwrap(), true)
                .with_mems(mask(&[0, 250]))
                .with_devices("x/y", vec![c.name.clone()])
                .with_env("K", "V"))
        })
        .with_release(|_, _| std::panic::panic_any(7u32))
        .with_checkpoint(|| Ok(vec![1, 2]))
        .with_preferred_allocation(|request| {
            if request.size == 9 {
                panic!("nine");
            }
            Ok(request
                .available
                .iter()
                .rev()
                .take(request.size)
                .cloned()
                .collect())
        })
}

#[test]
fn panics_become_errors_and_the_object_keeps_working() {
    let mut h = in_process(panicky());
    let pod = crate::testkit::guaranteed_pod("p", &[]);
    let boom = crate::testkit::container("boom", &[]);
    assert_eq!(
        h.topology_hints(&pod, &boom),
        Err(ProviderError::new(
            "ProviderPanic",
            "the provider panicked in topology_hints: boom in boom"
        ))
    );
    assert_eq!(h.topology_hints(&pod, &pod.containers[0]), Ok(None));
    assert_eq!(
        h.release("u", "c"),
        Err(ProviderError::new(
            "ProviderPanic",
            "the provider panicked in release: panic with a non-string payload"
        ))
    );
    assert_eq!(
        h.pod_topology_hints(&pod),
        Err(ProviderError::config("nope"))
    );
    assert_eq!(h.checkpoint(), Ok(vec![1, 2]));
    let a = h.allocate(&pod, &boom, &TopologyHint::ANY).unwrap();
    assert_eq!(a.cpus.to_string(), "0-3,8");
    assert!(a.exclusive);
    assert_eq!(a.mems, mask(&[0, 250]));
    assert_eq!(a.devices["x/y"], ["boom"]);
    assert_eq!(a.env["K"], "V");
    assert_eq!(h.restore(&[]), Ok(Reconciled::default()));
    let req =
        |size| PreferredAllocationRequest::new("x/y", vec!["a".into(), "b".into()], vec![], size);
    assert_eq!(h.preferred_allocation(&req(1)), Ok(vec!["b".to_owned()]));
    assert_eq!(
        h.preferred_allocation(&req(9)),
        Err(ProviderError::new(
            "ProviderPanic",
            "the provider panicked in preferred_allocation: nine"
        ))
    );
    // The default inventory owns nothing; an unknown call answers None.
    assert_eq!(h.inventory(), Ok(Inventory::default()));
    assert_eq!(h.call("added_in_a_later_sdk", "{}"), Ok(None));
    // A provider without devices assigned elsewhere knows none of them.
    assert_eq!(
        h.assigned_device_hints(&crate::AssignedDevicesRequest::default()),
        Ok(crate::AssignedDeviceHints::none())
    );
    // One that hands out no CPUs ignores CPUs to exclude.
    assert_eq!(
        h.exclude_cpus(&crate::CpuSet::parse("1").unwrap()),
        Ok(false)
    );
}

#[test]
fn cpus_to_exclude_cross_the_boundary_and_garbage_is_refused() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = std::sync::Arc::clone(&seen);
    let mut h = in_process(
        crate::testkit::FakeProvider::new().with_exclude_cpus(move |c| {
            log.lock().unwrap().push(c.to_string());
            Ok(true)
        }),
    );
    assert_eq!(
        h.exclude_cpus(&crate::CpuSet::parse("1,3-4").unwrap()),
        Ok(true)
    );
    assert_eq!(h.exclude_cpus(&crate::CpuSet::new()), Ok(true));
    assert_eq!(*seen.lock().unwrap(), ["1,3-4", ""]);
    let err = h
        .call(super::METHOD_EXCLUDE_CPUS, r#"{"cpus": "3-1"}"#)
        .unwrap_err();
    assert_eq!(err.reason, "InvalidHostInput");
    assert!(
        err.message
            .starts_with("the host sent CPUs to exclude that are not a Linux CPU list: "),
        "{}",
        err.message
    );
    assert_eq!(seen.lock().unwrap().len(), 2, "nothing called on garbage");
}

#[test]
fn a_resize_crosses_the_boundary_and_garbage_is_refused() {
    type Seen = (String, String, u64, String, TopologyHint);
    let seen: Arc<std::sync::Mutex<Vec<Seen>>> = Arc::default();
    let log = Arc::clone(&seen);
    let mut h = in_process(
        FakeProvider::new().with_resize(move |pod, c, current, hint| {
            log.lock().unwrap().push((
                pod.uid.clone(),
                c.name.clone(),
                c.request("cpu"),
                current.cpus.to_string(),
                *hint,
            ));
            match c.request("cpu") {
                2000 => Ok(Some(
                    Allocation::default().with_cpus(CpuSet::parse("1,3").unwrap(), true),
                )),
                3000 => Ok(None),
                _ => Err(ProviderError::resize_infeasible(
                    "3 CPUs do not fit on node 0",
                )),
            }
        }),
    );
    let current = Allocation::default().with_cpus(CpuSet::parse("1").unwrap(), true);
    let hint = TopologyHint {
        affinity: Some(mask(&[0])),
        preferred: true,
    };
    let pod = |milli: u64| crate::testkit::guaranteed_pod("g", &[("cpu", milli)]);
    let two = pod(2000);
    assert_eq!(
        h.resize(&two, &two.containers[0], &current, &hint),
        Ok(Some(
            Allocation::default().with_cpus(CpuSet::parse("1,3").unwrap(), true)
        ))
    );
    let three = pod(3000);
    assert_eq!(
        h.resize(&three, &three.containers[0], &current, &hint),
        Ok(None),
        "`null` is: does not resize"
    );
    let four = pod(4000);
    let err = h
        .resize(&four, &four.containers[0], &current, &hint)
        .unwrap_err();
    assert_eq!(
        (err.reason.as_str(), err.message.as_str()),
        (crate::RESIZE_INFEASIBLE, "3 CPUs do not fit on node 0")
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [2000, 3000, 4000].map(|m| (
            "g-uid".to_owned(),
            "app".to_owned(),
            m,
            "1".to_owned(),
            hint
        ))
    );
    // Garbage from the host is refused before the provider sees it.
    let err = h.call(super::METHOD_RESIZE, r#"{"pod": 1}"#).unwrap_err();
    assert_eq!(err.reason, "InvalidHostInput");
    assert!(
        err.message
            .starts_with("the host's resize request does not parse: "),
        "{}",
        err.message
    );
    assert_eq!(seen.lock().unwrap().len(), 3, "nothing called on garbage");
}

#[test]
fn host_data_with_fields_from_a_later_sdk_is_read() {
    let mut h = in_process(panicky());
    let pod = r#"{"uid": "u", "name": "p", "namespace": "d", "qos": "Guaranteed",
                  "init_containers": [], "containers": [], "resources": null,
                  "priority_class": "high"}"#;
    let c = r#"{"name": "app", "requests": {}, "limits": {}, "sidecar": false,
                "resize_policy": []}"#;
    assert_eq!(h.topology_hints_json(pod, c), Ok(None));
    let a = h.allocate_json(pod, c, &TopologyHint::ANY).unwrap();
    assert_eq!(a.devices["x/y"], ["app"]);
    // Garbage is an error naming what did not parse, not a panic.
    let err = h.topology_hints_json("{", c).unwrap_err();
    assert_eq!(err.reason, "InvalidHostInput");
    assert!(
        err.message.starts_with("the host's pod does not parse: "),
        "{}",
        err.message
    );
}

/// A plugin of a later patch release: its answers carry fields this SDK
/// does not know, and it knows a named call this SDK never makes.
struct LaterPlugin;

impl FfiProvider for LaterPlugin {
    fn topology_hints(&mut self, _: RStr<'_>, _: RStr<'_>) -> RResult<FfiProviderHints, FfiError> {
        RResult::ROk(ROption::RNone)
    }
    fn pod_topology_hints(&mut self, _: RStr<'_>) -> RResult<FfiProviderHints, FfiError> {
        RResult::ROk(ROption::RNone)
    }
    fn allocate(&mut self, _: RStr<'_>, _: RStr<'_>, _: FfiHint) -> RResult<RString, FfiError> {
        RResult::ROk(
            r#"{"cpus": "1", "mems": [250], "cdi_devices": ["vendor.com/x=1"], "annotations": {}}"#
                .into(),
        )
    }
    fn release(&mut self, _: RStr<'_>, _: RStr<'_>) -> RResult<(), FfiError> {
        RResult::ROk(())
    }
    fn checkpoint(&self) -> RResult<RVec<u8>, FfiError> {
        RResult::ROk(RVec::new())
    }
    fn restore(&mut self, _: RSlice<'_, u8>) -> RResult<RString, FfiError> {
        RResult::ROk(
            r#"{"conflicts": [{"pod_uid": "u", "container": "c", "resource": "x/y",
                "missing": "device b is gone", "ids": ["b"], "severity": "high"}],
                "moves": [], "adopted": [{"pod_uid": "v"}]}"#
                .into(),
        )
    }
    fn call(&mut self, method: RStr<'_>, _: RStr<'_>) -> RResult<ROption<RString>, FfiError> {
        match method.as_str() {
            METHOD_INVENTORY => RResult::ROk(ROption::RSome(
                r#"{"resources": {"x/y": {"total": {"capacity": 2, "allocatable": 2, "available": 1,
                    "reserved": 0}, "zones": [{"numa": 250, "capacity": 2, "allocatable": 2,
                    "available": 1, "cost": 3}]}}, "generation": 7}"#
                    .into(),
            )),
            METHOD_PREFERRED_ALLOCATION => {
                RResult::ROk(ROption::RSome(r#"{"devices": ["b"], "score": 12}"#.into()))
            }
            _ => RResult::ROk(ROption::RNone),
        }
    }
}

#[test]
fn plugin_answers_with_fields_from_a_later_sdk_are_read() {
    let mut h = ProviderHandle::new(FfiProvider_TO::from_value(
        LaterPlugin,
        abi_stable::sabi_trait::TD_Opaque,
    ));
    let pod = crate::testkit::guaranteed_pod("p", &[]);
    let a = h
        .allocate(&pod, &pod.containers[0], &TopologyHint::ANY)
        .unwrap();
    assert_eq!(a.cpus.to_string(), "1");
    assert_eq!(a.mems, mask(&[250]));
    assert!(!a.exclusive && a.devices.is_empty());
    let inv = h.inventory().unwrap();
    let zone = inv.resources["x/y"].zones[0];
    assert_eq!(zone.numa, Some(NumaNodeId::new(250).unwrap()));
    assert_eq!(zone.amounts.available, 1);
    let req = PreferredAllocationRequest::new("x/y", vec!["a".into(), "b".into()], vec![], 1);
    assert_eq!(h.preferred_allocation(&req), Ok(vec!["b".to_owned()]));
    let report = h.restore(b"{}").unwrap();
    assert_eq!(
        report,
        Reconciled::new().with_conflict(
            crate::Conflict::new("u", "c", "x/y", "device b is gone").with_ids(["b"])
        )
    );
}

#[test]
fn named_calls_a_plugin_does_not_know_get_their_defaults() {
    // A plugin of a patch release before every named call.
    let mut h = ProviderHandle::new(FfiProvider_TO::from_value(
        Recorder {
            knows_share: false,
            seen: Default::default(),
        },
        abi_stable::sabi_trait::TD_Opaque,
    ));
    let req = PreferredAllocationRequest::new("x/y", vec!["a".into()], vec![], 1);
    assert_eq!(h.preferred_allocation(&req), Ok(vec![]));
    assert_eq!(h.inventory(), Ok(Inventory::default()));
    // CPUs to exclude are ignored by a plugin that does not know the call.
    assert_eq!(
        h.exclude_cpus(&crate::CpuSet::parse("1").unwrap()),
        Ok(false)
    );
    // A plugin that does not know resize does not resize.
    let grown = crate::testkit::guaranteed_pod("p", &[("cpu", 2000)]);
    assert_eq!(
        h.resize(
            &grown,
            &grown.containers[0],
            &Allocation::default(),
            &TopologyHint::ANY
        ),
        Ok(None)
    );
    // An allocation without any field is the empty allocation.
    let pod = crate::testkit::guaranteed_pod("p", &[]);
    assert_eq!(
        h.allocate(&pod, &pod.containers[0], &TopologyHint::ANY),
        Ok(Allocation::default())
    );
}

#[test]
fn bad_plugin_output_is_an_error_naming_it() {
    struct Bad;
    impl FfiProvider for Bad {
        fn topology_hints(
            &mut self,
            _: RStr<'_>,
            _: RStr<'_>,
        ) -> RResult<FfiProviderHints, FfiError> {
            RResult::ROk(ROption::RNone)
        }
        fn pod_topology_hints(&mut self, _: RStr<'_>) -> RResult<FfiProviderHints, FfiError> {
            RResult::ROk(ROption::RNone)
        }
        fn allocate(&mut self, _: RStr<'_>, _: RStr<'_>, _: FfiHint) -> RResult<RString, FfiError> {
            RResult::ROk(r#"{"cpus": "3-1"}"#.into())
        }
        fn release(&mut self, _: RStr<'_>, _: RStr<'_>) -> RResult<(), FfiError> {
            RResult::ROk(())
        }
        fn checkpoint(&self) -> RResult<RVec<u8>, FfiError> {
            RResult::ROk(RVec::new())
        }
        fn restore(&mut self, _: RSlice<'_, u8>) -> RResult<RString, FfiError> {
            RResult::ROk(r#"{"conflicts": "none"}"#.into())
        }
        fn call(&mut self, _: RStr<'_>, _: RStr<'_>) -> RResult<ROption<RString>, FfiError> {
            RResult::ROk(ROption::RSome("[1]".into()))
        }
    }
    let mut h = ProviderHandle::new(FfiProvider_TO::from_value(
        Bad,
        abi_stable::sabi_trait::TD_Opaque,
    ));
    let pod = crate::testkit::guaranteed_pod("p", &[]);
    let err = h
        .allocate(&pod, &pod.containers[0], &TopologyHint::ANY)
        .unwrap_err();
    assert_eq!(err.reason, "InvalidProviderOutput");
    assert!(
        err.message.starts_with(
            "the provider's allocation is invalid: invalid id list \"3-1\": range 3-1 is reversed"
        ),
        "{}",
        err.message
    );
    let err = h.inventory().unwrap_err();
    assert_eq!(err.reason, "InvalidProviderOutput");
    assert!(err
        .message
        .starts_with("the provider's inventory is invalid: "));
    let err = h.restore(b"{}").unwrap_err();
    assert_eq!(err.reason, "InvalidProviderOutput");
    assert!(
        err.message
            .starts_with("the provider's reconcile report is invalid: invalid type: string"),
        "{}",
        err.message
    );
}

/// A plugin that records the pod argument of every call; it knows
/// [`METHOD_SHARE_POD`] when `knows_share`.
struct Recorder {
    knows_share: bool,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl FfiProvider for Recorder {
    fn topology_hints(
        &mut self,
        pod: RStr<'_>,
        _: RStr<'_>,
    ) -> RResult<FfiProviderHints, FfiError> {
        self.seen.lock().unwrap().push(pod.to_string());
        RResult::ROk(ROption::RNone)
    }
    fn pod_topology_hints(&mut self, pod: RStr<'_>) -> RResult<FfiProviderHints, FfiError> {
        self.seen.lock().unwrap().push(pod.to_string());
        RResult::ROk(ROption::RNone)
    }
    fn allocate(&mut self, pod: RStr<'_>, _: RStr<'_>, _: FfiHint) -> RResult<RString, FfiError> {
        self.seen.lock().unwrap().push(pod.to_string());
        RResult::ROk("{}".into())
    }
    fn release(&mut self, _: RStr<'_>, _: RStr<'_>) -> RResult<(), FfiError> {
        RResult::ROk(())
    }
    fn checkpoint(&self) -> RResult<RVec<u8>, FfiError> {
        RResult::ROk(RVec::new())
    }
    fn restore(&mut self, _: RSlice<'_, u8>) -> RResult<RString, FfiError> {
        RResult::ROk("{}".into())
    }
    fn call(&mut self, method: RStr<'_>, request: RStr<'_>) -> RResult<ROption<RString>, FfiError> {
        if self.knows_share && method.as_str() == METHOD_SHARE_POD {
            self.seen.lock().unwrap().push(format!("share {request}"));
            return RResult::ROk(ROption::RSome("{}".into()));
        }
        RResult::ROk(ROption::RNone)
    }
}

#[test]
fn a_shared_pod_crosses_once_and_other_pods_in_full() {
    let pod = crate::testkit::guaranteed_pod("p", &[("cpu", 1000)]);
    let json = to_json(&pod).unwrap();
    for knows_share in [true, false] {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut h = ProviderHandle::new(FfiProvider_TO::from_value(
            Recorder {
                knows_share,
                seen: std::sync::Arc::clone(&seen),
            },
            abi_stable::sabi_trait::TD_Opaque,
        ));
        let shared = Arc::new(pod.clone());
        h.share_pod(&shared);
        h.share_pod(&shared);
        let c = &shared.containers[0];
        h.topology_hints(&shared, c).unwrap();
        h.pod_topology_hints(&shared).unwrap();
        h.allocate(&shared, c, &TopologyHint::ANY).unwrap();
        // An equal pod that is another object is sent in full.
        h.allocate(&pod, c, &TopologyHint::ANY).unwrap();
        let seen = seen.lock().unwrap().clone();
        if knows_share {
            let share = format!("share {json}");
            assert_eq!(seen, [share.as_str(), "", "", "", json.as_str()]);
        } else {
            assert_eq!(seen, [json.as_str(); 4]);
        }
    }
}

#[test]
fn the_adapter_answers_calls_about_the_shared_pod() {
    let echo = FakeProvider::new().with_allocate(|pod, c, _| {
        Ok(Allocation::default().with_env("SEEN", format!("{}/{}", pod.name, c.name)))
    });
    let container = to_json(&crate::testkit::container("app", &[])).unwrap();
    let mut h = in_process(echo);
    let err = h
        .allocate_json("", &container, &TopologyHint::ANY)
        .unwrap_err();
    assert_eq!(err.reason, INVALID_INPUT_REASON);
    assert_eq!(
        err.message,
        "the host referred to the shared pod, but shared none"
    );
    let shared = Arc::new(crate::testkit::guaranteed_pod("first", &[]));
    h.share_pod(&shared);
    let a = h
        .allocate(&shared, &shared.containers[0], &TopologyHint::ANY)
        .unwrap();
    assert_eq!(a.env["SEEN"], "first/app");
    let a = h.allocate_json("", &container, &TopologyHint::ANY).unwrap();
    assert_eq!(a.env["SEEN"], "first/app");
    let other = crate::testkit::guaranteed_pod("second", &[]);
    let a = h
        .allocate(&other, &other.containers[0], &TopologyHint::ANY)
        .unwrap();
    assert_eq!(a.env["SEEN"], "second/app");
}

#[test]
fn pod_round_trip() {
    let pod = crate::testkit::guaranteed_pod("p", &[("cpu", 2000), ("example.com/widget", 1)])
        .with_resources(Some(crate::PodResources::new(
            BTreeMap::from([("cpu".to_owned(), 4000)]),
            BTreeMap::new(),
        )));
    let back: PodView = serde_json::from_str(&to_json(&pod).unwrap()).unwrap();
    assert_eq!(back, pod);
}
