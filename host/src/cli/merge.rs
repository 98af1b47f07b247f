//! `topomgr merge`: the what-if merge (input and output in docs/cli.md).

use std::io::Read;
use std::process::ExitCode;

use anyhow::{bail, Context};
use topomgr_engine::numa::NumaInfo;
use topomgr_engine::policy::Policy;
use topomgr_node::api::{MergeDecision, MergeRequest};
use topomgr_sdk::ProviderHints;

/// The largest merge input read from standard input (as for manifests).
const MAX_INPUT_BYTES: u64 = topomgr_manifest::MAX_MANIFEST_BYTES;

/// Read the input, merge, print `{"affinity", "preferred", "admit"}`.
pub fn run() -> anyhow::Result<ExitCode> {
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_INPUT_BYTES + 1)
        .read_to_string(&mut text)
        .context("reading merge input from stdin")?;
    if text.len() as u64 > MAX_INPUT_BYTES {
        bail!("invalid merge input: larger than {MAX_INPUT_BYTES} bytes");
    }
    let input: MergeRequest = serde_json::from_str(&text).context("invalid merge input")?;
    let mut nodes = Vec::with_capacity(input.numa_nodes.len());
    for &n in &input.numa_nodes {
        let Ok(id) = u32::try_from(n) else {
            bail!("invalid merge input: numa_nodes: node id {n} is negative or too large");
        };
        nodes.push(id);
    }
    let distances = match &input.distances {
        None => None,
        Some(map) => {
            for key in map.keys() {
                if !nodes.iter().any(|n| n.to_string() == *key) {
                    bail!("invalid merge input: distances: {key:?} is not one of numa_nodes");
                }
            }
            let rows = nodes
                .iter()
                .map(|n| {
                    map.get(&n.to_string()).cloned().with_context(|| {
                        format!("invalid merge input: distances: no row for node {n}")
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Some(rows)
        }
    };
    let numa = NumaInfo::new(nodes, distances).context("invalid merge input")?;
    let policy =
        Policy::new(&input.policy, &input.options, numa).context("cannot create policy")?;
    let names: Vec<String> = (0..input.providers.len())
        .map(|i| format!("providers[{i}]"))
        .collect();
    let hints: Vec<ProviderHints> = input.providers;
    let refs: Vec<(&str, &ProviderHints)> =
        names.iter().map(String::as_str).zip(hints.iter()).collect();
    let decision = policy.decide(&refs).context("invalid merge input")?;
    let out = MergeDecision {
        affinity: decision.hint.affinity,
        preferred: decision.hint.preferred,
        admit: decision.admit,
    };
    println!("{}", serde_json::to_string(&out)?);
    Ok(ExitCode::SUCCESS)
}
