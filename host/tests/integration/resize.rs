//! In-place resize of a container with exclusive CPUs through the NRI
//! face, in process (the daemon's own `Face` over a state thread with its
//! journal), with the real CPU and memory provider `.so` files on the
//! recorded example machine `examples/machines/2s4n` (2 sockets, 4 NUMA
//! nodes, 16 CPUs): a grow keeps the container's CPUs and adds one on its
//! node, a shrink gives it back to the shared containers in the same
//! answer, a grow past its node is refused changing nothing, and what was
//! resized survives a restart (journal and the providers' checkpoints).
//! The real node of the tests (2 CPUs) can show only refusals
//! (`kube_node::`).

use std::collections::BTreeMap;
use std::path::Path;

use topomgr_daemon::nri::{Face, NriStatus};
use topomgr_engine::admission::Admitter;
use topomgr_node::setup::config::{HostConfig, ProviderEntry};
use topomgr_node::setup::AdmitterParts;
use topomgr_nri::api::{
    Container, ContainerState, ContainerUpdate, LinuxContainer, LinuxCpu, LinuxMemory,
    LinuxPodSandbox, LinuxResources, OptionalInt64, OptionalUInt64, PodSandbox,
};
use topomgr_sdk::CpuSet;

use crate::common;

/// A face over a state thread with its state in `dir` (kept across calls:
/// a second call is a restart).
fn face(dir: &Path) -> Face {
    let machine =
        topomgr_discovery::discover(&common::workspace_root().join("examples/machines/2s4n/sys"))
            .unwrap();
    let entry = |lib: &Path, config: serde_json::Value| ProviderEntry {
        library: lib.to_string_lossy().into_owned(),
        enabled: true,
        config,
        defined_in: "test".into(),
        config_dir: Default::default(),
    };
    let cfg = HostConfig {
        policy: "single-numa-node".to_owned(),
        providers: [
            (
                "cpu".to_owned(),
                entry(
                    common::cpu_plugin(),
                    serde_json::json!({"policy": "static", "reserved_cpus": "0"}),
                ),
            ),
            (
                "memory".to_owned(),
                entry(
                    common::memory_plugin(),
                    serde_json::json!({"policy": "static", "reserved_memory": {"0": {"memory": "512Mi"}}}),
                ),
            ),
        ]
        .into(),
        ..HostConfig::default()
    };
    let parts = AdmitterParts::from_config(&cfg, &machine).unwrap();
    let admitter = Admitter::new(&machine, parts.policy, parts.scope, parts.providers);
    Face::with_state_thread(
        admitter,
        &machine,
        &dir.join("state"),
        &dir.join("cgroup"),
        NriStatus::enabled(Path::new("/run/nri.sock"), None),
    )
    .unwrap()
}

