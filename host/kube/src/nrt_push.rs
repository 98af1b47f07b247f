//! The node's `NodeResourceTopology` object on the API server.
//!
//! The state thread hands over each new object ([`NrtPublisher::publish`]:
//! a `watch` channel holding the latest one, so it never waits); a task
//! applies it with server-side apply (`PATCH` with
//! `application/apply-patch+yaml`, field manager `topomgr`, forced), as
//! node-feature-discovery's topology-updater applies its object (its
//! `updateNodeResourceTopology`, `pkg/nfd-topology-updater`). Changes
//! coalesce: after an apply the task waits `min_interval`, and then
//! applies only the latest object. A failed apply is retried with
//! exponential backoff, always with the latest object, so the object
//! catches up when the API server returns.
//!
//! At shutdown the object is left in place by default, as the
//! topology-updater leaves it (its `Stop` only ends the loop; objects of
//! nodes that are gone are removed by nfd-topology-gc); the next start
//! applies the current object. `delete_on_shutdown` deletes it instead.
//!
//! The CRD is not installed by topomgr: an apply answered 404 means the
//! `noderesourcetopologies.topology.node.k8s.io` resource is missing, a
//! health note ([`NrtPusher::note`]), retried at the backoff's pace.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::Method;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::http::ApiClient;

/// The API group and version of the object.
pub const GROUP_VERSION: &str = "topology.node.k8s.io/v1alpha2";
/// The field manager of topomgr's applies.
pub const FIELD_MANAGER: &str = "topomgr";
/// How long the shutdown waits for a last apply or the delete.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

/// How the object is pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushSettings {
    /// `metadata.name` of the object (the node name).
    pub node_name: String,
    /// At most one apply per this interval (changes in between coalesce).
    pub min_interval: Duration,
    /// The first wait after a failure.
    pub retry_min: Duration,
    /// The longest wait between retries.
    pub retry_max: Duration,
    /// Delete the object at shutdown (default: leave it, as NFD does).
    pub delete_on_shutdown: bool,
}

/// Why an apply or delete failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushFailure {
    /// The CRD is not installed.
    #[error("the API server has no noderesourcetopologies.topology.node.k8s.io resource: install the NodeResourceTopology CRD (topology.node.k8s.io/v1alpha2); topomgr does not install it")]
    CrdMissing,
    /// Authentication or authorization failed.
    #[error("the API server refused topomgr ({status}): {message}; check its credentials and RBAC (docs/kubernetes.md)")]
    Denied {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// Another answer.
    #[error("the API server answered {status}: {message}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// No answer.
    #[error("{0}")]
    Unreachable(String),
}

/// Where the object goes: the API server, or a test's recorder.
pub(crate) trait Target: Send + 'static {
    /// Apply `body` (the object as JSON).
    fn apply(&mut self, body: &[u8]) -> impl Future<Output = Result<(), PushFailure>> + Send;
    /// Delete the object.
    fn delete(&mut self) -> impl Future<Output = Result<(), PushFailure>> + Send;
}

/// The API server as a [`Target`].
struct ApiTarget {
    client: ApiClient,
    path: String,
}

fn failure(status: u16, message: String) -> PushFailure {
    match status {
        401 | 403 => PushFailure::Denied { status, message },
        _ => PushFailure::Rejected { status, message },
    }
}

impl Target for ApiTarget {
    async fn apply(&mut self, body: &[u8]) -> Result<(), PushFailure> {
        let path = format!("{}?fieldManager={FIELD_MANAGER}&force=true", self.path);
        let r = self
            .client
            .send(
                Method::PATCH,
                &path,
                Some("application/apply-patch+yaml"),
                body.to_vec(),
            )
            .await
            .map_err(|e| PushFailure::Unreachable(e.to_string()))?;
        match r.status {
            _ if r.is_success() => Ok(()),
            // Server-side apply creates a missing object: a 404 is the
            // resource type itself.
            404 => Err(PushFailure::CrdMissing),
            s => Err(failure(s, r.message())),
        }
    }

    async fn delete(&mut self) -> Result<(), PushFailure> {
        let r = self
            .client
            .send(Method::DELETE, &self.path, None, Vec::new())
            .await
            .map_err(|e| PushFailure::Unreachable(e.to_string()))?;
        match r.status {
            _ if r.is_success() => Ok(()),
            404 => Ok(()),
            s => Err(failure(s, r.message())),
        }
    }
}

