//! The one toolbox of the integration tests (as ripgrep keeps its
//! `util.rs`): builds the plugin libraries once per test binary and hands
//! out their paths, writes config directories, runs `topomgr` (with a
//! deadline, stdin if any), waits for conditions, looks at processes and
//! owns the machine's node for the tests that need it. A helper two test
//! modules need lives here, not in either of them.

use std::ffi::OsStr;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use topomgr_cgroup::hierarchy::Hierarchy;
use topomgr_sdk::CpuSet;

/// Paths of the workspace's plugin libraries.
#[derive(Debug)]
pub struct Plugins {
    /// `libtopomgr_mock_provider.so`.
    pub mock: PathBuf,
    /// `libnuma_widgets.so` (the SDK's worked example, `examples/numa-widgets`).
    pub widgets: PathBuf,
}

/// Paths of the plugins built from crates outside the workspace.
#[derive(Debug)]
pub struct Fixtures {
    /// The plugin of `tests/incompatible-sdk` (built against a changed SDK shape).
    pub incompatible: PathBuf,
    /// The same fixture built with `--features sdk-0-2`: a plugin of the
    /// previous SDK minor, 0.2.1.
    pub older_minor: PathBuf,
    /// `tests/vendor-accelerator`: a device provider built outside the
    /// workspace against the SDK alone.
    pub vendor: PathBuf,
    /// `tests/vendor-example`: the SDK's worked example, verbatim, built
    /// outside the workspace against the SDK alone.
    pub vendor_example: PathBuf,
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// Runs `cargo build <args> --message-format=json-render-diagnostics` and
/// returns its `compiler-artifact` messages.
fn build_artifacts(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(cargo())
        .args(["build", "--message-format=json-render-diagnostics"])
        .args(args)
        .current_dir(workspace_root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", cargo()));
    assert!(
        out.status.success(),
        "cargo build {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .collect()
}

/// Builds with `args` and returns `(target name, .so path)` of every cdylib.
fn build(args: &[&str]) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for msg in build_artifacts(args) {
        let is_cdylib = msg["target"]["crate_types"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "cdylib"));
        if !is_cdylib {
            continue;
        }
        let name = msg["target"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for f in msg["filenames"].as_array().into_iter().flatten() {
            if let Some(f) = f.as_str().filter(|f| f.ends_with(".so")) {
                found.push((name.clone(), PathBuf::from(f)));
            }
        }
    }
    found
}

/// The library of cdylib target `name` among `found`.
fn pick<'a>(found: &'a [(String, PathBuf)], name: &str) -> &'a Path {
    found
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p.as_path())
        .unwrap_or_else(|| panic!("cargo built no cdylib named {name}: {found:?}"))
}

/// Every cdylib of the workspace, built once per test binary by one
/// `cargo build --workspace --lib --examples`. One invocation, and one
/// that resolves features as `cargo test --workspace` does (examples, like
/// tests, turn on the dev-dependencies' features): after that command every
/// dependency is already built and only the plugin crates themselves are
/// linked, where one build per plugin (`-p NAME`) resolved features anew
/// each time and compiled parts of the dependency tree again. The libraries
/// land beside the `topomgr` binary, where the repository's own
/// `topomgr.toml` and `plugins.d/` look for them, as after the README's
/// `cargo build --workspace`.
fn workspace_plugins() -> &'static [(String, PathBuf)] {
    static BUILT: OnceLock<Vec<(String, PathBuf)>> = OnceLock::new();
    BUILT.get_or_init(|| build(&["--workspace", "--lib", "--examples"]))
}

