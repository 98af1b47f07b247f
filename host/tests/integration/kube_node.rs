//! topomgr on a real one-node Kubernetes: etcd, kube-apiserver and a
//! kubelet of the 1.37 line (built by `.ci/install-kubernetes`), on a
//! private containerd 1.7 and 2.x with topomgr as its NRI plugin,
//! configured with the commands of `docs/kubernetes.md` (as `nri.rs` does).
//! Pods are created and deleted with `kubectl`, as a user does; what each
//! container got is read from its real cgroup and from inside it
//! (`/proc/<pid>/status` of its process).
//!
//! After every step the invariants hold, read from the containers' real
//! cgroups: no CPU is exclusive to two containers, every container that
//! is not exclusive runs on exactly the shared pool (which holds no
//! exclusive CPU), and topomgr holds nothing for a container that is gone.
//!
//! The machine has CPUs 0-1 and one NUMA node; topomgr reserves CPU 0 and
//! the kubelet reserves one CPU (`systemReserved`), so CPU 1 is the one
//! exclusive CPU and the kubelet admits what topomgr can place.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use topomgr_node::api::{Health, PodList};
use topomgr_runtime_harness::{
    ContainerdLine, KubeNode, KubeOptions, RunningContainer, IMAGE, NODE_NAME,
};
use topomgr_sdk::CpuSet;

use crate::daemon::Daemon;
use crate::nri;

const NEEDS: &str = "needs root, a cpuset cgroup, containerd 1.7 and 2.x and the one-node Kubernetes of .ci/install-kubernetes";

/// A pod for `kubectl apply`: hostNetwork, the local image, a process that
/// exits at once on SIGTERM. `qos`: `guaranteed` (`cpu` whole CPUs),
/// `burstable` (a memory request only: it fits beside a Guaranteed pod on
/// one allocatable CPU) or `besteffort`.
fn pod(name: &str, qos: &str, cpu: u32) -> String {
    let resources = match qos {
        "guaranteed" => format!(
            "      resources:\n        requests: {{cpu: \"{cpu}\", memory: 64Mi}}\n        limits: {{cpu: \"{cpu}\", memory: 64Mi}}\n"
        ),
        "burstable" => "      resources:\n        requests: {memory: 32Mi}\n".to_owned(),
        _ => String::new(),
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  nodeName: {NODE_NAME}\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  containers:\n    - name: app\n      image: {IMAGE}\n      imagePullPolicy: Never\n      command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]\n{resources}"
    )
}

/// The cluster, topomgr serving it as containerd's NRI plugin, registered.
struct Cluster {
    node: KubeNode,
    daemon: Option<Daemon>,
    config: PathBuf,
    socket: PathBuf,
}

impl Cluster {
    fn start(line: ContainerdLine, options: KubeOptions) -> Cluster {
        Cluster::start_with(line, options, |_, _| String::new())
    }

    /// [`Cluster::start`], with `prepare` run once the cluster is up and
    /// before topomgr starts (given the node and topomgr's config
    /// directory), its answer a config drop-in for topomgr.
    fn start_with(
        line: ContainerdLine,
        options: KubeOptions,
        prepare: impl FnOnce(&KubeNode, &std::path::Path) -> String,
    ) -> Cluster {
        nri::require_machine();
        let node = KubeNode::start(line, options).unwrap_or_else(|e| panic!("{NEEDS}: {e}"));
        let (config, socket) = nri::configure(&format!("kube-{line:?}"), node.containerd());
        let extra = prepare(&node, config.parent().unwrap());
        if !extra.is_empty() {
            std::fs::write(config.with_file_name("plugins.d/98-cluster.toml"), extra).unwrap();
        }
        let topomgr = nri::serve(&config, &socket);
        // The documented setup is healthy once registered: no note.
        nri::wait_until(&topomgr, "registered with containerd, healthy", |h, _| {
            h.nri.connected && h.notes.is_empty()
        });
        Cluster {
            node,
            daemon: Some(topomgr),
            config,
            socket,
        }
    }

    fn topomgr(&self) -> &Daemon {
        self.daemon.as_ref().expect("topomgr runs")
    }

