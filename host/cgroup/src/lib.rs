//! Container cgroups: create them, apply `cpuset.cpus` / `cpuset.mems`, move
//! processes in, read the effective cpuset back, remove them.
//!
//! Design (in the style of youki's `libcgroups`): the hierarchy root is
//! injected ([`CgroupManager::detect`] takes it, `cgroup_root` in the config),
//! so tests run against directory trees in temporary directories; every IO
//! error names its path; what differs between the two cgroup versions sits
//! behind the small `Layout` trait:
//! - cgroup v2 (unified, `v2`): detected by `cgroup.controllers` at the
//!   root; `+cpuset` is enabled in every ancestor's `cgroup.subtree_control`
//!   before a child is created; effective values in `cpuset.cpus.effective` /
//!   `cpuset.mems.effective`;
//! - cgroup v1 (`v1`): the `cpuset` controller's own hierarchy
//!   (`<root>/cpuset`, or the root itself when it is that mount); every new
//!   cgroup starts with empty `cpuset.cpus` / `cpuset.mems` (no process can
//!   join it then), so each level is initialised from its parent before the
//!   next is created; effective values in `cpuset.effective_cpus` /
//!   `cpuset.effective_mems`.
//!
//! Every path stays under the root: [`CgroupPath`] refuses absolute paths,
//! `..` and `.`, and every directory is canonicalized and checked against the
//! canonical root before anything is written in it (a symlink out of the
//! hierarchy is refused). Control files are opened with `O_NOFOLLOW`.
//!
//! What differs between the kernel's files and a test's goes through one
//! small trait, [`ControlFs`] (accept a root, read or write a control file,
//! remove a cgroup directory; directories are created, listed and resolved
//! with `std::fs`, the same on both): `Cgroupfs` is the only
//! implementation in production and accepts only a mounted cgroup
//! filesystem ([`CgroupManager::detect`]).
//! Tests put a double behind the trait ([`CgroupManager::detect_with`]):
//! `directory_tree`, behind the `test-double` feature, emulates a
//! hierarchy in a plain directory tree (youki's `libcgroups` ships its test
//! manager the same way).
//!
//! [`hierarchy`] says which hierarchy a cgroup root is in (what the node
//! lock of `topomgr_node` is keyed by).
//!
//! `quota` lifts the CFS quota of a container that holds exclusive CPUs
//! (`cpu.max` on v2, `cpu.cfs_quota_us` in the v1 `cpu` hierarchy beside
//! the cpuset one), as the kubelet does.
//!
//! [`pool`] holds the one rule for a container's cpuset and rewrites the
//! shared-pool containers' `cpuset.cpus`; `topomgr_node::state` decides
//! when (before an exclusive container can run, after a release is durable).

#[cfg(feature = "test-double")]
pub mod directory_tree;
pub mod hierarchy;
mod path;
pub mod pool;
mod process;
mod quota;
mod readback;
mod v1;
mod v2;

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use topomgr_sdk::{CpuSet, NumaMask};
use tracing::{debug, info};

pub use path::{confine, CgroupPath, TOPOMGR_PARENT};
pub use quota::{kubelet_pod_cgroup, CpuQuota, QuotaLift};
pub use readback::runtime_cpuset;

