//! A container's Linux resources as the runtime spec carries them
//! (`linux.resources` of an OCI `config.json`; NRI's `LinuxResources` has
//! the same fields), and their conversion back to requests and limits with
//! the kubelet's own rules.
//!
//! The kubelet writes a container's requests and limits into these fields
//! (`pkg/kubelet/kuberuntime/kuberuntime_container_linux.go`,
//! `calculateLinuxResources` and `GetHugepageLimitsFromResources`) and reads
//! them back with `pkg/kubelet/cm/helpers_linux.go` (`MilliCPUToShares`,
//! `SharesToMilliCPU`, `MilliCPUToQuota`, `QuotaToMilliCPU`):
//!
//! - CPU request → `cpu.shares` = request × 1024 / 1000, at least 2
//!   ([`MIN_SHARES`]; a zero request gets 2 as well), at most 262144; when
//!   the container has a limit and no request, the limit's shares. Back:
//!   ⌈shares × 1000 / 1024⌉ millicores for shares of at least 2
//!   ([`shares_to_millicpu`]), which gives every request of 2m or more back
//!   exactly (the kubelet's `TestSharesToMilliCPU`), and 2m for a request
//!   of 0 or 1m.
//! - CPU limit → `cpu.quota` = limit × period / 1000, at least 1000 µs,
//!   with `cpu.period` 100000 µs; no limit: no quota (0, or −1 for
//!   "unlimited"). Back: quota × 1000 / period millicores, integer division
//!   ([`quota_to_millicpu`]); no quota (≤ 0): no limit.
//! - memory limit → `memory.limit` bytes; no limit: none (or −1).
//! - `hugepages-<size>` limits → one `hugepageLimits` entry per page size
//!   the host supports, `{"pageSize": "2MB", "limit": bytes}` (sizes in
//!   libcontainer's units `B`, `KB`, `MB`, `GB`, `TB`, `PB`, each 1024 times
//!   the one before), 0 for the sizes the container does not ask for.
//!   Back: `hugepages-<size>` in Kubernetes' binary spelling (`2Mi`,
//!   `1Gi`), zero limits dropped ([`hugepage_resource`]).
//!
//! Podman and other OCI users may also set `memory.reservation` (the soft
//! limit), which topomgr reads as the memory request.

use serde::Deserialize;
use topomgr_sdk::quantity::BinarySi;

/// The fewest `cpu.shares` the kubelet writes (and cgroups accept).
pub(crate) const MIN_SHARES: u64 = 2;
/// The most `cpu.shares` the kubelet writes.
#[cfg(test)]
pub(crate) const MAX_SHARES: u64 = 262_144;
/// `cpu.shares` worth one CPU.
pub(crate) const SHARES_PER_CPU: u64 = 1024;
/// The CFS period the kubelet writes (µs), and the kernel's default.
pub(crate) const QUOTA_PERIOD: u64 = 100_000;
/// The smallest CFS quota the kubelet writes (µs).
pub(crate) const MIN_QUOTA: i64 = 1000;

/// `linux.resources`: the fields topomgr reads (others are ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinuxResources {
    /// CPU.
    #[serde(default)]
    pub cpu: Option<LinuxCpu>,
    /// Memory.
    #[serde(default)]
    pub memory: Option<LinuxMemory>,
    /// Hugepage limits, one per page size.
    #[serde(default)]
    pub hugepage_limits: Option<Vec<HugepageLimit>>,
}

/// `linux.resources.cpu`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct LinuxCpu {
    /// `cpu.shares`.
    #[serde(default)]
    pub shares: Option<u64>,
    /// `cpu.cfs_quota_us` (−1: unlimited).
    #[serde(default)]
    pub quota: Option<i64>,
    /// `cpu.cfs_period_us`.
    #[serde(default)]
    pub period: Option<u64>,
    /// `cpuset.cpus` as the spec sets it (a user's pinning).
    #[serde(default)]
    pub cpus: Option<String>,
    /// `cpuset.mems` as the spec sets it.
    #[serde(default)]
    pub mems: Option<String>,
}

/// `linux.resources.memory`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct LinuxMemory {
    /// The limit in bytes (−1 or 0: none).
    #[serde(default)]
    pub limit: Option<i64>,
    /// The soft limit in bytes (Podman's `--memory-reservation`).
    #[serde(default)]
    pub reservation: Option<i64>,
}

