//! Topology Manager policies, scopes and options, with the kubelet's semantics.
//!
//! A [`Policy`] is created once from the configured name, options and the
//! machine's NUMA nodes ([`NumaInfo`]); [`Policy::decide`] turns the hints of
//! all providers into the merged hint and the admit decision. The merge itself
//! lives in [`crate::merge`].
//!
//! # Creation, in the kubelet's order
//!
//! [`Policy::create`] follows the kubelet's `NewManager`
//! (`pkg/kubelet/cm/topologymanager/topology_manager.go`):
//!
//! 1. Policy `none` is created at once: its options, NUMA nodes and scope are
//!    never looked at (invalid options are only logged as a warning).
//! 2. The options are validated (`PolicyOptions::parse`).
//! 3. The NUMA information is checked: with `prefer-closest-numa-nodes` true,
//!    a missing distance table is an error, for every policy
//!    (`single-numa-node` included, although it never ranks by distance).
//! 4. A machine with more NUMA nodes than `max-allowable-numa-nodes` is refused.
//!
//! `numa-allocation-strategy` (KEP-6007, kubernetes/kubernetes #142226) is
//! validated with the other options; its semantics are in
//! [`crate::strategy`].
//! 5. Only then is an unknown policy name an error, and after it an unknown scope.
//!
//! Deliberate differences from the kubelet (documented in ARCHITECTURE.md):
//! - `max-allowable-numa-nodes` defaults to 64, not 8, because topomgr's merge
//!   does not enumerate the cross product of hints; 64 is also the hard limit.
//! - NUMA distances are looked up by the node's *position* in the distance
//!   row, so machines with non-contiguous node ids work.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use topomgr_sdk::{parse_go_bool, ProviderHints, TopologyHint, MAX_NUMA_NODES};

use crate::merge::{self, MergeError, MergeOutcome};
use crate::numa::{NumaError, NumaInfo};
use crate::strategy::{AllocationStrategy, Occupancy};

/// Option name: prefer the set of NUMA nodes with the smallest average distance.
pub(crate) const PREFER_CLOSEST_NUMA_NODES: &str = "prefer-closest-numa-nodes";
/// Option name: the largest number of NUMA nodes the policy accepts.
pub(crate) const MAX_ALLOWABLE_NUMA_NODES: &str = "max-allowable-numa-nodes";
/// Option name: how to choose among equally good hints (KEP-6007).
pub(crate) const NUMA_ALLOCATION_STRATEGY: &str = "numa-allocation-strategy";
/// The kubelet's floor for `max-allowable-numa-nodes`.
pub(crate) const MIN_MAX_ALLOWABLE_NUMA_NODES: i64 = 8;
/// topomgr's default `max-allowable-numa-nodes` (the kubelet's is 8).
pub(crate) const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: i64 = MAX_NUMA_NODES as i64;

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
    #[error("unknown Topology Manager Policy option: {0:?} (known: prefer-closest-numa-nodes, max-allowable-numa-nodes, numa-allocation-strategy)")]
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
    /// `numa-allocation-strategy` with a value that is not a strategy.
    #[error("bad value for option {name:?}: {value:?} (expected {allowed})", allowed = AllocationStrategy::ALLOWED)]
    BadStrategy {
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
    #[error(transparent)]
    InvalidNuma(#[from] NumaError),
    /// `prefer-closest-numa-nodes` is true but the NUMA distances are unknown.
    #[error(
        "prefer-closest-numa-nodes needs the NUMA distance table and there is none \
         (sysfs nodeN/distance files, or \"distances\" in merge input); provide it or set the option to false"
    )]
    MissingDistances,
}

/// One of the four Topology Manager policies (serialized as the
/// configuration spelling, [`PolicyName::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
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

/// Alignment scope: each container on its own, or the whole pod at once
/// (serialized as the configuration spelling, [`Scope::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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
pub(crate) struct PolicyOptions {
    /// `prefer-closest-numa-nodes`.
    pub prefer_closest_numa: bool,
    /// `max-allowable-numa-nodes`.
    pub max_allowable_numa_nodes: i64,
    /// `numa-allocation-strategy`.
    pub allocation_strategy: AllocationStrategy,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        PolicyOptions {
            prefer_closest_numa: false,
            max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
            allocation_strategy: AllocationStrategy::LowestIndex,
        }
    }
}

