//! [`Device`] and [`Devices`]: what a device provider registers.

use std::collections::BTreeMap;

use crate::{NumaMask, NumaNodeId};

/// The prefix of a PCI address identity.
pub(super) const PCI_IDENTITY: &str = "pci:";
/// The prefix of a serial or UUID identity.
pub(super) const SERIAL_IDENTITY: &str = "serial:";

/// A PCI address in the form sysfs writes it (`0000:07:00.0`: 4-digit
/// domain, lower case) from the forms NVML and people write
/// (`00000000:07:00.0`, upper case); `None` when it is not a PCI address.
///
/// ```
/// use topomgr_sdk::devices::normalize_pci_address;
/// assert_eq!(normalize_pci_address("00000000:B7:1F.7").as_deref(), Some("0000:b7:1f.7"));
/// assert_eq!(normalize_pci_address("07:00.0"), None);
/// ```
pub fn normalize_pci_address(address: &str) -> Option<String> {
    let lower = address.trim().to_ascii_lowercase();
    let (domain, rest) = lower.split_once(':')?;
    let domain = match domain.len() {
        4 => domain,
        8 => domain.strip_prefix("0000")?,
        _ => return None,
    };
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let ok = hex(domain, 4)
        && hex(bus, 2)
        && hex(device, 2)
        && function.len() == 1
        && matches!(function.as_bytes()[0], b'0'..=b'7');
    ok.then(|| format!("{domain}:{bus}:{device}.{function}"))
}

/// One device of a resource, as a kubelet device plugin lists it: an id,
/// its NUMA node(s) (none when the device has no topology), its health,
/// what the device is whatever its id ([`identity`](Self::identity): its PCI
/// address, a serial), and attributes of the provider's own (a GPU index)
/// that its hooks can read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Device {
    /// The device id, unique within its resource (`GPU-8e2c…`, `0000:3b:02.0`).
    pub id: String,
    /// The NUMA nodes the device is attached to; empty: no topology.
    pub numa: NumaMask,
    /// Healthy devices can be allocated; unhealthy ones count in the
    /// capacity but are never handed out.
    pub healthy: bool,
    /// What the device is, whatever id or resource it is listed under:
    /// `pci:<address>` (its PCI address in the sysfs form,
    /// [`with_pci_address`](Self::with_pci_address)), `serial:<serial>` (a
    /// serial number or UUID of this one device,
    /// [`with_serial`](Self::with_serial)). Saved assignments find their
    /// devices by identity first, so a device listed under another id or
    /// resource (another discovery source, a renamed resource) stays its
    /// pod's. Empty: the device is known by its resource and id only.
    pub identity: Vec<String>,
    /// The provider's own attributes.
    pub attributes: BTreeMap<String, String>,
}

impl Device {
    /// A healthy device `id` on NUMA node `numa` (`None`: no topology).
    pub fn new(id: impl Into<String>, numa: Option<NumaNodeId>) -> Self {
        Device {
            id: id.into(),
            numa: numa.map_or(NumaMask::EMPTY, NumaMask::single),
            healthy: true,
            identity: Vec::new(),
            attributes: BTreeMap::new(),
        }
    }

    /// Known by its PCI address (`0000:3b:00.0`; the forms NVML and people
    /// write, `00000000:3B:00.0`, are normalized to the one sysfs writes).
    /// An address that is not one is refused when the devices are
    /// registered.
    ///
    /// ```
    /// use topomgr_sdk::devices::Device;
    /// let d = Device::new("GPU-8e2c", None).with_pci_address("00000000:3B:00.0");
    /// assert_eq!(d.identity, ["pci:0000:3b:00.0"]);
    /// ```
    pub fn with_pci_address(self, address: &str) -> Self {
        let address = normalize_pci_address(address).unwrap_or_else(|| address.to_owned());
        self.with_identity(format!("{PCI_IDENTITY}{address}"))
    }

    /// Known by a serial number or UUID that belongs to this one device (not
    /// a board's serial shared by several devices on it).
    pub fn with_serial(self, serial: &str) -> Self {
        self.with_identity(format!("{SERIAL_IDENTITY}{}", serial.trim()))
    }

    fn with_identity(mut self, identity: String) -> Self {
        if !self.identity.contains(&identity) {
            self.identity.push(identity);
        }
        self
    }

    /// Attached to all the nodes of `numa` (the device plugin API allows a
    /// device on several nodes; empty: no topology).
    pub fn with_nodes(mut self, numa: NumaMask) -> Self {
        self.numa = numa;
        self
    }

    /// With health `healthy`.
    pub fn with_health(mut self, healthy: bool) -> Self {
        self.healthy = healthy;
        self
    }

    /// With the attribute `key = value`.
    pub fn with_attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(key.into(), value.into());
        self
    }

    /// True when the device names at least one NUMA node.
    pub fn has_topology(&self) -> bool {
        !self.numa.is_empty()
    }

    /// The attribute `key`, if set.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// The resources a device provider owns and their devices, in the order
/// the provider lists them (the order devices are considered in when
/// nothing else decides, and the order its choice hook sees them in).
///
/// ```
/// use topomgr_sdk::devices::{Device, Devices};
/// use topomgr_sdk::NumaNodeId;
///
/// let devices = Devices::new().resource(
///     "example.com/fpga",
///     vec![
///         Device::new("fpga-0", Some(NumaNodeId::from(0))),
///         Device::new("fpga-1", None).with_attribute("pci", "0000:d8:00.0"),
///     ],
/// );
/// assert_eq!(devices.resources().count(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Devices(pub(crate) Vec<(String, Vec<Device>)>);

impl Devices {
    /// No resources.
    pub fn new() -> Self {
        Devices::default()
    }

    /// With `resource` and its `devices`.
    pub fn resource(mut self, resource: impl Into<String>, devices: Vec<Device>) -> Self {
        self.0.push((resource.into(), devices));
        self
    }

    /// The resource names, in order.
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(r, _)| r.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_normalize_to_the_sysfs_form() {
        assert_eq!(
            normalize_pci_address("00000000:07:00.0").as_deref(),
            Some("0000:07:00.0")
        );
        assert_eq!(
            normalize_pci_address(" 0000:B7:1F.7").as_deref(),
            Some("0000:b7:1f.7")
        );
        for bad in [
            "",
            "07:00.0",
            "00010000:07:00.0",
            "0000:7:00.0",
            "0000:07:00.8",
            "0000:07:00",
        ] {
            assert_eq!(normalize_pci_address(bad), None, "{bad}");
        }
        let d = Device::new("x", None)
            .with_pci_address("0000:3B:00.0")
            .with_serial("SN1")
            .with_pci_address("00000000:3b:00.0");
        assert_eq!(d.identity, ["pci:0000:3b:00.0", "serial:SN1"]);
        // Not an address: kept as given, refused when registered.
        assert_eq!(
            Device::new("x", None).with_pci_address("3b:00.0").identity,
            ["pci:3b:00.0"]
        );
    }
}
