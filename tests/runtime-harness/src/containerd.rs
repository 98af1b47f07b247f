//! A private containerd for one test: its own root, state, sockets and
//! config under a temporary directory, NRI enabled on its own socket, the
//! CRI plugin with a locally imported sandbox image, bookworm's runc with
//! the cgroupfs driver, and pods under a cgroup root of its own. Dropping it
//! removes every process, mount and cgroup it made (see `cleanup`).

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::cleanup::{self, tail, Leftovers};
use crate::cri::{CriClient, Qos};
use crate::image::{self, IMAGE};
use crate::prereq::{self, ContainerdLine, Runtimes};
use crate::HarnessError;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// How long containerd may take to open its sockets.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running private containerd.
pub struct Containerd {
    line: ContainerdLine,
    runtimes: Runtimes,
    dir: PathBuf,
    cgroup_root: String,
    child: Option<Child>,
}

impl Containerd {
    /// Checks the prerequisites, starts containerd 1.7 and imports the
    /// test image. Fails with what is missing when the machine cannot run
    /// it.
    pub fn start() -> Result<Self, HarnessError> {
        Containerd::start_line(ContainerdLine::V1_7)
    }

    /// [`Containerd::start`] for a containerd of `line`.
    pub fn start_line(line: ContainerdLine) -> Result<Self, HarnessError> {
        let runtimes = prereq::require_containerd_line(line)?;
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("topomgr-containerd-{tag}"));
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(|e| HarnessError::io("remove stale", &dir, e))?;
        }
        for sub in ["cni", "nri-plugins", "nri-conf", "runc", "cdi"] {
            fs::create_dir_all(dir.join(sub))
                .map_err(|e| HarnessError::io("create", &dir.join(sub), e))?;
        }
        let mut c = Containerd {
            line,
            runtimes,
            dir,
            cgroup_root: format!("/topomgr-it-{tag}"),
            child: None,
        };
        fs::write(c.dir.join("config.toml"), c.config())
            .map_err(|e| HarnessError::io("write", &c.dir.join("config.toml"), e))?;
        c.spawn()?;
        c.import_image()?;
        Ok(c)
    }

    /// containerd's gRPC (CRI) socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// The NRI socket plugins connect to.
    pub fn nri_socket(&self) -> PathBuf {
        self.dir.join("nri.sock")
    }

    /// The CDI spec directory this containerd reads (`enable_cdi`): a test
    /// writes specs there before it asks for their devices.
    pub fn cdi_dir(&self) -> PathBuf {
        self.dir.join("cdi")
    }

    /// Which containerd this is.
    pub fn line(&self) -> ContainerdLine {
        self.line
    }

    /// The directory holding its root, state, sockets, config and log.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The cgroup every pod's parent is under (one per instance).
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }

    /// The locally built image (busybox applets, `PATH=/bin`).
    pub fn image(&self) -> &'static str {
        IMAGE
    }

    /// The cgroup parent the kubelet's cgroupfs driver gives a pod of this
    /// QoS class, under this containerd's own cgroup root.
    pub fn cgroup_parent(&self, qos: Qos, pod_uid: &str) -> String {
        let class = match qos {
            Qos::Guaranteed => "",
            Qos::Burstable => "/burstable",
            Qos::BestEffort => "/besteffort",
        };
        format!("{}/kubepods{class}/pod{pod_uid}", self.cgroup_root)
    }

    /// A CRI client on this containerd.
    pub async fn cri(&self) -> Result<CriClient, HarnessError> {
        CriClient::connect(&self.socket()).await
    }

    /// containerd's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    /// Stops containerd (SIGTERM, as a service manager would) and starts it
    /// again on the same root and state; containers keep running in their
    /// shims meanwhile.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop_daemon();
        self.spawn()
    }

    fn config(&self) -> String {
        match self.line {
            ContainerdLine::V1_7 => self.config_v2(),
            ContainerdLine::V2 => self.config_v3(),
        }
    }

    /// containerd 2.x's configuration (`version = 3`: the CRI plugin split
    /// into `io.containerd.cri.v1.images` and `io.containerd.cri.v1.runtime`;
    /// the sandbox image is a pinned image).
    fn config_v3(&self) -> String {
        let d = self.dir.display();
        let runc = self.runtimes.runc.display();
        format!(
            r#"version = 3
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  # No CAP_SYS_RESOURCE in every machine this runs on.
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = ["{d}/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{d}/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{d}/cni"]
    conf_dir = "{d}/cni"

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "{d}/nri.sock"
  plugin_path = "{d}/nri-plugins"
  plugin_config_path = "{d}/nri-conf"
"#
        )
    }

    /// containerd 1.7's configuration (`version = 2`).
    fn config_v2(&self) -> String {
        let d = self.dir.display();
        let runc = self.runtimes.runc.display();
        format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  # No CAP_SYS_RESOURCE in every machine this runs on.
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = ["{d}/cdi"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        # runc's state of each container, here instead of /run/containerd/runc
        Root = "{d}/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni"
    conf_dir = "{d}/cni"

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{d}/nri.sock"
  plugin_path = "{d}/nri-plugins"
  plugin_config_path = "{d}/nri-conf"
"#
        )
    }

    fn spawn(&mut self) -> Result<(), HarnessError> {
        for s in [self.socket(), self.nri_socket()] {
            let _ = fs::remove_file(s);
        }
        let log_path = self.dir.join("containerd.log");
        let (log, log2) = cleanup::log_outputs(&log_path)?;
        let path = format!(
            "{}:{}",
            self.runtimes.containerd_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new(self.runtimes.containerd_dir.join("containerd"))
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| {
                HarnessError::io("start", &self.runtimes.containerd_dir.join("containerd"), e)
            })?;
        self.child = Some(child);
        let start = Instant::now();
        while !(self.socket().exists() && self.nri_socket().exists()) {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(HarnessError::new(format!(
                    "containerd exited ({status}) before opening its sockets; its log:\n{}",
                    tail(&self.log(), 30)
                )));
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(HarnessError::new(format!(
                    "containerd did not open {} and {} within {START_TIMEOUT:?}; its log:\n{}",
                    self.socket().display(),
                    self.nri_socket().display(),
                    tail(&self.log(), 30)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn import_image(&self) -> Result<(), HarnessError> {
        let tarball = self.dir.join("image.tar");
        image::write_docker_archive(&self.runtimes.busybox, &tarball)?;
        let out = Command::new(self.runtimes.containerd_dir.join("ctr"))
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", "k8s.io", "images", "import"])
            .arg(&tarball)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| HarnessError::io("run", &self.runtimes.containerd_dir.join("ctr"), e))?;
        if !out.status.success() {
            return Err(HarnessError::new(format!(
                "ctr images import {} failed ({}): {}{}",
                tarball.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// SIGTERM, then SIGKILL after 10 s.
    fn stop_daemon(&mut self) {
        if let Some(child) = self.child.take() {
            cleanup::terminate(child);
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "runtime-harness: the test failed; the last lines of containerd's log:\n{}",
                tail(&self.log(), 60)
            );
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let socket = self.socket();
        let problems = cleanup::tear_down(&Leftovers {
            dir: &self.dir,
            helpers_name: &socket,
            cgroup_root: &self.cgroup_root,
        });
        for p in problems {
            eprintln!("runtime-harness cleanup: {p}");
        }
    }
}
