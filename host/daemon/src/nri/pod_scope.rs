//! Pod scope under NRI (`scope = "pod"` with `[kubernetes] enabled`).
//!
//! The runtime tells topomgr one container at a time, but the kubelet's
//! pod scope decides for the whole pod: one merged hint for all its
//! containers, every container allocated at the pod's admission
//! (`pkg/kubelet/cm/topologymanager/scope_pod.go`). So at the first
//! container of a pod the face reads the pod from the API server (every
//! init, sidecar and app container, pod-level resources) and admits it
//! whole, under the pod sandbox's id as uid and the sandbox as owner
//! (`nri-sandbox`); each container of the pod, the first and the later
//! ones, then gets its own part of that admission by its name
//! ([`topomgr_node::state::followed::FollowedContainer::held_by`]). The
//! pod stays held until its sandbox stops (StopPodSandbox, or a
//! Synchronize that no longer lists it): a container that exits and
//! restarts gets the same CPUs, as the kubelet keeps a pod's assignment
//! while the pod runs.
//!
//! The spec is read once per pod, at its first container, not at its
//! sandbox's creation: the admission needs nothing the sandbox event
//! carries, and a read then would be as old. When the API server has no
//! such pod (a sandbox created through CRI by hand) the container is
//! admitted on its own, as in container scope; when the pod cannot be
//! read (the API server down, no RBAC), its first container is refused
//! with the reason and the kubelet retries.

use std::sync::Arc;
use std::time::Duration;

use topomgr_kube::pods::{FetchedPod, PodReader};
use topomgr_nri::api::PodSandbox;
use topomgr_sdk::PodView;

/// Where pods are read from.
#[derive(Debug, Clone)]
pub(crate) struct PodSpecs {
    reader: Arc<PodReader>,
}

/// What pod scope does with a container the face admits.
#[derive(Debug)]
pub(crate) enum Whole {
    /// Its pod is admitted whole already (uid: the sandbox id).
    Held(String),
    /// Its pod as read, to admit whole (uid: the sandbox id).
    Read(Box<PodView>),
    /// The API server has no such pod: admitted on its own.
    NotInApi,
}

/// Why a pod could not be read or understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod scope needs the whole pod {namespace}/{name} from the API server and cannot have it: {why}")]
pub(crate) struct Unreadable {
    namespace: String,
    name: String,
    why: String,
}

impl PodSpecs {
    /// Reading through `client`, each read bounded by `timeout`.
    pub(crate) fn new(client: topomgr_kube::ApiClient, timeout: Duration) -> PodSpecs {
        PodSpecs {
            reader: Arc::new(PodReader::new(client, timeout)),
        }
    }

    /// What pod scope does for a container of `pod` to admit, `held`
    /// telling whether a pod of that uid is admitted already.
    pub(crate) async fn whole(
        &self,
        pod: &PodSandbox,
        held: impl FnOnce(&str) -> bool,
    ) -> Result<Whole, Unreadable> {
        if held(&pod.id) {
            return Ok(Whole::Held(pod.id.clone()));
        }
        let unreadable = |why: String| Unreadable {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            why,
        };
        let fetched = self
            .reader
            .get(&pod.namespace, &pod.name)
            .await
            .map_err(|e| unreadable(format!("{e}; the kubelet retries the container")))?;
        match fetched {
            None => Ok(Whole::NotInApi),
            Some(f) if !f.is(&pod.uid) => Err(unreadable(format!(
                "the API server's pod of that name has uid {} where the runtime's sandbox has {} (the pod was deleted and created again)",
                f.uid, pod.uid
            ))),
            Some(f) => view(&f, &pod.id).map(|v| Whole::Read(Box::new(v))).map_err(unreadable),
        }
    }
}

