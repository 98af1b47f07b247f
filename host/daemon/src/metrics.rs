//! Prometheus metrics of the daemon (`GET /metrics` on the socket, and on
//! TCP at `daemon.metrics_address`), in the Prometheus text format (0.0.4), as the kubelet serves it.
//!
//! # Names
//!
//! Where the kubelet has a metric for the same thing, topomgr exports it
//! under the kubelet's name, type, buckets and labels
//! (`pkg/kubelet/metrics/metrics.go`), without the kubelet's `kubelet_`
//! subsystem prefix: topomgr is not the kubelet, and a scrape of both keeps
//! them apart. What the kubelet lacks carries the `topomgr_` prefix.
//!
//! | metric | type | kubelet | what topomgr counts |
//! |---|---|---|---|
//! | `topology_manager_admission_requests_total` | counter | same | every pod the daemon is asked to admit |
//! | `topology_manager_admission_errors_total` | counter | same | those rejected, whatever the reason |
//! | `topology_manager_admission_duration_ms` | histogram, buckets 0.05 ms × 2^k, k = 0..14 | same | one pod's admission (hints, merge, allocation), in milliseconds (fractional: the kubelet truncates to whole ms) |
//! | `container_aligned_compute_resources_count{scope,boundary}` | counter | same | under `single-numa-node`: each container admitted (container scope) or each pod admitted (pod scope), `boundary="numa_node"` |
//! | `container_aligned_compute_resources_failure_count{scope,boundary}` | counter | same | under `single-numa-node`: each `TopologyAffinityError` |
//! | `admission_rejections_total{reason}` | counter | same | every rejection by reason, including requests refused before admission (`BadManifest`, `PodUidConflict`); reasons outside `REJECTION_REASONS` count as `Other`, as the kubelet bounds its label |
//! | `cpu_manager_pinning_requests_total`, `cpu_manager_pinning_errors_total` | counter | same | see "Provider-owned metrics" |
//! | `memory_manager_pinning_requests_total`, `memory_manager_pinning_errors_total` | counter | same | see "Provider-owned metrics" |
//! | `cpu_manager_shared_pool_size_millicores` | gauge | same | the shared pool (online CPUs minus every exclusive CPU) × 1000 |
//! | `cpu_manager_exclusive_cpu_allocation_count` | gauge | same | CPUs held exclusively |
//! | `cpu_manager_allocation_per_numa{numa_node}` | gauge | same | exclusive CPUs per NUMA node (every node of the machine as last read, 0 included: a reload that finds a node gone drops its series, a new node gets one) |
//! | `topomgr_provider_call_duration_seconds{provider,call}` | histogram | — | every call into a provider |
//! | `topomgr_provider_timeouts_total{provider,call}` | counter | — | calls that missed the deadline |
//! | `topomgr_ledger_violations_total{provider}` | counter | — | allocations the ledger refused |
//! | `topomgr_checkpoint_duration_seconds` | histogram | — | one durable state write |
//! | `topomgr_admitted_pods` | gauge | — | pods admitted now |
//! | `topomgr_reclaimed_pods_total{owner,cause}` | counter | — | owned pods released because their owner is gone (`owner`: `process` or `container`; `cause`: `owner_gone` or `never_attached`), at start and by the periodic reclaim |
//! | `topomgr_nri_connected` | gauge | — | 1 while topomgr is registered with the container runtime's NRI, else 0 (also 0 without `[nri] enabled`) |
//! | `topomgr_reconcile_conflicts{provider,resource}` | gauge | — | assignments that lost part of what they hold, as the providers reported them at the last restore (start, reload, machine check); a series whose conflicts cleared is gone |
//! | `topomgr_reconcile_missing_held{provider,resource}` | gauge | — | CPUs and devices that pods in conflict hold but the machine no longer has: kept for those pods, offered to no one (no series for conflicts of amounts, such as memory) |
//! | `topomgr_reloads_total` | counter | — | reconciles with the machine and config as they are now (on SIGHUP, or when the machine check found the machine changed) |
//! | `topomgr_reload_failures_total` | counter | — | reloads (SIGHUP, machine check) that kept the running providers because the new config or machine could not be taken |
//! | `topomgr_nri_cpuset_repairs_total` | counter | — | containers followed through NRI whose cgroup was found with another cpuset than the runtime was told (an update lost, a change behind topomgr's back), sent again |
//! | `topomgr_resizes_total{result}` | counter | — | in-place resizes asked through NRI UpdateContainer (`result`: `done`, or `refused` with the reason in the runtime's error) |
//! | `topomgr_cpuset_drift_total` | counter | — | attached cgroups whose cpuset or memory nodes someone else changed, found by the machine check (each restored once; one whose change comes back is reported in health instead of rewritten) |
//!
//! Every counter is exported from the start, at 0; labelled series are
//! created up front for every value topomgr knows (both scopes of the
//! alignment counters, as the kubelet's Topology Manager does; every
//! rejection reason; every provider and call; every NUMA node).
//!
//! The exposition is the Prometheus text format (version 0.0.4), the
//! kubelet's: the kubelet's two alignment counters end in `_count`, not
//! `_total`, which OpenMetrics requires of a counter's samples; in the
//! Prometheus format they are counters with exactly the kubelet's names.
//! HELP texts are written as registered (the kubelet's, with or without a
//! final period).
//!
//! # Provider-owned metrics
//!
//! The kubelet's CPU and Memory Managers count their own allocations;
//! topomgr's providers are plugins, so the host counts at the same place,
//! each provider's `allocate` call, for the providers that own the resource:
//! a provider owns CPUs when its inventory (the SDK's `inventory` call,
//! asked once at start) lists `cpu` or once it has given hints for `cpu`,
//! and memory when it lists or has given hints for `memory` or a
//! `hugepages-<size>` resource (hints come before `allocate` in every
//! admission, so a provider that owns a resource without an inventory is
//! known by then). For such a provider:
//! - **CPU pinning**: a container of a Guaranteed pod whose CPU request is
//!   a whole number of CPUs (the kubelet's `guaranteedCPUs`) is a pinning
//!   request when the call fails (then it is also a pinning error) or
//!   returns exclusive CPUs; an owner that pins nothing (CPU policy `none`)
//!   makes no requests, as the kubelet's `none` policy.
//! - **Memory pinning**: any container of a Guaranteed pod is a pinning
//!   request when the call fails (also an error) or returns memory nodes.
//!
//! Differences from the kubelet, all because an admission is all or nothing
//! in topomgr: containers of a pod that is rejected later are not counted
//! as aligned (they were released), and a pod that is posted again after it
//! was admitted counts as a request but its containers not again as aligned.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::RwLock;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use topomgr_sdk::{
    Allocation, ContainerView, CpuSet, Inventory, Machine, PodView, ProviderError, ProviderHints,
    QosClass,
};

