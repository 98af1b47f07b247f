//! How the NRI plugin stands, for `/v1/health` and the
//! `topomgr_nri_connected` gauge.

use std::sync::{Arc, Mutex};

use topomgr_node::api::NriHealth;
use topomgr_node::state::pod_owner::unix_now;

use crate::metrics::Metrics;

/// How many cpuset repairs health keeps.
const REPAIRS_KEPT: usize = 8;

/// A standing condition of the runtime or node that `/v1/health` notes
/// until it no longer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Condition {
    /// The provider deadline exceeds the runtime's request budget.
    RequestBudget,
    /// The kubelet's state files name a CPU or memory manager policy.
    KubeletStateFiles,
    /// Containers of the kubelet arrived with a cpuset.
    KubeletPinned,
    /// The follower cannot reach the runtime's CRI socket.
    CriRoute,
}

/// A health note about one container the last Synchronize listed (one it
/// could not read or admit): shown until the container stops or is
/// removed, or its pod sandbox is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerNote {
    /// The container's id.
    pub id: String,
    /// Its pod sandbox's id.
    pub sandbox: String,
    /// The note.
    pub text: String,
}

/// The NRI plugin's state as the health endpoint shows it; shared by the
/// plugin (which updates it) and the HTTP server (which reads it).
#[derive(Debug)]
pub struct NriStatus {
    health: Mutex<NriHealth>,
    /// Containers the last Synchronize could not read or admit, still
    /// there (health notes).
    notes: Mutex<Vec<ContainerNote>>,
    /// Registered, no Synchronize yet after this long (a health note).
    awaiting_synchronize: Mutex<Option<std::time::Duration>>,
    /// The last cpusets repaired (health notes).
    repairs: Mutex<Vec<String>>,
    /// Standing conditions of the node, each with its health notes.
    conditions: Mutex<std::collections::BTreeMap<Condition, Vec<String>>>,
    metrics: Option<Arc<Metrics>>,
}

impl NriStatus {
    /// The status of a daemon without `[nri] enabled`.
    pub fn disabled() -> Arc<NriStatus> {
        Arc::new(NriStatus {
            health: Mutex::new(NriHealth::disabled()),
            notes: Mutex::new(Vec::new()),
            awaiting_synchronize: Mutex::new(None),
            repairs: Mutex::new(Vec::new()),
            conditions: Mutex::default(),
            metrics: None,
        })
    }

    /// The status of a plugin that connects to `socket`, not connected yet;
    /// `metrics` hears of every (dis)connection.
    pub fn enabled(socket: &std::path::Path, metrics: Option<Arc<Metrics>>) -> Arc<NriStatus> {
        if let Some(m) = &metrics {
            m.nri_connected(false);
        }
        Arc::new(NriStatus {
            health: Mutex::new(NriHealth {
                enabled: true,
                connected: false,
                socket: Some(socket.display().to_string()),
                runtime: None,
                since: None,
                error: Some("not connected yet".to_owned()),
                containers: 0,
            }),
            notes: Mutex::new(Vec::new()),
            awaiting_synchronize: Mutex::new(None),
            repairs: Mutex::new(Vec::new()),
            conditions: Mutex::default(),
            metrics,
        })
    }

