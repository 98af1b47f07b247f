//! Prints what NVML discovery finds, as the provider reads it: the JSON
//! topology description (usable as a `topology_file`) on stdout and, with
//! `--matrix`, an `nvidia-smi topo -m`-like GPU matrix on stderr, to compare
//! with `nvidia-smi topo -m` and `nvidia-smi -q` on a machine with GPUs.
//! With `--driver`, each GPU's device node and MIG device UUIDs on stderr
//! (compare with `ls -l /dev/nvidia*` and `nvidia-smi -L`).
//!
//! ```sh
//! cargo run -p topomgr-provider-gpu --example nvml-topology -- [--matrix] [--driver] \
//!     [--sysfs-root /sys] [--library libnvidia-ml.so.1]
//! ```
//!
//! Exit status 1 when NVML cannot be loaded or fails.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use topomgr_provider_gpu::nvml;
use topomgr_provider_gpu::topology_file::json;

fn main() -> ExitCode {
    let mut matrix = false;
    let mut driver = false;
    let mut sysfs_root = PathBuf::from("/sys");
    let mut library = OsString::from(nvml::DEFAULT_LIBRARY);
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--matrix") => matrix = true,
            Some("--driver") => driver = true,
            Some("--sysfs-root") => match args.next() {
                Some(v) => sysfs_root = v.into(),
                None => return usage("--sysfs-root needs a directory"),
            },
            Some("--library") => match args.next() {
                Some(v) => library = v,
                None => return usage("--library needs a path"),
            },
            _ => return usage(&format!("unknown argument {}", arg.to_string_lossy())),
        }
    }
    let numa_of = nvml::sysfs_numa(&sysfs_root);
    match nvml::discover_gpus(&library, &numa_of) {
        Ok(Some(nvml::NvmlGpus {
            topology,
            driver: info,
        })) => {
            let description = json::describe(&topology);
            match serde_json::to_string_pretty(&description) {
                Ok(text) => println!("{text}"),
                Err(e) => {
                    eprintln!("cannot print the topology: {e}");
                    return ExitCode::FAILURE;
                }
            }
            if matrix {
                eprint!("{}", topology.matrix_text());
            }
            if driver {
                for (g, i) in topology.gpus().iter().zip(&info) {
                    let node = i.minor.map_or_else(
                        || "no device node".to_owned(),
                        |m| format!("/dev/nvidia{m}"),
                    );
                    eprintln!("GPU{} {} {node}", g.index, g.id);
                    for mig in &i.mig {
                        eprintln!("  {mig}");
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Ok(None) => {
            eprintln!(
                "NVML is not available ({}): no library, no driver or no permission",
                library.to_string_lossy()
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!(
        "{problem}\nusage: nvml-topology [--matrix] [--driver] [--sysfs-root DIR] [--library PATH]"
    );
    ExitCode::from(2)
}
