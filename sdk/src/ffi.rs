//! The stable binary interface between the host and a provider plugin.
//!
//! This is the only module of the SDK that uses `abi_stable` types. Vendors
//! never touch it: [`export_provider!`](crate::export_provider) builds the
//! root module from a safe [`Provider`], and the host's loader converts back
//! to the SDK's ordinary types.
//!
//! # What crosses the boundary, and why
//!
//! * Per-call data (pods, containers, hints, allocations, errors) crosses as
//!   `#[repr(C)]` structs of abi_stable R-types (`RString`, `RVec`,
//!   `ROption`, `RResult`). A NUMA mask is one `u64` and a hint is a 16-byte
//!   plain struct, so a provider answering all 255 masks of an 8-node machine
//!   costs one `RVec` allocation and a memcpy-sized conversion — well under a
//!   microsecond — where JSON would cost tens of microseconds per answer.
//!   abi_stable checks the layout of every one of these types at load time, so
//!   a plugin whose data shapes differ from the host's is refused instead of
//!   misreading memory.
//! * Data that crosses once, at construction (the [`Machine`] and the
//!   provider's config table), crosses as JSON text: the machine description
//!   is large, nested and grows with discovery, and the config table is JSON
//!   to begin with. Its shape is covered by [`SDK_ABI_VERSION`].
//! * CPU sets cross as Linux list strings (`"0-3,8"`): short, and the host
//!   re-validates them with [`CpuSet::parse`].
//!
//! # Versioning
//!
//! At load, abi_stable compares the SDK crate version the plugin was built
//! with against the host's (for `0.MINOR.PATCH` the minors must be equal) and
//! the full layout of [`ProviderMod`] and everything reachable from it. The
//! host then compares [`ProviderMod::sdk_abi_version`] with its own
//! [`SDK_ABI_VERSION`], which is bumped whenever the meaning of data changes
//! without its layout changing (for example the JSON shape of [`Machine`]).

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::{package_version_strings, sabi_trait, StableAbi};

use crate::{
    Allocation, CompactHints, ContainerView, CpuSet, HintSet, Machine, NumaMask, PodView, Provider,
    ProviderConfig, ProviderContext, ProviderError, ProviderHints, QosClass, TopologyHint,
};

/// Version of the meaning of the data exchanged with plugins. A host refuses
/// a plugin whose root module reports a different value.
pub const SDK_ABI_VERSION: u32 = 1;

/// The version of this SDK crate. abi_stable refuses a plugin whose SDK
/// version has a different `0.MINOR` than the host's.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The `reason` of the error a provider call returns when the provider panicked.
pub const PANIC_REASON: &str = "ProviderPanic";

/// The `reason` of the error the host reports when a plugin's answer cannot
/// be converted back (for example an unparsable CPU list).
pub const INVALID_OUTPUT_REASON: &str = "InvalidProviderOutput";

/// An error as it crosses the boundary; see [`ProviderError`].
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiError {
    /// Short machine-readable reason.
    pub reason: RString,
    /// Explanation for people.
    pub message: RString,
}

impl From<ProviderError> for FfiError {
    fn from(e: ProviderError) -> Self {
        FfiError {
            reason: e.reason.into(),
            message: e.message.into(),
        }
    }
}

impl From<FfiError> for ProviderError {
    fn from(e: FfiError) -> Self {
        ProviderError::new(e.reason.into_string(), e.message.into_string())
    }
}

/// A [`TopologyHint`] as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct FfiHint {
    /// The mask's bits; ignored when `any` is true.
    pub affinity: u64,
    /// True for the "any NUMA node" hint (`affinity: None`).
    pub any: bool,
    /// Whether the hint is preferred.
    pub preferred: bool,
}

impl From<TopologyHint> for FfiHint {
    fn from(h: TopologyHint) -> Self {
        FfiHint {
            affinity: h.affinity.map_or(0, NumaMask::bits),
            any: h.affinity.is_none(),
            preferred: h.preferred,
        }
    }
}

impl From<FfiHint> for TopologyHint {
    fn from(h: FfiHint) -> Self {
        TopologyHint {
            affinity: if h.any {
                None
            } else {
                Some(NumaMask::from_bits(h.affinity))
            },
            preferred: h.preferred,
        }
    }
}

