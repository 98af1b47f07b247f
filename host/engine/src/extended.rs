//! Extended resources nobody serves: a pod requesting a domain-prefixed
//! resource (`vendor.com/widget`) that no loaded provider owns is refused
//! as the kubelet's admission predicate refuses a pod that does not fit the
//! node (`pkg/kubelet/lifecycle/predicate.go`: reason `OutOf<resource>`,
//! message `Node didn't have enough resource: <resource>, requested: N,
//! used: 0, capacity: 0`), instead of being admitted without the device.
//!
//! Which resources a provider owns is what its inventory reports
//! ([`topomgr_sdk::Provider::inventory`]); providers are asked only when a
//! pod requests an extended resource. `cpu`, `memory`, `hugepages-*`,
//! `ephemeral-storage` and `*kubernetes.io/*` names are not extended
//! resources and keep their own handling.

use std::collections::BTreeSet;

use topomgr_sdk::PodView;

/// The kubelet's `IsExtendedResourceName`: a name with a domain prefix
/// outside `kubernetes.io`, and not a quota `requests.` name.
pub(crate) fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// The extended resources `pod` requests (effective pod request above 0),
/// in name order.
pub(crate) fn requested(pod: &PodView) -> Vec<(&str, u64)> {
    // Inserted one by one: a pod names few distinct resources across many
    // containers, and the set stays that small (collecting would sort every
    // name of every container first).
    let mut names = BTreeSet::new();
    for c in pod.init_containers.iter().chain(&pod.containers) {
        for name in c.requests.keys().chain(c.limits.keys()) {
            if is_extended(name) {
                names.insert(name.as_str());
            }
        }
    }
    names
        .into_iter()
        .map(|n| (n, pod.effective_request(n)))
        .filter(|(_, amount)| *amount > 0)
        .collect()
}

/// The first (in name order) extended resource of `pod` that `owned` lacks,
/// as the kubelet's (reason, message).
pub(crate) fn unserved(pod: &PodView, owned: &BTreeSet<String>) -> Option<(String, String)> {
    requested(pod)
        .into_iter()
        .find(|(name, _)| !owned.contains(*name))
        .map(|(name, amount)| {
            (
                format!("OutOf{name}"),
                format!(
                    "Node didn't have enough resource: {name}, requested: {amount}, used: 0, capacity: 0"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use topomgr_sdk::{ContainerView, QosClass};

    fn pod(containers: Vec<ContainerView>, init: Vec<ContainerView>) -> PodView {
        PodView::new("u", "p", "ns", QosClass::Guaranteed)
            .with_containers(containers)
            .with_init_containers(init)
    }

    fn c(name: &str, res: &[(&str, u64)]) -> ContainerView {
        let list: topomgr_sdk::ResourceList =
            res.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        ContainerView::new(name)
            .with_requests(list.clone())
            .with_limits(list)
    }

    #[test]
    fn extended_names_as_the_kubelet() {
        for name in [
            "nvidia.com/gpu",
            "example.com/dongle",
            "intel.com/sriov_netdevice",
        ] {
            assert!(is_extended(name), "{name}");
        }
        for name in [
            "cpu",
            "memory",
            "hugepages-2Mi",
            "ephemeral-storage",
            "kubernetes.io/batch",
            "requests.nvidia.com/gpu",
        ] {
            assert!(!is_extended(name), "{name}");
        }
    }

    #[test]
    fn first_unowned_resource_with_the_pod_request() {
        let p = pod(
            vec![
                c(
                    "a",
                    &[
                        ("cpu", 1000),
                        ("example.com/dongle", 1),
                        ("nvidia.com/gpu", 1),
                    ],
                ),
                c("b", &[("example.com/dongle", 2)]),
            ],
            vec![c("init", &[("example.com/dongle", 4)])],
        );
        let owned: BTreeSet<String> = ["nvidia.com/gpu".to_owned()].into();
        assert_eq!(
            unserved(&p, &owned),
            Some((
                "OutOfexample.com/dongle".to_owned(),
                "Node didn't have enough resource: example.com/dongle, requested: 4, used: 0, capacity: 0"
                    .to_owned()
            ))
        );
        let owned: BTreeSet<String> =
            ["nvidia.com/gpu".to_owned(), "example.com/dongle".to_owned()].into();
        assert_eq!(unserved(&p, &owned), None);
        assert_eq!(
            unserved(
                &pod(vec![c("a", &[("cpu", 1000)])], vec![]),
                &BTreeSet::new()
            ),
            None
        );
    }
}
