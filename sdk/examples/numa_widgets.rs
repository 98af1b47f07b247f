//! `numa_widgets`: a complete example device provider for topomgr.
//!
//! It manages a made-up device, `example.com/widget`, of which every NUMA node
//! has `widgets_per_node`, and answers like the kubelet's Device Manager:
//!
//! * no request for the resource: no preference (`None`) for it;
//! * a request of `k` widgets: every NUMA mask (kubelet order) whose *free*
//!   widgets number at least `k`, preferred when the mask's width equals the
//!   smallest width whose *total* widgets reach `k`;
//! * nothing fits: an empty list (the request cannot be aligned);
//! * more than 8 NUMA nodes: the same hints in compact form.
//!
//! Allocation takes free widgets from the hinted nodes first (ascending node,
//! then index), then from the others, and returns ids `widget-<node>-<i>`,
//! the env variable `WIDGET_DEVICES=<comma list>` and the widgets' nodes as
//! `mems`. State is checkpointed as JSON.
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
//! `target/release/...`), beside the `topomgr` binary. Its own `Cargo.toml`
//! is all a vendor's crate needs: `crate-type = ["cdylib"]` and a dependency
//! on `topomgr-sdk`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use topomgr_sdk::{
    for_each_mask_in_kubelet_order, Allocation, CompactHints, ContainerView, HintSet, NumaMask,
    NumaNodeId, PodView, Provider, ProviderContext, ProviderError, ProviderHints, TopologyHint,
};

/// The largest `widgets_per_node` accepted.
const MAX_WIDGETS_PER_NODE: u32 = 1024;
/// Machines with more NUMA nodes than this get compact hints.
const EXPLICIT_HINT_MAX_NODES: usize = 8;
/// The most minimal masks a compact answer may hold.
const MAX_MINIMAL_MASKS: usize = 65_536;

/// The provider's config table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    widgets_per_node: u32,
    #[serde(default = "default_resource")]
    resource: String,
}

fn default_resource() -> String {
    "example.com/widget".to_owned()
}

/// One container's widgets, as checkpointed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Assignment {
    pod_uid: String,
    container: String,
    widgets: Vec<String>,
}

/// The checkpoint format.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Checkpoint {
    assignments: Vec<Assignment>,
}

/// The widget provider.
pub struct NumaWidgets {
    resource: String,
    per_node: u32,
    nodes: Vec<NumaNodeId>,
    /// Widgets in use, as `(node, index)`.
    used: BTreeSet<(NumaNodeId, u32)>,
    /// `(pod uid, container)` -> widgets.
    assignments: BTreeMap<(String, String), Vec<(NumaNodeId, u32)>>,
}

fn widget_id((node, i): (NumaNodeId, u32)) -> String {
    format!("widget-{node}-{i}")
}

impl NumaWidgets {
    fn free_on(&self, node: NumaNodeId) -> u32 {
        let used = self.used.range((node, 0)..=(node, u32::MAX)).count() as u32;
        self.per_node.saturating_sub(used)
    }

    fn parse_widget(&self, id: &str) -> Result<(NumaNodeId, u32), ProviderError> {
        let bad = || {
            ProviderError::new(
                "InvalidCheckpoint",
                format!(
                    "widget id {id:?} is not `widget-<node>-<index>` with a node of this machine \
                     ({:?}) and an index below widgets_per_node ({})",
                    self.nodes, self.per_node
                ),
            )
        };
        let rest = id.strip_prefix("widget-").ok_or_else(bad)?;
        let (n, i) = rest.split_once('-').ok_or_else(bad)?;
        let n: NumaNodeId = n.parse().map_err(|_| bad())?;
        let i: u32 = i.parse().map_err(|_| bad())?;
        if !self.nodes.contains(&n) || i >= self.per_node {
            return Err(bad());
        }
        Ok((n, i))
    }

