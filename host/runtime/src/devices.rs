//! Devices that the kubelet's device plugins already gave a container, as
//! its environment tells them:
//!
//! - `NVIDIA_VISIBLE_DEVICES` (NVIDIA's device plugin and container
//!   toolkit): GPU UUIDs (`GPU-…`, `MIG-…`) or indexes, comma-separated;
//!   `all`, `none`, `void` and an empty value name no particular device.
//! - `PCIDEVICE_<RESOURCE>` (the SR-IOV network device plugin): PCI
//!   addresses, comma-separated; `<RESOURCE>` is the resource name with
//!   its prefix, upper-cased, every `.` and `/` an `_`
//!   (`intel.com/intel_sriov_netdevice` →
//!   `PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE`). `PCIDEVICE_*_INFO` is
//!   that plugin's JSON detail, not a list.
//!
//! Each becomes an [`AssignedDevices`]: which resource it hints at and the
//! ids, for the providers that know those devices to hint exactly them.

use super::MappingError;

/// One variable's devices, or one CDI device's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignedDevices {
    /// The variable (`NVIDIA_VISIBLE_DEVICES`, `PCIDEVICE_…`), or `CDI
    /// device <name>`.
    pub variable: String,
    /// Which resource the devices belong to.
    pub resource: ResourceHint,
    /// The devices, in the variable's order.
    pub ids: Vec<DeviceId>,
    /// A CDI device's nodes (for providers that know their devices by
    /// node); empty for a variable.
    pub nodes: Vec<topomgr_sdk::DeviceNode>,
}

/// The resource of [`AssignedDevices`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceHint {
    /// NVIDIA GPUs (`nvidia.com/gpu`, and its MIG resources).
    NvidiaGpu,
    /// The resource whose name gives `PCIDEVICE_<env_name>`.
    PciDevice {
        /// The name after `PCIDEVICE_`.
        env_name: String,
    },
    /// A CDI device: whichever resource its devices are listed under.
    Cdi,
}

impl ResourceHint {
    /// Whether `resource` (a provider's resource name) is the one hinted
    /// at (the tests check the hints with it).
    #[cfg(test)]
    pub(crate) fn matches(&self, resource: &str) -> bool {
        match self {
            ResourceHint::NvidiaGpu => resource.starts_with("nvidia.com/"),
            ResourceHint::Cdi => true,
            ResourceHint::PciDevice { env_name } => {
                let mangled: String = resource
                    .chars()
                    .map(|c| match c {
                        '.' | '/' => '_',
                        c => c.to_ascii_uppercase(),
                    })
                    .collect();
                &mangled == env_name
            }
        }
    }
}

/// One device of [`AssignedDevices`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceId {
    /// A GPU or MIG device UUID (`GPU-…`, `MIG-…`).
    Uuid(String),
    /// A GPU index.
    Index(u32),
    /// A PCI address, lower-case with its domain (`0000:3b:02.1`).
    PciAddress(String),
}

