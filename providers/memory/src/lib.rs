//! # topomgr-provider-memory
//!
//! The memory and hugepages hint provider of topomgr: the kubelet Memory
//! Manager's **static** policy, as a plugin (`libtopomgr_provider_memory.so`).
//!
//! * Resources: `memory` and every `hugepages-<size>` the machine has
//!   (sizes from sysfs: `2048kB` -> `hugepages-2Mi`, `1048576kB` ->
//!   `hugepages-1Gi`).
//! * Per NUMA node and resource: total (MemTotal, or pages x page size),
//!   system-reserved (config), allocatable = total - reserved (for regular
//!   memory also minus every hugepage byte of the node), reserved and free.
//! * Only Guaranteed pods are managed; other pods get no hint map and an
//!   empty allocation.
//! * Hints, allocation, release and the multi-NUMA group rules follow the
//!   kubelet (see [`hints`] and [`allocate`]); the allocation's `mems` is
//!   the NUMA set of the container's memory.
//! * In-place resize ([`resize`]): a Guaranteed container's memory and
//!   hugepages are booked again on the NUMA nodes it holds memory on
//!   (growth refused, `ResizeInfeasible`, with the amounts when it does not
//!   fit there; a shrink gives the difference back).
//! * State is checkpointed in the kubelet's `memory_manager_state` JSON shape
//!   (plus reusable init-container memory). Restore is reconcile
//!   ([`reconcile`]): unlike the kubelet's `validateState`, which refuses a
//!   state that does not match the machine, the assignments are kept on the
//!   machine and config as they are now, and what cannot be given any more
//!   is reported as conflicts. Only bytes that are not a checkpoint are
//!   refused, changing nothing.
//!
//! Config (`[providers.memory.config]`, see also `docs/providers.md`):
//!
//! ```toml
//! policy = "static"                 # or "none"
//! [providers.memory.config.reserved_memory.0]
//! memory = "1Gi"
//! hugepages-1Gi = "2Gi"
//! ```
//!
//! Like the kubelet, the static policy needs some reserved `memory`.
//!
//! Pods with pod-level `spec.resources` follow the kubelet's
//! `PodLevelResourceManagers` gate ([`podlevel`]): off (the default, as in
//! Kubernetes 1.37), they get no hints and no memory pinning; on, in pod
//! scope the pod's memory is placed once and shared out among its
//! containers. The inventory ([`inventory`]) reports `memory` and
//! `hugepages-<size>` per NUMA node.
//!
//! Deliberate differences from the kubelet, all for inputs the kubelet never
//! sees or would mishandle: reserved memory above what a node has is a
//! config error (the kubelet's unsigned arithmetic would wrap); a hugepage
//! size the machine lacks counts as zero bytes (the kubelet would crash); a
//! container that requests neither memory nor hugepages (impossible in a
//! Guaranteed pod) gets an empty allocation; error messages name the node,
//! the resource and the amounts; a failed pod-level allocation changes
//! nothing. The provider learns the host's scope from the calls it gets
//! (pod-scope hints, then allocations).

pub mod allocate;
pub mod config;
pub mod hints;
pub mod inventory;
pub mod machine;
pub mod podlevel;
pub mod reconcile;
pub mod resize;
pub mod state;

use topomgr_sdk::{
    Allocation, ContainerView, Inventory, PodView, Provider, ProviderContext, ProviderError,
    ProviderHints, QosClass, Reconciled, TopologyHint,
};

use crate::config::{Config, Policy};
use crate::hints::{eligible_requests, pod_scope_requests, regenerate, Hinter, Requested};
use crate::machine::{MachineMemory, MEMORY};
use crate::reconcile::Restored;
use crate::state::{
    default_state, reusable_entries, Assignments, Checkpoint, MachineState, PodBlocks, Reusable,
};

/// The memory provider.
#[derive(Debug, Clone)]
pub struct MemoryProvider {
    policy: Policy,
    machine: MachineMemory,
    state: MachineState,
    assignments: Assignments,
    reusable: Reusable,
    /// The `PodLevelResourceManagers` feature gate.
    pod_level_managers: bool,
    /// Pod-level blocks of pods with pod-level resources (pod scope, gate on).
    pod_blocks: PodBlocks,
    /// The pod whose pod-scope hints were asked for last: its `allocate`
    /// calls are a pod-scope admission.
    pod_scope: Option<String>,
}

fn config_error(message: impl std::fmt::Display) -> ProviderError {
    ProviderError::config(format!("memory provider config: {message}"))
}

fn checkpoint_error(message: impl std::fmt::Display) -> ProviderError {
    ProviderError::new(
        "InvalidCheckpoint",
        format!(
            "memory provider state: the saved state is not a checkpoint of this memory provider \
             ({message}); only the provider that wrote it (another library or version \
             configured under this name) reads it"
        ),
    )
}

impl MemoryProvider {
    /// The current machine state.
    pub fn machine_state(&self) -> &MachineState {
        &self.state
    }

    /// The current container assignments.
    pub fn assignments(&self) -> &Assignments {
        &self.assignments
    }

    /// Adopts a saved state on this machine and config (see [`reconcile`]):
    /// never refused for a difference; an error, changing nothing, only for
    /// bytes that are not a checkpoint of this provider.
    pub fn reconcile(&mut self, saved: &[u8]) -> Result<Restored, ProviderError> {
        let cp: Checkpoint = serde_json::from_slice(saved).map_err(checkpoint_error)?;
        Ok(self.reconcile_checkpoint(cp))
    }

