//! Reading a parsed JSON value the way Go's `encoding/json` fills the device
//! plugin's structs, so every config the plugin accepts reads the same here.
//!
//! What Go does and this module reproduces:
//! * an object key selects the struct field with exactly that name, else the
//!   field whose name equals it under case folding (`"IsRdma"` and
//!   `"NEEDVHOSTNET"` are `isRdma` and `needVhostNet`; the SR-IOV network
//!   operator writes such keys);
//! * when two keys select the same field, the later one wins;
//! * `null` leaves a field at its zero value: `""`, `false`, an empty list,
//!   no map.
//!
//! Go ignores keys that select no field; the callers of this module refuse
//! them instead (see [`Fields::unknown`]).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Whether `a` and `b` are equal under simple case folding, as Go's
/// `strings.EqualFold` (and `encoding/json`'s key matching) decide it: ASCII
/// letters match either case, and so do `ſ`/`s` and the Kelvin sign/`k`;
/// other characters match when their single-character lower cases are equal.
pub fn fold_eq(a: &str, b: &str) -> bool {
    let mut x = a.chars();
    let mut y = b.chars();
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(c), Some(d)) if fold(c) == fold(d) => {}
            _ => return false,
        }
    }
}

fn fold(c: char) -> char {
    match c {
        '\u{017f}' => 's',
        '\u{212a}' => 'k',
        c if c.is_ascii() => c.to_ascii_lowercase(),
        c => {
            let mut lower = c.to_lowercase();
            match (lower.next(), lower.next()) {
                (Some(l), None) => l,
                _ => c,
            }
        }
    }
}

/// The keys of one JSON object matched to a struct's field names.
#[derive(Debug)]
pub struct Fields<'a> {
    names: &'static [&'static str],
    values: Vec<Option<&'a Value>>,
    unknown: Vec<&'a str>,
}

impl<'a> Fields<'a> {
    /// Match `object`'s keys to `names` (the struct's JSON field names) as Go
    /// does: exact name first, then case-folded; a later key for the same
    /// field replaces an earlier one.
    pub fn match_keys(object: &'a Map<String, Value>, names: &'static [&'static str]) -> Self {
        let mut values = vec![None; names.len()];
        let mut unknown = Vec::new();
        for (key, value) in object {
            let field = names
                .iter()
                .position(|n| n == key)
                .or_else(|| names.iter().position(|n| fold_eq(n, key)));
            match field {
                Some(i) => {
                    if values[i].is_some() {
                        tracing::warn!(
                            key = %key,
                            field = names[i],
                            "JSON object sets the same field twice; the later key wins, as in the device plugin"
                        );
                    }
                    values[i] = Some(value);
                }
                None => unknown.push(key.as_str()),
            }
        }
        Fields {
            names,
            values,
            unknown,
        }
    }

    /// The value given for field `name` (`None` when absent).
    ///
    /// # Panics
    /// When `name` is not one of the names the fields were matched against
    /// (a programming error, not an input error).
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        let i = self
            .names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("field {name} is not one of {:?}", self.names));
        self.values[i]
    }

    /// The keys that matched no field, in the object's order.
    pub fn unknown(&self) -> &[&'a str] {
        &self.unknown
    }
}

/// A JSON value of the wrong type for a Go field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    /// Where inside the value (`""`, `"[2]"`, `".token"`), appended to the
    /// field's own path by the caller.
    pub at: String,
    /// What the field takes.
    pub expected: &'static str,
    /// What the JSON had.
    pub found: &'static str,
}

impl std::fmt::Display for TypeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "expected {}, found {}", self.expected, self.found)
    }
}

/// How a JSON value is described in messages.
pub fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Whether a value changes anything when Go decodes it into a field:
/// `null`, `false`, `""`, `[]` and `{}` leave the field as it was.
pub fn has_effect(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Bool(true) | Value::Number(_) => true,
    }
}

fn type_error(at: String, expected: &'static str, value: &Value) -> TypeError {
    TypeError {
        at,
        expected,
        found: describe(value),
    }
}

/// A Go `string` field (`null` is `""`).
pub fn string(value: Option<&Value>) -> Result<String, TypeError> {
    match value {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(type_error(String::new(), "a string", other)),
    }
}

/// A Go `bool` field (`null` is `false`).
pub fn boolean(value: Option<&Value>) -> Result<bool, TypeError> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(type_error(String::new(), "true or false", other)),
    }
}

/// A Go `[]string` field (`null` is empty, a `null` element is `""`).
pub fn string_list(value: Option<&Value>) -> Result<Vec<String>, TypeError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Null => Ok(String::new()),
                Value::String(s) => Ok(s.clone()),
                other => Err(type_error(format!("[{i}]"), "a string", other)),
            })
            .collect(),
        Some(other) => Err(type_error(String::new(), "a list of strings", other)),
    }
}

