//! # topomgr-provider-cpu
//!
//! The CPU manager hint provider: the kubelet CPU Manager's `static` policy
//! (or `none`) as a topomgr plugin.
//!
//! * Guaranteed pods' containers with a whole number of CPUs get exclusive
//!   CPUs, chosen topology-aware exactly as the kubelet's `takeByTopology`
//!   ([`assignment`]), honouring the merged hint (hinted NUMA nodes first,
//!   then the rest). Every other container gets the shared pool (the
//!   kubelet's default CPU set) with `exclusive = false`.
//! * `reserved_cpus` are never handed out exclusively.
//! * Hints are the kubelet's `GetTopologyHints` / `GetPodTopologyHints`
//!   ([`hints`]); above 8 NUMA nodes in the SDK's compact form.
//! * The options ([`options`]) and their conflicts are the kubelet's.
//! * `Allocation.mems` stays empty: the memory provider owns `cpuset.mems`.
//!
//! Config (`[providers.cpu.config]`, see also `docs/providers.md`):
//!
//! ```toml
//! policy = "static"          # or "none" (default "static")
//! reserved_cpus = "0"        # Linux list of online CPUs; may be empty
//! [providers.cpu.config.options]
//! full-pcpus-only = "true"
//! [providers.cpu.config.feature_gates]
//! PodLevelResourceManagers = false   # the kubelet gate, off by default
//! ```
//!
//! In-place resize ([`resize`], KEP-5554): a container with exclusive
//! CPUs grows on its NUMA nodes keeping its CPUs, shrinks down to the CPUs
//! it was first allocated; moves between the shared pool and exclusive
//! CPUs are refused (reasons in [`error`]). The kubelet's resize tables
//! (kubernetes #140629, v1.37) are ported in `upstream_resize_tables`,
//! with where topomgr's choice of CPUs differs and why.
//!
//! Refusal reasons: `SMTAlignmentError` (full-pcpus-only),
//! `UnexpectedAdmissionError` (not enough free CPUs),
//! `EmptyPodSharedPoolError` (pod-level resources, see [`podlevel`]),
//! `InvalidConfig`, `InvalidCheckpoint` (see [`error`]).
//!
//! The inventory ([`inventory`]) reports `cpu` per NUMA zone in
//! millicores of whole CPUs.
//!
//! Restore is reconcile ([`reconcile`]): saved assignments are kept on the
//! machine and config as they are now; held CPUs that went offline stay
//! their container's and are reported as conflicts; cpusets never name an
//! offline CPU. Only bytes that are not a checkpoint are refused.
//!
//! Differences from the kubelet: no option feature gates (every option is
//! accepted; the one gate followed is `PodLevelResourceManagers`); an
//! empty reserved set is allowed; align-by-socket under the host's
//! single-numa-node policy is not refused (the provider cannot see the
//! host policy); the CPUs reusable from init containers are part of the
//! checkpoint, so chained `topomgr provider cpu allocate --state-dir` calls
//! behave as one kubelet process would. The provider learns the host's
//! scope from the calls it gets (pod-scope hints, then allocations), so a
//! pod-level pod's `topomgr provider cpu allocate` without a
//! `hints --pod-scope` in the same process is allocated as in container
//! scope. A failed pod-level allocation changes nothing (the kubelet keeps
//! the pod's CPU set after a failed partition).
//!
//! Reference version: the kubelet's add (non-resize) path of kubernetes
//! master as of 2026-08, past the changes that alter choices: whole
//! cores and sockets are free only when all their own CPUs are (#140498,
//! hybrid P/E-core machines); `distribute-cpus-across-cores` spreads round
//! robin over cores in core-id order (#140766); `distribute-cpus-across-numa`
//! prefers NUMA-node combinations inside one socket with `align-by-socket`
//! (#139778) and starts at the merged hint's node count (#139456);
//! `prefer-align-cpus-by-uncorecache` orders the uncore caches once for its
//! whole-cache and partial-cache passes (#141026). The
//! kubelet's `cpu_assignment_test.go` tables are ported in the crate's
//! tests (`upstream_tables`). Pods
//! with pod-level `spec.resources` follow the `PodLevelResourceManagers`
//! gate ([`podlevel`]): off (the default), they get no hints and the
//! shared pool. Allocation results mark CPUs `exclusive` when they are not
//! the node's shared pool (a pod-level pod's shared containers share their
//! pod's CPUs). Where the kubelet's
//! distributed remainder loop never ends (fragmented availability), this
//! crate stops and reports an accounting error instead of hanging.

