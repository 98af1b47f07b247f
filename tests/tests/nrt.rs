//! The NodeResourceTopology export end to end: the real CPU, memory and
//! example widget plugins on the example 2-socket 4-node machine, through
//! `GET /v1/noderesourcetopology`, the `export_file` and
//! `topomgr export nrt`, validated against the upstream CRD's v1alpha2
//! `openAPIV3Schema` (vendored in `tests/fixtures/nrt`, source in its
//! README) and checked against the admitted pods.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::daemon::Daemon;
use serde_json::{json, Value};

/// The v1alpha2 `openAPIV3Schema` of the vendored CRD, made strict the way
/// `kubectl apply --validate=strict` is: an object with declared
/// properties accepts no others.
fn v1alpha2_schema() -> Value {
    let path = common::workspace_root().join("tests/fixtures/nrt/crd.yaml");
    let text = fs::read_to_string(&path).unwrap();
    let crd: Value = serde_saphyr::from_str(&text).expect("CRD YAML");
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1alpha2")
        .expect("the CRD has v1alpha2");
    let mut schema = version["schema"]["openAPIV3Schema"].clone();
    fn strict(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if m.contains_key("properties") {
                    m.insert("additionalProperties".into(), false.into());
                }
                m.values_mut().for_each(strict);
            }
            Value::Array(a) => a.iter_mut().for_each(strict),
            _ => {}
        }
    }
    strict(&mut schema);
    schema
}

/// Every schema violation of `object`, as text (empty: valid).
fn violations(object: &Value) -> Vec<String> {
    let validator = jsonschema::draft4::new(&v1alpha2_schema()).expect("schema compiles");
    validator
        .iter_errors(object)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn the_schema_refuses_what_the_api_server_would() {
    let bad = json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": "n"},
        "zones": [{"name": "node-0", "type": "Node",
                   "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4x"}]}],
    });
    let v = violations(&bad);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v.iter()
            .any(|e| e.contains("\"available\" is a required property")),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|e| e.starts_with("/zones/0/resources/0/allocatable")),
        "{v:?}"
    );
    let extra = json!({"zones": [], "spec": {}});
    assert_eq!(violations(&extra).len(), 1);
}

/// A config with the CPU, memory and widget providers on the example
/// machine, the node name set and an export file.
fn config(tag: &str) -> PathBuf {
    let dir = common::scratch_dir(tag);
    let p = common::plugins();
    fs::write(
        dir.join("topomgr.toml"),
        format!(
            r#"policy = "single-numa-node"
sysfs_root = "{sys}"
state_dir = "state"
cgroup_root = "cgroup"
node_name = "worker-1"
export_file = "nrt.json"
[providers.cpu]
library = "{cpu}"
[providers.cpu.config]
policy = "static"
reserved_cpus = "0"
[providers.memory]
library = "{memory}"
[providers.memory.config]
policy = "static"
[providers.memory.config.reserved_memory.0]
memory = "512Mi"
[providers.widgets]
library = "{widgets}"
[providers.widgets.config]
widgets_per_node = 2
"#,
            sys = common::example_sys(),
            cpu = common::cpu_plugin().display(),
            memory = common::memory_plugin().display(),
            widgets = p.widgets.display(),
        ),
    )
    .unwrap();
    dir
}

const UID: &str = "6f1c2a3e-0014-4c8e-9a51-000000000001";

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: trainer
  namespace: ml
  uid: 6f1c2a3e-0014-4c8e-9a51-000000000001
spec:
  containers:
  - name: app
    resources:
      limits:
        cpu: \"2\"
        memory: 1Gi
        example.com/widget: \"1\"
";

/// (name, capacity, allocatable, available) of every resource of every
/// zone, for comparisons.
fn table(object: &Value) -> Vec<(String, String, [String; 3])> {
    let mut out = Vec::new();
    for zone in object["zones"].as_array().unwrap() {
        for r in zone["resources"].as_array().into_iter().flatten() {
            let s = |k: &str| r[k].as_str().unwrap().to_owned();
            out.push((
                zone["name"].as_str().unwrap().to_owned(),
                s("name"),
                [s("capacity"), s("allocatable"), s("available")],
            ));
        }
    }
    out
}

fn row(zone: &str, name: &str, amounts: [&str; 3]) -> (String, String, [String; 3]) {
    (zone.into(), name.into(), amounts.map(str::to_owned))
}

