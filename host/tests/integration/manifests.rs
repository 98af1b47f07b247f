//! Pod manifests -> PodView: the shipped example pods, real `kubectl` output
//! (YAML and JSON, single pods and Lists), real manifests from the Kubernetes
//! docs (pod-level resources) and the SR-IOV device plugin's docs
//! (`tests/fixtures/manifests/`), error messages, the input size limit and
//! the YAML budget, and a no-panic loop over mangled manifests and random bytes.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use topomgr_manifest::{
    parse_manifests, parse_pods, read_manifests, read_pods, ManifestError, Pod, PodResources,
    MAX_MANIFEST_BYTES,
};
use topomgr_sdk::{ContainerView, PodView, QosClass, ResourceList};

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

fn example(name: &str) -> PathBuf {
    common::workspace_root().join("examples/pods").join(name)
}

fn read_example(name: &str) -> Vec<PodView> {
    let path = example(name).to_string_lossy().into_owned();
    match read_pods(&[path]) {
        Ok(pods) => pods,
        Err(e) => panic!("{name}: {e}"),
    }
}

fn list(entries: &[(&str, u64)]) -> ResourceList {
    entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn container(name: &str, requests: &[(&str, u64)], limits: &[(&str, u64)]) -> ContainerView {
    ContainerView::new(name)
        .with_requests(list(requests))
        .with_limits(list(limits))
}

fn pod(uid: &str, name: &str, namespace: &str, qos: QosClass) -> PodView {
    PodView::new(uid, name, namespace, qos)
}

fn parse_err(text: &str, source: &str) -> String {
    match parse_pods(text, source) {
        Ok(p) => panic!("expected an error, got {p:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn example_guaranteed_2cpu() {
    let both = [("cpu", 2000), ("example.com/widget", 1), ("memory", GI)];
    let mut want = pod(
        "6f1c2a3e-0001-4c8e-9a51-000000000001",
        "guaranteed-2cpu",
        "default",
        QosClass::Guaranteed,
    );
    want.containers = vec![container("app", &both, &both)];
    assert_eq!(read_example("guaranteed-2cpu.yaml"), vec![want]);
}

#[test]
fn example_guaranteed_widgets() {
    let both = [("cpu", 4000), ("example.com/widget", 2), ("memory", 4 * GI)];
    let mut want = pod(
        "6f1c2a3e-0002-4c8e-9a51-000000000002",
        "guaranteed-widgets",
        "ml",
        QosClass::Guaranteed,
    );
    want.containers = vec![container("trainer", &both, &both)];
    assert_eq!(read_example("guaranteed-widgets.yaml"), vec![want]);
}

#[test]
fn example_burstable() {
    let mut want = pod(
        "6f1c2a3e-0003-4c8e-9a51-000000000003",
        "burstable",
        "default",
        QosClass::Burstable,
    );
    want.containers = vec![container(
        "web",
        &[("cpu", 250), ("memory", 256 * MI)],
        &[("cpu", 1000), ("memory", 512 * MI)],
    )];
    assert_eq!(read_example("burstable.yaml"), vec![want]);
}

#[test]
fn example_besteffort() {
    let mut want = pod(
        "6f1c2a3e-0004-4c8e-9a51-000000000004",
        "besteffort",
        "default",
        QosClass::BestEffort,
    );
    want.containers = vec![container("batch", &[], &[])];
    assert_eq!(read_example("besteffort.yaml"), vec![want]);
}

#[test]
fn example_init_and_sidecar() {
    let init = [("cpu", 1000), ("memory", 512 * MI)];
    let sidecar = [("cpu", 1000), ("memory", 128 * MI)];
    let app = [("cpu", 2000), ("example.com/widget", 1), ("memory", 2 * GI)];
    let mut want = pod(
        "6f1c2a3e-0005-4c8e-9a51-000000000005",
        "init-and-sidecar",
        "default",
        QosClass::Guaranteed,
    );
    want.init_containers = vec![
        container("fetch-model", &init, &init),
        container("log-shipper", &sidecar, &sidecar).with_sidecar(true),
    ];
    want.containers = vec![container("server", &app, &app)];
    let got = read_example("init-and-sidecar.yaml");
    assert_eq!(got, vec![want]);
    // The pod-scope arithmetic the example's comment promises.
    assert_eq!(got[0].effective_request("cpu"), 3000);
    assert_eq!(got[0].effective_request("example.com/widget"), 1);
    assert_eq!(got[0].effective_request("memory"), 2 * GI + 128 * MI);
}

#[test]
fn example_two_pods() {
    let first_res = [
        ("cpu", 1000),
        ("example.com/widget", 1),
        ("memory", 256 * MI),
    ];
    let mut first = pod(
        "6f1c2a3e-0006-4c8e-9a51-000000000006",
        "first",
        "default",
        QosClass::Guaranteed,
    );
    first.containers = vec![container("app", &first_res, &first_res)];
    let mut second = pod(
        "6f1c2a3e-0007-4c8e-9a51-000000000007",
        "second",
        "default",
        QosClass::Burstable,
    );
    second.containers = vec![container("app", &[("cpu", 500), ("memory", 128 * MI)], &[])];
    assert_eq!(read_example("two-pods.yaml"), vec![first, second]);
}

#[test]
fn every_example_has_an_explicit_unique_uid() {
    let dir = example("");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("examples/pods is readable")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "besteffort.yaml",
            "burstable.yaml",
            "guaranteed-2cpu.yaml",
            "guaranteed-widgets.yaml",
            "init-and-sidecar.yaml",
            "too-wide.yaml",
            "two-pods.yaml"
        ]
    );
    let paths: Vec<String> = names
        .iter()
        .map(|n| dir.join(n).to_string_lossy().into_owned())
        .collect();
    // read_pods checks uids are unique across all files.
    let pods = read_pods(&paths).expect("all examples read together");
    assert_eq!(pods.len(), 8);
    assert!(pods.iter().all(|p| p.uid.starts_with("6f1c2a3e-")));
}

/// What `kubectl get pod web-0 -o yaml` prints for a running pod.
const KUBECTL_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubectl.kubernetes.io/restartedAt: "2024-05-01T10:00:00Z"
  creationTimestamp: "2024-05-01T10:00:03Z"
  generateName: web-
  labels:
    app: web
    apps.kubernetes.io/pod-index: "0"
    controller-revision-hash: web-7d9f8c6b5
    statefulset.kubernetes.io/pod-name: web-0
  managedFields:
  - apiVersion: v1
    fieldsType: FieldsV1
    fieldsV1:
      f:metadata:
        f:generateName: {}
        f:labels:
          .: {}
          f:app: {}
      f:spec:
        f:containers:
          k:{"name":"nginx"}:
            .: {}
            f:image: {}
            f:resources:
              .: {}
              f:limits:
                .: {}
                f:cpu: {}
                f:memory: {}
    manager: kube-controller-manager
    operation: Update
    time: "2024-05-01T10:00:03Z"
  name: web-0
  namespace: shop
  ownerReferences:
  - apiVersion: apps/v1
    blockOwnerDeletion: true
    controller: true
    kind: StatefulSet
    name: web
    uid: 0b1d6a8e-9f57-4f0e-8d6e-1c1f1f1f1f1f
  resourceVersion: "184467"
  uid: 3c9d4a52-5d2e-4e0f-a7b1-8f1e2d3c4b5a
spec:
  containers:
  - image: nginx:1.27
    imagePullPolicy: IfNotPresent
    name: nginx
    ports:
    - containerPort: 80
      name: web
      protocol: TCP
    resources:
      limits:
        cpu: "2"
        memory: 512Mi
      requests:
        cpu: "2"
        memory: 512Mi
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
    volumeMounts:
    - mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      name: kube-api-access-x7k2p
      readOnly: true
  dnsPolicy: ClusterFirst
  enableServiceLinks: true
  hostname: web-0
  nodeName: node-a
  preemptionPolicy: PreemptLowerPriority
  priority: 0
  restartPolicy: Always
  schedulerName: default-scheduler
  securityContext: {}
  serviceAccount: default
  serviceAccountName: default
  terminationGracePeriodSeconds: 30
  tolerations:
  - effect: NoExecute
    key: node.kubernetes.io/not-ready
    operator: Exists
    tolerationSeconds: 300
  volumes:
  - name: kube-api-access-x7k2p
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken:
          expirationSeconds: 3607
          path: token
status:
  conditions:
  - lastProbeTime: null
    lastTransitionTime: "2024-05-01T10:00:03Z"
    status: "True"
    type: Ready
  containerStatuses:
  - containerID: containerd://4b8f0c
    image: docker.io/library/nginx:1.27
    lastState: {}
    name: nginx
    ready: true
    restartCount: 0
    started: true
    state:
      running:
        startedAt: "2024-05-01T10:00:05Z"
  hostIP: 10.0.0.11
  phase: Running
  podIP: 10.244.1.17
  qosClass: Guaranteed
  startTime: "2024-05-01T10:00:03Z"
"#;

#[test]
fn kubectl_get_pod_yaml() {
    let both = [("cpu", 2000), ("memory", 512 * MI)];
    let mut want = pod(
        "3c9d4a52-5d2e-4e0f-a7b1-8f1e2d3c4b5a",
        "web-0",
        "shop",
        QosClass::Guaranteed,
    );
    want.containers = vec![container("nginx", &both, &both)];
    assert_eq!(
        parse_pods(KUBECTL_POD, "web-0.yaml").expect("parses"),
        vec![want]
    );
}

#[test]
fn kubectl_get_pods_list() {
    // `kubectl get pods -o yaml`: a List whose items are full pods.
    let mut text = String::from("apiVersion: v1\nitems:\n");
    for (i, line) in KUBECTL_POD.lines().enumerate() {
        let prefix = if i == 0 { "- " } else { "  " };
        text.push_str(prefix);
        text.push_str(line);
        text.push('\n');
    }
    text.push_str(concat!(
        "- apiVersion: v1\n",
        "  kind: Pod\n",
        "  metadata:\n",
        "    name: job-x\n",
        "    namespace: batch\n",
        "    uid: 11111111-2222-3333-4444-555555555555\n",
        "  spec:\n",
        "    containers:\n",
        "    - name: worker\n",
        "      resources:\n",
        "        requests:\n",
        "          memory: 100M\n",
        "  status:\n",
        "    qosClass: Burstable\n",
        "kind: List\n",
        "metadata:\n",
        "  resourceVersion: \"\"\n",
    ));
    let pods = parse_pods(&text, "pods.yaml").expect("parses");
    let summary: Vec<(&str, &str, QosClass)> = pods
        .iter()
        .map(|p| (p.uid.as_str(), p.name.as_str(), p.qos))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "3c9d4a52-5d2e-4e0f-a7b1-8f1e2d3c4b5a",
                "web-0",
                QosClass::Guaranteed
            ),
            (
                "11111111-2222-3333-4444-555555555555",
                "job-x",
                QosClass::Burstable
            ),
        ]
    );
    assert_eq!(
        pods[1].containers[0].requests,
        list(&[("memory", 100_000_000)])
    );
}

