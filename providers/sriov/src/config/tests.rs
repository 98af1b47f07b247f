use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;
use crate::pf_selector::PfSelector;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/sriov")
        .join(name)
}

fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

fn load(text: &str) -> Result<Vec<ResourceConfig>, ConfigError> {
    parse_config_json(text.as_bytes(), "config.json", DEFAULT_RESOURCE_PREFIX)
}

fn err(text: &str) -> String {
    load(text).expect_err(text).to_string()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn names(resources: &[ResourceConfig]) -> Vec<String> {
    resources.iter().map(ResourceConfig::full_name).collect()
}

/// The README example without its trailing comma (the only syntax error).
fn readme_without_trailing_comma() -> String {
    let text = fixture_text("readme-config.json");
    let fixed = text.replacen(
        "\"drivers\": [\"bnxt_en\"]\n            }],\n        },",
        "\"drivers\": [\"bnxt_en\"]\n            }]\n        },",
        1,
    );
    assert_ne!(fixed, text, "the README example changed upstream");
    fixed
}

#[test]
fn readme_example_as_is_is_refused_like_the_plugin_refuses_it() {
    let path = fixture("readme-config.json");
    let e = read_config_file(&path, DEFAULT_RESOURCE_PREFIX).unwrap_err();
    let ConfigError::Syntax { line, column, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!((*line, *column), (87, 9));
    assert_eq!(
        e.to_string(),
        format!(
            "{}: not valid JSON at line 87, column 9: trailing comma",
            path.display()
        )
    );
}

#[test]
fn readme_example_names_each_unsupported_entry() {
    assert_eq!(
        err(&readme_without_trailing_comma()),
        "config.json: 2 problems:\n  \
         resourceList[4] (\"ct6dx_vdpa_vhost\"): selectors[0].vdpaType: selector vdpaType is not \
         supported by topomgr: it needs vDPA devices (/sys/bus/vdpa), which topomgr does not \
         discover; remove it\n  \
         resourceList[6] (\"bf2_sf\"): deviceType: \"auxNetDevice\" is not supported: auxiliary \
         network devices (subfunctions) are not PCI functions and topomgr does not discover them"
    );
}

#[test]
fn readme_example_loads_without_the_unsupported_entries() {
    let mut value: serde_json::Value =
        serde_json::from_str(&readme_without_trailing_comma()).unwrap();
    let list = value["resourceList"].as_array_mut().unwrap();
    list.retain(|e| {
        !matches!(
            e["resourceName"].as_str(),
            Some("ct6dx_vdpa_vhost" | "bf2_sf")
        )
    });
    let resources = load(&value.to_string()).unwrap();
    assert_eq!(
        names(&resources),
        [
            "intel.com/intel_sriov_netdevice",
            "intel.com/intel_sriov_dpdk",
            "mellanox.com/mlnx_sriov_rdma",
            "intel.com/infiniband_rdma_netdevs",
            "intel.com/intel_fpga",
            "intel.com/intel_sriov_netdevice_additional_env",
            "broadcom.com/brcm_sriov_bnxt",
            "intel.com/old_selectors_syntax_example",
        ]
    );
    let by_name = |n: &str| resources.iter().find(|r| r.name == n).unwrap();
    let kernel_vfs = Selector {
        vendors: strings(&["8086"]),
        devices: strings(&["154c", "10ed", "1889"]),
        drivers: strings(&["i40evf", "ixgbevf", "iavf"]),
        ..Selector::default()
    };
    assert_eq!(
        by_name("intel_sriov_netdevice").selectors,
        std::slice::from_ref(&kernel_vfs)
    );
    // The single-object form reads like a one-element list.
    assert_eq!(
        by_name("old_selectors_syntax_example").selectors,
        [kernel_vfs]
    );
    let dpdk = by_name("intel_sriov_dpdk");
    assert_eq!(dpdk.selectors.len(), 1);
    assert_eq!(dpdk.selectors[0].drivers, ["vfio-pci"]);
    assert_eq!(
        dpdk.selectors[0].pf_names,
        [
            PfSelector::parse("enp0s0f0").unwrap(),
            PfSelector::parse("enp2s2f1").unwrap()
        ]
    );
    assert!(dpdk.selectors[0].need_vhost_net);
    assert!(by_name("mlnx_sriov_rdma").selectors[0].is_rdma);
    let ib = &by_name("infiniband_rdma_netdevs").selectors[0];
    assert_eq!(
        (ib.link_types.clone(), ib.is_rdma),
        (strings(&["infiniband"]), true)
    );
    let fpga = by_name("intel_fpga");
    assert_eq!(fpga.device_type, DeviceType::Accelerator);
    assert_eq!(fpga.selectors[0].devices, ["0d90"]);
    let extra = by_name("intel_sriov_netdevice_additional_env");
    assert_eq!(
        extra.additional_info,
        Some(AdditionalInfo::from([(
            "*".to_owned(),
            [(
                "token".to_owned(),
                "3e49019f-412f-4f02-824e-4cd195944205".to_owned()
            )]
            .into()
        )]))
    );
    assert!(resources.iter().all(|r| !r.exclude_topology));
    assert!(resources
        .iter()
        .filter(|r| r.name != "intel_fpga")
        .all(|r| r.device_type == DeviceType::NetDevice));
}

#[test]
fn upstream_deployment_and_docs_configs_load_as_they_are() {
    let read = |name: &str| read_config_file(&fixture(name), DEFAULT_RESOURCE_PREFIX).unwrap();
    let deployed = read("deployments-configmap.json");
    assert_eq!(
        names(&deployed),
        [
            "intel.com/intel_sriov_netdevice",
            "intel.com/intel_sriov_dpdk",
            "intel.com/mlnx_sriov_rdma",
            "intel.com/brcm_sriov_bnxt",
        ]
    );
    assert_eq!(deployed[2].selectors[0].drivers, ["mlx5_ib"]);
    let dpdk = read("docs-dpdk-configmap.json");
    assert_eq!(names(&dpdk), ["intel.com/intel_x710vfio"]);
    let rdma = read("docs-rdma-configmap.json");
    assert_eq!(
        names(&rdma),
        ["mellanox.com/mlnx_rdma", "intel.com/intel_rdma"]
    );
    assert!(rdma.iter().all(|r| r.selectors[0].is_rdma));
}

#[test]
fn operator_written_config_loads_with_go_key_matching() {
    let path = fixture("docs-config-file-sriov-node-0.json");
    let resources = read_config_file(&path, DEFAULT_RESOURCE_PREFIX).unwrap();
    assert_eq!(names(&resources), ["intel.com/sriovnics"]);
    let sel = &resources[0].selectors[0];
    assert_eq!(
        sel.pf_names,
        [
            PfSelector::parse("ens785f0#0-4").unwrap(),
            PfSelector::parse("ens785f1#0-9").unwrap()
        ]
    );
    assert!(!sel.is_rdma && !sel.need_vhost_net);
    // Any capitalisation of a key reads as the plugin reads it.
    let resources = load(
        r#"{"ResourceList": [{"RESOURCENAME": "a", "DeviceType": "netDevice",
            "Selectors": [{"Vendors": ["8086"], "PFNAMES": ["p0#1"], "isrdma": true,
                           "NeedVhostNet": true, "PciAddresses": ["0000:01:00.0"]}]}]}"#,
    )
    .unwrap();
    let sel = &resources[0].selectors[0];
    assert_eq!(resources[0].name, "a");
    assert_eq!(sel.vendors, ["8086"]);
    assert_eq!(sel.pci_addresses, ["0000:01:00.0"]);
    assert_eq!(sel.pf_names, [PfSelector::parse("p0#1").unwrap()]);
    assert!(sel.is_rdma && sel.need_vhost_net);
}

