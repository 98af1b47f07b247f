//! The kubelet's PodResources API on topomgr's own socket (`[podresources]
//! socket`): the daemon's state as `v1.PodResourcesLister` answers
//! ([`topomgr_podresources`]), read from the view the state thread
//! publishes after each commit, so that a read never waits for an
//! admission and an admission never waits for a read.
//!
//! What is listed follows the kubelet's `server_v1.go` and its managers:
//!
//! - **CPUs**: a container's exclusive CPUs only (the CPU manager's
//!   `GetExclusiveCPUs`); a shared-pool container lists none.
//! - **Memory**: for a container whose memory is pinned (its allocation
//!   names memory nodes), one block per memory type it requests (`memory`,
//!   `hugepages-<size>`) with the requested size and the pinned nodes, as
//!   the memory manager's blocks are.
//! - **Devices**: one entry per device and NUMA node it is on (none for a
//!   device without a node), as `containerDevicesFromResourceDeviceInstances`
//!   writes them; the nodes are those the provider's inventory gives the
//!   device ([`topomgr_sdk::ResourceInventory::units`]).
//! - **Allocatable**: the units the providers name (CPUs without the
//!   reserved ones, healthy devices) and, per NUMA node, the allocatable
//!   bytes of `memory` and each `hugepages-<size>`, read from the
//!   inventories at start and after each reload.
//!
//! Pods are grouped by namespace and name: the NRI face and the OCI hook
//! admit each container as a one-container pod named as its Kubernetes pod,
//! and the kubelet's API lists one entry per pod. Containers are listed
//! restartable init containers first, then app containers; the pod-level
//! `cpu_ids` and `memory` stay empty (the kubelet fills them only for a
//! pod-level exclusive allocation under the alpha gate
//! `PodLevelResourceManagers`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use topomgr_engine::admission::AdmitResult;
use topomgr_podresources::v1;
use topomgr_sdk::{Inventory, InventoryUnit, NumaNodeId};

/// What `GetAllocatableResources` answers, and the NUMA nodes of each
/// device, from the providers' inventories.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Allocatable {
    /// Resource name -> its units (CPUs, devices).
    units: BTreeMap<String, Vec<InventoryUnit>>,
    /// (memory type, NUMA node) -> allocatable bytes.
    memory: BTreeMap<(String, NumaNodeId), u64>,
}

/// `memory` or `hugepages-<size>`: the types of the memory manager's blocks.
fn is_memory(resource: &str) -> bool {
    resource == "memory" || resource.starts_with("hugepages-")
}

impl Allocatable {
    /// From every provider's inventory.
    pub(crate) fn of(inventories: &[Inventory]) -> Allocatable {
        let mut out = Allocatable::default();
        for inv in inventories {
            for (name, r) in &inv.resources {
                if is_memory(name) {
                    for zone in &r.zones {
                        if let Some(numa) = zone.numa {
                            *out.memory.entry((name.clone(), numa)).or_default() +=
                                zone.amounts.allocatable;
                        }
                    }
                } else if !r.units.is_empty() {
                    out.units
                        .entry(name.clone())
                        .or_default()
                        .extend(r.units.iter().cloned());
                }
            }
        }
        out
    }

    /// The NUMA nodes of device `id` of `resource` (empty: none known).
    fn nodes_of(&self, resource: &str, id: &str) -> &[NumaNodeId] {
        self.units
            .get(resource)
            .and_then(|units| units.iter().find(|u| u.id == id))
            .map_or(&[], |u| u.numa.as_slice())
    }

    /// Devices of `resource` as the kubelet lists them: one entry per
    /// device and node, an entry without topology for a device on none.
    fn devices<'a>(
        &self,
        resource: &str,
        ids: impl IntoIterator<Item = &'a String>,
    ) -> Vec<v1::ContainerDevices> {
        let mut out = Vec::new();
        for id in ids {
            let nodes = self.nodes_of(resource, id);
            let entry = |topology| v1::ContainerDevices {
                resource_name: resource.to_owned(),
                device_ids: vec![id.clone()],
                topology,
            };
            if nodes.is_empty() {
                out.push(entry(None));
            }
            for n in nodes {
                out.push(entry(v1::topology([i64::from(n.get())])));
            }
        }
        out
    }

    /// The answer of `GetAllocatableResources`.
    pub(crate) fn response(&self) -> v1::AllocatableResourcesResponse {
        let mut cpu_ids: Vec<i64> = self
            .units
            .get("cpu")
            .into_iter()
            .flatten()
            .filter_map(|u| u.id.parse::<i64>().ok())
            .collect();
        cpu_ids.sort_unstable();
        cpu_ids.dedup();
        v1::AllocatableResourcesResponse {
            devices: self
                .units
                .iter()
                .filter(|(name, _)| name.as_str() != "cpu")
                .flat_map(|(name, units)| self.devices(name, units.iter().map(|u| &u.id)))
                .collect(),
            cpu_ids,
            memory: self
                .memory
                .iter()
                .map(|((kind, numa), size)| v1::ContainerMemory {
                    memory_type: kind.clone(),
                    size: *size,
                    topology: v1::topology([i64::from(numa.get())]),
                })
                .collect(),
        }
    }
}

