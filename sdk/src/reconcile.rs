//! [`Reconciled`]: what a provider's [`restore`](crate::Provider::restore)
//! found when it took its saved assignments back on the machine and config
//! as they are now.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The report of [`Provider::restore`](crate::Provider::restore): every
/// saved assignment that lost part of what it holds ([`Conflict`]) and
/// every one found again under another device id or resource name
/// ([`Move`]). Empty when the saved assignments fit the machine and config
/// as they are.
///
/// It crosses the plugin boundary as JSON, read leniently: fields a reader
/// does not know are ignored and every field has a default, so a later SDK
/// may add to it.
///
/// ```
/// use topomgr_sdk::{Conflict, Move, Reconciled, ResourceId};
///
/// let report = Reconciled::new()
///     .with_conflict(
///         Conflict::new("pod-uid", "app", "example.com/fpga", "device fpga-3 is gone")
///             .with_ids(["fpga-3"]),
///     )
///     .with_move(Move::new(
///         "pod-uid",
///         "app",
///         ResourceId::new("example.com/fpga", "0000:3b:00.0"),
///         ResourceId::new("example.com/fpga", "FPGA-SN-1234"),
///     ));
/// assert_eq!(
///     report.conflicts[0].to_string(),
///     "container app of pod pod-uid, example.com/fpga: device fpga-3 is gone"
/// );
/// assert_eq!(
///     report.moves[0].to_string(),
///     "container app of pod pod-uid: example.com/fpga 0000:3b:00.0 is now example.com/fpga \
///      FPGA-SN-1234"
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Reconciled {
    /// Assignments kept for what remains of them, with what they miss.
    #[serde(default)]
    pub conflicts: Vec<Conflict>,
    /// Assignments that follow their resource to another id or name.
    #[serde(default)]
    pub moves: Vec<Move>,
}

impl Reconciled {
    /// An empty report: everything saved fits.
    pub fn new() -> Self {
        Reconciled::default()
    }

    /// With one more conflict.
    pub fn with_conflict(mut self, conflict: Conflict) -> Self {
        self.conflicts.push(conflict);
        self
    }

    /// With one more move.
    pub fn with_move(mut self, moved: Move) -> Self {
        self.moves.push(moved);
        self
    }

    /// True when there is neither a conflict nor a move.
    pub fn is_empty(&self) -> bool {
        self.conflicts.is_empty() && self.moves.is_empty()
    }
}

/// A saved assignment that lost part of what it holds: a vanished device,
/// an offline CPU, memory shrunk below what is assigned. The assignment
/// keeps what remains, and what is missing stays its own (never offered to
/// another container) until the container is released.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Conflict {
    /// The pod's uid.
    #[serde(default)]
    pub pod_uid: String,
    /// The container's name.
    #[serde(default)]
    pub container: String,
    /// The resource (`cpu`, `memory`, `nvidia.com/gpu`, ...).
    #[serde(default)]
    pub resource: String,
    /// What is missing, in words for people ("device GPU-1 is gone",
    /// "CPUs 6-7 are offline", "512 MiB of NUMA node 1 are gone").
    #[serde(default)]
    pub missing: String,
    /// The ids of what is missing, where it has ids (device ids, CPU ids);
    /// empty for amounts.
    #[serde(default)]
    pub ids: Vec<String>,
}

impl Conflict {
    /// Container `container` of pod `pod_uid` misses `missing` (in words)
    /// of `resource`.
    pub fn new(
        pod_uid: impl Into<String>,
        container: impl Into<String>,
        resource: impl Into<String>,
        missing: impl Into<String>,
    ) -> Self {
        Conflict {
            pod_uid: pod_uid.into(),
            container: container.into(),
            resource: resource.into(),
            missing: missing.into(),
            ids: Vec::new(),
        }
    }

    /// With the ids of what is missing.
    pub fn with_ids<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.ids = ids.into_iter().map(Into::into).collect();
        self
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "container {} of pod {}, {}: {}",
            self.container, self.pod_uid, self.resource, self.missing
        )
    }
}

/// A resource as an assignment names it: the resource name and the id
/// within it (a device id).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResourceId {
    /// The resource name.
    #[serde(default)]
    pub resource: String,
    /// The id within the resource.
    #[serde(default)]
    pub id: String,
}

impl ResourceId {
    /// `id` of `resource`.
    pub fn new(resource: impl Into<String>, id: impl Into<String>) -> Self {
        ResourceId {
            resource: resource.into(),
            id: id.into(),
        }
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.resource, self.id)
    }
}

/// A saved assignment found again under another id or resource name (a
/// GPU first discovered by its PCI address and now through NVML by its
/// UUID, a renamed resource): the assignment now holds `to`, which is the
/// same thing `from` was.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Move {
    /// The pod's uid.
    #[serde(default)]
    pub pod_uid: String,
    /// The container's name.
    #[serde(default)]
    pub container: String,
    /// What the saved assignment called it.
    #[serde(default)]
    pub from: ResourceId,
    /// What it is called now.
    #[serde(default)]
    pub to: ResourceId,
}

impl Move {
    /// Container `container` of pod `pod_uid` holds `to`, saved as `from`.
    pub fn new(
        pod_uid: impl Into<String>,
        container: impl Into<String>,
        from: ResourceId,
        to: ResourceId,
    ) -> Self {
        Move {
            pod_uid: pod_uid.into(),
            container: container.into(),
            from,
            to,
        }
    }
}

impl fmt::Display for Move {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "container {} of pod {}: {} is now {}",
            self.container, self.pod_uid, self.from, self.to
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_leniently() {
        // Fields of a later SDK are ignored, missing ones default.
        let r: Reconciled = serde_json::from_str(
            r#"{"conflicts": [{"pod_uid": "u", "resource": "cpu", "missing": "CPU 3 is offline",
                "ids": ["3"], "since": "2024-01-01"}],
                "moves": [{"pod_uid": "u", "container": "c", "from": {"resource": "a", "id": "1"},
                "to": {"resource": "b", "id": "1", "serial": "x"}}],
                "adopted": []}"#,
        )
        .unwrap();
        assert_eq!(
            r.conflicts,
            [Conflict::new("u", "", "cpu", "CPU 3 is offline").with_ids(["3"])]
        );
        assert_eq!(
            r.moves,
            [Move::new(
                "u",
                "c",
                ResourceId::new("a", "1"),
                ResourceId::new("b", "1")
            )]
        );
        let empty: Reconciled = serde_json::from_str("{}").unwrap();
        assert!(empty.is_empty());
        let back: Reconciled = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
