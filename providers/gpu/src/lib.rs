//! # topomgr-provider-gpu
//!
//! NVIDIA GPUs for topomgr: where they come from and which ones a workload
//! gets inside the NUMA-aligned set.
//!
//! * [`discovery`]: the GPUs and the links between every pair, from the
//!   configured `topology_file` ([`topology_file`]: an `nvidia-smi topo -m`
//!   capture or a JSON description), else NVML ([`nvml`], `libnvidia-ml`
//!   loaded at run time), else the NVIDIA display controllers among the
//!   host's PCI devices ([`pci`], NUMA only).
//! * [`choice`]: go-gpuallocator's `best-effort` (NVLink/PCIe-aware
//!   partition search, in bounded time) and `simple` policies, by device
//!   id: [`choice::Chooser::choose`] is the device plugin's
//!   `GetPreferredAllocation`.
//! * [`driver`]: each GPU's device minor (`/dev/nvidiaN`), UUID and MIG
//!   device UUIDs, from NVML or the driver's `/proc/driver/nvidia` files,
//!   so that CDI device nodes and `MIG-…` UUIDs name their GPU.
//! * [`config`]: `resource`, `allocation_policy`, `topology_file`,
//!   `nvml_library`, `proc_root`.
//! * [`gpus::Gpus`]: all of the above from the config table and the
//!   machine: the resource, the devices (id, NUMA node) and the choice,
//!   plus the allocation's `NVIDIA_VISIBLE_DEVICES`.
//! * [`plugin::GpuPlugin`]: [`gpus::Gpus`] on the SDK's device toolkit (the
//!   kubelet's Device Manager: hints, allocation, reuse, checkpoints),
//!   exported as the topomgr plugin `libtopomgr_provider_gpu.so`.
//!
//! Test oracles and fixtures (`choice::exhaustive`, `fixtures`: the
//! machines of upstream's tests) are not in the plugin: they are built for
//! this crate's tests and, with the feature `oracles`, for the benchmarks.
//!
//! Pair scores ([`link`]): SYS 10, NODE 20, PHB 30, PXB 40, PIX 50, BOARD
//! 60, NV*k* 100·*k*, summed over a pair's links. NVSwitch crediting: see
//! [`nvml`].

pub mod choice;
pub mod config;
pub mod discovery;
pub mod driver;
#[cfg(any(test, feature = "oracles"))]
pub mod fixtures;
pub mod gpus;
pub mod link;
pub mod nvml;
pub mod pci;
pub mod plugin;
pub mod topology;
pub mod topology_file;
