//! The GPU provider's integration tests, in one binary (as the host's):
//! the example GPU machine's files and choices, and NVML discovery against
//! the scripted fake `libnvidia-ml`.

mod example_machine;
mod nvml;
mod reidentify;
