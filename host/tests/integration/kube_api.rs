//! topomgr's `[kubernetes]` side against a real API server: etcd and
//! kube-apiserver of the 1.37 line (`.ci/install-kubernetes`), no kubelet
//! (the NodeResourceTopology push needs none: pods are admitted through
//! topomgr's HTTP API on a recorded machine). The NRT CRD is applied from
//! the vendored upstream manifest (`tests/fixtures/nrt/crd.yaml`), and
//! topomgr authenticates as the service account of
//! `packaging/kubernetes/rbac.yaml` (a static token claiming its name), so
//! the documented RBAC is what is tested.
//!
//! Checked: the object appears with its zones, the pod fingerprint
//! (computed independently, `kubernetes::pod_fingerprint`) and the Node's
//! uid as its owner reference; it follows an
//! admission within 1 s; with the API server stopped admissions keep
//! their speed, health notes the failing push, and the object catches up
//! when the API server returns; a refusal recorded three times (the
//! kubelet's retries) is one Event with count 3.

use std::fs;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use crate::daemon::Daemon;
use crate::kubernetes::{config, pod_fingerprint, POD, UID};
use topomgr_runtime_harness::ApiServer;

/// etcd and an API server (`topomgr_runtime_harness::ApiServer`) with the
/// vendored NRT CRD and the documented RBAC applied.
fn api_server(tag: &str) -> ApiServer {
    let root = common::workspace_root();
    ApiServer::start(
        common::scratch_dir(tag),
        &[
            &root.join("tests/fixtures/nrt/crd.yaml"),
            &root.join("packaging/kubernetes/rbac.yaml"),
        ],
    )
}

/// The NRT object's path on the API server.
const NRT: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-1";

/// An admin client of the API server (topomgr's own client, with the
/// admin's token), for reading what topomgr wrote.
struct Reader {
    rt: tokio::runtime::Runtime,
    client: topomgr_kube::ApiClient,
}

impl Reader {
    fn new(api: &ApiServer) -> Reader {
        let path = api.dir.join("reader.kubeconfig");
        let text = fs::read_to_string(api.kubeconfig())
            .unwrap()
            .replace("topomgr-token", "admin-token");
        fs::write(&path, text).unwrap();
        let access = topomgr_kube::Access::load(&topomgr_kube::Source::Kubeconfig(path)).unwrap();
        Reader {
            rt: tokio::runtime::Runtime::new().unwrap(),
            client: topomgr_kube::ApiClient::new(access).unwrap(),
        }
    }

    fn get(&mut self, path: &str) -> Option<Value> {
        let r = self
            .rt
            .block_on(
                self.client
                    .send(topomgr_kube::Method::GET, path, None, Vec::new()),
            )
            .ok()?;
        r.is_success()
            .then(|| serde_json::from_slice(&r.body).unwrap())
    }
}

