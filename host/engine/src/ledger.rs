//! The allocation ledger: the host's own record of which container holds
//! which exclusive CPU and which device, and the one place that enforces
//! topomgr's exclusivity invariant.
//!
//! # The invariant
//!
//! After every change (admission, release, restore at start):
//! - every CPU of an allocation is an online CPU of the machine, and every
//!   memory node (`mems`) is a NUMA node of the machine;
//! - an exclusive CPU is held by one container only, and a physical device
//!   is held by one container only, whatever provider, resource name or id
//!   it is given under (see Device identity below), except that a later container
//!   of the **same pod** may reuse what an ordinary (non-restartable) init
//!   container holds: init containers run to completion before the next
//!   container starts, so the kubelet hands their CPUs and devices on
//!   (`cpusToReuse` in the CPU Manager's static policy, `devicesToReuse` in
//!   the Device Manager). A sidecar (restartable init container) or an app
//!   container runs for the pod's lifetime: what it holds is never shared;
//! - nothing is held by a pod that is not admitted.
//!
//! Providers are not trusted to keep it: `Ledger::check` judges each
//! provider's [`Allocation`] before the admission goes on, and a violation
//! fails the admission (the caller rolls everything back). `Ledger::restore`
//! rebuilds the ledger from a restored pod table and reports, never drops,
//! what the machine lost or what two pods hold at once.
//!
//! # Device identity
//!
//! A device is what it physically is, not its (resource, id): the same GPU
//! or VF may be served by two providers under two resource names (issue
//! 37), or listed under another id after a reload. Each provider says what
//! its devices are ([`LoadedProvider::device_identities`](crate::provider::LoadedProvider::device_identities):
//! `pci:<address>`, `serial:<serial>`), and an id that is itself a PCI
//! address is that PCI device (what a provider built before the call gets);
//! a device with neither is known by its resource and id. The ledger holds
//! every identity of a device, so two names of one device are one device.
//!
//! The cost of a check or a change is proportional to the CPUs and devices
//! of the container concerned, not to the number of pods held.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use topomgr_sdk::devices::normalize_pci_address;
use topomgr_sdk::{Allocation, CpuSet, Machine, NumaMask, PodView};

/// What a container is to the reuse rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// An ordinary init container: finished before the next container
    /// starts, so later containers of its pod may reuse what it holds.
    Init,
    /// An app container or a sidecar: runs for the pod's lifetime.
    Running,
}

/// One container's hold on a CPU or a device.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claim {
    pod: Arc<str>,
    container: Arc<str>,
    role: Role,
    /// For a device, the name it was given under: `<resource> device <id>`.
    device: Option<Arc<str>>,
}

/// The device `id` of `resource` as messages name it.
fn device_name(resource: &str, id: &str) -> String {
    format!("{resource} device {id}")
}

/// Prefix of a PCI address identity (the SDK's).
const PCI_IDENTITY: &str = "pci:";
/// Prefix of a serial identity (the SDK's).
const SERIAL_IDENTITY: &str = "serial:";
/// Prefix of the key of a device known by its resource and id alone.
const ID_KEY: &str = "id:";

/// The keys a device is held under: the identities its provider lists
/// (`listed`), `pci:<address>` when its id is a PCI address, and
/// `id:<resource> <id>` when it has neither.
pub fn physical_identities(resource: &str, id: &str, listed: &[String]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::with_capacity(listed.len() + 1);
    for identity in listed {
        let identity = match identity.strip_prefix(PCI_IDENTITY) {
            Some(a) => normalize_pci_address(a)
                .map_or_else(|| identity.clone(), |a| format!("{PCI_IDENTITY}{a}")),
            None => identity.clone(),
        };
        if !keys.contains(&identity) {
            keys.push(identity);
        }
    }
    if let Some(a) = normalize_pci_address(id) {
        let key = format!("{PCI_IDENTITY}{a}");
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    if keys.is_empty() {
        keys.push(format!("{ID_KEY}{resource} {id}"));
    }
    keys
}

/// A physical identity in words: `PCI device 0000:17:00.0`.
pub fn describe_identity(key: &str) -> String {
    if let Some(a) = key.strip_prefix(PCI_IDENTITY) {
        format!("PCI device {a}")
    } else if let Some(s) = key.strip_prefix(SERIAL_IDENTITY) {
        format!("the device with serial {s}")
    } else if let Some(rest) = key.strip_prefix(ID_KEY) {
        match rest.split_once(' ') {
            Some((resource, id)) => device_name(resource, id),
            None => rest.to_owned(),
        }
    } else {
        format!("the device {key}")
    }
}

/// What each device of each resource physically is, as the providers list
/// them: (resource, id) -> identities.
pub type IdentityBook = HashMap<(String, String), Vec<String>>;

/// Who holds something: a pod and one of its containers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    /// Pod uid.
    pub pod: String,
    /// `namespace/name` of the pod.
    pub label: String,
    /// Container name.
    pub container: String,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pod {} (uid {}) container {:?}",
            self.label, self.pod, self.container
        )
    }
}

