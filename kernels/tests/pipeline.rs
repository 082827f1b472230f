//! The whole pipeline against MPFR brute force at small precisions: identical HR-case sets,
//! identical bits and kinds, for both existence tests.

mod common;

use common::hardness;
use rug::Float;
use std::collections::BTreeMap;
use tmd_kernels::oracle::verify::Kind;
use tmd_kernels::plan::split_range;
use tmd_kernels::search::existence::Test;
use tmd_kernels::search::{search_units, Cpu, RangeResult, SearchConfig, SteepSplit};
use tmd_kernels::{Function, Precision};

/// Brute force, independent of the engine's verification: every argument at 256 bits.
fn brute_force(
    f: Function,
    p: Precision,
    from: &str,
    to: &str,
    k: u32,
) -> (BTreeMap<String, (u32, Kind)>, Vec<String>) {
    let units = split_range(f, p, from, to, Some(30)).unwrap();
    let mut hard = BTreeMap::new();
    let mut exact = Vec::new();
    let pb = p.bits() as i32;
    let threshold = Float::with_val(64, 1) >> k;
    for u in units {
        for o in 0..u.count {
            let a = u.argument(o);
            let x = a.to_float(p);
            let (y, ord) = f.eval(&x, 256);
            if y.is_zero() {
                exact.push(a.to_hex(p));
                continue;
            }
            let e_y = y.get_exp().unwrap() - 1;
            let mut g = Float::with_val(256, y.abs_ref());
            g <<= pb - e_y;
            let n = Float::with_val(256, g.round_ref());
            let d = Float::with_val(256, &g - &n).abs();
            if d.is_zero() && ord == std::cmp::Ordering::Equal {
                exact.push(a.to_hex(p));
            } else if d <= threshold {
                let bits = hardness(&d);
                let kind = if n.to_integer().unwrap().is_even() {
                    Kind::Fp
                } else {
                    Kind::Mid
                };
                hard.insert(a.to_hex(p), (bits, kind));
            }
        }
    }
    (hard, exact)
}

include!("common/steep_cases.rs");

/// The brute force took the floor after rounding `-log2 d` to an f64, one
/// too many where `d` lies just above a power of two.
#[test]
fn brute_force_hardness_is_exact() {
    let mut d = Float::with_val(256, 1) >> 46u32;
    d += Float::with_val(256, 1) >> 120u32;
    assert_eq!(hardness(&d), 45);
    assert_eq!(hardness(&(Float::with_val(256, 1) >> 46u32)), 46);
    assert_eq!(hardness(&Float::with_val(256, 0.75)), 0);
}

fn engine(
    f: Function,
    p: Precision,
    from: &str,
    to: &str,
    k: u32,
    test: Test,
    u: u32,
) -> RangeResult {
    let units = split_range(f, p, from, to, Some(u)).unwrap();
    let mut cfg = SearchConfig::new(f, p, k);
    cfg.test = test;
    search_units(&cfg, &units, &Cpu, &|_| {}).unwrap()
}

/// The engine's result `r` has the brute force's HR-cases and exact cases (`want`,
/// `want_exact`), and went through the polynomial path; `what` names the case in a failure.
fn check(r: &RangeResult, want: &BTreeMap<String, (u32, Kind)>, want_exact: &[String], what: &str) {
    let got: BTreeMap<String, (u32, Kind)> = r
        .hr_cases
        .iter()
        .map(|c| (c.x.clone(), (c.bits, c.kind)))
        .collect();
    assert_eq!(&got, want, "{what}");
    let got_exact: Vec<String> = r.exact_cases.iter().map(|e| e.x.clone()).collect();
    assert_eq!(got_exact, want_exact, "{what}: exact cases");
    assert!(
        r.stats.exhaustive_arguments < r.arguments,
        "{what}: the polynomial path must be exercised ({:?})",
        r.stats
    );
    assert!(r.stats.domains > 0, "{what}: {:?}", r.stats);
}

