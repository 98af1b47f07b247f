//! A run that places itself (no daemon owns the node): `topomgr_run`'s
//! [`LocalPlacement`] over the node state of the run's state directory,
//! admission under the state directory's lock, the cpuset written here.
//! In the binary, not in `topomgr-run`, so that the run crate never links
//! the node's plugin loading and persistence (ARCHITECTURE.md).

use std::path::Path;

use topomgr_cgroup::{Cgroup, CgroupManager, CgroupPath};
use topomgr_contract::api::Admission;
use topomgr_node::locks::lock_holder::Role;
use topomgr_node::persist::state_dir::StateDir;
use topomgr_node::setup::config::HostConfig;
use topomgr_node::state::NodeState;
use topomgr_run::{LocalError, LocalPlacement, RunError, Teardown, CONTAINER};
use topomgr_sdk::{Machine, PodView};
use tracing::info;

/// The node state of this run's state directory.
pub(crate) struct Local {
    cfg: HostConfig,
    node: NodeState,
}

impl Local {
    /// The node of `cfg` on `machine` (every provider it enables; the
    /// state is restored when the pod is admitted).
    pub(crate) fn new(cfg: HostConfig, machine: &Machine) -> anyhow::Result<Local> {
        let node = topomgr_node::setup::node_state(&cfg, machine)?;
        Ok(Local { cfg, node })
    }
}

/// `e` and its causes, joined by `: ` (as `main` prints errors).
fn chain(e: impl std::error::Error + Send + Sync + 'static) -> String {
    format!("{:#}", anyhow::Error::new(e))
}

impl LocalPlacement for Local {
    fn state_dir(&self) -> &Path {
        &self.cfg.state_dir
    }

    /// [`NodeState::exclusive_holders`].
    fn exclusive_holders(&mut self) -> Vec<String> {
        self.node.exclusive_holders()
    }

    /// Under the lock: restore, reclaim pods of dead runs, admit, record
    /// this process as the owner, create the cgroup and attach the
    /// container to it (the shared pool shrinks first), save.
    fn admit(
        &mut self,
        pod: &PodView,
        cgroups: &CgroupManager,
        cgroup: &mut Option<Cgroup>,
    ) -> Result<Admission, LocalError> {
        let mut held = StateDir::open(&self.cfg.state_dir, &mut self.node, Role::Run)?;
        held.reclaim(&mut self.node);
        let result = self.node.admit(pod);
        if !result.admitted {
            held.save(&mut self.node)?;
            return Ok(Admission::from(&result));
        }
        let owner = topomgr_node::state::pod_owner::current(self.node.boot_id())
            .ok_or(RunError::OwnerStartTime)?;
        self.node.set_owner(&pod.uid, owner);
        let path = CgroupPath::container(&pod.uid, CONTAINER)?;
        let cg = cgroups.create(&path)?;
        *cgroup = Some(cg.clone());
        let attached = self
            .node
            .attach(&pod.uid, CONTAINER, &path.as_path().to_string_lossy())?;
        info!(cgroup = %cg.dir().display(), cpus = %attached.cpus, mems = %attached.mems, "cgroup set up");
        held.save(&mut self.node)?;
        Ok(Admission::from(&result))
    }

    /// Under the lock: restore; if processes are left in the cgroup keep
    /// everything held; else remove the cgroup, release the pod, save and
    /// give the CPUs back to the shared pool. Whether the caller may remove
    /// the cgroup (nothing is kept).
    fn release(&mut self, uid: &str, out: &mut Teardown) -> bool {
        // The release must read the config this run read (its providers
        // restore the state directory).
        let config = match self.cfg.files.first() {
            Some(f) if f != Path::new(topomgr_node::setup::config::DEFAULT_CONFIG_PATH) => {
                format!(" --config {}", f.display())
            }
            _ => String::new(),
        };
        out.release_later = format!(
            "the next topomgr run reclaims them then; topomgr{config} release --state-dir {} {uid} releases them now",
            self.cfg.state_dir.display()
        );
        if !self.node.pods().contains_key(uid) {
            return true;
        }
        let mut held = match StateDir::open(&self.cfg.state_dir, &mut self.node, Role::Run) {
            Ok(h) => h,
            Err(e) => {
                out.errors.push(chain(e));
                return true;
            }
        };
        if self.node.pods().contains_key(uid) {
            match self.node.processes(uid) {
                Some(pids) if pids.is_empty() => {
                    self.node.remove_cgroups(uid);
                    if let Err(e) = self.node.release(uid) {
                        out.errors.push(format!("releasing the pod: {e}"));
                    }
                    if let Err(e) = held.save(&mut self.node) {
                        out.errors.push(chain(e));
                    }
                }
                Some(pids) => {
                    out.kept = Some(pids);
                    return false;
                }
                None => {
                    out.errors.push(format!(
                        "cannot read the processes in the cgroup of pod {uid}; it stays held until a later run or `topomgr release --state-dir` finds it empty"
                    ));
                    return false;
                }
            }
        }
        self.node.settle_pool();
        true
    }
}
