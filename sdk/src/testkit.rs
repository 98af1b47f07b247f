//! Helpers for unit-testing a [`Provider`] in-process, without a host.
//!
//! ```
//! use topomgr_sdk::testkit;
//!
//! let machine = testkit::machine(2, 4); // 2 NUMA nodes x 4 CPUs
//! assert_eq!(machine.online_cpus().to_string(), "0-7");
//! let pod = testkit::guaranteed_pod("web", &[("cpu", 2000), ("example.com/widget", 1)]);
//! assert_eq!(pod.containers[0].request("example.com/widget"), 1);
//! let hint = testkit::hint("0-1:true");
//! assert_eq!(testkit::hint_string(&hint), "0-1:true");
//! ```
//!
//! Build the provider with [`new_provider`] (a plain value, for unit tests
//! of its methods) or [`load`] (through the same JSON boundary and panic
//! guard as a host loading the `.so`), ask for hints, and compare them with
//! [`hint_strings`] / [`assert_hints`], which print hints as
//! `"<mask>:<preferred>"` (`"0-1:false"`, `"any:true"`); [`hint`] parses that
//! form back.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(any(feature = "plugin-abi", doc))]
mod boundary;
#[cfg(any(feature = "plugin-abi", doc))]
pub use boundary::{load, through_boundary, Loaded};

use crate::{
    Allocation, AssignedDeviceHints, AssignedDevicesRequest, ContainerView, Cpu, CpuSet, HintSet,
    Inventory, Machine, NumaMask, NumaNode, NumaNodeId, PciDevice, PodView,
    PreferredAllocationRequest, Provider, ProviderConfig, ProviderContext, ProviderError,
    ProviderHints, QosClass, Reconciled, ResourceList, TopologyHint,
};

/// Memory per NUMA node of [`machine`]: 16 GiB.
pub const NODE_MEMORY_BYTES: u64 = 16 << 30;

/// Node id `n` (test input: panics above 255).
fn node(n: u32) -> NumaNodeId {
    NumaNodeId::new(n).unwrap_or_else(|e| panic!("testkit: {e}"))
}

/// A machine of `nodes` NUMA nodes (ids `0..nodes`) with `cpus_per_node`
/// CPUs each, numbered consecutively (node 0 has CPUs `0..cpus_per_node`).
/// Each node is one socket with one L3 cache, each CPU its own core, every
/// node has [`NODE_MEMORY_BYTES`] (all free) and distances are 10 (local) /
/// 20 (remote). No PCI devices.
pub fn machine(nodes: u32, cpus_per_node: u32) -> Machine {
    let ids: Vec<u32> = (0..nodes).collect();
    machine_with_node_ids(&ids, cpus_per_node)
}

/// Like [`machine`], with the given (possibly sparse) node ids: node
/// `ids[i]` has CPUs `i * cpus_per_node ..` and is socket `i`.
///
/// ```
/// let m = topomgr_sdk::testkit::machine_with_node_ids(&[0, 8, 250], 2);
/// assert_eq!(m.numa_mask().to_string(), "0,8,250");
/// assert_eq!(m.numa_nodes[2].cpus.to_string(), "4-5");
/// ```
pub fn machine_with_node_ids(ids: &[u32], cpus_per_node: u32) -> Machine {
    let mut cpus = Vec::new();
    for (i, &n) in ids.iter().enumerate() {
        let i = i as u32;
        for k in 0..cpus_per_node {
            let id = i * cpus_per_node + k;
            cpus.push(Cpu::new(id, Some(node(n))).with_socket(i).with_l3(Some(i)));
        }
    }
    machine_on_nodes(cpus, ids)
}

/// A machine with the given CPUs (any topology: sockets, cores, threads,
/// L3) on NUMA nodes `0..nodes`: each node gets the CPUs whose `numa` is its
/// id, [`NODE_MEMORY_BYTES`] (all free) and distances 10 (local) / 20
/// (remote). CPUs are sorted by id. No PCI devices.
pub fn machine_from_cpus(cpus: Vec<Cpu>, nodes: u32) -> Machine {
    let ids: Vec<u32> = (0..nodes).collect();
    machine_on_nodes(cpus, &ids)
}

