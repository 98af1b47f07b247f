//! [`Inventory`]: what a provider owns per NUMA node, and how much is free.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::NumaNodeId;

/// Capacity, allocatable and available amounts of one resource, in the
/// canonical units of [`ResourceList`](crate::ResourceList) (`cpu` in
/// millicores, `memory` and `hugepages-*` in bytes, devices as counts).
///
/// As in the kubelet and the NodeResourceTopology API: `capacity` is
/// everything the machine has, `allocatable` what the provider may hand out
/// (capacity minus reserved or unhealthy), `available` what is allocatable
/// and not held by any container now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Amounts {
    /// Everything the machine has.
    pub capacity: u64,
    /// What may be handed out.
    pub allocatable: u64,
    /// What is free now.
    pub available: u64,
}

impl Amounts {
    /// The three amounts.
    pub fn new(capacity: u64, allocatable: u64, available: u64) -> Self {
        Amounts {
            capacity,
            allocatable,
            available,
        }
    }

    /// Adds `other` field by field (saturating).
    pub fn add(&mut self, other: Amounts) {
        self.capacity = self.capacity.saturating_add(other.capacity);
        self.allocatable = self.allocatable.saturating_add(other.allocatable);
        self.available = self.available.saturating_add(other.available);
    }
}

/// One NUMA zone of a resource: a node, or "no NUMA node" for resources
/// without topology (devices whose `numa_node` is -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Zone {
    /// The node; `None` (JSON `null`) for "no NUMA node".
    pub numa: Option<NumaNodeId>,
    /// The amounts in this zone.
    #[serde(flatten)]
    pub amounts: Amounts,
    /// The largest amount one request aligned to this zone alone would be
    /// given now, when the provider knows it to be less than `available`
    /// (the CPU provider with `full-pcpus-only`: the CPUs of the zone's
    /// wholly free cores). `None` (JSON: absent): `available` is what fits.
    /// The host never advertises more than `available`. Exported per zone
    /// as the `topomgr.io/max-admissible-<resource>` attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admissible: Option<u64>,
}

impl Zone {
    /// The amounts of zone `numa`.
    pub fn new(numa: Option<NumaNodeId>, amounts: Amounts) -> Self {
        Zone {
            numa,
            amounts,
            admissible: None,
        }
    }

    /// With the largest admissible request `amount` (see
    /// [`Zone::admissible`]).
    pub fn with_admissible(mut self, amount: u64) -> Self {
        self.admissible = Some(amount);
        self
    }

    /// The largest request aligned to this zone that would be given now:
    /// `admissible`, never more than `available`.
    pub fn max_admissible(&self) -> u64 {
        self.admissible
            .map_or(self.amounts.available, |a| a.min(self.amounts.available))
    }
}

/// One resource a provider owns: its totals and its zones.
///
/// `total` is the resource's own count; the zones may sum to more when a
/// device is attached to several NUMA nodes (it is listed in each of them,
/// since it can serve a container aligned to any of them).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResourceInventory {
    /// The machine-wide amounts.
    pub total: Amounts,
    /// Per NUMA zone, ascending by node, "no NUMA node" last.
    pub zones: Vec<Zone>,
    /// What is allocatable, one by one, when the provider names it: the
    /// CPUs of `cpu` (reserved ones left out), the healthy devices of a
    /// device resource, each with its NUMA nodes. Empty when the provider
    /// does not name units (amounts such as memory, or an older plugin;
    /// JSON: absent). The daemon's PodResources API answers
    /// `GetAllocatableResources` with them and gives an allocated device
    /// the NUMA nodes listed here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<InventoryUnit>,
}

impl ResourceInventory {
    /// A resource with these totals and zones.
    pub fn new(total: Amounts, zones: Vec<Zone>) -> Self {
        ResourceInventory {
            total,
            zones,
            units: Vec::new(),
        }
    }

    /// With the allocatable `units` ([`ResourceInventory::units`]).
    pub fn with_units(mut self, units: Vec<InventoryUnit>) -> Self {
        self.units = units;
        self
    }
}

/// One allocatable unit of a resource: a CPU or a device, by the id
/// allocations name it with, and its NUMA nodes.
///
/// JSON: `{"id": "GPU-0", "numa": [0]}`; `numa` empty (or absent) for a
/// unit attached to no NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InventoryUnit {
    /// The id (a CPU's number, a device id).
    pub id: String,
    /// Its NUMA nodes, ascending; empty: none.
    #[serde(default)]
    pub numa: Vec<NumaNodeId>,
}

impl InventoryUnit {
    /// Unit `id` on the nodes `numa`.
    pub fn new(id: impl Into<String>, numa: Vec<NumaNodeId>) -> Self {
        InventoryUnit {
            id: id.into(),
            numa,
        }
    }
}

/// Everything a provider owns, by resource name: the answer of
/// [`Provider::inventory`](crate::Provider::inventory), which the host uses
/// for the NodeResourceTopology export and for the admission check of
/// extended resources. `available` must drop with every allocation and rise
/// with every release.
///
/// JSON: `{"resources": {"example.com/widget": {"total": {"capacity": 8,
/// "allocatable": 8, "available": 7}, "zones": [{"numa": 0, "capacity": 2,
/// "allocatable": 2, "available": 1}, ...]}}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Inventory {
    /// Resource name -> its amounts.
    #[serde(default)]
    pub resources: BTreeMap<String, ResourceInventory>,
}

impl Inventory {
    /// An inventory owning nothing (the default answer).
    pub fn new() -> Self {
        Inventory::default()
    }

    /// With `resource`.
    pub fn with_resource(mut self, name: impl Into<String>, resource: ResourceInventory) -> Self {
        self.resources.insert(name.into(), resource);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_admissible_is_optional_on_the_wire_and_capped_by_available() {
        // An older plugin's zone (no `admissible`): what is available fits.
        let old: Zone =
            serde_json::from_str(r#"{"numa": 0, "capacity": 8, "allocatable": 6, "available": 5}"#)
                .unwrap();
        assert_eq!(old.admissible, None);
        assert_eq!(old.max_admissible(), 5);
        assert!(!serde_json::to_string(&old).unwrap().contains("admissible"));
        let z = Zone::new(Some(NumaNodeId::from(1)), Amounts::new(8, 6, 5)).with_admissible(4);
        let json = serde_json::to_string(&z).unwrap();
        assert_eq!(serde_json::from_str::<Zone>(&json).unwrap(), z);
        assert_eq!(z.max_admissible(), 4);
        // A plugin claiming more than is available is not believed.
        let over = Zone::new(None, Amounts::new(8, 6, 5)).with_admissible(7);
        assert_eq!(over.max_admissible(), 5);
    }
}
