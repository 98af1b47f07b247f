//! The GPU provider end to end: the real `libtopomgr_provider_gpu.so`
//! loaded by the `topomgr` binary. docs/providers.md's GPU demo on the example
//! 2-socket, 8-GPU machine (`examples/machines/2s8g`), GetPreferredAllocation
//! (`provider gpu preferred`) on the example's JSON topology and on the real
//! `nvidia-smi topo -m` captures of `../shared/gpu/` (`#[ignore]`d in a plain run),
//! state chained through `--state-dir`, re-admission and init-container
//! reuse, malformed topology files, and NVML through the scripted fake
//! `libnvidia-ml` (`tests/fake-nvml`).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use topomgr_node::api::{Admissions, ContainerAdmission, PreferredDevices};

const GPU: &str = "nvidia.com/gpu";

/// Runs `topomgr ARGS` from the workspace root with extra environment
/// variables; returns (status code, stdout, stderr).
fn run(args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
    let mut cmd = Command::new(common::topomgr_bin());
    cmd.current_dir(common::workspace_root()).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run topomgr");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Parses a successful command's JSON output.
fn json_of((code, out, err): (i32, String, String)) -> Value {
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn example_machine() -> PathBuf {
    common::workspace_root().join("examples/machines/2s8g")
}

/// A config directory enabling only the GPU provider (the library the
/// harness built), on the sysfs tree `sysfs`, with `gpu_config` as its
/// `[providers.gpu.config]` table.
fn gpu_only(tag: &str, sysfs: &Path, gpu_config: &str) -> PathBuf {
    let dir = common::scratch_dir(tag);
    fs::write(
        dir.join("topomgr.toml"),
        format!(
            "policy = \"single-numa-node\"\nsysfs_root = {:?}\nstate_dir = \"state\"\n",
            sysfs.display().to_string()
        ),
    )
    .unwrap();
    fs::create_dir_all(dir.join("plugins.d")).unwrap();
    fs::write(
        dir.join("plugins.d/40-gpu.toml"),
        format!(
            "[providers.gpu]\nlibrary = {:?}\n\n[providers.gpu.config]\n{gpu_config}\n",
            common::gpu_plugin().display().to_string()
        ),
    )
    .unwrap();
    dir
}

/// The example GPU machine with only the GPU provider, best-effort or
/// simple, its topology file named by absolute path.
fn example_gpu_only(tag: &str, policy: &str) -> PathBuf {
    let file = example_machine().join("gpu-topology.json");
    gpu_only(
        tag,
        &example_machine().join("sys"),
        &format!(
            "allocation_policy = {policy:?}\ntopology_file = {:?}",
            file.display().to_string()
        ),
    )
}

/// `topomgr --config DIR/topomgr.toml ARGS`, `dir` a config directory of
/// [`gpu_only`].
fn in_config(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
    let config = dir.join("topomgr.toml");
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend(args);
    run(&all, env)
}

/// `provider gpu preferred` in `dir`'s config, `flags` before `provider`.
fn preferred_call(
    dir: &Path,
    flags: &[&str],
    available: &[&str],
    must: &[&str],
    size: usize,
    env: &[(&str, &Path)],
) -> (i32, String, String) {
    let size = size.to_string();
    let available = available.join(",");
    let must = must.join(",");
    let mut args = flags.to_vec();
    args.extend([
        "provider",
        "gpu",
        "preferred",
        "--resource",
        GPU,
        "--available",
        &available,
        "--size",
        &size,
    ]);
    if !must.is_empty() {
        args.extend(["--must-include", &must]);
    }
    in_config(dir, &args, env)
}

/// `provider gpu hints` in `dir`'s config for a pod file.
fn hints_call(dir: &Path, pod: &Path, env: &[(&str, &Path)]) -> (i32, String, String) {
    in_config(
        dir,
        &["provider", "gpu", "hints", "--pod", pod.to_str().unwrap()],
        env,
    )
}

/// Writes a one-container pod `pod.yaml` asking for 2 GPUs into `dir`.
fn two_gpu_pod(dir: &Path, uid: &str) -> PathBuf {
    let pod = dir.join("pod.yaml");
    fs::write(
        &pod,
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, uid: {uid}}}\nspec:\n  containers:\n  - name: c\n    image: x\n    resources: {{limits: {{nvidia.com/gpu: 2}}}}\n"),
    )
    .unwrap();
    pod
}

