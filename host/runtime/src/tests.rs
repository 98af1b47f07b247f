//! The mapping of whole container specs, as Podman, containerd and NRI
//! hand them on.

use std::collections::BTreeMap;

use topomgr_sdk::QosClass;

use super::*;

const UID: &str = "8dbc5a0a-1f3c-4c0e-9b1e-7f2a0d6c9e11";
const ID: &str = "9c97240e539922e3357d0e088fb613ee83e8be57aa1bda5a853c1b5ed567d6f6";

fn resources(json: &str) -> LinuxResources {
    serde_json::from_str(json).unwrap()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn list(pairs: &[(&str, u64)]) -> ResourceList {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

struct Case<'a> {
    annotations: BTreeMap<String, String>,
    parent: Option<&'a str>,
    resources: &'a str,
    env: Vec<String>,
}

impl Default for Case<'_> {
    fn default() -> Self {
        Case {
            annotations: BTreeMap::new(),
            parent: None,
            resources: "{}",
            env: Vec::new(),
        }
    }
}

impl Case<'_> {
    fn map(&self) -> Result<Mapping, MappingError> {
        let r = resources(self.resources);
        map_container(&ContainerSpec {
            id: ID,
            name: None,
            annotations: &self.annotations,
            sandbox: None,
            cgroup_parent: self.parent,
            resources: &r,
            env: &self.env,
        })
    }

    fn admitted(&self) -> ContainerRequest {
        match self.map().unwrap() {
            Mapping::Admit(r) => *r,
            other => panic!("not admitted: {other:?}"),
        }
    }
}

/// `(qos, requests, limits)` of the one container.
fn shape(r: &ContainerRequest) -> (QosClass, ResourceList, ResourceList) {
    let c = &r.pod.view.containers[0];
    (r.pod.view.qos, c.requests.clone(), c.limits.clone())
}

#[test]
fn podman_containers_get_requests_from_their_limits_and_a_derived_class() {
    let mib = 1 << 20;
    // podman run --cpus 1 --memory 256m (the config.json Podman 4.3 writes).
    let r = Case {
        resources: r#"{"devices":[{"allow":false,"access":"rwm"}],"memory":{"limit":268435456,"swap":536870912},
                       "cpu":{"quota":100000,"period":100000},"pids":{"limit":2048}}"#,
        parent: Some("/libpod_parent/libpod-9c97240e5399"),
        ..Case::default()
    }
    .admitted();
    let both = list(&[("cpu", 1000), ("memory", 256 * mib)]);
    assert_eq!(
        shape(&r),
        (QosClass::Guaranteed, both.clone(), both.clone())
    );
    assert_eq!(r.qos_source, QosSource::Derived);
    assert_eq!(r.pod.effective, PodResources::new(both.clone(), both));
    let v = &r.pod.view;
    assert_eq!(
        (
            v.uid.as_str(),
            v.name.as_str(),
            v.namespace.as_str(),
            v.containers[0].name.as_str()
        ),
        (ID, "9c97240e5399", "default", "main")
    );
    assert!(v.init_containers.is_empty() && v.resources.is_none());

    // --cpus 1.5 --memory 1g --memory-reservation 512m: Burstable.
    let r = Case {
        resources: r#"{"memory":{"limit":1073741824,"reservation":536870912},"cpu":{"quota":150000,"period":100000}}"#,
        ..Case::default()
    }
    .admitted();
    assert_eq!(
        shape(&r),
        (
            QosClass::Burstable,
            list(&[("cpu", 1500), ("memory", 512 * mib)]),
            list(&[("cpu", 1500), ("memory", 1024 * mib)])
        )
    );
    // --cpus 2 alone: no memory limit, Burstable.
    let r = Case {
        resources: r#"{"cpu":{"quota":200000,"period":100000}}"#,
        ..Case::default()
    }
    .admitted();
    assert_eq!(
        shape(&r),
        (
            QosClass::Burstable,
            list(&[("cpu", 2000)]),
            list(&[("cpu", 2000)])
        )
    );
    // Nothing at all: BestEffort.
    let r = Case::default().admitted();
    assert_eq!(
        shape(&r),
        (
            QosClass::BestEffort,
            ResourceList::new(),
            ResourceList::new()
        )
    );
}

