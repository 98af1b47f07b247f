//! One item of a `pfNames` or `rootDevices` selector: a physical function (by
//! interface name or PCI address), optionally followed by `#` and the VF
//! indices taken from it: `"ens2f0"`, `"ens2f0#0,2-7,9"`,
//! `"0000:86:00.0#0-1,3"`.
//!
//! Semantics, as the device plugin's `pkg/resources/deviceSelectors.go`
//! (`getItem`, `isSelected`) has them:
//! * the PF part matches case-insensitively (Go's `strings.EqualFold`);
//! * without `#` every function of the PF is selected; with it, a function
//!   is selected when its VF index is one of the listed indices or inside a
//!   listed `first-last` range (both ends included);
//! * a device that is not a VF (no VF index) is only selected by an item
//!   without `#`;
//! * of several items naming the same PF only the first is ever consulted,
//!   so the config loader refuses such lists (see [`first_duplicate`]).
//!
//! The plugin checks the index syntax only while filtering and then silently
//! selects nothing; here a malformed item is an error when the config loads.

use crate::go_json::decode::fold_eq;

/// A parsed `pfNames`/`rootDevices` item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PfSelector {
    /// The PF's interface name or PCI address, as written.
    pub pf: String,
    /// The selected VF index ranges (inclusive), `None` for every function.
    pub functions: Option<Vec<(u32, u32)>>,
}

/// Why a `pfNames`/`rootDevices` item is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PfSelectorError {
    /// Nothing before `#`, or an empty item.
    #[error("names no PF; write <PF>, or <PF>#<indices> such as ens2f0#0,2-7")]
    NoPf,
    /// More than one `#`.
    #[error("has more than one '#'; write <PF>#<index>,<first>-<last>,...")]
    ManyHashes,
    /// An empty entry in the index list (`p0#`, `p0#1,,2`).
    #[error("has an empty VF index list entry; write indices like 0,2-7,9")]
    EmptyIndex,
    /// An index that is not a non-negative decimal number.
    #[error("{0:?} is not a VF index (a number from 0)")]
    NotIndex(String),
    /// A range with more than one `-`.
    #[error("{0:?} is not a range <first>-<last>")]
    NotRange(String),
    /// A range whose first index is above its last: it would select nothing.
    #[error("range {0:?} is empty: its first index is above its last")]
    EmptyRange(String),
}

impl PfSelector {
    /// Parse one item.
    pub fn parse(item: &str) -> Result<Self, PfSelectorError> {
        let Some((pf, indices)) = item.split_once('#') else {
            if item.is_empty() {
                return Err(PfSelectorError::NoPf);
            }
            return Ok(PfSelector {
                pf: item.to_owned(),
                functions: None,
            });
        };
        if indices.contains('#') {
            return Err(PfSelectorError::ManyHashes);
        }
        if pf.is_empty() {
            return Err(PfSelectorError::NoPf);
        }
        let ranges = indices
            .split(',')
            .map(parse_entry)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PfSelector {
            pf: pf.to_owned(),
            functions: Some(ranges),
        })
    }

    /// Whether this item is about `pf` (case-insensitively).
    pub fn names(&self, pf: &str) -> bool {
        fold_eq(&self.pf, pf)
    }

    /// Whether a function with this VF index (`None`: not a VF, or its index
    /// is unknown) is selected.
    pub fn selects(&self, vf_index: Option<u32>) -> bool {
        match &self.functions {
            None => true,
            Some(ranges) => {
                vf_index.is_some_and(|i| ranges.iter().any(|&(lo, hi)| lo <= i && i <= hi))
            }
        }
    }
}

fn parse_entry(entry: &str) -> Result<(u32, u32), PfSelectorError> {
    if entry.is_empty() {
        return Err(PfSelectorError::EmptyIndex);
    }
    match entry.split_once('-') {
        None => {
            let i = parse_index(entry)?;
            Ok((i, i))
        }
        Some((first, last)) => {
            if first.is_empty() || last.is_empty() || last.contains('-') {
                return Err(PfSelectorError::NotRange(entry.to_owned()));
            }
            let (lo, hi) = (parse_index(first)?, parse_index(last)?);
            if lo > hi {
                return Err(PfSelectorError::EmptyRange(entry.to_owned()));
            }
            Ok((lo, hi))
        }
    }
}

fn parse_index(text: &str) -> Result<u32, PfSelectorError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PfSelectorError::NotIndex(text.to_owned()));
    }
    text.parse()
        .map_err(|_| PfSelectorError::NotIndex(text.to_owned()))
}

/// The item a device of PF `pf` is judged by: the first one naming `pf`.
pub fn item_for<'a>(items: &'a [PfSelector], pf: &str) -> Option<&'a PfSelector> {
    items.iter().find(|item| item.names(pf))
}

