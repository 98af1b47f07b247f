//! The stable binary interface between the host and a provider plugin.
//!
//! This is the only module of the SDK that uses `abi_stable` types. Vendors
//! never touch it (it is hidden from the documentation):
//! [`export_provider!`](crate::export_provider) builds the root module from a
//! safe [`Provider`], and the host's loader converts back to the SDK's
//! ordinary types through [`ProviderHandle`].
//!
//! # What crosses the boundary, and how
//!
//! The *binary* interface is frozen for an SDK minor series (all `0.2.x`):
//! the root module [`ProviderMod`] (`sdk_abi_version` + `new`), the provider
//! object's method table [`FfiProvider`] and every `#[repr(C)]` type below.
//! abi_stable checks all of it at load; [`SDK_ABI_VERSION`] names it.
//!
//! * **Typed, fixed shapes** where speed matters and the shape is the
//!   kubelet's own: hints ([`FfiHint`]: a 256-bit mask, "any", preferred;
//!   [`FfiHintSet`]: explicit list or compact intervals) cross as plain
//!   structs, so a provider answering all 255 masks of an 8-node machine
//!   costs one vector copy. The merged hint handed to `allocate` is an
//!   [`FfiHint`] too. Errors are [`FfiError`] (reason, message), checkpoints
//!   bytes.
//! * **JSON** for everything that may grow: the constructor's input (the
//!   [`Machine`], the config table, the state directory, the provider name:
//!   one object), the pod and container of every call, the [`Allocation`] a
//!   plugin returns, and the requests and answers of named calls. Readers on
//!   both sides ignore fields they do not know, and every field added after
//!   `0.2.0` has a default, so a patch release may add fields in either
//!   direction without breaking a plugin or a host built before it.
//! * **Named calls** ([`FfiProvider::call`]: a method name and a JSON
//!   request, answering JSON, or `None` for a method the plugin does not
//!   know) are how provider methods are added without changing the method
//!   table: a host calls a new method by name, a plugin built before the
//!   method existed answers `None`, and the host uses the method's documented
//!   default. `0.2.0` has two: [`METHOD_PREFERRED_ALLOCATION`] and
//!   [`METHOD_INVENTORY`]; `0.2.1` adds [`METHOD_SHARE_POD`].
//! * **Shared pod.** Sending the whole pod with every call makes admitting
//!   a pod of N containers cost N² (2N calls, each carrying N containers).
//!   A host that admits a pod first hands it to the plugin once with
//!   [`METHOD_SHARE_POD`]; when the plugin answers (it keeps the pod), the
//!   calls about that pod carry an empty pod string, which means "the pod
//!   last shared". A plugin built before the call answers `None` and keeps
//!   receiving the pod in full; a host built before it never sends an empty
//!   pod.
//! * CPU sets inside JSON are Linux list strings (`"0-3,8"`), which the host
//!   re-validates.
//!
//! # Versioning
//!
//! At load, abi_stable compares the SDK crate version the plugin was built
//! with against the host's (the plugin's `0.MINOR` must not be older than
//! the host's) and the full layout of [`ProviderMod`] and everything
//! reachable from it. The host then compares [`ProviderMod::sdk_abi_version`]
//! with its own [`SDK_ABI_VERSION`], which changes exactly when the binary
//! interface above changes (with a new minor version).

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Once};

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::{package_version_strings, sabi_trait, StableAbi};
use serde::{Deserialize, Serialize};

use crate::{
    Allocation, CompactHints, ContainerView, HintSet, Inventory, Machine, NumaMask, PodView,
    PreferredAllocationRequest, Provider, ProviderConfig, ProviderContext, ProviderError,
    ProviderHints, Reconciled, TopologyHint,
};

/// Version of the binary interface exchanged with plugins: a host refuses a
/// plugin whose root module reports a different value. `1` was SDK 0.1;
/// `2` was SDK 0.2 (256-bit masks, JSON pods and allocations, named calls);
/// `3` is SDK 0.3 (`restore` answers the reconcile report as JSON).
pub const SDK_ABI_VERSION: u32 = 3;

/// The version of this SDK crate.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The `reason` of the error a provider call returns when the provider panicked.
pub const PANIC_REASON: &str = "ProviderPanic";

/// The `reason` of the error the host reports when a plugin's answer cannot
/// be converted back (an unparsable allocation, a resource named twice).
pub const INVALID_OUTPUT_REASON: &str = "InvalidProviderOutput";

/// The `reason` of the error a plugin reports when the host's data does not
/// parse (a host and plugin that disagree about the interface).
pub const INVALID_INPUT_REASON: &str = "InvalidHostInput";

/// Named call: [`Provider::preferred_allocation`]. Request: a
/// [`PreferredAllocationRequest`]; answer: `{"devices": [ids]}`. Default
/// (a plugin without it): no preference.
pub const METHOD_PREFERRED_ALLOCATION: &str = "preferred_allocation";

/// Named call: [`Provider::inventory`]. Request: `{}`; answer: an
/// [`Inventory`]. Default: the provider owns nothing.
pub const METHOD_INVENTORY: &str = "inventory";

