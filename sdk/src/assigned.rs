//! Devices a container already holds from outside topomgr, and the hints
//! they fix: the named call [`METHOD_ASSIGNED_DEVICE_HINTS`](crate::ffi::METHOD_ASSIGNED_DEVICE_HINTS).
//!
//! On a Kubernetes node the kubelet's device plugins pick a container's
//! devices (GPUs, SR-IOV virtual functions) before the runtime creates it,
//! and tell the container which through its environment
//! (`NVIDIA_VISIBLE_DEVICES`, `PCIDEVICE_<RESOURCE>`). When topomgr places
//! such a container (as the runtime's NRI plugin), its CPUs and memory must
//! go where those devices are: the host asks every provider which of the
//! named devices it knows, and the providers that know them contribute
//! exactly those devices' hints to the merge, as the kubelet's Device
//! Manager does for a container that already holds devices.
//!
//! Devices that container device interface (CDI) specs inject, as DRA
//! drivers do, arrive as device nodes: the host maps those it can to their
//! PCI address through sysfs ([`DeviceRef::PciAddress`], for every
//! resource), and names every node too ([`AssignedDevices::nodes`]), for a
//! provider whose devices have no sysfs link but whose driver knows their
//! nodes (NVIDIA's `/dev/nvidiaN`: the device toolkit matches a node to a
//! device whose [`DEVICE_NODE_ATTRIBUTE`](crate::devices::DEVICE_NODE_ATTRIBUTE)
//! names it).
//!
//! A provider that does not answer the call (built with an SDK before it,
//! or not a device provider) knows none of them. The device toolkit answers
//! it for every [`DevicePlugin`](crate::devices::DevicePlugin)
//! ([`DeviceManager::assigned_device_hints`](crate::devices::DeviceManager::assigned_device_hints)).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::HintSet;

/// The request of the named call: the devices a container was given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AssignedDevicesRequest {
    /// The devices, grouped as the container's environment names them.
    pub devices: Vec<AssignedDevices>,
}

impl AssignedDevicesRequest {
    /// A request for `devices`.
    pub fn new(devices: Vec<AssignedDevices>) -> Self {
        AssignedDevicesRequest { devices }
    }

    /// Whether it names no device.
    pub fn is_empty(&self) -> bool {
        self.devices
            .iter()
            .all(|d| d.ids.is_empty() && d.nodes.is_empty())
    }
}

/// Devices of one source (one environment variable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AssignedDevices {
    /// Where the devices were read (`NVIDIA_VISIBLE_DEVICES`), for messages.
    pub source: String,
    /// Which of a provider's resources they may belong to.
    pub resource: ResourceMatch,
    /// The devices, in the source's order.
    pub ids: Vec<DeviceRef>,
    /// Device nodes the source gives the container (a CDI device's
    /// `deviceNodes`), for providers that know their devices by node.
    /// Added in a 0.3 patch: a provider built before reads none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<DeviceNode>,
}

/// A device node (`/dev/nvidia0`, character device 195:0).
///
/// JSON: `{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeviceNode {
    /// Its path in the container (`/dev/nvidia0`).
    pub path: String,
    /// `c` (character) or `b` (block).
    #[serde(rename = "type")]
    pub kind: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl DeviceNode {
    /// Node `path`, of `kind` (`c`, `b`), `major:minor`.
    pub fn new(path: impl Into<String>, kind: impl Into<String>, major: u32, minor: u32) -> Self {
        DeviceNode {
            path: path.into(),
            kind: kind.into(),
            major,
            minor,
        }
    }

    /// The form [`DEVICE_NODE_ATTRIBUTE`](crate::devices::DEVICE_NODE_ATTRIBUTE)
    /// holds: `c 195:0`.
    pub fn number(&self) -> String {
        format!("{} {}:{}", self.kind, self.major, self.minor)
    }
}

impl AssignedDevices {
    /// `ids` of the resources `resource` matches, read from `source`.
    pub fn new(source: impl Into<String>, resource: ResourceMatch, ids: Vec<DeviceRef>) -> Self {
        AssignedDevices {
            source: source.into(),
            resource,
            ids,
            nodes: Vec::new(),
        }
    }

    /// With the device nodes `nodes` (see [`AssignedDevices::nodes`]).
    pub fn with_nodes(mut self, nodes: Vec<DeviceNode>) -> Self {
        self.nodes = nodes;
        self
    }
}

/// Which resources an [`AssignedDevices`] may belong to.
///
/// JSON: `{"prefix": "nvidia.com/"}`, `{"env_name": "INTEL_COM_SRIOV"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceMatch {
    /// Every resource whose name starts with this (`nvidia.com/`: the GPU
    /// resource and its MIG resources).
    Prefix(String),
    /// The resource whose name, upper-cased with every `.` and `/` written
    /// `_`, is this: the SR-IOV network device plugin's
    /// `PCIDEVICE_<name>` (`intel.com/intel_sriov_netdevice` →
    /// `INTEL_COM_INTEL_SRIOV_NETDEVICE`).
    EnvName(String),
}

