//! Between NRI's messages and topomgr's types: what the runtime tells
//! about a pod and a container, as `topomgr_runtime` reads it, and a
//! container's cpuset and environment as an NRI adjustment or update.

use std::collections::BTreeMap;

use topomgr_cgroup::Cpuset;
use topomgr_nri::api;
use topomgr_runtime::{self as resources, ContainerSpec, Mapping, MappingError};

/// Where a container's CDI devices are found: the daemon's
/// [`crate::cdi::Resolver`] (spec directories and sysfs root) and the
/// kubelet's PodResources socket its DRA claims are asked of (none: not
/// asked).
#[derive(Debug, Clone, Default)]
pub(crate) struct CdiSource {
    pub resolver: crate::cdi::Resolver,
    pub kubelet: Option<KubeletClaims>,
}

/// The kubelet's PodResources socket (config `[cdi]
/// kubelet_pod_resources_socket`), asked for a container's DRA claims.
#[derive(Debug, Clone)]
pub(crate) struct KubeletClaims {
    pub socket: std::path::PathBuf,
    /// How long connecting and `Get` may take together: the answer holds
    /// up the container's creation.
    pub timeout: std::time::Duration,
    /// Where a claim's device that the kubelet gives without a CDI name is
    /// looked up (`[kubernetes]` configured), else such devices are only
    /// logged.
    pub slices: Option<SliceReader>,
}

/// What the kubelet's `Get` says a container's DRA claims hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Claimed {
    /// Their CDI device names, in order, each once.
    pub cdi: Vec<String>,
    /// Their devices the driver gave no CDI device for, by driver, pool and
    /// device name, each once.
    pub by_name: Vec<topomgr_runtime::dra::DraDevice>,
}

/// The API server's ResourceSlices, read to match a claim's device the
/// kubelet names by driver, pool and device only to its PCI device
/// (`[kubernetes]` API access).
#[derive(Clone)]
pub(crate) struct SliceReader {
    client: std::sync::Arc<tokio::sync::Mutex<topomgr_kube::ApiClient>>,
    timeout: std::time::Duration,
}

impl std::fmt::Debug for SliceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SliceReader")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// How long reading a pool's ResourceSlices may hold up a container's
/// creation.
pub(crate) const SLICES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

impl SliceReader {
    /// A reader on `client` (a connection of its own), each pool's read
    /// bounded by `timeout`.
    pub(crate) fn new(client: topomgr_kube::ApiClient, timeout: std::time::Duration) -> Self {
        SliceReader {
            client: std::sync::Arc::new(tokio::sync::Mutex::new(client)),
            timeout,
        }
    }

    /// The PCI devices of `devices`, by their pools' ResourceSlices
    /// ([`topomgr_runtime::dra::dra_device`]), and notes on those that
    /// could not be matched.
    pub(crate) async fn devices(
        &self,
        devices: &[topomgr_runtime::dra::DraDevice],
    ) -> (Vec<topomgr_runtime::AssignedDevices>, Vec<String>) {
        let mut pools: BTreeMap<(&str, &str), Option<topomgr_kube::resource_slices::PoolDevices>> =
            BTreeMap::new();
        let mut notes = Vec::new();
        for d in devices {
            let key = (d.driver.as_str(), d.pool.as_str());
            if pools.contains_key(&key) {
                continue;
            }
            let read = async {
                let mut client = self.client.lock().await;
                topomgr_kube::resource_slices::pool_devices(&mut client, &d.driver, &d.pool).await
            };
            let found = match tokio::time::timeout(self.timeout, read).await {
                Ok(Ok(p)) => Some(p),
                Ok(Err(e)) => {
                    notes.push(format!(
                        "cannot read the ResourceSlices of DRA driver {} pool {}: {e}; its claimed devices are not aligned with",
                        d.driver, d.pool
                    ));
                    None
                }
                Err(_) => {
                    notes.push(format!(
                        "the API server did not list the ResourceSlices of DRA driver {} within {} ms; its claimed devices are not aligned with",
                        d.driver,
                        self.timeout.as_millis()
                    ));
                    None
                }
            };
            pools.insert(key, found);
        }
        let mut out = Vec::new();
        for d in devices {
            let Some(pool) = &pools[&(d.driver.as_str(), d.pool.as_str())] else {
                continue;
            };
            match topomgr_runtime::dra::dra_device(d, pool.get(&d.device)) {
                Ok(a) => out.push(a),
                Err(note) => notes.push(note),
            }
        }
        (out, notes)
    }
}

