//! The JSON topology description:
//!
//! ```json
//! {"gpus": [{"index": 0, "id": "GPU-0", "numa": 0, "pci": "0000:07:00.0"}],
//!  "links": [[0, 1, "NV12"], [0, 1, "PXB"], [0, 2, "SYS"]]}
//! ```
//!
//! `index` is the GPU's position (each of 0..n-1 once, in any order), `id`
//! its device id (unique), `numa` its NUMA node (`null` or absent for
//! none), `pci` its PCI address (optional). `[i, j, label]` adds a link both
//! ways; a pair carries at most one PCIe level and one `NV<k>`; a pair
//! without entries has no link. Unknown keys are errors.
//!
//! [`describe`] writes a topology in this form, so what NVML or PCI
//! discovery found can be saved and used as a topology file.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use topomgr_sdk::NumaNodeId;

use super::{normalize_pci_address, ParseError};
use crate::link::Link;
use crate::topology::{Gpu, GpuTopology, LinkError, TopologyError};

/// The file's top level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Description {
    /// The GPUs.
    pub gpus: Vec<GpuEntry>,
    /// `[i, j, label]` entries (checked by [`build`], so that a malformed
    /// entry is named with what it should be).
    #[serde(default)]
    pub links: Vec<serde_json::Value>,
}

/// One GPU of [`Description::gpus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEntry {
    /// Position 0..n-1.
    pub index: usize,
    /// Device id.
    pub id: String,
    /// NUMA node, `null` for none.
    #[serde(default)]
    pub numa: Option<NumaNodeId>,
    /// PCI address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
}

/// Parses the JSON description.
pub fn parse(text: &str) -> Result<GpuTopology, ParseError> {
    if !text.trim_start().starts_with('{') {
        return Err(ParseError::new(
            "top level",
            r#"a JSON topology is an object: {"gpus": [...], "links": [...]}"#,
        ));
    }
    let de = &mut serde_json::Deserializer::from_str(text);
    let description: Description = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let location = if path == "." {
            "top level".to_owned()
        } else {
            path
        };
        ParseError::new(location, e.into_inner().to_string())
    })?;
    build(&description)
}

