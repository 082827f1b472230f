//! Far trivial runs and clear pieces (`monotone.rs`, docs/error-analysis.md §11) against an
//! independent MPFR brute force: every argument of binary16 and bfloat16 for the functions that
//! tend to a constant (tanh, erf, erfc, expm1, exp2m1), binary32 slices across the edges of the
//! trivial regions near 0 and far from it, with every trivial run checked argument by argument;
//! binary64 far out in seconds. Far out the brute force judges `d` through the complement
//! (`1 - |tanh x| = 2/(e^(2|x|) + 1)`, `1 - |erf x| = erfc |x|`, `2 - erfc x = erfc |x|`,
//! `1 + expm1 x = e^x`, ...), so no precision limit applies there.

mod common;

use common::{Grid, Truth};
use rug::float::{Constant, Round};
use rug::Float;
use std::collections::BTreeMap;
use std::time::Instant;
use tmd_kernels::numbers::format::{parse_number, Format};
use tmd_kernels::oracle::verify::{Kind, SkipReason};
use tmd_kernels::plan::split_range_in;
use tmd_kernels::regions::skip::skipped_runs;
use tmd_kernels::search::existence::Test;
use tmd_kernels::search::{search_unit, search_units, Cpu, RangeResult, SearchConfig};
use tmd_kernels::Function;

const PREC: u32 = 1024;

/// `-log2` of `|c| - |f(x)|` where `f` tends to `c` and `|x| >= 1` lies on that side: the
/// complement computed directly, with relative accuracy, and its grid exponent (that of the
/// binade just below `|c|`). Where `erfc |x|` is below MPFR's range, its classical bounds
/// `e^(-a^2)/(a sqrt(pi)) (1 - 1/(2a^2)) < erfc a < e^(-a^2)/(a sqrt(pi))` (their `-log2`
/// differ by less than `2^-60` there).
fn complement(f: Function, x: &Float) -> Option<(Float, i32)> {
    use Function::*;
    let a = Float::with_val(PREC, x.abs_ref());
    if a < 1 {
        return None;
    }
    let log2 = |v: Float| -> Float { -v.log2() };
    let log2e = Float::with_val(PREC, 1).exp().log2();
    let erfc_neg_log2 = |a: &Float| -> Float {
        let e = Float::with_val(PREC, a.erfc_ref());
        if !e.is_zero() {
            return log2(e);
        }
        // a^2 log2(e) + log2(a sqrt(pi)).
        let sq = Float::with_val(PREC, a * a) * &log2e;
        let pi = Float::with_val(PREC, Constant::Pi).sqrt();
        sq + Float::with_val(PREC, a * &pi).log2()
    };
    match (f, x.is_sign_negative()) {
        // 2/(e^(2a) + 1): -log2 = log2(e^(2a) + 1) - 1 = 2a log2(e) + log2(1 + e^(-2a)) - 1.
        (Tanh, _) => {
            let t = Float::with_val(PREC, -2 * a.clone()).exp();
            let l = Float::with_val(PREC, 2 * a * &log2e) + (t + 1u32).log2() - 1u32;
            Some((l, -1))
        }
        (Erf, _) => Some((erfc_neg_log2(&a), -1)),
        (Erfc, true) => Some((erfc_neg_log2(&a), 0)),
        (Expm1, true) => Some((a * log2e, -1)),
        (Exp2m1, true) => Some((a, -1)),
        (Exp10m1, true) => Some((a * Float::with_val(PREC, 10).log2(), -1)),
        (Atanpi, _) => {
            let r = Float::with_val(PREC, a.recip_ref()).atan_pi();
            Some((log2(r), -2))
        }
        _ => None,
    }
}

/// Every argument on the named format's grid (as `tests/formats.rs`), the far side through
/// [`complement`] wherever the value lies within half a half-ulp of the limit.
fn brute_force(f: Function, fmt: Format, from: &str, to: &str, k: u32) -> Truth {
    let grid = Grid::new(f, fmt, k);
    let p = fmt.precision;
    let pb = grid.pb;
    let mut t = Truth::default();
    for u in split_range_in(f, fmt, from, to, Some(30)).unwrap() {
        for o in 0..u.count {
            let a = u.argument(o);
            let hex = a.to_hex(p);
            let xf = a.to_float(p);
            if let Some((l, e_g)) = complement(f, &xf) {
                // -log2 d = -log2(complement) - (p - e_g); the nearest breakpoint is the limit
                // (an even integer of G) once d < 1/2.
                let nl = l - (pb - e_g);
                if nl > 1 {
                    if nl >= k {
                        let bits = nl.floor().to_f64();
                        t.hard
                            .insert(hex, (bits.min(u32::MAX as f64) as u32, Kind::Fp));
                    }
                    continue;
                }
            }
            let mut y = Float::with_val(PREC, &xf);
            let ord = f.eval_round(&mut y, Round::Nearest);
            grid.judge(&mut t, hex, a.significand == 0, &y, ord);
        }
    }
    t
}