#[test]
fn ddp_config_is_refused_naming_each_resource() {
    let path = fixture("docs-ddp-x700-configmap.json");
    let e = read_config_file(&path, DEFAULT_RESOURCE_PREFIX)
        .unwrap_err()
        .to_string();
    let why =
        "selector ddpProfiles is not supported by topomgr: it needs the device's DDP profile \
               from devlink or ddptool, which topomgr does not read; remove it";
    assert_eq!(
        e,
        format!(
            "{}: 2 problems:\n  resourceList[0] (\"x700_gtp\"): selectors[0].ddpProfiles: {why}\n  \
             resourceList[1] (\"x700_pppoe\"): selectors[0].ddpProfiles: {why}",
            path.display()
        )
    );
}

#[test]
fn bad_input_names_the_entry_and_the_key() {
    let table: &[(&str, &str)] = &[
        // JSON syntax, with line and column.
        ("{\"resourceList\": [\n  {\"resourceName\": \"a\",}\n]}", "config.json: not valid JSON at line 2, column 24: trailing comma"),
        ("{\"resourceList\": [", "config.json: not valid JSON at line 1, column 18: EOF while parsing a list"),
        ("junk", "config.json: not valid JSON at line 1, column 1: expected value"),
        ("\u{feff}{}", "config.json: not valid JSON at line 1, column 1: the file starts with a UTF-8 byte-order mark, which JSON (and the device plugin) does not allow; save it without one"),
        // Top level.
        ("[]", "config.json: the top level: expected an object {\"resourceList\": [...]}, found a list"),
        ("{}", "config.json: the top level: no \"resourceList\"; the device plugin's config is {\"resourceList\": [{\"resourceName\": ..., \"selectors\": [...]}]}"),
        ("{\"resourceList\": [], \"resources\": []}", "config.json: the top level: unknown key \"resources\"; the device plugin's config has only \"resourceList\""),
        ("{\"resourceList\": {}}", "config.json: resourceList: expected a list of resources, found an object"),
        // Entries.
        ("{\"resourceList\": [7]}", "config.json: resourceList[0]: expected a resource object, found a number"),
        (
            "{\"resourceList\": [{\"selectors\": [{}]}]}",
            "config.json: resourceList[0]: resourceName: missing; every resource needs a resourceName such as \"intel_sriov_netdevice\"",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": 5, \"selectors\": [{}]}]}",
            "config.json: resourceList[0]: resourceName: expected a string, found a number",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"invalid.name\", \"selectors\": [{}]}]}",
            "config.json: resourceList[0] (\"invalid.name\"): resourceName: \"invalid.name\" has characters the device plugin does not allow in a resource name; use letters, digits, '_' and '-'",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"_net\", \"selectors\": [{}]}]}",
            "config.json: resourceList[0] (\"_net\"): resourceName: \"_net\" is not a name the kubelet registers: it must have at most 63 characters and start and end with a letter or digit",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"resourcePrefix\": \"Intel_com\", \"selectors\": [{}]}]}",
            "config.json: resourceList[0] (\"a\"): resourcePrefix: \"Intel_com\" is not a DNS subdomain (like \"intel.com\"); the kubelet only registers resources whose prefix is one",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\"}]}",
            "config.json: resourceList[0] (\"a\"): selectors: missing; give a list of selector objects such as [{\"vendors\": [\"8086\"], \"drivers\": [\"vfio-pci\"]}] ({} selects every device of the type)",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": null}]}",
            "config.json: resourceList[0] (\"a\"): selectors: missing; give a list of selector objects such as [{\"vendors\": [\"8086\"], \"drivers\": [\"vfio-pci\"]}] ({} selects every device of the type)",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": []}]}",
            "config.json: resourceList[0] (\"a\"): selectors: empty; give at least one selector object",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": \"8086\"}]}",
            "config.json: resourceList[0] (\"a\"): selectors: expected a selector object or a list of them, found a string",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": [{}, null]}]}",
            "config.json: resourceList[0] (\"a\"): selectors[1]: expected a selector object, found null",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"deviceType\": \"gpu\", \"selectors\": [{}]}]}",
            "config.json: resourceList[0] (\"a\"): deviceType: unknown device type \"gpu\"; the device plugin's types are \"netDevice\" (the default), \"accelerator\" and \"auxNetDevice\"",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"excludeTopology\": \"yes\", \"selectors\": [{}]}]}",
            "config.json: resourceList[0] (\"a\"): excludeTopology: expected true or false, found a string",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"additionalInfo\": {\"*\": {\"token\": 1}}, \"selectors\": [{}]}]}",
            "config.json: resourceList[0] (\"a\"): additionalInfo.*.token: expected a string, found a number",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selector\": [{}]}]}",
            "config.json: 2 problems:\n  resourceList[0] (\"a\"): selector: unknown key; a resource has resourceName, resourcePrefix, deviceType, excludeTopology, selectors and additionalInfo (did you mean \"selectors\"?)\n  resourceList[0] (\"a\"): selectors: missing; give a list of selector objects such as [{\"vendors\": [\"8086\"], \"drivers\": [\"vfio-pci\"]}] ({} selects every device of the type)",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"SelectorObjs\": [{}], \"selectors\": [{}]}]}",
            "config.json: resourceList[0] (\"a\"): SelectorObjs: is an internal field of the device plugin (only null is accepted); put the selectors in \"selectors\"",
        ),
        // Selectors.
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": [{\"vendor\": [\"8086\"]}]}]}",
            "config.json: resourceList[0] (\"a\"): selectors[0].vendor: unknown selector key; netDevice selectors are vendors, devices, drivers, pciAddresses, acpiIndexes, pfNames, rootDevices, linkTypes, isRdma, needVhostNet (did you mean \"vendors\"?)",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": {\"vendors\": \"8086\"}}]}",
            "config.json: resourceList[0] (\"a\"): selectors.vendors: expected a list of strings, found a string",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": [{\"drivers\": [\"iavf\", 1]}]}]}",
            "config.json: resourceList[0] (\"a\"): selectors[0].drivers[1]: expected a string, found a number",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": [{\"isRdma\": \"true\"}]}]}",
            "config.json: resourceList[0] (\"a\"): selectors[0].isRdma: expected true or false, found a string",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": [{\"pfNames\": [\"ens1f0#0-3\", \"ens1f1#3-1\"]}]}]}",
            "config.json: resourceList[0] (\"a\"): selectors[0].pfNames[1]: \"ens1f1#3-1\" range \"3-1\" is empty: its first index is above its last",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": [{\"rootDevices\": [\"0000:86:00.0#x\"]}]}]}",
            "config.json: resourceList[0] (\"a\"): selectors[0].rootDevices[0]: \"0000:86:00.0#x\" \"x\" is not a VF index (a number from 0)",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": [{\"pfNames\": [\"p0#0-1\", \"P0#4\"]}]}]}",
            "config.json: resourceList[0] (\"a\"): selectors[0].pfNames[1]: \"P0#4\" names the same PF as pfNames[0] \"p0#0-1\"; the device plugin only uses the first item for a PF, so list all its VF indices there (e.g. \"p0#0-3,8\")",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": [{\"pKeys\": [\"0x1\"]}, {\"auxTypes\": [\"sf\"]}]}]}",
            "config.json: 2 problems:\n  resourceList[0] (\"a\"): selectors[0].pKeys: selector pKeys is not supported by topomgr: it needs InfiniBand partition keys, which topomgr does not read; remove it\n  resourceList[0] (\"a\"): selectors[1].auxTypes: auxTypes is a selector of deviceType \"auxNetDevice\", which topomgr does not support; remove it",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"deviceType\": \"accelerator\", \"selectors\": [{\"pfNames\": [\"p0\"]}]}]}",
            "config.json: resourceList[0] (\"a\"): selectors[0].pfNames: pfNames is not a selector of deviceType \"accelerator\"; its selectors are vendors, devices, drivers, pciAddresses",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"deviceType\": \"accelerator\", \"selectors\": [{\"acpiIndexes\": [\"101\"]}]}]}",
            "config.json: resourceList[0] (\"a\"): selectors[0].acpiIndexes: acpiIndexes has no effect on accelerator resources in the device plugin (its accelerator selectors lack the field although its README lists it); remove it, or select by pciAddresses",
        ),
        // Values that can never select anything.
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": [{\"pciAddresses\": [\"0000:3b:02.0\", \"0000:3B:02.1\", \"3b:02.2\"]}]}]}",
            "config.json: 2 problems:\n  resourceList[0] (\"a\"): selectors[0].pciAddresses[1]: \"0000:3B:02.1\" is not a PCI address as sysfs writes it, so it selects nothing; write it as sysfs does: \"0000:3b:02.1\"\n  resourceList[0] (\"a\"): selectors[0].pciAddresses[2]: \"3b:02.2\" is not a PCI address as sysfs writes it, so it selects nothing; give domain:bus:device.function, e.g. \"0000:3b:02.0\"",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"selectors\": [{\"linkTypes\": [\"ether\", \"Infiniband\", \"eth\"]}]}]}",
            "config.json: 2 problems:\n  resourceList[0] (\"a\"): selectors[0].linkTypes[1]: \"Infiniband\" is not a link type name, so it selects nothing; names are lower case: \"infiniband\"\n  resourceList[0] (\"a\"): selectors[0].linkTypes[2]: \"eth\" is not a link type name, so it selects nothing; use netlink's names, such as \"ether\" or \"infiniband\"",
        ),
        (
            "{\"resourceList\": [{\"resourceName\": \"a\", \"deviceType\": \"accelerator\", \"selectors\": [{\"pciAddresses\": [\"0000:3b:02.8\"]}]}]}",
            "config.json: resourceList[0] (\"a\"): selectors[0].pciAddresses[0]: \"0000:3b:02.8\" is not a PCI address as sysfs writes it, so it selects nothing; give domain:bus:device.function, e.g. \"0000:3b:02.0\"",
        ),
        // Duplicates.
        (
            "{\"resourceList\": [{\"resourceName\": \"dup\", \"selectors\": [{}]}, {\"resourceName\": \"ok\", \"selectors\": [{}]}, {\"resourceName\": \"dup\", \"resourcePrefix\": \"intel.com\", \"selectors\": [{\"drivers\": [\"vfio-pci\"]}]}]}",
            "config.json: resourceList[2] (\"dup\"): resource intel.com/dup is also defined by resourceList[0] (\"dup\"); resource names must be unique per prefix",
        ),
    ];
    for (text, want) in table {
        assert_eq!(err(text), *want, "{text}");
    }
}

