//! [`PodView`] / [`ContainerView`]: what providers see of a workload.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Kubernetes QoS class, computed the way Kubernetes does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QosClass {
    /// Every container has equal CPU and memory requests and limits.
    Guaranteed,
    /// Some request or limit, but not Guaranteed.
    Burstable,
    /// No CPU or memory request or limit at all.
    BestEffort,
}

impl QosClass {
    /// The Kubernetes spelling (`"Guaranteed"`).
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// Resource name -> quantity: `cpu` in millicores, `memory` and `hugepages-*`
/// in bytes, everything else (devices) as an integer count.
pub type ResourceList = BTreeMap<String, u64>;

/// One container of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerView {
    /// Container name, unique in the pod.
    pub name: String,
    /// Requests (defaulted from limits where Kubernetes does so).
    pub requests: ResourceList,
    /// Limits.
    pub limits: ResourceList,
    /// An init container with `restartPolicy: Always` (a sidecar).
    pub sidecar: bool,
}

impl ContainerView {
    /// The request for `resource`, 0 when absent.
    pub fn request(&self, resource: &str) -> u64 {
        self.requests.get(resource).copied().unwrap_or(0)
    }
}

/// A pod as providers see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodView {
    /// Pod uid.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// QoS class.
    pub qos: QosClass,
    /// Init containers in order (sidecars included, with `sidecar: true`).
    pub init_containers: Vec<ContainerView>,
    /// App containers in order.
    pub containers: Vec<ContainerView>,
}

impl PodView {
    /// The container named `name`, init or app.
    pub fn container(&self, name: &str) -> Option<&ContainerView> {
        self.init_containers
            .iter()
            .chain(&self.containers)
            .find(|c| c.name == name)
    }

    /// The pod's effective request for `resource`, as the kubelet's pod scope
    /// computes it: the larger of the largest init-container request (counting
    /// the sidecars started before it) and the sum of app containers plus sidecars.
    pub fn effective_request(&self, resource: &str) -> u64 {
        let mut sidecars = 0u64;
        let mut init_max = 0u64;
        for c in &self.init_containers {
            let r = c.request(resource);
            if c.sidecar {
                sidecars = sidecars.saturating_add(r);
            } else {
                init_max = init_max.max(sidecars.saturating_add(r));
            }
        }
        let apps = self
            .containers
            .iter()
            .fold(sidecars, |acc, c| acc.saturating_add(c.request(resource)));
        init_max.max(apps)
    }
}
