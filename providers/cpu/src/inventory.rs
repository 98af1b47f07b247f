//! What the CPU provider reports for the NodeResourceTopology export: `cpu`
//! per NUMA zone.
//!
//! Units: the SDK's canonical CPU unit, millicores, always a whole number
//! of CPUs (`4000` = 4 CPUs), since the static policy hands out whole CPUs.
//! The kubelet's NRT exporters (NFD's topology-updater and the
//! resource-topology-exporter, from the kubelet's PodResources API) publish
//! `cpu` as a whole CPU count per zone; 4000 millicores is the same
//! quantity (`4`). Per zone, as they compute it:
//!
//! * `capacity`: the node's online CPUs;
//! * `allocatable`: capacity minus the reserved CPUs (`reserved_cpus`) on
//!   the node — the kubelet's `GetAllocatableCPUs`;
//! * `available`: allocatable minus the CPUs held exclusively (Guaranteed
//!   containers with integer CPUs, reusable init-container CPUs and
//!   pod-level CPU sets included); shared-pool use is not counted, as the
//!   exporters do not count it.
//!
//! Each zone also says the largest CPU request one container aligned to
//! that node alone would be given now ([`Zone::admissible`], exported as
//! `topomgr.io/max-admissible-cpu`): its available CPUs, or with
//! `full-pcpus-only` the CPUs of its cores whose every thread is available
//! (a core with a reserved or excluded thread, or one partly held, does not
//! count). That is stricter than the kubelet's `enforceSMTAlignment`, which
//! counts free CPUs outside reserved cores, because the export promises
//! whole cores; under `full-pcpus-only` every exclusive allocation is whole
//! cores, so the two differ only where excluded CPUs split a core.
//!
//! The allocatable CPUs are also named one by one, each with its node
//! ([`ResourceInventory::units`]): the daemon's PodResources API lists them
//! as `GetAllocatableResources`' `cpu_ids`, as the kubelet lists its static
//! policy's allocatable CPUs.
//!
//! Every NUMA node of the machine is a zone (a CPU-less node reports
//! zero). Online CPUs that no node lists are a "no NUMA node" zone with
//! capacity only: they are never handed out. Under `policy = "none"`
//! nothing is allocatable (the kubelet's none policy has no allocatable
//! CPUs).

use topomgr_sdk::{Amounts, Inventory, InventoryUnit, ResourceInventory, Zone};

use crate::topology::{CpuTopology, Cpus, Level};

/// The CPUs of `available` on cores whose every CPU is in `available`.
pub fn on_full_cores(topo: &CpuTopology, available: &Cpus) -> Cpus {
    topo.groups_of(available, Level::Core)
        .into_iter()
        .map(|core| topo.all_cpus_in(Level::Core, core))
        .filter(|core| core.iter().all(|c| available.contains(c)))
        .flatten()
        .collect()
}
use crate::RESOURCE;

/// CPUs as millicores.
fn millis(cpus: usize) -> u64 {
    cpus as u64 * 1000
}

/// The `cpu` inventory of `topo` with `allocatable` CPUs of which
/// `available` are free and `admissible` (a subset of `available`) may be
/// handed to one request.
pub fn cpu_inventory(
    topo: &CpuTopology,
    allocatable: &Cpus,
    available: &Cpus,
    admissible: &Cpus,
) -> Inventory {
    let mut zones: Vec<Zone> = topo
        .machine_nodes()
        .iter()
        .map(|&node| {
            let on = |cpus: &Cpus| topo.cpus_in(cpus, Level::Numa, node.get()).len();
            Zone::new(
                Some(node),
                Amounts::new(
                    millis(topo.size_of(Level::Numa, node.get())),
                    millis(on(allocatable)),
                    millis(on(available)),
                ),
            )
            .with_admissible(millis(on(admissible)))
        })
        .collect();
    if !topo.unplaced().is_empty() {
        zones.push(Zone::new(
            None,
            Amounts::new(millis(topo.unplaced().len()), 0, 0),
        ));
    }
    let mut total = Amounts::default();
    for z in &zones {
        total.add(z.amounts);
    }
    // The allocatable CPUs one by one, each on its node (the kubelet's
    // `GetAllocatableCPUs`, which the PodResources API lists).
    let units = topo
        .machine_nodes()
        .iter()
        .flat_map(|&node| {
            topo.cpus_in(allocatable, Level::Numa, node.get())
                .into_iter()
                .map(move |cpu| (cpu, InventoryUnit::new(cpu.to_string(), vec![node])))
        })
        .collect::<std::collections::BTreeMap<u32, InventoryUnit>>();
    Inventory::new().with_resource(
        RESOURCE,
        ResourceInventory::new(total, zones).with_units(units.into_values().collect()),
    )
}
