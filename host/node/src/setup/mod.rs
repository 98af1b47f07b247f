//! Setup: from a configuration file and a discovered machine to a working
//! admitter and node state, at start and again without a restart.
//!
//! Owns the configuration ([`config`], read through `trusted_file`),
//! plugin loading ([`plugin`]: the one module that names `abi_stable`),
//! the wiring below and the reload ([`reload`]: the running state handed
//! to providers built anew).
//!
//! May not touch: cgroups or the state directory's files. It builds a
//! [`NodeState`] through its constructor and hands it over; a reload goes
//! through [`crate::persist::image`], the same install as a restore.
//!
//! This is the one place that turns [`HostConfig`] into an admitter's parts; the
//! binary only adds reading the config file and choosing the sysfs root.
//!
//! - [`AdmitterParts::from_config`]: policy (created in the kubelet's order,
//!   see [`topomgr_engine::policy`]), scope, and every enabled provider in name order,
//!   each called directly (the daemon puts each on its own thread). Two
//!   providers that own one resource (both list it in their inventory) are
//!   refused: the admitter would combine their allocations. Two providers
//!   that serve one physical device (their device identities, or ids that
//!   are one PCI address) are refused too: one device would be given to
//!   two pods.
//! - [`node_state`]: the same with every provider called on
//!   its own thread under the configured deadline (`[daemon]
//!   provider_timeout_ms`), as one-shot commands use them.
//! - [`load_provider`]: one configured provider, for the `provider` verbs.

pub mod config;
pub mod plugin;
pub mod reload;
mod trusted_file;

use std::time::Duration;

use topomgr_sdk::Machine;

use crate::setup::config::HostConfig;
use crate::state::{NodeState, Records};
use plugin::PluginError;
use topomgr_engine::admission::Admitter;
use topomgr_engine::numa::{NumaError, NumaInfo};
use topomgr_engine::policy::{Policy, PolicyError, Scope};
use topomgr_engine::provider::LoadedProvider;

/// Why the configuration could not be turned into an admitter.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A provider name that no configuration file defines.
    #[error("no provider {name:?} is configured (configured: {known})")]
    UnknownProvider {
        /// The name asked for.
        name: String,
        /// The configured names, comma-separated, or `none`.
        known: String,
    },
    /// A provider that the configuration disables.
    #[error(
        "provider {name:?} is disabled (enabled = false in the configuration read from {files})"
    )]
    Disabled {
        /// The provider.
        name: String,
        /// The configuration files read, comma-separated.
        files: String,
    },
    /// A plugin that could not be loaded.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// The machine's NUMA information is unusable.
    #[error(transparent)]
    Numa(NumaError),
    /// The policy could not be created from the configuration.
    #[error("cannot create the Topology Manager policy: {error}{place}")]
    Policy {
        /// Why.
        error: PolicyError,
        /// Where the key it names was set (` (`policy` in FILE)`), or empty.
        place: String,
    },
    /// Two enabled providers own one resource.
    #[error("providers {first:?} and {second:?} both own resource {resource:?} (the inventories they give at start both list it); their allocations would be combined and a pod given more than it asked for. Enable only one of them: set enabled = false in [providers.{second}] ({file}), or configure the two for different resources")]
    SharedResource {
        /// The resource.
        resource: String,
        /// The provider that owns it first (in name order).
        first: String,
        /// The other one.
        second: String,
        /// Where the other one is configured.
        file: String,
    },
    /// Two enabled providers serve one physical device.
    #[error("{0}")]
    SharedDevice(Box<SharedDevice>),
    /// A provider's thread could not be started.
    #[error("cannot start the thread of provider {provider:?}: {cause}")]
    ProviderThread {
        /// The provider.
        provider: String,
        /// The error.
        cause: std::io::Error,
    },
}

/// Two enabled providers that serve one physical device.
#[derive(Debug)]
pub struct SharedDevice {
    /// The device in words (`PCI device 0000:17:00.0`).
    pub device: String,
    /// The provider that serves it first (in name order).
    pub first: String,
    /// The name it has there (`nvidia.com/gpu device 0000:17:00.0`).
    pub first_as: String,
    /// The other one.
    pub second: String,
    /// The name it has there.
    pub second_as: String,
    /// Where the other one is configured.
    pub file: String,
}