fn compare(f: Function, bits: u32, from: &str, to: &str, k: u32, unit_bits: u32) {
    let p = Precision::new(bits).unwrap();
    let (want, want_exact) = brute_force(f, p, from, to, k);
    assert!(
        !want.is_empty(),
        "{f} p={bits} [{from},{to}) k={k}: choose k so that cases exist"
    );
    let mut per_test = Vec::new();
    for test in [Test::Regular, Test::Lefevre] {
        let r = engine(f, p, from, to, k, test, unit_bits);
        let what = format!("{f} p={bits} [{from},{to}) k={k} {test:?}");
        check(&r, &want, &want_exact, &what);
        // Verified candidates are exactly the cases the polynomial pieces found.
        let found = (r.hr_cases.len() + r.exact_cases.len()) as u64;
        assert!(r.stats.candidates - r.stats.false_positives <= found);
        per_test.push(r.hr_cases);
    }
    assert_eq!(
        per_test[0], per_test[1],
        "both tests give identical HR-cases"
    );
}

#[test]
fn precision_16_whole_binades() {
    compare(Function::Exp, 16, "0x1p+0", "0x1p+1", 12, 14);
    compare(Function::Log, 16, "0x1p+1", "0x1p+3", 12, 14);
    compare(Function::Sin, 16, "0x1p-2", "0x1p+1", 12, 13);
    compare(Function::Cbrt, 16, "0x1p+4", "0x1p+6", 12, 14);
}

#[test]
fn precision_20_binades() {
    compare(Function::Exp2, 20, "-0x1p+2", "-0x1p+1", 15, 16);
    compare(Function::Cos, 20, "0x1p-1", "0x1p+0", 15, 16);
    compare(Function::Atan, 20, "0x1p+0", "0x1p+1", 15, 16);
    compare(Function::Tanh, 20, "0x1p-3", "0x1p-2", 15, 16);
    compare(Function::Log2, 20, "0x1.8p+0", "0x1p+1", 15, 16);
}

#[test]
fn precision_24_slices() {
    compare(Function::Exp, 24, "0x1p+0", "0x1.08p+0", 15, 18);
    compare(Function::Expm1, 24, "-0x1p-4", "-0x1.f8p-5", 15, 18);
    compare(Function::Log1p, 24, "0x1p-3", "0x1.04p-3", 14, 18);
    compare(Function::Sinh, 24, "0x1p+1", "0x1.04p+1", 15, 18);
    compare(Function::Asinh, 24, "0x1p+2", "0x1.04p+2", 15, 18);
    compare(Function::Log10, 24, "0x1p+3", "0x1.04p+3", 15, 18);
    compare(Function::Tan, 24, "0x1p-1", "0x1.04p-1", 15, 18);
}

/// A route against the brute force: `[from, to)` searched with both tests on the
/// configuration `route` makes of the default, each result with the brute force's HR-cases and
/// exact cases and judged by `changed` against the result of `baseline` (the regular test).
fn route_against_brute_force(
    (f, bits, from, to, k, u): (Function, u32, &str, &str, u32, u32),
    baseline: impl Fn(&mut SearchConfig),
    route: impl Fn(&mut SearchConfig),
    changed: impl Fn(&str, &RangeResult, &RangeResult),
) {
    let p = Precision::new(bits).unwrap();
    let (want, want_exact) = brute_force(f, p, from, to, k);
    assert!(
        !want.is_empty(),
        "{f} p={bits} [{from},{to}) k={k}: no cases"
    );
    let units = split_range(f, p, from, to, Some(u)).unwrap();
    let run = |test, adjust: &dyn Fn(&mut SearchConfig)| {
        let mut cfg = SearchConfig::new(f, p, k);
        cfg.test = test;
        adjust(&mut cfg);
        search_units(&cfg, &units, &Cpu, &|_| {}).unwrap()
    };
    let base = run(Test::Regular, &baseline);
    for test in [Test::Regular, Test::Lefevre] {
        let r = run(test, &route);
        let what = format!("{f} p={bits} [{from},{to}) k={k} {test:?}");
        check(&r, &want, &want_exact, &what);
        changed(&what, &r, &base);
    }
}

