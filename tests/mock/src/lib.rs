//! `topomgr-mock-provider`: a hint provider whose every answer is scripted
//! from its `[providers.NAME.config]` table, for integration tests.
//!
//! # Config keys (all optional; unknown keys are an error)
//!
//! ```toml
//! [providers.mock.config]
//! # Container-scope hints: resource -> "none" (no preference), a list of
//! # hints, or a compact object. A node the machine lacks is passed through
//! # unchanged (the host must refuse it: the "bad mask" case).
//! hints = { "example.com/foo" = [{ affinity = [0], preferred = true }],
//!           "example.com/bar" = "none",
//!           "example.com/baz" = { minimal = [[0], [1, 2]], preferred_width = 1 } }
//! pod_hints = { ... }          # pod-scope hints, same form; default: `hints`
//! no_map = false               # answer "no map at all" for both scopes
//! fail_hints = "message"       # both hint calls return this error
//! allocation = { cpus = "0-1", exclusive = false, mems = [0],
//!                devices = { "example.com/foo" = ["foo-0"] }, env = { FOO = "0" } }
//!                              # (`devices`: only to a container that requests
//!                              # the resource, as scripted whatever the count)
//! fail_allocate = "message"    # allocate returns this error ...
//! fail_allocate_for = ["app"]  # ... only for these containers (default: all)
//! fail_reason = "UnexpectedAdmissionError"   # reason of the scripted errors
//! panic_in = "allocate"        # new | hints | pod_hints | allocate | release | checkpoint | restore
//!                              # | preferred | inventory
//! sleep_ms = 0                 # delay of every hint and allocate call
//! log_message = "text"         # logged at info level from `new`
//! preferred = ["dev-1", "dev-0"]   # GetPreferredAllocation answer (default: no preference)
//! inventory = { resources = { "example.com/foo" = { total = { capacity = 2, allocatable = 2,
//!     available = 1 }, zones = [{ numa = 0, capacity = 2, allocatable = 2, available = 1 }] } } }
//! reconciled = { conflicts = [{ pod_uid = "u", container = "app", resource = "example.com/foo",
//!     missing = "device foo-1 is gone", ids = ["foo-1"] }],
//!     moves = [{ pod_uid = "u", container = "app", from = { resource = "example.com/foo", id = "a" },
//!     to = { resource = "example.com/foo", id = "b" } }] }   # what `restore` reports
//! ```
//!
//! # Checkpoint
//!
//! The mock records every successful `allocate` and every `release` as
//! `"allocate <pod uid> <container>"` / `"release <pod uid> <container>"`;
//! `checkpoint()` returns `{"calls": [...]}` (JSON), so tests can observe
//! rollback. `restore` accepts the same JSON and replaces the record.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use topomgr_sdk::{
    Allocation, ContainerView, CpuSet, HintSet, Inventory, NumaMask, PodView,
    PreferredAllocationRequest, Provider, ProviderContext, ProviderError, ProviderHints,
    Reconciled, TopologyHint,
};

