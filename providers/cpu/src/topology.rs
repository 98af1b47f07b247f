//! The CPU topology the static policy reasons about, built from the SDK
//! [`Machine`]: every online CPU with its NUMA node, socket, core and uncore
//! (L3) cache, plus the kubelet's derived counts (`CPUsPerCore`,
//! `CPUsPerSocket`, `CPUsPerUncore`).
//!
//! Like the kubelet (which reads cAdvisor), only online CPUs exist here, a
//! core is named by the lowest CPU id among its threads, and a CPU whose L3
//! cache is unknown is put in an uncore group named after its socket. A CPU
//! in no NUMA node (firmware with an offline node) is left out: it is never
//! handed out, exclusively or in the shared pool this provider manages.

use std::collections::{BTreeMap, BTreeSet};

use topomgr_sdk::{CpuSet, Machine, NumaMask, NumaNodeId};

/// A set of CPU ids, ordered.
pub type Cpus = BTreeSet<u32>;

/// Where one CPU sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuInfo {
    /// NUMA node.
    pub numa: NumaNodeId,
    /// Socket (physical package) id.
    pub socket: u32,
    /// Core id (lowest CPU id of the core's threads).
    pub core: u32,
    /// Uncore (L3) cache id; the socket id when the cache is unknown.
    pub uncore: u32,
}

/// One level of the hierarchy, used to group CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// NUMA nodes.
    Numa,
    /// Sockets.
    Socket,
    /// Cores.
    Core,
    /// Uncore (L3) caches.
    Uncore,
}

impl CpuInfo {
    /// The key of this CPU's group at `level` (for NUMA the node id as a
    /// number): the generic grouping the topology-aware take works on.
    pub fn at(&self, level: Level) -> u32 {
        match level {
            Level::Numa => self.numa.get(),
            Level::Socket => self.socket,
            Level::Core => self.core,
            Level::Uncore => self.uncore,
        }
    }
}

/// The machine's CPU topology (the kubelet's `CPUTopology`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuTopology {
    details: BTreeMap<u32, CpuInfo>,
    /// Every NUMA node of the machine, CPU-less ones included.
    machine_nodes: Vec<NumaNodeId>,
    /// Online CPUs in no NUMA node (left out of everything else).
    unplaced: Cpus,
    /// CPUs the machine lists as offline.
    offline: Cpus,
    num_cores: usize,
    num_sockets: usize,
    num_numa: usize,
    num_uncore: usize,
    /// Members of every group, per level (indexed by [`Level::index`]).
    members: [BTreeMap<u32, Cpus>; 4],
}

impl Level {
    fn index(self) -> usize {
        match self {
            Level::Numa => 0,
            Level::Socket => 1,
            Level::Core => 2,
            Level::Uncore => 3,
        }
    }
}

impl CpuTopology {
    /// The topology of the online CPUs of `machine`.
    pub fn from_machine(machine: &Machine) -> Self {
        let details: BTreeMap<u32, CpuInfo> = machine
            .cpus
            .iter()
            .filter(|c| c.online)
            .filter_map(|c| {
                Some((
                    c.id,
                    CpuInfo {
                        numa: c.numa?,
                        socket: c.socket,
                        core: c.core,
                        uncore: c.l3.unwrap_or(c.socket),
                    },
                ))
            })
            .collect();
        let distinct = |level: Level| -> usize {
            details
                .values()
                .map(|i| i.at(level))
                .collect::<BTreeSet<u32>>()
                .len()
        };
        let group = |level: Level| -> BTreeMap<u32, Cpus> {
            let mut m: BTreeMap<u32, Cpus> = BTreeMap::new();
            for (c, i) in &details {
                m.entry(i.at(level)).or_default().insert(*c);
            }
            m
        };
        let members = [
            group(Level::Numa),
            group(Level::Socket),
            group(Level::Core),
            group(Level::Uncore),
        ];
        CpuTopology {
            members,
            machine_nodes: {
                let mut ids = machine.numa_ids();
                ids.sort_unstable();
                ids.dedup();
                ids
            },
            unplaced: machine
                .cpus
                .iter()
                .filter(|c| c.online && c.numa.is_none())
                .map(|c| c.id)
                .collect(),
            offline: machine
                .cpus
                .iter()
                .filter(|c| !c.online)
                .map(|c| c.id)
                .collect(),
            num_cores: distinct(Level::Core),
            num_sockets: distinct(Level::Socket),
            num_numa: distinct(Level::Numa),
            num_uncore: distinct(Level::Uncore),
            details,
        }
    }

    /// Every CPU of the topology.
    pub fn all_cpus(&self) -> Cpus {
        self.details.keys().copied().collect()
    }

    /// Number of CPUs.
    pub fn num_cpus(&self) -> usize {
        self.details.len()
    }

    /// Number of sockets.
    pub fn num_sockets(&self) -> usize {
        self.num_sockets
    }

    /// Number of NUMA nodes that have CPUs.
    pub fn num_numa_nodes(&self) -> usize {
        self.num_numa
    }

    /// The kubelet's `CPUsPerCore`: CPUs / cores (integer division, 0 without cores).
    pub fn cpus_per_core(&self) -> usize {
        self.num_cpus().checked_div(self.num_cores).unwrap_or(0)
    }

    /// The kubelet's `CPUsPerSocket`.
    pub fn cpus_per_socket(&self) -> usize {
        self.num_cpus().checked_div(self.num_sockets).unwrap_or(0)
    }

