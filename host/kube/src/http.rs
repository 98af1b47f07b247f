//! One HTTP/1.1 connection to the API server (rustls on ring for
//! `https`), opened at the first request, kept while it works and opened
//! again after a failure. Each request has a deadline; a request that
//! fails closes the connection.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
pub use hyper::Method;
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use crate::access::{Access, AccessError, Token};

/// How long one request may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The TCP connection failed.
    #[error("cannot connect to the API server {server}: {error}")]
    Connect {
        /// The server.
        server: String,
        /// What failed.
        error: std::io::Error,
    },
    /// The TLS handshake or the HTTP exchange failed.
    #[error("API server {server}: {message}")]
    Exchange {
        /// The server.
        server: String,
        /// What failed.
        message: String,
    },
    /// No answer in time.
    #[error("API server {server} did not answer in {after:?}")]
    Timeout {
        /// The server.
        server: String,
        /// The deadline.
        after: Duration,
    },
    /// The token file could not be read.
    #[error("cannot read the API token {path}: {error}")]
    Token {
        /// The file.
        path: std::path::PathBuf,
        /// What failed.
        error: std::io::Error,
    },
}

/// An answer: its status and body.
#[derive(Debug, Clone)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The `message` of a `Status` body, else the body as text (cut).
    pub fn message(&self) -> String {
        #[derive(serde::Deserialize)]
        struct Status {
            message: Option<String>,
        }
        if let Ok(Status { message: Some(m) }) = serde_json::from_slice(&self.body) {
            return m;
        }
        let text = String::from_utf8_lossy(&self.body);
        let text = text.trim();
        if text.is_empty() {
            return format!("HTTP {}", self.status);
        }
        text.chars().take(300).collect()
    }
}

/// A client of one API server.
pub struct ApiClient {
    access: Arc<Access>,
    tls: Option<tokio_rustls::TlsConnector>,
    sender: Option<SendRequest<Full<Bytes>>>,
    timeout: Duration,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("server", &self.access.server())
            .finish_non_exhaustive()
    }
}

impl ApiClient {
    /// A client of `access` (no connection yet).
    pub fn new(access: Access) -> Result<ApiClient, AccessError> {
        let invalid = |message: String| AccessError::Invalid {
            origin: access.origin.clone(),
            message,
        };
        let tls = if access.tls {
            let mut roots = rustls::RootCertStore::empty();
            for c in &access.roots {
                roots.add(c.clone()).map_err(|e| {
                    invalid(format!("its certificate authority is not usable: {e}"))
                })?;
            }
            // ring rather than aws-lc-rs (rustls' default, a C and
            // assembly build); rustls 0.23.48 deprecated ring's provider
            // for its lack of post-quantum key exchange, which an API
            // server does not require (X25519 and the NIST curves stay).
            #[allow(deprecated)]
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let builder = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| invalid(format!("TLS: {e}")))?
                .with_root_certificates(roots);
            let mut config = match &access.identity {
                Some((chain, key)) => builder
                    .with_client_auth_cert(chain.clone(), key.clone_key())
                    .map_err(|e| {
                        invalid(format!(
                            "its client certificate and key are not usable: {e}"
                        ))
                    })?,
                None => builder.with_no_client_auth(),
            };
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            ServerName::try_from(access.server_name.clone()).map_err(|_| {
                invalid(format!("{:?} is not a TLS server name", access.server_name))
            })?;
            Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
        } else {
            None
        };
        Ok(ApiClient {
            access: Arc::new(access),
            tls,
            sender: None,
            timeout: REQUEST_TIMEOUT,
        })
    }

    /// Another client of the same server and credentials, with a
    /// connection of its own (one per task).
    pub fn fresh(&self) -> ApiClient {
        ApiClient {
            access: Arc::clone(&self.access),
            tls: self.tls.clone(),
            sender: None,
            timeout: self.timeout,
        }
    }

    /// The server, for messages.
    pub fn server(&self) -> String {
        self.access.server()
    }

    /// Send `method` to `path_and_query` (from `/`) with `body` of
    /// `content_type`; any answer is a [`Response`], a failure to get one
    /// an [`ApiError`] (and the connection is dropped).
    pub async fn send(
        &mut self,
        method: Method,
        path_and_query: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Response, ApiError> {
        let server = self.access.server();
        let timeout = self.timeout;
        let result = tokio::time::timeout(
            timeout,
            self.exchange(method, path_and_query, content_type, body),
        )
        .await
        .unwrap_or(Err(ApiError::Timeout {
            server,
            after: timeout,
        }));
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    async fn exchange(
        &mut self,
        method: Method,
        path_and_query: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Response, ApiError> {
        let server = self.access.server();
        let exchange = |message: String| ApiError::Exchange {
            server: server.clone(),
            message,
        };
        let token = match &self.access.token {
            Some(Token::Literal(t)) => Some(t.clone()),
            Some(Token::File(p)) => Some(
                std::fs::read_to_string(p)
                    .map_err(|error| ApiError::Token {
                        path: p.clone(),
                        error,
                    })?
                    .trim()
                    .to_owned(),
            ),
            None => None,
        };
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            self.sender = Some(self.connect().await?);
        }
        let Some(sender) = self.sender.as_mut() else {
            return Err(exchange("no connection".to_owned()));
        };
        sender
            .ready()
            .await
            .map_err(|e| exchange(format!("the connection closed: {e}")))?;
        let host = if self.access.host.contains(':') {
            format!("[{}]:{}", self.access.host, self.access.port)
        } else {
            format!("{}:{}", self.access.host, self.access.port)
        };
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path_and_query}", self.access.base_path))
            .header(hyper::header::HOST, host)
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::USER_AGENT, "topomgr");
        if let Some(ct) = content_type {
            req = req.header(hyper::header::CONTENT_TYPE, ct);
        }
        if let Some(t) = token {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| exchange(format!("invalid request: {e}")))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| exchange(format!("request failed: {e}")))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| exchange(format!("reading the answer failed: {e}")))?
            .to_bytes();
        Ok(Response { status, body })
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, ApiError> {
        let server = self.access.server();
        let tcp = TcpStream::connect((self.access.host.as_str(), self.access.port))
            .await
            .map_err(|error| ApiError::Connect {
                server: server.clone(),
                error,
            })?;
        let _ = tcp.set_nodelay(true);
        let exchange = |message: String| ApiError::Exchange {
            server: server.clone(),
            message,
        };
        match &self.tls {
            Some(tls) => {
                let name = ServerName::try_from(self.access.server_name.clone())
                    .map_err(|_| exchange("invalid TLS server name".to_owned()))?;
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| exchange(format!("TLS handshake failed: {e}")))?;
                handshake(TokioIo::new(stream), &server).await
            }
            None => handshake(TokioIo::new(tcp), &server).await,
        }
    }
}

async fn handshake<T>(io: T, server: &str) -> Result<SendRequest<Full<Bytes>>, ApiError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| ApiError::Exchange {
            server: server.to_owned(),
            message: format!("HTTP handshake failed: {e}"),
        })?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "API server connection closed");
        }
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_are_read() {
        let r = Response {
            status: 404,
            body: Bytes::from_static(br#"{"kind":"Status","message":"the server could not find the requested resource"}"#),
        };
        assert_eq!(
            r.message(),
            "the server could not find the requested resource"
        );
        let r = Response {
            status: 500,
            body: Bytes::new(),
        };
        assert_eq!(r.message(), "HTTP 500");
    }
}
