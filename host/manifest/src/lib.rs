//! Kubernetes Pod manifests -> the host's [`Pod`] model (and the SDK's
//! [`PodView`]).
//!
//! Three parts, one concept each:
//! - `reader`: input bytes (at most [`MAX_MANIFEST_BYTES`],
//!   the API server's request limit), UTF-8 text, the documents in it (YAML
//!   1.2 with serde-saphyr under a node budget, or JSON), and typed
//!   deserialization with field paths;
//! - `pod`: the typed serde structs of the Pod fields topomgr reads and the
//!   host's [`Pod`] built from them;
//! - `qos`: the QoS class, pod-level defaulting and the effective requests
//!   and limits, with pod-level resources (`spec.resources`).
//!
//! Reads what people actually have: YAML or JSON (text starting with `{` or
//! `[` is read as JSON, one object or several in a row as `jq` prints them),
//! several documents separated by `---`, `kind: List` or `kind: PodList` with
//! the pods in `items` (what `kubectl get pods -o yaml` prints), and full
//! `kubectl get pod -o yaml` output with `status`, `managedFields` and
//! everything else (fields topomgr does not need are ignored).
//!
//! # What is read
//!
//! - `metadata.name` (required), `metadata.namespace` (default `"default"`),
//!   `metadata.uid`. Without a uid the pod gets the stand-in uid
//!   `"<namespace>/<name>"`, so the same manifest always gets the same uid.
//! - `spec.initContainers` (an init container with `restartPolicy: Always` is
//!   a sidecar) and `spec.containers` (at least one), each with its `name` and
//!   `resources.requests` / `resources.limits`.
//! - `spec.resources` (pod-level requests and limits).
//!
//! # What is computed, as the API server and kubelet do
//!
//! - Defaulting: a container resource with a limit and no request gets
//!   request = limit; pod-level requests and hugepage limits are defaulted as
//!   `SetDefaults_Pod` does (see `qos`).
//! - Quantities: see [`crate::quantity`]; `cpu` is recorded in millicores,
//!   everything else in whole units (bytes for memory and hugepages), both
//!   rounded up. Numbers are accepted where Kubernetes accepts them
//!   (`cpu: 2`, `cpu: 0.5`); a YAML float goes through a 64-bit float first,
//!   exactly as `kubectl` converts YAML to JSON. A null quantity is zero, as in
//!   Kubernetes' JSON decoding.
//! - The QoS class, with Kubernetes' rules: from `spec.resources` when the
//!   pod has it, otherwise from every container; only `cpu` and `memory`
//!   count, zero quantities ignored; Guaranteed when cpu and memory limits are
//!   all set and requests equal limits; BestEffort when there is no non-zero
//!   cpu or memory request or limit at all; Burstable otherwise.
//!
//! # Checks
//!
//! A request larger than its limit, duplicate container names, a pod without
//! containers, a document of another kind and duplicate pod uids are errors,
//! as are malformed YAML and wrongly typed fields. Every error names the source
//! (the path as given, or `<stdin>`), the document (numbered from 1 in input
//! order; empty documents are skipped and not counted) and the field path, e.g.
//! `pods.yaml: document 2: spec.containers[0].resources.requests.cpu: invalid quantity "1.5.3"`.

mod pod;
mod qos;
pub mod quantity;
mod reader;

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;
use topomgr_sdk::PodView;

pub use pod::Pod;
pub use reader::MAX_MANIFEST_BYTES;
pub use topomgr_sdk::PodResources;

use crate::quantity::QuantityError;

/// The QoS class of a pod of one container with these requests (already
/// defaulted from limits) and limits, in canonical units (`cpu` in
/// millicores): Kubernetes' rule (`pkg/apis/core/v1/helper/qos`), as for
/// manifests. Only `cpu` and `memory` count, zeros ignored.
pub fn one_container_qos(
    requests: &topomgr_sdk::ResourceList,
    limits: &topomgr_sdk::ResourceList,
) -> topomgr_sdk::QosClass {
    qos::one_container_class(requests, limits)
}

