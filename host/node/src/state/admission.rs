//! Admission and release: [`NodeState::admit`] and its traced and owned
//! forms, [`NodeState::release`], and the owner recorded with a pod. An
//! admission that takes exclusive CPUs shrinks the shared pool before it
//! is answered (through `attachment`).

use topomgr_cgroup::pool::{self};
use topomgr_engine::admission::{
    AdmissionError, AdmitResult, AssignedDevices, UNEXPECTED_ADMISSION_ERROR,
};
use topomgr_sdk::{CpuSet, PodView};
use tracing::warn;

use super::pod_owner::Owner;
use super::{Change, NodeState, PoolMode};

/// An owned admission of a pod that is already admitted for another
/// owner (or for none).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {uid:?} is already admitted {}; it was asked for {asked}. Release it first, or admit under another uid", match .recorded { Some(o) => format!("for {o}"), None => "without an owner".to_owned() })]
pub struct OwnerConflict {
    /// Pod uid.
    pub uid: String,
    /// The owner recorded (`None`: admitted without one).
    pub recorded: Option<String>,
    /// The owner asked for.
    pub asked: String,
}

impl NodeState {
    /// Admit `pod`. When it takes exclusive CPUs, the shared pool is
    /// shrunk before this returns; if that fails the pod is released again
    /// and rejected with the cgroup named.
    pub fn admit(&mut self, pod: &PodView) -> AdmitResult {
        self.admit_traced(pod, &mut Vec::new())
    }

    /// [`NodeState::admit`], recording every decision into `trace`
    /// (see [`topomgr_engine::admission::Admitter::admit_traced`]).
    pub fn admit_traced(
        &mut self,
        pod: &PodView,
        trace: &mut Vec<topomgr_engine::admission::TraceStep>,
    ) -> AdmitResult {
        self.admit_assigned(pod, &AssignedDevices::new(), trace)
    }

    /// [`NodeState::admit_traced`] aligned with devices the pod's containers
    /// already hold ([`topomgr_engine::admission::Admitter::admit_assigned`]).
    fn admit_assigned(
        &mut self,
        pod: &PodView,
        assigned: &AssignedDevices,
        trace: &mut Vec<topomgr_engine::admission::TraceStep>,
    ) -> AdmitResult {
        let known = self.admitter.pods().contains_key(&pod.uid);
        if !known {
            // Bounded state (issue 37 item 8): refused before any provider
            // is asked, so nothing changes.
            let held = self.admitter.pods();
            let containers = held
                .values()
                .map(|r| r.pod.init_containers.len() + r.pod.containers.len())
                .sum();
            if let Some((reason, message)) = self.limits.refusal(pod, held.len(), containers) {
                return AdmitResult {
                    pod: pod.clone(),
                    admitted: false,
                    reason: Some(reason.to_owned()),
                    message: Some(message),
                    containers: Vec::new(),
                };
            }
        }
        let result = self.admitter.admit_assigned(pod, assigned, trace);
        let exclusive = result
            .containers
            .iter()
            .any(|c| !pool::is_shared(&c.allocation));
        if result.admitted && !known && !exclusive {
            self.changes
                .push(Change::Admitted(Box::new(result.clone())));
        }
        if !result.admitted || known || !exclusive {
            return result;
        }
        match self.sync_pool(PoolMode::Shrink) {
            Ok(_) => {
                self.changes
                    .push(Change::Admitted(Box::new(result.clone())));
                result
            }
            Err(e) => {
                warn!(pod = %pod.uid, error = %e, "cannot shrink the shared pool; admission rolled back");
                if let Err(err) = self.admitter.release(&pod.uid) {
                    warn!(pod = %pod.uid, error = %err, "rollback reported errors");
                }
                let cpus = result
                    .containers
                    .iter()
                    .filter(|c| !pool::is_shared(&c.allocation))
                    .fold(CpuSet::new(), |all, c| all.union(&c.allocation.cpus));
                AdmitResult {
                    pod: pod.clone(),
                    admitted: false,
                    reason: Some(UNEXPECTED_ADMISSION_ERROR.to_owned()),
                    message: Some(format!(
                        "CPUs {cpus} could not be taken out of the shared pool before the pod runs: {e}"
                    )),
                    containers: Vec::new(),
                }
            }
        }
    }

    /// Resize container `name` of admitted pod `uid` in place to its
    /// resources in `pod` ([`topomgr_engine::admission::Admitter::resize`]).
    /// CPUs it takes leave the attached shared-pool cgroups before the
    /// answer (else the resize is undone); CPUs it gives back join the
    /// pool at [`NodeState::settle_pool`], after the commit. The new
    /// record is journaled. A refusal changes nothing.
    pub fn resize(
        &mut self,
        uid: &str,
        name: &str,
        pod: PodView,
    ) -> Result<AdmitResult, topomgr_engine::admission::ResizeRefusal> {
        self.resize_traced(uid, name, pod, &mut Default::default())
    }

