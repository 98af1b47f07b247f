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
//! What makes an owner *gone* (and its pod reclaimable) is
//! [`crate::node_state::NodeState::reclaim`]'s rule; this module only
//! answers for the processes.

use std::fs;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize};

/// The owner of an admitted pod.
///
/// Stored as `{"kind": "process", ...}` or `{"kind": "container", ...}`;
/// an owner saved before containers could own pods (`{"pid",
/// "start_time", "boot_id"}`, no `kind`) reads as a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Owner {
    /// A process (`topomgr run`).
    Process(ProcessOwner),
    /// A container created by a runtime.
    Container(ContainerOwner),
}

/// A process that owns a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessOwner {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks after boot, `/proc/<pid>/stat` field 22).
    pub start_time: u64,
    /// The boot it ran in.
    pub boot_id: String,
}

/// Which runtime face admitted a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainerRuntime {
    /// `topomgr oci-hook` (Podman, CRI-O's hooks.d, containerd's
    /// `base_runtime_spec`): it admits, then attaches the container's
    /// cgroup itself.
    OciHook,
    /// A CRI runtime's NRI plugin: the runtime applies the placement.
    Nri,
}

impl ContainerRuntime {
    /// The spelling of the API and the state (`"oci-hook"`, `"nri"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerRuntime::OciHook => "oci-hook",
            ContainerRuntime::Nri => "nri",
        }
    }
}

/// A container that owns a pod (the pod is that one container).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerOwner {
    /// The runtime face that admitted it.
    pub runtime: ContainerRuntime,
    /// The runtime's container id.
    pub id: String,
    /// Its init process, once known (an NRI container has none at
    /// CreateContainer).
    pub pid: Option<u32>,
    /// The init process's start time (with `pid`).
    pub start_time: Option<u64>,
    /// The boot the admission was made in.
    pub boot_id: String,
    /// Its cgroup, relative to the cgroup root, once known.
    pub cgroup: Option<String>,
    /// When the admission was made (seconds since the Unix epoch).
    pub admitted_at: u64,
}

/// What a process's `/proc/<pid>/stat` says about it.
struct Stat {
    start_time: u64,
    /// A zombie (`Z`) or dead (`X`) process: it has exited.
    exited: bool,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or
    // parentheses itself: the fields after it start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // `rest` starts with field 3 (state); the start time is field 22.
    let state = fields.next()?;
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(Stat {
        start_time,
        exited: matches!(state, "Z" | "X" | "x"),
    })
}

/// The start time of process `pid` (`None` when there is no such process
/// or its stat file does not parse).
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// Whether process `pid` with start time `start_time` runs in boot
/// `boot_id`, as seen from boot `now_boot`: same boot, a process with that
/// pid and start time, not a zombie.
pub(crate) fn process_runs(pid: u32, start_time: u64, boot_id: &str, now_boot: &str) -> bool {
    boot_id == now_boot && stat(pid).is_some_and(|s| s.start_time == start_time && !s.exited)
}

/// Seconds since the Unix epoch now (0 before it).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl ProcessOwner {
    /// The calling process.
    pub(crate) fn current(boot_id: &str) -> Option<ProcessOwner> {
        let pid = std::process::id();
        Some(ProcessOwner {
            pid,
            start_time: start_time(pid)?,
            boot_id: boot_id.to_owned(),
        })
    }

    /// Whether this owner still runs (same boot, same pid, same start
    /// time, not a zombie).
    pub(crate) fn is_alive(&self, boot_id: &str) -> bool {
        process_runs(self.pid, self.start_time, &self.boot_id, boot_id)
    }
}

impl ContainerOwner {
    /// Whether its init process is known to have ended: it was known and
    /// no longer runs, or the machine rebooted since the admission.
    /// `false` while the runtime has not told its pid.
    pub(crate) fn process_ended(&self, boot_id: &str) -> bool {
        if self.boot_id != boot_id {
            return true;
        }
        match (self.pid, self.start_time) {
            (Some(pid), Some(start)) => !process_runs(pid, start, &self.boot_id, boot_id),
            _ => false,
        }
    }
}

impl Owner {
    /// The calling process as a process owner.
    pub fn current(boot_id: &str) -> Option<Owner> {
        ProcessOwner::current(boot_id).map(Owner::Process)
    }