/// The path argument that means "read standard input".
pub const STDIN_PATH: &str = "-";

/// How standard input is named in errors.
pub(crate) const STDIN_NAME: &str = "<stdin>";

/// Where in the input an error is: source, document, field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file path as given, or `<stdin>`.
    pub origin: String,
    /// The document, numbered from 1 (empty documents not counted).
    pub document: usize,
    /// The field path inside the document (`spec.containers[0].name`); empty
    /// for the document as a whole.
    pub path: String,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.origin, self.document)?;
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        Ok(())
    }
}

/// What is wrong with one field of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// A required field is absent or null.
    #[error("is required")]
    Missing,
    /// The document has no `kind`.
    #[error("is required (expected \"Pod\" or \"List\")")]
    MissingKind,
    /// A field has the wrong YAML/JSON type (checked before typed reading).
    #[error("expected {expected}, found {found}")]
    Type {
        /// What the field must be (`"a string"`).
        expected: &'static str,
        /// What it is (`"a list"`).
        found: &'static str,
    },
    /// A field the typed reader refused (wrong type, bad value), in serde's words.
    #[error("{0}")]
    Invalid(String),
    /// A string field that must not be empty is.
    #[error("must not be empty")]
    Empty,
    /// The object is not a pod or a list of pods.
    #[error("{kind:?} is not supported (expected \"Pod\", or a \"List\" or \"PodList\" of pods)")]
    Kind {
        /// The kind found.
        kind: String,
    },
    /// A resource quantity is malformed, negative or too large.
    #[error(transparent)]
    Quantity(#[from] QuantityError),
    /// `spec.containers` is absent or empty.
    #[error("must list at least one container")]
    NoContainers,
    /// Two containers of the pod share a name.
    #[error("duplicate container name {name:?} (also used by {first})")]
    DuplicateContainer {
        /// The name.
        name: String,
        /// The field path of the container that has it first.
        first: String,
    },
    /// An init container's `restartPolicy` is neither absent nor `Always`.
    #[error(
        "unsupported value {value:?} (an init container's restartPolicy may only be \"Always\", which makes it a sidecar)"
    )]
    RestartPolicy {
        /// The value found.
        value: String,
    },
    /// A request is larger than the limit for the same resource.
    #[error("request {request:?} is larger than the limit {limit:?}")]
    RequestAboveLimit {
        /// The request as written.
        request: String,
        /// The limit as written.
        limit: String,
    },
    /// Another pod has the same `metadata.uid`.
    #[error("duplicate pod uid {uid:?} (pod {other_pod} in {other} has it too)")]
    DuplicateUid {
        /// The uid.
        uid: String,
        /// `namespace/name` of the pod that has it first.
        other_pod: String,
        /// Where that pod is (`pods.yaml: document 1`).
        other: String,
    },
    /// Another pod has the same stand-in uid (same namespace and name, no uids).
    #[error(
        "duplicate pod uid {uid:?} (the stand-in \"<namespace>/<name>\" used when metadata.uid is absent; pod {other_pod} in {other} has it too)"
    )]
    DuplicateStandInUid {
        /// The uid.
        uid: String,
        /// `namespace/name` of the pod that has it first.
        other_pod: String,
        /// Where that pod is (`pods.yaml: document 1`).
        other: String,
    },
}

