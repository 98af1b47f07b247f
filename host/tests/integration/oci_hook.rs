//! `topomgr oci-hook` as a runtime runs it (the state on stdin), without a
//! runtime: what it leaves alone never needs the daemon, a release of
//! something not held is no error, and what it cannot do is said on one
//! line with the exit status runtimes fail a container on. Real containers
//! are `podman.rs`'s.

use std::fs;
use std::path::Path;

use crate::common;
use crate::daemon::Daemon;

/// `topomgr --config CONFIG oci-hook ARGS` with `state` on stdin: (exit
/// status, stderr).
fn hook(config: &Path, args: &[&str], state: &str) -> (i32, String) {
    let args: Vec<&str> = ["oci-hook"].iter().chain(args).copied().collect();
    let out = common::topomgr_output(config, &args, state);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A config whose daemon socket is `socket`.
fn config(dir: &Path, socket: &Path) -> std::path::PathBuf {
    let sys = common::workspace_root().join("examples/machines/2s4n/sys");
    let path = dir.join("topomgr.toml");
    fs::write(
        &path,
        format!(
            "sysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n[daemon]\nsocket = \"{}\"\n[providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\npolicy = \"static\"\nreserved_cpus = \"0\"\n",
            sys.display(),
            socket.display(),
            common::cpu_plugin().display()
        ),
    )
    .unwrap();
    path
}

/// A bundle whose `config.json` has `annotations` and `resources` (JSON).
fn bundle(dir: &Path, annotations: &str, resources: &str) -> String {
    let b = dir.join("bundle");
    fs::create_dir_all(&b).unwrap();
    fs::write(
        b.join("config.json"),
        format!(
            "{{\"ociVersion\":\"1.0.2\",\"annotations\":{annotations},\"process\":{{\"env\":[\"PATH=/bin\"]}},\"linux\":{{\"resources\":{resources},\"cgroupsPath\":\"/x/y\"}}}}"
        ),
    )
    .unwrap();
    b.to_string_lossy().into_owned()
}

fn state(id: &str, status: &str, bundle: &str) -> String {
    format!(
        "{{\"ociVersion\":\"1.0.2\",\"id\":\"{id}\",\"status\":\"{status}\",\"pid\":{},\"bundle\":\"{bundle}\"}}",
        std::process::id()
    )
}

#[test]
fn containers_left_alone_need_no_daemon() {
    let dir = common::scratch_dir("hook-alone");
    let config = config(&dir, &dir.join("absent.sock"));
    let opted = bundle(
        &dir,
        r#"{"topomgr.io/opt-out":"true"}"#,
        r#"{"cpu":{"quota":100000,"period":100000}}"#,
    );
    assert_eq!(
        hook(&config, &[], &state("c1", "creating", &opted)),
        (0, String::new())
    );
    let pinned = bundle(
        &dir,
        "{}",
        r#"{"cpu":{"quota":100000,"period":100000,"cpus":"1"}}"#,
    );
    assert_eq!(
        hook(
            &config,
            &["createRuntime"],
            &state("c1", "creating", &pinned)
        ),
        (0, String::new())
    );
    let sandbox = bundle(
        &dir,
        r#"{"io.kubernetes.cri.container-type":"sandbox"}"#,
        "{}",
    );
    assert_eq!(
        hook(&config, &[], &state("c1", "creating", &sandbox)),
        (0, String::new())
    );
}

#[test]
fn what_the_hook_cannot_do_is_said_in_one_line() {
    let dir = common::scratch_dir("hook-errors");
    let socket = dir.join("absent.sock");
    let config = config(&dir, &socket);
    let b = bundle(&dir, "{}", r#"{"cpu":{"quota":100000,"period":100000}}"#);

    // No daemon: a poststop cannot release, and says so.
    let (code, err) = hook(&config, &[], &state("c1", "stopped", &b));
    assert_eq!(code, 2);
    assert!(
        err.starts_with(&format!(
            "topomgr: error: cannot connect to the topomgr daemon at {}: ",
            socket.display()
        )) && err.ends_with(
            " (is `topomgr serve` running there? pass --socket PATH or set [daemon] socket); the container is not started (opt a container out with the annotation topomgr.io/opt-out=true)\n"
        ),
        "{err}"
    );
    // A state that is not one; a status of no stage.
    let (code, err) = hook(&config, &[], "{\"id\": 7}");
    assert_eq!(
        (code, err.as_str()),
        (2, "topomgr: error: cannot read the container's state: invalid type: integer `7`, expected a string at line 1 column 8 (expected the OCI state: {\"id\", \"status\", \"pid\", \"bundle\", ...} on standard input, as the runtime gives it to a hook)\n")
    );
    let (code, err) = hook(&config, &[], &state("c1", "running", &b));
    assert_eq!(
        (code, err.as_str()),
        (2, "topomgr: error: container c1: status \"running\" is neither creating (createRuntime) nor stopped (poststop); name the stage: topomgr oci-hook createRuntime|poststop\n")
    );
    // A bundle without config.json; an annotation that does not parse.
    let (code, err) = hook(
        &config,
        &["createRuntime"],
        &state("c1", "creating", &dir.join("nowhere").to_string_lossy()),
    );
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!(
            "topomgr: error: cannot read the container's bundle config {}: No such file or directory (os error 2)\n",
            dir.join("nowhere/config.json").display()
        )
    );
    let bad = bundle(&dir, r#"{"topomgr.io/resources":"gpu=1"}"#, "{}");
    let (code, err) = hook(&config, &[], &state("c1", "creating", &bad));
    assert_eq!(
        (code, err.as_str()),
        (2, "topomgr: error: container c1: annotation topomgr.io/resources=\"gpu=1\" \"gpu\" is not an extended resource name (domain/name, e.g. nvidia.com/gpu)\n")
    );
}

#[test]
fn a_release_of_what_is_not_held_is_no_error() {
    let dir = common::scratch_dir("hook-release");
    let socket = dir.join("t.sock");
    let config = config(&dir, &socket);
    let _d = Daemon::start(&config, &socket);
    let b = bundle(&dir, "{}", "{}");
    assert_eq!(
        hook(
            &config,
            &["poststop"],
            &state("never-admitted", "stopped", &b)
        ),
        (0, String::new())
    );
}
