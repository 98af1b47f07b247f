//! # topomgr-provider-sriov
//!
//! The SR-IOV NIC hint provider of topomgr: virtual functions (and other
//! network and accelerator PCI functions) pooled exactly as the SR-IOV
//! network device plugin (`k8snetworkplumbingwg/sriov-network-device-plugin`)
//! pools them, from the plugin's own `config.json`, with the environment
//! variables the plugin gives containers.
//!
//! This crate is the provider's engine, independent of the host:
//! * [`config`]: `[providers.sriov.config]` and the plugin's `resourceList`
//!   (file or inline), validated, with errors naming the file, the entry and
//!   the key;
//! * [`device`]: the provider's view of a PCI device ([`device::DeviceView`])
//!   and which devices a device type considers;
//! * [`selector`] and [`pf_selector`]: the selector semantics;
//! * [`pool`]: the pools built from config and devices;
//! * [`info`] and [`env`]: `PCIDEVICE_<PREFIX>_<NAME>` and its `_INFO` JSON;
//! * [`link_type`]: netlink link type names for `linkTypes`;
//! * [`go_json`]: the Go `encoding/json` behaviour the plugin's formats
//!   depend on.
//!
//! The `Provider` implementation (hints and allocation through the SDK's
//! device toolkit) and the filling of [`device::DeviceView`] from the host's
//! discovered machine are not in this crate yet: until they are, the cdylib
//! exports no provider and no drop-in enables it. `DISCOVERY.md` in this
//! crate lists, field by field, where the view comes from and what discovery
//! must add.

pub mod config;
pub mod device;
pub mod env;
pub mod go_json;
pub mod info;
pub mod link_type;
pub mod pf_selector;
pub mod pool;
pub mod selector;

pub use config::{ConfigError, ResourceConfig, SriovConfig};
pub use device::{DeviceType, DeviceView, HostFacts, PfLink};
pub use pool::{Pool, PoolDevice, Pools};
pub use selector::Selector;