fn machine_on_nodes(cpus: Vec<Cpu>, ids: &[u32]) -> Machine {
    let numa_nodes = ids
        .iter()
        .map(|&n| {
            let id = node(n);
            NumaNode::new(
                id,
                cpus.iter()
                    .filter(|c| c.numa == Some(id))
                    .map(|c| c.id)
                    .collect(),
            )
            .with_memory(NODE_MEMORY_BYTES, NODE_MEMORY_BYTES)
            .with_distances(
                ids.iter()
                    .map(|&o| (node(o), if o == n { 10 } else { 20 }))
                    .collect(),
            )
        })
        .collect();
    Machine::new(numa_nodes, cpus, Vec::new())
}

/// A PCI device at `address` with `vendor` and `class` ids as sysfs writes
/// them (`"0x10de"`, `"0x030200"`), device id `"0x0000"`, on node `numa`
/// (`None`: the device has no NUMA node).
pub fn pci_device(address: &str, vendor: &str, class: &str, numa: Option<u32>) -> PciDevice {
    PciDevice::new(address, vendor, "0x0000", class, numa.map(node))
}

/// [`machine`] with `devices` as its PCI devices (sorted by address).
///
/// ```
/// use topomgr_sdk::testkit;
/// let m = testkit::machine_with_devices(2, 2, vec![
///     testkit::pci_device("0000:3b:00.0", "0x10de", "0x030200", Some(1)),
///     testkit::pci_device("0000:05:00.0", "0x8086", "0x020000", None),
/// ]);
/// assert_eq!(m.pci_devices[0].address, "0000:05:00.0");
/// assert_eq!(m.pci_devices[1].numa.map(|n| n.get()), Some(1));
/// ```
pub fn machine_with_devices(nodes: u32, cpus_per_node: u32, devices: Vec<PciDevice>) -> Machine {
    let m = machine(nodes, cpus_per_node);
    Machine::new(m.numa_nodes, m.cpus, devices)
}

/// A container whose requests and limits are both `resources`.
pub fn container(name: &str, resources: &[(&str, u64)]) -> ContainerView {
    let list: ResourceList = resources
        .iter()
        .map(|(k, v)| ((*k).to_owned(), *v))
        .collect();
    ContainerView::new(name)
        .with_requests(list.clone())
        .with_limits(list)
}

/// A sidecar (an init container with `restartPolicy: Always`) whose requests
/// and limits are both `resources`.
pub fn sidecar(name: &str, resources: &[(&str, u64)]) -> ContainerView {
    container(name, resources).with_sidecar(true)
}

/// A Guaranteed pod named `name` (uid `"<name>-uid"`, namespace `default`)
/// with one app container `"app"` requesting `resources` (requests = limits).
pub fn guaranteed_pod(name: &str, resources: &[(&str, u64)]) -> PodView {
    pod(name, Vec::new(), vec![container("app", resources)])
}

/// A Guaranteed pod named `name` (uid `"<name>-uid"`, namespace `default`)
/// with these init containers (sidecars included) and app containers.
pub fn pod(name: &str, init: Vec<ContainerView>, apps: Vec<ContainerView>) -> PodView {
    PodView::new(format!("{name}-uid"), name, "default", QosClass::Guaranteed)
        .with_init_containers(init)
        .with_containers(apps)
}

/// A state directory path unique to this process and call, under the
/// system temporary directory. It is not created: like a host's, the
/// provider creates it if it writes there.
fn unique_state_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("topomgr-testkit-{}-{n}", std::process::id()))
}

/// Builds provider `P` for `machine` with `config` (a JSON object, or
/// `Value::Null` for no table) and a state directory of its own (unique per
/// call, under the system temporary directory, not created).
pub fn new_provider<P: Provider>(
    machine: &Machine,
    config: serde_json::Value,
) -> Result<P, ProviderError> {
    let config = ProviderConfig(config);
    let state_dir = unique_state_dir();
    P::new(&ProviderContext::new(machine, &config, &state_dir))
}

