//! Errors of the plugin side of NRI.

use std::path::PathBuf;
use std::time::Duration;

use crate::mux::FrameError;

/// Why a connection to the runtime could not be made, failed, or ended a
/// call with an error.
#[derive(Debug, thiserror::Error)]
pub enum NriError {
    /// The plugin's name, index or events cannot be registered.
    #[error("invalid NRI plugin registration: {0}")]
    InvalidRegistration(String),
    /// The runtime's NRI socket could not be connected to.
    #[error("cannot connect to the NRI socket {}: {source}; check that the runtime runs with NRI enabled and that this is its NRI socket_path", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing the socket failed.
    #[error("NRI connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The runtime sent bytes that are not NRI's multiplexed frames.
    #[error("NRI connection: {0}; closing it")]
    Frame(#[source] FrameError),
    /// The runtime answered a call with an error status.
    #[error("the runtime answered {method} with {code_name} ({code}): {message}", code_name = crate::ttrpc::Code::name(*code))]
    Rpc {
        method: &'static str,
        code: i32,
        message: String,
    },
    /// An answer of the runtime does not decode as the message it should be.
    #[error("the runtime's answer to {method} does not decode: {source}")]
    Decode {
        method: &'static str,
        #[source]
        source: prost::DecodeError,
    },
    /// The runtime did not answer a call in time.
    #[error("the runtime did not answer {method} within {after:?}")]
    Timeout {
        method: &'static str,
        after: Duration,
    },
    /// The runtime closed the connection without accepting the registration.
    #[error(
        "the runtime closed the NRI connection before accepting the registration; its log says why"
    )]
    ClosedBeforeRegistration,
    /// The runtime accepted the registration but did not synchronize the
    /// plugin in time: the connection is closed and made again.
    #[error("the runtime accepted the registration but did not send Synchronize within {after:?}; reconnecting")]
    NoSynchronize { after: Duration },
    /// The connection is closed (the runtime went away or shut the plugin
    /// down); calls made through an old [`RuntimeClient`](crate::RuntimeClient)
    /// fail with this.
    #[error("the NRI connection is closed")]
    Closed,
}

impl From<FrameError> for NriError {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Io(io) => NriError::Io(io),
            other => NriError::Frame(other),
        }
    }
}
