//! End-to-end admissions through the `topomgr` binary with the mock provider
//! loaded from its built `.so`, exactly as a user runs it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

/// A config directory with `topomgr.toml` and one drop-in per mock provider.
fn config_dir(tag: &str, policy: &str, scope: &str, mocks: &[(&str, &str)]) -> PathBuf {
    let dir = common::scratch_dir(tag);
    std::fs::write(
        dir.join("topomgr.toml"),
        format!("policy = \"{policy}\"\nscope = \"{scope}\"\nplugin_dirs = []\n"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("plugins.d")).unwrap();
    let lib = common::plugins().mock.display().to_string();
    for (i, (name, config)) in mocks.iter().enumerate() {
        std::fs::write(
            dir.join(format!("plugins.d/{i:02}-{name}.toml")),
            format!(
                "[providers.{name}]\nlibrary = \"{lib}\"\n[providers.{name}.config]\n{config}\n"
            ),
        )
        .unwrap();
    }
    dir
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

fn admit(dir: &Path, extra: &[&str], sysfs: &Path) -> Value {
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

fn affinities(pod: &Value) -> Vec<String> {
    pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{}={}", c["name"].as_str().unwrap(), c["affinity"]))
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
    let pod = &out["pods"][0];
    assert_eq!(pod["admitted"], true);
    assert_eq!(pod["qos"], "Guaranteed");
    assert_eq!(affinities(pod), ["init=[2]", "app=[2]"]);
    let app = &pod["containers"][1];
    assert_eq!(app["cpus"], "8-9");
    assert_eq!(app["exclusive"], true);
    assert_eq!(app["mems"], "2");
    assert_eq!(app["devices"]["example.com/foo"][0], "foo-2");
    assert_eq!(app["env"]["FOO"], "2");
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
                r#"hints = { "cpu" = [{affinity = [1], preferred = true}, {affinity = [3], preferred = true}] }"#,
            ),
            (
                "mockb",
                r#"hints = { "example.com/foo" = [{affinity = [3], preferred = true}, {affinity = [0, 1], preferred = false}] }"#,
            ),
        ],
    );
    pod_file(&dir, POD);
    let out = admit(&dir, &[], &example_machine());
    assert_eq!(affinities(&out["pods"][0]), ["init=[3]", "app=[3]"]);

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
    let pod = &out["pods"][0];
    assert_eq!(pod["admitted"], false);
    assert_eq!(pod["reason"], "TopologyAffinityError");
    assert_eq!(
        pod["message"],
        "Resources cannot be allocated with Topology Locality: the pod needs every resource on one common NUMA node (policy single-numa-node); cpu (mocka): preferred on {1}; example.com/foo (mockb): preferred on {0}"
    );
    assert_eq!(pod["containers"], serde_json::json!([]));
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
            ("mocka", ""),
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
    let p1 = &out["pods"][0];
    assert_eq!(p1["admitted"], false);
    assert_eq!(p1["reason"], "OutOfFoo");
    assert_eq!(
        p1["message"],
        "provider \"mockb\" could not allocate container \"app\": no foo left on node 2"
    );
    // The second pod is admitted by the same host afterwards.
    assert_eq!(out["pods"][1]["admitted"], true);
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
    let out = admit(&dir, &[], &example_machine());
    for pod in out["pods"].as_array().unwrap() {
        assert_eq!(pod["admitted"], false);
        assert_eq!(pod["reason"], "ProviderPanic");
        let msg = pod["message"].as_str().unwrap();
        assert!(
            msg.starts_with("provider \"mock\" could not allocate container"),
            "{msg}"
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
    let pod = &out["pods"][0];
    assert_eq!(pod["admitted"], false);
    assert_eq!(pod["reason"], "UnexpectedAdmissionError");
    assert_eq!(
        pod["message"],
        "provider \"mock\" returned hints for resource \"example.com/foo\" naming NUMA node(s) 9, which this machine does not have (its nodes: 0-3)"
    );
}

#[test]
fn compact_hints_on_the_recorded_64_node_machine() {
    let Some(sys) = common::unpack_corpus_machine("256ia64-64n2s2c") else {
        return;
    };
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
                &format!("hints = {{ \"cpu\" = {} }}", singles(&[0, 1, 2])),
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
    assert_eq!(affinities(&out["pods"][0]), ["init=[5]", "app=[5]"]);
}
