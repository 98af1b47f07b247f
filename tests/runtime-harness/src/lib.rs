//! Test support shared by the crates whose tests drive a real container
//! runtime (`topomgr-nri`'s, the OCI hook's): a private [`Containerd`] 1.7
//! with NRI enabled, an image built locally from busybox-static, and a
//! [`CriClient`] that runs pods and containers as the kubelet does and
//! looks inside them; a private [`Podman`] running containers from a
//! busybox-static root filesystem; an [`ApiServer`] (etcd and
//! kube-apiserver, no kubelet).
//!
//! Every test that uses it is `#[ignore = "needs root, a cpuset cgroup and
//! containerd 1.7"]` (or `... and podman`); run explicitly without the
//! prerequisites, it fails with what is missing ([`Containerd::start`],
//! [`Podman::new`]). CI installs the runtimes with `.ci/install-runtimes`.

mod apiserver;
mod cleanup;
mod containerd;
pub mod cri;
mod dra;
mod image;
mod kube;
mod podman;
mod ports;
mod prereq;

use std::path::{Path, PathBuf};

pub use apiserver::{ApiServer, NEEDS as API_SERVER_NEEDS};
pub use containerd::Containerd;
pub use cri::{ContainerSpec, CriClient, Placement, Pod, PodSpec, Qos};
pub use dra::{pci_addresses, DraDriver, DRA_DRIVER};
pub use image::IMAGE;
pub use kube::{
    require_kubernetes, KubeBinaries, KubeNode, KubeOptions, RunningContainer, DEFAULT_KUBE_DIR,
    NODE_NAME,
};
pub use podman::Podman;
pub use prereq::{
    require_containerd, require_containerd_line, require_podman, ContainerdLine, PodmanRuntimes,
    Runtimes, DEFAULT_CONTAINERD2_DIR, DEFAULT_CONTAINERD_DIR,
};

/// Why the harness could not set up or drive the runtime.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{0}")]
    Setup(String),
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The runtime answered a CRI call with an error (`message` is its text,
    /// e.g. `failed to get NRI adjustment for container: …`).
    #[error("CRI {call} failed: {message}")]
    Cri { call: &'static str, message: String },
}

impl HarnessError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        HarnessError::Setup(message.into())
    }

    pub(crate) fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        HarnessError::Io {
            what,
            path: path.to_owned(),
            source,
        }
    }
}
