//! Who holds a lock ([`crate::state_lock`], [`crate::node_lock`]): the
//! daemon or a one-shot command, recorded in the lock file so that a
//! process refused can name it and say what to do instead.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::process;

/// What a lock holder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// `topomgr serve`: holds its locks for as long as it runs.
    Serve,
    /// `topomgr run` without a daemon.
    Run,
    /// `topomgr run` placed by the daemon (holding no lock; recorded as an
    /// owner for the daemon's state directory while it runs).
    RunThroughDaemon,
    /// A process a run left in its pod's cgroup (it keeps the pod's CPUs,
    /// so it owns the node for that state directory while it lives).
    LeftBehind,
    /// The init process of a container the daemon placed (through the OCI
    /// hook or NRI; holding no lock): it keeps its CPUs, so it owns the
    /// node for the daemon's state directory while it lives, also after
    /// the daemon stopped.
    Container,
    /// `topomgr admit --state-dir`.
    Admit,
    /// `topomgr admit --state-dir --dry-run`.
    AdmitDryRun,
    /// `topomgr release --state-dir`.
    Release,
    /// `topomgr explain --state-dir`.
    Explain,
    /// `topomgr export nrt --state-dir`.
    ExportNrt,
    /// `topomgr pods --state-dir`.
    Pods,
    /// `topomgr provider NAME ... --state-dir`.
    Provider,
    /// `topomgr state recover --state-dir`.
    StateRecover,
    /// `topomgr health --state-dir`.
    Health,
}

impl Role {
    /// An owner recorded in the node lock without holding it (a run placed
    /// by the daemon, a process a run left behind).
    pub fn is_member(self) -> bool {
        matches!(
            self,
            Role::RunThroughDaemon | Role::LeftBehind | Role::Container
        )
    }

    /// The command, as people type it.
    pub fn command(self) -> &'static str {
        match self {
            Role::Serve => "topomgr serve",
            Role::Run => "topomgr run",
            Role::RunThroughDaemon => "topomgr run (through the daemon)",
            Role::LeftBehind => "a process left in the cgroup of a topomgr run",
            Role::Container => "a container placed by topomgr serve (OCI hook or NRI)",
            Role::Admit => "topomgr admit --state-dir",
            Role::AdmitDryRun => "topomgr admit --state-dir --dry-run",
            Role::Release => "topomgr release --state-dir",
            Role::Explain => "topomgr explain --state-dir",
            Role::ExportNrt => "topomgr export nrt --state-dir",
            Role::Pods => "topomgr pods --state-dir",
            Role::Provider => "topomgr provider --state-dir",
            Role::StateRecover => "topomgr state recover --state-dir",
            Role::Health => "topomgr health --state-dir",
        }
    }

    /// What a command of this role does instead while the daemon at
    /// `socket` runs (the form of it that asks the daemon).
    pub fn through_daemon(self, socket: &Path) -> String {
        let s = socket.display();
        match self {
            Role::Serve => format!(
                "stop that daemon first, or use it (its socket is {s})"
            ),
            Role::Run | Role::RunThroughDaemon | Role::LeftBehind | Role::Container => {
                format!("run through it: `topomgr run --socket {s} [OPTIONS] -- CMD...`")
            }
            Role::Admit => format!("admit through it: `topomgr admit --socket {s} POD...`"),
            Role::AdmitDryRun | Role::Explain => format!(
                "ask it for a what-if: `curl --unix-socket {s} -X POST -H 'Content-Type: application/yaml' --data-binary @POD.yaml 'http://localhost/v1/pods?dry_run=true&explain=true'`"
            ),
            Role::Release => format!("release through it: `topomgr release --socket {s} UID`"),
            Role::ExportNrt => format!("export through it: `topomgr export nrt --socket {s}`"),
            Role::Pods => format!("list them through it: `topomgr pods --socket {s}`"),
            Role::Health => format!("ask it: `topomgr health --socket {s}`"),
            Role::StateRecover => "stop that daemon first: a state directory in use is never recovered under it".to_owned(),
            Role::Provider => "work on a copy of it instead (`cp -a DIR /tmp/topomgr-state-copy`, then `--state-dir /tmp/topomgr-state-copy`): the daemon's state changes only through the daemon".to_owned(),
        }
    }
}

/// A process holding a lock, as it recorded itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// What it is.
    pub role: Role,
    /// Its pid.
    pub pid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22): with the pid and the
    /// boot, it tells a live holder from a pid reused since.
    pub start_time: u64,
    /// The boot it ran in.
    pub boot_id: String,
    /// Its command line (arguments joined by spaces, cut at 300 bytes).
    pub command: String,
    /// Its state directory (absolute).
    pub state_dir: PathBuf,
    /// The daemon's socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
}

