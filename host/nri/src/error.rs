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
    #[error("cannot connect to the NRI socket {}: {cause}; check that the runtime runs with NRI enabled and that this is its NRI socket_path", socket.display())]
    Connect {
        socket: PathBuf,
        /// The error (in the message: no source).
        cause: std::io::Error,
    },
    /// Reading or writing the socket failed.
    #[error("NRI connection failed: {0}")]
    Io(std::io::Error),
    /// The runtime sent bytes that are not NRI's multiplexed frames.
    #[error("NRI connection: {0}; closing it")]
    Frame(FrameError),
    /// The runtime answered a call with an error status.
    #[error("the runtime answered {method} with {code_name} ({code}): {message}", code_name = crate::ttrpc::Code::name(*code))]
    Rpc {
        method: &'static str,
        code: i32,
        message: String,
    },
    /// An answer of the runtime does not decode as the message it should be.
    #[error("the runtime's answer to {method} does not decode: {cause}")]
    Decode {
        method: &'static str,
        /// The error (in the message: no source).
        cause: prost::DecodeError,
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

impl From<std::io::Error> for NriError {
    fn from(e: std::io::Error) -> Self {
        NriError::Io(e)
    }
}

impl From<FrameError> for NriError {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Io(io) => NriError::Io(io),
            other => NriError::Frame(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// Each variant that wraps an error says it in its message and has no
    /// source (a report that prints the chain would say it twice).
    #[test]
    fn wrapped_errors_are_in_the_message_only() {
        let io = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        // A field key with its value cut off.
        let decode_error = || <u32 as prost::Message>::decode(&[0x08u8][..]).unwrap_err();
        let errors = [
            NriError::Connect {
                socket: PathBuf::from("/run/nri.sock"),
                cause: io(),
            },
            NriError::Io(io()),
            NriError::Frame(FrameError::TooLarge {
                conn: 3,
                len: 1 << 30,
            }),
            NriError::Decode {
                method: "Configure",
                cause: decode_error(),
            },
        ];
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "cannot connect to the NRI socket /run/nri.sock: connection refused; check that the runtime runs with NRI enabled and that this is its NRI socket_path",
                "NRI connection failed: connection refused",
                format!("NRI connection: a frame for connection 3 announces 1073741824 bytes, more than the {} a frame may carry; closing it", crate::mux::MAX_FRAME_PAYLOAD).as_str(),
                format!(
                    "the runtime's answer to Configure does not decode: {}",
                    decode_error()
                )
                .as_str(),
            ]
        );
        for e in &errors {
            assert!(e.source().is_none(), "{e} has a source");
        }
    }
}
