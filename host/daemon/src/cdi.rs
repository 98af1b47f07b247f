//! A container's CDI devices, found the same way for every face: the NRI
//! face (the container NRI describes, its DRA claims) and the HTTP API's
//! owned admissions (the devices the OCI hook read from the bundle,
//! [`topomgr_node::api::ContainerDevices`]). Both hand the container's
//! `cdi.k8s.io/*` annotations, device nodes and claimed names to
//! [`Resolver::resolve`] ([`topomgr_runtime::cdi_devices`] over the spec
//! files of `[cdi] spec_dirs` and sysfs), and the found devices to the
//! state thread as the providers' named call asks about them
//! ([`assigned`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use topomgr_runtime::cdi::CdiCache;
use topomgr_sdk::{AssignedDevices, AssignedDevicesRequest, DeviceNode, DeviceRef, ResourceMatch};

/// The CDI spec directories (none: CDI devices are not looked for) and the
/// sysfs root device nodes are mapped to PCI devices under (config `[cdi]
/// spec_dirs`, `sysfs_root`). One per daemon: its specs are read again
/// only when a file changed ([`CdiCache`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Resolver {
    specs: Arc<CdiCache>,
    sysfs_root: PathBuf,
}

impl Resolver {
    /// CDI devices of the specs of `spec_dirs`, their nodes mapped to PCI
    /// devices under `sysfs_root`.
    pub(crate) fn new(spec_dirs: Vec<PathBuf>, sysfs_root: PathBuf) -> Resolver {
        Resolver {
            specs: Arc::new(CdiCache::new(spec_dirs)),
            sysfs_root,
        }
    }

    /// Whether CDI devices are not looked for (no spec directory).
    pub(crate) fn is_off(&self) -> bool {
        self.specs.is_off()
    }

    /// The CDI devices of a container (`who` names it in logs) with
    /// `annotations`, device nodes `nodes` and the CDI names `claimed` of
    /// its DRA claims. What cannot be used (a spec that does not parse, a
    /// name no spec defines) is logged; each device found too.
    pub(crate) fn resolve(
        &self,
        who: &str,
        annotations: &BTreeMap<String, String>,
        nodes: &[DeviceNode],
        claimed: &[String],
    ) -> Vec<topomgr_runtime::AssignedDevices> {
        if self.is_off() {
            return Vec::new();
        }
        let names_cdi = annotations
            .keys()
            .any(|k| k.starts_with(topomgr_runtime::cdi::ANNOTATION_PREFIX));
        if nodes.is_empty() && !names_cdi && claimed.is_empty() {
            return Vec::new();
        }
        let (specs, problems) = self.specs.specs();
        for p in problems {
            tracing::warn!(container = %who, "{p}");
        }
        let (devices, notes) =
            topomgr_runtime::cdi_devices(annotations, nodes, claimed, &specs, &self.sysfs_root);
        for n in notes {
            tracing::warn!(container = %who, "{n}");
        }
        for d in &devices {
            tracing::info!(container = %who, device = %d.variable, pci = ?d.ids, nodes = d.nodes.len(), "the container was given a CDI device");
        }
        devices
    }
}

/// The devices a container was given (its environment's, its CDI
/// devices), as the named call asks providers about them.
pub(crate) fn assigned(devices: &[topomgr_runtime::AssignedDevices]) -> AssignedDevicesRequest {
    AssignedDevicesRequest::new(
        devices
            .iter()
            .map(|d| {
                let resource = match &d.resource {
                    topomgr_runtime::ResourceHint::NvidiaGpu => {
                        ResourceMatch::Prefix("nvidia.com/".to_owned())
                    }
                    topomgr_runtime::ResourceHint::PciDevice { env_name } => {
                        ResourceMatch::EnvName(env_name.clone())
                    }
                    // Every resource: whichever provider lists the device
                    // (the engine's fallback for CDI devices no provider
                    // lists keys on this).
                    topomgr_runtime::ResourceHint::Cdi => ResourceMatch::Prefix(String::new()),
                };
                let ids = d
                    .ids
                    .iter()
                    .map(|id| match id {
                        topomgr_runtime::DeviceId::Uuid(u) => DeviceRef::Uuid(u.clone()),
                        topomgr_runtime::DeviceId::Index(i) => DeviceRef::Index(*i),
                        topomgr_runtime::DeviceId::PciAddress(a) => {
                            DeviceRef::PciAddress(a.clone())
                        }
                    })
                    .collect();
                AssignedDevices::new(d.variable.clone(), resource, ids).with_nodes(d.nodes.clone())
            })
            .collect(),
    )
}
