//! Answering within the runtime's request budget.
//!
//! The connection (`topomgr_nri`, module `budget`) answers every request
//! by its answer deadline: the runtime's request timeout (the ttrpc
//! deadline; Configure's `request_timeout`; containerd's default 2 s) less
//! a margin; a handler still running then is answered with an error, which
//! fails the one container's creation (the kubelet retries it) where a late
//! answer would make containerd close the plugin and create the container
//! unadjusted. Here the face makes its state agree with that answer:
//!
//! - a CreateContainer already past its deadline is not admitted;
//! - one whose admission completed past its deadline is released again
//!   (its answer was an error, so the runtime does not create it as
//!   placed).
//!
//! The deadline travels with the request to the state thread
//! (`NewContainer::deadline`), which checks it when it takes the request
//! (queued behind other work: nothing is admitted) and after the admission
//! (released again within the same request, before the commit). Only an
//! answer that the commit itself made late is released by a second
//! request (`ContainerCommand::Remove`).
//!
//! The provider deadline (`[daemon] provider_timeout_ms`, 10 s by default)
//! is not shortened for NRI answers: it is one per provider, shared by
//! every face, and a provider that misses it is marked stuck for all of
//! them. Instead, when it exceeds the runtime's answer budget, Configure
//! logs a warning and `/v1/health` carries a note ([`provider_note`]): a
//! slow provider then shows as topomgr failing the creation for want of
//! time, not as `ProviderTimeout`; set `provider_timeout_ms` below the
//! budget (or raise containerd's `plugin_request_timeout`).

use std::time::Duration;

use topomgr_nri::api::ConfigureRequest;
use topomgr_nri::PluginError;

/// The runtime's request timeout as Configure tells it (NRI >= 0.7, in
/// milliseconds), or containerd's default when it does not (NRI 0.6.1,
/// containerd 1.7).
pub(super) fn request_timeout(request: &ConfigureRequest) -> (Duration, bool) {
    match u64::try_from(request.request_timeout) {
        Ok(ms) if ms > 0 => (Duration::from_millis(ms), true),
        _ => (topomgr_nri::DEFAULT_REQUEST_TIMEOUT, false),
    }
}

/// The health note when one provider call may take longer than the
/// runtime gives an answer; `None` when it fits.
pub(super) fn provider_note(provider: Duration, request: &ConfigureRequest) -> Option<String> {
    let (timeout, told) = request_timeout(request);
    let budget = topomgr_nri::answer_budget(timeout);
    (provider > budget).then(|| {
        format!(
            "nri: [daemon] provider_timeout_ms = {} exceeds the runtime's request budget of {} ms (its request timeout of {} ms{}, less a margin for the reply): a provider that takes longer fails the container's creation with \"topomgr could not answer CreateContainer within the runtime's request timeout\" instead of ProviderTimeout; set provider_timeout_ms below {} (or raise containerd's plugin_request_timeout)",
            provider.as_millis(),
            budget.as_millis(),
            timeout.as_millis(),
            if told { "" } else { ", containerd's default: the runtime did not tell it" },
            budget.as_millis(),
        )
    })
}

/// The error of a CreateContainer past its answer deadline `what`
/// (`before its admission`, `after its admission`; the runtime already has
/// an error answer; this is what the face logs and returns).
pub(super) fn late_error(name: &str, what: &str) -> PluginError {
    PluginError::new(format!(
        "topomgr: container {name} is past the runtime's request deadline {what}; it is not placed (the runtime retries the creation)"
    ))
}

/// [`late_error`] when the request being handled is past its deadline.
pub(super) fn too_late(name: &str, what: &str) -> Option<PluginError> {
    topomgr_nri::past_answer_deadline().then(|| late_error(name, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configure(request_timeout: i64) -> ConfigureRequest {
        ConfigureRequest {
            request_timeout,
            ..Default::default()
        }
    }

    #[test]
    fn a_provider_deadline_beyond_the_budget_is_noted() {
        let ten = Duration::from_secs(10);
        let note = provider_note(ten, &configure(2000)).unwrap();
        assert!(
            note.starts_with("nri: [daemon] provider_timeout_ms = 10000 exceeds the runtime's request budget of 1800 ms (its request timeout of 2000 ms, less"),
            "{note}"
        );
        assert!(
            note.contains("set provider_timeout_ms below 1800"),
            "{note}"
        );
        // containerd 1.7 (NRI 0.6.1) does not tell: its default is assumed.
        let note = provider_note(ten, &configure(0)).unwrap();
        assert!(note.contains("containerd's default"), "{note}");
        // Within the budget: no note.
        assert_eq!(
            provider_note(Duration::from_millis(1500), &configure(2000)),
            None
        );
        assert_eq!(provider_note(ten, &configure(30_000)), None);
    }
}
