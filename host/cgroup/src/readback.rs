//! Reading back the cpuset of a cgroup that someone else made: a container
//! runtime's cgroup for a container that topomgr placed through NRI (the
//! runtime writes it; topomgr checks that what it answered is what the
//! container has).

use std::io;
use std::path::Path;

use topomgr_sdk::{CpuSet, NumaMask};

use crate::{CgroupError, Cpuset};

/// The cpuset as written (`cpuset.cpus`, `cpuset.mems`) of the cgroup at
/// `rel` under `cgroup_root`: in the unified hierarchy when
/// `cgroup.controllers` is there (cgroup v2), else in the v1 `cpuset`
/// hierarchy. `None` when the cgroup does not exist (not started yet, or
/// gone) or sets no cpuset of its own (an empty file).
pub fn runtime_cpuset(cgroup_root: &Path, rel: &Path) -> Result<Option<Cpuset>, CgroupError> {
    let dir = if cgroup_root.join("cgroup.controllers").is_file() {
        cgroup_root.join(rel)
    } else {
        cgroup_root.join("cpuset").join(rel)
    };
    let read = |name: &str| -> Result<Option<(std::path::PathBuf, String)>, CgroupError> {
        let file = dir.join(name);
        match std::fs::read_to_string(&file) {
            Ok(text) => Ok(Some(text.trim().to_owned())
                .filter(|t| !t.is_empty())
                .map(|t| (file, t))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(cause) => Err(CgroupError::Io {
                op: "read",
                path: file,
                cause,
            }),
        }
    };
    let (Some((cpus_file, cpus)), Some((mems_file, mems))) =
        (read("cpuset.cpus")?, read("cpuset.mems")?)
    else {
        return Ok(None);
    };
    let cpus_set = CpuSet::parse(&cpus).map_err(|e| CgroupError::Parse {
        path: cpus_file,
        content: cpus.clone(),
        reason: e.to_string(),
    })?;
    let mems_set = NumaMask::parse_list(&mems).map_err(|e| CgroupError::Parse {
        path: mems_file,
        content: mems.clone(),
        reason: e.to_string(),
    })?;
    Ok(Some(Cpuset {
        cpus: cpus_set,
        mems: mems_set,
    }))
}
