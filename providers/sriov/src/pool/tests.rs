use serde_json::json;

use super::*;
use crate::config::parse_config_json;
use crate::device::PfLink;

fn net_dev(
    address: &str,
    vendor: &str,
    device: &str,
    driver: &str,
    numa: Option<u32>,
) -> DeviceView {
    DeviceView {
        address: address.into(),
        vendor: vendor.into(),
        device: device.into(),
        class: 0x020000,
        driver: Some(driver.into()),
        numa,
        ..DeviceView::default()
    }
}

fn vf(pf: &DeviceView, index: u32, address: &str, device: &str, driver: &str) -> DeviceView {
    let pf_name = pf.net.first().cloned();
    let net = if driver == "vfio-pci" {
        vec![]
    } else {
        vec![format!("{}v{index}", pf_name.as_deref().unwrap_or("?"))]
    };
    DeviceView {
        net,
        link_type: Some("ether".into()),
        pf: Some(PfLink {
            address: pf.address.clone(),
            name: pf_name,
            vf_index: Some(index),
        }),
        ..net_dev(address, &pf.vendor, device, driver, pf.numa)
    }
}

/// The devices of the example machine `examples/machines/2s2n-sriov` (as
/// its generate.sh writes them; eno1 stands in for the interface with the
/// default route, which sysfs cannot show).
fn machine() -> Vec<DeviceView> {
    let pf =
        |address: &str, vendor: &str, device: &str, driver: &str, ifname: &str, numa| DeviceView {
            net: vec![ifname.into()],
            link_type: Some("ether".into()),
            sriov_enabled: true,
            ..net_dev(address, vendor, device, driver, Some(numa))
        };
    let pf0 = pf("0000:18:00.0", "8086", "1592", "ice", "ens1f0", 0);
    let pf1 = pf("0000:86:00.0", "8086", "1592", "ice", "ens2f0", 1);
    let mlx = DeviceView {
        rdma: vec!["mlx5_0".into()],
        rdma_char_devices: vec!["issm0".into(), "umad0".into(), "uverbs0".into()],
        ..pf("0000:d8:00.0", "15b3", "1017", "mlx5_core", "ens3f0", 1)
    };
    let mut devs = vec![
        DeviceView {
            net: vec!["eno1".into()],
            link_type: Some("ether".into()),
            acpi_index: Some("1".into()),
            default_route: true,
            ..net_dev("0000:01:00.0", "8086", "1521", "igb", Some(0))
        },
        DeviceView {
            net: vec!["eno2".into()],
            link_type: Some("ether".into()),
            acpi_index: Some("2".into()),
            ..net_dev("0000:01:00.1", "8086", "1521", "igb", Some(0))
        },
        DeviceView {
            class: 0x0c0330,
            ..net_dev("0000:00:14.0", "8086", "a1af", "xhci_hcd", None)
        },
        DeviceView {
            class: 0x120000,
            iommu_group: Some("26".into()),
            ..net_dev("0000:af:00.0", "8086", "0d90", "vfio-pci", Some(1))
        },
    ];
    for (pf, bus, groups) in [
        (&pf0, "0000:18:01", [16, 17]),
        (&pf1, "0000:86:01", [21, 22]),
    ] {
        for i in 0..4u32 {
            let driver = if i < 2 { "iavf" } else { "vfio-pci" };
            let mut d = vf(pf, i, &format!("{bus}.{i}"), "1889", driver);
            if i >= 2 {
                d.iommu_group = Some(groups[i as usize - 2].to_string());
            }
            devs.push(d);
        }
    }
    for i in 0..2u32 {
        let mut d = vf(
            &mlx,
            i,
            &format!("0000:d8:00.{}", i + 2),
            "1018",
            "mlx5_core",
        );
        d.rdma = vec![format!("mlx5_{}", i + 2)];
        d.rdma_char_devices = ["issm", "umad", "uverbs"]
            .iter()
            .map(|p| format!("{p}{}", i + 2))
            .collect();
        devs.push(d);
    }
    devs.extend([pf0, pf1, mlx]);
    devs
}

fn config(value: serde_json::Value) -> Vec<ResourceConfig> {
    parse_config_json(value.to_string().as_bytes(), "test", "intel.com").unwrap()
}

fn pools(value: serde_json::Value, host: HostFacts) -> Pools {
    Pools::build(&config(value), &machine(), &host)
}

/// `resource: address@numa address@numa ...` per pool.
fn layout(pools: &Pools) -> Vec<String> {
    pools
        .pools
        .iter()
        .map(|p| {
            let devs: Vec<String> = p
                .devices
                .iter()
                .map(|d| match d.numa {
                    Some(n) => format!("{}@{n}", d.address),
                    None => format!("{}@-", d.address),
                })
                .collect();
            format!("{}: {}", p.resource(), devs.join(" "))
        })
        .collect()
}

