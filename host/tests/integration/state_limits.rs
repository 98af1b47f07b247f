//! Issue 37 item 8: the state a node holds is bounded. Through the
//! daemon's HTTP API, an admission past `[limits]` is a `200` with
//! `"admitted": false`, the reason and a message naming the limit and its
//! config key; nothing is held for it, and a release makes room again. A
//! SIGHUP applies new limits.

use crate::common;
use crate::daemon::Daemon;

use std::fs;

use topomgr_node::api::{Admissions, PodList};

fn pod(uid: &str, containers: usize) -> String {
    let list: String = (0..containers)
        .map(|i| format!("  - name: c{i}\n"))
        .collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {uid}\n  namespace: t\n  uid: {uid}\nspec:\n  containers:\n{list}"
    )
}

fn admit(c: &mut topomgr_client::http::Client, yaml: &str) -> topomgr_node::api::Admission {
    let r = c.admit(yaml).unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let mut a: Admissions = r.parse().unwrap();
    a.pods.remove(0)
}

fn held(c: &mut topomgr_client::http::Client) -> Vec<String> {
    let listed: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    listed.pods.into_iter().map(|p| p.uid).collect()
}

#[test]
fn admissions_past_the_limits_are_refused_through_the_api_naming_the_key() {
    let dir = common::widgets_config("state-limits");
    let config = dir.join("topomgr.toml");
    let base = fs::read_to_string(&config).unwrap();
    fs::write(
        &config,
        format!("{base}[limits]\nmax_pods = 2\nmax_containers_per_pod = 3\n"),
    )
    .unwrap();
    let socket = dir.join("t.sock");
    let d = Daemon::start(&config, &socket);
    let mut c = d.client();
    assert!(admit(&mut c, &pod("p0", 1)).admitted);
    assert!(admit(&mut c, &pod("p1", 3)).admitted);

    let refused = admit(&mut c, &pod("p2", 1));
    assert!(!refused.admitted);
    assert_eq!(refused.reason.as_deref(), Some("OutOfpods"));
    assert_eq!(
        refused.message.as_deref(),
        Some("Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2 (topomgr's [limits] max_pods; release pods, or raise it in the config)")
    );
    assert_eq!(held(&mut c), ["p0", "p1"], "nothing held for it");

    assert_eq!(c.release("p0").unwrap().status, 200);
    let big = admit(&mut c, &pod("p3", 4));
    assert_eq!(big.reason.as_deref(), Some("TooManyContainers"));
    assert!(
        big.message
            .as_deref()
            .unwrap()
            .contains("the pod has 4 containers, more than the 3 one pod may have (topomgr's [limits] max_containers_per_pod;"),
        "{big:?}"
    );
    let long = admit(&mut c, &pod(&"n".repeat(254), 1));
    assert_eq!(long.reason.as_deref(), Some("PodTooLarge"));
    assert!(admit(&mut c, &pod("p2", 1)).admitted, "a release made room");
    assert_eq!(held(&mut c), ["p1", "p2"]);

    // New limits with SIGHUP: one more pod fits.
    fs::write(&config, format!("{base}[limits]\nmax_pods = 3\n")).unwrap();
    let hup = std::process::Command::new("kill")
        .arg("-HUP")
        .arg(d.child.id().to_string())
        .status()
        .unwrap();
    assert!(hup.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let a = admit(&mut c, &pod("p4", 1));
        if a.admitted {
            break;
        }
        assert_eq!(a.reason.as_deref(), Some("OutOfpods"));
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP did not apply the limits"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(held(&mut c), ["p1", "p2", "p4"]);
    d.stop();
}
