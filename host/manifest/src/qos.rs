//! QoS class, pod-level defaulting and the pod's effective requests and
//! limits, computed as Kubernetes computes them with pod-level resources
//! (`spec.resources`, beta and on by default since 1.34).
//!
//! Facts from upstream (see the module tests for the cases):
//! - `ComputePodQOS` (`pkg/apis/core/v1/helper/qos/qos.go`): when
//!   `spec.resources` is present, the class comes from the pod-level requests
//!   and limits alone; otherwise from every container, init containers
//!   included. Only `cpu` and `memory` count, zero quantities are ignored;
//!   Guaranteed needs non-zero cpu and memory limits (everywhere) and requests
//!   equal to limits; BestEffort has no non-zero cpu or memory at all.
//! - API defaulting (`pkg/apis/core/v1/defaults.go`, `SetDefaults_Pod`): a
//!   container limit without a request sets the request; then, with
//!   `spec.resources` present, `defaultHugePagePodLimits` (pod hugepage limits
//!   from the containers' aggregated limits, unless the pod requests that
//!   size) and `defaultPodRequests` (with pod-level limits: missing cpu and
//!   memory requests from the containers' aggregated requests, then any
//!   missing supported request from the pod-level limit).
//! - `PodRequests` / `PodLimits` (`k8s.io/component-helpers/resource`): the
//!   containers' aggregate (app containers and sidecars summed, each init
//!   container counted with the sidecars started before it, the larger of
//!   the two kept), overridden by the pod-level value of every pod-level
//!   resource (`cpu`, `memory`, `hugepages-*`) the pod sets.
//!
//! Quantities are exact (nano-units), as `resource.Quantity` compares them.

use std::collections::BTreeMap;

use topomgr_sdk::QosClass;

/// Resource name -> exact quantity in nano-units.
pub(super) type Quantities = BTreeMap<String, u128>;

/// The resources that decide the QoS class.
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// One container's requests (after defaulting) and limits.
#[derive(Debug, Clone, Copy)]
pub(super) struct Demand<'a> {
    pub(super) requests: &'a Quantities,
    pub(super) limits: &'a Quantities,
    /// A restartable init container (runs beside the app containers).
    pub(super) sidecar: bool,
}

/// A pod's containers, in spec order.
#[derive(Debug, Clone, Copy)]
pub(super) struct Containers<'a> {
    pub(super) init: &'a [Demand<'a>],
    pub(super) app: &'a [Demand<'a>],
}

/// Whether `name` is a resource pod-level resources apply to
/// (`IsSupportedPodLevelResource`).
pub(super) fn is_pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

fn sets_pod_level(list: &Quantities) -> bool {
    list.keys().any(|k| is_pod_level_resource(k))
}

/// The QoS class. `pod_level` is `spec.resources` (requests, limits) when
/// present, even empty.
pub(super) fn qos_class(
    pod_level: Option<(&Quantities, &Quantities)>,
    c: Containers<'_>,
) -> QosClass {
    match pod_level {
        Some((requests, limits)) => class_of(std::iter::once((requests, limits))),
        None => class_of(c.init.iter().chain(c.app).map(|d| (d.requests, d.limits))),
    }
}

