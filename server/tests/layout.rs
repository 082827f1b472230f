//! The layout of `server/src/` by role (ARCHITECTURE.md): which folders a folder's code may
//! name through `crate::`. `domain` (rules without I/O) names no other room; `store` (SQL)
//! names only the domain; `request` (extractors, tokens, the gate) and `flows` (what handlers
//! and background tasks share) never name the handlers' room `api`; nothing but `cli` (and the
//! binary) names `bench`, and nothing names `cli`; the crate's root names of `api` only its
//! router. Read from the source text outside tests; `super::` stays within a folder.

use std::collections::BTreeSet;
use std::path::Path;

/// Folder -> the rooms its code may name besides itself; `lib` is the crate root's own items
/// (`AppState`, `Config`, `Server`: the running service). The crate's leaves (`error`,
/// `metrics`, `listen`, `outage`) may be named by anyone.
const RULES: &[(&str, &[&str])] = &[
    ("domain", &[]),
    ("store", &["domain"]),
    ("request", &["lib", "store"]),
    ("flows", &["lib", "domain", "store"]),
    (
        "api",
        &["lib", "domain", "store", "views", "request", "flows"],
    ),
    ("views", &["lib", "domain", "store", "request"]),
    // The benches mint their admin token as the API does.
    ("bench", &["lib", "request", "domain"]),
    (
        "cli",
        &["lib", "api", "bench", "domain", "store", "views", "request"],
    ),
];

const LEAVES: &[&str] = &["error", "metrics", "listen", "outage"];

/// The source of every `.rs` file under `dir`, without its tests (test files, and everything
/// from a `#[cfg(test)]` line on) and without comment lines.
fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let mut code = String::new();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            if line.starts_with("#[cfg(test)]") {
                break;
            }
            if !line.trim_start().starts_with("//") {
                code.push_str(line);
                code.push('\n');
            }
        }
        out.push((path.display().to_string(), code));
    }
}

/// The top-level modules `code` names as `crate::NAME` (`lib` for an item of the root).
fn named(code: &str) -> BTreeSet<String> {
    code.match_indices("crate::")
        .map(|(i, _)| {
            let name: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                "lib".to_string()
            } else {
                name
            }
        })
        .collect()
}

#[test]
fn each_room_names_only_the_rooms_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (room, allowed) in RULES {
        let mut files = Vec::new();
        sources(&src.join(room), &mut files);
        assert!(!files.is_empty(), "no files in {room}/");
        for (file, code) in &files {
            for n in named(code) {
                let fine =
                    n == *room || allowed.contains(&n.as_str()) || LEAVES.contains(&n.as_str());
                if !fine {
                    broken.push(format!("{file} names crate::{n}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

/// The running service (lib.rs) wires the router in and calls the flows from its background
/// tasks; it never reaches into a handler.
#[test]
fn the_root_names_of_the_api_only_its_router() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let uses: BTreeSet<String> = lib
        .match_indices("api::")
        .filter(|(i, _)| !lib[..*i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        .map(|(i, _)| {
            lib[i + 5..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect();
    assert_eq!(uses.into_iter().collect::<Vec<_>>(), ["router"]);
}

/// Transactions begin through `store::begin` alone: sqlx's own `begin` leaves a connection
/// inside its transaction when the request is cut off while `BEGIN` is on the server.
#[test]
fn transactions_begin_through_the_stores_cancel_safe_begin() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut found = Vec::new();
    for (file, code) in &files {
        let n = code.matches(".begin()").count() + code.matches(".begin_with(").count();
        // The one place that calls them, from a task of its own.
        let allowed = if file.ends_with("store/mod.rs") { 2 } else { 0 };
        if n != allowed {
            found.push(format!("{file}: {n} calls of sqlx's begin"));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_rule_reader_sees_what_it_must() {
    let code = "use crate::store::x;\n let a = crate::domain::y(); crate::api; crate::Config";
    let got: Vec<String> = named(code).into_iter().collect();
    assert_eq!(got, ["api", "domain", "lib", "store"]);
}
