//! [`GpuTopology`]: the GPUs of a machine (index, device id, NUMA node, PCI
//! address) and the links between every pair, wherever they came from
//! (topology file, NVML or PCI sysfs).

use std::collections::HashMap;
use std::fmt::Write as _;

use topomgr_sdk::NumaNodeId;

use crate::link::{Link, PcieLevel};

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Position among the machine's GPUs, 0..n-1 (NVML's index; upstream's
    /// `Device.Index`, which the simple policy sorts by).
    pub index: usize,
    /// Device id handed to workloads (the UUID on real machines).
    pub id: String,
    /// NUMA node of the GPU's PCI device; `None` when the machine has none.
    pub numa: Option<NumaNodeId>,
    /// PCI address (`0000:07:00.0`), when known.
    pub pci: Option<String>,
}

/// The links between one pair of GPUs: at most one PCIe level and an
/// NVLink count, as NVML reports them (upstream adds one link of each kind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PairLinks {
    /// PCIe common ancestor, when known.
    pub pcie: Option<PcieLevel>,
    /// Number of NVLinks (0: none).
    pub nvlinks: u8,
}

impl PairLinks {
    /// The pair's links, PCIe level first (upstream's order).
    pub fn links(self) -> impl Iterator<Item = Link> {
        let pcie = self.pcie.map(Link::Pcie);
        let nv = (self.nvlinks > 0).then_some(Link::NvLink(self.nvlinks));
        pcie.into_iter().chain(nv)
    }

    /// Upstream's pair score: the sum of the links' scores.
    pub fn score(self) -> u32 {
        self.links().map(Link::score).sum()
    }
}

/// GPUs that cannot form a topology.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// An index outside 0..n-1.
    #[error("GPU #{position} has index {index}, but the indices of {count} GPUs are 0..{count}")]
    IndexOutOfRange {
        /// Position of the GPU in the list given.
        position: usize,
        /// Its index.
        index: usize,
        /// Number of GPUs.
        count: usize,
    },
    /// Two GPUs with one index.
    #[error("GPUs #{first} and #{second} both have index {index}")]
    DuplicateIndex {
        /// The index.
        index: usize,
        /// Position of the first GPU with it.
        first: usize,
        /// Position of the second.
        second: usize,
    },
    /// An empty device id.
    #[error("GPU #{position} has an empty id")]
    EmptyId {
        /// Position of the GPU in the list given.
        position: usize,
    },
    /// Two GPUs with one device id.
    #[error("GPUs #{first} and #{second} both have id `{id}`")]
    DuplicateId {
        /// The id.
        id: String,
        /// Position of the first GPU with it.
        first: usize,
        /// Position of the second.
        second: usize,
    },
}

/// A link that cannot be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// A GPU index the topology does not have.
    #[error("GPU index {index} does not exist ({count} GPUs: 0..{count})")]
    OutOfRange {
        /// The index.
        index: usize,
        /// Number of GPUs.
        count: usize,
    },
    /// A link from a GPU to itself.
    #[error("a link from GPU {index} to itself")]
    SelfLink {
        /// The index.
        index: usize,
    },
    /// A second PCIe level or NVLink count for one pair.
    #[error("GPUs {a} and {b} already have {existing}; a pair has at most one PCIe level and one NVLink count, so {new} cannot be added")]
    Duplicate {
        /// One GPU.
        a: usize,
        /// The other.
        b: usize,
        /// The link already there.
        existing: Link,
        /// The link refused.
        new: Link,
    },
}

/// The GPUs of a machine and the links between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuTopology {
    gpus: Vec<Gpu>,
    /// `pairs[a * n + b]`, symmetric.
    pairs: Vec<PairLinks>,
    by_id: HashMap<String, usize>,
}