/// Methods `panic_in` may name.
const PANIC_POINTS: &[&str] = &[
    "new",
    "hints",
    "pod_hints",
    "allocate",
    "release",
    "checkpoint",
    "restore",
    "preferred",
    "inventory",
];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MockConfig {
    #[serde(default)]
    hints: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pod_hints: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    no_map: bool,
    #[serde(default)]
    fail_hints: Option<String>,
    #[serde(default)]
    allocation: Option<MockAllocation>,
    #[serde(default)]
    fail_allocate: Option<String>,
    #[serde(default)]
    fail_allocate_for: Vec<String>,
    #[serde(default)]
    fail_reason: Option<String>,
    #[serde(default)]
    panic_in: Option<String>,
    #[serde(default)]
    sleep_ms: u64,
    #[serde(default)]
    log_message: Option<String>,
    #[serde(default)]
    preferred: Vec<String>,
    #[serde(default)]
    inventory: Option<Inventory>,
    #[serde(default)]
    reconciled: Reconciled,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MockAllocation {
    #[serde(default)]
    cpus: String,
    #[serde(default)]
    exclusive: bool,
    #[serde(default)]
    mems: Vec<u32>,
    #[serde(default)]
    devices: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    calls: Vec<String>,
}

/// The scripted provider.
pub struct MockProvider {
    hints: ProviderHints,
    pod_hints: ProviderHints,
    fail_hints: Option<String>,
    allocation: Allocation,
    fail_allocate: Option<String>,
    fail_allocate_for: Vec<String>,
    fail_reason: String,
    panic_in: Option<String>,
    sleep: Duration,
    calls: Vec<String>,
    preferred: Vec<String>,
    inventory: Inventory,
    reconciled: Reconciled,
}

fn config_error(key: &str, message: impl std::fmt::Display) -> ProviderError {
    ProviderError::config(format!("mock config key `{key}`: {message}"))
}

fn parse_hints(
    key: &str,
    table: &BTreeMap<String, serde_json::Value>,
) -> Result<BTreeMap<String, Option<HintSet>>, ProviderError> {
    let mut out = BTreeMap::new();
    for (resource, v) in table {
        let full = format!("{key}.\"{resource}\"");
        let set = match v {
            serde_json::Value::String(s) if s == "none" => None,
            serde_json::Value::String(s) => {
                return Err(config_error(
                    &full,
                    format!(
                    "\"{s}\" is not \"none\"; give \"none\", a list of hints or a compact object"
                ),
                ))
            }
            other => Some(
                serde_json::from_value::<HintSet>(other.clone()).map_err(|e| {
                    config_error(
                        &full,
                        format!(
                            "expected \"none\", a list of {{affinity, preferred}} hints or \
                         {{minimal, within?, preferred_width}}: {e}"
                        ),
                    )
                })?,
            ),
        };
        out.insert(resource.clone(), set);
    }
    Ok(out)
}

impl MockProvider {
    fn maybe_panic(&self, point: &str) {
        if self.panic_in.as_deref() == Some(point) {
            panic!("mock provider scripted to panic in {point}");
        }
    }

    fn scripted(&self, message: &str) -> ProviderError {
        ProviderError::new(self.fail_reason.clone(), message.to_owned())
    }

    fn sleep(&self) {
        if !self.sleep.is_zero() {
            std::thread::sleep(self.sleep);
        }
    }
}

impl Provider for MockProvider {
    fn new(ctx: &ProviderContext<'_>) -> Result<Self, ProviderError> {
        let cfg: MockConfig = ctx
            .config
            .parse()
            .map_err(|e| ProviderError::config(format!("mock config: {}", e.message)))?;
        if let Some(p) = &cfg.panic_in {
            if !PANIC_POINTS.contains(&p.as_str()) {
                return Err(config_error(
                    "panic_in",
                    format!("\"{p}\" is not one of {}", PANIC_POINTS.join(", ")),
                ));
            }
            if p == "new" {
                panic!("mock provider scripted to panic in new");
            }
        }
        let hints = if cfg.no_map {
            None
        } else {
            Some(parse_hints("hints", &cfg.hints)?)
        };
        let pod_hints = match (&cfg.pod_hints, cfg.no_map) {
            (_, true) => None,
            (Some(t), false) => Some(parse_hints("pod_hints", t)?),
            (None, false) => hints.clone(),
        };
        let allocation = match cfg.allocation {
            None => Allocation::default(),
            Some(a) => {
                let mut alloc = Allocation::default()
                    .with_cpus(
                        CpuSet::parse(&a.cpus).map_err(|e| config_error("allocation.cpus", e))?,
                        a.exclusive,
                    )
                    .with_mems(
                        NumaMask::from_nodes(a.mems)
                            .map_err(|e| config_error("allocation.mems", e))?,
                    );
                alloc.devices = a.devices;
                alloc.env = a.env;
                alloc
            }
        };
        if let Some(msg) = &cfg.log_message {
            tracing::info!(nodes = ctx.machine.numa_nodes.len(), "{msg}");
        }
        Ok(MockProvider {
            hints,
            pod_hints,
            fail_hints: cfg.fail_hints,
            allocation,
            fail_allocate: cfg.fail_allocate,
            fail_allocate_for: cfg.fail_allocate_for,
            fail_reason: cfg
                .fail_reason
                .unwrap_or_else(|| "UnexpectedAdmissionError".to_owned()),
            panic_in: cfg.panic_in,
            sleep: Duration::from_millis(cfg.sleep_ms),
            calls: Vec::new(),
            preferred: cfg.preferred,
            inventory: cfg.inventory.unwrap_or_default(),
            reconciled: cfg.reconciled,
        })
    }

    fn topology_hints(
        &mut self,
        _pod: &PodView,
        _container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        self.maybe_panic("hints");
        self.sleep();
        if let Some(m) = &self.fail_hints {
            return Err(self.scripted(m));
        }
        Ok(self.hints.clone())
    }

    fn pod_topology_hints(&mut self, _pod: &PodView) -> Result<ProviderHints, ProviderError> {
        self.maybe_panic("pod_hints");
        self.sleep();
        if let Some(m) = &self.fail_hints {
            return Err(self.scripted(m));
        }
        Ok(self.pod_hints.clone())
    }

    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        _hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        self.maybe_panic("allocate");
        self.sleep();
        if let Some(m) = &self.fail_allocate {
            if self.fail_allocate_for.is_empty() || self.fail_allocate_for.contains(&container.name)
            {
                return Err(self.scripted(m));
            }
        }
        self.calls
            .push(format!("allocate {} {}", pod.uid, container.name));
        let mut a = self.allocation.clone();
        a.devices.retain(|r, _| container.request(r) > 0);
        Ok(a)
    }

    fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        self.maybe_panic("release");
        self.calls.push(format!("release {pod_uid} {container}"));
        Ok(())
    }

    fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        self.maybe_panic("checkpoint");
        serde_json::to_vec(&Record {
            calls: self.calls.clone(),
        })
        .map_err(|e| {
            ProviderError::new("CheckpointError", format!("encoding the mock record: {e}"))
        })
    }

    fn restore(&mut self, data: &[u8]) -> Result<Reconciled, ProviderError> {
        self.maybe_panic("restore");
        let r: Record = serde_json::from_slice(data).map_err(|e| {
            ProviderError::new(
                "InvalidCheckpoint",
                format!("mock checkpoint is not {{\"calls\": [..]}}: {e}"),
            )
        })?;
        self.calls = r.calls;
        Ok(self.reconciled.clone())
    }

    fn preferred_allocation(
        &mut self,
        _request: &PreferredAllocationRequest,
    ) -> Result<Vec<String>, ProviderError> {
        self.maybe_panic("preferred");
        Ok(self.preferred.clone())
    }

    fn inventory(&self) -> Result<Inventory, ProviderError> {
        self.maybe_panic("inventory");
        Ok(self.inventory.clone())
    }
}

