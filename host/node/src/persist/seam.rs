//! The one seam between the record schema ([`super::v1`]) and the types
//! the node works with: the engine's [`AdmitResult`], the SDK's pod,
//! hint and allocation types, [`Owner`], [`Change`], and the snapshot
//! body and journal record in memory ([`Body`], [`Record`]). Every
//! conversion in and out of a state directory is here, and nowhere else.
//!
//! Writing cannot fail; reading fails on what the schema carries as text
//! or numbers that the node's types refuse (a CPU list that does not
//! parse, a NUMA node id out of range), naming where.

use std::collections::BTreeMap;

use topomgr_engine::admission::{AdmitResult, ContainerResult};
use topomgr_sdk::{
    Allocation, ContainerView, CpuSet, NumaMask, PodResources, PodView, QosClass, TopologyHint,
};

use super::{v1, Body, Record};
use crate::state::pod_owner::{ContainerOwner, ContainerRuntime, Owner, ProcessOwner};
use crate::state::Change;

/// A record that parses as JSON but holds a value the node refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct FormatError(pub(crate) String);

fn mask_ids(mask: NumaMask) -> Vec<i64> {
    mask.iter().map(|n| i64::from(n.get())).collect()
}

fn mask_of(ids: Vec<i64>, what: impl FnOnce() -> String) -> Result<NumaMask, FormatError> {
    NumaMask::from_nodes(ids).map_err(|e| FormatError(format!("{}: {e}", what())))
}

impl From<&Body> for v1::StateBody {
    fn from(b: &Body) -> Self {
        v1::StateBody {
            pods: b
                .pods
                .iter()
                .map(|(uid, r)| (uid.clone(), r.into()))
                .collect(),
            providers: b.providers.clone(),
            attachments: b.attachments.clone(),
            owners: b
                .owners
                .iter()
                .map(|(uid, o)| (uid.clone(), o.into()))
                .collect(),
            pending_releases: b.pending_releases.clone(),
            generation: b.generation,
        }
    }
}

impl TryFrom<v1::StateBody> for Body {
    type Error = FormatError;

    fn try_from(b: v1::StateBody) -> Result<Self, FormatError> {
        let pods = b
            .pods
            .into_iter()
            .map(|(uid, r)| Ok((uid, AdmitResult::try_from(r)?)))
            .collect::<Result<BTreeMap<_, _>, FormatError>>()?;
        Ok(Body {
            pods,
            providers: b.providers,
            attachments: b.attachments,
            owners: b
                .owners
                .into_iter()
                .map(|(uid, o)| (uid, o.into()))
                .collect(),
            pending_releases: b.pending_releases,
            generation: b.generation,
        })
    }
}

impl From<&Record> for v1::JournalRecord {
    fn from(r: &Record) -> Self {
        v1::JournalRecord {
            seq: r.seq,
            changes: r.changes.iter().map(Into::into).collect(),
            providers: r.providers.clone(),
            pending_releases: r.pending_releases.clone(),
        }
    }
}

impl TryFrom<v1::JournalRecord> for Record {
    type Error = FormatError;

    fn try_from(r: v1::JournalRecord) -> Result<Self, FormatError> {
        Ok(Record {
            seq: r.seq,
            changes: r
                .changes
                .into_iter()
                .map(Change::try_from)
                .collect::<Result<_, _>>()?,
            providers: r.providers,
            pending_releases: r.pending_releases,
        })
    }
}

impl From<&Change> for v1::HostChange {
    fn from(c: &Change) -> Self {
        match c {
            Change::Admitted(r) => v1::HostChange::Admitted(Box::new(r.as_ref().into())),
            Change::Released { uid } => v1::HostChange::Released { uid: uid.clone() },
            Change::Attached {
                uid,
                container,
                cgroup,
            } => v1::HostChange::Attached {
                uid: uid.clone(),
                container: container.clone(),
                cgroup: cgroup.clone(),
            },
            Change::Detached { uid, container } => v1::HostChange::Detached {
                uid: uid.clone(),
                container: container.clone(),
            },
            Change::Owner { uid, owner } => v1::HostChange::Owner {
                uid: uid.clone(),
                owner: owner.into(),
            },
        }
    }
}

impl TryFrom<v1::HostChange> for Change {
    type Error = FormatError;

    fn try_from(c: v1::HostChange) -> Result<Self, FormatError> {
        Ok(match c {
            v1::HostChange::Admitted(r) => Change::Admitted(Box::new((*r).try_into()?)),
            v1::HostChange::Released { uid } => Change::Released { uid },
            v1::HostChange::Attached {
                uid,
                container,
                cgroup,
            } => Change::Attached {
                uid,
                container,
                cgroup,
            },
            v1::HostChange::Detached { uid, container } => Change::Detached { uid, container },
            v1::HostChange::Owner { uid, owner } => Change::Owner {
                uid,
                owner: owner.into(),
            },
        })
    }
}

impl From<&AdmitResult> for v1::PodRecord {
    fn from(r: &AdmitResult) -> Self {
        v1::PodRecord {
            pod: (&r.pod).into(),
            admitted: r.admitted,
            reason: r.reason.clone(),
            message: r.message.clone(),
            containers: r
                .containers
                .iter()
                .map(|c| v1::ContainerRecord {
                    name: c.name.clone(),
                    hint: v1::HintRecord {
                        affinity: c.hint.affinity.map(mask_ids),
                        preferred: c.hint.preferred,
                    },
                    allocation: (&c.allocation).into(),
                })
                .collect(),
        }
    }
}