/// A [`HintSet`] as it crosses the boundary.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub enum FfiHintSet {
    /// An explicit list of hints.
    Explicit(RVec<FfiHint>),
    /// The compact form: minimal masks and their bounds (as bits) and the
    /// preferred width; see [`CompactHints`].
    Compact {
        /// Minimal masks, as bits.
        minimal: RVec<u64>,
        /// Upper bounds, as bits: empty, or one per minimal mask.
        within: RVec<u64>,
        /// Width at which a hint is preferred.
        preferred_width: u32,
    },
}

impl From<&HintSet> for FfiHintSet {
    fn from(s: &HintSet) -> Self {
        match s {
            HintSet::Explicit(v) => {
                FfiHintSet::Explicit(v.iter().copied().map(FfiHint::from).collect())
            }
            HintSet::Compact(c) => FfiHintSet::Compact {
                minimal: c.minimal.iter().map(|m| m.bits()).collect(),
                within: c.within.iter().map(|m| m.bits()).collect(),
                preferred_width: c.preferred_width,
            },
        }
    }
}

impl From<FfiHintSet> for HintSet {
    fn from(s: FfiHintSet) -> Self {
        match s {
            FfiHintSet::Explicit(v) => {
                HintSet::Explicit(v.into_iter().map(TopologyHint::from).collect())
            }
            FfiHintSet::Compact {
                minimal,
                within,
                preferred_width,
            } => HintSet::Compact(CompactHints {
                minimal: minimal.into_iter().map(NumaMask::from_bits).collect(),
                within: within.into_iter().map(NumaMask::from_bits).collect(),
                preferred_width,
            }),
        }
    }
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

/// A [`ProviderHints`] as it crosses the boundary (`RNone` = no map).
pub type FfiProviderHints = ROption<RVec<FfiResourceHints>>;

/// Converts a provider's answer to its boundary form.
pub fn hints_to_ffi(h: &ProviderHints) -> FfiProviderHints {
    match h {
        None => ROption::RNone,
        Some(map) => ROption::RSome(
            map.iter()
                .map(|(resource, set)| FfiResourceHints {
                    resource: resource.as_str().into(),
                    hints: set.as_ref().map(FfiHintSet::from).into(),
                })
                .collect(),
        ),
    }
}

/// Converts a provider's answer back from its boundary form. A resource named
/// twice is an error (reason [`INVALID_OUTPUT_REASON`]).
pub fn hints_from_ffi(h: FfiProviderHints) -> Result<ProviderHints, ProviderError> {
    match h {
        ROption::RNone => Ok(None),
        ROption::RSome(list) => {
            let mut map = BTreeMap::new();
            for entry in list {
                let resource = entry.resource.into_string();
                let set = entry.hints.into_option().map(HintSet::from);
                if map.insert(resource.clone(), set).is_some() {
                    return Err(ProviderError::new(
                        INVALID_OUTPUT_REASON,
                        format!("the provider answered hints for resource `{resource}` twice"),
                    ));
                }
            }
            Ok(Some(map))
        }
    }
}

/// One `resource -> quantity` entry.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiQuantity {
    /// Resource name.
    pub name: RString,
    /// Quantity (CPU in millicores, memory in bytes, others as integers).
    pub value: u64,
}

/// [`QosClass`] as it crosses the boundary.
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

/// A [`ContainerView`] as it crosses the boundary.
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

fn quantities_to_ffi(list: &crate::ResourceList) -> RVec<FfiQuantity> {
    list.iter()
        .map(|(name, value)| FfiQuantity {
            name: name.as_str().into(),
            value: *value,
        })
        .collect()
}

fn quantities_from_ffi(list: &RVec<FfiQuantity>) -> crate::ResourceList {
    list.iter()
        .map(|q| (q.name.as_str().to_owned(), q.value))
        .collect()
}

impl From<&ContainerView> for FfiContainer {
    fn from(c: &ContainerView) -> Self {
        FfiContainer {
            name: c.name.as_str().into(),
            requests: quantities_to_ffi(&c.requests),
            limits: quantities_to_ffi(&c.limits),
            sidecar: c.sidecar,
        }
    }
}

