//! Loads the real plugin libraries (mock, SDK example, a plugin built against
//! an incompatible SDK) the way the host does and checks every failure path.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use topomgr_engine::provider::LoadedProvider;
use topomgr_node::setup::config::{HostConfig, ProviderEntry};
use topomgr_node::setup::plugin::{load_provider, search_dirs, PluginError};
use topomgr_sdk::{testkit, NumaMask, PreferredAllocationRequest, ProviderError, TopologyHint};

const W: &str = "example.com/widget";

fn entry(library: &Path, config: serde_json::Value) -> ProviderEntry {
    ProviderEntry {
        library: library.to_string_lossy().into_owned(),
        enabled: true,
        config,
        defined_in: PathBuf::from("test"),
        config_dir: PathBuf::new(),
    }
}

fn state_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-state")
}

fn load(
    name: &str,
    library: &Path,
    config: serde_json::Value,
) -> Result<LoadedProvider, PluginError> {
    load_provider(
        name,
        &entry(library, config),
        &[],
        &testkit::machine(2, 2),
        &state_dir(),
    )
}

fn load_ok(name: &str, library: &Path, config: serde_json::Value) -> LoadedProvider {
    load(name, library, config).unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

fn hint_strings(h: &topomgr_sdk::ProviderHints, resource: &str) -> Option<Vec<String>> {
    testkit::hint_strings(h, resource, &[0, 1])
}

#[test]
fn mock_answers_what_its_config_scripts() {
    let p = common::plugins();
    let mut mock = load_ok(
        "mock",
        &p.mock,
        json!({
            "hints": {
                "example.com/foo": [{"affinity": [0], "preferred": true}, {"affinity": [0, 1], "preferred": false}],
                "example.com/bar": "none",
                "example.com/baz": {"minimal": [[1]], "preferred_width": 1},
                "example.com/none-fit": []
            },
            "allocation": {"cpus": "0-1", "exclusive": true, "mems": [0],
                           "devices": {"example.com/foo": ["foo-0"]}, "env": {"FOO": "foo-0"}}
        }),
    );
    assert_eq!(mock.name(), "mock");
    assert_eq!(mock.library().unwrap(), p.mock.canonicalize().unwrap());
    let pod = testkit::guaranteed_pod("a", &[("example.com/foo", 1)]);
    let h = mock.topology_hints(&pod, &pod.containers[0]).unwrap();
    assert_eq!(
        hint_strings(&h, "example.com/foo"),
        Some(vec!["0:true".to_owned(), "0-1:false".to_owned()])
    );
    assert_eq!(hint_strings(&h, "example.com/bar"), None);
    assert!(h.as_ref().unwrap().contains_key("example.com/bar"));
    assert_eq!(
        hint_strings(&h, "example.com/baz"),
        Some(vec!["1:true".to_owned(), "0-1:false".to_owned()])
    );
    assert_eq!(hint_strings(&h, "example.com/none-fit"), Some(vec![]));
    let a = mock
        .allocate(
            &pod,
            &pod.containers[0],
            &TopologyHint::new(NumaMask::single(0.into()), true),
        )
        .unwrap();
    assert_eq!(a.cpus.to_string(), "0-1");
    assert!(a.exclusive);
    assert_eq!(a.mems.to_string(), "0");
    assert_eq!(
        a.devices,
        BTreeMap::from([("example.com/foo".to_owned(), vec!["foo-0".to_owned()])])
    );
    assert_eq!(
        a.env,
        BTreeMap::from([("FOO".to_owned(), "foo-0".to_owned())])
    );
    mock.release("a-uid", "app").unwrap();
    let cp = mock.checkpoint().unwrap();
    assert_eq!(
        String::from_utf8(cp.clone()).unwrap(),
        r#"{"calls":["allocate a-uid app","release a-uid app"]}"#
    );
    let mut again = load_ok("mock2", &p.mock, json!({"no_map": true}));
    assert_eq!(
        again.topology_hints(&pod, &pod.containers[0]).unwrap(),
        None
    );
    again.restore(&cp).unwrap();
    assert_eq!(again.checkpoint().unwrap(), cp);
    assert_eq!(
        again.restore(b"[]").unwrap_err().reason,
        "InvalidCheckpoint"
    );
}

#[test]
fn example_provider_hints_allocates_and_checkpoints() {
    let p = common::plugins();
    let mut w = load_ok("widgets", &p.widgets, json!({"widgets_per_node": 2}));
    let pod = testkit::guaranteed_pod("a", &[(W, 2)]);
    let h = w.topology_hints(&pod, &pod.containers[0]).unwrap();
    assert_eq!(
        hint_strings(&h, W),
        Some(vec![
            "0:true".to_owned(),
            "1:true".to_owned(),
            "0-1:false".to_owned()
        ])
    );
    let none = testkit::guaranteed_pod("n", &[("cpu", 1000)]);
    assert_eq!(
        w.pod_topology_hints(&none).unwrap(),
        Some(BTreeMap::new()),
        "the kubelet's Device Manager answers an empty map for a pod asking for none"
    );
    let a = w
        .allocate(
            &pod,
            &pod.containers[0],
            &TopologyHint::new(NumaMask::single(1.into()), true),
        )
        .unwrap();
    assert_eq!(
        a.env.get("WIDGET_DEVICES").map(String::as_str),
        Some("widget-1-0,widget-1-1")
    );
    assert_eq!(
        a.devices,
        BTreeMap::from([(
            W.to_owned(),
            vec!["widget-1-0".to_owned(), "widget-1-1".to_owned()]
        )])
    );
    assert!(a.mems.is_empty(), "a device provider sets no mems");
    let pod2 = testkit::guaranteed_pod("b", &[(W, 2)]);
    let h = w.topology_hints(&pod2, &pod2.containers[0]).unwrap();
    let after = Some(vec!["0:true".to_owned(), "0-1:false".to_owned()]);
    assert_eq!(hint_strings(&h, W), after);
    let cp = w.checkpoint().unwrap();
    // A second instance of the same library is independent; restoring the
    // checkpoint gives it the same view.
    let mut w2 = load_ok("widgets2", &p.widgets, json!({"widgets_per_node": 2}));
    let h = w2.topology_hints(&pod2, &pod2.containers[0]).unwrap();
    assert_eq!(hint_strings(&h, W).map(|v| v.len()), Some(3));
    w2.restore(&cp).unwrap();
    let h = w2.topology_hints(&pod2, &pod2.containers[0]).unwrap();
    assert_eq!(hint_strings(&h, W), after);
    w.release("a-uid", "app").unwrap();
    let big = testkit::guaranteed_pod("c", &[(W, 5)]);
    let h = w.topology_hints(&big, &big.containers[0]).unwrap();
    assert_eq!(hint_strings(&h, W), Some(vec![]));
}

#[test]
fn example_provider_answers_compact_hints_beyond_eight_nodes() {
    let p = common::plugins();
    let mut w = load_provider(
        "widgets",
        &entry(
            &p.widgets,
            json!({"widgets_per_node": 1, "resource": "example.com/w"}),
        ),
        &[],
        &testkit::machine(10, 1),
        &state_dir(),
    )
    .unwrap();
    let pod = testkit::guaranteed_pod("a", &[("example.com/w", 2)]);
    let h = w.topology_hints(&pod, &pod.containers[0]).unwrap();
    let Some(Some(topomgr_sdk::HintSet::Compact(c))) =
        h.as_ref().and_then(|m| m.get("example.com/w"))
    else {
        panic!("expected compact hints, got {h:?}");
    };
    assert_eq!(c.minimal.len(), 45);
    assert_eq!(c.preferred_width, 2);
}

#[test]
fn a_panic_in_any_method_is_an_error_and_the_provider_keeps_working() {
    let p = common::plugins();
    let pod = testkit::guaranteed_pod("a", &[]);
    let c = &pod.containers[0];
    for point in [
        "hints",
        "pod_hints",
        "allocate",
        "release",
        "checkpoint",
        "restore",
        "preferred",
        "inventory",
    ] {
        let mut m = load_ok(
            "mock",
            &p.mock,
            json!({"panic_in": point, "hints": {"r": "none"}}),
        );
        let call = |m: &mut LoadedProvider, what: &str| -> Result<(), ProviderError> {
            match what {
                "hints" => m.topology_hints(&pod, c).map(drop),
                "pod_hints" => m.pod_topology_hints(&pod).map(drop),
                "allocate" => m.allocate(&pod, c, &TopologyHint::ANY).map(drop),
                "release" => m.release("a-uid", "app"),
                "checkpoint" => m.checkpoint().map(drop),
                "preferred" => m
                    .preferred_allocation(&PreferredAllocationRequest::new(
                        "r",
                        vec!["d".into()],
                        vec![],
                        1,
                    ))
                    .map(drop),
                "inventory" => m.inventory().map(drop),
                _ => m.restore(br#"{"calls":[]}"#).map(drop),
            }
        };
        let method = match point {
            "hints" => "topology_hints",
            "pod_hints" => "pod_topology_hints",
            "preferred" => "preferred_allocation",
            other => other,
        };
        assert_eq!(
            call(&mut m, point),
            Err(ProviderError::new(
                "ProviderPanic",
                format!(
                    "the provider panicked in {method}: mock provider scripted to panic in {point}"
                )
            ))
        );
        // The same call again, and every other call, still get answers.
        assert_eq!(call(&mut m, point).unwrap_err().reason, "ProviderPanic");
        for other in [
            "hints",
            "pod_hints",
            "allocate",
            "release",
            "checkpoint",
            "restore",
            "preferred",
            "inventory",
        ] {
            if other != point {
                assert_eq!(
                    call(&mut m, other),
                    Ok(()),
                    "{other} after a panic in {point}"
                );
            }
        }
    }
    let err = load("mock", &p.mock, json!({"panic_in": "new"})).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "provider `mock` ({}) failed to start: ProviderPanic: the provider panicked in new: \
             mock provider scripted to panic in new",
            p.mock.canonicalize().unwrap().display()
        )
    );
}

