//! The node state as a snapshot body (`body_of`) and a recovered body
//! installed into the node state (`install`); the file format is
//! [`crate::persist::snapshot`]'s.
//!
//! When a state is installed:
//! - a configured provider without saved state starts empty: every save
//!   writes every provider's state, so a provider the state lacks was not
//!   configured when it was saved (it is new) and the pods hold nothing of
//!   it;
//! - each provider takes its saved assignments back on the machine and
//!   config as they are now ([`topomgr_sdk::Provider::restore`]): the
//!   conflicts it reports are kept ([`crate::state::restore_reports::Conflicts`]), its
//!   moves are applied to the pod table (and journaled);
//! - a provider that cannot read its saved state at all is *held* (`crate::state::provider_states::ProviderStates::hold`): its bytes are kept,
//!   admissions that ask for its resources are refused (the others go
//!   on), pods are kept and can be released; the
//!   releases are replayed into it when it restores again;
//! - the saved state of a provider that is not configured now is kept and
//!   written back unchanged, with the same replay of releases;
//! - the pod table rebuilds the [`topomgr_engine::ledger`], which reports
//!   what vanished from the machine and anything held twice, never
//!   dropping it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use topomgr_engine::ledger::Finding;

use crate::persist::snapshot::{
    provider_bytes, provider_error, to_hex, Body, StateError, STATE_FILE,
};
use crate::state::provider_states::{Kept, PendingReleases, ProviderPart};
use crate::state::{NodeState, Records};

/// One provider's part of the state: its checkpoint bytes, and the
/// releases it has not seen when it is held or not configured.
pub(crate) fn provider_part(
    name: &str,
    part: ProviderPart<'_>,
) -> Result<(Vec<u8>, PendingReleases), StateError> {
    match part {
        ProviderPart::Live(p) => {
            let bytes = p
                .checkpoint()
                .map_err(|e| provider_error(name, &e, PathBuf::from(STATE_FILE)))?;
            Ok((bytes, Vec::new()))
        }
        ProviderPart::Kept(k) => Ok((k.saved.clone(), k.pending_releases.clone())),
    }
}

/// The whole state of `node` as a snapshot body (journal `generation`).
pub(crate) fn body_of(node: &NodeState, generation: u64) -> Result<Body, StateError> {
    let records = node.records();
    let mut body = Body {
        pods: node.admitter().pods().clone(),
        providers: BTreeMap::new(),
        attachments: records.attachments.clone(),
        owners: records.owners.clone(),
        pending_releases: BTreeMap::new(),
        generation,
    };
    for (name, part) in node.provider_states().parts(node.admitter()) {
        let (bytes, pending) = provider_part(name, part)?;
        if !pending.is_empty() {
            body.pending_releases.insert(name.to_string(), pending);
        }
        body.providers.insert(name.to_string(), to_hex(&bytes));
    }
    Ok(body)
}

/// Something in restored state that the machine or the config no longer
/// has, or that breaks the ledger's invariant: kept and reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreIssue {
    /// What the ledger found (vanished CPUs, nodes, devices; double holds).
    Ledger(Finding),
    /// The state holds a provider that is not configured now.
    MissingProvider {
        /// Provider name.
        provider: String,
    },
    /// A configured provider cannot read its saved state and is held.
    ProviderHeld {
        /// Provider name.
        provider: String,
        /// Its refusal.
        reason: String,
    },
}

impl fmt::Display for RestoreIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreIssue::Ledger(finding) => finding.fmt(f),
            RestoreIssue::MissingProvider { provider } => write!(
                f,
                "the state holds assignments of provider {provider:?}, which is not configured; its state is kept unchanged (and the releases it misses are remembered) but nothing enforces it"
            ),
            RestoreIssue::ProviderHeld { provider, reason } => write!(
                f,
                "provider {provider:?} cannot read its saved state ({reason}); it is held: its state is kept unchanged, admitted pods are kept and can be released, and admissions that ask for its resources are refused (the others go on). Configure the provider library that wrote that state under the name {provider:?} again (or a version that reads it) and restart topomgr or send the daemon SIGHUP"
            ),
        }
    }
}