/// A provider's allocation that breaks the invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Violation {
    /// The provider that made the allocation.
    pub provider: String,
    /// What is wrong: the provider, the pod and container, what is held by whom.
    pub message: String,
}

/// Something a restored pod table holds that breaks the invariant; kept and
/// reported, never dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// CPUs allocated to a container are not online on this machine.
    VanishedCpus {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// The missing CPUs.
        cpus: CpuSet,
    },
    /// NUMA nodes of a container's `mems` do not exist on this machine.
    VanishedNumaNodes {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// The missing nodes.
        nodes: NumaMask,
    },
    /// PCI devices allocated to a container are not on this machine.
    VanishedDevices {
        /// Pod uid.
        pod: String,
        /// Container name.
        container: String,
        /// Resource name.
        resource: String,
        /// The missing PCI addresses.
        ids: Vec<String>,
    },
    /// Something is held by containers of different pods (or by two running
    /// containers of one pod).
    Conflict {
        /// What is held twice: `CPUs 3-4` or `example.com/foo foo-1`.
        what: String,
        /// Who holds it.
        holders: Vec<Holder>,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::VanishedCpus {
                pod,
                container,
                cpus,
            } => write!(
                f,
                "pod {pod:?} container {container:?}: CPUs {cpus} are allocated but not online on this machine"
            ),
            Finding::VanishedNumaNodes {
                pod,
                container,
                nodes,
            } => write!(
                f,
                "pod {pod:?} container {container:?}: NUMA nodes {nodes} are allocated but not present on this machine"
            ),
            Finding::VanishedDevices {
                pod,
                container,
                resource,
                ids,
            } => write!(
                f,
                "pod {pod:?} container {container:?}: {resource} devices {} are allocated but not present on this machine",
                ids.join(",")
            ),
            Finding::Conflict { what, holders } => {
                let who: Vec<String> = holders.iter().map(Holder::to_string).collect();
                write!(
                    f,
                    "{what} held by more than one container at once: {}; release all but one of these pods",
                    who.join(" and ")
                )
            }
        }
    }
}

/// The ledger of one machine.
#[derive(Debug, Clone)]
pub struct Ledger {
    online: CpuSet,
    nodes: NumaMask,
    pci: BTreeSet<String>,
    /// Exclusive CPU -> its claims (one, or an init container and the later
    /// containers of its pod that reuse it).
    cpus: HashMap<u32, Vec<Claim>>,
    /// The keys of `cpus`, as a set.
    exclusive: CpuSet,
    /// What the providers' devices physically are.
    identities: IdentityBook,
    /// Physical identity (see [`physical_identities`]) -> its claims.
    devices: HashMap<String, Vec<Claim>>,
    /// What each pod holds, to release it in time proportional to its size.
    pods: HashMap<String, PodHold>,
}

#[derive(Debug, Clone, Default)]
struct PodHold {
    label: String,
    cpus: BTreeSet<u32>,
    devices: BTreeSet<String>,
}

/// The exclusive CPUs and device ids of one allocation.
fn claimed(a: &Allocation) -> (CpuSet, Vec<(String, String)>) {
    let cpus = if a.exclusive {
        a.cpus.clone()
    } else {
        CpuSet::new()
    };
    let devices = a
        .devices
        .iter()
        .flat_map(|(r, ids)| ids.iter().map(move |id| (r.clone(), id.clone())))
        .collect();
    (cpus, devices)
}

fn role(pod: &PodView, container: &str) -> Role {
    if pod
        .init_containers
        .iter()
        .any(|c| c.name == container && !c.sidecar)
    {
        Role::Init
    } else {
        Role::Running
    }
}

fn label(pod: &PodView) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

fn is_pci_address(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 12
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b':',
            10 => *c == b'.',
            _ => c.is_ascii_hexdigit(),
        })
}

/// One device id: not empty, no separator of the environment formats
/// (`NVIDIA_VISIBLE_DEVICES=a,b`, `PCIDEVICE_*=a,b`), no whitespace or
/// control character.
fn is_single_device_id(id: &str) -> bool {
    !id.is_empty()
        && !id
            .chars()
            .any(|c| c == ',' || c.is_whitespace() || c.is_control())
}

