//! `topomgr serve`: the node daemon.
//!
//! - [`topomgr_node::locks::node_lock`]: the daemon is the only owner of its cgroup
//!   hierarchy's cpusets on this machine (no other daemon, no one-shot
//!   command beside it);
//! - [`topomgr_node::locks::state_lock`]: one daemon per state directory (`flock`);
//! - [`topomgr_engine::provider::LoadedProvider::with_deadline`]: every provider on its own thread, each
//!   call with a deadline, reporting to the metrics
//!   ([`topomgr_engine::provider::LoadedProvider::with_observer`]);
//! - `state_thread`: the one thread that owns the node state and applies
//!   requests one at a time, with group-committed,
//!   durable state ([`topomgr_node::persist::store::Store`]: journal and snapshot);
//! - `server`: the HTTP/JSON API on a Unix socket;
//! - `access`: socket ownership/mode and the peer-credential check;
//! - [`metrics`]: Prometheus metrics (kubelet names);
//! - `scrape`: `GET /metrics` over TCP at `daemon.metrics_address`;
//! - [`listener`]: the accept loop both listeners share: a cap on open
//!   connections each, within the open-file limit, and deadlines for a
//!   request's headers (and a kept-alive connection's idle time) and body;
//! - `systemd`: readiness and stopping notifications (`Type=notify`);
//! - [`nri`]: the container runtime's NRI plugin (`[nri] enabled`), admitting
//!   through the state thread;
//! - `podresources`: the kubelet's PodResources API on its own socket
//!   (`[podresources] socket`), answered from the state thread's view.
//!
//! Start-up order matters: the caller takes the
//! [`topomgr_node::locks::node_lock::NodeLock`] and the [`topomgr_node::locks::state_lock::StateLock`] before
//! loading providers (they may read the state directory); [`run`] then asks
//! each provider what it owns (its inventory, for the metrics), restores
//! the state (verify, check against the machine; nothing is re-admitted or
//! released), reclaims the pods whose owners are gone, binds the socket
//! and the metrics address, tells the service manager it is ready, and
//! serves until SIGTERM or SIGINT (telling the service manager it is
//! stopping), reclaiming again every `reclaim_interval`. With `[nri]
//! enabled` it also registers with the runtime's NRI socket once the state
//! is restored, and keeps re-registering while it serves.

mod access;
mod cdi;
pub mod listener;
pub mod metrics;
pub mod nri;
mod podresources;
pub mod reload;
mod scrape;
mod server;
mod state_thread;
mod systemd;

pub use podresources::SocketError as PodResourcesSocketError;
pub use state_thread::StartError;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::watch;
use topomgr_sdk::{Inventory, Machine};
use tracing::{info, warn};

use access::AccessPolicy;
use metrics::Metrics;
use server::AppState;
use state_thread::{StateThread, StateThreadSettings};
use topomgr_engine::admission::Admitter;
use topomgr_engine::policy::{Policy, Scope};
use topomgr_engine::provider::{LoadedProvider, ProviderObserver};
use topomgr_node::locks::node_lock::NodeLock;
use topomgr_node::locks::state_lock::StateLock;

/// Everything the daemon needs, prepared by `topomgr serve`.
pub struct Daemon {
    /// Socket path.
    pub socket: PathBuf,
    /// Group allowed besides root.
    pub group: String,
    /// Where `GET /metrics` is also served over TCP (`None`: socket only).
    pub metrics_address: Option<SocketAddr>,
    /// Deadline of one provider call.
    pub provider_timeout: Duration,
    /// How often pods whose owners are gone are released (also at start).
    pub reclaim_interval: Duration,
    /// State directory (locked by `lock`).
    pub state_dir: PathBuf,
    /// Root of the cgroup hierarchy (`attach`).
    pub cgroup_root: PathBuf,
    /// Lift the CFS quota of containers with exclusive CPUs (config
    /// `disable_cpu_quota_with_exclusive_cpus`): at `attach`, and in the NRI
    /// adjustment.
    pub lift_cpu_quota: bool,
    /// How many pods and containers may be held (config `[limits]`).
    pub limits: topomgr_node::state::limits::Limits,
    /// The discovered machine.
    pub machine: Machine,
    /// The Topology Manager policy.
    pub policy: Policy,
    /// The scope.
    pub scope: Scope,
    /// Loaded providers, in call order.
    pub providers: Vec<LoadedProvider>,
    /// The held state-directory lock (kept for the daemon's lifetime).
    pub lock: StateLock,
    /// The held node lock (kept for the daemon's lifetime).
    pub node_lock: NodeLock,
    /// The NodeResourceTopology export (node name, file).
    pub export: topomgr_node::nrt::ExportSettings,
    /// The runtime's NRI socket and registration, when `[nri] enabled`.
    pub nri: Option<nri::NriSettings>,
    /// The API server, when `[kubernetes] enabled`.
    pub kubernetes: Option<KubeSettings>,
    /// Live reconciliation (SIGHUP and the machine check), when given.
    pub reload: Option<Reload>,
    /// Where the kubelet's PodResources API is served (`[podresources]
    /// socket`; `None`: not served).
    pub podresources_socket: Option<PathBuf>,
    /// The CDI spec directories (config `[cdi] spec_dirs`; empty: CDI
    /// devices are not looked for), for the NRI face and the devices of
    /// owned admissions (the OCI hook's).
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// The sysfs root CDI device nodes are mapped to PCI devices under.
    pub sysfs_root: PathBuf,
}

