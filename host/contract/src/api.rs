//! The JSON contract of the CLI and the daemon (`docs/cli.md`,
//! `docs/api/openapi.yaml`): one serde type per answer.
//!
//! The daemon's handlers serialize these types, the CLI prints them (as
//! JSON, or as tables built from the typed values), the client
//! (`topomgr-client`) deserializes answers into
//! them, and the tests check them against the OpenAPI document: every
//! captured answer reads into its type and writes back to the same JSON, and
//! each component schema's properties and required list equal the type's
//! fields. Field order is the order the JSON is printed in.
//!
//! | answer | type |
//! |---|---|
//! | `topomgr admit`, `POST /v1/pods` | [`Admissions`] of [`Admission`] |
//! | `POST /v1/pods` with [`OWNED_ADMISSION`] | [`AdmissionRequest`] (a [`PodView`], its [`OwnerSpec`], optionally a container to attach and its devices) → [`Admissions`] |
//! | `GET /v1/pods` (`topomgr pods`) | [`PodList`] |
//! | `GET`/`DELETE /v1/pods/{uid}`, `topomgr release` | [`Admission`] |
//! | `topomgr explain -o json`, `POST /v1/pods?dry_run=true&explain=true` | [`Explains`] of [`Explain`] |
//! | `GET /v1/pods/{uid}/explain` | [`Explain`] |
//! | `GET /v1/health` | [`Health`] |
//! | `topomgr topology`, `GET /v1/machine` | [`Machine`] (the SDK's) |
//! | `POST .../attach` | [`AttachRequest`] → [`Attached`] |
//! | every daemon error | [`ErrorBody`] |
//! | `topomgr merge` | [`MergeRequest`] → [`MergeDecision`] |
//! | `topomgr provider NAME allocate` | [`ProviderAllocation`] |
//! | `topomgr provider NAME preferred` | [`PreferredDevices`] |
//! | `GET /v1/noderesourcetopology`, `topomgr export nrt` | [`NodeResourceTopology`] (the Kubernetes object, [`crate::nrt`]; its schema is the CRD's) |
//!
//! `topomgr provider NAME hints` prints [`topomgr_sdk::ProviderHints`] as
//! they are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use topomgr_sdk::{CpuSet, NumaMask, PodView, ProviderHints, QosClass};

use crate::owner::{ContainerRuntime, Owner};

pub use crate::explain::{
    Amount, CpuChange, Explain, ExplainResize, ExplainStep, MergeSummary, Placement,
    ProviderResize, ResizeAnswer, ResourceChange,
};
pub use crate::nrt::NodeResourceTopology;
pub use topomgr_sdk::{DeviceNode, Machine};

/// One pod's admission (schema `Admission`): what `topomgr admit` prints
/// per pod and what the daemon answers for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    /// Pod uid (`<namespace>/<name>` for a pod without `metadata.uid`).
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// QoS class.
    pub qos: QosClass,
    /// Whether the pod was admitted.
    pub admitted: bool,
    /// Why it was rejected (`TopologyAffinityError` or a provider's reason).
    pub reason: Option<String>,
    /// Which resources could not be aligned and why.
    pub message: Option<String>,
    /// What each container got (empty when rejected).
    pub containers: Vec<ContainerAdmission>,
}

/// What one container of an admitted pod got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerAdmission {
    /// Container name.
    pub name: String,
    /// The merged hint's NUMA nodes (`null`: any).
    pub affinity: Option<NumaMask>,
    /// Whether the merged hint is preferred.
    pub preferred: bool,
    /// Its CPUs (`""`: none set).
    pub cpus: CpuSet,
    /// Whether `cpus` are exclusive to it (else the shared pool).
    pub exclusive: bool,
    /// Its memory NUMA nodes, as a list (`"0-1"`; `""`: none set).
    #[serde(with = "mask_list")]
    pub mems: NumaMask,
    /// Device ids by resource.
    pub devices: BTreeMap<String, Vec<String>>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
}

