//! The service manager's readiness protocol (`sd_notify(3)`, `Type=notify`).
//!
//! When `NOTIFY_SOCKET` is set (systemd starts the daemon with
//! `Type=notify`), the daemon sends `READY=1` once its state is restored
//! and every listener (the socket, and the metrics address when set) is
//! bound, so units ordered after `topomgr.service` start against a daemon
//! that answers; and `STOPPING=1` when it begins to shut down. Each message
//! carries a one-line `STATUS=`. Without `NOTIFY_SOCKET` nothing is sent. A
//! message that cannot be sent is logged, never fatal: the daemon works the
//! same under any supervisor.
//!
//! The protocol is the documented one: newline-separated assignments in one
//! datagram to the `AF_UNIX` socket that `NOTIFY_SOCKET` names, a path
//! (`/run/systemd/notify`) or, after `@`, an abstract name. (`vsock:`
//! addresses, used for virtual machines, are not supported and logged.)
//!
//! The socket is the daemon's own (no socket activation): it is created
//! only after the state is restored, with the owner, group and mode the
//! daemon checks ([`super::access`]), and removed on shutdown.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;

use tracing::{debug, warn};

/// The variable that names the service manager's socket.
pub(crate) const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// The address `value` of `NOTIFY_SOCKET` names.
fn address(value: &OsStr) -> io::Result<SocketAddr> {
    let bytes = value.as_bytes();
    match bytes.first() {
        Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..]),
        Some(b'/') => SocketAddr::from_pathname(Path::new(value)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{NOTIFY_SOCKET}={value:?} is neither an absolute path nor an abstract socket name (@NAME)"
            ),
        )),
    }
}

/// Send `assignments` (`KEY=VALUE` each) in one datagram to the socket
/// `notify_socket` names.
pub(crate) fn send_to(notify_socket: &OsStr, assignments: &[(&str, &str)]) -> io::Result<()> {
    let address = address(notify_socket)?;
    let mut message = String::new();
    for (key, value) in assignments {
        // One assignment per line: a newline in a value would start another.
        message.push_str(key);
        message.push('=');
        message.push_str(&value.replace('\n', " "));
        message.push('\n');
    }
    let socket = UnixDatagram::unbound()?;
    let sent = socket.send_to_addr(message.as_bytes(), &address)?;
    if sent == message.len() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("sent {sent} of {} bytes", message.len()),
        ))
    }
}

fn send(assignments: &[(&str, &str)]) {
    let Some(socket) = std::env::var_os(NOTIFY_SOCKET) else {
        return;
    };
    let what = assignments.first().map_or("", |(k, _)| *k);
    match send_to(&socket, assignments) {
        Ok(()) => debug!(message = what, "notified the service manager"),
        Err(e) => {
            warn!(message = what, socket = ?socket, error = %e, "cannot notify the service manager")
        }
    }
}

/// `READY=1` with a one-line `STATUS=`.
pub(crate) fn ready(status: &str) {
    send(&[("READY", "1"), ("STATUS", status)]);
}

/// `STOPPING=1`.
pub(crate) fn stopping() {
    send(&[("STOPPING", "1"), ("STATUS", "stopping")]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn received(rx: &UnixDatagram) -> String {
        rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 512];
        let n = rx.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn one_datagram_to_a_path_or_an_abstract_name() {
        let dir = std::env::temp_dir().join(format!("topomgr-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        send_to(
            path.as_os_str(),
            &[("READY", "1"), ("STATUS", "two\nlines")],
        )
        .unwrap();
        assert_eq!(received(&rx), "READY=1\nSTATUS=two lines\n");
        std::fs::remove_dir_all(&dir).unwrap();

        let name = format!("topomgr-notify-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        send_to(OsStr::new(&format!("@{name}")), &[("STOPPING", "1")]).unwrap();
        assert_eq!(received(&rx), "STOPPING=1\n");
    }

    #[test]
    fn other_addresses_are_refused_naming_the_variable() {
        for bad in ["run/notify", "vsock:2:1234", ""] {
            let e = send_to(OsStr::new(bad), &[("READY", "1")]).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("NOTIFY_SOCKET={bad:?} is neither an absolute path nor an abstract socket name (@NAME)")
            );
        }
        // Nobody listening: an error, not a hang.
        let e = send_to(OsStr::new("/nonexistent/topomgr/notify"), &[("READY", "1")]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
