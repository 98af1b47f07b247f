//! Kubernetes Pod manifests -> [`PodView`].
//!
//! Reads what people actually have: YAML or JSON (text starting with `{` or
//! `[` is read as JSON, one object or several in a row as `jq` prints them;
//! anything else as YAML, with serde-saphyr), several documents separated by
//! `---`, `kind: List`
//! or `kind: PodList` with the pods in `items` (what `kubectl get pods -o yaml`
//! prints), and full `kubectl get pod -o yaml` output with `status`,
//! `managedFields` and everything else (fields topomgr does not need are
//! ignored).
//!
//! # What is read
//!
//! - `metadata.name` (required), `metadata.namespace` (default `"default"`),
//!   `metadata.uid`. Without a uid the pod gets the stand-in uid
//!   `"<namespace>/<name>"`, so the same manifest always gets the same uid.
//! - `spec.initContainers` (an init container with `restartPolicy: Always` is
//!   a sidecar) and `spec.containers` (at least one), each with its `name` and
//!   `resources.requests` / `resources.limits`.
//!
//! # What is computed, as the API server and kubelet do
//!
//! - Defaulting: a resource with a limit and no request gets request = limit.
//! - Quantities: see [`crate::quantity`]; `cpu` is recorded in millicores,
//!   everything else in whole units (bytes for memory and hugepages), both
//!   rounded up. Numbers are accepted where Kubernetes accepts them
//!   (`cpu: 2`, `cpu: 0.5`); a YAML float goes through a 64-bit float first,
//!   exactly as `kubectl` converts YAML to JSON. A null quantity is zero, as in
//!   Kubernetes' JSON decoding.
//! - The QoS class, with Kubernetes' rules: only `cpu` and `memory` count,
//!   init containers included, zero quantities ignored; Guaranteed when every
//!   container has non-zero cpu and memory limits and the pod's summed requests
//!   equal its summed limits; BestEffort when there is no non-zero cpu or
//!   memory request or limit at all; Burstable otherwise.
//!
//! # Checks
//!
//! A request larger than its limit, duplicate container names, a pod without
//! containers, a document of another kind and duplicate pod uids are errors,
//! as are malformed YAML and wrongly typed fields. Every error names the source
//! (the path as given, or `<stdin>`), the document (numbered from 1 in input
//! order; empty documents are skipped and not counted) and the field path, e.g.
//! `pods.yaml: document 2: spec.containers[0].resources.requests.cpu: invalid quantity "1.5.3"`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::Read;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use topomgr_sdk::{ContainerView, PodView, QosClass, ResourceList};

use crate::quantity::{resource_amount, Quantity, QuantityError};

/// The path argument that means "read standard input".
pub const STDIN_PATH: &str = "-";

/// How standard input is named in errors.
pub const STDIN_NAME: &str = "<stdin>";

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
    /// A field has the wrong YAML/JSON type.
    #[error("expected {expected}, found {found}")]
    Type {
        /// What the field must be (`"a string"`).
        expected: &'static str,
        /// What it is (`"a list"`).
        found: &'static str,
    },
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

/// Why manifests could not be turned into pods.
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
        /// The I/O error.
        #[source]
        error: std::io::Error,
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

/// Parse the pods in `text`, in order. `source` names the input in errors
/// (a file path, or `<stdin>`).
pub fn parse_pods(text: &str, source: &str) -> Result<Vec<PodView>, ManifestError> {
    let mut reader = PodReader::default();
    reader.parse(text, source)?;
    Ok(reader.pods)
}