/// `provider gpu preferred` in `dir`'s config; the device ids.
fn preferred(dir: &Path, available: &[&str], must: &[&str], size: usize) -> Vec<String> {
    let v = json_of(preferred_call(dir, &[], available, must, size, &[]));
    let answer: PreferredDevices =
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
    answer.devices
}

/// A sysfs tree of `nodes` NUMA nodes (2 CPUs each, socket = node) with
/// NVIDIA GPUs as PCI devices `(address, node)`.
fn tiny_machine(tag: &str, nodes: u32, gpus: &[(&str, u32)]) -> PathBuf {
    let sys = common::scratch_dir(tag).join("sys");
    let put = |path: PathBuf, text: String| {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text + "\n").unwrap();
    };
    let cpu = sys.join("devices/system/cpu");
    put(cpu.join("online"), format!("0-{}", 2 * nodes - 1));
    for c in 0..2 * nodes {
        put(
            cpu.join(format!("cpu{c}/topology/physical_package_id")),
            (c / 2).to_string(),
        );
        put(cpu.join(format!("cpu{c}/topology/core_id")), c.to_string());
    }
    for n in 0..nodes {
        let d = sys.join(format!("devices/system/node/node{n}"));
        put(d.join("cpulist"), format!("{}-{}", 2 * n, 2 * n + 1));
        put(
            d.join("meminfo"),
            format!("Node {n} MemTotal: 16777216 kB\nNode {n} MemFree: 16777216 kB"),
        );
        let row: Vec<&str> = (0..nodes)
            .map(|m| if m == n { "10" } else { "20" })
            .collect();
        put(d.join("distance"), row.join(" "));
    }
    for (address, node) in gpus {
        let d = sys.join("bus/pci/devices").join(address);
        put(d.join("vendor"), "0x10de".into());
        put(d.join("device"), "0x2330".into());
        put(d.join("class"), "0x030200".into());
        put(d.join("numa_node"), node.to_string());
    }
    sys
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_gpu_demo_aligns_nvlinked_gpus_with_cpus_and_memory() {
    common::repository_plugins();
    let pods = [
        "examples/gpu/too-many-gpus.yaml",
        "examples/gpu/train-2gpu.yaml",
        "examples/gpu/train-4gpu.yaml",
    ];
    let config = ["--config", "examples/gpu/topomgr.toml", "admit"];
    let args: Vec<&str> = config.iter().chain(&pods).copied().collect();
    let v: Admissions = serde_json::from_value(json_of(run(&args, &[]))).unwrap();
    let pods = &v.pods;
    assert_eq!(pods.len(), 3, "{v:?}");

    let rejected = &pods[0];
    assert_eq!(rejected.name, "too-many-gpus");
    assert!(!rejected.admitted);
    assert_eq!(rejected.reason.as_deref(), Some("TopologyAffinityError"));
    let message = rejected.message.as_deref().unwrap();
    assert!(
        message.contains("nvidia.com/gpu (gpu): preferred on {0-1}"),
        "{message}"
    );

    // 8 exclusive CPUs (whole cores; CPU 0 is reserved), memory and an
    // NVLink-bridged pair, all on node 0.
    let c = &pods[1].containers[0];
    assert_eq!(pods[1].name, "train-2gpu");
    assert!(pods[1].admitted);
    assert_eq!(
        (summary(c), c.exclusive),
        (
            ("0".to_owned(), "1-4,17-20".to_owned(), "0".to_owned()),
            true
        )
    );
    assert_eq!(c.devices[GPU], ["GPU-0", "GPU-1"]);
    assert_eq!(c.devices.len(), 1);
    assert_eq!(
        c.env,
        [(
            "NVIDIA_VISIBLE_DEVICES".to_owned(),
            "GPU-0,GPU-1".to_owned()
        )]
        .into()
    );

    // Node 0 has two GPUs left: the 4-GPU pod lands on node 1 whole.
    let c = &pods[2].containers[0];
    assert!(pods[2].admitted);
    assert_eq!(
        summary(c),
        ("1".to_owned(), "8-11,24-27".to_owned(), "1".to_owned())
    );
    assert_eq!(c.devices[GPU], ["GPU-4", "GPU-5", "GPU-6", "GPU-7"]);
    assert_eq!(c.devices.len(), 1);
    assert_eq!(
        c.env,
        [(
            "NVIDIA_VISIBLE_DEVICES".to_owned(),
            "GPU-4,GPU-5,GPU-6,GPU-7".to_owned()
        )]
        .into()
    );
}

