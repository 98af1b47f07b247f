//! [`DeviceManager`]: the devices of every resource, which containers hold
//! them, release, checkpoint/restore and the per-NUMA inventory.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::device::{normalize_pci_address, PCI_IDENTITY, SERIAL_IDENTITY};
use super::saved::SavedDevice;
use super::{Device, DeviceHooks, Devices};
use crate::{
    Amounts, Inventory, InventoryUnit, Machine, NumaNodeId, PreferredAllocationRequest,
    ProviderError, ResourceInventory, Zone,
};

use crate::INVALID_REQUEST_REASON as INVALID_REQUEST;

/// The devices of one resource.
#[derive(Debug, Clone)]
pub(super) struct Pool {
    /// In the provider's order.
    pub(super) devices: Vec<Device>,
    /// Device id -> position.
    pub(super) index: HashMap<String, usize>,
    /// How many container assignments hold each device (a device an init
    /// container held may be reused by a later container of its pod).
    pub(super) holders: Vec<u32>,
    /// The kubelet's `deviceHasTopologyAlignment`: some device names a node.
    pub(super) aligned: bool,
    /// Restored devices of this resource, known by an identity, that no
    /// device lists now while some devices are listed without an identity:
    /// any of those may be one of them, so none of those is handed out
    /// (see [`DeviceManager::restore`]).
    pub(super) unmatched: usize,
}

impl Pool {
    /// Whether device `i` may be handed out: healthy, held by nobody, and
    /// not possibly a restored device that cannot be matched.
    pub(super) fn is_free(&self, i: usize) -> bool {
        self.devices[i].healthy
            && self.holders[i] == 0
            && !(self.unmatched > 0 && self.devices[i].identity.is_empty())
    }

    /// Healthy devices nobody holds, in order.
    pub(super) fn available(&self) -> Vec<usize> {
        (0..self.devices.len())
            .filter(|&i| self.is_free(i))
            .collect()
    }

    pub(super) fn healthy_count(&self) -> usize {
        self.devices.iter().filter(|d| d.healthy).count()
    }

    pub(super) fn ids(&self, positions: &[usize]) -> Vec<String> {
        positions
            .iter()
            .map(|&i| self.devices[i].id.clone())
            .collect()
    }
}

/// Devices an init container held that later containers of the same pod
/// may take again (the kubelet's `devicesToReuse`, for one pod at a time).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Reuse {
    pub(super) pod: String,
    pub(super) devices: BTreeMap<String, BTreeSet<usize>>,
}

/// A container's key in the assignment table.
pub(super) type Key = (String, String);

/// The kubelet Device Manager for one provider: hints, allocation, init
/// container reuse, release, checkpoint/restore and inventory over the
/// devices the provider registered.
///
/// Use it directly from a [`Provider`](crate::Provider) that manages more
/// than devices, or let [`DeviceProvider`](super::DeviceProvider) drive it
/// for a [`DevicePlugin`](super::DevicePlugin). Every call takes the
/// provider's [`DeviceHooks`] where the kubelet would call the device plugin.
#[derive(Debug, Clone)]
pub struct DeviceManager {
    /// The machine's NUMA nodes, ascending.
    pub(super) nodes: Vec<NumaNodeId>,
    pub(super) pools: BTreeMap<String, Pool>,
    /// (pod uid, container) -> resource -> device positions, in the order
    /// they were picked.
    pub(super) assignments: BTreeMap<Key, BTreeMap<String, Vec<usize>>>,
    /// Devices that restored assignments hold but that the provider no
    /// longer lists (by identity, nor by resource and id), under the
    /// resource the assignment named: kept (saved again, so that a device
    /// that comes back is its pod's) until their container is released.
    pub(super) vanished: BTreeMap<Key, BTreeMap<String, Vec<SavedDevice>>>,
    pub(super) reuse: Option<Reuse>,
}

fn config_error(message: String) -> ProviderError {
    ProviderError::config(message)
}