/// Why manifests could not be turned into pods. Every message is complete:
/// a cause is part of the message, never repeated as a separate source.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// No paths were given to [`read_pods`].
    #[error("no pod manifests given")]
    NoInputs,
    /// A file (or stdin) could not be read.
    #[error("{path}: cannot read: {error}")]
    Read {
        /// The path as given, or `<stdin>`.
        path: String,
        /// The I/O error (part of the message).
        error: std::io::Error,
    },
    /// The input is larger than [`MAX_MANIFEST_BYTES`].
    #[error("{origin}: larger than {limit} bytes (the Kubernetes API server's request limit); split it into several files")]
    TooLarge {
        /// The path as given, or `<stdin>`.
        origin: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// `-` (stdin) was given more than once.
    #[error("\"-\" (standard input) is given more than once")]
    StdinTwice,
    /// The input is not UTF-8 text.
    #[error("{origin}: not UTF-8 text (invalid byte at offset {offset})")]
    NotUtf8 {
        /// The path as given, or `<stdin>`.
        origin: String,
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// The input is not well-formed YAML or JSON.
    #[error("{origin}: invalid {language}: {message}")]
    Syntax {
        /// The path as given, or `<stdin>`.
        origin: String,
        /// `"JSON"` (the text starts with `{` or `[`) or `"YAML"`.
        language: &'static str,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The input holds no document at all.
    #[error("{origin}: no Kubernetes objects found (the input is empty)")]
    Empty {
        /// The path as given, or `<stdin>`.
        origin: String,
    },
    /// The input holds only empty lists.
    #[error("{origin}: no pods found (every List in it is empty)")]
    NoPods {
        /// The path as given, or `<stdin>`.
        origin: String,
    },
    /// A document or field is invalid.
    #[error("{at}: {problem}")]
    Invalid {
        /// Where.
        at: Location,
        /// What (boxed to keep the error small).
        problem: Box<Problem>,
    },
}

/// Parse the pods in `text`, in order, as the SDK views. `source` names the
/// input in errors (a file path, or `<stdin>`).
pub fn parse_pods(text: &str, source: &str) -> Result<Vec<PodView>, ManifestError> {
    Ok(parse_manifests(text, source)?
        .into_iter()
        .map(|p| p.view)
        .collect())
}

/// Parse the pods in `text`, in order, with their pod-level resources.
pub fn parse_manifests(text: &str, source: &str) -> Result<Vec<Pod>, ManifestError> {
    let mut reader = PodReader::default();
    reader.parse(text, source)?;
    Ok(reader.pods)
}

/// Read and parse the pods of every path in order (`-` = standard input), as
/// the SDK views. Pod uids must be unique across all of them.
pub fn read_pods(paths: &[String]) -> Result<Vec<PodView>, ManifestError> {
    Ok(read_manifests(paths)?.into_iter().map(|p| p.view).collect())
}

/// [`read_pods`] with the pods' pod-level resources. Each input is read with
/// a limit of [`MAX_MANIFEST_BYTES`].
pub fn read_manifests(paths: &[String]) -> Result<Vec<Pod>, ManifestError> {
    if paths.is_empty() {
        return Err(ManifestError::NoInputs);
    }
    if paths.iter().filter(|p| *p == STDIN_PATH).count() > 1 {
        return Err(ManifestError::StdinTwice);
    }
    let mut pods = PodReader::default();
    for path in paths {
        let (text, origin) = read_input(path)?;
        pods.parse(&text, &origin)?;
    }
    Ok(pods.pods)
}

/// Read one manifest input as text: a file, or standard input for `-`, at
/// most [`MAX_MANIFEST_BYTES`]. Returns the text and its name for errors
/// (the path as given, or `<stdin>`).
pub fn read_input(path: &str) -> Result<(String, String), ManifestError> {
    if path == STDIN_PATH {
        let text = reader::read_text(std::io::stdin().lock(), STDIN_NAME)?;
        return Ok((text, STDIN_NAME.to_string()));
    }
    let file = std::fs::File::open(path).map_err(|error| ManifestError::Read {
        path: path.to_string(),
        error,
    })?;
    Ok((reader::read_text(file, path)?, path.to_string()))
}

/// Accumulates pods over several inputs, checking uids are unique.
#[derive(Default)]
struct PodReader {
    pods: Vec<Pod>,
    /// uid -> (namespace/name, where).
    uids: HashMap<String, (String, String)>,
}

impl PodReader {
    fn parse(&mut self, text: &str, origin: &str) -> Result<(), ManifestError> {
        let documents = reader::documents(text, origin)?;
        if documents.is_empty() {
            return Err(ManifestError::Empty {
                origin: origin.to_string(),
            });
        }
        let before = self.pods.len();
        for (index, document) in documents.into_iter().enumerate() {
            let doc = Doc {
                origin,
                document: index + 1,
            };
            self.read_document(&doc, document)?;
        }
        if self.pods.len() == before {
            return Err(ManifestError::NoPods {
                origin: origin.to_string(),
            });
        }
        Ok(())
    }

    /// One document: a Pod, or a List / PodList of pods. The kind is looked
    /// at first, so a document of another kind is named as such.
    fn read_document(&mut self, doc: &Doc<'_>, node: Value) -> Result<(), ManifestError> {
        let Value::Object(mut map) = node else {
            return Err(doc.err(
                "",
                Problem::Type {
                    expected: "a Kubernetes object (a mapping)",
                    found: kind_name(&node),
                },
            ));
        };
        let kind = match map.get("kind") {
            None | Some(Value::Null) => return Err(doc.err("kind", Problem::MissingKind)),
            Some(k) => doc.string("kind", k)?.to_string(),
        };
        match kind.as_str() {
            "Pod" => self.add_pod(doc, Value::Object(map), ""),
            "List" | "PodList" => {
                let items = match map.remove("items") {
                    None | Some(Value::Null) => return Ok(()),
                    Some(Value::Array(items)) => items,
                    Some(other) => {
                        return Err(doc.err(
                            "items",
                            Problem::Type {
                                expected: "a list",
                                found: kind_name(&other),
                            },
                        ))
                    }
                };
                for (i, item) in items.into_iter().enumerate() {
                    let prefix = format!("items[{i}]");
                    let Value::Object(item_map) = item else {
                        return Err(doc.err(
                            &prefix,
                            Problem::Type {
                                expected: "a Pod (a mapping)",
                                found: kind_name(&item),
                            },
                        ));
                    };
                    // PodList items straight from the API server carry no kind.
                    let kind_path = join(&prefix, "kind");
                    let item_kind = match item_map.get("kind") {
                        None | Some(Value::Null) if kind == "PodList" => "Pod",
                        None | Some(Value::Null) => {
                            return Err(doc.err(&kind_path, Problem::MissingKind))
                        }
                        Some(k) => doc.string(&kind_path, k)?,
                    };
                    if item_kind != "Pod" {
                        return Err(doc.err(
                            &kind_path,
                            Problem::Kind {
                                kind: item_kind.to_string(),
                            },
                        ));
                    }
                    self.add_pod(doc, Value::Object(item_map), &prefix)?;
                }
                Ok(())
            }
            _ => Err(doc.err("kind", Problem::Kind { kind })),
        }
    }

    fn add_pod(&mut self, doc: &Doc<'_>, value: Value, prefix: &str) -> Result<(), ManifestError> {
        let read = pod::read_pod(doc, value, prefix)?;
        let view = &read.pod.view;
        let here = Location {
            origin: doc.origin.to_string(),
            document: doc.document,
            path: String::new(),
        }
        .to_string();
        let pod_name = format!("{}/{}", view.namespace, view.name);
        if let Some((other_pod, other)) = self.uids.get(&view.uid) {
            let (uid, other_pod, other) = (view.uid.clone(), other_pod.clone(), other.clone());
            let problem = if read.stand_in_uid {
                Problem::DuplicateStandInUid {
                    uid,
                    other_pod,
                    other,
                }
            } else {
                Problem::DuplicateUid {
                    uid,
                    other_pod,
                    other,
                }
            };
            return Err(doc.err(&join(prefix, "metadata.uid"), problem));
        }
        self.uids.insert(view.uid.clone(), (pod_name, here));
        self.pods.push(read.pod);
        Ok(())
    }
}

/// The document being read, for error locations.
struct Doc<'a> {
    origin: &'a str,
    document: usize,
}

impl Doc<'_> {
    fn err(&self, path: &str, problem: Problem) -> ManifestError {
        ManifestError::Invalid {
            at: Location {
                origin: self.origin.to_string(),
                document: self.document,
                path: path.to_string(),
            },
            problem: Box::new(problem),
        }
    }

    /// `node` as a string, or a type error at `path`.
    fn string<'n>(&self, path: &str, node: &'n Value) -> Result<&'n str, ManifestError> {
        node.as_str().ok_or_else(|| {
            self.err(
                path,
                Problem::Type {
                    expected: "a string",
                    found: kind_name(node),
                },
            )
        })
    }
}

