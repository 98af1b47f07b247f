//! Kubernetes resource quantities: the SDK's parser ([`topomgr_sdk::quantity`]),
//! re-exported so host modules keep using `crate::quantity`.

pub use topomgr_sdk::quantity::*;
