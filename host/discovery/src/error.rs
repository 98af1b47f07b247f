//! [`DiscoveryError`]: everything that can go wrong while reading sysfs.

use std::io;
use std::path::PathBuf;

use topomgr_sdk::{MAX_NUMA_NODES, MAX_NUMA_NODE_ID};

/// An error reading the machine's topology from sysfs.
///
/// Every variant names the path it is about, and the parse variants quote what
/// was found, so an operator can go and look at the file.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The sysfs root does not look like sysfs: `devices/system/cpu` is missing.
    #[error(
        "{}: no such directory; is {} a sysfs root (like /sys, or the sys directory of a recorded tree)?",
        path.display(),
        root.display()
    )]
    NotSysfs {
        /// The sysfs root that was given.
        root: PathBuf,
        /// The directory that was expected under it.
        path: PathBuf,
    },
    /// A file or directory exists (or is mandatory) but could not be read.
    #[error("cannot read {}: {cause}", path.display())]
    Read {
        /// What was read.
        path: PathBuf,
        /// The I/O error.
        cause: io::Error,
    },
    /// A file holds something other than what the kernel writes there.
    #[error("{}: expected {expected}, found {found:?}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the kernel writes there.
        expected: &'static str,
        /// What the file holds (trimmed, shortened when long).
        found: String,
    },
    /// A mandatory file is missing (none of its accepted alternatives exists).
    #[error("{}: missing {what}", path.display())]
    Missing {
        /// The directory that should hold it.
        path: PathBuf,
        /// The file(s) that were looked for.
        what: &'static str,
    },
    /// A NUMA node id beyond what a [`topomgr_sdk::NumaMask`] can hold.
    #[error(
        "{}: NUMA node id {id} is out of range: topomgr supports NUMA node ids 0-{last}",
        path.display(),
        last = MAX_NUMA_NODE_ID
    )]
    NodeIdOutOfRange {
        /// The node directory.
        path: PathBuf,
        /// Its id.
        id: u32,
    },
    /// More NUMA nodes than topomgr merges at once.
    #[error(
        "{}: {count} NUMA nodes; topomgr supports at most {max} NUMA nodes on one machine",
        path.display(),
        max = MAX_NUMA_NODES
    )]
    TooManyNodes {
        /// The `devices/system/node` directory.
        path: PathBuf,
        /// How many node directories it holds.
        count: usize,
    },
    /// A distance row whose length matches neither the node directories nor
    /// the kernel's `online` / `possible` node lists.
    #[error(
        "{}: expected {expected} distances (one per NUMA node {nodes}), found {found} in {text:?}",
        path.display()
    )]
    DistanceCount {
        /// The `distance` file.
        path: PathBuf,
        /// Number of NUMA nodes.
        expected: usize,
        /// The node ids, as a list (`0-3`).
        nodes: String,
        /// Number of values in the row.
        found: usize,
        /// The row.
        text: String,
    },
    /// Two NUMA nodes claim the same CPU.
    #[error("{}: CPU {cpu} is also in the cpulist of NUMA node {other}", path.display())]
    CpuInTwoNodes {
        /// The directory of the second node.
        path: PathBuf,
        /// The CPU.
        cpu: u32,
        /// The first node that claimed it.
        other: u32,
    },
    /// A value does not fit the data model (e.g. a byte count beyond `u64`).
    #[error("{}: {what} {value} is too large", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// What the value is.
        what: &'static str,
        /// The value as found.
        value: String,
    },
}
