//! The containers a runtime face follows (the NRI face): every container
//! topomgr placed and every one it keeps in the shared pool without
//! holding anything for it, with what the runtime was last told of each
//! one's cpuset.
//!
//! This is the node's one book of those containers, kept beside its pods
//! ([`crate::state::NodeState::followed`]): a container's allocation
//! is never copied here, it is read from the pod admitted whole that
//! holds it under pod scope ([`FollowedContainer::held_by`], by its name),
//! or else from the admitted pod whose uid is the
//! container id (a container whose pod is not admitted, or was released by
//! other means while it runs, gets the shared pool), so every answer is
//! computed from the one state. It is not saved: the runtime lists every
//! container at each registration (Synchronize) and the book is made anew
//! from that list.
//!
//! A container's cpuset is [`container_cpuset`] of its allocation with the
//! committed shared pool; [`Followed::updates`] is every container whose
//! cpuset differs from what the runtime was told, marking them told.
//!
//! # The order of updates
//!
//! The runtime applies an event's answer and an update the follower sends
//! (CRI `UpdateContainerResources`, or NRI `UpdateContainers`) each under
//! its one lock, in the order it takes the lock. An answer computed while an unsolicited update is on its way may
//! therefore be applied before it, and the older update after it. Every
//! answer made while an update is in flight marks the book
//! ([`Followed::sent`] answers it); the sender then computes again from
//! the state as it is then and sends what differs, so the runtime ends with
//! the newer cpusets one round trip later.
//!
//! # Containers pinned by others
//!
//! The book also keeps the containers it does *not* follow because they
//! arrived with a cpuset and without topomgr's mark (pinned by their user,
//! another plugin, or the kubelet's own CPU manager): their CPUs are
//! handed out exclusively to no one while they run
//! ([`Followed::pinned_cpus`], sent to the providers by
//! [`crate::state::NodeState::exclude_pinned_cpus`]), and those of kubelet
//! pods are noted in `/v1/health` until they are removed or a Synchronize
//! no longer lists them ([`Followed::pin`], [`Followed::pinned`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use topomgr_cgroup::pool::{container_cpuset, is_shared};
use topomgr_cgroup::Cpuset;
use topomgr_engine::admission::AdmitResult;
use topomgr_sdk::{Allocation, CpuSet, NumaMask};

/// One container followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowedContainer {
    /// Its pod's sandbox id (the runtime's).
    pub sandbox: String,
    /// The container's name in its pod.
    pub name: String,
    /// `namespace/pod/container`, for messages.
    pub who: String,
    /// Its cgroup as the runtime names it (`linux.cgroups_path`; cgroupfs
    /// `/kubepods/…/<id>` or systemd `<slice>:<prefix>:<id>`), when told.
    pub cgroup: Option<String>,
    /// The cpuset the runtime was last told (`None`: not known).
    pub told: Option<Cpuset>,
    /// Its pod's uid as the kubelet knows it (the sandbox's `uid`).
    pub pod_uid: String,
    /// Whether the runtime started it (listed running, or PostStart).
    pub started: bool,
    /// The uid of the pod admitted whole that holds its allocation (pod
    /// scope: its sandbox's pod, read from the API server and admitted at
    /// its first container); `None`: its own one-container pod, whose uid
    /// is the container id.
    pub held_by: Option<String>,
}

impl FollowedContainer {
    /// The uid of the admitted pod its allocation is read from: the pod
    /// it is held by, or its own (`id`, the container id).
    pub fn pod_uid_in<'a>(&'a self, id: &'a str) -> &'a str {
        self.held_by.as_deref().unwrap_or(id)
    }