/// Steep regions (exp and sinh far from 0, tan next to its pole at pi/2, exp of a
/// negative argument) with the steep split forced on (`max_limbs: 0`): every steep piece of
/// `128` domains or more halves. The HR-cases and exact cases are the brute force's, with both
/// tests, on more pieces than the default route (which never splits at these precisions), with
/// phase 1's quadratic screen (the default) and with the line test alone.
#[test]
fn steep_regions_split_against_brute_force() {
    for (case, quadratic) in STEEP_CASES
        .into_iter()
        .flat_map(|c| [(c, true), (c, false)])
    {
        route_against_brute_force(
            case,
            |cfg| cfg.gen.quadratic = quadratic,
            |cfg| {
                cfg.gen.quadratic = quadratic;
                cfg.steep = SteepSplit {
                    max_limbs: 0,
                    max_limbs_screened: 0,
                    min_domains: 128,
                }
            },
            |what, r, default| {
                assert!(
                    r.stats.pieces > default.stats.pieces,
                    "{what}: the split must happen ({:?} against {:?})",
                    r.stats,
                    default.stats
                )
            },
        );
    }
}

/// The check of a route that must walk fewer domains than its baseline, `claim` saying why.
fn fewer_domains(claim: String) -> impl Fn(&str, &RangeResult, &RangeResult) {
    move |what, r, baseline| {
        assert!(
            r.stats.domains < baseline.stats.domains,
            "{what}: {claim} ({:?} against {:?})",
            r.stats,
            baseline.stats
        )
    }
}

/// Phase 1's quadratic screen in the steep regions: larger domains than the line
/// test's, whose line points within its threshold are checked against the quadratic. The
/// HR-cases and exact cases are the brute force's with both tests (phase 2's), on fewer
/// domains than with the line test alone.
#[test]
fn steep_regions_screened_against_brute_force() {
    // Where the quadratic residual, not the cubic terms, sets the line's domains at these
    // precisions.
    let cases = [
        (Function::Exp, 24, "0x1p+4", "0x1.08p+4", 15, 18),
        (Function::Exp, 24, "0x1p+2", "0x1.1p+2", 15, 18),
        (Function::Exp, 24, "-0x1.1p+2", "-0x1p+2", 15, 18),
        (Function::Sinh, 24, "0x1p+3", "0x1.08p+3", 15, 18),
        (Function::Tan, 24, "0x1.6p+0", "0x1.64p+0", 15, 18),
        (Function::Exp2, 24, "0x1p+3", "0x1.08p+3", 15, 18),
    ];
    for case in cases {
        route_against_brute_force(
            case,
            |cfg| cfg.gen.quadratic = false,
            |cfg| cfg.gen.quadratic = true,
            fewer_domains("the screen's domains must be larger".into()),
        );
    }
}

/// §16: screened domains rise above `domain_bits` up to `flat_domain_bits`, bound by
/// the points per domain and the left-out terms only. At these precisions `k - 4` caps domains
/// at 11 and the screen's points at 7, so the rise is forced from a smaller `domain_bits` (6,
/// above the line's 5): the HR-cases and exact cases are the brute force's with both tests, on
/// fewer domains than with screened domains held to `domain_bits`.
#[test]
fn screened_domains_rise_against_brute_force() {
    let cases = [
        (Function::Exp, 24, "0x1p+2", "0x1.1p+2", 15, 18),
        (Function::Exp, 24, "-0x1.1p+2", "-0x1p+2", 15, 18),
        (Function::Sinh, 24, "0x1p+2", "0x1.1p+2", 15, 18),
        (Function::Exp2, 24, "0x1p+2", "0x1.1p+2", 15, 18),
    ];
    let domains = |flat_bits| {
        move |cfg: &mut SearchConfig| {
            cfg.gen.domain_bits = 6;
            cfg.gen.flat_domain_bits = flat_bits;
        }
    };
    for case in cases {
        route_against_brute_force(
            case,
            domains(6),
            domains(11),
            fewer_domains("screened domains must rise".into()),
        );
    }
}

