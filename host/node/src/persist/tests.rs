//! Golden tests of the record schema: a state directory written by main at
//! 0af6219 opens, and the bytes written for a fixed state are pinned.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use topomgr_engine::admission::{AdmitResult, Admitter, ContainerResult};
use topomgr_engine::numa::NumaInfo;
use topomgr_engine::policy::{Policy, Scope};
use topomgr_engine::provider::LoadedProvider;
use topomgr_sdk::{
    testkit, Allocation, ContainerView, CpuSet, NumaMask, PodResources, PodView, ProviderError,
    QosClass, TopologyHint,
};

use super::*;
use crate::persist::image::RestoreIssue;
use crate::persist::journal::{self, JOURNAL_FILE};
use crate::persist::snapshot::{decode_snapshot, encode, encode_version, STATE_FILE};
use crate::persist::store::{recover_bytes, Store};
use crate::state::pod_owner::{ContainerOwner, ContainerRuntime, Owner, ProcessOwner};
use crate::state::{Change, NodeState, Records};

/// The boot id the v3 fixture was written under.
const BOOT: &str = "00000000-0000-4000-8000-0000000f1x7e";
const WIDGETS: &str = "6f1c2a3e-0002-4c8e-9a51-000000000002";
const FIRST: &str = "6f1c2a3e-0006-4c8e-9a51-000000000006";
const SECOND: &str = "6f1c2a3e-0007-4c8e-9a51-000000000007";
const SIDECAR: &str = "6f1c2a3e-0005-4c8e-9a51-000000000005";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/state")
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("topomgr-persist-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What the v3 fixture holds: its snapshot and journal recovered.
#[test]
fn state_v3_written_by_0af6219_recovers_its_pods_owners_and_attachments() {
    let dir = fixtures().join("v3");
    let snapshot = read(&dir.join(STATE_FILE));
    let journal = read(&dir.join(JOURNAL_FILE));
    let rec = recover_bytes(&dir, Some(&snapshot), Some(&journal), None).unwrap();
    assert_eq!(rec.boot_id.as_deref(), Some(BOOT));
    assert_eq!(rec.journal.as_ref().map(|j| j.seq), Some(5));
    let body = rec.body;
    assert_eq!(
        body.pods.keys().map(String::as_str).collect::<Vec<_>>(),
        [WIDGETS, SIDECAR, FIRST, "oci-c9", "run-7f3a"]
    );
    assert!(!body.pods.contains_key(SECOND), "released in record 5");
    let trainer = &body.pods[WIDGETS].containers[0];
    assert_eq!(trainer.name, "trainer");
    assert_eq!(trainer.allocation.devices["example.com/widget"].len(), 2);
    assert!(trainer.allocation.exclusive);
    assert_eq!(trainer.allocation.cpus.len(), 4);
    assert_eq!(trainer.allocation.mems.len(), 1);
    assert_eq!(trainer.hint.affinity.map(|m| m.len()), Some(1));
    let sidecar = &body.pods[SIDECAR].pod;
    assert_eq!(
        sidecar
            .init_containers
            .iter()
            .map(|c| (c.name.as_str(), c.sidecar))
            .collect::<Vec<_>>(),
        [("fetch-model", false), ("log-shipper", true)]
    );
    assert_eq!(sidecar.qos, QosClass::Guaranteed);
    assert_eq!(
        body.attachments,
        BTreeMap::from([
            (
                SIDECAR.to_owned(),
                BTreeMap::from([("server".to_owned(), "kubepods/pod-s/server".to_owned())])
            ),
            (
                WIDGETS.to_owned(),
                BTreeMap::from([("trainer".to_owned(), "kubepods/pod-w/trainer".to_owned())])
            ),
            (
                "oci-c9".to_owned(),
                BTreeMap::from([(
                    "main".to_owned(),
                    "machine.slice/libpod-c9.scope".to_owned()
                )])
            ),
        ])
    );
    assert_eq!(
        body.owners,
        BTreeMap::from([
            (
                "run-7f3a".to_owned(),
                Owner::Process(ProcessOwner {
                    pid: 4242,
                    start_time: 987_654,
                    boot_id: BOOT.to_owned(),
                })
            ),
            (
                "oci-c9".to_owned(),
                Owner::Container(ContainerOwner {
                    runtime: ContainerRuntime::OciHook,
                    id: "c9".to_owned(),
                    pid: Some(5151),
                    start_time: Some(123_456),
                    boot_id: BOOT.to_owned(),
                    cgroup: Some("machine.slice/libpod-c9.scope".to_owned()),
                    admitted_at: 1_700_000_000,
                })
            ),
        ])
    );
    assert_eq!(
        body.providers
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["cpu", "memory", "widgets"]
    );
}

/// Today's schema reads the fixture's snapshot body and every journal
/// record and writes them back byte for byte: the format did not change.
#[test]
fn state_v3_written_by_0af6219_is_written_back_byte_for_byte() {
    let dir = fixtures().join("v3");
    let snapshot = read(&dir.join(STATE_FILE));
    let nl = snapshot.iter().position(|b| *b == b'\n').unwrap();
    let (boot, body) = decode_snapshot(&dir.join(STATE_FILE), &snapshot).unwrap();
    assert_eq!(body_to_json(&body).unwrap(), &snapshot[nl + 1..]);
    // Version 4 is version 3's envelope (the directory keeps its
    // acknowledgements beside it).
    assert_eq!(encode_version(3, &body, &boot).unwrap(), snapshot);
    let contents = journal::parse(&dir.join(JOURNAL_FILE), &read(&dir.join(JOURNAL_FILE))).unwrap();
    assert_eq!(contents.records.len(), 5);
    for e in &contents.records {
        let record = record_from_json(&e.payload).unwrap();
        assert_eq!(
            String::from_utf8(record_to_json(&record).unwrap()).unwrap(),
            String::from_utf8(e.payload.clone()).unwrap(),
            "record {}",
            e.seq
        );
    }
}

/// The fixture opens in a node: pods, owners and attachments installed; a
/// configured provider that cannot read its bytes is held and its bytes
/// written back unchanged, the unconfigured ones kept.
#[test]
fn state_v3_written_by_0af6219_opens_with_a_held_provider() {
    let dir = scratch("open-v3");
    for f in [STATE_FILE, JOURNAL_FILE] {
        fs::copy(fixtures().join("v3").join(f), dir.join(f)).unwrap();
    }
    let before = recover_bytes(
        &dir,
        Some(&read(&dir.join(STATE_FILE))),
        Some(&read(&dir.join(JOURNAL_FILE))),
        std::fs::read(dir.join(crate::persist::ack::ACK_FILE))
            .ok()
            .as_deref(),
    )
    .unwrap()
    .body;
    let machine = testkit::machine(4, 4);
    let policy = Policy::new(
        "single-numa-node",
        &BTreeMap::new(),
        NumaInfo::from_machine(&machine).unwrap(),
    )
    .unwrap();
    let widgets = testkit::FakeProvider::new()
        .with_restore(|_| Err(ProviderError::checkpoint("not my format")));
    let adm = Admitter::new(
        &machine,
        policy,
        Scope::Container,
        vec![LoadedProvider::in_process("widgets", widgets)],
    );
    let mut node = NodeState::new(adm, Records::default(), &dir.join("no-cgroups"), BOOT);
    let (mut store, restored) = Store::open(&dir, &mut node, BOOT).unwrap();
    assert_eq!((restored.pods, restored.rebooted), (5, false));
    assert_eq!(
        restored
            .issues
            .iter()
            .filter(|i| !matches!(i, RestoreIssue::Ledger(_)))
            .cloned()
            .collect::<Vec<_>>(),
        [
            RestoreIssue::ProviderHeld {
                provider: "widgets".to_owned(),
                reason: "not my format".to_owned(),
            },
            RestoreIssue::MissingProvider {
                provider: "cpu".to_owned(),
            },
            RestoreIssue::MissingProvider {
                provider: "memory".to_owned(),
            },
        ]
    );
    assert_eq!(node.pods(), &before.pods);
    assert_eq!(node.records().owners, before.owners);
    assert_eq!(node.records().attachments, before.attachments);
    store.compact(&node).unwrap();
    let after = recover_bytes(
        &dir,
        Some(&read(&dir.join(STATE_FILE))),
        Some(&read(&dir.join(JOURNAL_FILE))),
        std::fs::read(dir.join(crate::persist::ack::ACK_FILE))
            .ok()
            .as_deref(),
    )
    .unwrap()
    .body;
    assert_eq!(after.providers, before.providers);
    assert_eq!(after.pods, before.pods);
    fs::remove_dir_all(dir).unwrap();
}

/// A state using every field of the schema.
fn fixed_body() -> Body {
    let pod = PodView::new("p1", "web", "prod", QosClass::Guaranteed)
        .with_init_containers(vec![ContainerView::new("logs")
            .with_requests(BTreeMap::from([("cpu".to_owned(), 100)]))
            .with_sidecar(true)])
        .with_containers(vec![ContainerView::new("app")
            .with_requests(BTreeMap::from([
                ("cpu".to_owned(), 2000),
                ("example.com/widget".to_owned(), 1),
            ]))
            .with_limits(BTreeMap::from([("memory".to_owned(), 1 << 30)]))])
        .with_resources(Some(PodResources::new(
            BTreeMap::from([("cpu".to_owned(), 3000)]),
            BTreeMap::new(),
        )));
    let admitted = AdmitResult {
        pod,
        admitted: true,
        reason: None,
        message: Some("aligned".to_owned()),
        containers: vec![
            ContainerResult {
                name: "logs".to_owned(),
                hint: TopologyHint::ANY,
                allocation: Allocation::default(),
            },
            ContainerResult {
                name: "app".to_owned(),
                hint: TopologyHint::new(NumaMask::parse_list("1").unwrap(), true),
                allocation: Allocation::default()
                    .with_cpus(CpuSet::parse("2-3,10").unwrap(), true)
                    .with_mems(NumaMask::parse_list("1").unwrap())
                    .with_devices("example.com/widget", vec!["w-1".to_owned()])
                    .with_env("WIDGET", "w-1"),
            },
        ],
    };
    Body {
        pods: BTreeMap::from([("p1".to_owned(), admitted)]),
        providers: BTreeMap::from([("widgets".to_owned(), "00ff".to_owned())]),
        attachments: BTreeMap::from([(
            "p1".to_owned(),
            BTreeMap::from([("app".to_owned(), "kubepods/p1/app".to_owned())]),
        )]),
        owners: BTreeMap::from([
            (
                "p1".to_owned(),
                Owner::Process(ProcessOwner {
                    pid: 7,
                    start_time: 99,
                    boot_id: "boot".to_owned(),
                }),
            ),
            (
                "p2".to_owned(),
                Owner::Container(ContainerOwner {
                    runtime: ContainerRuntime::Nri,
                    id: "c2".to_owned(),
                    pid: None,
                    start_time: None,
                    boot_id: "boot".to_owned(),
                    cgroup: None,
                    admitted_at: 5,
                }),
            ),
        ]),
        pending_releases: BTreeMap::from([(
            "gpu".to_owned(),
            vec![("p0".to_owned(), "main".to_owned())],
        )]),
        generation: 4,
    }
}

/// A record of every kind of change.
fn fixed_record() -> Record {
    let body = fixed_body();
    Record {
        seq: 3,
        changes: vec![
            Change::Admitted(Box::new(body.pods["p1"].clone())),
            Change::Attached {
                uid: "p1".to_owned(),
                container: "app".to_owned(),
                cgroup: "kubepods/p1/app".to_owned(),
            },
            Change::Owner {
                uid: "p2".to_owned(),
                owner: body.owners["p2"].clone(),
            },
            Change::Detached {
                uid: "p1".to_owned(),
                container: "app".to_owned(),
            },
            Change::Released {
                uid: "p0".to_owned(),
            },
        ],
        providers: body.providers.clone(),
        pending_releases: body.pending_releases.clone(),
    }
}

/// Compare `bytes` with the committed file `name` (written anew when
/// `TOPOMGR_WRITE_PINNED` is set, to pin a new schema).
fn pinned(name: &str, bytes: &[u8]) {
    let path = fixtures().join("pinned").join(name);
    if std::env::var_os("TOPOMGR_WRITE_PINNED").is_some() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, bytes).unwrap();
    }
    assert_eq!(
        String::from_utf8_lossy(&read(&path)),
        String::from_utf8_lossy(bytes),
        "the bytes written for a fixed state changed: a changed format is a new schema module (persist::v2), not an edit of v1"
    );
}