/// Read and parse the pods of every path in order (`-` = standard input).
/// Pod uids must be unique across all of them.
pub fn read_pods(paths: &[String]) -> Result<Vec<PodView>, ManifestError> {
    if paths.is_empty() {
        return Err(ManifestError::NoInputs);
    }
    if paths.iter().filter(|p| *p == STDIN_PATH).count() > 1 {
        return Err(ManifestError::StdinTwice);
    }
    let mut reader = PodReader::default();
    for path in paths {
        let (bytes, origin) = if path == STDIN_PATH {
            let mut bytes = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut bytes)
                .map_err(|error| ManifestError::Read {
                    path: STDIN_NAME.to_string(),
                    error,
                })?;
            (bytes, STDIN_NAME)
        } else {
            let bytes = std::fs::read(path).map_err(|error| ManifestError::Read {
                path: path.clone(),
                error,
            })?;
            (bytes, path.as_str())
        };
        let text = String::from_utf8(bytes).map_err(|e| ManifestError::NotUtf8 {
            origin: origin.to_string(),
            offset: e.utf8_error().valid_up_to(),
        })?;
        reader.parse(&text, origin)?;
    }
    Ok(reader.pods)
}

/// Accumulates pods over several inputs, checking uids are unique.
#[derive(Default)]
struct PodReader {
    pods: Vec<PodView>,
    /// uid -> (namespace/name, where).
    uids: HashMap<String, (String, String)>,
}

impl PodReader {
    fn parse(&mut self, text: &str, origin: &str) -> Result<(), ManifestError> {
        let documents = parse_documents(text, origin)?;
        if documents.is_empty() {
            return Err(ManifestError::Empty {
                origin: origin.to_string(),
            });
        }
        let before = self.pods.len();
        for (index, document) in documents.iter().enumerate() {
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

    fn read_document(&mut self, doc: &Doc<'_>, node: &Node) -> Result<(), ManifestError> {
        let map = node.as_map().ok_or_else(|| {
            doc.err(
                "",
                Problem::Type {
                    expected: "a Kubernetes object (a mapping)",
                    found: node.kind_name(),
                },
            )
        })?;
        let kind = match get(map, "kind") {
            None => return Err(doc.err("kind", Problem::MissingKind)),
            Some(k) => doc.string("kind", k)?,
        };
        match kind {
            "Pod" => self.add_pod(doc, map, ""),
            "List" | "PodList" => {
                let items = match get(map, "items") {
                    None => return Ok(()),
                    Some(items) => items.as_seq().ok_or_else(|| {
                        doc.err(
                            "items",
                            Problem::Type {
                                expected: "a list",
                                found: items.kind_name(),
                            },
                        )
                    })?,
                };
                for (i, item) in items.iter().enumerate() {
                    let prefix = format!("items[{i}]");
                    let item_map = item.as_map().ok_or_else(|| {
                        doc.err(
                            &prefix,
                            Problem::Type {
                                expected: "a Pod (a mapping)",
                                found: item.kind_name(),
                            },
                        )
                    })?;
                    // PodList items straight from the API server carry no kind.
                    let item_kind = match get(item_map, "kind") {
                        None if kind == "PodList" => "Pod",
                        None => return Err(doc.err(&join(&prefix, "kind"), Problem::MissingKind)),
                        Some(k) => doc.string(&join(&prefix, "kind"), k)?,
                    };
                    if item_kind != "Pod" {
                        return Err(doc.err(
                            &join(&prefix, "kind"),
                            Problem::Kind {
                                kind: item_kind.to_string(),
                            },
                        ));
                    }
                    self.add_pod(doc, item_map, &prefix)?;
                }
                Ok(())
            }
            other => Err(doc.err(
                "kind",
                Problem::Kind {
                    kind: other.to_string(),
                },
            )),
        }
    }

    fn add_pod(
        &mut self,
        doc: &Doc<'_>,
        map: &[(Node, Node)],
        prefix: &str,
    ) -> Result<(), ManifestError> {
        let pod = read_pod(doc, map, prefix)?;
        let here = Location {
            origin: doc.origin.to_string(),
            document: doc.document,
            path: String::new(),
        }
        .to_string();
        let pod_name = format!("{}/{}", pod.view.namespace, pod.view.name);
        if let Some((other_pod, other)) = self.uids.get(&pod.view.uid) {
            let (uid, other_pod, other) = (pod.view.uid.clone(), other_pod.clone(), other.clone());
            let problem = if pod.stand_in_uid {
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
        self.uids.insert(pod.view.uid.clone(), (pod_name, here));
        self.pods.push(pod.view);
        Ok(())
    }
}

/// Parse `text` into its non-empty documents. Text that starts with `{` or
/// `[` is read as JSON first (one value, or several in a row as `jq` prints
/// them); anything else, and JSON-looking text that is not JSON, as YAML.
fn parse_documents(text: &str, origin: &str) -> Result<Vec<Node>, ManifestError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let syntax = |language: &'static str, message: String| ManifestError::Syntax {
        origin: origin.to_string(),
        language,
        message,
    };
    let yaml = || {
        let options = serde_saphyr::options! {
            with_snippet: false,
            non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        };
        serde_saphyr::from_multiple_with_options::<Node>(text, options)
    };
    if text.trim_start().starts_with(['{', '[']) {
        let json: Result<Vec<Node>, _> = serde_json::Deserializer::from_str(text)
            .into_iter::<Node>()
            .filter(|d| !matches!(d, Ok(Node::Null)))
            .collect();
        return match json {
            Ok(documents) => Ok(documents),
            Err(json_error) => yaml().map_err(|_| syntax("JSON", json_error.to_string())),
        };
    }
    yaml().map_err(|e| syntax("YAML", e.to_string()))
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
    fn string<'n>(&self, path: &str, node: &'n Node) -> Result<&'n str, ManifestError> {
        match node {
            Node::Str(s) => Ok(s),
            other => Err(self.err(
                path,
                Problem::Type {
                    expected: "a string",
                    found: other.kind_name(),
                },
            )),
        }
    }