/// How long the kubelet's `Get` may hold up a container's creation.
pub(crate) const KUBELET_CLAIMS_TIMEOUT: std::time::Duration =
    std::time::Duration::from_millis(200);

impl KubeletClaims {
    /// The devices of the DRA claims of container `container` of pod
    /// `name` in `namespace`, as the kubelet's PodResources `Get` answers
    /// them (`dynamic_resources[].claim_resources[]`, filled by the
    /// kubelet's DRA manager since KEP-3695, kubernetes/kubernetes#115847;
    /// `Get` is GA in 1.36): their CDI device names, and the devices with
    /// none by driver, pool and device name. A pod or container the
    /// kubelet does not list has none.
    pub(crate) async fn claims(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
    ) -> Result<Claimed, String> {
        Ok(claimed(&self.get(namespace, name).await?, container))
    }

    /// The kubelet's PodResources `Get` of pod `name` in `namespace`,
    /// bounded by the timeout.
    async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<topomgr_podresources::v1::GetPodResourcesResponse, String> {
        let ask = async {
            let mut client =
                topomgr_podresources::PodResourcesClient::connect(&self.socket, self.timeout)
                    .await?;
            client.get(namespace, name).await
        };
        match tokio::time::timeout(self.timeout, ask).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "the kubelet's PodResources socket {} did not answer Get within {} ms",
                self.socket.display(),
                self.timeout.as_millis()
            )),
        }
    }
}

/// What the kubelet's `answer` says the DRA claims of container
/// `container` hold.
fn claimed(answer: &topomgr_podresources::v1::GetPodResourcesResponse, container: &str) -> Claimed {
    let mut out = Claimed::default();
    let claimed = answer
        .pod_resources
        .iter()
        .flat_map(|p| &p.containers)
        .filter(|c| c.name == container)
        .flat_map(|c| &c.dynamic_resources)
        .flat_map(|r| &r.claim_resources);
    for r in claimed {
        // Only a device listed with no CDI device is taken by name: the
        // kubelet (1.37, `GetDynamicResources` in
        // pkg/kubelet/cm/container_manager_linux.go) lists a driver's
        // devices with the CDI devices of that device and of the
        // driver's devices before it, so a later device without any
        // of its own may still carry some.
        if r.cdi_devices.is_empty() {
            let d = topomgr_runtime::dra::DraDevice {
                driver: r.driver_name.clone(),
                pool: r.pool_name.clone(),
                device: r.device_name.clone(),
            };
            if !d.device.is_empty() && !out.by_name.contains(&d) {
                out.by_name.push(d);
            }
        }
        for d in &r.cdi_devices {
            if !out.cdi.contains(&d.name) {
                out.cdi.push(d.name.clone());
            }
        }
    }
    out
}

impl KubeletClaims {
    /// The PCI devices of the claims' devices the kubelet gave without a
    /// CDI name, matched through their ResourceSlices where the API server
    /// is configured; each one not matched is logged.
    async fn devices_by_name(
        &self,
        who: &str,
        devices: &[topomgr_runtime::dra::DraDevice],
    ) -> Vec<topomgr_runtime::AssignedDevices> {
        let Some(slices) = &self.slices else {
            let names: Vec<String> = devices.iter().map(ToString::to_string).collect();
            tracing::warn!(container = %who, devices = %names.join(","), "the kubelet gives these DRA devices without a CDI device; with [kubernetes] API access they are matched to PCI devices by their ResourceSlices, without it they are not aligned with");
            return Vec::new();
        };
        let (found, notes) = slices.devices(devices).await;
        for n in notes {
            tracing::warn!(container = %who, "{n}");
        }
        for d in &found {
            tracing::info!(container = %who, device = %d.variable, pci = ?d.ids, "the container was given a DRA device, matched by its ResourceSlice");
        }
        found
    }
}

