//! A copy of topomgr-sdk's ABI types with one deliberate change (`FfiHint`
//! has an extra `distance` field), exporting a plugin the host must refuse
//! at load with a one-line "incompatible SDK" message. Nothing here is ever
//! called: the layout check fails first.

#![allow(missing_docs)]

use abi_stable::library::RootModule;
use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::{export_root_module, package_version_strings, sabi_trait, StableAbi};

/// An error as it crosses the boundary; see `ProviderError`.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiError {
    /// Short machine-readable reason.
    pub reason: RString,
    /// Explanation for people.
    pub message: RString,
}

/// A `TopologyHint` as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct FfiHint {
    /// The mask's bits; ignored when `any` is true.
    pub affinity: u64,
    /// True for the "any NUMA node" hint (`affinity: None`).
    pub any: bool,
    /// Whether the hint is preferred.
    pub preferred: bool,
    /// THE CHANGE: a field the real SDK does not have.
    pub distance: u32,
}

/// A `HintSet` as it crosses the boundary.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub enum FfiHintSet {
    /// An explicit list of hints.
    Explicit(RVec<FfiHint>),
    /// The compact form: minimal masks and their bounds (as bits) and the
    /// preferred width.
    Compact {
        /// Minimal masks, as bits.
        minimal: RVec<u64>,
        /// Upper bounds, as bits: empty, or one per minimal mask.
        within: RVec<u64>,
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

/// A `ProviderHints` as it crosses the boundary (`RNone` = no map).
pub type FfiProviderHints = ROption<RVec<FfiResourceHints>>;

/// One `resource -> quantity` entry.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiQuantity {
    /// Resource name.
    pub name: RString,
    /// Quantity (CPU in millicores, memory in bytes, others as integers).
    pub value: u64,
}

/// `QosClass` as it crosses the boundary.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfiQos {
    /// Guaranteed.
    Guaranteed,
    /// Burstable.
    Burstable,
    /// BestEffort.
    BestEffort,
}

/// A `ContainerView` as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiContainer {
    /// Container name.
    pub name: RString,
    /// Requests.
    pub requests: RVec<FfiQuantity>,
    /// Limits.
    pub limits: RVec<FfiQuantity>,
    /// Restartable init container.
    pub sidecar: bool,
}

/// A `PodView` as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiPod {
    /// Pod uid.
    pub uid: RString,
    /// Pod name.
    pub name: RString,
    /// Namespace.
    pub namespace: RString,
    /// QoS class.
    pub qos: FfiQos,
    /// Init containers, in order.
    pub init_containers: RVec<FfiContainer>,
    /// App containers, in order.
    pub containers: RVec<FfiContainer>,
}

/// One resource's device ids of an allocation.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiDevices {
    /// Resource name.
    pub resource: RString,
    /// Device ids.
    pub ids: RVec<RString>,
}

/// One environment variable of an allocation.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiEnv {
    /// Variable name.
    pub name: RString,
    /// Value.
    pub value: RString,
}

/// An `Allocation` as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiAllocation {
    /// CPU set as a Linux list.
    pub cpus: RString,
    /// Whether the CPUs are exclusive.
    pub exclusive: bool,
    /// Memory nodes, as mask bits.
    pub mems: u64,
    /// Devices per resource.
    pub devices: RVec<FfiDevices>,
    /// Environment variables.
    pub env: RVec<FfiEnv>,
}

/// The provider object behind the boundary. Every method is called by the
/// host one at a time.
#[sabi_trait]
pub trait FfiProvider: Send + Sync {
    /// See `Provider::topology_hints`.
    fn topology_hints(
        &mut self,
        pod: &FfiPod,
        container: &FfiContainer,
    ) -> RResult<FfiProviderHints, FfiError>;

    /// See `Provider::pod_topology_hints`.
    fn pod_topology_hints(&mut self, pod: &FfiPod) -> RResult<FfiProviderHints, FfiError>;

    /// See `Provider::allocate`.
    fn allocate(
        &mut self,
        pod: &FfiPod,
        container: &FfiContainer,
        hint: FfiHint,
    ) -> RResult<FfiAllocation, FfiError>;

    /// See `Provider::release`.
    fn release(&mut self, pod_uid: RStr<'_>, container: RStr<'_>) -> RResult<(), FfiError>;

    /// See `Provider::checkpoint`.
    fn checkpoint(&self) -> RResult<RVec<u8>, FfiError>;

    /// See `Provider::restore`.
    #[sabi(last_prefix_field)]
    fn restore(&mut self, data: RSlice<'_, u8>) -> RResult<(), FfiError>;
}

/// The boxed provider object a plugin hands to the host.
pub type FfiProviderBox = FfiProvider_TO<'static, RBox<()>>;

/// What the host hands to a plugin's constructor.
#[repr(C)]
#[derive(StableAbi)]
pub struct FfiInit {
    /// The provider's name (its `[providers.NAME]` key).
    pub name: RString,
    /// The `Machine` as JSON.
    pub machine_json: RString,
    /// The provider's config table as JSON (`null` when absent).
    pub config_json: RString,
    /// The provider's state directory.
    pub state_dir: RString,
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
    /// The `SDK_ABI_VERSION` the plugin was built with.
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

extern "C" fn new_provider(_init: FfiInit) -> RResult<FfiProviderBox, FfiError> {
    RResult::RErr(FfiError {
        reason: "Unreachable".into(),
        message: "this plugin exists to be refused at load".into(),
    })
}

#[export_root_module]
pub fn root_module() -> ProviderModRef {
    ProviderMod {
        sdk_abi_version: 1,
        new: new_provider,
    }
    .leak_into_prefix()
}