/// The topology a description states.
pub fn build(description: &Description) -> Result<GpuTopology, ParseError> {
    if description.gpus.is_empty() {
        return Err(ParseError::new("gpus", "no GPUs: list at least one"));
    }
    let mut gpus = Vec::with_capacity(description.gpus.len());
    for (k, entry) in description.gpus.iter().enumerate() {
        let pci = match &entry.pci {
            None => None,
            Some(p) => Some(normalize_pci_address(p).ok_or_else(|| {
                ParseError::new(
                    format!("gpus[{k}].pci"),
                    format!("`{p}` is not a PCI address (domain:bus:device.function, e.g. 0000:07:00.0)"),
                )
            })?),
        };
        gpus.push(Gpu {
            index: entry.index,
            id: entry.id.clone(),
            numa: entry.numa,
            pci,
        });
    }
    let mut topology = GpuTopology::new(gpus).map_err(|e| match e {
        TopologyError::IndexOutOfRange {
            position,
            index,
            count,
        } => ParseError::new(
            format!("gpus[{position}].index"),
            format!("{index} is out of range: the indices of {count} GPUs are 0..{count}"),
        ),
        TopologyError::DuplicateIndex {
            index,
            first,
            second,
        } => ParseError::new(
            format!("gpus[{second}].index"),
            format!("{index} is also the index of gpus[{first}]"),
        ),
        TopologyError::EmptyId { position } => {
            ParseError::new(format!("gpus[{position}].id"), "empty")
        }
        TopologyError::DuplicateId { id, first, second } => ParseError::new(
            format!("gpus[{second}].id"),
            format!("`{id}` is also the id of gpus[{first}]"),
        ),
    })?;
    // Which entry gave each pair its PCIe level / NVLink count.
    let mut given_by: HashMap<(usize, usize, bool), usize> = HashMap::new();
    for (k, entry) in description.links.iter().enumerate() {
        let location = format!("links[{k}]");
        let (a, b, label) = link_entry(entry).ok_or_else(|| {
            ParseError::new(
                location.clone(),
                format!(r#"a link is [i, j, "label"] with GPU indices i and j, found {entry}"#),
            )
        })?;
        let link: Link = label
            .parse()
            .map_err(|e| ParseError::new(location.clone(), format!("{e}")))?;
        let is_nv = matches!(link, Link::NvLink(_));
        topology.add_link(a, b, link).map_err(|e| {
            let message = match &e {
                LinkError::Duplicate { .. } => {
                    let first = given_by
                        .get(&(a.min(b), a.max(b), is_nv))
                        .map_or_else(String::new, |f| format!(" (from links[{f}])"));
                    format!("{e}{first}")
                }
                _ => e.to_string(),
            };
            ParseError::new(location.clone(), message)
        })?;
        given_by.insert((a.min(b), a.max(b), is_nv), k);
    }
    Ok(topology)
}

/// `[i, j, label]`.
fn link_entry(entry: &serde_json::Value) -> Option<(usize, usize, &str)> {
    match entry.as_array()?.as_slice() {
        [a, b, label] => Some((
            usize::try_from(a.as_u64()?).ok()?,
            usize::try_from(b.as_u64()?).ok()?,
            label.as_str()?,
        )),
        _ => None,
    }
}

/// The JSON description of `topology` (links: every pair once, PCIe level
/// first).
pub fn describe(topology: &GpuTopology) -> Description {
    let gpus = topology
        .gpus()
        .iter()
        .map(|g| GpuEntry {
            index: g.index,
            id: g.id.clone(),
            numa: g.numa,
            pci: g.pci.clone(),
        })
        .collect();
    let mut links = Vec::new();
    for a in 0..topology.len() {
        for b in a + 1..topology.len() {
            for link in topology.links(a, b).links() {
                links.push(serde_json::json!([a, b, link.to_string()]));
            }
        }
    }
    Description { gpus, links }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::PcieLevel;

    const GOOD: &str = r#"{
  "gpus": [
    {"index": 1, "id": "GPU-b", "numa": 1, "pci": "00000000:0F:00.0"},
    {"index": 0, "id": "GPU-a", "numa": 0, "pci": "0000:07:00.0"},
    {"index": 2, "id": "GPU-c", "numa": null}
  ],
  "links": [[0, 1, "NV12"], [1, 0, "SYS"], [2, 0, "PIX"]]
}"#;

    #[test]
    fn a_description_gives_gpus_by_index_and_symmetric_links() {
        let t = parse(GOOD).unwrap();
        let gpus: Vec<_> = t
            .gpus()
            .iter()
            .map(|g| {
                (
                    g.index,
                    g.id.as_str(),
                    g.numa.map(u32::from),
                    g.pci.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            gpus,
            [
                (0, "GPU-a", Some(0), Some("0000:07:00.0")),
                (1, "GPU-b", Some(1), Some("0000:0f:00.0")),
                (2, "GPU-c", None, None),
            ]
        );
        assert_eq!(t.links(1, 0).nvlinks, 12);
        assert_eq!(t.links(0, 1).pcie, Some(PcieLevel::System));
        assert_eq!(t.pair_score(0, 1), 1210);
        assert_eq!(t.pair_score(0, 2), 50);
        assert_eq!(t.pair_score(1, 2), 0);
    }

    #[test]
    fn describe_round_trips() {
        let t = parse(GOOD).unwrap();
        let d = describe(&t);
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            r#"{"gpus":[{"index":0,"id":"GPU-a","numa":0,"pci":"0000:07:00.0"},{"index":1,"id":"GPU-b","numa":1,"pci":"0000:0f:00.0"},{"index":2,"id":"GPU-c","numa":null}],"links":[[0,1,"SYS"],[0,1,"NV12"],[0,2,"PIX"]]}"#
        );
        assert_eq!(build(&d).unwrap(), t);
    }

    #[test]
    fn malformed_descriptions_name_the_field() {
        let gpus2 = r#""gpus": [{"index": 0, "id": "a"}, {"index": 1, "id": "b"}]"#;
        let cases: Vec<(String, &str, &str)> = vec![
            ("[]".into(), "top level", r#"a JSON topology is an object: {"gpus": [...], "links": [...]}"#),
            ("{\"gpus\": 3}".into(), "gpus", "invalid type: integer `3`, expected a sequence at line 1 column 10"),
            ("{\"gpus\": [], \"links\": []}".into(), "gpus", "no GPUs: list at least one"),
            (r#"{"gpus": [{"index": 0}]}"#.into(), "gpus[0]", "missing field `id` at line 1 column 22"),
            (
                r#"{"gpus": [{"index": 0, "id": "a", "colour": 1}]}"#.into(),
                "gpus[0].colour",
                "unknown field `colour`, expected one of `index`, `id`, `numa`, `pci` at line 1 column 42",
            ),
            (r#"{"gpus": [{"index": 0, "id": "a"}], "link": []}"#.into(), "link", "unknown field `link`, expected `gpus` or `links` at line 1 column 42"),
            (r#"{"gpus": [{"index": 0, "id": "a", "numa": -1}]}"#.into(), "gpus[0].numa", "NUMA node id -1 is out of range: topomgr supports node ids 0-255 at line 1 column 45"),
            (r#"{"gpus": [{"index": 0, "id": "a", "numa": 256}]}"#.into(), "gpus[0].numa", "NUMA node id 256 is out of range: topomgr supports node ids 0-255 at line 1 column 46"),
            (r#"{"gpus": [{"index": 0, "id": "a", "pci": "07:00.0"}]}"#.into(), "gpus[0].pci", "`07:00.0` is not a PCI address (domain:bus:device.function, e.g. 0000:07:00.0)"),
            (r#"{"gpus": [{"index": 0, "id": "a"}, {"index": 0, "id": "b"}]}"#.into(), "gpus[1].index", "0 is also the index of gpus[0]"),
            (r#"{"gpus": [{"index": 0, "id": "a"}, {"index": 2, "id": "b"}]}"#.into(), "gpus[1].index", "2 is out of range: the indices of 2 GPUs are 0..2"),
            (r#"{"gpus": [{"index": 0, "id": "a"}, {"index": 1, "id": "a"}]}"#.into(), "gpus[1].id", "`a` is also the id of gpus[0]"),
            (r#"{"gpus": [{"index": 0, "id": ""}]}"#.into(), "gpus[0].id", "empty"),
            (format!(r#"{{{gpus2}, "links": [[0, 1, "NV2", 3]]}}"#), "links[0]", r#"a link is [i, j, "label"] with GPU indices i and j, found [0,1,"NV2",3]"#),
            (format!(r#"{{{gpus2}, "links": [[0, 1]]}}"#), "links[0]", r#"a link is [i, j, "label"] with GPU indices i and j, found [0,1]"#),
            (format!(r#"{{{gpus2}, "links": [[0, -1, "SYS"]]}}"#), "links[0]", r#"a link is [i, j, "label"] with GPU indices i and j, found [0,-1,"SYS"]"#),
            (format!(r#"{{{gpus2}, "links": [[0, 1, 2]]}}"#), "links[0]", r#"a link is [i, j, "label"] with GPU indices i and j, found [0,1,2]"#),
            (format!(r#"{{{gpus2}, "links": [[0, 1, "NVX"]]}}"#), "links[0]", "unknown link label `NVX` (known: SYS, SOC, NODE, PHB, PXB, PIX, BOARD, NV1..NV18)"),
            (format!(r#"{{{gpus2}, "links": [[0, 2, "SYS"]]}}"#), "links[0]", "GPU index 2 does not exist (2 GPUs: 0..2)"),
            (format!(r#"{{{gpus2}, "links": [[1, 1, "SYS"]]}}"#), "links[0]", "a link from GPU 1 to itself"),
            (
                format!(r#"{{{gpus2}, "links": [[0, 1, "NV2"], [0, 1, "SYS"], [1, 0, "NV2"]]}}"#),
                "links[2]",
                "GPUs 1 and 0 already have NV2; a pair has at most one PCIe level and one NVLink count, so NV2 cannot be added (from links[0])",
            ),
        ];
        for (text, location, message) in cases {
            let err = parse(&text).unwrap_err();
            assert_eq!(
                (err.location.as_str(), err.message.as_str()),
                (location, message),
                "{text}"
            );
        }
    }
}