/// What restoring a state found ([`crate::persist::store::Store::open`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Restored {
    /// Whether a state file existed.
    pub found: bool,
    /// The boot id the state was written under (`None` without a file).
    pub saved_boot_id: Option<String>,
    /// Whether that boot id differs from the current one (the machine rebooted).
    pub rebooted: bool,
    /// Number of admitted pods restored.
    pub pods: usize,
    /// What the machine or config no longer has (kept, reported).
    pub issues: Vec<RestoreIssue>,
    /// Releases replayed into providers that missed them (the state changed:
    /// save it).
    pub replayed: usize,
    /// Pods whose records changed because a device they hold was found
    /// again under another id (the state changed: save it).
    pub moved: usize,
    /// Configured providers the state had no part for: they start empty.
    pub new_providers: Vec<String>,
}

impl Restored {
    /// What the restore found, one sentence each, as `/v1/health` lists
    /// it: a reboot since the state was saved (`boot_id` is this boot's)
    /// and every issue.
    pub fn notes(&self, boot_id: &str) -> Vec<String> {
        let mut notes = Vec::new();
        if self.rebooted {
            notes.push(format!(
                "state was saved under boot id {}, this boot is {boot_id}; its {} pod(s) are kept until released",
                self.saved_boot_id.as_deref().unwrap_or_default(),
                self.pods
            ));
        }
        notes.extend(self.issues.iter().map(ToString::to_string));
        notes
    }
}

