//! [`CgroupPath`]: a cgroup's path relative to the hierarchy root, checked so
//! that it can only name directories under that root.
//!
//! Two layers of confinement:
//! - lexically, when the path is built: no absolute paths, no `..`, no `.`;
//! - on disk, whenever a directory is created or opened: the directory is
//!   canonicalized and must still lie under the canonical root, so a symlink
//!   planted inside the hierarchy cannot lead writes elsewhere
//!   ([`confine`]).

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use super::CgroupError;

/// The directory under which `topomgr` creates its containers' cgroups.
pub const TOPOMGR_PARENT: &str = "topomgr";

/// A relative cgroup path made of plain names (e.g. `topomgr/<pod-uid>/<container>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CgroupPath(PathBuf);

impl CgroupPath {
    /// Check `path`: it must be relative, non-empty, and made only of plain
    /// names (no `..`, no `.`).
    pub fn new(path: &str) -> Result<Self, CgroupError> {
        let invalid = |reason: &str| CgroupError::InvalidPath {
            path: path.to_string(),
            reason: reason.to_string(),
        };
        if path.is_empty() {
            return Err(invalid(
                "the path is empty; give a path relative to the cgroup root such as topomgr/<pod>/<container>",
            ));
        }
        if path.contains('\0') {
            return Err(invalid("the path contains a NUL byte"));
        }
        if path.contains('\n') {
            return Err(invalid("the path contains a newline"));
        }
        if path.starts_with('/') {
            return Err(invalid(
                "absolute paths are refused; give a path relative to the cgroup root",
            ));
        }
        let mut clean = PathBuf::new();
        for name in path.split('/').filter(|n| !n.is_empty()) {
            match name {
                ".." => {
                    return Err(invalid(
                        "\"..\" components are refused; the path must stay under the cgroup root",
                    ))
                }
                "." => {
                    return Err(invalid(
                        "\".\" components are refused; write the path without them",
                    ))
                }
                _ => clean.push(name),
            }
        }
        if clean.as_os_str().is_empty() {
            return Err(invalid(
                "the path names no directory; give a path relative to the cgroup root",
            ));
        }
        Ok(CgroupPath(clean))
    }

    /// The path of a container's cgroup: `topomgr/<pod-uid>/<container>`.
    pub fn container(pod_uid: &str, container: &str) -> Result<Self, CgroupError> {
        for (what, name) in [("pod uid", pod_uid), ("container name", container)] {
            if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                return Err(CgroupError::InvalidPath {
                    path: format!("{TOPOMGR_PARENT}/{pod_uid}/{container}"),
                    reason: format!("the {what} {name:?} is not a single directory name"),
                });
            }
        }
        Self::new(&format!("{TOPOMGR_PARENT}/{pod_uid}/{container}"))
    }

    /// The path as a relative [`Path`].
    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// Its names, outermost first.
    pub fn names(&self) -> impl Iterator<Item = &OsStr> {
        self.0.iter()
    }

    /// How many names it has.
    pub fn depth(&self) -> usize {
        self.0.iter().count()
    }
}

impl fmt::Display for CgroupPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.display())
    }
}

/// Resolve `dir` (symlinks included) and check that it lies under `root`
/// (already canonical). Returns the canonical directory.
pub fn confine(root: &Path, dir: &Path, path: &CgroupPath) -> Result<PathBuf, CgroupError> {
    let resolved = dir.canonicalize().map_err(|source| CgroupError::Io {
        op: "resolve",
        path: dir.to_path_buf(),
        cause: source,
    })?;
    if resolved.starts_with(root) {
        Ok(resolved)
    } else {
        Err(CgroupError::Escape {
            path: path.to_string(),
            at: dir.to_path_buf(),
            resolved,
            root: root.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(p: &str) -> String {
        match CgroupPath::new(p) {
            Err(CgroupError::InvalidPath { reason, .. }) => reason,
            other => panic!("expected InvalidPath for {p:?}, got {other:?}"),
        }
    }

    #[test]
    fn plain_relative_paths_are_kept() {
        let p = CgroupPath::new("topomgr//pod-1/app/").unwrap();
        assert_eq!(p.to_string(), "topomgr/pod-1/app");
        assert_eq!(p.depth(), 3);
        assert_eq!(
            CgroupPath::container("uid-1", "app").unwrap().to_string(),
            "topomgr/uid-1/app"
        );
    }

    #[test]
    fn refusals() {
        assert_eq!(
            reason("/etc"),
            "absolute paths are refused; give a path relative to the cgroup root"
        );
        assert_eq!(
            reason("a/../../etc"),
            "\"..\" components are refused; the path must stay under the cgroup root"
        );
        assert_eq!(
            reason("./a"),
            "\".\" components are refused; write the path without them"
        );
        assert_eq!(
            reason("a/./b"),
            "\".\" components are refused; write the path without them"
        );
        assert_eq!(
            reason(""),
            "the path is empty; give a path relative to the cgroup root such as topomgr/<pod>/<container>"
        );
        assert_eq!(
            CgroupPath::container("a/b", "app").unwrap_err().to_string(),
            "cgroup path \"topomgr/a/b/app\": the pod uid \"a/b\" is not a single directory name"
        );
        assert_eq!(
            CgroupPath::container("uid", "..").unwrap_err().to_string(),
            "cgroup path \"topomgr/uid/..\": the container name \"..\" is not a single directory name"
        );
    }
}
