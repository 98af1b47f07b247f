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
//! everything else.
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
//! As the API server validates a Pod (`resources`, `fields`): a field the
//! Kubernetes API does not have (strict field validation, as `kubectl`
//! does by default: `spec.containers[0].resources.limit: unknown field
//! "limit"; did you mean "limits"?`), a resource name a container cannot
//! request, a fractional extended resource, a hugepages quantity that is
//! not a multiple of its page size, a request of an extended resource or
//! hugepages without an equal limit, and hugepages without cpu or memory.
//! A request larger than its limit, duplicate container names, a pod without
//! containers, a document of another kind and duplicate pod uids are errors,
//! as are malformed YAML and wrongly typed fields. Every error names the source
//! (the path as given, or `<stdin>`), the document (numbered from 1 in input
//! order; empty documents are skipped and not counted) and the field path, e.g.
//! `pods.yaml: document 2: spec.containers[0].resources.requests.cpu: invalid quantity "1.5.3"`.

mod fields;
mod pod;
mod qos;
pub mod quantity;
mod reader;
mod resources;

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
    /// A resource name a container cannot request.
    #[error("{name:?} is not a resource a container can request: use a standard resource (cpu, memory, ephemeral-storage, hugepages-<page size>) or an extended resource with a domain (example.com/{name})")]
    UnknownResource {
        /// The name.
        name: String,
    },
    /// A fractional quantity of an extended resource.
    #[error("invalid value {text:?}: must be an integer (an extended resource is counted in whole units)")]
    NotInteger {
        /// The quantity as written.
        text: String,
    },
    /// A hugepages quantity that is not a whole number of pages.
    #[error("invalid value {text:?}: {text} is not positive integer multiple of {name}")]
    HugePagesMultiple {
        /// The quantity as written.
        text: String,
        /// The resource (its page size).
        name: String,
    },
    /// A request of an extended resource or hugepages without a limit.
    #[error("a limit must be set too: extended resources and hugepages cannot be overcommitted (set limits to the same quantity, or only limits)")]
    LimitRequired,
    /// A request of an extended resource or hugepages that differs from its limit.
    #[error("request {request:?} must equal the limit {limit:?}: extended resources and hugepages cannot be overcommitted")]
    RequestNotLimit {
        /// The request as written.
        request: String,
        /// The limit as written.
        limit: String,
    },
    /// Hugepages without cpu or memory.
    #[error("hugepages require a cpu or memory request or limit beside them")]
    HugePagesAlone,
    /// A field the Kubernetes API does not have (strict field validation).
    #[error("unknown field {field:?}{}", hint.as_deref().unwrap_or_default())]
    UnknownField {
        /// The field.
        field: String,
        /// `; did you mean "x"?` or the fields known there.
        hint: Option<String>,
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
                if let Some((path, problem)) = fields::unknown_list_field(&map) {
                    return Err(doc.err(&path, problem));
                }
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
        // Strict field validation, reported after the typed reader's own
        // errors (a wrong type is named as such, not as an unknown field).
        let unknown = fields::unknown_pod_field(&value, prefix);
        let read = pod::read_pod(doc, value, prefix)?;
        if let Some((path, problem)) = unknown {
            return Err(doc.err(&path, problem));
        }
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
            "{requests: {cpu: 2, memory: 1e3, kubernetes.io/a: 0.5, kubernetes.io/b: .5, kubernetes.io/c: \" 7 \", kubernetes.io/d: null, kubernetes.io/e: 1E3, kubernetes.io/f: 0x10}}",
        ));
        assert_eq!(
            p[0].containers[0].requests,
            list(&[
                ("cpu", 2000),
                ("kubernetes.io/a", 1),
                ("kubernetes.io/b", 1),
                ("kubernetes.io/c", 7),
                ("kubernetes.io/d", 0),
                ("kubernetes.io/e", 1000),
                ("kubernetes.io/f", 16),
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
            qos_of(&with_resources("{requests: {cpu: 1, memory: 1Gi, example.com/widget: 3}, limits: {cpu: 1, memory: 1Gi, example.com/widget: 3}}")),
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

    /// What the API server refuses in resources, refused with its path.
    #[test]
    fn resources_are_validated_as_the_api_server_does() {
        let table: &[(&str, &str)] = &[
            ("{limits: {example.com/widget: \"0.5\"}}", "spec.containers[0].resources.limits[example.com/widget]: invalid value \"0.5\": must be an integer (an extended resource is counted in whole units)"),
            ("{limits: {example.com/widget: 500m}}", "spec.containers[0].resources.limits[example.com/widget]: invalid value \"500m\": must be an integer (an extended resource is counted in whole units)"),
            ("{limits: {memory: 1Gi, hugepages-2Mi: 3Mi}}", "spec.containers[0].resources.limits.hugepages-2Mi: invalid value \"3Mi\": 3Mi is not positive integer multiple of hugepages-2Mi"),
            ("{limits: {memory: 1Gi, hugepages-1Gi: 1.5Gi}}", "spec.containers[0].resources.limits.hugepages-1Gi: invalid value \"1.5Gi\": 1.5Gi is not positive integer multiple of hugepages-1Gi"),
            ("{limits: {hugepages-2Mi: 4Mi}}", "spec.containers[0].resources: hugepages require a cpu or memory request or limit beside them"),
            ("{requests: {example.com/widget: 1}}", "spec.containers[0].resources.requests[example.com/widget]: a limit must be set too: extended resources and hugepages cannot be overcommitted (set limits to the same quantity, or only limits)"),
            ("{requests: {example.com/widget: 1}, limits: {example.com/widget: 2}}", "spec.containers[0].resources.requests[example.com/widget]: request \"1\" must equal the limit \"2\": extended resources and hugepages cannot be overcommitted"),
            ("{limits: {widgets: 1}}", "spec.containers[0].resources.limits.widgets: \"widgets\" is not a resource a container can request: use a standard resource (cpu, memory, ephemeral-storage, hugepages-<page size>) or an extended resource with a domain (example.com/widgets)"),
        ];
        for (resources, want) in table {
            assert_eq!(
                err(&with_resources(resources)),
                format!("t.yaml: document 1: {want}"),
                "{resources}"
            );
        }
        // Whole widgets, whole pages, requests defaulted from limits: fine.
        let ok = pods(&with_resources(
            "{limits: {example.com/widget: 2, memory: 1Gi, hugepages-2Mi: 6Mi}}",
        ));
        assert_eq!(ok[0].containers[0].requests["hugepages-2Mi"], 6 << 20);
    }

    /// Unknown fields are refused with their path, and a near miss is named.
    #[test]
    fn unknown_fields_are_refused_as_kubectl_strict_validation_does() {
        let table: &[(&str, &str)] = &[
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {limit: {cpu: 1}}}]}\n", "spec.containers[0].resources.limit: unknown field \"limit\"; did you mean \"limits\"?"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resource: {}}]}\n", "spec.containers[0].resource: unknown field \"resource\"; did you mean \"resources\"?"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}], nodeSelectr: {}}\n", "spec.nodeSelectr: unknown field \"nodeSelectr\"; did you mean \"nodeSelector\"?"),
            ("kind: Pod\nmetadata: {name: p, lables: {}}\nspec: {containers: [{name: a}]}\n", "metadata.lables: unknown field \"lables\"; did you mean \"labels\"?"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {}, foo: 1}}]}\n", "spec.containers[0].resources.foo: unknown field \"foo\" (the fields here: claims, limits, requests)"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, volumeMounts: [{name: v, mountPath: /x, readonly: true}]}]}\n", "spec.containers[0].volumeMounts[0].readonly: unknown field \"readonly\"; did you mean \"readOnly\"?"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}]}\nspecs: {}\n", "specs: unknown field \"specs\"; did you mean \"spec\"?"),
            ("kind: List\nitem: []\n", "item: unknown field \"item\"; did you mean \"items\"?"),
            ("kind: List\nitems: [{kind: Pod, metadata: {name: p}, spec: {containers: [{name: a, imagePullPolicy: Always, imag: x}]}}]\n", "items[0].spec.containers[0].imag: unknown field \"imag\"; did you mean \"image\"?"),
        ];
        for (text, want) in table {
            assert_eq!(err(text), format!("t.yaml: document 1: {want}"), "{text}");
        }
        // Maps take any key, status is the cluster's, and every field of a
        // real pod is known (a volume, probes, affinity, tolerations, ...).
        let real = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {any/key: v}\n  annotations: {x.io/y: z}\n  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: r, uid: u, controller: true, blockOwnerDeletion: true}]\nspec:\n  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: k, operator: In, values: [a]}]}]}}}\n  tolerations: [{key: k, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}]\n  volumes: [{name: v, configMap: {name: c, items: [{key: a, path: b}]}}, {name: e, emptyDir: {medium: Memory, sizeLimit: 1Gi}}]\n  containers:\n  - name: a\n    image: x\n    env: [{name: A, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]\n    livenessProbe: {httpGet: {path: /, port: 8080}, initialDelaySeconds: 3}\n    securityContext: {capabilities: {drop: [ALL]}, runAsNonRoot: true}\n    resources: {limits: {cpu: 1, memory: 1Gi}}\nstatus: {phase: Running, someFieldOfANewerCluster: 1}\n";
        assert_eq!(pods(real)[0].qos, QosClass::Guaranteed);
    }

    #[test]
    fn key_paths() {
        assert_eq!(key_path("r", "cpu"), "r.cpu");
        assert_eq!(key_path("r", "hugepages-2Mi"), "r.hugepages-2Mi");
        assert_eq!(key_path("r", "nvidia.com/gpu"), "r[nvidia.com/gpu]");
        assert_eq!(join("", "kind"), "kind");
    }
}
