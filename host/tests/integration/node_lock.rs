//! One owner per node: the node lock of a cgroup hierarchy on this machine
//! (`topomgr_node::locks::node_lock`) and the state directory's lock, as a user
//! meets them.
//!
//! - A second daemon on the same cgroup root (through a symlink too, or a
//!   root inside the same hierarchy) with another state directory is
//!   refused at once, naming the first; nothing of it is created.
//! - One-shot commands on a state directory a daemon holds fail at once,
//!   naming the daemon and the form of the command that asks it; that form
//!   works.
//! - On the machine's hierarchy: a `run` without a daemon owns the node for
//!   its state directory (other runs of it share the node; a daemon or a
//!   run of another state directory is refused naming it), and a killed
//!   run left as an unreaped zombie owns nothing any more.
//! - A one-shot command waiting for a state directory's lock says at once
//!   whom it waits for (a stale record names no dead pid).

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use topomgr_cgroup::hierarchy::Hierarchy;
use topomgr_node::api::{Admissions, Explains, Health};
use topomgr_node::locks::lock_holder::{Holder, Role};
use topomgr_node::persist::state_dir::STATE_LOCK_WAIT;

use crate::common::{
    self, alive, command_of, daemon_named, machine, machine_config, refusal, run_topomgr, text,
    wait_for, Leftover,
};
use crate::daemon::Daemon;

/// The example machine, the real CPU provider (CPU 0 reserved), state in
/// `state` and the cgroup root `root` (both absolute).
fn example_config(dir: &Path, name: &str, state: &Path, root: &Path) -> PathBuf {
    let config = dir.join(name);
    fs::write(
        &config,
        format!(
            "policy = \"single-numa-node\"\nsysfs_root = \"{}\"\nstate_dir = \"{}\"\ncgroup_root = \"{}\"\n\
             [providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\npolicy = \"static\"\nreserved_cpus = \"0\"\n",
            common::example_sys(),
            state.display(),
            root.display(),
            common::cpu_plugin().display()
        ),
    )
    .unwrap();
    config
}

#[test]
fn a_second_daemon_on_the_same_cgroup_root_is_refused_at_once_naming_the_first() {
    let dir = common::scratch_dir("nodelock-daemons")
        .canonicalize()
        .unwrap();
    let root = dir.join("cgroup");
    fs::create_dir(&root).unwrap();
    std::os::unix::fs::symlink(&root, dir.join("cgroup-link")).unwrap();
    let (state_a, state_b) = (dir.join("state-a"), dir.join("state-b"));
    let a = example_config(&dir, "a.toml", &state_a, &root);
    let a_sock = dir.join("a.sock");
    let first = Daemon::start(&a, &a_sock);
    let named = daemon_named(&a, &a_sock, &state_a, first.child.id());

    let b_sock = dir.join("b.sock");
    for (name, b_root) in [
        ("b.toml", root.clone()),
        ("b-link.toml", dir.join("cgroup-link")),
    ] {
        let b = example_config(&dir, name, &state_b, &b_root);
        let out = run_topomgr(&[
            "--config",
            &b.to_string_lossy(),
            "serve",
            "--socket",
            &b_sock.to_string_lossy(),
        ]);
        assert_eq!(
            refusal(&out),
            format!(
                "topomgr: error: the directory {} (not a cgroup filesystem) is managed by {named}, and one node has one owner: stop that daemon first, or use it (its socket is {})",
                root.display(),
                a_sock.display()
            ),
            "cgroup_root {}",
            b_root.display()
        );
        assert!(
            !state_b.exists() && !b_sock.exists(),
            "the refused daemon made something"
        );
    }
    // The first one serves on, untouched.
    let health: Health = first.client().get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(health.pods, 0);
    drop(first);
    // Once it is gone, the second one starts.
    let b = Daemon::start(&dir.join("b.toml"), &b_sock);
    drop(b);
}

