//! Devices a container gets through the Container Device Interface (CDI),
//! as Dynamic Resource Allocation (DRA) drivers and CDI-enabled device
//! plugins give them, found as the runtime found them.
//!
//! A CDI device has a fully qualified name, `vendor.com/class=name`, and a
//! spec file (JSON or YAML, in the runtime's CDI directories: `/etc/cdi`
//! and `/var/run/cdi` by default, a later directory overriding an earlier
//! one for the same name, as the CDI registry orders them) says what it
//! injects: device nodes, environment, mounts, hooks. The runtime resolves
//! the names it is given (CRI `CDIDevices`, the `cdi.k8s.io/*` annotations)
//! and writes the nodes into the container's `linux.devices` before topomgr
//! sees the container (NRI's Container and the OCI hook's config carry the
//! spec, not the names). So topomgr finds a container's CDI devices:
//!
//! - by the names in its `cdi.k8s.io/<key>` annotations (comma-separated
//!   qualified names), resolved through the specs; and
//! - by its device nodes: a node whose type and number is that of a CDI
//!   device's node (the device's own `containerEdits.deviceNodes`, not the
//!   spec-wide edits such as `/dev/nvidiactl` that every device of a spec
//!   shares) is that device.
//!
//! What each device is, for the providers, is then its nodes (see
//! [`crate::device_node`]). A spec file that does not parse is reported by
//! name and skipped, as the CDI registry skips it; a device a container's
//! annotation names but no spec defines is reported (the runtime would have
//! refused to create such a container).
//!
//! The format: the CDI specification (`SPEC.md` of
//! cncf-tags/container-device-interface), `cdiVersion` 0.3.0 to 1.x: `kind`
//! (`vendor.com/class`), `devices[].name`,
//! `devices[].containerEdits.deviceNodes[]` with `path`, optional
//! `hostPath`, `type` (`c`, `b`; default `c`), `major`, `minor` (when left
//! out, the runtime reads them from the host's node at `hostPath`, else
//! `path`: so does topomgr). Other fields are not read.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use topomgr_sdk::DeviceNode;

/// The prefix of the annotations that name a container's CDI devices.
pub const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// The largest spec file read (CDI specs are a few KiB; NVIDIA's for an
/// 8-GPU machine with MIG is under 200 KiB).
const MAX_SPEC_BYTES: u64 = 4 << 20;

/// One CDI device and its own device nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiDevice {
    /// Its fully qualified name (`nvidia.com/gpu=0`).
    pub name: String,
    /// Its device nodes, with type and numbers (read from the host where
    /// the spec leaves them out; a node whose numbers cannot be known is
    /// left out).
    pub nodes: Vec<DeviceNode>,
    /// The spec file that defines it.
    pub file: PathBuf,
}

/// The CDI devices of the spec directories.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CdiSpecs {
    /// By qualified name.
    devices: BTreeMap<String, CdiDevice>,
}

impl CdiSpecs {
    /// Read every `*.json`, `*.yaml` and `*.yml` file of `dirs` (a missing
    /// directory has none), a later directory's device replacing an
    /// earlier one of the same name. Returns the specs and, for each file
    /// that could not be used, why (the file is skipped).
    pub fn load(dirs: &[PathBuf]) -> (CdiSpecs, Vec<String>) {
        let (files, mut problems) = spec_files(dirs);
        let mut specs = CdiSpecs::default();
        for file in files {
            match read_spec(&file) {
                Ok(devices) => {
                    for d in devices {
                        specs.devices.insert(d.name.clone(), d);
                    }
                }
                Err(problem) => problems.push(format!("CDI spec {}: {problem}", file.display())),
            }
        }
        (specs, problems)
    }

    /// The device named `name` (`vendor.com/class=name`).
    pub fn device(&self, name: &str) -> Option<&CdiDevice> {
        self.devices.get(name)
    }

    /// The device one of whose own nodes has `node`'s type and numbers.
    pub fn device_with_node(&self, node: &DeviceNode) -> Option<&CdiDevice> {
        self.devices.values().find(|d| {
            d.nodes
                .iter()
                .any(|n| n.kind == node.kind && n.major == node.major && n.minor == node.minor)
        })
    }

    /// Whether no spec defines a device.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

/// The spec files of `dirs`, in the order they apply (directories in
/// order, files by name in each), and why a directory could not be read.
fn spec_files(dirs: &[PathBuf]) -> (Vec<PathBuf>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                problems.push(format!("CDI spec directory {}: {e}", dir.display()));
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("json" | "yaml" | "yml")
                )
            })
            .collect();
        files.sort();
        out.extend(files);
    }
    (out, problems)
}

/// What a spec file is now: its path, modification time and length.
type FileStamp = (PathBuf, Option<std::time::SystemTime>, u64);

