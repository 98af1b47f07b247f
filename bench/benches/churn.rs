//! `numa-allocation-strategy` under churn (issue 36): how many Guaranteed
//! pods each strategy admits, and how many it refuses while the node still
//! had room for them, on recorded machines under `single-numa-node` and
//! `restricted` at offered loads from 50 % to 95 % (the simulator is
//! `churn/sim.rs`; results in BENCHMARKS.md).
//!
//! Run: `cargo bench -p topomgr-bench --bench churn` (the full table, the
//! recorded machines from `../shared/corpus`), or `... -- --quick` (the
//! example GPU box alone, fewer loads and pods: a smoke run). `--seed N`
//! changes the traces. The bench builds the provider libraries with
//! `cargo build --release` first.

#[path = "churn/sim.rs"]
mod sim;

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let mut quick = false;
    let mut seed = 36u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--seed" => match args.next().and_then(|s| s.parse().ok()) {
                Some(s) => seed = s,
                None => {
                    eprintln!("churn: --seed needs an unsigned integer");
                    return ExitCode::from(2);
                }
            },
            // What `cargo bench` passes to every bench target.
            "--bench" => {}
            other => {
                eprintln!("churn: unknown argument {other:?} (expected --quick, --seed N)");
                return ExitCode::from(2);
            }
        }
    }
    let root = topomgr_bench::workspace_root();
    let mut machines = vec![sim::example_gpu_box(&root)];
    if !quick {
        for (name, label) in [
            ("96em64t-4no4pa3ca2co", "96em64t (4 NUMA, 96 CPUs)"),
            ("256ppc-8n8s4t", "256ppc (8 NUMA, 256 CPUs)"),
        ] {
            match sim::corpus_machine(&root, name, label) {
                Ok(m) => machines.push(m),
                Err(e) => {
                    eprintln!("churn: {e}");
                    return ExitCode::from(2);
                }
            }
        }
    }
    let plan = sim::Plan {
        machines,
        policies: sim::POLICIES.iter().map(|s| s.to_string()).collect(),
        loads: if quick {
            vec![50, 85]
        } else {
            vec![50, 70, 80, 85, 90, 95]
        },
        arrivals: if quick { 300 } else { 1500 },
        warmup: if quick { 50 } else { 200 },
        seed,
    };
    let plugins = topomgr_bench::build_release_plugins(&[
        "topomgr-provider-cpu",
        "topomgr-provider-memory",
        "topomgr-provider-gpu",
    ]);
    let started = Instant::now();
    let rows = match sim::run(&plan, &plugins, |r| {
        eprintln!(
            "{} {} {}% {}: {} admitted, {} refused with room",
            r.machine, r.policy, r.load, r.strategy, r.admitted, r.refused_with_room
        )
    }) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("churn: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "seed {seed}, {} arrivals counted per run after {} of warm-up, {:.0} s\n",
        plan.arrivals,
        plan.warmup,
        started.elapsed().as_secs_f64()
    );
    print!("{}", sim::render(&rows));
    ExitCode::SUCCESS
}