/// How long [`CgroupManager::remove`] retries while the kernel still
/// counts processes in a cgroup.
pub(crate) const REMOVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of cgroup operations; each names the path it concerns.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// An IO error on a path.
    #[error("cannot {op} {}: {cause}", path.display())]
    Io {
        /// What was being done ("read", "create cgroup directory", ...).
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        cause: io::Error,
    },
    /// Writing a value into a control file failed.
    #[error("cannot write {value:?} to {}: {cause}", path.display())]
    Write {
        /// The control file.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The error.
        cause: io::Error,
    },
    /// A cgroup path that is not a plain relative path.
    #[error("cgroup path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A directory of the path resolves outside the root (a symlink).
    #[error(
        "cgroup path {path:?}: {} resolves to {}, outside the cgroup root {}; symlinks out of the cgroup root are refused",
        at.display(), resolved.display(), root.display()
    )]
    Escape {
        /// The cgroup path as given.
        path: String,
        /// The directory that escapes.
        at: PathBuf,
        /// Where it resolves to.
        resolved: PathBuf,
        /// The canonical root.
        root: PathBuf,
    },
    /// Neither a v2 hierarchy nor a v1 cpuset controller under the root.
    #[error(
        "no cgroup hierarchy with a cpuset controller under {}: expected cgroup v2 (cgroup.controllers) or a cgroup v1 cpuset controller (cpuset/cpuset.cpus); set cgroup_root to the cgroup mount point (usually /sys/fs/cgroup)",
        root.display()
    )]
    NoCpuset {
        /// The root looked at.
        root: PathBuf,
    },
    /// The root is a plain directory, not a mounted cgroup filesystem.
    #[error(
        "{} is not a mounted cgroup filesystem (cgroup v1 cpuset or cgroup2); set cgroup_root to the cgroup mount point (usually /sys/fs/cgroup)",
        root.display()
    )]
    NotCgroupfs {
        /// The hierarchy root.
        root: PathBuf,
    },
    /// cgroup v2 without the cpuset controller.
    #[error(
        "the cgroup v2 hierarchy at {} does not offer the cpuset controller (cgroup.controllers: {available:?}); enable cpuset for it (e.g. in its parent's cgroup.subtree_control)",
        root.display()
    )]
    CpusetUnavailable {
        /// The hierarchy root.
        root: PathBuf,
        /// What `cgroup.controllers` lists.
        available: String,
    },
    /// A process's cgroup is not under the root.
    #[error(
        "process {pid} is in cgroup {}, which is not under topomgr's cgroup root {}; set cgroup_root to a directory that holds the containers' cgroups (usually /sys/fs/cgroup)",
        cgroup.display(), root.display()
    )]
    NotUnderRoot {
        /// The process.
        pid: u32,
        /// Its cgroup (its directory when the hierarchy is mounted, else
        /// its path inside the hierarchy).
        cgroup: PathBuf,
        /// The root.
        root: PathBuf,
    },
    /// The cgroup does not exist.
    #[error("cgroup {} does not exist", path.display())]
    Missing {
        /// Its directory.
        path: PathBuf,
    },
    /// Processes are still in the cgroup after the retry period.
    #[error(
        "cannot remove cgroup {}: processes {pids:?} are still in it after {waited_ms} ms; stop them or move them out",
        path.display()
    )]
    Busy {
        /// Its directory.
        path: PathBuf,
        /// The processes left.
        pids: Vec<u32>,
        /// How long removal was retried.
        waited_ms: u128,
    },
    /// The cgroup has child cgroups.
    #[error("cannot remove cgroup {}: it has child cgroups ({}); remove them first", path.display(), children.join(", "))]
    HasChildren {
        /// Its directory.
        path: PathBuf,
        /// The children's names.
        children: Vec<String>,
    },
    /// A control file whose content does not parse.
    #[error("{}: cannot parse {content:?}: {reason}", path.display())]
    Parse {
        /// The control file.
        path: PathBuf,
        /// Its content.
        content: String,
        /// Why.
        reason: String,
    },
    /// A container's cpuset would be empty (no process could run in it).
    #[error("cannot give a container an empty cpuset: {reason}")]
    EmptyCpuset {
        /// Why it is empty.
        reason: String,
    },
    /// Exclusive CPUs take every online CPU: nothing left for the shared pool.
    #[error(
        "the shared CPU pool would be empty: exclusive CPUs {exclusive} cover every online CPU ({online}); shared-pool containers cannot run"
    )]
    EmptySharedPool {
        /// Online CPUs.
        online: String,
        /// CPUs held exclusively.
        exclusive: String,
    },
}

/// The cgroup version of a hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1, cpuset controller.
    V1,
    /// cgroup v2, unified hierarchy.
    V2,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        })
    }
}

/// A cpuset read back from a cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpuset {
    /// CPUs.
    pub cpus: CpuSet,
    /// Memory nodes.
    pub mems: NumaMask,
}

/// What [`ControlFs::remove_dir`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// The directory is gone.
    Removed,
    /// Processes or child cgroups are still in it (`EBUSY`).
    Busy,
}

/// How the manager touches a hierarchy's files: the seam between the
/// manager and the kernel (`Cgroupfs` in production, doubles in tests).
pub trait ControlFs: fmt::Debug + Send + Sync {
    /// Accept `root` (canonical) as a hierarchy root, or say why not.
    fn check_root(&self, root: &Path) -> Result<(), CgroupError>;
    /// The trimmed content of a control file.
    fn read(&self, path: &Path) -> Result<String, CgroupError>;
    /// Write `value` into a control file (never through a symlink).
    fn write(&self, path: &Path, value: &str) -> Result<(), CgroupError>;
    /// Remove one cgroup directory.
    fn remove_dir(&self, dir: &Path) -> Result<Removal, CgroupError>;
}