/// What the push has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushStatus {
    /// Successful applies.
    pub applied: u64,
    /// Failed attempts.
    pub failed: u64,
    /// The failure of the last attempt, while it stands.
    pub failing: Option<PushFailure>,
}

type Latest = Option<Arc<Vec<u8>>>;

/// The state thread's end: hands over each new object. Cheap to clone.
#[derive(Debug, Clone)]
pub struct NrtPublisher(Arc<watch::Sender<Latest>>);

/// The push task's end of the channel ([`channel`]).
#[derive(Debug)]
pub struct NrtFeed(watch::Receiver<Latest>);

/// A channel from the state thread to the push task (made before either
/// runs).
pub fn channel() -> (NrtPublisher, NrtFeed) {
    let (tx, rx) = watch::channel(None);
    (NrtPublisher(Arc::new(tx)), NrtFeed(rx))
}

impl NrtPublisher {
    /// Hand over the current object (serialized here); an object equal to
    /// the last one is not pushed again. Never waits.
    pub fn publish<O: serde::Serialize>(&self, object: &O) {
        let body = match serde_json::to_vec(object) {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "cannot serialize the NodeResourceTopology object");
                return;
            }
        };
        self.0.send_if_modified(|cur| {
            if cur.as_deref() == Some(&body) {
                return false;
            }
            *cur = Some(Arc::new(body));
            true
        });
    }
}

/// A shared view of the push's [`PushStatus`] (for the health answer).
#[derive(Debug, Clone, Default)]
pub struct PushStatusHandle(Arc<Mutex<PushStatus>>);

impl PushStatusHandle {
    /// What the push has done so far.
    pub fn get(&self) -> PushStatus {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// A health note while the last attempt failed.
    pub fn note(&self) -> Option<String> {
        self.get()
            .failing
            .map(|f| format!("kubernetes: the NodeResourceTopology object cannot be pushed: {f}"))
    }
}

/// The push task's handle: its status, and its stop.
pub struct NrtPusher {
    stop: watch::Sender<bool>,
    status: PushStatusHandle,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for NrtPusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NrtPusher")
            .field("status", &self.status.get())
            .finish_non_exhaustive()
    }
}

impl NrtPusher {
    /// Start pushing what `feed` carries to the API server of `client`
    /// (on the current Tokio runtime).
    pub fn start(client: ApiClient, settings: PushSettings, feed: NrtFeed) -> NrtPusher {
        let path = format!(
            "/apis/{GROUP_VERSION}/noderesourcetopologies/{}",
            settings.node_name
        );
        NrtPusher::start_with(ApiTarget { client, path }, settings, feed)
    }

    pub(crate) fn start_with<T: Target>(
        target: T,
        settings: PushSettings,
        feed: NrtFeed,
    ) -> NrtPusher {
        let (stop, stop_rx) = watch::channel(false);
        let status = PushStatusHandle::default();
        let task = tokio::spawn(run(target, feed.0, stop_rx, status.0.clone(), settings));
        NrtPusher {
            stop,
            status,
            task: Some(task),
        }
    }

    /// The push's status, shared.
    pub fn status_handle(&self) -> PushStatusHandle {
        self.status.clone()
    }

    /// What the push has done so far.
    pub fn status(&self) -> PushStatus {
        self.status.get()
    }

    /// A health note while the last attempt failed.
    pub fn note(&self) -> Option<String> {
        self.status.note()
    }

    /// Stop the task: a pending object gets one last apply (or the object
    /// is deleted with `delete_on_shutdown`), within [`SHUTDOWN_TIMEOUT`].
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(SHUTDOWN_TIMEOUT * 2, task).await;
        }
    }
}

