//! The churn simulator of `numa-allocation-strategy` (issue 36): Guaranteed
//! pods arrive as a Poisson process and live exponential lifetimes on a
//! recorded machine, admitted and released through the real engine
//! (`Admitter`) and the real provider plugins loaded from their `.so`, as
//! the host loads them. Each (machine, policy, offered load) replays one
//! arrival trace, drawn from the seed, under every strategy (common random
//! numbers: the strategies see the same pods at the same times).
//!
//! Shared by the `churn` bench (`benches/churn.rs`, the table) and the
//! bench crate's determinism test (`tests/churn.rs`).

#![allow(dead_code)] // each user takes part of it

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use topomgr_engine::admission::Admitter;
use topomgr_engine::numa::NumaInfo;
use topomgr_engine::policy::{Policy, Scope};
use topomgr_engine::provider::LoadedProvider;
use topomgr_node::setup::config::ProviderEntry;
use topomgr_sdk::{ContainerView, Machine, PodView, QosClass};

/// The strategies compared, in table order.
pub const STRATEGIES: [&str; 3] = ["lowest-index", "most-allocated", "least-allocated"];
/// The policies compared.
pub const POLICIES: [&str; 2] = ["single-numa-node", "restricted"];

/// The CPU counts of the pods and their weights (mean 4.4 CPUs).
const CPU_MIX: [(u64, u64); 5] = [(1, 30), (2, 25), (4, 20), (8, 15), (16, 10)];
const MIB: u64 = 1 << 20;

/// One machine of the table.
#[derive(Debug, Clone)]
pub struct MachineSpec {
    /// Its name in the table.
    pub name: String,
    /// Its sysfs tree (`.../sys`).
    pub sys: PathBuf,
    /// The GPU provider's topology file, for a GPU box.
    pub gpu_topology: Option<PathBuf>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The machines.
    pub machines: Vec<MachineSpec>,
    /// The policies.
    pub policies: Vec<String>,
    /// Offered loads, in percent of the allocatable CPUs.
    pub loads: Vec<u32>,
    /// Arrivals counted per run (after `warmup` more).
    pub arrivals: usize,
    /// Arrivals before counting starts.
    pub warmup: usize,
    /// The seed of every trace.
    pub seed: u64,
}

/// The plugins by library name (`topomgr_provider_cpu`, ...).
pub type Plugins = BTreeMap<String, PathBuf>;

/// One line of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub machine: String,
    pub policy: String,
    pub load: u32,
    pub strategy: String,
    pub arrivals: usize,
    pub admitted: usize,
    /// Refused while the node's free totals held the pod's request.
    pub refused_with_room: usize,
    /// Refused for lack of room anywhere.
    pub refused_full: usize,
    /// Time-averaged share of the allocatable CPUs held, in 0.1 %.
    pub utilisation_permille: u64,
}

