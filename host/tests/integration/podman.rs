//! `topomgr oci-hook` with a real Podman (Debian's podman 4.3 and runc): the
//! hook installed from `packaging/oci-hooks.d/` into a private hooks
//! directory, containers from a busybox-static root filesystem, a daemon of
//! the test's own (state directory, socket, and as its cgroup root the
//! cgroup parent of the test's containers) with the real CPU and memory
//! providers (CPU 0 reserved) on this machine. What each container got is
//! read from inside it (`podman exec … grep /proc/self/status`).
//!
//! After every step: no CPU is held exclusively by two containers, no
//! shared-pool container runs on an exclusive CPU, and the daemon holds
//! nothing for a container that is gone (`/v1/pods` against `podman ps`).
//!
//! The Podman set-up of this machine type (no CAP_SYS_RESOURCE, no systemd,
//! a hybrid cgroup layout) is the harness's (`topomgr_runtime_harness::Podman`),
//! not users'.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use topomgr_client::http::Client;
use topomgr_node::api::{Health, PodList};
use topomgr_runtime_harness::Podman;
use topomgr_sdk::CpuSet;

use crate::common;
use crate::daemon::Daemon;

/// A private Podman with the hook installed and a daemon.
struct Setup {
    podman: Podman,
    config: PathBuf,
    socket: PathBuf,
    daemon: Option<Daemon>,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        Setup::with_config(tag, "")
    }

    /// [`Setup::new`] with `extra` TOML appended to the daemon's config.
    fn with_config(tag: &str, extra: &str) -> Setup {
        let podman = Podman::new().unwrap_or_else(|e| panic!("{e}"));
        let dir = common::scratch_dir(tag);
        let socket = dir.join("topomgr.sock");
        let config = dir.join("topomgr.toml");
        fs::write(
            &config,
            format!(
                "policy = \"single-numa-node\"\nstate_dir = \"state\"\ncgroup_root = \"{}\"\n\
                 [daemon]\nsocket = \"{}\"\nreclaim_interval_ms = 200\n\
                 [providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\npolicy = \"static\"\nreserved_cpus = \"0\"\n\
                 [providers.memory]\nlibrary = \"{}\"\n[providers.memory.config]\npolicy = \"static\"\n\
                 [providers.memory.config.reserved_memory.0]\nmemory = \"512Mi\"\n{extra}",
                podman.cpuset_dir().display(),
                socket.display(),
                common::cpu_plugin().display(),
                common::memory_plugin().display(),
            ),
        )
        .unwrap();
        let daemon = Daemon::start(&config, &socket);
        Setup {
            podman,
            config,
            socket,
            daemon: Some(daemon),
        }
    }

    fn client(&self) -> Client {
        Client::new(&self.socket)
    }

    /// Install `packaging/oci-hooks.d/topomgr.json` as the documented
    /// `install` command does, into the private hooks directory, with the
    /// test's `topomgr` and config in place of `/usr/bin/topomgr` and
    /// `/etc/topomgr/topomgr.toml`.
    fn install_hook(&self, source: &str, file_name: &str) {
        let text = fs::read_to_string(common::workspace_root().join(source)).unwrap();
        let mut hook: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(hook["hook"]["path"], "/usr/bin/topomgr", "{text}");
        hook["hook"]["path"] = common::topomgr_bin().to_string_lossy().into();
        for arg in hook["hook"]["args"].as_array_mut().unwrap() {
            if arg == "/etc/topomgr/topomgr.toml" {
                *arg = self.config.to_string_lossy().into();
            }
        }
        fs::write(
            self.podman.hooks_dir().join(file_name),
            serde_json::to_string_pretty(&hook).unwrap(),
        )
        .unwrap();
    }

    /// `podman run -d <options> sleep 1000000`: the container id, or
    /// podman's failure.
    fn start(&self, options: &[&str]) -> Result<String, Output> {
        let mut args = vec!["run", "-d"];
        let own = self.podman.run_options();
        args.extend(own.iter().map(String::as_str));
        args.extend_from_slice(options);
        let rootfs = self.podman.rootfs();
        let rootfs = rootfs.to_str().unwrap();
        args.extend_from_slice(&["--rootfs", rootfs, "sleep", "1000000"]);
        let out = self.podman.output(&args).unwrap();
        if out.status.success() {
            Ok(String::from_utf8(out.stdout).unwrap().trim().to_owned())
        } else {
            Err(out)
        }
    }

    /// `Cpus_allowed_list` and `Mems_allowed_list` of a new process in the
    /// container.
    fn placement(&self, id: &str) -> (String, String) {
        let out = self
            .podman
            .output(&["exec", id, "grep", "_allowed_list:", "/proc/self/status"])
            .unwrap();
        assert!(out.status.success(), "podman exec: {}", text(&out));
        let s = String::from_utf8(out.stdout).unwrap();
        let field = |name: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {s}"))
                .trim()
                .to_owned()
        };
        (field("Cpus_allowed_list:"), field("Mems_allowed_list:"))
    }

    /// Ids of the containers Podman runs.
    fn running(&self) -> Vec<String> {
        let out = self
            .podman
            .output(&["ps", "--no-trunc", "--format", "{{.ID}}"])
            .unwrap();
        assert!(out.status.success(), "podman ps: {}", text(&out));
        let mut ids: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        ids.sort();
        ids
    }

    fn pods(&self) -> PodList {
        self.client().get("/v1/pods").unwrap().parse().unwrap()
    }

    /// The invariants after a step: the daemon holds exactly the running
    /// containers (`running` lists those topomgr places); exclusive CPUs
    /// are each one container's; shared-pool containers run on none of
    /// them; every container runs on what the daemon says it has.
    fn check(&self, placed: &[&String]) {
        let mut want: Vec<String> = placed.iter().map(|s| s.to_string()).collect();
        want.sort();
        let running = self.running();
        for id in &want {
            assert!(running.contains(id), "{id} is not running: {running:?}");
        }
        let list = self.pods();
        let held: Vec<String> = list.pods.iter().map(|p| p.uid.clone()).collect();
        assert_eq!(held, want, "the daemon holds exactly the placed containers");
        let mut exclusive: BTreeMap<u32, String> = BTreeMap::new();
        for p in &list.pods {
            let c = &p.containers[0];
            if c.exclusive {
                for cpu in c.cpus.iter() {
                    if let Some(other) = exclusive.insert(cpu, p.uid.clone()) {
                        panic!("CPU {cpu} is held by {other} and {}", p.uid);
                    }
                }
            }
        }
        let exclusive_cpus: CpuSet = exclusive.keys().copied().collect();
        for p in &list.pods {
            let c = &p.containers[0];
            let (cpus, mems) = self.placement(&p.uid);
            assert_eq!(cpus, c.cpus.to_string(), "{}: what it runs on", p.uid);
            assert_eq!(mems, "0", "{}", p.uid);
            if !c.exclusive {
                let on = CpuSet::parse(&cpus).unwrap();
                assert!(
                    on.intersection(&exclusive_cpus).is_empty(),
                    "shared-pool container {} runs on exclusive CPUs ({cpus}; exclusive {exclusive_cpus})",
                    p.uid
                );
            }
        }
    }

    /// Wait until the daemon holds exactly `want` (its periodic reclaim).
    fn wait_for_pods(&self, want: &[&String]) {
        let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let held: Vec<String> = self.pods().pods.into_iter().map(|p| p.uid).collect();
            if held == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon holds {held:?}, expected {want:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn restart_daemon(&mut self) {
        let log = self.daemon.take().unwrap().stop();
        assert!(!log.contains("ERROR"), "{log}");
        self.daemon = Some(Daemon::start(&self.config, &self.socket));
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {}, stdout {:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The shell block of `docs/containers.md` that follows the marker naming
/// this test, one command a line.
fn documented_commands() -> Vec<String> {
    let doc = fs::read_to_string(common::workspace_root().join("docs/containers.md")).unwrap();
    let after = doc
        .split_once("(host/tests/integration/podman.rs)")
        .expect("docs/containers.md marks the block this test runs")
        .1;
    let block = after
        .split_once("```sh\n")
        .and_then(|(_, b)| b.split_once("```"))
        .expect("a sh block after the marker")
        .0;
    block.lines().map(str::to_owned).collect()
}

/// Run one documented `podman run` line against the private Podman: its
/// global options after `podman`, its run options after `run`, the test's
/// root filesystem for the image `busybox`; `sudo` dropped (the test runs
/// as root).
fn run_documented(s: &Setup, line: &str) -> Output {
    let line = line.strip_prefix("sudo ").unwrap_or(line);
    let rest = line
        .strip_prefix("podman run ")
        .unwrap_or_else(|| panic!("not a podman run line: {line}"));
    let (options, command) = rest
        .split_once(" busybox ")
        .unwrap_or_else(|| panic!("no busybox image in: {line}"));
    let podman = s.podman.command();
    let mut shell = String::new();
    for (k, v) in podman.get_envs() {
        shell.push_str(&format!(
            "{}={} ",
            k.to_string_lossy(),
            v.unwrap_or_default().to_string_lossy()
        ));
    }
    shell.push_str("podman");
    for a in podman.get_args() {
        shell.push_str(&format!(" {}", a.to_string_lossy()));
    }
    shell.push_str(" run ");
    shell.push_str(&s.podman.run_options().join(" "));
    shell.push_str(&format!(
        " {options} --rootfs {} {command}",
        s.podman.rootfs().display()
    ));
    std::process::Command::new("sh")
        .arg("-c")
        .arg(&shell)
        .output()
        .unwrap()
}

/// The documented commands; a Guaranteed container's exclusive CPU and
/// memory node; a Burstable container on the shared pool without it; a
/// container that cannot be placed fails with topomgr's reason; `podman rm
/// -f` releases (and the shared pool grows back); a daemon restart loses
/// nothing; a pinned or opted-out container is left alone.
#[test]
#[ignore = "needs root, a cpuset cgroup and podman"]
fn podman_containers_are_placed_refused_and_released() {
    let mut s = Setup::new("podman-place");

    // The documented set-up and the two documented containers.
    let commands = documented_commands();
    let install = &commands[0];
    let parts: Vec<&str> = install.split_whitespace().collect();
    assert_eq!(
        parts[..parts.len() - 2],
        ["sudo", "install", "-D", "-m", "0644"],
        "{install}"
    );
    let (source, dest) = (parts[parts.len() - 2], parts[parts.len() - 1]);
    assert_eq!(
        Path::new(dest).parent(),
        Some(Path::new("/usr/share/containers/oci/hooks.d"))
    );
    s.install_hook(
        source,
        Path::new(dest).file_name().unwrap().to_str().unwrap(),
    );
    let out = run_documented(&s, &commands[1]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Cpus_allowed_list:\t1\nMems_allowed_list:\t0\n"
    );
    let out = run_documented(&s, &commands[2]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Cpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n"
    );
    assert_eq!(commands.len(), 3, "{commands:?}");
    // Both --rm containers were released at poststop.
    s.check(&[]);

    // A Burstable container first: the whole pool.
    let burstable = s.start(&["--cpus", "0.5"]).unwrap();
    assert_eq!(s.placement(&burstable), ("0-1".to_owned(), "0".to_owned()));
    s.check(&[&burstable]);

    // A Guaranteed one: CPU 1 to itself, taken from the Burstable one
    // before it started.
    let guaranteed = s.start(&["--cpus", "1", "--memory", "256m"]).unwrap();
    assert_eq!(s.placement(&guaranteed), ("1".to_owned(), "0".to_owned()));
    assert_eq!(s.placement(&burstable).0, "0");
    s.check(&[&burstable, &guaranteed]);

    // No CPU left for another: podman run fails with topomgr's reason.
    let out = s.start(&["--cpus", "1", "--memory", "256m"]).unwrap_err();
    let err = String::from_utf8_lossy(&out.stderr);
    // runc shows the hook's stderr; podman exits 126.
    assert_eq!(out.status.code(), Some(126), "{}", text(&out));
    assert!(
        err.contains("stderr: topomgr: container ")
            && err.contains(
                " rejected: TopologyAffinityError: Resources cannot be allocated with Topology Locality: container \"main\" needs every resource on one common NUMA node (policy single-numa-node); cpu (cpu): cannot be satisfied on any NUMA node (requested 1; free/allocatable by NUMA node: 0: 0/1); memory (memory): preferred on {0}\n"
            ),
        "{}",
        text(&out)
    );
    s.check(&[&burstable, &guaranteed]);

    // Left alone: pinned by its user, or opted out.
    let pinned = s.start(&["--cpus", "1", "--cpuset-cpus", "0"]).unwrap();
    let opted = s
        .start(&["--cpus", "1", "--annotation", "topomgr.io/opt-out=true"])
        .unwrap();
    assert_eq!(s.placement(&pinned).0, "0");
    assert_eq!(s.placement(&opted).0, "0-1", "not placed: every CPU");
    s.check(&[&burstable, &guaranteed]);

    // A daemon restart loses nothing.
    s.restart_daemon();
    s.check(&[&burstable, &guaranteed]);

    // Stopped, the daemon leaves its containers owning the node: a daemon
    // of another state directory is refused while they hold their CPUs
    // (one node has one owner, across stops); its own starts again.
    let log = s.daemon.take().unwrap().stop();
    assert!(!log.contains("ERROR"), "{log}");
    let other = s.config.with_file_name("other.toml");
    fs::write(
        &other,
        fs::read_to_string(&s.config)
            .unwrap()
            .replace("state_dir = \"state\"", "state_dir = \"other-state\""),
    )
    .unwrap();
    let out = common::run_topomgr(&[
        "--config",
        &other.to_string_lossy(),
        "serve",
        "--socket",
        &s.socket.with_file_name("other.sock").to_string_lossy(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("a container placed by topomgr serve (OCI hook or NRI)")
            && err.contains(&format!("{}", s.config.with_file_name("state").display())),
        "{err}"
    );
    s.daemon = Some(Daemon::start(&s.config, &s.socket));
    s.check(&[&burstable, &guaranteed]);

    // podman rm -f releases at poststop; the pool grows back.
    let out = s.podman.output(&["rm", "-f", &guaranteed]).unwrap();
    assert!(out.status.success(), "{}", text(&out));
    s.wait_for_pods(&[&burstable]);
    assert_eq!(s.placement(&burstable).0, "0-1");
    s.check(&[&burstable]);
    let health: Health = s.client().get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(health.exclusive_cpus.to_string(), "");

    // Without the daemon, a container the hook would place does not start,
    // saying why; one that opted out does.
    let log = s.daemon.take().unwrap().stop();
    assert!(!log.contains("ERROR"), "{log}");
    let out = s.start(&["--cpus", "1", "--memory", "256m"]).unwrap_err();
    let err = String::from_utf8_lossy(&out.stderr);
    // Podman reads "no such file or directory" in a hook's error as the
    // command not found (exit 127): the message keeps clear of it.
    assert!(
        out.status.code() != Some(127) && !err.contains("was not found"),
        "{}",
        text(&out)
    );
    assert!(
        err.contains(&format!(
            "stderr: topomgr: error: cannot connect to the topomgr daemon at {}: no socket there (ENOENT) (is `topomgr serve` running there? pass --socket PATH or set [daemon] socket)",
            s.socket.display()
        )) && err.contains(
            "; the container is not started (opt a container out with the annotation topomgr.io/opt-out=true)"
        ),
        "{}",
        text(&out)
    );
    s.start(&["--cpus", "1", "--annotation", "topomgr.io/opt-out=true"])
        .unwrap();
}

/// Containers whose `poststop` never runs are reclaimed by the daemon: a
/// container whose conmon was killed with SIGKILL, then removed; a
/// container whose command does not exist (creation fails after
/// `createRuntime`).
#[test]
#[ignore = "needs root, a cpuset cgroup and podman"]
fn podman_containers_without_poststop_are_reclaimed() {
    let s = Setup::new("podman-reclaim");
    s.install_hook("packaging/oci-hooks.d/topomgr.json", "topomgr.json");

    let guaranteed = s.start(&["--cpus", "1", "--memory", "256m"]).unwrap();
    assert_eq!(s.placement(&guaranteed).0, "1");
    s.check(&[&guaranteed]);
    let out = s
        .podman
        .output(&["inspect", "--format", "{{.State.ConmonPid}}", &guaranteed])
        .unwrap();
    let conmon: i32 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) of conmon's pid, read from podman just now.
    assert_eq!(unsafe { libc::kill(conmon, libc::SIGKILL) }, 0);
    // The container still runs: its CPU stays held.
    std::thread::sleep(Duration::from_millis(600));
    s.wait_for_pods(&[&guaranteed]);
    let _ = s.podman.output(&["rm", "-f", &guaranteed]).unwrap();
    assert!(!s.running().contains(&guaranteed));
    s.wait_for_pods(&[]);

    // A command that does not exist: podman run fails after createRuntime
    // admitted it; nothing stays held.
    let out = s
        .podman
        .output(&[
            "run",
            "--rm",
            "--network",
            "none",
            "--cgroup-parent",
            s.podman.cgroup_parent(),
            "--cpus",
            "1",
            "--memory",
            "256m",
            "--rootfs",
            s.podman.rootfs().to_str().unwrap(),
            "/bin/no-such-command",
        ])
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    s.wait_for_pods(&[]);
    let metrics = String::from_utf8(s.client().get("/metrics").unwrap().body).unwrap();
    let reclaimed: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "topomgr_reclaimed_pods_total{owner=\"container\",cause=\"owner_gone\"} ",
            )
        })
        .unwrap()
        .parse()
        .unwrap();
    // Both: neither was released at poststop.
    assert_eq!(reclaimed, 2.0, "{metrics}");

    // Everything is usable again.
    let again = s.start(&["--cpus", "1", "--memory", "256m"]).unwrap();
    assert_eq!(s.placement(&again).0, "1");
    s.check(&[&again]);
}

/// Issue 35: a CDI device given with `podman run --device
/// example.org/testdev=null` (Podman resolves it from the spec in
/// `/var/run/cdi`, one of its default spec directories, and writes its node
/// into the bundle's `linux.devices`) reaches the daemon through the hook:
/// the node is in the container, and the daemon found the CDI device by
/// that node through the same spec (its `[cdi] spec_dirs`). The device
/// (the host's `/dev/null`) is no PCI device, so the container is placed as
/// without it.
#[test]
#[ignore = "needs root, a cpuset cgroup and podman"]
fn cdi_devices_of_podman_reach_topomgr() {
    let spec_dir = Path::new("/var/run/cdi");
    fs::create_dir_all(spec_dir).unwrap();
    // A file of this test's own, removed when it ends however it ends.
    struct Spec(PathBuf);
    impl Drop for Spec {
        fn drop(&mut self) {
            let _ = fs::remove_file(&self.0);
        }
    }
    let spec = Spec(spec_dir.join(format!("topomgr-test-{}.yaml", std::process::id())));
    let kind = format!("example.org/testdev{}", std::process::id());
    fs::write(
        &spec.0,
        format!(
            "cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n\
             - name: \"null\"\n  containerEdits:\n    deviceNodes:\n\
             \x20   - {{path: /dev/topomgr-null, hostPath: /dev/null, type: c, major: 1, minor: 3, permissions: rw}}\n"
        ),
    )
    .unwrap();
    let mut s = Setup::with_config(
        "podman-cdi",
        &format!("[cdi]\nspec_dirs = [\"{}\"]\n", spec_dir.display()),
    );
    s.install_hook("packaging/oci-hooks.d/topomgr.json", "topomgr.json");
    let device = format!("{kind}=null");
    let with_device = s
        .start(&["--cpus", "1", "--memory", "256m", "--device", &device])
        .unwrap_or_else(|out| panic!("podman run --device {device}: {}", text(&out)));
    let out = s
        .podman
        .output(&["exec", &with_device, "cat", "/dev/topomgr-null"])
        .unwrap();
    assert!(
        out.status.success(),
        "Podman did not inject the CDI device: {}",
        text(&out)
    );
    assert_eq!(s.placement(&with_device), ("1".to_owned(), "0".to_owned()));
    s.check(&[&with_device]);
    let _ = s.podman.output(&["rm", "-f", &with_device]).unwrap();
    s.wait_for_pods(&[]);
    let log = s.daemon.take().unwrap().stop();
    assert!(!log.contains("panicked"), "{log}");
    // The daemon found the CDI device of this container (the only one
    // given this test's kind) by its node, and said it is not aligned
    // with (no PCI device).
    let found = log
        .lines()
        .filter(|l| {
            l.contains("no provider lists this CDI device and it is not aligned with")
                && l.contains(&format!(
                    "source=CDI device {device} devices=/dev/topomgr-null"
                ))
        })
        .count();
    assert_eq!(found, 1, "{log}");
}
