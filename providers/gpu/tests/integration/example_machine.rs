//! The example GPU machine (`examples/machines/2s8g`): its topology file
//! agrees with its sysfs tree, and the choices the example pods rely on.

use std::path::{Path, PathBuf};

use topomgr_provider_gpu::choice::{Chooser, Policy};
use topomgr_provider_gpu::nvml::sysfs_numa;
use topomgr_provider_gpu::topology_file;

fn machine_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/machines/2s8g")
}

#[test]
fn the_topology_file_matches_the_sysfs_tree() {
    let dir = machine_dir();
    let topology = topology_file::load(&dir.join("gpu-topology.json")).unwrap();
    assert_eq!(topology.len(), 8);
    let root = dir.join("sys");
    let numa_of = sysfs_numa(&root);
    for g in topology.gpus() {
        let pci = g.pci.as_deref().expect("every GPU has its PCI address");
        let class = std::fs::read_to_string(root.join("bus/pci/devices").join(pci).join("class"))
            .unwrap_or_else(|e| panic!("{pci} is not in the sysfs tree: {e}"));
        assert_eq!(class.trim(), "0x030200", "{pci}");
        assert_eq!(numa_of(pci), g.numa, "NUMA node of {} ({pci})", g.id);
    }
}

#[test]
fn nvlink_pairs_are_chosen_inside_a_node() {
    let topology = topology_file::load(&machine_dir().join("gpu-topology.json")).unwrap();
    let chooser = Chooser::new(topology, Policy::BestEffort);
    let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let node0 = ["GPU-0", "GPU-1", "GPU-2", "GPU-3"];
    let node1 = ["GPU-4", "GPU-5", "GPU-6", "GPU-7"];
    let none: [&str; 0] = [];
    assert_eq!(
        chooser.choose(&node0, &none, 2).unwrap(),
        ids(&["GPU-0", "GPU-1"])
    );
    // GPU-0 taken: the remaining bridged pair, not GPU-1 with a PCIe peer.
    assert_eq!(
        chooser
            .choose(&["GPU-1", "GPU-2", "GPU-3"], &none, 2)
            .unwrap(),
        ids(&["GPU-2", "GPU-3"])
    );
    assert_eq!(chooser.choose(&node1, &none, 4).unwrap(), ids(&node1));
    // A GPU that must be included brings its NVLink partner.
    assert_eq!(
        chooser.choose(&node1, &["GPU-7"], 2).unwrap(),
        ids(&["GPU-6", "GPU-7"])
    );
    // Across nodes (best-effort topology policy), the pairs stay whole.
    let all: Vec<&str> = node0.iter().chain(&node1).copied().collect();
    assert_eq!(
        chooser.choose(&all, &["GPU-5"], 4).unwrap(),
        ids(&["GPU-4", "GPU-5", "GPU-6", "GPU-7"])
    );
}
