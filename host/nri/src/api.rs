//! Messages of the `nri.pkg.api.v1alpha1` package, written by hand as prost
//! structs from containerd/nri's `pkg/api/api.proto` at **v0.6.1**: the NRI
//! that Debian's containerd 1.7.24 (trixie) is built with, and a wire subset
//! of every later v1alpha1 release (later fields only add tags). A few fields
//! of later releases are declared by their real tags (v0.7+: Synchronize's
//! `more`, Configure's `registration_timeout` and `request_timeout`); NRI
//! 0.6.1 does not send them, so they read as zero there.
//!
//! Only what topomgr reads or answers is declared; every declared field has
//! the upstream tag and type, and the fields left out (OCI hooks, namespaces,
//! rlimits, device cgroup rules, NRI v1 emulation) are skipped by the decoder
//! as unknown fields. Maps are `BTreeMap`s so that a message's `Debug` output
//! and any order built from it are stable.

use std::collections::BTreeMap;

/// Plugin → runtime: register under a name and an index (two digits; the
/// runtime calls plugins in ascending index order).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterPluginRequest {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(string, tag = "2")]
    pub plugin_idx: String,
}

/// Plugin → runtime: unsolicited updates (and evictions) of containers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainersRequest {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    #[prost(message, repeated, tag = "2")]
    pub evict: Vec<ContainerEviction>,
}

/// The updates the runtime failed to apply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainersResponse {
    #[prost(message, repeated, tag = "1")]
    pub failed: Vec<ContainerUpdate>,
}

/// Runtime → plugin, once per connection after registration.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureRequest {
    /// Plugin-specific configuration from the runtime's NRI config, if any.
    #[prost(string, tag = "1")]
    pub config: String,
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// The runtime's registration timeout in milliseconds (NRI >= 0.7; 0:
    /// not sent).
    #[prost(int64, tag = "4")]
    pub registration_timeout: i64,
    /// The runtime's timeout for each request to a plugin in milliseconds
    /// (NRI >= 0.7; 0: not sent, containerd 1.7's default 2 s applies).
    #[prost(int64, tag = "5")]
    pub request_timeout: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ConfigureResponse {
    /// Bit `e - 1` set for each subscribed [`Event`] `e`.
    #[prost(int32, tag = "2")]
    pub events: i32,
}

/// Runtime → plugin after Configure: every pod and container it knows.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeRequest {
    #[prost(message, repeated, tag = "1")]
    pub pods: Vec<PodSandbox>,
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    /// More pods and containers follow in another Synchronize (NRI >= 0.7
    /// splits one larger than a message may carry).
    #[prost(bool, tag = "3")]
    pub more: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SynchronizeResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    /// Echoes the request's `more`: the plugin takes the rest in further
    /// requests (NRI >= 0.7 closes a plugin that does not).
    #[prost(bool, tag = "2")]
    pub more: bool,
}

/// Runtime → plugin before a container is created.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

/// The plugin's answer to CreateContainer: changes to the container being
/// created, and updates to (or evictions of) other existing containers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    #[prost(message, optional, tag = "1")]
    pub adjust: Option<ContainerAdjustment>,
    #[prost(message, repeated, tag = "2")]
    pub update: Vec<ContainerUpdate>,
    #[prost(message, repeated, tag = "3")]
    pub evict: Vec<ContainerEviction>,
}

/// Runtime → plugin before a container's resources are updated.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
    #[prost(message, optional, tag = "3")]
    pub linux_resources: Option<LinuxResources>,
}

/// The plugin's answer to UpdateContainer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    #[prost(message, repeated, tag = "2")]
    pub evict: Vec<ContainerEviction>,
}

/// Runtime → plugin when a container stops.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct StopContainerResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
}

/// Runtime → plugin for the pod and container events that have no answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StateChangeEvent {
    #[prost(enumeration = "Event", tag = "1")]
    pub event: i32,
    #[prost(message, optional, tag = "2")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "3")]
    pub container: Option<Container>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Empty {}

/// The lifecycle events a plugin can subscribe to (`Event` upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Event {
    Unknown = 0,
    RunPodSandbox = 1,
    StopPodSandbox = 2,
    RemovePodSandbox = 3,
    CreateContainer = 4,
    PostCreateContainer = 5,
    StartContainer = 6,
    PostStartContainer = 7,
    UpdateContainer = 8,
    PostUpdateContainer = 9,
    StopContainer = 10,
    RemoveContainer = 11,
}

