//! Reconciliation: topomgr takes its saved state back on the machine and
//! config as they are now, keeps every pod, and refuses only what truly
//! conflicts.
//!
//! `reported_*` drive the host's side with the mock provider's scripted
//! report (conflicts in health and metrics, moves in the pod table and the
//! state). `MATRIX` changes a generated copy of the example machine's sysfs
//! tree (or the config) between two runs, with or without a pod held,
//! through the one-shot CLI (`--state-dir`) and across a daemon restart,
//! and asserts after each: an admission that does not touch a conflict goes
//! on, no CPU or device is held by two pods, and conflicts are reported
//! where (and only where) a held pod lost part of what it holds.

use crate::common;
use crate::daemon::Daemon;

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use topomgr_client::http::Client;
use topomgr_node::api::{Admission, Admissions, Health, HealthStatus, PodList};

fn pod_yaml(uid: &str, cpu: &str, memory: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {uid}\n  namespace: t\n  uid: {uid}\nspec:\n  containers:\n  - name: app\n    resources:\n      limits:\n        cpu: \"{cpu}\"\n        memory: {memory}\n"
    )
}

fn health(c: &mut Client) -> Health {
    c.get("/v1/health").unwrap().parse().unwrap()
}

fn metrics(c: &mut Client) -> String {
    String::from_utf8(c.get("/metrics").unwrap().body).unwrap()
}

/// A config directory on the example machine (no cgroup hierarchy) with
/// the mock provider configured by `mock` (TOML lines of its config).
fn mock_config(tag: &str, mock: &str) -> PathBuf {
    let dir = common::scratch_dir(tag);
    fs::write(
        dir.join("topomgr.toml"),
        format!(
            "policy = \"best-effort\"\nsysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n[providers.mock]\nlibrary = \"{}\"\n[providers.mock.config]\n{mock}\n",
            common::example_sys(),
            common::plugins().mock.display()
        ),
    )
    .unwrap();
    dir
}

/// A conflict a provider reports at restore is listed in health (status
/// `degraded`) and counted in metrics; admissions go on; it clears when
/// its pod is released, and a report naming a pod that is not held is
/// dropped.
#[test]
fn reported_conflicts_are_in_health_and_metrics_until_the_pod_is_released() {
    let dir = mock_config(
        "reconcile-conflicts",
        "reconciled = { conflicts = [{ pod_uid = \"held\", container = \"app\", resource = \"example.com/foo\", missing = \"device foo-1 is gone\", ids = [\"foo-1\"] }] }",
    );
    let config = dir.join("topomgr.toml");
    let socket = dir.join("t.sock");
    let d = Daemon::start(&config, &socket);
    let mut c = d.client();
    // Nothing restored yet: nothing reported.
    assert_eq!(health(&mut c).status, HealthStatus::Ok);
    common::admitted(&mut c, &pod_yaml("held", "1", "1Gi"));
    d.stop();

    let d = Daemon::start(&config, &socket);
    let mut c = d.client();
    let h = health(&mut c);
    assert_eq!(h.status, HealthStatus::Degraded, "{h:?}");
    assert_eq!(
        serde_json::to_value(&h.conflicts).unwrap(),
        json!([{"provider": "mock", "pod": "held", "container": "app",
                "resource": "example.com/foo", "missing": "device foo-1 is gone",
                "ids": ["foo-1"]}])
    );
    let m = metrics(&mut c);
    for line in [
        "topomgr_reconcile_conflicts{provider=\"mock\",resource=\"example.com/foo\"} 1",
        "topomgr_reconcile_missing_held{provider=\"mock\",resource=\"example.com/foo\"} 1",
    ] {
        assert!(m.lines().any(|l| l == line), "{line:?} missing:\n{m}");
    }
    // An admission that does not touch the conflict goes on.
    common::admitted(&mut c, &pod_yaml("other", "1", "1Gi"));
    // Released, the pod's conflict ends.
    let r = c.delete("/v1/pods/held").unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let h = health(&mut c);
    assert_eq!(
        (h.status, h.conflicts.len()),
        (HealthStatus::Ok, 0),
        "{h:?}"
    );
    let m = metrics(&mut c);
    assert!(
        !m.contains("topomgr_reconcile_conflicts{")
            && !m.contains("topomgr_reconcile_missing_held{"),
        "a cleared conflict is still counted:\n{m}"
    );
    d.stop();
    // The provider reports it again at the next start, for a pod that is
    // gone: nothing to hold, nothing reported.
    let d = Daemon::start(&config, &socket);
    let h = health(&mut d.client());
    assert_eq!(
        (h.status, h.conflicts.len()),
        (HealthStatus::Ok, 0),
        "{h:?}"
    );
}

/// A device found again under another id: the pod table follows (so
/// `/v1/pods` and the ledger name what the provider holds), the change is
/// saved, and the next start agrees.
#[test]
fn reported_moves_follow_into_the_pod_table_and_the_state() {
    let dir = mock_config(
        "reconcile-moves",
        "allocation = { devices = { \"example.com/foo\" = [\"foo-0\"] } }\n\
         inventory = { resources = { \"example.com/foo\" = { total = { capacity = 1, allocatable = 1, available = 1 }, zones = [] } } }\n\
         reconciled = { moves = [{ pod_uid = \"held\", container = \"app\", from = { resource = \"example.com/foo\", id = \"foo-0\" }, to = { resource = \"example.com/foo\", id = \"FOO-SN-7\" } }] }",
    );
    let config = dir.join("topomgr.toml");
    let socket = dir.join("t.sock");
    let d = Daemon::start(&config, &socket);
    let pod = pod_yaml("held", "1", "1Gi")
        .replace("memory: 1Gi", "memory: 1Gi\n        example.com/foo: \"1\"");
    let first = common::admitted(&mut d.client(), &pod);
    assert_eq!(
        first.containers[0].devices["example.com/foo"],
        ["foo-0".to_owned()]
    );
    d.stop();
    let devices = |c: &mut Client| {
        let pods: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
        pods.pods[0].containers[0].devices.clone()
    };
    let moved = BTreeMap::from([("example.com/foo".to_owned(), vec!["FOO-SN-7".to_owned()])]);
    for round in 0..2 {
        let d = Daemon::start(&config, &socket);
        let mut c = d.client();
        assert_eq!(devices(&mut c), moved, "round {round}");
        assert_eq!(health(&mut c).status, HealthStatus::Ok);
        d.stop();
        let saved = &common::state_body(&dir.join("state"))["pods"]["held"];
        assert_eq!(
            saved["containers"][0]["allocation"]["devices"],
            json!({"example.com/foo": ["FOO-SN-7"]}),
            "round {round}: {saved}"
        );
    }
}

// ---------------------------------------------------------------------------
// The matrix: machine and config changes × pods held or not × CLI or daemon.

/// How the second run reads the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `topomgr admit --state-dir`.
    Cli,
    /// `topomgr serve`, stopped and started again.
    DaemonRestart,
    /// `topomgr serve`, sent SIGHUP.
    DaemonSighup,
}

/// A node for one case: a copy of the example machine's sysfs tree and a
/// config over it (CPU provider static with CPU 0 reserved, memory
/// provider static with 512 MiB reserved on node 0).
struct Node {
    dir: PathBuf,
    sys: PathBuf,
    cpu: String,
    memory: Option<String>,
    gpu: Option<String>,
    policy: &'static str,
}

/// What a matrix runs on: a machine of `examples/machines`, the providers
/// besides the CPU provider, and what each pod asks for.
struct Setup {
    machine: &'static str,
    memory: bool,
    /// The GPU provider's config, when it is enabled.
    gpu: Option<&'static str>,
    /// GPUs each pod asks for.
    gpus: u32,
}

const CPU_MEMORY: Setup = Setup {
    machine: "2s4n",
    memory: true,
    gpu: None,
    gpus: 0,
};

