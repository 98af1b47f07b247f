//! Topologies of well-known machines, for tests and benchmarks: the test
//! fixtures of go-gpuallocator (`gpuallocator/common_test.go` at commit
//! 876e7b7: `NewDGX1PascalNode`, `NewDGX1VoltaNode`, `New4xRTX8000Node`)
//! and a 16-GPU DGX-2-like machine (upstream's `NewDGX2VoltaNode` is
//! empty). GPU `i` has id `GPU-<i>`, as upstream's `NewTestGPU`.

use crate::link::Link;
use crate::topology::{Gpu, GpuTopology};

/// A topology of `n` GPUs (`GPU-<i>`, no NUMA node) with the given links
/// (`(a, b, label)`, added both ways).
///
/// # Panics
/// On a bad label or link: fixtures are code, not input.
pub fn from_links(n: usize, links: &[(usize, usize, &str)]) -> GpuTopology {
    let gpus = (0..n)
        .map(|index| Gpu {
            index,
            id: format!("GPU-{index}"),
            numa: None,
            pci: None,
        })
        .collect();
    let mut topology = GpuTopology::new(gpus).expect("fixture GPUs are valid");
    for &(a, b, label) in links {
        let link: Link = label.parse().expect("fixture labels are valid");
        topology
            .add_link(a, b, link)
            .expect("fixture links are valid");
    }
    topology
}

/// Upstream's `NewDGX1PascalNode`: 8 P100, one NVLink along a hybrid cube
/// mesh, two PCIe trees joined across the sockets.
pub fn dgx1_pascal() -> GpuTopology {
    let mut links = vec![
        (0, 1, "NV1"),
        (0, 2, "NV1"),
        (0, 3, "NV1"),
        (0, 4, "NV1"),
        (1, 2, "NV1"),
        (1, 3, "NV1"),
        (1, 5, "NV1"),
        (2, 3, "NV1"),
        (2, 6, "NV1"),
        (3, 7, "NV1"),
        (4, 5, "NV1"),
        (4, 6, "NV1"),
        (4, 7, "NV1"),
        (5, 6, "NV1"),
        (5, 7, "NV1"),
        (6, 7, "NV1"),
        (0, 1, "PHB"),
        (0, 2, "PIX"),
        (0, 3, "PHB"),
        (1, 2, "PHB"),
        (1, 3, "PIX"),
        (2, 3, "PHB"),
        (4, 5, "PHB"),
        (4, 6, "PIX"),
        (4, 7, "PHB"),
        (5, 6, "PHB"),
        (5, 7, "PIX"),
        (6, 7, "PHB"),
    ];
    links.extend(cross_socket());
    from_links(8, &links)
}

/// Upstream's `NewDGX1VoltaNode`: 8 V100, one or two NVLinks along a hybrid
/// cube mesh, two PCIe trees joined across the sockets.
pub fn dgx1_volta() -> GpuTopology {
    let mut links = vec![
        (0, 1, "NV1"),
        (0, 2, "NV1"),
        (0, 3, "NV2"),
        (0, 4, "NV2"),
        (1, 2, "NV2"),
        (1, 3, "NV1"),
        (1, 5, "NV2"),
        (2, 3, "NV2"),
        (2, 6, "NV1"),
        (3, 7, "NV1"),
        (4, 5, "NV1"),
        (4, 6, "NV1"),
        (4, 7, "NV2"),
        (5, 6, "NV2"),
        (5, 7, "NV1"),
        (6, 7, "NV2"),
        (0, 1, "PIX"),
        (0, 2, "PHB"),
        (0, 3, "PHB"),
        (1, 2, "PHB"),
        (1, 3, "PHB"),
        (2, 3, "PIX"),
        (4, 5, "PIX"),
        (4, 6, "PHB"),
        (4, 7, "PHB"),
        (5, 6, "PHB"),
        (5, 7, "PHB"),
        (6, 7, "PIX"),
    ];
    links.extend(cross_socket());
    from_links(8, &links)
}

/// `SYS` between GPUs 0-3 and 4-7.
fn cross_socket() -> Vec<(usize, usize, &'static str)> {
    (0..4)
        .flat_map(|a| (4..8).map(move |b| (a, b, "SYS")))
        .collect()
}

/// Upstream's `New4xRTX8000Node`: two NVLink bridges (0-3, 1-2) across two
/// sockets; the bridged pairs have no PCIe level.
pub fn rtx8000_x4() -> GpuTopology {
    from_links(
        4,
        &[
            (0, 3, "NV2"),
            (1, 2, "NV2"),
            (0, 1, "NODE"),
            (0, 2, "SYS"),
            (1, 3, "SYS"),
            (2, 3, "NODE"),
        ],
    )
}

/// A 16-GPU DGX-2-like machine as NVML shows it: six NVLinks between every
/// pair (through NVSwitch, credited as [`crate::nvml`] does), and a PCIe
/// tree of two GPUs per switch (`PIX`), two switches per host-bridge port
/// (`PXB`), eight GPUs per socket (`NODE`), `SYS` across sockets.
pub fn dgx2() -> GpuTopology {
    let mut links = Vec::new();
    for a in 0..16 {
        for b in a + 1..16 {
            links.push((a, b, "NV6"));
            let level = if a / 2 == b / 2 {
                "PIX"
            } else if a / 4 == b / 4 {
                "PXB"
            } else if a / 8 == b / 8 {
                "NODE"
            } else {
                "SYS"
            };
            links.push((a, b, level));
        }
    }
    from_links(16, &links)
}