/// A container's (affinity, cpus, mems) as lists (`"0-1"`; affinity `"any"`).
fn summary(c: &ContainerAdmission) -> (String, String, String) {
    (
        c.affinity.map_or("any".to_owned(), |m| m.to_string()),
        c.cpus.to_string(),
        c.mems.to_string(),
    )
}

/// A command of docs/providers.md's GPU section and the output it shows.
struct ReadmeCommand {
    /// The `topomgr` arguments, after `target/debug/topomgr`.
    args: Vec<String>,
    /// What the page says it prints.
    output: String,
}

/// The `topomgr` commands of docs/providers.md's `## NVIDIA GPUs` section, each with the
/// output shown after it: a `text` block after a `cargo build ... &&`
/// command, or a `# ` comment line after a plain one.
fn readme_gpu_commands() -> Vec<ReadmeCommand> {
    let readme = fs::read_to_string(common::workspace_root().join("docs/providers.md")).unwrap();
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("NVIDIA GPUs"))
        .expect("docs/providers.md has a `## NVIDIA GPUs` section");
    let lines: Vec<&str> = section.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let command = line
            .strip_prefix("cargo build --workspace && ")
            .unwrap_or(line);
        let Some(args) = command.strip_prefix("target/debug/topomgr ") else {
            continue;
        };
        let next = |k: usize| lines.get(i + k).copied().unwrap_or_default();
        let output = if (next(1), next(2), next(3)) == ("```", "", "```text") {
            let block: Vec<&str> = lines[i + 4..]
                .iter()
                .take_while(|l| **l != "```")
                .copied()
                .collect();
            block.join("\n") + "\n"
        } else {
            let comment = next(1)
                .strip_prefix("# ")
                .unwrap_or_else(|| panic!("docs/providers.md: no output shown after {line:?}"));
            comment.to_owned() + "\n"
        };
        let args = args.split_whitespace().flat_map(expand_glob).collect();
        found.push(ReadmeCommand { args, output });
    }
    found
}

/// A shell word as `sh` expands it from the workspace root: `DIR/*.EXT`
/// into the sorted matching paths, anything else as is.
fn expand_glob(word: &str) -> Vec<String> {
    let Some((dir, ext)) = word.split_once("/*.") else {
        return vec![word.to_owned()];
    };
    let mut paths: Vec<String> = fs::read_dir(common::workspace_root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(&format!(".{ext}")))
        .map(|name| format!("{dir}/{name}"))
        .collect();
    paths.sort();
    paths
}

#[test]
fn the_readme_gpu_commands_print_what_readme_shows() {
    common::repository_plugins();
    let commands = readme_gpu_commands();
    assert_eq!(
        commands.len(),
        3,
        "docs/providers.md's GPU section has three commands"
    );
    assert!(commands[0]
        .args
        .contains(&"examples/gpu/train-4gpu.yaml".to_owned()));
    for command in commands {
        let args: Vec<&str> = command.args.iter().map(String::as_str).collect();
        let (code, out, err) = run(&args, &[]);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert_eq!(out, command.output, "docs/providers.md: topomgr {args:?}");
    }
}

