//! Attachment, the shared pool and drift: a container's cpuset applied to
//! its cgroup ([`NodeState::attach`]), the shared pool written to every
//! shared-pool cgroup ([`NodeState::settle_pool`], `PoolMode`), the
//! cgroups checked against what they should hold
//! ([`NodeState::check_cgroups`], [`Drift`]) and removed when empty.

use topomgr_cgroup::pool::{self, PoolWrite};
use topomgr_cgroup::{CgroupError, CgroupPath, TOPOMGR_PARENT};
use topomgr_sdk::{CpuSet, NumaMask};
use tracing::{debug, info, warn};

use super::{Change, NodeState};
use crate::api::Attached;

/// An attached cgroup whose cpuset is not what topomgr wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// Pod uid.
    pub uid: String,
    /// Container name.
    pub container: String,
    /// The cgroup (relative to the cgroup root).
    pub cgroup: String,
    /// `cpuset.cpus` as found.
    pub found_cpus: CpuSet,
    /// `cpuset.mems` as found.
    pub found_mems: NumaMask,
    /// `cpuset.cpus` as topomgr gives it.
    pub cpus: CpuSet,
    /// `cpuset.mems` as topomgr gives it.
    pub mems: NumaMask,
}

/// What [`NodeState::check_cgroups`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupFinding {
    /// Someone else changed the cpuset; it was written back.
    Restored(Drift),
    /// The cpuset was changed again after it was written back (or cannot
    /// be written): it is left as found and reported.
    Fought(Drift),
    /// The cgroup is gone.
    Gone {
        /// Pod uid.
        uid: String,
        /// Container name.
        container: String,
        /// The cgroup (relative to the cgroup root).
        cgroup: String,
    },
}

impl std::fmt::Display for CgroupFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CgroupFinding::Restored(d) => write!(
                f,
                "cgroup {} of pod {:?} container {:?} had cpus {:?} mems {:?}, changed by someone else; topomgr wrote back cpus {} mems {}",
                d.cgroup, d.uid, d.container, d.found_cpus.to_string(), d.found_mems.to_string(), d.cpus, d.mems
            ),
            CgroupFinding::Fought(d) => write!(
                f,
                "cgroup {} of pod {:?} container {:?} has cpus {:?} mems {:?} instead of cpus {} mems {}, changed again after topomgr wrote it back; topomgr leaves it (another program manages this cgroup's cpuset: stop it, or release the pod with topomgr release {})",
                d.cgroup, d.uid, d.container, d.found_cpus.to_string(), d.found_mems.to_string(), d.cpus, d.mems, d.uid
            ),
            CgroupFinding::Gone { uid, container, cgroup } => write!(
                f,
                "cgroup {cgroup} of pod {uid:?} container {container:?} is gone; the pod still holds its resources until it is released (topomgr release {uid})"
            ),
        }
    }
}

/// How [`NodeState::sync_pool`] may change the shared-pool cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolMode {
    /// Only take CPUs away (before an exclusive container runs; changes
    /// that are not durable yet never give CPUs back).
    Shrink,
    /// Write the pool as the ledger has it (after the state is durable).
    Exact,
}

/// A container name the pod does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {uid:?} has no container {container:?} (containers: {known})")]
pub struct UnknownContainer {
    /// Pod uid.
    pub uid: String,
    /// Container name.
    pub container: String,
    /// The pod's containers, comma-separated.
    pub known: String,
}

/// Why a container could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// No admitted pod has that uid.
    #[error("no admitted pod with uid {0:?}")]
    UnknownPod(String),
    /// The pod has no such container.
    #[error(transparent)]
    UnknownContainer(#[from] UnknownContainer),
    /// The cgroup could not be written.
    #[error("cannot attach: {0}")]
    Cgroup(CgroupError),
}

// By hand, not `#[from]`: the message carries the cgroup error, so it is not
// also chained as the source (the binary prints each cause once).
impl From<CgroupError> for AttachError {
    fn from(e: CgroupError) -> Self {
        AttachError::Cgroup(e)
    }
}

/// Why the shared pool could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PoolError {
    /// No cgroup hierarchy under the configured root.
    #[error(transparent)]
    Hierarchy(CgroupError),
    /// Exclusive CPUs cover every online CPU while shared containers exist.
    #[error(transparent)]
    Empty(CgroupError),
    /// Some shared-pool cgroups could not be written.
    #[error("cannot write the shared CPU pool {pool} to {}", describe_failures(.failed))]
    Write {
        /// The pool.
        pool: CpuSet,
        /// The cgroups and their errors.
        failed: Vec<(CgroupPath, CgroupError)>,
    },
}

fn describe_failures(failed: &[(CgroupPath, CgroupError)]) -> String {
    failed
        .iter()
        .map(|(p, e)| format!("{} ({e})", p.as_path().display()))
        .collect::<Vec<_>>()
        .join(", ")
}