pub mod assignment;
pub mod error;
pub mod hints;
pub mod inventory;
pub mod options;
pub mod podlevel;
pub mod policy;
pub mod reconcile;
pub mod resize;
pub mod state;
#[cfg(test)]
mod testmachines;
pub mod topology;

use std::collections::BTreeMap;

use serde::Deserialize;
use topomgr_sdk::{
    Allocation, ContainerView, CpuSet, HintSet, Inventory, PodView, Provider, ProviderContext,
    ProviderError, ProviderHints, Reconciled, TopologyHint,
};

use crate::error::CpuError;
use crate::options::{OptionsError, StaticOptions};
use crate::policy::StaticPolicy;
use crate::reconcile::Restored;
use crate::state::Checkpoint;
use crate::topology::{from_cpuset, to_cpuset, CpuTopology};

/// The resource name the provider answers for.
pub const RESOURCE: &str = "cpu";

/// The provider's config table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_policy")]
    policy: String,
    #[serde(default)]
    reserved_cpus: String,
    #[serde(default)]
    options: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    feature_gates: FeatureGates,
}

/// The kubelet feature gates the provider follows (`[config.feature_gates]`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FeatureGates {
    /// `PodLevelResourceManagers` (beta, off by default in Kubernetes 1.37).
    #[serde(default, rename = "PodLevelResourceManagers")]
    pod_level_resource_managers: bool,
}

fn default_policy() -> String {
    "static".to_owned()
}

/// The CPU manager provider.
#[derive(Debug)]
pub enum CpuManager {
    /// `policy = "none"`: no hints, every new container on the shared pool
    /// (every usable CPU no exclusive assignment holds). The policy's state
    /// holds only the exclusive assignments kept from the static policy
    /// until they are released (see [`reconcile`]); it has no reserved
    /// CPUs and default options.
    None(Box<StaticPolicy>),
    /// `policy = "static"`.
    Static(Box<StaticPolicy>),
}

impl CpuManager {
    /// Builds the provider from the machine and its config table.
    pub fn from_config(
        machine: &topomgr_sdk::Machine,
        config: &topomgr_sdk::ProviderConfig,
    ) -> Result<Self, CpuError> {
        let cfg: Config = config.parse().map_err(|e| CpuError::Config(e.message))?;
        let topo = CpuTopology::from_machine(machine);
        match cfg.policy.as_str() {
            "none" => {
                if !cfg.options.is_empty() {
                    let names: Vec<&str> = cfg.options.keys().map(String::as_str).collect();
                    return Err(OptionsError::NoneWithOptions(names.join(",")).into());
                }
                Ok(CpuManager::None(Box::new(StaticPolicy::new(
                    topo,
                    crate::topology::Cpus::new(),
                    StaticOptions::default(),
                ))))
            }
            "static" => {
                let options = StaticOptions::parse(&cfg.options)?;
                options.validate(&topo)?;
                let reserved = CpuSet::parse(&cfg.reserved_cpus).map_err(|e| {
                    CpuError::Config(format!(
                        "reserved_cpus = {:?} is not a Linux CPU list like \"0,64\" ({e})",
                        cfg.reserved_cpus
                    ))
                })?;
                let reserved = from_cpuset(&reserved);
                let all = topo.all_cpus();
                let listed: crate::topology::Cpus = all
                    .iter()
                    .chain(topo.offline())
                    .chain(topo.unplaced())
                    .copied()
                    .collect();
                let missing: crate::topology::Cpus =
                    reserved.difference(&listed).copied().collect();
                // A CPU the machine does not list at all (not even offline)
                // is a config error, as in the kubelet; an offline one is
                // reserved when it comes back (below). After a machine
                // change that removed a reserved CPU, a restart stops here
                // until the config is fixed (a reload keeps the running
                // provider and says so); pods and their state are kept.
                if !missing.is_empty() {
                    return Err(CpuError::Config(format!(
                        "reserved_cpus = {:?} names CPUs {} that this machine does not have (its CPUs: {}); remove them from reserved_cpus",
                        cfg.reserved_cpus,
                        to_cpuset(&missing),
                        to_cpuset(&listed)
                    )));
                }
                let idle: crate::topology::Cpus = reserved.difference(&all).copied().collect();
                if !idle.is_empty() {
                    tracing::warn!(cpus = %to_cpuset(&idle),
                        "reserved_cpus names CPUs that are offline or in no NUMA node now; they are reserved when they come back");
                }
                if options.align_by_socket
                    && topo.num_numa_nodes() > topomgr_sdk::hintgen::EXPLICIT_HINT_MAX_NODES
                {
                    tracing::warn!(numa_nodes = topo.num_numa_nodes(),
                        "align-by-socket: above 8 NUMA nodes hints are compact and only the narrowest masks are marked preferred");
                }
                tracing::info!(reserved = %to_cpuset(&reserved), ?options, cpus = all.len(),
                    "cpu provider: static policy ready");
                Ok(CpuManager::Static(Box::new(
                    StaticPolicy::new(topo, reserved, options).with_pod_level_resource_managers(
                        cfg.feature_gates.pod_level_resource_managers,
                    ),
                )))
            }
            other => Err(CpuError::Config(format!(
                "policy = {other:?} is unknown; use \"static\" or \"none\""
            ))),
        }
    }

