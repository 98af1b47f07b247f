//! cgroup v1: the cpuset controller's own hierarchy.
//!
//! A new v1 cpuset cgroup starts with empty `cpuset.cpus` and `cpuset.mems`
//! (unless `cgroup.clone_children` is set), and the kernel refuses to move a
//! process into it then, or to create useful children below it. So each
//! level is initialised from its parent, top-down, before the next level is
//! created; a child's values must stay a subset of its parent's.

use std::path::Path;

use super::{CgroupError, CgroupVersion, ControlFs, Layout};

/// The cgroup v1 cpuset layout.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct V1;

impl Layout for V1 {
    fn version(&self) -> CgroupVersion {
        CgroupVersion::V1
    }

    fn prepare_parent(
        &self,
        _fs: &dyn ControlFs,
        _parent: &Path,
        _is_root: bool,
    ) -> Result<(), CgroupError> {
        Ok(())
    }

    fn init_child(
        &self,
        fs: &dyn ControlFs,
        parent: &Path,
        child: &Path,
    ) -> Result<(), CgroupError> {
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let mine = fs.read(&child.join(file))?;
            if mine.is_empty() {
                let inherited = fs.read(&parent.join(file))?;
                fs.write(&child.join(file), &inherited)?;
            }
        }
        Ok(())
    }

    fn effective_files(&self) -> [&'static str; 2] {
        ["cpuset.effective_cpus", "cpuset.effective_mems"]
    }
}