#[test]
fn preferred_on_the_example_topology() {
    let dir = example_gpu_only("gpu-preferred", "best-effort");
    let all = [
        "GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4", "GPU-5", "GPU-6", "GPU-7",
    ];
    // GPU-0 taken: the other bridged pair of node 0, not GPU-1 and a PCIe peer.
    assert_eq!(
        preferred(&dir, &["GPU-1", "GPU-2", "GPU-3", "GPU-5"], &[], 2),
        ["GPU-2", "GPU-3"]
    );
    // A GPU that must be included brings its NVLink partner and node.
    assert_eq!(
        preferred(&dir, &all, &["GPU-6"], 4),
        ["GPU-4", "GPU-5", "GPU-6", "GPU-7"]
    );
    assert_eq!(preferred(&dir, &all, &["GPU-3"], 2), ["GPU-2", "GPU-3"]);
    // Results follow the order of available, as upstream's.
    assert_eq!(
        preferred(&dir, &["GPU-7", "GPU-1", "GPU-6", "GPU-0"], &[], 2),
        ["GPU-7", "GPU-6"]
    );
    // The simple policy: required first, then by index.
    let simple = example_gpu_only("gpu-preferred-simple", "simple");
    assert_eq!(
        preferred(
            &simple,
            &["GPU-7", "GPU-1", "GPU-6", "GPU-0"],
            &["GPU-6"],
            2
        ),
        ["GPU-6", "GPU-0"]
    );
    // Unknown devices are unusable input.
    let (code, _, err) = preferred_call(&dir, &[], &["GPU-0", "GPU-9"], &[], 1, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("resource nvidia.com/gpu has no device \"GPU-9\""),
        "{err}"
    );
}

