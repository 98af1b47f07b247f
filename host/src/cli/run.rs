//! `topomgr run [--socket PATH] [--cpus N] [--memory Q] [--resource NAME=N]... -- CMD ARGS`:
//! the options and the messages; the run itself is `topomgr_run`'s.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use topomgr_manifest::quantity::parse_resource_amount;
use topomgr_run::{Ended, Run, RunConfig, Signals, Teardown, Through};
use topomgr_sdk::ResourceList;
use tracing::{info, warn};

use super::inputs;
use super::run_local::Local;
use super::text::field;

/// Exit status when the pod is rejected.
const REJECTED: u8 = 1;

/// Arguments of `topomgr run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Run through the daemon at this socket (default: through the daemon
    /// of the config's [daemon] socket when one owns the node, else without
    /// a daemon).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// CPUs to request (a Kubernetes quantity: 2, 1.5, 500m). Integer counts
    /// get exclusive CPUs from a static CPU provider.
    #[arg(long, value_name = "N")]
    cpus: Option<String>,
    /// Memory to request (a Kubernetes quantity: 512Mi, 16Gi).
    #[arg(long, value_name = "Q")]
    memory: Option<String>,
    /// Another resource (hugepages-1Gi=2Gi, nvidia.com/gpu=2, ...); repeatable.
    #[arg(long = "resource", value_name = "NAME=N")]
    resources: Vec<String>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// The pod's requests (= limits) from the options; zero amounts are left out.
fn requests(args: &RunArgs) -> anyhow::Result<ResourceList> {
    let mut list = ResourceList::new();
    let mut add = |name: &str, text: &str, option: &str| -> anyhow::Result<()> {
        if list.contains_key(name) {
            bail!("{option}: resource {name:?} is requested twice (check --cpus, --memory and --resource)");
        }
        let amount = parse_resource_amount(name, text)
            .with_context(|| format!("{option}: invalid amount {text:?} for {name}"))?;
        if amount > 0 {
            list.insert(name.to_string(), amount);
        }
        Ok(())
    };
    if let Some(c) = &args.cpus {
        add("cpu", c, "--cpus")?;
    }
    if let Some(m) = &args.memory {
        add("memory", m, "--memory")?;
    }
    for r in &args.resources {
        let Some((name, amount)) = r.split_once('=') else {
            bail!("--resource {r:?}: expected NAME=N (for example nvidia.com/gpu=2)");
        };
        if name.trim().is_empty() {
            bail!("--resource {r:?}: the resource name is empty; write NAME=N");
        }
        add(name.trim(), amount.trim(), "--resource")?;
    }
    Ok(list)
}

/// Run CMD in an admitted, NUMA-aligned cgroup.
pub fn run(config: &Path, args: RunArgs) -> anyhow::Result<ExitCode> {
    let signals = Signals::install()?;
    let pod = topomgr_run::pod(requests(&args)?);
    let cfg = inputs::load_config(config)?;
    let place = RunConfig {
        cgroup_root: cfg.cgroup_root.clone(),
        state_dir: cfg.state_dir.clone(),
        daemon_socket: cfg.daemon.socket.clone(),
    };
    let mut run = match topomgr_run::through(&place, args.socket.as_deref())? {
        Through::Itself(node_lock) => {
            inputs::warn_without_config(config, &cfg);
            let machine = inputs::discover(&cfg, None)?;
            let local = Local::new(cfg, &machine)?;
            Run::new(&place, Box::new(local), &pod, node_lock)?
        }
        Through::Daemon { socket, found } => Run::through_daemon(&place, &socket, found, &pod)?,
    };
    let admission = match run.admit(&pod) {
        Ok(r) => r,
        Err(e) => {
            report_teardown(run.teardown());
            return Err(e.into());
        }
    };
    if !admission.admitted {
        eprintln!(
            "topomgr: pod rejected: {}: {}",
            field(admission.reason.as_deref().unwrap_or("rejected")),
            field(admission.message.as_deref().unwrap_or(""))
        );
        let holders = run.exclusive_holders();
        if !holders.is_empty() {
            eprintln!(
                "topomgr: CPUs held exclusively by other workloads: {}",
                holders.join("; ")
            );
        }
        return Ok(ExitCode::from(REJECTED));
    }
    let ended = run.start_and_wait(&args.command, &admission, &signals);
    let teardown = run.teardown();
    drop(signals);
    report_teardown(teardown);
    let ended = ended?;
    match &ended {
        Ended::SignalBeforeStart(sig) => {
            eprintln!("topomgr: signal {sig} before the command started; cleaning up");
        }
        Ended::NotStarted { error, cgroup } => eprintln!(
            "topomgr: cannot start {:?} in cgroup {}: {error}",
            args.command
                .first()
                .map(|c| c.to_string_lossy())
                .unwrap_or_default(),
            cgroup.display()
        ),
        Ended::Exited(_) => {}
    }
    Ok(ExitCode::from(ended.exit_code()))
}

fn report_teardown(t: Teardown) {
    if let Some(pids) = t.kept {
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        info!(pids = %pids.join(","), "processes remain in the cgroup; the pod stays held");
        eprintln!(
            "topomgr: warning: processes {} are still in the command's cgroup; its CPUs stay reserved until they exit ({})",
            pids.join(","),
            t.release_later
        );
    }
    for e in t.errors {
        warn!(error = %e, "cleanup failed");
        eprintln!("topomgr: error during cleanup: {e}");
    }
}

#[cfg(test)]
mod tests {
    use topomgr_sdk::QosClass;

    use super::*;

    fn args(cpus: Option<&str>, memory: Option<&str>, res: &[&str]) -> RunArgs {
        RunArgs {
            socket: None,
            cpus: cpus.map(str::to_string),
            memory: memory.map(str::to_string),
            resources: res.iter().map(|s| s.to_string()).collect(),
            command: vec!["true".into()],
        }
    }

    fn build_pod(args: &RunArgs) -> anyhow::Result<topomgr_sdk::PodView> {
        Ok(topomgr_run::pod(requests(args)?))
    }

    #[test]
    fn guaranteed_pod_from_options() {
        let pod = build_pod(&args(Some("2"), Some("1Gi"), &["nvidia.com/gpu=1"])).unwrap();
        assert!(pod.uid.starts_with(&format!("run-{}-", std::process::id())));
        assert_eq!(pod.qos, QosClass::Guaranteed);
        let c = &pod.containers[0];
        assert_eq!(c.name, "main");
        let want: ResourceList = [
            ("cpu".to_string(), 2000),
            ("memory".to_string(), 1 << 30),
            ("nvidia.com/gpu".to_string(), 1),
        ]
        .into_iter()
        .collect();
        assert_eq!(c.requests, want);
        assert_eq!(c.limits, want);
    }

    #[test]
    fn bad_options_are_refused() {
        let msg = |a: RunArgs| format!("{:#}", build_pod(&a).unwrap_err());
        assert_eq!(
            msg(args(None, None, &["gpu"])),
            "--resource \"gpu\": expected NAME=N (for example nvidia.com/gpu=2)"
        );
        assert_eq!(
            msg(args(Some("1"), None, &["cpu=2"])),
            "--resource: resource \"cpu\" is requested twice (check --cpus, --memory and --resource)"
        );
        assert_eq!(
            msg(args(None, None, &["=2"])),
            "--resource \"=2\": the resource name is empty; write NAME=N"
        );
        assert!(
            msg(args(Some("x"), None, &[])).starts_with("--cpus: invalid amount \"x\" for cpu: ")
        );
    }
}
