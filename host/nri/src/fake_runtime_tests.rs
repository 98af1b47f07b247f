//! The plugin side against a scripted runtime on the other end of a socket
//! pair: registration, dispatch, error statuses, malformed and hostile
//! input, unsolicited updates, reconnection.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::api::*;
use crate::connection::{serve, Progress, Registration};
use crate::mux::{self, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::plugin::PLUGIN_SERVICE;
use crate::runtime_client::RUNTIME_SERVICE;
use crate::ttrpc::{self, Decoder, Inbound, TYPE_REQUEST, TYPE_RESPONSE};
use crate::{
    serve_with_reconnect, Backoff, ConnectionStatus, EventMask, FrameError, HandlerResult,
    NriError, Plugin, PluginError, RuntimeClient,
};

/// Records what it was called with; its answers depend on the container's
/// name.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<String>>,
    runtime: Mutex<Option<RuntimeClient>>,
}

impl Recorder {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
    fn log(&self, s: String) {
        self.calls.lock().unwrap().push(s);
    }
}

impl Plugin for Recorder {
    async fn configure(&self, r: ConfigureRequest, runtime: RuntimeClient) -> HandlerResult<()> {
        self.log(format!(
            "configure {} {}",
            r.runtime_name, r.runtime_version
        ));
        *self.runtime.lock().unwrap() = Some(runtime);
        Ok(())
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        self.log(format!("synchronize {} {}", pods.len(), containers.len()));
        Ok(containers
            .iter()
            .map(|c| ContainerUpdate::resources(&c.id, LinuxResources::cpuset("0", "")))
            .collect())
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.log(format!(
            "create {}/{} {}",
            pod.namespace, pod.name, ctr.name
        ));
        match ctr.name.as_str() {
            "reject" => Err(PluginError::new("topomgr: no NUMA node fits 4 CPUs")),
            "panic" => panic!("handler bug"),
            "slow" => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(CreateContainerResponse::default())
            }
            // Longer than the tests' request timeouts: sees its deadline pass.
            "stuck" => {
                assert!(!crate::past_answer_deadline());
                tokio::time::sleep(Duration::from_millis(600)).await;
                self.log(format!("stuck done late={}", crate::past_answer_deadline()));
                Ok(CreateContainerResponse::default())
            }
            _ => Ok(CreateContainerResponse {
                adjust: Some(ContainerAdjustment {
                    linux: Some(LinuxContainerAdjustment {
                        resources: Some(LinuxResources::cpuset("1", "0")),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                update: vec![ContainerUpdate::resources(
                    "other",
                    LinuxResources::cpuset("0", ""),
                )],
                evict: vec![],
            }),
        }
    }

    async fn remove_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.log(format!("remove {} {}", pod.name, ctr.id));
        Ok(())
    }

    async fn shutdown(&self) {
        self.log("shutdown".into());
    }
}

/// The runtime's end of the socket.
struct FakeRuntime {
    stream: UnixStream,
    conns: [Decoder; 2],
    next_stream: u32,
}

impl FakeRuntime {
    fn new(stream: UnixStream) -> Self {
        FakeRuntime {
            stream,
            conns: Default::default(),
            next_stream: 1,
        }
    }

    async fn send(&mut self, conn: u32, stream_id: u32, kind: u8, payload: &[u8]) {
        let mut out = Vec::new();
        mux::encode_frames(conn, &ttrpc::encode(stream_id, kind, payload), &mut out);
        self.stream.write_all(&out).await.unwrap();
    }

    /// The next whole message on either connection.
    async fn next(&mut self) -> (u32, Inbound) {
        loop {
            for (i, d) in self.conns.iter_mut().enumerate() {
                if let Some(m) = d.next_message() {
                    return (i as u32 + 1, m);
                }
            }
            let mut frame = Vec::new();
            let conn = tokio::time::timeout(
                Duration::from_secs(5),
                mux::read_frame(&mut self.stream, &mut frame),
            )
            .await
            .expect("the plugin answers within 5 s")
            .unwrap()
            .expect("the plugin keeps the connection open");
            assert!(
                frame.len() <= mux::WRITE_CHUNK,
                "frame of {} bytes",
                frame.len()
            );
            self.conns[conn as usize - 1].push(&frame);
        }
    }

    /// Reads the plugin's RegisterPlugin call and accepts it.
    async fn accept_registration(&mut self) -> RegisterPluginRequest {
        let (conn, m) = self.next().await;
        assert_eq!(conn, RUNTIME_SERVICE_CONN);
        let Inbound::Message {
            stream_id,
            kind: TYPE_REQUEST,
            payload,
        } = m
        else {
            panic!("expected a request, got {m:?}")
        };
        let req = ttrpc::Request::decode(payload.as_slice()).unwrap();
        assert_eq!(
            (req.service.as_str(), req.method.as_str()),
            (RUNTIME_SERVICE, "RegisterPlugin")
        );
        self.answer(stream_id, 0, "", &Empty {}.encode_to_vec())
            .await;
        RegisterPluginRequest::decode(req.payload.as_slice()).unwrap()
    }

    async fn answer(&mut self, stream_id: u32, code: i32, message: &str, payload: &[u8]) {
        let resp = ttrpc::Response {
            status: Some(ttrpc::Status {
                code,
                message: message.into(),
            }),
            payload: payload.to_vec(),
        };
        self.send(
            RUNTIME_SERVICE_CONN,
            stream_id,
            TYPE_RESPONSE,
            &resp.encode_to_vec(),
        )
        .await;
    }

    /// Calls the plugin and returns its response.
    async fn call(&mut self, service: &str, method: &str, payload: &[u8]) -> ttrpc::Response {
        self.call_within(service, method, payload, 0).await
    }

    /// Calls the plugin with a ttrpc deadline (`timeout_nano`; 0: none).
    async fn call_within(
        &mut self,
        service: &str,
        method: &str,
        payload: &[u8],
        timeout_nano: i64,
    ) -> ttrpc::Response {
        let id = self.next_stream;
        self.next_stream += 2;
        let req = ttrpc::Request {
            service: service.into(),
            method: method.into(),
            payload: payload.to_vec(),
            timeout_nano,
        };
        self.send(PLUGIN_SERVICE_CONN, id, TYPE_REQUEST, &req.encode_to_vec())
            .await;
        self.response(id).await
    }

    async fn response(&mut self, id: u32) -> ttrpc::Response {
        let (conn, m) = self.next().await;
        assert_eq!(conn, PLUGIN_SERVICE_CONN);
        match m {
            Inbound::Message {
                stream_id,
                kind: TYPE_RESPONSE,
                payload,
            } => {
                assert_eq!(stream_id, id);
                ttrpc::Response::decode(payload.as_slice()).unwrap()
            }
            other => panic!("expected a response, got {other:?}"),
        }
    }
}

fn status(r: &ttrpc::Response) -> (i32, &str) {
    let s = r.status.as_ref().unwrap();
    (s.code, s.message.as_str())
}

fn pod() -> PodSandbox {
    PodSandbox {
        id: "pod-1".into(),
        name: "web".into(),
        uid: "uid-1".into(),
        namespace: "default".into(),
        ..Default::default()
    }
}

fn ctr(name: &str) -> Container {
    Container {
        id: format!("id-{name}"),
        pod_sandbox_id: "pod-1".into(),
        name: name.into(),
        ..Default::default()
    }
}

fn create(name: &str) -> Vec<u8> {
    CreateContainerRequest {
        pod: Some(pod()),
        container: Some(ctr(name)),
    }
    .encode_to_vec()
}

fn events() -> EventMask {
    [Event::CreateContainer, Event::RemoveContainer]
        .into_iter()
        .collect()
}

/// A plugin served on one end of a socket pair, and the runtime's end.
fn start(plugin: Arc<Recorder>) -> (FakeRuntime, tokio::task::JoinHandle<Result<(), NriError>>) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let reg = Registration::new("topomgr", "50", events()).unwrap();
    let task = tokio::spawn(async move { serve(ours, &reg, plugin, |_| {}).await });
    (FakeRuntime::new(theirs), task)
}

#[tokio::test]
async fn registers_configures_and_answers_create_container() {
    let plugin = Arc::new(Recorder::default());
    let (mut rt, task) = start(plugin.clone());
    let reg = rt.accept_registration().await;
    assert_eq!(
        (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
        ("topomgr", "50")
    );

    let configure = ConfigureRequest {
        config: String::new(),
        runtime_name: "containerd".into(),
        runtime_version: "1.7.24".into(),
        ..Default::default()
    };
    let r = rt
        .call(PLUGIN_SERVICE, "Configure", &configure.encode_to_vec())
        .await;
    assert_eq!(status(&r), (0, ""));
    // CreateContainer is event 4 (bit 3), RemoveContainer event 11 (bit 10)
    assert_eq!(
        ConfigureResponse::decode(r.payload.as_slice())
            .unwrap()
            .events,
        0b100_0000_1000
    );

    let sync = SynchronizeRequest {
        pods: vec![pod()],
        containers: vec![ctr("a"), ctr("b")],
        more: false,
    };
    let r = rt
        .call(PLUGIN_SERVICE, "Synchronize", &sync.encode_to_vec())
        .await;
    let updates = SynchronizeResponse::decode(r.payload.as_slice())
        .unwrap()
        .update;
    assert_eq!(
        updates
            .iter()
            .map(|u| u.container_id.as_str())
            .collect::<Vec<_>>(),
        ["id-a", "id-b"]
    );

    let r = rt
        .call(PLUGIN_SERVICE, "CreateContainer", &create("app"))
        .await;
    assert_eq!(status(&r), (0, ""));
    let resp = CreateContainerResponse::decode(r.payload.as_slice()).unwrap();
    let cpu = resp
        .adjust
        .unwrap()
        .linux
        .unwrap()
        .resources
        .unwrap()
        .cpu
        .unwrap();
    assert_eq!((cpu.cpus.as_str(), cpu.mems.as_str()), ("1", "0"));
    assert_eq!(resp.update[0].container_id, "other");

    let event = StateChangeEvent {
        event: Event::RemoveContainer as i32,
        pod: Some(pod()),
        container: Some(ctr("app")),
    };
    let r = rt
        .call(PLUGIN_SERVICE, "StateChange", &event.encode_to_vec())
        .await;
    assert_eq!(status(&r), (0, ""));

    let r = rt.call(PLUGIN_SERVICE, "Shutdown", &[]).await;
    assert_eq!(status(&r), (0, ""));
    drop(rt);
    task.await
        .unwrap()
        .expect("a runtime that closes the socket ends serving cleanly");
    assert_eq!(
        plugin.calls(),
        [
            "configure containerd 1.7.24",
            "synchronize 1 2",
            "create default/web app",
            "remove web id-app",
            "shutdown"
        ]
    );
}

#[tokio::test]
async fn handler_errors_and_panics_become_error_statuses_and_serving_goes_on() {
    let plugin = Arc::new(Recorder::default());
    let (mut rt, task) = start(plugin.clone());
    rt.accept_registration().await;

    let r = rt
        .call(PLUGIN_SERVICE, "CreateContainer", &create("reject"))
        .await;
    assert_eq!(status(&r), (2, "topomgr: no NUMA node fits 4 CPUs"));
    assert!(r.payload.is_empty());

    let r = rt
        .call(PLUGIN_SERVICE, "CreateContainer", &create("panic"))
        .await;
    assert_eq!(
        status(&r),
        (13, "the plugin's CreateContainer handler panicked")
    );

    let r = rt
        .call(PLUGIN_SERVICE, "CreateContainer", &create("app"))
        .await;
    assert_eq!(status(&r).0, 0);
    assert!(!task.is_finished());
}

#[tokio::test]
async fn unknown_methods_services_and_malformed_requests_are_answered_with_errors() {
    let (mut rt, task) = start(Arc::new(Recorder::default()));
    rt.accept_registration().await;

    let r = rt
        .call(PLUGIN_SERVICE, "ValidateContainerAdjustment", &[])
        .await;
    assert_eq!(status(&r), (12, "method ValidateContainerAdjustment"));
    let r = rt.call("grpc.health.v1.Health", "Check", &[]).await;
    assert_eq!(status(&r), (12, "service grpc.health.v1.Health"));

    // a payload that is not a CreateContainerRequest (field 1 with wire type 7)
    let r = rt
        .call(PLUGIN_SERVICE, "CreateContainer", &[0x0f, 0xff, 0xff])
        .await;
    let (code, msg) = status(&r);
    assert_eq!(code, 3);
    assert!(
        msg.starts_with("CreateContainer request does not decode: "),
        "{msg}"
    );

    // a request without a container
    let half = CreateContainerRequest {
        pod: Some(pod()),
        container: None,
    };
    let r = rt
        .call(PLUGIN_SERVICE, "CreateContainer", &half.encode_to_vec())
        .await;
    assert_eq!(
        status(&r),
        (2, "CreateContainer request carries no container")
    );

    // a StateChange of an event that has its own call
    let ev = StateChangeEvent {
        event: Event::CreateContainer as i32,
        pod: Some(pod()),
        container: Some(ctr("x")),
    };
    let r = rt
        .call(PLUGIN_SERVICE, "StateChange", &ev.encode_to_vec())
        .await;
    assert_eq!(
        status(&r),
        (
            2,
            "StateChange does not carry event 4 (it has its own call or is unknown)"
        )
    );

    // pod events need no container; container events do
    let ev = StateChangeEvent {
        event: Event::RunPodSandbox as i32,
        pod: Some(pod()),
        container: None,
    };
    let r = rt
        .call(PLUGIN_SERVICE, "StateChange", &ev.encode_to_vec())
        .await;
    assert_eq!(status(&r), (0, ""));
    let ev = StateChangeEvent {
        event: Event::PostStartContainer as i32,
        pod: Some(pod()),
        container: None,
    };
    let r = rt
        .call(PLUGIN_SERVICE, "StateChange", &ev.encode_to_vec())
        .await;
    assert_eq!(
        status(&r),
        (2, "StateChange PostStartContainer carries no container")
    );

    // an even stream id, and a ttrpc envelope that does not decode
    rt.send(PLUGIN_SERVICE_CONN, 1000, TYPE_REQUEST, b"").await;
    let r = rt.response(1000).await;
    assert_eq!(
        status(&r),
        (3, "StreamID must be odd for client initiated streams")
    );
    rt.send(PLUGIN_SERVICE_CONN, 1001, TYPE_REQUEST, &[0xff; 7])
        .await;
    let r = rt.response(1001).await;
    assert_eq!(status(&r).0, 3);
    assert!(status(&r).1.starts_with("unmarshal request error"));
    // a reused stream id
    rt.send(PLUGIN_SERVICE_CONN, 1001, TYPE_REQUEST, b"").await;
    let r = rt.response(1001).await;
    assert_eq!(
        status(&r),
        (3, "StreamID cannot be re-used and must increment")
    );

    rt.next_stream = 1003;
    let r = rt
        .call(PLUGIN_SERVICE, "CreateContainer", &create("app"))
        .await;
    assert_eq!(status(&r).0, 0, "still serving");
    assert!(!task.is_finished());
}

#[tokio::test]
async fn an_oversized_message_is_refused_and_the_connection_stays_usable() {
    let (mut rt, _task) = start(Arc::new(Recorder::default()));
    rt.accept_registration().await;
    let len = ttrpc::MESSAGE_LENGTH_MAX + 1;
    let mut header = (len as u32).to_be_bytes().to_vec();
    header.extend(7u32.to_be_bytes());
    header.extend([TYPE_REQUEST, 0]);
    let mut body = header;
    body.resize(ttrpc::HEADER_LEN + len, 0x5a);
    // in frames of 1 MiB, as the Go side would write them
    for chunk in body.chunks(1 << 20) {
        let mut f = PLUGIN_SERVICE_CONN.to_be_bytes().to_vec();
        f.extend((chunk.len() as u32).to_be_bytes());
        f.extend(chunk);
        rt.stream.write_all(&f).await.unwrap();
    }
    let r = rt.response(7).await;
    assert_eq!(
        status(&r),
        (
            8,
            "message length 4194305 exceeds the maximum message size of 4194304"
        )
    );
    rt.next_stream = 9;
    let r = rt
        .call(PLUGIN_SERVICE, "CreateContainer", &create("app"))
        .await;
    assert_eq!(status(&r).0, 0);
}

#[tokio::test]
async fn frames_of_both_connections_interleave_and_torn_messages_reassemble() {
    let plugin = Arc::new(Recorder::default());
    let (mut rt, _task) = start(plugin.clone());
    // read the registration call but do not answer it yet
    let (conn, m) = rt.next().await;
    assert_eq!(conn, RUNTIME_SERVICE_CONN);
    let Inbound::Message {
        stream_id: reg_id, ..
    } = m
    else {
        panic!("{m:?}")
    };
    // a CreateContainer request cut into 5-byte frames, interleaved with
    // the registration answer cut the same way, and a frame for an unused
    // connection in between
    let req = ttrpc::Request {
        service: PLUGIN_SERVICE.into(),
        method: "CreateContainer".into(),
        payload: create("app"),
        timeout_nano: 0,
    };
    let request = ttrpc::encode(1, TYPE_REQUEST, &req.encode_to_vec());
    let answer = ttrpc::encode(
        reg_id,
        TYPE_RESPONSE,
        &ttrpc::Response {
            status: None,
            payload: vec![],
        }
        .encode_to_vec(),
    );
    let mut a = request.chunks(5);
    let mut b = answer.chunks(5);
    let mut bytes = Vec::new();
    loop {
        let (x, y) = (a.next(), b.next());
        if x.is_none() && y.is_none() {
            break;
        }
        for (conn, chunk) in [
            (PLUGIN_SERVICE_CONN, x),
            (RUNTIME_SERVICE_CONN, y),
            (9, Some(&b"junk"[..])),
        ] {
            if let Some(c) = chunk {
                bytes.extend(conn.to_be_bytes());
                bytes.extend((c.len() as u32).to_be_bytes());
                bytes.extend(c);
            }
        }
    }
    rt.stream.write_all(&bytes).await.unwrap();
    let r = rt.response(1).await;
    assert_eq!(status(&r), (0, ""));
    assert_eq!(plugin.calls(), ["create default/web app"]);
}

#[tokio::test]
async fn update_containers_reaches_the_runtime_and_returns_what_failed() {
    let plugin = Arc::new(Recorder::default());
    let (mut rt, _task) = start(plugin.clone());
    rt.accept_registration().await;
    rt.call(
        PLUGIN_SERVICE,
        "Configure",
        &ConfigureRequest::default().encode_to_vec(),
    )
    .await;
    let client = plugin.runtime.lock().unwrap().clone().unwrap();
    assert!(client.is_connected());

    let call = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .update_containers(
                    vec![ContainerUpdate::resources(
                        "c1",
                        LinuxResources::cpuset("0-1", "0"),
                    )],
                    vec![],
                )
                .await
        }
    });
    let (conn, m) = rt.next().await;
    assert_eq!(conn, RUNTIME_SERVICE_CONN);
    let Inbound::Message {
        stream_id, payload, ..
    } = m
    else {
        panic!("{m:?}")
    };
    let req = ttrpc::Request::decode(payload.as_slice()).unwrap();
    assert_eq!(req.method, "UpdateContainers");
    let upd = UpdateContainersRequest::decode(req.payload.as_slice()).unwrap();
    assert_eq!(upd.update[0].container_id, "c1");
    let failed = UpdateContainersResponse {
        failed: upd.update.clone(),
    };
    rt.answer(stream_id, 0, "", &failed.encode_to_vec()).await;
    let failed = call.await.unwrap().unwrap();
    assert_eq!(failed.len(), 1);

    // an error status reaches the caller with its code and message
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.update_containers(vec![], vec![]).await }
    });
    let (_, m) = rt.next().await;
    let Inbound::Message { stream_id, .. } = m else {
        panic!("{m:?}")
    };
    rt.answer(stream_id, 5, "container c9 not found", &[]).await;
    let err = call.await.unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "the runtime answered UpdateContainers with NotFound (5): container c9 not found"
    );

    // a call waiting when the runtime goes away fails instead of hanging
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.update_containers(vec![], vec![]).await }
    });
    let _ = rt.next().await;
    drop(rt);
    assert!(matches!(call.await.unwrap(), Err(NriError::Closed)));
    assert!(!client.is_connected());
    assert!(matches!(
        client.update_containers(vec![], vec![]).await,
        Err(NriError::Closed)
    ));
}

