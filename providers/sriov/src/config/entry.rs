//! One entry of the resource list (`resourceList[i]` of `config.json`, or
//! `resource_list[i]` inline): Go's key matching, the selector keys each
//! device type takes, and the name rules, every problem collected with the
//! entry and key it is about (see the parent module for the rules).

use serde_json::Value;

use super::{Problem, ResourceConfig};
use crate::device::DeviceType;
use topomgr_sdk::devices::normalize_pci_address;

use crate::go_json::decode::{self, has_effect, Fields, TypeError};
use crate::link_type::link_type_number;
use crate::pf_selector::{first_duplicate, PfSelector};
use crate::selector::Selector;

/// The entries of a resource list (`list_key` names the list in messages).
pub(super) fn resource_list(
    list: &Value,
    list_key: &str,
    default_prefix: &str,
) -> Result<Vec<ResourceConfig>, Vec<Problem>> {
    let Value::Array(entries) = list else {
        return Err(vec![Problem {
            entry: list_key.into(),
            key: None,
            message: format!(
                "expected a list of resources, found {}",
                decode::describe(list)
            ),
        }]);
    };
    if entries.is_empty() {
        tracing::warn!(
            list = list_key,
            "the SR-IOV resource list is empty: no resources"
        );
    }
    let mut problems = Vec::new();
    let mut resources: Vec<(String, ResourceConfig)> = Vec::new();
    for (index, raw) in entries.iter().enumerate() {
        let mut entry = EntryReader::new(list_key, index, raw);
        if let Some(resource) = entry.read(default_prefix) {
            let label = entry.label();
            if let Some((first, _)) = resources
                .iter()
                .find(|(_, r)| r.full_name() == resource.full_name())
            {
                entry.problem(
                    None,
                    format!(
                        "resource {} is also defined by {first}; resource names must be unique \
                         per prefix",
                        resource.full_name()
                    ),
                );
            } else {
                resources.push((label, resource));
            }
        }
        problems.extend(entry.problems);
    }
    if problems.is_empty() {
        Ok(resources.into_iter().map(|(_, r)| r).collect())
    } else {
        Err(problems)
    }
}

const ENTRY_KEYS: &[&str] = &[
    "resourceName",
    "resourcePrefix",
    "deviceType",
    "excludeTopology",
    "selectors",
    "additionalInfo",
    "SelectorObjs",
    "SelectorObj",
];

/// Every selector key the device plugin knows: first the `accelerator`
/// ones, then the rest of the `netDevice` ones, then the unsupported ones.
const SELECTOR_KEYS: &[&str] = &[
    "vendors",
    "devices",
    "drivers",
    "pciAddresses",
    "acpiIndexes",
    "pfNames",
    "rootDevices",
    "linkTypes",
    "isRdma",
    "needVhostNet",
    "ddpProfiles",
    "vdpaType",
    "pKeys",
    "auxTypes",
];

/// The selector keys of `accelerator` resources.
const ACCELERATOR_KEYS: &[&str] = SELECTOR_KEYS.split_at(4).0;

/// The selector keys of `netDevice` resources that topomgr implements.
const NET_DEVICE_KEYS: &[&str] = SELECTOR_KEYS.split_at(10).0;

/// Selector keys of `netDevice` resources that are not implemented, and why.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "ddpProfiles",
        "needs the device's DDP profile from devlink or ddptool, which topomgr does not read",
    ),
    (
        "vdpaType",
        "needs vDPA devices (/sys/bus/vdpa), which topomgr does not discover",
    ),
    (
        "pKeys",
        "needs InfiniBand partition keys, which topomgr does not read",
    ),
];

/// Reads one resource entry, collecting its problems.
struct EntryReader<'a> {
    list_key: &'a str,
    index: usize,
    raw: &'a Value,
    name: Option<String>,
    problems: Vec<Problem>,
}

impl<'a> EntryReader<'a> {
    fn new(list_key: &'a str, index: usize, raw: &'a Value) -> Self {
        EntryReader {
            list_key,
            index,
            raw,
            name: None,
            problems: Vec::new(),
        }
    }

    fn label(&self) -> String {
        match &self.name {
            Some(name) if !name.is_empty() => {
                format!("{}[{}] ({name:?})", self.list_key, self.index)
            }
            _ => format!("{}[{}]", self.list_key, self.index),
        }
    }

