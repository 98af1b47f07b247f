//! What a container runtime tells about a container, as the one-container
//! pod topomgr admits ([`topomgr_manifest::Pod`]), with the kubelet's own
//! conversions: shared by `topomgr oci-hook` (Podman, CRI-O's hooks.d,
//! containerd's `base_runtime_spec`) and NRI (containerd, CRI-O).
//!
//! [`map_container`] takes a [`ContainerSpec`] (the runtime's container
//! id, its annotations, its pod when the runtime hands it on, the kubelet's
//! cgroup parent or the container's cgroups path, its Linux resources and
//! environment) and answers [`Mapping::Admit`] with a [`ContainerRequest`]
//! or [`Mapping::Leave`] with why topomgr leaves the container alone
//! ([`Skip`]: a pod's sandbox, opted out, or pinned by its user).
//!
//! # The pod it builds
//!
//! One container, in a pod whose uid is the runtime's container id (each
//! container is admitted on its own, in container scope; releasing it when
//! it stops gives init containers' resources back before app containers
//! start, as the kubelet's reuse does), named as its Kubernetes pod
//! (`annotations.rs`):
//!
//! - **requests and limits** from the Linux resources (`resources.rs`): CPU
//!   request from `cpu.shares`, CPU limit from quota and period, memory
//!   limit, memory request from `memory.reservation`, hugepage limits, and
//!   the extended resources of the `topomgr.io/resources` annotation. As
//!   the API server defaults them, a limit without a request is also the
//!   request (Podman's `--cpus 1 --memory 256m` is 1 CPU and 256 MiB
//!   requested and limited). A request above its limit, which Kubernetes
//!   refuses, is an error naming both;
//! - **QoS class** from the kubelet's cgroup parent (`cgroup_parent.rs`),
//!   which knows the whole pod (a container of a Burstable pod may on its
//!   own look Guaranteed); without one (Podman), derived from the
//!   container's requests and limits as Kubernetes derives it
//!   (`pkg/apis/core/v1/helper/qos`, [`topomgr_manifest::one_container_qos`]);
//! - **devices** the device plugins already assigned, from its
//!   environment (`devices.rs`), for the providers that know them; and,
//!   found apart by [`cdi_devices`] (it reads files), the CDI devices it
//!   was given (`cdi.rs`), each with its nodes and the PCI devices sysfs
//!   says they are (`device_node.rs`).
//!
//! A container whose spec sets `linux.resources.cpu.cpus` was pinned by
//! its user (`podman run --cpuset-cpus`) and is left alone.

mod annotations;
pub mod cdi;
mod cgroup_parent;
pub mod device_node;
mod devices;
pub mod dra;
mod resources;

use std::collections::BTreeMap;

use topomgr_manifest::Pod;
use topomgr_sdk::{ContainerView, PodResources, PodView, QosClass, ResourceList};

pub use annotations::{Identity, IdentitySource, PodSandbox};
pub use devices::{kubelet_devices, AssignedDevices, DeviceId, ResourceHint};
pub use resources::{HugepageLimit, LinuxCpu, LinuxMemory, LinuxResources};

/// Why a container's spec cannot be mapped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    /// A `topomgr.io/…` annotation that does not parse.
    #[error("annotation {key}={value:?} {problem}")]
    Annotation {
        /// The annotation.
        key: &'static str,
        /// Its value.
        value: String,
        /// What is wrong and what to write.
        problem: String,
    },
    /// A device plugin's variable that does not parse.
    #[error("environment variable {variable}={value:?}: {problem}")]
    Environment {
        /// The variable.
        variable: String,
        /// Its value.
        value: String,
        /// What is wrong.
        problem: String,
    },
    /// A request above its limit (Kubernetes refuses those).
    #[error("{what} requests {request} but is limited to {limit}; a request cannot be above its limit ({remedy})")]
    RequestAboveLimit {
        /// The resource and where the request comes from.
        what: String,
        /// The request.
        request: String,
        /// The limit.
        limit: String,
        /// What to change.
        remedy: &'static str,
    },
    /// A hugepage limit whose page size does not parse.
    #[error("linux.resources.hugepageLimits: page size {0:?} is not a size such as 2MB or 1GB")]
    PageSize(String),
}

