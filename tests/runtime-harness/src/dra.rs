//! The test DRA driver (`tests/kube/cmd/dra-test-driver`, built by
//! `.ci/install-kubernetes` beside the kubelet) run as a kubelet plugin of
//! a [`KubeNode`]: it registers with the node's kubelet, publishes a
//! ResourceSlice of one device per PCI address it is given (pool: the
//! node's name; devices `dev-0`, `dev-1`, … with the standard
//! `resource.kubernetes.io/pciBusID` attribute), and at
//! NodePrepareResources writes a CDI spec into the node's containerd's
//! CDI directory whose device `<DRIVER>/dev=<claim uid>-<device>` injects
//! `/dev/topomgr-dra-<device>` (char 1:3, /dev/null's numbers), except
//! for the devices it is told to prepare without one. Stopped (SIGTERM)
//! when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::cleanup::{self, tail};
use crate::kube::{kube_dir, KubeNode};
use crate::HarnessError;

/// The driver's name.
pub const DRA_DRIVER: &str = "dra.topomgr.test";

/// A running test DRA driver.
pub struct DraDriver {
    child: Option<Child>,
    log: PathBuf,
}

impl DraDriver {
    /// Starts the driver for `node`, one device per address of `pci`
    /// (those named in `no_cdi` prepared without a CDI device), and waits
    /// (60 s) until the kubelet accepted its registration.
    pub fn start(
        node: &KubeNode,
        pci: &[String],
        no_cdi: &[&str],
    ) -> Result<DraDriver, HarnessError> {
        let bin = kube_dir().join("dra-test-driver");
        if !bin.is_file() {
            return Err(HarnessError::new(format!(
                "this test runs the test DRA driver {}; build it with `sudo .ci/install-kubernetes`",
                bin.display()
            )));
        }
        let log = node.kubeconfig().with_file_name("dra-test-driver.log");
        let (out, err) = cleanup::log_outputs(&log)?;
        let child = Command::new(&bin)
            .arg("-kubeconfig")
            .arg(node.kubeconfig())
            .args(["-node", crate::NODE_NAME, "-driver", DRA_DRIVER])
            .arg("-kubelet-dir")
            .arg(node.kubelet_root())
            .arg("-cdi-dir")
            .arg(node.containerd().cdi_dir())
            .arg("-pci")
            .arg(pci.join(","))
            .arg("-no-cdi")
            .arg(no_cdi.join(","))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| HarnessError::io("start", &bin, e))?;
        let mut driver = DraDriver {
            child: Some(child),
            log,
        };
        let registered = node.wait(
            "the test DRA driver registered with the kubelet",
            Duration::from_secs(60),
            || {
                if let Some(status) = driver
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten())
                {
                    return Some(Err(status));
                }
                let log = driver.log();
                if log.contains("the kubelet refused the registration") {
                    return Some(Ok(false));
                }
                log.contains("registered with the kubelet")
                    .then_some(Ok(true))
            },
        )?;
        match registered {
            Ok(true) => Ok(driver),
            Ok(false) => Err(HarnessError::new(format!(
                "the kubelet refused the test DRA driver; its log ends:\n{}",
                tail(&driver.log(), 20)
            ))),
            Err(status) => Err(HarnessError::new(format!(
                "the test DRA driver exited ({status}); its log ends:\n{}",
                tail(&driver.log(), 20)
            ))),
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for DraDriver {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "runtime-harness: the test failed; the last lines of the DRA driver's log:\n{}",
                tail(&self.log(), 30)
            );
        }
        if let Some(c) = self.child.take() {
            cleanup::terminate(c);
        }
    }
}

/// The PCI addresses of this machine (sysfs `bus/pci/devices`), sorted.
pub fn pci_addresses() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir("/sys/bus/pci/devices")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    out.sort();
    out
}