    /// Hints for a request of `k` widgets, counting `extra` (widgets already
    /// held by the container being re-admitted) as free.
    fn hints_for(
        &self,
        k: u64,
        extra: &[(NumaNodeId, u32)],
    ) -> Result<ProviderHints, ProviderError> {
        let mut map = BTreeMap::new();
        if k == 0 {
            map.insert(self.resource.clone(), None);
            return Ok(Some(map));
        }
        let free = |n: NumaNodeId| -> u64 {
            u64::from(self.free_on(n)) + extra.iter().filter(|(en, _)| *en == n).count() as u64
        };
        // The narrowest width whose total widgets reach k (kubelet: the
        // machine's node count when even all nodes are not enough).
        let per_node = u64::from(self.per_node);
        let n_nodes = self.nodes.len() as u64;
        let min_width = k.div_ceil(per_node.max(1)).min(n_nodes) as u32;
        let set = if self.nodes.len() <= EXPLICIT_HINT_MAX_NODES {
            let mut hints = Vec::new();
            for_each_mask_in_kubelet_order(&self.nodes, |mask| {
                let avail: u64 = mask.iter().map(free).sum();
                if avail >= k {
                    hints.push(TopologyHint::new(mask, mask.count() == min_width));
                }
            });
            HintSet::Explicit(hints)
        } else {
            let with_free: Vec<(NumaNodeId, u64)> = self
                .nodes
                .iter()
                .map(|&n| (n, free(n)))
                .filter(|&(_, f)| f > 0)
                .collect();
            let mut minimal = Vec::new();
            minimal_masks(&with_free, k, 0, NumaMask::EMPTY, 0, &mut minimal)?;
            if minimal.is_empty() {
                HintSet::Explicit(Vec::new())
            } else {
                HintSet::Compact(CompactHints {
                    minimal,
                    within: Vec::new(),
                    preferred_width: min_width,
                })
            }
        };
        map.insert(self.resource.clone(), Some(set));
        Ok(Some(map))
    }
}

/// Collects every minimal set of nodes (from `nodes[start..]`, added to
/// `acc`) whose free widgets reach `k`: sets where dropping any node falls short.
fn minimal_masks(
    nodes: &[(NumaNodeId, u64)],
    k: u64,
    start: usize,
    acc: NumaMask,
    sum: u64,
    out: &mut Vec<NumaMask>,
) -> Result<(), ProviderError> {
    for i in start..nodes.len() {
        let (node, free) = nodes[i];
        let mask = acc.with(node);
        let total = sum + free;
        if total >= k {
            // Minimal iff removing the node with the fewest free widgets falls short.
            let smallest = nodes
                .iter()
                .filter(|(n, _)| mask.is_set(*n))
                .map(|&(_, f)| f)
                .min()
                .unwrap_or(0);
            if total - smallest < k {
                out.push(mask);
                if out.len() > MAX_MINIMAL_MASKS {
                    return Err(ProviderError::admission(format!(
                        "more than {MAX_MINIMAL_MASKS} minimal NUMA combinations satisfy a request \
                         of {k} widgets; request fewer widgets per container"
                    )));
                }
            }
        } else {
            minimal_masks(nodes, k, i + 1, mask, total, out)?;
        }
    }
    Ok(())
}

impl Provider for NumaWidgets {
    fn new(ctx: &ProviderContext<'_>) -> Result<Self, ProviderError> {
        let cfg: Config = ctx
            .config
            .parse()
            .map_err(|e| ProviderError::config(format!("numa_widgets config: {}", e.message)))?;
        if cfg.widgets_per_node == 0 || cfg.widgets_per_node > MAX_WIDGETS_PER_NODE {
            return Err(ProviderError::config(format!(
                "numa_widgets config: widgets_per_node = {} is out of range; \
                 set it to a value from 1 to {MAX_WIDGETS_PER_NODE}",
                cfg.widgets_per_node
            )));
        }
        if cfg.resource.is_empty() {
            return Err(ProviderError::config(
                "numa_widgets config: resource is empty; set it to a name like \"example.com/widget\"",
            ));
        }
        tracing::info!(
            resource = %cfg.resource,
            widgets_per_node = cfg.widgets_per_node,
            nodes = ctx.machine.numa_nodes.len(),
            "numa_widgets ready"
        );
        Ok(NumaWidgets {
            resource: cfg.resource,
            per_node: cfg.widgets_per_node,
            nodes: ctx.machine.numa_ids(),
            used: BTreeSet::new(),
            assignments: BTreeMap::new(),
        })
    }

    fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        let k = container.request(&self.resource);
        let held = self
            .assignments
            .get(&(pod.uid.clone(), container.name.clone()))
            .cloned()
            .unwrap_or_default();
        self.hints_for(k, &held)
    }

    fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        let k = pod.effective_request(&self.resource);
        let held: Vec<(NumaNodeId, u32)> = self
            .assignments
            .iter()
            .filter(|((uid, _), _)| *uid == pod.uid)
            .flat_map(|(_, w)| w.iter().copied())
            .collect();
        self.hints_for(k, &held)
    }

    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        let k = container.request(&self.resource);
        let key = (pod.uid.clone(), container.name.clone());
        let chosen = if let Some(held) = self.assignments.get(&key) {
            held.clone()
        } else {
            if k == 0 {
                return Ok(Allocation::default());
            }
            let preferred = hint.affinity.unwrap_or(NumaMask::EMPTY);
            let order = self
                .nodes
                .iter()
                .filter(|n| preferred.is_set(**n))
                .chain(self.nodes.iter().filter(|n| !preferred.is_set(**n)));
            let mut chosen = Vec::new();
            'pick: for &n in order {
                for i in 0..self.per_node {
                    if chosen.len() as u64 == k {
                        break 'pick;
                    }
                    if !self.used.contains(&(n, i)) {
                        chosen.push((n, i));
                    }
                }
            }
            if (chosen.len() as u64) < k {
                return Err(ProviderError::admission(format!(
                    "container {:?} of pod {}/{} requests {k} {} but only {} are free",
                    container.name,
                    pod.namespace,
                    pod.name,
                    self.resource,
                    chosen.len()
                )));
            }
            self.used.extend(chosen.iter().copied());
            self.assignments.insert(key, chosen.clone());
            chosen
        };
        let ids: Vec<String> = chosen.iter().copied().map(widget_id).collect();
        let mems: NumaMask = chosen.iter().map(|(n, _)| *n).collect();
        tracing::debug!(pod = %pod.uid, container = %container.name, widgets = %ids.join(","), "allocated");
        let mut alloc = Allocation::default().with_mems(mems);
        alloc.env.insert("WIDGET_DEVICES".to_owned(), ids.join(","));
        alloc.devices.insert(self.resource.clone(), ids);
        Ok(alloc)
    }

    fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        if let Some(w) = self
            .assignments
            .remove(&(pod_uid.to_owned(), container.to_owned()))
        {
            for x in w {
                self.used.remove(&x);
            }
        }
        Ok(())
    }

    fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        let cp = Checkpoint {
            assignments: self
                .assignments
                .iter()
                .map(|((uid, c), w)| Assignment {
                    pod_uid: uid.clone(),
                    container: c.clone(),
                    widgets: w.iter().copied().map(widget_id).collect(),
                })
                .collect(),
        };
        serde_json::to_vec(&cp)
            .map_err(|e| ProviderError::new("CheckpointError", format!("encoding widgets: {e}")))
    }

    fn restore(&mut self, data: &[u8]) -> Result<(), ProviderError> {
        let cp: Checkpoint = serde_json::from_slice(data).map_err(|e| {
            ProviderError::new("InvalidCheckpoint", format!("numa_widgets checkpoint: {e}"))
        })?;
        let mut used = BTreeSet::new();
        let mut assignments = BTreeMap::new();
        for a in cp.assignments {
            let mut w = Vec::with_capacity(a.widgets.len());
            for id in &a.widgets {
                let x = self.parse_widget(id)?;
                if !used.insert(x) {
                    return Err(ProviderError::new(
                        "InvalidCheckpoint",
                        format!("widget {id:?} is assigned twice in the checkpoint"),
                    ));
                }
                w.push(x);
            }
            assignments.insert((a.pod_uid, a.container), w);
        }
        self.used = used;
        self.assignments = assignments;
        Ok(())
    }
}

