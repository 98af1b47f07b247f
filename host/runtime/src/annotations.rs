//! The annotations topomgr reads: who the container is (the runtime's
//! own), and what the user asks of topomgr (`topomgr.io/…`).
//!
//! # Identity (set by the runtime)
//!
//! | runtime | pod name | namespace | pod uid | container | sandbox |
//! |---|---|---|---|---|---|
//! | CRI-O | `io.kubernetes.pod.name` | `io.kubernetes.pod.namespace` | `io.kubernetes.pod.uid` | `io.kubernetes.container.name` | `io.kubernetes.cri-o.ContainerType: sandbox` |
//! | containerd (CRI) | `io.kubernetes.cri.sandbox-name` | `io.kubernetes.cri.sandbox-namespace` | `io.kubernetes.cri.sandbox-uid` | `io.kubernetes.cri.container-name` | `io.kubernetes.cri.container-type: sandbox` |
//!
//! A container with neither (Podman, `ctr`, a plain runc bundle) is its own
//! pod: named by the first 12 characters of its id (the name Podman shows
//! and its containers' host name), namespace `default`, container `main`.
//!
//! # What the user asks ([`RESOURCES`], [`OPT_OUT`])
//!
//! - `topomgr.io/resources: "nvidia.com/gpu=2,example.com/widget=1"`:
//!   extended resources (device plugin resources: a name with a domain,
//!   `domain/name`) and their counts, comma-separated `NAME=COUNT`
//!   (Kubernetes quantities; spaces around items allowed), requested and
//!   limited to that count, as Kubernetes requires of extended resources.
//!   `cpu`, `memory` and `hugepages-*` are not accepted here: they come from
//!   the container's own limits (`--cpus`, `--memory`, hugepage limits).
//! - `topomgr.io/opt-out: "true"` (Go's boolean spellings, as the kubelet
//!   reads booleans): topomgr leaves the container alone.
//!
//! Podman: `podman run --annotation topomgr.io/resources=nvidia.com/gpu=1`.
//! Kubernetes: pod annotations reach the container's spec with CRI-O; with
//! containerd only those its runtime's `pod_annotations` list names (add
//! `"topomgr.io/*"`); NRI hands on the pod's annotations itself.

use std::collections::BTreeMap;

use topomgr_sdk::quantity::parse_resource_amount;
use topomgr_sdk::ResourceList;

use super::MappingError;

/// The annotation with the extended resources a container asks for.
pub(crate) const RESOURCES: &str = "topomgr.io/resources";
/// The annotation with which a container opts out of topomgr.
pub(crate) const OPT_OUT: &str = "topomgr.io/opt-out";

/// Who a container is, from its runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The pod's uid, when a Kubernetes runtime tells it.
    pub pod_uid: Option<String>,
    /// The pod's name.
    pub pod_name: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The container's name.
    pub container: String,
    /// Which runtime's annotations said so.
    pub source: IdentitySource,
}

/// Where an [`Identity`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentitySource {
    /// The runtime's pod sandbox (NRI).
    Sandbox,
    /// CRI-O's annotations.
    CriO,
    /// containerd's CRI annotations.
    Containerd,
    /// Neither: the container is its own pod.
    Standalone,
}

/// The pod of a container as a runtime hands it on directly (NRI's
/// `PodSandbox`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodSandbox {
    /// Pod uid.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// The pod's annotations.
    pub annotations: BTreeMap<String, String>,
    /// The pod's cgroup parent, as the kubelet named it.
    pub cgroup_parent: Option<String>,
}

const CRIO: [&str; 4] = [
    "io.kubernetes.pod.name",
    "io.kubernetes.pod.namespace",
    "io.kubernetes.pod.uid",
    "io.kubernetes.container.name",
];
const CONTAINERD: [&str; 4] = [
    "io.kubernetes.cri.sandbox-name",
    "io.kubernetes.cri.sandbox-namespace",
    "io.kubernetes.cri.sandbox-uid",
    "io.kubernetes.cri.container-name",
];

/// The container's identity: from `sandbox` when the runtime gave one,
/// else from CRI-O's or containerd's annotations, else its own pod.
pub(crate) fn identity(
    id: &str,
    name: Option<&str>,
    annotations: &BTreeMap<String, String>,
    sandbox: Option<&PodSandbox>,
) -> Identity {
    let get = |k: &str| annotations.get(k).filter(|v| !v.is_empty()).cloned();
    if let Some(s) = sandbox {
        return Identity {
            pod_uid: Some(s.uid.clone()).filter(|u| !u.is_empty()),
            pod_name: s.name.clone(),
            namespace: s.namespace.clone(),
            container: name
                .map(str::to_owned)
                .or_else(|| get(CONTAINERD[3]))
                .or_else(|| get(CRIO[3]))
                .unwrap_or_else(|| "main".to_owned()),
            source: IdentitySource::Sandbox,
        };
    }
    for (keys, source) in [
        (CRIO, IdentitySource::CriO),
        (CONTAINERD, IdentitySource::Containerd),
    ] {
        if let Some(pod_name) = get(keys[0]) {
            return Identity {
                pod_uid: get(keys[2]),
                pod_name,
                namespace: get(keys[1]).unwrap_or_else(|| "default".to_owned()),
                container: name
                    .map(str::to_owned)
                    .or_else(|| get(keys[3]))
                    .unwrap_or_else(|| "main".to_owned()),
                source,
            };
        }
    }
    Identity {
        pod_uid: None,
        pod_name: id.chars().take(12).collect(),
        namespace: "default".to_owned(),
        container: name.map(str::to_owned).unwrap_or_else(|| "main".to_owned()),
        source: IdentitySource::Standalone,
    }
}

