//! Serving HTTP/1 connections with bounded resources: one accept loop for
//! the admin socket and for the metrics listener, each with its own cap on
//! open connections, a deadline for a request's headers (which is also the
//! idle timeout of a kept-alive connection: hyper starts it whenever the
//! connection waits for the next request) and one for its body.
//!
//! At the cap, the loop stops accepting: further connections wait in the
//! kernel's listen backlog, holding no file descriptor of ours, and are
//! taken as slots free up. The caps come from the process's open-file
//! limit (`Budget::of_process`): the admin socket's and the metrics
//! listener's are separate and both fit under it with room for the state
//! files, the plugins and the cgroup files, so idle connections to
//! `metrics_address`, which anyone who can reach it may open, never make
//! the admin socket unreachable.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, warn};

/// How long a client may take to send a request's headers, and how long a
/// kept-alive connection may wait for its next request.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's body once its headers
/// are in.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Most connections the admin socket keeps open.
pub const SOCKET_MAX_CONNECTIONS: usize = 256;
/// Most connections the metrics listener keeps open (a Prometheus server
/// needs one).
pub const METRICS_MAX_CONNECTIONS: usize = 32;
/// Open files kept free for everything else (state files, plugins, cgroup
/// files, the runtime's own).
pub const RESERVED_FILES: u64 = 64;

/// The limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Most open connections.
    pub max_connections: usize,
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
}

/// Both listeners' limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// The admin socket.
    pub socket: Limits,
    /// The metrics listener.
    pub metrics: Limits,
}

/// Too few free file descriptors to serve.
#[derive(Debug, thiserror::Error)]
#[error("only {free} file descriptors are free (open-file limit {limit}, {open} open); topomgr serve needs at least {needed}: raise LimitNOFILE in the unit (or ulimit -n)")]
pub struct BudgetError {
    /// The open-file limit.
    pub limit: u64,
    /// Files open now.
    pub open: u64,
    /// Free under the limit.
    pub free: u64,
    /// Needed.
    pub needed: u64,
}

impl Budget {
    /// The limits under an open-file `limit` with `open` files open now:
    /// the full caps when they fit with [`RESERVED_FILES`] to spare, else
    /// shares of what is free (an eighth for the metrics listener).
    pub(crate) fn within(limit: u64, open: u64) -> Result<Budget, BudgetError> {
        let needed = RESERVED_FILES + 8;
        let free = limit.saturating_sub(open);
        if free < needed {
            return Err(BudgetError {
                limit,
                open,
                free,
                needed,
            });
        }
        let spare = usize::try_from(free - RESERVED_FILES).unwrap_or(usize::MAX);
        let metrics = METRICS_MAX_CONNECTIONS.min((spare / 8).max(1));
        let socket = SOCKET_MAX_CONNECTIONS.min(spare - metrics);
        let limits = |max_connections| Limits {
            max_connections,
            header_read_timeout: HEADER_READ_TIMEOUT,
        };
        Ok(Budget {
            socket: limits(socket),
            metrics: limits(metrics),
        })
    }

    /// The limits of this process: its soft open-file limit raised to the
    /// hard one first (as Go programs do; a unit's `LimitNOFILE` sets both).
    pub(crate) fn of_process() -> Result<Budget, BudgetError> {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let mut limit = 1024;
        if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
            limit = soft;
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                limit = hard;
            }
        }
        let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        Budget::within(limit, open)
    }
}

/// A request body that fails once [`BODY_TIMEOUT`] has passed before its
/// end.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

/// The error of a body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s", BODY_TIMEOUT.as_secs())]
struct BodyTimedOut;

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Middleware: every request's body must arrive within [`BODY_TIMEOUT`].
pub(crate) async fn body_deadline(req: Request, next: Next) -> Response {
    let req = req.map(|inner| {
        Body::new(DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(BODY_TIMEOUT)),
        })
    });
    next.run(req).await
}

/// Accept connections with `accept` and serve `router` on each, within
/// `limits`, until `shutdown` completes; then let the requests in flight
/// finish. Each connection's `Info` (its peer) reaches the handlers as
/// `ConnectInfo<Info>`. `name` names the listener in logs.
pub(crate) async fn serve<Io, Info, A, F>(
    name: &'static str,
    limits: Limits,
    mut accept: A,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Info: Clone + Send + Sync + 'static,
    A: FnMut() -> F,
    F: Future<Output = std::io::Result<(Io, Info)>>,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (closing, closed) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let (io, info) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors (or a connection reset before
                    // it was taken): wait a moment instead of spinning.
                    warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        while connections.try_join_next().is_some() {}
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            router.clone(),
            move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(info.clone()));
                req
            },
        ));
        let mut closed = closed.clone();
        connections.spawn(async move {
            let _slot = slot;
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(TokioIo::new(io), service);
            tokio::pin!(conn);
            let closing = async move {
                let _ = closed.wait_for(|c| *c).await;
            };
            let result = tokio::select! {
                result = conn.as_mut() => result,
                () = closing => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                debug!(listener = name, error = %e, "connection ended");
            }
        });
    }
    let _ = closing.send(true);
    while connections.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_fit_under_the_open_file_limit() {
        let full = Budget::within(4096, 30).unwrap();
        assert_eq!(
            (full.socket.max_connections, full.metrics.max_connections),
            (SOCKET_MAX_CONNECTIONS, METRICS_MAX_CONNECTIONS)
        );
        // A small limit: shares of what is free, the sum under it.
        let small = Budget::within(256, 40).unwrap();
        assert_eq!(
            (small.socket.max_connections, small.metrics.max_connections),
            (133, 19)
        );
        assert!(40 + RESERVED_FILES as usize + 133 + 19 <= 256);
        assert_eq!(
            Budget::within(100, 40).unwrap_err().to_string(),
            "only 60 file descriptors are free (open-file limit 100, 40 open); topomgr serve needs at least 72: raise LimitNOFILE in the unit (or ulimit -n)"
        );
    }
}