    fn problem(&mut self, key: Option<String>, message: String) {
        self.problems.push(Problem {
            entry: self.label(),
            key,
            message,
        });
    }

    fn type_problem(&mut self, key: &str, e: TypeError) {
        self.problem(Some(format!("{key}{}", e.at)), e.to_string());
    }

    fn read(&mut self, default_prefix: &str) -> Option<ResourceConfig> {
        let Value::Object(object) = self.raw else {
            let found = decode::describe(self.raw);
            self.problem(None, format!("expected a resource object, found {found}"));
            return None;
        };
        let fields = Fields::match_keys(object, ENTRY_KEYS);
        // The name first, so that every later message can name the resource.
        let name = match decode::string(fields.get("resourceName")) {
            Ok(name) => name,
            Err(e) => {
                self.type_problem("resourceName", e);
                return None;
            }
        };
        self.name = Some(name.clone());
        for key in fields.unknown() {
            self.problem(
                Some((*key).to_owned()),
                format!(
                    "unknown key; a resource has resourceName, resourcePrefix, deviceType, \
                     excludeTopology, selectors and additionalInfo ({})",
                    did_you_mean(key, ENTRY_KEYS)
                ),
            );
        }
        for key in ["SelectorObjs", "SelectorObj"] {
            if fields.get(key).is_some_and(has_effect) {
                self.problem(
                    Some(key.into()),
                    "is an internal field of the device plugin (only null is accepted); put the \
                     selectors in \"selectors\""
                        .into(),
                );
            }
        }
        if name.is_empty() {
            self.problem(
                Some("resourceName".into()),
                "missing; every resource needs a resourceName such as \"intel_sriov_netdevice\""
                    .into(),
            );
        } else if let Err(why) = check_name(&name) {
            self.problem(Some("resourceName".into()), format!("{name:?} {why}"));
        }
        let prefix = match decode::string(fields.get("resourcePrefix")) {
            Ok(p) if p.is_empty() => default_prefix.to_owned(),
            Ok(p) => {
                if let Err(why) = check_prefix(&p) {
                    self.problem(Some("resourcePrefix".into()), format!("{p:?} {why}"));
                }
                p
            }
            Err(e) => {
                self.type_problem("resourcePrefix", e);
                default_prefix.to_owned()
            }
        };
        let device_type = self.device_type(fields.get("deviceType"));
        let exclude_topology = match decode::boolean(fields.get("excludeTopology")) {
            Ok(b) => b,
            Err(e) => {
                self.type_problem("excludeTopology", e);
                false
            }
        };
        let additional_info = match decode::string_map_map(fields.get("additionalInfo")) {
            Ok(info) => info,
            Err(e) => {
                self.type_problem("additionalInfo", e);
                None
            }
        };
        let selectors = device_type.and_then(|ty| self.selectors(fields.get("selectors"), ty));
        if !self.problems.is_empty() {
            return None;
        }
        Some(ResourceConfig {
            prefix,
            name,
            device_type: device_type?,
            exclude_topology,
            selectors: selectors?,
            additional_info,
        })
    }

    fn device_type(&mut self, value: Option<&Value>) -> Option<DeviceType> {
        let key = Some("deviceType".to_owned());
        match decode::string(value) {
            Err(e) => {
                self.type_problem("deviceType", e);
                None
            }
            Ok(s) => match s.as_str() {
                "" | "netDevice" => Some(DeviceType::NetDevice),
                "accelerator" => Some(DeviceType::Accelerator),
                "auxNetDevice" => {
                    self.problem(
                        key,
                        "\"auxNetDevice\" is not supported: auxiliary network devices \
                         (subfunctions) are not PCI functions and topomgr does not discover them"
                            .into(),
                    );
                    None
                }
                other => {
                    self.problem(
                        key,
                        format!(
                            "unknown device type {other:?}; the device plugin's types are \
                             \"netDevice\" (the default), \"accelerator\" and \"auxNetDevice\""
                        ),
                    );
                    None
                }
            },
        }
    }

