//! The frozen binary interface between the host and a provider plugin:
//! every type abi_stable checks at load, and nothing else. **A diff of this
//! file is an ABI change**: changing any shape here needs a new SDK minor
//! version and a new [`SDK_ABI_VERSION`] (its value is in `src/version.rs`,
//! compiled without the ABI layer for the vendor's docs); adding a named call (a method
//! name below) is the one change a patch release may make here.
//!
//! The root module [`ProviderMod`] (`sdk_abi_version` + `new`), the
//! provider object's method table [`FfiProvider`] and the `#[repr(C)]`
//! types they reach. Everything that may grow crosses as JSON inside them
//! (see the parent module).
//!
//! The named calls of SDK 0.3: [`METHOD_PREFERRED_ALLOCATION`],
//! [`METHOD_INVENTORY`], [`METHOD_SHARE_POD`] (0.3.0) and
//! [`METHOD_ASSIGNED_DEVICE_HINTS`], [`METHOD_EXCLUDE_CPUS`],
//! [`METHOD_DEVICE_IDENTITIES`] and [`METHOD_RESIZE`] (added in patch
//! releases, as named calls may be).

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::{package_version_strings, sabi_trait, StableAbi};

pub use crate::version::SDK_ABI_VERSION;

/// Named call: [`Provider::preferred_allocation`](crate::Provider::preferred_allocation). Request: a
/// [`PreferredAllocationRequest`](crate::PreferredAllocationRequest); answer: `{"devices": [ids]}`. Default
/// (a plugin without it): no preference.
pub const METHOD_PREFERRED_ALLOCATION: &str = "preferred_allocation";

/// Named call: [`Provider::inventory`](crate::Provider::inventory). Request: `{}`; answer: an
/// [`Inventory`](crate::Inventory). Default: the provider owns nothing.
pub const METHOD_INVENTORY: &str = "inventory";

/// Named call: keep this pod for the calls that follow.
/// Request: a [`PodView`](crate::PodView); answer: `{}`. Until the next share, a call whose
/// pod is the empty string is about this pod. Default (a plugin without
/// it): every call carries its pod in full.
pub const METHOD_SHARE_POD: &str = "share_pod";

/// Named call: [`Provider::assigned_device_hints`](crate::Provider::assigned_device_hints).
/// Request: an [`AssignedDevicesRequest`](crate::AssignedDevicesRequest); answer: an
/// [`AssignedDeviceHints`](crate::AssignedDeviceHints). Default (a plugin without it): the
/// provider knows none of the devices.
pub const METHOD_ASSIGNED_DEVICE_HINTS: &str = "assigned_device_hints";

/// Named call: [`Provider::exclude_cpus`](crate::Provider::exclude_cpus).
/// Request: `{"cpus": "<Linux CPU list>"}`; answer: `{"excluded": bool}`.
/// Default (a plugin without it): ignored, as by a provider that hands out
/// no CPUs.
pub const METHOD_EXCLUDE_CPUS: &str = "exclude_cpus";

/// Named call: [`Provider::device_identities`](crate::Provider::device_identities).
/// Request: `{}`; answer: a [`DeviceIdentities`](crate::DeviceIdentities). Default (a
/// plugin without it): the host knows a device by its id, and by its PCI
/// address when the id is one.
pub const METHOD_DEVICE_IDENTITIES: &str = "device_identities";

/// Named call: [`Provider::resize`](crate::Provider::resize), an in-place
/// resize of a container the provider already allocated for.
/// Request: `{"pod": <PodView>, "container": <ContainerView>, "current":
/// <Allocation>, "hint": <TopologyHint>}`: the pod and the container with
/// their new requests and limits, the container's allocation before the
/// resize, and the NUMA nodes it may use (`{"affinity": [0], "preferred":
/// true}`; `"affinity": null` for any node). Answer: `{"allocation":
/// <Allocation>}` with the new allocation, or `{"allocation": null}` when
/// the provider does not resize; a refusal is the call's error (reason and
/// message). Default (a plugin without it): does not resize, as `null`.
pub const METHOD_RESIZE: &str = "resize";

/// An error as it crosses the boundary; see [`ProviderError`](crate::ProviderError).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiError {
    /// Short machine-readable reason.
    pub reason: RString,
    /// Explanation for people.
    pub message: RString,
}

/// A [`NumaMask`](crate::NumaMask) as it crosses the boundary: 4 words, node ids 0-63 first.
pub type FfiMask = [u64; 4];