#[test]
fn zero_values_and_empty_unsupported_keys_are_accepted() {
    let resources = load(
        r#"{"resourceList": [
            {"resourceName": "a", "resourcePrefix": "", "deviceType": "",
             "excludeTopology": null, "additionalInfo": null, "SelectorObj": null,
             "selectors": {"vendors": null, "isRdma": null, "ddpProfiles": [], "vdpaType": "",
                           "pKeys": null, "auxTypes": []}},
            {"resourceName": "b", "deviceType": "accelerator", "excludeTopology": true,
             "selectors": [{"vendors": ["8086"], "pfNames": [], "isRdma": false, "acpiIndexes": null}]}
        ]}"#,
    )
    .unwrap();
    assert_eq!(names(&resources), ["intel.com/a", "intel.com/b"]);
    assert_eq!(resources[0].selectors, [Selector::default()]);
    assert_eq!(resources[0].device_type, DeviceType::NetDevice);
    assert_eq!(resources[0].additional_info, None);
    assert!(resources[1].exclude_topology);
    assert_eq!(resources[1].device_type, DeviceType::Accelerator);
}

#[test]
fn same_name_under_different_prefixes_is_fine() {
    // The plugin's README: "example.com/10G", "acme.com/10G" and
    // "acme.com/40G" are valid together.
    let resources = load(
        r#"{"resourceList": [
            {"resourceName": "10G", "resourcePrefix": "example.com", "selectors": [{}]},
            {"resourceName": "10G", "resourcePrefix": "acme.com", "selectors": [{}]},
            {"resourceName": "40G", "resourcePrefix": "acme.com", "selectors": [{}]},
            {"resourceName": "10G", "selectors": [{}]}
        ]}"#,
    )
    .unwrap();
    assert_eq!(
        names(&resources),
        [
            "example.com/10G",
            "acme.com/10G",
            "acme.com/40G",
            "intel.com/10G"
        ]
    );
}

