//! Dropping a `Containerd` that still runs pods (as a failing test does)
//! leaves no process, mount, cgroup or file behind.

use std::time::Duration;

use topomgr_runtime_harness::{ContainerSpec, Containerd, PodSpec, Qos};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, a cpuset cgroup and containerd 1.7"]
async fn dropping_a_busy_containerd_leaves_nothing_behind() {
    let containerd = Containerd::start()
        .unwrap_or_else(|e| panic!("needs root, a cpuset cgroup and containerd 1.7: {e}"));
    let mut cri = containerd.cri().await.unwrap();
    let uid = "uid-left-running";
    let pod = cri
        .run_pod(&PodSpec {
            name: "left-running".into(),
            uid: uid.into(),
            namespace: "default".into(),
            cgroup_parent: containerd.cgroup_parent(Qos::Burstable, uid),
        })
        .await
        .unwrap();
    let id = cri
        .create_container(&pod, &ContainerSpec::sleeper("app", containerd.image()))
        .await
        .unwrap();
    cri.start_container(&id).await.unwrap();
    assert_eq!(cri.exec(&id, &["echo", "alive"]).await.unwrap(), "alive\n");

    let dir = containerd.dir().to_owned();
    let socket = containerd.socket();
    let cgroup = format!("/sys/fs/cgroup/cpuset{}", containerd.cgroup_root());
    assert!(
        std::path::Path::new(&cgroup).is_dir(),
        "the pod's cgroup exists while it runs"
    );
    let shims = processes_naming(&socket.to_string_lossy());
    assert!(!shims.is_empty(), "shims run while the pods do");
    drop(cri);
    drop(containerd);

    assert!(!dir.exists(), "{} is removed", dir.display());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir_s = dir.to_string_lossy();
    assert!(!mounts.contains(&*dir_s), "no mount under {dir_s} is left");
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let left = h
            .path()
            .join(cgroup.trim_start_matches("/sys/fs/cgroup/cpuset/"));
        assert!(!left.exists(), "{} is removed", left.display());
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        processes_naming(&socket.to_string_lossy()),
        Vec::<i32>::new()
    );
}

/// Live processes whose command line has `arg` as an argument.
fn processes_naming(arg: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
            !zombie
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
        })
        .collect()
}