/// Refuses an empty identity or a `pci:` one that is not a PCI address.
fn check_identity(resource: &str, d: &Device, identity: &str) -> Result<(), ProviderError> {
    let value = identity
        .strip_prefix(PCI_IDENTITY)
        .or_else(|| identity.strip_prefix(SERIAL_IDENTITY))
        .unwrap_or(identity);
    if value.is_empty() {
        return Err(config_error(format!(
            "resource {resource}: device {:?} has an empty identity {identity:?}; give its PCI \
             address or serial, or none",
            d.id
        )));
    }
    if identity.starts_with(PCI_IDENTITY) && normalize_pci_address(value).as_deref() != Some(value)
    {
        return Err(config_error(format!(
            "resource {resource}: device {:?} has PCI address {value:?}, which is not one \
             (domain:bus:device.function, e.g. 0000:3b:00.0)",
            d.id
        )));
    }
    Ok(())
}

/// An identity for people: `PCI device 0000:07:00.0`, `serial X`.
fn describe_identity(identity: &str) -> String {
    if let Some(a) = identity.strip_prefix(PCI_IDENTITY) {
        format!("PCI device {a}")
    } else if let Some(s) = identity.strip_prefix(SERIAL_IDENTITY) {
        format!("serial {s}")
    } else {
        identity.to_owned()
    }
}

impl DeviceManager {
    /// The devices of `devices` on `machine`. Refuses (reason
    /// `"InvalidConfig"`, naming what and what to do) anything that would
    /// hand one device to two containers or cannot be placed:
    ///
    /// - an empty or repeated resource name;
    /// - an empty or repeated device id within a resource;
    /// - a device id with a comma or whitespace (ids are joined with commas
    ///   in environment variables such as `NVIDIA_VISIBLE_DEVICES`, where
    ///   `a,b` would name two other devices);
    /// - two devices, of any resources, with one identity (one PCI address,
    ///   one serial): one device listed twice;
    /// - an identity that is empty, or a `pci:` identity that is not a PCI
    ///   address;
    /// - a device on a NUMA node the machine does not have.
    pub fn new(machine: &Machine, devices: Devices) -> Result<Self, ProviderError> {
        let nodes = machine.numa_ids();
        let machine_mask = machine.numa_mask();
        let mut pools = BTreeMap::new();
        // Identity -> (resource, device id) of the device that has it.
        let mut known: HashMap<String, (String, String)> = HashMap::new();
        for (resource, list) in devices.0 {
            if resource.is_empty() {
                return Err(config_error(
                    "a resource has an empty name; name it like \"example.com/widget\"".into(),
                ));
            }
            let mut index = HashMap::new();
            for (i, d) in list.iter().enumerate() {
                if d.id.is_empty() {
                    return Err(config_error(format!(
                        "resource {resource}: device {i} has an empty id"
                    )));
                }
                if index.insert(d.id.clone(), i).is_some() {
                    return Err(config_error(format!(
                        "resource {resource}: device id {:?} is listed twice",
                        d.id
                    )));
                }
                if let Some(c) = d.id.chars().find(|c| *c == ',' || c.is_whitespace()) {
                    let what = if c == ',' { "a comma" } else { "whitespace" };
                    return Err(config_error(format!(
                        "resource {resource}: device id {:?} contains {what}; device ids are \
                         joined with commas in environment variables, where this one would name \
                         other devices: give the device an id without commas or whitespace",
                        d.id
                    )));
                }
                for identity in &d.identity {
                    check_identity(&resource, d, identity)?;
                    let here = (resource.clone(), d.id.clone());
                    if let Some((r, id)) = known.insert(identity.clone(), here) {
                        return Err(config_error(format!(
                            "resource {resource}: device {:?} and device {id:?} of {r} are one \
                             device ({}); listed twice it would be handed to two containers: list \
                             it once",
                            d.id,
                            describe_identity(identity)
                        )));
                    }
                }
                let unknown = d.numa.difference(machine_mask);
                if !unknown.is_empty() {
                    return Err(config_error(format!(
                        "resource {resource}: device {:?} is on NUMA node(s) {unknown}, which this \
                         machine does not have (its nodes: {machine_mask})",
                        d.id
                    )));
                }
            }
            let pool = Pool {
                aligned: list.iter().any(Device::has_topology),
                holders: vec![0; list.len()],
                unmatched: 0,
                devices: list,
                index,
            };
            if pools.insert(resource.clone(), pool).is_some() {
                return Err(config_error(format!(
                    "resource {resource} is registered twice"
                )));
            }
        }
        Ok(DeviceManager {
            nodes,
            pools,
            assignments: BTreeMap::new(),
            vanished: BTreeMap::new(),
            reuse: None,
        })
    }

