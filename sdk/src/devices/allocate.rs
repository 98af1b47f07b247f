//! Allocation exactly as the kubelet Device Manager does it (`Allocate`,
//! `allocateContainerResources`, `devicesToAllocate`, `filterByAffinity` of
//! `pkg/kubelet/cm/devicemanager/manager.go`), deterministic where the
//! kubelet iterates Go sets in random order: devices are considered in the
//! provider's order, and the hooks' preferred devices in the order the
//! hooks return them.
//!
//! For each resource in the container's limits:
//! 1. a container that already holds devices of the resource keeps them
//!    (asking for a different number is an error); a resource with no
//!    healthy device, or whose held devices became unhealthy, is an error;
//! 2. devices the pod's init containers left for reuse are taken first;
//! 3. the available devices (healthy, held by nobody) must cover the rest;
//!    they split into *aligned* (a node in the merged hint), *unaligned*
//!    (nodes, none in the hint) and *no affinity* (no node, or a hint of
//!    "any node");
//! 4. when fewer devices are needed than there are aligned ones, the hooks'
//!    [`preferred_allocation`](super::DeviceHooks::preferred_allocation)
//!    chooses among the aligned devices (plus those already taken, which it
//!    must include), then the aligned ones in order fill up;
//! 5. otherwise every aligned device is taken, then the hooks choose among
//!    all available ones, then unaligned, then no-affinity devices.
//!
//! After a non-restartable init container, its devices become reusable by
//! the pod's later containers; a sidecar's or app container's devices are
//! removed from the reusable set. Nothing changes when any resource fails
//! or a hook errs: the allocation is all or nothing.

use std::collections::{BTreeMap, BTreeSet};

use super::manager::{Key, Pool, Reuse};
use super::{DeviceHooks, DeviceManager};
use crate::{Allocation, ContainerView, PodView, ProviderError, TopologyHint};

/// What the container is within its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A non-restartable init container: its devices become reusable.
    Init,
    /// A sidecar or app container: its devices are its own.
    Other,
}