#[test]
fn scripted_errors_come_back_unchanged() {
    let p = common::plugins();
    let mut m = load_ok(
        "mock",
        &p.mock,
        json!({"fail_hints": "no topology today", "fail_allocate": "full", "fail_reason": "OutOfWidgets"}),
    );
    let pod = testkit::guaranteed_pod("a", &[]);
    assert_eq!(
        m.topology_hints(&pod, &pod.containers[0]),
        Err(ProviderError::new("OutOfWidgets", "no topology today"))
    );
    assert_eq!(
        m.allocate(&pod, &pod.containers[0], &TopologyHint::ANY),
        Err(ProviderError::new("OutOfWidgets", "full"))
    );
}

#[test]
fn config_errors_name_the_provider_and_the_key() {
    let p = common::plugins();
    let err = load(
        "widgets",
        &p.widgets,
        json!({"widgets_per_node": 2, "colour": "red"}),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "provider `widgets` ({}) failed to start: InvalidConfig in [providers.widgets.config] (configured in test): unknown field `colour`, \
             expected `widgets_per_node` or `resource`",
            p.widgets.canonicalize().unwrap().display()
        )
    );
    let err = load("mock", &p.mock, json!({"sleep_ms": "soon"})).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "provider `mock` ({}) failed to start: InvalidConfig in [providers.mock.config] (configured in test): mock config: sleep_ms: invalid type: \
             string \"soon\", expected u64",
            p.mock.canonicalize().unwrap().display()
        )
    );
}