/// The example machine with nothing admitted: 4 CPUs per node (CPU 0
/// reserved), 2 widgets per node, 8Gi per node of which the hugepages of
/// the node and (node 0) the 512Mi reserved are not allocatable as memory.
fn idle() -> Vec<(String, String, [String; 3])> {
    // (node, 1Gi pages, 2Mi pages, allocatable memory = 8Gi - pages - reserved)
    let nodes = [
        ("node-0", "2Gi", "1Gi", "4608Mi"),
        ("node-1", "1Gi", "1Gi", "6Gi"),
        ("node-2", "0", "512Mi", "7680Mi"),
        ("node-3", "2Gi", "0", "6Gi"),
    ];
    let mut rows = Vec::new();
    for (z, huge1g, huge2m, mem) in nodes {
        let cpus = if z == "node-0" { "3" } else { "4" };
        rows.push(row(z, "cpu", ["4", cpus, cpus]));
        rows.push(row(z, "example.com/widget", ["2", "2", "2"]));
        rows.push(row(z, "hugepages-1Gi", [huge1g; 3]));
        rows.push(row(z, "hugepages-2Mi", [huge2m; 3]));
        rows.push(row(z, "memory", ["8Gi", mem, mem]));
    }
    rows
}

#[test]
fn daemon_export_follows_admission_and_release() {
    let dir = config("nrt-daemon");
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let get = |c: &mut topomgr::daemon::client::Client| {
        let r = c.get("/v1/noderesourcetopology").unwrap();
        assert_eq!(r.status, 200, "{}", r.error_message());
        r.json().unwrap()
    };
    let before = get(&mut c);
    assert_eq!(violations(&before), Vec::<String>::new(), "{before:#}");
    assert_eq!(before["metadata"], json!({"name": "worker-1"}));
    assert_eq!(
        before["attributes"],
        json!([{"name": "topologyManagerPolicy", "value": "single-numa-node"},
               {"name": "topologyManagerScope", "value": "container"}])
    );
    assert_eq!(
        before["zones"][1]["costs"],
        json!([{"name": "node-0", "value": 12}, {"name": "node-1", "value": 10},
               {"name": "node-2", "value": 20}, {"name": "node-3", "value": 20}])
    );
    assert_eq!(table(&before), idle());
    let file =
        || -> Value { serde_json::from_slice(&fs::read(dir.join("nrt.json")).unwrap()).unwrap() };
    assert_eq!(file(), before, "the export file is written at start");

    // Admit: the pod lands on one node; exactly its resources leave that
    // zone's `available`, nothing else moves.
    let r = c.admit(POD).unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let pod = r.json().unwrap()["pods"][0].clone();
    assert_eq!(pod["admitted"], true, "{pod}");
    let node = pod["containers"][0]["affinity"][0].as_u64().unwrap();
    let after = get(&mut c);
    assert_eq!(violations(&after), Vec::<String>::new());
    let mut want = idle();
    let zone = format!("node-{node}");
    for (z, name, amounts) in &mut want {
        if *z != zone {
            continue;
        }
        // 2 CPUs, 1 widget and 1Gi of memory less.
        amounts[2] = match (name.as_str(), node) {
            ("cpu", 0) => "1".into(),
            ("cpu", _) => "2".into(),
            ("example.com/widget", _) => "1".into(),
            ("memory", 0) => "3584Mi".into(),
            ("memory", 1 | 3) => "5Gi".into(),
            ("memory", _) => "6656Mi".into(),
            _ => amounts[2].clone(),
        };
    }
    assert_eq!(table(&after), want);
    assert_eq!(file(), after, "the export file follows the admission");

    // `topomgr export nrt` asks the daemon; YAML is the same object.
    let sock = d.socket.to_string_lossy().into_owned();
    let (code, out, err) = common::topomgr(&dir, &["export", "nrt", "--socket", &sock]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), after);
    let (code, out, err) =
        common::topomgr(&dir, &["export", "nrt", "--socket", &sock, "-o", "yaml"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_saphyr::from_str::<Value>(&out).unwrap(), after);

    // Release: everything is available again.
    let r = c.release(UID).unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    assert_eq!(table(&get(&mut c)), idle());
    assert_eq!(table(&file()), idle());

    // Admit again and stop: `export nrt --state-dir` reads the same from the
    // saved state without a daemon.
    assert_eq!(c.admit(POD).unwrap().status, 200);
    let served = get(&mut d.client());
    d.stop();
    let state = dir.join("state").to_string_lossy().into_owned();
    let (code, out, err) = common::topomgr(&dir, &["export", "nrt", "--state-dir", &state]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), served);
}

#[test]
fn export_without_a_daemon_names_the_socket() {
    let dir = config("nrt-nodaemon");
    let sock = dir.join("absent.sock");
    let (code, _, err) = common::topomgr(
        &dir,
        &["export", "nrt", "--socket", &sock.to_string_lossy()],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot connect to the topomgr daemon at"),
        "{err}"
    );
    assert!(!Path::new(&dir.join("nrt.json")).exists());
}