/// The longest command line a holder records.
const COMMAND_MAX: usize = 300;

impl Holder {
    /// This process in `role`, with `state_dir` (made absolute) and, for
    /// the daemon, its `socket`.
    pub fn current(role: Role, state_dir: &Path, socket: Option<&Path>) -> Holder {
        let pid = std::process::id();
        Holder {
            role,
            pid,
            start_time: process::start_time(pid).unwrap_or(0),
            boot_id: crate::process::boot_id(),
            command: command_line(pid),
            state_dir: absolute(state_dir),
            socket: socket.map(absolute),
        }
    }

    /// Process `pid` (which must run) in `role`, with `state_dir` and the
    /// daemon's `socket`; `None` when it does not run.
    pub fn process(
        pid: u32,
        role: Role,
        state_dir: &Path,
        socket: Option<&Path>,
    ) -> Option<Holder> {
        Some(Holder {
            start_time: process::start_time(pid)?,
            pid,
            command: command_line(pid),
            ..Holder::current(role, state_dir, socket)
        })
    }

    /// Whether the holder still runs (same boot, pid and start time, not
    /// a zombie).
    pub fn runs(&self, boot_id: &str) -> bool {
        process::process_runs(self.pid, self.start_time, &self.boot_id, boot_id)
    }

    /// The holder with the command line its process has now. A process
    /// left behind is recorded when the run ends, which may be while it
    /// is still in `execve` (its command line then reads empty) or before
    /// it ran its program: a message names what runs when it is written.
    pub fn with_current_command(mut self) -> Holder {
        let now = command_line(self.pid);
        if !now.is_empty() {
            self.command = now;
        }
        self
    }

    /// The holder as one line of a lock file.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The holders recorded in a lock file's text (lines that are not one
    /// are skipped: a file of an older version).
    pub fn parse_all(text: &str) -> Vec<Holder> {
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.role {
            Role::Serve => write!(f, "the topomgr daemon")?,
            role => f.write_str(role.command())?,
        }
        write!(
            f,
            " (pid {}, command `{}`, state directory {}",
            self.pid,
            self.command,
            self.state_dir.display()
        )?;
        if let Some(s) = &self.socket {
            write!(f, ", socket {}", s.display())?;
        }
        f.write_str(")")
    }
}

/// `holders` for a message: each, joined by `; `.
pub fn describe(holders: &[Holder]) -> String {
    holders
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Process `pid`'s command line, arguments joined by spaces.
fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut text = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(" ");
    if text.len() > COMMAND_MAX {
        let mut cut = COMMAND_MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// `path` made absolute: its nearest existing ancestor canonical (so
/// every process names one directory alike, symlinks resolved), the rest
/// against it with `.` and `..` taken out.
fn absolute(path: &Path) -> PathBuf {
    let lexical = topomgr_cgroup::hierarchy::absolute(path);
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(mut p) = existing.canonicalize() {
            p.extend(rest.iter().rev());
            return p;
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return lexical,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_names_itself_and_is_read_back() {
        let me = Holder::current(Role::Run, Path::new("/nonexistent/x/../state"), None);
        assert_eq!(me.pid, std::process::id());
        assert_eq!(me.state_dir, PathBuf::from("/nonexistent/state"));
        assert!(me.command.contains("topomgr_locks"), "{}", me.command);
        assert!(me.runs(&crate::process::boot_id()));
        assert!(!me.runs("another boot"));
        // Recorded mid-exec (an empty command line, or the shell's before
        // it ran its program): named by what runs now.
        for recorded in ["", "sh -c sleep 60"] {
            let then = Holder {
                command: recorded.into(),
                ..me.clone()
            };
            assert_eq!(then.with_current_command(), me);
        }
        let text = format!("12345\n{}\nnot json\n", me.to_line());
        assert_eq!(Holder::parse_all(&text), std::slice::from_ref(&me));
        let d = Holder {
            role: Role::Serve,
            pid: 7,
            command: "topomgr serve".into(),
            state_dir: "/var/lib/topomgr".into(),
            socket: Some("/run/topomgr/topomgr.sock".into()),
            ..me
        };
        assert_eq!(
            d.to_string(),
            "the topomgr daemon (pid 7, command `topomgr serve`, state directory /var/lib/topomgr, socket /run/topomgr/topomgr.sock)"
        );
        let r = Holder {
            role: Role::Release,
            socket: None,
            ..d
        };
        assert_eq!(
            r.to_string(),
            "topomgr release --state-dir (pid 7, command `topomgr serve`, state directory /var/lib/topomgr)"
        );
    }
}