/// The kernel's cgroup filesystem (v1 cpuset or cgroup2 mounts only).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cgroupfs;

/// Writes `value` into the control file `path`, never through a symlink;
/// `create`: make the file if it is missing (a plain directory tree, where
/// no kernel made it). One writer for the real files and the test double.
pub(crate) fn write_control(path: &Path, value: &str, create: bool) -> Result<(), CgroupError> {
    let werr = |cause| CgroupError::Write {
        path: path.to_path_buf(),
        value: value.to_string(),
        cause,
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create(create)
        .truncate(create)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(werr)?;
    f.write_all(value.as_bytes()).map_err(werr)
}

impl ControlFs for Cgroupfs {
    fn check_root(&self, root: &Path) -> Result<(), CgroupError> {
        use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};
        let fs_type = statfs(root)
            .map_err(|errno| CgroupError::Io {
                op: "statfs",
                path: root.to_path_buf(),
                cause: io::Error::from(errno),
            })?
            .filesystem_type();
        if fs_type == CGROUP_SUPER_MAGIC || fs_type == CGROUP2_SUPER_MAGIC {
            Ok(())
        } else {
            Err(CgroupError::NotCgroupfs {
                root: root.to_path_buf(),
            })
        }
    }

    fn read(&self, path: &Path) -> Result<String, CgroupError> {
        fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .map_err(|cause| CgroupError::Io {
                op: "read",
                path: path.to_path_buf(),
                cause,
            })
    }

    fn write(&self, path: &Path, value: &str) -> Result<(), CgroupError> {
        write_control(path, value, false)?;
        debug!(path = %path.display(), value, "cgroup file written");
        Ok(())
    }

    fn remove_dir(&self, dir: &Path) -> Result<Removal, CgroupError> {
        match fs::remove_dir(dir) {
            Ok(()) => Ok(Removal::Removed),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(Removal::Busy),
            Err(cause) => Err(CgroupError::Io {
                op: "remove cgroup directory",
                path: dir.to_path_buf(),
                cause,
            }),
        }
    }
}

/// What differs between cgroup v1 and v2.
pub(crate) trait Layout: fmt::Debug + Send + Sync {
    /// The version.
    fn version(&self) -> CgroupVersion;
    /// Make `parent` ready to hold a child cgroup with cpusets (v2: enable
    /// `+cpuset` in its `cgroup.subtree_control`). `is_root` for the
    /// hierarchy root.
    fn prepare_parent(
        &self,
        fs: &dyn ControlFs,
        parent: &Path,
        is_root: bool,
    ) -> Result<(), CgroupError>;
    /// Initialise `child` (new or existing) after it was created in `parent`
    /// (v1: copy the parent's cpus / mems where the child's are empty).
    fn init_child(
        &self,
        fs: &dyn ControlFs,
        parent: &Path,
        child: &Path,
    ) -> Result<(), CgroupError>;
    /// The files with the effective CPUs and memory nodes.
    fn effective_files(&self) -> [&'static str; 2];
}

/// A cgroup that exists under the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    path: CgroupPath,
    dir: PathBuf,
}

impl Cgroup {
    /// Its path relative to the root.
    pub fn path(&self) -> &CgroupPath {
        &self.path
    }

    /// Its canonical directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its `cgroup.procs` file (write a pid to move that process in).
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

/// The v1 `cpu` controller's hierarchy beside the cpuset one under
/// `cgroup_root` (`cpu`, usually a link to `cpu,cpuacct`), if mounted there.
fn v1_cpu_root(cgroup_root: &Path, fs: &dyn ControlFs) -> Option<PathBuf> {
    ["cpu", "cpu,cpuacct", "cpuacct,cpu"]
        .iter()
        .map(|name| cgroup_root.join(name))
        .find(|dir| dir.join("cpu.cfs_quota_us").is_file())
        .and_then(|dir| dir.canonicalize().ok())
        .filter(|dir| fs.check_root(dir).is_ok())
}

/// Container cgroups under one hierarchy root.
#[derive(Debug)]
pub struct CgroupManager {
    root: PathBuf,
    /// v1: the `cpu` controller's hierarchy beside the cpuset one, when
    /// there is one (where the CFS quota is).
    cpu_root: Option<PathBuf>,
    layout: Box<dyn Layout>,
    fs: Box<dyn ControlFs>,
}

impl CgroupManager {
    /// Detect the hierarchy under `cgroup_root`: cgroup v2 when
    /// `cgroup.controllers` is there, else a v1 cpuset controller at
    /// `<root>/cpuset` (or `<root>` itself when it is that mount). The
    /// hierarchy must be a mounted cgroup filesystem (`Cgroupfs`).
    pub fn detect(cgroup_root: &Path) -> Result<Self, CgroupError> {
        Self::detect_with(cgroup_root, Box::new(Cgroupfs))
    }

