//! Topology Manager policies, scopes and options, with the kubelet's semantics.
//!
//! A [`Policy`] is created once from the configured name, options and the
//! machine's NUMA nodes ([`NumaInfo`]); [`Policy::decide`] turns the hints of
//! all providers into the merged hint and the admit decision. The merge itself
//! lives in [`crate::merge`].
//!
//! Deliberate differences from the kubelet (documented in ARCHITECTURE.md):
//! - `max-allowable-numa-nodes` defaults to 64, not 8, because topomgr's merge
//!   does not enumerate the cross product of hints; 64 is also the hard limit.
//! - NUMA distances are looked up by the node's *position* in the distance
//!   row, so machines with non-contiguous node ids work.
//! - `prefer-closest-numa-nodes` with no distance table (the `merge` command's
//!   `"distances": null`) ranks masks as on a machine with uniform remote
//!   distances, which orders them exactly like the default comparator.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use topomgr_sdk::{
    parse_go_bool, NodePositions, NumaMask, NumaNodeId, ProviderHints, TopologyHint, MAX_NUMA_NODES,
};

use crate::merge::{self, MergeError, MergeOutcome};

/// Option name: prefer the set of NUMA nodes with the smallest average distance.
pub const PREFER_CLOSEST_NUMA_NODES: &str = "prefer-closest-numa-nodes";
/// Option name: the largest number of NUMA nodes the policy accepts.
pub const MAX_ALLOWABLE_NUMA_NODES: &str = "max-allowable-numa-nodes";
/// The kubelet's floor for `max-allowable-numa-nodes`.
pub const MIN_MAX_ALLOWABLE_NUMA_NODES: i64 = 8;
/// topomgr's default `max-allowable-numa-nodes` (the kubelet's is 8).
pub const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: i64 = MAX_NUMA_NODES as i64;

/// Errors creating a policy: bad names, options or NUMA information.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The policy name is not one of the four.
    #[error("unknown policy: {0:?} (expected none, best-effort, restricted or single-numa-node)")]
    UnknownPolicy(String),
    /// The scope name is not container or pod.
    #[error("unknown scope: {0:?} (expected container or pod)")]
    UnknownScope(String),
    /// An option name the Topology Manager does not have.
    #[error("unknown Topology Manager Policy option: {0:?} (known: prefer-closest-numa-nodes, max-allowable-numa-nodes)")]
    UnknownOption(String),
    /// A boolean option with a value that is not a boolean.
    #[error("bad value for option {name:?}: {value:?} is not a boolean (use true or false)")]
    BadBool {
        /// Option name.
        name: String,
        /// The value given.
        value: String,
    },
    /// An integer option with a value that is not an integer.
    #[error("unable to convert policy option to integer {name:?}: {value:?} is not an integer")]
    BadInt {
        /// Option name.
        name: String,
        /// The value given.
        value: String,
    },
    /// `max-allowable-numa-nodes` below 8.
    #[error("the minimum value of {name:?} should not be less than {min} (got {value})")]
    BelowMinimum {
        /// Option name.
        name: String,
        /// The floor.
        min: i64,
        /// The value given.
        value: i64,
    },
    /// The machine has more NUMA nodes than the policy allows.
    #[error("unsupported on machines with more than {max} NUMA Nodes (this machine has {nodes}; raise max-allowable-numa-nodes, up to 64)")]
    TooManyNodes {
        /// The allowed maximum.
        max: i64,
        /// The machine's node count.
        nodes: usize,
    },
    /// Bad NUMA node list or distance table.
    #[error("invalid NUMA information: {0}")]
    InvalidNuma(String),
}

/// One of the four Topology Manager policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyName {
    /// No alignment; every pod is admitted.
    None,
    /// Align where possible; always admit.
    BestEffort,
    /// Admit only when the merged hint is preferred.
    Restricted,
    /// Admit only when everything fits on one NUMA node.
    SingleNumaNode,
}

impl PolicyName {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::None => "none",
            PolicyName::BestEffort => "best-effort",
            PolicyName::Restricted => "restricted",
            PolicyName::SingleNumaNode => "single-numa-node",
        }
    }
}