#[test]
fn json_pod_and_pod_list() {
    // `kubectl get pod -o json`, with quantities written as JSON numbers too.
    let json = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u-json", "managedFields": []},
        "spec": {
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": 0.25, "memory": "64Mi"}}}
            ],
            "containers": [
                {"name": "main", "resources": {
                    "limits": {"cpu": 3, "memory": "1Gi", "nvidia.com/gpu": 1},
                    "requests": {"cpu": "1500m"}}}
            ]
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"}
    });
    let text = serde_json::to_string_pretty(&json).expect("serialises");
    let mut want = pod("u-json", "j", "ns", QosClass::Burstable);
    want.init_containers =
        vec![container("proxy", &[("cpu", 250), ("memory", 64 * MI)], &[]).with_sidecar(true)];
    want.containers = vec![container(
        "main",
        &[("cpu", 1500), ("memory", GI), ("nvidia.com/gpu", 1)],
        &[("cpu", 3000), ("memory", GI), ("nvidia.com/gpu", 1)],
    )];
    assert_eq!(
        parse_pods(&text, "pod.json").expect("parses"),
        vec![want.clone()]
    );

    // The API server's PodList: items carry no kind.
    let mut item = json.clone();
    if let Some(obj) = item.as_object_mut() {
        obj.remove("kind");
        obj.remove("apiVersion");
    }
    let pod_list = serde_json::json!({"kind": "PodList", "apiVersion": "v1", "items": [item]});
    let compact = serde_json::to_string(&pod_list).expect("serialises");
    assert_eq!(
        parse_pods(&compact, "list.json").expect("parses"),
        vec![want]
    );
}