    /// Its allocation (container `id`): the one of its name in the pod
    /// admitted whole that holds it, or its one-container pod's; `None`
    /// when that pod is not admitted (or, admitted whole, has no
    /// container of its name: an ephemeral container).
    pub fn allocation<'a>(
        &self,
        pods: &'a BTreeMap<String, AdmitResult>,
        id: &str,
    ) -> Option<&'a Allocation> {
        let r = pods.get(self.pod_uid_in(id))?;
        match self.held_by {
            None => r.containers.first(),
            Some(_) => r.containers.iter().find(|c| c.name == self.name),
        }
        .map(|c| &c.allocation)
    }

    /// Whether it holds exclusive CPUs.
    pub fn is_exclusive(&self, pods: &BTreeMap<String, AdmitResult>, id: &str) -> bool {
        self.allocation(pods, id).is_some_and(|a| !is_shared(a))
    }

    /// The cpuset it should have with `pool` as the shared pool on a
    /// machine of `nodes`; `None` when the shared pool is empty and it is
    /// a member.
    pub fn desired(
        &self,
        pods: &BTreeMap<String, AdmitResult>,
        id: &str,
        pool: &CpuSet,
        nodes: NumaMask,
    ) -> Option<Cpuset> {
        let shared = Allocation::default();
        container_cpuset(self.allocation(pods, id).unwrap_or(&shared), pool, nodes).ok()
    }
}

/// An update of one container's cpuset: (container id, cpuset).
pub type CpusetUpdate = (String, Cpuset);

/// Every container followed, by the runtime's container id.
#[derive(Debug, Default)]
pub struct Followed {
    containers: BTreeMap<String, FollowedContainer>,
    /// An unsolicited update is on its way to the runtime.
    in_flight: bool,
    /// An answer changed cpusets while an update was in flight.
    changed_in_flight: bool,
    /// Containers left alone because the kubelet pinned them, by id.
    pinned: BTreeMap<String, PinnedContainer>,
}

/// A container of a kubelet pod that arrived with a cpuset topomgr did not
/// give it (left alone, not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedContainer {
    /// Its pod's sandbox id (the runtime's).
    pub sandbox: String,
    /// `namespace/pod/container (cpus)`, for the health note.
    pub what: String,
    /// The CPUs it is pinned to: handed out exclusively to no one while
    /// it runs ([`Followed::pinned_cpus`]).
    pub cpus: CpuSet,
    /// Pinned by the kubelet's own CPU manager (a kubelet pod): a health
    /// note, since the kubelet's managers must be off beside topomgr.
    pub kubelet: bool,
}

impl Followed {
    /// The containers followed.
    pub fn len(&self) -> usize {
        self.containers.len()
    }

