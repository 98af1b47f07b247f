//! [`Provider`]: the host's one view of a hint provider.
//!
//! Every provider the host drives is a plugin behind its FFI handle
//! ([`ProviderHandle`]): loaded from a `.so` by [`crate::plugin`], or built
//! in process from a [`topomgr_sdk::Provider`] value by
//! [`Provider::in_process`] (tests and benches: the same boundary adapter,
//! the same conversions and panic guard, no `dlopen`). It is called either
//! on the caller's thread or, after [`Provider::with_deadline`], on its own
//! thread with a deadline (`provider/deadline.rs`). The admission pipeline, the state
//! store, the NRT export and the daemon see only this type, so the six calls
//! of the provider contract are declared once on the host side.

mod deadline;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use topomgr_sdk::ffi::{self, ProviderHandle};
use topomgr_sdk::{
    Allocation, ContainerView, Inventory, PodView, PreferredAllocationRequest, ProviderError,
    ProviderHints, TopologyHint,
};
use tracing::warn;

use crate::daemon::metrics::Metrics;
use deadline::Deadline;
pub use deadline::PROVIDER_TIMEOUT;

/// One hint provider as the host drives it.
pub struct Provider {
    name: String,
    library: Option<PathBuf>,
    calls: Calls,
}

/// How calls reach the provider.
enum Calls {
    /// On the caller's thread.
    Direct(ProviderHandle),
    /// On the provider's own thread, each with a deadline.
    Deadline(Deadline),
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("library", &self.library)
            .field("deadline", &self.deadline())
            .finish()
    }
}

impl Provider {
    /// Provider `name` behind `handle`, loaded from `library` (if any),
    /// called on the caller's thread.
    pub fn new(name: &str, library: Option<PathBuf>, handle: ProviderHandle) -> Self {
        Provider {
            name: name.to_owned(),
            library,
            calls: Calls::Direct(handle),
        }
    }

    /// `provider` as provider `name`, behind the same boundary adapter as a
    /// plugin, without a shared library (fakes in tests and benches).
    pub fn in_process<P: topomgr_sdk::Provider>(name: &str, provider: P) -> Self {
        Provider::new(name, None, ffi::in_process(provider))
    }

    /// The provider on its own thread, every call waiting at most `timeout`
    /// and timed into `metrics` (`provider/deadline.rs`). A provider already on
    /// its thread keeps it and takes the new deadline and metrics.
    pub fn with_deadline(self, timeout: Duration, metrics: Arc<Metrics>) -> std::io::Result<Self> {
        let calls = match self.calls {
            Calls::Direct(handle) => {
                Calls::Deadline(Deadline::spawn(&self.name, handle, timeout, metrics)?)
            }
            Calls::Deadline(mut d) => {
                d.timeout = timeout;
                d.metrics = metrics;
                Calls::Deadline(d)
            }
        };
        Ok(Provider { calls, ..self })
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
    pub fn deadline(&self) -> Option<Duration> {
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

    /// The pod the next calls are about. The provider keeps it (a plugin
    /// receives it once, see [`topomgr_sdk::ffi::METHOD_SHARE_POD`]) and
    /// recognises it by address in the calls that pass `&**pod`; calls about
    /// any other pod carry their pod as usual.
    pub fn share_pod(&mut self, pod: &Arc<PodView>) {
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
        match &mut self.calls {
            Calls::Direct(h) => h.topology_hints(pod, container),
            Calls::Deadline(d) => {
                let (pod, container) = (d.shared(pod), container.clone());
                let result = d.call(
                    "topology_hints",
                    move |h| {
                        h.share_pod(&pod);
                        h.topology_hints(&pod, &container)
                    },
                    None,
                );
                if let Ok(hints) = &result {
                    d.metrics.hints(&self.name, hints);
                }
                result
            }
        }
    }

    /// Hints for the whole pod (pod scope).
    pub fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        match &mut self.calls {
            Calls::Direct(h) => h.pod_topology_hints(pod),
            Calls::Deadline(d) => {
                let pod = d.shared(pod);
                let result = d.call(
                    "pod_topology_hints",
                    move |h| {
                        h.share_pod(&pod);
                        h.pod_topology_hints(&pod)
                    },
                    None,
                );
                if let Ok(hints) = &result {
                    d.metrics.hints(&self.name, hints);
                }
                result
            }
        }
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
        match &mut self.calls {
            Calls::Direct(h) => h.allocate(pod, container, hint),
            Calls::Deadline(d) => {
                let (uid, cname) = (pod.uid.clone(), container.name.clone());
                let (shared, owned, hint) = (d.shared(pod), container.clone(), *hint);
                let name = self.name.clone();
                let result = d.call(
                    "allocate",
                    move |h| {
                        h.share_pod(&shared);
                        h.allocate(&shared, &owned, &hint)
                    },
                    Some(Box::new(move |h| {
                        if let Err(e) = h.release(&uid, &cname) {
                            warn!(provider = %name, pod = %uid, container = %cname, error = %e, "releasing a late allocation failed");
                        }
                    })),
                );
                d.metrics
                    .allocation(&self.name, pod, container, result.as_ref());
                result
            }
        }
    }

    /// Release a container's resources.
    pub fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        match &mut self.calls {
            Calls::Direct(h) => h.release(pod_uid, container),
            Calls::Deadline(d) => {
                let (uid, cname) = (pod_uid.to_owned(), container.to_owned());
                d.call("release", move |h| h.release(&uid, &cname), None)
            }
        }
    }

    /// Serialize the provider's state.
    pub fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        match &self.calls {
            Calls::Direct(h) => h.checkpoint(),
            Calls::Deadline(d) => d.call("checkpoint", |h| h.checkpoint(), None),
        }
    }

    /// Restore the provider's state.
    pub fn restore(&mut self, data: &[u8]) -> Result<(), ProviderError> {
        match &mut self.calls {
            Calls::Direct(h) => h.restore(data),
            Calls::Deadline(d) => {
                let data = data.to_vec();
                d.call("restore", move |h| h.restore(&data), None)
            }
        }
    }

    /// The device plugins' `GetPreferredAllocation` (see
    /// [`topomgr_sdk::Provider::preferred_allocation`]).
    pub fn preferred_allocation(
        &mut self,
        request: &PreferredAllocationRequest,
    ) -> Result<Vec<String>, ProviderError> {
        match &mut self.calls {
            Calls::Direct(h) => h.preferred_allocation(request),
            Calls::Deadline(d) => {
                let request = request.clone();
                d.call(
                    "preferred_allocation",
                    move |h| h.preferred_allocation(&request),
                    None,
                )
            }
        }
    }

    /// What the provider owns per NUMA node and how much is free (see
    /// [`topomgr_sdk::Provider::inventory`]).
    pub fn inventory(&mut self) -> Result<Inventory, ProviderError> {
        match &mut self.calls {
            Calls::Direct(h) => h.inventory(),
            Calls::Deadline(d) => d.call("inventory", |h| h.inventory(), None),
        }
    }
}
