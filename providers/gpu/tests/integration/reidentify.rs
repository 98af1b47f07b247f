//! A GPU a pod holds stays that pod's when the provider finds it again
//! another way: first by PCI address (driver not loaded yet), then through
//! NVML by UUID; from PCI to a topology file; under a renamed resource. The
//! provider restarts with the new discovery and restores the old instance's
//! checkpoint (as the host does): the assignment follows its GPU (a move),
//! and the next pod gets the other GPU only.

use std::path::PathBuf;

use serde_json::{json, Value};
use topomgr_provider_gpu::plugin::GpuPlugin;
use topomgr_sdk::devices::DeviceProvider;
use topomgr_sdk::{testkit, Machine, Move, Reconciled, ResourceId};

use crate::nvml::{address, fake_library, gpu, levels, with_script};

const GPU: &str = "nvidia.com/gpu";

/// Two NVIDIA GPUs on node 0 of a 2-node machine, at the fake NVML's
/// first two bus ids (`0000:07:00.0`, `0000:17:00.0`).
fn machine() -> Machine {
    let gpus = (0..2)
        .map(|i| testkit::pci_device(&address(i), "0x10de", "0x030200", Some(0)))
        .collect();
    testkit::machine_with_devices(2, 2, gpus)
}

fn load(config: Value) -> testkit::Loaded {
    testkit::load::<DeviceProvider<GpuPlugin>>(&machine(), config)
        .unwrap_or_else(|e| panic!("provider: {e}"))
}

/// Discovery by PCI address: NVML is not there.
fn by_pci() -> testkit::Loaded {
    load(json!({"nvml_library": "/nonexistent/libnvidia-ml.so.1"}))
}

/// Pod `p` is given one GPU of `resource` on node 0; the provider's
/// checkpoint and the GPU's id.
fn first_pod_holds_one(p: &mut testkit::Loaded, resource: &str) -> (Vec<u8>, String) {
    let pod = testkit::guaranteed_pod("p", &[(resource, 1)]);
    let a = p
        .allocate(&pod, &pod.containers[0], &testkit::hint("0:true"))
        .unwrap();
    (p.checkpoint().unwrap(), a.devices[resource][0].clone())
}

/// The next pod: two GPUs are not there (one is held), one is the other.
fn next_pod_gets_only(p: &mut testkit::Loaded, resource: &str, other: &str) {
    let two = testkit::guaranteed_pod("q2", &[(resource, 2)]);
    let h = p.topology_hints(&two, &two.containers[0]).unwrap();
    testkit::assert_hints(&h, resource, &[0, 1], Some(&[]));
    let err = p
        .allocate(&two, &two.containers[0], &testkit::hint("0:true"))
        .unwrap_err();
    assert_eq!(
        err.message,
        format!("requested number of devices unavailable for {resource}: 2 requested, 1 available")
    );
    let one = testkit::guaranteed_pod("q", &[(resource, 1)]);
    let a = p
        .allocate(&one, &one.containers[0], &testkit::hint("0:true"))
        .unwrap();
    assert_eq!(a.devices[resource], [other]);
    assert_eq!(a.env["NVIDIA_VISIBLE_DEVICES"], other);
    assert_eq!(
        p.inventory().unwrap().resources[resource].total.available,
        0
    );
}

fn moved(from: (&str, &str), to: (&str, &str)) -> Reconciled {
    Reconciled::new().with_move(Move::new(
        "p-uid",
        "app",
        ResourceId::new(from.0, from.1),
        ResourceId::new(to.0, to.1),
    ))
}

#[test]
fn from_pci_addresses_to_nvml_uuids_and_back() {
    let mut pci = by_pci();
    let (saved, held) = first_pod_holds_one(&mut pci, GPU);
    assert_eq!(held, "0000:07:00.0");
    let script = json!({
        "gpus": [gpu(0, vec![]), gpu(1, vec![])],
        "common_ancestor": levels(2, |_, _| 30),
    });
    let saved_by_nvml = with_script("reidentify", &script, |_| {
        let mut nvml = load(json!({ "nvml_library": fake_library() }));
        let report = nvml.restore(&saved).unwrap();
        assert_eq!(report, moved((GPU, "0000:07:00.0"), (GPU, "GPU-0-uuid")));
        let saved = nvml.checkpoint().unwrap();
        next_pod_gets_only(&mut nvml, GPU, "GPU-1-uuid");
        saved
    });
    // The driver goes away again: back to PCI addresses.
    let mut pci = by_pci();
    assert_eq!(
        pci.restore(&saved_by_nvml).unwrap(),
        moved((GPU, "GPU-0-uuid"), (GPU, "0000:07:00.0"))
    );
    next_pod_gets_only(&mut pci, GPU, "0000:17:00.0");
}

/// A topology file naming the two GPUs `GPU-a` and `GPU-b`, with their PCI
/// addresses.
fn topology_file(tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("reidentify-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gpus.json");
    let gpus = json!({"gpus": [
        {"index": 0, "id": "GPU-a", "numa": 0, "pci": address(0)},
        {"index": 1, "id": "GPU-b", "numa": 0, "pci": address(1)}],
        "links": [[0, 1, "PHB"]]});
    std::fs::write(&file, gpus.to_string()).unwrap();
    file
}

#[test]
fn from_pci_addresses_to_a_topology_file() {
    let (saved, _) = first_pod_holds_one(&mut by_pci(), GPU);
    let mut file = load(json!({"topology_file": topology_file("file")}));
    assert_eq!(
        file.restore(&saved).unwrap(),
        moved((GPU, "0000:07:00.0"), (GPU, "GPU-a"))
    );
    next_pod_gets_only(&mut file, GPU, "GPU-b");
}

#[test]
fn a_renamed_gpu_resource_keeps_what_pods_hold() {
    let file = topology_file("rename");
    let (saved, held) = first_pod_holds_one(&mut load(json!({ "topology_file": file })), GPU);
    assert_eq!(held, "GPU-a");
    let renamed = "example.com/gpu";
    let mut p = load(json!({"topology_file": file, "resource": renamed}));
    assert_eq!(
        p.restore(&saved).unwrap(),
        moved((GPU, "GPU-a"), (renamed, "GPU-a"))
    );
    next_pod_gets_only(&mut p, renamed, "GPU-b");
}

#[test]
fn gpus_that_would_be_exposed_twice_are_refused() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("reidentify-twice-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let refused = |gpus: Value| {
        let file = dir.join("gpus.json");
        std::fs::write(&file, json!({"gpus": gpus, "links": []}).to_string()).unwrap();
        testkit::load::<DeviceProvider<GpuPlugin>>(&machine(), json!({"topology_file": file}))
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(
        refused(json!([{"index": 0, "id": "GPU-A,GPU-B", "numa": 0}])).as_deref(),
        Some(
            "InvalidConfig: resource nvidia.com/gpu: device id \"GPU-A,GPU-B\" contains a comma; \
             device ids are joined with commas in environment variables, where this one would \
             name other devices: give the device an id without commas or whitespace"
        )
    );
    assert_eq!(
        refused(json!([
            {"index": 0, "id": "GPU-a", "numa": 0, "pci": "0000:07:00.0"},
            {"index": 1, "id": "GPU-b", "numa": 0, "pci": "00000000:07:00.0"}]))
        .as_deref(),
        Some(
            "InvalidConfig: resource nvidia.com/gpu: device \"GPU-b\" and device \"GPU-a\" of \
             nvidia.com/gpu are one device (PCI device 0000:07:00.0); listed twice it would be \
             handed to two containers: list it once"
        )
    );
}
