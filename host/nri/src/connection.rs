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

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::api::{
    ContainerEviction, ContainerUpdate, Empty, RegisterPluginRequest, UpdateContainersRequest,
    UpdateContainersResponse,
};
use crate::error::NriError;
use crate::events::EventMask;
use crate::mux::{self, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::plugin::{self, Plugin, RUNTIME_SERVICE};
use crate::ttrpc::{self, Code, Decoder, Inbound, Status, TYPE_REQUEST, TYPE_RESPONSE};

/// How long a call to the runtime may take (upstream's plugin registration
/// timeout is the same 5 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests of the runtime read but not yet handled; the runtime sends one
/// at a time, so this only bounds a misbehaving peer.
const REQUEST_QUEUE: usize = 64;

/// The name, index and events a plugin registers with.
#[derive(Clone, Debug)]
pub(crate) struct Registration {
    pub name: String,
    pub index: String,
    pub events: EventMask,
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
        })
    }
}

/// A handle to call the runtime's service over a plugin's connection. Clones
/// share the connection; once it closes, calls fail with
/// [`NriError::Closed`].
#[derive(Clone)]
pub struct RuntimeClient {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RuntimeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeClient")
            .field("connected", &self.is_connected())
            .finish()
    }
}

type Pending = HashMap<u32, oneshot::Sender<Result<Vec<u8>, NriError>>>;

struct Shared {
    writer: tokio::sync::Mutex<Box<dyn AsyncWrite + Send + Unpin>>,
    pending: Mutex<Pending>,
    next_stream: AtomicU32,
    closed: AtomicBool,
}

impl Shared {
    /// Writes one ttrpc message on `conn`, cut into frames.
    async fn send(
        &self,
        conn: u32,
        stream_id: u32,
        kind: u8,
        payload: &[u8],
    ) -> std::io::Result<()> {
        let message = ttrpc::encode(stream_id, kind, payload);
        let mut frames = Vec::with_capacity(message.len() + mux::HEADER_LEN * 2);
        mux::encode_frames(conn, &message, &mut frames);
        let mut w = self.writer.lock().await;
        w.write_all(&frames).await?;
        w.flush().await
    }

    /// Answers request `stream_id` of the runtime.
    async fn respond(
        &self,
        stream_id: u32,
        status: Status,
        payload: Vec<u8>,
    ) -> std::io::Result<()> {
        let response = ttrpc::Response {
            status: Some(status),
            payload,
        };
        self.send(
            PLUGIN_SERVICE_CONN,
            stream_id,
            TYPE_RESPONSE,
            &response.encode_to_vec(),
        )
        .await
    }

    /// Marks the connection closed and fails every call still waiting.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let waiting: Vec<_> = self.pending.lock().unwrap().drain().collect();
        for (_, tx) in waiting {
            let _ = tx.send(Err(NriError::Closed));
        }
    }
}

impl RuntimeClient {
    /// Whether the connection this handle calls through is still open.
    pub fn is_connected(&self) -> bool {
        !self.shared.closed.load(Ordering::SeqCst)
    }

    /// Asks the runtime to update (and evict) containers outside of any
    /// event; returns the updates the runtime failed to apply.
    pub async fn update_containers(
        &self,
        update: Vec<ContainerUpdate>,
        evict: Vec<ContainerEviction>,
    ) -> Result<Vec<ContainerUpdate>, NriError> {
        let reply: UpdateContainersResponse = self
            .call(
                "UpdateContainers",
                &UpdateContainersRequest { update, evict },
            )
            .await?;
        Ok(reply.failed)
    }

    async fn register(&self, r: &Registration) -> Result<(), NriError> {
        let _: Empty = self
            .call(
                "RegisterPlugin",
                &RegisterPluginRequest {
                    plugin_name: r.name.clone(),
                    plugin_idx: r.index.clone(),
                },
            )
            .await?;
        Ok(())
    }

