//! One connection to the runtime: registration, serving the plugin's
//! service on connection 1 and calling the runtime's on connection 2.
//!
//! Tasks: a reader owns the socket's read half and reassembles the ttrpc
//! messages of both connections; requests of the runtime go, in order, to
//! the server loop, which runs them one at a time through the [`Plugin`];
//! answers to our calls complete the waiting [`RuntimeClient`] call. Writes
//! (answers and calls) take the write half under a lock, one whole message
//! at a time. All of it lives in the future of [`connect_and_serve`], so
//! dropping that future closes the connection.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};
use tracing::{debug, info, warn};

use crate::api::ConfigureRequest;
use crate::budget;
use crate::error::NriError;
use crate::events::EventMask;
use crate::mux::{self, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::plugin::{self, Plugin};
use crate::runtime_client::{RuntimeClient, Shared};
use crate::ttrpc::{self, Code, Decoder, Inbound, Status, TYPE_REQUEST, TYPE_RESPONSE};

/// Requests of the runtime read but not yet handled; the runtime sends one
/// at a time, so this only bounds a misbehaving peer.
const REQUEST_QUEUE: usize = 64;

/// How long after accepting the registration the runtime may take to send
/// Synchronize before the connection is given up. A connection that got no
/// Synchronize follows nothing (no event is sent to a plugin before it is
/// synchronized), so it is closed and made again rather than reported as
/// connected for ever (seen once in about 60 runs against containerd
/// 1.7.24: registered, containerd logged "Synchronizing NRI (plugin)", and
/// no Synchronize came). It is long because containerd 2.x holds a new
/// plugin's Synchronize while the CRI stops a container, its grace period
/// included (the CRI plugin blocks plugin sync around StopContainer): a
/// short deadline would disconnect and register again in a loop beside a
/// pod with a long grace period, never synchronizing. containers/nri-plugins'
/// stub sets no deadline at all; this one keeps the retry for a runtime
/// that never sends it.
const SYNCHRONIZE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// How long after the registration a missing Synchronize is reported
/// ([`Progress::AwaitingSynchronize`], logged): the adaptation synchronizes
/// a plugin at once unless the runtime holds it.
const SYNCHRONIZE_NOTE: std::time::Duration = std::time::Duration::from_secs(15);

/// What [`serve`] reports while a connection is made.
#[derive(Debug)]
pub(crate) enum Progress {
    /// The runtime accepted the registration.
    Registered(RuntimeClient),
    /// No Synchronize yet, `waited` after the registration.
    AwaitingSynchronize { waited: std::time::Duration },
    /// The first Synchronize came after an [`Progress::AwaitingSynchronize`].
    Synchronized,
}

/// The name, index and events a plugin registers with.
#[derive(Clone, Debug)]
pub(crate) struct Registration {
    pub name: String,
    pub index: String,
    pub events: EventMask,
    /// [`SYNCHRONIZE_DEADLINE`]; shorter in tests.
    pub synchronize_deadline: std::time::Duration,
    /// [`SYNCHRONIZE_NOTE`]; shorter in tests.
    pub synchronize_note: std::time::Duration,
}

impl Registration {
    /// Checks what the runtime would refuse (upstream `CheckPluginIndex`: two
    /// digits) before connecting.
    pub(crate) fn new(name: &str, index: &str, events: EventMask) -> Result<Self, NriError> {
        if name.is_empty() {
            return Err(NriError::InvalidRegistration(
                "the plugin name is empty; give the plugin a name such as \"topomgr\"".into(),
            ));
        }
        if name.contains('/') || name.chars().any(char::is_whitespace) {
            return Err(NriError::InvalidRegistration(format!(
                "the plugin name {name:?} contains '/' or whitespace; use letters, digits and '-'"
            )));
        }
        if index.len() != 2 || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NriError::InvalidRegistration(format!(
                "the plugin index {index:?} is not two digits; use \"00\" to \"99\" (plugins are called in ascending index order)"
            )));
        }
        if events.is_empty() {
            return Err(NriError::InvalidRegistration(
                "the plugin subscribes to no event (the runtime would then send it every event)"
                    .into(),
            ));
        }
        Ok(Registration {
            name: name.to_owned(),
            index: index.to_owned(),
            events,
            synchronize_deadline: SYNCHRONIZE_DEADLINE,
            synchronize_note: SYNCHRONIZE_NOTE,
        })
    }
}

/// Connects to the runtime's NRI socket, registers as `name` at `index`
/// subscribed to `events`, and serves `handler` until the runtime closes the
/// connection (`Ok`) or the connection fails (`Err`). Registration errors
/// (an invalid name or index, a runtime that refuses or does not answer)
/// are returned before any event is served.
pub async fn connect_and_serve<P: Plugin>(
    socket: &Path,
    name: &str,
    index: &str,
    events: EventMask,
    handler: Arc<P>,
) -> Result<(), NriError> {
    let registration = Registration::new(name, index, events)?;
    let stream = connect(socket).await?;
    serve(stream, &registration, handler, |_| {}).await
}

