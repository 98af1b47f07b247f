//! A small blocking HTTP/1.1 client for the daemon's Unix socket, used by the
//! CLI (`topomgr admit --socket`, `pods`, `release`, `attach`), the tests and
//! the benchmark. It keeps one connection alive between requests and
//! reconnects once when the daemon closed an idle connection.

use std::io::{self, BufRead as _, BufReader, Read as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// An answer of the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as JSON.
    pub fn json(&self) -> Result<serde_json::Value, ClientError> {
        serde_json::from_slice(&self.body).map_err(|e| ClientError::BadResponse {
            message: format!("body is not JSON: {e}"),
        })
    }

    /// The daemon's error message (`{"error": ...}`), or the raw body.
    pub fn error_message(&self) -> String {
        self.json()
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&self.body).into_owned())
    }
}

/// Errors talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error("cannot connect to the topomgr daemon at {}: {cause} (is `topomgr serve` running there? pass --socket PATH or set [daemon] socket)", path.display())]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The error.
        cause: io::Error,
    },
    /// The connection failed mid-request.
    #[error("talking to the topomgr daemon at {}: {cause}", path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// The error.
        cause: io::Error,
    },
    /// The answer is not valid HTTP or not the expected JSON.
    #[error("unexpected answer from the topomgr daemon: {message}")]
    BadResponse {
        /// What was wrong.
        message: String,
    },
}

/// A client of one daemon socket.
#[derive(Debug)]
pub struct Client {
    socket: PathBuf,
    conn: Option<BufReader<UnixStream>>,
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

/// Write all of `data` to the socket with `MSG_NOSIGNAL`: a daemon that
/// closed the connection gives `EPIPE` here, never a SIGPIPE that would
/// kill the CLI (which runs with SIGPIPE's default action so that a closed
/// stdout ends it quietly).
fn send_all(stream: &UnixStream, mut data: &[u8]) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    while !data.is_empty() {
        // SAFETY: the fd is the open socket `stream` borrows; `data` is a
        // live buffer of that length; send does not keep the pointer.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                data.as_ptr().cast(),
                data.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = usize::try_from(n).unwrap_or(0);
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "socket accepted no bytes",
            ));
        }
        data = &data[n..];
    }
    Ok(())
}

enum Attempt {
    Done(Response),
    /// The connection was closed before any answer byte: safe to resend.
    Stale(io::Error),
}

impl Client {
    /// A client for the daemon at `socket` (connects on first use).
    pub fn new(socket: &Path) -> Client {
        Client {
            socket: socket.to_path_buf(),
            conn: None,
        }
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn connect(&mut self) -> Result<&mut BufReader<UnixStream>, ClientError> {
        if self.conn.is_none() {
            let s = UnixStream::connect(&self.socket).map_err(|source| ClientError::Connect {
                path: self.socket.clone(),
                cause: source,
            })?;
            self.conn = Some(BufReader::new(s));
        }
        self.conn.as_mut().ok_or_else(|| ClientError::BadResponse {
            message: "no connection".to_owned(),
        })
    }

    /// Send one request and read the answer.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<Response, ClientError> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: topomgr\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(ct) = content_type {
            head.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        head.push_str("\r\n");
        let reused = self.conn.is_some();
        match self.attempt(&head, body) {
            Ok(Attempt::Done(r)) => Ok(r),
            Ok(Attempt::Stale(source)) => {
                self.conn = None;
                if !reused {
                    return Err(ClientError::Io {
                        path: self.socket.clone(),
                        cause: source,
                    });
                }
                match self.attempt(&head, body)? {
                    Attempt::Done(r) => Ok(r),
                    Attempt::Stale(source) => {
                        self.conn = None;
                        Err(ClientError::Io {
                            path: self.socket.clone(),
                            cause: source,
                        })
                    }
                }
            }
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }

    fn attempt(&mut self, head: &str, body: &[u8]) -> Result<Attempt, ClientError> {
        let socket = self.socket.clone();
        let io_err = |source| ClientError::Io {
            path: socket.clone(),
            cause: source,
        };
        let conn = self.connect()?;
        let sent =
            send_all(conn.get_ref(), head.as_bytes()).and_then(|_| send_all(conn.get_ref(), body));
        if let Err(e) = sent {
            return Ok(Attempt::Stale(e));
        }
        let mut status_line = String::new();
        match conn.read_line(&mut status_line) {
            Ok(0) => {
                return Ok(Attempt::Stale(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before an answer",
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(Attempt::Stale(e)),
            Err(e) => return Err(io_err(e)),
        }
        let bad = |m: String| ClientError::BadResponse { message: m };
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("bad status line {:?}", status_line.trim_end())))?;
        let mut length: Option<usize> = None;
        let mut chunked = false;
        let mut close = false;
        loop {
            let mut line = String::new();
            if conn.read_line(&mut line).map_err(io_err)? == 0 {
                return Err(bad("connection closed inside the headers".to_owned()));
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
                match k.as_str() {
                    "content-length" => {
                        length = Some(
                            v.parse()
                                .map_err(|_| bad(format!("bad Content-Length {v:?}")))?,
                        )
                    }
                    "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
                    "connection" => close = v.eq_ignore_ascii_case("close"),
                    _ => {}
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                conn.read_line(&mut size).map_err(io_err)?;
                let size = size.trim().split(';').next().unwrap_or("");
                let n = usize::from_str_radix(size, 16)
                    .map_err(|_| bad(format!("bad chunk size {size:?}")))?;
                let mut chunk = vec![0; n + 2];
                conn.read_exact(&mut chunk).map_err(io_err)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            conn.read_exact(&mut body).map_err(io_err)?;
        } else {
            conn.read_to_end(&mut body).map_err(io_err)?;
            close = true;
        }
        if close {
            self.conn = None;
        }
        Ok(Attempt::Done(Response { status, body }))
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
        let body = serde_json::json!({ "cgroup": cgroup }).to_string();
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

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

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
        assert!(err.to_string().starts_with(&format!(
            "cannot connect to the topomgr daemon at {}: ",
            dir.join("none.sock").display()
        )));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
