//! Host configuration: `topomgr.toml`, its drop-ins, environment overrides.
//!
//! # Sources, in order (later wins)
//!
//! 1. The main file (`--config FILE`, default [`DEFAULT_CONFIG_PATH`]).
//! 2. Every `*.toml` file of the drop-in directory, in byte order of the file
//!    names (`10-cpu.toml` before `20-gpu.toml`). The directory is the main
//!    file's `plugins_d` key, default `plugins.d` (both relative to the main
//!    file's directory). A missing default directory means no drop-ins; a
//!    `plugins_d` that names a missing directory is an error.
//! 3. Environment variables `TOPOMGR_POLICY`, `TOPOMGR_SCOPE`,
//!    `TOPOMGR_SYSFS_ROOT`, `TOPOMGR_CGROUP_ROOT`, `TOPOMGR_STATE_DIR` and
//!    `TOPOMGR_PLUGIN_DIRS` (a `:`-separated list). Other `TOPOMGR_*`
//!    variables are not configuration and are ignored.
//!
//! Tables merge key by key (a drop-in may set one option of a provider's
//! `config` table); a later array replaces an earlier one.
//!
//! # Keys
//!
//! ```toml
//! policy = "best-effort"       # none | best-effort | restricted | single-numa-node
//! scope = "container"          # container | pod
//! plugin_dirs = []             # searched before the topomgr executable's own directory
//! sysfs_root = "/sys"
//! cgroup_root = "/sys/fs/cgroup"
//! state_dir = "/var/lib/topomgr"
//! plugins_d = "plugins.d"      # main file only
//! [policy_options]             # kubelet option names, string values
//! prefer-closest-numa-nodes = "true"
//! [daemon]                     # `topomgr serve`; every key optional
//! socket = "/run/topomgr/topomgr.sock"
//! group = "topomgr"            # may use the socket besides root
//! provider_timeout_ms = 10000  # deadline of one provider call
//! [providers.NAME]             # NAME: lowercase letters, digits, '-', '_'
//! library = "topomgr_provider_cpu"   # -> libtopomgr_provider_cpu.so, or a path
//! enabled = true               # default true
//! [providers.NAME.config]      # handed to the provider as JSON
//! ```
//!
//! # Relative paths
//!
//! Relative paths in files (`plugin_dirs`, `sysfs_root`, `cgroup_root`,
//! `state_dir`, `plugins_d`, and a provider `library` that is a path) are
//! resolved against the directory of the main config file, so the repository's
//! `topomgr.toml` works from any working directory. Relative paths in
//! environment variables are resolved against the working directory.
//!
//! # Errors
//!
//! Each file is checked on its own before merging, so an unknown key or a
//! value of the wrong type is reported with the file and the full key
//! (`plugins.d/10-x.toml: key `providers.x.enabled` must be a boolean, found
//! a string`). Policy and scope names are not checked here; the policy
//! module does that.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use config::{Config, File, FileFormat};
use serde::Deserialize;

/// Where `topomgr` looks for its config when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/topomgr/topomgr.toml";

/// The resolved host configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// Topology Manager policy name.
    pub policy: String,
    /// Topology Manager scope name.
    pub scope: String,
    /// Directories searched for plugin libraries, before the executable's own.
    pub plugin_dirs: Vec<PathBuf>,
    /// Root of the sysfs tree to discover.
    pub sysfs_root: PathBuf,
    /// Root of the cgroup hierarchy.
    pub cgroup_root: PathBuf,
    /// Directory for checkpoints and provider state.
    pub state_dir: PathBuf,
    /// Topology Manager policy options (kubelet names, string values).
    pub policy_options: BTreeMap<String, String>,
    /// Providers by name.
    pub providers: BTreeMap<String, ProviderEntry>,
    /// The `[daemon]` table (`topomgr serve`).
    pub daemon: DaemonConfig,
    /// The files read, in the order they were applied.
    pub files: Vec<PathBuf>,
}