type HintsFn =
    dyn FnMut(&PodView, &ContainerView) -> Result<ProviderHints, ProviderError> + Send + Sync;
type PodHintsFn = dyn FnMut(&PodView) -> Result<ProviderHints, ProviderError> + Send + Sync;
type AllocateFn = dyn FnMut(&PodView, &ContainerView, &TopologyHint) -> Result<Allocation, ProviderError>
    + Send
    + Sync;
type ReleaseFn = dyn FnMut(&str, &str) -> Result<(), ProviderError> + Send + Sync;
type CheckpointFn = dyn Fn() -> Result<Vec<u8>, ProviderError> + Send + Sync;
type RestoreFn = dyn FnMut(&[u8]) -> Result<Reconciled, ProviderError> + Send + Sync;
type PreferredFn =
    dyn FnMut(&PreferredAllocationRequest) -> Result<Vec<String>, ProviderError> + Send + Sync;
type InventoryFn = dyn Fn() -> Result<Inventory, ProviderError> + Send + Sync;
type AssignedFn =
    dyn FnMut(&AssignedDevicesRequest) -> Result<AssignedDeviceHints, ProviderError> + Send + Sync;
type ExcludeFn = dyn FnMut(&CpuSet) -> Result<bool, ProviderError> + Send + Sync;
type ResizeFn = dyn FnMut(
        &PodView,
        &ContainerView,
        &Allocation,
        &TopologyHint,
    ) -> Result<Option<Allocation>, ProviderError>
    + Send
    + Sync;

/// A provider made of closures, for tests of code that drives providers
/// (a host, a wrapper): each call runs its closure, and a call without one
/// answers the default — no hints map, an empty allocation, releases and
/// restores that succeed with an empty report, an empty checkpoint, no
/// preference, an empty inventory.
///
/// State shared between calls lives in what the closures capture (an
/// `Arc<Mutex<..>>`). Wrap it with [`through_boundary`] (or a host's
/// in-process constructor) to call it as a plugin; it is never loaded by
/// name, so [`Provider::new`] refuses.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use topomgr_sdk::{testkit, Allocation, CpuSet, ProviderError};
///
/// let released = Arc::new(Mutex::new(Vec::new()));
/// let log = Arc::clone(&released);
/// let fake = testkit::FakeProvider::new()
///     .with_allocate(|_, c, _| {
///         if c.name == "bad" {
///             return Err(ProviderError::admission("no room"));
///         }
///         Ok(Allocation::default().with_cpus(CpuSet::parse("2-3").unwrap(), true))
///     })
///     .with_release(move |uid, c| {
///         log.lock().unwrap().push(format!("{uid}/{c}"));
///         Ok(())
///     });
/// let mut p = testkit::through_boundary(fake);
/// let pod = testkit::guaranteed_pod("a", &[("cpu", 2000)]);
/// let a = p.allocate(&pod, &pod.containers[0], &testkit::hint("0:true")).unwrap();
/// assert_eq!(a.cpus.to_string(), "2-3");
/// p.release("a-uid", "app").unwrap();
/// assert_eq!(*released.lock().unwrap(), ["a-uid/app"]);
/// assert_eq!(p.topology_hints(&pod, &pod.containers[0]), Ok(None));
/// ```
#[derive(Default)]
pub struct FakeProvider {
    hints: Option<Box<HintsFn>>,
    pod_hints: Option<Box<PodHintsFn>>,
    allocate: Option<Box<AllocateFn>>,
    release: Option<Box<ReleaseFn>>,
    checkpoint: Option<Box<CheckpointFn>>,
    restore: Option<Box<RestoreFn>>,
    preferred: Option<Box<PreferredFn>>,
    inventory: Option<Box<InventoryFn>>,
    assigned: Option<Box<AssignedFn>>,
    exclude: Option<Box<ExcludeFn>>,
    resize: Option<Box<ResizeFn>>,
}

