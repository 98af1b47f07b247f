//! [`HintProvider`]: the host's view of one loaded provider.
//!
//! The admission pipeline talks to providers only through this trait, so it
//! can be tested with in-process fakes; [`crate::plugin`] implements it for
//! providers loaded from `.so` files.

use std::sync::Arc;

use topomgr_sdk::{
    Allocation, ContainerView, Inventory, PodView, PreferredAllocationRequest, ProviderError,
    ProviderHints, TopologyHint,
};

/// One hint provider as the host drives it.
pub trait HintProvider: Send {
    /// The provider's name (its `[providers.NAME]` key).
    fn name(&self) -> &str;
    /// The pod the next calls are about. A provider may keep it (a loaded
    /// plugin receives it once, see [`topomgr_sdk::ffi::METHOD_SHARE_POD`])
    /// and recognise it by address in the calls that pass `&**pod`; calls
    /// about any other pod are answered as usual. The default ignores it.
    fn share_pod(&mut self, pod: &Arc<PodView>) {
        let _ = pod;
    }
    /// Hints for one container (container scope).
    fn topology_hints(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
    ) -> Result<ProviderHints, ProviderError>;
    /// Hints for the whole pod (pod scope).
    fn pod_topology_hints(&mut self, pod: &PodView) -> Result<ProviderHints, ProviderError>;
    /// Reserve resources for a container honouring the merged hint.
    fn allocate(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        hint: &TopologyHint,
    ) -> Result<Allocation, ProviderError>;
    /// Release a container's resources.
    fn release(&mut self, pod_uid: &str, container: &str) -> Result<(), ProviderError>;
    /// Serialize the provider's state.
    fn checkpoint(&self) -> Result<Vec<u8>, ProviderError>;
    /// Restore the provider's state.
    fn restore(&mut self, data: &[u8]) -> Result<(), ProviderError>;
    /// The device plugins' `GetPreferredAllocation` (see
    /// [`topomgr_sdk::Provider::preferred_allocation`]). The default, for
    /// in-process fakes, has no preference; wrappers must forward it.
    fn preferred_allocation(
        &mut self,
        request: &PreferredAllocationRequest,
    ) -> Result<Vec<String>, ProviderError> {
        let _ = request;
        Ok(Vec::new())
    }
    /// What the provider owns per NUMA node and how much is free (see
    /// [`topomgr_sdk::Provider::inventory`]). The default, for in-process
    /// fakes, owns nothing; wrappers must forward it.
    fn inventory(&mut self) -> Result<Inventory, ProviderError> {
        Ok(Inventory::default())
    }
}