#[test]
fn a_missing_library_lists_every_place_searched() {
    let dirs = [PathBuf::from("/opt/a"), PathBuf::from("/opt/b")];
    let e = ProviderEntry {
        library: "topomgr_provider_nothing".to_owned(),
        enabled: true,
        config: serde_json::Value::Null,
        defined_in: PathBuf::from("x"),
        config_dir: PathBuf::new(),
    };
    let err =
        load_provider("nothing", &e, &dirs, &testkit::machine(1, 1), &state_dir()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "provider `nothing`: plugin library `topomgr_provider_nothing` not found; looked for \
         /opt/a/libtopomgr_provider_nothing.so, /opt/b/libtopomgr_provider_nothing.so"
    );
    let err = load("p", Path::new("/opt/none/libp.so"), json!(null)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "provider `p`: plugin library `/opt/none/libp.so` not found; looked for /opt/none/libp.so"
    );
}

#[test]
fn bare_library_names_are_found_in_search_dirs() {
    let p = common::plugins();
    let dir = p.mock.parent().unwrap().to_path_buf();
    let e = ProviderEntry {
        library: "topomgr_mock_provider".to_owned(),
        enabled: true,
        config: json!({"no_map": true}),
        defined_in: PathBuf::from("x"),
        config_dir: PathBuf::new(),
    };
    let dirs = [PathBuf::from("/opt/nowhere"), dir];
    let m = load_provider("mock", &e, &dirs, &testkit::machine(1, 1), &state_dir()).unwrap();
    assert_eq!(m.library().unwrap(), p.mock.canonicalize().unwrap());
    let cfg = HostConfig {
        plugin_dirs: vec![PathBuf::from("/opt/x")],
        ..HostConfig::default()
    };
    let dirs = search_dirs(&cfg);
    assert_eq!(dirs[0], PathBuf::from("/opt/x"));
    assert_eq!(
        dirs.get(1),
        std::env::current_exe()
            .unwrap()
            .parent()
            .map(Path::to_path_buf)
            .as_ref()
    );
}

