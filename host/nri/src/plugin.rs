//! The handler a plugin implements, and the dispatch of the runtime's calls
//! (service `nri.pkg.api.v1alpha1.Plugin`) to it.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use prost::Message;

use crate::api::*;
use crate::events::EventMask;
use crate::runtime_client::RuntimeClient;
use crate::ttrpc::{Code, Status};

/// The ttrpc service name of the plugin side.
pub(crate) const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

/// An error a handler returns to the runtime. The runtime fails the
/// operation with it: for CreateContainer the CRI caller (the kubelet) sees
/// `failed to get NRI adjustment for container: …` with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PluginError {
    message: String,
}

impl PluginError {
    /// An error with this message (sent as gRPC code `Unknown`, as a Go
    /// plugin's plain error is).
    pub fn new(message: impl Into<String>) -> Self {
        PluginError {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Result of a handler method.
pub type HandlerResult<T> = Result<T, PluginError>;

/// What a plugin does on each event. Every method has a default that
/// changes nothing; implement those of the events the plugin subscribes to.
///
/// The runtime calls one method at a time, in the order of its events, and
/// waits for the answer (containerd gives up after `plugin_request_timeout`,
/// 2 s by default, and then disconnects the plugin). A method still running
/// at the request's answer deadline ([`crate::answer_deadline`]: the
/// runtime's timeout less a margin) is answered with an error then, and
/// left to finish; a method that changes state checks
/// [`crate::past_answer_deadline`] to refuse or undo what it can no longer
/// answer for. A panicking method is answered as an `Internal` error and
/// the connection stays up.
///
/// Do not call [`RuntimeClient::update_containers`] from inside a method and
/// wait for it: the runtime holds its lock while it waits for the method, so
/// the call would only complete after the method timed out. Return updates
/// of other containers in the method's answer instead.
pub trait Plugin: Send + Sync + 'static {
    /// The runtime configures the plugin after registration (once per
    /// connection). `runtime` calls the runtime from now until the connection
    /// closes (unsolicited container updates).
    fn configure(
        &self,
        request: ConfigureRequest,
        runtime: RuntimeClient,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        let _ = (request, runtime);
        async { Ok(()) }
    }

    /// Every pod and container the runtime knows, after Configure; the
    /// answer updates existing containers.
    fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> impl Future<Output = HandlerResult<Vec<ContainerUpdate>>> + Send {
        let _ = (pods, containers);
        async { Ok(Vec::new()) }
    }

    /// A container is about to be created: adjust it, update others, or fail
    /// its creation.
    fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<CreateContainerResponse>> + Send {
        let _ = (pod, container);
        async { Ok(CreateContainerResponse::default()) }
    }

    /// A container's resources are about to be updated to `resources`.
    fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Option<LinuxResources>,
    ) -> impl Future<Output = HandlerResult<UpdateContainerResponse>> + Send {
        let _ = (pod, container, resources);
        async { Ok(UpdateContainerResponse::default()) }
    }

    /// A container stopped; the answer updates the remaining containers.
    fn stop_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<Vec<ContainerUpdate>>> + Send {
        let _ = (pod, container);
        async { Ok(Vec::new()) }
    }

    /// A pod sandbox was started.
    fn run_pod_sandbox(&self, pod: PodSandbox) -> impl Future<Output = HandlerResult<()>> + Send {
        let _ = pod;
        async { Ok(()) }
    }

    /// A pod sandbox was stopped.
    fn stop_pod_sandbox(&self, pod: PodSandbox) -> impl Future<Output = HandlerResult<()>> + Send {
        let _ = pod;
        async { Ok(()) }
    }

    /// A pod sandbox was removed.
    fn remove_pod_sandbox(
        &self,
        pod: PodSandbox,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        let _ = pod;
        async { Ok(()) }
    }

    /// A container was created (with every plugin's adjustments applied).
    fn post_create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        let _ = (pod, container);
        async { Ok(()) }
    }

