//! Pods with pod-level resources (`spec.resources`) under the kubelet's
//! `PodLevelResourceManagers` feature gate (Kubernetes 1.36 alpha, 1.37
//! beta and off by default; the provider's `feature_gates` config turns it
//! on).
//!
//! With the gate off (the default), the static policy leaves such pods
//! alone: no hints and the shared pool for every container, as the kubelet
//! does. With it on, in pod scope the pod gets one NUMA-aligned CPU set of
//! its integer pod-level `cpu` request (the kubelet's `AllocatePod`
//! "bubble"), partitioned among its containers in spec order:
//!
//! * a regular init container with integer CPUs (and equal `cpu` and
//!   `memory` requests and limits) takes them from the set minus the
//!   sidecars' CPUs so far; one without runs on all of that;
//! * a sidecar with integer CPUs takes them for good; one without shares
//!   the pod's pool;
//! * app containers with integer CPUs take them from the set minus the
//!   sidecars' CPUs, one after the other; the rest (and CPU-less sidecars)
//!   share what is left, the pod's shared pool.
//!
//! A pod whose exclusive containers would leave the containers that need
//! the pod's shared pool without CPUs is refused (reason
//! `EmptyPodSharedPoolError`; its pod-scope hints are an empty list). The
//! set goes back to the node's shared pool with the pod's last container.
//! In container scope each eligible container gets its own exclusive CPUs
//! and the others run in the node's shared pool.

use std::collections::BTreeMap;

use topomgr_sdk::{ContainerView, NumaMask, PodView};

use crate::error::CpuError;
use crate::policy::{guaranteed_cpus, pod_guaranteed_cpus, Placement, StaticPolicy};
use crate::topology::{to_cpuset, Cpus};

impl StaticPolicy {
    /// The kubelet's `validatePodScopeResources`: whether the pod-level
    /// CPUs leave a non-empty pool for every container that needs the
    /// pod's shared pool.
    pub fn validate_pod_scope_resources(&self, pod: &PodView) -> Result<(), CpuError> {
        let gate = self.pod_level_managers;
        let total = pod_guaranteed_cpus(pod, gate);
        let mut shared_long_running = false;
        let mut long_running_exclusive = 0usize;
        for c in &pod.init_containers {
            let n = guaranteed_cpus(pod, c, gate);
            if !c.sidecar {
                if n > 0 {
                    let pool = total.saturating_sub(long_running_exclusive);
                    if n > pool {
                        return Err(CpuError::EmptyPodSharedPool(format!(
                            "pod rejected, largest exclusive init container requests {n} cpus, but only {pool} available"
                        )));
                    }
                } else if long_running_exclusive >= total {
                    return Err(CpuError::EmptyPodSharedPool(
                        "pod rejected, pod has shared init containers but no cpus available for them"
                            .to_owned(),
                    ));
                }
                continue;
            }
            if n == 0 {
                shared_long_running = true;
            } else {
                long_running_exclusive += n;
            }
        }
        for c in &pod.containers {
            match guaranteed_cpus(pod, c, gate) {
                0 => shared_long_running = true,
                n => long_running_exclusive += n,
            }
        }
        if shared_long_running && long_running_exclusive >= total {
            return Err(CpuError::EmptyPodSharedPool(
                "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// `container`'s CPUs of its pod's pod-level set, allocating the set
    /// (the kubelet's `AllocatePod`) at the pod's first container.
    pub(crate) fn allocate_in_pod_set(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        affinity: Option<NumaMask>,
    ) -> Result<Placement, CpuError> {
        if !self.pod_sets.contains_key(&pod.uid) {
            if pod_guaranteed_cpus(pod, true) == 0 {
                // No integer pod-level CPUs: the node's shared pool.
                return Ok(self.shared());
            }
            self.allocate_pod(pod, affinity)?;
        }
        match self
            .assignments
            .get(&pod.uid)
            .and_then(|m| m.get(&container.name))
        {
            Some(cpus) => self.held_placement(&pod.uid, &container.name, cpus),
            None => Err(CpuError::NotInPodSet {
                pod: pod.uid.clone(),
                container: container.name.clone(),
            }),
        }
    }

    /// The kubelet's `AllocatePod`: one CPU set for the pod, honouring
    /// `affinity`, partitioned among its containers. On error nothing
    /// changes.
    pub fn allocate_pod(
        &mut self,
        pod: &PodView,
        affinity: Option<NumaMask>,
    ) -> Result<(), CpuError> {
        let total = pod_guaranteed_cpus(pod, true);
        if total == 0 {
            return Ok(());
        }
        self.validate_pod_scope_resources(pod)?;
        self.enforce_smt_alignment(total)?;
        let before = self.default_set.clone();
        let bubble = self.allocate_cpus(total, affinity, &Cpus::new())?;
        match self.partition(pod, &bubble) {
            Ok(parts) => {
                tracing::info!(pod = %pod.uid, cpus = %to_cpuset(&bubble), "allocated pod-level CPUs");
                self.pod_sets.insert(pod.uid.clone(), bubble);
                self.assignments.insert(pod.uid.clone(), parts);
                Ok(())
            }
            Err(e) => {
                self.default_set = before;
                Err(e)
            }
        }
    }

    /// Every container's CPUs of the pod-level set `bubble`.
    fn partition(&self, pod: &PodView, bubble: &Cpus) -> Result<BTreeMap<String, Cpus>, CpuError> {
        let minus = |a: &Cpus, b: &Cpus| -> Cpus { a.difference(b).copied().collect() };
        let mut exclusive: BTreeMap<String, Cpus> = BTreeMap::new();
        let mut sidecars = Cpus::new();
        for c in &pod.init_containers {
            let n = guaranteed_cpus(pod, c, true);
            if n > 0 {
                let cpus = self.take(&minus(bubble, &sidecars), n, 0)?;
                if c.sidecar {
                    sidecars.extend(cpus.iter().copied());
                }
                exclusive.insert(c.name.clone(), cpus);
            } else if !c.sidecar {
                exclusive.insert(c.name.clone(), minus(bubble, &sidecars));
            }
        }
        let mut pool = minus(bubble, &sidecars);
        for c in &pod.containers {
            let n = guaranteed_cpus(pod, c, true);
            if n > 0 {
                let cpus = self.take(&pool, n, 0)?;
                pool = minus(&pool, &cpus);
                exclusive.insert(c.name.clone(), cpus);
            }
        }
        Ok(pod
            .init_containers
            .iter()
            .chain(&pod.containers)
            .map(|c| {
                let cpus = exclusive.remove(&c.name).unwrap_or_else(|| pool.clone());
                (c.name.clone(), cpus)
            })
            .collect())
    }
}
