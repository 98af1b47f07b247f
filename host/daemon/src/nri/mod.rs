//! `topomgr serve` as the container runtime's NRI plugin (`[nri] enabled`):
//! containerd 1.7 (NRI enabled) and 2.x, CRI-O 1.26+ call topomgr before
//! each container is created, and apply the cpuset, memory nodes and
//! environment it answers. The wire protocol is `topomgr_nri`'s; this
//! module decides.
//!
//! # Events
//!
//! topomgr subscribes to CreateContainer, PostCreateContainer,
//! PostStartContainer, UpdateContainer, StopContainer, RemoveContainer,
//! StopPodSandbox and RemovePodSandbox ([`EVENTS`]); the runtime sends Configure and
//! Synchronize at every registration. Every event is one request to the
//! state thread, answered with the placement computed there from the
//! committed state; the containers followed, and what the runtime was told
//! of each, are the node's book ([`topomgr_node::state::followed`]).
//!
//! - **CreateContainer** ([`Face::create`]): what the runtime tells (the
//!   pod sandbox: uid, name, namespace, annotations, the kubelet's cgroup
//!   parent; the container: name, CPU shares/quota/period, memory and
//!   hugepage limits, environment) becomes a one-container pod
//!   (`topomgr_runtime`, with the kubelet's own conversions; its uid is the
//!   runtime's container id) and is admitted in container scope through the
//!   state thread, owned by the container (`nri` container owner), aligned
//!   with the devices the kubelet's device plugins already gave it (its
//!   `NVIDIA_VISIBLE_DEVICES`, `PCIDEVICE_*`: the providers that know them
//!   contribute exactly their hints, through the SDK's named call
//!   `assigned_device_hints`). A Guaranteed container with whole CPUs gets
//!   exclusive CPUs (the CPU provider's static policy), every other the
//!   shared pool. The answer sets the container's cpuset CPUs and memory
//!   nodes and the providers' environment, and updates every shared-pool
//!   container whose cpuset just lost a CPU to it. A refusal fails the
//!   creation with topomgr's reason and message; nothing is held.
//!   Sandboxes, containers whose spec pins CPUs and pods or containers
//!   annotated `topomgr.io/opt-out: "true"` are left alone.
//! - **PostCreateContainer**, **PostStartContainer** ([`Face::created`]):
//!   the cpuset the container was created with is compared with the one
//!   it must have now; an update sent while it was being created can be
//!   lost (containerd drops it), so the difference is sent at once.
//!   Besides, every 10 s the follower reads the followed containers'
//!   cpusets back from their cgroups (the runtime's cgroups path under the
//!   cgroup root, v1 or v2) and sends the right one to any found otherwise
//!   (a health note each, `topomgr_nri_cpuset_repairs_total`).
//! - **StopContainer** releases the container and gives the CPUs back to the
//!   shared containers in its answer; **RemoveContainer** and
//!   **RemovePodSandbox** release whatever is still held (the shared
//!   containers get the CPUs back from the follower, through the
//!   runtime's CRI socket, `cri.rs`); **StopPodSandbox** does the same,
//!   and releases a pod admitted whole under pod scope.
//! - **UpdateContainer**: a resize (the kubelet's, changing the
//!   container's CPU or memory) is done in place through the providers'
//!   `resize` or refused with its reason ([`Face::update`]); an update that
//!   only sets a cpuset (topomgr's own, through CRI) is answered with the
//!   container's cpuset. Either way the answer carries the shared
//!   containers whose cpuset changed.
//! - **Synchronize** ([`Face::synchronize`]) lists every pod and container
//!   the runtime has: pods of containers it no longer has (or that stopped)
//!   are released; containers it has that topomgr does not know (created
//!   while topomgr was not connected) are admitted now, or, when they
//!   cannot be, followed in the shared pool and reported in `/v1/health`;
//!   every container is told its cpuset. containerd 1.7 sends no pod events
//!   for pods created before its own restart, so this is where their
//!   releases happen.
//!
//! # The runtime's request budget and the kubelet's own managers
//!
//! Every request is answered by its deadline (`topomgr_nri`'s answer
//! deadline; `budget` is the face's side: a CreateContainer past it
//! admits nothing, one admitted past it is released again, a provider
//! deadline beyond the budget is a health note). The kubelet's CPU and
//! memory managers must be off: their state files and kubelet containers
//! arriving with a cpuset and without topomgr's mark are health notes
//! (`kubelet`; the containers are kept in the node's book as pinned).
//!
//! # Staying connected
//!
//! [`serve`] registers and re-registers with backoff (100 ms doubling to
//! 5 s) whenever the runtime restarts; the HTTP API keeps working. While
//! topomgr is not connected the runtime creates containers without it
//! (unadjusted: the kubelet's own cpuset, usually every CPU); they are
//! admitted at the next Synchronize. `/v1/health` carries `nri` and is
//! `degraded` meanwhile; `topomgr_nri_connected` says the same.
//!
//! # Scope
//!
//! NRI tells one container at a time, never the whole pod. Under `scope =
//! "pod"` the face reads the whole pod from the API server at its first
//! container and admits it there, as the kubelet's pod scope does
//! (`pod_scope.rs`); without `[kubernetes] enabled` there is nowhere to
//! read it, and `serve` refuses to start ([`check_scope`]).

