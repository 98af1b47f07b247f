//! The provider's config table (`[providers.gpu.config]`):
//!
//! ```toml
//! resource = "nvidia.com/gpu"           # default
//! allocation_policy = "best-effort"     # or "simple"
//! topology_file = "gpu-topology.json"   # optional; JSON or `nvidia-smi topo -m`
//! nvml_library = "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1"  # optional
//! proc_root = "/proc"                   # default
//! ```
//!
//! `topology_file` and `proc_root` are relative to the config file's
//! directory (the directory is passed to [`GpuConfig::topology_path`] and
//! [`GpuConfig::proc_path`]). `proc_root` is where the NVIDIA driver's
//! `driver/nvidia/gpus/<pci>/information` files are read when NVML gives
//! no device minor (see [`crate::driver`]); a recorded tree may be given
//! there as a recorded sysfs tree is given to the host. `nvml_library`
//! (an extension of the documented keys) names the NVML library when the
//! driver's is not on the loader's path, as with containerised drivers.
//! Unknown keys and wrong types are errors naming the key.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::choice::Policy;

/// The resource name when `resource` is not set.
pub const DEFAULT_RESOURCE: &str = "nvidia.com/gpu";

/// The parsed config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuConfig {
    /// Extended resource name the GPUs are offered under.
    #[serde(default = "default_resource")]
    pub resource: String,
    /// How GPUs are chosen inside the aligned set.
    #[serde(default)]
    pub allocation_policy: Policy,
    /// A topology file, used instead of NVML and PCI discovery.
    #[serde(default)]
    pub topology_file: Option<PathBuf>,
    /// The NVML library to load (default `libnvidia-ml.so.1`).
    #[serde(default)]
    pub nvml_library: Option<PathBuf>,
    /// The proc file system holding the driver's GPU information files
    /// (default `/proc`).
    #[serde(default)]
    pub proc_root: Option<PathBuf>,
}

fn default_resource() -> String {
    DEFAULT_RESOURCE.to_owned()
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig {
            resource: default_resource(),
            allocation_policy: Policy::default(),
            topology_file: None,
            nvml_library: None,
            proc_root: None,
        }
    }
}

/// A config that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    /// The key at fault (`allocation_policy`, `resource`, ...).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl GpuConfig {
    /// Parses the config table (`null`: every default).
    pub fn from_json(value: &serde_json::Value) -> Result<Self, ConfigError> {
        if value.is_null() {
            return Ok(GpuConfig::default());
        }
        if !value.is_object() {
            return Err(ConfigError {
                key: "config".to_owned(),
                message: format!("must be a table, found {value}"),
            });
        }
        let config: GpuConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let key = e.path().to_string();
            ConfigError {
                key: if key == "." { "config".to_owned() } else { key },
                message: e.into_inner().to_string(),
            }
        })?;
        check_resource_name(&config.resource).map_err(|message| ConfigError {
            key: "resource".to_owned(),
            message,
        })?;
        for (key, path) in [
            ("topology_file", &config.topology_file),
            ("nvml_library", &config.nvml_library),
            ("proc_root", &config.proc_root),
        ] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(ConfigError {
                    key: key.to_owned(),
                    message: "empty path".to_owned(),
                });
            }
        }
        Ok(config)
    }

    /// `topology_file`, resolved against `config_dir` when relative (as
    /// the host resolves its own paths against the main config file's
    /// directory); without a directory, relative to the working directory.
    pub fn topology_path(&self, config_dir: Option<&Path>) -> Option<PathBuf> {
        let file = self.topology_file.as_ref()?;
        Some(match config_dir {
            Some(dir) if file.is_relative() => dir.join(file),
            _ => file.clone(),
        })
    }

    /// `proc_root`, resolved as [`topology_path`](Self::topology_path)
    /// resolves its file; `/proc` when not set.
    pub fn proc_path(&self, config_dir: Option<&Path>) -> PathBuf {
        match (&self.proc_root, config_dir) {
            (None, _) => PathBuf::from(crate::driver::DEFAULT_PROC_ROOT),
            (Some(root), Some(dir)) if root.is_relative() => dir.join(root),
            (Some(root), _) => root.clone(),
        }
    }
}

