//! The golden state directories under `tests/fixtures/state/`: how they are
//! written (an ignored generator, run once per format version), and
//! `topomgr state check` / `state recover` on a copy of each. The node
//! crate's `persist` tests open them and check what they restore.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use topomgr_cgroup::{directory_tree, CgroupPath};
use topomgr_engine::admission::Admitter;
use topomgr_node::persist::store::Store;
use topomgr_node::setup::AdmitterParts;
use topomgr_node::state::pod_owner::{ContainerOwner, ContainerRuntime, Owner, ProcessOwner};
use topomgr_node::state::{NodeState, Records};
use topomgr_sdk::PodView;

/// The boot id the fixtures were written under.
const BOOT: &str = "00000000-0000-4000-8000-0000000f1x7e";

/// The fixture of state version 3 (journal version 2), as written by main
/// at 0af6219.
fn fixture_v3() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/state/v3")
}

fn example_pods(file: &str) -> Vec<PodView> {
    let path = format!("{}/../examples/pods/{file}", env!("CARGO_MANIFEST_DIR"));
    topomgr_manifest::read_pods(&[path]).unwrap()
}

fn run_pod(uid: &str, cpus: u32) -> PodView {
    let text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {uid}\n  namespace: default\n  uid: {uid}\nspec:\n  containers:\n  - name: main\n    resources:\n      limits:\n        cpu: \"{cpus}\"\n        memory: 256Mi\n        example.com/widget: \"1\"\n"
    );
    topomgr_manifest::parse_pods(&text, uid).unwrap().remove(0)
}

/// Write the golden state directory into `$TOPOMGR_WRITE_STATE_FIXTURE`:
/// the recorded machine `examples/machines/2s4n`, the example widget
/// provider and the real CPU and memory providers; a snapshot of four
/// pods, then journal records of an attachment, a `run`-style (process)
/// owner, a container-owned admission attached to its cgroup, and a
/// release. See `tests/fixtures/state/README.md`.
///
/// Without the variable it writes into a scratch directory and checks that
/// `topomgr state check` accepts what it wrote (the generator keeps
/// working as the code changes).
#[test]
fn write_golden_state() {
    let target = std::env::var_os("TOPOMGR_WRITE_STATE_FIXTURE").map(PathBuf::from);
    let out = target
        .clone()
        .unwrap_or_else(|| common::scratch_dir("state-fixture-written").join("state"));
    let dir = common::scratch_dir("state-fixture");
    let config = dir.join("topomgr.toml");
    fs::write(
        &config,
        format!(
            "policy = \"single-numa-node\"\nsysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n[providers.widgets]\nlibrary = \"{}\"\n[providers.widgets.config]\nwidgets_per_node = 2\n{}",
            common::example_sys(),
            common::plugins().widgets.display(),
            common::real_cpu_and_memory_providers()
        ),
    )
    .unwrap();
    let cfg = topomgr_node::setup::config::load(&config, false).unwrap();
    let machine = topomgr_discovery::discover(Path::new(&common::example_sys())).unwrap();
    let parts = AdmitterParts::from_config(&cfg, &machine).unwrap();
    let admitter = Admitter::new(&machine, parts.policy, parts.scope, parts.providers);
    // A v1-style cpuset tree in a directory (the cgroup crate's double).
    let cg = dir.join("cgroup");
    fs::create_dir_all(cg.join("cpuset")).unwrap();
    fs::write(cg.join("cpuset/cpuset.cpus"), "0-15\n").unwrap();
    fs::write(cg.join("cpuset/cpuset.mems"), "0-3\n").unwrap();
    fs::write(cg.join("cpuset/cgroup.procs"), "").unwrap();
    let mgr = directory_tree::detect(&cg).unwrap();
    for p in [
        "kubepods/pod-w/trainer",
        "kubepods/pod-s/server",
        "machine.slice/libpod-c9.scope",
    ] {
        mgr.create(&CgroupPath::new(p).unwrap()).unwrap();
    }
    let mut node = NodeState::new(admitter, Records::default(), &cg, BOOT).with_cgroups(mgr);
    let state = dir.join("state");
    fs::create_dir_all(&state).unwrap();
    let (mut store, _) = Store::open(&state, &mut node, BOOT).unwrap();

    // The snapshot: four pods (the first commit without a journal compacts).
    let mut pods = example_pods("guaranteed-widgets.yaml");
    pods.extend(example_pods("two-pods.yaml"));
    pods.extend(example_pods("init-and-sidecar.yaml"));
    for p in &pods {
        let r = node.admit(p);
        assert!(r.admitted, "{}: {:?}", p.uid, r.message);
    }
    store.commit(&mut node).unwrap();
    assert_eq!(store.records(), 0);

    // Journal record 1: two containers attached to their cgroups.
    node.attach(&pods[0].uid, "trainer", "kubepods/pod-w/trainer")
        .unwrap();
    node.attach(&pods[3].uid, "server", "kubepods/pod-s/server")
        .unwrap();
    store.commit(&mut node).unwrap();

    // Record 2: a `run` pod owned by a process.
    let owner = Owner::Process(ProcessOwner {
        pid: 4242,
        start_time: 987_654,
        boot_id: BOOT.to_owned(),
    });
    let r = node
        .admit_owned(
            &run_pod("run-7f3a", 2),
            owner,
            &Default::default(),
            &mut Vec::new(),
        )
        .unwrap();
    assert!(r.admitted, "{:?}", r.message);
    store.commit(&mut node).unwrap();

    // Record 3: a container-owned admission (the OCI hook), then record 4
    // its attachment.
    let owner = Owner::Container(ContainerOwner {
        runtime: ContainerRuntime::OciHook,
        id: "c9".to_owned(),
        pid: Some(5151),
        start_time: Some(123_456),
        boot_id: BOOT.to_owned(),
        cgroup: Some("machine.slice/libpod-c9.scope".to_owned()),
        admitted_at: 1_700_000_000,
    });
    let r = node
        .admit_owned(
            &run_pod("oci-c9", 1),
            owner,
            &Default::default(),
            &mut Vec::new(),
        )
        .unwrap();
    assert!(r.admitted, "{:?}", r.message);
    store.commit(&mut node).unwrap();
    node.attach("oci-c9", "main", "machine.slice/libpod-c9.scope")
        .unwrap();
    store.commit(&mut node).unwrap();

    // Record 5: the second of the two pods released.
    node.release(&pods[2].uid).unwrap();
    store.commit(&mut node).unwrap();
    assert_eq!(store.records(), 5);

    fs::create_dir_all(&out).unwrap();
    // Since state version 4 the directory keeps its acknowledgements too.
    for f in ["state.ckpt", "state.journal", "state.ack"] {
        fs::copy(state.join(f), out.join(f)).unwrap();
    }
    if target.is_none() {
        let d = out.to_str().unwrap();
        let (rc, report, err) = topomgr(&["state", "check", "--state-dir", d]);
        assert_eq!((rc, err.as_str()), (0, ""), "{report}");
        assert!(
            report.contains("5 intact record(s)")
                && report.ends_with("ok: a daemon or command starts on this state\n"),
            "{report}"
        );
    }
}

