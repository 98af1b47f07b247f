//! The NodeResourceTopology export: this node's per-NUMA resources as a
//! `topology.node.k8s.io/v1alpha2` `NodeResourceTopology` object, the
//! custom resource a topology-aware scheduler (scheduler-plugins'
//! `NodeResourceTopologyMatch`) reads to send pods where they will be
//! admitted.
//!
//! The object is built from the machine (zones and their distance costs),
//! the policy and scope (the `topologyManagerPolicy` and
//! `topologyManagerScope` attributes, spelled as the kubelet's config spells
//! them, which is what the scheduler plugin parses) and the providers'
//! inventories (every resource a provider owns, per zone: `capacity`,
//! `allocatable`, `available`). Resources of a device attached to no NUMA
//! node have no zone to go in and are left out, as topology exporters do.
//!
//! Each zone also carries, per resource, the largest request topomgr would
//! admit aligned to that zone alone now, as the zone attribute
//! `topomgr.io/max-admissible-<resource>` (v1alpha2 zones have free-form
//! `attributes`; the value is a quantity as in `resources`). It comes from
//! the same inventories, not from probing the merge: a provider's
//! [`Zone::max_admissible`](topomgr_sdk::Zone::max_admissible) — what is
//! available, or less where the provider knows better (the CPU provider
//! with `full-pcpus-only`: the CPUs of wholly free cores, never reserved or
//! excluded ones). Probing would call every provider's hints for a
//! binary search of probe requests per zone and resource after every
//! change; the inventories are already read for `available`, so the
//! attributes cost one addition per zone and resource.
//!
//! The daemon serves it (`GET /v1/noderesourcetopology`, and the
//! `export_file` it rewrites after each change) and `topomgr export nrt`
//! prints it; this module is the one place that builds it.

use std::collections::BTreeMap;
use std::path::Path;

pub mod fingerprint;

use topomgr_sdk::{Amounts, Inventory, Machine, NumaNodeId};

use topomgr_engine::admission::Admitter;
use topomgr_engine::policy::{PolicyName, Scope};

pub use topomgr_contract::nrt::{
    Attribute, Cost, NodeResourceTopology, NrtZone, ObjectMeta, ResourceInfo,
};
use topomgr_contract::nrt::{
    API_VERSION, ATTRIBUTE_POLICY, ATTRIBUTE_SCOPE, KIND, ZONE_ATTRIBUTE_MAX_ADMISSIBLE,
};

/// What identifies the node and its alignment rules in the export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NrtIdentity {
    /// `metadata.name`: the Kubernetes node name.
    pub node_name: String,
    /// The Topology Manager policy.
    pub policy: PolicyName,
    /// The scope.
    pub scope: Scope,
}

/// The daemon's export settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExportSettings {
    /// `metadata.name` (config `node_name`, default the host name).
    pub node_name: String,
    /// Rewritten after each change when set (config `export_file`).
    pub file: Option<std::path::PathBuf>,
}

/// Why the export could not be built or written.
#[derive(Debug, thiserror::Error)]
pub enum NrtError {
    /// A provider's inventory call failed.
    #[error("provider {provider:?} could not report its inventory: {message}")]
    Inventory {
        /// Provider name.
        provider: String,
        /// Its error.
        message: String,
    },
    /// Two providers claim the same resource.
    #[error("providers {first:?} and {second:?} both report resource {resource:?}; give each resource to one provider")]
    SharedResource {
        /// The resource.
        resource: String,
        /// The provider seen first.
        first: String,
        /// The other one.
        second: String,
    },
    /// The host name (the default node name) could not be read.
    #[error("cannot read the host name for the node name ({0}); set `node_name` in the config")]
    HostName(String),
    /// The export file could not be written.
    #[error("cannot write the NodeResourceTopology export: {0}")]
    Write(crate::fsutil::PathError),
}

// By hand, not `#[from]`: the message carries the error, so it is not also
// chained as the source (the binary prints each cause once).
impl From<crate::fsutil::PathError> for NrtError {
    fn from(e: crate::fsutil::PathError) -> Self {
        NrtError::Write(e)
    }
}

