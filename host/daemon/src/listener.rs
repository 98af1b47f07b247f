//! Serving HTTP/1 connections with bounded resources: one accept loop for
//! the admin socket and for the metrics listener, each with its own cap on
//! open connections, a deadline for a request's headers (which is also the
//! idle timeout of a kept-alive connection: hyper starts it whenever the
//! connection waits for the next request) and one for its body.
//!
//! At the cap, a new connection is taken and an *idle* one is closed to
//! make room for it: one that is not being served a request and whose last
//! read found nothing to read (it waits for its client). The one closed is
//! that of the peer holding the most connections (the uid of a socket
//! peer, from `SO_PEERCRED`; the address of a TCP peer), and among those
//! the one idle the longest. So a client that holds many idle connections,
//! reconnecting as they are closed, loses its own, and a scrape or a health
//! check, which sends its request as soon as it is connected, is served:
//! it is never idle before its answer. (A connection whose last read found
//! nothing is idle only while the kernel holds no unread byte of it: a
//! client whose request arrived after that read, while its task waits to
//! run, is not waiting for anything.) Only when every connection is busy
//! (or not yet read from) does the loop stop accepting until one ends or
//! goes idle; further connections then wait in the kernel's listen backlog,
//! holding no file descriptor of ours. (As with any idle timeout, a
//! client reusing a kept-alive connection just as it is closed sees it
//! closed; HTTP clients then retry on a new one.)
//!
//! The caps come from the process's open-file limit (`Budget::of_process`):
//! the admin socket's and the metrics listener's are separate and both fit
//! under it with room for the state files, the plugins and the cgroup
//! files, so idle connections to `metrics_address`, which anyone who can
//! reach it may open, never make the admin socket unreachable.

use std::collections::BTreeMap;
use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

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
use tokio::sync::{watch, Notify};
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

/// Who a connection comes from, for fairness at the cap: the peer's uid on
/// the admin socket, its address on TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PeerKey {
    /// A socket peer's effective uid (`SO_PEERCRED`).
    Uid(u32),
    /// A TCP peer's address.
    Address(std::net::IpAddr),
    /// The kernel did not say.
    Unknown,
}

/// What one connection is doing, written by its task and read by the
/// accept loop.
#[derive(Debug)]
struct Activity {
    /// Requests being served (from the router's call to the end of the
    /// response body).
    busy: AtomicUsize,
    /// When the last read found nothing to read (nanoseconds since
    /// [`Book::epoch`], plus one); 0 while bytes are coming in.
    waiting_since: AtomicU64,
    epoch: Instant,
    /// The book's: told when this connection may have become idle.
    changed: Arc<Notify>,
    /// The connection's socket (-1: none, or closed).
    fd: AtomicI32,
}

impl Activity {
    /// Idle: not served and waiting for its client (no unread byte in the
    /// kernel, [`unread_bytes`]).
    fn idle_since(&self) -> Option<u64> {
        match (
            self.busy.load(Ordering::Acquire),
            self.waiting_since.load(Ordering::Acquire),
        ) {
            (0, since) if since > 0 && !unread_bytes(self.fd.load(Ordering::Acquire)) => {
                Some(since)
            }
            _ => None,
        }
    }

    /// A read found nothing to read.
    fn waiting(&self) {
        if self.waiting_since.load(Ordering::Relaxed) == 0 {
            let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1;
            self.waiting_since.store(now, Ordering::Release);
            self.changed.notify_waiters();
        }
    }

    /// A read brought bytes.
    fn reading(&self) {
        self.waiting_since.store(0, Ordering::Release);
    }
}

/// Whether socket `fd` has bytes the kernel received and nobody read yet.
/// (The fd is the connection's for as long as its task holds the stream;
/// should the task close it between the load and this call and the number
/// be reused, the answer is about another file: at worst one eviction
/// decision is wrong, which eviction tolerates anyway.)
fn unread_bytes(fd: RawFd) -> bool {
    if fd < 0 {
        return false;
    }
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which points
    // to a live local; an fd that is not a socket (or not open) gives an
    // error, read as no bytes.
    let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    rc == 0 && n > 0
}

/// One request being served; dropped with the response body (or the
/// request, when the connection ends first).
struct Busy(Arc<Activity>);

impl Busy {
    fn start(activity: &Arc<Activity>) -> Busy {
        activity.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(activity))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.changed.notify_waiters();
        }
    }
}

/// A response body that keeps its connection busy until it is sent.
struct BusyBody {
    inner: Body,
    _busy: Busy,
}

