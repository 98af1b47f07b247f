//! How the follower's cpusets reach running containers: through the
//! runtime's CRI socket, as the kubelet's CPU manager sends them
//! (`UpdateContainerResources` with only the cpuset set).
//!
//! An NRI plugin may also send `UpdateContainers` on its own, but
//! containerd before containerd/nri#301 (containerd issue #13733; 1.7 and
//! 2.1 as shipped) takes its two NRI locks for it in the opposite order
//! of every container event: sent while the runtime creates or starts
//! other containers, it wedged containerd's NRI under a burst of ten pods
//! (no container was created or started again until containerd
//! restarted). A CRI update takes the locks in the events' order, and
//! comes back to topomgr as an NRI `UpdateContainer` event, answered from
//! the state thread like any other (so an update computed earlier can
//! never overwrite a newer cpuset). It also reaches a container that is
//! created and not yet started (its spec is updated), where an NRI update
//! is dropped.
//!
//! The socket is `[nri] cri_socket`, or the default socket of the runtime
//! named at Configure (`containerd`: `/run/containerd/containerd.sock`,
//! `cri-o`: `/var/run/crio/crio.sock`). Where none is known or it cannot
//! be reached, the follower falls back to NRI `UpdateContainers` and
//! `/v1/health` says why and what to set.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use topomgr_cri::{CriClient, CriError};

use topomgr_node::state::followed::CpusetUpdate;

/// How long one CRI update may take (the runtime asks topomgr in turn,
/// through NRI, within its own request timeout of 2 s by default).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The runtime's default CRI socket, by the name it registers with.
fn default_socket(runtime: &str) -> Option<PathBuf> {
    match runtime {
        "containerd" => Some(PathBuf::from("/run/containerd/containerd.sock")),
        "cri-o" => Some(PathBuf::from("/var/run/crio/crio.sock")),
        _ => None,
    }
}

/// Where the follower sends cpusets.
#[derive(Debug)]
pub(crate) enum Route {
    /// NRI `UpdateContainers` (no CRI socket: a face tested without a
    /// runtime's CRI).
    Nri,
    /// CRI at `[nri] cri_socket`, or the runtime's default socket.
    Cri(Option<PathBuf>),
}

/// The CRI side of the follower: the socket, the runtime's name and the
/// connection, made when first needed and again after it broke.
pub(crate) struct CriRoute {
    route: Route,
    runtime: Mutex<String>,
    client: tokio::sync::Mutex<Option<(PathBuf, CriClient)>>,
}

/// Why the follower could not use CRI (a health note, with the remedy).
#[derive(Debug)]
pub(crate) struct NoCri(pub String);

impl CriRoute {
    /// Sends along `route`.
    pub(crate) fn new(route: Route) -> CriRoute {
        CriRoute {
            route,
            runtime: Mutex::new(String::new()),
            client: tokio::sync::Mutex::new(None),
        }
    }

    /// The runtime registered as `name` (Configure).
    pub(crate) fn runtime(&self, name: &str) {
        *self.runtime.lock().unwrap_or_else(|p| p.into_inner()) = name.to_owned();
    }

    /// The socket to use: `Ok(None)` for NRI by choice, `Err` when CRI is
    /// wanted and no socket is known.
    fn socket(&self) -> Result<Option<PathBuf>, NoCri> {
        match &self.route {
            Route::Nri => Ok(None),
            Route::Cri(Some(s)) => Ok(Some(s.clone())),
            Route::Cri(None) => {
                let name = self
                    .runtime
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                default_socket(&name).map(Some).ok_or_else(|| {
                    NoCri(format!("nri: the runtime registered as {name:?}, whose CRI socket topomgr does not know; cpuset changes outside the runtime's events go through NRI UpdateContainers, which can wedge containerd's NRI before containerd/nri#301; set [nri] cri_socket to the runtime's CRI socket"))
                })
            }
        }
    }

    /// Sends `updates` through CRI; the ids the runtime did not update.
    /// `Ok(None)`: CRI is not the route (send through NRI);
    /// `Err`: no CRI socket could be used (send through NRI, and report).
    pub(crate) async fn send(
        &self,
        updates: &[CpusetUpdate],
    ) -> Result<Option<Vec<String>>, NoCri> {
        let Some(socket) = self.socket()? else {
            return Ok(None);
        };
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(|(s, _)| *s != socket) {
            *guard = Some((socket.clone(), connect(&socket).await?));
        }
        let Some((_, client)) = guard.as_mut() else {
            return Err(NoCri(format!(
                "nri: no CRI connection to {}",
                socket.display()
            )));
        };
        let mut failed = Vec::new();
        let mut broken = false;
        for (id, set) in updates {
            match client
                .update_cpuset(id, &set.cpus.to_string(), &set.mems.to_string())
                .await
            {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {
                    tracing::debug!(container = %id, error = %e, "the runtime does not have the container (yet)");
                    failed.push(id.clone());
                }
                Err(e) => {
                    tracing::warn!(container = %id, error = %e, "the runtime did not apply a cpuset update");
                    broken |= e.breaks_connection();
                    failed.push(id.clone());
                }
            }
        }
        if broken {
            *guard = None;
        }
        Ok(Some(failed))
    }
}

/// A CRI connection to `socket`, or the health note saying why not.
async fn connect(socket: &Path) -> Result<CriClient, NoCri> {
    let mut client = CriClient::connect(socket, CALL_TIMEOUT)
        .await
        .map_err(|e| NoCri(fallback_note(&e)))?;
    client
        .version()
        .await
        .map_err(|e| NoCri(fallback_note(&e)))?;
    Ok(client)
}

fn fallback_note(e: &CriError) -> String {
    format!("nri: {e}; until it can be reached, cpuset changes outside the runtime's events go through NRI UpdateContainers, which can wedge containerd's NRI before containerd/nri#301")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn where_cri_cannot_be_used_the_note_says_why_and_what_to_set() {
        let updates = vec![(
            "c1".to_owned(),
            topomgr_cgroup::Cpuset {
                cpus: topomgr_sdk::CpuSet::parse("0").unwrap(),
                mems: topomgr_sdk::NumaMask::parse_list("0").unwrap(),
            },
        )];
        assert!(CriRoute::new(Route::Nri)
            .send(&updates)
            .await
            .unwrap()
            .is_none());

        let unknown = CriRoute::new(Route::Cri(None));
        unknown.runtime("podman-nri");
        let Err(NoCri(note)) = unknown.send(&updates).await else {
            panic!("a runtime whose socket is not known");
        };
        assert!(note.starts_with("nri: the runtime registered as \"podman-nri\", whose CRI socket topomgr does not know;"), "{note}");
        assert!(
            note.ends_with("set [nri] cri_socket to the runtime's CRI socket"),
            "{note}"
        );

        let missing =
            std::env::temp_dir().join(format!("topomgr-no-cri-{}.sock", std::process::id()));
        let Err(NoCri(note)) = CriRoute::new(Route::Cri(Some(missing.clone())))
            .send(&updates)
            .await
        else {
            panic!("a socket that does not exist");
        };
        assert!(
            note.starts_with(&format!(
                "nri: cannot connect to the container runtime's CRI socket {}: ",
                missing.display()
            )),
            "{note}"
        );
        assert!(note.contains("set [nri] cri_socket"), "{note}");
        assert!(note.ends_with("go through NRI UpdateContainers, which can wedge containerd's NRI before containerd/nri#301"), "{note}");
    }
}
