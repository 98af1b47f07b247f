//! The runtime's side of one connection as the plugin calls it
//! (service `nri.pkg.api.v1alpha1.Runtime` on connection 2): the
//! [`RuntimeClient`] handle, and what it shares with the connection's tasks
//! (the write half, the calls waiting for their answer).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::api::{
    ContainerEviction, ContainerUpdate, Empty, RegisterPluginRequest, UpdateContainersRequest,
    UpdateContainersResponse,
};
use crate::error::NriError;
use crate::mux::{self, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::ttrpc::{self, Code, Status, TYPE_REQUEST, TYPE_RESPONSE};

/// The ttrpc service name of the runtime side.
pub(crate) const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// How long a call to the runtime may take (upstream's plugin registration
/// timeout is the same 5 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

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

/// What the reader, the server loop and every [`RuntimeClient`] of one
/// connection share: the write half and the calls waiting for an answer.
pub(crate) struct Shared {
    writer: tokio::sync::Mutex<Box<dyn AsyncWrite + Send + Unpin>>,
    pending: Mutex<Pending>,
    next_stream: AtomicU32,
    closed: AtomicBool,
}

impl Shared {
    /// The state of a new connection writing to `writer`.
    pub(crate) fn new(writer: Box<dyn AsyncWrite + Send + Unpin>) -> Shared {
        Shared {
            writer: tokio::sync::Mutex::new(writer),
            pending: Mutex::new(HashMap::new()),
            next_stream: AtomicU32::new(1),
            closed: AtomicBool::new(false),
        }
    }

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
    pub(crate) async fn respond(
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

    /// Hands the runtime's answer to call `stream_id` to the call waiting
    /// for it.
    pub(crate) fn complete(&self, stream_id: u32, result: Result<Vec<u8>, NriError>) {
        match self.pending.lock().unwrap().remove(&stream_id) {
            Some(tx) => {
                let _ = tx.send(result);
            }
            None => tracing::debug!(stream_id, "ignoring an answer nobody waits for"),
        }
    }

    /// Marks the connection closed and fails every call still waiting.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let waiting: Vec<_> = self.pending.lock().unwrap().drain().collect();
        for (_, tx) in waiting {
            let _ = tx.send(Err(NriError::Closed));
        }
    }
}

impl RuntimeClient {
    /// A client calling through the connection `shared`.
    pub(crate) fn new(shared: Arc<Shared>) -> RuntimeClient {
        RuntimeClient { shared }
    }

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

    /// Registers the plugin as `name` at `index`.
    pub(crate) async fn register(&self, name: &str, index: &str) -> Result<(), NriError> {
        let _: Empty = self
            .call(
                "RegisterPlugin",
                &RegisterPluginRequest {
                    plugin_name: name.to_owned(),
                    plugin_idx: index.to_owned(),
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
            .map_err(|cause| NriError::Decode { method, cause })?;
        if let Some(status) = response.status.filter(|s| s.code != Code::Ok as i32) {
            return Err(NriError::Rpc {
                method,
                code: status.code,
                message: status.message,
            });
        }
        Resp::decode(response.payload.as_slice())
            .map_err(|cause| NriError::Decode { method, cause })
    }
}
