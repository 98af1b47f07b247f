//! What the providers' restores reported ([`topomgr_sdk::Reconciled`]),
//! kept on the host: the conflicts of each provider (an assignment that
//! lost part of what it holds: an offline CPU, a vanished device, memory
//! shrunk below what is assigned) until their pod is released or the
//! provider's next report drops them, and the moves (a device found again
//! under another id or resource name) applied to the pod table.
//!
//! A conflict holds only what it names: the pod keeps what it has, the
//! ledger keeps what it lost as the pod's (never offered to anyone else),
//! and admissions that do not need it go on.

use std::collections::{BTreeMap, BTreeSet};

use topomgr_engine::admission::AdmitResult;
use topomgr_sdk::{Conflict, Move};

use crate::api::ConflictReport;

/// The latest conflicts of each provider, by provider name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conflicts {
    by_provider: BTreeMap<String, Vec<Conflict>>,
}

impl Conflicts {
    /// Replace what `provider` reported (its latest restore).
    pub(crate) fn set(&mut self, provider: &str, conflicts: Vec<Conflict>) {
        if conflicts.is_empty() {
            self.by_provider.remove(provider);
        } else {
            self.by_provider.insert(provider.to_owned(), conflicts);
        }
    }

    /// Forget every conflict (before a restore reports them again).
    pub(crate) fn clear(&mut self) {
        self.by_provider.clear();
    }

    /// Pod `uid` was released: its conflicts end with it.
    pub(crate) fn released(&mut self, uid: &str) {
        for list in self.by_provider.values_mut() {
            list.retain(|c| c.pod_uid != uid);
        }
        self.by_provider.retain(|_, list| !list.is_empty());
    }

    /// True when no provider reports a conflict.
    pub fn is_empty(&self) -> bool {
        self.by_provider.is_empty()
    }

    /// Every conflict, by provider then as reported.
    pub fn reports(&self) -> Vec<ConflictReport> {
        self.by_provider
            .iter()
            .flat_map(|(provider, list)| {
                list.iter().map(move |c| ConflictReport {
                    provider: provider.clone(),
                    pod: c.pod_uid.clone(),
                    container: c.container.clone(),
                    resource: c.resource.clone(),
                    missing: c.missing.clone(),
                    ids: c.ids.clone(),
                })
            })
            .collect()
    }

    /// By (provider, resource), for metrics: the number of conflicts and
    /// the number of ids (CPUs, devices) their pods hold that the machine
    /// no longer has.
    pub fn counts(&self) -> BTreeMap<(String, String), (usize, usize)> {
        let mut out = BTreeMap::new();
        for (provider, list) in &self.by_provider {
            for c in list {
                let (conflicts, ids) = out
                    .entry((provider.clone(), c.resource.clone()))
                    .or_insert((0, 0));
                *conflicts += 1;
                *ids += c.ids.len();
            }
        }
        out
    }
}

/// Apply `moves` to the pod table: in the named container's allocation,
/// the device `from` (resource, id) becomes `to` (across resources when
/// the resource was renamed). Idempotent: a move whose `from` the
/// container no longer holds changes nothing. Returns the uids of the pods
/// that changed.
pub(crate) fn apply_moves(
    pods: &mut BTreeMap<String, AdmitResult>,
    moves: &[Move],
) -> BTreeSet<String> {
    let mut changed = BTreeSet::new();
    for m in moves {
        let Some(pod) = pods.get_mut(&m.pod_uid) else {
            continue;
        };
        let Some(c) = pod.containers.iter_mut().find(|c| c.name == m.container) else {
            continue;
        };
        let devices = &mut c.allocation.devices;
        let Some(ids) = devices.get_mut(&m.from.resource) else {
            continue;
        };
        let Some(at) = ids.iter().position(|id| *id == m.from.id) else {
            continue;
        };
        ids.remove(at);
        if ids.is_empty() {
            devices.remove(&m.from.resource);
        }
        let to = devices.entry(m.to.resource.clone()).or_default();
        if !to.contains(&m.to.id) {
            to.push(m.to.id.clone());
        }
        changed.insert(m.pod_uid.clone());
    }
    changed
}

