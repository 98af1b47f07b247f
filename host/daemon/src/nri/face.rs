//! [`Face`]: topomgr's answers to the runtime's NRI events. Each event is
//! one request to the daemon's state thread ([`ContainerCommand`]), whose
//! answer carries the placement computed there from the committed state
//! (the container's cpuset, its environment, the followed containers whose
//! cpuset changes); the face turns it into NRI's messages. The containers
//! followed and what each was told are the node's
//! ([`topomgr_node::state::followed`]), not the face's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use topomgr_node::api::OwnerSpec;
use topomgr_node::state::followed::{CpusetUpdate, FollowedContainer};
use topomgr_node::state::pod_owner::ContainerRuntime;
use topomgr_nri::api::{
    ConfigureRequest, Container, ContainerState, ContainerUpdate, CreateContainerResponse,
    LinuxResources, PodSandbox, UpdateContainerResponse,
};
use topomgr_nri::{HandlerResult, Plugin, PluginError, RuntimeClient};
use topomgr_runtime::{Mapping, MappingError};
use tracing::{debug, info, warn};

use super::budget;
use super::convert;
use super::cri::{CriRoute, NoCri, Route};
use super::kubelet::{self, KubeletCheck};
use super::pod_scope::{PodSpecs, Whole};
use super::status::{Condition, ContainerNote, NriStatus};
use crate::state_thread::{
    Command, ContainerAnswer, ContainerCommand, Given, Late, ListedContainer, NewContainer, Reply,
    StateThread,
};
use topomgr_engine::admission::AdmitResult;
use topomgr_sdk::AssignedDevicesRequest;

/// topomgr as the runtime's NRI plugin: every CreateContainer is a
/// container-scope admission through the daemon's state thread (the same
/// engine, ledger, providers and journal as every other admission), owned
/// by the runtime's container; StopContainer, RemoveContainer and
/// RemovePodSandbox release; each Synchronize reconciles. See the module
/// docs of [`super`].
pub struct Face {
    state: StateThread,
    runtime: Mutex<Option<RuntimeClient>>,
    wake: tokio::sync::Notify,
    status: Arc<NriStatus>,
    /// Answer an exclusive container's adjustment with an unlimited CFS
    /// quota ([`Face::with_cpu_quota_lift`]).
    lift_cpu_quota: bool,
    /// `[daemon] provider_timeout_ms`, compared at Configure with the
    /// runtime's request budget ([`super::budget`]).
    provider_timeout: Option<std::time::Duration>,
    /// Where the kubelet's manager state files are ([`super::kubelet`]).
    kubelet: KubeletCheck,
    /// How the follower's cpusets reach the runtime ([`super::cri`]).
    cri: CriRoute,
    /// Where containers' CDI devices are found ([`Face::with_cdi`]).
    cdi: convert::CdiSource,
    /// Where refusals go as Events on the pod (`[kubernetes] events`).
    events: Option<topomgr_kube::events::EventRecorder>,
    /// Pod scope: where whole pods are read ([`super::pod_scope`]).
    pod_scope: Option<PodSpecs>,
}

/// The NRI container owner of container `id`.
fn owner(id: &str) -> OwnerSpec {
    OwnerSpec::container(ContainerRuntime::Nri, id)
}

/// The owner of a pod admitted whole under pod scope: its sandbox.
fn sandbox_owner(pod: &PodSandbox) -> OwnerSpec {
    OwnerSpec::container(ContainerRuntime::NriSandbox, &pod.id)
}

/// `namespace/pod/container`.
fn who(pod: &PodSandbox, container: &Container) -> String {
    format!("{}/{}/{}", pod.namespace, pod.name, container.name)
}