#[test]
fn qos_matches_status_qos_class() {
    // Manifests whose status.qosClass was set by a real API server.
    let cases: &[(&str, QosClass)] = &[
        // Guaranteed through limit -> request defaulting, init container too.
        (
            "spec: {initContainers: [{name: i, resources: {limits: {cpu: 100m, memory: 10Mi}}}], containers: [{name: a, resources: {limits: {cpu: 1, memory: 1Gi}}}]}",
            QosClass::Guaranteed,
        ),
        // An init container without limits makes the pod Burstable.
        (
            "spec: {initContainers: [{name: i, resources: {requests: {cpu: 100m}}}], containers: [{name: a, resources: {limits: {cpu: 1, memory: 1Gi}}}]}",
            QosClass::Burstable,
        ),
        // Two containers: one with limits, one without anything.
        (
            "spec: {containers: [{name: a, resources: {limits: {cpu: 1, memory: 1Gi}}}, {name: b}]}",
            QosClass::Burstable,
        ),
        // Device resources alone do not make a pod Burstable.
        (
            "spec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: 1}}}]}",
            QosClass::BestEffort,
        ),
        // Ephemeral storage does not count either.
        (
            "spec: {containers: [{name: a, resources: {requests: {ephemeral-storage: 1Gi}}}]}",
            QosClass::BestEffort,
        ),
        // 1000m == 1 and 1Gi == 1024Mi compare by value.
        (
            "spec: {containers: [{name: a, resources: {requests: {cpu: 1000m, memory: 1024Mi}, limits: {cpu: 1, memory: 1Gi}}}]}",
            QosClass::Guaranteed,
        ),
    ];
    for (spec, want) in cases {
        let text = format!("kind: Pod\nmetadata: {{name: p}}\n{spec}\n");
        let pods = parse_pods(&text, "q.yaml").expect("parses");
        assert_eq!(pods[0].qos, *want, "{spec}");
    }
}

