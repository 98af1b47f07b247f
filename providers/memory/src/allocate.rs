//! Allocation and release with the kubelet's static-policy rules: the merged
//! hint is used as is when its free memory holds the request, otherwise it is
//! extended to the best hint containing it; a hint with no affinity becomes
//! the best hint of all; the multi-NUMA group rules are checked last. Memory
//! of regular init containers is reused by the containers after them.

use topomgr_sdk::{Allocation, ContainerView, NumaMask, PodView, ProviderError, TopologyHint};

use topomgr_sdk::quantity::BinarySi;

use crate::hints::{eligible_requests, Hinter, Requested};
use crate::state::{free, reserve, sum_over, unreserve, Block, MachineState};
use crate::MemoryProvider;

/// Describes the first requested resource whose free bytes on `mask` fall
/// short, e.g. `not enough memory on NUMA node 1: requested 6Gi, 4Gi free`.
pub fn shortfall(state: &MachineState, mask: NumaMask, requested: &Requested) -> Option<String> {
    requested.iter().find_map(|(r, &q)| {
        let have = sum_over(mask, |n| free(state, n, r));
        (have < q).then(|| {
            format!(
                "not enough {r} on NUMA {} {mask}: requested {}, {} free",
                if mask.len() == 1 { "node" } else { "nodes" },
                BinarySi(q),
                BinarySi(have)
            )
        })
    })
}

/// The kubelet's `isAffinityViolatingNUMAAllocations`, with the reason: a
/// multi-node `mask` may not contain a node holding single-node allocations
/// nor a node grouped with other nodes than exactly `mask`.
pub fn violation(state: &MachineState, mask: NumaMask) -> Option<String> {
    if mask.len() == 1 {
        return None;
    }
    mask.iter().find_map(|n| {
        let s = state.get(&n)?;
        if s.number_of_assignments <= 0 {
            return None;
        }
        if s.cells.len() == 1 {
            return Some(format!(
                "NUMA node {n} holds single-NUMA-node memory allocations, so it cannot be part \
                 of the multi-node set {mask}"
            ));
        }
        (s.cells != mask).then(|| {
            format!(
                "NUMA node {n} is allocated together with NUMA nodes {}, so it can only be used \
                 with exactly that set, not {mask}",
                s.cells
            )
        })
    })
}

/// Why no NUMA set of the machine holds the request.
fn why_nothing_fits(h: &Hinter<'_>) -> String {
    let all = h.state.keys().fold(NumaMask::EMPTY, |m, &n| m.with(n));
    if let Some(s) = shortfall(h.state, all, h.requested) {
        return s;
    }
    "every NUMA node set with enough free memory is ruled out by the multi-NUMA rules \
     (a node allocated with a group of nodes can only be used with exactly that group, \
     and a node with single-node allocations cannot join a group)"
        .to_owned()
}

impl MemoryProvider {
    /// The static policy's `Allocate`.
    pub(crate) fn allocate_static(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        let who = format!(
            "container {:?} of pod {}/{}",
            container.name, pod.namespace, pod.name
        );
        if let Some(blocks) = self
            .blocks(&pod.uid, &container.name)
            .map(<[Block]>::to_vec)
        {
            self.update_reusable(pod, container, &blocks);
            tracing::info!(pod = %pod.uid, container = %container.name, "container already holds memory");
            return Ok(allocation_of(&blocks));
        }
        let requested = eligible_requests(pod, container, self.pod_level_managers);
        if requested.is_empty() {
            return Ok(Allocation::default());
        }
        let mask = self.resolve_mask(&who, &pod.uid, &requested, hint)?;
        let mut blocks = Vec::with_capacity(requested.len());
        for (resource, &size) in &requested {
            blocks.push(Block {
                numa_affinity: mask,
                resource: resource.clone(),
                size,
            });
            let reuse = self
                .reusable
                .get(&pod.uid)
                .and_then(|m| m.get(&mask))
                .and_then(|m| m.get(resource))
                .copied()
                .unwrap_or(0);
            reserve(&mut self.state, mask, resource, size.saturating_sub(reuse));
        }
        self.update_reusable(pod, container, &blocks);
        self.assignments
            .entry(pod.uid.clone())
            .or_default()
            .insert(container.name.clone(), blocks.clone());
        self.update_init_blocks(pod, container, &blocks);
        tracing::info!(
            pod = %pod.uid,
            container = %container.name,
            mems = %mask,
            "allocated memory"
        );
        Ok(allocation_of(&blocks))
    }