/// Whether the container is a pod's sandbox (pause) container.
pub(crate) fn is_sandbox(annotations: &BTreeMap<String, String>) -> bool {
    [
        "io.kubernetes.cri.container-type",
        "io.kubernetes.cri-o.ContainerType",
    ]
    .iter()
    .any(|k| annotations.get(*k).is_some_and(|v| v == "sandbox"))
}

/// The value of a `topomgr.io/…` annotation: the container's, else the
/// pod's.
fn lookup<'a>(
    key: &str,
    container: &'a BTreeMap<String, String>,
    pod: Option<&'a BTreeMap<String, String>>,
) -> Option<&'a str> {
    container
        .get(key)
        .or_else(|| pod.and_then(|p| p.get(key)))
        .map(String::as_str)
}

/// Whether the container opted out ([`OPT_OUT`]).
pub(crate) fn opted_out(
    container: &BTreeMap<String, String>,
    pod: Option<&BTreeMap<String, String>>,
) -> Result<bool, MappingError> {
    match lookup(OPT_OUT, container, pod) {
        None => Ok(false),
        Some(v) => topomgr_sdk::parse_go_bool(v).ok_or_else(|| MappingError::Annotation {
            key: OPT_OUT,
            value: v.to_owned(),
            problem: "is not a boolean (write \"true\" or \"false\")".to_owned(),
        }),
    }
}

