//! The architecture invariants of ARCHITECTURE.md, checked on the sources
//! and on `Cargo.lock`:
//! - the modules of each host crate import each other without a cycle;
//! - the engine's dependency tree holds no async runtime, HTTP, command-line,
//!   config-format or error-reporting crate, and no other host crate;
//! - each host crate depends only on the host crates below it (the engine
//!   never on the node or the daemon, the leaves on none);
//! - the client faces (`run`, the OCI hook, the client) link no daemon,
//!   NRI or plugin loading;
//! - only the SDK and the plugin loader name `abi_stable` (tests aside).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::common::workspace_root;

/// The host's crates: (package, source directory relative to the workspace).
const HOST_CRATES: [(&str, &str); 17] = [
    ("topomgr", "host/src"),
    ("topomgr-contract", "host/contract/src"),
    ("topomgr-client", "host/client/src"),
    ("topomgr-discovery", "host/discovery/src"),
    ("topomgr-cgroup", "host/cgroup/src"),
    ("topomgr-manifest", "host/manifest/src"),
    ("topomgr-engine", "host/engine/src"),
    ("topomgr-locks", "host/locks/src"),
    ("topomgr-node", "host/node/src"),
    ("topomgr-daemon", "host/daemon/src"),
    ("topomgr-run", "host/run/src"),
    ("topomgr-runtime", "host/runtime/src"),
    ("topomgr-oci-hook", "host/oci-hook/src"),
    ("topomgr-nri", "host/nri/src"),
    ("topomgr-cri", "host/cri/src"),
    ("topomgr-kube", "host/kube/src"),
    ("topomgr-podresources", "host/podresources/src"),
];

/// The other crates of the workspace whose module graphs are checked too.
const OTHER_CRATES: [(&str, &str); 5] = [
    ("topomgr-sdk", "sdk/src"),
    ("topomgr-provider-cpu", "providers/cpu/src"),
    ("topomgr-provider-memory", "providers/memory/src"),
    ("topomgr-provider-gpu", "providers/gpu/src"),
    ("topomgr-provider-sriov", "providers/sriov/src"),
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

/// The code of `file` (`text`) the source checks look at: without its
/// unit tests, a trailing `#[cfg(test)] mod tests { }` or a whole file
/// `tests.rs` that its parent module (`mod.rs`, `lib.rs`) declares as
/// `#[cfg(test)] mod tests;`.
fn non_test_code<'a>(file: &Path, text: &'a str) -> &'a str {
    let declared_as_tests = file.file_name().is_some_and(|n| n == "tests.rs")
        && ["mod.rs", "lib.rs"].iter().any(|parent| {
            fs::read_to_string(file.with_file_name(parent))
                .is_ok_and(|t| t.contains("#[cfg(test)]\nmod tests;"))
        });
    if declared_as_tests {
        return "";
    }
    text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text)
}

/// `text` without `//` and `/* */` comments and with every string and
/// character literal emptied (`"a{b"` becomes `""`): what is left is code,
/// whose braces balance and whose paths are paths.
fn code_of(text: &str) -> String {
    strip(text, false)
}

/// `text` without `//` and `/* */` comments, its literals kept.
fn without_comments(text: &str) -> String {
    strip(text, true)
}

