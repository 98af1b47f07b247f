//! The environment variables a container gets for the devices of one
//! resource, exactly as the device plugin's `Allocate` sets them
//! (`pkg/resources/pool_stub.go` `GetEnvs`, called from
//! `pkg/resources/server.go` with the resource's prefix):
//!
//! * `PCIDEVICE_<PREFIX>_<NAME>`: the devices' PCI addresses, comma-separated,
//!   in allocation order;
//! * `PCIDEVICE_<PREFIX>_<NAME>_INFO`: a JSON object, PCI address -> that
//!   device's [`DeviceInfo`], written as Go's
//!   `json.Marshal` writes it (keys sorted, no spaces).
//!
//! The names are `PCIDEVICE_` + prefix + `_` + resource name (+ `_INFO`) with
//! every `.` replaced by `_`, then upper-cased: `intel.com` /
//! `intel_sriov_dpdk` gives `PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK`. The `/`
//! of the full resource name never appears (prefix and name are joined with
//! `_`); a `-` in a resource name stays a `-`, as in the plugin.

use std::collections::BTreeMap;

use crate::go_json::encode::{write_map, write_string};
use crate::info::DeviceInfo;

/// The name of the address variable of resource `<prefix>/<name>`.
pub fn addresses_variable(prefix: &str, name: &str) -> String {
    variable(prefix, name, "")
}

/// The name of the info variable of resource `<prefix>/<name>`.
pub fn info_variable(prefix: &str, name: &str) -> String {
    variable(prefix, name, "_INFO")
}

fn variable(prefix: &str, name: &str, suffix: &str) -> String {
    format!("PCIDEVICE_{prefix}_{name}{suffix}")
        .replace('.', "_")
        .to_uppercase()
}

/// The two variables for devices `(address, info)` of resource
/// `<prefix>/<name>`, in allocation order.
pub fn variables(
    prefix: &str,
    name: &str,
    devices: &[(&str, &DeviceInfo)],
) -> BTreeMap<String, String> {
    let addresses: Vec<&str> = devices.iter().map(|(address, _)| *address).collect();
    let by_address: BTreeMap<String, &DeviceInfo> = devices
        .iter()
        .map(|(address, info)| ((*address).to_owned(), *info))
        .collect();
    let mut json = String::new();
    write_map(&mut json, &by_address, |out, info| {
        write_map(out, info, |out, pairs| {
            write_map(out, pairs, |out, value| write_string(out, value));
        });
    });
    BTreeMap::from([
        (addresses_variable(prefix, name), addresses.join(",")),
        (info_variable(prefix, name), json),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_names_follow_the_plugin() {
        let table = [
            ("intel.com", "sriov", "PCIDEVICE_INTEL_COM_SRIOV"),
            (
                "intel.com",
                "intel_sriov_dpdk",
                "PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK",
            ),
            ("intel.com", "dpdk_nic_1", "PCIDEVICE_INTEL_COM_DPDK_NIC_1"),
            (
                "mellanox.com",
                "mlnx_sriov_rdma",
                "PCIDEVICE_MELLANOX_COM_MLNX_SRIOV_RDMA",
            ),
            ("example.co.uk", "Net-A", "PCIDEVICE_EXAMPLE_CO_UK_NET-A"),
            ("fake.com", "fake", "PCIDEVICE_FAKE_COM_FAKE"),
        ];
        for (prefix, name, want) in table {
            assert_eq!(addresses_variable(prefix, name), want);
            assert_eq!(info_variable(prefix, name), format!("{want}_INFO"));
        }
    }

    fn info(pairs: &[(&str, &[(&str, &str)])]) -> DeviceInfo {
        pairs
            .iter()
            .map(|(p, kv)| {
                (
                    (*p).to_owned(),
                    kv.iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn values_are_addresses_in_order_and_go_json() {
        // The README's vfio example (with the key names the code writes).
        let a = info(&[
            ("generic", &[("deviceID", "0000:3b:02.6")]),
            (
                "vfio",
                &[("dev-mount", "/dev/vfio/169"), ("mount", "/dev/vfio/vfio")],
            ),
            (
                "vhost",
                &[
                    ("net-mount", "/dev/vhost-net"),
                    ("tun-mount", "/dev/net/tun"),
                ],
            ),
            (
                "extra",
                &[("token", "3e49019f-412f-4f02-824e-4cd195944205")],
            ),
        ]);
        let b = info(&[("generic", &[("deviceID", "0000:3b:02.1")])]);
        let vars = variables(
            "intel.com",
            "dpdk_nic_1",
            &[("0000:3b:02.6", &a), ("0000:3b:02.1", &b)],
        );
        assert_eq!(vars.len(), 2);
        assert_eq!(
            vars["PCIDEVICE_INTEL_COM_DPDK_NIC_1"],
            "0000:3b:02.6,0000:3b:02.1"
        );
        assert_eq!(
            vars["PCIDEVICE_INTEL_COM_DPDK_NIC_1_INFO"],
            concat!(
                r#"{"0000:3b:02.1":{"generic":{"deviceID":"0000:3b:02.1"}},"#,
                r#""0000:3b:02.6":{"extra":{"token":"3e49019f-412f-4f02-824e-4cd195944205"},"#,
                r#""generic":{"deviceID":"0000:3b:02.6"},"#,
                r#""vfio":{"dev-mount":"/dev/vfio/169","mount":"/dev/vfio/vfio"},"#,
                r#""vhost":{"net-mount":"/dev/vhost-net","tun-mount":"/dev/net/tun"}}}"#
            )
        );
        let parsed: serde_json::Value =
            serde_json::from_str(&vars["PCIDEVICE_INTEL_COM_DPDK_NIC_1_INFO"]).unwrap();
        assert_eq!(parsed["0000:3b:02.6"]["vfio"]["dev-mount"], "/dev/vfio/169");
    }

    #[test]
    fn extra_info_values_are_escaped_like_go() {
        let a = info(&[("extra", &[("html", "<a&b>")])]);
        let vars = variables("intel.com", "x", &[("0000:00:01.0", &a)]);
        assert_eq!(
            vars["PCIDEVICE_INTEL_COM_X_INFO"],
            r#"{"0000:00:01.0":{"extra":{"html":"\u003ca\u0026b\u003e"}}}"#
        );
    }

    #[test]
    fn no_devices_give_empty_values() {
        let vars = variables("intel.com", "x", &[]);
        assert_eq!(vars["PCIDEVICE_INTEL_COM_X"], "");
        assert_eq!(vars["PCIDEVICE_INTEL_COM_X_INFO"], "{}");
    }
}
