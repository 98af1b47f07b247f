//! A cgroup hierarchy emulated in a plain directory tree: the test double
//! behind [`ControlFs`] (production code only knows the kernel's cgroupfs).
//!
//! What the kernel does on a real mount, this does by hand: a control file
//! is created when first written, a missing one reads as empty (a new
//! cgroup's `cpuset.cpus` in v1), and removing a cgroup removes its files
//! with it; a directory holding child directories is busy.

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use topomgr_cgroup::{CgroupError, CgroupManager, ControlFs, Removal};

/// Control files in a plain directory tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct DirectoryTree;

/// The hierarchy under `root` (a directory tree), as
/// [`CgroupManager::detect`] would see it on a cgroupfs.
pub fn detect(root: &Path) -> Result<CgroupManager, CgroupError> {
    CgroupManager::detect_with(root, Box::new(DirectoryTree))
}

fn io_err(op: &'static str, path: &Path, cause: io::Error) -> CgroupError {
    CgroupError::Io {
        op,
        path: path.to_path_buf(),
        cause,
    }
}

impl ControlFs for DirectoryTree {
    fn check_root(&self, root: &Path) -> Result<(), CgroupError> {
        if root.is_dir() {
            Ok(())
        } else {
            Err(CgroupError::Missing {
                path: root.to_path_buf(),
            })
        }
    }

    fn read(&self, path: &Path) -> Result<String, CgroupError> {
        match fs::read_to_string(path) {
            Ok(s) => Ok(s.trim().to_string()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(io_err("read", path, e)),
        }
    }

    fn write(&self, path: &Path, value: &str) -> Result<(), CgroupError> {
        let werr = |cause| CgroupError::Write {
            path: path.to_path_buf(),
            value: value.to_string(),
            cause,
        };
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(werr)?;
        f.write_all(value.as_bytes()).map_err(werr)
    }

    fn remove_dir(&self, dir: &Path) -> Result<Removal, CgroupError> {
        let entries: Vec<_> = fs::read_dir(dir)
            .map_err(|e| io_err("list", dir, e))?
            .filter_map(Result::ok)
            .collect();
        if entries
            .iter()
            .any(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        {
            return Ok(Removal::Busy);
        }
        for e in entries {
            let p = e.path();
            fs::remove_file(&p).map_err(|err| io_err("remove", &p, err))?;
        }
        fs::remove_dir(dir).map_err(|e| io_err("remove cgroup directory", dir, e))?;
        Ok(Removal::Removed)
    }
}