    /// Stops topomgr (SIGTERM, as systemd does) and starts it again on the
    /// same state; waits until it is registered and synchronized.
    fn restart_topomgr(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.stop();
        }
        let d = nri::serve(&self.config, &self.socket);
        nri::wait_until(&d, "registered with containerd again", |h, _| {
            h.nri.connected
        });
        self.daemon = Some(d);
    }

    fn health(&self) -> Health {
        self.topomgr()
            .client()
            .get("/v1/health")
            .unwrap()
            .parse()
            .unwrap()
    }

    fn pods(&self) -> PodList {
        self.topomgr()
            .client()
            .get("/v1/pods")
            .unwrap()
            .parse()
            .unwrap()
    }

    fn apply(&self, yaml: &str) {
        self.node.apply(yaml).unwrap();
    }

    /// Waits until pod `name` is Running with its container started.
    fn wait_running(&self, name: &str) {
        self.node
            .wait(
                &format!("pod {name} running"),
                Duration::from_secs(60),
                || {
                    let p = self.node.get_json(&["pod", name])?;
                    (p["status"]["phase"] == "Running"
                        && p["status"]["containerStatuses"][0]["state"]["running"].is_object())
                    .then_some(())
                },
            )
            .unwrap();
    }

    /// Deletes pods and waits until the API server has none of them.
    fn delete(&self, names: &[&str]) {
        let mut args = vec!["delete", "pod", "--wait=true", "--timeout=60s"];
        args.extend_from_slice(names);
        self.node.kubectl(&args).unwrap();
    }

    /// The running pods' containers, by pod name: `(cgroup cpuset.cpus,
    /// the process's Cpus_allowed_list, its Mems_allowed_list)`.
    fn placements(&self) -> BTreeMap<String, (String, String, String)> {
        placements_of(&self.node.running_containers("default"))
    }

    /// The invariants, from the real cgroups, or why they do not hold.
    fn violations(&self) -> Option<String> {
        let (h, list) = (self.health(), self.pods());
        // One look at what the kubelet runs serves every check below.
        let live = self.node.running_containers("default");
        let running: BTreeMap<&str, &RunningContainer> =
            live.iter().map(|c| (c.id.as_str(), c)).collect();
        // Exclusive CPUs by (pod name, container name).
        let mut exclusive: BTreeMap<(String, String), CpuSet> = BTreeMap::new();
        let mut all = CpuSet::new();
        for pod in &list.pods {
            // A pod admitted whole (pod scope): each of its containers,
            // created yet or not, holds its part.
            let whole = is_whole(&list, &pod.uid);
            let of = |c: &topomgr_node::api::ContainerAdmission| match running.get(pod.uid.as_str())
            {
                _ if whole => Some((pod.name.clone(), c.name.clone())),
                Some(r) => Some((r.pod.clone(), r.container.clone())),
                // A container the runtime is still creating or stopping.
                None => None,
            };
            // Within a pod, an init container's CPUs go on to its app
            // containers (as the kubelet reuses them); across pods no CPU
            // is held twice.
            let mut of_pod = CpuSet::new();
            for c in pod.containers.iter().filter(|c| c.exclusive) {
                let Some(key) = of(c) else { continue };
                of_pod = of_pod.union(&c.cpus);
                exclusive.insert(key, c.cpus.clone());
            }
            if !all.intersection(&of_pod).is_empty() {
                return Some(format!("CPUs {of_pod} held twice: {list:?}"));
            }
            all = all.union(&of_pod);
        }
        if !h.shared_pool.intersection(&all).is_empty() {
            return Some(format!(
                "the shared pool {} holds exclusive CPUs {all}",
                h.shared_pool
            ));
        }
        for r in &live {
            let Some((cgroup, inside, _)) = r.cpus() else {
                continue;
            };
            let name = format!("{}/{}", r.pod, r.container);
            let want = exclusive
                .get(&(r.pod.clone(), r.container.clone()))
                .cloned()
                .unwrap_or_else(|| h.shared_pool.clone())
                .to_string();
            if cgroup != want || inside != want {
                return Some(format!(
                    "pod {name} runs on {cgroup} (cgroup) / {inside} (inside), not {want}; \
                     exclusive: {exclusive:?}, shared pool {}",
                    h.shared_pool
                ));
            }
        }
        None
    }

    /// Waits (10 s) until the invariants hold: what topomgr answers the
    /// runtime is applied within that.
    fn check(&self, step: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.violations() {
                None => return,
                Some(v) if Instant::now() > deadline => {
                    panic!("after {step}: {v}")
                }
                Some(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The ids of the containers the kubelet runs.
    /// Waits (30 s) until topomgr holds exactly the containers the kubelet
    /// runs: nothing for a pod that is gone.
    fn wait_released(&self) {
        self.node
            .wait(
                "topomgr holds only the running containers",
                Duration::from_secs(30),
                || {
                    let list = self.pods();
                    let live = self.node.running_containers("default");
                    // Pods admitted whole: only pods with a running container.
                    let (whole, own): (Vec<_>, Vec<_>) =
                        list.pods.iter().partition(|p| is_whole(&list, &p.uid));
                    let held: Vec<&str> = own.iter().map(|p| p.uid.as_str()).collect();
                    let running = running_of(&live);
                    let pods: Vec<&str> = running.values().map(String::as_str).collect();
                    // The others: one admission per container.
                    let ids: Vec<&str> = running
                        .iter()
                        .filter(|(_, pod)| !whole.iter().any(|p| &p.name == *pod))
                        .map(|(id, _)| id.as_str())
                        .collect();
                    (held == ids && whole.iter().all(|p| pods.contains(&p.name.as_str())))
                        .then_some(())
                },
            )
            .unwrap();
    }
}

/// A kubeconfig for topomgr in `etc`, with the test cluster's admin
/// token; its path.
fn topomgr_kubeconfig(node: &KubeNode, etc: &std::path::Path) -> PathBuf {
    let admin = std::fs::read_to_string(node.kubeconfig()).unwrap();
    let server = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_owned();
    let ca = node.kubeconfig().with_file_name("pki/apiserver.crt");
    let kubeconfig = etc.join("topomgr.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: topomgr\n  user:\n    token: admin-token\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: topomgr\ncurrent-context: t\n",
            ca.display()
        ),
    )
    .unwrap();
    kubeconfig
}

/// Whether pod `uid` of `list` is a pod admitted whole (pod scope, owned
/// by its sandbox).
fn is_whole(list: &PodList, uid: &str) -> bool {
    list.owners.get(uid).is_some_and(|o| {
        o.runtime == Some(topomgr_node::state::pod_owner::ContainerRuntime::NriSandbox)
    })
}

/// Container id -> pod name, of the containers the kubelet runs.
fn running_of(live: &[RunningContainer]) -> BTreeMap<String, String> {
    live.iter().map(|c| (c.id.clone(), c.pod.clone())).collect()
}

/// Pod name -> `(cgroup cpuset.cpus, the process's Cpus_allowed_list, its
/// Mems_allowed_list)` of each running container.
fn placements_of(live: &[RunningContainer]) -> BTreeMap<String, (String, String, String)> {
    live.iter()
        .filter_map(|c| Some((c.pod.clone(), c.cpus()?)))
        .collect()
}

fn guaranteed_and_shared_pods(line: ContainerdLine) {
    let c = Cluster::start(line, KubeOptions::default());
    c.apply(&pod("shared", "burstable", 0));
    c.apply(&pod("idle", "besteffort", 0));
    c.wait_running("shared");
    c.wait_running("idle");
    c.check("two shared pods");
    let p = c.placements();
    assert_eq!(p["shared"].0, "0-1", "no exclusive CPU yet: {p:?}");

    c.apply(&pod("pinned", "guaranteed", 1));
    c.wait_running("pinned");
    c.check("a Guaranteed pod");
    let p = c.placements();
    assert_eq!(
        p["pinned"],
        ("1".into(), "1".into(), "0".into()),
        "the Guaranteed container has CPU 1 and memory node 0, seen from inside: {p:?}"
    );
    assert_eq!(p["shared"].1, "0", "the shared pool shrank: {p:?}");
    assert_eq!(p["idle"].1, "0", "the shared pool shrank: {p:?}");
    assert_eq!(c.health().exclusive_cpus.to_string(), "1");
    // As the kubelet with DisableCPUQuotaWithExclusiveCPUs (on since 1.33):
    // a container on exclusive CPUs is not throttled.
    let quota = c.node.container_cfs_quota("default", "pinned", "app");
    assert!(
        matches!(quota.as_deref(), Some("-1") | Some("max 100000")),
        "the Guaranteed container's CFS quota is lifted: {quota:?}"
    );

    c.delete(&["pinned"]);
    c.wait_released();
    c.check("deleting the Guaranteed pod");
    let p = c.placements();
    assert_eq!(p["shared"].1, "0-1", "CPU 1 went back to the pool: {p:?}");
    c.delete(&["shared", "idle"]);
    c.check("deleting every pod");
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn guaranteed_and_shared_pods_on_containerd_1_7() {
    guaranteed_and_shared_pods(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn guaranteed_and_shared_pods_on_containerd_2() {
    guaranteed_and_shared_pods(ContainerdLine::V2);
}

/// `kubectl patch --subresource resize` of container `app` of pod `name`
/// to `cpu` (requests = limits, memory 64Mi).
fn resize(c: &Cluster, name: &str, cpu: &str) {
    let patch = format!(
        r#"{{"spec":{{"containers":[{{"name":"app","resources":{{"requests":{{"cpu":"{cpu}","memory":"64Mi"}},"limits":{{"cpu":"{cpu}","memory":"64Mi"}}}}}}]}}}}"#
    );
    c.node
        .kubectl(&[
            "patch",
            "pod",
            name,
            "--subresource",
            "resize",
            "--type",
            "merge",
            "-p",
            &patch,
        ])
        .unwrap();
}

/// Waits until pod `name` reports its resize failed with a message
/// containing `needs`; the condition.
fn resize_failed(c: &Cluster, name: &str, needs: &str) -> serde_json::Value {
    c.node
        .wait(
            &format!("the resize of {name} reported failed"),
            Duration::from_secs(90),
            || {
                let p = c.node.get_json(&["pod", name])?;
                p["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|k| {
                        k["type"] == "PodResizeInProgress"
                            && k["message"].as_str().is_some_and(|m| m.contains(needs))
                    })
                    .cloned()
            },
        )
        .unwrap()
}

/// The CPU request pod `name`'s container runs with, as the kubelet
/// reports it.
fn running_cpu(c: &Cluster, name: &str) -> serde_json::Value {
    let p = c.node.get_json(&["pod", name]).unwrap();
    p["status"]["containerStatuses"][0]["resources"]["requests"]["cpu"].clone()
}

/// `kubectl patch --subresource resize` on the test node, whose kubelet
/// reserves no CPU (so it accepts what topomgr, with CPU 0 reserved,
/// cannot do): a Guaranteed pod from half a CPU (the shared pool) to one
/// whole CPU is refused as the kubelet's static policy would (KEP-5554:
/// only admission gives exclusive CPUs); a Guaranteed pod on exclusive
/// CPU 1 grown to 2 CPUs is refused (no free CPU on its node). Each time
/// the runtime's update fails, the pod's resize is reported not done with
/// topomgr's reason, and the container keeps its resources and its CPUs.
/// (Feasible grows and shrinks need more CPUs than this node has: see
/// `resize::` on a recorded machine.)
fn resizes_topomgr_cannot_do(line: ContainerdLine) {
    let c = Cluster::start(
        line,
        KubeOptions {
            system_reserved_cpu: "0".to_owned(),
        },
    );
    let half = pod("half", "guaranteed", 1).replace("cpu: \"1\"", "cpu: 500m");
    c.apply(&half);
    c.wait_running("half");
    c.check("a Guaranteed pod with half a CPU");
    assert_eq!(c.placements()["half"].0, "0-1", "in the shared pool");
    resize(&c, "half", "1");
    let condition = resize_failed(&c, "half", "topomgr: inconsistentCPUAllocationError");
    assert_eq!(condition["reason"], "Error", "{condition}");
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("runs in the shared pool and cannot be resized to 1 exclusive CPUs"),
        "{condition}"
    );
    assert_eq!(
        running_cpu(&c, "half"),
        "500m",
        "the container keeps its resources"
    );
    assert_eq!(c.placements()["half"].0, "0-1", "and its CPUs");
    c.check("after the refused resize to whole CPUs");
    c.delete(&["half"]);
    c.wait_released();

    c.apply(&pod("one", "guaranteed", 1));
    c.wait_running("one");
    assert_eq!(c.placements()["one"].0, "1");
    resize(&c, "one", "2");
    let condition = resize_failed(&c, "one", "topomgr: resizeAllocateCPUsError");
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("cannot grow from 1 to 2 CPUs"),
        "{condition}"
    );
    assert_eq!(
        running_cpu(&c, "one"),
        "1",
        "the container keeps its resources"
    );
    assert_eq!(c.placements()["one"].0, "1", "and its CPU");
    c.check("after the refused grow");
    c.delete(&["one"]);
    c.wait_released();
    c.check("deleting it");
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn resizes_topomgr_cannot_do_are_reported_not_done_on_containerd_1_7() {
    resizes_topomgr_cannot_do(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn resizes_topomgr_cannot_do_are_reported_not_done_on_containerd_2() {
    resizes_topomgr_cannot_do(ContainerdLine::V2);
}

/// A kubelet that reserves no CPU admits a 2-CPU Guaranteed pod that
/// topomgr (CPU 0 reserved) cannot place: `kubectl describe` shows
/// topomgr's reason, and topomgr holds nothing for it.
fn refusal_in_kubectl_describe(line: ContainerdLine) {
    let c = Cluster::start(
        line,
        KubeOptions {
            system_reserved_cpu: "0".to_owned(),
        },
    );
    c.apply(&pod("too-big", "guaranteed", 2));
    let described = c
        .node
        .wait(
            "the refusal in kubectl describe",
            Duration::from_secs(60),
            || {
                let d = c.node.kubectl(&["describe", "pod", "too-big"]).ok()?;
                d.contains("topomgr: ").then_some(d)
            },
        )
        .unwrap();
    assert!(
        described.contains("failed to get NRI adjustment for container")
            && described.contains("topomgr: TopologyAffinityError: ")
            && described.contains("requested 2; free/allocatable by NUMA node: 0: 1/1"),
        "kubectl describe shows topomgr's reason with its numbers:\n{described}"
    );
    c.node
        .wait(
            "the container waiting in CreateContainerError",
            Duration::from_secs(30),
            || {
                let p = c.node.get_json(&["pod", "too-big"])?;
                (p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                    == "CreateContainerError")
                    .then_some(())
            },
        )
        .unwrap();
    assert!(c.pods().pods.is_empty(), "topomgr holds nothing");
    c.delete(&["too-big"]);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn a_refusal_shows_in_kubectl_describe_on_containerd_1_7() {
    refusal_in_kubectl_describe(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn a_refusal_shows_in_kubectl_describe_on_containerd_2() {
    refusal_in_kubectl_describe(ContainerdLine::V2);
}

/// 20 rounds of a Burstable and a Guaranteed pod created together (the
/// second 0-150 ms after the first, by two kubectl processes): no shared
/// container is ever left on the exclusive CPU.
fn bursts(line: ContainerdLine) {
    let c = Cluster::start(line, KubeOptions::default());
    for round in 0..20u64 {
        let (b, g) = (format!("b{round}"), format!("g{round}"));
        let (by, gy) = (pod(&b, "burstable", 0), pod(&g, "guaranteed", 1));
        let gap = Duration::from_millis(round * 150 / 19);
        std::thread::scope(|s| {
            s.spawn(|| c.apply(&by));
            s.spawn(|| {
                std::thread::sleep(gap);
                c.apply(&gy)
            });
        });
        c.wait_running(&b);
        c.wait_running(&g);
        c.check(&format!("round {round} ({gap:?} apart)"));
        let p = c.placements();
        assert_eq!(p[&g].0, "1", "round {round}: {p:?}");
        assert_eq!(p[&b].0, "0", "round {round}: {p:?}");
        c.delete(&[&b, &g]);
        c.wait_released();
        c.check(&format!("round {round} deleted"));
    }
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn bursts_never_leave_a_shared_container_on_an_exclusive_cpu_on_containerd_1_7() {
    bursts(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn bursts_never_leave_a_shared_container_on_an_exclusive_cpu_on_containerd_2() {
    bursts(ContainerdLine::V2);
}

/// 5 rounds of 10 mixed pods created at once by 10 kubectl processes (one
/// Guaranteed, five Burstable, four BestEffort): the Guaranteed one gets
/// the exclusive CPU and no shared container is left on it.
///
/// Before topomgr sent its own cpuset changes through CRI (`nri/cri.rs`),
/// NRI `UpdateContainers` sent while several of the ten containers were
/// being started wedged containerd's NRI on both lines (containerd issue
/// #13733): no StartContainer or CreateContainer returned again.
fn bursts_of_ten(line: ContainerdLine) {
    let c = Cluster::start(line, KubeOptions::default());
    for round in 0..5 {
        let pods: Vec<(String, String)> = (0..10)
            .map(|i| {
                let name = format!("r{round}-p{i}");
                let qos = match i {
                    0 => "guaranteed",
                    1..=5 => "burstable",
                    _ => "besteffort",
                };
                let yaml = pod(&name, qos, 1);
                (name, yaml)
            })
            .collect();
        std::thread::scope(|s| {
            for (_, yaml) in &pods {
                s.spawn(|| c.apply(yaml));
            }
        });
        for (name, _) in &pods {
            c.wait_running(name);
        }
        c.check(&format!("a burst of 10 pods, round {round}"));
        let p = c.placements();
        let g = format!("r{round}-p0");
        assert_eq!(p[&g].0, "1", "round {round}: {p:?}");
        let names: Vec<&str> = pods.iter().map(|(n, _)| n.as_str()).collect();
        c.delete(&names);
        c.wait_released();
        c.check(&format!("round {round} deleted"));
    }
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn bursts_of_ten_mixed_pods_on_containerd_1_7() {
    bursts_of_ten(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn bursts_of_ten_mixed_pods_on_containerd_2() {
    bursts_of_ten(ContainerdLine::V2);
}

/// A Burstable and a Guaranteed pod created while topomgr, containerd or
/// the kubelet restarts (each in turn, 300 ms into the creation): once the
/// pods run, nothing is held twice and nothing is held for a pod that is
/// gone.
///
/// After the containerd restart, the Guaranteed container created but not
/// started before it is listed again at Synchronize, holding the exclusive
/// CPU, while the kubelet's retry (in a new sandbox) runs: the retry takes
/// that CPU over (`followed::stale_siblings`), else it would run in the
/// shared pool for good (seen in CI at 7e2c250).
fn restarts_mid_burst(line: ContainerdLine) {
    let mut c = Cluster::start(line, KubeOptions::default());
    c.apply(&pod("steady", "burstable", 0));
    c.wait_running("steady");
    for (n, component) in ["topomgr", "containerd", "kubelet"].into_iter().enumerate() {
        let (b, g) = (format!("b-{component}"), format!("g-{component}"));
        let (by, gy) = (pod(&b, "burstable", 0), pod(&g, "guaranteed", 1));
        let node = &c.node;
        std::thread::scope(|s| {
            s.spawn(|| node.apply(&by).unwrap());
            s.spawn(|| node.apply(&gy).unwrap());
            std::thread::sleep(Duration::from_millis(300));
        });
        match component {
            "topomgr" => c.restart_topomgr(),
            "containerd" => {
                c.node.restart_containerd().unwrap();
                nri::wait_until(
                    c.topomgr(),
                    "registered with the restarted containerd",
                    |h, _| h.nri.connected,
                );
            }
            _ => c.node.restart_kubelet().unwrap(),
        }
        c.wait_running(&b);
        c.wait_running(&g);
        c.check(&format!("restarting {component} mid-burst"));
        let p = c.placements();
        assert_eq!(p[&g].0, "1", "after restarting {component}: {p:?}");
        assert_eq!(p[&b].0, "0", "after restarting {component}: {p:?}");
        c.delete(&[&b, &g]);
        c.wait_released();
        c.check(&format!("deleting after restarting {component}"));
        assert_eq!(
            c.placements()["steady"].1,
            "0-1",
            "round {n}: CPU 1 back in the pool"
        );
    }
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn restarts_of_topomgr_containerd_and_the_kubelet_mid_burst_on_containerd_1_7() {
    restarts_mid_burst(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn restarts_of_topomgr_containerd_and_the_kubelet_mid_burst_on_containerd_2() {
    restarts_mid_burst(ContainerdLine::V2);
}

/// 104 containers with 48 KiB of environment each (about 5 MiB: more than
/// one NRI message holds, so containerd 2.x splits its Synchronize), then
/// topomgr restarted: it follows every container again and releases none.
#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn a_synchronize_of_104_containers_with_large_environments_on_containerd_2() {
    large_synchronize(ContainerdLine::V2);
}

/// [`a_synchronize_of_104_containers_with_large_environments_on_containerd_2`]
/// on `line`.
fn large_synchronize(line: ContainerdLine) {
    let mut c = Cluster::start(line, KubeOptions::default());
    let value = "x".repeat(48 * 1024);
    let mut list = String::new();
    for i in 0..104 {
        let mut p = pod(&format!("env-{i}"), "besteffort", 0);
        p.push_str(&format!(
            "      env:\n        - name: BIG\n          value: \"{value}\"\n"
        ));
        list.push_str("---\n");
        list.push_str(&p);
    }
    c.apply(&list);
    c.node
        .wait("104 pods running", Duration::from_secs(300), || {
            let pods = c.node.get_json(&["pods"])?;
            let running = pods["items"]
                .as_array()?
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count();
            (running == 104).then_some(())
        })
        .unwrap();
    c.wait_released();
    let before = c.pods().pods.len();
    assert_eq!(before, 104);
    c.restart_topomgr();
    if line == ContainerdLine::V1_7 {
        nri::wait_until(
            c.topomgr(),
            "the missing Synchronize reported, nothing released",
            |h, p| {
                h.notes
                    .iter()
                    .any(|n| n.contains("has not sent Synchronize for more than 15 s"))
                    && p.pods.len() == 104
            },
        );
        assert!(
            c.node
                .containerd()
                .log()
                .contains("exceeds the maximum message size of 4194304"),
            "containerd 1.7 logs why it cannot synchronize"
        );
        return;
    }
    nri::wait_until(c.topomgr(), "104 containers followed again", |h, p| {
        h.nri.containers == 104 && p.pods.len() == 104
    });
    c.check("a synchronize of 104 containers");
}

/// containerd 1.7 (NRI 0.6) cannot send a Synchronize over 4 MiB (its log:
/// `failed to synchronize plugin: ... exceeds the maximum message size of
/// 4194304`), and keeps the plugin registered: topomgr says so in its
/// health within 15 s and releases nothing it holds.
#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn a_synchronize_too_large_for_containerd_1_7_is_reported_and_releases_nothing() {
    large_synchronize(ContainerdLine::V1_7);
}

/// containerd 2.x holds a new plugin's Synchronize while the CRI stops a
/// container, for its whole grace period: topomgr restarted during a
/// 25 s stop registers once and waits (no re-registration loop), then
/// synchronizes and releases the stopped pod's container.
#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn a_synchronize_held_by_a_long_stop_is_awaited_on_containerd_2() {
    let mut c = Cluster::start(ContainerdLine::V2, KubeOptions::default());
    let slow = pod("slow", "guaranteed", 1)
        .replace(
            "terminationGracePeriodSeconds: 2",
            "terminationGracePeriodSeconds: 25",
        )
        .replace("trap 'exit 0' TERM", "trap '' TERM");
    c.apply(&slow);
    c.wait_running("slow");
    c.node
        .kubectl(&["delete", "pod", "slow", "--wait=false"])
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    c.restart_topomgr();
    let registered = |c: &Cluster| c.node.containerd().log().matches("registered as").count();
    assert_eq!(
        registered(&c),
        2,
        "registered at start and after the restart"
    );
    c.node
        .wait(
            "the stopped pod gone and released",
            Duration::from_secs(60),
            || {
                let gone = c.node.get_json(&["pod", "slow"]).is_none();
                (gone && c.pods().pods.is_empty() && c.health().notes.is_empty()).then_some(())
            },
        )
        .unwrap_or_else(|e| {
            panic!(
                "{e}\npod: {:?}\ntopomgr holds {:?}; health {:?}",
                c.node
                    .get_json(&["pod", "slow"])
                    .map(|p| p["status"].clone()),
                c.pods()
                    .pods
                    .iter()
                    .map(|p| p.uid.clone())
                    .collect::<Vec<_>>(),
                c.health()
            )
        });
    assert_eq!(
        registered(&c),
        2,
        "topomgr waited for the Synchronize instead of registering again"
    );
    c.check("a synchronize held by a long stop");
}

/// A Burstable pod whose container requests 32Mi of memory with a limit
/// of 64Mi and no CPU (the kubelet counts no CPU for it).
fn shared_pod(name: &str) -> String {
    pod(name, "burstable", 0).replace(
        "requests: {memory: 32Mi}",
        "requests: {memory: 32Mi}\n        limits: {memory: 64Mi}",
    )
}

/// `kubectl patch --subresource resize` of a [`shared_pod`]'s container
/// to a memory limit of `memory` (what the runtime, and so topomgr, sees
/// of it: a Burstable container's requests reach neither).
fn resize_limit(c: &Cluster, name: &str, memory: &str) {
    let patch = format!(
        r#"{{"spec":{{"containers":[{{"name":"app","resources":{{"requests":{{"memory":"32Mi"}},"limits":{{"memory":"{memory}"}}}}}}]}}}}"#
    );
    c.node
        .kubectl(&[
            "patch",
            "pod",
            name,
            "--subresource",
            "resize",
            "--type",
            "merge",
            "-p",
            &patch,
        ])
        .unwrap();
}

/// Waits until pod `name` runs with `resource` (`cpu`, `memory`) of `kind`
/// (`requests`, `limits`) at `amount`, the kubelet having seen the patch
/// (a patch back to what runs shows nothing else; requests: allocated so),
/// with no resize in progress or pending: the kubelet reports it done.
fn resize_done(c: &Cluster, name: &str, kind: &str, resource: &str, amount: &str) {
    c.node
        .wait(
            &format!("the resize of {name} to {kind} {resource} {amount} done"),
            Duration::from_secs(90),
            || {
                let p = c.node.get_json(&["pod", name])?;
                let busy = p["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|k| k["type"] == "PodResizeInProgress" || k["type"] == "PodResizePending");
                let status = &p["status"]["containerStatuses"][0];
                let observed = p["status"]["observedGeneration"] == p["metadata"]["generation"];
                let allocated =
                    kind != "requests" || status["allocatedResources"][resource] == amount;
                (observed && allocated && !busy && status["resources"][kind][resource] == amount)
                    .then_some(())
            },
        )
        .unwrap();
}

/// The runtime's id of pod `name`'s running container.
fn container_id(c: &Cluster, name: &str) -> String {
    c.node
        .running_containers("default")
        .into_iter()
        .find(|r| r.pod == name)
        .unwrap_or_else(|| panic!("pod {name} runs no container"))
        .id
}

/// `GET /v1/pods/{id}/explain` on topomgr's socket.
fn explain(c: &Cluster, id: &str) -> topomgr_node::api::Explain {
    let r = c
        .topomgr()
        .client()
        .get(&format!("/v1/pods/{id}/explain"))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    r.parse().unwrap()
}

/// kill -9 of topomgr, then `topomgr serve` again on the same state, until
/// it is registered and follows `containers` containers again.
fn kill_9_and_restart(c: &mut Cluster, containers: usize) {
    if let Some(mut d) = c.daemon.take() {
        d.child.kill().unwrap();
        d.child.wait().unwrap();
    }
    let d = nri::serve(&c.config, &c.socket);
    nri::wait_until(&d, "registered and synchronized after kill -9", |h, _| {
        h.nri.connected && h.nri.containers == containers
    });
    c.daemon = Some(d);
}

/// Every running pod of the cluster agrees three ways: the CPUs the kubelet
/// reports it runs with (`containerStatuses[].resources`), what topomgr
/// holds for its container (`/v1/pods`: exclusive CPUs for whole CPUs with
/// limits equal to requests, else the shared pool) and its real cgroup.
fn consistent(c: &Cluster, step: &str) {
    let list = c.pods();
    let live = c.node.running_containers("default");
    let placements = placements_of(&live);
    for r in &live {
        let p = c.node.get_json(&["pod", &r.pod]).unwrap();
        let res = &p["status"]["containerStatuses"][0]["resources"];
        let (request, limit) = (
            res["requests"]["cpu"].as_str(),
            res["limits"]["cpu"].as_str(),
        );
        let whole = request
            .filter(|q| Some(*q) == limit)
            .and_then(|q| q.parse::<usize>().ok());
        let held = list.pods.iter().find(|a| a.uid == r.id);
        let held = held.and_then(|a| a.containers.first()).unwrap_or_else(|| {
            panic!(
                "after {step}: topomgr holds nothing for pod {}: {list:?}",
                r.pod
            )
        });
        let cgroup = &placements[&r.pod].0;
        match whole {
            Some(n) => {
                assert!(
                    held.exclusive && held.cpus.len() == n && held.cpus.to_string() == *cgroup,
                    "after {step}: pod {} runs with {n} CPUs (status) on {cgroup} (cgroup), topomgr holds {held:?}",
                    r.pod
                );
            }
            None => assert!(
                !held.exclusive,
                "after {step}: pod {} runs with {request:?} (status) but topomgr holds {held:?}",
                r.pod
            ),
        }
    }
}

/// On a node whose kubelet reserves no CPU: an infeasible grow (refused,
/// then patched back) and a shared container's resize (its memory limit:
/// done), each in the container's trace on topomgr's explain endpoint;
/// then kill -9 of topomgr and a restart: the books after recovery hold
/// exactly what they held before (`/v1/pods`, the shared pool, the
/// exclusive CPUs), every container's cpuset seen from inside is
/// unchanged, the invariants hold, and the next resize of the shared
/// container starts from the resized limit (the journal replayed it).
fn resizes_survive_kill_9(line: ContainerdLine) {
    let mut c = Cluster::start(
        line,
        KubeOptions {
            system_reserved_cpu: "0".to_owned(),
        },
    );
    c.apply(&shared_pod("shared"));
    c.apply(&pod("one", "guaranteed", 1));
    c.wait_running("shared");
    c.wait_running("one");
    c.check("a shared and a Guaranteed pod");
    let (shared, one) = (container_id(&c, "shared"), container_id(&c, "one"));

    // The infeasible grow (the kubelet, reserving no CPU and counting no
    // CPU request of the shared pod, accepts it): refused with topomgr's
    // reason, traced.
    resize(&c, "one", "2");
    resize_failed(&c, "one", "topomgr: resizeAllocateCPUsError");
    let trace = explain(&c, &one);
    let last = trace.resizes.last().expect("the refusal is traced");
    assert!(!last.done && last.after.is_none(), "{last:?}");
    assert_eq!(last.reason.as_deref(), Some("resizeAllocateCPUsError"));
    assert_eq!(last.before.cpus.to_string(), "1");
    assert_eq!(last.resources["cpu"].after.request, 2000);
    assert_eq!(
        last.providers["cpu"].answer,
        topomgr_node::api::ResizeAnswer::Refused
    );
    assert_eq!(c.placements()["one"].0, "1", "it keeps its CPU");
    // Patched back, so that the kubelet retries nothing while topomgr is
    // away (without an NRI plugin containerd applies any update as it is).
    resize(&c, "one", "1");
    resize_done(&c, "one", "requests", "cpu", "1");
    c.check("the refused grow");

    // A shared container's memory limit: done, nothing else changes.
    resize_limit(&c, "shared", "96Mi");
    resize_done(&c, "shared", "limits", "memory", "96Mi");
    let trace = explain(&c, &shared);
    let last = trace.resizes.last().expect("the resize is traced");
    assert!(last.done, "{last:?}");
    let memory = last.resources["memory"];
    assert_eq!(
        (memory.before.limit, memory.after.limit),
        (Some(64 << 20), Some(96 << 20))
    );
    assert!(!last.after.as_ref().unwrap().exclusive, "{last:?}");
    c.check("the shared container's resize");
    consistent(&c, "the resizes");

    let (books, health, placements) = (c.pods(), c.health(), c.placements());
    kill_9_and_restart(&mut c, 2);
    assert_eq!(c.pods(), books, "the books after recovery");
    let after = c.health();
    assert_eq!(
        (after.exclusive_cpus, after.shared_pool),
        (health.exclusive_cpus, health.shared_pool)
    );
    assert_eq!(c.placements(), placements, "seen from inside, unchanged");
    c.check("kill -9 and restart");
    consistent(&c, "kill -9 and restart");

    // The books held the resized limit: the next resize starts there.
    resize_limit(&c, "shared", "128Mi");
    resize_done(&c, "shared", "limits", "memory", "128Mi");
    let trace = explain(&c, &shared);
    assert!(
        trace.steps.is_empty(),
        "admitted before the restart: {trace:?}"
    );
    let last = trace.resizes.last().unwrap();
    assert!(last.done, "{last:?}");
    assert_eq!(
        last.resources["memory"].before.limit,
        Some(96 << 20),
        "{last:?}"
    );
    c.check("a resize after the restart");
    c.delete(&["shared", "one"]);
    c.wait_released();
    c.check("deleting them");
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn resizes_survive_kill_9_of_topomgr_on_containerd_1_7() {
    resizes_survive_kill_9(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn resizes_survive_kill_9_of_topomgr_on_containerd_2() {
    resizes_survive_kill_9(ContainerdLine::V2);
}

/// Resizes racing a new Guaranteed pod's creation (both issued at once by
/// two kubectl processes, the creation 0-150 ms after the resize), on a
/// node whose kubelet reserves no CPU. Even rounds: a shared container's
/// memory limit grows while a Guaranteed pod takes CPU 1: both are done,
/// the shared container ends off CPU 1 and its trace shows the resize. Odd rounds: the Guaranteed pod on
/// CPU 1 asks to grow while a second Guaranteed pod is created: whoever
/// comes first (topomgr refusing the grow, or the kubelet finding no room),
/// the grow is not done and the second pod gets no CPU topomgr cannot
/// give. After each round no CPU is held twice and every pod's status,
/// topomgr's `/v1/pods` and its real cgroup agree.
fn resizes_racing_a_new_pod(line: ContainerdLine) {
    let c = Cluster::start(
        line,
        KubeOptions {
            system_reserved_cpu: "0".to_owned(),
        },
    );
    for round in 0..4u64 {
        let gap = Duration::from_millis(round * 50);
        let (s, g, h) = (
            format!("s{round}"),
            format!("g{round}"),
            format!("h{round}"),
        );
        if round % 2 == 0 {
            c.apply(&shared_pod(&s));
            c.wait_running(&s);
            let gy = pod(&g, "guaranteed", 1);
            std::thread::scope(|scope| {
                scope.spawn(|| resize_limit(&c, &s, "96Mi"));
                scope.spawn(|| {
                    std::thread::sleep(gap);
                    c.apply(&gy)
                });
            });
            c.wait_running(&g);
            resize_done(&c, &s, "limits", "memory", "96Mi");
            c.check(&format!("round {round}: a shared resize racing {g}"));
            consistent(&c, &format!("round {round}"));
            let p = c.placements();
            assert_eq!(
                (p[&g].0.as_str(), p[&s].0.as_str()),
                ("1", "0"),
                "round {round}: {p:?}"
            );
            let last = explain(&c, &container_id(&c, &s)).resizes.pop().unwrap();
            assert!(
                last.done && last.resources["memory"].after.limit == Some(96 << 20),
                "{last:?}"
            );
            c.delete(&[&s, &g]);
        } else {
            c.apply(&pod(&g, "guaranteed", 1));
            c.wait_running(&g);
            let hy = pod(&h, "guaranteed", 1);
            std::thread::scope(|scope| {
                scope.spawn(|| resize(&c, &g, "2"));
                scope.spawn(|| {
                    std::thread::sleep(gap);
                    c.apply(&hy)
                });
            });
            // The grow is not done: refused by topomgr, or not admitted by
            // the kubelet (no room beside the second pod).
            c.node
                .wait(
                    &format!("round {round}: the grow of {g} reported not done"),
                    Duration::from_secs(90),
                    || {
                        let p = c.node.get_json(&["pod", &g])?;
                        p["status"]["conditions"]
                            .as_array()?
                            .iter()
                            .any(|k| {
                                k["type"] == "PodResizePending"
                                    || (k["type"] == "PodResizeInProgress"
                                        && k["reason"] == "Error")
                            })
                            .then_some(())
                    },
                )
                .unwrap();
            assert_eq!(running_cpu(&c, &g), "1", "round {round}: {g} keeps its CPU");
            c.check(&format!("round {round}: a grow racing {h}"));
            consistent(&c, &format!("round {round}"));
            assert_eq!(c.placements()[&g].0, "1", "round {round}");
            // The second pod never runs: CPU 1 is the only exclusive CPU.
            assert!(
                !c.placements().contains_key(&h),
                "round {round}: {h} runs: {:?}",
                c.placements()
            );
            c.delete(&[&g, &h]);
        }
        c.wait_released();
        c.check(&format!("round {round} deleted"));
    }
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn resizes_racing_a_new_guaranteed_pod_on_containerd_1_7() {
    resizes_racing_a_new_pod(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn resizes_racing_a_new_guaranteed_pod_on_containerd_2() {
    resizes_racing_a_new_pod(ContainerdLine::V2);
}

/// Issue 34 on the real cluster: with `[kubernetes]` (the API server's
/// address and CA, a token) and `[podresources]` set, topomgr pushes the
/// node's NodeResourceTopology object with the pod fingerprint and follows
/// an admission; a refusal is an Event on the pod (reason, topomgr as its
/// source, one Event counted up over the kubelet's retries); the kubelet's
/// own PodResources client sees the exclusive CPU.
fn cluster_face(line: ContainerdLine) {
    let mut podres = PathBuf::new();
    let c = Cluster::start_with(
        line,
        KubeOptions {
            system_reserved_cpu: "0".to_owned(),
        },
        |node, etc| {
            let crd = crate::common::workspace_root().join("tests/fixtures/nrt/crd.yaml");
            node.kubectl(&["apply", "-f", &crd.to_string_lossy()])
                .unwrap();
            node.kubectl(&[
                "wait",
                "--for=condition=established",
                "--timeout=60s",
                "crd/noderesourcetopologies.topology.node.k8s.io",
            ])
            .unwrap();
            let kubeconfig = topomgr_kubeconfig(node, etc);
            podres = etc.join("pod-resources/kubelet.sock");
            format!(
                "node_name = \"{NODE_NAME}\"\n[kubernetes]\nenabled = true\nkubeconfig = \"{}\"\n[podresources]\nsocket = \"{}\"\n",
                kubeconfig.display(),
                podres.display()
            )
        },
    );
    let nrt = |c: &Cluster| {
        c.node
            .get_json(&["noderesourcetopologies", NODE_NAME])
            .filter(|o| o["zones"].is_array())
    };
    let fingerprint = |o: &serde_json::Value| {
        o["attributes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["name"] == "nodeTopologyPodsFingerprint")
            .map(|a| a["value"].as_str().unwrap_or_default().to_owned())
    };
    let before = c
        .node
        .wait("the NRT object pushed", Duration::from_secs(30), || nrt(&c))
        .unwrap();
    let empty = fingerprint(&before).expect("the pod fingerprint");

    c.apply(&pod("pinned", "guaranteed", 1));
    c.wait_running("pinned");
    c.check("a Guaranteed pod");
    let cpus = c.pods().pods[0].containers[0].cpus.to_string();
    assert_eq!(cpus, "1", "{line:?}");
    // The object follows: another fingerprint, the one topomgr exports.
    let after = c
        .node
        .wait(
            "the NRT object follows the admission",
            Duration::from_secs(30),
            || nrt(&c).filter(|o| fingerprint(o).is_some_and(|f| f != empty)),
        )
        .unwrap();
    let exported: serde_json::Value = c
        .topomgr()
        .client()
        .get("/v1/noderesourcetopology")
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(fingerprint(&after), fingerprint(&exported), "{line:?}");
    assert_eq!(after["zones"], exported["zones"], "{line:?}");

    // The kubelet's own PodResources client sees the exclusive CPU.
    let go = crate::podresources::go_client_binary()
        .expect("the kubelet-proto client that .ci/install-kubernetes builds");
    let out = std::process::Command::new(&go)
        .arg("-socket")
        .arg(&podres)
        .args(["get", "default", "pinned"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<String> = got["pod_resources"]["containers"][0]["cpu_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string().trim_matches('"').to_owned())
        .collect();
    assert_eq!(ids, ["1"], "{line:?}: {got}");

    // A refusal is an Event on the pod, counted up over the retries (the
    // kubelet admits 2 CPUs on its 2; topomgr keeps CPU 0 reserved).
    c.delete(&["pinned"]);
    c.wait_released();
    c.apply(&pod("too-big", "guaranteed", 2));
    let event = c
        .node
        .wait(
            "topomgr's Event on the refused pod",
            Duration::from_secs(60),
            || {
                let list = c.node.get_json(&[
                    "events",
                    "--field-selector",
                    "involvedObject.name=too-big,reason=TopologyAffinityError",
                ])?;
                let items = list["items"].as_array()?.clone();
                (items.len() == 1 && items[0]["count"].as_i64().unwrap_or(0) >= 2)
                    .then(|| items[0].clone())
            },
        )
        .unwrap();
    assert_eq!(event["source"]["component"], "topomgr", "{event}");
    assert_eq!(event["type"], "Warning", "{event}");
    assert!(
        event["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requested 2; free/allocatable by NUMA node: 0: 1/1"),
        "{event}"
    );
    c.delete(&["too-big"]);
    c.wait_released();
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn nrt_events_and_podresources_on_the_cluster_on_containerd_1_7() {
    cluster_face(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn nrt_events_and_podresources_on_the_cluster_on_containerd_2() {
    cluster_face(ContainerdLine::V2);
}

/// A Guaranteed pod of an init container (`setup`, 1 CPU, alive for
/// `init_s` seconds), an app container (`app`, 1 CPU) and a helper
/// (`helper`, 500m: the shared pool).
fn duo(name: &str, init_s: u32) -> String {
    let container = |name: &str, cpu: &str, command: &str| {
        format!(
            "    - name: {name}\n      image: {IMAGE}\n      imagePullPolicy: Never\n      command: [\"sh\", \"-c\", \"{command}\"]\n      resources:\n        requests: {{cpu: \"{cpu}\", memory: 32Mi}}\n        limits: {{cpu: \"{cpu}\", memory: 32Mi}}\n"
        )
    };
    let forever = "trap 'exit 0' TERM; while true; do sleep 1; done";
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  nodeName: {NODE_NAME}\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  initContainers:\n{}  containers:\n{}{}",
        container("setup", "1", &format!("sleep {init_s}")),
        container("app", "1", forever),
        container("helper", "500m", forever),
    )
}

/// Pod scope under NRI with API access (issue 34 item 4): topomgr reads
/// the pod from the real API server at its first container (the init
/// container) and admits it whole there, so the app container's CPU is
/// held while only the init container runs; each container gets its part
/// (init and app CPU 1, the helper the shared pool), seen from inside; a
/// pod whose two containers need two exclusive CPUs, of which the node
/// has one, is refused at its first container with an Event, holding
/// nothing; a restart of topomgr keeps the pod's admission and parts;
/// deleting the pod releases it whole. The invariants hold after each
/// step. The machine has one NUMA node: both containers on one node
/// across two is the daemon's test on a recorded machine
/// (`nri::tests::pod_scope_admits_the_whole_pod_at_its_first_container`).
fn pod_scope(line: ContainerdLine) {
    let mut c = Cluster::start_with(
        line,
        KubeOptions {
            system_reserved_cpu: "0".to_owned(),
        },
        |node, etc| {
            let kubeconfig = topomgr_kubeconfig(node, etc);
            format!(
                "node_name = \"{NODE_NAME}\"\nscope = \"pod\"\n[kubernetes]\nenabled = true\npush_nrt = false\nkubeconfig = \"{}\"\n",
                kubeconfig.display()
            )
        },
    );
    c.apply(&pod("shared", "burstable", 0));
    c.wait_running("shared");
    c.apply(&duo("duo", 8));
    // The init container runs; the whole pod is held already.
    let held = c
        .node
        .wait(
            "the pod held whole while its init container runs",
            Duration::from_secs(60),
            || {
                let live = c.node.running_containers("default");
                live.iter()
                    .any(|r| r.pod == "duo" && r.container == "setup")
                    .then_some(())?;
                let list = c.pods();
                list.pods.into_iter().find(|p| p.name == "duo")
            },
        )
        .unwrap();
    let parts: BTreeMap<String, (String, bool)> = held
        .containers
        .iter()
        .map(|x| (x.name.clone(), (x.cpus.to_string(), x.exclusive)))
        .collect();
    assert_eq!(
        parts,
        BTreeMap::from([
            ("setup".to_owned(), ("1".to_owned(), true)),
            ("app".to_owned(), ("1".to_owned(), true)),
            ("helper".to_owned(), ("0".to_owned(), false)),
        ]),
        "{line:?}: {held:?}"
    );
    assert!(
        is_whole(&c.pods(), &held.uid),
        "{line:?}: owned by its sandbox"
    );
    c.check("the init container of a pod admitted whole");
    let setup = c
        .node
        .running_containers("default")
        .into_iter()
        .find(|r| r.pod == "duo" && r.container == "setup");
    if let Some(setup) = setup.and_then(|r| r.cpus()) {
        assert_eq!(
            setup.1, "1",
            "{line:?}: the init container runs on CPU 1 (inside)"
        );
    }
    // Then the app containers, each with its part.
    c.node
        .wait("app and helper running", Duration::from_secs(60), || {
            let live = c.node.running_containers("default");
            let n = live
                .iter()
                .filter(|r| r.pod == "duo" && r.container != "setup")
                .count();
            (n == 2).then_some(())
        })
        .unwrap();
    c.check("the app containers of a pod admitted whole");
    let live = c.node.running_containers("default");
    let inside = |name: &str| {
        live.iter()
            .find(|r| r.pod == "duo" && r.container == name)
            .and_then(RunningContainer::cpus)
            .unwrap()
            .1
    };
    assert_eq!(inside("app"), "1", "{line:?}");
    assert_eq!(inside("helper"), "0", "{line:?}");
    let list = c.pods();
    let names: Vec<&str> = list.pods.iter().map(|p| p.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        ["duo", "shared"],
        "{line:?}: one admission for each pod, the burstable one admitted whole too"
    );

    // topomgr restarts: the pod is found whole in its state, its
    // containers are given their parts again at the Synchronize.
    c.restart_topomgr();
    c.check("a restart of topomgr");
    let again = c.pods().pods.into_iter().find(|p| p.name == "duo").unwrap();
    assert_eq!(again.uid, held.uid, "{line:?}: the same admission");
    assert_eq!(again.containers, held.containers, "{line:?}");

    // Two containers of one exclusive CPU each: refused at the first.
    c.delete(&["duo"]);
    c.wait_released();
    c.check("deleting the pod admitted whole");
    assert!(
        c.pods().pods.iter().all(|p| p.name != "duo"),
        "{line:?}: released with its sandbox"
    );
    let pair = pod("pair", "guaranteed", 1).replace(
        "    - name: app\n",
        &format!("    - name: first\n      image: {IMAGE}\n      imagePullPolicy: Never\n      command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]\n      resources:\n        requests: {{cpu: \"1\", memory: 64Mi}}\n        limits: {{cpu: \"1\", memory: 64Mi}}\n    - name: app\n"),
    );
    c.apply(&pair);
    let event = c
        .node
        .wait(
            "topomgr's Event on the pod refused whole",
            Duration::from_secs(60),
            || {
                let list = c.node.get_json(&[
                    "events",
                    "--field-selector",
                    "involvedObject.name=pair,reason=TopologyAffinityError",
                ])?;
                list["items"].as_array()?.first().cloned()
            },
        )
        .unwrap();
    assert_eq!(event["source"]["component"], "topomgr", "{event}");
    assert!(
        event["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requested 2"),
        "{line:?}: the pod's two CPUs: {event}"
    );
    assert!(
        c.pods().pods.iter().all(|p| p.name != "pair"),
        "{line:?}: nothing held for it"
    );
    assert!(
        !c.node
            .running_containers("default")
            .iter()
            .any(|r| r.pod == "pair"),
        "{line:?}: not even its first container runs"
    );
    c.check("a pod refused whole");
    c.delete(&["pair", "shared"]);
    c.wait_released();
    c.check("deleting every pod");
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 1.7 and the one-node Kubernetes of .ci/install-kubernetes"]
fn pod_scope_admits_a_pod_whole_at_its_first_container_on_containerd_1_7() {
    pod_scope(ContainerdLine::V1_7);
}

#[test]
#[ignore = "needs root, a cpuset cgroup, containerd 2.x and the one-node Kubernetes of .ci/install-kubernetes"]
fn pod_scope_admits_a_pod_whole_at_its_first_container_on_containerd_2() {
    pod_scope(ContainerdLine::V2);
}

mod dra;
