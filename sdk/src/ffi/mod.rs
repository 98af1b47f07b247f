//! The stable binary interface between the host and a provider plugin.
//!
//! This is the only module of the SDK that uses `abi_stable` types. Vendors
//! never touch it (it is hidden from the documentation):
//! [`export_provider!`](crate::export_provider) builds the root module from a
//! safe [`Provider`](crate::Provider), and the host's loader converts back to the SDK's
//! ordinary types through [`ProviderHandle`].
//!
//! # What crosses the boundary, and how
//!
//! The *binary* interface is frozen for an SDK minor series (all `0.3.x`)
//! and lives in one file, [`abi`]: the root module [`ProviderMod`]
//! (`sdk_abi_version` + `new`), the provider object's method table
//! [`FfiProvider`] and every `#[repr(C)]` type they reach. abi_stable checks
//! all of it at load; [`SDK_ABI_VERSION`] names it. The other files are
//! the two sides of the boundary (`adapter.rs`: the plugin's, `handle.rs`:
//! the host's) and the conversions between them.
//!
//! * **Typed, fixed shapes** where speed matters and the shape is the
//!   kubelet's own: hints ([`FfiHint`]: a 256-bit mask, "any", preferred;
//!   [`FfiHintSet`]: explicit list or compact intervals) cross as plain
//!   structs, so a provider answering all 255 masks of an 8-node machine
//!   costs one vector copy. The merged hint handed to `allocate` is an
//!   [`FfiHint`] too. Errors are [`FfiError`] (reason, message), checkpoints
//!   bytes.
//! * **JSON** for everything that may grow: the constructor's input (the
//!   [`Machine`](crate::Machine), the config table, the state directory, the provider name:
//!   one object), the pod and container of every call, the
//!   [`Allocation`](crate::Allocation) a
//!   plugin returns, the [`Reconciled`](crate::Reconciled) report `restore`
//!   answers, and the requests and answers of named calls. Readers on both
//!   sides ignore fields they do not know, and every field added after
//!   `0.3.0` has a default, so a patch release may add fields in either
//!   direction without breaking a plugin or a host built before it.
//! * **Named calls** ([`FfiProvider::call`]: a method name and a JSON
//!   request, answering JSON, or `None` for a method the plugin does not
//!   know) are how provider methods are added without changing the method
//!   table: a host calls a new method by name, a plugin built before the
//!   method existed answers `None`, and the host uses the method's documented
//!   default. `0.3.0` has three: [`METHOD_PREFERRED_ALLOCATION`],
//!   [`METHOD_INVENTORY`] and [`METHOD_SHARE_POD`]; later 0.3 patches
//!   added [`METHOD_ASSIGNED_DEVICE_HINTS`], [`METHOD_EXCLUDE_CPUS`],
//!   [`METHOD_DEVICE_IDENTITIES`] and [`METHOD_RESIZE`].
//! * **Shared pod.** Sending the whole pod with every call makes admitting
//!   a pod of N containers cost N² (2N calls, each carrying N containers).
//!   A host that admits a pod first hands it to the plugin once with
//!   [`METHOD_SHARE_POD`]; when the plugin answers (it keeps the pod), the
//!   calls about that pod carry an empty pod string, which means "the pod
//!   last shared". A plugin built before the call answers `None` and keeps
//!   receiving the pod in full; a host built before it never sends an empty
//!   pod.
//! * CPU sets inside JSON are Linux list strings (`"0-3,8"`), which the host
//!   re-validates.
//!
//! # Versioning
//!
//! At load, abi_stable compares the SDK crate version the plugin was built
//! with against the host's (the plugin's `0.MINOR` must not be older than
//! the host's) and the full layout of [`ProviderMod`] and everything
//! reachable from it. The host then compares [`ProviderMod::sdk_abi_version`]
//! with its own [`SDK_ABI_VERSION`], which changes exactly when the binary
//! interface above changes (with a new minor version).

pub mod abi;
mod adapter;
mod convert;
mod handle;

pub use abi::*;
pub use adapter::{construct_in_process, in_process, panic_message, root_module};
pub use convert::{
    discard_log, hints_from_ffi, hints_to_ffi, init_json, level_from_u8, level_to_u8,
    INVALID_INPUT_REASON, INVALID_OUTPUT_REASON, PANIC_REASON,
};
pub use handle::{construct, ProviderHandle};

#[cfg(test)]
mod tests;
