//! Reconcile: saved assignments taken back on the devices listed now.

use std::collections::BTreeMap;

use super::super::{Device, DeviceManager, Devices};
use crate::testkit::{self, container, hint};
use crate::{Conflict, Machine, Move, NumaNodeId, ProviderError, Reconciled, ResourceId};

const R: &str = "example.com/fpga";

fn gpu(id: &str, node: u8, pci: &str) -> Device {
    Device::new(id, Some(NumaNodeId::from(node))).with_pci_address(pci)
}

fn manager(machine: &Machine, resources: Vec<(&str, Vec<Device>)>) -> DeviceManager {
    let devices = resources
        .into_iter()
        .fold(Devices::new(), |d, (r, list)| d.resource(r, list));
    DeviceManager::new(machine, devices).unwrap_or_else(|e| panic!("manager: {e}"))
}

/// Allocates `count` devices of `resource` to the app container of pod
/// `name` with the merged hint `h`; the ids.
fn admit(m: &mut DeviceManager, name: &str, resource: &str, count: u64, h: &str) -> Vec<String> {
    let pod = testkit::guaranteed_pod(name, &[(resource, count)]);
    let a = m
        .allocate(&pod, &pod.containers[0], &hint(h), &mut ())
        .unwrap_or_else(|e| panic!("allocate {name}: {e}"));
    a.devices[resource].clone()
}

/// The exclusivity invariant: no device is held by two pods (what a pod's
/// containers share is one pod's).
fn assert_exclusive(m: &DeviceManager) {
    let mut owner: BTreeMap<(&str, usize), &str> = BTreeMap::new();
    for ((pod, _), by_resource) in &m.assignments {
        for (resource, positions) in by_resource {
            for &i in positions {
                let first = owner.entry((resource, i)).or_insert(pod);
                assert_eq!(
                    *first, pod,
                    "device {i} of {resource} is held by pods {first} and {pod}"
                );
            }
        }
    }
    for (resource, pool) in &m.pools {
        for (i, d) in pool.devices.iter().enumerate() {
            let holding = m
                .assignments
                .values()
                .filter(|b| b.get(resource).is_some_and(|p| p.contains(&i)))
                .count();
            assert_eq!(
                pool.holders[i] as usize, holding,
                "holders of {} of {resource}",
                d.id
            );
        }
    }
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

#[test]
fn a_held_device_that_vanishes_and_returns_is_its_pods_again_never_twice() {
    let machine = testkit::machine(2, 1);
    let both = || vec![gpu("a", 0, "0000:07:00.0"), gpu("b", 0, "0000:08:00.0")];
    let mut m = manager(&machine, vec![(R, both())]);
    assert_eq!(admit(&mut m, "p", R, 1, "0:true"), ["a"]);
    let saved = m.checkpoint().unwrap();
    assert_eq!(
        text(saved.clone()),
        r#"{"assignments":[{"pod_uid":"p-uid","container":"app","resource":"example.com/fpga","devices":[{"id":"a","identity":["pci:0000:07:00.0"]}]}],"reuse":null}"#
    );

    // Device a vanishes: p keeps it (reported), nobody else gets it.
    let mut gone = manager(&machine, vec![(R, vec![gpu("b", 0, "0000:08:00.0")])]);
    let report = gone.restore(&saved).unwrap();
    assert_eq!(
        report,
        Reconciled::new()
            .with_conflict(Conflict::new("p-uid", "app", R, "device a is gone").with_ids(["a"]))
    );
    assert!(gone.held("p-uid", "app", R).is_empty());
    assert_eq!(gone.inventory().resources[R].total.available, 1);
    assert_eq!(admit(&mut gone, "q", R, 1, "0:true"), ["b"]);
    assert_exclusive(&gone);
    let while_gone = gone.checkpoint().unwrap();
    assert_eq!(
        text(while_gone.clone()),
        r#"{"assignments":[{"pod_uid":"p-uid","container":"app","resource":"example.com/fpga","devices":[{"id":"a","identity":["pci:0000:07:00.0"]}]},{"pod_uid":"q-uid","container":"app","resource":"example.com/fpga","devices":[{"id":"b","identity":["pci:0000:08:00.0"]}]}],"reuse":null}"#
    );

    // It returns: p's again (listed once), q keeps b, nothing is free.
    let mut back = manager(&machine, vec![(R, both())]);
    assert_eq!(back.restore(&while_gone), Ok(Reconciled::new()));
    assert_eq!(back.held("p-uid", "app", R), ["a"]);
    assert_eq!(back.held("q-uid", "app", R), ["b"]);
    assert_eq!(back.inventory().resources[R].total.available, 0);
    assert_exclusive(&back);
    let pod = testkit::guaranteed_pod("r", &[(R, 1)]);
    assert_eq!(
        back.allocate(&pod, &pod.containers[0], &hint("0:true"), &mut ())
            .unwrap_err()
            .message,
        "requested number of devices unavailable for example.com/fpga: 1 requested, 0 available"
    );
    // Released, it is free again, and the checkpoint forgets it.
    back.release("p-uid", "app");
    assert_eq!(back.inventory().resources[R].total.available, 1);
    assert!(!text(back.checkpoint().unwrap()).contains("p-uid"));
}

#[test]
fn the_checkpoint_an_sdk_0_2_wrote_after_a_device_returned_restores() {
    // SDK 0.2 saved a container's vanished devices as a second entry for
    // the same resource; when the device came back, the restore refused
    // the entry as "assigned twice" and held the provider.
    let machine = testkit::machine(1, 1);
    let mut m = manager(
        &machine,
        vec![(R, vec![Device::new("a", None), Device::new("b", None)])],
    );
    let saved = br#"{"assignments":[
        {"pod_uid":"p","container":"c","resource":"example.com/fpga","devices":["b"]},
        {"pod_uid":"p","container":"c","resource":"example.com/fpga","devices":["a"]}],
        "reuse":null}"#;
    assert_eq!(m.restore(saved), Ok(Reconciled::new()));
    assert_eq!(m.held("p", "c", R), ["b", "a"]);
    assert_eq!(
        text(m.checkpoint().unwrap()),
        r#"{"assignments":[{"pod_uid":"p","container":"c","resource":"example.com/fpga","devices":["b","a"]}],"reuse":null}"#
    );
    assert_exclusive(&m);
}

