//! The QoS class and pod uid in the kubelet's cgroup names.
//!
//! With `--cgroups-per-qos` (the default) the kubelet puts each pod's
//! cgroup under the node's `kubepods` cgroup, Guaranteed pods directly,
//! the others under a cgroup of their QoS class
//! (`pkg/kubelet/cm/qos_container_manager_linux.go`,
//! `pod_container_manager_linux.go`):
//!
//! | driver | Guaranteed | Burstable | BestEffort |
//! |---|---|---|---|
//! | cgroupfs | `/kubepods/pod<uid>` | `/kubepods/burstable/pod<uid>` | `/kubepods/besteffort/pod<uid>` |
//! | systemd | `/kubepods.slice/kubepods-pod<uid>.slice` | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice` | `…/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice` |
//!
//! The systemd driver escapes each name's `-` as `_`
//! (`ConvertCgroupNameToSystemd` in `cgroup_manager_linux.go`), so a uid
//! `8dbc5a0a-…` appears as `8dbc5a0a_…`. The kubelet's `--cgroup-root` may
//! put all of it under a prefix: a parent directory with cgroupfs
//! (`/custom/kubepods/burstable/pod<uid>`), the root's components before
//! `kubepods` in every slice name with systemd
//! (`/custom.slice/custom-kubepods.slice/custom-kubepods-burstable.slice/custom-kubepods-burstable-pod<uid>.slice`). What a runtime hands on is either the
//! pod's cgroup parent (NRI's `PodSandbox.linux.cgroup_parent`, CRI-O's
//! `io.kubernetes.cri-o.CgroupParent`) or a container's cgroups path, which
//! adds the container's own name (`/kubepods/pod<uid>/<id>` with
//! cgroupfs; `kubepods-burstable-pod<uid>.slice:cri-containerd:<id>` in
//! the systemd driver's `slice:prefix:name` form): [`kubelet_cgroup`]
//! reads all of them.

use topomgr_sdk::QosClass;

/// What a kubelet's cgroup name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KubeletCgroup {
    /// The pod's QoS class.
    pub qos: QosClass,
    /// The pod's uid (with `-`, as the API server spells it).
    pub pod_uid: String,
}

/// The QoS class and pod uid of a pod cgroup name of either driver, or of
/// a container's cgroups path below one; `None` for any other path (not
/// the kubelet's, or a kubelet without `--cgroups-per-qos`).
pub(crate) fn kubelet_cgroup(path: &str) -> Option<KubeletCgroup> {
    let names: Vec<&str> = path.split(['/', ':']).filter(|n| !n.is_empty()).collect();
    // The systemd driver: the pod's own slice says it all.
    for name in &names {
        if let Some(found) = systemd_pod_slice(name) {
            return Some(found);
        }
    }
    // cgroupfs: kubepods[/burstable|/besteffort]/pod<uid>.
    let at = names.iter().position(|n| *n == "kubepods")?;
    let rest = &names[at + 1..];
    let (qos, pod) = match rest {
        ["burstable", pod, ..] => (QosClass::Burstable, *pod),
        ["besteffort", pod, ..] => (QosClass::BestEffort, *pod),
        [pod, ..] => (QosClass::Guaranteed, *pod),
        [] => return None,
    };
    let uid = pod.strip_prefix("pod").filter(|u| is_uid(u))?;
    Some(KubeletCgroup {
        qos,
        pod_uid: uid.to_owned(),
    })
}