impl GpuTopology {
    /// A topology of `gpus` (in any order; their indices must be exactly
    /// 0..n-1 and their ids unique and non-empty) without links. Errors name
    /// GPUs by their position in `gpus`.
    pub fn new(mut gpus: Vec<Gpu>) -> Result<Self, TopologyError> {
        let count = gpus.len();
        let mut position_of_index = vec![None; count];
        let mut position_of_id: HashMap<&str, usize> = HashMap::with_capacity(count);
        for (position, gpu) in gpus.iter().enumerate() {
            let slot =
                position_of_index
                    .get_mut(gpu.index)
                    .ok_or(TopologyError::IndexOutOfRange {
                        position,
                        index: gpu.index,
                        count,
                    })?;
            if let Some(first) = *slot {
                return Err(TopologyError::DuplicateIndex {
                    index: gpu.index,
                    first,
                    second: position,
                });
            }
            *slot = Some(position);
            if gpu.id.is_empty() {
                return Err(TopologyError::EmptyId { position });
            }
            if let Some(&first) = position_of_id.get(gpu.id.as_str()) {
                return Err(TopologyError::DuplicateId {
                    id: gpu.id.clone(),
                    first,
                    second: position,
                });
            }
            position_of_id.insert(&gpu.id, position);
        }
        gpus.sort_by_key(|g| g.index);
        let by_id = gpus.iter().map(|g| (g.id.clone(), g.index)).collect();
        Ok(GpuTopology {
            pairs: vec![PairLinks::default(); count * count],
            gpus,
            by_id,
        })
    }

    /// A topology without GPUs.
    pub fn empty() -> Self {
        GpuTopology {
            gpus: Vec::new(),
            pairs: Vec::new(),
            by_id: HashMap::new(),
        }
    }

    /// Adds `link` between GPUs `a` and `b`, both ways.
    pub fn add_link(&mut self, a: usize, b: usize, link: Link) -> Result<(), LinkError> {
        let count = self.gpus.len();
        for index in [a, b] {
            if index >= count {
                return Err(LinkError::OutOfRange { index, count });
            }
        }
        if a == b {
            return Err(LinkError::SelfLink { index: a });
        }
        let pair = self.pairs[a * count + b];
        let updated = match link {
            Link::Pcie(level) => match pair.pcie {
                Some(existing) => {
                    return Err(LinkError::Duplicate {
                        a,
                        b,
                        existing: Link::Pcie(existing),
                        new: link,
                    })
                }
                None => PairLinks {
                    pcie: Some(level),
                    ..pair
                },
            },
            Link::NvLink(k) => {
                if pair.nvlinks > 0 {
                    return Err(LinkError::Duplicate {
                        a,
                        b,
                        existing: Link::NvLink(pair.nvlinks),
                        new: link,
                    });
                }
                PairLinks { nvlinks: k, ..pair }
            }
        };
        self.pairs[a * count + b] = updated;
        self.pairs[b * count + a] = updated;
        Ok(())
    }

    /// The GPUs, by index.
    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// Gives GPU `index` the PCI address `pci` (found in sysfs for a GPU
    /// its source named without one). An index out of range changes nothing.
    pub(crate) fn set_pci(&mut self, index: usize, pci: String) {
        if let Some(g) = self.gpus.get_mut(index) {
            g.pci = Some(pci);
        }
    }

    /// Number of GPUs.
    pub fn len(&self) -> usize {
        self.gpus.len()
    }

    /// Whether there are no GPUs.
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    /// The index of the GPU with device id `id`.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// The links between GPUs `a` and `b` (none for `a == b` or indices
    /// out of range).
    pub fn links(&self, a: usize, b: usize) -> PairLinks {
        let n = self.gpus.len();
        if a >= n || b >= n {
            return PairLinks::default();
        }
        self.pairs[a * n + b]
    }

    /// Upstream's score of the pair (0 for `a == b`).
    pub fn pair_score(&self, a: usize, b: usize) -> u32 {
        self.links(a, b).score()
    }

    /// The GPU×GPU part of `nvidia-smi topo -m`: one label per pair (the
    /// NVLink count where there is one, as nvidia-smi shows it, else the
    /// PCIe level, `-` for no link), plus each GPU's NUMA node and id.
    pub fn matrix_text(&self) -> String {
        let mut out = String::from("     ");
        for g in &self.gpus {
            let _ = write!(out, "\t{}", gpu_label(g.index));
        }
        out.push_str("\tNUMA Affinity\tid\n");
        for a in &self.gpus {
            out.push_str(&gpu_label(a.index));
            for b in &self.gpus {
                let cell = if a.index == b.index {
                    " X ".to_owned()
                } else {
                    let links = self.links(a.index, b.index);
                    if links.nvlinks > 0 {
                        Link::NvLink(links.nvlinks).to_string()
                    } else {
                        links
                            .pcie
                            .map_or_else(|| "-".to_owned(), |l| l.label().to_owned())
                    }
                };
                let _ = write!(out, "\t{cell}");
            }
            let numa = a.numa.map_or_else(|| "N/A".to_owned(), |n| n.to_string());
            let _ = writeln!(out, "\t{numa}\t{}", a.id);
        }
        out
    }
}