impl TryFrom<v1::PodRecord> for AdmitResult {
    type Error = FormatError;

    fn try_from(r: v1::PodRecord) -> Result<Self, FormatError> {
        let uid = r.pod.uid.clone();
        let containers = r
            .containers
            .into_iter()
            .map(|c| {
                let at = |field: &str| format!("pod {uid:?} container {:?}: {field}", c.name);
                let affinity = match c.hint.affinity {
                    Some(ids) => Some(mask_of(ids, || at("hint affinity"))?),
                    None => None,
                };
                let a = c.allocation;
                let mut allocation = Allocation::default();
                allocation.cpus = CpuSet::parse(&a.cpus)
                    .map_err(|e| FormatError(format!("{}: {e}", at("allocated CPUs"))))?;
                allocation.exclusive = a.exclusive;
                allocation.mems = mask_of(a.mems, || at("allocated memory nodes"))?;
                allocation.devices = a.devices;
                allocation.env = a.env;
                Ok(ContainerResult {
                    name: c.name,
                    hint: TopologyHint {
                        affinity,
                        preferred: c.hint.preferred,
                    },
                    allocation,
                })
            })
            .collect::<Result<Vec<_>, FormatError>>()?;
        Ok(AdmitResult {
            pod: r.pod.into(),
            admitted: r.admitted,
            reason: r.reason,
            message: r.message,
            containers,
        })
    }
}

impl From<&Allocation> for v1::AllocationRecord {
    fn from(a: &Allocation) -> Self {
        v1::AllocationRecord {
            cpus: a.cpus.to_string(),
            exclusive: a.exclusive,
            mems: mask_ids(a.mems),
            devices: a.devices.clone(),
            env: a.env.clone(),
        }
    }
}

fn container_spec(c: &ContainerView) -> v1::ContainerSpec {
    v1::ContainerSpec {
        name: c.name.clone(),
        requests: c.requests.clone(),
        limits: c.limits.clone(),
        sidecar: c.sidecar,
    }
}

fn container_view(c: v1::ContainerSpec) -> ContainerView {
    ContainerView::new(c.name)
        .with_requests(c.requests)
        .with_limits(c.limits)
        .with_sidecar(c.sidecar)
}

impl From<&PodView> for v1::PodSpec {
    fn from(p: &PodView) -> Self {
        v1::PodSpec {
            uid: p.uid.clone(),
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            qos: match p.qos {
                QosClass::Guaranteed => v1::Qos::Guaranteed,
                QosClass::Burstable => v1::Qos::Burstable,
                QosClass::BestEffort => v1::Qos::BestEffort,
            },
            init_containers: p.init_containers.iter().map(container_spec).collect(),
            containers: p.containers.iter().map(container_spec).collect(),
            resources: p.resources.as_ref().map(|r| v1::PodResourcesSpec {
                requests: r.requests.clone(),
                limits: r.limits.clone(),
            }),
        }
    }
}

impl From<v1::PodSpec> for PodView {
    fn from(p: v1::PodSpec) -> Self {
        let qos = match p.qos {
            v1::Qos::Guaranteed => QosClass::Guaranteed,
            v1::Qos::Burstable => QosClass::Burstable,
            v1::Qos::BestEffort => QosClass::BestEffort,
        };
        PodView::new(p.uid, p.name, p.namespace, qos)
            .with_init_containers(p.init_containers.into_iter().map(container_view).collect())
            .with_containers(p.containers.into_iter().map(container_view).collect())
            .with_resources(p.resources.map(|r| PodResources::new(r.requests, r.limits)))
    }
}

impl From<&Owner> for v1::OwnerRecord {
    fn from(o: &Owner) -> Self {
        match o {
            Owner::Process(p) => v1::OwnerRecord::Process(v1::ProcessOwnerRecord {
                pid: p.pid,
                start_time: p.start_time,
                boot_id: p.boot_id.clone(),
            }),
            Owner::Container(c) => v1::OwnerRecord::Container(v1::ContainerOwnerRecord {
                runtime: match c.runtime {
                    ContainerRuntime::OciHook => v1::RuntimeRecord::OciHook,
                    ContainerRuntime::Nri => v1::RuntimeRecord::Nri,
                    ContainerRuntime::NriSandbox => v1::RuntimeRecord::NriSandbox,
                },
                id: c.id.clone(),
                pid: c.pid,
                start_time: c.start_time,
                boot_id: c.boot_id.clone(),
                cgroup: c.cgroup.clone(),
                admitted_at: c.admitted_at,
            }),
        }
    }
}

impl From<v1::OwnerRecord> for Owner {
    fn from(o: v1::OwnerRecord) -> Self {
        match o {
            v1::OwnerRecord::Process(p) => Owner::Process(ProcessOwner {
                pid: p.pid,
                start_time: p.start_time,
                boot_id: p.boot_id,
            }),
            v1::OwnerRecord::Container(c) => Owner::Container(ContainerOwner {
                runtime: match c.runtime {
                    v1::RuntimeRecord::OciHook => ContainerRuntime::OciHook,
                    v1::RuntimeRecord::Nri => ContainerRuntime::Nri,
                    v1::RuntimeRecord::NriSandbox => ContainerRuntime::NriSandbox,
                },
                id: c.id,
                pid: c.pid,
                start_time: c.start_time,
                boot_id: c.boot_id,
                cgroup: c.cgroup,
                admitted_at: c.admitted_at,
            }),
        }
    }
}