/// Admissions in input order (schema `Admissions`): `topomgr admit` and
/// `POST /v1/pods`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admissions {
    /// One per pod.
    pub pods: Vec<Admission>,
    /// What the attach of an owned admission with
    /// [`AdmissionRequest::attach`] wrote (absent otherwise, and when the
    /// pod was not admitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached: Option<Attached>,
}

/// The daemon's admitted pods (schema `PodList`, `GET /v1/pods`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodList {
    /// Every admitted pod, in uid order.
    pub pods: Vec<Admission>,
    /// Pod uid -> container -> cgroup path (relative to the cgroup root).
    pub attachments: Attachments,
    /// Pod uid -> its owner, for the pods admitted with one (owned
    /// admissions: `topomgr run` through the daemon, the OCI hook, NRI).
    /// Always written; read as empty from a daemon that predates it.
    #[serde(default)]
    pub owners: BTreeMap<String, OwnerSpec>,
}

/// How the daemon is (schema `Health`, `GET /v1/health`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`, `degraded` (see `notes`) or `failing` (see `failure`).
    pub status: HealthStatus,
    /// Admitted pods.
    pub pods: usize,
    /// CPUs held exclusively.
    pub exclusive_cpus: CpuSet,
    /// The shared pool.
    pub shared_pool: CpuSet,
    /// What the restore reported.
    pub notes: Vec<String>,
    /// Why the state cannot be saved, when it cannot.
    pub failure: Option<String>,
    /// topomgr as the container runtime's NRI plugin.
    pub nri: NriHealth,
    /// Every assignment that lost part of what it holds, as the providers
    /// reported it when they took their state back on the machine and
    /// config as they are (at start, at a reload, at a machine check). Any
    /// makes the status `degraded`. Read as empty from a daemon that
    /// predates it.
    #[serde(default)]
    pub conflicts: Vec<ConflictReport>,
}

/// An assignment that lost part of what it holds (schema
/// `ConflictReport`, in [`Health::conflicts`]): the container keeps what
/// remains, and what is missing stays its own, never offered to another,
/// until the pod is released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConflictReport {
    /// The provider that reported it.
    pub provider: String,
    /// The pod's uid.
    pub pod: String,
    /// The container's name.
    pub container: String,
    /// The resource (`cpu`, `memory`, `nvidia.com/gpu`, ...).
    pub resource: String,
    /// What is missing, in words.
    pub missing: String,
    /// The ids of what is missing (CPU or device ids; empty for amounts).
    pub ids: Vec<String>,
}

/// How topomgr stands as the container runtime's NRI plugin (schema
/// `NriHealth`, the `nri` of [`Health`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NriHealth {
    /// Whether `[nri] enabled` is set.
    pub enabled: bool,
    /// Whether topomgr is registered with the runtime now.
    pub connected: bool,
    /// The runtime's NRI socket (when enabled).
    pub socket: Option<String>,
    /// The runtime's name and version, as it told them at the last
    /// registration (`containerd 1.7.24`).
    pub runtime: Option<String>,
    /// When the connection last came up or went down (seconds since the
    /// Unix epoch).
    pub since: Option<u64>,
    /// Why topomgr is not connected, when it is not (the last attempt's
    /// error).
    pub error: Option<String>,
    /// The containers topomgr placed through NRI and follows now.
    pub containers: usize,
}

impl NriHealth {
    /// The health of a daemon without `[nri] enabled`.
    pub fn disabled() -> NriHealth {
        NriHealth {
            enabled: false,
            connected: false,
            socket: None,
            runtime: None,
            since: None,
            error: None,
            containers: 0,
        }
    }
}

