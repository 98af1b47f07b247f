//! How much state a node holds: the operator's limits on pods and
//! containers (config `[limits]`), and the fixed bounds on one pod's names
//! and resources. Together they bound the memory and the state file of a
//! node whatever its faces are asked: an admission past any of them is
//! refused with the limit and the key that raises it named, and changes
//! nothing.

use std::collections::BTreeSet;

use topomgr_sdk::PodView;

/// Default `[limits] max_pods`: the most pods held at once. The runtime
/// faces (NRI, the OCI hook) admit every container as a pod of its own, so
/// a node at the kubelet's `max-pods` (110 by default, at most about 250
/// on managed clusters) with several containers each, plus `topomgr run`
/// and API pods, stays below it.
pub const DEFAULT_MAX_PODS: usize = 2048;
/// Default `[limits] max_containers`: the most containers (init, app and
/// sidecar) of all pods held at once.
pub const DEFAULT_MAX_CONTAINERS: usize = 4096;
/// Default `[limits] max_containers_per_pod`: the most containers of one
/// pod (init, app and sidecar). Kubernetes sets no such limit, but its
/// object size (1.5 MiB in etcd) does; real pods have tens at most.
pub const DEFAULT_MAX_CONTAINERS_PER_POD: usize = 256;
/// The longest pod name, namespace or container name, in bytes: the
/// Kubernetes API server's limit for a DNS subdomain (names of other faces
/// are held to it too).
pub const MAX_NAME_BYTES: usize = 253;
/// The longest pod uid or resource name, in bytes: a qualified name (a
/// 253-byte prefix, `/`, a 63-byte name); also a stand-in uid
/// `namespace/name`.
pub const MAX_ID_BYTES: usize = 317;
/// The most distinct resources one container may request or limit.
pub const MAX_RESOURCES_PER_CONTAINER: usize = 64;

/// The reason of an admission refused for the number of pods held: the
/// kubelet's (`OutOfpods`, `pkg/kubelet/lifecycle/predicate.go`).
pub const OUT_OF_PODS: &str = "OutOfpods";
/// The reason of an admission refused for the number of containers held.
pub const OUT_OF_CONTAINERS: &str = "OutOfcontainers";
/// The reason of an admission refused because the pod's names or resources
/// are past a fixed bound.
pub const POD_TOO_LARGE: &str = "PodTooLarge";
/// The reason of an admission refused for the containers of the pod itself
/// (the engine's, which also refuses any pod above 1,024 containers).
pub use topomgr_engine::admission::TOO_MANY_CONTAINERS;

/// The operator's limits (config `[limits]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `max_pods`.
    pub max_pods: usize,
    /// `max_containers`.
    pub max_containers: usize,
    /// `max_containers_per_pod`.
    pub max_containers_per_pod: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pods: DEFAULT_MAX_PODS,
            max_containers: DEFAULT_MAX_CONTAINERS,
            max_containers_per_pod: DEFAULT_MAX_CONTAINERS_PER_POD,
        }
    }
}