#[test]
fn kubernetes_containers_get_the_class_of_their_cgroup_parent() {
    let gib = 1 << 30;
    let containerd = map(&[
        ("io.kubernetes.cri.container-type", "container"),
        ("io.kubernetes.cri.container-name", "app"),
        ("io.kubernetes.cri.sandbox-name", "web-0"),
        ("io.kubernetes.cri.sandbox-namespace", "shop"),
        ("io.kubernetes.cri.sandbox-uid", UID),
    ]);
    // Guaranteed, 2 CPUs and 1 GiB, cgroupfs driver (containerd's
    // cgroupsPath).
    let path = format!("/kubepods/pod{UID}/{ID}");
    let r = Case {
        annotations: containerd.clone(),
        parent: Some(&path),
        resources: r#"{"cpu":{"shares":2048,"quota":200000,"period":100000},"memory":{"limit":1073741824}}"#,
        ..Case::default()
    }
    .admitted();
    let both = list(&[("cpu", 2000), ("memory", gib)]);
    assert_eq!(shape(&r), (QosClass::Guaranteed, both.clone(), both));
    assert_eq!(r.qos_source, QosSource::CgroupParent);
    assert_eq!(
        r.identity,
        Identity {
            pod_uid: Some(UID.to_owned()),
            pod_name: "web-0".into(),
            namespace: "shop".into(),
            container: "app".into(),
            source: IdentitySource::Containerd,
        }
    );
    assert_eq!(
        (
            r.pod.view.uid.as_str(),
            r.pod.view.name.as_str(),
            r.pod.view.containers[0].name.as_str()
        ),
        (ID, "web-0", "app")
    );

    // A container of a Burstable pod that on its own looks Guaranteed:
    // the parent knows better.
    let path = format!("/kubepods/burstable/pod{UID}/{ID}");
    let r = Case {
        annotations: containerd.clone(),
        parent: Some(&path),
        resources: r#"{"cpu":{"shares":1024,"quota":100000,"period":100000},"memory":{"limit":1073741824}}"#,
        ..Case::default()
    }
    .admitted();
    assert_eq!(r.pod.view.qos, QosClass::Burstable);

    // 100m requested and limited (shares 102, quota 10000), systemd driver.
    let path = format!(
        "kubepods-pod{}.slice:cri-containerd:{ID}",
        UID.replace('-', "_")
    );
    let r = Case {
        annotations: containerd.clone(),
        parent: Some(&path),
        resources: r#"{"cpu":{"shares":102,"quota":10000,"period":100000},"memory":{"limit":134217728}}"#,
        ..Case::default()
    }
    .admitted();
    assert_eq!(
        shape(&r),
        (
            QosClass::Guaranteed,
            list(&[("cpu", 100), ("memory", 128 << 20)]),
            list(&[("cpu", 100), ("memory", 128 << 20)])
        )
    );

    // BestEffort: the kubelet's minimum shares read back as 2m, as the
    // kubelet reads them; the class is the parent's.
    let path = format!("/kubepods/besteffort/pod{UID}/{ID}");
    let r = Case {
        annotations: containerd,
        parent: Some(&path),
        resources: r#"{"cpu":{"shares":2,"period":100000}}"#,
        ..Case::default()
    }
    .admitted();
    assert_eq!(
        shape(&r),
        (
            QosClass::BestEffort,
            list(&[("cpu", 2)]),
            ResourceList::new()
        )
    );
}

#[test]
fn hugepages_extended_resources_and_devices() {
    let gib = 1u64 << 30;
    let r = Case {
        annotations: map(&[(annotations::RESOURCES, "example.com/widget=2")]),
        resources: r#"{"cpu":{"quota":100000,"period":100000},"memory":{"limit":1073741824},
                       "hugepageLimits":[{"pageSize":"2MB","limit":0},{"pageSize":"1GB","limit":2147483648}]}"#,
        env: vec![
            "NVIDIA_VISIBLE_DEVICES=GPU-11,GPU-22".to_owned(),
            "PCIDEVICE_INTEL_COM_SRIOV=0000:3b:02.1".to_owned(),
        ],
        ..Case::default()
    }
    .admitted();
    let both = list(&[
        ("cpu", 1000),
        ("memory", gib),
        ("hugepages-1Gi", 2 * gib),
        ("example.com/widget", 2),
    ]);
    assert_eq!(shape(&r), (QosClass::Guaranteed, both.clone(), both));
    assert_eq!(
        r.devices
            .iter()
            .map(|d| (d.variable.as_str(), d.ids.len()))
            .collect::<Vec<_>>(),
        [
            ("NVIDIA_VISIBLE_DEVICES", 2),
            ("PCIDEVICE_INTEL_COM_SRIOV", 1)
        ]
    );
}