/// How a value's type is named in errors.
fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// `prefix.field`, or `field` at the top.
fn join(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_string()
    } else {
        format!("{prefix}.{field}")
    }
}

/// The path of map key `key` under `prefix`: `.cpu` for plain names,
/// `[example.com/widget]` for names with other characters.
fn key_path(prefix: &str, key: &str) -> String {
    if key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        join(prefix, key)
    } else {
        format!("{prefix}[{key}]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topomgr_sdk::{ContainerView, QosClass, ResourceList};

    fn pods(text: &str) -> Vec<PodView> {
        match parse_pods(text, "t.yaml") {
            Ok(p) => p,
            Err(e) => panic!("expected pods, got: {e}"),
        }
    }

    fn err(text: &str) -> String {
        match parse_pods(text, "t.yaml") {
            Ok(p) => panic!("expected an error, got {p:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// A one-container pod with the given `resources` mapping (flow YAML).
    fn with_resources(resources: &str) -> String {
        format!(
            "kind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: a\n    resources: {resources}\n"
        )
    }

    fn qos_of(text: &str) -> QosClass {
        let p = pods(text);
        assert_eq!(p.len(), 1);
        p[0].qos
    }

    fn list(entries: &[(&str, u64)]) -> ResourceList {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn minimal_pod_gets_defaults() {
        let p = pods("kind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: app}]}\n");
        assert_eq!(
            p,
            vec![
                PodView::new("default/web", "web", "default", QosClass::BestEffort)
                    .with_containers(vec![ContainerView::new("app")])
            ]
        );
    }

    #[test]
    fn limits_default_requests_and_units() {
        let p = pods(&with_resources(
            "{limits: {cpu: 1500m, memory: 1Gi, hugepages-2Mi: 4Mi, example.com/widget: 2}, requests: {cpu: 0.5}}",
        ));
        let c = &p[0].containers[0];
        assert_eq!(
            c.limits,
            list(&[
                ("cpu", 1500),
                ("example.com/widget", 2),
                ("hugepages-2Mi", 4_194_304),
                ("memory", 1_073_741_824)
            ])
        );
        assert_eq!(
            c.requests,
            list(&[
                ("cpu", 500),
                ("example.com/widget", 2),
                ("hugepages-2Mi", 4_194_304),
                ("memory", 1_073_741_824)
            ])
        );
        assert_eq!(p[0].qos, QosClass::Burstable);
    }

    #[test]
    fn numbers_and_strings_are_quantities() {
        let p = pods(&with_resources(
            "{requests: {cpu: 2, memory: 1e3, a: 0.5, b: .5, c: \" 7 \", d: null, e: 1E3, f: 0x10}}",
        ));
        assert_eq!(
            p[0].containers[0].requests,
            list(&[
                ("a", 1),
                ("b", 1),
                ("c", 7),
                ("cpu", 2000),
                ("d", 0),
                ("e", 1000),
                ("f", 16),
                ("memory", 1000)
            ])
        );
    }

    #[test]
    fn qos_classes() {
        // Guaranteed: limits only (requests defaulted), or equal requests and limits.
        assert_eq!(
            qos_of(&with_resources("{limits: {cpu: 1, memory: 1Gi}}")),
            QosClass::Guaranteed
        );
        assert_eq!(
            qos_of(&with_resources(
                "{requests: {cpu: 1000m, memory: 1Gi}, limits: {cpu: 1, memory: 1024Mi}}"
            )),
            QosClass::Guaranteed
        );
        // Other resources do not count.
        assert_eq!(
            qos_of(&with_resources("{requests: {cpu: 1, memory: 1Gi, example.com/widget: 1}, limits: {cpu: 1, memory: 1Gi, example.com/widget: 3}}")),
            QosClass::Guaranteed
        );
        // Exact comparison: both round up to 1m, but differ.
        assert_eq!(
            qos_of(&with_resources(
                "{requests: {cpu: 0.0001, memory: 1Gi}, limits: {cpu: 0.0002, memory: 1Gi}}"
            )),
            QosClass::Burstable
        );
        // Only a cpu limit: not Guaranteed.
        assert_eq!(
            qos_of(&with_resources("{limits: {cpu: 1}}")),
            QosClass::Burstable
        );
        // Request below limit.
        assert_eq!(
            qos_of(&with_resources(
                "{requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 2, memory: 1Gi}}"
            )),
            QosClass::Burstable
        );
        // Only non-QoS resources, or zero quantities: BestEffort.
        assert_eq!(
            qos_of(&with_resources("{limits: {example.com/widget: 1}}")),
            QosClass::BestEffort
        );
        assert_eq!(
            qos_of(&with_resources("{requests: {cpu: 0, memory: \"0\"}}")),
            QosClass::BestEffort
        );
        // A zero cpu limit does not count as a limit.
        assert_eq!(
            qos_of(&with_resources(
                "{requests: {cpu: 0}, limits: {cpu: 0, memory: 1Gi}}"
            )),
            QosClass::Burstable
        );
        assert_eq!(qos_of(&with_resources("{}")), QosClass::BestEffort);
        assert_eq!(qos_of(&with_resources("null")), QosClass::BestEffort);
    }

    #[test]
    fn init_containers_count_for_qos() {
        let base = "kind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a, resources: {limits: {cpu: 1, memory: 1Gi}}}]\n";
        assert_eq!(qos_of(base), QosClass::Guaranteed);
        let with_init =
            format!("{base}  initContainers: [{{name: i, resources: {{limits: {{cpu: 1}}}}}}]\n");
        assert_eq!(qos_of(&with_init), QosClass::Burstable);
        let with_plain_init = format!("{base}  initContainers: [{{name: i}}]\n");
        assert_eq!(qos_of(&with_plain_init), QosClass::Burstable);
        let besteffort_app = "kind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a}]\n  initContainers: [{name: i, resources: {requests: {memory: 1Mi}}}]\n";
        assert_eq!(qos_of(besteffort_app), QosClass::Burstable);
    }

    #[test]
    fn sidecars() {
        let p = pods("kind: Pod\nmetadata: {name: p}\nspec:\n  initContainers:\n  - {name: i}\n  - {name: s, restartPolicy: Always}\n  containers: [{name: a}]\n");
        let flags: Vec<(&str, bool)> = p[0]
            .init_containers
            .iter()
            .map(|c| (c.name.as_str(), c.sidecar))
            .collect();
        assert_eq!(flags, vec![("i", false), ("s", true)]);
        assert_eq!(
            err("kind: Pod\nmetadata: {name: p}\nspec:\n  initContainers: [{name: i, restartPolicy: OnFailure}]\n  containers: [{name: a}]\n"),
            "t.yaml: document 1: spec.initContainers[0].restartPolicy: unsupported value \"OnFailure\" (an init container's restartPolicy may only be \"Always\", which makes it a sidecar)"
        );
    }

    #[test]
    fn field_errors_name_the_path() {
        let table: &[(&str, &str)] = &[
            ("kind: Pod\nspec: {containers: [{name: a}]}\n", "t.yaml: document 1: metadata.name: is required"),
            ("kind: Pod\nmetadata: {name: \"\"}\nspec: {containers: [{name: a}]}\n", "t.yaml: document 1: metadata.name: must not be empty"),
            ("kind: Pod\nmetadata: {name: 5}\nspec: {containers: [{name: a}]}\n", "t.yaml: document 1: metadata.name: invalid type: integer `5`, expected a string"),
            ("kind: Pod\nmetadata: []\nspec: {containers: [{name: a}]}\n", "t.yaml: document 1: metadata: invalid type: sequence, expected a mapping"),
            ("kind: Pod\nmetadata: {name: p, uid: [1]}\nspec: {containers: [{name: a}]}\n", "t.yaml: document 1: metadata.uid: invalid type: sequence, expected a string"),
            ("kind: Pod\nmetadata: {name: p}\n", "t.yaml: document 1: spec: is required"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {}\n", "t.yaml: document 1: spec.containers: must list at least one container"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n", "t.yaml: document 1: spec.containers: must list at least one container"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: {name: a}}\n", "t.yaml: document 1: spec.containers: invalid type: map, expected a sequence"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [a]}\n", "t.yaml: document 1: spec.containers[0]: invalid type: string \"a\", expected a mapping"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{image: x}]}\n", "t.yaml: document 1: spec.containers[0].name: is required"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}, {name: a}]}\n", "t.yaml: document 1: spec.containers[1].name: duplicate container name \"a\" (also used by spec.containers[0])"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {initContainers: [{name: a}], containers: [{name: a}]}\n", "t.yaml: document 1: spec.containers[0].name: duplicate container name \"a\" (also used by spec.initContainers[0])"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: []}]}\n", "t.yaml: document 1: spec.containers[0].resources: invalid type: sequence, expected a mapping"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {cpu: 1.5.3}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.requests.cpu: invalid quantity \"1.5.3\""),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {limits: {example.com/widget: -1}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.limits[example.com/widget]: invalid quantity \"-1\": must not be negative"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {limits: {cpu: true}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.limits.cpu: invalid type: boolean `true`, expected a quantity (a string or a number)"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {limits: {cpu: 10P}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.limits.cpu: invalid quantity \"10P\": 10000000000000000000 millicores is larger than 9223372036854775807, the largest amount of CPU Kubernetes can represent"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {cpu: 2}, limits: {cpu: 1}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.requests.cpu: request \"2\" is larger than the limit \"1\""),
            ("kind: Deployment\nmetadata: {name: p}\n", "t.yaml: document 1: kind: \"Deployment\" is not supported (expected \"Pod\", or a \"List\" or \"PodList\" of pods)"),
            ("metadata: {name: p}\n", "t.yaml: document 1: kind: is required (expected \"Pod\" or \"List\")"),
            ("kind: [Pod]\n", "t.yaml: document 1: kind: expected a string, found a list"),
            ("- 1\n", "t.yaml: document 1: expected a Kubernetes object (a mapping), found a list"),
            ("kind: List\nitems: [{kind: Service}]\n", "t.yaml: document 1: items[0].kind: \"Service\" is not supported (expected \"Pod\", or a \"List\" or \"PodList\" of pods)"),
            ("kind: List\nitems: [{metadata: {name: p}}]\n", "t.yaml: document 1: items[0].kind: is required (expected \"Pod\" or \"List\")"),
            ("kind: List\nitems: [7]\n", "t.yaml: document 1: items[0]: expected a Pod (a mapping), found an integer"),
            ("kind: List\nitems: {}\n", "t.yaml: document 1: items: expected a list, found a mapping"),
            ("kind: PodList\nitems: [{metadata: {name: p}, spec: {containers: [{name: a, resources: {limits: {cpu: x}}}]}}]\n", "t.yaml: document 1: items[0].spec.containers[0].resources.limits.cpu: invalid quantity \"x\""),
            ("kind: List\nitems: []\n", "t.yaml: no pods found (every List in it is empty)"),
            ("", "t.yaml: no Kubernetes objects found (the input is empty)"),
            ("# only a comment\n---\n", "t.yaml: no Kubernetes objects found (the input is empty)"),
            ("kind: Pod\nkind: Pod\n", "t.yaml: invalid YAML: duplicate mapping key: kind at line 2, column 1"),
            ("a: [1", "t.yaml: invalid YAML: unclosed bracket '[' at line 1, column 4"),
        ];
        let mut bad = Vec::new();
        for (text, want) in table {
            let got = err(text);
            if got != *want {
                bad.push(format!("{text:?}\n  got:  {got:?}\n  want: {want:?}"));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    #[test]
    fn json_streams_and_syntax_errors() {
        let one = "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"a\\u00e9\"}, \"spec\": {\"containers\": [{\"name\": \"c\"}]}}";
        let stream = format!("{one}\n{}\nnull\n", one.replace("a\\u00e9", "b"));
        let names: Vec<String> = pods(&stream).into_iter().map(|p| p.name).collect();
        assert_eq!(names, vec!["a\u{e9}".to_string(), "b".to_string()]);
        // YAML flow style that is not JSON still reads as YAML.
        let flow = "{kind: Pod, metadata: {name: f}, spec: {containers: [{name: c}]}}";
        assert_eq!(pods(flow)[0].name, "f");
        assert_eq!(
            err("{\"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}"),
            "t.yaml: invalid JSON: EOF while parsing an object at line 1 column 41"
        );
        assert_eq!(
            err("{\"kind\": \"Pod\",\n \"kind\": \"Pod\"}"),
            "t.yaml: invalid JSON: duplicate mapping key: kind at line 2, column 2"
        );
        assert_eq!(
            err("[]"),
            "t.yaml: document 1: expected a Kubernetes object (a mapping), found a list"
        );
    }

    #[test]
    fn documents_are_numbered() {
        let text = "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\n---\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, resources: {limits: {memory: 1.5.3}}}]}\n";
        assert_eq!(
            err(text),
            "t.yaml: document 2: spec.containers[0].resources.limits.memory: invalid quantity \"1.5.3\""
        );
    }

    #[test]
    fn duplicate_uids() {
        let text = "kind: Pod\nmetadata: {name: a, uid: u1}\nspec: {containers: [{name: c}]}\n---\nkind: List\nitems:\n- kind: Pod\n  metadata: {name: b, namespace: ns, uid: u1}\n  spec: {containers: [{name: c}]}\n";
        assert_eq!(
            err(text),
            "t.yaml: document 2: items[0].metadata.uid: duplicate pod uid \"u1\" (pod default/a in t.yaml: document 1 has it too)"
        );
        let text = "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\nkind: Pod\nmetadata: {name: a, namespace: default}\nspec: {containers: [{name: c}]}\n";
        assert_eq!(
            err(text),
            "t.yaml: document 2: metadata.uid: duplicate pod uid \"default/a\" (the stand-in \"<namespace>/<name>\" used when metadata.uid is absent; pod default/a in t.yaml: document 1 has it too)"
        );
        // Same name in another namespace is a different pod.
        let text = "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\nkind: Pod\nmetadata: {name: a, namespace: other}\nspec: {containers: [{name: c}]}\n";
        let uids: Vec<String> = pods(text).into_iter().map(|p| p.uid).collect();
        assert_eq!(uids, vec!["default/a".to_string(), "other/a".to_string()]);
    }

    #[test]
    fn read_pods_errors() {
        assert_eq!(
            read_pods(&[]).map_err(|e| e.to_string()).err(),
            Some("no pod manifests given".to_string())
        );
        let missing = "/nonexistent/topomgr/pods.yaml".to_string();
        let message = read_pods(std::slice::from_ref(&missing))
            .map_err(|e| e.to_string())
            .err()
            .unwrap_or_default();
        assert!(
            message.starts_with("/nonexistent/topomgr/pods.yaml: cannot read: "),
            "{message}"
        );
    }

    #[test]
    fn key_paths() {
        assert_eq!(key_path("r", "cpu"), "r.cpu");
        assert_eq!(key_path("r", "hugepages-2Mi"), "r.hugepages-2Mi");
        assert_eq!(key_path("r", "nvidia.com/gpu"), "r[nvidia.com/gpu]");
        assert_eq!(join("", "kind"), "kind");
    }
}
