//! Machine discovery from sysfs: the committed example machine, hand-made
//! fixtures for the degraded and error paths, and real recorded trees of the
//! hwloc corpus checked against hwloc's own readings.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use topomgr_discovery::{discover, render_table, DiscoveryError};
use topomgr_sdk::{Cpu, CpuSet, Machine, NumaNode, NumaNodeId, PciDevice, Sriov};

const GIB: u64 = 1 << 30;

fn repo() -> PathBuf {
    common::workspace_root()
}

fn example_root() -> PathBuf {
    repo().join("examples/machines/2s4n/sys")
}

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/sysfs").join(name).join("sys")
}

fn corpus_dir() -> PathBuf {
    repo().join("../shared/corpus/hwloc-linux")
}

/// Where scratch trees go: tmpfs (`/dev/shm`) when it is there, else the
/// temp dir. Recorded trees are tens of thousands of small files; removing
/// them from a disk file system mounted with `discard` took 90 s on the CI
/// machine, against about one second on tmpfs.
fn scratch_base() -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let probe = shm.join(format!("topomgr-discovery-probe-{}", std::process::id()));
        if fs::create_dir(&probe).is_ok() {
            let _ = fs::remove_dir(&probe);
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    })
    .clone()
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = scratch_base().join(format!(
            "topomgr-discovery-{}-{}-{tag}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    /// A copy of `tree`'s `sys` directory (links kept as links).
    fn copy_of(tree: &Path, tag: &str) -> (Scratch, PathBuf) {
        let scratch = Scratch::new(tag);
        let status = Command::new("cp")
            .arg("-a")
            .arg(tree)
            .arg(scratch.0.join("sys"))
            .status()
            .expect("run cp");
        assert!(status.success(), "cp -a {} failed", tree.display());
        let sys = scratch.0.join("sys");
        (scratch, sys)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn cpus(list: &str) -> CpuSet {
    CpuSet::parse(list).expect("valid CPU list in the test")
}

fn err_text(root: &Path) -> String {
    match discover(root) {
        Ok(m) => panic!(
            "discovery of {} succeeded: {}",
            root.display(),
            serde_json::to_string(&m).unwrap_or_default()
        ),
        Err(e) => e.to_string(),
    }
}

// ------------------------------------------------------------ example machine

/// The example machine as its README describes it, derived independently of
/// the tree.
fn expected_example() -> Machine {
    let free_gib_x2 = [12u64, 14, 10, 15];
    let huge_2m = [(512, 384), (512, 512), (256, 256), (0, 0)];
    let huge_1g = [(2, 1), (1, 1), (0, 0), (2, 2)];
    let numa_nodes = (0..4u32)
        .map(|n| {
            let i = n as usize;
            let distances = (0..4u32)
                .map(|m| {
                    let d = if m == n {
                        10
                    } else if m / 2 == n / 2 {
                        12
                    } else {
                        20
                    };
                    (node(m), d)
                })
                .collect();
            NumaNode::new(
                node(n),
                [2 * n, 2 * n + 1, 2 * n + 8, 2 * n + 9]
                    .into_iter()
                    .collect(),
            )
            .with_memory(8 * GIB, free_gib_x2[i] * GIB / 2)
            .with_hugepages(2048, huge_2m[i].0)
            .with_hugepages(1048576, huge_1g[i].0)
            .with_distances(distances)
        })
        .map(|mut n: NumaNode| {
            let i = n.id.get() as usize;
            n.hugepages.get_mut("2048kB").unwrap().free = huge_2m[i].1;
            n.hugepages.get_mut("1048576kB").unwrap().free = huge_1g[i].1;
            n
        })
        .collect();
    let cpus = (0..16u32)
        .map(|id| {
            let core = id % 8;
            Cpu::new(id, Some(node(core / 2)))
                .with_socket(core / 4)
                .with_core(core)
                .with_l3(Some(core / 4))
        })
        .collect();
    let dev = |address: &str,
               vendor: &str,
               device: &str,
               class: &str,
               numa: Option<u32>,
               driver: &str| {
        PciDevice::new(address, vendor, device, class, numa.map(node)).with_driver(driver)
    };
    let pf = dev(
        "0000:3b:00.0",
        "0x8086",
        "0x158b",
        "0x020000",
        Some(1),
        "i40e",
    )
    .with_net(vec!["ens2f0".to_string()])
    .with_sriov(Sriov::new(
        64,
        vec!["0000:3b:02.0".to_string(), "0000:3b:02.1".to_string()],
    ));
    let vf = |n: u32| {
        dev(
            &format!("0000:3b:02.{n}"),
            "0x8086",
            "0x154c",
            "0x020000",
            Some(1),
            "iavf",
        )
        .with_net(vec![format!("ens2f0v{n}")])
        .with_physfn("0000:3b:00.0")
        .with_vf_index(n)
    };
    Machine::new(
        numa_nodes,
        cpus,
        vec![
            dev(
                "0000:00:14.0",
                "0x8086",
                "0xa1af",
                "0x0c0330",
                None,
                "xhci_hcd",
            ),
            dev(
                "0000:17:00.0",
                "0x10de",
                "0x20b0",
                "0x030200",
                Some(0),
                "nvidia",
            ),
            pf,
            vf(0),
            vf(1),
            dev(
                "0000:b1:00.0",
                "0x10de",
                "0x20b0",
                "0x030200",
                Some(2),
                "nvidia",
            ),
        ],
    )
}

/// NUMA node id `n`.
fn node(n: u32) -> NumaNodeId {
    NumaNodeId::new(n).expect("a node id below 256")
}

/// NUMA node ids.
fn nodes(ids: &[u32]) -> Vec<NumaNodeId> {
    ids.iter().map(|&n| node(n)).collect()
}

#[test]
fn example_machine_is_discovered_exactly() {
    let machine = discover(&example_root()).expect("example machine");
    let expected = expected_example();
    assert_eq!(machine.numa_nodes, expected.numa_nodes);
    assert_eq!(machine.cpus, expected.cpus);
    assert_eq!(machine.pci_devices, expected.pci_devices);
    assert_eq!(machine, expected);
    assert_eq!(machine.online_cpus(), cpus("0-15"));
    assert_eq!(machine.numa_ids(), nodes(&[0, 1, 2, 3]));
}

#[test]
fn example_machine_json_has_the_spec_shape() {
    let machine = discover(&example_root()).expect("example machine");
    let value = serde_json::to_value(&machine).expect("serialise");
    assert_eq!(
        value["numa_nodes"][1],
        serde_json::json!({
            "id": 1,
            "cpus": "2-3,10-11",
            "memory_bytes": 8589934592u64,
            "memory_free_bytes": 7516192768u64,
            "hugepages": {"1048576kB": {"total": 1, "free": 1}, "2048kB": {"total": 512, "free": 512}},
            "distances": {"0": 12, "1": 10, "2": 20, "3": 20}
        })
    );
    assert_eq!(
        value["cpus"][9],
        serde_json::json!({"id": 9, "online": true, "socket": 0, "die": 0, "core": 1, "numa": 0, "l3": 0})
    );
    assert_eq!(
        value["pci_devices"][2],
        serde_json::json!({
            "address": "0000:3b:00.0", "vendor": "0x8086", "device": "0x158b", "class": "0x020000",
            "numa": 1, "driver": "i40e", "net": ["ens2f0"],
            "sriov": {"total_vfs": 64, "num_vfs": 2, "vfs": ["0000:3b:02.0", "0000:3b:02.1"]},
            "physfn": null
        })
    );
    assert_eq!(
        value["pci_devices"][0],
        serde_json::json!({
            "address": "0000:00:14.0", "vendor": "0x8086", "device": "0xa1af", "class": "0x0c0330",
            "numa": null, "driver": "xhci_hcd", "net": [], "sriov": null, "physfn": null
        })
    );
    let text = serde_json::to_string_pretty(&machine).expect("serialise");
    let back: Machine = serde_json::from_str(&text).expect("the JSON form reads back");
    assert_eq!(back, machine);
}

#[test]
fn example_machine_table() {
    let machine = discover(&example_root()).expect("example machine");
    let expected = "\
4 NUMA nodes, 2 sockets, 16 CPUs (16 online), 6 PCI devices

NUMA node 0: socket 0, CPUs 0-1,8-9 (4), memory 8.0 GiB (6.0 GiB free)
  hugepages-2Mi: 512 total, 384 free
  hugepages-1Gi:   2 total,   1 free
  PCI 0000:17:00.0 10de:20b0 class 0x030200 driver nvidia

NUMA node 1: socket 0, CPUs 2-3,10-11 (4), memory 8.0 GiB (7.0 GiB free)
  hugepages-2Mi: 512 total, 512 free
  hugepages-1Gi:   1 total,   1 free
  PCI 0000:3b:00.0 8086:158b class 0x020000 driver i40e net ens2f0 SR-IOV 2/64 VFs
  PCI 0000:3b:02.0 8086:154c class 0x020000 driver iavf net ens2f0v0 VF 0 of 0000:3b:00.0 (ens2f0)
  PCI 0000:3b:02.1 8086:154c class 0x020000 driver iavf net ens2f0v1 VF 1 of 0000:3b:00.0 (ens2f0)

NUMA node 2: socket 1, CPUs 4-5,12-13 (4), memory 8.0 GiB (5.0 GiB free)
  hugepages-2Mi: 256 total, 256 free
  hugepages-1Gi:   0 total,   0 free
  PCI 0000:b1:00.0 10de:20b0 class 0x030200 driver nvidia

NUMA node 3: socket 1, CPUs 6-7,14-15 (4), memory 8.0 GiB (7.5 GiB free)
  hugepages-2Mi:   0 total,   0 free
  hugepages-1Gi:   2 total,   2 free

PCI devices without a NUMA node:
  PCI 0000:00:14.0 8086:a1af class 0x0c0330 driver xhci_hcd

NUMA distances:
  node  0  1  2  3
     0 10 12 20 20
     1 12 10 20 20
     2 20 20 10 12
     3 20 20 12 10
";
    assert_eq!(render_table(&machine), expected);
}

#[test]
fn table_lists_offline_cpus_and_cpuless_nodes() {
    let machine = discover(&fixture("sparse-minimal")).expect("fixture");
    let expected = "\
2 NUMA nodes, 1 socket, 3 CPUs (2 online), 1 PCI device

NUMA node 0: socket 0, CPUs 0-2 (3), memory 4.0 GiB (1.0 GiB free)

NUMA node 5: CPUs none, memory 2.0 GiB (0 B free)
  hugepages-2Mi: 8 total, 8 free

PCI devices without a NUMA node:
  PCI 0000:00:02.0 8086:3412 class 0x030000

Offline CPUs: 2

NUMA distances:
  node  0  5
     0 10 20
     5 20 10
";
    assert_eq!(render_table(&machine), expected);
}

// ------------------------------------------------------------------ fixtures

#[test]
fn missing_optional_files_degrade_to_documented_defaults() {
    let machine = discover(&fixture("sparse-minimal")).expect("fixture");
    let expected = Machine::new(
        vec![
            NumaNode::new(node(0), cpus("0-2"))
                .with_memory(4 * GIB, GIB)
                .with_distances(BTreeMap::from([(node(0), 10), (node(5), 20)])),
            NumaNode::new(node(5), CpuSet::new())
                .with_memory(2 * GIB, 0)
                .with_hugepages(2048, 8)
                .with_distances(BTreeMap::from([(node(0), 20), (node(5), 10)])),
        ],
        vec![
            Cpu::new(0, Some(node(0))).with_core(0).with_l3(Some(0)),
            Cpu::new(1, Some(node(0))).with_core(0).with_l3(Some(0)),
            Cpu::new(2, Some(node(0))).with_online(false),
        ],
        vec![PciDevice::new(
            "0000:00:02.0",
            "0x8086",
            "0x3412",
            "0x030000",
            None,
        )],
    );
    assert_eq!(machine, expected);
}

#[test]
fn malformed_distance_names_the_file_and_content() {
    let root = fixture("bad-distance");
    assert_eq!(
        err_text(&root),
        format!(
            "{}/devices/system/node/node1/distance: expected integers, found \"ab 10\"",
            root.display()
        )
    );
    assert!(matches!(
        discover(&root),
        Err(DiscoveryError::Parse {
            expected: "integers",
            ..
        })
    ));
}

#[test]
fn not_a_sysfs_root() {
    let scratch = Scratch::new("empty");
    assert_eq!(
        err_text(&scratch.0),
        format!(
            "{0}/devices/system/cpu: no such directory; is {0} a sysfs root (like /sys, or the sys directory of a recorded tree)?",
            scratch.0.display()
        )
    );
}

/// Copy the example tree, break one thing, and check the exact error.
fn broken_example(tag: &str, breaker: impl FnOnce(&Path)) -> (Scratch, PathBuf, String) {
    let (scratch, sys) = Scratch::copy_of(&example_root(), tag);
    breaker(&sys);
    let text = err_text(&sys);
    (scratch, sys, text)
}

fn write(path: &Path, content: &str) {
    fs::write(path, content).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

#[test]
fn node_ids_up_to_255_and_at_most_64_nodes() {
    // Nodes 64 and 255 (no CPUs, some memory) are read like any other.
    let (_s, sys) = Scratch::copy_of(&example_root(), "node255");
    let ids = [0, 1, 2, 3, 64, 255];
    for (i, id) in ids.iter().enumerate() {
        let dir = sys.join(format!("devices/system/node/node{id}"));
        if *id > 3 {
            fs::create_dir_all(&dir).expect("mkdir");
            write(&dir.join("cpulist"), "\n");
            write(
                &dir.join("meminfo"),
                &format!("Node {id} MemTotal: 1024 kB\nNode {id} MemFree: 512 kB\n"),
            );
        }
        let row: Vec<String> = (0..ids.len())
            .map(|j| {
                if i == j {
                    "10".into()
                } else {
                    format!("{}", 20 + i + j)
                }
            })
            .collect();
        write(&dir.join("distance"), &format!("{}\n", row.join(" ")));
    }
    write(&sys.join("devices/system/node/online"), "0-3,64,255\n");
    let machine = discover(&sys).expect("discovery");
    assert_eq!(machine.numa_ids(), nodes(&[0, 1, 2, 3, 64, 255]));
    assert_eq!(machine.numa_mask().to_string(), "0-3,64,255");
    assert_eq!(machine.numa_nodes[5].memory_bytes, 1 << 20);
    assert_eq!(machine.numa_nodes[5].distances[&node(255)], 10);
    assert_eq!(machine.numa_nodes[5].distances[&node(64)], 29);
    assert_eq!(machine.numa_nodes[0].distances[&node(255)], 25);
    // An id beyond 255 is refused, naming the directory.
    let (_s, sys, text) = broken_example("node256", |sys| {
        let dir = sys.join("devices/system/node/node256");
        fs::create_dir_all(&dir).expect("mkdir");
        write(&dir.join("cpulist"), "\n");
    });
    assert_eq!(
        text,
        format!(
            "{}/devices/system/node/node256: NUMA node id 256 is out of range: topomgr supports NUMA node ids 0-255",
            sys.display()
        )
    );
    // More than 64 nodes are refused.
    let (_s, sys, text) = broken_example("node65", |sys| {
        for id in 4..65 {
            let dir = sys.join(format!("devices/system/node/node{}", id * 3));
            fs::create_dir_all(&dir).expect("mkdir");
            write(&dir.join("cpulist"), "\n");
        }
    });
    assert_eq!(
        text,
        format!(
            "{}/devices/system/node: 65 NUMA nodes; topomgr supports at most 64 NUMA nodes on one machine",
            sys.display()
        )
    );
}

#[test]
fn missing_meminfo_is_an_error() {
    let (_s, sys, text) = broken_example("meminfo", |sys| {
        fs::remove_file(sys.join("devices/system/node/node2/meminfo")).expect("rm");
    });
    assert_eq!(
        text,
        format!(
            "cannot read {}/devices/system/node/node2/meminfo: No such file or directory (os error 2)",
            sys.display()
        )
    );
}

#[test]
fn meminfo_without_memtotal_or_with_garbage() {
    let (_s, sys, text) = broken_example("memtotal", |sys| {
        write(
            &sys.join("devices/system/node/node1/meminfo"),
            "Node 1 MemFree: 10 kB\n",
        );
    });
    assert_eq!(
        text,
        format!(
            "{}/devices/system/node/node1/meminfo: missing the MemTotal line",
            sys.display()
        )
    );
    let (_s, sys, text) = broken_example("memgarbage", |sys| {
        write(
            &sys.join("devices/system/node/node1/meminfo"),
            "Node 1 MemTotal: lots kB\n",
        );
    });
    assert_eq!(
        text,
        format!(
            "{}/devices/system/node/node1/meminfo: expected a meminfo line like \"MemTotal: 8 kB\", found \"Node 1 MemTotal: lots kB\"",
            sys.display()
        )
    );
}

#[test]
fn garbage_cpulist_cpu_online_and_pci_ids() {
    let (_s, sys, text) = broken_example("cpulist", |sys| {
        write(&sys.join("devices/system/node/node3/cpulist"), "6-x\n");
    });
    assert_eq!(
        text,
        format!(
            "{}/devices/system/node/node3/cpulist: expected a CPU list like 0-3,8-11, found \"6-x\"",
            sys.display()
        )
    );
    let (_s, sys, text) = broken_example("online", |sys| {
        write(&sys.join("devices/system/cpu/cpu5/online"), "yes\n");
    });
    assert_eq!(
        text,
        format!(
            "{}/devices/system/cpu/cpu5/online: expected 0 or 1, found \"yes\"",
            sys.display()
        )
    );
    let (_s, sys, text) = broken_example("vendor", |sys| {
        write(&sys.join("bus/pci/devices/0000:17:00.0/vendor"), "nvidia\n");
    });
    assert_eq!(
        text,
        format!(
            "{}/bus/pci/devices/0000:17:00.0/vendor: expected a hex id like 0x10de, found \"nvidia\"",
            sys.display()
        )
    );
    let (_s, sys, text) = broken_example("numvfs", |sys| {
        write(
            &sys.join("bus/pci/devices/0000:3b:00.0/sriov_numvfs"),
            "-2\n",
        );
    });
    assert_eq!(
        text,
        format!(
            "{}/bus/pci/devices/0000:3b:00.0/sriov_numvfs: expected a VF count, found \"-2\"",
            sys.display()
        )
    );
}

#[test]
fn distance_row_of_the_wrong_length() {
    let (_s, sys, text) = broken_example("distlen", |sys| {
        write(
            &sys.join("devices/system/node/node0/distance"),
            "10 12 20\n",
        );
        fs::remove_file(sys.join("devices/system/node/online")).expect("rm");
    });
    assert_eq!(
        text,
        format!(
            "{}/devices/system/node/node0/distance: expected 4 distances (one per NUMA node 0-3), found 3 in \"10 12 20\"",
            sys.display()
        )
    );
}

#[test]
fn online_cpu_outside_every_node_and_cpu_in_two_nodes() {
    // CPU 15 online but in no node's cpulist: kept, with no node, and the
    // table says so.
    let (_s, sys) = Scratch::copy_of(&example_root(), "nonode");
    write(&sys.join("devices/system/node/node3/cpulist"), "6-7,14\n");
    let machine = discover(&sys).expect("discovery keeps CPUs without a node");
    assert_eq!(machine.cpus[15].numa, None);
    assert!(machine.cpus[15].online);
    assert_eq!(machine.cpus_without_node(), cpus("15"));
    assert_eq!(machine.numa_nodes[3].cpus, cpus("6-7,14"));
    assert!(
        render_table(&machine)
            .contains("\nCPUs in no NUMA node: 15 (shared pool only, never exclusive)\n"),
        "{}",
        render_table(&machine)
    );
    assert_eq!(
        serde_json::to_value(&machine).expect("json")["cpus"][15]["numa"],
        serde_json::Value::Null
    );
    let (_s, sys, text) = broken_example("twonodes", |sys| {
        write(
            &sys.join("devices/system/node/node2/cpulist"),
            "3-5,12-13\n",
        );
    });
    assert_eq!(
        text,
        format!(
            "{}/devices/system/node/node2: CPU 3 is also in the cpulist of NUMA node 1",
            sys.display()
        )
    );
}

#[test]
fn offline_cpu_and_pci_node_the_machine_lacks() {
    let (_s, sys) = Scratch::copy_of(&example_root(), "offline");
    let cpu13 = sys.join("devices/system/cpu/cpu13");
    write(&cpu13.join("online"), "0\n");
    fs::remove_dir_all(cpu13.join("topology")).expect("rm topology");
    fs::remove_dir_all(cpu13.join("cache")).expect("rm cache");
    write(&sys.join("devices/system/cpu/online"), "0-12,14-15\n");
    write(&sys.join("bus/pci/devices/0000:b1:00.0/numa_node"), "7\n");
    let machine = discover(&sys).expect("discovery");
    assert_eq!(
        machine.cpus[13],
        Cpu::new(13, Some(node(2))).with_online(false)
    );
    assert_eq!(machine.cpus[5].core, 5);
    assert_eq!(machine.online_cpus(), cpus("0-12,14-15"));
    assert_eq!(machine.pci_devices[5].numa, None);
}

#[test]
fn non_numa_kernel_is_one_node() {
    let (scratch, sys) = Scratch::copy_of(&example_root(), "nonuma");
    fs::remove_dir_all(sys.join("devices/system/node")).expect("rm node");
    let hp = sys.join("kernel/mm/hugepages/hugepages-2048kB");
    fs::create_dir_all(&hp).expect("mkdir");
    write(&hp.join("nr_hugepages"), "64\n");
    write(&hp.join("free_hugepages"), "60\n");
    fs::create_dir_all(scratch.0.join("proc")).expect("mkdir proc");
    write(
        &scratch.0.join("proc/meminfo"),
        "MemTotal:       32768000 kB\nMemFree:        16384000 kB\nMemAvailable:   20000000 kB\n",
    );
    let machine = discover(&sys).expect("discovery");
    assert_eq!(
        machine.numa_nodes,
        vec![NumaNode::new(node(0), cpus("0-15"))
            .with_memory(32768000 * 1024, 16384000 * 1024)
            .with_hugepages(2048, 64)
            .with_distances(BTreeMap::from([(node(0), 10)]))
            .tap_free("2048kB", 60)]
    );
    assert!(machine.cpus.iter().all(|c| c.numa == Some(node(0))));
    // Devices that named nodes 1 and 2 now name a node the machine lacks.
    let numas: Vec<Option<u32>> = machine
        .pci_devices
        .iter()
        .map(|d| d.numa.map(|n| n.get()))
        .collect();
    assert_eq!(numas, vec![None, Some(0), None, None, None, None]);
}

/// Sets the free pages of one hugepage size (the builder makes them all free).
trait TapFree {
    fn tap_free(self, size: &str, free: u64) -> Self;
}

impl TapFree for NumaNode {
    fn tap_free(mut self, size: &str, free: u64) -> Self {
        self.hugepages.get_mut(size).expect("hugepage size").free = free;
        self
    }
}

// -------------------------------------------------------------- hwloc corpus

/// Files of a recorded tree that discovery never reads, left out when
/// unpacking (`tar --exclude`, matched against every path component): cpufreq
/// and cpuidle state, memory blocks, power management, and the cache
/// attributes other than `level`, `id` and `shared_cpu_*`. They are two
/// thirds of the corpus's ~127,000 files.
const NOT_READ: &[&str] = &[
    "cpufreq",
    "cpuidle",
    "memory[0-9]*",
    "power",
    "microcode",
    "crash_notes",
    "thermal_throttle",
    "acpi_cppc",
    "hotplug",
    "msi_irqs",
    "device-tree",
    "size",
    "type",
    "ways_of_associativity",
    "number_of_sets",
    "coherency_line_size",
    "physical_line_partition",
    "allocation_policy",
    "write_policy",
];

/// Unpack `tarball` (without the [`NOT_READ`] files) into the empty
/// directory `dest`; the path of the tree's top directory (which holds `sys/`
/// and often `proc/`).
fn unpack(tarball: &Path, dest: &Path) -> Result<PathBuf, String> {
    let mut tar = Command::new("tar");
    tar.arg("xjf").arg(tarball).arg("-C").arg(dest);
    for pattern in NOT_READ {
        tar.arg(format!("--exclude={pattern}"));
    }
    let out = tar
        .output()
        .map_err(|e| format!("cannot run tar for {}: {e}", tarball.display()))?;
    if !out.status.success() {
        return Err(format!(
            "tar xjf {} failed: {}",
            tarball.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let inner: Vec<PathBuf> = fs::read_dir(dest)
        .map_err(|e| format!("{}: {e}", dest.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    match inner.as_slice() {
        [top] => Ok(top.clone()),
        _ => Err(format!(
            "{}: expected one top directory, found {}",
            tarball.display(),
            inner.len()
        )),
    }
}

/// A recorded tree unpacked into a scratch directory.
struct Recorded {
    _scratch: Scratch,
    sys: PathBuf,
    console: Option<String>,
}

/// Unpack `<name>.tar.bz2` of the corpus (tests marked `#[ignore = "needs
/// the recorded sysfs trees of ../shared/corpus"]`); fails when it is absent.
fn recorded(name: &str) -> Recorded {
    let dir = corpus_dir();
    let tarball = dir.join(format!("{name}.tar.bz2"));
    assert!(
        tarball.exists(),
        "needs the recorded sysfs trees: {} is absent (../shared/corpus beside the repository)",
        tarball.display()
    );
    let scratch = Scratch::new(name);
    let top = unpack(&tarball, &scratch.0).unwrap_or_else(|e| panic!("{e}"));
    let console = fs::read_to_string(dir.join(format!("{name}.console"))).ok();
    Recorded {
        _scratch: scratch,
        sys: top.join("sys"),
        console,
    }
}

/// One line of the object tree of `lstopo -v -` output.
struct ConsoleLine {
    indent: usize,
    kind: String,
    os: Option<u32>,
    attrs: String,
}

/// What hwloc's console output says about the machine.
#[derive(Debug, Default)]
struct HwlocView {
    /// Every PU shown.
    pus: BTreeSet<u32>,
    /// NUMA node P# -> index of the object it hangs below (`None`: the
    /// machine) and its `local=` memory.
    numa: BTreeMap<u32, (Option<usize>, String)>,
    /// Object index -> the PUs below it (for the NUMA nodes' parents).
    parent_pus: BTreeMap<usize, BTreeSet<u32>>,
    /// Package P# (`None` when hwloc prints none) and PUs, when hwloc
    /// shows packages.
    packages: Option<Vec<(Option<u32>, BTreeSet<u32>)>>,
    /// The PU sets of the cores, when hwloc shows cores.
    cores: Option<BTreeSet<BTreeSet<u32>>>,
    /// The PU sets of the dies, when hwloc shows dies.
    dies: Option<BTreeSet<BTreeSet<u32>>>,
    /// The PU sets of the L3 caches, when hwloc shows them.
    l3: Option<BTreeSet<BTreeSet<u32>>>,
}

fn parse_console(text: &str) -> HwlocView {
    // The object tree comes first; the summary after it starts at "depth 0:".
    let lines: Vec<ConsoleLine> = text
        .lines()
        .take_while(|l| !l.starts_with("depth "))
        .filter_map(|l| {
            let indent = l.len() - l.trim_start().len();
            let (kind, rest) = l.trim_start().split_once(" L#")?;
            let attrs = rest
                .split_once('(')
                .map(|(_, a)| a.to_string())
                .unwrap_or_default();
            let os = attrs
                .strip_prefix("P#")
                .and_then(|p| p.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok());
            Some(ConsoleLine {
                indent,
                kind: kind.to_string(),
                os,
                attrs,
            })
        })
        .collect();
    let subtree_pus = |i: usize| -> BTreeSet<u32> {
        lines[i + 1..]
            .iter()
            .take_while(|l| l.indent > lines[i].indent)
            .filter(|l| l.kind == "PU")
            .filter_map(|l| l.os)
            .collect()
    };
    let mut view = HwlocView::default();
    for (i, line) in lines.iter().enumerate() {
        match line.kind.as_str() {
            "PU" => view.pus.extend(line.os),
            "Package" => {
                view.packages
                    .get_or_insert_with(Vec::new)
                    .push((line.os, subtree_pus(i)));
            }
            "Core" => {
                view.cores
                    .get_or_insert_with(BTreeSet::new)
                    .insert(subtree_pus(i));
            }
            "Die" => {
                view.dies
                    .get_or_insert_with(BTreeSet::new)
                    .insert(subtree_pus(i));
            }
            "L3Cache" => {
                view.l3
                    .get_or_insert_with(BTreeSet::new)
                    .insert(subtree_pus(i));
            }
            kind if kind.starts_with("NUMANode") => {
                // Memory-side caches sit between a node and the object
                // its CPUs form.
                let parent = (0..i).rev().find(|&j| {
                    lines[j].indent < line.indent && !lines[j].kind.starts_with("MemCache")
                });
                if let Some(p) = parent {
                    view.parent_pus.insert(p, subtree_pus(p));
                }
                let local = line
                    .attrs
                    .split_whitespace()
                    .find_map(|a| a.strip_prefix("local="))
                    .unwrap_or_default();
                view.numa.insert(
                    line.os.expect("NUMA node P#"),
                    (parent, local.trim_end_matches(')').to_string()),
                );
            }
            _ => {}
        }
    }
    if let Some(packages) = &mut view.packages {
        // A package whose PUs are all outside the recorded cpuset is shown
        // for its memory only.
        packages.retain(|(_, pus)| !pus.is_empty());
    }
    view
}

/// hwloc prints sizes rounded to KB/MB/GB (binary units); check ours
/// against that.
fn same_size(bytes: u64, hwloc: &str) -> bool {
    let (number, unit) = hwloc.split_at(
        hwloc
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(hwloc.len()),
    );
    let Ok(n) = number.parse::<u64>() else {
        return false;
    };
    let div = match unit {
        "KB" | "KiB" => 1 << 10,
        "MB" | "MiB" => 1 << 20,
        "GB" | "GiB" => 1 << 30,
        "TB" | "TiB" => 1u64 << 40,
        _ => return false,
    };
    bytes / div == n || (bytes + div / 2) / div == n
}

/// PU sets of the objects of one hwloc level.
type Groups = BTreeSet<BTreeSet<u32>>;
/// Packages as (P# when known, PUs).
type Labeled = BTreeSet<(Option<u32>, BTreeSet<u32>)>;
/// Which group of a level a CPU is in (`None`: in none).
type GroupKey = dyn Fn(&Cpu) -> Option<(u32, u32)>;
/// The (cpus, mems) file names a cpuset controller may use.
type CgroupFiles = &'static [(&'static str, &'static str)];

/// The CPUs and NUMA nodes the recording process was allowed to use (its
/// cpuset cgroup), which is all hwloc shows unless run with `--disallowed`.
/// topomgr reports the whole machine (the cgroup layer restricts workloads
/// later), so the comparison restricts our reading the same way.
#[derive(Debug, Default)]
struct Allowed {
    cpus: Option<CpuSet>,
    mems: Option<CpuSet>,
}

impl Allowed {
    fn cpu(&self, id: u32) -> bool {
        self.cpus.as_ref().is_none_or(|s| s.contains(id))
    }
    fn node(&self, id: u32) -> bool {
        self.mems.as_ref().is_none_or(|s| s.contains(id))
    }
}

/// The recorded process's cpuset, found the way hwloc finds it: a cgroup2
/// mount (`cpuset.*.effective` under the `0::` path of `proc/self/cgroup`),
/// else a v1 cgroup mount with the cpuset controller, else a `cpuset` file
/// system (the path from `proc/self/cpuset`, files with or without the
/// `cpuset.` prefix).
fn recorded_cpuset(top: &Path) -> Allowed {
    let read = |p: &Path| fs::read_to_string(p).ok();
    let Some(mounts) = read(&top.join("proc/mounts")) else {
        return Allowed::default();
    };
    let cgroup = read(&top.join("proc/self/cgroup")).unwrap_or_default();
    let cpuset_name = read(&top.join("proc/self/cpuset")).map(|s| s.trim().to_string());
    let v2_name = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
        .or_else(|| cpuset_name.clone());
    let v1_name = cgroup
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "cpuset")
                .then(|| path.to_string())
        })
        .or_else(|| cpuset_name.clone());
    let mut candidates: Vec<(String, Option<String>, CgroupFiles)> = Vec::new();
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, mnt, fstype, opts, ..] = fields.as_slice() else {
            continue;
        };
        let files: &[(&str, &str)] = match *fstype {
            "cgroup2" => &[("cpuset.cpus.effective", "cpuset.mems.effective")],
            "cgroup" if opts.split(',').any(|o| o == "cpuset") => {
                &[("cpuset.cpus", "cpuset.mems"), ("cpus", "mems")]
            }
            "cpuset" => &[("cpus", "mems"), ("cpuset.cpus", "cpuset.mems")],
            _ => continue,
        };
        let name = if *fstype == "cgroup2" {
            v2_name.clone()
        } else if *fstype == "cgroup" {
            v1_name.clone()
        } else {
            cpuset_name.clone()
        };
        candidates.push((mnt.to_string(), name, files));
    }
    candidates.sort_by_key(|(_, _, files)| files[0].0 != "cpuset.cpus.effective");
    for (mnt, name, files) in candidates {
        let Some(name) = name else { continue };
        let dir = top
            .join(mnt.trim_start_matches('/'))
            .join(name.trim_start_matches('/'));
        for (cpus_file, mems_file) in files {
            let (Some(cpus), Some(mems)) = (read(&dir.join(cpus_file)), read(&dir.join(mems_file)))
            else {
                continue;
            };
            return Allowed {
                cpus: CpuSet::parse(cpus.trim()).ok(),
                mems: CpuSet::parse(mems.trim()).ok(),
            };
        }
    }
    Allowed::default()
}

/// How our reading differs from hwloc's: the set of NUMA nodes, each node's
/// CPUs (hwloc hangs a node below the object its CPUs form; a CPU-less node,
/// whose sysfs cpulist is empty, may hang anywhere) and local memory, the
/// CPUs of each package, which CPUs share a core, die and L3 (each when
/// hwloc shows that level). Empty when they agree.
fn differences(machine: &Machine, view: &HwlocView, allowed: &Allowed) -> Vec<String> {
    let mut out = Vec::new();
    let online: Vec<&Cpu> = machine
        .cpus
        .iter()
        .filter(|c| c.online && allowed.cpu(c.id))
        .collect();
    let ids: BTreeSet<u32> = online.iter().map(|c| c.id).collect();
    if ids != view.pus {
        out.push(format!(
            "online CPUs {}, hwloc {}",
            set_text(&ids),
            set_text(&view.pus)
        ));
    }
    let nodes: BTreeMap<u32, &NumaNode> = machine
        .numa_nodes
        .iter()
        .filter(|n| allowed.node(n.id.get()))
        .map(|n| (n.id.get(), n))
        .collect();
    let node_ids: BTreeSet<u32> = nodes.keys().copied().collect();
    let hwloc_ids: BTreeSet<u32> = view.numa.keys().copied().collect();
    if node_ids != hwloc_ids {
        out.push(format!(
            "NUMA nodes {}, hwloc {}",
            set_text(&node_ids),
            set_text(&hwloc_ids)
        ));
    }
    let node_cpus =
        |n: &NumaNode| -> BTreeSet<u32> { n.cpus.iter().filter(|c| ids.contains(c)).collect() };
    let mut by_parent: BTreeMap<Option<usize>, Vec<u32>> = BTreeMap::new();
    for (id, (parent, local)) in &view.numa {
        by_parent.entry(*parent).or_default().push(*id);
        if let Some(node) = nodes.get(id) {
            // Without a `local=` hwloc found no meminfo either.
            let same = if local.is_empty() {
                node.memory_bytes == 0
            } else {
                same_size(node.memory_bytes, local)
            };
            if !same {
                out.push(format!(
                    "node {id}: memory {} bytes, hwloc local={local}",
                    node.memory_bytes
                ));
            }
        }
    }
    for (parent, members) in &by_parent {
        let locality = match parent {
            Some(p) => view.parent_pus.get(p).cloned().unwrap_or_default(),
            None => view.pus.clone(),
        };
        let mut union = BTreeSet::new();
        for id in members {
            let Some(node) = nodes.get(id) else { continue };
            let cpus = node_cpus(node);
            if !cpus.is_subset(&locality) {
                out.push(format!(
                    "node {id}: CPUs {}, hwloc places it at {}",
                    set_text(&cpus),
                    set_text(&locality)
                ));
            }
            union.extend(cpus);
        }
        if !union.is_empty() && union != locality {
            out.push(format!(
                "nodes {members:?}: CPUs {}, hwloc {}",
                set_text(&union),
                set_text(&locality)
            ));
        }
    }
    if let Some(hwloc) = &view.packages {
        let mut ours: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for cpu in &online {
            ours.entry(cpu.socket).or_default().insert(cpu.id);
        }
        // By P# when hwloc prints them (they are physical_package_id),
        // else as a partition of the CPUs.
        let (ours, theirs): (Labeled, Labeled) = if hwloc.iter().all(|(os, _)| os.is_some()) {
            (
                ours.into_iter().map(|(k, v)| (Some(k), v)).collect(),
                hwloc.iter().cloned().collect(),
            )
        } else {
            (
                ours.into_values().map(|v| (None, v)).collect(),
                hwloc.iter().map(|(_, v)| (None, v.clone())).collect(),
            )
        };
        if ours != theirs {
            let text = |set: &Labeled| {
                let parts: Vec<String> = set
                    .iter()
                    .map(|(os, pus)| match os {
                        Some(os) => format!("{os}:{}", set_text(pus)),
                        None => set_text(pus),
                    })
                    .collect();
                format!("[{}]", parts.join(" "))
            };
            out.push(format!("packages {}, hwloc {}", text(&ours), text(&theirs)));
        }
    }
    let groups = |key: &dyn Fn(&Cpu) -> Option<(u32, u32)>| -> BTreeSet<BTreeSet<u32>> {
        let mut map: BTreeMap<(u32, u32), BTreeSet<u32>> = BTreeMap::new();
        for cpu in &online {
            if let Some(k) = key(cpu) {
                map.entry(k).or_default().insert(cpu.id);
            }
        }
        map.into_values().collect()
    };
    let levels: [(&str, &Option<Groups>, &GroupKey); 3] = [
        ("cores", &view.cores, &|c: &Cpu| Some((c.core, 0))),
        ("dies", &view.dies, &|c: &Cpu| Some((c.socket, c.die))),
        ("L3 caches", &view.l3, &|c: &Cpu| c.l3.map(|l| (l, 0))),
    ];
    for (what, hwloc, key) in levels {
        if let Some(hwloc) = hwloc {
            let ours = groups(key);
            if &ours != hwloc {
                out.push(format!(
                    "{what} {}, hwloc {}",
                    groups_text(&ours),
                    groups_text(hwloc)
                ));
            }
        }
    }
    out
}

fn set_text(set: &BTreeSet<u32>) -> String {
    let set: CpuSet = set.iter().copied().collect();
    if set.is_empty() {
        "none".to_string()
    } else {
        set.to_string()
    }
}

fn groups_text(groups: &BTreeSet<BTreeSet<u32>>) -> String {
    let parts: Vec<String> = groups.iter().map(set_text).collect();
    format!("[{}]", parts.join(" "))
}

/// One `.test` of the corpus whose expected reading is a `.console` file.
#[derive(Debug)]
struct ConsoleCase {
    /// The `.test` file's name without extension.
    name: String,
    /// The tarball's name without `.tar.bz2`.
    source: String,
    /// The console file's text.
    console: String,
    /// lstopo options (`--disallowed` shows what the cpuset hides).
    options: String,
}

/// Every `.test` of the corpus whose target is a `.console` file, by name.
fn console_cases(dir: &Path) -> Vec<ConsoleCase> {
    let mut cases = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return cases;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("test") {
            continue;
        }
        let text = fs::read_to_string(&path).expect("read .test file");
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
        };
        let (Some(source), Some(target)) = (field("source:"), field("target:")) else {
            continue;
        };
        if !target.ends_with(".console") {
            continue;
        }
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("UTF-8 name")
            .to_string();
        cases.push(ConsoleCase {
            name,
            source: source
                .strip_suffix(".tar.bz2")
                .expect("a .tar.bz2 source")
                .to_string(),
            console: fs::read_to_string(dir.join(&target)).expect("read console file"),
            options: field("options:").unwrap_or_default(),
        });
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

/// Unpack every named tarball of `dir` into its own directory under
/// `dest`, on as many threads as there are CPUs; name -> top directory.
fn unpack_all(dir: &Path, names: &BTreeSet<String>, dest: &Path) -> BTreeMap<String, PathBuf> {
    let names: Vec<&String> = names.iter().collect();
    let next = AtomicUsize::new(0);
    let done = Mutex::new(BTreeMap::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(name) = names.get(i) else { break };
                let into = dest.join(name.as_str());
                fs::create_dir_all(&into).expect("create unpack dir");
                let top = unpack(&dir.join(format!("{name}.tar.bz2")), &into)
                    .unwrap_or_else(|e| panic!("{e}"));
                done.lock()
                    .expect("no thread panicked holding the lock")
                    .insert((*name).clone(), top);
            });
        }
    });
    done.into_inner()
        .expect("no thread panicked holding the lock")
}

