//! `docs/api/openapi.yaml` against the types of the JSON contract
//! (`topomgr::api`, the NRT object of `topomgr::nrt`, the SDK's `Machine`):
//! each object schema of the document and its type have the same
//! properties, the same required list, and read and write the same JSON.
//!
//! The check needs no schema generator (no derive on the types):
//!
//! - **property names**: serde's derive hands `deserialize_struct` the
//!   list of a struct's field names as JSON spells them (after `rename`,
//!   without `skip`ped fields); a probing deserializer reads that list.
//! - **required list**: the *minimal* document of a schema (its required
//!   properties only, `null` where nullable, empty strings, arrays and maps)
//!   must read into the type (else the type needs a property the document
//!   calls optional: serde names it) and write back unchanged (a property
//!   the type always writes but the document calls optional shows up; one
//!   the document requires but the type skips when empty goes missing).
//! - **shapes**: the *maximal* document (every property, one item per
//!   array, nested objects maximal too) must read and write back unchanged,
//!   so no documented property is dropped (the type lacks it) or changed.
//!
//! A mismatch fails naming the schema and the field path. What the daemon
//! and the CLI really answer is checked by `kubernetes.rs`
//! (`daemon_answers_match_the_openapi_document`): every captured answer
//! validates against the document and reads into its type and writes back
//! to the same JSON.

use std::fmt;

use serde::de::{DeserializeOwned, Visitor};
use serde::Serialize;
use serde_json::{json, Map, Value};
use topomgr::api;
use topomgr::nrt;
use topomgr_sdk as sdk;

use crate::common;

/// The document, parsed.
fn document() -> Value {
    let path = common::workspace_root().join("docs/api/openapi.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_str(&text).expect("openapi.yaml parses")
}

/// The error of [`FieldProbe`]: the field list it was after, or why there
/// is none.
#[derive(Debug)]
enum Probed {
    Fields(&'static [&'static str]),
    Other(String),
}

impl fmt::Display for Probed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Probed {}

impl serde::de::Error for Probed {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Probed::Other(msg.to_string())
    }
}

/// A deserializer that answers nothing and reports the field list a
/// derived `Deserialize` of a struct passes to it.
struct FieldProbe;

impl<'de> serde::Deserializer<'de> for FieldProbe {
    type Error = Probed;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Probed> {
        Err(Probed::Other("not a struct".into()))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Probed> {
        Err(Probed::Fields(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The JSON field names of struct `T`, sorted.
fn fields_of<T: DeserializeOwned>() -> Vec<String> {
    match T::deserialize(FieldProbe) {
        Err(Probed::Fields(f)) => {
            let mut f: Vec<String> = f.iter().map(|s| s.to_string()).collect();
            f.sort();
            f
        }
        Err(Probed::Other(e)) => panic!("{} is not a struct: {e}", std::any::type_name::<T>()),
        Ok(_) => unreachable!("the probe never yields a value"),
    }
}

/// The schema at JSON pointer `at`, `$ref`s followed.
fn schema_at<'a>(doc: &'a Value, at: &str) -> &'a Value {
    let mut s = doc
        .pointer(at)
        .unwrap_or_else(|| panic!("openapi.yaml has nothing at {at}"));
    while let Some(r) = s.get("$ref").and_then(Value::as_str) {
        s = doc
            .pointer(r.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("openapi.yaml: dangling $ref {r}"));
    }
    s
}

/// The minimal (`max == false`) or maximal document of `schema`.
fn instance(doc: &Value, schema: &Value, max: bool) -> Value {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => schema_at(doc, r.trim_start_matches('#')),
        None => schema,
    };
    if !max && schema["nullable"] == true {
        return Value::Null;
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    if let Some(first) = schema["oneOf"]
        .as_array()
        .or(schema["anyOf"].as_array())
        .and_then(|e| e.first())
    {
        return instance(doc, first, max);
    }
    match schema["type"].as_str() {
        Some("string") => schema.get("example").cloned().unwrap_or(json!("")),
        Some("integer") => json!(u8::from(max)),
        Some("boolean") => json!(max),
        Some("array") if max => json!([instance(doc, &schema["items"], true)]),
        Some("array") => json!([]),
        Some("object") | None => {
            let mut out = Map::new();
            let required: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for (name, prop) in schema["properties"].as_object().into_iter().flatten() {
                if max || required.contains(&name.as_str()) {
                    out.insert(name.clone(), instance(doc, prop, max));
                }
            }
            Value::Object(out)
        }
        Some(other) => panic!("no instance for type {other}"),
    }
}

/// The first difference between `want` (the document) and `got` (what the
/// type wrote), as `path: ...`.
fn difference(path: &str, want: &Value, got: &Value) -> Option<String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let at = format!("{path}.{k}");
                match g.get(k) {
                    None => {
                        return Some(format!(
                            "{at}: documented ({wv}) but the type does not write it"
                        ))
                    }
                    Some(gv) => {
                        if let Some(d) = difference(&at, wv, gv) {
                            return Some(d);
                        }
                    }
                }
            }
            g.iter().find(|(k, _)| !w.contains_key(*k)).map(|(k, v)| {
                format!(
                    "{path}.{k}: the type writes it ({v}) but the document does not have it here"
                )
            })
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => w
            .iter()
            .zip(g)
            .enumerate()
            .find_map(|(i, (wv, gv))| difference(&format!("{path}[{i}]"), wv, gv)),
        _ if want == got => None,
        _ => Some(format!("{path}: documented {want}, the type wrote {got}")),
    }
}