/// Go's `map[string]map[string]string`.
pub type StringMaps = BTreeMap<String, BTreeMap<String, String>>;

/// A Go `map[string]map[string]string` field: `None` for an absent or `null`
/// map (Go's nil map, which is not the same as an empty one).
pub fn string_map_map(value: Option<&Value>) -> Result<Option<StringMaps>, TypeError> {
    let object = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(object)) => object,
        Some(other) => {
            return Err(type_error(
                String::new(),
                "an object of objects of strings",
                other,
            ))
        }
    };
    let mut out = BTreeMap::new();
    for (key, inner) in object {
        let mut map = BTreeMap::new();
        match inner {
            Value::Null => {}
            Value::Object(inner) => {
                for (k, v) in inner {
                    match v {
                        Value::Null => map.insert(k.clone(), String::new()),
                        Value::String(s) => map.insert(k.clone(), s.clone()),
                        other => {
                            return Err(type_error(format!(".{key}.{k}"), "a string", other));
                        }
                    };
                }
            }
            other => return Err(type_error(format!(".{key}"), "an object of strings", other)),
        }
        out.insert(key.clone(), map);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fold_eq_matches_go_equal_fold() {
        let table = [
            ("isRdma", "IsRdma", true),
            ("needVhostNet", "NEEDVHOSTNET", true),
            ("pfNames", "pfnames", true),
            ("pfNames", "pfName", false),
            ("pfNames", "pfNamesX", false),
            ("s", "\u{017f}", true),
            ("k", "\u{212a}", true),
            ("ens2f0", "ENS2F0", true),
            ("0000:af:00.0", "0000:AF:00.0", true),
            ("", "", true),
            ("a", "", false),
        ];
        for (a, b, want) in table {
            assert_eq!(fold_eq(a, b), want, "fold_eq({a:?}, {b:?})");
            assert_eq!(fold_eq(b, a), want, "fold_eq({b:?}, {a:?})");
        }
    }

    const NAMES: &[&str] = &["vendors", "isRdma", "needVhostNet"];

    #[test]
    fn keys_match_exactly_then_folded_and_the_later_key_wins() {
        let v =
            json!({"Vendors": ["8086"], "IsRdma": false, "isrdma": true, "pKeys": ["0x1"], "x": 1});
        let fields = Fields::match_keys(v.as_object().unwrap(), NAMES);
        assert_eq!(fields.get("vendors"), Some(&json!(["8086"])));
        assert_eq!(fields.get("isRdma"), Some(&json!(true)));
        assert_eq!(fields.get("needVhostNet"), None);
        assert_eq!(fields.unknown(), ["pKeys", "x"]);
    }

    #[test]
    fn null_is_the_zero_value() {
        assert_eq!(string(Some(&Value::Null)), Ok(String::new()));
        assert_eq!(string(None), Ok(String::new()));
        assert_eq!(boolean(Some(&Value::Null)), Ok(false));
        assert_eq!(string_list(Some(&Value::Null)), Ok(vec![]));
        assert_eq!(
            string_list(Some(&json!(["a", null]))),
            Ok(vec!["a".to_owned(), String::new()])
        );
        assert_eq!(string_map_map(Some(&Value::Null)), Ok(None));
        assert_eq!(string_map_map(Some(&json!({}))), Ok(Some(BTreeMap::new())));
    }

    #[test]
    fn wrong_types_say_where_and_what() {
        let e = string_list(Some(&json!(["a", 7]))).unwrap_err();
        assert_eq!(
            (e.at.as_str(), e.to_string()),
            ("[1]", "expected a string, found a number".to_owned())
        );
        let e = string_list(Some(&json!("8086"))).unwrap_err();
        assert_eq!(e.to_string(), "expected a list of strings, found a string");
        let e = boolean(Some(&json!("true"))).unwrap_err();
        assert_eq!(e.to_string(), "expected true or false, found a string");
        let e = string(Some(&json!(["x"]))).unwrap_err();
        assert_eq!(e.to_string(), "expected a string, found a list");
        let e = string_map_map(Some(&json!({"*": {"token": 5}}))).unwrap_err();
        assert_eq!((e.at.as_str(), e.found), (".*.token", "a number"));
        let e = string_map_map(Some(&json!({"*": "x"}))).unwrap_err();
        assert_eq!((e.at.as_str(), e.expected), (".*", "an object of strings"));
    }

    #[test]
    fn has_effect_is_false_for_zero_values() {
        for v in [json!(null), json!(false), json!(""), json!([]), json!({})] {
            assert!(!has_effect(&v), "{v}");
        }
        for v in [
            json!(true),
            json!("x"),
            json!([""]),
            json!({"a": 1}),
            json!(0),
        ] {
            assert!(has_effect(&v), "{v}");
        }
    }
}