impl From<&FfiContainer> for ContainerView {
    fn from(c: &FfiContainer) -> Self {
        ContainerView {
            name: c.name.as_str().to_owned(),
            requests: quantities_from_ffi(&c.requests),
            limits: quantities_from_ffi(&c.limits),
            sidecar: c.sidecar,
        }
    }
}

/// A [`PodView`] as it crosses the boundary.
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

impl From<&PodView> for FfiPod {
    fn from(p: &PodView) -> Self {
        FfiPod {
            uid: p.uid.as_str().into(),
            name: p.name.as_str().into(),
            namespace: p.namespace.as_str().into(),
            qos: match p.qos {
                QosClass::Guaranteed => FfiQos::Guaranteed,
                QosClass::Burstable => FfiQos::Burstable,
                QosClass::BestEffort => FfiQos::BestEffort,
            },
            init_containers: p.init_containers.iter().map(FfiContainer::from).collect(),
            containers: p.containers.iter().map(FfiContainer::from).collect(),
        }
    }
}

impl From<&FfiPod> for PodView {
    fn from(p: &FfiPod) -> Self {
        PodView {
            uid: p.uid.as_str().to_owned(),
            name: p.name.as_str().to_owned(),
            namespace: p.namespace.as_str().to_owned(),
            qos: match p.qos {
                FfiQos::Guaranteed => QosClass::Guaranteed,
                FfiQos::Burstable => QosClass::Burstable,
                FfiQos::BestEffort => QosClass::BestEffort,
            },
            init_containers: p.init_containers.iter().map(ContainerView::from).collect(),
            containers: p.containers.iter().map(ContainerView::from).collect(),
        }
    }
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

/// An [`Allocation`] as it crosses the boundary.
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

impl From<&Allocation> for FfiAllocation {
    fn from(a: &Allocation) -> Self {
        FfiAllocation {
            cpus: a.cpus.to_string().into(),
            exclusive: a.exclusive,
            mems: a.mems.bits(),
            devices: a
                .devices
                .iter()
                .map(|(resource, ids)| FfiDevices {
                    resource: resource.as_str().into(),
                    ids: ids.iter().map(|id| RString::from(id.as_str())).collect(),
                })
                .collect(),
            env: a
                .env
                .iter()
                .map(|(name, value)| FfiEnv {
                    name: name.as_str().into(),
                    value: value.as_str().into(),
                })
                .collect(),
        }
    }
}

/// Converts an allocation back from its boundary form; an unparsable CPU list
/// is an error (reason [`INVALID_OUTPUT_REASON`]).
pub fn allocation_from_ffi(a: FfiAllocation) -> Result<Allocation, ProviderError> {
    let cpus = CpuSet::parse(a.cpus.as_str()).map_err(|e| {
        ProviderError::new(
            INVALID_OUTPUT_REASON,
            format!(
                "the provider's allocation has an invalid CPU list `{}`: {e}",
                a.cpus
            ),
        )
    })?;
    Ok(Allocation {
        cpus,
        exclusive: a.exclusive,
        mems: NumaMask::from_bits(a.mems),
        devices: a
            .devices
            .into_iter()
            .map(|d| {
                (
                    d.resource.into_string(),
                    d.ids.into_iter().map(RString::into_string).collect(),
                )
            })
            .collect(),
        env: a
            .env
            .into_iter()
            .map(|e| (e.name.into_string(), e.value.into_string()))
            .collect(),
    })
}

/// The provider object behind the boundary. Every method is called by the
/// host one at a time.
#[sabi_trait]
pub trait FfiProvider: Send + Sync {
    /// See [`Provider::topology_hints`].
    fn topology_hints(
        &mut self,
        pod: &FfiPod,
        container: &FfiContainer,
    ) -> RResult<FfiProviderHints, FfiError>;

    /// See [`Provider::pod_topology_hints`].
    fn pod_topology_hints(&mut self, pod: &FfiPod) -> RResult<FfiProviderHints, FfiError>;

    /// See [`Provider::allocate`].
    fn allocate(
        &mut self,
        pod: &FfiPod,
        container: &FfiContainer,
        hint: FfiHint,
    ) -> RResult<FfiAllocation, FfiError>;

    /// See [`Provider::release`].
    fn release(&mut self, pod_uid: RStr<'_>, container: RStr<'_>) -> RResult<(), FfiError>;

