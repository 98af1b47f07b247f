//! The daemon's resources stay bounded whatever its clients do: idle
//! connections to `metrics_address` (anyone can open them) never make the
//! admin socket unreachable, idle connections held by one client never
//! keep a scrape or a health check out, and the explain history of
//! rejected pods holds their traces, not their manifests.

use crate::common;

use std::fs;
use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use topomgr_client::http::Client;
use topomgr_node::api::{Admissions, Health};

/// A config on the example machine with the example widget provider and
/// `daemon` keys.
fn config(tag: &str, daemon: &str) -> PathBuf {
    let dir = common::scratch_dir(tag);
    fs::write(
        dir.join("topomgr.toml"),
        format!(
            "policy = \"single-numa-node\"\nsysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n[daemon]\n{daemon}[providers.widgets]\nlibrary = \"{}\"\n[providers.widgets.config]\nwidgets_per_node = 2\n",
            common::example_sys(),
            common::plugins().widgets.display()
        ),
    )
    .unwrap();
    dir
}

/// `topomgr serve` with at most `nofile` open files (soft and hard, as a
/// unit's `LimitNOFILE` sets them), ready.
fn serve(dir: &Path, nofile: u64) -> Child {
    let socket = dir.join("t.sock");
    let mut cmd = Command::new(common::topomgr_bin());
    cmd.arg("--config")
        .arg(dir.join("topomgr.toml"))
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !Client::new(&socket)
        .get("/v1/health")
        .is_ok_and(|r| r.status == 200)
    {
        assert!(Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Raise this process's open-file limit to its hard limit (the test opens
/// more than 1,024 connections).
fn raise_nofile() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    limit.rlim_cur
}

fn open_fds(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// 1,100 idle TCP connections to `metrics_address` tried (what any local
/// user can do) against a daemon limited to 1,024 open files: the admin
/// socket still answers `/v1/health` within a second, and the daemon's open
/// files stay bounded by its connection caps. (Before the caps, the daemon
/// took every connection until it ran out of file descriptors, and the
/// socket answered nothing.)
#[test]
fn idle_metrics_connections_never_starve_the_admin_socket() {
    let wanted = 1_100;
    if raise_nofile() < wanted as u64 + 100 {
        panic!(
            "this test needs an open-file hard limit above {} (ulimit -Hn)",
            wanted + 100
        );
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = config(
        "limits-idle",
        &format!("metrics_address = \"127.0.0.1:{port}\"\n"),
    );
    let daemon = serve(&dir, 1024);
    // All at once, as an attacker would open them: past the listen backlog
    // the handshake is not answered, and those connections stay pending in
    // the kernel (retrying) while the admin socket is asked.
    let idle: Vec<TcpStream> = (0..wanted).map(|_| connect_nonblocking(port)).collect();
    std::thread::sleep(Duration::from_millis(500));
    // More than the metrics listener's cap are established: the daemon
    // takes them, closing idle ones to stay under its cap (its open files
    // are counted below).
    let established = idle.iter().filter(|s| s.peer_addr().is_ok()).count();
    assert!(
        established > topomgr_daemon::listener::METRICS_MAX_CONNECTIONS,
        "only {established} of {wanted} connections established"
    );
    let socket = dir.join("t.sock");
    let (answer, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        let health = Client::new(&socket).get("/v1/health");
        let _ = answer.send((health, started.elapsed()));
    });
    let (health, took) = answered
        .recv_timeout(Duration::from_secs(5))
        .expect("the admin socket did not answer /v1/health within 5 s");
    let health = health.unwrap();
    assert_eq!(health.status, 200, "{}", health.error_message());
    let _: Health = health.parse().unwrap();
    assert!(took < Duration::from_secs(1), "health took {took:?}");
    let mut c = Client::new(&dir.join("t.sock"));
    let fds = open_fds(daemon.id());
    assert!(fds < 400, "the daemon holds {fds} open files");
    // Admissions work too.
    let r = c
        .admit("kind: Pod\nmetadata: {name: p, uid: p}\nspec: {containers: [{name: a}]}\n")
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    drop(idle);
    stop(daemon);
}

/// A TCP connection to 127.0.0.1:`port`, started and not waited for
/// (a nonblocking `connect`, in progress or established).
fn connect_nonblocking(port: u16) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a TCP socket");
    socket.set_nonblocking(true).expect("a nonblocking socket");
    let address = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    if let Err(e) = socket.connect(&address.into()) {
        assert_eq!(e.raw_os_error(), Some(libc::EINPROGRESS), "connect: {e}");
    }
    socket.into()
}

/// Resident memory of `pid` in bytes (`VmRSS` of /proc/PID/status).
fn rss(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// A pod of 1,000 containers, each requesting 10 extended resources no
/// provider owns (about 450 KB of JSON): rejected before any provider is
/// asked.
fn large_pod(uid: &str) -> String {
    let resources: Vec<String> = (0..10)
        .map(|r| format!("\"example.com/unowned-resource-{r:04}\": \"1\""))
        .collect();
    let resources = resources.join(",");
    let containers: Vec<String> = (0..1000)
        .map(|i| {
            format!(
                "{{\"name\": \"container-{i:05}\", \"image\": \"busybox\", \"resources\": {{\"limits\": {{{resources}}}}}}}"
            )
        })
        .collect();
    format!(
        "{{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"{uid}\", \"namespace\": \"t\", \"uid\": \"{uid}\"}}, \"spec\": {{\"containers\": [{}]}}}}",
        containers.join(",")
    )
}

/// 64 distinct large pods rejected: the daemon's resident memory stays
/// bounded (it kept each one's manifest in the explain history before), and
/// the last rejection can still be explained.
///
/// Measured on the debug build: the daemon grows by about 24 MiB whatever
/// the number of pods (its parse buffers); keeping each rejected pod's
/// trace with its pod, as before, adds about 2 MiB per pod (127 MiB after
/// 60 pods, 197 MiB after 100), so 64 pods against a 64 MiB bound tell
/// the two apart with room on both sides.
#[test]
fn large_rejections_do_not_grow_the_daemon() {
    const PODS: usize = 64;
    let dir = config("limits-rss", "");
    let daemon = serve(&dir, 4096);
    let socket = dir.join("t.sock");
    let base = rss(daemon.id());
    // Two clients at a time, as the daemon's HTTP workers take them.
    std::thread::scope(|scope| {
        for client in 0..2 {
            let socket = &socket;
            scope.spawn(move || {
                let mut c = Client::new(socket);
                for i in (client..PODS).step_by(2) {
                    let uid = format!("large-{i:03}");
                    let r = c
                        .post("/v1/pods", "application/json", large_pod(&uid).as_bytes())
                        .unwrap();
                    assert_eq!(r.status, 200, "{}", r.error_message());
                    let a: Admissions = r.parse().unwrap();
                    assert!(!a.pods[0].admitted);
                }
            });
        }
    });
    let mut c = Client::new(&socket);
    let grown = rss(daemon.id()).saturating_sub(base);
    assert!(
        grown < 64 << 20,
        "resident memory grew by {} MiB over {PODS} rejections",
        grown >> 20
    );
    let r = c
        .get(&format!("/v1/pods/large-{:03}/explain", PODS - 1))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    stop(daemon);
}

/// A daemon killed when dropped (a failed assertion leaves none behind).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A local client holding `count` idle connections to `address`, opening a
/// new one whenever the daemon closes one (what the hostile user
/// did), until dropped.
struct Hostile {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl Hostile {
    fn start(domain: socket2::Domain, address: socket2::SockAddr, count: usize) -> Hostile {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopping = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut held: Vec<Option<socket2::Socket>> = (0..count).map(|_| None).collect();
            let mut reconnects = 0;
            while !stopping.load(Ordering::Relaxed) {
                // Fill the empty slots (a few hundred a round: a Unix
                // socket's full backlog refuses them at once).
                for slot in held.iter_mut().filter(|s| s.is_none()).take(256) {
                    *slot = connect(domain, &address);
                }
                // Wait for the daemon to close some.
                let mut fds: Vec<libc::pollfd> = held
                    .iter()
                    .flatten()
                    .map(|s| libc::pollfd {
                        fd: std::os::fd::AsRawFd::as_raw_fd(s),
                        events: libc::POLLIN | libc::POLLRDHUP,
                        revents: 0,
                    })
                    .collect();
                // SAFETY: `fds` is a valid array of its length.
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 20) };
                let closed: std::collections::BTreeSet<i32> = fds
                    .iter()
                    .filter(|p| p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0)
                    .map(|p| p.fd)
                    .collect();
                for slot in held.iter_mut() {
                    if slot
                        .as_ref()
                        .is_some_and(|s| closed.contains(&std::os::fd::AsRawFd::as_raw_fd(s)))
                    {
                        *slot = connect(domain, &address);
                        reconnects += 1;
                    }
                }
            }
            reconnects
        });
        Hostile {
            stop,
            thread: Some(thread),
        }
    }

    /// Stop; how many times the daemon closed one of its connections.
    fn stop(mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A nonblocking connection to `address`, started (`None`: refused now).
fn connect(domain: socket2::Domain, address: &socket2::SockAddr) -> Option<socket2::Socket> {
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None).ok()?;
    socket.set_nonblocking(true).ok()?;
    match socket.connect(address) {
        Ok(()) => Some(socket),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Some(socket),
        Err(_) => None,
    }
}

/// Run `f` on a thread; its result if it is done within `limit`.
fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<(T, Duration)> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        let out = f();
        let _ = tx.send((out, started.elapsed()));
    });
    rx.recv_timeout(limit).ok()
}

