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
//! Device providers usually need not implement [`Provider`] at all: the
//! [`devices`] toolkit is the kubelet's Device Manager (hints, allocation,
//! init-container reuse, release, checkpoint, inventory); the vendor lists
//! its devices and, where it has an opinion, picks which devices to hand out.
//!
//! ## The contract
//!
//! * [`Provider::new`] gets the discovered [`Machine`], the provider's
//!   `[providers.NAME.config]` table and a state directory. Bad config is an
//!   error naming the key: declare the config type with
//!   [`provider_config!`] (serde's derive, unknown keys refused) and use
//!   [`ProviderConfig::parse`], whose errors carry the full key path
//!   (`devices[0].node: invalid type ...`).
//! * [`Provider::topology_hints`] (container scope) and
//!   [`Provider::pod_topology_hints`] (pod scope, use
//!   [`PodView::effective_request`]) answer a [`ProviderHints`], which keeps
//!   the kubelet's three cases apart; build it with [`HintsBuilder`]:
//!   - [`no_hints`] — no map at all: no preference for anything;
//!   - [`HintsBuilder::no_preference`] — no preference for that resource
//!     (usually: it is not requested);
//!   - [`HintsBuilder::unsatisfiable`] — the request cannot be satisfied on
//!     any NUMA combination;
//!   - [`HintsBuilder::hints`] with a [`HintSet`]: an explicit list in the
//!     kubelet's order ([`for_each_mask_in_kubelet_order`]) or, on machines
//!     with many NUMA nodes where `2^N` masks explode, the compact form
//!     ([`CompactHints`]: a union of lattice intervals
//!     `minimal[i] ⊆ M ⊆ within[i]` plus the preferred width). Hints that are
//!     upward-closed need only their minimal masks: [`hintgen`] computes them
//!     and switches between the two forms like the built-in providers. The
//!     host refuses a compact set that fails [`CompactHints::validate`], and
//!     hints naming NUMA nodes the machine lacks, naming the provider.
//! * [`Provider::allocate`] reserves resources for a container honouring the
//!   merged hint and returns an [`Allocation`] (CPUs, memory nodes, device
//!   ids, environment). [`Provider::release`] undoes it. If any provider
//!   refuses, the host releases everything already allocated for the pod.
//! * [`Provider::checkpoint`] saves the assignments; [`Provider::restore`]
//!   takes them back on a provider built with the machine and config *as
//!   they are now* and reconciles: what still exists is kept, what moved is
//!   followed, what is missing stays its pod's and is reported, nothing is
//!   refused wholesale. It answers a [`Reconciled`] report ([`Conflict`]s
//!   and [`Move`]s). The host uses it at restart, config reload and when the
//!   machine changes. The [`devices`] toolkit does all of it for devices
//!   listed with an identity (PCI address, serial).
//! * [`Provider::preferred_allocation`] (the device plugins'
//!   `GetPreferredAllocation`) and [`Provider::inventory`] (what the provider
//!   owns per NUMA node, for the NodeResourceTopology export and the host's
//!   admission check of extended resources) have defaults for providers that
//!   own no devices.
//! * [`Provider::exclude_cpus`]: CPUs that containers topomgr does not
//!   place are pinned to, which a provider handing out CPUs exclusively
//!   must not give anyone until the next call; the default ignores them.
//! * [`Provider::resize`]: an in-place resize of a container (its new
//!   requests, its current allocation, its NUMA nodes); the default does
//!   not resize.
//!
//! The trait documentation covers re-admission, environment-variable
//! conflicts between providers (the host refuses them) and why a device
//! provider leaves `mems` alone.
//!
//! NUMA node ids are [`NumaNodeId`]s, `0..=255` (POWER9 numbers its GPU
//! memory nodes 250-255); a machine has at most [`MAX_NUMA_NODES`] of them.
//! [`NumaMask::single`] builds a one-node mask without any failure case.
//!
//! Every call crosses the boundary inside `catch_unwind`: a panicking
//! provider yields an error with reason `"ProviderPanic"` and the host keeps
//! running. The provider's `tracing` events (log through the re-exported
//! [`tracing`]) appear in the host's log (see [`log`]).
//!
//! ## A complete provider
//!
//! `sdk/examples/numa_widgets.rs` (built as the plugin
//! `target/debug/libnuma_widgets.so` by `cargo build --workspace`, through the
//! workspace member `examples/numa-widgets`) manages `widgets_per_node`
//! widgets on every NUMA node on the [`devices`] toolkit: about 80 lines of
//! provider code for hints, allocation, reuse, checkpoints, inventory and
//! `GetPreferredAllocation` exactly like the kubelet's Device Manager.
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
//! A vendor crate needs `crate-type = ["cdylib"]` and this crate alone:
//! the example compiles as it is in such a crate. `serde`, `serde_json` and
//! `tracing` are re-exported ([`serde`], [`serde_json`], [`tracing`]), and
//! [`provider_config!`] derives a config type through the SDK's `serde`.
//!
//! ## Compatibility rule
//!
//! **A plugin must be built with an SDK of the same `0.MINOR` version as the
//! host** (and therefore the same [`SDK_ABI_VERSION`]); within a minor
//! series, patch releases are interchangeable in both directions. The host
//! refuses anything else at load, with one line naming the file and what
//! differs. `topomgr --version` prints the SDK version and ABI the host
//! loads.
//!
//! What a patch release may change, and how both sides stay compatible:
//!
//! 1. **Fields the host sends** ([`Machine`] and its parts, [`PodView`],
//!    [`ContainerView`], the constructor's input, request payloads) cross as
//!    JSON. The SDK's readers ignore fields they do not know, so a plugin
//!    built against `0.3.0` loads into a `0.3.x` host whose discovery
//!    reports more; new fields are optional (`#[serde(default)]`), so a
//!    newer plugin on an older host reads their default. The types are
//!    `#[non_exhaustive]`: vendor code builds them with their constructors
//!    and `with_*` methods, so a new field is not a source break either.
//! 2. **Fields a plugin returns** ([`Allocation`], [`Inventory`], the
//!    [`Reconciled`] report, the preferred-allocation answer) cross as JSON
//!    under the same two rules: the host ignores what it does not know, and
//!    new fields have defaults.
//! 3. **A new provider method** is added as a *named call* (a method name
//!    plus JSON, over one generic entry of the plugin's method table), with a
//!    default implementation on [`Provider`]. A plugin built before the
//!    method existed answers "unknown method" and the host uses the
//!    documented default; no binary layout changes. `0.3.0` has
//!    `preferred_allocation`, `inventory` and `share_pod`; a later `0.3`
//!    patch added `assigned_device_hints` ([`Provider::assigned_device_hints`]:
//!    devices a container already holds from the kubelet's device plugins,
//!    answered by the device toolkit; a later patch added device nodes to
//!    its request, [`AssignedDevices::nodes`], for devices CDI injects),
//!    `exclude_cpus`
//!    ([`Provider::exclude_cpus`]: CPUs pinned by others, kept out of
//!    exclusive use), `device_identities`
//!    ([`Provider::device_identities`]: what each device physically is, so
//!    that the host holds one physical device once whatever provider or
//!    resource name it is allocated through) and `resize`
//!    ([`Provider::resize`]: in-place resize of a container's allocation).
//!    This round's provider-contract additions are all named calls, so the
//!    binary interface (`SDK_ABI_VERSION` 3) is unchanged.
//!
//! What does change the binary interface — the root module, the method
//! table, the typed hint structures, any layout the loader checks, all in
//! one file of the SDK (`src/ffi/abi.rs`) — needs a new minor version and a
//! new [`SDK_ABI_VERSION`]; such changes are batched, one minor per round of
//! them. `0.3` is one: `restore` answers the reconcile report (the method
//! table changed), devices gained identities, set types share one
//! vocabulary. A `0.2` plugin is refused by a `0.3` host. (The loader can
//! load a plugin that *appended* fields to its root module into an older
//! host, but a newer host refuses an older plugin, and operators upgrade
//! hosts first: hence named calls instead of new table entries.) The SDK
//! pins the ABI layer's crate and uses it only behind [`export_provider!`];
//! a plugin needs no copy of its own.
//!
//! The rule is tested in topomgr's repository: a plugin built against a
//! changed copy of this minor's ABI, and a real `0.2` plugin, are both
//! refused at load in one line naming the file and the difference (the
//! first differing type, or both versions); a plugin of this SDK loads into
//! a host that sends fields and makes named calls this SDK does not know;
//! the host reads plugin answers (allocation, inventory, reconcile report)
//! that carry fields of a later patch release.
//!
//! ## The `plugin-abi` feature, and reading these docs
//!
//! The binary interface (the frozen ABI types, what [`export_provider!`]
//! expands to, the host's loader side, [`testkit::load`]) sits behind the
//! cargo feature `plugin-abi`, which is on by default: a vendor crate that
//! depends on `topomgr-sdk` has it and needs nothing else. The vendor's
//! documentation is built without it,
//!
//! ```sh
//! cargo doc -p topomgr-sdk --no-deps --no-default-features --open
//! ```
//!
//! (docs.rs builds it the same way), because the ABI layer's crate adds its
//! own blanket traits to every type's "Blanket Implementations", traits no
//! provider uses. Everything a vendor uses is documented in both builds.
//!
//! ## Testing a provider
//!
//! [`testkit`] builds machines (with sparse node ids, with PCI devices),
//! pods, hints (`testkit::hint("0-1:true")`) and providers, either as plain
//! values ([`testkit::new_provider`], a unique state directory each) or
//! through the same JSON boundary and panic guard as the host
//! ([`testkit::load`]):
//!
//! ```
//! use topomgr_sdk::testkit;
//!
//! let machine = testkit::machine(2, 4); // 2 NUMA nodes x 4 CPUs
//! let pod = testkit::guaranteed_pod("web", &[("example.com/widget", 1)]);
//! assert_eq!(machine.numa_mask().to_string(), "0-1");
//! assert_eq!(pod.containers[0].request("example.com/widget"), 1);
//! // let mut p = testkit::load::<DeviceProvider<MyDevices>>(&machine, serde_json::json!({..}))?;
//! // let hints = p.topology_hints(&pod, &pod.containers[0])?;
//! // testkit::assert_hints(&hints, "example.com/widget", &[0, 1], Some(&["0:true", "1:true", "0-1:false"]));
//! ```
#![warn(missing_docs)]