/// A Kubernetes extended resource name: `<domain>/<name>`, the domain a DNS
/// subdomain, the name a qualified-name part of at most 63 characters.
fn check_resource_name(resource: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "`{resource}` is not an extended resource name (<domain>/<name>, e.g. nvidia.com/gpu): {why}"
        ))
    };
    let Some((domain, name)) = resource.split_once('/') else {
        return bad("no `/`");
    };
    let domain_ok = !domain.is_empty()
        && domain.len() <= 253
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !domain_ok {
        return bad("the domain must be a lower-case DNS subdomain");
    }
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| alnum(b) || matches!(b, b'-' | b'_' | b'.'))
        && name.bytes().next().is_some_and(alnum)
        && name.bytes().last().is_some_and(alnum);
    if !name_ok {
        return bad("the name must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn defaults() {
        for v in [serde_json::Value::Null, json!({})] {
            let c = GpuConfig::from_json(&v).unwrap();
            assert_eq!(c, GpuConfig::default());
            assert_eq!(c.resource, "nvidia.com/gpu");
            assert_eq!(c.allocation_policy, Policy::BestEffort);
        }
    }

    #[test]
    fn every_key() {
        let c = GpuConfig::from_json(&json!({
            "resource": "example.com/accel",
            "allocation_policy": "simple",
            "topology_file": "topo.json",
            "nvml_library": "/opt/nvidia/libnvidia-ml.so.1",
            "proc_root": "recorded/proc",
        }))
        .unwrap();
        assert_eq!(
            c.proc_path(Some(Path::new("/etc/topomgr"))),
            PathBuf::from("/etc/topomgr/recorded/proc")
        );
        assert_eq!(
            GpuConfig::default().proc_path(Some(Path::new("/etc/topomgr"))),
            PathBuf::from("/proc")
        );
        assert_eq!(c.resource, "example.com/accel");
        assert_eq!(c.allocation_policy, Policy::Simple);
        assert_eq!(
            c.topology_path(Some(Path::new("/etc/topomgr"))),
            Some(PathBuf::from("/etc/topomgr/topo.json"))
        );
        assert_eq!(c.topology_path(None), Some(PathBuf::from("topo.json")));
        let abs = GpuConfig {
            topology_file: Some("/srv/t.txt".into()),
            ..c
        };
        assert_eq!(
            abs.topology_path(Some(Path::new("/etc/topomgr"))),
            Some(PathBuf::from("/srv/t.txt"))
        );
    }

    #[test]
    fn bad_config_names_the_key() {
        let cases = [
            (json!([]), "config: must be a table, found []"),
            (json!({"colour": 1}), "colour: unknown field `colour`, expected one of `resource`, `allocation_policy`, `topology_file`, `nvml_library`, `proc_root`"),
            (json!({"allocation_policy": "fast"}), "allocation_policy: unknown policy `fast` (known: best-effort, simple)"),
            (json!({"resource": 3}), "resource: invalid type: integer `3`, expected a string"),
            (json!({"resource": "gpu"}), "resource: `gpu` is not an extended resource name (<domain>/<name>, e.g. nvidia.com/gpu): no `/`"),
            (json!({"resource": "NVIDIA.com/gpu"}), "resource: `NVIDIA.com/gpu` is not an extended resource name (<domain>/<name>, e.g. nvidia.com/gpu): the domain must be a lower-case DNS subdomain"),
            (json!({"resource": "nvidia.com/-gpu"}), "resource: `nvidia.com/-gpu` is not an extended resource name (<domain>/<name>, e.g. nvidia.com/gpu): the name must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"),
            (json!({"topology_file": ""}), "topology_file: empty path"),
            (json!({"topology_file": 5}), "topology_file: invalid type: integer `5`, expected path string"),
            (json!({"proc_root": ""}), "proc_root: empty path"),
        ];
        for (v, msg) in cases {
            assert_eq!(
                GpuConfig::from_json(&v).unwrap_err().to_string(),
                msg,
                "{v}"
            );
        }
    }
}
