//! Owned admissions through the daemon (`POST /v1/pods` with an
//! `application/vnd.topomgr.admission+json` body): the owner is recorded
//! with the pod and survives a restart, a retry by the same owner is
//! answered, another owner's is a conflict, bad owners and pods are
//! refused naming the field, and the daemon releases the pods of owners
//! that are gone (ended, a zombie, a container whose process ended) at
//! start and periodically, counting each.
//!
//! The real CPU provider on the example 2-socket 4-node machine; no cgroup
//! hierarchy (nothing is attached, so a gone owner's pod is released as
//! soon as the owner is).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::json;
use topomgr_client::http::Client;
use topomgr_node::api::{AdmissionRequest, Admissions, Health, OwnerSpec, PodList};
use topomgr_node::state::pod_owner::{start_time, ContainerRuntime};
use topomgr_sdk::{ContainerView, PodView, QosClass};

use crate::common;
use crate::daemon::Daemon;

fn config(tag: &str) -> PathBuf {
    let dir = common::scratch_dir(tag);
    let sys = common::workspace_root().join("examples/machines/2s4n/sys");
    fs::write(
        dir.join("topomgr.toml"),
        format!(
            "policy = \"single-numa-node\"\nsysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n[daemon]\nreclaim_interval_ms = 100\n[providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\npolicy = \"static\"\nreserved_cpus = \"0\"\n",
            sys.display(),
            common::cpu_plugin().display()
        ),
    )
    .unwrap();
    dir
}

/// A one-container Guaranteed pod of `cpus` whole CPUs.
fn pod(uid: &str, cpus: u64) -> PodView {
    let r: topomgr_sdk::ResourceList = [
        ("cpu".to_owned(), cpus * 1000),
        ("memory".to_owned(), 1 << 30),
    ]
    .into();
    PodView::new(uid, uid, "owned", QosClass::Guaranteed).with_containers(vec![ContainerView::new(
        "app",
    )
    .with_requests(r.clone())
    .with_limits(r)])
}

/// A process to own pods: `sleep`, with its start time.
fn owner_process() -> (Child, OwnerSpec) {
    let child = Command::new("sleep").arg("600").spawn().unwrap();
    let start = start_time(child.id()).expect("the sleep runs");
    let spec = OwnerSpec::process(child.id(), start);
    (child, spec)
}

fn admit(c: &mut Client, pod: PodView, owner: OwnerSpec) -> topomgr_client::http::Response {
    c.admit_owned(&AdmissionRequest {
        pod,
        owner,
        attach: None,
        devices: None,
    })
    .unwrap()
}

fn uids(c: &mut Client) -> Vec<String> {
    let list: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    list.pods.into_iter().map(|p| p.uid).collect()
}

/// Wait until the admitted pods are `want` (the periodic reclaim runs
/// every 100 ms here).
fn wait_for_pods(c: &mut Client, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = uids(c);
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "pods {now:?}, expected {want:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn metric(c: &mut Client, line_start: &str) -> String {
    let text = String::from_utf8(c.get("/metrics").unwrap().body).unwrap();
    text.lines()
        .find(|l| l.starts_with(line_start))
        .unwrap_or_else(|| panic!("no {line_start} in {text}"))
        .to_owned()
}

fn error(r: &topomgr_client::http::Response) -> (u16, String, String) {
    let e = r.error().unwrap_or_else(|| panic!("not an error: {r:?}"));
    (r.status, e.reason, e.error)
}

