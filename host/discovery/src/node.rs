//! NUMA nodes: `devices/system/node/node<N>/{cpulist,meminfo,distance,hugepages}`.

use std::collections::BTreeMap;
use std::path::Path;

use topomgr_sdk::{CpuSet, HugePages, NumaNode, NumaNodeId, MAX_NUMA_NODES};

use super::sysfs::{
    clean, dir_names, meminfo_bytes, numbered_entries, parse_cpu_list, parse_error, parse_num,
    read_cpus, read_mandatory, read_optional,
};
use super::DiscoveryError;

/// Distance of a node to itself when the kernel has no distance table.
pub(crate) const LOCAL_DISTANCE: u32 = 10;
/// Distance between two nodes when the kernel has no distance table.
pub(crate) const REMOTE_DISTANCE: u32 = 20;

/// Read every NUMA node, ascending by id. `cpu_ids` are the CPUs that have a
/// `devices/system/cpu/cpu<N>` directory; node cpulists are cut down to them.
///
/// Without `devices/system/node` (a kernel built without NUMA) the machine is
/// one node 0 holding every CPU, with the memory of `<root>/../proc/meminfo`
/// (0 when that file is absent) and the hugepages of `kernel/mm/hugepages`.
pub(super) fn read_nodes(root: &Path, cpu_ids: &CpuSet) -> Result<Vec<NumaNode>, DiscoveryError> {
    let node_root = root.join("devices/system/node");
    let dirs = match numbered_entries(&node_root, "node")? {
        Some(dirs) if !dirs.is_empty() => dirs,
        _ => return single_node(root, cpu_ids),
    };
    let mut ids: Vec<NumaNodeId> = Vec::with_capacity(dirs.len());
    for (id, path) in &dirs {
        ids.push(
            NumaNodeId::new(*id).map_err(|_| DiscoveryError::NodeIdOutOfRange {
                path: path.clone(),
                id: *id,
            })?,
        );
    }
    if ids.len() > MAX_NUMA_NODES as usize {
        return Err(DiscoveryError::TooManyNodes {
            path: node_root,
            count: ids.len(),
        });
    }
    let mut nodes: Vec<NumaNode> = Vec::with_capacity(dirs.len());
    let mut claimed = CpuSet::new();
    for (&id, (_, path)) in ids.iter().zip(&dirs) {
        let cpus =
            read_cpus(path, "cpulist", "cpumap")?.ok_or_else(|| DiscoveryError::Missing {
                path: path.clone(),
                what: "cpulist (and cpumap)",
            })?;
        let known = cpus.intersection(cpu_ids);
        if known.len() != cpus.len() {
            tracing::debug!(
                node = %id,
                listed = %cpus,
                kept = %known,
                "NUMA node lists CPUs without a devices/system/cpu entry; ignoring them"
            );
        }
        if let Some(cpu) = known.intersection(&claimed).iter().next() {
            let other = nodes
                .iter()
                .find(|n| n.cpus.contains(cpu))
                .map_or(0, |n| n.id.get());
            return Err(DiscoveryError::CpuInTwoNodes {
                path: path.clone(),
                cpu,
                other,
            });
        }
        claimed = claimed.union(&known);
        let meminfo_path = path.join("meminfo");
        let meminfo = read_mandatory(&meminfo_path)?;
        let memory_bytes = meminfo_bytes(&meminfo_path, &meminfo, "MemTotal:")?;
        let memory_free_bytes = meminfo_free_bytes(&meminfo_path, &meminfo)?;
        let hugepages = read_hugepages(&path.join("hugepages"))?;
        let distances = read_distances(&path.join("distance"), id, &ids, &node_root)?;
        tracing::debug!(node = %id, cpus = %known, memory_bytes, "NUMA node");
        let mut node = NumaNode::new(id, known)
            .with_memory(memory_bytes, memory_free_bytes)
            .with_distances(distances);
        node.hugepages = hugepages;
        nodes.push(node);
    }
    Ok(nodes)
}

/// MemFree in bytes; 0 when the line is absent (only MemTotal is mandatory:
/// the free figure is informational).
fn meminfo_free_bytes(path: &Path, text: &str) -> Result<u64, DiscoveryError> {
    match meminfo_bytes(path, text, "MemFree:") {
        Err(DiscoveryError::Missing { .. }) => {
            tracing::warn!(path = %path.display(), "no MemFree line; reporting 0 bytes free");
            Ok(0)
        }
        other => other,
    }
}

