//! # topomgr-provider-sriov
//!
//! The SR-IOV NIC hint provider of topomgr: virtual functions (and other
//! network and accelerator PCI functions) pooled exactly as the SR-IOV
//! network device plugin (`k8snetworkplumbingwg/sriov-network-device-plugin`)
//! pools them, from the plugin's own `config.json`, with the environment
//! variables the plugin gives containers.
//!
//! The provider ([`plugin::SriovPlugin`], exported as this cdylib's topomgr
//! plugin) lists the pools' devices to the SDK's device toolkit, which
//! answers hints, allocation, init-container reuse, release, checkpoints and
//! the inventory as the kubelet's Device Manager; the provider adds the
//! environment. Its parts:
//! * [`config`]: `[providers.sriov.config]` and the plugin's `resourceList`
//!   (file or inline), validated, with errors naming the file, the entry and
//!   the key;
//! * [`device`]: the provider's view of a PCI device ([`device::DeviceView`])
//!   and which devices a device type considers; [`discovered`] fills the
//!   views from the machine the host discovered (`DISCOVERY.md` in this
//!   crate lists, field by field, where each comes from in sysfs);
//! * [`selector`] and [`pf_selector`]: the selector semantics;
//! * [`pool`]: the pools built from config and devices;
//! * [`info`] and [`env`](mod@env): `PCIDEVICE_<PREFIX>_<NAME>` and its `_INFO` JSON;
//! * [`link_type`]: netlink link type names for `linkTypes`;
//! * [`go_json`]: the Go `encoding/json` behaviour the plugin's formats
//!   depend on;
//! * [`plugin`]: the pools as toolkit devices.
//!
//! Enabled by `plugins.d/50-sriov.toml`:
//!
//! ```toml
//! [providers.sriov]
//! library = "topomgr_provider_sriov"
//! [providers.sriov.config]
//! config_file = "/etc/pcidp/config.json"   # relative: to topomgr's main config file
//! resource_prefix = "intel.com"            # the plugin's --resource-prefix (default)
//! ```

pub mod config;
pub mod device;
pub mod discovered;
pub mod env;
pub mod go_json;
pub mod info;
pub mod link_type;
pub mod pf_selector;
pub mod plugin;
pub mod pool;
pub mod selector;

pub use config::{ConfigError, ResourceConfig, SriovConfig};
pub use device::{DeviceType, DeviceView, HostFacts, PfLink};
pub use plugin::SriovPlugin;
pub use pool::{Pool, PoolDevice, Pools};
pub use selector::Selector;

topomgr_sdk::export_device_plugin!(SriovPlugin);
