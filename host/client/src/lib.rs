//! topomgr's client of the daemon: the requests of the HTTP API
//! (`docs/api.md`, `docs/api/openapi.yaml`) over its Unix socket, each a
//! typed method of [`Daemon`] answering a type of the contract
//! (`topomgr_contract::api`), and every error answer a
//! [`ClientError::Refused`] with the API's [`Reason`]. The CLI, `topomgr
//! run` and the OCI hook talk to the daemon only through it; [`http`] is
//! the transport under it (the tests send raw requests with it).
//!
//! Blocking: each client drives its own current-thread runtime, one
//! connection kept alive between requests.
#![warn(missing_docs)]

pub mod http;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use topomgr_contract::api::{
    Admission, AdmissionRequest, Admissions, Attached, Explain, Health, Machine, PodList,
};
use topomgr_contract::nrt::NodeResourceTopology;

pub use http::encode_segment;

/// The reason code of an error answer (schema `Error`'s `reason`; the
/// OpenAPI document lists them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The manifest or owned admission does not parse or is not valid.
    BadManifest,
    /// A bad query, path or body.
    BadRequest,
    /// The owner of an owned admission is not valid or not running.
    BadOwner,
    /// The peer may not use this route.
    Forbidden,
    /// No admitted pod with that uid.
    UnknownPod,
    /// The pod has no container of that name.
    UnknownContainer,
    /// No such route.
    UnknownRoute,
    /// The route does not take the method.
    MethodNotAllowed,
    /// The body is too large.
    RequestTooLarge,
    /// The body's media type is not one the route takes.
    UnsupportedMediaType,
    /// The pod was admitted before the daemon started: no trace kept.
    NoTrace,
    /// The uid is admitted with a different spec.
    PodUidConflict,
    /// The uid is admitted for another owner.
    OwnerConflict,
    /// Providers failed to release.
    ReleaseErrors,
    /// The cgroup could not be written.
    CgroupError,
    /// The change could not be saved.
    StateNotSaved,
    /// The state cannot be saved (the daemon is failing).
    StateUnavailable,
    /// The daemon is stopping.
    ShuttingDown,
    /// The NodeResourceTopology export failed.
    ExportFailed,
    /// A daemon bug.
    Internal,
    /// A code this client does not know, as given (empty: the answer was
    /// not the API's error).
    Other(String),
}

impl Reason {
    /// The reason of code `code`.
    pub fn of(code: &str) -> Reason {
        match code {
            "BadManifest" => Reason::BadManifest,
            "BadRequest" => Reason::BadRequest,
            "BadOwner" => Reason::BadOwner,
            "Forbidden" => Reason::Forbidden,
            "UnknownPod" => Reason::UnknownPod,
            "UnknownContainer" => Reason::UnknownContainer,
            "UnknownRoute" => Reason::UnknownRoute,
            "MethodNotAllowed" => Reason::MethodNotAllowed,
            "RequestTooLarge" => Reason::RequestTooLarge,
            "UnsupportedMediaType" => Reason::UnsupportedMediaType,
            "NoTrace" => Reason::NoTrace,
            "PodUidConflict" => Reason::PodUidConflict,
            "OwnerConflict" => Reason::OwnerConflict,
            "ReleaseErrors" => Reason::ReleaseErrors,
            "CgroupError" => Reason::CgroupError,
            "StateNotSaved" => Reason::StateNotSaved,
            "StateUnavailable" => Reason::StateUnavailable,
            "ShuttingDown" => Reason::ShuttingDown,
            "ExportFailed" => Reason::ExportFailed,
            "Internal" => Reason::Internal,
            other => Reason::Other(other.to_owned()),
        }
    }

