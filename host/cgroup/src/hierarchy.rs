//! Which cgroup hierarchy a cgroup root belongs to: what the node lock is
//! keyed by.
//!
//! Every root inside one cpuset hierarchy hands out the same machine's
//! CPUs, whether it is the hierarchy's top (`/sys/fs/cgroup/cpuset`), a
//! sub-directory of it, or a sibling of another root: two writers there
//! overlap. So a root on a cgroup filesystem is known by the filesystem's
//! device number (one per mounted hierarchy, whatever directory or mount
//! point names it), and a root that is not on a cgroup filesystem (a test's
//! directory tree, a root that does not exist) by its own absolute,
//! canonical path.

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};

use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};

/// The hierarchy a cgroup root is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// A mounted cgroup filesystem (v1 cpuset or cgroup2).
    Cgroupfs {
        /// Its device number (`st_dev`): the same for every directory of
        /// the hierarchy and every mount of it.
        dev: u64,
        /// Its top directory as seen from the root given (the mount point).
        top: PathBuf,
    },
    /// A directory that is not on a cgroup filesystem.
    Directory(PathBuf),
}

impl Hierarchy {
    /// The hierarchy of `cgroup_root` (as the config names it: the cgroup
    /// mount, for v1 the directory holding `cpuset/`, or any directory in
    /// a hierarchy). A relative root is taken from the working directory.
    pub fn of(cgroup_root: &Path) -> Hierarchy {
        let absolute = absolute(cgroup_root);
        // The nearest directory that exists, and what is missing below it.
        let mut existing = absolute.clone();
        let mut missing = Vec::new();
        while !existing.is_dir() {
            match (
                existing.file_name().map(ToOwned::to_owned),
                existing.parent(),
            ) {
                (Some(name), Some(parent)) => {
                    missing.push(name);
                    existing = parent.to_path_buf();
                }
                _ => break,
            }
        }
        let existing = existing.canonicalize().unwrap_or(existing);
        if is_cgroupfs(&existing) {
            return cgroupfs(&existing);
        }
        // cgroup v1: the root is the tmpfs holding the controllers.
        let cpuset = existing.join("cpuset");
        if missing.is_empty() && is_cgroupfs(&cpuset) {
            if let Ok(cpuset) = cpuset.canonicalize() {
                return cgroupfs(&cpuset);
            }
        }
        let mut dir = existing;
        dir.extend(missing.iter().rev());
        Hierarchy::Directory(dir)
    }

    /// A key that names the hierarchy on this machine, made of
    /// `[a-z0-9-]` only (a file name): `cgroupfs-<dev in hex>`, or
    /// `dir-` and the path with every other byte as `_<hex>`, cut to a
    /// length a file name may have (`hash` then tells long paths apart).
    pub fn key(&self, hash: impl FnOnce(&[u8]) -> String) -> String {
        match self {
            Hierarchy::Cgroupfs { dev, .. } => format!("cgroupfs-{dev:x}"),
            Hierarchy::Directory(dir) => {
                use std::os::unix::ffi::OsStrExt as _;
                let bytes = dir.as_os_str().as_bytes();
                let mut key = String::from("dir-");
                for &b in bytes {
                    if b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' {
                        key.push(char::from(b));
                    } else {
                        key.push_str(&format!("_{b:02x}"));
                    }
                }
                if key.len() > 160 {
                    key.truncate(100);
                    key.push('-');
                    key.push_str(&hash(bytes));
                }
                key
            }
        }
    }
}

impl std::fmt::Display for Hierarchy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hierarchy::Cgroupfs { top, .. } => {
                write!(f, "the cgroup hierarchy at {}", top.display())
            }
            Hierarchy::Directory(dir) => write!(
                f,
                "the directory {} (not a cgroup filesystem)",
                dir.display()
            ),
        }
    }
}