fn toml_table(text: &str) -> serde_json::Value {
    toml::from_str(text).unwrap()
}

#[test]
fn provider_table_with_a_config_file() {
    let path = fixture("deployments-configmap.json");
    let table = json!({"config_file": path, "resource_prefix": "example.com"});
    let config = SriovConfig::from_table(&table, None).unwrap();
    assert_eq!(config.source, ConfigSource::File(path.clone()));
    assert_eq!(config.resource_prefix, "example.com");
    assert_eq!(
        config.resources[0].full_name(),
        "example.com/intel_sriov_netdevice"
    );

    // A relative path is relative to topomgr's config directory.
    let dir = fixture("");
    let relative = json!({"config_file": "deployments-configmap.json"});
    let config = SriovConfig::from_table(&relative, Some(&dir)).unwrap();
    assert_eq!(
        config.source,
        ConfigSource::File(dir.join("deployments-configmap.json"))
    );
    assert_eq!(
        SriovConfig::from_table(&relative, Some(Path::new("/etc/topomgr")))
            .unwrap_err()
            .to_string(),
        "cannot read the SR-IOV device plugin config /etc/topomgr/deployments-configmap.json: \
         No such file or directory (os error 2)"
    );
    let absolute = json!({"config_file": path});
    assert_eq!(
        SriovConfig::from_table(&absolute, Some(Path::new("/etc/topomgr")))
            .unwrap()
            .source,
        ConfigSource::File(path)
    );

    let missing = json!({"config_file": "/nonexistent/pcidp/config.json"});
    assert_eq!(
        SriovConfig::from_table(&missing, None)
            .unwrap_err()
            .to_string(),
        "cannot read the SR-IOV device plugin config /nonexistent/pcidp/config.json: No such file \
         or directory (os error 2)"
    );
}