#[test]
fn sandboxes_opted_out_and_pinned_containers_are_left_alone() {
    let sandbox = Case {
        annotations: map(&[("io.kubernetes.cri.container-type", "sandbox")]),
        ..Case::default()
    };
    assert_eq!(sandbox.map().unwrap(), Mapping::Leave(Skip::Sandbox));
    let out = Case {
        annotations: map(&[(annotations::OPT_OUT, "true")]),
        resources: r#"{"cpu":{"quota":100000,"period":100000}}"#,
        ..Case::default()
    };
    assert_eq!(out.map().unwrap(), Mapping::Leave(Skip::OptedOut));
    // podman run --cpuset-cpus 1
    let pinned = Case {
        resources: r#"{"cpu":{"quota":100000,"period":100000,"cpus":"1"}}"#,
        ..Case::default()
    };
    assert_eq!(
        pinned.map().unwrap(),
        Mapping::Leave(Skip::Pinned { cpus: "1".into() })
    );
    assert_eq!(
        Skip::Pinned { cpus: "1".into() }.to_string(),
        "pinned by its user to CPUs 1"
    );
    // An empty cpuset is no pinning.
    let r = Case {
        resources: r#"{"cpu":{"cpus":""}}"#,
        ..Case::default()
    };
    assert!(matches!(r.map().unwrap(), Mapping::Admit(_)));
}

#[test]
fn what_kubernetes_would_refuse_is_an_error() {
    let err = Case {
        resources: r#"{"cpu":{"shares":1024,"quota":50000,"period":100000}}"#,
        ..Case::default()
    }
    .map()
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "CPU (cpu.shares) requests 1000m but is limited to 500m; a request cannot be above its limit (lower the CPU shares (podman --cpu-shares) or raise the CPU limit (--cpus))"
    );
    let err = Case {
        resources: r#"{"memory":{"limit":1048576,"reservation":2097152}}"#,
        ..Case::default()
    }
    .map()
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "memory (memory.reservation) requests 2097152 bytes but is limited to 1048576 bytes; a request cannot be above its limit (lower the memory reservation (podman --memory-reservation) or raise the limit (--memory))"
    );
    let err = Case {
        resources: r#"{"hugepageLimits":[{"pageSize":"2Mi","limit":0}]}"#,
        ..Case::default()
    }
    .map()
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "linux.resources.hugepageLimits: page size \"2Mi\" is not a size such as 2MB or 1GB"
    );
    let err = Case {
        annotations: map(&[(annotations::OPT_OUT, "maybe")]),
        ..Case::default()
    }
    .map()
    .unwrap_err();
    assert!(matches!(err, MappingError::Annotation { .. }), "{err}");
}

#[test]
fn nri_hands_on_the_pod_with_its_cgroup_parent_and_annotations() {
    let sandbox = PodSandbox {
        uid: UID.to_owned(),
        name: "db-0".into(),
        namespace: "data".into(),
        annotations: map(&[(annotations::RESOURCES, "example.com/widget=1")]),
        cgroup_parent: Some(format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            UID.replace('-', "_")
        )),
    };
    let r = resources(
        r#"{"cpu":{"shares":512,"quota":100000,"period":100000},"memory":{"limit":1073741824}}"#,
    );
    let got = map_container(&ContainerSpec {
        id: "c1",
        name: Some("postgres"),
        annotations: &BTreeMap::new(),
        sandbox: Some(&sandbox),
        cgroup_parent: None,
        resources: &r,
        env: &[],
    })
    .unwrap();
    let Mapping::Admit(r) = got else {
        panic!("{got:?}")
    };
    assert_eq!(
        shape(&r),
        (
            QosClass::Burstable,
            list(&[("cpu", 500), ("memory", 1 << 30), ("example.com/widget", 1)]),
            list(&[
                ("cpu", 1000),
                ("memory", 1 << 30),
                ("example.com/widget", 1)
            ])
        )
    );
    assert_eq!(r.qos_source, QosSource::CgroupParent);
    assert_eq!(
        (
            r.pod.view.uid.as_str(),
            r.pod.view.name.as_str(),
            r.pod.view.namespace.as_str(),
            r.pod.view.containers[0].name.as_str()
        ),
        ("c1", "db-0", "data", "postgres")
    );
}