    /// See [`Provider::checkpoint`].
    fn checkpoint(&self) -> RResult<RVec<u8>, FfiError>;

    /// See [`Provider::restore`].
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
    /// The [`Machine`] as JSON.
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

/// Encodes a level for [`FfiInit::log`]: 1 = error, 2 = warn, 3 = info,
/// 4 = debug, 5 = trace.
pub fn level_to_u8(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::ERROR => 1,
        tracing::Level::WARN => 2,
        tracing::Level::INFO => 3,
        tracing::Level::DEBUG => 4,
        tracing::Level::TRACE => 5,
    }
}

/// Decodes [`level_to_u8`]: 0 is `None` ("off"),
/// values above 5 mean trace.
pub fn level_from_u8(level: u8) -> Option<tracing::Level> {
    match level {
        0 => None,
        1 => Some(tracing::Level::ERROR),
        2 => Some(tracing::Level::WARN),
        3 => Some(tracing::Level::INFO),
        4 => Some(tracing::Level::DEBUG),
        _ => Some(tracing::Level::TRACE),
    }
}

/// Text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

/// Runs `f`, turning a panic into a [`PANIC_REASON`] error that names the call.
fn guarded<T>(call: &str, f: impl FnOnce() -> Result<T, ProviderError>) -> RResult<T, FfiError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => RResult::ROk(v),
        Ok(Err(e)) => RResult::RErr(e.into()),
        Err(payload) => {
            let msg = panic_message(payload.as_ref());
            tracing::error!(call, panic = %msg, "provider panicked");
            RResult::RErr(FfiError {
                reason: PANIC_REASON.into(),
                message: format!("the provider panicked in {call}: {msg}").into(),
            })
        }
    }
}

/// Wraps a safe [`Provider`] as an [`FfiProvider`].
struct Adapter<P: Provider> {
    inner: P,
}

impl<P: Provider> FfiProvider for Adapter<P> {
    fn topology_hints(
        &mut self,
        pod: &FfiPod,
        container: &FfiContainer,
    ) -> RResult<FfiProviderHints, FfiError> {
        guarded("topology_hints", || {
            let pod = PodView::from(pod);
            let container = ContainerView::from(container);
            self.inner
                .topology_hints(&pod, &container)
                .map(|h| hints_to_ffi(&h))
        })
    }

    fn pod_topology_hints(&mut self, pod: &FfiPod) -> RResult<FfiProviderHints, FfiError> {
        guarded("pod_topology_hints", || {
            let pod = PodView::from(pod);
            self.inner
                .pod_topology_hints(&pod)
                .map(|h| hints_to_ffi(&h))
        })
    }

    fn allocate(
        &mut self,
        pod: &FfiPod,
        container: &FfiContainer,
        hint: FfiHint,
    ) -> RResult<FfiAllocation, FfiError> {
        guarded("allocate", || {
            let pod = PodView::from(pod);
            let container = ContainerView::from(container);
            self.inner
                .allocate(&pod, &container, &TopologyHint::from(hint))
                .map(|a| FfiAllocation::from(&a))
        })
    }

    fn release(&mut self, pod_uid: RStr<'_>, container: RStr<'_>) -> RResult<(), FfiError> {
        guarded("release", || {
            self.inner.release(pod_uid.as_str(), container.as_str())
        })
    }

    fn checkpoint(&self) -> RResult<RVec<u8>, FfiError> {
        guarded("checkpoint", || self.inner.checkpoint().map(RVec::from))
    }

    fn restore(&mut self, data: RSlice<'_, u8>) -> RResult<(), FfiError> {
        guarded("restore", || self.inner.restore(data.as_slice()))
    }
}

/// The constructor the root module exports for provider type `P`.
extern "C" fn new_provider<P: Provider>(init: FfiInit) -> RResult<FfiProviderBox, FfiError> {
    let log = init.log;
    crate::log::install(
        level_from_u8(init.log_max_level),
        Box::new(move |level, target, message| {
            log(level_to_u8(level), target.into(), message.into())
        }),
    );
    guarded("new", || {
        let machine: Machine = serde_json::from_str(init.machine_json.as_str()).map_err(|e| {
            ProviderError::new(
                "InvalidMachine",
                format!("the host's machine description does not parse: {e}"),
            )
        })?;
        let config_value: serde_json::Value = serde_json::from_str(init.config_json.as_str())
            .map_err(|e| ProviderError::config(format!("the config table does not parse: {e}")))?;
        let config = ProviderConfig(config_value);
        let ctx = ProviderContext {
            machine: &machine,
            config: &config,
            state_dir: Path::new(init.state_dir.as_str()),
        };
        let provider = P::new(&ctx)?;
        tracing::debug!(provider = init.name.as_str(), "provider constructed");
        Ok(FfiProvider_TO::from_value(
            Adapter { inner: provider },
            abi_stable::sabi_trait::TD_Opaque,
        ))
    })
}