impl NodeState {
    /// Apply the cpuset of `container` of pod `uid` to the existing cgroup
    /// `cgroup` (relative to the cgroup root) and remember it.
    pub fn attach(
        &mut self,
        uid: &str,
        container: &str,
        cgroup: &str,
    ) -> Result<Attached, AttachError> {
        let pod = self
            .admitter
            .pods()
            .get(uid)
            .ok_or_else(|| AttachError::UnknownPod(uid.to_owned()))?;
        let c = pod
            .containers
            .iter()
            .find(|c| c.name == container)
            .ok_or_else(|| UnknownContainer {
                uid: uid.to_owned(),
                container: container.to_owned(),
                known: pod
                    .containers
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let allocation = c.allocation.clone();
        let path = CgroupPath::new(cgroup)?;
        let nodes = self.admitter.ledger().numa_nodes();
        let set = pool::container_cpuset(&allocation, &self.pool_now(), nodes)?;
        let lift = self.lift_cpu_quota && allocation.exclusive && !allocation.cpus.is_empty();
        let mgr = self.cgroups()?;
        let cg = mgr.open(&path)?;
        mgr.set_cpuset(&cg, &set.cpus, &set.mems)?;
        if lift {
            // As the kubelet with exclusive CPUs (kubernetes/kubernetes
            // #127525): the container's quota, and its pod cgroup's when
            // the kubelet made one.
            for p in std::iter::once(path.clone()).chain(topomgr_cgroup::kubelet_pod_cgroup(&path))
            {
                let lifted = mgr.lift_cpu_quota(&p)?;
                debug!(pod = %uid, container, cgroup = %p, ?lifted, "CFS quota of exclusive CPUs");
            }
        }
        info!(pod = %uid, container, cgroup, cpus = %set.cpus, mems = %set.mems, quota_lifted = lift, "container attached");
        self.records
            .attachments
            .entry(uid.to_owned())
            .or_default()
            .insert(container.to_owned(), cgroup.to_owned());
        self.changes.push(Change::Attached {
            uid: uid.to_owned(),
            container: container.to_owned(),
            cgroup: cgroup.to_owned(),
        });
        Ok(Attached {
            uid: uid.to_owned(),
            container: container.to_owned(),
            cgroup: cgroup.to_owned(),
            cpus: set.cpus,
            mems: set.mems,
        })
    }

    /// Verify every attached container's cgroup: its `cpuset.cpus` and
    /// `cpuset.mems` as written are what topomgr gives it now. A cpuset
    /// someone else changed is written back once ([`CgroupFinding::Restored`]);
    /// if it is changed again it is reported, not rewritten
    /// ([`CgroupFinding::Fought`]), so topomgr never fights another writer in a
    /// loop. A cgroup that is gone is reported ([`CgroupFinding::Gone`]).
    pub fn check_cgroups(&mut self) -> Vec<CgroupFinding> {
        let mut found = Vec::new();
        if self.records.attachments.is_empty() {
            return found;
        }
        let pool = self.pool_now();
        let nodes = self.admitter.ledger().numa_nodes();
        let mut expected = Vec::new();
        for (uid, containers) in &self.records.attachments {
            let Some(pod) = self.admitter.pods().get(uid) else {
                continue;
            };
            for (name, cgroup) in containers {
                let Some(c) = pod.containers.iter().find(|c| &c.name == name) else {
                    continue;
                };
                if let Ok(set) = pool::container_cpuset(&c.allocation, &pool, nodes) {
                    expected.push((uid.clone(), name.clone(), cgroup.clone(), set));
                }
            }
        }
        let already = self.drift_restored.clone();
        let mgr = match self.cgroups() {
            Ok(m) => m,
            Err(e) => {
                warn!(error = %e, "cannot verify the attached cgroups");
                return found;
            }
        };
        let mut restored = Vec::new();
        for (uid, container, cgroup, want) in expected {
            let path = match CgroupPath::new(&cgroup) {
                Ok(p) => p,
                Err(_) => continue,
            };
            let cg = match mgr.open(&path) {
                Ok(cg) => cg,
                Err(CgroupError::Missing { .. }) => {
                    found.push(CgroupFinding::Gone {
                        uid,
                        container,
                        cgroup,
                    });
                    continue;
                }
                Err(e) => {
                    warn!(pod = %uid, container, cgroup, error = %e, "cannot open an attached cgroup to verify it");
                    continue;
                }
            };
            let now = match mgr.configured(&cg) {
                Ok(now) => now,
                Err(e) => {
                    warn!(pod = %uid, container, cgroup, error = %e, "cannot read an attached cgroup's cpuset to verify it");
                    continue;
                }
            };
            if now.cpus == want.cpus && now.mems == want.mems {
                continue;
            }
            let key = (uid.clone(), container.clone());
            let drift = Drift {
                uid,
                container,
                cgroup,
                found_cpus: now.cpus,
                found_mems: now.mems,
                cpus: want.cpus.clone(),
                mems: want.mems,
            };
            if already.contains(&key) {
                warn!(pod = %drift.uid, container = %drift.container, cgroup = %drift.cgroup, "{}", CgroupFinding::Fought(drift.clone()));
                found.push(CgroupFinding::Fought(drift));
                continue;
            }
            match mgr.set_cpuset(&cg, &want.cpus, &want.mems) {
                Ok(()) => {
                    warn!(pod = %drift.uid, container = %drift.container, cgroup = %drift.cgroup, "{}", CgroupFinding::Restored(drift.clone()));
                    restored.push(key);
                    found.push(CgroupFinding::Restored(drift));
                }
                Err(e) => {
                    warn!(pod = %drift.uid, container = %drift.container, cgroup = %drift.cgroup, error = %e, "cannot restore an attached cgroup's cpuset");
                    found.push(CgroupFinding::Fought(drift));
                }
            }
        }
        self.drift_restored.extend(restored);
        found
    }

    /// The cgroups of the attached shared-pool containers.
    fn shared_members(&self) -> Vec<CgroupPath> {
        let mut out = Vec::new();
        for (uid, containers) in &self.records.attachments {
            let Some(pod) = self.admitter.pods().get(uid) else {
                continue;
            };
            for (name, path) in containers {
                let shared = pod
                    .containers
                    .iter()
                    .find(|c| &c.name == name)
                    .is_none_or(|c| pool::is_shared(&c.allocation));
                if !shared {
                    continue;
                }
                match CgroupPath::new(path) {
                    Ok(p) => out.push(p),
                    Err(e) => {
                        warn!(pod = %uid, container = %name, error = %e, "bad attached cgroup path")
                    }
                }
            }
        }
        out
    }

    /// Write the shared pool to every attached shared-pool cgroup (see
    /// [`PoolMode`]). Cgroups that are gone are forgotten (their containers
    /// ended). Returns the pool written.
    pub(crate) fn sync_pool(&mut self, mode: PoolMode) -> Result<CpuSet, PoolError> {
        let pool = match mode {
            PoolMode::Shrink => self.pool_now(),
            PoolMode::Exact => self.shared_pool(),
        };
        if self.applied_pool.as_ref() == Some(&pool) {
            return Ok(pool);
        }
        let members = self.shared_members();
        if members.is_empty() {
            self.applied_pool = Some(pool.clone());
            return Ok(pool);
        }
        if pool.is_empty() {
            let l = self.admitter.ledger();
            return Err(PoolError::Empty(CgroupError::EmptySharedPool {
                online: l.online_cpus().to_string(),
                exclusive: l.exclusive_cpus().to_string(),
            }));
        }
        let PoolWrite { gone, failed } = match self.cgroups() {
            Ok(mgr) => pool::write_pool(mgr, &pool, &members),
            Err(e) => return Err(PoolError::Hierarchy(e)),
        };
        for path in gone {
            let p = path.as_path().to_string_lossy();
            let mut dropped = Vec::new();
            for (uid, containers) in &mut self.records.attachments {
                containers.retain(|name, c| {
                    let keep = *c != p;
                    if !keep {
                        dropped.push((uid.clone(), name.clone()));
                    }
                    keep
                });
            }
            self.records.attachments.retain(|_, c| !c.is_empty());
            for (uid, container) in dropped {
                self.changes.push(Change::Detached { uid, container });
            }
            info!(cgroup = %p, "attached cgroup is gone; forgotten");
        }
        if !failed.is_empty() {
            self.applied_pool = None;
            return Err(PoolError::Write { pool, failed });
        }
        self.applied_pool = Some(pool.clone());
        Ok(pool)
    }

    /// After the state is durable: give the shared-pool cgroups the pool
    /// as the ledger has it. A failure is logged (it concerns other
    /// containers, which keep a smaller pool until the next change).
    pub fn settle_pool(&mut self) {
        if let Err(e) = self.sync_pool(PoolMode::Exact) {
            warn!(error = %e, "cannot update the shared-pool containers' cpusets");
        }
    }

    /// The processes in pod `uid`'s cgroups (`None` when that cannot be
    /// known: no cgroup hierarchy, an unreadable cgroup).
    pub fn processes(&mut self, uid: &str) -> Option<Vec<u32>> {
        let paths = self.cgroup_paths(uid);
        if paths.is_empty() {
            return Some(Vec::new());
        }
        let mgr = self.cgroups().ok()?;
        let mut pids = Vec::new();
        for p in paths {
            let path = CgroupPath::new(&p).ok()?;
            match mgr.open(&path) {
                Ok(cg) => pids.extend(mgr.procs(&cg).ok()?),
                Err(CgroupError::Missing { .. }) => {}
                Err(_) => return None,
            }
        }
        Some(pids)
    }

    /// Remove pod `uid`'s empty cgroups under `topomgr/` (those `run`
    /// created); others belong to whoever made them.
    pub fn remove_cgroups(&mut self, uid: &str) {
        let paths = self.cgroup_paths(uid);
        let Ok(mgr) = self.cgroups() else {
            return;
        };
        for p in paths {
            let Ok(path) = CgroupPath::new(&p) else {
                continue;
            };
            if path.names().next() != Some(std::ffi::OsStr::new(TOPOMGR_PARENT)) {
                continue;
            }
            if let Ok(cg) = mgr.open(&path) {
                if let Err(e) = mgr.remove(&cg, 1) {
                    warn!(cgroup = %p, error = %e, "cannot remove a reclaimed pod's cgroup");
                }
            }
        }
    }
}
