//! The safe [`Provider`] trait that plugin vendors implement.

use std::path::Path;

use crate::{Allocation, ContainerView, Machine, PodView, ProviderHints, TopologyHint};

/// An error from a provider, with a short machine-readable `reason` (shown as
/// the admission's `reason`, e.g. `"SMTAlignmentError"`) and a `message` for
/// people that says what fell short and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("{reason}: {message}")]
pub struct ProviderError {
    /// Short reason, CamelCase, without spaces.
    pub reason: String,
    /// Human-readable explanation.
    pub message: String,
}

impl ProviderError {
    /// An error with an explicit reason.
    pub fn new(reason: impl Into<String>, message: impl Into<String>) -> Self {
        ProviderError {
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A configuration error (reason `"InvalidConfig"`).
    pub fn config(message: impl Into<String>) -> Self {
        Self::new("InvalidConfig", message)
    }

    /// An allocation failure (reason `"UnexpectedAdmissionError"`, as the kubelet says).
    pub fn admission(message: impl Into<String>) -> Self {
        Self::new("UnexpectedAdmissionError", message)
    }
}

/// The provider's `[providers.NAME.config]` table, as JSON.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProviderConfig(pub serde_json::Value);

impl ProviderConfig {
    /// Deserialize the table into the provider's own config type; the error
    /// names the offending key (use `#[serde(deny_unknown_fields)]`).
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ProviderError> {
        let v = if self.0.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            self.0.clone()
        };
        serde_json::from_value(v).map_err(|e| ProviderError::config(e.to_string()))
    }
}

/// What a provider gets at construction.
#[derive(Debug, Clone)]
pub struct ProviderContext<'a> {
    /// The machine as discovered by the host.
    pub machine: &'a Machine,
    /// The provider's config table.
    pub config: &'a ProviderConfig,
    /// A directory the provider may use for its own files (may not exist yet).
    pub state_dir: &'a Path,
}

/// A hint provider: the safe trait a plugin implements.
///
/// The host calls one method at a time (admissions are serialized), so
/// methods take `&mut self`. A panic inside any method is caught by the
/// export macro and turned into an error; the host keeps running.
pub trait Provider: Send + Sync + 'static {
    /// Build the provider from the machine and its config. Bad config must be
    /// an error naming the key, never a panic.
    fn new(ctx: &ProviderContext<'_>) -> Result<Self, ProviderError>
    where
        Self: Sized;

    /// Hints for one container (container scope).
    fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError>;

    /// Hints for the whole pod (pod scope).
    fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError>;

    /// Reserve resources for `container`, honouring the merged `hint`.
    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError>;

    /// Release what was reserved for (`pod_uid`, `container`); releasing
    /// something unknown is not an error.
    fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError>;

    /// Serialize the provider's assignments.
    fn checkpoint(&self) -> Result<Vec<u8>, ProviderError>;

    /// Restore assignments from a [`Provider::checkpoint`]; must validate the
    /// bytes and change nothing on error.
    fn restore(&mut self, data: &[u8]) -> Result<(), ProviderError>;
}
