//! End-to-end admissions through the `topomgr` binary with the mock provider
//! loaded from its built `.so`, exactly as a user runs it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;
use topomgr_node::api::{Admission, Admissions};

/// What the first mock owns unless its config says otherwise: the
/// extended resource of the test pods (a pod requesting an extended
/// resource nobody owns is refused before any hint is asked).
const OWNS_FOO: &str = "inventory = { resources = { \"example.com/foo\" = { total = { capacity = 4, allocatable = 4, available = 4 }, zones = [] } } }";

/// A config directory with `topomgr.toml` and one drop-in per mock provider.
fn config_dir(tag: &str, policy: &str, scope: &str, mocks: &[(&str, &str)]) -> PathBuf {
    let lib = common::plugins().mock.display().to_string();
    let dropins: Vec<(String, String)> = mocks
        .iter()
        .enumerate()
        .map(|(i, (name, config))| {
            let owns = if i == 0 && !config.contains("inventory") {
                OWNS_FOO
            } else {
                ""
            };
            (
                format!("{i:02}-{name}.toml"),
                format!(
                    "[providers.{name}]\nlibrary = \"{lib}\"\n[providers.{name}.config]\n{config}\n{owns}\n"
                ),
            )
        })
        .collect();
    let dropins: Vec<(&str, &str)> = dropins
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    common::config_dir(
        tag,
        // A cgroup root of its own: `admit --state-dir` takes the node
        // lock of its cgroup root, and these tests run side by side.
        &format!(
            "policy = \"{policy}\"\nscope = \"{scope}\"\nplugin_dirs = []\ncgroup_root = \"cgroup\"\n"
        ),
        &dropins,
    )
}

fn example_machine() -> PathBuf {
    common::workspace_root().join("examples/machines/2s4n/sys")
}

