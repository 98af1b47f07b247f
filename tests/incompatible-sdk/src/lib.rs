//! A copy of topomgr-sdk 0.3's ABI types (`sdk/src/ffi/abi.rs`) with one
//! deliberate change (`FfiHint` has an extra `distance` field), exporting a
//! plugin the host must refuse at load with a one-line "incompatible SDK"
//! message. With the
//! feature `sdk-0-2` it is a plugin of SDK 0.2 instead: version 0.2.1, ABI
//! version 2 and 0.2's `restore` (no report), which the host refuses on the
//! version first. Nothing here is ever called: the checks fail before.

#![allow(missing_docs)]

use abi_stable::library::RootModule;
use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::{export_root_module, sabi_trait, StableAbi};

/// An error as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiError {
    pub reason: RString,
    pub message: RString,
}

/// A mask as it crosses the boundary.
pub type FfiMask = [u64; 4];

/// A hint as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct FfiHint {
    pub affinity: FfiMask,
    pub any: bool,
    pub preferred: bool,
    /// THE CHANGE: a field the real SDK does not have.
    pub distance: u32,
}

/// A hint set as it crosses the boundary.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub enum FfiHintSet {
    Explicit(RVec<FfiHint>),
    Compact {
        minimal: RVec<FfiMask>,
        within: RVec<FfiMask>,
        preferred_width: u32,
    },
}

/// One resource's entry of a provider's answer.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct FfiResourceHints {
    pub resource: RString,
    pub hints: ROption<FfiHintSet>,
}

pub type FfiProviderHints = ROption<RVec<FfiResourceHints>>;

/// What `restore` answers: SDK 0.3 the reconcile report as JSON.
#[cfg(not(feature = "sdk-0-2"))]
pub type RestoreAnswer = RString;
/// What `restore` answers: SDK 0.2 nothing.
#[cfg(feature = "sdk-0-2")]
pub type RestoreAnswer = ();

/// The provider object behind the boundary.
#[sabi_trait]
pub trait FfiProvider: Send + Sync {
    fn topology_hints(
        &mut self,
        pod: RStr<'_>,
        container: RStr<'_>,
    ) -> RResult<FfiProviderHints, FfiError>;

    fn pod_topology_hints(&mut self, pod: RStr<'_>) -> RResult<FfiProviderHints, FfiError>;

    fn allocate(
        &mut self,
        pod: RStr<'_>,
        container: RStr<'_>,
        hint: FfiHint,
    ) -> RResult<RString, FfiError>;

    fn release(&mut self, pod_uid: RStr<'_>, container: RStr<'_>) -> RResult<(), FfiError>;

    fn checkpoint(&self) -> RResult<RVec<u8>, FfiError>;

    fn restore(&mut self, data: RSlice<'_, u8>) -> RResult<RestoreAnswer, FfiError>;

    #[sabi(last_prefix_field)]
    fn call(&mut self, method: RStr<'_>, request: RStr<'_>) -> RResult<ROption<RString>, FfiError>;
}

pub type FfiProviderBox = FfiProvider_TO<'static, RBox<()>>;

/// What the host hands to a plugin's constructor.
#[repr(C)]
#[derive(StableAbi)]
pub struct FfiInit {
    pub init_json: RString,
    pub log: extern "C" fn(u8, RStr<'_>, RStr<'_>),
    pub log_max_level: u8,
}

/// The plugin's root module.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = ProviderModRef)))]
#[sabi(missing_field(panic))]
pub struct ProviderMod {
    pub sdk_abi_version: u32,
    #[sabi(last_prefix_field)]
    pub new: extern "C" fn(FfiInit) -> RResult<FfiProviderBox, FfiError>,
}

impl RootModule for ProviderModRef {
    abi_stable::declare_root_module_statics! {ProviderModRef}
    const BASE_NAME: &'static str = "topomgr_provider";
    const NAME: &'static str = "topomgr_provider";
    #[cfg(not(feature = "sdk-0-2"))]
    const VERSION_STRINGS: VersionStrings = abi_stable::package_version_strings!();
    #[cfg(feature = "sdk-0-2")]
    const VERSION_STRINGS: VersionStrings = VersionStrings::new("0.2.1");
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
        sdk_abi_version: if cfg!(feature = "sdk-0-2") { 2 } else { 3 },
        new: new_provider,
    }
    .leak_into_prefix()
}
