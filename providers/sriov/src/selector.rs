//! One selector object of a resource: the conditions a device must meet to
//! join the resource's pool, with the device plugin's semantics
//! (`pkg/netdevice/netDeviceProvider.go` `GetFilteredDevices`,
//! `pkg/accelerator/accelDeviceProvider.go`, `pkg/resources/deviceSelectors.go`).
//!
//! * Every non-empty list is a filter; a device must pass all of them. An
//!   empty (or absent) list does not filter.
//! * `vendors`, `devices`, `drivers`, `pciAddresses`, `acpiIndexes`,
//!   `linkTypes`: exact, case-sensitive string equality with one of the
//!   values (ids are lower-case hex without `0x`, addresses in the full
//!   `0000:3b:02.0` form). A device without an ACPI index or link type has
//!   the empty string there. Unlike the plugin, which accepts them and
//!   selects nothing, the config loader refuses `pciAddresses` not in the
//!   form sysfs writes and `linkTypes` that are not netlink's names.
//! * `pfNames` / `rootDevices`: see [`crate::pf_selector`]; a device that has
//!   no PF name / PF address never passes.
//! * `isRdma: true`: only devices with RDMA resources pass (and they get RDMA
//!   info). `needVhostNet` does not filter; it adds vhost info.
//!
//! `accelerator` resources only take `vendors`, `devices`, `drivers` and
//! `pciAddresses`; the config loader refuses the other keys for them.

use crate::device::DeviceView;
use crate::pf_selector::{item_for, PfSelector};

/// A validated selector object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    /// `vendors`.
    pub vendors: Vec<String>,
    /// `devices`.
    pub devices: Vec<String>,
    /// `drivers`.
    pub drivers: Vec<String>,
    /// `pciAddresses`.
    pub pci_addresses: Vec<String>,
    /// `acpiIndexes` (`netDevice` only).
    pub acpi_indexes: Vec<String>,
    /// `pfNames` (`netDevice` only).
    pub pf_names: Vec<PfSelector>,
    /// `rootDevices` (`netDevice` only).
    pub root_devices: Vec<PfSelector>,
    /// `linkTypes` (`netDevice` only).
    pub link_types: Vec<String>,
    /// `isRdma` (`netDevice` only).
    pub is_rdma: bool,
    /// `needVhostNet` (`netDevice` only).
    pub need_vhost_net: bool,
}

fn listed(values: &[String], value: &str) -> bool {
    values.is_empty() || values.iter().any(|v| v == value)
}

fn listed_pf(items: &[PfSelector], pf: Option<&str>, vf_index: Option<u32>) -> bool {
    if items.is_empty() {
        return true;
    }
    let Some(pf) = pf.filter(|pf| !pf.is_empty()) else {
        return false;
    };
    item_for(items, pf).is_some_and(|item| item.selects(vf_index))
}

