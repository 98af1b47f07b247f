//! The daemon's resources stay bounded whatever its clients do: idle
//! connections to `metrics_address` (anyone can open them) never make the
//! admin socket unreachable, and the explain history of rejected pods holds
//! their traces, not their manifests.

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
    // More than the metrics listener's cap are established: past it (and
    // past the listen backlog) the daemon takes no more, so the rest are
    // not even answered.
    let established = idle.iter().filter(|s| s.peer_addr().is_ok()).count();
    assert!(
        established > topomgr_daemon::listener::METRICS_MAX_CONNECTIONS,
        "only {established} of {wanted} connections established"
    );
    assert!(established < wanted, "every connection was answered");
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