    /// Whether none is followed.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty()
    }

    /// Container `id`.
    pub fn get(&self, id: &str) -> Option<&FollowedContainer> {
        self.containers.get(id)
    }

    /// The ids of every container followed.
    pub fn ids(&self) -> Vec<String> {
        self.containers.keys().cloned().collect()
    }

    /// Every container followed.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &FollowedContainer)> {
        self.containers.iter()
    }

    /// Follow container `id` (replacing what was known of it).
    pub fn follow(&mut self, id: &str, c: FollowedContainer) {
        self.containers.insert(id.to_owned(), c);
    }

    /// Stop following container `id`.
    pub fn unfollow(&mut self, id: &str) -> Option<FollowedContainer> {
        self.containers.remove(id)
    }

    /// Follow exactly `containers` (a Synchronize: the runtime's list).
    pub fn replace(&mut self, containers: BTreeMap<String, FollowedContainer>) {
        self.containers = containers;
    }

    /// The ids of the containers of sandbox `sandbox`.
    pub fn of_sandbox(&self, sandbox: &str) -> Vec<String> {
        self.containers
            .iter()
            .filter(|(_, c)| c.sandbox == sandbox)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Older instances of container `name` of sandbox `sandbox`: followed
    /// under another id than `id` (the runtime reported their exit late).
    pub fn stale_instances(&self, sandbox: &str, name: &str, id: &str) -> Vec<String> {
        self.containers
            .iter()
            .filter(|(i, c)| i.as_str() != id && c.sandbox == sandbox && c.name == name)
            .map(|(i, _)| i.clone())
            .collect()
    }

    /// Container `id` was started.
    pub fn started(&mut self, id: &str) {
        if let Some(c) = self.containers.get_mut(id) {
            c.started = true;
        }
    }

    /// Whether any container followed but `except` runs in the shared pool.
    pub fn any_shared(&self, pods: &BTreeMap<String, AdmitResult>, except: &str) -> bool {
        self.containers
            .iter()
            .any(|(id, c)| id != except && !c.is_exclusive(pods, id))
    }

    /// The ids of the containers followed whose allocation pod `uid`
    /// holds (admitted whole, pod scope).
    pub fn held_by(&self, uid: &str) -> Vec<String> {
        self.containers
            .iter()
            .filter(|(_, c)| c.held_by.as_deref() == Some(uid))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Container `id`'s cpuset, marked told (`None`: not followed, or no
    /// cpuset can be given).
    pub fn tell(
        &mut self,
        pods: &BTreeMap<String, AdmitResult>,
        id: &str,
        pool: &CpuSet,
        nodes: NumaMask,
    ) -> Option<Cpuset> {
        let c = self.containers.get_mut(id)?;
        let want = c.desired(pods, id, pool, nodes)?;
        c.told = Some(want.clone());
        Some(want)
    }

    /// An update for every container but `except` whose cpuset differs
    /// from what the runtime was told; each is marked told. While an
    /// unsolicited update is in flight, the book notes that it changed.
    pub fn updates(
        &mut self,
        pods: &BTreeMap<String, AdmitResult>,
        pool: &CpuSet,
        nodes: NumaMask,
        except: Option<&str>,
    ) -> Vec<CpusetUpdate> {
        let mut out = Vec::new();
        for (id, c) in &mut self.containers {
            if Some(id.as_str()) == except {
                continue;
            }
            let Some(want) = c.desired(pods, id, pool, nodes) else {
                continue;
            };
            if c.told.as_ref() != Some(&want) {
                out.push((id.clone(), want.clone()));
                c.told = Some(want);
            }
        }
        if self.in_flight && !out.is_empty() {
            self.changed_in_flight = true;
        }
        out
    }

    /// What the runtime has of container `id` is `now` (`None`: not known):
    /// the next [`Followed::updates`] corrects it where it differs.
    pub fn runtime_has(&mut self, id: &str, now: Option<Cpuset>) {
        if let Some(c) = self.containers.get_mut(id) {
            c.told = now;
        }
    }

    /// Keep container `id` as pinned by the kubelet; whether that is new.
    pub fn pin(&mut self, id: &str, c: PinnedContainer) -> bool {
        self.pinned.insert(id.to_owned(), c.clone()) != Some(c)
    }

    /// Container `id` is gone: no longer kept as pinned; whether it was.
    pub fn unpin(&mut self, id: &str) -> bool {
        self.pinned.remove(id).is_some()
    }

    /// The containers of sandbox `sandbox` are gone; whether one was kept
    /// as pinned.
    pub fn unpin_sandbox(&mut self, sandbox: &str) -> bool {
        let before = self.pinned.len();
        self.pinned.retain(|_, c| c.sandbox != sandbox);
        self.pinned.len() != before
    }

    /// Keep exactly `pinned` as pinned by the kubelet (a Synchronize).
    pub fn replace_pinned(&mut self, pinned: BTreeMap<String, PinnedContainer>) {
        self.pinned = pinned;
    }

    /// What is known of the containers the kubelet pinned, in the order
    /// of their ids.
    pub fn pinned(&self) -> Vec<String> {
        self.pinned
            .values()
            .filter(|c| c.kubelet)
            .map(|c| c.what.clone())
            .collect()
    }

    /// Every CPU a container left alone as pinned is pinned to.
    pub fn pinned_cpus(&self) -> CpuSet {
        self.pinned
            .values()
            .fold(CpuSet::new(), |all, c| all.union(&c.cpus))
    }

    /// Whether an unsolicited update is on its way.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// An unsolicited update goes out now.
    pub fn sending(&mut self) {
        self.in_flight = true;
        self.changed_in_flight = false;
    }

    /// The unsolicited update came back; the runtime did not apply those
    /// of `failed`. Whether an answer changed cpusets meanwhile (then the
    /// sender computes again).
    pub fn sent(&mut self, failed: &[String]) -> bool {
        self.in_flight = false;
        for id in failed {
            self.runtime_has(id, None);
        }
        std::mem::take(&mut self.changed_in_flight)
    }
}

/// The stale instances of kubelet container `c` (id `id`) among
/// `candidates`: the same container of the same pod (pod uid and name)
/// in another sandbox, never started, and holding a pod in `pods`.
///
/// The kubelet runs one instance of a container at a time and makes a new
/// sandbox only when the old one is gone, so once `c` runs, an instance
/// in another sandbox that never started never will: it was created when
/// the runtime or topomgr went down mid-creation, and the kubelet's retry
/// is `c`. Its CPUs are `c`'s (the kubelet counted them once).
pub fn stale_siblings<'a>(
    candidates: impl IntoIterator<Item = (&'a String, &'a FollowedContainer)>,
    id: &str,
    c: &FollowedContainer,
    pods: &BTreeMap<String, AdmitResult>,
) -> Vec<String> {
    if c.pod_uid.is_empty() {
        return Vec::new();
    }
    candidates
        .into_iter()
        .filter(|(i, f)| {
            i.as_str() != id
                && f.pod_uid == c.pod_uid
                && f.name == c.name
                && f.sandbox != c.sandbox
                && !f.started
                && pods.contains_key(i.as_str())
        })
        .map(|(i, _)| i.clone())
        .collect()
}