impl std::fmt::Debug for FakeProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FakeProvider")
    }
}

impl FakeProvider {
    /// A provider that answers every call with its default.
    pub fn new() -> Self {
        FakeProvider::default()
    }

    /// Container-scope hints ([`Provider::topology_hints`]).
    pub fn with_hints(
        mut self,
        f: impl FnMut(&PodView, &ContainerView) -> Result<ProviderHints, ProviderError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.hints = Some(Box::new(f));
        self
    }

    /// Pod-scope hints ([`Provider::pod_topology_hints`]).
    pub fn with_pod_hints(
        mut self,
        f: impl FnMut(&PodView) -> Result<ProviderHints, ProviderError> + Send + Sync + 'static,
    ) -> Self {
        self.pod_hints = Some(Box::new(f));
        self
    }

    /// Allocation ([`Provider::allocate`]).
    pub fn with_allocate(
        mut self,
        f: impl FnMut(&PodView, &ContainerView, &TopologyHint) -> Result<Allocation, ProviderError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.allocate = Some(Box::new(f));
        self
    }

    /// Release ([`Provider::release`]).
    pub fn with_release(
        mut self,
        f: impl FnMut(&str, &str) -> Result<(), ProviderError> + Send + Sync + 'static,
    ) -> Self {
        self.release = Some(Box::new(f));
        self
    }

    /// The saved state ([`Provider::checkpoint`]).
    pub fn with_checkpoint(
        mut self,
        f: impl Fn() -> Result<Vec<u8>, ProviderError> + Send + Sync + 'static,
    ) -> Self {
        self.checkpoint = Some(Box::new(f));
        self
    }

    /// Restore ([`Provider::restore`]).
    pub fn with_restore(
        mut self,
        f: impl FnMut(&[u8]) -> Result<Reconciled, ProviderError> + Send + Sync + 'static,
    ) -> Self {
        self.restore = Some(Box::new(f));
        self
    }

    /// `GetPreferredAllocation` ([`Provider::preferred_allocation`]).
    pub fn with_preferred_allocation(
        mut self,
        f: impl FnMut(&PreferredAllocationRequest) -> Result<Vec<String>, ProviderError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.preferred = Some(Box::new(f));
        self
    }

    /// The inventory ([`Provider::inventory`]).
    pub fn with_inventory(
        mut self,
        f: impl Fn() -> Result<Inventory, ProviderError> + Send + Sync + 'static,
    ) -> Self {
        self.inventory = Some(Box::new(f));
        self
    }

    /// Hints of devices assigned elsewhere ([`Provider::assigned_device_hints`]).
    pub fn with_assigned_device_hints(
        mut self,
        f: impl FnMut(&AssignedDevicesRequest) -> Result<AssignedDeviceHints, ProviderError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.assigned = Some(Box::new(f));
        self
    }

    /// CPUs excluded from exclusive use ([`Provider::exclude_cpus`]).
    pub fn with_exclude_cpus(
        mut self,
        f: impl FnMut(&CpuSet) -> Result<bool, ProviderError> + Send + Sync + 'static,
    ) -> Self {
        self.exclude = Some(Box::new(f));
        self
    }

    /// In-place resize ([`Provider::resize`]); without it the fake does
    /// not resize.
    pub fn with_resize(
        mut self,
        f: impl FnMut(
                &PodView,
                &ContainerView,
                &Allocation,
                &TopologyHint,
            ) -> Result<Option<Allocation>, ProviderError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.resize = Some(Box::new(f));
        self
    }
}

impl Provider for FakeProvider {
    /// Refuses: a fake is built with [`FakeProvider::new`], not by a host.
    fn new(_: &ProviderContext<'_>) -> Result<Self, ProviderError> {
        Err(ProviderError::config(
            "testkit::FakeProvider is built with FakeProvider::new in a test, not loaded",
        ))
    }

    fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        self.hints.as_mut().map_or(Ok(None), |f| f(pod, container))
    }

    fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        self.pod_hints.as_mut().map_or(Ok(None), |f| f(pod))
    }

    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        self.allocate
            .as_mut()
            .map_or_else(|| Ok(Allocation::default()), |f| f(pod, container, hint))
    }

    fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        self.release
            .as_mut()
            .map_or(Ok(()), |f| f(pod_uid, container))
    }

    fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        self.checkpoint
            .as_ref()
            .map_or_else(|| Ok(Vec::new()), |f| f())
    }

    fn restore(&mut self, saved: &[u8]) -> Result<Reconciled, ProviderError> {
        self.restore
            .as_mut()
            .map_or_else(|| Ok(Reconciled::new()), |f| f(saved))
    }

    fn preferred_allocation(
        &mut self,
        request: &PreferredAllocationRequest,
    ) -> Result<Vec<String>, ProviderError> {
        self.preferred
            .as_mut()
            .map_or_else(|| Ok(Vec::new()), |f| f(request))
    }

    fn inventory(&self) -> Result<Inventory, ProviderError> {
        self.inventory
            .as_ref()
            .map_or_else(|| Ok(Inventory::default()), |f| f())
    }

    fn assigned_device_hints(
        &mut self,
        request: &AssignedDevicesRequest,
    ) -> Result<AssignedDeviceHints, ProviderError> {
        self.assigned
            .as_mut()
            .map_or_else(|| Ok(AssignedDeviceHints::none()), |f| f(request))
    }

    fn exclude_cpus(&mut self, cpus: &CpuSet) -> Result<bool, ProviderError> {
        self.exclude.as_mut().map_or(Ok(false), |f| f(cpus))
    }

    fn resize(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        current: &Allocation,
        hint: &TopologyHint,
    ) -> Result<Option<Allocation>, ProviderError> {
        self.resize
            .as_mut()
            .map_or(Ok(None), |f| f(pod, container, current, hint))
    }
}

/// Formats one hint as `"<mask>:<preferred>"`, `"any:<preferred>"` for no affinity.
pub fn hint_string(h: &TopologyHint) -> String {
    match h.affinity {
        Some(m) => format!("{m}:{}", h.preferred),
        None => format!("any:{}", h.preferred),
    }
}

/// Parses the form [`hint_string`] prints: `"0-1:true"`, `"any:false"`
/// (test input: panics on anything else, naming it).
///
/// ```
/// use topomgr_sdk::{testkit, NumaMask};
/// let h = testkit::hint("0,2:false");
/// assert_eq!(h.affinity, Some(NumaMask::from_nodes([0, 2]).unwrap()));
/// assert!(!h.preferred);
/// assert_eq!(testkit::hint("any:true").affinity, None);
/// ```
pub fn hint(text: &str) -> TopologyHint {
    let (mask, preferred) = text
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("testkit::hint({text:?}): expected \"<nodes>:<true|false>\""));
    let preferred = match preferred {
        "true" => true,
        "false" => false,
        other => panic!("testkit::hint({text:?}): {other:?} is not true or false"),
    };
    let affinity = if mask == "any" {
        None
    } else {
        Some(NumaMask::parse_list(mask).unwrap_or_else(|e| panic!("testkit::hint({text:?}): {e}")))
    };
    TopologyHint {
        affinity,
        preferred,
    }
}

fn node_ids(nodes: &[u32]) -> Vec<NumaNodeId> {
    nodes.iter().map(|&n| node(n)).collect()
}