    fn selectors(&mut self, value: Option<&Value>, ty: DeviceType) -> Option<Vec<Selector>> {
        let key = "selectors";
        let objects: Vec<(String, &Value)> = match value {
            None | Some(Value::Null) => {
                self.problem(
                    Some(key.into()),
                    "missing; give a list of selector objects such as [{\"vendors\": [\"8086\"], \
                     \"drivers\": [\"vfio-pci\"]}] ({} selects every device of the type)"
                        .into(),
                );
                return None;
            }
            Some(object @ Value::Object(_)) => vec![(key.to_owned(), object)],
            Some(Value::Array(list)) if list.is_empty() => {
                self.problem(
                    Some(key.into()),
                    "empty; give at least one selector object".into(),
                );
                return None;
            }
            Some(Value::Array(list)) => list
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("{key}[{i}]"), v))
                .collect(),
            Some(other) => {
                let found = decode::describe(other);
                self.problem(
                    Some(key.into()),
                    format!("expected a selector object or a list of them, found {found}"),
                );
                return None;
            }
        };
        let before = self.problems.len();
        let selectors: Vec<Selector> = objects
            .into_iter()
            .filter_map(|(at, v)| self.selector(&at, v, ty))
            .collect();
        (self.problems.len() == before).then_some(selectors)
    }

    fn selector(&mut self, at: &str, value: &Value, ty: DeviceType) -> Option<Selector> {
        let Value::Object(object) = value else {
            let found = decode::describe(value);
            self.problem(
                Some(at.into()),
                format!("expected a selector object, found {found}"),
            );
            return None;
        };
        let before = self.problems.len();
        let fields = Fields::match_keys(object, SELECTOR_KEYS);
        for key in fields.unknown() {
            self.problem(
                Some(format!("{at}.{key}")),
                format!(
                    "unknown selector key; {} selectors are {} ({})",
                    ty,
                    allowed(ty).join(", "),
                    did_you_mean(key, SELECTOR_KEYS)
                ),
            );
        }
        for &name in SELECTOR_KEYS {
            let Some(v) = fields.get(name) else { continue };
            if !has_effect(v) || allowed(ty).contains(&name) {
                continue;
            }
            let message = if let Some((_, why)) = UNSUPPORTED.iter().find(|(k, _)| *k == name) {
                format!("selector {name} is not supported by topomgr: it {why}; remove it")
            } else if name == "auxTypes" {
                "auxTypes is a selector of deviceType \"auxNetDevice\", which topomgr does not \
                 support; remove it"
                    .to_owned()
            } else if ty == DeviceType::Accelerator && name == "acpiIndexes" {
                "acpiIndexes has no effect on accelerator resources in the device plugin (its \
                 accelerator selectors lack the field although its README lists it); remove it, \
                 or select by pciAddresses"
                    .to_owned()
            } else {
                format!(
                    "{name} is not a selector of deviceType {:?}; its selectors are {}",
                    ty.as_str(),
                    allowed(ty).join(", ")
                )
            };
            self.problem(Some(format!("{at}.{name}")), message);
        }
        let list = |me: &mut Self, name: &str| -> Vec<String> {
            match decode::string_list(fields.get(name)) {
                Ok(values) => values,
                Err(e) => {
                    me.type_problem(&format!("{at}.{name}"), e);
                    Vec::new()
                }
            }
        };
        let vendors = list(self, "vendors");
        let devices = list(self, "devices");
        let drivers = list(self, "drivers");
        let pci_addresses = list(self, "pciAddresses");
        let acpi_indexes = list(self, "acpiIndexes");
        let pf_names = list(self, "pfNames");
        let root_devices = list(self, "rootDevices");
        let link_types = list(self, "linkTypes");
        let flag = |me: &mut Self, name: &str| -> bool {
            decode::boolean(fields.get(name)).unwrap_or_else(|e| {
                me.type_problem(&format!("{at}.{name}"), e);
                false
            })
        };
        let is_rdma = flag(self, "isRdma");
        let need_vhost_net = flag(self, "needVhostNet");
        for (name, values) in [("vendors", &vendors), ("devices", &devices)] {
            for v in values.iter() {
                if v.len() != 4
                    || !v
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                {
                    tracing::warn!(
                        entry = %self.label(),
                        selector = at,
                        key = name,
                        value = %v,
                        "selector value can never match: ids compare as four lower-case hex digits without 0x, e.g. 8086"
                    );
                }
            }
        }
        self.check_pci_addresses(at, &pci_addresses);
        self.check_link_types(at, &link_types);
        let pf_names = self.pf_items(at, "pfNames", &pf_names);
        let root_devices = self.pf_items(at, "rootDevices", &root_devices);
        (self.problems.len() == before).then_some(Selector {
            vendors,
            devices,
            drivers,
            pci_addresses,
            acpi_indexes,
            pf_names,
            root_devices,
            link_types,
            is_rdma,
            need_vhost_net,
        })
    }

    /// `pciAddresses` items are compared with the address sysfs writes: one
    /// in any other form selects nothing.
    fn check_pci_addresses(&mut self, at: &str, items: &[String]) {
        for (i, item) in items.iter().enumerate() {
            let normal = normalize_pci_address(item);
            if normal.as_deref() == Some(item.as_str()) {
                continue;
            }
            let remedy = match normal {
                Some(n) => format!("write it as sysfs does: {n:?}"),
                None => "give domain:bus:device.function, e.g. \"0000:3b:02.0\"".to_owned(),
            };
            self.problem(
                Some(format!("{at}.pciAddresses[{i}]")),
                format!("{item:?} is not a PCI address as sysfs writes it, so it selects nothing; {remedy}"),
            );
        }
    }

    /// `linkTypes` items are compared with netlink's names: any other
    /// selects nothing.
    fn check_link_types(&mut self, at: &str, items: &[String]) {
        for (i, item) in items.iter().enumerate() {
            if link_type_number(item).is_some() {
                continue;
            }
            let lower = item.to_ascii_lowercase();
            let remedy = if link_type_number(&lower).is_some() {
                format!("names are lower case: {lower:?}")
            } else {
                "use netlink's names, such as \"ether\" or \"infiniband\"".to_owned()
            };
            self.problem(
                Some(format!("{at}.linkTypes[{i}]")),
                format!("{item:?} is not a link type name, so it selects nothing; {remedy}"),
            );
        }
    }

    fn pf_items(&mut self, at: &str, name: &str, items: &[String]) -> Vec<PfSelector> {
        let mut parsed = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match PfSelector::parse(item) {
                Ok(p) => parsed.push(p),
                Err(e) => self.problem(Some(format!("{at}.{name}[{i}]")), format!("{item:?} {e}")),
            }
        }
        if parsed.len() == items.len() {
            if let Some((i, j)) = first_duplicate(&parsed) {
                self.problem(
                    Some(format!("{at}.{name}[{j}]")),
                    format!(
                        "{:?} names the same PF as {name}[{i}] {:?}; the device plugin only uses the \
                         first item for a PF, so list all its VF indices there (e.g. \"{}#0-3,8\")",
                        items[j], items[i], parsed[i].pf
                    ),
                );
            }
        }
        parsed
    }
}

