//! Refusals as Kubernetes Events on the pod (core/v1 `Event`, what
//! `kubectl describe pod` and `kubectl get events` show).
//!
//! The kubelet retries a container whose creation failed, and each retry
//! is refused again: as client-go's event recorder does
//! (`tools/record/events_cache.go`, `EventCorrelator`), a refusal equal to
//! one already recorded (same pod uid, reason and message) does not make a
//! new Event but raises the `count` and `lastTimestamp` of the first with a
//! strategic merge patch. The Event is named as client-go names them,
//! `<pod name>.<hex nanoseconds>`.
//!
//! [`EventRecorder::record`] never waits: refusals queue (bounded; a full
//! queue drops the newest, logged) for a task that posts them, retrying a
//! few times with backoff while the API server does not answer.

use std::collections::HashMap;
use std::time::Duration;

use hyper::Method;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::backoff::Backoff;
use crate::http::ApiClient;

/// The `source.component` and `reportingComponent` of topomgr's Events.
pub const COMPONENT: &str = "topomgr";
/// Refusals waiting for the task at most.
pub const QUEUE: usize = 256;
/// Tries of one Event before it is dropped.
pub const TRIES: u32 = 4;
/// Correlated Events remembered at most (then the memory starts over).
pub const REMEMBERED: usize = 4096;

/// One refused pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's uid.
    pub uid: String,
    /// The reason (`TopologyAffinityError` or the provider's).
    pub reason: String,
    /// The message, as `topomgr admit` gives it.
    pub message: String,
}

/// The recorder's handle.
#[derive(Debug, Clone)]
pub struct EventRecorder {
    queue: mpsc::Sender<Refusal>,
}

impl EventRecorder {
    /// Start recording to `client`'s API server as node `node_name` (on
    /// the current Tokio runtime).
    pub fn start(client: ApiClient, node_name: String) -> EventRecorder {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(
            Poster { client },
            rx,
            node_name,
            Backoff::new(Duration::from_millis(500), Duration::from_secs(5)),
        ));
        EventRecorder { queue }
    }

    /// Record `refusal`; never waits.
    pub fn record(&self, refusal: Refusal) {
        if let Err(e) = self.queue.try_send(refusal) {
            warn!(error = %e, "a refusal's Event is dropped: the queue of Events is full or closed");
        }
    }
}

/// The correlation key: client-go's `getEventKey` without the fields
/// that are always the same here.
type Key = (String, String, String);

struct Seen {
    namespace: String,
    event: String,
    count: i32,
}

/// Where Events go.
trait Sink: Send + 'static {
    /// POST a new Event; Err: retry.
    fn create(
        &mut self,
        ev: &Event,
    ) -> impl std::future::Future<Output = Result<(), Outcome>> + Send;
    /// Patch `count` and `lastTimestamp` of Event `name`.
    fn bump(
        &mut self,
        namespace: &str,
        name: &str,
        count: i32,
        last: &Time,
    ) -> impl std::future::Future<Output = Result<(), Outcome>> + Send;
}

/// Why a post did not land.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Worth another try.
    Retry(String),
    /// The Event to bump is gone: create a new one.
    Gone,
    /// Refused for good.
    Refused(String),
}

struct Poster {
    client: ApiClient,
}

impl Poster {
    async fn send(
        &mut self,
        method: Method,
        path: &str,
        ct: &str,
        body: Vec<u8>,
    ) -> Result<(), Outcome> {
        let r = self
            .client
            .send(method, path, Some(ct), body)
            .await
            .map_err(|e| Outcome::Retry(e.to_string()))?;
        match r.status {
            _ if r.is_success() => Ok(()),
            404 => Err(Outcome::Gone),
            s if s == 429 || s >= 500 => Err(Outcome::Retry(r.message())),
            s => Err(Outcome::Refused(format!("{s}: {}", r.message()))),
        }
    }
}

impl Sink for Poster {
    async fn create(&mut self, ev: &Event) -> Result<(), Outcome> {
        let ns = ev.metadata.namespace.clone().unwrap_or_default();
        let body = serde_json::to_vec(ev).map_err(|e| Outcome::Refused(e.to_string()))?;
        self.send(
            Method::POST,
            &format!("/api/v1/namespaces/{ns}/events"),
            "application/json",
            body,
        )
        .await
    }