/// Builds the root module for provider type `P`; used by
/// [`export_provider!`](crate::export_provider).
pub fn root_module<P: Provider>() -> ProviderModRef {
    use abi_stable::prefix_type::PrefixTypeTrait;
    ProviderMod {
        sdk_abi_version: SDK_ABI_VERSION,
        new: new_provider::<P>,
    }
    .leak_into_prefix()
}

/// Wraps `P` in the boundary adapter in-process, without a shared library:
/// the same catch_unwind guard and conversions the host sees.
pub fn in_process<P: Provider>(provider: P) -> ProviderHandle {
    ProviderHandle::new(FfiProvider_TO::from_value(
        Adapter { inner: provider },
        abi_stable::sabi_trait::TD_Opaque,
    ))
}

/// Calls a root module's constructor and wraps the result.
pub fn construct(module: ProviderModRef, init: FfiInit) -> Result<ProviderHandle, ProviderError> {
    let new = module.new();
    match new(init) {
        RResult::ROk(b) => Ok(ProviderHandle::new(b)),
        RResult::RErr(e) => Err(e.into()),
    }
}

/// The host side of a provider object: calls it with the SDK's ordinary
/// types, converting on the way in and out.
pub struct ProviderHandle {
    inner: FfiProviderBox,
}

impl std::fmt::Debug for ProviderHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProviderHandle")
    }
}

impl ProviderHandle {
    /// Wraps a provider object.
    pub fn new(inner: FfiProviderBox) -> Self {
        ProviderHandle { inner }
    }