fn allowed(ty: DeviceType) -> &'static [&'static str] {
    match ty {
        DeviceType::NetDevice => NET_DEVICE_KEYS,
        DeviceType::Accelerator => ACCELERATOR_KEYS,
    }
}

/// "did you mean …" for a key close to a known one, else a neutral hint.
fn did_you_mean(key: &str, known: &[&str]) -> String {
    let close = known.iter().find(|k| {
        let (a, b) = (k.to_ascii_lowercase(), key.to_ascii_lowercase());
        a.starts_with(&b) || b.starts_with(&a) || edit_distance(&a, &b) <= 2
    });
    match close {
        Some(k) => format!("did you mean {k:?}?"),
        None => "keys match the device plugin's, case-insensitively".into(),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The plugin's `ValidResourceName` (`^[a-zA-Z0-9_-]+$`) and the kubelet's
/// rule for the name part of an extended resource (a qualified name: at
/// most 63 characters, starting and ending with a letter or digit).
fn check_name(name: &str) -> Result<(), String> {
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(
            "has characters the device plugin does not allow in a resource name; use letters, \
             digits, '_' and '-'"
                .into(),
        );
    }
    let edge_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    if name.len() > 63 || !edge_ok(name.bytes().next()) || !edge_ok(name.bytes().last()) {
        return Err(
            "is not a name the kubelet registers: it must have at most 63 characters and start \
             and end with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A resource prefix must be a DNS subdomain (lower-case letters, digits,
/// '-' and '.', labels starting and ending with a letter or digit, at most
/// 253 characters), as the kubelet requires of an extended resource's domain.
pub(super) fn check_prefix(prefix: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(label_ok) {
        return Err(
            "is not a DNS subdomain (like \"intel.com\"); the kubelet only registers resources \
             whose prefix is one"
                .into(),
        );
    }
    Ok(())
}
