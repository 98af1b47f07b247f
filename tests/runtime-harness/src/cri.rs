//! A CRI client (`runtime.v1.RuntimeService`) that drives the runtime as the
//! kubelet does: pod sandboxes with the kubelet's cgroup parents, containers
//! with the CPU shares/quota/period and memory limit the kubelet derives
//! from a pod spec, exec to look inside.
//!
//! The messages are a hand-written subset of kubernetes/cri-api
//! `pkg/apis/runtime/v1/api.proto` (field numbers as upstream; fields not
//! declared are skipped by the decoder).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::HarnessError;

/// Messages of `runtime.v1` that the client uses.
pub mod v1 {
    use std::collections::BTreeMap;

    pub use topomgr_cri::v1::{
        Empty, LinuxContainerResources, UpdateContainerResourcesRequest, VersionRequest,
        VersionResponse,
    };

    /// `NamespaceMode`: POD = 0, CONTAINER = 1, NODE = 2.
    pub const NAMESPACE_POD: i32 = 0;
    pub const NAMESPACE_CONTAINER: i32 = 1;
    pub const NAMESPACE_NODE: i32 = 2;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamespaceOption {
        #[prost(int32, tag = "1")]
        pub network: i32,
        #[prost(int32, tag = "2")]
        pub pid: i32,
        #[prost(int32, tag = "3")]
        pub ipc: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxSandboxSecurityContext {
        #[prost(message, optional, tag = "1")]
        pub namespace_options: Option<NamespaceOption>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxPodSandboxConfig {
        #[prost(string, tag = "1")]
        pub cgroup_parent: String,
        #[prost(message, optional, tag = "2")]
        pub security_context: Option<LinuxSandboxSecurityContext>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxMetadata {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub uid: String,
        #[prost(string, tag = "3")]
        pub namespace: String,
        #[prost(uint32, tag = "4")]
        pub attempt: u32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxConfig {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<PodSandboxMetadata>,
        #[prost(string, tag = "2")]
        pub hostname: String,
        #[prost(string, tag = "3")]
        pub log_directory: String,
        #[prost(btree_map = "string, string", tag = "6")]
        pub labels: BTreeMap<String, String>,
        #[prost(btree_map = "string, string", tag = "7")]
        pub annotations: BTreeMap<String, String>,
        #[prost(message, optional, tag = "8")]
        pub linux: Option<LinuxPodSandboxConfig>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RunPodSandboxRequest {
        #[prost(message, optional, tag = "1")]
        pub config: Option<PodSandboxConfig>,
        #[prost(string, tag = "2")]
        pub runtime_handler: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RunPodSandboxResponse {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxIdRequest {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ImageSpec {
        #[prost(string, tag = "1")]
        pub image: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxContainerSecurityContext {
        #[prost(message, optional, tag = "3")]
        pub namespace_options: Option<NamespaceOption>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxContainerConfig {
        #[prost(message, optional, tag = "1")]
        pub resources: Option<LinuxContainerResources>,
        #[prost(message, optional, tag = "2")]
        pub security_context: Option<LinuxContainerSecurityContext>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerMetadata {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(uint32, tag = "2")]
        pub attempt: u32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerConfig {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ContainerMetadata>,
        #[prost(message, optional, tag = "2")]
        pub image: Option<ImageSpec>,
        #[prost(string, repeated, tag = "3")]
        pub command: Vec<String>,
        #[prost(string, repeated, tag = "4")]
        pub args: Vec<String>,
        #[prost(message, repeated, tag = "6")]
        pub envs: Vec<KeyValue>,
        #[prost(btree_map = "string, string", tag = "9")]
        pub labels: BTreeMap<String, String>,
        #[prost(btree_map = "string, string", tag = "10")]
        pub annotations: BTreeMap<String, String>,
        #[prost(string, tag = "11")]
        pub log_path: String,
        #[prost(message, optional, tag = "15")]
        pub linux: Option<LinuxContainerConfig>,
        #[prost(message, repeated, tag = "17")]
        pub cdi_devices: Vec<CdiDevice>,
    }
    /// A CDI device by its fully qualified name (DRA's way, CRI field 17).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CdiDevice {
        #[prost(string, tag = "1")]
        pub name: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CreateContainerRequest {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
        #[prost(message, optional, tag = "2")]
        pub config: Option<ContainerConfig>,
        #[prost(message, optional, tag = "3")]
        pub sandbox_config: Option<PodSandboxConfig>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CreateContainerResponse {
        #[prost(string, tag = "1")]
        pub container_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerIdRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StopContainerRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
        #[prost(int64, tag = "2")]
        pub timeout: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExecSyncRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
        #[prost(string, repeated, tag = "2")]
        pub cmd: Vec<String>,
        #[prost(int64, tag = "3")]
        pub timeout: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExecSyncResponse {
        #[prost(bytes = "vec", tag = "1")]
        pub stdout: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub stderr: Vec<u8>,
        #[prost(int32, tag = "3")]
        pub exit_code: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerStatusRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
        #[prost(bool, tag = "2")]
        pub verbose: bool,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerResources {
        #[prost(message, optional, tag = "1")]
        pub linux: Option<LinuxContainerResources>,
    }
    /// `ContainerState`: CREATED = 0, RUNNING = 1, EXITED = 2, UNKNOWN = 3.
    pub const CONTAINER_RUNNING: i32 = 1;
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerStatus {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(int32, tag = "3")]
        pub state: i32,
        #[prost(int32, tag = "7")]
        pub exit_code: i32,
        #[prost(string, tag = "10")]
        pub reason: String,
        #[prost(string, tag = "11")]
        pub message: String,
        #[prost(message, optional, tag = "16")]
        pub resources: Option<ContainerResources>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerStatusResponse {
        #[prost(message, optional, tag = "1")]
        pub status: Option<ContainerStatus>,
        #[prost(btree_map = "string, string", tag = "2")]
        pub info: BTreeMap<String, String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodSandboxRequest {}
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandbox {
        #[prost(string, tag = "1")]
        pub id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodSandboxResponse {
        #[prost(message, repeated, tag = "1")]
        pub items: Vec<PodSandbox>,
    }
}

/// The kubelet's QoS classes, which decide a pod's cgroup parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

/// A pod to run.
#[derive(Clone, Debug)]
pub struct PodSpec {
    pub name: String,
    pub uid: String,
    pub namespace: String,
    /// The kubelet's cgroupfs-driver parent, e.g.
    /// `/<root>/kubepods/burstable/pod<uid>` (see
    /// [`Containerd::cgroup_parent`](crate::Containerd::cgroup_parent)).
    pub cgroup_parent: String,
}

/// A running pod sandbox and the config it was created with (CRI wants it
/// again with every container).
#[derive(Clone, Debug)]
pub struct Pod {
    pub id: String,
    pub config: v1::PodSandboxConfig,
}

/// A container to create, with the resources the kubelet would set.
#[derive(Clone, Debug)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub resources: v1::LinuxContainerResources,
    /// CDI devices by fully qualified name (CRI `CDIDevices`, as the
    /// kubelet passes DRA's).
    pub cdi_devices: Vec<String>,
    pub annotations: BTreeMap<String, String>,
}

/// The kubelet's default CFS period (µs).
pub const CPU_PERIOD: i64 = 100_000;

impl ContainerSpec {
    /// A container running `sleep` for a long time, with no resources.
    pub fn sleeper(name: &str, image: &str) -> Self {
        ContainerSpec {
            name: name.to_owned(),
            image: image.to_owned(),
            command: ["sleep", "1000000"].map(String::from).to_vec(),
            resources: v1::LinuxContainerResources::default(),
            cdi_devices: Vec::new(),
            annotations: BTreeMap::new(),
        }
    }

    /// With the CDI device `name` (`vendor.com/class=name`).
    pub fn with_cdi_device(mut self, name: &str) -> Self {
        self.cdi_devices.push(name.to_owned());
        self
    }

    /// With the annotation `key: value`.
    pub fn with_annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Sets CPU request and limit in millicores as the kubelet converts them
    /// (`MilliCPUToShares`, `MilliCPUToQuota` with the default period), and
    /// the memory limit in bytes (0 = none).
    pub fn with_resources(mut self, cpu_request_m: i64, cpu_limit_m: i64, memory: i64) -> Self {
        let r = &mut self.resources;
        r.cpu_shares = if cpu_request_m == 0 {
            2
        } else {
            (cpu_request_m * 1024 / 1000).max(2)
        };
        r.cpu_period = CPU_PERIOD;
        r.cpu_quota = if cpu_limit_m == 0 {
            0
        } else {
            (cpu_limit_m * CPU_PERIOD / 1000).max(1000)
        };
        r.memory_limit_in_bytes = memory;
        self
    }
}

/// What a process in a container sees in its `/proc/<pid>/status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub cpus_allowed_list: String,
    pub mems_allowed_list: String,
}

/// A CRI client on the runtime's socket.
pub struct CriClient {
    inner: topomgr_cri::CriClient,
}

/// How long one call may take (a container stop waits for its grace
/// period).
const CALL_TIMEOUT: Duration = Duration::from_secs(300);

impl CriClient {
    /// Connects to the runtime's gRPC socket.
    pub async fn connect(socket: &Path) -> Result<Self, HarnessError> {
        let inner = topomgr_cri::CriClient::connect(socket, CALL_TIMEOUT)
            .await
            .map_err(|e| HarnessError::new(e.to_string()))?;
        Ok(CriClient { inner })
    }

    async fn call<Req, Resp>(
        &mut self,
        method: &'static str,
        req: Req,
    ) -> Result<Resp, HarnessError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.inner.call(method, req).await.map_err(|e| match e {
            topomgr_cri::CriError::Call { call, message, .. } => {
                HarnessError::Cri { call, message }
            }
            e => HarnessError::new(e.to_string()),
        })
    }

    /// The runtime's name and version.
    pub async fn version(&mut self) -> Result<v1::VersionResponse, HarnessError> {
        self.call(
            "/runtime.v1.RuntimeService/Version",
            v1::VersionRequest {
                version: "v1".into(),
            },
        )
        .await
    }

    /// Runs a pod sandbox in the node's network namespace (no CNI needed).
    pub async fn run_pod(&mut self, spec: &PodSpec) -> Result<Pod, HarnessError> {
        let ns = v1::NamespaceOption {
            network: v1::NAMESPACE_NODE,
            pid: v1::NAMESPACE_CONTAINER,
            ipc: v1::NAMESPACE_POD,
        };
        let config = v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: spec.name.clone(),
                uid: spec.uid.clone(),
                namespace: spec.namespace.clone(),
                attempt: 0,
            }),
            // the node's network and UTS namespaces: no hostname of its own
            hostname: String::new(),
            labels: BTreeMap::from([("app".to_owned(), spec.name.clone())]),
            linux: Some(v1::LinuxPodSandboxConfig {
                cgroup_parent: spec.cgroup_parent.clone(),
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: Some(ns),
                }),
            }),
            ..Default::default()
        };
        let r: v1::RunPodSandboxResponse = self
            .call(
                "/runtime.v1.RuntimeService/RunPodSandbox",
                v1::RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: String::new(),
                },
            )
            .await?;
        Ok(Pod {
            id: r.pod_sandbox_id,
            config,
        })
    }

    /// Creates a container in `pod`; returns its id.
    pub async fn create_container(
        &mut self,
        pod: &Pod,
        spec: &ContainerSpec,
    ) -> Result<String, HarnessError> {
        let ns = pod
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone());
        let config = v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata {
                name: spec.name.clone(),
                attempt: 0,
            }),
            image: Some(v1::ImageSpec {
                image: spec.image.clone(),
            }),
            command: spec.command.clone(),
            linux: Some(v1::LinuxContainerConfig {
                resources: Some(spec.resources.clone()),
                security_context: Some(v1::LinuxContainerSecurityContext {
                    namespace_options: ns,
                }),
            }),
            annotations: spec.annotations.clone(),
            cdi_devices: spec
                .cdi_devices
                .iter()
                .map(|name| v1::CdiDevice { name: name.clone() })
                .collect(),
            ..Default::default()
        };
        let r: v1::CreateContainerResponse = self
            .call(
                "/runtime.v1.RuntimeService/CreateContainer",
                v1::CreateContainerRequest {
                    pod_sandbox_id: pod.id.clone(),
                    config: Some(config),
                    sandbox_config: Some(pod.config.clone()),
                },
            )
            .await?;
        Ok(r.container_id)
    }

    pub async fn start_container(&mut self, id: &str) -> Result<(), HarnessError> {
        let _: v1::Empty = self
            .call(
                "/runtime.v1.RuntimeService/StartContainer",
                v1::ContainerIdRequest {
                    container_id: id.to_owned(),
                },
            )
            .await?;
        Ok(())
    }

    /// Stops a container, killing it after `timeout`.
    pub async fn stop_container(
        &mut self,
        id: &str,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        let _: v1::Empty = self
            .call(
                "/runtime.v1.RuntimeService/StopContainer",
                v1::StopContainerRequest {
                    container_id: id.to_owned(),
                    timeout: timeout.as_secs() as i64,
                },
            )
            .await?;
        Ok(())
    }

    pub async fn remove_container(&mut self, id: &str) -> Result<(), HarnessError> {
        let _: v1::Empty = self
            .call(
                "/runtime.v1.RuntimeService/RemoveContainer",
                v1::ContainerIdRequest {
                    container_id: id.to_owned(),
                },
            )
            .await?;
        Ok(())
    }

    pub async fn stop_pod(&mut self, id: &str) -> Result<(), HarnessError> {
        let _: v1::Empty = self
            .call(
                "/runtime.v1.RuntimeService/StopPodSandbox",
                v1::PodSandboxIdRequest {
                    pod_sandbox_id: id.to_owned(),
                },
            )
            .await?;
        Ok(())
    }

    pub async fn remove_pod(&mut self, id: &str) -> Result<(), HarnessError> {
        let _: v1::Empty = self
            .call(
                "/runtime.v1.RuntimeService/RemovePodSandbox",
                v1::PodSandboxIdRequest {
                    pod_sandbox_id: id.to_owned(),
                },
            )
            .await?;
        Ok(())
    }

    /// Stops and removes every pod sandbox (and so its containers).
    pub async fn remove_all_pods(&mut self) -> Result<(), HarnessError> {
        let pods: v1::ListPodSandboxResponse = self
            .call(
                "/runtime.v1.RuntimeService/ListPodSandbox",
                v1::ListPodSandboxRequest {},
            )
            .await?;
        for p in pods.items {
            self.stop_pod(&p.id).await?;
            self.remove_pod(&p.id).await?;
        }
        Ok(())
    }

    /// The container's status (state, exit code, resources as the runtime
    /// records them).
    pub async fn container_status(
        &mut self,
        id: &str,
    ) -> Result<v1::ContainerStatus, HarnessError> {
        let r: v1::ContainerStatusResponse = self
            .call(
                "/runtime.v1.RuntimeService/ContainerStatus",
                v1::ContainerStatusRequest {
                    container_id: id.to_owned(),
                    verbose: false,
                },
            )
            .await?;
        r.status
            .ok_or_else(|| HarnessError::new(format!("ContainerStatus of {id} carries no status")))
    }

    /// Updates a container's resources as `kubectl`'s in-place resize would.
    pub async fn update_resources(
        &mut self,
        id: &str,
        resources: v1::LinuxContainerResources,
    ) -> Result<(), HarnessError> {
        let _: v1::Empty = self
            .call(
                "/runtime.v1.RuntimeService/UpdateContainerResources",
                v1::UpdateContainerResourcesRequest {
                    container_id: id.to_owned(),
                    linux: Some(resources),
                },
            )
            .await?;
        Ok(())
    }

    /// Runs `cmd` in the container; its stdout, or an error naming the exit
    /// code and stderr.
    pub async fn exec(&mut self, id: &str, cmd: &[&str]) -> Result<String, HarnessError> {
        let r: v1::ExecSyncResponse = self
            .call(
                "/runtime.v1.RuntimeService/ExecSync",
                v1::ExecSyncRequest {
                    container_id: id.to_owned(),
                    cmd: cmd.iter().map(|s| s.to_string()).collect(),
                    timeout: 10,
                },
            )
            .await?;
        if r.exit_code != 0 {
            return Err(HarnessError::new(format!(
                "{cmd:?} in container {id} exited {}: {}",
                r.exit_code,
                String::from_utf8_lossy(&r.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&r.stdout).into_owned())
    }

    /// Where process `pid` of the container (`"self"`: a fresh exec'd
    /// process; `"1"`: the container's main process) may run.
    pub async fn placement(&mut self, id: &str, pid: &str) -> Result<Placement, HarnessError> {
        let status = self
            .exec(id, &["cat", &format!("/proc/{pid}/status")])
            .await?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
                .ok_or_else(|| {
                    HarnessError::new(format!("/proc/{pid}/status in {id} has no {name}"))
                })
        };
        Ok(Placement {
            cpus_allowed_list: field("Cpus_allowed_list")?,
            mems_allowed_list: field("Mems_allowed_list")?,
        })
    }
}