/// Every mismatch between the schema at `at` and type `T`.
fn check<T: DeserializeOwned + Serialize>(doc: &Value, name: &str, at: &str) -> Vec<String> {
    let schema = schema_at(doc, at);
    let mut problems = Vec::new();
    let mut documented: Vec<String> = schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    documented.sort();
    let declared = fields_of::<T>();
    for f in documented.iter().filter(|f| !declared.contains(f)) {
        problems.push(format!(
            "schema {name}: field {f} is documented but {} has no such field",
            std::any::type_name::<T>()
        ));
    }
    for f in declared.iter().filter(|f| !documented.contains(f)) {
        problems.push(format!(
            "schema {name}: field {f} of {} is not documented",
            std::any::type_name::<T>()
        ));
    }
    // A nullable schema (a field's) is the type's when it is not null.
    let mut own = schema.clone();
    if let Some(m) = own.as_object_mut() {
        m.remove("nullable");
    }
    for (which, max) in [("minimal", false), ("maximal", true)] {
        let want = instance(doc, &own, max);
        let de = serde_path_to_error::deserialize::<_, T>(&want);
        match de {
            Err(e) => problems.push(format!(
                "schema {name}: its {which} document does not read: field {}: {}",
                e.path(),
                e.inner()
            )),
            Ok(t) => {
                let got = serde_json::to_value(&t).unwrap();
                if let Some(d) = difference("", &want, &got) {
                    problems.push(format!("schema {name} ({which} document): field {d}"));
                }
            }
        }
    }
    problems
}

