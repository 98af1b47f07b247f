//! `topomgr run` on a node a daemon owns: the run goes through the daemon
//! (an owned admission with the run as its owner, the cgroup attached by the
//! daemon, the release asked of it), with its own config's other state
//! directory never touched. On the machine's cgroup hierarchy, with the
//! real CPU provider and one CPU to give exclusively; what the command got
//! is read from inside it.
//!
//! After each step the daemon's view and the cgroups agree: the one
//! exclusive CPU is held by one pod at most, and nothing is held for a run
//! that is gone.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use topomgr_cgroup::hierarchy::Hierarchy;
use topomgr_client::http::Client;
use topomgr_node::api::{Health, OwnerSpec, PodList};
use topomgr_node::state::pod_owner::start_time;
use topomgr_sdk::CpuSet;

use crate::common;
use crate::common::{alive, command_of, machine, machine_config, run_topomgr, text, wait_for};
use crate::daemon::Daemon;

/// A daemon (state `sd`, socket `d.sock`, reclaiming every 200 ms) and the
/// config of runs (state `sr`, another directory, and the same socket).
struct Setup {
    dir: PathBuf,
    daemon: Option<Daemon>,
    socket: PathBuf,
    run_config: PathBuf,
    run_state: PathBuf,
    online: CpuSet,
    /// The CPU the CPU provider may give exclusively.
    free: u32,
    _guard: common::NodeGuard,
}

impl Setup {
    fn new(test: &str) -> Setup {
        let (guard, online) = machine(test);
        let dir = common::scratch_dir(test).canonicalize().unwrap();
        let socket = dir.join("d.sock");
        let daemon_table = format!(
            "socket = \"{}\"\nreclaim_interval_ms = 200",
            socket.display()
        );
        let d = machine_config(&dir, "d.toml", &dir.join("sd"), &online, &daemon_table);
        let run_state = dir.join("sr");
        let run_config = machine_config(&dir, "r.toml", &run_state, &online, &daemon_table);
        let daemon = Daemon::start(&d, &socket);
        let free = online.iter().last().unwrap();
        Setup {
            dir,
            daemon: Some(daemon),
            socket,
            run_config,
            run_state,
            online,
            free,
            _guard: guard,
        }
    }

    fn client(&self) -> Client {
        Client::new(&self.socket)
    }

    fn run(&self, args: &[&str]) -> Command {
        let mut c = Command::new(common::topomgr_bin());
        c.arg("--config")
            .arg(&self.run_config)
            .arg("run")
            .args(args);
        c
    }

    fn pods(&self) -> PodList {
        self.client().get("/v1/pods").unwrap().parse().unwrap()
    }

    fn health(&self) -> Health {
        self.client().get("/v1/health").unwrap().parse().unwrap()
    }

    /// Nothing held: no pod, no owner, every online CPU in the shared
    /// pool, no cgroup left under `topomgr/` of the runs of `pid`, and the
    /// runs' own state directory never made.
    fn nothing_held(&self, pids: &[u32]) {
        let list = self.pods();
        assert!(list.pods.is_empty() && list.owners.is_empty(), "{list:?}");
        let health = self.health();
        assert_eq!(health.shared_pool, self.online, "{health:?}");
        assert!(health.exclusive_cpus.is_empty(), "{health:?}");
        for pid in pids {
            assert_eq!(
                common::run_cgroups(&common::machine_top(), *pid),
                Vec::<String>::new()
            );
        }
        assert!(
            !self.run_state.exists(),
            "the run made its own state directory"
        );
    }