    /// The kind, as the state and the metrics spell it (`"process"`,
    /// `"container"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Owner::Process(_) => "process",
            Owner::Container(_) => "container",
        }
    }

    /// Whether `other` is the same owner (the same process, or the same
    /// runtime's container), whatever else was recorded about it.
    pub(crate) fn same_as(&self, other: &Owner) -> bool {
        match (self, other) {
            (Owner::Process(a), Owner::Process(b)) => {
                a.pid == b.pid && a.start_time == b.start_time && a.boot_id == b.boot_id
            }
            (Owner::Container(a), Owner::Container(b)) => a.runtime == b.runtime && a.id == b.id,
            _ => false,
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Process(p) => write!(f, "process {} (start time {})", p.pid, p.start_time),
            Owner::Container(c) => {
                write!(f, "{} container {}", c.runtime.as_str(), c.id)?;
                if let Some(pid) = c.pid {
                    write!(f, " (init pid {pid})")?;
                }
                Ok(())
            }
        }
    }
}

/// The two shapes an owner is stored in.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Tagged {
    Process(ProcessOwner),
    Container(ContainerOwner),
}

impl<'de> Deserialize<'de> for Owner {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Owner, D::Error> {
        use serde::de::Error as _;
        let value = serde_json::Value::deserialize(d)?;
        let tagged = value.as_object().is_some_and(|o| o.contains_key("kind"));
        if tagged {
            match serde_json::from_value::<Tagged>(value).map_err(D::Error::custom)? {
                Tagged::Process(p) => Ok(Owner::Process(p)),
                Tagged::Container(c) => Ok(Owner::Container(c)),
            }
        } else {
            serde_json::from_value::<ProcessOwner>(value)
                .map(Owner::Process)
                .map_err(D::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_process_is_alive_and_a_reused_pid_is_not() {
        let me = ProcessOwner::current("boot").expect("/proc/self/stat");
        assert!(me.is_alive("boot"));
        assert!(!me.is_alive("another boot"));
        let reused = ProcessOwner {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        assert!(!reused.is_alive("boot"));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = ProcessOwner {
            pid,
            start_time: 1,
            boot_id: "boot".into(),
        };
        assert!(!gone.is_alive("boot"));
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
        assert!(!owner.is_alive("b"));
        let mut child = child;
        child.wait().unwrap();
    }

    #[test]
    fn owners_are_stored_tagged_and_old_process_owners_still_read() {
        let p = Owner::Process(ProcessOwner {
            pid: 7,
            start_time: 99,
            boot_id: "b".into(),
        });
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"process","pid":7,"start_time":99,"boot_id":"b"}"#
        );
        assert_eq!(serde_json::from_str::<Owner>(&text).unwrap(), p);
        let old = r#"{"pid":7,"start_time":99,"boot_id":"b"}"#;
        assert_eq!(serde_json::from_str::<Owner>(old).unwrap(), p);
        let c = Owner::Container(ContainerOwner {
            runtime: ContainerRuntime::OciHook,
            id: "abc".into(),
            pid: Some(5),
            start_time: Some(6),
            boot_id: "b".into(),
            cgroup: Some("machine.slice/libpod-abc.scope".into()),
            admitted_at: 1_700_000_000,
        });
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"container","runtime":"oci-hook","id":"abc","pid":5,"start_time":6,"boot_id":"b","cgroup":"machine.slice/libpod-abc.scope","admitted_at":1700000000}"#
        );
        assert_eq!(serde_json::from_str::<Owner>(&text).unwrap(), c);
        let err = serde_json::from_str::<Owner>(r#"{"kind":"vm","id":"x"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown variant `vm`"), "{err}");
        let err = serde_json::from_str::<Owner>(r#"{"pid":1,"start_time":2,"boot_id":"b","x":1}"#)
            .unwrap_err();
        assert!(err.to_string().contains("unknown field `x`"), "{err}");
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
        assert!(!c.process_ended("b"));
        assert!(c.process_ended("another boot"));
        let me = ProcessOwner::current("b").unwrap();
        c.pid = Some(me.pid);
        c.start_time = Some(me.start_time);
        assert!(!c.process_ended("b"));
        c.start_time = Some(me.start_time + 1);
        assert!(c.process_ended("b"));
    }
}