#[test]
fn error_messages() {
    let cases: &[(&str, &str)] = &[
        (
            "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\nkind: Pod\nmetadata: {name: b}\nspec:\n  containers:\n  - name: c\n    resources:\n      requests:\n        cpu: 1.5.3\n",
            "pods.yaml: document 2: spec.containers[0].resources.requests.cpu: invalid quantity \"1.5.3\"",
        ),
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
            "pods.yaml: document 1: kind: \"Deployment\" is not supported (expected \"Pod\", or a \"List\" or \"PodList\" of pods)",
        ),
        (
            "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}, {name: c}]}\n",
            "pods.yaml: document 1: spec.containers[1].name: duplicate container name \"c\" (also used by spec.containers[0])",
        ),
        ("", "pods.yaml: no Kubernetes objects found (the input is empty)"),
        ("\n# nothing here\n", "pods.yaml: no Kubernetes objects found (the input is empty)"),
        (
            "kind: Pod\nmetadata: {name: a, uid: x}\nspec: {containers: [{name: c}]}\n---\nkind: Pod\nmetadata: {name: b, uid: x}\nspec: {containers: [{name: c}]}\n",
            "pods.yaml: document 2: metadata.uid: duplicate pod uid \"x\" (pod default/a in pods.yaml: document 1 has it too)",
        ),
        (
            "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, resources: {limits: {memory: 1Gb}}}]}\n",
            "pods.yaml: document 1: spec.containers[0].resources.limits.memory: invalid quantity \"1Gb\"",
        ),
        (
            "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, resources: {limits: {memory: 1K}}}]}\n",
            "pods.yaml: document 1: spec.containers[0].resources.limits.memory: invalid quantity \"1K\": unknown suffix \"K\" (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)",
        ),
        (
            "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}, \"spec\": {\"containers\": [{\"name\": \"c\", \"resources\": {\"requests\": {\"cpu\": -1}}}]}}",
            "pods.yaml: document 1: spec.containers[0].resources.requests.cpu: invalid quantity \"-1\": must not be negative",
        ),
        (
            "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}",
            "pods.yaml: invalid JSON: EOF while parsing an object at line 1 column 41",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(parse_err(text, "pods.yaml"), *want, "input:\n{text}");
    }
    assert_eq!(
        parse_err("", "<stdin>"),
        "<stdin>: no Kubernetes objects found (the input is empty)"
    );
}