/// A [`TopologyHint`](crate::TopologyHint) as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct FfiHint {
    /// The mask; ignored when `any` is true.
    pub affinity: FfiMask,
    /// True for the "any NUMA node" hint (`affinity: None`).
    pub any: bool,
    /// Whether the hint is preferred.
    pub preferred: bool,
}

/// A [`HintSet`](crate::HintSet) as it crosses the boundary.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub enum FfiHintSet {
    /// An explicit list of hints.
    Explicit(RVec<FfiHint>),
    /// The compact form: minimal masks, their bounds and the preferred
    /// width; see [`CompactHints`](crate::CompactHints).
    Compact {
        /// Minimal masks.
        minimal: RVec<FfiMask>,
        /// Upper bounds: empty, or one per minimal mask.
        within: RVec<FfiMask>,
        /// Width at which a hint is preferred.
        preferred_width: u32,
    },
}

/// One resource's entry of a provider's answer.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiResourceHints {
    /// The resource name.
    pub resource: RString,
    /// `RNone`: no preference for this resource.
    pub hints: ROption<FfiHintSet>,
}

/// A [`ProviderHints`](crate::ProviderHints) as it crosses the boundary (`RNone` = no map).
pub type FfiProviderHints = ROption<RVec<FfiResourceHints>>;

/// The provider object behind the boundary. Every method is called by the
/// host one at a time. The table is frozen for the SDK minor series; new
/// methods are [named calls](FfiProvider::call).
#[sabi_trait]
pub trait FfiProvider: Send + Sync {
    /// See [`Provider::topology_hints`](crate::Provider::topology_hints); `pod` and `container` are JSON.
    fn topology_hints(
        &mut self,
        pod: RStr<'_>,
        container: RStr<'_>,
    ) -> RResult<FfiProviderHints, FfiError>;

    /// See [`Provider::pod_topology_hints`](crate::Provider::pod_topology_hints); `pod` is JSON.
    fn pod_topology_hints(&mut self, pod: RStr<'_>) -> RResult<FfiProviderHints, FfiError>;

    /// See [`Provider::allocate`](crate::Provider::allocate); `pod`, `container` and the answer are JSON.
    fn allocate(
        &mut self,
        pod: RStr<'_>,
        container: RStr<'_>,
        hint: FfiHint,
    ) -> RResult<RString, FfiError>;

    /// See [`Provider::release`](crate::Provider::release).
    fn release(&mut self, pod_uid: RStr<'_>, container: RStr<'_>) -> RResult<(), FfiError>;

    /// See [`Provider::checkpoint`](crate::Provider::checkpoint).
    fn checkpoint(&self) -> RResult<RVec<u8>, FfiError>;

    /// See [`Provider::restore`](crate::Provider::restore); the answer is the [`Reconciled`](crate::Reconciled) report
    /// as JSON.
    fn restore(&mut self, data: RSlice<'_, u8>) -> RResult<RString, FfiError>;

    /// A named call: `method` with a JSON `request`; the JSON answer, or
    /// `RNone` when the plugin does not know `method` (it was built before
    /// the method existed).
    #[sabi(last_prefix_field)]
    fn call(&mut self, method: RStr<'_>, request: RStr<'_>) -> RResult<ROption<RString>, FfiError>;
}

/// The boxed provider object a plugin hands to the host.
pub type FfiProviderBox = FfiProvider_TO<'static, RBox<()>>;

/// What the host hands to a plugin's constructor.
#[repr(C)]
#[derive(StableAbi)]
pub struct FfiInit {
    /// One JSON object: `name` (the `[providers.NAME]` key), `machine` (the
    /// [`Machine`](crate::Machine)), `config` (the provider's table, `null` when absent),
    /// `state_dir` and `config_dir` (optional); see [`init_json`](super::init_json).
    pub init_json: RString,
    /// The host's logging callback: level (1 = error .. 5 = trace), target,
    /// message.
    pub log: extern "C" fn(u8, RStr<'_>, RStr<'_>),
    /// The most verbose level the host records (0 = off, 1 = error .. 5 = trace).
    pub log_max_level: u8,
}

/// The plugin's root module.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = ProviderModRef)))]
#[sabi(missing_field(panic))]
pub struct ProviderMod {
    /// The [`SDK_ABI_VERSION`] the plugin was built with.
    pub sdk_abi_version: u32,
    /// Builds the provider.
    #[sabi(last_prefix_field)]
    pub new: extern "C" fn(FfiInit) -> RResult<FfiProviderBox, FfiError>,
}

impl RootModule for ProviderModRef {
    abi_stable::declare_root_module_statics! {ProviderModRef}
    const BASE_NAME: &'static str = "topomgr_provider";
    const NAME: &'static str = "topomgr_provider";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}