/// Recorded machines that cannot match hwloc's reading: the name, the
/// reason, and what may differ (every difference must start with one of
/// these). Each reason is a tree the kernel would not write (hand-edited
/// hwloc test data), or a documented topomgr limit. The suite fails when a
/// listed machine starts to match, or differs in another way.
const EXCEPTED: &[(&str, &str, &[&str])] = &[
    (
        "16ia64-8n2s",
        "sysfs ambiguity: physical_package_id pairs the CPUs (0-1 in package 0, 2-3 in 512, ...) while each CPU's core_siblings lists only itself; topomgr takes the package id like the kubelet's cAdvisor, hwloc builds packages from core_siblings",
        &["packages"],
    ),
    (
        "40intel64-4n10c+pci-conflicts",
        "hand-edited conflicts: the hex masks contradict the lists (cpu3's core_siblings mask is 0-3 where its list is package 3; cpu2's L3 shared_cpu_map is 0-3); topomgr reads the lists, which agree with physical_package_id; hwloc reads the masks and drops the conflicting package and L3",
        &["packages", "L3 caches"],
    ),
    (
        "64fake-4n2s2ca2c2t",
        "hand-edited tree: every CPU's L3 shared_cpu_list says 0-7 while its shared_cpu_map names its own 8 CPUs (the kernel writes both from one mask); topomgr reads the list, hwloc the mask",
        &["L3 caches"],
    ),
    (
        "8em64t-2s2ca2c-buggynuma",
        "sysfs inconsistency: all 8 NUMA nodes list the same CPUs; topomgr refuses a CPU in two nodes, hwloc merges the nodes",
        &["refused: "],
    ),
    (
        "nvidiagpunumanodes",
        "hwloc hides the V100 GPU memory nodes 250-255 unless HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1; topomgr keeps every node the kernel lists, like the kubelet (nvidiagpunumanodes-kept, the same tree read with that variable, matches)",
        &["NUMA nodes 0,8,250-255, hwloc 0,8"],
    ),
];

