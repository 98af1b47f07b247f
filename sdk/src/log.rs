//! Forwarding a plugin's `tracing` events to the host's log.
//!
//! Every cdylib carries its own copy of `tracing`'s globals, so events a
//! provider emits would otherwise go nowhere. At construction the host hands
//! the plugin a logging callback; [`install`] sets a small
//! [`ForwardingSubscriber`] as the plugin's global default, which renders
//! each event (message plus `key=value` fields) and passes it to the
//! callback. Spans are accepted but not forwarded.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Where rendered events go: `(level, target, message)`.
pub type LogSink = Box<dyn Fn(Level, &str, &str) + Send + Sync + 'static>;

/// A `tracing` subscriber that renders events and hands them to a [`LogSink`].
pub struct ForwardingSubscriber {
    sink: LogSink,
    max: LevelFilter,
    next_span: AtomicU64,
}

impl ForwardingSubscriber {
    /// A subscriber passing events up to `max` (`None` = nothing) to `sink`.
    pub fn new(max: Option<Level>, sink: LogSink) -> Self {
        ForwardingSubscriber {
            sink,
            max: max.map_or(LevelFilter::OFF, LevelFilter::from_level),
            next_span: AtomicU64::new(1),
        }
    }
}

/// Renders an event's fields: the `message` first, then ` key=value` pairs.
#[derive(Default)]
struct Render {
    message: String,
    fields: String,
}

impl Visit for Render {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            // Writing into a String cannot fail.
            let _ = write!(self.fields, " {}={:?}", field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={:?}", field.name(), value);
        }
    }
}

impl Subscriber for ForwardingSubscriber {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.max >= *metadata.level()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max)
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        // Ids must be non-zero; the counter starts at 1 and a u64 never wraps here.
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed).max(1))
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut r = Render::default();
        event.record(&mut r);
        r.message.push_str(&r.fields);
        let meta = event.metadata();
        (self.sink)(*meta.level(), meta.target(), &r.message);
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// The most verbose level the installed forwarder passes on, as
/// [`level_code`] encodes it.
static INSTALLED_MAX: AtomicU8 = AtomicU8::new(0);

/// Encodes an optional level: 0 = off, 1 = error .. 5 = trace.
fn level_code(max: Option<Level>) -> u8 {
    match max {
        None => 0,
        Some(Level::ERROR) => 1,
        Some(Level::WARN) => 2,
        Some(Level::INFO) => 3,
        Some(Level::DEBUG) => 4,
        Some(Level::TRACE) => 5,
    }
}

fn filter_of(code: u8) -> LevelFilter {
    match code {
        0 => LevelFilter::OFF,
        1 => LevelFilter::ERROR,
        2 => LevelFilter::WARN,
        3 => LevelFilter::INFO,
        4 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// The global subscriber [`install`] sets: forwards to the sink given by the
/// first call, at the level given by the latest call.
struct Installed(ForwardingSubscriber);

impl Subscriber for Installed {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        filter_of(INSTALLED_MAX.load(Ordering::Relaxed)) >= *metadata.level()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(filter_of(INSTALLED_MAX.load(Ordering::Relaxed)))
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.0.new_span(span)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        self.0.event(event)
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// Installs the forwarding subscriber as this plugin's global default.
///
/// A library loaded for several provider entries shares one set of globals:
/// the first call's sink stays (the host passes the same callback every
/// time), and every call updates the level to the host's current one.
pub fn install(max: Option<Level>, sink: LogSink) {
    INSTALLED_MAX.store(level_code(max), Ordering::Relaxed);
    // An error only means a default is already set, which is what we want.
    let _ = tracing::subscriber::set_global_default(Installed(ForwardingSubscriber::new(
        Some(Level::TRACE),
        sink,
    )));
    tracing::callsite::rebuild_interest_cache();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn renders_message_and_fields_and_filters_levels() {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let s2 = Arc::clone(&seen);
        let sub = ForwardingSubscriber::new(
            Some(Level::INFO),
            Box::new(move |l, t, m| {
                if let Ok(mut v) = s2.lock() {
                    v.push(format!("{l} {t} {m}"));
                }
            }),
        );
        tracing::subscriber::with_default(sub, || {
            tracing::info!(target: "vendor", widgets = 3, node = "n0", "picked");
            tracing::debug!(target: "vendor", "dropped");
            tracing::warn!(target: "vendor", "careful");
        });
        let got = seen.lock().map(|v| v.clone()).unwrap_or_default();
        assert_eq!(
            got,
            [
                "INFO vendor picked widgets=3 node=\"n0\"",
                "WARN vendor careful"
            ]
        );
    }
}
