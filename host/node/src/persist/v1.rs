//! Record schema 1: the JSON of a snapshot body ([`StateBody`], in state
//! envelopes of versions 1 to 3) and of a journal record
//! ([`JournalRecord`], in journal versions 1 and 2).
//!
//! Every name and shape here IS the file format: these types are written
//! and read as they are, and nothing else in the crate is serialized into a
//! state directory. Changing a field name, its order, or what is skipped
//! changes the bytes (the golden tests in [`super`] say so); a new field
//! needs `#[serde(default)]` so that older directories still read, and a
//! change that cannot be read by older code is a new schema module beside
//! this one.
//!
//! Field order is the order of the bytes (serde_json writes struct fields
//! in declaration order). Where a type reads leniently (unknown fields
//! ignored) or strictly (`deny_unknown_fields`), it does so as the files
//! were always read.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// A snapshot's body.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateBody {
    /// Admitted pods by uid.
    pub(crate) pods: BTreeMap<String, PodRecord>,
    /// Provider name -> hex of its checkpoint bytes.
    pub(crate) providers: BTreeMap<String, String>,
    /// Pod uid -> container -> cgroup path (relative to the cgroup root).
    #[serde(default)]
    pub(crate) attachments: BTreeMap<String, BTreeMap<String, String>>,
    /// Pod uid -> its owner (absent in version 1 envelopes).
    #[serde(default)]
    pub(crate) owners: BTreeMap<String, OwnerRecord>,
    /// Held or unconfigured provider -> the releases it has not seen.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) pending_releases: BTreeMap<String, Vec<(String, String)>>,
    /// The journal generation that continues this snapshot.
    #[serde(default)]
    pub(crate) generation: u64,
}

/// One journal record: everything one commit changed.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JournalRecord {
    /// 1 for the first record of a generation, then +1.
    pub(crate) seq: u64,
    /// The host's changes, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) changes: Vec<HostChange>,
    /// Changed providers: name -> hex of their checkpoint bytes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) providers: BTreeMap<String, String>,
    /// Changed held or absent providers: the releases they have not seen.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) pending_releases: BTreeMap<String, Vec<(String, String)>>,
}

/// One change to the host's records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum HostChange {
    /// A pod admitted, or its record rewritten: the record as it is now.
    Admitted(Box<PodRecord>),
    /// A pod released: it, its attachments and its owner are gone.
    Released { uid: String },
    /// A container attached to a cgroup.
    Attached {
        uid: String,
        container: String,
        cgroup: String,
    },
    /// An attached cgroup forgotten.
    Detached { uid: String, container: String },
    /// The owner of a pod.
    Owner { uid: String, owner: OwnerRecord },
}

/// An admitted pod: the pod as admitted and what each container received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PodRecord {
    pub(crate) pod: PodSpec,
    pub(crate) admitted: bool,
    pub(crate) reason: Option<String>,
    pub(crate) message: Option<String>,
    pub(crate) containers: Vec<ContainerRecord>,
}

/// The pod as it was admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PodSpec {
    pub(crate) uid: String,
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) qos: Qos,
    pub(crate) init_containers: Vec<ContainerSpec>,
    pub(crate) containers: Vec<ContainerSpec>,
    /// Pod-level `spec.resources`.
    #[serde(default)]
    pub(crate) resources: Option<PodResourcesSpec>,
}

/// A pod's QoS class, spelled as Kubernetes does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

/// One container of a pod: requests and limits in canonical units
/// (millicores, bytes, counts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ContainerSpec {
    pub(crate) name: String,
    pub(crate) requests: BTreeMap<String, u64>,
    pub(crate) limits: BTreeMap<String, u64>,
    #[serde(default)]
    pub(crate) sidecar: bool,
}

/// Pod-level requests and limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PodResourcesSpec {
    #[serde(default)]
    pub(crate) requests: BTreeMap<String, u64>,
    #[serde(default)]
    pub(crate) limits: BTreeMap<String, u64>,
}

/// What one container received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ContainerRecord {
    pub(crate) name: String,
    pub(crate) hint: HintRecord,
    pub(crate) allocation: AllocationRecord,
}

/// The merged topology hint stored for a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HintRecord {
    /// NUMA node ids, ascending; `None`: any node.
    pub(crate) affinity: Option<Vec<i64>>,
    pub(crate) preferred: bool,
}

/// The union of every provider's allocation for a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AllocationRecord {
    /// A Linux CPU list (`0-3,8`); empty: none set.
    #[serde(default)]
    pub(crate) cpus: String,
    #[serde(default)]
    pub(crate) exclusive: bool,
    /// NUMA node ids for the container's memory, ascending.
    #[serde(default)]
    pub(crate) mems: Vec<i64>,
    #[serde(default)]
    pub(crate) devices: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
}

/// The owner of a pod: `{"kind": "process", ...}` or `{"kind":
/// "container", ...}`. An owner written before containers could own pods
/// (`{"pid", "start_time", "boot_id"}`, no `kind`) reads as a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum OwnerRecord {
    Process(ProcessOwnerRecord),
    Container(ContainerOwnerRecord),
}

/// A process that owns a pod (`topomgr run`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProcessOwnerRecord {
    pub(crate) pid: u32,
    pub(crate) start_time: u64,
    pub(crate) boot_id: String,
}

/// A container that owns a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContainerOwnerRecord {
    pub(crate) runtime: RuntimeRecord,
    pub(crate) id: String,
    pub(crate) pid: Option<u32>,
    pub(crate) start_time: Option<u64>,
    pub(crate) boot_id: String,
    pub(crate) cgroup: Option<String>,
    pub(crate) admitted_at: u64,
}

/// The runtime face that admitted a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RuntimeRecord {
    OciHook,
    Nri,
    /// Added with pod scope under NRI: an addition, not a change, so v1
    /// still reads every state written before it; a topomgr older than it
    /// refuses a state that holds one, naming the unknown variant.
    NriSandbox,
}

/// The two shapes an owner is read in, tagged.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum TaggedOwner {
    Process(ProcessOwnerRecord),
    Container(ContainerOwnerRecord),
}

impl<'de> Deserialize<'de> for OwnerRecord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OwnerRecord, D::Error> {
        use serde::de::Error as _;
        let value = serde_json::Value::deserialize(d)?;
        if value.as_object().is_some_and(|o| o.contains_key("kind")) {
            match serde_json::from_value::<TaggedOwner>(value).map_err(D::Error::custom)? {
                TaggedOwner::Process(p) => Ok(OwnerRecord::Process(p)),
                TaggedOwner::Container(c) => Ok(OwnerRecord::Container(c)),
            }
        } else {
            serde_json::from_value::<ProcessOwnerRecord>(value)
                .map(OwnerRecord::Process)
                .map_err(D::Error::custom)
        }
    }
}
