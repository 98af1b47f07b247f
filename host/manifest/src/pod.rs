//! The pod model: the Pod fields topomgr reads, as typed serde structs, and
//! the host's [`Pod`] built from them with the API server's defaulting, the
//! checks, the QoS class and the effective requests and limits.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use serde_json::Value;
use topomgr_sdk::{ContainerView, PodResources, PodView, ResourceList};

use super::qos::{self, Containers, Demand, Quantities};
use super::reader;
use super::resources;
use super::{join, key_path, Doc, ManifestError, Problem};
use crate::quantity::{resource_amount, Quantity, QuantityError};

/// A pod as topomgr reads it from a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    /// What providers see. Its QoS class already accounts for pod-level
    /// resources, and `view.resources` is `spec.resources` after API
    /// defaulting, in canonical units (`cpu` in millicores, everything else
    /// in whole units); `None` when the manifest has none.
    pub view: PodView,
    /// What the pod as a whole requests and is limited to: Kubernetes'
    /// `PodRequests` / `PodLimits` (containers aggregated with the sidecar
    /// formula, pod-level `cpu`, `memory` and `hugepages-*` overriding), in
    /// canonical units.
    pub effective: PodResources,
}

/// A struct that must be written as a mapping (serde would also take a
/// list, positionally).
#[derive(Debug, Default)]
struct Mapping<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Mapping<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> de::Visitor<'de> for V<T> {
            type Value = Mapping<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Mapping<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Mapping)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// The fields of a Pod topomgr reads; everything else is ignored.
#[derive(Debug, Deserialize)]
struct PodObject {
    metadata: Option<Mapping<ObjectMeta>>,
    spec: Option<Mapping<PodSpec>>,
}

#[derive(Debug, Default, Deserialize)]
struct ObjectMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    init_containers: Option<Vec<Mapping<Container>>>,
    containers: Option<Vec<Mapping<Container>>>,
    resources: Option<Mapping<Requirements>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Container {
    name: Option<String>,
    restart_policy: Option<String>,
    resources: Option<Mapping<Requirements>>,
}

#[derive(Debug, Default, Deserialize)]
struct Requirements {
    requests: Option<BTreeMap<String, Option<QuantityText>>>,
    limits: Option<BTreeMap<String, Option<QuantityText>>>,
}

/// A quantity as written: a string, or a number (`cpu: 2`, `cpu: 0.5`; a
/// float goes through a 64-bit float first, as kubectl converts YAML to JSON).
#[derive(Debug)]
struct QuantityText(String);