/// Trees without a console reading that discovery refuses, with the reason.
const XML_ONLY_REFUSED: &[(&str, &str)] = &[(
    "fakeheterocpunuma",
    "hand-made tree whose NUMA nodes overlap (CPU 20 is in nodes 3 and 4); hwloc itself reads it only with HWLOC_DEBUG_ALLOW_OVERLAPPING_NODE_CPUSETS=1",
)];

/// The invariants every discovered machine holds: each CPU's node and each
/// PCI device's node (unless none) is a node of the machine, each node's CPUs
/// say they are on it, and the JSON form reads back.
fn consistent(machine: &Machine) -> Result<(), String> {
    let ids = machine.numa_ids();
    for cpu in &machine.cpus {
        if cpu.numa.is_some_and(|n| !ids.contains(&n)) {
            return Err(format!("CPU {} on node {:?}", cpu.id, cpu.numa));
        }
    }
    for node in &machine.numa_nodes {
        for id in node.cpus.iter() {
            match machine.cpus.iter().find(|c| c.id == id) {
                Some(cpu) if cpu.numa == Some(node.id) => {}
                _ => return Err(format!("node {} lists CPU {id}", node.id)),
            }
        }
    }
    for dev in &machine.pci_devices {
        if dev.numa.is_some_and(|n| !ids.contains(&n)) {
            return Err(format!("{} on node {:?}", dev.address, dev.numa));
        }
    }
    let text = serde_json::to_string(machine).map_err(|e| e.to_string())?;
    let back: Machine = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if &back != machine {
        return Err("the JSON form does not read back".to_string());
    }
    Ok(())
}

