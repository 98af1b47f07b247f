//! The cgroup module: v1 and v2 layouts against directory trees (exact file
//! contents), path-escape refusals, the shared pool, and a real cgroup on this
//! machine (root with a cpuset controller; `#[ignore]`d in a plain run).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use std::collections::BTreeMap;

use topomgr_cgroup::{directory_tree, CgroupManager, CgroupPath, CgroupVersion, Cpuset};
use topomgr_engine::admission::Admitter;
use topomgr_engine::numa::NumaInfo;
use topomgr_engine::policy::{Policy, Scope};
use topomgr_engine::provider::LoadedProvider;
use topomgr_node::state::{NodeState, Records};
use topomgr_sdk::{testkit, Allocation, CpuSet, NumaMask, PodView};

fn cpus(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

fn mems(s: &str) -> NumaMask {
    NumaMask::parse_list(s).unwrap()
}

fn path(s: &str) -> CgroupPath {
    CgroupPath::new(s).unwrap()
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn write(p: &Path, s: &str) {
    fs::write(p, s).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}

/// A v1 tree: `<dir>/cpuset` with cpus 0-3 and mems 0-1.
fn v1_tree(tag: &str) -> (PathBuf, PathBuf) {
    let dir = common::scratch_dir(tag);
    let cpuset = dir.join("cpuset");
    fs::create_dir_all(&cpuset).unwrap();
    write(&cpuset.join("cpuset.cpus"), "0-3\n");
    write(&cpuset.join("cpuset.mems"), "0-1\n");
    write(&cpuset.join("cgroup.procs"), "");
    let canonical = cpuset.canonicalize().unwrap();
    (dir, canonical)
}

/// A v2 tree whose root offers `controllers`.
fn v2_tree(tag: &str, controllers: &str) -> PathBuf {
    let dir = common::scratch_dir(tag);
    write(&dir.join("cgroup.controllers"), controllers);
    write(&dir.join("cgroup.subtree_control"), "");
    dir.canonicalize().unwrap()
}

#[test]
fn v1_tree_create_set_move_read_remove() {
    let (dir, root) = v1_tree("cg-v1");
    let mgr = directory_tree::detect(&dir).unwrap();
    assert_eq!(mgr.version(), CgroupVersion::V1);
    assert_eq!(mgr.root(), root);

    let app = mgr.create(&path("topomgr/pod-1/app")).unwrap();
    assert_eq!(app.dir(), root.join("topomgr/pod-1/app"));
    // Every level was initialised from its parent before the next was made.
    for level in ["topomgr", "topomgr/pod-1", "topomgr/pod-1/app"] {
        assert_eq!(
            read(&root.join(level).join("cpuset.cpus")),
            "0-3",
            "{level}"
        );
        assert_eq!(
            read(&root.join(level).join("cpuset.mems")),
            "0-1",
            "{level}"
        );
    }

    mgr.set_cpuset(&app, &cpus("2-3"), &mems("1")).unwrap();
    assert_eq!(read(&app.dir().join("cpuset.cpus")), "2-3");
    assert_eq!(read(&app.dir().join("cpuset.mems")), "1");
    assert_eq!(read(&root.join("topomgr/pod-1/cpuset.cpus")), "0-3");

    mgr.add_process(&app, 4242).unwrap();
    assert_eq!(read(&app.procs_file()), "4242");
    assert_eq!(mgr.procs(&app).unwrap(), vec![4242]);

    // What the kernel would report.
    write(&app.dir().join("cpuset.effective_cpus"), "2-3\n");
    write(&app.dir().join("cpuset.effective_mems"), "1\n");
    assert_eq!(
        mgr.effective(&app).unwrap(),
        Cpuset {
            cpus: cpus("2-3"),
            mems: mems("1")
        }
    );

    // Re-creating an existing cgroup keeps its values.
    let again = mgr.create(&path("topomgr/pod-1/app")).unwrap();
    assert_eq!(again, app);
    assert_eq!(read(&app.dir().join("cpuset.cpus")), "2-3");

    let side = mgr.create(&path("topomgr/pod-1/side")).unwrap();
    let pod = mgr.open(&path("topomgr/pod-1")).unwrap();
    assert_eq!(
        mgr.remove(&pod, 0).unwrap_err().to_string(),
        format!(
            "cannot remove cgroup {}: it has child cgroups (app, side); remove them first",
            root.join("topomgr/pod-1").display()
        )
    );
    // Leaf first; the pod level stays while `side` is in it.
    mgr.remove(&app, 1).unwrap();
    assert!(!app.dir().exists());
    assert!(root.join("topomgr/pod-1").is_dir());
    mgr.remove(&side, 1).unwrap();
    assert!(!root.join("topomgr/pod-1").exists());
    assert!(root.join("topomgr").is_dir(), "only one parent is pruned");
    assert_eq!(
        mgr.open(&path("topomgr/pod-1/app"))
            .unwrap_err()
            .to_string(),
        format!(
            "cgroup {} does not exist",
            root.join("topomgr/pod-1/app").display()
        )
    );
}

#[test]
fn v1_detected_when_the_root_is_the_cpuset_mount() {
    let (_dir, root) = v1_tree("cg-v1-mount");
    let mgr = directory_tree::detect(&root).unwrap();
    assert_eq!(mgr.version(), CgroupVersion::V1);
    assert_eq!(mgr.root(), root);
}

#[test]
fn v2_tree_enables_cpuset_in_every_ancestor() {
    let root = v2_tree("cg-v2", "cpuset cpu io memory pids\n");
    let mgr = directory_tree::detect(&root).unwrap();
    assert_eq!(mgr.version(), CgroupVersion::V2);
    assert_eq!(mgr.root(), root);

    let app = mgr.create(&path("topomgr/pod-2/app")).unwrap();
    assert_eq!(read(&root.join("cgroup.subtree_control")), "+cpuset");
    assert_eq!(
        read(&root.join("topomgr/cgroup.subtree_control")),
        "+cpuset"
    );
    assert_eq!(
        read(&root.join("topomgr/pod-2/cgroup.subtree_control")),
        "+cpuset"
    );
    assert!(
        !app.dir().join("cgroup.subtree_control").exists(),
        "the leaf holds processes: no controllers enabled below it"
    );
    // v2 cgroups inherit an empty cpuset: nothing copied down.
    assert!(!root.join("topomgr/cpuset.cpus").exists());

    mgr.set_cpuset(&app, &cpus("0,2"), &mems("0")).unwrap();
    assert_eq!(read(&app.dir().join("cpuset.cpus")), "0,2");
    assert_eq!(read(&app.dir().join("cpuset.mems")), "0");
    mgr.add_process(&app, 77).unwrap();
    assert_eq!(read(&app.procs_file()), "77");

    write(&app.dir().join("cpuset.cpus.effective"), "0,2\n");
    write(&app.dir().join("cpuset.mems.effective"), "0\n");
    assert_eq!(
        mgr.effective(&app).unwrap(),
        Cpuset {
            cpus: cpus("0,2"),
            mems: mems("0")
        }
    );

    // A sibling: the ancestors already list cpuset and are left alone.
    mgr.create(&path("topomgr/pod-2/other")).unwrap();
    assert_eq!(read(&root.join("cgroup.subtree_control")), "+cpuset");

    mgr.remove(&app, 2).unwrap();
    assert!(!app.dir().exists());
    assert!(root.join("topomgr/pod-2/other").is_dir());
}

#[test]
fn v2_without_cpuset_is_refused() {
    let root = v2_tree("cg-v2-nocpuset", "cpu memory\n");
    let mgr = directory_tree::detect(&root).unwrap();
    assert_eq!(
        mgr.create(&path("topomgr/p/app")).unwrap_err().to_string(),
        format!(
            "the cgroup v2 hierarchy at {} does not offer the cpuset controller (cgroup.controllers: \"cpu memory\"); enable cpuset for it (e.g. in its parent's cgroup.subtree_control)",
            root.display()
        )
    );
    assert!(!root.join("topomgr").exists());
}

/// Production code applies cpusets only to a mounted cgroup filesystem: a
/// directory tree shaped like one is refused, naming it, before anything
/// is written (the emulation is the cgroup crate's `directory_tree`).
#[test]
fn a_plain_directory_tree_is_not_a_cgroup_hierarchy() {
    let (dir, root) = v1_tree("cg-plain");
    assert_eq!(
        CgroupManager::detect(&dir).unwrap_err().to_string(),
        format!(
            "{} is not a mounted cgroup filesystem (cgroup v1 cpuset or cgroup2); set cgroup_root to the cgroup mount point (usually /sys/fs/cgroup)",
            root.display()
        )
    );
    assert!(!root.join("topomgr").exists());
    let v2 = v2_tree("cg-plain-v2", "cpuset cpu");
    assert!(CgroupManager::detect(&v2)
        .unwrap_err()
        .to_string()
        .starts_with(&format!(
            "{} is not a mounted cgroup filesystem",
            v2.display()
        )));
}

#[test]
fn no_hierarchy_is_a_clear_error() {
    let dir = common::scratch_dir("cg-none");
    assert_eq!(
        directory_tree::detect(&dir).unwrap_err().to_string(),
        format!(
            "no cgroup hierarchy with a cpuset controller under {}: expected cgroup v2 (cgroup.controllers) or a cgroup v1 cpuset controller (cpuset/cpuset.cpus); set cgroup_root to the cgroup mount point (usually /sys/fs/cgroup)",
            dir.display()
        )
    );
}

#[test]
fn paths_outside_the_root_are_refused() {
    let msg = |p: &str| CgroupPath::new(p).unwrap_err().to_string();
    assert_eq!(
        msg("/etc"),
        "cgroup path \"/etc\": absolute paths are refused; give a path relative to the cgroup root"
    );
    assert_eq!(
        msg("topomgr/../../etc"),
        "cgroup path \"topomgr/../../etc\": \"..\" components are refused; the path must stay under the cgroup root"
    );
    assert_eq!(
        msg("./topomgr"),
        "cgroup path \"./topomgr\": \".\" components are refused; write the path without them"
    );
    assert_eq!(
        msg(""),
        "cgroup path \"\": the path is empty; give a path relative to the cgroup root such as topomgr/<pod>/<container>"
    );
}

#[test]
fn symlink_escapes_are_refused() {
    let (dir, root) = v1_tree("cg-escape");
    let outside = dir.join("outside");
    fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("topomgr")).unwrap();
    let mgr = directory_tree::detect(&dir).unwrap();
    let want = format!(
        "cgroup path \"topomgr/pod-1/app\": {} resolves to {}, outside the cgroup root {}; symlinks out of the cgroup root are refused",
        root.join("topomgr").display(),
        outside.canonicalize().unwrap().display(),
        root.display()
    );
    assert_eq!(
        mgr.create(&path("topomgr/pod-1/app"))
            .unwrap_err()
            .to_string(),
        want
    );
    assert_eq!(
        fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written outside"
    );
    // A symlink deeper down, to a directory outside.
    fs::remove_file(root.join("topomgr")).unwrap();
    fs::create_dir_all(root.join("topomgr")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("topomgr/pod-1")).unwrap();
    assert_eq!(
        mgr.open(&path("topomgr/pod-1")).unwrap_err().to_string(),
        format!(
            "cgroup path \"topomgr/pod-1\": {} resolves to {}, outside the cgroup root {}; symlinks out of the cgroup root are refused",
            root.join("topomgr/pod-1").display(),
            outside.canonicalize().unwrap().display(),
            root.display()
        )
    );
}

/// A provider that gives each pod (by uid) a scripted allocation.
fn scripted(script: BTreeMap<String, Allocation>) -> testkit::FakeProvider {
    testkit::FakeProvider::new()
        .with_allocate(move |pod, _, _| Ok(script.get(&pod.uid).cloned().unwrap_or_default()))
}

fn pod(uid: &str) -> PodView {
    let mut p = testkit::guaranteed_pod(uid, &[("cpu", 1000)]);
    p.uid = uid.to_owned();
    p
}

/// The shared pool through [`NodeState`]: an exclusive admission takes its
/// CPUs out of every attached shared-pool cgroup before it returns; a
/// release gives them back only at `settle_pool` (after the caller saved);
/// an admission that would leave shared containers no CPU is refused with
/// nothing written.
#[test]
fn shared_pool_follows_exclusive_assignments() {
    let (dir, root) = v1_tree("cg-pool");
    let excl = |c: &str| Allocation::default().with_cpus(cpus(c), true);
    let shared = Allocation::default().with_cpus(cpus("0-3"), false);
    let script = BTreeMap::from([
        ("a".to_owned(), excl("1-2")),
        ("b".to_owned(), shared.clone()),
        ("c".to_owned(), shared),
        ("d".to_owned(), excl("0,3")),
    ]);
    let machine = testkit::machine(1, 4);
    let policy = Policy::new(
        "none",
        &BTreeMap::new(),
        NumaInfo::from_machine(&machine).unwrap(),
    )
    .unwrap();
    let admitter = Admitter::new(
        &machine,
        policy,
        Scope::Container,
        vec![LoadedProvider::in_process("scripted", scripted(script))],
    );
    let mut node = NodeState::new(admitter, Records::default(), &dir, "boot")
        .with_cgroups(directory_tree::detect(&dir).unwrap());
    let mgr = directory_tree::detect(&dir).unwrap();
    for uid in ["b", "c"] {
        assert!(node.admit(&pod(uid)).admitted);
        let p = format!("topomgr/{uid}/main");
        mgr.create(&path(&p)).unwrap();
        let a = node.attach(uid, "app", &p).unwrap();
        assert_eq!(
            (a.cpus.to_string(), a.mems.to_string()),
            ("0-3".into(), "0".into())
        );
    }
    assert!(node.admit(&pod("a")).admitted);
    for uid in ["b", "c"] {
        assert_eq!(
            read(&root.join(format!("topomgr/{uid}/main/cpuset.cpus"))),
            "0,3"
        );
    }
    mgr.create(&path("topomgr/a/main")).unwrap();
    assert_eq!(
        node.attach("a", "app", "topomgr/a/main")
            .unwrap()
            .cpus
            .to_string(),
        "1-2"
    );
    assert_eq!(read(&root.join("topomgr/a/main/cpuset.cpus")), "1-2");

    // Released, but the pool grows only once the caller made that durable.
    node.release("a").unwrap();
    assert_eq!(read(&root.join("topomgr/b/main/cpuset.cpus")), "0,3");
    node.settle_pool();
    assert_eq!(read(&root.join("topomgr/b/main/cpuset.cpus")), "0-3");

    // With "a" back, "d" would leave the shared containers no CPU.
    assert!(node.admit(&pod("a")).admitted);
    let r = node.admit(&pod("d"));
    assert_eq!(r.reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert_eq!(
        r.message.as_deref(),
        Some("CPUs 0,3 could not be taken out of the shared pool before the pod runs: the shared CPU pool would be empty: exclusive CPUs 0-3 cover every online CPU (0-3); shared-pool containers cannot run")
    );
    assert!(!node.pods().contains_key("d"));
    assert_eq!(node.admitter().ledger().exclusive_cpus().to_string(), "1-2");
    assert_eq!(read(&root.join("topomgr/c/main/cpuset.cpus")), "0,3");

    // A shared cgroup that is gone is forgotten, not an error.
    node.release("a").unwrap();
    fs::remove_dir_all(root.join("topomgr/c")).unwrap();
    node.settle_pool();
    assert_eq!(read(&root.join("topomgr/b/main/cpuset.cpus")), "0-3");
    assert!(!node.records().attachments.contains_key("c"));
}

fn status_field(pid: u32, field: &str) -> String {
    let text = read(Path::new(&format!("/proc/{pid}/status")));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn real_cgroup_applies_the_cpuset_to_a_process() {
    let mgr = common::real_cgroups("real_cgroup_applies_the_cpuset_to_a_process");
    let (cpus_file, mems_file) = match mgr.version() {
        CgroupVersion::V1 => ("cpuset.effective_cpus", "cpuset.effective_mems"),
        CgroupVersion::V2 => ("cpuset.cpus.effective", "cpuset.mems.effective"),
    };
    let root_cpus = cpus(read(&mgr.root().join(cpus_file)).trim());
    let root_mems = mems(read(&mgr.root().join(mems_file)).trim());
    let cpu = root_cpus.iter().last().expect("the root cpuset has CPUs");
    let mem = root_mems
        .iter()
        .next()
        .expect("the root cpuset has memory nodes");
    let one_cpu: CpuSet = std::iter::once(cpu).collect();
    let one_mem = NumaMask::single(mem);

    let p = path(&format!("topomgr-test/cgroup-{}/app", std::process::id()));
    let cg = mgr.create(&p).unwrap();
    mgr.set_cpuset(&cg, &one_cpu, &one_mem).unwrap();
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id();
    let moved = mgr.add_process(&cg, pid);
    let observed = (
        status_field(pid, "Cpus_allowed_list"),
        status_field(pid, "Mems_allowed_list"),
        mgr.procs(&cg).ok(),
        mgr.effective(&cg).ok(),
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // Its parent too; `topomgr-test` stays for tests running meanwhile.
    let removed = mgr.remove(&cg, 1);

    moved.unwrap();
    assert_eq!(
        observed,
        (
            cpu.to_string(),
            mem.to_string(),
            Some(vec![pid]),
            Some(Cpuset {
                cpus: one_cpu,
                mems: one_mem
            })
        )
    );
    removed.unwrap();
    assert!(!cg.dir().exists());
    assert!(!mgr
        .root()
        .join(format!("topomgr-test/cgroup-{}", std::process::id()))
        .exists());
}

/// A node over a v1 or v2 directory tree whose scripted provider gives
/// pod "a" CPU 1 and pod "c" CPU 2 exclusively, pod "b" the shared pool.
fn quota_node(dir: &Path, lift: bool) -> NodeState {
    let script = BTreeMap::from([
        (
            "a".to_owned(),
            Allocation::default().with_cpus(cpus("1"), true),
        ),
        (
            "b".to_owned(),
            Allocation::default().with_cpus(cpus("0-3"), false),
        ),
        (
            "c".to_owned(),
            Allocation::default().with_cpus(cpus("2"), true),
        ),
    ]);
    let machine = testkit::machine(1, 4);
    let policy = Policy::new(
        "none",
        &BTreeMap::new(),
        NumaInfo::from_machine(&machine).unwrap(),
    )
    .unwrap();
    let admitter = Admitter::new(
        &machine,
        policy,
        Scope::Container,
        vec![LoadedProvider::in_process("scripted", scripted(script))],
    );
    NodeState::new(admitter, Records::default(), dir, "boot")
        .with_cgroups(directory_tree::detect(dir).unwrap())
        .with_cpu_quota_lift(lift)
}

/// As the kubelet with `DisableCPUQuotaWithExclusiveCPUs` (on by default
/// since 1.33, kubernetes/kubernetes #127525): attaching a container with
/// exclusive CPUs lifts its CFS quota and its kubelet pod cgroup's (v1:
/// `cpu.cfs_quota_us = -1` in the cpu hierarchy beside the cpuset one),
/// keeping the period; a shared container's quota stays, and with
/// `disable_cpu_quota_with_exclusive_cpus = false` every quota stays.
#[test]
fn attaching_exclusive_cpus_lifts_the_cfs_quota_on_v1() {
    for lift in [true, false] {
        let (dir, root) = v1_tree(&format!("cg-quota-v1-{lift}"));
        let cpu = dir.join("cpu");
        fs::create_dir_all(&cpu).unwrap();
        write(&cpu.join("cpu.cfs_quota_us"), "-1\n");
        let cgroups = [
            ("a", "kubepods/poda/c1", "100000"),
            ("b", "kubepods/burstable/podb/c2", "50000"),
        ];
        for (_, p, quota) in cgroups {
            let parent = Path::new(p).parent().unwrap();
            for d in [parent, Path::new(p)] {
                fs::create_dir_all(cpu.join(d)).unwrap();
                write(&cpu.join(d).join("cpu.cfs_quota_us"), &format!("{quota}\n"));
                write(&cpu.join(d).join("cpu.cfs_period_us"), "100000\n");
            }
        }
        let mut node = quota_node(&dir, lift);
        let mgr = directory_tree::detect(&dir).unwrap();
        for (uid, p, _) in cgroups {
            assert!(node.admit(&pod(uid)).admitted);
            mgr.create(&path(p)).unwrap();
            node.attach(uid, "app", p).unwrap();
        }
        assert_eq!(read(&root.join("kubepods/poda/c1/cpuset.cpus")), "1");
        let quota = |p: &str| {
            read(&cpu.join(p).join("cpu.cfs_quota_us"))
                .trim()
                .to_owned()
        };
        let (a, pod_a) = if lift {
            ("-1", "-1")
        } else {
            ("100000", "100000")
        };
        assert_eq!(quota("kubepods/poda/c1"), a, "lift={lift}");
        assert_eq!(quota("kubepods/poda"), pod_a, "lift={lift}");
        assert_eq!(quota("kubepods/burstable/podb/c2"), "50000");
        assert_eq!(quota("kubepods/burstable/podb"), "50000");
        assert_eq!(
            read(&cpu.join("kubepods/poda/c1/cpu.cfs_period_us")).trim(),
            "100000"
        );
        let read_back = mgr.cpu_quota(&path("kubepods/poda/c1")).unwrap().unwrap();
        assert_eq!(
            (read_back.quota_us, read_back.period_us),
            (if lift { None } else { Some(100_000) }, 100_000)
        );
    }
}

/// The same on cgroup v2: `cpu.max` becomes `max <period>` where the cpu
/// controller is enabled; a cgroup without it (no `cpu.max`) has no quota
/// of its own and attaches as before.
#[test]
fn attaching_exclusive_cpus_lifts_the_cfs_quota_on_v2() {
    let root = v2_tree("cg-quota-v2", "cpuset cpu");
    write(&root.join("cpuset.cpus.effective"), "0-3");
    write(&root.join("cpuset.mems.effective"), "0");
    let mut node = quota_node(&root, true);
    let mgr = directory_tree::detect(&root).unwrap();
    assert!(node.admit(&pod("a")).admitted);
    let p = "kubepods.slice/kubepods-poda.slice/cri-containerd-c1.scope";
    mgr.create(&path(p)).unwrap();
    write(&root.join(p).join("cpu.max"), "100000 50000");
    write(
        &root.join("kubepods.slice/kubepods-poda.slice/cpu.max"),
        "200000 50000",
    );
    node.attach("a", "app", p).unwrap();
    assert_eq!(read(&root.join(p).join("cpu.max")), "max 50000");
    assert_eq!(
        read(&root.join("kubepods.slice/kubepods-poda.slice/cpu.max")),
        "max 50000"
    );
    assert_eq!(
        mgr.cpu_quota(&path(p))
            .unwrap()
            .map(|q| (q.quota_us, q.period_us)),
        Some((None, 50_000))
    );
    assert!(node.admit(&pod("c")).admitted);
    mgr.create(&path("other/c2")).unwrap();
    node.attach("c", "app", "other/c2").unwrap();
    assert!(!root.join("other/c2/cpu.max").exists());
    assert_eq!(mgr.cpu_quota(&path("other/c2")).unwrap(), None);
}
