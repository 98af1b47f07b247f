//! The CPU provider's errors and the admission reasons they map to.
//!
//! Reasons (the `reason` of the [`ProviderError`] the host shows):
//! - `SMTAlignmentError` — full-pcpus-only refusals (the kubelet's reason);
//! - `UnexpectedAdmissionError` — not enough free CPUs, or a take that
//!   could not complete (the kubelet's reason for allocation failures);
//! - `EmptyPodSharedPoolError` — with `PodLevelResourceManagers`, a pod
//!   whose pod-level CPUs leave its shared containers none;
//! - in-place resizes the static policy refuses (see [`crate::resize`]),
//!   with the reasons KEP-5554 gives the kubelet:
//!   `inconsistentCPUAllocationError` (between exclusive CPUs and the
//!   shared pool: whole to fractional CPUs, another QoS class, fractional
//!   to whole), `prohibitedCPUAllocationError` (below the CPUs first
//!   allocated), `resizeAllocateCPUsError` (more CPUs than are free on the
//!   container's NUMA nodes); `ResizeInfeasible` for what the KEP does not
//!   cover (pod-level CPU sets, the `none` policy);
//! - `InvalidConfig` — bad config or policy options;
//! - `InvalidCheckpoint` — saved bytes that are not a checkpoint of this
//!   provider (a checkpoint is never refused for not fitting the machine:
//!   see [`crate::reconcile`]).

use topomgr_sdk::ProviderError;

use crate::assignment::TakeError;
use crate::options::OptionsError;

/// The kubelet's reason for full-pcpus-only refusals.
pub const SMT_ALIGNMENT_ERROR: &str = "SMTAlignmentError";
/// The kubelet's reason for other allocation failures.
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";
/// KEP-5554's reason for a resize between exclusive CPUs and the shared pool.
pub const INCONSISTENT_CPU_ALLOCATION_ERROR: &str = "inconsistentCPUAllocationError";
/// KEP-5554's reason for a shrink below the CPUs first allocated.
pub const PROHIBITED_CPU_ALLOCATION_ERROR: &str = "prohibitedCPUAllocationError";
/// KEP-5554's reason for a grow whose CPUs cannot be allocated.
pub const RESIZE_ALLOCATE_CPUS_ERROR: &str = "resizeAllocateCPUsError";
/// The kubelet's reason for a pod-level pod without CPUs for its shared containers.
pub const EMPTY_POD_SHARED_POOL_ERROR: &str = "EmptyPodSharedPoolError";