/// The corpus suite: every recorded machine whose `.test` names a
/// `.console` reading is discovered and compared with what hwloc read from
/// the same tree ([`differences`]). Prints one line per machine. The trees
/// are unpacked once, in parallel, without the files discovery never reads.
#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_matches_hwloc() {
    let dir = corpus_dir();
    let cases = console_cases(&dir);
    assert!(
        !cases.is_empty(),
        "needs the recorded sysfs trees: no hwloc corpus at {} (../shared/corpus beside the repository)",
        dir.display()
    );
    let start = Instant::now();
    let scratch = Scratch::new("corpus");
    let sources: BTreeSet<String> = cases.iter().map(|c| c.source.clone()).collect();
    let others: BTreeSet<String> = fs::read_dir(&dir)
        .expect("read corpus dir")
        .filter_map(|e| {
            let name = e
                .ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".tar.bz2")?
                .to_string();
            (!sources.contains(&name)).then_some(name)
        })
        .collect();
    let all: BTreeSet<String> = sources.union(&others).cloned().collect();
    let trees = unpack_all(&dir, &all, &scratch.0);
    let unpacked = start.elapsed();
    let excepted: BTreeMap<&str, (&str, &[&str])> = EXCEPTED
        .iter()
        .map(|(name, reason, may_differ)| (*name, (*reason, *may_differ)))
        .collect();
    let mut unexpected = Vec::new();
    for case in &cases {
        let top = &trees[&case.source];
        let outcome = match discover(&top.join("sys")) {
            Err(e) => Err(vec![format!("refused: {e}")]),
            Ok(machine) => {
                let view = parse_console(&case.console);
                let allowed = if case.options.contains("--disallowed") {
                    Allowed::default()
                } else {
                    recorded_cpuset(top)
                };
                let mut diffs = differences(&machine, &view, &allowed);
                if let Err(e) = consistent(&machine) {
                    diffs.push(e);
                }
                if diffs.is_empty() {
                    Ok(format!(
                        "{} NUMA nodes, {} CPUs ({} online)",
                        machine.numa_nodes.len(),
                        machine.cpus.len(),
                        machine.online_cpus().len()
                    ))
                } else {
                    Err(diffs)
                }
            }
        };
        match (outcome, excepted.get(case.name.as_str())) {
            (Ok(summary), None) => println!("{}: matched ({summary})", case.name),
            (Err(diffs), Some((reason, may_differ))) => {
                if diffs
                    .iter()
                    .all(|d| may_differ.iter().any(|p| d.starts_with(p)))
                {
                    println!("{}: excepted: {reason}", case.name);
                } else {
                    unexpected.push(format!(
                        "{}: differs beyond its exception ({may_differ:?}): {}",
                        case.name,
                        diffs.join("; ")
                    ));
                }
            }
            (Ok(summary), Some(_)) => unexpected.push(format!(
                "{}: listed as an exception but matches hwloc ({summary}); remove it from EXCEPTED",
                case.name
            )),
            (Err(diffs), None) => unexpected.push(format!("{}: {}", case.name, diffs.join("; "))),
        }
    }
    // Trees whose hwloc reading is XML only: discovery must still give a
    // self-consistent machine, or refuse a tree the kernel would not write.
    for name in &others {
        match discover(&trees[name].join("sys")) {
            Ok(machine) => {
                consistent(&machine).unwrap_or_else(|e| unexpected.push(format!("{name}: {e}")));
                println!(
                    "{name}: discovered (XML reading only, not compared): {} NUMA nodes, {} CPUs",
                    machine.numa_nodes.len(),
                    machine.cpus.len()
                );
            }
            Err(e) => match XML_ONLY_REFUSED.iter().find(|(n, _)| n == name) {
                Some((_, reason)) => println!("{name}: refused as expected: {reason} [{e}]"),
                None => unexpected.push(format!("{name}: refused: {e}")),
            },
        }
    }
    for name in excepted.keys() {
        assert!(
            cases.iter().any(|c| c.name == *name),
            "EXCEPTED names {name}, which is not a console test of the corpus"
        );
    }
    println!(
        "{} machines ({} trees unpacked in {unpacked:?}), {:?} in all",
        cases.len(),
        sources.len(),
        start.elapsed()
    );
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_16amd64_8n2c() {
    let rec = recorded("16amd64-8n2c");
    let machine = discover(&rec.sys).expect("16amd64-8n2c");
    assert_eq!(machine.numa_ids(), nodes(&[0, 1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(machine.numa_nodes[3].cpus, cpus("6-7"));
    assert_eq!(machine.numa_nodes[0].memory_bytes, 8386704 * 1024);
    assert_eq!(
        machine.numa_nodes[0].distances,
        (0..8)
            .map(|n| (node(n), if n == 0 { 10 } else { 20 }))
            .collect::<BTreeMap<_, _>>()
    );
    assert!(machine.cpus.iter().all(|c| c.l3.is_none()));
    let view = parse_console(rec.console.as_deref().expect("console file"));
    assert_eq!(
        differences(&machine, &view, &Allowed::default()),
        Vec::<String>::new()
    );
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_256ia64_64_nodes() {
    let rec = recorded("256ia64-64n2s2c");
    let machine = discover(&rec.sys).expect("256ia64-64n2s2c");
    assert_eq!(machine.numa_ids(), (0..64).map(node).collect::<Vec<_>>());
    assert_eq!(machine.numa_mask().len(), 64);
    assert_eq!(machine.cpus.len(), 256);
    assert_eq!(machine.numa_nodes[63].cpus, cpus("252-255"));
    assert_eq!(machine.numa_nodes[63].distances.len(), 64);
    assert_eq!(machine.numa_nodes[0].distances[&node(0)], 10);
    let sockets: BTreeSet<u32> = machine.cpus.iter().map(|c| c.socket).collect();
    assert_eq!(sockets.len(), 128);
}

/// `topomgr topology --output table` on the 64-node machine: the nodes,
/// then the distances as classes per node (a 64x64 matrix is unreadable).
#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_256ia64_table_from_the_cli() {
    let rec = recorded("256ia64-64n2s2c");
    let out = Command::new(common::topomgr_bin())
        .args(["topology", "--output", "table", "--sysfs-root"])
        .arg(&rec.sys)
        .output()
        .expect("run topomgr");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 table");
    let head: Vec<&str> = text.lines().take(6).collect();
    assert_eq!(
        head,
        [
            "64 NUMA nodes, 128 sockets, 256 CPUs (256 online), 0 PCI devices",
            "",
            // Each node's CPUs have two physical package ids in this tree.
            "NUMA node 0: sockets 0,3, CPUs 0-3 (4), memory 7.7 GiB (6.8 GiB free)",
            "",
            "NUMA node 1: sockets 512,515, CPUs 4-7 (4), memory 7.7 GiB (7.0 GiB free)",
            "",
        ]
    );
    let distances: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("NUMA distances"))
        .collect();
    assert_eq!(distances.len(), 65);
    assert_eq!(
        distances[..3],
        [
            "NUMA distances (per node, distance: nodes at that distance):",
            "  node  0:  10: 0  22: 1-3  26: 4-11  30: 12-19,24-27,32-35,40-43,48-51,56-59  34: 20-23,28-31,36-39,44-47,52-55,60-63",
            "  node  1:  10: 1  22: 0,2-3  26: 4-11  30: 12-19,24-27,32-35,40-43,48-51,56-59  34: 20-23,28-31,36-39,44-47,52-55,60-63",
        ]
    );
    assert_eq!(
        distances[64],
        "  node 63:  10: 63  22: 60-62  26: 52-59  30: 4-7,12-15,20-23,28-31,36-39,44-51  34: 0-3,8-11,16-19,24-27,32-35,40-43"
    );
    assert!(
        text.lines().all(|l| l.len() <= 132),
        "no line wider than 132 columns"
    );
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_16em64t_offline_cpus() {
    let rec = recorded("16em64t-4s2c2t-offlines");
    let machine = discover(&rec.sys).expect("16em64t-4s2c2t-offlines");
    assert_eq!(machine.cpus.len(), 16);
    let offline: CpuSet = machine
        .cpus
        .iter()
        .filter(|c| !c.online)
        .map(|c| c.id)
        .collect();
    assert_eq!(offline, cpus("2,5,13-14"));
    assert_eq!(
        machine.cpus[2],
        Cpu::new(2, Some(node(0))).with_online(false)
    );
    // CPU 10 is alone in its core once CPU 2 went offline.
    assert_eq!(machine.cpus[10].core, 10);
    assert_eq!(machine.cpus[8].core, 0);
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_48amd64_sparse_node_ids() {
    let rec = recorded("48amd64-4pa2n6c-sparse");
    // Node ids 72 and 73 are read as they are; the distance rows map onto
    // the sparse ids by position.
    let machine = discover(&rec.sys).expect("48amd64-4pa2n6c-sparse");
    assert_eq!(machine.numa_ids(), nodes(&[0, 1, 2, 33, 34, 45, 72, 73]));
    assert_eq!(machine.numa_nodes[3].cpus, cpus("18-23"));
    assert_eq!(
        machine.numa_nodes[3].distances,
        BTreeMap::from([
            (node(0), 22),
            (node(1), 16),
            (node(2), 16),
            (node(33), 10),
            (node(34), 16),
            (node(45), 16),
            (node(72), 22),
            (node(73), 22)
        ])
    );
    assert_eq!(machine.cpus[40].numa, Some(node(72)));
    let view = parse_console(rec.console.as_deref().expect("console"));
    assert_eq!(
        differences(&machine, &view, &Allowed::default()),
        Vec::<String>::new()
    );
    // The merge works on these ids: a policy over the machine ranks masks
    // of nodes 72-73 by their value, above every mask of lower ids.
    let numa = topomgr_engine::numa::NumaInfo::from_machine(&machine).expect("numa info");
    assert_eq!(numa.default_mask().to_string(), "0-2,33-34,45,72-73");
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_power9_gpu_memory_nodes_250_to_255() {
    let rec = recorded("nvidiagpunumanodes");
    let machine = discover(&rec.sys).expect("nvidiagpunumanodes");
    assert_eq!(
        machine.numa_ids(),
        nodes(&[0, 8, 250, 251, 252, 253, 254, 255])
    );
    // The V100 memory nodes have memory and no CPUs; their distance rows map
    // onto the sparse ids.
    let gpu = &machine.numa_nodes[2];
    assert!(gpu.cpus.is_empty());
    assert_eq!(gpu.memory_bytes, 15728640 * 1024);
    assert_eq!(gpu.distances[&node(250)], 10);
    assert_eq!(gpu.distances[&node(8)], 80);
    assert_eq!(machine.numa_nodes[1].distances[&node(0)], 40);
    assert_eq!(machine.numa_mask().to_string(), "0,8,250-255");
    consistent(&machine).expect("consistent");
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_online_cpus_without_a_node_are_kept() {
    let rec = recorded("offline-cpu0-node0");
    // NUMA node 0 is offline (no node0 directory) while its CPUs
    // 4,6,...,20 are online, as on the Dell R630 this tree was recorded on.
    let machine = discover(&rec.sys).expect("offline-cpu0-node0");
    assert_eq!(machine.numa_ids(), nodes(&[1]));
    assert_eq!(machine.cpus_without_node(), cpus("4,6,8,10,12,14,16,18,20"));
    assert!(machine
        .cpus
        .iter()
        .filter(|c| machine.cpus_without_node().contains(c.id))
        .all(|c| c.numa.is_none() && c.online && c.socket == 0));
    assert!(render_table(&machine).contains(
        "CPUs in no NUMA node: 4,6,8,10,12,14,16,18,20 (shared pool only, never exclusive)"
    ));

    // The CPU provider runs on this machine and never hands those CPUs out:
    // node 1's online CPUs are the only exclusive ones.
    let entry = topomgr_node::setup::config::ProviderEntry {
        library: common::cpu_plugin().to_string_lossy().into_owned(),
        enabled: true,
        config: serde_json::json!({"policy": "static", "reserved_cpus": ""}),
        defined_in: PathBuf::from("test"),
        config_dir: PathBuf::new(),
    };
    let state = Scratch::new("nonode-cpu");
    let mut cpu =
        topomgr_node::setup::plugin::load_provider("cpu", &entry, &[], &machine, &state.0)
            .unwrap_or_else(|e| panic!("{e}"));
    let online_on_node1 = machine.numa_nodes[0]
        .cpus
        .intersection(&machine.online_cpus());
    let all = online_on_node1.len() as u64;
    let pod = topomgr_sdk::testkit::guaranteed_pod("big", &[("cpu", all * 1000)]);
    let a = cpu
        .allocate(&pod, &pod.containers[0], &topomgr_sdk::TopologyHint::ANY)
        .unwrap();
    assert!(a.exclusive);
    assert_eq!(a.cpus, online_on_node1);
    assert!(a.cpus.intersection(&machine.cpus_without_node()).is_empty());
    cpu.release("big-uid", "app").unwrap();
    let more = topomgr_sdk::testkit::guaranteed_pod("more", &[("cpu", (all + 1) * 1000)]);
    assert!(cpu
        .allocate(&more, &more.containers[0], &topomgr_sdk::TopologyHint::ANY)
        .is_err());
}

#[test]
#[ignore = "needs the recorded sysfs trees of ../shared/corpus"]
fn corpus_inconsistent_trees_are_refused_with_the_reason() {
    let cases = [(
        "8em64t-2s2ca2c-buggynuma",
        "/devices/system/node/node1: CPU 0 is also in the cpulist of NUMA node 0",
    )];
    for (name, suffix) in cases {
        let rec = recorded(name);
        assert_eq!(
            err_text(&rec.sys),
            format!("{}{suffix}", rec.sys.display()),
            "{name}"
        );
    }
}

#[test]
fn live_sysfs_of_this_host() {
    let root = Path::new("/sys");
    assert!(
        root.join("devices/system/cpu").is_dir(),
        "live_sysfs_of_this_host needs the sysfs of a Linux host: no /sys/devices/system/cpu"
    );
    let machine = discover(root).expect("the live /sys");
    assert!(!machine.numa_nodes.is_empty());
    assert!(!machine.online_cpus().is_empty());
    consistent(&machine).expect("consistent");
}

// ------------------------------------------------ SR-IOV example machine

fn sriov_tree() -> PathBuf {
    repo().join("examples/machines/2s2n-sriov")
}

/// A copy of the SR-IOV example machine (`sys/` and the `proc/` beside it).
fn sriov_copy(tag: &str) -> (Scratch, PathBuf) {
    let (scratch, sys) = Scratch::copy_of(&sriov_tree().join("sys"), tag);
    let status = Command::new("cp")
        .arg("-a")
        .arg(sriov_tree().join("proc"))
        .arg(scratch.0.join("proc"))
        .status()
        .expect("run cp");
    assert!(status.success(), "cp -a proc failed");
    (scratch, sys)
}

/// The SR-IOV facts of `examples/machines/2s2n-sriov` as its README
/// describes them (IOMMU groups numbered from 10 in the generator's order).
#[test]
fn sriov_machine_pci_fields() {
    let machine = discover(&sriov_tree().join("sys")).expect("2s2n-sriov");
    let dev = |a: &str| {
        machine
            .pci_devices
            .iter()
            .find(|d| d.address == a)
            .unwrap_or_else(|| panic!("no {a}"))
            .clone()
    };
    let pci = |a: &str, vendor: &str, device: &str, class: &str, numa: u32, driver: &str| {
        PciDevice::new(a, vendor, device, class, Some(node(numa))).with_driver(driver)
    };
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(machine.pci_devices.len(), 17);
    assert_eq!(
        dev("0000:01:00.0"),
        pci("0000:01:00.0", "0x8086", "0x1521", "0x020000", 0, "igb")
            .with_net(strings(&["eno1"]))
            .with_link_type(1)
            .with_acpi_index(1)
            .with_iommu_group(11)
            .with_default_route(true)
    );
    assert_eq!(
        dev("0000:01:00.1"),
        pci("0000:01:00.1", "0x8086", "0x1521", "0x020000", 0, "igb")
            .with_net(strings(&["eno2"]))
            .with_link_type(1)
            .with_acpi_index(2)
            .with_iommu_group(12)
    );
    let vfs0 = strings(&[
        "0000:18:01.0",
        "0000:18:01.1",
        "0000:18:01.2",
        "0000:18:01.3",
    ]);
    let mut sriov = Sriov::new(128, vfs0);
    sriov.num_vfs = 4;
    assert_eq!(
        dev("0000:18:00.0"),
        pci("0000:18:00.0", "0x8086", "0x1592", "0x020000", 0, "ice")
            .with_net(strings(&["ens1f0"]))
            .with_link_type(1)
            .with_iommu_group(13)
            .with_sriov(sriov)
    );
    // A kernel VF (iavf, interface) and a DPDK VF (vfio-pci, none) of node 1.
    assert_eq!(
        dev("0000:86:01.1"),
        pci("0000:86:01.1", "0x8086", "0x1889", "0x020000", 1, "iavf")
            .with_net(strings(&["ens2f0v1"]))
            .with_link_type(1)
            .with_physfn("0000:86:00.0")
            .with_vf_index(1)
            .with_iommu_group(20)
    );
    assert_eq!(
        dev("0000:86:01.3"),
        pci(
            "0000:86:01.3",
            "0x8086",
            "0x1889",
            "0x020000",
            1,
            "vfio-pci"
        )
        .with_physfn("0000:86:00.0")
        .with_vf_index(3)
        .with_iommu_group(22)
    );
    assert_eq!(
        dev("0000:d8:00.3"),
        pci(
            "0000:d8:00.3",
            "0x15b3",
            "0x1018",
            "0x020000",
            1,
            "mlx5_core"
        )
        .with_net(strings(&["ens3f0v1"]))
        .with_link_type(1)
        .with_physfn("0000:d8:00.0")
        .with_vf_index(1)
        .with_rdma(
            strings(&["mlx5_3"]),
            strings(&["issm3", "umad3", "uverbs3"])
        )
        .with_iommu_group(25)
    );
    assert_eq!(
        dev("0000:af:00.0"),
        pci(
            "0000:af:00.0",
            "0x8086",
            "0x0d90",
            "0x120000",
            1,
            "vfio-pci"
        )
        .with_iommu_group(26)
    );
    // Every VF has its index; only eno1 carries the default route.
    let vf_indexes: Vec<(String, u32)> = machine
        .pci_devices
        .iter()
        .filter_map(|d| Some((d.address.clone(), d.vf_index?)))
        .collect();
    assert_eq!(vf_indexes.len(), 10);
    assert!(vf_indexes.iter().all(|(a, n)| {
        let last: u32 = a[a.len() - 1..].parse().unwrap();
        if a.starts_with("0000:d8") {
            *n == last - 2
        } else {
            *n == last
        }
    }));
    let routed: Vec<&str> = machine
        .pci_devices
        .iter()
        .filter(|d| d.default_route)
        .map(|d| d.address.as_str())
        .collect();
    assert_eq!(routed, ["0000:01:00.0"]);
}

#[test]
fn sriov_fields_degrade_when_their_files_are_missing() {
    let (_s, sys) = sriov_copy("sriov-missing");
    let d = sys.join("devices/pci0000:d8/0000:d8:00.2");
    fs::remove_dir_all(sys.parent().unwrap().join("proc")).expect("rm proc");
    fs::remove_file(d.join("net/ens3f0v0/type")).expect("rm type");
    fs::remove_file(d.join("iommu_group")).expect("rm iommu_group");
    fs::remove_dir_all(d.join("infiniband_mad")).expect("rm infiniband_mad");
    // The PF's link to this VF is gone: the VF keeps its PF, not its index.
    fs::remove_file(sys.join("devices/pci0000:d8/0000:d8:00.0/virtfn0")).expect("rm virtfn0");
    fs::remove_file(sys.join("devices/pci0000:01/0000:01:00.1/acpi_index")).expect("rm acpi");
    let machine = discover(&sys).expect("degraded tree");
    let get = |a: &str| machine.pci_devices.iter().find(|d| d.address == a).unwrap();
    let vf = get("0000:d8:00.2");
    assert_eq!(
        (vf.link_type, vf.iommu_group, vf.vf_index),
        (None, None, None)
    );
    assert_eq!(vf.physfn.as_deref(), Some("0000:d8:00.0"));
    assert_eq!(
        (vf.rdma.clone(), vf.rdma_char_devices.clone()),
        (vec!["mlx5_2".to_string()], vec!["uverbs2".to_string()])
    );
    assert_eq!(get("0000:01:00.1").acpi_index, None);
    assert!(
        machine.pci_devices.iter().all(|d| !d.default_route),
        "no routing table, no default route"
    );
    assert_eq!(get("0000:d8:00.3").vf_index, Some(1));
}

#[test]
fn sriov_fields_with_content_the_kernel_never_writes_name_the_file() {
    let cases: [(&str, &str, &str, &str); 4] = [
        (
            "type",
            "bus/pci/devices/0000:18:01.0/net/ens1f0v0/type",
            "ether\n",
            "expected a link type number (ARPHRD_*) like 1, found \"ether\"",
        ),
        (
            "acpi",
            "bus/pci/devices/0000:01:00.0/acpi_index",
            "-1\n",
            "expected an ACPI index number, found \"-1\"",
        ),
        (
            "route",
            "../proc/net/route",
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n eno1 default\n",
            "expected route lines of at least 8 fields",
        ),
        (
            "route-header",
            "../proc/net/route",
            "garbage\n",
            "expected the kernel's routing table",
        ),
    ];
    for (tag, file, content, expected) in cases {
        let (_s, sys) = sriov_copy(tag);
        write(&sys.join(file), content);
        let text = err_text(&sys);
        let shown = match file.strip_prefix("../") {
            Some(beside) => sys.parent().expect("scratch").join(beside),
            None => sys.join(file),
        };
        assert!(
            text.starts_with(&format!("{}: {expected}", shown.display())),
            "{tag}: {text}"
        );
    }
    let (_s, sys) = sriov_copy("group");
    let link = sys.join("bus/pci/devices/0000:18:01.2/iommu_group");
    fs::remove_file(&link).expect("rm");
    std::os::unix::fs::symlink("../../../kernel/iommu_groups/sixteen", &link).expect("ln");
    assert_eq!(
        err_text(&sys),
        format!(
            "{}: expected a link to an IOMMU group number, found \"sixteen\"",
            link.display()
        )
    );
}

#[test]
fn sriov_machine_table_shows_vfs_with_their_pf() {
    let machine = discover(&sriov_tree().join("sys")).expect("2s2n-sriov");
    let table = render_table(&machine);
    let node1 = table
        .split("\n\n")
        .find(|s| s.starts_with("NUMA node 1:"))
        .expect("node 1 section");
    let pci: Vec<&str> = node1.lines().filter(|l| l.starts_with("  PCI")).collect();
    assert_eq!(
        pci,
        [
            "  PCI 0000:86:00.0 8086:1592 class 0x020000 driver ice net ens2f0 SR-IOV 4/128 VFs",
            "  PCI 0000:86:01.0 8086:1889 class 0x020000 driver iavf net ens2f0v0 VF 0 of 0000:86:00.0 (ens2f0)",
            "  PCI 0000:86:01.1 8086:1889 class 0x020000 driver iavf net ens2f0v1 VF 1 of 0000:86:00.0 (ens2f0)",
            "  PCI 0000:86:01.2 8086:1889 class 0x020000 driver vfio-pci VF 2 of 0000:86:00.0 (ens2f0)",
            "  PCI 0000:86:01.3 8086:1889 class 0x020000 driver vfio-pci VF 3 of 0000:86:00.0 (ens2f0)",
            "  PCI 0000:af:00.0 8086:0d90 class 0x120000 driver vfio-pci",
            "  PCI 0000:d8:00.0 15b3:1017 class 0x020000 driver mlx5_core net ens3f0 rdma mlx5_0 SR-IOV 2/8 VFs",
            "  PCI 0000:d8:00.2 15b3:1018 class 0x020000 driver mlx5_core net ens3f0v0 rdma mlx5_2 VF 0 of 0000:d8:00.0 (ens3f0)",
            "  PCI 0000:d8:00.3 15b3:1018 class 0x020000 driver mlx5_core net ens3f0v1 rdma mlx5_3 VF 1 of 0000:d8:00.0 (ens3f0)",
        ]
    );
    assert!(
        table.contains(
            "\n  PCI 0000:01:00.0 8086:1521 class 0x020000 driver igb net eno1 default route\n"
        ),
        "{table}"
    );
}
