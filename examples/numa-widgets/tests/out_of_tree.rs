//! The SDK's worked example, built as a vendor would build it outside this
//! workspace (`tests/vendor-example`: the example file as it is, a
//! dependency on the SDK and nothing else), then loaded as a plugin: the
//! library's root module is checked (SDK version, every type's layout) and
//! the provider is constructed and called through the plugin boundary.

use std::path::{Path, PathBuf};
use std::process::Command;

use topomgr_sdk::abi_stable::library::lib_header_from_path;
use topomgr_sdk::ffi::{self, FfiInit, ProviderModRef};
use topomgr_sdk::serde_json::{self, json, Value};
use topomgr_sdk::{testkit, Conflict, ProviderHints};

const W: &str = "example.com/widget";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds `tests/vendor-example` (in the target directory the other
/// out-of-tree fixtures share) and returns its `.so`.
fn build_vendor_example() -> PathBuf {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "build",
            "--message-format=json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(root.join("tests/vendor-example/Cargo.toml"))
        .arg("--target-dir")
        .arg(root.join("target/fixtures"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "building tests/vendor-example failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "numa_widgets")
        .flat_map(|m| m["filenames"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f.as_str().map(PathBuf::from))
        .find(|f| f.extension().is_some_and(|e| e == "so"))
        .expect("cargo built libnuma_widgets.so")
}

#[test]
fn the_vendor_crate_is_the_example_verbatim_on_the_sdk_alone() {
    let manifest =
        std::fs::read_to_string(workspace_root().join("tests/vendor-example/Cargo.toml")).unwrap();
    let table: Vec<&str> = manifest
        .lines()
        .skip_while(|l| *l != "[dependencies]")
        .skip(1)
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(table, [r#"topomgr-sdk = { path = "../../sdk" }"#]);
    assert!(manifest.contains(r#"path = "../../sdk/examples/numa_widgets.rs""#));
}

#[test]
fn the_example_built_outside_the_workspace_loads_and_works() {
    let library = build_vendor_example();
    let module = lib_header_from_path(&library)
        .and_then(|h| h.init_root_module::<ProviderModRef>())
        .unwrap_or_else(|e| panic!("loading {}: {e}", library.display()));
    assert_eq!(module.sdk_abi_version(), ffi::SDK_ABI_VERSION);
    let machine = serde_json::to_value(testkit::machine(2, 2)).unwrap();
    let state_dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let init = |config: Value| FfiInit {
        init_json: ffi::init_json("widgets", &machine, &config, state_dir, None).into(),
        log: ffi::discard_log,
        log_max_level: 0,
    };
    let mut widgets = ffi::construct(module, init(json!({"widgets_per_node": 2}))).unwrap();

    let pod = testkit::guaranteed_pod("a", &[(W, 2)]);
    let hints: ProviderHints = widgets.topology_hints(&pod, &pod.containers[0]).unwrap();
    testkit::assert_hints(&hints, W, &[0, 1], Some(&["0:true", "1:true", "0-1:false"]));
    let a = widgets
        .allocate(&pod, &pod.containers[0], &testkit::hint("1:true"))
        .unwrap();
    assert_eq!(a.env["WIDGET_DEVICES"], "widget-1-0,widget-1-1");
    assert_eq!(widgets.inventory().unwrap().resources[W].total.available, 2);

    // Restarted with fewer widgets: the pod keeps what remains, the report
    // says what it misses, and the missing widget is nobody else's.
    let saved = widgets.checkpoint().unwrap();
    let mut fewer = ffi::construct(module, init(json!({"widgets_per_node": 1}))).unwrap();
    let report = fewer.restore(&saved).unwrap();
    assert_eq!(
        report.conflicts,
        [Conflict::new("a-uid", "app", W, "device widget-1-1 is gone").with_ids(["widget-1-1"])]
    );
    assert_eq!(fewer.inventory().unwrap().resources[W].total.available, 1);

    // The config type the example declares refuses unknown keys.
    let err = ffi::construct(
        module,
        init(json!({"widgets_per_node": 1, "colour": "red"})),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "InvalidConfig: unknown field `colour`, expected `widgets_per_node` or `resource`"
    );
}
