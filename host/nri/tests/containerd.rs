//! `topomgr-nri` against a real containerd 1.7 driven through CRI as the
//! kubelet drives it: what the plugin is told, what its answers do to the
//! containers (seen from inside them), and reconnection across a runtime
//! restart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use topomgr_nri::api::{
    Container, ContainerAdjustment, ContainerUpdate, CreateContainerResponse, KeyValue,
    LinuxContainerAdjustment, LinuxResources, PodSandbox, UpdateContainerResponse,
};
use topomgr_nri::{
    serve_with_reconnect, Backoff, ConnectionStatus, Event, EventMask, HandlerResult, Plugin,
    PluginError, RuntimeClient,
};
use topomgr_runtime_harness::{ContainerSpec, Containerd, CriClient, Pod, PodSpec, Qos};

const NEEDS: &str = "needs root, a cpuset cgroup and containerd 1.7";

/// Length of an environment variable every adjustment carries, so that each
/// answer spans several multiplexed frames.
const PAD: usize = 10_000;

/// What the test plugin was told, in order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Connected,
    Disconnected,
    Synchronize {
        pods: Vec<String>,
        containers: Vec<String>,
    },
    Create(Created),
    Update {
        container: String,
        quota: Option<i64>,
    },
    Stop(String),
    Remove(String),
    StopPod(String),
    RemovePod(String),
}

/// The fields of a CreateContainer event the test checks.
#[derive(Debug, Clone, PartialEq)]
struct Created {
    pod_name: String,
    pod_uid: String,
    pod_namespace: String,
    cgroup_parent: String,
    container: String,
    shares: Option<u64>,
    quota: Option<i64>,
    period: Option<u64>,
    memory_limit: Option<i64>,
}

/// The answer to a container's creation: `(cpus, mems)` or an error message.
type Answer = Result<(String, String), String>;

/// Answers CreateContainer from a table keyed by container name: a cpuset
/// and memory nodes, or an error.
struct TestPlugin {
    seen: mpsc::UnboundedSender<Seen>,
    answers: Mutex<BTreeMap<String, Answer>>,
    runtime: Mutex<Option<RuntimeClient>>,
}

