//! [`DeviceHooks`], [`DevicePlugin`] and [`DeviceProvider`]: a device
//! provider written as a kubelet device plugin, with the SDK as its kubelet.

use std::collections::BTreeMap;

use super::{Device, DeviceManager, Devices};
use crate::{
    Allocation, AssignedDeviceHints, AssignedDevicesRequest, ContainerView, DeviceIdentities,
    Inventory, PodView, PreferredAllocationRequest, Provider, ProviderContext, ProviderError,
    ProviderHints, Reconciled, TopologyHint,
};

/// Where a device provider's own logic plugs into the [`DeviceManager`]:
/// the calls the kubelet makes to a device plugin. Both have defaults; a
/// provider without either implements the trait with an empty body.
pub trait DeviceHooks {
    /// The device plugins' `GetPreferredAllocation`: which `size` devices of
    /// `resource` to take from `available` (in the provider's order),
    /// including every device of `must_include`. Return their ids in order of
    /// preference; unknown ids are ignored and an empty answer means "no
    /// preference" (the default), after which devices are taken in order.
    ///
    /// The manager calls it while allocating, exactly where the kubelet
    /// calls the plugin (among the devices aligned with the merged hint when
    /// they are more than enough, else among all available ones), and
    /// `topomgr provider NAME preferred` calls it directly. This is where a
    /// GPU provider puts its NVLink-aware choice.
    fn preferred_allocation(
        &mut self,
        resource: &str,
        available: &[&Device],
        must_include: &[&Device],
        size: usize,
    ) -> Result<Vec<String>, ProviderError> {
        let _ = (resource, available, must_include, size);
        Ok(Vec::new())
    }

    /// The environment a container that holds `devices` of `resource` gets
    /// (the device plugins' `Allocate` answer; for example
    /// `NVIDIA_VISIBLE_DEVICES`). The default sets nothing. Name variables
    /// after your resource: the host refuses an allocation whose variables
    /// conflict with another provider's.
    fn environment(
        &self,
        resource: &str,
        devices: &[&Device],
    ) -> Result<BTreeMap<String, String>, ProviderError> {
        let _ = (resource, devices);
        Ok(BTreeMap::new())
    }
}

/// No hooks: no preference, no environment.
impl DeviceHooks for () {}

/// A device provider written like a kubelet device plugin: it lists its
/// devices once, at construction, and implements the [`DeviceHooks`] it
/// needs; [`DeviceProvider`] does the rest (hints, allocation, reuse,
/// release, checkpoint and reconcile, inventory) exactly as the kubelet's
/// Device Manager. Export it with
/// [`export_device_plugin!`](crate::export_device_plugin).
///
/// A complete provider for 4 FPGAs on 2 NUMA nodes, each known by its PCI
/// address, with its resource name in the config and an environment
/// variable naming the FPGAs a container gets:
///
/// ```
/// use std::collections::BTreeMap;
///
/// use topomgr_sdk::devices::{Device, DeviceHooks, DevicePlugin, Devices};
/// use topomgr_sdk::{NumaNodeId, ProviderContext, ProviderError};
///
/// topomgr_sdk::provider_config! {
///     struct Config {
///         resource: String,
///     }
/// }
///
/// pub struct Fpgas;
///
/// impl DevicePlugin for Fpgas {
///     fn new(ctx: &ProviderContext<'_>) -> Result<(Self, Devices), ProviderError> {
///         let cfg: Config = ctx.config.parse()?;
///         let fpgas = (0..4u8)
///             .map(|i| {
///                 Device::new(format!("fpga-{i}"), Some(NumaNodeId::from(i / 2)))
///                     .with_pci_address(&format!("0000:{:02x}:00.0", 0x3b + i))
///             })
///             .collect();
///         Ok((Fpgas, Devices::new().resource(cfg.resource, fpgas)))
///     }
/// }
///
/// impl DeviceHooks for Fpgas {
///     fn environment(
///         &self,
///         _resource: &str,
///         devices: &[&Device],
///     ) -> Result<BTreeMap<String, String>, ProviderError> {
///         let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
///         Ok(BTreeMap::from([("FPGA_DEVICES".to_owned(), ids.join(","))]))
///     }
/// }
///
/// topomgr_sdk::export_device_plugin!(Fpgas);
/// # use topomgr_sdk::{devices::DeviceProvider, testkit};
/// # let mut p = testkit::load::<DeviceProvider<Fpgas>>(
/// #     &testkit::machine(2, 1),
/// #     topomgr_sdk::serde_json::json!({"resource": "example.com/fpga"}),
/// # ).unwrap();
/// # let pod = testkit::guaranteed_pod("a", &[("example.com/fpga", 2)]);
/// # let a = p.allocate(&pod, &pod.containers[0], &testkit::hint("1:true")).unwrap();
/// # assert_eq!(a.env["FPGA_DEVICES"], "fpga-2,fpga-3");
/// ```
pub trait DevicePlugin: DeviceHooks + Send + Sync + 'static {
    /// Builds the plugin from the machine and its config, and lists its
    /// resources and devices. Bad config is an error naming the key
    /// ([`ProviderConfig::parse`](crate::ProviderConfig::parse) does).
    ///
    /// The toolkit then checks the list ([`DeviceManager::new`]) and
    /// refuses the provider's start (reason `"InvalidConfig"`, naming the
    /// resource and device) for: an empty or repeated resource name; an
    /// empty or repeated device id within a resource; a device id with a
    /// comma or whitespace; two devices with one identity (one PCI address,
    /// one serial); an empty identity or a PCI address that is not one; a
    /// device on a NUMA node the machine does not have. No need to check
    /// these again. Give each device its PCI address or serial where it has
    /// one ([`Device::with_pci_address`], [`Device::with_serial`]): saved
    /// assignments then find it under any id or resource name.
    fn new(ctx: &ProviderContext<'_>) -> Result<(Self, Devices), ProviderError>
    where
        Self: Sized;
}