/// Everything the CPU provider can refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuError {
    /// full-pcpus-only: the request is not a whole number of cores.
    #[error("SMT alignment: request of {requested} CPUs is not a multiple of {per_core} threads per core")]
    SmtNotMultiple {
        /// CPUs requested.
        requested: usize,
        /// Threads per core.
        per_core: usize,
    },
    /// full-pcpus-only: not enough CPUs outside the cores of reserved CPUs.
    #[error("SMT alignment: request of {requested} CPUs needs whole cores, but only {available} free CPUs lie outside the cores of the reserved CPUs ({per_core} threads per core)")]
    SmtNotEnoughPhysical {
        /// CPUs requested.
        requested: usize,
        /// Free CPUs outside reserved cores.
        available: usize,
        /// Threads per core.
        per_core: usize,
    },
    /// Fewer free (non-reserved) CPUs than requested.
    #[error("not enough free CPUs: requested {requested}, {free} free{location}")]
    NotEnough {
        /// CPUs requested.
        requested: usize,
        /// Free CPUs (reusable ones included, reserved ones excluded).
        free: usize,
        /// `" on NUMA node 1"`, `" on NUMA nodes 0-1"` or empty.
        location: String,
    },
    /// The topology-aware take failed.
    #[error("allocating {requested} CPUs: {cause}")]
    Take {
        /// CPUs requested.
        requested: usize,
        /// Why.
        cause: TakeError,
    },
    /// Compact hints would list too many masks.
    #[error("hints for a request of {requested} CPUs: {cause}")]
    TooManyCombinations {
        /// CPUs requested.
        requested: usize,
        /// Which limit was hit.
        cause: topomgr_sdk::hintgen::TooManyCombinations,
    },
    /// Pod-level resources (`PodLevelResourceManagers`) that leave the
    /// pod's shared containers without CPUs (the kubelet's message).
    #[error("{0}")]
    EmptyPodSharedPool(String),
    /// A container asked for in pod scope that its pod's pod-level CPU set
    /// does not know (the pod changed between its containers' calls).
    #[error("container {container:?} is not part of the pod-level CPU set of pod {pod}; release the pod and admit it again")]
    NotInPodSet {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
    },
    /// A container whose every CPU cannot be used now (offline, or claimed
    /// first by another pod in a restored state).
    #[error("container {container:?} of pod {pod} holds CPUs {held} and can run on none of them now: {why}; {remedy}")]
    NoUsableCpus {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// The CPUs it holds.
        held: topomgr_sdk::CpuSet,
        /// Why, e.g. `CPUs 1,7 are offline`.
        why: String,
        /// What resolves it.
        remedy: String,
    },
    /// A resize that would take a container holding exclusive CPUs to the
    /// shared pool (fractional CPUs, another QoS class).
    #[error("container {container:?} of pod {pod} holds {held} exclusive CPUs and cannot be resized to {to}: the static policy resizes exclusive CPUs only by whole CPUs in a Guaranteed pod, as the kubelet")]
    ResizeToShared {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// Exclusive CPUs it holds.
        held: usize,
        /// What it was resized to, in words.
        to: String,
    },
    /// A resize that would give exclusive CPUs to a container in the
    /// shared pool.
    #[error("container {container:?} of pod {pod} runs in the shared pool and cannot be resized to {requested} exclusive CPUs: only admission gives exclusive CPUs (the kubelet refuses this resize too); recreate the pod")]
    ResizeToExclusive {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// Whole CPUs of the new request.
        requested: usize,
    },
    /// A shrink below the CPUs the container was first allocated.
    #[error("container {container:?} of pod {pod} cannot shrink to {requested} CPUs: it keeps the {} CPUs it was first allocated ({baseline}), as KEP-5554 proposes", .baseline.len())]
    ResizeBelowBaseline {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// CPUs of the new request.
        requested: usize,
        /// The CPUs first allocated.
        baseline: topomgr_sdk::CpuSet,
    },
    /// A grow that does not fit on the container's NUMA nodes.
    #[error("container {container:?} of pod {pod} cannot grow from {held} to {requested} CPUs: it needs {} more{location} ({free} free there)", .requested - .held)]
    ResizeNotEnough {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// CPUs it holds.
        held: usize,
        /// CPUs of the new request.
        requested: usize,
        /// Free CPUs there.
        free: usize,
        /// `" on NUMA node 1"`, `" on NUMA nodes 0-1"` or `" on the node"`.
        location: String,
    },
    /// A container of a pod-level CPU set, or one whose exclusive CPUs are
    /// kept under the `none` policy.
    #[error("container {container:?} of pod {pod} cannot be resized: {why}")]
    ResizeUnsupported {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// Why.
        why: &'static str,
    },
    /// Bad `[config]`.
    #[error("cpu provider config: {0}")]
    Config(String),
    /// Bad `[config.options]`.
    #[error("cpu provider config: {0}")]
    Options(OptionsError),
    /// A checkpoint that does not fit.
    #[error("cpu provider checkpoint: {0}")]
    Checkpoint(String),
}

impl From<OptionsError> for CpuError {
    fn from(e: OptionsError) -> Self {
        CpuError::Options(e)
    }
}

impl CpuError {
    /// The admission reason of this error.
    pub fn reason(&self) -> &'static str {
        match self {
            CpuError::SmtNotMultiple { .. } | CpuError::SmtNotEnoughPhysical { .. } => {
                SMT_ALIGNMENT_ERROR
            }
            CpuError::NotEnough { .. }
            | CpuError::Take { .. }
            | CpuError::TooManyCombinations { .. }
            | CpuError::NotInPodSet { .. }
            | CpuError::NoUsableCpus { .. } => UNEXPECTED_ADMISSION_ERROR,
            CpuError::EmptyPodSharedPool(_) => EMPTY_POD_SHARED_POOL_ERROR,
            CpuError::ResizeToShared { .. } | CpuError::ResizeToExclusive { .. } => {
                INCONSISTENT_CPU_ALLOCATION_ERROR
            }
            CpuError::ResizeBelowBaseline { .. } => PROHIBITED_CPU_ALLOCATION_ERROR,
            CpuError::ResizeNotEnough { .. } => RESIZE_ALLOCATE_CPUS_ERROR,
            CpuError::ResizeUnsupported { .. } => topomgr_sdk::RESIZE_INFEASIBLE,
            CpuError::Config(_) | CpuError::Options(_) => "InvalidConfig",
            CpuError::Checkpoint(_) => "InvalidCheckpoint",
        }
    }
}

impl From<CpuError> for ProviderError {
    fn from(e: CpuError) -> Self {
        ProviderError::new(e.reason(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// A bad option is said in the message, with no source beside it.
    #[test]
    fn an_options_error_is_in_the_message_only() {
        let e = CpuError::from(OptionsError::Unknown("fast".into()));
        assert_eq!(
            e.to_string(),
            "cpu provider config: unknown CPU Manager Policy option: \"fast\"; known options: full-pcpus-only, distribute-cpus-across-numa, align-by-socket, distribute-cpus-across-cores, strict-cpu-reservation, prefer-align-cpus-by-uncorecache"
        );
        assert!(e.source().is_none());
    }
}
