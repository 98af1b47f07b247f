//! Pods with pod-level resources (`spec.resources`) under the kubelet's
//! `PodLevelResourceManagers` feature gate (Kubernetes 1.36 alpha, 1.37
//! beta and off by default; `[config.feature_gates]` turns it on).
//!
//! With the gate off (the default) the static policy leaves such pods
//! alone: no hints and no memory pinning, as the kubelet does. With it on:
//!
//! * container scope: a container is managed only when it is Guaranteed
//!   on its own (equal `cpu` and `memory` requests and limits);
//! * pod scope: the pod's pod-level `memory` and `hugepages-*` requests
//!   are placed once on the pod's NUMA nodes (the kubelet's `AllocatePod`)
//!   and recorded as the pod's blocks; every container gets blocks on
//!   those nodes — an eligible container its own requests, a regular init
//!   container without requests everything but the sidecars' memory, the
//!   other containers what the exclusive ones leave (the pod's shared
//!   pool). The containers' blocks are shares of the pod's: the memory
//!   goes back with the pod's last container.
//!
//! A pod whose exclusive containers would leave the containers that need
//! the pod's shared pool without memory is refused (reason
//! `EmptyPodSharedPoolError`; its pod-scope hints are empty lists).

use std::collections::BTreeMap;

use topomgr_sdk::{Allocation, ContainerView, NumaMask, PodView, ProviderError, TopologyHint};

use crate::allocate::allocation_of;
use crate::hints::{eligible_requests, pod_scope_requests, Requested};
use crate::state::{reserve, Block};
use crate::MemoryProvider;

/// The kubelet's reason for a pod-level pod without memory for its shared containers.
pub const EMPTY_POD_SHARED_POOL_ERROR: &str = "EmptyPodSharedPoolError";

fn blocks_on(mask: NumaMask, amounts: &Requested) -> Vec<Block> {
    amounts
        .iter()
        .filter(|(_, &size)| size > 0)
        .map(|(r, &size)| Block {
            numa_affinity: mask,
            resource: r.clone(),
            size,
        })
        .collect()
}

impl MemoryProvider {
    /// The kubelet's `validatePodScopeResources`: whether the pod-level
    /// memory leaves a non-empty pool of every resource for the
    /// containers that need the pod's shared pool. `Err` carries the
    /// kubelet's message.
    pub fn validate_pod_scope_resources(&self, pod: &PodView) -> Result<(), String> {
        let gate = self.pod_level_managers;
        let total = pod_scope_requests(pod, gate);
        let mut shared_long_running = false;
        let mut exclusive: Requested = BTreeMap::new();
        for c in &pod.init_containers {
            let reqs = eligible_requests(pod, c, gate);
            if !c.sidecar {
                if !reqs.is_empty() {
                    for (r, &t) in &total {
                        let pool = t.saturating_sub(exclusive.get(r).copied().unwrap_or(0));
                        let want = reqs.get(r).copied().unwrap_or(0);
                        if want > pool {
                            return Err(format!(
                                "pod rejected, largest exclusive init container requests {want} of {r}, but only {pool} available"
                            ));
                        }
                    }
                } else if let Some(r) = total
                    .iter()
                    .find(|(r, &t)| exclusive.get(*r).copied().unwrap_or(0) >= t)
                    .map(|(r, _)| r)
                {
                    return Err(format!(
                        "pod rejected, pod has shared init containers but no {r} available for them"
                    ));
                }
                continue;
            }
            if reqs.is_empty() {
                shared_long_running = true;
            }
            for (r, q) in reqs {
                *exclusive.entry(r).or_insert(0) += q;
            }
        }
        for c in &pod.containers {
            let reqs = eligible_requests(pod, c, gate);
            if reqs.is_empty() {
                shared_long_running = true;
            }
            for (r, q) in reqs {
                *exclusive.entry(r).or_insert(0) += q;
            }
        }
        if shared_long_running {
            if let Some(r) = total
                .iter()
                .find(|(r, &t)| exclusive.get(*r).copied().unwrap_or(0) >= t)
                .map(|(r, _)| r)
            {
                return Err(format!(
                    "pod rejected, sum of exclusive container {r} requests equals pod budget, leaving no memory for shared containers"
                ));
            }
        }
        Ok(())
    }

