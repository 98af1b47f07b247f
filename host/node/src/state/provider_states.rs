//! What the state layer keeps of the providers besides the providers
//! themselves: the saved state of those that do not hold it (a configured
//! provider that refused it, *held*; one the config no longer has,
//! *absent*) with the releases they missed, and which providers changed
//! since their state was last saved.
//!
//! A held or absent provider's saved bytes are written back unchanged and
//! the releases it misses are remembered, in order, so that a restore where
//! it can take its state again replays them. A live provider has changed
//! when it was given a call that may change its state
//! ([`LoadedProvider::state_changes`]) since its state was last saved; only
//! changed providers' states go into a journal record.

use std::collections::{BTreeMap, BTreeSet};

use topomgr_engine::admission::Admitter;
use topomgr_engine::provider::LoadedProvider;

/// (pod uid, container) releases a provider has not seen yet, in order.
pub(crate) type PendingReleases = Vec<(String, String)>;

/// The saved state of a provider that does not hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    /// Why it is kept: the provider's refusal, or that it is not configured.
    pub reason: String,
    /// Its saved state, as it was.
    pub saved: Vec<u8>,
    /// (pod uid, container) released since, in order.
    pub pending_releases: PendingReleases,
}

/// One provider's part of the state to save.
#[derive(Clone, Copy)]
pub(crate) enum ProviderPart<'a> {
    /// A live provider: ask it for its state.
    Live(&'a LoadedProvider),
    /// A held or absent provider: its saved bytes and what it missed.
    Kept(&'a Kept),
}

/// The state layer's book of the providers (see the module documentation).
#[derive(Debug)]
pub(crate) struct ProviderStates {
    /// Configured providers that refused their saved state, by name.
    held: BTreeMap<String, Kept>,
    /// Providers of the saved state that are not configured, by name.
    absent: BTreeMap<String, Kept>,
    /// Live providers: their [`LoadedProvider::state_changes`] when their
    /// state was last saved (or restored); missing: changed.
    saved_at: BTreeMap<String, u64>,
    /// Held or absent providers that missed releases since the last save.
    kept_changed: BTreeSet<String>,
}

impl ProviderStates {
    /// The book of `admitter`'s providers as they are: none held or absent,
    /// each one's state as saved.
    pub(crate) fn new(admitter: &Admitter) -> ProviderStates {
        let mut states = ProviderStates {
            held: BTreeMap::new(),
            absent: BTreeMap::new(),
            saved_at: BTreeMap::new(),
            kept_changed: BTreeSet::new(),
        };
        states.saved_all(admitter);
        states
    }

    /// Forget every held and absent provider (before a restore installs
    /// them again).
    pub(crate) fn reset(&mut self, admitter: &mut Admitter) {
        admitter.clear_holds();
        self.held.clear();
        self.absent.clear();
        self.kept_changed.clear();
    }

    /// Hold configured provider `name`, which refused its `saved` state
    /// (`reason`), with the releases it missed.
    pub(crate) fn hold(&mut self, admitter: &mut Admitter, name: &str, kept: Kept) {
        admitter.hold(name, kept.reason.clone());
        self.held.insert(name.to_owned(), kept);
    }

    /// Keep the saved state of provider `name`, which is not configured:
    /// it is written back unchanged, and releases are remembered for it.
    pub(crate) fn keep_absent(&mut self, name: &str, kept: Kept) {
        self.absent.insert(name.to_owned(), kept);
    }

    /// Remember that the containers of pod `uid` (in release order) were
    /// released, for every held and absent provider.
    pub(crate) fn missed_release(&mut self, uid: &str, containers: &[String]) {
        for (name, kept) in self.held.iter_mut().chain(self.absent.iter_mut()) {
            for c in containers {
                kept.pending_releases.push((uid.to_owned(), c.clone()));
            }
            self.kept_changed.insert(name.clone());
        }
    }

    /// Each provider's part of the state to save: the configured ones in
    /// call order, then those only the saved state knows.
    pub(crate) fn parts<'a>(&'a self, admitter: &'a Admitter) -> Vec<(&'a str, ProviderPart<'a>)> {
        let configured = admitter.providers().iter().map(|p| {
            let part = match self.held.get(p.name()) {
                Some(kept) => ProviderPart::Kept(kept),
                None => ProviderPart::Live(p),
            };
            (p.name(), part)
        });
        let absent = self
            .absent
            .iter()
            .map(|(n, kept)| (n.as_str(), ProviderPart::Kept(kept)));
        configured.chain(absent).collect()
    }

    /// The providers whose state changed since it was last saved, by name;
    /// they count as saved from now on (see [`ProviderStates::keep_changed`]).
    pub(crate) fn take_changed(&mut self, admitter: &Admitter) -> Vec<String> {
        let mut out = Vec::new();
        for p in admitter.providers() {
            if self.held.contains_key(p.name()) {
                continue;
            }
            let now = p.state_changes();
            if self.saved_at.insert(p.name().to_owned(), now) != Some(now) {
                out.push(p.name().to_owned());
            }
        }
        out.extend(std::mem::take(&mut self.kept_changed));
        out
    }

    /// Put `names` back as changed (their state could not be saved yet).
    pub(crate) fn keep_changed(&mut self, names: &[String]) {
        for n in names {
            if self.held.contains_key(n) || self.absent.contains_key(n) {
                self.kept_changed.insert(n.clone());
            } else {
                self.saved_at.remove(n);
            }
        }
    }

    /// Take every provider's state as saved now (after a whole snapshot).
    pub(crate) fn saved_all(&mut self, admitter: &Admitter) {
        for p in admitter.providers() {
            self.saved_at.insert(p.name().to_owned(), p.state_changes());
        }
        self.kept_changed.clear();
    }
}
