//! [`DeviceIdentities`]: the devices a provider serves and what each one
//! physically is, for the host's one-device-one-holder check across
//! providers and resource names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One device a provider serves: its id within its resource and its
/// identities (`pci:<address>`, `serial:<serial>`; see
/// [`Device::identity`](crate::devices::Device::identity)).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ServedDevice {
    /// The device id, as allocations name it.
    pub id: String,
    /// What the device physically is; empty: known by its id alone.
    #[serde(default)]
    pub identity: Vec<String>,
}

impl ServedDevice {
    /// Device `id` with `identity`.
    pub fn new(id: impl Into<String>, identity: Vec<String>) -> Self {
        ServedDevice {
            id: id.into(),
            identity,
        }
    }
}

/// The answer of [`Provider::device_identities`](crate::Provider::device_identities):
/// by resource name, every device the provider serves (healthy or not).
///
/// JSON: `{"resources": {"nvidia.com/gpu": [{"id": "GPU-0", "identity":
/// ["pci:0000:17:00.0"]}]}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeviceIdentities {
    /// Resource name -> its devices.
    #[serde(default)]
    pub resources: BTreeMap<String, Vec<ServedDevice>>,
}

impl DeviceIdentities {
    /// No devices (the default answer).
    pub fn new() -> Self {
        DeviceIdentities::default()
    }

    /// With `resource` and its `devices`.
    pub fn with_resource(
        mut self,
        resource: impl Into<String>,
        devices: Vec<ServedDevice>,
    ) -> Self {
        self.resources.insert(resource.into(), devices);
        self
    }
}
