//! [`LoadedProvider`]: the host's one view of a hint provider.
//!
//! Every provider the host drives is a plugin behind its FFI handle
//! ([`ProviderHandle`]): loaded from a `.so` by `topomgr_node::setup::plugin`, or built
//! in process from a [`topomgr_sdk::Provider`] value by
//! [`LoadedProvider::in_process`] (tests and benches: the same boundary adapter,
//! the same conversions and panic guard, no `dlopen`). It is called either
//! on the caller's thread or, after [`LoadedProvider::with_deadline`], on its own
//! thread with a deadline (`provider/deadline.rs`). The admission pipeline,
//! the state store, the NRT export and the daemon see only this type, so the
//! six calls of the provider contract are declared once on the host side.
//!
//! What the calls did (durations, deadlines missed, hints and allocations
//! given) is reported to a [`ProviderObserver`] when one is set
//! ([`LoadedProvider::with_observer`]: the daemon's metrics); one-shot commands
//! set none.

mod deadline;
#[cfg(test)]
pub(crate) mod fakes;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use topomgr_sdk::ffi::{self, ProviderHandle};
use topomgr_sdk::{
    Allocation, AssignedDeviceHints, AssignedDevicesRequest, ContainerView, DeviceIdentities,
    Inventory, PodView, PreferredAllocationRequest, ProviderError, ProviderHints, TopologyHint,
};
use tracing::warn;

use deadline::Deadline;
pub use deadline::PROVIDER_TIMEOUT;

/// What a [`LoadedProvider`]'s calls report, in both calling modes (on the
/// caller's thread and on the provider's own thread): the daemon's metrics
/// implement it.
pub trait ProviderObserver: Send + Sync {
    /// Hints `provider` gave (`topology_hints` or `pod_topology_hints`).
    fn hints(&self, provider: &str, hints: &ProviderHints);

    /// One `allocate` call of `provider` and its outcome.
    fn allocation(
        &self,
        provider: &str,
        pod: &PodView,
        container: &ContainerView,
        outcome: Result<&Allocation, &ProviderError>,
    );

    /// One call's duration. A call refused at once (the provider is stuck
    /// in an earlier call, or its thread is gone) reached no provider and
    /// is not reported; nor is a release queued behind a stuck call.
    fn provider_call(&self, provider: &str, call: &str, seconds: f64);

    /// One call that missed its deadline.
    fn provider_timeout(&self, provider: &str, call: &str);
}

/// One hint provider as the host drives it.
pub struct LoadedProvider {
    name: String,
    library: Option<PathBuf>,
    calls: Calls,
    observer: Option<Arc<dyn ProviderObserver>>,
    /// Calls that may have changed the provider's state so far.
    state_changes: u64,
}

/// `f`, a call on the caller's thread, timed into `observer` when there is one.
fn timed<T>(
    observer: Option<&dyn ProviderObserver>,
    provider: &str,
    call: &str,
    f: impl FnOnce() -> T,
) -> T {
    let Some(o) = observer else { return f() };
    let start = Instant::now();
    let result = f();
    o.provider_call(provider, call, start.elapsed().as_secs_f64());
    result
}

/// How calls reach the provider.
enum Calls {
    /// On the caller's thread.
    Direct(ProviderHandle),
    /// On the provider's own thread, each with a deadline.
    Deadline(Deadline),
}

impl std::fmt::Debug for LoadedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("library", &self.library)
            .field("deadline", &self.deadline())
            .finish()
    }
}

impl LoadedProvider {
    /// Provider `name` behind `handle`, loaded from `library` (if any),
    /// called on the caller's thread.
    pub fn new(name: &str, library: Option<PathBuf>, handle: ProviderHandle) -> Self {
        LoadedProvider {
            name: name.to_owned(),
            library,
            calls: Calls::Direct(handle),
            observer: None,
            state_changes: 0,
        }
    }

    /// `provider` as provider `name`, behind the same boundary adapter as a
    /// plugin, without a shared library (fakes in tests and benches).
    pub fn in_process<P: topomgr_sdk::Provider>(name: &str, provider: P) -> Self {
        LoadedProvider::new(name, None, ffi::in_process(provider))
    }

