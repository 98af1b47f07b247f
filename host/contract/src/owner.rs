//! Who owns an admitted pod: the owner as the daemon records it with the
//! pod (in its state and its API's `owners`).
//!
//! - a **process** ([`ProcessOwner`]): `topomgr run`, or a client that
//!   admits for itself: its pid, its start time (field 22 of
//!   `/proc/<pid>/stat`, clock ticks since boot; pids are reused, a start
//!   time is not) and the boot id;
//! - a **container** ([`ContainerOwner`]): an admission made by a runtime
//!   hook (`topomgr oci-hook`) or a runtime's NRI plugin, with the
//!   runtime's container id, its init process (pid and start time, once
//!   the runtime has one), its cgroup (relative to the cgroup root) and
//!   when the admission was made.
//!
//! Only the data and the one reader of `/proc/<pid>/stat`'s text
//! ([`ProcStat`]); whether an owner still runs is the node's question
//! (`topomgr_node::state::pod_owner`).

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
    /// A CRI runtime's NRI plugin, for a pod admitted whole under pod
    /// scope at its first container: the owner's `id` is the runtime's
    /// pod sandbox id, and the pod is held until that sandbox stops.
    NriSandbox,
}

impl ContainerRuntime {
    /// The spelling of the API and the state (`"oci-hook"`, `"nri"`,
    /// `"nri-sandbox"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerRuntime::OciHook => "oci-hook",
            ContainerRuntime::Nri => "nri",
            ContainerRuntime::NriSandbox => "nri-sandbox",
        }
    }
}

/// A container that owns a pod (the pod is that one container), or, for
/// [`ContainerRuntime::NriSandbox`], the pod sandbox a pod admitted whole
/// belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerOwner {
    /// The runtime face that admitted it.
    pub runtime: ContainerRuntime,
    /// The runtime's container id (the sandbox id for
    /// [`ContainerRuntime::NriSandbox`]).
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Its start time (field 22, clock ticks after boot).
    pub start_time: u64,
    /// A zombie (`Z`) or dead (`X`) process: it has exited.
    pub exited: bool,
}

impl ProcStat {
    /// Read the text of a `/proc/<pid>/stat` file (`None` when it does not
    /// parse).
    pub fn parse(text: &str) -> Option<ProcStat> {
        // The command name (field 2) is in parentheses and may hold spaces or
        // parentheses itself: the fields after it start after the last ')'.
        let rest = &text[text.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        // `rest` starts with field 3 (state); the start time is field 22.
        let state = fields.next()?;
        let start_time = fields.nth(18)?.parse().ok()?;
        Some(ProcStat {
            start_time,
            exited: matches!(state, "Z" | "X" | "x"),
        })
    }
}

impl Owner {
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
    pub fn same_as(&self, other: &Owner) -> bool {
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
            Owner::Container(c) if c.runtime == ContainerRuntime::NriSandbox => {
                write!(f, "nri pod sandbox {}", c.id)
            }
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
    fn a_stat_line_reads_past_a_command_name_with_spaces_and_parentheses() {
        let fields: Vec<String> = (4..=21).map(|f| f.to_string()).collect();
        let line = format!("42 (a (b) c) S {} 987654 23 24\n", fields.join(" "));
        assert_eq!(
            ProcStat::parse(&line),
            Some(ProcStat {
                start_time: 987654,
                exited: false
            })
        );
        let zombie = line.replace(") S ", ") Z ");
        assert!(ProcStat::parse(&zombie).unwrap().exited);
        assert_eq!(ProcStat::parse("42 (x) S 1 2"), None);
        assert_eq!(ProcStat::parse("no parenthesis"), None);
    }
}
