//! [`Face`]: topomgr's answers to the runtime's NRI events, admitting and
//! releasing through the daemon's state thread.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use topomgr_node::api::OwnerSpec;
use topomgr_node::pod_owner::ContainerRuntime;
use topomgr_nri::api::{
    ConfigureRequest, Container, ContainerState, ContainerUpdate, CreateContainerResponse,
    LinuxResources, PodSandbox, UpdateContainerResponse,
};
use topomgr_nri::{HandlerResult, Plugin, PluginError, RuntimeClient};
use topomgr_runtime::Mapping;
use topomgr_sdk::{Allocation, CpuSet, Machine, NumaMask};
use tracing::{debug, info, warn};

use super::convert;
use super::kubelet::{kubelet_pinned, KubeletCheck};
use super::placements::{Placed, Placements};
use super::status::{Condition, NriStatus};
use crate::state_thread::{Command, CommandError, Reply, StateThread};
use topomgr_engine::admission::AdmitResult;

/// topomgr as the runtime's NRI plugin: every CreateContainer is a
/// container-scope admission through the daemon's state thread (the same
/// engine, ledger, providers and journal as every other admission), owned
/// by the runtime's container; StopContainer, RemoveContainer and
/// RemovePodSandbox release; each Synchronize reconciles. See the module
/// docs of [`super`].
pub struct Face {
    state: StateThread,
    table: Mutex<Placements>,
    runtime: Mutex<Option<RuntimeClient>>,
    wake: tokio::sync::Notify,
    status: Arc<NriStatus>,
    /// Answer an exclusive container's adjustment with an unlimited CFS
    /// quota ([`Face::with_cpu_quota_lift`]).
    lift_cpu_quota: bool,
    /// `[daemon] provider_timeout_ms`, compared at Configure with the
    /// runtime's request budget ([`super::budget`]).
    provider_timeout: Option<std::time::Duration>,
    /// Whether the kubelet's own managers are on ([`super::kubelet`]).
    kubelet: KubeletCheck,
}

/// The NRI container owner of container `id`.
fn owner(id: &str) -> OwnerSpec {
    OwnerSpec::container(ContainerRuntime::Nri, id)
}

/// `namespace/pod/container`.
fn who(pod: &PodSandbox, container: &Container) -> String {
    format!("{}/{}/{}", pod.namespace, pod.name, container.name)
}

/// The allocation of a one-container pod's container.
fn allocation_of(r: &AdmitResult) -> Allocation {
    r.containers
        .first()
        .map(|c| c.allocation.clone())
        .unwrap_or_default()
}

/// An admission's refusal as the runtime reports it (the kubelet shows it
/// as `CreateContainerError`: `failed to get NRI adjustment for container:
/// rpc error: code = Unknown desc = topomgr: <reason>: <message>`).
fn refusal(r: &AdmitResult) -> PluginError {
    PluginError::new(format!(
        "topomgr: {}: {}",
        r.reason.as_deref().unwrap_or("Rejected"),
        r.message.as_deref().unwrap_or("no message")
    ))
}

impl Face {
    /// A face over a new state thread of its own on `machine`, with its
    /// state in `state_dir` and cgroups under `cgroup_root`: what the daemon
    /// runs, for measuring the NRI path in process (`bench/benches/nri.rs`).
    pub fn with_state_thread(
        admitter: topomgr_engine::admission::Admitter,
        machine: &Machine,
        state_dir: &std::path::Path,
        cgroup_root: &std::path::Path,
        status: Arc<NriStatus>,
    ) -> Result<Face, crate::state_thread::StartError> {
        let settings = crate::state_thread::StateThreadSettings {
            state_dir: state_dir.to_path_buf(),
            cgroup_root: cgroup_root.to_path_buf(),
            lift_cpu_quota: true,
            boot_id: topomgr_node::fsutil::boot_id(),
            export: Default::default(),
        };
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let (state, _) = StateThread::start(admitter, machine, settings, metrics)?;
        Ok(Face::new(state, status))
    }

    /// A face admitting through `state`, reporting to `status`. The machine
    /// is the state thread's, as of its last reload.
    pub(crate) fn new(state: StateThread, status: Arc<NriStatus>) -> Face {
        Face {
            state,
            table: Mutex::new(Placements::default()),
            runtime: Mutex::new(None),
            wake: tokio::sync::Notify::new(),
            status,
            lift_cpu_quota: true,
            provider_timeout: None,
            kubelet: KubeletCheck::default(),
        }
    }