impl Health {
    /// The health of a node with `pods` admitted pods: `failing` with a
    /// `failure`, else `degraded` with any note or conflict, else `ok`. The
    /// one place a status is derived (the daemon's `/v1/health`, `topomgr
    /// health --state-dir`).
    pub fn new(
        pods: usize,
        exclusive_cpus: CpuSet,
        shared_pool: CpuSet,
        notes: Vec<String>,
        failure: Option<String>,
        nri: NriHealth,
        conflicts: Vec<ConflictReport>,
    ) -> Health {
        let status = if failure.is_some() {
            HealthStatus::Failing
        } else if notes.is_empty() && conflicts.is_empty() {
            HealthStatus::Ok
        } else {
            HealthStatus::Degraded
        };
        Health {
            status,
            pods,
            exclusive_cpus,
            shared_pool,
            notes,
            failure,
            nri,
            conflicts,
        }
    }
}

/// [`Health::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Serving, nothing to report.
    Ok,
    /// Serving; the restore reported something (`notes`) or an assignment
    /// lost part of what it holds (`conflicts`).
    Degraded,
    /// The last state write failed.
    Failing,
}

/// Body of `POST /v1/pods/{uid}/containers/{container}/attach`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachRequest {
    /// The container's cgroup, relative to the cgroup root.
    pub cgroup: String,
}

/// The content type of an owned admission: `POST /v1/pods` whose body is
/// an [`AdmissionRequest`].
pub const OWNED_ADMISSION: &str = "application/vnd.topomgr.admission+json";

/// Body of an owned admission (schema `AdmissionRequest`): one pod, as
/// providers see it, and who owns it. The daemon records the owner with
/// the pod and releases the pod once the owner is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionRequest {
    /// The pod (`cpu` in millicores, `memory` and `hugepages-*` in bytes,
    /// other resources as counts; requests already defaulted from limits;
    /// its QoS class as the caller knows it).
    pub pod: PodView,
    /// Its owner.
    pub owner: OwnerSpec,
    /// Attach one of its containers in the same request, once admitted
    /// (the admission and the attach in one round trip: `topomgr run`, the
    /// OCI hook). The answer's [`Admissions::attached`] is what the attach
    /// wrote; an attach that fails releases the admission again and is the
    /// answer's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach: Option<AttachTo>,
    /// The devices the runtime gave the pod's container (the OCI hook: the
    /// bundle's `linux.devices` and `cdi.k8s.io/*` annotations). The daemon
    /// finds the CDI devices among them as the NRI face does and aligns the
    /// pod with their NUMA nodes. Absent (an older client): no devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<ContainerDevices>,
}

/// [`AdmissionRequest::devices`] (schema `AdmissionRequest.devices`): what
/// a runtime gave a container, as its OCI config says it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerDevices {
    /// Its device nodes (`linux.devices`: path, type, major, minor); a
    /// node that is a CDI device's node is that device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<DeviceNode>,
    /// Its `cdi.k8s.io/<key>` annotations (comma-separated qualified CDI
    /// device names, `vendor.com/class=name`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cdi_annotations: BTreeMap<String, String>,
    /// The device plugins' variables of its environment (`KEY=VALUE`:
    /// `NVIDIA_VISIBLE_DEVICES`, `PCIDEVICE_*`), the devices the kubelet's
    /// device plugins assigned it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}

/// The prefix of the annotations that name a container's CDI devices
/// ([`ContainerDevices::cdi_annotations`]).
pub const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

impl ContainerDevices {
    /// Whether it names no device.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.cdi_annotations.is_empty() && self.env.is_empty()
    }

    /// What is wrong, naming the field (`devices.nodes[1].type: ...`): a
    /// node with an empty or relative path or a type other than `c`, `b`,
    /// `u`, `p`; an annotation whose key is not `cdi.k8s.io/<key>`; an
    /// environment entry that is not `KEY=VALUE`.
    pub fn check(&self) -> Result<(), String> {
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.path.starts_with('/') {
                return Err(format!(
                    "devices.nodes[{i}].path: {:?} is not an absolute path",
                    n.path
                ));
            }
            if !matches!(n.kind.as_str(), "c" | "b" | "u" | "p") {
                return Err(format!(
                    "devices.nodes[{i}].type: {:?} is not c, b, u or p",
                    n.kind
                ));
            }
        }
        for key in self.cdi_annotations.keys() {
            let name = key.strip_prefix(CDI_ANNOTATION_PREFIX).unwrap_or("");
            if name.is_empty() {
                return Err(format!(
                    "devices.cdi_annotations: key {key:?} is not {CDI_ANNOTATION_PREFIX}<key>"
                ));
            }
        }
        for (i, entry) in self.env.iter().enumerate() {
            if entry.split_once('=').is_none_or(|(k, _)| k.is_empty()) {
                return Err(format!("devices.env[{i}]: {entry:?} is not KEY=VALUE"));
            }
        }
        Ok(())
    }
}

