//! The JSON contract of the CLI and the daemon (SPEC section 6,
//! `docs/api/openapi.yaml`): one serde type per answer.
//!
//! The daemon's handlers serialize these types, the CLI prints them (as
//! JSON, or as tables built from the typed values), the daemon client
//! (`topomgr_daemon::client::Response::parse`) deserializes answers into
//! them, and the tests check them against the OpenAPI document: every
//! captured answer reads into its type and writes back to the same JSON, and
//! each component schema's properties and required list equal the type's
//! fields. Field order is the order the JSON is printed in.
//!
//! | answer | type |
//! |---|---|
//! | `topomgr admit`, `POST /v1/pods` | [`Admissions`] of [`Admission`] |
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
//! | `GET /v1/noderesourcetopology`, `topomgr export nrt` | [`NodeResourceTopology`] (the Kubernetes object [`crate::nrt`] builds; its schema is the CRD's) |
//!
//! `topomgr provider NAME hints` prints [`topomgr_sdk::ProviderHints`] as
//! they are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use topomgr_sdk::{CpuSet, NumaMask, ProviderHints, QosClass};

use topomgr_engine::admission::AdmitResult;

pub use crate::nrt::NodeResourceTopology;
pub use topomgr_engine::explain::{Explain, ExplainStep, MergeSummary};
pub use topomgr_sdk::Machine;

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

impl From<&AdmitResult> for Admission {
    fn from(r: &AdmitResult) -> Admission {
        Admission {
            uid: r.pod.uid.clone(),
            name: r.pod.name.clone(),
            namespace: r.pod.namespace.clone(),
            qos: r.pod.qos,
            admitted: r.admitted,
            reason: r.reason.clone(),
            message: r.message.clone(),
            containers: r
                .containers
                .iter()
                .map(|c| ContainerAdmission {
                    name: c.name.clone(),
                    affinity: c.hint.affinity,
                    preferred: c.hint.preferred,
                    cpus: c.allocation.cpus.clone(),
                    exclusive: c.allocation.exclusive,
                    mems: c.allocation.mems,
                    devices: c.allocation.devices.clone(),
                    env: c.allocation.env.clone(),
                })
                .collect(),
        }
    }
}

/// Admissions in input order (schema `Admissions`): `topomgr admit` and
/// `POST /v1/pods`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admissions {
    /// One per pod.
    pub pods: Vec<Admission>,
}

/// The daemon's admitted pods (schema `PodList`, `GET /v1/pods`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodList {
    /// Every admitted pod, in uid order.
    pub pods: Vec<Admission>,
    /// Pod uid -> container -> cgroup path (relative to the cgroup root).
    pub attachments: Attachments,
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
}

/// [`Health::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Serving, nothing to report.
    Ok,
    /// Serving; the restore reported something.
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

    pub fn serialize<S: Serializer>(mask: &NumaMask, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(mask)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<NumaMask, D::Error> {
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
}
