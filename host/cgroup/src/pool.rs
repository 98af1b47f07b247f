//! The shared CPU pool and the one rule for a container's cpuset.
//!
//! As in the kubelet's CPU Manager, the shared pool is every online CPU not
//! held exclusively by some container (reserved CPUs stay in it). A
//! container's cpuset ([`container_cpuset`]) is its own CPUs when they are
//! exclusive, the shared pool otherwise; its memory nodes are its
//! allocation's, every node of the machine when no provider set any. When
//! an exclusive assignment is made or released the pool changes, and every
//! shared-pool container's `cpuset.cpus` is rewritten ([`write_pool`]).
//! `topomgr_node::state::NodeState` decides when.

use topomgr_sdk::{Allocation, CpuSet, NumaMask};
use tracing::{info, warn};

use super::{CgroupError, CgroupManager, CgroupPath, Cpuset};

/// Whether a container with this allocation runs on the shared pool.
pub fn is_shared(a: &Allocation) -> bool {
    !a.exclusive || a.cpus.is_empty()
}

/// The cpuset of a container: its exclusive CPUs, else `pool`; its memory
/// nodes, else `all_nodes`. An empty result is an error (no process could
/// run in the cgroup).
pub fn container_cpuset(
    a: &Allocation,
    pool: &CpuSet,
    all_nodes: NumaMask,
) -> Result<Cpuset, CgroupError> {
    let cpus = if is_shared(a) {
        pool.clone()
    } else {
        a.cpus.clone()
    };
    if cpus.is_empty() {
        return Err(CgroupError::EmptyCpuset {
            reason: "the shared CPU pool is empty: exclusive CPUs cover every online CPU"
                .to_owned(),
        });
    }
    let mems = if a.mems.is_empty() { all_nodes } else { a.mems };
    if mems.is_empty() {
        return Err(CgroupError::EmptyCpuset {
            reason: "no provider set memory nodes and the machine reports no NUMA node".to_owned(),
        });
    }
    Ok(Cpuset { cpus, mems })
}

/// What writing the pool to the shared-pool containers did.
#[derive(Debug, Default)]
pub struct PoolWrite {
    /// Cgroups that no longer exist (their containers are gone).
    pub gone: Vec<CgroupPath>,
    /// Cgroups that could not be written, with the error.
    pub failed: Vec<(CgroupPath, CgroupError)>,
}

/// Rewrite `cpuset.cpus` of every cgroup in `members` to `pool`. Every
/// member is attempted; a missing cgroup is reported in
/// [`PoolWrite::gone`], any other failure in [`PoolWrite::failed`].
pub fn write_pool(cgroups: &CgroupManager, pool: &CpuSet, members: &[CgroupPath]) -> PoolWrite {
    let mut out = PoolWrite::default();
    for path in members {
        let written = cgroups
            .open(path)
            .and_then(|cg| cgroups.set_cpus(&cg, pool));
        match written {
            Ok(()) => {}
            Err(CgroupError::Missing { .. }) => out.gone.push(path.clone()),
            Err(e) => {
                warn!(cgroup = %path.as_path().display(), error = %e, "cannot write the shared pool");
                out.failed.push((path.clone(), e));
            }
        }
    }
    info!(pool = %pool, members = members.len(), gone = out.gone.len(), failed = out.failed.len(), "shared pool applied");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_for_a_containers_cpuset() {
        let pool = CpuSet::parse("0,3-7").unwrap();
        let all = NumaMask::parse_list("0-1").unwrap();
        let excl = Allocation::default()
            .with_cpus(CpuSet::parse("1-2").unwrap(), true)
            .with_mems(NumaMask::parse_list("0").unwrap());
        let got = container_cpuset(&excl, &pool, all).unwrap();
        assert_eq!(
            (got.cpus.to_string(), got.mems.to_string()),
            ("1-2".into(), "0".into())
        );
        // A shared container runs on the pool, whatever CPUs a provider named.
        let shared = Allocation::default().with_cpus(CpuSet::parse("0-7").unwrap(), false);
        let got = container_cpuset(&shared, &pool, all).unwrap();
        assert_eq!(
            (got.cpus.to_string(), got.mems.to_string()),
            ("0,3-7".into(), "0-1".into())
        );
        assert!(container_cpuset(&shared, &CpuSet::new(), all).is_err());
    }
}
