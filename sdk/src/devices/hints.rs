//! Topology hints for devices, exactly as the kubelet Device Manager
//! generates them (`GetTopologyHints`, `GetPodTopologyHints`,
//! `generateDeviceTopologyHints` of `pkg/kubelet/cm/devicemanager/topology_hints.go`).
//!
//! - Only resources the container (pod) has in its *limits* count, as for
//!   the kubelet (extended resources have requests equal to limits); a
//!   container asking for none of this provider's resources gets an empty
//!   map.
//! - A resource none of whose devices names a NUMA node has no preference.
//! - A container that already holds devices of the resource gets hints from
//!   what it holds, or an empty list when it holds a different number than
//!   it asks for.
//! - Otherwise the available devices (healthy, held by nobody) plus the
//!   pod's reusable ones must reach the request, else the list is empty;
//!   a mask is a hint when every reusable device with a node has one in it
//!   and the reusable devices plus the available ones with a node in it
//!   reach the request. Devices without a node never count toward a mask.
//! - A hint is preferred when its width is the narrowest width whose
//!   devices (all of them, held or not, healthy or not) could reach the
//!   request; the machine's node count when none can.
//!
//! Up to 8 NUMA nodes the list is the kubelet's explicit one; above, the
//! same hints in the compact form (see [`crate::hintgen`]).

use std::collections::{BTreeMap, BTreeSet};

use super::device::{normalize_pci_address, PCI_IDENTITY, SERIAL_IDENTITY};
use super::manager::Pool;
use super::DeviceManager;
use crate::hintgen::{
    min_width_additive, minimal_masks, upward_closed_hints, EXPLICIT_HINT_MAX_NODES,
};
use crate::{
    for_each_mask_in_kubelet_order, AssignedDeviceHints, AssignedDevicesRequest, AssignedResource,
    ContainerView, DeviceRef, HintSet, NumaMask, PodView, ProviderError, ProviderHints,
};

impl DeviceManager {
    /// Container-scope hints for `container` of `pod`.
    pub fn topology_hints(
        &self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        let mut out = BTreeMap::new();
        for (resource, &requested) in &container.limits {
            let Some(pool) = self.pools.get(resource) else {
                continue;
            };
            if !pool.aligned {
                out.insert(resource.clone(), None);
                continue;
            }
            let key = (pod.uid.clone(), container.name.clone());
            let held = self
                .assignments
                .get(&key)
                .and_then(|m| m.get(resource))
                .cloned()
                .unwrap_or_default();
            let set = if !held.is_empty() {
                if held.len() as u64 != requested {
                    tracing::info!(resource = %resource, pod = %pod.uid, container = %container.name,
                        requested, held = held.len(),
                        "container holds a different number of devices than it requests: no hints");
                    HintSet::unsatisfiable()
                } else {
                    self.hint_set(resource, pool, &held, &[], requested)?
                }
            } else {
                let available = pool.available();
                let reusable: Vec<usize> = self
                    .reuse
                    .as_ref()
                    .filter(|r| r.pod == pod.uid)
                    .and_then(|r| r.devices.get(resource))
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default();
                let union = available
                    .iter()
                    .chain(&reusable)
                    .collect::<std::collections::BTreeSet<_>>();
                if (union.len() as u64) < requested {
                    HintSet::unsatisfiable()
                } else {
                    self.hint_set(resource, pool, &available, &reusable, requested)?
                }
            };
            out.insert(resource.clone(), Some(set));
        }
        Ok(Some(out))
    }

