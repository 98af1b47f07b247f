//! Which cgroup a process is in, as a [`CgroupPath`] under a manager's root
//! ([`CgroupManager::cgroup_of_process`]): what a runtime hook needs to
//! attach a container that its runtime put in a cgroup of its own choosing
//! (cgroupfs or systemd driver alike).
//!
//! `/proc/<pid>/cgroup` names the cgroup inside its hierarchy (`0::/path`
//! on v2; `N:…,cpuset,…:/path` on v1); `/proc/self/mountinfo` says where
//! that hierarchy is mounted (and which part of it, for a bind mount). The
//! directory is that mount point joined with the path; it must lie under
//! the manager's root.

use std::fs;
use std::path::{Path, PathBuf};

use super::{CgroupError, CgroupManager, CgroupPath, CgroupVersion};

impl CgroupManager {
    /// The cgroup of process `pid` in this hierarchy, relative to the root.
    pub fn cgroup_of_process(&self, pid: u32) -> Result<CgroupPath, CgroupError> {
        let file = PathBuf::from(format!("/proc/{pid}/cgroup"));
        let text = fs::read_to_string(&file).map_err(|cause| CgroupError::Io {
            op: "read",
            path: file.clone(),
            cause,
        })?;
        let version = self.version();
        let inside = hierarchy_path(&text, version).ok_or_else(|| CgroupError::Parse {
            path: file.clone(),
            content: text.clone(),
            reason: match version {
                CgroupVersion::V1 => "no line of the cpuset controller".to_owned(),
                CgroupVersion::V2 => "no line of the unified hierarchy (0::)".to_owned(),
            },
        })?;
        let info = PathBuf::from("/proc/self/mountinfo");
        let mounts = fs::read_to_string(&info).map_err(|cause| CgroupError::Io {
            op: "read",
            path: info.clone(),
            cause,
        })?;
        let outside = |dir: PathBuf| CgroupError::NotUnderRoot {
            pid,
            cgroup: dir,
            root: self.root.clone(),
        };
        let dir = hierarchy_mounts(&mounts, version)
            .into_iter()
            .filter(|(_, point)| self.root.starts_with(point))
            .find_map(|(mount_root, point)| {
                let rel = Path::new(&inside).strip_prefix(&mount_root).ok()?;
                Some(point.join(rel))
            })
            .ok_or_else(|| outside(PathBuf::from(&inside)))?;
        let dir = dir.canonicalize().map_err(|cause| CgroupError::Io {
            op: "resolve",
            path: dir.clone(),
            cause,
        })?;
        let rel = dir
            .strip_prefix(&self.root)
            .map_err(|_| outside(dir.clone()))?;
        let text = rel.to_str().ok_or_else(|| outside(dir.clone()))?;
        if text.is_empty() {
            return Err(outside(dir));
        }
        CgroupPath::new(text)
    }
}

/// The path of the line of `version`'s hierarchy in a `/proc/<pid>/cgroup`.
fn hierarchy_path(text: &str, version: CgroupVersion) -> Option<String> {
    text.lines().find_map(|line| {
        let mut f = line.splitn(3, ':');
        let (id, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let ours = match version {
            CgroupVersion::V2 => id == "0" && controllers.is_empty(),
            CgroupVersion::V1 => controllers.split(',').any(|c| c == "cpuset"),
        };
        ours.then(|| path.to_owned())
    })
}

/// `(root inside the hierarchy, mount point)` of every mount of
/// `version`'s hierarchy in a `/proc/self/mountinfo`.
fn hierarchy_mounts(text: &str, version: CgroupVersion) -> Vec<(PathBuf, PathBuf)> {
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let f: Vec<&str> = before.split(' ').collect();
            let a: Vec<&str> = after.split(' ').collect();
            let (fstype, options) = (*a.first()?, a.get(2).copied().unwrap_or(""));
            let ours = match version {
                CgroupVersion::V2 => fstype == "cgroup2",
                CgroupVersion::V1 => {
                    fstype == "cgroup" && options.split(',').any(|o| o == "cpuset")
                }
            };
            ours.then(|| {
                Some((
                    PathBuf::from(unescape(f.get(3)?)),
                    PathBuf::from(unescape(f.get(4)?)),
                ))
            })?
        })
        .collect()
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                u8::try_from(v).ok()
            });
        match code {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_V1: &str = "9:name=systemd:/libpod_parent/libpod-9c97\n4:memory:/libpod_parent/libpod-9c97\n3:cpuset:/libpod_parent/libpod-9c97\n2:cpu,cpuacct:/x\n0::/libpod_parent/libpod-9c97\n";

    #[test]
    fn the_line_of_each_hierarchy() {
        assert_eq!(
            hierarchy_path(PROC_V1, CgroupVersion::V1).as_deref(),
            Some("/libpod_parent/libpod-9c97")
        );
        assert_eq!(
            hierarchy_path("0::/system.slice/a.scope\n", CgroupVersion::V2).as_deref(),
            Some("/system.slice/a.scope")
        );
        assert_eq!(hierarchy_path("4:memory:/a\n", CgroupVersion::V1), None);
        assert_eq!(
            hierarchy_path("3:cpuset,cpu:/a:b\n", CgroupVersion::V1).as_deref(),
            Some("/a:b")
        );
    }

    #[test]
    fn mounts_of_each_hierarchy_with_escapes() {
        let info = "\
30 23 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
35 30 0:31 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset
36 30 0:32 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
37 30 0:33 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate
90 23 0:31 /kube /mnt/my\\040cpusets rw - cgroup cgroup rw,cpuset
";
        assert_eq!(
            hierarchy_mounts(info, CgroupVersion::V1),
            [
                (PathBuf::from("/"), PathBuf::from("/sys/fs/cgroup/cpuset")),
                (PathBuf::from("/kube"), PathBuf::from("/mnt/my cpusets")),
            ]
        );
        assert_eq!(
            hierarchy_mounts(info, CgroupVersion::V2),
            [(PathBuf::from("/"), PathBuf::from("/sys/fs/cgroup/unified"))]
        );
        assert_eq!(unescape("a\\134b\\011"), "a\\b\t");
        assert_eq!(unescape("end\\04"), "end\\04");
        assert_eq!(unescape("\\777"), "\\777");
    }
}