fn strip(text: &str, keep_literals: bool) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let after_ident = i > 0 && is_ident_byte(b[i - 1]);
        if rest.starts_with(b"/*") {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if !after_ident && (rest.starts_with(b"r\"") || rest.starts_with(b"r#")) {
            // A raw string: `r"..."`, `r#"..."#`, ...
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push(b[i]); // `r#ident`
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let start = i;
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i = (i + close.len()).min(b.len());
            out.extend_from_slice(if keep_literals { &b[start..i] } else { b"\"\"" });
        } else if b[i] == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            out.extend_from_slice(if keep_literals { &b[start..i] } else { b"\"\"" });
        } else if b[i] == b'\'' {
            // A character literal (`'{'`, `'\''`, `'\u{7b}'`), or a lifetime.
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = std::str::from_utf8(&rest[1..rest.len().min(5)])
                    .or_else(|e| std::str::from_utf8(&rest[1..1 + e.valid_up_to()]))
                    .ok()
                    .and_then(|s| s.chars().next())
                    .map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            match len {
                Some(n) => {
                    let end = (i + n).min(b.len());
                    out.extend_from_slice(if keep_literals { &b[i..end] } else { b"' '" });
                    i = end;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn skip_space(b: &[u8], i: &mut usize) {
    while *i < b.len() && b[*i].is_ascii_whitespace() {
        *i += 1;
    }
}

fn ident_at(b: &[u8], i: &mut usize) -> String {
    let start = *i;
    while *i < b.len() && is_ident_byte(b[*i]) {
        *i += 1;
    }
    String::from_utf8_lossy(&b[start..*i]).into_owned()
}

/// The paths of the path tree at `b[*i..]` (`a::b`, `a::{b, c::{d, self}}`,
/// `a::*`), each as its segments.
fn path_tree(b: &[u8], i: &mut usize) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    loop {
        skip_space(b, i);
        match b.get(*i) {
            Some(b'{') => {
                *i += 1;
                let mut out = Vec::new();
                loop {
                    skip_space(b, i);
                    if matches!(b.get(*i), None | Some(b'}')) {
                        *i += 1;
                        return out;
                    }
                    for p in path_tree(b, i) {
                        // `a::{self, b}`: `self` is the group's prefix.
                        let p = p.into_iter().skip_while(|s| s == "self");
                        out.push(prefix.iter().cloned().chain(p).collect());
                    }
                    skip_space(b, i);
                    match b.get(*i) {
                        Some(b',') => *i += 1,
                        _ => {
                            // `}` (or code this scan does not follow).
                            *i += 1;
                            return out;
                        }
                    }
                }
            }
            Some(b'*') => {
                *i += 1;
                return vec![prefix];
            }
            _ => {}
        }
        let word = ident_at(b, i);
        if word.is_empty() {
            return vec![prefix];
        }
        prefix.push(word);
        skip_space(b, i);
        if b[*i..].starts_with(b"::") {
            *i += 2;
        } else {
            return vec![prefix];
        }
    }
}

/// `path` (starting with `crate`, `self` or `super`) as an absolute path,
/// named from `module`; `None` for a `super` above the crate root.
fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let (mut out, mut rest) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (module.to_vec(), &path[1..]),
        _ => (module.to_vec(), path),
    };
    while rest.first().is_some_and(|s| s == "super") {
        out.pop()?;
        rest = &rest[1..];
    }
    out.extend(rest.iter().cloned());
    Some(out)
}

/// The modules of a crate (files and inline `mod name { .. }`) and the
/// paths each names (`crate::`, `super::`, `self::`), made absolute.
#[derive(Debug, Default)]
struct ModuleScan {
    modules: BTreeSet<Vec<String>>,
    /// (the naming module, the absolute path it names).
    uses: Vec<(Vec<String>, Vec<String>)>,
}

impl ModuleScan {
    fn of_crate(src: &Path) -> Self {
        let mut scan = Self::default();
        for file in rust_files(src) {
            let rel = file.strip_prefix(src).unwrap().with_extension("");
            let mut module: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.len() == 1 && (module[0] == "lib" || module[0] == "main")
                || module.last().is_some_and(|m| m == "mod")
            {
                module.pop();
            }
            scan.file(&module, &code_of(&fs::read_to_string(&file).unwrap()));
        }
        scan
    }

    /// Scans the code of the file of `module`.
    fn file(&mut self, module: &[String], code: &str) {
        let b = code.as_bytes();
        // The modules open at this point, with the brace depth inside each.
        let mut open: Vec<(Vec<String>, usize)> = vec![(module.to_vec(), 0)];
        for n in 0..=module.len() {
            self.modules.insert(module[..n].to_vec());
        }
        let mut depth = 0usize;
        let mut inline_mod: Option<String> = None;
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if c == b'{' {
                depth += 1;
                if let Some(name) = inline_mod.take() {
                    let mut m = open.last().unwrap().0.clone();
                    m.push(name);
                    self.modules.insert(m.clone());
                    open.push((m, depth));
                }
                i += 1;
            } else if c == b'}' {
                if open.len() > 1 && open.last().unwrap().1 == depth {
                    open.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            } else if is_ident_byte(c) && (i == 0 || !is_ident_byte(b[i - 1])) {
                let at = i;
                let word = ident_at(b, &mut i);
                let current = &open.last().unwrap().0;
                if word == "mod" {
                    let mut j = i;
                    skip_space(b, &mut j);
                    let name = ident_at(b, &mut j);
                    skip_space(b, &mut j);
                    if !name.is_empty() && b.get(j) == Some(&b'{') {
                        inline_mod = Some(name);
                        i = j;
                    }
                } else if matches!(word.as_str(), "crate" | "super" | "self")
                    && b[i..].starts_with(b"::")
                    && !code[..at].trim_end().ends_with("::")
                    // `$crate::` in a macro names what the expansion uses
                    // where it is expanded, not what this module uses.
                    && !code[..at].ends_with('$')
                {
                    let mut j = at;
                    for path in path_tree(b, &mut j) {
                        if let Some(to) = resolve(current, &path) {
                            self.uses.push((current.clone(), to));
                        }
                    }
                    i = j.max(i);
                }
            } else {
                i += 1;
            }
        }
    }

