//! Strict field validation: a manifest field the Kubernetes API does not
//! have is refused with its path, as `kubectl`'s default
//! (`--validate=strict`, the API server's `fieldValidation=Strict`) refuses
//! it, instead of being ignored (a misspelled `limit:` made the pod
//! BestEffort).
//!
//! The fields are the Pod's as `k8s-openapi` defines them (its JSON schema,
//! generated once): every field of every Kubernetes object a Pod holds,
//! `metadata.managedFields` included. Two places are not checked: maps
//! (`labels`, `annotations`, resource lists: any key), and `status`, which
//! the cluster writes, topomgr never reads, and a newer cluster may extend.
//! A `List`'s own fields are `apiVersion`, `kind`, `metadata` and `items`.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::{key_path, Problem};

/// The Pod's fields, compiled once from its JSON schema: every `$ref`
/// resolved and each object type's fields in a sorted map, so that checking
/// a manifest hashes nothing and allocates no path until it finds an
/// unknown field (the check runs on every admission).
static POD: LazyLock<Shapes> = LazyLock::new(|| {
    let root = schemars::SchemaGenerator::default()
        .into_root_schema_for::<k8s_openapi::api::core::v1::Pod>();
    let mut root = serde_json::to_value(root).unwrap_or_default();
    let defs = match root.get_mut("$defs").map(Value::take) {
        Some(Value::Object(defs)) => defs,
        _ => Map::new(),
    };
    Shapes::compile(&root, &defs)
});

/// The fields of a `List` or `PodList` besides its items.
const LIST_FIELDS: [&str; 4] = ["apiVersion", "kind", "metadata", "items"];

/// What the schema says of one value.
#[derive(Debug, Clone, Copy)]
enum Node {
    /// An object with known fields: the index of its [`Object`].
    Object(usize),
    /// A map whose values are all of one kind (labels, resource lists).
    MapOf(usize),
    /// A list whose items are all of one kind.
    ListOf(usize),
    /// Anything: a scalar, or a schema that does not say.
    Any,
}

/// An object type's known fields.
#[derive(Debug, Default)]
struct Object {
    /// By name.
    fields: BTreeMap<String, Node>,
    /// The names in the schema's order (for messages).
    order: Vec<String>,
}

/// The compiled schema: the nodes that [`Node::MapOf`] and
/// [`Node::ListOf`] refer to, the objects, and the root.
#[derive(Debug)]
struct Shapes {
    objects: Vec<Object>,
    nodes: Vec<Node>,
    root: Node,
}

impl Shapes {
    fn compile(root: &Value, defs: &Map<String, Value>) -> Shapes {
        let mut c = Compiler {
            defs,
            shapes: Shapes {
                objects: Vec::new(),
                nodes: Vec::new(),
                root: Node::Any,
            },
            by_ref: HashMap::new(),
        };
        c.shapes.root = c.node(root);
        c.shapes
    }
}

/// Builds [`Shapes`]; a type met again under its `$ref` (recursive types)
/// is compiled once.
struct Compiler<'a> {
    defs: &'a Map<String, Value>,
    shapes: Shapes,
    by_ref: HashMap<&'a str, Node>,
}

impl<'a> Compiler<'a> {
    fn node(&mut self, schema: &'a Value) -> Node {
        let mut schema = schema;
        let mut named = None;
        for _ in 0..16 {
            let Some(name) = schema
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
            else {
                break;
            };
            let Some((name, target)) = self.defs.get_key_value(name) else {
                break;
            };
            if let Some(done) = self.by_ref.get(name.as_str()) {
                return *done;
            }
            named = Some(name.as_str());
            schema = target;
        }
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            let index = self.shapes.objects.len();
            self.shapes.objects.push(Object::default());
            let node = Node::Object(index);
            if let Some(name) = named {
                self.by_ref.insert(name, node);
            }
            let mut object = Object::default();
            for (field, s) in properties {
                let n = self.node(s);
                object.fields.insert(field.clone(), n);
                object.order.push(field.clone());
            }
            self.shapes.objects[index] = object;
            return node;
        }
        let (each, wrap): (&Value, fn(usize) -> Node) =
            if let Some(each) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                (each, Node::MapOf)
            } else if let Some(each) = schema.get("items") {
                (each, Node::ListOf)
            } else {
                if let Some(name) = named {
                    self.by_ref.insert(name, Node::Any);
                }
                return Node::Any;
            };
        // The slot is taken before the items are compiled, so a type whose
        // items are of its own type refers to itself instead of recursing.
        let index = self.shapes.nodes.len();
        self.shapes.nodes.push(Node::Any);
        let node = wrap(index);
        if let Some(name) = named {
            self.by_ref.insert(name, node);
        }
        self.shapes.nodes[index] = self.node(each);
        node
    }
}