#[test]
fn provider_table_with_inline_toml_entries() {
    let table = toml_table(
        r#"
        resource_prefix = "example.com"

        [[resource_list]]
        resourceName = "dpdk"
        excludeTopology = true
        selectors = [{ vendors = ["8086"], drivers = ["vfio-pci"], pfNames = ["ens1f0#0-1"] }]

        [[resource_list]]
        resourceName = "kernel"
        resourcePrefix = "intel.com"
        [[resource_list.selectors]]
        drivers = ["iavf"]
        [[resource_list.selectors]]
        drivers = ["mlx5_core"]
        isRdma = true
        [resource_list.additionalInfo."*"]
        token = "abc"
        "#,
    );
    let config = SriovConfig::from_table(&table, None).unwrap();
    assert_eq!(config.source, ConfigSource::Inline);
    assert_eq!(
        names(&config.resources),
        ["example.com/dpdk", "intel.com/kernel"]
    );
    assert!(config.resources[0].exclude_topology);
    assert_eq!(
        config.resources[0].selectors[0].pf_names,
        [PfSelector::parse("ens1f0#0-1").unwrap()]
    );
    assert_eq!(config.resources[1].selectors.len(), 2);
    assert!(config.resources[1].selectors[1].is_rdma);
    assert_eq!(
        config.resources[1].additional_info.as_ref().unwrap()["*"]["token"],
        "abc"
    );

    let bad = toml_table(
        r#"
        [[resource_list]]
        resourceName = "x"
        selectors = [{ vdpaType = "vhost" }]
        "#,
    );
    assert_eq!(
        SriovConfig::from_table(&bad, None).unwrap_err().to_string(),
        "[providers.sriov.config]: resource_list[0] (\"x\"): selectors[0].vdpaType: selector \
         vdpaType is not supported by topomgr: it needs vDPA devices (/sys/bus/vdpa), which \
         topomgr does not discover; remove it"
    );
}

