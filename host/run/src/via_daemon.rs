//! A run placed by the daemon that owns the node: an owned admission (this
//! process is the owner, so the daemon reclaims the pod once it is gone),
//! the cgroup made here and attached by the daemon (the only writer of
//! cpusets) in the same request, the release asked of the daemon.

use std::path::{Path, PathBuf};

use topomgr_cgroup::{Cgroup, CgroupManager, CgroupPath};
use topomgr_client::{ClientError, Daemon, Reason};
use topomgr_contract::api::{Admission, AdmissionRequest, AttachTo, OwnerKind, OwnerSpec};
use topomgr_locks::lock_holder::Holder;
use topomgr_locks::process;
use topomgr_sdk::PodView;
use tracing::{info, warn};

use crate::{RunError, Teardown, CONTAINER, DAEMON_DEADLINE};

/// The daemon's client and what it holds for this run.
pub(crate) struct ViaDaemon {
    client: Daemon,
    socket: PathBuf,
    /// The daemon the node lock named (for messages).
    found: Option<Box<Holder>>,
    /// The daemon admitted the pod (and has not released it).
    admitted: bool,
}

impl ViaDaemon {
    pub(crate) fn new(socket: &Path, found: Option<Box<Holder>>) -> ViaDaemon {
        ViaDaemon {
            client: Daemon::with_deadline(socket, DAEMON_DEADLINE),
            socket: socket.to_path_buf(),
            found,
            admitted: false,
        }
    }

    /// The daemon the node lock names.
    pub(crate) fn daemon(&self) -> Option<&Holder> {
        self.found.as_deref()
    }

    /// A failed exchange: a refusal, with the socket; when the node lock
    /// named the daemon that cannot be reached, with what it knows of it.
    fn failed(&self, e: ClientError) -> RunError {
        match (&self.found, e) {
            (
                _,
                ClientError::Refused {
                    route,
                    status,
                    message,
                    ..
                },
            ) => RunError::Refused {
                socket: self.socket.clone(),
                route,
                status,
                message,
            },
            (Some(d), e @ (ClientError::Connect { .. } | ClientError::Timeout { .. })) => {
                RunError::Unreachable {
                    socket: self.socket.clone(),
                    daemon: d.clone(),
                    error: e,
                }
            }
            (_, other) => RunError::Client(other),
        }
    }

    /// Admit `pod` owned by this process; when admitted, create its cgroup
    /// and have the daemon attach the container to it.
    pub(crate) fn admit(
        &mut self,
        pod: &PodView,
        cgroups: &CgroupManager,
        cgroup: &mut Option<Cgroup>,
    ) -> Result<Admission, RunError> {
        let pid = std::process::id();
        let start = process::start_time(pid).ok_or(RunError::OwnerStartTime)?;
        let path = CgroupPath::container(&pod.uid, CONTAINER)?;
        let cg = cgroups.create(&path)?;
        *cgroup = Some(cg.clone());
        let request = AdmissionRequest {
            pod: pod.clone(),
            owner: OwnerSpec::process(pid, start),
            attach: Some(AttachTo {
                container: CONTAINER.to_owned(),
                cgroup: path.as_path().to_string_lossy().into_owned(),
            }),
            devices: None,
        };
        // Admitted and attached in one request (the daemon releases the
        // admission again when the attach fails).
        let (admission, attached) = match self.client.admit_and_attach(&request) {
            Ok(answer) => answer,
            Err(e) => {
                // Sent but not answered (or not understood): the daemon
                // may hold the pod; released at teardown (or reclaimed
                // once this run is gone).
                self.admitted = matches!(
                    e,
                    ClientError::Timeout { .. }
                        | ClientError::Http { .. }
                        | ClientError::BadResponse { .. }
                );
                return Err(self.failed(e));
            }
        };
        let Some(attached) = attached.filter(|_| admission.admitted) else {
            // Nothing held: the cgroup made for it goes again.
            if let Some(cg) = cgroup.take() {
                if let Err(e) = cgroups.remove(&cg, 1) {
                    warn!(cgroup = %cg.dir().display(), error = %e, "cannot remove the cgroup of a rejected run");
                }
            }
            return Ok(admission);
        };
        self.admitted = true;
        info!(cgroup = %cg.dir().display(), cpus = %attached.cpus, mems = %attached.mems, socket = %self.socket.display(), "cgroup set up by the daemon");
        Ok(admission)
    }

    /// The holders of exclusive CPUs as the daemon lists its pods.
    pub(crate) fn exclusive_holders(&mut self) -> Vec<String> {
        let Ok(list) = self.client.pods() else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        for p in &list.pods {
            for c in p.containers.iter().filter(|c| c.exclusive) {
                let mut line = format!(
                    "CPUs {}: pod {}/{} (uid {}) container {:?}",
                    c.cpus, p.namespace, p.name, p.uid, c.name
                );
                if let Some(o) = list.owners.get(&p.uid) {
                    line.push_str(&owner_text(o));
                }
                lines.push(line);
            }
        }
        lines
    }

    /// Unless processes are left in the cgroup, release the pod in the
    /// daemon. Whether the caller may remove the cgroup (nothing is kept).
    pub(crate) fn release(
        &mut self,
        uid: &str,
        cgroups: &CgroupManager,
        cgroup: Option<&Cgroup>,
        out: &mut Teardown,
    ) -> bool {
        out.release_later = format!(
            "the daemon releases them then; topomgr release --socket {} {uid} releases them now",
            self.socket.display()
        );
        if !self.admitted {
            return true;
        }
        if let Some(cg) = cgroup.filter(|cg| cg.dir().exists()) {
            match cgroups.procs(cg) {
                Ok(pids) if pids.is_empty() => {}
                Ok(pids) => {
                    out.kept = Some(pids);
                    return false;
                }
                Err(e) => {
                    out.errors.push(format!(
                        "{e}; pod {uid} stays held until the daemon finds its cgroup empty"
                    ));
                    return false;
                }
            }
        }
        match self.client.release(uid) {
            Ok(_) => {
                self.admitted = false;
                info!(pod = uid, "released by the daemon");
            }
            // An admission that was not answered and that the daemon does
            // not hold: nothing to release.
            Err(ClientError::Refused {
                reason: Reason::UnknownPod,
                ..
            }) => self.admitted = false,
            Err(e @ ClientError::Refused { .. }) => out.errors.push(self.failed(e).to_string()),
            Err(e) => out.errors.push(format!(
                "{}; the daemon releases pod {uid} once it sees this run gone",
                self.failed(e)
            )),
        }
        true
    }
}

/// `, owner ...` for an exclusive holder's line.
fn owner_text(o: &OwnerSpec) -> String {
    match (o.kind, o.pid) {
        (OwnerKind::Process, Some(pid)) => format!(", owned by process {pid}"),
        (OwnerKind::Container, _) => format!(
            ", owned by {} container {}",
            o.runtime.map_or("a", |r| r.as_str()),
            o.id.as_deref().unwrap_or("?")
        ),
        _ => String::new(),
    }
}