impl Selector {
    /// Whether `dev` passes every filter of this selector. (Whether the
    /// resource's device type considers `dev` at all is
    /// [`crate::device::DeviceType::considers`].)
    pub fn matches(&self, dev: &DeviceView) -> bool {
        let pf = dev.pf.as_ref();
        let vf_index = pf.and_then(|p| p.vf_index);
        listed(&self.vendors, &dev.vendor)
            && listed(&self.devices, &dev.device)
            && listed(&self.drivers, dev.driver.as_deref().unwrap_or(""))
            && listed(&self.pci_addresses, &dev.address)
            && listed(&self.acpi_indexes, dev.acpi_index.as_deref().unwrap_or(""))
            && listed_pf(&self.pf_names, pf.and_then(|p| p.name.as_deref()), vf_index)
            && listed_pf(&self.root_devices, pf.map(|p| p.address.as_str()), vf_index)
            && listed(&self.link_types, dev.link_type.as_deref().unwrap_or(""))
            && (!self.is_rdma || !dev.rdma.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::PfLink;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn pf_items(v: &[&str]) -> Vec<PfSelector> {
        v.iter().map(|s| PfSelector::parse(s).unwrap()).collect()
    }

    /// The five mocked devices of the device plugin's "should correctly
    /// filter devices" table (`pkg/netdevice/netDeviceProvider_test.go`):
    /// vendor, device, driver, address, PF name, PF address, link type, RDMA.
    fn upstream_devices() -> Vec<DeviceView> {
        let ve = ["8086", "8086", "1111", "2222", "3333"];
        let de = ["abcd", "123a", "abcd", "2222", "1024"];
        let md = ["igb_uio", "igb_uio", "igb_uio", "iavf", "vfio-pci"];
        let pa = [
            "0000:03:02.0",
            "0000:03:02.1",
            "0000:03:02.2",
            "0000:03:02.3",
            "0000:03:02.4",
        ];
        let pf = ["eth0", "eth0", "eth1", "net0", "net0"];
        let ro = [
            "0000:86:00.0",
            "0000:86:00.1",
            "0000:86:00.2",
            "0000:86:00.3",
            "0000:86:00.4",
        ];
        let lt = ["ether", "infiniband", "ether", "ether", "fake"];
        let rd = [false, true, false, false, true];
        (0..5)
            .map(|i| DeviceView {
                address: pa[i].into(),
                vendor: ve[i].into(),
                device: de[i].into(),
                class: 0x020000,
                driver: Some(md[i].into()),
                pf: Some(PfLink {
                    address: ro[i].into(),
                    name: Some(pf[i].into()),
                    vf_index: None,
                }),
                link_type: Some(lt[i].into()),
                rdma: if rd[i] { vec!["mlx5_0".into()] } else { vec![] },
                ..DeviceView::default()
            })
            .collect()
    }

    fn selected(sel: &Selector, devs: &[DeviceView]) -> Vec<usize> {
        devs.iter()
            .enumerate()
            .filter(|(_, d)| sel.matches(d))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn upstream_filter_table() {
        let devs = upstream_devices();
        let table: Vec<(&str, Selector, Vec<usize>)> = vec![
            (
                "vendors",
                Selector {
                    vendors: strings(&["8086"]),
                    ..Default::default()
                },
                vec![0, 1],
            ),
            (
                "devices",
                Selector {
                    devices: strings(&["abcd"]),
                    ..Default::default()
                },
                vec![0, 2],
            ),
            (
                "drivers",
                Selector {
                    drivers: strings(&["igb_uio"]),
                    ..Default::default()
                },
                vec![0, 1, 2],
            ),
            (
                "pciAddresses",
                Selector {
                    pci_addresses: strings(&["0000:03:02.0", "0000:03:02.3"]),
                    ..Default::default()
                },
                vec![0, 3],
            ),
            (
                "pfNames",
                Selector {
                    pf_names: pf_items(&["net0", "eth1"]),
                    ..Default::default()
                },
                vec![2, 3, 4],
            ),
            (
                "rootDevices",
                Selector {
                    root_devices: pf_items(&["0000:86:00.0", "0000:86:00.4"]),
                    ..Default::default()
                },
                vec![0, 4],
            ),
            (
                "linkTypes",
                Selector {
                    link_types: strings(&["infiniband"]),
                    ..Default::default()
                },
                vec![1],
            ),
            (
                "linkTypes multi",
                Selector {
                    link_types: strings(&["infiniband", "fake"]),
                    ..Default::default()
                },
                vec![1, 4],
            ),
            (
                "rdma",
                Selector {
                    is_rdma: true,
                    ..Default::default()
                },
                vec![1, 4],
            ),
            ("empty selector", Selector::default(), vec![0, 1, 2, 3, 4]),
            (
                "needVhostNet does not filter",
                Selector {
                    need_vhost_net: true,
                    ..Default::default()
                },
                vec![0, 1, 2, 3, 4],
            ),
            (
                "filters are conjunctive",
                Selector {
                    vendors: strings(&["8086"]),
                    drivers: strings(&["igb_uio"]),
                    link_types: strings(&["ether"]),
                    ..Default::default()
                },
                vec![0],
            ),
            (
                "no vendor matches",
                Selector {
                    vendors: strings(&["None"]),
                    ..Default::default()
                },
                vec![],
            ),
        ];
        for (name, sel, want) in table {
            assert_eq!(selected(&sel, &devs), want, "{name}");
        }
    }

    #[test]
    fn comparisons_are_exact_strings() {
        let devs = upstream_devices();
        for sel in [
            Selector {
                vendors: strings(&["0x8086"]),
                ..Default::default()
            },
            Selector {
                devices: strings(&["ABCD"]),
                ..Default::default()
            },
            Selector {
                pci_addresses: strings(&["03:02.0"]),
                ..Default::default()
            },
            Selector {
                link_types: strings(&["Ether"]),
                ..Default::default()
            },
        ] {
            assert_eq!(selected(&sel, &devs), Vec::<usize>::new(), "{sel:?}");
        }
    }

    #[test]
    fn devices_without_the_property_fail_its_filter() {
        let bare = DeviceView {
            address: "0000:01:00.0".into(),
            vendor: "8086".into(),
            device: "1521".into(),
            class: 0x020000,
            driver: Some("igb".into()),
            ..DeviceView::default()
        };
        let table = [
            (
                "pfNames",
                Selector {
                    pf_names: pf_items(&["eno1"]),
                    ..Default::default()
                },
                false,
            ),
            (
                "rootDevices",
                Selector {
                    root_devices: pf_items(&["0000:01:00.0"]),
                    ..Default::default()
                },
                false,
            ),
            (
                "acpiIndexes",
                Selector {
                    acpi_indexes: strings(&["1"]),
                    ..Default::default()
                },
                false,
            ),
            (
                "acpiIndexes empty string",
                Selector {
                    acpi_indexes: strings(&[""]),
                    ..Default::default()
                },
                true,
            ),
            (
                "linkTypes",
                Selector {
                    link_types: strings(&["ether"]),
                    ..Default::default()
                },
                false,
            ),
            (
                "isRdma",
                Selector {
                    is_rdma: true,
                    ..Default::default()
                },
                false,
            ),
            (
                "drivers",
                Selector {
                    drivers: strings(&["igb"]),
                    ..Default::default()
                },
                true,
            ),
        ];
        for (name, sel, want) in table {
            assert_eq!(sel.matches(&bare), want, "{name}");
        }
        let with_acpi = DeviceView {
            acpi_index: Some("101".into()),
            ..bare.clone()
        };
        let sel = Selector {
            acpi_indexes: strings(&["101"]),
            ..Default::default()
        };
        assert!(sel.matches(&with_acpi));
        let sel = Selector {
            acpi_indexes: strings(&["102"]),
            ..Default::default()
        };
        assert!(!sel.matches(&with_acpi));
    }

    #[test]
    fn vf_ranges_select_by_index_on_pf_name_and_address() {
        let vf = |index: Option<u32>| DeviceView {
            address: "0000:18:01.0".into(),
            vendor: "8086".into(),
            device: "1889".into(),
            class: 0x020000,
            driver: Some("vfio-pci".into()),
            pf: Some(PfLink {
                address: "0000:18:00.0".into(),
                name: Some("ens1f0".into()),
                vf_index: index,
            }),
            ..DeviceView::default()
        };
        let by_name = Selector {
            pf_names: pf_items(&["ens1f0#2-3"]),
            ..Default::default()
        };
        let by_addr = Selector {
            root_devices: pf_items(&["0000:18:00.0#0,3"]),
            ..Default::default()
        };
        let table = [
            (Some(0), false, true),
            (Some(1), false, false),
            (Some(2), true, false),
            (Some(3), true, true),
            (Some(4), false, false),
            (None, false, false),
        ];
        for (index, name_want, addr_want) in table {
            assert_eq!(
                by_name.matches(&vf(index)),
                name_want,
                "pfNames VF {index:?}"
            );
            assert_eq!(
                by_addr.matches(&vf(index)),
                addr_want,
                "rootDevices VF {index:?}"
            );
        }
        // A PF without an interface has no name: pfNames never selects its VFs.
        let nameless = DeviceView {
            pf: Some(PfLink {
                name: None,
                ..vf(Some(3)).pf.unwrap()
            }),
            ..vf(Some(3))
        };
        assert!(!by_name.matches(&nameless));
        assert!(
            by_addr.matches(&nameless),
            "rootDevices does not need the name"
        );
        // Only the first item naming a PF counts.
        let first_wins = Selector {
            pf_names: pf_items(&["ens1f0#0", "ens1f0#2"]),
            ..Default::default()
        };
        assert!(!first_wins.matches(&vf(Some(2))));
    }
}
