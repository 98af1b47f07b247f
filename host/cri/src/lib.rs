//! The CRI calls topomgr makes itself: a gRPC client of the container
//! runtime's `runtime.v1.RuntimeService` on its Unix socket.
//!
//! topomgr changes a running container's cpuset the way the kubelet's CPU
//! manager does: CRI `UpdateContainerResources` with only `cpuset_cpus`
//! and `cpuset_mems` set (the runtime leaves every field that is zero or
//! empty as it is). Through CRI, containerd and CRI-O take their own locks
//! in the order of every other container event, and tell the NRI plugins
//! (topomgr among them) with an `UpdateContainer` event. A plugin's
//! unsolicited NRI `UpdateContainers` takes them in the opposite order in
//! containerd before the fix of containerd/nri#301 (containerd issue
//! #13733): sent while the runtime creates or starts other containers it
//! can wedge the runtime's NRI for good.
//!
//! The messages are a hand-written subset of kubernetes/cri-api
//! `pkg/apis/runtime/v1/api.proto` (field numbers as upstream; fields not
//! declared here are skipped by the decoder).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint, Uri};

/// Messages of `runtime.v1` that topomgr uses.
pub mod v1 {
    /// `VersionRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct VersionRequest {
        /// The CRI version the client speaks.
        #[prost(string, tag = "1")]
        pub version: String,
    }
    /// `VersionResponse`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct VersionResponse {
        /// The kubelet-facing API version.
        #[prost(string, tag = "1")]
        pub version: String,
        /// `containerd`, `cri-o`.
        #[prost(string, tag = "2")]
        pub runtime_name: String,
        /// The runtime's version.
        #[prost(string, tag = "3")]
        pub runtime_version: String,
        /// The CRI version the runtime speaks (`v1`).
        #[prost(string, tag = "4")]
        pub runtime_api_version: String,
    }
    /// `LinuxContainerResources`: a zero or empty field is left as it is
    /// by an update.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxContainerResources {
        /// CFS period (µs).
        #[prost(int64, tag = "1")]
        pub cpu_period: i64,
        /// CFS quota (µs).
        #[prost(int64, tag = "2")]
        pub cpu_quota: i64,
        /// CPU shares.
        #[prost(int64, tag = "3")]
        pub cpu_shares: i64,
        /// Memory limit in bytes.
        #[prost(int64, tag = "4")]
        pub memory_limit_in_bytes: i64,
        /// OOM score adjustment.
        #[prost(int64, tag = "5")]
        pub oom_score_adj: i64,
        /// The cpuset's CPUs (`0-3,8`).
        #[prost(string, tag = "6")]
        pub cpuset_cpus: String,
        /// The cpuset's memory nodes (`0,1`).
        #[prost(string, tag = "7")]
        pub cpuset_mems: String,
    }
    /// `UpdateContainerResourcesRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct UpdateContainerResourcesRequest {
        /// The runtime's container id.
        #[prost(string, tag = "1")]
        pub container_id: String,
        /// The Linux resources to change.
        #[prost(message, optional, tag = "2")]
        pub linux: Option<LinuxContainerResources>,
    }
    /// An empty response.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Empty {}
}

/// How long connecting to the runtime's socket may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What went wrong talking CRI.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The socket could not be connected to.
    #[error("cannot connect to the container runtime's CRI socket {}: {message}; set [nri] cri_socket to the socket the kubelet's --container-runtime-endpoint names", socket.display())]
    Connect {
        /// The socket.
        socket: PathBuf,
        /// Why (part of the message).
        message: String,
    },
    /// The runtime answered a call with an error (or the channel broke).
    #[error("the container runtime answered CRI {call} with {code:?}: {message}")]
    Call {
        /// The call (`UpdateContainerResources`).
        call: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The runtime's message.
        message: String,
    },
    /// The call did not come back in time.
    #[error("the container runtime did not answer CRI {call} within {}s", timeout.as_secs())]
    Timeout {
        /// The call.
        call: &'static str,
        /// The time it had.
        timeout: Duration,
    },
}

