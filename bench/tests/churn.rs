//! The churn simulator is deterministic: one seed, one table (issue 36).
//! Runs a small plan on the example GPU box through the provider plugins
//! built in debug.

#[path = "../benches/churn/sim.rs"]
mod sim;

#[test]
fn the_same_seed_gives_the_same_table_and_another_seed_another() {
    let root = topomgr_bench::workspace_root();
    let plugins = topomgr_bench::build_plugins(
        &[
            "topomgr-provider-cpu",
            "topomgr-provider-memory",
            "topomgr-provider-gpu",
        ],
        false,
    );
    let plan = |seed| sim::Plan {
        machines: vec![sim::example_gpu_box(&root)],
        policies: vec!["single-numa-node".to_string()],
        loads: vec![90],
        arrivals: 120,
        warmup: 20,
        seed,
    };
    let table = |seed| sim::render(&sim::run(&plan(seed), &plugins, |_| {}).unwrap());
    let first = table(7);
    assert_eq!(first, table(7));
    assert_ne!(first, table(8), "the seed changes nothing:\n{first}");
    // Every strategy ran on the same 120 arrivals, and at 90 % some pods
    // were refused.
    let rows = sim::run(&plan(7), &plugins, |_| {}).unwrap();
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r.arrivals, 120, "{r:?}");
        assert_eq!(r.admitted + r.refused_with_room + r.refused_full, 120);
    }
    assert!(rows.iter().any(|r| r.admitted < 120), "{first}");
}
