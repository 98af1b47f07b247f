//! The run's signals: SIGINT, SIGTERM and SIGHUP are caught for the whole
//! run and forwarded to CMD once it runs; one that arrives before CMD
//! started stops the run (everything is released, CMD never starts).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::origin::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use tracing::{debug, info, warn};

use crate::RunError;

/// Signals forwarded to CMD.
const FORWARDED: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

#[derive(Debug, Default)]
pub(crate) struct ForwardState {
    /// CMD's pid once started.
    pub(crate) child: Option<i32>,
    /// CMD has exited (not reaped yet, or reaped): nothing more is sent.
    pub(crate) exited: bool,
    /// The first signal that arrived before CMD started.
    pub(crate) early: Option<i32>,
}

/// Catches SIGINT/SIGTERM/SIGHUP for the whole run and forwards them to
/// CMD once it runs; one that arrives before stops the run. Dropping it
/// gives the signals their previous handling back.
pub struct Signals {
    pub(crate) state: Arc<Mutex<ForwardState>>,
    handle: signal_hook::iterator::Handle,
    thread: Option<JoinHandle<()>>,
}

pub(crate) fn lock_state(m: &Mutex<ForwardState>) -> MutexGuard<'_, ForwardState> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Signals {
    /// Start catching the signals.
    pub fn install() -> Result<Self, RunError> {
        let mut signals = SignalsInfo::<WithOrigin>::new(FORWARDED).map_err(RunError::Signals)?;
        let handle = signals.handle();
        let state = Arc::new(Mutex::new(ForwardState::default()));
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("signal-forwarder".to_string())
            .spawn(move || {
                for origin in signals.forever() {
                    let sig = origin.signal;
                    let mut st = lock_state(&shared);
                    match (st.child, st.exited) {
                        (Some(pid), false) => {
                            if origin.cause == Cause::Kernel {
                                // The terminal sent it to the whole foreground
                                // process group: CMD has it already.
                                debug!(signal = sig, pid, "signal from the terminal; CMD received it too");
                                continue;
                            }
                            match Signal::try_from(sig) {
                                Ok(s) => {
                                    info!(signal = %s, pid, "forwarding signal to CMD");
                                    if let Err(e) = kill(Pid::from_raw(pid), s) {
                                        warn!(signal = %s, pid, error = %e, "cannot forward signal");
                                    }
                                }
                                Err(e) => warn!(signal = sig, error = %e, "unknown signal"),
                            }
                        }
                        (None, _) => {
                            info!(signal = sig, "signal before CMD started; the run stops");
                            st.early.get_or_insert(sig);
                        }
                        (Some(_), true) => {
                            debug!(signal = sig, "signal after CMD exited; cleaning up anyway");
                        }
                    }
                }
            })
            .map_err(RunError::ForwarderThread)?;
        Ok(Signals {
            state,
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                warn!("the signal forwarding thread panicked");
            }
        }
    }
}
