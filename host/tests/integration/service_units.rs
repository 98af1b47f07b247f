//! The systemd units under `packaging/`: the daemon's and the example of a
//! service placed by topomgr (`packaging/examples/numa-worker.service`) pass
//! `systemd-analyze verify` (systemd is not PID 1 here: the units are
//! verified, not started), with `/usr/bin/topomgr` pointing at the binary
//! under test; the example is ordered after the daemon and runs through it.
//! What its command line does is run by
//! `run_daemon::the_example_services_command_line_runs_through_the_daemon`.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::common;

/// `systemd-analyze verify` of `units` (files in `dir`): its status and
/// what it printed.
fn verify(dir: &Path, units: &[&str]) -> (bool, String) {
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(units.iter().map(|u| format!("./{u}")))
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "systemd-analyze cannot be run ({e}): install it (Debian: apt-get install systemd)"
            )
        });
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
#[ignore = "needs systemd-analyze (Debian: systemd)"]
fn the_example_service_and_the_daemons_unit_pass_systemd_analyze_verify() {
    let root = common::workspace_root();
    let daemon = fs::read_to_string(root.join("packaging/topomgr.service")).unwrap();
    let example = fs::read_to_string(root.join("packaging/examples/numa-worker.service")).unwrap();

    // The example is placed by the daemon: ordered after it, needing it,
    // and run through it.
    let lines: Vec<&str> = example.lines().collect();
    for want in [
        "Requires=topomgr.service",
        "After=topomgr.service",
        "KillMode=mixed",
    ] {
        assert!(lines.contains(&want), "no {want} in the example unit");
    }
    let exec = lines
        .iter()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart");
    assert!(
        exec.starts_with("/usr/bin/topomgr --config /etc/topomgr/topomgr.toml run --socket /run/topomgr/topomgr.sock "),
        "{exec}"
    );

    let dir = common::scratch_dir("service-units");
    let binary = common::topomgr_bin().display().to_string();
    fs::write(
        dir.join("topomgr.service"),
        daemon.replace("/usr/bin/topomgr", &binary),
    )
    .unwrap();
    fs::write(
        dir.join("numa-worker.service"),
        example.replace("/usr/bin/topomgr", &binary),
    )
    .unwrap();
    let (ok, said) = verify(&dir, &["topomgr.service", "numa-worker.service"]);
    assert!(ok, "{said}");
    assert_eq!(said, "", "systemd-analyze warned");

    // It does find what is wrong: a key it does not know, a binary that is
    // not there.
    fs::write(
        dir.join("numa-worker.service"),
        example
            .replace("/usr/bin/topomgr", &binary)
            .replace("After=topomgr.service", "Afterr=topomgr.service"),
    )
    .unwrap();
    let (_, said) = verify(&dir, &["numa-worker.service"]);
    assert!(
        said.contains("Unknown key 'Afterr' in section [Unit]"),
        "{said}"
    );
    let missing = dir.join("missing/topomgr").display().to_string();
    fs::write(
        dir.join("numa-worker.service"),
        example.replace("/usr/bin/topomgr", &missing),
    )
    .unwrap();
    let (ok, said) = verify(&dir, &["numa-worker.service"]);
    assert!(
        !ok && said.contains(&format!("Command {missing} is not executable")),
        "{said}"
    );
}