impl Drop for NrtPusher {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn set_status(status: &Mutex<PushStatus>, result: &Result<(), PushFailure>) -> bool {
    let Ok(mut s) = status.lock() else {
        return false;
    };
    let was_failing = s.failing.is_some();
    match result {
        Ok(()) => {
            s.applied += 1;
            s.failing = None;
        }
        Err(f) => {
            s.failed += 1;
            s.failing = Some(f.clone());
        }
    }
    was_failing
}

async fn run<T: Target>(
    mut target: T,
    mut latest: watch::Receiver<Latest>,
    mut stop: watch::Receiver<bool>,
    status: Arc<Mutex<PushStatus>>,
    settings: PushSettings,
) {
    let mut backoff = Backoff::new(settings.retry_min, settings.retry_max);
    'push: loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break 'push,
            changed = latest.changed() => if changed.is_err() { break 'push },
        }
        loop {
            let Some(body) = latest.borrow_and_update().clone() else {
                break;
            };
            let result = target.apply(&body).await;
            let was_failing = set_status(&status, &result);
            match result {
                Ok(()) => {
                    if was_failing {
                        info!("NodeResourceTopology object pushed again");
                    } else {
                        debug!("NodeResourceTopology object pushed");
                    }
                    backoff.reset();
                    break;
                }
                Err(f) => {
                    let wait = backoff.next_wait();
                    if was_failing {
                        debug!(error = %f, ?wait, "NodeResourceTopology push failed again");
                    } else {
                        warn!(error = %f, ?wait, "NodeResourceTopology push failed; retrying");
                    }
                    tokio::select! {
                        biased;
                        _ = stop.changed() => break 'push,
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
        // Rate limit: what changes meanwhile is applied once, after.
        tokio::select! {
            biased;
            _ = stop.changed() => break 'push,
            _ = tokio::time::sleep(settings.min_interval) => {}
        }
    }
    finish(&mut target, &mut latest, &status, &settings).await;
}

async fn finish<T: Target>(
    target: &mut T,
    latest: &mut watch::Receiver<Latest>,
    status: &Mutex<PushStatus>,
    settings: &PushSettings,
) {
    if settings.delete_on_shutdown {
        match tokio::time::timeout(SHUTDOWN_TIMEOUT, target.delete()).await {
            Ok(Ok(())) => info!("NodeResourceTopology object deleted at shutdown"),
            Ok(Err(e)) => {
                warn!(error = %e, "cannot delete the NodeResourceTopology object at shutdown")
            }
            Err(_) => warn!("the NodeResourceTopology object's delete at shutdown timed out"),
        }
        return;
    }
    let pending = latest.has_changed().unwrap_or(false)
        || status.lock().map(|s| s.failing.is_some()).unwrap_or(false);
    let body = latest.borrow_and_update().clone();
    if let (true, Some(body)) = (pending, body) {
        match tokio::time::timeout(SHUTDOWN_TIMEOUT, target.apply(&body)).await {
            Ok(r) => {
                set_status(status, &r);
                if let Err(e) = r {
                    warn!(error = %e, "the NodeResourceTopology object's last push at shutdown failed");
                }
            }
            Err(_) => warn!("the NodeResourceTopology object's last push at shutdown timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use tokio::time::Instant;

    /// Records what it is sent (with the paused clock's time) and fails
    /// while `failures` holds failures.
    #[derive(Clone, Default)]
    struct Recorder {
        applied: Arc<Mutex<Vec<(Instant, serde_json::Value)>>>,
        attempts: Arc<Mutex<Vec<Instant>>>,
        failures: Arc<Mutex<VecDeque<PushFailure>>>,
        deleted: Arc<Mutex<u32>>,
    }

    impl Target for Recorder {
        async fn apply(&mut self, body: &[u8]) -> Result<(), PushFailure> {
            self.attempts.lock().unwrap().push(Instant::now());
            if let Some(f) = self.failures.lock().unwrap().pop_front() {
                return Err(f);
            }
            let v = serde_json::from_slice(body).unwrap();
            self.applied.lock().unwrap().push((Instant::now(), v));
            Ok(())
        }
        async fn delete(&mut self) -> Result<(), PushFailure> {
            *self.deleted.lock().unwrap() += 1;
            Ok(())
        }
    }

    fn settings() -> PushSettings {
        PushSettings {
            node_name: "n".into(),
            min_interval: Duration::from_millis(200),
            retry_min: Duration::from_millis(100),
            retry_max: Duration::from_millis(800),
            delete_on_shutdown: false,
        }
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }

    /// A burst of 1000 changes is at most a handful of applies, one per
    /// `min_interval`, and the last one is the latest object.
    #[tokio::test(start_paused = true)]
    async fn bursts_coalesce_and_the_latest_wins() {
        let rec = Recorder::default();
        let (tx, feed) = channel();
        let p = NrtPusher::start_with(rec.clone(), settings(), feed);
        let start = Instant::now();
        for i in 0..1000u32 {
            tx.publish(&serde_json::json!({ "n": i }));
            if i % 100 == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        settle().await;
        let applied = rec.applied.lock().unwrap().clone();
        assert!(applied.len() <= 3, "{} applies", applied.len());
        assert_eq!(applied.last().unwrap().1, serde_json::json!({ "n": 999 }));
        for w in applied.windows(2) {
            assert!(w[1].0 - w[0].0 >= Duration::from_millis(200), "rate limit");
        }
        assert!(
            applied[0].0 - start < Duration::from_millis(50),
            "the first change goes at once"
        );
        // The same object again is not pushed again.
        tx.publish(&serde_json::json!({ "n": 999 }));
        settle().await;
        assert_eq!(rec.applied.lock().unwrap().len(), applied.len());
        assert_eq!(p.status().applied, applied.len() as u64);
        p.shutdown().await;
    }

    /// While the server fails the task retries with doubling waits, the
    /// status names the failure, and the first success applies the latest
    /// object published meanwhile.
    #[tokio::test(start_paused = true)]
    async fn failures_back_off_and_catch_up() {
        let rec = Recorder::default();
        rec.failures.lock().unwrap().extend(
            std::iter::repeat_n(PushFailure::Unreachable("down".into()), 5)
                .chain([PushFailure::CrdMissing]),
        );
        let (tx, feed) = channel();
        let p = NrtPusher::start_with(rec.clone(), settings(), feed);
        tx.publish(&serde_json::json!({ "n": 1 }));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            p.status().failing,
            Some(PushFailure::Unreachable("down".into()))
        );
        assert!(p.note().unwrap().contains("cannot be pushed: down"));
        tx.publish(&serde_json::json!({ "n": 2 }));
        tokio::time::sleep(Duration::from_millis(2300)).await;
        assert!(
            p.note()
                .unwrap()
                .contains("install the NodeResourceTopology CRD"),
            "{:?}",
            p.note()
        );
        settle().await;
        let attempts = rec.attempts.lock().unwrap().clone();
        let gaps: Vec<u128> = attempts
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect();
        assert_eq!(gaps, [100, 200, 400, 800, 800, 800]);
        let applied = rec.applied.lock().unwrap().clone();
        assert_eq!(applied.len(), 1);
        assert_eq!(applied[0].1, serde_json::json!({ "n": 2 }));
        assert_eq!(p.note(), None);
        let s = p.status();
        assert_eq!((s.applied, s.failed), (1, 6));
        p.shutdown().await;
    }

    /// Publishing never waits, even while an apply hangs.
    #[tokio::test(start_paused = true)]
    async fn publish_never_waits() {
        struct Hang;
        impl Target for Hang {
            async fn apply(&mut self, _: &[u8]) -> Result<(), PushFailure> {
                std::future::pending().await
            }
            async fn delete(&mut self) -> Result<(), PushFailure> {
                Ok(())
            }
        }
        let (tx, feed) = channel();
        let p = NrtPusher::start_with(Hang, settings(), feed);
        let t = std::time::Instant::now();
        for i in 0..10_000u32 {
            tx.publish(&i);
            if i == 0 {
                tokio::task::yield_now().await;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(2));
        p.shutdown().await;
    }

    /// At shutdown the object stays (NFD's behaviour) unless
    /// `delete_on_shutdown`; a change not pushed yet gets a last apply.
    #[tokio::test(start_paused = true)]
    async fn shutdown_keeps_or_deletes() {
        let rec = Recorder::default();
        let (tx, feed) = channel();
        let p = NrtPusher::start_with(rec.clone(), settings(), feed);
        tx.publish(&1);
        tokio::time::sleep(Duration::from_millis(10)).await;
        tx.publish(&2);
        p.shutdown().await;
        let applied: Vec<_> = rec
            .applied
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.1.clone())
            .collect();
        assert_eq!(applied, [serde_json::json!(1), serde_json::json!(2)]);
        assert_eq!(*rec.deleted.lock().unwrap(), 0);

        let rec = Recorder::default();
        let (tx, feed) = channel();
        let p = NrtPusher::start_with(
            rec.clone(),
            PushSettings {
                delete_on_shutdown: true,
                ..settings()
            },
            feed,
        );
        tx.publish(&1);
        tokio::time::sleep(Duration::from_millis(10)).await;
        p.shutdown().await;
        assert_eq!(*rec.deleted.lock().unwrap(), 1);
    }
}