/// One entry of `linux.resources.hugepageLimits`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HugepageLimit {
    /// The page size in libcontainer's spelling (`2MB`, `1GB`).
    pub page_size: String,
    /// The limit in bytes.
    pub limit: u64,
}

/// Millicores of a CPU request from `cpu.shares`, as the kubelet reads
/// them back (`SharesToMilliCPU`): ⌈shares × 1000 / 1024⌉ for shares of at
/// least [`MIN_SHARES`], 0 below.
pub(crate) fn shares_to_millicpu(shares: u64) -> u64 {
    if shares < MIN_SHARES {
        return 0;
    }
    let m = u128::from(shares) * 1000;
    let per = u128::from(SHARES_PER_CPU);
    u64::try_from(m.div_ceil(per)).unwrap_or(u64::MAX)
}

/// `cpu.shares` of a CPU request in millicores, as the kubelet writes them
/// (`MilliCPUToShares`); the tests' oracle of [`shares_to_millicpu`].
#[cfg(test)]
pub(crate) fn millicpu_to_shares(millicpu: u64) -> u64 {
    if millicpu == 0 {
        return MIN_SHARES;
    }
    let shares = u128::from(millicpu) * u128::from(SHARES_PER_CPU) / 1000;
    u64::try_from(shares)
        .unwrap_or(u64::MAX)
        .clamp(MIN_SHARES, MAX_SHARES)
}

/// Millicores of a CPU limit from `cpu.cfs_quota_us` and
/// `cpu.cfs_period_us`, as the kubelet reads them back (`QuotaToMilliCPU`):
/// quota × 1000 / period, integer division. No quota (absent, 0, or −1
/// for unlimited): no limit. No period: the kernel's default,
/// [`QUOTA_PERIOD`].
pub(crate) fn quota_to_millicpu(quota: Option<i64>, period: Option<u64>) -> Option<u64> {
    let quota = u64::try_from(quota?).ok().filter(|q| *q > 0)?;
    let period = period.filter(|p| *p > 0).unwrap_or(QUOTA_PERIOD);
    let m = u128::from(quota) * 1000 / u128::from(period);
    Some(u64::try_from(m).unwrap_or(u64::MAX))
}

/// `cpu.cfs_quota_us` of a CPU limit in millicores with period `period`,
/// as the kubelet writes it (`MilliCPUToQuota`): 0 (no quota) for no
/// limit, at least [`MIN_QUOTA`]; the tests' oracle of
/// [`quota_to_millicpu`].
#[cfg(test)]
pub(crate) fn millicpu_to_quota(millicpu: u64, period: u64) -> i64 {
    if millicpu == 0 {
        return 0;
    }
    let quota = u128::from(millicpu) * u128::from(period) / 1000;
    i64::try_from(quota).unwrap_or(i64::MAX).max(MIN_QUOTA)
}

/// A page size in libcontainer's spelling (`64KB`, `2MB`, `1GB`) in
/// bytes; `None` when it is not one.
pub(crate) fn page_size_bytes(page_size: &str) -> Option<u64> {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let split = page_size.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = page_size.split_at(split);
    if digits.is_empty() {
        return None;
    }
    let exponent = u32::try_from(UNITS.iter().position(|u| *u == unit)?).ok()?;
    digits
        .parse::<u64>()
        .ok()?
        .checked_mul(1024u64.checked_pow(exponent)?)
}

