//! GPUs named by device node (`/dev/nvidiaN`, as a CDI spec's `deviceNodes`
//! give them) and by MIG UUID (`MIG-…`) resolve to their GPU and fix its
//! NUMA node's hints, through NVML (the fake `libnvidia-ml`) and through the
//! driver's proc files, on the recorded machine `tests/fixtures/3g-mig`
//! (see its README: GPU 0 `/dev/nvidia2` on node 0, GPU 1 `/dev/nvidia0`
//! on node 1 with two MIG devices, GPU 2 on node 1 without a known minor).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use topomgr_provider_gpu::plugin::GpuPlugin;
use topomgr_sdk::devices::{DeviceProvider, DEVICE_NODE_ATTRIBUTE};
use topomgr_sdk::{
    testkit, AssignedDeviceHints, AssignedDevices, AssignedDevicesRequest, DeviceNode, DeviceRef,
    Machine, Provider, ProviderConfig, ProviderContext, ResourceMatch,
};

use crate::nvml::{fake_library, with_script};

const GPU: &str = "nvidia.com/gpu";
const GPU0: &str = "GPU-5c2a8f1e-3b7d-4e19-a6c0-9d8e7f6a5b41";
const GPU1: &str = "GPU-a17e3c94-62d8-4f0b-8e25-c4b9d1f07a36";
const GPU2: &str = "GPU-0e6d4b2a-8c1f-4a97-b3e5-2f7c9a1d6b80";
const MIG_A: &str = "MIG-3f9b2e71-0c4a-5d86-b1e9-7a2c6d4f8e05";
const MIG_B: &str = "MIG-d84c1a6e-97f2-5b30-8a4d-e6c1f9b27d53";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/3g-mig")
}

