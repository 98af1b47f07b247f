//! The Kubernetes face end to end, with the real CPU, memory and example
//! widget plugins on the example 2-socket 4-node machine:
//!
//! - the NodeResourceTopology export through `GET
//!   /v1/noderesourcetopology`, the `export_file` and `topomgr export nrt`,
//!   validated against the upstream CRD's v1alpha2 `openAPIV3Schema`
//!   (vendored in `tests/fixtures/nrt`, source in its README) and checked
//!   against the admitted pods;
//! - extended resources nobody serves, refused as the kubelet refuses them;
//! - explain as data (`explain -o json`, `GET /v1/pods/{uid}/explain`,
//!   `POST /v1/pods?dry_run=true&explain=true`);
//! - JSON error bodies for unknown routes and methods.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use crate::daemon::Daemon;
use serde_json::{json, Value};
use topomgr_node::api;

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
    strict(&mut schema);
    schema
}

/// Objects with declared properties accept no others.
fn strict(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.contains_key("properties") && !m.contains_key("additionalProperties") {
                m.insert("additionalProperties".into(), false.into());
            }
            m.values_mut().for_each(strict);
        }
        Value::Array(a) => a.iter_mut().for_each(strict),
        _ => {}
    }
}

/// Every violation of `object` against `schema`, as text (empty: valid).
fn violations_of(schema: &Value, object: &Value) -> Vec<String> {
    let validator = jsonschema::draft4::new(schema).expect("schema compiles");
    validator
        .iter_errors(object)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// Every violation of `object` against the NodeResourceTopology v1alpha2 schema.
fn violations(object: &Value) -> Vec<String> {
    violations_of(&v1alpha2_schema(), object)
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
pub(crate) fn config(tag: &str) -> PathBuf {
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

pub(crate) const UID: &str = "6f1c2a3e-0014-4c8e-9a51-000000000001";

pub(crate) const POD: &str = "apiVersion: v1
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

/// The podfingerprint library's `Sign` of `pods` (namespace, name),
/// written here from its specification (github.com/
/// k8stopologyawareschedwg/podfingerprint, `podfingerprint.go`) over an
/// XXH64 of another crate, to check topomgr's own port.
pub(crate) fn pod_fingerprint(pods: &[(&str, &str)]) -> String {
    use twox_hash::XxHash64;
    let mut hashes: Vec<u64> = pods
        .iter()
        .map(|(ns, name)| XxHash64::oneshot(XxHash64::oneshot(0, ns.as_bytes()), name.as_bytes()))
        .collect();
    hashes.sort();
    let mut bytes = Vec::new();
    for h in hashes {
        bytes.extend_from_slice(&h.to_le_bytes());
    }
    format!("pfp0v001{:016x}", XxHash64::oneshot(0, &bytes))
}

/// (name, capacity, allocatable, available) of every resource of every
/// zone, for comparisons.
fn table(object: &Value) -> Vec<(String, String, [String; 3])> {
    let object: api::NodeResourceTopology = serde_json::from_value(object.clone()).unwrap();
    let mut out = Vec::new();
    for zone in &object.zones {
        for r in &zone.resources {
            out.push((
                zone.name.clone(),
                r.name.clone(),
                [
                    r.capacity.clone(),
                    r.allocatable.clone(),
                    r.available.clone(),
                ],
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
    let get = |c: &mut topomgr_client::http::Client| {
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
               {"name": "topologyManagerScope", "value": "container"},
               {"name": "nodeTopologyPodsFingerprint", "value": pod_fingerprint(&[])},
               {"name": "nodeTopologyPodsFingerprintMethod", "value": "with-exclusive-resources"}])
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
    let pod = r.parse::<api::Admissions>().unwrap().pods.remove(0);
    assert!(pod.admitted, "{pod:?}");
    let affinity = pod.containers[0].affinity.expect("one NUMA node");
    let node = affinity.iter().next().unwrap().get();
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
    assert_eq!(
        after["attributes"][2]["value"],
        pod_fingerprint(&[("ml", "trainer")]),
        "the pod holding exclusive CPUs is in the fingerprint"
    );
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
    let released = get(&mut c);
    assert_eq!(table(&released), idle());
    assert_eq!(
        released["attributes"], before["attributes"],
        "the fingerprint too"
    );
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

/// The NRI face admits each container as a pod of its own with the
/// Kubernetes pod's name: two containers of one pod holding exclusive
/// CPUs are one pod in the fingerprint, as the scheduler counts it.
#[test]
fn the_fingerprint_counts_a_pod_once() {
    let dir = config("nrt-once");
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let second = POD
        .replace("000000000001", "000000000009")
        .replace("cpu: \"2\"", "cpu: \"1\"");
    for pod in [POD, second.as_str()] {
        let r = c.admit(pod).unwrap();
        assert_eq!(r.status, 200, "{}", r.error_message());
        assert!(r.parse::<api::Admissions>().unwrap().pods[0].admitted);
    }
    let object: Value = c.get("/v1/noderesourcetopology").unwrap().json().unwrap();
    assert_eq!(
        object["attributes"][2]["value"],
        pod_fingerprint(&[("ml", "trainer")])
    );
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

const DONGLE_MESSAGE: &str =
    "Node didn't have enough resource: example.com/dongle, requested: 2, used: 0, capacity: 0";

fn dongle_pod(uid: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: dongle\n  namespace: t\n  uid: {uid}\nspec:\n  containers:\n  - name: app\n    resources:\n      limits:\n        cpu: \"1\"\n        memory: 1Gi\n        example.com/dongle: \"2\"\n"
    )
}

#[test]
fn extended_resources_nobody_serves_are_refused_as_the_kubelet_does() {
    let dir = config("k8s-unserved");
    let pod = dir.join("dongle.yaml");
    fs::write(&pod, dongle_pod("u-dongle")).unwrap();
    let (code, out, err) = common::topomgr(&dir, &["admit", &pod.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    let v: api::Admissions = serde_json::from_str(&out).unwrap();
    assert!(!v.pods[0].admitted);
    assert_eq!(v.pods[0].reason.as_deref(), Some("OutOfexample.com/dongle"));
    assert_eq!(v.pods[0].message.as_deref(), Some(DONGLE_MESSAGE));
    // A served extended resource is admitted as before.
    let widgets = dir.join("w.yaml");
    fs::write(&widgets, POD).unwrap();
    let (_, out, err) = common::topomgr(&dir, &["admit", &widgets.to_string_lossy()]);
    let v: api::Admissions =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    assert!(v.pods[0].admitted, "{v:?}");
}

/// `run` refuses a pod requesting an extended resource nobody serves before
/// the command starts: the marker is never written (`run` needs the real
/// cgroup hierarchy; the refusal comes before any cgroup is made).
#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn run_refuses_extended_resources_nobody_serves() {
    let dir = config("k8s-unserved-run");
    let _node = common::node_guard();
    common::real_cgroups("run_refuses_extended_resources_nobody_serves");
    let toml = dir.join("topomgr.toml");
    let text = fs::read_to_string(&toml).unwrap();
    fs::write(
        &toml,
        text.replace(
            "cgroup_root = \"cgroup\"",
            "cgroup_root = \"/sys/fs/cgroup\"",
        ),
    )
    .unwrap();
    let marker = dir.join("ran");
    let (code, _, err) = common::topomgr(
        &dir,
        &[
            "run",
            "--cpus",
            "1",
            "--resource",
            "example.com/dongle=2",
            "--",
            "touch",
            &marker.to_string_lossy(),
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "topomgr: pod rejected: OutOfexample.com/dongle: {DONGLE_MESSAGE}"
        )),
        "{err}"
    );
    assert!(!marker.exists(), "the command ran");
}

const TOO_WIDE: &str = "apiVersion: v1
kind: Pod
metadata:
  name: too-wide
  namespace: t
  uid: u-too-wide
spec:
  containers:
  - name: app
    resources:
      limits:
        example.com/widget: \"3\"
";

/// The trace of TOO_WIDE on the idle example machine: best-effort QoS, so
/// the CPU and memory providers have no preference; 3 widgets need two
/// nodes, which single-numa-node refuses.
fn too_wide_trace() -> Value {
    let pairs = [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]];
    let mut widget: Vec<Value> = pairs
        .iter()
        .map(|p| json!({"affinity": p, "preferred": true}))
        .collect();
    for wide in [
        vec![0, 1, 2],
        vec![0, 1, 3],
        vec![0, 2, 3],
        vec![1, 2, 3],
        vec![0, 1, 2, 3],
    ] {
        widget.push(json!({"affinity": wide, "preferred": false}));
    }
    json!({
        "uid": "u-too-wide", "name": "too-wide", "namespace": "t", "qos": "BestEffort",
        "policy": "single-numa-node", "scope": "container",
        "admitted": false, "reason": "TopologyAffinityError",
        "message": "Resources cannot be allocated with Topology Locality: container \"app\" needs every resource on one common NUMA node (policy single-numa-node); example.com/widget (widgets): preferred on {0-1} or {0,2} or {0,3} or {1-2} (+2 more) (requested 3; the largest NUMA node has 2 allocatable)",
        "unaligned": ["example.com/widget"],
        "steps": [{
            "container": "app",
            "hints": {"cpu": null, "memory": null, "widgets": {"example.com/widget": widget}},
            // Every provider's answer is a list, "no preference" too.
            "merge": {"rule": "NoCandidate", "lists": 3, "best_non_preferred_count": 0},
            "affinity": null, "preferred": false, "admit": false,
        }],
        // In-place resizes since the admission: none in a what-if.
        "resizes": [],
    })
}

#[test]
fn explain_as_data_cli_dry_run_and_history() {
    let dir = config("k8s-explain");
    let pod = dir.join("too-wide.yaml");
    fs::write(&pod, TOO_WIDE).unwrap();
    let (code, out, err) =
        common::topomgr(&dir, &["explain", "-o", "json", &pod.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    let cli: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(cli, json!({"pods": [too_wide_trace()]}));
    let typed: api::Explains = serde_json::from_str(&out).unwrap();
    assert_eq!(
        serde_json::to_value(&typed).unwrap(),
        cli,
        "read and written back"
    );

    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let nrt = c.get("/v1/noderesourcetopology").unwrap().json().unwrap();
    // The what-if answers the same trace and changes nothing.
    let r = c
        .post(
            "/v1/pods?dry_run=true&explain=true",
            "application/yaml",
            POD.as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let dry = r.parse::<api::Explains>().unwrap().pods.remove(0);
    assert!(dry.admitted, "{dry:?}");
    assert!(dry.unaligned.is_empty());
    assert_eq!(
        c.get("/v1/noderesourcetopology").unwrap().json().unwrap(),
        nrt
    );
    let listed: api::PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    assert!(listed.pods.is_empty());
    let r = c.get(&format!("/v1/pods/{UID}/explain")).unwrap();
    assert_eq!(r.status, 404);
    assert_eq!(r.error().unwrap().reason, "UnknownPod");
    let r = c
        .post(
            "/v1/pods?dry_run=true&explain=true",
            "application/yaml",
            TOO_WIDE.as_bytes(),
        )
        .unwrap();
    assert_eq!(r.json().unwrap(), json!({"pods": [too_wide_trace()]}));

    // Real admissions: the rejected pod stays explainable, the admitted one
    // answers the same trace as its dry run.
    let rejected: api::Admissions = c.admit(TOO_WIDE).unwrap().parse().unwrap();
    assert!(!rejected.pods[0].admitted);
    let r = c.get("/v1/pods/u-too-wide/explain").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json().unwrap(), too_wide_trace());
    assert_eq!(c.admit(POD).unwrap().status, 200);
    let r = c.get(&format!("/v1/pods/{UID}/explain")).unwrap();
    assert_eq!(r.parse::<api::Explain>().unwrap(), dry);
    assert_eq!(c.release(UID).unwrap().status, 200);
    assert_eq!(
        c.get(&format!("/v1/pods/{UID}/explain")).unwrap().status,
        404
    );

    // dry_run without explain, and unknown query keys, are refused.
    let r = c
        .post("/v1/pods?dry_run=true", "application/yaml", POD.as_bytes())
        .unwrap();
    assert_eq!(r.status, 400);
    assert_eq!(r.error().unwrap().reason, "BadRequest");
    let r = c
        .post("/v1/pods?dryrun=1", "application/yaml", POD.as_bytes())
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.error_message());
}

#[test]
fn unknown_routes_and_methods_answer_json_errors() {
    let dir = config("k8s-routes");
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let r = c.get("/v1/nope").unwrap();
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json().unwrap(),
        json!({"error": "no route GET /v1/nope; docs/api/openapi.yaml lists the API", "reason": "UnknownRoute"})
    );
    let r = c.request("PUT", "/v1/pods", None, &[]).unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(
        r.json().unwrap(),
        json!({"error": "/v1/pods does not take PUT; docs/api/openapi.yaml lists the API", "reason": "MethodNotAllowed"})
    );
    // A path segment that does not decode is a JSON 400 too.
    let r = c.get("/v1/pods/%FF").unwrap();
    assert_eq!(r.status, 400);
    let e = r.error().unwrap();
    assert_eq!(e.reason, "BadRequest");
    assert!(
        e.error.ends_with("; docs/api/openapi.yaml lists the API"),
        "{}",
        e.error
    );
}

/// The daemon takes a request body as large as the CLI takes a manifest
/// file (3 MiB, the API server's limit) and refuses a larger one with a
/// JSON 413 that says what to do, admitting nothing.
#[test]
fn request_bodies_up_to_the_manifest_limit_are_taken() {
    let dir = config("k8s-body-limit");
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let limit = topomgr_manifest::MAX_MANIFEST_BYTES as usize;
    // Past axum's default limit of 2 MiB, within 3 MiB: admitted.
    let mut big = format!("# {}\n", "x".repeat(limit - POD.len() - 16));
    big.push_str(POD);
    assert!(big.len() > 2 * 1024 * 1024 && big.len() <= limit);
    let r = c.admit(&big).unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let admitted: api::Admissions = r.parse().unwrap();
    assert!(admitted.pods[0].admitted);
    // One byte over: refused, nothing admitted.
    let r = c.admit(&"#".repeat(limit + 1)).unwrap();
    assert_eq!(r.status, 413);
    assert_eq!(
        r.error().unwrap(),
        api::ErrorBody {
            error: format!("the request body is larger than {limit} bytes (3 MiB, the Kubernetes API server's limit, as for manifest files); send fewer pods per request"),
            reason: "RequestTooLarge".to_owned(),
        }
    );
    let pods: api::PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    assert_eq!(pods.pods.len(), 1);
}

/// OpenAPI 3.0's `nullable: true` as JSON Schema: the value or null.
fn nullable_to_json_schema(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.values_mut().for_each(nullable_to_json_schema);
            if m.remove("nullable") == Some(Value::Bool(true)) {
                let inner = Value::Object(std::mem::take(m));
                m.insert("anyOf".into(), json!([{"type": "null"}, inner]));
            }
        }
        Value::Array(a) => a.iter_mut().for_each(nullable_to_json_schema),
        _ => {}
    }
}

/// `resp` read as `T` (by the client) and written back as JSON.
fn rewritten<T: serde::de::DeserializeOwned + serde::Serialize>(
    resp: &topomgr_client::http::Response,
) -> Value {
    let typed: T = resp.parse().unwrap();
    serde_json::to_value(typed).unwrap()
}

/// The schema docs/api/openapi.yaml gives the JSON answer of `method path`
/// with `status`, made strict (no undocumented fields), with the document's
/// components beside it so `$ref`s resolve.
fn api_schema(doc: &Value, method: &str, path: &str, status: u16) -> Value {
    let mut response = doc["paths"][path][method]["responses"][status.to_string()].clone();
    assert!(
        !response.is_null(),
        "openapi.yaml documents no {status} for {method} {path}"
    );
    if let Some(r) = response["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/responses/");
        response = doc["components"]["responses"][name].clone();
    }
    let schema = response["content"]["application/json"]["schema"].clone();
    assert!(
        !schema.is_null(),
        "no JSON schema for {status} of {method} {path}"
    );
    let mut root = json!({"allOf": [schema], "components": doc["components"]});
    nullable_to_json_schema(&mut root);
    strict(&mut root);
    root
}

#[test]
fn daemon_answers_match_the_openapi_document() {
    let text = fs::read_to_string(common::workspace_root().join("docs/api/openapi.yaml")).unwrap();
    let doc: Value = serde_saphyr::from_str(&text).expect("openapi.yaml parses");
    let dir = config("k8s-openapi");
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let yaml = "application/yaml";
    let admitted = c.admit(POD).unwrap();
    let rejected = c.admit(TOO_WIDE).unwrap();
    let uid_path = format!("/v1/pods/{UID}");
    let captured = vec![
        ("get", "/v1/health", c.get("/v1/health").unwrap()),
        ("get", "/v1/machine", c.get("/v1/machine").unwrap()),
        (
            "get",
            "/v1/noderesourcetopology",
            c.get("/v1/noderesourcetopology").unwrap(),
        ),
        ("post", "/v1/pods", admitted),
        ("post", "/v1/pods", rejected),
        (
            "post",
            "/v1/pods",
            c.post("/v1/pods", yaml, b"kind: Nope").unwrap(),
        ),
        ("get", "/v1/pods", c.get("/v1/pods").unwrap()),
        ("get", "/v1/pods/{uid}", c.get(&uid_path).unwrap()),
        ("get", "/v1/pods/{uid}", c.get("/v1/pods/nope").unwrap()),
        (
            "get",
            "/v1/pods/{uid}/explain",
            c.get(&format!("{uid_path}/explain")).unwrap(),
        ),
        (
            "get",
            "/v1/pods/{uid}/explain",
            c.get("/v1/pods/u-too-wide/explain").unwrap(),
        ),
        (
            "get",
            "/v1/pods/{uid}/explain",
            c.get("/v1/pods/nope/explain").unwrap(),
        ),
        ("delete", "/v1/pods/{uid}", c.delete(&uid_path).unwrap()),
        ("delete", "/v1/pods/{uid}", c.delete(&uid_path).unwrap()),
    ];
    let mut statuses = Vec::new();
    for (method, path, resp) in &captured {
        let body = resp.json().unwrap();
        let schema = api_schema(&doc, method, path, resp.status);
        assert_eq!(
            violations_of(&schema, &body),
            Vec::<String>::new(),
            "{method} {path} {}: {body:#}",
            resp.status
        );
        // Its type reads it and writes the same JSON back.
        let written = match (*method, *path) {
            _ if resp.status >= 400 => rewritten::<api::ErrorBody>(resp),
            ("get", "/v1/health") => rewritten::<api::Health>(resp),
            ("get", "/v1/machine") => rewritten::<api::Machine>(resp),
            ("get", "/v1/noderesourcetopology") => rewritten::<api::NodeResourceTopology>(resp),
            ("post", "/v1/pods") => rewritten::<api::Admissions>(resp),
            ("get", "/v1/pods") => rewritten::<api::PodList>(resp),
            ("get" | "delete", "/v1/pods/{uid}") => rewritten::<api::Admission>(resp),
            ("get", "/v1/pods/{uid}/explain") => rewritten::<api::Explain>(resp),
            other => panic!("no type for {other:?}"),
        };
        assert_eq!(written, body, "{method} {path} {}", resp.status);
        statuses.push(resp.status);
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 400, 200, 200, 404, 200, 200, 404, 200, 404]
    );
    // The dry-run explain answer is an array of Explain objects.
    let dry = c
        .post("/v1/pods?dry_run=true&explain=true", yaml, POD.as_bytes())
        .unwrap();
    assert_eq!(rewritten::<api::Explains>(&dry), dry.json().unwrap());
    let dry = dry.json().unwrap();
    let explain = json!({"allOf": [{"$ref": "#/components/schemas/Explain"}], "components": doc["components"]});
    let mut explain = explain;
    nullable_to_json_schema(&mut explain);
    strict(&mut explain);
    assert_eq!(
        violations_of(&explain, &dry["pods"][0]),
        Vec::<String>::new()
    );
    // A schema that could fail: an undocumented field is caught.
    let mut health = c.get("/v1/health").unwrap().json().unwrap();
    health["surprise"] = json!(1);
    assert_eq!(
        violations_of(&api_schema(&doc, "get", "/v1/health", 200), &health).len(),
        1
    );
    // Every metric the daemon serves is in the document's list.
    let listed = doc["paths"]["/metrics"]["get"]["description"]
        .as_str()
        .unwrap()
        .to_owned();
    let metrics = c.get("/metrics").unwrap();
    let served: Vec<&str> = std::str::from_utf8(&metrics.body)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(served.len() > 20, "{served:?}");
    let missing: Vec<&&str> = served.iter().filter(|m| !listed.contains(**m)).collect();
    assert!(
        missing.is_empty(),
        "not in openapi.yaml's /metrics list: {missing:?}"
    );
}

/// Requests a [`FakeApiServer`] got: (method, path, body).
type Requests = std::sync::Arc<std::sync::Mutex<Vec<(String, String, Vec<u8>)>>>;

/// A stand-in for the API server over plain HTTP: records every request
/// (method, path, body) and answers each with `status` and `{}`.
struct FakeApiServer {
    port: u16,
    requests: Requests,
}

impl FakeApiServer {
    fn start(status: u16) -> FakeApiServer {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Requests::default();
        let seen = requests.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    let mut conn = conn;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let mut parts = line.split_whitespace();
                        let method = parts.next().unwrap_or_default().to_owned();
                        let path = parts.next().unwrap_or_default().to_owned();
                        let mut length = 0usize;
                        loop {
                            let mut h = String::new();
                            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                                return;
                            }
                            if h == "\r\n" {
                                break;
                            }
                            if let Some((k, v)) = h.split_once(':') {
                                if k.eq_ignore_ascii_case("content-length") {
                                    length = v.trim().parse().unwrap();
                                }
                            }
                        }
                        let mut body = vec![0; length];
                        reader.read_exact(&mut body).unwrap();
                        seen.lock().unwrap().push((method, path, body));
                        let answer = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}"
                        );
                        if conn.write_all(answer.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        FakeApiServer { port, requests }
    }

    fn kubeconfig(&self, dir: &Path) {
        fs::write(
            dir.join("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{}\nusers:\n- name: u\n  user:\n    token: secret\ncontexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n",
                self.port
            ),
        )
        .unwrap();
        let mut toml = fs::read_to_string(dir.join("topomgr.toml")).unwrap();
        toml.push_str("[kubernetes]\nenabled = true\nkubeconfig = \"kubeconfig\"\nnrt_min_interval_ms = 100\nnrt_retry_max_ms = 500\n");
        fs::write(dir.join("topomgr.toml"), toml).unwrap();
    }

    /// The bodies of the applies so far.
    fn applies(&self) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, p, _)| {
                m == "PATCH"
                    && p == "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-1?fieldManager=topomgr&force=true"
            })
            .map(|(_, _, b)| serde_json::from_slice(b).unwrap())
            .collect()
    }
}

