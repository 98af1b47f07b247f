//! Hand-built machines for the unit tests, shaped like the kubelet's own
//! test topologies.

use topomgr_sdk::{Cpu, Machine, NumaNodeId};

/// A CPU `id` of `core` on NUMA node `numa`, in `socket`, with the node's L3.
fn cpu(id: u32, socket: u32, core: u32, numa: u32) -> Cpu {
    cpu_l3(id, socket, core, numa, numa)
}

/// A CPU `id` of `core` on NUMA node `numa`, in `socket`, under L3 `l3`.
pub fn cpu_l3(id: u32, socket: u32, core: u32, numa: u32, l3: u32) -> Cpu {
    Cpu::new(id, NumaNodeId::new(numa).ok())
        .with_socket(socket)
        .with_core(core)
        .with_l3(Some(l3))
}

/// A machine of `sockets` sockets, each with `numa_per_socket` NUMA nodes of
/// `cores_per_numa` cores of `threads` threads. CPU ids are numbered as Linux
/// does on x86: the first thread of every core first (0..cores), then the
/// second threads, and so on; core `k` is CPU `k` plus its siblings
/// `k + cores`, `k + 2*cores`, ... Every NUMA node has its own L3.
pub fn layered(sockets: u32, numa_per_socket: u32, cores_per_numa: u32, threads: u32) -> Machine {
    let nodes = sockets * numa_per_socket;
    let cores = nodes * cores_per_numa;
    let mut cpus = Vec::new();
    for t in 0..threads {
        for k in 0..cores {
            let numa = k / cores_per_numa;
            cpus.push(cpu(t * cores + k, numa / numa_per_socket, k, numa));
        }
    }
    finish(cpus, nodes)
}

/// The kubelet's `topoDualSocketHT`: 12 CPUs, 2 sockets = 2 NUMA nodes,
/// 6 cores of 2 threads; socket 0 has cores 0, 2, 4 (CPUs 0,6 / 2,8 / 4,10),
/// socket 1 has cores 1, 3, 5 (CPUs 1,7 / 3,9 / 5,11).
pub fn dual_socket_ht() -> Machine {
    let cpus = (0..12u32)
        .map(|id| cpu(id, id % 2, id % 6, id % 2))
        .collect();
    finish(cpus, 2)
}

/// The kubelet's `topoSingleSocketHT`: 8 CPUs, one socket and NUMA node,
/// 4 cores of 2 threads (CPUs k and k+4).
pub fn single_socket_ht() -> Machine {
    layered(1, 1, 4, 2)
}

/// The kubelet's `topoDualSocketMultiNumaPerSocketHT`: 80 CPUs, 2 sockets,
/// 4 NUMA nodes (CPUs 0-9,40-49 / 10-19,50-59 / 20-29,60-69 / 30-39,70-79).
pub fn dual_socket_multi_numa_ht() -> Machine {
    layered(2, 2, 10, 2)
}

/// A machine of `nodes` NUMA nodes, each its own socket, `cores` cores of
/// 2 threads per node, with siblings adjacent (CPU 2k and 2k+1).
pub fn adjacent_siblings(nodes: u32, cores: u32) -> Machine {
    let mut cpus = Vec::new();
    for n in 0..nodes {
        for k in 0..cores {
            let first = (n * cores + k) * 2;
            for id in [first, first + 1] {
                cpus.push(cpu(id, n, first, n));
            }
        }
    }
    cpus.sort_by_key(|c| c.id);
    finish(cpus, nodes)
}

/// Sorts the CPUs and derives the NUMA nodes from them.
pub fn finish(cpus: Vec<Cpu>, nodes: u32) -> Machine {
    topomgr_sdk::testkit::machine_from_cpus(cpus, nodes)
}

/// A hybrid (P/E-core) machine like the i7-14700 of kubernetes #140495:
/// one socket, one NUMA node, 28 CPUs; `p_cores` two-thread P-cores with
/// adjacent siblings (CPUs 2k, 2k+1) followed by `e_cores` one-thread
/// E-cores (`2 * p_cores` onwards). Core ids are the lowest CPU id of the
/// core, as the SDK's discovery names them.
pub fn hybrid(p_cores: u32, e_cores: u32) -> Machine {
    let mut cpus = Vec::new();
    for k in 0..p_cores {
        for id in [2 * k, 2 * k + 1] {
            cpus.push(cpu(id, 0, 2 * k, 0));
        }
    }
    for e in 0..e_cores {
        let id = 2 * p_cores + e;
        cpus.push(cpu(id, 0, id, 0));
    }
    finish(cpus, 1)
}