    /// The resources this manager owns, by name.
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        self.pools.keys().map(String::as_str)
    }

    /// The devices of `resource`, in the provider's order.
    pub fn devices(&self, resource: &str) -> Option<&[Device]> {
        self.pools.get(resource).map(|p| p.devices.as_slice())
    }

    /// Every device of every resource with its identities (the named call
    /// [`Provider::device_identities`](crate::Provider::device_identities)).
    pub fn device_identities(&self) -> crate::DeviceIdentities {
        self.pools
            .iter()
            .fold(crate::DeviceIdentities::new(), |out, (resource, pool)| {
                out.with_resource(
                    resource.clone(),
                    pool.devices
                        .iter()
                        .map(|d| crate::ServedDevice::new(d.id.clone(), d.identity.clone()))
                        .collect(),
                )
            })
    }

    /// The device ids of `resource` that (`pod_uid`, `container`) holds, in
    /// the order they were picked (empty when it holds none).
    pub fn held(&self, pod_uid: &str, container: &str, resource: &str) -> Vec<String> {
        let (Some(pool), Some(by_resource)) = (
            self.pools.get(resource),
            self.assignments
                .get(&(pod_uid.to_owned(), container.to_owned())),
        ) else {
            return Vec::new();
        };
        by_resource
            .get(resource)
            .map(|p| pool.ids(p))
            .unwrap_or_default()
    }

    /// Marks device `id` of `resource` healthy or not (an unhealthy device
    /// keeps its assignments but is never handed out again).
    pub fn set_health(
        &mut self,
        resource: &str,
        id: &str,
        healthy: bool,
    ) -> Result<(), ProviderError> {
        let pool = self.pool_mut(resource)?;
        let Some(&i) = pool.index.get(id) else {
            return Err(ProviderError::new(
                INVALID_REQUEST,
                format!("resource {resource} has no device {id:?}"),
            ));
        };
        pool.devices[i].healthy = healthy;
        Ok(())
    }

    pub(super) fn pool(&self, resource: &str) -> Result<&Pool, ProviderError> {
        self.pools
            .get(resource)
            .ok_or_else(|| self.unknown_resource(resource))
    }

    fn pool_mut(&mut self, resource: &str) -> Result<&mut Pool, ProviderError> {
        let err = self.unknown_resource(resource);
        self.pools.get_mut(resource).ok_or(err)
    }

    fn unknown_resource(&self, resource: &str) -> ProviderError {
        let known: Vec<&str> = self.resources().collect();
        ProviderError::new(
            INVALID_REQUEST,
            format!(
                "this provider has no resource {resource:?} (its resources: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        )
    }

    /// Releases everything (`pod_uid`, `container`) holds; releasing
    /// something unknown is not an error. Devices the pod's init containers
    /// left for reuse stay reusable only while a container of the pod still
    /// holds them.
    pub fn release(&mut self, pod_uid: &str, container: &str) {
        let key = (pod_uid.to_owned(), container.to_owned());
        if self.vanished.remove(&key).is_some() {
            self.count_unmatched();
        }
        let Some(by_resource) = self.assignments.remove(&key) else {
            return;
        };
        for (resource, positions) in &by_resource {
            if let Some(pool) = self.pools.get_mut(resource) {
                for &i in positions {
                    pool.holders[i] = pool.holders[i].saturating_sub(1);
                }
            }
        }
        if let Some(reuse) = self.reuse.as_mut().filter(|r| r.pod == pod_uid) {
            let still_held = self
                .assignments
                .range((pod_uid.to_owned(), String::new())..)
                .take_while(|((uid, _), _)| uid == pod_uid)
                .fold(
                    BTreeMap::<&String, BTreeSet<usize>>::new(),
                    |mut acc, (_, m)| {
                        for (r, p) in m {
                            acc.entry(r).or_default().extend(p.iter().copied());
                        }
                        acc
                    },
                );
            for (resource, set) in reuse.devices.iter_mut() {
                let held = still_held.get(resource);
                set.retain(|i| held.is_some_and(|h| h.contains(i)));
            }
        }
    }

    /// Capacity, allocatable and available devices per resource and NUMA
    /// zone: capacity counts every device, allocatable the healthy ones,
    /// available the healthy ones nobody holds. A device on several nodes
    /// is counted in each of their zones; devices without topology form the
    /// "no NUMA node" zone.
    pub fn inventory(&self) -> Inventory {
        let mut inv = Inventory::new();
        for (resource, pool) in &self.pools {
            let mut total = Amounts::default();
            let mut zones: BTreeMap<Option<NumaNodeId>, Amounts> = BTreeMap::new();
            for (i, d) in pool.devices.iter().enumerate() {
                let one = Amounts::new(1, u64::from(d.healthy), u64::from(pool.is_free(i)));
                total.add(one);
                if d.has_topology() {
                    for n in d.numa {
                        zones.entry(Some(n)).or_default().add(one);
                    }
                } else {
                    zones.entry(None).or_default().add(one);
                }
            }
            // Nodes ascending, "no NUMA node" last.
            let mut list: Vec<Zone> = zones
                .iter()
                .filter(|(n, _)| n.is_some())
                .map(|(n, a)| Zone::new(*n, *a))
                .collect();
            if let Some(a) = zones.get(&None) {
                list.push(Zone::new(None, *a));
            }
            let units = pool
                .devices
                .iter()
                .filter(|d| d.healthy)
                .map(|d| {
                    let numa = if d.has_topology() {
                        d.numa.iter().collect()
                    } else {
                        Vec::new()
                    };
                    InventoryUnit::new(d.id.clone(), numa)
                })
                .collect();
            inv = inv.with_resource(
                resource.clone(),
                ResourceInventory::new(total, list).with_units(units),
            );
        }
        inv
    }

    /// The device plugins' `GetPreferredAllocation` for `request`, routed
    /// to the hooks' choice with the devices the ids name. An unknown
    /// resource or device id is an error (reason `"InvalidRequest"`); the
    /// request's shape is checked with
    /// [`PreferredAllocationRequest::validate`].
    pub fn preferred_allocation(
        &self,
        request: &PreferredAllocationRequest,
        hooks: &mut dyn DeviceHooks,
    ) -> Result<Vec<String>, ProviderError> {
        request
            .validate()
            .map_err(|e| ProviderError::new(INVALID_REQUEST, e))?;
        let pool = self.pool(&request.resource)?;
        let lookup = |ids: &[String]| -> Result<Vec<&Device>, ProviderError> {
            ids.iter()
                .map(|id| {
                    pool.index
                        .get(id)
                        .map(|&i| &pool.devices[i])
                        .ok_or_else(|| {
                            ProviderError::new(
                                INVALID_REQUEST,
                                format!("resource {} has no device {id:?}", request.resource),
                            )
                        })
                })
                .collect()
        };
        let available = lookup(&request.available)?;
        let must = lookup(&request.must_include)?;
        hooks.preferred_allocation(&request.resource, &available, &must, request.size)
    }
}