use topomgr_engine::admission::{
    AdmitResult, PROVIDER_HELD, TOO_MANY_CONTAINERS, TOPOLOGY_AFFINITY_ERROR, UID_CONFLICT,
    UNEXPECTED_ADMISSION_ERROR,
};
use topomgr_engine::policy::{PolicyName, Scope};
use topomgr_engine::provider::ProviderObserver;

/// The reason of a request whose body is not a usable Pod manifest.
pub(crate) const BAD_MANIFEST: &str = "BadManifest";

/// The `reason` values of `admission_rejections_total`; any other reason (a
/// provider's own) is counted as `Other`.
pub(crate) const REJECTION_REASONS: [&str; 9] = [
    TOPOLOGY_AFFINITY_ERROR,
    UNEXPECTED_ADMISSION_ERROR,
    "SMTAlignmentError",
    topomgr_engine::provider::PROVIDER_TIMEOUT,
    PROVIDER_HELD,
    TOO_MANY_CONTAINERS,
    UID_CONFLICT,
    BAD_MANIFEST,
    "Other",
];

/// The calls a provider reports to its observer ([`topomgr_engine::provider::ProviderObserver`]).
pub(crate) const PROVIDER_CALLS: [&str; 9] = [
    "topology_hints",
    "pod_topology_hints",
    "allocate",
    "release",
    "checkpoint",
    "restore",
    "preferred_allocation",
    "inventory",
    "assigned_device_hints",
];

/// Label set `{reason}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

/// Label set `{result}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

/// Label set `{provider}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabel {
    provider: String,
}

/// Label set `{provider, call}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    provider: String,
    call: String,
}

/// Label set `{scope, boundary}` of the kubelet's alignment counters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlignLabels {
    scope: &'static str,
    boundary: &'static str,
}

/// Label set `{provider, resource}` of the conflicts gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConflictLabels {
    provider: String,
    resource: String,
}

/// Label set `{owner, cause}` of the reclaim counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReclaimLabels {
    owner: &'static str,
    cause: &'static str,
}

/// Every `{owner, cause}` pair of the reclaim counter.
const RECLAIM_LABELS: [ReclaimLabels; 3] = [
    ReclaimLabels {
        owner: "process",
        cause: "owner_gone",
    },
    ReclaimLabels {
        owner: "container",
        cause: "owner_gone",
    },
    ReclaimLabels {
        owner: "container",
        cause: "never_attached",
    },
];

/// The NUMA nodes of the machine and the node of each CPU id (index).
#[derive(Debug, Default)]
struct NumaLayout {
    nodes: Vec<String>,
    cpu_nodes: Vec<Option<String>>,
}

/// Label set `{numa_node}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NumaLabel {
    numa_node: String,
}

/// A counter whose sample keeps the kubelet's name (no `_total` suffix):
/// type `counter` in the Prometheus text format [`Metrics::render`] writes.
#[derive(Debug, Clone, Default)]
struct KubeletCounter(Counter);

impl TypedMetric for KubeletCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for KubeletCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        encoder.encode_gauge(&self.0.get())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds, 10 us .. ~5 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.00001, 2.5, 15))
}

/// What a provider owns, from its inventory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Ownership {
    cpu: bool,
    memory: bool,
}

impl Ownership {
    /// What resources named `names` make a provider own.
    fn of<'a>(names: impl IntoIterator<Item = &'a String>) -> Ownership {
        let mut o = Ownership::default();
        for name in names {
            o.cpu |= name == "cpu";
            o.memory |= name == "memory" || name.starts_with("hugepages-");
        }
        o
    }

    fn union(self, other: Ownership) -> Ownership {
        Ownership {
            cpu: self.cpu || other.cpu,
            memory: self.memory || other.memory,
        }
    }
}

