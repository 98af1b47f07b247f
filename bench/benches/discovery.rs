//! Discovery benchmarks: reading a sysfs tree into a `Machine`.
//!
//! - `discover/2s4n-example`: the committed example machine
//!   (`examples/machines/2s4n/sys`: 2 sockets, 4 NUMA nodes, 16 CPUs, 6 PCI
//!   devices with SR-IOV).
//! - `discover/256ia64-64n2s2c`: the recorded 256-CPU, 64-NUMA-node machine
//!   of the hwloc corpus, unpacked once into a temp dir at start; skipped
//!   with a message when `../shared/corpus/hwloc-linux` is absent.
//!
//! Run: `cargo bench -p topomgr-bench --bench discovery`. Figures in
//! BENCHMARKS.md. The trees are read through the page cache, so the figures
//! are the cost of the syscalls and parsing, not of the disk.

use std::fs;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

use criterion::{criterion_group, criterion_main, Criterion};
use topomgr_discovery::discover;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// A temp directory removed on drop.
struct TempTree(PathBuf);

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Unpack `<name>.tar.bz2` of the corpus; `None` (with a message) when the
/// corpus is absent or tar fails.
fn unpack_corpus(name: &str) -> Option<(TempTree, PathBuf)> {
    let tarball = repo()
        .join("../shared/corpus/hwloc-linux")
        .join(format!("{name}.tar.bz2"));
    if !tarball.exists() {
        println!(
            "SKIPPED discover/{name}: {} not found (the shared corpus is absent)",
            tarball.display()
        );
        return None;
    }
    let dir = std::env::temp_dir().join(format!("topomgr-bench-{name}-{}", std::process::id()));
    if let Err(e) = fs::create_dir_all(&dir) {
        println!(
            "SKIPPED discover/{name}: cannot create {}: {e}",
            dir.display()
        );
        return None;
    }
    let tree = TempTree(dir.clone());
    match Command::new("tar")
        .arg("xjf")
        .arg(&tarball)
        .arg("-C")
        .arg(&dir)
        .status()
    {
        Ok(status) if status.success() => Some((tree, dir.join(name).join("sys"))),
        Ok(status) => {
            println!("SKIPPED discover/{name}: tar exited with {status}");
            None
        }
        Err(e) => {
            println!("SKIPPED discover/{name}: cannot run tar: {e}");
            None
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("discover");
    let example = repo().join("examples/machines/2s4n/sys");
    match discover(&example) {
        Ok(machine) => {
            assert_eq!(machine.pci_devices.len(), 6, "the example machine changed");
            group.bench_function("2s4n-example", |b| b.iter(|| discover(black_box(&example))));
        }
        Err(e) => println!("SKIPPED discover/2s4n-example: {e}"),
    }
    let name = "256ia64-64n2s2c";
    if let Some((_tree, sys)) = unpack_corpus(name) {
        match discover(&sys) {
            Ok(machine) => {
                assert_eq!(machine.numa_nodes.len(), 64, "{name}: 64 NUMA nodes");
                assert_eq!(machine.cpus.len(), 256, "{name}: 256 CPUs");
                group.bench_function(name, |b| b.iter(|| discover(black_box(&sys))));
            }
            Err(e) => println!("SKIPPED discover/{name}: {e}"),
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
