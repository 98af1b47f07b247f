//! `topomgr serve` as a child process for the end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use topomgr::daemon::client::Client;

/// A running daemon; killed when dropped.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub config: PathBuf,
}

impl Daemon {
    pub fn start(config: &Path, socket: &Path) -> Daemon {
        Self::start_with(config, socket, &[])
    }

    /// [`Daemon::start`] with more arguments of `topomgr serve`.
    pub fn start_with(config: &Path, socket: &Path, args: &[&Path]) -> Daemon {
        let child = Command::new(super::topomgr_bin())
            .arg("--config")
            .arg(config)
            .arg("serve")
            .arg("--socket")
            .arg(socket)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start topomgr serve");
        let d = Daemon {
            child,
            socket: socket.to_path_buf(),
            config: config.to_path_buf(),
        };
        d.wait_ready();
        d
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if Client::new(&self.socket)
                .get("/v1/health")
                .is_ok_and(|r| r.status == 200)
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("daemon on {} did not become ready", self.socket.display());
    }

    pub fn client(&self) -> Client {
        Client::new(&self.socket)
    }

    /// SIGTERM and wait; returns stderr.
    pub fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let out = std::mem::replace(
            &mut self.child,
            Command::new("true").spawn().expect("spawn true"),
        )
        .wait_with_output()
        .expect("wait for daemon");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
