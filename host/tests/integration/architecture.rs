//! The architecture invariants of ARCHITECTURE.md, checked on the sources
//! and on `Cargo.lock`:
//! - the modules of each host crate import each other without a cycle;
//! - the engine's dependency tree holds no async runtime, HTTP, command-line,
//!   config-format or error-reporting crate, and no other host crate;
//! - each host crate depends only on the host crates below it (the engine
//!   never on the node or the daemon, the leaves on none);
//! - only the SDK and the plugin loader name `abi_stable` (tests aside).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::common::workspace_root;

/// The host's crates: (package, source directory relative to the workspace).
const HOST_CRATES: [(&str, &str); 11] = [
    ("topomgr", "host/src"),
    ("topomgr-discovery", "host/discovery/src"),
    ("topomgr-cgroup", "host/cgroup/src"),
    ("topomgr-manifest", "host/manifest/src"),
    ("topomgr-engine", "host/engine/src"),
    ("topomgr-node", "host/node/src"),
    ("topomgr-daemon", "host/daemon/src"),
    ("topomgr-run", "host/run/src"),
    ("topomgr-runtime", "host/runtime/src"),
    ("topomgr-oci-hook", "host/oci-hook/src"),
    ("topomgr-nri", "host/nri/src"),
];

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// `text` without `//` and `/* */` comments (string literals are not
/// special: a `//` in one ends the line early, which can only hide paths).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else if rest.starts_with("//") {
            rest = rest.find('\n').map_or("", |i| &rest[i..]);
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first modules of every `crate::` path in `code`: `use crate::a::..`,
/// `use crate::{a, b::c}` and inline `crate::a::f()`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut at = 0;
    while let Some(i) = code[at..].find("crate::") {
        let start = at + i;
        at = start + "crate::".len();
        if code[..start].chars().next_back().is_some_and(is_ident) {
            continue; // `topomgr_crate::`, not a path of this crate
        }
        let rest = &code[at..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group, nested groups skipped.
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(first_ident(&item));
                        item.clear();
                    }
                    _ => item.push(c),
                }
            }
            out.insert(first_ident(&item));
        } else {
            out.insert(first_ident(rest));
        }
    }
    out.remove("");
    out
}

fn first_ident(s: &str) -> String {
    s.trim_start()
        .chars()
        .take_while(|&c| is_ident(c))
        .collect()
}

/// Top-level module -> the top-level modules it names, for the crate whose
/// sources are in `src` (the crate root, `lib.rs`/`main.rs`, left out).
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let code = without_comments(&fs::read_to_string(&file).unwrap());
        let uses = graph.entry(module.clone()).or_default();
        uses.extend(crate_paths(&code).into_iter().filter(|m| *m != module));
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for uses in graph.values_mut() {
        uses.retain(|m| modules.contains(m));
    }
    graph
}