fn pod(n: u32, guaranteed: bool) -> PodSandbox {
    let uid = format!("c0000000-0000-4000-8000-{n:012}");
    let parent = if guaranteed {
        format!("/kubepods/pod{uid}")
    } else {
        format!("/kubepods/burstable/pod{uid}")
    };
    PodSandbox {
        id: format!("sandbox-{n}"),
        name: format!("pod-{n}"),
        uid,
        namespace: "resize".into(),
        linux: Some(LinuxPodSandbox {
            cgroup_parent: parent,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The runtime's resources of `cpus` whole CPUs (0: a Burstable 100m) and
/// 1 GiB, as the kubelet sends them.
fn resources(cpus: i64) -> LinuxResources {
    let (shares, quota) = if cpus == 0 {
        (102, 0)
    } else {
        (cpus as u64 * 1024, cpus * 100_000)
    };
    LinuxResources {
        cpu: Some(LinuxCpu {
            shares: Some(OptionalUInt64 { value: shares }),
            quota: (quota > 0).then_some(OptionalInt64 { value: quota }),
            period: Some(OptionalUInt64 { value: 100_000 }),
            ..Default::default()
        }),
        memory: Some(LinuxMemory {
            limit: (cpus > 0).then_some(OptionalInt64 { value: 1 << 30 }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container(id: &str, pod: &PodSandbox, cpus: i64) -> Container {
    Container {
        id: id.into(),
        pod_sandbox_id: pod.id.clone(),
        name: "app".into(),
        state: ContainerState::ContainerRunning as i32,
        linux: Some(LinuxContainer {
            resources: Some(resources(cpus)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// (container id, cpus) of each update, sorted.
fn cpus(updates: &[ContainerUpdate]) -> BTreeMap<String, CpuSet> {
    updates
        .iter()
        .map(|u| {
            let c = u
                .linux
                .as_ref()
                .and_then(|l| l.resources.as_ref())
                .and_then(|r| r.cpu.as_ref())
                .map(|c| c.cpus.clone())
                .unwrap_or_default();
            (u.container_id.clone(), CpuSet::parse(&c).unwrap())
        })
        .collect()
}

/// An update that sets only a cpuset (every other field zero), as
/// topomgr's own through CRI: its answer is what the state gives `id`.
fn only_cpuset() -> LinuxResources {
    let mut r = LinuxResources::cpuset("0", "0");
    if let Some(c) = r.cpu.as_mut() {
        c.shares = Some(OptionalUInt64 { value: 0 });
        c.quota = Some(OptionalInt64 { value: 0 });
    }
    r
}

#[test]
fn a_grow_keeps_its_cpus_on_its_node_and_a_shrink_gives_them_to_the_shared_pool() {
    let dir = common::scratch_dir("resize-nri");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let machine =
        topomgr_discovery::discover(&common::workspace_root().join("examples/machines/2s4n/sys"))
            .unwrap();
    let node_of = |cpu: u32| machine.cpus.iter().find(|c| c.id == cpu).unwrap().numa;
    let (b, g) = (pod(1, false), pod(2, true));
    let (original, grown) = rt.block_on(async {
        let f = face(&dir);
        f.create(b.clone(), container("b1", &b, 0)).await.unwrap();
        let created = f.create(g.clone(), container("g1", &g, 1)).await.unwrap();
        let set = created
            .adjust
            .as_ref()
            .and_then(|a| a.linux.as_ref())
            .and_then(|l| l.resources.as_ref())
            .and_then(|r| r.cpu.as_ref())
            .map(|c| CpuSet::parse(&c.cpus).unwrap())
            .unwrap();
        assert_eq!(set.len(), 1, "{set}");
        let original = set.iter().next().unwrap();

        // 1 -> 2 CPUs: the original CPU kept, one more on its node; the
        // shared container loses it in the same answer.
        let up = f
            .update(g.clone(), container("g1", &g, 1), Some(resources(2)))
            .await
            .unwrap();
        let got = cpus(&up.update);
        let grown = got["g1"].clone();
        assert_eq!(grown.len(), 2, "{got:?}");
        assert!(grown.contains(original), "{got:?}");
        assert!(
            grown.iter().all(|c| node_of(c) == node_of(original)),
            "on the original CPU's node: {got:?}"
        );
        assert!(got["b1"].intersection(&grown).is_empty(), "{got:?}");

        // 2 -> 16 CPUs cannot fit on one node: refused, nothing changes.
        let err = f
            .update(g.clone(), container("g1", &g, 2), Some(resources(16)))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("topomgr: resizeAllocateCPUsError: provider \"cpu\": "),
            "{err}"
        );
        let same = f
            .update(g.clone(), container("g1", &g, 2), Some(only_cpuset()))
            .await
            .unwrap();
        assert_eq!(cpus(&same.update)["g1"], grown);
        (original, grown)
    });

    // A restart: the journal and the providers' checkpoints hold the grow.
    rt.block_on(async {
        let f = face(&dir);
        let (b, g) = (pod(1, false), pod(2, true));
        let listed = vec![container("b1", &b, 0), container("g1", &g, 2)];
        let sync = f
            .synchronize(vec![b.clone(), g.clone()], listed)
            .await
            .unwrap();
        assert_eq!(cpus(&sync)["g1"], grown, "the grow survived the restart");
        assert!(
            f.explain("g1").is_none(),
            "admitted before this start: no trace kept"
        );

        // 2 -> 1 CPU: the original CPU kept, the other back to b1.
        let down = f
            .update(g.clone(), container("g1", &g, 2), Some(resources(1)))
            .await
            .unwrap();
        let got = cpus(&down.update);
        assert_eq!(got["g1"].to_string(), original.to_string(), "{got:?}");
        let given_back = grown.difference(&got["g1"]);
        assert!(
            given_back.iter().all(|c| got["b1"].contains(c)),
            "the shared container gets it back in the same answer: {got:?}"
        );
        // A CPU is never both exclusive and shared.
        assert!(got["b1"].intersection(&got["g1"]).is_empty(), "{got:?}");

        // Its trace (the explain endpoint's): no admission steps (admitted
        // before this start), the shrink with the CPU provider's answer and
        // the memory provider's nodes.
        let e = f.explain("g1").expect("a resized container has a trace");
        assert!(e.admitted && e.steps.is_empty(), "{e:?}");
        assert_eq!(e.resizes.len(), 1, "{e:?}");
        let r = &e.resizes[0];
        assert!(r.done, "{r:?}");
        assert_eq!(r.container, "app");
        let cpu = &r.resources["cpu"];
        assert_eq!((cpu.before.request, cpu.after.request), (2000, 1000));
        assert_eq!(r.before.cpus, grown);
        let c = r.providers["cpu"].cpus.as_ref().unwrap();
        assert_eq!((&c.kept, &c.returned), (&got["g1"], &given_back));
        assert!(c.added.is_empty(), "{c:?}");
        let node = node_of(original);
        let memory = &r.providers["memory"];
        assert_eq!(memory.answer, topomgr_node::api::ResizeAnswer::Resized);
        assert_eq!(
            memory.mems.map(|m| m.iter().collect::<Vec<_>>()),
            node.map(|n| vec![n]),
            "memory booked again on its node"
        );
        assert_eq!(r.after.as_ref().unwrap().cpus, got["g1"]);
    });
    let _ = std::fs::remove_dir_all(&dir);
}
