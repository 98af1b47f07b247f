//! A pod's object read from the API server: under pod scope the NRI face
//! admits the whole pod (every init, sidecar and app container, pod-level
//! resources) at its first container, and the runtime tells one container
//! at a time, so the pod's spec comes from here.
//!
//! One connection is shared by the face's handlers (requests queue on it);
//! each read is bounded by the reader's deadline, well inside the
//! runtime's request budget.

use std::time::Duration;

use hyper::Method;
use tokio::sync::Mutex;

use crate::http::{ApiClient, ApiError};

/// How long one read may take by default: the runtime gives a whole
/// CreateContainer 2 s.
pub const READ_TIMEOUT: Duration = Duration::from_millis(1000);

/// A pod as the API server has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPod {
    /// The object as JSON.
    pub json: String,
    /// `metadata.uid`.
    pub uid: String,
    /// The `kubernetes.io/config.mirror` annotation of a static pod's
    /// mirror: the uid the kubelet runs the static pod under.
    pub mirror_of: Option<String>,
}

impl FetchedPod {
    /// Whether this object is the pod the kubelet runs with uid `uid`
    /// (itself, or the mirror of that static pod).
    pub fn is(&self, uid: &str) -> bool {
        self.uid == uid || self.mirror_of.as_deref() == Some(uid)
    }
}

/// Why a pod could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PodReadError {
    /// No answer.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// No answer in time.
    #[error("API server {server} did not answer the read of pod {namespace}/{name} in {after:?}")]
    Timeout {
        /// The server.
        server: String,
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// The deadline.
        after: Duration,
    },
    /// An answer other than the pod or 404.
    #[error("API server {server} answered the read of pod {namespace}/{name} with HTTP {status}: {message} (with [kubernetes] kubeconfig's user or the service account, topomgr needs \"get\" on pods: packaging/kubernetes/rbac.yaml)")]
    Refused {
        /// The server.
        server: String,
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The answer is not a pod.
    #[error("API server {server} answered the read of pod {namespace}/{name} with a body that is not a pod: {error}")]
    NotAPod {
        /// The server.
        server: String,
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// What is wrong.
        error: String,
    },
}

/// Reads pods from one API server.
#[derive(Debug)]
pub struct PodReader {
    client: Mutex<ApiClient>,
    timeout: Duration,
}

impl PodReader {
    /// A reader over `client`, each read bounded by `timeout` (queueing
    /// behind another read included).
    pub fn new(client: ApiClient, timeout: Duration) -> PodReader {
        PodReader {
            client: Mutex::new(client),
            timeout,
        }
    }

    /// Pod `namespace`/`name`; `None` when the API server has none (404).
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<FetchedPod>, PodReadError> {
        let read = async {
            let mut client = self.client.lock().await;
            let server = client.server();
            let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
            let r = client.send(Method::GET, &path, None, Vec::new()).await?;
            if r.status == 404 {
                return Ok(None);
            }
            if !r.is_success() {
                return Err(PodReadError::Refused {
                    server,
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    status: r.status,
                    message: r.message(),
                });
            }
            parse(&r.body)
                .map(Some)
                .map_err(|error| PodReadError::NotAPod {
                    server,
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    error,
                })
        };
        match tokio::time::timeout(self.timeout, read).await {
            Ok(r) => r,
            Err(_) => Err(PodReadError::Timeout {
                server: self.client.lock().await.server(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                after: self.timeout,
            }),
        }
    }
}

/// The pod of an API server's answer `body`.
fn parse(body: &[u8]) -> Result<FetchedPod, String> {
    let pod: k8s_openapi::api::core::v1::Pod =
        serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let uid = pod
        .metadata
        .uid
        .clone()
        .filter(|u| !u.is_empty())
        .ok_or("it has no metadata.uid")?;
    let mirror_of = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/config.mirror"))
        .cloned();
    let json = String::from_utf8(body.to_vec()).map_err(|e| e.to_string())?;
    Ok(FetchedPod {
        json,
        uid,
        mirror_of,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_read_with_its_uid_and_the_static_pod_it_mirrors() {
        let p = parse(br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"n","uid":"u1","annotations":{"kubernetes.io/config.mirror":"s1"}},"spec":{"containers":[{"name":"c"}]}}"#).unwrap();
        assert_eq!((p.uid.as_str(), p.mirror_of.as_deref()), ("u1", Some("s1")));
        assert!(p.is("u1") && p.is("s1") && !p.is("u2"));
        assert!(parse(b"{\"kind\":\"Pod\",\"metadata\":{}}")
            .unwrap_err()
            .contains("no metadata.uid"));
        assert!(parse(b"not json").is_err());
    }
}
