//! The time the runtime gives the plugin to answer each request.
//!
//! containerd's NRI adaptation calls a plugin with a context that expires
//! after its `plugin_request_timeout` (2 s by default,
//! `DefaultPluginRequestTimeout` of containerd/nri `pkg/api/timeouts.go`);
//! ttrpc sends what is left of it with the request (`Request.timeout_nano`),
//! and NRI >= 0.7 also tells it in Configure (`request_timeout`, in
//! milliseconds; containerd/nri f86d982 "let plugin know configured
//! timeouts"). An answer that comes later is lost: the adaptation treats
//! the expired context as fatal (`isFatalError`: `context.DeadlineExceeded`),
//! closes the plugin and goes on without it, creating the container
//! unadjusted. An error answered in time fails only the one operation
//! (the kubelet retries the creation) and keeps the plugin.
//!
//! So each request is answered by its *answer deadline*: the time it was
//! read, plus the runtime's timeout for it (`timeout_nano`; without one, the
//! timeout Configure named; without that, 2 s), less a margin for the
//! reply's way back ([`margin`]). A handler still running then is answered
//! with an error naming the budget, and is left to finish (requests are
//! served in order; its late result is dropped). A handler that changes
//! state reads the deadline ([`answer_deadline`]) to refuse work it can no
//! longer answer for, or to undo work done too late.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// containerd/nri's `DefaultPluginRequestTimeout`: what the runtime gives a
/// request when neither the request nor Configure says.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

tokio::task_local! {
    static DEADLINE: Instant;
}

/// Kept for the reply's way back: a tenth of the runtime's timeout, at least
/// 5 ms and at most 250 ms (never more than the timeout itself).
pub(crate) fn margin(timeout: Duration) -> Duration {
    (timeout / 10)
        .clamp(Duration::from_millis(5), Duration::from_millis(250))
        .min(timeout)
}

/// The runtime's timeout for one request: what the request carries
/// (`timeout_nano`, > 0), else what Configure named, else
/// [`DEFAULT_REQUEST_TIMEOUT`].
pub(crate) fn request_timeout(timeout_nano: i64, configured: Option<Duration>) -> Duration {
    match u64::try_from(timeout_nano) {
        Ok(n) if n > 0 => Duration::from_nanos(n),
        _ => configured.unwrap_or(DEFAULT_REQUEST_TIMEOUT),
    }
}

/// How long a handler has for a request of the runtime's `timeout`.
pub fn answer_budget(timeout: Duration) -> Duration {
    timeout - margin(timeout)
}

/// Runs `work` with `deadline` as its [`answer_deadline`], as the
/// connection runs each handler (for driving a [`crate::Plugin`] in tests).
pub fn with_answer_deadline<F: Future>(
    deadline: Instant,
    work: F,
) -> impl Future<Output = F::Output> {
    DEADLINE.scope(deadline, work)
}

/// The time by which the request being handled must be answered; `None`
/// outside a handler.
pub fn answer_deadline() -> Option<Instant> {
    DEADLINE.try_with(|d| *d).ok()
}

/// Whether the request being handled is past its answer deadline (its
/// answer was already sent as an error); false outside a handler.
pub fn past_answer_deadline() -> bool {
    answer_deadline().is_some_and(|d| Instant::now() >= d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_requests_own_timeout_comes_first() {
        let ms = Duration::from_millis;
        assert_eq!(request_timeout(1_500_000_000, Some(ms(3000))), ms(1500));
        assert_eq!(request_timeout(0, Some(ms(3000))), ms(3000));
        assert_eq!(request_timeout(0, None), DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(request_timeout(-7, None), DEFAULT_REQUEST_TIMEOUT);
    }

    #[test]
    fn the_margin_is_a_tenth_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(answer_budget(ms(2000)), ms(1800));
        assert_eq!(answer_budget(ms(10_000)), ms(9750));
        assert_eq!(answer_budget(ms(20)), ms(15));
        assert_eq!(answer_budget(ms(3)), ms(0));
    }

    #[tokio::test]
    async fn the_deadline_is_seen_inside_its_scope_only() {
        assert_eq!(answer_deadline(), None);
        assert!(!past_answer_deadline());
        let d = Instant::now() + Duration::from_secs(5);
        let seen =
            with_answer_deadline(d, async { (answer_deadline(), past_answer_deadline()) }).await;
        assert_eq!(seen, (Some(d), false));
        let late = with_answer_deadline(Instant::now(), async { past_answer_deadline() }).await;
        assert!(late);
    }
}
