//! Loopback ports for the servers the tests start (etcd, the API server,
//! the kubelet).
//!
//! A port is chosen by binding it, then let go for the server to bind
//! seconds later. A port of the kernel's ephemeral range
//! (`net.ipv4.ip_local_port_range`, 32768-60999 by default) can be taken
//! in between by any outgoing connection on the machine, which made an API
//! server fail with "address already in use" in CI. So ports come from
//! below that range, where only a listener that asks for the port by
//! number can take it; each call starts after the last port it gave, so
//! one process never gets the same port twice.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

use crate::HarnessError;

/// The lowest port handed out.
const FIRST: u16 = 10_000;

/// The next port to try, per process (0: not started yet).
static NEXT: AtomicU16 = AtomicU16::new(0);

/// The first port of the kernel's ephemeral range (32768 when unreadable).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .filter(|&p: &u16| p > FIRST + 1000)
        .unwrap_or(32_768)
}

/// A loopback port no one listens on now, below the ephemeral range.
pub(crate) fn free_port() -> Result<u16, HarnessError> {
    let end = ephemeral_start();
    let span = end - FIRST;
    // Processes start at different places, so that tests of parallel
    // processes rarely probe the same ports.
    let _ = NEXT.compare_exchange(
        0,
        FIRST + (std::process::id() % u32::from(span)) as u16,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let port = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + port.wrapping_sub(FIRST) % span;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(HarnessError::new(format!(
        "no free port on 127.0.0.1 between {FIRST} and {end}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let a = free_port().unwrap();
        let b = free_port().unwrap();
        assert_ne!(a, b);
        for p in [a, b] {
            assert!((FIRST..ephemeral_start()).contains(&p), "{p}");
        }
        // One that is taken is skipped.
        let held = TcpListener::bind(("127.0.0.1", NEXT.load(Ordering::Relaxed))).ok();
        let c = free_port().unwrap();
        if let Some(h) = held {
            assert_ne!(c, h.local_addr().unwrap().port());
        }
    }
}
