use std::path::PathBuf;

use serde_json::json;
use topomgr_sdk::devices::DeviceProvider;
use topomgr_sdk::{
    testkit, Machine, Move, NumaNodeId, PciDevice, PreferredAllocationRequest, ProviderConfig,
    Reconciled, ResourceId, Sriov,
};

use super::*;

type Provider = DeviceProvider<SriovPlugin>;

const DPDK: &str = "intel.com/dpdk";
const KERNEL: &str = "intel.com/kernel";

/// Two nodes; on each an E810 PF (`ens<n+1>f0`) with VFs 0-1 on iavf and
/// 2-3 on vfio-pci; a VF of a PF without a NUMA node (`-1`) on vfio-pci.
fn machine() -> Machine {
    let mut devices = Vec::new();
    for (n, bus) in [(0u8, "18"), (1, "86")] {
        let pf = format!("0000:{bus}:00.0");
        let vfs: Vec<String> = (0..4).map(|i| format!("0000:{bus}:01.{i}")).collect();
        devices.push(
            PciDevice::new(
                &pf,
                "0x8086",
                "0x1592",
                "0x020000",
                Some(NumaNodeId::from(n)),
            )
            .with_driver("ice")
            .with_net(vec![format!("ens{}f0", n + 1)])
            .with_link_type(1)
            .with_sriov(Sriov::new(128, vfs.clone())),
        );
        for (i, vf) in vfs.iter().enumerate() {
            let d = PciDevice::new(
                vf,
                "0x8086",
                "0x1889",
                "0x020000",
                Some(NumaNodeId::from(n)),
            )
            .with_physfn(&pf)
            .with_vf_index(i as u32)
            .with_iommu_group(16 + 4 * u32::from(n) + i as u32);
            devices.push(if i < 2 {
                d.with_driver("iavf")
                    .with_net(vec![format!("ens{}f0v{i}", n + 1)])
            } else {
                d.with_driver("vfio-pci")
            });
        }
    }
    devices.push(
        PciDevice::new("0000:3b:00.0", "0x8086", "0x1592", "0x020000", None)
            .with_driver("ice")
            .with_net(vec!["ens9f0".into()])
            .with_sriov(Sriov::new(8, vec!["0000:3b:01.0".into()])),
    );
    devices.push(
        PciDevice::new("0000:3b:01.0", "0x8086", "0x1889", "0x020000", None)
            .with_driver("vfio-pci")
            .with_physfn("0000:3b:00.0")
            .with_vf_index(0)
            .with_iommu_group(40),
    );
    testkit::machine_with_devices(2, 2, devices)
}

fn config() -> serde_json::Value {
    json!({"resource_list": [
        {"resourceName": "dpdk", "selectors": [{"drivers": ["vfio-pci"], "pfNames": ["ens1f0", "ens2f0"]}]},
        {"resourceName": "kernel", "excludeTopology": true, "selectors": [{"drivers": ["iavf"]}]},
        {"resourceName": "absent", "selectors": [{"drivers": ["mlx5_core"]}]},
        {"resourceName": "nonuma", "selectors": [{"pfNames": ["ens9f0"]}]},
    ]})
}

