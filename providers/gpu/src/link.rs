//! [`Link`]: one connection between two GPUs, as `nvidia-smi topo -m` labels
//! it, and its score in go-gpuallocator's best-effort policy.
//!
//! Upstream (`gpuallocator/besteffort_policy.go`, `calculateGPUPairScore`)
//! scores a pair as the sum over its links: a PCIe level (the common
//! ancestor NVML reports) and the number of NVLinks between the two GPUs.

use std::fmt;
use std::str::FromStr;

/// The most NVLinks upstream scores between two GPUs (`EighteenNVLINKLinks`).
pub const MAX_NVLINKS: u8 = 18;

/// How far apart two GPUs are in the PCIe hierarchy (NVML's
/// `nvmlGpuTopologyLevel_t`), nearest last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PcieLevel {
    /// `SYS` (`SOC` in old captures): across the SMP interconnect between
    /// NUMA nodes (`NVML_TOPOLOGY_SYSTEM`).
    System,
    /// `NODE`: across host bridges within one NUMA node (`NVML_TOPOLOGY_NODE`).
    Node,
    /// `PHB`: through a PCIe host bridge (`NVML_TOPOLOGY_HOSTBRIDGE`).
    HostBridge,
    /// `PXB`: through several PCIe bridges (`NVML_TOPOLOGY_MULTIPLE`).
    MultiSwitch,
    /// `PIX`: through at most one PCIe bridge (`NVML_TOPOLOGY_SINGLE`).
    SingleSwitch,
    /// `BOARD`: two GPUs on one board (`NVML_TOPOLOGY_INTERNAL`).
    Board,
}

impl PcieLevel {
    /// Upstream's score of this level.
    pub fn score(self) -> u32 {
        match self {
            PcieLevel::System => 10,
            PcieLevel::Node => 20,
            PcieLevel::HostBridge => 30,
            PcieLevel::MultiSwitch => 40,
            PcieLevel::SingleSwitch => 50,
            PcieLevel::Board => 60,
        }
    }

    /// The label `nvidia-smi topo -m` prints.
    pub fn label(self) -> &'static str {
        match self {
            PcieLevel::System => "SYS",
            PcieLevel::Node => "NODE",
            PcieLevel::HostBridge => "PHB",
            PcieLevel::MultiSwitch => "PXB",
            PcieLevel::SingleSwitch => "PIX",
            PcieLevel::Board => "BOARD",
        }
    }
}

/// One link between two GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// Their PCIe common ancestor.
    Pcie(PcieLevel),
    /// `NV<k>`: a bonded set of `k` NVLinks (1..=18).
    NvLink(u8),
}

impl Link {
    /// Upstream's score of this link: `SYS` 10, `NODE` 20, `PHB` 30, `PXB`
    /// 40, `PIX` 50, `BOARD` 60, `NV<k>` 100·k.
    pub fn score(self) -> u32 {
        match self {
            Link::Pcie(level) => level.score(),
            Link::NvLink(k) => 100 * u32::from(k),
        }
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Link::Pcie(level) => f.write_str(level.label()),
            Link::NvLink(k) => write!(f, "NV{k}"),
        }
    }
}

/// A label that is not one `nvidia-smi topo -m` prints for a GPU pair.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown link label `{0}` (known: SYS, SOC, NODE, PHB, PXB, PIX, BOARD, NV1..NV18)")]
pub struct UnknownLabel(pub String);

impl FromStr for Link {
    type Err = UnknownLabel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let level = match s {
            "SYS" | "SOC" => Some(PcieLevel::System),
            "NODE" => Some(PcieLevel::Node),
            "PHB" => Some(PcieLevel::HostBridge),
            "PXB" => Some(PcieLevel::MultiSwitch),
            "PIX" => Some(PcieLevel::SingleSwitch),
            "BOARD" => Some(PcieLevel::Board),
            _ => None,
        };
        if let Some(level) = level {
            return Ok(Link::Pcie(level));
        }
        s.strip_prefix("NV")
            .filter(|k| {
                !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) && !k.starts_with('0')
            })
            .and_then(|k| k.parse::<u8>().ok())
            .filter(|k| (1..=MAX_NVLINKS).contains(k))
            .map(Link::NvLink)
            .ok_or_else(|| UnknownLabel(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_score_and_print_as_upstream() {
        let table = [
            ("SYS", 10, "SYS"),
            ("SOC", 10, "SYS"),
            ("NODE", 20, "NODE"),
            ("PHB", 30, "PHB"),
            ("PXB", 40, "PXB"),
            ("PIX", 50, "PIX"),
            ("BOARD", 60, "BOARD"),
            ("NV1", 100, "NV1"),
            ("NV2", 200, "NV2"),
            ("NV12", 1200, "NV12"),
            ("NV18", 1800, "NV18"),
        ];
        for (label, score, printed) in table {
            let link: Link = label.parse().unwrap();
            assert_eq!(link.score(), score, "{label}");
            assert_eq!(link.to_string(), printed, "{label}");
        }
    }

    #[test]
    fn unknown_labels_are_refused() {
        for bad in [
            "", "X", "NV", "NV0", "NV19", "NV01", "nv2", "NV-1", "PCI", " SYS",
        ] {
            let err = bad.parse::<Link>().unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("unknown link label `{bad}` (known: SYS, SOC, NODE, PHB, PXB, PIX, BOARD, NV1..NV18)")
            );
        }
    }
}
