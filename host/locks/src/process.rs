//! The process probes the locks rest on: the boot a process runs in, and
//! whether a process recorded by pid and start time still runs.
//!
//! A pid alone cannot say whether a process still runs (pids are reused):
//! a process is its pid, its start time (field 22 of `/proc/<pid>/stat`,
//! clock ticks since boot) and the boot id. The owners of pods are judged
//! alike (`topomgr_node::state::pod_owner`, which uses these).

use std::fs;

use topomgr_contract::owner::ProcStat;

/// Where Linux publishes the id of the current boot.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// The id of the running boot ([`BOOT_ID_PATH`]), or `"unknown"` where the
/// kernel does not publish one.
pub fn boot_id() -> String {
    fs::read_to_string(BOOT_ID_PATH)
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn stat(pid: u32) -> Option<ProcStat> {
    ProcStat::parse(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The start time of process `pid` (`None` when there is no such process
/// or its stat file does not parse).
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// Whether process `pid` with start time `start_time` runs in boot
/// `boot_id`, as seen from boot `now_boot`: same boot, a process with that
/// pid and start time, not a zombie.
pub fn process_runs(pid: u32, start_time: u64, boot_id: &str, now_boot: &str) -> bool {
    boot_id == now_boot && stat(pid).is_some_and(|s| s.start_time == start_time && !s.exited)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_a_changed_start_time_or_boot_does_not() {
        let me = std::process::id();
        let start = start_time(me).unwrap();
        let boot = boot_id();
        assert!(process_runs(me, start, &boot, &boot));
        assert!(!process_runs(me, start + 1, &boot, &boot));
        assert!(!process_runs(me, start, "another boot", &boot));
        assert_eq!(start_time(u32::MAX), None);
    }
}