/// The systemd driver under a kubelet `--cgroup-root`: the root's
/// components (escaped, `-` as `_`) lead every slice name, both as the
/// expanded path and as the pod's slice alone; QoS and pod uid come out
/// of each, as without a root.
#[test]
fn systemd_cgroup_parents_under_a_cgroup_root() {
    let s = UID.replace('-', "_");
    // --cgroup-root → the prefix ToSystemd puts before `kubepods`.
    for (root, prefix, slices) in [
        ("/", "", vec![]),
        ("/custom", "custom-", vec!["custom.slice"]),
        ("/a/b", "a-b-", vec!["a.slice", "a-b.slice"]),
        ("/my-root", "my_root-", vec!["my_root.slice"]),
    ] {
        for (qos, class) in [
            (QosClass::Guaranteed, ""),
            (QosClass::Burstable, "burstable-"),
            (QosClass::BestEffort, "besteffort-"),
        ] {
            let pod_slice = format!("{prefix}kubepods-{class}pod{s}.slice");
            let mut expanded: String = slices.iter().map(|n| format!("/{n}")).collect();
            expanded.push_str(&format!("/{prefix}kubepods.slice"));
            if !class.is_empty() {
                expanded.push_str(&format!(
                    "/{prefix}kubepods-{}.slice",
                    &class[..class.len() - 1]
                ));
            }
            expanded.push_str(&format!("/{pod_slice}"));
            let scope = format!("{expanded}/cri-containerd-{ID}.scope");
            let colon = format!("{pod_slice}:cri-containerd:{ID}");
            for parent in [&pod_slice, &expanded, &scope, &colon] {
                // Resources that alone would look Guaranteed: the parent decides.
                let r = Case {
                    parent: Some(parent),
                    resources: r#"{"cpu":{"shares":2048,"quota":200000,"period":100000},"memory":{"limit":1073741824}}"#,
                    ..Default::default()
                }
                .admitted();
                assert_eq!(
                    (r.pod.view.qos, r.qos_source),
                    (qos, QosSource::CgroupParent),
                    "root {root}: {parent}"
                );
                assert_eq!(
                    r.identity.pod_uid.as_deref(),
                    Some(UID),
                    "root {root}: {parent}"
                );
            }
        }
    }
    // The root's own slices and the QoS slices are no pod's.
    for path in [
        "/custom.slice/custom-kubepods.slice",
        "/custom.slice/custom-kubepods.slice/custom-kubepods-burstable.slice",
        "custom-kubepods-gold-pod1234.slice",
        "custom-kubepods-burstable-pod.slice",
    ] {
        assert!(!is_kubelet_cgroup(path), "{path}");
    }
}

/// A Guaranteed pod (by its cgroup parent) whose container's CPU limit is
/// above its own request is Guaranteed through pod-level resources
/// (KEP-2837; the kubelet writes the pod's limit as the quota of a
/// container that sets none): the kubelet's static managers skip it, so it
/// is admitted as Burstable. A container that is Guaranteed on its own,
/// one without a quota (`cpuCFSQuota: false`) and one at the smallest
/// quota keep the parent's class.
#[test]
fn pod_level_resources_are_skipped_as_the_kubelets_static_managers_do() {
    let path = format!("/kubepods/pod{UID}/{ID}");
    let case = |resources: &'static str| {
        Case {
            parent: Some(&path),
            resources,
            ..Case::default()
        }
        .admitted()
    };
    for resources in [
        // requests cpu 2, no limit of its own: the pod's 4 CPUs as quota.
        r#"{"cpu":{"shares":2048,"quota":400000,"period":100000},"memory":{"limit":1073741824}}"#,
        // no request at all: the kubelet's minimum shares.
        r#"{"cpu":{"shares":2,"quota":400000,"period":100000},"memory":{"limit":1073741824}}"#,
    ] {
        let r = case(resources);
        assert_eq!(
            (r.pod.view.qos, r.qos_source),
            (QosClass::Burstable, QosSource::PodLevelResources),
            "{resources}"
        );
    }
    for resources in [
        r#"{"cpu":{"shares":2048,"quota":200000,"period":100000},"memory":{"limit":1073741824}}"#,
        r#"{"cpu":{"shares":2048,"period":100000},"memory":{"limit":1073741824}}"#,
        r#"{"cpu":{"shares":5,"quota":1000,"period":100000},"memory":{"limit":1073741824}}"#,
    ] {
        let r = case(resources);
        assert_eq!(
            (r.pod.view.qos, r.qos_source),
            (QosClass::Guaranteed, QosSource::CgroupParent),
            "{resources}"
        );
    }
    // A Burstable pod's container is Burstable either way.
    let path = format!("/kubepods/burstable/pod{UID}/{ID}");
    let r = Case {
        parent: Some(&path),
        resources: r#"{"cpu":{"shares":2048,"quota":400000,"period":100000}}"#,
        ..Case::default()
    }
    .admitted();
    assert_eq!(
        (r.pod.view.qos, r.qos_source),
        (QosClass::Burstable, QosSource::CgroupParent)
    );
}

