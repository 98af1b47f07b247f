//! NVML discovery against a scripted fake `libnvidia-ml` (the workspace
//! member `tests/fake-nvml`, built here with cargo), so the NVML path runs
//! on machines without an NVIDIA driver.
//!
//! The fake reads its script from `FAKE_NVML_SCRIPT` at every init, so the
//! scenarios run one at a time under a lock.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Value};
use topomgr_provider_gpu::config::GpuConfig;
use topomgr_provider_gpu::discovery::{self, Discovered, Source};
use topomgr_provider_gpu::link::PcieLevel;
use topomgr_provider_gpu::nvml::{self, NvmlDiscoveryError};
use topomgr_provider_gpu::topology::GpuTopology;
use topomgr_sdk::{Machine, NumaNodeId, PciDevice};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds the fake library once and returns its path.
///
/// Built as the host's integration tests build the workspace's plugins
/// (`--workspace --lib --examples`): features resolve as in `cargo test
/// --workspace`, so after that build nothing is compiled again (`-p
/// topomgr-fake-nvml` alone resolves fewer features and rebuilt serde,
/// syn and their kin).
pub(crate) fn fake_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let out = Command::new(cargo)
            .args([
                "build",
                "--workspace",
                "--lib",
                "--examples",
                "--message-format=json-render-diagnostics",
            ])
            .current_dir(workspace_root())
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "building the fake NVML failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "fake_nvml")
            .flat_map(|m| m["filenames"].as_array().cloned().unwrap_or_default())
            .filter_map(|f| f.as_str().map(PathBuf::from))
            .find(|f| f.extension().is_some_and(|e| e == "so"))
            .expect("cargo built libfake_nvml.so")
    })
}