/// The engine equals the brute force: every argument of every trivial run hard with at least
/// the run's bits (or exact), every other HR-case found with its bits and kind, the same exact
/// cases and skipped arguments; both tests; the coordinator's recomputed runs equal the
/// search's unit by unit. Returns the engine's result.
fn compare(f: Function, format: &str, from: &str, to: &str, k: u32, unit_bits: u32) -> RangeResult {
    let fmt: Format = format.parse().unwrap();
    let p = fmt.precision;
    let truth = brute_force(f, fmt, from, to, k);
    let units = split_range_in(f, fmt, from, to, Some(unit_bits)).unwrap();
    let mut results = Vec::new();
    for test in [Test::Regular, Test::Lefevre] {
        let mut cfg = SearchConfig::in_format(f, fmt, k);
        cfg.test = test;
        let r = search_units(&cfg, &units, &Cpu, &|_| {}).unwrap();
        let value = |x: &str| parse_number(x, p.bits(), Round::Nearest).unwrap();
        let mut hard = truth.hard.clone();
        let mut exact = truth.exact.clone();
        let mut runs = Vec::new();
        for s in r.skipped.iter().filter(|s| s.reason == SkipReason::Trivial) {
            let (a, b) = (value(&s.first), value(&s.last));
            let (lo, hi) = (a.clone().min(&b), a.max(&b));
            let t = s.trivial.as_ref().expect("a trivial run's rule");
            assert!(t.bits >= k, "{f} {format}: {s:?}");
            let inside = |x: &String| {
                let v = value(x);
                lo <= v && v <= hi
            };
            let inner: Vec<&String> = hard.keys().filter(|x| inside(x)).collect();
            for x in &inner {
                assert!(
                    hard[*x].0 >= t.bits,
                    "{f} {format}: {x} {:?} in {s:?}",
                    hard[*x]
                );
            }
            let n_exact = exact.iter().filter(|x| inside(x)).count();
            assert_eq!(
                inner.len() + n_exact,
                s.count as usize,
                "{f} {format}: every argument of {s:?} is hard or exact"
            );
            runs.push((lo, hi));
        }
        let outside = |x: &String| {
            let v = value(x);
            !runs.iter().any(|(lo, hi)| *lo <= v && v <= *hi)
        };
        hard.retain(|x, _| outside(x));
        exact.retain(|x| outside(x));
        let got: BTreeMap<String, (u32, Kind)> = r
            .hr_cases
            .iter()
            .map(|c| (c.x.clone(), (c.bits, c.kind)))
            .collect();
        assert_eq!(got, hard, "{f} {format} [{from},{to}) k={k} {test:?}");
        let mut got_exact: Vec<String> = r.exact_cases.iter().map(|e| e.x.clone()).collect();
        got_exact.sort();
        exact.sort();
        assert_eq!(got_exact, exact, "{f} {format} exact cases");
        let others: Vec<_> = r
            .skipped
            .iter()
            .filter(|s| s.reason != SkipReason::Trivial)
            .collect();
        let listed: u64 = others.iter().map(|s| s.count).sum();
        assert_eq!(listed, truth.skipped.len() as u64, "{f} {format}: skipped");
        for (x, reason) in &truth.skipped {
            let v = value(x);
            assert!(
                others.iter().any(|s| {
                    let (a, b) = (value(&s.first), value(&s.last));
                    a.clone().min(&b) <= v && v <= a.max(&b) && s.reason == *reason
                }),
                "{f} {format}: {x} ({reason:?}) not listed"
            );
        }
        results.push(r);
    }
    assert_eq!(results[0].hr_cases, results[1].hr_cases);
    assert_eq!(results[0].skipped, results[1].skipped);
    // The coordinator's recomputation (skip.rs) equals the search's runs, unit by unit.
    let cfg = SearchConfig::in_format(f, fmt, k);
    for u in &units {
        let searched = search_unit(&cfg, *u, &Cpu).unwrap().skipped;
        assert_eq!(
            skipped_runs(f, fmt, k, *u).unwrap(),
            searched,
            "{f} {format}"
        );
    }
    results.swap_remove(0)
}

