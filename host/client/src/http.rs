//! The transport: a small blocking HTTP/1.1 client for the daemon's Unix
//! socket ([`Client`], answers as raw [`Response`]s), under the typed
//! [`crate::Daemon`]; the tests and the benchmark use it as it is to send
//! requests the typed client never sends. Hyper's HTTP/1 connection over a tokio Unix stream, driven
//! by a current-thread runtime of its own. It keeps one connection alive
//! between requests and resends once on a fresh connection when the daemon
//! closed an idle one before answering. A client made
//! [`Client::with_deadline`] gives up on a request (connecting included)
//! that has not been answered in time, so a caller that must not hang (an
//! OCI hook during a container's creation) never does.

use std::io;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::UnixStream;

use topomgr_contract::api::{AdmissionRequest, AttachRequest, ErrorBody, OWNED_ADMISSION};

use crate::{ClientError, Reason};

/// An answer of the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The request it answers (`GET /v1/pods`), for messages.
    pub route: String,
    /// HTTP status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as one of the API's types ([`topomgr_contract::api`]); an answer that
    /// does not fit names the route and the field path.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ClientError> {
        let de = &mut serde_json::Deserializer::from_slice(&self.body);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let at = e.path().to_string();
            ClientError::BadResponse {
                message: if at == "." {
                    format!("{} answered {}: {}", self.route, self.status, e.inner())
                } else {
                    format!(
                        "{} answered {}: at {at}: {}",
                        self.route,
                        self.status,
                        e.inner()
                    )
                },
            }
        })
    }

    /// The body as untyped JSON (tests and debugging; the CLI reads
    /// [`Response::parse`]).
    pub fn json(&self) -> Result<serde_json::Value, ClientError> {
        self.parse()
    }

    /// The daemon's error answer, when the body is one.
    pub fn error(&self) -> Option<ErrorBody> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The daemon's error message ([`ErrorBody::error`]), or the raw body.
    pub fn error_message(&self) -> String {
        self.error()
            .map(|e| e.error)
            .unwrap_or_else(|| String::from_utf8_lossy(&self.body).into_owned())
    }

    /// Whether the daemon answered with success (a 2xx status).
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as `T` when the daemon answered with success, else its
    /// refusal ([`ClientError::Refused`], with its reason).
    pub fn into_typed<T: serde::de::DeserializeOwned>(self) -> Result<T, ClientError> {
        if self.is_success() {
            self.parse()
        } else {
            Err(self.refusal())
        }
    }

    /// This answer as a refusal: its status, reason and message (a body
    /// that is not the API's error is the message, without a reason).
    pub fn refusal(&self) -> ClientError {
        let (reason, message) = match self.error() {
            Some(e) => (Reason::of(&e.reason), e.error),
            None => (
                Reason::Other(String::new()),
                String::from_utf8_lossy(&self.body).into_owned(),
            ),
        };
        ClientError::Refused {
            route: self.route.clone(),
            status: self.status,
            reason,
            message,
        }
    }
}

/// A client of one daemon socket.
#[derive(Debug)]
pub struct Client {
    socket: PathBuf,
    deadline: Option<Duration>,
    /// Created on first use, so that building a client never fails.
    runtime: Option<tokio::runtime::Runtime>,
    conn: Option<SendRequest<Full<Bytes>>>,
}

/// Percent-encode one URL path segment (everything but unreserved characters).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The daemon's socket with every write sent as `send(..., MSG_NOSIGNAL)`:
/// a daemon that closed the connection gives `EPIPE`, never a SIGPIPE that
/// would kill the CLI (which runs with SIGPIPE's default action so that a
/// closed stdout ends it quietly; tokio writes with plain `write`).
struct NoSigPipe(UnixStream);

