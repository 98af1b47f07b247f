//! The GPU provider's integration tests, in one binary (as the host's):
//! the example GPU machine's files and choices, NVML discovery against
//! the scripted fake `libnvidia-ml`, and GPUs named by device node and MIG
//! UUID.

mod device_nodes;
mod example_machine;
mod nvml;
mod reidentify;