impl CdiSource {
    /// Pod scope: the devices the kubelet lists for each container of
    /// `pod` but `except` (the container being created, whose own sources
    /// count) — its device plugins' devices
    /// ([`topomgr_runtime::kubelet_devices`]) and, with CDI spec
    /// directories, its DRA claims' devices — by container name. The
    /// kubelet allocates both before the pod's first container is
    /// created. Without a kubelet socket, none; the kubelet not answering
    /// is logged and counts as none.
    pub(crate) async fn pod_devices(
        &self,
        who: &str,
        pod: &api::PodSandbox,
        except: &str,
    ) -> BTreeMap<String, Vec<topomgr_runtime::AssignedDevices>> {
        let mut out = BTreeMap::new();
        let Some(kubelet) = &self.kubelet else {
            return out;
        };
        let answer = match kubelet.get(&pod.namespace, &pod.name).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(pod = %who, error = %e, "pod scope: cannot read the devices of the pod's other containers from the kubelet; the pod is aligned with the first container's");
                return out;
            }
        };
        for c in answer
            .pod_resources
            .iter()
            .flat_map(|p| &p.containers)
            .filter(|c| c.name != except)
        {
            let mut devices = Vec::new();
            for d in &c.devices {
                let (given, notes) =
                    topomgr_runtime::kubelet_devices(&d.resource_name, &d.device_ids);
                for n in notes {
                    tracing::warn!(pod = %who, container = %c.name, "{n}");
                }
                devices.extend(given);
            }
            if !self.resolver.is_off() {
                let claims = claimed(&answer, &c.name);
                let who = format!("{who} ({})", c.name);
                devices.extend(
                    self.resolver
                        .resolve(&who, &BTreeMap::new(), &[], &claims.cdi),
                );
                if !claims.by_name.is_empty() {
                    devices.extend(kubelet.devices_by_name(&who, &claims.by_name).await);
                }
            }
            if !devices.is_empty() {
                out.insert(c.name.clone(), devices);
            }
        }
        out
    }

    /// The CDI devices of `container` of `pod` (`who` names it in logs).
    /// The spec files are looked at each call and read again when one
    /// changed ([`topomgr_runtime::cdi::CdiCache`]): DRA drivers write a
    /// claim's spec just before its containers are created. With `ask_kubelet` and a
    /// kubelet socket, the kubelet's DRA claims count too; the kubelet not
    /// answering in time is logged, and the other sources still count.
    pub(crate) async fn devices(
        &self,
        who: &str,
        pod: &api::PodSandbox,
        container: &api::Container,
        ask_kubelet: bool,
    ) -> Vec<topomgr_runtime::AssignedDevices> {
        if self.resolver.is_off() {
            return Vec::new();
        }
        let mut claimed = Vec::new();
        let mut by_name = Vec::new();
        if let Some(kubelet) = self.kubelet.as_ref().filter(|_| ask_kubelet) {
            if !pod.name.is_empty() && !pod.namespace.is_empty() {
                match kubelet
                    .claims(&pod.namespace, &pod.name, &container.name)
                    .await
                {
                    Ok(c) => {
                        if !c.cdi.is_empty() {
                            tracing::info!(container = %who, devices = %c.cdi.join(","), "the kubelet's DRA claims give the container these CDI devices");
                        }
                        if !c.by_name.is_empty() {
                            by_name = kubelet.devices_by_name(who, &c.by_name).await;
                        }
                        claimed = c.cdi
                    }
                    Err(e) => {
                        tracing::warn!(container = %who, error = %e, "cannot read the container's DRA claims from the kubelet; its other CDI devices still count")
                    }
                }
            }
        }
        let nodes: Vec<topomgr_sdk::DeviceNode> = container
            .linux
            .iter()
            .flat_map(|l| &l.devices)
            .filter_map(|d| {
                Some(topomgr_sdk::DeviceNode::new(
                    d.path.clone(),
                    d.r#type.clone(),
                    u32::try_from(d.major).ok()?,
                    u32::try_from(d.minor).ok()?,
                ))
            })
            .collect();
        self.resolver
            .resolve(who, &container.annotations, &nodes, &claimed)
            .into_iter()
            .chain(by_name)
            .collect()
    }
}

/// The pod as `topomgr_runtime` reads it.
pub(crate) fn sandbox(pod: &api::PodSandbox) -> topomgr_runtime::PodSandbox {
    topomgr_runtime::PodSandbox {
        uid: pod.uid.clone(),
        name: pod.name.clone(),
        namespace: pod.namespace.clone(),
        annotations: pod.annotations.clone(),
        cgroup_parent: Some(pod.cgroup_parent().to_owned()).filter(|p| !p.is_empty()),
    }
}

