//! [`GpuPlugin`]: the GPUs as a topomgr device plugin on the SDK's device
//! toolkit, exported as this cdylib's provider (`libtopomgr_provider_gpu.so`).
//!
//! The toolkit ([`topomgr_sdk::devices`]) is the kubelet's Device Manager:
//! NUMA hints, allocation honouring the merged hint (the kubelet's
//! `devicesToAllocate`), init-container reuse, release, checkpoint/restore
//! and the per-NUMA inventory. This module lists the GPUs (device id, NUMA
//! node) under the configured resource and plugs in what NVIDIA's device
//! plugin does:
//!
//! * [`DeviceHooks::preferred_allocation`] (`GetPreferredAllocation`, the
//!   `topomgr provider gpu preferred` verb, and the toolkit's choice among
//!   the devices aligned with the merged hint while allocating) runs the
//!   configured policy's choice ([`Chooser::choose`](crate::choice::Chooser::choose)):
//!   go-gpuallocator's best-effort or simple policy, on the ids in the order
//!   given;
//! * [`DeviceHooks::environment`] sets `NVIDIA_VISIBLE_DEVICES=<id>,<id>,...`
//!   in the order the GPUs were allocated.
//!
//! Config errors and unusable topology files fail the provider's start
//! (reason `InvalidConfig`) with the key, or the file and line or field.
//! A machine without NVIDIA GPUs gives the resource with no devices: the
//! provider loads, owns the resource, and a pod asking for GPUs is refused
//! when it is allocated, as on a kubelet whose plugin has no devices.

use std::collections::BTreeMap;

use topomgr_sdk::devices::{Device, DeviceHooks, DevicePlugin, Devices};
use topomgr_sdk::{ProviderContext, ProviderError, INVALID_REQUEST_REASON};

use crate::driver::DriverInfo;
use crate::gpus::{Gpus, SetupError};
use crate::topology::Gpu;

/// The GPU provider: [`Gpus`] behind the device toolkit's hooks.
#[derive(Debug)]
pub struct GpuPlugin {
    gpus: Gpus,
}

impl GpuPlugin {
    /// The GPUs, resource and choice this plugin serves.
    pub fn gpus(&self) -> &Gpus {
        &self.gpus
    }
}

impl DevicePlugin for GpuPlugin {
    fn new(ctx: &ProviderContext<'_>) -> Result<(Self, Devices), ProviderError> {
        let gpus = Gpus::new(&ctx.config.0, ctx.config_dir, ctx.machine).map_err(|e| match e {
            SetupError::Config(e) => ProviderError::config(e.to_string()),
            SetupError::Discovery(e) => ProviderError::config(e.to_string()),
        })?;
        let devices = gpus
            .gpus()
            .iter()
            .map(|g| device(g, gpus.driver_info(g.index)))
            .collect();
        let devices = Devices::new().resource(gpus.resource(), devices);
        Ok((GpuPlugin { gpus }, devices))
    }
}

/// A GPU as the toolkit's device: known by its PCI address (every source
/// gives it, a topology file when it lists `pci`) and by its id when that is
/// an NVML UUID, so that a GPU first found by its PCI address and later
/// through NVML or a topology file (or under a renamed resource) stays the
/// pod's that holds it.
///
/// Its index (NVML's) is the device's `index` attribute, so that a
/// container whose `NVIDIA_VISIBLE_DEVICES` names GPUs by index is aligned
/// with them ([`topomgr_sdk::devices::DeviceManager::assigned_device_hints`]).
///
/// What the driver says of it ([`crate::driver`]): its device node
/// `c 195:<minor>` is the device's
/// [`DEVICE_NODE_ATTRIBUTE`](topomgr_sdk::devices::DEVICE_NODE_ATTRIBUTE)
/// (a CDI device's `/dev/nvidiaN` names it), and its UUID (from the proc
/// file, where its id is a PCI address) and its MIG devices' UUIDs are
/// serial identities (a `MIG-…` in `NVIDIA_VISIBLE_DEVICES` names its
/// parent GPU; why identities, see [`crate::driver`]).
fn device(g: &Gpu, driver: Option<&DriverInfo>) -> Device {
    let mut d = Device::new(&g.id, g.numa)
        .with_attribute(topomgr_sdk::devices::INDEX_ATTRIBUTE, g.index.to_string());
    if let Some(pci) = &g.pci {
        d = d.with_pci_address(pci);
    }
    if crate::driver::is_uuid(&g.id) {
        d = d.with_serial(&g.id);
    }
    if let Some(info) = driver {
        if let Some(node) = info.device_node() {
            d = d.with_attribute(topomgr_sdk::devices::DEVICE_NODE_ATTRIBUTE, node);
        }
        for uuid in info.uuid.iter().chain(&info.mig) {
            d = d.with_serial(uuid);
        }
    }
    d
}