/// A scratch directory for one scenario.
fn scratch(tag: &str) -> PathBuf {
    let d =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nvml-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Runs `f` (given a scratch directory, removed after it) with the fake
/// answering `script`; one scenario at a time.
pub(crate) fn with_script<T>(tag: &str, script: &Value, f: impl FnOnce(&Path) -> T) -> T {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let dir = scratch(tag);
    let script_path = dir.join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    std::env::set_var("FAKE_NVML_SCRIPT", &script_path);
    let out = f(&dir);
    // Its scratch directory goes (a failing scenario's stays, to look at).
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Runs NVML discovery with `script`, NUMA nodes read from a sysfs tree
/// holding `numa` (`(address, node)`).
fn discover_with(
    tag: &str,
    script: &Value,
    numa: &[(&str, i32)],
) -> Result<Option<GpuTopology>, NvmlDiscoveryError> {
    with_script(tag, script, |dir| {
        for (address, node) in numa {
            let dev = dir.join("sys/bus/pci/devices").join(address);
            std::fs::create_dir_all(&dev).unwrap();
            std::fs::write(dev.join("numa_node"), format!("{node}\n")).unwrap();
        }
        let root = dir.join("sys");
        let numa_of = nvml::sysfs_numa(&root);
        nvml::discover(fake_library().as_os_str(), &numa_of)
    })
}

fn bus(i: usize) -> String {
    format!("00000000:{:02X}:00.0", 0x07 + 0x10 * i)
}

pub(crate) fn address(i: usize) -> String {
    format!("0000:{:02x}:00.0", 0x07 + 0x10 * i)
}

/// NVML's common-ancestor levels: 10 single switch, 20 multiple switches,
/// 30 host bridge, 40 node, 50 system.
pub(crate) fn levels(n: usize, level: impl Fn(usize, usize) -> u32) -> Value {
    json!((0..n)
        .map(|a| (0..n)
            .map(|b| if a == b { 0 } else { level(a, b) })
            .collect::<Vec<_>>())
        .collect::<Vec<_>>())
}

pub(crate) fn gpu(i: usize, nvlinks: Vec<Value>) -> Value {
    json!({"uuid": format!("GPU-{i}-uuid"), "bus_id": bus(i), "nvlinks": nvlinks})
}

/// `count` links from GPU `from` to GPU `to`.
fn links_to(to: usize, count: usize) -> Vec<Value> {
    (0..count)
        .map(|_| json!({"remote_bus_id": bus(to), "remote_type": 0}))
        .collect()
}

fn switch_links(count: usize, active: usize) -> Vec<Value> {
    (0..count)
        .map(|l| {
            json!({"active": l < active, "remote_bus_id": format!("00000000:{:02X}:00.0", 0xC0 + l), "remote_type": 2})
        })
        .collect()
}

#[test]
fn no_library_or_no_driver_falls_through() {
    let missing = nvml::discover(
        Path::new("/nonexistent/libnvidia-ml.so.1").as_os_str(),
        &|_| None,
    );
    assert!(matches!(missing, Ok(None)), "{missing:?}");
    let no_driver = discover_with("nodriver", &json!({"init": 9}), &[]);
    assert!(matches!(no_driver, Ok(None)), "{no_driver:?}");
}

#[test]
fn direct_nvlinks_pcie_levels_uuids_and_numa() {
    // Four GPUs: 0-1 and 2-3 bridged by two NVLinks (like the 4xRTX8000
    // fixture), 0-1 and 2-3 under one PCIe switch, across sockets SYS.
    let mut l0 = links_to(1, 2);
    l0.push(json!({"active": false, "remote_bus_id": bus(3), "remote_type": 0}));
    let script = json!({
        "gpus": [gpu(0, l0), gpu(1, links_to(0, 2)), gpu(2, links_to(3, 2)), gpu(3, links_to(2, 2))],
        "common_ancestor": levels(4, |a, b| if a / 2 == b / 2 { 10 } else { 50 }),
    });
    let t = discover_with(
        "direct",
        &script,
        &[
            (&address(0), 0),
            (&address(1), 0),
            (&address(2), 1),
            (&address(3), -1),
        ],
    )
    .unwrap()
    .expect("NVML answers");
    let gpus: Vec<_> = t
        .gpus()
        .iter()
        .map(|g| {
            (
                g.index,
                g.id.clone(),
                g.pci.clone().unwrap(),
                g.numa.map(u32::from),
            )
        })
        .collect();
    assert_eq!(
        gpus,
        [
            (
                0,
                "GPU-0-uuid".to_owned(),
                "0000:07:00.0".to_owned(),
                Some(0)
            ),
            (
                1,
                "GPU-1-uuid".to_owned(),
                "0000:17:00.0".to_owned(),
                Some(0)
            ),
            (
                2,
                "GPU-2-uuid".to_owned(),
                "0000:27:00.0".to_owned(),
                Some(1)
            ),
            (3, "GPU-3-uuid".to_owned(), "0000:37:00.0".to_owned(), None),
        ]
    );
    assert_eq!(t.links(0, 1).nvlinks, 2);
    assert_eq!(t.links(0, 1).pcie, Some(PcieLevel::SingleSwitch));
    assert_eq!(t.pair_score(0, 1), 250);
    assert_eq!(t.links(0, 3).nvlinks, 0, "an inactive link does not count");
    assert_eq!(t.pair_score(1, 2), 10);
    assert_eq!(t.pair_score(2, 3), 250);
}

#[test]
fn every_common_ancestor_level_maps_to_its_label() {
    let script = json!({
        "gpus": (0..7).map(|i| gpu(i, vec![])).collect::<Vec<_>>(),
        "common_ancestor": levels(7, |a, b| if a == 0 || b == 0 { [0, 0, 10, 20, 30, 40, 50][a.max(b)] } else { 50 }),
    });
    let t = discover_with("levels", &script, &[]).unwrap().unwrap();
    let labels: Vec<_> = (2..7)
        .map(|b| t.links(0, b).pcie.map(PcieLevel::label))
        .collect();
    assert_eq!(
        labels,
        [
            Some("PIX"),
            Some("PXB"),
            Some("PHB"),
            Some("NODE"),
            Some("SYS")
        ]
    );
    assert_eq!(t.links(0, 1).pcie, Some(PcieLevel::Board));
}

#[test]
fn nvswitch_links_are_credited_as_nvidia_smi_shows_them() {
    // Four GPUs with 12 NVLinks each to the switches; GPU 3 has one down.
    let script = json!({
        "gpus": [
            gpu(0, switch_links(12, 12)),
            gpu(1, switch_links(12, 12)),
            gpu(2, switch_links(12, 12)),
            gpu(3, switch_links(12, 11)),
        ],
        "common_ancestor": levels(4, |a, b| if a / 2 == b / 2 { 40 } else { 50 }),
    });
    let t = discover_with("nvswitch", &script, &[]).unwrap().unwrap();
    assert_eq!(t.links(0, 1).nvlinks, 12);
    assert_eq!(t.links(0, 2).nvlinks, 12);
    assert_eq!(t.links(2, 3).nvlinks, 11);
    assert_eq!(t.pair_score(0, 1), 1220);
    assert_eq!(t.pair_score(0, 2), 1210);

    // A driver that cannot tell the remote type: no switch is credited
    // (upstream's reading).
    let mut old = script.clone();
    old["fail"] = json!({"nvmlDeviceGetNvLinkRemoteDeviceType": 13});
    let t = discover_with("nvswitch-old", &old, &[]).unwrap().unwrap();
    assert_eq!(t.links(0, 1).nvlinks, 0);
    assert_eq!(t.pair_score(0, 1), 20);

    // A remote end that is a CPU (IBM NPU) is not a switch.
    let npu = |i| {
        gpu(
            i,
            vec![json!({"remote_bus_id": "00000000:F0:00.0", "remote_type": 1})],
        )
    };
    let script = json!({"gpus": [npu(0), npu(1)], "common_ancestor": levels(2, |_, _| 50)});
    let t = discover_with("npu", &script, &[]).unwrap().unwrap();
    assert_eq!(t.pair_score(0, 1), 10);
}

#[test]
fn unsupported_links_are_skipped_and_failures_are_errors() {
    let script = json!({
        "gpus": [gpu(0, links_to(1, 1)), gpu(1, links_to(0, 1))],
        "common_ancestor": levels(2, |_, _| 20),
        "fail": {"nvmlDeviceGetNvLinkState": 3},
    });
    let t = discover_with("unsupported", &script, &[]).unwrap().unwrap();
    assert_eq!(t.links(0, 1).nvlinks, 0);
    assert_eq!(t.pair_score(0, 1), 40);

    let lib = fake_library().display().to_string();
    let cases = [
        (
            json!({"nvmlDeviceGetTopologyCommonAncestor": 999}),
            format!("NVML ({lib}): common ancestor of GPUs 0 and 1: an internal driver error occurred"),
        ),
        (
            json!({"nvmlDeviceGetUUID": 15}),
            format!("NVML ({lib}): UUID of GPU 0: device fell off the bus or has otherwise become inacessible"),
        ),
        (
            json!({"nvmlDeviceGetNvLinkRemotePciInfo_v2": 999}),
            format!("NVML ({lib}): NVLinks of GPU 0: an internal driver error occurred"),
        ),
    ];
    for (fail, message) in cases {
        let mut s = script.clone();
        s["fail"] = fail;
        let err = discover_with("failing", &s, &[]).unwrap_err();
        assert_eq!(err.to_string(), message);
    }

    let twice = json!({
        "gpus": [gpu(0, vec![]), {"uuid": "GPU-0-uuid", "bus_id": bus(1)}],
        "common_ancestor": levels(2, |_, _| 50),
    });
    let err = discover_with("twice", &twice, &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("NVML ({lib}): GPUs #0 and #1 both have id `GPU-0-uuid`")
    );
}

#[test]
fn the_provider_discovery_takes_numa_from_the_machine_and_falls_back_to_pci() {
    let script = json!({
        "gpus": [gpu(0, links_to(1, 4)), gpu(1, links_to(0, 4))],
        "common_ancestor": levels(2, |_, _| 30),
    });
    let gpu = PciDevice::new(
        address(1),
        "0x10de",
        "0x2330",
        "0x030200",
        Some(NumaNodeId::from(0u8)),
    )
    .with_driver("nvidia");
    let machine = Machine::new(Vec::new(), Vec::new(), vec![gpu]);
    // Through the provider's discovery: the fake named by `nvml_library`.
    let config = GpuConfig {
        nvml_library: Some(fake_library().to_owned()),
        ..GpuConfig::default()
    };
    let result = with_script("provider", &script, |_| {
        discovery::discover(&config, None, &machine)
    });
    let Discovered {
        topology: t,
        source,
        ..
    } = result.unwrap();
    assert_eq!(source, Source::Nvml(fake_library().display().to_string()));
    assert_eq!(
        t.gpus()[0].numa,
        None,
        "GPU 0's PCI device is not in the machine"
    );
    assert_eq!(t.gpus()[1].numa, Some(NumaNodeId::from(0u8)));
    assert_eq!(t.pair_score(0, 1), 430);

    // NVML failing after init: PCI devices, NUMA only.
    let mut broken = script.clone();
    broken["fail"] = json!({"nvmlDeviceGetTopologyCommonAncestor": 999});
    let Discovered {
        topology: t,
        source,
        ..
    } = with_script("broken", &broken, |_| {
        discovery::discover(&config, None, &machine)
    })
    .unwrap();
    assert_eq!(source, Source::Pci);
    assert_eq!(t.gpus().len(), 1);
    assert_eq!(t.gpus()[0].id, address(1));

    // A recorded machine (another host's sysfs tree) listing none of NVML's
    // GPUs: its own NVIDIA PCI devices, not the GPUs of the host running.
    let recorded = Machine::new(
        Vec::new(),
        Vec::new(),
        vec![PciDevice::new(
            "0000:b1:00.0",
            "0x10de",
            "0x20b0",
            "0x030200",
            Some(NumaNodeId::from(0u8)),
        )],
    );
    let Discovered {
        topology: t,
        source,
        ..
    } = with_script("recorded", &script, |_| {
        discovery::discover(&config, None, &recorded)
    })
    .unwrap();
    assert_eq!(source, Source::Pci);
    let ids: Vec<&str> = t.gpus().iter().map(|g| g.id.as_str()).collect();
    assert_eq!(ids, ["0000:b1:00.0"]);
    // A machine without PCI devices at all (nothing to tell): NVML's GPUs.
    let bare = Machine::new(Vec::new(), Vec::new(), Vec::new());
    let Discovered {
        topology: t,
        source,
        ..
    } = with_script("bare", &script, |_| {
        discovery::discover(&config, None, &bare)
    })
    .unwrap();
    assert_eq!(source, Source::Nvml(fake_library().display().to_string()));
    assert_eq!(t.len(), 2);
}