/// Builds `crate_dir`, a crate that is its own workspace as a vendor's
/// would be (`--manifest-path`, with `extra` arguments), and returns its
/// cdylibs.
///
/// It resolves its own features (the SDK alone, as a vendor's crate does),
/// but shares the workspace's build directory, dependency versions (the
/// workspace's `Cargo.lock` copied beside its manifest; ignored by git) and
/// debug-info settings (those of `[profile.dev]` in the workspace's
/// `Cargo.toml`, repeated here): every dependency whose features match the
/// workspace's build is not compiled again. Final artifacts go to
/// `target/fixtures`. A library built here must not be named like one of
/// the workspace's cdylibs: cargo names those without a hash in the shared
/// build directory.
fn build_outside(crate_dir: &str, extra: &[&str]) -> Vec<(String, PathBuf)> {
    let root = workspace_root();
    let dir = root.join(crate_dir);
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock"))
        .unwrap_or_else(|e| panic!("copy Cargo.lock into {crate_dir}: {e}"));
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is <target>/tmp");
    let build_dir = format!(
        "build.build-dir={}",
        serde_json::to_string(&target.to_string_lossy()).expect("a JSON string")
    );
    let fixtures = target.join("fixtures");
    let manifest = dir.join("Cargo.toml");
    let mut args = vec![
        "--manifest-path",
        manifest.to_str().expect("a UTF-8 path"),
        "--target-dir",
        fixtures.to_str().expect("a UTF-8 path"),
        "--config",
        &build_dir,
        "--config",
        "profile.dev.debug=\"line-tables-only\"",
        "--config",
        "profile.dev.package.\"*\".debug=false",
    ];
    args.extend(extra);
    build(&args)
}

/// The workspace's test plugins (built once per test binary).
pub fn plugins() -> &'static Plugins {
    static PLUGINS: OnceLock<Plugins> = OnceLock::new();
    PLUGINS.get_or_init(|| {
        let main = workspace_plugins();
        Plugins {
            mock: pick(main, "topomgr_mock_provider").to_path_buf(),
            widgets: pick(main, "numa_widgets").to_path_buf(),
        }
    })
}

/// The plugins of the crates outside the workspace (built once per test
/// binary, by the first test that needs them while the others run: they
/// compile the SDK's dependencies with the SDK's own features).
pub fn fixtures() -> &'static Fixtures {
    static FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let vendor = pick(
            &build_outside("tests/vendor-accelerator", &[]),
            "vendor_accelerator",
        )
        .to_path_buf();
        let vendor_example = pick(
            &build_outside("tests/vendor-example", &[]),
            "vendor_widgets",
        )
        .to_path_buf();
        let fixture = |features: &[&str]| {
            pick(
                &build_outside("tests/incompatible-sdk", features),
                "topomgr_sdk",
            )
            .to_path_buf()
        };
        // Both builds write the same file: keep a copy of each.
        let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk-fixtures");
        std::fs::create_dir_all(&kept).expect("create the fixture copy dir");
        let keep = |from: PathBuf, name: &str| {
            let to = kept.join(name);
            std::fs::copy(&from, &to)
                .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
            to
        };
        let incompatible = keep(fixture(&[]), "libincompatible_layout.so");
        let older_minor = keep(
            fixture(&["--features", "sdk-0-2"]),
            "libincompatible_sdk_0_2.so",
        );
        Fixtures {
            incompatible,
            older_minor,
            vendor,
            vendor_example,
        }
    })
}

/// A fresh directory under cargo's per-target temporary directory (never a
/// world-writable place, so plugins copied there pass the ownership check).
/// Each call gets its own directory: every test module shares this process.
pub fn scratch_dir(tag: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("cannot create {}: {e}", d.display()));
    d
}

/// The `topomgr` binary cargo built for these tests.
pub fn topomgr_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_topomgr"))
}

/// The shared corpus of recorded machines, if present beside the repository.
pub fn corpus_dir() -> Option<PathBuf> {
    let d = workspace_root().join("../shared/corpus/hwloc-linux");
    d.is_dir().then_some(d)
}

/// Unpacks a recorded machine of the corpus into a scratch directory and
/// returns its `sys` directory, for a test marked `#[ignore = "needs the
/// recorded sysfs trees of ../shared/corpus"]`; fails when the corpus is absent.
pub fn unpack_corpus_machine(name: &str) -> PathBuf {
    let Some(corpus) = corpus_dir() else {
        panic!("needs the recorded sysfs trees: ../shared/corpus/hwloc-linux is absent beside the repository (cannot unpack {name})");
    };
    let dest = scratch_dir(&format!("corpus-{name}"));
    let status = Command::new("tar")
        .arg("xjf")
        .arg(corpus.join(format!("{name}.tar.bz2")))
        .arg("-C")
        .arg(&dest)
        .status()
        .expect("run tar");
    assert!(status.success(), "tar xjf {name}.tar.bz2 failed");
    std::fs::read_dir(&dest)
        .expect("read unpacked dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("sys"))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| dest.join("sys"))
}

/// The CPU manager provider's `.so`.
pub fn cpu_plugin() -> &'static Path {
    pick(workspace_plugins(), "topomgr_provider_cpu")
}

