//! In-place resize of a container's CPUs under the static policy, as
//! KEP-5554 ("In-place Update Pod Resources alongside Static CPU Manager
//! Policy") describes it and kubernetes #129719 and its successor #140629
//! implement it in the kubelet:
//!
//! * A container that holds exclusive CPUs and **grows** keeps every CPU
//!   it holds and gets the extra ones from the free CPUs (the shared pool
//!   minus reserved and excluded CPUs) of the NUMA nodes it may use (the
//!   host's hint: its current affinity); with `align-by-socket` from the
//!   sockets of those nodes. Free sibling threads of its own cores come
//!   first (unless `distribute-cpus-across-cores`); with
//!   `prefer-align-cpus-by-uncorecache`, then free CPUs of the uncore (L3)
//!   caches it already uses (whole free cores first, lowest core first),
//!   so that a grown container stays in its caches; then the policy's
//!   topology-aware take (packed or `distribute-cpus-across-numa`,
//!   `prefer-align-cpus-by-uncorecache`). With `full-pcpus-only` the new
//!   request must be whole cores and the extra CPUs are whole free cores.
//!   What does not fit there is refused with the numbers; it never spills
//!   to other nodes.
//! * One that **shrinks** gives CPUs back to the shared pool, but never
//!   the CPUs it was first allocated: KEP-5554's "baseline CPUs", which
//!   every resized set is a superset of (kubernetes/enhancements #6330).
//!   A shrink below the baseline's count is refused. The baseline is
//!   recorded at the first resize and checkpointed (`baseline_entries`;
//!   the KEP's checkpoint v3 keeps an "original" set per entry instead).
//!   CPUs given back are those of cores without a baseline CPU first (lone
//!   threads before whole cores, highest core first), the siblings of its
//!   first CPUs last.
//! * A change that would move a container between the shared pool and
//!   exclusive CPUs (whole to fractional CPUs, another QoS class,
//!   fractional to whole) is refused, as the kubelet refuses it; a
//!   container in the shared pool that stays there is answered the shared
//!   pool; one whose CPU count does not change keeps what it holds.
//! * Containers of pod-level CPU sets (`PodLevelResourceManagers`) are not
//!   resized (the kubelet does not resize them with the static policy
//!   either).

use std::collections::BTreeMap;

use topomgr_sdk::{ContainerView, NumaMask, PodView, QosClass};

use crate::error::CpuError;
use crate::policy::{guaranteed_cpus, Placement, StaticPolicy};
use crate::topology::{to_cpuset, Cpus};

/// `" on NUMA node 1"`, `" on NUMA nodes 0-1"`.
fn on_nodes(mask: NumaMask) -> String {
    if mask.len() == 1 {
        format!(" on NUMA node {mask}")
    } else {
        format!(" on NUMA nodes {mask}")
    }
}

impl StaticPolicy {
    /// The static policy's answer to an in-place resize of `container`
    /// (carrying its new requests) of `pod`, whose CPUs may lie on
    /// `affinity` (`None`: any node). See the module docs.
    pub fn resize(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        affinity: Option<NumaMask>,
    ) -> Result<Placement, CpuError> {
        let (uid, name) = (pod.uid.as_str(), container.name.as_str());
        if self.pod_sets.contains_key(uid) {
            return Err(CpuError::ResizeUnsupported {
                pod: uid.to_owned(),
                container: name.to_owned(),
                why: "its pod holds a pod-level CPU set (PodLevelResourceManagers), which the \
                      static policy does not resize",
            });
        }
        let skipped = !self.pod_level_managers && pod.sets_pod_level_resources();
        let requested = if skipped {
            0
        } else {
            guaranteed_cpus(pod, container, self.pod_level_managers)
        };
        let Some(held) = self.assigned(uid, name).cloned() else {
            if requested == 0 {
                return Ok(self.shared());
            }
            return Err(CpuError::ResizeToExclusive {
                pod: uid.to_owned(),
                container: name.to_owned(),
                requested,
            });
        };
        if requested == 0 {
            let to = if pod.qos != QosClass::Guaranteed {
                format!("a {} pod", pod.qos.as_str())
            } else if skipped {
                "a pod with pod-level resources".to_owned()
            } else {
                format!("a CPU request of {}m", container.request("cpu"))
            };
            return Err(CpuError::ResizeToShared {
                pod: uid.to_owned(),
                container: name.to_owned(),
                held: held.len(),
                to,
            });
        }
        if requested == held.len() {
            return self.held_placement(uid, name, &held);
        }
        let per_core = self.group_size();
        if self.options.full_pcpus_only && !requested.is_multiple_of(per_core) {
            return Err(CpuError::SmtNotMultiple {
                requested,
                per_core,
            });
        }
        let new = if requested > held.len() {
            self.grow(uid, name, &held, requested, affinity)?
        } else {
            self.shrink(uid, name, &held, requested)?
        };
        tracing::info!(pod = %uid, container = %name, from = %to_cpuset(&held), to = %to_cpuset(&new),
            "resized exclusive CPUs");
        self.held_placement(uid, name, &new)
    }