/// The hints of `resource` as strings, compact sets expanded over `nodes`
/// (the machine's node ids): `None` when the provider returned
/// no map or no preference for the resource, `Some(vec![])` when it cannot
/// satisfy the request.
pub fn hint_strings(hints: &ProviderHints, resource: &str, nodes: &[u32]) -> Option<Vec<String>> {
    let set: &HintSet = hints.as_ref()?.get(resource)?.as_ref()?;
    Some(
        set.to_explicit(&node_ids(nodes))
            .iter()
            .map(hint_string)
            .collect(),
    )
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

/// A resource list from `(name, amount)` pairs.
pub fn resources(list: &[(&str, u64)]) -> ResourceList {
    list.iter()
        .map(|(k, v)| ((*k).to_owned(), *v))
        .collect::<BTreeMap<_, _>>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CompactHints, HintsBuilder};

    #[test]
    fn machine_shape() {
        let m = machine(2, 3);
        assert_eq!(m.numa_ids(), vec![node(0), node(1)]);
        assert_eq!(m.numa_nodes[1].cpus.to_string(), "3-5");
        assert_eq!(m.numa_nodes[1].distances.get(&node(0)), Some(&20));
        assert_eq!(m.cpus.len(), 6);
        assert_eq!(m.cpus[4].numa, Some(node(1)));
        let sparse = machine_with_node_ids(&[3, 200], 1);
        assert_eq!(sparse.numa_nodes[1].distances.get(&node(3)), Some(&20));
        assert_eq!(sparse.cpus[1].numa, Some(node(200)));
    }

    #[test]
    fn strings_of_all_cases() {
        let h = HintsBuilder::new()
            .no_preference("none")
            .unsatisfiable("empty")
            .hints(
                "c",
                HintSet::Compact(CompactHints::upward_closed(
                    vec![hint("1:true").affinity.unwrap()],
                    1,
                )),
            )
            .build();
        assert_eq!(hint_strings(&h, "none", &[0, 1]), None);
        assert_eq!(hint_strings(&h, "missing", &[0, 1]), None);
        assert_eq!(hint_strings(&h, "empty", &[0, 1]), Some(vec![]));
        assert_hints(&h, "c", &[0, 1], Some(&["1:true", "0-1:false"]));
        assert_eq!(hint_string(&TopologyHint::ANY), "any:true");
        for text in ["0:true", "1-3,250:false", "any:false"] {
            assert_eq!(hint_string(&hint(text)), text);
        }
    }

    #[test]
    #[should_panic(expected = "testkit::hint(\"0-1:maybe\"): \"maybe\" is not true or false")]
    fn hint_parser_names_bad_input() {
        hint("0-1:maybe");
    }

    #[test]
    fn a_fake_provider_answers_defaults_and_its_closures() {
        let mut p = through_boundary(FakeProvider::new());
        let pod = guaranteed_pod("a", &[("cpu", 1000)]);
        assert_eq!(p.topology_hints(&pod, &pod.containers[0]), Ok(None));
        assert_eq!(p.pod_topology_hints(&pod), Ok(None));
        assert_eq!(
            p.allocate(&pod, &pod.containers[0], &TopologyHint::ANY),
            Ok(Allocation::default())
        );
        assert_eq!(p.release("a-uid", "app"), Ok(()));
        assert_eq!(p.checkpoint(), Ok(Vec::new()));
        assert_eq!(p.restore(b"x"), Ok(Reconciled::new()));
        let req = PreferredAllocationRequest::new("r", vec!["d".into()], vec![], 1);
        assert_eq!(p.preferred_allocation(&req), Ok(Vec::new()));
        assert_eq!(p.inventory(), Ok(Inventory::default()));
        let saved = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = std::sync::Arc::clone(&saved);
        let mut p = through_boundary(
            FakeProvider::new()
                .with_restore(move |bytes| {
                    keep.lock().unwrap().extend_from_slice(bytes);
                    Ok(Reconciled::new().with_conflict(crate::Conflict::new("u", "c", "r", "x")))
                })
                .with_pod_hints(|_| Err(ProviderError::admission("full"))),
        );
        assert_eq!(p.restore(b"ab").unwrap().conflicts.len(), 1);
        assert_eq!(*saved.lock().unwrap(), b"ab");
        assert_eq!(
            p.pod_topology_hints(&pod),
            Err(ProviderError::admission("full"))
        );
        let err =
            new_provider::<FakeProvider>(&machine(1, 1), serde_json::Value::Null).unwrap_err();
        assert_eq!(err.reason, "InvalidConfig");
    }

    #[test]
    fn state_dirs_are_unique() {
        assert_ne!(unique_state_dir(), unique_state_dir());
    }
}
