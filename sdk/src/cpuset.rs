//! [`CpuSet`]: a set of CPU ids of any size, in Linux list format.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Error for a malformed Linux list (`0-3,8-11`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid id list {input:?}: {reason}")]
pub struct ListParseError {
    /// The text that was parsed.
    pub input: String,
    /// What was wrong with it.
    pub reason: String,
}

/// Largest CPU id accepted when parsing (guards against absurd ranges in input).
pub const MAX_CPU_ID: u32 = 1 << 20;

pub(crate) fn parse_id_list(s: &str) -> Result<Vec<u32>, ListParseError> {
    let err = |reason: String| ListParseError {
        input: s.to_string(),
        reason,
    };
    let mut out = Vec::new();
    let t = s.trim();
    if t.is_empty() {
        return Ok(out);
    }
    for part in t.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(err("empty element".into()));
        }
        let num = |x: &str| -> Result<u32, ListParseError> {
            let v: u32 = x
                .trim()
                .parse()
                .map_err(|_| err(format!("{:?} is not a non-negative integer", x.trim())))?;
            if v > MAX_CPU_ID {
                return Err(err(format!("id {v} is larger than {MAX_CPU_ID}")));
            }
            Ok(v)
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(err(format!("range {a}-{b} is reversed")));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    Ok(out)
}

pub(crate) fn write_id_list(
    f: &mut fmt::Formatter<'_>,
    ids: impl Iterator<Item = u32>,
) -> fmt::Result {
    let mut first = true;
    let mut run: Option<(u32, u32)> = None;
    let mut flush = |f: &mut fmt::Formatter<'_>, (a, b): (u32, u32)| -> fmt::Result {
        if !first {
            f.write_str(",")?;
        }
        first = false;
        if a == b {
            write!(f, "{a}")
        } else {
            write!(f, "{a}-{b}")
        }
    };
    for id in ids {
        run = match run {
            Some((a, b)) if id == b + 1 => Some((a, id)),
            Some(r) => {
                flush(f, r)?;
                Some((id, id))
            }
            None => Some((id, id)),
        };
    }
    if let Some(r) = run {
        flush(f, r)?;
    }
    Ok(())
}

/// A set of CPU ids, stored as a bitset. Serialises as a Linux list string
/// (`"0-3,8"`). Its operations have the names of the standard collections,
/// as [`NumaMask`](crate::NumaMask)'s.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct CpuSet {
    words: Vec<u64>,
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        CpuSet { words: Vec::new() }
    }

    /// Parse a Linux list (`0-3,8-11`); the empty string is the empty set.
    pub fn parse(s: &str) -> Result<Self, ListParseError> {
        Ok(parse_id_list(s)?.into_iter().collect())
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }

    /// Add a CPU id.
    pub fn insert(&mut self, cpu: u32) {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
    }

    /// Remove a CPU id.
    pub fn remove(&mut self, cpu: u32) {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1 << b);
        }
        self.trim();
    }

    /// True when `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        self.words.get(w).is_some_and(|x| x & (1 << b) != 0)
    }

    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True when the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// CPU ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some(i as u32 * 64 + b)
            })
        })
    }

    /// Set union.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let words = (0..n)
            .map(|i| self.words.get(i).unwrap_or(&0) | other.words.get(i).unwrap_or(&0))
            .collect();
        CpuSet { words }
    }

    /// Set intersection.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let mut s = CpuSet {
            words: self
                .words
                .iter()
                .zip(&other.words)
                .map(|(a, b)| a & b)
                .collect(),
        };
        s.trim();
        s
    }

    /// Elements of `self` not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        let mut s = CpuSet {
            words: self
                .words
                .iter()
                .enumerate()
                .map(|(i, a)| a & !other.words.get(i).unwrap_or(&0))
                .collect(),
        };
        s.trim();
        s
    }

    /// True when every element of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.difference(other).is_empty()
    }

    /// True when the sets share an element.
    pub fn intersects(&self, other: &CpuSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<T: IntoIterator<Item = u32>>(iter: T) -> Self {
        let mut s = CpuSet::new();
        for c in iter {
            s.insert(c);
        }
        s
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_id_list(f, self.iter())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CpuSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        CpuSet::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        let s = CpuSet::parse("0-3,8-11, 64,130").unwrap();
        assert_eq!(s.len(), 10);
        assert_eq!(s.to_string(), "0-3,8-11,64,130");
        assert!(s.contains(64) && !s.contains(65));
    }

    #[test]
    fn bad_lists_name_the_problem() {
        assert_eq!(
            CpuSet::parse("3-1").unwrap_err().to_string(),
            "invalid id list \"3-1\": range 3-1 is reversed"
        );
        assert_eq!(
            CpuSet::parse("1,,2").unwrap_err().to_string(),
            "invalid id list \"1,,2\": empty element"
        );
        assert!(CpuSet::parse("a").is_err());
        assert!(CpuSet::parse("0-99999999").is_err());
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse("0-7").unwrap();
        let b = CpuSet::parse("4-11").unwrap();
        assert_eq!(a.union(&b).to_string(), "0-11");
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert_eq!(b.difference(&a).to_string(), "8-11");
        assert!(CpuSet::parse("5").unwrap().is_subset(&a));
        let mut c = CpuSet::parse("200").unwrap();
        c.remove(200);
        assert_eq!(c, CpuSet::new());
    }
}