impl<'de> Deserialize<'de> for QuantityText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = QuantityText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity (a string or a number)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<QuantityText, E> {
                Ok(QuantityText(v.trim().to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<QuantityText, E> {
                Ok(QuantityText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<QuantityText, E> {
                Ok(QuantityText(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<QuantityText, E> {
                Ok(QuantityText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Resource name -> (text as written, quantity), with the field path of the map.
struct Read {
    path: String,
    entries: BTreeMap<String, (String, Quantity)>,
}

impl Read {
    fn nanos(&self) -> Quantities {
        self.entries
            .iter()
            .map(|(k, (_, q))| (k.clone(), q.nanos()))
            .collect()
    }
}

/// A pod read from a document, and whether its uid is the stand-in.
pub(super) struct ReadPod {
    pub(super) pod: Pod,
    pub(super) stand_in_uid: bool,
}

/// Read the Pod in `value` (a document, or an item of a List at `prefix`).
pub(super) fn read_pod(
    doc: &Doc<'_>,
    value: Value,
    prefix: &str,
) -> Result<ReadPod, ManifestError> {
    let object: PodObject = reader::typed(value).map_err(|e| {
        doc.err(
            &format!(
                "{prefix}{}{}",
                if prefix.is_empty() || e.path.starts_with('[') {
                    ""
                } else {
                    "."
                },
                e.path
            ),
            Problem::Invalid(e.message),
        )
    })?;
    let metadata_path = join(prefix, "metadata");
    let metadata = object.metadata.unwrap_or_default().0;
    let name_path = join(&metadata_path, "name");
    let name = match metadata.name {
        None => return Err(doc.err(&name_path, Problem::Missing)),
        Some(n) if n.is_empty() => return Err(doc.err(&name_path, Problem::Empty)),
        Some(n) => n,
    };
    let namespace = match metadata.namespace {
        Some(n) if !n.is_empty() => n,
        _ => "default".to_string(),
    };
    let (uid, stand_in_uid) = match metadata.uid {
        Some(u) if !u.is_empty() => (u, false),
        _ => (format!("{namespace}/{name}"), true),
    };

    let spec_path = join(prefix, "spec");
    let Some(Mapping(spec)) = object.spec else {
        return Err(doc.err(&spec_path, Problem::Missing));
    };
    let mut names: HashMap<String, String> = HashMap::new();
    let mut read_list = |field: &str, list: Option<Vec<Mapping<Container>>>, init: bool| {
        let list_path = join(&spec_path, field);
        let mut out = Vec::new();
        for (i, Mapping(c)) in list.unwrap_or_default().into_iter().enumerate() {
            let path = format!("{list_path}[{i}]");
            let read = read_container(doc, c, &path, init)?;
            if let Some(first) = names.get(&read.view.name) {
                return Err(doc.err(
                    &join(&path, "name"),
                    Problem::DuplicateContainer {
                        name: read.view.name.clone(),
                        first: first.clone(),
                    },
                ));
            }
            names.insert(read.view.name.clone(), path);
            out.push(read);
        }
        Ok::<_, ManifestError>(out)
    };
    let init = read_list("initContainers", spec.init_containers, true)?;
    let app = read_list("containers", spec.containers, false)?;
    if app.is_empty() {
        return Err(doc.err(&join(&spec_path, "containers"), Problem::NoContainers));
    }

    // Pod-level resources, checked like a container's, then defaulted.
    let resources_path = join(&spec_path, "resources");
    let pod_level = match spec.resources {
        None => None,
        Some(Mapping(r)) => Some(read_requirements(doc, r, &resources_path, false)?),
    };
    let (init_q, app_q): (Vec<_>, Vec<_>) = (
        init.iter()
            .map(|c| (c.requests.nanos(), c.limits.nanos(), c.view.sidecar))
            .collect(),
        app.iter()
            .map(|c| (c.requests.nanos(), c.limits.nanos(), false))
            .collect(),
    );
    fn demand(v: &[(Quantities, Quantities, bool)]) -> Vec<Demand<'_>> {
        v.iter()
            .map(|(r, l, s)| Demand {
                requests: r,
                limits: l,
                sidecar: *s,
            })
            .collect()
    }
    let (init_d, app_d) = (demand(&init_q), demand(&app_q));
    let containers = Containers {
        init: &init_d,
        app: &app_d,
    };
    let pod_level = pod_level.map(|(req, lim)| {
        let (mut requests, mut limits) = (req.nanos(), lim.nanos());
        qos::default_pod_level(&mut requests, &mut limits, containers);
        (requests, limits)
    });
    let pod_level_ref = pod_level.as_ref().map(|(r, l)| (r, l));
    let qos_class = qos::qos_class(pod_level_ref, containers);
    let effective = PodResources::new(
        canonical(
            doc,
            &spec_path,
            &qos::pod_requests(pod_level_ref.map(|(r, _)| r), containers),
        )?,
        canonical(doc, &spec_path, &qos::pod_limits(pod_level_ref, containers))?,
    );
    let pod_resources = match &pod_level {
        None => None,
        Some((r, l)) => Some(PodResources::new(
            canonical(doc, &join(&resources_path, "requests"), r)?,
            canonical(doc, &join(&resources_path, "limits"), l)?,
        )),
    };
    Ok(ReadPod {
        pod: Pod {
            view: PodView::new(uid, name, namespace, qos_class)
                .with_init_containers(init.into_iter().map(|c| c.view).collect())
                .with_containers(app.into_iter().map(|c| c.view).collect())
                .with_resources(pod_resources),
            effective,
        },
        stand_in_uid,
    })
}

/// A container read from the manifest, with its exact quantities.
struct ReadContainer {
    view: ContainerView,
    requests: Read,
    limits: Read,
}

fn read_container(
    doc: &Doc<'_>,
    c: Container,
    path: &str,
    init: bool,
) -> Result<ReadContainer, ManifestError> {
    let name_path = join(path, "name");
    let name = match c.name {
        None => return Err(doc.err(&name_path, Problem::Missing)),
        Some(n) if n.is_empty() => return Err(doc.err(&name_path, Problem::Empty)),
        Some(n) => n,
    };
    let sidecar = match (init, c.restart_policy) {
        (false, _) | (true, None) => false,
        (true, Some(p)) if p == "Always" => true,
        (true, Some(value)) => {
            return Err(doc.err(
                &join(path, "restartPolicy"),
                Problem::RestartPolicy { value },
            ))
        }
    };
    let resources_path = join(path, "resources");
    let (mut requests, limits) = read_requirements(
        doc,
        c.resources.unwrap_or_default().0,
        &resources_path,
        true,
    )?;
    // API server defaulting: a limit without a request sets the request.
    for (resource, limit) in &limits.entries {
        requests
            .entries
            .entry(resource.clone())
            .or_insert_with(|| limit.clone());
    }
    // Limits first: a request defaulted from a bad limit is reported at the limit.
    let limits_view = amounts(doc, &limits)?;
    let view = ContainerView::new(name)
        .with_requests(amounts(doc, &requests)?)
        .with_limits(limits_view)
        .with_sidecar(sidecar);
    Ok(ReadContainer {
        view,
        requests,
        limits,
    })
}

/// Read `requests` and `limits` (at `path`, a container's when
/// `container`, else the pod's), checking them as the API server does.
fn read_requirements(
    doc: &Doc<'_>,
    r: Requirements,
    path: &str,
    container: bool,
) -> Result<(Read, Read), ManifestError> {
    let requests = quantities(doc, &join(path, "requests"), r.requests)?;
    let limits = quantities(doc, &join(path, "limits"), r.limits)?;
    // The API server's checks, limits first (requests default to them).
    for read in [&limits, &requests] {
        for (resource, (text, quantity)) in &read.entries {
            resources::check_quantity(resource, text, *quantity, container)
                .map_err(|p| doc.err(&key_path(&read.path, resource), p))?;
        }
    }
    for (resource, (request_text, request)) in &requests.entries {
        if let Some((limit_text, limit)) = limits.entries.get(resource) {
            if request > limit {
                return Err(doc.err(
                    &key_path(&requests.path, resource),
                    Problem::RequestAboveLimit {
                        request: request_text.clone(),
                        limit: limit_text.clone(),
                    },
                ));
            }
        }
    }
    resources::check_requirements(&requests.entries, &limits.entries)
        .map_err(|(resource, p)| doc.err(&key_path(&requests.path, &resource), p))?;
    if resources::hugepages_alone(&requests.entries, &limits.entries) {
        return Err(doc.err(path, Problem::HugePagesAlone));
    }
    Ok((requests, limits))
}

/// Read one `requests` / `limits` mapping (a null quantity is zero, as in
/// Kubernetes' JSON decoding).
fn quantities(
    doc: &Doc<'_>,
    path: &str,
    map: Option<BTreeMap<String, Option<QuantityText>>>,
) -> Result<Read, ManifestError> {
    let mut entries = BTreeMap::new();
    for (resource, text) in map.unwrap_or_default() {
        if resource.is_empty() {
            return Err(doc.err(&format!("{path}[\"\"]"), Problem::Empty));
        }
        let text = text.map(|t| t.0).unwrap_or_else(|| "0".to_string());
        let quantity =
            Quantity::parse(&text).map_err(|e| doc.err(&key_path(path, &resource), e.into()))?;
        entries.insert(resource, (text, quantity));
    }
    Ok(Read {
        path: path.to_string(),
        entries,
    })
}

/// Convert read quantities to the amounts a [`ResourceList`] records.
fn amounts(doc: &Doc<'_>, read: &Read) -> Result<ResourceList, ManifestError> {
    read.entries
        .iter()
        .map(|(resource, (text, quantity))| {
            resource_amount(resource, *quantity, text)
                .map(|amount| (resource.clone(), amount))
                .map_err(|e| doc.err(&key_path(&read.path, resource), e.into()))
        })
        .collect()
}

/// Convert computed (aggregated, defaulted) quantities to canonical amounts.
fn canonical(doc: &Doc<'_>, path: &str, list: &Quantities) -> Result<ResourceList, ManifestError> {
    list.iter()
        .map(|(resource, nanos)| {
            let text = format!("{}n", nanos);
            let err = |e: QuantityError| doc.err(&key_path(path, resource), e.into());
            let quantity = Quantity::from_nanos(*nanos)
                .ok_or_else(|| err(QuantityError::TooLarge { text: text.clone() }))?;
            resource_amount(resource, quantity, &quantity.to_string())
                .map(|amount| (resource.clone(), amount))
                .map_err(err)
        })
        .collect()
}
