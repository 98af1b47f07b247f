//! Logical CPUs: `devices/system/cpu/cpu<N>/{online,topology/,cache/}`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use topomgr_sdk::{Cpu, CpuSet, NumaNode, NumaNodeId};

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

/// Lists read once and shared by every CPU they name: the kernel writes the
/// same thread-sibling, package and cache lists for each CPU in them.
#[derive(Default)]
struct Learned {
    siblings: HashMap<u32, Rc<CpuSet>>,
    package: HashMap<u32, Rc<CpuSet>>,
    l3: HashMap<u32, L3>,
}

/// What one CPU's `cache/` says about its level-3 cache.
#[derive(Clone, Copy)]
enum L3 {
    /// The cache `id`, or the lowest CPU of a non-empty `shared_cpu_list`.
    Id(u32),
    /// A level-3 cache whose shared CPU list is empty (ia64 kernels): it is
    /// private to the CPU's core, so its id is the core's.
    OfCore,
}

/// One CPU's raw `topology/` reading.
struct Raw {
    id: u32,
    online: bool,
    /// `physical_package_id`, `None` when absent or negative (unknown).
    package: Option<u32>,
    die: u32,
    /// `core_id`, `None` when absent.
    core_id: Option<i64>,
    siblings: Option<Rc<CpuSet>>,
    package_cpus: Option<Rc<CpuSet>>,
    l3: Option<L3>,
    numa: Option<NumaNodeId>,
}

/// Read every CPU. `nodes` are the NUMA nodes already read (their cpulists
/// give each CPU's node).
///
/// - `online`: `cpu<N>/online` (an empty file counts as absent), else
///   membership of `devices/system/cpu/online`, else online (cpu0 usually
///   has no `online` file).
/// - `socket`: `topology/physical_package_id`. Where the kernel does not
///   know it (absent, or -1 as on POWER and s390) the lowest CPU of the
///   package's CPU list (`package_cpus_list`, or `core_siblings_list`, or
///   their masks) stands in, else 0.
/// - `die`: `topology/die_id`; 0 when absent or negative.
/// - `core`: the lowest CPU id among the CPU's thread siblings
///   (`core_cpus_list`, else `thread_siblings_list`, or their masks, plus the
///   CPU itself) that also have its NUMA node, package, die and `core_id`.
///   The kubelet (through cAdvisor) groups threads by `core_id` and package;
///   the sibling list keeps cores apart where `core_id` repeats. AMD
///   Bulldozer kernels list both cores of a compute unit as thread siblings
///   but give them different `core_id`s: they are two cores.
/// - `numa`: the node whose cpulist holds the CPU; `None` when no node holds
///   it. Firmware can leave online CPUs without a node (a Dell R630 with
///   NUMA node 0 offline lists node 1 only): they are kept, with a warning,
///   and the CPU provider keeps them out of exclusive allocation.
/// - `l3`: the `id` of the CPU's level-3 cache (`cache/index<N>/level` = 3),
///   else the lowest CPU of its `shared_cpu_list`; the CPU's `core` when that
///   list is empty (ia64 kernels write an empty list for core-private
///   caches); `None` without a level-3 cache.
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
    let mut node_of: HashMap<u32, NumaNodeId> = HashMap::new();
    for node in nodes {
        for cpu in node.cpus.iter() {
            node_of.insert(cpu, node.id);
        }
    }
    let mut without_node = CpuSet::new();
    let mut learned = Learned::default();
    let mut raws = Vec::with_capacity(dirs.len());
    for (id, dir) in dirs {
        let id = *id;
        let online = read_online(dir, id, global_online.as_ref())?;
        let topology = dir.join("topology");
        let package = read_topology_id(&topology.join("physical_package_id"))?;
        let die = read_topology_id(&topology.join("die_id"))?.unwrap_or(0);
        let core_path = topology.join("core_id");
        let core_id = read_optional(&core_path)?
            .map(|text| parse_num::<i64>(&core_path, &text, "an integer"))
            .transpose()?;
        let siblings = learn(&mut learned.siblings, id, online, || {
            match read_cpus(&topology, "core_cpus_list", "core_cpus")? {
                Some(s) => Ok(Some(s)),
                None => read_cpus(&topology, "thread_siblings_list", "thread_siblings"),
            }
        })?;
        let package_cpus = if package.is_some() {
            None
        } else {
            learn(&mut learned.package, id, online, || {
                match read_cpus(&topology, "package_cpus_list", "package_cpus")? {
                    Some(s) => Ok(Some(s)),
                    None => read_cpus(&topology, "core_siblings_list", "core_siblings"),
                }
            })?
        };
        let l3 = match learned.l3.get(&id) {
            Some(l3) if online => Some(*l3),
            _ => read_l3(&dir.join("cache"), &mut learned)?,
        };
        let numa = node_of.get(&id).copied();
        if numa.is_none() && online {
            without_node.insert(id);
        }
        raws.push(Raw {
            id,
            online,
            package,
            die,
            core_id,
            siblings,
            package_cpus,
            l3,
            numa,
        });
    }
    if !without_node.is_empty() {
        let ids: CpuSet = nodes.iter().map(|n| n.id.get()).collect();
        tracing::warn!(
            path = %root.join("devices/system/node").display(),
            cpus = %without_node,
            numa_nodes = %ids,
            "online CPUs are in no NUMA node's cpulist (a NUMA node is offline?); \
             keeping them in the shared pool only, never for exclusive or NUMA-aligned use"
        );
    }
    Ok(assemble(&raws))
}