fn pod_file(dir: &Path, yaml: &str) -> PathBuf {
    let p = dir.join("pods.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: p1, uid: uid-1}
spec:
  initContainers:
    - name: init
      resources: {limits: {cpu: "1", memory: 1Gi}}
  containers:
    - name: app
      resources: {limits: {cpu: "2", memory: 1Gi, example.com/foo: "1"}}
"#;

const SECOND_POD: &str = r#"
---
apiVersion: v1
kind: Pod
metadata: {name: p2, uid: uid-2}
spec:
  containers:
    - name: web
      resources: {limits: {cpu: "1", memory: 1Gi}}
"#;

fn admit(dir: &Path, extra: &[&str], sysfs: &Path) -> Admissions {
    let out = Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(dir.join("topomgr.toml"))
        .arg("admit")
        .arg("--sysfs-root")
        .arg(sysfs)
        .args(extra)
        .arg(dir.join("pods.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "topomgr admit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn affinities(pod: &Admission) -> Vec<String> {
    pod.containers
        .iter()
        .map(|c| {
            // As the JSON prints it: `[2]`, `[2,3]`, `null`.
            let affinity = serde_json::to_string(&c.affinity).unwrap();
            format!("{}={affinity}", c.name)
        })
        .collect()
}

#[test]
fn container_scope_aligns_each_container() {
    let dir = config_dir(
        "e2e-container",
        "restricted",
        "container",
        &[(
            "mock",
            r#"hints = { "example.com/foo" = [{affinity = [2], preferred = true}, {affinity = [2, 3], preferred = false}] }
allocation = { cpus = "8-9", exclusive = true, mems = [2], devices = { "example.com/foo" = ["foo-2"] }, env = { FOO = "2" } }"#,
        )],
    );
    pod_file(&dir, POD);
    let out = admit(&dir, &[], &example_machine());
    let pod = &out.pods[0];
    assert!(pod.admitted);
    assert_eq!(pod.qos, topomgr_sdk::QosClass::Guaranteed);
    assert_eq!(affinities(pod), ["init=[2]", "app=[2]"]);
    let app = &pod.containers[1];
    assert_eq!(app.cpus.to_string(), "8-9");
    assert!(app.exclusive);
    assert_eq!(app.mems.to_string(), "2");
    assert_eq!(app.devices["example.com/foo"], ["foo-2"]);
    assert_eq!(app.env["FOO"], "2");
}

#[test]
fn pod_scope_single_numa_node_and_rejection() {
    // Two providers from the same .so with different scripts.
    let dir = config_dir(
        "e2e-pod",
        "single-numa-node",
        "pod",
        &[
            (
                "mocka",
                r#"hints = { "cpu" = [{affinity = [1], preferred = true}, {affinity = [3], preferred = true}] }
allocation = { devices = { "example.com/foo" = ["foo-3"] } }"#,
            ),
            (
                "mockb",
                r#"hints = { "example.com/foo" = [{affinity = [3], preferred = true}, {affinity = [0, 1], preferred = false}] }"#,
            ),
        ],
    );
    pod_file(&dir, POD);
    let out = admit(&dir, &[], &example_machine());
    assert_eq!(affinities(&out.pods[0]), ["init=[3]", "app=[3]"]);

    let dir = config_dir(
        "e2e-pod-reject",
        "single-numa-node",
        "pod",
        &[
            (
                "mocka",
                r#"hints = { "cpu" = [{affinity = [1], preferred = true}] }"#,
            ),
            (
                "mockb",
                r#"hints = { "example.com/foo" = [{affinity = [0], preferred = true}] }"#,
            ),
        ],
    );
    pod_file(&dir, POD);
    let out = admit(&dir, &[], &example_machine());
    let pod = &out.pods[0];
    assert!(!pod.admitted);
    assert_eq!(pod.reason.as_deref(), Some("TopologyAffinityError"));
    assert_eq!(
        pod.message.as_deref().unwrap(),
        "Resources cannot be allocated with Topology Locality: the pod needs every resource on one common NUMA node (policy single-numa-node); cpu (mocka): preferred on {1}; example.com/foo (mockb): preferred on {0}"
    );
    assert!(pod.containers.is_empty());
}

fn mock_calls(state: &Path, name: &str) -> Vec<String> {
    let v: Value = serde_json::from_slice(&common::provider_state(state, name)).unwrap();
    v["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn failing_allocate_rolls_back_every_provider() {
    let dir = config_dir(
        "e2e-rollback",
        "best-effort",
        "container",
        &[
            (
                "mocka",
                r#"allocation = { devices = { "example.com/foo" = ["foo-0"] } }"#,
            ),
            (
                "mockb",
                r#"fail_allocate = "no foo left on node 2"
fail_allocate_for = ["app"]
fail_reason = "OutOfFoo""#,
            ),
        ],
    );
    pod_file(&dir, &format!("{POD}{SECOND_POD}"));
    let state = dir.join("state");
    let out = admit(
        &dir,
        &["--state-dir", state.to_str().unwrap()],
        &example_machine(),
    );
    let p1 = &out.pods[0];
    assert!(!p1.admitted);
    assert_eq!(p1.reason.as_deref(), Some("OutOfFoo"));
    assert_eq!(
        p1.message.as_deref().unwrap(),
        "provider \"mockb\" could not allocate container \"app\": no foo left on node 2"
    );
    // The second pod is admitted by the same host afterwards.
    assert!(out.pods[1].admitted);
    assert_eq!(
        mock_calls(&state, "mocka"),
        [
            "allocate uid-1 init",
            "allocate uid-1 app",
            "release uid-1 app",
            "release uid-1 init",
            "allocate uid-2 web"
        ]
    );
    assert_eq!(
        mock_calls(&state, "mockb"),
        [
            "allocate uid-1 init",
            "release uid-1 init",
            "allocate uid-2 web"
        ]
    );
    // The saved state holds only the admitted pod; admitting it again is idempotent.
    let pods = common::state_body(&state)["pods"].clone();
    assert_eq!(
        pods.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["uid-2"]
    );
}

#[test]
fn panicking_provider_fails_the_admission_not_the_host() {
    let dir = config_dir(
        "e2e-panic",
        "best-effort",
        "container",
        &[("mock", r#"panic_in = "allocate""#)],
    );
    pod_file(&dir, &format!("{POD}{SECOND_POD}"));
    let run = Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(dir.join("topomgr.toml"))
        .arg("admit")
        .arg("--sysfs-root")
        .arg(example_machine())
        .arg(dir.join("pods.yaml"))
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "topomgr admit failed: {stderr}");
    let out: Admissions = serde_json::from_slice(&run.stdout).unwrap();
    for pod in &out.pods {
        assert!(!pod.admitted);
        assert_eq!(pod.reason.as_deref(), Some("ProviderPanic"));
        let msg = pod.message.as_deref().unwrap();
        assert!(
            msg.starts_with("provider \"mock\" could not allocate container"),
            "{msg}"
        );
    }
    // Each of the two panics is one error event naming the provider and
    // the call; nothing else reaches stderr (no default panic message).
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    for line in lines {
        assert!(
            line.contains("ERROR")
                && line.contains("provider panicked; the call fails with ProviderPanic")
                && line.contains(r#"provider="mock""#)
                && line.contains(r#"call="allocate""#)
                && line.contains("panic=mock provider scripted to panic in allocate"),
            "{line}"
        );
    }
}

#[test]
fn hints_naming_a_missing_node_are_refused() {
    let dir = config_dir(
        "e2e-badmask",
        "best-effort",
        "container",
        &[(
            "mock",
            r#"hints = { "example.com/foo" = [{affinity = [0, 9], preferred = true}] }"#,
        )],
    );
    pod_file(&dir, POD);
    let out = admit(&dir, &[], &example_machine());
    let pod = &out.pods[0];
    assert!(!pod.admitted);
    assert_eq!(pod.reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert_eq!(
        pod.message.as_deref().unwrap(),
        "provider \"mock\" returned hints for resource \"example.com/foo\" naming NUMA node(s) 9, which this machine does not have (its nodes: 0-3)"
    );
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn compact_hints_on_the_recorded_64_node_machine() {
    let sys = common::unpack_corpus_machine("256ia64-64n2s2c");
    // Every provider can use any single node except a few; the common ones
    // with the lowest id is node 5.
    let singles = |skip: &[u32]| {
        let v: Vec<String> = (0..64u32)
            .filter(|n| !skip.contains(n))
            .map(|n| format!("[{n}]"))
            .collect();
        format!("{{ minimal = [{}], preferred_width = 1 }}", v.join(", "))
    };
    let dir = config_dir(
        "e2e-64",
        "restricted",
        "pod",
        &[
            (
                "mocka",
                // The first mock owns example.com/foo (`config_dir`): it
                // gives the device.
                &format!(
                    "hints = {{ \"cpu\" = {} }}\nallocation = {{ devices = {{ \"example.com/foo\" = [\"foo-0\"] }} }}",
                    singles(&[0, 1, 2])
                ),
            ),
            (
                "mockb",
                &format!("hints = {{ \"memory\" = {} }}", singles(&[3, 4])),
            ),
            (
                "mockc",
                &format!("hints = {{ \"example.com/foo\" = {} }}", singles(&[])),
            ),
            (
                "mockd",
                &format!("hints = {{ \"hugepages-2Mi\" = {} }}", singles(&[0])),
            ),
        ],
    );
    pod_file(&dir, POD);
    let start = Instant::now();
    let out = admit(&dir, &[], &sys);
    eprintln!(
        "64-node machine, 4 mock providers with compact hints: whole `topomgr admit` run took {:?}",
        start.elapsed()
    );
    assert!(out.pods[0].admitted, "{:?}", out.pods[0].message);
    assert_eq!(affinities(&out.pods[0]), ["init=[5]", "app=[5]"]);
}

/// [`single_pod`] whose container also asks for one `example.com/foo`.
fn device_pod(uid: &str, name: &str) -> String {
    single_pod(uid, name).replace("memory: 1Gi}", "memory: 1Gi, example.com/foo: \"1\"}")
}

fn single_pod(uid: &str, name: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, uid: {uid}}}\nspec:\n  containers:\n    - name: app\n      resources: {{limits: {{cpu: \"1\", memory: 1Gi}}}}\n"
    )
}

/// `topomgr admit --state-dir <dir>/state` of `pods` with one mock provider
/// scripted by `mock`: the config dir and the admission JSON of each pod.
fn admit_with_mock(tag: &str, mock: &str, pods: &[(&str, &str)]) -> (PathBuf, Vec<Admission>) {
    admit_pods_with_mock(tag, mock, pods, single_pod)
}

/// [`admit_with_mock`] with each pod written by `pod`.
fn admit_pods_with_mock(
    tag: &str,
    mock: &str,
    pods: &[(&str, &str)],
    pod: fn(&str, &str) -> String,
) -> (PathBuf, Vec<Admission>) {
    let dir = config_dir(tag, "best-effort", "container", &[("mock", mock)]);
    let yaml: String = pods.iter().map(|(uid, name)| pod(uid, name)).collect();
    pod_file(&dir, &yaml);
    let state = dir.join("state");
    let out = admit(
        &dir,
        &["--state-dir", &state.to_string_lossy()],
        &example_machine(),
    );
    (dir, out.pods)
}

/// A provider that hands the same CPUs or devices to every pod is refused
/// by the host's ledger, as is one that names CPUs the machine lacks; the
/// refused pod holds nothing afterwards.
#[test]
fn the_ledger_refuses_what_is_held_or_missing() {
    let two = [("uid-1", "first"), ("uid-2", "second")];
    let (dir, out) = admit_pods_with_mock(
        "e2e-ledger",
        r#"allocation = { cpus = "1-15", exclusive = true, devices = { "example.com/foo" = ["foo-0"] } }"#,
        &two,
        device_pod,
    );
    assert!(out[0].admitted);
    assert!(!out[1].admitted);
    assert_eq!(out[1].reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert_eq!(
        out[1].message.as_deref().unwrap(),
        "provider \"mock\" gave pod default/second container \"app\" CPUs 1-15 exclusively, but CPUs 1-15 are held by pod default/first (uid uid-1) container \"app\""
    );
    // The refused allocation was given back to the provider.
    assert_eq!(
        mock_calls(&dir.join("state"), "mock"),
        [
            "allocate uid-1 app",
            "allocate uid-2 app",
            "release uid-2 app"
        ]
    );
    // Shared CPUs are fine, the device is not.
    let (_, out) = admit_pods_with_mock(
        "e2e-ledger-dev",
        r#"allocation = { cpus = "0-15", devices = { "example.com/foo" = ["foo-0"] } }"#,
        &two,
        device_pod,
    );
    assert!(out[0].admitted);
    assert_eq!(
        out[1].message.as_deref().unwrap(),
        "provider \"mock\" gave pod default/second container \"app\" example.com/foo device foo-0, but it is held by pod default/first (uid uid-1) container \"app\""
    );
    // CPUs and memory nodes the machine does not have.
    let (_, out) = admit_with_mock(
        "e2e-ledger-machine",
        r#"allocation = { cpus = "0-1000", exclusive = true }"#,
        &two[..1],
    );
    assert_eq!(
        out[0].message.as_deref().unwrap(),
        "provider \"mock\" gave pod default/first container \"app\" CPUs 16-1000, which are not online CPUs of this machine (online: 0-15)"
    );
    let (_, out) = admit_with_mock("e2e-ledger-mems", "allocation = { mems = [5] }", &two[..1]);
    assert_eq!(
        out[0].message.as_deref().unwrap(),
        "provider \"mock\" gave pod default/first container \"app\" memory on NUMA node(s) 5, which this machine does not have (its nodes: 0-3)"
    );
}

/// A provider's devices are checked against the request and its own
/// inventory: a request of one `example.com/foo` given two ids in one, three
/// ids, none, or one id twice is refused naming the provider, the resource
/// and what was wrong, and the pod holds nothing afterwards (the provider
/// was told to release it; a second pod is admitted with the id).
#[test]
fn device_allocations_must_match_the_request() {
    let cases = [
        (
            "e2e-dev-comma",
            r#"["a,b"]"#,
            r#"provider "mock" gave pod default/first container "app" example.com/foo device id "a,b", which is not one device id (empty, or with a comma, whitespace or a control character, which the environment formats separate devices with)"#,
        ),
        (
            "e2e-dev-three",
            r#"["x", "y", "z"]"#,
            r#"provider "mock" gave pod default/first container "app" 3 example.com/foo device(s) ["x", "y", "z"], but the container requested 1"#,
        ),
        (
            "e2e-dev-none",
            "[]",
            r#"provider "mock" gave pod default/first container "app" 0 example.com/foo device(s) [], but the container requested 1"#,
        ),
        (
            "e2e-dev-twice",
            r#"["a", "a"]"#,
            r#"provider "mock" gave pod default/first container "app" example.com/foo device a more than once (["a", "a"])"#,
        ),
    ];
    for (tag, ids, message) in cases {
        let (dir, out) = admit_pods_with_mock(
            tag,
            &format!(r#"allocation = {{ devices = {{ "example.com/foo" = {ids} }} }}"#),
            &[("uid-1", "first")],
            device_pod,
        );
        assert!(!out[0].admitted, "{tag}: {out:?}");
        assert_eq!(
            out[0].reason.as_deref(),
            Some("UnexpectedAdmissionError"),
            "{tag}"
        );
        assert_eq!(out[0].message.as_deref(), Some(message), "{tag}");
        assert_eq!(
            mock_calls(&dir.join("state"), "mock"),
            ["allocate uid-1 app", "release uid-1 app"],
            "{tag}"
        );
        let pods = common::topomgr(
            &dir,
            &["pods", "--state-dir", &dir.join("state").to_string_lossy()],
        );
        assert!(!pods.1.contains("uid-1"), "{tag}: {}", pods.1);
    }
    // Left out entirely, although the provider owns the resource.
    let (_, out) = admit_pods_with_mock(
        "e2e-dev-missing",
        r#"allocation = { cpus = "0-1" }"#,
        &[("uid-1", "first")],
        device_pod,
    );
    assert_eq!(
        out[0].message.as_deref(),
        Some(
            r#"provider "mock" gave pod default/first container "app" no example.com/foo device, but the container requested 1 and the provider's inventory lists example.com/foo"#
        )
    );
    // One good id is admitted.
    let (_, out) = admit_pods_with_mock(
        "e2e-dev-good",
        r#"allocation = { devices = { "example.com/foo" = ["a"] } }"#,
        &[("uid-1", "first")],
        device_pod,
    );
    assert!(out[0].admitted, "{out:?}");
    assert_eq!(out[0].containers[0].devices["example.com/foo"], ["a"]);
}

#[test]
fn two_providers_contradicting_an_environment_variable_are_refused() {
    let dir = config_dir(
        "e2e-env",
        "best-effort",
        "container",
        &[
            ("gpu", r#"allocation = { env = { VISIBLE = "0" } }"#),
            ("nic", r#"allocation = { env = { VISIBLE = "1" } }"#),
        ],
    );
    pod_file(&dir, &single_pod("uid-1", "first"));
    let out = admit(&dir, &[], &example_machine());
    let pod = &out.pods[0];
    assert_eq!(pod.reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert_eq!(
        pod.message.as_deref().unwrap(),
        "providers \"gpu\" and \"nic\" set environment variable \"VISIBLE\" of container \"app\" to different values (\"0\" and \"1\"); topomgr refuses contradicting environments"
    );
}

/// The CLI calls providers with the daemon's deadline.
#[test]
fn the_cli_honours_the_provider_deadline() {
    let dir = config_dir(
        "e2e-deadline",
        "best-effort",
        "container",
        &[("mock", "sleep_ms = 60000")],
    );
    let toml = dir.join("topomgr.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str("[daemon]\nprovider_timeout_ms = 100\n");
    std::fs::write(&toml, text).unwrap();
    pod_file(&dir, &single_pod("uid-1", "first"));
    let out = admit(&dir, &[], &example_machine());
    let pod = &out.pods[0];
    assert_eq!(pod.reason.as_deref(), Some("ProviderTimeout"));
    assert_eq!(
        pod.message.as_deref().unwrap(),
        "provider \"mock\" failed to give hints: provider \"mock\" did not answer topology_hints within 100 ms; it is not called again until that call returns"
    );
}

fn many_containers(uid: &str, n: usize) -> String {
    let mut yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: many, uid: {uid}}}\nspec:\n  containers:\n"
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "    - name: c{i}\n      resources: {{limits: {{cpu: 10m, memory: 1Mi}}}}\n"
        ));
    }
    yaml
}

/// 1,000 containers are admitted (the time is printed, not asserted: see
/// BENCHMARKS.md); more than the documented cap are refused up front.
#[test]
fn many_containers_are_admitted_and_the_cap_is_enforced() {
    let dir = config_dir(
        "e2e-many",
        "best-effort",
        "container",
        &[("mocka", ""), ("mockb", "")],
    );
    pod_file(&dir, &many_containers("many-1", 1000));
    let start = Instant::now();
    let out = admit(&dir, &[], &example_machine());
    eprintln!(
        "1000-container pod through two mock providers: whole `topomgr admit` run took {:?}",
        start.elapsed()
    );
    assert!(out.pods[0].admitted);
    assert_eq!(out.pods[0].containers.len(), 1000);
    pod_file(&dir, &many_containers("many-2", 1025));
    let out = admit(&dir, &[], &example_machine());
    assert_eq!(out.pods[0].reason.as_deref(), Some("TooManyContainers"));
    assert_eq!(
        out.pods[0].message.as_deref().unwrap(),
        "pod default/many has 1025 containers (init and app); topomgr admits at most 1024 per pod"
    );
}

/// `topomgr topology | head -c 10`: a closed stdout ends quietly.
#[test]
fn a_closed_stdout_ends_quietly() {
    let dir = config_dir("e2e-pipe", "best-effort", "container", &[]);
    let mut child = Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(dir.join("topomgr.toml"))
        .args(["topology", "--sysfs-root"])
        .arg(example_machine())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    assert!(
        out.status.code() == Some(0) || out.status.signal() == Some(13),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// Control characters from manifests or providers are shown escaped in tables.
#[test]
fn tables_escape_control_characters() {
    let dir = config_dir(
        "e2e-escape",
        "best-effort",
        "container",
        &[("mock", "fail_allocate = \"bad \\u001b[31mred\\u001b[0m\"")],
    );
    pod_file(
        &dir,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: \"evil\\e[2J\", uid: uid-e}\nspec:\n  containers:\n    - name: app\n      resources: {limits: {cpu: \"1\", memory: 1Gi}}\n",
    );
    let (code, table, stderr) = common::topomgr(
        &dir,
        &[
            "admit",
            "--output",
            "table",
            "--sysfs-root",
            &example_machine().to_string_lossy(),
            &dir.join("pods.yaml").to_string_lossy(),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!table.contains('\u{1b}'), "{table:?}");
    assert!(table.contains("default/evil\\u{1b}[2J"), "{table}");
    assert!(table.contains("bad \\u{1b}[31mred\\u{1b}[0m"), "{table}");
}