    /// The one pod the daemon holds, for `topomgr run` `pid`: its uid, with
    /// its owner, its one exclusive CPU and its cgroup checked.
    fn held_for(&self, pid: u32) -> String {
        let list = self.pods();
        assert_eq!(list.pods.len(), 1, "{list:?}");
        let pod = &list.pods[0];
        assert!(pod.uid.starts_with(&format!("run-{pid}-")), "{list:?}");
        assert_eq!(
            list.owners.get(&pod.uid),
            Some(&OwnerSpec::process(pid, start_time(pid).unwrap()))
        );
        let c = &pod.containers[0];
        assert!(c.exclusive, "{list:?}");
        assert_eq!(c.cpus, CpuSet::from_iter([self.free]));
        assert_eq!(
            list.attachments[&pod.uid]["main"],
            format!("topomgr/{}/main", pod.uid)
        );
        assert_eq!(self.health().exclusive_cpus, CpuSet::from_iter([self.free]));
        pod.uid.clone()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        drop(self.daemon.take());
    }
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn a_run_beside_a_daemon_is_placed_by_it_and_released_at_exit() {
    let s = Setup::new("run-daemon-placed");
    let (f1, f2) = (s.dir.join("f1"), s.dir.join("f2"));
    let script = format!(
        // At most a minute: a failed test leaves nothing running.
        "grep Cpus_allowed_list /proc/self/status; touch {}; i=0; while [ ! -e {} ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done; exit 7",
        f1.display(),
        f2.display()
    );
    let a = s
        .run(&["--cpus", "1", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let a_pid = a.id();
    wait_for("the command to run", || f1.exists());
    // The daemon holds it, for the run, with the CPU the command runs on.
    let uid = s.held_for(a_pid);

    // Another run, of the same config, cannot have that CPU: the daemon
    // refuses it and names who holds it. Its command never runs.
    let marker = s.dir.join("ran");
    let out = s
        .run(&["--cpus", "1", "--", "touch", &marker.to_string_lossy()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "topomgr: pod rejected: TopologyAffinityError: Resources cannot be allocated with Topology Locality: container \"main\" needs every resource on one common NUMA node (policy single-numa-node); cpu (cpu): cannot be satisfied on any NUMA node (requested 1; free/allocatable by NUMA node: {})\n\
             topomgr: CPUs held exclusively by other workloads: CPUs {}: pod default/{uid} (uid {uid}) container \"main\", owned by process {a_pid}\n",
            none_free_but_one_allocatable(s.free),
            s.free
        )
    );
    assert!(!marker.exists());
    // A shared one through the socket named on the command line: the pool
    // without that CPU.
    let out = s
        .run(&[
            "--socket",
            &s.socket.to_string_lossy(),
            "--",
            "grep",
            "Cpus_allowed_list",
            "/proc/self/status",
        ])
        .output()
        .unwrap();
    assert_eq!(text(&out.stderr), "");
    let mut pool = s.online.clone();
    pool.remove(s.free);
    assert_eq!(text(&out.stdout), format!("Cpus_allowed_list:\t{pool}\n"));
    assert_eq!(s.held_for(a_pid), uid);

    // The command ends: its status is the run's, and everything is given
    // back.
    fs::write(&f2, "").unwrap();
    let out = a.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    assert_eq!(
        text(&out.stdout),
        format!("Cpus_allowed_list:\t{}\n", s.free)
    );
    s.nothing_held(&[a_pid]);
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn a_run_killed_with_sigkill_is_reclaimed_by_the_daemon() {
    let s = Setup::new("run-daemon-kill9");
    let mut a = s
        .run(&["--cpus", "1", "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let a_pid = a.id();
    let sleeper = command_of(a_pid, "sleep");
    s.held_for(a_pid);
    // kill -9, not reaped: a zombie. The command dies with it (parent-death
    // signal), and the daemon releases what it held.
    a.kill().unwrap();
    wait_for("the command to die with topomgr run", || !alive(sleeper));
    wait_for("the daemon to reclaim the pod", || s.pods().pods.is_empty());
    assert!(
        Path::new(&format!("/proc/{a_pid}")).exists(),
        "not reaped yet"
    );
    s.nothing_held(&[a_pid]);
    let metrics = String::from_utf8(s.client().get("/metrics").unwrap().body).unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == "topomgr_reclaimed_pods_total{owner=\"process\",cause=\"owner_gone\"} 1"),
        "{metrics}"
    );
    a.wait().unwrap();
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn sigterm_is_forwarded_and_leftover_processes_keep_the_pod_until_they_exit() {
    let mut s = Setup::new("run-daemon-signals");
    // SIGTERM to the run reaches the command; the run exits 128 + 15 and
    // the pod is released.
    let a = s
        .run(&["--cpus", "1", "--", "sleep", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let a_pid = a.id();
    let sleeper = command_of(a_pid, "sleep");
    let kill = Command::new("kill")
        .args(["-TERM", &a_pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = a.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    assert!(!alive(sleeper));
    s.nothing_held(&[a_pid]);

    // A command that leaves a process behind: the pod stays held (by the
    // daemon's reclaim too, while the process runs), and is released once
    // it exits.
    let out = s
        .run(&[
            "--cpus",
            "1",
            "--",
            "sh",
            "-c",
            "sleep 60 >/dev/null 2>&1 & echo $!",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let left: u32 = text(&out.stdout).trim().parse().unwrap();
    let _left = common::Leftover(left);
    let list = s.pods();
    assert_eq!(list.pods.len(), 1, "{list:?}");
    let uid = list.pods[0].uid.clone();
    assert_eq!(
        text(&out.stderr),
        format!(
            "topomgr: warning: processes {left} are still in the command's cgroup; its CPUs stay reserved until they exit (the daemon releases them then; topomgr release --socket {} {uid} releases them now)\n",
            s.socket.display()
        )
    );
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(s.pods().pods.len(), 1, "released while its process runs");
    // It keeps the node for the daemon's state directory, also while the
    // daemon is stopped.
    s.daemon.take().unwrap().stop();
    let out = s.run(&["--cpus", "1", "--", "true"]).output().unwrap();
    let sd = s.dir.join("sd");
    assert_eq!(
        common::refusal(&out),
        format!(
            "topomgr: error: {} is managed with state directory {} by a process left in the cgroup of a topomgr run (pid {left}, command `sleep 60`, state directory {}, socket {}); one node has one owner, so topomgr run with state directory {} is refused (two state directories would hand out the same CPUs): use state directory {} (state_dir in the config, or --state-dir), or wait until they end",
            Hierarchy::of(Path::new("/sys/fs/cgroup")),
            sd.display(),
            sd.display(),
            s.socket.display(),
            s.run_state.display(),
            sd.display()
        )
    );
    s.daemon = Some(Daemon::start(&s.dir.join("d.toml"), &s.socket));
    assert_eq!(s.pods().pods.len(), 1);
    let kill = Command::new("kill")
        .args(["-9", &left.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    wait_for("the daemon to reclaim the pod", || s.pods().pods.is_empty());
    let run_pid: u32 = uid
        .strip_prefix("run-")
        .and_then(|r| r.split('-').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    s.nothing_held(&[run_pid]);
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn a_run_never_places_on_its_own_when_the_daemon_does_not_answer() {
    let s = Setup::new("run-daemon-unreachable");
    // The run's config names another socket than the daemon's.
    let wrong = s.dir.join("wrong.sock");
    let config = fs::read_to_string(&s.run_config).unwrap().replace(
        &s.socket.display().to_string(),
        &wrong.display().to_string(),
    );
    fs::write(&s.run_config, config).unwrap();
    let marker = s.dir.join("ran");
    let out = run_topomgr(&[
        "--config",
        &s.run_config.to_string_lossy(),
        "run",
        "--cpus",
        "1",
        "--",
        "touch",
        &marker.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let d = s.daemon.as_ref().unwrap();
    assert_eq!(
        text(&out.stderr),
        format!(
            "topomgr: error: the topomgr daemon (pid {}, command `{} --config {} serve --socket {}`, state directory {}, socket {}), which manages this node's cpusets, does not answer at {}: cannot connect to the topomgr daemon at {}: no socket there (ENOENT) (is `topomgr serve` running there? pass --socket PATH or set [daemon] socket); topomgr run never places a command on its own beside a daemon; it listens on {}: pass --socket {} (or set [daemon] socket to it)\n",
            d.child.id(),
            common::topomgr_bin().display(),
            s.dir.join("d.toml").display(),
            s.socket.display(),
            s.dir.join("sd").display(),
            s.socket.display(),
            wrong.display(),
            wrong.display(),
            s.socket.display(),
            s.socket.display()
        )
    );
    assert!(!marker.exists());
    s.nothing_held(&[]);
    // What it says works.
    let out = s
        .run(&[
            "--socket",
            &s.socket.to_string_lossy(),
            "--cpus",
            "1",
            "--",
            "touch",
            &marker.to_string_lossy(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(marker.exists());
    s.nothing_held(&[]);
}

/// The command line of `packaging/examples/numa-worker.service`, with this
/// test's binary, config and socket, one CPU (what this machine can give)
/// and a command that shows what it got: placed by the daemon, released
/// when it ends.
#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn the_example_services_command_line_runs_through_the_daemon() {
    let s = Setup::new("run-daemon-unit");
    let unit =
        fs::read_to_string(common::workspace_root().join("packaging/examples/numa-worker.service"))
            .unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart");
    let (options, command) = exec.split_once(" -- ").expect("a command after --");
    let options = options
        .replace(
            "/usr/bin/topomgr",
            &common::topomgr_bin().display().to_string(),
        )
        .replace(
            "/etc/topomgr/topomgr.toml",
            &s.run_config.display().to_string(),
        )
        .replace("/run/topomgr/topomgr.sock", &s.socket.display().to_string())
        .replace("--cpus 2 --memory 4Gi", "--cpus 1");
    assert!(!command.is_empty());
    let mut words = options.split_whitespace();
    let out = Command::new(words.next().unwrap())
        .args(words)
        .args(["--", "grep", "Cpus_allowed_list", "/proc/self/status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    assert_eq!(
        text(&out.stdout),
        format!("Cpus_allowed_list:\t{}\n", s.free)
    );
    s.nothing_held(&[]);
}

/// A run placed by the daemon keeps owning the node for the daemon's state
/// directory when the daemon stops: nothing of another state directory
/// takes its CPU meanwhile, and the daemon that starts again finds it.
#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn a_run_through_a_daemon_keeps_the_node_for_its_state_directory_when_the_daemon_stops() {
    let mut s = Setup::new("run-daemon-stopped");
    let a = s
        .run(&["--cpus", "1", "--", "sleep", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let a_pid = a.id();
    let sleeper = command_of(a_pid, "sleep");
    let uid = s.held_for(a_pid);
    s.daemon.take().unwrap().stop();

    let hierarchy = Hierarchy::of(Path::new("/sys/fs/cgroup")).to_string();
    let sd = s.dir.join("sd");
    let run_a = format!(
        "topomgr run (through the daemon) (pid {a_pid}, command `{} --config {} run --cpus 1 -- sleep 60`, state directory {}, socket {})",
        common::topomgr_bin().display(),
        s.run_config.display(),
        sd.display(),
        s.socket.display()
    );
    // A run of its own state directory cannot place beside it.
    let marker = s.dir.join("ran");
    let out = s
        .run(&["--cpus", "1", "--", "touch", &marker.to_string_lossy()])
        .output()
        .unwrap();
    assert_eq!(
        common::refusal(&out),
        format!(
            "topomgr: error: {hierarchy} is managed with state directory {} by {run_a}; one node has one owner, so topomgr run with state directory {} is refused (two state directories would hand out the same CPUs): use state directory {} (state_dir in the config, or --state-dir), or wait until they end",
            sd.display(),
            s.run_state.display(),
            sd.display()
        )
    );
    assert!(!marker.exists());
    // Nor can a daemon of another state directory.
    let out = run_topomgr(&[
        "--config",
        &s.run_config.to_string_lossy(),
        "serve",
        "--socket",
        &s.dir.join("other.sock").to_string_lossy(),
    ]);
    assert_eq!(
        common::refusal(&out),
        format!("topomgr: error: cannot serve {hierarchy}: it is in use by {run_a}; the daemon must be its only owner: wait until they end (or stop them), then start the daemon")
    );
    // The daemon of its state directory starts and finds it, and the run
    // releases through it when its command ends.
    s.daemon = Some(Daemon::start(&s.dir.join("d.toml"), &s.socket));
    assert_eq!(s.held_for(a_pid), uid);
    let kill = Command::new("kill")
        .args(["-TERM", &a_pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = a.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    assert!(!alive(sleeper));
    s.nothing_held(&[a_pid]);
}

/// The CPU provider's numbers per NUMA node when every online CPU but
/// `cpu` is reserved and `cpu` is taken: `N: 0/1` for its node, `N: 0/0`
/// for every other node.
fn none_free_but_one_allocatable(cpu: u32) -> String {
    let mut nodes: Vec<(u32, bool)> = fs::read_dir("/sys/devices/system/node")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n: u32 = name.strip_prefix("node")?.parse().ok()?;
            let cpus = fs::read_to_string(e.path().join("cpulist")).ok()?;
            Some((n, CpuSet::parse(cpus.trim()).is_ok_and(|c| c.contains(cpu))))
        })
        .collect();
    nodes.sort();
    nodes
        .iter()
        .map(|(n, has)| format!("{n}: 0/{}", u32::from(*has)))
        .collect::<Vec<_>>()
        .join(", ")
}
