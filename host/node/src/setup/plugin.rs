//! Loading hint providers from their shared libraries.
//!
//! This is the only host module that touches `abi_stable`. A provider entry's
//! `library` is either a bare name (`topomgr_provider_cpu` means the file
//! `libtopomgr_provider_cpu.so`, looked up in [`search_dirs`] order) or a path
//! (it contains `/` or ends in `.so`).
//!
//! Before a file is opened, it and every directory above it must pass
//! `crate::setup::trusted_file::check` (owned by root or the user running
//! topomgr, not writable by group or others). Each file
//! is loaded with its own `lib_header_from_path(..).init_root_module()` so
//! that different plugins never share a cached root module. abi_stable checks
//! the SDK version and every type's layout; the host then compares
//! [`SDK_ABI_VERSION`]. Libraries are never unloaded.

use std::path::{Path, PathBuf};

use topomgr_sdk::abi_stable::library::{lib_header_from_path, LibraryError};
use topomgr_sdk::abi_stable::std_types::RStr;
use topomgr_sdk::ffi::{self, FfiInit, ProviderModRef};
use topomgr_sdk::{Machine, ProviderError, SDK_ABI_VERSION, SDK_VERSION};

use crate::setup::config::{is_path, HostConfig, ProviderEntry};
use crate::setup::trusted_file;
use topomgr_engine::provider::LoadedProvider;

/// A constructor's error; a config error names the provider's config
/// table, the place its key paths are relative to, and the file that
/// configures the provider.
fn init_error(provider: &str, error: &ProviderError, config_file: &Path) -> String {
    if error.reason != "InvalidConfig" {
        return error.to_string();
    }
    let file = if config_file.as_os_str().is_empty() {
        String::new()
    } else {
        format!(" (configured in {})", config_file.display())
    };
    format!(
        "InvalidConfig in [providers.{provider}.config]{file}: {}",
        error.message
    )
}

/// Why a provider could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The library file does not exist in any searched place.
    #[error(
        "provider `{provider}`: plugin library `{library}` not found; looked for {}",
        looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NotFound {
        /// The provider name.
        provider: String,
        /// The configured `library` value.
        library: String,
        /// Every path tried, in order.
        looked: Vec<PathBuf>,
    },
    /// The file or a directory above it could be replaced by someone else.
    #[error("provider `{provider}`: refusing plugin {}: {why}", path.display())]
    Insecure {
        /// The provider name.
        provider: String,
        /// The plugin file.
        path: PathBuf,
        /// Which path is unsafe and why.
        why: String,
    },
    /// The dynamic loader could not open the file.
    #[error("provider `{provider}`: cannot load {}: {reason}", path.display())]
    Open {
        /// The provider name.
        provider: String,
        /// The plugin file.
        path: PathBuf,
        /// The loader's message.
        reason: String,
    },
    /// The file is a shared library but not a topomgr plugin.
    #[error("provider `{provider}`: {} is not a topomgr plugin ({why})", path.display())]
    NotAPlugin {
        /// The provider name.
        provider: String,
        /// The plugin file.
        path: PathBuf,
        /// What is missing.
        why: String,
    },
    /// The plugin was built against an SDK the host cannot talk to.
    #[error(
        "provider `{provider}`: {} was built against an incompatible topomgr SDK: {what}; rebuild it with topomgr-sdk {SDK_VERSION}",
        path.display()
    )]
    Incompatible {
        /// The provider name.
        provider: String,
        /// The plugin file.
        path: PathBuf,
        /// What differs, in one line.
        what: String,
    },
    /// The provider's constructor refused (usually its config).
    #[error("provider `{provider}` ({}) failed to start: {}", path.display(), init_error(provider, error, config_file))]
    Init {
        /// The provider name.
        provider: String,
        /// The plugin file.
        path: PathBuf,
        /// The config file that set the provider's `library` (empty when
        /// it was configured without one).
        config_file: PathBuf,
        /// The provider's error (part of the message).
        error: ProviderError,
    },
    /// The machine description could not be encoded for the plugin.
    #[error("provider `{provider}`: cannot encode the machine description: {reason}")]
    Machine {
        /// The provider name.
        provider: String,
        /// The encoder's message.
        reason: String,
    },
}