/// Every metric of the daemon.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    admission_requests: Counter,
    admission_errors: Counter,
    admission_duration_ms: Histogram,
    aligned: Family<AlignLabels, KubeletCounter>,
    aligned_failures: Family<AlignLabels, KubeletCounter>,
    rejections: Family<ReasonLabel, Counter>,
    cpu_pinning_requests: Counter,
    cpu_pinning_errors: Counter,
    memory_pinning_requests: Counter,
    memory_pinning_errors: Counter,
    shared_pool_millicores: Gauge,
    exclusive_cpus: Gauge,
    allocation_per_numa: Family<NumaLabel, Gauge>,
    provider_calls: HistogramFamily<CallLabels>,
    provider_timeouts: Family<CallLabels, Counter>,
    ledger_violations: Family<ProviderLabel, Counter>,
    checkpoint_duration: Histogram,
    admitted_pods: Gauge,
    reclaimed: Family<ReclaimLabels, Counter>,
    nri_connected: Gauge,
    conflicts: Family<ConflictLabels, Gauge>,
    missing_held: Family<ConflictLabels, Gauge>,
    reloads: Counter,
    reload_failures: Counter,
    cpuset_drift: Counter,
    nri_cpuset_repairs: Counter,
    resizes: Family<ResultLabel, Counter>,
    /// The machine's NUMA nodes, for `cpu_manager_allocation_per_numa`
    /// (replaced at a reload, [`Metrics::machine`]).
    numa: RwLock<NumaLayout>,
    owners: RwLock<BTreeMap<String, Ownership>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

const ALIGN_NUMA: [AlignLabels; 2] = [
    AlignLabels {
        scope: "container",
        boundary: "numa_node",
    },
    AlignLabels {
        scope: "pod",
        boundary: "numa_node",
    },
];