/// A container as its runtime tells it.
#[derive(Debug, Clone, Copy)]
pub struct ContainerSpec<'a> {
    /// The runtime's container id.
    pub id: &'a str,
    /// The container's name, when the runtime tells it (NRI).
    pub name: Option<&'a str>,
    /// The container's annotations.
    pub annotations: &'a BTreeMap<String, String>,
    /// Its pod, when the runtime hands it on (NRI).
    pub sandbox: Option<&'a PodSandbox>,
    /// The kubelet's cgroup parent of its pod, or the container's cgroups
    /// path (`linux.cgroupsPath`); the sandbox's cgroup parent is used when
    /// this is `None`.
    pub cgroup_parent: Option<&'a str>,
    /// Its Linux resources.
    pub resources: &'a LinuxResources,
    /// Its environment (`KEY=VALUE`).
    pub env: &'a [String],
}

/// What topomgr does with a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapping {
    /// Admit this.
    Admit(Box<ContainerRequest>),
    /// Leave it alone.
    Leave(Skip),
}

/// Why topomgr leaves a container alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// A pod's sandbox (pause) container.
    Sandbox,
    /// It carries `topomgr.io/opt-out: "true"`.
    OptedOut,
    /// Its user pinned it (`linux.resources.cpu.cpus`).
    Pinned {
        /// The CPUs it was pinned to.
        cpus: String,
    },
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::Sandbox => f.write_str("a pod's sandbox container"),
            Skip::OptedOut => write!(f, "opted out ({}: \"true\")", annotations::OPT_OUT),
            Skip::Pinned { cpus } => write!(f, "pinned by its user to CPUs {cpus}"),
        }
    }
}

/// Where a [`ContainerRequest`]'s QoS class comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosSource {
    /// The kubelet's cgroup parent.
    CgroupParent,
    /// The container's requests and limits.
    Derived,
    /// The kubelet's cgroup parent says Guaranteed, but the container's own
    /// CPU request is below its limit: the pod is Guaranteed through
    /// pod-level resources (KEP-2837), which the kubelet's static CPU and
    /// memory managers skip (kubernetes/kubernetes #133279: no exclusive
    /// CPUs, no pinned memory; the CPU manager allocates for such pods only
    /// under the alpha gate `PodLevelResourceManagers`, off by default).
    /// Admitted as Burstable, so that the providers give it the shared pool
    /// as the kubelet would.
    PodLevelResources,
}

/// A container to admit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRequest {
    /// The one-container pod (uid: the runtime's container id).
    pub pod: Pod,
    /// Who the container is.
    pub identity: Identity,
    /// Where its QoS class comes from.
    pub qos_source: QosSource,
    /// Devices its device plugins already assigned.
    pub devices: Vec<AssignedDevices>,
}

/// The device nodes that tell a privileged container: it is given every
/// node of the host, so its nodes say nothing of the devices it uses.
const PRIVILEGED_NODES: [&str; 2] = ["/dev/kmsg", "/dev/mem"];