    /// A container is about to start (its cgroup exists from now on).
    fn start_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        let _ = (pod, container);
        async { Ok(()) }
    }

    /// A container started.
    fn post_start_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        let _ = (pod, container);
        async { Ok(()) }
    }

    /// A container's resources were updated.
    fn post_update_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        let _ = (pod, container);
        async { Ok(()) }
    }

    /// A container was removed.
    fn remove_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        let _ = (pod, container);
        async { Ok(()) }
    }

    /// The runtime is shutting down; the connection closes next.
    fn shutdown(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// At most this many chunks of one split Synchronize are gathered (each at
/// most a 4 MiB message); a runtime that sends more is refused.
pub(crate) const MAX_SYNCHRONIZE_CHUNKS: usize = 256;

/// The pods and containers of a Synchronize that NRI >= 0.7 split in
/// chunks (`more` set on all but the last): gathered per connection and
/// handed to [`Plugin::synchronize`] once, with the last chunk. Each chunk
/// before it is answered with `more` echoed and no update, as the
/// adaptation requires (containerd/nri `pkg/adaptation/plugin.go`, split
/// sync since v0.7: a reply that does not echo `more`, or carries updates,
/// closes the plugin).
#[derive(Debug, Default)]
pub(crate) struct SyncChunks {
    pods: Vec<PodSandbox>,
    containers: Vec<Container>,
    chunks: usize,
}

impl SyncChunks {
    /// Takes in one chunk; `Some` with everything gathered once it is the
    /// last, `None` while more follow.
    fn take(
        &mut self,
        r: SynchronizeRequest,
    ) -> HandlerResult<Option<(Vec<PodSandbox>, Vec<Container>)>> {
        self.chunks += 1;
        if self.chunks > MAX_SYNCHRONIZE_CHUNKS {
            *self = SyncChunks::default();
            return Err(PluginError::new(format!(
                "Synchronize split in more than {MAX_SYNCHRONIZE_CHUNKS} chunks; refusing it"
            )));
        }
        self.pods.extend(r.pods);
        self.containers.extend(r.containers);
        if r.more {
            return Ok(None);
        }
        let all = std::mem::take(self);
        Ok(Some((all.pods, all.containers)))
    }
}

/// The answer to one call: a status and, when OK, the encoded reply.
pub(crate) type Answer = (Status, Vec<u8>);

/// Runs the handler method that `method` names on the decoded `payload`.
pub(crate) async fn dispatch<P: Plugin>(
    plugin: &P,
    runtime: &RuntimeClient,
    events: EventMask,
    chunks: &mut SyncChunks,
    service: &str,
    method: &str,
    payload: &[u8],
) -> Answer {
    if service != PLUGIN_SERVICE {
        return failed(Code::Unimplemented, format!("service {service}"));
    }
    match method {
        "Configure" => {
            call(method, payload, |r: ConfigureRequest| async move {
                plugin.configure(r, runtime.clone()).await?;
                Ok(ConfigureResponse {
                    events: events.bits(),
                })
            })
            .await
        }
        "Synchronize" => {
            call(method, payload, |r: SynchronizeRequest| async move {
                let Some((pods, containers)) = chunks.take(r)? else {
                    return Ok(SynchronizeResponse {
                        update: Vec::new(),
                        more: true,
                    });
                };
                let update = plugin.synchronize(pods, containers).await?;
                Ok(SynchronizeResponse {
                    update,
                    more: false,
                })
            })
            .await
        }
        "Shutdown" => {
            call(method, payload, |_: Empty| async move {
                plugin.shutdown().await;
                Ok(Empty {})
            })
            .await
        }
        "CreateContainer" => {
            call(method, payload, |r: CreateContainerRequest| async move {
                let (pod, ctr) = pod_and_container(method, r.pod, r.container)?;
                plugin.create_container(pod, ctr).await
            })
            .await
        }
        "UpdateContainer" => {
            call(method, payload, |r: UpdateContainerRequest| async move {
                let (pod, ctr) = pod_and_container(method, r.pod, r.container)?;
                plugin.update_container(pod, ctr, r.linux_resources).await
            })
            .await
        }
        "StopContainer" => {
            call(method, payload, |r: StopContainerRequest| async move {
                let (pod, ctr) = pod_and_container(method, r.pod, r.container)?;
                let update = plugin.stop_container(pod, ctr).await?;
                Ok(StopContainerResponse { update })
            })
            .await
        }
        "StateChange" => {
            call(method, payload, |r: StateChangeEvent| async move {
                state_change(plugin, r).await.map(|()| Empty {})
            })
            .await
        }
        _ => failed(Code::Unimplemented, format!("method {method}")),
    }
}

/// Decodes the request, runs `handle` (a panic becomes an `Internal` error)
/// and encodes its reply.
async fn call<Req, Resp, F, Fut>(method: &str, payload: &[u8], handle: F) -> Answer
where
    Req: Message + Default,
    Resp: Message,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = HandlerResult<Resp>>,
{
    let request = match Req::decode(payload) {
        Ok(r) => r,
        Err(e) => {
            return failed(
                Code::InvalidArgument,
                format!("{method} request does not decode: {e}"),
            )
        }
    };
    match AssertUnwindSafe(handle(request)).catch_unwind().await {
        Ok(Ok(reply)) => (Status::new(Code::Ok, ""), reply.encode_to_vec()),
        Ok(Err(e)) => failed(Code::Unknown, e.message),
        Err(_) => failed(
            Code::Internal,
            format!("the plugin's {method} handler panicked"),
        ),
    }
}

fn failed(code: Code, message: String) -> Answer {
    (Status::new(code, message), Vec::new())
}

fn pod_and_container(
    method: &str,
    pod: Option<PodSandbox>,
    container: Option<Container>,
) -> HandlerResult<(PodSandbox, Container)> {
    match (pod, container) {
        (Some(p), Some(c)) => Ok((p, c)),
        (None, _) => Err(PluginError::new(format!("{method} request carries no pod"))),
        (_, None) => Err(PluginError::new(format!(
            "{method} request carries no container"
        ))),
    }
}

async fn state_change<P: Plugin>(plugin: &P, r: StateChangeEvent) -> HandlerResult<()> {
    let event = match Event::try_from(r.event) {
        Ok(
            e @ (Event::RunPodSandbox
            | Event::StopPodSandbox
            | Event::RemovePodSandbox
            | Event::PostCreateContainer
            | Event::StartContainer
            | Event::PostStartContainer
            | Event::PostUpdateContainer
            | Event::RemoveContainer),
        ) => e,
        _ => {
            return Err(PluginError::new(format!(
                "StateChange does not carry event {} (it has its own call or is unknown)",
                r.event
            )))
        }
    };
    let pod = r
        .pod
        .ok_or_else(|| PluginError::new(format!("StateChange {event:?} carries no pod")))?;
    let container = || {
        r.container
            .ok_or_else(|| PluginError::new(format!("StateChange {event:?} carries no container")))
    };
    match event {
        Event::RunPodSandbox => plugin.run_pod_sandbox(pod).await,
        Event::StopPodSandbox => plugin.stop_pod_sandbox(pod).await,
        Event::RemovePodSandbox => plugin.remove_pod_sandbox(pod).await,
        Event::PostCreateContainer => plugin.post_create_container(pod, container()?).await,
        Event::StartContainer => plugin.start_container(pod, container()?).await,
        Event::PostStartContainer => plugin.post_start_container(pod, container()?).await,
        Event::PostUpdateContainer => plugin.post_update_container(pod, container()?).await,
        // RemoveContainer, the only one left
        _ => plugin.remove_container(pod, container()?).await,
    }
}