#[test]
fn owned_admissions_are_recorded_retried_and_refused_for_another_owner() {
    let dir = config("owners-api");
    let config = dir.join("topomgr.toml");
    let d = Daemon::start(&config, &dir.join("t.sock"));
    let mut c = d.client();
    let (mut owner, spec) = owner_process();

    let r = admit(&mut c, pod("p1", 1), spec.clone());
    assert_eq!(r.status, 200, "{}", r.error_message());
    let first: Admissions = r.parse().unwrap();
    assert!(first.pods[0].admitted && first.pods[0].containers[0].exclusive);
    // The pod list shows it with its owner, as the client told it.
    let list: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    assert_eq!(
        list.owners,
        [("p1".to_owned(), spec.clone())].into_iter().collect()
    );
    // The same owner again (a retry): the same answer, nothing new.
    let again: Admissions = admit(&mut c, pod("p1", 1), spec.clone()).parse().unwrap();
    assert_eq!(again, first);

    // Another owner of that uid.
    let (mut other, other_spec) = owner_process();
    let r = admit(&mut c, pod("p1", 1), other_spec.clone());
    assert_eq!(
        error(&r),
        (
            409,
            "OwnerConflict".into(),
            format!(
                "pod \"p1\" is already admitted for process {} (start time {}); it was asked for process {} (start time {}). Release it first, or admit under another uid",
                owner.id(),
                spec.start_time.unwrap(),
                other.id(),
                other_spec.start_time.unwrap()
            )
        )
    );
    // A uid admitted from a manifest has no owner: an owned admission of
    // it conflicts too.
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: plain, uid: plain}\nspec:\n  containers: [{name: app}]\n";
    assert_eq!(c.admit(manifest).unwrap().status, 200);
    let r = admit(&mut c, pod("plain", 1), other_spec.clone());
    assert_eq!(error(&r).0, 409);

    // An owner that does not run, fields of the wrong kind, a bad cgroup.
    let r = admit(&mut c, pod("p2", 1), OwnerSpec::process(other.id(), 1));
    assert_eq!(
        error(&r),
        (
            400,
            "BadOwner".into(),
            format!(
                "owner.pid: no running process {} with start time 1 (field 22 of /proc/{}/stat); the owner must be running when it admits",
                other.id(),
                other.id()
            )
        )
    );
    let r = admit(&mut c, pod("p2", 1), other_spec.clone().with_cgroup("x"));
    assert_eq!(
        error(&r).2,
        "owner.cgroup: only a container owner has one; a process owner is pid and start_time"
    );
    let r = admit(
        &mut c,
        pod("p2", 1),
        OwnerSpec::container(ContainerRuntime::OciHook, "abc").with_cgroup("../etc"),
    );
    assert_eq!(
        error(&r).2,
        "owner.cgroup: cgroup path \"../etc\": \"..\" components are refused; the path must stay under the cgroup root"
    );
    // A pod that is not one, a body that is not the envelope.
    let mut twice = pod("p2", 1);
    twice.containers.push(ContainerView::new("app"));
    let r = admit(&mut c, twice, other_spec.clone());
    assert_eq!(
        error(&r),
        (
            400,
            "BadManifest".into(),
            "pod.containers[1].name: container name \"app\" is used twice in the pod".into()
        )
    );
    let r = c
        .post(
            "/v1/pods",
            "application/vnd.topomgr.admission+json",
            br#"{"pod": {"uid": "x"}, "owner": {"kind": "process"}}"#,
        )
        .unwrap();
    assert_eq!(
        error(&r).2,
        "the application/vnd.topomgr.admission+json body at pod: missing field `name` at line 1 column 20 (expected {\"pod\": <pod>, \"owner\": <owner>}; docs/api/openapi.yaml, schema AdmissionRequest)"
    );
    let r = c
        .post(
            "/v1/pods",
            "application/vnd.topomgr.admission+json",
            serde_json::to_vec(
                &json!({"pod": pod("p2", 1), "owner": {"kind": "process", "uid": 0}}),
            )
            .unwrap()
            .as_slice(),
        )
        .unwrap();
    assert!(
        error(&r).2.starts_with(
            "the application/vnd.topomgr.admission+json body at owner.uid: unknown field `uid`, expected one of `kind`, `pid`, `start_time`, `runtime`, `id`, `cgroup`"
        ),
        "{r:?}"
    );
    assert_eq!(uids(&mut c), ["p1", "plain"]);

    // A restart keeps the owner: the pod stays while its owner runs, and
    // a retry by the owner is still answered.
    d.stop();
    let d = Daemon::start(&config, &dir.join("t.sock"));
    let mut c = d.client();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(uids(&mut c), ["p1", "plain"]);
    let again: Admissions = admit(&mut c, pod("p1", 1), spec).parse().unwrap();
    assert_eq!(again, first);
    owner.kill().unwrap();
    owner.wait().unwrap();
    other.kill().unwrap();
    other.wait().unwrap();
    wait_for_pods(&mut c, &["plain"]);
}