    /// The provider on its own thread, every call waiting at most `timeout`
    /// (`provider/deadline.rs`). A provider already on its thread keeps it
    /// and takes the new deadline.
    pub fn with_deadline(self, timeout: Duration) -> std::io::Result<Self> {
        let calls = match self.calls {
            Calls::Direct(handle) => Calls::Deadline(Deadline::spawn(&self.name, handle, timeout)?),
            Calls::Deadline(mut d) => {
                d.timeout = timeout;
                Calls::Deadline(d)
            }
        };
        Ok(LoadedProvider { calls, ..self })
    }

    /// The provider reporting its calls to `observer` (replacing any other).
    pub fn with_observer(self, observer: Arc<dyn ProviderObserver>) -> Self {
        LoadedProvider {
            observer: Some(observer),
            ..self
        }
    }

    /// The provider's name (its `[providers.NAME]` key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The library file it was loaded from (canonical path); `None` for an
    /// in-process provider.
    pub fn library(&self) -> Option<&Path> {
        self.library.as_deref()
    }

    /// The deadline of every call, when the provider runs on its own thread.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        match &self.calls {
            Calls::Direct(_) => None,
            Calls::Deadline(d) => Some(d.timeout),
        }
    }

    /// Whether a call that missed its deadline is still running.
    pub fn is_stuck(&self) -> bool {
        match &self.calls {
            Calls::Direct(_) => false,
            Calls::Deadline(d) => d.is_stuck(),
        }
    }

    /// How many calls that may change the provider's state (`allocate`,
    /// `release`, `restore`) it has been given: its state is as last saved
    /// while this count is as it was then.
    pub fn state_changes(&self) -> u64 {
        self.state_changes
    }

    /// The pod the next calls are about. The provider keeps it (a plugin
    /// receives it once, see [`topomgr_sdk::ffi::METHOD_SHARE_POD`]) and
    /// recognises it by address in the calls that pass `&**pod`; calls about
    /// any other pod carry their pod as usual.
    pub(crate) fn share_pod(&mut self, pod: &Arc<PodView>) {
        match &mut self.calls {
            Calls::Direct(h) => h.share_pod(pod),
            Calls::Deadline(d) => d.last_pod = Some(Arc::clone(pod)),
        }
    }

    /// Hints for one container (container scope).
    pub fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        let observer = self.observer.as_deref();
        let result = match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "topology_hints", || {
                h.topology_hints(pod, container)
            }),
            Calls::Deadline(d) => {
                let (pod, container) = (d.shared(pod), container.clone());
                d.call(
                    "topology_hints",
                    observer,
                    move |h| {
                        h.share_pod(&pod);
                        h.topology_hints(&pod, &container)
                    },
                    None,
                )
            }
        };
        if let (Some(o), Ok(hints)) = (observer, &result) {
            o.hints(&self.name, hints);
        }
        result
    }

    /// Hints for the whole pod (pod scope).
    pub fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        let observer = self.observer.as_deref();
        let result = match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "pod_topology_hints", || {
                h.pod_topology_hints(pod)
            }),
            Calls::Deadline(d) => {
                let pod = d.shared(pod);
                d.call(
                    "pod_topology_hints",
                    observer,
                    move |h| {
                        h.share_pod(&pod);
                        h.pod_topology_hints(&pod)
                    },
                    None,
                )
            }
        };
        if let (Some(o), Ok(hints)) = (observer, &result) {
            o.hints(&self.name, hints);
        }
        result
    }

    /// Reserve resources for a container honouring the merged hint. On its
    /// own thread, an allocation that succeeds after its caller gave up is
    /// released there again.
    pub fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        self.state_changes += 1;
        let observer = self.observer.as_deref();
        let result = match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "allocate", || {
                h.allocate(pod, container, hint)
            }),
            Calls::Deadline(d) => {
                let (uid, cname) = (pod.uid.clone(), container.name.clone());
                let (shared, owned, hint) = (d.shared(pod), container.clone(), *hint);
                let name = self.name.clone();
                d.call(
                    "allocate",
                    observer,
                    move |h| {
                        h.share_pod(&shared);
                        h.allocate(&shared, &owned, &hint)
                    },
                    Some(Box::new(move |h| {
                        if let Err(e) = h.release(&uid, &cname) {
                            warn!(provider = %name, pod = %uid, container = %cname, error = %e, "releasing a late allocation failed");
                        }
                    })),
                )
            }
        };
        if let Some(o) = observer {
            o.allocation(&self.name, pod, container, result.as_ref());
        }
        result
    }

    /// Release a container's resources. On its own thread, while a call
    /// that missed its deadline still runs, the release is queued behind it
    /// (and answered `Ok` now): the provider frees the resources as soon as
    /// it returns. Until then they are neither in the ledger nor offered by
    /// the provider, so nothing is handed out twice. Its saved state cannot
    /// be read meanwhile, so the store records these releases
    /// ([`LoadedProvider::unsaved_releases`]) and a restore replays them on the
    /// state saved before.
    pub fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        self.state_changes += 1;
        let observer = self.observer.as_deref();
        match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "release", || {
                h.release(pod_uid, container)
            }),
            Calls::Deadline(d) => {
                let (uid, cname) = (pod_uid.to_owned(), container.to_owned());
                if d.is_stuck() {
                    d.queue_release(uid, cname);
                    return Ok(());
                }
                d.call("release", observer, move |h| h.release(&uid, &cname), None)
            }
        }
    }

    /// Serialize the provider's state.
    pub fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        let observer = self.observer.as_deref();
        match &self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "checkpoint", || h.checkpoint()),
            Calls::Deadline(d) => d.checkpoint(observer),
        }
    }

    /// The releases queued behind a call that missed its deadline since
    /// the provider's state was last read: what a state saved before lacks.
    pub fn unsaved_releases(&self) -> Vec<(String, String)> {
        match &self.calls {
            Calls::Direct(_) => Vec::new(),
            Calls::Deadline(d) => d.unsaved_releases(),
        }
    }

    /// Restore the provider's state, reconciled with the machine and config
    /// it was built with (see [`topomgr_sdk::Provider::restore`]). Every
    /// conflict and move of the report is logged at warn level.
    pub fn restore(&mut self, data: &[u8]) -> Result<topomgr_sdk::Reconciled, ProviderError> {
        self.state_changes += 1;
        let observer = self.observer.as_deref();
        let report = match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "restore", || h.restore(data)),
            Calls::Deadline(d) => {
                let data = data.to_vec();
                d.call("restore", observer, move |h| h.restore(&data), None)
            }
        }?;
        for c in &report.conflicts {
            warn!(provider = %self.name, pod = %c.pod_uid, container = %c.container, resource = %c.resource,
                ids = %c.ids.join(","), "restored assignment misses {}", c.missing);
        }
        for m in &report.moves {
            warn!(provider = %self.name, pod = %m.pod_uid, container = %m.container,
                "restored assignment moved: {} is now {}", m.from, m.to);
        }
        Ok(report)
    }

    /// The device plugins' `GetPreferredAllocation` (see
    /// [`topomgr_sdk::Provider::preferred_allocation`]).
    pub fn preferred_allocation(
        &mut self,
        request: &PreferredAllocationRequest,
    ) -> Result<Vec<String>, ProviderError> {
        let observer = self.observer.as_deref();
        match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "preferred_allocation", || {
                h.preferred_allocation(request)
            }),
            Calls::Deadline(d) => {
                let request = request.clone();
                d.call(
                    "preferred_allocation",
                    observer,
                    move |h| h.preferred_allocation(&request),
                    None,
                )
            }
        }
    }

    /// What the provider owns per NUMA node and how much is free (see
    /// [`topomgr_sdk::Provider::inventory`]).
    pub fn inventory(&mut self) -> Result<Inventory, ProviderError> {
        let observer = self.observer.as_deref();
        match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "inventory", || h.inventory()),
            Calls::Deadline(d) => d.call("inventory", observer, |h| h.inventory(), None),
        }
    }

    /// Every device the provider serves with what it physically is (see
    /// [`topomgr_sdk::Provider::device_identities`]); `None` from a
    /// provider built before the call.
    pub fn device_identities(&mut self) -> Result<Option<DeviceIdentities>, ProviderError> {
        let observer = self.observer.as_deref();
        match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "device_identities", || {
                h.device_identities()
            }),
            Calls::Deadline(d) => d.call(
                "device_identities",
                observer,
                |h| h.device_identities(),
                None,
            ),
        }
    }

    /// The hints of devices a container already holds from outside
    /// topomgr (see [`topomgr_sdk::Provider::assigned_device_hints`]); a
    /// provider built before the call knows none.
    pub fn assigned_device_hints(
        &mut self,
        request: &AssignedDevicesRequest,
    ) -> Result<AssignedDeviceHints, ProviderError> {
        let observer = self.observer.as_deref();
        match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "assigned_device_hints", || {
                h.assigned_device_hints(request)
            }),
            Calls::Deadline(d) => {
                let request = request.clone();
                d.call(
                    "assigned_device_hints",
                    observer,
                    move |h| h.assigned_device_hints(&request),
                    None,
                )
            }
        }
    }
}