/// A Guaranteed pod of two whole CPUs.
fn two_cpus(uid: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {uid}, uid: {uid}}}\nspec:\n  containers:\n  - name: app\n    resources: {{limits: {{cpu: \"2\", memory: 1Gi}}}}\n"
    )
}

/// The first command in backquotes in a refusal.
fn suggested(message: &str) -> String {
    let start = message.find('`').expect("a suggested command") + 1;
    let len = message[start..].find('`').expect("a suggested command");
    message[start..start + len].to_owned()
}

/// Runs a suggested shell command line with `topomgr` as the binary under
/// test.
fn run_suggested(line: &str) -> Output {
    let line = line.replacen(
        "topomgr ",
        &format!("{} ", common::topomgr_bin().display()),
        1,
    );
    Command::new("sh").args(["-c", &line]).output().unwrap()
}

#[test]
fn one_shot_commands_on_a_daemons_state_directory_fail_at_once_with_the_form_that_works() {
    let dir = common::scratch_dir("nodelock-oneshot")
        .canonicalize()
        .unwrap();
    let root = dir.join("cgroup");
    let state = dir.join("state");
    let config = example_config(&dir, "topomgr.toml", &state, &root);
    let socket = dir.join("t.sock");
    let d = Daemon::start(&config, &socket);
    let named = daemon_named(&config, &socket, &state, d.child.id());
    let pod = dir.join("pod.yaml");
    let uid = "u-two-cpus";
    fs::write(&pod, two_cpus(uid)).unwrap();
    let (cfg, st, p) = (
        config.to_string_lossy(),
        state.to_string_lossy(),
        pod.to_string_lossy(),
    );
    let lock = state.join("topomgr.lock");
    let refused = |args: &[&str], role: &str| -> String {
        let start = Instant::now();
        let out = run_topomgr(args);
        // It did not wait for the daemon to let go (it never does).
        assert!(start.elapsed() < STATE_LOCK_WAIT, "{args:?} waited");
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        let head = format!(
            "topomgr: error: state directory {st} belongs to {named} for as long as it runs; {role} never waits for it: "
        );
        let tail = format!(" (lock {})\n", lock.display());
        assert!(err.starts_with(&head) && err.ends_with(&tail), "{err}");
        err[head.len()..err.len() - tail.len()].to_owned()
    };

    let remedy = refused(
        &["--config", &cfg, "admit", "--state-dir", &st, &p],
        "topomgr admit --state-dir",
    );
    assert_eq!(
        remedy,
        format!(
            "admit through it: `topomgr admit --socket {} POD...`",
            socket.display()
        )
    );
    let out = run_suggested(&suggested(&remedy).replace("POD...", &p));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let admitted: Admissions = serde_json::from_slice(&out.stdout).unwrap();
    assert!(admitted.pods[0].admitted, "{admitted:?}");

    let remedy = refused(
        &[
            "--config",
            &cfg,
            "admit",
            "--state-dir",
            &st,
            "--dry-run",
            &p,
        ],
        "topomgr admit --state-dir --dry-run",
    );
    let what_if = suggested(&remedy);
    assert_eq!(
        what_if,
        format!(
            "curl --unix-socket {} -X POST -H 'Content-Type: application/yaml' --data-binary @POD.yaml 'http://localhost/v1/pods?dry_run=true&explain=true'",
            socket.display()
        )
    );
    let remedy = refused(
        &["--config", &cfg, "explain", "--state-dir", &st, &p],
        "topomgr explain --state-dir",
    );
    assert_eq!(suggested(&remedy), what_if);
    let other = dir.join("other.yaml");
    fs::write(&other, two_cpus("u-what-if")).unwrap();
    let out = run_suggested(&what_if.replace("POD.yaml", &other.to_string_lossy()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let explained: Explains = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    assert_eq!(explained.pods.len(), 1);

    let remedy = refused(
        &["--config", &cfg, "export", "nrt", "--state-dir", &st],
        "topomgr export nrt --state-dir",
    );
    let out = run_suggested(&suggested(&remedy));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("\"kind\": \"NodeResourceTopology\""));

    let remedy = refused(
        &[
            "--config",
            &cfg,
            "provider",
            "--state-dir",
            &st,
            "cpu",
            "hints",
            "--pod",
            &p,
        ],
        "topomgr provider --state-dir",
    );
    let copy = dir.join("state-copy");
    let cp = suggested(&remedy)
        .replace("DIR", &st)
        .replace("/tmp/topomgr-state-copy", &copy.to_string_lossy());
    let out = run_suggested(&cp);
    assert!(out.status.success(), "{cp}: {}", text(&out.stderr));
    let out = run_topomgr(&[
        "--config",
        &cfg,
        "provider",
        "--state-dir",
        &copy.to_string_lossy(),
        "cpu",
        "hints",
        "--pod",
        &p,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let remedy = refused(
        &["--config", &cfg, "release", "--state-dir", &st, uid],
        "topomgr release --state-dir",
    );
    let out = run_suggested(&suggested(&remedy).replace("UID", uid));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let health: Health = d.client().get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(health.pods, 0, "{health:?}");
}

/// Issue 37 item 3: `admit --state-dir` of another state directory books
/// the node's CPUs even when its state records no cgroups, so beside a
/// daemon it is refused at once with the form that works, and books
/// nothing; `--dry-run` (which books nothing) still answers.
#[test]
fn admit_with_another_state_directory_beside_a_daemon_is_refused_and_books_nothing() {
    let dir = common::scratch_dir("nodelock-admit-beside")
        .canonicalize()
        .unwrap();
    let root = dir.join("cgroup");
    let (state_a, state_b) = (dir.join("state-a"), dir.join("state-b"));
    let a = example_config(&dir, "a.toml", &state_a, &root);
    let socket = dir.join("a.sock");
    let d = Daemon::start(&a, &socket);
    let named = daemon_named(&a, &socket, &state_a, d.child.id());
    let pod = dir.join("pod.yaml");
    fs::write(&pod, two_cpus("u-beside")).unwrap();
    let (cfg, b, p) = (
        a.to_string_lossy(),
        state_b.to_string_lossy(),
        pod.to_string_lossy(),
    );
    let start = Instant::now();
    let out = run_topomgr(&["--config", &cfg, "admit", "--state-dir", &b, &p]);
    assert!(start.elapsed() < STATE_LOCK_WAIT, "it waited");
    let message = refusal(&out);
    assert_eq!(
        message,
        format!(
            "topomgr: error: the directory {} (not a cgroup filesystem) is managed by {named}; topomgr admit --state-dir does not book or change its CPUs beside it: admit through it: `topomgr admit --socket {} POD...`",
            root.display(),
            socket.display()
        )
    );
    assert!(
        !state_b.join("state.ckpt").exists() && !state_b.join("state.journal").exists(),
        "the refused admission booked something in {}",
        state_b.display()
    );
    // What if: nothing is booked, so it answers.
    let out = run_topomgr(&[
        "--config",
        &cfg,
        "admit",
        "--state-dir",
        &b,
        "--dry-run",
        &p,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The remedy works: the daemon admits it.
    let remedy = message.rsplit_once("beside it: ").unwrap().1;
    let out = run_suggested(&suggested(remedy).replace("POD...", &p));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let health: Health = d.client().get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(health.pods, 1, "{health:?}");
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn a_run_without_a_daemon_owns_the_node_for_its_state_directory() {
    let (_guard, online) = machine("a_run_without_a_daemon_owns_the_node_for_its_state_directory");
    let dir = common::scratch_dir("nodelock-run").canonicalize().unwrap();
    let (s1, s2) = (dir.join("s1"), dir.join("s2"));
    let r1 = machine_config(&dir, "r1.toml", &s1, &online, "");
    let r2 = machine_config(&dir, "r2.toml", &s2, &online, "");
    let hierarchy = Hierarchy::of(Path::new("/sys/fs/cgroup")).to_string();

    let mut a = Command::new(common::topomgr_bin())
        .args([
            "--config",
            &r1.to_string_lossy(),
            "run",
            "--cpus",
            "1",
            "--",
            "sleep",
            "60",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let a_pid = a.id();
    let sleeper = command_of(a_pid, "sleep");
    let run_a = format!(
        "topomgr run (pid {a_pid}, command `{} --config {} run --cpus 1 -- sleep 60`, state directory {})",
        common::topomgr_bin().display(),
        r1.display(),
        s1.display()
    );

    // A daemon, whatever its state directory, is refused while the run
    // owns the node.
    let d2 = machine_config(&dir, "d2.toml", &s2, &online, "");
    let out = run_topomgr(&[
        "--config",
        &d2.to_string_lossy(),
        "serve",
        "--socket",
        &dir.join("d2.sock").to_string_lossy(),
    ]);
    assert_eq!(
        refusal(&out),
        format!("topomgr: error: cannot serve {hierarchy}: it is in use by {run_a}; the daemon must be its only owner: wait until they end (or stop them), then start the daemon")
    );
    // So is a run of another state directory; the command never runs.
    let marker = dir.join("ran");
    let out = run_topomgr(&[
        "--config",
        &r2.to_string_lossy(),
        "run",
        "--cpus",
        "1",
        "--",
        "touch",
        &marker.to_string_lossy(),
    ]);
    assert_eq!(
        refusal(&out),
        format!(
            "topomgr: error: {hierarchy} is managed with state directory {} by {run_a}; one node has one owner, so topomgr run with state directory {} is refused (two state directories would hand out the same CPUs): use state directory {} (state_dir in the config, or --state-dir), or wait until they end",
            s1.display(),
            s2.display(),
            s1.display()
        )
    );
    assert!(!marker.exists());
    // A run of the same state directory shares the node: the shared pool,
    // without the CPU the first one holds.
    let out = run_topomgr(&[
        "--config",
        &r1.to_string_lossy(),
        "run",
        "--",
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status",
    ]);
    assert_eq!(text(&out.stderr), "");
    let mut pool = online.clone();
    pool.remove(online.iter().last().unwrap());
    assert_eq!(text(&out.stdout), format!("Cpus_allowed_list:\t{pool}\n"));

    // kill -9, not reaped: a zombie, whose command died with it. It owns
    // nothing any more: a daemon of its state directory starts and
    // releases its pod.
    a.kill().unwrap();
    wait_for("the command to die with topomgr", || !alive(sleeper));
    assert!(
        !alive(a_pid) && Path::new(&format!("/proc/{a_pid}")).exists(),
        "a zombie"
    );
    let d1 = machine_config(&dir, "d1.toml", &s1, &online, "");
    let d = Daemon::start(&d1, &dir.join("d1.sock"));
    let health: Health = d.client().get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(health.pods, 0, "{health:?}");
    assert!(
        health
            .notes
            .iter()
            .any(|n| n.contains(&format!(" of process {a_pid} (start time "))
                && n.ends_with(", which is gone, was released (its cgroups were empty or gone)")),
        "{health:?}"
    );
    assert_eq!(health.shared_pool, online);
    drop(d);
    a.wait().unwrap();
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn a_daemon_inside_the_hierarchy_of_another_is_refused() {
    let (_guard, online) = machine("a_daemon_inside_the_hierarchy_of_another_is_refused");
    let dir = common::scratch_dir("nodelock-nested")
        .canonicalize()
        .unwrap();
    let (s1, s2) = (dir.join("s1"), dir.join("s2"));
    let outer = machine_config(&dir, "outer.toml", &s1, &online, "");
    let socket = dir.join("outer.sock");
    let d = Daemon::start(&outer, &socket);
    let Hierarchy::Cgroupfs { top, .. } = Hierarchy::of(Path::new("/sys/fs/cgroup")) else {
        panic!("no cgroup hierarchy at /sys/fs/cgroup");
    };
    // A root deeper in the same hierarchy hands out the same CPUs.
    let inner_root = top.join(format!("topomgr-test-nested-{}", std::process::id()));
    let inner = dir.join("inner.toml");
    fs::write(
        &inner,
        fs::read_to_string(&outer)
            .unwrap()
            .replace(
                "cgroup_root = \"/sys/fs/cgroup\"",
                &format!("cgroup_root = \"{}\"", inner_root.display()),
            )
            .replace(&s1.display().to_string(), &s2.display().to_string()),
    )
    .unwrap();
    let out = run_topomgr(&[
        "--config",
        &inner.to_string_lossy(),
        "serve",
        "--socket",
        &dir.join("inner.sock").to_string_lossy(),
    ]);
    assert_eq!(
        refusal(&out),
        format!(
            "topomgr: error: the cgroup hierarchy at {} is managed by {}, and one node has one owner: stop that daemon first, or use it (its socket is {})",
            top.display(),
            daemon_named(&outer, &socket, &s1, d.child.id()),
            socket.display()
        )
    );
    assert!(!s2.exists());
}

/// A process of `flock -F` (no fork: the lock is the process's own, so a
/// kill lets it go) holding `lock` exclusively while it sleeps, once it
/// holds it and runs `sleep`. Killed when dropped.
fn foreign_flock(lock: &Path) -> (std::process::Child, Leftover) {
    let child = Command::new("flock")
        .args(["-F", "-x"])
        .arg(lock)
        .args(["sleep", "60"])
        .stdin(Stdio::null())
        .spawn()
        .expect("flock(1) (util-linux)");
    let pid = child.id();
    wait_for("flock to hold the lock and run sleep", || {
        fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x0060\x00")
    });
    (child, Leftover(pid))
}

/// `topomgr ARGS` (no `-v`, no RUST_LOG) with its standard error read line
/// by line as it comes.
fn spawn_reading_stderr(args: &[&str]) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new(common::topomgr_bin())
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// The first line of `rx` holding `what`, within `within`.
fn line_with(rx: &mpsc::Receiver<String>, what: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(what) => return line,
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    panic!("no line with {what:?} within {within:?}; stderr so far: {seen:?}");
}

/// A one-shot command waiting for the state directory's lock says at once,
/// on stderr and without `-v`, what it waits for: the holder as it
/// recorded itself; over a record whose process is gone (the lock held by
/// something that recorded nothing, here `flock(1)`), no holder and no
/// dead pid. It goes on as soon as the holder lets go.
#[test]
fn a_one_shot_waiting_for_the_state_lock_says_at_once_what_it_waits_for() {
    let dir = common::scratch_dir("nodelock-wait").canonicalize().unwrap();
    let root = dir.join("cgroup");
    let state = dir.join("state");
    fs::create_dir_all(&state).unwrap();
    let config = example_config(&dir, "topomgr.toml", &state, &root);
    let lock = state.join("topomgr.lock");
    let (cfg, st) = (config.to_string_lossy(), state.to_string_lossy());
    let pods = ["--config", &cfg, "pods", "--state-dir", &st];

    // The holder recorded itself: named, role, pid and command.
    let (mut holder, _kill) = foreign_flock(&lock);
    let recorded = Holder::process(holder.id(), Role::Admit, &state, None).unwrap();
    fs::write(&lock, recorded.to_line() + "\n").unwrap();
    let start = Instant::now();
    let (mut waiting, rx) = spawn_reading_stderr(&pods);
    let line = line_with(&rx, "waiting up to", Duration::from_secs(20));
    assert!(
        start.elapsed() < STATE_LOCK_WAIT / 2,
        "said after {:?}",
        start.elapsed()
    );
    assert!(
        line.ends_with(&format!(
            "waiting up to {} s for state directory {st}: it is in use by {recorded} (lock {})",
            STATE_LOCK_WAIT.as_secs(),
            lock.display()
        )),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "topomgr admit --state-dir (pid {}, command `sleep 60`",
            holder.id()
        )),
        "{line}"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    let status = waiting.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(
        start.elapsed() < STATE_LOCK_WAIT,
        "it waited its whole time"
    );

    // A record left by a process that is gone, under a foreign flock.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = Holder {
        pid: dead,
        start_time: 1,
        ..recorded
    };
    let (mut holder, _kill) = foreign_flock(&lock);
    fs::write(&lock, stale.to_line() + "\n").unwrap();
    let (mut waiting, rx) = spawn_reading_stderr(&pods);
    let line = line_with(&rx, "waiting up to", Duration::from_secs(20));
    assert!(
        line.ends_with(&format!(
            "it is in use by a process that left no live holder record (the record is missing or stale; find the holder with `fuser -v {}`) (lock {})",
            lock.display(),
            lock.display()
        )),
        "{line}"
    );
    assert!(!line.contains(&format!("pid {dead}")), "{line}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(waiting.wait().unwrap().success());
}