/// [`AdmissionRequest::attach`]: which container, into which cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachTo {
    /// The container's name (one of the pod's).
    pub container: String,
    /// Its cgroup, relative to the cgroup root.
    pub cgroup: String,
}

/// [`OwnerSpec::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerKind {
    /// A process (`topomgr run`, or a client admitting for itself).
    Process,
    /// A container created by a runtime.
    Container,
}

/// Who owns an admission, as the client tells it (schema `OwnerSpec`).
/// The daemon adds its boot id and, for a container, the time of the
/// admission.
///
/// - `process`: `pid` and `start_time` (field 22 of `/proc/<pid>/stat`);
/// - `container`: `runtime` and `id`; `pid` and `start_time` of its init
///   process once the runtime has one; `cgroup`, relative to the daemon's
///   cgroup root, once known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerSpec {
    /// `process` or `container`.
    pub kind: OwnerKind,
    /// The process's (or the container's init process's) pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Its start time (clock ticks after boot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// `oci-hook` or `nri` (containers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<ContainerRuntime>,
    /// The runtime's container id (containers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The container's cgroup, relative to the cgroup root (containers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
}

impl OwnerSpec {
    /// Process `pid`, started at `start_time`.
    pub fn process(pid: u32, start_time: u64) -> OwnerSpec {
        OwnerSpec {
            kind: OwnerKind::Process,
            pid: Some(pid),
            start_time: Some(start_time),
            runtime: None,
            id: None,
            cgroup: None,
        }
    }

    /// Container `id` of `runtime`.
    pub fn container(runtime: ContainerRuntime, id: &str) -> OwnerSpec {
        OwnerSpec {
            kind: OwnerKind::Container,
            pid: None,
            start_time: None,
            runtime: Some(runtime),
            id: Some(id.to_owned()),
            cgroup: None,
        }
    }

    /// With its (init) process.
    pub fn with_process(mut self, pid: u32, start_time: u64) -> OwnerSpec {
        self.pid = Some(pid);
        self.start_time = Some(start_time);
        self
    }

    /// With its cgroup (relative to the cgroup root).
    pub fn with_cgroup(mut self, cgroup: &str) -> OwnerSpec {
        self.cgroup = Some(cgroup.to_owned());
        self
    }
}

impl From<&Owner> for OwnerSpec {
    /// The owner as a client tells it (without the boot id and the time of
    /// the admission the daemon added).
    fn from(owner: &Owner) -> OwnerSpec {
        match owner {
            Owner::Process(p) => OwnerSpec::process(p.pid, p.start_time),
            Owner::Container(c) => OwnerSpec {
                kind: OwnerKind::Container,
                pid: c.pid,
                start_time: c.start_time,
                runtime: Some(c.runtime),
                id: Some(c.id.clone()),
                cgroup: c.cgroup.clone(),
            },
        }
    }
}