/// splitmix64: a small deterministic generator (no dependency, the same
/// sequence on every platform).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
    fn exp(&mut self, mean: f64) -> f64 {
        -self.unit().ln() * mean
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One pod of a trace.
#[derive(Debug, Clone)]
struct Arrival {
    at: f64,
    life: f64,
    cpus: u64,
    memory: u64,
    hugepages: u64,
    gpus: u64,
}

/// What a machine offers, read from its providers before any pod.
#[derive(Debug, Clone, Copy)]
struct Capacity {
    cpus: u64,
    memory: u64,
    hugepages: u64,
    gpus: u64,
}

/// The arrivals of one (machine, load): Poisson at the rate that offers
/// `load` % of the allocatable CPUs with lifetimes of mean 1.
fn trace(cap: Capacity, load: u32, count: usize, seed: u64) -> Vec<Arrival> {
    let weight: u64 = CPU_MIX.iter().map(|(_, w)| w).sum();
    let mean_cpus = CPU_MIX.iter().map(|(c, w)| c * w).sum::<u64>() as f64 / weight as f64;
    let rate = f64::from(load) / 100.0 * cap.cpus as f64 / mean_cpus;
    // Memory per CPU: half the machine's share, so that CPUs are the
    // scarcer resource but memory still counts.
    let memory_per_cpu = (cap.memory / cap.cpus.max(1) / 2 / MIB).max(64) * MIB;
    let mut rng = Rng(seed ^ u64::from(load).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut at = 0.0;
    (0..count)
        .map(|_| {
            at += rng.exp(1.0 / rate);
            let mut pick = rng.below(weight);
            let cpus = CPU_MIX
                .iter()
                .find(|(_, w)| {
                    let hit = pick < *w;
                    pick = pick.saturating_sub(*w);
                    hit
                })
                .map_or(1, |(c, _)| *c);
            let hugepages = if cap.hugepages > 0 && rng.below(4) == 0 {
                cpus * 32 * MIB
            } else {
                0
            };
            let gpus = if cap.gpus > 0 && rng.below(10) < 3 {
                1 + u64::from(rng.below(3) == 0)
            } else {
                0
            };
            Arrival {
                at,
                life: rng.exp(1.0),
                cpus,
                memory: cpus * memory_per_cpu,
                hugepages,
                gpus,
            }
        })
        .collect()
}

fn pod(uid: &str, a: &Arrival) -> PodView {
    let mut res = BTreeMap::from([
        ("cpu".to_string(), a.cpus * 1000),
        ("memory".to_string(), a.memory),
    ]);
    if a.hugepages > 0 {
        res.insert("hugepages-2Mi".to_string(), a.hugepages);
    }
    if a.gpus > 0 {
        res.insert("nvidia.com/gpu".to_string(), a.gpus);
    }
    PodView::new(uid, uid, "churn", QosClass::Guaranteed).with_containers(vec![ContainerView::new(
        "app",
    )
    .with_requests(res.clone())
    .with_limits(res)])
}

fn entry(plugins: &Plugins, lib: &str, config: serde_json::Value) -> Result<ProviderEntry, String> {
    let library = plugins
        .get(lib)
        .ok_or_else(|| format!("no {lib} plugin was built"))?;
    Ok(ProviderEntry {
        library: library.display().to_string(),
        enabled: true,
        config,
        defined_in: PathBuf::from("churn"),
        config_dir: PathBuf::new(),
    })
}

/// Fresh providers (nothing allocated) for `spec`.
fn providers(
    plugins: &Plugins,
    spec: &MachineSpec,
    machine: &Machine,
    state: &Path,
) -> Result<Vec<LoadedProvider>, String> {
    let mut list = vec![
        (
            "cpu",
            "topomgr_provider_cpu",
            serde_json::json!({"policy": "static", "reserved_cpus": "0"}),
        ),
        (
            "memory",
            "topomgr_provider_memory",
            serde_json::json!({"policy": "static", "reserved_memory": {"0": {"memory": "512Mi"}}}),
        ),
    ];
    if let Some(topology) = &spec.gpu_topology {
        list.push((
            "gpu",
            "topomgr_provider_gpu",
            serde_json::json!({"topology_file": topology.display().to_string()}),
        ));
    }
    list.into_iter()
        .map(|(name, lib, config)| {
            topomgr_node::setup::plugin::load_provider(
                name,
                &entry(plugins, lib, config)?,
                &[],
                machine,
                state,
            )
            .map_err(|e| format!("{}: loading provider {name}: {e}", spec.name))
        })
        .collect()
}

/// The free total of each resource over the whole node, from the
/// providers' inventories.
fn free_totals(adm: &mut Admitter) -> BTreeMap<String, u64> {
    let mut free = BTreeMap::new();
    for p in adm.providers_mut() {
        if let Ok(inv) = p.inventory() {
            for (name, r) in inv.resources {
                *free.entry(name).or_insert(0) += r.total.available;
            }
        }
    }
    free
}

fn capacity(adm: &mut Admitter) -> Capacity {
    let mut alloc = BTreeMap::new();
    for p in adm.providers_mut() {
        if let Ok(inv) = p.inventory() {
            for (name, r) in inv.resources {
                *alloc.entry(name).or_insert(0u64) += r.total.allocatable;
            }
        }
    }
    let get = |k: &str| alloc.get(k).copied().unwrap_or(0);
    Capacity {
        cpus: get("cpu") / 1000,
        memory: get("memory"),
        hugepages: get("hugepages-2Mi"),
        gpus: get("nvidia.com/gpu"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Departure {
    at: f64,
    seq: usize,
}

impl Eq for Departure {}
impl Ord for Departure {
    fn cmp(&self, other: &Self) -> Ordering {
        // Earliest first out of the max-heap.
        other.at.total_cmp(&self.at).then(other.seq.cmp(&self.seq))
    }
}
impl PartialOrd for Departure {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One run: `trace` through a fresh admitter under `policy` and `strategy`.
#[allow(clippy::too_many_arguments)]
fn run_one(
    plugins: &Plugins,
    spec: &MachineSpec,
    machine: &Machine,
    state: &Path,
    policy: &str,
    strategy: &str,
    trace: &[Arrival],
    warmup: usize,
    cap: Capacity,
) -> Result<Row, String> {
    let numa = NumaInfo::from_machine(machine).map_err(|e| e.to_string())?;
    let options = BTreeMap::from([("numa-allocation-strategy".to_string(), strategy.to_string())]);
    let policy_obj = Policy::new(policy, &options, numa).map_err(|e| e.to_string())?;
    let mut adm = Admitter::new(
        machine,
        policy_obj,
        Scope::Container,
        providers(plugins, spec, machine, state)?,
    );
    let mut row = Row {
        machine: spec.name.clone(),
        policy: policy.to_string(),
        load: 0,
        strategy: strategy.to_string(),
        arrivals: 0,
        admitted: 0,
        refused_with_room: 0,
        refused_full: 0,
        utilisation_permille: 0,
    };
    let mut departures = BinaryHeap::new();
    let mut held_cpus: u64 = 0;
    let mut cpus_of: BTreeMap<usize, u64> = BTreeMap::new();
    let start = trace.get(warmup).map_or(0.0, |a| a.at);
    let mut last = start;
    let mut area = 0.0f64;
    let advance = |to: f64, held: u64, last: &mut f64, area: &mut f64| {
        if to > start {
            let from = last.max(start);
            *area += held as f64 * (to - from);
            *last = to;
        }
    };
    for (seq, a) in trace.iter().enumerate() {
        while let Some(d) = departures.peek().copied() {
            let d: Departure = d;
            if d.at > a.at {
                break;
            }
            departures.pop();
            advance(d.at, held_cpus, &mut last, &mut area);
            adm.release(&format!("p{}", d.seq))
                .map_err(|e| format!("release: {e}"))?;
            held_cpus -= cpus_of.remove(&d.seq).unwrap_or(0);
        }
        advance(a.at, held_cpus, &mut last, &mut area);
        let counted = seq >= warmup;
        let p = pod(&format!("p{seq}"), a);
        let result = adm.admit(&p);
        if result.admitted {
            held_cpus += a.cpus;
            cpus_of.insert(seq, a.cpus);
            departures.push(Departure {
                at: a.at + a.life,
                seq,
            });
            if counted {
                row.admitted += 1;
            }
        } else if counted {
            let free = free_totals(&mut adm);
            let fits = p.containers[0]
                .requests
                .iter()
                .all(|(r, want)| free.get(r).copied().unwrap_or(0) >= *want);
            if fits {
                row.refused_with_room += 1;
            } else {
                row.refused_full += 1;
            }
        }
        if counted {
            row.arrivals += 1;
        }
    }
    let end = trace.last().map_or(start, |a| a.at);
    if end > start && cap.cpus > 0 {
        row.utilisation_permille =
            (area / ((end - start) * cap.cpus as f64) * 1000.0).round() as u64;
    }
    Ok(row)
}

/// Every run of `plan`, in table order; `progress` is told each row.
pub fn run(
    plan: &Plan,
    plugins: &Plugins,
    mut progress: impl FnMut(&Row),
) -> Result<Vec<Row>, String> {
    let state = std::env::temp_dir().join(format!("topomgr-churn-{}", std::process::id()));
    std::fs::create_dir_all(&state).map_err(|e| format!("{}: {e}", state.display()))?;
    let rows = run_in(plan, plugins, &mut progress, &state);
    let _ = std::fs::remove_dir_all(&state);
    rows
}

fn run_in(
    plan: &Plan,
    plugins: &Plugins,
    progress: &mut impl FnMut(&Row),
    state: &Path,
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for spec in &plan.machines {
        let machine = topomgr_discovery::discover(&spec.sys)
            .map_err(|e| format!("{}: discovering {}: {e}", spec.name, spec.sys.display()))?;
        // What the machine offers, from providers that hold nothing.
        let numa = NumaInfo::from_machine(&machine).map_err(|e| e.to_string())?;
        let mut probe = Admitter::new(
            &machine,
            Policy::new("none", &BTreeMap::new(), numa).map_err(|e| e.to_string())?,
            Scope::Container,
            providers(plugins, spec, &machine, state)?,
        );
        let cap = capacity(&mut probe);
        drop(probe);
        for &load in &plan.loads {
            let trace = trace(cap, load, plan.warmup + plan.arrivals, plan.seed);
            for policy in &plan.policies {
                for strategy in STRATEGIES {
                    let mut row = run_one(
                        plugins,
                        spec,
                        &machine,
                        state,
                        policy,
                        strategy,
                        &trace,
                        plan.warmup,
                        cap,
                    )?;
                    row.load = load;
                    progress(&row);
                    rows.push(row);
                }
            }
        }
    }
    Ok(rows)
}

/// The table, one line per run, with each strategy's refusals-with-room
/// against `lowest-index`'s of the same machine, policy and load.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| machine | policy | load | strategy | arrivals | admitted | refused with room | refused, full | CPU utilisation | with room vs lowest-index |"
    );
    let _ = writeln!(out, "|---|---|---:|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let base = rows
            .iter()
            .find(|b| {
                b.machine == r.machine
                    && b.policy == r.policy
                    && b.load == r.load
                    && b.strategy == "lowest-index"
            })
            .map_or(0, |b| b.refused_with_room);
        let delta = if r.strategy == "lowest-index" {
            String::new()
        } else if base == 0 {
            "n/a".to_string()
        } else {
            let d = (r.refused_with_room as f64 - base as f64) * 100.0 / base as f64;
            format!("{d:+.0} %")
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} % | {} | {} | {} | {} | {} | {}.{} % | {} |",
            r.machine,
            r.policy,
            r.load,
            r.strategy,
            r.arrivals,
            r.admitted,
            r.refused_with_room,
            r.refused_full,
            r.utilisation_permille / 10,
            r.utilisation_permille % 10,
            delta
        );
    }
    out
}

/// The workspace's example GPU box (2 NUMA nodes, 8 GPUs), always present.
pub fn example_gpu_box(root: &Path) -> MachineSpec {
    let dir = root.join("examples/machines/2s8g");
    MachineSpec {
        name: "2s8g (2 NUMA, 8 GPUs)".to_string(),
        sys: dir.join("sys"),
        gpu_topology: Some(dir.join("gpu-topology.json")),
    }
}

/// A recorded machine of `../shared/corpus/hwloc-linux`, unpacked under
/// `target/churn-corpus`; an error naming the corpus when it is absent.
pub fn corpus_machine(root: &Path, name: &str, label: &str) -> Result<MachineSpec, String> {
    let corpus = root.join("../shared/corpus/hwloc-linux");
    let archive = corpus.join(format!("{name}.tar.bz2"));
    if !archive.is_file() {
        return Err(format!(
            "{} is absent: the recorded machines come from the shared corpus (run with --quick for the example machine alone)",
            archive.display()
        ));
    }
    // Each archive unpacks into its own directory (an archive's top
    // directory is not always named like the archive).
    let dest = root.join("target/churn-corpus").join(name);
    let sys = |dest: &Path| {
        std::fs::read_dir(dest)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path().join("sys"))
            .find(|s| s.is_dir())
    };
    if sys(&dest).is_none() {
        std::fs::create_dir_all(&dest).map_err(|e| format!("{}: {e}", dest.display()))?;
        let ok = std::process::Command::new("tar")
            .arg("xjf")
            .arg(&archive)
            .arg("-C")
            .arg(&dest)
            .status()
            .map_err(|e| format!("tar: {e}"))?
            .success();
        if !ok {
            return Err(format!("tar could not unpack {}", archive.display()));
        }
    }
    Ok(MachineSpec {
        name: label.to_string(),
        sys: sys(&dest).ok_or_else(|| format!("{} holds no sys directory", archive.display()))?,
        gpu_topology: None,
    })
}
