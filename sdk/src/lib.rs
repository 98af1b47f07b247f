//! # topomgr-sdk
//!
//! The SDK for topomgr hint-provider plugins.
#![warn(missing_docs)]

mod allocation;
mod cpuset;
mod hint;
mod machine;
mod mask;
mod pod;
mod provider;

pub use allocation::Allocation;
pub use cpuset::{CpuSet, ListParseError, MAX_CPU_ID};
pub use hint::{for_each_mask_in_kubelet_order, CompactHints, HintSet, ProviderHints, TopologyHint};
pub use machine::{Cpu, HugePages, Machine, NumaNode, PciDevice, Sriov};
pub use mask::{NodeOutOfRange, NumaMask, NumaMaskIter, MAX_NUMA_NODES};
pub use pod::{ContainerView, PodView, QosClass, ResourceList};
pub use provider::{Provider, ProviderConfig, ProviderContext, ProviderError};