/// Polls `f` for up to `limit`.
fn within<T>(limit: std::time::Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `[kubernetes]`: the daemon applies its object at start and again within
/// a second of an admission, with the pod in the fingerprint; the object
/// is the one it serves.
#[test]
fn daemon_pushes_the_object_after_each_change() {
    let api = FakeApiServer::start(200);
    let dir = config("nrt-push");
    api.kubeconfig(&dir);
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let second = std::time::Duration::from_secs(1);
    let first = within(second * 5, || api.applies().first().cloned()).expect("applied at start");
    assert_eq!(first["attributes"][2]["value"], pod_fingerprint(&[]));
    assert_eq!(first["kind"], "NodeResourceTopology");
    let r = c.admit(POD).unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let after = within(second, || {
        api.applies()
            .into_iter()
            .find(|a| a["attributes"][2]["value"] == pod_fingerprint(&[("ml", "trainer")]))
    })
    .expect("the admission is pushed within 1 s");
    let served = c.get("/v1/noderesourcetopology").unwrap().json().unwrap();
    assert_eq!(after, served);
    // Besides the applies, one read of the Node (the object's owner; this
    // server's `{}` has no uid, so the object goes without an owner and
    // the Node is read again only after OWNER_RETRY, 30 s).
    let requests = api.requests.lock().unwrap().clone();
    let node_reads = requests
        .iter()
        .filter(|(m, p, _)| m == "GET" && p == "/api/v1/nodes/worker-1")
        .count();
    assert_eq!(node_reads, 1, "{requests:?}");
    assert!(
        requests
            .iter()
            .all(|(m, p, _)| m == "PATCH" || (m == "GET" && p == "/api/v1/nodes/worker-1")),
        "only applies and the Node's read: {requests:?}"
    );
}

/// An API server without the CRD (404 on the apply) is a health note, not
/// a failure of the daemon; admissions go on.
#[test]
fn a_missing_crd_is_a_health_note() {
    let api = FakeApiServer::start(404);
    let dir = config("nrt-nocrd");
    api.kubeconfig(&dir);
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let note = within(std::time::Duration::from_secs(5), || {
        let h: Value = c.get("/v1/health").unwrap().json().unwrap();
        h["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .find(|n| n.contains("install the NodeResourceTopology CRD"))
            .map(str::to_owned)
    });
    assert!(note.is_some(), "no note");
    assert_eq!(c.admit(POD).unwrap().status, 200);
}

/// A kubeconfig that gives no usable access stops `serve` at start with
/// a message naming it.
#[test]
fn a_bad_kubeconfig_stops_serve() {
    let dir = config("nrt-badkube");
    fs::write(dir.join("kubeconfig"), "current-context: nowhere\n").unwrap();
    let mut toml = fs::read_to_string(dir.join("topomgr.toml")).unwrap();
    toml.push_str("[kubernetes]\nenabled = true\nkubeconfig = \"kubeconfig\"\n");
    fs::write(dir.join("topomgr.toml"), toml).unwrap();
    let (code, _, err) = common::topomgr(
        &dir,
        &["serve", "--socket", &dir.join("t.sock").to_string_lossy()],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("current-context \"nowhere\" is not among its contexts"),
        "{err}"
    );
}