#[test]
fn writable_plugins_and_directories_are_refused() {
    let p = common::plugins();
    let dir = common::scratch_dir("perm");
    let lib = dir.join("libmock.so");
    std::fs::copy(&p.mock, &lib).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = load("mock", &lib, json!(null)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "provider `mock`: refusing plugin {0}: {0} is writable by everyone (mode 0666); run chmod o-w on it",
            lib.display()
        )
    );
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
    let err = load("mock", &lib, json!(null)).unwrap_err();
    let gid = std::fs::metadata(&dir)
        .map(|m| std::os::unix::fs::MetadataExt::gid(&m))
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "provider `mock`: refusing plugin {}: {} is writable by its group (gid {gid}, mode 0775); run chmod g-w on it",
            lib.display(),
            dir.display()
        )
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(load("mock", &lib, json!(null)).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_plugin_built_against_an_incompatible_sdk_is_refused_in_one_line() {
    let p = common::fixtures();
    // Same SDK minor, a changed type layout: the first difference is named.
    let err = load("changed", &p.incompatible, json!(null)).unwrap_err();
    assert!(matches!(err, PluginError::Incompatible { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(!msg.contains('\n'), "{msg}");
    assert_eq!(
        msg,
        format!(
            "provider `changed`: {} was built against an incompatible topomgr SDK: type FfiHint (via \
             new.topology_hints.hints): too many fields, host 3, plugin 4; rebuild it with topomgr-sdk {}",
            p.incompatible.canonicalize().unwrap().display(),
            topomgr_sdk::SDK_VERSION
        )
    );
    // A plugin of the previous SDK minor (0.2): refused on the version.
    let err = load("old", &p.older_minor, json!(null)).unwrap_err();
    assert!(matches!(err, PluginError::Incompatible { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "provider `old`: {} was built against an incompatible topomgr SDK: plugin SDK version \
             0.2.1, host SDK version {}; the 0.MINOR versions must match; rebuild it with topomgr-sdk {}",
            p.older_minor.canonicalize().unwrap().display(),
            topomgr_sdk::SDK_VERSION,
            topomgr_sdk::SDK_VERSION
        )
    );
}

#[test]
fn a_library_that_is_not_a_plugin_is_refused() {
    let places = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
    ];
    let libm = places
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("this test loads the C library's libm.so.6, a shared library that is no plugin, and found none at {places:?}")
        });
    let err = load("m", libm, json!(null)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "provider `m`: {} is not a topomgr plugin (it exports no topomgr root module; build it with \
             topomgr_sdk::export_provider!)",
            libm.canonicalize().unwrap().display()
        )
    );
}

/// A plugin's `tracing` event reaches the host's log, as the `topomgr`
/// binary writes it. (Checked in a process of its own: a subscriber set for
/// one test thread does not reliably see events while other tests of the
/// binary register the same callsites.)
#[test]
fn a_plugins_tracing_events_reach_the_host_log() {
    let p = common::plugins();
    let dir = common::scratch_dir("plugin-log");
    let libs = p.mock.parent().expect("plugin dir").display().to_string();
    std::fs::write(
        dir.join("topomgr.toml"),
        format!(
            "policy = \"best-effort\"\nplugin_dirs = [\"{libs}\"]\nstate_dir = \"state\"\n\
             [providers.mock]\nlibrary = \"topomgr_mock_provider\"\n\
             [providers.mock.config]\nlog_message = \"mock says hello 4711\"\n"
        ),
    )
    .expect("write config");
    let root = common::workspace_root();
    let out = std::process::Command::new(common::topomgr_bin())
        .env("RUST_LOG", "info")
        .arg("--config")
        .arg(dir.join("topomgr.toml"))
        .args(["admit", "--dry-run", "--sysfs-root"])
        .arg(root.join("examples/machines/2s4n/sys"))
        .arg(root.join("examples/pods/besteffort.yaml"))
        .output()
        .expect("run topomgr");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.lines().any(|l| l.ends_with(
            " INFO topomgr::plugin: mock says hello 4711 nodes=4 plugin_target=\"topomgr_mock_provider\""
        )),
        "{log}"
    );
}

