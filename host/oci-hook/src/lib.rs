//! `topomgr oci-hook`: the OCI runtime hook that places containers of
//! Podman, CRI-O (hooks.d) and containerd (`base_runtime_spec`) through the
//! daemon.
//!
//! One hook serves both stages (`packaging/oci-hooks.d/topomgr.json` names
//! it for `createRuntime` and `poststop`; a hooks.d file cannot give each
//! stage its own arguments): the stage is the one named on the command
//! line, else the one the container's state says (`creating`:
//! createRuntime, `stopped`: poststop).
//!
//! - **createRuntime** (the container's cgroup exists, its process has not
//!   started): read the state and the bundle's `config.json`, map the
//!   container ([`topomgr_runtime::map_container`]; a sandbox, an opted-out
//!   or a user-pinned container is left alone and nothing is asked of the
//!   daemon), find its cgroup from `/proc/<pid>/cgroup` relative to the
//!   cgroup root, admit it as an owned admission whose owner is the
//!   container (runtime `oci-hook`, its id, init pid and start time,
//!   cgroup), with its devices (the bundle's `linux.devices` and
//!   `cdi.k8s.io/*` annotations: the daemon aligns the container with the
//!   CDI devices among them, as under NRI), and attached in the same
//!   request (`attach`): the daemon
//!   writes its cpuset and memory nodes into the cgroup before its first
//!   instruction. A rejection is an
//!   error with topomgr's reason and message ([`HookError::Rejected`]), so
//!   the runtime fails the container with it; nothing is held (an attach
//!   that fails releases the admission again).
//! - **poststop**: release the container's pod; one already released (or
//!   never admitted) is not an error.
//!
//! Every daemon call has a deadline ([`Hook::deadline`]): a daemon that does
//! not answer fails the hook in time instead of hanging the container's
//! start; a daemon that is not there fails it at once, saying so. Runtimes
//! do not run `poststop` after every end (not after `kill -9` of Podman's
//! conmon, not when creation fails after `createRuntime`): the daemon
//! reclaims those admissions itself once the container's process is gone
//! and its cgroup is empty or gone (the owner recorded at admission).

mod spec;

use std::path::PathBuf;
use std::time::Duration;

use topomgr_cgroup::{CgroupError, CgroupManager};
use topomgr_client::{ClientError, Daemon, Reason};
use topomgr_contract::api::{AdmissionRequest, AttachTo, Attached, OwnerSpec};
use topomgr_contract::owner::ContainerRuntime;
use topomgr_runtime::{map_container, ContainerSpec, Mapping, MappingError, Skip};
use tracing::{debug, info};

pub use spec::{read_state, State};

/// Which hook stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `createRuntime` (also `prestart`, its deprecated twin).
    CreateRuntime,
    /// `poststop`.
    Poststop,
}

impl Stage {
    /// The stage the container's status says (`creating`, `stopped`).
    pub(crate) fn of_status(status: &str) -> Option<Stage> {
        match status {
            "creating" | "created" => Some(Stage::CreateRuntime),
            "stopped" => Some(Stage::Poststop),
            _ => None,
        }
    }
}

/// Why the hook failed (the runtime fails the container's creation with it).
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The state on standard input is unusable.
    #[error("cannot read the container's state: {0}")]
    State(String),
    /// The bundle's `config.json` is unusable.
    #[error("cannot read the container's bundle config {}: {problem}", path.display())]
    Bundle {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The stage is not known from the command line or the state.
    #[error("container {id}: status {status:?} is neither creating (createRuntime) nor stopped (poststop); name the stage: topomgr oci-hook createRuntime|poststop")]
    UnknownStage {
        /// The container.
        id: String,
        /// Its status.
        status: String,
    },
    /// createRuntime without the container's process.
    #[error(
        "container {0}: the state names no process (createRuntime needs the container's init pid)"
    )]
    NoProcess(String),
    /// The container's process ended before it could be admitted.
    #[error("container {id}: its process {pid} is gone")]
    ProcessGone {
        /// The container.
        id: String,
        /// Its init pid.
        pid: u32,
    },
    /// The container's spec cannot be mapped to requests.
    #[error("container {id}: {cause}")]
    Mapping {
        /// The container.
        id: String,
        /// Why.
        cause: MappingError,
    },
    /// The container's cgroup could not be found under the cgroup root.
    #[error("container {id}: cannot find its cgroup: {cause}")]
    Cgroup {
        /// The container.
        id: String,
        /// Why.
        cause: CgroupError,
    },
    /// The daemon could not be reached or did not answer in time.
    #[error("{0}; the container is not started (opt a container out with the annotation topomgr.io/opt-out=true)")]
    Daemon(ClientError),
    /// The daemon refused the request (not a rejection: a bad request, its
    /// state not saved, ...).
    #[error(
        "the topomgr daemon refused {what} of container {id}: {message} ({reason}, HTTP {status})"
    )]
    Refused {
        /// What was asked.
        what: &'static str,
        /// The container.
        id: String,
        /// HTTP status.
        status: u16,
        /// The daemon's reason code.
        reason: String,
        /// The daemon's message.
        message: String,
    },
    /// topomgr did not admit the container.
    #[error("container {id} (pod {pod}) rejected: {reason}: {message}")]
    Rejected {
        /// The container.
        id: String,
        /// `namespace/name` of its pod.
        pod: String,
        /// topomgr's reason (`TopologyAffinityError`, a provider's).
        reason: String,
        /// What could not be aligned.
        message: String,
    },
}

