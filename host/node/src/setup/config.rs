//! Host configuration: `topomgr.toml`, its drop-ins, environment overrides.
//!
//! # One layered load
//!
//! Every key is declared once, in [`HostConfig`] (with its type, its
//! default and its check). Each source is read on its own and checked
//! against that shape (so an error names its file, line and key), the raw
//! tables are merged in order (later wins), and the merged table is read
//! once into the typed [`HostConfig`]:
//!
//! 1. The main file (`--config FILE`, default [`DEFAULT_CONFIG_PATH`]).
//! 2. Every `*.toml` file of the drop-in directory, in byte order of the file
//!    names (`10-cpu.toml` before `20-gpu.toml`). The directory is the main
//!    file's `plugins_d` key, default `plugins.d` (both relative to the main
//!    file's directory). A missing default directory means no drop-ins; a
//!    `plugins_d` that names a missing directory is an error.
//! 3. Environment variables `TOPOMGR_POLICY`, `TOPOMGR_SCOPE`,
//!    `TOPOMGR_SYSFS_ROOT`, `TOPOMGR_CGROUP_ROOT`, `TOPOMGR_STATE_DIR`,
//!    `TOPOMGR_PLUGIN_DIRS` (a `:`-separated list) and
//!    `TOPOMGR_METRICS_ADDRESS` (`daemon.metrics_address`). Other `TOPOMGR_*`
//!    variables are not configuration and are ignored.
//!
//! Tables merge key by key (a drop-in may set one option of a provider's
//! `config` table); a later array or value replaces an earlier one.
//!
//! # Keys
//!
//! ```toml
//! policy = "best-effort"       # none | best-effort | restricted | single-numa-node
//! scope = "container"          # container | pod
//! plugin_dirs = []             # searched before the topomgr executable's own directory
//! sysfs_root = "/sys"
//! cgroup_root = "/sys/fs/cgroup"
//! state_dir = "/var/lib/topomgr"
//! node_name = "worker-1"       # NodeResourceTopology name; default the host name
//! export_file = "/run/topomgr/nrt.json"  # `serve` rewrites the NRT object here after each change
//! plugins_d = "plugins.d"      # main file only
//! disable_cpu_quota_with_exclusive_cpus = true  # the kubelet's gate: no CFS quota with exclusive CPUs
//! [policy_options]             # kubelet option names, string values
//! prefer-closest-numa-nodes = "true"
//! [daemon]                     # `topomgr serve`; every key optional
//! socket = "/run/topomgr/topomgr.sock"
//! group = "topomgr"            # may use the socket besides root
//! provider_timeout_ms = 10000  # deadline of one provider call
//! reclaim_interval_ms = 10000  # how often pods of owners that are gone are released
//! machine_check_interval_ms = 30000  # how often the machine is read again and reconciled
//! metrics_address = "127.0.0.1:9337"  # also serve GET /metrics over TCP (default: off)
//! [limits]                     # how much state the node holds; past a limit an admission is refused
//! max_pods = 2048              # pods held at once (NRI and the OCI hook admit each container as a pod)
//! max_containers = 4096        # containers of all pods held at once
//! max_containers_per_pod = 256 # containers (init, app, sidecar) of one pod
//! [kubernetes]                 # `topomgr serve` on the API server (docs/kubernetes.md)
//! enabled = false              # push the NRT object, record refusals as Events
//! kubeconfig = "/etc/topomgr/kubeconfig"  # unset: the pod's service account (in-cluster)
//! push_nrt = true
//! nrt_min_interval_ms = 200    # at most one push per interval; changes coalesce
//! nrt_retry_max_ms = 30000     # longest wait between retries while the API server fails
//! delete_nrt_on_shutdown = false  # default: the object stays, as NFD's topology-updater leaves it
//! events = true                # refusals of the NRI face as Events on the pod
//! [providers.NAME]             # NAME: lowercase letters, digits, '-', '_'
//! library = "topomgr_provider_cpu"   # -> libtopomgr_provider_cpu.so, or a path
//! enabled = true               # default true; false: the provider is not loaded
//! [providers.NAME.config]      # handed to the provider as JSON
//! ```
//!
//! # Relative paths
//!
//! Relative paths in files (`plugin_dirs`, `sysfs_root`, `cgroup_root`,
//! `state_dir`, `export_file`, `plugins_d`, `daemon.socket` and a provider `library` that is
//! a path) are resolved against the directory of the main config file, so the
//! repository's `topomgr.toml` works from any working directory. Relative
//! paths in environment variables are resolved against the working directory.
//!
//! # Errors
//!
//! Because each file is parsed on its own, an unknown key or a value of the
//! wrong type is reported with the file, the line and the full key path
//! (`plugins.d/10-x.toml: line 3: providers.x.enabled: invalid type: string
//! "yes", expected a boolean`). Policy and scope names are not checked here;
//! the policy module does that, in the kubelet's order.
//!
//! # Protection
//!
//! With [`LoadOptions::protected`] (`topomgr serve`, and every command run as
//! root: [`load`]) the main file, the drop-in directory and every drop-in must pass
//! `crate::setup::trusted_file::check`, as plugin libraries do: a drop-in is
//! configuration with the power of the daemon (its socket group, its plugins).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer};
use serde::Deserialize;

use crate::setup::trusted_file;
use crate::state::limits;

/// Where `topomgr` looks for its config when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/topomgr/topomgr.toml";

/// The host configuration: every key of the config files, with its type,
/// default and check (see the module documentation for the sources).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Topology Manager policy name (checked by the policy module).
    #[serde(default = "defaults::policy")]
    pub policy: String,
    /// Topology Manager scope name (checked by the policy module).
    #[serde(default = "defaults::scope")]
    pub scope: String,
    /// The drop-in directory (main file only; default `plugins.d` beside it).
    #[serde(default)]
    pub plugins_d: Option<PathBuf>,
    /// Directories searched for plugin libraries, before the executable's own.
    #[serde(default)]
    pub plugin_dirs: Vec<PathBuf>,
    /// Root of the sysfs tree to discover.
    #[serde(default = "defaults::sysfs_root")]
    pub sysfs_root: PathBuf,
    /// Root of the cgroup hierarchy.
    #[serde(default = "defaults::cgroup_root")]
    pub cgroup_root: PathBuf,
    /// Directory for the state (snapshot, journal) and providers' state.
    #[serde(default = "defaults::state_dir")]
    pub state_dir: PathBuf,
    /// The Kubernetes node name of the NodeResourceTopology export (`None`:
    /// the host name).
    #[serde(default, deserialize_with = "node_name")]
    pub node_name: Option<String>,
    /// Where `topomgr serve` keeps the NodeResourceTopology export up to date.
    #[serde(default)]
    pub export_file: Option<PathBuf>,
    /// Topology Manager policy options (kubelet names, string values).
    #[serde(default, deserialize_with = "option_values")]
    pub policy_options: BTreeMap<String, String>,
    /// Lift the CFS quota of a container that holds exclusive CPUs (and of
    /// its kubelet pod cgroup), as the kubelet's feature gate
    /// `DisableCPUQuotaWithExclusiveCPUs` does (default true, the gate's
    /// default since 1.33); false keeps the quota the runtime set.
    #[serde(default = "defaults::yes")]
    pub disable_cpu_quota_with_exclusive_cpus: bool,
    /// Providers by name, enabled or not (see `HostConfig::enabled_providers`).
    #[serde(default, deserialize_with = "providers")]
    pub providers: BTreeMap<String, ProviderEntry>,
    /// The `[daemon]` table (`topomgr serve`).
    #[serde(default)]
    pub daemon: DaemonConfig,
    /// The `[nri]` table (`topomgr serve` as the runtime's NRI plugin).
    #[serde(default)]
    pub nri: NriConfig,
    /// The `[limits]` table: how many pods and containers the node holds.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// The `[cdi]` table: the devices CDI gives containers (runtime faces).
    #[serde(default)]
    pub cdi: CdiConfig,
    /// The `[kubernetes]` table: `topomgr serve` on the API server.
    #[serde(default)]
    pub kubernetes: KubernetesConfig,
    /// The `[podresources]` table: the kubelet's PodResources API served
    /// by `topomgr serve`.
    #[serde(default)]
    pub podresources: PodResourcesConfig,
    /// The files read, in the order they were applied.
    #[serde(skip)]
    pub files: Vec<PathBuf>,
    /// Where the policy's keys were last set (`policy`, `scope`,
    /// `policy_options.NAME`), so that an error of the policy module, which
    /// reads them later, can name the place to fix
    /// ([`HostConfig::policy_error_place`]).
    #[serde(skip)]
    pub policy_origins: BTreeMap<String, KeyOrigin>,
}

