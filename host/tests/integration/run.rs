//! `topomgr run` end to end: the real binary, the mock provider scripted to
//! give CPU 1 exclusively on the live machine, real cgroups under
//! /sys/fs/cgroup: the tests that need them are `#[ignore]`d in a plain
//! run and fail, saying what is missing, when run without root, a cpuset
//! controller or the CPUs they expect.

use crate::common::{self, alive, text, wait_for};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use topomgr_node::api::{Admission, Admissions, Health};

const ALLOCATION: &str =
    "allocation = { cpus = \"1\", exclusive = true, mems = [0], env = { TOPOMGR_TEST = \"aligned\" } }";

/// The real hierarchy's root (v1: its cpuset directory) and the guard of
/// the tests on it (one node, one owner); fails saying what is missing.
fn live(test: &str) -> (PathBuf, common::NodeGuard) {
    let node = common::node_guard();
    let mgr = common::real_cgroups(test);
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    assert!(
        topomgr_sdk::CpuSet::parse(online.trim()).is_ok_and(|c| c.contains(1)),
        "{test} needs CPU 1 online (the mock gives CPU 1); online: {:?}",
        online.trim()
    );
    (mgr.root().to_path_buf(), node)
}

/// A config dir: cgroup_root /sys/fs/cgroup, state in `<dir>/state`, and
/// the drop-in `plugins.d/<name>.toml` with `dropin`.
fn config_with(tag: &str, name: &str, dropin: &str) -> PathBuf {
    let dir = common::scratch_dir(tag);
    let main = format!(
        "policy = \"best-effort\"\nplugin_dirs = []\nsysfs_root = \"/sys\"\ncgroup_root = \"/sys/fs/cgroup\"\nstate_dir = \"{}\"\n",
        dir.join("state").display()
    );
    common::write_config(&dir, &main, &[(&format!("{name}.toml"), dropin)]);
    dir
}

/// [`config_with`] the mock provider scripted by `mock_config`.
fn config_dir(tag: &str, mock_config: &str) -> PathBuf {
    config_with(
        tag,
        "mock",
        &format!(
            "[providers.mock]\nlibrary = \"{}\"\n[providers.mock.config]\n{mock_config}\n",
            common::plugins().mock.display()
        ),
    )
}

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(common::topomgr_bin());
    c.arg("--config")
        .arg(dir.join("topomgr.toml"))
        .arg("run")
        .args(args);
    c
}

