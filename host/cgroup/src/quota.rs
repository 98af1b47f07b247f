//! The CFS quota of a cgroup: lifted for containers that hold exclusive
//! CPUs, as the kubelet does with its static CPU manager (feature gate
//! `DisableCPUQuotaWithExclusiveCPUs`, on by default since 1.33,
//! kubernetes/kubernetes #127525): a container pinned to CPUs of its own is
//! not throttled, and neither is its kubelet pod cgroup.
//!
//! The kubelet asks the runtime for a quota of `-1` and keeps the period;
//! runc writes that as `cpu.cfs_quota_us = -1` on cgroup v1 and as
//! `cpu.max = "max <period>"` on v2. Here the same values are written:
//! - v2: `cpu.max` in the cgroup's own directory, when the `cpu`
//!   controller is enabled for it (the file exists); its period kept;
//! - v1: `cpu.cfs_quota_us` in the `cpu` controller's hierarchy, found
//!   beside the cpuset one (`<cgroup_root>/cpu`, usually a link to
//!   `cpu,cpuacct`) at the same path, as runtimes place a container in
//!   every v1 controller at one path.
//!
//! A cgroup with no `cpu` controller (v2: not enabled for it; v1: no cpu
//! hierarchy beside the cpuset one, or no cgroup at that path in it) has no
//! quota of its own to lift ([`QuotaLift::NoCpuController`]).

use std::path::{Path, PathBuf};

use super::{confine, CgroupError, CgroupManager, CgroupPath, CgroupVersion};

/// What [`CgroupManager::lift_cpu_quota`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaLift {
    /// The quota is unlimited now: `value` was written to `file`.
    Lifted {
        /// The control file (`cpu.max`, `cpu.cfs_quota_us`).
        file: PathBuf,
        /// What was written.
        value: String,
    },
    /// The cgroup has no `cpu` controller of its own: nothing limits it
    /// there.
    NoCpuController,
}

/// A cgroup's CFS bandwidth as read back ([`CgroupManager::cpu_quota`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuQuota {
    /// Microseconds per period; `None`: unlimited (`max`, `-1`).
    pub quota_us: Option<u64>,
    /// The period in microseconds.
    pub period_us: u64,
}

impl CgroupManager {
    /// The `cpu` controller's directory of the cgroup `path`: v2 its own
    /// directory when `cpu.max` is there, v1 the same path in the cpu
    /// hierarchy beside the cpuset one. `None` when it has none.
    fn cpu_dir(&self, path: &CgroupPath) -> Result<Option<(PathBuf, CgroupVersion)>, CgroupError> {
        match self.version() {
            CgroupVersion::V2 => {
                let dir = confine(&self.root, &self.root.join(path.as_path()), path)?;
                Ok(dir
                    .join("cpu.max")
                    .is_file()
                    .then_some((dir, CgroupVersion::V2)))
            }
            CgroupVersion::V1 => {
                let Some(cpu_root) = &self.cpu_root else {
                    return Ok(None);
                };
                let dir = cpu_root.join(path.as_path());
                if !dir.join("cpu.cfs_quota_us").is_file() {
                    return Ok(None);
                }
                Ok(Some((confine(cpu_root, &dir, path)?, CgroupVersion::V1)))
            }
        }
    }

    /// Make the CFS quota of cgroup `path` unlimited, keeping its period
    /// (see the module docs).
    pub fn lift_cpu_quota(&self, path: &CgroupPath) -> Result<QuotaLift, CgroupError> {
        let Some((dir, version)) = self.cpu_dir(path)? else {
            return Ok(QuotaLift::NoCpuController);
        };
        let (file, value) = match version {
            CgroupVersion::V2 => {
                let file = dir.join("cpu.max");
                let now = self.fs.read(&file)?;
                let value = match now.split_whitespace().nth(1) {
                    Some(period) => format!("max {period}"),
                    None => "max".to_owned(),
                };
                (file, value)
            }
            CgroupVersion::V1 => (dir.join("cpu.cfs_quota_us"), "-1".to_owned()),
        };
        self.fs.write(&file, &value)?;
        Ok(QuotaLift::Lifted { file, value })
    }

