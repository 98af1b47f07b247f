//! The shared CPU pool: what containers without exclusive CPUs run on.
//!
//! As in the kubelet's CPU Manager, the shared pool is every online CPU not
//! held exclusively by some container (reserved CPUs stay in it). When an
//! exclusive assignment is made or released the pool changes, and every
//! shared-pool container's `cpuset.cpus` is rewritten to the new pool
//! ([`apply_shared_pool`]); exclusive containers are left as they are.

use topomgr_sdk::CpuSet;
use tracing::info;

use super::{CgroupError, CgroupManager, CgroupPath};

/// One admitted container with a cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolMember {
    /// Its cgroup.
    pub path: CgroupPath,
    /// Whether its CPUs are exclusive.
    pub exclusive: bool,
    /// Its CPUs (meaningful when exclusive).
    pub cpus: CpuSet,
}

/// `online` minus every exclusive member's CPUs.
pub fn shared_pool(online: &CpuSet, members: &[PoolMember]) -> CpuSet {
    members
        .iter()
        .filter(|m| m.exclusive)
        .fold(online.clone(), |pool, m| pool.difference(&m.cpus))
}

/// Rewrite `cpuset.cpus` of every shared-pool member to the shared pool;
/// returns the pool. An empty pool is an error and nothing is written.
pub fn apply_shared_pool(
    cgroups: &CgroupManager,
    online: &CpuSet,
    members: &[PoolMember],
) -> Result<CpuSet, CgroupError> {
    let pool = shared_pool(online, members);
    let shared: Vec<&PoolMember> = members.iter().filter(|m| !m.exclusive).collect();
    if shared.is_empty() {
        return Ok(pool);
    }
    if pool.is_empty() {
        let exclusive = members
            .iter()
            .filter(|m| m.exclusive)
            .fold(CpuSet::new(), |all, m| all.union(&m.cpus));
        return Err(CgroupError::EmptySharedPool {
            online: online.to_string(),
            exclusive: exclusive.to_string(),
        });
    }
    for m in shared {
        let cg = cgroups.open(&m.path)?;
        cgroups.set_cpus(&cg, &pool)?;
    }
    info!(pool = %pool, members = members.len(), "shared pool applied");
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(path: &str, exclusive: bool, cpus: &str) -> PoolMember {
        PoolMember {
            path: CgroupPath::new(path).unwrap(),
            exclusive,
            cpus: CpuSet::parse(cpus).unwrap(),
        }
    }

    #[test]
    fn pool_is_online_minus_exclusive() {
        let online = CpuSet::parse("0-7").unwrap();
        let members = [
            member("a", true, "1-2"),
            member("b", false, "0-7"),
            member("c", true, "6"),
        ];
        assert_eq!(shared_pool(&online, &members).to_string(), "0,3-5,7");
        assert_eq!(shared_pool(&online, &[]).to_string(), "0-7");
    }
}