fn load() -> testkit::Loaded {
    testkit::load::<Provider>(&machine(), config()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn one_resource_per_pool_with_devices_on_their_nodes() {
    let mut p = load();
    let inv = p.inventory().unwrap();
    let names: Vec<&str> = inv.resources.keys().map(String::as_str).collect();
    // "absent" selects nothing: not registered.
    assert_eq!(names, [DPDK, KERNEL, "intel.com/nonuma"]);
    let dpdk = &inv.resources[DPDK];
    assert_eq!(dpdk.total.capacity, 4);
    let per_zone: Vec<(Option<u32>, u64)> = dpdk
        .zones
        .iter()
        .map(|z| (z.numa.map(|n| n.get()), z.amounts.available))
        .collect();
    assert_eq!(per_zone, [(Some(0), 2), (Some(1), 2)]);
    // excludeTopology and numa_node -1: every device in the "no node" zone.
    for r in [KERNEL, "intel.com/nonuma"] {
        let zones: Vec<Option<u32>> = inv.resources[r]
            .zones
            .iter()
            .map(|z| z.numa.map(|n| n.get()))
            .collect();
        assert_eq!(zones, [None], "{r}");
    }
}

#[test]
fn hints_like_the_device_manager() {
    let mut p = load();
    let pod = testkit::guaranteed_pod("a", &[(DPDK, 2)]);
    let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
    testkit::assert_hints(&h, DPDK, &[0, 1], Some(&["0:true", "1:true", "0-1:false"]));
    let pod = testkit::guaranteed_pod("b", &[(DPDK, 3)]);
    let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
    testkit::assert_hints(&h, DPDK, &[0, 1], Some(&["0-1:true"]));
    let pod = testkit::guaranteed_pod("c", &[(DPDK, 5)]);
    let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
    testkit::assert_hints(&h, DPDK, &[0, 1], Some(&[]));
    // No topology: no preference.
    let pod = testkit::guaranteed_pod("d", &[(KERNEL, 1), ("intel.com/nonuma", 1)]);
    let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
    let map = h.expect("a map");
    assert_eq!(map.get(KERNEL), Some(&None));
    assert_eq!(map.get("intel.com/nonuma"), Some(&None));
    // A resource that is not registered is not this provider's.
    let pod = testkit::guaranteed_pod("e", &[("intel.com/absent", 1)]);
    let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
    assert_eq!(h, Some(BTreeMap::new()));
}

#[test]
fn allocation_sets_the_plugins_environment() {
    let mut p = load();
    let pod = testkit::guaranteed_pod("a", &[(DPDK, 2), (KERNEL, 1)]);
    let a = p
        .allocate(&pod, &pod.containers[0], &testkit::hint("1:true"))
        .unwrap();
    assert_eq!(a.devices[DPDK], ["0000:86:01.2", "0000:86:01.3"]);
    assert_eq!(a.devices[KERNEL], ["0000:18:01.0"]);
    assert!(a.cpus.is_empty() && a.mems.is_empty());
    let env: Vec<(&str, &str)> = a
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        env,
        [
            ("PCIDEVICE_INTEL_COM_DPDK", "0000:86:01.2,0000:86:01.3"),
            (
                "PCIDEVICE_INTEL_COM_DPDK_INFO",
                r#"{"0000:86:01.2":{"generic":{"deviceID":"0000:86:01.2"},"vfio":{"dev-mount":"/dev/vfio/22","mount":"/dev/vfio/vfio"}},"0000:86:01.3":{"generic":{"deviceID":"0000:86:01.3"},"vfio":{"dev-mount":"/dev/vfio/23","mount":"/dev/vfio/vfio"}}}"#
            ),
            ("PCIDEVICE_INTEL_COM_KERNEL", "0000:18:01.0"),
            (
                "PCIDEVICE_INTEL_COM_KERNEL_INFO",
                r#"{"0000:18:01.0":{"generic":{"deviceID":"0000:18:01.0"}}}"#
            ),
        ]
    );
    // Node 1 has no vfio-pci VF left: only node 0 can hold two more.
    let pod2 = testkit::guaranteed_pod("b", &[(DPDK, 2)]);
    let h = p.topology_hints(&pod2, &pod2.containers[0]).unwrap();
    testkit::assert_hints(&h, DPDK, &[0, 1], Some(&["0:true", "0-1:false"]));
    // The toolkit's checkpoint, restored into a fresh provider.
    let cp = p.checkpoint().unwrap();
    let mut q = load();
    q.restore(&cp).unwrap();
    let h = q.topology_hints(&pod2, &pod2.containers[0]).unwrap();
    testkit::assert_hints(&h, DPDK, &[0, 1], Some(&["0:true", "0-1:false"]));
    q.release("a-uid", "app").unwrap();
    let h = q.topology_hints(&pod2, &pod2.containers[0]).unwrap();
    testkit::assert_hints(&h, DPDK, &[0, 1], Some(&["0:true", "1:true", "0-1:false"]));
}

#[test]
fn a_renamed_resource_keeps_the_vfs_pods_hold() {
    let mut p = load();
    let pod = testkit::guaranteed_pod("a", &[(DPDK, 1)]);
    let a = p
        .allocate(&pod, &pod.containers[0], &testkit::hint("0:true"))
        .unwrap();
    assert_eq!(a.devices[DPDK], ["0000:18:01.2"]);
    let saved = p.checkpoint().unwrap();
    // The operator renames "dpdk" to "dpdk_vfio" and restarts.
    let mut config = config();
    config["resource_list"][0]["resourceName"] = json!("dpdk_vfio");
    let renamed = "intel.com/dpdk_vfio";
    let mut q = testkit::load::<Provider>(&machine(), config).unwrap();
    let report = q.restore(&saved).unwrap();
    assert_eq!(
        report,
        Reconciled::new().with_move(Move::new(
            "a-uid",
            "app",
            ResourceId::new(DPDK, "0000:18:01.2"),
            ResourceId::new(renamed, "0000:18:01.2"),
        ))
    );
    assert_eq!(q.inventory().unwrap().resources[renamed].total.available, 3);
    // Node 0's other VF, then node 1's: never the held one.
    for (name, want) in [("b", "0000:18:01.3"), ("c", "0000:86:01.2")] {
        let pod = testkit::guaranteed_pod(name, &[(renamed, 1)]);
        let a = q
            .allocate(&pod, &pod.containers[0], &testkit::hint("0:true"))
            .unwrap();
        assert_eq!(a.devices[renamed], [want]);
    }
    let pod = testkit::guaranteed_pod("d", &[(renamed, 2)]);
    let h = q.topology_hints(&pod, &pod.containers[0]).unwrap();
    testkit::assert_hints(&h, renamed, &[0, 1], Some(&[]));
}

#[test]
fn no_preferred_allocation_like_the_plugin() {
    let mut p = load();
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let req = PreferredAllocationRequest::new(
        DPDK,
        ids(&["0000:18:01.2", "0000:86:01.2", "0000:86:01.3"]),
        ids(&["0000:18:01.2"]),
        2,
    );
    assert_eq!(p.preferred_allocation(&req).unwrap(), Vec::<String>::new());
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sriov")
}

#[test]
fn a_relative_config_file_is_relative_to_the_config_directory() {
    let m = machine();
    let config = ProviderConfig(json!({"config_file": "deployments-configmap.json"}));
    let state = std::env::temp_dir();
    let dir = fixture_dir();
    let ctx = ProviderContext::new(&m, &config, &state).with_config_dir(Some(&dir));
    let (plugin, devices) = SriovPlugin::build(&ctx, &HostFacts::default()).unwrap();
    // Of the deployment's config, only intel_sriov_netdevice selects
    // devices of this machine (its iavf VFs); the others are not registered.
    let names: Vec<&str> = devices.resources().collect();
    assert_eq!(names, ["intel.com/intel_sriov_netdevice"]);
    let addresses: Vec<&str> = plugin.pools[0]
        .devices
        .iter()
        .map(|d| d.address.as_str())
        .collect();
    assert_eq!(
        addresses,
        [
            "0000:18:01.0",
            "0000:18:01.1",
            "0000:86:01.0",
            "0000:86:01.1"
        ]
    );
    let ctx = ProviderContext::new(&m, &config, &state);
    let err = SriovPlugin::build(&ctx, &HostFacts::default())
        .err()
        .expect("no such file here");
    assert_eq!(
        err.to_string(),
        "InvalidConfig: cannot read the SR-IOV device plugin config deployments-configmap.json: \
         No such file or directory (os error 2)"
    );
}

#[test]
fn bad_config_is_refused_naming_the_entry() {
    let err = |config| match testkit::load::<Provider>(&machine(), config) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        err(json!({"resource_list": [{"resourceName": "x", "selectors": [{"pKeys": ["0x1"]}]}]})),
        "InvalidConfig: [providers.sriov.config]: resource_list[0] (\"x\"): selectors[0].pKeys: \
         selector pKeys is not supported by topomgr: it needs InfiniBand partition keys, which \
         topomgr does not read; remove it"
    );
    assert_eq!(
        err(json!({"config_file": "/nonexistent/config.json"})),
        "InvalidConfig: cannot read the SR-IOV device plugin config /nonexistent/config.json: \
         No such file or directory (os error 2)"
    );
}
