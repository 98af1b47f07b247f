//! Prometheus metrics of the daemon (`GET /metrics`, text format).
//!
//! Names follow the kubelet's Topology Manager and CPU Manager metrics, with
//! the `topomgr_` prefix and Prometheus base units (seconds, not the
//! kubelet's milliseconds):
//!
//! | metric | kubelet counterpart |
//! |---|---|
//! | `topomgr_topology_manager_admission_requests_total` | `topology_manager_admission_requests_total` |
//! | `topomgr_topology_manager_admission_errors_total{reason}` | `topology_manager_admission_errors_total` (here split by reason) |
//! | `topomgr_topology_manager_admission_duration_seconds` (histogram) | `topology_manager_admission_duration_ms` |
//! | `topomgr_provider_call_duration_seconds{provider,call}` (histogram) | per hint provider: `call` is `topology_hints`, `pod_topology_hints`, `allocate`, `release`, `checkpoint`, `restore` |
//! | `topomgr_provider_timeouts_total{provider,call}` | — |
//! | `topomgr_ledger_violations_total{provider}` | — (allocations the ledger refused) |
//! | `topomgr_cpu_manager_exclusive_cpu_allocation_count` | `cpu_manager_exclusive_cpu_allocation_count` |
//! | `topomgr_cpu_manager_shared_pool_size_millicores` | `cpu_manager_shared_pool_size_millicores` |
//! | `topomgr_checkpoint_duration_seconds` (histogram) | — |
//! | `topomgr_admitted_pods` | — |

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Label set `{reason}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
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

fn latency_histogram() -> Histogram {
    // 10 us .. ~5 s
    Histogram::new(exponential_buckets(0.00001, 2.5, 15))
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric of the daemon.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    admission_requests: Counter,
    admission_errors: Family<ReasonLabel, Counter>,
    admission_duration: Histogram,
    provider_calls: HistogramFamily<CallLabels>,
    provider_timeouts: Family<CallLabels, Counter>,
    ledger_violations: Family<ProviderLabel, Counter>,
    exclusive_cpus: Gauge,
    shared_pool_millicores: Gauge,
    checkpoint_duration: Histogram,
    admitted_pods: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry holding every metric at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("topomgr");
        let admission_requests = Counter::default();
        let admission_errors = Family::<ReasonLabel, Counter>::default();
        let admission_duration = latency_histogram();
        let provider_calls: HistogramFamily<CallLabels> =
            Family::new_with_constructor(latency_histogram);
        let provider_timeouts = Family::<CallLabels, Counter>::default();
        let ledger_violations = Family::<ProviderLabel, Counter>::default();
        let exclusive_cpus = Gauge::default();
        let shared_pool_millicores = Gauge::default();
        let checkpoint_duration = latency_histogram();
        let admitted_pods = Gauge::default();
        registry.register(
            "topology_manager_admission_requests",
            "Pod admissions requested",
            admission_requests.clone(),
        );
        registry.register(
            "topology_manager_admission_errors",
            "Pod admissions that failed, by reason",
            admission_errors.clone(),
        );
        registry.register(
            "topology_manager_admission_duration_seconds",
            "Time to admit one pod (hints, merge, allocation)",
            admission_duration.clone(),
        );
        registry.register(
            "provider_call_duration_seconds",
            "Duration of calls into hint providers, by provider and call",
            provider_calls.clone(),
        );
        registry.register(
            "provider_timeouts",
            "Provider calls that missed their deadline",
            provider_timeouts.clone(),
        );
        registry.register(
            "ledger_violations",
            "Allocations refused by the ledger (a CPU or device held elsewhere, or not on this machine), by provider",
            ledger_violations.clone(),
        );
        registry.register(
            "cpu_manager_exclusive_cpu_allocation_count",
            "CPUs held exclusively by containers",
            exclusive_cpus.clone(),
        );
        registry.register(
            "cpu_manager_shared_pool_size_millicores",
            "Size of the shared CPU pool in millicores",
            shared_pool_millicores.clone(),
        );
        registry.register(
            "checkpoint_duration_seconds",
            "Time to write the state file (serialize, fsync, rename)",
            checkpoint_duration.clone(),
        );
        registry.register(
            "admitted_pods",
            "Pods currently admitted",
            admitted_pods.clone(),
        );
        Metrics {
            registry,
            admission_requests,
            admission_errors,
            admission_duration,
            provider_calls,
            provider_timeouts,
            ledger_violations,
            exclusive_cpus,
            shared_pool_millicores,
            checkpoint_duration,
            admitted_pods,
        }
    }

    /// One pod admission: its duration and, when rejected, its reason.
    pub fn admission(&self, seconds: f64, error_reason: Option<&str>) {
        self.admission_requests.inc();
        self.admission_duration.observe(seconds);
        if let Some(reason) = error_reason {
            self.admission_errors
                .get_or_create(&ReasonLabel {
                    reason: reason.to_owned(),
                })
                .inc();
        }
    }

    /// One provider call's duration.
    pub fn provider_call(&self, provider: &str, call: &str, seconds: f64) {
        self.provider_calls
            .get_or_create(&CallLabels {
                provider: provider.to_owned(),
                call: call.to_owned(),
            })
            .observe(seconds);
    }

    /// One provider call that missed its deadline.
    pub fn provider_timeout(&self, provider: &str, call: &str) {
        self.provider_timeouts
            .get_or_create(&CallLabels {
                provider: provider.to_owned(),
                call: call.to_owned(),
            })
            .inc();
    }

    /// One allocation of `provider` refused by the ledger.
    pub fn ledger_violation(&self, provider: &str) {
        self.ledger_violations
            .get_or_create(&ProviderLabel {
                provider: provider.to_owned(),
            })
            .inc();
    }

    /// One state-file write.
    pub fn checkpoint(&self, seconds: f64) {
        self.checkpoint_duration.observe(seconds);
    }

    /// The current CPU picture: exclusive CPUs, shared pool size, admitted pods.
    pub fn cpus(&self, exclusive: usize, shared_pool: usize, pods: usize) {
        self.exclusive_cpus
            .set(i64::try_from(exclusive).unwrap_or(i64::MAX));
        self.shared_pool_millicores
            .set(i64::try_from(shared_pool.saturating_mul(1000)).unwrap_or(i64::MAX));
        self.admitted_pods
            .set(i64::try_from(pods).unwrap_or(i64::MAX));
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_kubelet_style_names() {
        let m = Metrics::new();
        m.admission(0.002, None);
        m.admission(0.001, Some("TopologyAffinityError"));
        m.provider_call("cpu", "allocate", 0.00002);
        m.cpus(4, 12, 3);
        let text = m.render();
        for line in [
            "topomgr_topology_manager_admission_requests_total 2",
            "topomgr_topology_manager_admission_errors_total{reason=\"TopologyAffinityError\"} 1",
            "topomgr_topology_manager_admission_duration_seconds_count 2",
            "topomgr_provider_call_duration_seconds_count{provider=\"cpu\",call=\"allocate\"} 1",
            "topomgr_cpu_manager_exclusive_cpu_allocation_count 4",
            "topomgr_cpu_manager_shared_pool_size_millicores 12000",
            "topomgr_admitted_pods 3",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