impl Metrics {
    /// Every metric at zero, without per-NUMA-node series (tests and benches).
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let admission_requests = Counter::default();
        let admission_errors = Counter::default();
        let admission_duration_ms = Histogram::new(exponential_buckets(0.05, 2.0, 15));
        let aligned = Family::<AlignLabels, KubeletCounter>::default();
        let aligned_failures = Family::<AlignLabels, KubeletCounter>::default();
        let rejections = Family::<ReasonLabel, Counter>::default();
        for labels in &ALIGN_NUMA {
            let _ = aligned.get_or_create(labels);
            let _ = aligned_failures.get_or_create(labels);
        }
        for reason in REJECTION_REASONS {
            let _ = rejections.get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            });
        }
        let m = Metrics {
            admission_requests,
            admission_errors,
            admission_duration_ms,
            aligned,
            aligned_failures,
            rejections,
            cpu_pinning_requests: Counter::default(),
            cpu_pinning_errors: Counter::default(),
            memory_pinning_requests: Counter::default(),
            memory_pinning_errors: Counter::default(),
            shared_pool_millicores: Gauge::default(),
            exclusive_cpus: Gauge::default(),
            allocation_per_numa: Family::default(),
            provider_calls: Family::new_with_constructor(latency_histogram),
            provider_timeouts: Family::default(),
            ledger_violations: Family::default(),
            checkpoint_duration: latency_histogram(),
            admitted_pods: Gauge::default(),
            reclaimed: Family::default(),
            nri_connected: Gauge::default(),
            conflicts: Family::default(),
            missing_held: Family::default(),
            reloads: Counter::default(),
            reload_failures: Counter::default(),
            cpuset_drift: Counter::default(),
            nri_cpuset_repairs: Counter::default(),
            resizes: Family::default(),
            numa: RwLock::new(NumaLayout::default()),
            owners: RwLock::new(BTreeMap::new()),
            registry: Registry::default(),
        };
        registry.register(
            "topology_manager_admission_requests",
            "The number of admission requests where resources have to be aligned.",
            m.admission_requests.clone(),
        );
        registry.register(
            "topology_manager_admission_errors",
            "The number of admission request failures where resources could not be aligned.",
            m.admission_errors.clone(),
        );
        registry.register(
            "topology_manager_admission_duration_ms",
            "Duration in milliseconds to serve a pod admission request.",
            m.admission_duration_ms.clone(),
        );
        registry.register(
            "container_aligned_compute_resources_count",
            "Cumulative number of aligned compute resources allocated to containers by alignment type.",
            m.aligned.clone(),
        );
        registry.register(
            "container_aligned_compute_resources_failure_count",
            "Cumulative number of failures to allocate aligned compute resources to containers by alignment type.",
            m.aligned_failures.clone(),
        );
        registry.register(
            "admission_rejections",
            "Cumulative number of pod admission rejections, by reason.",
            m.rejections.clone(),
        );
        registry.register(
            "cpu_manager_pinning_requests",
            "The number of cpu core allocations which required pinning.",
            m.cpu_pinning_requests.clone(),
        );
        registry.register(
            "cpu_manager_pinning_errors",
            "The number of cpu core allocations which required pinning failed.",
            m.cpu_pinning_errors.clone(),
        );
        registry.register(
            "memory_manager_pinning_requests",
            "The number of memory pages allocations which required pinning.",
            m.memory_pinning_requests.clone(),
        );
        registry.register(
            "memory_manager_pinning_errors",
            "The number of memory pages allocations which required pinning that failed.",
            m.memory_pinning_errors.clone(),
        );
        registry.register(
            "cpu_manager_shared_pool_size_millicores",
            "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
            m.shared_pool_millicores.clone(),
        );
        registry.register(
            "cpu_manager_exclusive_cpu_allocation_count",
            "The total number of CPUs exclusively allocated to containers running on this node",
            m.exclusive_cpus.clone(),
        );
        registry.register(
            "cpu_manager_allocation_per_numa",
            "Number of CPUs allocated per NUMA node",
            m.allocation_per_numa.clone(),
        );
        let own = registry.sub_registry_with_prefix("topomgr");
        own.register(
            "provider_call_duration_seconds",
            "Duration of calls into hint providers, by provider and call",
            m.provider_calls.clone(),
        );
        own.register(
            "provider_timeouts",
            "Provider calls that missed their deadline",
            m.provider_timeouts.clone(),
        );
        own.register(
            "ledger_violations",
            "Allocations refused by the ledger (a CPU or device held elsewhere, or not on this machine), by provider",
            m.ledger_violations.clone(),
        );
        own.register(
            "checkpoint_duration_seconds",
            "Time to make one batch of changes durable (journal append or snapshot)",
            m.checkpoint_duration.clone(),
        );
        own.register(
            "admitted_pods",
            "Pods currently admitted",
            m.admitted_pods.clone(),
        );
        for labels in &RECLAIM_LABELS {
            let _ = m.reclaimed.get_or_create(labels);
        }
        own.register(
            "reclaimed_pods",
            "Owned pods released because their owner is gone, by owner kind and cause",
            m.reclaimed.clone(),
        );
        own.register(
            "nri_connected",
            "1 while topomgr is registered with the container runtime's NRI (Node Resource Interface), else 0",
            m.nri_connected.clone(),
        );
        own.register(
            "reconcile_conflicts",
            "Assignments that lost part of what they hold (an offline CPU, a vanished device, shrunk memory), by provider and resource",
            m.conflicts.clone(),
        );
        own.register(
            "reconcile_missing_held",
            "CPUs and devices that pods in conflict hold but the machine no longer has (kept for those pods, offered to no one), by provider and resource",
            m.missing_held.clone(),
        );
        own.register(
            "reloads",
            "Reconciles with the machine and config as they are now (SIGHUP, or the machine check found a change)",
            m.reloads.clone(),
        );
        own.register(
            "reload_failures",
            "Reloads that kept the running providers because the new config or machine could not be taken",
            m.reload_failures.clone(),
        );
        own.register(
            "cpuset_drift",
            "Attached cgroups whose cpuset or memory nodes were changed by someone else",
            m.cpuset_drift.clone(),
        );
        own.register(
            "nri_cpuset_repairs",
            "Containers followed through NRI found with another cpuset than the runtime was told, sent again",
            m.nri_cpuset_repairs.clone(),
        );
        for result in ["done", "refused"] {
            let _ = m.resizes.get_or_create(&ResultLabel {
                result: result.to_owned(),
            });
        }
        own.register(
            "resizes",
            "In-place resizes asked through NRI UpdateContainer, by result",
            m.resizes.clone(),
        );
        Metrics { registry, ..m }
    }

    /// [`Metrics::new`] with a `cpu_manager_allocation_per_numa` series for
    /// every NUMA node of `machine`.
    pub(crate) fn for_machine(machine: &Machine) -> Metrics {
        let m = Metrics::new();
        m.machine(machine);
        m
    }

    /// Follow `machine` (at start, and at a reload that read the machine
    /// again): one `cpu_manager_allocation_per_numa` series for each of its
    /// NUMA nodes, at 0 until the next [`Metrics::cpus`]; the series of a
    /// node it no longer has are gone.
    pub(crate) fn machine(&self, machine: &Machine) {
        let len = machine
            .cpus
            .iter()
            .map(|c| c.id as usize + 1)
            .max()
            .unwrap_or(0);
        let mut layout = NumaLayout {
            nodes: machine
                .numa_nodes
                .iter()
                .map(|n| n.id.to_string())
                .collect(),
            cpu_nodes: vec![None; len],
        };
        for cpu in &machine.cpus {
            layout.cpu_nodes[cpu.id as usize] = cpu.numa.map(|n| n.to_string());
        }
        let mut numa = self.numa.write().unwrap_or_else(|p| p.into_inner());
        self.allocation_per_numa.clear();
        for node in &layout.nodes {
            let _ = self.allocation_per_numa.get_or_create(&NumaLabel {
                numa_node: node.clone(),
            });
        }
        *numa = layout;
    }

    /// Register a loaded provider: what it owns (from its inventory, for the
    /// CPU and Memory Manager metrics) and its labelled series at 0.
    pub(crate) fn provider(&self, name: &str, inventory: &Inventory) {
        let owns = Ownership::of(inventory.resources.keys());
        self.owners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), owns);
        let _ = self.ledger_violations.get_or_create(&ProviderLabel {
            provider: name.to_owned(),
        });
        for call in PROVIDER_CALLS {
            let _ = self.provider_timeouts.get_or_create(&CallLabels {
                provider: name.to_owned(),
                call: call.to_owned(),
            });
        }
    }

    /// One pod admission handed to the state thread. `repeated`: the pod was
    /// already admitted with the same spec (its stored result is answered).
    pub(crate) fn admission(
        &self,
        result: &AdmitResult,
        policy: PolicyName,
        scope: Scope,
        elapsed: Duration,
        repeated: bool,
    ) {
        self.admission_requests.inc();
        self.admission_duration_ms
            .observe(elapsed.as_secs_f64() * 1000.0);
        let aligned_scope = match scope {
            Scope::Container => &ALIGN_NUMA[0],
            Scope::Pod => &ALIGN_NUMA[1],
        };
        let guaranteed = policy == PolicyName::SingleNumaNode;
        if !result.admitted {
            self.admission_errors.inc();
            let reason = result.reason.as_deref().unwrap_or("Other");
            self.rejection(reason);
            if guaranteed && reason == TOPOLOGY_AFFINITY_ERROR {
                self.aligned_failures.get_or_create(aligned_scope).0.inc();
            }
        } else if guaranteed && !repeated {
            let n = match scope {
                Scope::Container => result.containers.len() as u64,
                Scope::Pod => 1,
            };
            self.aligned.get_or_create(aligned_scope).0.inc_by(n);
        }
    }

    /// A request refused before any pod of it was admitted (a bad manifest,
    /// a uid admitted with another spec): `admission_rejections_total` only.
    pub(crate) fn request_refused(&self, reason: &str) {
        self.rejection(reason);
    }

    fn rejection(&self, reason: &str) {
        let reason = if REJECTION_REASONS.contains(&reason) {
            reason
        } else {
            "Other"
        };
        self.rejections
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    fn owns(&self, provider: &str) -> Ownership {
        self.owners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(provider)
            .copied()
            .unwrap_or_default()
    }

    /// One allocation of `provider` refused by the ledger.
    pub(crate) fn ledger_violation(&self, provider: &str) {
        self.ledger_violations
            .get_or_create(&ProviderLabel {
                provider: provider.to_owned(),
            })
            .inc();
    }

    /// One owned pod reclaimed (`owner`: `process` or `container`;
    /// `cause`: `owner_gone` or `never_attached`).
    pub(crate) fn reclaimed(&self, owner: &'static str, cause: &'static str) {
        self.reclaimed
            .get_or_create(&ReclaimLabels { owner, cause })
            .inc();
    }

    /// Whether topomgr is registered with the runtime's NRI now.
    pub fn nri_connected(&self, connected: bool) {
        self.nri_connected.set(i64::from(connected));
    }

    /// The conflicts standing now and the ids they hold that the machine
    /// lacks, by (provider, resource).
    pub(crate) fn conflicts(&self, counts: &BTreeMap<(String, String), (usize, usize)>) {
        self.conflicts.clear();
        self.missing_held.clear();
        for ((provider, resource), (n, ids)) in counts {
            let labels = ConflictLabels {
                provider: provider.clone(),
                resource: resource.clone(),
            };
            self.conflicts
                .get_or_create(&labels)
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
            if *ids > 0 {
                self.missing_held
                    .get_or_create(&labels)
                    .set(i64::try_from(*ids).unwrap_or(i64::MAX));
            }
        }
    }

    /// A reconcile with the machine and config as they are now was done.
    pub(crate) fn reloaded(&self) {
        self.reloads.inc();
    }

    /// A reload kept the running providers.
    pub(crate) fn reload_failed(&self) {
        self.reload_failures.inc();
    }

    /// An attached cgroup's cpuset or memory nodes were found changed.
    pub(crate) fn cpuset_drifted(&self) {
        self.cpuset_drift.inc();
    }

    /// An in-place resize: `done` or `refused`.
    pub(crate) fn resize(&self, result: &str) {
        self.resizes
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    /// A container followed through NRI was found with another cpuset
    /// than the runtime was told, and is sent it again.
    pub(crate) fn nri_cpuset_repaired(&self) {
        self.nri_cpuset_repairs.inc();
    }

    /// One durable state write.
    pub(crate) fn checkpoint(&self, seconds: f64) {
        self.checkpoint_duration.observe(seconds);
    }

    /// The current CPU picture: exclusive CPUs, shared pool size, admitted pods.
    pub(crate) fn cpus(&self, exclusive: &CpuSet, shared_pool: usize, pods: usize) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.exclusive_cpus.set(count(exclusive.len()));
        self.shared_pool_millicores
            .set(count(shared_pool).saturating_mul(1000));
        self.admitted_pods.set(count(pods));
        let numa = self.numa.read().unwrap_or_else(|p| p.into_inner());
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for cpu in exclusive.iter() {
            if let Some(Some(node)) = numa.cpu_nodes.get(cpu as usize) {
                *per_node.entry(node).or_default() += 1;
            }
        }
        for node in &numa.nodes {
            self.allocation_per_numa
                .get_or_create(&NumaLabel {
                    numa_node: node.clone(),
                })
                .set(count(per_node.get(node.as_str()).copied().unwrap_or(0)));
        }
    }

    /// The Prometheus text exposition (0.0.4) of every metric.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        prometheus_text(&out)
    }
}