/// Named call (since `0.2.1`): keep this pod for the calls that follow.
/// Request: a [`PodView`]; answer: `{}`. Until the next share, a call whose
/// pod is the empty string is about this pod. Default (a plugin without
/// it): every call carries its pod in full.
pub const METHOD_SHARE_POD: &str = "share_pod";

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

/// A [`NumaMask`] as it crosses the boundary: 4 words, node ids 0-63 first.
pub type FfiMask = [u64; 4];

/// A [`TopologyHint`] as it crosses the boundary.
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

impl From<TopologyHint> for FfiHint {
    fn from(h: TopologyHint) -> Self {
        FfiHint {
            affinity: h.affinity.unwrap_or_default().words(),
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
                Some(NumaMask::from_words(h.affinity))
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
    /// The compact form: minimal masks, their bounds and the preferred
    /// width; see [`CompactHints`].
    Compact {
        /// Minimal masks.
        minimal: RVec<FfiMask>,
        /// Upper bounds: empty, or one per minimal mask.
        within: RVec<FfiMask>,
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
                minimal: c.minimal.iter().map(|m| m.words()).collect(),
                within: c.within.iter().map(|m| m.words()).collect(),
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
                minimal: minimal.into_iter().map(NumaMask::from_words).collect(),
                within: within.into_iter().map(NumaMask::from_words).collect(),
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

/// JSON text of `value` (the SDK's types always serialize).
fn to_json<T: Serialize>(value: &T) -> Result<String, ProviderError> {
    serde_json::to_string(value)
        .map_err(|e| ProviderError::new(INVALID_INPUT_REASON, format!("encoding JSON: {e}")))
}

/// Decodes data the host sent (an error means host and plugin disagree).
fn from_host<'a, T: Deserialize<'a>>(what: &str, json: &'a str) -> Result<T, ProviderError> {
    serde_json::from_str(json).map_err(|e| {
        ProviderError::new(
            INVALID_INPUT_REASON,
            format!("the host's {what} does not parse: {e}"),
        )
    })
}

/// Decodes data a plugin returned.
fn from_plugin<'a, T: Deserialize<'a>>(what: &str, json: &'a str) -> Result<T, ProviderError> {
    serde_json::from_str(json).map_err(|e| {
        ProviderError::new(
            INVALID_OUTPUT_REASON,
            format!("the provider's {what} is invalid: {e}"),
        )
    })
}

/// The answer of [`METHOD_PREFERRED_ALLOCATION`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PreferredAnswer {
    #[serde(default)]
    devices: Vec<String>,
}

/// The provider object behind the boundary. Every method is called by the
/// host one at a time. The table is frozen for the SDK minor series; new
/// methods are [named calls](FfiProvider::call).
#[sabi_trait]
pub trait FfiProvider: Send + Sync {
    /// See [`Provider::topology_hints`]; `pod` and `container` are JSON.
    fn topology_hints(
        &mut self,
        pod: RStr<'_>,
        container: RStr<'_>,
    ) -> RResult<FfiProviderHints, FfiError>;

    /// See [`Provider::pod_topology_hints`]; `pod` is JSON.
    fn pod_topology_hints(&mut self, pod: RStr<'_>) -> RResult<FfiProviderHints, FfiError>;

    /// See [`Provider::allocate`]; `pod`, `container` and the answer are JSON.
    fn allocate(
        &mut self,
        pod: RStr<'_>,
        container: RStr<'_>,
        hint: FfiHint,
    ) -> RResult<RString, FfiError>;

    /// See [`Provider::release`].
    fn release(&mut self, pod_uid: RStr<'_>, container: RStr<'_>) -> RResult<(), FfiError>;

    /// See [`Provider::checkpoint`].
    fn checkpoint(&self) -> RResult<RVec<u8>, FfiError>;

    /// See [`Provider::restore`]; the answer is the [`Reconciled`] report
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
    /// [`Machine`]), `config` (the provider's table, `null` when absent),
    /// `state_dir` and `config_dir` (optional); see [`init_json`].
    pub init_json: RString,
    /// The host's logging callback: level (1 = error .. 5 = trace), target,
    /// message.
    pub log: extern "C" fn(u8, RStr<'_>, RStr<'_>),
    /// The most verbose level the host records (0 = off, 1 = error .. 5 = trace).
    pub log_max_level: u8,
}

/// The constructor's input as the plugin reads it (unknown keys ignored).
#[derive(Deserialize)]
struct InitRequest {
    name: String,
    machine: Machine,
    #[serde(default)]
    config: serde_json::Value,
    state_dir: String,
    /// Optional: a host without a config file sends none.
    #[serde(default)]
    config_dir: Option<String>,
}

/// The JSON object of [`FfiInit::init_json`]. `machine` is a [`Machine`] in
/// JSON form (a host may add fields to it: plugins ignore what they do not
/// know).
pub fn init_json(
    name: &str,
    machine: &serde_json::Value,
    config: &serde_json::Value,
    state_dir: &Path,
    config_dir: Option<&Path>,
) -> String {
    serde_json::json!({
        "name": name,
        "machine": machine,
        "config": config,
        "state_dir": state_dir.to_string_lossy(),
        "config_dir": config_dir.map(|d| d.to_string_lossy()),
    })
    .to_string()
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

/// A log callback that drops everything (for in-process constructions,
/// whose events already reach the caller's own subscriber).
pub extern "C" fn discard_log(_level: u8, _target: RStr<'_>, _message: RStr<'_>) {}

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

thread_local! {
    /// How many guarded calls this thread is inside: the plugin's panic hook
    /// stays quiet there (the guard reports the panic).
    static GUARDED: Cell<u32> = const { Cell::new(0) };
    /// Where the last panic inside a guarded call happened.
    static PANICKED_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs, once per plugin, a panic hook that prints nothing for a panic
/// inside a guarded call (it keeps the location for the guard, which logs
/// the panic once, through `tracing`, naming the provider) and leaves every
/// other panic to the hook that was installed before. Each cdylib carries
/// its own copy of `std` and with it its own hook, so this is the plugin's
/// hook only; in-process providers (tests) keep the host's.
fn install_quiet_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(Cell::get) > 0 {
                let at = info.location().map(ToString::to_string);
                PANICKED_AT.with(|p| *p.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f` for `provider`, turning a panic into a [`PANIC_REASON`] error
/// that names the call, and logging it once as an error event.
fn guarded<T>(
    provider: &str,
    call: &str,
    f: impl FnOnce() -> Result<T, ProviderError>,
) -> RResult<T, FfiError> {
    GUARDED.with(|g| g.set(g.get() + 1));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get() - 1));
    match outcome {
        Ok(Ok(v)) => RResult::ROk(v),
        Ok(Err(e)) => RResult::RErr(e.into()),
        Err(payload) => {
            let msg = panic_message(payload.as_ref());
            let at = PANICKED_AT.with(|p| p.borrow_mut().take());
            tracing::error!(
                provider,
                call,
                panic = %msg,
                at = at.as_deref().unwrap_or("unknown"),
                "provider panicked; the call fails with {PANIC_REASON}"
            );
            RResult::RErr(FfiError {
                reason: PANIC_REASON.into(),
                message: format!("the provider panicked in {call}: {msg}").into(),
            })
        }
    }
}

/// Wraps a safe [`Provider`] as an [`FfiProvider`].
struct Adapter<P: Provider> {
    /// The provider's name, for the log.
    name: String,
    inner: P,
    /// The pod last shared with [`METHOD_SHARE_POD`].
    shared: Option<PodView>,
}

/// The pod a call is about: the shared one when the host sent `""`.
fn call_pod<'a>(
    shared: &'a Option<PodView>,
    json: &str,
    parsed: &'a mut Option<PodView>,
) -> Result<&'a PodView, ProviderError> {
    if json.is_empty() {
        return shared.as_ref().ok_or_else(|| {
            ProviderError::new(
                INVALID_INPUT_REASON,
                "the host referred to the shared pod, but shared none",
            )
        });
    }
    Ok(parsed.insert(from_host("pod", json)?))
}

impl<P: Provider> Adapter<P> {
    fn named_call(&mut self, method: &str, request: &str) -> Result<Option<String>, ProviderError> {
        match method {
            METHOD_SHARE_POD => {
                self.shared = Some(from_host("pod", request)?);
                Ok(Some("{}".to_owned()))
            }
            METHOD_PREFERRED_ALLOCATION => {
                let req: PreferredAllocationRequest = from_host("request", request)?;
                let devices = self.inner.preferred_allocation(&req)?;
                to_json(&PreferredAnswer { devices }).map(Some)
            }
            METHOD_INVENTORY => to_json(&self.inner.inventory()?).map(Some),
            _ => Ok(None),
        }
    }
}

impl<P: Provider> FfiProvider for Adapter<P> {
    fn topology_hints(
        &mut self,
        pod: RStr<'_>,
        container: RStr<'_>,
    ) -> RResult<FfiProviderHints, FfiError> {
        guarded(&self.name, "topology_hints", || {
            let mut parsed = None;
            let pod = call_pod(&self.shared, pod.as_str(), &mut parsed)?;
            let container: ContainerView = from_host("container", container.as_str())?;
            self.inner
                .topology_hints(pod, &container)
                .map(|h| hints_to_ffi(&h))
        })
    }

    fn pod_topology_hints(&mut self, pod: RStr<'_>) -> RResult<FfiProviderHints, FfiError> {
        guarded(&self.name, "pod_topology_hints", || {
            let mut parsed = None;
            let pod = call_pod(&self.shared, pod.as_str(), &mut parsed)?;
            self.inner.pod_topology_hints(pod).map(|h| hints_to_ffi(&h))
        })
    }

    fn allocate(
        &mut self,
        pod: RStr<'_>,
        container: RStr<'_>,
        hint: FfiHint,
    ) -> RResult<RString, FfiError> {
        guarded(&self.name, "allocate", || {
            let mut parsed = None;
            let pod = call_pod(&self.shared, pod.as_str(), &mut parsed)?;
            let container: ContainerView = from_host("container", container.as_str())?;
            let a = self
                .inner
                .allocate(pod, &container, &TopologyHint::from(hint))?;
            to_json(&a).map(RString::from)
        })
    }

    fn release(&mut self, pod_uid: RStr<'_>, container: RStr<'_>) -> RResult<(), FfiError> {
        guarded(&self.name, "release", || {
            self.inner.release(pod_uid.as_str(), container.as_str())
        })
    }

    fn checkpoint(&self) -> RResult<RVec<u8>, FfiError> {
        guarded(&self.name, "checkpoint", || {
            self.inner.checkpoint().map(RVec::from)
        })
    }

    fn restore(&mut self, data: RSlice<'_, u8>) -> RResult<RString, FfiError> {
        guarded(&self.name, "restore", || {
            let report = self.inner.restore(data.as_slice())?;
            to_json(&report).map(RString::from)
        })
    }

    fn call(&mut self, method: RStr<'_>, request: RStr<'_>) -> RResult<ROption<RString>, FfiError> {
        let name = self.name.clone();
        guarded(&name, method.as_str(), || {
            self.named_call(method.as_str(), request.as_str())
                .map(|answer| answer.map(RString::from).into())
        })
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
    install_quiet_panic_hook();
    construct_adapter::<P>(&init)
}

/// Decodes the constructor's input and builds `P` behind the adapter.
fn construct_adapter<P: Provider>(init: &FfiInit) -> RResult<FfiProviderBox, FfiError> {
    let req: InitRequest = match from_host("init request", init.init_json.as_str()) {
        Ok(req) => req,
        Err(e) => return RResult::RErr(e.into()),
    };
    let name = req.name.clone();
    guarded(&name, "new", || {
        let config = ProviderConfig(req.config);
        let ctx = ProviderContext::new(&req.machine, &config, Path::new(&req.state_dir))
            .with_config_dir(req.config_dir.as_deref().map(Path::new));
        let provider = P::new(&ctx)?;
        tracing::debug!(provider = req.name.as_str(), "provider constructed");
        Ok(FfiProvider_TO::from_value(
            Adapter {
                name: req.name,
                inner: provider,
                shared: None,
            },
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
        Adapter {
            name: std::any::type_name::<P>().to_owned(),
            inner: provider,
            shared: None,
        },
        abi_stable::sabi_trait::TD_Opaque,
    ))
}

/// Runs `P`'s constructor in-process on `init` (JSON, as a host sends it):
/// the same decoding and panic guard as a loaded plugin. The log callback is
/// not installed (the provider already logs to the caller's subscriber).
pub fn construct_in_process<P: Provider>(init: FfiInit) -> Result<ProviderHandle, ProviderError> {
    match construct_adapter::<P>(&init) {
        RResult::ROk(b) => Ok(ProviderHandle::new(b)),
        RResult::RErr(e) => Err(e.into()),
    }
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
/// types, converting on the way in and out. The `*_json` methods take the
/// JSON forms directly (what a host of another patch release would send).
pub struct ProviderHandle {
    inner: FfiProviderBox,
    sharing: PodSharing,
}

/// Where [`METHOD_SHARE_POD`] stands with one plugin.
enum PodSharing {
    /// Not asked yet, or the last share failed.
    Unknown,
    /// The plugin keeps this pod (held here, so that its address names it).
    Kept(Arc<PodView>),
    /// The plugin does not know the call: every call carries its pod.
    Unsupported,
}

impl std::fmt::Debug for ProviderHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProviderHandle")
    }
}

impl ProviderHandle {
    /// Wraps a provider object.
    pub fn new(inner: FfiProviderBox) -> Self {
        ProviderHandle {
            inner,
            sharing: PodSharing::Unknown,
        }
    }

    /// Hands `pod` to the plugin once ([`METHOD_SHARE_POD`]), so that the
    /// calls that pass this very object (`&*pod`, compared by address)
    /// send an empty pod instead of encoding it again. Calls about any
    /// other pod carry it in full. A plugin without the call, or a share
    /// that fails, only costs the encoding per call; the failure is logged
    /// at debug level.
    pub fn share_pod(&mut self, pod: &Arc<PodView>) {
        match &self.sharing {
            PodSharing::Unsupported => return,
            PodSharing::Kept(kept) if Arc::ptr_eq(kept, pod) => return,
            _ => {}
        }
        self.sharing = PodSharing::Unknown;
        match to_json(&**pod).and_then(|json| self.call(METHOD_SHARE_POD, &json)) {
            Ok(Some(_)) => self.sharing = PodSharing::Kept(Arc::clone(pod)),
            Ok(None) => self.sharing = PodSharing::Unsupported,
            Err(e) => {
                tracing::debug!(pod = %pod.uid, error = %e, "sharing the pod with the provider failed; calls carry it in full");
            }
        }
    }

    /// The pod argument of a call: empty for the pod the plugin keeps.
    fn pod_arg(&self, pod: &PodView) -> Result<Cow<'static, str>, ProviderError> {
        match &self.sharing {
            PodSharing::Kept(kept) if std::ptr::eq(&**kept, pod) => Ok(Cow::Borrowed("")),
            _ => to_json(pod).map(Cow::Owned),
        }
    }

    /// See [`Provider::topology_hints`].
    pub fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        self.topology_hints_json(&self.pod_arg(pod)?, &to_json(container)?)
    }

    /// [`Self::topology_hints`] with the pod and container as JSON.
    pub fn topology_hints_json(
        &mut self,
        pod: &str,
        container: &str,
    ) -> Result<ProviderHints, ProviderError> {
        let r = self
            .inner
            .topology_hints(RStr::from_str(pod), RStr::from_str(container));
        hints_from_ffi(r.into_result()?)
    }

    /// See [`Provider::pod_topology_hints`].
    pub fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        let r = self
            .inner
            .pod_topology_hints(RStr::from_str(&self.pod_arg(pod)?));
        hints_from_ffi(r.into_result()?)
    }

    /// See [`Provider::allocate`].
    pub fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        self.allocate_json(&self.pod_arg(pod)?, &to_json(container)?, hint)
    }

    /// [`Self::allocate`] with the pod and container as JSON.
    pub fn allocate_json(
        &mut self,
        pod: &str,
        container: &str,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        let r = self.inner.allocate(
            RStr::from_str(pod),
            RStr::from_str(container),
            FfiHint::from(*hint),
        );
        from_plugin("allocation", r.into_result()?.as_str())
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

    /// See [`Provider::restore`]. The report is read leniently (fields
    /// this SDK does not know are ignored; an empty answer is an empty
    /// report); one that does not parse at all is an error (reason
    /// [`INVALID_OUTPUT_REASON`]).
    pub fn restore(&mut self, data: &[u8]) -> Result<Reconciled, ProviderError> {
        let answer = self.inner.restore(RSlice::from_slice(data)).into_result()?;
        if answer.trim().is_empty() {
            return Ok(Reconciled::default());
        }
        from_plugin("reconcile report", answer.as_str())
    }

    /// A named call with a JSON request: the JSON answer, or `None` when the
    /// plugin does not know `method`.
    pub fn call(&mut self, method: &str, request: &str) -> Result<Option<String>, ProviderError> {
        let r = self
            .inner
            .call(RStr::from_str(method), RStr::from_str(request));
        Ok(r.into_result()?.into_option().map(RString::into_string))
    }

    /// See [`Provider::preferred_allocation`]; a plugin that does not know
    /// the call has no preference.
    pub fn preferred_allocation(
        &mut self,
        request: &PreferredAllocationRequest,
    ) -> Result<Vec<String>, ProviderError> {
        match self.call(METHOD_PREFERRED_ALLOCATION, &to_json(request)?)? {
            None => Ok(Vec::new()),
            Some(json) => {
                from_plugin::<PreferredAnswer>("preferred allocation", &json).map(|a| a.devices)
            }
        }
    }

    /// See [`Provider::inventory`]; a plugin that does not know the call
    /// owns nothing.
    pub fn inventory(&mut self) -> Result<Inventory, ProviderError> {
        match self.call(METHOD_INVENTORY, "{}")? {
            None => Ok(Inventory::default()),
            Some(json) => from_plugin("inventory", &json),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CpuSet, NumaNodeId};

    fn mask(ids: &[i64]) -> NumaMask {
        NumaMask::from_nodes(ids.iter().copied()).unwrap()
    }

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
                TopologyHint::new(mask(&[0, 2]), true),
                TopologyHint::ANY,
            ])),
        );
        map.insert("b".to_owned(), None);
        map.insert(
            "c".to_owned(),
            Some(HintSet::Compact(CompactHints::upward_closed(
                vec![mask(&[63]), mask(&[250, 255])],
                2,
            ))),
        );
        map.insert("d".to_owned(), Some(HintSet::Explicit(vec![])));
        map.insert(
            "e".to_owned(),
            Some(HintSet::Compact(CompactHints {
                minimal: vec![mask(&[0]), mask(&[1, 2])],
                within: vec![mask(&[0, 1, 2, 3]), mask(&[1, 2])],
                preferred_width: 1,
            })),
        );
        let hints: ProviderHints = Some(map);
        assert_eq!(hints_from_ffi(hints_to_ffi(&hints)), Ok(hints));
        assert_eq!(hints_from_ffi(hints_to_ffi(&None)), Ok(None));
        let h = TopologyHint::new(mask(&[70, 250]), false);
        assert_eq!(TopologyHint::from(FfiHint::from(h)), h);
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
            c: &ContainerView,
            _: &TopologyHint,
        ) -> Result<Allocation, ProviderError> {
            Ok(Allocation::default()
                .with_cpus(CpuSet::parse("0-3,8").unwrap(), true)
                .with_mems(mask(&[0, 250]))
                .with_devices("x/y", vec![c.name.clone()])
                .with_env("K", "V"))
        }
        fn release(&mut self, _: &str, _: &str) -> Result<(), ProviderError> {
            std::panic::panic_any(7u32)
        }
        fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
            Ok(vec![1, 2])
        }
        fn restore(&mut self, _: &[u8]) -> Result<Reconciled, ProviderError> {
            Ok(Reconciled::default())
        }
        fn preferred_allocation(
            &mut self,
            request: &PreferredAllocationRequest,
        ) -> Result<Vec<String>, ProviderError> {
            if request.size == 9 {
                panic!("nine");
            }
            Ok(request
                .available
                .iter()
                .rev()
                .take(request.size)
                .cloned()
                .collect())
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
        let a = h.allocate(&pod, &boom, &TopologyHint::ANY).unwrap();
        assert_eq!(a.cpus.to_string(), "0-3,8");
        assert!(a.exclusive);
        assert_eq!(a.mems, mask(&[0, 250]));
        assert_eq!(a.devices["x/y"], ["boom"]);
        assert_eq!(a.env["K"], "V");
        assert_eq!(h.restore(&[]), Ok(Reconciled::default()));
        let req = |size| {
            PreferredAllocationRequest::new("x/y", vec!["a".into(), "b".into()], vec![], size)
        };
        assert_eq!(h.preferred_allocation(&req(1)), Ok(vec!["b".to_owned()]));
        assert_eq!(
            h.preferred_allocation(&req(9)),
            Err(ProviderError::new(
                "ProviderPanic",
                "the provider panicked in preferred_allocation: nine"
            ))
        );
        // The default inventory owns nothing; an unknown call answers None.
        assert_eq!(h.inventory(), Ok(Inventory::default()));
        assert_eq!(h.call("added_in_a_later_sdk", "{}"), Ok(None));
    }

    #[test]
    fn host_data_with_fields_from_a_later_sdk_is_read() {
        let mut h = in_process(Panicky);
        let pod = r#"{"uid": "u", "name": "p", "namespace": "d", "qos": "Guaranteed",
                      "init_containers": [], "containers": [], "resources": null,
                      "priority_class": "high"}"#;
        let c = r#"{"name": "app", "requests": {}, "limits": {}, "sidecar": false,
                    "resize_policy": []}"#;
        assert_eq!(h.topology_hints_json(pod, c), Ok(None));
        let a = h.allocate_json(pod, c, &TopologyHint::ANY).unwrap();
        assert_eq!(a.devices["x/y"], ["app"]);
        // Garbage is an error naming what did not parse, not a panic.
        let err = h.topology_hints_json("{", c).unwrap_err();
        assert_eq!(err.reason, "InvalidHostInput");
        assert!(
            err.message.starts_with("the host's pod does not parse: "),
            "{}",
            err.message
        );
    }

    /// A plugin of a later patch release: its answers carry fields this SDK
    /// does not know, and it knows a named call this SDK never makes.
    struct LaterPlugin;

    impl FfiProvider for LaterPlugin {
        fn topology_hints(
            &mut self,
            _: RStr<'_>,
            _: RStr<'_>,
        ) -> RResult<FfiProviderHints, FfiError> {
            RResult::ROk(ROption::RNone)
        }
        fn pod_topology_hints(&mut self, _: RStr<'_>) -> RResult<FfiProviderHints, FfiError> {
            RResult::ROk(ROption::RNone)
        }
        fn allocate(&mut self, _: RStr<'_>, _: RStr<'_>, _: FfiHint) -> RResult<RString, FfiError> {
            RResult::ROk(
                r#"{"cpus": "1", "mems": [250], "cdi_devices": ["vendor.com/x=1"], "annotations": {}}"#
                    .into(),
            )
        }
        fn release(&mut self, _: RStr<'_>, _: RStr<'_>) -> RResult<(), FfiError> {
            RResult::ROk(())
        }
        fn checkpoint(&self) -> RResult<RVec<u8>, FfiError> {
            RResult::ROk(RVec::new())
        }
        fn restore(&mut self, _: RSlice<'_, u8>) -> RResult<RString, FfiError> {
            RResult::ROk(
                r#"{"conflicts": [{"pod_uid": "u", "container": "c", "resource": "x/y",
                    "missing": "device b is gone", "ids": ["b"], "severity": "high"}],
                    "moves": [], "adopted": [{"pod_uid": "v"}]}"#
                    .into(),
            )
        }
        fn call(&mut self, method: RStr<'_>, _: RStr<'_>) -> RResult<ROption<RString>, FfiError> {
            match method.as_str() {
                METHOD_INVENTORY => RResult::ROk(ROption::RSome(
                    r#"{"resources": {"x/y": {"total": {"capacity": 2, "allocatable": 2, "available": 1,
                        "reserved": 0}, "zones": [{"numa": 250, "capacity": 2, "allocatable": 2,
                        "available": 1, "cost": 3}]}}, "generation": 7}"#
                        .into(),
                )),
                METHOD_PREFERRED_ALLOCATION => {
                    RResult::ROk(ROption::RSome(r#"{"devices": ["b"], "score": 12}"#.into()))
                }
                _ => RResult::ROk(ROption::RNone),
            }
        }
    }

    #[test]
    fn plugin_answers_with_fields_from_a_later_sdk_are_read() {
        let mut h = ProviderHandle::new(FfiProvider_TO::from_value(
            LaterPlugin,
            abi_stable::sabi_trait::TD_Opaque,
        ));
        let pod = crate::testkit::guaranteed_pod("p", &[]);
        let a = h
            .allocate(&pod, &pod.containers[0], &TopologyHint::ANY)
            .unwrap();
        assert_eq!(a.cpus.to_string(), "1");
        assert_eq!(a.mems, mask(&[250]));
        assert!(!a.exclusive && a.devices.is_empty());
        let inv = h.inventory().unwrap();
        let zone = inv.resources["x/y"].zones[0];
        assert_eq!(zone.numa, Some(NumaNodeId::new(250).unwrap()));
        assert_eq!(zone.amounts.available, 1);
        let req = PreferredAllocationRequest::new("x/y", vec!["a".into(), "b".into()], vec![], 1);
        assert_eq!(h.preferred_allocation(&req), Ok(vec!["b".to_owned()]));
        let report = h.restore(b"{}").unwrap();
        assert_eq!(
            report,
            Reconciled::new().with_conflict(
                crate::Conflict::new("u", "c", "x/y", "device b is gone").with_ids(["b"])
            )
        );
    }

    #[test]
    fn named_calls_a_plugin_does_not_know_get_their_defaults() {
        // A plugin of a patch release before every named call.
        let mut h = ProviderHandle::new(FfiProvider_TO::from_value(
            Recorder {
                knows_share: false,
                seen: Default::default(),
            },
            abi_stable::sabi_trait::TD_Opaque,
        ));
        let req = PreferredAllocationRequest::new("x/y", vec!["a".into()], vec![], 1);
        assert_eq!(h.preferred_allocation(&req), Ok(vec![]));
        assert_eq!(h.inventory(), Ok(Inventory::default()));
        // An allocation without any field is the empty allocation.
        let pod = crate::testkit::guaranteed_pod("p", &[]);
        assert_eq!(
            h.allocate(&pod, &pod.containers[0], &TopologyHint::ANY),
            Ok(Allocation::default())
        );
    }

    #[test]
    fn bad_plugin_output_is_an_error_naming_it() {
        struct Bad;
        impl FfiProvider for Bad {
            fn topology_hints(
                &mut self,
                _: RStr<'_>,
                _: RStr<'_>,
            ) -> RResult<FfiProviderHints, FfiError> {
                RResult::ROk(ROption::RNone)
            }
            fn pod_topology_hints(&mut self, _: RStr<'_>) -> RResult<FfiProviderHints, FfiError> {
                RResult::ROk(ROption::RNone)
            }
            fn allocate(
                &mut self,
                _: RStr<'_>,
                _: RStr<'_>,
                _: FfiHint,
            ) -> RResult<RString, FfiError> {
                RResult::ROk(r#"{"cpus": "3-1"}"#.into())
            }
            fn release(&mut self, _: RStr<'_>, _: RStr<'_>) -> RResult<(), FfiError> {
                RResult::ROk(())
            }
            fn checkpoint(&self) -> RResult<RVec<u8>, FfiError> {
                RResult::ROk(RVec::new())
            }
            fn restore(&mut self, _: RSlice<'_, u8>) -> RResult<RString, FfiError> {
                RResult::ROk(r#"{"conflicts": "none"}"#.into())
            }
            fn call(&mut self, _: RStr<'_>, _: RStr<'_>) -> RResult<ROption<RString>, FfiError> {
                RResult::ROk(ROption::RSome("[1]".into()))
            }
        }
        let mut h = ProviderHandle::new(FfiProvider_TO::from_value(
            Bad,
            abi_stable::sabi_trait::TD_Opaque,
        ));
        let pod = crate::testkit::guaranteed_pod("p", &[]);
        let err = h
            .allocate(&pod, &pod.containers[0], &TopologyHint::ANY)
            .unwrap_err();
        assert_eq!(err.reason, "InvalidProviderOutput");
        assert!(
            err.message.starts_with(
                "the provider's allocation is invalid: invalid id list \"3-1\": range 3-1 is reversed"
            ),
            "{}",
            err.message
        );
        let err = h.inventory().unwrap_err();
        assert_eq!(err.reason, "InvalidProviderOutput");
        assert!(err
            .message
            .starts_with("the provider's inventory is invalid: "));
        let err = h.restore(b"{}").unwrap_err();
        assert_eq!(err.reason, "InvalidProviderOutput");
        assert!(
            err.message
                .starts_with("the provider's reconcile report is invalid: invalid type: string"),
            "{}",
            err.message
        );
    }

    /// A plugin that records the pod argument of every call; it knows
    /// [`METHOD_SHARE_POD`] when `knows_share`.
    struct Recorder {
        knows_share: bool,
        seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl FfiProvider for Recorder {
        fn topology_hints(
            &mut self,
            pod: RStr<'_>,
            _: RStr<'_>,
        ) -> RResult<FfiProviderHints, FfiError> {
            self.seen.lock().unwrap().push(pod.to_string());
            RResult::ROk(ROption::RNone)
        }
        fn pod_topology_hints(&mut self, pod: RStr<'_>) -> RResult<FfiProviderHints, FfiError> {
            self.seen.lock().unwrap().push(pod.to_string());
            RResult::ROk(ROption::RNone)
        }
        fn allocate(
            &mut self,
            pod: RStr<'_>,
            _: RStr<'_>,
            _: FfiHint,
        ) -> RResult<RString, FfiError> {
            self.seen.lock().unwrap().push(pod.to_string());
            RResult::ROk("{}".into())
        }
        fn release(&mut self, _: RStr<'_>, _: RStr<'_>) -> RResult<(), FfiError> {
            RResult::ROk(())
        }
        fn checkpoint(&self) -> RResult<RVec<u8>, FfiError> {
            RResult::ROk(RVec::new())
        }
        fn restore(&mut self, _: RSlice<'_, u8>) -> RResult<RString, FfiError> {
            RResult::ROk("{}".into())
        }
        fn call(
            &mut self,
            method: RStr<'_>,
            request: RStr<'_>,
        ) -> RResult<ROption<RString>, FfiError> {
            if self.knows_share && method.as_str() == METHOD_SHARE_POD {
                self.seen.lock().unwrap().push(format!("share {request}"));
                return RResult::ROk(ROption::RSome("{}".into()));
            }
            RResult::ROk(ROption::RNone)
        }
    }

    #[test]
    fn a_shared_pod_crosses_once_and_other_pods_in_full() {
        let pod = crate::testkit::guaranteed_pod("p", &[("cpu", 1000)]);
        let json = to_json(&pod).unwrap();
        for knows_share in [true, false] {
            let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let mut h = ProviderHandle::new(FfiProvider_TO::from_value(
                Recorder {
                    knows_share,
                    seen: std::sync::Arc::clone(&seen),
                },
                abi_stable::sabi_trait::TD_Opaque,
            ));
            let shared = Arc::new(pod.clone());
            h.share_pod(&shared);
            h.share_pod(&shared);
            let c = &shared.containers[0];
            h.topology_hints(&shared, c).unwrap();
            h.pod_topology_hints(&shared).unwrap();
            h.allocate(&shared, c, &TopologyHint::ANY).unwrap();
            // An equal pod that is another object is sent in full.
            h.allocate(&pod, c, &TopologyHint::ANY).unwrap();
            let seen = seen.lock().unwrap().clone();
            if knows_share {
                let share = format!("share {json}");
                assert_eq!(seen, [share.as_str(), "", "", "", json.as_str()]);
            } else {
                assert_eq!(seen, [json.as_str(); 4]);
            }
        }
    }

    #[test]
    fn the_adapter_answers_calls_about_the_shared_pod() {
        struct Echo;
        impl Provider for Echo {
            fn new(_: &ProviderContext<'_>) -> Result<Self, ProviderError> {
                Ok(Echo)
            }
            fn topology_hints(
                &mut self,
                _: &PodView,
                _: &ContainerView,
            ) -> Result<ProviderHints, ProviderError> {
                Ok(None)
            }
            fn pod_topology_hints(&mut self, _: &PodView) -> Result<ProviderHints, ProviderError> {
                Ok(None)
            }
            fn allocate(
                &mut self,
                pod: &PodView,
                c: &ContainerView,
                _: &TopologyHint,
            ) -> Result<Allocation, ProviderError> {
                let mut a = Allocation::default();
                a.env
                    .insert("SEEN".into(), format!("{}/{}", pod.name, c.name));
                Ok(a)
            }
            fn release(&mut self, _: &str, _: &str) -> Result<(), ProviderError> {
                Ok(())
            }
            fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
                Ok(Vec::new())
            }
            fn restore(&mut self, _: &[u8]) -> Result<Reconciled, ProviderError> {
                Ok(Reconciled::default())
            }
        }
        let container = to_json(&crate::testkit::container("app", &[])).unwrap();
        let mut h = in_process(Echo);
        let err = h
            .allocate_json("", &container, &TopologyHint::ANY)
            .unwrap_err();
        assert_eq!(err.reason, INVALID_INPUT_REASON);
        assert_eq!(
            err.message,
            "the host referred to the shared pod, but shared none"
        );
        let shared = Arc::new(crate::testkit::guaranteed_pod("first", &[]));
        h.share_pod(&shared);
        let a = h
            .allocate(&shared, &shared.containers[0], &TopologyHint::ANY)
            .unwrap();
        assert_eq!(a.env["SEEN"], "first/app");
        let a = h.allocate_json("", &container, &TopologyHint::ANY).unwrap();
        assert_eq!(a.env["SEEN"], "first/app");
        let other = crate::testkit::guaranteed_pod("second", &[]);
        let a = h
            .allocate(&other, &other.containers[0], &TopologyHint::ANY)
            .unwrap();
        assert_eq!(a.env["SEEN"], "second/app");
    }

    #[test]
    fn pod_round_trip() {
        let pod = crate::testkit::guaranteed_pod("p", &[("cpu", 2000), ("example.com/widget", 1)])
            .with_resources(Some(crate::PodResources::new(
                BTreeMap::from([("cpu".to_owned(), 4000)]),
                BTreeMap::new(),
            )));
        let back: PodView = serde_json::from_str(&to_json(&pod).unwrap()).unwrap();
        assert_eq!(back, pod);
    }
}