#[test]
fn the_repository_config_loads_the_example_provider() {
    let _ = common::plugins();
    let root = common::workspace_root();
    let cfg = topomgr_node::setup::config::load_with(
        &root.join("topomgr.toml"),
        &topomgr_node::setup::config::LoadOptions {
            env: &|_| None,
            protected: false,
        },
    )
    .unwrap();
    assert_eq!(cfg.policy, "single-numa-node");
    assert_eq!(cfg.scope, "container");
    // No plugin_dirs: the host finds the plugins beside its own binary
    // (target/debug or target/release), where `cargo build --workspace`
    // puts them. A test binary lives in target/debug/deps, so the test adds
    // the directory the harness built the plugin into, as the binary would.
    assert!(cfg.plugin_dirs.is_empty(), "{:?}", cfg.plugin_dirs);
    let e = &cfg.providers["widgets"];
    assert_eq!(e.library, "numa_widgets");
    assert_eq!(e.config, json!({"widgets_per_node": 2, "resource": W}));
    let mut dirs = search_dirs(&cfg);
    dirs.push(common::plugins().widgets.parent().unwrap().to_path_buf());
    let mut w = load_provider("widgets", e, &dirs, &testkit::machine(2, 2), &state_dir()).unwrap();
    let pod = testkit::guaranteed_pod("a", &[(W, 3)]);
    let h = w.topology_hints(&pod, &pod.containers[0]).unwrap();
    assert_eq!(hint_strings(&h, W), Some(vec!["0-1:true".to_owned()]));
}

/// The example machine as discovered, for plugins that read PCI devices.
fn example_machine() -> topomgr_sdk::Machine {
    topomgr_discovery::discover(Path::new(&common::example_sys())).expect("example machine")
}

#[test]
fn an_out_of_tree_device_provider_built_on_the_toolkit_works() {
    // `tests/vendor-accelerator` is its own workspace depending on the SDK
    // alone; its accelerators are the example machine's two NVIDIA PCI
    // devices (0000:17:00.0 on node 0, 0000:b1:00.0 on node 2).
    let p = common::fixtures();
    let machine = example_machine();
    let mut accel = load_provider(
        "accel",
        &entry(&p.vendor, json!({"vendor": "0x10DE"})),
        &[],
        &machine,
        &state_dir(),
    )
    .unwrap();
    let r = "example.com/accelerator";
    let pod = testkit::guaranteed_pod("a", &[(r, 1)]);
    let h = accel.topology_hints(&pod, &pod.containers[0]).unwrap();
    let hints = testkit::hint_strings(&h, r, &[0, 1, 2, 3]).unwrap();
    assert_eq!(&hints[..3], ["0:true", "2:true", "0-1:false"]);
    assert!(!hints.contains(&"1:false".to_owned()) && !hints.contains(&"1:true".to_owned()));
    let a = accel
        .allocate(&pod, &pod.containers[0], &testkit::hint("2:true"))
        .unwrap();
    assert_eq!(a.devices[r], ["0000:b1:00.0"]);
    assert_eq!(a.env["ACCELERATOR_PCI"], "0000:b1:00.0");
    let inv = accel.inventory().unwrap();
    assert_eq!(inv.resources[r].total.capacity, 2);
    assert_eq!(inv.resources[r].total.available, 1);
    let zones: Vec<(Option<u32>, u64)> = inv.resources[r]
        .zones
        .iter()
        .map(|z| (z.numa.map(|n| n.get()), z.amounts.available))
        .collect();
    assert_eq!(zones, [(Some(0), 1), (Some(2), 0)]);
    let req = PreferredAllocationRequest::new(
        r,
        vec!["0000:17:00.0".into(), "0000:b1:00.0".into()],
        vec!["0000:b1:00.0".into()],
        1,
    );
    assert_eq!(accel.preferred_allocation(&req).unwrap(), ["0000:b1:00.0"]);
    // Config errors name the key, through the plugin boundary.
    let err = load_provider(
        "accel",
        &entry(&p.vendor, json!({"vendor": 16})),
        &[],
        &machine,
        &state_dir(),
    )
    .unwrap_err();
    assert!(
        err.to_string().ends_with(
            "failed to start: InvalidConfig in [providers.accel.config] (configured in test): vendor: invalid type: integer `16`, expected a string"
        ),
        "{err}"
    );
}