/// What the node's book keeps of `container` of `pod`.
fn followed(pod: &PodSandbox, container: &Container) -> FollowedContainer {
    FollowedContainer {
        sandbox: container.pod_sandbox_id.clone(),
        name: container.name.clone(),
        who: who(pod, container),
        cgroup: container
            .linux
            .as_ref()
            .map(|l| l.cgroups_path.clone())
            .filter(|p| !p.is_empty()),
        told: None,
        pod_uid: pod.uid.clone(),
        started: container.state == ContainerState::ContainerRunning as i32
            || container.state == ContainerState::ContainerPaused as i32,
        held_by: None,
    }
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

/// The Event of a refusal of a container of `pod`: the reason and the
/// message as `topomgr admit` gives them.
fn event_of(pod: &PodSandbox, r: &AdmitResult) -> topomgr_kube::events::Refusal {
    topomgr_kube::events::Refusal {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        reason: r.reason.clone().unwrap_or_else(|| "Rejected".to_owned()),
        message: r.message.clone().unwrap_or_else(|| "no message".to_owned()),
    }
}

/// What a container's creation admits ([`Face::pod_to_admit`]).
struct ToAdmit {
    /// The pod: the container's own, or its whole pod (pod scope).
    pod: topomgr_sdk::PodView,
    /// Its owner: the container, or its sandbox.
    owner: OwnerSpec,
    /// The pod admitted whole that holds the container's allocation.
    held_by: Option<String>,
    /// The devices its containers were given.
    given: Given,
}

/// What pod scope does with the containers of one sandbox at a
/// Synchronize.
#[derive(Debug, Clone)]
enum SandboxScope {
    /// Each is admitted on its own (no pod scope, or a pod the API server
    /// does not have).
    Own,
    /// Its pod, admitted whole: to admit now (`Some`), or held already.
    Whole(Option<Box<topomgr_sdk::PodView>>),
    /// Its pod cannot be read: its containers run in the shared pool.
    Failed(String),
}

/// The [`SandboxScope`] of each sandbox seen at one Synchronize.
#[derive(Debug, Default)]
struct SandboxScopes {
    of: BTreeMap<String, SandboxScope>,
    /// Why a read failed, once one did.
    api_down: Option<String>,
}

/// The updates of an answer as NRI's messages.
fn nri_updates(updates: &[CpusetUpdate], ignore_failure: bool) -> Vec<ContainerUpdate> {
    updates
        .iter()
        .map(|(id, set)| convert::update(id, set, ignore_failure))
        .collect()
}

impl Face {
    /// A face over a new state thread of its own on `machine`, with its
    /// state in `state_dir` and cgroups under `cgroup_root`: what the daemon
    /// runs, for measuring the NRI path in process (`bench/benches/nri.rs`).
    pub fn with_state_thread(
        admitter: topomgr_engine::admission::Admitter,
        machine: &topomgr_sdk::Machine,
        state_dir: &std::path::Path,
        cgroup_root: &std::path::Path,
        status: Arc<NriStatus>,
    ) -> Result<Face, crate::state_thread::StartError> {
        let settings = crate::state_thread::StateThreadSettings {
            state_dir: state_dir.to_path_buf(),
            cgroup_root: cgroup_root.to_path_buf(),
            lift_cpu_quota: true,
            limits: Default::default(),
            members: None,
            boot_id: topomgr_node::fsutil::boot_id(),
            export: Default::default(),
            nrt_push: None,
        };
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let (state, _) = StateThread::start(admitter, machine, settings, metrics)?;
        Ok(Face::new(state, status))
    }

    /// A face admitting through `state`, reporting to `status`.
    pub(crate) fn new(state: StateThread, status: Arc<NriStatus>) -> Face {
        Face {
            state,
            runtime: Mutex::new(None),
            wake: tokio::sync::Notify::new(),
            status,
            lift_cpu_quota: true,
            provider_timeout: None,
            kubelet: KubeletCheck::default(),
            cri: CriRoute::new(Route::Nri),
            cdi: convert::CdiSource::default(),
            events: None,
            pod_scope: None,
        }
    }

    /// Admits each pod whole at its first container, read from the API
    /// server through `specs` (`scope = "pod"`, [`super::pod_scope`]).
    pub(crate) fn with_pod_scope(mut self, specs: PodSpecs) -> Face {
        self.pod_scope = Some(specs);
        self
    }

    /// At a Synchronize, what pod scope does with container `c` of `pod`
    /// (each sandbox's pod read once; once a read failed, the API server
    /// is not asked again, so that Synchronize stays inside the runtime's
    /// budget).
    async fn sandbox_scope(
        &self,
        scopes: &mut SandboxScopes,
        pod: &PodSandbox,
        c: &Container,
    ) -> SandboxScope {
        let Some(specs) = &self.pod_scope else {
            return SandboxScope::Own;
        };
        let held = |uid: &str| self.state.read(|v| v.pods.contains_key(uid));
        if held(&c.id) {
            return SandboxScope::Own;
        }
        if let Some(s) = scopes.of.get(&pod.id) {
            return s.clone();
        }
        let s = match &scopes.api_down {
            Some(e) => SandboxScope::Failed(e.clone()),
            None => match specs.whole(pod, held).await {
                Ok(Whole::Held(_)) => SandboxScope::Whole(None),
                Ok(Whole::Read(v)) => SandboxScope::Whole(Some(v)),
                Ok(Whole::NotInApi) => SandboxScope::Own,
                Err(e) => {
                    scopes.api_down = Some(e.to_string());
                    SandboxScope::Failed(e.to_string())
                }
            },
        };
        scopes.of.insert(pod.id.clone(), s.clone());
        s
    }

    /// What is admitted for a container of `pod` whose own one-container
    /// pod is `own`, given `devices`: under pod scope the whole pod, its
    /// other containers' devices as the kubelet lists them
    /// ([`convert::CdiSource::pod_devices`]); without pod scope, or for a
    /// pod the API server does not have, `own` as it is.
    async fn pod_to_admit(
        &self,
        pod: &PodSandbox,
        container: &Container,
        own: topomgr_sdk::PodView,
        devices: AssignedDevicesRequest,
    ) -> Result<ToAdmit, super::pod_scope::Unreadable> {
        let alone = |own| ToAdmit {
            pod: own,
            owner: owner(&container.id),
            held_by: None,
            given: Given::Every(devices.clone()),
        };
        let Some(specs) = &self.pod_scope else {
            return Ok(alone(own));
        };
        let held = |uid: &str| self.state.read(|v| v.pods.contains_key(uid));
        if held(&container.id) {
            // Admitted on its own before (a pod the API server lacked).
            return Ok(alone(own));
        }
        Ok(match specs.whole(pod, held).await? {
            Whole::Held(uid) => ToAdmit {
                pod: own,
                owner: sandbox_owner(pod),
                held_by: Some(uid),
                given: Given::Every(devices),
            },
            Whole::Read(whole) => {
                let name = who(pod, container);
                let mut given: BTreeMap<String, AssignedDevicesRequest> = self
                    .cdi
                    .pod_devices(&name, pod, &container.name)
                    .await
                    .into_iter()
                    .map(|(c, d)| (c, convert::assigned(&d)))
                    .collect();
                given.insert(container.name.clone(), devices);
                ToAdmit {
                    pod: *whole,
                    owner: sandbox_owner(pod),
                    held_by: Some(pod.id.clone()),
                    given: Given::ByName(given),
                }
            }
            Whole::NotInApi => {
                info!(container = %who(pod, container), "pod scope: the API server has no such pod; the container is admitted on its own");
                alone(own)
            }
        })
    }

    /// Looks for each container's CDI devices with `resolver` (the
    /// daemon's, config `[cdi] spec_dirs`, `sysfs_root`), and, with
    /// `kubelet`, in the DRA claims the kubelet's PodResources socket
    /// gives it (config `[cdi] kubelet_pod_resources_socket`).
    pub(crate) fn with_cdi(
        mut self,
        resolver: crate::cdi::Resolver,
        kubelet: Option<convert::KubeletClaims>,
    ) -> Face {
        self.cdi = convert::CdiSource { resolver, kubelet };
        self
    }

    /// What topomgr does with `container` of `pod`: [`convert::map`], and
    /// for a container to admit, its CDI devices too (the kubelet's DRA
    /// claims asked for with `ask_kubelet`).
    async fn map(
        &self,
        pod: &PodSandbox,
        container: &Container,
        ask_kubelet: bool,
    ) -> Result<Mapping, MappingError> {
        let mut mapping = convert::map(pod, container)?;
        if let Mapping::Admit(r) = &mut mapping {
            r.devices.extend(
                self.cdi
                    .devices(&who(pod, container), pod, container, ask_kubelet)
                    .await,
            );
        }
        Ok(mapping)
    }

    /// Records each refusal of a container as an Event on its pod.
    pub(crate) fn with_events(mut self, events: topomgr_kube::events::EventRecorder) -> Face {
        self.events = Some(events);
        self
    }

    /// Sends the follower's cpusets through the runtime's CRI socket
    /// (`socket`, or the runtime's default one) instead of NRI
    /// `UpdateContainers` ([`super::cri`]).
    pub(crate) fn with_cri_socket(mut self, socket: Option<std::path::PathBuf>) -> Face {
        self.cri = CriRoute::new(Route::Cri(socket));
        self
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
        let (timeout, _) = budget::request_timeout(request);
        info!(runtime = %request.runtime_name, version = %request.runtime_version, request_timeout_ms = timeout.as_millis() as u64, "configured by the runtime");
        self.status
            .runtime(&request.runtime_name, &request.runtime_version);
        self.cri.runtime(&request.runtime_name);
        let note = self
            .provider_timeout
            .and_then(|p| budget::provider_note(p, request));
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

    /// The decision trace of the container of id `id` (its one-container
    /// pod's uid) with its resizes, as `GET /v1/pods/{uid}/explain`
    /// answers it (`None`: the endpoint's 404).
    pub fn explain(&self, id: &str) -> Option<topomgr_node::api::Explain> {
        self.state.read(|v| v.explains.get(id))
    }

    /// The machine's NUMA nodes as the state thread last read them.
    #[cfg(test)]
    pub(crate) fn nodes(&self) -> topomgr_sdk::NumaMask {
        self.state.read(|v| {
            v.machine
                .numa_ids()
                .into_iter()
                .fold(topomgr_sdk::NumaMask::EMPTY, |m, n| m.with(n))
        })
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

    /// One request to the state thread; its answer (the containers followed
    /// are counted in the status), or why there is none.
    pub(crate) async fn ask(&self, cmd: ContainerCommand) -> Result<ContainerAnswer, String> {
        match self.state.submit(Command::Container(cmd)).await {
            Ok(Reply::Container(answer)) => {
                self.status.containers(answer.followed);
                if let Some(pinned) = &answer.pinned {
                    kubelet::report(&self.status, pinned);
                }
                Ok(*answer)
            }
            Ok(other) => Err(format!(
                "the state thread answered a container's request with {other:?}"
            )),
            Err(e) => Err(e.to_string()),
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
        let request = match self.map(&pod, &container, true).await {
            Ok(Mapping::Admit(r)) => r,
            Ok(m @ Mapping::Leave(_)) => {
                if let Some(pinned) = kubelet::pinned(&pod, &container, &m) {
                    if pinned.kubelet {
                        warn!(container = %name, what = %pinned.what, "a container of the kubelet arrived with a cpuset: the kubelet's CPU manager is not at policy none");
                    } else {
                        info!(container = %name, what = %pinned.what, "a container arrived pinned by its user: its CPUs are handed out exclusively to no one while it runs");
                    }
                    let id = container.id.clone();
                    if let Err(e) = self.ask(ContainerCommand::Pinned { id, pinned }).await {
                        warn!(container = %name, error = %e, "cannot note a pinned container");
                    }
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
        if let Some(e) = budget::too_late(&name, "before its admission") {
            warn!(container = %name, "{e}");
            return Err(e);
        }
        let id = container.id.clone();
        let admit = self
            .pod_to_admit(
                &pod,
                &container,
                request.pod.view,
                convert::assigned(&request.devices),
            )
            .await
            .map_err(|e| {
                warn!(container = %name, "{e}");
                PluginError::new(format!("topomgr: {e}"))
            })?;
        let answer = self
            .ask(ContainerCommand::Create(Box::new(NewContainer {
                id: id.clone(),
                pod: admit.pod,
                owner: admit.owner,
                assigned: admit.given,
                follow: FollowedContainer {
                    held_by: admit.held_by,
                    ..followed(&pod, &container)
                },
                deadline: topomgr_nri::answer_deadline().map(tokio::time::Instant::into_std),
            })))
            .await
            .map_err(|e| {
                PluginError::new(format!("topomgr could not admit container {name}: {e}"))
            })?;
        if let Some(late) = answer.late {
            let e = budget::late_error(
                &name,
                match late {
                    Late::BeforeAdmission => "before its admission",
                    Late::AfterAdmission => "after its admission",
                },
            );
            warn!(container = %name, "{e}");
            return Err(e);
        }
        let Some(result) = answer.admission else {
            return Err(PluginError::new(format!(
                "topomgr could not admit container {name}: the state thread answered no admission"
            )));
        };
        if let Some(e) = budget::too_late(&name, "after its admission") {
            // In time in the state thread, late once committed: released
            // by a second request.
            if result.admitted {
                self.forget(ContainerCommand::Remove { id: id.clone() })
                    .await;
            }
            warn!(container = %name, "{e}");
            return Err(e);
        }
        if !result.admitted {
            info!(container = %name, reason = ?result.reason, "container refused");
            if let Some(events) = &self.events {
                events.record(event_of(&pod, &result));
            }
            return Err(refusal(&result));
        }
        let Some(set) = answer.cpuset else {
            return Err(PluginError::new(format!(
                "topomgr could not place container {name}: it is admitted but has no cpuset (the shared pool is empty)"
            )));
        };
        let allocation = result
            .containers
            .iter()
            .find(|c| c.name == container.name)
            .or(result.containers.first())
            .map(|c| &c.allocation);
        let env = allocation.map(|a| a.env.clone()).unwrap_or_default();
        let unlimited_quota =
            self.lift_cpu_quota && allocation.is_some_and(|a| a.exclusive && !a.cpus.is_empty());
        info!(container = %name, id, cpus = %set.cpus, mems = %set.mems, updated = answer.updates.len(), "container placed");
        let mut adjust = convert::adjustment(&set, &env, unlimited_quota);
        adjust
            .annotations
            .insert(convert::PLACED_CPUS.to_owned(), set.cpus.to_string());
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            update: nri_updates(&answer.updates, false),
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
        // A note of the last Synchronize about it no longer holds, whatever
        // the release says (it no longer runs in the shared pool).
        self.status.forget_container(&container.id);
        let answer = self
            .ask(ContainerCommand::Stop {
                id: container.id.clone(),
            })
            .await
            .map_err(|e| {
                PluginError::new(format!(
                    "topomgr could not release container {}: {e}",
                    who(&pod, &container)
                ))
            })?;
        Ok(nri_updates(&answer.updates, true))
    }

    /// UpdateContainer (the kubelet's resource update, or topomgr's own
    /// cpuset sent through CRI): a resize of the container's CPU or memory
    /// is done in place by the state thread (`NodeState::resize`) or fails
    /// with its reason, changing nothing; the answer sets the container's
    /// cpuset as the state gives it (merged into the request) and the
    /// shared containers whose cpuset changed.
    pub async fn update(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        // Only the pod view counts for a resize: the kubelet is not asked
        // for the container's devices.
        let resized = match resources {
            Some(r) => {
                let mut next = container.clone();
                convert::overlay_resources(&mut next, &r);
                match self.map(&pod, &next, false).await {
                    Ok(Mapping::Admit(a)) => Some(Box::new(a.pod.view)),
                    _ => None,
                }
            }
            None => None,
        };
        let answer = self
            .ask(ContainerCommand::Update {
                id: container.id.clone(),
                resized,
            })
            .await
            .map_err(|e| {
                PluginError::new(format!(
                    "topomgr could not answer the update of container {}: {e}",
                    who(&pod, &container)
                ))
            })?;
        if let Some(why) = answer.refusal {
            warn!(container = %who(&pod, &container), "{why}");
            return Err(PluginError::new(why));
        }
        let Some(set) = answer.cpuset else {
            return Ok(UpdateContainerResponse::default());
        };
        let mut update = vec![convert::update(&container.id, &set, false)];
        update.extend(nri_updates(&answer.updates, false));
        Ok(UpdateContainerResponse {
            update,
            evict: Vec::new(),
        })
    }

    /// RemoveContainer: release what is still held (a container removed
    /// without a stop); the follower gives the CPUs back.
    pub async fn remove(&self, container: Container) {
        self.status.forget_container(&container.id);
        self.forget(ContainerCommand::Remove {
            id: container.id.clone(),
        })
        .await;
    }

    /// StopPodSandbox, RemovePodSandbox: release every container of the
    /// pod still held, and the pod when it is admitted whole (pod scope).
    pub async fn remove_pod(&self, pod: PodSandbox) {
        self.status.forget_sandbox(&pod.id);
        self.forget(ContainerCommand::RemoveSandbox {
            sandbox: pod.id.clone(),
        })
        .await;
    }

    /// Remove, RemoveSandbox: the follower tells the others.
    async fn forget(&self, cmd: ContainerCommand) {
        match self.ask(cmd.clone()).await {
            Ok(a) if !a.released.is_empty() => {
                info!(containers = %a.released.join(","), "containers removed: no longer followed");
                self.wake();
            }
            Ok(a) if a.again => self.wake(),
            Ok(_) => {}
            Err(e) => {
                warn!(request = ?cmd, error = %e, "cannot release removed containers; the next Synchronize does")
            }
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
        let mut notes = Vec::new();
        let mut names = BTreeMap::new();
        let mut sandboxes = BTreeMap::new();
        let mut listed = Vec::new();
        // Pod scope: what each sandbox's pod is, read at most once here,
        // and the devices of each of its containers listed.
        let mut scopes = SandboxScopes::default();
        let mut pod_devices: BTreeMap<String, BTreeMap<String, AssignedDevicesRequest>> =
            BTreeMap::new();
        for c in &live {
            let Some(pod) = pods.get(c.pod_sandbox_id.as_str()) else {
                warn!(container = %c.id, sandbox = %c.pod_sandbox_id, "the runtime lists a container without its pod; left alone");
                continue;
            };
            let name = who(pod, c);
            let mut pinned = None;
            // The kubelet is not asked here: one call per listed container
            // would bound Synchronize by the kubelet's latency; the nodes
            // of a DRA claim's CDI devices are in the container already.
            let mut held_by = None;
            let admit = match self.map(pod, c, false).await {
                Ok(Mapping::Admit(r)) => {
                    let assigned = convert::assigned(&r.devices);
                    match self.sandbox_scope(&mut scopes, pod, c).await {
                        SandboxScope::Own => {
                            Some((r.pod.view, owner(&c.id), Given::Every(assigned)))
                        }
                        SandboxScope::Whole(view) => {
                            held_by = Some(pod.id.clone());
                            pod_devices
                                .entry(pod.id.clone())
                                .or_default()
                                .insert(c.name.clone(), assigned);
                            // Its devices: every listed container's, below.
                            // Held already: its own view, for a resize
                            // done while topomgr was away.
                            let v = view.map_or(r.pod.view, |v| *v);
                            Some((v, sandbox_owner(pod), Given::default()))
                        }
                        SandboxScope::Failed(e) => {
                            warn!(container = %name, "{e}; it runs in the shared pool until the next registration");
                            notes.push(ContainerNote {
                                id: c.id.clone(),
                                sandbox: c.pod_sandbox_id.clone(),
                                text: format!(
                                    "nri: container {name} ({}) runs in the shared pool: {e}",
                                    c.id
                                ),
                            });
                            held_by = Some(pod.id.clone());
                            None
                        }
                    }
                }
                Ok(m @ Mapping::Leave(_)) => {
                    pinned = kubelet::pinned(pod, c, &m);
                    debug!(container = %name, mapping = ?m, "left alone");
                    None
                }
                Err(e) => {
                    warn!(container = %name, error = %e, "cannot read a container the runtime has");
                    notes.push(ContainerNote {
                        id: c.id.clone(),
                        sandbox: c.pod_sandbox_id.clone(),
                        text: format!(
                            "nri: container {name} ({}) cannot be read: {e}; it is left alone",
                            c.id
                        ),
                    });
                    None
                }
            };
            names.insert(c.id.clone(), name);
            sandboxes.insert(c.id.clone(), c.pod_sandbox_id.clone());
            listed.push(ListedContainer {
                id: c.id.clone(),
                follow: FollowedContainer {
                    held_by,
                    ..followed(pod, c)
                },
                admit,
                pinned,
            });
        }
        for l in &mut listed {
            if let (Some(uid), Some(admit)) = (&l.follow.held_by, &mut l.admit) {
                admit.2 = Given::ByName(pod_devices.get(uid).cloned().unwrap_or_default());
            }
        }
        let answer = self
            .ask(ContainerCommand::Synchronize {
                existing,
                sandboxes: pods.keys().map(|s| (*s).to_owned()).collect(),
                listed,
            })
            .await
            .map_err(|e| {
                PluginError::new(format!(
                    "topomgr cannot reconcile with the runtime's containers: {e}"
                ))
            })?;
        if !answer.released.is_empty() {
            info!(containers = %answer.released.join(","), "released the pods of containers the runtime no longer has");
        }
        for (id, outcome) in &answer.admitted {
            let name = names.get(id).map_or(id.as_str(), String::as_str);
            let note = |text: String| ContainerNote {
                id: id.clone(),
                sandbox: sandboxes.get(id).cloned().unwrap_or_default(),
                text,
            };
            match outcome {
                Ok(r) if r.admitted => {
                    info!(container = %name, id, "container created while topomgr was away admitted");
                }
                Ok(r) => {
                    let why = refusal(r);
                    warn!(container = %name, id, error = %why, "a container created while topomgr was away cannot be admitted; it runs in the shared pool");
                    notes.push(note(format!("nri: container {name} ({id}) was created while topomgr was not connected and cannot be admitted ({why}); it runs in the shared pool")));
                }
                Err(e) => {
                    warn!(container = %name, id, error = %e, "cannot admit a container created while topomgr was away; it runs in the shared pool");
                    notes.push(note(format!("nri: container {name} ({id}) was created while topomgr was not connected and could not be admitted ({e}); it runs in the shared pool")));
                }
            }
        }
        self.status.set_notes(notes);
        info!(
            containers = containers.len(),
            updated = answer.updates.len(),
            "synchronized with the runtime"
        );
        Ok(nri_updates(&answer.updates, true))
    }

    /// PostCreateContainer, PostStartContainer: the runtime created the
    /// container with the cpuset it lists now. An update of it sent while
    /// it was being created can be lost (containerd applies updates with
    /// `ignore_failure` to a container still in creation, and drops them):
    /// where what it has is not what it must have, the follower sends the
    /// correction at once.
    ///
    /// At PostStart (`started`), a container followed in the shared pool
    /// because it could not be admitted takes the place of a stale
    /// instance of itself that never started
    /// ([`topomgr_node::state::followed::stale_siblings`]).
    pub async fn created(&self, pod: PodSandbox, container: Container, started: bool) {
        let cpuset = convert::linux_resources(container.resources())
            .cpu
            .and_then(|c| {
                let cpus = topomgr_sdk::CpuSet::parse(c.cpus.as_deref()?).ok()?;
                let mems = topomgr_sdk::NumaMask::parse_list(c.mems.as_deref()?).ok()?;
                Some(topomgr_cgroup::Cpuset { cpus, mems })
            });
        let id = container.id.clone();
        let started = if started {
            // The cpuset it runs with is topomgr's (it is followed), not a
            // user's pin: mapped as at its creation, without it.
            let mut bare = container.clone();
            if let Some(cpu) = bare
                .linux
                .as_mut()
                .and_then(|l| l.resources.as_mut())
                .and_then(|r| r.cpu.as_mut())
            {
                cpu.cpus.clear();
                cpu.mems.clear();
            }
            Some(match self.map(&pod, &bare, true).await {
                Ok(Mapping::Admit(r)) => Some(Box::new((
                    r.pod.view,
                    owner(&container.id),
                    convert::assigned(&r.devices),
                ))),
                _ => None,
            })
        } else {
            None
        };
        match self
            .ask(ContainerCommand::Created {
                id,
                cpuset,
                pid: if started.is_some() { container.pid } else { 0 },
                started,
            })
            .await
        {
            Ok(a) if a.again => {
                info!(container = %who(&pod, &container), "created with another cpuset than it must have now; correcting it");
                self.wake();
            }
            Ok(_) => {}
            Err(e) => {
                warn!(container = %who(&pod, &container), error = %e, "cannot check a created container's cpuset")
            }
        }
    }

    /// Read the followed containers' cpusets back from their cgroups and
    /// send the right one to each found otherwise (reported in health and
    /// counted in `topomgr_nri_cpuset_repairs_total`).
    pub(crate) async fn check_cpusets(&self) {
        match self.ask(ContainerCommand::CheckCpusets).await {
            Ok(a) if !a.repairs.is_empty() => {
                for r in &a.repairs {
                    self.status.repaired(format!(
                        "nri: container {} ({}) ran on CPUs {} (memory nodes {}) where it must have {} ({}); topomgr sent its cpuset again",
                        r.who, r.id, r.found.cpus, r.found.mems, r.want.cpus, r.want.mems
                    ));
                }
                self.wake();
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "cannot check the containers' cpusets"),
        }
    }

    /// The follower's round: every cpuset the runtime was not told (a
    /// release through the HTTP API or a reclaim, a correction) is sent
    /// unsolicited (see [`topomgr_node::state::followed`] for the order).
    pub(crate) async fn push_updates(&self) {
        let Some(runtime) = self.runtime_client() else {
            return;
        };
        loop {
            let updates = match self.ask(ContainerCommand::FollowerRound).await {
                Ok(a) if !a.updates.is_empty() => a.updates,
                Ok(_) => return,
                Err(e) => {
                    warn!(error = %e, "cannot compute the cpusets to send");
                    return;
                }
            };
            let (failed, retry) = match self.cri.send(&updates).await {
                Ok(Some(failed)) => {
                    self.status.set_condition(Condition::CriRoute, Vec::new());
                    (failed, true)
                }
                Ok(None) => self.send_through_nri(&runtime, &updates).await,
                Err(NoCri(note)) => {
                    warn!("{note}");
                    self.status.set_condition(Condition::CriRoute, vec![note]);
                    self.send_through_nri(&runtime, &updates).await
                }
            };
            match self.ask(ContainerCommand::FollowerSent { failed }).await {
                Ok(a) if a.again && retry => {}
                Ok(_) => return,
                Err(e) => {
                    warn!(error = %e, "cannot record the cpusets sent");
                    return;
                }
            }
        }
    }

    /// Sends `updates` as NRI `UpdateContainers` (see [`super::cri`] for
    /// why only where CRI cannot be used): the ids not applied, and
    /// whether to compute again when cpusets changed meanwhile.
    async fn send_through_nri(
        &self,
        runtime: &RuntimeClient,
        updates: &[CpusetUpdate],
    ) -> (Vec<String>, bool) {
        match runtime
            .update_containers(nri_updates(updates, true), Vec::new())
            .await
        {
            Ok(failed) => {
                for f in &failed {
                    warn!(container = %f.container_id, "the runtime did not apply a cpuset update");
                }
                (failed.into_iter().map(|f| f.container_id).collect(), true)
            }
            Err(e) => {
                warn!(error = %e, "cannot update the shared containers' cpusets; retrying after the next change");
                (updates.iter().map(|(id, _)| id.clone()).collect(), false)
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

    async fn post_create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<()> {
        self.created(pod, container, false).await;
        Ok(())
    }

    async fn post_start_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<()> {
        self.created(pod, container, true).await;
        Ok(())
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        self.update(pod, container, resources).await
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

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.remove_pod(pod).await;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.remove_pod(pod).await;
        Ok(())
    }
}