impl AdmissionRequest {
    /// What is wrong with the pod, naming the field (`pod.containers[1].name:
    /// ...`): empty uid, name or namespace, no app container, an empty or
    /// repeated container name, a sidecar among the app containers, a
    /// request above its limit, devices [`ContainerDevices::check`] refuses.
    pub fn check_pod(&self) -> Result<(), String> {
        let pod = &self.pod;
        for (field, value) in [
            ("uid", &pod.uid),
            ("name", &pod.name),
            ("namespace", &pod.namespace),
        ] {
            if value.is_empty() {
                return Err(format!("pod.{field}: must not be empty"));
            }
        }
        if pod.containers.is_empty() {
            return Err("pod.containers: the pod needs at least one container".into());
        }
        if let Some(d) = &self.devices {
            d.check()?;
        }
        if let Some(a) = &self.attach {
            if !pod.containers.iter().any(|c| c.name == a.container) {
                return Err(format!(
                    "attach.container: {:?} is not one of the pod's containers",
                    a.container
                ));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        let lists = [
            ("init_containers", &pod.init_containers),
            ("containers", &pod.containers),
        ];
        for (list, containers) in lists {
            for (i, c) in containers.iter().enumerate() {
                let at = format!("pod.{list}[{i}]");
                if c.name.is_empty() {
                    return Err(format!("{at}.name: must not be empty"));
                }
                if !seen.insert(c.name.as_str()) {
                    return Err(format!(
                        "{at}.name: container name {:?} is used twice in the pod",
                        c.name
                    ));
                }
                if c.sidecar && list == "containers" {
                    return Err(format!(
                        "{at}.sidecar: only init containers can be sidecars"
                    ));
                }
                for (resource, request) in &c.requests {
                    if let Some(limit) = c.limits.get(resource) {
                        if request > limit {
                            return Err(format!(
                                "{at}.requests.{resource}: {request} is above its limit {limit}"
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Containers attached to cgroups: pod uid -> container -> cgroup path
/// (relative to the cgroup root).
pub type Attachments = BTreeMap<String, BTreeMap<String, String>>;

/// What an attach wrote (schema `Attached`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attached {
    /// Pod uid.
    pub uid: String,
    /// Container name.
    pub container: String,
    /// Cgroup path relative to the cgroup root.
    pub cgroup: String,
    /// `cpuset.cpus` written.
    pub cpus: CpuSet,
    /// `cpuset.mems` written (a list, `"0-1"`).
    #[serde(with = "mask_list")]
    pub mems: NumaMask,
}

/// Every error answer of the daemon (schema `Error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong and what to do.
    pub error: String,
    /// A code (`BadManifest`, `UnknownPod`, ...; the OpenAPI document lists them).
    pub reason: String,
}

/// Decision traces in input order: `topomgr explain -o json` and a dry run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explains {
    /// One per pod.
    pub pods: Vec<Explain>,
}

/// What `topomgr merge` reads from standard input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergeRequest {
    /// The machine's NUMA node ids (checked by the command: 0..=255).
    pub numa_nodes: Vec<i64>,
    /// `null`, or node id (as a string) -> its distance row in `numa_nodes` order.
    #[serde(default)]
    pub distances: Option<BTreeMap<String, Vec<u64>>>,
    /// The policy name.
    pub policy: String,
    /// Policy options (`prefer-closest-numa-nodes`: `"true"`).
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// One entry per provider: its hints as a provider gives them.
    pub providers: Vec<ProviderHints>,
}

/// What `topomgr merge` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeDecision {
    /// The merged hint's NUMA nodes (`null`: any).
    pub affinity: Option<NumaMask>,
    /// Whether the merged hint is preferred.
    pub preferred: bool,
    /// Whether the policy admits.
    pub admit: bool,
}

/// What `topomgr provider NAME allocate` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderAllocation {
    /// CPUs (`""`: none set).
    pub cpus: CpuSet,
    /// Memory NUMA nodes as a list (`""`: none set).
    #[serde(with = "mask_list")]
    pub mems: NumaMask,
    /// Device ids by resource.
    pub devices: BTreeMap<String, Vec<String>>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
}

impl From<topomgr_sdk::Allocation> for ProviderAllocation {
    fn from(a: topomgr_sdk::Allocation) -> ProviderAllocation {
        ProviderAllocation {
            cpus: a.cpus,
            mems: a.mems,
            devices: a.devices,
            env: a.env,
        }
    }
}

/// What `topomgr provider NAME preferred` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreferredDevices {
    /// Device ids in the provider's order.
    pub devices: Vec<String>,
}

/// A [`NumaMask`] as a list string (`"0-1,3"`), the form of `cpuset.mems`.
mod mask_list {
    use serde::{Deserialize as _, Deserializer, Serializer};
    use topomgr_sdk::NumaMask;

    pub(crate) fn serialize<S: Serializer>(mask: &NumaMask, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(mask)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<NumaMask, D::Error> {
        let text = String::deserialize(d)?;
        NumaMask::parse_list(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mems_are_a_list_and_read_back() {
        let c = ContainerAdmission {
            name: "app".into(),
            affinity: Some(NumaMask::parse_list("0-1").unwrap()),
            preferred: true,
            cpus: CpuSet::parse("2-5").unwrap(),
            exclusive: true,
            mems: NumaMask::parse_list("0-1,3").unwrap(),
            devices: BTreeMap::new(),
            env: BTreeMap::new(),
        };
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(
            text,
            r#"{"name":"app","affinity":[0,1],"preferred":true,"cpus":"2-5","exclusive":true,"mems":"0-1,3","devices":{},"env":{}}"#
        );
        assert_eq!(
            serde_json::from_str::<ContainerAdmission>(&text).unwrap(),
            c
        );
        let bad = text.replace("0-1,3", "0-x");
        let err = serde_json::from_str::<ContainerAdmission>(&bad).unwrap_err();
        assert!(err.to_string().contains("0-x"), "{err}");
    }

    /// An owned admission of an older client (no `devices`) still reads;
    /// devices read, write back, and bad ones are refused naming the field.
    #[test]
    fn an_owned_admissions_devices_are_optional_and_checked() {
        let pod = PodView::new("c1", "c1", "podman", QosClass::Guaranteed)
            .with_containers(vec![topomgr_sdk::ContainerView::new("c1")]);
        let r = AdmissionRequest {
            pod,
            owner: OwnerSpec::process(1, 2),
            attach: None,
            devices: None,
        };
        let old = serde_json::to_string(&r).unwrap();
        assert!(!old.contains("devices"), "{old}");
        assert_eq!(serde_json::from_str::<AdmissionRequest>(&old).unwrap(), r);
        r.check_pod().unwrap();
        let with = format!(
            "{},{}}}",
            old.strip_suffix('}').unwrap(),
            r#""devices":{"nodes":[{"path":"/dev/infiniband/uverbs0","type":"c","major":231,"minor":192}],"cdi_annotations":{"cdi.k8s.io/test":"example.org/nic=a"}}"#
        );
        let mut r: AdmissionRequest = serde_json::from_str(&with).unwrap();
        let d = r.devices.clone().unwrap();
        assert_eq!(
            d.nodes,
            [DeviceNode::new("/dev/infiniband/uverbs0", "c", 231, 192)]
        );
        assert_eq!(serde_json::to_string(&r).unwrap(), with);
        r.check_pod().unwrap();
        let mut bad = d.clone();
        bad.nodes.push(DeviceNode::new("/dev/x", "z", 1, 3));
        r.devices = Some(bad);
        assert_eq!(
            r.check_pod().unwrap_err(),
            "devices.nodes[1].type: \"z\" is not c, b, u or p"
        );
        let mut bad = d.clone();
        bad.nodes[0].path = "dev/x".into();
        r.devices = Some(bad);
        assert_eq!(
            r.check_pod().unwrap_err(),
            "devices.nodes[0].path: \"dev/x\" is not an absolute path"
        );
        let mut bad = d.clone();
        bad.env.push("=x".into());
        r.devices = Some(bad);
        assert_eq!(
            r.check_pod().unwrap_err(),
            "devices.env[0]: \"=x\" is not KEY=VALUE"
        );
        let mut bad = d;
        bad.cdi_annotations
            .insert("vendor/x".into(), "a/b=c".into());
        r.devices = Some(bad);
        assert_eq!(
            r.check_pod().unwrap_err(),
            "devices.cdi_annotations: key \"vendor/x\" is not cdi.k8s.io/<key>"
        );
    }
}