/// The node's name: the config's `node_name`, else `default_node_name`.
pub fn node_name(cfg: &crate::setup::config::HostConfig) -> Result<String, NrtError> {
    match &cfg.node_name {
        Some(n) => Ok(n.clone()),
        None => default_node_name(),
    }
}

/// The default node name: the host name, lower-cased as the kubelet does.
pub(crate) fn default_node_name() -> Result<String, NrtError> {
    let name = nix::unistd::gethostname().map_err(|e| NrtError::HostName(e.to_string()))?;
    let name = name.to_string_lossy().trim().to_lowercase();
    if name.is_empty() {
        return Err(NrtError::HostName("it is empty".to_owned()));
    }
    Ok(name)
}

/// The inventories of the admitter's providers, in call order. A held
/// provider (it cannot read its saved state) gives nothing until it can:
/// its resources are listed as its inventory reports them (from the
/// machine and its config) with `available` 0, never advertised as free;
/// the other providers' resources are as they report them (admissions that
/// do not ask for the held provider's resources go on).
pub(crate) fn inventories(admitter: &mut Admitter) -> Result<Vec<(String, Inventory)>, NrtError> {
    let held: Vec<bool> = {
        let held = admitter.held();
        admitter
            .providers()
            .iter()
            .map(|p| held.iter().any(|(h, _)| *h == p.name()))
            .collect()
    };
    let mut out = Vec::new();
    for (p, held) in admitter.providers_mut().iter_mut().zip(held) {
        let mut inv = p.inventory().map_err(|e| NrtError::Inventory {
            provider: p.name().to_owned(),
            message: e.to_string(),
        })?;
        if held {
            for r in inv.resources.values_mut() {
                r.total.available = 0;
                for zone in &mut r.zones {
                    zone.amounts.available = 0;
                }
            }
        }
        out.push((p.name().to_owned(), inv));
    }
    Ok(out)
}

/// The resource names the inventories own, each with the provider owning it.
pub(crate) fn owners(
    inventories: &[(String, Inventory)],
) -> Result<BTreeMap<&str, &str>, NrtError> {
    let mut owners: BTreeMap<&str, &str> = BTreeMap::new();
    for (provider, inv) in inventories {
        for resource in inv.resources.keys() {
            if let Some(first) = owners.insert(resource, provider) {
                return Err(NrtError::SharedResource {
                    resource: resource.clone(),
                    first: first.to_owned(),
                    second: provider.clone(),
                });
            }
        }
    }
    Ok(owners)
}

/// The NodeResourceTopology object of `machine` with the resources of
/// `inventories` (provider name, its inventory).
pub(crate) fn build(
    id: &NrtIdentity,
    machine: &Machine,
    inventories: &[(String, Inventory)],
) -> Result<NodeResourceTopology, NrtError> {
    owners(inventories)?;
    // Per zone and resource: the amounts, and the largest request aligned
    // to the zone alone that the provider would satisfy now.
    let mut per_zone: BTreeMap<NumaNodeId, BTreeMap<&str, (Amounts, u64)>> = BTreeMap::new();
    for (_, inv) in inventories {
        for (name, r) in &inv.resources {
            for zone in &r.zones {
                if let Some(numa) = zone.numa {
                    let (amounts, admissible) =
                        per_zone.entry(numa).or_default().entry(name).or_default();
                    amounts.add(zone.amounts);
                    *admissible = admissible.saturating_add(zone.max_admissible());
                }
            }
        }
    }
    let zones = machine
        .numa_nodes
        .iter()
        .map(|node| NrtZone {
            name: zone_name(node.id),
            kind: "Node".to_owned(),
            costs: node
                .distances
                .iter()
                .map(|(to, d)| Cost {
                    name: zone_name(*to),
                    value: u64::from(*d),
                })
                .collect(),
            resources: per_zone
                .get(&node.id)
                .into_iter()
                .flatten()
                .map(|(name, (a, _))| ResourceInfo {
                    name: (*name).to_owned(),
                    capacity: quantity(name, a.capacity),
                    allocatable: quantity(name, a.allocatable),
                    available: quantity(name, a.available),
                })
                .collect(),
            attributes: per_zone
                .get(&node.id)
                .into_iter()
                .flatten()
                .map(|(name, (_, admissible))| Attribute {
                    name: format!("{ZONE_ATTRIBUTE_MAX_ADMISSIBLE}{name}"),
                    value: quantity(name, *admissible),
                })
                .collect(),
        })
        .collect();
    let attribute = |name: &str, value: &str| Attribute {
        name: name.to_owned(),
        value: value.to_owned(),
    };
    Ok(NodeResourceTopology {
        api_version: API_VERSION.to_owned(),
        kind: KIND.to_owned(),
        metadata: ObjectMeta {
            name: id.node_name.clone(),
        },
        topology_policies: vec![legacy_policy(id.policy, id.scope).to_owned()],
        attributes: vec![
            attribute(ATTRIBUTE_POLICY, id.policy.as_str()),
            attribute(ATTRIBUTE_SCOPE, id.scope.as_str()),
        ],
        zones,
    })
}