/// The Kubernetes resource of a hugepage size (`2MB` →
/// `hugepages-2Mi`); `None` when the size does not parse.
pub(crate) fn hugepage_resource(page_size: &str) -> Option<String> {
    let bytes = page_size_bytes(page_size).filter(|b| *b > 0)?;
    Some(format!("hugepages-{}", BinarySi(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `TestSharesToMilliCPU` of `pkg/kubelet/kuberuntime/helpers_linux_test.go`:
    /// its table of shares, and every request from 0 to 2000m read back
    /// exactly (2m for 0 and 1m).
    #[test]
    fn shares_follow_the_kubelets_table_and_read_back_exactly() {
        let known = [
            (0, 2),
            (1, 2),
            (2, 2),
            (3, 3),
            (4, 4),
            (32, 32),
            (64, 65),
            (100, 102),
            (250, 256),
            (500, 512),
            (1000, 1024),
            (1500, 1536),
            (2000, 2048),
        ];
        for (m, shares) in known {
            assert_eq!(millicpu_to_shares(m), shares, "{m}m");
        }
        for m in 0..=2000 {
            assert_eq!(shares_to_millicpu(millicpu_to_shares(m)), m.max(2), "{m}m");
        }
        assert_eq!(shares_to_millicpu(0), 0);
        assert_eq!(shares_to_millicpu(1), 0);
        assert_eq!(millicpu_to_shares(1_000_000), MAX_SHARES);
        assert_eq!(shares_to_millicpu(MAX_SHARES), 256_000);
        assert_eq!(shares_to_millicpu(u64::MAX), 18_014_398_509_481_984_000);
    }

    /// `TestQuotaToMilliCPU` of the same file, the kubelet's minimum quota,
    /// and no quota.
    #[test]
    fn quota_and_period_give_the_limit() {
        for (quota, period, m) in [
            (5000, 100_000, 50),
            (75000, 100_000, 750),
            (100_000, 100_000, 1000),
            (150_000, 100_000, 1500),
            // A 100m container under containerd 1.6 (quota 10000).
            (10_000, 100_000, 100),
            // A custom period (the CPUCFSQuotaPeriod feature).
            (25_000, 50_000, 500),
        ] {
            assert_eq!(quota_to_millicpu(Some(quota), Some(period)), Some(m));
            assert_eq!(millicpu_to_quota(m, period), quota);
        }
        assert_eq!(quota_to_millicpu(Some(200_000), None), Some(2000));
        assert_eq!(quota_to_millicpu(Some(-1), Some(100_000)), None);
        assert_eq!(quota_to_millicpu(Some(0), Some(100_000)), None);
        assert_eq!(quota_to_millicpu(None, Some(100_000)), None);
        // A 1m limit is written as the minimum quota and reads back as 10m.
        assert_eq!(millicpu_to_quota(1, QUOTA_PERIOD), MIN_QUOTA);
        assert_eq!(
            quota_to_millicpu(Some(MIN_QUOTA), Some(QUOTA_PERIOD)),
            Some(10)
        );
        assert_eq!(millicpu_to_quota(0, QUOTA_PERIOD), 0);
    }

    #[test]
    fn hugepage_sizes_are_named_as_kubernetes_names_them() {
        assert_eq!(hugepage_resource("2MB").as_deref(), Some("hugepages-2Mi"));
        assert_eq!(hugepage_resource("1GB").as_deref(), Some("hugepages-1Gi"));
        assert_eq!(hugepage_resource("64KB").as_deref(), Some("hugepages-64Ki"));
        assert_eq!(hugepage_resource("32MB").as_deref(), Some("hugepages-32Mi"));
        assert_eq!(page_size_bytes("16GB"), Some(16 << 30));
        for bad in ["", "MB", "2", "2mb", "2 MB", "2MiB", "0MB", "99999999999PB"] {
            assert_eq!(hugepage_resource(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_the_fields_of_a_runtime_spec_and_ignores_the_rest() {
        let r: LinuxResources = serde_json::from_str(
            r#"{"devices":[{"allow":false,"access":"rwm"}],"memory":{"limit":268435456,"swap":536870912},
                "cpu":{"shares":1024,"quota":100000,"period":100000,"cpus":"0-1"},"pids":{"limit":2048},
                "hugepageLimits":[{"pageSize":"2MB","limit":0},{"pageSize":"1GB","limit":1073741824}]}"#,
        )
        .unwrap();
        let cpu = r.cpu.unwrap();
        assert_eq!(
            (cpu.shares, cpu.quota, cpu.period, cpu.cpus.as_deref()),
            (Some(1024), Some(100_000), Some(100_000), Some("0-1"))
        );
        assert_eq!(r.memory.unwrap().limit, Some(268_435_456));
        assert_eq!(r.hugepage_limits.unwrap().len(), 2);
        let empty: LinuxResources =
            serde_json::from_str(r#"{"cpu":null,"hugepageLimits":null}"#).unwrap();
        assert_eq!(empty, LinuxResources::default());
    }
}