/// The source that set a key last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOrigin {
    /// A config file (the main one or a drop-in).
    File(PathBuf),
    /// A `TOPOMGR_*` environment variable.
    Environment(&'static str),
}

/// Default socket of `topomgr serve`.
pub(crate) const DEFAULT_SOCKET: &str = "/run/topomgr/topomgr.sock";
/// Default group allowed on the daemon's socket besides root.
pub(crate) const DEFAULT_GROUP: &str = "topomgr";
/// Default deadline of one provider call in the daemon, in milliseconds.
pub(crate) const DEFAULT_PROVIDER_TIMEOUT_MS: u64 = 10_000;
/// Default interval of the daemon's reclaim of pods whose owners are
/// gone, in milliseconds.
pub(crate) const DEFAULT_RECLAIM_INTERVAL_MS: u64 = 10_000;
/// Default interval of the daemon's machine check (the machine read again
/// and reconciled when it changed; attached cgroups verified), in
/// milliseconds.
pub(crate) const DEFAULT_MACHINE_CHECK_INTERVAL_MS: u64 = 30_000;

/// The `[daemon]` table: settings of `topomgr serve`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// Unix socket path (relative paths resolve against the main file's directory).
    #[serde(default = "defaults::socket")]
    pub socket: PathBuf,
    /// Group that may use the socket besides root.
    #[serde(default = "defaults::group", deserialize_with = "non_empty")]
    pub group: String,
    /// Deadline of one provider call, in milliseconds (at least 1).
    #[serde(default = "defaults::provider_timeout_ms", deserialize_with = "millis")]
    pub provider_timeout_ms: u64,
    /// How often the daemon releases the pods whose owners are gone
    /// (`topomgr run`, containers admitted by `topomgr oci-hook` or NRI),
    /// in milliseconds (at least 1); it also does at start.
    #[serde(default = "defaults::reclaim_interval_ms", deserialize_with = "millis")]
    pub reclaim_interval_ms: u64,
    /// How often the daemon reads the machine again (sysfs), reconciles
    /// the providers with it when it changed and verifies the attached
    /// cgroups, in milliseconds (at least 1). SIGHUP does the same at once,
    /// with the configuration read again.
    #[serde(
        default = "defaults::machine_check_interval_ms",
        deserialize_with = "millis"
    )]
    pub machine_check_interval_ms: u64,
    /// Where `GET /metrics` is also served over TCP, without the socket's
    /// access check (`None`: only on the socket).
    #[serde(default, deserialize_with = "listen_address")]
    pub metrics_address: Option<SocketAddr>,
}

/// The `[limits]` table: how much state the node holds (every face, the
/// daemon and the one-shot commands alike). An admission past a limit is
/// refused naming it and this key, and changes nothing; pods already held
/// are kept when a limit is lowered.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// The most pods held at once (at least 1; default
    /// [`limits::DEFAULT_MAX_PODS`]: the runtime faces admit every container
    /// as a pod of its own).
    #[serde(default = "defaults::max_pods", deserialize_with = "count")]
    pub max_pods: usize,
    /// The most containers (init, app, sidecar) of all pods held at once
    /// (at least 1; default [`limits::DEFAULT_MAX_CONTAINERS`]).
    #[serde(default = "defaults::max_containers", deserialize_with = "count")]
    pub max_containers: usize,
    /// The most containers of one pod (at least 1; default
    /// [`limits::DEFAULT_MAX_CONTAINERS_PER_POD`]).
    #[serde(
        default = "defaults::max_containers_per_pod",
        deserialize_with = "count"
    )]
    pub max_containers_per_pod: usize,
}

/// The `[cdi]` table: where the runtime faces (NRI, the OCI hook) find the
/// CDI devices a container was given (DRA drivers, CDI-enabled device
/// plugins), to align its CPUs and memory with them
/// (`topomgr_runtime::cdi`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CdiConfig {
    /// The CDI spec directories the runtime reads, lowest priority first
    /// (default `/etc/cdi`, `/var/run/cdi`, as containerd, CRI-O and
    /// Podman; relative paths resolve against the main file's directory).
    #[serde(default = "defaults::cdi_spec_dirs")]
    pub spec_dirs: Vec<PathBuf>,
    /// Whether a CDI device that no provider lists still counts in the
    /// merge, by the NUMA node sysfs gives its PCI device (default true);
    /// false: only the providers' devices count, the others are logged.
    #[serde(default = "defaults::yes")]
    pub align_unknown_devices: bool,
    /// The kubelet's PodResources socket (its own is
    /// `/var/lib/kubelet/pod-resources/kubelet.sock`; relative paths
    /// resolve against the main file's directory), asked by the NRI face
    /// for the CDI devices of each container's DRA claims (`Get`, its
    /// `dynamic_resources`); unset (default): not asked.
    #[serde(default)]
    pub kubelet_pod_resources_socket: Option<PathBuf>,
}

impl Default for CdiConfig {
    /// Every `[cdi]` key at its default.
    fn default() -> Self {
        CdiConfig::deserialize(toml::Table::new()).expect("every key has a default")
    }
}

impl Default for LimitsConfig {
    /// Every `[limits]` key at its default.
    fn default() -> Self {
        LimitsConfig::deserialize(toml::Table::new()).expect("every key has a default")
    }
}

impl LimitsConfig {
    /// The node state's limits.
    pub fn limits(&self) -> limits::Limits {
        limits::Limits {
            max_pods: self.max_pods,
            max_containers: self.max_containers,
            max_containers_per_pod: self.max_containers_per_pod,
        }
    }
}

/// The runtime's default NRI socket.
pub const DEFAULT_NRI_SOCKET: &str = "/var/run/nri/nri.sock";
/// The name topomgr registers with the runtime's NRI by default.
pub const DEFAULT_NRI_PLUGIN_NAME: &str = "topomgr";
/// The index topomgr registers at by default (the runtime calls plugins in
/// ascending index order).
pub const DEFAULT_NRI_PLUGIN_INDEX: &str = "50";

/// The `[nri]` table: `topomgr serve` as the container runtime's NRI
/// plugin (containerd 1.7 with NRI enabled, 2.x; CRI-O 1.26+).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NriConfig {
    /// Whether `serve` connects to the runtime's NRI socket (default false).
    #[serde(default)]
    pub enabled: bool,
    /// The runtime's NRI socket (relative paths resolve against the main
    /// file's directory).
    #[serde(default = "defaults::nri_socket")]
    pub socket: PathBuf,
    /// The name topomgr registers under: letters, digits, `-`, `_` and `.`.
    #[serde(
        default = "defaults::nri_plugin_name",
        deserialize_with = "nri_plugin_name"
    )]
    pub plugin_name: String,
    /// Where topomgr stands among the runtime's plugins: two digits.
    #[serde(
        default = "defaults::nri_plugin_index",
        deserialize_with = "nri_plugin_index"
    )]
    pub plugin_index: String,
    /// The kubelet's root directory (its `--root-dir`), where the state
    /// files of its CPU and memory managers are checked for a policy other
    /// than none (relative paths resolve against the main file's
    /// directory).
    #[serde(default = "defaults::kubelet_root_dir")]
    pub kubelet_root_dir: PathBuf,
    /// The runtime's CRI socket, through which topomgr changes the cpusets
    /// of running containers (CRI `UpdateContainerResources`, as the
    /// kubelet's CPU manager does); unset: the runtime's default socket,
    /// chosen by the name it registers with (relative paths resolve
    /// against the main file's directory).
    #[serde(default)]
    pub cri_socket: Option<PathBuf>,
}

/// The `[kubernetes]` table: `topomgr serve` pushes the node's
/// NodeResourceTopology object to the API server and records refusals as
/// Events on the pods (docs/kubernetes.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Whether `serve` talks to the API server (default false).
    #[serde(default)]
    pub enabled: bool,
    /// The kubeconfig file (its current context); unset: the pod's service
    /// account (in-cluster). Relative paths resolve against the main
    /// file's directory.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Push the NodeResourceTopology object (default true).
    #[serde(default = "defaults::yes")]
    pub push_nrt: bool,
    /// At most one push per this many milliseconds; changes in between
    /// coalesce (default 200).
    #[serde(default = "defaults::nrt_min_interval_ms")]
    pub nrt_min_interval_ms: u64,
    /// The longest wait between retries while the API server fails
    /// (default 30000).
    #[serde(default = "defaults::nrt_retry_max_ms")]
    pub nrt_retry_max_ms: u64,
    /// Delete the object at shutdown (default false: it stays, as
    /// node-feature-discovery's topology-updater leaves it).
    #[serde(default)]
    pub delete_nrt_on_shutdown: bool,
    /// Record refusals of the NRI face as Events on the pods (default true).
    #[serde(default = "defaults::yes")]
    pub events: bool,
}

