use super::*;

/// One pod `ns/p` with a container holding CPUs 2-3 and a device on node 1.
struct Fixed;

fn pod() -> v1::PodResources {
    v1::PodResources {
        name: "p".into(),
        namespace: "ns".into(),
        containers: vec![v1::ContainerResources {
            name: "app".into(),
            cpu_ids: vec![2, 3],
            devices: vec![v1::ContainerDevices {
                resource_name: "example.com/gpu".into(),
                device_ids: vec!["GPU-1".into()],
                topology: v1::topology([1]),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

impl Lister for Fixed {
    fn list(&self) -> v1::ListPodResourcesResponse {
        v1::ListPodResourcesResponse {
            pod_resources: vec![pod()],
        }
    }
    fn allocatable(&self) -> v1::AllocatableResourcesResponse {
        v1::AllocatableResourcesResponse {
            cpu_ids: vec![1, 2, 3],
            ..Default::default()
        }
    }
    fn get(&self, namespace: &str, name: &str) -> Option<v1::PodResources> {
        (namespace == "ns" && name == "p").then(pod)
    }
}

#[tokio::test]
async fn a_client_lists_gets_and_reads_the_allocatable_resources_over_the_socket() {
    let dir = std::env::temp_dir().join(format!("topomgr-podres-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("kubelet.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        Arc::new(Fixed),
        async {
            let _ = stopped.await;
        },
        Duration::from_secs(5),
    ));
    let mut c = PodResourcesClient::connect(&socket, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(c.list().await.unwrap().pod_resources, vec![pod()]);
    assert_eq!(c.allocatable().await.unwrap().cpu_ids, vec![1, 2, 3]);
    assert_eq!(c.get("ns", "p").await.unwrap().pod_resources, Some(pod()));
    // An unknown pod: the kubelet's words, status Unknown.
    match c.get("ns", "q").await {
        Err(ClientError::Call {
            call,
            code,
            message,
        }) => {
            assert_eq!(call, "Get");
            assert_eq!(code, tonic::Code::Unknown);
            assert_eq!(message, "pod q in namespace ns not found");
        }
        other => panic!("expected the kubelet's not-found error, got {other:?}"),
    }
    // A method the service does not have.
    let mut raw = c.grpc.clone();
    raw.ready().await.unwrap();
    let status = raw
        .unary::<_, v1::ListPodResourcesResponse, _>(
            tonic::Request::new(v1::ListPodResourcesRequest {}),
            PathAndQuery::from_static("/v1.PodResourcesLister/Watch"),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented);
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn connecting_to_a_missing_socket_names_it() {
    let socket = Path::new("/nonexistent/topomgr/kubelet.sock");
    let e = PodResourcesClient::connect(socket, Duration::from_secs(1))
        .await
        .err()
        .unwrap();
    let text = e.to_string();
    assert!(
        text.starts_with(
            "cannot connect to the PodResources socket /nonexistent/topomgr/kubelet.sock: "
        ),
        "{text}"
    );
}

#[test]
fn messages_encode_with_upstream_field_numbers() {
    use prost::Message as _;
    // NUMANode{ID: 1}: field 1, varint 1.
    assert_eq!(v1::NumaNode { id: 1 }.encode_to_vec(), [0x08, 0x01]);
    // ContainerMemory{memory_type: "memory", size: 2}: fields 1 and 2.
    let m = v1::ContainerMemory {
        memory_type: "memory".into(),
        size: 2,
        topology: None,
    };
    assert_eq!(
        m.encode_to_vec(),
        [0x0a, 6, b'm', b'e', b'm', b'o', b'r', b'y', 0x10, 0x02]
    );
    // GetPodResourcesRequest: pod_name is 1, pod_namespace 2.
    let r = v1::GetPodResourcesRequest {
        pod_name: "a".into(),
        pod_namespace: "b".into(),
    };
    assert_eq!(r.encode_to_vec(), [0x0a, 1, b'a', 0x12, 1, b'b']);
    // PodResources' pod-level cpu_ids are field 4 (packed int64).
    let p = v1::PodResources {
        cpu_ids: vec![5],
        ..Default::default()
    };
    assert_eq!(p.encode_to_vec(), [0x22, 1, 5]);
}

#[tokio::test]
async fn a_silent_client_holds_the_shutdown_for_the_grace_period_only() {
    use tokio::io::AsyncWriteExt as _;
    let dir = std::env::temp_dir().join(format!("topomgr-podres-grace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("kubelet.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        Arc::new(Fixed),
        async {
            let _ = stopped.await;
        },
        Duration::from_millis(300),
    ));
    // An HTTP/2 client that says hello (preface, empty SETTINGS), then
    // never reads: it never acknowledges the server's goodbye.
    let mut silent = UnixStream::connect(&socket).await.unwrap();
    silent
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(5), server).await;
    assert!(
        matches!(done, Ok(Ok(Ok(())))),
        "the server did not stop within its grace period: {done:?}"
    );
    drop(silent);
    std::fs::remove_dir_all(dir).unwrap();
}
