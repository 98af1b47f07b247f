//! `numa_widgets`: a complete example device provider for topomgr, built on
//! the SDK's device toolkit.
//!
//! It manages a made-up device, `example.com/widget`, of which every NUMA
//! node has `widgets_per_node` (ids `widget-<node>-<i>`). The toolkit
//! answers hints, allocation, init-container reuse, release, checkpoints and
//! the inventory exactly as the kubelet's Device Manager; the provider only
//! lists its widgets and adds two hooks:
//!
//! * `preferred_allocation` (the device plugins' `GetPreferredAllocation`):
//!   the required widgets first, then widgets of the nodes with the most
//!   candidates, so an allocation spans as few nodes as possible;
//! * `environment`: `WIDGET_DEVICES=<comma-separated ids>`.
//!
//! Config (`[providers.widgets.config]`):
//!
//! ```toml
//! widgets_per_node = 2                 # required, 1..=1024
//! resource = "example.com/widget"      # optional
//! ```
//!
//! Built as a cdylib by the workspace member `examples/numa-widgets`: a plain
//! `cargo build --workspace` gives `target/debug/libnuma_widgets.so` (or
//! `target/release/...`), beside the `topomgr` binary. A vendor's crate
//! needs `crate-type = ["cdylib"]` and a dependency on `topomgr-sdk`, nothing
//! else: this file compiles as it is in such a crate.

use std::collections::BTreeMap;

use topomgr_sdk::devices::{Device, DeviceHooks, DevicePlugin, Devices};
use topomgr_sdk::{tracing, ProviderContext, ProviderError};

/// The largest `widgets_per_node` accepted.
const MAX_WIDGETS_PER_NODE: u32 = 1024;

topomgr_sdk::provider_config! {
    /// The provider's config table (unknown keys are refused).
    #[derive(Debug)]
    struct Config {
        widgets_per_node: u32,
        #[serde(default = "default_resource")]
        resource: String,
    }
}

fn default_resource() -> String {
    "example.com/widget".to_owned()
}

/// The widget plugin: everything else is the toolkit's.
pub struct NumaWidgets;

impl DevicePlugin for NumaWidgets {
    fn new(ctx: &ProviderContext<'_>) -> Result<(Self, Devices), ProviderError> {
        let cfg: Config = ctx.config.parse()?;
        if cfg.widgets_per_node == 0 || cfg.widgets_per_node > MAX_WIDGETS_PER_NODE {
            return Err(ProviderError::config(format!(
                "widgets_per_node = {} is out of range; set it to a value from 1 to \
                 {MAX_WIDGETS_PER_NODE}",
                cfg.widgets_per_node
            )));
        }
        if cfg.resource.is_empty() {
            return Err(ProviderError::config(
                "resource is empty; set it to a name like \"example.com/widget\"",
            ));
        }
        let widgets = ctx
            .machine
            .numa_ids()
            .into_iter()
            .flat_map(|node| {
                (0..cfg.widgets_per_node)
                    .map(move |i| Device::new(format!("widget-{node}-{i}"), Some(node)))
            })
            .collect();
        tracing::info!(resource = %cfg.resource, widgets_per_node = cfg.widgets_per_node,
            nodes = ctx.machine.numa_nodes.len(), "numa_widgets ready");
        Ok((NumaWidgets, Devices::new().resource(cfg.resource, widgets)))
    }
}

impl DeviceHooks for NumaWidgets {
    fn preferred_allocation(
        &mut self,
        _resource: &str,
        available: &[&Device],
        must_include: &[&Device],
        size: usize,
    ) -> Result<Vec<String>, ProviderError> {
        let mut per_node: BTreeMap<_, usize> = BTreeMap::new();
        for d in available {
            *per_node.entry(d.numa).or_default() += 1;
        }
        let mut rest: Vec<&&Device> = available
            .iter()
            .filter(|d| !must_include.iter().any(|m| m.id == d.id))
            .collect();
        // Fullest node first; the provider's order within a node.
        rest.sort_by_key(|d| std::cmp::Reverse(per_node[&d.numa]));
        Ok(must_include
            .iter()
            .chain(rest)
            .take(size)
            .map(|d| d.id.clone())
            .collect())
    }

    fn environment(
        &self,
        _resource: &str,
        devices: &[&Device],
    ) -> Result<BTreeMap<String, String>, ProviderError> {
        let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
        Ok(BTreeMap::from([(
            "WIDGET_DEVICES".to_owned(),
            ids.join(","),
        )]))
    }
}

topomgr_sdk::export_device_plugin!(NumaWidgets);

#[cfg(test)]
mod tests {
    use super::*;
    use topomgr_sdk::serde_json::json;
    use topomgr_sdk::{testkit, HintSet, PreferredAllocationRequest};

    const W: &str = "example.com/widget";

    fn provider(nodes: u32, per_node: u32) -> testkit::Loaded {
        let m = testkit::machine(nodes, 2);
        testkit::load::<topomgr_sdk::devices::DeviceProvider<NumaWidgets>>(
            &m,
            json!({ "widgets_per_node": per_node }),
        )
        .unwrap_or_else(|e| panic!("provider: {e}"))
    }

