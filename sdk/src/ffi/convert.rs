//! Conversions between the SDK's types and their boundary forms
//! ([`super::abi`]): typed hints and errors, JSON with lenient readers, the
//! constructor's input and the log callback's levels.

use std::collections::BTreeMap;
use std::path::Path;

use abi_stable::std_types::{ROption, RStr};
use serde::{Deserialize, Serialize};

use super::abi::{FfiError, FfiHint, FfiHintSet, FfiProviderHints, FfiResourceHints};
use crate::{CompactHints, HintSet, Machine, NumaMask, ProviderError, ProviderHints, TopologyHint};

/// The `reason` of the error a provider call returns when the provider panicked.
pub const PANIC_REASON: &str = "ProviderPanic";

/// The `reason` of the error the host reports when a plugin's answer cannot
/// be converted back (an unparsable allocation, a resource named twice).
pub const INVALID_OUTPUT_REASON: &str = "InvalidProviderOutput";

/// The `reason` of the error a plugin reports when the host's data does not
/// parse (a host and plugin that disagree about the interface).
pub const INVALID_INPUT_REASON: &str = "InvalidHostInput";

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
pub(super) fn to_json<T: Serialize>(value: &T) -> Result<String, ProviderError> {
    serde_json::to_string(value)
        .map_err(|e| ProviderError::new(INVALID_INPUT_REASON, format!("encoding JSON: {e}")))
}

/// Decodes data the host sent (an error means host and plugin disagree).
pub(super) fn from_host<'a, T: Deserialize<'a>>(
    what: &str,
    json: &'a str,
) -> Result<T, ProviderError> {
    serde_json::from_str(json).map_err(|e| {
        ProviderError::new(
            INVALID_INPUT_REASON,
            format!("the host's {what} does not parse: {e}"),
        )
    })
}

/// Decodes data a plugin returned.
pub(super) fn from_plugin<'a, T: Deserialize<'a>>(
    what: &str,
    json: &'a str,
) -> Result<T, ProviderError> {
    serde_json::from_str(json).map_err(|e| {
        ProviderError::new(
            INVALID_OUTPUT_REASON,
            format!("the provider's {what} is invalid: {e}"),
        )
    })
}

/// The answer of [`METHOD_PREFERRED_ALLOCATION`](super::METHOD_PREFERRED_ALLOCATION).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct PreferredAnswer {
    #[serde(default)]
    pub(super) devices: Vec<String>,
}

/// The request of [`METHOD_EXCLUDE_CPUS`](super::METHOD_EXCLUDE_CPUS).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct ExcludeCpus {
    /// A Linux CPU list.
    pub(super) cpus: String,
}

/// The answer of [`METHOD_EXCLUDE_CPUS`](super::METHOD_EXCLUDE_CPUS).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Excluded {
    #[serde(default)]
    pub(super) excluded: bool,
}

/// The request of [`METHOD_RESIZE`](super::METHOD_RESIZE).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ResizeRequest {
    /// The pod, its containers with their new requests and limits.
    pub(super) pod: crate::PodView,
    /// The container with its new requests and limits.
    pub(super) container: crate::ContainerView,
    /// The container's allocation before the resize.
    #[serde(default)]
    pub(super) current: crate::Allocation,
    /// The NUMA nodes it may use.
    pub(super) hint: TopologyHint,
}

/// The answer of [`METHOD_RESIZE`](super::METHOD_RESIZE).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Resized {
    /// The new allocation; `None`: the provider does not resize.
    #[serde(default)]
    pub(super) allocation: Option<crate::Allocation>,
}

/// The constructor's input as the plugin reads it (unknown keys ignored).
#[derive(Deserialize)]
pub(super) struct InitRequest {
    pub(super) name: String,
    pub(super) machine: Machine,
    #[serde(default)]
    pub(super) config: serde_json::Value,
    pub(super) state_dir: String,
    /// Optional: a host without a config file sends none.
    #[serde(default)]
    pub(super) config_dir: Option<String>,
}

/// The JSON object of [`FfiInit::init_json`](super::FfiInit::init_json). `machine` is a [`Machine`] in
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

/// A log callback that drops everything (for in-process constructions,
/// whose events already reach the caller's own subscriber).
pub extern "C" fn discard_log(_level: u8, _target: RStr<'_>, _message: RStr<'_>) {}

/// Encodes a level for [`FfiInit::log`](super::FfiInit::log): 1 = error, 2 = warn, 3 = info,
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