/// The memory provider's `.so`.
pub fn memory_plugin() -> &'static Path {
    pick(workspace_plugins(), "topomgr_provider_memory")
}

/// The SR-IOV provider's `.so`.
pub fn sriov_plugin() -> &'static Path {
    pick(workspace_plugins(), "topomgr_provider_sriov")
}

/// The GPU provider's `.so`.
pub fn gpu_plugin() -> &'static Path {
    pick(workspace_plugins(), "topomgr_provider_gpu")
}

/// Builds every plugin the workspace has, so that the repository's own
/// `topomgr.toml` and `plugins.d/` find each library they enable beside
/// the `topomgr` binary.
pub fn repository_plugins() {
    workspace_plugins();
}

/// The scripted stand-in for `libnvidia-ml` (`tests/fake-nvml`, script
/// named by `FAKE_NVML_SCRIPT`).
pub fn fake_nvml() -> &'static Path {
    pick(workspace_plugins(), "fake_nvml")
}

/// Loads the provider `.so` at `so` as `name` with `config` on the example
/// machine (`examples/machines/2s4n`), through the host's plugin loader.
pub fn load_on_example_machine(
    name: &str,
    so: &Path,
    config: serde_json::Value,
) -> topomgr_engine::provider::LoadedProvider {
    let machine = topomgr_discovery::discover(Path::new(&example_sys())).expect("example machine");
    let entry = topomgr_node::setup::config::ProviderEntry {
        library: so.to_string_lossy().into_owned(),
        enabled: true,
        config,
        defined_in: PathBuf::from("test"),
        config_dir: PathBuf::new(),
    };
    let state = scratch_dir(&format!("{name}-plugin-state"));
    topomgr_node::setup::plugin::load_provider(name, &entry, &[], &machine, &state)
        .unwrap_or_else(|e| panic!("load {name}: {e}"))
}

/// The saved state of a state directory (its snapshot with the journal
/// applied), as JSON.
pub fn state_body(dir: &Path) -> serde_json::Value {
    topomgr_node::persist::store::state_json(dir)
        .unwrap_or_else(|e| panic!("read the state in {}: {e}", dir.display()))
}

/// One provider's checkpoint bytes from a state directory.
pub fn provider_state(dir: &Path, provider: &str) -> Vec<u8> {
    let hex = state_body(dir)["providers"][provider]
        .as_str()
        .unwrap_or_else(|| panic!("no state for provider {provider}"))
        .to_string();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

/// True when the effective uid (from /proc/self/status) is root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// The example machine's sysfs directory, as a string argument.
pub fn example_sys() -> String {
    workspace_root()
        .join("examples/machines/2s4n/sys")
        .to_string_lossy()
        .into_owned()
}

/// Runs `topomgr --config <dir>/topomgr.toml ARGS`; returns (status code, stdout, stderr).
pub fn topomgr(config_dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = topomgr_output(&config_dir.join("topomgr.toml"), args, "");
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// `topomgr --config CONFIG ARGS` with `stdin` on its standard input, as
/// [`run_topomgr_stdin`].
pub fn topomgr_output(config: &Path, args: &[&str], stdin: &str) -> Output {
    let all: Vec<&OsStr> = [OsStr::new("--config"), config.as_os_str()]
        .into_iter()
        .chain(args.iter().map(OsStr::new))
        .collect();
    run_topomgr_stdin(&all, stdin)
}

/// `topomgr ARGS` (with an empty standard input), given at most 60 s: a
/// command that should end at once but runs on (one that should have been
/// refused, a daemon let in) is killed and fails the test.
pub fn run_topomgr<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S]) -> Output {
    run_topomgr_stdin(args, "")
}

