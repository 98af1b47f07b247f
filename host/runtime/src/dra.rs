//! A DRA claim's device that the kubelet names by driver, pool and device
//! only (its PodResources `Get` gives no CDI device for it: the driver's
//! NodePrepareResources answered none), matched to its PCI device through
//! the standard `resource.kubernetes.io/pciBusID` attribute its driver
//! published in the pool's ResourceSlice (one of KEP-4381's standard
//! attributes, kubernetes/enhancements#5669; drivers set it with
//! `GetPCIBusIDAttribute` of `k8s.io/dynamic-resource-allocation/deviceattribute`,
//! kubernetes/kubernetes#134607). The ResourceSlice is read by the caller
//! (`topomgr-kube`); this module only maps.

use std::collections::BTreeMap;

use crate::devices::pci_address;
use crate::{AssignedDevices, DeviceId, ResourceHint};

/// The standard device attribute holding a device's PCI address
/// (`<domain>:<bus>:<device>.<function>`).
pub const PCI_BUS_ID_ATTRIBUTE: &str = "resource.kubernetes.io/pciBusID";

/// A claim's device as the kubelet's PodResources names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DraDevice {
    /// The DRA driver.
    pub driver: String,
    /// Its pool.
    pub pool: String,
    /// The device in the pool.
    pub device: String,
}

impl std::fmt::Display for DraDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// The PCI device of `device`, from `published`: the string attributes of
/// the device of that name in its pool's ResourceSlices (`None`: the pool
/// publishes no such device). Counts as a CDI device does (every provider
/// is asked about the PCI address; one no provider lists is aligned with
/// by its NUMA node); a device without a usable attribute is a note naming
/// what is missing.
pub fn dra_device(
    device: &DraDevice,
    published: Option<&BTreeMap<String, String>>,
) -> Result<AssignedDevices, String> {
    let Some(attributes) = published else {
        return Err(format!(
            "DRA device {device} (the kubelet's claim, no CDI device) is in no ResourceSlice of driver {} pool {}: not aligned with",
            device.driver, device.pool
        ));
    };
    let Some(value) = attributes.get(PCI_BUS_ID_ATTRIBUTE) else {
        return Err(format!(
            "DRA device {device} (the kubelet's claim, no CDI device) has no {PCI_BUS_ID_ATTRIBUTE} attribute in its ResourceSlice: not aligned with"
        ));
    };
    let Some(address) = pci_address(value) else {
        return Err(format!(
            "DRA device {device}: its {PCI_BUS_ID_ATTRIBUTE} attribute {value:?} is not a PCI address (dddd:bb:dd.f): not aligned with"
        ));
    };
    Ok(AssignedDevices {
        variable: format!("DRA device {device}"),
        resource: ResourceHint::Cdi,
        ids: vec![DeviceId::PciAddress(address)],
        nodes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic() -> DraDevice {
        DraDevice {
            driver: "nic.example.org".into(),
            pool: "node-a".into(),
            device: "nic-1".into(),
        }
    }

    fn attributes(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_device_maps_to_the_pci_address_its_slice_publishes() {
        let got = dra_device(
            &nic(),
            Some(&attributes(&[
                ("model", "cx7"),
                (PCI_BUS_ID_ATTRIBUTE, "0000:AF:00.0"),
            ])),
        )
        .unwrap();
        assert_eq!(
            got,
            AssignedDevices {
                variable: "DRA device nic.example.org/node-a/nic-1".into(),
                resource: ResourceHint::Cdi,
                ids: vec![DeviceId::PciAddress("0000:af:00.0".into())],
                nodes: vec![],
            }
        );
    }

    #[test]
    fn a_device_without_a_usable_attribute_is_a_note_naming_it() {
        let absent = dra_device(&nic(), None).unwrap_err();
        assert_eq!(
            absent,
            "DRA device nic.example.org/node-a/nic-1 (the kubelet's claim, no CDI device) is in no ResourceSlice of driver nic.example.org pool node-a: not aligned with"
        );
        let bare = dra_device(&nic(), Some(&attributes(&[("model", "cx7")]))).unwrap_err();
        assert!(
            bare.contains("has no resource.kubernetes.io/pciBusID attribute"),
            "{bare}"
        );
        let bad = dra_device(
            &nic(),
            Some(&attributes(&[(PCI_BUS_ID_ATTRIBUTE, "af:00")])),
        )
        .unwrap_err();
        assert!(
            bad.contains("attribute \"af:00\" is not a PCI address"),
            "{bad}"
        );
    }
}
