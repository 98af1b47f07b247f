//! In-place resize of a container's pinned memory (the provider's
//! `resize`): a Guaranteed container's memory and hugepages are booked
//! again on the NUMA nodes its blocks are on (a resize never moves
//! memory). What grows is taken from those nodes' free memory, lowest node
//! first as at allocation, and refused with the amounts when it does not
//! fit there; what shrinks is given back as a release gives it back. The
//! kubelet's Memory Manager has no resize path (its static policy keeps
//! the admitted blocks); nri-plugins' topology-aware policy re-allocates
//! on UpdateContainer, which this follows for the books only: shrinking
//! below what the container uses is the kubelet's matter (it reports the
//! resize), the books follow the request.
//!
//! Containers of pods the provider does not manage keep their (empty)
//! allocation; one that holds blocks is not moved out of them (another QoS
//! class), pod-level memory (`PodLevelResourceManagers`) is not resized,
//! and under the `none` policy memory kept from the static policy keeps
//! its size (a resize that changes it is refused).

use std::collections::BTreeMap;

use topomgr_sdk::quantity::BinarySi;
use topomgr_sdk::{Allocation, ContainerView, NumaMask, PodView, ProviderError};

use crate::allocate::allocation_of;
use crate::config::Policy;
use crate::hints::eligible_requests;
use crate::state::{free, reserve, sum_over, unreserve, Block, MachineState};
use crate::MemoryProvider;

/// `NUMA node 1`, `NUMA nodes 0-1`.
fn nodes(mask: NumaMask) -> String {
    if mask.len() == 1 {
        format!("NUMA node {mask}")
    } else {
        format!("NUMA nodes {mask}")
    }
}

/// Moves `size` more bytes of `resource` on `mask` from free to reserved,
/// lowest node first (as [`reserve`] places them), without a new
/// assignment.
fn take_bytes(state: &mut MachineState, mask: NumaMask, resource: &str, mut size: u64) {
    for id in mask.iter() {
        let Some(t) = state
            .get_mut(&id)
            .and_then(|n| n.memory_map.get_mut(resource))
        else {
            continue;
        };
        let take = t.free.min(size);
        t.reserved += take;
        t.free -= take;
        size -= take;
    }
}

/// Gives `size` bytes of `resource` on `mask` back, lowest node first (as
/// [`unreserve`] does), keeping the assignment.
fn give_bytes(state: &mut MachineState, mask: NumaMask, resource: &str, mut size: u64) {
    for id in mask.iter() {
        let Some(t) = state
            .get_mut(&id)
            .and_then(|n| n.memory_map.get_mut(resource))
        else {
            continue;
        };
        let give = t.reserved.min(size);
        t.reserved -= give;
        t.free = t.allocatable.saturating_sub(t.reserved);
        size -= give;
    }
}

impl MemoryProvider {
    /// The answer to a resize of `container` (with its new requests) of
    /// `pod`; see the module docs.
    pub(crate) fn resize_static(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<Allocation, ProviderError> {
        let who = format!(
            "container {:?} of pod {}/{}",
            container.name, pod.namespace, pod.name
        );
        let held = self
            .assignments()
            .get(&pod.uid)
            .and_then(|m| m.get(&container.name))
            .cloned();
        let managed = self.managed(pod) && !self.skips_pod_level(pod);
        let Some(held) = held else {
            if self.pod_blocks.contains_key(&pod.uid) {
                return Err(ProviderError::resize_infeasible(format!(
                    "{who} shares its pod's pod-level memory (PodLevelResourceManagers), which \
                     this provider does not resize"
                )));
            }
            if !managed || eligible_requests(pod, container, self.pod_level_managers).is_empty() {
                // Nothing pinned and nothing to pin: unchanged.
                return Ok(Allocation::default());
            }
            return Err(ProviderError::resize_infeasible(format!(
                "{who} holds no pinned memory, and a resize does not pin memory (only \
                 admission does); recreate the pod"
            )));
        };
        if self.pod_blocks.contains_key(&pod.uid) {
            return Err(ProviderError::resize_infeasible(format!(
                "{who} holds a share of its pod's pod-level memory \
                 (PodLevelResourceManagers), which this provider does not resize"
            )));
        }
        let requested = eligible_requests(pod, container, self.pod_level_managers);
        let mut old: BTreeMap<&str, u64> = BTreeMap::new();
        for b in &held {
            *old.entry(b.resource.as_str()).or_default() += b.size;
        }
        let unchanged = requested.len() == old.len()
            && requested
                .iter()
                .all(|(r, &want)| old.get(r.as_str()) == Some(&want));
        if self.policy != Policy::Static {
            if unchanged {
                return Ok(allocation_of(&held));
            }
            return Err(ProviderError::resize_infeasible(format!(
                "{who} keeps pinned memory from the static policy, and the none policy does not \
                 resize it"
            )));
        }
        if !managed {
            return Err(ProviderError::resize_infeasible(format!(
                "{who} holds pinned memory and cannot be resized into a {} pod (a change of \
                 QoS class; the kubelet refuses it too)",
                pod.qos.as_str()
            )));
        }
        let mask = held
            .iter()
            .fold(NumaMask::EMPTY, |m, b| m.union(b.numa_affinity));
        // Check every growth first: a refusal changes nothing.
        for (resource, &want) in &requested {
            let had = old.get(resource.as_str()).copied().unwrap_or(0);
            if want <= had {
                continue;
            }
            let more = want - had;
            let have = sum_over(mask, |n| free(self.machine_state(), n, resource));
            if have < more {
                return Err(ProviderError::resize_infeasible(format!(
                    "{who} cannot grow its {resource} from {} to {} on {}: {} more needed, {} \
                     free there",
                    BinarySi(had),
                    BinarySi(want),
                    nodes(mask),
                    BinarySi(more),
                    BinarySi(have)
                )));
            }
        }
        let mut blocks = Vec::with_capacity(requested.len());
        for b in &held {
            match requested.get(&b.resource) {
                Some(&want) if want > 0 => {
                    if want > b.size {
                        take_bytes(&mut self.state, b.numa_affinity, &b.resource, want - b.size);
                    } else {
                        give_bytes(&mut self.state, b.numa_affinity, &b.resource, b.size - want);
                    }
                    blocks.push(Block {
                        size: want,
                        ..b.clone()
                    });
                }
                // No longer requested: released as a release does.
                _ => unreserve(&mut self.state, b),
            }
        }
        for (resource, &want) in &requested {
            if want > 0 && !old.contains_key(resource.as_str()) {
                reserve(&mut self.state, mask, resource, want);
                blocks.push(Block {
                    numa_affinity: mask,
                    resource: resource.clone(),
                    size: want,
                });
            }
        }
        tracing::info!(pod = %pod.uid, container = %container.name, mems = %mask, "resized memory");
        let answer = allocation_of(&blocks);
        let per_pod = self.assignments.entry(pod.uid.clone()).or_default();
        if blocks.is_empty() {
            // Requests nothing pinned any more (not a Guaranteed pod's
            // container): as released.
            per_pod.remove(&container.name);
            if per_pod.is_empty() {
                self.assignments.remove(&pod.uid);
            }
        } else {
            per_pod.insert(container.name.clone(), blocks);
        }
        Ok(answer)
    }
}
