//! The messages of `k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`
//! (Kubernetes 1.37, package `v1`), field numbers and types as upstream.

/// `AllocatableResourcesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocatableResourcesRequest {}

/// `AllocatableResourcesResponse`: every device, CPU and memory block the
/// node may hand out.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocatableResourcesResponse {
    /// One entry per device and NUMA node.
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<ContainerDevices>,
    /// The allocatable CPUs.
    #[prost(int64, repeated, tag = "2")]
    pub cpu_ids: Vec<i64>,
    /// One block per NUMA node and memory type.
    #[prost(message, repeated, tag = "3")]
    pub memory: Vec<ContainerMemory>,
}

/// `ListPodResourcesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// `ListPodResourcesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    /// One entry per pod.
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `PodResources`: what a pod holds.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    /// The pod's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its namespace.
    #[prost(string, tag = "2")]
    pub namespace: String,
    /// Its containers (restartable init containers, then app containers).
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
    /// Exclusive CPUs allocated at the pod level (only with a pod-level
    /// exclusive allocation).
    #[prost(int64, repeated, tag = "4")]
    pub cpu_ids: Vec<i64>,
    /// Memory blocks allocated at the pod level (as `cpu_ids`).
    #[prost(message, repeated, tag = "5")]
    pub memory: Vec<ContainerMemory>,
}

/// `ContainerResources`: what a container holds.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    /// The container's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its devices, one entry per device and NUMA node.
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    /// Its exclusive CPUs.
    #[prost(int64, repeated, tag = "3")]
    pub cpu_ids: Vec<i64>,
    /// Its memory blocks.
    #[prost(message, repeated, tag = "4")]
    pub memory: Vec<ContainerMemory>,
    /// Its DRA devices (the kubelet's answer; topomgr's own server has
    /// none). topomgr's NRI face reads their CDI device names.
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

/// `ContainerMemory`: memory or hugepages of one type on NUMA nodes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMemory {
    /// `memory` or `hugepages-<size>`.
    #[prost(string, tag = "1")]
    pub memory_type: String,
    /// Bytes.
    #[prost(uint64, tag = "2")]
    pub size: u64,
    /// The NUMA nodes.
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// `ContainerDevices`: devices of one resource.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    /// The resource name (`nvidia.com/gpu`).
    #[prost(string, tag = "1")]
    pub resource_name: String,
    /// The device ids.
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
    /// Their NUMA nodes (absent: the device has none).
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// `TopologyInfo`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TopologyInfo {
    /// The NUMA nodes.
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NumaNode>,
}

/// `NUMANode`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumaNode {
    /// The node's id (proto field `ID`).
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// `DynamicResource`: one DRA claim of a container (the kubelet fills it;
/// topomgr's server never does). Field 1 (`class_name`) is retired
/// upstream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DynamicResource {
    /// The claim's name.
    #[prost(string, tag = "2")]
    pub claim_name: String,
    /// The claim's namespace.
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    /// Its resources.
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

/// `ClaimResource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClaimResource {
    /// CDI devices.
    #[prost(message, repeated, tag = "1")]
    pub cdi_devices: Vec<CdiDevice>,
    /// The DRA driver.
    #[prost(string, tag = "2")]
    pub driver_name: String,
    /// The pool.
    #[prost(string, tag = "3")]
    pub pool_name: String,
    /// The device.
    #[prost(string, tag = "4")]
    pub device_name: String,
    /// The share, for a shared device.
    #[prost(string, optional, tag = "5")]
    pub share_id: Option<String>,
}

/// `CDIDevice`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CdiDevice {
    /// Fully qualified CDI device name.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `GetPodResourcesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPodResourcesRequest {
    /// The pod's name.
    #[prost(string, tag = "1")]
    pub pod_name: String,
    /// Its namespace.
    #[prost(string, tag = "2")]
    pub pod_namespace: String,
}

/// `GetPodResourcesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPodResourcesResponse {
    /// The pod.
    #[prost(message, optional, tag = "1")]
    pub pod_resources: Option<PodResources>,
}

/// `TopologyInfo` of `nodes`.
pub fn topology(nodes: impl IntoIterator<Item = i64>) -> Option<TopologyInfo> {
    Some(TopologyInfo {
        nodes: nodes.into_iter().map(|id| NumaNode { id }).collect(),
    })
}