/// The bytes of a fixed snapshot and journal record are pinned: renaming a
/// field of an engine, SDK or API type cannot change them.
#[test]
fn bytes_written_for_a_fixed_state_are_pinned() {
    let body = fixed_body();
    let snapshot = encode(&body, "boot").unwrap();
    pinned("state.ckpt", &snapshot);
    let record = record_to_json(&fixed_record()).unwrap();
    pinned("record.json", &record);
    // And they read back as what was written.
    let (_, read_back) = decode_snapshot(Path::new(STATE_FILE), &snapshot).unwrap();
    assert_eq!(read_back.pods, body.pods);
    assert_eq!(read_back.owners, body.owners);
    assert_eq!(read_back.attachments, body.attachments);
    assert_eq!(read_back.pending_releases, body.pending_releases);
    assert_eq!(read_back.generation, 4);
    let r = record_from_json(&record).unwrap();
    assert_eq!(r.changes, fixed_record().changes);
}

/// An owner saved before containers could own pods (no `kind`) reads as a
/// process; an unknown kind or field is refused, naming it.
#[test]
fn owners_of_older_records_read_and_unknown_ones_are_refused() {
    let old: v1::OwnerRecord =
        serde_json::from_str(r#"{"pid":1,"start_time":2,"boot_id":"b"}"#).unwrap();
    assert_eq!(
        Owner::from(old),
        Owner::Process(ProcessOwner {
            pid: 1,
            start_time: 2,
            boot_id: "b".to_owned(),
        })
    );
    // A pod admitted whole under pod scope, owned by its NRI sandbox.
    let sandbox = Owner::Container(ContainerOwner {
        runtime: ContainerRuntime::NriSandbox,
        id: "s1".to_owned(),
        pid: None,
        start_time: None,
        boot_id: "b".to_owned(),
        cgroup: None,
        admitted_at: 3,
    });
    let json = serde_json::to_string(&v1::OwnerRecord::from(&sandbox)).unwrap();
    assert!(json.contains(r#""runtime":"nri-sandbox""#), "{json}");
    let back: v1::OwnerRecord = serde_json::from_str(&json).unwrap();
    assert_eq!(Owner::from(back), sandbox);
    let err = serde_json::from_str::<v1::OwnerRecord>(r#"{"kind":"vm","id":"x"}"#).unwrap_err();
    assert!(err.to_string().contains("unknown variant `vm`"), "{err}");
    let err =
        serde_json::from_str::<v1::OwnerRecord>(r#"{"pid":1,"start_time":2,"boot_id":"b","x":1}"#)
            .unwrap_err();
    assert!(err.to_string().contains("unknown field `x`"), "{err}");
}

/// A record whose JSON parses but holds a CPU list or NUMA node the node
/// refuses is refused naming the pod, the container and the field.
#[test]
fn values_the_node_refuses_are_named() {
    let mut body = v1::StateBody::from(&fixed_body());
    let app = &mut body.pods.get_mut("p1").unwrap().containers[1];
    app.allocation.cpus = "3-x".to_owned();
    let bytes = serde_json::to_vec(&body).unwrap();
    let err = body_from_json(&bytes).unwrap_err().to_string();
    assert!(
        err.starts_with("pod \"p1\" container \"app\": allocated CPUs: "),
        "{err}"
    );
    let app = &mut body.pods.get_mut("p1").unwrap().containers[1];
    app.allocation.cpus = "3".to_owned();
    app.hint.affinity = Some(vec![300]);
    let err = body_from_json(&serde_json::to_vec(&body).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("pod \"p1\" container \"app\": hint affinity: "),
        "{err}"
    );
}