pub(crate) async fn connect(socket: &Path) -> Result<UnixStream, NriError> {
    UnixStream::connect(socket)
        .await
        .map_err(|cause| NriError::Connect {
            socket: socket.to_owned(),
            cause,
        })
}

/// Serves one connection already made; `on_progress` hears when the
/// runtime accepted the registration and whether Synchronize is late.
pub(crate) async fn serve<P, S>(
    stream: S,
    registration: &Registration,
    handler: Arc<P>,
    mut on_progress: impl FnMut(Progress),
) -> Result<(), NriError>
where
    P: Plugin,
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read_half, write_half) = tokio::io::split(stream);
    let shared = Arc::new(Shared::new(Box::new(write_half)));
    let client = RuntimeClient::new(shared.clone());
    let (requests_tx, requests_rx) = mpsc::channel(REQUEST_QUEUE);

    let reader = read_loop(read_half, &shared, requests_tx);
    let synchronized = AtomicBool::new(false);
    let sync_came = tokio::sync::Notify::new();
    let server = serve_loop(
        requests_rx,
        &shared,
        &*handler,
        &client,
        registration.events,
        (&synchronized, &sync_came),
    );
    let registered = AtomicBool::new(false);
    let register = async {
        match client
            .register(&registration.name, &registration.index)
            .await
        {
            Ok(()) => {
                debug!(name = %registration.name, index = %registration.index, "registered with the runtime");
                registered.store(true, Ordering::SeqCst);
                on_progress(Progress::Registered(client.clone()));
                let note = registration
                    .synchronize_note
                    .min(registration.synchronize_deadline);
                let came = sync_came.notified();
                tokio::pin!(came);
                came.as_mut().enable();
                if synchronized.load(Ordering::SeqCst) {
                    return std::future::pending::<NriError>().await;
                }
                if tokio::time::timeout(note, came.as_mut()).await.is_ok() {
                    return std::future::pending::<NriError>().await;
                }
                warn!(waited = ?note, deadline = ?registration.synchronize_deadline, "registered, but the runtime has not sent Synchronize yet; waiting (containerd 2.x holds it while a container is being stopped, for its grace period)");
                on_progress(Progress::AwaitingSynchronize { waited: note });
                let rest = registration.synchronize_deadline.saturating_sub(note);
                if tokio::time::timeout(rest, came.as_mut()).await.is_err() {
                    return NriError::NoSynchronize {
                        after: registration.synchronize_deadline,
                    };
                }
                info!("the runtime sent Synchronize");
                on_progress(Progress::Synchronized);
                std::future::pending::<NriError>().await
            }
            // the runtime hung up on us before answering
            Err(NriError::Closed) => NriError::ClosedBeforeRegistration,
            Err(NriError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                NriError::ClosedBeforeRegistration
            }
            Err(e) => e,
        }
    };
    let outcome = tokio::select! {
        r = reader => r,
        e = register => Err(e),
        () = server => Ok(()),
    };
    shared.close();
    match outcome {
        Ok(()) if !registered.load(Ordering::SeqCst) => Err(NriError::ClosedBeforeRegistration),
        other => other,
    }
}

/// Reads frames until the runtime closes the socket; requests go to the
/// server loop, answers to the calls waiting for them.
async fn read_loop<R: AsyncRead + Unpin>(
    read_half: R,
    shared: &Shared,
    requests: mpsc::Sender<(u32, ttrpc::Request, Instant)>,
) -> Result<(), NriError> {
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    let mut plugin_side = Decoder::default();
    let mut runtime_side = Decoder::default();
    let mut last_request: u32 = 0;
    let mut frame = Vec::new();
    while let Some(conn) = mux::read_frame(&mut reader, &mut frame).await? {
        match conn {
            PLUGIN_SERVICE_CONN => {
                plugin_side.push(&frame);
                while let Some(message) = plugin_side.next_message() {
                    if let Some((id, request)) =
                        accept_request(message, &mut last_request, shared).await?
                    {
                        // The runtime's clock for it runs from here,
                        // queueing behind earlier requests included.
                        if requests.send((id, request, Instant::now())).await.is_err() {
                            return Ok(());
                        }
                    }
                }
            }
            RUNTIME_SERVICE_CONN => {
                runtime_side.push(&frame);
                while let Some(message) = runtime_side.next_message() {
                    complete_call(message, shared);
                }
            }
            other => debug!(
                conn = other,
                len = frame.len(),
                "dropping a frame of an unserved connection"
            ),
        }
    }
    Ok(())
}