/// A scratch directory of this test binary, removed and recreated.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("topomgr-manifests-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn read_pods_across_files() {
    let dir = scratch_dir("files");
    let a = dir.join("a.yaml");
    let b = dir.join("b.json");
    std::fs::write(
        &a,
        "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n",
    )
    .expect("write");
    std::fs::write(
        &b,
        "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"b\", \"uid\": \"ub\"}, \"spec\": {\"containers\": [{\"name\": \"c\"}]}}",
    )
    .expect("write");
    let a = a.to_string_lossy().into_owned();
    let b = b.to_string_lossy().into_owned();

    let pods = read_pods(&[a.clone(), b.clone()]).expect("reads");
    let uids: Vec<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(uids, vec!["default/a", "ub"]);

    // The same pod twice, across inputs.
    let err = read_pods(&[b.clone(), a.clone(), b.clone()])
        .expect_err("duplicate uid")
        .to_string();
    assert_eq!(
        err,
        format!("{b}: document 1: metadata.uid: duplicate pod uid \"ub\" (pod default/b in {b}: document 1 has it too)")
    );

    // An unreadable file is named.
    let missing = dir.join("missing.yaml").to_string_lossy().into_owned();
    let err = read_pods(&[a.clone(), missing.clone()]).expect_err("missing file");
    assert!(matches!(&err, ManifestError::Read { path, .. } if *path == missing));
    assert!(
        err.to_string()
            .starts_with(&format!("{missing}: cannot read: ")),
        "{err}"
    );

    // Not UTF-8.
    let binary = dir.join("binary.yaml");
    std::fs::write(&binary, b"kind: Pod\n\xff\xfe\n").expect("write");
    let binary = binary.to_string_lossy().into_owned();
    assert_eq!(
        read_pods(std::slice::from_ref(&binary))
            .expect_err("not utf-8")
            .to_string(),
        format!("{binary}: not UTF-8 text (invalid byte at offset 10)")
    );

    // `-` at most once: refused before anything is read.
    assert_eq!(
        read_pods(&[a.clone(), "-".to_string(), "-".to_string()])
            .expect_err("stdin twice")
            .to_string(),
        "\"-\" (standard input) is given more than once"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example manifests and two more (kubectl's output, a JSON pod with
/// a number quantity): the seeds the mangling starts from.
fn seeds() -> &'static [String] {
    static SEEDS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(read_seeds)
}

fn read_seeds() -> Vec<String> {
    let mut seeds: Vec<String> = [
        "guaranteed-2cpu.yaml",
        "guaranteed-widgets.yaml",
        "burstable.yaml",
        "besteffort.yaml",
        "init-and-sidecar.yaml",
        "two-pods.yaml",
    ]
    .iter()
    .map(|n| std::fs::read_to_string(example(n)).expect("example readable"))
    .collect();
    seeds.push(KUBECTL_POD.to_string());
    seeds.push(
        "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"j\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"cpu\":0.5,\"memory\":\"1Gi\"}}}]}}"
            .to_string(),
    );
    seeds
}

/// YAML's and JSON's punctuation, digits and quantity suffixes.
const ALPHABET: &[u8] = b" \n\t-:{}[],.\"'#&*!|>%@`0123456789eEkKmMGiTPnu+abcxyz\\";

/// Parse `text`: it may be refused, never with a panic, and every error
/// names the source. Whether it parsed.
fn parses(text: &str) -> bool {
    match parse_pods(text, "fuzz.yaml") {
        Ok(_) => true,
        Err(e) => {
            assert!(e.to_string().starts_with("fuzz.yaml: "), "{e}");
            false
        }
    }
}

#[test]
fn never_panics_on_truncated_or_explosive_input() {
    let mut outcomes = BTreeMap::from([(true, 0u32), (false, 0u32)]);
    let mut record = |text: &str| *outcomes.entry(parses(text)).or_default() += 1;
    for seed in seeds() {
        // Every truncation at a char boundary.
        for (i, _) in seed.char_indices() {
            record(&seed[..i]);
        }
        record(seed);
    }
    // Deep nesting and alias expansion stay bounded errors.
    record(&"[".repeat(10_000));
    record(&format!("{}{}", "- ".repeat(5_000), "x"));
    record("a: &a [1,2,3]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d]\n");
    assert!(outcomes[&true] > 0 && outcomes[&false] > 0, "{outcomes:?}");
}

/// One edit of a seed: where (a fraction of its length), which byte of
/// [`ALPHABET`], and replace (0), insert (1) or delete (2).
type Edit = (f64, usize, u8);

fn mangle(seed: &str, edits: &[Edit]) -> String {
    let mut bytes = seed.as_bytes().to_vec();
    for &(at, c, op) in edits {
        let at = (at * bytes.len() as f64) as usize;
        let c = ALPHABET[c % ALPHABET.len()];
        match op {
            0 if at < bytes.len() => bytes[at] = c,
            1 => bytes.insert(at.min(bytes.len()), c),
            _ if at < bytes.len() => {
                bytes.remove(at);
            }
            _ => bytes.push(c),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3_000))]

    /// Seeds with up to four random byte edits.
    #[test]
    fn never_panics_on_mangled_manifests(
        seed in 0usize..8,
        edits in proptest::collection::vec((0.0f64..1.0, 0usize..ALPHABET.len(), 0u8..3), 1..=4),
    ) {
        parses(&mangle(&seeds()[seed], &edits));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1_000))]

    /// Random strings over the YAML-ish alphabet.
    #[test]
    fn never_panics_on_yaml_like_noise(
        bytes in proptest::collection::vec(proptest::sample::select(ALPHABET), 0..200),
    ) {
        parses(&String::from_utf8_lossy(&bytes));
    }

    /// Random bytes.
    #[test]
    fn never_panics_on_random_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
        parses(&String::from_utf8_lossy(&bytes));
    }
}

