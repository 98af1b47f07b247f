//! Whether the kubelet's own CPU and memory managers are on.
//!
//! topomgr replaces the kubelet's static CPU and memory managers; with them
//! on as well, the kubelet pins every container itself (its static CPU
//! manager gives each container a cpuset: its exclusive CPUs, or its
//! shared pool), topomgr leaves every container that arrives with a cpuset
//! alone, and the two keep books of the same CPUs with different reserved
//! sets, so the scheduler can overcommit. Seen three ways, each a
//! `/v1/health` note (the daemon is `degraded`) giving the remedy:
//!
//! - the kubelet's checkpoint `cpu_manager_state` names a policy other than
//!   `none`, or `memory_manager_state` one other than `None` (files under
//!   the kubelet's root directory, `[nri] kubelet_root_dir`; the
//!   `policyName` of `pkg/kubelet/cm/cpumanager/state/checkpoint.go` and
//!   `memorymanager/state/checkpoint.go`), read at Configure, at
//!   Synchronize and every [`FILE_CHECK_INTERVAL`];
//! - a container whose pod's cgroup parent is the kubelet's arrives at
//!   CreateContainer with a cpuset (nothing but the kubelet's CPU manager
//!   sets one on a Kubernetes container) and without topomgr's mark
//!   (`topomgr.io/placed-cpus`, which every container topomgr placed
//!   carries in its spec);
//! - the same at Synchronize, for a container without topomgr's mark whose
//!   pod topomgr does not hold.
//!
//! The containers so found are kept in the node's book beside the
//! containers followed ([`topomgr_node::state::followed::Followed::pin`]), not
//! here: the state thread answers them with each event that may change
//! them, and [`report`] turns them into the note.
//!
//! The remedy is the kubelet's own procedure for changing a policy: set
//! `cpuManagerPolicy: none` / `memoryManagerPolicy: None` in the
//! KubeletConfiguration, remove the state file, restart the kubelet (it
//! refuses to start on a state file of another policy).

use std::path::{Path, PathBuf};
use std::time::Duration;

use topomgr_node::state::followed::PinnedContainer;
use topomgr_nri::api::{Container, PodSandbox};
use topomgr_runtime::{Mapping, Skip};

use super::convert::PLACED_CPUS;
use super::status::{Condition, NriStatus};

/// How often the follower reads the kubelet's state files again.
pub(super) const FILE_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// At most this many pinned containers are named in the note.
const NAMED: usize = 5;

/// Where the kubelet's state files are (`None`: they are not read).
#[derive(Debug, Default)]
pub(super) struct KubeletCheck {
    root: Option<PathBuf>,
}

/// `Some` when `mapping` left `container` of `pod` alone as pinned and it
/// does not carry topomgr's mark: what the book keeps of it (its CPUs,
/// kept out of exclusive use while it runs; `namespace/pod/container
/// (cpus)`; whether its pod's cgroup parent is the kubelet's, a health
/// note).
pub(super) fn pinned(
    pod: &PodSandbox,
    container: &Container,
    mapping: &Mapping,
) -> Option<PinnedContainer> {
    let Mapping::Leave(Skip::Pinned { cpus }) = mapping else {
        return None;
    };
    if container.annotations.contains_key(PLACED_CPUS) {
        return None;
    }
    let parent = pod.linux.as_ref().map_or("", |l| l.cgroup_parent.as_str());
    Some(PinnedContainer {
        sandbox: container.pod_sandbox_id.clone(),
        what: format!("{}/{}/{} ({cpus})", pod.namespace, pod.name, container.name),
        cpus: topomgr_sdk::CpuSet::parse(cpus).unwrap_or_default(),
        kubelet: topomgr_runtime::is_kubelet_cgroup(parent),
    })
}

impl KubeletCheck {
    /// Reads the kubelet's state files under `root`.
    pub(super) fn with_root(root: PathBuf) -> KubeletCheck {
        KubeletCheck { root: Some(root) }
    }

    /// Reads the state files and sets their notes.
    pub(super) fn check_files(&self, status: &NriStatus) {
        let Some(root) = &self.root else {
            return;
        };
        status.set_condition(Condition::KubeletStateFiles, state_file_notes(root));
    }
}