/// The CDI devices of a container with `annotations`, device nodes
/// `nodes` (its `linux.devices`) and the CDI device names `claimed` of its
/// DRA claims (the kubelet's PodResources `Get`; empty where not asked),
/// as the specs `specs` define them, each
/// with the PCI devices sysfs under `sysfs_root` says its nodes are (see
/// [`cdi`]); and notes on what could not be used (a name no spec defines,
/// a malformed annotation, a privileged container's nodes). A node of no
/// CDI device is not used: the runtime gives every container some nodes
/// (a privileged one all of them), and only a CDI device says a workload
/// asked for one.
pub fn cdi_devices(
    annotations: &BTreeMap<String, String>,
    nodes: &[topomgr_sdk::DeviceNode],
    claimed: &[String],
    specs: &cdi::CdiSpecs,
    sysfs_root: &std::path::Path,
) -> (Vec<AssignedDevices>, Vec<String>) {
    let (names, mut notes) = cdi::annotated_names(annotations);
    let mut found: Vec<&cdi::CdiDevice> = Vec::new();
    for name in &names {
        match specs.device(name) {
            Some(d) => found.push(d),
            None => notes.push(format!(
                "CDI device {name} (annotation {}*) is defined by no spec in the CDI directories",
                cdi::ANNOTATION_PREFIX
            )),
        }
    }
    for name in claimed {
        if !cdi::is_qualified(name) {
            notes.push(format!(
                "the kubelet's DRA claim gives {name:?}, not a qualified CDI device name (vendor.com/class=name)"
            ));
            continue;
        }
        match specs.device(name) {
            Some(d) if found.iter().any(|f| f.name == d.name) => {}
            Some(d) => found.push(d),
            None => notes.push(format!(
                "CDI device {name} (the kubelet's DRA claim) is defined by no spec in the CDI directories"
            )),
        }
    }
    if nodes
        .iter()
        .any(|n| PRIVILEGED_NODES.contains(&n.path.as_str()))
    {
        notes.push(format!(
            "the container has {} (privileged: every host device): its device nodes are not taken for CDI devices",
            PRIVILEGED_NODES.join(" or ")
        ));
    } else {
        for n in nodes {
            if let Some(d) = specs.device_with_node(n) {
                if !found.iter().any(|f| f.name == d.name) {
                    found.push(d);
                }
            }
        }
    }
    let out = found
        .into_iter()
        .map(|d| {
            let mut ids: Vec<DeviceId> = Vec::new();
            for n in &d.nodes {
                for a in device_node::pci_addresses(sysfs_root, n) {
                    let id = DeviceId::PciAddress(a);
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
            }
            AssignedDevices {
                variable: format!("CDI device {}", d.name),
                resource: ResourceHint::Cdi,
                ids,
                nodes: d.nodes.clone(),
            }
        })
        .collect();
    (out, notes)
}

/// The devices the device plugins' variables of `env` (`KEY=VALUE`:
/// `NVIDIA_VISIBLE_DEVICES`, `PCIDEVICE_*`) name, as [`map_container`]
/// reads them into [`ContainerRequest::devices`]; for a face that is
/// handed the variables apart (the daemon's owned admissions).
pub fn env_devices(env: &[String]) -> Result<Vec<AssignedDevices>, MappingError> {
    devices::assigned_devices(env)
}

/// Whether `path` is a pod cgroup parent (or a container's cgroups path)
/// of the kubelet, of either cgroup driver.
pub fn is_kubelet_cgroup(path: &str) -> bool {
    cgroup_parent::kubelet_cgroup(path).is_some()
}

/// What topomgr does with the container `spec` describes.
pub fn map_container(spec: &ContainerSpec<'_>) -> Result<Mapping, MappingError> {
    let pod_annotations = spec.sandbox.map(|s| &s.annotations);
    if annotations::is_sandbox(spec.annotations) {
        return Ok(Mapping::Leave(Skip::Sandbox));
    }
    if annotations::opted_out(spec.annotations, pod_annotations)? {
        return Ok(Mapping::Leave(Skip::OptedOut));
    }
    let cpu = spec.resources.cpu.clone().unwrap_or_default();
    if let Some(cpus) = cpu.cpus.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
        return Ok(Mapping::Leave(Skip::Pinned {
            cpus: cpus.to_owned(),
        }));
    }
    let (requests, limits) = requests_and_limits(spec)?;
    let parent = spec
        .cgroup_parent
        .or_else(|| spec.sandbox.and_then(|s| s.cgroup_parent.as_deref()))
        .and_then(cgroup_parent::kubelet_cgroup);
    let (qos, qos_source) = match &parent {
        Some(p) if p.qos == QosClass::Guaranteed && cpu_limit_above_request(&requests, &limits) => {
            (QosClass::Burstable, QosSource::PodLevelResources)
        }
        Some(p) => (p.qos, QosSource::CgroupParent),
        None => (
            topomgr_manifest::one_container_qos(&requests, &limits),
            QosSource::Derived,
        ),
    };
    let mut identity = annotations::identity(spec.id, spec.name, spec.annotations, spec.sandbox);
    if identity.pod_uid.is_none() {
        identity.pod_uid = parent.map(|p| p.pod_uid);
    }
    let devices = devices::assigned_devices(spec.env)?;
    let view =
        PodView::new(spec.id, &identity.pod_name, &identity.namespace, qos).with_containers(vec![
            ContainerView::new(&identity.container)
                .with_requests(requests.clone())
                .with_limits(limits.clone()),
        ]);
    Ok(Mapping::Admit(Box::new(ContainerRequest {
        pod: Pod {
            view,
            effective: PodResources::new(requests, limits),
        },
        identity,
        qos_source,
        devices,
    })))
}

