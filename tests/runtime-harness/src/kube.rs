//! A one-node Kubernetes for one test: etcd, kube-apiserver and a kubelet
//! of the release line that `.ci/install-kubernetes` builds (upstream
//! sources from the Go module proxy, `tests/kube/`), on a private
//! [`Containerd`] of either line, and kubectl of the same line to drive it.
//!
//! What it sets up, all on loopback and under one temporary directory:
//! etcd; an API server with static tokens (an admin in `system:masters`,
//! the kubelet as `system:node:<name>`), Node and RBAC authorization, no
//! ServiceAccount admission (no controller manager runs, so no service
//! account exists) and no scheduler (pods name their node); a kubelet
//! registered as a Node with the CPU, memory and topology managers at
//! `none`, the cgroupfs driver under the containerd's own cgroup root, and
//! its read-only port off. Pods must be `hostNetwork` (no CNI) and use the
//! local image ([`crate::IMAGE`], `imagePullPolicy: Never`).
//!
//! What a kubelet does to the machine, and how it is undone on drop: it
//! sets `vm.overcommit_memory`, `kernel.panic` and `kernel.panic_on_oops`
//! (saved at start, restored); it creates `/var/lib/kubelet/device-plugins`
//! and `/var/log/containers` whatever its root directory (removed when
//! this node created them); it bind-mounts its root directory onto itself
//! (detached); it needs its cgroup root in every v1 hierarchy (made here,
//! removed with the containerd's). One node runs at a time on a machine
//! (a lock file), since those are machine-wide.

use crate::ports::free_port;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::cleanup::{self, tail};
use crate::containerd::Containerd;
use crate::prereq::ContainerdLine;
use crate::HarnessError;

/// Where the Kubernetes binaries are unless `TOPOMGR_KUBE_DIR` says
/// otherwise: what `.ci/install-kubernetes` links to the build it made.
pub const DEFAULT_KUBE_DIR: &str = "/opt/topomgr-ci/kubernetes/bin";

/// The Node's name.
pub const NODE_NAME: &str = "topomgr-test-node";

/// How long each component may take to answer after it starts.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The kernel settings a kubelet changes.
const SYSCTLS: [&str; 3] = [
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/kernel/panic",
    "/proc/sys/kernel/panic_on_oops",
];

/// Directories a kubelet makes outside its root directory.
const HOST_DIRS: [&str; 2] = ["/var/lib/kubelet/device-plugins", "/var/log/containers"];

/// Choices a test makes about the node.
#[derive(Clone, Debug)]
pub struct KubeOptions {
    /// The kubelet's `systemReserved` CPU (what it keeps out of the
    /// allocatable CPU the scheduler and its own admission count): `"1"`
    /// matches a topomgr that reserves CPU 0 of a 2-CPU machine.
    pub system_reserved_cpu: String,
}

impl Default for KubeOptions {
    fn default() -> Self {
        KubeOptions {
            system_reserved_cpu: "1".to_owned(),
        }
    }
}

/// The Kubernetes binaries: each must exist.
#[derive(Clone, Debug)]
pub struct KubeBinaries {
    pub etcd: PathBuf,
    pub apiserver: PathBuf,
    pub kubelet: PathBuf,
    pub kubectl: PathBuf,
}

/// Checks for the binaries of `.ci/install-kubernetes` (or
/// `TOPOMGR_KUBE_DIR`); the error says how to build them.
pub fn require_kubernetes() -> Result<KubeBinaries, HarnessError> {
    let dir = kube_dir();
    let b = KubeBinaries {
        etcd: dir.join("etcd"),
        apiserver: dir.join("kube-apiserver"),
        kubelet: dir.join("kubelet"),
        kubectl: dir.join("kubectl"),
    };
    let missing: Vec<String> = [&b.etcd, &b.apiserver, &b.kubelet, &b.kubectl]
        .into_iter()
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        return Err(HarnessError::new(format!(
            "this test runs a one-node Kubernetes and needs {}. Build them with \
             `sudo .ci/install-kubernetes` (CI does; about 10 minutes cold on 2 cores, \
             cached by version), or point TOPOMGR_KUBE_DIR at a directory with etcd, \
             kube-apiserver, kubelet and kubectl",
            missing.join(", ")
        )));
    }
    Ok(b)
}