#[test]
#[ignore = "needs the nvidia-smi captures of ../shared/gpu"]
fn preferred_on_the_real_nvidia_smi_captures() {
    let all = [
        "GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4", "GPU-5", "GPU-6", "GPU-7",
    ];
    // Every pair shows NV12 (DGX A100) or NV18 (HGX H20) and nothing else,
    // so every partition scores the same and upstream keeps its first.
    type Case<'a> = (&'a [&'a str], &'a [&'a str], usize, &'a [&'a str]);
    let cases: [Case; 6] = [
        (&all, &[], 2, &["GPU-0", "GPU-1"]),
        (
            &["GPU-5", "GPU-2", "GPU-7", "GPU-0"],
            &[],
            2,
            &["GPU-5", "GPU-2"],
        ),
        // [[0,1,2],[3,4,5],[6,7,pad]] holds GPU-7 only padded; the first
        // partition holding it unpadded is [[0,1,2],[3,4,7],[5,6,pad]].
        (&all, &["GPU-7"], 3, &["GPU-3", "GPU-4", "GPU-7"]),
        (&all, &["GPU-6"], 4, &["GPU-4", "GPU-5", "GPU-6", "GPU-7"]),
        (&all, &[], 5, &["GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4"]),
        (
            &["GPU-3", "GPU-4", "GPU-1", "GPU-6"],
            &["GPU-6"],
            2,
            &["GPU-1", "GPU-6"],
        ),
    ];
    for (file, nodes) in [
        ("nvidia-smi-topo-dgx-a100.txt", 8),
        ("nvidia-smi-topo-hgx-h20.txt", 2),
    ] {
        let capture = common::workspace_root().join("../shared/gpu").join(file);
        assert!(
            capture.is_file(),
            "needs the nvidia-smi captures: {} is absent (../shared/gpu beside the repository)",
            capture.display()
        );
        let sys = tiny_machine(&format!("capture-sys-{nodes}"), nodes, &[]);
        let dir = gpu_only(
            &format!("capture-{nodes}"),
            &sys,
            &format!("topology_file = {:?}", capture.display().to_string()),
        );
        for (available, must, size, expected) in cases {
            assert_eq!(
                preferred(&dir, available, must, size),
                expected,
                "{file}: available {available:?} must-include {must:?} size {size}"
            );
        }
        // The capture's NUMA Affinity column is the devices' nodes.
        let pod = two_gpu_pod(&dir, "capture-pod");
        let hints = hints_call(&dir, &pod, &[]);
        assert_eq!(hints.0, 0, "{}", hints.2);
        let preferred_hints: Vec<String> = common::hint_list(&hints.1, GPU)
            .into_iter()
            .filter(|h| h.ends_with(":true"))
            .collect();
        let expected: &[&str] = if nodes == 8 {
            &["1:true", "3:true", "5:true", "7:true"]
        } else {
            &["0:true", "1:true"]
        };
        assert_eq!(preferred_hints, expected, "{file}");
    }
}

#[test]
fn state_chains_through_the_state_dir_and_held_gpus_are_kept() {
    // `admit --state-dir` takes the node lock of the real hierarchy.
    let _node = common::node_guard();
    let dir = example_gpu_only("gpu-state", "best-effort");
    let state = dir.join("state");
    let pod = |name: &str| format!("examples/gpu/{name}.yaml");
    let call = |verb: &str, pod: &str, extra: &[&str]| {
        let mut args = vec![
            "provider",
            "gpu",
            verb,
            "--state-dir",
            state.to_str().unwrap(),
            "--pod",
            pod,
        ];
        args.extend(extra);
        in_config(&dir, &args, &[])
    };
    let allocate = |pod: &str, hint: &str| {
        json_of(call(
            "allocate",
            pod,
            &["--container", "trainer", "--hint", hint],
        ))
    };
    let node0 = r#"{"affinity": [0], "preferred": true}"#;
    let node1 = r#"{"affinity": [1], "preferred": true}"#;
    let a = allocate(&pod("train-2gpu"), node0);
    assert_eq!(a["devices"], json!({GPU: ["GPU-0", "GPU-1"]}));
    assert_eq!(a["env"], json!({"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"}));
    // Restored in the next call: node 0 has two GPUs left.
    let h = call("hints", &pod("train-4gpu"), &[]);
    assert_eq!(h.0, 0, "{}", h.2);
    assert_eq!(common::hint_list(&h.1, GPU), ["1:true", "0,1:false"]);
    let b = allocate(&pod("train-4gpu"), node1);
    assert_eq!(
        strings(&b["devices"][GPU]),
        ["GPU-4", "GPU-5", "GPU-6", "GPU-7"]
    );
    // Re-admission: a container that holds its GPUs gets them again, and
    // its hints come from them.
    let again = allocate(&pod("train-2gpu"), node0);
    assert_eq!(again["devices"], a["devices"]);
    let h = call("hints", &pod("train-2gpu"), &[]);
    assert_eq!(common::hint_list(&h.1, GPU), ["0:true", "0,1:false"]);
    let saved: Value =
        serde_json::from_slice(&common::provider_state(&state, "gpu")).expect("JSON state");
    // Each GPU is saved with its PCI address, so that it is found again
    // under another id or resource.
    let gpu = |id: &str, pci: &str| json!({"id": id, "identity": [format!("pci:{pci}")]});
    assert_eq!(
        saved["assignments"],
        json!([
            {"pod_uid": "6f1c2a3e-0101-4c8e-9a51-000000000101", "container": "trainer",
             "resource": GPU, "devices": [gpu("GPU-0", "0000:17:00.0"), gpu("GPU-1", "0000:18:00.0")]},
            {"pod_uid": "6f1c2a3e-0102-4c8e-9a51-000000000102", "container": "trainer",
             "resource": GPU, "devices": [gpu("GPU-4", "0000:86:00.0"), gpu("GPU-5", "0000:87:00.0"),
                 gpu("GPU-6", "0000:af:00.0"), gpu("GPU-7", "0000:b0:00.0")]}
        ])
    );

    // `admit --state-dir` chains the same way, pods seeing those before.
    let admit_state = dir.join("admit-state");
    let admit = |pods: &[&str]| {
        let mut args = vec!["admit", "--state-dir", admit_state.to_str().unwrap()];
        args.extend(pods);
        serde_json::from_value::<Admissions>(json_of(in_config(&dir, &args, &[]))).unwrap()
    };
    let first = admit(&["examples/gpu/train-4gpu.yaml"]);
    assert_eq!(summary(&first.pods[0].containers[0]).0, "0");
    let second = admit(&[
        "examples/gpu/train-2gpu.yaml",
        "examples/gpu/too-many-gpus.yaml",
    ]);
    let c = &second.pods[0].containers[0];
    assert_eq!(summary(c).0, "1", "node 0 is full");
    assert_eq!(c.devices[GPU], ["GPU-4", "GPU-5"]);
    assert!(!second.pods[1].admitted);
}

#[test]
fn init_container_gpus_are_reused_by_the_app_container() {
    let dir = example_gpu_only("gpu-reuse", "best-effort");
    let pod = dir.join("pod.yaml");
    fs::write(
        &pod,
        r#"apiVersion: v1
kind: Pod
metadata:
  name: warm-then-train
  namespace: ml
  uid: 6f1c2a3e-0104-4c8e-9a51-000000000104
spec:
  initContainers:
    - name: warmup
      image: x
      resources:
        limits: {nvidia.com/gpu: 2}
    - name: monitor
      image: x
      restartPolicy: Always
      resources:
        limits: {nvidia.com/gpu: 1}
  containers:
    - name: trainer
      image: x
      resources:
        limits: {nvidia.com/gpu: 2}
"#,
    )
    .unwrap();
    let v = json_of(in_config(&dir, &["admit", pod.to_str().unwrap()], &[]));
    let v: Admissions = serde_json::from_value(v).unwrap();
    let devices: Vec<(String, Vec<String>)> = v.pods[0]
        .containers
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                c.devices.get(GPU).cloned().unwrap_or_default(),
            )
        })
        .collect();
    // The init container's pair goes on: the sidecar keeps one of them for
    // itself, the app container reuses the other and takes one more.
    assert_eq!(
        devices,
        [
            (
                "warmup".to_owned(),
                vec!["GPU-0".to_owned(), "GPU-1".to_owned()]
            ),
            ("monitor".to_owned(), vec!["GPU-0".to_owned()]),
            (
                "trainer".to_owned(),
                vec!["GPU-1".to_owned(), "GPU-2".to_owned()]
            ),
        ]
    );
    assert_eq!(
        v.pods[0].containers[2].env,
        [(
            "NVIDIA_VISIBLE_DEVICES".to_owned(),
            "GPU-1,GPU-2".to_owned()
        )]
        .into()
    );
}