    /// The CFS quota and period of cgroup `path`; `None` when it has no
    /// `cpu` controller of its own.
    pub fn cpu_quota(&self, path: &CgroupPath) -> Result<Option<CpuQuota>, CgroupError> {
        let Some((dir, version)) = self.cpu_dir(path)? else {
            return Ok(None);
        };
        let parse = |file: &Path, text: &str, what: &str| -> Result<Option<u64>, CgroupError> {
            match text {
                "max" | "-1" => Ok(None),
                t => t.parse::<u64>().map(Some).map_err(|e| CgroupError::Parse {
                    path: file.to_path_buf(),
                    content: text.to_owned(),
                    reason: format!("{what} {t:?} is not a number of microseconds: {e}"),
                }),
            }
        };
        let quota = match version {
            CgroupVersion::V2 => {
                let file = dir.join("cpu.max");
                let text = self.fs.read(&file)?;
                let mut f = text.split_whitespace();
                let (q, p) = (f.next().unwrap_or(""), f.next().unwrap_or("100000"));
                CpuQuota {
                    quota_us: parse(&file, q, "the quota")?,
                    period_us: parse(&file, p, "the period")?.unwrap_or(100_000),
                }
            }
            CgroupVersion::V1 => {
                let qf = dir.join("cpu.cfs_quota_us");
                let q = self.fs.read(&qf)?;
                let pf = dir.join("cpu.cfs_period_us");
                let p = self.fs.read(&pf)?;
                CpuQuota {
                    quota_us: parse(&qf, &q, "the quota")?,
                    period_us: parse(&pf, &p, "the period")?.unwrap_or(100_000),
                }
            }
        };
        Ok(Some(quota))
    }
}

/// The kubelet's pod cgroup that `container` (a container's cgroup) lies
/// in, if it is one: its parent named `pod<uid>` (cgroupfs driver) or
/// `…-pod<uid>.slice` (systemd driver) under a `kubepods` level. The
/// kubelet lifts the pod-level quota too when a container of the pod holds
/// exclusive CPUs; other parents (Podman's pods, a slice) are left alone.
pub fn kubelet_pod_cgroup(container: &CgroupPath) -> Option<CgroupPath> {
    let parent = container.as_path().parent()?;
    let name = parent.file_name()?.to_str()?;
    let under_kubepods = parent.components().any(|c| {
        c.as_os_str()
            .to_str()
            .is_some_and(|s| s.contains("kubepods"))
    });
    let pod = name.starts_with("pod")
        || (name.ends_with(".slice") && name.contains("-pod") && name.contains("kubepods"));
    if !(pod && under_kubepods) {
        return None;
    }
    CgroupPath::new(parent.to_str()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubelet_pod(container: &str) -> Option<String> {
        kubelet_pod_cgroup(&CgroupPath::new(container).unwrap()).map(|p| p.to_string())
    }

    #[test]
    fn the_kubelets_pod_cgroups_are_recognised_and_nothing_else() {
        assert_eq!(
            kubelet_pod("kubepods/pod1234/c0ffee").as_deref(),
            Some("kubepods/pod1234")
        );
        assert_eq!(
            kubelet_pod("kubepods/burstable/pod1234/c0ffee").as_deref(),
            Some("kubepods/burstable/pod1234")
        );
        assert_eq!(
            kubelet_pod("kubepods.slice/kubepods-pod12_34.slice/cri-containerd-c0ffee.scope")
                .as_deref(),
            Some("kubepods.slice/kubepods-pod12_34.slice")
        );
        assert_eq!(
            kubelet_pod("kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod12_34.slice/crio-c0ffee.scope").as_deref(),
            Some("kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod12_34.slice")
        );
        for other in [
            "machine.slice/libpod-c0ffee.scope",
            "machine.slice/machine-libpod_pod_ab.slice/libpod-c0ffee.scope",
            "topomgr/run-1-2/main",
            "kubepods",
            "pods/pod1/c",
        ] {
            assert_eq!(kubelet_pod(other), None, "{other}");
        }
    }
}
