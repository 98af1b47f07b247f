//! [`NumaNodeId`] and [`NumaMask`]: NUMA node ids `0..=255` and sets of them,
//! with the kubelet bitmask semantics.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The largest NUMA node id topomgr supports (Linux on POWER numbers GPU
/// memory nodes up to 255; x86 firmware uses sparse ids).
pub const MAX_NUMA_NODE_ID: u32 = 255;

/// The most NUMA nodes one machine may have at once (ids may be anywhere in
/// `0..=`[`MAX_NUMA_NODE_ID`]). The merge works on the machine's present
/// nodes, so this bounds its masks, not the ids.
pub const MAX_NUMA_NODES: u32 = 64;

/// Error for a NUMA node id above [`MAX_NUMA_NODE_ID`] (or negative).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NUMA node id {0} is out of range: topomgr supports node ids 0-255")]
pub struct NodeOutOfRange(pub i64);

/// The id of one NUMA node, `0..=255`.
///
/// Every NUMA node id of the SDK has this type: [`NumaMask`] members,
/// [`NumaNode::id`](crate::NumaNode::id), [`Cpu::numa`](crate::Cpu::numa) and
/// [`PciDevice::numa`](crate::PciDevice::numa) (the last two as
/// `Option<NumaNodeId>`: `None` is "no node", never `-1`). It serializes as a
/// plain number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct NumaNodeId(u8);

impl NumaNodeId {
    /// The id `id`; fails above [`MAX_NUMA_NODE_ID`].
    pub const fn new(id: u32) -> Result<Self, NodeOutOfRange> {
        if id <= MAX_NUMA_NODE_ID {
            Ok(NumaNodeId(id as u8))
        } else {
            Err(NodeOutOfRange(id as i64))
        }
    }

    /// The id as a number.
    pub const fn get(self) -> u32 {
        self.0 as u32
    }
}

impl From<u8> for NumaNodeId {
    fn from(id: u8) -> Self {
        NumaNodeId(id)
    }
}

impl TryFrom<u32> for NumaNodeId {
    type Error = NodeOutOfRange;
    fn try_from(id: u32) -> Result<Self, NodeOutOfRange> {
        NumaNodeId::new(id)
    }
}

impl TryFrom<i64> for NumaNodeId {
    type Error = NodeOutOfRange;
    fn try_from(id: i64) -> Result<Self, NodeOutOfRange> {
        u32::try_from(id)
            .ok()
            .and_then(|id| NumaNodeId::new(id).ok())
            .ok_or(NodeOutOfRange(id))
    }
}

impl From<NumaNodeId> for u32 {
    fn from(id: NumaNodeId) -> u32 {
        id.get()
    }
}

impl From<NumaNodeId> for usize {
    fn from(id: NumaNodeId) -> usize {
        usize::from(id.0)
    }
}

impl PartialEq<u32> for NumaNodeId {
    fn eq(&self, other: &u32) -> bool {
        self.get() == *other
    }
}

impl fmt::Display for NumaNodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for NumaNodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::str::FromStr for NumaNodeId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let n: u32 = s
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not a NUMA node id"))?;
        NumaNodeId::new(n).map_err(|e| e.to_string())
    }
}

impl Serialize for NumaNodeId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.get())
    }
}

impl<'de> Deserialize<'de> for NumaNodeId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let id = i64::deserialize(d)?;
        NumaNodeId::try_from(id).map_err(serde::de::Error::custom)
    }
}