    /// [`CgroupManager::detect`] with its files behind `fs`.
    pub fn detect_with(cgroup_root: &Path, fs: Box<dyn ControlFs>) -> Result<Self, CgroupError> {
        let (base, layout): (PathBuf, Box<dyn Layout>) =
            if cgroup_root.join("cgroup.controllers").is_file() {
                (cgroup_root.to_path_buf(), Box::new(v2::V2))
            } else if cgroup_root.join("cpuset/cpuset.cpus").is_file() {
                let mut mgr = Self::with_layout(&cgroup_root.join("cpuset"), Box::new(v1::V1), fs)?;
                mgr.cpu_root = v1_cpu_root(cgroup_root, &*mgr.fs);
                return Ok(mgr);
            } else if cgroup_root.join("cpuset.cpus").is_file() {
                (cgroup_root.to_path_buf(), Box::new(v1::V1))
            } else {
                return Err(CgroupError::NoCpuset {
                    root: cgroup_root.to_path_buf(),
                });
            };
        Self::with_layout(&base, layout, fs)
    }

    /// A manager for the hierarchy (v1: the cpuset controller's directory)
    /// at `base` with an explicit layout, its files behind `fs`.
    pub(crate) fn with_layout(
        base: &Path,
        layout: Box<dyn Layout>,
        fs: Box<dyn ControlFs>,
    ) -> Result<Self, CgroupError> {
        let root = base.canonicalize().map_err(|source| CgroupError::Io {
            op: "resolve",
            path: base.to_path_buf(),
            cause: source,
        })?;
        fs.check_root(&root)?;
        info!(root = %root.display(), version = %layout.version(), "cgroup hierarchy");
        Ok(CgroupManager {
            root,
            cpu_root: None,
            layout,
            fs,
        })
    }

    /// The cgroup version.
    pub fn version(&self) -> CgroupVersion {
        self.layout.version()
    }

    /// The canonical hierarchy root (v1: the cpuset controller's directory).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Create the cgroup `path` and any missing parents, each made ready
    /// for cpusets. An existing cgroup is reused.
    pub fn create(&self, path: &CgroupPath) -> Result<Cgroup, CgroupError> {
        let mut dir = self.root.clone();
        for (i, name) in path.names().enumerate() {
            self.layout.prepare_parent(&*self.fs, &dir, i == 0)?;
            let child = dir.join(name);
            match fs::create_dir(&child) {
                Ok(()) => debug!(dir = %child.display(), "cgroup directory created"),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(CgroupError::Io {
                        op: "create cgroup directory",
                        path: child,
                        cause: source,
                    })
                }
            }
            let real = confine(&self.root, &child, path)?;
            self.layout.init_child(&*self.fs, &dir, &real)?;
            dir = real;
        }
        info!(cgroup = %dir.display(), "cgroup ready");
        Ok(Cgroup {
            path: path.clone(),
            dir,
        })
    }

    /// The existing cgroup `path`.
    pub fn open(&self, path: &CgroupPath) -> Result<Cgroup, CgroupError> {
        let dir = self.root.join(path.as_path());
        if !dir.is_dir() {
            return Err(CgroupError::Missing { path: dir });
        }
        let dir = confine(&self.root, &dir, path)?;
        Ok(Cgroup {
            path: path.clone(),
            dir,
        })
    }

    /// Write `cpuset.cpus` and `cpuset.mems`.
    pub fn set_cpuset(
        &self,
        cg: &Cgroup,
        cpus: &CpuSet,
        mems: &NumaMask,
    ) -> Result<(), CgroupError> {
        self.set_cpus(cg, cpus)?;
        self.fs
            .write(&cg.dir.join("cpuset.mems"), &mems.to_string())?;
        Ok(())
    }

    /// Write `cpuset.cpus` only.
    pub(crate) fn set_cpus(&self, cg: &Cgroup, cpus: &CpuSet) -> Result<(), CgroupError> {
        self.fs
            .write(&cg.dir.join("cpuset.cpus"), &cpus.to_string())
    }