    /// The kubelet's `CPUsPerUncore`.
    pub fn cpus_per_uncore(&self) -> usize {
        self.num_cpus().checked_div(self.num_uncore).unwrap_or(0)
    }

    /// Where `cpu` sits, if it exists.
    pub fn info(&self, cpu: u32) -> Option<&CpuInfo> {
        self.details.get(&cpu)
    }

    /// Every NUMA node of the machine (CPU-less ones too), ascending.
    pub fn machine_nodes(&self) -> &[NumaNodeId] {
        &self.machine_nodes
    }

    /// Online CPUs that no NUMA node lists: never handed out.
    pub fn unplaced(&self) -> &Cpus {
        &self.unplaced
    }

    /// CPUs the machine lists as offline.
    pub fn offline(&self) -> &Cpus {
        &self.offline
    }

    /// Whether `cpu` can be handed out: online and in a NUMA node.
    pub fn is_usable(&self, cpu: u32) -> bool {
        self.details.contains_key(&cpu)
    }

    /// NUMA nodes that have CPUs, ascending.
    pub fn numa_nodes(&self) -> Vec<NumaNodeId> {
        let nodes: BTreeSet<NumaNodeId> = self.details.values().map(|i| i.numa).collect();
        nodes.into_iter().collect()
    }

    /// The NUMA nodes of `cpus`, as a mask.
    pub fn numa_mask_of(&self, cpus: &Cpus) -> NumaMask {
        cpus.iter()
            .filter_map(|c| self.details.get(c))
            .fold(NumaMask::EMPTY, |m, i| m.with(i.numa))
    }

    /// The CPUs among `cpus` on the NUMA nodes of `mask`.
    pub fn cpus_on_numa_nodes(&self, cpus: &Cpus, mask: NumaMask) -> Cpus {
        cpus.iter()
            .copied()
            .filter(|c| self.details.get(c).is_some_and(|i| mask.contains(i.numa)))
            .collect()
    }

    /// The group ids at `level` among `cpus`.
    pub fn groups_of(&self, cpus: &Cpus, level: Level) -> BTreeSet<u32> {
        cpus.iter()
            .filter_map(|c| self.details.get(c))
            .map(|i| i.at(level))
            .collect()
    }

    /// The CPUs among `cpus` whose group at `level` is `id`.
    pub fn cpus_in(&self, cpus: &Cpus, level: Level, id: u32) -> Cpus {
        cpus.iter()
            .copied()
            .filter(|c| self.details.get(c).is_some_and(|i| i.at(level) == id))
            .collect()
    }

    /// The CPUs of the whole topology whose group at `level` is `id`.
    pub fn all_cpus_in(&self, level: Level, id: u32) -> Cpus {
        self.members[level.index()]
            .get(&id)
            .cloned()
            .unwrap_or_default()
    }

    /// Number of CPUs of the whole topology whose group at `level` is `id`.
    pub fn size_of(&self, level: Level, id: u32) -> usize {
        self.members[level.index()].get(&id).map_or(0, |s| s.len())
    }

    /// Number of CPUs among `cpus` in each group at `level`.
    pub fn count_by(&self, cpus: &Cpus, level: Level) -> BTreeMap<u32, usize> {
        let mut m = BTreeMap::new();
        for c in cpus {
            if let Some(i) = self.details.get(c) {
                *m.entry(i.at(level)).or_insert(0) += 1;
            }
        }
        m
    }

    /// The groups at `inner` of the CPUs among `cpus` whose group at `outer` is `id`
    /// (e.g. the sockets of a NUMA node).
    pub fn groups_within(&self, cpus: &Cpus, outer: Level, id: u32, inner: Level) -> Vec<u32> {
        cpus.iter()
            .filter_map(|c| self.details.get(c))
            .filter(|i| i.at(outer) == id)
            .map(|i| i.at(inner))
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .collect()
    }

    /// The sockets of the CPUs of NUMA nodes `numas` (whole topology).
    pub fn sockets_in_numa_nodes(&self, numas: NumaMask) -> BTreeSet<u32> {
        self.details
            .values()
            .filter(|i| numas.contains(i.numa))
            .map(|i| i.socket)
            .collect()
    }
}

/// Converts an ordered CPU set to the SDK's [`CpuSet`].
pub fn to_cpuset(cpus: &Cpus) -> CpuSet {
    cpus.iter().copied().collect()
}

/// Converts the SDK's [`CpuSet`] to an ordered CPU set.
pub fn from_cpuset(cpus: &CpuSet) -> Cpus {
    cpus.iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testmachines::dual_socket_ht;

    #[test]
    fn counts_of_a_dual_socket_ht_machine() {
        let t = CpuTopology::from_machine(&dual_socket_ht());
        assert_eq!(t.num_cpus(), 12);
        assert_eq!(t.cpus_per_core(), 2);
        assert_eq!(t.cpus_per_socket(), 6);
        assert_eq!(t.num_numa_nodes(), 2);
        assert_eq!(t.numa_nodes(), vec![0, 1]);
        assert_eq!(t.numa_mask_of(&[3, 5].into()).to_string(), "1");
        let s1: Vec<u32> = t.all_cpus_in(Level::Socket, 1).into_iter().collect();
        assert_eq!(s1, vec![1, 3, 5, 7, 9, 11]);
        let core2: Vec<u32> = t.all_cpus_in(Level::Core, 2).into_iter().collect();
        assert_eq!(core2, vec![2, 8]);
    }
}
