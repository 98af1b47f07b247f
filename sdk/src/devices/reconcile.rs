//! The device toolkit's checkpoint and its reconcile: saved assignments
//! taken back on the devices the provider lists now (the SDK's
//! [`Provider::restore`](crate::Provider::restore) contract).
//!
//! The checkpoint names every device a container holds by its resource and
//! id and, when the device has one, its [identity](super::Device::identity)
//! (PCI address, serial). Restoring finds each saved device among the
//! current ones:
//!
//! 1. by identity: the current device that shares one, under whatever id
//!    and resource it is listed now;
//! 2. else by resource and id, unless both the saved and the current device
//!    have identities (then they are different devices).
//!
//! A device found under another id or resource follows: the assignment
//! holds it under its new name, reported as a [`Move`]. A device not found
//! stays the assignment's (saved again with its identity, so that when it
//! comes back, it is the same container's), reported as a [`Conflict`],
//! and is never handed out meanwhile since it is not there. A device not
//! found that has an identity, of a resource that now lists devices
//! without one (a GPU first known by its PCI address, then through a
//! topology file that names none), may be one of those: it cannot be
//! matched, so none of the devices without an identity is handed out
//! until the container that holds it is released (holding, never freeing,
//! what cannot be matched). A device two pods claim stays the first
//! claimant's; the second claim is a conflict.
//! Only bytes that are not a checkpoint are an error.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::manager::{Key, Reuse};
use super::saved::SavedDevice;
use super::DeviceManager;
use crate::{Conflict, Move, ProviderError, Reconciled, ResourceId};

/// The checkpoint form (unknown fields are ignored).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Checkpoint {
    #[serde(default)]
    assignments: Vec<Entry>,
    #[serde(default)]
    reuse: Option<SavedReuse>,
}

/// What one container holds of one resource.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    pod_uid: String,
    container: String,
    resource: String,
    devices: Vec<SavedDevice>,
}

/// The devices an init container left for the later containers of its pod.
#[derive(Debug, Serialize, Deserialize)]
struct SavedReuse {
    pod_uid: String,
    devices: BTreeMap<String, Vec<String>>,
}

/// A current device: resource and position in its pool.
type Place = (String, usize);

/// The ids of `devices` for a message: `device a`, `devices a, b`.
fn devices_phrase(ids: &[String]) -> String {
    match ids {
        [one] => format!("device {one}"),
        _ => format!("devices {}", ids.join(", ")),
    }
}

