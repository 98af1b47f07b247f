//! Helpers shared by the benchmarks in `bench/benches/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `cargo build --release -p <packages>`; returns every built `.so` by
/// target name (e.g. `topomgr_provider_cpu`), as the host would load them.
pub fn build_release_plugins(packages: &[&str]) -> BTreeMap<String, PathBuf> {
    build_plugins(packages, true)
}

/// `cargo build -p <packages>` (`--release` when `release`); returns every
/// built `.so` by target name.
pub fn build_plugins(packages: &[&str], release: bool) -> BTreeMap<String, PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--message-format=json-render-diagnostics"]);
    if release {
        cmd.arg("--release");
    }
    for p in packages {
        cmd.args(["-p", p]);
    }
    let out = cmd
        .current_dir(workspace_root())
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut found = BTreeMap::new();
    for m in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
    {
        for f in m["filenames"].as_array().into_iter().flatten() {
            if let Some(f) = f.as_str().filter(|f| f.ends_with(".so")) {
                let name = m["target"]["name"].as_str().unwrap_or_default();
                found.insert(name.to_string(), PathBuf::from(f));
            }
        }
    }
    found
}