impl Default for KubernetesConfig {
    /// Every `[kubernetes]` key at its default.
    fn default() -> Self {
        KubernetesConfig::deserialize(toml::Table::new()).expect("every key has a default")
    }
}

/// The `[podresources]` table: `topomgr serve` answers the kubelet's
/// PodResources v1 API (List, GetAllocatableResources, Get) on its own
/// socket, for node agents pointed at it. Off unless `socket` is set: the
/// kubelet serves the same API at `/var/lib/kubelet/pod-resources/kubelet.sock`,
/// which topomgr never takes over.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodResourcesConfig {
    /// The socket (e.g. `/var/lib/topomgr/pod-resources/kubelet.sock`;
    /// relative paths resolve against the main file's directory); unset:
    /// the API is not served.
    #[serde(default)]
    pub socket: Option<PathBuf>,
}

impl Default for NriConfig {
    /// Every `[nri]` key at its default.
    fn default() -> Self {
        NriConfig::deserialize(toml::Table::new()).expect("every key has a default")
    }
}

/// One `[providers.NAME]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// Library name (`topomgr_provider_cpu` -> `libtopomgr_provider_cpu.so`)
    /// or a path (contains `/` or ends in `.so`; relative paths are already
    /// resolved against the main config file's directory). Required, in one
    /// of the files.
    #[serde(default, deserialize_with = "non_empty")]
    pub library: String,
    /// Whether the provider is loaded (`enabled = false` disables it).
    #[serde(default = "defaults::enabled")]
    pub enabled: bool,
    /// The `[providers.NAME.config]` table as JSON (`Null` when absent).
    #[serde(default, deserialize_with = "table_as_json")]
    pub config: serde_json::Value,
    /// The last file that set this provider's `library`.
    #[serde(skip)]
    pub defined_in: PathBuf,
    /// The main config file's directory: relative paths in the provider's
    /// `[config]` table (e.g. the GPU provider's `topology_file`) resolve
    /// against it, as every relative path in topomgr's config files does.
    /// Empty for entries built without a config file.
    #[serde(skip)]
    pub config_dir: PathBuf,
}

/// The defaults of the keys that have one besides empty.
mod defaults {
    use std::path::PathBuf;

    pub(super) fn policy() -> String {
        "best-effort".to_owned()
    }
    pub(super) fn nrt_min_interval_ms() -> u64 {
        200
    }

    pub(super) fn nrt_retry_max_ms() -> u64 {
        30_000
    }

    pub(super) fn yes() -> bool {
        true
    }
    pub(super) fn scope() -> String {
        "container".to_owned()
    }
    pub(super) fn sysfs_root() -> PathBuf {
        PathBuf::from("/sys")
    }
    pub(super) fn cgroup_root() -> PathBuf {
        PathBuf::from("/sys/fs/cgroup")
    }
    pub(super) fn state_dir() -> PathBuf {
        PathBuf::from("/var/lib/topomgr")
    }
    pub(super) fn socket() -> PathBuf {
        PathBuf::from(super::DEFAULT_SOCKET)
    }
    pub(super) fn group() -> String {
        super::DEFAULT_GROUP.to_owned()
    }
    pub(super) fn provider_timeout_ms() -> u64 {
        super::DEFAULT_PROVIDER_TIMEOUT_MS
    }
    pub(super) fn reclaim_interval_ms() -> u64 {
        super::DEFAULT_RECLAIM_INTERVAL_MS
    }
    pub(super) fn machine_check_interval_ms() -> u64 {
        super::DEFAULT_MACHINE_CHECK_INTERVAL_MS
    }
    pub(super) fn enabled() -> bool {
        true
    }
    pub(super) fn nri_socket() -> PathBuf {
        PathBuf::from(super::DEFAULT_NRI_SOCKET)
    }
    pub(super) fn nri_plugin_name() -> String {
        super::DEFAULT_NRI_PLUGIN_NAME.to_owned()
    }
    pub(super) fn cdi_spec_dirs() -> Vec<PathBuf> {
        ["/etc/cdi", "/var/run/cdi"]
            .iter()
            .map(PathBuf::from)
            .collect()
    }

    pub(super) fn kubelet_root_dir() -> PathBuf {
        PathBuf::from("/var/lib/kubelet")
    }
    pub(super) fn nri_plugin_index() -> String {
        super::DEFAULT_NRI_PLUGIN_INDEX.to_owned()
    }
    pub(super) fn max_pods() -> usize {
        crate::state::limits::DEFAULT_MAX_PODS
    }
    pub(super) fn max_containers() -> usize {
        crate::state::limits::DEFAULT_MAX_CONTAINERS
    }
    pub(super) fn max_containers_per_pod() -> usize {
        crate::state::limits::DEFAULT_MAX_CONTAINERS_PER_POD
    }
}

impl Default for HostConfig {
    /// Every key at its default (an empty config file).
    fn default() -> Self {
        HostConfig::deserialize(toml::Table::new()).expect("every key has a default")
    }
}

impl Default for DaemonConfig {
    /// Every `[daemon]` key at its default.
    fn default() -> Self {
        DaemonConfig::deserialize(toml::Table::new()).expect("every key has a default")
    }
}

impl HostConfig {
    /// Where to fix what the policy module refused: `` (`policy` in FILE)``,
    /// `` (`scope` from environment variable TOPOMGR_SCOPE)``; empty when
    /// the error names no key or the key was not set (its default).
    pub fn policy_error_place(&self, error: &topomgr_engine::policy::PolicyError) -> String {
        use topomgr_engine::policy::PolicyError as E;
        let key = match error {
            E::UnknownPolicy(_) => "policy".to_owned(),
            E::UnknownScope(_) => "scope".to_owned(),
            E::UnknownOption(name)
            | E::BadBool { name, .. }
            | E::BadInt { name, .. }
            | E::BadStrategy { name, .. }
            | E::BelowMinimum { name, .. } => format!("policy_options.{name}"),
            E::TooManyNodes { .. } => "policy_options.max-allowable-numa-nodes".to_owned(),
            E::MissingDistances => "policy_options.prefer-closest-numa-nodes".to_owned(),
            _ => return String::new(),
        };
        match self.policy_origins.get(&key) {
            Some(KeyOrigin::File(file)) => format!(" (`{key}` in {})", file.display()),
            Some(KeyOrigin::Environment(var)) => {
                format!(" (`{key}` from environment variable {var})")
            }
            None => String::new(),
        }
    }

    /// The providers to load, in name order (those with `enabled = false`
    /// are left out).
    pub(crate) fn enabled_providers(&self) -> impl Iterator<Item = (&String, &ProviderEntry)> {
        self.providers.iter().filter(|(_, p)| p.enabled)
    }

    /// Resolve the relative paths of the files against `base`, the main
    /// file's directory (the environment's are absolute already).
    fn resolve(&mut self, base: &Path) {
        let join = |p: &mut PathBuf| *p = base.join(&*p);
        self.plugins_d.iter_mut().for_each(join);
        self.plugin_dirs.iter_mut().for_each(join);
        join(&mut self.sysfs_root);
        join(&mut self.cgroup_root);
        join(&mut self.state_dir);
        self.export_file.iter_mut().for_each(join);
        join(&mut self.daemon.socket);
        join(&mut self.nri.socket);
        join(&mut self.nri.kubelet_root_dir);
        self.nri.cri_socket.iter_mut().for_each(join);
        self.cdi.spec_dirs.iter_mut().for_each(join);
        self.cdi
            .kubelet_pod_resources_socket
            .iter_mut()
            .for_each(join);
        self.kubernetes.kubeconfig.iter_mut().for_each(join);
        self.podresources.socket.iter_mut().for_each(join);
        for p in self.providers.values_mut() {
            if is_path(&p.library) {
                p.library = base.join(&p.library).to_string_lossy().into_owned();
            }
            p.config_dir = base.to_path_buf();
        }
    }
}