    #[test]
    fn hints_like_the_device_manager() {
        let mut p = provider(2, 2);
        let pod = testkit::guaranteed_pod("a", &[(W, 2)]);
        let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
        testkit::assert_hints(&h, W, &[0, 1], Some(&["0:true", "1:true", "0-1:false"]));
        let pod3 = testkit::guaranteed_pod("b", &[(W, 3)]);
        let h = p.topology_hints(&pod3, &pod3.containers[0]).unwrap();
        testkit::assert_hints(&h, W, &[0, 1], Some(&["0-1:true"]));
        let pod5 = testkit::guaranteed_pod("c", &[(W, 5)]);
        let h = p.topology_hints(&pod5, &pod5.containers[0]).unwrap();
        testkit::assert_hints(&h, W, &[0, 1], Some(&[]));
        let none = testkit::guaranteed_pod("d", &[("cpu", 1000)]);
        let h = p.topology_hints(&none, &none.containers[0]).unwrap();
        assert_eq!(h, Some(BTreeMap::new()));
    }

    #[test]
    fn allocation_follows_hint_and_shrinks_free_set() {
        let mut p = provider(2, 2);
        let pod = testkit::guaranteed_pod("a", &[(W, 1)]);
        let a = p
            .allocate(&pod, &pod.containers[0], &testkit::hint("1:true"))
            .unwrap();
        assert_eq!(a.env["WIDGET_DEVICES"], "widget-1-0");
        assert!(a.mems.is_empty(), "a device provider sets no mems");
        let pod2 = testkit::guaranteed_pod("b", &[(W, 2)]);
        let h = p.topology_hints(&pod2, &pod2.containers[0]).unwrap();
        // Node 1 has one free widget left: only node 0 and both nodes fit.
        testkit::assert_hints(&h, W, &[0, 1], Some(&["0:true", "0-1:false"]));
        let cp = p.checkpoint().unwrap();
        assert_eq!(
            String::from_utf8(cp.clone()).unwrap(),
            r#"{"assignments":[{"pod_uid":"a-uid","container":"app","resource":"example.com/widget","devices":["widget-1-0"]}],"reuse":null}"#
        );
        p.release("a-uid", "app").unwrap();
        let h = p.topology_hints(&pod2, &pod2.containers[0]).unwrap();
        testkit::assert_hints(&h, W, &[0, 1], Some(&["0:true", "1:true", "0-1:false"]));
        p.restore(&cp).unwrap();
        let inv = p.inventory().unwrap();
        assert_eq!(inv.resources[W].total.available, 3);
        assert_eq!(inv.resources[W].zones[1].amounts.available, 1);
    }

    #[test]
    fn preferred_packs_onto_the_fullest_node() {
        let mut p = provider(2, 2);
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let req = PreferredAllocationRequest::new(
            W,
            ids(&["widget-0-0", "widget-1-0", "widget-1-1"]),
            ids(&["widget-0-0"]),
            2,
        );
        assert_eq!(
            p.preferred_allocation(&req).unwrap(),
            ids(&["widget-0-0", "widget-1-0"])
        );
        let req = PreferredAllocationRequest::new(
            W,
            ids(&["widget-0-0", "widget-1-0", "widget-1-1"]),
            vec![],
            2,
        );
        assert_eq!(
            p.preferred_allocation(&req).unwrap(),
            ids(&["widget-1-0", "widget-1-1"])
        );
    }

    #[test]
    fn compact_beyond_eight_nodes() {
        let mut p = provider(10, 1);
        let pod = testkit::guaranteed_pod("a", &[(W, 2)]);
        let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
        let Some(Some(HintSet::Compact(c))) = h.as_ref().and_then(|m| m.get(W)) else {
            panic!("expected compact hints, got {h:?}");
        };
        assert_eq!(c.minimal.len(), 45);
        assert_eq!(c.preferred_width, 2);
        assert_eq!(c.minimal[0].to_string(), "0-1");
    }

    #[test]
    fn config_errors_name_the_key() {
        let m = testkit::machine(1, 1);
        let err =
            |v| match testkit::load::<topomgr_sdk::devices::DeviceProvider<NumaWidgets>>(&m, v) {
                Ok(_) => panic!("config accepted"),
                Err(e) => e.to_string(),
            };
        assert_eq!(
            err(json!({})),
            "InvalidConfig: missing field `widgets_per_node`"
        );
        assert_eq!(
            err(json!({"widgets_per_node": 1, "colour": "red"})),
            "InvalidConfig: unknown field `colour`, expected `widgets_per_node` or `resource`"
        );
        assert_eq!(
            err(json!({"widgets_per_node": "two"})),
            "InvalidConfig: widgets_per_node: invalid type: string \"two\", expected u32"
        );
        assert_eq!(
            err(json!({"widgets_per_node": 0})),
            "InvalidConfig: widgets_per_node = 0 is out of range; set it to a value from 1 to 1024"
        );
    }

    #[test]
    fn fewer_widgets_keep_what_pods_hold() {
        let mut p = provider(2, 2);
        let pod = testkit::guaranteed_pod("a", &[(W, 2)]);
        let a = p
            .allocate(&pod, &pod.containers[0], &testkit::hint("0:true"))
            .unwrap();
        assert_eq!(a.env["WIDGET_DEVICES"], "widget-0-0,widget-0-1");
        // Restarted with one widget per node: widget-0-1 is gone, the pod
        // keeps widget-0-0 and is told what it misses.
        let mut fewer = provider(2, 1);
        let report = fewer.restore(&p.checkpoint().unwrap()).unwrap();
        assert_eq!(
            report.conflicts[0].to_string(),
            "container app of pod a-uid, example.com/widget: device widget-0-1 is gone"
        );
        assert_eq!(fewer.inventory().unwrap().resources[W].total.available, 1);
    }
}