impl PolicyOptions {
    /// Validate options the way the kubelet does (names, booleans, integers,
    /// the floor of 8), checked in name order.
    pub(crate) fn parse(options: &BTreeMap<String, String>) -> Result<Self, PolicyError> {
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
                NUMA_ALLOCATION_STRATEGY => {
                    opts.allocation_strategy =
                        AllocationStrategy::parse(value).ok_or_else(|| {
                            PolicyError::BadStrategy {
                                name: name.clone(),
                                value: value.clone(),
                            }
                        })?;
                }
                _ => return Err(PolicyError::UnknownOption(name.clone())),
            }
        }
        Ok(opts)
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
    /// Create a policy and check a scope name the way the kubelet's
    /// `NewManager` does, in its order (see the module documentation).
    /// Policy `none` ignores `scope` and `options` (the scope returned is
    /// [`Scope::Container`]; it is never used).
    pub fn create(
        name: &str,
        scope: &str,
        options: &BTreeMap<String, String>,
        numa: NumaInfo,
    ) -> Result<(Self, Scope), PolicyError> {
        if name == PolicyName::None.as_str() {
            return Ok((Policy::none(options, numa), Scope::Container));
        }
        let policy = Policy::new(name, options, numa)?;
        let scope = scope.parse()?;
        Ok((policy, scope))
    }

    /// [`Policy::create`] without the scope: `none` at once, then options,
    /// NUMA information, the node limit, and the policy name.
    pub fn new(
        name: &str,
        options: &BTreeMap<String, String>,
        numa: NumaInfo,
    ) -> Result<Self, PolicyError> {
        if name == PolicyName::None.as_str() {
            return Ok(Policy::none(options, numa));
        }
        let options = PolicyOptions::parse(options)?;
        if options.prefer_closest_numa && !numa.has_distances() {
            return Err(PolicyError::MissingDistances);
        }
        if numa.nodes().len() as i64 > options.max_allowable_numa_nodes {
            return Err(PolicyError::TooManyNodes {
                max: options.max_allowable_numa_nodes,
                nodes: numa.nodes().len(),
            });
        }
        let name: PolicyName = name.parse()?;
        Ok(Policy {
            name,
            options,
            numa,
        })
    }

    /// Policy `none`: its options are not used (a bad one is only logged)
    /// and the NUMA information is not checked, as in the kubelet.
    fn none(options: &BTreeMap<String, String>, numa: NumaInfo) -> Self {
        if let Err(e) = PolicyOptions::parse(options) {
            tracing::warn!(error = %e, "policy none ignores its options; the other policies would refuse this one");
        }
        Policy {
            name: PolicyName::None,
            options: PolicyOptions::default(),
            numa,
        }
    }

    /// The policy's name.
    pub fn name(&self) -> PolicyName {
        self.name
    }

    /// The parsed options.
    #[cfg(test)]
    fn options(&self) -> PolicyOptions {
        self.options
    }

    /// The machine's NUMA information.
    pub fn numa(&self) -> &NumaInfo {
        &self.numa
    }

    /// `numa-allocation-strategy` (always `lowest-index` under `none`).
    pub fn allocation_strategy(&self) -> AllocationStrategy {
        self.options.allocation_strategy
    }

    /// Merge the providers' hints and decide admission. Each provider is
    /// given with a name used in errors (hints naming unknown nodes are
    /// refused). No allocation state: under a strategy other than
    /// `lowest-index` every mask is unscored, so it decides as
    /// `lowest-index` (see [`Policy::decide_with`]).
    pub fn decide(&self, providers: &[(&str, &ProviderHints)]) -> Result<Decision, MergeError> {
        Ok(self.decide_traced(providers, None)?.0)
    }

    /// [`Policy::decide`], breaking ties among equally good masks by the
    /// allocation strategy over `occupancy` (what the contended resources
    /// have allocatable and available per NUMA node).
    pub fn decide_with(
        &self,
        providers: &[(&str, &ProviderHints)],
        occupancy: &Occupancy,
    ) -> Result<Decision, MergeError> {
        Ok(self.decide_traced(providers, Some(occupancy))?.0)
    }

    /// [`Policy::decide_with`] plus the merge's explanation.
    pub(crate) fn decide_traced(
        &self,
        providers: &[(&str, &ProviderHints)],
        occupancy: Option<&Occupancy>,
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
        let outcome = merge::merge_with(
            &self.numa,
            &hints,
            merge::MergeMode {
                single_numa_node: single,
                prefer_closest: self.options.prefer_closest_numa && !single,
                strategy: self.options.allocation_strategy,
            },
            occupancy,
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
    use topomgr_sdk::{NumaMask, NumaNodeId};

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
            "unknown Topology Manager Policy option: \"prefer-foo\" (known: prefer-closest-numa-nodes, max-allowable-numa-nodes, numa-allocation-strategy)"
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

    /// Ported from the kubelet's `TestNewManager` and `TestManagerScope`
    /// (`topology_manager_test.go`): which names, options and machines
    /// create a manager, and the error each refusal names.
    #[test]
    fn creation_table_from_the_kubelet() {
        let two = || NumaInfo::new(vec![0, 1], None).unwrap();
        let nine = || NumaInfo::new((0..9).collect(), None).unwrap();
        type Case<'a> = (
            &'a str,
            &'a str,
            &'a [(&'a str, &'a str)],
            NumaInfo,
            Result<&'a str, &'a str>,
        );
        let cases: &[Case] = &[
            ("none", "container", &[], two(), Ok("none")),
            ("best-effort", "container", &[], two(), Ok("best-effort")),
            ("restricted", "container", &[], two(), Ok("restricted")),
            (
                "single-numa-node",
                "container",
                &[],
                two(),
                Ok("single-numa-node"),
            ),
            (
                "unknown",
                "container",
                &[],
                two(),
                Err("unknown policy: \"unknown\""),
            ),
            (
                "best-effort",
                "container",
                &[("unknown-option", "true")],
                two(),
                Err("unknown Topology Manager Policy option:"),
            ),
            (
                "restricted",
                "container",
                &[("unknown-option", "true")],
                two(),
                Err("unknown Topology Manager Policy option:"),
            ),
            // "can't get NUMA distances": prefer-closest-numa-nodes without a table.
            (
                "best-effort",
                "container",
                &[(PREFER_CLOSEST_NUMA_NODES, "true")],
                NumaInfo::new(vec![0], None).unwrap(),
                Err("prefer-closest-numa-nodes needs the NUMA distance table"),
            ),
            // "more than 8 NUMA nodes" (topomgr's default limit is 64: set 8).
            (
                "best-effort",
                "container",
                &[(MAX_ALLOWABLE_NUMA_NODES, "8")],
                nine(),
                Err("unsupported on machines with more than 8 NUMA Nodes"),
            ),
            // TestManagerScope.
            ("best-effort", "pod", &[], two(), Ok("best-effort")),
            (
                "best-effort",
                "unknown",
                &[],
                two(),
                Err("unknown scope: \"unknown\""),
            ),
        ];
        for (name, scope, options, numa, want) in cases {
            let got = Policy::create(name, scope, &opts(options), numa.clone());
            match (got, want) {
                (Ok((p, _)), Ok(want)) => {
                    assert_eq!(p.name().as_str(), *want, "{name} {options:?}")
                }
                (Err(e), Err(want)) => {
                    assert!(e.to_string().starts_with(want), "{name} {options:?}: {e}")
                }
                (got, want) => panic!("{name} {scope} {options:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn none_is_created_without_looking_at_options_nodes_or_scope() {
        let nine = NumaInfo::new((0..9).collect(), None).unwrap();
        for bad in [
            &[("unknown-option", "x")][..],
            &[(PREFER_CLOSEST_NUMA_NODES, "yes")],
            &[(MAX_ALLOWABLE_NUMA_NODES, "7")],
            &[
                (PREFER_CLOSEST_NUMA_NODES, "true"),
                (MAX_ALLOWABLE_NUMA_NODES, "8"),
            ],
        ] {
            let (p, scope) = Policy::create("none", "bogus", &opts(bad), nine.clone())
                .unwrap_or_else(|e| panic!("{bad:?}: {e}"));
            assert_eq!(p.name(), PolicyName::None);
            assert_eq!(scope, Scope::Container);
            assert_eq!(p.options(), PolicyOptions::default());
        }
    }

    #[test]
    fn prefer_closest_without_distances_is_an_error_for_every_other_policy() {
        let no_table = NumaInfo::new(vec![0, 1], None).unwrap();
        let table = NumaInfo::new(vec![0, 1], Some(vec![vec![10, 20], vec![20, 10]])).unwrap();
        for name in ["best-effort", "restricted", "single-numa-node", "strict"] {
            let e = Policy::new(
                name,
                &opts(&[(PREFER_CLOSEST_NUMA_NODES, "true")]),
                no_table.clone(),
            )
            .unwrap_err();
            assert_eq!(e, PolicyError::MissingDistances, "{name}");
            // The option false, or a table: no distance error.
            let off = Policy::new(
                name,
                &opts(&[(PREFER_CLOSEST_NUMA_NODES, "false")]),
                no_table.clone(),
            );
            let with = Policy::new(
                name,
                &opts(&[(PREFER_CLOSEST_NUMA_NODES, "true")]),
                table.clone(),
            );
            if name == "strict" {
                assert!(matches!(off, Err(PolicyError::UnknownPolicy(_))));
                assert!(matches!(with, Err(PolicyError::UnknownPolicy(_))));
            } else {
                assert!(off.is_ok() && with.is_ok(), "{name}");
            }
        }
        assert_eq!(
            PolicyError::MissingDistances.to_string(),
            "prefer-closest-numa-nodes needs the NUMA distance table and there is none \
             (sysfs nodeN/distance files, or \"distances\" in merge input); provide it or set the option to false"
        );
    }

    /// The kubelet's order of checks: options, then NUMA information, then
    /// the node limit, and only then the policy name and the scope.
    #[test]
    fn order_of_checks() {
        let nine = NumaInfo::new((0..9).collect(), None).unwrap();
        let e = |name: &str, scope: &str, o: &[(&str, &str)], n: &NumaInfo| {
            Policy::create(name, scope, &opts(o), n.clone()).unwrap_err()
        };
        assert!(matches!(
            e("strict", "bogus", &[("x", "1")], &nine),
            PolicyError::UnknownOption(_)
        ));
        assert_eq!(
            e(
                "strict",
                "bogus",
                &[(PREFER_CLOSEST_NUMA_NODES, "true")],
                &nine
            ),
            PolicyError::MissingDistances
        );
        assert!(matches!(
            e("strict", "bogus", &[(MAX_ALLOWABLE_NUMA_NODES, "8")], &nine),
            PolicyError::TooManyNodes { .. }
        ));
        assert!(matches!(
            e("strict", "bogus", &[], &nine),
            PolicyError::UnknownPolicy(_)
        ));
        assert!(matches!(
            e("restricted", "bogus", &[], &nine),
            PolicyError::UnknownScope(_)
        ));
    }

    /// Ported from the kubelet's `TestNUMAInfo` (`numa_info_test.go`): with
    /// `prefer-closest-numa-nodes` a policy needs every node's distances; without
    /// it they are not needed. topomgr's rows list the given nodes only, so the
    /// kubelet's 4-column rows are cut to the nodes of each case.
    #[test]
    fn numa_info_table_from_the_kubelet() {
        type Case = (&'static str, Vec<u32>, Option<Vec<Vec<u64>>>, bool, bool);
        let cases: Vec<Case> = vec![
            ("positive test 1 node", vec![0], None, false, true),
            (
                "positive test 1 node, with PreferClosestNUMA",
                vec![0],
                Some(vec![vec![10]]),
                true,
                true,
            ),
            ("positive test 2 nodes", vec![0, 1], None, false, true),
            (
                "positive test 2 nodes, with PreferClosestNUMA",
                vec![0, 1],
                Some(vec![vec![10, 11], vec![11, 10]]),
                true,
                true,
            ),
            ("positive test 3 nodes", vec![0, 1, 2], None, false, true),
            (
                "positive test 3 nodes, with PreferClosestNUMA",
                vec![0, 1, 2],
                Some(vec![vec![10, 11, 12], vec![11, 10, 12], vec![12, 12, 10]]),
                true,
                true,
            ),
            ("positive test 4 nodes", vec![0, 1, 2, 3], None, false, true),
            (
                "positive test 4 nodes, with PreferClosestNUMA",
                vec![0, 1, 2, 3],
                Some(vec![
                    vec![10, 11, 12, 12],
                    vec![11, 10, 12, 12],
                    vec![12, 12, 10, 11],
                    vec![12, 12, 11, 10],
                ]),
                true,
                true,
            ),
            (
                "negative test 1 node, no distance file with PreferClosestNUMA",
                vec![9],
                None,
                true,
                false,
            ),
            ("one node and its id is 1", vec![1], None, false, true),
            (
                "one node and its id is 1, with PreferClosestNUMA",
                vec![1],
                Some(vec![vec![10]]),
                true,
                true,
            ),
            (
                "two nodes not sequential",
                vec![0, 2],
                Some(vec![vec![10, 12], vec![12, 10]]),
                false,
                true,
            ),
            (
                "two nodes not sequential, with PreferClosestNUMA",
                vec![0, 2],
                Some(vec![vec![10, 12], vec![12, 10]]),
                true,
                true,
            ),
        ];
        for (name, nodes, distances, prefer, ok) in cases {
            let numa = NumaInfo::new(nodes.clone(), distances).unwrap();
            assert_eq!(numa.nodes(), &nodes[..], "{name}");
            let o = opts(&[(
                PREFER_CLOSEST_NUMA_NODES,
                if prefer { "true" } else { "false" },
            )]);
            let got = Policy::new("best-effort", &o, numa);
            assert_eq!(got.is_ok(), ok, "{name}: {got:?}");
        }
    }

    /// Ported from the kubelet's `TestCalculateAvgDistanceFor`.
    #[test]
    fn average_distance_table_from_the_kubelet() {
        let four = vec![
            vec![10, 11, 12, 12],
            vec![11, 10, 12, 12],
            vec![12, 12, 10, 11],
            vec![12, 12, 11, 10],
        ];
        type Case<'a> = (Vec<u32>, Vec<Vec<u64>>, &'a [u32], f64);
        let cases: &[Case] = &[
            (vec![0], vec![vec![10]], &[0], 10.0),
            (vec![0, 1], vec![vec![10, 11], vec![11, 10]], &[0], 10.0),
            (vec![0, 1], vec![vec![10, 11], vec![11, 10]], &[0, 1], 10.5),
            (vec![0, 1, 2, 3], four.clone(), &[0, 2], 11.0),
            (
                vec![0, 1, 2, 3],
                four.clone(),
                &[0, 2, 3],
                11.11111111111111,
            ),
            (vec![], vec![], &[], 0.0),
        ];
        for (nodes, rows, mask, want) in cases {
            let numa = NumaInfo::new(nodes.clone(), Some(rows.clone())).unwrap();
            let mask = NumaMask::from_nodes(mask.iter().copied()).unwrap();
            assert_eq!(numa.average_distance(mask), Some(*want), "{mask:?}");
        }
    }

    /// Ported from the kubelet's `TestNewTopologyManagerOptions` and
    /// `TestPolicyDefaultsAvailable` (`policy_options_test.go`); the feature
    /// gate cases do not apply (both options are GA).
    #[test]
    fn options_table_from_the_kubelet() {
        let ok = |o: &[(&str, &str)], closest: bool, max: i64| {
            assert_eq!(
                PolicyOptions::parse(&opts(o)).unwrap(),
                PolicyOptions {
                    prefer_closest_numa: closest,
                    max_allowable_numa_nodes: max,
                    allocation_strategy: AllocationStrategy::LowestIndex,
                },
                "{o:?}"
            );
        };
        ok(
            &[
                (PREFER_CLOSEST_NUMA_NODES, "true"),
                (MAX_ALLOWABLE_NUMA_NODES, "8"),
            ],
            true,
            8,
        );
        ok(&[(MAX_ALLOWABLE_NUMA_NODES, "12")], false, 12);
        ok(&[], false, DEFAULT_MAX_ALLOWABLE_NUMA_NODES);
        let err = |o: &[(&str, &str)], want: &str| {
            let e = PolicyOptions::parse(&opts(o)).unwrap_err().to_string();
            assert!(e.starts_with(want), "{o:?}: {e}");
        };
        err(
            &[(PREFER_CLOSEST_NUMA_NODES, "not a boolean")],
            "bad value for option",
        );
        err(
            &[(MAX_ALLOWABLE_NUMA_NODES, "can't parse to int")],
            "unable to convert policy option to integer",
        );
        err(
            &[("this-option-does-not-exist", "true")],
            "unknown Topology Manager Policy option",
        );
    }

    #[test]
    fn numa_allocation_strategy_is_parsed_and_unknown_values_are_refused() {
        for (value, want) in [
            ("lowest-index", AllocationStrategy::LowestIndex),
            ("none", AllocationStrategy::LowestIndex),
            ("most-allocated", AllocationStrategy::MostAllocated),
            ("least-allocated", AllocationStrategy::LeastAllocated),
        ] {
            let o = PolicyOptions::parse(&opts(&[(NUMA_ALLOCATION_STRATEGY, value)])).unwrap();
            assert_eq!(o.allocation_strategy, want, "{value}");
        }
        assert_eq!(
            PolicyOptions::default().allocation_strategy,
            AllocationStrategy::LowestIndex
        );
        let e = Policy::new(
            "single-numa-node",
            &opts(&[(NUMA_ALLOCATION_STRATEGY, "packed")]),
            NumaInfo::new(vec![0, 1], None).unwrap(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad value for option \"numa-allocation-strategy\": \"packed\" (expected \
             lowest-index, most-allocated or least-allocated (none is accepted as upstream's \
             spelling of lowest-index))"
        );
        // `none` ignores it, as every option.
        let p = Policy::new(
            "none",
            &opts(&[(NUMA_ALLOCATION_STRATEGY, "packed")]),
            NumaInfo::new(vec![0, 1], None).unwrap(),
        )
        .unwrap();
        assert_eq!(p.allocation_strategy(), AllocationStrategy::LowestIndex);
    }

    /// The allocation strategy on hand-made machines whose answer is known.
    mod strategy {
        use super::*;
        use crate::strategy::Occupancy;
        use topomgr_sdk::{CompactHints, HintSet};

        fn mask(nodes: &[u32]) -> NumaMask {
            NumaMask::from_nodes(nodes.iter().map(|&n| i64::from(n))).unwrap()
        }
        fn hints(resource: &str, list: &[(&[u32], bool)]) -> ProviderHints {
            Some(BTreeMap::from([(
                resource.to_string(),
                Some(HintSet::Explicit(
                    list.iter()
                        .map(|(n, p)| TopologyHint::new(mask(n), *p))
                        .collect(),
                )),
            )]))
        }
        /// `cpu` with 16 allocatable CPUs per node and `used[i]` of node i taken.
        fn cpus_used(used: &[u64]) -> Occupancy {
            let mut o = Occupancy::new();
            o.add(
                "cpu",
                used.iter()
                    .enumerate()
                    .map(|(n, u)| (NumaNodeId::from(n as u8), 16_000, 16_000 - u * 1000)),
            );
            o
        }
        fn decide(
            policy: &str,
            options: &[(&str, &str)],
            numa: NumaInfo,
            providers: &[&ProviderHints],
            occupancy: &Occupancy,
        ) -> Decision {
            let p = Policy::new(policy, &opts(options), numa).unwrap();
            let named: Vec<(&str, &ProviderHints)> = providers.iter().map(|h| ("p", *h)).collect();
            p.decide_with(&named, occupancy).unwrap()
        }
        fn each_strategy(
            policy: &str,
            extra: &[(&str, &str)],
            numa: &NumaInfo,
            providers: &[&ProviderHints],
            occupancy: &Occupancy,
        ) -> [Decision; 3] {
            ["lowest-index", "most-allocated", "least-allocated"].map(|s| {
                let mut o = extra.to_vec();
                o.push((NUMA_ALLOCATION_STRATEGY, s));
                decide(policy, &o, numa.clone(), providers, occupancy)
            })
        }

        #[test]
        fn two_nodes_pack_and_spread() {
            let numa = NumaInfo::new(vec![0, 1], None).unwrap();
            let cpu = hints("cpu", &[(&[0], true), (&[1], true), (&[0, 1], false)]);
            for policy in ["single-numa-node", "restricted", "best-effort"] {
                // Node 1 is the busier: packing moves off the lowest index.
                let [low, most, least] =
                    each_strategy(policy, &[], &numa, &[&cpu], &cpus_used(&[2, 10]));
                assert_eq!(low.hint, TopologyHint::new(mask(&[0]), true), "{policy}");
                assert_eq!(most.hint, TopologyHint::new(mask(&[1]), true), "{policy}");
                assert_eq!(least.hint, TopologyHint::new(mask(&[0]), true), "{policy}");
                // Node 0 is the busier: spreading does.
                let [low, most, least] =
                    each_strategy(policy, &[], &numa, &[&cpu], &cpus_used(&[10, 2]));
                assert_eq!(low.hint.affinity, Some(mask(&[0])), "{policy}");
                assert_eq!(most.hint.affinity, Some(mask(&[0])), "{policy}");
                assert_eq!(least.hint.affinity, Some(mask(&[1])), "{policy}");
                // Equal scores: the lowest index.
                for d in each_strategy(policy, &[], &numa, &[&cpu], &cpus_used(&[4, 4])) {
                    assert_eq!(d.hint.affinity, Some(mask(&[0])), "{policy}");
                }
            }
        }

        #[test]
        fn four_nodes_single_numa_node_among_the_nodes_that_fit() {
            let numa = NumaInfo::new(vec![0, 1, 2, 3], None).unwrap();
            // Node 0 cannot hold the request; 1, 2 and 3 can.
            let cpu = hints(
                "cpu",
                &[(&[1], true), (&[2], true), (&[3], true), (&[0, 1], false)],
            );
            let occupancy = cpus_used(&[15, 8, 12, 4]);
            let [low, most, least] =
                each_strategy("single-numa-node", &[], &numa, &[&cpu], &occupancy);
            assert_eq!(low.hint.affinity, Some(mask(&[1])));
            // Node 0 is the busiest but offers no hint: never chosen.
            assert_eq!(most.hint.affinity, Some(mask(&[2])));
            assert_eq!(least.hint.affinity, Some(mask(&[3])));
            assert!(low.admit && most.admit && least.admit);
        }

        #[test]
        fn the_score_averages_the_contended_resources() {
            let numa = NumaInfo::new(vec![0, 1], None).unwrap();
            let cpu = hints("cpu", &[(&[0], true), (&[1], true)]);
            let mem = hints("memory", &[(&[0], true), (&[1], true)]);
            // cpu: node 0 at 62%, node 1 at 6%; memory: node 0 empty, node
            // 1 full. Averages: node 0 (62+1)/2 = 31, node 1 (6+100)/2 = 53.
            let mut o = cpus_used(&[10, 1]);
            o.add(
                "memory",
                [
                    (NumaNodeId::from(0), 1 << 30, 1 << 30),
                    (NumaNodeId::from(1), 1 << 30, 0),
                ],
            );
            let [_, most, least] = each_strategy("restricted", &[], &numa, &[&cpu, &mem], &o);
            assert_eq!(most.hint.affinity, Some(mask(&[1])));
            assert_eq!(least.hint.affinity, Some(mask(&[0])));
            // With cpu alone contended, the other way round.
            let [_, most, least] = each_strategy(
                "restricted",
                &[],
                &numa,
                &[&cpu, &mem],
                &cpus_used(&[10, 1]),
            );
            assert_eq!(most.hint.affinity, Some(mask(&[0])));
            assert_eq!(least.hint.affinity, Some(mask(&[1])));
        }

        #[test]
        fn the_strategy_never_beats_the_preferred_flag_the_width_or_the_distance() {
            let distances = vec![
                vec![10, 11, 20, 20],
                vec![11, 10, 20, 20],
                vec![20, 20, 10, 11],
                vec![20, 20, 11, 10],
            ];
            let numa = NumaInfo::new(vec![0, 1, 2, 3], Some(distances)).unwrap();
            // Preferred {0} against a busier, wider preferred {2, 3}, and a
            // busier non-preferred {3}: {0} whatever the strategy.
            let cpu = hints("cpu", &[(&[0], true), (&[2, 3], true), (&[3], false)]);
            let gpu = hints("gpu", &[(&[0], true), (&[2, 3], true), (&[3], true)]);
            for d in each_strategy(
                "best-effort",
                &[],
                &numa,
                &[&cpu, &gpu],
                &cpus_used(&[0, 0, 15, 15]),
            ) {
                assert_eq!(d.hint, TopologyHint::new(mask(&[0]), true));
            }
            // prefer-closest: {0, 1} (distance 10.5) beats the busier
            // {0, 2} (15); among {0, 1} and {2, 3}, both 10.5, the score.
            let wide = hints("cpu", &[(&[0, 1], true), (&[0, 2], true), (&[2, 3], true)]);
            let closest = [(PREFER_CLOSEST_NUMA_NODES, "true")];
            let [low, most, least] = each_strategy(
                "restricted",
                &closest,
                &numa,
                &[&wide],
                &cpus_used(&[1, 1, 10, 1]),
            );
            assert_eq!(low.hint.affinity, Some(mask(&[0, 1])));
            assert_eq!(most.hint.affinity, Some(mask(&[2, 3])));
            assert_eq!(least.hint.affinity, Some(mask(&[0, 1])));
            // A request nothing on one node can hold is refused by every
            // strategy alike (restricted: no preferred hint).
            let none_fit = hints("cpu", &[(&[0, 1], false), (&[2, 3], false)]);
            for d in each_strategy("restricted", &[], &numa, &[&none_fit], &cpus_used(&[0; 4])) {
                assert!(!d.admit);
            }
        }

        #[test]
        fn compact_sets_are_ranked_by_enumeration() {
            let numa = NumaInfo::new(vec![0, 1, 2, 3], None).unwrap();
            // Every pair of nodes is preferred.
            let cpu: ProviderHints = Some(BTreeMap::from([(
                "cpu".to_string(),
                Some(HintSet::Compact(CompactHints {
                    minimal: vec![mask(&[0]), mask(&[1]), mask(&[2]), mask(&[3])],
                    within: vec![],
                    preferred_width: 2,
                })),
            )]));
            let [low, most, least] = each_strategy(
                "restricted",
                &[],
                &numa,
                &[&cpu],
                &cpus_used(&[1, 9, 3, 12]),
            );
            assert_eq!(low.hint.affinity, Some(mask(&[0, 1])));
            assert_eq!(most.hint.affinity, Some(mask(&[1, 3])));
            assert_eq!(least.hint.affinity, Some(mask(&[0, 2])));
        }

        #[test]
        fn without_occupancy_or_contended_resources_it_is_lowest_index() {
            let numa = NumaInfo::new(vec![0, 1], None).unwrap();
            let cpu = hints("cpu", &[(&[0], true), (&[1], true)]);
            let p = Policy::new(
                "restricted",
                &opts(&[(NUMA_ALLOCATION_STRATEGY, "most-allocated")]),
                numa,
            )
            .unwrap();
            let named = [("p", &cpu)];
            assert_eq!(p.decide(&named).unwrap().hint.affinity, Some(mask(&[0])));
            assert_eq!(
                p.decide_with(&named, &Occupancy::new())
                    .unwrap()
                    .hint
                    .affinity,
                Some(mask(&[0]))
            );
        }
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