    async fn bump(
        &mut self,
        namespace: &str,
        name: &str,
        count: i32,
        last: &Time,
    ) -> Result<(), Outcome> {
        let body = serde_json::to_vec(&serde_json::json!({
            "count": count,
            "lastTimestamp": last,
        }))
        .map_err(|e| Outcome::Refused(e.to_string()))?;
        self.send(
            Method::PATCH,
            &format!("/api/v1/namespaces/{namespace}/events/{name}"),
            "application/strategic-merge-patch+json",
            body,
        )
        .await
    }
}

/// The wall clock since the epoch.
fn since_epoch() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

fn now() -> Time {
    // Whole seconds, as metav1.Time is written.
    let secs = i64::try_from(since_epoch().as_secs()).unwrap_or(0);
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The new Event of `r` on node `node`.
fn event(r: &Refusal, node: &str, at: &Time) -> Event {
    let nanos = since_epoch().as_nanos();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", r.name, nanos)),
            namespace: Some(r.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(r.name.clone()),
            namespace: Some(r.namespace.clone()),
            uid: Some(r.uid.clone()).filter(|u| !u.is_empty()),
            ..Default::default()
        },
        reason: Some(r.reason.clone()),
        message: Some(r.message.clone()),
        source: Some(EventSource {
            component: Some(COMPONENT.to_owned()),
            host: Some(node.to_owned()),
        }),
        first_timestamp: Some(at.clone()),
        last_timestamp: Some(at.clone()),
        count: Some(1),
        type_: Some("Warning".to_owned()),
        reporting_component: Some(COMPONENT.to_owned()),
        reporting_instance: Some(node.to_owned()),
        ..Default::default()
    }
}

