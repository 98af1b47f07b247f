//! One physical device is one device (issue 37 item 1): the same GPU or VF
//! served by two providers under two resource names is refused at start,
//! naming both providers, the device and the remedy; and a device given
//! under a second name while another pod holds it is refused by the
//! ledger, with the real provider `.so` files on recorded machines.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use topomgr_node::api::Admissions;

fn machine(name: &str) -> String {
    common::workspace_root()
        .join("examples/machines")
        .join(name)
        .join("sys")
        .to_string_lossy()
        .into_owned()
}

fn config(tag: &str, machine: &str, providers: &str) -> PathBuf {
    let main = format!(
        "policy = \"best-effort\"\nplugin_dirs = []\nsysfs_root = {machine:?}\nstate_dir = \"state\"\ncgroup_root = \"cgroup\"\n{providers}"
    );
    common::config_dir(tag, &main, &[])
}

/// A pod `uid` of one container with `limits`.
fn pod_file(dir: &Path, uid: &str, limits: &str) -> String {
    let path = dir.join(format!("{uid}.yaml"));
    fs::write(
        &path,
        format!("kind: Pod\nmetadata: {{name: {uid}, uid: {uid}}}\nspec:\n  containers:\n  - name: app\n    resources: {{limits: {{{limits}}}}}\n"),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

/// Set `enabled = false` in `[providers.NAME]`.
fn disable(dir: &Path, name: &str) {
    let toml = fs::read_to_string(dir.join("topomgr.toml")).unwrap();
    fs::write(
        dir.join("topomgr.toml"),
        toml.replace(
            &format!("[providers.{name}]\n"),
            &format!("[providers.{name}]\nenabled = false\n"),
        ),
    )
    .unwrap();
}

/// Two GPU provider instances on the same machine (GPUs found on PCI),
/// `nvidia.com/gpu` and `example.com/gpu`: on main a pod under each name
/// got GPU 0000:17:00.0. Refused at start naming both and the GPU; with
/// one disabled the pod is admitted.
#[test]
fn two_gpu_providers_serving_one_gpu_are_refused() {
    let gpu = common::gpu_plugin().display().to_string();
    let providers = format!(
        "[providers.gpu]\nlibrary = {gpu:?}\n[providers.gpu.config]\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n\
         [providers.gpu2]\nlibrary = {gpu:?}\n[providers.gpu2.config]\nnvml_library = \"/nonexistent/libnvidia-ml.so.1\"\nresource = \"example.com/gpu\"\n"
    );
    let dir = config("ident-two-gpus", &machine("2s4n"), &providers);
    let pod = pod_file(&dir, "a", "cpu: 1, memory: 1Gi, example.com/gpu: 1");
    let (code, out, err) = common::topomgr(&dir, &["admit", &pod]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(
        err,
        format!(
            "topomgr: error: providers \"gpu\" and \"gpu2\" both serve PCI device 0000:17:00.0 (as nvidia.com/gpu device 0000:17:00.0 and as example.com/gpu device 0000:17:00.0); one device would be given to two pods. Serve each device through one provider: set enabled = false in [providers.gpu2] ({}), or configure the two for different devices\n",
            dir.join("topomgr.toml").display()
        )
    );
    // The daemon is refused alike.
    let (code, _, err) = common::topomgr(&dir, &["serve", "--socket", "t.sock"]);
    assert_eq!(code, 2);
    assert!(err.contains("both serve PCI device 0000:17:00.0"), "{err}");
    // The remedy works.
    disable(&dir, "gpu");
    let (code, out, err) = common::topomgr(&dir, &["admit", &pod]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"admitted\": true"), "{out}");
}

/// Two SR-IOV provider instances with the same selectors under the
/// prefixes `intel.com` and `example.org`: on main VF 0000:18:01.2 went to
/// a pod under each. Refused at start naming both and a VF.
#[test]
fn two_sriov_providers_serving_one_vf_are_refused() {
    let sriov = common::sriov_plugin().display().to_string();
    let list = |name: &str, prefix: &str| {
        format!(
            "[providers.{name}]\nlibrary = {sriov:?}\n[providers.{name}.config]\nresource_prefix = {prefix:?}\n\
             [[providers.{name}.config.resource_list]]\nresourceName = \"vf\"\n\
             selectors = [{{ vendors = [\"8086\"], devices = [\"1889\"] }}]\n"
        )
    };
    let providers = format!(
        "{}{}",
        list("sriov", "intel.com"),
        list("sriov2", "example.org")
    );
    let dir = config("ident-two-sriov", &machine("2s2n-sriov"), &providers);
    let pod = pod_file(&dir, "a", "cpu: 1, memory: 1Gi, intel.com/vf: 1");
    let (code, out, err) = common::topomgr(&dir, &["admit", &pod]);
    assert_eq!(code, 2, "{out}");
    assert!(
        err.starts_with(
            "topomgr: error: providers \"sriov\" and \"sriov2\" both serve PCI device 0000:"
        ),
        "{err}"
    );
    assert!(
        err.contains("(as intel.com/vf device 0000:")
            && err.contains(" and as example.org/vf device 0000:"),
        "{err}"
    );
    assert!(
        err.contains("set enabled = false in [providers.sriov2]"),
        "{err}"
    );
    disable(&dir, "sriov2");
    let (code, out, err) = common::topomgr(&dir, &["admit", &pod]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"admitted\": true"), "{out}");
}

/// Two providers that do not say what their devices are (scripted mocks)
/// give the device `0000:17:00.0` under two resource names: the first pod
/// holds it, the second is refused by the ledger naming the provider, the
/// device and its holder, with `admit --state-dir` (the ledger rebuilt
/// from the saved state).
#[test]
fn a_device_held_under_one_name_is_refused_under_another() {
    let mock = common::plugins().mock.display().to_string();
    let provider = |name: &str, resource: &str| {
        format!(
            "[providers.{name}]\nlibrary = {mock:?}\n[providers.{name}.config]\n\
             allocation = {{ devices = {{ {resource:?} = [\"0000:17:00.0\"] }} }}\n\
             inventory = {{ resources = {{ {resource:?} = {{ total = {{ capacity = 1, allocatable = 1, available = 1 }}, zones = [] }} }} }}\n"
        )
    };
    let providers = format!(
        "{}{}",
        provider("gpu-a", "example.com/gpu"),
        provider("gpu-b", "example.org/gpu")
    );
    let dir = config("ident-ledger", &machine("2s4n"), &providers);
    let state = dir.join("state");
    let state = state.to_str().unwrap();
    let a = pod_file(&dir, "a", "example.com/gpu: 1");
    let (code, out, err) = common::topomgr(&dir, &["admit", "--state-dir", state, &a]);
    assert_eq!(code, 0, "{err}");
    let v: Admissions = serde_json::from_str(&out).unwrap();
    assert!(v.pods[0].admitted, "{out}");
    let b = pod_file(&dir, "b", "example.org/gpu: 1");
    let (_, out, err) = common::topomgr(&dir, &["admit", "--state-dir", state, &b]);
    let v: Admissions = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    let p = &v.pods[0];
    assert!(!p.admitted, "{out}");
    assert_eq!(p.reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert_eq!(
        p.message.as_deref(),
        Some("provider \"gpu-b\" gave pod default/b container \"app\" example.org/gpu device 0000:17:00.0, but that is PCI device 0000:17:00.0, held by pod default/a (uid a) container \"app\" as example.com/gpu device 0000:17:00.0; one physical device is given to one container")
    );
}
