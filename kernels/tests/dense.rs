//! The dense route (`dense.rs`, docs/error-analysis.md §13) against MPFR: small pieces walked on
//! their full-degree polynomial give the HR-cases, exact cases and skipped runs of every
//! argument judged by MPFR, both the engine's own route (`SearchConfig::dense = false`) and an
//! independent brute force; and the route is taken where it should be (erfc in binary32 near 9;
//! whole binades of binary16, where every function is steep in units of the output).

mod common;

use common::{brute_force, engine};
use std::collections::BTreeMap;
use tmd_kernels::numbers::format::Format;
use tmd_kernels::oracle::verify::Kind;
use tmd_kernels::search::RangeResult;
use tmd_kernels::Function;

/// The route on and off give the same cases and runs, equal to the brute force's, and the
/// route is taken (at least `min_dense` arguments walked). Returns the result with the route.
fn compare(
    f: Function,
    name: &str,
    from: &str,
    to: &str,
    k: u32,
    u: u32,
    min_dense: u64,
) -> RangeResult {
    let fmt: Format = name.parse().unwrap();
    let on = engine(f, fmt, from, to, k, u, |c| c.dense = true);
    let off = engine(f, fmt, from, to, k, u, |c| c.dense = false);
    let what = format!("{f} {name} [{from}, {to}) k={k}");
    assert!(
        on.stats.dense_arguments >= min_dense,
        "{what}: the dense route must be taken ({:?})",
        on.stats
    );
    assert_eq!(off.stats.dense_arguments, 0, "{what}");
    assert_eq!(
        on.stats.exhaustive_arguments + on.stats.dense_arguments,
        off.stats.exhaustive_arguments,
        "{what}: the route takes over pieces MPFR judged one by one"
    );
    assert_eq!(on.hr_cases, off.hr_cases, "{what}: HR-cases");
    assert_eq!(on.exact_cases, off.exact_cases, "{what}: exact cases");
    assert_eq!(on.skipped, off.skipped, "{what}: skipped runs");
    // The route verifies far fewer arguments than it walks.
    assert!(
        on.stats.candidates < off.stats.candidates + on.stats.dense_arguments / 4,
        "{what}"
    );

    let truth = brute_force(f, fmt, from, to, k);
    assert!(
        !truth.hard.is_empty(),
        "{what}: choose k so that cases exist"
    );
    let got: BTreeMap<String, (u32, Kind)> = on
        .hr_cases
        .iter()
        .map(|c| (c.x.clone(), (c.bits, c.kind)))
        .collect();
    let trivial: u64 = on.skipped.iter().map(|s| s.count).sum();
    if trivial == 0 {
        assert_eq!(got, truth.hard, "{what}: against the brute force");
        let exact: Vec<String> = on.exact_cases.iter().map(|e| e.x.clone()).collect();
        assert_eq!(
            exact, truth.exact,
            "{what}: exact cases against the brute force"
        );
    } else {
        // Runs stand for their arguments (checked in formats.rs); every listed case is true.
        for (x, v) in &got {
            assert_eq!(truth.hard.get(x), Some(v), "{what}: {x}");
        }
    }
    eprintln!("{what}: {:?}", on.stats);
    on
}

/// erfc in binary32 on [9, 9.0078125), where most pieces were judged by MPFR
/// one argument at a time (0.25 ms each).
#[test]
fn erfc_binary32_near_9() {
    compare(Function::Erfc, "binary32", "9", "0x1.204p+3", 10, 16, 4096);
}

/// Whole binades of binary16 (1024 arguments: one piece each), a few functions.
#[test]
fn binary16_binades() {
    // [2, 4) crosses three binades of the output: pieces too short for the route, MPFR.
    compare(Function::Exp, "binary16", "1", "4", 7, 10, 1024);
    compare(Function::Erfc, "binary16", "0x1p-1", "2", 7, 10, 1024);
    compare(Function::Cosh, "binary16", "1", "2", 7, 10, 1024);
    compare(Function::Sin, "binary16", "0x1p-1", "2", 7, 10, 1024);
}