impl ResourceMatch {
    /// Whether `resource` is one of the resources this matches.
    pub fn matches(&self, resource: &str) -> bool {
        match self {
            ResourceMatch::Prefix(prefix) => resource.starts_with(prefix.as_str()),
            ResourceMatch::EnvName(name) => resource
                .chars()
                .map(|c| match c {
                    '.' | '/' => '_',
                    c => c.to_ascii_uppercase(),
                })
                .eq(name.chars()),
        }
    }
}

/// One device as a container's environment names it.
///
/// JSON: `{"uuid": "GPU-…"}`, `{"index": 3}`, `{"pci_address": "0000:3b:02.1"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceRef {
    /// A UUID (`GPU-…`, `MIG-…`): the device with this id, or with this
    /// serial identity ([`Device::with_serial`](crate::devices::Device::with_serial)).
    Uuid(String),
    /// An index: the device whose attribute
    /// [`INDEX_ATTRIBUTE`](crate::devices::INDEX_ATTRIBUTE) is this number
    /// (the GPU provider sets NVML's index there).
    Index(u32),
    /// A PCI address (`0000:3b:02.1`): the device with this PCI identity
    /// ([`Device::with_pci_address`](crate::devices::Device::with_pci_address))
    /// or this id.
    PciAddress(String),
}

impl std::fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceRef::Uuid(u) => f.write_str(u),
            DeviceRef::Index(i) => write!(f, "{i}"),
            DeviceRef::PciAddress(a) => f.write_str(a),
        }
    }
}

/// The answer of the named call: per resource of the provider, the devices
/// it recognised and the hints they fix. Empty: the provider knows none of
/// the devices (the answer of a provider without the call).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AssignedDeviceHints {
    /// Resource name → what the provider knows of it.
    pub resources: BTreeMap<String, AssignedResource>,
}

impl AssignedDeviceHints {
    /// No device recognised.
    pub fn none() -> Self {
        AssignedDeviceHints::default()
    }

    /// With `resource`'s recognised devices.
    pub fn with(mut self, resource: impl Into<String>, found: AssignedResource) -> Self {
        self.resources.insert(resource.into(), found);
        self
    }
}

/// What a provider recognised of one of its resources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AssignedResource {
    /// The provider's ids of the recognised devices, in its order.
    pub devices: Vec<String>,
    /// The [`DeviceRef`]s of the request they were recognised by, as the
    /// source wrote them (`GPU-…`, `3`, `0000:3b:02.1`).
    pub matched: Vec<String>,
    /// The hints those devices fix (`None`: none of them has a NUMA node,
    /// so no preference).
    pub hints: Option<HintSet>,
}

impl AssignedResource {
    /// `devices`, recognised by `matched`, fixing `hints`.
    pub fn new(devices: Vec<String>, matched: Vec<String>, hints: Option<HintSet>) -> Self {
        AssignedResource {
            devices,
            matched,
            hints,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_match_by_prefix_or_by_the_sriov_plugins_variable_name() {
        let gpu = ResourceMatch::Prefix("nvidia.com/".into());
        assert!(gpu.matches("nvidia.com/gpu"));
        assert!(gpu.matches("nvidia.com/mig-1g.5gb"));
        assert!(!gpu.matches("amd.com/gpu"));
        let vf = ResourceMatch::EnvName("INTEL_COM_INTEL_SRIOV_NETDEVICE".into());
        assert!(vf.matches("intel.com/intel_sriov_netdevice"));
        assert!(!vf.matches("intel.com/intel_sriov_dpdk"));
        assert!(!vf.matches("intel.com/intel_sriov_netdevice2"));
    }

    #[test]
    fn the_request_and_answer_have_a_stable_json_form() {
        let r = AssignedDevicesRequest::new(vec![AssignedDevices::new(
            "NVIDIA_VISIBLE_DEVICES",
            ResourceMatch::Prefix("nvidia.com/".into()),
            vec![DeviceRef::Uuid("GPU-1".into()), DeviceRef::Index(3)],
        )]);
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"devices":[{"source":"NVIDIA_VISIBLE_DEVICES","resource":{"prefix":"nvidia.com/"},"ids":[{"uuid":"GPU-1"},{"index":3}]}]}"#
        );
        assert_eq!(
            serde_json::from_str::<AssignedDevicesRequest>(&text).unwrap(),
            r
        );
        assert!(!r.is_empty());
        assert!(AssignedDevicesRequest::default().is_empty());
        let a = AssignedDeviceHints::none().with(
            "nvidia.com/gpu",
            AssignedResource::new(vec!["GPU-1".into()], vec!["GPU-1".into()], None),
        );
        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(
            text,
            r#"{"resources":{"nvidia.com/gpu":{"devices":["GPU-1"],"matched":["GPU-1"],"hints":null}}}"#
        );
        assert_eq!(
            serde_json::from_str::<AssignedDeviceHints>(&text).unwrap(),
            a
        );
    }
}