impl FromStr for PolicyName {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, PolicyError> {
        Ok(match s {
            "none" => PolicyName::None,
            "best-effort" => PolicyName::BestEffort,
            "restricted" => PolicyName::Restricted,
            "single-numa-node" => PolicyName::SingleNumaNode,
            _ => return Err(PolicyError::UnknownPolicy(s.to_string())),
        })
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Alignment scope: each container on its own, or the whole pod at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Align each container in turn (init containers first).
    Container,
    /// Align the pod's effective requests once, for all containers.
    Pod,
}

impl FromStr for Scope {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, PolicyError> {
        match s {
            "container" => Ok(Scope::Container),
            "pod" => Ok(Scope::Pod),
            _ => Err(PolicyError::UnknownScope(s.to_string())),
        }
    }
}

impl Scope {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Container => "container",
            Scope::Pod => "pod",
        }
    }
}

/// Parsed policy options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyOptions {
    /// `prefer-closest-numa-nodes`.
    pub prefer_closest_numa: bool,
    /// `max-allowable-numa-nodes`.
    pub max_allowable_numa_nodes: i64,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        PolicyOptions {
            prefer_closest_numa: false,
            max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
        }
    }
}

impl PolicyOptions {
    /// Validate options the way the kubelet does (names, booleans, integers,
    /// the floor of 8), checked in name order.
    pub fn parse(options: &BTreeMap<String, String>) -> Result<Self, PolicyError> {
        let mut opts = PolicyOptions::default();
        for (name, value) in options {
            match name.as_str() {
                PREFER_CLOSEST_NUMA_NODES => {
                    opts.prefer_closest_numa =
                        parse_go_bool(value).ok_or_else(|| PolicyError::BadBool {
                            name: name.clone(),
                            value: value.clone(),
                        })?;
                }
                MAX_ALLOWABLE_NUMA_NODES => {
                    let v: i64 = value.parse().map_err(|_| PolicyError::BadInt {
                        name: name.clone(),
                        value: value.clone(),
                    })?;
                    if v < MIN_MAX_ALLOWABLE_NUMA_NODES {
                        return Err(PolicyError::BelowMinimum {
                            name: name.clone(),
                            min: MIN_MAX_ALLOWABLE_NUMA_NODES,
                            value: v,
                        });
                    }
                    opts.max_allowable_numa_nodes = v;
                }
                _ => return Err(PolicyError::UnknownOption(name.clone())),
            }
        }
        Ok(opts)
    }
}

/// The machine's NUMA nodes and (optionally) their distance table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaInfo {
    nodes: Vec<u32>,
    mask: NumaMask,
    positions: NodePositions,
    /// `distances[i][j]`: distance from `nodes[i]` to `nodes[j]`.
    distances: Option<Vec<Vec<u64>>>,
}

impl NumaInfo {
    /// NUMA information from node ids (any order, no duplicates) and an
    /// optional distance table whose rows and columns follow `nodes`.
    pub fn new(nodes: Vec<u32>, distances: Option<Vec<Vec<u64>>>) -> Result<Self, PolicyError> {
        let mut mask = NumaMask::EMPTY;
        for &n in &nodes {
            let id = NumaNodeId::new(n).map_err(|e| PolicyError::InvalidNuma(e.to_string()))?;
            if mask.is_set(id) {
                return Err(PolicyError::InvalidNuma(format!(
                    "NUMA node {n} is listed twice"
                )));
            }
            mask.insert(id);
        }
        let positions =
            NodePositions::new(mask).map_err(|e| PolicyError::InvalidNuma(e.to_string()))?;
        if let Some(rows) = &distances {
            if rows.len() != nodes.len() {
                return Err(PolicyError::InvalidNuma(format!(
                    "distance table has {} rows for {} NUMA nodes",
                    rows.len(),
                    nodes.len()
                )));
            }
            for (i, row) in rows.iter().enumerate() {
                if row.len() != nodes.len() {
                    return Err(PolicyError::InvalidNuma(format!(
                        "distance row of node {} has {} entries, expected {}",
                        nodes[i],
                        row.len(),
                        nodes.len()
                    )));
                }
            }
        }
        Ok(NumaInfo {
            nodes,
            mask,
            positions,
            distances,
        })
    }

