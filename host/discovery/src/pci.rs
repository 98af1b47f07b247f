//! PCI devices: `bus/pci/devices/<address>` (links into `devices/`).

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;

use topomgr_sdk::{NumaNodeId, PciDevice, Sriov};

use super::sysfs::{
    clean, dir_names, link_name, numbered_entries, parse_error, parse_num, read_optional,
    read_optional_num,
};
use super::{route, DiscoveryError};

/// Read every PCI device, ascending by address. No `bus/pci/devices`
/// directory means no PCI devices.
///
/// `node_ids` are the machine's NUMA nodes: a `numa_node` of -1, or naming
/// another node (firmware bugs), is reported as no node (`None`), so every
/// device's `numa` is `None` or a node of the machine.
///
/// A virtual function's `vf_index` is the `N` of the `virtfn<N>` link of its
/// PF (the one its `physfn` names) that points to it; `default_route` comes
/// from the routing table beside the tree ([`route::route_path`]).
pub(super) fn read_pci(
    root: &Path,
    node_ids: &[NumaNodeId],
) -> Result<Vec<PciDevice>, DiscoveryError> {
    let dir = root.join("bus/pci/devices");
    let Some(addresses) = dir_names(&dir)? else {
        tracing::debug!(path = %dir.display(), "no PCI bus in sysfs");
        return Ok(Vec::new());
    };
    let with_default_route = route::default_route_interfaces(&route::route_path(root))?;
    let mut devices = Vec::with_capacity(addresses.len());
    let mut vf_links = Vec::new();
    for address in &addresses {
        let (device, links) =
            read_device(&dir.join(address), address, node_ids, &with_default_route)?;
        vf_links.extend(links.into_iter().map(|(n, vf)| (address.clone(), n, vf)));
        devices.push(device);
    }
    // `addresses` is sorted, and so is `devices`.
    for (pf, n, vf) in vf_links {
        if let Ok(i) = devices.binary_search_by(|d| d.address.as_str().cmp(&vf)) {
            let device = &mut devices[i];
            if device.physfn.as_deref() == Some(pf.as_str()) {
                device.vf_index = Some(n);
            }
        }
    }
    Ok(devices)
}

/// A PF's `virtfn<N>` links as (N, VF address), by N.
type VfLinks = Vec<(u32, String)>;

/// One device, and its `virtfn<N>` links.
fn read_device(
    dir: &Path,
    address: &str,
    node_ids: &[NumaNodeId],
    with_default_route: &BTreeSet<String>,
) -> Result<(PciDevice, VfLinks), DiscoveryError> {
    let ids = read_ids(dir)?;
    let numa_path = dir.join("numa_node");
    let numa = match read_optional_num::<i32>(&numa_path, "an integer")? {
        None | Some(-1) => None,
        Some(n) if n < -1 => {
            return Err(parse_error(
                &numa_path,
                "a NUMA node id or -1",
                &n.to_string(),
            ))
        }
        Some(n) => match node_ids
            .iter()
            .find(|id| i64::from(id.get()) == i64::from(n))
        {
            Some(id) => Some(*id),
            None => {
                tracing::warn!(
                    path = %numa_path.display(),
                    numa_node = n,
                    "PCI device names a NUMA node the machine does not have; treating it as no node"
                );
                None
            }
        },
    };
    let driver = link_name(&dir.join("driver"))?;
    let net = dir_names(&dir.join("net"))?.unwrap_or_default();
    let (sriov, vf_links) = match read_sriov(dir)? {
        Some((sriov, links)) => (Some(sriov), links),
        None => (None, Vec::new()),
    };
    let physfn = link_name(&dir.join("physfn"))?;
    let link_type = match net.first() {
        Some(first) => read_optional_num::<u16>(
            &dir.join("net").join(first).join("type"),
            "a link type number (ARPHRD_*) like 1",
        )?,
        None => None,
    };
    let acpi_index = read_optional_num::<u32>(&dir.join("acpi_index"), "an ACPI index number")?;
    let rdma = dir_names(&dir.join("infiniband"))?.unwrap_or_default();
    let mut rdma_char_devices = dir_names(&dir.join("infiniband_verbs"))?.unwrap_or_default();
    rdma_char_devices.extend(dir_names(&dir.join("infiniband_mad"))?.unwrap_or_default());
    rdma_char_devices.sort();
    let group_path = dir.join("iommu_group");
    let iommu_group = link_name(&group_path)?
        .map(|name| parse_num::<u32>(&group_path, &name, "a link to an IOMMU group number"))
        .transpose()?;
    let uio = dir_names(&dir.join("uio"))?.and_then(|names| names.into_iter().next());
    let default_route = net.iter().any(|n| with_default_route.contains(n));
    let mut device = PciDevice::new(address, ids.vendor, ids.device, ids.class, numa).with_net(net);
    device.driver = driver;
    device.sriov = sriov;
    device.physfn = physfn;
    device.link_type = link_type;
    device.acpi_index = acpi_index;
    device.rdma = rdma;
    device.rdma_char_devices = rdma_char_devices;
    device.iommu_group = iommu_group;
    device.uio = uio;
    device.default_route = default_route;
    Ok((device, vf_links))
}

