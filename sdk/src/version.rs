//! The SDK's version and the version of its binary interface, which the
//! host compares with a plugin's at load (see the crate's compatibility
//! rule).

/// The version of this SDK crate.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Version of the binary interface exchanged with plugins (the shapes of
/// the SDK's `src/ffi/abi.rs`): a host refuses a plugin whose root module
/// reports a different value. `1` was SDK 0.1; `2` was SDK 0.2 (256-bit
/// masks, JSON pods and allocations, named calls); `3` is SDK 0.3
/// (`restore` answers the reconcile report as JSON).
pub const SDK_ABI_VERSION: u32 = 3;