impl AsyncRead for NoSigPipe {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for NoSigPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let stream = &self.get_mut().0;
        loop {
            ready!(stream.poll_write_ready(cx))?;
            let sent = stream.try_io(Interest::WRITABLE, || {
                // SAFETY: the fd is the open socket `stream` owns; `data` is
                // a live buffer of that length; send does not keep the
                // pointer.
                let n = unsafe {
                    libc::send(
                        stream.as_raw_fd(),
                        data.as_ptr().cast(),
                        data.len(),
                        libc::MSG_NOSIGNAL,
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(usize::try_from(n).unwrap_or(0))
                }
            });
            match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl Client {
    /// A client for the daemon at `socket` (connects on first use).
    pub fn new(socket: &Path) -> Client {
        Client {
            socket: socket.to_path_buf(),
            deadline: None,
            runtime: None,
            conn: None,
        }
    }

    /// A client for the daemon at `socket` that gives up on a request not
    /// answered within `deadline` (connecting and a resend included):
    /// [`ClientError::Timeout`].
    pub fn with_deadline(socket: &Path, deadline: Duration) -> Client {
        Client {
            deadline: Some(deadline),
            ..Client::new(socket)
        }
    }

    /// The daemon's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Send one request and read the answer.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<Response, ClientError> {
        let request = || {
            let mut b = hyper::Request::builder()
                .method(method)
                .uri(path)
                .header(hyper::header::HOST, "topomgr");
            if let Some(ct) = content_type {
                b = b.header(hyper::header::CONTENT_TYPE, ct);
            }
            b.body(Full::new(Bytes::copy_from_slice(body)))
                .map_err(|e| ClientError::BadResponse {
                    message: format!("cannot build the request {method} {path}: {e}"),
                })
        };
        let rt = match self.runtime.take() {
            Some(rt) => rt,
            None => tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .map_err(|cause| ClientError::Runtime { cause })?,
        };
        let reused = self.conn.as_ref().is_some_and(|c| !c.is_closed());
        let route = format!("{method} {path}");
        let until = self.deadline.map(|d| Instant::now() + d);
        let answer = match self.attempt(&rt, request()?, &route, until) {
            Err(ClientError::Http { cause, .. }) if reused && unanswered(&cause) => {
                // The daemon closed the idle connection: resend once.
                self.conn = None;
                self.attempt(&rt, request()?, &route, until)
            }
            r => r,
        };
        self.runtime = Some(rt);
        answer
    }

    fn attempt(
        &mut self,
        rt: &tokio::runtime::Runtime,
        req: hyper::Request<Full<Bytes>>,
        route: &str,
        until: Option<Instant>,
    ) -> Result<Response, ClientError> {
        let socket = self.socket.clone();
        let conn = self.conn.take().filter(|c| !c.is_closed());
        let http = |cause| ClientError::Http {
            path: socket.clone(),
            cause,
        };
        let exchange = async {
            let mut conn = match conn {
                Some(c) => c,
                None => {
                    let stream = UnixStream::connect(&socket).await.map_err(|cause| {
                        ClientError::Connect {
                            path: socket.clone(),
                            cause,
                        }
                    })?;
                    let (sender, connection) =
                        hyper::client::conn::http1::handshake(TokioIo::new(NoSigPipe(stream)))
                            .await
                            .map_err(http)?;
                    // Driven whenever this runtime runs (every request).
                    tokio::spawn(async move {
                        let _ = connection.await;
                    });
                    sender
                }
            };
            let answer = async {
                conn.ready().await?;
                let resp = conn.send_request(req).await?;
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await?.to_bytes().to_vec();
                Ok::<_, hyper::Error>(Response {
                    route: route.to_owned(),
                    status,
                    body,
                })
            }
            .await
            .map_err(http);
            Ok::<_, ClientError>((answer, conn))
        };
        let (result, conn) = match until {
            None => rt.block_on(exchange)?,
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                rt.block_on(async { tokio::time::timeout(left, exchange).await })
                    .map_err(|_| ClientError::Timeout {
                        path: self.socket.clone(),
                        route: route.to_owned(),
                        after: self.deadline.unwrap_or_default(),
                    })??
            }
        };
        if result.is_ok() {
            self.conn = Some(conn);
        }
        result
    }

    /// `GET path`.
    pub fn get(&mut self, path: &str) -> Result<Response, ClientError> {
        self.request("GET", path, None, &[])
    }

    /// `POST path` with a body.
    pub fn post(
        &mut self,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<Response, ClientError> {
        self.request("POST", path, Some(content_type), body)
    }

    /// `DELETE path`.
    pub fn delete(&mut self, path: &str) -> Result<Response, ClientError> {
        self.request("DELETE", path, None, &[])
    }

    /// Admit the manifest text (YAML or JSON).
    pub fn admit(&mut self, manifest: &str) -> Result<Response, ClientError> {
        self.post("/v1/pods", "application/yaml", manifest.as_bytes())
    }

    /// Admit one pod for its owner ([`AdmissionRequest`], content type
    /// [`OWNED_ADMISSION`]).
    pub fn admit_owned(&mut self, request: &AdmissionRequest) -> Result<Response, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::BadResponse {
            message: format!("cannot encode the admission request: {e}"),
        })?;
        self.post("/v1/pods", OWNED_ADMISSION, &body)
    }

    /// Release pod `uid`.
    pub fn release(&mut self, uid: &str) -> Result<Response, ClientError> {
        self.delete(&format!("/v1/pods/{}", encode_segment(uid)))
    }

    /// Attach a container to a cgroup path.
    pub fn attach(
        &mut self,
        uid: &str,
        container: &str,
        cgroup: &str,
    ) -> Result<Response, ClientError> {
        let body = serde_json::to_string(&AttachRequest {
            cgroup: cgroup.to_owned(),
        })
        .unwrap_or_default();
        self.post(
            &format!(
                "/v1/pods/{}/containers/{}/attach",
                encode_segment(uid),
                encode_segment(container)
            ),
            "application/json",
            body.as_bytes(),
        )
    }
}

