//! The SR-IOV provider end to end: the real `libtopomgr_provider_sriov.so`
//! loaded by `topomgr` on the example machine `examples/machines/2s2n-sriov`
//! (docs/providers.md's SR-IOV demo with the repository's own config, the provider
//! CLI, inline TOML entries, the upstream README's config), and what
//! `topomgr topology` shows of the VFs.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use topomgr_node::api::{Admissions, ProviderAllocation};

const DPDK: &str = "intel.com/intel_sriov_dpdk";

fn sriov_sys() -> String {
    common::workspace_root()
        .join("examples/machines/2s2n-sriov/sys")
        .to_string_lossy()
        .into_owned()
}

/// Runs `topomgr ARGS` in the repository root (its `topomgr.toml` and
/// `plugins.d/`, the plugins beside the binary); (status, stdout, stderr).
fn in_repo(args: &[&str]) -> (i32, String, String) {
    let _ = common::plugins();
    let _ = common::cpu_plugin();
    let _ = common::memory_plugin();
    let _ = common::sriov_plugin();
    let out = Command::new(common::topomgr_bin())
        .current_dir(common::workspace_root())
        .args(args)
        .output()
        .expect("run topomgr");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The info the plugin gives a `vfio-pci` VF in IOMMU group `group`.
fn vfio_info(address: &str, group: u32) -> Value {
    json!({"generic": {"deviceID": address},
           "vfio": {"dev-mount": format!("/dev/vfio/{group}"), "mount": "/dev/vfio/vfio"}})
}

/// docs/providers.md's SR-IOV command, word for word (the test checks the page has it):
/// the repository's config on the SR-IOV machine.
const README_COMMAND: &str = "target/debug/topomgr --config topomgr.toml admit --sysfs-root \
    examples/machines/2s2n-sriov/sys --output table examples/sriov/too-many-vfs.yaml \
    examples/sriov/dpdk-pod.yaml";

#[test]
fn readme_dpdk_pod_lands_on_one_node_and_too_many_vfs_is_rejected() {
    let readme = fs::read_to_string(common::workspace_root().join("docs/providers.md")).unwrap();
    assert!(
        readme.lines().any(|l| l == README_COMMAND),
        "docs/providers.md lacks the SR-IOV command {README_COMMAND:?}"
    );
    let (code, out, err) = in_repo(&[
        "--config",
        "topomgr.toml",
        "admit",
        "--sysfs-root",
        "examples/machines/2s2n-sriov/sys",
        "examples/sriov/too-many-vfs.yaml",
        "examples/sriov/dpdk-pod.yaml",
    ]);
    assert_eq!(code, 0, "{err}");
    // Every resource of examples/sriov/config.json has devices here.
    assert!(!err.contains("WARN"), "{err}");
    let v: Admissions = serde_json::from_str(&out).unwrap();
    let pods = &v.pods;
    assert_eq!(pods.len(), 2);
    let rejected = &pods[0];
    assert_eq!(
        (
            rejected.name.as_str(),
            rejected.admitted,
            rejected.reason.as_deref()
        ),
        ("too-many-vfs", false, Some("TopologyAffinityError"))
    );
    let message = rejected.message.as_deref().expect("message");
    assert!(
        message.ends_with("intel.com/intel_sriov_dpdk (sriov): preferred on {0-1} (requested 3; the largest NUMA node has 2 allocatable)"),
        "{message}"
    );
    let dpdk = &pods[1];
    assert!(dpdk.admitted, "{dpdk:?}");
    let c = &dpdk.containers[0];
    assert_eq!(
        (
            c.affinity.map(|m| m.to_string()),
            c.preferred,
            c.cpus.to_string(),
            c.exclusive,
            c.mems.to_string()
        ),
        (
            Some("0".to_owned()),
            true,
            "1-2,9-10".to_owned(),
            true,
            "0".to_owned()
        )
    );
    assert_eq!(c.devices.len(), 1);
    assert_eq!(c.devices[DPDK], ["0000:18:01.2", "0000:18:01.3"]);
    let env = &c.env;
    assert_eq!(env.len(), 2, "{env:?}");
    assert_eq!(
        env["PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK"],
        "0000:18:01.2,0000:18:01.3"
    );
    // Exactly the plugin's text (Go's json.Marshal: sorted keys, no spaces).
    assert_eq!(
        env["PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK_INFO"],
        "{\"0000:18:01.2\":{\"generic\":{\"deviceID\":\"0000:18:01.2\"},\"vfio\":{\"dev-mount\":\"/dev/vfio/16\",\"mount\":\"/dev/vfio/vfio\"}},\
         \"0000:18:01.3\":{\"generic\":{\"deviceID\":\"0000:18:01.3\"},\"vfio\":{\"dev-mount\":\"/dev/vfio/17\",\"mount\":\"/dev/vfio/vfio\"}}}"
    );
    let info = parse(&env["PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK_INFO"]);
    assert_eq!(
        info,
        json!({"0000:18:01.2": vfio_info("0000:18:01.2", 16), "0000:18:01.3": vfio_info("0000:18:01.3", 17)})
    );

    // The table README shows.
    let (code, table, err) = in_repo(&[
        "--config",
        "topomgr.toml",
        "admit",
        "--sysfs-root",
        "examples/machines/2s2n-sriov/sys",
        "--output",
        "table",
        "examples/sriov/too-many-vfs.yaml",
        "examples/sriov/dpdk-pod.yaml",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[1].starts_with("telco/too-many-vfs Guaranteed no       TopologyAffinityError: "),
        "{table}"
    );
    assert!(
        lines[1].ends_with("intel.com/intel_sriov_dpdk (sriov): preferred on {0-1} (requested 3; the largest NUMA node has 2 allocatable)"),
        "{table}"
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        [
            "telco/dpdk-l3fwd",
            "Guaranteed",
            "yes",
            "l3fwd",
            "0",
            "true",
            "1-2,9-10*",
            "0",
            "intel.com/intel_sriov_dpdk=0000:18:01.2,0000:18:01.3"
        ]
    );
}

/// The repository's config on a machine without those devices (README's
/// first command; `topomgr run` on an ordinary host): nothing registered,
/// one warning naming every resource, the pods decided as before (the
/// decisions themselves are the demo test's).
#[test]
fn repository_config_on_a_machine_without_the_devices() {
    let (code, out, err) = in_repo(&[
        "--config",
        "topomgr.toml",
        "admit",
        "--sysfs-root",
        "examples/machines/2s4n/sys",
        "examples/pods/guaranteed-2cpu.yaml",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Admissions = serde_json::from_str(&out).unwrap();
    assert!(v.pods[0].admitted);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains(
            "SR-IOV resources without a matching device on this machine are not registered \
             resources=intel.com/intel_sriov_netdevice, intel.com/intel_sriov_dpdk, \
             mellanox.com/mlnx_sriov_rdma, intel.com/intel_fpga"
        ),
        "{err}"
    );
    // A pod asking for one gets no hint from the provider.
    let (code, out, err) = in_repo(&[
        "--config",
        "topomgr.toml",
        "provider",
        "sriov",
        "hints",
        "--sysfs-root",
        "examples/machines/2s4n/sys",
        "--pod",
        "examples/sriov/dpdk-pod.yaml",
    ]);
    assert_eq!((code, out.trim()), (0, "{}"), "{err}");
}

/// `topomgr provider sriov hints|allocate|preferred` on the example
/// machine, chained through a state directory.
#[test]
fn provider_cli_on_the_example_machine() {
    let state = common::scratch_dir("sriov-cli-state");
    let state_arg = state.to_string_lossy().into_owned();
    let sys = sriov_sys();
    let base = ["--config", "topomgr.toml", "provider", "sriov"];
    let run = |args: &[&str]| {
        let mut all: Vec<&str> = base.to_vec();
        all.extend_from_slice(args);
        all.extend_from_slice(&["--sysfs-root", &sys, "--state-dir", &state_arg]);
        in_repo(&all)
    };
    let hints = |pod: &str| {
        let (code, out, err) = run(&["hints", "--pod", pod]);
        assert_eq!(code, 0, "{err}");
        common::hint_list(&out, DPDK)
    };
    assert_eq!(
        hints("examples/sriov/dpdk-pod.yaml"),
        ["0:true", "1:true", "0,1:false"]
    );
    assert_eq!(hints("examples/sriov/too-many-vfs.yaml"), ["0,1:true"]);

    let (code, out, err) = run(&[
        "allocate",
        "--pod",
        "examples/sriov/dpdk-pod.yaml",
        "--container",
        "l3fwd",
        "--hint",
        r#"{"affinity": [1], "preferred": true}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let a: ProviderAllocation = serde_json::from_str(&out).unwrap();
    assert_eq!(a.devices.len(), 1);
    assert_eq!(a.devices[DPDK], ["0000:86:01.2", "0000:86:01.3"]);
    assert!(a.cpus.is_empty() && a.mems.is_empty());
    assert_eq!(
        a.env["PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK"],
        "0000:86:01.2,0000:86:01.3"
    );
    assert_eq!(
        parse(&a.env["PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK_INFO"]),
        json!({"0000:86:01.2": vfio_info("0000:86:01.2", 21), "0000:86:01.3": vfio_info("0000:86:01.3", 22)})
    );
    // Node 1's vfio-pci VFs are held now (state saved and restored): the
    // too-many pod cannot get 3, another DPDK pod only node 0.
    assert_eq!(
        hints("examples/sriov/too-many-vfs.yaml"),
        Vec::<String>::new()
    );
    let pod = common::scratch_dir("sriov-cli-pod").join("other.yaml");
    fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: other, uid: other-uid}\nspec:\n  containers:\n  - name: c\n    image: x\n    resources:\n      limits: {intel.com/intel_sriov_dpdk: \"2\"}\n",
    )
    .unwrap();
    assert_eq!(hints(pod.to_str().unwrap()), ["0:true", "0,1:false"]);
    // GetPreferredAllocation: the plugin has no preference.
    let (code, out, err) = run(&[
        "preferred",
        "--resource",
        DPDK,
        "--available",
        "0000:18:01.2,0000:18:01.3",
        "--size",
        "1",
    ]);
    assert_eq!((code, out.trim()), (0, r#"{"devices":[]}"#), "{err}");
}

/// A config directory of its own with the plugin's path and `extra` as the
/// provider's config table.
fn config_dir(tag: &str, config: &str) -> PathBuf {
    let main = format!(
        "policy = \"single-numa-node\"\nplugin_dirs = []\nsysfs_root = {:?}\nstate_dir = \"state\"\nplugins_d = \"plugins.d\"\n",
        sriov_sys()
    );
    let sriov = format!(
        "[providers.sriov]\nlibrary = {:?}\n[providers.sriov.config]\n{config}\n",
        common::sriov_plugin()
    );
    common::config_dir(tag, &main, &[("50-sriov.toml", &sriov)])
}

fn hints_in(dir: &Path, limits: &str) -> (i32, String, String) {
    let pod = dir.join("pod.yaml");
    fs::write(
        &pod,
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, uid: p-uid}}\nspec:\n  containers:\n  - name: c\n    image: x\n    resources:\n      limits: {{{limits}}}\n"),
    )
    .unwrap();
    common::topomgr(
        dir,
        &["provider", "sriov", "hints", "--pod", pod.to_str().unwrap()],
    )
}

/// Entries inline in the drop-in, with the plugin's own key names
/// (`resourceName`, `pfNames` with VF ranges, `excludeTopology`), pass
/// through topomgr's config loader intact; a relative `config_file` is
/// relative to the main config file.
#[test]
fn inline_entries_and_relative_config_file() {
    let dir = config_dir(
        "sriov-inline",
        r#"resource_prefix = "example.com"
[[providers.sriov.config.resource_list]]
resourceName = "dpdk"
selectors = [{ vendors = ["8086"], drivers = ["vfio-pci"], pfNames = ["ens1f0#3", "ens2f0#2-3"] }]
[[providers.sriov.config.resource_list]]
resourceName = "fpga"
deviceType = "accelerator"
excludeTopology = true
[[providers.sriov.config.resource_list.selectors]]
devices = ["0d90"]"#,
    );
    let (code, out, err) = hints_in(&dir, "example.com/dpdk: \"2\", example.com/fpga: \"1\"");
    assert_eq!(code, 0, "{err}");
    // ens1f0#3 selects one VF of node 0, ens2f0#2-3 two of node 1.
    assert_eq!(
        parse(&out),
        json!({"example.com/dpdk": [{"affinity": [1], "preferred": true}, {"affinity": [0, 1], "preferred": false}],
               "example.com/fpga": null})
    );

    let dir = config_dir("sriov-relative", r#"config_file = "config.json""#);
    fs::copy(
        common::workspace_root().join("examples/sriov/config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    let (code, out, err) = hints_in(&dir, "mellanox.com/mlnx_sriov_rdma: \"2\"");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        common::hint_list(&out, "mellanox.com/mlnx_sriov_rdma"),
        ["1:true", "0,1:false"]
    );
}

/// The upstream README's example config: as published it is not JSON (a
/// trailing comma); the error names the file, line and column.
#[test]
fn upstream_readme_config_is_refused_naming_file_line_and_column() {
    let readme = common::workspace_root().join("tests/fixtures/sriov/readme-config.json");
    let dir = config_dir(
        "sriov-readme",
        &format!("config_file = {:?}", readme.to_string_lossy()),
    );
    let (code, out, err) = hints_in(&dir, "cpu: \"1\"");
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains(&format!(
            "failed to start: InvalidConfig in [providers.sriov.config] (configured in {}): {}: not valid JSON at line 87, column 9: trailing comma",
            dir.join("plugins.d/50-sriov.toml").display(),
            readme.display()
        )),
        "{err}"
    );
}

/// `topomgr topology` shows every VF under its NUMA node with its index,
/// its PF, its driver; the JSON has the SR-IOV fields.
#[test]
fn topology_shows_vfs_with_their_pf_driver_and_node() {
    let (code, table, err) = in_repo(&[
        "topology",
        "--sysfs-root",
        &sriov_sys(),
        "--output",
        "table",
    ]);
    assert_eq!(code, 0, "{err}");
    let section = |title: &str| -> Vec<String> {
        table
            .split("\n\n")
            .find(|s| s.starts_with(title))
            .unwrap_or_else(|| panic!("no {title} in {table}"))
            .lines()
            .filter(|l| l.contains(" VF "))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        section("NUMA node 0:"),
        [
            "  PCI 0000:18:01.0 8086:1889 class 0x020000 driver iavf net ens1f0v0 VF 0 of 0000:18:00.0 (ens1f0)",
            "  PCI 0000:18:01.1 8086:1889 class 0x020000 driver iavf net ens1f0v1 VF 1 of 0000:18:00.0 (ens1f0)",
            "  PCI 0000:18:01.2 8086:1889 class 0x020000 driver vfio-pci VF 2 of 0000:18:00.0 (ens1f0)",
            "  PCI 0000:18:01.3 8086:1889 class 0x020000 driver vfio-pci VF 3 of 0000:18:00.0 (ens1f0)",
        ]
    );
    assert_eq!(section("NUMA node 1:").len(), 6);

    let (code, out, err) = in_repo(&["topology", "--sysfs-root", &sriov_sys()]);
    assert_eq!(code, 0, "{err}");
    let machine: topomgr_node::api::Machine = serde_json::from_str(&out).unwrap();
    let dev = |a: &str| {
        let d = machine.pci_devices.iter().find(|d| d.address == a);
        serde_json::to_value(d.unwrap_or_else(|| panic!("no {a}"))).unwrap()
    };
    assert_eq!(
        dev("0000:d8:00.3"),
        json!({"address": "0000:d8:00.3", "vendor": "0x15b3", "device": "0x1018", "class": "0x020000",
               "numa": 1, "driver": "mlx5_core", "net": ["ens3f0v1"], "sriov": null,
               "physfn": "0000:d8:00.0", "vf_index": 1, "link_type": 1, "rdma": ["mlx5_3"],
               "rdma_char_devices": ["issm3", "umad3", "uverbs3"], "iommu_group": 25})
    );
    assert_eq!(
        dev("0000:01:00.0"),
        json!({"address": "0000:01:00.0", "vendor": "0x8086", "device": "0x1521", "class": "0x020000",
               "numa": 0, "driver": "igb", "net": ["eno1"], "sriov": null, "physfn": null,
               "link_type": 1, "acpi_index": 1, "iommu_group": 11, "default_route": true})
    );
}