/// Sets the note of the kubelet containers that arrived pinned (`pinned`:
/// each `namespace/pod/container (cpus)`, as the book answers them; none:
/// no note).
pub(super) fn report(status: &NriStatus, pinned: &[String]) {
    let notes = if pinned.is_empty() {
        Vec::new()
    } else {
        let mut named: Vec<&str> = pinned.iter().take(NAMED).map(String::as_str).collect();
        named.sort_unstable();
        let more = pinned.len().saturating_sub(NAMED);
        let and_more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        vec![format!(
            "nri: {} container(s) of the kubelet arrived with a cpuset ({}{and_more}): the kubelet's CPU manager pins them, so topomgr leaves them alone and both keep books of the same CPUs; set cpuManagerPolicy: none in the KubeletConfiguration, remove the kubelet's cpu_manager_state and restart the kubelet",
            pinned.len(),
            named.join(", "),
        )]
    };
    status.set_condition(Condition::KubeletPinned, notes);
}

/// The kubelet checkpoint's `policyName`.
#[derive(serde::Deserialize)]
struct Checkpoint {
    #[serde(rename = "policyName")]
    policy_name: String,
}

/// The notes the kubelet's `cpu_manager_state` and `memory_manager_state`
/// under `root` call for: a policy other than none, or a file that cannot
/// be read. A missing file is no note (no kubelet, or one that has not
/// started its managers yet).
pub(super) fn state_file_notes(root: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    for (file, none, key, manager) in [
        ("cpu_manager_state", "none", "cpuManagerPolicy: none", "CPU"),
        (
            "memory_manager_state",
            "None",
            "memoryManagerPolicy: None",
            "memory",
        ),
    ] {
        let path = root.join(file);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                notes.push(format!(
                    "nri: cannot read the kubelet's {}: {e}; whether its {manager} manager is off is not known",
                    path.display()
                ));
                continue;
            }
        };
        match serde_json::from_slice::<Checkpoint>(&text) {
            Ok(c) if c.policy_name == none => {}
            Ok(c) => notes.push(format!(
                "nri: the kubelet's {manager} manager runs policy {:?} ({} says so): it pins containers itself, which topomgr then leaves alone; set {key} in the KubeletConfiguration, remove {} and restart the kubelet",
                c.policy_name,
                path.display(),
                path.display()
            )),
            Err(e) => notes.push(format!(
                "nri: the kubelet's {} is not a checkpoint with a policyName ({e}); whether its {manager} manager is off is not known",
                path.display()
            )),
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_files_naming_a_policy_other_than_none_are_noted() {
        let dir =
            std::env::temp_dir().join(format!("topomgr-kubelet-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // No files: nothing to say.
        assert!(state_file_notes(&dir).is_empty());
        // The kubelet's own checkpoints at policy none.
        std::fs::write(
            dir.join("cpu_manager_state"),
            r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("memory_manager_state"),
            r#"{"policyName":"None","machineState":{},"checksum":1556210905}"#,
        )
        .unwrap();
        assert!(state_file_notes(&dir).is_empty());
        // Static CPU manager.
        std::fs::write(
            dir.join("cpu_manager_state"),
            r#"{"policyName":"static","defaultCpuSet":"0,3","entries":{"u":{"app":"1-2"}},"checksum":7}"#,
        )
        .unwrap();
        let notes = state_file_notes(&dir);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("nri: the kubelet's CPU manager runs policy \"static\""),
            "{notes:?}"
        );
        assert!(notes[0].contains("set cpuManagerPolicy: none in the KubeletConfiguration, remove"));
        // Static memory manager too; and a file that is no checkpoint.
        std::fs::write(
            dir.join("memory_manager_state"),
            r#"{"policyName":"Static","machineState":{},"checksum":3}"#,
        )
        .unwrap();
        let notes = state_file_notes(&dir);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[1].contains("memory manager runs policy \"Static\""));
        assert!(notes[1].contains("memoryManagerPolicy: None"));
        std::fs::write(dir.join("cpu_manager_state"), "garbage").unwrap();
        assert!(state_file_notes(&dir)[0].contains("is not a checkpoint with a policyName"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