topomgr_sdk::export_provider!(MockProvider);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use topomgr_sdk::testkit;

    fn build(config: serde_json::Value) -> Result<MockProvider, ProviderError> {
        testkit::new_provider::<MockProvider>(&testkit::machine(2, 2), config)
    }

    #[test]
    fn scripted_hints_all_forms() {
        let mut p = build(json!({
            "hints": {
                "a": [{"affinity": [0], "preferred": true}],
                "b": "none",
                "c": {"minimal": [[1]], "preferred_width": 1},
                "d": []
            },
            "pod_hints": {"a": "none"}
        }))
        .unwrap();
        let pod = testkit::guaranteed_pod("x", &[]);
        let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
        testkit::assert_hints(&h, "a", &[0, 1], Some(&["0:true"]));
        testkit::assert_hints(&h, "b", &[0, 1], None);
        testkit::assert_hints(&h, "c", &[0, 1], Some(&["1:true", "0-1:false"]));
        testkit::assert_hints(&h, "d", &[0, 1], Some(&[]));
        let ph = p.pod_topology_hints(&pod).unwrap();
        assert_eq!(ph, Some(BTreeMap::from([("a".to_owned(), None)])));
    }

    #[test]
    fn no_map_and_failures_and_record() {
        let mut p = build(json!({
            "no_map": true,
            "fail_allocate": "no room",
            "fail_allocate_for": ["side"],
            "allocation": {"cpus": "0-1", "mems": [1], "env": {"K": "V"}}
        }))
        .unwrap();
        let pod = testkit::guaranteed_pod("x", &[]);
        assert_eq!(p.topology_hints(&pod, &pod.containers[0]).unwrap(), None);
        let a = p
            .allocate(&pod, &pod.containers[0], &TopologyHint::ANY)
            .unwrap();
        assert_eq!(a.cpus.to_string(), "0-1");
        assert_eq!(a.mems.to_string(), "1");
        let side = testkit::container("side", &[]);
        assert_eq!(
            p.allocate(&pod, &side, &TopologyHint::ANY).unwrap_err(),
            ProviderError::new("UnexpectedAdmissionError", "no room")
        );
        p.release("x-uid", "app").unwrap();
        let cp = p.checkpoint().unwrap();
        assert_eq!(
            String::from_utf8(cp).unwrap(),
            r#"{"calls":["allocate x-uid app","release x-uid app"]}"#
        );
    }

    #[test]
    fn restore_answers_the_scripted_report() {
        let report = json!({"conflicts": [{"pod_uid": "u", "container": "app",
            "resource": "example.com/foo", "missing": "device foo-1 is gone", "ids": ["foo-1"]}]});
        let mut p = build(json!({ "reconciled": report })).unwrap();
        let r = p.restore(br#"{"calls": []}"#).unwrap();
        assert_eq!(r.conflicts.len(), 1);
        assert_eq!(
            r.conflicts[0].to_string(),
            "container app of pod u, example.com/foo: device foo-1 is gone"
        );
        assert!(build(json!({}))
            .unwrap()
            .restore(br#"{"calls": []}"#)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn config_errors_name_the_key() {
        let msg = |v| build(v).err().map(|e| e.to_string());
        assert_eq!(
            msg(json!({"colour": 1})).as_deref(),
            Some(
                "InvalidConfig: mock config: unknown field `colour`, expected one of `hints`, `pod_hints`, \
                 `no_map`, `fail_hints`, `allocation`, `fail_allocate`, `fail_allocate_for`, `fail_reason`, \
                 `panic_in`, `sleep_ms`, `log_message`, `preferred`, `inventory`, `reconciled`"
            )
        );
        assert_eq!(
            msg(json!({"panic_in": "lunch"})).as_deref(),
            Some(
                "InvalidConfig: mock config key `panic_in`: \"lunch\" is not one of new, hints, pod_hints, \
                 allocate, release, checkpoint, restore, preferred, inventory"
            )
        );
        assert_eq!(
            msg(json!({"hints": {"x": "all"}})).as_deref(),
            Some(
                "InvalidConfig: mock config key `hints.\"x\"`: \"all\" is not \"none\"; give \"none\", a list \
                 of hints or a compact object"
            )
        );
        assert_eq!(
            msg(json!({"allocation": {"cpus": "3-1"}})).as_deref(),
            Some("InvalidConfig: mock config key `allocation.cpus`: invalid id list \"3-1\": range 3-1 is reversed")
        );
    }
}