#[test]
fn provider_table_errors() {
    let table: &[(serde_json::Value, &str)] = &[
        (
            serde_json::Value::Null,
            "[providers.sriov.config]: no resources: set config_file = \"/etc/pcidp/config.json\" (the SR-IOV network device plugin's config) or give [[providers.sriov.config.resource_list]] entries",
        ),
        (
            json!({"config_file": "a.json", "resource_list": []}),
            "[providers.sriov.config]: give either config_file or resource_list, not both",
        ),
        (
            json!({"config": "a.json"}),
            "[providers.sriov.config]: unknown field `config`, expected one of `config_file`, `resource_prefix`, `resource_list`",
        ),
        (
            json!({"resource_prefix": "Intel.com", "resource_list": []}),
            "[providers.sriov.config]: resource_prefix \"Intel.com\" is not a DNS subdomain (like \"intel.com\"); the kubelet only registers resources whose prefix is one",
        ),
        (
            json!({"resource_list": {"resourceName": "a"}}),
            "[providers.sriov.config]: resource_list: expected a list of resources, found an object",
        ),
    ];
    for (value, want) in table {
        assert_eq!(
            SriovConfig::from_table(value, None)
                .unwrap_err()
                .to_string(),
            *want,
            "{value}"
        );
    }
    let config = SriovConfig::from_table(&json!({"resource_list": []}), None).unwrap();
    assert_eq!(
        (config.resource_prefix.as_str(), config.resources.len()),
        ("intel.com", 0)
    );
}