    /// See [`Provider::topology_hints`].
    pub fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        let r = self
            .inner
            .topology_hints(&FfiPod::from(pod), &FfiContainer::from(container));
        hints_from_ffi(r.into_result()?)
    }

    /// See [`Provider::pod_topology_hints`].
    pub fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        let r = self.inner.pod_topology_hints(&FfiPod::from(pod));
        hints_from_ffi(r.into_result()?)
    }

    /// See [`Provider::allocate`].
    pub fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        let r = self.inner.allocate(
            &FfiPod::from(pod),
            &FfiContainer::from(container),
            FfiHint::from(*hint),
        );
        allocation_from_ffi(r.into_result()?)
    }

    /// See [`Provider::release`].
    pub fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        Ok(self
            .inner
            .release(RStr::from_str(pod_uid), RStr::from_str(container))
            .into_result()?)
    }

    /// See [`Provider::checkpoint`].
    pub fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        Ok(self.inner.checkpoint().into_result()?.into_vec())
    }

    /// See [`Provider::restore`].
    pub fn restore(&mut self, data: &[u8]) -> Result<(), ProviderError> {
        Ok(self.inner.restore(RSlice::from_slice(data)).into_result()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_symbol_name_matches_abi_stable() {
        assert_eq!(
            crate::export::ROOT_MODULE_SYMBOL,
            abi_stable::library::ROOT_MODULE_LOADER_NAME
        );
    }

    #[test]
    fn hints_round_trip() {
        let mut map = BTreeMap::new();
        map.insert(
            "a".to_owned(),
            Some(HintSet::Explicit(vec![
                TopologyHint::new(NumaMask::from_bits(0b101), true),
                TopologyHint::ANY,
            ])),
        );
        map.insert("b".to_owned(), None);
        map.insert(
            "c".to_owned(),
            Some(HintSet::Compact(CompactHints::upward_closed(
                vec![NumaMask::from_bits(1 << 63)],
                2,
            ))),
        );
        map.insert("d".to_owned(), Some(HintSet::Explicit(vec![])));
        map.insert(
            "e".to_owned(),
            Some(HintSet::Compact(CompactHints {
                minimal: vec![NumaMask::from_bits(0b1), NumaMask::from_bits(0b110)],
                within: vec![NumaMask::from_bits(0b1111), NumaMask::from_bits(0b110)],
                preferred_width: 1,
            })),
        );
        let hints: ProviderHints = Some(map);
        assert_eq!(hints_from_ffi(hints_to_ffi(&hints)), Ok(hints));
        assert_eq!(hints_from_ffi(hints_to_ffi(&None)), Ok(None));
    }

    #[test]
    fn duplicate_resource_is_refused() {
        let entry = FfiResourceHints {
            resource: "x".into(),
            hints: ROption::RNone,
        };
        let list = ROption::RSome(vec![entry.clone(), entry].into());
        assert_eq!(
            hints_from_ffi(list),
            Err(ProviderError::new(
                "InvalidProviderOutput",
                "the provider answered hints for resource `x` twice"
            ))
        );
    }

    #[test]
    fn allocation_round_trip_and_bad_cpus() {
        let mut a = Allocation {
            cpus: CpuSet::parse("0-3,8").unwrap(),
            exclusive: true,
            mems: NumaMask::from_bits(0b11),
            ..Default::default()
        };
        a.devices
            .insert("x/y".into(), vec!["d1".into(), "d2".into()]);
        a.env.insert("K".into(), "V".into());
        assert_eq!(allocation_from_ffi(FfiAllocation::from(&a)), Ok(a.clone()));
        let mut bad = FfiAllocation::from(&a);
        bad.cpus = "3-1".into();
        let err = allocation_from_ffi(bad).unwrap_err();
        assert_eq!(err.reason, "InvalidProviderOutput");
        assert!(
            err.message
                .starts_with("the provider's allocation has an invalid CPU list `3-1`: "),
            "{}",
            err.message
        );
    }

    struct Panicky;

    impl Provider for Panicky {
        fn new(_: &ProviderContext<'_>) -> Result<Self, ProviderError> {
            Ok(Panicky)
        }
        fn topology_hints(
            &mut self,
            _: &PodView,
            c: &ContainerView,
        ) -> Result<ProviderHints, ProviderError> {
            if c.name == "boom" {
                panic!("boom in {}", c.name);
            }
            Ok(None)
        }
        fn pod_topology_hints(&mut self, _: &PodView) -> Result<ProviderHints, ProviderError> {
            Err(ProviderError::config("nope"))
        }
        fn allocate(
            &mut self,
            _: &PodView,
            _: &ContainerView,
            _: &TopologyHint,
        ) -> Result<Allocation, ProviderError> {
            Ok(Allocation::default())
        }
        fn release(&mut self, _: &str, _: &str) -> Result<(), ProviderError> {
            std::panic::panic_any(7u32)
        }
        fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
            Ok(vec![1, 2])
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), ProviderError> {
            Ok(())
        }
    }

    #[test]
    fn panics_become_errors_and_the_object_keeps_working() {
        let mut h = in_process(Panicky);
        let pod = crate::testkit::guaranteed_pod("p", &[]);
        let boom = crate::testkit::container("boom", &[]);
        assert_eq!(
            h.topology_hints(&pod, &boom),
            Err(ProviderError::new(
                "ProviderPanic",
                "the provider panicked in topology_hints: boom in boom"
            ))
        );
        assert_eq!(h.topology_hints(&pod, &pod.containers[0]), Ok(None));
        assert_eq!(
            h.release("u", "c"),
            Err(ProviderError::new(
                "ProviderPanic",
                "the provider panicked in release: panic with a non-string payload"
            ))
        );
        assert_eq!(
            h.pod_topology_hints(&pod),
            Err(ProviderError::config("nope"))
        );
        assert_eq!(h.checkpoint(), Ok(vec![1, 2]));
        assert_eq!(
            h.allocate(&pod, &boom, &TopologyHint::ANY),
            Ok(Allocation::default())
        );
        assert_eq!(h.restore(&[]), Ok(()));
    }

    #[test]
    fn pod_round_trip() {
        let pod = crate::testkit::guaranteed_pod("p", &[("cpu", 2000), ("example.com/widget", 1)]);
        assert_eq!(PodView::from(&FfiPod::from(&pod)), pod);
    }
}
