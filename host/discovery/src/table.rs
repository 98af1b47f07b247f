//! The table view of a [`Machine`] (`topomgr topology --output table`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Display, Formatter};

use topomgr_sdk::quantity::hugepage_resource_name;
use topomgr_sdk::{CpuSet, Machine, NumaNode, PciDevice};

/// Render `machine` for operators: a summary line, then per NUMA node its
/// socket, CPUs, memory, hugepages (named as Kubernetes names the
/// resources, `hugepages-2Mi`, in columns aligned across nodes) and PCI
/// devices, then devices without a node,
/// online CPUs without a node, offline CPUs, and the distances: a matrix up to
/// [`DISTANCE_MATRIX_MAX_NODES`] nodes, else one line per node listing the
/// nodes at each distance (`node 0:  10: 0  22: 1-3  26: 4-11`).
pub fn render_table(machine: &Machine) -> String {
    MachineTable(machine).to_string()
}

struct MachineTable<'a>(&'a Machine);

impl Display for MachineTable<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let m = self.0;
        let sockets: BTreeSet<u32> = m
            .cpus
            .iter()
            .filter(|c| c.online)
            .map(|c| c.socket)
            .collect();
        writeln!(
            f,
            "{} NUMA node{}, {} socket{}, {} CPU{} ({} online), {} PCI device{}",
            m.numa_nodes.len(),
            plural(m.numa_nodes.len()),
            sockets.len(),
            plural(sockets.len()),
            m.cpus.len(),
            plural(m.cpus.len()),
            m.online_cpus().len(),
            m.pci_devices.len(),
            plural(m.pci_devices.len()),
        )?;
        let widths = HugepageWidths::of(&m.numa_nodes);
        for node in &m.numa_nodes {
            writeln!(f)?;
            write_node(f, m, node, &widths)?;
            for dev in m.pci_devices.iter().filter(|d| d.numa == Some(node.id)) {
                writeln!(f, "  {}", PciLine(dev, m))?;
            }
        }
        let unattached: Vec<&PciDevice> = m
            .pci_devices
            .iter()
            .filter(|d| d.numa.is_none_or(|id| m.numa_node(id).is_none()))
            .collect();
        if !unattached.is_empty() {
            writeln!(f)?;
            writeln!(f, "PCI devices without a NUMA node:")?;
            for dev in unattached {
                writeln!(f, "  {}", PciLine(dev, m))?;
            }
        }
        let without_node = m.cpus_without_node();
        if !without_node.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "CPUs in no NUMA node: {without_node} (shared pool only, never exclusive)"
            )?;
        }
        let offline: topomgr_sdk::CpuSet =
            m.cpus.iter().filter(|c| !c.online).map(|c| c.id).collect();
        if !offline.is_empty() {
            writeln!(f)?;
            writeln!(f, "Offline CPUs: {offline}")?;
        }
        writeln!(f)?;
        write_distances(f, &m.numa_nodes)
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Widths of the hugepage columns, the same for every node so that the
/// rows of all nodes line up.
#[derive(Default)]
struct HugepageWidths {
    name: usize,
    total: usize,
    free: usize,
}

impl HugepageWidths {
    fn of(nodes: &[NumaNode]) -> HugepageWidths {
        let mut w = HugepageWidths::default();
        for (size, pages) in nodes.iter().flat_map(|n| &n.hugepages) {
            w.name = w.name.max(hugepage_name(size).len());
            w.total = w.total.max(pages.total.to_string().len());
            w.free = w.free.max(pages.free.to_string().len());
        }
        w
    }
}

/// A hugepage size key of the machine (`2048kB`, as sysfs names it) as
/// Kubernetes names the resource (`hugepages-2Mi`); a key in another form
/// is shown as is after `hugepages-`.
fn hugepage_name(key: &str) -> String {
    match NumaNode::hugepage_size_bytes(key) {
        Some(bytes) => hugepage_resource_name(bytes),
        None => format!("hugepages-{key}"),
    }
}