/// `GPU<i>`, the label `nvidia-smi topo -m` gives GPU `i`.
pub fn gpu_label(index: usize) -> String {
    format!("GPU{index}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: usize, id: &str) -> Gpu {
        Gpu {
            index,
            id: id.to_owned(),
            numa: None,
            pci: None,
        }
    }

    #[test]
    fn gpus_are_sorted_by_index_and_found_by_id() {
        let t = GpuTopology::new(vec![gpu(1, "b"), gpu(0, "a"), gpu(2, "c")]).unwrap();
        let ids: Vec<_> = t.gpus().iter().map(|g| g.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(t.index_of("b"), Some(1));
        assert_eq!(t.index_of("c"), Some(2));
        assert_eq!(t.index_of("z"), None);
    }

    #[test]
    fn bad_gpu_lists_are_refused_naming_the_gpus() {
        let cases = [
            (
                vec![gpu(0, "a"), gpu(2, "b")],
                "GPU #1 has index 2, but the indices of 2 GPUs are 0..2",
            ),
            (
                vec![gpu(0, "a"), gpu(0, "b")],
                "GPUs #0 and #1 both have index 0",
            ),
            (
                vec![gpu(0, "a"), gpu(1, "a")],
                "GPUs #0 and #1 both have id `a`",
            ),
            (vec![gpu(0, "")], "GPU #0 has an empty id"),
        ];
        for (gpus, msg) in cases {
            assert_eq!(GpuTopology::new(gpus).unwrap_err().to_string(), msg);
        }
    }

    #[test]
    fn links_are_symmetric_and_scored_as_upstream() {
        let mut t = GpuTopology::new(vec![gpu(0, "a"), gpu(1, "b"), gpu(2, "c")]).unwrap();
        t.add_link(0, 1, Link::Pcie(PcieLevel::MultiSwitch))
            .unwrap();
        t.add_link(1, 0, Link::NvLink(2)).unwrap();
        assert_eq!(t.pair_score(0, 1), 240);
        assert_eq!(t.pair_score(1, 0), 240);
        assert_eq!(t.pair_score(0, 2), 0);
        assert_eq!(t.pair_score(0, 0), 0);
        let links: Vec<_> = t.links(1, 0).links().collect();
        assert_eq!(links, [Link::Pcie(PcieLevel::MultiSwitch), Link::NvLink(2)]);
    }

    #[test]
    fn bad_links_are_refused() {
        let mut t = GpuTopology::new(vec![gpu(0, "a"), gpu(1, "b")]).unwrap();
        t.add_link(0, 1, Link::Pcie(PcieLevel::System)).unwrap();
        t.add_link(0, 1, Link::NvLink(4)).unwrap();
        let cases = [
            (0, 2, Link::NvLink(1), "GPU index 2 does not exist (2 GPUs: 0..2)"),
            (1, 1, Link::NvLink(1), "a link from GPU 1 to itself"),
            (
                1,
                0,
                Link::Pcie(PcieLevel::Node),
                "GPUs 1 and 0 already have SYS; a pair has at most one PCIe level and one NVLink count, so NODE cannot be added",
            ),
            (
                0,
                1,
                Link::NvLink(4),
                "GPUs 0 and 1 already have NV4; a pair has at most one PCIe level and one NVLink count, so NV4 cannot be added",
            ),
        ];
        for (a, b, link, msg) in cases {
            assert_eq!(t.add_link(a, b, link).unwrap_err().to_string(), msg);
        }
        assert_eq!(t.pair_score(0, 1), 410, "refused links change nothing");
    }

    #[test]
    fn matrix_text_shows_nvlinks_over_pcie_like_nvidia_smi() {
        let mut t = GpuTopology::new(vec![
            Gpu {
                numa: Some(NumaNodeId::from(1u8)),
                ..gpu(0, "GPU-a")
            },
            gpu(1, "GPU-b"),
        ])
        .unwrap();
        t.add_link(0, 1, Link::Pcie(PcieLevel::System)).unwrap();
        t.add_link(0, 1, Link::NvLink(12)).unwrap();
        assert_eq!(
            t.matrix_text(),
            "     \tGPU0\tGPU1\tNUMA Affinity\tid\n\
             GPU0\t X \tNV12\t1\tGPU-a\n\
             GPU1\tNV12\t X \tN/A\tGPU-b\n"
        );
    }
}