fn script() -> Value {
    let text = std::fs::read_to_string(fixture().join("nvml.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The fixture's GPUs on a 2-node machine.
fn machine() -> Machine {
    let gpu = |address: &str, node| testkit::pci_device(address, "0x10de", "0x030200", Some(node));
    testkit::machine_with_devices(
        2,
        2,
        vec![
            gpu("0000:1b:00.0", 0),
            gpu("0000:9a:00.0", 1),
            gpu("0000:b1:00.0", 1),
        ],
    )
}

fn no_proc() -> PathBuf {
    PathBuf::from("/nonexistent/proc")
}

/// The GPUs' `device_node` attributes, by index.
fn device_nodes(config: &Value) -> Vec<Option<String>> {
    let machine = machine();
    let config = ProviderConfig(config.clone());
    let state = std::env::temp_dir();
    let ctx = ProviderContext::new(&machine, &config, &state);
    let p = DeviceProvider::<GpuPlugin>::new(&ctx).unwrap_or_else(|e| panic!("provider: {e}"));
    p.manager()
        .devices(GPU)
        .unwrap()
        .iter()
        .map(|d| d.attribute(DEVICE_NODE_ATTRIBUTE).map(str::to_owned))
        .collect()
}

fn load(config: &Value) -> testkit::Loaded {
    testkit::load::<DeviceProvider<GpuPlugin>>(&machine(), config.clone())
        .unwrap_or_else(|e| panic!("provider: {e}"))
}

fn node(minor: u32) -> DeviceNode {
    DeviceNode::new(format!("/dev/nvidia{minor}"), "c", 195, minor)
}

/// A CDI device's nodes: the GPU's node with the control devices beside it,
/// as NVIDIA's CDI specs list them.
fn cdi(nodes: &[DeviceNode]) -> AssignedDevicesRequest {
    let mut all = nodes.to_vec();
    all.push(DeviceNode::new("/dev/nvidiactl", "c", 195, 255));
    all.push(DeviceNode::new("/dev/nvidia-uvm", "c", 510, 0));
    AssignedDevicesRequest::new(vec![AssignedDevices::new(
        "CDI devices",
        ResourceMatch::Prefix(String::new()),
        vec![],
    )
    .with_nodes(all)])
}

fn visible(uuids: &[&str]) -> AssignedDevicesRequest {
    AssignedDevicesRequest::new(vec![AssignedDevices::new(
        "NVIDIA_VISIBLE_DEVICES",
        ResourceMatch::Prefix("nvidia.com/".into()),
        uuids.iter().map(|u| DeviceRef::Uuid((*u).into())).collect(),
    )])
}

/// The GPUs recognised and their hints (`"1:true"`, ...); `None`: none.
fn resolve(
    p: &mut testkit::Loaded,
    request: &AssignedDevicesRequest,
) -> Option<(Vec<String>, Vec<String>, Vec<String>)> {
    let a: AssignedDeviceHints = p.assigned_device_hints(request).unwrap();
    let r = a.resources.get(GPU)?;
    let map = Some(BTreeMap::from([(GPU.to_owned(), r.hints.clone())]));
    let hints = testkit::hint_strings(&map, GPU, &[0, 1]).unwrap_or_default();
    Some((r.devices.clone(), r.matched.clone(), hints))
}

#[test]
fn through_nvml_device_nodes_and_mig_uuids_name_their_gpus() {
    let config = json!({"nvml_library": fake_library(), "proc_root": no_proc()});
    with_script("device-nodes", &script(), |_| {
        assert_eq!(
            device_nodes(&config),
            [Some("c 195:2".to_owned()), Some("c 195:0".to_owned()), None],
            "NVML's minors; GPU 2 answers none and gets no attribute"
        );
        let mut p = load(&config);
        // /dev/nvidia0 is GPU 1 (index 1), on node 1.
        let (devices, matched, hints) = resolve(&mut p, &cdi(&[node(0)])).unwrap();
        assert_eq!(devices, [GPU1]);
        assert_eq!(matched, ["/dev/nvidia0"]);
        assert_eq!(hints, ["1:true", "0-1:false"]);
        // /dev/nvidia2 is GPU 0, on node 0.
        let (devices, _, hints) = resolve(&mut p, &cdi(&[node(2)])).unwrap();
        assert_eq!(devices, [GPU0]);
        assert_eq!(hints, ["0:true", "0-1:false"]);
        // No GPU has minor 1 (GPU 2's is not known): nothing recognised.
        assert_eq!(resolve(&mut p, &cdi(&[node(1)])), None);
        // Both: the devices span the nodes, only both fit, not preferred
        // (node 1 has two GPUs: two could have been on one node), so
        // single-numa-node refuses the container.
        let (devices, _, hints) = resolve(&mut p, &cdi(&[node(2), node(0)])).unwrap();
        assert_eq!(devices, [GPU0, GPU1]);
        assert_eq!(hints, ["0-1:false"]);

        // A MIG device's UUID names its parent GPU, on node 1.
        let (devices, matched, hints) = resolve(&mut p, &visible(&[MIG_B])).unwrap();
        assert_eq!(devices, [GPU1]);
        assert_eq!(matched, [MIG_B]);
        assert_eq!(hints, ["1:true", "0-1:false"]);
        let (devices, matched, _) = resolve(&mut p, &visible(&[MIG_A, MIG_B])).unwrap();
        assert_eq!(devices, [GPU1], "two slices of one GPU: that GPU");
        assert_eq!(matched, [MIG_A, MIG_B]);
        // A MIG device beside a GPU on the other node.
        let (devices, _, hints) = resolve(&mut p, &visible(&[GPU0, MIG_A])).unwrap();
        assert_eq!(devices, [GPU0, GPU1]);
        assert_eq!(hints, ["0-1:false"]);

        // The MIG UUIDs are identities of their GPU (one physical device
        // for the host's ledger); a GPU without MIG has its own only.
        let served = p.device_identities().unwrap().unwrap();
        let ids = &served.resources[GPU];
        assert_eq!(
            ids[1].identity,
            [
                "pci:0000:9a:00.0".to_owned(),
                format!("serial:{GPU1}"),
                format!("serial:{MIG_A}"),
                format!("serial:{MIG_B}"),
            ]
        );
        assert_eq!(
            ids[0].identity,
            ["pci:0000:1b:00.0".to_owned(), format!("serial:{GPU0}")]
        );
        assert_eq!(ids[2].id, GPU2);
    });
}

#[test]
fn where_nvml_gives_no_minor_the_proc_file_does() {
    let mut no_minor = script();
    no_minor["fail"] = json!({"nvmlDeviceGetMinorNumber": 3});
    let with_proc = json!({"nvml_library": fake_library(), "proc_root": fixture().join("proc")});
    let without = json!({"nvml_library": fake_library(), "proc_root": no_proc()});
    with_script("device-nodes-fallback", &no_minor, |_| {
        assert_eq!(device_nodes(&without), [None, None, None]);
        assert_eq!(
            device_nodes(&with_proc),
            [Some("c 195:2".to_owned()), Some("c 195:0".to_owned()), None]
        );
        let mut p = load(&with_proc);
        let (devices, _, _) = resolve(&mut p, &cdi(&[node(0)])).unwrap();
        assert_eq!(devices, [GPU1]);
        // MIG UUIDs still come from NVML.
        let (devices, _, _) = resolve(&mut p, &visible(&[MIG_A])).unwrap();
        assert_eq!(devices, [GPU1]);
    });
}

#[test]
fn without_nvml_the_proc_files_name_gpus_by_node_and_uuid() {
    let config = json!({
        "nvml_library": "/nonexistent/libnvidia-ml.so.1",
        "proc_root": fixture().join("proc"),
    });
    assert_eq!(
        device_nodes(&config),
        [Some("c 195:2".to_owned()), Some("c 195:0".to_owned()), None],
        "GPU 2 has no information file: no attribute"
    );
    let mut p = load(&config);
    // Without NVML the GPUs' ids are their PCI addresses.
    let (devices, matched, hints) = resolve(&mut p, &cdi(&[node(0)])).unwrap();
    assert_eq!(devices, ["0000:9a:00.0"]);
    assert_eq!(matched, ["/dev/nvidia0"]);
    assert_eq!(hints, ["1:true", "0-1:false"]);
    let (devices, _, hints) = resolve(&mut p, &cdi(&[node(2)])).unwrap();
    assert_eq!(devices, ["0000:1b:00.0"]);
    assert_eq!(hints, ["0:true", "0-1:false"]);
    // The file's GPU UUID names the GPU too.
    let (devices, matched, _) = resolve(&mut p, &visible(&[GPU1])).unwrap();
    assert_eq!(devices, ["0000:9a:00.0"]);
    assert_eq!(matched, [GPU1]);
    // The proc files name no MIG device: a MIG UUID is not known (a MIG
    // device's CDI spec gives its parent's /dev/nvidiaN, which is).
    assert_eq!(resolve(&mut p, &visible(&[MIG_A])), None);
}

#[test]
fn an_odd_information_file_is_ignored_and_the_provider_loads() {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("device-nodes-odd-{}", std::process::id()));
    let gpus = root.join("driver/nvidia/gpus");
    // (directory, the fixture file written there, an edit of it)
    let files = [
        ("0000:1b:00.0", "0000:1b:00.0", ("", "")),
        (
            "0000:9a:00.0",
            "0000:9a:00.0",
            ("Device Minor: \t 0", "Device Minor: \t zero"),
        ),
        // Another GPU's file under this GPU's address.
        ("0000:b1:00.0", "0000:9a:00.0", ("", "")),
    ];
    for (pci, from, (old, new)) in files {
        let file = fixture().join("proc/driver/nvidia/gpus").join(from);
        let text = std::fs::read_to_string(file.join("information")).unwrap();
        let text = if old.is_empty() {
            text
        } else {
            text.replace(old, new)
        };
        std::fs::create_dir_all(gpus.join(pci)).unwrap();
        std::fs::write(gpus.join(pci).join("information"), text).unwrap();
    }
    let config = json!({"nvml_library": "/nonexistent/libnvidia-ml.so.1", "proc_root": root});
    assert_eq!(
        device_nodes(&config),
        [Some("c 195:2".to_owned()), None, None],
        "a bad minor and a file of another GPU are ignored (logged); the others are used"
    );
    let _ = std::fs::remove_dir_all(&root);
}