    /// [`NodeState::resize`], recording what was asked and each
    /// provider's answer into `trace`
    /// ([`topomgr_engine::admission::Admitter::resize_traced`]).
    pub fn resize_traced(
        &mut self,
        uid: &str,
        name: &str,
        pod: PodView,
        trace: &mut topomgr_engine::admission::ResizeTrace,
    ) -> Result<AdmitResult, topomgr_engine::admission::ResizeRefusal> {
        let before = self
            .admitter
            .pods()
            .get(uid)
            .map(|r| r.pod.clone())
            .ok_or_else(|| topomgr_engine::admission::ResizeRefusal {
                reason: UNEXPECTED_ADMISSION_ERROR.to_owned(),
                message: format!("pod {uid} is not admitted: nothing to resize"),
            })?;
        let result = self.admitter.resize_traced(uid, name, pod, trace)?;
        if let Err(e) = self.sync_pool(PoolMode::Shrink) {
            warn!(pod = %uid, error = %e, "cannot shrink the shared pool for a resize; resizing back");
            if let Err(back) = self.admitter.resize(uid, name, before) {
                warn!(pod = %uid, error = %back.message, "resizing back failed");
            }
            return Err(topomgr_engine::admission::ResizeRefusal {
                reason: UNEXPECTED_ADMISSION_ERROR.to_owned(),
                message: format!(
                    "the CPUs of container {name:?} could not be taken out of the shared pool before it runs on them: {e}"
                ),
            });
        }
        self.changes
            .push(Change::Admitted(Box::new(result.clone())));
        Ok(result)
    }

    /// Release pod `uid`: providers, ledger, its attachments and owner. The
    /// shared pool grows only at [`NodeState::settle_pool`], after the
    /// caller made the release durable.
    pub fn release(&mut self, uid: &str) -> Result<AdmitResult, AdmissionError> {
        // Released last container first, as the providers see it.
        let containers: Vec<String> = match self.admitter.pods().get(uid) {
            Some(r) => r.containers.iter().rev().map(|c| c.name.clone()).collect(),
            None => Vec::new(),
        };
        let result = self.admitter.release(uid);
        if !matches!(result, Err(AdmissionError::UnknownPod(_))) {
            self.provider_states.missed_release(uid, &containers);
            self.conflicts.released(uid);
            self.drift_restored.retain(|(u, _)| u != uid);
            self.forget(uid);
        }
        result
    }

    /// The cgroups of pod `uid`: those attached, and a container owner's
    /// own cgroup.
    pub(super) fn cgroup_paths(&self, uid: &str) -> Vec<String> {
        let mut paths: Vec<String> = self
            .records
            .attachments
            .get(uid)
            .map(|c| c.values().cloned().collect())
            .unwrap_or_default();
        if let Some(Owner::Container(c)) = self.records.owners.get(uid) {
            if let Some(cg) = &c.cgroup {
                if !paths.contains(cg) {
                    paths.push(cg.clone());
                }
            }
        }
        paths
    }

    /// Drop pod `uid`'s attachments and owner.
    pub(super) fn forget(&mut self, uid: &str) {
        self.records.attachments.remove(uid);
        self.records.owners.remove(uid);
        self.changes.push(Change::Released {
            uid: uid.to_owned(),
        });
    }

    /// Record who owns pod `uid` (replacing what was recorded).
    pub fn set_owner(&mut self, uid: &str, owner: Owner) {
        self.records.owners.insert(uid.to_owned(), owner.clone());
        self.changes.push(Change::Owner {
            uid: uid.to_owned(),
            owner,
        });
    }

    /// Admit `pod` for `owner` and record the owner with it, aligned with
    /// devices the pod's containers already hold (`assigned`, empty for
    /// none: [`topomgr_engine::admission::Admitter::admit_assigned`]). A pod already admitted answers
    /// its admission when `owner` is the one recorded for it (a retry) and
    /// changes nothing; another owner's (or none) is an [`OwnerConflict`]
    /// and changes nothing either.
    pub fn admit_owned(
        &mut self,
        pod: &PodView,
        owner: Owner,
        assigned: &AssignedDevices,
        trace: &mut Vec<topomgr_engine::admission::TraceStep>,
    ) -> Result<AdmitResult, OwnerConflict> {
        if self.admitter.pods().contains_key(&pod.uid) {
            match self.records.owners.get(&pod.uid) {
                Some(o) if o.same_as(&owner) => {}
                recorded => {
                    return Err(OwnerConflict {
                        uid: pod.uid.clone(),
                        recorded: recorded.map(ToString::to_string),
                        asked: owner.to_string(),
                    })
                }
            }
        }
        let known = self.admitter.pods().contains_key(&pod.uid);
        let result = self.admit_assigned(pod, assigned, trace);
        if result.admitted && !known {
            self.set_owner(&pod.uid, owner);
        }
        Ok(result)
    }
}
