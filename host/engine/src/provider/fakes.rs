//! A provider fake the engine's tests share: logs what it allocates and
//! releases, and blocks where a test makes it miss its deadline.

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use topomgr_sdk::testkit::FakeProvider;
use topomgr_sdk::Allocation;

/// What a fake logs, in order.
pub(crate) type Log = Arc<Mutex<Vec<String>>>;

/// Where a [`logging`] fake waits for one message before it answers.
#[derive(Default)]
pub(crate) struct Gates {
    /// Container-scope hints for this container.
    pub(crate) hints: Option<(&'static str, Receiver<()>)>,
    /// Every allocation.
    pub(crate) allocate: Option<Receiver<()>>,
    /// Every release.
    pub(crate) release: Option<Receiver<()>>,
}

/// Allocates nothing and answers no hints; logs `allocate <container>` and
/// `release <container>` when those calls finish, each after waiting at its
/// gate, if any.
pub(crate) fn logging(log: &Log, gates: Gates) -> FakeProvider {
    let hints_gate = gates.hints.map(|(c, gate)| (c, Mutex::new(gate)));
    let allocate_gate = gates.allocate.map(Mutex::new);
    let release_gate = gates.release.map(Mutex::new);
    let (on_allocate, on_release) = (log.clone(), log.clone());
    FakeProvider::new()
        .with_hints(move |_, c| {
            if let Some((_, gate)) = hints_gate.as_ref().filter(|(name, _)| c.name == *name) {
                let _ = gate.lock().unwrap().recv();
            }
            Ok(None)
        })
        .with_allocate(move |_, c, _| {
            if let Some(gate) = &allocate_gate {
                let _ = gate.lock().unwrap().recv();
            }
            on_allocate
                .lock()
                .unwrap()
                .push(format!("allocate {}", c.name));
            Ok(Allocation::default())
        })
        .with_release(move |_, c| {
            if let Some(gate) = &release_gate {
                let _ = gate.lock().unwrap().recv();
            }
            on_release.lock().unwrap().push(format!("release {c}"));
            Ok(())
        })
}