/// Where bare library names are looked up: the config's `plugin_dirs`, then
/// the directory of the running executable.
pub fn search_dirs(cfg: &HostConfig) -> Vec<PathBuf> {
    let mut dirs = cfg.plugin_dirs.clone();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// The file name of a bare library name: `lib<name>.so`.
pub(crate) fn library_file_name(library: &str) -> String {
    format!("lib{library}.so")
}

/// Finds the file for a `library` value.
pub(crate) fn resolve_library(
    provider: &str,
    library: &str,
    search_dirs: &[PathBuf],
) -> Result<PathBuf, PluginError> {
    let looked: Vec<PathBuf> = if is_path(library) {
        vec![PathBuf::from(library)]
    } else {
        let file = library_file_name(library);
        search_dirs.iter().map(|d| d.join(&file)).collect()
    };
    looked
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| PluginError::NotFound {
            provider: provider.to_owned(),
            library: library.to_owned(),
            looked,
        })
}

/// The log level the host records, as [`FfiInit::log_max_level`] encodes it.
fn host_max_level() -> u8 {
    use tracing::level_filters::LevelFilter;
    match LevelFilter::current() {
        LevelFilter::OFF => 0,
        LevelFilter::ERROR => 1,
        LevelFilter::WARN => 2,
        LevelFilter::INFO => 3,
        LevelFilter::DEBUG => 4,
        _ => 5,
    }
}

/// Receives a plugin's rendered `tracing` events.
extern "C" fn host_log(level: u8, target: RStr<'_>, message: RStr<'_>) {
    let target = target.as_str();
    let message = message.as_str();
    match level {
        0 | 1 => tracing::error!(target: "topomgr::plugin", plugin_target = target, "{message}"),
        2 => tracing::warn!(target: "topomgr::plugin", plugin_target = target, "{message}"),
        3 => tracing::info!(target: "topomgr::plugin", plugin_target = target, "{message}"),
        4 => tracing::debug!(target: "topomgr::plugin", plugin_target = target, "{message}"),
        _ => tracing::trace!(target: "topomgr::plugin", plugin_target = target, "{message}"),
    }
}

/// Loads provider `name` from its library, checks it and constructs it.
///
/// `state_dir` is the host's state directory; the provider is handed
/// `<state_dir>/providers/<name>` (which may not exist yet).
pub fn load_provider(
    name: &str,
    entry: &ProviderEntry,
    search_dirs: &[PathBuf],
    machine: &Machine,
    state_dir: &Path,
) -> Result<LoadedProvider, PluginError> {
    let machine_json = serde_json::to_value(machine).map_err(|e| PluginError::Machine {
        provider: name.to_owned(),
        reason: e.to_string(),
    })?;
    load_provider_from_json(name, entry, search_dirs, &machine_json, state_dir)
}

/// [`load_provider`] with the machine description already in its JSON form
/// (the form plugins receive: a recorded `topomgr topology` output, or one
/// from a host with more discovery fields, which plugins ignore).
pub fn load_provider_from_json(
    name: &str,
    entry: &ProviderEntry,
    search_dirs: &[PathBuf],
    machine_json: &serde_json::Value,
    state_dir: &Path,
) -> Result<LoadedProvider, PluginError> {
    let found = resolve_library(name, &entry.library, search_dirs)?;
    let path = found.canonicalize().map_err(|e| PluginError::Open {
        provider: name.to_owned(),
        path: found.clone(),
        reason: e.to_string(),
    })?;
    trusted_file::check(&path).map_err(|why| PluginError::Insecure {
        provider: name.to_owned(),
        path: path.clone(),
        why,
    })?;
    let module = open_module(name, &path)?;
    let plugin_abi = module.sdk_abi_version();
    if plugin_abi != SDK_ABI_VERSION {
        return Err(PluginError::Incompatible {
            provider: name.to_owned(),
            path,
            what: format!("SDK ABI version {plugin_abi}, the host speaks {SDK_ABI_VERSION}"),
        });
    }
    let provider_state = state_dir.join("providers").join(name);
    let init = FfiInit {
        init_json: ffi::init_json(
            name,
            machine_json,
            &entry.config,
            &provider_state,
            Some(entry.config_dir.as_path()).filter(|d| !d.as_os_str().is_empty()),
        )
        .into(),
        log: host_log,
        log_max_level: host_max_level(),
    };
    let handle = ffi::construct(module, init).map_err(|error| PluginError::Init {
        provider: name.to_owned(),
        path: path.clone(),
        config_file: entry.defined_in.clone(),
        error,
    })?;
    tracing::info!(provider = name, path = %path.display(), "provider loaded");
    Ok(LoadedProvider::new(name, Some(path), handle))
}