/// Why the configuration could not be loaded. Every message names the file
/// (or variable) and, for a bad value, the full key path.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A `*.toml` entry of the drop-in directory that is not a file.
    #[error("drop-in {} is {what}, not a config file: remove it, or rename it without .toml", path.display())]
    DropInNotFile {
        /// The entry.
        path: PathBuf,
        /// What it is.
        what: String,
    },
    /// A file could not be read.
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The IO error (part of the message).
        error: std::io::Error,
    },
    /// The drop-in directory could not be listed.
    #[error("cannot list drop-in directory {} ({why}): {error}", path.display())]
    DropInDir {
        /// The directory.
        path: PathBuf,
        /// Where the directory came from.
        why: String,
        /// The IO error (part of the message).
        error: std::io::Error,
    },
    /// A file is not valid TOML, or a key is unknown or has a bad value.
    #[error("{}: {}{}{message}", path.display(), line.map(|l| format!("line {l}: ")).unwrap_or_default(), if key.is_empty() { String::new() } else { format!("{key}: ") })]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The line of the offending value, when the parser knows it.
        line: Option<usize>,
        /// The full key path (`providers.x.enabled`), empty for syntax errors.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// An environment variable has a bad value.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable.
        var: String,
        /// What is wrong.
        message: String,
    },
    /// A provider table has no `library` in any file.
    #[error(
        "provider `{name}` (last set in {}) has no `library`; add library = \"<name or path>\" to its [providers.{name}] table",
        path.display()
    )]
    MissingLibrary {
        /// The provider.
        name: String,
        /// The last file that mentioned it.
        path: PathBuf,
    },
    /// A config file or directory could be replaced by someone else.
    #[error("refusing {what} {}: {why}", path.display())]
    Insecure {
        /// `config file`, `drop-in directory` or `drop-in`.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Which path is unsafe and why, with the command that fixes it.
        why: String,
    },
}

/// How [`load_with`] loads.
pub struct LoadOptions<'a> {
    /// Environment lookup ([`load`]: the process environment).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Refuse a config file, drop-in directory or drop-in that anyone but
    /// root (or the user running topomgr) could replace.
    pub protected: bool,
}

/// The process environment: the one place configuration reads it.
fn process_env(var: &str) -> Option<String> {
    std::env::var(var).ok()
}

/// The configuration a command runs with: `path`, its drop-ins and the
/// process environment's overrides. A missing file at
/// [`DEFAULT_CONFIG_PATH`] means the built-in defaults; any other missing
/// file is an error. `protected` refuses files and directories others
/// could replace (`topomgr serve`, and every command run as root).
pub fn load(path: &Path, protected: bool) -> Result<HostConfig, ConfigError> {
    if path == Path::new(DEFAULT_CONFIG_PATH) && !path.exists() {
        tracing::info!(path = %path.display(), "no config file; using built-in defaults");
        return defaults_with(&process_env);
    }
    load_with(
        path,
        &LoadOptions {
            env: &process_env,
            protected,
        },
    )
}

/// The built-in defaults under the environment's overrides (`TOPOMGR_*`),
/// for when there is no config file: no file is read (`files` is empty)
/// and no provider is configured.
pub fn defaults_with(env: &dyn Fn(&str) -> Option<String>) -> Result<HostConfig, ConfigError> {
    let mut sources = Sources::default();
    sources.add_env(env_table(env)?);
    let main = Path::new(DEFAULT_CONFIG_PATH);
    sources.finish(main, main.parent().unwrap_or(Path::new("/")))
}

/// Loads with explicit [`LoadOptions`] (tests give their own environment).
pub fn load_with(path: &Path, opts: &LoadOptions<'_>) -> Result<HostConfig, ConfigError> {
    let main = absolute(path);
    let base = main
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let guard = |what: &'static str, p: &Path| -> Result<(), ConfigError> {
        if !opts.protected {
            return Ok(());
        }
        let canonical = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        trusted_file::check(&canonical).map_err(|why| ConfigError::Insecure {
            what,
            path: p.to_path_buf(),
            why,
        })
    };

    let mut sources = Sources::default();
    if main.exists() {
        guard("config file", &main)?;
    }
    let (main_table, main_cfg) = read_file(&main)?;
    let (dropin_dir, explicit) = match main_cfg.plugins_d {
        Some(d) => (base.join(d), true),
        None => (base.join("plugins.d"), false),
    };
    sources.add(main.clone(), main_table);

    match std::fs::read_dir(&dropin_dir) {
        Ok(entries) => {
            guard("drop-in directory", &dropin_dir)?;
            let mut names = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|error| ConfigError::DropInDir {
                    path: dropin_dir.clone(),
                    why: dropin_reason(&main, explicit),
                    error,
                })?;
                let p = entry.path();
                if p.extension().is_some_and(|e| e == "toml") {
                    dropin_is_file(&p)?;
                    names.push(p);
                }
            }
            names.sort();
            for p in names {
                guard("drop-in", &p)?;
                let (table, _) = read_file(&p)?;
                if table.contains_key("plugins_d") {
                    return Err(ConfigError::Invalid {
                        path: p,
                        line: None,
                        key: "plugins_d".to_owned(),
                        message: "is only allowed in the main config file".to_owned(),
                    });
                }
                sources.add(p, table);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {}
        Err(error) => {
            return Err(ConfigError::DropInDir {
                path: dropin_dir,
                why: dropin_reason(&main, explicit),
                error,
            })
        }
    }
    sources.add_env(env_table(opts.env)?);
    sources.finish(&main, &base)
}

/// A `*.toml` entry of the drop-in directory must be a file (a symbolic
/// link to one counts): a directory, a link to nothing or a device named
/// like a drop-in is refused rather than skipped.
fn dropin_is_file(p: &Path) -> Result<(), ConfigError> {
    let not_a_file = |what: String| ConfigError::DropInNotFile {
        path: p.to_path_buf(),
        what,
    };
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) if m.is_dir() => Err(not_a_file("a directory".to_owned())),
        Ok(_) => Err(not_a_file("not a regular file".to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let target = std::fs::read_link(p)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            Err(not_a_file(format!(
                "a symbolic link to {target:?}, which does not exist"
            )))
        }
        Err(error) => Err(ConfigError::Read {
            path: p.to_path_buf(),
            error,
        }),
    }
}

/// The raw tables read so far, merged, with which file set each provider.
#[derive(Default)]
struct Sources {
    merged: toml::Table,
    files: Vec<PathBuf>,
    /// Provider -> (last file that set `library`, last file that mentioned it).
    provenance: BTreeMap<String, (Option<PathBuf>, PathBuf)>,
    /// See [`HostConfig::policy_origins`].
    policy_origins: BTreeMap<String, KeyOrigin>,
}

impl Sources {
    /// Notes the policy's keys that `table` sets, as set by `origin`.
    fn note_policy_keys(&mut self, table: &toml::Table, origin: impl Fn(&str) -> KeyOrigin) {
        for key in ["policy", "scope"] {
            if table.contains_key(key) {
                self.policy_origins.insert(key.to_owned(), origin(key));
            }
        }
        if let Some(toml::Value::Table(options)) = table.get("policy_options") {
            for name in options.keys() {
                let key = format!("policy_options.{name}");
                let at = origin(&key);
                self.policy_origins.insert(key, at);
            }
        }
    }

    /// The environment's table, applied over every file.
    fn add_env(&mut self, table: toml::Table) {
        // Only `policy` and `scope` have variables (no policy option does).
        self.note_policy_keys(&table, |key| {
            let var = ENVIRONMENT
                .iter()
                .find(|(_, k, _)| *k == key)
                .map_or("TOPOMGR_*", |(var, _, _)| var);
            KeyOrigin::Environment(var)
        });
        merge_tables(&mut self.merged, table);
    }

    fn add(&mut self, file: PathBuf, table: toml::Table) {
        self.note_policy_keys(&table, |_| KeyOrigin::File(file.clone()));
        if let Some(toml::Value::Table(providers)) = table.get("providers") {
            for (name, p) in providers {
                let entry = self
                    .provenance
                    .entry(name.clone())
                    .or_insert((None, file.clone()));
                entry.1 = file.clone();
                if p.get("library").is_some() {
                    entry.0 = Some(file.clone());
                }
            }
        }
        merge_tables(&mut self.merged, table);
        self.files.push(file);
    }

    /// The merged table read once into the typed configuration.
    fn finish(self, main: &Path, base: &Path) -> Result<HostConfig, ConfigError> {
        let mut cfg = HostConfig::deserialize(self.merged).map_err(|e| ConfigError::Invalid {
            // Each source was checked on its own; merging checked values
            // cannot make them invalid.
            path: main.to_path_buf(),
            line: None,
            key: String::new(),
            message: e.message().trim().to_owned(),
        })?;
        for (name, p) in &mut cfg.providers {
            let (library_file, last_file) = self
                .provenance
                .get(name)
                .cloned()
                .unwrap_or((None, main.to_path_buf()));
            if p.library.is_empty() {
                return Err(ConfigError::MissingLibrary {
                    name: name.clone(),
                    path: last_file,
                });
            }
            p.defined_in = library_file.unwrap_or(last_file);
        }
        cfg.resolve(base);
        cfg.files = self.files;
        cfg.policy_origins = self.policy_origins;
        Ok(cfg)
    }
}

/// True when a `library` value is a path rather than a bare library name.
pub(crate) fn is_path(library: &str) -> bool {
    library.contains('/') || library.ends_with(".so")
}

