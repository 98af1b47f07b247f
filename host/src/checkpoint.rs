//! Persisting admitted pods and provider state between runs (`--state-dir`).
//!
//! Layout of a state directory:
//! - `pods.json`: the admitted pods and their allocations;
//! - `providers/<name>.state`: each provider's `checkpoint()` bytes.
//!
//! Every file is written atomically: a temporary file in the same directory,
//! fsync, rename over the old file, fsync of the directory. A crash leaves
//! either the old or the new file, never a torn one.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::admission::{AdmitResult, Admitter};

/// Errors reading or writing a state directory; each names its path.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// An IO error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A state file that does not parse.
    #[error("{path}: corrupt state file: {reason} (move it away to start from empty state)")]
    Corrupt {
        /// The path.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A provider refused its saved state or failed to produce it.
    #[error("provider {provider:?}: {message} ({path})")]
    Provider {
        /// Provider name.
        provider: String,
        /// The provider's message.
        message: String,
        /// The state file.
        path: PathBuf,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Write `data` to `path` atomically (temp file, fsync, rename, fsync dir).
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), CheckpointError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io(dir))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(data).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(io(path))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

fn provider_file(dir: &Path, name: &str) -> PathBuf {
    dir.join("providers").join(format!("{name}.state"))
}

/// Restore one provider's state from `dir` if a file exists for it.
pub fn restore_provider(
    dir: &Path,
    provider: &mut dyn crate::provider::HintProvider,
) -> Result<(), CheckpointError> {
    let path = provider_file(dir, provider.name());
    match fs::read(&path) {
        Ok(bytes) => provider
            .restore(&bytes)
            .map_err(|e| CheckpointError::Provider {
                provider: provider.name().to_string(),
                message: e.to_string(),
                path,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(&path)(e)),
    }
}

/// Save one provider's state into `dir`.
pub fn save_provider(
    dir: &Path,
    provider: &dyn crate::provider::HintProvider,
) -> Result<(), CheckpointError> {
    let path = provider_file(dir, provider.name());
    let bytes = provider
        .checkpoint()
        .map_err(|e| CheckpointError::Provider {
            provider: provider.name().to_string(),
            message: e.to_string(),
            path: path.clone(),
        })?;
    write_atomic(&path, &bytes)
}

/// Restore the admitted pods and every provider's state from `dir`.
pub fn restore(dir: &Path, admitter: &mut Admitter) -> Result<(), CheckpointError> {
    let path = dir.join("pods.json");
    let pods: BTreeMap<String, AdmitResult> = match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| CheckpointError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => return Err(io(&path)(e)),
    };
    for p in admitter.providers_mut() {
        restore_provider(dir, p.as_mut())?;
    }
    admitter.set_pods(pods);
    Ok(())
}

/// Save the admitted pods and every provider's state into `dir`.
pub fn save(dir: &Path, admitter: &Admitter) -> Result<(), CheckpointError> {
    for p in admitter.providers() {
        save_provider(dir, p.as_ref())?;
    }
    let path = dir.join("pods.json");
    let bytes =
        serde_json::to_vec_pretty(admitter.pods()).map_err(|e| CheckpointError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    write_atomic(&path, &bytes)
}

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