/// A refusal: the reason and the message.
pub(crate) type Refusal = (&'static str, String);

impl Limits {
    /// Why `pod`, not yet admitted, cannot be admitted beside `pods` pods
    /// holding `containers` containers; `None`: it can.
    pub(crate) fn refusal(&self, pod: &PodView, pods: usize, containers: usize) -> Option<Refusal> {
        if let Some(why) = too_large(pod) {
            return Some((POD_TOO_LARGE, why));
        }
        let own = pod.init_containers.len() + pod.containers.len();
        if own > self.max_containers_per_pod {
            return Some((
                TOO_MANY_CONTAINERS,
                format!(
                    "the pod has {own} containers, more than the {} one pod may have (topomgr's [limits] max_containers_per_pod; raise it in the config to admit it)",
                    self.max_containers_per_pod
                ),
            ));
        }
        if pods >= self.max_pods {
            return Some((
                OUT_OF_PODS,
                format!(
                    "Node didn't have enough resource: pods, requested: 1, used: {pods}, capacity: {} (topomgr's [limits] max_pods; release pods, or raise it in the config)",
                    self.max_pods
                ),
            ));
        }
        if containers + own > self.max_containers {
            return Some((
                OUT_OF_CONTAINERS,
                format!(
                    "Node didn't have enough resource: containers, requested: {own}, used: {containers}, capacity: {} (topomgr's [limits] max_containers; release pods, or raise it in the config)",
                    self.max_containers
                ),
            ));
        }
        None
    }
}

/// Why `pod`'s names or resources are past the fixed bounds.
fn too_large(pod: &PodView) -> Option<String> {
    let long = |what: &str, value: &str, max: usize| {
        (value.len() > max).then(|| {
            format!(
                "{what} is {} bytes long, longer than the {max} bytes Kubernetes allows",
                value.len()
            )
        })
    };
    long("its uid", &pod.uid, MAX_ID_BYTES)
        .or_else(|| long("its name", &pod.name, MAX_NAME_BYTES))
        .or_else(|| long("its namespace", &pod.namespace, MAX_NAME_BYTES))
        .or_else(|| {
            pod.init_containers
                .iter()
                .chain(&pod.containers)
                .find_map(|c| {
                    let what = |w: &str| format!("container {:?}: {w}", truncated(&c.name));
                    if let Some(why) = long(&what("its name"), &c.name, MAX_NAME_BYTES) {
                        return Some(why);
                    }
                    let names: BTreeSet<&str> = c
                        .requests
                        .keys()
                        .chain(c.limits.keys())
                        .map(String::as_str)
                        .collect();
                    if names.len() > MAX_RESOURCES_PER_CONTAINER {
                        return Some(format!(
                            "{} {} distinct resources, more than the {MAX_RESOURCES_PER_CONTAINER} one container may name",
                            what("it names"),
                            names.len()
                        ));
                    }
                    names
                        .iter()
                        .find_map(|r| long(&what("a resource name"), r, MAX_ID_BYTES))
                })
        })
        .or_else(|| {
            pod.resources.as_ref().and_then(|r| {
                let names: BTreeSet<&str> = r
                    .requests
                    .keys()
                    .chain(r.limits.keys())
                    .map(String::as_str)
                    .collect();
                if names.len() > MAX_RESOURCES_PER_CONTAINER {
                    return Some(format!(
                        "its pod-level resources name {} distinct resources, more than {MAX_RESOURCES_PER_CONTAINER}",
                        names.len()
                    ));
                }
                names
                    .iter()
                    .find_map(|n| long("a pod-level resource name", n, MAX_ID_BYTES))
            })
        })
}

/// The first 40 characters of `s`, for messages.
fn truncated(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use topomgr_sdk::{ContainerView, QosClass};

    use super::*;

    fn pod(containers: usize) -> PodView {
        PodView::new("u", "p", "ns", QosClass::BestEffort).with_containers(
            (0..containers)
                .map(|i| ContainerView::new(format!("c{i}")))
                .collect(),
        )
    }

    #[test]
    fn each_limit_is_named_with_the_key_that_raises_it() {
        let limits = Limits {
            max_pods: 3,
            max_containers: 10,
            max_containers_per_pod: 4,
        };
        assert_eq!(limits.refusal(&pod(4), 2, 6), None);
        let (reason, message) = limits.refusal(&pod(1), 3, 3).unwrap();
        assert_eq!(reason, "OutOfpods");
        assert_eq!(message, "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3 (topomgr's [limits] max_pods; release pods, or raise it in the config)");
        let (reason, message) = limits.refusal(&pod(5), 0, 0).unwrap();
        assert_eq!(reason, "TooManyContainers");
        assert_eq!(message, "the pod has 5 containers, more than the 4 one pod may have (topomgr's [limits] max_containers_per_pod; raise it in the config to admit it)");
        let (reason, message) = limits.refusal(&pod(4), 2, 7).unwrap();
        assert_eq!(reason, "OutOfcontainers");
        assert_eq!(message, "Node didn't have enough resource: containers, requested: 4, used: 7, capacity: 10 (topomgr's [limits] max_containers; release pods, or raise it in the config)");
        // Init containers count too.
        let with_init = pod(4).with_init_containers(vec![ContainerView::new("init")]);
        assert_eq!(
            limits.refusal(&with_init, 0, 0).unwrap().0,
            "TooManyContainers"
        );
    }

    #[test]
    fn names_and_resources_are_bounded() {
        let limits = Limits::default();
        let mut p = pod(1);
        p.name = "n".repeat(254);
        assert_eq!(
            limits.refusal(&p, 0, 0).unwrap().1,
            "its name is 254 bytes long, longer than the 253 bytes Kubernetes allows"
        );
        let mut p = pod(1);
        p.uid = "u".repeat(318);
        assert!(limits
            .refusal(&p, 0, 0)
            .unwrap()
            .1
            .starts_with("its uid is 318 bytes"));
        let p = PodView::new("u", "p", "ns", QosClass::BestEffort)
            .with_containers(vec![ContainerView::new("c".repeat(300))]);
        assert!(limits
            .refusal(&p, 0, 0)
            .unwrap()
            .1
            .contains("its name is 300 bytes long"));
        let many: BTreeMap<String, u64> =
            (0..65).map(|i| (format!("example.com/r{i}"), 1)).collect();
        let p = PodView::new("u", "p", "ns", QosClass::BestEffort)
            .with_containers(vec![ContainerView::new("app").with_requests(many)]);
        assert_eq!(
            limits.refusal(&p, 0, 0).unwrap().1,
            "container \"app\": it names 65 distinct resources, more than the 64 one container may name"
        );
        assert_eq!(limits.refusal(&pod(256), 0, 0), None);
    }
}