fn dropin_reason(main: &Path, explicit: bool) -> String {
    if explicit {
        format!("set by `plugins_d` in {}", main.display())
    } else {
        format!("the default `plugins.d` beside {}", main.display())
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Deep merge: tables key by key, anything else replaced.
fn merge_tables(old: &mut toml::Table, new: toml::Table) {
    for (k, v) in new {
        match (old.get_mut(&k), v) {
            (Some(toml::Value::Table(o)), toml::Value::Table(n)) => merge_tables(o, n),
            (_, v) => {
                old.insert(k, v);
            }
        }
    }
}

/// A provider's `config` table as the JSON handed to the provider
/// (date-times become their TOML text).
fn toml_to_json(t: toml::Table) -> serde_json::Value {
    fn value(v: toml::Value) -> serde_json::Value {
        match v {
            toml::Value::String(s) => s.into(),
            toml::Value::Integer(i) => i.into(),
            toml::Value::Float(f) => serde_json::Number::from_f64(f)
                .map(serde_json::Value::Number)
                .unwrap_or_else(|| f.to_string().into()),
            toml::Value::Boolean(b) => b.into(),
            toml::Value::Datetime(d) => d.to_string().into(),
            toml::Value::Array(a) => a.into_iter().map(value).collect(),
            toml::Value::Table(t) => toml_to_json(t),
        }
    }
    serde_json::Value::Object(t.into_iter().map(|(k, v)| (k, value(v))).collect())
}

/// Reads one file: its raw table, checked against [`HostConfig`] (naming
/// file, line and key on error), and what it says on its own.
fn read_file(path: &Path) -> Result<(toml::Table, HostConfig), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let line_of = |e: &toml::de::Error| {
        e.span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
    };
    let invalid = |line, key: String, message: &str| ConfigError::Invalid {
        path: path.to_path_buf(),
        line,
        key,
        message: message.trim().to_owned(),
    };
    let de = toml::Deserializer::parse(&text)
        .map_err(|e| invalid(line_of(&e), String::new(), e.message()))?;
    let checked: HostConfig = serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let key = if key == "." { String::new() } else { key };
        invalid(line_of(e.inner()), key, e.inner().message())
    })?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| invalid(line_of(&e), String::new(), e.message()))?;
    Ok((table, checked))
}

/// The environment variables that are configuration: variable, the key it
/// sets (`daemon.metrics_address`: a key of a table), and how its value
/// reads. Other `TOPOMGR_*` variables are not configuration.
const ENVIRONMENT: [(&str, &str, EnvValue); 7] = [
    ("TOPOMGR_POLICY", "policy", EnvValue::Text),
    ("TOPOMGR_SCOPE", "scope", EnvValue::Text),
    ("TOPOMGR_SYSFS_ROOT", "sysfs_root", EnvValue::Path),
    ("TOPOMGR_CGROUP_ROOT", "cgroup_root", EnvValue::Path),
    ("TOPOMGR_STATE_DIR", "state_dir", EnvValue::Path),
    ("TOPOMGR_PLUGIN_DIRS", "plugin_dirs", EnvValue::PathList),
    (
        "TOPOMGR_METRICS_ADDRESS",
        "daemon.metrics_address",
        EnvValue::Text,
    ),
];

/// How an environment variable's value reads.
#[derive(Debug, Clone, Copy)]
enum EnvValue {
    /// The text, not empty.
    Text,
    /// A path, not empty; a relative one is relative to the working directory.
    Path,
    /// `:`-separated paths (empty entries skipped), each as [`EnvValue::Path`].
    PathList,
}

/// The environment's part of the configuration as a raw table, each
/// variable checked against [`HostConfig`] on its own.
fn env_table(env: &dyn Fn(&str) -> Option<String>) -> Result<toml::Table, ConfigError> {
    let cwd = |p: &str| absolute(Path::new(p)).to_string_lossy().into_owned();
    let mut merged = toml::Table::new();
    for (var, key, kind) in ENVIRONMENT {
        let Some(text) = env(var) else { continue };
        let fail = |message: String| ConfigError::Env {
            var: var.to_owned(),
            message,
        };
        let value = match kind {
            EnvValue::Text | EnvValue::Path if text.trim().is_empty() => {
                return Err(fail(
                    "is set but empty; unset it or give a value".to_owned(),
                ))
            }
            EnvValue::Text => toml::Value::String(text),
            EnvValue::Path => toml::Value::String(cwd(&text)),
            EnvValue::PathList => toml::Value::Array(
                text.split(':')
                    .filter(|s| !s.is_empty())
                    .map(|p| toml::Value::String(cwd(p)))
                    .collect(),
            ),
        };
        let mut table = toml::Table::new();
        let mut slot = &mut table;
        let mut parts = key.split('.').peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                slot.insert(part.to_owned(), value.clone());
            } else {
                slot = match slot
                    .entry(part.to_owned())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                {
                    toml::Value::Table(t) => t,
                    _ => unreachable!("a fresh table"),
                };
            }
        }
        HostConfig::deserialize(table.clone()).map_err(|e| fail(e.message().trim().to_owned()))?;
        merge_tables(&mut merged, table);
    }
    Ok(merged)
}

/// A string that must not be empty.
fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        Err(de::Error::invalid_value(
            de::Unexpected::Str(&s),
            &"a non-empty string",
        ))
    } else {
        Ok(s)
    }
}

/// A TCP address to listen on: `IP:PORT` (`127.0.0.1:9337`, `[::1]:9337`).
fn listen_address<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let text = String::deserialize(d)?;
    text.trim().parse().map(Some).map_err(|_| {
        de::Error::custom(format!(
            "{text:?} is not an IP address and port (write \"127.0.0.1:9337\" or \"[::1]:9337\"; host names are not resolved)"
        ))
    })
}

/// The `[providers]` table: each name lowercase letters, digits, `-` and
/// `_` (the environment and state directories rely on it).
fn providers<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, ProviderEntry>, D::Error> {
    /// A checked provider name.
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    struct ProviderName(String);

    impl<'de> Deserialize<'de> for ProviderName {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let name = String::deserialize(d)?;
            let valid = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
            if valid {
                Ok(ProviderName(name))
            } else {
                Err(de::Error::custom(format!(
                    "provider name `{name}` must be lowercase letters, digits, '-' or '_'"
                )))
            }
        }
    }

    let map = BTreeMap::<ProviderName, ProviderEntry>::deserialize(d)?;
    Ok(map.into_iter().map(|(k, v)| (k.0, v)).collect())
}

/// A provider's `[config]` table, as JSON.
fn table_as_json<'de, D: Deserializer<'de>>(d: D) -> Result<serde_json::Value, D::Error> {
    toml::Table::deserialize(d).map(toml_to_json)
}

/// A Kubernetes node name: a DNS subdomain (RFC 1123: lowercase letters,
/// digits, `-` and `.`, starting and ending with a letter or digit, at most
/// 253 characters), as the API server requires of `metadata.name`.
fn node_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let valid = !s.is_empty()
        && s.len() <= 253
        && s.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && s.split('.')
            .all(|label| label.starts_with(alnum) && label.ends_with(alnum) && label.len() <= 63);
    if valid {
        Ok(Some(s))
    } else {
        Err(de::Error::invalid_value(
            de::Unexpected::Str(&s),
            &"a Kubernetes node name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)",
        ))
    }
}

/// An NRI plugin name: letters, digits, `-`, `_` and `.`.
fn nri_plugin_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    let valid = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if valid {
        Ok(s)
    } else {
        Err(de::Error::invalid_value(
            de::Unexpected::Str(&s),
            &"a plugin name of letters, digits, '-', '_' and '.' (e.g. \"topomgr\")",
        ))
    }
}

/// An NRI plugin index: two digits, as a string (NRI orders plugins by it).
fn nri_plugin_index<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("two digits as a string, \"00\" to \"99\" (write \"05\", not 5)")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            if v.len() == 2 && v.bytes().all(|b| b.is_ascii_digit()) {
                Ok(v.to_owned())
            } else {
                Err(E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        // An index written as a number: the quoted form of that number.
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
            if (0..=99).contains(&v) {
                Err(E::custom(format_args!(
                    "invalid type: integer `{v}`, expected two digits as a string, \"00\" to \"99\" (write \"{v:02}\", not {v})"
                )))
            } else {
                Err(E::invalid_type(de::Unexpected::Signed(v), &self))
            }
        }
    }
    d.deserialize_str(V)
}

/// A deadline in milliseconds, at least 1.
fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = i64::deserialize(d)?;
    match u64::try_from(v) {
        Ok(ms) if ms >= 1 => Ok(ms),
        _ => Err(de::Error::invalid_value(
            de::Unexpected::Signed(v),
            &"a positive number of milliseconds",
        )),
    }
}

