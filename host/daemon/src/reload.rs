//! Live reconciliation: the daemon follows its machine and its config
//! without a restart.
//!
//! On SIGHUP (`systemctl reload topomgr`) the config and the machine are
//! read again; every `[daemon] machine_check_interval_ms` the machine is
//! read again and, when it changed, reconciled, and the attached cgroups
//! are verified (the state thread's `CheckCgroups`). A reconcile builds every
//! enabled provider anew on the machine and config as they are now (off
//! the state thread) and hands them to the state thread, which restores the
//! running state into them and swaps
//! ([`topomgr_node::setup::reload::reload`]): pods are kept, conflicts are
//! reported, a provider that cannot start on the new config keeps running
//! as it was. A config that cannot be read, a policy that cannot be made
//! from it, or two providers that would own one resource or serve one
//! device (refused as at start), changes nothing; either is logged, counted
//! (`topomgr_reload_failures_total`) and shown in `/v1/health` until a
//! reload succeeds.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use topomgr_engine::provider::ProviderObserver;
use topomgr_node::setup::config::HostConfig;
use topomgr_sdk::Machine;
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::state_thread::{Command, Prepared, StateThread};

/// Where a reload reads the config and the machine (the binary's readers:
/// the same files, environment and sysfs root as at start).
pub trait Source: Send + Sync {
    /// The configuration, read again.
    fn config(&self) -> Result<HostConfig, String>;
    /// The machine, read again, for `cfg`.
    fn machine(&self, cfg: &HostConfig) -> Result<Machine, String>;
}

/// Build the new instances for `cfg` on `machine` (blocking: plugins load
/// and their `new` runs).
fn prepare(
    trigger: &'static str,
    cfg: &HostConfig,
    machine: Machine,
    metrics: &Arc<Metrics>,
) -> Result<Prepared, String> {
    let (policy, scope) =
        topomgr_node::setup::policy_of(cfg, &machine).map_err(|e| e.to_string())?;
    let mut providers: Vec<(String, Result<_, String>)> =
        topomgr_node::setup::load_each_provider(cfg, &machine)
            .into_iter()
            .map(|(name, built)| {
                let built = built
                    .map(|p| {
                        let mut p =
                            p.with_observer(Arc::clone(metrics) as Arc<dyn ProviderObserver>);
                        if let Ok(inventory) = p.inventory() {
                            metrics.provider(&name, &inventory);
                        }
                        p
                    })
                    .map_err(|e| e.to_string());
                (name, built)
            })
            .collect();
    // Two new providers that own one resource or serve one device are
    // refused as at start: nothing changes.
    topomgr_node::setup::refuse_shared(
        cfg,
        providers
            .iter_mut()
            .filter_map(|(_, built)| built.as_mut().ok()),
    )
    .map_err(|e| e.to_string())?;
    Ok(Prepared {
        trigger,
        machine,
        policy,
        scope,
        limits: cfg.limits.limits(),
        align_unknown_devices: cfg.cdi.align_unknown_devices,
        providers,
    })
}

/// The reload loop: SIGHUP and the machine check, until `stop`.
pub(crate) async fn watch(
    state_thread: StateThread,
    source: Arc<dyn Source>,
    mut cfg: HostConfig,
    mut machine: Machine,
    interval: Duration,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(error = %e, "cannot watch SIGHUP; the config is read again only at a restart");
            None
        }
    };
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let stopping = crate::stopped(stop);
    tokio::pin!(stopping);
    loop {
        let hangup = async {
            match hup.as_mut() {
                Some(h) => h.recv().await,
                None => std::future::pending().await,
            }
        };
        let (trigger, new_cfg) = tokio::select! {
            _ = &mut stopping => return,
            _ = hangup => {
                info!("SIGHUP: reading the config and the machine again");
                let src = Arc::clone(&source);
                match tokio::task::spawn_blocking(move || src.config()).await {
                    Ok(Ok(c)) => ("SIGHUP", Some(c)),
                    Ok(Err(e)) => {
                        failed(&state_thread, &metrics, format!("reload on SIGHUP: the config cannot be read ({e}); everything runs as before. Fix the config and reload again")).await;
                        continue;
                    }
                    Err(e) => {
                        failed(&state_thread, &metrics, format!("reload on SIGHUP failed: {e}")).await;
                        continue;
                    }
                }
            }
            _ = ticks.tick() => {
                if let Err(e) = state_thread.submit(Command::CheckCgroups).await {
                    warn!(error = %e, "cgroup check failed");
                }
                ("machine check", None)
            }
        };
        let use_cfg = new_cfg.clone().unwrap_or_else(|| cfg.clone());
        let src = Arc::clone(&source);
        let c = use_cfg.clone();
        let read = tokio::task::spawn_blocking(move || src.machine(&c)).await;
        let now = match read {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => {
                failed(
                    &state_thread,
                    &metrics,
                    format!(
                        "{trigger}: the machine cannot be read ({e}); everything runs as before"
                    ),
                )
                .await;
                continue;
            }
            Err(e) => {
                failed(&state_thread, &metrics, format!("{trigger}: {e}")).await;
                continue;
            }
        };
        if new_cfg.is_none() && same_shape(&now, &machine) {
            continue;
        }
        if new_cfg.is_none() {
            info!("the machine changed: reconciling the providers with it");
        }
        let m = Arc::clone(&metrics);
        let c = use_cfg.clone();
        let machine_now = now.clone();
        let built =
            tokio::task::spawn_blocking(move || prepare(trigger, &c, machine_now, &m)).await;
        let prepared = match built {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                failed(&state_thread, &metrics, format!("{trigger}: {e}; everything runs as before. Fix the config and reload again")).await;
                continue;
            }
            Err(e) => {
                failed(&state_thread, &metrics, format!("{trigger}: {e}")).await;
                continue;
            }
        };
        match state_thread
            .submit(Command::Reload(Arc::new(std::sync::Mutex::new(Some(
                prepared,
            )))))
            .await
        {
            Ok(_) => {
                cfg = use_cfg;
                machine = now;
            }
            Err(e) => {
                warn!(error = %e, "{trigger}: the reconcile failed; everything runs as before")
            }
        }
    }
}

/// Whether `a` and `b` are the same machine but for what changes all the
/// time (free memory, free hugepages), which no provider's state depends on.
fn same_shape(a: &Machine, b: &Machine) -> bool {
    fn shape(m: &Machine) -> Machine {
        let mut m = m.clone();
        for node in &mut m.numa_nodes {
            node.memory_free_bytes = 0;
            for pages in node.hugepages.values_mut() {
                pages.free = 0;
            }
        }
        m
    }
    shape(a) == shape(b)
}

/// Report a reload that changed nothing.
async fn failed(state_thread: &StateThread, metrics: &Metrics, message: String) {
    warn!("{message}");
    // Health shows the note before the failure is counted, so whoever
    // watches the counter (an operator's alert, a test) finds it there.
    let _ = state_thread.submit(Command::ReloadFailed(message)).await;
    metrics.reload_failed();
}

#[cfg(test)]
mod tests {
    use super::*;
    use topomgr_sdk::testkit;

    #[test]
    fn free_amounts_are_not_a_change() {
        let a = testkit::machine(2, 2);
        let mut b = a.clone();
        b.numa_nodes[0].memory_free_bytes += 4096;
        assert!(same_shape(&a, &b));
        b.numa_nodes[0].memory_bytes += 128 << 20;
        assert!(!same_shape(&a, &b));
    }
}