    /// `container`'s share of its pod's pod-level memory, placing the
    /// pod's memory (the kubelet's `AllocatePod`) at its first container.
    pub(crate) fn allocate_in_pod_blocks(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        if !self.pod_blocks.contains_key(&pod.uid) {
            self.allocate_pod(pod, hint)?;
        }
        let Some(pod_blocks) = self.pod_blocks.get(&pod.uid) else {
            // No pod-level memory requested: nothing is pinned.
            return Ok(Allocation::default());
        };
        let pod_mask = pod_blocks
            .iter()
            .fold(NumaMask::EMPTY, |m, b| m.union(b.numa_affinity));
        match self
            .assignments
            .get(&pod.uid)
            .and_then(|m| m.get(&container.name))
        {
            // Every container runs on the pod's nodes, also one whose
            // share is empty.
            Some(blocks) => {
                let a = allocation_of(blocks);
                Ok(if a.mems.is_empty() {
                    Allocation::default().with_mems(pod_mask)
                } else {
                    a
                })
            }
            None => Err(ProviderError::admission(format!(
                "container {:?} is not part of the pod-level memory of pod {}; release the pod \
                 and admit it again",
                container.name, pod.uid
            ))),
        }
    }

    /// The kubelet's `AllocatePod`: the pod's pod-level memory placed
    /// honouring `hint`, and every container's share. On error nothing
    /// changes.
    pub fn allocate_pod(
        &mut self,
        pod: &PodView,
        hint: &TopologyHint,
    ) -> Result<(), ProviderError> {
        let total = pod_scope_requests(pod, true);
        if total.is_empty() {
            return Ok(());
        }
        self.validate_pod_scope_resources(pod)
            .map_err(|why| ProviderError::new(EMPTY_POD_SHARED_POOL_ERROR, why))?;
        let who = format!("pod {}/{}", pod.namespace, pod.name);
        let mask = self.resolve_mask(&who, &pod.uid, &total, hint)?;
        let mut shares: BTreeMap<String, Vec<Block>> = BTreeMap::new();
        let mut sidecars: Requested = BTreeMap::new();
        let left = |sidecars: &Requested| -> Requested {
            total
                .iter()
                .map(|(r, &t)| {
                    (
                        r.clone(),
                        t.saturating_sub(sidecars.get(r).copied().unwrap_or(0)),
                    )
                })
                .collect()
        };
        for c in &pod.init_containers {
            let reqs = eligible_requests(pod, c, true);
            if reqs.is_empty() {
                if !c.sidecar {
                    shares.insert(c.name.clone(), blocks_on(mask, &left(&sidecars)));
                }
                continue;
            }
            shares.insert(c.name.clone(), blocks_on(mask, &reqs));
            if c.sidecar {
                for (r, q) in reqs {
                    *sidecars.entry(r).or_insert(0) += q;
                }
            }
        }
        let mut pool = left(&sidecars);
        for c in &pod.containers {
            let reqs = eligible_requests(pod, c, true);
            if reqs.is_empty() {
                continue;
            }
            for (r, q) in &reqs {
                if let Some(p) = pool.get_mut(r) {
                    *p = p.saturating_sub(*q);
                }
            }
            shares.insert(c.name.clone(), blocks_on(mask, &reqs));
        }
        let pool_blocks = blocks_on(mask, &pool);
        let pod_blocks: Vec<Block> = total
            .iter()
            .map(|(r, &size)| Block {
                numa_affinity: mask,
                resource: r.clone(),
                size,
            })
            .collect();
        for b in &pod_blocks {
            reserve(&mut self.state, mask, &b.resource, b.size);
        }
        let per_pod = self.assignments.entry(pod.uid.clone()).or_default();
        for c in pod.init_containers.iter().chain(&pod.containers) {
            let blocks = shares
                .remove(&c.name)
                .unwrap_or_else(|| pool_blocks.clone());
            per_pod.insert(c.name.clone(), blocks);
        }
        self.pod_blocks.insert(pod.uid.clone(), pod_blocks);
        tracing::info!(pod = %pod.uid, mems = %mask, "allocated pod-level memory");
        Ok(())
    }
}