/// A host of a later patch release: every object it sends carries fields
/// this SDK does not know.
fn with_added_fields(mut machine: serde_json::Value) -> serde_json::Value {
    machine["memory_tiers"] = json!([{"nodes": [0, 1], "tier": "dram"}]);
    for n in machine["numa_nodes"].as_array_mut().unwrap() {
        n["memory_bandwidth_mbps"] = json!(200_000);
    }
    for c in machine["cpus"].as_array_mut().unwrap() {
        c["core_type"] = json!("performance");
    }
    for d in machine["pci_devices"].as_array_mut().unwrap() {
        // Fields no SDK release has (the real `link_type` and `vf_index`
        // were added in SDK 0.2 itself).
        d["link_speed_mbps"] = json!(25000);
        d["pcie_generation"] = json!("gen4");
    }
    machine
}

#[test]
fn a_plugin_of_this_sdk_loads_into_a_host_that_added_fields() {
    use topomgr_sdk::abi_stable::library::lib_header_from_path;
    use topomgr_sdk::ffi;

    let p = common::fixtures();
    let machine = example_machine();
    let newer = with_added_fields(serde_json::to_value(&machine).unwrap());
    // Through the host's own loader, with the newer machine description.
    let mut accel = topomgr_node::setup::plugin::load_provider_from_json(
        "accel",
        &entry(&p.vendor, json!({"vendor": "0x10de"})),
        &[],
        &newer,
        &state_dir(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let inv = accel.inventory().unwrap();
    assert_eq!(inv.resources["example.com/accelerator"].total.capacity, 2);

    // At the boundary itself: an init request, pods and containers with
    // added fields, and a named call the plugin was built before.
    let module = lib_header_from_path(&p.vendor)
        .and_then(|h| h.init_root_module::<ffi::ProviderModRef>())
        .expect("load the vendor plugin");
    let mut init: serde_json::Value = serde_json::from_str(&ffi::init_json(
        "accel",
        &newer,
        &json!({"vendor": "0x10de"}),
        &state_dir(),
        None,
    ))
    .unwrap();
    init["host_version"] = json!("0.2.9");
    init["node_name"] = json!("worker-7");
    let mut handle = ffi::construct(
        module,
        ffi::FfiInit {
            init_json: init.to_string().into(),
            log: ffi::discard_log,
            log_max_level: 0,
        },
    )
    .unwrap();
    let pod = json!({
        "uid": "u1", "name": "p", "namespace": "default", "qos": "Guaranteed",
        "init_containers": [], "resources": null, "priority_class_name": "high",
        "containers": [{"name": "app", "requests": {"example.com/accelerator": 1},
            "limits": {"example.com/accelerator": 1}, "sidecar": false,
            "resize_policy": [{"resourceName": "cpu"}]}]
    });
    let container = pod["containers"][0].to_string();
    let h = handle
        .topology_hints_json(&pod.to_string(), &container)
        .unwrap();
    assert_eq!(
        testkit::hint_strings(&h, "example.com/accelerator", &[0, 1, 2, 3])
            .unwrap()
            .first()
            .map(String::as_str),
        Some("0:true")
    );
    let a = handle
        .allocate_json(&pod.to_string(), &container, &testkit::hint("0:true"))
        .unwrap();
    assert_eq!(a.devices["example.com/accelerator"], ["0000:17:00.0"]);
    assert_eq!(handle.call("method_of_a_later_sdk", "{}"), Ok(None));
}

#[test]
fn named_calls_reach_loaded_plugins() {
    let p = common::plugins();
    let mut w = load_ok("widgets", &p.widgets, json!({"widgets_per_node": 2}));
    let req = PreferredAllocationRequest::new(
        W,
        vec![
            "widget-0-0".into(),
            "widget-1-0".into(),
            "widget-1-1".into(),
        ],
        vec![],
        2,
    );
    assert_eq!(
        w.preferred_allocation(&req).unwrap(),
        ["widget-1-0", "widget-1-1"]
    );
    let inv = w.inventory().unwrap();
    assert_eq!(inv.resources[W].total.available, 4);
    let mut m = load_ok(
        "mock",
        &p.mock,
        json!({"preferred": ["b", "a"], "inventory": {"resources": {"x/y": {
            "total": {"capacity": 2, "allocatable": 2, "available": 1},
            "zones": [{"numa": 1, "capacity": 2, "allocatable": 2, "available": 1}]}}}}),
    );
    assert_eq!(m.preferred_allocation(&req).unwrap(), ["b", "a"]);
    assert_eq!(
        m.inventory().unwrap().resources["x/y"].zones[0]
            .amounts
            .available,
        1
    );
    // A provider that owns nothing answers an empty inventory.
    let mut quiet = load_ok("mock", &p.mock, json!(null));
    assert!(quiet.inventory().unwrap().resources.is_empty());
    assert!(quiet.preferred_allocation(&req).unwrap().is_empty());
}

#[test]
fn the_preferred_verb_answers_on_the_example_machine() {
    common::plugins();
    let root = common::workspace_root();
    let sys = common::example_sys();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "provider",
            "widgets",
            "--sysfs-root",
            sys.as_str(),
            "preferred",
            "--resource",
            W,
        ];
        args.extend_from_slice(extra);
        common::topomgr(&root, &args)
    };
    let (code, out, err) = run(&[
        "--available",
        "widget-0-0,widget-1-0,widget-1-1",
        "--size",
        "2",
    ]);
    assert_eq!(
        (code, out.trim()),
        (0, r#"{"devices":["widget-1-0","widget-1-1"]}"#),
        "{err}"
    );
    let (code, out, _) = run(&[
        "--available",
        "widget-0-0,widget-1-0,widget-1-1",
        "--must-include",
        "widget-0-0",
        "--size",
        "2",
    ]);
    assert_eq!(
        (code, out.trim()),
        (0, r#"{"devices":["widget-0-0","widget-1-0"]}"#)
    );
    for (extra, message) in [
        (
            vec!["--available", "widget-0-0", "--size", "0"],
            "invalid preferred-allocation request: size is 0; ask for at least one device",
        ),
        (
            vec!["--available", "widget-0-0", "--must-include", "widget-9-9", "--size", "1"],
            "invalid preferred-allocation request: must_include names device \"widget-9-9\", which is not in available",
        ),
        (
            vec!["--available", "widget-0-0,gizmo", "--size", "1"],
            "provider \"widgets\" cannot answer: resource example.com/widget has no device \"gizmo\"",
        ),
    ] {
        let (code, out, err) = run(&extra);
        assert_eq!(code, 2, "{extra:?}: {out}{err}");
        assert_eq!(err.trim(), format!("topomgr: error: {message}"), "{extra:?}");
    }
}

#[test]
fn version_names_the_sdk_and_abi() {
    let (code, out, _) = common::topomgr(&common::workspace_root(), &["--version"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        format!(
            "topomgr {} (plugin SDK {}, plugin ABI {})",
            env!("CARGO_PKG_VERSION"),
            topomgr_sdk::SDK_VERSION,
            topomgr_sdk::SDK_ABI_VERSION
        )
    );
}

// The SDK's worked example, built as a vendor would build it outside this
// workspace (`tests/vendor-example`: the example file as it is, a
// dependency on the SDK and nothing else), then loaded as a plugin: the
// library's root module is checked (SDK version, every type's layout) and
// the provider is constructed and called through the plugin boundary.

#[test]
fn the_vendor_crate_is_the_example_verbatim_on_the_sdk_alone() {
    let manifest =
        std::fs::read_to_string(common::workspace_root().join("tests/vendor-example/Cargo.toml"))
            .unwrap();
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
    use topomgr_sdk::abi_stable::library::lib_header_from_path;
    use topomgr_sdk::ffi::{self, FfiInit, ProviderModRef};
    use topomgr_sdk::{Conflict, ProviderHints};
    let library = &common::fixtures().vendor_example;
    let module = lib_header_from_path(library)
        .and_then(|h| h.init_root_module::<ProviderModRef>())
        .unwrap_or_else(|e| panic!("loading {}: {e}", library.display()));
    assert_eq!(module.sdk_abi_version(), ffi::SDK_ABI_VERSION);
    let machine = serde_json::to_value(testkit::machine(2, 2)).unwrap();
    let state_dir = state_dir();
    let init = |config: serde_json::Value| FfiInit {
        init_json: ffi::init_json("widgets", &machine, &config, &state_dir, None).into(),
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
