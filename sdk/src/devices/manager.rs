//! [`DeviceManager`]: the devices of every resource, which containers hold
//! them, release, checkpoint/restore and the per-NUMA inventory.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::{Device, DeviceHooks, Devices};
use crate::{
    Amounts, Inventory, Machine, NumaNodeId, PreferredAllocationRequest, ProviderError, Reconciled,
    ResourceInventory, Zone,
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
}

impl Pool {
    /// Healthy devices nobody holds, in order.
    pub(super) fn available(&self) -> Vec<usize> {
        (0..self.devices.len())
            .filter(|&i| self.devices[i].healthy && self.holders[i] == 0)
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
    /// Assignments restored from a checkpoint that name resources or
    /// devices the provider no longer has: kept (never handed out, saved
    /// again) until their container is released.
    pub(super) vanished: BTreeMap<Key, BTreeMap<String, Vec<String>>>,
    pub(super) reuse: Option<Reuse>,
}

/// The checkpoint form.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Checkpoint {
    #[serde(default)]
    assignments: Vec<CheckpointEntry>,
    #[serde(default)]
    reuse: Option<CheckpointReuse>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CheckpointEntry {
    pod_uid: String,
    container: String,
    resource: String,
    devices: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CheckpointReuse {
    pod_uid: String,
    devices: BTreeMap<String, Vec<String>>,
}

fn config_error(message: String) -> ProviderError {
    ProviderError::config(message)
}

impl DeviceManager {
    /// The devices of `devices` on `machine`. Refuses (reason
    /// `"InvalidConfig"`, naming what) an empty or repeated resource name, an
    /// empty or repeated device id within a resource, and a device on a
    /// NUMA node the machine does not have.
    pub fn new(machine: &Machine, devices: Devices) -> Result<Self, ProviderError> {
        let nodes = machine.numa_ids();
        let machine_mask = machine.numa_mask();
        let mut pools = BTreeMap::new();
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
                let unknown = d.numa.and_not(machine_mask);
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
        self.vanished.remove(&key);
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

    /// The assignments as bytes (JSON): every (pod, container, resource)
    /// with its device ids, vanished ones included, and the pending reuse.
    pub fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        let mut cp = Checkpoint::default();
        for ((pod_uid, container), by_resource) in &self.assignments {
            for (resource, positions) in by_resource {
                cp.assignments.push(CheckpointEntry {
                    pod_uid: pod_uid.clone(),
                    container: container.clone(),
                    resource: resource.clone(),
                    devices: self.pools[resource].ids(positions),
                });
            }
        }
        for ((pod_uid, container), by_resource) in &self.vanished {
            for (resource, ids) in by_resource {
                cp.assignments.push(CheckpointEntry {
                    pod_uid: pod_uid.clone(),
                    container: container.clone(),
                    resource: resource.clone(),
                    devices: ids.clone(),
                });
            }
        }
        cp.reuse = self
            .reuse
            .as_ref()
            .map(|r| CheckpointReuse {
                pod_uid: r.pod.clone(),
                devices: r
                    .devices
                    .iter()
                    .filter(|(_, set)| !set.is_empty())
                    .map(|(res, set)| {
                        let v: Vec<usize> = set.iter().copied().collect();
                        (res.clone(), self.pools[res].ids(&v))
                    })
                    .collect(),
            })
            .filter(|r| !r.devices.is_empty());
        serde_json::to_vec(&cp).map_err(|e| {
            ProviderError::new(
                "CheckpointError",
                format!("encoding device assignments: {e}"),
            )
        })
    }

    /// Restores a [`DeviceManager::checkpoint`], checked against the
    /// current devices; on error (reason `"InvalidCheckpoint"`, naming the
    /// entry) nothing changes. Refused: bytes that are not a checkpoint, an
    /// entry without pod, container or resource, an entry given twice, a
    /// device listed twice in one entry, a device held by containers of two
    /// different pods, reuse naming devices the pod does not hold.
    /// Assignments of resources or devices the provider no longer has are
    /// kept, with a warning, and never handed out.
    pub fn restore(&mut self, data: &[u8]) -> Result<Reconciled, ProviderError> {
        let cp: Checkpoint = serde_json::from_slice(data).map_err(|e| {
            ProviderError::checkpoint(format!("device assignments do not parse: {e}"))
        })?;
        let mut assignments: BTreeMap<Key, BTreeMap<String, Vec<usize>>> = BTreeMap::new();
        let mut vanished: BTreeMap<Key, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        let mut owner: BTreeMap<(&str, usize), &str> = BTreeMap::new();
        let mut holders: BTreeMap<&str, Vec<u32>> = self
            .pools
            .iter()
            .map(|(r, p)| (r.as_str(), vec![0; p.devices.len()]))
            .collect();
        for e in &cp.assignments {
            if e.pod_uid.is_empty() || e.container.is_empty() || e.resource.is_empty() {
                return Err(ProviderError::checkpoint(format!(
                    "an assignment has an empty pod uid, container or resource: {:?}/{:?}/{:?}",
                    e.pod_uid, e.container, e.resource
                )));
            }
            let key = (e.pod_uid.clone(), e.container.clone());
            let twice = || {
                ProviderError::checkpoint(format!(
                    "resource {} of container {:?} of pod {} is assigned twice",
                    e.resource, e.container, e.pod_uid
                ))
            };
            let Some(pool) = self.pools.get(&e.resource) else {
                tracing::warn!(pod = %e.pod_uid, container = %e.container, resource = %e.resource,
                    devices = %e.devices.join(","),
                    "restored devices of a resource this provider no longer has; keeping the assignment");
                if vanished
                    .entry(key)
                    .or_default()
                    .insert(e.resource.clone(), e.devices.clone())
                    .is_some()
                {
                    return Err(twice());
                }
                continue;
            };
            let mut positions = Vec::new();
            let mut gone = Vec::new();
            for id in &e.devices {
                let Some(&i) = pool.index.get(id) else {
                    gone.push(id.clone());
                    continue;
                };
                if positions.contains(&i) {
                    return Err(ProviderError::checkpoint(format!(
                        "device {id:?} of {} is listed twice for container {:?} of pod {}",
                        e.resource, e.container, e.pod_uid
                    )));
                }
                match owner.get(&(e.resource.as_str(), i)) {
                    Some(other) if *other != e.pod_uid => {
                        return Err(ProviderError::checkpoint(format!(
                            "device {id:?} of {} is held by pods {other} and {}",
                            e.resource, e.pod_uid
                        )));
                    }
                    _ => {
                        owner.insert((e.resource.as_str(), i), e.pod_uid.as_str());
                    }
                }
                positions.push(i);
            }
            if !gone.is_empty() {
                tracing::warn!(pod = %e.pod_uid, container = %e.container, resource = %e.resource,
                    devices = %gone.join(","),
                    "restored devices this provider no longer has; keeping the assignment");
                if vanished
                    .entry(key.clone())
                    .or_default()
                    .insert(e.resource.clone(), gone)
                    .is_some()
                {
                    return Err(twice());
                }
            }
            if positions.is_empty() {
                continue;
            }
            if let Some(h) = holders.get_mut(e.resource.as_str()) {
                for &i in &positions {
                    h[i] += 1;
                }
            }
            if assignments
                .entry(key)
                .or_default()
                .insert(e.resource.clone(), positions)
                .is_some()
            {
                return Err(twice());
            }
        }
        let reuse = match cp.reuse {
            None => None,
            Some(r) => {
                let mut devices = BTreeMap::new();
                for (resource, ids) in r.devices {
                    let Some(pool) = self.pools.get(&resource) else {
                        continue;
                    };
                    let mut set = BTreeSet::new();
                    for id in ids {
                        let held = pool.index.get(&id).copied().filter(|&i| {
                            owner.get(&(resource.as_str(), i)) == Some(&r.pod_uid.as_str())
                        });
                        let Some(i) = held else {
                            return Err(ProviderError::checkpoint(format!(
                                "reusable device {id:?} of {resource} is not held by pod {}",
                                r.pod_uid
                            )));
                        };
                        set.insert(i);
                    }
                    devices.insert(resource, set);
                }
                Some(Reuse {
                    pod: r.pod_uid,
                    devices,
                })
            }
        };
        let holders: BTreeMap<String, Vec<u32>> = holders
            .into_iter()
            .map(|(r, h)| (r.to_owned(), h))
            .collect();
        for (resource, pool) in self.pools.iter_mut() {
            pool.holders = holders[resource].clone();
        }
        self.assignments = assignments;
        self.vanished = vanished;
        self.reuse = reuse;
        Ok(Reconciled::default())
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
                let one = Amounts::new(
                    1,
                    u64::from(d.healthy),
                    u64::from(d.healthy && pool.holders[i] == 0),
                );
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
            inv = inv.with_resource(resource.clone(), ResourceInventory::new(total, list));
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