    /// Pod-scope hints for `pod`: each resource at the pod's effective limit
    /// (the kubelet's `PodLimits`: the larger of the largest init container
    /// and the app containers plus sidecars).
    pub fn pod_topology_hints(&self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        let mut out = BTreeMap::new();
        for (resource, pool) in &self.pools {
            let asked = pod
                .init_containers
                .iter()
                .chain(&pod.containers)
                .any(|c| c.limits.contains_key(resource));
            if !asked {
                continue;
            }
            let requested = pod.effective_limit(resource);
            if !pool.aligned {
                out.insert(resource.clone(), None);
                continue;
            }
            let held = self.pod_held(&pod.uid, resource);
            let set = if !held.is_empty() {
                if held.len() as u64 != requested {
                    HintSet::unsatisfiable()
                } else {
                    self.hint_set(resource, pool, &held, &[], requested)?
                }
            } else {
                let available = pool.available();
                if (available.len() as u64) < requested {
                    HintSet::unsatisfiable()
                } else {
                    self.hint_set(resource, pool, &available, &[], requested)?
                }
            };
            out.insert(resource.clone(), Some(set));
        }
        Ok(Some(out))
    }

    /// Every device of `resource` any container of `pod_uid` holds, in order.
    fn pod_held(&self, pod_uid: &str, resource: &str) -> Vec<usize> {
        let mut all: Vec<usize> = self
            .assignments
            .range((pod_uid.to_owned(), String::new())..)
            .take_while(|((uid, _), _)| uid == pod_uid)
            .filter_map(|(_, m)| m.get(resource))
            .flatten()
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The kubelet's `generateDeviceTopologyHints` over the machine's nodes.
    fn hint_set(
        &self,
        resource: &str,
        pool: &Pool,
        available: &[usize],
        reusable: &[usize],
        request: u64,
    ) -> Result<HintSet, ProviderError> {
        let masks_of = |positions: &[usize]| -> Vec<NumaMask> {
            positions
                .iter()
                .map(|&i| pool.devices[i].numa)
                .filter(|m| !m.is_empty())
                .collect()
        };
        let all: Vec<NumaMask> = pool
            .devices
            .iter()
            .map(|d| d.numa)
            .filter(|m| !m.is_empty())
            .collect();
        let reusable = masks_of(reusable);
        let available = masks_of(available);
        let count = |masks: &[NumaMask], m: NumaMask| -> u64 {
            masks.iter().filter(|d| d.intersects(m)).count() as u64
        };
        let too_many = |e: crate::hintgen::TooManyCombinations| {
            ProviderError::admission(format!("resource {resource}: {e}"))
        };
        let width = self.min_affinity_size(&all, request).map_err(too_many)?;
        upward_closed_hints(&self.nodes, width, |m| {
            reusable.iter().all(|d| d.intersects(m))
                && reusable.len() as u64 + count(&available, m) >= request
        })
        .map_err(too_many)
    }

    /// The kubelet's `minAffinitySize`: the narrowest width of a mask whose
    /// devices (`all`) reach `request`; the node count when none does.
    fn min_affinity_size(
        &self,
        all: &[NumaMask],
        request: u64,
    ) -> Result<u32, crate::hintgen::TooManyCombinations> {
        let n = self.nodes.len() as u32;
        let reach = |m: NumaMask| all.iter().filter(|d| d.intersects(m)).count() as u64 >= request;
        if self.nodes.len() <= EXPLICIT_HINT_MAX_NODES {
            let mut best = n;
            for_each_mask_in_kubelet_order(&self.nodes, |m| {
                if reach(m) && m.len() < best {
                    best = m.len();
                }
            });
            return Ok(best);
        }
        if all.iter().all(|d| d.len() == 1) {
            // Single-node devices add up over nodes.
            let per_node = self
                .nodes
                .iter()
                .map(|&id| all.iter().filter(|d| d.contains(id)).count() as u64);
            return Ok(min_width_additive(per_node, request));
        }
        let minimal = minimal_masks(&self.nodes, reach)?;
        Ok(minimal.iter().map(|m| m.len().max(1)).min().unwrap_or(n))
    }
}

/// The attribute a device provider sets to a device's index where devices
/// are also named by index (the GPU provider: NVML's index, which
/// `NVIDIA_VISIBLE_DEVICES=0,1` names); a [`DeviceRef::Index`] matches it.
pub const INDEX_ATTRIBUTE: &str = "index";

/// The attribute a device provider sets to the device nodes of a device
/// that sysfs does not link to its PCI device (NVIDIA's `/dev/nvidiaN`):
/// `c 195:0`, several separated by `,`; a node of
/// [`AssignedDevices::nodes`](crate::AssignedDevices::nodes) with that type
/// and number matches it.
pub const DEVICE_NODE_ATTRIBUTE: &str = "device_node";

impl DeviceManager {
    /// The named call [`Provider::assigned_device_hints`](crate::Provider::assigned_device_hints):
    /// for each resource that a group of `request` may belong to
    /// ([`ResourceMatch`](crate::ResourceMatch)), the devices its refs name
    /// and the hints they fix.
    ///
    /// A ref names a device of the resource when it is a UUID equal to the
    /// device's id or to its serial identity
    /// ([`Device::with_serial`](super::Device::with_serial)), an index equal
    /// to its [`INDEX_ATTRIBUTE`], or a PCI address equal (in the sysfs
    /// form) to its PCI identity
    /// ([`Device::with_pci_address`](super::Device::with_pci_address)) or
    /// its id; a device node names it when the device's
    /// [`DEVICE_NODE_ATTRIBUTE`] lists the node's type and number (matched:
    /// the node's path). The hints are those of a container that holds exactly the
    /// named devices (as the kubelet's `GetTopologyHints` gives a container
    /// its allocated devices' hints): every mask that touches each of them,
    /// preferred at the narrowest width that devices of the resource could
    /// fill; `None` when none of them has a NUMA node. Refs this provider
    /// does not know are left out.
    pub fn assigned_device_hints(
        &self,
        request: &AssignedDevicesRequest,
    ) -> Result<AssignedDeviceHints, ProviderError> {
        let mut found: BTreeMap<&str, (BTreeSet<usize>, Vec<String>)> = BTreeMap::new();
        for group in &request.devices {
            for (resource, pool) in &self.pools {
                if !group.resource.matches(resource) {
                    continue;
                }
                let by_ref = group
                    .ids
                    .iter()
                    .map(|r| (pool.devices.iter().position(|d| names(r, d)), r.to_string()));
                let by_node = group.nodes.iter().map(|n| {
                    let number = n.number();
                    let has = |d: &super::Device| {
                        d.attribute(DEVICE_NODE_ATTRIBUTE)
                            .is_some_and(|a| a.split(',').any(|x| x.trim() == number))
                    };
                    (pool.devices.iter().position(has), n.path.clone())
                });
                for (i, text) in by_ref.chain(by_node) {
                    let Some(i) = i else {
                        continue;
                    };
                    let entry = found.entry(resource).or_default();
                    entry.0.insert(i);
                    if !entry.1.contains(&text) {
                        entry.1.push(text);
                    }
                }
            }
        }
        let mut out = AssignedDeviceHints::none();
        for (resource, (positions, matched)) in found {
            let pool = &self.pools[resource];
            let held: Vec<usize> = positions.into_iter().collect();
            let hints = if held.iter().any(|&i| pool.devices[i].has_topology()) {
                Some(self.hint_set(resource, pool, &held, &[], held.len() as u64)?)
            } else {
                None
            };
            out = out.with(
                resource,
                AssignedResource::new(pool.ids(&held), matched, hints),
            );
        }
        Ok(out)
    }
}

/// Whether `r` names device `d` (see [`DeviceManager::assigned_device_hints`]).
fn names(r: &DeviceRef, d: &super::Device) -> bool {
    match r {
        DeviceRef::Uuid(u) => {
            d.id == *u
                || d.identity
                    .iter()
                    .any(|i| i.strip_prefix(SERIAL_IDENTITY) == Some(u.as_str()))
        }
        DeviceRef::Index(n) => d.attribute(INDEX_ATTRIBUTE) == Some(n.to_string().as_str()),
        DeviceRef::PciAddress(a) => {
            let a = normalize_pci_address(a).unwrap_or_else(|| a.clone());
            d.id == a
                || d.identity
                    .iter()
                    .any(|i| i.strip_prefix(PCI_IDENTITY) == Some(a.as_str()))
        }
    }
}