#[test]
fn example_config_pools() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sriov/config.json");
    let resources = crate::config::read_config_file(&path, "intel.com").unwrap();
    let pools = Pools::build(
        &resources,
        &machine(),
        &HostFacts {
            vhost_net: true,
            rdma_cm: true,
        },
    );
    assert_eq!(
        layout(&pools),
        [
            "intel.com/intel_sriov_netdevice: 0000:18:01.0@0 0000:18:01.1@0 0000:86:01.0@1 0000:86:01.1@1",
            "intel.com/intel_sriov_dpdk: 0000:18:01.2@0 0000:18:01.3@0 0000:86:01.2@1 0000:86:01.3@1",
            "mellanox.com/mlnx_sriov_rdma: 0000:d8:00.2@1 0000:d8:00.3@1",
            "intel.com/intel_fpga: 0000:af:00.0@1",
        ]
    );
    assert!(pools.shadowed.is_empty());
    let dpdk = pools.get("intel.com/intel_sriov_dpdk").unwrap();
    assert_eq!(
        dpdk.env(&["0000:86:01.3", "0000:86:01.2"]).unwrap(),
        BTreeMap::from([
            (
                "PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK".to_owned(),
                "0000:86:01.3,0000:86:01.2".to_owned()
            ),
            (
                "PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK_INFO".to_owned(),
                concat!(
                    r#"{"0000:86:01.2":{"generic":{"deviceID":"0000:86:01.2"},"vfio":{"dev-mount":"/dev/vfio/21","mount":"/dev/vfio/vfio"}},"#,
                    r#""0000:86:01.3":{"generic":{"deviceID":"0000:86:01.3"},"vfio":{"dev-mount":"/dev/vfio/22","mount":"/dev/vfio/vfio"}}}"#
                )
                .to_owned()
            ),
        ])
    );
    let rdma = pools.get("mellanox.com/mlnx_sriov_rdma").unwrap();
    assert_eq!(
        rdma.env(&["0000:d8:00.2"]).unwrap()["PCIDEVICE_MELLANOX_COM_MLNX_SRIOV_RDMA_INFO"],
        concat!(
            r#"{"0000:d8:00.2":{"generic":{"deviceID":"0000:d8:00.2"},"rdma":{"issm":"/dev/infiniband/issm2","#,
            r#""rdma_cm":"/dev/infiniband/rdma_cm","rdma_dev":"mlx5_2","umad":"/dev/infiniband/umad2","#,
            r#""uverbs":"/dev/infiniband/uverbs2"}}}"#
        )
    );
    assert_eq!(
        dpdk.env(&["0000:18:01.0"]).unwrap_err().to_string(),
        "device 0000:18:01.0 is not in pool intel.com/intel_sriov_dpdk"
    );
    assert!(pools.get("intel.com/nothing").is_none());
}

#[test]
fn empty_selector_takes_every_candidate_but_pfs_with_vfs_and_the_default_route() {
    let pools = pools(
        json!({"resourceList": [
            {"resourceName": "all_net", "selectors": {}},
            {"resourceName": "all_accel", "deviceType": "accelerator", "selectors": {}}
        ]}),
        HostFacts::default(),
    );
    assert_eq!(
        layout(&pools),
        [
            "intel.com/all_net: 0000:01:00.1@0 0000:18:01.0@0 0000:18:01.1@0 0000:18:01.2@0 0000:18:01.3@0 \
             0000:86:01.0@1 0000:86:01.1@1 0000:86:01.2@1 0000:86:01.3@1 0000:d8:00.2@1 0000:d8:00.3@1",
            "intel.com/all_accel: 0000:af:00.0@1",
        ]
    );
}

#[test]
fn a_device_selected_by_two_resources_stays_with_the_first() {
    let pools = pools(
        json!({"resourceList": [
            {"resourceName": "node0_vfs", "selectors": [{"rootDevices": ["0000:18:00.0"]}]},
            {"resourceName": "vfio_vfs", "selectors": [{"drivers": ["vfio-pci"]}]},
            {"resourceName": "leftover", "selectors": [{"drivers": ["vfio-pci"], "pfNames": ["ens1f0"]}]}
        ]}),
        HostFacts::default(),
    );
    assert_eq!(
        layout(&pools),
        [
            "intel.com/node0_vfs: 0000:18:01.0@0 0000:18:01.1@0 0000:18:01.2@0 0000:18:01.3@0",
            "intel.com/vfio_vfs: 0000:86:01.2@1 0000:86:01.3@1",
            "intel.com/leftover: ",
        ]
    );
    let shadowed: Vec<(String, String, String)> = pools
        .shadowed
        .iter()
        .map(|s| (s.address.clone(), s.resource.clone(), s.taken_by.clone()))
        .collect();
    let s = |a: &str, r: &str, t: &str| (a.to_owned(), r.to_owned(), t.to_owned());
    assert_eq!(
        shadowed,
        [
            s("0000:18:01.2", "intel.com/vfio_vfs", "intel.com/node0_vfs"),
            s("0000:18:01.3", "intel.com/vfio_vfs", "intel.com/node0_vfs"),
            s("0000:18:01.2", "intel.com/leftover", "intel.com/node0_vfs"),
            s("0000:18:01.3", "intel.com/leftover", "intel.com/node0_vfs"),
        ]
    );
}

