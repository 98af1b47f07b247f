//! The CPU manager provider through the real binary and the real `.so`:
//! `topomgr provider cpu hints|allocate` and `topomgr admit` on the example
//! machine and on recorded machines of the corpus.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use topomgr_node::api::{Admissions, ProviderAllocation};

/// A config directory whose only drop-in enables the CPU provider with
/// `extra` appended to its `[providers.cpu.config]` table.
fn config_dir(tag: &str, policy: &str, extra: &str) -> PathBuf {
    let cpu = format!(
        "[providers.cpu]\nlibrary = {:?}\n[providers.cpu.config]\npolicy = \"static\"\n{extra}\n",
        common::cpu_plugin().display().to_string()
    );
    common::config_dir(
        tag,
        &format!("policy = \"{policy}\"\nscope = \"container\"\nplugin_dirs = []\nplugins_d = \"plugins.d\"\n"),
        &[("20-cpu.toml", &cpu)],
    )
}

fn pod_file(dir: &Path, name: &str, cpu: &str) -> PathBuf {
    let p = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &p,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  uid: {name}-uid\nspec:\n  containers:\n  - name: app\n    image: x\n    resources:\n      requests: {{cpu: \"{cpu}\", memory: 1Gi}}\n      limits: {{cpu: \"{cpu}\", memory: 1Gi}}\n"
        ),
    )
    .unwrap();
    p
}

/// `common::topomgr` with trimmed output.
fn topomgr(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let (code, out, err) = common::topomgr(dir, args);
    (code, out.trim().to_owned(), err.trim().to_owned())
}

fn hint_list(json: &str) -> Vec<String> {
    common::hint_list(json, "cpu")
}

fn example_sys() -> String {
    common::example_sys()
}

