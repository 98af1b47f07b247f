//! Helpers for unit-testing a [`Provider`] in-process, without a host.
//!
//! ```
//! use topomgr_sdk::testkit;
//!
//! let machine = testkit::machine(2, 4); // 2 NUMA nodes x 4 CPUs
//! assert_eq!(machine.online_cpus().to_string(), "0-7");
//! let pod = testkit::guaranteed_pod("web", &[("cpu", 2000), ("example.com/widget", 1)]);
//! assert_eq!(pod.containers[0].request("example.com/widget"), 1);
//! ```
//!
//! Build the provider with [`new_provider`], ask for hints, and compare them
//! with [`hint_strings`] / [`assert_hints`], which print hints as
//! `"<mask>:<preferred>"` (`"0-1:false"`, `"any:true"`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::{
    ContainerView, Cpu, HintSet, Machine, NumaNode, PodView, Provider, ProviderConfig,
    ProviderContext, ProviderError, ProviderHints, QosClass, ResourceList, TopologyHint,
};

/// Memory per NUMA node of [`machine`]: 16 GiB.
pub const NODE_MEMORY_BYTES: u64 = 16 << 30;

/// A machine of `nodes` NUMA nodes (ids `0..nodes`) with `cpus_per_node`
/// CPUs each, numbered consecutively (node 0 has CPUs `0..cpus_per_node`).
/// Each node is one socket with one L3 cache, each CPU its own core, every
/// node has [`NODE_MEMORY_BYTES`] (all free) and distances are 10 (local) /
/// 20 (remote). No PCI devices.
pub fn machine(nodes: u32, cpus_per_node: u32) -> Machine {
    let cpus = (0..nodes * cpus_per_node)
        .map(|id| {
            let n = id / cpus_per_node.max(1);
            Cpu {
                id,
                online: true,
                socket: n,
                die: 0,
                core: id,
                numa: n,
                l3: Some(n),
            }
        })
        .collect();
    machine_from_cpus(cpus, nodes)
}

/// A machine with the given CPUs (any topology: sockets, cores, threads,
/// L3) on NUMA nodes `0..nodes`: each node gets the CPUs whose `numa` is its
/// id, [`NODE_MEMORY_BYTES`] (all free) and distances 10 (local) / 20
/// (remote). CPUs are sorted by id. No PCI devices.
pub fn machine_from_cpus(mut cpus: Vec<Cpu>, nodes: u32) -> Machine {
    cpus.sort_by_key(|c| c.id);
    let numa_nodes = (0..nodes)
        .map(|n| NumaNode {
            id: n,
            cpus: cpus.iter().filter(|c| c.numa == n).map(|c| c.id).collect(),
            memory_bytes: NODE_MEMORY_BYTES,
            memory_free_bytes: NODE_MEMORY_BYTES,
            hugepages: BTreeMap::new(),
            distances: (0..nodes)
                .map(|o| (o, if o == n { 10 } else { 20 }))
                .collect(),
        })
        .collect();
    Machine {
        numa_nodes,
        cpus,
        pci_devices: Vec::new(),
    }
}

/// A container whose requests and limits are both `resources`.
pub fn container(name: &str, resources: &[(&str, u64)]) -> ContainerView {
    let list: ResourceList = resources
        .iter()
        .map(|(k, v)| ((*k).to_owned(), *v))
        .collect();
    ContainerView {
        name: name.to_owned(),
        requests: list.clone(),
        limits: list,
        sidecar: false,
    }
}

/// A Guaranteed pod named `name` (uid `"<name>-uid"`, namespace `default`)
/// with one app container `"app"` requesting `resources` (requests = limits).
pub fn guaranteed_pod(name: &str, resources: &[(&str, u64)]) -> PodView {
    PodView {
        uid: format!("{name}-uid"),
        name: name.to_owned(),
        namespace: "default".to_owned(),
        qos: QosClass::Guaranteed,
        init_containers: Vec::new(),
        containers: vec![container("app", resources)],
    }
}

/// Builds provider `P` for `machine` with `config` (a JSON object, or
/// `Value::Null` for no table) and a state directory under the system
/// temporary directory.
pub fn new_provider<P: Provider>(
    machine: &Machine,
    config: serde_json::Value,
) -> Result<P, ProviderError> {
    let config = ProviderConfig(config);
    let state_dir: PathBuf = std::env::temp_dir().join("topomgr-testkit");
    P::new(&ProviderContext {
        machine,
        config: &config,
        state_dir: &state_dir,
    })
}

/// Formats one hint as `"<mask>:<preferred>"`, `"any:<preferred>"` for no affinity.
pub fn hint_string(h: &TopologyHint) -> String {
    match h.affinity {
        Some(m) => format!("{m}:{}", h.preferred),
        None => format!("any:{}", h.preferred),
    }
}

/// The hints of `resource` as strings, compact sets expanded over `nodes`:
/// `None` when the provider returned no map or no preference for the
/// resource, `Some(vec![])` when it cannot satisfy the request.
pub fn hint_strings(hints: &ProviderHints, resource: &str, nodes: &[u32]) -> Option<Vec<String>> {
    let set = hints.as_ref()?.get(resource)?.as_ref()?;
    let list = match set {
        HintSet::Explicit(v) => v.clone(),
        HintSet::Compact(c) => c.expand(nodes),
    };
    Some(list.iter().map(hint_string).collect())
}

/// Asserts that `resource`'s hints (expanded over `nodes`) are exactly
/// `expected`, in order; `None` expects "no preference / no map".
///
/// # Panics
///
/// When the hints differ (this is a test assertion).
#[track_caller]
pub fn assert_hints(
    hints: &ProviderHints,
    resource: &str,
    nodes: &[u32],
    expected: Option<&[&str]>,
) {
    let got = hint_strings(hints, resource, nodes);
    let want = expected.map(|e| e.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
    assert_eq!(got, want, "hints for resource {resource:?}");
}

/// Wraps `provider` in the same boundary adapter the host calls through a
/// loaded plugin (conversions and the `catch_unwind` guard), in-process: a
/// panic in a method comes back as an error with reason `"ProviderPanic"`.
pub fn through_boundary<P: Provider>(provider: P) -> crate::ffi::ProviderHandle {
    crate::ffi::in_process(provider)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CompactHints, NumaMask};

    #[test]
    fn machine_shape() {
        let m = machine(2, 3);
        assert_eq!(m.numa_ids(), vec![0, 1]);
        assert_eq!(m.numa_nodes[1].cpus.to_string(), "3-5");
        assert_eq!(m.numa_nodes[1].distances.get(&0), Some(&20));
        assert_eq!(m.cpus.len(), 6);
        assert_eq!(m.cpus[4].numa, 1);
    }

    #[test]
    fn strings_of_all_cases() {
        let mut map = BTreeMap::new();
        map.insert("none".to_owned(), None);
        map.insert("empty".to_owned(), Some(HintSet::Explicit(vec![])));
        map.insert(
            "c".to_owned(),
            Some(HintSet::Compact(CompactHints::upward_closed(
                vec![NumaMask::from_bits(0b10)],
                1,
            ))),
        );
        let h: ProviderHints = Some(map);
        assert_eq!(hint_strings(&h, "none", &[0, 1]), None);
        assert_eq!(hint_strings(&h, "missing", &[0, 1]), None);
        assert_eq!(hint_strings(&h, "empty", &[0, 1]), Some(vec![]));
        assert_hints(&h, "c", &[0, 1], Some(&["1:true", "0-1:false"]));
        assert_eq!(hint_string(&TopologyHint::ANY), "any:true");
    }
}
