//! Who owns an admitted pod, and whether that owner is gone.
//!
//! An admission made on behalf of something that can end without telling
//! topomgr records its [`Owner`], durably with the pod:
//!
//! - a **process** ([`ProcessOwner`]): `topomgr run`, or a client that
//!   admits for itself. A pid alone cannot say whether the process still
//!   runs (pids are reused), so the owner is the pid, the process's start
//!   time (field 22 of `/proc/<pid>/stat`, clock ticks since boot) and the
//!   boot id: it runs only while a process with that pid *and* that start
//!   time runs in the same boot, and is not a zombie.
//! - a **container** ([`ContainerOwner`]): an admission made by a runtime
//!   hook (`topomgr oci-hook`) or a runtime's NRI plugin, with the
//!   runtime's container id, its init process (pid and start time, once
//!   the runtime has one), its cgroup (relative to the cgroup root) and
//!   when the admission was made.
//!
//! The owner types are the contract's (`topomgr_contract::owner`,
//! re-exported here); this module probes the processes: whether an owner
//! still runs, and the check of an owner a client tells
//! ([`to_owner`]). What makes an owner *gone* (and its pod reclaimable) is
//! [`crate::state::NodeState::reclaim`]'s rule.

use std::time::{SystemTime, UNIX_EPOCH};

use topomgr_contract::api::{OwnerKind, OwnerSpec};
pub use topomgr_contract::owner::{ContainerOwner, ContainerRuntime, Owner, ProcessOwner};
// The process probes are the locks', so that a lock's holder and a
// pod's owner are judged alike.
use topomgr_locks::process::process_runs;
pub use topomgr_locks::process::start_time;

/// Seconds since the Unix epoch now (0 before it).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The calling process as a process owner.
pub fn current(boot_id: &str) -> Option<Owner> {
    current_process(boot_id).map(Owner::Process)
}

/// The calling process.
pub(crate) fn current_process(boot_id: &str) -> Option<ProcessOwner> {
    let pid = std::process::id();
    Some(ProcessOwner {
        pid,
        start_time: start_time(pid)?,
        boot_id: boot_id.to_owned(),
    })
}

/// Whether process owner `p` still runs (same boot, same pid, same start
/// time, not a zombie).
pub(crate) fn is_alive(p: &ProcessOwner, boot_id: &str) -> bool {
    process_runs(p.pid, p.start_time, &p.boot_id, boot_id)
}

/// Whether container owner `c`'s init process is known to have ended: it
/// was known and no longer runs, or the machine rebooted since the
/// admission. `false` while the runtime has not told its pid.
pub(crate) fn process_ended(c: &ContainerOwner, boot_id: &str) -> bool {
    if c.boot_id != boot_id {
        return true;
    }
    match (c.pid, c.start_time) {
        (Some(pid), Some(start)) => !process_runs(pid, start, &c.boot_id, boot_id),
        _ => false,
    }
}

/// The owner `spec` a client told, to record: checked (the fields its kind needs, and only
/// those; a process that runs now; a cgroup path under the root), with
/// this boot's id and, for a container, `now` (seconds since the Unix
/// epoch) as the time of its admission.
pub fn to_owner(spec: &OwnerSpec, boot_id: &str, now: u64) -> Result<Owner, String> {
    let process = match (spec.pid, spec.start_time) {
        (Some(pid), Some(start)) => {
            if !process_runs(pid, start, boot_id, boot_id) {
                return Err(format!(
                    "owner.pid: no running process {pid} with start time {start} (field 22 of /proc/{pid}/stat); the owner must be running when it admits"
                ));
            }
            Some((pid, start))
        }
        (None, None) => None,
        (Some(_), None) => {
            return Err(
                "owner.start_time: required with owner.pid (field 22 of /proc/<pid>/stat)".into(),
            )
        }
        (None, Some(_)) => return Err("owner.pid: required with owner.start_time".into()),
    };
    match spec.kind {
        OwnerKind::Process => {
            for (field, set) in [
                ("runtime", spec.runtime.is_some()),
                ("id", spec.id.is_some()),
                ("cgroup", spec.cgroup.is_some()),
            ] {
                if set {
                    return Err(format!(
                        "owner.{field}: only a container owner has one; a process owner is pid and start_time"
                    ));
                }
            }
            let Some((pid, start_time)) = process else {
                return Err("owner.pid: a process owner needs pid and start_time".into());
            };
            Ok(Owner::Process(ProcessOwner {
                pid,
                start_time,
                boot_id: boot_id.to_owned(),
            }))
        }
        OwnerKind::Container => {
            let runtime = spec.runtime.ok_or(
                "owner.runtime: a container owner needs its runtime (\"oci-hook\" or \"nri\")",
            )?;
            let id = match spec.id.as_deref() {
                None | Some("") => {
                    return Err("owner.id: a container owner needs the runtime's container id".into())
                }
                Some(id) if id.len() > 256 || id.chars().any(char::is_control) => {
                    return Err(format!(
                        "owner.id: {id:?} is not a container id (at most 256 characters, no control characters)"
                    ))
                }
                Some(id) => id.to_owned(),
            };
            if let Some(cg) = &spec.cgroup {
                topomgr_cgroup::CgroupPath::new(cg).map_err(|e| format!("owner.cgroup: {e}"))?;
            }
            Ok(Owner::Container(ContainerOwner {
                runtime,
                id,
                pid: process.map(|p| p.0),
                start_time: process.map(|p| p.1),
                boot_id: boot_id.to_owned(),
                cgroup: spec.cgroup.clone(),
                admitted_at: now,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_process_is_alive_and_a_reused_pid_is_not() {
        let me = current_process("boot").expect("/proc/self/stat");
        assert!(is_alive(&me, "boot"));
        assert!(!is_alive(&me, "another boot"));
        let reused = ProcessOwner {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        assert!(!is_alive(&reused, "boot"));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = ProcessOwner {
            pid,
            start_time: 1,
            boot_id: "boot".into(),
        };
        assert!(!is_alive(&gone, "boot"));
    }

    #[test]
    fn a_zombie_is_dead() {
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = start_time(pid).expect("the child exists until it is reaped");
        // Not reaped: a zombie until `child` is waited for.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while process_runs(pid, start, "b", "b") {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(start_time(pid), Some(start), "still there, as a zombie");
        let owner = ProcessOwner {
            pid,
            start_time: start,
            boot_id: "b".into(),
        };
        assert!(!is_alive(&owner, "b"));
        let mut child = child;
        child.wait().unwrap();
    }

    #[test]
    fn a_container_without_a_pid_has_not_ended_until_a_reboot() {
        let mut c = ContainerOwner {
            runtime: ContainerRuntime::Nri,
            id: "c".into(),
            pid: None,
            start_time: None,
            boot_id: "b".into(),
            cgroup: None,
            admitted_at: 0,
        };
        assert!(!process_ended(&c, "b"));
        assert!(process_ended(&c, "another boot"));
        let me = current_process("b").unwrap();
        c.pid = Some(me.pid);
        c.start_time = Some(me.start_time);
        assert!(!process_ended(&c, "b"));
        c.start_time = Some(me.start_time + 1);
        assert!(process_ended(&c, "b"));
    }
}
