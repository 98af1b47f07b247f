//! [`Device`] and [`Devices`]: what a device provider registers.

use std::collections::BTreeMap;

use crate::{NumaMask, NumaNodeId};

/// One device of a resource, as a kubelet device plugin lists it: an id,
/// its NUMA node(s) (none when the device has no topology), its health,
/// and attributes of the provider's own (a PCI address, a GPU index) that
/// its hooks can read.
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
            attributes: BTreeMap::new(),
        }
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
