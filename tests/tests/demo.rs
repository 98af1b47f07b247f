//! The README's main command: the example pods on the example machine with
//! the repository's own `topomgr.toml` and `plugins.d/`.

mod common;

use std::process::Command;

#[test]
fn readme_demo_admits_and_rejects_as_documented() {
    // Builds the example provider into target/debug/examples, where the
    // repository's topomgr.toml looks for it.
    let _ = common::plugins();
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
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary: Vec<String> = v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let containers: Vec<String> = p["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| format!("{}@{}", c["name"].as_str().unwrap(), c["affinity"]))
                .collect();
            format!(
                "{} {} {}",
                p["name"].as_str().unwrap(),
                if p["admitted"] == true {
                    "admitted"
                } else {
                    p["reason"].as_str().unwrap()
                },
                containers.join(",")
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "besteffort admitted batch@null",
            "burstable admitted web@null",
            "guaranteed-2cpu admitted app@[0]",
            "guaranteed-widgets admitted trainer@[1]",
            "init-and-sidecar admitted fetch-model@[0],log-shipper@null,server@[2]",
            "too-wide TopologyAffinityError ",
            "first admitted app@[2]",
            "second admitted app@null",
        ]
    );
}