/// Checks a message of the runtime on the plugin's connection; what is not a
/// well-formed new request is answered with an error status right here.
async fn accept_request(
    message: Inbound,
    last_request: &mut u32,
    shared: &Shared,
) -> Result<Option<(u32, ttrpc::Request)>, NriError> {
    let (stream_id, status) = match message {
        Inbound::Oversized { stream_id, len, .. } => (
            stream_id,
            Status::new(
                Code::ResourceExhausted,
                format!(
                    "message length {len} exceeds the maximum message size of {}",
                    ttrpc::MESSAGE_LENGTH_MAX
                ),
            ),
        ),
        Inbound::Message {
            stream_id, kind, ..
        } if kind != TYPE_REQUEST => {
            debug!(
                stream_id,
                kind, "unexpected message type on the plugin's connection"
            );
            (
                stream_id,
                Status::new(
                    Code::InvalidArgument,
                    format!("message type {kind} is not a request (NRI has no streaming calls)"),
                ),
            )
        }
        Inbound::Message { stream_id, .. } if stream_id % 2 != 1 => (
            stream_id,
            Status::new(
                Code::InvalidArgument,
                "StreamID must be odd for client initiated streams",
            ),
        ),
        Inbound::Message { stream_id, .. } if stream_id <= *last_request => (
            stream_id,
            Status::new(
                Code::InvalidArgument,
                "StreamID cannot be re-used and must increment",
            ),
        ),
        Inbound::Message {
            stream_id, payload, ..
        } => {
            *last_request = stream_id;
            match ttrpc::Request::decode(payload.as_slice()) {
                Ok(request) => return Ok(Some((stream_id, request))),
                Err(e) => (
                    stream_id,
                    Status::new(
                        Code::InvalidArgument,
                        format!("unmarshal request error: {e}"),
                    ),
                ),
            }
        }
    };
    warn!(stream_id, message = %status.message, "refusing a malformed request of the runtime");
    shared.respond(stream_id, status, Vec::new()).await?;
    Ok(None)
}

/// Hands an answer of the runtime to the call waiting for it.
fn complete_call(message: Inbound, shared: &Shared) {
    let (stream_id, result) = match message {
        Inbound::Message {
            stream_id,
            kind: TYPE_RESPONSE,
            payload,
        } => (stream_id, Ok(payload)),
        Inbound::Message {
            stream_id, kind, ..
        } => {
            debug!(
                stream_id,
                kind, "ignoring a non-response on the runtime's connection"
            );
            return;
        }
        Inbound::Oversized { stream_id, len, .. } => (
            stream_id,
            Err(NriError::Rpc {
                method: "a call",
                code: Code::ResourceExhausted as i32,
                message: format!(
                    "the runtime's answer is {len} bytes, more than the {} a message may carry",
                    ttrpc::MESSAGE_LENGTH_MAX
                ),
            }),
        ),
    };
    shared.complete(stream_id, result);
}

/// Runs the runtime's requests one at a time, in order, and answers each
/// by its answer deadline (module [`budget`]): a handler still running then
/// is answered with an error, and finishes before the next request.
async fn serve_loop<P: Plugin>(
    mut requests: mpsc::Receiver<(u32, ttrpc::Request, Instant)>,
    shared: &Shared,
    handler: &P,
    client: &RuntimeClient,
    events: EventMask,
    (synchronized, sync_came): (&AtomicBool, &tokio::sync::Notify),
) {
    let mut chunks = plugin::SyncChunks::default();
    // What Configure named (NRI >= 0.7), for requests that carry none.
    let mut configured: Option<Duration> = None;
    while let Some((stream_id, request, received)) = requests.recv().await {
        if request.method == "Synchronize" && !synchronized.swap(true, Ordering::SeqCst) {
            sync_came.notify_waiters();
        }
        if request.method == "Configure" {
            configured = ConfigureRequest::decode(request.payload.as_slice())
                .ok()
                .and_then(|c| u64::try_from(c.request_timeout).ok())
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis);
        }
        let timeout = budget::request_timeout(request.timeout_nano, configured);
        let deadline = received + budget::answer_budget(timeout);
        let work = budget::with_answer_deadline(
            deadline,
            plugin::dispatch(
                handler,
                client,
                events,
                &mut chunks,
                &request.service,
                &request.method,
                &request.payload,
            ),
        );
        tokio::pin!(work);
        let (status, payload) = match tokio::time::timeout_at(deadline, &mut work).await {
            Ok(answer) => answer,
            Err(_) => {
                let message = format!(
                    "topomgr could not answer {} within the runtime's request timeout ({} ms, less {} ms kept for the reply); failing it now rather than answering late, which the runtime would take as the plugin failing (it closes the plugin and goes on without it)",
                    request.method,
                    timeout.as_millis(),
                    budget::margin(timeout).as_millis()
                );
                warn!(method = %request.method, timeout_ms = timeout.as_millis() as u64, "no answer within the runtime's request timeout; answering with an error");
                if let Err(e) = shared
                    .respond(stream_id, Status::new(Code::Unknown, message), Vec::new())
                    .await
                {
                    debug!(error = %e, "cannot answer the runtime; the connection is closing");
                    return;
                }
                let (late, _) = work.await;
                debug!(method = %request.method, code = late.code, "the late handler finished; its answer is dropped");
                continue;
            }
        };
        if status.code != Code::Ok as i32 {
            debug!(method = %request.method, code = status.code, message = %status.message, "answering with an error");
        }
        if let Err(e) = shared.respond(stream_id, status, payload).await {
            debug!(error = %e, "cannot answer the runtime; the connection is closing");
            return;
        }
    }
}