/// [`run_topomgr`] with `stdin` on the command's standard input.
pub fn run_topomgr_stdin<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S], stdin: &str) -> Output {
    let mut child = Command::new(topomgr_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run topomgr");
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_owned();
    // Written beside the reads of stdout and stderr (neither side waits
    // for the other to drain a pipe), then closed.
    std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.expect("wait for topomgr"),
        Err(_) => {
            drop(Leftover(pid));
            let out = rx.recv().unwrap().expect("wait for topomgr");
            panic!(
                "topomgr {args:?} still ran after 60 s: {}",
                text(&out.stderr)
            );
        }
    }
}

/// Bytes of an output as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A config directory of its own: `topomgr.toml` holding `main`, and each
/// `(name, text)` of `dropins` as `plugins.d/<name>` (the directory is
/// made even when there is none).
pub fn config_dir(tag: &str, main: &str, dropins: &[(&str, &str)]) -> PathBuf {
    let dir = scratch_dir(tag);
    write_config(&dir, main, dropins);
    dir
}

/// [`config_dir`]'s files in `dir`, for a config that names its own
/// directory.
pub fn write_config(dir: &Path, main: &str, dropins: &[(&str, &str)]) {
    fs::write(dir.join("topomgr.toml"), main).unwrap();
    fs::create_dir_all(dir.join("plugins.d")).unwrap();
    for (name, text) in dropins {
        fs::write(dir.join("plugins.d").join(name), text).unwrap();
    }
}

/// Polls `done` every 20 ms until it holds (true), or `within` passed
/// (false).
pub fn poll(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `done` holds; fails the test naming `what` after 60 s.
pub fn wait_for(what: &str, done: impl FnMut() -> bool) {
    assert!(
        poll(Duration::from_secs(60), done),
        "timed out waiting for {what}"
    );
}

/// Whether process `pid` runs: it exists and is no zombie. The state is
/// the first field after the last `)` of `/proc/PID/stat`: the command
/// name before it may hold spaces and parentheses.
pub fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            != Some("Z")
    })
}

/// A process a test left running on purpose (a run's leftover): killed
/// when the test ends, also when it fails, so that it does not keep the
/// node for the tests after it.
pub struct Leftover(pub u32);

