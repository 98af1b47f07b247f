//! Small file-system helpers the state directory and the exports share:
//! atomic file replacement and the id of the running boot.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An IO error on a path.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {cause}")]
pub struct PathError {
    /// The path.
    pub path: PathBuf,
    /// The error.
    pub cause: std::io::Error,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PathError + '_ {
    move |cause| PathError {
        path: path.to_path_buf(),
        cause,
    }
}

/// The name prefix of the temporary files [`write_atomic`] writes for `name`.
fn temp_prefix(name: &str) -> String {
    format!(".{name}.tmp.")
}

/// Write `data` to `path` atomically (temp file, fsync, rename, fsync dir).
/// When any step fails the temporary file is removed.
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> Result<(), PathError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io(dir))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!("{}{}", temp_prefix(&name), std::process::id()));
    let written = (|| {
        let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(data).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        drop(f);
        fs::rename(&tmp, path).map_err(io(path))
    })();
    if let Err(e) = written {
        if let Err(rm) = fs::remove_file(&tmp) {
            if rm.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %tmp.display(), error = %rm, "cannot remove a temporary state file");
            }
        }
        return Err(e);
    }
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

/// Remove the temporary files of `name` that a killed [`write_atomic`]
/// left in `dir` (call with the state lock held: no other writer is
/// running).
pub(crate) fn remove_stale_temps(dir: &Path, name: &str) {
    let prefix = temp_prefix(name);
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            match fs::remove_file(e.path()) {
                Ok(()) => {
                    tracing::info!(path = %e.path().display(), "stale temporary state file removed")
                }
                Err(err) => {
                    tracing::warn!(path = %e.path().display(), error = %err, "cannot remove a stale temporary state file")
                }
            }
        }
    }
}

/// The id of the running boot, or `"unknown"` where the kernel does not
/// publish one (the locks' probe: one boot id for locks and state).
pub use topomgr_locks::process::boot_id;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("topomgr-ckpt-{}", std::process::id()));
        let p = dir.join("a/b.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["b.json"]);
        fs::remove_dir_all(dir).unwrap();
    }
}