#[test]
fn hints_and_chained_allocations_on_the_example_machine() {
    let dir = config_dir("cpu-example", "single-numa-node", "reserved_cpus = \"0\"");
    let state = dir.join("state");
    let sys = example_sys();
    let two = pod_file(&dir, "two", "2").display().to_string();
    let three = pod_file(&dir, "three", "3").display().to_string();
    let shared = pod_file(&dir, "shared", "500m").display().to_string();
    let state_s = state.display().to_string();
    let base = [
        "provider",
        "cpu",
        "--sysfs-root",
        &sys,
        "--state-dir",
        &state_s,
    ];
    let run = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        topomgr(&dir, &a)
    };

    let (code, out, err) = run(&["hints", "--pod", &three]);
    assert_eq!(code, 0, "{err}");
    // Node 0 has 3 CPUs left beside reserved CPU 0.
    assert_eq!(
        hint_list(&out),
        [
            "0:true",
            "1:true",
            "2:true",
            "3:true",
            "0,1:false",
            "0,2:false",
            "0,3:false",
            "1,2:false",
            "1,3:false",
            "2,3:false",
            "0,1,2:false",
            "0,1,3:false",
            "0,2,3:false",
            "1,2,3:false",
            "0,1,2,3:false"
        ]
    );
    let (code, out, err) = run(&[
        "allocate",
        "--pod",
        &two,
        "--container",
        "app",
        "--hint",
        r#"{"affinity":[1],"preferred":true}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let v: ProviderAllocation = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v.cpus.to_string(), v.mems.to_string()),
        ("2,10".to_owned(), String::new())
    );
    // The next allocation sees the first one through the state directory.
    let (code, out, err) = run(&[
        "allocate",
        "--pod",
        &three,
        "--container",
        "app",
        "--hint",
        r#"{"affinity":[1],"preferred":true}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let v: ProviderAllocation = serde_json::from_str(&out).unwrap();
    // Core 3 on node 1, then the last CPU from the socket with the fewest
    // free CPUs: CPU 8, the sibling of reserved CPU 0.
    assert_eq!(v.cpus.to_string(), "3,8,11");
    let (code, out, err) = run(&[
        "allocate",
        "--pod",
        &shared,
        "--container",
        "app",
        "--hint",
        r#"{"affinity":null,"preferred":true}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let v: ProviderAllocation = serde_json::from_str(&out).unwrap();
    assert_eq!(v.cpus.to_string(), "0-1,4-7,9,12-15");
    // The allocated pod's hints are regenerated from its own CPUs (node 1).
    let (code, out, err) = run(&["hints", "--pod", &two]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(&hint_list(&out)[..3], ["1:true", "0,1:false", "1,2:false"]);
    // Node 1 is now full: a new 2-CPU pod no longer gets a node-1 hint.
    let other = pod_file(&dir, "other", "2").display().to_string();
    let (code, out, err) = run(&["hints", "--pod", &other]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(&hint_list(&out)[..3], ["0:true", "2:true", "3:true"]);
}

#[test]
fn refusals_name_the_reason() {
    let dir = config_dir(
        "cpu-refuse",
        "single-numa-node",
        "reserved_cpus = \"0\"\n[providers.cpu.config.options]\nfull-pcpus-only = \"true\"\n",
    );
    let sys = example_sys();
    let three = pod_file(&dir, "three", "3").display().to_string();
    let (code, _, err) = topomgr(
        &dir,
        &[
            "provider",
            "cpu",
            "--sysfs-root",
            &sys,
            "allocate",
            "--pod",
            &three,
            "--container",
            "app",
            "--hint",
            r#"{"affinity":[1],"preferred":true}"#,
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "topomgr: provider \"cpu\" refused: SMTAlignmentError: SMT alignment: request of 3 CPUs is not a multiple of 2 threads per core"
    );
    let big = pod_file(&dir, "big", "16").display().to_string();
    let plain = config_dir(
        "cpu-refuse-plain",
        "single-numa-node",
        "reserved_cpus = \"0\"",
    );
    let (code, _, err) = topomgr(
        &plain,
        &[
            "provider",
            "cpu",
            "--sysfs-root",
            &sys,
            "allocate",
            "--pod",
            &big,
            "--container",
            "app",
            "--hint",
            r#"{"affinity":[1],"preferred":true}"#,
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "topomgr: provider \"cpu\" refused: UnexpectedAdmissionError: not enough free CPUs: requested 16, 15 free on NUMA nodes 0-3"
    );
    let bad = config_dir(
        "cpu-bad-option",
        "best-effort",
        "[providers.cpu.config.options]\nfull-pcpus-only = \"true\"\ndistribute-cpus-across-cores = \"true\"\n",
    );
    let (code, _, err) = topomgr(
        &bad,
        &[
            "provider",
            "cpu",
            "--sysfs-root",
            &sys,
            "hints",
            "--pod",
            &three,
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("static policy options full-pcpus-only and distribute-cpus-across-cores can not be used at the same time"),
        "{err}"
    );
}

fn corpus_hints(machine: &str, cpu: &str) -> Vec<String> {
    let sys = common::unpack_corpus_machine(machine);
    let dir = config_dir(
        &format!("cpu-corpus-{machine}"),
        "best-effort",
        "reserved_cpus = \"\"",
    );
    let pod = pod_file(&dir, "p", cpu).display().to_string();
    let sys_s = sys.display().to_string();
    let (code, out, err) = topomgr(
        &dir,
        &[
            "provider",
            "cpu",
            "--sysfs-root",
            &sys_s,
            "hints",
            "--pod",
            &pod,
        ],
    );
    assert_eq!(code, 0, "{err}");
    hint_list(&out)
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_16amd64_8n2c_hints() {
    // 8 NUMA nodes of 2 CPUs.
    let h = corpus_hints("16amd64-8n2c", "3");
    // Every pair is a preferred hint (28), then every wider mask (219).
    assert_eq!(h.len(), 247);
    assert_eq!(h[0], "0,1:true");
    assert_eq!(h[27], "6,7:true");
    assert_eq!(h[28], "0,1,2:false");
    assert_eq!(h[246], "0,1,2,3,4,5,6,7:false");
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_64amd64_4s2n4ca2co_allocation() {
    let sys = common::unpack_corpus_machine("64amd64-4s2n4ca2co");
    let dir = config_dir("cpu-corpus-64amd64", "best-effort", "reserved_cpus = \"\"");
    let pod = pod_file(&dir, "p", "8").display().to_string();
    let sys_s = sys.display().to_string();
    let (code, out, err) = topomgr(
        &dir,
        &[
            "provider",
            "cpu",
            "--sysfs-root",
            &sys_s,
            "hints",
            "--pod",
            &pod,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let h = hint_list(&out);
    assert_eq!(&h[..2], ["0:true", "1:true"]);
    let (code, out, err) = topomgr(
        &dir,
        &[
            "provider",
            "cpu",
            "--sysfs-root",
            &sys_s,
            "allocate",
            "--pod",
            &pod,
            "--container",
            "app",
            "--hint",
            r#"{"affinity":[3],"preferred":true}"#,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: ProviderAllocation = serde_json::from_str(&out).unwrap();
    println!("64amd64-4s2n4ca2co: 8 CPUs on node 3 -> {}", v.cpus);
    assert_eq!(v.cpus.to_string(), CORPUS_64AMD64_NODE3_8);
}

/// What the 8-CPU allocation on node 3 of 64amd64-4s2n4ca2co gives.
const CORPUS_64AMD64_NODE3_8: &str = "24-31";

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_256ia64_64n2s2c_admits_a_4_cpu_pod_quickly() {
    let sys = common::unpack_corpus_machine("256ia64-64n2s2c");
    let dir = config_dir(
        "cpu-corpus-256ia64",
        "single-numa-node",
        "reserved_cpus = \"\"",
    );
    let pod = pod_file(&dir, "p", "4").display().to_string();
    let sys_s = sys.display().to_string();
    let (code, out, err) = topomgr(
        &dir,
        &[
            "provider",
            "cpu",
            "--sysfs-root",
            &sys_s,
            "hints",
            "--pod",
            &pod,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cpu"]["preferred_width"], 1);
    assert_eq!(v["cpu"]["minimal"].as_array().map(Vec::len), Some(64));
    let start = Instant::now();
    let (code, out, err) = topomgr(&dir, &["admit", "--sysfs-root", &sys_s, &pod]);
    let took = start.elapsed();
    assert_eq!(code, 0, "{err}");
    let v: Admissions = serde_json::from_str(&out).unwrap();
    let p = &v.pods[0];
    assert!(p.admitted, "{out}");
    let c = &p.containers[0];
    assert_eq!(c.affinity.map(|m| m.to_string()).as_deref(), Some("0"));
    assert_eq!(c.cpus.to_string(), "0-3");
    println!("256ia64-64n2s2c: admitting a 4-CPU Guaranteed pod end to end (process start included) took {took:?}");
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_hybrid_machine_never_hands_out_the_reserved_cpu() {
    // A real i7-1370P: 6 two-thread P-cores (CPUs 0-11) and 8 one-thread
    // E-cores (12-19); 20 CPUs on 14 cores make the kubelet's CPUsPerCore 1.
    // With CPU 0 reserved, P-core 0 is not whole: 2 CPUs come from the
    // E-cores (kubernetes #140495), never 0-1.
    let sys = common::unpack_corpus_machine("20em64t-hybrid-1p6c2t+2ca4co1t");
    let dir = config_dir("cpu-corpus-hybrid", "best-effort", "reserved_cpus = \"0\"");
    let sys_s = sys.display().to_string();
    let state = dir.join("state");
    let state_s = state.display().to_string();
    let mut held: Vec<String> = Vec::new();
    for (name, cpus, want) in [
        ("a", "2", "12-13"),
        ("b", "2", "14-15"),
        ("c", "3", "16-18"),
    ] {
        let pod = pod_file(&dir, name, cpus).display().to_string();
        let (code, out, err) = topomgr(
            &dir,
            &[
                "provider",
                "cpu",
                "--sysfs-root",
                &sys_s,
                "--state-dir",
                &state_s,
                "allocate",
                "--pod",
                &pod,
                "--container",
                "app",
                "--hint",
                r#"{"affinity":[0],"preferred":true}"#,
            ],
        );
        assert_eq!(code, 0, "{err}");
        let v: ProviderAllocation = serde_json::from_str(&out).unwrap();
        assert_eq!(v.cpus.to_string(), want, "pod {name}");
        held.push(want.to_owned());
    }
    assert_eq!(held, ["12-13", "14-15", "16-18"]);
}

/// `(node, capacity, allocatable, available)` of every `cpu` zone, in CPUs.
fn cpu_zones(p: &mut topomgr_engine::provider::LoadedProvider) -> Vec<(u32, u64, u64, u64)> {
    let inv = p.inventory().expect("inventory");
    let r = &inv.resources["cpu"];
    let zones: Vec<(u32, u64, u64, u64)> = r
        .zones
        .iter()
        .map(|z| {
            let a = z.amounts;
            let n = z.numa.expect("a node zone").get();
            (
                n,
                a.capacity / 1000,
                a.allocatable / 1000,
                a.available / 1000,
            )
        })
        .collect();
    let avail: u64 = zones.iter().map(|z| z.3 * 1000).sum();
    assert_eq!(r.total.available, avail);
    zones
}

#[test]
fn inventory_through_the_plugin_follows_allocations_and_restores() {
    use topomgr_sdk::testkit;
    let so = common::cpu_plugin();
    let cfg = serde_json::json!({"policy": "static", "reserved_cpus": "0"});
    let mut p = common::load_on_example_machine("cpu", so, cfg.clone());
    // 4 nodes of 4 CPUs (node 0: 0-1,8-9); CPU 0 reserved.
    assert_eq!(
        cpu_zones(&mut p),
        [(0, 4, 3, 3), (1, 4, 4, 4), (2, 4, 4, 4), (3, 4, 4, 4)]
    );
    let g = testkit::guaranteed_pod("g", &[("cpu", 3000), ("memory", 1 << 30)]);
    let a = p
        .allocate(&g, &g.containers[0], &testkit::hint("2:true"))
        .unwrap();
    assert_eq!(a.cpus.to_string(), "4-5,12");
    assert_eq!(
        cpu_zones(&mut p),
        [(0, 4, 3, 3), (1, 4, 4, 4), (2, 4, 4, 1), (3, 4, 4, 4)]
    );
    let mut q = common::load_on_example_machine("cpu", so, cfg);
    q.restore(&p.checkpoint().unwrap()).unwrap();
    assert_eq!(
        cpu_zones(&mut q),
        [(0, 4, 3, 3), (1, 4, 4, 4), (2, 4, 4, 1), (3, 4, 4, 4)]
    );
    q.release("g-uid", "app").unwrap();
    assert_eq!(
        cpu_zones(&mut q),
        [(0, 4, 3, 3), (1, 4, 4, 4), (2, 4, 4, 4), (3, 4, 4, 4)]
    );
}

/// A Guaranteed pod with pod-level resources (4 CPUs, 1Gi): a sidecar and
/// an app container with one exclusive CPU each, and a shared container.
fn pod_level_manifest(dir: &Path) -> PathBuf {
    let p = dir.join("pod-level.yaml");
    let one =
        "resources: {requests: {cpu: \"1\", memory: 100Mi}, limits: {cpu: \"1\", memory: 100Mi}}";
    std::fs::write(
        &p,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: pl\n  uid: pl-uid\nspec:\n  \
             resources: {{requests: {{cpu: \"4\", memory: 1Gi}}, limits: {{cpu: \"4\", memory: 1Gi}}}}\n  \
             initContainers:\n  - name: side\n    image: x\n    restartPolicy: Always\n    {one}\n  \
             containers:\n  - name: gu\n    image: x\n    {one}\n  - name: shared\n    image: x\n"
        ),
    )
    .unwrap();
    p
}

#[test]
fn pod_level_resources_through_admit_with_the_gate_off_and_on() {
    let sys = example_sys();
    for (gate, scope, want) in [
        // Off (the kubelet's default): every container in the shared pool.
        (
            false,
            "pod",
            [
                ("side", "0-15", false),
                ("gu", "0-15", false),
                ("shared", "0-15", false),
            ],
        ),
        // On, pod scope: the pod's 4 CPUs on node 1 (2-3,10-11), one each
        // for the sidecar and the app container, the rest shared by the pod.
        (
            true,
            "pod",
            [
                ("side", "2", true),
                ("gu", "10", true),
                ("shared", "3,11", true),
            ],
        ),
        // On, container scope: exclusive CPUs for the eligible containers,
        // the node's shared pool for the other one.
        (
            true,
            "container",
            [
                ("side", "8", true),
                ("gu", "1", true),
                ("shared", "0,2-7,9-15", false),
            ],
        ),
    ] {
        let tag = format!("cpu-pod-level-{gate}-{scope}");
        let extra = format!(
            "reserved_cpus = \"0\"\n[providers.cpu.config.feature_gates]\nPodLevelResourceManagers = {gate}"
        );
        let dir = config_dir(&tag, "single-numa-node", &extra);
        let cfg = std::fs::read_to_string(dir.join("topomgr.toml")).unwrap();
        std::fs::write(
            dir.join("topomgr.toml"),
            cfg.replace("scope = \"container\"", &format!("scope = \"{scope}\"")),
        )
        .unwrap();
        let pod = pod_level_manifest(&dir).display().to_string();
        let (code, out, err) = topomgr(&dir, &["admit", "--sysfs-root", &sys, &pod]);
        assert_eq!(code, 0, "{err}");
        let v: Admissions = serde_json::from_str(&out).unwrap();
        let p = &v.pods[0];
        assert!(p.admitted, "{tag}: {out}");
        assert_eq!(p.qos, topomgr_sdk::QosClass::Guaranteed, "{tag}");
        let got: Vec<(String, String, bool)> = p
            .containers
            .iter()
            .map(|c| (c.name.clone(), c.cpus.to_string(), c.exclusive))
            .collect();
        let want: Vec<(String, String, bool)> = want
            .iter()
            .map(|(n, c, e)| (n.to_string(), c.to_string(), *e))
            .collect();
        assert_eq!(got, want, "{tag}: {out}");
    }
}

/// A 6-CPU Guaranteed pod on a machine of 4-CPU NUMA nodes under
/// single-numa-node is refused saying the numbers (the CPU provider's hints
/// all span two nodes), as a refusal for a resource with no hint does.
#[test]
fn a_pod_larger_than_any_numa_node_is_refused_with_the_numbers() {
    let dir = config_dir("cpu-larger-than-a-node", "single-numa-node", "");
    let pod = pod_file(&dir, "big", "6").display().to_string();
    let sys = example_sys();
    let (code, out, err) = topomgr(&dir, &["admit", "--sysfs-root", &sys, &pod]);
    assert_eq!(code, 0, "{err}");
    let v: Admissions = serde_json::from_str(&out).unwrap();
    let p = &v.pods[0];
    assert!(!p.admitted, "{out}");
    let message = p.message.as_deref().unwrap();
    assert!(
        message.starts_with("Resources cannot be allocated with Topology Locality: container \"app\" needs every resource on one common NUMA node (policy single-numa-node); cpu (cpu): "),
        "{message}"
    );
    assert!(
        message.ends_with(" (requested 6; the largest NUMA node has 4 allocatable)"),
        "{message}"
    );
}
