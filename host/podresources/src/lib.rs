//! The kubelet's PodResources API (`v1.PodResourcesLister`, the gRPC
//! service of `k8s.io/kubelet/pkg/apis/podresources/v1`) as topomgr serves
//! it on its own Unix socket, and a client of it.
//!
//! Beside topomgr the kubelet's CPU and memory managers are `none`, so the
//! kubelet's own PodResources socket reports no exclusive CPUs and no
//! NUMA-pinned memory (kubernetes/kubernetes#102190); node agents pointed
//! at topomgr's socket instead see what topomgr admitted. The service
//! answers from a [`Lister`] (the daemon's published view of its state);
//! the semantics follow the kubelet's `pkg/kubelet/apis/podresources/server_v1.go`:
//!
//! - `List`: every pod with its containers;
//! - `GetAllocatableResources`: the allocatable CPUs, devices and memory;
//! - `Get`: one pod by namespace and name; an unknown pod is the kubelet's
//!   error, status `Unknown` with `pod NAME in namespace NS not found`
//!   (the kubelet returns a plain Go error, which gRPC sends as `Unknown`).
//!
//! The messages ([`v1`]) are written by hand (field numbers as upstream);
//! the service is a `tower` service on tonic's server ([`serve`]), the
//! client ([`PodResourcesClient`]) tonic's client over the socket.

pub mod v1;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::transport::{Channel, Endpoint, Uri};

/// gRPC status codes, as [`ClientError::Call`] carries them.
pub use tonic::Code;

/// The service's name in the proto.
pub const SERVICE: &str = "v1.PodResourcesLister";
const LIST: &str = "/v1.PodResourcesLister/List";
const ALLOCATABLE: &str = "/v1.PodResourcesLister/GetAllocatableResources";
const GET: &str = "/v1.PodResourcesLister/Get";

/// What the service answers from: an implementation reads a snapshot and
/// never waits for the state it describes to change.
pub trait Lister: Send + Sync + 'static {
    /// Every pod (`List`).
    fn list(&self) -> v1::ListPodResourcesResponse;
    /// The allocatable resources (`GetAllocatableResources`).
    fn allocatable(&self) -> v1::AllocatableResourcesResponse;
    /// The pod `name` of `namespace` (`Get`); `None`: no such pod.
    fn get(&self, namespace: &str, name: &str) -> Option<v1::PodResources>;
}

/// The error `Get` answers for an unknown pod, as the kubelet's server
/// words it (`fmt.Errorf`, sent by gRPC as `Unknown`).
pub fn pod_not_found(namespace: &str, name: &str) -> tonic::Status {
    tonic::Status::unknown(format!("pod {name} in namespace {namespace} not found"))
}

/// One unary method of the service, answered by `answer`.
struct Unary<L, Req, F> {
    lister: Arc<L>,
    answer: F,
    _req: std::marker::PhantomData<fn(Req)>,
}

impl<L, Req, Resp, F> tonic::server::UnaryService<Req> for Unary<L, Req, F>
where
    L: Lister,
    Req: Send + 'static,
    Resp: Send + 'static,
    F: Fn(&L, Req) -> Result<Resp, tonic::Status> + Send + Sync + 'static,
{
    type Response = Resp;
    type Future = std::future::Ready<Result<tonic::Response<Resp>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        std::future::ready(
            (self.answer)(&self.lister, request.into_inner()).map(tonic::Response::new),
        )
    }
}

/// The `v1.PodResourcesLister` service over a [`Lister`], as a `tower`
/// service of HTTP/2 requests (what tonic's server runs).
pub struct PodResourcesServer<L> {
    lister: Arc<L>,
}

impl<L> Clone for PodResourcesServer<L> {
    fn clone(&self) -> Self {
        PodResourcesServer {
            lister: Arc::clone(&self.lister),
        }
    }
}

impl<L: Lister> PodResourcesServer<L> {
    /// The service answering from `lister`.
    pub fn new(lister: Arc<L>) -> Self {
        PodResourcesServer { lister }
    }

    fn unary<Req, Resp, B>(
        &self,
        req: http::Request<B>,
        answer: impl Fn(&L, Req) -> Result<Resp, tonic::Status> + Send + Sync + 'static,
    ) -> BoxFuture<http::Response<tonic::body::Body>, std::convert::Infallible>
    where
        Req: prost::Message + Default + Send + 'static,
        Resp: prost::Message + Send + 'static,
        B: tonic::codegen::Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        let method = Unary {
            lister: Arc::clone(&self.lister),
            answer,
            _req: std::marker::PhantomData,
        };
        Box::pin(async move {
            let codec = tonic_prost::ProstCodec::<Resp, Req>::default();
            let mut grpc = tonic::server::Grpc::new(codec);
            Ok(grpc.unary(method, req).await)
        })
    }
}