/// The pods `admitter` holds that count in the pod fingerprint (method
/// `with-exclusive-resources`): those the scheduler deems exclusive
/// ([`fingerprint::holds_exclusive_resources`]), by namespace and name,
/// each once (the NRI face and the OCI hook admit each container as a pod
/// of its own, named as its Kubernetes pod; the scheduler counts the pod
/// once).
pub fn exclusive_pods(admitter: &Admitter) -> std::collections::BTreeSet<(&str, &str)> {
    admitter
        .pods()
        .values()
        .filter(|r| r.admitted && fingerprint::holds_exclusive_resources(&r.pod))
        .map(|r| (r.pod.namespace.as_str(), r.pod.name.as_str()))
        .collect()
}

/// The export of `admitter`'s providers on `machine` as `node_name`, with
/// the fingerprint of the pods holding exclusive resources
/// ([`fingerprint`]).
pub fn of_admitter(
    node_name: &str,
    machine: &Machine,
    admitter: &mut Admitter,
) -> Result<NodeResourceTopology, NrtError> {
    let id = NrtIdentity {
        node_name: node_name.to_owned(),
        policy: admitter.policy().name(),
        scope: admitter.scope(),
    };
    let inv = inventories(admitter)?;
    let mut object = build(&id, machine, &inv)?;
    let signature = fingerprint::sign(exclusive_pods(admitter));
    object.attributes.push(Attribute {
        name: fingerprint::ATTRIBUTE.to_owned(),
        value: signature,
    });
    object.attributes.push(Attribute {
        name: fingerprint::ATTRIBUTE_METHOD.to_owned(),
        value: fingerprint::METHOD_WITH_EXCLUSIVE_RESOURCES.to_owned(),
    });
    Ok(object)
}

/// Write `object` to `path` atomically (pretty JSON), for an agent that
/// pushes it to the API server.
pub fn write(path: &Path, object: &NodeResourceTopology) -> Result<(), NrtError> {
    let mut text = serde_json::to_vec_pretty(object).unwrap_or_default();
    text.push(b'\n');
    crate::fsutil::write_atomic(path, &text)?;
    Ok(())
}

/// A zone's name: `node-<id>`, as the API's helpers spell it.
pub(crate) fn zone_name(id: NumaNodeId) -> String {
    format!("node-{id}")
}

/// The deprecated `topologyPolicies` value (v1alpha2 still has the field,
/// and schedulers older than the attributes read it).
fn legacy_policy(policy: PolicyName, scope: Scope) -> &'static str {
    match (policy, scope) {
        (PolicyName::None, _) => "None",
        (PolicyName::BestEffort, Scope::Container) => "BestEffortContainerLevel",
        (PolicyName::BestEffort, Scope::Pod) => "BestEffortPodLevel",
        (PolicyName::Restricted, Scope::Container) => "RestrictedContainerLevel",
        (PolicyName::Restricted, Scope::Pod) => "RestrictedPodLevel",
        (PolicyName::SingleNumaNode, Scope::Container) => "SingleNUMANodeContainerLevel",
        (PolicyName::SingleNumaNode, Scope::Pod) => "SingleNUMANodePodLevel",
    }
}