/// Runs `topomgr run ARGS`; returns its pid and output.
fn run(dir: &Path, args: &[&str]) -> (u32, Output) {
    let child = command(dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (pid, child.wait_with_output().unwrap())
}

/// The state directory holds no admitted pod.
fn assert_no_pods(dir: &Path) {
    assert_eq!(
        common::state_body(&dir.join("state"))["pods"],
        serde_json::json!({})
    );
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn command_runs_on_the_allocated_cpu() {
    let (root, _node) = live("command_runs_on_the_allocated_cpu");
    let dir = config_dir("run-cpu", ALLOCATION);
    let (pid, out) = run(
        &dir,
        &["--", "grep", "Cpus_allowed_list", "/proc/self/status"],
    );
    assert_eq!(text(&out.stderr), "");
    assert_eq!(text(&out.stdout), "Cpus_allowed_list:\t1\n");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(common::run_cgroups(&root, pid), Vec::<String>::new());
    assert_no_pods(&dir);
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn memory_nodes_cgroup_and_environment() {
    let (root, _node) = live("memory_nodes_cgroup_and_environment");
    let dir = config_dir("run-mems", ALLOCATION);
    let script = "grep Mems_allowed_list /proc/self/status; \
                  grep -E ':cpuset:|^0::' /proc/self/cgroup | head -n 1; echo \"$TOPOMGR_TEST\"";
    let (pid, out) = run(
        &dir,
        &["--cpus", "1", "--memory", "64Mi", "--", "sh", "-c", script],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert_eq!(lines[0], "Mems_allowed_list:\t0");
    assert_eq!(lines[2], "aligned");
    let cgroup = lines[1].rsplit(':').next().unwrap();
    let prefix = format!("/topomgr/run-{pid}-");
    assert!(
        cgroup.starts_with(&prefix) && cgroup.ends_with("/main"),
        "cgroup {cgroup:?} is not {prefix}<nanos>/main"
    );
    let nanos = &cgroup[prefix.len()..cgroup.len() - "/main".len()];
    assert!(nanos.chars().all(|c| c.is_ascii_digit()), "{cgroup}");
    assert!(!root.join(cgroup.trim_start_matches('/')).exists());
    assert!(!root.join(format!("topomgr/run-{pid}-{nanos}")).exists());
    assert_no_pods(&dir);
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn exit_status_is_propagated() {
    let (root, _node) = live("exit_status_is_propagated");
    let dir = config_dir("run-exit", ALLOCATION);
    let (pid, out) = run(&dir, &["--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(text(&out.stderr), "");
    assert_eq!(common::run_cgroups(&root, pid), Vec::<String>::new());
    assert_no_pods(&dir);
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn sigterm_is_forwarded_and_everything_cleaned_up() {
    let (root, _node) = live("sigterm_is_forwarded_and_everything_cleaned_up");
    let dir = config_dir("run-sigterm", ALLOCATION);
    let child = command(&dir, &["--", "sleep", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until the command is inside its cgroup (and exec'd).
    let sleeper = wait_for_command(&root, pid, "sleep");
    assert_eq!(
        fs::read_to_string(format!("/proc/{sleeper}/comm")).unwrap(),
        "sleep\n"
    );
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(text(&out.stderr), "");
    assert_eq!(out.status.code(), Some(128 + 15));
    // The sleep was killed by the forwarded signal and reaped.
    assert!(fs::read_to_string(format!("/proc/{sleeper}/comm")).map_or(true, |c| c != "sleep\n"));
    assert_eq!(common::run_cgroups(&root, pid), Vec::<String>::new());
    assert_no_pods(&dir);
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn rejected_pod_never_runs_the_command() {
    let (root, _node) = live("rejected_pod_never_runs_the_command");
    let dir = config_dir("run-reject", "fail_allocate = \"no widgets left\"");
    let marker = dir.join("ran");
    let (pid, out) = run(
        &dir,
        &["--cpus", "1", "--", "touch", &marker.to_string_lossy()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "topomgr: pod rejected: UnexpectedAdmissionError: provider \"mock\" could not allocate container \"main\": no widgets left\n"
    );
    assert_eq!(text(&out.stdout), "");
    assert!(!marker.exists());
    assert_eq!(common::run_cgroups(&root, pid), Vec::<String>::new());
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn a_missing_command_exits_127_and_cleans_up() {
    let (root, _node) = live("a_missing_command_exits_127_and_cleans_up");
    let dir = config_dir("run-missing", ALLOCATION);
    let (pid, out) = run(&dir, &["--", "/nonexistent/command"]);
    assert_eq!(out.status.code(), Some(127));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("topomgr: cannot start \"/nonexistent/command\" in cgroup ")
            && stderr.ends_with(": No such file or directory (os error 2)\n"),
        "{stderr}"
    );
    assert_eq!(common::run_cgroups(&root, pid), Vec::<String>::new());
    assert_no_pods(&dir);
}

/// Like [`config_dir`], with the state directory of `shared_with`.
fn config_dir_sharing_state(tag: &str, mock_config: &str, shared_with: &Path) -> PathBuf {
    let dir = config_dir(tag, mock_config);
    fs::write(
        dir.join("topomgr.toml"),
        format!(
            "policy = \"best-effort\"\nplugin_dirs = []\nsysfs_root = \"/sys\"\ncgroup_root = \"/sys/fs/cgroup\"\nstate_dir = \"{}\"\n",
            shared_with.join("state").display()
        ),
    )
    .unwrap();
    dir
}

#[test]
#[ignore = "needs root, a cpuset cgroup and CPU 1 and another online"]
fn shared_pool_shrinks_and_grows_around_an_exclusive_run() {
    let (root, _node) = live("shared_pool_shrinks_and_grows_around_an_exclusive_run");
    let online_text = fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = topomgr_sdk::CpuSet::parse(online_text.trim()).unwrap();
    let mut pool = online.clone();
    pool.remove(1);
    assert!(
        !pool.is_empty(),
        "shared_pool_shrinks_and_grows_around_an_exclusive_run needs a CPU besides CPU 1 online"
    );
    let shared = config_dir("run-pool-shared", "allocation = { exclusive = false }");
    let exclusive = config_dir_sharing_state("run-pool-excl", ALLOCATION, &shared);
    let flag = |n: u32| {
        shared
            .join(format!("flag{n}"))
            .to_string_lossy()
            .into_owned()
    };
    let (f1, f2, f3) = (flag(1), flag(2), flag(3));
    let script = format!(
        "grep Cpus_allowed_list /proc/self/status; \
         while [ ! -e {f1} ]; do sleep 0.02; done; grep Cpus_allowed_list /proc/self/status; touch {f2}; \
         while [ ! -e {f3} ]; do sleep 0.02; done; grep Cpus_allowed_list /proc/self/status"
    );
    let a = command(&shared, &["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let a_pid = a.id();
    wait_for("the shared-pool command to start", || {
        common::run_cgroups(&root, a_pid).first().is_some_and(|n| {
            fs::read_to_string(root.join("topomgr").join(n).join("main/cgroup.procs"))
                .is_ok_and(|p| !p.trim().is_empty())
        })
    });
    // The exclusive run takes CPU 1, lets the shared command look, then ends.
    let b_script = format!("touch {f1}; while [ ! -e {f2} ]; do sleep 0.02; done");
    let (_, b) = run(&exclusive, &["--", "sh", "-c", &b_script]);
    assert_eq!(b.status.code(), Some(0), "{}", text(&b.stderr));
    fs::write(&f3, "").unwrap();
    let out = a.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("Cpus_allowed_list:\t{online}\nCpus_allowed_list:\t{pool}\nCpus_allowed_list:\t{online}\n")
    );
    assert_no_pods(&shared);
}

/// The real CPU and memory providers: `run --cpus 1 --memory 64Mi` gets one
/// exclusive CPU (CPU 0 is reserved, so CPU 1) and the memory nodes of its
/// memory (this machine kind has one NUMA node: 0).
#[test]
#[ignore = "needs root, a cpuset cgroup, CPUs 0-1 and one NUMA node"]
fn real_cpu_and_memory_providers_set_cpus_and_mems() {
    let (_root, _node) = live("real_cpu_and_memory_providers_set_cpus_and_mems");
    let nodes = fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("node"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(
        nodes, 1,
        "real_cpu_and_memory_providers_set_cpus_and_mems needs one NUMA node"
    );
    let dir = common::scratch_dir("run-real-providers");
    fs::write(
        dir.join("topomgr.toml"),
        format!(
            "policy = \"single-numa-node\"\nplugin_dirs = []\nsysfs_root = \"/sys\"\ncgroup_root = \"/sys/fs/cgroup\"\nstate_dir = \"{}\"\n",
            dir.join("state").display()
        ),
    )
    .unwrap();
    fs::create_dir_all(dir.join("plugins.d")).unwrap();
    fs::write(
        dir.join("plugins.d/providers.toml"),
        common::real_cpu_and_memory_providers(),
    )
    .unwrap();
    let (_, out) = run(
        &dir,
        &[
            "--cpus",
            "1",
            "--memory",
            "64Mi",
            "--",
            "grep",
            "-E",
            "Cpus_allowed_list|Mems_allowed_list",
            "/proc/self/status",
        ],
    );
    assert_eq!(text(&out.stderr), "");
    assert_eq!(
        text(&out.stdout),
        "Cpus_allowed_list:\t1\nMems_allowed_list:\t0\n"
    );
    assert_eq!(out.status.code(), Some(0));
    assert_no_pods(&dir);
}

/// A config dir with the real CPU provider only: on this 2-CPU machine with
/// CPU 0 reserved, CPU 1 is the only exclusive CPU, so a second exclusive
/// run is refused while the first holds it.
fn cpu_only_config(tag: &str) -> PathBuf {
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    assert_eq!(online.trim(), "0-1", "{tag} needs exactly CPUs 0-1 online");
    config_with(
        tag,
        "cpu",
        &format!(
            "[providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\npolicy = \"static\"\nreserved_cpus = \"0\"\n",
            common::cpu_plugin().display()
        ),
    )
}

/// The pids in the cgroup of the run started by topomgr `pid`, once CMD runs.
fn wait_for_command(root: &Path, pid: u32, comm: &str) -> String {
    let mut found = String::new();
    wait_for("the command to start in its cgroup", || {
        let procs = common::run_cgroups(root, pid).first().and_then(|name| {
            fs::read_to_string(root.join("topomgr").join(name).join("main/cgroup.procs")).ok()
        });
        if let Some(p) = procs.and_then(|p| p.split_whitespace().next().map(str::to_string)) {
            if fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == comm) {
                found = p;
                return true;
            }
        }
        false
    });
    found
}

/// Start `topomgr run --cpus 1 -- sleep 60`, wait until the sleep runs in
/// its cgroup, `kill -9` topomgr and wait until the sleep died with it.
fn run_and_kill_9(root: &Path, dir: &Path) -> u32 {
    let mut child = command(dir, &["--cpus", "1", "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let sleeper = wait_for_command(root, pid, "sleep");
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for("the command to die with topomgr", || {
        !alive(sleeper.parse().unwrap())
    });
    // The reservation is still in the state, held by a dead owner.
    let state = common::state_body(&dir.join("state"));
    assert_eq!(state["pods"].as_object().unwrap().len(), 1, "{state}");
    assert_eq!(state["owners"].as_object().unwrap().len(), 1, "{state}");
    pid
}

/// A `run --cpus 1` gets CPU 1 (what the run of topomgr `pid` held was
/// reclaimed) and leaves no cgroup and no pod behind.
fn next_run_gets_cpu_1(root: &Path, dir: &Path, pid: u32) {
    let (next, out) = run(
        dir,
        &[
            "--cpus",
            "1",
            "--",
            "grep",
            "Cpus_allowed_list",
            "/proc/self/status",
        ],
    );
    assert_eq!(text(&out.stderr), "");
    assert_eq!(text(&out.stdout), "Cpus_allowed_list:\t1\n");
    assert_eq!(common::run_cgroups(root, pid), Vec::<String>::new());
    assert_eq!(common::run_cgroups(root, next), Vec::<String>::new());
    assert_no_pods(dir);
}

/// `kill -9` of `topomgr run`: CMD dies with it (parent-death signal), and
/// the next `run`, `admit --state-dir` or daemon start reclaims the
/// reservation because its owner is dead and its cgroup empty.
#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn a_killed_run_takes_its_command_along_and_is_reclaimed() {
    let (root, _node) = live("a_killed_run_takes_its_command_along_and_is_reclaimed");
    let dir = cpu_only_config("run-kill9");
    let topomgr = |args: &[&str]| {
        Command::new(common::topomgr_bin())
            .arg("--config")
            .arg(dir.join("topomgr.toml"))
            .args(args)
            .output()
            .unwrap()
    };

    // 1. The next run reclaims it and gets CPU 1.
    let pid = run_and_kill_9(&root, &dir);
    next_run_gets_cpu_1(&root, &dir, pid);

    // 2. So does `admit --state-dir`.
    let pid = run_and_kill_9(&root, &dir);
    let pod = dir.join("pod.yaml");
    fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, uid: p}\nspec:\n  containers:\n  - name: app\n    resources: {limits: {cpu: \"1\", memory: 64Mi}}\n",
    )
    .unwrap();
    let state = dir.join("state");
    let out = topomgr(&[
        "admit",
        "--state-dir",
        &state.to_string_lossy(),
        &pod.to_string_lossy(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Admissions = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.pods[0].containers[0].cpus.to_string(), "1", "{v:?}");
    assert_eq!(common::run_cgroups(&root, pid), Vec::<String>::new());
    let out = topomgr(&["release", "--state-dir", &state.to_string_lossy(), "p"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // 3. So does a daemon start, which says so in /v1/health.
    let pid = run_and_kill_9(&root, &dir);
    let socket = dir.join("t.sock");
    let mut daemon = Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(dir.join("topomgr.toml"))
        .args(["serve", "--socket"])
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut health = None;
    wait_for(
        "the daemon to serve",
        || match topomgr_client::http::Client::new(&socket).get("/v1/health") {
            Ok(r) if r.status == 200 => {
                health = Some(r.parse::<Health>().unwrap());
                true
            }
            _ => false,
        },
    );
    let health = health.unwrap();
    let _ = daemon.kill();
    let _ = daemon.wait();
    let gone = format!(" of process {pid} (start time ");
    assert!(
        health.notes.iter().any(|n| n.contains(&gone)
            && n.ends_with(", which is gone, was released (its cgroups were empty or gone)")),
        "{health:?}"
    );
    assert_eq!(health.pods, 0, "{health:?}");
    assert_eq!(common::run_cgroups(&root, pid), Vec::<String>::new());
    assert_no_pods(&dir);
    let state = common::state_body(&dir.join("state"));
    assert_eq!(state["owners"], serde_json::json!({}));
}

/// Processes left behind in the cgroup keep the CPUs reserved: the next run
/// is refused with a message that names the holder and the processes; once
/// they exit the CPU is reclaimed.
#[test]
#[ignore = "needs root, a cpuset cgroup and CPUs 0-1"]
fn leftover_processes_keep_the_cpus_reserved() {
    let (root, _node) = live("leftover_processes_keep_the_cpus_reserved");
    let dir = cpu_only_config("run-leftover");
    let (pid, out) = run(
        &dir,
        &[
            "--cpus",
            "1",
            "--",
            "sh",
            "-c",
            "sleep 60 >/dev/null 2>&1 & echo $!",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let left = text(&out.stdout).trim().to_owned();
    let _left = common::Leftover(left.parse().unwrap());
    assert!(alive(left.parse().unwrap()));
    let held = common::run_cgroups(&root, pid);
    assert_eq!(held.len(), 1);
    let uid = held[0].clone();
    assert_eq!(
        text(&out.stderr),
        format!(
            "topomgr: warning: processes {left} are still in the command's cgroup; its CPUs stay reserved until they exit (the next topomgr run reclaims them then; topomgr --config {} release --state-dir {} {uid} releases them now)\n",
            dir.join("topomgr.toml").display(),
            dir.join("state").display()
        )
    );

    // They own the node for the state directory: a run of another one is
    // refused, naming them.
    let other = config_dir_sharing_state("run-leftover-other", ALLOCATION, &dir.join("other"));
    let (_, out) = run(&other, &["--", "true"]);
    assert_eq!(
        common::refusal(&out),
        format!(
            "topomgr: error: {} is managed with state directory {} by a process left in the cgroup of a topomgr run (pid {left}, command `sleep 60`, state directory {}); one node has one owner, so topomgr run with state directory {} is refused (two state directories would hand out the same CPUs): use state directory {} (state_dir in the config, or --state-dir), or wait until they end",
            topomgr_cgroup::hierarchy::Hierarchy::of(Path::new("/sys/fs/cgroup")),
            dir.join("state").display(),
            dir.join("state").display(),
            dir.join("other/state").display(),
            dir.join("state").display()
        )
    );

    let marker = dir.join("ran");
    let (_, refused) = run(
        &dir,
        &["--cpus", "1", "--", "touch", &marker.to_string_lossy()],
    );
    assert_eq!(refused.status.code(), Some(1));
    assert!(!marker.exists());
    let stderr = text(&refused.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert_eq!(
        lines[0],
        "topomgr: pod rejected: UnexpectedAdmissionError: provider \"cpu\" could not allocate container \"main\": not enough free CPUs: requested 1, 0 free"
    );
    assert_eq!(
        lines[1],
        format!("topomgr: CPUs held exclusively by other workloads: CPUs 1: pod default/{uid} (uid {uid}) container \"main\", topomgr run pid {pid} (exited), processes {left} in its cgroup")
    );

    let kill = Command::new("kill").args(["-9", &left]).status().unwrap();
    assert!(kill.success());
    wait_for("the leftover process to exit", || {
        !alive(left.parse().unwrap())
    });
    next_run_gets_cpu_1(&root, &dir, pid);
}

/// The release command the leftover warning prints, run verbatim, releases
/// the pod at once: its CPUs go back while the process still runs (with a
/// warning saying so), and the next run gets them.
#[test]
#[ignore = "needs root, a cpuset cgroup and CPUs 0-1"]
fn the_leftover_warnings_release_command_works() {
    let (root, _node) = live("the_leftover_warnings_release_command_works");
    let dir = cpu_only_config("run-leftover-release");
    let (pid, out) = run(
        &dir,
        &[
            "--cpus",
            "1",
            "--",
            "sh",
            "-c",
            "sleep 60 >/dev/null 2>&1 & echo $!",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let left = text(&out.stdout).trim().to_owned();
    let _left = common::Leftover(left.parse().unwrap());
    let held = common::run_cgroups(&root, pid);
    assert_eq!(held.len(), 1);
    let uid = held[0].clone();
    let stderr = text(&out.stderr);
    let printed = stderr
        .split_once("; topomgr ")
        .and_then(|(_, rest)| rest.split_once(" releases them now)"))
        .map(|(cmd, _)| format!("topomgr {cmd}"))
        .unwrap_or_else(|| panic!("no release command in {stderr:?}"));
    let words: Vec<&str> = printed.split(' ').collect();
    assert_eq!(words[0], "topomgr");
    assert_eq!(*words.last().unwrap(), uid);
    let released = Command::new(common::topomgr_bin())
        .args(&words[1..])
        .output()
        .unwrap();
    assert_eq!(
        released.status.code(),
        Some(0),
        "{}",
        text(&released.stderr)
    );
    let admission: Admission = serde_json::from_slice(&released.stdout).unwrap();
    assert_eq!(admission.uid, uid);
    assert!(
        text(&released.stderr).contains(&format!(
            "topomgr: warning: processes {left} are still in the pod's cgroup and now run on CPUs that are no longer reserved for them\n"
        )),
        "{}",
        text(&released.stderr)
    );
    assert_no_pods(&dir);

    let kill = Command::new("kill").args(["-9", &left]).status().unwrap();
    assert!(kill.success());
    wait_for("the leftover process to exit", || {
        !alive(left.parse().unwrap())
    });
    // Its cgroup stayed while the process was in it.
    let cg = root.join("topomgr").join(&uid);
    if cg.exists() {
        let _ = fs::remove_dir(cg.join("main"));
        let _ = fs::remove_dir(&cg);
    }
    next_run_gets_cpu_1(&root, &dir, pid);
}

/// An allocation the ledger refuses (CPUs this machine lacks) never reaches
/// a cgroup: the command does not run.
#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn a_refused_allocation_never_reaches_a_cgroup() {
    let (root, _node) = live("a_refused_allocation_never_reaches_a_cgroup");
    let dir = config_dir(
        "run-ledger",
        "allocation = { cpus = \"0-1000\", exclusive = true }",
    );
    let marker = dir.join("ran");
    let (pid, out) = run(&dir, &["--", "touch", &marker.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("topomgr: pod rejected: UnexpectedAdmissionError: provider \"mock\" gave pod default/run-")
            && stderr.contains(" container \"main\" CPUs 2-1000, which are not online CPUs of this machine (online: "),
        "{stderr}"
    );
    assert!(!marker.exists());
    assert_eq!(common::run_cgroups(&root, pid), Vec::<String>::new());
}

/// `topomgr release --state-dir DIR UID` releases without a daemon.
#[test]
fn release_from_a_state_directory() {
    // `admit --state-dir` books the machine's cgroup hierarchy's CPUs: it
    // takes the node lock, as other tests on the real hierarchy do.
    let _node = common::node_guard();
    // The mock owns the pod's widget (a resource nobody serves is refused).
    let dir = config_dir(
        "run-release",
        "allocation = { devices = { \"example.com/widget\" = [\"w-0\"] } }\ninventory = { resources = { \"example.com/widget\" = { total = { capacity = 2, allocatable = 2, available = 2 }, zones = [] } } }",
    );
    let pod = common::workspace_root().join("examples/pods/guaranteed-2cpu.yaml");
    let state = dir.join("state");
    let admit = Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(dir.join("topomgr.toml"))
        .args(["admit", "--state-dir"])
        .arg(&state)
        .arg(&pod)
        .output()
        .unwrap();
    assert!(admit.status.success(), "{}", text(&admit.stderr));
    let admitted: Admissions = serde_json::from_slice(&admit.stdout).unwrap();
    let uid = admitted.pods[0].uid.clone();
    let release = |uid: &str| {
        Command::new(common::topomgr_bin())
            .arg("--config")
            .arg(dir.join("topomgr.toml"))
            .args(["release", "--state-dir"])
            .arg(&state)
            .arg(uid)
            .output()
            .unwrap()
    };
    let out = release(&uid);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let released: Admission = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(released, admitted.pods[0]);
    assert_no_pods(&dir);
    let out = release(&uid);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "topomgr: error: no admitted pod with uid {uid:?} in {}\n",
            state.display()
        )
    );
}