/// The devices named by the container's environment (`KEY=VALUE`
/// entries, as `process.env` holds them).
pub(crate) fn assigned_devices(env: &[String]) -> Result<Vec<AssignedDevices>, MappingError> {
    let mut out = Vec::new();
    for entry in env {
        let Some((key, value)) = entry.split_once('=') else {
            continue;
        };
        if key == "NVIDIA_VISIBLE_DEVICES" {
            let ids = nvidia_ids(key, value)?;
            if !ids.is_empty() {
                out.push(AssignedDevices {
                    variable: key.to_owned(),
                    resource: ResourceHint::NvidiaGpu,
                    ids,
                    nodes: Vec::new(),
                });
            }
        } else if let Some(name) = key.strip_prefix("PCIDEVICE_") {
            if name.is_empty() || name.ends_with("_INFO") {
                continue;
            }
            let ids = value
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(|a| {
                    pci_address(a).map(DeviceId::PciAddress).ok_or_else(|| {
                        MappingError::Environment {
                            variable: key.to_owned(),
                            value: value.to_owned(),
                            problem: format!(
                                "{a:?} is not a PCI address (domain:bus:device.function, e.g. 0000:3b:02.1)"
                            ),
                        }
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if !ids.is_empty() {
                out.push(AssignedDevices {
                    variable: key.to_owned(),
                    resource: ResourceHint::PciDevice {
                        env_name: name.to_owned(),
                    },
                    ids,
                    nodes: Vec::new(),
                });
            }
        }
    }
    Ok(out)
}

/// The devices a kubelet device plugin gave a container, as the kubelet's
/// PodResources API lists them (`resource_name`, `device_ids`): NVIDIA's
/// (`nvidia.com/…`) by UUID or index, any other resource's by PCI address
/// (the SR-IOV device plugin's ids), as the container's environment would
/// name them. Ids neither form can be are left out, each with a note
/// (topomgr cannot tell where such a device is).
pub fn kubelet_devices(resource: &str, ids: &[String]) -> (Option<AssignedDevices>, Vec<String>) {
    let mut notes = Vec::new();
    let nvidia = resource.starts_with("nvidia.com/");
    let known: Vec<DeviceId> = ids
        .iter()
        .filter_map(|id| {
            let got = if nvidia {
                nvidia_ids(resource, id).ok().and_then(|mut v| v.pop())
            } else {
                pci_address(id).map(DeviceId::PciAddress)
            };
            if got.is_none() {
                notes.push(format!(
                    "device {id:?} of resource {resource} is {}: it is not aligned with",
                    if nvidia {
                        "neither a GPU UUID (GPU-…, MIG-…) nor an index"
                    } else {
                        "not a PCI address"
                    }
                ));
            }
            got
        })
        .collect();
    if known.is_empty() {
        return (None, notes);
    }
    let resource_hint = if nvidia {
        ResourceHint::NvidiaGpu
    } else {
        ResourceHint::PciDevice {
            env_name: resource
                .chars()
                .map(|c| match c {
                    '.' | '/' => '_',
                    c => c.to_ascii_uppercase(),
                })
                .collect(),
        }
    };
    let devices = AssignedDevices {
        variable: format!("the kubelet's {resource}"),
        resource: resource_hint,
        ids: known,
        nodes: Vec::new(),
    };
    (Some(devices), notes)
}

fn nvidia_ids(key: &str, value: &str) -> Result<Vec<DeviceId>, MappingError> {
    if matches!(value.trim(), "" | "all" | "none" | "void") {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(str::trim)
        .map(|item| {
            if item.starts_with("GPU-") || item.starts_with("MIG-") {
                Ok(DeviceId::Uuid(item.to_owned()))
            } else if let Ok(i) = item.parse::<u32>() {
                Ok(DeviceId::Index(i))
            } else {
                Err(MappingError::Environment {
                    variable: key.to_owned(),
                    value: value.to_owned(),
                    problem: format!("{item:?} is neither a GPU UUID (GPU-…, MIG-…) nor an index"),
                })
            }
        })
        .collect()
}

/// `dddd:bb:dd.f` or `bb:dd.f` (domain 0000), hex digits; lower-cased.
pub(crate) fn pci_address(a: &str) -> Option<String> {
    let a = a.to_ascii_lowercase();
    let full = if a.matches(':').count() == 1 {
        format!("0000:{a}")
    } else {
        a
    };
    let (rest, function) = full.rsplit_once('.')?;
    let parts: Vec<&str> = rest.split(':').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    let ok = matches!(parts.as_slice(), [d, b, s] if hex(d, 4) && hex(b, 2) && hex(s, 2))
        && function.len() == 1
        && function.chars().all(|c| ('0'..='7').contains(&c));
    ok.then_some(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|e| e.to_string()).collect()
    }

    /// The kubelet's PodResources ids name the same devices the
    /// environment would: GPUs by UUID or index, SR-IOV VFs by PCI
    /// address under the resource's `PCIDEVICE_` name.
    #[test]
    fn devices_of_the_kubelets_device_plugins() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (gpus, notes) = kubelet_devices("nvidia.com/gpu", &ids(&["GPU-1a", "2", "weird"]));
        let gpus = gpus.unwrap();
        assert_eq!(gpus.resource, ResourceHint::NvidiaGpu);
        assert_eq!(
            gpus.ids,
            [DeviceId::Uuid("GPU-1a".into()), DeviceId::Index(2)]
        );
        assert_eq!(gpus.variable, "the kubelet's nvidia.com/gpu");
        assert_eq!(
            notes,
            ["device \"weird\" of resource nvidia.com/gpu is neither a GPU UUID (GPU-…, MIG-…) nor an index: it is not aligned with"]
        );
        let (vfs, notes) =
            kubelet_devices("intel.com/intel_sriov_netdevice", &ids(&["0000:3B:02.1"]));
        let vfs = vfs.unwrap();
        assert_eq!(
            vfs.resource,
            ResourceHint::PciDevice {
                env_name: "INTEL_COM_INTEL_SRIOV_NETDEVICE".into()
            }
        );
        assert_eq!(vfs.ids, [DeviceId::PciAddress("0000:3b:02.1".into())]);
        assert!(notes.is_empty());
        let (none, notes) = kubelet_devices("example.com/dongle", &ids(&["dongle-7"]));
        assert!(none.is_none());
        assert_eq!(
            notes,
            ["device \"dongle-7\" of resource example.com/dongle is not a PCI address: it is not aligned with"]
        );
    }

    #[test]
    fn gpus_and_pci_devices_from_the_environment() {
        let got = assigned_devices(&env(&[
            "PATH=/bin",
            "NVIDIA_VISIBLE_DEVICES=GPU-8a5e4c1e-1234-5678-9abc-def012345678,MIG-1f2e,3",
            "PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE=0000:3B:02.1, 3b:02.2",
            "PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE_INFO={\"0000:3b:02.1\":{}}",
            "NOEQUALS",
        ]))
        .unwrap();
        assert_eq!(
            got,
            [
                AssignedDevices {
                    variable: "NVIDIA_VISIBLE_DEVICES".into(),
                    resource: ResourceHint::NvidiaGpu,
                    ids: vec![
                        DeviceId::Uuid("GPU-8a5e4c1e-1234-5678-9abc-def012345678".into()),
                        DeviceId::Uuid("MIG-1f2e".into()),
                        DeviceId::Index(3),
                    ],
                    nodes: Vec::new(),
                },
                AssignedDevices {
                    variable: "PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE".into(),
                    resource: ResourceHint::PciDevice {
                        env_name: "INTEL_COM_INTEL_SRIOV_NETDEVICE".into()
                    },
                    ids: vec![
                        DeviceId::PciAddress("0000:3b:02.1".into()),
                        DeviceId::PciAddress("0000:3b:02.2".into()),
                    ],
                    nodes: Vec::new(),
                },
            ]
        );
        assert!(got[1].resource.matches("intel.com/intel_sriov_netdevice"));
        assert!(!got[1].resource.matches("intel.com/intel_sriov_dpdk"));
        assert!(got[0].resource.matches("nvidia.com/gpu"));
        for none in ["all", "none", "void", ""] {
            assert!(
                assigned_devices(&env(&[&format!("NVIDIA_VISIBLE_DEVICES={none}")]))
                    .unwrap()
                    .is_empty()
            );
        }
    }

    #[test]
    fn malformed_device_variables_are_named() {
        let err = assigned_devices(&env(&["NVIDIA_VISIBLE_DEVICES=0,gpu1"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable NVIDIA_VISIBLE_DEVICES=\"0,gpu1\": \"gpu1\" is neither a GPU UUID (GPU-…, MIG-…) nor an index"
        );
        let err = assigned_devices(&env(&["PCIDEVICE_X_COM_Y=0000:3b:02"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable PCIDEVICE_X_COM_Y=\"0000:3b:02\": \"0000:3b:02\" is not a PCI address (domain:bus:device.function, e.g. 0000:3b:02.1)"
        );
        for bad in ["3b:02.8", "zz:02.1", "0000:3b:2.1", "00000:3b:02.1"] {
            assert_eq!(pci_address(bad), None, "{bad}");
        }
    }
}