/// `[<root>-]kubepods[-burstable|-besteffort]-pod<uid>.slice`: the
/// kubelet's `CgroupName.ToSystemd` (`cgroup_manager_linux.go`) escapes
/// each component's `-` as `_` and joins the components with `-`, so the
/// stem split at `-` gives the components back: those of `--cgroup-root`
/// (`/custom` → `custom`, `/a/b` → `a`, `b`), `kubepods`, the QoS class
/// but for Guaranteed, and `pod<uid>`, last. libcontainer's `ExpandSlice`
/// then nests each prefix as a parent slice (`custom.slice/
/// custom-kubepods.slice/…`); only the pod's own slice matches here.
fn systemd_pod_slice(name: &str) -> Option<KubeletCgroup> {
    let parts: Vec<&str> = name.strip_suffix(".slice")?.split('-').collect();
    let at = parts.iter().rposition(|p| *p == "kubepods")?;
    let (qos, pod) = match &parts[at + 1..] {
        ["burstable", pod] => (QosClass::Burstable, *pod),
        ["besteffort", pod] => (QosClass::BestEffort, *pod),
        [pod] => (QosClass::Guaranteed, *pod),
        _ => return None,
    };
    let uid = pod.strip_prefix("pod")?.replace('_', "-");
    is_uid(&uid).then_some(KubeletCgroup { qos, pod_uid: uid })
}

/// A pod uid as the API server writes them: hex digits and dashes (a
/// static pod's uid is a hex hash), not empty.
fn is_uid(u: &str) -> bool {
    !u.is_empty() && u.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "8dbc5a0a-1f3c-4c0e-9b1e-7f2a0d6c9e11";

    fn found(qos: QosClass) -> Option<KubeletCgroup> {
        Some(KubeletCgroup {
            qos,
            pod_uid: UID.to_owned(),
        })
    }

    #[test]
    fn cgroupfs_driver_parents_and_container_paths() {
        let u = UID;
        for (path, qos) in [
            (format!("/kubepods/pod{u}"), QosClass::Guaranteed),
            (format!("/kubepods/burstable/pod{u}"), QosClass::Burstable),
            (format!("/kubepods/besteffort/pod{u}"), QosClass::BestEffort),
            // containerd's cgroupsPath of a container (id appended).
            (format!("/kubepods/pod{u}/4f1e3a"), QosClass::Guaranteed),
            (
                format!("/kubepods/burstable/pod{u}/4f1e3a"),
                QosClass::Burstable,
            ),
            // CRI-O's container cgroup name.
            (
                format!("/kubepods/besteffort/pod{u}/crio-4f1e3a"),
                QosClass::BestEffort,
            ),
            // The kubelet's --cgroup-root under a prefix.
            (
                format!("/custom/root/kubepods/burstable/pod{u}"),
                QosClass::Burstable,
            ),
            (format!("kubepods/pod{u}"), QosClass::Guaranteed),
        ] {
            assert_eq!(kubelet_cgroup(&path), found(qos), "{path}");
        }
    }

    #[test]
    fn systemd_driver_slices_with_escaped_uids() {
        let s = UID.replace('-', "_");
        for (path, qos) in [
            (format!("/kubepods.slice/kubepods-pod{s}.slice"), QosClass::Guaranteed),
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{s}.slice"),
                QosClass::Burstable,
            ),
            (
                format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{s}.slice"),
                QosClass::BestEffort,
            ),
            // NRI's cgroup parent is the slice name alone.
            (format!("kubepods-burstable-pod{s}.slice"), QosClass::Burstable),
            // The slice:prefix:name cgroupsPath of containerd and CRI-O.
            (format!("kubepods-pod{s}.slice:cri-containerd:4f1e3a"), QosClass::Guaranteed),
            (format!("kubepods-besteffort-pod{s}.slice:crio:4f1e3a"), QosClass::BestEffort),
            // The container's scope below the pod's slice.
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{s}.slice/cri-containerd-4f1e3a.scope"),
                QosClass::Burstable,
            ),
        ] {
            assert_eq!(kubelet_cgroup(&path), found(qos), "{path}");
        }
    }

    #[test]
    fn other_paths_are_not_the_kubelets() {
        for path in [
            "",
            "/",
            "/libpod_parent/libpod-9c97240e5399",
            "machine.slice:libpod:9c97240e5399",
            "/kubepods",
            "/kubepods/burstable",
            "/kubepods.slice",
            "/kubepods.slice/kubepods-burstable.slice",
            "/kubepods/podnot-a-uid!",
            "/kubepods/burstable/something",
            "kubepods-burstable-pod.slice",
            "kubepods-gold-pod1234.slice",
        ] {
            assert_eq!(kubelet_cgroup(path), None, "{path:?}");
        }
    }
}
