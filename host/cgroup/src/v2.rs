//! cgroup v2: the unified hierarchy.
//!
//! A child has cpuset files only when its parent lists `cpuset` in
//! `cgroup.subtree_control`, which is possible only when the parent's
//! `cgroup.controllers` offers it. So before each level is created, `+cpuset`
//! is enabled in its parent (the root's `cgroup.controllers` is checked; below
//! the root, enabling it in the parent guarantees it). An empty
//! `cpuset.cpus` / `cpuset.mems` in v2 means "inherit from the parent", so
//! new levels need no initialisation.

use std::path::Path;

use super::{CgroupError, CgroupVersion, ControlFs, Layout};

/// The cgroup v2 layout.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct V2;

/// Whether a controller list names cpuset (the kernel shows `cpuset`; a
/// test double's tree holds what was written, `+cpuset`).
fn lists_cpuset(text: &str) -> bool {
    text.split_whitespace()
        .any(|c| c.trim_start_matches('+') == "cpuset")
}

impl Layout for V2 {
    fn version(&self) -> CgroupVersion {
        CgroupVersion::V2
    }

    fn prepare_parent(
        &self,
        fs: &dyn ControlFs,
        parent: &Path,
        is_root: bool,
    ) -> Result<(), CgroupError> {
        if is_root {
            let available = fs.read(&parent.join("cgroup.controllers"))?;
            if !lists_cpuset(&available) {
                return Err(CgroupError::CpusetUnavailable {
                    root: parent.to_path_buf(),
                    available,
                });
            }
        }
        let subtree = parent.join("cgroup.subtree_control");
        if !lists_cpuset(&fs.read(&subtree)?) {
            fs.write(&subtree, "+cpuset")?;
        }
        Ok(())
    }

    fn init_child(
        &self,
        _fs: &dyn ControlFs,
        _parent: &Path,
        _child: &Path,
    ) -> Result<(), CgroupError> {
        Ok(())
    }

    fn effective_files(&self) -> [&'static str; 2] {
        ["cpuset.cpus.effective", "cpuset.mems.effective"]
    }
}