/// Install a recovered state into `node`: hand each provider its bytes
/// (a provider without any starts empty; those that cannot read theirs
/// are held), keep what their restores report (conflicts; moves applied
/// to the pod table), replay the releases they missed, install the pod
/// table (rebuilding the ledger) and the host's records. Nothing is
/// re-admitted or released. `path` names the state in errors;
/// `saved_boot_id` is the boot the state was last written in.
pub(crate) fn install(
    path: &Path,
    saved_boot_id: String,
    mut body: Body,
    node: &mut NodeState,
    current_boot_id: &str,
) -> Result<Restored, StateError> {
    let path = path.to_path_buf();
    let (admitter, states, conflicts) = node.restore_parts_mut();
    let mut saved: Vec<(Option<Vec<u8>>, PendingReleases)> = Vec::new();
    for p in admitter.providers() {
        let bytes = match body.providers.remove(p.name()) {
            Some(hex) => Some(provider_bytes(&path, p.name(), &hex)?),
            None => None,
        };
        let pending = body.pending_releases.remove(p.name()).unwrap_or_default();
        saved.push((bytes, pending));
    }
    let mut absent = Vec::new();
    for (name, hex) in std::mem::take(&mut body.providers) {
        let bytes = provider_bytes(&path, &name, &hex)?;
        let pending = body.pending_releases.remove(&name).unwrap_or_default();
        absent.push((name, bytes, pending));
    }
    states.reset(admitter);
    conflicts.clear();
    let mut issues = Vec::new();
    let mut replays = Vec::new();
    let mut moves = Vec::new();
    let mut new_providers = Vec::new();
    for (i, (bytes, pending)) in saved.into_iter().enumerate() {
        let p = &mut admitter.providers_mut()[i];
        // Every save writes every provider's state: without one, the
        // provider is new and the pods hold nothing of it.
        let Some(bytes) = bytes else {
            if !body.pods.is_empty() {
                tracing::info!(provider = p.name(), pods = body.pods.len(), "provider has no saved state: it is new and starts empty; the admitted pods hold nothing of it");
            }
            new_providers.push(p.name().to_owned());
            continue;
        };
        match p.restore(&bytes) {
            Ok(report) => {
                // A conflict of a pod the table does not hold has nothing left to hold.
                let standing = report
                    .conflicts
                    .into_iter()
                    .filter(|c| body.pods.contains_key(&c.pod_uid))
                    .collect();
                conflicts.set(p.name(), standing);
                if !report.moves.is_empty() {
                    moves.push((p.name().to_owned(), report.moves));
                }
                replays.push((i, pending));
            }
            Err(e) => {
                let name = p.name().to_owned();
                tracing::warn!(provider = %name, error = %e, "provider cannot read its saved state; it is held");
                issues.push(RestoreIssue::ProviderHeld {
                    provider: name.clone(),
                    reason: e.message.clone(),
                });
                let kept = Kept {
                    reason: e.message,
                    saved: bytes,
                    pending_releases: pending,
                };
                states.hold(admitter, &name, kept);
            }
        }
    }
    // What each provider now holds is its saved state; the releases it
    // missed change it (and make it changed for the next save).
    states.saved_all(admitter);
    let mut replayed = 0;
    for (i, pending) in replays {
        let p = &mut admitter.providers_mut()[i];
        replayed += pending.len();
        for (uid, container) in &pending {
            if let Err(e) = p.release(uid, container) {
                tracing::warn!(provider = p.name(), pod = %uid, container = %container, error = %e, "replaying a release the provider missed failed");
            }
        }
    }
    // A provider whose assignments moved holds them under the new ids now:
    // its state and the pod records are saved with the next write.
    let mut moved = std::collections::BTreeSet::new();
    for (provider, list) in &moves {
        moved.extend(crate::state::restore_reports::apply_moves(
            &mut body.pods,
            list,
        ));
        states.keep_changed(std::slice::from_ref(provider));
    }
    for (name, bytes, pending) in absent {
        issues.push(RestoreIssue::MissingProvider {
            provider: name.clone(),
        });
        states.keep_absent(
            &name,
            Kept {
                reason: "not configured".to_owned(),
                saved: bytes,
                pending_releases: pending,
            },
        );
    }
    let pods = body.pods.len();
    issues.extend(
        admitter
            .set_pods(body.pods)
            .into_iter()
            .map(RestoreIssue::Ledger),
    );
    node.set_records(Records {
        attachments: body.attachments,
        owners: body.owners,
    });
    for uid in &moved {
        node.rewritten(uid);
    }
    Ok(Restored {
        found: true,
        rebooted: saved_boot_id != current_boot_id,
        saved_boot_id: Some(saved_boot_id),
        pods,
        issues,
        replayed,
        moved: moved.len(),
        new_providers,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use topomgr_engine::admission::{AdmitResult, Admitter, ContainerResult};
    use topomgr_engine::numa::NumaInfo;
    use topomgr_engine::policy::{Policy, Scope};
    use topomgr_sdk::{testkit, Allocation, CpuSet, Machine, NumaMask, TopologyHint};

    use super::*;
    use crate::persist::snapshot::{encode, read_snapshot};
    use crate::state::pod_owner::{ContainerOwner, ContainerRuntime, Owner, ProcessOwner};

    fn node(machine: &Machine) -> NodeState {
        let numa = NumaInfo::from_machine(machine).unwrap();
        let policy = Policy::new("best-effort", &BTreeMap::new(), numa).unwrap();
        let adm = Admitter::new(machine, policy, Scope::Container, Vec::new());
        NodeState::new(adm, Records::default(), Path::new("/nonexistent"), "boot")
    }

    /// The snapshot alone (no journal), as `Store` writes it at compaction.
    fn save(dir: &Path, node: &NodeState, boot: &str) {
        crate::fsutil::write_atomic(
            &dir.join(STATE_FILE),
            &encode(&body_of(node, 0).unwrap(), boot).unwrap(),
        )
        .unwrap();
    }

    fn restore(dir: &Path, node: &mut NodeState, boot: &str) -> Result<Restored, StateError> {
        let path = dir.join(STATE_FILE);
        match read_snapshot(&path)? {
            Some((saved, body, _)) => install(&path, saved, body, node, boot),
            None => Ok(Restored::default()),
        }
    }

    fn pod_result(uid: &str, cpus: &str, mems: &str, devices: &[&str]) -> AdmitResult {
        let mut pod = testkit::guaranteed_pod(uid, &[("cpu", 2000)]);
        pod.uid = uid.to_owned();
        let mut allocation = Allocation::default()
            .with_cpus(CpuSet::parse(cpus).unwrap(), true)
            .with_mems(NumaMask::parse_list(mems).unwrap());
        if !devices.is_empty() {
            allocation.devices.insert(
                "example.com/nic".to_owned(),
                devices.iter().map(|d| d.to_string()).collect(),
            );
        }
        AdmitResult {
            pod,
            admitted: true,
            reason: None,
            message: None,
            containers: vec![ContainerResult {
                name: "app".to_owned(),
                hint: TopologyHint {
                    affinity: None,
                    preferred: true,
                },
                allocation,
            }],
        }
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("topomgr-image-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    /// A node whose one provider `gpu` restores with `report`, and a new
    /// provider `fresh` when `with_new` is set.
    fn node_with(machine: &Machine, report: topomgr_sdk::Reconciled, with_new: bool) -> NodeState {
        let numa = NumaInfo::from_machine(machine).unwrap();
        let policy = Policy::new("best-effort", &BTreeMap::new(), numa).unwrap();
        let gpu = testkit::FakeProvider::new()
            .with_checkpoint(|| Ok(b"gpu-state".to_vec()))
            .with_restore(move |bytes| {
                assert_eq!(bytes, b"gpu-state");
                Ok(report.clone())
            });
        let mut providers = vec![topomgr_engine::provider::LoadedProvider::in_process(
            "gpu", gpu,
        )];
        if with_new {
            providers.push(topomgr_engine::provider::LoadedProvider::in_process(
                "fresh",
                testkit::FakeProvider::new()
                    .with_restore(|_| panic!("a new provider has nothing to restore")),
            ));
        }
        let adm = Admitter::new(machine, policy, Scope::Container, providers);
        NodeState::new(adm, Records::default(), Path::new("/nonexistent"), "boot")
    }

    #[test]
    fn restore_keeps_conflicts_applies_moves_and_starts_new_providers_empty() {
        use topomgr_sdk::{Conflict, Move, Reconciled, ResourceId};
        let machine = testkit::machine(2, 2);
        let dir = scratch("reconcile");
        let mut a = node_with(&machine, Reconciled::new(), false);
        let mut held = pod_result("p1", "1", "0", &[]);
        held.containers[0].allocation.devices.insert(
            "nvidia.com/gpu".to_owned(),
            vec!["0000:3b:00.0".to_owned(), "GPU-2".to_owned()],
        );
        a.admitter_mut()
            .set_pods(BTreeMap::from([("p1".to_owned(), held)]));
        save(&dir, &a, "boot");

        let report = Reconciled::new()
            .with_conflict(
                Conflict::new("p1", "app", "nvidia.com/gpu", "device GPU-2 is gone")
                    .with_ids(["GPU-2"]),
            )
            .with_move(Move::new(
                "p1",
                "app",
                ResourceId::new("nvidia.com/gpu", "0000:3b:00.0"),
                ResourceId::new("nvidia.com/gpu", "GPU-1"),
            ));
        // A provider configured since (`fresh`) starts empty, pods held or not.
        let mut b = node_with(&machine, report, true);
        let r = restore(&dir, &mut b, "boot").unwrap();
        assert_eq!(
            (r.moved, r.new_providers.clone()),
            (1, vec!["fresh".to_owned()])
        );
        assert_eq!(
            b.pods()["p1"].containers[0].allocation.devices["nvidia.com/gpu"],
            ["GPU-2".to_owned(), "GPU-1".to_owned()]
        );
        let conflicts = b.conflicts().reports();
        assert_eq!(conflicts.len(), 1);
        assert_eq!(
            (
                conflicts[0].provider.as_str(),
                conflicts[0].pod.as_str(),
                conflicts[0].missing.as_str()
            ),
            ("gpu", "p1", "device GPU-2 is gone")
        );
        // The move is journaled as the pod's record now.
        let changes = b.take_changes();
        assert!(
            matches!(&changes[..], [crate::state::Change::Admitted(r)] if r.containers[0].allocation.devices["nvidia.com/gpu"] == ["GPU-2", "GPU-1"]),
            "{changes:?}"
        );
        assert!(b.admitter().held().is_empty());
        // Released, the pod's conflict ends.
        b.release("p1").unwrap();
        assert!(b.conflicts().is_empty());
    }

    #[test]
    fn state_round_trip_reports_reboot_and_vanished_resources() {
        let machine = testkit::machine(2, 2);
        let dir = scratch("env");
        let mut a = node(&machine);
        let mut pods = BTreeMap::new();
        pods.insert("p1".to_owned(), pod_result("p1", "1-3", "0", &[]));
        pods.insert(
            "p2".to_owned(),
            pod_result("p2", "2,7-9", "0,2", &["0000:3b:00.1", "nic-7"]),
        );
        a.admitter_mut().set_pods(pods.clone());
        let mut records = Records::default();
        records
            .attachments
            .entry("p1".to_owned())
            .or_default()
            .insert("app".to_owned(), "kubepods/p1/app".to_owned());
        records.owners.insert(
            "p1".to_owned(),
            Owner::Process(ProcessOwner {
                pid: 7,
                start_time: 99,
                boot_id: "boot-a".to_owned(),
            }),
        );
        records.owners.insert(
            "p2".to_owned(),
            Owner::Container(ContainerOwner {
                runtime: ContainerRuntime::OciHook,
                id: "c2".to_owned(),
                pid: Some(8),
                start_time: Some(100),
                boot_id: "boot-a".to_owned(),
                cgroup: Some("machine.slice/libpod-c2.scope".to_owned()),
                admitted_at: 1_000,
            }),
        );
        a.set_records(records.clone());
        save(&dir, &a, "boot-a");

        let mut b = node(&machine);
        let r = restore(&dir, &mut b, "boot-b").unwrap();
        assert_eq!(b.pods(), &pods);
        assert_eq!(b.records(), &records);
        assert_eq!(
            r,
            Restored {
                found: true,
                saved_boot_id: Some("boot-a".to_owned()),
                rebooted: true,
                pods: 2,
                replayed: 0,
                moved: 0,
                new_providers: Vec::new(),
                issues: vec![
                    RestoreIssue::Ledger(Finding::VanishedCpus {
                        pod: "p2".to_owned(),
                        container: "app".to_owned(),
                        cpus: CpuSet::parse("7-9").unwrap(),
                    }),
                    RestoreIssue::Ledger(Finding::VanishedNumaNodes {
                        pod: "p2".to_owned(),
                        container: "app".to_owned(),
                        nodes: NumaMask::parse_list("2").unwrap(),
                    }),
                    RestoreIssue::Ledger(Finding::VanishedDevices {
                        pod: "p2".to_owned(),
                        container: "app".to_owned(),
                        resource: "example.com/nic".to_owned(),
                        ids: vec!["0000:3b:00.1".to_owned()],
                    }),
                    RestoreIssue::Ledger(Finding::Conflict {
                        what: "CPUs 2".to_owned(),
                        holders: vec![
                            topomgr_engine::ledger::Holder {
                                pod: "p1".to_owned(),
                                label: "default/p1".to_owned(),
                                container: "app".to_owned(),
                            },
                            topomgr_engine::ledger::Holder {
                                pod: "p2".to_owned(),
                                label: "default/p2".to_owned(),
                                container: "app".to_owned(),
                            },
                        ],
                    }),
                ],
            }
        );
        assert_eq!(
            r.issues[0].to_string(),
            "pod \"p2\" container \"app\": CPUs 7-9 are allocated but not online on this machine"
        );
        let same = restore(&dir, &mut node(&machine), "boot-a").unwrap();
        assert!(!same.rebooted);
        let none = restore(&dir.join("nowhere"), &mut node(&machine), "x");
        assert_eq!(none.unwrap(), Restored::default());
        fs::remove_dir_all(dir).unwrap();
    }
}