/// The GPU provider on the 8-GPU example machine, GPUs found on PCI.
const GPUS_ON_PCI: Setup = Setup {
    machine: "2s8g",
    memory: false,
    gpu: Some(""),
    gpus: 2,
};

impl Setup {
    fn pod(&self, uid: &str) -> String {
        let mut yaml = pod_yaml(uid, "2", "1Gi");
        if self.gpus > 0 {
            yaml.push_str(&format!("        nvidia.com/gpu: {}\n", self.gpus));
        }
        yaml
    }
}

const CPU_CONFIG: &str = "policy = \"static\"\nreserved_cpus = \"0\"\n";
const MEMORY_CONFIG: &str =
    "policy = \"static\"\n[providers.memory.config.reserved_memory.0]\nmemory = \"512Mi\"\n";

impl Node {
    fn new(tag: &str) -> Node {
        Node::on(tag, &CPU_MEMORY)
    }

    fn on(tag: &str, setup: &Setup) -> Node {
        let dir = common::scratch_dir(tag);
        let sys = dir.join("sys");
        let status = Command::new("cp")
            .arg("-a")
            .arg(
                common::workspace_root()
                    .join("examples/machines")
                    .join(setup.machine)
                    .join("sys"),
            )
            .arg(&sys)
            .status()
            .unwrap();
        assert!(status.success());
        let n = Node {
            dir,
            sys,
            cpu: CPU_CONFIG.to_owned(),
            memory: setup.memory.then(|| MEMORY_CONFIG.to_owned()),
            gpu: setup.gpu.map(str::to_owned),
            policy: "best-effort",
        };
        n.write_config();
        n
    }

    fn write_config(&self) {
        let mut text = format!(
            "policy = \"{}\"\nsysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n[providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\n{}",
            self.policy,
            self.sys.display(),
            common::cpu_plugin().display(),
            self.cpu
        );
        if let Some(m) = &self.memory {
            text.push_str(&format!(
                "[providers.memory]\nlibrary = \"{}\"\n[providers.memory.config]\n{m}",
                common::memory_plugin().display()
            ));
        }
        if let Some(g) = &self.gpu {
            text.push_str(&format!(
                "[providers.gpu]\nlibrary = \"{}\"\n[providers.gpu.config]\n{g}\n",
                common::gpu_plugin().display()
            ));
        }
        fs::write(self.dir.join("topomgr.toml"), text).unwrap();
    }

    fn config(&self) -> PathBuf {
        self.dir.join("topomgr.toml")
    }

    fn write(&self, rel: &str, text: &str) {
        fs::write(self.sys.join(rel), text).unwrap();
    }

    fn set_cpu_online(&self, cpu: u32, online: bool) {
        self.write(
            &format!("devices/system/cpu/cpu{cpu}/online"),
            if online { "1\n" } else { "0\n" },
        );
    }

