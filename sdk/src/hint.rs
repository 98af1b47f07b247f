//! Topology hints: what a provider says about where a request can be satisfied.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{NumaMask, NumaNodeId};

/// One NUMA placement a provider can satisfy, as in the kubelet.
///
/// `affinity: None` means "any NUMA node" (no preference); `preferred` marks
/// the placements the provider considers optimal (usually the narrowest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyHint {
    /// The NUMA nodes of this placement, or `None` for "any".
    pub affinity: Option<NumaMask>,
    /// Whether this placement is optimal for the provider.
    pub preferred: bool,
}

impl TopologyHint {
    /// A hint for the given mask.
    pub fn new(affinity: NumaMask, preferred: bool) -> Self {
        TopologyHint {
            affinity: Some(affinity),
            preferred,
        }
    }

    /// The "any NUMA node, preferred" hint.
    pub const ANY: TopologyHint = TopologyHint {
        affinity: None,
        preferred: true,
    };
}

/// The hints of one resource in compact form: a union of lattice intervals.
///
/// Interval `i` is every mask `M` with `minimal[i] ⊆ M ⊆ within[i]` (and `M`
/// within the machine's nodes); a mask is a hint when it lies in at least one
/// interval, and it is preferred exactly when its width (node count) equals
/// `preferred_width`. An empty `within` means "no upper bounds": every
/// superset of a minimal mask is a hint, which is the shape of most
/// providers' hints (a NUMA set that can satisfy a request still can when
/// nodes are added). Upper bounds express hint sets that are not
/// upward-closed, such as the kubelet Memory Manager's once memory is
/// allocated (a node holding a single-node allocation may only appear alone:
/// the interval `[{n}, {n}]`).
///
/// This describes the same list the kubelet would enumerate, without its
/// `2^N` size. The explicit order it stands for is the kubelet's enumeration
/// order: by width, then by the lexicographic order of node ids (see
/// [`CompactHints::expand`]); a mask lying in several intervals is listed
/// once.
///
/// JSON form (`within` may be left out):
/// `{"minimal": [[0], [1, 2]], "within": [[0, 1, 2, 3], [1, 2]], "preferred_width": 1}`.
/// The host refuses a set that fails [`CompactHints::validate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactHints {
    /// Lower ends of the intervals; with no bounds, every superset of one of
    /// them is a hint.
    pub minimal: Vec<NumaMask>,
    /// Upper ends of the intervals, one per minimal mask; empty: every
    /// minimal mask may grow to all of the machine's nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub within: Vec<NumaMask>,
    /// Width at which a hint is preferred.
    pub preferred_width: u32,
}

/// Why a [`CompactHints`] is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactHintsError {
    /// `within` is neither empty nor as long as `minimal`.
    #[error(
        "compact hints have {minimal} minimal mask(s) but {within} `within` bound(s); give one \
         bound per minimal mask, or leave `within` out"
    )]
    BoundCount {
        /// Number of minimal masks.
        minimal: usize,
        /// Number of bounds.
        within: usize,
    },
    /// A minimal mask is not a subset of its bound, or the bound is empty.
    #[error(
        "compact hints: minimal[{index}] ({}) is not inside within[{index}] ({}); every \
         bound must be a non-empty superset of its minimal mask",
        describe(*minimal),
        describe(*within)
    )]
    OutsideBound {
        /// Position of the interval.
        index: usize,
        /// Its minimal mask.
        minimal: NumaMask,
        /// Its bound.
        within: NumaMask,
    },
}

fn describe(m: NumaMask) -> String {
    if m.is_empty() {
        "no nodes".to_owned()
    } else {
        format!("nodes {m}")
    }
}

impl CompactHints {
    /// Every superset of the `minimal` masks (no upper bounds).
    pub fn upward_closed(minimal: Vec<NumaMask>, preferred_width: u32) -> Self {
        CompactHints {
            minimal,
            within: Vec::new(),
            preferred_width,
        }
    }

    /// Checks the shape: `within` empty or one bound per minimal mask, and
    /// every bound a non-empty superset of its minimal mask.
    pub fn validate(&self) -> Result<(), CompactHintsError> {
        if self.within.is_empty() {
            return Ok(());
        }
        if self.within.len() != self.minimal.len() {
            return Err(CompactHintsError::BoundCount {
                minimal: self.minimal.len(),
                within: self.within.len(),
            });
        }
        for (index, (&minimal, &within)) in self.minimal.iter().zip(&self.within).enumerate() {
            if within.is_empty() || !minimal.is_subset(within) {
                return Err(CompactHintsError::OutsideBound {
                    index,
                    minimal,
                    within,
                });
            }
        }
        Ok(())
    }