    /// NUMA information of a discovered machine (distances from sysfs).
    pub fn from_machine(machine: &topomgr_sdk::Machine) -> Result<Self, PolicyError> {
        let nodes = machine.numa_ids();
        let complete = machine
            .numa_nodes
            .iter()
            .all(|n| nodes.iter().all(|id| n.distances.contains_key(id)));
        let distances = complete.then(|| {
            machine
                .numa_nodes
                .iter()
                .map(|n| nodes.iter().map(|id| u64::from(n.distances[id])).collect())
                .collect()
        });
        NumaInfo::new(nodes.into_iter().map(u32::from).collect(), distances)
    }

    /// True when a distance table is known.
    pub fn has_distances(&self) -> bool {
        self.distances.is_some()
    }

    /// Node ids in the order given.
    pub fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    /// All nodes as a mask (the kubelet's default affinity).
    pub fn default_mask(&self) -> NumaMask {
        self.mask
    }

    /// The nodes' positions, for 64-bit masks over the present nodes.
    pub fn positions(&self) -> &NodePositions {
        &self.positions
    }

    fn position(&self, node: NumaNodeId) -> Option<usize> {
        self.nodes.iter().position(|&n| node == n)
    }

    /// Average distance over all ordered pairs of nodes in `mask` (self pairs
    /// included), summed in the kubelet's order; `None` without a table.
    pub fn average_distance(&self, mask: NumaMask) -> Option<f64> {
        let rows = self.distances.as_ref()?;
        if mask.is_empty() {
            return Some(0.0);
        }
        let pos: Vec<usize> = mask.iter().filter_map(|n| self.position(n)).collect();
        let mut sum = 0f64;
        let mut count = 0f64;
        for &a in &pos {
            for &b in &pos {
                sum += rows[a][b] as f64;
                count += 1.0;
            }
        }
        Some(sum / count)
    }
}

/// The result of a policy decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The merged hint handed to every provider's `allocate`.
    pub hint: TopologyHint,
    /// Whether the policy admits the workload.
    pub admit: bool,
}

/// A Topology Manager policy bound to one machine.
#[derive(Debug, Clone)]
pub struct Policy {
    name: PolicyName,
    options: PolicyOptions,
    numa: NumaInfo,
}

impl Policy {
    /// Create a policy the way the kubelet's manager does: validate options,
    /// then refuse machines with more NUMA nodes than allowed (except `none`).
    pub fn new(
        name: &str,
        options: &BTreeMap<String, String>,
        numa: NumaInfo,
    ) -> Result<Self, PolicyError> {
        let options = PolicyOptions::parse(options)?;
        let name: PolicyName = name.parse()?;
        if name != PolicyName::None && numa.nodes.len() as i64 > options.max_allowable_numa_nodes {
            return Err(PolicyError::TooManyNodes {
                max: options.max_allowable_numa_nodes,
                nodes: numa.nodes.len(),
            });
        }
        Ok(Policy {
            name,
            options,
            numa,
        })
    }

    /// The policy's name.
    pub fn name(&self) -> PolicyName {
        self.name
    }

    /// The parsed options.
    pub fn options(&self) -> PolicyOptions {
        self.options
    }

    /// The machine's NUMA information.
    pub fn numa(&self) -> &NumaInfo {
        &self.numa
    }

    /// Merge the providers' hints and decide admission. Each provider is
    /// given with a name used in errors (hints naming unknown nodes are refused).
    pub fn decide(&self, providers: &[(&str, &ProviderHints)]) -> Result<Decision, MergeError> {
        Ok(self.decide_traced(providers)?.0)
    }