    /// The code as the API writes it.
    pub fn as_str(&self) -> &str {
        match self {
            Reason::BadManifest => "BadManifest",
            Reason::BadRequest => "BadRequest",
            Reason::BadOwner => "BadOwner",
            Reason::Forbidden => "Forbidden",
            Reason::UnknownPod => "UnknownPod",
            Reason::UnknownContainer => "UnknownContainer",
            Reason::UnknownRoute => "UnknownRoute",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::RequestTooLarge => "RequestTooLarge",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::NoTrace => "NoTrace",
            Reason::PodUidConflict => "PodUidConflict",
            Reason::OwnerConflict => "OwnerConflict",
            Reason::ReleaseErrors => "ReleaseErrors",
            Reason::CgroupError => "CgroupError",
            Reason::StateNotSaved => "StateNotSaved",
            Reason::StateUnavailable => "StateUnavailable",
            Reason::ShuttingDown => "ShuttingDown",
            Reason::ExportFailed => "ExportFailed",
            Reason::Internal => "Internal",
            Reason::Other(code) => code,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a connect failed, said of the socket, and what to do. The common
/// cases are put in words of our own: Podman reads an OCI hook's error
/// text, and a "no such file or directory" in it makes Podman report the
/// container's command as not found (exit 127) when it is the daemon that
/// is down.
fn connect_cause(cause: &io::Error) -> String {
    const NOT_THERE: &str =
        "(is `topomgr serve` running there? pass --socket PATH or set [daemon] socket)";
    match cause.kind() {
        io::ErrorKind::NotFound => format!("no socket there (ENOENT) {NOT_THERE}"),
        io::ErrorKind::ConnectionRefused => {
            format!("the socket is there but nothing listens on it (ECONNREFUSED) {NOT_THERE}")
        }
        io::ErrorKind::PermissionDenied => "permission denied (EACCES): the socket is for root and the members of its group; run this as root, or as a member of the group that [daemon] group names (default topomgr)".to_owned(),
        _ => format!("{cause} {NOT_THERE}"),
    }
}

/// Errors talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error("cannot connect to the topomgr daemon at {}: {}", path.display(), connect_cause(cause))]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The error.
        cause: io::Error,
    },
    /// The connection failed mid-request.
    #[error("talking to the topomgr daemon at {}: {cause}", path.display())]
    Http {
        /// The socket.
        path: PathBuf,
        /// The error.
        cause: hyper::Error,
    },
    /// No answer within the client's deadline.
    #[error("the topomgr daemon at {} did not answer {route} within {} ms; see its log (journalctl -u topomgr) and GET /v1/health", path.display(), after.as_millis())]
    Timeout {
        /// The socket.
        path: PathBuf,
        /// The request.
        route: String,
        /// The deadline.
        after: Duration,
    },
    /// The client's own I/O runtime could not be created.
    #[error("cannot start the daemon client's I/O runtime: {cause}")]
    Runtime {
        /// The error.
        cause: io::Error,
    },
    /// The answer is not valid HTTP or not the expected JSON.
    #[error("unexpected answer from the topomgr daemon: {message}")]
    BadResponse {
        /// What was wrong.
        message: String,
    },
    /// A request this client will not send.
    #[error("{message}")]
    BadRequest {
        /// What is wrong with it.
        message: String,
    },
    /// The daemon answered with an error (`{"error", "reason"}`).
    #[error("the topomgr daemon refused {route} ({status}): {message}")]
    Refused {
        /// The request (`POST /v1/pods`).
        route: String,
        /// The HTTP status.
        status: u16,
        /// The API's reason code.
        reason: Reason,
        /// The daemon's message (the body, when it is not the API's error).
        message: String,
    },
}

impl ClientError {
    /// The API's reason, when the daemon refused the request.
    pub fn reason(&self) -> Option<&Reason> {
        match self {
            ClientError::Refused { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// A typed client of one daemon socket.
#[derive(Debug)]
pub struct Daemon {
    http: http::Client,
}

impl Daemon {
    /// A client of the daemon at `socket` (connects on first use).
    pub fn new(socket: &Path) -> Daemon {
        Daemon {
            http: http::Client::new(socket),
        }
    }

    /// A client that gives up on a request not answered within `deadline`
    /// (connecting and a resend included): [`ClientError::Timeout`].
    pub fn with_deadline(socket: &Path, deadline: Duration) -> Daemon {
        Daemon {
            http: http::Client::with_deadline(socket, deadline),
        }
    }

    /// The daemon's socket.
    pub fn socket(&self) -> &Path {
        self.http.socket()
    }

    /// `GET /v1/health`. A failing daemon answers 503 with its health: that
    /// is a [`Health`] too (status `failing`), not an error.
    pub fn health(&mut self) -> Result<Health, ClientError> {
        let r = self.http.get("/v1/health")?;
        match r.parse::<Health>() {
            Ok(h) => Ok(h),
            Err(_) if !r.is_success() => Err(r.refusal()),
            Err(e) => Err(e),
        }
    }

    /// `GET /v1/machine`.
    pub fn machine(&mut self) -> Result<Machine, ClientError> {
        self.http.get("/v1/machine")?.into_typed()
    }

    /// `GET /v1/pods`.
    pub fn pods(&mut self) -> Result<PodList, ClientError> {
        self.http.get("/v1/pods")?.into_typed()
    }

    /// `GET /v1/pods/{uid}`.
    pub fn pod(&mut self, uid: &str) -> Result<Admission, ClientError> {
        self.http
            .get(&format!("/v1/pods/{}", encode_segment(uid)))?
            .into_typed()
    }

    /// `POST /v1/pods`: admit the Pod manifests of `manifest` (YAML or
    /// JSON), in order.
    pub fn admit(&mut self, manifest: &str) -> Result<Admissions, ClientError> {
        self.http.admit(manifest)?.into_typed()
    }

    /// `POST /v1/pods` as an owned admission: one pod and its owner; its
    /// admission (admitted or not).
    pub fn admit_owned(&mut self, request: &AdmissionRequest) -> Result<Admission, ClientError> {
        self.owned(request).map(|(admission, _)| admission)
    }

    /// `POST /v1/pods` as an owned admission with `attach`: admitted and
    /// attached in one request. The admission, and what the attach wrote
    /// when the pod was admitted; a failed attach is the error (the daemon
    /// released the admission again).
    pub fn admit_and_attach(
        &mut self,
        request: &AdmissionRequest,
    ) -> Result<(Admission, Option<Attached>), ClientError> {
        if request.attach.is_none() {
            return Err(ClientError::BadRequest {
                message: "admit_and_attach: the request names no container to attach".into(),
            });
        }
        let (admission, attached) = self.owned(request)?;
        if admission.admitted && attached.is_none() {
            return Err(ClientError::BadResponse {
                message: format!(
                    "POST /v1/pods admitted pod {:?} but answered no attach (a daemon older than the admit-and-attach request?)",
                    admission.uid
                ),
            });
        }
        Ok((admission, attached))
    }

    fn owned(
        &mut self,
        request: &AdmissionRequest,
    ) -> Result<(Admission, Option<Attached>), ClientError> {
        let r = self.http.admit_owned(request)?;
        let route = r.route.clone();
        let answer: Admissions = r.into_typed()?;
        let attached = answer.attached;
        let admission = answer
            .pods
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::BadResponse {
                message: format!("{route} answered no pod"),
            })?;
        Ok((admission, attached))
    }

    /// `POST /v1/pods/{uid}/containers/{container}/attach`: write the
    /// container's cpuset and memory nodes into `cgroup` (relative to the
    /// cgroup root).
    pub fn attach(
        &mut self,
        uid: &str,
        container: &str,
        cgroup: &str,
    ) -> Result<Attached, ClientError> {
        self.http.attach(uid, container, cgroup)?.into_typed()
    }

    /// `DELETE /v1/pods/{uid}`: the released pod's admission.
    pub fn release(&mut self, uid: &str) -> Result<Admission, ClientError> {
        self.http.release(uid)?.into_typed()
    }

    /// `GET /v1/pods/{uid}/explain`: the decision trace of an admitted or
    /// recently rejected pod.
    pub fn explain(&mut self, uid: &str) -> Result<Explain, ClientError> {
        self.http
            .get(&format!("/v1/pods/{}/explain", encode_segment(uid)))?
            .into_typed()
    }

    /// `GET /v1/noderesourcetopology`.
    pub fn nrt(&mut self) -> Result<NodeResourceTopology, ClientError> {
        self.http.get("/v1/noderesourcetopology")?.into_typed()
    }
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`, clock
/// ticks after boot), as an owner is told ([`topomgr_contract::api::OwnerSpec`]);
/// `None` when there is no such process.
pub fn start_time(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    topomgr_contract::owner::ProcStat::parse(&text).map(|s| s.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_answer_is_a_refusal_with_its_reason() {
        let answer = |status: u16, body: &str| http::Response {
            route: "DELETE /v1/pods/u".to_owned(),
            status,
            body: body.as_bytes().to_vec(),
        };
        let err = answer(
            404,
            r#"{"error": "no admitted pod with uid \"u\"", "reason": "UnknownPod"}"#,
        )
        .into_typed::<Admission>()
        .unwrap_err();
        assert_eq!(err.reason(), Some(&Reason::UnknownPod));
        assert_eq!(
            err.to_string(),
            r#"the topomgr daemon refused DELETE /v1/pods/u (404): no admitted pod with uid "u""#
        );
        let err = answer(500, r#"{"error": "e", "reason": "SomethingNew"}"#)
            .into_typed::<Admission>()
            .unwrap_err();
        assert_eq!(err.reason(), Some(&Reason::Other("SomethingNew".into())));
        let err = answer(502, "bad gateway")
            .into_typed::<Admission>()
            .unwrap_err();
        assert_eq!(err.reason(), Some(&Reason::Other(String::new())));
        assert!(err.to_string().ends_with("(502): bad gateway"), "{err}");
        // Every code the OpenAPI document lists reads as itself.
        let doc = include_str!("../../../docs/api/openapi.yaml");
        let list = doc
            .lines()
            .find_map(|l| l.trim().strip_prefix("enum: [BadManifest"))
            .expect("the Error schema's reason enum");
        for code in format!("BadManifest{list}")
            .trim_end_matches(']')
            .split(", ")
        {
            let reason = Reason::of(code);
            assert!(!matches!(reason, Reason::Other(_)), "{code} is not known");
            assert_eq!(reason.as_str(), code);
        }
    }

    #[test]
    fn the_start_time_of_this_process_is_read() {
        let me = start_time(std::process::id()).expect("/proc/self/stat");
        assert!(me > 0);
        assert_eq!(start_time(u32::MAX), None);
    }
}
