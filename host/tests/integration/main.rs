//! The host's integration tests, in one binary (as ripgrep keeps them): each
//! module drives `topomgr` end to end as a user would, with the real plugin
//! `.so` files the workspace builds (see `common`), the recorded machines of
//! `../shared/corpus` and the fixtures under `tests/` at the repository root.
//!
//! Run one module with `cargo test -p topomgr --test integration MODULE::`.

mod common;

mod admission;
mod api;
mod architecture;
mod cgroup;
mod config;
mod config_refusals;
mod cpu_provider;
mod crash;
mod daemon;
mod daemon_limits;
mod demo;
mod device_identity;
mod discovery;
mod gpu;
mod hotplug;
mod kube_api;
mod kube_node;
mod kubernetes;
mod manifests;
mod memory_provider;
mod merge;
mod node_lock;
mod nri;
mod oci_hook;
mod owners;
mod plugins;
mod podman;
mod podresources;
mod reconcile;
mod resize;
mod run;
mod run_daemon;
mod service_units;
mod sriov;
mod state;
mod state_fixture;
mod state_limits;
mod validation;
