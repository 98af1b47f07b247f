//! The provider's `[providers.memory.config]` table (see also `docs/providers.md`).
//!
//! ```toml
//! [providers.memory.config]
//! policy = "static"                 # or "none"
//! [providers.memory.config.reserved_memory.0]   # per NUMA node id
//! memory = "1Gi"
//! hugepages-1Gi = "2Gi"
//! [providers.memory.config.feature_gates]
//! PodLevelResourceManagers = false  # the kubelet gate, off by default
//! ```
//!
//! Quantities are Kubernetes quantities (the SDK's
//! [`topomgr_sdk::quantity`], rounded up to whole bytes); a plain integer is
//! a number of bytes.

use std::collections::BTreeMap;

use serde::Deserialize;
use topomgr_sdk::quantity::{Quantity, QuantityError};
use topomgr_sdk::{NodeOutOfRange, NumaNodeId};

/// The memory manager policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// The kubelet's static policy: NUMA-pinned memory for Guaranteed pods.
    #[default]
    Static,
    /// No memory management: no hints, empty allocations.
    None,
}

impl Policy {
    /// The kubelet's policy name, as written in its state file.
    pub fn kubelet_name(self) -> &'static str {
        match self {
            Policy::Static => "Static",
            Policy::None => "None",
        }
    }
}

/// A quantity as written in the config: Kubernetes text or whole bytes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum RawQuantity {
    Bytes(u64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    policy: Policy,
    #[serde(default)]
    reserved_memory: BTreeMap<String, BTreeMap<String, RawQuantity>>,
    #[serde(default)]
    feature_gates: FeatureGates,
}

/// The kubelet feature gates the provider follows (`[config.feature_gates]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureGates {
    /// `PodLevelResourceManagers` (beta, off by default in Kubernetes 1.37).
    #[serde(default, rename = "PodLevelResourceManagers")]
    pub pod_level_resource_managers: bool,
}

/// The validated config (not yet checked against the machine; see
/// [`crate::machine::MachineMemory::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The policy.
    pub policy: Policy,
    /// Bytes reserved for the system, by NUMA node and resource name.
    pub reserved: BTreeMap<NumaNodeId, BTreeMap<String, u64>>,
    /// The feature gates.
    pub feature_gates: FeatureGates,
}

/// Why the config table is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The table does not deserialize (unknown key, wrong type).
    #[error("{0}")]
    Shape(String),
    /// A `reserved_memory` key that is not a node id.
    #[error(
        "reserved_memory.{0}: not a NUMA node id; name the table after the node's number, \
         e.g. [providers.memory.config.reserved_memory.0]"
    )]
    NodeKey(String),
    /// A node id above 255.
    #[error("reserved_memory.{key}: {cause}")]
    NodeRange {
        /// The key as written.
        key: String,
        /// Why.
        cause: NodeOutOfRange,
    },
    /// A resource that is not memory or hugepages.
    #[error(
        "reserved_memory.{node}.{resource}: not a memory resource; use \"memory\" or \
         \"hugepages-<size>\" (e.g. hugepages-1Gi)"
    )]
    Resource {
        /// Node id as written.
        node: NumaNodeId,
        /// The resource name.
        resource: String,
    },
    /// A quantity that does not parse.
    #[error("reserved_memory.{node}.{resource}: {cause}")]
    Quantity {
        /// Node id.
        node: NumaNodeId,
        /// The resource name.
        resource: String,
        /// The parse error.
        cause: QuantityError,
    },
}

/// True for the resources this provider manages: `memory` and `hugepages-*`
/// (the kubelet's `IsHugePageResourceName` is a prefix test).
pub fn is_memory_resource(name: &str) -> bool {
    name == "memory" || name.starts_with("hugepages-")
}