impl DeviceHooks for GpuPlugin {
    fn preferred_allocation(
        &mut self,
        _resource: &str,
        available: &[&Device],
        must_include: &[&Device],
        size: usize,
    ) -> Result<Vec<String>, ProviderError> {
        let ids =
            |devices: &[&Device]| -> Vec<String> { devices.iter().map(|d| d.id.clone()).collect() };
        self.gpus
            .chooser()
            .choose(&ids(available), &ids(must_include), size)
            .map_err(|e| ProviderError::new(INVALID_REQUEST_REASON, e.to_string()))
    }

    fn environment(
        &self,
        _resource: &str,
        devices: &[&Device],
    ) -> Result<BTreeMap<String, String>, ProviderError> {
        let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
        Ok(BTreeMap::from([Gpus::env(&ids)]))
    }
}

topomgr_sdk::export_device_plugin!(GpuPlugin);

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use serde_json::{json, Value};
    use topomgr_sdk::devices::DeviceProvider;
    use topomgr_sdk::{testkit, Provider, ProviderConfig};

    use super::*;

    const GPU: &str = "nvidia.com/gpu";

    fn machines_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/machines")
    }

    /// The example machine's GPUs (`2s8g/gpu-topology.json`) on a 2-node machine.
    fn example(config: Value) -> testkit::Loaded {
        let mut config = config;
        config["topology_file"] = json!(machines_dir().join("2s8g/gpu-topology.json"));
        testkit::load::<DeviceProvider<GpuPlugin>>(&testkit::machine(2, 2), config)
            .unwrap_or_else(|e| panic!("provider: {e}"))
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn hints_choice_and_environment_on_the_example_machine() {
        let mut p = example(json!({}));
        let pod = testkit::guaranteed_pod("a", &[(GPU, 2)]);
        let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
        testkit::assert_hints(&h, GPU, &[0, 1], Some(&["0:true", "1:true", "0-1:false"]));
        // Inside node 0 the NVLink-bridged pair, not two PCIe peers.
        let a = p
            .allocate(&pod, &pod.containers[0], &testkit::hint("0:true"))
            .unwrap();
        assert_eq!(a.devices[GPU], ids(&["GPU-0", "GPU-1"]));
        assert_eq!(a.env["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-1");
        assert!(a.mems.is_empty() && a.cpus.is_empty(), "{a:?}");
        // Three of node 1's four: every 3-set scores 1290, upstream's first.
        let pod3 = testkit::guaranteed_pod("b", &[(GPU, 3)]);
        let a = p
            .allocate(&pod3, &pod3.containers[0], &testkit::hint("1:true"))
            .unwrap();
        assert_eq!(a.devices[GPU], ids(&["GPU-4", "GPU-5", "GPU-6"]));
        // Asked again, a container's hints come from the GPUs it holds.
        let h = p.topology_hints(&pod3, &pod3.containers[0]).unwrap();
        testkit::assert_hints(&h, GPU, &[0, 1], Some(&["1:true", "0-1:false"]));
        // Node 0 keeps GPU-2 and GPU-3, node 1 GPU-7: 3 GPUs fit only both
        // nodes, not preferred (one node of this machine could hold them).
        let pod_c = testkit::guaranteed_pod("c", &[(GPU, 3)]);
        let h = p.topology_hints(&pod_c, &pod_c.containers[0]).unwrap();
        testkit::assert_hints(&h, GPU, &[0, 1], Some(&["0-1:false"]));
    }

    /// The named call `device_identities` through the boundary: each GPU
    /// with its PCI address, so that the host knows it whatever resource
    /// name or id it is given under.
    #[test]
    fn device_identities_name_each_gpu_by_its_pci_address() {
        let mut p = example(json!({}));
        let served = p.device_identities().unwrap().expect("the toolkit answers");
        let gpus = &served.resources[GPU];
        assert_eq!(gpus.len(), 8);
        assert_eq!(gpus[0].id, "GPU-0");
        assert_eq!(gpus[0].identity, ["pci:0000:17:00.0"]);
        assert_eq!(gpus[7].identity, ["pci:0000:b0:00.0"]);
    }

    #[test]
    fn preferred_runs_the_configured_policy() {
        let request = |available: &[&str], must: &[&str], size| {
            topomgr_sdk::PreferredAllocationRequest::new(GPU, ids(available), ids(must), size)
        };
        let mut best = example(json!({}));
        let mut simple = example(json!({"allocation_policy": "simple"}));
        let r = request(&["GPU-1", "GPU-2", "GPU-3", "GPU-5"], &[], 2);
        assert_eq!(
            best.preferred_allocation(&r).unwrap(),
            ids(&["GPU-2", "GPU-3"])
        );
        assert_eq!(
            simple.preferred_allocation(&r).unwrap(),
            ids(&["GPU-1", "GPU-2"])
        );
        let r = request(&["GPU-7", "GPU-0", "GPU-6", "GPU-1"], &["GPU-1"], 2);
        assert_eq!(
            best.preferred_allocation(&r).unwrap(),
            ids(&["GPU-0", "GPU-1"]),
            "the order of available"
        );
        assert_eq!(
            simple.preferred_allocation(&r).unwrap(),
            ids(&["GPU-1", "GPU-0"]),
            "required first, then by index"
        );
        let err = best
            .preferred_allocation(&request(&["GPU-0", "GPU-8"], &[], 1))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "InvalidRequest: resource nvidia.com/gpu has no device \"GPU-8\""
        );
    }

    #[test]
    fn an_init_containers_gpus_are_reused_and_checkpoints_restore() {
        let mut p = example(json!({}));
        let pod = testkit::pod(
            "r",
            vec![testkit::container("init", &[(GPU, 2)])],
            vec![testkit::container("app", &[(GPU, 2)])],
        );
        let init = p
            .allocate(&pod, &pod.init_containers[0], &testkit::hint("1:true"))
            .unwrap();
        assert_eq!(init.devices[GPU], ids(&["GPU-4", "GPU-5"]));
        let app = p
            .allocate(&pod, &pod.containers[0], &testkit::hint("1:true"))
            .unwrap();
        assert_eq!(app.devices[GPU], ids(&["GPU-4", "GPU-5"]), "reused");
        assert_eq!(app.env["NVIDIA_VISIBLE_DEVICES"], "GPU-4,GPU-5");
        let saved = p.checkpoint().unwrap();
        let mut q = example(json!({}));
        q.restore(&saved).unwrap();
        assert_eq!(q.checkpoint().unwrap(), saved);
        // Restored: node 1 has GPU-6 and GPU-7 left, the app its own two.
        let other = testkit::guaranteed_pod("o", &[(GPU, 3)]);
        let h = q.topology_hints(&other, &other.containers[0]).unwrap();
        testkit::assert_hints(&h, GPU, &[0, 1], Some(&["0:true", "0-1:false"]));
        let again = q
            .allocate(&pod, &pod.containers[0], &testkit::hint("1:true"))
            .unwrap();
        assert_eq!(again.devices[GPU], ids(&["GPU-4", "GPU-5"]), "re-admission");
    }

    #[test]
    fn the_topology_file_resolves_against_the_config_directory() {
        let machine = testkit::machine(2, 2);
        let config = ProviderConfig(json!({"topology_file": "2s8g/gpu-topology.json"}));
        let state = std::env::temp_dir();
        let dir = machines_dir();
        let ctx = ProviderContext::new(&machine, &config, &state).with_config_dir(Some(&dir));
        let p = DeviceProvider::<GpuPlugin>::new(&ctx).unwrap();
        let devices = p.manager().devices(GPU).unwrap();
        assert_eq!(devices.len(), 8);
        assert_eq!(devices[5].id, "GPU-5");
        assert_eq!(devices[5].numa.to_string(), "1");
        let ctx = ProviderContext::new(&machine, &config, &state);
        let err = DeviceProvider::<GpuPlugin>::new(&ctx).err().unwrap();
        assert_eq!(
            err.to_string(),
            "InvalidConfig: cannot read topology file 2s8g/gpu-topology.json: No such file or \
             directory (os error 2)",
            "without a config directory: relative to the working directory"
        );
    }

    #[test]
    fn bad_config_and_topology_files_fail_the_start() {
        let machine = testkit::machine(2, 2);
        let err = |config: Value| {
            testkit::load::<DeviceProvider<GpuPlugin>>(&machine, config)
                .expect_err("refused")
                .to_string()
        };
        assert_eq!(
            err(json!({"allocation_policy": "fast"})),
            "InvalidConfig: allocation_policy: unknown policy `fast` (known: best-effort, simple)"
        );
        assert_eq!(
            err(json!({"resource": "gpu"})),
            "InvalidConfig: resource: `gpu` is not an extended resource name (<domain>/<name>, \
             e.g. nvidia.com/gpu): no `/`"
        );
        let dir = std::env::temp_dir().join(format!("gpu-plugin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.json");
        std::fs::write(
            &file,
            "{\"gpus\": [{\"index\": 0, \"id\": \"a\", \"numa\": 0}],\n \"links\": [[0, 0, \"NV2\"]]}",
        )
        .unwrap();
        assert_eq!(
            err(json!({"topology_file": file})),
            format!(
                "InvalidConfig: topology file {}, links[0]: a link from GPU 0 to itself",
                file.display()
            )
        );
        std::fs::write(&file, "\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV3\t X \n").unwrap();
        assert_eq!(
            err(json!({"topology_file": file})),
            format!(
                "InvalidConfig: topology file {}, line 2, column GPU1: GPU0 to GPU1 is NV2, \
                 but line 3 says GPU1 to GPU0 is NV3: links are symmetric",
                file.display()
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn without_nvidia_gpus_the_resource_has_no_devices() {
        let machine = testkit::machine_with_devices(
            2,
            2,
            vec![testkit::pci_device(
                "0000:05:00.0",
                "0x8086",
                "0x020000",
                Some(0),
            )],
        );
        let mut p = testkit::load::<DeviceProvider<GpuPlugin>>(
            &machine,
            json!({"nvml_library": "/nonexistent/libnvidia-ml.so.1"}),
        )
        .unwrap();
        let inventory = p.inventory().unwrap();
        assert_eq!(inventory.resources[GPU].total.capacity, 0);
        let pod = testkit::guaranteed_pod("a", &[(GPU, 1)]);
        let h = p.topology_hints(&pod, &pod.containers[0]).unwrap();
        assert_eq!(
            h.unwrap().get(GPU),
            Some(&None),
            "no topology: no preference"
        );
        let err = p
            .allocate(&pod, &pod.containers[0], &testkit::hint("0:true"))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "UnexpectedAdmissionError: no healthy devices of nvidia.com/gpu are present; \
             unhealthy devices cannot be allocated"
        );
        let none = testkit::guaranteed_pod("b", &[("cpu", 1000)]);
        assert!(p
            .allocate(&none, &none.containers[0], &testkit::hint("0:true"))
            .is_ok());
    }
}