    /// What `/v1/health` shows.
    pub fn health(&self) -> NriHealth {
        self.health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What makes the daemon's health `degraded`: not connected while
    /// enabled, waiting for Synchronize, the standing conditions (the
    /// request budget, the kubelet's managers), the containers the last
    /// Synchronize could not admit, and the last cpusets repaired.
    pub fn notes(&self) -> Vec<String> {
        let h = self.health();
        let mut notes = Vec::new();
        if h.enabled && !h.connected {
            notes.push(format!(
                "nri: not registered with the runtime at {} ({}); the runtime creates containers without topomgr's placement meanwhile",
                h.socket.as_deref().unwrap_or("?"),
                h.error.as_deref().unwrap_or("no attempt yet"),
            ));
        }
        if let Some(waited) = *self.awaiting() {
            notes.push(format!(
                "nri: registered with the runtime, but it has not sent Synchronize for more than {} s; no container is placed until it does (containerd 2.x holds it while a container is being stopped, for its grace period); topomgr waits up to 10 minutes, then registers again",
                waited.as_secs()
            ));
        }
        notes.extend(
            self.conditions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .flatten()
                .cloned(),
        );
        notes.extend(
            self.notes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|n| n.text.clone()),
        );
        notes.extend(
            self.repairs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        notes
    }

    /// Sets the notes of `condition` (none: it holds no more). Conditions
    /// outlive a connection: they are what the runtime or the node is set
    /// up as, checked again at each Configure or Synchronize.
    pub(crate) fn set_condition(&self, condition: Condition, notes: Vec<String>) {
        let mut c = self.conditions.lock().unwrap_or_else(|p| p.into_inner());
        if notes.is_empty() {
            c.remove(&condition);
        } else {
            c.insert(condition, notes);
        }
    }

    fn awaiting(&self) -> std::sync::MutexGuard<'_, Option<std::time::Duration>> {
        self.awaiting_synchronize
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Registered `waited` ago and no Synchronize yet (`None`: it came, or
    /// the connection ended).
    pub(crate) fn awaiting_synchronize(&self, waited: Option<std::time::Duration>) {
        *self.awaiting() = waited;
    }

    fn change(&self, f: impl FnOnce(&mut NriHealth)) {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut h);
        if let Some(m) = &self.metrics {
            m.nri_connected(h.connected);
        }
    }

    /// Registered with the runtime.
    pub(crate) fn connected(&self) {
        self.awaiting_synchronize(None);
        self.change(|h| {
            h.connected = true;
            h.error = None;
            h.since = Some(unix_now());
        });
    }

    /// The runtime said who it is (Configure).
    pub(crate) fn runtime(&self, name: &str, version: &str) {
        let runtime = format!("{name} {version}").trim().to_owned();
        self.change(|h| h.runtime = Some(runtime).filter(|r| !r.is_empty()));
    }

    /// Not connected: an attempt failed or the connection ended.
    pub(crate) fn disconnected(&self, error: String) {
        self.awaiting_synchronize(None);
        self.change(|h| {
            if h.connected || h.since.is_none() {
                h.since = Some(unix_now());
            }
            h.connected = false;
            h.error = Some(error);
        });
    }

    /// The containers followed now.
    pub(crate) fn containers(&self, n: usize) {
        self.change(|h| h.containers = n);
    }

    /// A container's cpuset was found wrong and sent again (the last
    /// [`REPAIRS_KEPT`] are kept, with the time they were found).
    pub(crate) fn repaired(&self, note: String) {
        let mut r = self.repairs.lock().unwrap_or_else(|p| p.into_inner());
        r.push(format!("{note} (at {} s since the epoch)", unix_now()));
        let extra = r.len().saturating_sub(REPAIRS_KEPT);
        r.drain(..extra);
    }

    /// The containers the last Synchronize could not read or admit.
    pub(crate) fn set_notes(&self, notes: Vec<ContainerNote>) {
        *self.notes.lock().unwrap_or_else(|p| p.into_inner()) = notes;
    }

    /// Container `id` stopped or was removed: its note, if any, no longer
    /// holds.
    pub(crate) fn forget_container(&self, id: &str) {
        self.notes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|n| n.id != id);
    }

    /// Pod sandbox `sandbox` was removed: the notes of its containers no
    /// longer hold.
    pub(crate) fn forget_sandbox(&self, sandbox: &str) {
        self.notes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|n| n.sandbox != sandbox);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_follows_connections_and_makes_notes() {
        let metrics = Arc::new(Metrics::new());
        let s = NriStatus::enabled("/run/nri.sock".as_ref(), Some(Arc::clone(&metrics)));
        assert!(metrics.render().contains("topomgr_nri_connected 0"));
        assert_eq!(
            s.notes(),
            ["nri: not registered with the runtime at /run/nri.sock (not connected yet); the runtime creates containers without topomgr's placement meanwhile"]
        );
        s.connected();
        s.runtime("containerd", "1.7.24~ds1");
        s.containers(3);
        let h = s.health();
        assert!(h.connected && h.enabled);
        assert_eq!(h.runtime.as_deref(), Some("containerd 1.7.24~ds1"));
        assert_eq!(h.containers, 3);
        assert!(h.error.is_none() && h.since.is_some());
        assert!(s.notes().is_empty());
        assert!(metrics.render().contains("topomgr_nri_connected 1"));
        s.set_notes(vec![
            ContainerNote {
                id: "x".into(),
                sandbox: "s1".into(),
                text: "container x".into(),
            },
            ContainerNote {
                id: "y".into(),
                sandbox: "s2".into(),
                text: "container y".into(),
            },
        ]);
        assert_eq!(s.notes(), ["container x", "container y"]);
        s.forget_container("y");
        assert_eq!(s.notes(), ["container x"]);
        // A Synchronize the runtime holds is a note until it comes.
        s.awaiting_synchronize(Some(std::time::Duration::from_secs(15)));
        assert_eq!(s.notes().len(), 2);
        assert!(
            s.notes()[0].starts_with("nri: registered with the runtime, but it has not sent Synchronize for more than 15 s"),
            "{:?}",
            s.notes()
        );
        assert!(s.health().connected, "the connection is kept meanwhile");
        s.awaiting_synchronize(None);
        assert_eq!(s.notes(), ["container x"]);
        s.disconnected("the NRI connection is closed".into());
        assert!(!s.health().connected);
        assert!(metrics.render().contains("topomgr_nri_connected 0"));
        assert_eq!(s.notes().len(), 2);
        // Notes about containers go with their sandbox.
        s.forget_sandbox("s2");
        assert_eq!(s.notes().len(), 2);
        s.forget_sandbox("s1");
        assert_eq!(s.notes().len(), 1, "{:?}", s.notes());
        let off = NriStatus::disabled().health();
        assert_eq!(off, NriHealth::disabled());
    }
}
