use super::*;

use topomgr_engine::admission::ContainerResult;
use topomgr_sdk::{
    Allocation, Amounts, ContainerView, CpuSet, NumaMask, PodView, QosClass, ResourceInventory,
    TopologyHint, Zone,
};

fn node(id: u32) -> NumaNodeId {
    NumaNodeId::new(id).unwrap()
}

fn unit(id: &str, nodes: &[u32]) -> InventoryUnit {
    InventoryUnit::new(id, nodes.iter().map(|n| node(*n)).collect())
}

/// CPUs 1-3 (0 reserved) on nodes 0 and 1; GPUs on node 0, on both nodes
/// and on none; 4 GiB of memory and 2 hugepages of 2 MiB per node.
fn allocatable() -> Allocatable {
    let zone = |n: u32, allocatable: u64| {
        Zone::new(Some(node(n)), Amounts::new(allocatable, allocatable, 0))
    };
    let cpu = Inventory::new().with_resource(
        "cpu",
        ResourceInventory::new(Amounts::default(), vec![]).with_units(vec![
            unit("3", &[1]),
            unit("1", &[0]),
            unit("2", &[1]),
        ]),
    );
    let gpu = Inventory::new().with_resource(
        "example.com/gpu",
        ResourceInventory::new(Amounts::default(), vec![zone(0, 2), zone(1, 1)]).with_units(vec![
            unit("GPU-0", &[0]),
            unit("GPU-1", &[0, 1]),
            unit("GPU-2", &[]),
        ]),
    );
    let memory = Inventory::new()
        .with_resource(
            "memory",
            ResourceInventory::new(Amounts::default(), vec![zone(0, 4 << 30), zone(1, 4 << 30)]),
        )
        .with_resource(
            "hugepages-2Mi",
            ResourceInventory::new(Amounts::default(), vec![zone(0, 4 << 20)]),
        );
    Allocatable::of(&[cpu, gpu, memory])
}

fn devices(resource: &str, entries: &[(&str, Option<i64>)]) -> Vec<v1::ContainerDevices> {
    entries
        .iter()
        .map(|(id, n)| v1::ContainerDevices {
            resource_name: resource.to_owned(),
            device_ids: vec![(*id).to_owned()],
            topology: n.and_then(|n| v1::topology([n])),
        })
        .collect()
}

fn memory(kind: &str, size: u64, nodes: &[i64]) -> v1::ContainerMemory {
    v1::ContainerMemory {
        memory_type: kind.to_owned(),
        size,
        topology: v1::topology(nodes.iter().copied()),
    }
}

#[test]
fn allocatable_lists_cpus_devices_per_node_and_memory_per_node_and_type() {
    let r = allocatable().response();
    assert_eq!(r.cpu_ids, [1, 2, 3]);
    assert_eq!(
        r.devices,
        devices(
            "example.com/gpu",
            &[
                ("GPU-0", Some(0)),
                ("GPU-1", Some(0)),
                ("GPU-1", Some(1)),
                ("GPU-2", None)
            ]
        )
    );
    assert_eq!(
        r.memory,
        [
            memory("hugepages-2Mi", 4 << 20, &[0]),
            memory("memory", 4 << 30, &[0]),
            memory("memory", 4 << 30, &[1]),
        ]
    );
}

fn result(uid: &str, name: &str, pod: PodView, containers: Vec<(&str, Allocation)>) -> AdmitResult {
    let mut pod = pod;
    pod.uid = uid.to_owned();
    pod.name = name.to_owned();
    AdmitResult {
        pod,
        admitted: true,
        reason: None,
        message: None,
        containers: containers
            .into_iter()
            .map(|(name, allocation)| ContainerResult {
                name: name.to_owned(),
                hint: TopologyHint::new(NumaMask::from_nodes([0]).unwrap(), true),
                allocation,
            })
            .collect(),
    }
}