mod budget;
mod convert;
mod cri;
mod face;
mod kubelet;
mod pod_scope;
mod status;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use topomgr_engine::policy::Scope;
use topomgr_nri::{serve_with_reconnect, Backoff, ConnectionStatus, Event, EventMask};
use tracing::{error, info};

pub(crate) use convert::{KubeletClaims, SliceReader, KUBELET_CLAIMS_TIMEOUT, SLICES_TIMEOUT};
pub use face::Face;
pub(crate) use pod_scope::PodSpecs;
pub use status::NriStatus;

/// How often the follower looks for cpusets the runtime was not told
/// (a release through the HTTP API or a reclaim), besides being woken.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

/// How many follower rounds between two reads of the followed
/// containers' cpusets from their cgroups (every 10 s).
const CHECK_EVERY: u32 = 10;

/// The events topomgr subscribes to.
pub const EVENTS: [Event; 8] = [
    Event::CreateContainer,
    Event::PostCreateContainer,
    Event::PostStartContainer,
    Event::UpdateContainer,
    Event::StopContainer,
    Event::RemoveContainer,
    Event::StopPodSandbox,
    Event::RemovePodSandbox,
];

/// Where and as what the plugin registers (`[nri]` of the config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NriSettings {
    /// The runtime's NRI socket.
    pub socket: PathBuf,
    /// The plugin's name.
    pub plugin_name: String,
    /// Its index (two digits).
    pub plugin_index: String,
    /// The kubelet's root directory, where its CPU and memory managers'
    /// state files are checked.
    pub kubelet_root_dir: PathBuf,
    /// The runtime's CRI socket (`None`: the registered runtime's default).
    pub cri_socket: Option<PathBuf>,
    /// The kubelet's PodResources socket, asked for each container's DRA
    /// claims (config `[cdi] kubelet_pod_resources_socket`; `None`: not
    /// asked).
    pub kubelet_pod_resources_socket: Option<PathBuf>,
}

/// Why the daemon refuses to start with `[nri] enabled`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[nri] enabled with scope = \"pod\" needs [kubernetes] enabled: the runtime tells topomgr one container at a time through NRI, so pod scope reads the whole pod from the API server; set enabled = true in [kubernetes] (with its kubeconfig, or in-cluster), or set scope = \"container\"")]
pub struct PodScopeUnderNri;

/// Refuses pod scope under NRI without access to the API server
/// (`api`: `[kubernetes] enabled`; see the module docs).
pub fn check_scope(scope: Scope, api: bool) -> Result<(), PodScopeUnderNri> {
    match scope {
        Scope::Pod if !api => Err(PodScopeUnderNri),
        _ => Ok(()),
    }
}

/// Sends the runtime what it was not told: woken by the handlers that
/// released outside an answer, and every [`FOLLOW_INTERVAL`].
async fn follow(face: Arc<Face>) {
    let mut rounds = 0u32;
    let mut files_checked = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = face.woken() => {}
            () = tokio::time::sleep(FOLLOW_INTERVAL) => rounds += 1,
        }
        if rounds >= CHECK_EVERY && face.runtime_client().is_some() {
            rounds = 0;
            face.check_cpusets().await;
        }
        face.push_updates().await;
        if files_checked.elapsed() >= kubelet::FILE_CHECK_INTERVAL {
            files_checked = tokio::time::Instant::now();
            face.check_kubelet_files();
        }
    }
}

/// Keeps `face` registered with the runtime at `settings.socket` until
/// `stop` completes.
pub async fn serve(
    face: Arc<Face>,
    settings: NriSettings,
    stop: impl std::future::Future<Output = ()>,
) {
    let events: EventMask = EVENTS.into_iter().collect();
    let follower = tokio::spawn(follow(Arc::clone(&face)));
    info!(socket = %settings.socket.display(), name = %settings.plugin_name, index = %settings.plugin_index, "connecting to the runtime's NRI");
    let on_status = {
        let face = Arc::clone(&face);
        move |status: ConnectionStatus| match status {
            ConnectionStatus::Connected { runtime } => face.connected(runtime),
            ConnectionStatus::Disconnected { error, .. } => face.disconnected(error.to_string()),
            ConnectionStatus::AwaitingSynchronize { waited } => {
                face.status().awaiting_synchronize(Some(waited))
            }
            ConnectionStatus::Synchronized => face.status().awaiting_synchronize(None),
        }
    };
    let connection = serve_with_reconnect(
        &settings.socket,
        &settings.plugin_name,
        &settings.plugin_index,
        events,
        Arc::clone(&face),
        Backoff::default(),
        on_status,
    );
    tokio::select! {
        e = connection => {
            error!(error = %e, "the NRI plugin stopped");
            face.disconnected(e.to_string());
        }
        () = stop => {}
    }
    follower.abort();
}

#[cfg(test)]
mod tests;