impl CriError {
    /// Whether the connection should be made anew (the runtime did not
    /// answer in time, or the channel broke).
    pub fn breaks_connection(&self) -> bool {
        matches!(
            self,
            CriError::Timeout { .. }
                | CriError::Call {
                    code: tonic::Code::Unavailable,
                    ..
                }
        )
    }

    /// Whether the runtime does not know the container (removed, or still
    /// being created).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            CriError::Call {
                code: tonic::Code::NotFound,
                ..
            }
        )
    }
}

/// A CRI client on the runtime's socket.
#[derive(Clone)]
pub struct CriClient {
    grpc: tonic::client::Grpc<Channel>,
    timeout: Duration,
}

impl CriClient {
    /// Connects to the runtime's gRPC socket; each call may take up to
    /// `timeout`.
    pub async fn connect(socket: &Path, timeout: Duration) -> Result<Self, CriError> {
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
                .map_err(|e| CriError::Connect {
                    socket: socket.to_owned(),
                    message: error_chain(&e),
                })?;
        Ok(CriClient {
            grpc: tonic::client::Grpc::new(channel),
            timeout,
        })
    }

    /// One unary call of `runtime.v1.RuntimeService`: `method` is its
    /// path (`/runtime.v1.RuntimeService/Version`).
    pub async fn call<Req, Resp>(
        &mut self,
        method: &'static str,
        req: Req,
    ) -> Result<Resp, CriError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let call = method.rsplit('/').next().unwrap_or(method);
        let fail = |s: tonic::Status| CriError::Call {
            call,
            code: s.code(),
            message: s.message().to_owned(),
        };
        let work = async {
            self.grpc.ready().await.map_err(|e| CriError::Call {
                call,
                code: tonic::Code::Unavailable,
                message: error_chain(&e),
            })?;
            let path = PathAndQuery::from_static(method);
            let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
            self.grpc
                .unary(tonic::Request::new(req), path, codec)
                .await
                .map(tonic::Response::into_inner)
                .map_err(fail)
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| CriError::Timeout {
                call,
                timeout: self.timeout,
            })?
    }

    /// The runtime's name and version.
    pub async fn version(&mut self) -> Result<v1::VersionResponse, CriError> {
        self.call(
            "/runtime.v1.RuntimeService/Version",
            v1::VersionRequest {
                version: "v1".into(),
            },
        )
        .await
    }

    /// Gives container `id` the cpuset `cpus` with memory nodes `mems`
    /// (as the kubelet's CPU manager does: nothing else changes).
    pub async fn update_cpuset(
        &mut self,
        id: &str,
        cpus: &str,
        mems: &str,
    ) -> Result<(), CriError> {
        let _: v1::Empty = self
            .call(
                "/runtime.v1.RuntimeService/UpdateContainerResources",
                v1::UpdateContainerResourcesRequest {
                    container_id: id.to_owned(),
                    linux: Some(v1::LinuxContainerResources {
                        cpuset_cpus: cpus.to_owned(),
                        cpuset_mems: mems.to_owned(),
                        ..Default::default()
                    }),
                },
            )
            .await?;
        Ok(())
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
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_socket_is_named_with_the_key_to_set() {
        let dir = std::env::temp_dir().join(format!("topomgr-cri-{}", std::process::id()));
        let socket = dir.join("absent.sock");
        let Err(e) = CriClient::connect(&socket, Duration::from_secs(1)).await else {
            panic!("connected to a socket that does not exist");
        };
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "cannot connect to the container runtime's CRI socket {}: ",
                socket.display()
            )),
            "{text}"
        );
        assert!(text.contains("No such file or directory"), "{text}");
        assert!(text.ends_with("set [nri] cri_socket to the socket the kubelet's --container-runtime-endpoint names"), "{text}");
        assert!(!e.is_not_found());
    }

    #[test]
    fn not_found_is_told_apart() {
        let e = CriError::Call {
            call: "UpdateContainerResources",
            code: tonic::Code::NotFound,
            message: "container \"c1\" in namespace \"k8s.io\": not found".into(),
        };
        assert!(e.is_not_found());
        assert_eq!(
            e.to_string(),
            "the container runtime answered CRI UpdateContainerResources with NotFound: container \"c1\" in namespace \"k8s.io\": not found"
        );
    }
}