fn trivial_runs(r: &RangeResult) -> Vec<(&str, u64)> {
    r.skipped
        .iter()
        .filter_map(|s| s.trivial.as_ref().map(|t| (t.like.as_str(), s.count)))
        .collect()
}

/// `check` on every case, the cases shared out over the machine's cores (the brute force is
/// 1024-bit MPFR on every argument: minutes on one core for binary16).
fn on_every_core<T: Sync>(cases: &[T], check: impl Fn(&T) + Sync) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..cores.min(cases.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                check(case);
            });
        }
    });
}

#[test]
#[ignore = "long: run by `bash scripts/test.sh --long`"]
fn far_regions_every_argument_binary16() {
    let all = ("-0x1.ffcp+15", "0x1.ffcp+15");
    let cases = [
        (Function::Tanh, "0x1p+0"),
        (Function::Erf, "0x1p+0"),
        (Function::Erfc, "0x1p+1"),
        (Function::Expm1, "-0x1p+0"),
        (Function::Exp2m1, "-0x1p+0"),
        (Function::Exp10m1, "-0x1p+0"),
    ];
    on_every_core(&cases, |&(f, like)| {
        let r = compare(f, "binary16", all.0, all.1, 7, 10);
        let runs = trivial_runs(&r);
        assert!(runs.iter().any(|(l, _)| *l == like), "{f}: {runs:?}");
    });
}

#[test]
#[ignore = "long: run by `bash scripts/test.sh --long`"]
fn far_regions_every_argument_bfloat16() {
    let all = ("-0x1.fep+127", "0x1.fep+127");
    let cases = [
        (Function::Tanh, "-0x1p+0"),
        (Function::Erf, "-0x1p+0"),
        (Function::Erfc, "0x1p+1"),
        (Function::Expm1, "-0x1p+0"),
        (Function::Exp10m1, "-0x1p+0"),
        (Function::Atanpi, "0x1p-1"),
    ];
    on_every_core(&cases, |&(f, like)| {
        let r = compare(f, "bfloat16", all.0, all.1, 5, 10);
        let runs = trivial_runs(&r);
        assert!(runs.iter().any(|(l, _)| *l == like), "{f}: {runs:?}");
    });
}

/// binary32 slices across the edge of a trivial region, near 0 (exp both signs, sin, cos,
/// expm1) and far (tanh, erf, erfc, expm1): a trivial run, clear pieces beyond it, nothing
/// walked argument by argument, against the brute force.
#[test]
#[ignore = "long: run by `bash scripts/test.sh --long`"]
fn bands_beyond_trivial_regions_binary32() {
    use Function::*;
    for (f, from, to) in [
        // exp: G = 2^24 (1 + x), d = 2^24 x: the edge at 2^-40 (k = 16); below 1 at 2^-41.
        (Exp, "0x1.fep-41", "0x1.01p-40"),
        (Exp, "-0x1.01p-41", "-0x1.fep-42"),
        // sin: d about 2^(24+2E) t^3/6, the edge at t = 6^(1/3) in the binade 2^-20.
        (Sin, "0x1.d0p-20", "0x1.d2p-20"),
        // cos: d about 2^24 x^2, the edge at 2^-20; expm1: 2^(23+E) t^2, at 2^-40 sqrt(2).
        (Cos, "0x1.ffp-21", "0x1.01p-20"),
        (Expm1, "0x1.68p-40", "0x1.6cp-40"),
        // Far: tanh, erf near 1, erfc near 2, expm1 near -1.
        (Tanh, "0x1.d1p+3", "0x1.d2p+3"),
        (Erf, "0x1.46p+2", "0x1.48p+2"),
        (Erfc, "-0x1.44p+2", "-0x1.43p+2"),
        (Expm1, "-0x1.c7p+4", "-0x1.c5p+4"),
    ] {
        let r = compare(f, "binary32", from, to, 16, 16);
        assert!(!trivial_runs(&r).is_empty(), "{f} [{from}, {to}): a run");
        assert!(r.stats.clear_arguments > 0, "{f} [{from}, {to}): clear");
        assert!(
            r.stats.phase3_arguments + r.stats.exhaustive_arguments < 4096,
            "{f} [{from}, {to}): {:?}",
            r.stats
        );
    }
}