    /// The intervals `(minimal, bound)`; an interval without a bound gets
    /// every node id. On a malformed set (see [`CompactHints::validate`]) an
    /// interval whose bound is missing gets an empty bound, so it adds no
    /// hint.
    pub fn intervals(&self) -> impl Iterator<Item = (NumaMask, NumaMask)> + '_ {
        self.minimal.iter().enumerate().map(|(i, &lo)| {
            let hi = if self.within.is_empty() {
                NumaMask::ALL
            } else {
                self.within.get(i).copied().unwrap_or(NumaMask::EMPTY)
            };
            (lo, hi)
        })
    }

    /// True when `mask` is a hint of this set (inside one of its intervals).
    pub fn contains(&self, mask: NumaMask) -> bool {
        self.intervals()
            .any(|(lo, hi)| lo.is_subset(mask) && mask.is_subset(hi))
    }

    /// The smallest width of any hint (`None` when there are no minimal
    /// masks). An empty minimal mask stands for hints of width 1 and up.
    pub fn min_width(&self) -> Option<u32> {
        self.minimal.iter().map(|m| m.len().max(1)).min()
    }

    /// The explicit list this compact form stands for on a machine whose NUMA
    /// nodes are `nodes`, in the kubelet's enumeration order (width 1..=N,
    /// each width in lexicographic order of node positions). The list has up
    /// to `2^N - 1` entries: only use it on small machines.
    pub fn expand(&self, nodes: &[NumaNodeId]) -> Vec<TopologyHint> {
        let mut out = Vec::new();
        for_each_mask_in_kubelet_order(nodes, |mask| {
            if self.contains(mask) {
                out.push(TopologyHint::new(mask, mask.len() == self.preferred_width));
            }
        });
        out
    }
}

/// Calls `f` on every non-empty subset of `nodes` in the kubelet's
/// `IterateBitMasks` order: by size, then lexicographically by position.
pub fn for_each_mask_in_kubelet_order(nodes: &[NumaNodeId], mut f: impl FnMut(NumaMask)) {
    fn rec(
        nodes: &[NumaNodeId],
        start: usize,
        left: usize,
        acc: NumaMask,
        f: &mut impl FnMut(NumaMask),
    ) {
        if left == 0 {
            f(acc);
            return;
        }
        for i in start..=nodes.len() - left {
            rec(nodes, i + 1, left - 1, acc.with(nodes[i]), f);
        }
    }
    for size in 1..=nodes.len() {
        rec(nodes, 0, size, NumaMask::EMPTY, &mut f);
    }
}

/// The hints of one resource: an explicit list or the compact form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HintSet {
    /// The hints listed one by one (the kubelet's form).
    Explicit(Vec<TopologyHint>),
    /// A union of lattice intervals (see [`CompactHints`]).
    Compact(CompactHints),
}

impl HintSet {
    /// The explicit list `hints`.
    pub fn explicit(hints: Vec<TopologyHint>) -> Self {
        HintSet::Explicit(hints)
    }

    /// The answer for a request that cannot be satisfied on any NUMA
    /// combination (an empty explicit list).
    pub fn unsatisfiable() -> Self {
        HintSet::Explicit(Vec::new())
    }

    /// The compact form "every superset of one of `minimal`, preferred at
    /// width `preferred_width`"; an empty `minimal` is [`Self::unsatisfiable`].
    pub fn upward_closed(minimal: Vec<NumaMask>, preferred_width: u32) -> Self {
        if minimal.is_empty() {
            return HintSet::unsatisfiable();
        }
        HintSet::Compact(CompactHints::upward_closed(minimal, preferred_width))
    }

    /// True when no placement satisfies the request.
    pub fn is_unsatisfiable(&self) -> bool {
        match self {
            HintSet::Explicit(v) => v.is_empty(),
            HintSet::Compact(c) => c.minimal.is_empty(),
        }
    }

    /// The explicit list this set stands for on a machine whose nodes are
    /// `nodes` (a compact set is expanded: only use it on small machines).
    pub fn to_explicit(&self, nodes: &[NumaNodeId]) -> Vec<TopologyHint> {
        match self {
            HintSet::Explicit(v) => v.clone(),
            HintSet::Compact(c) => c.expand(nodes),
        }
    }