fn open_module(name: &str, path: &Path) -> Result<ProviderModRef, PluginError> {
    let result = lib_header_from_path(path).and_then(|h| h.init_root_module::<ProviderModRef>());
    result.map_err(|e| {
        tracing::debug!(provider = name, path = %path.display(), error = %e, "plugin load failed");
        classify(name, path, &e)
    })
}

/// Turns abi_stable's (long) error into a one-line [`PluginError`].
fn classify(name: &str, path: &Path, e: &LibraryError) -> PluginError {
    let provider = name.to_owned();
    let path = path.to_path_buf();
    let incompatible = |what: String| PluginError::Incompatible {
        provider: provider.clone(),
        path: path.clone(),
        what,
    };
    match e {
        LibraryError::OpenError { err, .. } => PluginError::Open {
            provider,
            path,
            reason: err.to_string(),
        },
        LibraryError::GetSymbolError { .. } => PluginError::NotAPlugin {
            provider,
            path,
            why: "it exports no topomgr root module; build it with topomgr_sdk::export_provider!"
                .to_owned(),
        },
        LibraryError::ParseVersionError(v) => incompatible(format!("unreadable SDK version: {v}")),
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => incompatible(format!(
            "plugin SDK version {actual_version}, host SDK version {expected_version}; the 0.MINOR versions must match"
        )),
        LibraryError::RootModule { err, .. } => PluginError::Open {
            provider,
            path,
            reason: format!("its root module failed to initialise: {err}"),
        },
        LibraryError::AbiInstability(text) => {
            let text = text.to_string();
            match root_module_types(&text) {
                Some((ours, theirs)) if ours != theirs => PluginError::NotAPlugin {
                    provider,
                    path,
                    why: format!("its root module is `{theirs}`, not topomgr's `{ours}`"),
                },
                _ => incompatible(summarize(&text)),
            }
        }
        LibraryError::InvalidAbiHeader(_) => {
            incompatible("it was built with an incompatible abi_stable".to_owned())
        }
        LibraryError::InvalidCAbi { .. } => {
            incompatible("it was built by a compiler with a different C ABI".to_owned())
        }
        LibraryError::Many(list) => match list.first() {
            Some(first) => classify(name, &path, first),
            None => incompatible("unknown load error".to_owned()),
        },
    }
}

/// The root module type names of the host (`<this>`) and the plugin
/// (`<other>`) from abi_stable's layout report.
fn root_module_types(report: &str) -> Option<(String, String)> {
    let first_phantom_type = |section: &str| -> Option<String> {
        let after = section.split("Phantom fields:").nth(1)?;
        after
            .lines()
            .find_map(|l| l.trim().strip_prefix("type:"))
            .map(|t| t.trim().to_owned())
    };
    let (this, other) = report.split_once("To <other>:")?;
    Some((first_phantom_type(this)?, first_phantom_type(other)?))
}

/// Stack-trace field names that say nothing to a reader.
fn is_plumbing(name: &str) -> bool {
    matches!(name, "__returns" | "buffer" | "obj" | "vtable")
        || name.starts_with("field_")
        || name.chars().all(|c| c.is_ascii_digit())
}