/// An amount in the SDK's canonical unit as a Kubernetes quantity:
/// `cpu` millicores as cores (`"4"`, `"1500m"`), bytes of `memory`,
/// `hugepages-*` and `ephemeral-storage` with the largest exact binary
/// suffix (`"2Gi"`), anything else as a plain count.
pub(crate) fn quantity(resource: &str, amount: u64) -> String {
    if resource == "cpu" {
        return if amount.is_multiple_of(1000) {
            (amount / 1000).to_string()
        } else {
            format!("{amount}m")
        };
    }
    let bytes = resource == "memory"
        || resource == "ephemeral-storage"
        || resource.starts_with("hugepages-");
    if bytes && amount > 0 {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            if amount.is_multiple_of(1u64 << shift) {
                return format!("{}{suffix}", amount >> shift);
            }
        }
    }
    amount.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use topomgr_sdk::{CpuSet, NumaNode, ResourceInventory, Zone};

    fn machine() -> Machine {
        let n = |id: u8, d: [(u8, u32); 2]| {
            NumaNode::new(NumaNodeId::from(id), CpuSet::default()).with_distances(
                d.iter()
                    .map(|(to, dist)| (NumaNodeId::from(*to), *dist))
                    .collect(),
            )
        };
        Machine::new(
            vec![n(0, [(0, 10), (1, 21)]), n(1, [(0, 21), (1, 10)])],
            Vec::new(),
            Vec::new(),
        )
    }

    fn res(zones: &[(Option<u8>, [u64; 3])]) -> ResourceInventory {
        let zones: Vec<Zone> = zones
            .iter()
            .map(|(n, [c, al, av])| Zone::new(n.map(NumaNodeId::from), Amounts::new(*c, *al, *av)))
            .collect();
        let mut total = Amounts::default();
        zones.iter().for_each(|z| total.add(z.amounts));
        ResourceInventory::new(total, zones)
    }

    fn id() -> NrtIdentity {
        NrtIdentity {
            node_name: "worker-1".to_owned(),
            policy: PolicyName::SingleNumaNode,
            scope: Scope::Container,
        }
    }

    #[test]
    fn quantities_are_kubernetes_spellings() {
        assert_eq!(quantity("cpu", 4000), "4");
        assert_eq!(quantity("cpu", 1500), "1500m");
        assert_eq!(quantity("cpu", 0), "0");
        assert_eq!(quantity("memory", 8 << 30), "8Gi");
        assert_eq!(quantity("memory", (8 << 30) + 512), "8589935104");
        assert_eq!(quantity("hugepages-2Mi", 3 << 21), "6Mi");
        assert_eq!(quantity("memory", 0), "0");
        assert_eq!(quantity("example.com/widget", 1024), "1024");
    }

    #[test]
    fn object_has_zones_costs_attributes_and_resources() {
        let cpu = Inventory::new().with_resource(
            "cpu",
            res(&[(Some(0), [4000, 3000, 2000]), (Some(1), [4000, 4000, 4000])]),
        );
        let dev = Inventory::new().with_resource(
            "example.com/widget",
            res(&[(Some(1), [2, 2, 1]), (None, [1, 1, 1])]),
        );
        let inv = vec![("cpu".to_owned(), cpu), ("widgets".to_owned(), dev)];
        let got = build(&id(), &machine(), &inv).unwrap();
        let got = serde_json::to_value(got).unwrap();
        let want = serde_json::json!({
            "apiVersion": "topology.node.k8s.io/v1alpha2",
            "kind": "NodeResourceTopology",
            "metadata": {"name": "worker-1"},
            "topologyPolicies": ["SingleNUMANodeContainerLevel"],
            "attributes": [
                {"name": "topologyManagerPolicy", "value": "single-numa-node"},
                {"name": "topologyManagerScope", "value": "container"},
            ],
            "zones": [
                {"name": "node-0", "type": "Node",
                 "costs": [{"name": "node-0", "value": 10}, {"name": "node-1", "value": 21}],
                 "resources": [{"name": "cpu", "capacity": "4", "allocatable": "3", "available": "2"}],
                 "attributes": [{"name": "topomgr.io/max-admissible-cpu", "value": "2"}]},
                {"name": "node-1", "type": "Node",
                 "costs": [{"name": "node-0", "value": 21}, {"name": "node-1", "value": 10}],
                 "resources": [
                    {"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"},
                    {"name": "example.com/widget", "capacity": "2", "allocatable": "2", "available": "1"},
                 ],
                 "attributes": [
                    {"name": "topomgr.io/max-admissible-cpu", "value": "4"},
                    {"name": "topomgr.io/max-admissible-example.com/widget", "value": "1"},
                 ]},
            ],
        });
        assert_eq!(got, want);
    }

    /// The zone's `max-admissible` attributes, `resource=value`.
    fn admissible(object: &NodeResourceTopology) -> Vec<Vec<String>> {
        object
            .zones
            .iter()
            .map(|z| {
                z.attributes
                    .iter()
                    .map(|a| {
                        let name = a.name.strip_prefix(ZONE_ATTRIBUTE_MAX_ADMISSIBLE).unwrap();
                        format!("{name}={}", a.value)
                    })
                    .collect()
            })
            .collect()
    }

    /// Per zone and resource, what one aligned request may get: what is
    /// available, or what the provider says is less (whole cores), never
    /// more than available; memory and hugepages per size as quantities,
    /// devices as counts (one on several nodes counts in each; one on no
    /// node in none).
    #[test]
    fn zones_carry_the_largest_admissible_request_per_resource() {
        let zone = |n: u8, [c, al, av]: [u64; 3]| {
            Zone::new(Some(NumaNodeId::from(n)), Amounts::new(c, al, av))
        };
        let resource = |zones: Vec<Zone>| {
            let mut total = Amounts::default();
            zones.iter().for_each(|z| total.add(z.amounts));
            ResourceInventory::new(total, zones)
        };
        // Node 0: 6 CPUs free, of which 4 on whole free cores; node 1: 8
        // free, a plugin's claim of 9 is capped to them.
        let cpu = Inventory::new().with_resource(
            "cpu",
            resource(vec![
                zone(0, [8000, 7000, 6000]).with_admissible(4000),
                zone(1, [8000, 8000, 8000]).with_admissible(9000),
            ]),
        );
        let memory = Inventory::new()
            .with_resource(
                "memory",
                resource(vec![
                    zone(0, [16 << 30, 15 << 30, 3 << 30]),
                    zone(1, [16 << 30, 16 << 30, (1 << 30) + (512 << 20)]),
                ]),
            )
            .with_resource(
                "hugepages-1Gi",
                resource(vec![
                    zone(0, [4 << 30, 4 << 30, 0]),
                    zone(1, [4 << 30, 4 << 30, 2 << 30]),
                ]),
            )
            .with_resource(
                "hugepages-2Mi",
                resource(vec![
                    zone(0, [1 << 30, 1 << 30, 6 << 20]),
                    zone(1, [0, 0, 0]),
                ]),
            );
        let gpus = Inventory::new().with_resource(
            "nvidia.com/gpu",
            resource(vec![
                zone(0, [2, 2, 1]),
                zone(1, [3, 3, 2]),
                Zone::new(None, Amounts::new(1, 1, 1)),
            ]),
        );
        let inv = vec![
            ("cpu".to_owned(), cpu),
            ("memory".to_owned(), memory),
            ("gpu".to_owned(), gpus),
        ];
        let got = build(&id(), &machine(), &inv).unwrap();
        assert_eq!(
            admissible(&got),
            [
                vec![
                    "cpu=4",
                    "hugepages-1Gi=0",
                    "hugepages-2Mi=6Mi",
                    "memory=3Gi",
                    "nvidia.com/gpu=1"
                ],
                vec![
                    "cpu=8",
                    "hugepages-1Gi=2Gi",
                    "hugepages-2Mi=0",
                    "memory=1536Mi",
                    "nvidia.com/gpu=2"
                ],
            ]
        );
        // The attributes are zone attributes of the CRD (v1alpha2 `Zone`
        // has `attributes`, name-value pairs).
        let json = serde_json::to_value(&got).unwrap();
        assert_eq!(
            json["zones"][0]["attributes"][0],
            serde_json::json!({"name": "topomgr.io/max-admissible-cpu", "value": "4"})
        );
        // A zone without resources has no attributes (absent).
        let bare = build(&id(), &machine(), &[]).unwrap();
        assert!(serde_json::to_value(&bare).unwrap()["zones"][0]
            .get("attributes")
            .is_none());
    }

    #[test]
    fn two_owners_of_one_resource_is_an_error() {
        let a = Inventory::new().with_resource("x.com/y", res(&[(Some(0), [1, 1, 1])]));
        let inv = vec![("a".to_owned(), a.clone()), ("b".to_owned(), a)];
        let err = build(&id(), &machine(), &inv).unwrap_err();
        assert_eq!(
            err.to_string(),
            "providers \"a\" and \"b\" both report resource \"x.com/y\"; give each resource to one provider"
        );
    }

    #[test]
    fn legacy_policies_follow_policy_and_scope() {
        assert_eq!(legacy_policy(PolicyName::None, Scope::Pod), "None");
        assert_eq!(
            legacy_policy(PolicyName::Restricted, Scope::Pod),
            "RestrictedPodLevel"
        );
        assert_eq!(
            legacy_policy(PolicyName::BestEffort, Scope::Container),
            "BestEffortContainerLevel"
        );
    }

    /// A held provider's resources are exported with nothing available;
    /// the other providers' stay as they report them.
    #[test]
    fn a_held_providers_resources_are_not_available_and_the_others_are() {
        use topomgr_engine::admission::Admitter;
        use topomgr_engine::numa::NumaInfo;
        use topomgr_engine::policy::Policy;
        use topomgr_engine::provider::LoadedProvider;
        let m = machine();
        let widgets = || {
            let inv = Inventory::new().with_resource(
                "example.com/widget",
                res(&[(Some(0), [2, 2, 1]), (Some(1), [2, 2, 2])]),
            );
            topomgr_sdk::testkit::FakeProvider::new().with_inventory(move || Ok(inv.clone()))
        };
        let gpus = || {
            let inv = Inventory::new().with_resource(
                "nvidia.com/gpu",
                res(&[(Some(0), [1, 1, 1]), (Some(1), [2, 1, 1])]),
            );
            topomgr_sdk::testkit::FakeProvider::new().with_inventory(move || Ok(inv.clone()))
        };
        let numa = NumaInfo::from_machine(&m).unwrap();
        let policy = Policy::new("best-effort", &BTreeMap::new(), numa).unwrap();
        let mut adm = Admitter::new(
            &m,
            policy,
            Scope::Container,
            vec![
                LoadedProvider::in_process("widgets", widgets()),
                LoadedProvider::in_process("gpu", gpus()),
            ],
        );
        let available = |adm: &mut Admitter| -> Vec<String> {
            let o = of_admitter("n", &m, adm).unwrap();
            o.zones
                .iter()
                .flat_map(|z| {
                    z.resources.iter().map(|r| {
                        format!(
                            "{}:{}={}/{}/{}",
                            z.name, r.name, r.capacity, r.allocatable, r.available
                        )
                    })
                })
                .collect()
        };
        assert_eq!(
            available(&mut adm),
            [
                "node-0:example.com/widget=2/2/1",
                "node-0:nvidia.com/gpu=1/1/1",
                "node-1:example.com/widget=2/2/2",
                "node-1:nvidia.com/gpu=2/1/1"
            ]
        );
        assert_eq!(
            admissible(&of_admitter("n", &m, &mut adm).unwrap()),
            [
                ["example.com/widget=1", "nvidia.com/gpu=1"],
                ["example.com/widget=2", "nvidia.com/gpu=1"]
            ]
        );
        adm.hold("gpu", "unreadable".to_owned());
        // Nothing of a held provider is admissible either.
        assert_eq!(
            admissible(&of_admitter("n", &m, &mut adm).unwrap()),
            [
                ["example.com/widget=1", "nvidia.com/gpu=0"],
                ["example.com/widget=2", "nvidia.com/gpu=0"]
            ]
        );
        assert_eq!(
            available(&mut adm),
            [
                "node-0:example.com/widget=2/2/1",
                "node-0:nvidia.com/gpu=1/1/0",
                "node-1:example.com/widget=2/2/2",
                "node-1:nvidia.com/gpu=2/1/0"
            ]
        );
    }
}
