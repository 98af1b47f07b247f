//! Configuration through the CLI: `enabled = false` in a drop-in disables a
//! provider, errors name the file, line and key, and the config file, its
//! drop-in directory and drop-ins are protected like plugin files.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use topomgr_node::api::Admissions;

/// A config directory with the SDK example provider enabled by a drop-in.
fn config_dir(tag: &str) -> PathBuf {
    let p = common::plugins();
    let libs = p
        .widgets
        .parent()
        .expect("plugin dir")
        .display()
        .to_string();
    common::config_dir(
        tag,
        &format!(
            "policy = \"single-numa-node\"\nplugin_dirs = [\"{libs}\"]\nstate_dir = \"state\"\n"
        ),
        &[("10-widgets.toml", "[providers.widgets]\nlibrary = \"numa_widgets\"\n[providers.widgets.config]\nwidgets_per_node = 2\nresource = \"example.com/widget\"\n")],
    )
}

fn example_pod(name: &str) -> String {
    common::workspace_root()
        .join("examples/pods")
        .join(name)
        .display()
        .to_string()
}

/// `topomgr admit --dry-run` of the widgets example pod: the devices it got.
fn widget_devices(dir: &Path) -> std::collections::BTreeMap<String, Vec<String>> {
    let sys = common::example_sys();
    let pod = example_pod("guaranteed-widgets.yaml");
    let (code, out, err) =
        common::topomgr(dir, &["admit", "--dry-run", "--sysfs-root", &sys, &pod]);
    assert_eq!(code, 0, "{err}");
    let mut v: Admissions = serde_json::from_str(&out).expect("json");
    assert!(v.pods[0].admitted, "{out}");
    v.pods.remove(0).containers.remove(0).devices
}

#[test]
fn enabled_false_in_a_dropin_disables_the_provider() {
    let dir = config_dir("cfg-enabled");
    let devices = widget_devices(&dir);
    assert_eq!(
        devices.get("example.com/widget").map(Vec::len),
        Some(2),
        "{devices:?}"
    );
    fs::write(
        dir.join("plugins.d/90-off.toml"),
        "[providers.widgets]\nenabled = false\n",
    )
    .expect("write");
    // Nobody serves the widgets any more: the pod is refused as the kubelet
    // refuses a resource the node does not have.
    let sys = common::example_sys();
    let pod = example_pod("guaranteed-widgets.yaml");
    let (code, out, err) =
        common::topomgr(&dir, &["admit", "--dry-run", "--sysfs-root", &sys, &pod]);
    assert_eq!(code, 0, "{err}");
    let v: Admissions = serde_json::from_str(&out).expect("json");
    let reason = v.pods[0].reason.as_deref();
    assert_eq!(reason, Some("OutOfexample.com/widget"), "{out}");
    let (code, _, err) = common::topomgr(
        &dir,
        &[
            "provider",
            "widgets",
            "hints",
            "--sysfs-root",
            &sys,
            "--pod",
            &pod,
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "provider \"widgets\" is disabled (enabled = false in the configuration read from"
        ),
        "{err}"
    );
}

#[test]
fn config_errors_name_the_file_line_and_key() {
    let dir = config_dir("cfg-errors");
    let bad = dir.join("plugins.d/20-bad.toml");
    fs::write(&bad, "[providers.widgets]\nenabled = \"no\"\n").expect("write");
    let (code, _, err) =
        common::topomgr(&dir, &["topology", "--sysfs-root", &common::example_sys()]);
    assert_eq!(code, 2);
    assert_eq!(
        err.trim_end(),
        format!(
            "topomgr: error: {}: line 2: providers.widgets.enabled: invalid type: string \"no\", expected a boolean",
            bad.display()
        )
    );
}

/// A world-writable drop-in directory would let anyone add
/// `[daemon] group = "theirs"`: `serve` (always) and any command run as
/// root refuse it, naming the path, with the plugin files' message.
#[test]
fn world_writable_dropin_directory_is_refused() {
    let dir = config_dir("cfg-protect");
    let dropins = dir.join("plugins.d");
    fs::set_permissions(&dropins, fs::Permissions::from_mode(0o777)).expect("chmod");
    let want = format!(
        "topomgr: error: refusing drop-in directory {0}: {0} is writable by everyone (mode 0777); run chmod o-w on it",
        dropins.display()
    );
    let socket = dir.join("tm.sock").display().to_string();
    let state = dir.join("state").display().to_string();
    let sys = common::example_sys();
    let serve = || {
        common::topomgr(
            &dir,
            &[
                "serve",
                "--socket",
                &socket,
                "--state-dir",
                &state,
                "--sysfs-root",
                &sys,
            ],
        )
    };
    let (code, _, err) = serve();
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim_end(), want);
    assert!(!Path::new(&socket).exists());

    let (code, _, err) =
        common::topomgr(&dir, &["topology", "--sysfs-root", &common::example_sys()]);
    if common::is_root() {
        assert_eq!(code, 2, "{err}");
        assert_eq!(err.trim_end(), want);
    } else {
        assert_eq!(
            code, 0,
            "a non-root user's own config is not checked: {err}"
        );
    }

    // A group-writable drop-in file, once the directory is fixed.
    fs::set_permissions(&dropins, fs::Permissions::from_mode(0o755)).expect("chmod");
    let file = dropins.join("10-widgets.toml");
    fs::set_permissions(&file, fs::Permissions::from_mode(0o664)).expect("chmod");
    let (code, _, err) = serve();
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with(&format!(
            "topomgr: error: refusing drop-in {0}: {0} is writable by its group",
            file.display()
        )),
        "{err}"
    );
}

/// Without a config file (the default path absent) a command that loads
/// providers warns at normal verbosity, naming the file and how to fix it,
/// and the `TOPOMGR_*` variables still apply over the built-in defaults.
#[test]
fn a_missing_default_config_file_is_warned_about_and_the_environment_applies() {
    let default = Path::new(topomgr_node::setup::config::DEFAULT_CONFIG_PATH);
    assert!(
        !default.exists(),
        "this test checks what runs without {}; it exists here",
        default.display()
    );
    let warning = "topomgr: warning: no config file at /etc/topomgr/topomgr.toml; using the built-in defaults, which configure no provider: nothing is aligned and pods that request devices are refused. Create /etc/topomgr/topomgr.toml (the source tree's topomgr.toml and plugins.d/ are a starting point) or pass --config FILE\n";
    let sys = common::example_sys();
    let pod = common::workspace_root().join("examples/pods/besteffort.yaml");
    let admit = |policy: &str| {
        std::process::Command::new(common::topomgr_bin())
            .args(["admit", "--sysfs-root", &sys])
            .arg(&pod)
            .env("TOPOMGR_POLICY", policy)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let out = admit("single-numa-node");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stderr), warning);
    let v: Admissions = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.pods[0].admitted);
    // The environment's policy is the one used: a bad one is refused.
    let out = admit("sideways");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with(warning), "{stderr}");
    assert!(stderr[warning.len()..].contains("sideways"), "{stderr}");
    // A command that loads no provider does not warn.
    let out = std::process::Command::new(common::topomgr_bin())
        .args(["topology", "--sysfs-root", &sys])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
