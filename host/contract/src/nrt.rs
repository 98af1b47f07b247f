//! The NodeResourceTopology object (`topology.node.k8s.io/v1alpha2`): the
//! custom resource a topology-aware scheduler (scheduler-plugins'
//! `NodeResourceTopologyMatch`) reads, as the daemon serves it (`GET
//! /v1/noderesourcetopology`, its `export_file`) and `topomgr export nrt`
//! prints it. Only the object's types: `topomgr_node::nrt` builds it from
//! the machine, the policy and the providers' inventories.

use serde::{Deserialize, Serialize};

/// `apiVersion` of the object.
pub const API_VERSION: &str = "topology.node.k8s.io/v1alpha2";
/// `kind` of the object.
pub const KIND: &str = "NodeResourceTopology";
/// Attribute naming the Topology Manager policy.
pub const ATTRIBUTE_POLICY: &str = "topologyManagerPolicy";
/// Attribute naming the Topology Manager scope.
pub const ATTRIBUTE_SCOPE: &str = "topologyManagerScope";
/// Prefix of a zone attribute naming the largest request of one resource
/// that topomgr would admit aligned to that zone alone now
/// (`topomgr.io/max-admissible-cpu`, `…-memory`, `…-hugepages-2Mi`,
/// `…-nvidia.com/gpu`); the value is a Kubernetes quantity as in
/// `ResourceInfo`.
pub const ZONE_ATTRIBUTE_MAX_ADMISSIBLE: &str = "topomgr.io/max-admissible-";

/// The exported object (the fields of the v1alpha2 CRD that topomgr sets;
/// reading ignores the others).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeResourceTopology {
    /// `API_VERSION`.
    pub api_version: String,
    /// `KIND`.
    pub kind: String,
    /// The node's name.
    pub metadata: ObjectMeta,
    /// The deprecated policy-and-scope value (`SingleNUMANodeContainerLevel`).
    pub topology_policies: Vec<String>,
    /// `ATTRIBUTE_POLICY` and `ATTRIBUTE_SCOPE`.
    pub attributes: Vec<Attribute>,
    /// One zone per NUMA node.
    pub zones: Vec<NrtZone>,
}

/// `metadata` of the object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// The Kubernetes node name.
    pub name: String,
}

/// A name-value attribute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribute {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// One zone: a NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NrtZone {
    /// `node-<id>` (`zone_name`).
    pub name: String,
    /// `Node`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The distance to each zone (absent when the machine has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<Cost>,
    /// The resources of the zone (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceInfo>,
    /// Per resource of the zone, `ZONE_ATTRIBUTE_MAX_ADMISSIBLE` + its
    /// name (absent when the zone has no resources).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<Attribute>,
}

/// The distance to a zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// The zone.
    pub name: String,
    /// The NUMA distance.
    pub value: u64,
}

/// One resource of a zone, amounts as Kubernetes quantities (`quantity`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceInfo {
    /// The resource name.
    pub name: String,
    /// Capacity.
    pub capacity: String,
    /// Allocatable.
    pub allocatable: String,
    /// Available now.
    pub available: String,
}
