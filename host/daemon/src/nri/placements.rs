//! The containers topomgr placed through NRI, and what the runtime was last
//! told about each one's cpuset.
//!
//! A container is *exclusive* (its allocation holds exclusive CPUs) or a
//! member of the shared pool (every other container topomgr admitted, and
//! those it follows without an admission: see [`Placed::allocation`]). The
//! cpuset a container should have is [`topomgr_cgroup::pool::container_cpuset`]
//! of its allocation and the shared pool as the daemon's view has it (which
//! changes only after the change is durable). [`Placements::updates`] is
//! every container whose cpuset differs from what the runtime was told,
//! and marks them told: the handlers put those updates into their answers,
//! the follower sends them unsolicited.
//!
//! # The order of updates
//!
//! The runtime applies an event's answer and an unsolicited
//! `UpdateContainers` each under its one lock, in the order it takes the
//! lock. An answer computed while an unsolicited update is on its way may
//! therefore be applied before it, and the older update (say, a shared pool
//! that still has a CPU the answer just made exclusive) after it. Every
//! answer made while an update is in flight sets
//! [`Placements::changed_in_flight`]; when the update returns, the follower
//! computes again from the state as it is then and sends what differs, so
//! the runtime ends with the newer cpusets one round trip later. Releases
//! made by an event that can answer (StopContainer) give CPUs back in that
//! answer and never race.

use std::collections::BTreeMap;

use topomgr_cgroup::pool::container_cpuset;
use topomgr_cgroup::Cpuset;
use topomgr_nri::api::ContainerUpdate;
use topomgr_sdk::{Allocation, CpuSet, NumaMask};

use super::convert;

/// One container topomgr follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placed {
    /// Its pod's sandbox id (the runtime's).
    pub sandbox: String,
    /// `namespace/pod/container`, for the log.
    pub name: String,
    /// Its admission's allocation; `None` for a container topomgr follows
    /// without holding anything for it (it could not be admitted at a
    /// Synchronize, or its pod was released by other means while it runs):
    /// it gets the shared pool, so that it never runs on a CPU that is
    /// exclusive to another container.
    pub allocation: Option<Allocation>,
    /// The cpuset the runtime was last told (`None`: not known).
    pub told: Option<Cpuset>,
}

impl Placed {
    /// The cpuset it should have with `pool` as the shared pool on a
    /// machine of `nodes`; `None` when the shared pool is empty and it is a
    /// member.
    pub fn desired(&self, pool: &CpuSet, nodes: NumaMask) -> Option<Cpuset> {
        let shared = Allocation::default();
        container_cpuset(self.allocation.as_ref().unwrap_or(&shared), pool, nodes).ok()
    }

    /// Whether it holds exclusive CPUs.
    pub fn is_exclusive(&self) -> bool {
        self.allocation
            .as_ref()
            .is_some_and(|a| !topomgr_cgroup::pool::is_shared(a))
    }
}

/// Every container topomgr follows, by the runtime's container id.
#[derive(Debug, Default)]
pub(crate) struct Placements {
    containers: BTreeMap<String, Placed>,
    /// An unsolicited update is on its way to the runtime.
    pub in_flight: bool,
    /// Set when an answer changed cpusets while an update was in flight.
    pub changed_in_flight: bool,
}

impl Placements {
    /// The containers followed.
    pub fn len(&self) -> usize {
        self.containers.len()
    }

    /// Container `id`.
    pub fn get(&self, id: &str) -> Option<&Placed> {
        self.containers.get(id)
    }