/// The known field closest to `field`, when one is close.
fn closest<'a>(field: &str, known: impl Iterator<Item = &'a String>) -> Option<&'a str> {
    let lower = field.to_lowercase();
    known
        .map(|k| {
            let d = if k.to_lowercase() == lower {
                0
            } else {
                strsim::damerau_levenshtein(&lower, &k.to_lowercase())
            };
            (d, k)
        })
        .filter(|(d, k)| *d <= (k.len() / 3).max(1))
        .min()
        .map(|(_, k)| k.as_str())
}

fn unknown(field: &str, known: &[String]) -> Problem {
    let hint = match closest(field, known.iter()) {
        Some(k) => Some(format!("; did you mean {k:?}?")),
        None if known.len() <= 12 => Some(format!(" (the fields here: {})", known.join(", "))),
        None => None,
    };
    Problem::UnknownField {
        field: field.to_owned(),
        hint,
    }
}

/// One step of the path to a value: a field or map key, or a list index.
#[derive(Debug, Clone, Copy)]
enum Step<'v> {
    Key(&'v str),
    Index(usize),
}

/// `prefix` followed by `steps`, as error paths are written.
fn path_of(prefix: &str, steps: &[Step<'_>]) -> String {
    let mut path = prefix.to_owned();
    for step in steps {
        match step {
            Step::Key(k) => path = key_path(&path, k),
            Step::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    path
}

/// The first field of `value` (at `path`, kept as steps) that `node` does
/// not have: the field's name and its object's known fields.
fn walk<'v>(
    shapes: &'static Shapes,
    node: Node,
    value: &'v Value,
    path: &mut Vec<Step<'v>>,
) -> Option<(&'v str, &'static [String])> {
    match (node, value) {
        (Node::Object(i), Value::Object(map)) => walk_fields(shapes, i, map, path, |_| true),
        (Node::MapOf(n), Value::Object(map)) => {
            for (key, v) in map {
                path.push(Step::Key(key));
                if let Some(found) = walk(shapes, shapes.nodes[n], v, path) {
                    return Some(found);
                }
                path.pop();
            }
            None
        }
        (Node::ListOf(n), Value::Array(items)) => {
            for (i, v) in items.iter().enumerate() {
                path.push(Step::Index(i));
                if let Some(found) = walk(shapes, shapes.nodes[n], v, path) {
                    return Some(found);
                }
                path.pop();
            }
            None
        }
        _ => None,
    }
}

/// [`walk`] over the fields of `map` that `checked` selects, as object
/// `object`'s fields.
fn walk_fields<'v>(
    shapes: &'static Shapes,
    object: usize,
    map: &'v Map<String, Value>,
    path: &mut Vec<Step<'v>>,
    checked: impl Fn(&str) -> bool,
) -> Option<(&'v str, &'static [String])> {
    let object = &shapes.objects[object];
    for (field, v) in map.iter().filter(|(f, _)| checked(f)) {
        path.push(Step::Key(field));
        match object.fields.get(field.as_str()) {
            Some(n) => {
                if let Some(found) = walk(shapes, *n, v, path) {
                    return Some(found);
                }
            }
            None => return Some((field, &object.order)),
        }
        path.pop();
    }
    None
}

/// The first field of the Pod `pod` (a document, or a List item at
/// `prefix`) that a Pod does not have (its `status` is not checked): its
/// path and the problem.
pub(crate) fn unknown_pod_field(pod: &Value, prefix: &str) -> Option<(String, Problem)> {
    let shapes: &'static Shapes = &POD;
    let (Node::Object(root), Value::Object(map)) = (shapes.root, pod) else {
        return None;
    };
    let mut path = Vec::new();
    let (field, fields) = walk_fields(shapes, root, map, &mut path, |f| f != "status")?;
    Some((path_of(prefix, &path), unknown(field, fields)))
}

/// The first field of a `List` document besides its items that a list does
/// not have.
pub(crate) fn unknown_list_field(list: &Map<String, Value>) -> Option<(String, Problem)> {
    let field = list.keys().find(|k| !LIST_FIELDS.contains(&k.as_str()))?;
    let known: Vec<String> = LIST_FIELDS.iter().map(|f| (*f).to_owned()).collect();
    Some((field.clone(), unknown(field, &known)))
}
