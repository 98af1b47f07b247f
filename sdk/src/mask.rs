//! [`NumaMask`]: a set of NUMA node ids `0..=63`, with the kubelet bitmask semantics.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The largest number of NUMA nodes topomgr supports (ids `0..=63`).
pub const MAX_NUMA_NODES: u32 = 64;

/// Error for a NUMA node id that does not fit in a [`NumaMask`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NUMA node id {0} is out of range: topomgr supports node ids 0-63 (64 NUMA nodes at most)")]
pub struct NodeOutOfRange(pub i64);

/// A set of NUMA node ids, stored as a 64-bit mask (bit `n` = node `n`).
///
/// The operations mirror the kubelet's `bitmask` package so that decisions
/// compare exactly: [`count`](Self::count), [`is_narrower_than`](Self::is_narrower_than)
/// (fewer nodes, ties broken by [`is_less_than`](Self::is_less_than), i.e. the
/// smaller 64-bit value). It serialises as a JSON list of ids (`[0, 1]`) and
/// displays as a Linux list (`0-1,4`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct NumaMask(u64);

impl NumaMask {
    /// The empty mask.
    pub const EMPTY: NumaMask = NumaMask(0);

    /// A mask from its raw 64-bit value.
    pub const fn from_bits(bits: u64) -> Self {
        NumaMask(bits)
    }

    /// The raw 64-bit value.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// A mask of the given node ids; fails on an id outside `0..=63`.
    pub fn from_nodes<I>(nodes: I) -> Result<Self, NodeOutOfRange>
    where
        I: IntoIterator,
        I::Item: Into<i64>,
    {
        let mut bits = 0u64;
        for n in nodes {
            let n = n.into();
            if !(0..i64::from(MAX_NUMA_NODES)).contains(&n) {
                return Err(NodeOutOfRange(n));
            }
            bits |= 1u64 << n;
        }
        Ok(NumaMask(bits))
    }

    /// A mask with the single node `node`; fails on an id outside `0..=63`.
    pub fn single(node: u32) -> Result<Self, NodeOutOfRange> {
        Self::from_nodes([i64::from(node)])
    }

    /// Bitwise AND.
    pub const fn and(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 & other.0)
    }

    /// Bitwise OR.
    pub const fn or(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 | other.0)
    }

    /// Nodes in `self` that are not in `other`.
    pub const fn and_not(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 & !other.0)
    }

    /// Number of nodes in the mask.
    pub const fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// True when no node is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True when `node` is in the mask (false for ids outside `0..=63`).
    pub const fn is_set(self, node: u32) -> bool {
        node < MAX_NUMA_NODES && self.0 & (1u64 << node) != 0
    }

    /// True when every node of `self` is in `other`.
    pub const fn is_subset_of(self, other: NumaMask) -> bool {
        self.0 & !other.0 == 0
    }

    /// The kubelet's `IsLessThan`: the smaller 64-bit value.
    pub const fn is_less_than(self, other: NumaMask) -> bool {
        self.0 < other.0
    }

    /// The kubelet's `IsNarrowerThan`: fewer nodes, ties broken by [`Self::is_less_than`].
    pub const fn is_narrower_than(self, other: NumaMask) -> bool {
        let (a, b) = (self.count(), other.count());
        if a == b {
            self.is_less_than(other)
        } else {
            a < b
        }
    }

    /// The node ids in ascending order.
    pub fn iter(self) -> NumaMaskIter {
        NumaMaskIter(self.0)
    }

    /// The node ids in ascending order, collected.
    pub fn nodes(self) -> Vec<u32> {
        self.iter().collect()
    }

    /// Parse a Linux list such as `0-1,4` (the empty string is the empty mask).
    pub fn parse_list(s: &str) -> Result<Self, crate::ListParseError> {
        let ids = crate::cpuset::parse_id_list(s)?;
        let mut bits = 0u64;
        for id in ids {
            if id >= MAX_NUMA_NODES {
                return Err(crate::ListParseError {
                    input: s.to_string(),
                    reason: NodeOutOfRange(i64::from(id)).to_string(),
                });
            }
            bits |= 1u64 << id;
        }
        Ok(NumaMask(bits))
    }
}

/// Iterator over the node ids of a [`NumaMask`], ascending.
#[derive(Clone, Debug)]
pub struct NumaMaskIter(u64);

impl Iterator for NumaMaskIter {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if self.0 == 0 {
            return None;
        }
        let bit = self.0.trailing_zeros();
        self.0 &= self.0 - 1;
        Some(bit)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.0.count_ones() as usize;
        (n, Some(n))
    }
}

impl IntoIterator for NumaMask {
    type Item = u32;
    type IntoIter = NumaMaskIter;
    fn into_iter(self) -> NumaMaskIter {
        self.iter()
    }
}

impl fmt::Display for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::cpuset::write_id_list(f, self.iter())
    }
}

impl fmt::Debug for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NumaMask({self})")
    }
}

impl Serialize for NumaMask {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for NumaMask {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ids = Vec::<i64>::deserialize(d)?;
        NumaMask::from_nodes(ids).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrower_breaks_ties_by_value() {
        let a = NumaMask::from_nodes([0, 3]).unwrap(); // 9
        let b = NumaMask::from_nodes([1, 2]).unwrap(); // 6
        assert!(b.is_narrower_than(a));
        assert!(!a.is_narrower_than(b));
        assert!(NumaMask::single(5).unwrap().is_narrower_than(b));
    }

    #[test]
    fn display_and_parse_round_trip() {
        let m = NumaMask::from_nodes([0, 1, 4, 6, 7, 8]).unwrap();
        assert_eq!(m.to_string(), "0-1,4,6-8");
        assert_eq!(NumaMask::parse_list("0-1,4,6-8").unwrap(), m);
        assert_eq!(NumaMask::EMPTY.to_string(), "");
    }

    #[test]
    fn out_of_range_is_an_error() {
        assert_eq!(
            NumaMask::from_nodes([64]).unwrap_err().to_string(),
            "NUMA node id 64 is out of range: topomgr supports node ids 0-63 (64 NUMA nodes at most)"
        );
        assert!(NumaMask::from_nodes([-1]).is_err());
        let json: Result<NumaMask, _> = serde_json::from_str("[0, 70]");
        assert!(json.is_err());
    }
}
