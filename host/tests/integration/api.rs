//! `docs/api/openapi.yaml` against the types of the JSON contract
//! (`topomgr_contract::api`, the NRT object of `topomgr_contract::nrt`, the SDK's `Machine`):
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
use topomgr_contract::api;
use topomgr_contract::nrt;
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
            // A map of strings (no properties of its own): one entry in the
            // maximal document, as a map the type leaves out when empty.
            let values = &schema["additionalProperties"];
            if max && schema.get("properties").is_none() && values["type"] == "string" {
                out.insert("key".to_owned(), instance(doc, values, max));
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

/// The check of one schema against one type: `(document, schema name,
/// pointer) -> problems`.
type Check = fn(&Value, &str, &str) -> Vec<String>;

/// Every object schema of the document (its name, a nested one's path
/// after a dot; its place under `/components/schemas/`) with its type.
const SCHEMAS: [(&str, &str, Check); 41] = [
    ("Error", "Error", check::<api::ErrorBody>),
    (
        "AdmissionRequest",
        "AdmissionRequest",
        check::<api::AdmissionRequest>,
    ),
    (
        "AdmissionRequest.attach",
        "AdmissionRequest/properties/attach",
        check::<api::AttachTo>,
    ),
    (
        "AdmissionRequest.devices",
        "AdmissionRequest/properties/devices",
        check::<api::ContainerDevices>,
    ),
    (
        "AdmissionRequest.devices.nodes",
        "AdmissionRequest/properties/devices/properties/nodes/items",
        check::<api::DeviceNode>,
    ),
    ("OwnerSpec", "OwnerSpec", check::<api::OwnerSpec>),
    ("PodView", "PodView", check::<sdk::PodView>),
    (
        "PodView.resources",
        "PodView/properties/resources",
        check::<sdk::PodResources>,
    ),
    (
        "ContainerView",
        "ContainerView",
        check::<sdk::ContainerView>,
    ),
    ("Health", "Health", check::<api::Health>),
    ("NriHealth", "NriHealth", check::<api::NriHealth>),
    (
        "ConflictReport",
        "ConflictReport",
        check::<api::ConflictReport>,
    ),
    ("Admissions", "Admissions", check::<api::Admissions>),
    ("PodList", "PodList", check::<api::PodList>),
    (
        "AttachRequest",
        "AttachRequest",
        check::<api::AttachRequest>,
    ),
    ("Attached", "Attached", check::<api::Attached>),
    ("Admission", "Admission", check::<api::Admission>),
    (
        "Admission.containers",
        "Admission/properties/containers/items",
        check::<api::ContainerAdmission>,
    ),
    ("Hint", "Hint", check::<sdk::TopologyHint>),
    ("Explains", "Explains", check::<api::Explains>),
    ("Explain", "Explain", check::<api::Explain>),
    (
        "Explain.steps",
        "Explain/properties/steps/items",
        check::<api::ExplainStep>,
    ),
    (
        "Explain.steps.merge",
        "Explain/properties/steps/items/properties/merge",
        check::<api::MergeSummary>,
    ),
    (
        "Explain.resizes",
        "Explain/properties/resizes/items",
        check::<api::ExplainResize>,
    ),
    (
        "Explain.resizes.resources",
        "Explain/properties/resizes/items/properties/resources/additionalProperties",
        check::<api::ResourceChange>,
    ),
    (
        "Explain.resizes.providers",
        "Explain/properties/resizes/items/properties/providers/additionalProperties",
        check::<api::ProviderResize>,
    ),
    (
        "Explain.resizes.providers.cpus",
        "Explain/properties/resizes/items/properties/providers/additionalProperties/properties/cpus",
        check::<api::CpuChange>,
    ),
    ("Amount", "Amount", check::<api::Amount>),
    ("Placement", "Placement", check::<api::Placement>),
    ("Machine", "Machine", check::<api::Machine>),
    (
        "Machine.numa_nodes",
        "Machine/properties/numa_nodes/items",
        check::<sdk::NumaNode>,
    ),
    (
        "Machine.numa_nodes.hugepages",
        "Machine/properties/numa_nodes/items/properties/hugepages/additionalProperties",
        check::<sdk::HugePages>,
    ),
    (
        "Machine.cpus",
        "Machine/properties/cpus/items",
        check::<sdk::Cpu>,
    ),
    (
        "Machine.pci_devices",
        "Machine/properties/pci_devices/items",
        check::<sdk::PciDevice>,
    ),
    (
        "Machine.pci_devices.sriov",
        "Machine/properties/pci_devices/items/properties/sriov",
        check::<sdk::Sriov>,
    ),
    (
        "NodeResourceTopology",
        "NodeResourceTopology",
        check::<nrt::NodeResourceTopology>,
    ),
    (
        "NodeResourceTopology.metadata",
        "NodeResourceTopology/properties/metadata",
        check::<nrt::ObjectMeta>,
    ),
    (
        "NodeResourceTopology.attributes",
        "NodeResourceTopology/properties/attributes/items",
        check::<nrt::Attribute>,
    ),
    (
        "NodeResourceTopology.zones",
        "NodeResourceTopology/properties/zones/items",
        check::<nrt::NrtZone>,
    ),
    (
        "NodeResourceTopology.zones.costs",
        "NodeResourceTopology/properties/zones/items/properties/costs/items",
        check::<nrt::Cost>,
    ),
    (
        "NodeResourceTopology.zones.resources",
        "NodeResourceTopology/properties/zones/items/properties/resources/items",
        check::<nrt::ResourceInfo>,
    ),
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
    let mut checked: Vec<&str> = SCHEMAS
        .iter()
        .map(|(name, ..)| *name)
        .filter(|name| !name.contains('.'))
        .collect();
    checked.sort_unstable();
    assert_eq!(
        names, checked,
        "every component schema is checked against its type"
    );
    let problems: Vec<String> = SCHEMAS
        .iter()
        .flat_map(|(name, at, check)| check(&doc, name, &format!("/components/schemas/{at}")))
        .collect();
    assert_eq!(problems, Vec::<String>::new());
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
            &"schema Health: field uptime is documented but topomgr_contract::api::Health has no such field"
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
            &"schema Health: field shared_pool of topomgr_contract::api::Health is not documented"
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
/// plugins), reading `stdin` when given; its exit code and output.
fn in_repo(args: &[&str], stdin: Option<&std::path::Path>) -> (i32, String, String) {
    common::repository_plugins();
    let mut cmd = std::process::Command::new(common::topomgr_bin());
    cmd.current_dir(common::workspace_root())
        .args(["--config", "topomgr.toml"])
        .args(args);
    if let Some(path) = stdin {
        cmd.stdin(std::fs::File::open(path).unwrap());
    }
    let out = cmd.output().expect("run topomgr");
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(out.stdout),
        text(out.stderr),
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
    let (code, out, err) = in_repo(&["topology", "--sysfs-root", sriov], None);
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
    let (code, out, err) = in_repo(&args, None);
    assert_eq!(code, 0, "{err}");
    let admitted: api::Admissions = same_through("admit", &out);
    assert!(admitted.pods.iter().any(|p| p.admitted));
    assert!(admitted.pods.iter().any(|p| !p.admitted));

    let mut args = vec!["explain", "-o", "json", "--sysfs-root", sys];
    args.extend(pods);
    let (code, out, err) = in_repo(&args, None);
    assert_eq!(code, 0, "{err}");
    let traces: api::Explains = same_through("explain", &out);
    assert_eq!(traces.pods.len(), admitted.pods.len());

    let merge = common::scratch_dir("api-cli").join("merge.json");
    std::fs::write(
        &merge,
        r#"{"numa_nodes": [0, 1], "distances": null, "policy": "best-effort", "options": {},
            "providers": [{"cpu": [{"affinity": [0], "preferred": true}]}]}"#,
    )
    .unwrap();
    let (code, out, err) = in_repo(&["merge"], Some(&merge));
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
        None,
    );
    assert_eq!(code, 0, "{err}");
    let allocation: api::ProviderAllocation = same_through("provider allocate", &out);
    assert_eq!(allocation.cpus.len(), 2);
}
