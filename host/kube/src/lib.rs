//! topomgr's side of the Kubernetes API server, a leaf crate:
//!
//! - [`access`]: where the API server is and how to authenticate (a
//!   kubeconfig file, or the pod's service account in-cluster);
//! - [`http`]: one HTTP/1.1 connection over rustls, kept and re-opened;
//! - [`nrt_push`]: the node's `NodeResourceTopology` object applied with
//!   server-side apply after each change, coalesced, rate-limited and
//!   retried with backoff in a task of its own, so the state thread only
//!   hands over the latest object and never waits;
//! - [`events`]: a refused pod's `Event`, counted up across the kubelet's
//!   retries as client-go's event recorder does;
//! - [`pods`]: a pod's object read, for the NRI face's pod scope;
//! - [`resource_slices`]: the devices of a DRA driver's pool as its
//!   ResourceSlices publish them (read, for the NRI face's claims).
//!
//! The daemon (`topomgr-daemon`) builds the objects; this crate only
//! carries them.

pub mod access;
mod backoff;
pub mod events;
pub mod http;
pub mod nrt_push;
pub mod pods;
pub mod resource_slices;

pub use access::{Access, AccessError, Source};
pub use http::{ApiClient, ApiError, Method};
