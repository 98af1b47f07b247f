//! `topomgr provider NAME hints|allocate|preferred`: call one provider directly.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use topomgr_node::api::{PreferredDevices, ProviderAllocation};
use topomgr_node::persist::store;
use topomgr_sdk::{PodView, PreferredAllocationRequest, TopologyHint};

use super::inputs;

/// Arguments of `topomgr provider`.
#[derive(Debug, Args)]
pub struct ProviderArgs {
    /// The provider's name (its `[providers.NAME]` key).
    name: String,
    /// sysfs directory to read (default: config sysfs_root).
    #[arg(long, global = true)]
    sysfs_root: Option<PathBuf>,
    /// Restore the provider's state from DIR before the call and save it after.
    #[arg(long, global = true)]
    state_dir: Option<PathBuf>,
    #[command(subcommand)]
    call: Call,
}

#[derive(Debug, Subcommand)]
enum Call {
    /// Print the provider's hints for a container (or the pod with --pod-scope).
    Hints {
        /// Ask for pod-scope hints.
        #[arg(long)]
        pod_scope: bool,
        /// Pod manifest (the first pod in the file; `-` for stdin).
        #[arg(long)]
        pod: String,
        /// Container name (default: the pod's only container).
        #[arg(long)]
        container: Option<String>,
    },
    /// Allocate a container with a given hint and print the allocation.
    Allocate {
        /// Pod manifest (the first pod in the file; `-` for stdin).
        #[arg(long)]
        pod: String,
        /// Container name.
        #[arg(long)]
        container: String,
        /// The hint, as JSON: {"affinity": [0] | null, "preferred": true}.
        #[arg(long)]
        hint: String,
    },
    /// GetPreferredAllocation: the devices the provider would pick, in its order.
    Preferred {
        /// The resource (`nvidia.com/gpu`).
        #[arg(long)]
        resource: String,
        /// Device ids to choose from, comma-separated, in this order.
        #[arg(long)]
        available: String,
        /// Device ids the answer must contain, comma-separated.
        #[arg(long, default_value = "")]
        must_include: String,
        /// How many devices to pick.
        #[arg(long)]
        size: usize,
    },
}

/// A comma-separated id list (`a,b`); empty text is the empty list.
fn id_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The `preferred` request, checked; `Err` is unusable input (exit 2).
fn preferred_request(
    resource: String,
    available: &str,
    must_include: &str,
    size: usize,
) -> anyhow::Result<PreferredAllocationRequest> {
    if resource.is_empty() {
        bail!("--resource is empty; name the resource, e.g. --resource nvidia.com/gpu");
    }
    let req =
        PreferredAllocationRequest::new(resource, id_list(available), id_list(must_include), size);
    req.validate()
        .map_err(|e| anyhow::anyhow!("invalid preferred-allocation request: {e}"))?;
    Ok(req)
}

fn read_pod(path: &str) -> anyhow::Result<PodView> {
    let mut pods = topomgr_manifest::read_pods(&[path.to_string()])?;
    if pods.is_empty() {
        bail!("{path}: no pod found");
    }
    Ok(pods.swap_remove(0))
}

fn container_name(pod: &PodView, given: Option<String>) -> anyhow::Result<String> {
    if let Some(c) = given {
        return Ok(c);
    }
    let all: Vec<&str> = pod
        .init_containers
        .iter()
        .chain(&pod.containers)
        .map(|c| c.name.as_str())
        .collect();
    match all.as_slice() {
        [one] => Ok(one.to_string()),
        _ => bail!(
            "pod {} has {} containers ({}); name one with --container",
            pod.name,
            all.len(),
            all.join(", ")
        ),
    }
}

/// Report a provider's refusal on stderr; exit status 1.
fn refused(name: &str, e: &topomgr_sdk::ProviderError) -> ExitCode {
    eprintln!(
        "topomgr: provider {name:?} refused: {}: {}",
        e.reason, e.message
    );
    ExitCode::from(1)
}

/// Run one provider call.
pub fn run(config: &Path, args: ProviderArgs) -> anyhow::Result<ExitCode> {
    let cfg = inputs::load_node_config(config)?;
    let machine = inputs::discover(&cfg, args.sysfs_root.as_deref())?;
    let mut provider = topomgr_node::setup::load_provider(&cfg, &args.name, &machine)?;
    let _lock = match &args.state_dir {
        Some(dir) => {
            let me = topomgr_node::locks::lock_holder::Holder::current(
                topomgr_node::locks::lock_holder::Role::Provider,
                dir,
                None,
            );
            let lock = topomgr_node::locks::state_lock::StateLock::acquire_within(
                dir,
                &me,
                topomgr_node::persist::state_dir::STATE_LOCK_WAIT,
            )?;
            store::restore_provider(dir, &mut provider).context("restoring provider state")?;
            Some(lock)
        }
        None => None,
    };
    let nodes = machine.numa_ids();
    let code = match args.call {
        Call::Hints {
            pod_scope,
            pod,
            container,
        } => {
            let pod = read_pod(&pod)?;
            let result = if pod_scope {
                provider.pod_topology_hints(&pod)
            } else {
                let name = container_name(&pod, container)?;
                let c = pod
                    .container(&name)
                    .with_context(|| format!("pod {} has no container {name:?}", pod.name))?;
                provider.topology_hints(&pod, c)
            };
            match result {
                Ok(h) => {
                    println!(
                        "{}",
                        serde_json::to_string(&topomgr_engine::explain::printable(h, &nodes))?
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => refused(&args.name, &e),
            }
        }
        Call::Allocate {
            pod,
            container,
            hint,
        } => {
            let pod = read_pod(&pod)?;
            let hint: TopologyHint = serde_json::from_str(&hint).context("invalid --hint")?;
            if let Some(m) = hint.affinity {
                let extra = m.difference(machine.numa_mask());
                if !extra.is_empty() {
                    bail!("invalid --hint: NUMA node(s) {extra} do not exist on this machine (nodes: {})", machine.numa_mask());
                }
            }
            let c = pod
                .container(&container)
                .with_context(|| format!("pod {} has no container {container:?}", pod.name))?;
            match provider.allocate(&pod, c, &hint) {
                Ok(a) => {
                    let out = serde_json::to_string(&ProviderAllocation::from(a))?;
                    println!("{out}");
                    ExitCode::SUCCESS
                }
                Err(e) => refused(&args.name, &e),
            }
        }
        Call::Preferred {
            resource,
            available,
            must_include,
            size,
        } => {
            let req = preferred_request(resource, &available, &must_include, size)?;
            match provider.preferred_allocation(&req) {
                Ok(devices) => {
                    println!("{}", serde_json::to_string(&PreferredDevices { devices })?);
                    ExitCode::SUCCESS
                }
                // Ids or a resource the provider does not have: unusable input.
                Err(e) if e.reason == topomgr_sdk::INVALID_REQUEST_REASON => {
                    bail!("provider {:?} cannot answer: {}", args.name, e.message)
                }
                Err(e) => refused(&args.name, &e),
            }
        }
    };
    if let Some(dir) = &args.state_dir {
        store::save_provider(dir, &provider).context("saving provider state")?;
    }
    Ok(code)
}