/// A pod as the runtime describes it to plugins.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub uid: String,
    #[prost(string, tag = "4")]
    pub namespace: String,
    #[prost(btree_map = "string, string", tag = "5")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "6")]
    pub annotations: BTreeMap<String, String>,
    #[prost(string, tag = "7")]
    pub runtime_handler: String,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandbox>,
    #[prost(uint32, tag = "9")]
    pub pid: u32,
}

/// The Linux part of a pod: its cgroup parent (the kubelet's
/// `…/kubepods[/burstable|/besteffort]/pod<uid>` or the systemd driver's
/// slice) and its overhead and resources.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandbox {
    #[prost(message, optional, tag = "1")]
    pub pod_overhead: Option<LinuxResources>,
    #[prost(message, optional, tag = "2")]
    pub pod_resources: Option<LinuxResources>,
    #[prost(string, tag = "3")]
    pub cgroup_parent: String,
    #[prost(string, tag = "4")]
    pub cgroups_path: String,
    #[prost(message, optional, tag = "6")]
    pub resources: Option<LinuxResources>,
}

/// A container as the runtime describes it to plugins.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(enumeration = "ContainerState", tag = "4")]
    pub state: i32,
    #[prost(btree_map = "string, string", tag = "5")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "6")]
    pub annotations: BTreeMap<String, String>,
    #[prost(string, repeated, tag = "7")]
    pub args: Vec<String>,
    /// `KEY=value` strings, as in the OCI spec.
    #[prost(string, repeated, tag = "8")]
    pub env: Vec<String>,
    #[prost(message, repeated, tag = "9")]
    pub mounts: Vec<Mount>,
    #[prost(message, optional, tag = "11")]
    pub linux: Option<LinuxContainer>,
    #[prost(uint32, tag = "12")]
    pub pid: u32,
}

/// A container's state as NRI reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ContainerState {
    ContainerUnknown = 0,
    ContainerCreated = 1,
    ContainerPaused = 2,
    ContainerRunning = 3,
    ContainerStopped = 4,
}

/// A container mount.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    #[prost(string, tag = "1")]
    pub destination: String,
    #[prost(string, tag = "2")]
    pub r#type: String,
    #[prost(string, tag = "3")]
    pub source: String,
    #[prost(string, repeated, tag = "4")]
    pub options: Vec<String>,
}

/// The Linux part of a container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainer {
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<LinuxDevice>,
    #[prost(message, optional, tag = "3")]
    pub resources: Option<LinuxResources>,
    #[prost(message, optional, tag = "4")]
    pub oom_score_adj: Option<OptionalInt>,
    #[prost(string, tag = "5")]
    pub cgroups_path: String,
}

/// A device node of a container (e.g. `/dev/vfio/12`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxDevice {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(string, tag = "2")]
    pub r#type: String,
    #[prost(int64, tag = "3")]
    pub major: i64,
    #[prost(int64, tag = "4")]
    pub minor: i64,
    #[prost(message, optional, tag = "5")]
    pub file_mode: Option<OptionalFileMode>,
    #[prost(message, optional, tag = "6")]
    pub uid: Option<OptionalUInt32>,
    #[prost(message, optional, tag = "7")]
    pub gid: Option<OptionalUInt32>,
}

/// A container's Linux resources (also what a plugin adjusts or updates).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxResources {
    #[prost(message, optional, tag = "1")]
    pub memory: Option<LinuxMemory>,
    #[prost(message, optional, tag = "2")]
    pub cpu: Option<LinuxCpu>,
    #[prost(message, repeated, tag = "3")]
    pub hugepage_limits: Vec<HugepageLimit>,
    #[prost(message, optional, tag = "4")]
    pub blockio_class: Option<OptionalString>,
    #[prost(message, optional, tag = "5")]
    pub rdt_class: Option<OptionalString>,
    #[prost(btree_map = "string, string", tag = "6")]
    pub unified: BTreeMap<String, String>,
}

/// Memory limits (`LinuxMemory` upstream).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxMemory {
    #[prost(message, optional, tag = "1")]
    pub limit: Option<OptionalInt64>,
    #[prost(message, optional, tag = "2")]
    pub reservation: Option<OptionalInt64>,
    #[prost(message, optional, tag = "3")]
    pub swap: Option<OptionalInt64>,
    #[prost(message, optional, tag = "4")]
    pub kernel: Option<OptionalInt64>,
    #[prost(message, optional, tag = "5")]
    pub kernel_tcp: Option<OptionalInt64>,
    #[prost(message, optional, tag = "6")]
    pub swappiness: Option<OptionalUInt64>,
    #[prost(message, optional, tag = "7")]
    pub disable_oom_killer: Option<OptionalBool>,
    #[prost(message, optional, tag = "8")]
    pub use_hierarchy: Option<OptionalBool>,
}

