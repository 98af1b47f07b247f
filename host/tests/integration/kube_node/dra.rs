//! Dynamic Resource Allocation on the one-node Kubernetes (issue 35 items
//! 2 and 4): the test DRA driver (`tests/kube/cmd/dra-test-driver`) is a
//! kubelet plugin of the real kubelet and publishes a ResourceSlice whose
//! devices name PCI devices of this machine; a ResourceClaim that the test
//! allocates itself (there is no scheduler: it writes the claim's
//! `status.allocation` and `reservedFor`, as the scheduler would) is used
//! by a Guaranteed pod. The kubelet prepares the claim through the driver
//! (a CDI spec in containerd's CDI directory, `enable_cdi`), containerd
//! injects the CDI device, and topomgr, with `[cdi]
//! kubelet_pod_resources_socket` set to the real kubelet's socket, takes
//! the claim's CDI device name from the kubelet's PodResources `Get`; a
//! second claim, whose device the driver prepares without a CDI device,
//! reaches topomgr by driver, pool and device name and is matched, with
//! `[kubernetes]` API access, to its PCI device through the driver's
//! ResourceSlice (the standard `pciBusID` attribute).

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use topomgr_runtime_harness::{
    pci_addresses, ContainerdLine, DraDriver, KubeOptions, DRA_DRIVER, IMAGE, NODE_NAME,
};

use super::Cluster;
use crate::daemon::Daemon;
use crate::nri;

/// The DeviceClass of the driver's devices and a claim `claim` of one
/// device.
fn class_and_claim(claim: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: topomgr-test\nspec:\n  selectors:\n    - cel:\n        expression: 'device.driver == \"{DRA_DRIVER}\"'\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: {claim}\n  namespace: default\nspec:\n  devices:\n    requests:\n      - name: dev\n        exactly:\n          deviceClassName: topomgr-test\n"
    )
}

/// A Guaranteed 1-CPU pod whose container uses the claim `claim`.
fn claiming_pod(name: &str, claim: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  nodeName: {NODE_NAME}\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  resourceClaims:\n    - name: dev\n      resourceClaimName: {claim}\n  containers:\n    - name: app\n      image: {IMAGE}\n      imagePullPolicy: Never\n      command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]\n      resources:\n        requests: {{cpu: \"1\", memory: 64Mi}}\n        limits: {{cpu: \"1\", memory: 64Mi}}\n        claims:\n          - name: dev\n"
    )
}

/// topomgr again on the same state with `-v` (its info lines: which CDI
/// devices the kubelet's claims gave), registered.
fn restart_topomgr_verbose(c: &mut Cluster) {
    if let Some(d) = c.daemon.take() {
        d.stop();
    }
    let d = Daemon::start_with(&c.config, &c.socket, &[Path::new("-v")]);
    nri::wait_until(&d, "registered with containerd again", |h, _| {
        h.nri.connected && h.notes.is_empty()
    });
    c.daemon = Some(d);
}