    fn hints_for(
        &self,
        pod_uid: &str,
        requested: &Requested,
    ) -> Result<ProviderHints, ProviderError> {
        if requested.is_empty() {
            return Ok(Some(Default::default()));
        }
        Hinter {
            state: &self.state,
            reusable: self.reusable.get(pod_uid),
            requested,
        }
        .answer()
    }

    fn managed(&self, pod: &PodView) -> bool {
        self.policy == Policy::Static && pod.qos == QosClass::Guaranteed
    }

    /// The gate is off and the pod sets pod-level resources: the kubelet
    /// leaves its memory alone (no hints, no allocation).
    fn skips_pod_level(&self, pod: &PodView) -> bool {
        !self.pod_level_managers && pod.sets_pod_level_resources()
    }

    /// The pod sets pod-level resources, the gate is on, and the host is
    /// admitting it in pod scope.
    fn pod_level_in_pod_scope(&self, pod: &PodView) -> bool {
        self.pod_level_managers
            && pod.sets_pod_level_resources()
            && self.pod_scope.as_deref() == Some(pod.uid.as_str())
    }
}

impl Provider for MemoryProvider {
    fn new(ctx: &ProviderContext<'_>) -> Result<Self, ProviderError> {
        let config = Config::from_value(&ctx.config.0).map_err(config_error)?;
        let machine = MachineMemory::new(ctx.machine, &config.reserved).map_err(config_error)?;
        if config.policy == Policy::Static {
            let reserved: u64 = config
                .reserved
                .values()
                .filter_map(|m| m.get(MEMORY))
                .fold(0u64, |a, b| a.saturating_add(*b));
            if reserved == 0 {
                return Err(config_error(
                    "policy \"static\" needs system-reserved memory (the kubelet refuses it \
                     without); add e.g. reserved_memory.0 = { memory = \"1Gi\" } to this \
                     provider's config table",
                ));
            }
        }
        let state = default_state(&machine);
        tracing::info!(
            policy = config.policy.kubelet_name(),
            nodes = machine.nodes.len(),
            "memory provider ready"
        );
        Ok(MemoryProvider {
            policy: config.policy,
            machine,
            state,
            assignments: Assignments::new(),
            reusable: Reusable::new(),
            pod_level_managers: config.feature_gates.pod_level_resource_managers,
            pod_blocks: PodBlocks::new(),
            pod_scope: None,
        })
    }

    fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        self.pod_scope = None;
        if !self.managed(pod) || self.skips_pod_level(pod) {
            return Ok(None);
        }
        let requested = eligible_requests(pod, container, self.pod_level_managers);
        if let Some(blocks) = self
            .assignments
            .get(&pod.uid)
            .and_then(|m| m.get(&container.name))
        {
            return Ok(regenerate(blocks, &requested));
        }
        self.hints_for(&pod.uid, &requested)
    }

    fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        self.pod_scope = Some(pod.uid.clone());
        if !self.managed(pod) || self.skips_pod_level(pod) {
            return Ok(None);
        }
        let requested = pod_scope_requests(pod, self.pod_level_managers);
        if self.pod_level_managers && pod.sets_pod_level_resources() {
            if let Err(why) = self.validate_pod_scope_resources(pod) {
                tracing::info!(pod = %pod.uid, %why, "pod-level resources leave no memory for the pod's shared containers; no hints");
                return Ok(Some(
                    requested
                        .keys()
                        .map(|r| (r.clone(), Some(topomgr_sdk::HintSet::unsatisfiable())))
                        .collect(),
                ));
            }
        }
        if let Some(per_pod) = self.assignments.get(&pod.uid) {
            for c in pod.init_containers.iter().chain(&pod.containers) {
                if let Some(blocks) = per_pod.get(&c.name) {
                    return Ok(regenerate(blocks, &requested));
                }
            }
        }
        self.hints_for(&pod.uid, &requested)
    }

    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        if !self.managed(pod) || self.skips_pod_level(pod) {
            return Ok(Allocation::default());
        }
        if self.pod_level_in_pod_scope(pod) {
            return self.allocate_in_pod_blocks(pod, container, hint);
        }
        self.allocate_static(pod, container, hint)
    }

    fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        self.release_static(pod_uid, container);
        Ok(())
    }

    /// See [`resize`]: memory is booked again on the NUMA nodes the
    /// container holds memory on (its own blocks; `hint` and `current`
    /// are what the host knows of them).
    fn resize(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        _current: &Allocation,
        _hint: &TopologyHint,
    ) -> Result<Option<Allocation>, ProviderError> {
        self.resize_static(pod, container).map(Some)
    }

    fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        let cp = Checkpoint {
            policy_name: self.policy.kubelet_name().to_owned(),
            // The none policy writes no machine state (as the kubelet's),
            // unless it keeps assignments of the static policy.
            machine_state: if self.policy == Policy::Static || !self.assignments.is_empty() {
                self.state.clone()
            } else {
                MachineState::new()
            },
            entries: self.assignments.clone(),
            reusable: reusable_entries(&self.reusable),
            pod_entries: self.pod_blocks.clone(),
        };
        serde_json::to_vec(&cp).map_err(|e| {
            ProviderError::new("CheckpointError", format!("encoding the memory state: {e}"))
        })
    }

    fn restore(&mut self, saved: &[u8]) -> Result<Reconciled, ProviderError> {
        Ok(self.reconcile(saved)?.report)
    }

    fn inventory(&self) -> Result<Inventory, ProviderError> {
        let state = (self.policy == Policy::Static).then_some(&self.state);
        Ok(inventory::memory_inventory(&self.machine, state))
    }
}

topomgr_sdk::export_provider!(MemoryProvider);

#[cfg(test)]
mod reconcile_tests;
#[cfg(test)]
mod roundtrip_tests;
#[cfg(test)]
mod tests;