struct Ids {
    vendor: String,
    device: String,
    class: String,
}

/// Vendor, device and class as sysfs writes them (`0x10de`, `0x20b0`,
/// `0x030200`). When the attribute files are absent (trimmed recordings) the
/// first bytes of `config` are used; without either, the ids read 0 like
/// hwloc reports them.
fn read_ids(dir: &Path) -> Result<Ids, DiscoveryError> {
    let vendor = read_hex(&dir.join("vendor"), 4)?;
    let device = read_hex(&dir.join("device"), 4)?;
    let class = read_hex(&dir.join("class"), 6)?;
    if let (Some(vendor), Some(device), Some(class)) = (&vendor, &device, &class) {
        return Ok(Ids {
            vendor: vendor.clone(),
            device: device.clone(),
            class: class.clone(),
        });
    }
    let config_path = dir.join("config");
    let config = match fs::read(&config_path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(DiscoveryError::Read {
                path: config_path,
                cause: e,
            })
        }
    };
    let from_config = |offset: usize, len: usize| -> Option<u32> {
        let bytes = config.as_ref()?.get(offset..offset + len)?;
        Some(
            bytes
                .iter()
                .rev()
                .fold(0u32, |acc, b| (acc << 8) | u32::from(*b)),
        )
    };
    if config.is_none() {
        tracing::warn!(
            path = %dir.display(),
            "PCI device has neither vendor/device/class files nor config space; its ids read 0"
        );
    }
    Ok(Ids {
        vendor: vendor.unwrap_or_else(|| format!("{:#06x}", from_config(0, 2).unwrap_or(0))),
        device: device.unwrap_or_else(|| format!("{:#06x}", from_config(2, 2).unwrap_or(0))),
        class: class.unwrap_or_else(|| format!("{:#08x}", from_config(9, 3).unwrap_or(0))),
    })
}

/// An optional `0x`-prefixed hex attribute of `digits` digits.
fn read_hex(path: &Path, digits: usize) -> Result<Option<String>, DiscoveryError> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    let value = clean(&text);
    let ok = value
        .strip_prefix("0x")
        .is_some_and(|h| h.len() == digits && h.bytes().all(|b| b.is_ascii_hexdigit()));
    if !ok {
        let expected = if digits == 4 {
            "a hex id like 0x10de"
        } else {
            "a hex class like 0x030200"
        };
        return Err(parse_error(path, expected, &text));
    }
    Ok(Some(value.to_ascii_lowercase()))
}

/// SR-IOV capability: present when the device has `sriov_totalvfs` or
/// `virtfn<N>` links; with the links as (N, VF address).
fn read_sriov(dir: &Path) -> Result<Option<(Sriov, VfLinks)>, DiscoveryError> {
    let total_path = dir.join("sriov_totalvfs");
    let total = read_optional(&total_path)?
        .map(|text| parse_num::<u32>(&total_path, &text, "a VF count"))
        .transpose()?;
    let links = numbered_entries(dir, "virtfn")?.unwrap_or_default();
    if total.is_none() && links.is_empty() {
        return Ok(None);
    }
    let num_path = dir.join("sriov_numvfs");
    let num_vfs = match read_optional(&num_path)? {
        Some(text) => parse_num::<u32>(&num_path, &text, "a VF count")?,
        None => u32::try_from(links.len()).unwrap_or(u32::MAX),
    };
    let mut numbered = Vec::with_capacity(links.len());
    for (n, link) in &links {
        if let Some(address) = link_name(link)? {
            numbered.push((*n, address));
        }
    }
    let vfs = numbered.iter().map(|(_, a)| a.clone()).collect();
    let total_vfs = total.unwrap_or(num_vfs);
    let mut sriov = Sriov::new(total_vfs, vfs);
    sriov.num_vfs = num_vfs;
    Ok(Some((sriov, numbered)))
}
