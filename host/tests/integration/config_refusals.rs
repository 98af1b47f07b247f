//! Configurations that would expose a resource twice, or that name what is
//! not a config file, are refused at start (daemon and commands alike)
//! naming what is wrong and where.

use crate::common;

use std::fs;
use std::path::Path;

fn config(tag: &str, providers: &str) -> std::path::PathBuf {
    let main = format!(
        "policy = \"single-numa-node\"\nsysfs_root = \"{}\"\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n{providers}",
        common::example_sys()
    );
    common::config_dir(tag, &main, &[])
}

/// A pod of one container with `limits` (`cpu: 2, memory: 1Gi` and more).
fn pod_file(dir: &Path, limits: &str) -> String {
    let path = dir.join("pod.yaml");
    fs::write(
        &path,
        format!("kind: Pod\nmetadata: {{name: p, uid: p}}\nspec:\n  containers:\n  - name: a\n    resources: {{limits: {{{limits}}}}}\n"),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

/// Two CPU providers (today a 2-CPU pod got 3 exclusive CPUs) and two
/// widget providers (a 1-widget pod got `widget-0-0` twice) are refused,
/// naming both providers and the resource.
#[test]
fn two_providers_owning_one_resource_are_refused() {
    let cpu = common::cpu_plugin().display().to_string();
    let widgets = common::plugins().widgets.display().to_string();
    for (tag, providers, resource, first, second) in [
        (
            "refuse-two-cpu",
            format!("[providers.cpu]\nlibrary = \"{cpu}\"\n[providers.cpu.config]\npolicy = \"static\"\n[providers.cpu2]\nlibrary = \"{cpu}\"\n[providers.cpu2.config]\npolicy = \"static\"\n"),
            "cpu",
            "cpu",
            "cpu2",
        ),
        (
            "refuse-two-widgets",
            format!("[providers.more-widgets]\nlibrary = \"{widgets}\"\n[providers.more-widgets.config]\nwidgets_per_node = 1\n[providers.widgets]\nlibrary = \"{widgets}\"\n[providers.widgets.config]\nwidgets_per_node = 2\n"),
            "example.com/widget",
            "more-widgets",
            "widgets",
        ),
    ] {
        let dir = config(tag, &providers);
        // The pod asks for what the providers own (widgets only where a
        // widget provider is enabled).
        let limits = if resource == "cpu" {
            "cpu: 2, memory: 1Gi"
        } else {
            "cpu: 2, memory: 1Gi, example.com/widget: 1"
        };
        let pod = pod_file(&dir, limits);
        let (code, out, err) = common::topomgr(&dir, &["admit", &pod]);
        assert_eq!(code, 2, "{out}");
        assert_eq!(
            err,
            format!(
                "topomgr: error: providers {first:?} and {second:?} both own resource {resource:?} (the inventories they give at start both list it); their allocations would be combined and a pod given more than it asked for. Enable only one of them: set enabled = false in [providers.{second}] ({}), or configure the two for different resources\n",
                dir.join("topomgr.toml").display()
            )
        );
        // The remedy works: the second one disabled, the pod is admitted.
        let toml = fs::read_to_string(dir.join("topomgr.toml")).unwrap();
        fs::write(
            dir.join("topomgr.toml"),
            toml.replace(
                &format!("[providers.{second}]\n"),
                &format!("[providers.{second}]\nenabled = false\n"),
            ),
        )
        .unwrap();
        let (code, out, err) = common::topomgr(&dir, &["admit", &pod]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("\"admitted\": true"), "{out}");
    }
}

/// A drop-in that is a broken symbolic link, or a directory named like a
/// drop-in, is refused naming it (before, it was skipped in silence).
#[test]
fn a_dropin_that_is_not_a_file_is_refused() {
    let dir = config("refuse-dropins", "");
    let link = dir.join("plugins.d/20-gpu.toml");
    std::os::unix::fs::symlink(dir.join("nowhere.toml"), &link).unwrap();
    let (code, _, err) = common::topomgr(&dir, &["topology"]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!(
            "topomgr: error: drop-in {} is a symbolic link to {:?}, which does not exist, not a config file: remove it, or rename it without .toml\n",
            link.display(),
            dir.join("nowhere.toml").display().to_string()
        )
    );
    fs::remove_file(&link).unwrap();
    let sub = dir.join("plugins.d/30-extra.toml");
    fs::create_dir(&sub).unwrap();
    let (code, _, err) = common::topomgr(&dir, &["topology"]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        format!(
            "topomgr: error: drop-in {} is a directory, not a config file: remove it, or rename it without .toml\n",
            sub.display()
        )
    );
    // The remedy named works.
    fs::remove_dir(&sub).unwrap();
    let (code, _, err) = common::topomgr(&dir, &["topology"]);
    assert_eq!(code, 0, "{err}");
}

/// A policy key the policy module refuses is named with the place that set
/// it: the file (a drop-in here), or the environment variable.
#[test]
fn a_bad_policy_value_names_the_file_or_variable_that_set_it() {
    let dir = config("refuse-policy", "");
    let pod = pod_file(&dir, "cpu: 2, memory: 1Gi, example.com/widget: 1");
    let dropin = dir.join("plugins.d/10-policy.toml");
    fs::write(&dropin, "policy = \"strict\"\n").unwrap();
    let (code, _, err) = common::topomgr(&dir, &["admit", &pod]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err,
        format!(
            "topomgr: error: cannot create the Topology Manager policy: unknown policy: \"strict\" (expected none, best-effort, restricted or single-numa-node) (`policy` in {})\n",
            dropin.display()
        )
    );
    fs::remove_file(&dropin).unwrap();
    let out = std::process::Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(dir.join("topomgr.toml"))
        .args(["admit", &pod])
        .env("TOPOMGR_SCOPE", "node")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "topomgr: error: cannot create the Topology Manager policy: unknown scope: \"node\" (expected container or pod) (`scope` from environment variable TOPOMGR_SCOPE)\n"
    );
}

/// An unknown `numa-allocation-strategy` is refused at start, naming the
/// value, the allowed ones and the key with the file that set it; a known
/// one is taken.
#[test]
fn an_unknown_numa_allocation_strategy_is_refused_naming_key_value_and_the_allowed_ones() {
    let dir = config("refuse-strategy", "");
    let pod = pod_file(&dir, "cpu: 2, memory: 1Gi");
    let dropin = dir.join("plugins.d/10-strategy.toml");
    fs::write(
        &dropin,
        "[policy_options]\nnuma-allocation-strategy = \"pack\"\n",
    )
    .unwrap();
    let (code, _, err) = common::topomgr(&dir, &["admit", &pod]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err,
        format!(
            "topomgr: error: cannot create the Topology Manager policy: bad value for option \"numa-allocation-strategy\": \"pack\" (expected lowest-index, most-allocated or least-allocated (none is accepted as upstream's spelling of lowest-index)) (`policy_options.numa-allocation-strategy` in {})\n",
            dropin.display()
        )
    );
    fs::write(
        &dropin,
        "[policy_options]\nnuma-allocation-strategy = \"most-allocated\"\n",
    )
    .unwrap();
    let (code, out, err) = common::topomgr(&dir, &["admit", &pod]);
    assert_eq!(code, 0, "{out}{err}");
}
