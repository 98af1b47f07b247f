//! A cgroup hierarchy emulated in a plain directory tree: the test double
//! behind [`ControlFs`] (production code only knows the kernel's cgroupfs).
//! It ships with the crate behind the `test-double` feature, as youki's
//! `libcgroups` ships its test manager, so that it cannot drift from the
//! trait it implements; the tests of this workspace enable the feature in
//! their dev-dependencies.
//!
//! What the kernel does on a real mount, this does by hand: a control file
//! is created when first written, a missing one reads as empty (a new
//! cgroup's `cpuset.cpus` in v1), and removing a cgroup removes its files
//! with it; a directory holding child directories is busy.

use std::fs;
use std::io;
use std::path::Path;

use crate::{CgroupError, CgroupManager, ControlFs, Removal};

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
        crate::write_control(path, value, true)
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
