//! Staying connected: reconnect with exponential backoff whenever the
//! runtime restarts or is not there yet.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::connection::{self, Progress, Registration};
use crate::error::NriError;
use crate::events::EventMask;
use crate::plugin::Plugin;
use crate::runtime_client::RuntimeClient;

/// Delays between connection attempts: `initial` after the first failed
/// attempt (or after a registered connection ends), doubling with each
/// further failure in a row up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    /// 100 ms, doubling to 5 s.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }
}

/// What [`serve_with_reconnect`] reports to its status callback.
#[derive(Debug)]
pub enum ConnectionStatus {
    /// The runtime accepted the registration; `runtime` calls it until the
    /// connection closes.
    Connected { runtime: RuntimeClient },
    /// An attempt failed or a connection ended; the next attempt is in
    /// `retry_in`.
    Disconnected { error: NriError, retry_in: Duration },
    /// Registered, but the runtime has not sent Synchronize `waited` after
    /// it (containerd 2.x holds it while a container is being stopped, its
    /// grace period included); the connection is kept and waited on until
    /// the Synchronize deadline (10 minutes), then made again.
    AwaitingSynchronize { waited: Duration },
    /// The Synchronize that was awaited came.
    Synchronized,
}

/// Keeps `handler` registered with the runtime at `socket`: connects,
/// serves until the connection ends, waits, and connects again, for ever.
/// `on_status` hears of every registration and every disconnection or failed
/// attempt. Returns only when the registration itself is invalid (that
/// cannot get better by retrying); to stop, drop the future.
pub async fn serve_with_reconnect<P: Plugin>(
    socket: &Path,
    name: &str,
    index: &str,
    events: EventMask,
    handler: Arc<P>,
    backoff: Backoff,
    mut on_status: impl FnMut(ConnectionStatus) + Send,
) -> NriError {
    let registration = match Registration::new(name, index, events) {
        Ok(r) => r,
        Err(e) => return e,
    };
    // The wait after the next failed attempt: `initial`, doubling with each
    // failure in a row, back to `initial` once a connection was registered.
    let mut wait = backoff.initial;
    // Failed attempts since the last registration (or the start): the
    // first is logged at warn level, the retries after it at debug level
    // (`/v1/health` carries the last error meanwhile).
    let mut failed_in_a_row = 0u32;
    loop {
        let mut registered = false;
        let result =
            match connection::connect(socket).await {
                Ok(stream) => connection::serve(
                    stream,
                    &registration,
                    handler.clone(),
                    |progress| match progress {
                        Progress::Registered(runtime) => {
                            registered = true;
                            info!(socket = %socket.display(), "registered with the runtime's NRI");
                            on_status(ConnectionStatus::Connected { runtime });
                        }
                        Progress::AwaitingSynchronize { waited } => {
                            on_status(ConnectionStatus::AwaitingSynchronize { waited })
                        }
                        Progress::Synchronized => on_status(ConnectionStatus::Synchronized),
                    },
                )
                .await,
                Err(e) => Err(e),
            };
        if registered {
            wait = backoff.initial;
        }
        let error = result.err().unwrap_or(NriError::Closed);
        if registered {
            failed_in_a_row = 0;
            warn!(error = %error, retry_in = ?wait, "NRI connection ended");
        } else {
            failed_in_a_row += 1;
            if failed_in_a_row == 1 {
                warn!(socket = %socket.display(), error = %error, retry_in = ?wait, "cannot register with the runtime's NRI; retrying until it can (is the runtime running with NRI enabled?)");
            } else {
                debug!(socket = %socket.display(), error = %error, retry_in = ?wait, attempts = failed_in_a_row, "cannot register with the runtime's NRI");
            }
        }
        on_status(ConnectionStatus::Disconnected {
            error,
            retry_in: wait,
        });
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(backoff.max).max(backoff.initial);
    }
}