/// The admission view of `fetched` under uid `uid` (the sandbox id): its
/// containers' names and resources, and the pod-level resources, read
/// with the manifest reader's conversions (QoS, defaulting of requests to
/// limits). Only those fields are kept, so a field a newer API server
/// adds elsewhere is not a manifest error.
fn view(fetched: &FetchedPod, uid: &str) -> Result<PodView, String> {
    let pod: serde_json::Value =
        serde_json::from_str(&fetched.json).map_err(|e| format!("its object is not JSON: {e}"))?;
    let containers = |key: &str, fields: &[&str]| -> serde_json::Value {
        let list = pod["spec"][key].as_array().cloned().unwrap_or_default();
        list.into_iter()
            .map(|c| {
                fields
                    .iter()
                    .filter_map(|f| Some(((*f).to_owned(), c.get(*f)?.clone())))
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            })
            .collect::<Vec<serde_json::Value>>()
            .into()
    };
    let mut spec = serde_json::Map::new();
    spec.insert(
        "containers".into(),
        containers("containers", &["name", "resources"]),
    );
    spec.insert(
        "initContainers".into(),
        containers("initContainers", &["name", "resources", "restartPolicy"]),
    );
    if let Some(r) = pod["spec"].get("resources") {
        spec.insert("resources".into(), r.clone());
    }
    let pruned = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod["metadata"]["name"],
            "namespace": pod["metadata"]["namespace"],
            "uid": uid,
        },
        "spec": spec,
    });
    let source = format!(
        "pod {}/{} from the API server",
        pod["metadata"]["namespace"].as_str().unwrap_or_default(),
        pod["metadata"]["name"].as_str().unwrap_or_default()
    );
    let mut pods = topomgr_manifest::parse_pods(&pruned.to_string(), &source)
        .map_err(|e| format!("it cannot be admitted as it is: {e}"))?;
    match (pods.pop(), pods.is_empty()) {
        (Some(p), true) => Ok(p),
        _ => Err("the API server answered no single pod".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(json: serde_json::Value) -> FetchedPod {
        FetchedPod {
            json: json.to_string(),
            uid: "u1".into(),
            mirror_of: None,
        }
    }

    /// The pod as the API server gives it, with fields the manifest reader
    /// does not know (a newer API server's, `status`): only the names and
    /// resources count.
    #[test]
    fn a_pod_of_the_api_server_is_viewed_whole_under_the_sandbox_id() {
        let pod = fetched(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "uid": "u1", "managedFields": [{"manager": "kubectl"}]},
            "spec": {
                "nodeName": "node-1",
                "aFieldOfTheFuture": {"x": 1},
                "initContainers": [
                    {"name": "setup", "image": "busybox", "resources": {"limits": {"cpu": "2", "memory": "64Mi"}}},
                    {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}}
                ],
                "containers": [
                    {"name": "app", "image": "busybox", "command": ["sleep"], "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}},
                    {"name": "gpu", "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "64Mi"}}}
                ]
            },
            "status": {"phase": "Pending", "qosClass": "Guaranteed"}
        }));
        let v = view(&pod, "sandbox-1").unwrap();
        assert_eq!(
            (v.uid.as_str(), v.name.as_str(), v.namespace.as_str()),
            ("sandbox-1", "p", "n")
        );
        assert_eq!(v.qos, topomgr_sdk::QosClass::Guaranteed);
        let names: Vec<(&str, bool)> = v
            .init_containers
            .iter()
            .chain(&v.containers)
            .map(|c| (c.name.as_str(), c.sidecar))
            .collect();
        assert_eq!(
            names,
            [
                ("setup", false),
                ("proxy", true),
                ("app", false),
                ("gpu", false)
            ]
        );
        assert_eq!(
            v.containers[0].request("cpu"),
            1000,
            "defaulted from the limit"
        );
        assert_eq!(v.containers[1].request("cpu"), 500);
    }

    #[test]
    fn a_pod_the_manifest_reader_refuses_is_named_with_the_reason() {
        let pod = fetched(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "uid": "u1"},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}
        }));
        let e = view(&pod, "s").unwrap_err();
        assert!(
            e.starts_with("it cannot be admitted as it is: pod n/p from the API server"),
            "{e}"
        );
    }
}