fn single_node(root: &Path, cpu_ids: &CpuSet) -> Result<Vec<NumaNode>, DiscoveryError> {
    let (mut memory_bytes, mut memory_free_bytes) = (0, 0);
    if let Some(parent) = root.parent() {
        let meminfo_path = parent.join("proc/meminfo");
        if let Some(text) = read_optional(&meminfo_path)? {
            memory_bytes = meminfo_bytes(&meminfo_path, &text, "MemTotal:")?;
            memory_free_bytes = meminfo_free_bytes(&meminfo_path, &text)?;
        }
    }
    let hugepages = read_hugepages(&root.join("kernel/mm/hugepages"))?;
    tracing::info!(
        sysfs_root = %root.display(),
        cpus = %cpu_ids,
        memory_bytes,
        "no devices/system/node: treating the machine as one NUMA node 0"
    );
    let zero = NumaNodeId::from(0);
    let mut node = NumaNode::new(zero, cpu_ids.clone())
        .with_memory(memory_bytes, memory_free_bytes)
        .with_distances(BTreeMap::from([(zero, LOCAL_DISTANCE)]));
    node.hugepages = hugepages;
    Ok(vec![node])
}

/// Hugepages by size from a `hugepages/` directory holding `hugepages-<size>kB/`
/// entries; an absent directory means no hugepages.
fn read_hugepages(dir: &Path) -> Result<BTreeMap<String, HugePages>, DiscoveryError> {
    let mut out = BTreeMap::new();
    for name in dir_names(dir)?.unwrap_or_default() {
        let Some(size) = name
            .strip_prefix("hugepages-")
            .and_then(|s| s.strip_suffix("kB"))
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let size_dir = dir.join(&name);
        let count = |file: &str| -> Result<u64, DiscoveryError> {
            let path = size_dir.join(file);
            parse_num(&path, &read_mandatory(&path)?, "a page count")
        };
        out.insert(
            format!("{size}kB"),
            HugePages::new(count("nr_hugepages")?, count("free_hugepages")?),
        );
    }
    Ok(out)
}

/// The distance row of node `id`, keyed by node id.
///
/// The kernel writes one value per online node, in id order. When the row is
/// as long as the list of node directories the values map onto them by
/// position; otherwise the node lists `online` and `possible` are tried (a
/// row may cover nodes whose directory is gone). A missing file gives the
/// kernel's own defaults (10 to itself, 20 to the others).
fn read_distances(
    path: &Path,
    id: NumaNodeId,
    ids: &[NumaNodeId],
    node_root: &Path,
) -> Result<BTreeMap<NumaNodeId, u32>, DiscoveryError> {
    let Some(text) = read_optional(path)? else {
        tracing::warn!(
            path = %path.display(),
            "no NUMA distance file; using {LOCAL_DISTANCE} to itself and {REMOTE_DISTANCE} to other nodes"
        );
        return Ok(ids
            .iter()
            .map(|&other| {
                let d = if other == id {
                    LOCAL_DISTANCE
                } else {
                    REMOTE_DISTANCE
                };
                (other, d)
            })
            .collect());
    };
    let values = clean(&text)
        .split_whitespace()
        .map(|t| t.parse::<u32>())
        .collect::<Result<Vec<u32>, _>>()
        .map_err(|_| parse_error(path, "integers", &text))?;
    if values.len() == ids.len() {
        return Ok(ids.iter().copied().zip(values).collect());
    }
    for list in ["online", "possible"] {
        let list_path = node_root.join(list);
        let Some(list_text) = read_optional(&list_path)? else {
            continue;
        };
        let listed: Vec<u32> = parse_cpu_list(&list_path, &list_text)?.iter().collect();
        if listed.len() != values.len() || !ids.iter().all(|i| listed.contains(&i.get())) {
            continue;
        }
        tracing::debug!(
            path = %path.display(),
            by = list,
            "distance row is longer than the node directories; mapped by the node list"
        );
        return Ok(ids
            .iter()
            .filter_map(|&node| {
                let at = listed.iter().position(|&l| node == l)?;
                Some((node, values[at]))
            })
            .collect());
    }
    let nodes: CpuSet = ids.iter().map(|n| n.get()).collect();
    Err(DiscoveryError::DistanceCount {
        path: path.to_path_buf(),
        expected: ids.len(),
        nodes: nodes.to_string(),
        found: values.len(),
        text: clean(&text).to_string(),
    })
}
