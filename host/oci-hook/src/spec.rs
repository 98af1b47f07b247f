//! What an OCI runtime hands a hook: the container's state on standard
//! input, and the bundle's `config.json` it names. Only the fields topomgr
//! reads are declared; everything else is ignored (runtimes add their own).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use topomgr_contract::api::{ContainerDevices, DeviceNode, CDI_ANNOTATION_PREFIX};
use topomgr_runtime::LinuxResources;

use super::HookError;

/// The largest state topomgr reads from standard input.
pub(crate) const MAX_STATE_BYTES: u64 = 1 << 20;
/// The largest `config.json` topomgr reads.
pub(crate) const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// The container's state (the OCI runtime spec's "State").
#[derive(Debug, Clone, Deserialize)]
pub struct State {
    /// The container id.
    pub id: String,
    /// `creating` at `createRuntime`, `stopped` at `poststop`.
    pub status: String,
    /// The container's init process (absent or 0 once it is gone).
    #[serde(default)]
    pub pid: Option<u32>,
    /// The bundle directory (holds `config.json`).
    pub bundle: PathBuf,
}

/// The fields of `config.json` topomgr reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Config {
    /// The container's annotations.
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
    /// `linux`.
    #[serde(default)]
    pub linux: Option<Linux>,
    /// `process`.
    #[serde(default)]
    pub process: Option<Process>,
}

/// `linux` of `config.json`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Linux {
    /// `linux.resources`.
    #[serde(default)]
    pub resources: Option<LinuxResources>,
    /// `linux.cgroupsPath`.
    #[serde(default)]
    pub cgroups_path: Option<String>,
    /// `linux.devices`: the device nodes created in the container (Podman
    /// writes those of the CDI devices it resolved here).
    #[serde(default)]
    pub devices: Option<Vec<LinuxDevice>>,
}

/// One entry of `linux.devices`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct LinuxDevice {
    /// Its path in the container.
    pub path: String,
    /// `c`, `b`, `u` or `p`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Major number (absent for `p`).
    #[serde(default)]
    pub major: Option<i64>,
    /// Minor number (absent for `p`).
    #[serde(default)]
    pub minor: Option<i64>,
}

/// The devices of a container with `linux.devices` `devices`,
/// `annotations` and the device plugins' variables `env` (the `KEY=VALUE`
/// entries of its environment that name devices), as the daemon's
/// admission takes them: every node with numbers (a FIFO has none; numbers
/// out of range are no device node of a device), the `cdi.k8s.io/*`
/// annotations, the variables; `None` when there are none (the request
/// then reads as an older client's).
pub(crate) fn container_devices(
    devices: &[LinuxDevice],
    annotations: &BTreeMap<String, String>,
    env: Vec<String>,
) -> Option<ContainerDevices> {
    let nodes = devices
        .iter()
        .filter_map(|d| {
            let number = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
            Some(DeviceNode::new(
                d.path.clone(),
                d.kind.clone(),
                number(d.major)?,
                number(d.minor)?,
            ))
        })
        .collect();
    let cdi_annotations = annotations
        .iter()
        .filter(|(k, _)| {
            k.strip_prefix(CDI_ANNOTATION_PREFIX)
                .is_some_and(|n| !n.is_empty())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some(ContainerDevices {
        nodes,
        cdi_annotations,
        env,
    })
    .filter(|d| !d.is_empty())
}

/// `process` of `config.json`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Process {
    /// `KEY=VALUE` entries.
    #[serde(default)]
    pub env: Option<Vec<String>>,
}

/// Read the state from `input` (at most 1 MiB).
pub fn read_state(input: impl std::io::Read) -> Result<State, HookError> {
    let mut bytes = Vec::new();
    input
        .take(MAX_STATE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| HookError::State(format!("cannot read it from standard input: {e}")))?;
    if bytes.len() as u64 > MAX_STATE_BYTES {
        return Err(HookError::State(format!(
            "it is larger than {MAX_STATE_BYTES} bytes"
        )));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        HookError::State(format!(
            "{e} (expected the OCI state: {{\"id\", \"status\", \"pid\", \"bundle\", ...}} on standard input, as the runtime gives it to a hook)"
        ))
    })
}