fn fixture(rel: &str) -> String {
    common::workspace_root()
        .join("tests/fixtures/manifests")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

fn read_fixture(rel: &str) -> Vec<Pod> {
    read_manifests(&[fixture(rel)]).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn resources(requests: &[(&str, u64)], limits: &[(&str, u64)]) -> PodResources {
    PodResources::new(list(requests), list(limits))
}

/// The Kubernetes docs' pod-level resources examples: the QoS class the API
/// server computes (from `spec.resources` when present), the defaulted
/// pod-level values and the pod's effective requests and limits. Six of them
/// got the wrong class with the container-level rule.
#[test]
fn kubernetes_docs_pod_level_resources() {
    // The pod-level-resource-managers examples' budget: 4 CPUs and 4Gi, requests = limits.
    let budget_4cpu_4gi = resources(
        &[("cpu", 4000), ("memory", 4 * GI)],
        &[("cpu", 4000), ("memory", 4 * GI)],
    );
    let cases: &[(&str, QosClass, Option<PodResources>, PodResources)] = &[
        (
            "pod-level-resources.yaml",
            QosClass::Burstable,
            Some(resources(
                &[("cpu", 1000), ("memory", 100 * MI)],
                &[("cpu", 1000), ("memory", 200 * MI)],
            )),
            resources(
                &[("cpu", 1000), ("memory", 100 * MI)],
                &[("cpu", 1000), ("memory", 200 * MI)],
            ),
        ),
        (
            "pod-level-cpu-request-limit.yaml",
            QosClass::Burstable,
            Some(resources(&[("cpu", 500)], &[("cpu", 1000)])),
            resources(&[("cpu", 500)], &[("cpu", 1000)]),
        ),
        (
            "pod-level-memory-request-limit.yaml",
            QosClass::Burstable,
            Some(resources(&[("memory", 100 * MI)], &[("memory", 200 * MI)])),
            resources(&[("memory", 100 * MI)], &[("memory", 200 * MI)]),
        ),
        (
            "pod-level-resize.yaml",
            QosClass::Guaranteed,
            Some(resources(
                &[("cpu", 200), ("memory", 200 * MI)],
                &[("cpu", 200), ("memory", 200 * MI)],
            )),
            resources(
                &[("cpu", 200), ("memory", 200 * MI)],
                &[("cpu", 200), ("memory", 200 * MI)],
            ),
        ),
        (
            // pids is not a pod-level resource: no requests defaulted, BestEffort.
            "pod-level-pid-limit.yaml",
            QosClass::BestEffort,
            Some(resources(&[], &[("pids", 2048)])),
            resources(&[], &[]),
        ),
        (
            "pod-level-resource-managers-container-scope-mixed.yaml",
            QosClass::Guaranteed,
            Some(budget_4cpu_4gi.clone()),
            budget_4cpu_4gi.clone(),
        ),
        (
            "pod-level-resource-managers-empty-shared-pool.yaml",
            QosClass::Guaranteed,
            Some(budget_4cpu_4gi.clone()),
            budget_4cpu_4gi.clone(),
        ),
        (
            "pod-level-resource-managers-pod-scope-mixed.yaml",
            QosClass::Guaranteed,
            Some(budget_4cpu_4gi.clone()),
            budget_4cpu_4gi.clone(),
        ),
    ];
    for (file, qos, pod_level, effective) in cases {
        let pods = read_fixture(&format!("k8s-docs/{file}"));
        assert_eq!(pods.len(), 1, "{file}");
        assert_eq!(pods[0].view.qos, *qos, "{file}");
        assert_eq!(&pods[0].view.resources, pod_level, "{file}");
        assert_eq!(&pods[0].effective, effective, "{file}");
    }
    // The containers keep their own values (what the kubelet's resource
    // managers partition the pod's budget with).
    let mixed = read_fixture("k8s-docs/pod-level-resource-managers-pod-scope-mixed.yaml");
    let v = &mixed[0].view;
    assert_eq!(
        v.init_containers
            .iter()
            .map(|c| (c.name.as_str(), c.sidecar, c.requests.len()))
            .collect::<Vec<_>>(),
        vec![("metrics-sidecar", true, 0), ("logging-sidecar", true, 0)]
    );
    assert_eq!(
        v.containers[0].requests,
        list(&[("cpu", 2000), ("memory", 2 * GI)])
    );
}

/// Pod-level limits without requests: the API server defaults the requests
/// (cpu and memory from the containers' aggregate, the rest from the
/// limits); hugepage limits come from the containers.
#[test]
fn pod_level_defaulting_and_effective_values() {
    let text = "kind: Pod\nmetadata: {name: p}\nspec:\n  resources: {limits: {cpu: 4, memory: 4Gi}}\n  initContainers:\n  - {name: side, restartPolicy: Always, resources: {requests: {cpu: 1}}}\n  containers:\n  - {name: a, resources: {requests: {cpu: 500m, hugepages-2Mi: 4Mi}, limits: {hugepages-2Mi: 4Mi}}}\n  - {name: b}\n";
    let pods = parse_manifests(text, "p.yaml").expect("parses");
    let p = &pods[0];
    assert_eq!(
        p.view.resources,
        Some(resources(
            &[("cpu", 1500), ("hugepages-2Mi", 4 * MI), ("memory", 4 * GI)],
            &[("cpu", 4000), ("hugepages-2Mi", 4 * MI), ("memory", 4 * GI)]
        ))
    );
    assert_eq!(p.view.qos, QosClass::Burstable);
    assert_eq!(
        p.effective,
        resources(
            &[("cpu", 1500), ("hugepages-2Mi", 4 * MI), ("memory", 4 * GI)],
            &[("cpu", 4000), ("hugepages-2Mi", 4 * MI), ("memory", 4 * GI)]
        )
    );
    // Without spec.resources the effective values are the containers' aggregate.
    let text = "kind: Pod\nmetadata: {name: q}\nspec:\n  initContainers: [{name: i, resources: {limits: {cpu: 3, memory: 1Gi}}}]\n  containers: [{name: a, resources: {limits: {cpu: 1, memory: 2Gi}}}]\n";
    let p = &parse_manifests(text, "q.yaml").expect("parses")[0];
    assert_eq!(p.view.resources, None);
    assert_eq!(p.view.qos, QosClass::Guaranteed);
    assert_eq!(
        p.effective,
        resources(
            &[("cpu", 3000), ("memory", 2 * GI)],
            &[("cpu", 3000), ("memory", 2 * GI)]
        )
    );
    // A pod-level request above its limit is refused like a container's.
    assert_eq!(
        parse_err("kind: Pod\nmetadata: {name: p}\nspec: {resources: {requests: {cpu: 2}, limits: {cpu: 1}}, containers: [{name: a}]}\n", "p.yaml"),
        "p.yaml: document 1: spec.resources.requests.cpu: request \"2\" is larger than the limit \"1\""
    );
}

/// The SR-IOV network device plugin's documented pods, among them one whose
/// multi-line quoted annotation continues in column 0 (kubectl accepts it).
#[test]
fn sriov_device_plugin_docs_manifests() {
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, u64)]);
    let cases: &[Case] = &[
        (
            "docs_bond_test-pod.yaml",
            "test-pod",
            &[("intel.com/intel_sriov_netdevice", 2)],
        ),
        (
            "deployments_pod-tc1.yaml",
            "testpod1",
            &[("intel.com/intel_sriov_netdevice", 1)],
        ),
        (
            "deployments_pod-tc2.yaml",
            "testpod2",
            &[("intel.com/intel_sriov_netdevice", 1)],
        ),
        (
            "docs_dpdk_pod_testpmd.yaml",
            "testpmd",
            &[
                ("hugepages-1Gi", 4 * GI),
                ("intel.com/intel_x710vfio", 2),
                ("memory", GI),
            ],
        ),
        (
            "docs_dpdk_mlnx-dpdk_mlnx-pod_testpmd_connectx5.yaml",
            "testpmd",
            &[
                ("hugepages-1Gi", 2 * GI),
                ("mellanox.com/mlnx_connectx5", 2),
                ("memory", GI),
            ],
        ),
        (
            "docs_ddp_e800_pod-comms.yaml",
            "testpod-comms",
            &[("intel.com/e800_comms", 1)],
        ),
        (
            "docs_rdma_pod_mlx_rdma_test.yaml",
            "rdma-app",
            &[("mellanox.com/mlnx_rdma", 2)],
        ),
    ];
    for (file, name, requests) in cases {
        let pods = read_fixture(&format!("sriov/{file}"));
        assert_eq!(pods.len(), 1, "{file}");
        assert_eq!(pods[0].view.name, *name, "{file}");
        assert_eq!(
            pods[0].view.containers[0].requests,
            list(requests),
            "{file}"
        );
    }
}

