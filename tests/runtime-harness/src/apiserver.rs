//! etcd and a kube-apiserver on loopback, no kubelet: what the tests and
//! benches of topomgr's `[kubernetes]` side (the NodeResourceTopology push,
//! Events) run against. Binaries of `.ci/install-kubernetes`
//! ([`require_kubernetes`]); `openssl` makes the service-account keys.
//! Two static tokens: `admin-token` (`system:masters`, the admin
//! kubeconfig `kubectl` uses) and `topomgr-token`
//! (`system:serviceaccount:kube-system:topomgr`, [`ApiServer::kubeconfig`]),
//! so that RBAC applied as a manifest is what topomgr gets.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::kube::require_kubernetes;

/// What the API server needs, said when it is missing.
pub const NEEDS: &str = "needs etcd, kube-apiserver and kubectl of .ci/install-kubernetes (/opt/topomgr-ci/kubernetes/bin, or TOPOMGR_KUBE_DIR) and openssl";

fn free_port() -> u16 {
    crate::ports::free_port().expect("a free loopback port")
}

/// etcd and an API server on loopback, under one scratch directory;
/// both are killed when it is dropped.
pub struct ApiServer {
    /// Its scratch directory (logs, keys, kubeconfigs).
    pub dir: PathBuf,
    bins: crate::KubeBinaries,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    etcd_port: u16,
    port: u16,
}

impl ApiServer {
    /// etcd and kube-apiserver under `dir` (created), ready, with
    /// `manifests` applied (CRDs among them established); panics with what
    /// is missing.
    pub fn start(dir: PathBuf, manifests: &[&Path]) -> ApiServer {
        let bins = require_kubernetes().unwrap_or_else(|e| panic!("{NEEDS}: {e}"));
        let pki = dir.join("pki");
        fs::create_dir_all(&pki).unwrap();
        for args in [
            &["genrsa", "-out", "sa.key", "2048"][..],
            &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"][..],
        ] {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&pki)
                .output();
            assert!(
                out.as_ref().is_ok_and(|o| o.status.success()),
                "{NEEDS}: openssl {args:?}: {out:?}"
            );
        }
        fs::write(
            dir.join("tokens.csv"),
            "admin-token,admin,admin,\"system:masters\"\n\
             topomgr-token,system:serviceaccount:kube-system:topomgr,topomgr,\"system:serviceaccounts\"\n",
        )
        .unwrap();
        let mut s = ApiServer {
            dir,
            bins,
            etcd: None,
            apiserver: None,
            etcd_port: free_port(),
            port: free_port(),
        };
        let peer = free_port();
        let c = s.etcd_port;
        let etcd = s.spawn(
            "etcd",
            &s.bins.etcd.clone(),
            &[
                "--name=test".to_owned(),
                format!("--data-dir={}", s.dir.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{c}"),
                format!("--advertise-client-urls=http://127.0.0.1:{c}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-cluster=test=http://127.0.0.1:{peer}"),
                "--log-level=warn".to_owned(),
            ],
        );
        s.etcd = Some(etcd);
        fs::write(
            s.dir.join("admin.kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:{}\n    insecure-skip-tls-verify: true\nusers:\n- name: admin\n  user:\n    token: admin-token\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: admin\n    namespace: default\ncurrent-context: t\n",
                s.port
            ),
        )
        .unwrap();
        s.start_apiserver();
        // topomgr's own kubeconfig: the API server's self-signed serving
        // certificate chain as its CA, the service account's token.
        fs::write(
            s.dir.join("topomgr.kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: pki/apiserver.crt\nusers:\n- name: topomgr\n  user:\n    token: topomgr-token\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: topomgr\ncurrent-context: t\n",
                s.port
            ),
        )
        .unwrap();
        for f in manifests {
            s.kubectl(&["apply", "-f", &f.to_string_lossy()]);
        }
        let crds = s.kubectl(&["get", "crd", "-o", "name"]);
        for crd in crds.lines().filter(|l| !l.is_empty()) {
            s.kubectl(&["wait", "--for=condition=established", "--timeout=60s", crd]);
        }
        s
    }

    fn spawn(&self, name: &str, bin: &Path, args: &[String]) -> Child {
        let log = fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{NEEDS}: cannot start {}: {e}", bin.display()))
    }

    /// Start the API server (again) and wait until it is ready.
    pub fn start_apiserver(&mut self) {
        let pki = self.dir.join("pki");
        let args = vec![
            format!("--etcd-servers=http://127.0.0.1:{}", self.etcd_port),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", self.port),
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
            "--authorization-mode=RBAC".to_owned(),
            "--disable-admission-plugins=ServiceAccount".to_owned(),
            "--service-cluster-ip-range=10.96.0.0/24".to_owned(),
            "--endpoint-reconciler-type=none".to_owned(),
        ];
        let child = self.spawn("apiserver", &self.bins.apiserver.clone(), &args);
        self.apiserver = Some(child);
        let deadline = Instant::now() + Duration::from_secs(90);
        while !self
            .kubectl_output(&["get", "--raw=/readyz"])
            .status
            .success()
        {
            if let Some(status) = self
                .apiserver
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "kube-apiserver exited ({status}): {}",
                    self.log("apiserver")
                );
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready: {}",
                self.log("apiserver")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kill the API server (as a crash would).
    pub fn stop_apiserver(&mut self) {
        if let Some(mut c) = self.apiserver.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The last 30 lines of `etcd`'s or `apiserver`'s log.
    pub fn log(&self, name: &str) -> String {
        let text = fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// `kubectl` as the admin, waited for.
    pub fn kubectl_output(&self, args: &[&str]) -> Output {
        Command::new(&self.bins.kubectl)
            .arg(format!(
                "--kubeconfig={}",
                self.dir.join("admin.kubeconfig").display()
            ))
            .args(args)
            .output()
            .unwrap()
    }

    /// `kubectl` as the admin; its standard output (panics on failure).
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// topomgr's kubeconfig: the `topomgr` service account's token
    /// (`kube-system:topomgr`), the API server's certificate as its CA.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("topomgr.kubeconfig")
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kube-apiserver's log ends:\n{}", self.log("apiserver"));
        }
        for c in [self.apiserver.take(), self.etcd.take()]
            .into_iter()
            .flatten()
        {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
