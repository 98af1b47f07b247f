//! The provider's config: `[providers.sriov.config]` and the SR-IOV network
//! device plugin's own `config.json` (`resourceList`).
//!
//! ```toml
//! [providers.sriov.config]
//! config_file = "/etc/pcidp/config.json"   # the plugin's config.json (relative:
//!                                          # to topomgr's main config file), or:
//! resource_prefix = "intel.com"            # the plugin's --resource-prefix (default)
//!
//! [[providers.sriov.config.resource_list]] # the same entries inline
//! resourceName = "intel_sriov_dpdk"
//! selectors = [{ vendors = ["8086"], devices = ["1889"], drivers = ["vfio-pci"] }]
//! ```
//!
//! Exactly one of `config_file` and `resource_list`. Entries read the way the
//! plugin reads them (`cmd/sriovdp/manager.go` `readConfig`/`validConfigs`,
//! `pkg/factory/factory.go` `GetDeviceFilter`, `pkg/types/types.go`), with
//! Go's key matching ([`crate::go_json::decode`]): `selectors` is one object
//! or a list of them, `resourcePrefix` overrides `resource_prefix`,
//! `deviceType` defaults to `netDevice`, a resource's full name is
//! `<prefix>/<resourceName>` and must be unique.
//!
//! Where the plugin logs and drops a resource, crashes, or silently ignores a
//! key, this loader refuses the config with a message naming the file, the
//! entry and the key:
//! * keys the plugin does not know (a typo would otherwise widen a pool);
//! * selectors topomgr does not implement (`ddpProfiles`, `vdpaType`,
//!   `pKeys`, `auxTypes`) and the `auxNetDevice` device type, unless the
//!   value is empty (`null`, `""`, `[]`, `false`), which the plugin ignores too;
//! * `acpiIndexes` on an `accelerator` resource: the plugin's README lists it,
//!   but its accelerator selector struct has no such field and ignores it;
//! * keys of the other device type (e.g. `pfNames` on an `accelerator`);
//! * malformed `pfNames`/`rootDevices` items, and two items naming the same
//!   PF (the plugin only ever consults the first);
//! * missing or empty `selectors` (the plugin crashes or drops the resource);
//! * a resource name with characters other than `[A-Za-z0-9_-]` (the plugin's
//!   rule), or one or a prefix the kubelet would not register (a name
//!   must start and end with a letter or digit and have at most 63
//!   characters; a prefix must be a DNS subdomain).
//!
//! `"SelectorObj": null` / `"SelectorObjs": null`, which the SR-IOV network
//! operator writes into every entry, are accepted.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::device::DeviceType;
use crate::go_json::decode::{self, Fields};
use crate::info::AdditionalInfo;
use crate::selector::Selector;

mod entry;

use entry::{check_prefix, resource_list};

/// The plugin's default `--resource-prefix`.
pub const DEFAULT_RESOURCE_PREFIX: &str = "intel.com";

/// One resource pool definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceConfig {
    /// `resourcePrefix`, or the provider's `resource_prefix`.
    pub prefix: String,
    /// `resourceName`.
    pub name: String,
    /// `deviceType`.
    pub device_type: DeviceType,
    /// `excludeTopology`: the pool's devices are advertised without a NUMA node.
    pub exclude_topology: bool,
    /// The selector objects, in order (at least one).
    pub selectors: Vec<Selector>,
    /// `additionalInfo` (`None` when absent or `null`).
    pub additional_info: Option<AdditionalInfo>,
}

impl ResourceConfig {
    /// The full resource name, `<prefix>/<name>`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.prefix, self.name)
    }
}

/// Where the resource list came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// The plugin's `config.json` at this path.
    File(PathBuf),
    /// `resource_list` in `[providers.sriov.config]`.
    Inline,
}

/// The provider's validated config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SriovConfig {
    /// `resource_prefix`.
    pub resource_prefix: String,
    /// Where the resources came from.
    pub source: ConfigSource,
    /// The resources, in config order (which decides who gets a device that
    /// two resources select).
    pub resources: Vec<ResourceConfig>,
}

/// One thing wrong with one entry of the resource list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The entry: `resourceList[3] ("mlnx_sriov_rdma")`.
    pub entry: String,
    /// The key inside the entry, when the problem is about one
    /// (`selectors[0].pfNames[1]`).
    pub key: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: {key}: {}", self.entry, self.message),
            None => write!(f, "{}: {}", self.entry, self.message),
        }
    }
}

fn list_problems(problems: &[Problem]) -> String {
    match problems {
        [one] => one.to_string(),
        many => {
            let mut s = format!("{} problems:", many.len());
            for p in many {
                s.push_str("\n  ");
                s.push_str(&p.to_string());
            }
            s
        }
    }
}

