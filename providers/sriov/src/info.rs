//! Per-device information, the value of one device in the
//! `PCIDEVICE_<PREFIX>_<NAME>_INFO` variable: for each of the device plugin's
//! info providers that applies to the device (`pkg/infoprovider`, chosen in
//! `pkg/factory/factory.go` `GetDefaultInfoProvider` and
//! `pkg/netdevice/pciNetDevice.go` `NewPciNetDevice`), its name and its
//! key/value pairs:
//!
//! | provider  | when                                              | keys |
//! |-----------|---------------------------------------------------|------|
//! | `generic` | always                                            | `deviceID`: the PCI address |
//! | `vfio`    | driver `vfio-pci`                                 | `mount`: `/dev/vfio/vfio`; `dev-mount`: `/dev/vfio/<iommu group>` when the group is known |
//! | `uio`     | driver `uio` or `igb_uio`                         | `mount`: `/dev/<uio device>` when known |
//! | `rdma`    | `netDevice`, selector `isRdma`, device has RDMA   | `rdma_dev`: first RDMA device; `uverbs`, `umad`, `issm`: `/dev/infiniband/<char device>`; `rdma_cm`: `/dev/infiniband/rdma_cm` when it exists |
//! | `vhost`   | `netDevice`, selector `needVhostNet`, `/dev/vhost-net` exists | `net-mount`: `/dev/vhost-net`; `tun-mount`: `/dev/net/tun` |
//! | `extra`   | the resource has `additionalInfo`                 | the `"*"` pairs, then the device address's pairs over them |
//!
//! (The plugin's README shows `vfio-mount`/`vfio-dev-mount` and `extraInfo`;
//! its code, which is what pods see, writes `mount`/`dev-mount` and `extra`.)

use std::collections::BTreeMap;

use crate::device::{DeviceType, DeviceView, HostFacts};
use crate::go_json::decode::StringMaps;
use crate::selector::Selector;

/// A resource's `additionalInfo`: `"*"` or a PCI address -> key -> value.
pub type AdditionalInfo = StringMaps;

/// One device's info: provider name -> key -> value.
pub type DeviceInfo = StringMaps;