    async fn call<Req: Message, Resp: Message + Default>(
        &self,
        method: &'static str,
        request: &Req,
    ) -> Result<Resp, NriError> {
        let shared = &self.shared;
        if shared.closed.load(Ordering::SeqCst) {
            return Err(NriError::Closed);
        }
        let stream_id = shared.next_stream.fetch_add(2, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        shared.pending.lock().unwrap().insert(stream_id, tx);
        let wire = ttrpc::Request {
            service: RUNTIME_SERVICE.to_owned(),
            method: method.to_owned(),
            payload: request.encode_to_vec(),
            timeout_nano: CALL_TIMEOUT.as_nanos() as i64,
        };
        let sent = shared
            .send(
                RUNTIME_SERVICE_CONN,
                stream_id,
                TYPE_REQUEST,
                &wire.encode_to_vec(),
            )
            .await;
        if let Err(e) = sent {
            shared.pending.lock().unwrap().remove(&stream_id);
            return Err(NriError::Io(e));
        }
        let payload = match tokio::time::timeout(CALL_TIMEOUT, rx).await {
            Ok(Ok(result)) => result?,
            Ok(Err(_)) => return Err(NriError::Closed),
            Err(_) => {
                shared.pending.lock().unwrap().remove(&stream_id);
                return Err(NriError::Timeout {
                    method,
                    after: CALL_TIMEOUT,
                });
            }
        };
        let response = ttrpc::Response::decode(payload.as_slice())
            .map_err(|source| NriError::Decode { method, source })?;
        if let Some(status) = response.status.filter(|s| s.code != Code::Ok as i32) {
            return Err(NriError::Rpc {
                method,
                code: status.code,
                message: status.message,
            });
        }
        Resp::decode(response.payload.as_slice())
            .map_err(|source| NriError::Decode { method, source })
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
        .map_err(|source| NriError::Connect {
            socket: socket.to_owned(),
            source,
        })
}

/// Serves one connection already made; `on_registered` runs once the
/// runtime accepted the registration.
pub(crate) async fn serve<P, S>(
    stream: S,
    registration: &Registration,
    handler: Arc<P>,
    on_registered: impl FnOnce(RuntimeClient),
) -> Result<(), NriError>
where
    P: Plugin,
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read_half, write_half) = tokio::io::split(stream);
    let shared = Arc::new(Shared {
        writer: tokio::sync::Mutex::new(Box::new(write_half)),
        pending: Mutex::new(HashMap::new()),
        next_stream: AtomicU32::new(1),
        closed: AtomicBool::new(false),
    });
    let client = RuntimeClient {
        shared: shared.clone(),
    };
    let (requests_tx, requests_rx) = mpsc::channel(REQUEST_QUEUE);

    let reader = read_loop(read_half, &shared, requests_tx);
    let server = serve_loop(
        requests_rx,
        &shared,
        &*handler,
        &client,
        registration.events,
    );
    let registered = AtomicBool::new(false);
    let register = async {
        match client.register(registration).await {
            Ok(()) => {
                debug!(name = %registration.name, index = %registration.index, "registered with the runtime");
                registered.store(true, Ordering::SeqCst);
                on_registered(client.clone());
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
    requests: mpsc::Sender<(u32, ttrpc::Request)>,
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
                        if requests.send((id, request)).await.is_err() {
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
    match shared.pending.lock().unwrap().remove(&stream_id) {
        Some(tx) => {
            let _ = tx.send(result);
        }
        None => debug!(stream_id, "ignoring an answer nobody waits for"),
    }
}

/// Runs the runtime's requests one at a time, in order, and answers each.
async fn serve_loop<P: Plugin>(
    mut requests: mpsc::Receiver<(u32, ttrpc::Request)>,
    shared: &Shared,
    handler: &P,
    client: &RuntimeClient,
    events: EventMask,
) {
    while let Some((stream_id, request)) = requests.recv().await {
        let (status, payload) = plugin::dispatch(
            handler,
            client,
            events,
            &request.service,
            &request.method,
            &request.payload,
        )
        .await;
        if status.code != Code::Ok as i32 {
            debug!(method = %request.method, code = status.code, message = %status.message, "answering with an error");
        }
        if let Err(e) = shared.respond(stream_id, status, payload).await {
            debug!(error = %e, "cannot answer the runtime; the connection is closing");
            return;
        }
    }
}
