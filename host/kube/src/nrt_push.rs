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
//! The object is owned by the node's `Node` object (`metadata.ownerReferences`:
//! `v1`, `Node`, its name and uid), so that the API server's garbage
//! collector deletes it with the Node. NFD's topology-updater gives its
//! objects an owner the same way (`updateNodeResourceTopology` in
//! `pkg/nfd-topology-updater`: the owner's uid read from the API before an
//! update, the object written without an owner while that read fails, the
//! read tried again at the next update); its owner is its own Namespace,
//! topomgr's the Node, whose deletion is what ends the node's object. The
//! Node is read (`get nodes`) before the first apply and, while it cannot
//! be read, again at most every [`OWNER_RETRY`].
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
/// How long after a failed read of the Node (the object's owner) it is
/// read again; the object is applied without an owner meanwhile.
pub const OWNER_RETRY: Duration = Duration::from_secs(30);

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
    /// The uid of the node's `Node` object (the object's owner).
    fn node_uid(&mut self) -> impl Future<Output = Result<String, PushFailure>> + Send;
}

/// The API server as a [`Target`].
struct ApiTarget {
    client: ApiClient,
    path: String,
    node_name: String,
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

    async fn node_uid(&mut self) -> Result<String, PushFailure> {
        let path = format!("/api/v1/nodes/{}", self.node_name);
        let r = self
            .client
            .send(Method::GET, &path, None, Vec::new())
            .await
            .map_err(|e| PushFailure::Unreachable(e.to_string()))?;
        if !r.is_success() {
            return Err(failure(r.status, r.message()));
        }
        let node: serde_json::Value =
            serde_json::from_slice(&r.body).map_err(|e| PushFailure::Rejected {
                status: r.status,
                message: format!("the Node {} is not JSON: {e}", self.node_name),
            })?;
        node["metadata"]["uid"]
            .as_str()
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| PushFailure::Rejected {
                status: r.status,
                message: format!("the Node {} has no metadata.uid", self.node_name),
            })
    }
}

/// The node's `Node` object as the owner of its NodeResourceTopology
/// object: found once, then kept.
struct Owner {
    node_name: String,
    /// The `ownerReferences` entry, once the Node was read.
    reference: Option<serde_json::Value>,
    /// When the Node may be read again after a failure (`None`: now).
    next_try: Option<tokio::time::Instant>,
}

impl Owner {
    fn new(node_name: &str) -> Owner {
        Owner {
            node_name: node_name.to_owned(),
            reference: None,
            next_try: None,
        }
    }

    /// Read the Node where its reference is not known and the last failed
    /// read is [`OWNER_RETRY`] ago.
    async fn find<T: Target>(&mut self, target: &mut T) {
        if self.reference.is_some()
            || self
                .next_try
                .is_some_and(|t| tokio::time::Instant::now() < t)
        {
            return;
        }
        match target.node_uid().await {
            Ok(uid) => {
                debug!(node = %self.node_name, %uid, "the NodeResourceTopology object is owned by the Node");
                self.reference = Some(serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self.node_name,
                    "uid": uid,
                }));
            }
            Err(e) => {
                if self.next_try.is_none() {
                    warn!(node = %self.node_name, error = %e, retry = ?OWNER_RETRY,
                        "cannot read the Node that owns the NodeResourceTopology object; it is pushed without an owner until the Node can be read");
                } else {
                    debug!(node = %self.node_name, error = %e, "the Node still cannot be read");
                }
                self.next_try = Some(tokio::time::Instant::now() + OWNER_RETRY);
            }
        }
    }

    /// `body` (the object as JSON) with `metadata.ownerReferences` naming
    /// the Node, once known; as it is otherwise (and when it is not an
    /// object with `metadata`).
    fn apply_to(&self, body: &[u8]) -> Vec<u8> {
        let Some(reference) = &self.reference else {
            return body.to_vec();
        };
        let Ok(mut object) = serde_json::from_slice::<serde_json::Value>(body) else {
            return body.to_vec();
        };
        let Some(metadata) = object
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        else {
            return body.to_vec();
        };
        metadata.insert(
            "ownerReferences".to_owned(),
            serde_json::Value::Array(vec![reference.clone()]),
        );
        serde_json::to_vec(&object).unwrap_or_else(|_| body.to_vec())
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
        let node_name = settings.node_name.clone();
        NrtPusher::start_with(
            ApiTarget {
                client,
                path,
                node_name,
            },
            settings,
            feed,
        )
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
    let mut owner = Owner::new(&settings.node_name);
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
            owner.find(&mut target).await;
            let result = target.apply(&owner.apply_to(&body)).await;
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
    finish(&mut target, &mut latest, &status, &settings, &owner).await;
}

async fn finish<T: Target>(
    target: &mut T,
    latest: &mut watch::Receiver<Latest>,
    status: &Mutex<PushStatus>,
    settings: &PushSettings,
    owner: &Owner,
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
        match tokio::time::timeout(SHUTDOWN_TIMEOUT, target.apply(&owner.apply_to(&body))).await {
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
        /// The Node's uid (`None`: no such Node) and the reads of it.
        node: Arc<Mutex<Option<String>>>,
        node_reads: Arc<Mutex<Vec<Instant>>>,
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
        async fn node_uid(&mut self) -> Result<String, PushFailure> {
            self.node_reads.lock().unwrap().push(Instant::now());
            self.node
                .lock()
                .unwrap()
                .clone()
                .ok_or(PushFailure::Rejected {
                    status: 404,
                    message: "nodes \"n\" not found".into(),
                })
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

    /// The object names the Node as its owner once the Node is read; while
    /// it cannot be read the object is still applied, without an owner, and
    /// the Node is read again at most every `OWNER_RETRY`.
    #[tokio::test(start_paused = true)]
    async fn the_object_is_owned_by_its_node_once_the_node_is_read() {
        let rec = Recorder::default();
        let (tx, feed) = channel();
        let p = NrtPusher::start_with(rec.clone(), settings(), feed);
        let object = |n: u32| serde_json::json!({ "metadata": { "name": "n" }, "n": n });
        tx.publish(&object(0));
        settle().await;
        tx.publish(&object(1));
        settle().await;
        assert_eq!(
            rec.applied
                .lock()
                .unwrap()
                .iter()
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>(),
            [object(0), object(1)],
            "no Node: applied without an owner"
        );
        assert_eq!(
            rec.node_reads.lock().unwrap().len(),
            1,
            "read once per OWNER_RETRY"
        );
        *rec.node.lock().unwrap() = Some("0b3f-uid".into());
        tokio::time::sleep(OWNER_RETRY).await;
        tx.publish(&object(2));
        settle().await;
        tx.publish(&object(3));
        settle().await;
        let applied = rec.applied.lock().unwrap().clone();
        let owned = serde_json::json!([{ "apiVersion": "v1", "kind": "Node", "name": "n", "uid": "0b3f-uid" }]);
        for (_, v) in &applied[2..] {
            assert_eq!(v["metadata"]["ownerReferences"], owned, "{v}");
            assert_eq!(v["metadata"]["name"], "n");
        }
        assert_eq!(applied.len(), 4);
        assert_eq!(rec.node_reads.lock().unwrap().len(), 2, "kept once read");
        p.shutdown().await;
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
            async fn node_uid(&mut self) -> Result<String, PushFailure> {
                Ok("uid".into())
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