impl Config {
    /// Reads the config table (as JSON).
    pub fn from_value(value: &serde_json::Value) -> Result<Config, ConfigError> {
        let value = if value.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            value.clone()
        };
        let raw: RawConfig =
            serde_json::from_value(value).map_err(|e| ConfigError::Shape(e.to_string()))?;
        let mut reserved = BTreeMap::new();
        for (key, table) in raw.reserved_memory {
            let id: u32 = key.parse().map_err(|_| ConfigError::NodeKey(key.clone()))?;
            let node = NumaNodeId::new(id).map_err(|source| ConfigError::NodeRange {
                key: key.clone(),
                cause: source,
            })?;
            let mut per = BTreeMap::new();
            for (resource, q) in table {
                if !is_memory_resource(&resource) {
                    return Err(ConfigError::Resource { node, resource });
                }
                let bytes = match q {
                    RawQuantity::Bytes(b) => b,
                    RawQuantity::Text(t) => Quantity::parse(t.trim())
                        .map_err(|source| ConfigError::Quantity {
                            node,
                            resource: resource.clone(),
                            cause: source,
                        })?
                        .value(),
                };
                per.insert(resource, bytes);
            }
            reserved.insert(node, per);
        }
        Ok(Config {
            policy: raw.policy,
            reserved,
            feature_gates: raw.feature_gates,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: serde_json::Value) -> String {
        match Config::from_value(&v) {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn reads_the_spec_example() {
        let c = Config::from_value(&json!({
            "policy": "static",
            "reserved_memory": {"0": {"memory": "1Gi", "hugepages-1Gi": "2Gi"}, "1": {"memory": 1024}}
        }))
        .unwrap();
        assert_eq!(c.policy, Policy::Static);
        assert_eq!(
            c.reserved,
            BTreeMap::from([
                (
                    NumaNodeId::from(0),
                    BTreeMap::from([
                        ("hugepages-1Gi".to_owned(), 2u64 << 30),
                        ("memory".to_owned(), 1 << 30)
                    ])
                ),
                (
                    NumaNodeId::from(1),
                    BTreeMap::from([("memory".to_owned(), 1024)])
                ),
            ])
        );
        assert_eq!(
            Config::from_value(&serde_json::Value::Null).unwrap().policy,
            Policy::Static
        );
        assert_eq!(
            Config::from_value(&json!({"policy": "none"}))
                .unwrap()
                .policy,
            Policy::None
        );
        let gates = json!({"feature_gates": {"PodLevelResourceManagers": true}});
        assert!(
            Config::from_value(&gates)
                .unwrap()
                .feature_gates
                .pod_level_resource_managers
        );
    }

    #[test]
    fn errors_name_the_key() {
        assert_eq!(
            err(json!({"policy": "dynamic"})),
            "unknown variant `dynamic`, expected `static` or `none`"
        );
        assert_eq!(
            err(json!({"reserved": {}})),
            "unknown field `reserved`, expected one of `policy`, `reserved_memory`, `feature_gates`"
        );
        assert_eq!(
            err(json!({"reserved_memory": {"node0": {"memory": "1Gi"}}})),
            "reserved_memory.node0: not a NUMA node id; name the table after the node's number, \
             e.g. [providers.memory.config.reserved_memory.0]"
        );
        assert_eq!(
            err(json!({"reserved_memory": {"0": {"cpu": "1"}}})),
            "reserved_memory.0.cpu: not a memory resource; use \"memory\" or \"hugepages-<size>\" \
             (e.g. hugepages-1Gi)"
        );
        assert_eq!(
            err(json!({"reserved_memory": {"1": {"memory": "1GB"}}})),
            "reserved_memory.1.memory: invalid quantity \"1GB\""
        );
        assert_eq!(
            err(json!({"reserved_memory": {"1": {"memory": "1K"}}})),
            "reserved_memory.1.memory: invalid quantity \"1K\": unknown suffix \"K\" (expected \
             one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"
        );
        assert_eq!(
            err(json!({"reserved_memory": {"300": {"memory": "1Gi"}}})),
            "reserved_memory.300: NUMA node id 300 is out of range: topomgr supports node ids 0-255"
        );
        assert_eq!(
            err(json!({"feature_gates": {"PodLevelResources": true}})),
            "unknown field `PodLevelResources`, expected `PodLevelResourceManagers`"
        );
        assert_eq!(
            err(json!({"reserved_memory": {"0": {"memory": "-1Gi"}}})),
            "reserved_memory.0.memory: invalid quantity \"-1Gi\": must not be negative"
        );
    }
}
