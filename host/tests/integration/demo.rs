//! The README's main command: the example pods on the example machine with
//! the repository's own `topomgr.toml` and `plugins.d/` (CPU, memory and the
//! SDK example provider).

use crate::common;

use std::process::Command;

use topomgr_node::api::{Admission, Admissions, ContainerAdmission, PodList};

/// A container's affinity as the JSON prints it (`[0]`, `[0,1]`, `null`).
fn affinity(c: &ContainerAdmission) -> String {
    serde_json::to_string(&c.affinity).unwrap()
}

#[test]
fn readme_demo_admits_and_rejects_as_documented() {
    // Builds the providers into target/debug, beside the topomgr binary,
    // where the host looks for them.
    let _ = common::plugins();
    let _ = common::cpu_plugin();
    let _ = common::memory_plugin();
    let _ = common::sriov_plugin();
    let _ = common::gpu_plugin();
    let root = common::workspace_root();
    let mut pods: Vec<_> = std::fs::read_dir(root.join("examples/pods"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    pods.sort();
    let out = Command::new(common::topomgr_bin())
        .current_dir(&root)
        .args([
            "--config",
            "topomgr.toml",
            "admit",
            "--sysfs-root",
            "examples/machines/2s4n/sys",
        ])
        .args(&pods)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Admissions = serde_json::from_slice(&out.stdout).unwrap();
    let summary: Vec<String> = v
        .pods
        .iter()
        .map(|p| {
            let containers: Vec<String> = p
                .containers
                .iter()
                .map(|c| {
                    format!(
                        "{}@{}:{}{}",
                        c.name,
                        affinity(c),
                        c.cpus,
                        if c.exclusive { "*" } else { "" }
                    )
                })
                .collect();
            format!(
                "{} {} {}",
                p.name,
                if p.admitted {
                    "admitted"
                } else {
                    p.reason.as_deref().unwrap()
                },
                containers.join(",")
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "besteffort admitted batch@null:0-15",
            "burstable admitted web@null:0-15",
            "guaranteed-2cpu admitted app@[0]:1,9*",
            "guaranteed-widgets admitted trainer@[1]:2-3,10-11*",
            // The sidecar reuses the init container's CPU and keeps it.
            "init-and-sidecar admitted fetch-model@[0]:8*,log-shipper@[0]:8*,server@[2]:4,12*",
            "too-wide TopologyAffinityError ",
            "first admitted app@[2]:5*",
            "second admitted app@null:0,6-7,13-15",
        ]
    );
}

/// Issue 5's end-to-end example: pod scope under single-numa-node with the
/// CPU and memory providers (`examples/pod-scope/`, docs/getting-started.md).
#[test]
fn pod_scope_example_aligns_cpus_and_memory_on_one_node() {
    let _ = common::plugins();
    let _ = common::cpu_plugin();
    let _ = common::memory_plugin();
    let _ = common::sriov_plugin();
    let _ = common::gpu_plugin();
    let root = common::workspace_root();
    let out = Command::new(common::topomgr_bin())
        .current_dir(&root)
        .env("TOPOMGR_SCOPE", "pod")
        .args([
            "--config",
            "topomgr.toml",
            "admit",
            "--sysfs-root",
            "examples/machines/2s4n/sys",
        ])
        .args([
            "examples/pod-scope/batch-too-many-cpus.yaml",
            "examples/pod-scope/cache-too-big.yaml",
            "examples/pod-scope/db-hugepages.yaml",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Admissions = serde_json::from_slice(&out.stdout).unwrap();
    let pods = &v.pods;
    // Rejections name the resource that could not be placed on one node.
    assert_eq!(pods[0].reason.as_deref(), Some("TopologyAffinityError"));
    let m0 = pods[0].message.as_deref().unwrap();
    assert!(m0.contains("cpu (cpu): preferred on {0-1}"), "{m0}");
    let m1 = pods[1].message.as_deref().unwrap();
    assert!(m1.contains("memory (memory): preferred on {0,2}"), "{m1}");
    // The admitted pod: every container's CPUs and memory on node 0.
    let db = &pods[2];
    assert!(db.admitted);
    let got: Vec<(String, String, String)> = db
        .containers
        .iter()
        .map(|c| (affinity(c), c.cpus.to_string(), c.mems.to_string()))
        .collect();
    assert_eq!(
        got,
        [
            ("[0]".to_string(), "1,9".to_string(), "0".to_string()),
            ("[0]".to_string(), "8".to_string(), "0".to_string())
        ]
    );
}

/// docs/getting-started.md's state directory: pods admitted on the example
/// machine with `--state-dir`, then released from it with the same
/// `--sysfs-root`, quietly (no restore warning about a machine the pods
/// were never on) and completely.
#[test]
fn getting_started_state_dir_admit_then_release_on_the_example_machine() {
    // The repository's config: `admit --state-dir` takes the node lock of
    // the machine's cgroup hierarchy, as other tests on it do.
    let _node = common::node_guard();
    let _ = common::plugins();
    common::repository_plugins();
    let root = common::workspace_root();
    let state = common::scratch_dir("getting-started-release").join("state");
    let state = state.to_str().unwrap();
    let run = |args: &[&str]| {
        Command::new(common::topomgr_bin())
            .current_dir(&root)
            .args(["--config", "topomgr.toml"])
            .args(args)
            .output()
            .unwrap()
    };
    let sys = "examples/machines/2s4n/sys";
    let out = run(&[
        "admit",
        "--sysfs-root",
        sys,
        "--state-dir",
        state,
        "examples/pods/guaranteed-2cpu.yaml",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Admissions = serde_json::from_slice(&out.stdout).unwrap();
    let uid = v.pods[0].uid.clone();
    assert!(v.pods[0].admitted, "{v:?}");

    let out = run(&["release", "--state-dir", state, "--sysfs-root", sys, &uid]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("does not match"), "{err}");
    let released: Admission = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(released.uid, uid);

    let out = run(&["pods", "--state-dir", state, "--sysfs-root", sys]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pods: PodList = serde_json::from_slice(&out.stdout).unwrap();
    assert!(pods.pods.is_empty(), "{pods:?}");

    // --sysfs-root belongs to --state-dir: alone (the daemon reads its own
    // machine) it is refused.
    let out = run(&["release", "--sysfs-root", sys, &uid]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--state-dir"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