/// A count of at least 1.
fn count<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let v = i64::deserialize(d)?;
    match usize::try_from(v) {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(de::Error::invalid_value(
            de::Unexpected::Signed(v),
            &"a count of at least 1",
        )),
    }
}

/// Policy options: string values, as the kubelet's options are.
fn option_values<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    /// One option's value.
    struct OptionValue(String);

    impl<'de> Deserialize<'de> for OptionValue {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl de::Visitor<'_> for V {
                type Value = OptionValue;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a string (write \"true\", not true)")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<OptionValue, E> {
                    Ok(OptionValue(v.to_owned()))
                }
            }
            d.deserialize_str(V)
        }
    }

    let map = BTreeMap::<String, OptionValue>::deserialize(d)?;
    Ok(map.into_iter().map(|(k, v)| (k, v.0)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let p =
                std::env::temp_dir().join(format!("topomgr-config-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(p.join("plugins.d")).unwrap();
            Dir(p)
        }
        fn write(&self, rel: &str, text: &str) -> PathBuf {
            let p = self.0.join(rel);
            fs::write(&p, text).unwrap();
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn load_with_env(
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HostConfig, ConfigError> {
        load_with(
            path,
            &LoadOptions {
                env,
                protected: false,
            },
        )
    }

    fn err(path: &Path) -> String {
        load_with_env(path, &no_env).unwrap_err().to_string()
    }

    #[test]
    fn defaults_when_file_is_empty() {
        let d = Dir::new("empty");
        let main = d.write("topomgr.toml", "");
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert_eq!(
            cfg,
            HostConfig {
                files: vec![main],
                ..HostConfig::default()
            }
        );
    }

    /// `[limits]`: the defaults, and a drop-in sets one key.
    #[test]
    fn limits_table_defaults_and_overrides() {
        let d = Dir::new("limits");
        let main = d.write("topomgr.toml", "");
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert_eq!(cfg.limits.limits(), limits::Limits::default());
        assert_eq!(
            (
                cfg.limits.max_pods,
                cfg.limits.max_containers,
                cfg.limits.max_containers_per_pod
            ),
            (2048, 4096, 256)
        );
        d.write("plugins.d/10-limits.toml", "[limits]\nmax_pods = 300\n");
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert_eq!(
            cfg.limits.limits(),
            limits::Limits {
                max_pods: 300,
                ..limits::Limits::default()
            }
        );
    }

    #[test]
    fn dropins_merge_in_name_order_and_paths_resolve() {
        let d = Dir::new("merge");
        let main = d.write(
            "topomgr.toml",
            r#"
policy = "restricted"
plugin_dirs = ["libs", "/abs"]
state_dir = "state"
[policy_options]
prefer-closest-numa-nodes = "true"
"#,
        );
        d.write(
            "plugins.d/20-b.toml",
            r#"
policy = "single-numa-node"
[policy_options]
max-allowable-numa-nodes = "16"
[providers.mock.config]
hints = { "example.com/foo" = "none" }
nested = { a = 2 }
when = 1979-05-27T07:32:00Z
"#,
        );
        d.write(
            "plugins.d/10-a.toml",
            r#"
policy = "none"
[providers.mock]
library = "mock/libmock.so"
[providers.mock.config]
nested = { a = 1, b = [1, 2] }
"#,
        );
        d.write("plugins.d/README", "not toml, ignored");
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert_eq!(cfg.policy, "single-numa-node");
        assert_eq!(cfg.scope, "container");
        assert_eq!(
            cfg.plugin_dirs,
            vec![d.0.join("libs"), PathBuf::from("/abs")]
        );
        assert_eq!(cfg.state_dir, d.0.join("state"));
        assert_eq!(
            cfg.policy_options,
            BTreeMap::from([
                ("max-allowable-numa-nodes".to_owned(), "16".to_owned()),
                ("prefer-closest-numa-nodes".to_owned(), "true".to_owned())
            ])
        );
        let mock = &cfg.providers["mock"];
        assert_eq!(mock.library, d.0.join("mock/libmock.so").to_string_lossy());
        assert!(mock.enabled);
        assert_eq!(mock.defined_in, d.0.join("plugins.d/10-a.toml"));
        assert_eq!(
            mock.config,
            serde_json::json!({"hints": {"example.com/foo": "none"}, "nested": {"a": 2, "b": [1, 2]}, "when": "1979-05-27T07:32:00Z"})
        );
        assert_eq!(
            cfg.files,
            vec![
                main,
                d.0.join("plugins.d/10-a.toml"),
                d.0.join("plugins.d/20-b.toml")
            ]
        );
    }

    #[test]
    fn enabled_false_in_a_dropin_disables_the_provider() {
        let d = Dir::new("enabled");
        let main = d.write("topomgr.toml", "");
        d.write(
            "plugins.d/10-a.toml",
            "[providers.a]\nlibrary = \"a\"\n[providers.b]\nlibrary = \"b\"\n",
        );
        d.write("plugins.d/90-off.toml", "[providers.a]\nenabled = false\n");
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert!(!cfg.providers["a"].enabled);
        assert_eq!(
            cfg.providers["a"].defined_in,
            d.0.join("plugins.d/10-a.toml")
        );
        let enabled: Vec<&str> = cfg.enabled_providers().map(|(n, _)| n.as_str()).collect();
        assert_eq!(enabled, vec!["b"]);
        // A later drop-in may enable it again.
        d.write("plugins.d/95-on.toml", "[providers.a]\nenabled = true\n");
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert_eq!(cfg.enabled_providers().count(), 2);
    }

    #[test]
    fn unknown_keys_and_types_name_file_line_and_key() {
        let d = Dir::new("bad");
        let main = d.write("topomgr.toml", "");
        let f = d.write(
            "plugins.d/10-x.toml",
            "[providers.x]\nlibrary = \"x\"\nenabled = \"yes\"\n",
        );
        let cases: &[(&str, &str)] = &[
            (
                "[providers.x]\nlibrary = \"x\"\nenabled = \"yes\"\n",
                "line 3: providers.x.enabled: invalid type: string \"yes\", expected a boolean",
            ),
            (
                "[providers.x]\nlibrary = \"x\"\ncolour = 1\n",
                "line 3: providers.x.colour: unknown field `colour`, expected one of `library`, `enabled`, `config`",
            ),
            (
                "polcy = \"none\"\n",
                "line 1: polcy: unknown field `polcy`, expected one of `policy`, `scope`, `plugins_d`, `plugin_dirs`, \
                 `sysfs_root`, `cgroup_root`, `state_dir`, `node_name`, `export_file`, `policy_options`, `disable_cpu_quota_with_exclusive_cpus`, `providers`, `daemon`, `nri`, `limits`, `cdi`, `kubernetes`, `podresources`",
            ),
            (
                "[policy_options]\nprefer-closest-numa-nodes = true\n",
                "line 2: policy_options.prefer-closest-numa-nodes: invalid type: boolean `true`, expected a string (write \"true\", not true)",
            ),
            (
                "plugin_dirs = [\"a\", 3]\n",
                "line 1: plugin_dirs[1]: invalid type: integer `3`, expected path string",
            ),
            (
                "plugins_d = \"x\"\n",
                "plugins_d: is only allowed in the main config file",
            ),
            (
                "[providers.Mock]\nlibrary = \"x\"\n",
                "line 1: providers.Mock: provider name `Mock` must be lowercase letters, digits, '-' or '_'",
            ),
            (
                "[providers.x]\nlibrary = \"\"\n",
                "line 2: providers.x.library: invalid value: string \"\", expected a non-empty string",
            ),
            (
                "[daemon]\nprovider_timeout_ms = 0\n",
                "line 2: daemon.provider_timeout_ms: invalid value: integer `0`, expected a positive number of milliseconds",
            ),
            (
                "[daemon]\nreclaim_interval_ms = 0\n",
                "line 2: daemon.reclaim_interval_ms: invalid value: integer `0`, expected a positive number of milliseconds",
            ),
            (
                "[limits]\nmax_pods = 0\n",
                "line 2: limits.max_pods: invalid value: integer `0`, expected a count of at least 1",
            ),
            (
                "[limits]\nmax_containers_per_pod = -3\n",
                "line 2: limits.max_containers_per_pod: invalid value: integer `-3`, expected a count of at least 1",
            ),
            (
                "[limits]\nmax_pod = 10\n",
                "line 2: limits.max_pod: unknown field `max_pod`, expected one of `max_pods`, `max_containers`, `max_containers_per_pod`",
            ),
            (
                "[daemon]\nport = 1\n",
                "line 2: daemon.port: unknown field `port`, expected one of `socket`, `group`, `provider_timeout_ms`, `reclaim_interval_ms`, `machine_check_interval_ms`, `metrics_address`",
            ),
            (
                "[nri]\nplugin_index = 5\n",
                "line 2: nri.plugin_index: invalid type: integer `5`, expected two digits as a string, \"00\" to \"99\" (write \"05\", not 5)",
            ),
            (
                "[nri]\nplugin_index = 50\n",
                "line 2: nri.plugin_index: invalid type: integer `50`, expected two digits as a string, \"00\" to \"99\" (write \"50\", not 50)",
            ),
            (
                "[nri]\nplugin_index = \"100\"\n",
                "line 2: nri.plugin_index: invalid value: string \"100\", expected two digits as a string, \"00\" to \"99\" (write \"05\", not 5)",
            ),
            (
                "[nri]\nplugin_name = \"top/mgr\"\n",
                "line 2: nri.plugin_name: invalid value: string \"top/mgr\", expected a plugin name of letters, digits, '-', '_' and '.' (e.g. \"topomgr\")",
            ),
            (
                "[nri]\nenable = true\n",
                "line 2: nri.enable: unknown field `enable`, expected one of `enabled`, `socket`, `plugin_name`, `plugin_index`, `kubelet_root_dir`, `cri_socket`",
            ),
            (
                "[podresources]\nsocket = 5\n",
                "line 2: podresources.socket: invalid type: integer `5`, expected path string",
            ),
            (
                "[podresources]\nenabled = true\n",
                "line 2: podresources.enabled: unknown field `enabled`, expected `socket`",
            ),
            ("policy = \n", "line 1: string values must be quoted, expected literal string"),
        ];
        for (text, want) in cases {
            d.write("plugins.d/10-x.toml", text);
            assert_eq!(err(&main), format!("{}: {want}", f.display()), "{text}");
        }
        d.write("plugins.d/10-x.toml", "[providers.y]\nenabled = false\n");
        assert_eq!(
            err(&main),
            format!(
                "provider `y` (last set in {}) has no `library`; add library = \"<name or path>\" to its [providers.y] table",
                f.display()
            )
        );
    }

    #[test]
    fn explicit_missing_dropin_dir_is_an_error_default_is_not() {
        let d = Dir::new("dropdir");
        fs::remove_dir_all(d.0.join("plugins.d")).unwrap();
        let main = d.write("topomgr.toml", "");
        assert!(load_with_env(&main, &no_env).is_ok());
        d.write("topomgr.toml", "plugins_d = \"conf.d\"\n");
        let e = err(&main);
        assert!(
            e.starts_with(&format!(
                "cannot list drop-in directory {} (set by `plugins_d` in {}): ",
                d.0.join("conf.d").display(),
                main.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn policy_errors_name_where_their_key_was_set() {
        use topomgr_engine::policy::PolicyError;
        let d = Dir::new("policy-origin");
        let main = d.write("topomgr.toml", "policy = \"bogus\"\nscope = \"pod\"\n");
        let dropin = d.write(
            "plugins.d/10-opts.toml",
            "[policy_options]\nmax-allowable-numa-nodes = \"4\"\n",
        );
        let env = |k: &str| (k == "TOPOMGR_SCOPE").then(|| "nope".to_owned());
        let cfg = load_with_env(&main, &env).unwrap();
        let place = |e: PolicyError| cfg.policy_error_place(&e);
        assert_eq!(
            place(PolicyError::UnknownPolicy("bogus".into())),
            format!(" (`policy` in {})", main.display())
        );
        // The environment is applied last: it is what set the scope.
        assert_eq!(
            place(PolicyError::UnknownScope("nope".into())),
            " (`scope` from environment variable TOPOMGR_SCOPE)"
        );
        assert_eq!(
            place(PolicyError::BelowMinimum {
                name: "max-allowable-numa-nodes".into(),
                min: 8,
                value: 4
            }),
            format!(
                " (`policy_options.max-allowable-numa-nodes` in {})",
                dropin.display()
            )
        );
        // Not set anywhere (its default) or naming no key: no place.
        assert_eq!(place(PolicyError::MissingDistances), "");
    }

    #[test]
    fn environment_overrides() {
        let d = Dir::new("env");
        let main = d.write(
            "topomgr.toml",
            "policy = \"restricted\"\nplugin_dirs = [\"x\"]\n",
        );
        let env = |k: &str| match k {
            "TOPOMGR_POLICY" => Some("none".to_owned()),
            "TOPOMGR_PLUGIN_DIRS" => Some("/a:/b".to_owned()),
            "TOPOMGR_STATE_DIR" => Some("/tmp/st".to_owned()),
            "TOPOMGR_LOG" => Some("debug".to_owned()),
            _ => None,
        };
        let cfg = load_with_env(&main, &env).unwrap();
        assert_eq!(cfg.policy, "none");
        assert_eq!(
            cfg.plugin_dirs,
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(cfg.state_dir, PathBuf::from("/tmp/st"));
        let env = |k: &str| (k == "TOPOMGR_SCOPE").then(String::new);
        assert_eq!(
            load_with_env(&main, &env).unwrap_err().to_string(),
            "environment variable TOPOMGR_SCOPE: is set but empty; unset it or give a value"
        );
    }

    /// Without a config file the environment still applies, over the
    /// built-in defaults, and no file or provider is configured.
    #[test]
    fn environment_applies_without_a_file() {
        let env = |k: &str| match k {
            "TOPOMGR_POLICY" => Some("single-numa-node".to_owned()),
            "TOPOMGR_STATE_DIR" => Some("/tmp/st".to_owned()),
            "TOPOMGR_METRICS_ADDRESS" => Some("127.0.0.1:9101".to_owned()),
            _ => None,
        };
        let cfg = defaults_with(&env).unwrap();
        assert_eq!(cfg.policy, "single-numa-node");
        assert_eq!(cfg.state_dir, PathBuf::from("/tmp/st"));
        assert_eq!(
            cfg.daemon.metrics_address,
            Some("127.0.0.1:9101".parse().unwrap())
        );
        assert_eq!(cfg.scope, HostConfig::default().scope);
        assert!(cfg.files.is_empty());
        assert!(cfg.providers.is_empty());
        assert_eq!(defaults_with(&no_env).unwrap(), HostConfig::default());
        let env = |k: &str| (k == "TOPOMGR_POLICY").then(String::new);
        assert_eq!(
            defaults_with(&env).unwrap_err().to_string(),
            "environment variable TOPOMGR_POLICY: is set but empty; unset it or give a value"
        );
    }

    #[test]
    fn missing_main_file() {
        let e = load_with_env(Path::new("/nonexistent/topomgr.toml"), &no_env)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "cannot read config file /nonexistent/topomgr.toml: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn node_name_and_export_file() {
        let d = Dir::new("nrt");
        let main = d.write("topomgr.toml", "");
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert_eq!((cfg.node_name, cfg.export_file), (None, None));
        d.write(
            "plugins.d/50-nrt.toml",
            "node_name = \"worker-1.example\"\nexport_file = \"run/nrt.json\"\n",
        );
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert_eq!(cfg.node_name.as_deref(), Some("worker-1.example"));
        assert_eq!(cfg.export_file, Some(d.0.join("run/nrt.json")));
        d.write("plugins.d/50-nrt.toml", "node_name = \"Worker_1\"\n");
        let e = err(&main);
        assert!(
            e.contains("line 1: node_name: invalid value: string \"Worker_1\", expected a Kubernetes node name"),
            "{e}"
        );
    }

    #[test]
    fn daemon_table_defaults_and_overrides() {
        let d = Dir::new("daemon");
        let main = d.write("topomgr.toml", "");
        assert_eq!(
            load_with_env(&main, &no_env).unwrap().daemon,
            DaemonConfig {
                socket: PathBuf::from("/run/topomgr/topomgr.sock"),
                group: "topomgr".to_owned(),
                provider_timeout_ms: 10_000,
                reclaim_interval_ms: 10_000,
                machine_check_interval_ms: 30_000,
                metrics_address: None,
            }
        );
        d.write(
            "plugins.d/50-daemon.toml",
            "[daemon]\nsocket = \"run/t.sock\"\ngroup = \"wheel\"\nprovider_timeout_ms = 250\nreclaim_interval_ms = 500\n",
        );
        d.write("plugins.d/60-group.toml", "[daemon]\ngroup = \"other\"\n");
        assert_eq!(
            load_with_env(&main, &no_env).unwrap().daemon,
            DaemonConfig {
                socket: d.0.join("run/t.sock"),
                group: "other".to_owned(),
                provider_timeout_ms: 250,
                reclaim_interval_ms: 500,
                machine_check_interval_ms: 30_000,
                metrics_address: None,
            }
        );
    }

    #[test]
    fn metrics_address_from_files_and_environment() {
        let d = Dir::new("metrics");
        let main = d.write(
            "topomgr.toml",
            "[daemon]
metrics_address = \"127.0.0.1:9337\"\n",
        );
        let addr = |cfg: HostConfig| cfg.daemon.metrics_address.map(|a| a.to_string());
        assert_eq!(
            addr(load_with_env(&main, &no_env).unwrap()).as_deref(),
            Some("127.0.0.1:9337")
        );
        // A drop-in replaces it; the other daemon keys keep their defaults.
        d.write(
            "plugins.d/50-metrics.toml",
            "[daemon]\nmetrics_address = \"[::1]:9400\"\n",
        );
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert_eq!(cfg.daemon.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(addr(cfg).as_deref(), Some("[::1]:9400"));
        // The environment wins over every file.
        let env = |k: &str| (k == "TOPOMGR_METRICS_ADDRESS").then(|| "0.0.0.0:9500".to_owned());
        assert_eq!(
            addr(load_with_env(&main, &env).unwrap()).as_deref(),
            Some("0.0.0.0:9500")
        );
        // Off by default.
        d.write("plugins.d/50-metrics.toml", "");
        d.write("topomgr.toml", "");
        assert_eq!(
            load_with_env(&main, &no_env)
                .unwrap()
                .daemon
                .metrics_address,
            None
        );
    }

    #[test]
    fn bad_metrics_addresses_are_refused_naming_where() {
        let d = Dir::new("metrics-bad");
        let main = d.write("topomgr.toml", "");
        let f = d.0.join("plugins.d/50-metrics.toml");
        let cases: &[(&str, &str)] = &[
            (
                "[daemon]\nmetrics_address = \"localhost:9337\"\n",
                "line 2: daemon.metrics_address: \"localhost:9337\" is not an IP address and port (write \"127.0.0.1:9337\" or \"[::1]:9337\"; host names are not resolved)",
            ),
            (
                "[daemon]\nmetrics_address = \"127.0.0.1\"\n",
                "line 2: daemon.metrics_address: \"127.0.0.1\" is not an IP address and port (write \"127.0.0.1:9337\" or \"[::1]:9337\"; host names are not resolved)",
            ),
            (
                "[daemon]\nmetrics_address = 9337\n",
                "line 2: daemon.metrics_address: invalid type: integer `9337`, expected a string",
            ),
        ];
        for (text, want) in cases {
            d.write("plugins.d/50-metrics.toml", text);
            assert_eq!(err(&main), format!("{}: {want}", f.display()), "{text}");
        }
        d.write("plugins.d/50-metrics.toml", "");
        let env = |k: &str| (k == "TOPOMGR_METRICS_ADDRESS").then(|| ":9337".to_owned());
        assert_eq!(
            load_with_env(&main, &env).unwrap_err().to_string(),
            "environment variable TOPOMGR_METRICS_ADDRESS: \":9337\" is not an IP address and port (write \"127.0.0.1:9337\" or \"[::1]:9337\"; host names are not resolved)"
        );
        let env = |k: &str| (k == "TOPOMGR_METRICS_ADDRESS").then(String::new);
        assert_eq!(
            load_with_env(&main, &env).unwrap_err().to_string(),
            "environment variable TOPOMGR_METRICS_ADDRESS: is set but empty; unset it or give a value"
        );
    }

    #[test]
    fn protected_load_refuses_writable_files_and_directories() {
        use std::os::unix::fs::PermissionsExt;
        let d = Dir::new("protected");
        let main = d.write("topomgr.toml", "");
        let dropin = d.write("plugins.d/10-a.toml", "[daemon]\ngroup = \"theirs\"\n");
        let protected = |p: &Path| {
            load_with(
                p,
                &LoadOptions {
                    env: &no_env,
                    protected: true,
                },
            )
        };
        assert_eq!(protected(&main).unwrap().daemon.group, "theirs");
        let dir = d.0.join("plugins.d");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            protected(&main).unwrap_err().to_string(),
            format!(
                "refusing drop-in directory {0}: {0} is writable by everyone (mode 0777); run chmod o-w on it",
                dir.display()
            )
        );
        // Unprotected loads (a non-root user's own what-if run) still work.
        assert!(load_with_env(&main, &no_env).is_ok());
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&dropin, fs::Permissions::from_mode(0o664)).unwrap();
        let gid = {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(&dropin).unwrap().gid()
        };
        assert_eq!(
            protected(&main).unwrap_err().to_string(),
            format!(
                "refusing drop-in {0}: {0} is writable by its group (gid {gid}, mode 0664); run chmod g-w on it",
                dropin.display()
            )
        );
        fs::set_permissions(&dropin, fs::Permissions::from_mode(0o644)).unwrap();
        fs::set_permissions(&main, fs::Permissions::from_mode(0o646)).unwrap();
        assert_eq!(
            protected(&main).unwrap_err().to_string(),
            format!(
                "refusing config file {0}: {0} is writable by everyone (mode 0646); run chmod o-w on it",
                main.display()
            )
        );
    }

    #[test]
    fn the_nri_table_has_defaults_and_merges_key_by_key() {
        let d = Dir::new("nri");
        let main = d.write("topomgr.toml", "");
        assert_eq!(
            load_with_env(&main, &no_env).unwrap().nri,
            NriConfig {
                enabled: false,
                socket: PathBuf::from("/var/run/nri/nri.sock"),
                plugin_name: "topomgr".into(),
                plugin_index: "50".into(),
                kubelet_root_dir: PathBuf::from("/var/lib/kubelet"),
                cri_socket: None,
            }
        );
        d.write(
            "topomgr.toml",
            "[nri]\nsocket = \"run/nri.sock\"\nplugin_index = \"05\"\nkubelet_root_dir = \"kubelet\"\ncri_socket = \"run/cri.sock\"\n",
        );
        d.write("plugins.d/50-nri.toml", "[nri]\nenabled = true\n");
        assert_eq!(
            load_with_env(&main, &no_env).unwrap().nri,
            NriConfig {
                enabled: true,
                socket: d.0.join("run/nri.sock"),
                plugin_name: "topomgr".into(),
                plugin_index: "05".into(),
                kubelet_root_dir: d.0.join("kubelet"),
                cri_socket: Some(d.0.join("run/cri.sock")),
            }
        );
    }

    #[test]
    fn the_cdi_table_has_the_runtimes_directories_by_default() {
        let d = Dir::new("cdi");
        let main = d.write("topomgr.toml", "");
        assert_eq!(
            load_with_env(&main, &no_env).unwrap().cdi,
            CdiConfig {
                spec_dirs: vec![PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")],
                align_unknown_devices: true,
                kubelet_pod_resources_socket: None,
            }
        );
        d.write(
            "topomgr.toml",
            "[cdi]\nspec_dirs = [\"cdi\", \"/run/cdi\"]\nalign_unknown_devices = false\n\
             kubelet_pod_resources_socket = \"kubelet.sock\"\n",
        );
        assert_eq!(
            load_with_env(&main, &no_env).unwrap().cdi,
            CdiConfig {
                spec_dirs: vec![d.0.join("cdi"), PathBuf::from("/run/cdi")],
                align_unknown_devices: false,
                kubelet_pod_resources_socket: Some(d.0.join("kubelet.sock")),
            }
        );
        d.write(
            "topomgr.toml",
            "[cdi]\nkubelet_pod_resources_socket = \"/var/lib/kubelet/pod-resources/kubelet.sock\"\n",
        );
        assert_eq!(
            load_with_env(&main, &no_env)
                .unwrap()
                .cdi
                .kubelet_pod_resources_socket,
            Some(PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"))
        );
        d.write("topomgr.toml", "[cdi]\nkubelet_pod_resources_socket = 7\n");
        let err = load_with_env(&main, &no_env).unwrap_err().to_string();
        assert!(err.contains("cdi.kubelet_pod_resources_socket"), "{err}");
        d.write("topomgr.toml", "[cdi]\nspec_dir = \"/etc/cdi\"\n");
        assert!(load_with_env(&main, &no_env)
            .unwrap_err()
            .to_string()
            .contains("cdi.spec_dir: unknown field `spec_dir`, expected one of `spec_dirs`, `align_unknown_devices`, `kubelet_pod_resources_socket`"));
    }

    #[test]
    fn the_podresources_socket_is_off_by_default_and_resolves_against_the_main_file() {
        let d = Dir::new("podresources");
        let main = d.write("topomgr.toml", "");
        assert_eq!(
            load_with_env(&main, &no_env).unwrap().podresources.socket,
            None
        );
        d.write(
            "topomgr.toml",
            "[podresources]\nsocket = \"pod-resources/kubelet.sock\"\n",
        );
        assert_eq!(
            load_with_env(&main, &no_env).unwrap().podresources.socket,
            Some(d.0.join("pod-resources/kubelet.sock"))
        );
    }
}
