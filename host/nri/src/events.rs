//! The set of events a plugin subscribes to in its Configure answer.

use std::fmt;

use crate::api::Event;

/// A set of [`Event`]s. On the wire, event `e` is bit `e - 1` of an `int32`
/// (upstream `EventMask`); the runtime refuses bits beyond the last event.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventMask(i32);

/// Every event that can be subscribed, in wire order.
const ALL: [Event; 11] = [
    Event::RunPodSandbox,
    Event::StopPodSandbox,
    Event::RemovePodSandbox,
    Event::CreateContainer,
    Event::PostCreateContainer,
    Event::StartContainer,
    Event::PostStartContainer,
    Event::UpdateContainer,
    Event::PostUpdateContainer,
    Event::StopContainer,
    Event::RemoveContainer,
];

impl EventMask {
    /// No event.
    pub const fn empty() -> Self {
        EventMask(0)
    }

    /// Every event NRI v1alpha1 defines.
    pub fn all() -> Self {
        ALL.into_iter().collect()
    }

    /// This set with `event` added (`Event::Unknown` adds nothing).
    pub fn with(self, event: Event) -> Self {
        match event {
            Event::Unknown => self,
            e => EventMask(self.0 | (1 << (e as i32 - 1))),
        }
    }

    /// Whether `event` is in the set.
    pub fn contains(self, event: Event) -> bool {
        event != Event::Unknown && self.0 & (1 << (event as i32 - 1)) != 0
    }

    /// The wire value.
    pub(crate) fn bits(self) -> i32 {
        self.0
    }

    /// Whether the set holds no event.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl FromIterator<Event> for EventMask {
    fn from_iter<I: IntoIterator<Item = Event>>(iter: I) -> Self {
        iter.into_iter().fold(EventMask::empty(), EventMask::with)
    }
}

impl fmt::Debug for EventMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(ALL.iter().filter(|e| self.contains(**e)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_upstream_numbering() {
        assert_eq!(EventMask::empty().with(Event::RunPodSandbox).bits(), 0b1);
        assert_eq!(
            EventMask::empty().with(Event::CreateContainer).bits(),
            0b1000
        );
        assert_eq!(
            EventMask::empty().with(Event::RemoveContainer).bits(),
            1 << 10
        );
        // upstream ValidEvents = (1 << (LAST - 1)) - 1 with LAST = 12
        assert_eq!(EventMask::all().bits(), (1 << 11) - 1);
        assert_eq!(EventMask::empty().with(Event::Unknown), EventMask::empty());
    }

    #[test]
    fn contains_only_what_was_added() {
        let m: EventMask = [Event::CreateContainer, Event::StopContainer]
            .into_iter()
            .collect();
        assert!(m.contains(Event::CreateContainer));
        assert!(m.contains(Event::StopContainer));
        assert!(!m.contains(Event::StartContainer));
        assert!(!m.contains(Event::Unknown));
        assert_eq!(format!("{m:?}"), "{CreateContainer, StopContainer}");
    }
}