/// Serde helpers for `Option<NumaNodeId>` fields that also read the kernel's
/// `-1` as "no node" (older JSON and sysfs-shaped input).
pub(crate) mod optional_node {
    use super::NumaNodeId;
    use serde::{Deserialize, Deserializer};

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<NumaNodeId>, D::Error> {
        match Option::<i64>::deserialize(d)? {
            None | Some(-1) => Ok(None),
            Some(id) => NumaNodeId::try_from(id)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Number of 64-bit words of a [`NumaMask`].
const WORDS: usize = (MAX_NUMA_NODE_ID as usize + 1) / 64;

/// A set of NUMA node ids `0..=255`, with the kubelet's bitmask semantics.
///
/// Set operations have the names of the standard collections (and of
/// [`CpuSet`](crate::CpuSet)): [`contains`](Self::contains),
/// [`insert`](Self::insert), [`remove`](Self::remove), [`len`](Self::len),
/// [`is_empty`](Self::is_empty), [`iter`](Self::iter),
/// [`union`](Self::union), [`intersection`](Self::intersection),
/// [`difference`](Self::difference), [`is_subset`](Self::is_subset),
/// [`intersects`](Self::intersects). The comparisons of the kubelet's
/// `bitmask` package keep its names, so that decisions compare exactly:
/// [`is_narrower_than`](Self::is_narrower_than) (fewer nodes, ties broken by
/// [`is_less_than`](Self::is_less_than): the smaller numeric value of the
/// bitmask, bit `n` being node `n`). `Ord` follows that numeric value too. It serializes as a JSON list of ids
/// (`[0, 1]`) and displays as a Linux list (`0-1,4`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NumaMask([u64; WORDS]);

impl NumaMask {
    /// The empty mask.
    pub const EMPTY: NumaMask = NumaMask([0; WORDS]);

    /// Every node id `0..=255`.
    pub const ALL: NumaMask = NumaMask([u64::MAX; WORDS]);

    /// The mask holding only `node`.
    pub const fn single(node: NumaNodeId) -> Self {
        let mut words = [0; WORDS];
        let n = node.0 as usize;
        words[n / 64] = 1u64 << (n % 64);
        NumaMask(words)
    }

    /// A mask of the given node ids; fails on an id outside `0..=255`.
    pub fn from_nodes<I>(nodes: I) -> Result<Self, NodeOutOfRange>
    where
        I: IntoIterator,
        I::Item: Into<i64>,
    {
        let mut m = NumaMask::EMPTY;
        for n in nodes {
            m.insert(NumaNodeId::try_from(n.into())?);
        }
        Ok(m)
    }

    /// The 64-bit words of the mask, lowest ids first (for the plugin ABI).
    #[cfg(feature = "plugin-abi")]
    pub(crate) const fn words(self) -> [u64; WORDS] {
        self.0
    }

    /// A mask from its 64-bit words, lowest ids first (for the plugin ABI).
    #[cfg(feature = "plugin-abi")]
    pub(crate) const fn from_words(words: [u64; WORDS]) -> Self {
        NumaMask(words)
    }

    /// Adds `node`.
    pub fn insert(&mut self, node: NumaNodeId) {
        let n = usize::from(node);
        self.0[n / 64] |= 1u64 << (n % 64);
    }

    /// Removes `node`.
    pub fn remove(&mut self, node: NumaNodeId) {
        let n = usize::from(node);
        self.0[n / 64] &= !(1u64 << (n % 64));
    }

    /// `self` with `node` added.
    pub fn with(mut self, node: NumaNodeId) -> NumaMask {
        self.insert(node);
        self
    }

    /// The nodes in both (the kubelet's `And`).
    pub const fn intersection(self, other: NumaMask) -> NumaMask {
        let mut w = self.0;
        let mut i = 0;
        while i < WORDS {
            w[i] &= other.0[i];
            i += 1;
        }
        NumaMask(w)
    }

    /// The nodes in either (the kubelet's `Or`).
    pub const fn union(self, other: NumaMask) -> NumaMask {
        let mut w = self.0;
        let mut i = 0;
        while i < WORDS {
            w[i] |= other.0[i];
            i += 1;
        }
        NumaMask(w)
    }

    /// The nodes in `self` that are not in `other`.
    pub const fn difference(self, other: NumaMask) -> NumaMask {
        let mut w = self.0;
        let mut i = 0;
        while i < WORDS {
            w[i] &= !other.0[i];
            i += 1;
        }
        NumaMask(w)
    }

    /// The number of nodes (the kubelet's `Count`), as a `u32` like the
    /// widths of hints it is compared with (a mask has at most 256 nodes).
    pub const fn len(self) -> u32 {
        let mut c = 0;
        let mut i = 0;
        while i < WORDS {
            c += self.0[i].count_ones();
            i += 1;
        }
        c
    }

    /// True when no node is set.
    pub const fn is_empty(self) -> bool {
        let mut i = 0;
        while i < WORDS {
            if self.0[i] != 0 {
                return false;
            }
            i += 1;
        }
        true
    }

    /// True when `node` is in the mask (the kubelet's `IsSet`).
    pub const fn contains(self, node: NumaNodeId) -> bool {
        let n = node.0 as usize;
        self.0[n / 64] & (1u64 << (n % 64)) != 0
    }

    /// True when the masks share a node (the kubelet's `AnySet` of one
    /// mask's nodes on the other).
    pub const fn intersects(self, other: NumaMask) -> bool {
        !self.intersection(other).is_empty()
    }

    /// True when every node of `self` is in `other`.
    pub const fn is_subset(self, other: NumaMask) -> bool {
        self.difference(other).is_empty()
    }

    /// The kubelet's `IsLessThan`: the smaller numeric value of the bitmask.
    pub fn is_less_than(self, other: NumaMask) -> bool {
        self.cmp(&other) == Ordering::Less
    }

    /// The kubelet's `IsNarrowerThan`: fewer nodes, ties broken by [`Self::is_less_than`].
    pub fn is_narrower_than(self, other: NumaMask) -> bool {
        let (a, b) = (self.len(), other.len());
        if a == b {
            self.is_less_than(other)
        } else {
            a < b
        }
    }

    /// The lowest node of the mask.
    pub fn first(self) -> Option<NumaNodeId> {
        self.iter().next()
    }

    /// The node ids in ascending order.
    pub fn iter(self) -> NumaMaskIter {
        NumaMaskIter {
            words: self.0,
            word: 0,
        }
    }

    /// The node ids in ascending order, collected.
    pub fn nodes(self) -> Vec<NumaNodeId> {
        self.iter().collect()
    }

    /// Parse a Linux list such as `0-1,4` (the empty string is the empty mask).
    pub fn parse_list(s: &str) -> Result<Self, crate::ListParseError> {
        let ids = crate::cpuset::parse_id_list(s)?;
        let mut m = NumaMask::EMPTY;
        for id in ids {
            let node = NumaNodeId::new(id).map_err(|e| crate::ListParseError {
                input: s.to_string(),
                reason: e.to_string(),
            })?;
            m.insert(node);
        }
        Ok(m)
    }
}

impl From<NumaNodeId> for NumaMask {
    fn from(node: NumaNodeId) -> Self {
        NumaMask::single(node)
    }
}

impl FromIterator<NumaNodeId> for NumaMask {
    fn from_iter<I: IntoIterator<Item = NumaNodeId>>(iter: I) -> Self {
        let mut m = NumaMask::EMPTY;
        for n in iter {
            m.insert(n);
        }
        m
    }
}

impl Ord for NumaMask {
    /// The numeric value of the bitmask (highest word first).
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.iter().rev().cmp(other.0.iter().rev())
    }
}

impl PartialOrd for NumaMask {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Iterator over the node ids of a [`NumaMask`], ascending.
#[derive(Clone, Debug)]
pub struct NumaMaskIter {
    words: [u64; WORDS],
    word: usize,
}

impl Iterator for NumaMaskIter {
    type Item = NumaNodeId;
    fn next(&mut self) -> Option<NumaNodeId> {
        while self.word < WORDS {
            let w = &mut self.words[self.word];
            if *w != 0 {
                let bit = w.trailing_zeros() as usize;
                *w &= *w - 1;
                // The position is below 256 by construction.
                return Some(NumaNodeId((self.word * 64 + bit) as u8));
            }
            self.word += 1;
        }
        None
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.words[self.word.min(WORDS)..]
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum();
        (n, Some(n))
    }
}

impl ExactSizeIterator for NumaMaskIter {}

impl IntoIterator for NumaMask {
    type Item = NumaNodeId;
    type IntoIter = NumaMaskIter;
    fn into_iter(self) -> NumaMaskIter {
        self.iter()
    }
}

impl fmt::Display for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::cpuset::write_id_list(f, self.iter().map(NumaNodeId::get))
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

/// The NUMA nodes present on one machine (at most [`MAX_NUMA_NODES`]) and
/// their positions, for code that works on 64-bit masks over the present
/// nodes instead of 256-bit masks over every possible id (the host's merge).
///
/// Position `i` is the `i`-th lowest present id, so the numeric order of
/// position masks is the numeric order of the [`NumaMask`]s they stand for
/// (the kubelet's tie-break). When every id is below 64 the positions are
/// the ids themselves and the conversions are a single word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePositions {
    ids: Vec<NumaNodeId>,
    present: NumaMask,
    /// `Some(pos)` for each id when some id is 64 or more; `None`: identity.
    table: Option<Box<[u8; MAX_NUMA_NODE_ID as usize + 1]>>,
    all: u64,
}

/// More NUMA nodes than [`MAX_NUMA_NODES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} NUMA nodes; topomgr supports at most 64 NUMA nodes on one machine")]
pub struct TooManyNodes(pub usize);

impl NodePositions {
    /// The positions of `ids` (any order; duplicates count once).
    pub fn new(ids: impl IntoIterator<Item = NumaNodeId>) -> Result<Self, TooManyNodes> {
        let mut ids: Vec<NumaNodeId> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() > MAX_NUMA_NODES as usize {
            return Err(TooManyNodes(ids.len()));
        }
        let identity = ids.last().is_none_or(|last| last.get() < 64);
        let (table, all) = if identity {
            (None, NumaMask::from_iter(ids.iter().copied()).0[0])
        } else {
            let mut table = Box::new([u8::MAX; MAX_NUMA_NODE_ID as usize + 1]);
            for (pos, id) in ids.iter().enumerate() {
                table[usize::from(*id)] = pos as u8;
            }
            let all = if ids.len() == 64 {
                u64::MAX
            } else {
                (1u64 << ids.len()) - 1
            };
            (Some(table), all)
        };
        let present = ids.iter().copied().collect();
        Ok(NodePositions {
            ids,
            present,
            table,
            all,
        })
    }

    /// The present node ids, ascending.
    pub fn ids(&self) -> &[NumaNodeId] {
        &self.ids
    }

    /// The position mask of every present node.
    pub fn all(&self) -> u64 {
        self.all
    }

    /// The position mask of `mask`; nodes that are not present are dropped.
    pub fn to_positions(&self, mask: NumaMask) -> u64 {
        match &self.table {
            None => mask.0[0] & self.all,
            Some(_) if mask == NumaMask::ALL => self.all,
            Some(table) => mask
                .intersection(self.present)
                .iter()
                .fold(0u64, |acc, id| match table[usize::from(id)] {
                    u8::MAX => acc,
                    pos => acc | 1u64 << pos,
                }),
        }
    }

    /// The mask of the nodes at the positions set in `bits` (positions of
    /// no present node are dropped).
    pub fn to_mask(&self, bits: u64) -> NumaMask {
        let bits = bits & self.all;
        match &self.table {
            None => NumaMask([bits, 0, 0, 0]),
            Some(_) => {
                let mut m = NumaMask::EMPTY;
                let mut rest = bits;
                while rest != 0 {
                    let pos = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    m.insert(self.ids[pos]);
                }
                m
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_keep_the_value_order() {
        let low = NodePositions::new([3, 0, 5].map(NumaNodeId::from)).unwrap();
        assert_eq!(low.to_positions(m(&[0, 5, 7])), 0b100001);
        assert_eq!(low.to_mask(0b101000), m(&[3, 5]));
        assert_eq!(low.all(), 0b101001);
        let high = NodePositions::new([250, 0, 64, 8].map(NumaNodeId::from)).unwrap();
        assert_eq!(high.ids().len(), 4);
        assert_eq!(high.all(), 0b1111);
        assert_eq!(high.to_positions(m(&[64, 250, 251])), 0b1100);
        assert_eq!(high.to_mask(0b1010), m(&[8, 250]));
        // Value order is preserved both ways.
        let masks = [
            m(&[0, 250]),
            m(&[8, 64]),
            m(&[250]),
            m(&[64]),
            m(&[0, 8, 64]),
        ];
        for a in masks {
            for b in masks {
                assert_eq!(
                    a.is_less_than(b),
                    high.to_positions(a) < high.to_positions(b),
                    "{a} {b}"
                );
            }
        }
        let all: Vec<NumaNodeId> = (0u8..=255).step_by(4).map(NumaNodeId::from).collect();
        let full = NodePositions::new(all).unwrap();
        assert_eq!(full.all(), u64::MAX);
        assert_eq!(full.to_mask(u64::MAX).len(), 64);
        assert_eq!(
            NodePositions::new((0u8..65).map(NumaNodeId::from))
                .unwrap_err()
                .to_string(),
            "65 NUMA nodes; topomgr supports at most 64 NUMA nodes on one machine"
        );
    }

    fn m(ids: &[i64]) -> NumaMask {
        NumaMask::from_nodes(ids.iter().copied()).unwrap()
    }

    fn id(n: u8) -> NumaNodeId {
        NumaNodeId::from(n)
    }

    #[test]
    fn narrower_breaks_ties_by_value() {
        let a = m(&[0, 3]); // 9
        let b = m(&[1, 2]); // 6
        assert!(b.is_narrower_than(a));
        assert!(!a.is_narrower_than(b));
        assert!(NumaMask::single(id(5)).is_narrower_than(b));
    }

    #[test]
    fn value_order_spans_every_word() {
        // Node 64 alone is worth more than nodes 0-63 together.
        let low = NumaMask::from_nodes(0..64i64).unwrap();
        let high = m(&[64]);
        assert!(low.is_less_than(high));
        assert!(m(&[200]).is_less_than(m(&[255])));
        assert!(m(&[0, 255]).is_less_than(m(&[1, 255])));
        assert!(m(&[250]).is_narrower_than(m(&[0, 1])));
        assert!(m(&[1, 250]).is_narrower_than(m(&[0, 251])));
        let mut sorted = vec![m(&[255]), m(&[0]), m(&[64, 1]), m(&[63])];
        sorted.sort();
        assert_eq!(sorted, vec![m(&[0]), m(&[63]), m(&[1, 64]), m(&[255])]);
    }

    #[test]
    fn set_operations_across_words() {
        let a = m(&[0, 63, 64, 127, 128, 250, 255]);
        let b = m(&[63, 64, 200, 255]);
        assert_eq!(a.intersection(b), m(&[63, 64, 255]));
        assert_eq!(a.union(b).len(), 8);
        assert_eq!(a.difference(b), m(&[0, 127, 128, 250]));
        assert!(a.intersects(b));
        assert!(!m(&[1]).intersects(m(&[129])));
        assert!(m(&[64, 255]).is_subset(a));
        assert!(a.contains(id(250)) && !a.contains(id(249)));
        assert_eq!(
            a.nodes().iter().map(|n| n.get()).collect::<Vec<_>>(),
            [0, 63, 64, 127, 128, 250, 255]
        );
        assert_eq!(a.iter().len(), 7);
        assert_eq!(a.first(), Some(id(0)));
        assert_eq!(NumaMask::ALL.len(), 256);
        let collected: NumaMask = [id(3), id(250)].into_iter().collect();
        assert_eq!(collected, m(&[3, 250]));
        let mut c = collected;
        c.remove(id(3));
        assert_eq!(c, NumaMask::single(id(250)));
    }

    #[test]
    fn display_and_parse_round_trip() {
        let mask = m(&[0, 1, 4, 6, 7, 8, 250, 251, 252, 253, 254, 255]);
        assert_eq!(mask.to_string(), "0-1,4,6-8,250-255");
        assert_eq!(NumaMask::parse_list("0-1,4,6-8,250-255").unwrap(), mask);
        assert_eq!(NumaMask::EMPTY.to_string(), "");
        assert_eq!(
            NumaMask::parse_list("254-256").unwrap_err().to_string(),
            "invalid id list \"254-256\": NUMA node id 256 is out of range: topomgr supports node ids 0-255"
        );
    }

    #[test]
    fn out_of_range_is_an_error() {
        assert_eq!(
            NumaMask::from_nodes([256]).unwrap_err().to_string(),
            "NUMA node id 256 is out of range: topomgr supports node ids 0-255"
        );
        assert!(NumaMask::from_nodes([-1]).is_err());
        assert_eq!(NumaNodeId::new(255).map(NumaNodeId::get), Ok(255));
        assert_eq!(NumaNodeId::new(256), Err(NodeOutOfRange(256)));
        assert_eq!(NumaNodeId::try_from(-1i64), Err(NodeOutOfRange(-1)));
        let json: Result<NumaMask, _> = serde_json::from_str("[0, 300]");
        assert!(json.is_err());
        let ok: NumaMask = serde_json::from_str("[250, 0]").unwrap();
        assert_eq!(serde_json::to_string(&ok).unwrap(), "[0,250]");
        let node: Result<NumaNodeId, _> = serde_json::from_str("256");
        assert_eq!(
            node.unwrap_err().to_string(),
            "NUMA node id 256 is out of range: topomgr supports node ids 0-255"
        );
    }
}