    fn answer(set: Option<HintSet>) -> ProviderHints {
        set.map(|s| BTreeMap::from([(RESOURCE.to_owned(), Some(s))]))
    }
}

impl CpuManager {
    /// Adopts a saved state on this machine and config (see [`reconcile`]):
    /// never refused for a difference; an error only for bytes that are not
    /// a checkpoint of this provider.
    pub fn reconcile(&mut self, data: &[u8]) -> Result<Restored, CpuError> {
        let cp = Checkpoint::parse(data)?;
        Ok(match self {
            CpuManager::None(p) | CpuManager::Static(p) => p.reconcile(&cp),
        })
    }
}

impl Provider for CpuManager {
    fn new(ctx: &ProviderContext<'_>) -> Result<Self, ProviderError> {
        CpuManager::from_config(ctx.machine, ctx.config).map_err(Into::into)
    }

    fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        match self {
            CpuManager::None(_) => Ok(None),
            CpuManager::Static(p) => {
                p.set_pod_scope(None);
                Ok(Self::answer(p.hints(pod, container)?))
            }
        }
    }

    fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        match self {
            CpuManager::None(_) => Ok(None),
            CpuManager::Static(p) => {
                p.set_pod_scope(Some(&pod.uid));
                Ok(Self::answer(p.pod_hints(pod)?))
            }
        }
    }

    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        let placed = match self {
            CpuManager::None(p) => p.allocate_unmanaged(&pod.uid, &container.name)?,
            CpuManager::Static(p) => p.allocate(pod, container, hint.affinity)?,
        };
        Ok(Allocation::default().with_cpus(to_cpuset(&placed.cpus), placed.exclusive))
    }

    fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        match self {
            CpuManager::None(p) | CpuManager::Static(p) => p.remove(pod_uid, container),
        }
        Ok(())
    }

    fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        let cp = match self {
            CpuManager::None(p) => {
                let mut cp = p.checkpoint();
                cp.policy_name = "none".to_owned();
                cp.default_cpu_set = CpuSet::new();
                cp
            }
            CpuManager::Static(p) => p.checkpoint(),
        };
        cp.to_bytes().map_err(Into::into)
    }

    fn restore(&mut self, saved: &[u8]) -> Result<Reconciled, ProviderError> {
        Ok(self.reconcile(saved)?.report)
    }

    /// See [`resize`]: the provider's own books are what it resizes
    /// (`current` is what it answered before).
    fn resize(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        _current: &Allocation,
        hint: &TopologyHint,
    ) -> Result<Option<Allocation>, ProviderError> {
        let placed = match self {
            CpuManager::None(p) => p.resize_unmanaged(pod, container)?,
            CpuManager::Static(p) => p.resize(pod, container, hint.affinity)?,
        };
        Ok(Some(
            Allocation::default().with_cpus(to_cpuset(&placed.cpus), placed.exclusive),
        ))
    }

    fn exclude_cpus(&mut self, cpus: &topomgr_sdk::CpuSet) -> Result<bool, ProviderError> {
        match self {
            // Hands out no CPUs.
            CpuManager::None(_) => Ok(false),
            CpuManager::Static(p) => {
                p.exclude(from_cpuset(cpus));
                Ok(true)
            }
        }
    }

    fn inventory(&self) -> Result<Inventory, ProviderError> {
        Ok(match self {
            CpuManager::None(p) => {
                let none = Default::default();
                inventory::cpu_inventory(&p.topo, &none, &none, &none)
            }
            CpuManager::Static(p) => {
                let allocatable = p.topo.all_cpus().difference(&p.reserved).copied().collect();
                let available = p.available();
                let admissible = if p.options.full_pcpus_only {
                    inventory::on_full_cores(&p.topo, &available)
                } else {
                    available.clone()
                };
                inventory::cpu_inventory(&p.topo, &allocatable, &available, &admissible)
            }
        })
    }
}

topomgr_sdk::export_provider!(CpuManager);

#[cfg(test)]
mod reconcile_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod upstream_policy_tables;
#[cfg(test)]
mod upstream_resize_tables;
#[cfg(test)]
mod upstream_tables;