/// A copy of `fixture` to run the binary's verbs on (they may write).
fn copy_of(fixture: &Path, tag: &str) -> PathBuf {
    let dir = common::scratch_dir(tag).join("state");
    fs::create_dir_all(&dir).unwrap();
    for f in ["state.ckpt", "state.journal"] {
        fs::copy(fixture.join(f), dir.join(f)).unwrap();
    }
    dir
}

fn topomgr(args: &[&str]) -> (i32, String, String) {
    let out = common::run_topomgr(args);
    (
        out.status.code().unwrap_or(-1),
        common::text(&out.stdout),
        common::text(&out.stderr),
    )
}

/// `topomgr state check` reads the v3 fixture (snapshot and journal) and
/// lists what it holds; `state recover` finds nothing to recover and
/// changes nothing.
#[test]
fn state_check_and_recover_read_the_v3_fixture() {
    let dir = copy_of(&fixture_v3(), "fixture-check");
    let d = dir.to_str().unwrap();
    let (rc, out, err) = topomgr(&["state", "check", "--state-dir", d]);
    assert_eq!((rc, err.as_str()), (0, ""), "{out}");
    assert_eq!(
        out,
        format!(
            "state directory {d}\n\
             snapshot state.ckpt: generation 1, 9037 bytes, written in boot {BOOT}, intact\n\
             journal state.journal: version 2, continues generation 1, started in boot {BOOT}, 15016 bytes, 5 intact record(s) (sequence 1-5)\n\
             state: generation 1 + 5 record(s): 5 pod(s), 3 attached container(s), 2 run owner(s)\n  \
             pod ml/guaranteed-widgets (uid 6f1c2a3e-0002-4c8e-9a51-000000000002)\n  \
             pod default/init-and-sidecar (uid 6f1c2a3e-0005-4c8e-9a51-000000000005)\n  \
             pod default/first (uid 6f1c2a3e-0006-4c8e-9a51-000000000006)\n  \
             pod default/oci-c9 (uid oci-c9)\n  \
             pod default/run-7f3a (uid run-7f3a)\n  \
             provider cpu: 354 bytes of state\n  \
             provider memory: 2191 bytes of state\n  \
             provider widgets: 624 bytes of state\n\
             ok: a daemon or command starts on this state\n"
        )
    );
    let (rc, out, err) = topomgr(&["state", "recover", "--state-dir", d]);
    assert_eq!(
        (rc, out.as_str(), err.as_str()),
        (
            0,
            format!("nothing to recover in {d}: no damage (generation 1 + 5 record(s), 5 pod(s)); nothing was changed\n").as_str(),
            ""
        )
    );
    for f in ["state.ckpt", "state.journal"] {
        assert_eq!(
            fs::read(dir.join(f)).unwrap(),
            fs::read(fixture_v3().join(f)).unwrap(),
            "{f}"
        );
    }
}