/// Where the binaries of `.ci/install-kubernetes` are: `TOPOMGR_KUBE_DIR`,
/// or [`DEFAULT_KUBE_DIR`].
pub(crate) fn kube_dir() -> PathBuf {
    std::env::var_os("TOPOMGR_KUBE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KUBE_DIR))
}

struct Ports {
    etcd_client: u16,
    etcd_peer: u16,
    apiserver: u16,
    kubelet: u16,
    kubelet_healthz: u16,
}

/// A container the kubelet runs.
#[derive(Clone, Debug)]
pub struct RunningContainer {
    /// Its pod's name.
    pub pod: String,
    /// Its name in the pod.
    pub container: String,
    /// The runtime's container id.
    pub id: String,
    /// Its cgroup directory in the cpuset hierarchy.
    pub cgroup: PathBuf,
}

impl RunningContainer {
    /// What it may use, read from its real cgroup and from inside it:
    /// `(cpuset.cpus, Cpus_allowed_list, Mems_allowed_list)` of its first
    /// process.
    pub fn cpus(&self) -> Option<(String, String, String)> {
        let cpus = fs::read_to_string(self.cgroup.join("cpuset.cpus")).ok()?;
        let pid = fs::read_to_string(self.cgroup.join("cgroup.procs"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .to_owned();
        let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        Some((
            cpus.trim().to_owned(),
            field("Cpus_allowed_list:")?,
            field("Mems_allowed_list:")?,
        ))
    }
}

/// A running one-node cluster. Dropping it stops every component, removes
/// its pods' processes and cgroups (through its containerd) and undoes
/// what the kubelet did to the machine.
pub struct KubeNode {
    bins: KubeBinaries,
    options: KubeOptions,
    dir: PathBuf,
    ports: Ports,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    kubelet: Option<Child>,
    sysctls: Vec<(PathBuf, String)>,
    made_host_dirs: Vec<PathBuf>,
    // Dropped after the components, so the pods go last.
    containerd: Option<Containerd>,
    _lock: File,
}

fn write(path: &Path, text: &str) -> Result<(), HarnessError> {
    fs::write(path, text).map_err(|e| HarnessError::io("write", path, e))
}

/// Takes the machine-wide lock of the one running node (blocks).
fn node_lock() -> Result<File, HarnessError> {
    use std::os::fd::AsRawFd as _;
    let path = std::env::temp_dir().join("topomgr-tests-kubelet.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| HarnessError::io("open", &path, e))?;
    // SAFETY: flock on a descriptor this function owns; blocks until the
    // node of another test (or test process) is dropped.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(HarnessError::io(
            "lock",
            &path,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(file)
}

impl KubeNode {
    /// Starts containerd of `line`, etcd, the API server and the kubelet,
    /// and waits until the Node is registered. Fails with what is missing
    /// when the machine cannot run them.
    pub fn start(line: ContainerdLine, options: KubeOptions) -> Result<KubeNode, HarnessError> {
        let bins = require_kubernetes()?;
        let lock = node_lock()?;
        let containerd = Containerd::start_line(line)?;
        let dir = containerd.dir().join("kube");
        for sub in ["etcd", "pki", "kubelet", "pod-logs"] {
            fs::create_dir_all(dir.join(sub))
                .map_err(|e| HarnessError::io("create", &dir.join(sub), e))?;
        }
        let ports = Ports {
            etcd_client: free_port()?,
            etcd_peer: free_port()?,
            apiserver: free_port()?,
            kubelet: free_port()?,
            kubelet_healthz: free_port()?,
        };
        let mut node = KubeNode {
            bins,
            options,
            dir,
            ports,
            etcd: None,
            apiserver: None,
            kubelet: None,
            sysctls: Vec::new(),
            made_host_dirs: Vec::new(),
            containerd: Some(containerd),
            _lock: lock,
        };
        node.save_machine_state();
        node.write_files()?;
        node.make_cgroup_root()?;
        node.start_etcd()?;
        node.start_apiserver()?;
        node.start_kubelet()?;
        Ok(node)
    }

    /// The containerd the kubelet runs pods on.
    pub fn containerd(&self) -> &Containerd {
        self.containerd.as_ref().expect("containerd runs")
    }

    /// The admin's kubeconfig (what `kubectl` here uses).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// The kubelet's root directory (its `cpu_manager_state`, ...).
    pub fn kubelet_root(&self) -> PathBuf {
        self.dir.join("kubelet")
    }

    /// Runs kubectl with `args` on this cluster; its output whatever the
    /// exit status.
    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(&self.bins.kubectl);
        cmd.arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("run kubectl");
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("kubectl's stdin");
            pipe.write_all(input.as_bytes())
                .expect("write kubectl's stdin");
        }
        child.wait_with_output().expect("wait for kubectl")
    }

    /// kubectl's stdout, or an error with its exit status and stderr.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, HarnessError> {
        self.kubectl_with(args, None)
    }

    /// [`KubeNode::kubectl`] with `stdin` as its input (`-f -`).
    pub fn kubectl_with(&self, args: &[&str], stdin: Option<&str>) -> Result<String, HarnessError> {
        let out = self.kubectl_output(args, stdin);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(HarnessError::new(format!(
                "kubectl {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> Result<String, HarnessError> {
        self.kubectl_with(&["apply", "-f", "-"], Some(yaml))
    }

    /// The object `kubectl get KIND NAME -o json` prints, if it exists.
    pub fn get_json(&self, args: &[&str]) -> Option<serde_json::Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let text = self.kubectl(&a).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Waits up to `timeout` until `ok` gives `Some`; the error names
    /// `what`.
    pub fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut ok: impl FnMut() -> Option<T>,
    ) -> Result<T, HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = ok() {
                return Ok(v);
            }
            if Instant::now() > deadline {
                return Err(HarnessError::new(format!(
                    "not within {timeout:?}: {what}; the kubelet's log ends:\n{}",
                    tail(&self.log("kubelet"), 25)
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A component's log so far (`etcd`, `apiserver`, `kubelet`).
    pub fn log(&self, component: &str) -> String {
        fs::read_to_string(self.dir.join(format!("{component}.log"))).unwrap_or_default()
    }

    /// The running containers (init, sidecar and app) of every pod in
    /// `namespace`, from one `kubectl get pods` (their ids and cpuset
    /// cgroups).
    pub fn running_containers(&self, namespace: &str) -> Vec<RunningContainer> {
        let Some(list) = self.get_json(&["pods", "-n", namespace]) else {
            return Vec::new();
        };
        let Some(pods) = list["items"].as_array() else {
            return Vec::new();
        };
        pods.iter()
            .flat_map(|p| {
                ["initContainerStatuses", "containerStatuses"]
                    .into_iter()
                    .flat_map(move |key| p["status"][key].as_array().into_iter().flatten())
                    .filter_map(move |c| self.running_container(p, c["name"].as_str()?))
            })
            .collect()
    }

    /// Container `container` of the pod object `pod` when it runs: its
    /// id, and its cgroup in the cpuset hierarchy by the kubelet's
    /// cgroupfs layout.
    fn running_container(
        &self,
        pod: &serde_json::Value,
        container: &str,
    ) -> Option<RunningContainer> {
        let uid = pod["metadata"]["uid"].as_str()?;
        let qos = match pod["status"]["qosClass"].as_str()? {
            "Guaranteed" => "",
            "Burstable" => "burstable/",
            _ => "besteffort/",
        };
        let id = ["initContainerStatuses", "containerStatuses"]
            .into_iter()
            .flat_map(|key| pod["status"][key].as_array().into_iter().flatten())
            .find(|c| c["name"] == container && c["state"]["running"].is_object())?["containerID"]
            .as_str()?
            .split_once("://")?
            .1
            .to_owned();
        let root = self.containerd().cgroup_root().trim_start_matches('/');
        let cgroup = cpuset_hierarchy()?.join(format!("{root}/kubepods/{qos}pod{uid}/{id}"));
        cgroup.is_dir().then(|| RunningContainer {
            pod: pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            container: container.to_owned(),
            id,
            cgroup,
        })
    }

    /// Container `container` of pod `namespace/pod` when it runs.
    pub fn container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Option<RunningContainer> {
        let p = self.get_json(&["pod", pod, "-n", namespace])?;
        self.running_container(&p, container)
    }

    /// What a running container may use: [`RunningContainer::cpus`].
    pub fn container_cpus(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Option<(String, String, String)> {
        self.container(namespace, pod, container)?.cpus()
    }

    /// A running container's CFS quota from its real cgroup:
    /// `cpu.cfs_quota_us` on cgroup v1 (`-1`: none), `cpu.max` on v2
    /// (`max 100000`: none).
    pub fn container_cfs_quota(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Option<String> {
        let dir = self.container(namespace, pod, container)?.cgroup;
        let file = if dir.starts_with("/sys/fs/cgroup/cpuset") {
            let rel = dir.strip_prefix("/sys/fs/cgroup/cpuset").ok()?;
            ["cpu", "cpu,cpuacct", "cpuacct,cpu"]
                .iter()
                .map(|h| {
                    Path::new("/sys/fs/cgroup")
                        .join(h)
                        .join(rel)
                        .join("cpu.cfs_quota_us")
                })
                .find(|f| f.is_file())?
        } else {
            dir.join("cpu.max")
        };
        fs::read_to_string(file).ok().map(|v| v.trim().to_owned())
    }

    /// Stops the kubelet (SIGTERM, as a service manager would) and starts
    /// it again; pods keep running.
    pub fn restart_kubelet(&mut self) -> Result<(), HarnessError> {
        stop(self.kubelet.take());
        self.start_kubelet()
    }

    /// Stops containerd (SIGTERM) and starts it again on the same state;
    /// containers keep running in their shims.
    pub fn restart_containerd(&mut self) -> Result<(), HarnessError> {
        self.containerd.as_mut().expect("containerd runs").restart()
    }

    fn save_machine_state(&mut self) {
        for s in SYSCTLS {
            if let Ok(v) = fs::read_to_string(s) {
                self.sysctls.push((PathBuf::from(s), v.trim().to_owned()));
            }
        }
        for d in HOST_DIRS {
            // The highest ancestor that does not exist yet is what the
            // kubelet will create.
            let mut top = None;
            let mut p = Path::new(d);
            while !p.exists() {
                top = Some(p.to_path_buf());
                match p.parent() {
                    Some(parent) => p = parent,
                    None => break,
                }
            }
            if let Some(t) = top {
                self.made_host_dirs.push(t);
            }
        }
    }

    fn write_files(&self) -> Result<(), HarnessError> {
        let pki = self.dir.join("pki");
        for args in [
            vec!["genrsa", "-out", "sa.key", "2048"],
            vec!["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"],
        ] {
            let out = Command::new("openssl")
                .args(&args)
                .current_dir(&pki)
                .output()
                .map_err(|e| HarnessError::new(format!("cannot run openssl: {e}")))?;
            if !out.status.success() {
                return Err(HarnessError::new(format!(
                    "openssl {} failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
        }
        write(
            &self.dir.join("tokens.csv"),
            &format!(
                "admin-token,admin,admin,\"system:masters\"\nkubelet-token,system:node:{NODE_NAME},kubelet,\"system:nodes\"\n"
            ),
        )?;
        for (name, token) in [("admin", "admin-token"), ("kubelet", "kubelet-token")] {
            write(
                &self.dir.join(format!("{name}.kubeconfig")),
                &format!(
                    "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://127.0.0.1:{}\n    insecure-skip-tls-verify: true\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: {name}\n    namespace: default\ncurrent-context: test\n",
                    self.ports.apiserver
                ),
            )?;
        }
        let c = self.containerd();
        write(
            &self.dir.join("kubelet.yaml"),
            &format!(
                r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {port}
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
readOnlyPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://{socket}
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
cgroupsPerQOS: true
# topomgr is the node's CPU, memory and topology manager.
cpuManagerPolicy: none
memoryManagerPolicy: None
topologyManagerPolicy: none
systemReserved:
  cpu: "{reserved}"
failSwapOn: false
failCgroupV1: false
podLogsDir: {logs}
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
serializeImagePulls: false
"#,
                port = self.ports.kubelet,
                healthz = self.ports.kubelet_healthz,
                socket = c.socket().display(),
                cgroup_root = c.cgroup_root(),
                reserved = self.options.system_reserved_cpu,
                logs = self.dir.join("pod-logs").display(),
            ),
        )
    }

    /// The kubelet's cgroup root in every v1 hierarchy (the cpuset one with
    /// its CPUs and memory nodes filled in from the root).
    fn make_cgroup_root(&self) -> Result<(), HarnessError> {
        let root = self.containerd().cgroup_root().trim_start_matches('/');
        for h in cleanup::cgroup_hierarchies() {
            let d = h.join(root);
            fs::create_dir_all(&d).map_err(|e| HarnessError::io("create", &d, e))?;
            for f in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(v) = fs::read_to_string(h.join(f)) {
                    if d.join(f).exists() {
                        fs::write(d.join(f), v.trim())
                            .map_err(|e| HarnessError::io("write", &d.join(f), e))?;
                    }
                }
            }
        }
        Ok(())
    }

    fn spawn(&self, component: &str, bin: &Path, args: &[String]) -> Result<Child, HarnessError> {
        let log_path = self.dir.join(format!("{component}.log"));
        let (log, log2) = cleanup::log_outputs(&log_path)?;
        // containerd's shim and runc are found on PATH by the kubelet's
        // helpers as by containerd.
        Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| HarnessError::io("start", bin, e))
    }

    /// Waits until `ready` holds, failing early when `child` exits.
    fn wait_ready(
        &mut self,
        component: &str,
        mut ready: impl FnMut(&KubeNode) -> bool,
    ) -> Result<(), HarnessError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if ready(self) {
                return Ok(());
            }
            let child = match component {
                "etcd" => self.etcd.as_mut(),
                "apiserver" => self.apiserver.as_mut(),
                _ => self.kubelet.as_mut(),
            };
            if let Some(status) = child.and_then(|c| c.try_wait().ok().flatten()) {
                return Err(HarnessError::new(format!(
                    "{component} exited ({status}) before it was ready; its log ends:\n{}",
                    tail(&self.log(component), 40)
                )));
            }
            if Instant::now() > deadline {
                return Err(HarnessError::new(format!(
                    "{component} was not ready within {READY_TIMEOUT:?}; its log ends:\n{}",
                    tail(&self.log(component), 40)
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn start_etcd(&mut self) -> Result<(), HarnessError> {
        let (c, p) = (self.ports.etcd_client, self.ports.etcd_peer);
        let args = vec![
            "--name=test".to_owned(),
            format!("--data-dir={}", self.dir.join("etcd").display()),
            format!("--listen-client-urls=http://127.0.0.1:{c}"),
            format!("--advertise-client-urls=http://127.0.0.1:{c}"),
            format!("--listen-peer-urls=http://127.0.0.1:{p}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{p}"),
            format!("--initial-cluster=test=http://127.0.0.1:{p}"),
            "--log-level=warn".to_owned(),
        ];
        self.etcd = Some(self.spawn("etcd", &self.bins.etcd.clone(), &args)?);
        self.wait_ready("etcd", |n| {
            std::net::TcpStream::connect(("127.0.0.1", n.ports.etcd_client)).is_ok()
        })
    }

    fn start_apiserver(&mut self) -> Result<(), HarnessError> {
        let pki = self.dir.join("pki");
        let args = vec![
            format!("--etcd-servers=http://127.0.0.1:{}", self.ports.etcd_client),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", self.ports.apiserver),
            format!("--cert-dir={}", pki.display()),
            format!(
                "--service-account-key-file={}",
                pki.join("sa.pub").display()
            ),
            format!(
                "--service-account-signing-key-file={}",
                pki.join("sa.key").display()
            ),
            "--service-account-issuer=https://kubernetes.default.svc".to_owned(),
            format!(
                "--token-auth-file={}",
                self.dir.join("tokens.csv").display()
            ),
            "--authorization-mode=Node,RBAC".to_owned(),
            // No controller manager makes service accounts.
            "--disable-admission-plugins=ServiceAccount".to_owned(),
            "--service-cluster-ip-range=10.96.0.0/24".to_owned(),
            // Endpoints may not name a loopback address.
            "--endpoint-reconciler-type=none".to_owned(),
            "--allow-privileged=true".to_owned(),
            "--kubelet-preferred-address-types=InternalIP,Hostname".to_owned(),
            "--v=1".to_owned(),
        ];
        self.apiserver = Some(self.spawn("apiserver", &self.bins.apiserver.clone(), &args)?);
        self.wait_ready("apiserver", |n| {
            n.kubectl_output(&["get", "--raw=/readyz"], None)
                .status
                .success()
        })
    }

    fn start_kubelet(&mut self) -> Result<(), HarnessError> {
        let args = vec![
            format!("--config={}", self.dir.join("kubelet.yaml").display()),
            format!(
                "--kubeconfig={}",
                self.dir.join("kubelet.kubeconfig").display()
            ),
            format!("--root-dir={}", self.kubelet_root().display()),
            format!("--hostname-override={NODE_NAME}"),
            // No --node-ip: a kubelet refuses a loopback one, and the
            // API server never connects to this one (no logs, no exec).
            "--v=2".to_owned(),
        ];
        self.kubelet = Some(self.spawn("kubelet", &self.bins.kubelet.clone(), &args)?);
        self.wait_ready("kubelet", |n| {
            n.kubectl_output(&["get", "node", NODE_NAME], None)
                .status
                .success()
                && std::net::TcpStream::connect(("127.0.0.1", n.ports.kubelet)).is_ok()
        })
    }
}

/// SIGTERM, then SIGKILL after 10 s.
fn stop(child: Option<Child>) {
    if let Some(c) = child {
        cleanup::terminate(c);
    }
}

impl Drop for KubeNode {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for c in ["kubelet", "apiserver"] {
                eprintln!(
                    "runtime-harness: the test failed; the last lines of the {c}'s log:\n{}",
                    tail(&self.log(c), 40)
                );
            }
        }
        stop(self.kubelet.take());
        stop(self.apiserver.take());
        stop(self.etcd.take());
        for (path, value) in &self.sysctls {
            if let Err(e) = fs::write(path, value) {
                eprintln!(
                    "runtime-harness cleanup: cannot restore {} to {value}: {e}",
                    path.display()
                );
            }
        }
        for m in cleanup::mounts_under(&self.dir) {
            if let Err(e) = cleanup::detach(&m) {
                eprintln!("runtime-harness cleanup: {e}");
            }
        }
        for d in &self.made_host_dirs {
            let _ = fs::remove_dir_all(d);
        }
        // The containerd's drop kills the pods and removes the cgroup root
        // and the directory.
        self.containerd.take();
    }
}

/// A cgroup v1 cpuset hierarchy's mount point, or the v2 tree.
fn cpuset_hierarchy() -> Option<PathBuf> {
    let v1 = PathBuf::from("/sys/fs/cgroup/cpuset");
    if v1.join("cpuset.cpus").is_file() {
        return Some(v1);
    }
    let v2 = PathBuf::from("/sys/fs/cgroup");
    v2.join("cgroup.controllers").is_file().then_some(v2)
}
