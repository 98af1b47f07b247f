//! The plugin side of the Node Resource Interface (NRI) of containerd (1.7
//! with NRI enabled, 2.x) and CRI-O (1.26+): a plugin connects to the
//! runtime's Unix socket, registers, and is called before containers are
//! created, updated and stopped; its answers adjust the container (cpuset,
//! memory nodes, environment…) or fail the operation.
//!
//! On the socket: NRI's connection multiplexing (`mux`), ttrpc framing on
//! each logical connection (`ttrpc`, with why it is not the `ttrpc` crate),
//! the `nri.pkg.api.v1alpha1` messages ([`api`]). A plugin implements
//! [`Plugin`] and runs [`connect_and_serve`] once or
//! [`serve_with_reconnect`] to follow runtime restarts.
//!
//! ```no_run
//! use std::sync::Arc;
//! use topomgr_nri::api::{Container, CreateContainerResponse, PodSandbox};
//! use topomgr_nri::{Event, EventMask, HandlerResult, Plugin};
//!
//! struct Pinner;
//! impl Plugin for Pinner {
//!     async fn create_container(
//!         &self,
//!         _pod: PodSandbox,
//!         _container: Container,
//!     ) -> HandlerResult<CreateContainerResponse> {
//!         Ok(CreateContainerResponse::default())
//!     }
//! }
//!
//! # async fn run() -> Result<(), topomgr_nri::NriError> {
//! let events = EventMask::empty().with(Event::CreateContainer);
//! topomgr_nri::connect_and_serve(
//!     "/var/run/nri/nri.sock".as_ref(), "topomgr", "50", events, Arc::new(Pinner),
//! ).await
//! # }
//! ```

pub mod api;
mod budget;
mod connection;
mod error;
mod events;
mod mux;
mod plugin;
mod reconnect;
mod runtime_client;
mod ttrpc;

#[cfg(test)]
mod fake_runtime_tests;

pub use api::Event;
pub use budget::{
    answer_budget, answer_deadline, past_answer_deadline, with_answer_deadline,
    DEFAULT_REQUEST_TIMEOUT,
};
pub use connection::connect_and_serve;
pub use error::NriError;
pub use events::EventMask;
pub use mux::FrameError;
pub use plugin::{HandlerResult, Plugin, PluginError};
pub use reconnect::{serve_with_reconnect, Backoff, ConnectionStatus};
pub use runtime_client::RuntimeClient;

/// The runtime's default NRI socket (upstream `DefaultSocketPath`).
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
