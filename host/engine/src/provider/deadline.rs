//! A provider on its own OS thread, called with a deadline.
//!
//! `Deadline` owns the thread a [`ProviderHandle`] lives on: every call
//! is a job sent there, and the caller waits at most the configured
//! deadline. A call that misses it fails with reason [`PROVIDER_TIMEOUT`]
//! (so that admission fails and is rolled back), the provider is marked
//! *stuck*, and every later call fails at once with the same reason until
//! the stuck call returns, except `release`, which is queued behind the
//! stuck call (`Deadline::queue`) so that a rollback or a release while the
//! provider is stuck still frees what it holds. An `allocate` that completes
//! after its caller gave up is released again on the provider's thread
//! (`Undo`), with the provider still marked stuck until that is done, so a
//! late answer never leaks resources and never blocks a caller.
//!
//! Every call's duration and every missed deadline is reported to the
//! provider's [`ProviderObserver`], when it has one; [`super::LoadedProvider`]
//! reports the answers.
//!
//! The pod crosses to the provider's thread as the `Arc<PodView>` the caller
//! shared ([`super::LoadedProvider::share_pod`]; an admission calls every provider
//! once or twice per container, with the same pod): recognising it costs a
//! pointer comparison (`Deadline::shared`), where copying or even
//! comparing a pod of many containers on every call would make an admission
//! cost quadratic time in its containers.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use topomgr_sdk::ffi::ProviderHandle;
use topomgr_sdk::{PodView, ProviderError};
use tracing::{error, info, warn};

use super::ProviderObserver;

/// Reason of a provider call that missed its deadline or hit a stuck provider.
pub const PROVIDER_TIMEOUT: &str = "ProviderTimeout";

/// A call that its caller gave up on.
#[derive(Debug, Clone)]
struct Abandoned {
    call: &'static str,
    since: Instant,
}

type Job = Box<dyn FnOnce(&mut ProviderHandle, &Mutex<Option<Abandoned>>) + Send>;

/// Undoes a call that succeeded after its caller gave up.
pub(super) type Undo = Box<dyn FnOnce(&mut ProviderHandle) + Send>;