/// One scrape of `/metrics` at 127.0.0.1:`port` as Prometheus sends it:
/// the answer's text.
fn scrape(port: u16) -> std::io::Result<String> {
    use std::io::{Read as _, Write as _};
    let address = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&address, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\nConnection: close\r\n\r\n")?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    Ok(answer)
}

/// The numbers: a local process keeps 64 idle connections to
/// `metrics_address` open, reconnecting whenever one is closed; 12 scrapes
/// with a 5 s timeout all succeed. (With the 32-connection cap that only
/// stopped accepting, 0 of 12 did: each waited in the listen backlog
/// behind the hostile connections for one or two 10 s idle timeouts.)
#[test]
fn scrapes_succeed_while_a_local_user_holds_idle_metrics_connections() {
    raise_nofile();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = config(
        "limits-scrape",
        &format!("metrics_address = \"127.0.0.1:{port}\"\n"),
    );
    let daemon = Killed(serve(&dir, 4096));
    let address = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    let hostile = Hostile::start(socket2::Domain::IPV4, address.into(), 64);
    // Let it fill the cap and the backlog.
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..12 {
        let (answer, took) = within(Duration::from_secs(5), move || scrape(port))
            .unwrap_or_else(|| panic!("scrape {i} got no answer within 5 s"));
        let answer = answer.unwrap_or_else(|e| panic!("scrape {i} failed after {took:?}: {e}"));
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.contains("topomgr_"),
            "scrape {i}: {answer}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let closed = hostile.stop();
    assert!(closed > 0, "the hostile connections were never closed");
    let fds = open_fds(daemon.0.id());
    assert!(fds < 200, "the daemon holds {fds} open files");
}

/// The admin socket alike: 2,000 idle connections held by a member of the
/// socket's group (here root itself), reconnecting; `/v1/health` answers
/// within 5 s every time. (Before, it timed out for about 20 s: the 256
/// open connections idled out every 10 s and health waited behind the
/// backlog's hostile connections.)
#[test]
fn health_answers_while_a_group_member_holds_idle_socket_connections() {
    let wanted = 2_000;
    if raise_nofile() < wanted as u64 + 200 {
        panic!(
            "this test needs an open-file hard limit above {} (ulimit -Hn)",
            wanted + 200
        );
    }
    let dir = config("limits-socket", "");
    let daemon = Killed(serve(&dir, 8192));
    let socket = dir.join("t.sock");
    let hostile = Hostile::start(
        socket2::Domain::UNIX,
        socket2::SockAddr::unix(&socket).unwrap(),
        wanted,
    );
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..5 {
        let socket = socket.clone();
        let (health, took) = within(Duration::from_secs(5), move || {
            Client::new(&socket).get("/v1/health")
        })
        .unwrap_or_else(|| panic!("health {i} got no answer within 5 s"));
        let health = health.unwrap_or_else(|e| panic!("health {i} failed after {took:?}: {e}"));
        assert_eq!(health.status, 200, "{}", health.error_message());
        let _: Health = health.parse().unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
    let closed = hostile.stop();
    assert!(closed > 0, "the hostile connections were never closed");
    let fds = open_fds(daemon.0.id());
    assert!(fds < 600, "the daemon holds {fds} open files");
}