#[cfg(test)]
mod tests {
    use topomgr_engine::admission::ContainerResult;
    use topomgr_sdk::{testkit, Allocation, ContainerView, NumaMask, ResourceId, TopologyHint};

    use super::*;

    fn table() -> BTreeMap<String, AdmitResult> {
        let mut a = Allocation::default();
        a.devices.insert(
            "nvidia.com/gpu".to_owned(),
            vec!["0000:3b:00.0".to_owned(), "0000:5e:00.0".to_owned()],
        );
        let mut pod = testkit::pod("p", Vec::new(), vec![ContainerView::new("app")]);
        pod.uid = "u1".to_owned();
        let r = AdmitResult {
            pod,
            admitted: true,
            reason: None,
            message: None,
            containers: vec![ContainerResult {
                name: "app".to_owned(),
                hint: TopologyHint::new(NumaMask::default(), true),
                allocation: a,
            }],
        };
        BTreeMap::from([("u1".to_owned(), r)])
    }

    #[test]
    fn moves_replace_the_id_once() {
        let mut pods = table();
        let m = Move::new(
            "u1",
            "app",
            ResourceId::new("nvidia.com/gpu", "0000:3b:00.0"),
            ResourceId::new("nvidia.com/gpu", "GPU-aaaa"),
        );
        assert_eq!(
            apply_moves(&mut pods, std::slice::from_ref(&m)),
            BTreeSet::from(["u1".to_owned()])
        );
        let devices = &pods["u1"].containers[0].allocation.devices;
        assert_eq!(
            devices["nvidia.com/gpu"],
            ["0000:5e:00.0".to_owned(), "GPU-aaaa".to_owned()]
        );
        // Reported again (the provider's state was not saved since): no change.
        assert!(apply_moves(&mut pods, &[m]).is_empty());
        // Unknown pods and containers change nothing.
        let other = Move::new(
            "u2",
            "app",
            ResourceId::new("nvidia.com/gpu", "0000:5e:00.0"),
            ResourceId::new("nvidia.com/gpu", "x"),
        );
        assert!(apply_moves(&mut pods, &[other]).is_empty());
    }

    #[test]
    fn a_renamed_resource_moves_across_resources() {
        let mut pods = table();
        let moves = ["0000:3b:00.0", "0000:5e:00.0"].map(|id| {
            Move::new(
                "u1",
                "app",
                ResourceId::new("nvidia.com/gpu", id),
                ResourceId::new("example.com/gpu", id),
            )
        });
        apply_moves(&mut pods, &moves);
        let devices = &pods["u1"].containers[0].allocation.devices;
        assert_eq!(
            devices.keys().collect::<Vec<_>>(),
            ["example.com/gpu"],
            "{devices:?}"
        );
        assert_eq!(devices["example.com/gpu"].len(), 2);
    }

    #[test]
    fn conflicts_end_with_their_pod_or_the_next_report() {
        let mut c = Conflicts::default();
        c.set(
            "gpu",
            vec![
                Conflict::new("u1", "app", "nvidia.com/gpu", "device GPU-1 is gone")
                    .with_ids(["GPU-1"]),
                Conflict::new("u2", "app", "nvidia.com/gpu", "device GPU-2 is gone")
                    .with_ids(["GPU-2"]),
            ],
        );
        c.set(
            "cpu",
            vec![Conflict::new("u1", "app", "cpu", "CPUs 6-7 are offline").with_ids(["6", "7"])],
        );
        assert_eq!(
            c.counts(),
            BTreeMap::from([
                (("cpu".to_owned(), "cpu".to_owned()), (1, 2)),
                (("gpu".to_owned(), "nvidia.com/gpu".to_owned()), (2, 2))
            ])
        );
        let r = c.reports();
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].provider.as_str(), r[0].pod.as_str(), r[0].ids.clone()),
            ("cpu", "u1", vec!["6".to_owned(), "7".to_owned()])
        );
        c.released("u1");
        let r = c.reports();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].provider.as_str(), r[0].pod.as_str()), ("gpu", "u2"));
        c.set("gpu", Vec::new());
        assert!(c.is_empty());
    }
}