/// The caller's side of one provider's thread.
pub(super) struct Deadline {
    name: String,
    pub(super) last_pod: Option<Arc<PodView>>,
    pub(super) timeout: Duration,
    jobs: mpsc::Sender<Job>,
    abandoned: Arc<Mutex<Option<Abandoned>>>,
    /// Releases queued behind a stuck call since the provider's state was
    /// last read ([`super::LoadedProvider::unsaved_releases`]).
    unsaved_releases: Mutex<Vec<(String, String)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Deadline {
    /// Move `handle` onto its own thread; calls wait at most `timeout`.
    pub(super) fn spawn(
        name: &str,
        handle: ProviderHandle,
        timeout: Duration,
    ) -> std::io::Result<Deadline> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let abandoned = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&abandoned);
        thread::Builder::new()
            .name(format!("provider-{name}"))
            .spawn(move || {
                let mut handle = handle;
                while let Ok(job) = rx.recv() {
                    job(&mut handle, &slot);
                }
            })?;
        Ok(Deadline {
            name: name.to_owned(),
            last_pod: None,
            timeout,
            jobs,
            abandoned,
            unsaved_releases: Mutex::new(Vec::new()),
        })
    }

    /// `pod` to send to the provider's thread: the shared one when `pod`
    /// is that very object (compared by address, a constant cost).
    pub(super) fn shared(&mut self, pod: &PodView) -> Arc<PodView> {
        match &self.last_pod {
            Some(last) if std::ptr::eq(&**last, pod) => Arc::clone(last),
            _ => {
                let p = Arc::new(pod.clone());
                self.last_pod = Some(Arc::clone(&p));
                p
            }
        }
    }

    /// Whether a call that timed out is still running in the provider.
    pub(super) fn is_stuck(&self) -> bool {
        lock(&self.abandoned).is_some()
    }

    fn timeout_error(&self, call: &str) -> ProviderError {
        ProviderError::new(
            PROVIDER_TIMEOUT,
            format!(
                "provider {:?} did not answer {call} within {} ms; it is not called again until that call returns",
                self.name,
                self.timeout.as_millis()
            ),
        )
    }

    /// Release (`uid`, `container`) behind the stuck call ([`Deadline::queue`])
    /// and remember it until the provider's state is next read.
    pub(super) fn queue_release(&self, uid: String, container: String) {
        lock(&self.unsaved_releases).push((uid.clone(), container.clone()));
        self.queue("release", move |h| h.release(&uid, &container));
    }

    /// The provider's state as its thread has it now: every queued release
    /// ran before this call, so none of them is unsaved after it.
    pub(super) fn checkpoint(
        &self,
        observer: Option<&dyn ProviderObserver>,
    ) -> Result<Vec<u8>, ProviderError> {
        let bytes = self.call("checkpoint", observer, |h| h.checkpoint(), None)?;
        lock(&self.unsaved_releases).clear();
        Ok(bytes)
    }

    /// The releases queued since the provider's state was last read.
    pub(super) fn unsaved_releases(&self) -> Vec<(String, String)> {
        lock(&self.unsaved_releases).clone()
    }

    /// Queue `f` on the provider's thread without waiting for it: it runs
    /// after every call sent before it, the stuck one included (the thread
    /// runs its jobs in order). A failure is logged there.
    fn queue(
        &self,
        call: &'static str,
        f: impl FnOnce(&mut ProviderHandle) -> Result<(), ProviderError> + Send + 'static,
    ) {
        let name = self.name.clone();
        let job: Job = Box::new(move |p, _| match f(p) {
            Ok(()) => info!(provider = %name, call, "queued call done"),
            Err(e) => warn!(provider = %name, call, error = %e, "queued call failed"),
        });
        if self.jobs.send(job).is_err() {
            error!(provider = %self.name, call, "provider thread is gone; queued call dropped");
        } else {
            info!(provider = %self.name, call, "queued behind a call that missed its deadline");
        }
    }

    /// Run `f` on the provider's thread with the deadline, reporting to
    /// `observer`. `undo` runs on that thread when the call succeeds after
    /// its caller gave up.
    pub(super) fn call<T: Send + 'static>(
        &self,
        call: &'static str,
        observer: Option<&dyn ProviderObserver>,
        f: impl FnOnce(&mut ProviderHandle) -> Result<T, ProviderError> + Send + 'static,
        undo: Option<Undo>,
    ) -> Result<T, ProviderError> {
        if let Some(a) = lock(&self.abandoned).as_ref() {
            return Err(ProviderError::new(
                PROVIDER_TIMEOUT,
                format!(
                    "provider {:?} is still running a {} call that timed out {} ms ago; it is not called until that call returns",
                    self.name,
                    a.call,
                    a.since.elapsed().as_millis()
                ),
            ));
        }
        let (tx, rx) = mpsc::sync_channel::<Result<T, ProviderError>>(1);
        let name = self.name.clone();
        let job: Job = Box::new(move |p, slot| {
            let result = f(p);
            let a = {
                // Under the lock the caller either still waits (and gets the
                // result) or has given up (and the call stays abandoned).
                let guard = lock(slot);
                match guard.as_ref() {
                    Some(a) => a.clone(),
                    None => {
                        let _ = tx.send(result);
                        return;
                    }
                }
            };
            warn!(provider = %name, call = a.call, late_ms = a.since.elapsed().as_millis() as u64, "provider answered after its deadline");
            // The undo is a provider call without a deadline: it runs with
            // the lock released and the provider still marked stuck, so
            // callers keep failing fast instead of waiting for it.
            if result.is_ok() {
                if let Some(undo) = undo {
                    undo(p);
                    info!(provider = %name, call = a.call, "late allocation released");
                }
            }
            *lock(slot) = None;
            info!(provider = %name, "provider usable again");
        });
        let start = Instant::now();
        if self.jobs.send(job).is_err() {
            error!(provider = %self.name, "provider thread is gone");
            return Err(ProviderError::new(
                "ProviderUnavailable",
                format!("provider {:?} is not running (its thread ended)", self.name),
            ));
        }
        let result = match rx.recv_timeout(self.timeout) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                let mut slot = lock(&self.abandoned);
                // The answer may have arrived between the timeout and the lock.
                match rx.try_recv() {
                    Ok(r) => r,
                    Err(_) => {
                        *slot = Some(Abandoned {
                            call,
                            since: start + self.timeout,
                        });
                        drop(slot);
                        warn!(provider = %self.name, call, timeout_ms = self.timeout.as_millis() as u64, "provider call timed out");
                        if let Some(o) = observer {
                            o.provider_timeout(&self.name, call);
                        }
                        Err(self.timeout_error(call))
                    }
                }
            }
            Err(RecvTimeoutError::Disconnected) => Err(ProviderError::new(
                "ProviderUnavailable",
                format!("provider {:?} dropped a {call} call", self.name),
            )),
        };
        if let Some(o) = observer {
            o.provider_call(&self.name, call, start.elapsed().as_secs_f64());
        }
        result
    }
}