fn requests(list: &[(&str, u64)]) -> topomgr_sdk::ResourceList {
    list.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// A manifest pod (a sidecar, an init container, an app container with
/// CPUs 2-3, pinned memory and GPU-1) and two NRI one-container pods of one
/// Kubernetes pod (one exclusive, one in the shared pool).
fn view() -> (BTreeMap<String, Arc<AdmitResult>>, Allocatable) {
    let app = ContainerView::new("app").with_requests(requests(&[
        ("cpu", 2000),
        ("memory", 1 << 30),
        ("hugepages-2Mi", 2 << 20),
        ("example.com/gpu", 1),
    ]));
    let manifest = PodView::new("u1", "db", "prod", QosClass::Guaranteed)
        .with_init_containers(vec![
            ContainerView::new("setup"),
            ContainerView::new("proxy").with_sidecar(true),
        ])
        .with_containers(vec![app]);
    let exclusive = Allocation::default()
        .with_cpus(CpuSet::parse("2-3").unwrap(), true)
        .with_mems(NumaMask::from_nodes([1]).unwrap())
        .with_devices("example.com/gpu", vec!["GPU-1".into()]);
    let shared = Allocation::default().with_cpus(CpuSet::parse("0-1").unwrap(), false);
    let nri = |uid: &str, c: &str, a: Allocation| {
        let v = PodView::new(uid, "web", "prod", QosClass::Guaranteed)
            .with_containers(vec![ContainerView::new(c)]);
        result(uid, "web", v, vec![(c, a)])
    };
    let pods = [
        result(
            "u1",
            "db",
            manifest,
            vec![
                ("setup", shared.clone()),
                ("proxy", shared.clone()),
                ("app", exclusive),
            ],
        ),
        nri(
            "c1",
            "main",
            Allocation::default().with_cpus(CpuSet::parse("1").unwrap(), true),
        ),
        nri("c2", "log", shared),
    ];
    (
        pods.into_iter()
            .map(|r| (r.pod.uid.clone(), Arc::new(r)))
            .collect(),
        allocatable(),
    )
}

#[test]
fn list_gives_exclusive_cpus_pinned_memory_and_devices_with_their_nodes_one_entry_per_pod() {
    let (admitted, allocatable) = view();
    let listed = pods(admitted.values().map(AsRef::as_ref), &allocatable);
    let names: Vec<(&str, &str)> = listed
        .iter()
        .map(|p| (p.namespace.as_str(), p.name.as_str()))
        .collect();
    assert_eq!(names, [("prod", "db"), ("prod", "web")]);
    let db = &listed[0];
    // The sidecar, then the app container; the plain init container is not listed.
    let containers: Vec<&str> = db.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(containers, ["proxy", "app"]);
    let proxy = &db.containers[0];
    assert!(proxy.cpu_ids.is_empty() && proxy.memory.is_empty() && proxy.devices.is_empty());
    let app = &db.containers[1];
    assert_eq!(app.cpu_ids, [2, 3]);
    assert_eq!(
        app.devices,
        devices("example.com/gpu", &[("GPU-1", Some(0)), ("GPU-1", Some(1))])
    );
    assert_eq!(
        app.memory,
        [
            memory("hugepages-2Mi", 2 << 20, &[1]),
            memory("memory", 1 << 30, &[1])
        ]
    );
    assert!(db.cpu_ids.is_empty() && db.memory.is_empty());
    // The two NRI admissions of pod prod/web are one pod; only the exclusive CPUs show.
    let web = &listed[1];
    let containers: Vec<(&str, Vec<i64>)> = web
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c.cpu_ids.clone()))
        .collect();
    assert_eq!(containers, [("main", vec![1]), ("log", vec![])]);
}

#[test]
fn get_finds_a_pod_by_namespace_and_name_only() {
    let (p, a) = view();
    let of = |ns: &str, name: &str| {
        let found = admissions_of(p.values(), ns, name);
        pods(found.iter().map(AsRef::as_ref), &a)
    };
    assert_eq!(of("prod", "web")[0].containers.len(), 2);
    assert_eq!(
        of("prod", "db")[..],
        pods(p.values().map(AsRef::as_ref), &a)[..1]
    );
    assert_eq!(of("dev", "web"), []);
    assert_eq!(of("prod", "u1"), []);
}

#[test]
fn a_device_no_inventory_names_is_listed_without_topology() {
    let r = result(
        "u",
        "p",
        PodView::new("u", "p", "ns", QosClass::BestEffort)
            .with_containers(vec![ContainerView::new("c")]),
        vec![(
            "c",
            Allocation::default().with_devices("example.com/nic", vec!["vf0".into()]),
        )],
    );
    let c = container(&r, "c", &allocatable());
    assert_eq!(c.devices, devices("example.com/nic", &[("vf0", None)]));
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("topomgr-podres-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[tokio::test]
async fn bind_creates_a_root_only_socket_replaces_a_stale_one_and_refuses_a_file() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = temp("bind");
    let socket = dir.join("pod-resources/kubelet.sock");
    let listener = bind(&socket).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(socket.parent().unwrap()), 0o750);
    // Live: refused, the socket stays.
    let e = bind(&socket).err().unwrap().to_string();
    assert_eq!(
        e,
        format!("[podresources] socket {}: something already serves this socket (another topomgr, or the kubelet); choose another path", socket.display())
    );
    // Stale (nobody listens): replaced.
    drop(listener);
    let again = bind(&socket).unwrap();
    drop(again);
    // A file in the way: refused and left as it is.
    let file = dir.join("file.sock");
    std::fs::write(&file, "x").unwrap();
    let e = bind(&file).err().unwrap().to_string();
    assert_eq!(
        e,
        format!("[podresources] socket {}: exists and is not a socket; refusing to remove it (move it away or choose another path)", file.display())
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    std::fs::remove_dir_all(dir).unwrap();
}