#[test]
fn pods_of_owners_that_are_gone_are_reclaimed_at_start_and_periodically() {
    let dir = config("owners-reclaim");
    let config = dir.join("topomgr.toml");
    let d = Daemon::start(&config, &dir.join("t.sock"));
    let mut c = d.client();

    // A process owner that ends (reaped), one that becomes a zombie, and a
    // container whose init process ends.
    let (mut ended, ended_spec) = owner_process();
    let (mut zombie, zombie_spec) = owner_process();
    let (mut init, init_spec) = owner_process();
    let container = OwnerSpec::container(ContainerRuntime::OciHook, "c0ffee")
        .with_process(init.id(), init_spec.start_time.unwrap());
    for (uid, owner) in [
        ("ended", ended_spec),
        ("zombie", zombie_spec),
        ("ctr", container),
    ] {
        let r: Admissions = admit(&mut c, pod(uid, 1), owner).parse().unwrap();
        assert!(r.pods[0].admitted, "{r:?}");
    }
    wait_for_pods(&mut c, &["ctr", "ended", "zombie"]);

    ended.kill().unwrap();
    ended.wait().unwrap();
    wait_for_pods(&mut c, &["ctr", "zombie"]);
    // Killed, not reaped: a zombie is as good as gone.
    zombie.kill().unwrap();
    wait_for_pods(&mut c, &["ctr"]);
    zombie.wait().unwrap();
    init.kill().unwrap();
    init.wait().unwrap();
    wait_for_pods(&mut c, &[]);
    assert_eq!(
        metric(&mut c, "topomgr_reclaimed_pods_total{owner=\"process\""),
        "topomgr_reclaimed_pods_total{owner=\"process\",cause=\"owner_gone\"} 2"
    );
    assert_eq!(
        metric(
            &mut c,
            "topomgr_reclaimed_pods_total{owner=\"container\",cause=\"owner_gone\"}"
        ),
        "topomgr_reclaimed_pods_total{owner=\"container\",cause=\"owner_gone\"} 1"
    );
    let health: Health = c.get("/v1/health").unwrap().parse().unwrap();
    assert!(health.exclusive_cpus.is_empty(), "{health:?}");

    // An owner that ends while no daemon runs: released at the next start,
    // and said so in the health notes.
    let (mut owner, spec) = owner_process();
    let pid = owner.id();
    let start = spec.start_time.unwrap();
    let r: Admissions = admit(&mut c, pod("offline", 2), spec).parse().unwrap();
    assert!(r.pods[0].admitted);
    d.stop();
    owner.kill().unwrap();
    owner.wait().unwrap();
    let d = Daemon::start(&config, &dir.join("t.sock"));
    let mut c = d.client();
    assert!(uids(&mut c).is_empty());
    let health: Health = c.get("/v1/health").unwrap().parse().unwrap();
    assert_eq!(
        health.notes,
        [format!(
            "pod \"offline\" of process {pid} (start time {start}), which is gone, was released (its cgroups were empty or gone)"
        )]
    );
    assert!(health.exclusive_cpus.is_empty());
    let state = common::state_body(&dir.join("state"));
    assert_eq!(state["owners"], json!({}), "{state}");
}

/// The owner of a pod is in the saved state as `{"kind": ...}`.
#[test]
fn owners_are_saved_with_their_kind() {
    let dir = config("owners-saved");
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let (mut init, init_spec) = owner_process();
    let spec = OwnerSpec::container(ContainerRuntime::OciHook, "feed")
        .with_process(init.id(), init_spec.start_time.unwrap())
        .with_cgroup("machine/feed");
    assert_eq!(admit(&mut c, pod("saved", 1), spec).status, 200);
    d.stop();
    let state = common::state_body(Path::new(&dir.join("state")));
    let owner = &state["owners"]["saved"];
    assert_eq!(owner["kind"], "container", "{state}");
    assert_eq!(owner["runtime"], "oci-hook");
    assert_eq!(owner["id"], "feed");
    assert_eq!(owner["pid"], init.id());
    assert_eq!(owner["cgroup"], "machine/feed");
    assert!(owner["admitted_at"].as_u64().unwrap() > 1_700_000_000);
    init.kill().unwrap();
    init.wait().unwrap();
}

/// An owned admission with `attach` (one request for both, the typed
/// client's `admit_and_attach`): a container the pod does not have is
/// refused before anything is admitted; an attach that fails (no cgroup
/// hierarchy under this daemon's cgroup root) releases the admission
/// again and is the answer; the pod is then free to be admitted.
#[test]
fn an_admission_whose_attach_fails_is_released_in_the_same_request() {
    use topomgr_client::Reason;
    use topomgr_node::api::AttachTo;
    let dir = config("owners-attach");
    let config = dir.join("topomgr.toml");
    let _d = Daemon::start(&config, &dir.join("t.sock"));
    let mut c = topomgr_client::Daemon::new(&dir.join("t.sock"));
    let (mut owner, spec) = owner_process();
    let request = |container: &str| AdmissionRequest {
        pod: pod("a1", 1),
        owner: spec.clone(),
        attach: Some(AttachTo {
            container: container.to_owned(),
            cgroup: "pods/a1/app".to_owned(),
        }),
        devices: None,
    };

    let err = c.admit_and_attach(&request("nope")).unwrap_err();
    assert_eq!(err.reason(), Some(&Reason::BadManifest), "{err}");
    assert_eq!(
        err.to_string(),
        "the topomgr daemon refused POST /v1/pods (400): attach.container: \"nope\" is not one of the pod's containers"
    );
    assert_eq!(c.pods().unwrap().pods, []);

    let err = c.admit_and_attach(&request("app")).unwrap_err();
    assert_eq!(err.reason(), Some(&Reason::CgroupError), "{err}");
    assert_eq!(c.pods().unwrap().pods, [], "released again");
    let err = c.pod("a1").unwrap_err();
    assert_eq!(err.reason(), Some(&Reason::UnknownPod), "{err}");

    let admitted = c
        .admit_owned(&AdmissionRequest {
            attach: None,
            ..request("app")
        })
        .unwrap();
    assert!(admitted.admitted && admitted.containers[0].exclusive);
    owner.kill().unwrap();
    owner.wait().unwrap();
}