    /// Every NUMA node named by any hint of the set (for a compact set: by
    /// any minimal mask or bound).
    pub fn nodes_named(&self) -> NumaMask {
        match self {
            HintSet::Explicit(v) => v
                .iter()
                .filter_map(|h| h.affinity)
                .fold(NumaMask::EMPTY, NumaMask::union),
            HintSet::Compact(c) => c
                .minimal
                .iter()
                .chain(&c.within)
                .copied()
                .fold(NumaMask::EMPTY, NumaMask::union),
        }
    }
}

/// A provider's answer for one container or pod, with the kubelet's three cases:
/// `None` (no map: no preference for anything), a resource mapped to `None`
/// (no preference for that resource), and a resource mapped to an empty
/// explicit list (the request cannot be satisfied on any NUMA combination).
///
/// Build one with [`HintsBuilder`] (or [`no_hints`] for no map at all)
/// rather than by hand.
pub type ProviderHints = Option<BTreeMap<String, Option<HintSet>>>;

/// The answer "no map at all": the provider has no preference for anything
/// (the kubelet's `nil` map).
pub fn no_hints() -> ProviderHints {
    None
}

/// Builds a [`ProviderHints`] map resource by resource.
///
/// ```
/// use topomgr_sdk::{HintSet, HintsBuilder, NumaMask, NumaNodeId, TopologyHint};
///
/// let node0 = NumaMask::single(NumaNodeId::from(0));
/// let hints = HintsBuilder::new()
///     .hints("example.com/a", HintSet::explicit(vec![TopologyHint::new(node0, true)]))
///     .no_preference("example.com/b")
///     .unsatisfiable("example.com/c")
///     .build();
/// let map = hints.unwrap();
/// assert_eq!(map["example.com/b"], None);
/// assert_eq!(map["example.com/c"], Some(HintSet::unsatisfiable()));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HintsBuilder(BTreeMap<String, Option<HintSet>>);

impl HintsBuilder {
    /// An empty map (the kubelet treats an empty map like no map).
    pub fn new() -> Self {
        HintsBuilder::default()
    }

    /// `resource` has no preference (usually: it is not requested).
    pub fn no_preference(mut self, resource: impl Into<String>) -> Self {
        self.0.insert(resource.into(), None);
        self
    }

    /// `resource` cannot be satisfied on any NUMA combination.
    pub fn unsatisfiable(mut self, resource: impl Into<String>) -> Self {
        self.0
            .insert(resource.into(), Some(HintSet::unsatisfiable()));
        self
    }

    /// `resource` has the hints `set` (explicit or compact).
    pub fn hints(mut self, resource: impl Into<String>, set: HintSet) -> Self {
        self.0.insert(resource.into(), Some(set));
        self
    }