fn pairs<const N: usize>(kv: [(&str, String); N]) -> BTreeMap<String, String> {
    kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The info of `dev` as a member of a resource of type `device_type`, taken
/// by `selector`, with the resource's `additional` info.
pub fn device_info(
    dev: &DeviceView,
    device_type: DeviceType,
    selector: &Selector,
    additional: Option<&AdditionalInfo>,
    host: &HostFacts,
) -> DeviceInfo {
    let mut info = DeviceInfo::new();
    info.insert("generic".into(), pairs([("deviceID", dev.address.clone())]));
    match dev.driver.as_deref() {
        Some("vfio-pci") => {
            let mut vfio = pairs([("mount", "/dev/vfio/vfio".to_owned())]);
            if let Some(group) = &dev.iommu_group {
                vfio.insert("dev-mount".into(), format!("/dev/vfio/{group}"));
            }
            info.insert("vfio".into(), vfio);
        }
        Some("uio" | "igb_uio") => {
            let mut uio = BTreeMap::new();
            if let Some(name) = &dev.uio {
                uio.insert("mount".into(), format!("/dev/{name}"));
            }
            info.insert("uio".into(), uio);
        }
        _ => {}
    }
    if device_type == DeviceType::NetDevice {
        if selector.is_rdma && !dev.rdma.is_empty() {
            info.insert("rdma".into(), rdma_info(dev, host));
        }
        if selector.need_vhost_net {
            if host.vhost_net {
                info.insert(
                    "vhost".into(),
                    pairs([
                        ("net-mount", "/dev/vhost-net".to_owned()),
                        ("tun-mount", "/dev/net/tun".to_owned()),
                    ]),
                );
            } else {
                tracing::warn!(
                    device = %dev.address,
                    "needVhostNet is set but /dev/vhost-net does not exist; the device gets no vhost info"
                );
            }
        }
    }
    if let Some(additional) = additional {
        let mut extra = BTreeMap::new();
        for key in ["*", dev.address.as_str()] {
            if let Some(kv) = additional.get(key) {
                extra.extend(kv.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        info.insert("extra".into(), extra);
    }
    info
}

fn rdma_info(dev: &DeviceView, host: &HostFacts) -> BTreeMap<String, String> {
    let mut rdma = BTreeMap::new();
    for name in &dev.rdma_char_devices {
        let key = ["uverbs", "umad", "issm"]
            .into_iter()
            .find(|prefix| name.contains(prefix));
        if let Some(key) = key {
            rdma.insert(key.to_owned(), format!("/dev/infiniband/{name}"));
        }
    }
    if host.rdma_cm {
        rdma.insert("rdma_cm".into(), "/dev/infiniband/rdma_cm".into());
    }
    if let Some(first) = dev.rdma.first() {
        rdma.insert("rdma_dev".into(), first.clone());
    }
    rdma
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vf(driver: &str) -> DeviceView {
        DeviceView {
            address: "0000:3b:02.6".into(),
            vendor: "8086".into(),
            device: "1889".into(),
            class: 0x020000,
            driver: Some(driver.into()),
            ..DeviceView::default()
        }
    }

    fn render(info: &DeviceInfo) -> String {
        info.iter()
            .map(|(p, kv)| {
                let kv: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{p}[{}]", kv.join(" "))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn info_by_driver_selector_and_host() {
        let none = HostFacts::default();
        let all = HostFacts {
            vhost_net: true,
            rdma_cm: true,
        };
        let plain = Selector::default();
        let vhost = Selector {
            need_vhost_net: true,
            ..Default::default()
        };
        let rdma = Selector {
            is_rdma: true,
            ..Default::default()
        };
        let vfio = DeviceView {
            iommu_group: Some("169".into()),
            ..vf("vfio-pci")
        };
        let uio = DeviceView {
            uio: Some("uio3".into()),
            ..vf("igb_uio")
        };
        let mlx = DeviceView {
            rdma: vec!["mlx5_2".into(), "mlx5_3".into()],
            rdma_char_devices: vec!["issm2".into(), "umad2".into(), "uverbs2".into()],
            ..vf("mlx5_core")
        };
        let (bare_vfio, bare_uio, generic_uio) = (vf("vfio-pci"), vf("uio"), vf("uio_pci_generic"));
        let net = DeviceType::NetDevice;
        let acc = DeviceType::Accelerator;
        let table: Vec<(&str, &DeviceView, DeviceType, &Selector, HostFacts, &str)> = vec![
            ("kernel VF", &mlx, net, &plain, none, "generic[deviceID=0000:3b:02.6]"),
            (
                "vfio with group",
                &vfio,
                net,
                &plain,
                none,
                "generic[deviceID=0000:3b:02.6] vfio[dev-mount=/dev/vfio/169 mount=/dev/vfio/vfio]",
            ),
            (
                "vfio without group",
                &bare_vfio,
                acc,
                &plain,
                none,
                "generic[deviceID=0000:3b:02.6] vfio[mount=/dev/vfio/vfio]",
            ),
            ("igb_uio", &uio, net, &plain, none, "generic[deviceID=0000:3b:02.6] uio[mount=/dev/uio3]"),
            ("uio unknown device", &bare_uio, net, &plain, none, "generic[deviceID=0000:3b:02.6] uio[]"),
            ("uio_pci_generic is not uio", &generic_uio, net, &plain, none, "generic[deviceID=0000:3b:02.6]"),
            (
                "vhost",
                &vfio,
                net,
                &vhost,
                all,
                "generic[deviceID=0000:3b:02.6] vfio[dev-mount=/dev/vfio/169 mount=/dev/vfio/vfio] \
                 vhost[net-mount=/dev/vhost-net tun-mount=/dev/net/tun]",
            ),
            (
                "vhost without /dev/vhost-net",
                &vfio,
                net,
                &vhost,
                none,
                "generic[deviceID=0000:3b:02.6] vfio[dev-mount=/dev/vfio/169 mount=/dev/vfio/vfio]",
            ),
            ("vhost on accelerator", &bare_vfio, acc, &vhost, all, "generic[deviceID=0000:3b:02.6] vfio[mount=/dev/vfio/vfio]"),
            (
                "rdma",
                &mlx,
                net,
                &rdma,
                all,
                "generic[deviceID=0000:3b:02.6] rdma[issm=/dev/infiniband/issm2 rdma_cm=/dev/infiniband/rdma_cm \
                 rdma_dev=mlx5_2 umad=/dev/infiniband/umad2 uverbs=/dev/infiniband/uverbs2]",
            ),
            (
                "rdma without rdma_cm",
                &mlx,
                net,
                &rdma,
                none,
                "generic[deviceID=0000:3b:02.6] rdma[issm=/dev/infiniband/issm2 rdma_dev=mlx5_2 \
                 umad=/dev/infiniband/umad2 uverbs=/dev/infiniband/uverbs2]",
            ),
            ("rdma not asked", &mlx, net, &plain, all, "generic[deviceID=0000:3b:02.6]"),
            ("rdma asked, device has none", &vfio, net, &rdma, all, "generic[deviceID=0000:3b:02.6] vfio[dev-mount=/dev/vfio/169 mount=/dev/vfio/vfio]"),
        ];
        for (name, dev, ty, sel, host, want) in table {
            let want = want.split_whitespace().collect::<Vec<_>>().join(" ");
            assert_eq!(
                render(&device_info(dev, ty, sel, None, &host)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn additional_info_star_then_address_overrides() {
        let additional: AdditionalInfo = [
            ("*", vec![("token", "original"), ("site", "a")]),
            ("0000:86:00.0", vec![("token", "specific")]),
        ]
        .into_iter()
        .map(|(k, kv)| {
            (
                k.to_owned(),
                kv.into_iter()
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .collect(),
            )
        })
        .collect();
        let host = HostFacts::default();
        let sel = Selector::default();
        let other = vf("iavf");
        let specific = DeviceView {
            address: "0000:86:00.0".into(),
            ..vf("iavf")
        };
        for (dev, want) in [
            (
                &other,
                "extra[site=a token=original] generic[deviceID=0000:3b:02.6]",
            ),
            (
                &specific,
                "extra[site=a token=specific] generic[deviceID=0000:86:00.0]",
            ),
        ] {
            let got = device_info(dev, DeviceType::NetDevice, &sel, Some(&additional), &host);
            assert_eq!(render(&got), want);
        }
        let empty = AdditionalInfo::new();
        let got = device_info(&other, DeviceType::Accelerator, &sel, Some(&empty), &host);
        assert_eq!(render(&got), "extra[] generic[deviceID=0000:3b:02.6]");
    }
}