    /// The `none` policy's resize: a container in the shared pool stays
    /// there; one that keeps exclusive CPUs from the static policy keeps
    /// them only while its CPU count does not change.
    pub(crate) fn resize_unmanaged(
        &self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<Placement, CpuError> {
        let (uid, name) = (pod.uid.as_str(), container.name.as_str());
        let Some(held) = self.assigned(uid, name) else {
            return Ok(self.shared());
        };
        if guaranteed_cpus(pod, container, false) == held.len() {
            return self.held_placement(uid, name, held);
        }
        Err(CpuError::ResizeUnsupported {
            pod: uid.to_owned(),
            container: name.to_owned(),
            why: "it keeps exclusive CPUs from the static policy, and the none policy does not \
                  resize them",
        })
    }

    /// The CPUs the container was first allocated: its recorded baseline
    /// (what of it it still holds), or what it holds when never resized.
    fn baseline(&self, pod: &str, container: &str, held: &Cpus) -> Cpus {
        match self.baselines.get(pod).and_then(|m| m.get(container)) {
            Some(b) => b.intersection(held).copied().collect(),
            None => held.clone(),
        }
    }

    /// Records `cpus` as the container's assignment, its baseline kept
    /// (recorded at the first resize, dropped when the two are equal
    /// again).
    fn set_resized(&mut self, pod: &str, container: &str, baseline: Cpus, cpus: Cpus) {
        if baseline == cpus {
            self.forget_baseline(pod, container);
        } else {
            self.baselines
                .entry(pod.to_owned())
                .or_default()
                .insert(container.to_owned(), baseline);
        }
        self.assignments
            .entry(pod.to_owned())
            .or_default()
            .insert(container.to_owned(), cpus);
    }

    /// Drops the container's baseline (released, or back to its baseline).
    pub(crate) fn forget_baseline(&mut self, pod: &str, container: &str) {
        if let Some(m) = self.baselines.get_mut(pod) {
            m.remove(container);
            if m.is_empty() {
                self.baselines.remove(pod);
            }
        }
    }

    fn grow(
        &mut self,
        pod: &str,
        container: &str,
        held: &Cpus,
        requested: usize,
        affinity: Option<NumaMask>,
    ) -> Result<Cpus, CpuError> {
        let more = requested - held.len();
        let available = self.available();
        let (mut candidates, location) = match affinity {
            Some(mask) => (self.aligned_cpus(mask, &available), on_nodes(mask)),
            None => (available, " on the node".to_owned()),
        };
        if self.options.full_pcpus_only {
            // Whole free cores only, outside the cores of reserved CPUs
            // (the kubelet's enforceSMTAlignment for the extra CPUs).
            self.enforce_smt_alignment(more)?;
            candidates = self.whole_cores(&candidates);
        }
        if candidates.len() < more {
            return Err(CpuError::ResizeNotEnough {
                pod: pod.to_owned(),
                container: container.to_owned(),
                held: held.len(),
                requested,
                free: candidates.len(),
                location,
            });
        }
        // Free sibling threads of the container's own cores first.
        let mut taken = Cpus::new();
        if !self.options.distribute_cpus_across_cores && !self.options.full_pcpus_only {
            let cores: Vec<u32> = held
                .iter()
                .filter_map(|c| self.topo.info(*c).map(|i| i.core))
                .collect();
            for c in &candidates {
                if taken.len() == more {
                    break;
                }
                if self.topo.info(*c).is_some_and(|i| cores.contains(&i.core)) {
                    taken.insert(*c);
                }
            }
        }
        if self.options.prefer_align_by_uncore_cache && taken.len() < more {
            self.take_from_own_uncores(held, &candidates, more, &mut taken);
        }
        if taken.len() < more {
            let rest: Cpus = candidates.difference(&taken).copied().collect();
            let numas = affinity.map_or(0, |m| m.len() as usize);
            taken.extend(self.take(&rest, more - taken.len(), numas)?);
        }
        for c in &taken {
            self.default_set.remove(c);
        }
        let baseline = self.baseline(pod, container, held);
        let mut new = held.clone();
        new.extend(taken.iter().copied());
        self.set_resized(pod, container, baseline, new.clone());
        Ok(new)
    }

    /// Adds to `taken`, up to `more` CPUs, free `candidates` of the uncore
    /// caches the `held` CPUs are in: whole free cores that fit first, then
    /// single threads, lowest core first (`prefer-align-cpus-by-uncorecache`
    /// for a grow: the extra CPUs share the container's caches where they
    /// can).
    fn take_from_own_uncores(&self, held: &Cpus, candidates: &Cpus, more: usize, taken: &mut Cpus) {
        let uncores: Vec<u32> = held
            .iter()
            .filter_map(|c| self.topo.info(*c).map(|i| i.uncore))
            .collect();
        let own: Cpus = candidates
            .iter()
            .copied()
            .filter(|c| !taken.contains(c))
            .filter(|c| {
                self.topo
                    .info(*c)
                    .is_some_and(|i| uncores.contains(&i.uncore))
            })
            .collect();
        let mut cores: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for c in &own {
            if let Some(i) = self.topo.info(*c) {
                cores.entry(i.core).or_default().push(*c);
            }
        }
        let whole = self.whole_cores(&own);
        for threads in cores.values() {
            if threads.iter().all(|c| whole.contains(c)) && taken.len() + threads.len() <= more {
                taken.extend(threads.iter().copied());
            }
        }
        for c in &own {
            if taken.len() == more {
                break;
            }
            taken.insert(*c);
        }
    }

    /// The CPUs of `cpus` whose every thread is in `cpus`.
    fn whole_cores(&self, cpus: &Cpus) -> Cpus {
        cpus.iter()
            .copied()
            .filter(|c| {
                self.topo.info(*c).is_some_and(|i| {
                    self.topo
                        .all_cpus_in(crate::topology::Level::Core, i.core)
                        .is_subset(cpus)
                })
            })
            .collect()
    }

    fn shrink(
        &mut self,
        pod: &str,
        container: &str,
        held: &Cpus,
        requested: usize,
    ) -> Result<Cpus, CpuError> {
        let baseline = self.baseline(pod, container, held);
        if requested < baseline.len() {
            return Err(CpuError::ResizeBelowBaseline {
                pod: pod.to_owned(),
                container: container.to_owned(),
                requested,
                baseline: to_cpuset(&baseline),
            });
        }
        // The extra CPUs by core (a CPU the machine does not place now is
        // its own group). Given back first: those of cores without a
        // baseline CPU (the siblings of its first CPUs, which a grow took
        // first, go last), lone threads before whole cores, highest core
        // first.
        let baseline_cores: Vec<u32> = baseline
            .iter()
            .filter_map(|c| self.topo.info(*c).map(|i| i.core))
            .collect();
        let mut groups: BTreeMap<(bool, u32), Vec<u32>> = BTreeMap::new();
        for &c in held.difference(&baseline) {
            let key = self.topo.info(c).map_or((true, c), |i| (false, i.core));
            groups.entry(key).or_default().push(c);
        }
        let mut order: Vec<((bool, u32), Vec<u32>)> = groups.into_iter().collect();
        order.reverse();
        order.sort_by_key(|((unplaced, core), g)| {
            (!unplaced && baseline_cores.contains(core), g.len())
        });
        let mut released = Cpus::new();
        let give = held.len() - requested;
        for c in order.into_iter().flat_map(|(_, g)| g.into_iter().rev()) {
            if released.len() == give {
                break;
            }
            released.insert(c);
        }
        let new: Cpus = held.difference(&released).copied().collect();
        self.set_resized(pod, container, baseline, new.clone());
        self.return_to_pool(&released);
        Ok(new)
    }
}
