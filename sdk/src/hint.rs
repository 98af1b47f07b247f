//! Topology hints: what a provider says about where a request can be satisfied.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::NumaMask;

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

/// The hints of one resource in compact form: every superset of one of the
/// `minimal` masks (within the machine's nodes) is a hint, preferred exactly
/// when its width (node count) equals `preferred_width`.
///
/// A provider's hints are upward-closed (a NUMA set that can satisfy a request
/// still can when nodes are added), so this describes the same list the
/// kubelet would enumerate, without its `2^N` size. The explicit order it
/// stands for is the kubelet's enumeration order: by width, then by the
/// lexicographic order of node ids (see [`CompactHints::expand`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactHints {
    /// Minimal masks; every superset of one of them is a hint.
    pub minimal: Vec<NumaMask>,
    /// Width at which a hint is preferred.
    pub preferred_width: u32,
}

impl CompactHints {
    /// True when `mask` is a hint of this set (a superset of a minimal mask).
    pub fn contains(&self, mask: NumaMask) -> bool {
        self.minimal.iter().any(|m| m.is_subset_of(mask))
    }

    /// The smallest width of any hint (`None` when there are no minimal masks).
    pub fn min_width(&self) -> Option<u32> {
        self.minimal.iter().map(|m| m.count()).min()
    }

    /// The explicit list this compact form stands for on a machine whose NUMA
    /// nodes are `nodes`, in the kubelet's enumeration order (width 1..=N,
    /// each width in lexicographic order of node positions). The list has up
    /// to `2^N - 1` entries: only use it on small machines.
    pub fn expand(&self, nodes: &[u32]) -> Vec<TopologyHint> {
        let mut out = Vec::new();
        for_each_mask_in_kubelet_order(nodes, |mask| {
            if self.contains(mask) {
                out.push(TopologyHint::new(
                    mask,
                    mask.count() == self.preferred_width,
                ));
            }
        });
        out
    }
}

/// Calls `f` on every non-empty subset of `nodes` in the kubelet's
/// `IterateBitMasks` order: by size, then lexicographically by position.
pub fn for_each_mask_in_kubelet_order(nodes: &[u32], mut f: impl FnMut(NumaMask)) {
    fn rec(nodes: &[u32], start: usize, left: usize, acc: u64, f: &mut impl FnMut(NumaMask)) {
        if left == 0 {
            f(NumaMask::from_bits(acc));
            return;
        }
        for i in start..=nodes.len() - left {
            rec(nodes, i + 1, left - 1, acc | (1u64 << nodes[i]), f);
        }
    }
    for size in 1..=nodes.len() {
        rec(nodes, 0, size, 0, &mut f);
    }
}

/// The hints of one resource: an explicit list or the compact form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HintSet {
    /// The hints listed one by one (the kubelet's form).
    Explicit(Vec<TopologyHint>),
    /// Every superset of minimal masks (see [`CompactHints`]).
    Compact(CompactHints),
}

impl HintSet {
    /// Every NUMA node named by any hint of the set.
    pub fn nodes_named(&self) -> NumaMask {
        match self {
            HintSet::Explicit(v) => v
                .iter()
                .filter_map(|h| h.affinity)
                .fold(NumaMask::EMPTY, NumaMask::or),
            HintSet::Compact(c) => c
                .minimal
                .iter()
                .copied()
                .fold(NumaMask::EMPTY, NumaMask::or),
        }
    }
}

/// A provider's answer for one container or pod, with the kubelet's three cases:
/// `None` (no map: no preference for anything), a resource mapped to `None`
/// (no preference for that resource), and a resource mapped to an empty
/// explicit list (the request cannot be satisfied on any NUMA combination).
pub type ProviderHints = Option<BTreeMap<String, Option<HintSet>>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_enumeration_order() {
        let mut seen = Vec::new();
        for_each_mask_in_kubelet_order(&[0, 1, 3], |m| seen.push(m.to_string()));
        assert_eq!(seen, ["0", "1", "3", "0-1", "0,3", "1,3", "0-1,3"]);
    }

    #[test]
    fn compact_expands_to_supersets() {
        let c = CompactHints {
            minimal: vec![
                NumaMask::single(1).unwrap(),
                NumaMask::from_nodes([0, 2]).unwrap(),
            ],
            preferred_width: 1,
        };
        let got: Vec<String> = c
            .expand(&[0, 1, 2])
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
                TopologyHint::new(NumaMask::single(0).unwrap(), true),
                TopologyHint {
                    affinity: None,
                    preferred: false
                }
            ])
        );
        let compact: HintSet =
            serde_json::from_str(r#"{"minimal":[[0],[1,2]],"preferred_width":1}"#).unwrap();
        assert!(matches!(compact, HintSet::Compact(_)));
    }
}