/// Every object schema of the document, with its type.
fn checks(doc: &Value) -> Vec<String> {
    let s = "/components/schemas";
    let mut p = Vec::new();
    p.extend(check::<api::ErrorBody>(doc, "Error", &format!("{s}/Error")));
    p.extend(check::<api::Health>(doc, "Health", &format!("{s}/Health")));
    p.extend(check::<api::Admissions>(
        doc,
        "Admissions",
        &format!("{s}/Admissions"),
    ));
    p.extend(check::<api::PodList>(
        doc,
        "PodList",
        &format!("{s}/PodList"),
    ));
    p.extend(check::<api::AttachRequest>(
        doc,
        "AttachRequest",
        &format!("{s}/AttachRequest"),
    ));
    p.extend(check::<api::Attached>(
        doc,
        "Attached",
        &format!("{s}/Attached"),
    ));
    p.extend(check::<api::Admission>(
        doc,
        "Admission",
        &format!("{s}/Admission"),
    ));
    p.extend(check::<api::ContainerAdmission>(
        doc,
        "Admission.containers",
        &format!("{s}/Admission/properties/containers/items"),
    ));
    p.extend(check::<sdk::TopologyHint>(
        doc,
        "Hint",
        &format!("{s}/Hint"),
    ));
    p.extend(check::<api::Explains>(
        doc,
        "Explains",
        &format!("{s}/Explains"),
    ));
    p.extend(check::<api::Explain>(
        doc,
        "Explain",
        &format!("{s}/Explain"),
    ));
    let step = format!("{s}/Explain/properties/steps/items");
    p.extend(check::<api::ExplainStep>(doc, "Explain.steps", &step));
    p.extend(check::<api::MergeSummary>(
        doc,
        "Explain.steps.merge",
        &format!("{step}/properties/merge"),
    ));
    let m = format!("{s}/Machine/properties");
    p.extend(check::<api::Machine>(
        doc,
        "Machine",
        &format!("{s}/Machine"),
    ));
    p.extend(check::<sdk::NumaNode>(
        doc,
        "Machine.numa_nodes",
        &format!("{m}/numa_nodes/items"),
    ));
    p.extend(check::<sdk::HugePages>(
        doc,
        "Machine.numa_nodes.hugepages",
        &format!("{m}/numa_nodes/items/properties/hugepages/additionalProperties"),
    ));
    p.extend(check::<sdk::Cpu>(
        doc,
        "Machine.cpus",
        &format!("{m}/cpus/items"),
    ));
    p.extend(check::<sdk::PciDevice>(
        doc,
        "Machine.pci_devices",
        &format!("{m}/pci_devices/items"),
    ));
    p.extend(check::<sdk::Sriov>(
        doc,
        "Machine.pci_devices.sriov",
        &format!("{m}/pci_devices/items/properties/sriov"),
    ));
    let n = format!("{s}/NodeResourceTopology/properties");
    p.extend(check::<nrt::NodeResourceTopology>(
        doc,
        "NodeResourceTopology",
        &format!("{s}/NodeResourceTopology"),
    ));
    p.extend(check::<nrt::ObjectMeta>(
        doc,
        "NodeResourceTopology.metadata",
        &format!("{n}/metadata"),
    ));
    p.extend(check::<nrt::Attribute>(
        doc,
        "NodeResourceTopology.attributes",
        &format!("{n}/attributes/items"),
    ));
    p.extend(check::<nrt::NrtZone>(
        doc,
        "NodeResourceTopology.zones",
        &format!("{n}/zones/items"),
    ));
    let z = format!("{n}/zones/items/properties");
    p.extend(check::<nrt::Cost>(
        doc,
        "NodeResourceTopology.zones.costs",
        &format!("{z}/costs/items"),
    ));
    p.extend(check::<nrt::ResourceInfo>(
        doc,
        "NodeResourceTopology.zones.resources",
        &format!("{z}/resources/items"),
    ));
    p
}

/// The component schemas [`checks`] covers: a new one needs its type there.
const CHECKED: [&str; 12] = [
    "Error",
    "Health",
    "Admissions",
    "PodList",
    "AttachRequest",
    "Attached",
    "Admission",
    "Hint",
    "Explains",
    "Explain",
    "Machine",
    "NodeResourceTopology",
];

