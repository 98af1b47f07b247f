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
        nri::require_machine();
        let node = KubeNode::start(line, options).unwrap_or_else(|e| panic!("{NEEDS}: {e}"));
        let (config, socket) = nri::configure(&format!("kube-{line:?}"), node.containerd());
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
        let running = running_of(&live);
        let mut exclusive: BTreeMap<String, CpuSet> = BTreeMap::new();
        let mut all = CpuSet::new();
        for pod in &list.pods {
            let Some(name) = running.get(&pod.uid) else {
                // A container the runtime is still creating or stopping.
                continue;
            };
            for c in pod.containers.iter().filter(|c| c.exclusive) {
                if !all.intersection(&c.cpus).is_empty() {
                    return Some(format!("CPUs {} held twice: {list:?}", c.cpus));
                }
                all = all.union(&c.cpus);
                exclusive.insert(name.clone(), c.cpus.clone());
            }
        }
        if !h.shared_pool.intersection(&all).is_empty() {
            return Some(format!(
                "the shared pool {} holds exclusive CPUs {all}",
                h.shared_pool
            ));
        }
        for (name, (cgroup, inside, _)) in placements_of(&live) {
            let want = exclusive
                .get(&name)
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
                    let held: Vec<String> = self.pods().pods.into_iter().map(|p| p.uid).collect();
                    let running: Vec<String> = running_of(&self.node.running_containers("default"))
                        .into_keys()
                        .collect();
                    (held == running).then_some(())
                },
            )
            .unwrap();
    }
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