/// Turn the raw readings into [`Cpu`]s: sockets for unknown package ids,
/// cores, and core-private L3 ids.
fn assemble(raws: &[Raw]) -> Vec<Cpu> {
    let socket_of = |raw: &Raw| -> u32 {
        raw.package.unwrap_or_else(|| {
            raw.package_cpus
                .as_ref()
                .and_then(|set| set.iter().next())
                .map_or(0, |first| first.min(raw.id))
        })
    };
    let key = |raw: &Raw| (raw.numa, socket_of(raw), raw.die, raw.core_id);
    let by_id: HashMap<u32, &Raw> = raws.iter().map(|r| (r.id, r)).collect();
    raws.iter()
        .map(|raw| {
            let own = key(raw);
            let core = match (&raw.siblings, raw.core_id) {
                (Some(siblings), Some(_)) => siblings
                    .iter()
                    .filter(|s| by_id.get(s).is_some_and(|other| key(other) == own))
                    .chain(std::iter::once(raw.id))
                    .min()
                    .unwrap_or(raw.id),
                (Some(siblings), None) => siblings.iter().next().map_or(raw.id, |f| f.min(raw.id)),
                (None, Some(_)) if raw.online => raws
                    .iter()
                    .filter(|other| other.online && key(other) == own)
                    .map(|other| other.id)
                    .min()
                    .unwrap_or(raw.id),
                (None, _) => raw.id,
            };
            let l3 = raw.l3.map(|l3| match l3 {
                L3::Id(id) => id,
                L3::OfCore => core,
            });
            Cpu::new(raw.id, raw.numa)
                .with_online(raw.online)
                .with_socket(socket_of(raw))
                .with_die(raw.die)
                .with_core(core)
                .with_l3(l3)
        })
        .collect()
}

/// The list `read` gives for CPU `id`, read once for all the online CPUs
/// it names. An offline CPU always reads its own (a sibling's list, written
/// before it went offline, may still name it).
fn learn(
    cache: &mut HashMap<u32, Rc<CpuSet>>,
    id: u32,
    online: bool,
    read: impl FnOnce() -> Result<Option<CpuSet>, DiscoveryError>,
) -> Result<Option<Rc<CpuSet>>, DiscoveryError> {
    if let Some(set) = cache.get(&id).filter(|_| online) {
        return Ok(Some(Rc::clone(set)));
    }
    let Some(set) = read()? else {
        return Ok(None);
    };
    let set = Rc::new(set);
    if online {
        for cpu in set.iter() {
            cache.entry(cpu).or_insert_with(|| Rc::clone(&set));
        }
    }
    Ok(Some(set))
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

/// A topology id (`physical_package_id`, `die_id`): `None` when absent or
/// negative (the kernel writes -1 when it does not know).
fn read_topology_id(path: &Path) -> Result<Option<u32>, DiscoveryError> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    let value: i64 = parse_num(path, &text, "an integer")?;
    if value < 0 {
        return Ok(None);
    }
    u32::try_from(value)
        .map(Some)
        .map_err(|_| DiscoveryError::TooLarge {
            path: path.to_path_buf(),
            what: "topology id",
            value: value.to_string(),
        })
}

/// The L3 cache id of one CPU from its `cache/` directory.
fn read_l3(cache: &Path, learned: &mut Learned) -> Result<Option<L3>, DiscoveryError> {
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

/// The id of a level-3 cache: its `id`, else the lowest CPU sharing it, else
/// (an empty shared list) the core's; records it for every CPU that shares it.
fn read_l3_index(index: &Path, learned: &mut Learned) -> Result<Option<L3>, DiscoveryError> {
    let id_path = index.join("id");
    let id: Option<u32> = read_optional(&id_path)?
        .map(|text| parse_num(&id_path, &text, "a cache id"))
        .transpose()?;
    let shared = read_cpus(index, "shared_cpu_list", "shared_cpu_map")?.unwrap_or_default();
    let l3 = match id.or_else(|| shared.iter().next()) {
        Some(id) => L3::Id(id),
        None => L3::OfCore,
    };
    for cpu in shared.iter() {
        learned.l3.entry(cpu).or_insert(l3);
    }
    Ok(Some(l3))
}
