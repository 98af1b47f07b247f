//! Starting CMD in its cgroup (with a parent-death signal) and waiting for
//! it without racing the signal forwarder.

use std::ffi::{CStr, CString, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Command, ExitStatus};

use nix::errno::Errno;
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use topomgr_cgroup::Cgroup;
use topomgr_contract::api::Admission;

use crate::signals::{lock_state, Signals};
use crate::RunError;

/// Write this process's pid into `procs`. Runs in the forked child before
/// exec: only async-signal-safe calls, no allocation.
fn join_cgroup(procs: &CStr) -> std::io::Result<()> {
    // SAFETY: getpid has no preconditions and is async-signal-safe.
    let pid = unsafe { libc::getpid() };
    let mut buf = [0u8; 12];
    let mut at = buf.len();
    let mut n = u32::try_from(pid).unwrap_or(0);
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || at == 0 {
            break;
        }
    }
    let digits = &buf[at..];
    // SAFETY: `procs` is a valid NUL-terminated string owned by the caller;
    // open is async-signal-safe.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is open; `digits` is a live stack buffer of that length.
    let written = unsafe { libc::write(fd, digits.as_ptr().cast(), digits.len()) };
    let result = if written < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    };
    // SAFETY: `fd` is open and closed once; close is async-signal-safe.
    unsafe { libc::close(fd) };
    result
}

/// Ask the kernel to SIGKILL this (forked) process when the thread that
/// forked it dies, so a `kill -9` of topomgr does not leave CMD running on
/// CPUs nobody holds any more; fail if `parent` already died. Runs in the
/// forked child before exec: only async-signal-safe calls.
fn die_with_parent(parent: nix::unistd::Pid) -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and changes only
    // this process's attributes; it is async-signal-safe.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The parent may have died between fork and prctl: then nobody would
    // send the signal.
    if nix::unistd::getppid() != parent {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Start CMD (with the environment of `admission`'s container) moved into
/// `cg` before it execs.
pub(crate) fn spawn_in(
    cmd_args: &[OsString],
    cg: &Cgroup,
    admission: &Admission,
) -> Result<Child, RunError> {
    let Some((program, rest)) = cmd_args.split_first() else {
        return Err(RunError::NoCommand);
    };
    let procs = CString::new(cg.procs_file().as_os_str().as_bytes())
        .map_err(|_| RunError::NulInCgroupPath(cg.dir().to_path_buf()))?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    if let Some(c) = admission.containers.first() {
        cmd.envs(&c.env);
    }
    let parent = nix::unistd::getpid();
    // SAFETY: the closure only calls `die_with_parent` and `join_cgroup`,
    // which are async-signal-safe and do not allocate; `procs` and `parent`
    // were made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            die_with_parent(parent)?;
            join_cgroup(&procs)
        });
    }
    cmd.spawn().map_err(RunError::Spawn)
}

/// Wait for CMD without reaping it first, so that the forwarder never
/// signals a reused pid; then mark it exited and reap it.
pub(crate) fn wait_child(child: &mut Child, fwd: &Signals) -> Result<ExitStatus, RunError> {
    let pid = Pid::from_raw(i32::try_from(child.id()).map_err(|_| RunError::PidOutOfRange)?);
    loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Ok(_) => break,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(RunError::Wait(e)),
        }
    }
    lock_state(&fwd.state).exited = true;
    child.wait().map_err(RunError::Reap)
}

pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    }
}