impl LoadedProvider {
    /// Resize a container it allocated for in place (see
    /// [`topomgr_sdk::Provider::resize`]): the new allocation, `None` when
    /// the provider does not resize.
    pub fn resize(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        current: &Allocation,
        hint: &TopologyHint,
    ) -> Result<Option<Allocation>, ProviderError> {
        self.state_changes += 1;
        let observer = self.observer.as_deref();
        match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "resize", || {
                h.resize(pod, container, current, hint)
            }),
            Calls::Deadline(d) => {
                let (pod, container, current, hint) =
                    (pod.clone(), container.clone(), current.clone(), *hint);
                d.call(
                    "resize",
                    observer,
                    move |h| h.resize(&pod, &container, &current, &hint),
                    None,
                )
            }
        }
    }

    /// CPUs not to hand out exclusively until the next call (see
    /// [`topomgr_sdk::Provider::exclude_cpus`]): whether the provider
    /// excludes them (a provider that hands out no CPUs, or one built
    /// before the call, ignores them).
    pub fn exclude_cpus(&mut self, cpus: &topomgr_sdk::CpuSet) -> Result<bool, ProviderError> {
        let observer = self.observer.as_deref();
        match &mut self.calls {
            Calls::Direct(h) => timed(observer, &self.name, "exclude_cpus", || {
                h.exclude_cpus(cpus)
            }),
            Calls::Deadline(d) => {
                let cpus = cpus.clone();
                d.call(
                    "exclude_cpus",
                    observer,
                    move |h| h.exclude_cpus(&cpus),
                    None,
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use topomgr_sdk::testkit;

    use super::fakes::{self, Log};
    use super::*;

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "waited too long for {what}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A late allocation is released on the provider's thread while the
    /// provider stays marked stuck: callers fail fast during the undo
    /// (they used to wait for it) and it is usable again after.
    #[test]
    fn a_late_allocation_is_undone_without_blocking_callers() {
        let log = Log::default();
        let (open_allocate, allocate_gate) = mpsc::channel();
        let (open_release, release_gate) = mpsc::channel();
        let mut p = LoadedProvider::in_process(
            "gated",
            fakes::logging(
                &log,
                fakes::Gates {
                    allocate: Some(allocate_gate),
                    release: Some(release_gate),
                    ..Default::default()
                },
            ),
        )
        .with_deadline(Duration::from_millis(100))
        .unwrap();
        let pod = testkit::guaranteed_pod("late", &[("cpu", 1000)]);
        let err = p
            .allocate(&pod, &pod.containers[0], &TopologyHint::ANY)
            .unwrap_err();
        assert_eq!(err.reason, PROVIDER_TIMEOUT);
        assert!(p.is_stuck());
        // The late answer arrives; its undo (a release) now waits.
        open_allocate.send(()).unwrap();
        wait_until("the late allocation", || log.lock().unwrap().len() == 1);
        // Callers are answered at once while the undo runs.
        let (tx, rx) = mpsc::channel();
        let probe = std::thread::spawn(move || {
            let stuck = p.is_stuck();
            let err = p.release("other", "side");
            tx.send((stuck, err.is_ok())).unwrap();
            p
        });
        let (stuck, queued) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("a caller waited for the undo");
        assert!(
            stuck,
            "usable again before the late allocation was released"
        );
        assert!(queued);
        open_release.send(()).unwrap();
        open_release.send(()).unwrap();
        let p = probe.join().unwrap();
        wait_until("the undo and the queued release", || {
            !p.is_stuck() && log.lock().unwrap().len() == 3
        });
        assert_eq!(
            *log.lock().unwrap(),
            ["allocate app", "release app", "release side"]
        );
    }
}