async fn run<S: Sink>(
    mut sink: S,
    mut rx: mpsc::Receiver<Refusal>,
    node: String,
    backoff: Backoff,
) {
    let mut seen: HashMap<Key, Seen> = HashMap::new();
    while let Some(r) = rx.recv().await {
        let key = (r.uid.clone(), r.reason.clone(), r.message.clone());
        let mut backoff = backoff.clone();
        for attempt in 1..=TRIES {
            let at = now();
            let result = match seen.get_mut(&key) {
                Some(s) => {
                    let count = s.count + 1;
                    match sink.bump(&s.namespace, &s.event, count, &at).await {
                        Ok(()) => {
                            s.count = count;
                            Ok(())
                        }
                        Err(Outcome::Gone) => {
                            seen.remove(&key);
                            Err(Outcome::Retry("the Event to count up is gone".to_owned()))
                        }
                        Err(e) => Err(e),
                    }
                }
                None => {
                    let ev = event(&r, &node, &at);
                    match sink.create(&ev).await {
                        Ok(()) => {
                            if seen.len() >= REMEMBERED {
                                seen.clear();
                            }
                            seen.insert(
                                key.clone(),
                                Seen {
                                    namespace: r.namespace.clone(),
                                    event: ev.metadata.name.clone().unwrap_or_default(),
                                    count: 1,
                                },
                            );
                            Ok(())
                        }
                        Err(Outcome::Gone) => Err(Outcome::Refused(format!(
                            "namespace {} not found",
                            r.namespace
                        ))),
                        Err(e) => Err(e),
                    }
                }
            };
            match result {
                Ok(()) => {
                    debug!(pod = %format!("{}/{}", r.namespace, r.name), "refusal recorded as an Event");
                    break;
                }
                Err(Outcome::Refused(why)) => {
                    warn!(pod = %format!("{}/{}", r.namespace, r.name), error = %why, "the API server refused a refusal's Event");
                    break;
                }
                Err(Outcome::Retry(why)) if attempt == TRIES => {
                    warn!(pod = %format!("{}/{}", r.namespace, r.name), error = %why, "a refusal's Event is dropped after {TRIES} tries");
                }
                Err(_) => tokio::time::sleep(backoff.next_wait()).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Fake {
        /// ("create", name, count) or ("bump", name, count).
        calls: Arc<Mutex<Vec<(String, String, i32)>>>,
        created: Arc<Mutex<Vec<Event>>>,
        fail: Arc<Mutex<VecDeque<Outcome>>>,
    }

    impl Sink for Fake {
        async fn create(&mut self, ev: &Event) -> Result<(), Outcome> {
            if let Some(f) = self.fail.lock().unwrap().pop_front() {
                return Err(f);
            }
            let name = ev.metadata.name.clone().unwrap();
            self.calls
                .lock()
                .unwrap()
                .push(("create".into(), name, ev.count.unwrap()));
            self.created.lock().unwrap().push(ev.clone());
            Ok(())
        }
        async fn bump(&mut self, _: &str, name: &str, count: i32, _: &Time) -> Result<(), Outcome> {
            if let Some(f) = self.fail.lock().unwrap().pop_front() {
                return Err(f);
            }
            self.calls
                .lock()
                .unwrap()
                .push(("bump".into(), name.to_owned(), count));
            Ok(())
        }
    }

    fn refusal(message: &str) -> Refusal {
        Refusal {
            namespace: "ml".into(),
            name: "trainer".into(),
            uid: "u-1".into(),
            reason: "TopologyAffinityError".into(),
            message: message.into(),
        }
    }

    async fn drive(fake: Fake, refusals: Vec<Refusal>) {
        let (tx, rx) = mpsc::channel(16);
        for r in refusals {
            tx.send(r).await.unwrap();
        }
        drop(tx);
        run(
            fake,
            rx,
            "worker-1".into(),
            Backoff::new(Duration::from_millis(10), Duration::from_millis(20)),
        )
        .await;
    }

    /// The kubelet's retries of one refused container count up one Event;
    /// another message is another Event.
    #[tokio::test(start_paused = true)]
    async fn retries_count_up_one_event() {
        let fake = Fake::default();
        drive(
            fake.clone(),
            vec![
                refusal("no node"),
                refusal("no node"),
                refusal("no node"),
                refusal("other"),
            ],
        )
        .await;
        let calls = fake.calls.lock().unwrap().clone();
        let kinds: Vec<_> = calls.iter().map(|c| (c.0.as_str(), c.2)).collect();
        assert_eq!(
            kinds,
            [("create", 1), ("bump", 2), ("bump", 3), ("create", 1)]
        );
        assert_eq!(calls[0].1, calls[1].1);
        assert_eq!(calls[0].1, calls[2].1);
        assert_ne!(calls[0].1, calls[3].1);
        assert!(calls[0].1.starts_with("trainer."));
        let ev = fake.created.lock().unwrap()[0].clone();
        assert_eq!(ev.reason.as_deref(), Some("TopologyAffinityError"));
        assert_eq!(ev.message.as_deref(), Some("no node"));
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        assert_eq!(ev.source.unwrap().component.as_deref(), Some("topomgr"));
        assert_eq!(ev.involved_object.uid.as_deref(), Some("u-1"));
        assert_eq!(ev.involved_object.kind.as_deref(), Some("Pod"));
        let json = serde_json::to_value(&fake.created.lock().unwrap()[0]).unwrap();
        assert_eq!(json["firstTimestamp"], json["lastTimestamp"]);
        assert!(
            json["firstTimestamp"].as_str().unwrap().ends_with('Z'),
            "{json}"
        );
    }

    /// An unreachable server is retried; an Event deleted meanwhile is
    /// created again; a refused one is not retried.
    #[tokio::test(start_paused = true)]
    async fn failures_retry_or_start_over() {
        let fake = Fake::default();
        fake.fail
            .lock()
            .unwrap()
            .extend([Outcome::Retry("down".into()), Outcome::Retry("down".into())]);
        drive(fake.clone(), vec![refusal("a")]).await;
        assert_eq!(fake.calls.lock().unwrap().len(), 1);

        let fake = Fake::default();
        let f2 = fake.clone();
        let (tx, rx) = mpsc::channel(16);
        tx.send(refusal("a")).await.unwrap();
        let task = tokio::spawn(run(
            f2,
            rx,
            "w".into(),
            Backoff::new(Duration::from_millis(10), Duration::from_millis(20)),
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        fake.fail.lock().unwrap().push_back(Outcome::Gone);
        tx.send(refusal("a")).await.unwrap();
        drop(tx);
        task.await.unwrap();
        let kinds: Vec<_> = fake
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| (c.0.clone(), c.2))
            .collect();
        assert_eq!(kinds, [("create".to_owned(), 1), ("create".to_owned(), 1)]);

        let fake = Fake::default();
        fake.fail
            .lock()
            .unwrap()
            .extend(std::iter::repeat_n(Outcome::Refused("403".into()), 10));
        drive(fake.clone(), vec![refusal("a")]).await;
        assert_eq!(fake.fail.lock().unwrap().len(), 9, "tried once");
    }
}
