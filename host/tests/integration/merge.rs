//! `topomgr merge`: the JSON contract of docs/cli.md, run as a user would.

use std::process::Command;

use crate::common;

fn merge(input: &str) -> (i32, String, String) {
    let out = common::run_topomgr_stdin(&["merge"], input);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap().trim().to_string(),
        String::from_utf8(out.stderr).unwrap().trim().to_string(),
    )
}

fn ok(input: &str) -> String {
    let (code, out, err) = merge(input);
    assert_eq!(code, 0, "stderr: {err}");
    out
}

#[test]
fn spec_example() {
    // docs/cli.md's example asks for prefer-closest-numa-nodes with
    // "distances": null; like the kubelet, a policy other than `none` cannot
    // be created without the distance table.
    let spec = r#"{"numa_nodes": [0, 1], "distances": null,
        "policy": "best-effort", "options": {"prefer-closest-numa-nodes": "true"},
        "providers": [ {"cpu": [{"affinity": [0], "preferred": true}], "gpu": null}, null ]}"#;
    let (code, out, err) = merge(spec);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        "topomgr: error: cannot create policy: prefer-closest-numa-nodes needs the NUMA \
         distance table and there is none (sysfs nodeN/distance files, or \"distances\" in merge input); provide it or set the option to false"
    );
    // With the distances, the documented answer.
    let out = ok(&spec.replace(
        r#""distances": null"#,
        r#""distances": {"0": [10, 20], "1": [20, 10]}"#,
    ));
    assert_eq!(out, r#"{"affinity":[0],"preferred":true,"admit":true}"#);
}

