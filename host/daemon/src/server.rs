//! The HTTP/JSON API on the Unix socket (axum over `tokio::net::UnixListener`).
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/v1/health` | `{"status": "ok"|"degraded"|"failing", "pods", "notes", "failure", "nri", "conflicts"}` |
//! | GET | `/v1/machine` | the discovered machine as last read (at start, at the last reload; the JSON of `topomgr topology`) |
//! | POST | `/v1/pods` | admit the Pod manifest(s) of the body (YAML or JSON): the JSON of `topomgr admit`; with `?dry_run=true&explain=true` a what-if that changes nothing: `{"pods": [decision trace, ...]}` ([`topomgr_engine::explain`]); with content type [`OWNED_ADMISSION`] the body is an [`AdmissionRequest`] (one pod and its owner, recorded with it; with `attach`, a container attached in the same request, `attached` in the answer) |
//! | GET | `/v1/pods` | `{"pods": [...], "attachments": {uid: {container: cgroup}}, "owners": {uid: owner}}` |
//! | GET | `/v1/pods/{uid}` | one pod's admission JSON |
//! | GET | `/v1/pods/{uid}/explain` | the decision trace of an admitted or recently rejected pod |
//! | DELETE | `/v1/pods/{uid}` | release the pod; answers its admission JSON |
//! | POST | `/v1/pods/{uid}/containers/{container}/attach` | body `{"cgroup": "path"}`: write the container's cpuset/mems |
//! | GET | `/v1/noderesourcetopology` | the node's NodeResourceTopology object ([`topomgr_node::nrt`]) |
//! | GET | `/metrics` | Prometheus text |
//!
//! Errors are `{"error": "<message>", "reason": "<code>"}` with status 400
//! (bad input), 403 (peer not allowed), 404 (unknown pod, container or
//! route), 405 (a route that does not take the method), 415 (a body that is
//! not `application/json` or `application/yaml`, by its `Content-Type`), 409
//! (a uid admitted with a different spec), 422 (cgroup problem), 500
//! (provider errors on release), 503 (state cannot be saved, or shutting
//! down). `docs/api/openapi.yaml` documents the same. Every answer is one
//! of the types of [`topomgr_node::api`].

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::DefaultBodyLimit;
use axum::extract::{ConnectInfo, Path as UrlPath, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio::net::UnixListener;
use topomgr_sdk::Machine;
use tracing::{debug, info, warn};

use super::access::{AccessPolicy, Peer};
use super::listener::Limits;
use super::metrics::{Metrics, BAD_MANIFEST};
use super::state_thread::{Command, CommandError, Reply, StateThread};
use topomgr_engine::admission::AdmitResult;
use topomgr_node::api::{
    Admission, AdmissionRequest, Admissions, AttachRequest, AttachTo, Attached, ErrorBody, Explain,
    Explains, Health, HealthStatus, PodList, OWNED_ADMISSION,
};
use topomgr_node::nrt::NodeResourceTopology;
use topomgr_node::state::pod_list;

/// Shared state of the handlers.
#[derive(Clone)]
pub(crate) struct AppState {
    /// The thread that owns the node state.
    pub state_thread: StateThread,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Who may connect.
    pub access: Arc<AccessPolicy>,
    /// The NRI plugin's status.
    pub nri: Arc<crate::nri::NriStatus>,
    /// The NodeResourceTopology push's status (`[kubernetes]`).
    pub nrt_push: Option<topomgr_kube::nrt_push::PushStatusHandle>,
    /// Where the CDI devices of an owned admission's devices are found.
    pub cdi: crate::cdi::Resolver,
}

/// Credentials of the peer of one connection, taken at accept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerConn(pub Option<Peer>);

impl PeerConn {
    /// The credentials of the peer of `stream`.
    pub(crate) fn of(stream: &tokio::net::UnixStream) -> PeerConn {
        PeerConn(stream.peer_cred().ok().map(|c| Peer {
            uid: c.uid(),
            gid: c.gid(),
            pid: c.pid(),
        }))
    }
}

/// An error answer.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    reason: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            reason,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: self.message,
                reason: self.reason.to_owned(),
            }),
        )
            .into_response()
    }
}

/// A path segment that does not decode (bad percent-encoding, not UTF-8).
impl From<PathRejection> for ApiError {
    fn from(e: PathRejection) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("{}; docs/api/openapi.yaml lists the API", e.body_text()),
        )
    }
}

/// A request body that is too large or could not be read.
impl From<BytesRejection> for ApiError {
    fn from(e: BytesRejection) -> ApiError {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestTooLarge",
                format!(
                    "the request body is larger than {} bytes (3 MiB, the Kubernetes API server's limit, as for manifest files); send fewer pods per request",
                    MAX_BODY_BYTES
                ),
            )
        } else {
            ApiError::new(
                e.status(),
                "BadRequest",
                format!("cannot read the request body: {}", e.body_text()),
            )
        }
    }
}

/// The largest request body: the manifest size limit of the CLI.
pub const MAX_BODY_BYTES: usize = topomgr_manifest::MAX_MANIFEST_BYTES as usize;

impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> ApiError {
        let (status, reason) = match &e {
            CommandError::UnknownPod(_) => (StatusCode::NOT_FOUND, "UnknownPod"),
            CommandError::UnknownContainer(_) => (StatusCode::NOT_FOUND, "UnknownContainer"),
            CommandError::Conflict(_) => (StatusCode::CONFLICT, "PodUidConflict"),
            CommandError::OwnerConflict(_) => (StatusCode::CONFLICT, "OwnerConflict"),
            CommandError::BadOwner(_) => (StatusCode::BAD_REQUEST, "BadOwner"),
            CommandError::ReleaseErrors(_) => (StatusCode::INTERNAL_SERVER_ERROR, "ReleaseErrors"),
            CommandError::Cgroup(_) => (StatusCode::UNPROCESSABLE_ENTITY, "CgroupError"),
            CommandError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "StateNotSaved"),
            CommandError::Broken(_) => (StatusCode::SERVICE_UNAVAILABLE, "StateUnavailable"),
            CommandError::Stopped => (StatusCode::SERVICE_UNAVAILABLE, "ShuttingDown"),
            CommandError::Export(_) => (StatusCode::INTERNAL_SERVER_ERROR, "ExportFailed"),
            CommandError::Reload(_) => (StatusCode::INTERNAL_SERVER_ERROR, "ReloadFailed"),
        };
        ApiError::new(status, reason, e.to_string())
    }
}

/// The router with every endpoint and the peer-credential check.
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/machine", get(machine))
        .route("/v1/pods", post(admit).get(list_pods))
        .route("/v1/pods/{uid}", get(get_pod).delete(release_pod))
        .route("/v1/pods/{uid}/explain", get(explain_pod))
        .route("/v1/pods/{uid}/containers/{container}/attach", post(attach))
        .route("/v1/noderesourcetopology", get(node_resource_topology))
        .route("/metrics", get(metrics))
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(super::listener::body_deadline))
        .layer(middleware::from_fn_with_state(state.clone(), check_peer))
        .with_state(state)
}

async fn unknown_route(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "UnknownRoute",
        format!(
            "no route {method} {}; docs/api/openapi.yaml lists the API",
            uri.path()
        ),
    )
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!(
            "{} does not take {method}; docs/api/openapi.yaml lists the API",
            uri.path()
        ),
    )
}

async fn check_peer(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<PeerConn>,
    req: Request,
    next: Next,
) -> Response {
    let allowed = match peer.0 {
        Some(p) => state.access.check(&p),
        None => {
            tracing::warn!("connection refused: peer credentials unavailable");
            false
        }
    };
    if !allowed {
        let who = peer
            .0
            .map(|p| format!("uid {} gid {}", p.uid, p.gid))
            .unwrap_or_else(|| "unknown peer".to_owned());
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "{who} may not use topomgr: only root and members of group {:?} may",
                state.access.group
            ),
        )
        .into_response();
    }
    next.run(req).await
}

async fn health(State(state): State<AppState>) -> Response {
    let nri = state.nri.health();
    let mut nri_notes = state.nri.notes();
    nri_notes.extend(state.nrt_push.as_ref().and_then(|p| p.note()));
    let body = state.state_thread.read(|snap| {
        Health::new(
            snap.pods.len(),
            snap.exclusive_cpus.clone(),
            snap.shared_pool.clone(),
            snap.restore_notes
                .iter()
                .chain(&snap.reload_notes)
                .chain(&nri_notes)
                .cloned()
                .collect(),
            snap.failure.clone(),
            nri,
            snap.conflicts.clone(),
        )
    });
    let code = match body.status {
        HealthStatus::Failing => StatusCode::SERVICE_UNAVAILABLE,
        HealthStatus::Ok | HealthStatus::Degraded => StatusCode::OK,
    };
    (code, Json(body)).into_response()
}

async fn machine(State(state): State<AppState>) -> Json<Machine> {
    Json(state.state_thread.read(|v| v.machine.as_ref().clone()))
}

/// Query of `POST /v1/pods`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdmitQuery {
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    explain: bool,
}

/// An owned admission: one pod and its owner ([`AdmissionRequest`]).
async fn admit_owned(state: &AppState, body: &[u8]) -> Result<Response, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let request: AdmissionRequest = serde_path_to_error::deserialize(de).map_err(|e| {
        state.metrics.request_refused(BAD_MANIFEST);
        let at = e.path().to_string();
        ApiError::new(
            StatusCode::BAD_REQUEST,
            BAD_MANIFEST,
            format!(
                "the {OWNED_ADMISSION} body{}: {} (expected {{\"pod\": <pod>, \"owner\": <owner>}}; docs/api/openapi.yaml, schema AdmissionRequest)",
                if at == "." { String::new() } else { format!(" at {at}") },
                e.inner()
            ),
        )
    })?;
    request.check_pod().map_err(|e| {
        state.metrics.request_refused(BAD_MANIFEST);
        ApiError::new(StatusCode::BAD_REQUEST, BAD_MANIFEST, e)
    })?;
    debug!(pod = %request.pod.uid, owner = ?request.owner.kind, "owned admission requested");
    let uid = request.pod.uid.clone();
    // The container's devices as the NRI face finds them: those its
    // environment's device-plugin variables name, and its CDI devices by
    // annotation and by node (one resolver for both faces).
    let assigned = match &request.devices {
        Some(d) if !d.is_empty() => {
            let mut devices = topomgr_runtime::env_devices(&d.env).map_err(|e| {
                state.metrics.request_refused(BAD_MANIFEST);
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    BAD_MANIFEST,
                    format!("devices.env: {e}"),
                )
            })?;
            let who = match &request.owner.id {
                Some(id) => format!("container {id}"),
                None => format!("pod {uid}"),
            };
            devices.extend(state.cdi.resolve(&who, &d.cdi_annotations, &d.nodes, &[]));
            crate::cdi::assigned(&devices)
        }
        _ => Default::default(),
    };
    let cmd = Command::AdmitOwned {
        pod: request.pod,
        owner: request.owner,
        assigned,
    };
    let pods: Vec<Admission> = match state.state_thread.submit(cmd).await? {
        Reply::Admitted(results) => results.iter().map(Admission::from).collect(),
        other => return Err(unexpected(&other)),
    };
    let admitted = pods.first().is_some_and(|p| p.admitted);
    let attached = match request.attach {
        Some(to) if admitted => Some(attach_or_release(state, uid, to).await?),
        _ => None,
    };
    Ok(Json(Admissions { pods, attached }).into_response())
}

/// The attach of an owned admission with `attach`; when it fails, the
/// admission is released again (nothing is held for a container that will
/// not start) and the attach's error is the answer.
async fn attach_or_release(
    state: &AppState,
    uid: String,
    to: AttachTo,
) -> Result<Attached, ApiError> {
    let cmd = Command::Attach {
        uid: uid.clone(),
        container: to.container,
        cgroup: to.cgroup,
    };
    let failed = match state.state_thread.submit(cmd).await {
        Ok(Reply::Attached(a)) => return Ok(a),
        Ok(other) => unexpected(&other),
        Err(e) => ApiError::from(e),
    };
    match state
        .state_thread
        .submit(Command::Release(uid.clone()))
        .await
    {
        Ok(Reply::Released(_)) => {}
        Ok(other) => {
            warn!(pod = %uid, reply = ?other, "unexpected reply to the release after a failed attach")
        }
        Err(e) => {
            warn!(pod = %uid, error = %e, "cannot release after a failed attach; the pod is reclaimed once its owner is gone")
        }
    }
    Err(failed)
}

/// The media types `POST /v1/pods` takes: Pod manifests (YAML under each
/// name in use), then an owned admission ([`OWNED_ADMISSION`]).
const ADMIT_TYPES: [&str; 6] = [
    "application/json",
    "application/yaml",
    "application/x-yaml",
    "text/yaml",
    "text/x-yaml",
    OWNED_ADMISSION,
];

/// The request's media type (its `Content-Type`, parameters aside), one of
/// `accepted`; any other, or none, is refused, as the API server refuses
/// media types it cannot decode.
fn require_content_type(
    headers: &HeaderMap,
    accepted: &[&'static str],
    route: &str,
) -> Result<&'static str, ApiError> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let media = given.as_deref().map(|v| {
        v.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    if let Some(known) = media
        .as_deref()
        .and_then(|m| accepted.iter().find(|a| **a == m))
    {
        return Ok(*known);
    }
    let what = match &given {
        Some(v) => format!("Content-Type {v:?} is not accepted"),
        None => "the request has no Content-Type".to_owned(),
    };
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UnsupportedMediaType",
        format!(
            "{what}: {route} takes {} (with curl: -H 'Content-Type: {}')",
            accepted.join(" or "),
            accepted[accepted.len().min(2) - 1]
        ),
    ))
}

async fn admit(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<AdmitQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let media_type = require_content_type(&headers, &ADMIT_TYPES, "POST /v1/pods")?;
    let Query(query) = query.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "{} (POST /v1/pods takes dry_run=true&explain=true)",
                e.body_text()
            ),
        )
    })?;
    if query.dry_run != query.explain {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "dry_run and explain go together: POST /v1/pods?dry_run=true&explain=true answers the decision traces of a what-if; GET /v1/pods/{uid}/explain explains an admission",
        ));
    }
    let body = body?;
    if media_type == OWNED_ADMISSION {
        if query.dry_run {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!(
                    "a dry run takes Pod manifests, not an owned admission ({OWNED_ADMISSION})"
                ),
            ));
        }
        return admit_owned(&state, &body).await;
    }
    let text = std::str::from_utf8(&body).map_err(|e| {
        state.metrics.request_refused(BAD_MANIFEST);
        ApiError::new(
            StatusCode::BAD_REQUEST,
            BAD_MANIFEST,
            format!("request body is not UTF-8: {e}"),
        )
    })?;
    let pods = topomgr_manifest::parse_pods(text, "<request body>").map_err(|e| {
        state.metrics.request_refused(BAD_MANIFEST);
        ApiError::new(StatusCode::BAD_REQUEST, BAD_MANIFEST, e.to_string())
    })?;
    if query.dry_run {
        return match state.state_thread.submit(Command::DryRun(pods)).await? {
            Reply::DryRun(pods) => Ok(Json(Explains { pods }).into_response()),
            other => Err(unexpected(&other)),
        };
    }
    debug!(pods = pods.len(), "admission requested");
    match state.state_thread.submit(Command::Admit(pods)).await? {
        Reply::Admitted(results) => Ok(Json(Admissions {
            pods: results.iter().map(Admission::from).collect(),
            attached: None,
        })
        .into_response()),
        other => Err(unexpected(&other)),
    }
}

fn unexpected(reply: &Reply) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        format!("the state thread answered with an unexpected reply: {reply:?}"),
    )
}

async fn list_pods(State(state): State<AppState>) -> Json<PodList> {
    let (pods, pool, attachments, owners) = state.state_thread.read(|snap| {
        let pods: Vec<Arc<AdmitResult>> = snap.pods.values().cloned().collect();
        (
            pods,
            snap.shared_pool.clone(),
            snap.attachments.clone(),
            snap.owners.clone(),
        )
    });
    Json(pod_list(
        pods.iter().map(AsRef::as_ref),
        &pool,
        &attachments,
        &owners,
    ))
}

async fn get_pod(
    State(state): State<AppState>,
    uid: Result<UrlPath<String>, PathRejection>,
) -> Result<Json<Admission>, ApiError> {
    let UrlPath(uid) = uid?;
    let pod = state.state_thread.read(|snap| {
        snap.pods
            .get(&uid)
            .map(|r| Admission::from(snap.current(r).as_ref()))
    });
    pod.map(Json)
        .ok_or_else(|| CommandError::UnknownPod(uid).into())
}

async fn explain_pod(
    State(state): State<AppState>,
    uid: Result<UrlPath<String>, PathRejection>,
) -> Result<Json<Explain>, ApiError> {
    let UrlPath(uid) = uid?;
    let (trace, admitted) = state
        .state_thread
        .read(|snap| (snap.explains.get(&uid), snap.pods.contains_key(&uid)));
    match trace {
        Some(explain) => Ok(Json(explain)),
        None if admitted => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "NoTrace",
            format!("pod {uid:?} was admitted before this daemon started; its decision trace was not kept"),
        )),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "UnknownPod",
            format!("no admitted or recently rejected pod with uid {uid:?} (the last {} rejections are kept, up to {} MiB of their traces)", topomgr_engine::explain::REJECTED_KEPT, topomgr_engine::explain::REJECTED_BYTES >> 20),
        )),
    }
}

async fn release_pod(
    State(state): State<AppState>,
    uid: Result<UrlPath<String>, PathRejection>,
) -> Result<Json<Admission>, ApiError> {
    let UrlPath(uid) = uid?;
    match state.state_thread.submit(Command::Release(uid)).await? {
        Reply::Released(r) => Ok(Json(Admission::from(&r))),
        other => Err(unexpected(&other)),
    }
}

async fn attach(
    State(state): State<AppState>,
    path: Result<UrlPath<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Attached>, ApiError> {
    let UrlPath((uid, container)) = path?;
    require_content_type(&headers, &["application/json"], "POST .../attach")?;
    let body = body?;
    let b: AttachRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("attach body must be {{\"cgroup\": \"<path under the cgroup root>\"}}: {e}"),
        )
    })?;
    let cmd = Command::Attach {
        uid,
        container,
        cgroup: b.cgroup,
    };
    match state.state_thread.submit(cmd).await? {
        Reply::Attached(a) => Ok(Json(a)),
        other => Err(unexpected(&other)),
    }
}

async fn node_resource_topology(
    State(state): State<AppState>,
) -> Result<Json<NodeResourceTopology>, ApiError> {
    match state
        .state_thread
        .submit(Command::NodeResourceTopology)
        .await?
    {
        Reply::NodeResourceTopology(object) => Ok(Json(object)),
        other => Err(unexpected(&other)),
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    super::scrape::response(&state.metrics)
}

/// Serve `state` on `listener` within `limits` until `shutdown` completes,
/// then remove `socket`.
pub(crate) async fn serve(
    listener: UnixListener,
    socket: PathBuf,
    state: AppState,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = &listener;
    let accept = move || async move {
        let (stream, _) = listener.accept().await?;
        let peer = PeerConn::of(&stream);
        let key = peer.0.map_or(super::listener::PeerKey::Unknown, |p| {
            super::listener::PeerKey::Uid(p.uid)
        });
        Ok((stream, peer, key))
    };
    super::listener::serve("socket", limits, accept, router(state), shutdown).await;
    if let Err(e) = std::fs::remove_file(&socket) {
        debug!(socket = %socket.display(), error = %e, "socket not removed");
    }
    info!(socket = %socket.display(), "stopped serving");
    Ok(())
}