/// YAML that kubectl accepts: quoted scalars continued with less indentation
/// than their key, in single and double quotes, in block mappings and lists.
#[test]
fn under_indented_quoted_scalars_are_accepted() {
    for (open, close) in [("'", "'"), ("\"", "\"")] {
        for indent in ["", " ", "  "] {
            let text = format!(
                "kind: Pod\nmetadata:\n  name: p\n  annotations:\n    k8s.v1.cni.cncf.io/networks: {open}[\n{indent}{{name: a}},\n{indent}{{name: b}}]{close}\nspec:\n  containers:\n  - name: c\n    args: [{open}one\n{indent}two{close}]\n"
            );
            let pods = parse_pods(&text, "q.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(pods[0].containers[0].name, "c");
        }
    }
}

#[test]
fn inputs_over_the_size_limit_are_refused() {
    let dir = scratch_dir("size");
    let big = dir.join("big.yaml");
    let mut text = "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n".to_string();
    text.push_str(&format!("# {}\n", "x".repeat(MAX_MANIFEST_BYTES as usize)));
    std::fs::write(&big, &text).expect("write");
    let big = big.to_string_lossy().into_owned();
    let want = format!("{big}: larger than 3145728 bytes (the Kubernetes API server's request limit); split it into several files");
    assert_eq!(
        read_pods(std::slice::from_ref(&big))
            .expect_err("too large")
            .to_string(),
        want
    );
    // Exactly the limit is fine.
    let fits = dir.join("fits.yaml");
    let head = "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n# ";
    let pad = MAX_MANIFEST_BYTES as usize - head.len() - 1;
    std::fs::write(&fits, format!("{head}{}\n", "x".repeat(pad))).expect("write");
    assert_eq!(
        read_pods(&[fits.to_string_lossy().into_owned()])
            .expect("fits")
            .len(),
        1
    );
    // An endless input ends at the limit, not in a hang.
    assert_eq!(
        read_pods(&["/dev/zero".to_string()]).expect_err("endless").to_string(),
        "/dev/zero: larger than 3145728 bytes (the Kubernetes API server's request limit); split it into several files"
    );
    // Standard input, through the CLI: exit status 2 and one line naming <stdin>.
    let out = std::process::Command::new(common::topomgr_bin())
        .args(["admit", "--dry-run", "-"])
        .stdin(std::fs::File::open(&big).expect("open"))
        .output()
        .expect("run topomgr");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("<stdin>: larger than 3145728 bytes"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The YAML budget: alias bombs and deep nesting are errors naming the
/// input, found in bounded time.
#[test]
fn yaml_bombs_are_bounded_errors() {
    let mut laughs = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
    {
        let refs = vec![format!("*{prev}"); 9].join(",");
        laughs.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    let e = parse_err(&laughs, "bomb.yaml");
    assert!(
        e.starts_with("bomb.yaml: invalid YAML: alias replay limit exceeded: total_replayed_events=100001 > 100000"),
        "{e}"
    );
    let deep = format!(
        "kind: Pod\nmetadata: {{name: p}}\nspec: {{containers: [{{name: c}}]}}\nx: {}1{}\n",
        "[".repeat(200),
        "]".repeat(200)
    );
    let e = parse_err(&deep, "deep.yaml");
    assert!(
        e.starts_with("deep.yaml: invalid YAML: budget breached: Depth { depth: 65 }"),
        "{e}"
    );
}