    /// Container `id`, to change.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Placed> {
        self.containers.get_mut(id)
    }

    /// Follow container `id` (replacing what was known of it).
    pub fn insert(&mut self, id: &str, placed: Placed) {
        self.containers.insert(id.to_owned(), placed);
    }

    /// Stop following container `id`.
    pub fn remove(&mut self, id: &str) -> Option<Placed> {
        self.containers.remove(id)
    }

    /// Forget everything (a new connection synchronizes from scratch).
    pub fn clear(&mut self) {
        self.containers.clear();
    }

    /// The ids of the containers of sandbox `sandbox`.
    pub fn of_sandbox(&self, sandbox: &str) -> Vec<String> {
        self.containers
            .iter()
            .filter(|(_, p)| p.sandbox == sandbox)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The ids of every container followed.
    pub fn ids(&self) -> Vec<String> {
        self.containers.keys().cloned().collect()
    }

    /// An update for every container but `except` whose cpuset, with `pool`
    /// as the shared pool, differs from what the runtime was told; each is
    /// marked told. When an unsolicited update is in flight and there is
    /// anything to update, [`Placements::changed_in_flight`] is set.
    pub fn updates(
        &mut self,
        pool: &CpuSet,
        nodes: NumaMask,
        except: Option<&str>,
        ignore_failure: bool,
    ) -> Vec<ContainerUpdate> {
        let mut out = Vec::new();
        for (id, p) in &mut self.containers {
            if Some(id.as_str()) == except {
                continue;
            }
            let Some(want) = p.desired(pool, nodes) else {
                continue;
            };
            if p.told.as_ref() != Some(&want) {
                out.push(convert::update(id, &want, ignore_failure));
                p.told = Some(want);
            }
        }
        if self.in_flight && !out.is_empty() {
            self.changed_in_flight = true;
        }
        out
    }

    /// The runtime did not apply the update of container `id`: what it has
    /// is not known.
    pub fn not_told(&mut self, id: &str) {
        if let Some(p) = self.containers.get_mut(id) {
            p.told = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    fn nodes() -> NumaMask {
        NumaMask::from_nodes([0, 1]).unwrap()
    }

    fn placed(sandbox: &str, allocation: Option<Allocation>) -> Placed {
        Placed {
            sandbox: sandbox.into(),
            name: format!("ns/{sandbox}/app"),
            allocation,
            told: None,
        }
    }

    fn told(p: &Placements, id: &str) -> String {
        let t = p.get(id).unwrap().told.clone().unwrap();
        format!("{}/{}", t.cpus, t.mems)
    }

    fn update_cpus(u: &ContainerUpdate) -> (String, String) {
        let cpu = u
            .linux
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .cpu
            .clone()
            .unwrap();
        (u.container_id.clone(), cpu.cpus)
    }

    /// Shared containers follow the pool; exclusive ones keep their CPUs
    /// and memory nodes; nothing is sent twice; a container being created
    /// is left out of the updates.
    #[test]
    fn updates_follow_the_pool_and_are_sent_once() {
        let mut p = Placements::default();
        let exclusive = Allocation::default()
            .with_cpus(cpus("3"), true)
            .with_mems(NumaMask::from_nodes([1]).unwrap());
        p.insert("g", placed("sg", Some(exclusive)));
        p.insert("b", placed("sb", Some(Allocation::default())));
        p.insert("x", placed("sx", None));
        let ups = p.updates(&cpus("0-2"), nodes(), Some("g"), false);
        let got: Vec<_> = ups.iter().map(update_cpus).collect();
        assert_eq!(
            got,
            [("b".into(), "0-2".into()), ("x".into(), "0-2".into())]
        );
        assert!(!ups[0].ignore_failure);
        assert_eq!(told(&p, "b"), "0-2/0-1");
        assert!(p.get("g").unwrap().told.is_none());
        assert!(p.get("g").unwrap().is_exclusive());
        assert!(!p.get("x").unwrap().is_exclusive());
        // The same pool again: nothing to say, except g's own cpuset once.
        let ups = p.updates(&cpus("0-2"), nodes(), None, true);
        assert_eq!(
            ups.iter().map(update_cpus).collect::<Vec<_>>(),
            [("g".into(), "3".into())]
        );
        assert_eq!(told(&p, "g"), "3/1");
        assert!(p.updates(&cpus("0-2"), nodes(), None, false).is_empty());
        // The pool grows: only the members hear of it.
        let ups = p.updates(&cpus("0-2,4"), nodes(), None, false);
        assert_eq!(
            ups.iter().map(update_cpus).collect::<Vec<_>>(),
            [("b".into(), "0-2,4".into()), ("x".into(), "0-2,4".into())]
        );
        // An empty pool updates no member.
        assert!(p.updates(&CpuSet::new(), nodes(), None, false).is_empty());
        // A container the runtime failed to update is told again.
        p.not_told("b");
        assert_eq!(p.updates(&cpus("0-2,4"), nodes(), None, false).len(), 1);
        assert_eq!(p.of_sandbox("sb"), ["b"]);
        assert_eq!(p.ids(), ["b", "g", "x"]);
    }

    #[test]
    fn an_answer_during_an_unsolicited_update_asks_for_another() {
        let mut p = Placements::default();
        p.insert("b", placed("sb", Some(Allocation::default())));
        p.in_flight = true;
        assert!(p.updates(&cpus("0"), nodes(), None, false).len() == 1);
        assert!(p.changed_in_flight);
        p.changed_in_flight = false;
        assert!(p.updates(&cpus("0"), nodes(), None, false).is_empty());
        assert!(!p.changed_in_flight, "nothing changed");
    }
}