fn list_or_none(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        "nothing".to_owned()
    } else {
        names.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

impl Ledger {
    /// An empty ledger for `machine`.
    pub(crate) fn new(machine: &Machine) -> Ledger {
        Ledger {
            online: machine.online_cpus(),
            nodes: machine.numa_mask(),
            pci: machine
                .pci_devices
                .iter()
                .map(|d| d.address.clone())
                .collect(),
            cpus: HashMap::new(),
            exclusive: CpuSet::new(),
            identities: IdentityBook::new(),
            devices: HashMap::new(),
            pods: HashMap::new(),
        }
    }

    /// Know the providers' devices by `book` from now on. What is held
    /// stays keyed as it was: [`Ledger::restore`] rebuilds it under the
    /// new identities.
    pub(crate) fn set_identities(&mut self, book: IdentityBook) {
        self.identities = book;
    }

    /// The keys device `id` of `resource` is held under.
    fn keys_of(&self, resource: &str, id: &str) -> Vec<String> {
        let listed = self
            .identities
            .get(&(resource.to_owned(), id.to_owned()))
            .map_or(&[][..], Vec::as_slice);
        physical_identities(resource, id, listed)
    }

    /// CPUs held exclusively by some container.
    pub fn exclusive_cpus(&self) -> &CpuSet {
        &self.exclusive
    }

    /// The online CPUs of the machine.
    pub fn online_cpus(&self) -> &CpuSet {
        &self.online
    }

    /// The NUMA nodes of the machine.
    pub fn numa_nodes(&self) -> NumaMask {
        self.nodes
    }

    /// Number of pods holding something.
    #[cfg(test)]
    fn pods_holding(&self) -> usize {
        self.pods.len()
    }

    /// Who holds each of `cpus` exclusively (CPUs nobody holds are left out).
    pub fn holders_of(&self, cpus: &CpuSet) -> BTreeMap<Holder, CpuSet> {
        let mut out: BTreeMap<Holder, CpuSet> = BTreeMap::new();
        for cpu in cpus.iter() {
            for c in self.cpus.get(&cpu).into_iter().flatten() {
                out.entry(self.holder(c)).or_default().insert(cpu);
            }
        }
        out
    }

    fn holder(&self, c: &Claim) -> Holder {
        Holder {
            pod: c.pod.to_string(),
            label: self
                .pods
                .get(&*c.pod)
                .map(|p| p.label.clone())
                .unwrap_or_default(),
            container: c.container.to_string(),
        }
    }

    /// Whether a claim by (`pod`, `container`) may share something `existing`
    /// already holds.
    fn compatible(existing: &Claim, pod: &str, container: &str) -> bool {
        *existing.pod == *pod && (*existing.container == *container || existing.role == Role::Init)
    }

    /// Judge `provider`'s allocation `a` for `container` of `pod` against
    /// the machine, everything held by other containers and what earlier
    /// providers `given` this container (a device given twice under two
    /// names is refused). Nothing changes.
    pub(crate) fn check(
        &self,
        pod: &PodView,
        container: &str,
        provider: &str,
        a: &Allocation,
        given: &Allocation,
    ) -> Result<(), Violation> {
        let who = format!("pod {} container {container:?}", label(pod));
        let fail = |message: String| Violation {
            provider: provider.to_owned(),
            message,
        };
        let offline = a.cpus.difference(&self.online);
        if !offline.is_empty() {
            return Err(fail(format!(
                "provider {provider:?} gave {who} CPUs {offline}, which are not online CPUs of this machine (online: {})",
                self.online
            )));
        }
        let missing = a.mems.difference(self.nodes);
        if !missing.is_empty() {
            return Err(fail(format!(
                "provider {provider:?} gave {who} memory on NUMA node(s) {missing}, which this machine does not have (its nodes: {})",
                self.nodes
            )));
        }
        let (cpus, devices) = claimed(a);
        let mut held: BTreeMap<Holder, CpuSet> = BTreeMap::new();
        for cpu in cpus.iter() {
            for c in self.cpus.get(&cpu).into_iter().flatten() {
                if !Self::compatible(c, &pod.uid, container) {
                    held.entry(self.holder(c)).or_default().insert(cpu);
                }
            }
        }
        if !held.is_empty() {
            let parts: Vec<String> = held
                .iter()
                .map(|(h, cpus)| format!("CPUs {cpus} are held by {h}"))
                .collect();
            return Err(fail(format!(
                "provider {provider:?} gave {who} CPUs {cpus} exclusively, but {}",
                parts.join("; ")
            )));
        }
        // What this container already got from earlier providers, and
        // from this allocation so far: one device under two names is
        // given twice.
        let mut mine: HashMap<String, String> = HashMap::new();
        for (resource, id) in claimed(given).1 {
            for key in self.keys_of(&resource, &id) {
                mine.insert(key, device_name(&resource, &id));
            }
        }
        for (resource, id) in &devices {
            let name = device_name(resource, id);
            for key in self.keys_of(resource, id) {
                if let Some(c) = self
                    .devices
                    .get(&key)
                    .into_iter()
                    .flatten()
                    .find(|c| !Self::compatible(c, &pod.uid, container))
                {
                    let message = match c.device.as_deref() {
                        Some(other) if other != name => format!(
                            "provider {provider:?} gave {who} {name}, but that is {}, held by {} as {other}; one physical device is given to one container",
                            describe_identity(&key),
                            self.holder(c)
                        ),
                        _ => format!(
                            "provider {provider:?} gave {who} {name}, but it is held by {}",
                            self.holder(c)
                        ),
                    };
                    return Err(fail(message));
                }
                if let Some(other) = mine.insert(key.clone(), name.clone()) {
                    if other != name {
                        return Err(fail(format!(
                            "provider {provider:?} gave {who} {name}, but that is {}, which the container is also given as {other}; one physical device is given once",
                            describe_identity(&key)
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Judge the devices of `provider`'s allocation for `container` of `pod`
    /// against the request and what the provider owns (`owns`: the
    /// resources its inventory lists; `None` when it could not say). Every
    /// resource given must be one the provider owns, with exactly as many
    /// ids as the container requests, each id a single device (no empty id,
    /// no comma or whitespace, which the environment formats separate
    /// devices with) given once; every extended resource the container
    /// requests that the provider owns must be given. Nothing changes.
    pub(crate) fn check_devices(
        &self,
        pod: &PodView,
        container: &str,
        provider: &str,
        a: &Allocation,
        owns: Option<&BTreeSet<String>>,
    ) -> Result<(), Violation> {
        let who = format!("pod {} container {container:?}", label(pod));
        let fail = |message: String| Violation {
            provider: provider.to_owned(),
            message,
        };
        let requested =
            |resource: &str| pod.container(container).map_or(0, |c| c.request(resource));
        for (resource, ids) in &a.devices {
            if let Some(owned) = owns {
                if !owned.contains(resource) {
                    return Err(fail(format!(
                        "provider {provider:?} gave {who} {resource} devices {ids:?}, but its inventory does not list {resource} (it lists: {})",
                        list_or_none(owned)
                    )));
                }
            }
            if let Some(id) = ids.iter().find(|id| !is_single_device_id(id)) {
                return Err(fail(format!(
                    "provider {provider:?} gave {who} {resource} device id {id:?}, which is not one device id (empty, or with a comma, whitespace or a control character, which the environment formats separate devices with)"
                )));
            }
            let mut seen = BTreeSet::new();
            if let Some(id) = ids.iter().find(|id| !seen.insert(id.as_str())) {
                return Err(fail(format!(
                    "provider {provider:?} gave {who} {resource} device {id} more than once ({ids:?})"
                )));
            }
            let want = requested(resource);
            if ids.len() as u64 != want {
                return Err(fail(format!(
                    "provider {provider:?} gave {who} {} {resource} device(s) {ids:?}, but the container requested {want}",
                    ids.len()
                )));
            }
        }
        if let (Some(owned), Some(c)) = (owns, pod.container(container)) {
            if let Some((resource, want)) = c.requests.iter().find(|(r, n)| {
                **n > 0
                    && crate::extended::is_extended(r)
                    && owned.contains(r.as_str())
                    && !a.devices.contains_key(r.as_str())
            }) {
                return Err(fail(format!(
                    "provider {provider:?} gave {who} no {resource} device, but the container requested {want} and the provider's inventory lists {resource}"
                )));
            }
        }
        Ok(())
    }

    /// Record what `container` of `pod` holds (its merged allocation, every
    /// provider's part already [checked](Ledger::check)).
    pub(crate) fn hold(&mut self, pod: &PodView, container: &str, a: &Allocation) {
        let (cpus, devices) = claimed(a);
        let devices: Vec<(String, Vec<String>)> = devices
            .iter()
            .map(|(resource, id)| (device_name(resource, id), self.keys_of(resource, id)))
            .collect();
        let entry = self.pods.entry(pod.uid.clone()).or_insert_with(|| PodHold {
            label: label(pod),
            ..PodHold::default()
        });
        let claim = Claim {
            pod: Arc::from(pod.uid.as_str()),
            container: Arc::from(container),
            role: role(pod, container),
            device: None,
        };
        for cpu in cpus.iter() {
            let claims = self.cpus.entry(cpu).or_default();
            if !claims.contains(&claim) {
                claims.push(claim.clone());
            }
            self.exclusive.insert(cpu);
            entry.cpus.insert(cpu);
        }
        for (name, keys) in devices {
            let claim = Claim {
                device: Some(Arc::from(name)),
                ..claim.clone()
            };
            for key in keys {
                let claims = self.devices.entry(key.clone()).or_default();
                if !claims.contains(&claim) {
                    claims.push(claim.clone());
                }
                entry.devices.insert(key);
            }
        }
    }

    /// Forget everything pod `uid` holds.
    pub(crate) fn release(&mut self, uid: &str) {
        let Some(hold) = self.pods.remove(uid) else {
            return;
        };
        for cpu in hold.cpus {
            if let Some(claims) = self.cpus.get_mut(&cpu) {
                claims.retain(|c| *c.pod != *uid);
                if claims.is_empty() {
                    self.cpus.remove(&cpu);
                    self.exclusive.remove(cpu);
                }
            }
        }
        for key in hold.devices {
            if let Some(claims) = self.devices.get_mut(&key) {
                claims.retain(|c| *c.pod != *uid);
                if claims.is_empty() {
                    self.devices.remove(&key);
                }
            }
        }
    }

    /// Rebuild from a restored table of admitted pods (containers in
    /// admission order): everything is held as restored, and what breaks
    /// the invariant is returned.
    pub(crate) fn restore<'a>(
        &mut self,
        pods: impl IntoIterator<Item = (&'a PodView, &'a [(String, Allocation)])>,
    ) -> Vec<Finding> {
        self.cpus.clear();
        self.exclusive = CpuSet::new();
        self.devices.clear();
        self.pods.clear();
        let mut findings = Vec::new();
        for (pod, containers) in pods {
            for (name, a) in containers {
                findings.extend(self.vanished(pod, name, a));
                self.hold(pod, name, a);
            }
        }
        findings.extend(self.conflicts());
        findings
    }

    fn vanished(&self, pod: &PodView, container: &str, a: &Allocation) -> Vec<Finding> {
        let mut out = Vec::new();
        let gone = a.cpus.difference(&self.online);
        if !gone.is_empty() {
            out.push(Finding::VanishedCpus {
                pod: pod.uid.clone(),
                container: container.to_owned(),
                cpus: gone,
            });
        }
        let gone = a.mems.difference(self.nodes);
        if !gone.is_empty() {
            out.push(Finding::VanishedNumaNodes {
                pod: pod.uid.clone(),
                container: container.to_owned(),
                nodes: gone,
            });
        }
        for (resource, ids) in &a.devices {
            let gone: Vec<String> = ids
                .iter()
                .filter(|id| is_pci_address(id) && !self.pci.contains(id.as_str()))
                .cloned()
                .collect();
            if !gone.is_empty() {
                out.push(Finding::VanishedDevices {
                    pod: pod.uid.clone(),
                    container: container.to_owned(),
                    resource: resource.clone(),
                    ids: gone,
                });
            }
        }
        out
    }

    /// Everything held against the reuse rule (empty while the invariant holds).
    pub fn conflicts(&self) -> Vec<Finding> {
        let bad = |claims: &[Claim]| {
            claims.iter().enumerate().any(|(i, later)| {
                claims[..i]
                    .iter()
                    .any(|c| !Self::compatible(c, &later.pod, &later.container))
            })
        };
        let mut by_holders: BTreeMap<Vec<Holder>, CpuSet> = BTreeMap::new();
        for (cpu, claims) in &self.cpus {
            if bad(claims) {
                let holders = claims.iter().map(|c| self.holder(c)).collect();
                by_holders.entry(holders).or_default().insert(*cpu);
            }
        }
        let mut out: Vec<Finding> = by_holders
            .into_iter()
            .map(|(holders, cpus)| Finding::Conflict {
                what: format!("CPUs {cpus}"),
                holders,
            })
            .collect();
        // One finding per device and holders, however many identities
        // the device has: (names it is held under, holders) -> what.
        let mut devices: BTreeMap<(BTreeSet<&str>, Vec<Holder>), String> = BTreeMap::new();
        let mut keys: Vec<(&String, &Vec<Claim>)> =
            self.devices.iter().filter(|(_, c)| bad(c)).collect();
        keys.sort_by(|a, b| a.0.cmp(b.0));
        for (key, claims) in keys {
            let names: BTreeSet<&str> = claims.iter().filter_map(|c| c.device.as_deref()).collect();
            let what = match names.iter().next() {
                Some(one) if names.len() == 1 => (*one).to_owned(),
                _ => format!(
                    "{} (as {})",
                    describe_identity(key),
                    names.iter().copied().collect::<Vec<_>>().join(" and ")
                ),
            };
            let holders = claims.iter().map(|c| self.holder(c)).collect();
            devices.entry((names, holders)).or_insert(what);
        }
        let mut devices: Vec<(Vec<Holder>, String)> = devices
            .into_iter()
            .map(|((_, h), what)| (h, what))
            .collect();
        devices.sort_by(|a, b| a.1.cmp(&b.1));
        out.extend(
            devices
                .into_iter()
                .map(|(holders, what)| Finding::Conflict { what, holders }),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use topomgr_sdk::{testkit, ContainerView};

    use super::*;

    fn machine() -> Machine {
        testkit::machine(2, 4)
    }

    fn pod(uid: &str, init: &[(&str, bool)], apps: &[&str]) -> PodView {
        let c = |name: &str, sidecar: bool| ContainerView::new(name).with_sidecar(sidecar);
        PodView::new(
            uid,
            format!("{uid}-name"),
            "ns",
            topomgr_sdk::QosClass::Guaranteed,
        )
        .with_init_containers(init.iter().map(|(n, s)| c(n, *s)).collect())
        .with_containers(apps.iter().map(|n| c(n, false)).collect())
    }

    fn excl(cpus: &str) -> Allocation {
        Allocation::default().with_cpus(CpuSet::parse(cpus).unwrap(), true)
    }

    fn dev(id: &str) -> Allocation {
        let mut a = Allocation::default();
        a.devices
            .insert("example.com/foo".to_owned(), vec![id.to_owned()]);
        a
    }

    #[test]
    fn exclusive_cpus_belong_to_one_pod() {
        let mut l = Ledger::new(&machine());
        let a = pod("a", &[], &["app"]);
        let b = pod("b", &[], &["app"]);
        l.check(&a, "app", "mock", &excl("1-5"), &Allocation::default())
            .unwrap();
        l.hold(&a, "app", &excl("1-5"));
        let v = l
            .check(&b, "app", "mock", &excl("4-7"), &Allocation::default())
            .unwrap_err();
        assert_eq!(v.provider, "mock");
        assert_eq!(
            v.message,
            "provider \"mock\" gave pod ns/b-name container \"app\" CPUs 4-7 exclusively, but CPUs 4-5 are held by pod ns/a-name (uid a) container \"app\""
        );
        // Shared (non-exclusive) CPUs may overlap exclusive ones.
        let shared = Allocation::default().with_cpus(CpuSet::parse("0-7").unwrap(), false);
        l.check(&b, "app", "cpu", &shared, &Allocation::default())
            .unwrap();
        assert_eq!(l.exclusive_cpus().to_string(), "1-5");
        l.release("a");
        assert!(l.exclusive_cpus().is_empty());
        l.check(&b, "app", "mock", &excl("4-7"), &Allocation::default())
            .unwrap();
        assert_eq!(l.pods_holding(), 0);
    }

    #[test]
    fn machine_limits() {
        let l = Ledger::new(&machine());
        let p = pod("a", &[], &["app"]);
        assert_eq!(
            l.check(&p, "app", "mock", &excl("0-1000"), &Allocation::default()).unwrap_err().message,
            "provider \"mock\" gave pod ns/a-name container \"app\" CPUs 8-1000, which are not online CPUs of this machine (online: 0-7)"
        );
        let a = Allocation::default().with_mems(NumaMask::parse_list("2-3").unwrap());
        assert_eq!(
            l.check(&p, "app", "memory", &a, &Allocation::default()).unwrap_err().message,
            "provider \"memory\" gave pod ns/a-name container \"app\" memory on NUMA node(s) 2-3, which this machine does not have (its nodes: 0-1)"
        );
    }

    #[test]
    fn init_containers_hand_on_what_they_hold_within_their_pod() {
        let mut l = Ledger::new(&machine());
        let p = pod("p", &[("init", false), ("side", true)], &["app", "app2"]);
        for (c, cpus) in [("init", "1-2"), ("side", "3")] {
            l.check(&p, c, "cpu", &excl(cpus), &Allocation::default())
                .unwrap();
            l.hold(&p, c, &excl(cpus));
        }
        l.hold(&p, "init", &dev("foo-0"));
        // The app reuses the init container's CPU and device ...
        l.check(&p, "app", "cpu", &excl("1"), &Allocation::default())
            .unwrap();
        l.hold(&p, "app", &excl("1"));
        l.check(&p, "app", "gpu", &dev("foo-0"), &Allocation::default())
            .unwrap();
        l.hold(&p, "app", &dev("foo-0"));
        // ... but not the sidecar's, and a second app not the first app's.
        assert!(l
            .check(&p, "app2", "cpu", &excl("3"), &Allocation::default())
            .is_err());
        assert_eq!(
            l.check(&p, "app2", "cpu", &excl("1"), &Allocation::default()).unwrap_err().message,
            "provider \"cpu\" gave pod ns/p-name container \"app2\" CPUs 1 exclusively, but CPUs 1 are held by pod ns/p-name (uid p) container \"app\""
        );
        assert_eq!(
            l.check(&p, "app2", "gpu", &dev("foo-0"), &Allocation::default()).unwrap_err().message,
            "provider \"gpu\" gave pod ns/p-name container \"app2\" example.com/foo device foo-0, but it is held by pod ns/p-name (uid p) container \"app\""
        );
        // Another pod may not reuse an init container's CPUs.
        let q = pod("q", &[], &["app"]);
        assert!(l
            .check(&q, "app", "cpu", &excl("2"), &Allocation::default())
            .is_err());
        assert!(l.conflicts().is_empty());
        assert_eq!(
            l.holders_of(&CpuSet::parse("1-4").unwrap())
                .into_iter()
                .map(|(h, c)| format!("{}:{c}", h.container))
                .collect::<Vec<_>>(),
            ["app:1", "init:1-2", "side:3"]
        );
    }

    #[test]
    fn restore_reports_vanished_resources_and_conflicts() {
        let mut l = Ledger::new(&machine());
        let a = pod("a", &[], &["app"]);
        let b = pod("b", &[], &["app"]);
        let mut gone = excl("6-9");
        gone.mems = NumaMask::parse_list("0,2").unwrap();
        gone.devices.insert(
            "nic".to_owned(),
            vec!["0000:3b:00.1".to_owned(), "x".to_owned()],
        );
        let ca = vec![("app".to_owned(), gone)];
        let cb = vec![("app".to_owned(), excl("7"))];
        let found = l.restore([(&a, ca.as_slice()), (&b, cb.as_slice())]);
        let text: Vec<String> = found.iter().map(Finding::to_string).collect();
        assert_eq!(
            text,
            [
                "pod \"a\" container \"app\": CPUs 8-9 are allocated but not online on this machine",
                "pod \"a\" container \"app\": NUMA nodes 2 are allocated but not present on this machine",
                "pod \"a\" container \"app\": nic devices 0000:3b:00.1 are allocated but not present on this machine",
                "CPUs 7 held by more than one container at once: pod ns/a-name (uid a) container \"app\" and pod ns/b-name (uid b) container \"app\"; release all but one of these pods",
            ]
        );
        // Both are kept; releasing one ends the conflict.
        assert_eq!(l.exclusive_cpus().to_string(), "6-9");
        l.release("b");
        assert!(l.conflicts().is_empty());
        assert_eq!(l.exclusive_cpus().to_string(), "6-9");
    }

    /// What a restored pod holds on a CPU that went offline, or a device
    /// that vanished, stays its own: when the CPU is online again (a
    /// reload rebuilds the ledger on the new machine), nobody else is
    /// given it while the pod holds it.
    #[test]
    fn restored_holds_on_vanished_resources_stay_the_pods() {
        let a = pod("a", &[], &["app"]);
        let b = pod("b", &[], &["app"]);
        let mut held = excl("6-7");
        held.devices
            .insert("nic".to_owned(), vec!["0000:3b:00.1".to_owned()]);
        let ca = vec![("app".to_owned(), held)];
        // CPU 7 offline: reported, and still held.
        let mut offline = machine();
        offline.cpus.retain(|c| c.id != 7);
        let mut l = Ledger::new(&offline);
        let found = l.restore([(&a, ca.as_slice())]);
        assert!(
            matches!(&found[..], [Finding::VanishedCpus { cpus, .. }, Finding::VanishedDevices { .. }] if cpus.to_string() == "7"),
            "{found:?}"
        );
        assert_eq!(l.exclusive_cpus().to_string(), "6-7");
        // Online again: the pod holds it, another pod is refused it.
        let mut l = Ledger::new(&machine());
        let found = l.restore([(&a, ca.as_slice())]);
        assert!(
            !found
                .iter()
                .any(|f| matches!(f, Finding::VanishedCpus { .. })),
            "{found:?}"
        );
        let v = l
            .check(&b, "app", "cpu", &excl("7"), &Allocation::default())
            .unwrap_err();
        assert!(v.message.contains("CPUs 7"), "{}", v.message);
        let mut dev = Allocation::default();
        dev.devices
            .insert("nic".to_owned(), vec!["0000:3b:00.1".to_owned()]);
        assert!(l
            .check(&b, "app", "nic", &dev, &Allocation::default())
            .is_err());
        l.release("a");
        l.check(&b, "app", "cpu", &excl("7"), &Allocation::default())
            .unwrap();
    }

    fn device(resource: &str, id: &str) -> Allocation {
        let mut a = Allocation::default();
        a.devices.insert(resource.to_owned(), vec![id.to_owned()]);
        a
    }

    /// Issue 37: one GPU served by two providers under two resource names
    /// (`nvidia.com/gpu`, `example.com/gpu`) is one device: held by one pod
    /// under one name, it is refused to another pod under the other, by
    /// its PCI address whether the id is the address or the provider lists
    /// the address as the device's identity.
    #[test]
    fn one_physical_device_under_two_resource_names_is_held_once() {
        let a = pod("a", &[], &["app"]);
        let b = pod("b", &[], &["app"]);
        let none = Allocation::default();
        // Ids that are PCI addresses (a provider built before the call).
        let mut l = Ledger::new(&machine());
        let first = device("nvidia.com/gpu", "0000:17:00.0");
        l.check(&a, "app", "gpu", &first, &none).unwrap();
        l.hold(&a, "app", &first);
        let second = device("example.com/gpu", "0000:17:00.0");
        let v = l.check(&b, "app", "gpu2", &second, &none).unwrap_err();
        assert_eq!(v.provider, "gpu2");
        assert_eq!(
            v.message,
            "provider \"gpu2\" gave pod ns/b-name container \"app\" example.com/gpu device 0000:17:00.0, but that is PCI device 0000:17:00.0, held by pod ns/a-name (uid a) container \"app\" as nvidia.com/gpu device 0000:17:00.0; one physical device is given to one container"
        );
        // A VF under two resource prefixes is one VF.
        let vf = device("intel.com/vf", "0000:18:01.2");
        l.check(&a, "app", "sriov", &vf, &none).unwrap();
        l.hold(&a, "app", &vf);
        assert!(l
            .check(
                &b,
                "app",
                "sriov2",
                &device("example.org/vf", "0000:18:01.2"),
                &none
            )
            .is_err());
        l.release("a");
        l.check(&b, "app", "gpu2", &second, &none).unwrap();

        // Ids that are not addresses: the providers' identities say.
        let mut l = Ledger::new(&machine());
        l.set_identities(IdentityBook::from([
            (
                ("nvidia.com/gpu".to_owned(), "GPU-0".to_owned()),
                vec!["pci:0000:17:00.0".to_owned(), "serial:GPU-8e2c".to_owned()],
            ),
            (
                ("example.com/gpu".to_owned(), "gpu-a".to_owned()),
                vec!["serial:GPU-8e2c".to_owned()],
            ),
        ]));
        l.hold(&a, "app", &device("nvidia.com/gpu", "GPU-0"));
        let v = l
            .check(
                &b,
                "app",
                "gpu2",
                &device("example.com/gpu", "gpu-a"),
                &none,
            )
            .unwrap_err();
        assert!(
            v.message.contains("but that is the device with serial GPU-8e2c, held by pod ns/a-name (uid a) container \"app\" as nvidia.com/gpu device GPU-0"),
            "{}",
            v.message
        );
        let v = l
            .check(
                &b,
                "app",
                "gpu2",
                &device("example.com/gpu", "0000:17:00.0"),
                &none,
            )
            .unwrap_err();
        assert!(
            v.message.contains("PCI device 0000:17:00.0"),
            "{}",
            v.message
        );
        // Another device of the same resources is free.
        l.check(
            &b,
            "app",
            "gpu2",
            &device("example.com/gpu", "gpu-b"),
            &none,
        )
        .unwrap();
    }

    /// One container given one device by two providers under two names is
    /// refused too: the second provider's part is judged against the
    /// first's.
    #[test]
    fn one_container_is_not_given_one_device_twice() {
        let l = Ledger::new(&machine());
        let a = pod("a", &[], &["app"]);
        let given = device("nvidia.com/gpu", "0000:17:00.0");
        let v = l
            .check(
                &a,
                "app",
                "gpu2",
                &device("example.com/gpu", "0000:17:00.0"),
                &given,
            )
            .unwrap_err();
        assert_eq!(
            v.message,
            "provider \"gpu2\" gave pod ns/a-name container \"app\" example.com/gpu device 0000:17:00.0, but that is PCI device 0000:17:00.0, which the container is also given as nvidia.com/gpu device 0000:17:00.0; one physical device is given once"
        );
        // Two names of one device within one allocation.
        let mut both = device("nvidia.com/gpu", "0000:17:00.0");
        both.devices.insert(
            "example.com/gpu".to_owned(),
            vec!["0000:17:00.0".to_owned()],
        );
        assert!(l
            .check(&a, "app", "gpu", &both, &Allocation::default())
            .is_err());
    }

    /// A restored table in which two pods hold one device under two names
    /// is one conflict naming the device and both names.
    #[test]
    fn restore_reports_one_device_held_under_two_names_once() {
        let m = testkit::machine_with_devices(
            2,
            4,
            vec![testkit::pci_device(
                "0000:17:00.0",
                "0x10de",
                "0x030200",
                Some(0),
            )],
        );
        let mut l = Ledger::new(&m);
        l.set_identities(IdentityBook::from([(
            ("nvidia.com/gpu".to_owned(), "GPU-0".to_owned()),
            vec!["pci:0000:17:00.0".to_owned(), "serial:GPU-8e2c".to_owned()],
        )]));
        let a = pod("a", &[], &["app"]);
        let b = pod("b", &[], &["app"]);
        let ca = vec![("app".to_owned(), device("nvidia.com/gpu", "GPU-0"))];
        let cb = vec![("app".to_owned(), device("example.com/gpu", "0000:17:00.0"))];
        let found = l.restore([(&a, ca.as_slice()), (&b, cb.as_slice())]);
        let text: Vec<String> = found.iter().map(Finding::to_string).collect();
        assert_eq!(
            text,
            ["PCI device 0000:17:00.0 (as example.com/gpu device 0000:17:00.0 and nvidia.com/gpu device GPU-0) held by more than one container at once: pod ns/a-name (uid a) container \"app\" and pod ns/b-name (uid b) container \"app\"; release all but one of these pods"]
        );
        l.release("b");
        assert!(l.conflicts().is_empty());
    }

    #[test]
    fn physical_identities_of_a_device() {
        assert_eq!(
            physical_identities("r", "00000000:17:00.0", &[]),
            ["pci:0000:17:00.0"]
        );
        assert_eq!(physical_identities("r", "GPU-0", &[]), ["id:r GPU-0"]);
        assert_eq!(
            physical_identities("r", "GPU-0", &["pci:0000:B1:00.0".to_owned()]),
            ["pci:0000:b1:00.0"]
        );
        assert_eq!(describe_identity("id:r GPU-0"), "r device GPU-0");
    }
}