/// Domains larger than `domain_bits` where `f` is flat. At these precisions `k - 4`
/// caps the domain size below the published 15, so the rise is forced from a smaller
/// `domain_bits` (5) to `flat_domain_bits` (11): the HR-cases and exact cases are the brute
/// force's with both tests, on fewer domains than without the rise, for the line's rise
/// (`rise_pays`) and for the quadratic screen (the default: it takes the pieces whose line
/// stays below 11, flat or not, §16).
#[test]
#[ignore = "long: run by `bash scripts/test.sh --long`"]
fn flat_regions_rise_against_brute_force() {
    let cases = [
        (Function::Exp, 20, "0x1p-4", "0x1p-3", 15, 16),
        (Function::Cos, 20, "0x1p-6", "0x1p-5", 15, 16),
        (Function::Sin, 20, "0x1p-5", "0x1p-4", 15, 16),
        (Function::Expm1, 20, "-0x1p-8", "-0x1p-9", 15, 16),
        // Some units rise, some do not.
        (Function::Log, 20, "0x1p+6", "0x1p+7", 15, 16),
        (Function::Atan, 20, "0x1p+2", "0x1p+3", 15, 16),
    ];
    let domains = |flat_bits, quadratic| {
        move |cfg: &mut SearchConfig| {
            cfg.gen.domain_bits = 5;
            cfg.gen.flat_domain_bits = flat_bits;
            cfg.gen.quadratic = quadratic;
        }
    };
    for (case, quadratic) in cases.into_iter().flat_map(|c| [(c, false), (c, true)]) {
        route_against_brute_force(
            case,
            domains(5, false),
            domains(11, quadratic),
            fewer_domains(format!("the domains must grow (screen {quadratic})")),
        );
    }
}

#[test]
fn output_binade_crossings_and_exact_cases() {
    // exp crosses 2 at ln 2 ~ 0x1.62e43p-1; log is exactly 0 at 1; cbrt exact at cubes.
    compare(Function::Exp, 20, "0x1.5p-1", "0x1.7p-1", 12, 16);
    compare(Function::Log, 20, "0x1.fp-1", "0x1.1p+0", 15, 14);
    compare(Function::Cbrt, 20, "0x1p+3", "0x1.2p+3", 15, 16);
}

/// What the daemon compiles ahead of its first units (`piece_modules`) is exactly
/// what their pieces then ask a back end for: one unit piece, units that split, trivial runs
/// and an exact run.
#[test]
fn piece_modules_are_the_modules_a_unit_runs() {
    use std::sync::Mutex;
    use tmd_kernels::search::generation::Generated;
    use tmd_kernels::search::{piece_modules, search_unit, Backend, PieceOutcome, SearchError};

    /// The CPU back end, noting each piece's (limbs, degree).
    struct Noting(Mutex<Vec<(usize, usize)>>);
    impl Backend for Noting {
        fn search_piece(
            &self,
            g: &Generated,
            test: Test,
            packet_domains: u64,
        ) -> Result<PieceOutcome, SearchError> {
            self.0.lock().unwrap().push((g.limbs, g.degree));
            Cpu.search_piece(g, test, packet_domains)
        }
        fn name(&self) -> String {
            "noting".into()
        }
    }

    let cases = [
        (Function::Exp, 24, "0x1p+0", "0x1.2p+0", 16, 18),
        (Function::Sin, 24, "0x1p+0", "0x1p+1", 16, 23),
        (Function::Log, 20, "0x1p-1", "0x1p+0", 14, 19),
        (Function::Exp, 24, "0x1p-30", "0x1p-24", 16, 22),
        (Function::Exp2, 24, "0x1p+24", "0x1.1p+24", 16, 20),
    ];
    let mut generated = 0;
    for (f, bits, from, to, k, unit_bits) in cases {
        let p = Precision::new(bits).unwrap();
        let cfg = SearchConfig::new(f, p, k);
        for u in split_range(f, p, from, to, Some(unit_bits)).unwrap() {
            let noting = Noting(Mutex::new(Vec::new()));
            search_unit(&cfg, u, &noting).unwrap();
            let mut seen = noting.0.into_inner().unwrap();
            seen.sort_unstable();
            seen.dedup();
            generated += seen.len();
            assert_eq!(
                piece_modules(&cfg, u),
                seen,
                "{} {from}..{to} {u:?}",
                f.name()
            );
        }
    }
    assert!(generated > 0, "no case generated a piece");
}