    /// For every module with child modules: child -> the children of the
    /// same parent it names (from anywhere inside it). Test modules
    /// (`tests`, `*_tests`) may name anything: they are no part of the
    /// layering, and what they name is left out.
    fn sibling_graphs(&self) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
        let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for m in &self.modules {
            if let Some((name, parent)) = m.split_last() {
                graphs
                    .entry(parent.to_vec())
                    .or_default()
                    .entry(name.clone())
                    .or_default();
            }
        }
        let test = |m: &String| m == "tests" || m.ends_with("_tests");
        for (from, to) in self.uses.iter().filter(|(from, _)| !from.iter().any(test)) {
            // The deepest module holding both, and the children of it on
            // each side.
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            let (Some(a), Some(b)) = (from.get(common), to.get(common)) else {
                continue; // one side holds the other
            };
            let graph = graphs.get_mut(&from[..common]).unwrap();
            if graph.contains_key(b) && graph.contains_key(a) {
                graph.get_mut(a).unwrap().insert(b.clone());
            }
        }
        graphs
    }
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

/// The module cycles of the crate whose sources are in `src`, each as
/// `parent: a -> b -> a` (siblings under one parent module).
fn module_cycles(scan: &ModuleScan) -> Vec<String> {
    scan.sibling_graphs()
        .iter()
        .filter_map(|(parent, graph)| {
            let parent = ["crate"]
                .into_iter()
                .chain(parent.iter().map(String::as_str));
            find_cycle(graph).map(|c| {
                format!(
                    "{}: {}",
                    parent.collect::<Vec<_>>().join("::"),
                    c.join(" -> ")
                )
            })
        })
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn the_module_scan_sees_grouped_relative_and_nested_paths() {
    let mut scan = ModuleScan::default();
    scan.file(
        &strings(&["a", "b"]),
        &code_of(concat!(
            "use crate::{x::X, y, z::{d, self}};\n// use crate::w;\n/* crate::v:: */\n",
            "fn f() { let s = \"} crate::q::r\"; let c = '}'; crate::f::g(); topomgr_crate::h(); }\n",
            "use super::super::top::T;\nuse super::{sib::S, *};\n",
            "#[cfg(test)]\nmod tests {\n    use super::*;\n    use self::inner::I;\n    fn t<'a>(_: &'a str) { super::sib2::f(); }\n}\n",
            "fn after() { self::own::f(); $crate::m::n(); }\n",
        )),
    );
    let uses: Vec<String> = scan
        .uses
        .iter()
        .map(|(from, to)| format!("{} > {}", from.join("::"), to.join("::")))
        .collect();
    assert_eq!(
        uses,
        [
            "a::b > x::X",
            "a::b > y",
            "a::b > z::d",
            "a::b > z",
            "a::b > f::g",
            "a::b > top::T",
            "a::b > a::sib::S",
            "a::b > a",
            "a::b::tests > a::b",
            "a::b::tests > a::b::tests::inner::I",
            "a::b::tests > a::b::sib2::f",
            "a::b > a::b::own::f",
        ]
    );
    assert!(scan.modules.contains(&strings(&["a", "b", "tests"])));

    // Siblings under `a` naming each other through `super::`, and a cycle
    // through a nested module (`c::d` names `e`, `e` names `c`).
    let mut scan = ModuleScan::default();
    scan.file(&strings(&["a", "b"]), "use super::c::X;");
    scan.file(&strings(&["a", "c"]), "fn f() { super::b::g(); }");
    scan.file(&strings(&["c", "d"]), "use crate::e::Y;");
    scan.file(&strings(&["e"]), "use crate::c::Z;");
    scan.file(&strings(&["f"]), "use crate::e::Y;");
    assert_eq!(
        module_cycles(&scan),
        ["crate: c -> e -> c", "crate::a: b -> c -> b"].map(String::from)
    );
}

#[test]
fn no_crate_has_a_module_cycle() {
    let root = workspace_root();
    let mut cycles = Vec::new();
    for (krate, src) in HOST_CRATES.iter().chain(&OTHER_CRATES) {
        let scan = ModuleScan::of_crate(&root.join(src));
        // The scan sees the imports (the state room uses api, for one; the
        // CLI's modules name each other through `super::`).
        let sees = |from: &[&str], to: &[&str]| {
            scan.uses
                .iter()
                .any(|(f, t)| *f == strings(from) && t.starts_with(&strings(to)))
        };
        match *krate {
            "topomgr-node" => assert!(sees(&["state"], &["api"]), "{:?}", scan.uses),
            "topomgr" => assert!(sees(&["cli", "admit"], &["cli", "text"]), "{:?}", scan.uses),
            _ => {}
        }
        cycles.extend(
            module_cycles(&scan)
                .into_iter()
                .map(|c| format!("{krate} ({src}) has a module cycle: {c}")),
        );
    }
    assert!(cycles.is_empty(), "{}", cycles.join("\n"));
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
            // The runtime test harness is a dev-dependency only (Cargo.lock
            // does not tell dev-dependencies apart): what it links is not
            // linked by the crates whose tests use it.
            if seen.insert(d.clone()) && d != TEST_HARNESS {
                todo.push(d.clone());
            }
        }
    }
    seen
}