    /// Move process `pid` into the cgroup.
    pub fn add_process(&self, cg: &Cgroup, pid: u32) -> Result<(), CgroupError> {
        self.fs.write(&cg.procs_file(), &pid.to_string())
    }

    /// The processes in the cgroup.
    pub fn procs(&self, cg: &Cgroup) -> Result<Vec<u32>, CgroupError> {
        let file = cg.procs_file();
        let text = self.fs.read(&file)?;
        text.split_whitespace()
            .map(|p| {
                p.parse::<u32>().map_err(|e| CgroupError::Parse {
                    path: file.clone(),
                    content: text.clone(),
                    reason: format!("{p:?} is not a process id: {e}"),
                })
            })
            .collect()
    }

    /// The cpuset as written (`cpuset.cpus` and `cpuset.mems`, not the
    /// effective values): what [`CgroupManager::set_cpuset`] wrote unless
    /// someone else changed it since.
    pub fn configured(&self, cg: &Cgroup) -> Result<Cpuset, CgroupError> {
        let read = |name: &str| -> Result<(PathBuf, String), CgroupError> {
            let p = cg.dir.join(name);
            Ok((p.clone(), self.fs.read(&p)?))
        };
        let (cp, ct) = read("cpuset.cpus")?;
        let cpus = CpuSet::parse(ct.trim()).map_err(|e| CgroupError::Parse {
            path: cp,
            content: ct.clone(),
            reason: e.to_string(),
        })?;
        let (mp, mt) = read("cpuset.mems")?;
        let mems = NumaMask::parse_list(mt.trim()).map_err(|e| CgroupError::Parse {
            path: mp,
            content: mt.clone(),
            reason: e.to_string(),
        })?;
        Ok(Cpuset { cpus, mems })
    }

    /// The cpuset the kernel applies (effective values).
    pub fn effective(&self, cg: &Cgroup) -> Result<Cpuset, CgroupError> {
        let [cpus_file, mems_file] = self.layout.effective_files();
        let read = |name: &str| -> Result<(PathBuf, String), CgroupError> {
            let p = cg.dir.join(name);
            Ok((p.clone(), self.fs.read(&p)?))
        };
        let (cp, ct) = read(cpus_file)?;
        let cpus = CpuSet::parse(&ct).map_err(|e| CgroupError::Parse {
            path: cp,
            content: ct.clone(),
            reason: e.to_string(),
        })?;
        let (mp, mt) = read(mems_file)?;
        let mems = NumaMask::parse_list(&mt).map_err(|e| CgroupError::Parse {
            path: mp,
            content: mt.clone(),
            reason: e.to_string(),
        })?;
        Ok(Cpuset { cpus, mems })
    }

    /// Remove the cgroup, retrying while the kernel still counts processes
    /// in it (up to `REMOVE_TIMEOUT`); then remove up to `prune_parents`
    /// of its ancestors that are left empty (never the root).
    pub fn remove(&self, cg: &Cgroup, prune_parents: usize) -> Result<(), CgroupError> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            match self.fs.remove_dir(&cg.dir)? {
                Removal::Removed => break,
                Removal::Busy => {
                    let children = self.child_dirs(&cg.dir)?;
                    if !children.is_empty() {
                        return Err(CgroupError::HasChildren {
                            path: cg.dir.clone(),
                            children,
                        });
                    }
                    if start.elapsed() >= REMOVE_TIMEOUT {
                        return Err(CgroupError::Busy {
                            path: cg.dir.clone(),
                            pids: self.procs(cg).unwrap_or_default(),
                            waited_ms: start.elapsed().as_millis(),
                        });
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
            }
        }
        info!(cgroup = %cg.dir.display(), "cgroup removed");
        let mut dir = cg.dir.clone();
        for _ in 0..prune_parents {
            let Some(parent) = dir.parent().map(Path::to_path_buf) else {
                break;
            };
            if parent == self.root || !parent.starts_with(&self.root) {
                break;
            }
            match self.fs.remove_dir(&parent) {
                Ok(Removal::Removed) => {
                    debug!(cgroup = %parent.display(), "empty parent cgroup removed")
                }
                // Other cgroups or processes still use it: it stays.
                Ok(Removal::Busy) | Err(_) => break,
            }
            dir = parent;
        }
        Ok(())
    }

    fn child_dirs(&self, dir: &Path) -> Result<Vec<String>, CgroupError> {
        let entries = fs::read_dir(dir).map_err(|source| CgroupError::Io {
            op: "list",
            path: dir.to_path_buf(),
            cause: source,
        })?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }
}