impl Plugin for TestPlugin {
    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let mut pods: Vec<String> = pods.into_iter().map(|p| p.name).collect();
        let mut containers: Vec<String> = containers.into_iter().map(|c| c.name).collect();
        pods.sort();
        containers.sort();
        let _ = self.seen.send(Seen::Synchronize { pods, containers });
        Ok(Vec::new())
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let cpu = ctr
            .resources()
            .and_then(|r| r.cpu.clone())
            .unwrap_or_default();
        let memory = ctr
            .resources()
            .and_then(|r| r.memory.clone())
            .unwrap_or_default();
        let _ = self.seen.send(Seen::Create(Created {
            pod_name: pod.name.clone(),
            pod_uid: pod.uid.clone(),
            pod_namespace: pod.namespace.clone(),
            cgroup_parent: pod.cgroup_parent().to_owned(),
            container: ctr.name.clone(),
            shares: cpu.shares.map(|v| v.value),
            quota: cpu.quota.map(|v| v.value),
            period: cpu.period.map(|v| v.value),
            memory_limit: memory.limit.map(|v| v.value),
        }));
        match self.answers.lock().unwrap().get(&ctr.name).cloned() {
            None => Ok(CreateContainerResponse::default()),
            Some(Err(message)) => Err(PluginError::new(message)),
            Some(Ok((cpus, mems))) => Ok(CreateContainerResponse {
                adjust: Some(ContainerAdjustment {
                    // An answer larger than one 4 KiB frame, as a big
                    // environment makes it.
                    env: vec![KeyValue {
                        key: "TOPOMGR_TEST_PAD".into(),
                        value: "x".repeat(PAD),
                    }],
                    linux: Some(LinuxContainerAdjustment {
                        resources: Some(LinuxResources::cpuset(&cpus, &mems)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }

    async fn update_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        let quota = resources.and_then(|r| r.cpu?.quota).map(|q| q.value);
        let _ = self.seen.send(Seen::Update {
            container: ctr.name,
            quota,
        });
        Ok(UpdateContainerResponse::default())
    }

    async fn stop_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let _ = self.seen.send(Seen::Stop(ctr.name));
        Ok(Vec::new())
    }

    async fn remove_container(&self, _pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        let _ = self.seen.send(Seen::Remove(ctr.name));
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let _ = self.seen.send(Seen::StopPod(pod.name));
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let _ = self.seen.send(Seen::RemovePod(pod.name));
        Ok(())
    }
}

/// The plugin, registered and followed across restarts by a background task.
struct Running {
    plugin: Arc<TestPlugin>,
    seen: mpsc::UnboundedReceiver<Seen>,
    /// Every event received so far.
    history: Vec<Seen>,
    task: tokio::task::JoinHandle<()>,
    /// containerd's log, quoted when an event does not come.
    containerd_log: std::path::PathBuf,
}

impl Running {
    fn start(containerd: &Containerd) -> Self {
        let (tx, seen) = mpsc::unbounded_channel();
        let plugin = Arc::new(TestPlugin {
            seen: tx.clone(),
            answers: Mutex::new(BTreeMap::new()),
            runtime: Mutex::new(None),
        });
        let events: EventMask = [
            Event::CreateContainer,
            Event::UpdateContainer,
            Event::StopContainer,
            Event::RemoveContainer,
            Event::StopPodSandbox,
            Event::RemovePodSandbox,
        ]
        .into_iter()
        .collect();
        let socket = containerd.nri_socket();
        let p = plugin.clone();
        let backoff = Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
        };
        let task = tokio::spawn(async move {
            let err =
                serve_with_reconnect(&socket, "topomgr-test", "50", events, p.clone(), backoff, {
                    let p = p.clone();
                    move |status| match status {
                        ConnectionStatus::Connected { runtime } => {
                            *p.runtime.lock().unwrap() = Some(runtime);
                            let _ = tx.send(Seen::Connected);
                        }
                        ConnectionStatus::Disconnected { .. } => {
                            let _ = tx.send(Seen::Disconnected);
                        }
                        ConnectionStatus::AwaitingSynchronize { .. }
                        | ConnectionStatus::Synchronized => {}
                    }
                })
                .await;
            panic!("the reconnect loop ended: {err}");
        });
        Running {
            plugin,
            seen,
            history: Vec::new(),
            task,
            containerd_log: containerd.dir().join("containerd.log"),
        }
    }

    fn answer(&self, container: &str, answer: Result<(&str, &str), &str>) {
        self.plugin.answers.lock().unwrap().insert(
            container.to_owned(),
            answer
                .map(|(c, m)| (c.to_owned(), m.to_owned()))
                .map_err(str::to_owned),
        );
    }

    /// The next event that `want` accepts; others are skipped (and
    /// returned for context if none matches within 20 s).
    async fn wait_for(&mut self, what: &str, want: impl Fn(&Seen) -> bool) -> Seen {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.seen.recv()).await {
                Ok(Some(s)) => {
                    self.history.push(s.clone());
                    if want(&s) {
                        return s;
                    }
                    skipped.push(s);
                }
                _ => {
                    // What containerd said about NRI meanwhile, for a
                    // failure that cannot be reproduced at will.
                    let log = std::fs::read_to_string(&self.containerd_log).unwrap_or_default();
                    let nri: Vec<&str> = log
                        .lines()
                        .filter(|l| {
                            let l = l.to_ascii_lowercase();
                            l.contains("nri") || l.contains("plugin")
                        })
                        .collect();
                    let tail = nri[nri.len().saturating_sub(40)..].join("\n");
                    panic!(
                        "the plugin was not told {what} within 20 s; it saw {skipped:?}; containerd's NRI log lines:\n{tail}"
                    )
                }
            }
        }
    }

    fn runtime(&self) -> RuntimeClient {
        self.plugin
            .runtime
            .lock()
            .unwrap()
            .clone()
            .expect("connected")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn start_containerd() -> Containerd {
    Containerd::start().unwrap_or_else(|e| panic!("{NEEDS}: {e}"))
}

fn pod_spec(c: &Containerd, name: &str, qos: Qos) -> PodSpec {
    let uid = format!("uid-{name}");
    PodSpec {
        name: name.to_owned(),
        cgroup_parent: c.cgroup_parent(qos, &uid),
        uid,
        namespace: "team-a".to_owned(),
    }
}

async fn run_container(cri: &mut CriClient, pod: &Pod, spec: &ContainerSpec) -> String {
    let id = cri.create_container(pod, spec).await.unwrap();
    cri.start_container(&id).await.unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, a cpuset cgroup and containerd 1.7"]
async fn plugin_adjusts_rejects_and_updates_real_containers_and_survives_a_runtime_restart() {
    let mut containerd = start_containerd();
    let mut nri = Running::start(&containerd);
    nri.wait_for("registration", |s| *s == Seen::Connected)
        .await;
    let first_sync = nri
        .wait_for("Synchronize", |s| matches!(s, Seen::Synchronize { .. }))
        .await;
    assert_eq!(
        first_sync,
        Seen::Synchronize {
            pods: vec![],
            containers: vec![]
        }
    );

    let mut cri = containerd.cri().await.unwrap();
    let image = containerd.image();

    // A Guaranteed pod: the plugin pins its container to CPU 1, node 0.
    let gpod_spec = pod_spec(&containerd, "guaranteed", Qos::Guaranteed);
    let gpod = cri.run_pod(&gpod_spec).await.unwrap();
    nri.answer("pinned", Ok(("1", "0")));
    let pinned_spec = ContainerSpec::sleeper("pinned", image).with_resources(1000, 1000, 128 << 20);
    let pinned = run_container(&mut cri, &gpod, &pinned_spec).await;
    let Seen::Create(created) = nri
        .wait_for(
            "CreateContainer pinned",
            |s| matches!(s, Seen::Create(c) if c.container == "pinned"),
        )
        .await
    else {
        unreachable!()
    };
    assert_eq!(
        created,
        Created {
            pod_name: "guaranteed".into(),
            pod_uid: "uid-guaranteed".into(),
            pod_namespace: "team-a".into(),
            cgroup_parent: gpod_spec.cgroup_parent.clone(),
            container: "pinned".into(),
            shares: Some(1024),
            quota: Some(100_000),
            period: Some(100_000),
            memory_limit: Some(128 << 20),
        }
    );
    let seen = cri.placement(&pinned, "self").await.unwrap();
    assert_eq!(
        (
            seen.cpus_allowed_list.as_str(),
            seen.mems_allowed_list.as_str()
        ),
        ("1", "0"),
        "the adjustment is what the container's processes get"
    );
    let pad = cri
        .exec(&pinned, &["sh", "-c", "echo ${#TOPOMGR_TEST_PAD}"])
        .await
        .unwrap();
    assert_eq!(
        pad.trim(),
        PAD.to_string(),
        "the whole multi-frame answer arrived"
    );

    // A Burstable pod of another team: the shared CPU 0.
    let bpod_spec = pod_spec(&containerd, "burstable", Qos::Burstable);
    let bpod = cri.run_pod(&bpod_spec).await.unwrap();
    nri.answer("shared", Ok(("0", "0")));
    let shared_spec = ContainerSpec::sleeper("shared", image).with_resources(100, 500, 0);
    let shared = run_container(&mut cri, &bpod, &shared_spec).await;
    let Seen::Create(created) = nri
        .wait_for(
            "CreateContainer shared",
            |s| matches!(s, Seen::Create(c) if c.container == "shared"),
        )
        .await
    else {
        unreachable!()
    };
    assert_eq!(created.cgroup_parent, bpod_spec.cgroup_parent);
    assert!(created
        .cgroup_parent
        .ends_with("/kubepods/burstable/poduid-burstable"));
    assert_eq!(
        (created.shares, created.quota, created.memory_limit),
        (Some(102), Some(50_000), None)
    );
    assert_eq!(
        cri.placement(&shared, "1").await.unwrap().cpus_allowed_list,
        "0"
    );

    // A plugin error fails the CRI CreateContainer with the plugin's text.
    nri.answer(
        "too-wide",
        Err("topomgr: no NUMA node has 4 free CPUs for team-a/burstable/too-wide"),
    );
    let err = cri
        .create_container(
            &bpod,
            &ContainerSpec::sleeper("too-wide", image).with_resources(4000, 4000, 0),
        )
        .await
        .unwrap_err()
        .to_string();
    // containerd wraps the ttrpc status of the plugin's error as the kubelet
    // shows it (CreateContainerError).
    assert_eq!(
        err,
        "CRI CreateContainer failed: failed to create containerd container: \
         failed to get NRI adjustment for container: rpc error: code = Unknown desc = \
         topomgr: no NUMA node has 4 free CPUs for team-a/burstable/too-wide"
    );

    // An unsolicited update moves the running shared container to CPUs 0-1.
    let failed = nri
        .runtime()
        .update_containers(
            vec![ContainerUpdate::resources(
                &shared,
                LinuxResources::cpuset("0-1", "0"),
            )],
            vec![],
        )
        .await
        .unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(
        cri.placement(&shared, "1").await.unwrap().cpus_allowed_list,
        "0-1"
    );
    let recorded = cri
        .container_status(&shared)
        .await
        .unwrap()
        .resources
        .and_then(|r| r.linux);
    assert_eq!(
        recorded.map(|r| r.cpuset_cpus),
        Some("0-1".to_owned()),
        "the runtime's own record of the container agrees"
    );
    assert_eq!(
        cri.placement(&pinned, "1").await.unwrap().cpus_allowed_list,
        "1"
    );

    // A CRI resource update (the kubelet's in-place resize) is relayed.
    let mut resized = shared_spec.resources.clone();
    resized.cpu_quota = 70_000;
    resized.cpuset_cpus = "0-1".into();
    resized.cpuset_mems = "0".into();
    cri.update_resources(&shared, resized).await.unwrap();
    nri.wait_for("UpdateContainer", |s| {
        *s == Seen::Update {
            container: "shared".into(),
            quota: Some(70_000),
        }
    })
    .await;
    let recorded = cri
        .container_status(&shared)
        .await
        .unwrap()
        .resources
        .and_then(|r| r.linux);
    assert_eq!(recorded.map(|r| r.cpu_quota), Some(70_000));

    // containerd restarts: the plugin reconnects and is told what exists.
    containerd.restart().unwrap();
    nri.wait_for("the disconnection", |s| *s == Seen::Disconnected)
        .await;
    nri.wait_for("re-registration", |s| *s == Seen::Connected)
        .await;
    let resync = nri
        .wait_for("Synchronize after the restart", |s| {
            matches!(s, Seen::Synchronize { .. })
        })
        .await;
    assert_eq!(
        resync,
        Seen::Synchronize {
            pods: vec!["burstable".into(), "guaranteed".into()],
            containers: vec!["pinned".into(), "shared".into()],
        }
    );
    let mut cri = containerd.cri().await.unwrap();
    assert_eq!(
        cri.placement(&pinned, "1").await.unwrap().cpus_allowed_list,
        "1"
    );

    // Stop and removal of a container reach the plugin, also for a
    // container created before the restart.
    cri.stop_container(&pinned, Duration::from_secs(1))
        .await
        .unwrap();
    nri.wait_for("StopContainer", |s| *s == Seen::Stop("pinned".into()))
        .await;
    cri.remove_container(&pinned).await.unwrap();
    nri.wait_for("RemoveContainer", |s| *s == Seen::Remove("pinned".into()))
        .await;

    // Pod events: containerd 1.7 sends StopPodSandbox/RemovePodSandbox only
    // for pods it saw start since it last started (it keeps their state in
    // memory), so a pod from before the restart goes without them. A plugin
    // must release such pods from Synchronize's list, not from pod events.
    cri.stop_pod(&gpod.id).await.unwrap();
    cri.remove_pod(&gpod.id).await.unwrap();
    let late = cri
        .run_pod(&pod_spec(&containerd, "after-restart", Qos::Burstable))
        .await
        .unwrap();
    cri.stop_pod(&late.id).await.unwrap();
    nri.wait_for("StopPodSandbox", |s| {
        *s == Seen::StopPod("after-restart".into())
    })
    .await;
    cri.remove_pod(&late.id).await.unwrap();
    nri.wait_for("RemovePodSandbox", |s| {
        *s == Seen::RemovePod("after-restart".into())
    })
    .await;
    let pre_restart_pod_events: Vec<&Seen> = nri
        .history
        .iter()
        .filter(|s| matches!(s, Seen::StopPod(p) | Seen::RemovePod(p) if p == "guaranteed"))
        .collect();
    assert!(
        pre_restart_pod_events.is_empty(),
        "containerd now reports pod events of pods from before its restart ({pre_restart_pod_events:?}); \
         the daemon may rely on them"
    );
    cri.remove_all_pods().await.unwrap();
}

/// Wall time of CRI CreateContainer without and with the plugin connected,
/// printed for BENCHMARKS.md (a criterion bench of the in-process path comes
/// with the daemon's NRI admission); nothing is asserted about speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, a cpuset cgroup and containerd 1.7"]
async fn create_container_wall_time_with_and_without_the_plugin() {
    const N: usize = 25;
    let containerd = start_containerd();
    let mut cri = containerd.cri().await.unwrap();
    let pod = cri
        .run_pod(&pod_spec(&containerd, "timing", Qos::Guaranteed))
        .await
        .unwrap();

    let measure = async |cri: &mut CriClient, label: &str| {
        let mut times = Vec::new();
        for i in 0..N {
            let spec = ContainerSpec::sleeper(&format!("{label}-{i}"), containerd.image())
                .with_resources(1000, 1000, 64 << 20);
            let t = Instant::now();
            let id = cri.create_container(&pod, &spec).await.unwrap();
            times.push(t.elapsed());
            cri.remove_container(&id).await.unwrap();
        }
        times.sort();
        times
    };
    let without = measure(&mut cri, "plain").await;
    let mut nri = Running::start(&containerd);
    nri.wait_for("Synchronize", |s| matches!(s, Seen::Synchronize { .. }))
        .await;
    for i in 0..N {
        nri.answer(&format!("nri-{i}"), Ok(("1", "0")));
    }
    let with = measure(&mut cri, "nri").await;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "CRI CreateContainer wall time over {N} creates (median / max): without plugin {:.2} / {:.2} ms, with plugin {:.2} / {:.2} ms",
        ms(without[N / 2]),
        ms(without[N - 1]),
        ms(with[N / 2]),
        ms(with[N - 1]),
    );
    cri.remove_all_pods().await.unwrap();
}