impl DeviceManager {
    /// The assignments as bytes (JSON): every (pod, container, resource)
    /// with the devices it holds (with their identities), those that are
    /// gone included, and the pending reuse.
    pub fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        let mut cp = Checkpoint::default();
        let keys: BTreeSet<&Key> = self
            .assignments
            .keys()
            .chain(self.vanished.keys())
            .collect();
        for key in keys {
            let mut by_resource: BTreeMap<&str, Vec<SavedDevice>> = BTreeMap::new();
            for (resource, positions) in self.assignments.get(key).into_iter().flatten() {
                let pool = &self.pools[resource];
                by_resource
                    .entry(resource)
                    .or_default()
                    .extend(positions.iter().map(|&i| SavedDevice {
                        id: pool.devices[i].id.clone(),
                        identity: pool.devices[i].identity.clone(),
                    }));
            }
            for (resource, gone) in self.vanished.get(key).into_iter().flatten() {
                by_resource
                    .entry(resource)
                    .or_default()
                    .extend(gone.iter().cloned());
            }
            for (resource, devices) in by_resource {
                cp.assignments.push(Entry {
                    pod_uid: key.0.clone(),
                    container: key.1.clone(),
                    resource: resource.to_owned(),
                    devices,
                });
            }
        }
        cp.reuse = self
            .reuse
            .as_ref()
            .map(|r| SavedReuse {
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

    /// Takes back the assignments of a [`DeviceManager::checkpoint`] (of
    /// this SDK or 0.2) on the devices this manager lists now, as the
    /// module documentation describes: devices found again (under another
    /// id or resource: a [`Move`]) are held, devices that are gone stay
    /// their container's (a [`Conflict`]) and are saved again, a device
    /// claimed by two pods stays the first's (the second claim is a
    /// conflict). Reusable devices that the pod no longer holds are
    /// dropped.
    ///
    /// Refused, changing nothing (reason `"InvalidCheckpoint"`): bytes that
    /// are not a checkpoint, an assignment without pod, container or
    /// resource.
    pub fn restore(&mut self, data: &[u8]) -> Result<Reconciled, ProviderError> {
        // An object (serde would read the struct from a list too).
        if data.trim_ascii_start().first() == Some(&b'[') {
            return Err(ProviderError::checkpoint(
                "device assignments are a JSON list, not an object with `assignments`",
            ));
        }
        let cp: Checkpoint = serde_json::from_slice(data).map_err(|e| {
            ProviderError::checkpoint(format!("device assignments do not parse: {e}"))
        })?;
        if let Some(e) = cp
            .assignments
            .iter()
            .find(|e| e.pod_uid.is_empty() || e.container.is_empty() || e.resource.is_empty())
        {
            return Err(ProviderError::checkpoint(format!(
                "an assignment has an empty pod uid, container or resource: {:?}/{:?}/{:?}",
                e.pod_uid, e.container, e.resource
            )));
        }
        // Every saved device with its entry, in checkpoint order.
        let saved: Vec<(&Entry, &SavedDevice)> = cp
            .assignments
            .iter()
            .flat_map(|e| e.devices.iter().map(move |d| (e, d)))
            .collect();
        let found = self.find_saved(&saved);
        // Who holds each current device: the first pod that claims it, a
        // claim by identity before one by resource and id.
        let mut owner: HashMap<&Place, &str> = HashMap::new();
        for by_identity in [true, false] {
            for ((entry, _), place) in saved.iter().zip(&found) {
                if let Some((place, _)) = place.as_ref().filter(|(_, how)| *how == by_identity) {
                    owner.entry(place).or_insert(&entry.pod_uid);
                }
            }
        }

        let mut report = Reconciled::new();
        let mut assignments: BTreeMap<Key, BTreeMap<String, Vec<usize>>> = BTreeMap::new();
        let mut vanished: BTreeMap<Key, BTreeMap<String, Vec<SavedDevice>>> = BTreeMap::new();
        // (pod, saved resource, saved id) -> the device it is now.
        let mut now: HashMap<(&str, &str, &str), &Place> = HashMap::new();
        // Per (key, saved resource): ids gone; per (.., other pod): ids taken.
        let mut gone: BTreeMap<(Key, &str), Vec<String>> = BTreeMap::new();
        let mut taken: BTreeMap<(Key, &str, &str), Vec<String>> = BTreeMap::new();
        for ((entry, device), place) in saved.iter().zip(&found) {
            let key: Key = (entry.pod_uid.clone(), entry.container.clone());
            let Some((place, _)) = place else {
                let list = vanished
                    .entry(key.clone())
                    .or_default()
                    .entry(entry.resource.clone())
                    .or_default();
                if !list.contains(device) {
                    list.push((*device).clone());
                    gone.entry((key, &entry.resource))
                        .or_default()
                        .push(device.id.clone());
                }
                continue;
            };
            let first = owner[place];
            if first != entry.pod_uid {
                taken
                    .entry((key, &entry.resource, first))
                    .or_default()
                    .push(device.id.clone());
                continue;
            }
            now.insert((&entry.pod_uid, &entry.resource, &device.id), place);
            let (resource, i) = place;
            let current = &self.pools[resource].devices[*i];
            if *resource != entry.resource || current.id != device.id {
                report = report.with_move(Move::new(
                    &entry.pod_uid,
                    &entry.container,
                    ResourceId::new(&entry.resource, &device.id),
                    ResourceId::new(resource, &current.id),
                ));
            }
            let held = assignments
                .entry(key)
                .or_default()
                .entry(resource.clone())
                .or_default();
            if !held.contains(i) {
                held.push(*i);
            }
        }
        for ((key, resource), ids) in gone {
            let unsure: Vec<String> = self
                .pools
                .get(resource)
                .map(|pool| {
                    pool.devices
                        .iter()
                        .filter(|d| d.identity.is_empty())
                        .map(|d| d.id.clone())
                        .collect()
                })
                .unwrap_or_default();
            let identified = vanished
                .get(&key)
                .and_then(|r| r.get(resource))
                .is_some_and(|list| list.iter().any(|d| !d.identity.is_empty()));
            let missing = if identified && !unsure.is_empty() {
                format!(
                    "{} {} not found by {} PCI address or serial, and {} listed without one ({}) may be {}: {} not handed out until this container is released",
                    devices_phrase(&ids),
                    verb(&ids),
                    if ids.len() == 1 { "its" } else { "their" },
                    if unsure.len() == 1 { "the device" } else { "the devices" },
                    unsure.join(", "),
                    if ids.len() == 1 { "it" } else { "them" },
                    if unsure.len() == 1 { "it is" } else { "they are" },
                )
            } else if self.pools.contains_key(resource) {
                format!("{} {} gone", devices_phrase(&ids), verb(&ids))
            } else {
                format!(
                    "this provider no longer has resource {resource}; {} {} gone",
                    devices_phrase(&ids),
                    verb(&ids)
                )
            };
            report =
                report.with_conflict(Conflict::new(key.0, key.1, resource, missing).with_ids(ids));
        }
        for ((key, resource, other), ids) in taken {
            let missing = format!(
                "{} {} held by pod {other}, which claimed {} first",
                devices_phrase(&ids),
                verb(&ids),
                if ids.len() == 1 { "it" } else { "them" }
            );
            report =
                report.with_conflict(Conflict::new(key.0, key.1, resource, missing).with_ids(ids));
        }
        let reuse = cp.reuse.map(|r| {
            let mut devices: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
            for (resource, ids) in &r.devices {
                for id in ids {
                    match now.get(&(r.pod_uid.as_str(), resource.as_str(), id.as_str())) {
                        Some(&(res, i)) => {
                            devices.entry(res.clone()).or_default().insert(*i);
                        }
                        None => {
                            tracing::debug!(pod = %r.pod_uid, resource = %resource, device = %id,
                            "a reusable device the pod no longer holds is dropped")
                        }
                    }
                }
            }
            Reuse {
                pod: r.pod_uid,
                devices,
            }
        });
        for pool in self.pools.values_mut() {
            pool.holders.iter_mut().for_each(|h| *h = 0);
        }
        for by_resource in assignments.values() {
            for (resource, positions) in by_resource {
                let pool = self.pools.get_mut(resource).expect("found in a pool");
                for &i in positions {
                    pool.holders[i] += 1;
                }
            }
        }
        self.assignments = assignments;
        self.vanished = vanished;
        self.reuse = reuse;
        self.count_unmatched();
        Ok(report)
    }

    /// Per pool, how many held devices that are not listed have an
    /// identity, when the pool lists devices without one (0 otherwise):
    /// while it is above 0 those devices are not handed out.
    pub(super) fn count_unmatched(&mut self) {
        for (resource, pool) in self.pools.iter_mut() {
            let anonymous = pool.devices.iter().any(|d| d.identity.is_empty());
            pool.unmatched = if anonymous {
                self.vanished
                    .values()
                    .filter_map(|r| r.get(resource))
                    .flatten()
                    .filter(|d| !d.identity.is_empty())
                    .count()
            } else {
                0
            };
        }
    }

    /// Where each saved device is now, and whether it was found by
    /// identity: by identity first (in any resource), then by resource and
    /// id where the saved or the current device has no identity; `None`
    /// when it is gone.
    fn find_saved(&self, saved: &[(&Entry, &SavedDevice)]) -> Vec<Option<(Place, bool)>> {
        let mut by_identity: HashMap<&str, Place> = HashMap::new();
        for (resource, pool) in &self.pools {
            for (i, d) in pool.devices.iter().enumerate() {
                for identity in &d.identity {
                    by_identity.insert(identity, (resource.clone(), i));
                }
            }
        }
        saved
            .iter()
            .map(|(entry, device)| {
                let known = device
                    .identity
                    .iter()
                    .find_map(|identity| by_identity.get(identity.as_str()).cloned());
                if let Some(place) = known {
                    return Some((place, true));
                }
                let pool = self.pools.get(&entry.resource)?;
                let &i = pool.index.get(&device.id)?;
                let both_known =
                    !device.identity.is_empty() && !pool.devices[i].identity.is_empty();
                (!both_known).then(|| ((entry.resource.clone(), i), false))
            })
            .collect()
    }
}

/// `is` or `are` for `ids`.
fn verb(ids: &[String]) -> &'static str {
    if ids.len() == 1 {
        "is"
    } else {
        "are"
    }
}

#[cfg(test)]
mod tests;