topomgr_sdk::export_provider!(NumaWidgets);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use topomgr_sdk::testkit;

    const W: &str = "example.com/widget";

    fn provider(nodes: u32, per_node: u32) -> NumaWidgets {
        let m = testkit::machine(nodes, 2);
        match testkit::new_provider::<NumaWidgets>(&m, json!({ "widgets_per_node": per_node })) {
            Ok(p) => p,
            Err(e) => panic!("provider: {e}"),
        }
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
        assert_eq!(h, Some(BTreeMap::from([(W.to_owned(), None)])));
    }

    #[test]
    fn allocation_follows_hint_and_shrinks_free_set() {
        let mut p = provider(2, 2);
        let pod = testkit::guaranteed_pod("a", &[(W, 1)]);
        let hint = TopologyHint::new(NumaMask::single(NumaNodeId::from(1)), true);
        let a = p.allocate(&pod, &pod.containers[0], &hint).unwrap();
        assert_eq!(
            a.env.get("WIDGET_DEVICES").map(String::as_str),
            Some("widget-1-0")
        );
        assert_eq!(a.mems.to_string(), "1");
        let pod2 = testkit::guaranteed_pod("b", &[(W, 2)]);
        let h = p.topology_hints(&pod2, &pod2.containers[0]).unwrap();
        // Node 1 has one free widget left: only node 0 and both nodes fit.
        testkit::assert_hints(&h, W, &[0, 1], Some(&["0:true", "0-1:false"]));
        let cp = p.checkpoint().unwrap();
        assert_eq!(
            String::from_utf8(cp.clone()).unwrap(),
            r#"{"assignments":[{"pod_uid":"a-uid","container":"app","widgets":["widget-1-0"]}]}"#
        );
        p.release("a-uid", "app").unwrap();
        let h = p.topology_hints(&pod2, &pod2.containers[0]).unwrap();
        testkit::assert_hints(&h, W, &[0, 1], Some(&["0:true", "1:true", "0-1:false"]));
        p.restore(&cp).unwrap();
        assert_eq!(p.free_on(NumaNodeId::from(1)), 1);
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
        let err = |v| match testkit::new_provider::<NumaWidgets>(&m, v) {
            Ok(_) => panic!("config accepted"),
            Err(e) => e.to_string(),
        };
        assert_eq!(
            err(json!({})),
            "InvalidConfig: numa_widgets config: missing field `widgets_per_node`"
        );
        assert_eq!(
            err(json!({"widgets_per_node": 1, "colour": "red"})),
            "InvalidConfig: numa_widgets config: unknown field `colour`, expected `widgets_per_node` or `resource`"
        );
        assert_eq!(
            err(json!({"widgets_per_node": 0})),
            "InvalidConfig: numa_widgets config: widgets_per_node = 0 is out of range; set it to a value from 1 to 1024"
        );
    }

    #[test]
    fn restore_rejects_unknown_widget_and_keeps_state() {
        let mut p = provider(2, 2);
        let err = p
            .restore(
                br#"{"assignments":[{"pod_uid":"u","container":"c","widgets":["widget-7-0"]}]}"#,
            )
            .unwrap_err();
        assert_eq!(
            err.message,
            "widget id \"widget-7-0\" is not `widget-<node>-<index>` with a node of this machine ([0, 1]) \
             and an index below widgets_per_node (2)"
        );
        assert!(p.assignments.is_empty());
    }
}