/// True when the request got no answer at all because the connection was
/// closed (safe to resend: the daemon never saw it, or dropped it unread),
/// or could not even be written to it (a daemon that restarted since: the
/// daemon cannot have read a request it did not receive whole).
fn unanswered(e: &hyper::Error) -> bool {
    let write_failed = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<io::Error>())
        .is_some_and(|io| {
            matches!(
                io.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            )
        });
    e.is_canceled() || e.is_closed() || e.is_incomplete_message() || write_failed
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};

    use super::*;

    #[test]
    fn an_answer_that_does_not_fit_its_type_names_route_and_field() {
        let resp = |body: &str| Response {
            route: "GET /v1/pods".to_owned(),
            status: 200,
            body: body.as_bytes().to_vec(),
        };
        let good = r#"{"pods": [{"uid": "u", "name": "p", "namespace": "d", "qos": "Guaranteed",
            "admitted": true, "reason": null, "message": null, "containers": [{"name": "app",
            "affinity": [0], "preferred": true, "cpus": "2-3", "exclusive": true, "mems": "0",
            "devices": {}, "env": {}}]}], "attachments": {}}"#;
        let list: topomgr_contract::api::PodList = resp(good).parse().unwrap();
        assert_eq!(list.pods[0].containers[0].cpus.to_string(), "2-3");
        let err = resp(&good.replace(r#""2-3""#, r#""2-x""#))
            .parse::<topomgr_contract::api::PodList>()
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("unexpected answer from the topomgr daemon: GET /v1/pods answered 200: at pods[0].containers[0].cpus: "),
            "{err}"
        );
        let err = resp(&good.replace(r#""qos": "Guaranteed","#, ""))
            .parse::<topomgr_contract::api::PodList>()
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("unexpected answer from the topomgr daemon: GET /v1/pods answered 200: at pods[0]: missing field `qos`"),
            "{err}"
        );
        let err = resp("<html>")
            .parse::<topomgr_contract::api::PodList>()
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("unexpected answer from the topomgr daemon: GET /v1/pods answered 200: expected value"),
            "{err}"
        );
        assert_eq!(
            resp(r#"{"error": "no", "reason": "UnknownPod"}"#).error_message(),
            "no"
        );
        assert_eq!(resp("plain").error_message(), "plain");
    }

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode_segment("default/web-0"), "default%2Fweb-0");
        assert_eq!(encode_segment("a b~c"), "a%20b~c");
    }

    #[test]
    fn parses_content_length_and_chunked_answers_and_reconnects() {
        use std::os::unix::net::UnixListener;
        let dir = std::env::temp_dir().join(format!("topomgr-client-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("s.sock");
        let l = UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            let answers = [
                "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}",
                "HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            ];
            let (mut s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            for a in answers {
                let mut line = String::new();
                loop {
                    line.clear();
                    r.read_line(&mut line).unwrap();
                    if line == "\r\n" {
                        break;
                    }
                }
                s.write_all(a.as_bytes()).unwrap();
            }
            drop(r);
            drop(s);
            // A second connection after the first was closed.
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf).unwrap();
            s.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                .unwrap();
        });
        let mut c = Client::new(&sock);
        let r = c.get("/a").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"{}"[..]));
        let r = c.get("/b").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (404, &b"abcde"[..]));
        let r = c.get("/c").unwrap();
        assert_eq!((r.status, r.body.len()), (204, 0));
        server.join().unwrap();
        let err = Client::new(&dir.join("none.sock")).get("/").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot connect to the topomgr daemon at {}: no socket there (ENOENT) (is `topomgr serve` running there? pass --socket PATH or set [daemon] socket)",
                dir.join("none.sock").display()
            )
        );
        // A socket file nobody listens on (a daemon killed with SIGKILL).
        drop(std::os::unix::net::UnixListener::bind(dir.join("dead.sock")).unwrap());
        let err = Client::new(&dir.join("dead.sock")).get("/").unwrap_err();
        assert!(
            err.to_string().contains(": the socket is there but nothing listens on it (ECONNREFUSED) (is `topomgr serve`"),
            "{err}"
        );
        // Not allowed (root always is: the kind as connect(2) reports it).
        let err = ClientError::Connect {
            path: dir.join("s.sock"),
            cause: io::Error::from_raw_os_error(13),
        };
        assert_eq!(
            err.to_string(),
            format!(
                "cannot connect to the topomgr daemon at {}: permission denied (EACCES): the socket is for root and the members of its group; run this as root, or as a member of the group that [daemon] group names (default topomgr)",
                dir.join("s.sock").display()
            )
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_daemon_that_does_not_answer_is_given_up_on_at_the_deadline() {
        use std::os::unix::net::UnixListener;
        let dir = std::env::temp_dir().join(format!("topomgr-client-dl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("s.sock");
        let l = UnixListener::bind(&sock).unwrap();
        // Accepts (the backlog does) but never answers.
        let start = Instant::now();
        let err = Client::with_deadline(&sock, Duration::from_millis(300))
            .get("/v1/health")
            .unwrap_err();
        let waited = start.elapsed();
        assert_eq!(
            err.to_string(),
            format!(
                "the topomgr daemon at {} did not answer GET /v1/health within 300 ms; see its log (journalctl -u topomgr) and GET /v1/health",
                sock.display()
            )
        );
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        drop(l);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
