//! Reconciliation without a restart ([`reload`]): the running state is
//! handed to providers built anew on the machine and config as they are
//! now, the same install as a restore at start (see [`crate::persist::image`] and
//! [`crate::state::restore_reports`]).

use std::collections::BTreeMap;
use std::path::Path;

use topomgr_engine::admission::Admitter;
use topomgr_engine::policy::{Policy, Scope};
use topomgr_engine::provider::LoadedProvider;
use topomgr_sdk::Machine;

use crate::persist::image::{self, Restored};
use crate::persist::snapshot::StateError;
use crate::state::NodeState;

/// A provider a reload could not build anew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadFailure {
    /// The provider.
    pub provider: String,
    /// Why its new instance could not be built.
    pub error: String,
    /// Whether the running instance goes on (`false`: the provider is new
    /// and is not loaded).
    pub kept_running: bool,
}

impl std::fmt::Display for ReloadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kept_running {
            write!(
                f,
                "provider {:?} cannot start on the machine and config as they are now ({}); it keeps running as it was started. Fix its config and reload again (systemctl reload topomgr, or kill -HUP the daemon)",
                self.provider, self.error
            )
        } else {
            write!(
                f,
                "provider {:?} cannot start ({}); it is not loaded. Fix its config and reload again (systemctl reload topomgr, or kill -HUP the daemon)",
                self.provider, self.error
            )
        }
    }
}

/// What [`reload`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reloaded {
    /// What the restore into the new providers found.
    pub restored: Restored,
    /// The providers that could not be built anew.
    pub failures: Vec<ReloadFailure>,
}

/// Reconcile `node` with `machine`, `policy`, `scope` and `fresh`
/// providers (each enabled provider built anew, by name, or why it could
/// not be): every running provider's state (and what is kept for held and
/// absent ones) is restored into the new instances, which take it back on
/// the machine and config as they are now; a provider that could not be
/// built keeps its running instance. Pods and records are kept; the pod
/// table rebuilds the ledger on the new machine. Policy and scope apply to
/// admissions from now on. The caller saves the whole state afterwards
/// (the providers' states changed). `state_dir` names the state in
/// errors.
///
/// Why a reload failed.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// A running provider cannot give its state (a call of it is stuck):
    /// nothing changed.
    #[error("{0}")]
    Unchanged(StateError),
    /// The state could not be installed into the new providers: the node
    /// must be brought back to the saved state
    /// ([`crate::persist::store::Store::reload`]).
    #[error("{0}")]
    Installed(StateError),
}

/// Fails as [`ReloadError`] says.
pub fn reload(
    node: &mut NodeState,
    state_dir: &Path,
    machine: &Machine,
    policy: Policy,
    scope: Scope,
    fresh: Vec<(String, Result<LoadedProvider, String>)>,
) -> Result<Reloaded, ReloadError> {
    let body = image::body_of(node, 0).map_err(ReloadError::Unchanged)?;
    let old = node.swap_admitter(Admitter::new(machine, policy, scope, Vec::new()));
    let mut running: BTreeMap<String, LoadedProvider> = old
        .into_providers()
        .into_iter()
        .map(|p| (p.name().to_owned(), p))
        .collect();
    let mut providers = Vec::new();
    let mut failures = Vec::new();
    for (name, built) in fresh {
        match built {
            Ok(p) => providers.push(p),
            Err(error) => {
                let old = running.remove(&name);
                tracing::warn!(provider = %name, error = %error, kept_running = old.is_some(), "reload: the provider cannot start on the machine and config as they are now");
                failures.push(ReloadFailure {
                    provider: name,
                    error,
                    kept_running: old.is_some(),
                });
                providers.extend(old);
            }
        }
    }
    // Providers no longer configured end here; their state is kept (absent).
    drop(running);
    node.admitter_mut().set_providers(providers);
    let boot = node.boot_id().to_owned();
    let state_file = state_dir.join(crate::persist::snapshot::STATE_FILE);
    let restored = image::install(&state_file, boot.clone(), body, node, &boot)
        .map_err(ReloadError::Installed)?;
    for e in node.exclude_pinned_cpus() {
        tracing::warn!("reload: {e}");
    }
    Ok(Reloaded { restored, failures })
}