/// The specs of a list of directories, read again only when a spec file
/// was added, removed or changed (its modification time or length): a
/// container's creation looks them up, and a node's specs (NVIDIA's for a
/// machine of 8 GPUs with MIG: hundreds of KiB of YAML) change only when a
/// driver writes one, as a DRA driver does just before a claim's
/// containers are created.
#[derive(Debug, Default)]
pub struct CdiCache {
    dirs: Vec<PathBuf>,
    read: std::sync::Mutex<Option<(Vec<FileStamp>, std::sync::Arc<CdiSpecs>)>>,
}

impl CdiCache {
    /// The specs of `dirs` ([`CdiSpecs::load`]); none are read yet.
    pub fn new(dirs: Vec<PathBuf>) -> CdiCache {
        CdiCache {
            dirs,
            read: std::sync::Mutex::new(None),
        }
    }

    /// Whether it has no directory to read.
    pub fn is_off(&self) -> bool {
        self.dirs.is_empty()
    }

    /// The specs as the files are now, and the problems of a fresh read
    /// (none when nothing changed since the last one, which reported them).
    pub fn specs(&self) -> (std::sync::Arc<CdiSpecs>, Vec<String>) {
        let (files, _) = spec_files(&self.dirs);
        let stamps: Vec<FileStamp> = files
            .into_iter()
            .map(|f| {
                let meta = std::fs::metadata(&f).ok();
                let modified = meta.as_ref().and_then(|m| m.modified().ok());
                let len = meta.map_or(0, |m| m.len());
                (f, modified, len)
            })
            .collect();
        let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, specs)) = read.as_ref() {
            if *seen == stamps {
                return (std::sync::Arc::clone(specs), Vec::new());
            }
        }
        let (specs, problems) = CdiSpecs::load(&self.dirs);
        let specs = std::sync::Arc::new(specs);
        *read = Some((stamps, std::sync::Arc::clone(&specs)));
        (specs, problems)
    }
}

/// The qualified names a container's `cdi.k8s.io/*` annotations give, in
/// the annotations' order; a name that is not `vendor/class=name` is
/// reported and left out.
pub fn annotated_names(annotations: &BTreeMap<String, String>) -> (Vec<String>, Vec<String>) {
    let mut names = Vec::new();
    let mut problems = Vec::new();
    for (key, value) in annotations {
        if !key.starts_with(ANNOTATION_PREFIX) {
            continue;
        }
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if is_qualified(name) {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_owned());
                }
            } else {
                problems.push(format!(
                    "annotation {key}={value:?}: {name:?} is not a qualified CDI device name (vendor.com/class=name)"
                ));
            }
        }
    }
    (names, problems)
}