/// Read `<bundle>/config.json` (at most [`MAX_CONFIG_BYTES`]).
pub(crate) fn read_config(bundle: &Path) -> Result<Config, HookError> {
    let path = bundle.join("config.json");
    let file = std::fs::File::open(&path).map_err(|e| HookError::Bundle {
        path: path.clone(),
        problem: e.to_string(),
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| HookError::Bundle {
            path: path.clone(),
            problem: e.to_string(),
        })?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(HookError::Bundle {
            path,
            problem: format!("it is larger than {MAX_CONFIG_BYTES} bytes"),
        });
    }
    serde_json::from_slice(&bytes).map_err(|e| HookError::Bundle {
        path,
        problem: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_and_config_as_podman_writes_them() {
        let state = read_state(
            &br#"{"ociVersion":"1.0.2-dev","id":"9c97","status":"creating","pid":20620,
                 "bundle":"/b","annotations":{"io.container.manager":"libpod"}}"#[..],
        )
        .unwrap();
        assert_eq!(
            (
                state.id.as_str(),
                state.status.as_str(),
                state.pid,
                state.bundle.as_path()
            ),
            ("9c97", "creating", Some(20620), Path::new("/b"))
        );
        let err = read_state(&br#"{"id":"x"}"#[..]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot read the container's state: missing field `status` at line 1 column 10 (expected the OCI state: {\"id\", \"status\", \"pid\", \"bundle\", ...} on standard input, as the runtime gives it to a hook)"
        );
        let big = vec![b' '; (MAX_STATE_BYTES + 1) as usize];
        assert_eq!(
            read_state(&big[..]).unwrap_err().to_string(),
            "cannot read the container's state: it is larger than 1048576 bytes"
        );

        let dir = std::env::temp_dir().join(format!("topomgr-hook-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.json"),
            r#"{"ociVersion":"1.0.2-dev","process":{"env":["PATH=/bin","HOSTNAME=9c97"]},
                "annotations":{"io.container.manager":"libpod"},
                "linux":{"resources":{"memory":{"limit":268435456},"cpu":{"quota":100000,"period":100000}},
                         "cgroupsPath":"/libpod_parent/libpod-9c97","namespaces":[{"type":"pid"}]}}"#,
        )
        .unwrap();
        let c = read_config(&dir).unwrap();
        let linux = c.linux.unwrap();
        assert_eq!(
            linux.cgroups_path.as_deref(),
            Some("/libpod_parent/libpod-9c97")
        );
        assert_eq!(
            linux.resources.unwrap().memory.unwrap().limit,
            Some(268_435_456)
        );
        assert_eq!(c.process.unwrap().env.unwrap().len(), 2);
        std::fs::write(dir.join("config.json"), "{").unwrap();
        let err = read_config(&dir).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "cannot read the container's bundle config {}: EOF while parsing an object at line 1 column 1",
                dir.join("config.json").display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What Podman writes for `--device example.org/nic=a` (the CDI
    /// device's node in `linux.devices`) and a `cdi.k8s.io/*` annotation
    /// become the admission's devices; a FIFO without numbers and other
    /// annotations are left out; a container with neither sends none.
    #[test]
    fn device_nodes_and_cdi_annotations_become_the_requests_devices() {
        let config: Config = serde_json::from_str(
            r#"{"annotations":{"io.container.manager":"libpod","cdi.k8s.io/nic":"example.org/nic=b","cdi.k8s.io/":"x"},
                "linux":{"devices":[{"path":"/dev/infiniband/uverbs0","type":"c","major":231,"minor":192,"fileMode":8630,"uid":0,"gid":0},
                                    {"path":"/dev/fifo","type":"p"},
                                    {"path":"/dev/bad","type":"c","major":-1,"minor":3}]}}"#,
        )
        .unwrap();
        let annotations = config.annotations.unwrap();
        let devices = config.linux.unwrap().devices.unwrap();
        let d = container_devices(&devices, &annotations, Vec::new()).unwrap();
        assert_eq!(
            d.nodes,
            [DeviceNode::new("/dev/infiniband/uverbs0", "c", 231, 192)]
        );
        assert_eq!(
            d.cdi_annotations,
            BTreeMap::from([("cdi.k8s.io/nic".to_owned(), "example.org/nic=b".to_owned())])
        );
        assert_eq!(
            container_devices(&devices[1..], &BTreeMap::new(), Vec::new()),
            None
        );
        let env = vec!["PCIDEVICE_EXAMPLE_COM_NIC=0000:af:00.0".to_owned()];
        let d = container_devices(&[], &BTreeMap::new(), env.clone()).unwrap();
        assert_eq!((d.nodes.len(), d.env), (0, env));
    }
}