/// `path` made absolute against the current directory, with `.` and `..`
/// taken out lexically (what does not exist cannot be canonicalized).
pub fn absolute(path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn is_cgroupfs(dir: &Path) -> bool {
    statfs(dir).is_ok_and(|s| {
        let t = s.filesystem_type();
        t == CGROUP_SUPER_MAGIC || t == CGROUP2_SUPER_MAGIC
    })
}

fn dev_of(dir: &Path) -> io::Result<u64> {
    Ok(std::fs::metadata(dir)?.dev())
}

/// The hierarchy of `dir`, a canonical directory on a cgroup filesystem:
/// its device, and the topmost ancestor on the same device.
fn cgroupfs(dir: &Path) -> Hierarchy {
    let Ok(dev) = dev_of(dir) else {
        return Hierarchy::Directory(dir.to_path_buf());
    };
    let mut top = dir.to_path_buf();
    while let Some(parent) = top.parent() {
        if dev_of(parent).ok() != Some(dev) {
            break;
        }
        top = parent.to_path_buf();
    }
    Hierarchy::Cgroupfs { dev, top }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_hash(_: &[u8]) -> String {
        "h".to_owned()
    }

    #[test]
    fn a_plain_directory_is_known_by_its_canonical_path_existing_or_not() {
        let base = std::env::temp_dir().join(format!("topomgr-hier-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        let canonical = base.canonicalize().unwrap();
        assert_eq!(
            Hierarchy::of(&base.join("link")),
            Hierarchy::Directory(canonical.join("real"))
        );
        assert_eq!(
            Hierarchy::of(&base.join("link/../real/./a/b")),
            Hierarchy::Directory(canonical.join("real/a/b")),
            "the missing part is kept, `..` and `.` taken out"
        );
        let h = Hierarchy::Directory(PathBuf::from("/tmp/A b-1"));
        assert_eq!(h.key(no_hash), "dir-_2ftmp_2f_41_20b-1");
        assert_eq!(
            h.to_string(),
            "the directory /tmp/A b-1 (not a cgroup filesystem)"
        );
        let long = Hierarchy::Directory(PathBuf::from(format!("/{}", "x".repeat(300))));
        let key = long.key(|b| format!("{}", b.len()));
        assert_eq!(key, format!("dir-_2f{}-301", "x".repeat(93)));
        std::fs::remove_dir_all(base).unwrap();
    }

    /// On a machine with a cpuset hierarchy: its top, a sub-directory of it
    /// and (v1) the tmpfs that holds it are one hierarchy.
    #[test]
    fn every_directory_of_a_cgroup_hierarchy_is_that_hierarchy() {
        let root = Path::new("/sys/fs/cgroup");
        let top = if is_cgroupfs(root) && root.join("cgroup.controllers").is_file() {
            root.to_path_buf()
        } else if is_cgroupfs(&root.join("cpuset")) {
            root.join("cpuset").canonicalize().unwrap()
        } else {
            eprintln!("no cpuset hierarchy at /sys/fs/cgroup here; nothing to check");
            return;
        };
        let Hierarchy::Cgroupfs { dev, top: found } = Hierarchy::of(root) else {
            panic!("{root:?} is not seen as a cgroup hierarchy");
        };
        assert_eq!(found, top);
        assert_eq!(Hierarchy::of(&top), Hierarchy::of(root));
        // A sub-directory, existing or not, is the same hierarchy.
        let sub = std::fs::read_dir(&top)
            .unwrap()
            .filter_map(Result::ok)
            .find(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path());
        if let Some(sub) = sub {
            assert_eq!(Hierarchy::of(&sub), Hierarchy::of(root));
        }
        assert_eq!(
            Hierarchy::of(&top.join("not/made/yet")),
            Hierarchy::Cgroupfs {
                dev,
                top: top.clone()
            }
        );
        assert_eq!(
            Hierarchy::of(root).key(no_hash),
            format!("cgroupfs-{dev:x}")
        );
    }
}
