//! Who may replace a file topomgr trusts: plugin libraries, the config file,
//! its drop-in directory and every drop-in.
//!
//! A trusted path and every directory above it must be owned by root or by
//! the user running topomgr, and must not be writable by group or others; a
//! world- or group-writable directory is accepted only with the sticky bit
//! (like `/tmp`), where nobody but an entry's owner can replace it.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Checks that `path` (canonical) and every directory above it can only be
/// replaced by root or the user running topomgr. Returns why not, naming the
/// path at fault and the command that fixes it.
pub(crate) fn check(path: &Path) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    for p in path.ancestors() {
        let md =
            std::fs::metadata(p).map_err(|e| format!("cannot inspect {}: {e}", p.display()))?;
        let mode = md.mode() & 0o7777;
        let uid = md.uid();
        if uid != 0 && uid != euid {
            return Err(format!(
                "{} is owned by uid {uid}, not by root; chown it to root",
                p.display()
            ));
        }
        let sticky_dir = md.is_dir() && mode & 0o1000 != 0;
        if mode & 0o002 != 0 && !sticky_dir {
            return Err(format!(
                "{} is writable by everyone (mode {mode:04o}); run chmod o-w on it",
                p.display()
            ));
        }
        if mode & 0o020 != 0 && !sticky_dir {
            return Err(format!(
                "{} is writable by its group (gid {}, mode {mode:04o}); run chmod g-w on it",
                p.display(),
                md.gid()
            ));
        }
    }
    Ok(())
}