#[test]
fn malformed_topology_files_stop_the_provider_naming_file_and_place() {
    let sys = example_machine().join("sys");
    let cases: [(&str, &str, &str); 6] = [
        (
            "ragged.txt",
            "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV2\t0-7\t0\nGPU1\tNV2\t0-7\t0\n",
            "line 3: row GPU1 has 3 fields after its label, but the header has 2 matrix columns and 2 more (CPU Affinity, NUMA Affinity)",
        ),
        (
            "label.txt",
            "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV99\t0-7\t0\nGPU1\tNV99\t X \t0-7\t0\n",
            "line 2, column GPU1: ",
        ),
        (
            "asymmetric.txt",
            "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPIX\t0-7\t0\nGPU1\tPXB\t X \t0-7\t0\n",
            "line 2, column GPU1: GPU0 to GPU1 is PIX, but line 3 says GPU1 to GPU0 is PXB: links are symmetric",
        ),
        (
            "twice.json",
            r#"{"gpus": [{"index": 0, "id": "GPU-a", "numa": 0}, {"index": 1, "id": "GPU-a", "numa": 1}], "links": []}"#,
            "gpus[1].id: `GPU-a` is also the id of gpus[0]",
        ),
        (
            "link.json",
            r#"{"gpus": [{"index": 0, "id": "GPU-a"}, {"index": 1, "id": "GPU-b"}], "links": [[0, 1, "NVLINK"]]}"#,
            "links[0]: ",
        ),
        (
            "node.json",
            r#"{"gpus": [{"index": 0, "id": "GPU-a", "numa": 3}], "links": []}"#,
            ": GPU 0 (`GPU-a`) is on NUMA node 3, which this machine does not have (nodes: 0,1)",
        ),
    ];
    for (name, text, expected) in cases {
        let file = common::scratch_dir("gpu-malformed").join(name);
        fs::write(&file, text).unwrap();
        let dir = gpu_only(
            "gpu-malformed-config",
            &sys,
            &format!("topology_file = {:?}", file.display().to_string()),
        );
        let (code, out, err) = preferred_call(&dir, &[], &["GPU-a"], &[], 1, &[]);
        assert_ne!(code, 0, "{name}: {out}");
        assert!(out.is_empty(), "{name}: {out}");
        let place = format!("topology file {}", file.display());
        assert!(
            err.contains("provider `gpu`")
                && err.contains(
                    "failed to start: InvalidConfig in [providers.gpu.config] (configured in "
                )
                && err.contains(&place)
                && err.contains(expected),
            "{name}: {err}"
        );
    }
}

