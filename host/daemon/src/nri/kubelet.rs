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
//!   sets one on a Kubernetes container);
//! - the same at Synchronize, for a container topomgr did not place (not in
//!   its books, not followed before, cpuset other than the shared pool).
//!
//! The remedy is the kubelet's own procedure for changing a policy: set
//! `cpuManagerPolicy: none` / `memoryManagerPolicy: None` in the
//! KubeletConfiguration, remove the state file, restart the kubelet (it
//! refuses to start on a state file of another policy).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use topomgr_nri::api::{Container, PodSandbox};
use topomgr_runtime::{Mapping, Skip};

use super::status::{Condition, NriStatus};

/// How often the follower reads the kubelet's state files again.
pub(super) const FILE_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// At most this many pinned containers are named in the note.
const NAMED: usize = 5;

/// The kubelet's checks of one face.
#[derive(Debug, Default)]
pub(super) struct KubeletCheck {
    /// The kubelet's root directory (`None`: its files are not read).
    root: Option<PathBuf>,
    /// Kubelet containers that arrived pinned: id → `name (cpus)`.
    pinned: Mutex<BTreeMap<String, String>>,
}

/// The CPUs a kubelet container arrived pinned to: `Some` when `mapping`
/// left it alone as pinned and its pod's cgroup parent is the kubelet's.
pub(super) fn kubelet_pinned<'a>(pod: &PodSandbox, mapping: &'a Mapping) -> Option<&'a str> {
    let Mapping::Leave(Skip::Pinned { cpus }) = mapping else {
        return None;
    };
    let parent = pod.linux.as_ref().map(|l| l.cgroup_parent.as_str())?;
    topomgr_runtime::is_kubelet_cgroup(parent).then_some(cpus.as_str())
}

/// `namespace/pod/container`.
fn who(pod: &PodSandbox, container: &Container) -> String {
    format!("{}/{}/{}", pod.namespace, pod.name, container.name)
}

impl KubeletCheck {
    /// Reads the kubelet's state files under `root`.
    pub(super) fn with_root(root: PathBuf) -> KubeletCheck {
        KubeletCheck {
            root: Some(root),
            pinned: Mutex::default(),
        }
    }

    fn pinned(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.pinned.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the state files and sets their notes.
    pub(super) fn check_files(&self, status: &NriStatus) {
        let Some(root) = &self.root else {
            return;
        };
        status.set_condition(Condition::KubeletStateFiles, state_file_notes(root));
    }

    /// A kubelet container arrived pinned at CreateContainer.
    pub(super) fn pinned_at_create(
        &self,
        status: &NriStatus,
        pod: &PodSandbox,
        container: &Container,
        cpus: &str,
    ) {
        tracing::warn!(container = %who(pod, container), cpus, "a container of the kubelet arrived with a cpuset: the kubelet's CPU manager is not at policy none");
        self.pinned().insert(
            container.id.clone(),
            format!("{} ({cpus})", who(pod, container)),
        );
        self.report(status);
    }

    /// The kubelet containers a Synchronize found pinned (replacing those
    /// found before).
    pub(super) fn pinned_at_sync(&self, status: &NriStatus, found: BTreeMap<String, String>) {
        *self.pinned() = found;
        self.report(status);
    }

    /// The container is gone.
    pub(super) fn forget(&self, status: &NriStatus, id: &str) {
        if self.pinned().remove(id).is_some() {
            self.report(status);
        }
    }

    fn report(&self, status: &NriStatus) {
        let pinned = self.pinned();
        let notes = if pinned.is_empty() {
            Vec::new()
        } else {
            let mut named: Vec<&str> = pinned.values().take(NAMED).map(String::as_str).collect();
            let more = pinned.len().saturating_sub(NAMED);
            let and_more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            named.sort_unstable();
            vec![format!(
                "nri: {} container(s) of the kubelet arrived with a cpuset ({}{and_more}): the kubelet's CPU manager pins them, so topomgr leaves them alone and both keep books of the same CPUs; set cpuManagerPolicy: none in the KubeletConfiguration, remove the kubelet's cpu_manager_state and restart the kubelet",
                pinned.len(),
                named.join(", "),
            )]
        };
        status.set_condition(Condition::KubeletPinned, notes);
    }
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
