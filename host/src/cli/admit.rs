//! `topomgr admit` and `topomgr explain`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use topomgr_contract::api::{Admission, Admissions, Explains};
use topomgr_engine::admission::{AdmitResult, TraceStep};
use topomgr_node::locks::lock_holder::Role;
use topomgr_node::persist::state_dir::StateDir;
use topomgr_sdk::HintSet;

use super::print::{print_json, print_table};
use super::text::field;
use super::{inputs, Output};

/// Arguments of `topomgr admit`.
#[derive(Debug, Args)]
pub struct AdmitArgs {
    /// Send the pods to the running daemon at this socket instead of admitting in-process.
    #[arg(long, conflicts_with_all = ["sysfs_root", "state_dir", "dry_run"])]
    socket: Option<PathBuf>,
    /// sysfs directory to read (default: config sysfs_root).
    #[arg(long)]
    sysfs_root: Option<PathBuf>,
    /// Restore admitted pods and provider state from DIR before, save after.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Do not save state (only meaningful with --state-dir).
    #[arg(long)]
    dry_run: bool,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "json")]
    output: Output,
    /// Pod manifests (YAML or JSON, multi-document; `-` for stdin).
    #[arg(required = true)]
    pods: Vec<String>,
}

/// Arguments of `topomgr explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// sysfs directory to read (default: config sysfs_root).
    #[arg(long)]
    sysfs_root: Option<PathBuf>,
    /// Restore state from DIR first (never saved).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Output format: text for people, or the JSON of `topomgr_engine::explain`
    /// (`{"pods": [...]}`).
    #[arg(short, long, value_enum, default_value = "text")]
    output: ExplainOutput,
    /// Pod manifests (YAML or JSON, multi-document; `-` for stdin).
    #[arg(required = true)]
    pods: Vec<String>,
}

/// Output format of `topomgr explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainOutput {
    /// Lines for people.
    Text,
    /// The decision trace as data.
    Json,
}

/// Admit every pod in order and print the results.
pub fn run(config: &Path, args: AdmitArgs) -> anyhow::Result<ExitCode> {
    if let Some(socket) = &args.socket {
        return super::client::admit(socket, &args.pods, args.output);
    }
    let cfg = inputs::load_node_config(config)?;
    let pods = topomgr_manifest::read_pods(&args.pods)?;
    let machine = inputs::discover(&cfg, args.sysfs_root.as_deref())?;
    let mut node = topomgr_node::setup::node_state(&cfg, &machine)?;
    let role = if args.dry_run {
        Role::AdmitDryRun
    } else {
        Role::Admit
    };
    let mut held = match &args.state_dir {
        Some(dir) => Some(StateDir::open(dir, &mut node, role)?),
        None => None,
    };
    let results: Vec<AdmitResult> = match (held.as_mut(), args.dry_run) {
        (Some(held), false) => {
            // Booking CPUs of the node (and, with cgroups in the state,
            // writing the shared pool's cpusets): only while this command
            // may own the node.
            let dir = args.state_dir.as_deref().unwrap_or(&cfg.state_dir);
            let _node = inputs::node_lock(&cfg, dir, Role::Admit)?;
            held.reclaim(&mut node);
            let results = pods.iter().map(|p| node.admit(p)).collect();
            held.save(&mut node)?;
            node.settle_pool();
            results
        }
        _ => pods.iter().map(|p| node.admitter_mut().admit(p)).collect(),
    };
    let pods: Vec<Admission> = results.iter().map(Admission::from).collect();
    match args.output {
        Output::Json => print_json(&Admissions {
            pods,
            attached: None,
        })?,
        Output::Table => print_table(&pods, None),
    }
    Ok(ExitCode::SUCCESS)
}

fn describe_hints(set: &Option<HintSet>) -> String {
    match set {
        None => "no preference".to_string(),
        Some(HintSet::Explicit(v)) if v.is_empty() => "[] (cannot be satisfied)".to_string(),
        Some(HintSet::Explicit(v)) => v
            .iter()
            .map(|h| {
                format!(
                    "{}{}",
                    h.affinity.map_or("any".to_string(), |m| format!("{{{m}}}")),
                    if h.preferred { "*" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(" "),
        Some(HintSet::Compact(c)) => format!(
            "{} (preferred at width {})",
            topomgr_engine::admission::compact_summary(c, usize::MAX),
            c.preferred_width
        ),
    }
}

fn print_step(step: &TraceStep) {
    println!(
        "  {}:",
        step.container
            .as_deref()
            .map_or("pod scope".to_string(), |c| format!(
                "container {}",
                field(c)
            ))
    );
    for (provider, hints) in &step.hints {
        match hints {
            None => println!("    {provider}: no hints (no preference)"),
            Some(map) if map.is_empty() => println!("    {provider}: no hints (no preference)"),
            Some(map) => {
                for (res, set) in map {
                    println!("    {provider} / {}: {}", field(res), describe_hints(set));
                }
            }
        }
    }
    if let Some(m) = &step.merge {
        println!(
            "    merge: {} hint list(s), best non-preferred width {}, decided by {:?}",
            m.lists, m.best_non_preferred_count, m.rule
        );
    }
    let h = step.decision.hint;
    println!(
        "    => affinity {} preferred {} -> {}",
        h.affinity.map_or("any".to_string(), |m| format!("{{{m}}}")),
        h.preferred,
        if step.decision.admit {
            "admit"
        } else {
            "reject"
        }
    );
}

/// Admit (without saving) and print each decision's trace.
pub fn explain(config: &Path, args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let cfg = inputs::load_node_config(config)?;
    let pods = topomgr_manifest::read_pods(&args.pods)?;
    let machine = inputs::discover(&cfg, args.sysfs_root.as_deref())?;
    let mut node = topomgr_node::setup::node_state(&cfg, &machine)?;
    let _held = match &args.state_dir {
        Some(dir) => Some(StateDir::open(dir, &mut node, Role::Explain)?),
        None => None,
    };
    let adm = node.admitter_mut();
    if args.output == ExplainOutput::Json {
        let nodes: Vec<_> = adm.policy().numa().default_mask().iter().collect();
        let mut out = Vec::new();
        for pod in &pods {
            let mut trace = Vec::new();
            let r = adm.admit_traced(pod, &mut trace);
            out.push(topomgr_engine::explain::explain(
                adm.policy().name(),
                adm.scope(),
                &nodes,
                &r,
                &trace,
            ));
        }
        print_json(&Explains { pods: out })?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "policy {} scope {} on NUMA nodes {}",
        adm.policy().name(),
        adm.scope().as_str(),
        adm.policy().numa().default_mask()
    );
    for pod in &pods {
        let mut trace = Vec::new();
        let r = adm.admit_traced(pod, &mut trace);
        println!(
            "pod {}/{} ({}, uid {}):",
            field(&pod.namespace),
            field(&pod.name),
            pod.qos.as_str(),
            field(&pod.uid)
        );
        for step in &trace {
            print_step(step);
        }
        if r.admitted {
            println!("  admitted");
        } else {
            println!(
                "  rejected: {}: {}",
                field(r.reason.as_deref().unwrap_or("")),
                field(r.message.as_deref().unwrap_or(""))
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