/// Why the config is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `[providers.sriov.config]` itself is wrong.
    #[error("[providers.sriov.config]: {0}")]
    Table(String),
    /// `config_file` cannot be read.
    #[error("cannot read the SR-IOV device plugin config {}: {cause}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// `config_file` is not JSON.
    #[error("{origin}: not valid JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// The file.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the JSON parser found.
        message: String,
    },
    /// The resource list is JSON but not a usable config.
    #[error("{origin}: {}", list_problems(problems))]
    Invalid {
        /// The file, or `[providers.sriov.config]`.
        origin: String,
        /// Every problem found, by entry.
        problems: Vec<Problem>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    config_file: Option<PathBuf>,
    resource_prefix: Option<String>,
    resource_list: Option<Value>,
}

impl SriovConfig {
    /// Read `[providers.sriov.config]` (as JSON; `null` when the table is
    /// absent) and the `config_file` it names.
    ///
    /// A relative `config_file` resolves against `config_dir`, the directory
    /// of topomgr's main config file, like every relative path of topomgr's
    /// config (the working directory when there is none). This differs from
    /// the plugin's `-config-file` flag, which is relative to the plugin's
    /// working directory. Errors name the path as resolved.
    pub fn from_table(table: &Value, config_dir: Option<&Path>) -> Result<Self, ConfigError> {
        let empty = Value::Object(Map::new());
        let table: Table = Table::deserialize(if table.is_null() { &empty } else { table })
            .map_err(|e| ConfigError::Table(e.to_string()))?;
        let resource_prefix = table
            .resource_prefix
            .unwrap_or_else(|| DEFAULT_RESOURCE_PREFIX.to_owned());
        if let Err(why) = check_prefix(&resource_prefix) {
            return Err(ConfigError::Table(format!(
                "resource_prefix {resource_prefix:?} {why}"
            )));
        }
        match (table.config_file, table.resource_list) {
            (Some(_), Some(_)) => Err(ConfigError::Table(
                "give either config_file or resource_list, not both".into(),
            )),
            (None, None) => Err(ConfigError::Table(
                "no resources: set config_file = \"/etc/pcidp/config.json\" (the SR-IOV network \
                 device plugin's config) or give [[providers.sriov.config.resource_list]] entries"
                    .into(),
            )),
            (Some(path), None) => {
                let path = match config_dir {
                    Some(dir) if path.is_relative() => dir.join(path),
                    _ => path,
                };
                let resources = read_config_file(&path, &resource_prefix)?;
                Ok(SriovConfig {
                    resource_prefix,
                    source: ConfigSource::File(path),
                    resources,
                })
            }
            (None, Some(list)) => {
                let origin = "[providers.sriov.config]";
                let resources = resource_list(&list, "resource_list", &resource_prefix).map_err(
                    |problems| ConfigError::Invalid {
                        origin: origin.into(),
                        problems,
                    },
                )?;
                Ok(SriovConfig {
                    resource_prefix,
                    source: ConfigSource::Inline,
                    resources,
                })
            }
        }
    }
}

/// Read the plugin's `config.json` at `path`; `default_prefix` is the
/// `--resource-prefix` for entries without `resourcePrefix`.
pub fn read_config_file(
    path: &Path,
    default_prefix: &str,
) -> Result<Vec<ResourceConfig>, ConfigError> {
    let bytes = std::fs::read(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        cause: source,
    })?;
    parse_config_json(&bytes, &path.display().to_string(), default_prefix)
}

/// Parse the text of a `config.json`; `origin` names it in errors.
pub fn parse_config_json(
    text: &[u8],
    origin: &str,
    default_prefix: &str,
) -> Result<Vec<ResourceConfig>, ConfigError> {
    if text.starts_with(b"\xef\xbb\xbf") {
        return Err(ConfigError::Syntax {
            origin: origin.into(),
            line: 1,
            column: 1,
            message: "the file starts with a UTF-8 byte-order mark, which JSON (and the device \
                      plugin) does not allow; save it without one"
                .into(),
        });
    }
    let value: Value = serde_json::from_slice(text).map_err(|e| {
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let text = e.to_string();
        ConfigError::Syntax {
            origin: origin.into(),
            line: e.line(),
            column: e.column(),
            message: text.strip_suffix(&suffix).unwrap_or(&text).to_owned(),
        }
    })?;
    let invalid = |problems| ConfigError::Invalid {
        origin: origin.into(),
        problems,
    };
    let top = |message: String| {
        invalid(vec![Problem {
            entry: "the top level".into(),
            key: None,
            message,
        }])
    };
    let Value::Object(object) = &value else {
        return Err(top(format!(
            "expected an object {{\"resourceList\": [...]}}, found {}",
            decode::describe(&value)
        )));
    };
    let fields = Fields::match_keys(object, &["resourceList"]);
    if let Some(key) = fields.unknown().first() {
        return Err(top(format!(
            "unknown key {key:?}; the device plugin's config has only \"resourceList\""
        )));
    }
    match fields.get("resourceList") {
        None | Some(Value::Null) => Err(top(
            "no \"resourceList\"; the device plugin's config is {\"resourceList\": [{\"resourceName\": ..., \"selectors\": [...]}]}"
                .into(),
        )),
        Some(list) => resource_list(list, "resourceList", default_prefix).map_err(invalid),
    }
}

#[cfg(test)]
mod tests;