#[test]
fn every_schema_of_the_openapi_document_is_its_type() {
    let doc = document();
    let mut names: Vec<&str> = doc["components"]["schemas"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    let mut checked = CHECKED.to_vec();
    checked.sort_unstable();
    assert_eq!(
        names, checked,
        "every component schema is checked against its type"
    );
    assert_eq!(checks(&doc), Vec::<String>::new());
}

#[test]
fn a_schema_that_differs_from_its_type_is_named_with_the_field() {
    let doc = document();
    let health = "/components/schemas/Health";
    // A documented field the type lacks.
    let mut d = doc.clone();
    d.pointer_mut(&format!("{health}/properties"))
        .unwrap()
        .as_object_mut()
        .unwrap()
        .insert("uptime".into(), json!({"type": "integer"}));
    let p = check::<api::Health>(&d, "Health", health);
    assert!(
        p.contains(
            &"schema Health: field uptime is documented but topomgr::api::Health has no such field"
                .to_owned()
        ),
        "{p:#?}"
    );
    assert!(
        p.contains(&"schema Health (maximal document): field .uptime: documented (1) but the type does not write it".to_owned()),
        "{p:#?}"
    );
    // A field of the type the document leaves out.
    let mut d = doc.clone();
    d.pointer_mut(&format!("{health}/properties"))
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove("shared_pool");
    let p = check::<api::Health>(&d, "Health", health);
    assert!(
        p.contains(
            &"schema Health: field shared_pool of topomgr::api::Health is not documented"
                .to_owned()
        ),
        "{p:#?}"
    );
    // Required in the type, optional in the document.
    let mut d = doc.clone();
    let required = d
        .pointer_mut(&format!("{health}/required"))
        .unwrap()
        .as_array_mut()
        .unwrap();
    required.retain(|f| f != "notes");
    let p = check::<api::Health>(&d, "Health", health);
    assert!(
        p.contains(
            &"schema Health: its minimal document does not read: field .: missing field `notes`"
                .to_owned()
        ),
        "{p:#?}"
    );
    // Optional (absent when empty) in the type, required in the document.
    let pci = "/components/schemas/Machine/properties/pci_devices/items";
    let mut d = doc.clone();
    d.pointer_mut(&format!("{pci}/required"))
        .unwrap()
        .as_array_mut()
        .unwrap()
        .push(json!("rdma"));
    let p = check::<sdk::PciDevice>(&d, "Machine.pci_devices", pci);
    assert!(
        p.contains(&"schema Machine.pci_devices (minimal document): field .rdma: documented ([]) but the type does not write it".to_owned()),
        "{p:#?}"
    );
}

/// Run `topomgr` in the repository (its `topomgr.toml`, the repository's
/// plugins), with `stdin`; its exit code and output.
fn in_repo(args: &[&str], stdin: &str) -> (i32, String, String) {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    common::repository_plugins();
    let mut child = Command::new(common::topomgr_bin())
        .current_dir(common::workspace_root())
        .args(["--config", "topomgr.toml"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run topomgr");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `text` (what the CLI printed) read as `T` and written back: the same JSON.
fn same_through<T: DeserializeOwned + Serialize>(what: &str, text: &str) -> T {
    let printed: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
    let typed: T = serde_path_to_error::deserialize(&printed)
        .unwrap_or_else(|e| panic!("{what}: at {}: {}", e.path(), e.inner()));
    let written = serde_json::to_value(&typed).unwrap();
    assert_eq!(difference("", &printed, &written), None, "{what}");
    // The printed key order is the types' field order.
    assert_eq!(written.to_string(), printed.to_string(), "{what}");
    typed
}

#[test]
fn cli_answers_read_into_their_types_and_write_back_the_same() {
    let sriov = "examples/machines/2s2n-sriov/sys";
    let (code, out, err) = in_repo(&["topology", "--sysfs-root", sriov], "");
    assert_eq!(code, 0, "{err}");
    let machine: api::Machine = same_through("topology", &out);
    assert!(
        machine
            .pci_devices
            .iter()
            .any(|d| d.vf_index.is_some() && d.physfn.is_some()),
        "the SR-IOV machine has VFs, so the optional fields are exercised"
    );

    let sys = "examples/machines/2s4n/sys";
    let pods = [
        "examples/pods/two-pods.yaml",
        "examples/pods/too-wide.yaml",
        "examples/pods/init-and-sidecar.yaml",
    ];
    let mut args = vec!["admit", "--sysfs-root", sys];
    args.extend(pods);
    let (code, out, err) = in_repo(&args, "");
    assert_eq!(code, 0, "{err}");
    let admitted: api::Admissions = same_through("admit", &out);
    assert!(admitted.pods.iter().any(|p| p.admitted));
    assert!(admitted.pods.iter().any(|p| !p.admitted));

    let mut args = vec!["explain", "-o", "json", "--sysfs-root", sys];
    args.extend(pods);
    let (code, out, err) = in_repo(&args, "");
    assert_eq!(code, 0, "{err}");
    let traces: api::Explains = same_through("explain", &out);
    assert_eq!(traces.pods.len(), admitted.pods.len());

    let merge = r#"{"numa_nodes": [0, 1], "distances": null, "policy": "best-effort", "options": {},
        "providers": [{"cpu": [{"affinity": [0], "preferred": true}]}]}"#;
    let (code, out, err) = in_repo(&["merge"], merge);
    assert_eq!(code, 0, "{err}");
    let decision: api::MergeDecision = same_through("merge", &out);
    assert!(decision.admit && decision.preferred);

    let (code, out, err) = in_repo(
        &[
            "provider",
            "cpu",
            "--sysfs-root",
            sys,
            "allocate",
            "--pod",
            "examples/pods/guaranteed-2cpu.yaml",
            "--container",
            "app",
            "--hint",
            r#"{"affinity":[1],"preferred":true}"#,
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let allocation: api::ProviderAllocation = same_through("provider allocate", &out);
    assert_eq!(allocation.cpus.len(), 2);
}
