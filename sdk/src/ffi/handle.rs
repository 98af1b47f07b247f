//! The host side: [`ProviderHandle`] calls a provider object with the SDK's
//! ordinary types, converting on the way in and out.

use std::borrow::Cow;
use std::sync::Arc;

use abi_stable::std_types::{RResult, RSlice, RStr, RString};

use super::abi::*;
use super::convert::*;
use crate::{
    Allocation, AssignedDeviceHints, AssignedDevicesRequest, ContainerView, DeviceIdentities,
    Inventory, PodView, PreferredAllocationRequest, ProviderError, ProviderHints, Reconciled,
    TopologyHint,
};

/// Calls a root module's constructor and wraps the result.
pub fn construct(module: ProviderModRef, init: FfiInit) -> Result<ProviderHandle, ProviderError> {
    let new = module.new();
    match new(init) {
        RResult::ROk(b) => Ok(ProviderHandle::new(b)),
        RResult::RErr(e) => Err(e.into()),
    }
}

/// The host side of a provider object: calls it with the SDK's ordinary
/// types, converting on the way in and out. The `*_json` methods take the
/// JSON forms directly (what a host of another patch release would send).
pub struct ProviderHandle {
    inner: FfiProviderBox,
    sharing: PodSharing,
}

/// Where [`METHOD_SHARE_POD`] stands with one plugin.
enum PodSharing {
    /// Not asked yet, or the last share failed.
    Unknown,
    /// The plugin keeps this pod (held here, so that its address names it).
    Kept(Arc<PodView>),
    /// The plugin does not know the call: every call carries its pod.
    Unsupported,
}

impl std::fmt::Debug for ProviderHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProviderHandle")
    }
}

impl ProviderHandle {
    /// Wraps a provider object.
    pub fn new(inner: FfiProviderBox) -> Self {
        ProviderHandle {
            inner,
            sharing: PodSharing::Unknown,
        }
    }

    /// Hands `pod` to the plugin once ([`METHOD_SHARE_POD`]), so that the
    /// calls that pass this very object (`&*pod`, compared by address)
    /// send an empty pod instead of encoding it again. Calls about any
    /// other pod carry it in full. A plugin without the call, or a share
    /// that fails, only costs the encoding per call; the failure is logged
    /// at debug level.
    pub fn share_pod(&mut self, pod: &Arc<PodView>) {
        match &self.sharing {
            PodSharing::Unsupported => return,
            PodSharing::Kept(kept) if Arc::ptr_eq(kept, pod) => return,
            _ => {}
        }
        self.sharing = PodSharing::Unknown;
        match to_json(&**pod).and_then(|json| self.call(METHOD_SHARE_POD, &json)) {
            Ok(Some(_)) => self.sharing = PodSharing::Kept(Arc::clone(pod)),
            Ok(None) => self.sharing = PodSharing::Unsupported,
            Err(e) => {
                tracing::debug!(pod = %pod.uid, error = %e, "sharing the pod with the provider failed; calls carry it in full");
            }
        }
    }