    /// [`Policy::decide`] plus the merge's explanation.
    pub fn decide_traced(
        &self,
        providers: &[(&str, &ProviderHints)],
    ) -> Result<(Decision, Option<MergeOutcome>), MergeError> {
        merge::validate(&self.numa, providers)?;
        if self.name == PolicyName::None {
            return Ok((
                Decision {
                    hint: TopologyHint {
                        affinity: None,
                        preferred: false,
                    },
                    admit: true,
                },
                None,
            ));
        }
        let single = self.name == PolicyName::SingleNumaNode;
        let hints: Vec<&ProviderHints> = providers.iter().map(|(_, h)| *h).collect();
        let outcome = merge::merge(
            &self.numa,
            &hints,
            merge::MergeMode {
                single_numa_node: single,
                prefer_closest: self.options.prefer_closest_numa && !single,
            },
        );
        let mut hint = outcome.hint;
        if single && hint.affinity == Some(self.numa.default_mask()) {
            hint.affinity = None;
        }
        let admit = match self.name {
            PolicyName::BestEffort => true,
            _ => hint.preferred,
        };
        Ok((Decision { hint, admit }, Some(outcome)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn option_validation_matches_the_kubelet() {
        assert_eq!(
            PolicyOptions::parse(&opts(&[])).unwrap(),
            PolicyOptions::default()
        );
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert!(
                PolicyOptions::parse(&opts(&[(PREFER_CLOSEST_NUMA_NODES, t)]))
                    .unwrap()
                    .prefer_closest_numa
            );
        }
        assert_eq!(
            PolicyOptions::parse(&opts(&[(PREFER_CLOSEST_NUMA_NODES, "yes")]))
                .unwrap_err()
                .to_string(),
            "bad value for option \"prefer-closest-numa-nodes\": \"yes\" is not a boolean (use true or false)"
        );
        assert_eq!(
            PolicyOptions::parse(&opts(&[("prefer-foo", "true")]))
                .unwrap_err()
                .to_string(),
            "unknown Topology Manager Policy option: \"prefer-foo\" (known: prefer-closest-numa-nodes, max-allowable-numa-nodes)"
        );
        assert_eq!(
            PolicyOptions::parse(&opts(&[(MAX_ALLOWABLE_NUMA_NODES, "7")]))
                .unwrap_err()
                .to_string(),
            "the minimum value of \"max-allowable-numa-nodes\" should not be less than 8 (got 7)"
        );
        assert!(matches!(
            PolicyOptions::parse(&opts(&[(MAX_ALLOWABLE_NUMA_NODES, "8x")])),
            Err(PolicyError::BadInt { .. })
        ));
        assert_eq!(
            PolicyOptions::parse(&opts(&[(MAX_ALLOWABLE_NUMA_NODES, "+12")]))
                .unwrap()
                .max_allowable_numa_nodes,
            12
        );
    }

    #[test]
    fn too_many_nodes_for_the_limit() {
        let numa = NumaInfo::new((0..9).collect(), None).unwrap();
        let err = Policy::new(
            "restricted",
            &opts(&[(MAX_ALLOWABLE_NUMA_NODES, "8")]),
            numa.clone(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported on machines with more than 8 NUMA Nodes (this machine has 9; raise max-allowable-numa-nodes, up to 64)"
        );
        // `none` never checks, and the default limit is 64.
        assert!(Policy::new(
            "none",
            &opts(&[(MAX_ALLOWABLE_NUMA_NODES, "8")]),
            numa.clone()
        )
        .is_ok());
        assert!(Policy::new("restricted", &opts(&[]), numa).is_ok());
        assert_eq!(
            Policy::new("strict", &opts(&[]), NumaInfo::new(vec![0], None).unwrap())
                .unwrap_err()
                .to_string(),
            "unknown policy: \"strict\" (expected none, best-effort, restricted or single-numa-node)"
        );
    }

    #[test]
    fn average_distance_uses_row_positions() {
        // Sparse ids 0 and 4: the kubelet would index row[4] and crash.
        let numa = NumaInfo::new(vec![0, 4], Some(vec![vec![10, 21], vec![21, 10]])).unwrap();
        let m = NumaMask::from_nodes([0, 4]).unwrap();
        assert_eq!(numa.average_distance(m), Some(15.5));
        assert_eq!(
            numa.average_distance(NumaMask::single(NumaNodeId::from(4))),
            Some(10.0)
        );
    }
}
