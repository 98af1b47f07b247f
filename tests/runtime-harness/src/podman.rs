//! A private Podman for one test: its own storage root, run root, temporary
//! directory, hooks directory and `containers.conf` under a temporary
//! directory; containers from a local busybox-static root filesystem
//! (`--rootfs`, no image, no registry) with no network, under a cgroup
//! parent of its own. Dropping it removes every process, mount and cgroup
//! it made (see `cleanup`).
//!
//! What this machine type needs and users' machines do not, set here only:
//! - `default_ulimits` with soft = hard (`nofile`, `nproc`): the VM lacks
//!   `CAP_SYS_RESOURCE`, and Podman's defaults raise soft limits above the
//!   hard ones (`setrlimit RLIMIT_NOFILE: Operation not permitted`);
//! - runc, and the cgroupfs manager (no systemd as PID 1): crun refuses
//!   the hybrid cgroup layout unless the hugetlb v1 hierarchy is mounted.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::cleanup::{self, Leftovers};
use crate::image::APPLETS;
use crate::prereq;
use crate::HarnessError;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A private Podman.
pub struct Podman {
    dir: PathBuf,
    cgroup_root: String,
    cpuset_dir: PathBuf,
}

impl Podman {
    /// Checks the prerequisites and prepares the directories, the root
    /// filesystem, the configuration and the cgroup parent (in the cpuset
    /// hierarchy, with the root's CPUs and memory nodes, so that a daemon
    /// can use it as its cgroup root before the first container).
    pub fn new() -> Result<Self, HarnessError> {
        let r = prereq::require_podman()?;
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("topomgr-podman-{tag}"));
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(|e| HarnessError::io("remove stale", &dir, e))?;
        }
        for sub in ["root", "runroot", "tmp", "hooks.d", "rootfs/bin"] {
            fs::create_dir_all(dir.join(sub))
                .map_err(|e| HarnessError::io("create", &dir.join(sub), e))?;
        }
        let bin = dir.join("rootfs/bin");
        fs::copy(&r.busybox, bin.join("busybox"))
            .map_err(|e| HarnessError::io("copy busybox into", &bin, e))?;
        for applet in APPLETS {
            symlink("busybox", bin.join(applet))
                .map_err(|e| HarnessError::io("link", &bin.join(applet), e))?;
        }
        let conf = dir.join("containers.conf");
        fs::write(
            &conf,
            "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=4096:4096\"]\n\
             [engine]\ncgroup_manager = \"cgroupfs\"\nruntime = \"runc\"\nevents_logger = \"file\"\n",
        )
        .map_err(|e| HarnessError::io("write", &conf, e))?;
        let cgroup_root = format!("/topomgr-podman-{tag}");
        let cpuset_dir = make_cpuset_parent(&cgroup_root)?;
        Ok(Podman {
            dir,
            cgroup_root,
            cpuset_dir,
        })
    }

    /// The hooks directory (`podman --hooks-dir`; empty at first).
    pub fn hooks_dir(&self) -> PathBuf {
        self.dir.join("hooks.d")
    }

    /// The cgroup parent of every container (`--cgroup-parent`).
    pub fn cgroup_parent(&self) -> &str {
        &self.cgroup_root
    }

    /// The container cgroups' parent in the cpuset hierarchy (a daemon's
    /// cgroup root).
    pub fn cpuset_dir(&self) -> &Path {
        &self.cpuset_dir
    }

    /// The root filesystem every container runs from.
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }

    /// `podman` with this instance's global options.
    pub fn command(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(self.dir.join("runroot"))
            .arg("--tmpdir")
            .arg(self.dir.join("tmp"))
            .arg("--hooks-dir")
            .arg(self.hooks_dir());
        c
    }

    /// What this instance adds to every `podman run`: no network, its
    /// cgroup parent.
    pub fn run_options(&self) -> Vec<String> {
        vec![
            "--network".to_owned(),
            "none".to_owned(),
            "--cgroup-parent".to_owned(),
            self.cgroup_root.clone(),
        ]
    }

    /// `podman <args>`, waited for.
    pub fn output(&self, args: &[&str]) -> Result<Output, HarnessError> {
        self.command()
            .args(args)
            .output()
            .map_err(|e| HarnessError::io("run", Path::new("podman"), e))
    }
}

/// The cgroup `path` in the cpuset hierarchy (v1: with its parent's CPUs
/// and memory nodes, which a new v1 cpuset lacks).
fn make_cpuset_parent(path: &str) -> Result<PathBuf, HarnessError> {
    let v1 = Path::new("/sys/fs/cgroup/cpuset");
    let base = if v1.join("cpuset.cpus").is_file() {
        v1
    } else {
        Path::new("/sys/fs/cgroup")
    };
    let dir = base.join(path.trim_start_matches('/'));
    fs::create_dir_all(&dir).map_err(|e| HarnessError::io("create cgroup", &dir, e))?;
    if base == v1 {
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let value = fs::read_to_string(base.join(file))
                .map_err(|e| HarnessError::io("read", &base.join(file), e))?;
            fs::write(dir.join(file), value.trim())
                .map_err(|e| HarnessError::io("write", &dir.join(file), e))?;
        }
    }
    Ok(dir)
}

impl Drop for Podman {
    fn drop(&mut self) {
        let problems = cleanup::tear_down(&Leftovers {
            dir: &self.dir,
            helpers_name: &self.dir,
            cgroup_root: &self.cgroup_root,
        });
        for p in problems {
            eprintln!("runtime-harness cleanup: {p}");
        }
    }
}
