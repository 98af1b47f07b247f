//! Reclaim: the release of every pod whose owner is gone
//! ([`NodeState::reclaim`], the rules in the room's "Owners"), and a
//! container the OCI hook admitted but never attached within
//! [`ATTACH_TIMEOUT`].

use std::time::Duration;

use tracing::{debug, info, warn};

use super::pod_owner::{ContainerRuntime, Owner};
use super::NodeState;

/// How long a container admitted by `topomgr oci-hook` may stay
/// unattached before [`NodeState::reclaim`] releases it: the hook attaches
/// right after its admission, under a deadline far shorter than this.
pub(crate) const ATTACH_TIMEOUT: Duration = Duration::from_secs(120);

/// Why [`NodeState::reclaim`] released a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReclaimCause {
    /// Its owner is gone and its cgroups are empty or gone.
    OwnerGone,
    /// A hook's admission was never attached within `ATTACH_TIMEOUT` (120 s).
    NeverAttached,
}

impl ReclaimCause {
    /// The metric label (`owner_gone`, `never_attached`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReclaimCause::OwnerGone => "owner_gone",
            ReclaimCause::NeverAttached => "never_attached",
        }
    }
}

/// What [`NodeState::reclaim`] did with one pod whose owner is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reclaim {
    /// Released.
    Released {
        /// Pod uid.
        uid: String,
        /// Its owner.
        owner: Owner,
        /// Why.
        cause: ReclaimCause,
    },
    /// Kept: the owner is gone but processes are still in its cgroups.
    Kept {
        /// Pod uid.
        uid: String,
        /// Its owner.
        owner: Owner,
        /// The processes left.
        pids: Vec<u32>,
    },
}

impl std::fmt::Display for Reclaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reclaim::Released {
                uid,
                owner,
                cause: ReclaimCause::OwnerGone,
            } => write!(
                f,
                "pod {uid:?} of {owner}, which is gone, was released (its cgroups were empty or gone)"
            ),
            Reclaim::Released {
                uid,
                owner,
                cause: ReclaimCause::NeverAttached,
            } => write!(
                f,
                "pod {uid:?} of {owner} was released: it was never attached to a cgroup within {} s of its admission",
                ATTACH_TIMEOUT.as_secs()
            ),
            Reclaim::Kept { uid, owner, pids } => write!(
                f,
                "pod {uid:?}: its owner {owner} is gone but processes {pids:?} remain in its cgroups; it stays held until they exit"
            ),
        }
    }
}

impl NodeState {
    /// Release every pod whose owner is gone (see the module's "Owners"),
    /// now; keep (and report) those with processes left in their cgroups.
    pub fn reclaim(&mut self) -> Vec<Reclaim> {
        self.reclaim_at(crate::state::pod_owner::unix_now(), ATTACH_TIMEOUT)
    }

    /// [`NodeState::reclaim`] at `now` (seconds since the Unix epoch) with
    /// `attach_timeout` for hook admissions that were never attached.
    pub(crate) fn reclaim_at(&mut self, now: u64, attach_timeout: Duration) -> Vec<Reclaim> {
        let boot = self.boot_id.clone();
        let mut candidates: Vec<(String, Owner, ReclaimCause)> = Vec::new();
        for (uid, owner) in &self.records.owners {
            let cause = match owner {
                Owner::Process(p) if !crate::state::pod_owner::is_alive(p, &boot) => {
                    Some(ReclaimCause::OwnerGone)
                }
                Owner::Process(_) => None,
                Owner::Container(c) if crate::state::pod_owner::process_ended(c, &boot) => {
                    Some(ReclaimCause::OwnerGone)
                }
                Owner::Container(c) => {
                    let attached = self
                        .records
                        .attachments
                        .get(uid)
                        .is_some_and(|a| !a.is_empty());
                    let late = now.saturating_sub(c.admitted_at) >= attach_timeout.as_secs();
                    (c.runtime == ContainerRuntime::OciHook && !attached && late)
                        .then_some(ReclaimCause::NeverAttached)
                }
            };
            if let Some(cause) = cause {
                candidates.push((uid.clone(), owner.clone(), cause));
            }
        }
        let mut out = Vec::new();
        for (uid, owner, cause) in candidates {
            if !self.admitter.pods().contains_key(&uid) {
                self.forget(&uid);
                continue;
            }
            let pids = match cause {
                // The container runs unplaced: nothing of it is topomgr's.
                ReclaimCause::NeverAttached => Some(Vec::new()),
                ReclaimCause::OwnerGone => self.processes(&uid),
            };
            match pids {
                Some(pids) if pids.is_empty() => {
                    self.remove_cgroups(&uid);
                    if let Err(e) = self.release(&uid) {
                        warn!(pod = %uid, error = %e, "reclaimed pod released with errors");
                    }
                    let r = Reclaim::Released { uid, owner, cause };
                    info!(reclaimed = %r, "pod reclaimed");
                    out.push(r);
                }
                Some(pids) => {
                    let r = Reclaim::Kept { uid, owner, pids };
                    debug!(kept = %r, "owner is gone but processes remain");
                    out.push(r);
                }
                None => {
                    warn!(pod = %uid, %owner, "owner is gone but its cgroups cannot be read; kept");
                }
            }
        }
        out
    }

    /// Who holds the exclusive CPUs, one line each, for refusal messages:
    /// the pod, container, CPUs, and for `topomgr run` pods the owner and
    /// the processes in its cgroup.
    pub fn exclusive_holders(&mut self) -> Vec<String> {
        let l = self.admitter.ledger();
        let held = l.holders_of(&l.exclusive_cpus().clone());
        let mut lines = Vec::new();
        for (h, cpus) in held {
            let mut line = format!("CPUs {cpus}: {h}");
            if let Some(o) = self.records.owners.get(&h.pod).cloned() {
                match &o {
                    Owner::Process(p) => line.push_str(&format!(
                        ", topomgr run pid {} ({})",
                        p.pid,
                        if crate::state::pod_owner::is_alive(p, &self.boot_id) {
                            "running"
                        } else {
                            "exited"
                        }
                    )),
                    Owner::Container(_) => line.push_str(&format!(", {o}")),
                }
                match self.processes(&h.pod) {
                    Some(p) if !p.is_empty() => {
                        let pids: Vec<String> = p.iter().map(u32::to_string).collect();
                        line.push_str(&format!(", processes {} in its cgroup", pids.join(",")));
                    }
                    _ => {}
                }
            }
            lines.push(line);
        }
        lines
    }
}