/// What the hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// Admitted and attached.
    Placed(Attached),
    /// Left alone.
    Left(Skip),
    /// Released at poststop.
    Released,
    /// Nothing was held for it at poststop.
    NothingHeld,
}

/// The hook's settings.
#[derive(Debug, Clone)]
pub struct Hook {
    /// The daemon's socket.
    pub socket: PathBuf,
    /// The daemon's cgroup root (the containers' cgroups are made relative
    /// to it).
    pub cgroup_root: PathBuf,
    /// The deadline of each daemon call.
    pub deadline: Duration,
}

impl Hook {
    /// Run `stage` (or the state's) for the container whose state is
    /// `state`.
    pub fn run(&self, stage: Option<Stage>, state: &State) -> Result<Done, HookError> {
        let stage = match stage.or_else(|| Stage::of_status(&state.status)) {
            Some(s) => s,
            None => {
                return Err(HookError::UnknownStage {
                    id: state.id.clone(),
                    status: state.status.clone(),
                })
            }
        };
        match stage {
            Stage::CreateRuntime => self.create(state),
            Stage::Poststop => self.poststop(state),
        }
    }

    fn client(&self) -> Daemon {
        Daemon::with_deadline(&self.socket, self.deadline)
    }

    fn create(&self, state: &State) -> Result<Done, HookError> {
        let config = spec::read_config(&state.bundle)?;
        let annotations = config.annotations.unwrap_or_default();
        let linux = config.linux.unwrap_or_default();
        let resources = linux.resources.unwrap_or_default();
        let env = config.process.and_then(|p| p.env).unwrap_or_default();
        let mapping = map_container(&ContainerSpec {
            id: &state.id,
            name: None,
            annotations: &annotations,
            sandbox: None,
            cgroup_parent: linux.cgroups_path.as_deref(),
            resources: &resources,
            env: &env,
        })
        .map_err(|cause| HookError::Mapping {
            id: state.id.clone(),
            cause,
        })?;
        let request = match mapping {
            Mapping::Leave(skip) => {
                debug!(container = %state.id, why = %skip, "left alone");
                return Ok(Done::Left(skip));
            }
            Mapping::Admit(r) => r,
        };
        // The variables the device plugins' devices were read from go
        // with the admission, for the daemon to read them again.
        let device_env: Vec<String> = env
            .iter()
            .filter(|e| {
                e.split_once('=')
                    .is_some_and(|(k, _)| request.devices.iter().any(|d| d.variable == k))
            })
            .cloned()
            .collect();
        let devices = spec::container_devices(
            linux.devices.as_deref().unwrap_or_default(),
            &annotations,
            device_env,
        );
        let pid = state
            .pid
            .filter(|p| *p > 0)
            .ok_or_else(|| HookError::NoProcess(state.id.clone()))?;
        let cgroup_err = |cause| HookError::Cgroup {
            id: state.id.clone(),
            cause,
        };
        let cgroup = CgroupManager::detect(&self.cgroup_root)
            .and_then(|m| m.cgroup_of_process(pid))
            .map_err(cgroup_err)?
            .to_string();
        let start = topomgr_client::start_time(pid).ok_or_else(|| HookError::ProcessGone {
            id: state.id.clone(),
            pid,
        })?;
        let owner = OwnerSpec::container(ContainerRuntime::OciHook, &state.id)
            .with_process(pid, start)
            .with_cgroup(&cgroup);
        let pod = request.pod.view;
        let container = pod.containers[0].name.clone();
        let pod_name = format!("{}/{}", pod.namespace, pod.name);
        let request = AdmissionRequest {
            pod,
            owner,
            attach: Some(AttachTo { container, cgroup }),
            devices,
        };
        // Admitted and attached in one request; an attach that fails is
        // released again by the daemon (nothing is held for a container
        // that will not start).
        let (admission, attached) = self
            .client()
            .admit_and_attach(&request)
            .map_err(|e| daemon_error(e, "the admission", &state.id))?;
        match (admission.admitted, attached) {
            (true, Some(a)) => {
                info!(container = %state.id, cgroup = %a.cgroup, cpus = %a.cpus, mems = %a.mems, "container placed");
                Ok(Done::Placed(a))
            }
            _ => Err(HookError::Rejected {
                id: state.id.clone(),
                pod: pod_name,
                reason: admission.reason.unwrap_or_default(),
                message: admission.message.unwrap_or_default(),
            }),
        }
    }

    fn poststop(&self, state: &State) -> Result<Done, HookError> {
        match self.client().release(&state.id) {
            Ok(_) => {
                info!(container = %state.id, "container released");
                Ok(Done::Released)
            }
            Err(ClientError::Refused {
                status: 404,
                reason: Reason::UnknownPod,
                ..
            }) => Ok(Done::NothingHeld),
            Err(e) => Err(daemon_error(e, "the release", &state.id)),
        }
    }
}

/// A failed daemon call: its refusal of `what` for container `id`, or the
/// daemon not reached.
fn daemon_error(e: ClientError, what: &'static str, id: &str) -> HookError {
    match e {
        ClientError::Refused {
            status,
            reason,
            message,
            ..
        } => HookError::Refused {
            what,
            id: id.to_owned(),
            status,
            reason: reason.to_string(),
            message,
        },
        other => HookError::Daemon(other),
    }
}
