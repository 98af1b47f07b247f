//! Manifest input: bytes with a size limit, UTF-8 text, and the documents in
//! it (YAML 1.2 or JSON), each parsed once into a `serde_json::Value` under a
//! node budget; then typed deserialization of a document's fields with the
//! field path of any error.
//!
//! Parser choice (evaluated on real manifests: the Kubernetes docs'
//! examples and the SR-IOV network device plugin's `docs/` and
//! `deployments/`, see `tests/fixtures/manifests/README.md`): serde-saphyr
//! with granit-parser 2.2 reads every file of the corpus, including
//! under-indented multi-line quoted scalars that kubectl (go-yaml, a libyaml
//! port) accepts; yaml-rust2 0.13 and saphyr 0.3 refuse 14 of them
//! ("invalid indentation in quoted scalar"); the libyaml ports
//! (serde_yaml_ng, serde_norway) read them too but are YAML 1.1 and unsafe
//! code. serde-saphyr also enforces a resource budget (the `MAX_YAML_*` constants)
//! against alias and nesting bombs.

use std::io::Read;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ManifestError;

/// The largest manifest input read from a file or standard input: 3 MiB,
/// the Kubernetes API server's request size limit.
pub const MAX_MANIFEST_BYTES: u64 = 3 * 1024 * 1024;

/// Nesting depth a YAML document may reach (a Pod needs about 15).
pub(crate) const MAX_YAML_DEPTH: usize = 64;

/// YAML nodes one document may hold, aliases expanded.
pub(crate) const MAX_YAML_NODES: usize = 500_000;

/// Scalar bytes one document may hold, aliases expanded.
pub(crate) const MAX_YAML_SCALAR_BYTES: usize = 4 * MAX_MANIFEST_BYTES as usize;

/// Documents one input may hold.
pub(crate) const MAX_YAML_DOCUMENTS: usize = 10_000;

/// Events an alias may replay, over the whole input.
pub(crate) const MAX_YAML_ALIAS_EVENTS: usize = 100_000;

/// Reads all of `reader` (at most [`MAX_MANIFEST_BYTES`]) as UTF-8 text;
/// `origin` names it in errors.
pub(super) fn read_text(reader: impl Read, origin: &str) -> Result<String, ManifestError> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| ManifestError::Read {
            path: origin.to_string(),
            error,
        })?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge {
            origin: origin.to_string(),
            limit: MAX_MANIFEST_BYTES,
        });
    }
    String::from_utf8(bytes).map_err(|e| ManifestError::NotUtf8 {
        origin: origin.to_string(),
        offset: e.utf8_error().valid_up_to(),
    })
}

/// The serde-saphyr options: the node budget, duplicate keys refused, no
/// comment capture, non-finite floats kept as text.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        with_snippet: false,
        emit_comments: false,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        budget: serde_saphyr::budget! {
            max_depth: MAX_YAML_DEPTH,
            max_nodes: MAX_YAML_NODES,
            max_total_scalar_bytes: MAX_YAML_SCALAR_BYTES,
            max_documents: MAX_YAML_DOCUMENTS,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_YAML_ALIAS_EVENTS,
        },
    }
}

/// The non-empty documents of `text`, in order.
///
/// Text that starts with `{` or `[` is first read as JSON: one value or
/// several in a row (as `jq` prints them). Each JSON value is then parsed by
/// the YAML parser (JSON is YAML), which refuses duplicate keys and applies
/// the budget. Anything else, and JSON-looking text that is not JSON (YAML
/// flow style), is read as YAML, `---`-separated documents.
pub(super) fn documents(text: &str, origin: &str) -> Result<Vec<Value>, ManifestError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let syntax = |language: &'static str, message: String| ManifestError::Syntax {
        origin: origin.to_string(),
        language,
        message,
    };
    let yaml = |text: &str| serde_saphyr::from_multiple_with_options::<Value>(text, yaml_options());
    if text.trim_start().starts_with(['{', '[']) {
        let split: Result<Vec<&serde_json::value::RawValue>, _> =
            serde_json::Deserializer::from_str(text)
                .into_iter::<&serde_json::value::RawValue>()
                .collect();
        return match split {
            Ok(raws) => {
                let mut out = Vec::with_capacity(raws.len());
                for (i, raw) in raws.iter().enumerate() {
                    let docs = yaml(raw.get()).map_err(|e| {
                        let message = one_line(&e.to_string());
                        syntax(
                            "JSON",
                            if raws.len() > 1 {
                                format!("value {}: {message}", i + 1)
                            } else {
                                message
                            },
                        )
                    })?;
                    out.extend(docs.into_iter().filter(|d| !d.is_null()));
                }
                Ok(out)
            }
            Err(json_error) => match yaml(text) {
                Ok(docs) => Ok(docs.into_iter().filter(|d| !d.is_null()).collect()),
                Err(_) => Err(syntax("JSON", json_error.to_string())),
            },
        };
    }
    match yaml(text) {
        Ok(docs) => Ok(docs.into_iter().filter(|d| !d.is_null()).collect()),
        Err(e) => Err(syntax("YAML", one_line(&e.to_string()))),
    }
}

/// A parser message on one line, without advice meant for programmers.
fn one_line(message: &str) -> String {
    message
        .replace(", set DuplicateKeyPolicy in Options if acceptable", "")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A typed deserialization error: the field path (`spec.containers[0].name`,
/// map keys that are not plain names in brackets) and the message.
#[derive(Debug)]
pub(super) struct FieldError {
    pub(super) path: String,
    pub(super) message: String,
}

/// Deserialize a document's value into `T`, naming the field of any error.
pub(super) fn typed<T: DeserializeOwned>(value: Value) -> Result<T, FieldError> {
    // The path is tracked only to name a field that failed: a value that
    // reads is read once without it (this runs on every admission).
    if let Ok(t) = T::deserialize(&value) {
        return Ok(t);
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut path = String::new();
        for segment in e.path().iter() {
            match segment {
                serde_path_to_error::Segment::Seq { index } => {
                    path.push_str(&format!("[{index}]"));
                }
                serde_path_to_error::Segment::Map { key } => path = super::key_path(&path, key),
                serde_path_to_error::Segment::Enum { variant } => {
                    path = super::key_path(&path, variant)
                }
                serde_path_to_error::Segment::Unknown => path.push_str(".?"),
            }
        }
        FieldError {
            path,
            message: e.inner().to_string(),
        }
    })
}