impl std::fmt::Display for SharedDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let SharedDevice {
            device,
            first,
            first_as,
            second,
            second_as,
            file,
        } = self;
        write!(
            f,
            "providers {first:?} and {second:?} both serve {device} (as {first_as} and as {second_as}); one device would be given to two pods. Serve each device through one provider: set enabled = false in [providers.{second}] ({file}), or configure the two for different devices"
        )
    }
}

/// What an admitter is made of.
pub struct AdmitterParts {
    /// The Topology Manager policy.
    pub policy: Policy,
    /// The admission scope.
    pub scope: Scope,
    /// Every enabled provider, in name order, called directly.
    pub providers: Vec<LoadedProvider>,
}

/// The Topology Manager policy and scope of `cfg` over `machine`'s NUMA
/// nodes (at start and at every reload); a refused key is named with the
/// file or variable that set it.
pub fn policy_of(cfg: &HostConfig, machine: &Machine) -> Result<(Policy, Scope), SetupError> {
    let numa = NumaInfo::from_machine(machine).map_err(SetupError::Numa)?;
    Policy::create(&cfg.policy, &cfg.scope, &cfg.policy_options, numa).map_err(|error| {
        SetupError::Policy {
            place: cfg.policy_error_place(&error),
            error,
        }
    })
}

impl AdmitterParts {
    /// The policy, the scope and every enabled provider of `cfg` on `machine`.
    pub fn from_config(cfg: &HostConfig, machine: &Machine) -> Result<Self, SetupError> {
        let (policy, scope) = policy_of(cfg, machine)?;
        let mut providers = cfg
            .enabled_providers()
            .map(|(name, _)| load_direct(cfg, name, machine))
            .collect::<Result<Vec<_>, _>>()?;
        refuse_shared(cfg, &mut providers)?;
        Ok(AdmitterParts {
            policy,
            scope,
            providers,
        })
    }
}

/// Refuse providers that would give one thing twice: two that own one
/// resource, or two that serve one physical device (at start, and at a
/// reload before anything changes).
pub fn refuse_shared<'a>(
    cfg: &HostConfig,
    providers: impl IntoIterator<Item = &'a mut LoadedProvider>,
) -> Result<(), SetupError> {
    let mut providers: Vec<&mut LoadedProvider> = providers.into_iter().collect();
    one_owner_per_resource(cfg, &mut providers)?;
    one_provider_per_device(cfg, &mut providers)
}

/// Refuse two providers that own one resource: each provider's inventory
/// (what it owns, per NUMA node) names the resources it allocates. A
/// provider that cannot say owns nothing here.
fn one_owner_per_resource(
    cfg: &HostConfig,
    providers: &mut [&mut LoadedProvider],
) -> Result<(), SetupError> {
    let mut owners: std::collections::BTreeMap<String, String> = Default::default();
    for p in providers.iter_mut() {
        let inventory = match p.inventory() {
            Ok(i) => i,
            Err(e) => {
                tracing::debug!(provider = p.name(), error = %e, "no inventory: the resources it owns are not known");
                continue;
            }
        };
        for resource in inventory.resources.into_keys() {
            if let Some(first) = owners.get(&resource) {
                return Err(SetupError::SharedResource {
                    resource,
                    first: first.clone(),
                    second: p.name().to_owned(),
                    file: cfg
                        .providers
                        .get(p.name())
                        .map(|e| e.defined_in.display().to_string())
                        .unwrap_or_default(),
                });
            }
            owners.insert(resource, p.name().to_owned());
        }
    }
    Ok(())
}

