//! Which process owns a pod admitted by `topomgr run`, and whether it is
//! still alive.
//!
//! A pid alone cannot say that: pids are reused. An [`Owner`] is the pid,
//! the process's start time (field 22 of `/proc/<pid>/stat`, clock ticks
//! since boot) and the boot id; it is alive only while a process with that
//! pid *and* that start time runs in the same boot.

use std::fs;

use serde::{Deserialize, Serialize};

/// The process that owns a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Owner {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks after boot, `/proc/<pid>/stat` field 22).
    pub start_time: u64,
    /// The boot it ran in.
    pub boot_id: String,
}

/// The start time of process `pid` (`None` when there is no such process
/// or its stat file does not parse).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or
    // parentheses itself: the fields after it start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts with field 3 (state); the start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl Owner {
    /// The calling process.
    pub fn current(boot_id: &str) -> Option<Owner> {
        let pid = std::process::id();
        Some(Owner {
            pid,
            start_time: start_time(pid)?,
            boot_id: boot_id.to_owned(),
        })
    }

    /// Whether this owner still runs (same boot, same pid, same start time).
    pub fn is_alive(&self, boot_id: &str) -> bool {
        self.boot_id == boot_id && start_time(self.pid) == Some(self.start_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_process_is_alive_and_a_reused_pid_is_not() {
        let me = Owner::current("boot").expect("/proc/self/stat");
        assert!(me.is_alive("boot"));
        assert!(!me.is_alive("another boot"));
        let reused = Owner {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        assert!(!reused.is_alive("boot"));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = Owner {
            pid,
            start_time: 1,
            boot_id: "boot".into(),
        };
        assert!(!gone.is_alive("boot"));
    }
}