/// The private containerd/Podman/Kubernetes harness of the runtime tests.
const TEST_HARNESS: &str = "topomgr-runtime-harness";

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
    let host = |p: &String| p.starts_with("topomgr-") && p != "topomgr-sdk" && p != TEST_HARNESS;
    let allowed: [(&str, &[&str]); 16] = [
        ("topomgr-contract", &[]),
        ("topomgr-client", &["topomgr-contract"]),
        ("topomgr-discovery", &[]),
        ("topomgr-cgroup", &[]),
        ("topomgr-manifest", &[]),
        ("topomgr-engine", &["topomgr-contract"]),
        ("topomgr-locks", &["topomgr-contract", "topomgr-cgroup"]),
        (
            "topomgr-node",
            &[
                "topomgr-contract",
                "topomgr-engine",
                "topomgr-cgroup",
                "topomgr-locks",
            ],
        ),
        (
            "topomgr-daemon",
            &[
                "topomgr-contract",
                "topomgr-engine",
                "topomgr-cgroup",
                "topomgr-locks",
                "topomgr-manifest",
                "topomgr-node",
                "topomgr-runtime",
                "topomgr-nri",
                "topomgr-cri",
                "topomgr-kube",
                "topomgr-podresources",
            ],
        ),
        // `run` talks to the daemon through the client and asks the node
        // lock who places it; its local path (no daemon) is handed the
        // node state by the binary (`LocalPlacement`).
        (
            "topomgr-run",
            &[
                "topomgr-contract",
                "topomgr-client",
                "topomgr-cgroup",
                "topomgr-locks",
            ],
        ),
        ("topomgr-runtime", &["topomgr-manifest"]),
        ("topomgr-nri", &[]),
        ("topomgr-cri", &[]),
        ("topomgr-kube", &[]),
        ("topomgr-podresources", &[]),
        (
            "topomgr-oci-hook",
            &[
                "topomgr-contract",
                "topomgr-client",
                "topomgr-cgroup",
                "topomgr-manifest",
                "topomgr-runtime",
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

/// The faces that only talk to the daemon link none of it: not its HTTP
/// server, metrics or NRI plugin, and not the node's plugin loading,
/// engine and state files either (`run` and the hook: nor the SDK's
/// plugin ABI); the OCI hook and the client not even the locks' hashing.
#[test]
fn the_client_faces_link_no_daemon() {
    let graph = lock_graph();
    let server = [
        "topomgr-daemon",
        "topomgr-nri",
        "topomgr-cri",
        "topomgr-kube",
        "rustls",
        "topomgr-podresources",
        "axum",
        "prometheus-client",
    ];
    let loader = ["topomgr-node", "topomgr-engine", "toml"];
    let node = ["topomgr-node", "topomgr-engine", "toml", "sha2"];
    let faces: [(&str, &[&str]); 4] = [
        ("topomgr-contract", &["hyper", "tokio"]),
        ("topomgr-client", &node),
        ("topomgr-oci-hook", &node),
        ("topomgr-run", &loader),
    ];
    for (face, more) in faces {
        let deps = closure(&graph, face);
        let linked: Vec<_> = server
            .iter()
            .chain(more)
            .filter(|b| deps.contains(**b))
            .collect();
        assert!(linked.is_empty(), "{face} depends on {linked:?}");
    }
    // Cargo.lock lists the SDK's optional `abi_stable` whoever enables it:
    // the faces' manifests must not (the plugin loader's feature).
    let root = workspace_root();
    for manifest in ["host/run/Cargo.toml", "host/oci-hook/Cargo.toml"] {
        let text = fs::read_to_string(root.join(manifest)).unwrap();
        let deps = text.split("[dependencies]").nth(1).unwrap_or("");
        assert!(
            !deps.contains("plugin-abi") && !deps.contains("abi_stable"),
            "{manifest} enables the SDK's plugin ABI (the plugin loader's)"
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
            let code = non_test_code(&file, &text);
            if code_of(code).contains("abi_stable") {
                named.push(file.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    assert_eq!(named, ["host/node/src/setup/plugin.rs"]);
}

/// One owner per node: cpusets are written only through the node state
/// (`NodeState::attach` and the shared pool), which a process changes
/// only while it owns the node (the daemon, or a one-shot command holding
/// the node lock): no other module calls the cgroup crate's cpuset writes,
/// and no module outside the cgroup crate names a cpuset control file (a
/// write around the cgroup crate).
#[test]
fn cpusets_are_written_only_by_the_node_state() {
    let root = workspace_root();
    let mut writers = Vec::new();
    let mut around = Vec::new();
    for (krate, src) in HOST_CRATES {
        if krate == "topomgr-cgroup" {
            continue;
        }
        for file in rust_files(&root.join(src)) {
            let text = fs::read_to_string(&file).unwrap();
            let code = without_comments(non_test_code(&file, &text));
            let name = file.strip_prefix(&root).unwrap().display().to_string();
            if [".set_cpuset(", "write_pool("]
                .iter()
                .any(|w| code.contains(w))
            {
                writers.push(name.clone());
            }
            if ["cpuset.cpus", "cpuset.mems"]
                .iter()
                .any(|f| code.contains(f))
            {
                around.push(name);
            }
        }
    }
    assert_eq!(writers, ["host/node/src/state/attachment.rs"]);
    assert_eq!(
        around,
        Vec::<String>::new(),
        "cpuset files named outside the cgroup crate"
    );
}

/// `NodeState` is the state room's: every `impl` of it is under
/// host/node/src/state/ (setup builds one through its constructor).
#[test]
fn node_state_is_implemented_only_in_the_state_room() {
    let root = workspace_root();
    let mut outside = Vec::new();
    for (_, src) in HOST_CRATES.iter().chain(&OTHER_CRATES) {
        for file in rust_files(&root.join(src)) {
            let text = fs::read_to_string(&file).unwrap();
            let code = code_of(&text);
            let name = file.strip_prefix(&root).unwrap().display().to_string();
            let b = code.as_bytes();
            let implements = code.match_indices("impl").any(|(at, _)| {
                let word_start = at == 0 || !is_ident_byte(b[at - 1]);
                let word_end = b.get(at + 4).is_some_and(|c| !is_ident_byte(*c));
                if !word_start || !word_end {
                    return false;
                }
                // The header up to its body; the implemented type is the
                // one after `for`, or the whole header for an inherent impl.
                let header = code[at + 4..].split('{').next().unwrap_or("");
                let ty = header.rsplit_once(" for ").map_or(header, |(_, t)| t);
                let ty = ty.trim_start();
                let ty = match ty.strip_prefix('<') {
                    Some(generic) => generic.split_once('>').map_or("", |(_, t)| t),
                    None => ty,
                };
                ty.trim_start()
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .is_some_and(|t| t.rsplit("::").next() == Some("NodeState"))
            });
            if implements && !name.starts_with("host/node/src/state/") {
                outside.push(name);
            }
        }
    }
    assert_eq!(
        outside,
        Vec::<String>::new(),
        "impl NodeState outside the state room"
    );
}