    /// `node` as a mapping (null = empty), or a type error at `path`.
    fn map<'n>(
        &self,
        path: &str,
        node: Option<&'n Node>,
    ) -> Result<&'n [(Node, Node)], ManifestError> {
        match node {
            None => Ok(&[]),
            Some(Node::Map(entries)) => Ok(entries),
            Some(other) => Err(self.err(
                path,
                Problem::Type {
                    expected: "a mapping",
                    found: other.kind_name(),
                },
            )),
        }
    }

    /// `node` as a list (null = empty), or a type error at `path`.
    fn seq<'n>(&self, path: &str, node: Option<&'n Node>) -> Result<&'n [Node], ManifestError> {
        match node {
            None => Ok(&[]),
            Some(Node::Seq(items)) => Ok(items),
            Some(other) => Err(self.err(
                path,
                Problem::Type {
                    expected: "a list",
                    found: other.kind_name(),
                },
            )),
        }
    }
}

/// A pod read from a manifest.
struct ReadPod {
    view: PodView,
    stand_in_uid: bool,
}

/// The cpu and memory quantities of one container, for the QoS class.
#[derive(Default)]
struct QosInputs {
    requests: Vec<(&'static str, Quantity)>,
    limits: Vec<(&'static str, Quantity)>,
}

/// The resources that decide the QoS class.
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

fn read_pod(doc: &Doc<'_>, pod: &[(Node, Node)], prefix: &str) -> Result<ReadPod, ManifestError> {
    let metadata_path = join(prefix, "metadata");
    let metadata = doc.map(&metadata_path, get(pod, "metadata"))?;
    let name_path = join(&metadata_path, "name");
    let name = match get(metadata, "name") {
        None => return Err(doc.err(&name_path, Problem::Missing)),
        Some(n) => doc.string(&name_path, n)?,
    };
    if name.is_empty() {
        return Err(doc.err(&name_path, Problem::Empty));
    }
    let namespace = match get(metadata, "namespace") {
        None => "",
        Some(n) => doc.string(&join(&metadata_path, "namespace"), n)?,
    };
    let namespace = if namespace.is_empty() {
        "default"
    } else {
        namespace
    };
    let uid = match get(metadata, "uid") {
        None => "",
        Some(u) => doc.string(&join(&metadata_path, "uid"), u)?,
    };
    let (uid, stand_in_uid) = if uid.is_empty() {
        (format!("{namespace}/{name}"), true)
    } else {
        (uid.to_string(), false)
    };

    let spec_path = join(prefix, "spec");
    let spec = match get(pod, "spec") {
        None => return Err(doc.err(&spec_path, Problem::Missing)),
        Some(s) => doc.map(&spec_path, Some(s))?,
    };
    let mut names: HashMap<String, String> = HashMap::new();
    let mut qos_inputs = Vec::new();
    let mut read_list = |field: &str, init: bool| -> Result<Vec<ContainerView>, ManifestError> {
        let list_path = join(&spec_path, field);
        let items = doc.seq(&list_path, get(spec, field))?;
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let path = format!("{list_path}[{i}]");
            let (view, qos) = read_container(doc, item, &path, init)?;
            if let Some(first) = names.get(&view.name) {
                return Err(doc.err(
                    &join(&path, "name"),
                    Problem::DuplicateContainer {
                        name: view.name.clone(),
                        first: first.clone(),
                    },
                ));
            }
            names.insert(view.name.clone(), path);
            qos_inputs.push(qos);
            out.push(view);
        }
        Ok(out)
    };
    let init_containers = read_list("initContainers", true)?;
    let containers = read_list("containers", false)?;
    if containers.is_empty() {
        return Err(doc.err(&join(&spec_path, "containers"), Problem::NoContainers));
    }
    Ok(ReadPod {
        view: PodView::new(uid, name, namespace, qos_class(&qos_inputs))
            .with_init_containers(init_containers)
            .with_containers(containers),
        stand_in_uid,
    })
}

fn read_container(
    doc: &Doc<'_>,
    node: &Node,
    path: &str,
    init: bool,
) -> Result<(ContainerView, QosInputs), ManifestError> {
    let map = doc.map(path, Some(node))?;
    let name_path = join(path, "name");
    let name = match get(map, "name") {
        None => return Err(doc.err(&name_path, Problem::Missing)),
        Some(n) => doc.string(&name_path, n)?,
    };
    if name.is_empty() {
        return Err(doc.err(&name_path, Problem::Empty));
    }
    let sidecar = if init {
        let policy_path = join(path, "restartPolicy");
        match get(map, "restartPolicy") {
            None => false,
            Some(p) => match doc.string(&policy_path, p)? {
                "Always" => true,
                other => {
                    return Err(doc.err(
                        &policy_path,
                        Problem::RestartPolicy {
                            value: other.to_string(),
                        },
                    ))
                }
            },
        }
    } else {
        false
    };
    let resources_path = join(path, "resources");
    let resources = doc.map(&resources_path, get(map, "resources"))?;
    let requests_path = join(&resources_path, "requests");
    let limits_path = join(&resources_path, "limits");
    let mut requests = quantities(doc, &requests_path, get(resources, "requests"))?;
    let limits = quantities(doc, &limits_path, get(resources, "limits"))?;

    for (resource, (request_text, request)) in &requests {
        if let Some((limit_text, limit)) = limits.get(resource) {
            if request > limit {
                return Err(doc.err(
                    &key_path(&requests_path, resource),
                    Problem::RequestAboveLimit {
                        request: request_text.clone(),
                        limit: limit_text.clone(),
                    },
                ));
            }
        }
    }
    // API server defaulting: a limit without a request sets the request.
    for (resource, limit) in &limits {
        requests
            .entry(resource.clone())
            .or_insert_with(|| limit.clone());
    }

    let mut qos = QosInputs::default();
    for resource in QOS_RESOURCES {
        if let Some((_, q)) = requests.get(resource) {
            qos.requests.push((resource, *q));
        }
        if let Some((_, q)) = limits.get(resource) {
            qos.limits.push((resource, *q));
        }
    }
    // Limits first: a request defaulted from a bad limit is reported at the limit.
    let limits = amounts(doc, &limits_path, &limits)?;
    let view = ContainerView::new(name)
        .with_requests(amounts(doc, &requests_path, &requests)?)
        .with_limits(limits)
        .with_sidecar(sidecar);
    Ok((view, qos))
}

/// Resource name -> (text as written, quantity).
type Quantities = BTreeMap<String, (String, Quantity)>;

/// Read a `requests` / `limits` mapping.
fn quantities(doc: &Doc<'_>, path: &str, node: Option<&Node>) -> Result<Quantities, ManifestError> {
    let mut out = Quantities::new();
    for (key, value) in doc.map(path, node)? {
        let resource = match key {
            Node::Str(s) if !s.is_empty() => s.as_str(),
            Node::Str(_) => return Err(doc.err(&format!("{path}[\"\"]"), Problem::Empty)),
            other => {
                return Err(doc.err(
                    path,
                    Problem::Type {
                        expected: "resource names that are strings",
                        found: other.kind_name(),
                    },
                ))
            }
        };
        let field = key_path(path, resource);
        let text = match value {
            Node::Null => "0".to_string(),
            Node::Str(s) => s.trim().to_string(),
            Node::Int(i) => i.to_string(),
            Node::Float(f) => f.to_string(),
            other => {
                return Err(doc.err(
                    &field,
                    Problem::Type {
                        expected: "a quantity (a string or a number)",
                        found: other.kind_name(),
                    },
                ))
            }
        };
        let quantity = Quantity::parse(&text).map_err(|e| doc.err(&field, e.into()))?;
        out.insert(resource.to_string(), (text, quantity));
    }
    Ok(out)
}

/// Convert quantities to the amounts a [`ResourceList`] records.
fn amounts(
    doc: &Doc<'_>,
    path: &str,
    quantities: &Quantities,
) -> Result<ResourceList, ManifestError> {
    quantities
        .iter()
        .map(|(resource, (text, quantity))| {
            resource_amount(resource, *quantity, text)
                .map(|amount| (resource.clone(), amount))
                .map_err(|e| doc.err(&key_path(path, resource), e.into()))
        })
        .collect()
}

/// The pod's QoS class, computed as Kubernetes' `ComputePodQOS` does (without
/// pod-level resources): sums of non-zero cpu/memory requests and limits over
/// all containers, init containers included.
fn qos_class(containers: &[QosInputs]) -> QosClass {
    let mut requests: BTreeMap<&str, u128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, u128> = BTreeMap::new();
    let mut guaranteed = true;
    for c in containers {
        for (resource, q) in &c.requests {
            if !q.is_zero() {
                let sum = requests.entry(resource).or_insert(0);
                *sum = sum.saturating_add(q.nanos());
            }
        }
        let mut found = 0;
        for (resource, q) in &c.limits {
            if !q.is_zero() {
                found += 1;
                let sum = limits.entry(resource).or_insert(0);
                *sum = sum.saturating_add(q.nanos());
            }
        }
        if found < QOS_RESOURCES.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed
        && requests.len() == limits.len()
        && requests.iter().all(|(r, q)| limits.get(r) == Some(q))
    {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
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

/// The value of string key `key` in a mapping; a null value counts as absent.
fn get<'n>(map: &'n [(Node, Node)], key: &str) -> Option<&'n Node> {
    map.iter()
        .find(|(k, _)| matches!(k, Node::Str(s) if s == key))
        .map(|(_, v)| v)
        .filter(|v| !matches!(v, Node::Null))
}

/// A parsed YAML/JSON value, kept untyped so every field error can name its
/// path.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    fn kind_name(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool(_) => "a boolean",
            Node::Int(_) => "an integer",
            Node::Float(_) => "a number",
            Node::Str(_) => "a string",
            Node::Seq(_) => "a list",
            Node::Map(_) => "a mapping",
        }
    }

    fn as_map(&self) -> Option<&[(Node, Node)]> {
        match self {
            Node::Map(entries) => Some(entries),
            _ => None,
        }
    }

    fn as_seq(&self) -> Option<&[Node]> {
        match self {
            Node::Seq(items) => Some(items),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML or JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(i128::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Int(i128::from(v)))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Node, E> {
        Ok(Node::Int(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
        match i128::try_from(v) {
            Ok(i) => Ok(Node::Int(i)),
            Err(_) => Ok(Node::Str(v.to_string())),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Node, E> {
        Ok(Node::Str(String::from_utf8_lossy(v).into_owned()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries: Vec<(Node, Node)> = Vec::new();
        let mut keys = HashSet::new();
        while let Some((key, value)) = map.next_entry()? {
            if let Node::Str(k) = &key {
                if !keys.insert(k.clone()) {
                    return Err(de::Error::custom(format!("duplicate key {k:?}")));
                }
            }
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ("kind: Pod\nmetadata: {name: 5}\nspec: {containers: [{name: a}]}\n", "t.yaml: document 1: metadata.name: expected a string, found an integer"),
            ("kind: Pod\nmetadata: []\nspec: {containers: [{name: a}]}\n", "t.yaml: document 1: metadata: expected a mapping, found a list"),
            ("kind: Pod\nmetadata: {name: p, uid: [1]}\nspec: {containers: [{name: a}]}\n", "t.yaml: document 1: metadata.uid: expected a string, found a list"),
            ("kind: Pod\nmetadata: {name: p}\n", "t.yaml: document 1: spec: is required"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {}\n", "t.yaml: document 1: spec.containers: must list at least one container"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n", "t.yaml: document 1: spec.containers: must list at least one container"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: {name: a}}\n", "t.yaml: document 1: spec.containers: expected a list, found a mapping"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [a]}\n", "t.yaml: document 1: spec.containers[0]: expected a mapping, found a string"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{image: x}]}\n", "t.yaml: document 1: spec.containers[0].name: is required"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}, {name: a}]}\n", "t.yaml: document 1: spec.containers[1].name: duplicate container name \"a\" (also used by spec.containers[0])"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {initContainers: [{name: a}], containers: [{name: a}]}\n", "t.yaml: document 1: spec.containers[0].name: duplicate container name \"a\" (also used by spec.initContainers[0])"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: []}]}\n", "t.yaml: document 1: spec.containers[0].resources: expected a mapping, found a list"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {cpu: 1.5.3}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.requests.cpu: invalid quantity \"1.5.3\""),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {limits: {example.com/widget: -1}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.limits[example.com/widget]: invalid quantity \"-1\": must not be negative"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {limits: {cpu: true}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.limits.cpu: expected a quantity (a string or a number), found a boolean"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {limits: {cpu: 10P}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.limits.cpu: invalid quantity \"10P\": 10000000000000000000 millicores is larger than 9223372036854775807, the largest amount of CPU Kubernetes can represent"),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {cpu: 2}, limits: {cpu: 1}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.requests.cpu: request \"2\" is larger than the limit \"1\""),
            ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {1: 2}}}]}\n", "t.yaml: document 1: spec.containers[0].resources.requests: expected resource names that are strings, found an integer"),
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
            ("kind: Pod\nkind: Pod\n", "t.yaml: invalid YAML: duplicate mapping key: kind, set DuplicateKeyPolicy in Options if acceptable at line 2, column 1"),
            ("a: [1", "t.yaml: invalid YAML: unclosed bracket '[' at line 1, column 4"),
        ];
        for (text, want) in table {
            assert_eq!(err(text), *want, "input: {text}");
        }
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
            "t.yaml: invalid JSON: duplicate key \"kind\" at line 2 column 15"
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
