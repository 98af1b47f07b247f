//! [`DeviceView`]s from the machine the host discovered: each PCI device of
//! [`Machine::pci_devices`] with what the engine needs resolved (its PF's
//! name, its link type or its PF's, ids in the plugin's form). Where each
//! field comes from in sysfs is listed in this crate's `DISCOVERY.md`.

use topomgr_sdk::{Machine, PciDevice};

use crate::device::{class_code, pci_id, DeviceView, PfLink};
use crate::link_type::link_type_name;

/// The views of every PCI device of `machine`, in its order (by address).
pub fn device_views(machine: &Machine) -> Vec<DeviceView> {
    let by_address = |address: &str| {
        machine
            .pci_devices
            .binary_search_by(|d| d.address.as_str().cmp(address))
            .ok()
            .map(|i| &machine.pci_devices[i])
    };
    machine
        .pci_devices
        .iter()
        .map(|d| {
            let pf = d
                .physfn
                .as_deref()
                .map(|address| (address, by_address(address)));
            view(d, pf)
        })
        .collect()
}

/// The view of `d`; `pf`: its PF's address and the PF itself when the
/// machine has it.
fn view(d: &PciDevice, pf: Option<(&str, Option<&PciDevice>)>) -> DeviceView {
    let pf_device = pf.and_then(|(_, p)| p);
    DeviceView {
        address: d.address.clone(),
        vendor: pci_id(&d.vendor),
        device: pci_id(&d.device),
        // Discovery only reports hex class codes; a device it could not
        // read reads 0, which no device type considers.
        class: class_code(&d.class).unwrap_or(0),
        driver: d.driver.clone(),
        numa: d.numa.map(|n| n.get()),
        net: d.net.clone(),
        // The plugin: the link type of the device's interface, else its PF's.
        link_type: d
            .link_type
            .or_else(|| pf_device.and_then(|p| p.link_type))
            .map(link_type_name),
        pf: pf.map(|(address, p)| PfLink {
            address: address.to_owned(),
            name: p.and_then(|p| p.net.first().cloned()),
            vf_index: d.vf_index,
        }),
        acpi_index: d.acpi_index.map(|n| n.to_string()),
        sriov_enabled: d.sriov.as_ref().is_some_and(|s| s.num_vfs > 0),
        default_route: d.default_route,
        rdma: d.rdma.clone(),
        rdma_char_devices: d.rdma_char_devices.clone(),
        iommu_group: d.iommu_group.map(|n| n.to_string()),
        uio: d.uio.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topomgr_sdk::{testkit, NumaNodeId, Sriov};

    #[test]
    fn views_resolve_the_pf_and_convert_ids() {
        let node = |n: u8| Some(NumaNodeId::from(n));
        let pf = PciDevice::new("0000:18:00.0", "0x8086", "0x1592", "0x020000", node(0))
            .with_driver("ice")
            .with_net(vec!["ens1f0".into()])
            .with_link_type(32)
            .with_sriov(Sriov::new(128, vec!["0000:18:01.2".into()]));
        let vf = PciDevice::new("0000:18:01.2", "0x8086", "0x1889", "0x020000", node(0))
            .with_driver("vfio-pci")
            .with_physfn("0000:18:00.0")
            .with_vf_index(2)
            .with_iommu_group(16);
        let orphan = PciDevice::new("0000:3b:02.0", "0x15B3", "0x1018", "0x020700", None)
            .with_driver("mlx5_core")
            .with_net(vec!["ib0".into()])
            .with_link_type(1)
            .with_physfn("0000:3b:00.0")
            .with_acpi_index(7)
            .with_rdma(vec!["mlx5_2".into()], vec!["umad2".into()])
            .with_uio("uio3")
            .with_default_route(true);
        let machine = testkit::machine_with_devices(1, 2, vec![orphan, vf, pf]);
        let views = device_views(&machine);
        let addresses: Vec<&str> = views.iter().map(|v| v.address.as_str()).collect();
        assert_eq!(addresses, ["0000:18:00.0", "0000:18:01.2", "0000:3b:02.0"]);
        assert_eq!(
            views[0],
            DeviceView {
                address: "0000:18:00.0".into(),
                vendor: "8086".into(),
                device: "1592".into(),
                class: 0x020000,
                driver: Some("ice".into()),
                numa: Some(0),
                net: vec!["ens1f0".into()],
                link_type: Some("infiniband".into()),
                sriov_enabled: true,
                ..DeviceView::default()
            }
        );
        // No interface of its own: the PF's link type, name and the index.
        assert_eq!(
            views[1],
            DeviceView {
                address: "0000:18:01.2".into(),
                vendor: "8086".into(),
                device: "1889".into(),
                class: 0x020000,
                driver: Some("vfio-pci".into()),
                numa: Some(0),
                link_type: Some("infiniband".into()),
                pf: Some(PfLink {
                    address: "0000:18:00.0".into(),
                    name: Some("ens1f0".into()),
                    vf_index: Some(2),
                }),
                iommu_group: Some("16".into()),
                ..DeviceView::default()
            }
        );
        // A PF the machine does not list: its address only.
        assert_eq!(
            views[2],
            DeviceView {
                address: "0000:3b:02.0".into(),
                vendor: "15b3".into(),
                device: "1018".into(),
                class: 0x020700,
                driver: Some("mlx5_core".into()),
                numa: None,
                net: vec!["ib0".into()],
                link_type: Some("ether".into()),
                pf: Some(PfLink {
                    address: "0000:3b:00.0".into(),
                    name: None,
                    vf_index: None,
                }),
                acpi_index: Some("7".into()),
                default_route: true,
                rdma: vec!["mlx5_2".into()],
                rdma_char_devices: vec!["umad2".into()],
                uio: Some("uio3".into()),
                ..DeviceView::default()
            }
        );
    }
}