/// Default socket of `topomgr serve`.
pub const DEFAULT_SOCKET: &str = "/run/topomgr/topomgr.sock";
/// Default group allowed on the daemon's socket besides root.
pub const DEFAULT_GROUP: &str = "topomgr";
/// Default deadline of one provider call in the daemon, in milliseconds.
pub const DEFAULT_PROVIDER_TIMEOUT_MS: u64 = 10_000;

/// The `[daemon]` table: settings of `topomgr serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonConfig {
    /// Unix socket path (relative paths resolve against the main file's directory).
    pub socket: PathBuf,
    /// Group that may use the socket besides root.
    pub group: String,
    /// Deadline of one provider call, in milliseconds (at least 1).
    pub provider_timeout_ms: u64,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            socket: PathBuf::from(DEFAULT_SOCKET),
            group: DEFAULT_GROUP.to_owned(),
            provider_timeout_ms: DEFAULT_PROVIDER_TIMEOUT_MS,
        }
    }
}

/// One `[providers.NAME]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderEntry {
    /// Library name (`topomgr_provider_cpu` -> `libtopomgr_provider_cpu.so`)
    /// or a path (contains `/` or ends in `.so`; relative paths are already
    /// resolved against the main config file's directory).
    pub library: String,
    /// Whether the provider is loaded.
    pub enabled: bool,
    /// The `[providers.NAME.config]` table as JSON (`Null` when absent).
    pub config: serde_json::Value,
    /// The last file that set this provider's `library`.
    pub defined_in: PathBuf,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            policy: "best-effort".to_owned(),
            scope: "container".to_owned(),
            plugin_dirs: Vec::new(),
            sysfs_root: PathBuf::from("/sys"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            state_dir: PathBuf::from("/var/lib/topomgr"),
            policy_options: BTreeMap::new(),
            providers: BTreeMap::new(),
            daemon: DaemonConfig::default(),
            files: Vec::new(),
        }
    }
}

impl HostConfig {
    /// The providers to load, in name order.
    pub fn enabled_providers(&self) -> impl Iterator<Item = (&String, &ProviderEntry)> {
        self.providers.iter().filter(|(_, p)| p.enabled)
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// The drop-in directory could not be listed.
    #[error("cannot list drop-in directory {} ({why}): {source}", path.display())]
    DropInDir {
        /// The directory.
        path: PathBuf,
        /// Where the directory came from.
        why: String,
        /// The IO error.
        source: std::io::Error,
    },
    /// A file is not valid TOML or has a bad key or value.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        message: String,
    },
    /// An environment variable has a bad value.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable.
        var: String,
        /// What is wrong.
        message: String,
    },
    /// A provider table has no `library` in any file.
    #[error(
        "provider `{name}` (last set in {}) has no `library`; add library = \"<name or path>\" to its [providers.{name}] table",
        path.display()
    )]
    MissingLibrary {
        /// The provider.
        name: String,
        /// The last file that mentioned it.
        path: PathBuf,
    },
    /// Merging the checked files failed (should not happen after the per-file checks).
    #[error("merging {files}: {message}")]
    Merge {
        /// The files, comma-separated.
        files: String,
        /// The config crate's message.
        message: String,
    },
}

/// Loads `path`, its drop-ins and the process environment's overrides.
pub fn load(path: &Path) -> Result<HostConfig, ConfigError> {
    load_with_env(path, &|var| std::env::var(var).ok())
}