#[test]
fn a_device_found_under_another_id_or_resource_follows_and_is_reported() {
    let machine = testkit::machine(2, 1);
    // Discovered by PCI address first: the ids are the addresses.
    let mut by_pci = manager(
        &machine,
        vec![(
            "nvidia.com/gpu",
            vec![
                gpu("0000:07:00.0", 0, "0000:07:00.0"),
                gpu("0000:08:00.0", 1, "0000:08:00.0"),
            ],
        )],
    );
    let init_and_app = testkit::pod(
        "p",
        vec![container("init", &[("nvidia.com/gpu", 1)])],
        vec![container("app", &[("nvidia.com/gpu", 1)])],
    );
    by_pci
        .allocate(
            &init_and_app,
            &init_and_app.init_containers[0],
            &hint("0:true"),
            &mut (),
        )
        .unwrap();
    let saved = by_pci.checkpoint().unwrap();
    assert!(text(saved.clone())
        .contains(r#""reuse":{"pod_uid":"p-uid","devices":{"nvidia.com/gpu":["0000:07:00.0"]}}"#));

    // Then by UUID under a renamed resource, same PCI addresses.
    let renamed = || {
        manager(
            &machine,
            vec![(
                "example.com/gpu",
                vec![
                    gpu("GPU-8", 1, "0000:08:00.0").with_serial("GPU-8"),
                    gpu("GPU-7", 0, "0000:07:00.0").with_serial("GPU-7"),
                ],
            )],
        )
    };
    let mut m = renamed();
    let report = m.restore(&saved).unwrap();
    assert_eq!(
        report,
        Reconciled::new().with_move(Move::new(
            "p-uid",
            "init",
            ResourceId::new("nvidia.com/gpu", "0000:07:00.0"),
            ResourceId::new("example.com/gpu", "GPU-7"),
        ))
    );
    assert_eq!(m.held("p-uid", "init", "example.com/gpu"), ["GPU-7"]);
    // The reusable device followed too: the app container reuses it.
    let mut app = init_and_app.clone();
    app.containers[0] = container("app", &[("example.com/gpu", 1)]);
    let a = m
        .allocate(&app, &app.containers[0], &hint("1:true"), &mut ())
        .unwrap();
    assert_eq!(a.devices["example.com/gpu"], ["GPU-7"]);
    // Another pod gets the other GPU only.
    assert_eq!(
        admit(&mut m, "q", "example.com/gpu", 1, "0:true"),
        ["GPU-8"]
    );
    assert_exclusive(&m);
    // Saved under the new names, it restores without a move.
    let again = m.checkpoint().unwrap();
    assert!(
        text(again.clone())
            .contains(r#"{"id":"GPU-7","identity":["pci:0000:07:00.0","serial:GPU-7"]}"#),
        "{}",
        text(again.clone())
    );
    assert_eq!(renamed().restore(&again), Ok(Reconciled::new()));
}

#[test]
fn without_identity_a_device_is_found_by_resource_and_id() {
    let machine = testkit::machine(1, 1);
    // Saved without identity (or by SDK 0.2): found by id, on either side.
    let mut m = manager(&machine, vec![(R, vec![gpu("x", 0, "0000:07:00.0")])]);
    let saved = br#"{"assignments":[{"pod_uid":"p","container":"c","resource":"example.com/fpga","devices":["x"]}]}"#;
    assert_eq!(m.restore(saved), Ok(Reconciled::new()));
    assert_eq!(m.held("p", "c", R), ["x"]);
    let mut plain = manager(&machine, vec![(R, vec![Device::new("x", None)])]);
    let with_identity = br#"{"assignments":[{"pod_uid":"p","container":"c","resource":"example.com/fpga","devices":[{"id":"x","identity":["pci:0000:07:00.0"]}]}]}"#;
    assert_eq!(plain.restore(with_identity), Ok(Reconciled::new()));
    assert_eq!(plain.held("p", "c", R), ["x"]);
    // Both with identities that differ: another device with that id.
    let mut other = manager(&machine, vec![(R, vec![gpu("x", 0, "0000:09:00.0")])]);
    let report = other.restore(with_identity).unwrap();
    assert_eq!(
        report.conflicts,
        [Conflict::new("p", "c", R, "device x is gone").with_ids(["x"])]
    );
    assert!(other.held("p", "c", R).is_empty());
    assert_eq!(admit(&mut other, "q", R, 1, "0:true"), ["x"]);
    // A resource the provider no longer has, its devices nowhere else.
    let mut renamed = manager(
        &machine,
        vec![("example.com/new", vec![Device::new("x", None)])],
    );
    let report = renamed.restore(saved).unwrap();
    assert_eq!(
        report.conflicts,
        [Conflict::new(
            "p",
            "c",
            R,
            "this provider no longer has resource example.com/fpga; device x is gone"
        )
        .with_ids(["x"])]
    );
    assert!(text(renamed.checkpoint().unwrap())
        .contains(r#""resource":"example.com/fpga","devices":["x"]"#));
}

#[test]
fn a_device_two_pods_claim_stays_the_first_claimants() {
    let machine = testkit::machine(1, 1);
    let mut m = manager(
        &machine,
        vec![(R, vec![gpu("a", 0, "0000:07:00.0"), Device::new("b", None)])],
    );
    // q's claim by identity comes before p's by id, whatever the order.
    let saved = br#"{"assignments":[
        {"pod_uid":"p","container":"c","resource":"example.com/fpga","devices":["a","b"]},
        {"pod_uid":"q","container":"c","resource":"example.com/fpga","devices":[{"id":"old-a","identity":["pci:0000:07:00.0"]}]},
        {"pod_uid":"r","container":"c","resource":"example.com/fpga","devices":["b"]}]}"#;
    let report = m.restore(saved).unwrap();
    assert_eq!(
        report.conflicts,
        [
            Conflict::new(
                "p",
                "c",
                R,
                "device a is held by pod q, which claimed it first"
            )
            .with_ids(["a"]),
            Conflict::new(
                "r",
                "c",
                R,
                "device b is held by pod p, which claimed it first"
            )
            .with_ids(["b"]),
        ]
    );
    assert_eq!(
        report.moves,
        [Move::new(
            "q",
            "c",
            ResourceId::new(R, "old-a"),
            ResourceId::new(R, "a")
        )]
    );
    assert_eq!(m.held("p", "c", R), ["b"]);
    assert_eq!(m.held("q", "c", R), ["a"]);
    assert!(m.held("r", "c", R).is_empty());
    assert_exclusive(&m);
    // A device listed twice for one container is held once.
    let mut twice = manager(&machine, vec![(R, vec![Device::new("b", None)])]);
    let saved = br#"{"assignments":[{"pod_uid":"p","container":"c","resource":"example.com/fpga","devices":["b","b"]}]}"#;
    assert_eq!(twice.restore(saved), Ok(Reconciled::new()));
    assert_eq!(twice.held("p", "c", R), ["b"]);
    assert_eq!(twice.pools[R].holders, [1]);
}

#[test]
fn with_no_assignments_any_devices_are_accepted() {
    let machine = testkit::machine(1, 1);
    let mut m = manager(&machine, vec![(R, vec![Device::new("new", None)])]);
    let saved = manager(&machine, vec![(R, vec![Device::new("old", None)])])
        .checkpoint()
        .unwrap();
    assert_eq!(m.restore(&saved), Ok(Reconciled::new()));
    assert_eq!(m.restore(b"{}"), Ok(Reconciled::new()));
    // Reusable devices the pod does not hold are dropped, not refused.
    let saved = br#"{"assignments":[],"reuse":{"pod_uid":"a","devices":{"example.com/fpga":["new"]}},"written_by":"0.4"}"#;
    assert_eq!(m.restore(saved), Ok(Reconciled::new()));
    assert_eq!(admit(&mut m, "q", R, 1, "any:true"), ["new"]);
}

#[test]
fn unreadable_bytes_are_refused_and_change_nothing() {
    let machine = testkit::machine(1, 1);
    let mut m = manager(&machine, vec![(R, vec![Device::new("a", None)])]);
    admit(&mut m, "p", R, 1, "any:true");
    let before = m.checkpoint().unwrap();
    let err = m.restore(b"\x00not json").unwrap_err();
    assert_eq!(err.reason, "InvalidCheckpoint");
    assert!(
        err.message
            .starts_with("device assignments do not parse: expected value"),
        "{err}"
    );
    let err = m
        .restore(
            br#"{"assignments":[{"pod_uid":"p","container":"c","resource":"r","devices":[7]}]}"#,
        )
        .unwrap_err();
    assert_eq!(
        err,
        ProviderError::checkpoint(
            "device assignments do not parse: data did not match any variant of untagged enum \
             SavedForm at line 1 column 75"
        )
    );
    assert_eq!(m.checkpoint().unwrap(), before);
}

#[test]
fn devices_listed_twice_or_with_ids_that_split_are_refused() {
    let machine = testkit::machine(1, 1);
    let err = |devices: Devices| {
        DeviceManager::new(&machine, devices)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(Devices::new().resource("nvidia.com/gpu", vec![Device::new("GPU-A,GPU-B", None)])),
        "InvalidConfig: resource nvidia.com/gpu: device id \"GPU-A,GPU-B\" contains a comma; \
         device ids are joined with commas in environment variables, where this one would name \
         other devices: give the device an id without commas or whitespace"
    );
    assert_eq!(
        err(Devices::new().resource(R, vec![Device::new("fpga 0", None)])),
        "InvalidConfig: resource example.com/fpga: device id \"fpga 0\" contains whitespace; \
         device ids are joined with commas in environment variables, where this one would name \
         other devices: give the device an id without commas or whitespace"
    );
    assert_eq!(
        err(Devices::new()
            .resource("a.com/x", vec![gpu("x0", 0, "0000:07:00.0")])
            .resource("b.com/y", vec![gpu("y0", 0, "00000000:07:00.0")])),
        "InvalidConfig: resource b.com/y: device \"y0\" and device \"x0\" of a.com/x are one \
         device (PCI device 0000:07:00.0); listed twice it would be handed to two containers: \
         list it once"
    );
    assert_eq!(
        err(Devices::new().resource(
            R,
            vec![
                Device::new("a", None).with_serial("SN1"),
                Device::new("b", None).with_serial("SN1")
            ]
        )),
        "InvalidConfig: resource example.com/fpga: device \"b\" and device \"a\" of \
         example.com/fpga are one device (serial SN1); listed twice it would be handed to two \
         containers: list it once"
    );
    assert_eq!(
        err(Devices::new().resource(R, vec![Device::new("a", None).with_pci_address("3b:00.0")])),
        "InvalidConfig: resource example.com/fpga: device \"a\" has PCI address \"3b:00.0\", \
         which is not one (domain:bus:device.function, e.g. 0000:3b:00.0)"
    );
    assert_eq!(
        err(Devices::new().resource(R, vec![Device::new("a", None).with_serial(" ")])),
        "InvalidConfig: resource example.com/fpga: device \"a\" has an empty identity \
         \"serial:\"; give its PCI address or serial, or none"
    );
    // One device id in two resources is two devices unless their
    // identities say otherwise.
    assert!(DeviceManager::new(
        &machine,
        Devices::new()
            .resource("a.com/x", vec![Device::new("d", None)])
            .resource("b.com/y", vec![Device::new("d", None)])
    )
    .is_ok());
}

/// Issue 37: devices first known by their PCI addresses, then listed by a
/// source that names no address (GPU-0, GPU-1: a topology file without
/// `pci`). The held devices cannot be matched: they are not freed, and no
/// device without an identity is handed out (any of them may be one) until
/// the pod is released; the conflict says so.
#[test]
fn held_devices_that_cannot_be_matched_hold_the_devices_without_identity() {
    let machine = testkit::machine(2, 1);
    let mut m = manager(
        &machine,
        vec![(
            R,
            vec![
                gpu("0000:07:00.0", 0, "0000:07:00.0"),
                gpu("0000:08:00.0", 0, "0000:08:00.0"),
            ],
        )],
    );
    assert_eq!(admit(&mut m, "p", R, 1, "0:true"), ["0000:07:00.0"]);
    let saved = m.checkpoint().unwrap();
    let anonymous = || {
        vec![
            Device::new("GPU-0", Some(NumaNodeId::from(0))),
            Device::new("GPU-1", Some(NumaNodeId::from(0))),
        ]
    };
    let mut now = manager(&machine, vec![(R, anonymous())]);
    let report = now.restore(&saved).unwrap();
    assert_eq!(
        report.conflicts,
        [Conflict::new(
            "p-uid",
            "app",
            R,
            "device 0000:07:00.0 is not found by its PCI address or serial, and the devices listed without one (GPU-0, GPU-1) may be it: they are not handed out until this container is released"
        )
        .with_ids(vec!["0000:07:00.0".to_owned()])]
    );
    assert_eq!(now.inventory().resources[R].total.available, 0);
    let q = testkit::guaranteed_pod("q", &[(R, 1)]);
    assert!(now
        .allocate(&q, &q.containers[0], &hint("0:true"), &mut ())
        .is_err());
    // Saved again with its identity: a later source with addresses finds it.
    assert_eq!(now.checkpoint().unwrap(), saved);
    now.release("p-uid", "app");
    assert_eq!(now.inventory().resources[R].total.available, 2);
    assert_eq!(admit(&mut now, "q", R, 1, "0:true"), ["GPU-0"]);
    assert_exclusive(&now);

    // Devices that all have identities: a vanished one holds nothing else.
    let mut other = manager(&machine, vec![(R, vec![gpu("b", 0, "0000:08:00.0")])]);
    other.restore(&saved).unwrap();
    assert_eq!(other.inventory().resources[R].total.available, 1);
}