/// The classic rule over a set of requirement pairs.
fn class_of<'a>(sets: impl Iterator<Item = (&'a Quantities, &'a Quantities)>) -> QosClass {
    let mut requests: BTreeMap<&str, u128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, u128> = BTreeMap::new();
    let mut guaranteed = true;
    for (req, lim) in sets {
        let mut limits_found = 0;
        for r in QOS_RESOURCES {
            if let Some(&q) = req.get(r).filter(|q| **q > 0) {
                let sum = requests.entry(r).or_insert(0);
                *sum = sum.saturating_add(q);
            }
            if let Some(&q) = lim.get(r).filter(|q| **q > 0) {
                limits_found += 1;
                let sum = limits.entry(r).or_insert(0);
                *sum = sum.saturating_add(q);
            }
        }
        if limits_found < QOS_RESOURCES.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        QosClass::BestEffort
    } else if guaranteed && requests == limits {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

fn add(list: &mut Quantities, other: &Quantities) {
    for (k, v) in other {
        let sum = list.entry(k.clone()).or_insert(0);
        *sum = sum.saturating_add(*v);
    }
}

fn max_into(list: &mut Quantities, other: &Quantities) {
    for (k, v) in other {
        let slot = list.entry(k.clone()).or_insert(0);
        *slot = (*slot).max(*v);
    }
}

/// The containers' aggregate of `pick` (requests or limits) with the
/// sidecar formula of `AggregateContainerRequests`.
fn aggregate<'a>(c: Containers<'a>, pick: fn(&Demand<'a>) -> &'a Quantities) -> Quantities {
    let mut result = Quantities::new();
    for d in c.app {
        add(&mut result, pick(d));
    }
    let mut sidecars = Quantities::new();
    let mut init_peak = Quantities::new();
    for d in c.init {
        if d.sidecar {
            add(&mut result, pick(d));
            add(&mut sidecars, pick(d));
            max_into(&mut init_peak, &sidecars);
        } else {
            let mut running = sidecars.clone();
            add(&mut running, pick(d));
            max_into(&mut init_peak, &running);
        }
    }
    max_into(&mut result, &init_peak);
    result
}

/// API server defaulting of `spec.resources` (present): hugepage limits from
/// the containers, then requests (see the module documentation).
pub(super) fn default_pod_level(
    requests: &mut Quantities,
    limits: &mut Quantities,
    c: Containers<'_>,
) {
    if limits.is_empty() && requests.is_empty() {
        return;
    }
    for (k, v) in aggregate(c, |d| d.limits) {
        if k.starts_with("hugepages-") && !requests.contains_key(&k) {
            limits.entry(k).or_insert(v);
        }
    }
    if limits.is_empty() {
        return;
    }
    for (k, v) in aggregate(c, |d| d.requests) {
        if k == "cpu" || k == "memory" {
            requests.entry(k).or_insert(v);
        }
    }
    for (k, v) in limits.iter() {
        if is_pod_level_resource(k) {
            requests.entry(k.clone()).or_insert(*v);
        }
    }
}

/// `PodRequests`: the containers' aggregate, overridden by pod-level requests.
pub(super) fn pod_requests(pod_level: Option<&Quantities>, c: Containers<'_>) -> Quantities {
    let mut out = aggregate(c, |d| d.requests);
    if let Some(req) = pod_level.filter(|r| sets_pod_level(r)) {
        for (k, v) in req.iter().filter(|(k, _)| is_pod_level_resource(k)) {
            out.insert(k.clone(), *v);
        }
    }
    out
}

/// `PodLimits`: the containers' aggregate, overridden by pod-level limits
/// when the pod sets any pod-level resource.
pub(super) fn pod_limits(
    pod_level: Option<(&Quantities, &Quantities)>,
    c: Containers<'_>,
) -> Quantities {
    let mut out = aggregate(c, |d| d.limits);
    if let Some((req, lim)) = pod_level {
        if sets_pod_level(req) || sets_pod_level(lim) {
            for (k, v) in lim.iter().filter(|(k, _)| is_pod_level_resource(k)) {
                out.insert(k.clone(), *v);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u128 = 1_000_000_000;

    fn q(pairs: &[(&str, u128)]) -> Quantities {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn d<'a>(requests: &'a Quantities, limits: &'a Quantities, sidecar: bool) -> Demand<'a> {
        Demand {
            requests,
            limits,
            sidecar,
        }
    }

    /// The pod-level class wins over the containers' (`ComputePodQOS`).
    #[test]
    fn pod_level_class_wins() {
        let none = Quantities::new();
        let g = q(&[("cpu", G), ("memory", G)]);
        let app = [d(&g, &g, false)];
        let c = Containers {
            init: &[],
            app: &app,
        };
        assert_eq!(qos_class(None, c), QosClass::Guaranteed);
        // Pod-level requests below limits: Burstable although the container is Guaranteed.
        let half = q(&[("cpu", G / 2), ("memory", G)]);
        assert_eq!(qos_class(Some((&half, &g)), c), QosClass::Burstable);
        // Present but empty: BestEffort (only spec.resources counts).
        assert_eq!(qos_class(Some((&none, &none)), c), QosClass::BestEffort);
        // Only non-QoS resources at pod level (pids): BestEffort.
        let pids = q(&[("pids", 2048 * G)]);
        assert_eq!(qos_class(Some((&none, &pids)), c), QosClass::BestEffort);
        // Pod-level Guaranteed with BestEffort containers.
        let app = [d(&none, &none, false)];
        let c = Containers {
            init: &[],
            app: &app,
        };
        assert_eq!(qos_class(Some((&g, &g)), c), QosClass::Guaranteed);
        // cpu only at pod level: Burstable.
        let cpu = q(&[("cpu", G)]);
        assert_eq!(qos_class(Some((&cpu, &cpu)), c), QosClass::Burstable);
    }

    #[test]
    fn aggregate_follows_the_sidecar_formula() {
        let none = Quantities::new();
        let r1 = q(&[("cpu", G)]);
        let r2 = q(&[("cpu", 2 * G)]);
        let r5 = q(&[("cpu", 5 * G)]);
        // sidecar 1, init 5 (after the sidecar: 6), app 2: max(1 + 2, 1 + 5) = 6.
        let init = [d(&r1, &none, true), d(&r5, &none, false)];
        let app = [d(&r2, &none, false)];
        let c = Containers {
            init: &init,
            app: &app,
        };
        assert_eq!(pod_requests(None, c), q(&[("cpu", 6 * G)]));
        // An init container before the sidecar does not count it.
        let init = [d(&r5, &none, false), d(&r1, &none, true)];
        let c = Containers {
            init: &init,
            app: &app,
        };
        assert_eq!(pod_requests(None, c), q(&[("cpu", 5 * G)]));
    }

    /// `defaultHugePagePodLimits` then `defaultPodRequests` (defaults.go).
    #[test]
    fn pod_level_defaulting() {
        let none = Quantities::new();
        // Limits only, no container requests: requests = limits.
        let (mut req, mut lim) = (Quantities::new(), q(&[("cpu", 2 * G), ("memory", G)]));
        let app = [d(&none, &none, false)];
        let c = Containers {
            init: &[],
            app: &app,
        };
        default_pod_level(&mut req, &mut lim, c);
        assert_eq!(req, lim);
        // Limits, containers request cpu: the pod request is their aggregate.
        let r = q(&[("cpu", G / 2)]);
        let app = [d(&r, &none, false), d(&r, &none, false)];
        let c = Containers {
            init: &[],
            app: &app,
        };
        let (mut req, mut lim) = (Quantities::new(), q(&[("cpu", 2 * G), ("memory", G)]));
        default_pod_level(&mut req, &mut lim, c);
        assert_eq!(req, q(&[("cpu", G), ("memory", G)]));
        // Requests only: nothing is defaulted (no hugepages).
        let (mut req, mut lim) = (q(&[("cpu", G)]), Quantities::new());
        default_pod_level(&mut req, &mut lim, c);
        assert_eq!((req, lim), (q(&[("cpu", G)]), Quantities::new()));
        // Hugepages: the pod limit from the containers' limits, then the request from it.
        let h = q(&[("hugepages-2Mi", 4 * G)]);
        let app = [d(&h, &h, false)];
        let c = Containers {
            init: &[],
            app: &app,
        };
        let (mut req, mut lim) = (q(&[("cpu", G)]), Quantities::new());
        default_pod_level(&mut req, &mut lim, c);
        assert_eq!(lim, h);
        assert_eq!(req, q(&[("cpu", G), ("hugepages-2Mi", 4 * G)]));
        // A pod-level hugepage request stops the limit defaulting.
        let (mut req, mut lim) = (q(&[("hugepages-2Mi", 2 * G)]), q(&[("cpu", G)]));
        default_pod_level(&mut req, &mut lim, c);
        assert_eq!(lim, q(&[("cpu", G)]));
        assert_eq!(req, q(&[("cpu", G), ("hugepages-2Mi", 2 * G)]));
    }

    #[test]
    fn effective_requests_and_limits_override_pod_level_resources_only() {
        let r = q(&[("cpu", G / 2), ("memory", G), ("example.com/x", 3 * G)]);
        let l = q(&[("cpu", G), ("memory", G), ("example.com/x", 3 * G)]);
        let app = [d(&r, &l, false), d(&r, &l, false)];
        let c = Containers {
            init: &[],
            app: &app,
        };
        let pod_req = q(&[("cpu", 4 * G), ("example.com/x", 9 * G)]);
        let pod_lim = q(&[("cpu", 4 * G), ("memory", 4 * G)]);
        assert_eq!(
            pod_requests(Some(&pod_req), c),
            q(&[("cpu", 4 * G), ("memory", 2 * G), ("example.com/x", 6 * G)])
        );
        assert_eq!(
            pod_limits(Some((&pod_req, &pod_lim)), c),
            q(&[("cpu", 4 * G), ("memory", 4 * G), ("example.com/x", 6 * G)])
        );
        // Unsupported names alone do not make pod-level resources "set".
        let pids = q(&[("pids", 100 * G)]);
        assert_eq!(
            pod_requests(Some(&pids), c),
            q(&[("cpu", G), ("memory", 2 * G), ("example.com/x", 6 * G)])
        );
    }
}
