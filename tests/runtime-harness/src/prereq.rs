//! What a test that drives a real runtime needs from the machine, checked up
//! front so that a test run without it fails with what is missing and how
//! to get it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::HarnessError;

/// Where containerd 1.7's binaries are unless `TOPOMGR_CONTAINERD_DIR` says
/// otherwise: the private unpack of `.ci/install-runtimes`.
pub const DEFAULT_CONTAINERD_DIR: &str = "/opt/topomgr-ci/containerd/usr/bin";

/// Where containerd 2.x's binaries are unless `TOPOMGR_CONTAINERD2_DIR` says
/// otherwise: the private unpack of `.ci/install-runtimes`.
pub const DEFAULT_CONTAINERD2_DIR: &str = "/opt/topomgr-ci/containerd2/usr/bin";

/// A release line of containerd that the tests run: its configuration
/// format and plugin names differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerdLine {
    /// containerd 1.7 (config `version = 2`, NRI off by default).
    V1_7,
    /// containerd 2.x (config `version = 3`, NRI on by default).
    V2,
}

impl ContainerdLine {
    /// The variable naming its bin directory, and where it is by default.
    fn dir_setting(self) -> (&'static str, &'static str) {
        match self {
            ContainerdLine::V1_7 => ("TOPOMGR_CONTAINERD_DIR", DEFAULT_CONTAINERD_DIR),
            ContainerdLine::V2 => ("TOPOMGR_CONTAINERD2_DIR", DEFAULT_CONTAINERD2_DIR),
        }
    }

    /// Whether `containerd --version`'s `major.minor` is of this line.
    fn accepts(self, major: u32, minor: u32) -> bool {
        match self {
            ContainerdLine::V1_7 => major == 1 && minor >= 7,
            ContainerdLine::V2 => major == 2,
        }
    }

    /// How the line is named in messages.
    pub fn name(self) -> &'static str {
        match self {
            ContainerdLine::V1_7 => "containerd 1.7",
            ContainerdLine::V2 => "containerd 2.x",
        }
    }
}

/// What the machine provides for a containerd test.
#[derive(Clone, Debug)]
pub struct Runtimes {
    /// Directory of `containerd`, `ctr` and `containerd-shim-runc-v2`.
    pub containerd_dir: PathBuf,
    /// The `runc` binary.
    pub runc: PathBuf,
    /// A static busybox to build the test image from.
    pub busybox: PathBuf,
}

/// Checks root, a cpuset cgroup, containerd ≥ 1.7, runc and busybox-static;
/// the error lists everything missing and how to install it.
pub fn require_containerd() -> Result<Runtimes, HarnessError> {
    require_containerd_line(ContainerdLine::V1_7)
}

/// [`require_containerd`] for a containerd of `line`.
pub fn require_containerd_line(line: ContainerdLine) -> Result<Runtimes, HarnessError> {
    let mut missing = Vec::new();
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        missing.push("root (run the test as root)".to_owned());
    }
    if !has_cpuset_cgroup() {
        missing.push(
            "a cpuset cgroup (v1 /sys/fs/cgroup/cpuset or v2 with the cpuset controller)"
                .to_owned(),
        );
    }
    let (variable, default) = line.dir_setting();
    let containerd_dir = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    for bin in ["containerd", "ctr", "containerd-shim-runc-v2"] {
        if !containerd_dir.join(bin).is_file() {
            missing.push(format!("{}", containerd_dir.join(bin).display()));
        }
    }
    if missing
        .iter()
        .all(|m| !m.starts_with(&*containerd_dir.to_string_lossy()))
    {
        match containerd_version(&containerd_dir.join("containerd")) {
            Some((major, minor)) if line.accepts(major, minor) => {}
            Some((major, minor)) => missing.push(format!(
                "{} with NRI (found {major}.{minor} in {})",
                line.name(),
                containerd_dir.display()
            )),
            None => missing.push(format!(
                "a containerd in {} that runs and prints its version",
                containerd_dir.display()
            )),
        }
    }
    let runc = find_in_path("runc");
    if runc.is_none() {
        missing.push("runc in PATH".to_owned());
    }
    let busybox = PathBuf::from("/bin/busybox");
    if !busybox.is_file() {
        missing.push("/bin/busybox (Debian's busybox-static)".to_owned());
    }
    if !missing.is_empty() {
        return Err(HarnessError::new(format!(
            "this test drives a real containerd and needs: {}. Install the runtimes with \
             `sudo .ci/install-runtimes` (CI does), or point {variable} at the \
             bin directory of a {}",
            missing.join("; "),
            line.name()
        )));
    }
    Ok(Runtimes {
        containerd_dir,
        runc: runc.unwrap(),
        busybox,
    })
}

/// What the machine provides for a Podman test.
#[derive(Clone, Debug)]
pub struct PodmanRuntimes {
    /// A static busybox for the containers' root filesystem.
    pub busybox: PathBuf,
}

/// Checks root, a cpuset cgroup, podman, conmon, runc and busybox-static;
/// the error lists everything missing and how to install it.
pub fn require_podman() -> Result<PodmanRuntimes, HarnessError> {
    let mut missing = Vec::new();
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        missing.push("root (run the test as root)".to_owned());
    }
    if !has_cpuset_cgroup() {
        missing.push(
            "a cpuset cgroup (v1 /sys/fs/cgroup/cpuset or v2 with the cpuset controller)"
                .to_owned(),
        );
    }
    for bin in ["podman", "conmon", "runc"] {
        if find_in_path(bin).is_none() {
            missing.push(format!("{bin} in PATH"));
        }
    }
    let busybox = PathBuf::from("/bin/busybox");
    if !busybox.is_file() {
        missing.push("/bin/busybox (Debian's busybox-static)".to_owned());
    }
    if !missing.is_empty() {
        return Err(HarnessError::new(format!(
            "this test drives a real Podman and needs: {}. Install the runtimes with \
             `sudo .ci/install-runtimes` (CI does)",
            missing.join("; ")
        )));
    }
    Ok(PodmanRuntimes { busybox })
}

fn has_cpuset_cgroup() -> bool {
    Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").is_file()
        || std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "cpuset"))
}

/// `containerd --version` prints e.g. `containerd github.com/containerd/containerd 1.7.24~ds1 …`.
fn containerd_version(bin: &Path) -> Option<(u32, u32)> {
    let out = Command::new(bin).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().skip(2).find_map(|w| {
        let mut parts = w.trim_start_matches('v').split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((major, minor))
    })
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