impl hyper::body::Body for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's stream, telling its [`Activity`] whether reads find
/// bytes.
struct Watched<Io> {
    inner: Io,
    activity: Arc<Activity>,
}

impl<Io> Drop for Watched<Io> {
    /// Before the stream closes: the fd is no longer the connection's.
    fn drop(&mut self) {
        self.activity.fd.store(-1, Ordering::Release);
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Watched<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Pending => self.activity.waiting(),
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.activity.reading(),
            Poll::Ready(_) => {}
        }
        polled
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Watched<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// One open connection in the [`Book`].
struct Open {
    peer: PeerKey,
    activity: Arc<Activity>,
    /// Told when the connection is to be closed.
    evict: Arc<Notify>,
}

/// The open connections of one listener.
struct Book {
    max: usize,
    epoch: Instant,
    /// Told when a connection ends or may have become idle.
    changed: Arc<Notify>,
    open: std::sync::Mutex<(u64, BTreeMap<u64, Open>)>,
}

impl Book {
    fn new(max: usize) -> Book {
        Book {
            max: max.max(1),
            epoch: Instant::now(),
            changed: Arc::new(Notify::new()),
            open: std::sync::Mutex::new((0, BTreeMap::new())),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, BTreeMap<u64, Open>)> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection to close for a new one: an idle one of the peer
    /// holding the most connections, the one idle the longest.
    fn victim(open: &BTreeMap<u64, Open>) -> Option<u64> {
        let mut held: BTreeMap<PeerKey, usize> = BTreeMap::new();
        for o in open.values() {
            *held.entry(o.peer).or_default() += 1;
        }
        open.iter()
            .filter_map(|(id, o)| {
                Some((
                    held[&o.peer],
                    std::cmp::Reverse(o.activity.idle_since()?),
                    *id,
                ))
            })
            .max()
            .map(|(_, _, id)| id)
    }

    /// Whether a connection could be taken now: below the cap, or one to
    /// close for it.
    fn has_room(&self) -> bool {
        let guard = self.lock();
        guard.1.len() < self.max || Book::victim(&guard.1).is_some()
    }

    /// Below the cap, closing an idle connection if needed (the peer of the
    /// one closed); `Err` when every connection is busy.
    fn make_room(&self) -> Result<Option<PeerKey>, ()> {
        let mut guard = self.lock();
        if guard.1.len() < self.max {
            return Ok(None);
        }
        let id = Book::victim(&guard.1).ok_or(())?;
        let closed = guard.1.remove(&id).ok_or(())?;
        closed.evict.notify_one();
        Ok(Some(closed.peer))
    }

    /// A new connection from `peer` on socket `fd` (-1: none): its id,
    /// activity and eviction signal.
    fn register(&self, peer: PeerKey, fd: RawFd) -> (u64, Arc<Activity>, Arc<Notify>) {
        let activity = Arc::new(Activity {
            busy: AtomicUsize::new(0),
            waiting_since: AtomicU64::new(0),
            epoch: self.epoch,
            changed: Arc::clone(&self.changed),
            fd: AtomicI32::new(fd),
        });
        let evict = Arc::new(Notify::new());
        let mut guard = self.lock();
        guard.0 += 1;
        let id = guard.0;
        guard.1.insert(
            id,
            Open {
                peer,
                activity: Arc::clone(&activity),
                evict: Arc::clone(&evict),
            },
        );
        (id, activity, evict)
    }

    fn len(&self) -> usize {
        self.lock().1.len()
    }
}

/// A connection's place in the [`Book`], given up when its task ends.
struct Entry(Arc<Book>, u64);

impl Drop for Entry {
    fn drop(&mut self) {
        self.0.lock().1.remove(&self.1);
        self.0.changed.notify_waiters();
    }
}

/// Wait until `ready` holds (checked again whenever the book changes) or
/// `shutdown` completes (`false`).
async fn until<T>(
    book: &Book,
    shutdown: &mut Pin<&mut impl Future<Output = ()>>,
    mut ready: impl FnMut() -> Option<T>,
) -> Option<T> {
    loop {
        let changed = book.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if let Some(t) = ready() {
            return Some(t);
        }
        tokio::select! {
            biased;
            () = shutdown.as_mut() => return None,
            () = changed => {}
        }
    }
}

/// Accept connections with `accept` and serve `router` on each, within
/// `limits`, until `shutdown` completes; then let the requests in flight
/// finish. Each connection's `Info` reaches the handlers as
/// `ConnectInfo<Info>`; its [`PeerKey`] decides whose idle connection is
/// closed at the cap (module doc). `name` names the listener in logs.
pub(crate) async fn serve<Io, Info, A, F>(
    name: &'static str,
    limits: Limits,
    mut accept: A,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    Io: AsyncRead + AsyncWrite + AsRawFd + Unpin + Send + 'static,
    Info: Clone + Send + Sync + 'static,
    A: FnMut() -> F,
    F: Future<Output = std::io::Result<(Io, Info, PeerKey)>>,
{
    let book = Arc::new(Book::new(limits.max_connections));
    let (closing, closed) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        if until(&book, &mut shutdown, || book.has_room().then_some(()))
            .await
            .is_none()
        {
            break;
        }
        let (io, info, peer) = tokio::select! {
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
        // The idle connection found above may have become busy meanwhile.
        match until(&book, &mut shutdown, || book.make_room().ok()).await {
            None => break,
            Some(Some(closed)) => {
                debug!(listener = name, ?closed, for_peer = ?peer, open = book.len(), "at the cap: closed an idle connection")
            }
            Some(None) => {}
        }
        while connections.try_join_next().is_some() {}
        let (id, activity, evict) = book.register(peer, io.as_raw_fd());
        let entry = Entry(Arc::clone(&book), id);
        let router = router.clone();
        let served = Arc::clone(&activity);
        let service =
            TowerToHyperService::new(tower::service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(info.clone()));
                let busy = Busy::start(&served);
                let answer = tower::ServiceExt::oneshot(router.clone(), req);
                async move {
                    let response = answer.await?;
                    Ok::<_, std::convert::Infallible>(
                        response.map(|inner| Body::new(BusyBody { inner, _busy: busy })),
                    )
                }
            }));
        let mut closed = closed.clone();
        connections.spawn(async move {
            let _entry = entry;
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(
                    TokioIo::new(Watched {
                        inner: io,
                        activity,
                    }),
                    service,
                );
            tokio::pin!(conn);
            let closing = async move {
                let _ = closed.wait_for(|c| *c).await;
            };
            let result = tokio::select! {
                result = conn.as_mut() => result,
                // Idle (no request being served): dropped, which closes it.
                () = evict.notified() => return,
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

    /// The one closed at the cap: idle (not busy, waiting), of the peer
    /// holding the most, idle the longest.
    #[test]
    fn at_the_cap_the_longest_idle_connection_of_the_biggest_holder_goes() {
        let book = Book::new(4);
        let uid = PeerKey::Uid;
        let (_, root, _) = book.register(uid(0), -1);
        let (_, a1, _) = book.register(uid(1000), -1);
        let (_, a2, _) = book.register(uid(1000), -1);
        let (_, a3, _) = book.register(uid(1000), -1);
        // Not read from yet, nobody idle: no room.
        assert!(!book.has_room());
        assert!(book.make_room().is_err());
        root.waiting();
        std::thread::sleep(Duration::from_millis(2));
        a2.waiting();
        std::thread::sleep(Duration::from_millis(2));
        a1.waiting();
        // uid 1000 holds three: its longest idle goes, not root's older one.
        assert_eq!(book.make_room(), Ok(Some(uid(1000))));
        assert_eq!(book.len(), 3);
        assert!(book.make_room().unwrap().is_none(), "below the cap");
        let (_, a4, _) = book.register(uid(1000), -1);
        // A busy one is never closed, whatever its reads found.
        let busy = Busy::start(&a1);
        a3.reading();
        a4.reading();
        assert_eq!(book.make_room(), Ok(Some(uid(0))));
        let (_, b, _) = book.register(uid(2000), -1);
        b.reading();
        assert!(book.make_room().is_err(), "everyone busy or reading");
        drop(busy);
        assert_eq!(book.make_room(), Ok(Some(uid(1000))));
    }

    /// Issue 37 item 4: a connection whose request arrived after its last
    /// read found nothing (its task has not run since) is not idle, so a
    /// scrape is not closed for another peer's connection before it is
    /// read.
    #[test]
    fn a_connection_with_unread_bytes_is_not_idle() {
        use std::io::Write as _;
        let book = Book::new(1);
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        let (_, conn, _) = book.register(PeerKey::Uid(0), server.as_raw_fd());
        conn.waiting();
        assert!(conn.idle_since().is_some(), "nothing sent: idle");
        client.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(conn.idle_since(), None, "its request waits to be read");
        assert!(book.make_room().is_err(), "not closed for a newcomer");
        drop(server);
        conn.fd.store(-1, Ordering::Release);
        assert!(conn.idle_since().is_some(), "closed: no bytes to count");
    }

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