impl<L, B> Service<http::Request<B>> for PodResourcesServer<L>
where
    L: Lister,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        match req.uri().path() {
            LIST => self.unary(req, |l: &L, _: v1::ListPodResourcesRequest| Ok(l.list())),
            ALLOCATABLE => self.unary(req, |l: &L, _: v1::AllocatableResourcesRequest| {
                Ok(l.allocatable())
            }),
            GET => self.unary(req, |l: &L, r: v1::GetPodResourcesRequest| {
                l.get(&r.pod_namespace, &r.pod_name)
                    .map(|p| v1::GetPodResourcesResponse {
                        pod_resources: Some(p),
                    })
                    .ok_or_else(|| pod_not_found(&r.pod_namespace, &r.pod_name))
            }),
            other => {
                let status =
                    tonic::Status::unimplemented(format!("{other} is not a method of {SERVICE}"));
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
#[error("the PodResources server failed: {0}")]
pub struct ServeError(String);

/// Serves `lister` on `listener` until `shutdown` completes, then lets
/// open connections finish for at most `grace`: a client that does not
/// answer the server's goodbye (HTTP/2 GOAWAY and its PING) would
/// otherwise hold the server, and the daemon's exit, forever.
pub async fn serve<L: Lister>(
    listener: UnixListener,
    lister: Arc<L>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> Result<(), ServeError> {
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder().serve_with_incoming_shutdown(
        PodResourcesServer::new(lister),
        incoming,
        async {
            let _ = stopped.await;
        },
    );
    tokio::pin!(server);
    tokio::pin!(shutdown);
    tokio::select! {
        served = &mut server => return served.map_err(|e| ServeError(error_chain(&e))),
        () = &mut shutdown => {}
    }
    let _ = stop.send(());
    match tokio::time::timeout(grace, server).await {
        Ok(served) => served.map_err(|e| ServeError(error_chain(&e))),
        // Connections still open end with the runtime.
        Err(_) => Ok(()),
    }
}

/// How long connecting to the socket may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What went wrong as a client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be connected to.
    #[error("cannot connect to the PodResources socket {}: {message}", socket.display())]
    Connect {
        /// The socket.
        socket: PathBuf,
        /// Why (part of the message).
        message: String,
    },
    /// The server answered with an error status.
    #[error("the PodResources server answered {call} with {code:?}: {message}")]
    Call {
        /// The method (`Get`).
        call: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The server's message.
        message: String,
    },
    /// The call did not come back in time.
    #[error("the PodResources server did not answer {call} within {} ms", timeout.as_millis())]
    Timeout {
        /// The method.
        call: &'static str,
        /// The time it had.
        timeout: Duration,
    },
}

/// A client of a PodResources socket (topomgr's or the kubelet's).
#[derive(Clone)]
pub struct PodResourcesClient {
    grpc: tonic::client::Grpc<Channel>,
    timeout: Duration,
}

impl PodResourcesClient {
    /// Connects to `socket`; each call may take up to `timeout`.
    pub async fn connect(socket: &Path, timeout: Duration) -> Result<Self, ClientError> {
        let path = socket.to_owned();
        let channel =
            Endpoint::from_static("http://localhost")
                .connect_timeout(CONNECT_TIMEOUT)
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?))
                    }
                }))
                .await
                .map_err(|e| ClientError::Connect {
                    socket: socket.to_owned(),
                    message: error_chain(&e),
                })?;
        Ok(PodResourcesClient {
            grpc: tonic::client::Grpc::new(channel),
            timeout,
        })
    }

    async fn call<Req, Resp>(&mut self, method: &'static str, req: Req) -> Result<Resp, ClientError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let call = method.rsplit('/').next().unwrap_or(method);
        let work = async {
            self.grpc.ready().await.map_err(|e| ClientError::Call {
                call,
                code: tonic::Code::Unavailable,
                message: error_chain(&e),
            })?;
            let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
            self.grpc
                .unary(
                    tonic::Request::new(req),
                    PathAndQuery::from_static(method),
                    codec,
                )
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| ClientError::Call {
                    call,
                    code: s.code(),
                    message: s.message().to_owned(),
                })
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| ClientError::Timeout {
                call,
                timeout: self.timeout,
            })?
    }

    /// `List`.
    pub async fn list(&mut self) -> Result<v1::ListPodResourcesResponse, ClientError> {
        self.call(LIST, v1::ListPodResourcesRequest {}).await
    }

    /// `GetAllocatableResources`.
    pub async fn allocatable(&mut self) -> Result<v1::AllocatableResourcesResponse, ClientError> {
        self.call(ALLOCATABLE, v1::AllocatableResourcesRequest {})
            .await
    }

    /// `Get` of pod `name` in `namespace`.
    pub async fn get(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<v1::GetPodResourcesResponse, ClientError> {
        self.call(
            GET,
            v1::GetPodResourcesRequest {
                pod_name: name.to_owned(),
                pod_namespace: namespace.to_owned(),
            },
        )
        .await
    }
}

/// `e` and its sources, `: `-joined (transport errors say little at the top).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

#[cfg(test)]
mod tests;