#[tokio::test]
async fn an_oversized_frame_closes_the_connection_with_an_error() {
    let (mut rt, task) = start(Arc::new(Recorder::default()));
    rt.accept_registration().await;
    let mut f = PLUGIN_SERVICE_CONN.to_be_bytes().to_vec();
    f.extend(((mux::MAX_FRAME_PAYLOAD + 1) as u32).to_be_bytes());
    rt.stream.write_all(&f).await.unwrap();
    let err = task.await.unwrap().unwrap_err();
    assert!(
        matches!(err, NriError::Frame(FrameError::TooLarge { conn: 1, .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn garbage_never_panics_and_ends_with_an_error_or_a_clean_close() {
    // deterministic pseudo-random byte soup, with and without a valid
    // registration first
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..50 {
        let (mut rt, task) = start(Arc::new(Recorder::default()));
        if round % 2 == 0 {
            rt.accept_registration().await;
        }
        let mut bytes = Vec::new();
        for _ in 0..(round * 37 % 400 + 1) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            bytes.push(seed as u8);
        }
        // mostly-valid frame headers with random payloads too
        if round % 3 == 0 {
            let mut framed = (1 + round as u32 % 2).to_be_bytes().to_vec();
            framed.extend((bytes.len() as u32).to_be_bytes());
            framed.extend(&bytes);
            bytes = framed;
        }
        let _ = rt.stream.write_all(&bytes).await;
        let _ = rt.stream.shutdown().await;
        // drain whatever the plugin answers
        let mut sink = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(5), rt.stream.read_to_end(&mut sink)).await;
        let outcome = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("serving ends when the runtime's side closes")
            .expect("no panic");
        if let Err(e) = outcome {
            assert!(!e.to_string().is_empty());
        }
    }
}

/// A runtime that accepts the registration but never synchronizes leaves a
/// connection that would follow nothing: it ends with an error after the
/// deadline (and the reconnect loop makes it again); one that synchronizes
/// in time keeps it.
#[tokio::test]
async fn a_registration_without_synchronize_is_given_up_after_the_deadline() {
    let deadline = Duration::from_millis(300);
    let serve_with = |plugin: Arc<Recorder>| {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut reg = Registration::new("topomgr", "50", events()).unwrap();
        reg.synchronize_deadline = deadline;
        let task = tokio::spawn(async move { serve(ours, &reg, plugin, |_| {}).await });
        (FakeRuntime::new(theirs), task)
    };

    let (mut rt, task) = serve_with(Arc::new(Recorder::default()));
    rt.accept_registration().await;
    let started = std::time::Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("given up within 5 s")
        .unwrap()
        .unwrap_err();
    assert!(started.elapsed() >= deadline, "{:?}", started.elapsed());
    assert_eq!(
        err.to_string(),
        "the runtime accepted the registration but did not send Synchronize within 300ms; reconnecting"
    );

    let (mut rt, task) = serve_with(Arc::new(Recorder::default()));
    rt.accept_registration().await;
    let sync = SynchronizeRequest::default();
    let r = rt
        .call(PLUGIN_SERVICE, "Synchronize", &sync.encode_to_vec())
        .await;
    assert_eq!(status(&r), (0, ""));
    tokio::time::sleep(deadline * 3).await;
    assert!(!task.is_finished(), "a synchronized connection is kept");
    drop(rt);
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_runtime_that_closes_before_registration_is_an_error() {
    let (rt, task) = start(Arc::new(Recorder::default()));
    drop(rt);
    let err = task.await.unwrap().unwrap_err();
    assert!(matches!(err, NriError::ClosedBeforeRegistration), "{err:?}");
}

#[tokio::test]
async fn a_refused_registration_is_returned() {
    let (mut rt, task) = start(Arc::new(Recorder::default()));
    let (_, m) = rt.next().await;
    let Inbound::Message { stream_id, .. } = m else {
        panic!("{m:?}")
    };
    rt.answer(stream_id, 2, "invalid plugin index: 5", &[])
        .await;
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "the runtime answered RegisterPlugin with Unknown (2): invalid plugin index: 5"
    );
}

#[test]
fn invalid_registrations_are_refused_before_connecting() {
    let all = EventMask::all();
    for (name, index, events, want) in [
        ("", "50", all, "the plugin name is empty"),
        ("a b", "50", all, "contains '/' or whitespace"),
        (
            "topomgr",
            "5",
            all,
            "the plugin index \"5\" is not two digits",
        ),
        ("topomgr", "5a", all, "is not two digits"),
        (
            "topomgr",
            "50",
            EventMask::empty(),
            "subscribes to no event",
        ),
    ] {
        let err = Registration::new(name, index, events).unwrap_err();
        assert!(err.to_string().contains(want), "{err}");
    }
}

#[tokio::test]
async fn requests_are_served_one_at_a_time_in_order() {
    let plugin = Arc::new(Recorder::default());
    let (mut rt, _task) = start(plugin.clone());
    rt.accept_registration().await;
    // send three requests back to back; the slow one must not be overtaken
    for (id, name) in [(1u32, "slow"), (3, "a"), (5, "b")] {
        let req = ttrpc::Request {
            service: PLUGIN_SERVICE.into(),
            method: "CreateContainer".into(),
            payload: create(name),
            timeout_nano: 0,
        };
        rt.send(PLUGIN_SERVICE_CONN, id, TYPE_REQUEST, &req.encode_to_vec())
            .await;
    }
    for id in [1, 3, 5] {
        assert_eq!(status(&rt.response(id).await).0, 0);
    }
    assert_eq!(
        plugin.calls(),
        [
            "create default/web slow",
            "create default/web a",
            "create default/web b"
        ]
    );
}

#[tokio::test]
async fn reconnects_with_backoff_and_reports_status() {
    let dir = std::env::temp_dir().join(format!("topomgr-nri-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("nri.sock");
    let _ = std::fs::remove_file(&socket);

    let (tx, mut statuses) = tokio::sync::mpsc::unbounded_channel();
    let plugin = Arc::new(Recorder::default());
    let backoff = Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(40),
    };
    let sock = socket.clone();
    let loop_task = tokio::spawn(async move {
        serve_with_reconnect(
            &sock,
            "topomgr",
            "50",
            events(),
            plugin,
            backoff,
            move |s| {
                let _ = tx.send(match s {
                    ConnectionStatus::Connected { .. } => "connected".to_string(),
                    ConnectionStatus::Disconnected { error, retry_in } => {
                        format!(
                            "disconnected {} {retry_in:?}",
                            matches!(error, NriError::Connect { .. })
                        )
                    }
                    ConnectionStatus::AwaitingSynchronize { waited } => {
                        format!("awaiting synchronize {waited:?}")
                    }
                    ConnectionStatus::Synchronized => "synchronized".to_string(),
                });
            },
        )
        .await
    });

    // no runtime yet: failed attempts back off 10, 20, 40, 40 ms
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(statuses.recv().await.unwrap());
    }
    assert_eq!(
        seen,
        [
            "disconnected true 10ms",
            "disconnected true 20ms",
            "disconnected true 40ms",
            "disconnected true 40ms"
        ]
    );

    // the runtime appears, accepts, then restarts
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    for _ in 0..2 {
        let (stream, _) = listener.accept().await.unwrap();
        let mut rt = FakeRuntime::new(stream);
        rt.accept_registration().await;
        loop {
            let s = statuses.recv().await.unwrap();
            if s == "connected" {
                break;
            }
            assert!(s.starts_with("disconnected true"), "{s}");
        }
        drop(rt);
        // a registered connection that ends retries after the initial delay
        assert_eq!(statuses.recv().await.unwrap(), "disconnected false 10ms");
    }
    loop_task.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_invalid_registration_ends_the_reconnect_loop_at_once() {
    let err = serve_with_reconnect(
        std::path::Path::new("/nonexistent/nri.sock"),
        "topomgr",
        "100",
        events(),
        Arc::new(Recorder::default()),
        Backoff::default(),
        |_| panic!("no status for an invalid registration"),
    )
    .await;
    assert!(matches!(err, NriError::InvalidRegistration(_)), "{err:?}");
}

/// NRI >= 0.7 splits a Synchronize larger than a message in chunks: each
/// but the last is answered with `more` echoed and no update; the plugin
/// is called once, with every chunk's pods and containers, and its updates
/// go in the answer to the last chunk.
#[tokio::test]
async fn a_split_synchronize_is_gathered_and_reconciled_once() {
    let plugin = Arc::new(Recorder::default());
    let (mut rt, task) = start(plugin.clone());
    rt.accept_registration().await;
    let chunks = [
        (vec![pod()], vec![ctr("a"), ctr("b")], true),
        (vec![], vec![ctr("c")], true),
        (vec![], vec![ctr("d")], false),
    ];
    let mut answers = Vec::new();
    for (pods, containers, more) in chunks {
        let sync = SynchronizeRequest {
            pods,
            containers,
            more,
        };
        let r = rt
            .call(PLUGIN_SERVICE, "Synchronize", &sync.encode_to_vec())
            .await;
        assert_eq!(status(&r), (0, ""));
        answers.push(SynchronizeResponse::decode(r.payload.as_slice()).unwrap());
        if more {
            assert!(
                plugin.calls().is_empty(),
                "nothing reconciled before the last chunk"
            );
        }
    }
    for a in &answers[..2] {
        assert!(a.more, "each chunk but the last is answered with more");
        assert!(a.update.is_empty(), "no update before the last chunk");
    }
    assert!(!answers[2].more);
    assert_eq!(
        answers[2]
            .update
            .iter()
            .map(|u| u.container_id.as_str())
            .collect::<Vec<_>>(),
        ["id-a", "id-b", "id-c", "id-d"]
    );
    assert_eq!(plugin.calls(), ["synchronize 1 4"]);

    // A later Synchronize starts afresh.
    let r = rt
        .call(
            PLUGIN_SERVICE,
            "Synchronize",
            &SynchronizeRequest {
                pods: vec![pod()],
                containers: vec![ctr("e")],
                more: false,
            }
            .encode_to_vec(),
        )
        .await;
    assert_eq!(status(&r), (0, ""));
    assert_eq!(plugin.calls(), ["synchronize 1 4", "synchronize 1 1"]);
    drop(rt);
    task.await.unwrap().unwrap();
}

/// containerd 2.x holds a new plugin's Synchronize while a container is
/// being stopped, its grace period included: a Synchronize 20 s after the
/// registration is reported as late (after 15 s) but accepted on the same
/// connection, which is kept; one that never comes gives the connection up
/// at the deadline (10 minutes), so it is made again. Simulated time.
#[tokio::test(start_paused = true)]
async fn a_late_synchronize_is_awaited_without_registering_again() {
    let serve_recording = || {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let reg = Registration::new("topomgr", "50", events()).unwrap();
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = Arc::clone(&seen);
        let plugin = Arc::new(Recorder::default());
        let task = tokio::spawn(async move {
            serve(ours, &reg, plugin, move |p| {
                log.lock().unwrap().push(match p {
                    Progress::Registered(_) => "registered".to_owned(),
                    Progress::AwaitingSynchronize { waited } => format!("awaiting {waited:?}"),
                    Progress::Synchronized => "synchronized".to_owned(),
                })
            })
            .await
        });
        (FakeRuntime::new(theirs), task, seen)
    };

    let (mut rt, task, seen) = serve_recording();
    rt.accept_registration().await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(*seen.lock().unwrap(), ["registered", "awaiting 15s"]);
    assert!(!task.is_finished(), "the connection is kept while waiting");
    let r = rt
        .call(
            PLUGIN_SERVICE,
            "Synchronize",
            &SynchronizeRequest::default().encode_to_vec(),
        )
        .await;
    assert_eq!(status(&r), (0, ""));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(
        *seen.lock().unwrap(),
        ["registered", "awaiting 15s", "synchronized"]
    );
    assert!(!task.is_finished(), "a synchronized connection is kept");
    drop(rt);
    task.await.unwrap().unwrap();

    // A Synchronize that never comes: given up at the deadline.
    let (mut rt, task, seen) = serve_recording();
    rt.accept_registration().await;
    let started = tokio::time::Instant::now();
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(started.elapsed().as_secs(), 600);
    assert_eq!(
        err.to_string(),
        "the runtime accepted the registration but did not send Synchronize within 600s; reconnecting"
    );
    assert_eq!(*seen.lock().unwrap(), ["registered", "awaiting 15s"]);
    drop(rt);
}

/// A handler that outlives the request's ttrpc deadline is answered with an
/// error before the deadline (not late, which containerd takes as fatal
/// and closes the plugin for); it finishes, seeing its deadline passed,
/// before the next request is served.
#[tokio::test]
async fn a_request_past_its_ttrpc_deadline_is_failed_in_time() {
    let plugin = Arc::new(Recorder::default());
    let (mut rt, _task) = start(plugin.clone());
    rt.accept_registration().await;
    let started = std::time::Instant::now();
    let r = rt
        .call_within(
            PLUGIN_SERVICE,
            "CreateContainer",
            &create("stuck"),
            200_000_000,
        )
        .await;
    let took = started.elapsed();
    let (code, message) = status(&r);
    assert_eq!(code, 2, "{message}");
    assert!(
        message.starts_with("topomgr could not answer CreateContainer within the runtime's request timeout (200 ms, less 20 ms kept for the reply)"),
        "{message}"
    );
    assert!(
        took >= Duration::from_millis(170) && took < Duration::from_millis(500),
        "answered after {took:?}"
    );
    let r = rt
        .call_within(
            PLUGIN_SERVICE,
            "CreateContainer",
            &create("app"),
            2_000_000_000,
        )
        .await;
    assert_eq!(status(&r), (0, ""));
    assert_eq!(
        plugin.calls(),
        [
            "create default/web stuck",
            "stuck done late=true",
            "create default/web app"
        ]
    );
}

/// A request without a ttrpc deadline gets the request timeout Configure
/// named (NRI >= 0.7, milliseconds).
#[tokio::test]
async fn configures_request_timeout_bounds_requests_without_a_deadline() {
    let plugin = Arc::new(Recorder::default());
    let (mut rt, _task) = start(plugin.clone());
    rt.accept_registration().await;
    let configure = ConfigureRequest {
        runtime_name: "containerd".into(),
        runtime_version: "2.1.4".into(),
        registration_timeout: 5000,
        request_timeout: 150,
        ..Default::default()
    };
    let r = rt
        .call(PLUGIN_SERVICE, "Configure", &configure.encode_to_vec())
        .await;
    assert_eq!(status(&r), (0, ""));
    let started = std::time::Instant::now();
    let r = rt
        .call(PLUGIN_SERVICE, "CreateContainer", &create("stuck"))
        .await;
    assert!(started.elapsed() < Duration::from_millis(500));
    let (code, message) = status(&r);
    assert_eq!(code, 2);
    assert!(
        message.contains("within the runtime's request timeout (150 ms, less 15 ms"),
        "{message}"
    );
    // A handler within its time answers normally (sent once the late one
    // finished: time queued behind it counts against a request's budget).
    while !plugin.calls().iter().any(|c| c.starts_with("stuck done")) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = rt
        .call(PLUGIN_SERVICE, "CreateContainer", &create("slow"))
        .await;
    assert_eq!(status(&r), (0, ""));
}
