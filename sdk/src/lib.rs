//! # topomgr-sdk
//!
//! The SDK for topomgr hint-provider plugins.
//!
//! A *hint provider* owns one or more node resources (CPUs, memory, GPUs,
//! NIC virtual functions, any vendor device). For every workload the host
//! asks each provider where on the machine's NUMA nodes it could satisfy the
//! request (its *topology hints*), merges all answers under the operator's
//! policy exactly as the kubelet's Topology Manager does, and then asks each
//! provider to reserve resources honouring the merged hint. Providers are
//! shared libraries (`cdylib`) loaded at start-up; vendors implement one safe
//! trait, [`Provider`], with the ordinary types of this crate and export it
//! with one macro, [`export_provider!`]. No `unsafe`, no FFI types.
//!
//! ## The contract
//!
//! * [`Provider::new`] gets the discovered [`Machine`], the provider's
//!   `[providers.NAME.config]` table and a state directory. Bad config is an
//!   error naming the key (derive `serde::Deserialize` with
//!   `#[serde(deny_unknown_fields)]` and use [`ProviderConfig::parse`]), never
//!   a panic.
//! * [`Provider::topology_hints`] (container scope) and
//!   [`Provider::pod_topology_hints`] (pod scope, use
//!   [`PodView::effective_request`]) answer a [`ProviderHints`], which keeps
//!   the kubelet's three cases apart:
//!   - `None` — no map at all: the provider has no preference for anything;
//!   - `Some({resource: None})` — no preference for that resource (usually:
//!     it is not requested);
//!   - `Some({resource: Some(HintSet::Explicit(vec![]))})` — the request
//!     cannot be satisfied on any NUMA combination.
//!
//!   Hints are listed in the kubelet's order
//!   ([`for_each_mask_in_kubelet_order`]). On machines with many NUMA nodes
//!   an explicit list of every mask explodes (`2^N`); a provider may answer
//!   [`HintSet::Compact`] instead: a union of lattice intervals
//!   `minimal[i] ⊆ M ⊆ within[i]` plus the width at which hints are
//!   preferred. Hints that are upward-closed (still a hint when nodes are
//!   added) need only the minimal masks ([`CompactHints::upward_closed`]);
//!   the `within` bounds express the rest exactly (a node usable only alone,
//!   a group usable only as a whole). The host refuses a compact set that
//!   fails [`CompactHints::validate`], naming the provider, and its merge is
//!   exact over both forms.
//! * [`Provider::allocate`] reserves resources for a container honouring the
//!   merged hint and returns an [`Allocation`] (CPUs, memory nodes, device
//!   ids, environment). [`Provider::release`] undoes it. If any provider
//!   refuses, the host releases everything already allocated for the pod.
//! * [`Provider::checkpoint`] / [`Provider::restore`] persist assignments
//!   across host restarts.
//!
//! Every call crosses the boundary inside `catch_unwind`: a panicking
//! provider yields an error with reason `"ProviderPanic"` and the host keeps
//! running. The provider's `tracing` events appear in the host's log (see
//! [`log`]). The host rejects hints naming NUMA nodes the machine lacks.
//!
//! ## A complete provider
//!
//! `sdk/examples/numa_widgets.rs` (built as the plugin
//! `target/debug/libnuma_widgets.so` by `cargo build --workspace`, through the
//! workspace member `examples/numa-widgets`) manages `widgets_per_node`
//! widgets on every NUMA node and answers hints like the kubelet's Device
//! Manager:
//!
#![doc = concat!("```ignore\n", include_str!("../examples/numa_widgets.rs"), "```")]
//!
//! Its drop-in, `plugins.d/10-example.toml`:
//!
//! ```toml
//! [providers.widgets]
//! library = "numa_widgets"          # -> libnuma_widgets.so in plugin_dirs
//! [providers.widgets.config]
//! widgets_per_node = 2
//! ```
//!
//! ## Compatibility rule
//!
//! **A plugin must be built with an SDK of the same `0.MINOR` version as the
//! host** (and therefore the same [`SDK_ABI_VERSION`]); patch versions are
//! interchangeable. The host refuses anything else at load, with one line
//! naming the file and what differs. The SDK pins `abi_stable` and re-exports
//! it as [`abi_stable`]; a plugin needs no other copy. Rationale: abi_stable
//! lets an *older* host load a plugin whose root module has fields appended,
//! but a newer host refuses an older plugin, so "newer plugins work on older
//! hosts" would be the only direction available — and operators upgrade hosts
//! first. One minor version on both sides is a rule people can follow.
//!
//! ## Testing a provider
//!
//! [`testkit`] builds machines and pods and compares hints in-process:
//!
//! ```
//! use topomgr_sdk::testkit;
//!
//! let machine = testkit::machine(2, 4); // 2 NUMA nodes x 4 CPUs
//! let pod = testkit::guaranteed_pod("web", &[("example.com/widget", 1)]);
//! assert_eq!(machine.numa_ids(), vec![0, 1]);
//! assert_eq!(pod.containers[0].request("example.com/widget"), 1);
//! // let mut p: MyProvider = testkit::new_provider(&machine, serde_json::json!({..}))?;
//! // let hints = p.topology_hints(&pod, &pod.containers[0])?;
//! // testkit::assert_hints(&hints, "example.com/widget", &[0, 1], Some(&["0:true", "1:true", "0-1:false"]));
//! ```
//!
//! [`testkit::through_boundary`] drives the provider through the same
//! conversion and panic guard the host uses, still in-process.
#![warn(missing_docs)]

mod allocation;
mod cpuset;
pub mod devices;
mod export;
#[doc(hidden)]
pub mod ffi;
mod gobool;
mod hint;
pub mod hintgen;
mod inventory;
pub mod log;
mod machine;
mod mask;
mod pod;
mod preferred;
mod provider;
pub mod quantity;
pub mod testkit;

/// The `abi_stable` crate the SDK is built with (an implementation detail of
/// [`export_provider!`]; plugins need no other copy).
#[doc(hidden)]
pub use abi_stable;
/// The `serde` the SDK is built with (derive with
/// `#[serde(crate = "topomgr_sdk::serde")]` to need no `serde` dependency).
pub use serde;
/// The `serde_json` the SDK is built with (config tables are JSON values).
pub use serde_json;
/// The `tracing` the SDK forwards to the host's log; log through this one.
pub use tracing;

pub use allocation::Allocation;
pub use cpuset::{CpuSet, ListParseError, MAX_CPU_ID};
pub use export::ROOT_MODULE_SYMBOL;
pub use ffi::{SDK_ABI_VERSION, SDK_VERSION};
pub use gobool::parse_go_bool;
pub use hint::{
    for_each_mask_in_kubelet_order, no_hints, CompactHints, CompactHintsError, HintSet,
    HintsBuilder, ProviderHints, TopologyHint,
};
pub use inventory::{Amounts, Inventory, ResourceInventory, Zone};
pub use machine::{Cpu, HugePages, Machine, NumaNode, PciDevice, Sriov};
pub use mask::{
    NodeOutOfRange, NodePositions, NumaMask, NumaMaskIter, NumaNodeId, TooManyNodes,
    MAX_NUMA_NODES, MAX_NUMA_NODE_ID,
};
pub use pod::{ContainerView, PodResources, PodView, QosClass, ResourceList};
pub use preferred::{PreferredAllocationRequest, INVALID_REQUEST_REASON};
pub use provider::{Provider, ProviderConfig, ProviderContext, ProviderError};