/// The extended resources the container asks for ([`RESOURCES`]).
pub(crate) fn extended_resources(
    container: &BTreeMap<String, String>,
    pod: Option<&BTreeMap<String, String>>,
) -> Result<ResourceList, MappingError> {
    let Some(value) = lookup(RESOURCES, container, pod) else {
        return Ok(ResourceList::new());
    };
    let bad = |problem: String| MappingError::Annotation {
        key: RESOURCES,
        value: value.to_owned(),
        problem,
    };
    let mut out = ResourceList::new();
    for item in value.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(bad(
                "has an empty item; write NAME=COUNT items separated by commas, e.g. nvidia.com/gpu=2,example.com/widget=1"
                    .to_owned(),
            ));
        }
        let Some((name, count)) = item.split_once('=') else {
            return Err(bad(format!(
                "item {item:?} is not NAME=COUNT (e.g. nvidia.com/gpu=2)"
            )));
        };
        let (name, count) = (name.trim(), count.trim());
        if name == "cpu" || name == "memory" || name.starts_with("hugepages-") {
            return Err(bad(format!(
                "{name} is not an extended resource; it comes from the container's own limits (podman run --cpus, --memory; a pod's resources)"
            )));
        }
        let valid_name = name.split_once('/').is_some_and(|(domain, rest)| {
            !domain.is_empty()
                && !rest.is_empty()
                && !rest.contains('/')
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._/".contains(c))
        });
        if !valid_name {
            return Err(bad(format!(
                "{name:?} is not an extended resource name (domain/name, e.g. nvidia.com/gpu)"
            )));
        }
        let amount = parse_resource_amount(name, count).map_err(|e| bad(format!("{name}: {e}")))?;
        if amount == 0 {
            return Err(bad(format!(
                "{name}: a count of 0 asks for nothing; leave it out"
            )));
        }
        if out.insert(name.to_owned(), amount).is_some() {
            return Err(bad(format!("{name} is named twice")));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn identity_from_each_runtime() {
        let crio = map(&[
            ("io.kubernetes.pod.name", "web-0"),
            ("io.kubernetes.pod.namespace", "shop"),
            ("io.kubernetes.pod.uid", "u-1"),
            ("io.kubernetes.container.name", "app"),
            ("io.kubernetes.cri-o.ContainerType", "container"),
        ]);
        assert_eq!(
            identity("abc", None, &crio, None),
            Identity {
                pod_uid: Some("u-1".into()),
                pod_name: "web-0".into(),
                namespace: "shop".into(),
                container: "app".into(),
                source: IdentitySource::CriO,
            }
        );
        let containerd = map(&[
            ("io.kubernetes.cri.sandbox-name", "web-1"),
            ("io.kubernetes.cri.sandbox-namespace", "shop"),
            ("io.kubernetes.cri.sandbox-uid", "u-2"),
            ("io.kubernetes.cri.container-name", "side"),
            ("io.kubernetes.cri.container-type", "container"),
        ]);
        assert_eq!(
            identity("abc", None, &containerd, None),
            Identity {
                pod_uid: Some("u-2".into()),
                pod_name: "web-1".into(),
                namespace: "shop".into(),
                container: "side".into(),
                source: IdentitySource::Containerd,
            }
        );
        // Podman: the annotations it writes say nothing of a pod.
        let podman = map(&[
            ("io.container.manager", "libpod"),
            ("io.kubernetes.cri-o.Created", "2026-11-27T21:30:04Z"),
        ]);
        let id = "9c97240e539922e3357d0e088fb613ee83e8be57aa1bda5a853c1b5ed567d6f6";
        assert_eq!(
            identity(id, None, &podman, None),
            Identity {
                pod_uid: None,
                pod_name: "9c97240e5399".into(),
                namespace: "default".into(),
                container: "main".into(),
                source: IdentitySource::Standalone,
            }
        );
        // NRI: the sandbox and the container's name.
        let sandbox = PodSandbox {
            uid: "u-3".into(),
            name: "db-0".into(),
            namespace: "data".into(),
            ..PodSandbox::default()
        };
        let got = identity("abc", Some("postgres"), &containerd, Some(&sandbox));
        assert_eq!(
            (
                got.pod_uid.as_deref(),
                got.pod_name.as_str(),
                got.container.as_str(),
                got.source
            ),
            (Some("u-3"), "db-0", "postgres", IdentitySource::Sandbox)
        );
        assert!(is_sandbox(&map(&[(
            "io.kubernetes.cri.container-type",
            "sandbox"
        )])));
        assert!(is_sandbox(&map(&[(
            "io.kubernetes.cri-o.ContainerType",
            "sandbox"
        )])));
        assert!(!is_sandbox(&crio));
    }

    #[test]
    fn extended_resources_from_the_annotation() {
        let got = extended_resources(
            &map(&[(RESOURCES, " nvidia.com/gpu=2 , example.com/widget = 1")]),
            None,
        )
        .unwrap();
        assert_eq!(
            got,
            [
                ("example.com/widget".to_owned(), 1),
                ("nvidia.com/gpu".to_owned(), 2)
            ]
            .into()
        );
        // The pod's annotation when the container has none; the
        // container's wins.
        let pod = map(&[(RESOURCES, "example.com/widget=3")]);
        assert_eq!(
            extended_resources(&BTreeMap::new(), Some(&pod)).unwrap(),
            [("example.com/widget".to_owned(), 3)].into()
        );
        assert_eq!(
            extended_resources(&map(&[(RESOURCES, "a.b/c=1")]), Some(&pod)).unwrap(),
            [("a.b/c".to_owned(), 1)].into()
        );
        assert!(extended_resources(&BTreeMap::new(), None)
            .unwrap()
            .is_empty());
        for (value, problem) in [
            ("", "has an empty item; write NAME=COUNT items separated by commas, e.g. nvidia.com/gpu=2,example.com/widget=1"),
            ("nvidia.com/gpu=1,", "has an empty item; write NAME=COUNT items separated by commas, e.g. nvidia.com/gpu=2,example.com/widget=1"),
            ("nvidia.com/gpu", "item \"nvidia.com/gpu\" is not NAME=COUNT (e.g. nvidia.com/gpu=2)"),
            ("gpu=1", "\"gpu\" is not an extended resource name (domain/name, e.g. nvidia.com/gpu)"),
            ("a/b/c=1", "\"a/b/c\" is not an extended resource name (domain/name, e.g. nvidia.com/gpu)"),
            ("cpu=2", "cpu is not an extended resource; it comes from the container's own limits (podman run --cpus, --memory; a pod's resources)"),
            ("hugepages-2Mi=2Mi", "hugepages-2Mi is not an extended resource; it comes from the container's own limits (podman run --cpus, --memory; a pod's resources)"),
            ("nvidia.com/gpu=two", "nvidia.com/gpu: invalid quantity \"two\""),
            ("nvidia.com/gpu=0", "nvidia.com/gpu: a count of 0 asks for nothing; leave it out"),
            ("x.io/a=1,x.io/a=2", "x.io/a is named twice"),
        ] {
            let err = extended_resources(&map(&[(RESOURCES, value)]), None).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("annotation {RESOURCES}={value:?} {problem}"),
                "{value:?}"
            );
        }
    }

    #[test]
    fn opting_out_takes_gos_booleans() {
        assert!(!opted_out(&BTreeMap::new(), None).unwrap());
        assert!(opted_out(&map(&[(OPT_OUT, "true")]), None).unwrap());
        assert!(opted_out(&BTreeMap::new(), Some(&map(&[(OPT_OUT, "1")]))).unwrap());
        assert!(!opted_out(&map(&[(OPT_OUT, "False")]), None).unwrap());
        assert_eq!(
            opted_out(&map(&[(OPT_OUT, "yes")]), None)
                .unwrap_err()
                .to_string(),
            "annotation topomgr.io/opt-out=\"yes\" is not a boolean (write \"true\" or \"false\")"
        );
    }
}