impl Drop for Leftover {
    fn drop(&mut self) {
        // A process already gone gives ESRCH, which is what we want.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0 as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The one error line of a command refused by a node lock, without its
/// `(node lock <file>)` tail (the file's name depends on where the test
/// runs), which must be there.
pub fn refusal(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    let line = err
        .strip_suffix('\n')
        .filter(|l| !l.contains('\n'))
        .unwrap_or_else(|| panic!("not one line: {err}"));
    let (head, tail) = line
        .rsplit_once(" (node lock ")
        .unwrap_or_else(|| panic!("no node lock named: {line}"));
    let lock = tail.strip_suffix(')').unwrap();
    assert!(
        lock.starts_with(
            &topomgr_node::locks::node_lock::lock_dir()
                .display()
                .to_string()
        ) && lock.ends_with(".lock"),
        "{lock}"
    );
    head.to_owned()
}

/// The machine's hierarchy, the guard of the tests on it, and the online
/// CPUs; fails (the test was asked for) when it cannot be used.
pub fn machine(test: &str) -> (NodeGuard, CpuSet) {
    let guard = node_guard();
    real_cgroups(test);
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = CpuSet::parse(online.trim()).unwrap();
    assert!(
        online.len() >= 2,
        "{test} needs two online CPUs, found {online}"
    );
    (guard, online)
}

/// This machine, its cgroup hierarchy, state in `state`, and the real CPU
/// provider with every online CPU reserved but the last: one CPU to give
/// exclusively. `daemon`: the `[daemon]` table's lines.
pub fn machine_config(
    dir: &Path,
    name: &str,
    state: &Path,
    online: &CpuSet,
    daemon: &str,
) -> PathBuf {
    let mut reserved = online.clone();
    reserved.remove(online.iter().last().unwrap());
    let config = dir.join(name);
    fs::write(
        &config,
        format!(
            "policy = \"single-numa-node\"\nsysfs_root = \"/sys\"\nstate_dir = \"{}\"\ncgroup_root = \"/sys/fs/cgroup\"\n\
             [daemon]\n{daemon}\n\
             [providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\npolicy = \"static\"\nreserved_cpus = \"{reserved}\"\n",
            state.display(),
            cpu_plugin().display()
        ),
    )
    .unwrap();
    config
}

/// How a daemon started by [`Daemon::start`](crate::daemon::Daemon::start) with `config` names itself.
pub fn daemon_named(config: &Path, socket: &Path, state: &Path, pid: u32) -> String {
    format!(
        "the topomgr daemon (pid {pid}, command `{} --config {} serve --socket {}`, state directory {}, socket {})",
        topomgr_bin().display(),
        config.display(),
        socket.display(),
        state.display(),
        socket.display()
    )
}

/// Admits the pod `yaml` through the daemon `c`: it must be admitted.
pub fn admitted(c: &mut topomgr_client::http::Client, yaml: &str) -> topomgr_node::api::Admission {
    let r = c.admit(yaml).unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let mut v: topomgr_node::api::Admissions = r.parse().unwrap();
    assert!(v.pods[0].admitted, "{v:?}");
    v.pods.remove(0)
}

/// The top of the machine's cgroup hierarchy (`/sys/fs/cgroup`, or its
/// cpuset mount on cgroup v1).
pub fn machine_top() -> PathBuf {
    let Hierarchy::Cgroupfs { top, .. } = Hierarchy::of(Path::new("/sys/fs/cgroup")) else {
        panic!("no cgroup hierarchy at /sys/fs/cgroup");
    };
    top
}

/// The cgroups `<top>/topomgr/run-<pid>-*` the `topomgr run` of `pid` made.
pub fn run_cgroups(top: &Path, pid: u32) -> Vec<String> {
    let prefix = format!("run-{pid}-");
    fs::read_dir(top.join("topomgr"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// The pid of the command `comm` that `topomgr run` (pid `run`) started in
/// its cgroup under the machine's hierarchy, once it runs there.
pub fn command_of(run: u32, comm: &str) -> u32 {
    let top = machine_top();
    let prefix = format!("run-{run}-");
    let mut found = 0;
    wait_for("the command to start in its cgroup", || {
        let Ok(entries) = fs::read_dir(top.join("topomgr")) else {
            return false;
        };
        for e in entries.filter_map(Result::ok) {
            if !e.file_name().to_string_lossy().starts_with(&prefix) {
                continue;
            }
            let procs = fs::read_to_string(e.path().join("main/cgroup.procs")).unwrap_or_default();
            for p in procs.split_whitespace().filter_map(|p| p.parse().ok()) {
                if fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == comm) {
                    found = p;
                    return true;
                }
            }
        }
        false
    });
    found
}

/// The hints of `resource` in a `provider ... hints` answer, as `"<nodes>:<preferred>"`.
pub fn hint_list(json: &str, resource: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    v[resource]
        .as_array()
        .unwrap_or_else(|| panic!("no {resource} list in {json}"))
        .iter()
        .map(|h| {
            let nodes: Vec<String> = h["affinity"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|n| n.to_string())
                .collect();
            format!("{}:{}", nodes.join(","), h["preferred"])
        })
        .collect()
}

/// The machine's cgroup hierarchy at `/sys/fs/cgroup` for the test `test`
/// (one marked `#[ignore = "needs root and a cpuset cgroup"]`); fails
/// naming `test` and what is missing: root, a cpuset controller mounted
/// there, a cpuset cgroup made there (a container without cpuset
/// delegation cannot), a root cpuset of every online CPU (topomgr gives
/// shared containers the online CPUs, which such a root refuses).
pub fn real_cgroups(test: &str) -> topomgr_cgroup::CgroupManager {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static PROBES: AtomicUsize = AtomicUsize::new(0);
    if !is_root() {
        panic!("{test} needs root and a cpuset cgroup: not running as root, so real cgroups cannot be created");
    }
    let mgr = match topomgr_cgroup::CgroupManager::detect(Path::new("/sys/fs/cgroup")) {
        Ok(m) => m,
        Err(e) => panic!("{test} needs root and a cpuset cgroup at /sys/fs/cgroup: {e}"),
    };
    let probe = topomgr_cgroup::CgroupPath::new(&format!(
        "topomgr-test/probe-{}-{}",
        std::process::id(),
        PROBES.fetch_add(1, Ordering::SeqCst)
    ))
    .unwrap();
    match mgr.create(&probe) {
        Ok(cg) => {
            if let Err(e) = mgr.remove(&cg, 0) {
                eprintln!("warning: {test}: probe cgroup left behind: {e}");
            }
        }
        Err(e) => panic!("{test} needs root and a cpuset cgroup: cannot create one: {e}"),
    }
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let (root, _) = root_cpuset(&mgr);
    assert_eq!(
        online.trim(),
        root,
        "{test} needs a root cpuset of every online CPU ({}), found {root}",
        online.trim()
    );
    mgr
}

/// The effective CPUs and memory nodes of the hierarchy's root (v1 or v2
/// file names); empty where they cannot be read.
fn root_cpuset(mgr: &topomgr_cgroup::CgroupManager) -> (String, String) {
    let read = |names: [&str; 2]| {
        names
            .iter()
            .find_map(|n| std::fs::read_to_string(mgr.root().join(n)).ok())
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    (
        read(["cpuset.effective_cpus", "cpuset.cpus.effective"]),
        read(["cpuset.effective_mems", "cpuset.mems.effective"]),
    )
}

/// Cgroups a test made in the real hierarchy, under
/// `topomgr-test/<tag>-<pid>/`, each level initialised as topomgr does;
/// removed again (leaves first) when dropped.
pub struct TestCgroups {
    /// The hierarchy.
    pub mgr: topomgr_cgroup::CgroupManager,
    base: String,
    made: Vec<topomgr_cgroup::Cgroup>,
}

impl TestCgroups {
    /// Create `leaves` (paths below the test's own directory).
    pub fn create(mgr: topomgr_cgroup::CgroupManager, tag: &str, leaves: &[&str]) -> Self {
        let mut t = TestCgroups {
            mgr,
            base: format!("topomgr-test/{tag}-{}", std::process::id()),
            made: Vec::new(),
        };
        for leaf in leaves {
            // Those made before a failure are removed when `t` drops.
            let p = topomgr_cgroup::CgroupPath::new(&t.path(leaf)).unwrap();
            let cg = t
                .mgr
                .create(&p)
                .unwrap_or_else(|e| panic!("creating test cgroup {p}: {e}"));
            t.made.push(cg);
        }
        t
    }

    /// `leaf`'s path relative to the cgroup root (what `attach` takes).
    pub fn path(&self, leaf: &str) -> String {
        format!("{}/{leaf}", self.base)
    }

    /// `leaf`'s `cpuset.cpus` as the kernel shows it.
    pub fn cpus(&self, leaf: &str) -> String {
        self.file(leaf, "cpuset.cpus")
    }

    /// `leaf`'s `cpuset.mems` as the kernel shows it.
    pub fn mems(&self, leaf: &str) -> String {
        self.file(leaf, "cpuset.mems")
    }

    fn file(&self, leaf: &str, name: &str) -> String {
        let p = self.mgr.root().join(self.path(leaf)).join(name);
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
            .trim()
            .to_owned()
    }

    /// The root cpuset's effective CPUs and memory nodes (what a
    /// container on the whole machine gets).
    pub fn root_cpuset(&self) -> (String, String) {
        root_cpuset(&self.mgr)
    }
}

impl Drop for TestCgroups {
    fn drop(&mut self) {
        for cg in self.made.iter().rev() {
            // Up to `topomgr-test/<tag>-<pid>`; `topomgr-test` itself stays,
            // so that a test creating its cgroups meanwhile never loses it.
            let depth = cg.path().depth().saturating_sub(2);
            if let Err(e) = self.mgr.remove(cg, depth) {
                eprintln!("warning: test cgroup {} left behind: {e}", cg.path());
            }
        }
    }
}

/// Held while a test runs topomgr processes on the machine's cgroup
/// hierarchy: one node has one owner (the node lock refuses a second state
/// directory, and any one-shot command beside a daemon), so such tests run
/// one at a time, in this process and across test processes (a lock file
/// in the temporary directory). A thread that holds it may take it again.
///
/// A test keeps it until it ends (its thread exits), not only while the
/// value lives: a test that stops its daemon mid-way still has containers
/// or runs that own the node (members of the node lock), and another test
/// starting a daemon then would be refused.
pub struct NodeGuard(());

thread_local! {
    /// The guard this thread took first, dropped when the thread (the test)
    /// ends; see [`NodeGuard`].
    static KEPT_UNTIL_THE_TEST_ENDS: std::cell::RefCell<Option<NodeGuard>> =
        const { std::cell::RefCell::new(None) };
}

struct NodeGuardState {
    owner: Option<std::thread::ThreadId>,
    depth: usize,
    file: Option<std::fs::File>,
}

static NODE_GUARD: std::sync::Mutex<NodeGuardState> = std::sync::Mutex::new(NodeGuardState {
    owner: None,
    depth: 0,
    file: None,
});
static NODE_GUARD_FREED: std::sync::Condvar = std::sync::Condvar::new();

/// Take the [`NodeGuard`] (waiting for the test that holds it).
pub fn node_guard() -> NodeGuard {
    use std::os::fd::AsRawFd as _;
    let me = std::thread::current().id();
    let mut st = NODE_GUARD.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        match st.owner {
            None => break,
            Some(t) if t == me => {
                st.depth += 1;
                return NodeGuard(());
            }
            Some(_) => st = NODE_GUARD_FREED.wait(st).unwrap_or_else(|p| p.into_inner()),
        }
    }
    let path = std::env::temp_dir().join("topomgr-tests-real-cgroups.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    // SAFETY: flock on an open descriptor this function owns; it blocks
    // until the other test process lets go.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(
        rc,
        0,
        "flock {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    st.owner = Some(me);
    st.depth = 2;
    st.file = Some(file);
    drop(st);
    KEPT_UNTIL_THE_TEST_ENDS.with(|k| *k.borrow_mut() = Some(NodeGuard(())));
    NodeGuard(())
}

impl Drop for NodeGuard {
    fn drop(&mut self) {
        let mut st = NODE_GUARD.lock().unwrap_or_else(|p| p.into_inner());
        st.depth -= 1;
        if st.depth == 0 {
            st.owner = None;
            st.file = None;
            NODE_GUARD_FREED.notify_all();
        }
    }
}

/// [`node_guard`] when the config file `config` puts topomgr on the
/// machine's cgroup hierarchy (its `cgroup_root` is on a cgroup
/// filesystem), else `None`.
pub fn node_guard_for(config: &Path) -> Option<NodeGuard> {
    let opts = topomgr_node::setup::config::LoadOptions {
        env: &|_| None,
        protected: false,
    };
    let cfg = topomgr_node::setup::config::load_with(config, &opts).ok()?;
    matches!(
        topomgr_cgroup::hierarchy::Hierarchy::of(&cfg.cgroup_root),
        topomgr_cgroup::hierarchy::Hierarchy::Cgroupfs { .. }
    )
    .then(node_guard)
}

/// A scratch directory `tag` with a `topomgr.toml` for the example machine
/// under `single-numa-node`: state and cgroups inside it, the example
/// widget provider with 2 widgets per node.
pub fn widgets_config(tag: &str) -> std::path::PathBuf {
    let dir = scratch_dir(tag);
    std::fs::write(
        dir.join("topomgr.toml"),
        format!(
            "policy = \"single-numa-node\"\nsysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n[providers.widgets]\nlibrary = \"{}\"\n[providers.widgets.config]\nwidgets_per_node = 2\n",
            example_sys(),
            plugins().widgets.display()
        ),
    )
    .unwrap();
    dir
}

/// The real CPU provider (static, CPU 0 reserved) and memory provider
/// (static, 64 MiB of node 0 reserved) as config tables, for tests on this
/// machine.
pub fn real_cpu_and_memory_providers() -> String {
    format!(
        "[providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\npolicy = \"static\"\nreserved_cpus = \"0\"\n\
         [providers.memory]\nlibrary = \"{}\"\n[providers.memory.config]\npolicy = \"static\"\n\
         [providers.memory.config.reserved_memory.0]\nmemory = \"64Mi\"\n",
        cpu_plugin().display(),
        memory_plugin().display()
    )
}
