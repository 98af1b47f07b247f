//! A damaged state directory, end to end with the real binary: the daemon
//! and the one-shot commands refuse it naming the file, the byte offset and
//! the record, and the verb that repairs it; `topomgr state check` finds the
//! damage; `topomgr state recover` is refused while a daemon holds the
//! directory, then keeps what is intact after a backup copy, says what it
//! dropped, and the daemon starts again without handing anything out twice.

use crate::common;
use crate::daemon::Daemon;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;

use topomgr_node::api::{Admission, Admissions, PodList};
use topomgr_node::persist::journal;

fn pod(uid: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {uid}\n  namespace: t\n  uid: {uid}\nspec:\n  containers:\n  - name: app\n    resources:\n      limits:\n        example.com/widget: \"1\"\n"
    )
}

fn widgets(p: &Admission) -> Vec<String> {
    p.containers[0].devices["example.com/widget"].clone()
}

/// `topomgr serve` on a state it refuses: exits at once with status 2;
/// returns stderr.
fn serve_refused(config: &Path, socket: &Path) -> String {
    let out = Command::new(common::topomgr_bin())
        .arg("--config")
        .arg(config)
        .args(["serve", "--socket"])
        .arg(socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_damaged_journal_is_refused_everywhere_and_recover_keeps_what_is_intact() {
    let dir = common::widgets_config("state-damaged");
    let config = dir.join("topomgr.toml");
    let socket = dir.join("t.sock");
    let state = dir.join("state");
    let d = Daemon::start(&config, &socket);
    let mut c = d.client();
    let mut held = Vec::new();
    for uid in ["p0", "p1", "p2", "p3", "p4", "p5", "p6"] {
        let r = c.admit(&pod(uid)).unwrap();
        assert_eq!(r.status, 200, "{}", r.error_message());
        let mut a: Admissions = r.parse().unwrap();
        assert!(a.pods[0].admitted);
        held.push(a.pods.remove(0));
    }
    assert_eq!(c.release("p6").unwrap().status, 200);
    // `state recover` is refused while the daemon holds the directory,
    // saying the lock's refusal once.
    let (code, _, err) = common::topomgr(
        &dir,
        &["state", "recover", "--state-dir", state.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err,
        format!(
            "topomgr: error: state recover refuses to change {0}: state directory {0} belongs to {1} for as long as it runs; topomgr state recover --state-dir never waits for it: stop that daemon first: a state directory in use is never recovered under it (lock {2}); stop the daemon (or wait for the command) first\n",
            state.display(),
            common::daemon_named(&config, &socket, &state, d.child.id()),
            state.join("topomgr.lock").display(),
        )
    );
    d.stop();

    // One changed byte in the payload of record 2 of the journal.
    let path = state.join(journal::JOURNAL_FILE);
    let good = fs::read(&path).unwrap();
    let records = journal::parse(&path, &good).unwrap().records;
    assert!(records.len() >= 4, "{} records", records.len());
    let second = &records[1];
    let mut bad = good.clone();
    bad[second.offset as usize + 102 + 30] ^= 0x01;
    fs::write(&path, &bad).unwrap();
    let snapshot = fs::read(state.join("state.ckpt")).unwrap();
    let refusal = format!(
        "{}: record {} at byte {} is damaged: its payload does not match its SHA-256; records {}-{} after it are intact, so this is not a torn write. Nothing was changed; `topomgr state check --state-dir {s}` shows what the directory holds, and `topomgr state recover --state-dir {s}` keeps the snapshot and record 1, after a backup copy, and lists what it drops",
        path.display(),
        second.seq,
        second.offset,
        records[2].seq,
        records.last().unwrap().seq,
        s = state.display()
    );

    // The daemon and a one-shot command refuse it; nothing is written.
    let err = serve_refused(&config, &socket);
    assert_eq!(err.matches(&refusal).count(), 1, "said once: {err}");
    let newcomer = dir.join("newcomer.yaml");
    fs::write(&newcomer, pod("newcomer")).unwrap();
    let (code, _, err) = common::topomgr(
        &dir,
        &[
            "admit",
            "--state-dir",
            state.to_str().unwrap(),
            newcomer.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2);
    assert_eq!(err.matches(&refusal).count(), 1, "said once: {err}");
    assert_eq!(fs::read(&path).unwrap(), bad);
    assert_eq!(fs::read(state.join("state.ckpt")).unwrap(), snapshot);

    // `state check` finds it: exit status 1.
    let (code, out, _) = common::topomgr(
        &dir,
        &["state", "check", "--state-dir", state.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "  DAMAGE at byte {} (record 2): its payload does not match its SHA-256; intact records after it: {}",
            second.offset,
            records.len() - 2
        )),
        "{out}"
    );
    assert!(
        out.contains("refused: a daemon or command refuses to start here"),
        "{out}"
    );

    // `state recover`: backup, keep the snapshot and record 1, list the rest.
    let backup = dir.join("backup");
    let (code, out, err) = common::topomgr(
        &dir,
        &[
            "state",
            "recover",
            "--state-dir",
            state.to_str().unwrap(),
            "--backup-dir",
            backup.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(fs::read(backup.join(journal::JOURNAL_FILE)).unwrap(), bad);
    assert_eq!(fs::read(backup.join("state.ckpt")).unwrap(), snapshot);
    assert!(out.contains(&format!("state.journal record 2 at byte {}: unreadable (its payload does not match its SHA-256)", second.offset)), "{out}");
    assert!(
        out.contains(&format!(
            "state.journal record 3 at byte {}: intact: admitted t/",
            records[2].offset
        )),
        "{out}"
    );
    assert!(
        out.contains("forgotten (admitted by what was dropped"),
        "{out}"
    );
    let (code, out, _) = common::topomgr(
        &dir,
        &["state", "check", "--state-dir", state.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");

    // The daemon starts on what was kept; what it lists holds its widgets,
    // the others are free again and handed out once each.
    let d = Daemon::start(&config, &socket);
    let mut c = d.client();
    let listed: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    let kept: Vec<&str> = listed.pods.iter().map(|p| p.uid.as_str()).collect();
    assert!(kept.len() < 6 && kept.contains(&"p0"), "{kept:?}");
    for p in &listed.pods {
        let before = held.iter().find(|h| h.uid == p.uid).unwrap();
        assert_eq!(widgets(p), widgets(before));
    }
    let mut taken: BTreeSet<String> = listed.pods.iter().flat_map(widgets).collect();
    for i in 0..8 - taken.len() {
        let r = c.admit(&pod(&format!("new-{i}"))).unwrap();
        let a: Admissions = r.parse().unwrap();
        assert!(a.pods[0].admitted, "{a:?}");
        for w in widgets(&a.pods[0]) {
            assert!(taken.insert(w.clone()), "widget {w} handed out twice");
        }
    }
    assert_eq!(taken.len(), 8);
    d.stop();
}

/// Issue 37 item 6: an acknowledged release whose record was zeroed, and a
/// deleted journal, used to be accepted (the release came back, the
/// admissions vanished) with a WARN at most; now the daemon refuses to
/// start naming the file, the offset, the record and `state recover`,
/// `state check` exits 1, and the untouched directory starts as it was.
#[test]
fn acknowledged_records_zeroed_or_a_deleted_journal_are_refused_not_dropped() {
    let dir = common::widgets_config("state-acked");
    let config = dir.join("topomgr.toml");
    let socket = dir.join("t.sock");
    let state = dir.join("state");
    let s = state.to_str().unwrap();
    let d = Daemon::start(&config, &socket);
    let mut c = d.client();
    for uid in ["p0", "p1", "p2"] {
        assert_eq!(c.admit(&pod(uid)).unwrap().status, 200);
    }
    assert_eq!(c.release("p1").unwrap().status, 200);
    d.stop();

    let path = state.join(journal::JOURNAL_FILE);
    let good = fs::read(&path).unwrap();
    let records = journal::parse(&path, &good).unwrap().records;
    let last = records.last().unwrap().clone();
    // The acknowledged release's record written as zeros.
    let mut zeroed = good.clone();
    zeroed[last.offset as usize..].fill(0);
    fs::write(&path, &zeroed).unwrap();
    let err = serve_refused(&config, &socket);
    assert!(
        err.contains(&format!(
            "{}: record {} at byte {} is cut short or zeroed ({} bytes to the end of the file), but state.ack records that records 1-{} of generation ",
            path.display(),
            last.seq,
            last.offset,
            good.len() as u64 - last.offset,
            last.seq
        )) && err.contains(&format!("it is not a torn write. Nothing was changed; `topomgr state check --state-dir {s}` shows what the directory holds, and `topomgr state recover --state-dir {s}` keeps the snapshot")),
        "{err}"
    );
    assert_eq!(fs::read(&path).unwrap(), zeroed, "nothing was changed");
    let (code, out, _) = common::topomgr(&dir, &["state", "check", "--state-dir", s]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "acknowledgements state.ack: generation 1, records 1-{} acknowledged (to byte {})",
            last.seq,
            good.len()
        )),
        "{out}"
    );

    // The journal deleted.
    fs::remove_file(&path).unwrap();
    let err = serve_refused(&config, &socket);
    assert!(
        err.contains(&format!(
            "{}: the journal is missing, but state.ack records that records 1-{} of generation 1 were acknowledged",
            path.display(),
            last.seq
        )),
        "{err}"
    );

    // Untouched, it starts with the release kept.
    fs::write(&path, &good).unwrap();
    let d = Daemon::start(&config, &socket);
    let mut c = d.client();
    let listed: PodList = c.get("/v1/pods").unwrap().parse().unwrap();
    let kept: Vec<&str> = listed.pods.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(kept, ["p0", "p2"]);
    d.stop();
}