    /// Set node `node`'s MemTotal (and MemFree below it) to `kib` KiB.
    fn set_mem_total(&self, node: u32, kib: u64) {
        let path = format!("devices/system/node/node{node}/meminfo");
        let text = fs::read_to_string(self.sys.join(&path)).unwrap();
        let out: String = text
            .lines()
            .map(|l| {
                if l.contains("MemTotal:") {
                    format!("Node {node} MemTotal:       {kib} kB\n")
                } else if l.contains("MemFree:") {
                    format!("Node {node} MemFree:        {} kB\n", kib / 2)
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        self.write(&path, &out);
    }

    /// Take PCI device `address` off the machine (`bus/pci/devices`), or
    /// put it back.
    fn set_pci_present(&self, address: &str, present: bool) {
        let link = self.sys.join("bus/pci/devices").join(address);
        let hidden = self.dir.join(format!("gone-{address}"));
        if present {
            fs::rename(&hidden, &link).unwrap();
        } else {
            fs::rename(&link, &hidden).unwrap();
        }
    }

    /// Take NUMA node 3 of the example machine (CPUs 6-7 and 14-15) off
    /// the machine, or put it back.
    fn set_node3_present(&self, present: bool) {
        let dir = self.sys.join("devices/system/node/node3");
        let hidden = self.dir.join("gone-node3");
        if present {
            fs::rename(&hidden, &dir).unwrap();
        } else {
            fs::rename(&dir, &hidden).unwrap();
        }
        for cpu in [6, 7, 14, 15] {
            self.set_cpu_online(cpu, present);
        }
    }

    /// KiB of hugepages reserved on node `node`.
    fn hugepages_kib(&self, node: u32) -> u64 {
        let dir = self
            .sys
            .join(format!("devices/system/node/node{node}/hugepages"));
        fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().into_string().unwrap();
                let size: u64 = name
                    .trim_start_matches("hugepages-")
                    .trim_end_matches("kB")
                    .parse()
                    .unwrap();
                let n: u64 = fs::read_to_string(e.path().join("nr_hugepages"))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                size * n
            })
            .sum()
    }

    /// Admit `yaml` (a file in the node's directory) through the CLI on the
    /// state directory: the admission and the CLI's stderr.
    fn cli_admit(&self, name: &str, yaml: &str) -> (Admission, String) {
        let file = self.dir.join(format!("{name}.yaml"));
        fs::write(&file, yaml).unwrap();
        let state = self.dir.join("state");
        let (code, out, err) = common::topomgr(
            &self.dir,
            &[
                "admit",
                "--state-dir",
                state.to_str().unwrap(),
                file.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "admit {name}: {out}\n{err}");
        let mut a: Admissions = serde_json::from_str(&out).unwrap();
        (a.pods.remove(0), err)
    }
}

/// A change between the two runs: what it does to the node (given the
/// held pod's admission, when one is held) and whether a held pod then
/// misses part of what it holds (provider, resource).
struct Case {
    name: &'static str,
    /// Prepare the node before the first run (e.g. take a CPU offline that
    /// comes back).
    before: fn(&mut Node),
    /// The changes, each followed by a run.
    steps: &'static [Step],
}

/// One change and what a held pod then misses.
struct Step {
    change: fn(&mut Node, Option<&Admission>),
    /// (provider, resource) of the conflict a held pod has after it.
    conflict: Option<(&'static str, &'static str)>,
    /// How the held pod's device ids start after it, as saved (a move).
    held_ids: Option<&'static str>,
}

fn nothing(_: &mut Node) {}

/// A CPU neither reserved nor held.
fn unheld_cpu(held: Option<&Admission>) -> u32 {
    let held = held
        .map(|a| a.containers[0].cpus.clone())
        .unwrap_or_default();
    (1..16).find(|c| !held.contains(*c)).unwrap()
}

const MATRIX: &[Case] = &[
    Case {
        name: "memory-grows",
        before: nothing,
        steps: &[Step {
            change: |n, _| n.set_mem_total(0, 16 * 1024 * 1024),
            conflict: None,
            held_ids: None,
        }],
    },
    Case {
        name: "memory-shrinks-below-held",
        before: nothing,
        steps: &[Step {
            change: |n, held| {
                // Every node the held pod's memory is on keeps 512 MiB besides
                // its hugepages and reservation: less than the 1 GiB it holds.
                let nodes: Vec<u32> = match held {
                    Some(a) => a.containers[0].mems.iter().map(u32::from).collect(),
                    None => vec![0],
                };
                for node in nodes {
                    let reserved = if node == 0 { 512 * 1024 } else { 0 };
                    n.set_mem_total(node, n.hugepages_kib(node) + reserved + 512 * 1024);
                }
            },
            conflict: Some(("memory", "memory")),
            held_ids: None,
        }],
    },
    Case {
        name: "hugepages-change",
        before: nothing,
        steps: &[Step {
            change: |n, _| {
                n.write(
                    "devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages",
                    "64\n",
                )
            },
            conflict: None,
            held_ids: None,
        }],
    },
    Case {
        name: "reserved-memory-grows",
        before: nothing,
        steps: &[Step {
            change: |n, _| {
                n.memory = Some(MEMORY_CONFIG.replace("512Mi", "1Gi"));
                n.write_config();
            },
            conflict: None,
            held_ids: None,
        }],
    },
    Case {
        name: "numa-node-appears",
        before: |n| n.set_node3_present(false),
        steps: &[Step {
            change: |n, _| n.set_node3_present(true),
            conflict: None,
            held_ids: None,
        }],
    },
    Case {
        name: "cpu-offline-unheld",
        before: nothing,
        steps: &[Step {
            change: |n, held| n.set_cpu_online(unheld_cpu(held), false),
            conflict: None,
            held_ids: None,
        }],
    },
    Case {
        name: "cpu-offline-held",
        before: nothing,
        steps: &[Step {
            change: |n, held| {
                let cpu = match held {
                    Some(a) => a.containers[0].cpus.iter().next().unwrap(),
                    None => 1,
                };
                n.set_cpu_online(cpu, false)
            },
            conflict: Some(("cpu", "cpu")),
            held_ids: None,
        }],
    },
    Case {
        name: "cpu-online",
        before: |n| n.set_cpu_online(15, false),
        steps: &[Step {
            change: |n, _| n.set_cpu_online(15, true),
            conflict: None,
            held_ids: None,
        }],
    },
    Case {
        name: "reserved-cpus-change",
        before: nothing,
        steps: &[Step {
            change: |n, held| {
                n.cpu = CPU_CONFIG.replace("\"0\"", &format!("\"0,{}\"", unheld_cpu(held)));
                n.write_config();
            },
            conflict: None,
            held_ids: None,
        }],
    },
    Case {
        name: "topology-policy-change",
        before: nothing,
        steps: &[Step {
            change: |n, _| {
                n.policy = "single-numa-node";
                n.write_config();
            },
            conflict: None,
            held_ids: None,
        }],
    },
    Case {
        name: "cpu-and-memory-policy-none",
        before: nothing,
        steps: &[Step {
            change: |n, _| {
                n.cpu = "policy = \"none\"\n".to_owned();
                n.memory = Some("policy = \"none\"\n".to_owned());
                n.write_config();
            },
            conflict: None,
            held_ids: None,
        }],
    },
    Case {
        name: "provider-added",
        before: |n| {
            n.memory = None;
            n.write_config();
        },
        steps: &[Step {
            change: |n, _| {
                n.memory = Some(MEMORY_CONFIG.to_owned());
                n.write_config();
            },
            conflict: None,
            held_ids: None,
        }],
    },
    Case {
        name: "provider-removed-and-back",
        before: nothing,
        steps: &[
            Step {
                change: |n, _| {
                    n.memory = None;
                    n.write_config();
                },
                conflict: None,
                held_ids: None,
            },
            Step {
                change: |n, _| {
                    n.memory = Some(MEMORY_CONFIG.to_owned());
                    n.write_config();
                },
                conflict: None,
                held_ids: None,
            },
        ],
    },
];

/// The held pod's first GPU (a PCI address: GPUs found on PCI).
fn held_gpu(held: Option<&Admission>) -> String {
    held.map(|a| a.containers[0].devices["nvidia.com/gpu"][0].clone())
        .unwrap_or_else(|| "0000:17:00.0".to_owned())
}

const GPU_MATRIX: &[Case] = &[
    Case {
        name: "device-vanishes-and-returns",
        before: nothing,
        steps: &[
            Step {
                change: |n, held| n.set_pci_present(&held_gpu(held), false),
                conflict: Some(("gpu", "nvidia.com/gpu")),
                held_ids: Some("0000:"),
            },
            Step {
                change: |n, held| n.set_pci_present(&held_gpu(held), true),
                conflict: None,
                held_ids: Some("0000:"),
            },
        ],
    },
    Case {
        name: "device-rediscovered-from-a-topology-file",
        before: nothing,
        steps: &[Step {
            change: |n, _| {
                let file =
                    common::workspace_root().join("examples/machines/2s8g/gpu-topology.json");
                n.gpu = Some(format!("topology_file = {:?}", file.display().to_string()));
                n.write_config();
            },
            conflict: None,
            held_ids: Some("GPU-"),
        }],
    },
    // Issue 37: a source without PCI addresses. The GPUs are the machine's
    // by their sysfs addresses: the held pod keeps its GPUs as GPU-<i>,
    // no conflict, none given again.
    Case {
        name: "device-rediscovered-from-a-capture",
        before: nothing,
        steps: &[Step {
            change: |n, _| {
                let file = n.dir.join("topo.txt");
                fs::write(&file, smi_capture_of_the_example()).unwrap();
                n.gpu = Some(format!("topology_file = {:?}", file.display().to_string()));
                n.write_config();
            },
            conflict: None,
            held_ids: Some("GPU-"),
        }],
    },
    Case {
        name: "device-rediscovered-from-json-without-pci",
        before: nothing,
        steps: &[Step {
            change: |n, _| {
                let example =
                    common::workspace_root().join("examples/machines/2s8g/gpu-topology.json");
                let mut t: Value =
                    serde_json::from_str(&fs::read_to_string(example).unwrap()).unwrap();
                for g in t["gpus"].as_array_mut().unwrap() {
                    g.as_object_mut().unwrap().remove("pci");
                }
                let file = n.dir.join("topo.json");
                fs::write(&file, t.to_string()).unwrap();
                n.gpu = Some(format!("topology_file = {:?}", file.display().to_string()));
                n.write_config();
            },
            conflict: None,
            held_ids: Some("GPU-"),
        }],
    },
];

/// An `nvidia-smi topo -m` capture of the example machine's 8 GPUs (4 on
/// each of NUMA nodes 0 and 1): no PCI addresses, as nvidia-smi prints it.
fn smi_capture_of_the_example() -> String {
    let mut text = String::new();
    for i in 0..8 {
        text.push_str(&format!("\tGPU{i}"));
    }
    text.push_str("\tCPU Affinity\tNUMA Affinity\n");
    for a in 0..8 {
        text.push_str(&format!("GPU{a}"));
        for b in 0..8 {
            let cell = if a == b {
                " X "
            } else if a / 4 == b / 4 {
                "NODE"
            } else {
                "SYS"
            };
            text.push_str(&format!("\t{cell}"));
        }
        let node = a / 4;
        text.push_str(&format!("\t{}-{}\t{node}\n", node * 8, node * 8 + 7));
    }
    text
}

/// The NodeResourceTopology export never advertises a CPU that cannot be
/// given: the CPUs it lists as available are at most the online CPUs no pod
/// holds exclusively (a held CPU that went offline included).
fn assert_nrt_gives_no_more_than_is_free(c: &mut Client, label: &str) {
    let machine: Value = c.get("/v1/machine").unwrap().json().unwrap();
    let online: Vec<u32> = machine["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["online"] == json!(true))
        .map(|c| c["id"].as_u64().unwrap() as u32)
        .collect();
    let h = health(c);
    let free = online
        .iter()
        .filter(|id| !h.exclusive_cpus.contains(**id))
        .count() as u64;
    let nrt: Value = c.get("/v1/noderesourcetopology").unwrap().json().unwrap();
    let millis: u64 = nrt["zones"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|z| z["resources"].as_array().unwrap().iter())
        .filter(|r| r["name"] == json!("cpu"))
        .map(|r| {
            let q = r["available"].as_str().unwrap();
            match q.strip_suffix('m') {
                Some(m) => m.parse::<u64>().unwrap(),
                None => q.parse::<u64>().unwrap() * 1000,
            }
        })
        .sum();
    assert!(
        millis <= free * 1000,
        "{label}: the export offers {millis}m CPU, more than the {free} online CPUs no pod holds: {nrt}"
    );
}

/// No exclusive CPU and no device is held by two pods.
fn assert_exclusive(pods: &[Admission], case: &str) {
    for (i, a) in pods.iter().enumerate() {
        for b in &pods[i + 1..] {
            for (ca, cb) in a.containers.iter().zip(&b.containers) {
                for (resource, ids) in &ca.devices {
                    let theirs = cb.devices.get(resource).cloned().unwrap_or_default();
                    assert!(
                        ids.iter().all(|id| !theirs.contains(id)),
                        "{case}: {} and {} both hold {resource} {ids:?} / {theirs:?}",
                        a.uid,
                        b.uid
                    );
                }
                if ca.exclusive && cb.exclusive {
                    assert!(
                        ca.cpus.intersection(&cb.cpus).is_empty(),
                        "{case}: {} and {} both hold CPUs {}",
                        a.uid,
                        b.uid,
                        ca.cpus.intersection(&cb.cpus)
                    );
                }
            }
        }
    }
}

fn run_case(setup: &Setup, case: &Case, held: bool, mode: Mode) {
    let label = format!("{} held={held} {mode:?}", case.name);
    // Short: the socket's path must fit a Unix socket address.
    static CASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CASES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut n = Node::on(&format!("rc-{n}"), setup);
    (case.before)(&mut n);
    let socket = n.dir.join("t.sock");
    let mut running = None;
    // First run: hold a pod (or only start, which writes the state).
    let first = match mode {
        Mode::Cli => held.then(|| n.cli_admit("held", &setup.pod("held")).0),
        Mode::DaemonRestart | Mode::DaemonSighup => {
            let d = Daemon::start(&n.config(), &socket);
            let a = held.then(|| common::admitted(&mut d.client(), &setup.pod("held")));
            if mode == Mode::DaemonRestart {
                d.stop();
            } else {
                running = Some(d);
            }
            a
        }
    };
    let mut admitted_pods: Vec<Admission> = first.iter().cloned().collect();
    for (i, step) in case.steps.iter().enumerate() {
        let label = format!("{label} step {i}");
        (step.change)(&mut n, first.as_ref());
        let expect_conflict = held.then_some(step.conflict).flatten();
        let uid = format!("next-{i}");
        let next_yaml = setup.pod(&uid);
        let pods: Vec<Admission> = match mode {
            Mode::Cli => {
                let (next, err) = n.cli_admit(&uid, &next_yaml);
                assert_eq!(
                    err.contains("restored assignment misses"),
                    expect_conflict.is_some(),
                    "{label}: {err}"
                );
                admitted_pods.push(next);
                admitted_pods.clone()
            }
            Mode::DaemonRestart | Mode::DaemonSighup => {
                let d = match running.take() {
                    Some(d) => {
                        sighup_and_wait(&d, i as u64 + 1);
                        d
                    }
                    None => Daemon::start(&n.config(), &socket),
                };
                let mut c = d.client();
                let h = health(&mut c);
                let found: Vec<(String, String, String)> = h
                    .conflicts
                    .iter()
                    .map(|c| (c.provider.clone(), c.pod.clone(), c.resource.clone()))
                    .collect();
                let want: Vec<(String, String, String)> = expect_conflict
                    .map(|(p, r)| (p.to_owned(), "held".to_owned(), r.to_owned()))
                    .into_iter()
                    .collect();
                assert_eq!(found, want, "{label}: {h:?}");
                if let Some((p, r)) = expect_conflict {
                    assert_eq!(h.status, HealthStatus::Degraded, "{label}");
                    let m = metrics(&mut c);
                    let line = format!(
                        "topomgr_reconcile_conflicts{{provider=\"{p}\",resource=\"{r}\"}} 1"
                    );
                    assert!(
                        m.lines().any(|l| l == line),
                        "{label}: {line} missing:\n{m}"
                    );
                }
                common::admitted(&mut c, &next_yaml);
                let list: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
                assert_nrt_gives_no_more_than_is_free(&mut c, &label);
                if mode == Mode::DaemonRestart {
                    d.stop();
                } else {
                    running = Some(d);
                }
                list.pods
            }
        };
        assert_eq!(pods.len(), usize::from(held) + i + 1, "{label}: {pods:?}");
        assert!(pods.iter().all(|p| p.admitted), "{label}: {pods:?}");
        assert_exclusive(&pods, &label);
        // The held pod keeps what it holds: its devices, by identity (a
        // GPU found again under another id is the same GPU).
        if let (Some(was), Some(now)) = (&first, pods.iter().find(|p| p.uid == "held")) {
            let count = |a: &Admission| {
                a.containers[0]
                    .devices
                    .values()
                    .map(Vec::len)
                    .sum::<usize>()
            };
            assert_eq!(count(now), count(was), "{label}: {now:?}");
        }
        if let (Some(prefix), true) = (step.held_ids, held) {
            let saved = common::state_body(&n.dir.join("state"));
            let ids =
                &saved["pods"]["held"]["containers"][0]["allocation"]["devices"]["nvidia.com/gpu"];
            let ids: Vec<String> = serde_json::from_value(ids.clone()).unwrap();
            assert!(
                ids.len() == setup.gpus as usize && ids.iter().all(|id| id.starts_with(prefix)),
                "{label}: the held pod's GPUs as saved: {ids:?}"
            );
            if mode != Mode::Cli {
                let now = pods.iter().find(|p| p.uid == "held").unwrap();
                assert_eq!(now.containers[0].devices["nvidia.com/gpu"], ids, "{label}");
            }
        }
        if mode == Mode::DaemonRestart {
            // The state agrees with what was answered.
            let saved: Value = common::state_body(&n.dir.join("state"));
            let saved_pods = saved["pods"].as_object().unwrap();
            assert_eq!(saved_pods.len(), pods.len(), "{label}: {saved}");
        }
    }
    drop(running);
}

fn run_matrix(setup: &Setup, matrix: &[Case], mode: Mode) {
    for case in matrix {
        for held in [false, true] {
            run_case(setup, case, held, mode);
        }
    }
}

#[test]
fn matrix_cli_state_dir() {
    run_matrix(&CPU_MEMORY, MATRIX, Mode::Cli);
}

#[test]
fn matrix_daemon_restart() {
    run_matrix(&CPU_MEMORY, MATRIX, Mode::DaemonRestart);
}

#[test]
fn matrix_daemon_sighup() {
    run_matrix(&CPU_MEMORY, MATRIX, Mode::DaemonSighup);
}

#[test]
fn gpu_matrix_cli_state_dir() {
    run_matrix(&GPUS_ON_PCI, GPU_MATRIX, Mode::Cli);
}

#[test]
fn gpu_matrix_daemon_restart() {
    run_matrix(&GPUS_ON_PCI, GPU_MATRIX, Mode::DaemonRestart);
}

#[test]
fn gpu_matrix_daemon_sighup() {
    run_matrix(&GPUS_ON_PCI, GPU_MATRIX, Mode::DaemonSighup);
}

/// `topomgr_reloads_total` and `topomgr_reload_failures_total` of `d`.
fn reload_counts(c: &mut Client) -> (u64, u64) {
    let m = metrics(c);
    let value = |name: &str| {
        m.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{m}"))
    };
    (
        value("topomgr_reloads_total "),
        value("topomgr_reload_failures_total "),
    )
}

/// Send SIGHUP to `d` and wait until it reconciled `reloads` times in all.
fn sighup_and_wait(d: &Daemon, reloads: u64) {
    let status = Command::new("kill")
        .arg("-HUP")
        .arg(d.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    wait_for(d, |c| reload_counts(c).0 >= reloads, "the reload");
}

/// Poll `d` until `done` (20 s at most).
fn wait_for(d: &Daemon, mut done: impl FnMut(&mut Client) -> bool, what: &str) {
    let mut c = d.client();
    if !common::poll(std::time::Duration::from_secs(20), || done(&mut c)) {
        panic!("{what} did not happen within 20 s: {:?}", health(&mut c));
    }
}

/// A reload whose config a provider cannot start on keeps that provider
/// running as it was: health says so (degraded, naming the provider and a
/// remedy), the failure is counted, admissions go on; fixing the config and
/// reloading again clears it.
#[test]
fn a_failing_reload_keeps_the_running_provider_and_says_so() {
    let mut n = Node::new("reconcile-failing-reload");
    let d = Daemon::start(&n.config(), &n.dir.join("t.sock"));
    let mut c = d.client();
    let held = common::admitted(&mut c, &pod_yaml("held", "2", "1Gi"));
    n.cpu = CPU_CONFIG.replace("\"0\"", "\"0-99\"");
    n.write_config();
    let status = Command::new("kill")
        .arg("-HUP")
        .arg(d.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    wait_for(&d, |c| reload_counts(c).1 >= 1, "the failed reload");
    let h = health(&mut c);
    assert_eq!(h.status, HealthStatus::Degraded, "{h:?}");
    assert!(
        h.notes.iter().any(|n| n.starts_with("provider \"cpu\" cannot start on the machine and config as they are now (")
            && n.ends_with("it keeps running as it was started. Fix its config and reload again (systemctl reload topomgr, or kill -HUP the daemon)")),
        "{h:?}"
    );
    // The running provider still serves, and holds what it held.
    let next = common::admitted(&mut c, &pod_yaml("next", "2", "1Gi"));
    assert!(next.containers[0]
        .cpus
        .intersection(&held.containers[0].cpus)
        .is_empty());
    // The reconcile ran for the others (the memory provider was built anew).
    assert_eq!(reload_counts(&mut c), (1, 1));
    n.cpu = CPU_CONFIG.to_owned();
    n.write_config();
    sighup_and_wait(&d, 2);
    let h = health(&mut c);
    assert_eq!((h.status, h.notes.len()), (HealthStatus::Ok, 0), "{h:?}");
    let pods: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    assert_eq!(pods.pods.len(), 2);
}

/// A config that cannot be read on SIGHUP changes nothing: health says
/// why, the failure is counted, the daemon goes on as before; once fixed, a
/// reload clears the note.
#[test]
fn an_unreadable_config_on_sighup_changes_nothing() {
    let n = Node::new("reconcile-bad-config");
    let d = Daemon::start(&n.config(), &n.dir.join("t.sock"));
    let mut c = d.client();
    common::admitted(&mut c, &pod_yaml("held", "2", "1Gi"));
    let good = fs::read_to_string(n.config()).unwrap();
    fs::write(n.config(), format!("{good}\npolicy = [\n")).unwrap();
    let hup = || {
        assert!(Command::new("kill")
            .arg("-HUP")
            .arg(d.child.id().to_string())
            .status()
            .unwrap()
            .success())
    };
    hup();
    wait_for(&d, |c| reload_counts(c).1 >= 1, "the failed reload");
    let h = health(&mut c);
    assert_eq!(h.status, HealthStatus::Degraded, "{h:?}");
    assert!(
        h.notes.iter().any(
            |n| n.starts_with("reload on SIGHUP: the config cannot be read (")
                && n.ends_with("); everything runs as before. Fix the config and reload again")
        ),
        "{h:?}"
    );
    assert_eq!(reload_counts(&mut c), (0, 1));
    common::admitted(&mut c, &pod_yaml("next", "2", "1Gi"));
    fs::write(n.config(), good).unwrap();
    hup();
    wait_for(&d, |c| reload_counts(c).0 >= 1, "the reload");
    let h = health(&mut c);
    assert_eq!((h.status, h.notes.len()), (HealthStatus::Ok, 0), "{h:?}");
}

/// The machine check reads the machine again on its own: a held CPU
/// going offline shows as a conflict without a signal or a restart, and
/// the CPU stays the pod's.
#[test]
fn the_machine_check_follows_a_cpu_going_offline() {
    let n = Node::new("reconcile-machine-check");
    let mut text = fs::read_to_string(n.config()).unwrap();
    text = text.replacen(
        "[providers.cpu]",
        "[daemon]\nmachine_check_interval_ms = 100\n[providers.cpu]",
        1,
    );
    fs::write(n.config(), text).unwrap();
    let d = Daemon::start(&n.config(), &n.dir.join("t.sock"));
    let mut c = d.client();
    let held = common::admitted(&mut c, &pod_yaml("held", "2", "1Gi"));
    let cpu = held.containers[0].cpus.iter().next().unwrap();
    n.set_cpu_online(cpu, false);
    wait_for(&d, |c| !health(c).conflicts.is_empty(), "the conflict");
    let h = health(&mut c);
    assert_eq!(h.conflicts.len(), 1, "{h:?}");
    let k = &h.conflicts[0];
    assert_eq!(
        (
            k.provider.as_str(),
            k.pod.as_str(),
            k.resource.as_str(),
            k.ids.clone()
        ),
        ("cpu", "held", "cpu", vec![cpu.to_string()]),
        "{h:?}"
    );
    // `/v1/machine` is the machine as last read.
    let machine: Value = c.get("/v1/machine").unwrap().json().unwrap();
    let entry = machine["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == json!(cpu))
        .cloned();
    assert_eq!(
        entry.map(|e| e["online"].clone()),
        Some(json!(false)),
        "{machine}"
    );
    // Back online: no conflict, and the CPU is still the pod's.
    n.set_cpu_online(cpu, true);
    wait_for(
        &d,
        |c| health(c).conflicts.is_empty(),
        "the conflict to clear",
    );
    let next = common::admitted(&mut c, &pod_yaml("next", "8", "1Gi"));
    assert!(
        !next.containers[0].cpus.contains(cpu),
        "CPU {cpu} of the held pod was given to another: {next:?}"
    );
}

/// The issue 37 case: a held CPU goes offline (the machine check finds
/// it: `degraded`, a note naming the pod); the pod is released while the
/// CPU is still offline: health is `ok` at once, without waiting for the
/// next machine change (the note stayed until then before).
#[test]
fn releasing_a_pod_whose_cpu_vanished_ends_its_health_note() {
    let n = Node::new("reconcile-stale-health");
    let mut text = fs::read_to_string(n.config()).unwrap();
    text = text.replacen(
        "[providers.cpu]",
        "[daemon]\nmachine_check_interval_ms = 100\n[providers.cpu]",
        1,
    );
    fs::write(n.config(), text).unwrap();
    let d = Daemon::start(&n.config(), &n.dir.join("t.sock"));
    let mut c = d.client();
    let held = common::admitted(&mut c, &pod_yaml("held", "2", "1Gi"));
    let cpu = held.containers[0].cpus.iter().next().unwrap();
    n.set_cpu_online(cpu, false);
    wait_for(&d, |c| !health(c).notes.is_empty(), "the note");
    let h = health(&mut c);
    assert_eq!(h.status, HealthStatus::Degraded, "{h:?}");
    assert!(
        h.notes
            .iter()
            .any(|n| n.starts_with("pod \"held\" container \"app\": CPUs")),
        "{h:?}"
    );
    assert_eq!(c.release("held").unwrap().status, 200);
    let h = health(&mut c);
    assert_eq!(
        (h.status, h.notes.clone(), h.conflicts.len()),
        (HealthStatus::Ok, Vec::<String>::new(), 0),
        "{h:?}"
    );
    n.set_cpu_online(cpu, true);
}

/// Attached cgroups are verified by the machine check: a cpuset someone
/// else changed is written back once and counted; changed again, it is
/// reported instead of fought over; a cgroup that vanished is reported.
/// On this machine's real cgroup hierarchy.
#[test]
#[ignore = "needs root and a cpuset cgroup"]
fn the_machine_check_restores_a_changed_cpuset_once_and_reports_the_rest() {
    let test = "the_machine_check_restores_a_changed_cpuset_once_and_reports_the_rest";
    let mgr = common::real_cgroups(test);
    let cgs = common::TestCgroups::create(mgr, "reconcile-drift", &["k/excl", "k/shared"]);
    let (all, _) = cgs.root_cpuset();
    let all_cpus = topomgr_sdk::CpuSet::parse(&all).unwrap();
    assert!(
        all_cpus.len() >= 2,
        "{test} needs two CPUs (CPU 0 is reserved); this machine has {all}"
    );
    let dir = common::scratch_dir("reconcile-drift");
    fs::write(
        dir.join("topomgr.toml"),
        format!(
            "policy = \"best-effort\"\nsysfs_root = \"/sys\"\nstate_dir = \"state\"\ncgroup_root = \"/sys/fs/cgroup\"\n[daemon]\nmachine_check_interval_ms = 100\n[providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\npolicy = \"static\"\nreserved_cpus = \"0\"\n",
            common::cpu_plugin().display()
        ),
    )
    .unwrap();
    let d = Daemon::start(&dir.join("topomgr.toml"), &dir.join("t.sock"));
    let mut c = d.client();
    let excl = common::admitted(&mut c, &pod_yaml("excl", "1", "100Mi"));
    let cpu = excl.containers[0].cpus.to_string();
    assert_eq!(
        c.attach("excl", "app", &cgs.path("k/excl")).unwrap().status,
        200
    );
    common::admitted(
        &mut c,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: shared\n  namespace: t\n  uid: shared\nspec:\n  containers:\n  - name: app\n    resources:\n      requests:\n        cpu: 100m\n",
    );
    assert_eq!(
        c.attach("shared", "app", &cgs.path("k/shared"))
            .unwrap()
            .status,
        200
    );
    assert_eq!(cgs.cpus("k/excl"), cpu);
    let drift = |c: &mut Client| {
        metrics(c)
            .lines()
            .find_map(|l| l.strip_prefix("topomgr_cpuset_drift_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap()
    };
    assert_eq!(drift(&mut c), 0);
    // Someone else writes CPU 0 into the exclusive container's cpuset.
    let file = cgs.mgr.root().join(cgs.path("k/excl")).join("cpuset.cpus");
    fs::write(&file, "0").unwrap();
    wait_for(&d, |c| drift(c) == 1, "the drift to be counted");
    assert_eq!(cgs.cpus("k/excl"), cpu, "written back");
    // And again: reported, left as found.
    fs::write(&file, "0").unwrap();
    wait_for(
        &d,
        |c| {
            health(c)
                .notes
                .iter()
                .any(|n| n.contains("changed again after topomgr wrote it back"))
        },
        "the second change to be reported",
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(cgs.cpus("k/excl"), "0", "not fought over");
    assert_eq!(drift(&mut c), 1);
    let h = health(&mut c);
    assert_eq!(h.status, HealthStatus::Degraded, "{h:?}");
    assert!(
        h.notes.iter().any(|n| n.contains(
            "topomgr leaves it (another program manages this cgroup's cpuset: stop it, or release the pod with topomgr release excl)"
        )),
        "{h:?}"
    );
    // The shared container's cgroup vanishes: reported.
    fs::remove_dir(cgs.mgr.root().join(cgs.path("k/shared"))).unwrap();
    wait_for(
        &d,
        |c| {
            health(c)
                .notes
                .iter()
                .any(|n| n.contains("is gone; the pod still holds"))
        },
        "the vanished cgroup to be reported",
    );
    // Released, the pods' reports end.
    assert_eq!(c.release("shared").unwrap().status, 200);
    assert_eq!(c.release("excl").unwrap().status, 200);
    wait_for(
        &d,
        |c| health(c).status == HealthStatus::Ok,
        "health to be ok",
    );
}

// ---------------------------------------------------------------------------
// A held provider holds only its own resources.

/// A config on the example machine: provider `cpu` from `cpu_library`
/// (with `cpu_config`), and the example widget provider (2 per node).
fn cpu_and_widgets(dir: &std::path::Path, cpu_library: &std::path::Path, cpu_config: &str) {
    fs::write(
        dir.join("topomgr.toml"),
        format!(
            "policy = \"best-effort\"\nsysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n[providers.cpu]\nlibrary = \"{}\"\n[providers.cpu.config]\n{cpu_config}\n[providers.widgets]\nlibrary = \"{}\"\n[providers.widgets.config]\nwidgets_per_node = 2\n",
            common::example_sys(),
            cpu_library.display(),
            common::plugins().widgets.display()
        ),
    )
    .unwrap();
}

fn widget_pod(uid: &str, cpu: Option<&str>) -> String {
    let cpu = cpu.map_or(String::new(), |c| {
        format!("        cpu: \"{c}\"\n        memory: 64Mi\n")
    });
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {uid}\n  namespace: t\n  uid: {uid}\nspec:\n  containers:\n  - name: app\n    resources:\n      limits:\n{cpu}        example.com/widget: \"1\"\n"
    )
}

/// The export's (capacity, allocatable, available) of `resource`, summed
/// over the zones.
fn nrt_amounts(c: &mut Client, resource: &str) -> (u64, u64, u64) {
    let nrt: Value = c.get("/v1/noderesourcetopology").unwrap().json().unwrap();
    let q = |v: &Value| -> u64 {
        let s = v.as_str().unwrap();
        match s.strip_suffix('m') {
            Some(m) => m.parse::<u64>().unwrap() / 1000,
            None => s.parse().unwrap(),
        }
    };
    nrt["zones"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|z| z["resources"].as_array().unwrap().iter())
        .filter(|r| r["name"] == json!(resource))
        .fold((0, 0, 0), |(c, al, av), r| {
            (
                c + q(&r["capacity"]),
                al + q(&r["allocatable"]),
                av + q(&r["available"]),
            )
        })
}

/// The library configured as `cpu` is switched to the real CPU provider,
/// which cannot read the state the other library wrote: it is held. Pods
/// asking for no CPU (BestEffort, widgets only) are admitted by the widget
/// provider and get no CPUs of their own; a pod asking for CPU is refused
/// naming the provider, the resource, why and what to do; health says so;
/// the export lists the CPUs with nothing available and the widgets as
/// they are; no widget is held twice. Doing what the message says (the
/// library that wrote the state configured again, SIGHUP) ends the hold:
/// the release it missed is replayed and CPU pods are admitted again.
#[test]
fn a_held_provider_refuses_only_the_pods_that_ask_for_its_resources() {
    let dir = common::scratch_dir("reconcile-held-provider");
    let socket = dir.join("t.sock");
    let config = dir.join("topomgr.toml");
    let mock = common::plugins().mock.clone();
    cpu_and_widgets(&dir, &mock, "");
    let d = Daemon::start(&config, &socket);
    let first = common::admitted(&mut d.client(), &widget_pod("first", Some("1")));
    d.stop();

    cpu_and_widgets(
        &dir,
        common::cpu_plugin(),
        "policy = \"static\"\nreserved_cpus = \"0\"",
    );
    let d = Daemon::start(&config, &socket);
    let mut c = d.client();
    let h = health(&mut c);
    assert_eq!(h.status, HealthStatus::Degraded, "{h:?}");
    let note = h
        .notes
        .iter()
        .find(|n| n.starts_with("provider \"cpu\" cannot read its saved state ("))
        .unwrap_or_else(|| panic!("{h:?}"));
    assert!(
        note.ends_with("it is held: its state is kept unchanged, admitted pods are kept and can be released, and admissions that ask for its resources are refused (the others go on). Configure the provider library that wrote that state under the name \"cpu\" again (or a version that reads it) and restart topomgr or send the daemon SIGHUP"),
        "{note}"
    );
    let why = note
        .strip_prefix("provider \"cpu\" cannot read its saved state (")
        .and_then(|n| n.split_once("); it is held"))
        .unwrap()
        .0
        .to_owned();
    assert!(
        why.contains("not a checkpoint of this CPU provider"),
        "{why}"
    );

    let be = common::admitted(
        &mut c,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: be, namespace: t, uid: be}\nspec:\n  containers:\n  - name: app\n",
    );
    assert!(be.containers[0].cpus.is_empty(), "{be:?}");
    let w = common::admitted(&mut c, &widget_pod("w", None));
    assert!(w.containers[0].cpus.is_empty(), "{w:?}");
    assert_eq!(w.containers[0].devices["example.com/widget"].len(), 1);

    let r = c.admit(&widget_pod("cpu", Some("1"))).unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let v: Admissions = r.parse().unwrap();
    let refused = &v.pods[0];
    assert!(!refused.admitted);
    assert_eq!(refused.reason.as_deref(), Some("ProviderHeld"));
    assert_eq!(
        refused.message.as_deref(),
        Some(format!("pod t/cpu cannot be admitted: provider \"cpu\" is held and the pod asks for cpu, which it serves. It is held because it cannot read its saved state ({why}); pods asking for none of its resources are still admitted, and admitted pods can be listed and released. Configure the provider library that wrote that state under the name \"cpu\" again (or a version that reads it) and restart topomgr or send the daemon SIGHUP").as_str())
    );

    // The export: 16 CPUs, 15 allocatable, none available; 8 widgets of
    // which `first` and `w` hold one each.
    assert_eq!(nrt_amounts(&mut c, "cpu"), (16, 15, 0));
    assert_eq!(nrt_amounts(&mut c, "example.com/widget"), (8, 8, 6));
    let pods: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    let uids: Vec<&str> = pods.pods.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(uids, ["be", "first", "w"]);
    assert_exclusive(&pods.pods, "held");
    assert_eq!(c.release("first").unwrap().status, 200);

    // The remedy the message gives.
    cpu_and_widgets(&dir, &mock, "");
    sighup_and_wait(&d, 1);
    let h = health(&mut c);
    assert_eq!((h.status, h.notes.len()), (HealthStatus::Ok, 0), "{h:?}");
    let again = common::admitted(&mut c, &widget_pod("cpu", Some("1")));
    let pods: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    let uids: Vec<&str> = pods.pods.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(uids, ["be", "cpu", "w"]);
    assert_exclusive(&pods.pods, "after the hold");
    // `first`'s widget is free again: it is the first one handed out.
    assert_eq!(
        again.containers[0].devices["example.com/widget"],
        first.containers[0].devices["example.com/widget"]
    );
    for uid in ["be", "cpu", "w"] {
        assert_eq!(c.release(uid).unwrap().status, 200);
    }
    assert_eq!(nrt_amounts(&mut c, "example.com/widget"), (8, 8, 8));
    d.stop();
}

/// A reload that reads a changed machine updates everything that shows it:
/// the per-NUMA-node metric series (a node that appears gets one, a node
/// that is gone has none) and `/v1/machine`.
#[test]
fn a_reload_onto_a_changed_machine_updates_the_per_node_metrics() {
    let n = Node::new("reconcile-node-series");
    n.set_node3_present(false);
    let d = Daemon::start(&n.config(), &n.dir.join("t.sock"));
    let mut c = d.client();
    let series = |c: &mut Client| -> Vec<String> {
        let mut v: Vec<String> = metrics(c)
            .lines()
            .filter(|l| l.starts_with("cpu_manager_allocation_per_numa{"))
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    let nodes = |c: &mut Client| -> usize {
        let m: Value = c.get("/v1/machine").unwrap().json().unwrap();
        m["numa_nodes"].as_array().unwrap().len()
    };
    let held = common::admitted(&mut c, &pod_yaml("held", "2", "1Gi"));
    let on = |node: u32| {
        held.containers[0]
            .cpus
            .iter()
            .filter(|cpu| cpu / 2 % 4 == node)
            .count()
    };
    let want = |nodes: &[u32]| -> Vec<String> {
        nodes
            .iter()
            .map(|&i| {
                format!(
                    "cpu_manager_allocation_per_numa{{numa_node=\"{i}\"}} {}",
                    on(i)
                )
            })
            .collect()
    };
    assert_eq!(series(&mut c), want(&[0, 1, 2]));
    assert_eq!(nodes(&mut c), 3);
    n.set_node3_present(true);
    sighup_and_wait(&d, 1);
    assert_eq!(series(&mut c), want(&[0, 1, 2, 3]));
    assert_eq!(nodes(&mut c), 4);
    n.set_node3_present(false);
    sighup_and_wait(&d, 2);
    assert_eq!(series(&mut c), want(&[0, 1, 2]));
    assert_eq!(nodes(&mut c), 3);
    d.stop();
}

/// `topomgr health --state-dir` gives what the daemon's `/v1/health`
/// gives on the same state: `ok` on a state that matches the machine;
/// after a held CPU went offline, `degraded` with the conflict (pod,
/// container, resource, what is missing, the CPU) and the ledger's note,
/// in JSON and as a table, exit status 0; nothing in the directory is
/// changed.
#[test]
fn health_with_a_state_dir_lists_the_conflicts_the_daemon_lists() {
    let n = Node::new("reconcile-cli-health");
    let state = n.dir.join("state");
    let cli_health = |args: &[&str]| -> (i32, String, String) {
        let mut all = vec!["health", "--state-dir", state.to_str().unwrap()];
        all.extend_from_slice(args);
        common::topomgr(&n.dir, &all)
    };
    let (held, _) = n.cli_admit("held", &pod_yaml("held", "2", "1Gi"));
    let (code, out, err) = cli_health(&[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let h: Health = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (h.status, h.pods, h.notes.len(), h.conflicts.len()),
        (HealthStatus::Ok, 1, 0, 0),
        "{h:?}"
    );
    assert_eq!(h.exclusive_cpus, held.containers[0].cpus);

    let cpu = held.containers[0].cpus.iter().next().unwrap();
    n.set_cpu_online(cpu, false);
    let files = |dir: &std::path::Path| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && !p.to_string_lossy().ends_with(".lock"))
            .map(|p| (p.display().to_string(), fs::read(&p).unwrap()))
            .collect();
        v.sort();
        v
    };
    let before = files(&state);
    let (code, out, err) = cli_health(&[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let cli: Health = serde_json::from_str(&out).unwrap();
    assert_eq!(cli.status, HealthStatus::Degraded, "{cli:?}");
    assert_eq!(cli.conflicts.len(), 1, "{cli:?}");
    let k = &cli.conflicts[0];
    assert_eq!(
        (
            k.provider.as_str(),
            k.pod.as_str(),
            k.container.as_str(),
            k.resource.as_str(),
            k.ids.clone()
        ),
        ("cpu", "held", "app", "cpu", vec![cpu.to_string()]),
        "{cli:?}"
    );
    assert!(k.missing.contains(&format!("CPU {cpu}")), "{k:?}");
    assert_eq!(
        cli.notes,
        [format!(
            "pod \"held\" container \"app\": CPUs {cpu} are allocated but not online on this machine"
        )]
    );
    assert_eq!(files(&state), before, "health --state-dir changes nothing");
    // Said once, as notes: not also as the restore's log lines.
    assert!(!err.contains("restored state does not match"), "{err}");

    let (code, table, err) = cli_health(&["-o", "table"]);
    assert_eq!(code, 0, "{table}\n{err}");
    let mut want = format!(
        "status: degraded\npods: 1\nexclusive CPUs: {}\nshared pool: {}\n",
        cli.exclusive_cpus, cli.shared_pool
    );
    for note in &cli.notes {
        want.push_str(&format!("note: {note}\n"));
    }
    want.push_str(&format!(
        "conflict: pod held container app cpu (provider cpu): {} ({cpu})\n",
        k.missing
    ));
    assert_eq!(table, want);

    // The daemon on the same state lists the same.
    let d = Daemon::start(&n.config(), &n.dir.join("t.sock"));
    let daemon = health(&mut d.client());
    assert_eq!(
        (
            daemon.status,
            daemon.pods,
            &daemon.notes,
            &daemon.conflicts,
            &daemon.exclusive_cpus
        ),
        (
            cli.status,
            cli.pods,
            &cli.notes,
            &cli.conflicts,
            &cli.exclusive_cpus
        )
    );
    // While the daemon serves the directory, the CLI says to ask it.
    let (code, _, err) = cli_health(&[]);
    assert_ne!(code, 0);
    assert!(err.contains("topomgr health --socket"), "{err}");
    d.stop();
}

/// Reserved memory on a NUMA node that went away is a config error, as
/// a reserved CPU the machine no longer has: the next command refuses to
/// start, naming the key and what to do (the pods and the state are
/// kept); doing it (the reservation moved to a node the machine has)
/// just works, the pod held before still holds what it held.
#[test]
fn reserved_memory_on_a_node_that_is_gone_names_the_key_and_a_remedy_that_works() {
    let mut n = Node::new("reconcile-reserved-gone");
    n.memory = Some(
        "policy = \"static\"\n[providers.memory.config.reserved_memory.3]\nmemory = \"512Mi\"\n"
            .to_owned(),
    );
    n.write_config();
    let (held, _) = n.cli_admit("held", &pod_yaml("held", "2", "1Gi"));
    n.set_node3_present(false);
    let file = n.dir.join("next.yaml");
    fs::write(&file, pod_yaml("next", "2", "1Gi")).unwrap();
    let state = n.dir.join("state");
    let (code, out, err) = common::topomgr(
        &n.dir,
        &[
            "admit",
            "--state-dir",
            state.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(&format!(
            "topomgr: error: provider `memory` ({}) failed to start: InvalidConfig in [providers.memory.config] (configured in {}): memory provider config: reserved_memory.3: this machine has no NUMA node 3 (its nodes are 0-2); reserve that memory on a node it has (rename the table to reserved_memory.<one of 0-2>) or remove the table",
            common::memory_plugin().display(),
            n.dir.join("topomgr.toml").display()
        )),
        "{err}"
    );
    // The remedy: the reservation on node 0.
    n.memory = Some(MEMORY_CONFIG.to_owned());
    n.write_config();
    let (next, _) = n.cli_admit("next", &pod_yaml("next", "2", "1Gi"));
    let (code, out, err) =
        common::topomgr(&n.dir, &["pods", "--state-dir", state.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let pods: PodList = serde_json::from_str(&out).unwrap();
    let uids: Vec<&str> = pods.pods.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(uids, ["held", "next"]);
    assert_eq!(pods.pods[0].containers[0].cpus, held.containers[0].cpus);
    assert_eq!(pods.pods[1].containers[0].cpus, next.containers[0].cpus);
    assert_exclusive(&pods.pods, "after the remedy");
}

/// A JSON topology file of the example machine's 8 GPUs without `pci`
/// whose NUMA nodes do not match the machine's GPUs (all on node 0): the
/// GPUs cannot be matched with the machine's by address.
fn unmatchable_topology_file(n: &Node) -> String {
    let gpus: Vec<Value> = (0..8)
        .map(|i| json!({"index": i, "id": format!("GPU-{i}"), "numa": 0}))
        .collect();
    let file = n.dir.join("unmatched.json");
    fs::write(&file, json!({"gpus": gpus, "links": []}).to_string()).unwrap();
    format!("topology_file = {:?}", file.display().to_string())
}

/// Issue 37 item 2, when the new source cannot be matched: a pod holds two
/// GPUs known by their PCI addresses; the GPUs are then listed through a
/// topology file without addresses that does not match the machine. The
/// held GPUs are not freed: none of the GPUs listed without an address is
/// handed out (any may be one of them) and health says why, under
/// `admit --state-dir` and a daemon reload; once the pod is released the
/// GPUs are given again.
#[test]
fn gpus_that_cannot_be_matched_after_a_source_change_stay_held() {
    let refused = |a: &Admission, label: &str| {
        assert!(!a.admitted, "{label}: {a:?}");
        assert_eq!(
            a.reason.as_deref(),
            Some("UnexpectedAdmissionError"),
            "{label}: {a:?}"
        );
    };
    // admit --state-dir
    let mut n = Node::on("rc-unmatched-cli", &GPUS_ON_PCI);
    let (held, _) = n.cli_admit("held", &GPUS_ON_PCI.pod("held"));
    assert!(held.containers[0].devices["nvidia.com/gpu"][0].starts_with("0000:"));
    n.gpu = Some(unmatchable_topology_file(&n));
    n.write_config();
    let (next, err) = n.cli_admit("next", &GPUS_ON_PCI.pod("next"));
    refused(&next, "cli");
    assert!(
        err.contains("not found by their PCI address or serial, and the devices listed without one (GPU-0, GPU-1, GPU-2, GPU-3, GPU-4, GPU-5, GPU-6, GPU-7) may be them"),
        "{err}"
    );
    let state = n.dir.join("state");
    let (code, out, err) = common::topomgr(
        &n.dir,
        &["release", "--state-dir", state.to_str().unwrap(), "held"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (next, _) = n.cli_admit("next", &GPUS_ON_PCI.pod("next"));
    assert!(next.admitted, "{next:?}");

    // A daemon reload (SIGHUP).
    let mut n = Node::on("rc-unmatched-hup", &GPUS_ON_PCI);
    let socket = n.dir.join("t.sock");
    let d = Daemon::start(&n.config(), &socket);
    let mut c = d.client();
    common::admitted(&mut c, &GPUS_ON_PCI.pod("held"));
    n.gpu = Some(unmatchable_topology_file(&n));
    n.write_config();
    sighup_and_wait(&d, 1);
    let h = health(&mut c);
    assert_eq!(h.status, HealthStatus::Degraded, "{h:?}");
    assert!(
        h.conflicts
            .iter()
            .any(|c| c.pod == "held" && c.missing.contains("may be them")),
        "{h:?}"
    );
    let r = c.admit(&GPUS_ON_PCI.pod("next")).unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let v: Admissions = r.parse().unwrap();
    refused(&v.pods[0], "sighup");
    assert_eq!(c.release("held").unwrap().status, 200);
    common::admitted(&mut c, &GPUS_ON_PCI.pod("next"));
    drop(d);
}

/// Issue 37 item 1 on a reload: a second GPU provider serving the same
/// GPUs under another resource name, added to the config of a running
/// daemon, is refused as at start; the reload changes nothing and says
/// why, and the held GPU is never given under the new name.
#[test]
fn a_reload_that_adds_a_second_provider_of_the_same_gpus_changes_nothing() {
    let n = Node::on("rc-two-gpu-reload", &GPUS_ON_PCI);
    let d = Daemon::start(&n.config(), &n.dir.join("t.sock"));
    let mut c = d.client();
    common::admitted(&mut c, &GPUS_ON_PCI.pod("held"));
    let mut text = fs::read_to_string(n.config()).unwrap();
    text.push_str(&format!(
        "[providers.gpu2]\nlibrary = \"{}\"\n[providers.gpu2.config]\nresource = \"example.com/gpu\"\n",
        common::gpu_plugin().display()
    ));
    fs::write(n.config(), text).unwrap();
    assert!(Command::new("kill")
        .arg("-HUP")
        .arg(d.child.id().to_string())
        .status()
        .unwrap()
        .success());
    wait_for(&d, |c| reload_counts(c).1 >= 1, "the failed reload");
    let h = health(&mut c);
    assert!(
        h.notes.iter().any(|note| note.starts_with(
            "SIGHUP: providers \"gpu\" and \"gpu2\" both serve PCI device 0000:17:00.0 (as nvidia.com/gpu device 0000:17:00.0 and as example.com/gpu device 0000:17:00.0)"
        ) && note.ends_with("everything runs as before. Fix the config and reload again")),
        "{h:?}"
    );
    let r = c
        .admit(&format!(
            "{}        example.com/gpu: 1\n",
            pod_yaml("other", "2", "1Gi")
        ))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let v: Admissions = r.parse().unwrap();
    assert!(!v.pods[0].admitted, "{v:?}");
    common::admitted(&mut c, &GPUS_ON_PCI.pod("next"));
}