/// Refuse two providers that serve one physical device (issue 37: two GPU
/// providers under `nvidia.com/gpu` and `example.com/gpu`, two SR-IOV
/// providers under two prefixes, gave one device to two pods). What a
/// device is comes from each provider's device identities, and from its id
/// when the id is a PCI address
/// ([`topomgr_engine::ledger::physical_identities`]); a provider that
/// cannot say is judged by its ids alone.
fn one_provider_per_device(
    cfg: &HostConfig,
    providers: &mut [&mut LoadedProvider],
) -> Result<(), SetupError> {
    use topomgr_engine::ledger::{describe_identity, physical_identities};
    // Identity -> (provider, name of the device there).
    let mut servers: std::collections::HashMap<String, (String, String)> = Default::default();
    for p in providers.iter_mut() {
        let served = match p.device_identities() {
            Ok(Some(served)) => served,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(provider = p.name(), error = %e, "no device identities: its devices are not compared with other providers'");
                continue;
            }
        };
        for (resource, devices) in &served.resources {
            for d in devices {
                let name = format!("{resource} device {}", d.id);
                for key in physical_identities(resource, &d.id, &d.identity) {
                    match servers.get(&key) {
                        Some((first, first_as)) if first != p.name() => {
                            return Err(SetupError::SharedDevice(Box::new(SharedDevice {
                                device: describe_identity(&key),
                                first: first.clone(),
                                first_as: first_as.clone(),
                                second: p.name().to_owned(),
                                second_as: name,
                                file: cfg
                                    .providers
                                    .get(p.name())
                                    .map(|e| e.defined_in.display().to_string())
                                    .unwrap_or_default(),
                            })));
                        }
                        Some(_) => {}
                        None => {
                            servers.insert(key, (p.name().to_owned(), name.clone()));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// An admitter over [`AdmitterParts::from_config`], every provider called
/// on its own thread with the configured deadline.
fn admitter_from_config(cfg: &HostConfig, machine: &Machine) -> Result<Admitter, SetupError> {
    let parts = AdmitterParts::from_config(cfg, machine)?;
    let providers = parts
        .providers
        .into_iter()
        .map(|p| with_deadline(cfg, p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut admitter = Admitter::new(machine, parts.policy, parts.scope, providers);
    admitter.set_align_unknown_devices(cfg.cdi.align_unknown_devices);
    Ok(admitter)
}

/// A node state over an admitter of [`AdmitterParts::from_config`] whose
/// providers each run on their own thread under the configured deadline,
/// with no records yet,
/// applying under the configured cgroup root, in this boot.
pub fn node_state(cfg: &HostConfig, machine: &Machine) -> Result<NodeState, SetupError> {
    Ok(NodeState::new(
        admitter_from_config(cfg, machine)?,
        Records::default(),
        &cfg.cgroup_root,
        &crate::fsutil::boot_id(),
    )
    .with_cpu_quota_lift(cfg.disable_cpu_quota_with_exclusive_cpus)
    .with_limits(cfg.limits.limits()))
}

/// Every enabled provider of `cfg` on `machine`, each loaded on its own
/// (a reload keeps the running instance of one that fails), called with
/// the configured deadline, in name order.
pub fn load_each_provider(
    cfg: &HostConfig,
    machine: &Machine,
) -> Vec<(String, Result<LoadedProvider, SetupError>)> {
    cfg.enabled_providers()
        .map(|(name, _)| (name.to_owned(), load_provider(cfg, name, machine)))
        .collect()
}

/// One configured, enabled provider, called with the configured deadline.
pub fn load_provider(
    cfg: &HostConfig,
    name: &str,
    machine: &Machine,
) -> Result<LoadedProvider, SetupError> {
    with_deadline(cfg, load_direct(cfg, name, machine)?)
}

fn load_direct(
    cfg: &HostConfig,
    name: &str,
    machine: &Machine,
) -> Result<LoadedProvider, SetupError> {
    let entry = cfg
        .providers
        .get(name)
        .ok_or_else(|| SetupError::UnknownProvider {
            name: name.to_owned(),
            known: if cfg.providers.is_empty() {
                "none".to_owned()
            } else {
                cfg.providers
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })?;
    if !entry.enabled {
        return Err(SetupError::Disabled {
            name: name.to_owned(),
            files: cfg
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let dirs = plugin::search_dirs(cfg);
    let p = plugin::load_provider(name, entry, &dirs, machine, &cfg.state_dir)?;
    Ok(p)
}

/// `provider` on its own thread, every call with the configured deadline,
/// as the daemon calls it.
fn with_deadline(cfg: &HostConfig, provider: LoadedProvider) -> Result<LoadedProvider, SetupError> {
    let name = provider.name().to_owned();
    let timeout = Duration::from_millis(cfg.daemon.provider_timeout_ms);
    provider
        .with_deadline(timeout)
        .map_err(|cause| SetupError::ProviderThread {
            provider: name,
            cause,
        })
}