/// A cycle of `graph`, if it has one (depth-first search).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut cycle = path[i..].to_vec();
            cycle.push(m.to_owned());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_cycle_finder_sees_grouped_and_inline_paths() {
    let code = without_comments(
        "use crate::{a::X, b, c::{d, e}};\n// use crate::z;\nfn f() { crate::f::g(); topomgr_crate::h(); }",
    );
    assert_eq!(
        crate_paths(&code),
        ["a", "b", "c", "f"].map(String::from).into()
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, uses)| (m.to_owned(), uses.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
}

#[test]
fn no_host_crate_has_a_module_cycle() {
    let root = workspace_root();
    for (krate, src) in HOST_CRATES {
        let graph = module_graph(&root.join(src));
        if krate == "topomgr-node" {
            // The scan sees the imports (node_state uses api, for one).
            assert!(graph["node_state"].contains("api"), "{graph:?}");
        }
        if let Some(cycle) = find_cycle(&graph) {
            panic!("{krate} ({src}) has a module cycle: {}", cycle.join(" -> "));
        }
    }
}

/// Package name -> the names of its dependencies (normal, dev and build,
/// with every feature the workspace enables: a superset of `cargo tree`).
fn lock_graph() -> BTreeMap<String, BTreeSet<String>> {
    let text = fs::read_to_string(workspace_root().join("Cargo.lock")).unwrap();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for block in text.split("[[package]]").skip(1) {
        let name = block
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .map(|n| n.trim_end_matches('"').to_owned())
            .unwrap();
        let deps = graph.entry(name).or_default();
        if let Some(list) = block.split("dependencies = [").nth(1) {
            let list = &list[..list.find(']').unwrap()];
            for dep in list.split(',') {
                let dep = dep.trim().trim_matches('"');
                if let Some(dep_name) = dep.split(' ').next().filter(|d| !d.is_empty()) {
                    deps.insert(dep_name.to_owned());
                }
            }
        }
    }
    graph
}

/// Every package `package` depends on, directly or not.
fn closure(graph: &BTreeMap<String, BTreeSet<String>>, package: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![package.to_owned()];
    while let Some(p) = todo.pop() {
        for d in graph.get(&p).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn the_engine_depends_on_no_runtime_transport_cli_or_config_format() {
    let graph = lock_graph();
    let engine = closure(&graph, "topomgr-engine");
    assert!(engine.contains("topomgr-sdk"), "{engine:?}");
    for banned in [
        "tokio",
        "axum",
        "hyper",
        "clap",
        "anyhow",
        "toml",
        "tracing-subscriber",
    ] {
        assert!(
            !engine.contains(banned),
            "topomgr-engine depends on {banned} (through: {:?})",
            graph
                .iter()
                .filter(|(p, deps)| deps.contains(banned) && engine.contains(*p))
                .map(|(p, _)| p)
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn host_crates_depend_only_on_the_crates_below_them() {
    let graph = lock_graph();
    // Cargo.lock does not tell dev-dependencies apart: the runtime test
    // harness (a dev-dependency of the NRI crate's tests) is no host crate.
    let host = |p: &String| {
        p.starts_with("topomgr-") && p != "topomgr-sdk" && p != "topomgr-runtime-harness"
    };
    let allowed: [(&str, &[&str]); 10] = [
        ("topomgr-discovery", &[]),
        ("topomgr-cgroup", &[]),
        ("topomgr-manifest", &[]),
        ("topomgr-engine", &[]),
        ("topomgr-node", &["topomgr-engine", "topomgr-cgroup"]),
        (
            "topomgr-daemon",
            &[
                "topomgr-engine",
                "topomgr-cgroup",
                "topomgr-manifest",
                "topomgr-node",
                "topomgr-runtime",
                "topomgr-nri",
            ],
        ),
        // `run` uses the daemon crate's client; the daemon's runtime face
        // comes with it.
        (
            "topomgr-run",
            &[
                "topomgr-engine",
                "topomgr-cgroup",
                "topomgr-manifest",
                "topomgr-node",
                "topomgr-daemon",
                "topomgr-runtime",
                "topomgr-nri",
            ],
        ),
        ("topomgr-runtime", &["topomgr-manifest"]),
        ("topomgr-nri", &[]),
        (
            "topomgr-oci-hook",
            &[
                "topomgr-engine",
                "topomgr-cgroup",
                "topomgr-manifest",
                "topomgr-node",
                "topomgr-daemon",
                "topomgr-runtime",
                "topomgr-nri",
            ],
        ),
    ];
    for (krate, may) in allowed {
        let found: Vec<_> = closure(&graph, krate).into_iter().filter(host).collect();
        let extra: Vec<_> = found
            .iter()
            .filter(|d| !may.contains(&d.as_str()))
            .collect();
        assert!(
            extra.is_empty(),
            "{krate} depends on {extra:?}; it may use only {may:?}"
        );
    }
}

#[test]
fn only_the_sdk_and_the_plugin_loader_name_abi_stable() {
    let root = workspace_root();
    let mut named = Vec::new();
    for (_, src) in HOST_CRATES {
        for file in rust_files(&root.join(src)) {
            let text = fs::read_to_string(&file).unwrap();
            // Unit tests (a file's trailing `mod tests`) may build providers
            // at the boundary by hand.
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            if without_comments(code).contains("abi_stable") {
                named.push(file.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    assert_eq!(named, ["host/node/src/plugin.rs"]);
}

/// One owner per node: cpusets are written only through the node state
/// (`NodeState::attach` and the shared pool), which a process changes
/// only while it owns the node (the daemon, or a one-shot command holding
/// the node lock): no other module calls the cgroup crate's cpuset writes.
#[test]
fn cpusets_are_written_only_by_the_node_state() {
    let root = workspace_root();
    let mut writers = Vec::new();
    for (krate, src) in HOST_CRATES {
        if krate == "topomgr-cgroup" {
            continue;
        }
        for file in rust_files(&root.join(src)) {
            let text = fs::read_to_string(&file).unwrap();
            let code = without_comments(text.split("#[cfg(test)]\nmod tests").next().unwrap());
            if [".set_cpuset(", ".set_cpus(", "write_pool("]
                .iter()
                .any(|w| code.contains(w))
            {
                writers.push(file.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    assert_eq!(writers, ["host/node/src/node_state.rs"]);
}
