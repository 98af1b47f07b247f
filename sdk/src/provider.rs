//! The safe [`Provider`] trait that plugin vendors implement.

use std::path::Path;

use crate::{
    Allocation, AssignedDeviceHints, AssignedDevicesRequest, ContainerView, CpuSet,
    DeviceIdentities, Inventory, Machine, PodView, PreferredAllocationRequest, ProviderHints,
    Reconciled, TopologyHint,
};

/// The reason of a refused [`Provider::resize`] (the kubelet's resize
/// status `Infeasible`) where no more precise reason applies.
pub const RESIZE_INFEASIBLE: &str = "ResizeInfeasible";

/// An error from a provider, with a short machine-readable `reason` (shown as
/// the admission's `reason`, e.g. `"SMTAlignmentError"`) and a `message` for
/// people that says what fell short and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("{reason}: {message}")]
pub struct ProviderError {
    /// Short reason, CamelCase, without spaces.
    pub reason: String,
    /// Human-readable explanation.
    pub message: String,
}

impl ProviderError {
    /// An error with an explicit reason.
    pub fn new(reason: impl Into<String>, message: impl Into<String>) -> Self {
        ProviderError {
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A configuration error (reason `"InvalidConfig"`).
    pub fn config(message: impl Into<String>) -> Self {
        Self::new("InvalidConfig", message)
    }

    /// An allocation failure (reason `"UnexpectedAdmissionError"`, as the kubelet says).
    pub fn admission(message: impl Into<String>) -> Self {
        Self::new("UnexpectedAdmissionError", message)
    }

    /// A checkpoint that cannot be restored (reason `"InvalidCheckpoint"`).
    pub fn checkpoint(message: impl Into<String>) -> Self {
        Self::new("InvalidCheckpoint", message)
    }

    /// A resize the provider refuses (reason [`RESIZE_INFEASIBLE`]).
    pub fn resize_infeasible(message: impl Into<String>) -> Self {
        Self::new(RESIZE_INFEASIBLE, message)
    }
}

/// The provider's `[providers.NAME.config]` table, as JSON.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProviderConfig(pub serde_json::Value);

impl ProviderConfig {
    /// Deserialize the table into the provider's own config type. The error
    /// (reason `"InvalidConfig"`) names the full key path of the offending
    /// value (`devices[0].node: invalid type: ...`); use
    /// `#[serde(deny_unknown_fields)]` so typos are reported too.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ProviderError> {
        let v = if self.0.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            self.0.clone()
        };
        serde_path_to_error::deserialize(v).map_err(|e| {
            let message = e.inner().to_string();
            let mut segments: Vec<&serde_path_to_error::Segment> = e.path().iter().collect();
            // An unknown key is already named by the message: report the
            // table that holds it.
            if let Some(serde_path_to_error::Segment::Map { key }) = segments.last() {
                if message.starts_with(&format!("unknown field `{key}`")) {
                    segments.pop();
                }
            }
            let path = key_path(&segments);
            if path.is_empty() {
                ProviderError::config(message)
            } else {
                ProviderError::config(format!("{path}: {message}"))
            }
        })
    }
}

/// `devices[0].node` from path segments.
fn key_path(segments: &[&serde_path_to_error::Segment]) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for s in segments {
        match s {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    out
}

/// What a provider gets at construction.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProviderContext<'a> {
    /// The machine as discovered by the host.
    pub machine: &'a Machine,
    /// The provider's config table.
    pub config: &'a ProviderConfig,
    /// A directory the provider may use for its own files (may not exist yet).
    pub state_dir: &'a Path,
    /// The directory of the host's main config file: resolve relative paths
    /// in the provider's config (a topology file, a device list) against it,
    /// as topomgr resolves every relative path of its config files. `None`
    /// when the host had no config file: relative paths then resolve
    /// against the working directory.
    pub config_dir: Option<&'a Path>,
}

impl<'a> ProviderContext<'a> {
    /// The context for `machine`, `config` and `state_dir`, without a config
    /// directory.
    pub fn new(machine: &'a Machine, config: &'a ProviderConfig, state_dir: &'a Path) -> Self {
        ProviderContext {
            machine,
            config,
            state_dir,
            config_dir: None,
        }
    }

