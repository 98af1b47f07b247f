//! Removing everything a test runtime (a private containerd, a private
//! Podman) made, whatever state it is in: its helper processes (containerd's
//! shims, Podman's conmons) and every process in its cgroups (killed), the
//! mounts under its directory (detached), its cgroups in every hierarchy,
//! the helpers' sockets, and the directory itself. Nothing here needs the
//! runtime to be alive or to answer, so it also works after a failed or
//! hung test.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What one tear-down removes.
pub(crate) struct Leftovers<'a> {
    /// The harness's directory (root, state, sockets, config, log).
    pub dir: &'a Path,
    /// What the runtime's helper processes name on their command line: an
    /// argument at or under this path (containerd's gRPC socket, which its
    /// shims get as `-address`; Podman's root, under which its conmons get
    /// their bundle and exit directories).
    pub helpers_name: &'a Path,
    /// The cgroup path every pod's parent is under (e.g. `/topomgr-it-…`).
    pub cgroup_root: &'a str,
}

/// Tears everything down; returns what could not be removed.
pub(crate) fn tear_down(l: &Leftovers<'_>) -> Vec<String> {
    let mut problems = Vec::new();
    let shims = helper_pids(l.helpers_name);
    let shim_sockets: Vec<PathBuf> = shims.iter().flat_map(|p| listening_sockets(*p)).collect();
    let hierarchies = cgroup_hierarchies();
    let mut victims: BTreeSet<i32> = shims.into_iter().collect();
    for h in &hierarchies {
        victims.extend(cgroup_pids(&h.join(l.cgroup_root.trim_start_matches('/'))));
    }
    for pid in &victims {
        // SAFETY: kill(2) with a pid read from /proc or cgroup.procs; a pid
        // that is already gone gives ESRCH, which is fine.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while victims.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in victims.iter().filter(|p| alive(**p)) {
        problems.push(format!("process {p} survived SIGKILL"));
    }

    for m in mounts_under(l.dir) {
        if let Err(e) = detach(&m) {
            problems.push(e);
        }
    }

    for h in &hierarchies {
        let top = h.join(l.cgroup_root.trim_start_matches('/'));
        if top.exists() {
            if let Err(e) = remove_cgroup_tree(&top) {
                problems.push(format!("cgroup {}: {e}", top.display()));
            }
        }
    }
    for s in shim_sockets {
        let _ = fs::remove_file(s);
    }
    if l.dir.exists() {
        if let Err(e) = fs::remove_dir_all(l.dir) {
            problems.push(format!("remove {}: {e}", l.dir.display()));
        }
    }
    problems
}

/// The runtime's helpers: processes with an argument at or under `path`.
fn helper_pids(path: &Path) -> Vec<i32> {
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                c.split(|b| *b == 0)
                    .filter_map(|arg| std::str::from_utf8(arg).ok())
                    .any(|arg| Path::new(arg).starts_with(path))
            })
        })
        .collect()
}

/// Paths of the Unix sockets process `pid` has open (its listening socket
/// under /run/containerd/s for a shim).
fn listening_sockets(pid: i32) -> Vec<PathBuf> {
    let inodes: BTreeSet<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let target = fs::read_link(e.ok()?.path()).ok()?;
            let t = target.to_str()?;
            Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let table = fs::read_to_string("/proc/net/unix").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Num RefCount Protocol Flags Type St Inode Path
            let path = f.get(7)?;
            (inodes.contains(*f.get(6)?) && path.starts_with('/')).then(|| PathBuf::from(path))
        })
        .collect()
}

/// Detaches the mount at `m` (lazily: never blocks on a busy mount).
pub(crate) fn detach(m: &Path) -> Result<(), String> {
    let c = std::ffi::CString::new(m.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("umount {}: the path holds a NUL byte", m.display()))?;
    // SAFETY: umount2 with a NUL-terminated path; MNT_DETACH never blocks
    // on a busy mount.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(format!(
            "umount {}: {}",
            m.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Every mounted cgroup hierarchy (v1 controllers, the v2 unified tree).
pub(crate) fn cgroup_hierarchies() -> Vec<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            matches!(f.get(2), Some(&"cgroup") | Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .collect()
}

/// Pids in a cgroup and all its descendants.
fn cgroup_pids(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            pids.extend(cgroup_pids(&e.path()));
        }
    }
    pids
}

/// Removes a cgroup and its descendants, children first, retrying while the
/// kernel still counts exiting tasks.
fn remove_cgroup_tree(dir: &Path) -> std::io::Result<()> {
    for e in fs::read_dir(dir)?.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&e.path())?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Mount points at or under `dir`, deepest first.
pub(crate) fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    found.dedup();
    found
}

/// Whether a process still exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Stops a child process as a service manager would: SIGTERM, then
/// SIGKILL after 10 s; reaps it.
pub(crate) fn terminate(mut child: std::process::Child) {
    // SAFETY: kill(2) of our own child, which has not been reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last `lines` lines of `text` (a log).
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A child's stdout and stderr, both appended to the log file at `path`.
pub(crate) fn log_outputs(
    path: &Path,
) -> Result<(std::process::Stdio, std::process::Stdio), crate::HarnessError> {
    let open = || {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| crate::HarnessError::io("open", path, e))
    };
    Ok((open()?.into(), open()?.into()))
}
