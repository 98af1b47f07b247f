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

use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::{key_path, Problem};

/// The Pod's JSON schema: (the schema, its definitions).
static POD: LazyLock<(Value, Map<String, Value>)> = LazyLock::new(|| {
    let root = schemars::SchemaGenerator::default()
        .into_root_schema_for::<k8s_openapi::api::core::v1::Pod>();
    let mut root = serde_json::to_value(root).unwrap_or_default();
    let defs = match root.get_mut("$defs").map(Value::take) {
        Some(Value::Object(defs)) => defs,
        _ => Map::new(),
    };
    (root, defs)
});

/// The fields of a `List` or `PodList` besides its items.
const LIST_FIELDS: [&str; 4] = ["apiVersion", "kind", "metadata", "items"];

/// The schema `schema` refers to (following `$ref` into the definitions).
fn resolve<'a>(schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    let mut schema = schema;
    for _ in 0..16 {
        match schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
            .and_then(|name| defs.get(name))
        {
            Some(target) => schema = target,
            None => break,
        }
    }
    schema
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

fn unknown(field: &str, known: &Map<String, Value>) -> Problem {
    let hint = match closest(field, known.keys()) {
        Some(k) => Some(format!("; did you mean {k:?}?")),
        None if known.len() <= 12 => Some(format!(
            " (the fields here: {})",
            known
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        None => None,
    };
    Problem::UnknownField {
        field: field.to_owned(),
        hint,
    }
}

/// The first field of `value` (at `path`) that `schema` does not have.
fn walk(
    schema: &Value,
    defs: &Map<String, Value>,
    value: &Value,
    path: &str,
) -> Option<(String, Problem)> {
    let schema = resolve(schema, defs);
    match value {
        Value::Object(map) => {
            if let Some(known) = schema.get("properties").and_then(Value::as_object) {
                for (field, v) in map {
                    let here = key_path(path, field);
                    match known.get(field) {
                        Some(s) => {
                            if let Some(found) = walk(s, defs, v, &here) {
                                return Some(found);
                            }
                        }
                        None => return Some((here, unknown(field, known))),
                    }
                }
            } else if let Some(each) = schema.get("additionalProperties").filter(|s| s.is_object())
            {
                for (key, v) in map {
                    if let Some(found) = walk(each, defs, v, &key_path(path, key)) {
                        return Some(found);
                    }
                }
            }
            None
        }
        Value::Array(items) => {
            let each = schema.get("items")?;
            items
                .iter()
                .enumerate()
                .find_map(|(i, v)| walk(each, defs, v, &format!("{path}[{i}]")))
        }
        _ => None,
    }
}

/// The first field of the Pod `pod` (a document, or a List item at
/// `prefix`) that a Pod does not have: its path and the problem.
pub(crate) fn unknown_pod_field(pod: &Value, prefix: &str) -> Option<(String, Problem)> {
    let (schema, defs) = &*POD;
    let Value::Object(map) = pod else {
        return None;
    };
    let known = schema.get("properties").and_then(Value::as_object)?;
    for (field, v) in map {
        let here = key_path(prefix, field);
        if field == "status" {
            continue;
        }
        match known.get(field) {
            Some(s) => {
                if let Some(found) = walk(s, defs, v, &here) {
                    return Some(found);
                }
            }
            None => return Some((here, unknown(field, known))),
        }
    }
    None
}

/// The first field of a `List` document besides its items that a list does
/// not have.
pub(crate) fn unknown_list_field(list: &Map<String, Value>) -> Option<(String, Problem)> {
    let known: Map<String, Value> = LIST_FIELDS
        .iter()
        .map(|f| ((*f).to_owned(), Value::Null))
        .collect();
    list.keys()
        .find(|k| !known.contains_key(*k))
        .map(|k| (k.clone(), unknown(k, &known)))
}