    /// With the config file's directory.
    pub fn with_config_dir(mut self, config_dir: Option<&'a Path>) -> Self {
        self.config_dir = config_dir;
        self
    }

    /// `path` resolved against [`ProviderContext::config_dir`] when it is
    /// relative (unchanged when absolute or when there is no config directory).
    ///
    /// ```
    /// use std::path::Path;
    /// use topomgr_sdk::{testkit, ProviderConfig, ProviderContext};
    /// let (machine, config) = (testkit::machine(1, 2), ProviderConfig::default());
    /// let ctx = ProviderContext::new(&machine, &config, Path::new("/var/lib/x"));
    /// assert_eq!(ctx.resolve(Path::new("topo.json")), Path::new("topo.json"));
    /// let ctx = ctx.with_config_dir(Some(Path::new("/etc/topomgr")));
    /// assert_eq!(ctx.resolve(Path::new("topo.json")), Path::new("/etc/topomgr/topo.json"));
    /// assert_eq!(ctx.resolve(Path::new("/abs/t.json")), Path::new("/abs/t.json"));
    /// ```
    pub fn resolve(&self, path: &Path) -> std::path::PathBuf {
        match self.config_dir {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        }
    }
}

/// A hint provider: the safe trait a plugin implements.
///
/// The host calls one method at a time (admissions are serialized), so
/// methods take `&mut self`. A panic inside any method is caught by the
/// export macro and turned into an error; the host keeps running.
///
/// # The calls of one admission
///
/// Container scope: for each container in order (init containers, sidecars
/// included, then app containers) the host asks every provider for
/// [`topology_hints`](Self::topology_hints), merges, and calls
/// [`allocate`](Self::allocate) on every provider before asking about the
/// next container. Pod scope: one [`pod_topology_hints`](Self::pod_topology_hints)
/// call, then `allocate` for each container with the pod's merged hint. If
/// the policy rejects the pod, or any provider's `allocate` fails, the host
/// calls [`release`](Self::release) for every container of the pod that was
/// allocated: an admission is all or nothing.
///
/// # Re-admission
///
/// A container may be asked about again while it already holds resources
/// (a host restarted from its checkpoint, or `topomgr provider ... --state-dir`
/// calls chained by hand). As the kubelet's managers do, answer hints from
/// what the container already holds (its held devices' nodes; the kubelet
/// answers an empty list when the held amount differs from the request), and
/// make `allocate` of a container that already holds its resources return the
/// same allocation without taking more. The device toolkit
/// ([`devices`](crate::devices)) does both.
///
/// # Environment variables
///
/// Each provider names its own variables (`NVIDIA_VISIBLE_DEVICES`,
/// `PCIDEVICE_<PREFIX>_<NAME>`, ...). The host refuses an allocation whose
/// environment sets a variable that another provider already set for the
/// same container to a different value: the admission fails (and is rolled
/// back) with an error naming both providers and the variable. Prefix your
/// variables with something of your own.
///
/// # `mems`
///
/// A device provider leaves [`Allocation::mems`] empty, like the kubelet's
/// Device Manager: the memory provider owns `cpuset.mems`, and the merged
/// hint already put the container's memory next to its devices. Setting it
/// from a device provider would widen the memory nodes of every container
/// that uses a device.
pub trait Provider: Send + Sync + 'static {
    /// Build the provider from the machine and its config. Bad config must be
    /// an error naming the key ([`ProviderConfig::parse`] does), never a panic.
    fn new(ctx: &ProviderContext<'_>) -> Result<Self, ProviderError>
    where
        Self: Sized;

    /// Hints for one container (container scope).
    fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError>;

    /// Hints for the whole pod (pod scope).
    fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError>;

    /// Reserve resources for `container`, honouring the merged `hint`.
    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError>;

    /// Release what was reserved for (`pod_uid`, `container`); releasing
    /// something unknown is not an error.
    fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError>;

    /// Serialize the provider's assignments: what each (pod, container)
    /// holds, including what it lost and keeps (see
    /// [`restore`](Self::restore)). A later version of the provider must be
    /// able to read it back.
    fn checkpoint(&self) -> Result<Vec<u8>, ProviderError>;

    /// Take back the assignments `saved` by [`checkpoint`](Self::checkpoint)
    /// (of this or an earlier instance, possibly on another machine or
    /// config) and reconcile them with the machine and config this instance
    /// was built with.
    ///
    /// # When the host calls it
    ///
    /// On an instance fresh from [`new`](Self::new), before any other call,
    /// with the machine and config *as they are now*: at start, with the
    /// saved state of the last run; and whenever the host reconciles live
    /// (the operator reloads the config, the machine changed), it builds a
    /// new instance with the new machine and config and restores the running
    /// instance's checkpoint into it. One call covers restart, reload and
    /// hot-plug alike.
    ///
    /// # What the provider must do
    ///
    /// 1. **Recompute from now.** Capacity, reserved sets and free amounts
    ///    come from the machine and config `new` got, never from `saved`.
    /// 2. **Keep what exists.** Every saved assignment whose resources are
    ///    all still there is kept as it was.
    /// 3. **Keep what remains, hold what is missing.** An assignment that
    ///    lost part of what it holds (a vanished device, an offline CPU,
    ///    memory shrunk below what is assigned) is kept for what remains,
    ///    and what it lost is reported as a [`Conflict`](crate::Conflict) (pod, container,
    ///    resource, what is missing in words, and its ids where it has
    ///    ids). What it lost is never offered to anyone else: it stays the
    ///    assignment's, in the next checkpoint too, so that when it comes
    ///    back it is the same pod's again — never another pod's and never
    ///    held twice. Releasing the container frees all of it.
    /// 4. **Follow what moved.** An assignment whose resource is found
    ///    again under another device id or resource name (the same device
    ///    seen by another discovery source, a renamed resource) holds it
    ///    under its new name, reported as a [`Move`](crate::Move) (from and to, each a
    ///    resource and an id). Recognise devices by what they are (a PCI
    ///    address, a serial), not only by their id: the device toolkit
    ///    does for devices listed with an identity
    ///    ([`Device::with_pci_address`](crate::devices::Device::with_pci_address)).
    /// 5. **Refuse nothing wholesale.** A provider with no saved assignments
    ///    accepts any machine and config. Two saved assignments that claim
    ///    one resource keep the first claim and report the second as a
    ///    conflict; admissions that do not touch a conflict go on.
    /// 6. **Fail only on unreadable bytes.** Return `Err` only when `saved`
    ///    cannot be read at all (corrupt, a format this provider does not
    ///    know), and then change nothing. The host keeps the bytes and holds
    ///    the provider with the error's message until its state is readable.
    ///
    /// The host logs the report, shows conflicts as the node's degraded
    /// health and never lets anything a conflict names be handed out.
    fn restore(&mut self, saved: &[u8]) -> Result<Reconciled, ProviderError>;

    /// The device plugins' `GetPreferredAllocation`: the `size` devices of
    /// `request.resource` this provider would pick from `request.available`,
    /// including `request.must_include`, in its order of preference. An empty
    /// answer means "no preference" (the default).
    fn preferred_allocation(
        &mut self,
        request: &PreferredAllocationRequest,
    ) -> Result<Vec<String>, ProviderError> {
        let _ = request;
        Ok(Vec::new())
    }

    /// What the provider owns per NUMA node and how much of it is free (for
    /// the NodeResourceTopology export and the host's admission check of
    /// extended resources). The default owns nothing.
    fn inventory(&self) -> Result<Inventory, ProviderError> {
        Ok(Inventory::default())
    }

    /// Every device this provider serves, by resource, with what it
    /// physically is (its [identities](crate::devices::Device::identity):
    /// PCI address, serial). The host holds a physical device once across
    /// every provider and resource name: it refuses a configuration in
    /// which two providers serve one device, and an allocation of a device
    /// that another container holds under any name. The default serves no
    /// listed devices (the host then knows a device by its id, and by its
    /// PCI address when the id is one); the device toolkit answers it for
    /// every [`DevicePlugin`](crate::devices::DevicePlugin).
    fn device_identities(&self) -> Result<DeviceIdentities, ProviderError> {
        Ok(DeviceIdentities::default())
    }

    /// Which of the devices a container already holds from outside topomgr
    /// (the kubelet's device plugins gave them; the container's environment
    /// names them) this provider knows, and the hints they fix: for each of
    /// its resources with recognised devices, the hints the kubelet's Device
    /// Manager gives a container that holds exactly those devices. The
    /// host adds them to the provider's hints for that container, so that
    /// CPUs and memory are aligned with devices chosen elsewhere; nothing is
    /// allocated for them. The default (and a provider built before the
    /// call) knows none. The device toolkit answers it for every
    /// [`DevicePlugin`](crate::devices::DevicePlugin).
    fn assigned_device_hints(
        &mut self,
        request: &AssignedDevicesRequest,
    ) -> Result<AssignedDeviceHints, ProviderError> {
        let _ = request;
        Ok(AssignedDeviceHints::none())
    }

    /// The CPUs that containers topomgr does not place are pinned to (by
    /// their user, another runtime plugin, the kubelet's own CPU manager):
    /// a provider that hands out CPUs exclusively gives none of `cpus` to
    /// anyone (neither in hints nor in allocations) until the next call,
    /// which replaces the set; they stay in the shared pool, and what is
    /// already assigned stays. The host calls it whenever the set changes
    /// and after every [`restore`](Self::restore). Answer whether the
    /// provider excludes them; the default (and a provider built before
    /// the call) hands out no CPUs and ignores them.
    fn exclude_cpus(&mut self, cpus: &CpuSet) -> Result<bool, ProviderError> {
        let _ = cpus;
        Ok(false)
    }

    /// An in-place resize (Kubernetes' `--subresource resize`) of a
    /// container this provider allocated for: `pod` and `container` carry
    /// the new requests and limits, `current` is what
    /// [`allocate`](Self::allocate) (or an earlier resize) answered, and
    /// `hint` the NUMA nodes the container may use (its current affinity:
    /// a resize never moves a container to other nodes).
    ///
    /// * `Ok(Some(new))`: the new allocation, already booked: what grew is
    ///   taken from the free resources of `hint`'s nodes, what shrank is
    ///   free again, exactly as `allocate` and `release` keep the books. A
    ///   later [`checkpoint`](Self::checkpoint) holds it, and `release`
    ///   frees all of it. An unchanged allocation (a container in a shared
    ///   pool) is `Some` too.
    /// * `Ok(None)`: the provider does not resize (the default, and a
    ///   plugin built before the call). The host refuses the resize of a
    ///   container this provider allocated something for, and lets
    ///   through one it allocated nothing for.
    /// * `Err`: a refusal that changed nothing, with a reason
    ///   (`"ResizeInfeasible"`, or the kubelet's reason where it has one)
    ///   and a message with the numbers (requested, free, where).
    fn resize(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        current: &Allocation,
        hint: &TopologyHint,
    ) -> Result<Option<Allocation>, ProviderError> {
        let _ = (pod, container, current, hint);
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Cfg {
        devices: Vec<Dev>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Dev {
        node: u32,
    }

    #[test]
    fn config_errors_carry_the_key_path() {
        let parse = |v: serde_json::Value| ProviderConfig(v).parse::<Cfg>().unwrap_err();
        assert_eq!(
            parse(serde_json::json!({"devices": [{"node": 0}, {"node": "x"}]})).message,
            "devices[1].node: invalid type: string \"x\", expected u32"
        );
        assert_eq!(
            parse(serde_json::json!({"devices": [{"nod": 0}]})).message,
            "devices[0]: unknown field `nod`, expected `node`"
        );
        let missing = parse(serde_json::Value::Null);
        assert_eq!(missing.reason, "InvalidConfig");
        assert_eq!(missing.message, "missing field `devices`");
    }
}
