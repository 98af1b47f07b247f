//! Logical CPUs: `devices/system/cpu/cpu<N>/{online,topology/,cache/}`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use topomgr_sdk::{Cpu, CpuSet, NumaNode};

use super::sysfs::{
    clean, numbered_entries, parse_cpu_list, parse_error, parse_num, read_cpus, read_optional,
};
use super::DiscoveryError;

/// The `cpu<N>` directories under `devices/system/cpu`, ascending by id.
pub(super) fn cpu_dirs(root: &Path) -> Result<Vec<(u32, PathBuf)>, DiscoveryError> {
    let dir = root.join("devices/system/cpu");
    numbered_entries(&dir, "cpu")?.ok_or_else(|| DiscoveryError::NotSysfs {
        root: root.to_path_buf(),
        path: dir,
    })
}

/// What one CPU's siblings or shared cache told about CPUs read later: the
/// kernel writes the same list for each of them, so it is read once.
#[derive(Default)]
struct Learned {
    core: HashMap<u32, u32>,
    l3: HashMap<u32, Option<u32>>,
}

/// Read every CPU. `nodes` are the NUMA nodes already read (their cpulists
/// give each CPU's node).
///
/// - `online`: `cpu<N>/online` (an empty file counts as absent), else membership of `devices/system/cpu/online`,
///   else online (cpu0 usually has no `online` file).
/// - `socket` / `die`: `topology/physical_package_id` / `topology/die_id`;
///   0 when absent or negative (the kernel writes -1 when it does not know).
/// - `core`: the lowest CPU id among `topology/core_cpus_list` (or
///   `thread_siblings_list`, or their hex masks) and the CPU itself.
/// - `numa`: the node whose cpulist holds the CPU. An online CPU that no node
///   holds is an error; an offline one gets the lowest node id.
/// - `l3`: the `id` of the CPU's level-3 cache (`cache/index<N>/level` = 3),
///   else the lowest CPU of its `shared_cpu_list`; `None` without one.
///
/// Offline CPUs usually have no `topology/` or `cache/`: their socket and die
/// read 0, their core is their own id and their `l3` is `None`.
pub(super) fn read_cpus_info(
    root: &Path,
    dirs: &[(u32, PathBuf)],
    nodes: &[NumaNode],
) -> Result<Vec<Cpu>, DiscoveryError> {
    let online_path = root.join("devices/system/cpu/online");
    let global_online = read_optional(&online_path)?
        .map(|text| parse_cpu_list(&online_path, &text))
        .transpose()?;
    let mut node_of: HashMap<u32, u32> = HashMap::new();
    for node in nodes {
        for cpu in node.cpus.iter() {
            node_of.insert(cpu, node.id);
        }
    }
    let lowest_node = nodes.first().map_or(0, |n| n.id);
    let mut learned = Learned::default();
    let mut cpus = Vec::with_capacity(dirs.len());
    for (id, dir) in dirs {
        let id = *id;
        let online = read_online(dir, id, global_online.as_ref())?;
        let topology = dir.join("topology");
        let socket = read_topology_id(&topology.join("physical_package_id"))?;
        let die = read_topology_id(&topology.join("die_id"))?;
        let core = match learned.core.get(&id) {
            Some(core) if online => *core,
            _ => {
                let siblings = match read_cpus(&topology, "core_cpus_list", "core_cpus")? {
                    Some(s) => Some(s),
                    None => read_cpus(&topology, "thread_siblings_list", "thread_siblings")?,
                };
                let siblings = siblings.unwrap_or_default();
                let core = siblings.iter().next().map_or(id, |first| first.min(id));
                for sibling in siblings.iter() {
                    learned.core.entry(sibling).or_insert(core);
                }
                core
            }
        };
        let l3 = match learned.l3.get(&id) {
            Some(l3) if online => *l3,
            _ => read_l3(&dir.join("cache"), &mut learned)?,
        };
        let numa = match node_of.get(&id) {
            Some(node) => *node,
            None if online => {
                let ids: CpuSet = nodes.iter().map(|n| n.id).collect();
                return Err(DiscoveryError::CpuWithoutNode {
                    path: dir.clone(),
                    cpu: id,
                    nodes: ids.to_string(),
                });
            }
            None => lowest_node,
        };
        cpus.push(Cpu {
            id,
            online,
            socket,
            die,
            core,
            numa,
            l3,
        });
    }
    Ok(cpus)
}

fn read_online(dir: &Path, id: u32, global: Option<&CpuSet>) -> Result<bool, DiscoveryError> {
    let path = dir.join("online");
    // An empty file is treated as an absent one: recorders write empty
    // files for attributes they could not read.
    match read_optional(&path)?.as_deref().map(clean) {
        Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some("") | None => Ok(global.is_none_or(|g| g.contains(id))),
        Some(other) => Err(parse_error(&path, "0 or 1", other)),
    }
}

/// A topology id (`physical_package_id`, `die_id`): 0 when absent or negative.
fn read_topology_id(path: &Path) -> Result<u32, DiscoveryError> {
    let Some(text) = read_optional(path)? else {
        return Ok(0);
    };
    let value: i64 = parse_num(path, &text, "an integer")?;
    if value < 0 {
        return Ok(0);
    }
    u32::try_from(value).map_err(|_| DiscoveryError::TooLarge {
        path: path.to_path_buf(),
        what: "topology id",
        value: value.to_string(),
    })
}

/// The L3 cache id of one CPU from its `cache/` directory.
fn read_l3(cache: &Path, learned: &mut Learned) -> Result<Option<u32>, DiscoveryError> {
    // The L3 is `index3` on most machines: look there before listing.
    let usual = cache.join("index3");
    if cache_level(&usual)? == Some(3) {
        return read_l3_index(&usual, learned);
    }
    let Some(indexes) = numbered_entries(cache, "index")? else {
        return Ok(None);
    };
    for (n, index) in indexes {
        if n != 3 && cache_level(&index)? == Some(3) {
            return read_l3_index(&index, learned);
        }
    }
    Ok(None)
}

/// The `level` of one `cache/index<N>` directory, `None` when absent.
fn cache_level(index: &Path) -> Result<Option<u32>, DiscoveryError> {
    let path = index.join("level");
    read_optional(&path)?
        .map(|text| parse_num(&path, &text, "a cache level"))
        .transpose()
}

/// The id of a level-3 cache: its `id`, else the lowest CPU sharing it;
/// records it for every CPU that shares it.
fn read_l3_index(index: &Path, learned: &mut Learned) -> Result<Option<u32>, DiscoveryError> {
    let id_path = index.join("id");
    let id: Option<u32> = read_optional(&id_path)?
        .map(|text| parse_num(&id_path, &text, "a cache id"))
        .transpose()?;
    let shared = read_cpus(index, "shared_cpu_list", "shared_cpu_map")?.unwrap_or_default();
    let l3 = id.or_else(|| shared.iter().next());
    for cpu in shared.iter() {
        learned.l3.entry(cpu).or_insert(l3);
    }
    Ok(l3)
}