fn attribute(object: &Value, name: &str) -> Option<String> {
    object["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == name)
        .and_then(|a| a["value"].as_str())
        .map(str::to_owned)
}

fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<(T, Duration)> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some((v, start.elapsed()));
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn second_pod() -> String {
    POD.replace("name: trainer", "name: tuner")
        .replace("000000000001", "000000000002")
}

#[test]
#[ignore = "needs etcd, kube-apiserver and kubectl of .ci/install-kubernetes and openssl"]
fn nrt_is_pushed_follows_admissions_and_survives_an_api_server_restart() {
    let mut api = api_server("kube-api-nrt");
    let mut reader = Reader::new(&api);
    // The node's Node object (a kubelet would register it): the object's
    // owner.
    let node = api.dir.join("node.yaml");
    fs::write(
        &node,
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: worker-1\n",
    )
    .unwrap();
    api.kubectl(&["apply", "-f", &node.to_string_lossy()]);
    let node_uid = reader.get("/api/v1/nodes/worker-1").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let dir = config("kube-api-nrt-topomgr");
    let mut toml = fs::read_to_string(dir.join("topomgr.toml")).unwrap();
    toml.push_str(&format!(
        "[kubernetes]\nenabled = true\nkubeconfig = \"{}\"\nnrt_retry_max_ms = 1000\n",
        api.kubeconfig().display()
    ));
    fs::write(dir.join("topomgr.toml"), toml).unwrap();
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();

    // At start: the object with its zones and the empty set's fingerprint.
    let (object, _) =
        wait_for(Duration::from_secs(10), || reader.get(NRT)).expect("the object appears");
    assert_eq!(
        object["zones"].as_array().map(Vec::len),
        Some(4),
        "{object:#}"
    );
    assert_eq!(
        attribute(&object, "nodeTopologyPodsFingerprint"),
        Some(pod_fingerprint(&[]))
    );
    assert_eq!(
        attribute(&object, "nodeTopologyPodsFingerprintMethod").as_deref(),
        Some("with-exclusive-resources")
    );
    assert_eq!(object["metadata"]["managedFields"][0]["manager"], "topomgr");
    // Owned by the Node (read with the RBAC's `get nodes`), so the API
    // server's garbage collector deletes it with the Node.
    assert_eq!(
        object["metadata"]["ownerReferences"],
        serde_json::json!([{"apiVersion": "v1", "kind": "Node", "name": "worker-1", "uid": node_uid}]),
        "{object:#}"
    );

    // An admission is on the API server within 1 s, zones included.
    let r = c.admit(POD).unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let one = pod_fingerprint(&[("ml", "trainer")]);
    let (object, took) = wait_for(Duration::from_secs(1), || {
        reader
            .get(NRT)
            .filter(|o| attribute(o, "nodeTopologyPodsFingerprint").as_ref() == Some(&one))
    })
    .expect("the admission is pushed within 1 s");
    eprintln!("admission on the API server after {took:?}");
    let served: Value = c.get("/v1/noderesourcetopology").unwrap().json().unwrap();
    assert_eq!(object["zones"], served["zones"]);

    // The API server goes away: admissions keep their pace, health says
    // why the object lags, and the object catches up when it returns.
    api.stop_apiserver();
    let start = Instant::now();
    let r = c.admit(&second_pod()).unwrap();
    let admit_took = start.elapsed();
    assert_eq!(r.status, 200, "{}", r.error_message());
    assert!(
        admit_took < Duration::from_millis(500),
        "an admission took {admit_took:?} with the API server down"
    );
    let note = wait_for(Duration::from_secs(5), || {
        let h: Value = c.get("/v1/health").unwrap().json().unwrap();
        h["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .find(|n| n.contains("NodeResourceTopology object cannot be pushed"))
            .map(str::to_owned)
    });
    assert!(
        note.is_some(),
        "no health note while the API server is down"
    );
    api.start_apiserver();
    let both = pod_fingerprint(&[("ml", "trainer"), ("ml", "tuner")]);
    let (_, took) = wait_for(Duration::from_secs(10), || {
        reader
            .get(NRT)
            .filter(|o| attribute(o, "nodeTopologyPodsFingerprint").as_ref() == Some(&both))
    })
    .expect("the object catches up after the API server returns");
    eprintln!("caught up {took:?} after the API server was ready");
    let healthy = wait_for(Duration::from_secs(5), || {
        let h: Value = c.get("/v1/health").unwrap().json().unwrap();
        (!h["notes"].to_string().contains("cannot be pushed")).then_some(())
    });
    assert!(healthy.is_some(), "the note goes once the push works");

    // A burst of 21 changes (release and admit again, 10 times, then
    // release) is a few applies: the object's generation counts those that
    // changed it (an apply of what is stored changes nothing), and the
    // last state, unlike the first, is on the API server.
    let generation = |o: &Value| o["metadata"]["generation"].as_i64().unwrap();
    let before = generation(&reader.get(NRT).unwrap());
    let start = Instant::now();
    for _ in 0..10 {
        assert_eq!(c.release(UID).unwrap().status, 200);
        assert_eq!(c.admit(POD).unwrap().status, 200);
    }
    assert_eq!(c.release(UID).unwrap().status, 200);
    let burst = start.elapsed();
    std::thread::sleep(Duration::from_millis(600));
    let object = reader.get(NRT).unwrap();
    let applies = generation(&object) - before;
    eprintln!("21 changes in {burst:?}: {applies} applies changed the object");
    let bound = i64::try_from(burst.as_millis() / 200).unwrap() + 2;
    assert!(
        applies >= 1 && applies <= bound,
        "{applies} applies for 21 changes in {burst:?}"
    );
    let served: Value = c.get("/v1/noderesourcetopology").unwrap().json().unwrap();
    assert_eq!(
        object["zones"], served["zones"],
        "the last change is on the API server"
    );
    assert_eq!(object["attributes"], served["attributes"]);
}

#[test]
#[ignore = "needs etcd, kube-apiserver and kubectl of .ci/install-kubernetes and openssl"]
fn a_refusal_retried_is_one_event_counted_up() {
    let api = api_server("kube-api-events");
    let access =
        topomgr_kube::Access::load(&topomgr_kube::Source::Kubeconfig(api.kubeconfig())).unwrap();
    let client = topomgr_kube::ApiClient::new(access).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in = rt.enter();
    let recorder = topomgr_kube::events::EventRecorder::start(client, "worker-1".to_owned());
    let refusal = topomgr_kube::events::Refusal {
        namespace: "default".into(),
        name: "trainer".into(),
        uid: "6f1c2a3e-0014-4c8e-9a51-000000000001".into(),
        reason: "TopologyAffinityError".into(),
        message: "Resources cannot be allocated with Topology locality".into(),
    };
    for _ in 0..3 {
        recorder.record(refusal.clone());
        std::thread::sleep(Duration::from_millis(300));
    }
    let events = wait_for(Duration::from_secs(10), || {
        let list: Value = serde_json::from_str(&api.kubectl(&[
            "get",
            "events",
            "-n",
            "default",
            "-o",
            "json",
            "--field-selector",
            "involvedObject.name=trainer",
        ]))
        .unwrap();
        let items = list["items"].as_array().cloned().unwrap_or_default();
        (items.len() == 1 && items[0]["count"] == 3).then_some(items)
    })
    .map(|(items, _)| items)
    .expect("one Event with count 3");
    let ev = &events[0];
    assert_eq!(ev["reason"], "TopologyAffinityError");
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["source"]["component"], "topomgr");
    assert_eq!(ev["involvedObject"]["kind"], "Pod");
    assert_eq!(ev["message"], refusal.message);
}
