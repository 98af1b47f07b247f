//! [`Gpus`]: everything the provider needs from its config and the machine,
//! in one value: the resource name, the GPUs (id and NUMA node, for the
//! device pool) and the choice among them, plus the allocation's
//! environment.

use std::path::Path;

use topomgr_sdk::{Machine, NumaNodeId};

use crate::choice::Chooser;
use crate::config::{ConfigError, GpuConfig};
use crate::discovery::{self, DiscoveryError, Source};
use crate::driver::DriverInfo;
use crate::topology::Gpu;

/// The environment variable NVIDIA's container runtime reads.
pub const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";

/// Why the GPUs cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// Bad config.
    #[error("GPU provider config, {0}")]
    Config(ConfigError),
    /// Bad topology file.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
}

impl From<ConfigError> for SetupError {
    fn from(e: ConfigError) -> Self {
        SetupError::Config(e)
    }
}

/// The machine's GPUs under the configured resource and policy.
#[derive(Debug, Clone)]
pub struct Gpus {
    resource: String,
    source: Source,
    chooser: Chooser,
    driver: Vec<DriverInfo>,
}

impl Gpus {
    /// Parses `config` (the `[providers.NAME.config]` table), finds the GPUs
    /// (topology file relative to `config_dir`, else NVML, else PCI) and
    /// logs where they came from.
    pub fn new(
        config: &serde_json::Value,
        config_dir: Option<&Path>,
        machine: &Machine,
    ) -> Result<Self, SetupError> {
        let config = GpuConfig::from_json(config)?;
        let found = discovery::discover(&config, config_dir, machine)?;
        tracing::info!(
            resource = %config.resource,
            gpus = found.topology.len(),
            source = %found.source,
            policy = %config.allocation_policy,
            device_nodes = found.driver.iter().filter(|d| d.minor.is_some()).count(),
            mig_devices = found.driver.iter().map(|d| d.mig.len()).sum::<usize>(),
            "GPUs found"
        );
        Ok(Gpus {
            resource: config.resource,
            source: found.source,
            chooser: Chooser::new(found.topology, config.allocation_policy),
            driver: found.driver,
        })
    }

    /// The resource name (`nvidia.com/gpu` by default).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Where the GPUs came from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The GPUs, by index.
    pub fn gpus(&self) -> &[Gpu] {
        self.chooser.topology().gpus()
    }

    /// What the driver says of the GPU of index `index` (device minor,
    /// UUID, MIG devices; see [`crate::driver`]).
    pub fn driver_info(&self, index: usize) -> Option<&DriverInfo> {
        self.driver.get(index)
    }

    /// Every GPU's device id and NUMA node, by index.
    pub fn devices(&self) -> impl Iterator<Item = (&str, Option<NumaNodeId>)> + '_ {
        self.chooser
            .topology()
            .gpus()
            .iter()
            .map(|g| (g.id.as_str(), g.numa))
    }

    /// The choice among the GPUs: [`Chooser::choose`] is the device
    /// plugin's `GetPreferredAllocation`.
    pub fn chooser(&self) -> &Chooser {
        &self.chooser
    }

    /// The allocation's environment for `ids`:
    /// `NVIDIA_VISIBLE_DEVICES=<id>,<id>,...`.
    pub fn env<S: AsRef<str>>(ids: &[S]) -> (String, String) {
        let value = ids.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(",");
        (VISIBLE_DEVICES_ENV.to_owned(), value)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A bad config is said in the message, with no source beside it.
    #[test]
    fn a_config_error_is_in_the_message_only() {
        use std::error::Error as _;
        let machine = topomgr_sdk::testkit::machine(1, 1);
        let e = Gpus::new(&json!("gpus"), None, &machine).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GPU provider config, config: must be a table, found \"gpus\""
        );
        assert!(e.source().is_none());
    }

    fn example_machine_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/machines")
    }

    #[test]
    fn from_a_topology_file_relative_to_the_config_directory() {
        let machine = topomgr_sdk::testkit::machine_from_cpus(
            (0..2)
                .map(|id| {
                    topomgr_sdk::Cpu::new(id, topomgr_sdk::NumaNodeId::new(id).ok()).with_socket(id)
                })
                .collect(),
            2,
        );
        let gpus = Gpus::new(
            &json!({"topology_file": "2s8g/gpu-topology.json", "allocation_policy": "simple"}),
            Some(&example_machine_dir()),
            &machine,
        )
        .unwrap();
        assert_eq!(gpus.resource(), "nvidia.com/gpu");
        assert_eq!(
            gpus.source(),
            &Source::File(example_machine_dir().join("2s8g/gpu-topology.json"))
        );
        let devices: Vec<_> = gpus.devices().collect();
        assert_eq!(devices.len(), 8);
        assert_eq!(devices[0], ("GPU-0", NumaNodeId::new(0).ok()));
        assert_eq!(devices[7], ("GPU-7", NumaNodeId::new(1).ok()));
        assert_eq!(
            gpus.chooser()
                .choose(&["GPU-3", "GPU-1", "GPU-2"], &["GPU-2"], 2)
                .unwrap(),
            ["GPU-2", "GPU-1"],
            "simple: required first, then by index"
        );
        assert_eq!(
            Gpus::env(&["GPU-2", "GPU-1"]),
            (
                "NVIDIA_VISIBLE_DEVICES".to_owned(),
                "GPU-2,GPU-1".to_owned()
            )
        );
    }

    #[test]
    fn setup_errors_name_the_key_or_file() {
        let machine = Machine::default();
        let err = Gpus::new(&json!({"allocation_policy": 1}), None, &machine).unwrap_err();
        assert_eq!(
            err.to_string(),
            "GPU provider config, allocation_policy: invalid type: integer `1`, expected a string"
        );
        let err = Gpus::new(
            &json!({"topology_file": "/nonexistent/t.json"}),
            None,
            &machine,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot read topology file /nonexistent/t.json: No such file or directory (os error 2)"
        );
    }
}
