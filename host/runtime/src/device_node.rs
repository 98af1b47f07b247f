//! Which PCI device a device node is, from sysfs.
//!
//! - A character or block node: `<sysfs>/dev/{char,block}/MAJ:MIN` links
//!   to the device's directory; its `device` link (or the directory itself)
//!   leads up the device tree, and the nearest PCI address on the way is
//!   the PCI device (an RDMA `uverbs` node, a DRM card, an NVMe disk).
//! - A VFIO group (`/dev/vfio/<group>`): the PCI devices of IOMMU group
//!   `<sysfs>/kernel/iommu_groups/<group>/devices/`.
//!
//! Devices whose driver registers no sysfs device for its nodes (NVIDIA's
//! `/dev/nvidiaN`) have no answer here: their provider knows them by node
//! ([`topomgr_sdk::devices::DEVICE_NODE_ATTRIBUTE`]).

use std::path::{Component, Path};

use topomgr_sdk::devices::normalize_pci_address;
use topomgr_sdk::DeviceNode;

/// The PCI addresses (sysfs form, `0000:3b:02.1`) of the device behind
/// `node`, read under `sysfs_root`; empty when sysfs does not say.
pub fn pci_addresses(sysfs_root: &Path, node: &DeviceNode) -> Vec<String> {
    if let Some(group) = node.path.strip_prefix("/dev/vfio/") {
        if !group.is_empty() && group.bytes().all(|b| b.is_ascii_digit()) {
            let dir = sysfs_root
                .join("kernel/iommu_groups")
                .join(group)
                .join("devices");
            let mut out: Vec<String> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .filter_map(|e| normalize_pci_address(&e.file_name().to_string_lossy()))
                .collect();
            out.sort();
            return out;
        }
    }
    let class = match node.kind.as_str() {
        "b" => "block",
        _ => "char",
    };
    let link = sysfs_root
        .join("dev")
        .join(class)
        .join(format!("{}:{}", node.major, node.minor));
    // The `device` link where the node's class device has one, else the
    // class device's own place in the tree.
    let target = std::fs::canonicalize(link.join("device"))
        .or_else(|_| std::fs::canonicalize(&link))
        .ok();
    target
        .and_then(|t| nearest_pci_address(&t))
        .into_iter()
        .collect()
}

/// The last component of `path` that is a PCI address.
fn nearest_pci_address(path: &Path) -> Option<String> {
    path.components().rev().find_map(|c| match c {
        Component::Normal(name) => normalize_pci_address(&name.to_string_lossy()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn nodes_lead_to_their_pci_device() {
        let root = std::env::temp_dir().join(format!("topomgr-devnode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let card = root.join("devices/pci0000:00/0000:00:01.0/0000:17:00.0/drm/card1");
        let uverbs =
            root.join("devices/pci0000:80/0000:80:02.0/0000:af:00.1/infiniband_verbs/uverbs0");
        let virt = root.join("devices/virtual/misc/fuse");
        for d in [&card, &uverbs, &virt] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::create_dir_all(root.join("dev/char")).unwrap();
        // A class device with a `device` link, one without, a virtual one.
        symlink(&card, root.join("dev/char/226:1")).unwrap();
        symlink("../../../0000:17:00.0", card.join("device")).unwrap();
        symlink(&uverbs, root.join("dev/char/231:192")).unwrap();
        symlink(&virt, root.join("dev/char/10:229")).unwrap();
        let group = root.join("kernel/iommu_groups/71/devices");
        std::fs::create_dir_all(&group).unwrap();
        std::fs::create_dir(group.join("0000:3b:02.1")).unwrap();
        std::fs::create_dir(group.join("0000:3b:02.0")).unwrap();

        let at = |path: &str, kind: &str, major, minor| {
            pci_addresses(&root, &DeviceNode::new(path, kind, major, minor))
        };
        assert_eq!(at("/dev/dri/card1", "c", 226, 1), ["0000:17:00.0"]);
        assert_eq!(
            at("/dev/infiniband/uverbs0", "c", 231, 192),
            ["0000:af:00.1"]
        );
        assert!(at("/dev/fuse", "c", 10, 229).is_empty());
        assert!(
            at("/dev/nvidia0", "c", 195, 0).is_empty(),
            "no sysfs device"
        );
        // A block node with the card's numbers is not the card.
        assert!(at("/dev/sdq", "b", 226, 1).is_empty());
        assert_eq!(
            at("/dev/vfio/71", "c", 243, 5),
            ["0000:3b:02.0", "0000:3b:02.1"]
        );
        assert!(at("/dev/vfio/vfio", "c", 10, 196).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