    /// The answer.
    pub fn build(self) -> ProviderHints {
        Some(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_enumeration_order() {
        let mut seen = Vec::new();
        for_each_mask_in_kubelet_order(&ids(&[0, 1, 3]), |m| seen.push(m.to_string()));
        assert_eq!(seen, ["0", "1", "3", "0-1", "0,3", "1,3", "0-1,3"]);
    }

    #[test]
    fn compact_expands_to_supersets() {
        let c = CompactHints::upward_closed(vec![mask(&[1]), mask(&[0, 2])], 1);
        let got: Vec<String> = c
            .expand(&ids(&[0, 1, 2]))
            .iter()
            .map(|h| format!("{}:{}", h.affinity.unwrap(), h.preferred))
            .collect();
        assert_eq!(
            got,
            ["1:true", "0-1:false", "0,2:false", "1-2:false", "0-2:false"]
        );
    }

    #[test]
    fn json_forms() {
        let explicit: HintSet = serde_json::from_str(
            r#"[{"affinity":[0],"preferred":true},{"affinity":null,"preferred":false}]"#,
        )
        .unwrap();
        assert_eq!(
            explicit,
            HintSet::Explicit(vec![
                TopologyHint::new(mask(&[0]), true),
                TopologyHint {
                    affinity: None,
                    preferred: false
                }
            ])
        );
        let compact: HintSet =
            serde_json::from_str(r#"{"minimal":[[0],[1,2]],"preferred_width":1}"#).unwrap();
        assert_eq!(
            compact,
            HintSet::Compact(CompactHints::upward_closed(
                vec![mask(&[0]), mask(&[1, 2])],
                1
            ))
        );
        let bounded: HintSet = serde_json::from_str(
            r#"{"minimal":[[0],[1,2]],"within":[[0,1,2,3],[1,2]],"preferred_width":1}"#,
        )
        .unwrap();
        assert_eq!(
            bounded,
            HintSet::Compact(CompactHints {
                minimal: vec![mask(&[0]), mask(&[1, 2])],
                within: vec![mask(&[0, 1, 2, 3]), mask(&[1, 2])],
                preferred_width: 1,
            })
        );
        // `within` is left out when empty, kept otherwise.
        assert_eq!(
            serde_json::to_string(&compact).unwrap(),
            r#"{"minimal":[[0],[1,2]],"preferred_width":1}"#
        );
        assert_eq!(
            serde_json::to_string(&bounded).unwrap(),
            r#"{"minimal":[[0],[1,2]],"within":[[0,1,2,3],[1,2]],"preferred_width":1}"#
        );
    }

    fn mask(nodes: &[i64]) -> NumaMask {
        NumaMask::from_nodes(nodes.iter().copied()).unwrap()
    }

    fn ids(nodes: &[u8]) -> Vec<NumaNodeId> {
        nodes.iter().copied().map(NumaNodeId::from).collect()
    }

    fn strings(hints: &[TopologyHint]) -> Vec<String> {
        hints
            .iter()
            .map(|h| format!("{}:{}", h.affinity.unwrap(), h.preferred))
            .collect()
    }

    #[test]
    fn bounded_intervals_expand_to_their_members_once() {
        // {0} alone, any superset of {1} inside 1-3, and the group 2-3.
        let c = CompactHints {
            minimal: vec![mask(&[0]), mask(&[1]), mask(&[2, 3])],
            within: vec![mask(&[0]), mask(&[1, 2, 3]), mask(&[2, 3])],
            preferred_width: 1,
        };
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(
            strings(&c.expand(&ids(&[0, 1, 2, 3]))),
            [
                "0:true",
                "1:true",
                "1-2:false",
                "1,3:false",
                "2-3:false",
                "1-3:false"
            ]
        );
        assert!(c.contains(mask(&[0])));
        assert!(!c.contains(mask(&[0, 1])));
        assert!(c.contains(mask(&[2, 3])));
        assert!(!c.contains(mask(&[3])));
        assert_eq!(c.min_width(), Some(1));
        assert_eq!(HintSet::Compact(c).nodes_named(), mask(&[0, 1, 2, 3]));
    }

    #[test]
    fn min_width_counts_an_empty_minimal_mask_as_one_node() {
        let c = CompactHints::upward_closed(vec![NumaMask::EMPTY, mask(&[0, 1])], 2);
        assert_eq!(c.min_width(), Some(1));
        assert_eq!(
            strings(&c.expand(&ids(&[0, 1]))),
            ["0:false", "1:false", "0-1:true"]
        );
        assert_eq!(CompactHints::upward_closed(vec![], 1).min_width(), None);
    }

    #[test]
    fn malformed_bounds_are_refused_with_exact_messages() {
        let count = CompactHints {
            minimal: vec![mask(&[0]), mask(&[1])],
            within: vec![mask(&[0, 1])],
            preferred_width: 1,
        };
        assert_eq!(
            count.validate().unwrap_err().to_string(),
            "compact hints have 2 minimal mask(s) but 1 `within` bound(s); give one bound per \
             minimal mask, or leave `within` out"
        );
        // The missing bound adds nothing rather than everything.
        assert!(!count.contains(mask(&[1])));
        let outside = CompactHints {
            minimal: vec![mask(&[0]), mask(&[1, 2])],
            within: vec![mask(&[0, 1]), mask(&[1, 3])],
            preferred_width: 1,
        };
        assert_eq!(
            outside.validate().unwrap_err().to_string(),
            "compact hints: minimal[1] (nodes 1-2) is not inside within[1] (nodes 1,3); every \
             bound must be a non-empty superset of its minimal mask"
        );
        let empty = CompactHints {
            minimal: vec![NumaMask::EMPTY],
            within: vec![NumaMask::EMPTY],
            preferred_width: 1,
        };
        assert_eq!(
            empty.validate(),
            Err(CompactHintsError::OutsideBound {
                index: 0,
                minimal: NumaMask::EMPTY,
                within: NumaMask::EMPTY
            })
        );
        assert_eq!(
            empty.validate().unwrap_err().to_string(),
            "compact hints: minimal[0] (no nodes) is not inside within[0] (no nodes); every \
             bound must be a non-empty superset of its minimal mask"
        );
    }
}