/// binary64 far out: tanh on [20, 40] and expm1 on [-800, -40] (every argument d below 2^-44
/// or clear) finish in seconds, with runs, nothing searched argument by argument, no error.
#[test]
fn binary64_far_regions_finish() {
    let fmt: Format = "binary64".parse().unwrap();
    for (f, from, to, like) in [
        (Function::Tanh, "20", "40", "0x1p+0"),
        (Function::Expm1, "-800", "-40", "-0x1p+0"),
        (Function::Erfc, "-40", "-6", "0x1p+1"),
    ] {
        let t = Instant::now();
        let units = split_range_in(f, fmt, from, to, None).unwrap();
        let cfg = SearchConfig::in_format(f, fmt, 44);
        let r = search_units(&cfg, &units, &Cpu, &|_| {}).unwrap();
        let runs = trivial_runs(&r);
        assert!(runs.len() == 1 && runs[0].0 == like, "{f}: {runs:?}");
        let trivial: u64 = runs.iter().map(|r| r.1).sum();
        let searched = r.stats.phase3_arguments + r.stats.exhaustive_arguments;
        assert!(searched < 100_000, "{f}: {:?}", r.stats);
        // Everything but a few pieces at the run's edge is clear or trivial.
        assert!(
            r.stats.clear_arguments + trivial >= r.arguments - (1 << 32),
            "{f}: {:?}",
            r.stats
        );
        assert!(t.elapsed().as_secs() < 60, "{f}: {:?}", t.elapsed());
    }
}

/// exp2m1 at `x = -(k + p + 1)` has `d = 2^-k` exactly (`2^x - 1` is dyadic), and
/// every argument beyond it `d < 2^-k`. A unit that starts there is one trivial run of `k`
/// bits (the bound `2^-k` is inclusive), not `2^U` HR-cases listed one by one (binary32: 262,144
/// of them; binary64 aborted on a 1.9 GB list), in binary16, bfloat16 and binary32 against the
/// brute force over every argument, the coordinator's runs equal to the search's.
#[test]
fn a_unit_that_starts_on_a_runs_edge_is_a_run() {
    for (format, from, to, k, unit_bits) in [
        // Edges at -(7 + 11 + 1) = -19, -(5 + 8 + 1) = -14, -(16 + 24 + 1) = -41: units of one
        // unit of x each, so the second unit starts on the edge.
        ("binary16", "-0x1.4p+4", "-0x1.2p+4", 7, 6),
        ("bfloat16", "-0x1.ep+3", "-0x1.ap+3", 5, 4),
        ("binary32", "-0x1.5p+5", "-0x1.4p+5", 16, 18),
    ] {
        let r = compare(Function::Exp2m1, format, from, to, k, unit_bits);
        assert!(
            r.hr_cases.is_empty(),
            "{format}: {} cases",
            r.hr_cases.len()
        );
        let runs: Vec<_> = r
            .skipped
            .iter()
            .filter_map(|s| s.trivial.as_ref())
            .collect();
        assert!(
            runs.len() == 1 && runs[0].bits == k && runs[0].like == "-0x1p+0",
            "{format}: {runs:?}"
        );
        assert!(
            r.stats.phase3_arguments + r.stats.exhaustive_arguments == 0,
            "{format}: {:?}",
            r.stats
        );
    }
    // binary64 with default units (2^40 arguments): one run through x = -94, the rest clear.
    let fmt: Format = "binary64".parse().unwrap();
    let units = split_range_in(Function::Exp2m1, fmt, "-0x1.79p+6", "-0x1.77p+6", None).unwrap();
    let cfg = SearchConfig::in_format(Function::Exp2m1, fmt, 40);
    let r = search_units(&cfg, &units, &Cpu, &|_| {}).unwrap();
    assert!(r.hr_cases.is_empty(), "{} cases", r.hr_cases.len());
    let runs = trivial_runs(&r);
    assert_eq!(runs, [("-0x1p+0", (1 << 44) + 1)]);
    assert_eq!(r.stats.clear_arguments, r.arguments - runs[0].1);
}
