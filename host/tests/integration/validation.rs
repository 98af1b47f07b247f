//! Manifests are validated as the API server validates them, by the CLI and
//! the daemon alike: a misspelled field, a fractional widget, hugepages that
//! are not whole pages; the daemon takes only JSON and YAML bodies; and a
//! one-shot admission that changes nothing writes nothing.

use crate::common;
use crate::daemon::Daemon;

use std::fs;

use topomgr_node::api::{Admissions, ErrorBody};

fn pod(uid: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {uid}\n  uid: {uid}\nspec:\n  containers:\n  - name: app\n    resources:\n{resources}"
    )
}

/// Each manifest and the message both the CLI and the daemon give.
const REFUSED: [(&str, &str); 3] = [
    (
        "      limit:\n        example.com/widget: \"1\"\n",
        "document 1: spec.containers[0].resources.limit: unknown field \"limit\"; did you mean \"limits\"?",
    ),
    (
        "      limits:\n        example.com/widget: \"0.5\"\n",
        "document 1: spec.containers[0].resources.limits[example.com/widget]: invalid value \"0.5\": must be an integer (an extended resource is counted in whole units)",
    ),
    (
        "      limits:\n        memory: 1Gi\n        hugepages-2Mi: 3Mi\n",
        "document 1: spec.containers[0].resources.limits.hugepages-2Mi: invalid value \"3Mi\": 3Mi is not positive integer multiple of hugepages-2Mi",
    ),
];

#[test]
fn what_the_api_server_refuses_is_refused_by_the_cli_and_the_daemon() {
    let dir = common::widgets_config("validation-refused");
    for (i, (resources, message)) in REFUSED.iter().enumerate() {
        let file = dir.join(format!("pod-{i}.yaml"));
        fs::write(&file, pod("p", resources)).unwrap();
        let (code, out, err) = common::topomgr(&dir, &["admit", file.to_str().unwrap()]);
        assert_eq!(code, 2, "{out}");
        assert_eq!(
            err,
            format!("topomgr: error: {}: {message}\n", file.display())
        );
    }
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    for (resources, message) in REFUSED {
        let r = c.admit(&pod("p", resources)).unwrap();
        assert_eq!(r.status, 400);
        let e: ErrorBody = r.parse().unwrap();
        assert_eq!(e.error, format!("<request body>: {message}"));
        assert_eq!(e.reason, "BadManifest");
    }
    // Nothing was admitted; a whole widget is.
    let r: Admissions = c
        .admit(&pod(
            "p",
            "      limits:\n        example.com/widget: \"1\"\n",
        ))
        .unwrap()
        .parse()
        .unwrap();
    assert!(r.pods[0].admitted);
    assert_eq!(
        r.pods[0].containers[0].devices["example.com/widget"].len(),
        1
    );
    d.stop();
}

#[test]
fn the_daemon_takes_only_json_and_yaml() {
    let dir = common::widgets_config("validation-content-type");
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let manifest = pod("p", "      limits:\n        example.com/widget: \"1\"\n");
    for (content_type, what) in [
        (
            Some("text/plain"),
            "Content-Type \"text/plain\" is not accepted",
        ),
        (
            Some("application/x-www-form-urlencoded"),
            "Content-Type \"application/x-www-form-urlencoded\" is not accepted",
        ),
        (None, "the request has no Content-Type"),
    ] {
        let r = c
            .request("POST", "/v1/pods", content_type, manifest.as_bytes())
            .unwrap();
        assert_eq!(r.status, 415);
        let e: ErrorBody = r.parse().unwrap();
        assert_eq!(e.reason, "UnsupportedMediaType");
        assert_eq!(
            e.error,
            format!("{what}: POST /v1/pods takes application/json or application/yaml or application/x-yaml or text/yaml or text/x-yaml or application/vnd.topomgr.admission+json (with curl: -H 'Content-Type: application/yaml')")
        );
    }
    let listed = c.get("/v1/pods").unwrap().json().unwrap();
    assert_eq!(listed["pods"], serde_json::json!([]));
    for content_type in [
        "application/yaml",
        "text/yaml; charset=utf-8",
        "application/json",
    ] {
        let body = if content_type == "application/json" {
            serde_json::to_string(&serde_json::json!({
                "kind": "Pod", "metadata": {"name": "j", "uid": "j"},
                "spec": {"containers": [{"name": "a"}]}
            }))
            .unwrap()
        } else {
            manifest.clone()
        };
        let r = c
            .request("POST", "/v1/pods", Some(content_type), body.as_bytes())
            .unwrap();
        assert_eq!(r.status, 200, "{content_type}: {}", r.error_message());
    }
    d.stop();
}

/// `admit --state-dir` of a pod that is rejected changes nothing, and
/// writes nothing: the journal stays byte for byte as it was.
#[test]
fn a_one_shot_admission_that_changes_nothing_writes_nothing() {
    let dir = common::widgets_config("validation-nothing");
    let state = dir.join("state");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let one = write(
        "one.yaml",
        &pod("one", "      limits:\n        example.com/widget: \"1\"\n"),
    );
    let two = write(
        "two.yaml",
        &pod("two", "      limits:\n        example.com/widget: \"1\"\n"),
    );
    let many = write(
        "many.yaml",
        &pod("many", "      limits:\n        example.com/widget: \"3\"\n"),
    );
    let admit = |file: &str| {
        let (code, out, err) = common::topomgr(
            &dir,
            &["admit", "--state-dir", state.to_str().unwrap(), file],
        );
        assert_eq!(code, 0, "{err}");
        let a: Admissions = serde_json::from_str(&out).unwrap();
        a.pods[0].admitted
    };
    assert!(admit(&one));
    assert!(admit(&two));
    let journal = state.join("state.journal");
    let before = fs::read(&journal).unwrap();
    let snapshot = fs::read(state.join("state.ckpt")).unwrap();
    // Three widgets on one NUMA node: single-numa-node cannot (two per node).
    assert!(!admit(&many));
    assert_eq!(fs::read(&journal).unwrap(), before);
    assert_eq!(fs::read(state.join("state.ckpt")).unwrap(), snapshot);
}