    /// Checks the kubelet's CPU and memory manager state files under
    /// `root` ([`super::kubelet`]).
    pub(crate) fn with_kubelet_root(mut self, root: std::path::PathBuf) -> Face {
        self.kubelet = KubeletCheck::with_root(root);
        self
    }

    /// Reads the kubelet's state files again (health notes).
    pub(crate) fn check_kubelet_files(&self) {
        self.kubelet.check_files(&self.status);
    }

    /// The providers' call deadline, checked against the runtime's request
    /// budget at each Configure.
    pub(crate) fn with_provider_timeout(mut self, timeout: std::time::Duration) -> Face {
        self.provider_timeout = Some(timeout);
        self
    }

    /// Configure: who the runtime is, and whether a provider call fits in
    /// the time it gives each answer (a warning and a health note when not).
    pub(crate) fn configured(&self, request: &ConfigureRequest) {
        let (timeout, _) = super::budget::request_timeout(request);
        info!(runtime = %request.runtime_name, version = %request.runtime_version, request_timeout_ms = timeout.as_millis() as u64, "configured by the runtime");
        self.status
            .runtime(&request.runtime_name, &request.runtime_version);
        let note = self
            .provider_timeout
            .and_then(|p| super::budget::provider_note(p, request));
        if let Some(n) = &note {
            warn!("{n}");
        }
        self.status
            .set_condition(Condition::RequestBudget, note.into_iter().collect());
        self.check_kubelet_files();
    }

    /// Whether an exclusive container's adjustment lifts its CFS quota, as
    /// the kubelet's `DisableCPUQuotaWithExclusiveCPUs` (config
    /// `disable_cpu_quota_with_exclusive_cpus`, default true).
    pub(crate) fn with_cpu_quota_lift(mut self, lift: bool) -> Face {
        self.lift_cpu_quota = lift;
        self
    }

    /// The status this face reports to.
    pub fn status(&self) -> &Arc<NriStatus> {
        &self.status
    }

    pub(super) fn table(&self) -> MutexGuard<'_, Placements> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shared pool as of the last commit and the machine's NUMA nodes
    /// as the state thread last read them (at start, at the last reload:
    /// the memory nodes of a container no provider gave any), in one read
    /// of its view so that both are of the same machine.
    fn placing(&self) -> (CpuSet, NumaMask) {
        self.state.read(|v| {
            let nodes = v
                .machine
                .numa_ids()
                .into_iter()
                .fold(NumaMask::EMPTY, |m, n| m.with(n));
            (v.shared_pool.clone(), nodes)
        })
    }

    /// The machine's NUMA nodes (see [`Face::placing`]).
    #[cfg(test)]
    pub(crate) fn nodes(&self) -> NumaMask {
        self.placing().1
    }

    /// The runtime, while connected.
    pub(crate) fn runtime_client(&self) -> Option<RuntimeClient> {
        self.runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(RuntimeClient::is_connected)
    }

    /// Registered with the runtime.
    pub(crate) fn connected(&self, runtime: RuntimeClient) {
        *self.runtime.lock().unwrap_or_else(|p| p.into_inner()) = Some(runtime);
        self.status.connected();
    }

    /// The connection is gone.
    pub(crate) fn disconnected(&self, error: String) {
        *self.runtime.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.status.disconnected(error);
    }

    /// Ask the follower to send what the runtime was not told yet.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Wait until [`Face::wake`] is called.
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    fn count(&self, t: &Placements) {
        self.status.containers(t.len());
    }