/// A container's Linux resources as `topomgr_runtime` reads them (NRI
/// carries the OCI fields; an empty cpuset string is "not set").
pub(crate) fn linux_resources(r: Option<&api::LinuxResources>) -> resources::LinuxResources {
    let Some(r) = r else {
        return resources::LinuxResources::default();
    };
    let cpu = r.cpu.as_ref().map(|c| resources::LinuxCpu {
        shares: c.shares.as_ref().map(|v| v.value),
        quota: c.quota.as_ref().map(|v| v.value),
        period: c.period.as_ref().map(|v| v.value),
        cpus: Some(c.cpus.clone()).filter(|s| !s.trim().is_empty()),
        mems: Some(c.mems.clone()).filter(|s| !s.trim().is_empty()),
    });
    let memory = r.memory.as_ref().map(|m| resources::LinuxMemory {
        limit: m.limit.as_ref().map(|v| v.value),
        reservation: m.reservation.as_ref().map(|v| v.value),
    });
    let hugepage_limits = (!r.hugepage_limits.is_empty()).then(|| {
        r.hugepage_limits
            .iter()
            .map(|h| resources::HugepageLimit {
                page_size: h.page_size.clone(),
                limit: h.limit,
            })
            .collect()
    });
    resources::LinuxResources {
        cpu,
        memory,
        hugepage_limits,
    }
}

/// The annotation topomgr adds to every container it places (the CPUs it
/// set at creation). containerd keeps it in the container's spec, so it is
/// listed again at every Synchronize: a container carrying it has
/// topomgr's cpuset, not its user's (updates cannot change annotations,
/// so its CPUs may have changed since).
pub(crate) const PLACED_CPUS: &str = "topomgr.io/placed-cpus";

/// What topomgr does with `container` of `pod` ([`topomgr_runtime::map_container`]).
/// A container whose cpuset topomgr set ([`PLACED_CPUS`]) is not pinned
/// by its user: it is mapped as if it had no cpuset.
pub(crate) fn map(
    pod: &api::PodSandbox,
    container: &api::Container,
) -> Result<Mapping, MappingError> {
    let sandbox = sandbox(pod);
    let mut resources = linux_resources(container.resources());
    if container.annotations.contains_key(PLACED_CPUS) {
        if let Some(cpu) = &mut resources.cpu {
            cpu.cpus = None;
            cpu.mems = None;
        }
    }
    topomgr_runtime::map_container(&ContainerSpec {
        id: &container.id,
        name: Some(&container.name)
            .filter(|n| !n.is_empty())
            .map(String::as_str),
        annotations: &container.annotations,
        sandbox: Some(&sandbox),
        cgroup_parent: None,
        resources: &resources,
        env: &container.env,
    })
}

/// `container` as an update with `update` would leave it: each CPU and
/// memory value the update sets (non-zero, as the runtime applies them:
/// containerd and CRI-O leave a zero field of an update as it is) and its
/// hugepage limits replace the container's.
pub(crate) fn overlay_resources(container: &mut api::Container, update: &api::LinuxResources) {
    let r = container
        .linux
        .get_or_insert_with(Default::default)
        .resources
        .get_or_insert_with(Default::default);
    if let Some(u) = &update.cpu {
        let cpu = r.cpu.get_or_insert_with(Default::default);
        if u.shares.as_ref().is_some_and(|v| v.value != 0) {
            cpu.shares.clone_from(&u.shares);
        }
        if u.quota.as_ref().is_some_and(|v| v.value != 0) {
            cpu.quota.clone_from(&u.quota);
        }
        if u.period.as_ref().is_some_and(|v| v.value != 0) {
            cpu.period.clone_from(&u.period);
        }
    }
    if let Some(u) = &update.memory {
        let memory = r.memory.get_or_insert_with(Default::default);
        if u.limit.as_ref().is_some_and(|v| v.value != 0) {
            memory.limit.clone_from(&u.limit);
        }
    }
    if !update.hugepage_limits.is_empty() {
        r.hugepage_limits.clone_from(&update.hugepage_limits);
    }
}

pub(crate) use crate::cdi::assigned;