impl DeviceManager {
    /// Allocates `container` of `pod` honouring the merged `hint`: the
    /// devices of every resource this manager owns that the container has
    /// in its limits, and the hooks' environment for them.
    ///
    /// A container that already holds its devices gets the same allocation
    /// again. Errors (reason `"UnexpectedAdmissionError"`, or a hook's own)
    /// change nothing.
    pub fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
        hooks: &mut dyn DeviceHooks,
    ) -> Result<Allocation, ProviderError> {
        let kind = match pod
            .init_containers
            .iter()
            .find(|c| c.name == container.name)
        {
            Some(c) if !c.sidecar => Kind::Init,
            _ => Kind::Other,
        };
        let key: Key = (pod.uid.clone(), container.name.clone());
        let reuse = match &self.reuse {
            Some(r) if r.pod == pod.uid => r.clone(),
            _ => Reuse {
                pod: pod.uid.clone(),
                devices: BTreeMap::new(),
            },
        };
        let mut fresh: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (resource, &required) in &container.limits {
            let Some(pool) = self.pools.get(resource) else {
                continue;
            };
            let empty = BTreeSet::new();
            let reusable = reuse.devices.get(resource).unwrap_or(&empty);
            if let Some(picked) =
                self.devices_to_allocate(&key, resource, pool, required, reusable, hint, hooks)?
            {
                fresh.insert(resource.clone(), picked);
            }
        }
        // Everything the container holds once this succeeds.
        let mut holds: BTreeMap<String, Vec<usize>> =
            self.assignments.get(&key).cloned().unwrap_or_default();
        for (resource, picked) in &fresh {
            holds.insert(resource.clone(), picked.clone());
        }
        let mut alloc = Allocation::default();
        let mut env_from: BTreeMap<String, String> = BTreeMap::new();
        for (resource, positions) in &holds {
            let pool = &self.pools[resource];
            let devices: Vec<&super::Device> =
                positions.iter().map(|&i| &pool.devices[i]).collect();
            for (name, value) in hooks.environment(resource, &devices)? {
                if let Some(old) = alloc.env.get(&name).filter(|old| **old != value) {
                    return Err(ProviderError::admission(format!(
                        "the environment variable {name} is set to {old:?} for {} and to {value:?} \
                         for {resource}; give each resource its own variables",
                        env_from[&name]
                    )));
                }
                env_from.insert(name.clone(), resource.clone());
                alloc.env.insert(name, value);
            }
            alloc.devices.insert(resource.clone(), pool.ids(positions));
        }
        // Commit.
        for (resource, picked) in fresh {
            let pool = self.pools.get_mut(&resource).expect("resource exists");
            for &i in &picked {
                pool.holders[i] += 1;
            }
            tracing::debug!(pod = %pod.uid, container = %container.name, resource = %resource,
                devices = %pool.ids(&picked).join(","), "allocated devices");
            self.assignments
                .entry(key.clone())
                .or_default()
                .insert(resource, picked);
        }
        let mut reuse = reuse;
        for (resource, positions) in &holds {
            let set = reuse.devices.entry(resource.clone()).or_default();
            match kind {
                Kind::Init => set.extend(positions.iter().copied()),
                Kind::Other => positions.iter().for_each(|i| {
                    set.remove(i);
                }),
            }
        }
        self.reuse = Some(reuse);
        Ok(alloc)
    }

    /// The kubelet's `devicesToAllocate` for one resource: `None` when the
    /// container needs nothing new, else the devices picked, in order.
    #[allow(clippy::too_many_arguments)]
    fn devices_to_allocate(
        &self,
        key: &Key,
        resource: &str,
        pool: &Pool,
        required: u64,
        reusable: &BTreeSet<usize>,
        hint: &TopologyHint,
        hooks: &mut dyn DeviceHooks,
    ) -> Result<Option<Vec<usize>>, ProviderError> {
        let held: &[usize] = self
            .assignments
            .get(key)
            .and_then(|m| m.get(resource))
            .map_or(&[], Vec::as_slice);
        let mut needed = required;
        if !held.is_empty() {
            if held.len() as u64 != required {
                return Err(ProviderError::admission(format!(
                    "container {:?} of pod {} changed its request for {resource} from {} to {required}",
                    key.1,
                    key.0,
                    held.len()
                )));
            }
            needed = 0;
        }
        if pool.healthy_count() == 0 {
            return Err(ProviderError::admission(format!(
                "no healthy devices of {resource} are present; unhealthy devices cannot be allocated"
            )));
        }
        if held.iter().any(|&i| !pool.devices[i].healthy) {
            return Err(ProviderError::admission(format!(
                "devices of {resource} allocated before are no longer healthy; unhealthy devices \
                 cannot be allocated"
            )));
        }
        if needed == 0 {
            return Ok(None);
        }
        let mut picked: Vec<usize> = Vec::new();
        let take = |from: &mut dyn Iterator<Item = usize>, picked: &mut Vec<usize>| -> bool {
            for i in from {
                if picked.len() as u64 == required {
                    break;
                }
                if !picked.contains(&i) {
                    picked.push(i);
                }
            }
            picked.len() as u64 == required
        };
        // 1. Devices the pod's init containers left for reuse.
        if take(&mut reusable.iter().copied(), &mut picked) {
            return Ok(Some(picked));
        }
        let remaining = required - picked.len() as u64;
        let available = pool.available();
        if (available.len() as u64) < remaining {
            return Err(ProviderError::admission(format!(
                "requested number of devices unavailable for {resource}: {remaining} requested, {} \
                 available",
                available.len()
            )));
        }
        let (aligned, unaligned, no_affinity) = filter_by_affinity(pool, hint, &available);
        let mut ask =
            |candidates: &[usize], picked: &[usize]| -> Result<Vec<usize>, ProviderError> {
                let mut offer: Vec<usize> = candidates.iter().chain(picked).copied().collect();
                offer.sort_unstable();
                offer.dedup();
                let must: Vec<usize> = {
                    let mut m = picked.to_vec();
                    m.sort_unstable();
                    m
                };
                let devices = |p: &[usize]| p.iter().map(|&i| &pool.devices[i]).collect::<Vec<_>>();
                let answer = hooks.preferred_allocation(
                    resource,
                    &devices(&offer),
                    &devices(&must),
                    usize::try_from(required).unwrap_or(usize::MAX),
                )?;
                // Unknown ids are ignored, as the kubelet ignores them.
                Ok(answer
                    .iter()
                    .filter_map(|id| pool.index.get(id).copied())
                    .collect())
            };
        if remaining < aligned.len() as u64 {
            // The hooks choose among the aligned devices.
            let preferred = ask(&aligned, &picked)?;
            let aligned_set: BTreeSet<usize> = aligned.iter().copied().collect();
            if take(
                &mut preferred.into_iter().filter(|i| aligned_set.contains(i)),
                &mut picked,
            ) {
                return Ok(Some(picked));
            }
            if take(&mut aligned.iter().copied(), &mut picked) {
                return Ok(Some(picked));
            }
            return Err(short(resource, required, picked.len()));
        }
        if take(&mut aligned.iter().copied(), &mut picked) {
            return Ok(Some(picked));
        }
        let preferred = ask(&available, &picked)?;
        let available_set: BTreeSet<usize> = available.iter().copied().collect();
        if take(
            &mut preferred.into_iter().filter(|i| available_set.contains(i)),
            &mut picked,
        ) {
            return Ok(Some(picked));
        }
        if take(&mut unaligned.iter().copied(), &mut picked) {
            return Ok(Some(picked));
        }
        if take(&mut no_affinity.iter().copied(), &mut picked) {
            return Ok(Some(picked));
        }
        Err(short(resource, required, picked.len()))
    }
}

fn short(resource: &str, required: u64, got: usize) -> ProviderError {
    ProviderError::admission(format!(
        "allocated fewer devices of {resource} than required: {required} requested, {got} found"
    ))
}

/// The kubelet's `filterByAffinity`: `available` split into devices with a
/// node in the hint, devices whose nodes are all outside it, and devices
/// without a node; everything is "no affinity" when the resource has no
/// topology or the hint is "any node".
pub(super) fn filter_by_affinity(
    pool: &Pool,
    hint: &TopologyHint,
    available: &[usize],
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let Some(affinity) = hint.affinity.filter(|_| pool.aligned) else {
        return (Vec::new(), Vec::new(), available.to_vec());
    };
    let (mut aligned, mut unaligned, mut none) = (Vec::new(), Vec::new(), Vec::new());
    for &i in available {
        let numa = pool.devices[i].numa;
        if numa.is_empty() {
            none.push(i);
        } else if numa.intersects(affinity) {
            aligned.push(i);
        } else {
            unaligned.push(i);
        }
    }
    (aligned, unaligned, none)
}