    /// One container's admission: its result, or why the state thread
    /// could not make it (nothing was admitted then).
    async fn admit(&self, cmd: Command) -> Result<AdmitResult, String> {
        match self.state.submit(cmd).await {
            Ok(Reply::Admitted(mut results)) if results.len() == 1 => Ok(results.remove(0)),
            Ok(other) => Err(format!(
                "the state thread answered an admission with {other:?}"
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Release container `id`'s pod (nothing when none is admitted).
    async fn release(&self, id: &str, name: &str) {
        match self.state.submit(Command::Release(id.to_owned())).await {
            Ok(_) => info!(container = %name, id, "container released"),
            Err(CommandError::UnknownPod(_)) => {}
            Err(e) => {
                warn!(container = %name, id, error = %e, "cannot release the container; the next Synchronize does")
            }
        }
    }

    /// CreateContainer: admit, answer the cpuset and environment, and shrink
    /// every shared container that had a CPU that just became exclusive.
    pub async fn create(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let name = who(&pod, &container);
        let request = match convert::map(&pod, &container) {
            Ok(Mapping::Admit(r)) => r,
            Ok(m @ Mapping::Leave(_)) => {
                if let Some(cpus) = kubelet_pinned(&pod, &m) {
                    self.kubelet
                        .pinned_at_create(&self.status, &pod, &container, cpus);
                }
                debug!(container = %name, mapping = ?m, "left alone");
                return Ok(CreateContainerResponse::default());
            }
            Err(e) => {
                return Err(PluginError::new(format!(
                    "topomgr cannot read container {name}: {e}"
                )))
            }
        };
        if let Some(e) = super::budget::too_late(&name, "before its admission") {
            warn!(container = %name, "{e}");
            return Err(e);
        }
        let assigned = convert::assigned(&request.devices);
        let id = container.id.clone();
        let result = self
            .admit(Command::AdmitContainer {
                pod: request.pod.view,
                owner: owner(&id),
                assigned,
            })
            .await
            .map_err(|e| {
                PluginError::new(format!("topomgr could not admit container {name}: {e}"))
            })?;
        if let Some(e) = super::budget::too_late(&name, "after its admission") {
            if result.admitted {
                self.release(&id, &name).await;
            }
            warn!(container = %name, "{e}");
            return Err(e);
        }
        if !result.admitted {
            info!(container = %name, reason = ?result.reason, "container refused");
            return Err(refusal(&result));
        }
        let (pool, nodes) = self.placing();
        let placed = Placed {
            sandbox: container.pod_sandbox_id.clone(),
            name: name.clone(),
            allocation: Some(allocation_of(&result)),
            told: None,
        };
        let unlimited_quota = self.lift_cpu_quota && placed.is_exclusive();
        let env = placed
            .allocation
            .as_ref()
            .map(|a| a.env.clone())
            .unwrap_or_default();
        let placement = {
            let mut t = self.table();
            // Shared containers need a shared pool: this one, or those followed.
            let pool_needed = !placed.is_exclusive()
                || t.ids()
                    .iter()
                    .any(|i| t.get(i).is_some_and(|p| !p.is_exclusive()));
            match placed.desired(&pool, nodes) {
                Some(set) if !(pool.is_empty() && pool_needed) => {
                    t.insert(
                        &id,
                        Placed {
                            told: Some(set.clone()),
                            ..placed
                        },
                    );
                    let update = t.updates(&pool, nodes, Some(&id), false);
                    self.count(&t);
                    Some((set, update))
                }
                _ => None,
            }
        };
        let Some((set, update)) = placement else {
            self.release(&id, &name).await;
            return Err(PluginError::new(format!(
                "topomgr: UnexpectedAdmissionError: container {name} would leave no CPU in the shared pool, which the containers of the shared pool need; give the CPU provider reserved CPUs (reserved_cpus)"
            )));
        };
        info!(container = %name, id, cpus = %set.cpus, mems = %set.mems, updated = update.len(), "container placed");
        Ok(CreateContainerResponse {
            adjust: Some(convert::adjustment(&set, &env, unlimited_quota)),
            update,
            evict: Vec::new(),
        })
    }

    /// StopContainer: release, and give the shared containers the CPUs it
    /// had (in the answer, which the runtime applies in order).
    pub async fn stop(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let removed = self.table().remove(&container.id);
        if let Some(p) = removed {
            if p.allocation.is_some() {
                self.release(&container.id, &p.name).await;
            } else {
                debug!(container = %who(&pod, &container), "followed container stopped");
            }
        }
        let (pool, nodes) = self.placing();
        let mut t = self.table();
        let updates = t.updates(&pool, nodes, None, true);
        self.count(&t);
        Ok(updates)
    }

    /// UpdateContainer (the kubelet's resource update): the container keeps
    /// its cpuset whatever the update asks (the answer's update of the
    /// container itself is merged into the request).
    pub async fn update(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<UpdateContainerResponse> {
        let (pool, nodes) = self.placing();
        let mut t = self.table();
        let Some(p) = t.get_mut(&container.id) else {
            return Ok(UpdateContainerResponse::default());
        };
        let mut update = Vec::new();
        if let Some(set) = p.desired(&pool, nodes) {
            update.push(convert::update(&container.id, &set, false));
            p.told = Some(set);
        }
        update.extend(t.updates(&pool, nodes, Some(&container.id), false));
        Ok(UpdateContainerResponse {
            update,
            evict: Vec::new(),
        })
    }

    /// RemoveContainer: release what is still held (a container removed
    /// without a stop); the follower gives the CPUs back.
    pub async fn remove(&self, container: Container) {
        self.kubelet.forget(&self.status, &container.id);
        let removed = self.table().remove(&container.id);
        if let Some(p) = removed {
            if p.allocation.is_some() {
                self.release(&container.id, &p.name).await;
            }
            self.count(&self.table());
            self.wake();
        }
    }

    /// RemovePodSandbox: release every container of the pod still held.
    pub async fn remove_pod(&self, pod: PodSandbox) {
        let ids = self.table().of_sandbox(&pod.id);
        for id in &ids {
            let removed = self.table().remove(id);
            if let Some(p) = removed.filter(|p| p.allocation.is_some()) {
                self.release(id, &p.name).await;
            }
        }
        if !ids.is_empty() {
            self.count(&self.table());
            self.wake();
        }
    }

    /// Synchronize: the runtime's pods and containers (at every
    /// registration). Pods of containers the runtime no longer has are
    /// released; containers it has that topomgr does not know (created
    /// while it was away) are admitted now, or followed in the shared pool
    /// and reported when they cannot be; every container is told its cpuset.
    pub async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let pods: BTreeMap<&str, &PodSandbox> = pods.iter().map(|p| (p.id.as_str(), p)).collect();
        let live: Vec<&Container> = containers
            .iter()
            .filter(|c| c.state != ContainerState::ContainerStopped as i32)
            .collect();
        let existing: BTreeSet<String> = live.iter().map(|c| c.id.clone()).collect();
        self.check_kubelet_files();
        let followed_before: BTreeSet<String> = self.table().ids().into_iter().collect();
        let mut kubelet_pinned_found = BTreeMap::new();
        let kept = match self
            .state
            .submit(Command::ReconcileContainers {
                runtime: ContainerRuntime::Nri,
                existing,
            })
            .await
        {
            Ok(Reply::ContainersReconciled { released, kept }) => {
                if !released.is_empty() {
                    info!(containers = %released.join(","), "released the pods of containers the runtime no longer has");
                }
                kept
            }
            Ok(other) => {
                return Err(PluginError::new(format!(
                    "topomgr: the state thread answered a reconcile with {other:?}"
                )))
            }
            Err(e) => {
                return Err(PluginError::new(format!(
                    "topomgr cannot reconcile with the runtime's containers: {e}"
                )))
            }
        };
        let kept: BTreeMap<String, AdmitResult> = kept.into_iter().collect();
        let mut placed: Vec<(String, Placed)> = Vec::new();
        let mut admissions = Vec::new();
        let mut notes = Vec::new();
        for c in &live {
            let Some(pod) = pods.get(c.pod_sandbox_id.as_str()) else {
                warn!(container = %c.id, sandbox = %c.pod_sandbox_id, "the runtime lists a container without its pod; left alone");
                continue;
            };
            let name = who(pod, c);
            if let Some(r) = kept.get(&c.id) {
                placed.push((
                    c.id.clone(),
                    Placed {
                        sandbox: c.pod_sandbox_id.clone(),
                        name,
                        allocation: Some(allocation_of(r)),
                        told: None,
                    },
                ));
                continue;
            }
            match convert::map(pod, c) {
                Ok(Mapping::Admit(r)) => {
                    let cmd = Command::AdmitContainer {
                        pod: r.pod.view,
                        owner: owner(&c.id),
                        assigned: convert::assigned(&r.devices),
                    };
                    admissions.push((c, name, cmd));
                }
                Ok(m @ Mapping::Leave(_)) => {
                    // Pinned by the kubelet, unless it is topomgr's own
                    // cpuset: followed before, or the shared pool.
                    if let Some(cpus) = kubelet_pinned(pod, &m) {
                        let pool = self.placing().0;
                        let ours = followed_before.contains(&c.id)
                            || CpuSet::parse(cpus).is_ok_and(|s| s == pool);
                        if !ours {
                            kubelet_pinned_found.insert(c.id.clone(), format!("{name} ({cpus})"));
                        }
                    }
                    debug!(container = %name, mapping = ?m, "left alone");
                }
                Err(e) => {
                    warn!(container = %name, error = %e, "cannot read a container the runtime has");
                    notes.push(format!(
                        "nri: container {name} ({}) cannot be read: {e}; it is left alone",
                        c.id
                    ));
                }
            }
        }
        // All at once: the state thread commits them as one batch.
        let results = futures_util::future::join_all(
            admissions.iter().map(|(_, _, cmd)| self.admit(cmd.clone())),
        )
        .await;
        for ((c, name, _), result) in admissions.into_iter().zip(results) {
            let allocation = match result {
                Ok(r) if r.admitted => {
                    info!(container = %name, id = %c.id, "container created while topomgr was away admitted");
                    Some(allocation_of(&r))
                }
                Ok(r) => {
                    let why = refusal(&r);
                    warn!(container = %name, id = %c.id, error = %why, "a container created while topomgr was away cannot be admitted; it runs in the shared pool");
                    notes.push(format!("nri: container {name} ({}) was created while topomgr was not connected and cannot be admitted ({why}); it runs in the shared pool", c.id));
                    None
                }
                Err(e) => {
                    warn!(container = %name, id = %c.id, error = %e, "cannot admit a container created while topomgr was away; it runs in the shared pool");
                    notes.push(format!("nri: container {name} ({}) was created while topomgr was not connected and could not be admitted ({e}); it runs in the shared pool", c.id));
                    None
                }
            };
            placed.push((
                c.id.clone(),
                Placed {
                    sandbox: c.pod_sandbox_id.clone(),
                    name,
                    allocation,
                    told: None,
                },
            ));
        }
        let (pool, nodes) = self.placing();
        let mut t = self.table();
        t.clear();
        for (id, p) in placed {
            t.insert(&id, p);
        }
        let updates = t.updates(&pool, nodes, None, true);
        self.count(&t);
        drop(t);
        self.status.set_notes(notes);
        self.kubelet
            .pinned_at_sync(&self.status, kubelet_pinned_found);
        info!(
            containers = containers.len(),
            updated = updates.len(),
            "synchronized with the runtime"
        );
        Ok(updates)
    }

    /// The follower's round: containers whose pods were released by other
    /// means (the HTTP API, a reclaim) keep following the shared pool
    /// without an allocation; then every cpuset the runtime was not told is
    /// sent unsolicited (see [`super::placements`] for the order).
    pub(crate) async fn push_updates(&self) {
        let Some(runtime) = self.runtime_client() else {
            return;
        };
        loop {
            let updates = {
                let admitted: BTreeSet<String> =
                    self.state.read(|v| v.pods.keys().cloned().collect());
                let (pool, nodes) = self.placing();
                let mut t = self.table();
                if t.in_flight {
                    return;
                }
                for id in t.ids() {
                    if let Some(p) = t.get_mut(&id) {
                        if p.allocation.is_some() && !admitted.contains(&id) {
                            info!(container = %p.name, "its pod was released while it runs; it follows the shared pool now");
                            p.allocation = None;
                        }
                    }
                }
                let updates = t.updates(&pool, nodes, None, true);
                if updates.is_empty() {
                    return;
                }
                t.in_flight = true;
                t.changed_in_flight = false;
                updates
            };
            let ids: Vec<String> = updates.iter().map(|u| u.container_id.clone()).collect();
            let result = runtime.update_containers(updates, Vec::new()).await;
            let again = {
                let mut t = self.table();
                t.in_flight = false;
                match result {
                    Ok(failed) => {
                        for f in failed {
                            warn!(container = %f.container_id, "the runtime did not apply a cpuset update");
                            t.not_told(&f.container_id);
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot update the shared containers' cpusets; retrying after the next change");
                        for id in &ids {
                            t.not_told(id);
                        }
                        return;
                    }
                }
                t.changed_in_flight
            };
            if !again {
                return;
            }
        }
    }
}

impl Plugin for Face {
    async fn configure(
        &self,
        request: ConfigureRequest,
        runtime: RuntimeClient,
    ) -> HandlerResult<()> {
        self.configured(&request);
        *self.runtime.lock().unwrap_or_else(|p| p.into_inner()) = Some(runtime);
        Ok(())
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        Face::synchronize(self, pods, containers).await
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.create(pod, container).await
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        self.update(pod, container).await
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        self.stop(pod, container).await
    }

    async fn remove_container(&self, _pod: PodSandbox, container: Container) -> HandlerResult<()> {
        self.remove(container).await;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.remove_pod(pod).await;
        Ok(())
    }
}
