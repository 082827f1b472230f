//! The layout of `kernels/src/` (ARCHITECTURE.md, invariants): no two modules import each other,
//! directly or through others (a folder's re-exports count as its imports, so importing through
//! them inside the crate makes a circle), and the folders are layered `numbers` -> `oracle` ->
//! `plan` -> `regions` -> `search` -> `cuda`, with `plan/whole.rs`, `plan/reduce.rs` and
//! `plan/collapse.rs` alone reading `regions/` (what the search would skip decides their plans).
//! Read from the source text: `use` paths and inline `crate::`/`super::` paths outside tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The folders in pipeline order: a module may import from its own folder and those before it.
const LAYERS: &[&str] = &["numbers", "oracle", "plan", "regions", "search", "cuda"];

/// Imports across the layers that the layout allows, as (importing module, imported folder).
const ALLOWED: &[(&str, &str)] = &[
    ("plan::whole", "regions"),
    ("plan::reduce", "regions"),
    ("plan::collapse", "regions"),
];

/// Modules whose children still import from them while they import their children (a file
/// split in parts that share its items through `super::`); to be split by role like the rest.
const PARENT_CIRCLES: &[&str] = &["cuda", "search::existence"];

/// Every module of `src/` as (path like `search::unit`, its source without tests and comments).
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            let name = parts.join("::");
            // Test modules in their own files may import anything.
            if name.ends_with("tests") {
                continue;
            }
            out.insert(name, code(&std::fs::read_to_string(&path).unwrap()));
        }
    }
    out
}

/// The source without comments and without its `#[cfg(test)]` items (which end the file here).
fn code(src: &str) -> String {
    let mut out = String::new();
    for line in src.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The paths a module's code names: `crate::a::b`, `super::x`, and `x::y` for its own
/// submodules, with `{...}` groups expanded, each as segments from the crate root.
fn paths(module: &str, code: &str, all: &BTreeMap<String, String>) -> Vec<Vec<String>> {
    let parent: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty() && *s != "lib")
        .map(String::from)
        .collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        let first: String = bytes[start..i].iter().collect();
        let base: Vec<String> = if first == "crate" {
            Vec::new()
        } else if first == "super" {
            parent[..parent.len().saturating_sub(1)].to_vec()
        } else if bytes.get(i) != Some(&':') {
            // A submodule named alone (`pub mod x;`) is not an import.
            continue;
        } else {
            let mut own = parent.clone();
            own.push(first.clone());
            if module != "lib" && !all.contains_key(&own.join("::")) {
                continue;
            }
            if module == "lib" && !all.contains_key(&first) {
                continue;
            }
            if module == "lib" {
                vec![first]
            } else {
                own
            }
        };
        out.extend(tail(&bytes, &mut i, base));
    }
    out
}

/// The rest of a path at `i` (`::a::b`, `::{a, b::c}`), appended to `base`.
fn tail(bytes: &[char], i: &mut usize, mut base: Vec<String>) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    loop {
        if bytes.get(*i) != Some(&':') || bytes.get(*i + 1) != Some(&':') {
            return vec![base];
        }
        *i += 2;
        if bytes.get(*i) == Some(&'{') {
            *i += 1;
            let mut out = Vec::new();
            loop {
                while bytes
                    .get(*i)
                    .is_some_and(|c| c.is_whitespace() || *c == ',')
                {
                    *i += 1;
                }
                match bytes.get(*i) {
                    Some('}') | None => {
                        *i += 1;
                        return out;
                    }
                    _ => {}
                }
                let start = *i;
                while bytes.get(*i).is_some_and(|c| ident(*c)) {
                    *i += 1;
                }
                if start == *i {
                    // `*` or `self`-like tokens: the base itself.
                    *i += 1;
                    out.push(base.clone());
                    continue;
                }
                let mut b = base.clone();
                b.push(bytes[start..*i].iter().collect());
                out.extend(tail(bytes, i, b));
                // `as` renames and the like up to the next separator.
                while bytes.get(*i).is_some_and(|c| *c != ',' && *c != '}') {
                    *i += 1;
                }
            }
        }
        let start = *i;
        while bytes.get(*i).is_some_and(|c| ident(*c)) {
            *i += 1;
        }
        if start == *i {
            return vec![base];
        }
        base.push(bytes[start..*i].iter().collect());
    }
}

/// The module a path names: its longest prefix that is a module.
fn module_of(path: &[String], all: &BTreeMap<String, String>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| all.contains_key(m))
}

/// Each module's imports of other modules (a module's own submodules and ancestors included).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let all = modules();
    let mut g = BTreeMap::new();
    for (m, code) in &all {
        let deps: BTreeSet<String> = paths(m, code, &all)
            .iter()
            .filter_map(|p| module_of(p, &all))
            .filter(|d| d != m)
            .filter(|d| {
                // A child's import of a parent in `PARENT_CIRCLES`.
                !PARENT_CIRCLES
                    .iter()
                    .any(|p| d == p && m.starts_with(&format!("{p}::")))
            })
            .collect();
        g.insert(m.clone(), deps);
    }
    g
}

/// A circle of imports, if there is one, as the modules along it.
fn circle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // 0 unvisited, 1 on the path, 2 done.
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(m.to_string(), 1);
        path.push(m.to_string());
        for d in g.get(m).into_iter().flatten() {
            match state.get(d).copied().unwrap_or(0) {
                1 => {
                    let at = path.iter().position(|p| p == d).unwrap();
                    let mut c = path[at..].to_vec();
                    c.push(d.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(d, g, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in g.keys() {
        if state.get(m).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(m, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_reader_finds_the_imports() {
    let g = graph();
    let deps = |m: &str| g[m].iter().cloned().collect::<Vec<_>>().join(" ");
    // A grouped `use`, a nested group and an inline path.
    assert!(
        g["search::unit"].contains("regions::partition"),
        "{}",
        deps("search::unit")
    );
    assert!(
        g["plan::whole"].contains("regions::skip"),
        "{}",
        deps("plan::whole")
    );
    assert!(
        g["regions::runs"].contains("oracle::verify"),
        "{}",
        deps("regions::runs")
    );
    // A folder's re-exports are its imports.
    assert!(g["search"].contains("search::unit"), "{}", deps("search"));
    assert!(g["lib"].contains("numbers::format"), "{}", deps("lib"));
}

#[test]
fn no_module_imports_another_that_imports_it() {
    let g = graph();
    assert_eq!(circle(&g), None, "an import circle in kernels/src");
}

#[test]
fn folders_import_only_those_before_them() {
    let g = graph();
    let layer = |m: &str| LAYERS.iter().position(|l| m.split("::").next() == Some(*l));
    let mut wrong = Vec::new();
    for (m, deps) in &g {
        let Some(from) = layer(m) else { continue };
        for d in deps {
            let Some(to) = layer(d) else { continue };
            let allowed = ALLOWED
                .iter()
                .any(|(a, f)| a == m && d.split("::").next() == Some(*f));
            if to > from && !allowed {
                wrong.push(format!("{m} -> {d}"));
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layers: {wrong:?}");
}