/// The Prometheus text format (0.0.4) of `prometheus_client`'s OpenMetrics
/// text: a counter's HELP and TYPE name its samples (`foo_total`, or the
/// kubelet's `_count` names of [`KubeletCounter`]), `unknown` is
/// `untyped`, no `# UNIT` or `# EOF` line, and HELP without the period the
/// library appends to every text.
fn prometheus_text(openmetrics: &str) -> String {
    /// One family: its HELP text, TYPE and sample lines.
    struct Family<'a> {
        name: &'a str,
        help: &'a str,
        kind: &'a str,
        samples: Vec<&'a str>,
    }
    fn flush(f: Option<Family<'_>>, out: &mut String) {
        let Some(f) = f else { return };
        let (name, kind) = match f.kind {
            "counter" => {
                let sample = f
                    .samples
                    .first()
                    .and_then(|s| s.split(['{', ' ']).next())
                    .map_or_else(|| format!("{}_total", f.name), str::to_owned);
                (sample, "counter")
            }
            "unknown" => (f.name.to_owned(), "untyped"),
            other => (f.name.to_owned(), other),
        };
        let help = f
            .help
            .strip_suffix('.')
            .unwrap_or(f.help)
            .replace("\\\"", "\"");
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for s in f.samples {
            out.push_str(s);
            out.push('\n');
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    let mut family: Option<Family<'_>> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush(family.take(), &mut out);
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            family = Some(Family {
                name,
                help,
                kind: "untyped",
                samples: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let (Some(f), Some((_, kind))) = (family.as_mut(), rest.split_once(' ')) {
                f.kind = kind;
            }
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
        } else if let Some(f) = family.as_mut() {
            f.samples.push(line);
        }
    }
    flush(family, &mut out);
    out
}

/// The provider calls' reports (the daemon sets its metrics as every
/// provider's observer).
impl ProviderObserver for Metrics {
    /// Hints `provider` gave: the resources they name make it an owner
    /// (for a provider whose inventory does not list them).
    fn hints(&self, provider: &str, hints: &ProviderHints) {
        let Some(map) = hints else { return };
        let seen = Ownership::of(map.keys());
        if seen == Ownership::default() || self.owns(provider).union(seen) == self.owns(provider) {
            return;
        }
        let mut owners = self.owners.write().unwrap_or_else(|p| p.into_inner());
        let entry = owners.entry(provider.to_owned()).or_default();
        *entry = entry.union(seen);
    }

    /// One `allocate` call of `provider` and its outcome (the CPU and
    /// Memory Manager pinning counters, see the module documentation).
    fn allocation(
        &self,
        provider: &str,
        pod: &PodView,
        container: &ContainerView,
        outcome: Result<&Allocation, &ProviderError>,
    ) {
        let owns = self.owns(provider);
        if pod.qos != QosClass::Guaranteed {
            return;
        }
        if owns.cpu && whole_cpus(container) {
            match outcome {
                Err(_) => {
                    self.cpu_pinning_requests.inc();
                    self.cpu_pinning_errors.inc();
                }
                Ok(a) if a.exclusive && !a.cpus.is_empty() => {
                    self.cpu_pinning_requests.inc();
                }
                Ok(_) => {}
            }
        }
        if owns.memory {
            match outcome {
                Err(_) => {
                    self.memory_pinning_requests.inc();
                    self.memory_pinning_errors.inc();
                }
                Ok(a) if !a.mems.is_empty() => {
                    self.memory_pinning_requests.inc();
                }
                Ok(_) => {}
            }
        }
    }

    /// One provider call's duration.
    fn provider_call(&self, provider: &str, call: &str, seconds: f64) {
        self.provider_calls
            .get_or_create(&CallLabels {
                provider: provider.to_owned(),
                call: call.to_owned(),
            })
            .observe(seconds);
    }

    /// One provider call that missed its deadline.
    fn provider_timeout(&self, provider: &str, call: &str) {
        self.provider_timeouts
            .get_or_create(&CallLabels {
                provider: provider.to_owned(),
                call: call.to_owned(),
            })
            .inc();
    }
}

/// The kubelet's `guaranteedCPUs` > 0 for a container of a Guaranteed pod:
/// its CPU request is a whole, non-zero number of CPUs.
fn whole_cpus(container: &ContainerView) -> bool {
    container
        .requests
        .get("cpu")
        .is_some_and(|&m| m > 0 && m % 1000 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use topomgr_sdk::{Cpu, NumaMask, NumaNode, NumaNodeId, ResourceInventory, ResourceList};

    fn line<'a>(text: &'a str, name: &str) -> Option<&'a str> {
        text.lines()
            .find(|l| l.split_once(' ').is_some_and(|(n, _)| n == name))
            .and_then(|l| l.rsplit_once(' ').map(|(_, v)| v))
    }

    fn pod(qos: QosClass, cpu_millis: u64) -> (PodView, ContainerView) {
        let c = ContainerView::new("app").with_requests(ResourceList::from([
            ("cpu".to_owned(), cpu_millis),
            ("memory".to_owned(), 1 << 30),
        ]));
        let p = PodView::new("u1", "p", "default", qos).with_containers(vec![c.clone()]);
        (p, c)
    }

    fn result(admitted: bool, reason: Option<&str>, containers: usize) -> AdmitResult {
        let (p, _) = pod(QosClass::Guaranteed, 2000);
        AdmitResult {
            pod: p,
            admitted,
            reason: reason.map(str::to_owned),
            message: None,
            containers: (0..containers)
                .map(|i| topomgr_engine::admission::ContainerResult {
                    name: format!("c{i}"),
                    hint: topomgr_sdk::TopologyHint {
                        affinity: None,
                        preferred: true,
                    },
                    allocation: Allocation::default(),
                })
                .collect(),
        }
    }

    #[test]
    fn kubelet_names_are_there_at_zero() {
        let text = Metrics::new().render();
        for name in [
            "topology_manager_admission_requests_total",
            "topology_manager_admission_errors_total",
            "topology_manager_admission_duration_ms_count",
            "cpu_manager_pinning_requests_total",
            "cpu_manager_pinning_errors_total",
            "memory_manager_pinning_requests_total",
            "memory_manager_pinning_errors_total",
            "cpu_manager_shared_pool_size_millicores",
            "cpu_manager_exclusive_cpu_allocation_count",
            "container_aligned_compute_resources_count{scope=\"container\",boundary=\"numa_node\"}",
            "container_aligned_compute_resources_count{scope=\"pod\",boundary=\"numa_node\"}",
            "container_aligned_compute_resources_failure_count{scope=\"container\",boundary=\"numa_node\"}",
            "container_aligned_compute_resources_failure_count{scope=\"pod\",boundary=\"numa_node\"}",
            "admission_rejections_total{reason=\"BadManifest\"}",
            "topomgr_admitted_pods",
        ] {
            assert_eq!(line(&text, name), Some("0"), "{name} in\n{text}");
        }
        assert!(text.contains("topology_manager_admission_duration_ms_bucket{le=\"0.05\"} 0\n"));
        assert!(text.contains("topology_manager_admission_duration_ms_bucket{le=\"819.2\"} 0\n"));
    }

    /// HELP and TYPE as the kubelet's Prometheus text: the alignment
    /// counters are counters with their `_count` names, a counter's HELP and
    /// TYPE name its `_total` sample, the help texts are the registered ones
    /// (no period added), and there is no OpenMetrics `# EOF`.
    #[test]
    fn help_and_type_lines_are_the_kubelets() {
        let text = Metrics::new().render();
        for want in [
            // (a family's series come in no particular order)
            "# HELP container_aligned_compute_resources_count Cumulative number of aligned compute resources allocated to containers by alignment type.\n# TYPE container_aligned_compute_resources_count counter\ncontainer_aligned_compute_resources_count{scope=\"",
            "\ncontainer_aligned_compute_resources_count{scope=\"container\",boundary=\"numa_node\"} 0\n",
            "# HELP container_aligned_compute_resources_failure_count Cumulative number of failures to allocate aligned compute resources to containers by alignment type.\n# TYPE container_aligned_compute_resources_failure_count counter\n",
            "# HELP topology_manager_admission_requests_total The number of admission requests where resources have to be aligned.\n# TYPE topology_manager_admission_requests_total counter\ntopology_manager_admission_requests_total 0\n",
            "# HELP cpu_manager_exclusive_cpu_allocation_count The total number of CPUs exclusively allocated to containers running on this node\n# TYPE cpu_manager_exclusive_cpu_allocation_count gauge\n",
            "# HELP topology_manager_admission_duration_ms Duration in milliseconds to serve a pod admission request.\n# TYPE topology_manager_admission_duration_ms histogram\n",
            "# HELP topomgr_reclaimed_pods_total Owned pods released because their owner is gone, by owner kind and cause\n# TYPE topomgr_reclaimed_pods_total counter\ntopomgr_reclaimed_pods_total{",
        ] {
            assert!(text.contains(want), "{want:?} missing in\n{text}");
        }
        let help: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
        assert!(help.len() >= 15, "{text}");
        for l in &help {
            assert!(!l.ends_with(".."), "{l}");
        }
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains(" unknown\n"), "{text}");
        // Every TYPE line names the samples that follow it.
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                let (name, _) = rest.split_once(' ').unwrap();
                if let Some(sample) = lines.get(i + 1).filter(|s| !s.starts_with('#')) {
                    assert!(sample.starts_with(name), "{sample} after {l}");
                }
            }
        }
    }

    #[test]
    fn admissions_move_the_topology_manager_metrics() {
        let m = Metrics::new();
        let ms = Duration::from_micros(300);
        m.admission(
            &result(true, None, 3),
            PolicyName::SingleNumaNode,
            Scope::Container,
            ms,
            false,
        );
        m.admission(
            &result(true, None, 3),
            PolicyName::SingleNumaNode,
            Scope::Container,
            ms,
            true,
        );
        m.admission(
            &result(true, None, 2),
            PolicyName::SingleNumaNode,
            Scope::Pod,
            ms,
            false,
        );
        m.admission(
            &result(true, None, 2),
            PolicyName::Restricted,
            Scope::Container,
            ms,
            false,
        );
        m.admission(
            &result(false, Some(TOPOLOGY_AFFINITY_ERROR), 0),
            PolicyName::SingleNumaNode,
            Scope::Container,
            ms,
            false,
        );
        m.admission(
            &result(false, Some("OutOfWidgets"), 0),
            PolicyName::SingleNumaNode,
            Scope::Pod,
            ms,
            false,
        );
        m.request_refused(BAD_MANIFEST);
        let text = m.render();
        for (name, want) in [
            ("topology_manager_admission_requests_total", "6"),
            ("topology_manager_admission_errors_total", "2"),
            ("topology_manager_admission_duration_ms_count", "6"),
            ("topology_manager_admission_duration_ms_bucket{le=\"0.2\"}", "0"),
            ("topology_manager_admission_duration_ms_bucket{le=\"0.4\"}", "6"),
            ("container_aligned_compute_resources_count{scope=\"container\",boundary=\"numa_node\"}", "3"),
            ("container_aligned_compute_resources_count{scope=\"pod\",boundary=\"numa_node\"}", "1"),
            ("container_aligned_compute_resources_failure_count{scope=\"container\",boundary=\"numa_node\"}", "1"),
            ("container_aligned_compute_resources_failure_count{scope=\"pod\",boundary=\"numa_node\"}", "0"),
            ("admission_rejections_total{reason=\"TopologyAffinityError\"}", "1"),
            ("admission_rejections_total{reason=\"Other\"}", "1"),
            ("admission_rejections_total{reason=\"BadManifest\"}", "1"),
        ] {
            assert_eq!(line(&text, name), Some(want), "{name} in\n{text}");
        }
    }

    #[test]
    fn pinning_is_counted_for_the_owners_only() {
        let m = Metrics::new();
        let own = |r: &str| Inventory::new().with_resource(r, ResourceInventory::default());
        m.provider("cpu", &own("cpu"));
        m.provider("memory", &own("hugepages-2Mi"));
        m.provider("widgets", &own("example.com/widget"));
        let exclusive = Allocation::default().with_cpus(CpuSet::from_iter([2, 3]), true);
        let shared = Allocation::default().with_cpus(CpuSet::from_iter([0, 1]), false);
        let mems = Allocation::default().with_mems(NumaMask::from_iter([NumaNodeId::from(0)]));
        let (g, gc) = pod(QosClass::Guaranteed, 2000);
        let (frac, fc) = pod(QosClass::Guaranteed, 1500);
        let (b, bc) = pod(QosClass::Burstable, 2000);
        let err = ProviderError::new("OutOfCpus", "no");
        m.allocation("cpu", &g, &gc, Ok(&exclusive));
        m.allocation("cpu", &g, &gc, Err(&err));
        m.allocation("cpu", &frac, &fc, Ok(&shared)); // not a whole CPU
        m.allocation("cpu", &g, &gc, Ok(&shared)); // an owner that pins nothing
        m.allocation("cpu", &b, &bc, Ok(&shared)); // not Guaranteed
        m.allocation("widgets", &g, &gc, Err(&err)); // owns neither
        m.allocation("memory", &g, &gc, Ok(&mems));
        m.allocation("memory", &frac, &fc, Err(&err));
        m.allocation("memory", &g, &gc, Ok(&Allocation::default()));
        let text = m.render();
        for (name, want) in [
            ("cpu_manager_pinning_requests_total", "2"),
            ("cpu_manager_pinning_errors_total", "1"),
            ("memory_manager_pinning_requests_total", "2"),
            ("memory_manager_pinning_errors_total", "1"),
            ("topomgr_ledger_violations_total{provider=\"widgets\"}", "0"),
            (
                "topomgr_provider_timeouts_total{provider=\"cpu\",call=\"allocate\"}",
                "0",
            ),
        ] {
            assert_eq!(line(&text, name), Some(want), "{name} in\n{text}");
        }
    }

    #[test]
    fn hints_make_a_provider_without_inventory_an_owner() {
        let m = Metrics::new();
        m.provider("cpu", &Inventory::default());
        let (g, gc) = pod(QosClass::Guaranteed, 2000);
        let exclusive = Allocation::default().with_cpus(CpuSet::from_iter([2, 3]), true);
        // Not known as an owner yet: not counted.
        m.allocation("cpu", &g, &gc, Ok(&exclusive));
        m.hints("cpu", &None);
        m.hints(
            "cpu",
            &Some(BTreeMap::from([("example.com/widget".to_owned(), None)])),
        );
        m.allocation("cpu", &g, &gc, Ok(&exclusive));
        assert_eq!(
            line(&m.render(), "cpu_manager_pinning_requests_total"),
            Some("0")
        );
        m.hints("cpu", &Some(BTreeMap::from([("cpu".to_owned(), None)])));
        m.allocation("cpu", &g, &gc, Ok(&exclusive));
        m.hints(
            "memory",
            &Some(BTreeMap::from([("hugepages-1Gi".to_owned(), None)])),
        );
        m.allocation(
            "memory",
            &g,
            &gc,
            Err(&ProviderError::new("OutOfMemory", "no")),
        );
        let text = m.render();
        for (name, want) in [
            ("cpu_manager_pinning_requests_total", "1"),
            ("memory_manager_pinning_requests_total", "1"),
            ("memory_manager_pinning_errors_total", "1"),
        ] {
            assert_eq!(line(&text, name), Some(want), "{name} in\n{text}");
        }
    }

    #[test]
    fn cpu_gauges_per_numa_node() {
        let node = |id: u8| NumaNode::new(NumaNodeId::from(id), CpuSet::new());
        let cpu = |id: u32, n: u8| Cpu::new(id, Some(NumaNodeId::from(n)));
        let machine = Machine::new(
            vec![node(0), node(1)],
            vec![
                cpu(0, 0),
                cpu(1, 0),
                cpu(2, 1),
                cpu(3, 1),
                Cpu::new(4, None),
            ],
            vec![],
        );
        let m = Metrics::for_machine(&machine);
        let text = m.render();
        assert_eq!(
            line(&text, "cpu_manager_allocation_per_numa{numa_node=\"1\"}"),
            Some("0")
        );
        m.cpus(&CpuSet::from_iter([1, 2, 3]), 2, 2);
        let text = m.render();
        for (name, want) in [
            ("cpu_manager_allocation_per_numa{numa_node=\"0\"}", "1"),
            ("cpu_manager_allocation_per_numa{numa_node=\"1\"}", "2"),
            ("cpu_manager_exclusive_cpu_allocation_count", "3"),
            ("cpu_manager_shared_pool_size_millicores", "2000"),
            ("topomgr_admitted_pods", "2"),
        ] {
            assert_eq!(line(&text, name), Some(want), "{name} in\n{text}");
        }
        // A reload onto a machine where node 1 is gone and node 2 (CPUs
        // 2-3) and a CPU-less node 3 appeared.
        let machine = Machine::new(
            vec![node(0), node(2), node(3)],
            vec![cpu(0, 0), cpu(1, 0), cpu(2, 2), cpu(3, 2)],
            vec![],
        );
        m.machine(&machine);
        m.cpus(&CpuSet::from_iter([1, 2, 3]), 1, 2);
        let text = m.render();
        for (name, want) in [
            (
                "cpu_manager_allocation_per_numa{numa_node=\"0\"}",
                Some("1"),
            ),
            ("cpu_manager_allocation_per_numa{numa_node=\"1\"}", None),
            (
                "cpu_manager_allocation_per_numa{numa_node=\"2\"}",
                Some("2"),
            ),
            (
                "cpu_manager_allocation_per_numa{numa_node=\"3\"}",
                Some("0"),
            ),
        ] {
            assert_eq!(line(&text, name), want, "{name} in\n{text}");
        }
    }
}
