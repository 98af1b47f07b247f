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
#[non_exhaustive]
pub struct ContainerView {
    /// Container name, unique in the pod.
    pub name: String,
    /// Requests (defaulted from limits where Kubernetes does so).
    pub requests: ResourceList,
    /// Limits.
    pub limits: ResourceList,
    /// An init container with `restartPolicy: Always` (a sidecar).
    #[serde(default)]
    pub sidecar: bool,
}

impl ContainerView {
    /// A container named `name` without requests or limits.
    pub fn new(name: impl Into<String>) -> Self {
        ContainerView {
            name: name.into(),
            requests: ResourceList::new(),
            limits: ResourceList::new(),
            sidecar: false,
        }
    }

    /// With these requests.
    pub fn with_requests(mut self, requests: ResourceList) -> Self {
        self.requests = requests;
        self
    }

    /// With these limits.
    pub fn with_limits(mut self, limits: ResourceList) -> Self {
        self.limits = limits;
        self
    }

    /// As a sidecar (an init container with `restartPolicy: Always`).
    pub fn with_sidecar(mut self, sidecar: bool) -> Self {
        self.sidecar = sidecar;
        self
    }

    /// The limit for `resource`, 0 when absent.
    pub fn limit(&self, resource: &str) -> u64 {
        self.limits.get(resource).copied().unwrap_or(0)
    }

    /// The request for `resource`, 0 when absent.
    pub fn request(&self, resource: &str) -> u64 {
        self.requests.get(resource).copied().unwrap_or(0)
    }

    /// Whether the container on its own would be Guaranteed: non-zero `cpu`
    /// and `memory` requests equal to their limits (the kubelet's
    /// `IsContainerEquivalentQOSGuaranteed`, which decides which containers
    /// of a pod with pod-level resources may get exclusive CPUs and memory).
    pub fn is_guaranteed_equivalent(&self) -> bool {
        ["cpu", "memory"].iter().all(|r| {
            let request = self.request(r);
            request != 0 && request == self.limit(r)
        })
    }
}

/// The pod-level `spec.resources` of a pod (Kubernetes 1.34+ pod-level
/// resources), in the same canonical units as [`ResourceList`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PodResources {
    /// `spec.resources.requests`.
    #[serde(default)]
    pub requests: ResourceList,
    /// `spec.resources.limits`.
    #[serde(default)]
    pub limits: ResourceList,
}

impl PodResources {
    /// Pod-level `requests` and `limits`.
    pub fn new(requests: ResourceList, limits: ResourceList) -> Self {
        PodResources { requests, limits }
    }
}

/// A pod as providers see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
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
    /// The pod-level `spec.resources`, when the manifest sets them
    /// (Kubernetes 1.34+); `None` otherwise. Container requests and limits
    /// are as the manifest gives them either way.
    #[serde(default)]
    pub resources: Option<PodResources>,
}

impl PodView {
    /// A pod without containers or pod-level resources.
    pub fn new(
        uid: impl Into<String>,
        name: impl Into<String>,
        namespace: impl Into<String>,
        qos: QosClass,
    ) -> Self {
        PodView {
            uid: uid.into(),
            name: name.into(),
            namespace: namespace.into(),
            qos,
            init_containers: Vec::new(),
            containers: Vec::new(),
            resources: None,
        }
    }

    /// With these init containers (sidecars included).
    pub fn with_init_containers(mut self, init_containers: Vec<ContainerView>) -> Self {
        self.init_containers = init_containers;
        self
    }

    /// With these app containers.
    pub fn with_containers(mut self, containers: Vec<ContainerView>) -> Self {
        self.containers = containers;
        self
    }

    /// With pod-level resources.
    pub fn with_resources(mut self, resources: Option<PodResources>) -> Self {
        self.resources = resources;
        self
    }

    /// Whether the pod sets pod-level resources the kubelet's resource
    /// managers look at: `cpu`, `memory` or `hugepages-*` in
    /// `spec.resources` requests or limits (Kubernetes'
    /// `IsPodLevelResourcesSet`).
    pub fn sets_pod_level_resources(&self) -> bool {
        self.resources.as_ref().is_some_and(|r| {
            r.requests
                .keys()
                .chain(r.limits.keys())
                .any(|k| k == "cpu" || k == "memory" || k.starts_with("hugepages-"))
        })
    }

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
        self.effective(|c| c.request(resource))
    }

    /// The pod's effective limit for `resource`, aggregated over its
    /// containers like [`Self::effective_request`] (the kubelet's
    /// `PodLimits` over container limits, which its Device Manager uses for
    /// pod scope). Pod-level [`resources`](Self::resources) are not applied.
    pub fn effective_limit(&self, resource: &str) -> u64 {
        self.effective(|c| c.limit(resource))
    }

    fn effective(&self, amount: impl Fn(&ContainerView) -> u64) -> u64 {
        let mut sidecars = 0u64;
        let mut init_max = 0u64;
        for c in &self.init_containers {
            let r = amount(c);
            if c.sidecar {
                sidecars = sidecars.saturating_add(r);
            } else {
                init_max = init_max.max(sidecars.saturating_add(r));
            }
        }
        let apps = self
            .containers
            .iter()
            .fold(sidecars, |acc, c| acc.saturating_add(amount(c)));
        init_max.max(apps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, u64)]) -> ResourceList {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn guaranteed_equivalence_needs_equal_cpu_and_memory() {
        let c = |req: &[(&str, u64)], lim: &[(&str, u64)]| {
            ContainerView::new("c")
                .with_requests(list(req))
                .with_limits(list(lim))
                .is_guaranteed_equivalent()
        };
        let both = [("cpu", 2000), ("memory", 1 << 30)];
        assert!(c(&both, &both));
        assert!(!c(&[("cpu", 2000)], &[("cpu", 2000)]));
        assert!(!c(&both, &[("cpu", 2000), ("memory", 2 << 30)]));
        assert!(!c(
            &[("cpu", 0), ("memory", 1)],
            &[("cpu", 0), ("memory", 1)]
        ));
        assert!(!c(&[], &[]));
    }

    #[test]
    fn pod_level_resources_count_only_cpu_memory_and_hugepages() {
        let pod = |r: Option<PodResources>| {
            PodView::new("u", "p", "ns", QosClass::Guaranteed)
                .with_resources(r)
                .sets_pod_level_resources()
        };
        assert!(!pod(None));
        assert!(!pod(Some(PodResources::default())));
        assert!(pod(Some(PodResources::new(
            list(&[("cpu", 1000)]),
            list(&[])
        ))));
        assert!(pod(Some(PodResources::new(
            list(&[]),
            list(&[("hugepages-2Mi", 2 << 20)])
        ))));
        assert!(!pod(Some(PodResources::new(
            list(&[("example.com/x", 1)]),
            list(&[])
        ))));
    }
}