/// [`load`] with an explicit environment lookup (for tests).
pub fn load_with_env(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<HostConfig, ConfigError> {
    let main = absolute(path);
    let base = main
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let main_raw = check_file(&main, true)?;

    let (dropin_dir, explicit) = match &main_raw.plugins_d {
        Some(d) => (base.join(d), true),
        None => (base.join("plugins.d"), false),
    };
    let mut files = vec![main.clone()];
    let mut raws = vec![(main.clone(), main_raw)];
    match std::fs::read_dir(&dropin_dir) {
        Ok(entries) => {
            let mut names = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|source| ConfigError::DropInDir {
                    path: dropin_dir.clone(),
                    why: dropin_reason(&main, explicit),
                    source,
                })?;
                let p = entry.path();
                if p.extension().is_some_and(|e| e == "toml") && p.is_file() {
                    names.push(p);
                }
            }
            names.sort();
            for p in names {
                let raw = check_file(&p, false)?;
                files.push(p.clone());
                raws.push((p, raw));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {}
        Err(source) => {
            return Err(ConfigError::DropInDir {
                path: dropin_dir,
                why: dropin_reason(&main, explicit),
                source,
            })
        }
    }

    let merged = merge(&files)?;
    let mut cfg = HostConfig::default();
    if let Some(v) = merged.policy {
        cfg.policy = v;
    }
    if let Some(v) = merged.scope {
        cfg.scope = v;
    }
    if let Some(v) = merged.plugin_dirs {
        cfg.plugin_dirs = v.iter().map(|d| base.join(d)).collect();
    }
    if let Some(v) = merged.sysfs_root {
        cfg.sysfs_root = base.join(v);
    }
    if let Some(v) = merged.cgroup_root {
        cfg.cgroup_root = base.join(v);
    }
    if let Some(v) = merged.state_dir {
        cfg.state_dir = base.join(v);
    }
    cfg.policy_options = merged.policy_options.unwrap_or_default();
    if let Some(d) = merged.daemon {
        if let Some(v) = d.socket {
            cfg.daemon.socket = base.join(v);
        }
        if let Some(v) = d.group {
            cfg.daemon.group = v;
        }
        if let Some(v) = d.provider_timeout_ms {
            cfg.daemon.provider_timeout_ms = v;
        }
    }
    for (name, p) in merged.providers.unwrap_or_default() {
        let defined_in = raws
            .iter()
            .rev()
            .find(|(_, r)| {
                r.providers
                    .as_ref()
                    .is_some_and(|m| m.get(&name).is_some_and(|e| e.library.is_some()))
            })
            .or_else(|| {
                raws.iter()
                    .rev()
                    .find(|(_, r)| r.providers.as_ref().is_some_and(|m| m.contains_key(&name)))
            })
            .map(|(f, _)| f.clone())
            .unwrap_or_else(|| main.clone());
        let Some(library) = p.library else {
            return Err(ConfigError::MissingLibrary {
                name,
                path: defined_in,
            });
        };
        let library = if is_path(&library) {
            base.join(&library).to_string_lossy().into_owned()
        } else {
            library
        };
        cfg.providers.insert(
            name,
            ProviderEntry {
                library,
                enabled: p.enabled.unwrap_or(true),
                config: p.config.unwrap_or(serde_json::Value::Null),
                defined_in,
            },
        );
    }
    cfg.files = files;
    apply_env(&mut cfg, env)?;
    Ok(cfg)
}

/// True when a `library` value is a path rather than a bare library name.
pub fn is_path(library: &str) -> bool {
    library.contains('/') || library.ends_with(".so")
}

fn dropin_reason(main: &Path, explicit: bool) -> String {
    if explicit {
        format!("set by `plugins_d` in {}", main.display())
    } else {
        format!("the default `plugins.d` beside {}", main.display())
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The shape every file must have; all keys optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    policy: Option<String>,
    scope: Option<String>,
    plugins_d: Option<String>,
    plugin_dirs: Option<Vec<String>>,
    sysfs_root: Option<String>,
    cgroup_root: Option<String>,
    state_dir: Option<String>,
    policy_options: Option<BTreeMap<String, String>>,
    providers: Option<BTreeMap<String, RawProvider>>,
    daemon: Option<RawDaemon>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    socket: Option<String>,
    group: Option<String>,
    provider_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    library: Option<String>,
    enabled: Option<bool>,
    config: Option<serde_json::Value>,
}

const TOP_KEYS: &[&str] = &[
    "policy",
    "scope",
    "plugins_d",
    "plugin_dirs",
    "sysfs_root",
    "cgroup_root",
    "state_dir",
    "policy_options",
    "providers",
    "daemon",
];

fn kind(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date-time",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// Reads one file and checks every key and value type, naming the key.
fn check_file(path: &Path, is_main: bool) -> Result<RawConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let msg = e.message().trim().to_owned();
        invalid(match line {
            Some(l) => format!("line {l}: {msg}"),
            None => msg,
        })
    })?;
    let want = |key: &str, v: &toml::Value, what: &str, ok: bool| -> Result<(), ConfigError> {
        if ok {
            Ok(())
        } else {
            Err(invalid(format!(
                "key `{key}` must be {what}, found {}",
                kind(v)
            )))
        }
    };
    for (key, v) in &table {
        match key.as_str() {
            "policy" | "scope" | "sysfs_root" | "cgroup_root" | "state_dir" => {
                want(key, v, "a string", v.is_str())?
            }
            "plugins_d" => {
                if !is_main {
                    return Err(invalid(
                        "key `plugins_d` is only allowed in the main config file".to_owned(),
                    ));
                }
                want(key, v, "a string", v.is_str())?
            }
            "plugin_dirs" => {
                want(key, v, "an array of strings", v.is_array())?;
                if let Some(arr) = v.as_array() {
                    for (i, d) in arr.iter().enumerate() {
                        want(&format!("plugin_dirs[{i}]"), d, "a string", d.is_str())?;
                    }
                }
            }
            "policy_options" => {
                want(key, v, "a table", v.is_table())?;
                if let Some(t) = v.as_table() {
                    for (k, o) in t {
                        want(
                            &format!("policy_options.{k}"),
                            o,
                            "a string (write \"true\", not true)",
                            o.is_str(),
                        )?;
                    }
                }
            }
            "daemon" => {
                want(key, v, "a table", v.is_table())?;
                if let Some(t) = v.as_table() {
                    check_daemon(t, &invalid)?;
                }
            }
            "providers" => {
                want(key, v, "a table", v.is_table())?;
                if let Some(t) = v.as_table() {
                    for (name, p) in t {
                        check_provider(name, p, &invalid)?;
                    }
                }
            }
            other => {
                return Err(invalid(format!(
                    "unknown key `{other}` (known keys: {})",
                    TOP_KEYS.join(", ")
                )))
            }
        }
    }
    let raw: RawConfig = table
        .try_into()
        .map_err(|e: toml::de::Error| invalid(e.message().trim().to_owned()))?;
    Ok(raw)
}