/// One line for abi_stable's (long) layout report: the first type that
/// differs, the path from the root module to it, and what differs.
///
/// abi_stable hands the report over as formatted text only, so this reads
/// its fixed layout: blocks headed `N error(s)`, each with the stack trace
/// (`field_name:` / `type:` lines) before `Layout of expected type:`, and
/// `Error:<what>`, `Expected:`, `Found:` lines at the end.
fn summarize(report: &str) -> String {
    let lines: Vec<&str> = report.lines().collect();
    let header = |l: &str| -> Option<usize> {
        let t = l.trim();
        let (n, rest) = t.split_once(' ')?;
        if rest.starts_with("error(s)") {
            n.parse().ok()
        } else {
            None
        }
    };
    let Some(start) = lines.iter().position(|l| header(l).is_some_and(|n| n > 0)) else {
        return "type layouts differ".to_owned();
    };
    let end = lines[start + 1..]
        .iter()
        .position(|l| header(l).is_some())
        .map_or(lines.len(), |k| start + 1 + k);
    let block = &lines[start..end];
    let trace_end = block
        .iter()
        .position(|l| l.trim() == "Layout of expected type:")
        .unwrap_or(block.len());
    let mut path: Vec<&str> = Vec::new();
    let mut inner_type = None;
    for l in &block[..trace_end] {
        let t = l.trim();
        if let Some(name) = t.strip_prefix("field_name:") {
            if !is_plumbing(name) && path.last() != Some(&name) {
                path.push(name);
            }
        } else if let Some(ty) = t.strip_prefix("type:") {
            inner_type = Some(ty.trim());
        }
    }
    let after = |label: &str| -> Option<&str> {
        let k = block.iter().position(|l| l.trim() == label)?;
        block.get(k + 1).map(|l| l.trim())
    };
    let what = block
        .iter()
        .find_map(|l| l.trim().strip_prefix("Error:"))
        .map(str::trim)
        .unwrap_or("layout differs");
    let mut out = match inner_type {
        Some(t) => format!("type {t}"),
        None => "the root module".to_owned(),
    };
    if !path.is_empty() {
        out.push_str(&format!(" (via {})", path.join(".")));
    }
    out.push_str(&format!(": {what}"));
    if let (Some(e), Some(f)) = (after("Expected:"), after("Found:")) {
        out.push_str(&format!(", host {e}, plugin {f}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "Compared <this>:
    --- Type Layout ---
    type:PrefixRef<'a, ProviderMod>
    Phantom fields:
        field_name:0
        type:ProviderMod
To <other>:
    --- Type Layout ---
    Phantom fields:
        field_name:0
        type:ProviderMod
0 error(s).
0 error(s)inside:
    <other>
    field_name:0
    type:ProviderMod
Layout of expected type:
    type:Ignored
1 error(s)inside:
    <other>
    field_name:0
    type:ProviderMod
    field_name:new
    type:AFunctionPointer
    field_name:__returns
    type:RResult
    field_name:pod
    type:FfiPod
Layout of expected type:
    type:FfiPod
Layout of found type:
    type:FfiPod
Error:too many fields
Expected:
    6
Found:
    7
";

    #[test]
    fn summarizes_the_first_real_difference() {
        assert_eq!(
            summarize(REPORT),
            "type FfiPod (via new.pod): too many fields, host 6, plugin 7"
        );
        assert_eq!(summarize("garbage"), "type layouts differ");
        assert_eq!(
            root_module_types(REPORT),
            Some(("ProviderMod".to_owned(), "ProviderMod".to_owned()))
        );
    }

    #[test]
    fn library_names_and_ownership() {
        assert_eq!(
            library_file_name("topomgr_provider_cpu"),
            "libtopomgr_provider_cpu.so"
        );
        assert_eq!(trusted_file::check(Path::new("/")), Ok(()));
        let tmp = std::env::temp_dir().join(format!("topomgr-own-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o757)).unwrap();
        assert_eq!(
            trusted_file::check(&tmp),
            Err(format!(
                "{} is writable by everyone (mode 0757); run chmod o-w on it",
                tmp.display()
            ))
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