/// A [`Provider`] made of a [`DevicePlugin`] and a [`DeviceManager`].
///
/// Its checkpoint holds the device assignments only, and its restore is
/// [`DeviceManager::restore`]'s reconcile; a plugin with state of its own
/// implements [`Provider`] itself around a [`DeviceManager`].
pub struct DeviceProvider<P: DevicePlugin> {
    plugin: P,
    manager: DeviceManager,
}

impl<P: DevicePlugin> DeviceProvider<P> {
    /// The plugin.
    pub fn plugin(&self) -> &P {
        &self.plugin
    }

    /// The device manager.
    pub fn manager(&self) -> &DeviceManager {
        &self.manager
    }
}

impl<P: DevicePlugin> Provider for DeviceProvider<P> {
    fn new(ctx: &ProviderContext<'_>) -> Result<Self, ProviderError> {
        let (plugin, devices) = P::new(ctx)?;
        let manager = DeviceManager::new(ctx.machine, devices)?;
        for resource in manager.resources() {
            tracing::info!(
                resource,
                devices = manager.devices(resource).map_or(0, <[_]>::len),
                "device resource registered"
            );
        }
        Ok(DeviceProvider { plugin, manager })
    }

    fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        self.manager.topology_hints(pod, container)
    }

    fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        self.manager.pod_topology_hints(pod)
    }

    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        self.manager
            .allocate(pod, container, hint, &mut self.plugin)
    }

    fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        self.manager.release(pod_uid, container);
        Ok(())
    }

    fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        self.manager.checkpoint()
    }

    fn restore(&mut self, saved: &[u8]) -> Result<Reconciled, ProviderError> {
        self.manager.restore(saved)
    }

    fn preferred_allocation(
        &mut self,
        request: &PreferredAllocationRequest,
    ) -> Result<Vec<String>, ProviderError> {
        self.manager.preferred_allocation(request, &mut self.plugin)
    }

    fn inventory(&self) -> Result<Inventory, ProviderError> {
        Ok(self.manager.inventory())
    }

    fn assigned_device_hints(
        &mut self,
        request: &AssignedDevicesRequest,
    ) -> Result<AssignedDeviceHints, ProviderError> {
        self.manager.assigned_device_hints(request)
    }

    fn device_identities(&self) -> Result<DeviceIdentities, ProviderError> {
        Ok(self.manager.device_identities())
    }
}

/// Exports a [`DevicePlugin`] as this cdylib's topomgr plugin: the same as
/// [`export_provider!`](crate::export_provider) on
/// [`DeviceProvider<T>`](crate::devices::DeviceProvider).
///
/// ```ignore
/// topomgr_sdk::export_device_plugin!(MyDevices);
/// ```
#[macro_export]
macro_rules! export_device_plugin {
    ($plugin:ty) => {
        $crate::export_provider!($crate::devices::DeviceProvider<$plugin>);
    };
}