#[test]
fn selectors_of_a_resource_apply_in_order_and_the_first_decides_the_info() {
    // The plugin README's example: with the specific selector first, its
    // devices do not get needVhostNet; in the other order the general one
    // takes every device and the specific one is ineffective.
    let specific_first = pools(
        json!({"resourceList": [{"resourceName": "vfs", "selectors": [
            {"vendors": ["8086"], "devices": ["1889"], "pfNames": ["ens2f0"]},
            {"vendors": ["8086"], "needVhostNet": true, "drivers": ["iavf", "vfio-pci"]}
        ]}]}),
        HostFacts {
            vhost_net: true,
            rdma_cm: false,
        },
    );
    let vfs = &specific_first.pools[0];
    let with_vhost: Vec<(&str, usize, bool)> = vfs
        .devices
        .iter()
        .map(|d| (d.address.as_str(), d.selector, d.info.contains_key("vhost")))
        .collect();
    assert_eq!(
        with_vhost,
        [
            ("0000:86:01.0", 0, false),
            ("0000:86:01.1", 0, false),
            ("0000:86:01.2", 0, false),
            ("0000:86:01.3", 0, false),
            ("0000:18:01.0", 1, true),
            ("0000:18:01.1", 1, true),
            ("0000:18:01.2", 1, true),
            ("0000:18:01.3", 1, true),
        ]
    );
    assert!(
        specific_first.shadowed.is_empty(),
        "same resource: not shadowed"
    );
    let general_first = pools(
        json!({"resourceList": [{"resourceName": "vfs", "selectors": [
            {"vendors": ["8086"], "needVhostNet": true, "drivers": ["iavf", "vfio-pci"]},
            {"vendors": ["8086"], "devices": ["1889"], "pfNames": ["ens2f0"]}
        ]}]}),
        HostFacts {
            vhost_net: true,
            rdma_cm: false,
        },
    );
    assert!(general_first.pools[0]
        .devices
        .iter()
        .all(|d| d.selector == 0 && d.info.contains_key("vhost")));
    assert_eq!(general_first.pools[0].devices.len(), 8);
}

#[test]
fn exclude_topology_hides_the_numa_node() {
    let pools = pools(
        json!({"resourceList": [
            {"resourceName": "kernel", "excludeTopology": true, "selectors": [{"drivers": ["iavf"]}]},
            {"resourceName": "usb_is_no_netdevice", "selectors": [{"drivers": ["xhci_hcd"]}]},
            {"resourceName": "by_acpi", "selectors": [{"acpiIndexes": ["1", "2"]}]},
            {"resourceName": "ranges", "selectors": [{"rootDevices": ["0000:18:00.0#0,3", "0000:86:00.0#1-2"]}]},
            {"resourceName": "link", "selectors": [{"linkTypes": ["infiniband"]}]}
        ]}),
        HostFacts::default(),
    );
    assert_eq!(
        layout(&pools),
        [
            "intel.com/kernel: 0000:18:01.0@- 0000:18:01.1@- 0000:86:01.0@- 0000:86:01.1@-",
            "intel.com/usb_is_no_netdevice: ",
            "intel.com/by_acpi: 0000:01:00.1@0",
            "intel.com/ranges: 0000:18:01.3@0 0000:86:01.2@1",
            "intel.com/link: ",
        ]
    );
}

#[test]
fn devices_without_a_driver_join_no_pool() {
    let mut devs = machine();
    for d in &mut devs {
        if d.address == "0000:18:01.0" {
            d.driver = None;
        }
    }
    let pools = Pools::build(
        &config(
            json!({"resourceList": [{"resourceName": "all", "selectors": [{"pfNames": ["ens1f0"]}]}]}),
        ),
        &devs,
        &HostFacts::default(),
    );
    assert_eq!(
        layout(&pools),
        ["intel.com/all: 0000:18:01.1@0 0000:18:01.2@0 0000:18:01.3@0"]
    );
}

#[test]
fn additional_info_reaches_the_env() {
    let pools = pools(
        json!({"resourceList": [{"resourceName": "kernel", "selectors": [{"drivers": ["iavf"], "pfNames": ["ens1f0"]}],
            "additionalInfo": {"*": {"token": "t"}, "0000:18:01.1": {"token": "special"}}}]}),
        HostFacts::default(),
    );
    let env = pools.pools[0]
        .env(&["0000:18:01.0", "0000:18:01.1"])
        .unwrap();
    assert_eq!(
        env["PCIDEVICE_INTEL_COM_KERNEL"],
        "0000:18:01.0,0000:18:01.1"
    );
    assert_eq!(
        env["PCIDEVICE_INTEL_COM_KERNEL_INFO"],
        concat!(
            r#"{"0000:18:01.0":{"extra":{"token":"t"},"generic":{"deviceID":"0000:18:01.0"}},"#,
            r#""0000:18:01.1":{"extra":{"token":"special"},"generic":{"deviceID":"0000:18:01.1"}}}"#
        )
    );
}