fn check_daemon(
    t: &toml::Table,
    invalid: &dyn Fn(String) -> ConfigError,
) -> Result<(), ConfigError> {
    for (k, v) in t {
        let (ok, what) = match k.as_str() {
            "socket" | "group" => (v.as_str().is_some_and(|s| !s.is_empty()), "a non-empty string"),
            "provider_timeout_ms" => (
                v.as_integer().is_some_and(|n| n >= 1),
                "a positive integer (milliseconds)",
            ),
            other => {
                return Err(invalid(format!(
                    "unknown key `{other}` in [daemon] (known keys: socket, group, provider_timeout_ms)"
                )))
            }
        };
        if !ok {
            return Err(invalid(format!(
                "key `daemon.{k}` must be {what}, found {}",
                kind(v)
            )));
        }
    }
    Ok(())
}

fn check_provider(
    name: &str,
    p: &toml::Value,
    invalid: &dyn Fn(String) -> ConfigError,
) -> Result<(), ConfigError> {
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid_name {
        return Err(invalid(format!(
            "provider name `{name}` in [providers.{name}] must be lowercase letters, digits, '-' or '_'"
        )));
    }
    let Some(t) = p.as_table() else {
        return Err(invalid(format!(
            "key `providers.{name}` must be a table, found {}",
            kind(p)
        )));
    };
    for (k, v) in t {
        let full = format!("providers.{name}.{k}");
        let (ok, what) = match k.as_str() {
            "library" => (v.as_str().is_some_and(|s| !s.is_empty()), "a non-empty string"),
            "enabled" => (v.is_bool(), "a boolean"),
            "config" => (v.is_table(), "a table"),
            other => {
                return Err(invalid(format!(
                    "unknown key `{other}` in [providers.{name}] (known keys: library, enabled, config)"
                )))
            }
        };
        if !ok {
            return Err(invalid(format!(
                "key `{full}` must be {what}, found {}",
                kind(v)
            )));
        }
    }
    Ok(())
}