#[test]
fn nvml_through_the_plugin_with_a_scripted_libnvidia_ml() {
    // Four GPUs, two per node, NVLink-bridged in pairs on one PCIe switch.
    let bus = |i: usize| format!("00000000:{:02X}:00.0", 0x07 + 0x10 * i);
    let address = |i: usize| format!("0000:{:02x}:00.0", 0x07 + 0x10 * i);
    let uuid = |i: usize| format!("GPU-5c1d{i}e8a-fake");
    let partner = |i: usize| i ^ 1;
    let script = json!({
        "gpus": (0..4).map(|i| json!({
            "uuid": uuid(i),
            "bus_id": bus(i),
            "nvlinks": (0..4).map(|_| json!({"remote_bus_id": bus(partner(i)), "remote_type": 0})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "common_ancestor": (0..4).map(|a| (0..4).map(|b| {
            if a == b { 0 } else if a / 2 == b / 2 { 10 } else { 50 }
        }).collect::<Vec<_>>()).collect::<Vec<_>>(),
    });
    let gpus: Vec<(String, u32)> = (0..4).map(|i| (address(i), i as u32 / 2)).collect();
    let gpu_refs: Vec<(&str, u32)> = gpus.iter().map(|(a, n)| (a.as_str(), *n)).collect();
    let sys = tiny_machine("nvml-sys", 2, &gpu_refs);
    let dir = gpu_only(
        "nvml",
        &sys,
        &format!(
            "nvml_library = {:?}",
            common::fake_nvml().display().to_string()
        ),
    );
    let script_path = dir.join("script.json");
    fs::write(&script_path, script.to_string()).unwrap();
    let env = [("FAKE_NVML_SCRIPT", script_path.as_path())];
    let ids: Vec<String> = [0, 2, 1, 3].iter().map(|&i| uuid(i)).collect();
    let available: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (code, out, err) = preferred_call(&dir, &["-v"], &available, &[], 2, &env);
    assert_eq!(code, 0, "{err}");
    // NVML's links decide: GPU 0 with its NVLink partner, not the next in
    // available (without links every pair would score 0).
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["devices"],
        json!([uuid(0), uuid(1)])
    );
    let source = format!("source=NVML ({})", common::fake_nvml().display());
    assert!(err.contains(&source) && err.contains("gpus=4"), "{err}");

    // NUMA nodes from the machine's PCI devices.
    let pod = two_gpu_pod(&dir, "nvml-pod");
    let (code, out, err) = hints_call(&dir, &pod, &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        common::hint_list(&out, GPU),
        ["0:true", "1:true", "0,1:false"]
    );
    // Across both nodes (a non-preferred hint) the NVLink pair is chosen.
    let v = json_of(in_config(
        &dir,
        &[
            "provider",
            "gpu",
            "allocate",
            "--pod",
            pod.to_str().unwrap(),
            "--container",
            "c",
            "--hint",
            r#"{"affinity": [0, 1], "preferred": false}"#,
        ],
        &env,
    ));
    assert_eq!(v["devices"], json!({GPU: [uuid(0), uuid(1)]}));
    assert_eq!(
        v["env"],
        json!({"NVIDIA_VISIBLE_DEVICES": format!("{},{}", uuid(0), uuid(1))})
    );
}
