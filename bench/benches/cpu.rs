//! CPU manager provider benchmarks on a synthetic 2-socket, 8-NUMA-node,
//! 384-CPU machine (24 cores of 2 threads per node, Linux x86 numbering)
//! with half its CPUs taken (every other pair of cores is exclusively
//! assigned): choosing 16 CPUs (the kubelet's topology-aware take, and the
//! whole allocate for a hinted node) and generating the 255 hints.

use std::collections::BTreeMap;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use topomgr_provider_cpu::assignment::{take_packed, SortingStrategy};
use topomgr_provider_cpu::options::StaticOptions;
use topomgr_provider_cpu::policy::StaticPolicy;
use topomgr_provider_cpu::state::Checkpoint;
use topomgr_provider_cpu::topology::{CpuTopology, Cpus};
use topomgr_sdk::{testkit, Cpu, CpuSet, Machine, NumaMask, NumaNodeId};

const NODES: u32 = 8;
const NODES_PER_SOCKET: u32 = 4;
const CORES_PER_NODE: u32 = 24;
const CORES: u32 = NODES * CORES_PER_NODE;

fn machine() -> Machine {
    let mut cpus = Vec::new();
    for t in 0..2 {
        for k in 0..CORES {
            let numa = k / CORES_PER_NODE;
            cpus.push(
                Cpu::new(t * CORES + k, NumaNodeId::new(numa).ok())
                    .with_socket(numa / NODES_PER_SOCKET)
                    .with_core(k)
                    .with_l3(Some(numa)),
            );
        }
    }
    testkit::machine_from_cpus(cpus, NODES)
}

/// Cores 2k+1 (both threads) are taken: half the CPUs, spread over every node.
fn taken(core: u32) -> bool {
    core % 2 == 1
}

fn half_free(topo: &CpuTopology) -> Cpus {
    topo.all_cpus()
        .into_iter()
        .filter(|c| !taken(c % CORES))
        .collect()
}

fn policy_with_half_taken(topo: &CpuTopology) -> StaticPolicy {
    let mut p = StaticPolicy::new(topo.clone(), Cpus::new(), StaticOptions::default());
    let free = half_free(topo);
    let busy: CpuSet = topo.all_cpus().difference(&free).copied().collect();
    let cp = Checkpoint {
        policy_name: "static".to_owned(),
        default_cpu_set: free.iter().copied().collect(),
        entries: BTreeMap::from([(
            "busy-uid".to_owned(),
            BTreeMap::from([("app".to_owned(), busy)]),
        )]),
        cpus_to_reuse: BTreeMap::new(),
        pod_entries: BTreeMap::new(),
        baseline_entries: BTreeMap::new(),
    };
    let out = p.reconcile(&cp);
    assert!(out.report.is_empty(), "bench state: {out:?}");
    p
}

fn bench(c: &mut Criterion) {
    let m = machine();
    let topo = CpuTopology::from_machine(&m);
    assert_eq!(topo.num_cpus(), 384);
    let free = half_free(&topo);
    assert_eq!(free.len(), 192);

    c.bench_function("cpu/take_packed_16_of_192_free_384cpu_8numa", |b| {
        b.iter(|| take_packed(&topo, black_box(&free), 16, SortingStrategy::Packed, false))
    });

    let policy = policy_with_half_taken(&topo);
    let pod = testkit::guaranteed_pod("p", &[("cpu", 16_000), ("memory", 1 << 30)]);
    let node3 = NumaMask::single(NumaNodeId::from(3));
    c.bench_function("cpu/allocate_16_hinted_node_384cpu_8numa_half_taken", |b| {
        b.iter_batched(
            || policy.clone(),
            |mut p| p.allocate(&pod, &pod.containers[0], Some(node3)),
            BatchSize::SmallInput,
        )
    });

    c.bench_function("cpu/hints_16_cpus_384cpu_8numa_half_taken", |b| {
        b.iter(|| policy.hints(black_box(&pod), &pod.containers[0]))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