/// The cgroup directory, relative to the hierarchy, of a container whose
/// runtime names its cgroup `path`: a cgroupfs path (`/kubepods/…/<id>`)
/// as it is, a systemd one (`<slice>:<prefix>:<name>`, runc's form) as
/// systemd lays it out (`kubepods-burstable-pod1.slice` under
/// `kubepods.slice/kubepods-burstable.slice/`, the unit `<prefix>-<name>.scope`).
/// `None` for a path that escapes the hierarchy or is not of either form.
fn cgroup_dir(path: &str) -> Option<PathBuf> {
    let rel = match path.split(':').collect::<Vec<_>>().as_slice() {
        [one] => PathBuf::from(one.trim_start_matches('/')),
        [slice, prefix, name] => {
            let mut dir = PathBuf::new();
            if let Some(stem) = slice.strip_suffix(".slice").filter(|s| !s.is_empty()) {
                let parts: Vec<&str> = stem.split('-').collect();
                for i in 1..=parts.len() {
                    dir.push(format!("{}.slice", parts[..i].join("-")));
                }
            } else if !slice.is_empty() {
                return None;
            }
            dir.push(if prefix.is_empty() {
                (*name).to_owned()
            } else {
                format!("{prefix}-{name}.scope")
            });
            dir
        }
        _ => return None,
    };
    let plain = rel
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    (plain && rel.components().next().is_some()).then_some(rel)
}