    /// The pod argument of a call: empty for the pod the plugin keeps.
    fn pod_arg(&self, pod: &PodView) -> Result<Cow<'static, str>, ProviderError> {
        match &self.sharing {
            PodSharing::Kept(kept) if std::ptr::eq(&**kept, pod) => Ok(Cow::Borrowed("")),
            _ => to_json(pod).map(Cow::Owned),
        }
    }

    /// See [`Provider::topology_hints`].
    pub fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError> {
        self.topology_hints_json(&self.pod_arg(pod)?, &to_json(container)?)
    }

    /// [`Self::topology_hints`] with the pod and container as JSON.
    pub fn topology_hints_json(
        &mut self,
        pod: &str,
        container: &str,
    ) -> Result<ProviderHints, ProviderError> {
        let r = self
            .inner
            .topology_hints(RStr::from_str(pod), RStr::from_str(container));
        hints_from_ffi(r.into_result()?)
    }

    /// See [`Provider::pod_topology_hints`].
    pub fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError> {
        let r = self
            .inner
            .pod_topology_hints(RStr::from_str(&self.pod_arg(pod)?));
        hints_from_ffi(r.into_result()?)
    }

    /// See [`Provider::allocate`].
    pub fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        self.allocate_json(&self.pod_arg(pod)?, &to_json(container)?, hint)
    }

    /// [`Self::allocate`] with the pod and container as JSON.
    pub fn allocate_json(
        &mut self,
        pod: &str,
        container: &str,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError> {
        let r = self.inner.allocate(
            RStr::from_str(pod),
            RStr::from_str(container),
            FfiHint::from(*hint),
        );
        from_plugin("allocation", r.into_result()?.as_str())
    }

    /// See [`Provider::release`].
    pub fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError> {
        Ok(self
            .inner
            .release(RStr::from_str(pod_uid), RStr::from_str(container))
            .into_result()?)
    }

    /// See [`Provider::checkpoint`].
    pub fn checkpoint(&self) -> Result<Vec<u8>, ProviderError> {
        Ok(self.inner.checkpoint().into_result()?.into_vec())
    }

    /// See [`Provider::restore`]. The report is read leniently (fields
    /// this SDK does not know are ignored; an empty answer is an empty
    /// report); one that does not parse at all is an error (reason
    /// [`INVALID_OUTPUT_REASON`]).
    pub fn restore(&mut self, data: &[u8]) -> Result<Reconciled, ProviderError> {
        let answer = self.inner.restore(RSlice::from_slice(data)).into_result()?;
        if answer.trim().is_empty() {
            return Ok(Reconciled::default());
        }
        from_plugin("reconcile report", answer.as_str())
    }

    /// A named call with a JSON request: the JSON answer, or `None` when the
    /// plugin does not know `method`.
    pub fn call(&mut self, method: &str, request: &str) -> Result<Option<String>, ProviderError> {
        let r = self
            .inner
            .call(RStr::from_str(method), RStr::from_str(request));
        Ok(r.into_result()?.into_option().map(RString::into_string))
    }

    /// See [`Provider::preferred_allocation`]; a plugin that does not know
    /// the call has no preference.
    pub fn preferred_allocation(
        &mut self,
        request: &PreferredAllocationRequest,
    ) -> Result<Vec<String>, ProviderError> {
        match self.call(METHOD_PREFERRED_ALLOCATION, &to_json(request)?)? {
            None => Ok(Vec::new()),
            Some(json) => {
                from_plugin::<PreferredAnswer>("preferred allocation", &json).map(|a| a.devices)
            }
        }
    }

    /// See [`Provider::inventory`]; a plugin that does not know the call
    /// owns nothing.
    pub fn inventory(&mut self) -> Result<Inventory, ProviderError> {
        match self.call(METHOD_INVENTORY, "{}")? {
            None => Ok(Inventory::default()),
            Some(json) => from_plugin("inventory", &json),
        }
    }

    /// See [`Provider::device_identities`](crate::Provider::device_identities);
    /// `None` when the plugin does not know the call (built before it).
    pub fn device_identities(&mut self) -> Result<Option<DeviceIdentities>, ProviderError> {
        match self.call(METHOD_DEVICE_IDENTITIES, "{}")? {
            None => Ok(None),
            Some(json) => from_plugin("device identities", &json).map(Some),
        }
    }

    /// See [`Provider::assigned_device_hints`](crate::Provider::assigned_device_hints);
    /// a plugin that does not know the call knows none of the devices.
    pub fn assigned_device_hints(
        &mut self,
        request: &AssignedDevicesRequest,
    ) -> Result<AssignedDeviceHints, ProviderError> {
        match self.call(METHOD_ASSIGNED_DEVICE_HINTS, &to_json(request)?)? {
            None => Ok(AssignedDeviceHints::none()),
            Some(json) => from_plugin("assigned device hints", &json),
        }
    }

    /// See [`Provider::exclude_cpus`](crate::Provider::exclude_cpus); a
    /// plugin that does not know the call ignores them (`false`).
    pub fn exclude_cpus(&mut self, cpus: &crate::CpuSet) -> Result<bool, ProviderError> {
        let request = ExcludeCpus {
            cpus: cpus.to_string(),
        };
        match self.call(METHOD_EXCLUDE_CPUS, &to_json(&request)?)? {
            None => Ok(false),
            Some(json) => from_plugin::<Excluded>("exclude_cpus answer", &json).map(|a| a.excluded),
        }
    }

    /// See [`Provider::resize`](crate::Provider::resize); a plugin that
    /// does not know the call does not resize (`None`).
    pub fn resize(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        current: &Allocation,
        hint: &TopologyHint,
    ) -> Result<Option<Allocation>, ProviderError> {
        let request = ResizeRequest {
            pod: pod.clone(),
            container: container.clone(),
            current: current.clone(),
            hint: *hint,
        };
        match self.call(METHOD_RESIZE, &to_json(&request)?)? {
            None => Ok(None),
            Some(json) => from_plugin::<Resized>("resize answer", &json).map(|a| a.allocation),
        }
    }
}
