//! The plugin boundary in-process: [`load`] and [`through_boundary`] put a
//! provider behind the same conversions and panic guard as a host's loaded
//! `.so` (feature `plugin-abi`, on by default).
//!
//! The vendor's documentation is built without the ABI layer; rustdoc reads
//! only the signatures here, so they name nothing of it (`Boundary`).

use super::unique_state_dir;
#[cfg(feature = "plugin-abi")]
use crate::ffi::{self, FfiInit};
use crate::{
    Allocation, AssignedDeviceHints, AssignedDevicesRequest, ContainerView, DeviceIdentities,
    Inventory, Machine, PodView, PreferredAllocationRequest, Provider, ProviderError,
    ProviderHints, Reconciled, TopologyHint,
};

/// What a [`Loaded`] holds: the host's handle on the boundary.
#[cfg(feature = "plugin-abi")]
type Boundary = ffi::ProviderHandle;
/// In the vendor's documentation (built without `plugin-abi`, never
/// compiled into code) a stand-in with the handle's auto traits (`Send`,
/// `Sync`, unwind-safe, not `Unpin`), so that both builds document the same
/// [`Loaded`].
#[cfg(not(feature = "plugin-abi"))]
type Boundary = std::marker::PhantomPinned;

/// Loads provider `P` the way a host loads its `.so`, in-process: the
/// machine and config cross as JSON into `P`'s exported constructor, and
/// every call goes through the same conversions and panic guard (a panic
/// comes back as an error with reason `"ProviderPanic"`). The state
/// directory is unique per call, as in [`new_provider`](super::new_provider).
///
/// ```
/// # use topomgr_sdk::*;
/// # struct Nothing;
/// # impl Provider for Nothing {
/// #     fn new(ctx: &ProviderContext<'_>) -> Result<Self, ProviderError> {
/// #         let _: std::collections::BTreeMap<String, u32> = ctx.config.parse()?; Ok(Nothing) }
/// #     fn topology_hints(&mut self, _: &PodView, _: &ContainerView) -> Result<ProviderHints, ProviderError> { Ok(no_hints()) }
/// #     fn pod_topology_hints(&mut self, _: &PodView) -> Result<ProviderHints, ProviderError> { Ok(no_hints()) }
/// #     fn allocate(&mut self, _: &PodView, _: &ContainerView, _: &TopologyHint) -> Result<Allocation, ProviderError> { Ok(Allocation::default()) }
/// #     fn release(&mut self, _: &str, _: &str) -> Result<(), ProviderError> { Ok(()) }
/// #     fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> { Ok(vec![]) }
/// #     fn restore(&mut self, _: &[u8]) -> Result<Reconciled, ProviderError> { Ok(Reconciled::new()) }
/// # }
/// let machine = testkit::machine(2, 2);
/// let err = testkit::load::<Nothing>(&machine, serde_json::json!({"a": "x"})).unwrap_err();
/// assert_eq!(err.to_string(), "InvalidConfig: a: invalid type: string \"x\", expected u32");
/// ```
pub fn load<P: Provider>(
    machine: &Machine,
    config: serde_json::Value,
) -> Result<Loaded, ProviderError> {
    let machine_json = serde_json::to_value(machine)
        .map_err(|e| ProviderError::new("InvalidMachine", e.to_string()))?;
    let init = FfiInit {
        init_json: ffi::init_json("testkit", &machine_json, &config, &unique_state_dir(), None)
            .into(),
        log: ffi::discard_log,
        log_max_level: 0,
    };
    ffi::construct_in_process::<P>(init).map(Loaded)
}

/// Wraps `provider` in the same boundary adapter the host calls through a
/// loaded plugin (conversions and the `catch_unwind` guard), in-process: a
/// panic in a method comes back as an error with reason `"ProviderPanic"`.
pub fn through_boundary<P: Provider>(provider: P) -> Loaded {
    Loaded(ffi::in_process(provider))
}

/// A provider behind the plugin boundary, as the host sees it ([`load`],
/// [`through_boundary`]).
#[derive(Debug)]
pub struct Loaded(Boundary);

impl Loaded {
    /// [`Provider::topology_hints`] through the boundary.
    pub fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        self.0.topology_hints(pod, container)
    }

    /// [`Provider::pod_topology_hints`] through the boundary.
    pub fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        self.0.pod_topology_hints(pod)
    }

    /// [`Provider::allocate`] through the boundary.
    pub fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        self.0.allocate(pod, container, hint)
    }

    /// [`Provider::release`] through the boundary.
    pub fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        self.0.release(pod_uid, container)
    }

    /// [`Provider::checkpoint`] through the boundary.
    pub fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        self.0.checkpoint()
    }

    /// [`Provider::restore`] through the boundary.
    pub fn restore(&mut self, data: &[u8]) -> Result<Reconciled, ProviderError> {
        self.0.restore(data)
    }

    /// [`Provider::preferred_allocation`] through the boundary.
    pub fn preferred_allocation(
        &mut self,
        request: &PreferredAllocationRequest,
    ) -> Result<Vec<String>, ProviderError> {
        self.0.preferred_allocation(request)
    }

    /// [`Provider::inventory`] through the boundary.
    pub fn inventory(&mut self) -> Result<Inventory, ProviderError> {
        self.0.inventory()
    }

    /// [`Provider::device_identities`] through the boundary (`None`: the
    /// plugin does not know the call).
    pub fn device_identities(&mut self) -> Result<Option<DeviceIdentities>, ProviderError> {
        self.0.device_identities()
    }

    /// [`Provider::assigned_device_hints`] through the boundary.
    pub fn assigned_device_hints(
        &mut self,
        request: &AssignedDevicesRequest,
    ) -> Result<AssignedDeviceHints, ProviderError> {
        self.0.assigned_device_hints(request)
    }

    /// [`Provider::exclude_cpus`] through the boundary.
    pub fn exclude_cpus(&mut self, cpus: &crate::CpuSet) -> Result<bool, ProviderError> {
        self.0.exclude_cpus(cpus)
    }

    /// [`Provider::resize`] through the boundary.
    pub fn resize(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        current: &Allocation,
        hint: &TopologyHint,
    ) -> Result<Option<Allocation>, ProviderError> {
        self.0.resize(pod, container, current, hint)
    }
}

#[cfg(test)]
mod tests {
    /// The vendor's docs show `Loaded` with the stand-in's auto traits: the
    /// real handle must have the same positive ones (both are `!Unpin`).
    #[test]
    fn the_documented_auto_traits_hold() {
        fn documented<T: Send + Sync + std::panic::UnwindSafe + std::panic::RefUnwindSafe>() {}
        documented::<super::Loaded>();
        documented::<std::marker::PhantomPinned>();
    }
}