/// One container of `r` as the kubelet lists it.
fn container(r: &AdmitResult, name: &str, allocatable: &Allocatable) -> v1::ContainerResources {
    let mut out = v1::ContainerResources {
        name: name.to_owned(),
        ..Default::default()
    };
    let Some(c) = r.containers.iter().find(|c| c.name == name) else {
        return out;
    };
    let a = &c.allocation;
    if a.exclusive {
        out.cpu_ids = a.cpus.iter().map(i64::from).collect();
    }
    out.devices = a
        .devices
        .iter()
        .flat_map(|(resource, ids)| allocatable.devices(resource, ids))
        .collect();
    if !a.mems.is_empty() {
        let view = r
            .pod
            .init_containers
            .iter()
            .chain(&r.pod.containers)
            .find(|v| v.name == name);
        if let Some(view) = view {
            out.memory = view
                .requests
                .iter()
                .filter(|(kind, size)| is_memory(kind) && **size > 0)
                .map(|(kind, size)| v1::ContainerMemory {
                    memory_type: kind.clone(),
                    size: *size,
                    topology: v1::topology(a.mems.iter().map(|n| i64::from(n.get()))),
                })
                .collect();
        }
    }
    out
}

/// The containers of `r` the kubelet lists: restartable init containers,
/// then app containers.
fn containers(r: &AdmitResult, allocatable: &Allocatable) -> Vec<v1::ContainerResources> {
    r.pod
        .init_containers
        .iter()
        .filter(|c| c.sidecar)
        .chain(&r.pod.containers)
        .map(|c| container(r, &c.name, allocatable))
        .collect()
}

/// Every pod of `admitted`, one entry per namespace and name (the
/// containers of its admissions in the order given: uid order from the
/// view).
pub(crate) fn pods<'a>(
    admitted: impl IntoIterator<Item = &'a AdmitResult>,
    allocatable: &Allocatable,
) -> Vec<v1::PodResources> {
    let mut by_name: BTreeMap<(&str, &str), v1::PodResources> = BTreeMap::new();
    for r in admitted {
        let entry = by_name
            .entry((r.pod.namespace.as_str(), r.pod.name.as_str()))
            .or_insert_with(|| v1::PodResources {
                name: r.pod.name.clone(),
                namespace: r.pod.namespace.clone(),
                ..Default::default()
            });
        entry.containers.extend(containers(r, allocatable));
    }
    by_name.into_values().collect()
}

/// The admissions of pod `name` in `namespace` among `admitted` (several
/// when its containers were admitted one by one).
pub(crate) fn admissions_of<'a>(
    admitted: impl IntoIterator<Item = &'a Arc<AdmitResult>>,
    namespace: &str,
    name: &str,
) -> Vec<Arc<AdmitResult>> {
    admitted
        .into_iter()
        .filter(|r| r.pod.namespace == namespace && r.pod.name == name)
        .cloned()
        .collect()
}

/// Why the PodResources socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The path is not usable.
    #[error("[podresources] socket {}: {problem}", path.display())]
    Unusable {
        /// The socket path.
        path: PathBuf,
        /// What is wrong (part of the message).
        problem: String,
    },
}

/// Mode of the socket's directory: the kubelet's `pod-resources` directory
/// (`os.MkdirAll(..., 0750)` in `kubelet.go`).
const DIR_MODE: u32 = 0o750;
/// Mode of the socket: root only.
const SOCKET_MODE: u32 = 0o600;

/// Bind the socket at `path`: its directory created (mode 0750) when
/// missing, a stale socket removed, a live one or a file that is not a
/// socket refused; the socket is left to root alone (mode 0600).
pub(crate) fn bind(path: &Path) -> Result<tokio::net::UnixListener, SocketError> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let unusable = |problem: String| SocketError::Unusable {
        path: path.to_owned(),
        problem,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)
                .map_err(|e| unusable(format!("cannot create its directory: {e}")))?;
        }
    }
    super::access::prepare_socket_path(path).map_err(|e| match e {
        super::access::SocketError::InUse { .. } => unusable(
            "something already serves this socket (another topomgr, or the kubelet); choose another path".to_owned(),
        ),
        super::access::SocketError::NotASocket { .. } => unusable(
            "exists and is not a socket; refusing to remove it (move it away or choose another path)".to_owned(),
        ),
        super::access::SocketError::Io { op, cause, .. } => unusable(format!("cannot {op} it: {cause}")),
    })?;
    let listener = tokio::net::UnixListener::bind(path)
        .map_err(|e| unusable(format!("cannot listen on it: {e}")))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(|e| unusable(format!("cannot set its mode: {e}")))?;
    Ok(listener)
}

#[cfg(test)]
mod tests;