/// The sockets of the CPUs of `node` (`socket 0`, `sockets 0-1`), or
/// `None` for a node without CPUs.
fn sockets_of(m: &Machine, node: &NumaNode) -> Option<String> {
    // A set of ids printed as a Linux list (`0-1`), like the CPUs.
    let sockets: CpuSet = m
        .cpus
        .iter()
        .filter(|c| c.numa == Some(node.id))
        .map(|c| c.socket)
        .collect();
    match sockets.len() {
        0 => None,
        1 => Some(format!("socket {sockets}")),
        _ => Some(format!("sockets {sockets}")),
    }
}

fn write_node(
    f: &mut Formatter<'_>,
    m: &Machine,
    node: &NumaNode,
    widths: &HugepageWidths,
) -> fmt::Result {
    let cpus = if node.cpus.is_empty() {
        "none".to_string()
    } else {
        format!("{} ({})", node.cpus, node.cpus.len())
    };
    write!(f, "NUMA node {}: ", node.id)?;
    if let Some(sockets) = sockets_of(m, node) {
        write!(f, "{sockets}, ")?;
    }
    writeln!(
        f,
        "CPUs {}, memory {} ({} free)",
        cpus,
        Bytes(node.memory_bytes),
        Bytes(node.memory_free_bytes)
    )?;
    let mut sizes: Vec<(&String, _)> = node.hugepages.iter().collect();
    sizes.sort_by_key(|(key, _)| NumaNode::hugepage_size_bytes(key));
    for (size, pages) in sizes {
        let name = format!("{}:", hugepage_name(size));
        writeln!(
            f,
            "  {name:<nw$} {:>tw$} total, {:>fw$} free",
            pages.total,
            pages.free,
            nw = widths.name + 1,
            tw = widths.total,
            fw = widths.free,
        )?;
    }
    Ok(())
}

/// One device: ids, class, driver, interfaces, RDMA devices, SR-IOV
/// (`SR-IOV 4/128 VFs` on a PF, `VF 2 of 0000:18:00.0 (ens1f0)` on a VF:
/// its index, its PF and the PF's first interface) and `default route`
/// when an interface carries the host's default route.
struct PciLine<'a>(&'a PciDevice, &'a Machine);

impl Display for PciLine<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let d = self.0;
        fn hex(s: &str) -> &str {
            s.strip_prefix("0x").unwrap_or(s)
        }
        write!(
            f,
            "PCI {} {}:{} class {}",
            d.address,
            hex(&d.vendor),
            hex(&d.device),
            d.class
        )?;
        if let Some(driver) = &d.driver {
            write!(f, " driver {driver}")?;
        }
        if !d.net.is_empty() {
            write!(f, " net {}", d.net.join(","))?;
        }
        if !d.rdma.is_empty() {
            write!(f, " rdma {}", d.rdma.join(","))?;
        }
        if let Some(sriov) = &d.sriov {
            write!(f, " SR-IOV {}/{} VFs", sriov.num_vfs, sriov.total_vfs)?;
        }
        if let Some(pf) = &d.physfn {
            match d.vf_index {
                Some(n) => write!(f, " VF {n} of {pf}")?,
                None => write!(f, " VF of {pf}")?,
            }
            // Machine::new sorts the devices by address.
            let devices = &self.1.pci_devices;
            let pf_name = devices
                .binary_search_by(|p| p.address.cmp(pf))
                .ok()
                .and_then(|i| devices[i].net.first());
            if let Some(name) = pf_name {
                write!(f, " ({name})")?;
            }
        }
        if d.default_route {
            write!(f, " default route")?;
        }
        Ok(())
    }
}

/// Bytes in binary units with one decimal (`8.0 GiB`), plain below 1 KiB.
struct Bytes(u64);

impl Display for Bytes {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut value = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.1} {}", UNITS[unit])
    }
}

/// Up to this many NUMA nodes the distances print as a matrix; beyond it
/// (a 64x64 matrix is 200 columns wide) as distance classes per node.
pub const DISTANCE_MATRIX_MAX_NODES: usize = 16;