/// Merges the (already checked) files with the `config` crate.
fn merge(files: &[PathBuf]) -> Result<RawConfig, ConfigError> {
    let merge_err = |e: config::ConfigError| ConfigError::Merge {
        files: files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        message: e.to_string(),
    };
    let mut builder = Config::builder();
    for f in files {
        builder = builder.add_source(
            File::from(f.as_path())
                .format(FileFormat::Toml)
                .required(true),
        );
    }
    builder
        .build()
        .map_err(merge_err)?
        .try_deserialize::<RawConfig>()
        .map_err(merge_err)
}

fn apply_env(
    cfg: &mut HostConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let cwd = |p: &str| absolute(Path::new(p));
    let non_empty = |var: &str| -> Result<Option<String>, ConfigError> {
        match env(var) {
            None => Ok(None),
            Some(v) if v.trim().is_empty() => Err(ConfigError::Env {
                var: var.to_owned(),
                message: "is set but empty; unset it or give a value".to_owned(),
            }),
            Some(v) => Ok(Some(v)),
        }
    };
    if let Some(v) = non_empty("TOPOMGR_POLICY")? {
        cfg.policy = v;
    }
    if let Some(v) = non_empty("TOPOMGR_SCOPE")? {
        cfg.scope = v;
    }
    if let Some(v) = non_empty("TOPOMGR_SYSFS_ROOT")? {
        cfg.sysfs_root = cwd(&v);
    }
    if let Some(v) = non_empty("TOPOMGR_CGROUP_ROOT")? {
        cfg.cgroup_root = cwd(&v);
    }
    if let Some(v) = non_empty("TOPOMGR_STATE_DIR")? {
        cfg.state_dir = cwd(&v);
    }
    if let Some(v) = env("TOPOMGR_PLUGIN_DIRS") {
        cfg.plugin_dirs = v.split(':').filter(|s| !s.is_empty()).map(cwd).collect();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let p =
                std::env::temp_dir().join(format!("topomgr-config-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(p.join("plugins.d")).unwrap();
            Dir(p)
        }
        fn write(&self, rel: &str, text: &str) -> PathBuf {
            let p = self.0.join(rel);
            fs::write(&p, text).unwrap();
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn err(path: &Path) -> String {
        load_with_env(path, &no_env).unwrap_err().to_string()
    }

    #[test]
    fn defaults_when_file_is_empty() {
        let d = Dir::new("empty");
        let main = d.write("topomgr.toml", "");
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert_eq!(
            cfg,
            HostConfig {
                files: vec![main],
                ..HostConfig::default()
            }
        );
    }

    #[test]
    fn dropins_merge_in_name_order_and_paths_resolve() {
        let d = Dir::new("merge");
        let main = d.write(
            "topomgr.toml",
            r#"
policy = "restricted"
plugin_dirs = ["libs", "/abs"]
state_dir = "state"
[policy_options]
prefer-closest-numa-nodes = "true"
"#,
        );
        d.write(
            "plugins.d/20-b.toml",
            r#"
policy = "single-numa-node"
[providers.mock.config]
hints = { "example.com/foo" = "none" }
nested = { a = 2 }
"#,
        );
        d.write(
            "plugins.d/10-a.toml",
            r#"
policy = "none"
[providers.mock]
library = "mock/libmock.so"
[providers.mock.config]
nested = { a = 1, b = [1, 2] }
"#,
        );
        d.write("plugins.d/README", "not toml, ignored");
        let cfg = load_with_env(&main, &no_env).unwrap();
        assert_eq!(cfg.policy, "single-numa-node");
        assert_eq!(cfg.scope, "container");
        assert_eq!(
            cfg.plugin_dirs,
            vec![d.0.join("libs"), PathBuf::from("/abs")]
        );
        assert_eq!(cfg.state_dir, d.0.join("state"));
        assert_eq!(
            cfg.policy_options,
            BTreeMap::from([("prefer-closest-numa-nodes".to_owned(), "true".to_owned())])
        );
        let mock = &cfg.providers["mock"];
        assert_eq!(mock.library, d.0.join("mock/libmock.so").to_string_lossy());
        assert!(mock.enabled);
        assert_eq!(mock.defined_in, d.0.join("plugins.d/10-a.toml"));
        assert_eq!(
            mock.config,
            serde_json::json!({"hints": {"example.com/foo": "none"}, "nested": {"a": 2, "b": [1, 2]}})
        );
        assert_eq!(
            cfg.files,
            vec![
                main,
                d.0.join("plugins.d/10-a.toml"),
                d.0.join("plugins.d/20-b.toml")
            ]
        );
    }

    #[test]
    fn unknown_keys_and_types_name_file_and_key() {
        let d = Dir::new("bad");
        let main = d.write("topomgr.toml", "");
        let f = d.write(
            "plugins.d/10-x.toml",
            "[providers.x]\nlibrary = \"x\"\nenabled = \"yes\"\n",
        );
        assert_eq!(
            err(&main),
            format!(
                "{}: key `providers.x.enabled` must be a boolean, found a string",
                f.display()
            )
        );
        d.write(
            "plugins.d/10-x.toml",
            "[providers.x]\nlibrary = \"x\"\ncolour = 1\n",
        );
        assert_eq!(
            err(&main),
            format!(
                "{}: unknown key `colour` in [providers.x] (known keys: library, enabled, config)",
                f.display()
            )
        );
        d.write("plugins.d/10-x.toml", "polcy = \"none\"\n");
        assert_eq!(
            err(&main),
            format!(
                "{}: unknown key `polcy` (known keys: policy, scope, plugins_d, plugin_dirs, sysfs_root, \
                 cgroup_root, state_dir, policy_options, providers, daemon)",
                f.display()
            )
        );
        d.write(
            "plugins.d/10-x.toml",
            "[policy_options]\nprefer-closest-numa-nodes = true\n",
        );
        assert_eq!(
            err(&main),
            format!(
                "{}: key `policy_options.prefer-closest-numa-nodes` must be a string (write \"true\", not true), found a boolean",
                f.display()
            )
        );
        d.write("plugins.d/10-x.toml", "plugin_dirs = [\"a\", 3]\n");
        assert_eq!(
            err(&main),
            format!(
                "{}: key `plugin_dirs[1]` must be a string, found an integer",
                f.display()
            )
        );
        d.write("plugins.d/10-x.toml", "plugins_d = \"x\"\n");
        assert_eq!(
            err(&main),
            format!(
                "{}: key `plugins_d` is only allowed in the main config file",
                f.display()
            )
        );
        d.write("plugins.d/10-x.toml", "[providers.Mock]\nlibrary = \"x\"\n");
        assert_eq!(
            err(&main),
            format!(
                "{}: provider name `Mock` in [providers.Mock] must be lowercase letters, digits, '-' or '_'",
                f.display()
            )
        );
        d.write("plugins.d/10-x.toml", "policy = \n");
        assert_eq!(
            err(&main),
            format!(
                "{}: line 1: string values must be quoted, expected literal string",
                f.display()
            )
        );
        d.write("plugins.d/10-x.toml", "[providers.y]\nenabled = false\n");
        assert_eq!(
            err(&main),
            format!(
                "provider `y` (last set in {}) has no `library`; add library = \"<name or path>\" to its [providers.y] table",
                f.display()
            )
        );
    }

    #[test]
    fn explicit_missing_dropin_dir_is_an_error_default_is_not() {
        let d = Dir::new("dropdir");
        fs::remove_dir_all(d.0.join("plugins.d")).unwrap();
        let main = d.write("topomgr.toml", "");
        assert!(load_with_env(&main, &no_env).is_ok());
        d.write("topomgr.toml", "plugins_d = \"conf.d\"\n");
        let e = err(&main);
        assert!(
            e.starts_with(&format!(
                "cannot list drop-in directory {} (set by `plugins_d` in {}): ",
                d.0.join("conf.d").display(),
                main.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn environment_overrides() {
        let d = Dir::new("env");
        let main = d.write(
            "topomgr.toml",
            "policy = \"restricted\"\nplugin_dirs = [\"x\"]\n",
        );
        let env = |k: &str| match k {
            "TOPOMGR_POLICY" => Some("none".to_owned()),
            "TOPOMGR_PLUGIN_DIRS" => Some("/a:/b".to_owned()),
            "TOPOMGR_STATE_DIR" => Some("/tmp/st".to_owned()),
            "TOPOMGR_LOG" => Some("debug".to_owned()),
            _ => None,
        };
        let cfg = load_with_env(&main, &env).unwrap();
        assert_eq!(cfg.policy, "none");
        assert_eq!(
            cfg.plugin_dirs,
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(cfg.state_dir, PathBuf::from("/tmp/st"));
        let env = |k: &str| (k == "TOPOMGR_SCOPE").then(String::new);
        assert_eq!(
            load_with_env(&main, &env).unwrap_err().to_string(),
            "environment variable TOPOMGR_SCOPE: is set but empty; unset it or give a value"
        );
    }

    #[test]
    fn missing_main_file() {
        let e = load_with_env(Path::new("/nonexistent/topomgr.toml"), &no_env)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "cannot read config file /nonexistent/topomgr.toml: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn daemon_table_defaults_overrides_and_errors() {
        let d = Dir::new("daemon");
        let main = d.write("topomgr.toml", "");
        assert_eq!(
            load_with_env(&main, &no_env).unwrap().daemon,
            DaemonConfig {
                socket: PathBuf::from("/run/topomgr/topomgr.sock"),
                group: "topomgr".to_owned(),
                provider_timeout_ms: 10_000,
            }
        );
        d.write(
            "plugins.d/50-daemon.toml",
            "[daemon]\nsocket = \"run/t.sock\"\ngroup = \"wheel\"\nprovider_timeout_ms = 250\n",
        );
        assert_eq!(
            load_with_env(&main, &no_env).unwrap().daemon,
            DaemonConfig {
                socket: d.0.join("run/t.sock"),
                group: "wheel".to_owned(),
                provider_timeout_ms: 250,
            }
        );
        let bad = d.write(
            "plugins.d/60-bad.toml",
            "[daemon]\nprovider_timeout_ms = 0\n",
        );
        assert_eq!(
            err(&main),
            format!(
                "{}: key `daemon.provider_timeout_ms` must be a positive integer (milliseconds), found an integer",
                bad.display()
            )
        );
        d.write("plugins.d/60-bad.toml", "[daemon]\nport = 1\n");
        assert_eq!(
            err(&main),
            format!(
                "{}: unknown key `port` in [daemon] (known keys: socket, group, provider_timeout_ms)",
                bad.display()
            )
        );
    }
}