/// Whether the container's CPU limit is above its request: never so in a
/// pod that is Guaranteed by its containers (each sets equal requests and
/// limits), so a Guaranteed pod's container that shows it takes its class
/// from pod-level resources (the kubelet writes the pod's CPU limit as the
/// quota of a container that sets none, `getCPULimit` in
/// `kuberuntime_container_linux.go`). A limit at the kubelet's smallest
/// quota (10m) may be a raised one and says nothing. Without a CFS quota
/// (the kubelet's `cpuCFSQuota: false`) there is no limit and nothing is
/// concluded; nor when the container itself sets equal requests and
/// limits inside such a pod: NRI carries no sign of pod-level resources
/// but the sandbox's resources, which are otherwise the sum of its
/// containers.
fn cpu_limit_above_request(requests: &ResourceList, limits: &ResourceList) -> bool {
    let min_limit = resources::quota_to_millicpu(Some(resources::MIN_QUOTA), None).unwrap_or(0);
    match (requests.get("cpu"), limits.get("cpu")) {
        (Some(r), Some(l)) => *l > min_limit && r < l,
        _ => false,
    }
}

/// The container's requests (defaulted from limits) and limits.
fn requests_and_limits(
    spec: &ContainerSpec<'_>,
) -> Result<(ResourceList, ResourceList), MappingError> {
    let r = spec.resources;
    let cpu = r.cpu.clone().unwrap_or_default();
    let memory = r.memory.clone().unwrap_or_default();
    let mut requests = ResourceList::new();
    let mut limits = ResourceList::new();

    if let Some(m) = resources::quota_to_millicpu(cpu.quota, cpu.period).filter(|m| *m > 0) {
        limits.insert("cpu".to_owned(), m);
    }
    if let Some(m) = cpu
        .shares
        .map(resources::shares_to_millicpu)
        .filter(|m| *m > 0)
    {
        requests.insert("cpu".to_owned(), m);
    }
    let positive = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok()).filter(|v| *v > 0);
    if let Some(bytes) = positive(memory.limit) {
        limits.insert("memory".to_owned(), bytes);
    }
    if let Some(bytes) = positive(memory.reservation) {
        requests.insert("memory".to_owned(), bytes);
    }
    for h in r.hugepage_limits.iter().flatten() {
        let name = resources::hugepage_resource(&h.page_size)
            .ok_or_else(|| MappingError::PageSize(h.page_size.clone()))?;
        if h.limit > 0 {
            limits.insert(name.clone(), h.limit);
            requests.insert(name, h.limit);
        }
    }
    let pod_annotations = spec.sandbox.map(|s| &s.annotations);
    for (name, count) in annotations::extended_resources(spec.annotations, pod_annotations)? {
        limits.insert(name.clone(), count);
        requests.insert(name, count);
    }
    // API defaulting: a limit without a request is the request too.
    for (name, limit) in &limits {
        requests.entry(name.clone()).or_insert(*limit);
    }
    for (name, what, remedy) in [
        (
            "cpu",
            "CPU (cpu.shares)",
            "lower the CPU shares (podman --cpu-shares) or raise the CPU limit (--cpus)",
        ),
        (
            "memory",
            "memory (memory.reservation)",
            "lower the memory reservation (podman --memory-reservation) or raise the limit (--memory)",
        ),
    ] {
        if let (Some(request), Some(limit)) = (requests.get(name), limits.get(name)) {
            if request > limit {
                let show = |v: u64| {
                    if name == "cpu" {
                        format!("{v}m")
                    } else {
                        format!("{v} bytes")
                    }
                };
                return Err(MappingError::RequestAboveLimit {
                    what: what.to_owned(),
                    request: show(*request),
                    limit: show(*limit),
                    remedy,
                });
            }
        }
    }
    Ok((requests, limits))
}

#[cfg(test)]
mod tests;