fn write_distances(f: &mut Formatter<'_>, nodes: &[NumaNode]) -> fmt::Result {
    if nodes.len() > DISTANCE_MATRIX_MAX_NODES {
        return write_distance_classes(f, nodes);
    }
    writeln!(f, "NUMA distances:")?;
    let width = nodes
        .iter()
        .flat_map(|n| {
            std::iter::once(n.id.to_string().len())
                .chain(n.distances.values().map(|d| d.to_string().len()))
        })
        .max()
        .unwrap_or(1)
        .max(2);
    let first = width.max(4);
    write!(f, "  {:>first$}", "node")?;
    for n in nodes {
        write!(f, " {:>width$}", n.id)?;
    }
    writeln!(f)?;
    for row in nodes {
        write!(f, "  {:>first$}", row.id)?;
        for col in nodes {
            match row.distances.get(&col.id) {
                Some(d) => write!(f, " {d:>width$}")?,
                None => write!(f, " {:>width$}", "-")?,
            }
        }
        writeln!(f)?;
    }
    Ok(())
}

/// One line per node: each distance it has, ascending, with the nodes at
/// that distance as a list (`10: 0  22: 1-3  26: 4-11`).
fn write_distance_classes(f: &mut Formatter<'_>, nodes: &[NumaNode]) -> fmt::Result {
    writeln!(
        f,
        "NUMA distances (per node, distance: nodes at that distance):"
    )?;
    let width = nodes
        .iter()
        .map(|n| n.id.to_string().len())
        .max()
        .unwrap_or(1);
    for node in nodes {
        let mut classes: BTreeMap<u32, CpuSet> = BTreeMap::new();
        for (other, distance) in &node.distances {
            classes.entry(*distance).or_default().insert(other.get());
        }
        write!(f, "  node {:>width$}:", node.id)?;
        for (distance, others) in &classes {
            write!(f, "  {distance}: {others}")?;
        }
        writeln!(f)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{render_table, Bytes};
    use topomgr_sdk::{Cpu, CpuSet, HugePages, Machine, NumaNode, NumaNodeId};

    /// Sockets per node (one, two, none), hugepage sizes named as
    /// Kubernetes names them whatever their length (a size sysfs would not
    /// write is shown as given, first), and columns aligned across nodes.
    #[test]
    fn sockets_and_hugepage_columns() {
        let id = NumaNodeId::from;
        let mut odd = NumaNode::new(id(2), CpuSet::new()).with_hugepages(64, 123_456);
        odd.hugepages.insert("7MB".to_owned(), HugePages::new(1, 0));
        let machine = Machine::new(
            vec![
                NumaNode::new(id(0), CpuSet::from_iter([0, 1]))
                    .with_hugepages(2048, 512)
                    .with_hugepages(16 << 20, 2),
                NumaNode::new(id(1), CpuSet::from_iter([2, 3])).with_hugepages(1 << 20, 4),
                odd,
            ],
            vec![
                Cpu::new(0, Some(id(0))).with_socket(0),
                Cpu::new(1, Some(id(0))).with_socket(0),
                Cpu::new(2, Some(id(1))).with_socket(0),
                Cpu::new(3, Some(id(1))).with_socket(1),
            ],
            vec![],
        );
        let table = render_table(&machine);
        let nodes: Vec<&str> = table
            .lines()
            .filter(|l| l.starts_with("NUMA node ") || l.starts_with("  hugepages"))
            .collect();
        assert_eq!(
            nodes,
            [
                "NUMA node 0: socket 0, CPUs 0-1 (2), memory 0 B (0 B free)",
                "  hugepages-2Mi:     512 total,    512 free",
                "  hugepages-16Gi:      2 total,      2 free",
                "NUMA node 1: sockets 0-1, CPUs 2-3 (2), memory 0 B (0 B free)",
                "  hugepages-1Gi:       4 total,      4 free",
                "NUMA node 2: CPUs none, memory 0 B (0 B free)",
                "  hugepages-7MB:       1 total,      0 free",
                "  hugepages-64Ki: 123456 total, 123456 free",
            ]
        );
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(Bytes(0).to_string(), "0 B");
        assert_eq!(Bytes(1023).to_string(), "1023 B");
        assert_eq!(Bytes(1536).to_string(), "1.5 KiB");
        assert_eq!(Bytes(8 << 30).to_string(), "8.0 GiB");
        assert_eq!(Bytes(7 << 29).to_string(), "3.5 GiB");
        assert_eq!(Bytes(u64::MAX).to_string(), "16.0 EiB");
    }
}