/// `vendor.com/class=name`: a kind with one `/`, a non-empty device name.
pub(crate) fn is_qualified(name: &str) -> bool {
    let Some((kind, device)) = name.split_once('=') else {
        return false;
    };
    let Some((vendor, class)) = kind.split_once('/') else {
        return false;
    };
    let ok = |s: &str, extra: &[char]| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
    };
    ok(vendor, &['.', '-', '_']) && ok(class, &['-', '_', '.']) && ok(device, &['-', '_', '.', ':'])
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    cdi_version: String,
    kind: String,
    #[serde(default)]
    devices: Vec<SpecDevice>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecDevice {
    name: String,
    #[serde(default)]
    container_edits: Edits,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Edits {
    #[serde(default)]
    device_nodes: Vec<SpecNode>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecNode {
    path: String,
    #[serde(default)]
    host_path: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    major: Option<i64>,
    #[serde(default)]
    minor: Option<i64>,
}

fn read_spec(file: &Path) -> Result<Vec<CdiDevice>, String> {
    let meta = std::fs::metadata(file).map_err(|e| e.to_string())?;
    if meta.len() > MAX_SPEC_BYTES {
        return Err(format!(
            "{} bytes, more than the {MAX_SPEC_BYTES} a spec may have",
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    parse_spec(&text, file, &|p| host_node(Path::new(p)))
}

/// A host node's type (`c`, `b`) and major and minor numbers.
type HostNode = (String, u32, u32);

/// The devices of spec `text` (from `file`); `host` reads the type and
/// numbers of a host node a spec node leaves them out of.
fn parse_spec(
    text: &str,
    file: &Path,
    host: &dyn Fn(&str) -> Option<HostNode>,
) -> Result<Vec<CdiDevice>, String> {
    let spec: Spec = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| e.to_string())?
    } else {
        serde_saphyr::from_str(text).map_err(|e| one_line(&e.to_string()))?
    };
    if spec.cdi_version.trim().is_empty() {
        return Err("cdiVersion is empty".to_owned());
    }
    let (vendor, class) = spec
        .kind
        .split_once('/')
        .ok_or_else(|| format!("kind {:?} is not vendor.com/class", spec.kind))?;
    let mut out = Vec::new();
    for d in spec.devices {
        let name = format!("{vendor}/{class}={}", d.name);
        if !is_qualified(&name) {
            return Err(format!(
                "device {:?}: {name:?} is not a qualified CDI device name",
                d.name
            ));
        }
        let mut nodes = Vec::new();
        for n in d.container_edits.device_nodes {
            let kind = n.kind.clone().unwrap_or_default();
            let numbers = match (n.major, n.minor) {
                (Some(major), Some(minor)) => {
                    let number = |v: i64, what: &str| {
                        u32::try_from(v).map_err(|_| {
                            format!(
                                "device {:?}: node {}: {what} {v} is out of range",
                                d.name, n.path
                            )
                        })
                    };
                    Some((
                        if kind.is_empty() {
                            "c".to_owned()
                        } else {
                            kind.clone()
                        },
                        number(major, "major")?,
                        number(minor, "minor")?,
                    ))
                }
                _ => host(n.host_path.as_deref().unwrap_or(&n.path)),
            };
            if !matches!(kind.as_str(), "" | "c" | "b" | "u" | "p") {
                return Err(format!(
                    "device {:?}: node {}: type {kind:?} is not c, b, u or p",
                    d.name, n.path
                ));
            }
            if let Some((kind, major, minor)) = numbers {
                nodes.push(DeviceNode::new(n.path, kind, major, minor));
            }
        }
        out.push(CdiDevice {
            name,
            nodes,
            file: file.to_path_buf(),
        });
    }
    Ok(out)
}

/// The type (`c`, `b`) and numbers of the host's device node at `path`.
pub(crate) fn host_node(path: &Path) -> Option<HostNode> {
    let meta = std::fs::metadata(path).ok()?;
    let kind = if meta.file_type().is_char_device() {
        "c"
    } else if meta.file_type().is_block_device() {
        "b"
    } else {
        return None;
    };
    let (major, minor) = split_dev(meta.rdev());
    Some((kind.to_owned(), major, minor))
}

/// The major and minor numbers of a `dev_t` as Linux encodes it (glibc's
/// `gnu_dev_major`/`gnu_dev_minor`: 12 bits of major and 20 of minor, split
/// around the old 8-bit fields).
fn split_dev(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_host(_: &str) -> Option<HostNode> {
        None
    }

    /// A spec in the form NVIDIA's CDI generator writes (YAML; spec-wide
    /// control nodes; per-GPU nodes), written from the public format.
    const NVIDIA: &str = r#"---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
  env:
  - NVIDIA_VISIBLE_DEVICES=void
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      major: 195
      minor: 0
    - path: /dev/dri/card1
      major: 226
      minor: 1
- name: GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
      type: c
      major: 195
      minor: 1
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      major: 195
      minor: 0
"#;

    /// An SR-IOV-style spec (JSON, a VFIO group per VF), from the public
    /// format.
    const SRIOV: &str = r#"{"cdiVersion":"0.6.0","kind":"example.org/vf","devices":[
        {"name":"0000:3b:02.1","containerEdits":{"deviceNodes":[{"path":"/dev/vfio/71","type":"c","major":243,"minor":5}],
         "env":["PCIDEVICE_EXAMPLE_ORG_VF=0000:3b:02.1"]}}]}"#;

    #[test]
    fn specs_give_each_device_its_own_nodes() {
        let gpus = parse_spec(NVIDIA, Path::new("/etc/cdi/nvidia.yaml"), &no_host).unwrap();
        let names: Vec<&str> = gpus.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "nvidia.com/gpu=0",
                "nvidia.com/gpu=GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
                "nvidia.com/gpu=all"
            ]
        );
        assert_eq!(
            gpus[0].nodes,
            [
                DeviceNode::new("/dev/nvidia0", "c", 195, 0),
                DeviceNode::new("/dev/dri/card1", "c", 226, 1)
            ]
        );
        let vfs = parse_spec(SRIOV, Path::new("/var/run/cdi/vf.json"), &no_host).unwrap();
        assert_eq!(vfs[0].name, "example.org/vf=0000:3b:02.1");
        assert_eq!(vfs[0].nodes, [DeviceNode::new("/dev/vfio/71", "c", 243, 5)]);
        // Numbers left out are read from the host node.
        let host = |p: &str| (p == "/dev/nvidia7").then(|| ("c".to_owned(), 195, 7));
        let text = "cdiVersion: 0.3.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"7\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia7\n    - path: /dev/gone\n";
        let d = parse_spec(text, Path::new("x.yaml"), &host).unwrap();
        assert_eq!(d[0].nodes, [DeviceNode::new("/dev/nvidia7", "c", 195, 7)]);
    }

    #[test]
    fn a_bad_spec_is_named_and_the_others_load() {
        let dir = std::env::temp_dir().join(format!("topomgr-cdi-{}", std::process::id()));
        let (low, high) = (dir.join("etc"), dir.join("run"));
        std::fs::create_dir_all(&low).unwrap();
        std::fs::create_dir_all(&high).unwrap();
        std::fs::write(low.join("nvidia.yaml"), NVIDIA).unwrap();
        std::fs::write(low.join("broken.json"), "{\"cdiVersion\": \"0.6.0\"").unwrap();
        std::fs::write(low.join("notes.txt"), "not a spec").unwrap();
        // The higher-priority directory redefines gpu=0 on another node.
        std::fs::write(
            high.join("override.json"),
            r#"{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","major":195,"minor":9}]}}]}"#,
        )
        .unwrap();
        std::fs::write(high.join("kindless.yaml"), "cdiVersion: 0.6.0\nkind: gpu\n").unwrap();
        let (specs, problems) = CdiSpecs::load(&[low.clone(), high.clone(), dir.join("absent")]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with(&format!("CDI spec {}: ", low.join("broken.json").display())),
            "{problems:?}"
        );
        assert_eq!(
            problems[1],
            format!(
                "CDI spec {}: kind \"gpu\" is not vendor.com/class",
                high.join("kindless.yaml").display()
            )
        );
        assert_eq!(specs.device("nvidia.com/gpu=0").unwrap().nodes[0].minor, 9);
        let node = DeviceNode::new("/dev/nvidia1", "c", 195, 1);
        assert_eq!(
            specs.device_with_node(&node).unwrap().name,
            "nvidia.com/gpu=GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"
        );
        // The spec-wide control node is no device's own.
        assert_eq!(
            specs.device_with_node(&DeviceNode::new("/dev/nvidiactl", "c", 195, 255)),
            None
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The cache reads the specs again only when a spec file was added,
    /// changed or removed, and reports a bad file when it reads it.
    #[test]
    fn the_cache_reads_again_when_a_spec_file_changes() {
        let dir = std::env::temp_dir().join(format!("topomgr-cdi-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cache = CdiCache::new(vec![dir.clone()]);
        assert!(!cache.is_off() && CdiCache::new(Vec::new()).is_off());
        let (empty, problems) = cache.specs();
        assert!(empty.is_empty() && problems.is_empty());
        std::fs::write(dir.join("nvidia.yaml"), NVIDIA).unwrap();
        let (first, _) = cache.specs();
        assert!(first.device("nvidia.com/gpu=0").is_some());
        let (again, _) = cache.specs();
        assert!(
            std::sync::Arc::ptr_eq(&first, &again),
            "unchanged: not read again"
        );
        std::fs::write(dir.join("broken.json"), "{").unwrap();
        let (with_broken, problems) = cache.specs();
        assert!(!std::sync::Arc::ptr_eq(&first, &with_broken));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(cache.specs().1.is_empty(), "reported when read");
        std::fs::remove_file(dir.join("nvidia.yaml")).unwrap();
        assert!(cache.specs().0.device("nvidia.com/gpu=0").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_come_from_the_cdi_annotations() {
        let annotations = BTreeMap::from([
            (
                "cdi.k8s.io/claim-a".to_owned(),
                "nvidia.com/gpu=0, example.org/vf=0000:3b:02.1".to_owned(),
            ),
            ("cdi.k8s.io/bad".to_owned(), "gpu0".to_owned()),
            ("other".to_owned(), "nvidia.com/gpu=1".to_owned()),
        ]);
        let (names, problems) = annotated_names(&annotations);
        assert_eq!(names, ["nvidia.com/gpu=0", "example.org/vf=0000:3b:02.1"]);
        assert_eq!(
            problems,
            ["annotation cdi.k8s.io/bad=\"gpu0\": \"gpu0\" is not a qualified CDI device name (vendor.com/class=name)"]
        );
    }

    #[test]
    fn device_numbers_split_as_linux_encodes_them() {
        // makedev(195, 0), makedev(243, 5), makedev(4095, 1048575),
        // makedev(4096, 0).
        assert_eq!(split_dev(0xc300), (195, 0));
        assert_eq!(split_dev(0xf305), (243, 5));
        assert_eq!(split_dev(0xffff_ffff), (4095, 1_048_575));
        assert_eq!(split_dev(0x1000_0000_0000), (4096, 0));
        // /dev/null is character device 1:3 on every Linux machine.
        assert_eq!(
            host_node(Path::new("/dev/null")),
            Some(("c".to_owned(), 1, 3))
        );
    }
}