/// CPU limits and placement (`LinuxCPU` upstream). `cpus` and `mems` are
/// cpuset lists (`"0-3,8"`); empty means "not set".
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxCpu {
    #[prost(message, optional, tag = "1")]
    pub shares: Option<OptionalUInt64>,
    #[prost(message, optional, tag = "2")]
    pub quota: Option<OptionalInt64>,
    #[prost(message, optional, tag = "3")]
    pub period: Option<OptionalUInt64>,
    #[prost(message, optional, tag = "4")]
    pub realtime_runtime: Option<OptionalInt64>,
    #[prost(message, optional, tag = "5")]
    pub realtime_period: Option<OptionalUInt64>,
    #[prost(string, tag = "6")]
    pub cpus: String,
    #[prost(string, tag = "7")]
    pub mems: String,
}

/// A hugepage limit, e.g. `page_size = "2MB"`, `limit` in bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HugepageLimit {
    #[prost(string, tag = "1")]
    pub page_size: String,
    #[prost(uint64, tag = "2")]
    pub limit: u64,
}

/// Changes a plugin asks for to a container being created.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAdjustment {
    #[prost(btree_map = "string, string", tag = "2")]
    pub annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "3")]
    pub mounts: Vec<Mount>,
    #[prost(message, repeated, tag = "4")]
    pub env: Vec<KeyValue>,
    #[prost(message, optional, tag = "6")]
    pub linux: Option<LinuxContainerAdjustment>,
}

/// The Linux part of an adjustment.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerAdjustment {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<LinuxDevice>,
    #[prost(message, optional, tag = "2")]
    pub resources: Option<LinuxResources>,
    #[prost(string, tag = "3")]
    pub cgroups_path: String,
}

/// An update to an existing container's resources.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerUpdate {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(message, optional, tag = "2")]
    pub linux: Option<LinuxContainerUpdate>,
    /// The runtime does not fail the whole request when this update fails.
    #[prost(bool, tag = "3")]
    pub ignore_failure: bool,
}

/// The Linux part of an update.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerUpdate {
    #[prost(message, optional, tag = "1")]
    pub resources: Option<LinuxResources>,
}

/// A request to stop a container unsolicitedly.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerEviction {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(string, tag = "2")]
    pub reason: String,
}

/// An environment variable of an adjustment.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A string that may be unset.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalString {
    #[prost(string, tag = "1")]
    pub value: String,
}

/// A signed integer that may be unset.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalInt {
    #[prost(int64, tag = "1")]
    pub value: i64,
}

/// A 32-bit unsigned integer that may be unset.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalUInt32 {
    #[prost(uint32, tag = "1")]
    pub value: u32,
}

/// A 64-bit signed integer that may be unset.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalInt64 {
    #[prost(int64, tag = "1")]
    pub value: i64,
}

/// A 64-bit unsigned integer that may be unset.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalUInt64 {
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// A boolean that may be unset.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalBool {
    #[prost(bool, tag = "1")]
    pub value: bool,
}

/// File permissions that may be unset.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalFileMode {
    #[prost(uint32, tag = "1")]
    pub value: u32,
}

impl Container {
    /// The container's Linux resources, if the runtime sent any.
    pub fn resources(&self) -> Option<&LinuxResources> {
        self.linux.as_ref()?.resources.as_ref()
    }
}

impl PodSandbox {
    /// The pod's cgroup parent (empty when the runtime sent none).
    pub fn cgroup_parent(&self) -> &str {
        self.linux.as_ref().map_or("", |l| l.cgroup_parent.as_str())
    }
}