/// What the daemon does on the API server (`[kubernetes]`).
pub struct KubeSettings {
    /// The client (each task gets its own connection).
    pub client: topomgr_kube::ApiClient,
    /// Push the NodeResourceTopology object, so.
    pub push: Option<topomgr_kube::nrt_push::PushSettings>,
    /// Record the NRI face's refusals as Events.
    pub events: bool,
}

/// How the daemon follows its machine and config ([`reload`]).
pub struct Reload {
    /// Where the config and the machine are read again.
    pub source: Arc<dyn reload::Source>,
    /// The config the daemon started with.
    pub config: topomgr_node::setup::config::HostConfig,
    /// `[daemon] machine_check_interval_ms`.
    pub interval: Duration,
}

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A provider thread could not be started.
    #[error("cannot start the thread of provider {provider:?}: {cause}")]
    ProviderThread {
        /// Provider name.
        provider: String,
        /// The error.
        cause: std::io::Error,
    },
    /// The state thread could not start (e.g. damaged state).
    #[error(transparent)]
    Start(#[from] state_thread::StartError),
    /// The socket could not be prepared or secured.
    #[error(transparent)]
    Socket(#[from] access::SocketError),
    /// The metrics address could not be bound.
    #[error(transparent)]
    Metrics(#[from] scrape::BindError),
    /// Too few file descriptors to serve.
    #[error(transparent)]
    Budget(#[from] listener::BudgetError),
    /// Binding the socket failed.
    #[error("cannot listen on {}: {cause}", path.display())]
    Bind {
        /// The socket.
        path: PathBuf,
        /// The error.
        cause: std::io::Error,
    },
    /// The PodResources socket could not be set up.
    #[error(transparent)]
    PodResources(#[from] podresources::SocketError),
    /// `[nri] enabled` under pod scope.
    #[error(transparent)]
    NriScope(#[from] nri::PodScopeUnderNri),
    /// The async runtime could not be built or serving failed.
    #[error("{what}: {cause}")]
    Runtime {
        /// What failed.
        what: &'static str,
        /// The error.
        cause: std::io::Error,
    },
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, "cannot watch SIGTERM; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
    }
}

/// Ask the state thread to reclaim every `interval` until `stop` says so.
async fn reclaim_periodically(
    state_thread: StateThread,
    interval: Duration,
    stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate; the start already reclaimed.
    ticks.tick().await;
    let stopping = stopped(stop);
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            _ = &mut stopping => return,
            _ = ticks.tick() => {
                if let Err(e) = state_thread.submit(state_thread::Command::Reclaim).await {
                    warn!(error = %e, "periodic reclaim failed");
                }
            }
        }
    }
}

/// Completes once `stop` says so (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// What a provider owns, for the metrics; a provider that cannot answer
/// owns nothing there (it still works).
fn inventory_of(p: &mut LoadedProvider) -> Inventory {
    p.inventory().unwrap_or_else(|e| {
        warn!(provider = p.name(), error = %e, "no inventory: its allocations are not counted as CPU or memory pinning");
        Inventory::default()
    })
}

/// How long PodResources clients may take to close at shutdown.
const PODRESOURCES_GRACE: Duration = Duration::from_secs(1);

/// The PodResources API's [`topomgr_podresources::Lister`]: the state
/// thread's published view ([`podresources`]), never a request to it.
struct PodResourcesLister {
    state_thread: StateThread,
}

// Each answer takes what it needs from the view (reference-counted
// admissions) and converts them after the lock is let go: the state thread
// waits for readers when it publishes a commit.
impl topomgr_podresources::Lister for PodResourcesLister {
    fn list(&self) -> topomgr_podresources::v1::ListPodResourcesResponse {
        let (admitted, allocatable) = self.state_thread.read(|v| {
            let admitted: Vec<Arc<topomgr_engine::admission::AdmitResult>> =
                v.pods.values().cloned().collect();
            (admitted, Arc::clone(&v.podresources))
        });
        topomgr_podresources::v1::ListPodResourcesResponse {
            pod_resources: podresources::pods(admitted.iter().map(AsRef::as_ref), &allocatable),
        }
    }

    fn allocatable(&self) -> topomgr_podresources::v1::AllocatableResourcesResponse {
        let allocatable = self.state_thread.read(|v| Arc::clone(&v.podresources));
        allocatable.response()
    }

    fn get(&self, namespace: &str, name: &str) -> Option<topomgr_podresources::v1::PodResources> {
        let (admitted, allocatable) = self.state_thread.read(|v| {
            (
                podresources::admissions_of(v.pods.values(), namespace, name),
                Arc::clone(&v.podresources),
            )
        });
        podresources::pods(admitted.iter().map(AsRef::as_ref), &allocatable)
            .into_iter()
            .next()
    }
}

/// Restore state, bind the socket and serve until SIGTERM/SIGINT.
pub fn run(d: Daemon) -> Result<(), DaemonError> {
    if d.nri.is_some() {
        nri::check_scope(d.scope, d.kubernetes.is_some())?;
    }
    let budget = listener::Budget::of_process()?;
    let metrics = Arc::new(Metrics::for_machine(&d.machine));
    let mut providers: Vec<LoadedProvider> = Vec::with_capacity(d.providers.len());
    for p in d.providers {
        let name = p.name().to_owned();
        let mut p = p
            .with_deadline(d.provider_timeout)
            .map_err(|source| DaemonError::ProviderThread {
                provider: name.clone(),
                cause: source,
            })?
            .with_observer(Arc::clone(&metrics) as Arc<dyn ProviderObserver>);
        metrics.provider(&name, &inventory_of(&mut p));
        providers.push(p);
    }
    let admitter = Admitter::new(&d.machine, d.policy, d.scope, providers);
    let kube = d.kubernetes;
    let (nrt_publisher, nrt_feed) = match kube.as_ref().and_then(|k| k.push.as_ref()) {
        Some(_) => {
            let (p, f) = topomgr_kube::nrt_push::channel();
            (Some(p), Some(f))
        }
        None => (None, None),
    };
    let settings = StateThreadSettings {
        nrt_push: nrt_publisher,
        state_dir: d.state_dir.clone(),
        cgroup_root: d.cgroup_root,
        lift_cpu_quota: d.lift_cpu_quota,
        limits: d.limits,
        members: Some(d.socket.clone()),
        boot_id: topomgr_node::fsutil::boot_id(),
        export: d.export.clone(),
    };
    let export_node = d.export.node_name.clone();
    let (state_thread, restored) =
        StateThread::start(admitter, &d.machine, settings, Arc::clone(&metrics))?;
    let access = Arc::new(AccessPolicy::for_group(&d.group));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("topomgr-http")
        .build()
        .map_err(|source| DaemonError::Runtime {
            what: "cannot start the async runtime",
            cause: source,
        })?;
    let socket = d.socket;
    let lock = d.lock;
    let node_lock = d.node_lock;
    let lock_path = lock.path().to_path_buf();
    let node_lock_path = node_lock.path().to_path_buf();
    let state_dir = d.state_dir;
    let machine = d.machine;
    let metrics_address = d.metrics_address;
    let reclaim_interval = d.reclaim_interval;
    let nri_settings = d.nri;
    let cdi = cdi::Resolver::new(d.cdi_spec_dirs, d.sysfs_root);
    let reload = d.reload;
    let podresources_socket = d.podresources_socket;
    let nri_status = match &nri_settings {
        Some(s) => nri::NriStatus::enabled(&s.socket, Some(Arc::clone(&metrics))),
        None => nri::NriStatus::disabled(),
    };
    runtime.block_on(async move {
        access::prepare_socket_path(&socket)?;
        let listener = UnixListener::bind(&socket).map_err(|source| DaemonError::Bind {
            path: socket.clone(),
            cause: source,
        })?;
        access::secure_socket(&socket, &access)?;
        let podresources_listener = match &podresources_socket {
            Some(path) => Some((path.clone(), podresources::bind(path)?)),
            None => None,
        };
        let scrape_listener = match metrics_address {
            Some(address) => Some(scrape::bind(address).await?),
            None => None,
        };
        let scrape_address = scrape_listener.as_ref().and_then(|l| l.local_addr().ok());
        info!(socket = %socket.display(), state_dir = %state_dir.display(), lock = %lock_path.display(), node_lock = %node_lock_path.display(), pods = restored.pods, group = %access.group, metrics_address = ?scrape_address, max_connections = budget.socket.max_connections, metrics_max_connections = budget.metrics.max_connections, "topomgr daemon listening");
        let (stop, stop_rx) = watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            systemd::stopping();
            let _ = stop.send(true);
        });
        let scraping = scrape_listener.map(|l| {
            tokio::spawn(scrape::serve(
                l,
                Arc::clone(&metrics),
                budget.metrics,
                stopped(stop_rx.clone()),
            ))
        });
        tokio::spawn(reclaim_periodically(
            state_thread.clone(),
            reclaim_interval,
            stop_rx.clone(),
        ));
        if let Some(r) = reload {
            tokio::spawn(reload::watch(
                state_thread.clone(),
                r.source,
                r.config,
                machine.clone(),
                r.interval,
                Arc::clone(&metrics),
                stop_rx.clone(),
            ));
        }
        let pusher = match (&kube, nrt_feed) {
            (Some(k), Some(feed)) => k.push.clone().map(|push| {
                info!(server = %k.client.server(), node = %push.node_name, "pushing the NodeResourceTopology object to the API server");
                topomgr_kube::nrt_push::NrtPusher::start(k.client.fresh(), push, feed)
            }),
            _ => None,
        };
        let events = kube.as_ref().filter(|k| k.events).map(|k| {
            topomgr_kube::events::EventRecorder::start(k.client.fresh(), export_node.clone())
        });
        if let Some(settings) = nri_settings {
            let mut face = nri::Face::new(state_thread.clone(), Arc::clone(&nri_status))
                .with_cpu_quota_lift(d.lift_cpu_quota)
                .with_provider_timeout(d.provider_timeout)
                .with_kubelet_root(settings.kubelet_root_dir.clone())
                .with_cri_socket(settings.cri_socket.clone())
                .with_cdi(
                    cdi.clone(),
                    settings.kubelet_pod_resources_socket.clone().map(|socket| {
                        nri::KubeletClaims {
                            socket,
                            timeout: nri::KUBELET_CLAIMS_TIMEOUT,
                            slices: kube.as_ref().map(|k| {
                                nri::SliceReader::new(k.client.fresh(), nri::SLICES_TIMEOUT)
                            }),
                        }
                    }),
                );
            if let Some(events) = events {
                face = face.with_events(events);
            }
            if let (Scope::Pod, Some(k)) = (d.scope, &kube) {
                info!(server = %k.client.server(), "pod scope: each pod is read from the API server and admitted whole at its first container");
                face = face.with_pod_scope(nri::PodSpecs::new(
                    k.client.fresh(),
                    topomgr_kube::pods::READ_TIMEOUT,
                ));
            }
            let face = Arc::new(face);
            tokio::spawn(nri::serve(face, settings, stopped(stop_rx.clone())));
        }
        let podresources_task = podresources_listener.map(|(path, listener)| {
            info!(socket = %path.display(), "serving the kubelet's PodResources API");
            let lister = Arc::new(PodResourcesLister {
                state_thread: state_thread.clone(),
            });
            tokio::spawn(topomgr_podresources::serve(
                listener,
                lister,
                stopped(stop_rx.clone()),
                PODRESOURCES_GRACE,
            ))
        });
        let state = AppState {
            state_thread,
            metrics,
            access,
            nri: nri_status,
            nrt_push: pusher.as_ref().map(|p| p.status_handle()),
            cdi,
        };
        systemd::ready(&format!(
            "serving {} pod(s) on {}",
            restored.pods,
            socket.display()
        ));
        let served = server::serve(listener, socket, state, budget.socket, stopped(stop_rx)).await;
        if let Some(task) = podresources_task {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => warn!(error = %e, "the PodResources API stopped with an error"),
                Err(e) => warn!(error = %e, "the PodResources API's task failed"),
            }
        }
        let scraped = match scraping {
            Some(task) => task.await.unwrap_or_else(|e| Err(std::io::Error::other(e))),
            None => Ok(()),
        };
        if let Some(p) = pusher {
            p.shutdown().await;
        }
        served.and(scraped).map_err(|source| DaemonError::Runtime {
            what: "serving failed",
            cause: source,
        })
    })?;
    drop(lock);
    drop(node_lock);
    Ok(())
}