    /// The NUMA nodes the kubelet's static policy places `requested` on
    /// for the merged `hint`: the hint when its free memory holds the
    /// request, else the best hint containing it; the best hint of all
    /// for a hint without affinity; then the multi-NUMA group rules.
    pub(crate) fn resolve_mask(
        &self,
        who: &str,
        pod_uid: &str,
        requested: &Requested,
        hint: &TopologyHint,
    ) -> Result<NumaMask, ProviderError> {
        let all = self.machine.mask();
        if let Some(m) = hint.affinity {
            let outside = m.difference(all);
            if !outside.is_empty() {
                return Err(ProviderError::admission(format!(
                    "{who}: the hint names NUMA nodes {outside}, which this machine does not have \
                     (its nodes are {all})"
                )));
            }
        }
        let hinter = Hinter {
            state: &self.state,
            reusable: self.reusable.get(pod_uid),
            requested,
        };
        let mut best = *hint;
        let mask = match hint.affinity {
            Some(m) => m,
            None => {
                let Some(default) = hinter.best_containing(NumaMask::EMPTY)? else {
                    return Err(ProviderError::admission(format!(
                        "{who}: failed to get the default NUMA affinity, no NUMA nodes with \
                         enough memory is available: {}",
                        why_nothing_fits(&hinter)
                    )));
                };
                if !default.preferred && hint.preferred {
                    return Err(ProviderError::admission(format!(
                        "{who}: failed to find the default preferred hint: the narrowest NUMA \
                         node set that can hold the request now, {}, is wider than the fewest \
                         nodes whose capacity could hold it ({})",
                        default.affinity.unwrap_or_default(),
                        hinter.min_width()?
                    )));
                }
                best = default;
                default.affinity.unwrap_or_default()
            }
        };
        let mask = if hinter.free_fits(mask) {
            mask
        } else {
            let short = shortfall(&self.state, mask, requested).unwrap_or_default();
            let Some(extended) = hinter.best_containing(mask)? else {
                return Err(ProviderError::admission(format!(
                    "{who}: failed to find NUMA nodes to extend the topology hint {mask}: \
                     {short}, and no NUMA node set containing {mask} can hold the request \
                     (capacity, free memory and the multi-NUMA rules considered)"
                )));
            };
            let ext = extended.affinity.unwrap_or_default();
            if !extended.preferred && best.preferred {
                return Err(ProviderError::admission(format!(
                    "{who}: failed to find the extended preferred hint: {short}; the narrowest \
                     NUMA node set containing {mask} that can hold the request, {ext}, is wider \
                     than the fewest nodes whose capacity could hold it ({})",
                    hinter.min_width()?
                )));
            }
            ext
        };
        if let Some(why) = violation(&self.state, mask) {
            return Err(ProviderError::admission(format!(
                "{who}: preferred hint violates NUMA node allocation: {why}"
            )));
        }
        Ok(mask)
    }

    /// The static policy's `RemoveContainer`.
    pub(crate) fn release_static(&mut self, pod_uid: &str, container: &str) {
        let Some(per_pod) = self.assignments.get_mut(pod_uid) else {
            return;
        };
        let Some(blocks) = per_pod.remove(container) else {
            return;
        };
        if per_pod.is_empty() {
            self.assignments.remove(pod_uid);
            // Nothing of the pod is left to reuse (a pod admitted again
            // under the same uid must not count on it).
            self.reusable.remove(pod_uid);
        }
        if let Some(pod_blocks) = self.pod_blocks.get(pod_uid) {
            // Pod-level memory goes back with the pod's last container.
            if !self.assignments.contains_key(pod_uid) {
                for b in pod_blocks {
                    unreserve(&mut self.state, b);
                }
                self.pod_blocks.remove(pod_uid);
                tracing::info!(pod = %pod_uid, "released pod-level memory");
            }
            return;
        }
        for b in &blocks {
            unreserve(&mut self.state, b);
        }
        tracing::info!(pod = %pod_uid, container = %container, "released memory");
    }

    fn blocks(&self, pod_uid: &str, container: &str) -> Option<&[Block]> {
        self.assignments
            .get(pod_uid)?
            .get(container)
            .map(Vec::as_slice)
    }

    /// The kubelet's `updatePodReusableMemory`: a regular init container's
    /// blocks become reusable (largest per node set and resource); any other
    /// container consumes what it reuses. Other pods' entries are dropped.
    fn update_reusable(&mut self, pod: &PodView, container: &ContainerView, blocks: &[Block]) {
        self.reusable.retain(|uid, _| *uid == pod.uid);
        let regular_init = pod
            .init_containers
            .iter()
            .find(|c| c.name == container.name)
            .is_some_and(|c| !c.sidecar);
        let per_pod = self.reusable.entry(pod.uid.clone()).or_default();
        for b in blocks {
            if regular_init {
                let e = per_pod
                    .entry(b.numa_affinity)
                    .or_default()
                    .entry(b.resource.clone())
                    .or_insert(0);
                *e = (*e).max(b.size);
            } else if let Some(e) = per_pod
                .get_mut(&b.numa_affinity)
                .and_then(|m| m.get_mut(&b.resource))
            {
                *e = e.saturating_sub(b.size);
            }
        }
        if per_pod.is_empty() {
            self.reusable.remove(&pod.uid);
        }
    }

    /// The kubelet's `updateInitContainersMemoryBlocks`: the init containers
    /// before `container` give up the memory it reused, so the blocks of the
    /// pod add up to what the pod holds.
    fn update_init_blocks(&mut self, pod: &PodView, container: &ContainerView, blocks: &[Block]) {
        let Some(per_pod) = self.assignments.get_mut(&pod.uid) else {
            return;
        };
        for cb in blocks {
            let mut size = cb.size;
            for init in &pod.init_containers {
                if init.name == container.name || size == 0 {
                    break;
                }
                if init.sidecar {
                    continue;
                }
                let Some(init_blocks) = per_pod.get_mut(&init.name) else {
                    continue;
                };
                for ib in init_blocks.iter_mut() {
                    if ib.size == 0
                        || ib.resource != cb.resource
                        || ib.numa_affinity != cb.numa_affinity
                    {
                        continue;
                    }
                    let used = ib.size.min(size);
                    ib.size -= used;
                    size -= used;
                }
            }
        }
    }
}

/// The allocation a container's blocks give: their nodes as `mems`.
pub fn allocation_of(blocks: &[Block]) -> Allocation {
    Allocation::default().with_mems(
        blocks
            .iter()
            .fold(NumaMask::EMPTY, |m, b| m.union(b.numa_affinity)),
    )
}