/// Writes what the scheduler would (there is none): claim `claim`
/// allocated to device `device` of the driver's pool, and reserved for pod
/// `pod`. Its uid.
fn allocate(c: &Cluster, claim: &str, pod: &str, device: &str) -> String {
    let pod_uid = c.node.get_json(&["pod", pod]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let status = serde_json::json!({"status": {
        "allocation": {
            "devices": {"results": [{
                "request": "dev", "driver": DRA_DRIVER, "pool": NODE_NAME, "device": device
            }]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
                "key": "metadata.name", "operator": "In", "values": [NODE_NAME]
            }]}]}
        },
        "reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid}]
    }});
    c.node
        .kubectl(&[
            "patch",
            "resourceclaim",
            claim,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ])
        .unwrap();
    c.node.get_json(&["resourceclaim", claim]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The kubelet's PodResources `Get` of pod `pod` (its own socket, through
/// the kubelet-proto client).
fn kubelet_get(socket: &Path, pod: &str) -> serde_json::Value {
    let go = crate::podresources::go_client_binary()
        .expect("the kubelet-proto client that .ci/install-kubernetes builds");
    let out = std::process::Command::new(&go)
        .arg("-socket")
        .arg(socket)
        .args(["get", "default", pod])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn dra_claim(line: ContainerdLine) {
    let mut kubelet_socket = PathBuf::new();
    let mut cdi_dir = PathBuf::new();
    let mut c = Cluster::start_with(line, KubeOptions::default(), |node, etc| {
        kubelet_socket = node.kubelet_root().join("pod-resources/kubelet.sock");
        cdi_dir = node.containerd().cdi_dir();
        // API access (the admin's token, the API server's own CA) for the
        // ResourceSlices of devices the kubelet names without a CDI device;
        // no NodeResourceTopology push (no CRD here), no Events.
        let kubeconfig = super::topomgr_kubeconfig(node, etc);
        format!(
            "node_name = \"{NODE_NAME}\"\n[kubernetes]\nenabled = true\nkubeconfig = \"{}\"\npush_nrt = false\nevents = false\n\
             [cdi]\nspec_dirs = [\"{}\"]\nkubelet_pod_resources_socket = \"{}\"\n",
            kubeconfig.display(),
            cdi_dir.display(),
            kubelet_socket.display()
        )
    });
    restart_topomgr_verbose(&mut c);
    let pci: Vec<String> = pci_addresses().into_iter().take(2).collect();
    assert_eq!(pci.len(), 2, "the test needs two PCI devices: {pci:?}");
    // dev-0 is prepared without a CDI device, dev-1 with one.
    let driver = DraDriver::start(&c.node, &pci, &["dev-0"]).unwrap();

    // The driver's ResourceSlice: a device per PCI address, each with the
    // standard PCI bus id attribute.
    let slice = c
        .node
        .wait(
            "the test DRA driver's ResourceSlice",
            Duration::from_secs(30),
            || {
                let list = c.node.get_json(&["resourceslices"])?;
                list["items"]
                    .as_array()?
                    .iter()
                    .find(|s| s["spec"]["driver"] == DRA_DRIVER)
                    .cloned()
            },
        )
        .unwrap();
    assert_eq!(slice["spec"]["nodeName"], NODE_NAME, "{slice}");
    assert_eq!(slice["spec"]["pool"]["name"], NODE_NAME, "{slice}");
    let devices = slice["spec"]["devices"].as_array().unwrap();
    let published: Vec<(String, String)> = devices
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap_or_default().to_owned(),
                d["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        published,
        [
            ("dev-0".to_owned(), pci[0].clone()),
            ("dev-1".to_owned(), pci[1].clone())
        ],
        "{slice}"
    );
    c.check("the driver registered");

    // The claim, allocated to dev-1 and reserved for the pod, as the
    // scheduler would write it.
    c.apply(&class_and_claim("claim"));
    c.apply(&claiming_pod("claimed", "claim"));
    let claim_uid = allocate(&c, "claim", "claimed", "dev-1");
    let cdi_name = format!("{DRA_DRIVER}/dev={claim_uid}-dev-1");

    c.wait_running("claimed");
    c.check("a Guaranteed pod with a DRA claim");
    let p = c.placements();
    assert_eq!(
        p["claimed"],
        ("1".into(), "1".into(), "0".into()),
        "{line:?}: the Guaranteed container has CPU 1: {p:?}"
    );
    // The driver's CDI spec, and containerd injected its device and
    // environment.
    let spec = cdi_dir.join(format!("{DRA_DRIVER}-{claim_uid}.json"));
    assert!(spec.is_file(), "{line:?}: {} written", spec.display());
    let live = c.node.container("default", "claimed", "app").unwrap();
    let pid = std::fs::read_to_string(live.cgroup.join("cgroup.procs")).unwrap();
    let pid = pid.lines().next().unwrap().trim();
    let node = std::fs::metadata(format!("/proc/{pid}/root/dev/topomgr-dra-dev-1"))
        .unwrap_or_else(|e| panic!("{line:?}: the CDI device node in the container: {e}"));
    assert!(node.file_type().is_char_device(), "{line:?}");
    assert_eq!(node.rdev(), libc::makedev(1, 3), "{line:?}");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let want = format!("TOPOMGR_DRA_PCI_DEV_1={}", pci[1]);
    assert!(
        environ.split(|b| *b == 0).any(|v| v == want.as_bytes()),
        "{line:?}: {want} in the container's environment"
    );

    // The real kubelet's PodResources lists the claim with its CDI device.
    let got = kubelet_get(&kubelet_socket, "claimed");
    let dynamic = &got["pod_resources"]["containers"][0]["dynamic_resources"];
    assert_eq!(dynamic[0]["claim_name"], "claim", "{line:?}: {got}");
    assert_eq!(dynamic[0]["claim_namespace"], "default", "{line:?}: {got}");
    let resource = &dynamic[0]["claim_resources"][0];
    assert_eq!(resource["driver_name"], DRA_DRIVER, "{line:?}: {got}");
    assert_eq!(resource["pool_name"], NODE_NAME, "{line:?}: {got}");
    assert_eq!(resource["device_name"], "dev-1", "{line:?}: {got}");
    assert_eq!(
        resource["cdi_devices"][0]["name"], cdi_name,
        "{line:?}: {got}"
    );

    c.delete(&["claimed"]);
    c.wait_released();
    c.check("deleting the pod with the claim");
    // The kubelet unprepared the claim: the driver removed its spec.
    c.node
        .wait(
            "the claim's CDI spec removed",
            Duration::from_secs(30),
            || (!spec.exists()).then_some(()),
        )
        .unwrap();

    // A claim of dev-0, which the driver prepares without a CDI device: the
    // kubelet names it by driver, pool and device only, and topomgr finds
    // its PCI device through the driver's ResourceSlice.
    c.apply(&class_and_claim("by-name"));
    c.apply(&claiming_pod("by-name", "by-name"));
    allocate(&c, "by-name", "by-name", "dev-0");
    c.wait_running("by-name");
    c.check("a Guaranteed pod with a claim without a CDI device");
    let p = c.placements();
    assert_eq!(p["by-name"].0, "1", "{line:?}: {p:?}");
    let got = kubelet_get(&kubelet_socket, "by-name");
    let resource =
        &got["pod_resources"]["containers"][0]["dynamic_resources"][0]["claim_resources"][0];
    assert_eq!(resource["device_name"], "dev-0", "{line:?}: {got}");
    assert_eq!(
        resource["cdi_devices"],
        serde_json::json!([]),
        "{line:?}: {got}"
    );
    c.delete(&["by-name"]);
    c.wait_released();
    c.check("deleting the pod with the claim without a CDI device");
    drop(driver);

    // topomgr took the claim's CDI device name from the kubelet (not only
    // the container's device node): its info line names it, and the
    // device (a /dev/null-like node, no PCI device) counted as a CDI
    // device no provider lists.
    let log = c.daemon.take().unwrap().stop();
    assert!(!log.contains("panicked"), "{log}");
    assert!(
        !log.contains("cannot read the container's DRA claims"),
        "{line:?}: {log}"
    );
    assert!(
        log.lines().any(|l| l
            .contains("the kubelet's DRA claims give the container these CDI devices")
            && l.contains(&format!("devices={cdi_name}"))),
        "{line:?}: {log}"
    );
    assert!(
        log.lines().any(|l| l
            .contains("no provider lists this CDI device and it is not aligned with")
            && l.contains(&format!(
                "source=CDI device {cdi_name} devices=/dev/topomgr-dra-dev-1"
            ))),
        "{line:?}: {log}"
    );
    // dev-0 by its ResourceSlice's pciBusID: the machine's PCI device
    // (attached to no NUMA node here, so not aligned with, and logged).
    let by_name = format!("DRA device {DRA_DRIVER}/{NODE_NAME}/dev-0");
    assert!(
        !log.contains("cannot read the ResourceSlices"),
        "{line:?}: {log}"
    );
    assert!(
        log.lines().any(|l| l
            .contains("the container was given a DRA device, matched by its ResourceSlice")
            && l.contains(&format!("device={by_name}"))
            && l.contains(&pci[0])),
        "{line:?}: {log}"
    );
    assert!(
        log.lines().any(|l| l
            .contains("no provider lists this CDI device and it is not aligned with")
            && l.contains(&format!("source={by_name} devices={}", pci[0]))),
        "{line:?}: {log}"
    );
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn a_dra_claims_device_reaches_topomgr_from_the_kubelet_on_containerd_1_7() {
    dra_claim(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn a_dra_claims_device_reaches_topomgr_from_the_kubelet_on_containerd_2() {
    dra_claim(ContainerdLine::V2);
}