/// Resources that set a container's cpuset (CPUs and memory nodes) only.
pub(crate) fn cpuset_resources(set: &Cpuset) -> api::LinuxResources {
    api::LinuxResources::cpuset(&set.cpus.to_string(), &set.mems.to_string())
}

/// The CFS quota the kubelet asks for a container with exclusive CPUs
/// (`DisableCPUQuotaWithExclusiveCPUs`, kubernetes/kubernetes #127525):
/// unlimited. runc writes it as `cpu.cfs_quota_us = -1` (v1) or
/// `cpu.max = "max <period>"` (v2), the period kept.
pub(crate) const UNLIMITED_QUOTA: i64 = -1;

/// The adjustment of a container being created: its cpuset and the
/// providers' environment, and with `unlimited_quota` (a container holding
/// exclusive CPUs) a CFS quota of -1.
pub(crate) fn adjustment(
    set: &Cpuset,
    env: &BTreeMap<String, String>,
    unlimited_quota: bool,
) -> api::ContainerAdjustment {
    let mut resources = cpuset_resources(set);
    if unlimited_quota {
        if let Some(cpu) = resources.cpu.as_mut() {
            cpu.quota = Some(api::OptionalInt64 {
                value: UNLIMITED_QUOTA,
            });
        }
    }
    api::ContainerAdjustment {
        env: env
            .iter()
            .map(|(key, value)| api::KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        linux: Some(api::LinuxContainerAdjustment {
            resources: Some(resources),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An update of container `id`'s cpuset.
pub(crate) fn update(id: &str, set: &Cpuset, ignore_failure: bool) -> api::ContainerUpdate {
    api::ContainerUpdate {
        ignore_failure,
        ..api::ContainerUpdate::resources(id, cpuset_resources(set))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topomgr_nri::api::{
        LinuxContainer, LinuxCpu, LinuxMemory, LinuxPodSandbox, OptionalInt64, OptionalUInt64,
    };
    use topomgr_sdk::{CpuSet, NumaMask, QosClass};

    fn pod(parent: &str) -> api::PodSandbox {
        api::PodSandbox {
            id: "sandbox-1".into(),
            name: "web-0".into(),
            uid: "8dbc5a0a-1111-2222-3333-444455556666".into(),
            namespace: "shop".into(),
            linux: Some(LinuxPodSandbox {
                cgroup_parent: parent.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container(shares: u64, quota: i64, memory: i64, env: &[&str]) -> api::Container {
        api::Container {
            id: "c0ffee".into(),
            pod_sandbox_id: "sandbox-1".into(),
            name: "app".into(),
            env: env.iter().map(|e| e.to_string()).collect(),
            linux: Some(LinuxContainer {
                resources: Some(api::LinuxResources {
                    cpu: Some(LinuxCpu {
                        shares: Some(OptionalUInt64 { value: shares }),
                        quota: Some(OptionalInt64 { value: quota }),
                        period: Some(OptionalUInt64 { value: 100_000 }),
                        ..Default::default()
                    }),
                    memory: Some(LinuxMemory {
                        limit: Some(OptionalInt64 { value: memory }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// What containerd hands on for a Guaranteed 1-CPU container and a
    /// Burstable one becomes the kubelet's pod again: requests, limits,
    /// QoS from the cgroup parent, identity from the sandbox, the
    /// runtime's container id as the uid.
    #[test]
    fn an_nri_container_maps_to_the_pod_the_kubelet_had() {
        let g = pod("/kubepods/pod8dbc5a0a-1111-2222-3333-444455556666");
        let Mapping::Admit(req) = map(&g, &container(1024, 100_000, 128 << 20, &[])).unwrap()
        else {
            panic!("admitted")
        };
        let view = &req.pod.view;
        assert_eq!(
            (
                view.uid.as_str(),
                view.name.as_str(),
                view.namespace.as_str()
            ),
            ("c0ffee", "web-0", "shop")
        );
        assert_eq!(view.qos, QosClass::Guaranteed);
        let c = &view.containers[0];
        assert_eq!(c.name, "app");
        assert_eq!(c.requests["cpu"], 1000);
        assert_eq!(c.limits["cpu"], 1000);
        assert_eq!(c.limits["memory"], 128 << 20);
        assert_eq!(
            req.identity.pod_uid.as_deref(),
            Some("8dbc5a0a-1111-2222-3333-444455556666")
        );
        let b = pod("/kubepods/burstable/pod8dbc5a0a-1111-2222-3333-444455556666");
        let Mapping::Admit(req) = map(&b, &container(102, 50_000, 0, &[])).unwrap() else {
            panic!("admitted")
        };
        assert_eq!(req.pod.view.qos, QosClass::Burstable);
        assert_eq!(req.pod.view.containers[0].requests["cpu"], 100);
        assert_eq!(req.pod.view.containers[0].limits["cpu"], 500);
    }

    #[test]
    fn device_variables_become_the_named_calls_request() {
        let g = pod("/kubepods/pod8dbc5a0a-1111-2222-3333-444455556666");
        let c = container(
            1024,
            100_000,
            0,
            &[
                "NVIDIA_VISIBLE_DEVICES=GPU-aa,1",
                "PCIDEVICE_INTEL_COM_SRIOV_VF=0000:3b:02.1",
            ],
        );
        let Mapping::Admit(req) = map(&g, &c).unwrap() else {
            panic!("admitted")
        };
        let text = serde_json::to_string(&assigned(&req.devices)).unwrap();
        assert_eq!(
            text,
            r#"{"devices":[{"source":"NVIDIA_VISIBLE_DEVICES","resource":{"prefix":"nvidia.com/"},"ids":[{"uuid":"GPU-aa"},{"index":1}]},{"source":"PCIDEVICE_INTEL_COM_SRIOV_VF","resource":{"env_name":"INTEL_COM_SRIOV_VF"},"ids":[{"pci_address":"0000:3b:02.1"}]}]}"#
        );
    }

    #[test]
    fn a_pinned_container_and_an_opted_out_pod_are_left_alone() {
        let g = pod("/kubepods/pod8dbc5a0a-1111-2222-3333-444455556666");
        let mut c = container(1024, 100_000, 0, &[]);
        c.linux
            .as_mut()
            .unwrap()
            .resources
            .as_mut()
            .unwrap()
            .cpu
            .as_mut()
            .unwrap()
            .cpus = "3".into();
        assert!(matches!(map(&g, &c).unwrap(), Mapping::Leave(_)));
        let mut opted = g.clone();
        opted
            .annotations
            .insert("topomgr.io/opt-out".into(), "true".into());
        assert!(matches!(
            map(&opted, &container(1024, 100_000, 0, &[])).unwrap(),
            Mapping::Leave(_)
        ));
    }

    #[test]
    fn adjustments_and_updates_carry_the_cpuset_and_environment() {
        let set = Cpuset {
            cpus: CpuSet::parse("1").unwrap(),
            mems: NumaMask::from_nodes([0]).unwrap(),
        };
        let env = BTreeMap::from([("NVIDIA_VISIBLE_DEVICES".to_owned(), "GPU-aa".to_owned())]);
        let a = adjustment(&set, &env, false);
        let cpu = a.linux.unwrap().resources.unwrap().cpu.unwrap();
        assert_eq!((cpu.cpus.as_str(), cpu.mems.as_str()), ("1", "0"));
        assert_eq!(cpu.quota, None, "a shared container keeps its quota");
        assert_eq!(a.env[0].key, "NVIDIA_VISIBLE_DEVICES");
        let u = update("abc", &set, true);
        assert_eq!(u.container_id, "abc");
        assert!(u.ignore_failure);
        let cpu = u.linux.unwrap().resources.unwrap().cpu.unwrap();
        assert_eq!((cpu.cpus.as_str(), cpu.mems.as_str()), ("1", "0"));
        assert_eq!(cpu.shares, None, "an update changes the cpuset only");
    }

    /// An exclusive container's adjustment asks for the unlimited quota
    /// the kubelet asks for (-1) and leaves the period as the runtime set it.
    #[test]
    fn an_exclusive_containers_adjustment_lifts_its_cfs_quota() {
        let set = Cpuset {
            cpus: CpuSet::parse("2-3").unwrap(),
            mems: NumaMask::from_nodes([0]).unwrap(),
        };
        let a = adjustment(&set, &BTreeMap::new(), true);
        let cpu = a.linux.unwrap().resources.unwrap().cpu.unwrap();
        assert_eq!(cpu.quota, Some(OptionalInt64 { value: -1 }));
        assert_eq!((cpu.period, cpu.shares), (None, None));
        assert_eq!(cpu.cpus, "2-3");
    }
}