impl LinuxResources {
    /// Resources that set only the cpuset: `cpus` and `mems` (either may be
    /// empty, meaning "leave as is").
    pub fn cpuset(cpus: &str, mems: &str) -> Self {
        LinuxResources {
            cpu: Some(LinuxCpu {
                cpus: cpus.to_owned(),
                mems: mems.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

impl ContainerUpdate {
    /// An update of `container_id`'s resources.
    pub fn resources(container_id: &str, resources: LinuxResources) -> Self {
        ContainerUpdate {
            container_id: container_id.to_owned(),
            linux: Some(LinuxContainerUpdate {
                resources: Some(resources),
            }),
            ignore_failure: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Bytes written field by field as the upstream definitions say, so a
    /// misnumbered tag in the structs fails here.
    #[test]
    fn create_container_request_decodes_upstream_tags() {
        // CPU { shares(1) = {value 1024}, quota(2) = {100000}, cpus(6) = "1" }
        let mut cpu = Vec::new();
        cpu.extend([0x0a, 0x03, 0x08, 0x80, 0x08]); // shares
        cpu.extend([0x12, 0x04, 0x08, 0xa0, 0x8d, 0x06]); // quota 100000
        cpu.extend([0x32, 0x01, b'1']); // cpus
        let mut res = vec![0x12, cpu.len() as u8];
        res.extend(&cpu); // LinuxResources.cpu = 2
        let mut linux = vec![0x1a, res.len() as u8];
        linux.extend(&res); // LinuxContainer.resources = 3
        linux.extend([0x2a, 0x03, b'/', b'c', b'g']); // cgroups_path = 5
        let mut ctr = vec![0x0a, 0x02, b'c', b'1']; // id = 1
        ctr.extend([0x1a, 0x03, b'a', b'p', b'p']); // name = 3
        ctr.extend([0x20, 0x01]); // state = 4 (CREATED)
        ctr.extend([0x42, 0x03, b'A', b'=', b'1']); // env = 8
        ctr.push(0x5a); // linux = 11
        ctr.push(linux.len() as u8);
        ctr.extend(&linux);
        let mut pod_linux = vec![0x1a, 0x05];
        pod_linux.extend(b"/kube"); // cgroup_parent = 3
        let mut pod = vec![0x1a, 0x01, b'u']; // uid = 3
        pod.extend([0x22, 0x02, b'n', b's']); // namespace = 4
        pod.extend([0x2a, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, b'v']); // labels = 5
        pod.push(0x42); // linux = 8
        pod.push(pod_linux.len() as u8);
        pod.extend(&pod_linux);
        let mut req = vec![0x0a, pod.len() as u8];
        req.extend(&pod);
        req.push(0x12);
        req.push(ctr.len() as u8);
        req.extend(&ctr);

        let got = CreateContainerRequest::decode(req.as_slice()).unwrap();
        let pod = got.pod.unwrap();
        assert_eq!((pod.uid.as_str(), pod.namespace.as_str()), ("u", "ns"));
        assert_eq!(pod.labels.get("k").map(String::as_str), Some("v"));
        assert_eq!(pod.cgroup_parent(), "/kube");
        let ctr = got.container.unwrap();
        assert_eq!((ctr.id.as_str(), ctr.name.as_str()), ("c1", "app"));
        assert_eq!(ctr.state, ContainerState::ContainerCreated as i32);
        assert_eq!(ctr.env, ["A=1"]);
        assert_eq!(ctr.linux.as_ref().unwrap().cgroups_path, "/cg");
        let cpu = ctr.resources().unwrap().cpu.clone().unwrap();
        assert_eq!(cpu.shares.unwrap().value, 1024);
        assert_eq!(cpu.quota.unwrap().value, 100_000);
        assert_eq!(cpu.cpus, "1");
    }

    #[test]
    fn adjustment_encodes_upstream_tags() {
        let adjust = CreateContainerResponse {
            adjust: Some(ContainerAdjustment {
                linux: Some(LinuxContainerAdjustment {
                    resources: Some(LinuxResources::cpuset("1", "0")),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        // adjust(1) { linux(6) { resources(2) { cpu(2) { cpus(6) "1", mems(7) "0" } } } }
        let cpu = [0x32, 0x01, b'1', 0x3a, 0x01, b'0'];
        let mut expected = vec![0x0a, 12, 0x32, 10, 0x12, 8, 0x12, 6];
        expected.extend(cpu);
        assert_eq!(adjust.encode_to_vec(), expected);
    }

    /// NRI >= 0.7's fields by their upstream tags: Synchronize's `more`
    /// (request 3, response 2), Configure's timeouts (4 and 5).
    #[test]
    fn later_nri_fields_use_upstream_tags() {
        let r = SynchronizeRequest::decode([0x18, 0x01].as_slice()).unwrap();
        assert!(r.more);
        let a = SynchronizeResponse {
            update: Vec::new(),
            more: true,
        };
        assert_eq!(a.encode_to_vec(), [0x10, 0x01]);
        let c = ConfigureRequest::decode([0x20, 0x88, 0x27, 0x28, 0xd0, 0x0f].as_slice()).unwrap();
        assert_eq!((c.registration_timeout, c.request_timeout), (5000, 2000));
    }

    #[test]
    fn configure_response_uses_tag_2() {
        let r = ConfigureResponse { events: 0x08 };
        assert_eq!(r.encode_to_vec(), [0x10, 0x08]);
    }
}