/// The first pair of items `(i, j)`, `i < j`, that name the same PF; the
/// plugin would never consult item `j`.
pub fn first_duplicate(items: &[PfSelector]) -> Option<(usize, usize)> {
    items.iter().enumerate().find_map(|(j, later)| {
        items[..j]
            .iter()
            .position(|earlier| earlier.names(&later.pf))
            .map(|i| (i, j))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_indices_and_ranges() {
        type Row<'a> = (&'a str, &'a str, Option<&'a [(u32, u32)]>);
        let table: &[Row] = &[
            ("ens2f0", "ens2f0", None),
            ("0000:86:00.0", "0000:86:00.0", None),
            ("netpf0#0,2-7,9", "netpf0", Some(&[(0, 0), (2, 7), (9, 9)])),
            (
                "0000:86:00.0#0-1,3,4",
                "0000:86:00.0",
                Some(&[(0, 1), (3, 3), (4, 4)]),
            ),
            ("p0#5-5", "p0", Some(&[(5, 5)])),
            ("p0#007", "p0", Some(&[(7, 7)])),
        ];
        for &(item, pf, functions) in table {
            let parsed = PfSelector::parse(item).unwrap_or_else(|e| panic!("{item}: {e}"));
            assert_eq!(parsed.pf, pf, "{item}");
            assert_eq!(parsed.functions.as_deref(), functions, "{item}");
        }
    }

    #[test]
    fn malformed_items_are_refused_with_the_reason() {
        let table = [
            (
                "",
                "names no PF; write <PF>, or <PF>#<indices> such as ens2f0#0,2-7",
            ),
            (
                "#1",
                "names no PF; write <PF>, or <PF>#<indices> such as ens2f0#0,2-7",
            ),
            (
                "p0#1#2",
                "has more than one '#'; write <PF>#<index>,<first>-<last>,...",
            ),
            (
                "p0#",
                "has an empty VF index list entry; write indices like 0,2-7,9",
            ),
            (
                "p0#1,,2",
                "has an empty VF index list entry; write indices like 0,2-7,9",
            ),
            ("p0#x", "\"x\" is not a VF index (a number from 0)"),
            ("p0#1, 2", "\" 2\" is not a VF index (a number from 0)"),
            ("p0#+3", "\"+3\" is not a VF index (a number from 0)"),
            ("p0#-1", "\"-1\" is not a range <first>-<last>"),
            ("p0#1-", "\"1-\" is not a range <first>-<last>"),
            ("p0#1-2-3", "\"1-2-3\" is not a range <first>-<last>"),
            (
                "p0#7-3",
                "range \"7-3\" is empty: its first index is above its last",
            ),
            (
                "p0#4294967296",
                "\"4294967296\" is not a VF index (a number from 0)",
            ),
        ];
        for (item, want) in table {
            let e = PfSelector::parse(item).expect_err(item);
            assert_eq!(e.to_string(), want, "{item}");
        }
    }

    /// The device plugin's pfName selector test table
    /// (`pkg/resources/deviceSelectors_test.go`, "should return devices
    /// matching interface PF name").
    #[test]
    fn upstream_pf_name_table() {
        let items: Vec<PfSelector> = ["ens0", "ens2f0#1", "ens2f1#0,3-5,7"]
            .iter()
            .map(|s| PfSelector::parse(s).unwrap())
            .collect();
        // (PF name, VF index, selected)
        let devices = [
            ("ens0", None, true),
            ("eth0", None, false),
            ("ens2f0", Some(1), true),
            ("ens2f1", Some(0), true),
            ("ens2f1", Some(1), false),
            ("ens2f1", Some(2), false),
            ("ens2f1", Some(3), true),
            ("ens2f1", Some(4), true),
            ("ens2f1", Some(5), true),
            ("ens2f1", Some(6), false),
            ("ens2f1", Some(7), true),
        ];
        for (pf, index, want) in devices {
            let got = item_for(&items, pf).is_some_and(|item| item.selects(index));
            assert_eq!(got, want, "{pf} VF {index:?}");
        }
    }

    /// The rootDevice table of the same upstream test file.
    #[test]
    fn upstream_root_device_table() {
        let items: Vec<PfSelector> = ["0000:86:00.0", "0000:86:00.1#1", "0000:86:00.2#0-2,5,7"]
            .iter()
            .map(|s| PfSelector::parse(s).unwrap())
            .collect();
        let devices = [
            ("0000:86:00.0", None, true),
            ("0000:a0:00.0", None, false),
            ("0000:86:00.1", Some(1), true),
            ("0000:86:00.2", Some(0), true),
            ("0000:86:00.2", Some(1), true),
            ("0000:86:00.2", Some(2), true),
            ("0000:86:00.2", Some(3), false),
            ("0000:86:00.2", Some(4), false),
            ("0000:86:00.2", Some(5), true),
            ("0000:86:00.2", Some(6), false),
            ("0000:86:00.2", Some(7), true),
        ];
        for (pf, index, want) in devices {
            let got = item_for(&items, pf).is_some_and(|item| item.selects(index));
            assert_eq!(got, want, "{pf} VF {index:?}");
        }
    }

    #[test]
    fn pf_part_matches_case_insensitively_and_non_vfs_only_without_indices() {
        let item = PfSelector::parse("0000:AF:00.0#0-3").unwrap();
        assert!(item.names("0000:af:00.0"));
        assert!(item.selects(Some(3)));
        assert!(!item.selects(Some(4)));
        assert!(!item.selects(None));
        assert!(PfSelector::parse("ENS1F0").unwrap().names("ens1f0"));
        assert!(PfSelector::parse("ens1f0").unwrap().selects(None));
    }

    #[test]
    fn duplicates_are_found_case_insensitively() {
        let parse = |items: &[&str]| -> Vec<PfSelector> {
            items
                .iter()
                .map(|s| PfSelector::parse(s).unwrap())
                .collect()
        };
        assert_eq!(
            first_duplicate(&parse(&["p0#0-1", "p1", "P0#4"])),
            Some((0, 2))
        );
        assert_eq!(first_duplicate(&parse(&["p0", "p1#2", "p1"])), Some((1, 2)));
        assert_eq!(first_duplicate(&parse(&["p0#0-1", "p1#4"])), None);
        assert_eq!(first_duplicate(&[]), None);
    }
}