/// A container's CDI devices: named by its annotations or found by its
/// device nodes, each with its nodes and (where sysfs says) PCI devices;
/// a privileged container's nodes, other nodes and unknown names are not
/// taken, and the notes say why.
#[test]
fn cdi_devices_by_annotation_and_by_node() {
    use crate::cdi::CdiSpecs;
    use topomgr_sdk::DeviceNode;
    let dir = std::env::temp_dir().join(format!("topomgr-cdi-devices-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (specs_dir, sys) = (dir.join("cdi"), dir.join("sys"));
    std::fs::create_dir_all(&specs_dir).unwrap();
    std::fs::write(
        specs_dir.join("vf.yaml"),
        "cdiVersion: 0.6.0\nkind: example.org/vf\ndevices:\n- name: a\n  containerEdits:\n    deviceNodes:\n    - {path: /dev/vfio/71, major: 243, minor: 5}\n- name: b\n  containerEdits:\n    deviceNodes:\n    - {path: /dev/vfio/72, major: 243, minor: 6}\n",
    )
    .unwrap();
    std::fs::create_dir_all(sys.join("kernel/iommu_groups/71/devices/0000:3b:02.1")).unwrap();
    let (specs, problems) = CdiSpecs::load(&[specs_dir]);
    assert!(problems.is_empty(), "{problems:?}");
    let annotations = BTreeMap::from([(
        "cdi.k8s.io/claim".to_owned(),
        "example.org/vf=a,example.org/vf=zz".to_owned(),
    )]);
    let b = DeviceNode::new("/dev/vfio/72", "c", 243, 6);
    let other = DeviceNode::new("/dev/fuse", "c", 10, 229);
    let (devices, notes) =
        crate::cdi_devices(&annotations, &[b.clone(), other.clone()], &[], &specs, &sys);
    assert_eq!(devices.len(), 2, "{devices:?}");
    assert_eq!(devices[0].variable, "CDI device example.org/vf=a");
    assert_eq!(
        devices[0].ids,
        [DeviceId::PciAddress("0000:3b:02.1".into())]
    );
    assert_eq!(
        devices[0].nodes,
        [DeviceNode::new("/dev/vfio/71", "c", 243, 5)]
    );
    assert_eq!(devices[1].variable, "CDI device example.org/vf=b");
    assert!(devices[1].ids.is_empty(), "no IOMMU group 72 in sysfs");
    assert_eq!(devices[1].nodes, std::slice::from_ref(&b));
    assert_eq!(
        notes,
        ["CDI device example.org/vf=zz (annotation cdi.k8s.io/*) is defined by no spec in the CDI directories"]
    );
    // Privileged: every node of the host; only the annotation counts.
    let kmsg = DeviceNode::new("/dev/kmsg", "c", 1, 11);
    let (devices, notes) =
        crate::cdi_devices(&BTreeMap::new(), &[b, kmsg, other], &[], &specs, &sys);
    assert!(devices.is_empty(), "{devices:?}");
    assert_eq!(
        notes,
        ["the container has /dev/kmsg or /dev/mem (privileged: every host device): its device nodes are not taken for CDI devices"]
    );
    // The kubelet's DRA claims (issue 35 item 2): names as the annotations'
    // are, one already found by an annotation counted once; an unknown or
    // malformed name is noted, not taken.
    let claimed = [
        "example.org/vf=a".to_owned(),
        "example.org/vf=b".to_owned(),
        "example.org/vf=zz".to_owned(),
        "not-a-cdi-name".to_owned(),
    ];
    let annotations =
        BTreeMap::from([("cdi.k8s.io/claim".to_owned(), "example.org/vf=a".to_owned())]);
    let (devices, notes) = crate::cdi_devices(&annotations, &[], &claimed, &specs, &sys);
    let names: Vec<&str> = devices.iter().map(|d| d.variable.as_str()).collect();
    assert_eq!(
        names,
        ["CDI device example.org/vf=a", "CDI device example.org/vf=b"]
    );
    assert_eq!(
        devices[0].ids,
        [DeviceId::PciAddress("0000:3b:02.1".into())]
    );
    assert_eq!(
        notes,
        [
            "CDI device example.org/vf=zz (the kubelet's DRA claim) is defined by no spec in the CDI directories",
            "the kubelet's DRA claim gives \"not-a-cdi-name\", not a qualified CDI device name (vendor.com/class=name)",
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