/// Policy creation in the kubelet's order: `none` looks at neither options
/// nor distances; every other policy, single-numa-node included, needs the
/// distance table when prefer-closest-numa-nodes is true.
#[test]
fn policy_creation_follows_the_kubelet() {
    let input = |policy: &str, options: &str| {
        format!(
            r#"{{"numa_nodes": [0, 1], "policy": "{policy}", "options": {options}, "providers": [{{"cpu": [{{"affinity": [1], "preferred": true}}]}}]}}"#
        )
    };
    for options in [
        r#"{"prefer-closest-numa-nodes": "true"}"#,
        r#"{"unknown-option": "x"}"#,
        r#"{"max-allowable-numa-nodes": "2"}"#,
    ] {
        assert_eq!(
            ok(&input("none", options)),
            r#"{"affinity":null,"preferred":false,"admit":true}"#,
            "{options}"
        );
    }
    for policy in ["best-effort", "restricted", "single-numa-node"] {
        let (code, _, err) = merge(&input(policy, r#"{"prefer-closest-numa-nodes": "true"}"#));
        assert_eq!(code, 2, "{policy}");
        assert!(
            err.contains("prefer-closest-numa-nodes needs the NUMA distance table"),
            "{policy}: {err}"
        );
        assert_eq!(
            ok(&input(policy, r#"{"prefer-closest-numa-nodes": "false"}"#)),
            r#"{"affinity":[1],"preferred":true,"admit":true}"#,
            "{policy}"
        );
    }
    // Options are checked before the policy name.
    let (code, _, err) = merge(&input("strict", r#"{"unknown-option": "x"}"#));
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown Topology Manager Policy option: \"unknown-option\""),
        "{err}"
    );
}

#[test]
fn kubelet_documentation_cross_product_example() {
    // cpu offers {0}, {1} preferred and {0,1}; the GPU only {0} preferred or {0,1}.
    let input = r#"{"numa_nodes": [0, 1], "policy": "restricted", "providers": [
        {"cpu": [{"affinity": [0], "preferred": true}, {"affinity": [1], "preferred": true},
                 {"affinity": [0, 1], "preferred": false}]},
        {"nvidia.com/gpu": [{"affinity": [0], "preferred": true}, {"affinity": [0, 1], "preferred": false}]}]}"#;
    assert_eq!(
        ok(input),
        r#"{"affinity":[0],"preferred":true,"admit":true}"#
    );
}

#[test]
fn null_empty_and_no_map_are_distinct() {
    let base = |p: &str, policy: &str| {
        format!(r#"{{"numa_nodes": [0, 1], "policy": "{policy}", "providers": [{p}]}}"#)
    };
    // No map: any, preferred.
    assert_eq!(
        ok(&base("null", "restricted")),
        r#"{"affinity":[0,1],"preferred":true,"admit":true}"#
    );
    assert_eq!(
        ok(&base("{}", "restricted")),
        r#"{"affinity":[0,1],"preferred":true,"admit":true}"#
    );
    // Resource -> null: no preference.
    assert_eq!(
        ok(&base(r#"{"cpu": null}"#, "restricted")),
        r#"{"affinity":[0,1],"preferred":true,"admit":true}"#
    );
    // Resource -> []: cannot be satisfied: not preferred, rejected by restricted.
    assert_eq!(
        ok(&base(r#"{"cpu": []}"#, "restricted")),
        r#"{"affinity":[0,1],"preferred":false,"admit":false}"#
    );
    assert_eq!(
        ok(&base(r#"{"cpu": []}"#, "best-effort")),
        r#"{"affinity":[0,1],"preferred":false,"admit":true}"#
    );
}

#[test]
fn single_numa_node_whole_machine_is_null() {
    let input =
        r#"{"numa_nodes": [0, 1], "policy": "single-numa-node", "providers": [{"cpu": null}]}"#;
    assert_eq!(
        ok(input),
        r#"{"affinity":null,"preferred":true,"admit":true}"#
    );
    let input = r#"{"numa_nodes": [0, 1], "policy": "single-numa-node",
        "providers": [{"cpu": [{"affinity": [0, 1], "preferred": true}]}]}"#;
    assert_eq!(
        ok(input),
        r#"{"affinity":null,"preferred":false,"admit":false}"#
    );
}

#[test]
fn none_policy() {
    let input = r#"{"numa_nodes": [0, 1], "policy": "none", "providers": [{"cpu": []}]}"#;
    assert_eq!(
        ok(input),
        r#"{"affinity":null,"preferred":false,"admit":true}"#
    );
}

#[test]
fn prefer_closest_uses_distances() {
    // Two-node masks only: {0,1} is 21 apart, {0,2} 11 apart.
    let hints =
        r#"[{"affinity": [0, 1], "preferred": true}, {"affinity": [0, 2], "preferred": true}]"#;
    let input = |opt: &str| {
        format!(
            r#"{{"numa_nodes": [0, 1, 2], "distances": {{"0": [10, 21, 11], "1": [21, 10, 21], "2": [11, 21, 10]}},
            "policy": "best-effort", "options": {{"prefer-closest-numa-nodes": "{opt}"}}, "providers": [{{"mem": {hints}}}]}}"#
        )
    };
    assert_eq!(
        ok(&input("true")),
        r#"{"affinity":[0,2],"preferred":true,"admit":true}"#
    );
    assert_eq!(
        ok(&input("false")),
        r#"{"affinity":[0,1],"preferred":true,"admit":true}"#
    );
}

#[test]
fn compact_form_merges() {
    let input = r#"{"numa_nodes": [0, 1, 2, 3], "policy": "restricted", "providers": [
        {"cpu": {"minimal": [[1], [2]], "preferred_width": 1}},
        {"gpu": [{"affinity": [2], "preferred": true}, {"affinity": [2, 3], "preferred": false}]}]}"#;
    assert_eq!(
        ok(input),
        r#"{"affinity":[2],"preferred":true,"admit":true}"#
    );
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let cases = [
        ("not json", "topomgr: error: invalid merge input: expected ident at line 1 column 2"),
        (
            r#"{"numa_nodes": [0], "policy": "strict", "providers": []}"#,
            "topomgr: error: cannot create policy: unknown policy: \"strict\" (expected none, best-effort, restricted or single-numa-node)",
        ),
        (
            r#"{"numa_nodes": [0], "policy": "restricted", "options": {"max-allowable-numa-nodes": "4"}, "providers": []}"#,
            "topomgr: error: cannot create policy: the minimum value of \"max-allowable-numa-nodes\" should not be less than 8 (got 4)",
        ),
        (
            r#"{"numa_nodes": [0, 1], "policy": "restricted", "providers": [{"cpu": [{"affinity": [7], "preferred": true}]}]}"#,
            "topomgr: error: invalid merge input: provider \"providers[0]\" returned hints for resource \"cpu\" naming NUMA node(s) 7, which this machine does not have (its nodes: 0-1)",
        ),
        (
            r#"{"numa_nodes": [0, 256], "policy": "restricted", "providers": []}"#,
            "topomgr: error: invalid merge input: invalid NUMA information: NUMA node id 256 is out of range: topomgr supports node ids 0-255",
        ),
        (
            r#"{"numa_nodes": [0, 1], "distances": {"0": [10, 20]}, "policy": "restricted", "providers": []}"#,
            "topomgr: error: invalid merge input: distances: no row for node 1",
        ),
    ];
    for (input, want) in cases {
        let (code, out, err) = merge(input);
        assert_eq!(code, 2, "input {input}");
        assert_eq!(out, "");
        assert_eq!(err, want);
    }
}

#[test]
fn nine_nodes_need_the_option_raised_only_past_64() {
    let nodes: Vec<String> = (0..9).map(|n| n.to_string()).collect();
    let input = format!(
        r#"{{"numa_nodes": [{}], "policy": "restricted", "providers": [{{"cpu": [{{"affinity": [8], "preferred": true}}]}}]}}"#,
        nodes.join(",")
    );
    assert_eq!(
        ok(&input),
        r#"{"affinity":[8],"preferred":true,"admit":true}"#
    );
}

/// The example of `topomgr merge --help`, run as printed, prints what the
/// help says it prints.
#[test]
fn the_help_example_prints_what_it_says() {
    let out = Command::new(env!("CARGO_BIN_EXE_topomgr"))
        .args(["merge", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let example = help
        .split_once("Example:\n")
        .and_then(|(_, rest)| rest.split_once("\n  prints "))
        .expect("an example in merge --help");
    let printed = example.1.lines().next().unwrap();
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_topomgr"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = Command::new("sh")
        .args(["-c", example.0])
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8(run.stdout).unwrap().trim(), printed);
}