// The SDK's own tests use its macros, which name the crate `topomgr_sdk`.
extern crate self as topomgr_sdk;

mod allocation;
mod assigned;
mod config_macro;
mod cpuset;
pub mod devices;
mod export;
#[cfg(feature = "plugin-abi")]
#[doc(hidden)]
pub mod ffi;
mod gobool;
mod hint;
pub mod hintgen;
mod identities;
mod inventory;
pub mod log;
mod machine;
mod mask;
mod pod;
mod preferred;
mod provider;
pub mod quantity;
mod reconcile;
pub mod testkit;
mod version;

/// The `abi_stable` crate the SDK is built with (an implementation detail of
/// [`export_provider!`]; plugins need no other copy).
#[cfg(feature = "plugin-abi")]
#[doc(hidden)]
pub use abi_stable;
/// The `serde` the SDK is built with ([`provider_config!`] derives through
/// it, so a provider needs no `serde` dependency).
pub use serde;
/// The `serde_json` the SDK is built with (config tables are JSON values).
pub use serde_json;
/// The `tracing` the SDK forwards to the host's log; log through this one.
pub use tracing;

pub use allocation::Allocation;
pub use assigned::{
    AssignedDeviceHints, AssignedDevices, AssignedDevicesRequest, AssignedResource, DeviceNode,
    DeviceRef, ResourceMatch,
};
pub use cpuset::{CpuSet, ListParseError, MAX_CPU_ID};
pub use export::ROOT_MODULE_SYMBOL;
pub use gobool::parse_go_bool;
pub use hint::{
    for_each_mask_in_kubelet_order, no_hints, CompactHints, CompactHintsError, HintSet,
    HintsBuilder, ProviderHints, TopologyHint,
};
pub use identities::{DeviceIdentities, ServedDevice};
pub use inventory::{Amounts, Inventory, InventoryUnit, ResourceInventory, Zone};
pub use machine::{Cpu, HugePages, Machine, NumaNode, PciDevice, Sriov};
pub use mask::{
    NodeOutOfRange, NodePositions, NumaMask, NumaMaskIter, NumaNodeId, TooManyNodes,
    MAX_NUMA_NODES, MAX_NUMA_NODE_ID,
};
pub use pod::{ContainerView, PodResources, PodView, QosClass, ResourceList};
pub use preferred::{PreferredAllocationRequest, INVALID_REQUEST_REASON};
pub use provider::{Provider, ProviderConfig, ProviderContext, ProviderError, RESIZE_INFEASIBLE};
pub use reconcile::{Conflict, Move, Reconciled, ResourceId};
pub use version::{SDK_ABI_VERSION, SDK_VERSION};
