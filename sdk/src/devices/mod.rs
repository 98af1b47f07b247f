//! The device toolkit: the kubelet's Device Manager for device providers.
//!
//! A device provider (GPUs, NIC virtual functions, FPGAs, any countable
//! device) lists its devices — an id, the NUMA node(s) or none, health,
//! attributes of its own — and the toolkit answers everything else exactly
//! as the kubelet's Device Manager (`pkg/kubelet/cm/devicemanager`) does:
//!
//! - **hints** ([`DeviceManager::topology_hints`],
//!   [`DeviceManager::pod_topology_hints`]): every NUMA mask with enough
//!   available (and reusable) devices, preferred at the narrowest width that
//!   could hold the request; devices without a NUMA node never count toward
//!   a mask; a resource without any topology has no preference; explicit
//!   lists up to 8 NUMA nodes, the compact form above; a container that
//!   already holds devices gets hints from them (an empty list when it holds
//!   a different number than it asks for);
//! - **allocation** ([`DeviceManager::allocate`]): devices an init container
//!   left for reuse first, then devices aligned with the merged hint (the
//!   provider's [`DeviceHooks::preferred_allocation`] choosing among them
//!   when they are more than enough), then the provider's choice among all
//!   available devices, then unaligned ones, then those without a node;
//!   init-container devices reused by later containers; re-allocating a
//!   container returns what it holds;
//! - **release**, **checkpoint** and **restore** as the SDK's reconcile
//!   contract asks ([`Provider::restore`](crate::Provider::restore)):
//!   saved devices are found again by their identity (PCI address, serial:
//!   [`Device::with_pci_address`], [`Device::with_serial`]) under whatever
//!   id and resource they have now, else by resource and id; a device that
//!   is gone stays its container's until released, and comes back to it;
//! - **devices assigned elsewhere** ([`DeviceManager::assigned_device_hints`]):
//!   the hints of devices a container already holds from the kubelet's
//!   device plugins, named by UUID, index or PCI address, so that topomgr
//!   aligns its CPUs and memory with them;
//! - **inventory** per NUMA zone (for the NodeResourceTopology export), and
//!   **`GetPreferredAllocation`** routed to the provider's choice.
//!
//! Where the kubelet iterates Go sets in random order the toolkit is
//! deterministic: devices are considered in the order the provider lists
//! them, and the provider's preferred devices in the order it returns them.
//!
//! A provider that is only devices implements [`DevicePlugin`] (a
//! constructor listing [`Devices`]) and [`DeviceHooks`], and exports it
//! with [`export_device_plugin!`](crate::export_device_plugin); see the
//! worked example in the crate documentation. A provider that manages
//! more drives a [`DeviceManager`] from its own [`Provider`](crate::Provider).
//!
//! ```
//! use topomgr_sdk::devices::{Device, DeviceManager, Devices};
//! use topomgr_sdk::{testkit, NumaNodeId, TopologyHint};
//!
//! let machine = testkit::machine(2, 2);
//! let node = |n: u8| Some(NumaNodeId::from(n));
//! let devices = Devices::new().resource("example.com/fpga", vec![
//!     Device::new("fpga-0", node(0)),
//!     Device::new("fpga-1", node(1)),
//!     Device::new("fpga-2", node(1)),
//! ]);
//! let mut manager = DeviceManager::new(&machine, devices).unwrap();
//! let pod = testkit::guaranteed_pod("a", &[("example.com/fpga", 2)]);
//! let hints = manager.topology_hints(&pod, &pod.containers[0]).unwrap();
//! testkit::assert_hints(&hints, "example.com/fpga", &[0, 1], Some(&["1:true", "0-1:false"]));
//! let alloc = manager
//!     .allocate(&pod, &pod.containers[0], &testkit::hint("1:true"), &mut ())
//!     .unwrap();
//! assert_eq!(alloc.devices["example.com/fpga"], ["fpga-1", "fpga-2"]);
//! ```

mod allocate;
mod device;
mod hints;
mod manager;
mod plugin;
mod reconcile;
mod saved;
#[cfg(test)]
mod tests;

pub use device::{normalize_pci_address, Device, Devices};
pub use hints::{DEVICE_NODE_ATTRIBUTE, INDEX_ATTRIBUTE};
pub use manager::DeviceManager;
pub use plugin::{DeviceHooks, DevicePlugin, DeviceProvider};