/// The cpuset (as written, read by [`topomgr_cgroup::runtime_cpuset`]) of the container
/// whose runtime names its cgroup `path`, under `cgroup_root` (cgroup v2
/// when `cgroup.controllers` is there, else the v1 `cpuset` hierarchy);
/// `None` when the cgroup does not exist (not started yet, or gone) or
/// sets no cpuset of its own.
pub fn read_cpuset(cgroup_root: &Path, path: &str) -> Result<Option<Cpuset>, String> {
    let rel = cgroup_dir(path).ok_or_else(|| format!("cgroup path {path:?} is not understood"))?;
    topomgr_cgroup::runtime_cpuset(cgroup_root, &rel).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use topomgr_engine::admission::ContainerResult;
    use topomgr_sdk::{PodView, QosClass, TopologyHint};

    fn cpus(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    fn nodes() -> NumaMask {
        NumaMask::from_nodes([0, 1]).unwrap()
    }

    fn followed(sandbox: &str) -> FollowedContainer {
        FollowedContainer {
            sandbox: sandbox.into(),
            name: "app".into(),
            who: format!("ns/{sandbox}/app"),
            cgroup: None,
            told: None,
            pod_uid: format!("uid-{sandbox}"),
            started: false,
            held_by: None,
        }
    }

    fn admitted(uid: &str, allocation: Allocation) -> (String, AdmitResult) {
        let pod = PodView::new(uid, uid, "t", QosClass::BestEffort);
        (
            uid.to_owned(),
            AdmitResult {
                pod,
                admitted: true,
                reason: None,
                message: None,
                containers: vec![ContainerResult {
                    name: "app".into(),
                    hint: TopologyHint::new(NumaMask::EMPTY, true),
                    allocation,
                }],
            },
        )
    }

    fn told(f: &Followed, id: &str) -> String {
        let t = f.get(id).unwrap().told.clone().unwrap();
        format!("{}/{}", t.cpus, t.mems)
    }

    fn cpus_of(u: &[CpusetUpdate]) -> Vec<(String, String)> {
        u.iter()
            .map(|(id, s)| (id.clone(), s.cpus.to_string()))
            .collect()
    }

    /// Containers the kubelet pinned are kept apart from those followed and
    /// go with their container or their sandbox.
    #[test]
    fn containers_the_kubelet_pinned_are_kept_until_they_go() {
        let mut f = Followed::default();
        let pin = |sandbox: &str, what: &str| PinnedContainer {
            sandbox: sandbox.into(),
            what: what.into(),
            cpus: cpus(&what[what.find('(').unwrap() + 1..what.len() - 1]),
            kubelet: true,
        };
        assert!(f.pin("b", pin("s1", "ns/p/b (2)")));
        assert!(!f.pin("b", pin("s1", "ns/p/b (2)")), "known already");
        assert!(f.pin("a", pin("s2", "ns/q/a (3)")));
        assert!(f.is_empty(), "not followed");
        assert_eq!(f.pinned(), ["ns/q/a (3)", "ns/p/b (2)"]);
        assert_eq!(f.pinned_cpus(), cpus("2-3"));
        // Pinned outside a kubelet pod: kept out of exclusive use, no note.
        let user = PinnedContainer {
            kubelet: false,
            ..pin("s4", "crictl/u/u (5)")
        };
        assert!(f.pin("u", user));
        assert_eq!(f.pinned(), ["ns/q/a (3)", "ns/p/b (2)"]);
        assert_eq!(f.pinned_cpus(), cpus("2-3,5"));
        assert!(f.unpin("u"));
        assert!(f.unpin("a"));
        assert!(!f.unpin("a"));
        assert!(!f.unpin_sandbox("s2"));
        assert!(f.unpin_sandbox("s1"));
        assert!(f.pinned().is_empty());
        f.replace_pinned([("c".to_owned(), pin("s3", "ns/r/c (1)"))].into());
        assert_eq!(f.pinned(), ["ns/r/c (1)"]);
    }

    /// Shared containers follow the pool; exclusive ones keep their CPUs
    /// and memory nodes; nothing is sent twice; a container not admitted
    /// (or released while it runs) is a member of the pool.
    #[test]
    fn updates_follow_the_pool_and_are_sent_once() {
        let exclusive = Allocation::default()
            .with_cpus(cpus("3"), true)
            .with_mems(NumaMask::from_nodes([1]).unwrap());
        let pods: BTreeMap<String, AdmitResult> = [
            admitted("g", exclusive),
            admitted("b", Allocation::default()),
        ]
        .into();
        let mut f = Followed::default();
        f.follow("g", followed("sg"));
        f.follow("b", followed("sb"));
        f.follow("x", followed("sx"));
        let ups = f.updates(&pods, &cpus("0-2"), nodes(), Some("g"));
        assert_eq!(
            cpus_of(&ups),
            [("b".into(), "0-2".into()), ("x".into(), "0-2".into())]
        );
        assert_eq!(told(&f, "b"), "0-2/0-1");
        assert!(f.get("g").unwrap().told.is_none());
        assert!(f.get("g").unwrap().is_exclusive(&pods, "g"));
        assert!(!f.get("x").unwrap().is_exclusive(&pods, "x"));
        assert!(f.any_shared(&pods, "b"), "x is shared");
        let ups = f.updates(&pods, &cpus("0-2"), nodes(), None);
        assert_eq!(cpus_of(&ups), [("g".into(), "3".into())]);
        assert_eq!(told(&f, "g"), "3/1");
        assert!(f.updates(&pods, &cpus("0-2"), nodes(), None).is_empty());
        let ups = f.updates(&pods, &cpus("0-2,4"), nodes(), None);
        assert_eq!(
            cpus_of(&ups),
            [("b".into(), "0-2,4".into()), ("x".into(), "0-2,4".into())]
        );
        // An empty pool updates no member.
        assert!(f.updates(&pods, &CpuSet::new(), nodes(), None).is_empty());
        // A container the runtime failed to update is told again.
        f.runtime_has("b", None);
        assert_eq!(f.updates(&pods, &cpus("0-2,4"), nodes(), None).len(), 1);
        assert_eq!(f.of_sandbox("sb"), ["b"]);
        assert_eq!(f.ids(), ["b", "g", "x"]);
        assert_eq!(f.stale_instances("sb", "app", "b2"), ["b"]);
        assert!(f.stale_instances("sb", "app", "b").is_empty());
    }

    #[test]
    fn cgroup_paths_of_both_drivers_and_versions_are_read() {
        assert_eq!(
            cgroup_dir("/kubepods/burstable/podu/c1"),
            Some(PathBuf::from("kubepods/burstable/podu/c1"))
        );
        assert_eq!(
            cgroup_dir("kubepods-burstable-podu.slice:cri-containerd:c1"),
            Some(PathBuf::from(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu.slice/cri-containerd-c1.scope"
            ))
        );
        assert_eq!(cgroup_dir("/kubepods/../../etc"), None);
        assert_eq!(cgroup_dir("a:b"), None);
        assert_eq!(cgroup_dir(""), None);
        let root = std::env::temp_dir().join(format!("topomgr-followed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // v1: under the cpuset hierarchy.
        let v1 = root.join("v1/cpuset/kubepods/c1");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("cpuset.cpus"), "0-1\n").unwrap();
        std::fs::write(v1.join("cpuset.mems"), "0\n").unwrap();
        let got = read_cpuset(&root.join("v1"), "/kubepods/c1")
            .unwrap()
            .unwrap();
        assert_eq!(
            (got.cpus.to_string(), got.mems.to_string()),
            ("0-1".into(), "0".into())
        );
        assert_eq!(read_cpuset(&root.join("v1"), "/kubepods/c2").unwrap(), None);
        // v2: the unified hierarchy; an empty cpuset.cpus sets none.
        let v2 = root.join("v2/kubepods/c1");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(root.join("v2/cgroup.controllers"), "cpuset cpu").unwrap();
        std::fs::write(v2.join("cpuset.cpus"), "\n").unwrap();
        std::fs::write(v2.join("cpuset.mems"), "0").unwrap();
        assert_eq!(read_cpuset(&root.join("v2"), "/kubepods/c1").unwrap(), None);
        std::fs::write(v2.join("cpuset.cpus"), "x").unwrap();
        let err = read_cpuset(&root.join("v2"), "/kubepods/c1").unwrap_err();
        assert!(
            err.contains("kubepods/c1/cpuset.cpus: cannot parse \"x\": "),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Pod scope: the containers of a pod admitted whole read their
    /// allocation from it by name, whatever their own id; one the pod has
    /// no container of (an ephemeral container) runs in the shared pool.
    #[test]
    fn containers_of_a_pod_admitted_whole_read_their_allocation_by_name() {
        let (uid, mut whole) = admitted("sandbox-1", Allocation::default());
        whole.containers.push(ContainerResult {
            name: "gpu".into(),
            hint: TopologyHint::new(NumaMask::single(1.into()), true),
            allocation: Allocation::default()
                .with_cpus(cpus("3"), true)
                .with_mems(NumaMask::single(1.into())),
        });
        let pods = BTreeMap::from([(uid.clone(), whole)]);
        let of_pod = |name: &str| FollowedContainer {
            name: name.into(),
            held_by: Some(uid.clone()),
            ..followed("sandbox-1")
        };
        let mut f = Followed::default();
        f.follow("c-gpu", of_pod("gpu"));
        f.follow("c-app", of_pod("app"));
        f.follow("c-debug", of_pod("debugger"));
        f.follow("own", followed("s2"));
        let gpu = f.get("c-gpu").unwrap();
        assert_eq!(gpu.pod_uid_in("c-gpu"), "sandbox-1");
        assert!(gpu.is_exclusive(&pods, "c-gpu"));
        assert_eq!(
            gpu.desired(&pods, "c-gpu", &cpus("0-2"), nodes()),
            Some(Cpuset {
                cpus: cpus("3"),
                mems: NumaMask::single(1.into())
            })
        );
        assert!(!f.get("c-app").unwrap().is_exclusive(&pods, "c-app"));
        assert!(f
            .get("c-debug")
            .unwrap()
            .allocation(&pods, "c-debug")
            .is_none());
        assert_eq!(f.held_by("sandbox-1"), ["c-app", "c-debug", "c-gpu"]);
        let ups = f.updates(&pods, &cpus("0-2"), nodes(), None);
        assert_eq!(
            cpus_of(&ups),
            [
                ("c-app".into(), "0-2".into()),
                ("c-debug".into(), "0-2".into()),
                ("c-gpu".into(), "3".into()),
                ("own".into(), "0-2".into())
            ]
        );
    }

    #[test]
    fn an_answer_during_an_unsolicited_update_asks_for_another() {
        let pods = BTreeMap::from([admitted("b", Allocation::default())]);
        let mut f = Followed::default();
        f.follow("b", followed("sb"));
        f.sending();
        assert_eq!(f.updates(&pods, &cpus("0"), nodes(), None).len(), 1);
        assert!(f.sent(&[]), "an answer changed a cpuset meanwhile");
        f.sending();
        assert!(f.updates(&pods, &cpus("0"), nodes(), None).is_empty());
        assert!(!f.sent(&["b".to_owned()]), "nothing changed");
        assert!(f.get("b").unwrap().told.is_none(), "b failed: not known");
    }

    #[test]
    fn a_stale_instance_is_one_that_never_started_in_another_sandbox() {
        let one = |sandbox: &str, started: bool| FollowedContainer {
            pod_uid: "uid-g".into(),
            started,
            ..followed(sandbox)
        };
        let new = one("sb-new", true);
        let mut all = BTreeMap::from([
            ("old".to_owned(), one("sb-old", false)),
            ("new".to_owned(), new.clone()),
        ]);
        let held = BTreeMap::from([admitted("old", Allocation::default())]);
        assert_eq!(stale_siblings(&all, "new", &new, &held), ["old"]);
        // Nothing held for it: nothing to take over.
        assert!(stale_siblings(&all, "new", &new, &BTreeMap::new()).is_empty());
        // Started once: it is not stale (the kubelet runs it).
        all.get_mut("old").unwrap().started = true;
        assert!(stale_siblings(&all, "new", &new, &held).is_empty());
        // The same sandbox (a restart of the container): not a sibling here.
        all.insert("old".into(), one("sb-new", false));
        assert!(stale_siblings(&all, "new", &new, &held).is_empty());
        // Another container of the pod, or another pod: not it.
        let other = FollowedContainer {
            name: "sidecar".into(),
            ..one("sb-old", false)
        };
        all.insert("old".into(), other);
        assert!(stale_siblings(&all, "new", &new, &held).is_empty());
        let unknown = FollowedContainer {
            pod_uid: String::new(),
            ..new.clone()
        };
        assert!(stale_siblings(&all, "new", &unknown, &held).is_empty());
    }
}
