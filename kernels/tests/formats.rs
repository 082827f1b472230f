//! Named formats against an independent MPFR brute force: results on the subnormal grid,
//! overflowing and underflowing results skipped and listed, never silently; binary16 and
//! bfloat16 over every argument, binary32 slices where exp is subnormal, underflows and
//! overflows (the polynomial path), negative ranges at binade edges; zero and subnormal
//! arguments, exact cases at 0, trivial runs proven argument by argument.

mod common;

use common::{brute_force, engine, hardness, Truth};
use rug::float::Round;
use rug::Float;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use tmd_kernels::numbers::format::{parse_number, Format};
use tmd_kernels::oracle::verify::{Kind, SkipReason};
use tmd_kernels::plan::split_range_in;
use tmd_kernels::search::existence::Test;
use tmd_kernels::search::{search_units, Cpu, RangeResult, SearchConfig};
use tmd_kernels::Function;

/// The engine equals the brute force: the same HR-cases with the same bits and kinds, the
/// same exact cases, and skipped runs that hold exactly the skipped arguments, each with its
/// reason; every argument of a trivial run is, by the brute force, an HR-case with at least
/// the run's bits (or exact). Returns the engine's result (Regular test) for further checks.
fn compare(f: Function, name: &str, from: &str, to: &str, k: u32, unit_bits: u32) -> RangeResult {
    compare_in(f, name.parse().unwrap(), from, to, k, unit_bits)
}

/// As [`compare`], in any format (a precision with an exponent range of the test's choosing).
fn compare_in(
    f: Function,
    fmt: Format,
    from: &str,
    to: &str,
    k: u32,
    unit_bits: u32,
) -> RangeResult {
    let name = fmt.name();
    let p = fmt.precision;
    let truth = brute_force(f, fmt, from, to, k);
    let mut results = Vec::new();
    for test in [Test::Regular, Test::Lefevre] {
        let mut want = Truth {
            hard: truth.hard.clone(),
            exact: truth.exact.clone(),
            lattice: truth.lattice,
            skipped: truth.skipped.clone(),
        };
        let mut r = engine(f, fmt, from, to, k, unit_bits, |c| c.test = test);
        let full = r.clone();
        // Trivial runs: every argument in them hard enough (or exact) by the brute force; then
        // they leave both sides.
        let value = |x: &str| parse_number(x, p.bits(), Round::Nearest).unwrap();
        let mut trivial = Vec::new();
        for s in r.skipped.iter().filter(|s| s.reason == SkipReason::Trivial) {
            let (a, b) = (value(&s.first), value(&s.last));
            let (lo, hi) = (a.clone().min(&b), a.max(&b));
            let t = s.trivial.as_ref().expect("a trivial run's rule");
            assert!(t.bits >= k, "{f} {name}: {s:?}");
            let inside = |x: &String| {
                let v = value(x);
                lo <= v && v <= hi
            };
            let hard: Vec<&String> = want.hard.keys().filter(|x| inside(x)).collect();
            for x in &hard {
                assert!(
                    want.hard[*x].0 >= t.bits,
                    "{f} {name}: {x} {:?} in {s:?}",
                    want.hard[*x]
                );
            }
            let exact = want.exact.iter().filter(|x| inside(x)).count();
            assert_eq!(
                hard.len() + exact,
                s.count as usize,
                "{f} {name}: every argument of {s:?} is hard or exact"
            );
            trivial.push((lo, hi));
        }
        let outside = |x: &String| {
            let v = value(x);
            !trivial.iter().any(|(lo, hi)| *lo <= v && v <= *hi)
        };
        want.hard.retain(|x, _| outside(x));
        want.exact.retain(|x| outside(x));
        r.skipped.retain(|s| s.reason != SkipReason::Trivial);
        let got: BTreeMap<String, (u32, Kind)> = r
            .hr_cases
            .iter()
            .map(|c| (c.x.clone(), (c.bits, c.kind)))
            .collect();
        assert_eq!(got, want.hard, "{f} {name} [{from},{to}) k={k} {test:?}");
        let got_exact: Vec<String> = r.exact_cases.iter().map(|e| e.x.clone()).collect();
        let mut want_exact = want.exact.clone();
        let mut got_sorted = got_exact.clone();
        want_exact.sort();
        got_sorted.sort();
        assert_eq!(got_sorted, want_exact, "{f} {name} exact cases");
        let counted: u64 = r.exact_lattices.iter().map(|l| l.count).sum();
        assert_eq!(counted, want.lattice, "{f} {name} exact cases on lattices");
        // Every skipped argument lies in a listed run of its reason, and the runs hold no more.
        let listed: u64 = r.skipped.iter().map(|s| s.count).sum();
        assert_eq!(
            listed,
            want.skipped.len() as u64,
            "{f} {name}: skipped arguments"
        );
        let runs: Vec<(Float, Float, SkipReason)> = r
            .skipped
            .iter()
            .map(|s| {
                let a = parse_number(&s.first, p.bits(), Round::Nearest).unwrap();
                let b = parse_number(&s.last, p.bits(), Round::Nearest).unwrap();
                (a.clone().min(&b), a.max(&b), s.reason)
            })
            .collect();
        for (x, reason) in &want.skipped {
            let v = parse_number(x, p.bits(), Round::Nearest).unwrap();
            assert!(
                runs.iter()
                    .any(|(lo, hi, r)| *lo <= v && v <= *hi && r == reason),
                "{f} {name}: {x} ({reason:?}) is not listed as skipped: {:?}",
                r.skipped
            );
        }
        results.push(full);
    }
    assert_eq!(results[0].hr_cases, results[1].hr_cases);
    assert_eq!(results[0].skipped, results[1].skipped);
    results.swap_remove(0)
}

#[test]
#[ignore = "long: run by `bash scripts/test.sh --long`"]
fn binary16_every_argument() {
    let all = ("-0x1.ffcp+15", "0x1.ffcp+15");
    for f in [
        Function::Exp,
        Function::Exp2,
        Function::Exp10,
        Function::Sinh,
        Function::Cosh,
    ] {
        let r = compare(f, "binary16", all.0, all.1, 7, 10);
        assert!(!r.hr_cases.is_empty() && !r.skipped.is_empty(), "{f}");
    }
    let r = compare(Function::Erfc, "binary16", "0x1p-14", all.1, 7, 10);
    assert!(r.skipped.iter().any(|s| s.reason == SkipReason::Underflow));
    // expm1 rounds like -1 below about -2^14 (d about 2^(-2^16)), beyond this brute force
    // (tests/far_regions.rs covers it).
    compare(Function::Expm1, "binary16", "-0x1p+8", all.1, 7, 10);
    for f in [Function::Sin, Function::Cos, Function::Tan] {
        compare(f, "binary16", all.0, all.1, 7, 10);
    }
    compare(Function::Log, "binary16", "0x1p-14", all.1, 7, 10);
}

#[test]
fn bfloat16_every_argument() {
    let all = ("-0x1.fep+127", "0x1.fep+127");
    for f in [Function::Exp, Function::Cosh] {
        let r = compare(f, "bfloat16", all.0, all.1, 5, 10);
        assert!(!r.skipped.is_empty(), "{f}");
    }
    // Where exp2m1 and erfc round like -1 and 2 (x far below 0), d is about 2^(-2^127), beyond
    // this brute force: tests/far_regions.rs judges those runs through the complement.
    for f in [Function::Exp2m1, Function::Erfc] {
        let r = compare(f, "bfloat16", "-0x1p+3", all.1, 5, 10);
        assert!(!r.skipped.is_empty(), "{f}");
    }
    // sin, cos and tan of every bfloat16 argument, 2^127 included: the planned whole range.
    for f in [Function::Sin, Function::Cos, Function::Tan] {
        let r = compare(f, "bfloat16", all.0, all.1, 5, 10);
        assert!(!r.hr_cases.is_empty(), "{f}");
    }
}

#[test]
fn binary32_subnormal_results_on_the_polynomial_path() {
    // The example: exp is subnormal here; -0x1.8feebp+6 is about 16.3 bits hard on the
    // real grid, -0x1.8ff9eap+6 only about 1.3.
    let r = compare(
        Function::Exp,
        "binary32",
        "-0x1.9p+6",
        "-0x1.8fe8p+6",
        12,
        16,
    );
    let xs: Vec<&str> = r.hr_cases.iter().map(|c| c.x.as_str()).collect();
    assert!(xs.contains(&"-0x1.8feebp+6"), "{xs:?}");
    assert!(!xs.contains(&"-0x1.8ff9eap+6"), "{xs:?}");
    // Wholly subnormal, across 2^-126, deep subnormal (polynomial pieces of 2^16 arguments).
    for (from, to) in [
        ("-0x1.62p+6", "-0x1.6p+6"),
        ("-0x1.5ep+6", "-0x1.5dp+6"),
        ("-0x1.9p+6", "-0x1.8p+6"),
    ] {
        let r = compare(Function::Exp, "binary32", from, to, 12, 16);
        assert!(
            r.stats.domains > 0,
            "[{from}, {to}): the polynomial path runs"
        );
    }
    // Into underflow and into overflow: listed, split down to the argument.
    let r = compare(
        Function::Exp,
        "binary32",
        "-0x1.a4p+6",
        "-0x1.a2p+6",
        12,
        16,
    );
    assert!(r.skipped.iter().all(|s| s.reason == SkipReason::Underflow) && !r.skipped.is_empty());
    let r = compare(Function::Exp, "binary32", "0x1.62p+6", "0x1.64p+6", 12, 16);
    assert!(r.skipped.iter().all(|s| s.reason == SkipReason::Overflow) && !r.skipped.is_empty());
    // Negative ranges at binade edges.
    compare(Function::Exp, "binary32", "-0x1p+1", "-0x1.fffp+0", 12, 12);
    compare(
        Function::Expm1,
        "binary32",
        "-0x1.002p+0",
        "-0x1p+0",
        12,
        12,
    );
}

#[test]
fn a_bare_precision_is_unbounded_and_says_so() {
    let fmt: Format = "p24".parse().unwrap();
    assert!(fmt.exponents.is_none());
    assert!(fmt.describe().contains("unbounded"));
    let named: Format = "binary32".parse().unwrap();
    assert_eq!(named.precision, fmt.precision);
    assert_eq!(named.name(), "binary32");
    assert_eq!("binary80".parse::<Format>().unwrap().precision.bits(), 64);
    // exp near -100 in p24: judged as a 24-bit number, nothing skipped.
    let r = engine(
        Function::Exp,
        fmt,
        "-0x1.a4p+6",
        "-0x1.a2p+6",
        12,
        16,
        |c| c.test = Test::Regular,
    );
    assert!(r.skipped.is_empty() && !r.hr_cases.is_empty());
}

/// tanpi over [1, 2) holds its pole 1.5: the pole is a point of the lattice of quarters,
/// counted in its run and never judged, every other argument searched, against the brute force.
#[test]
fn tanpi_splits_at_its_pole() {
    for name in ["p16", "binary16"] {
        let fmt: Format = name.parse().unwrap();
        let p = fmt.precision;
        let units = split_range_in(Function::Tanpi, fmt, "1", "2", Some(12)).unwrap();
        let mut cfg = SearchConfig::in_format(Function::Tanpi, fmt, 10);
        cfg.test = Test::Regular;
        let r = search_units(&cfg, &units, &Cpu, &|_| {}).unwrap();
        assert!(r.skipped.is_empty(), "{name}: {:?}", r.skipped);
        // The brute force: every other argument at 1024 bits, judged as a precision-p number
        // (tanpi on [1, 2) stays within binary16's normal range).
        let mut want = BTreeMap::new();
        let mut exact = Vec::new();
        for u in &units {
            for o in 0..u.count {
                let a = u.argument(o);
                let hex = a.to_hex(p);
                if hex == "0x1.8p+0" {
                    continue;
                }
                let mut y = a.to_float(p);
                y.set_prec(1024);
                let ord = Function::Tanpi.eval_round(&mut y, Round::Nearest);
                if y.is_zero() {
                    exact.push(hex);
                    continue;
                }
                let e_y = y.get_exp().unwrap() - 1;
                let mut g = Float::with_val(1024, y.abs_ref());
                g <<= p.bits() as i32 - e_y;
                let n = g.clone().round().to_integer().unwrap();
                let d = Float::with_val(1024, &g - &n).abs();
                if d.is_zero() && ord == Ordering::Equal {
                    exact.push(hex);
                } else if d <= Float::with_val(64, 1) >> 10u32 {
                    let kind = if n.is_even() { Kind::Fp } else { Kind::Mid };
                    want.insert(hex, (hardness(&d), kind));
                }
            }
        }
        let got: BTreeMap<String, (u32, Kind)> = r
            .hr_cases
            .iter()
            .map(|c| (c.x.clone(), (c.bits, c.kind)))
            .collect();
        assert_eq!(got, want, "{name}");
        // 1, 1.25 and 1.75: all on the lattice of quarters, counted by its rule.
        assert!(r.exact_cases.is_empty(), "{name}: {:?}", r.exact_cases);
        assert_eq!(exact.len(), 3, "{name}");
        let lattice: Vec<(&str, &str, u64, u64)> = r
            .exact_lattices
            .iter()
            .map(|l| (l.first.as_str(), l.last.as_str(), l.count, l.poles))
            .collect();
        assert_eq!(lattice, [("0x1p+0", "0x1.cp+0", 3, 1)], "{name}");
    }
}

/// Zero is an argument of a named format's units: exact cases at 0 come out of the search
/// itself, against the brute force, in argument order; where `f(0)` is infinite (log, rsqrt) it
/// is listed as a pole. A bare precision's zero is a unit of its own, searched alike.
#[test]
fn exact_cases_at_zero() {
    // Eight subnormal numbers each side of 0 (trivial runs for most functions).
    let (from, to) = ("-0x1p-146", "0x1p-146");
    for (f, value) in [
        (Function::Exp, "0x1p+0"),
        (Function::Cos, "0x1p+0"),
        (Function::Cosh, "0x1p+0"),
        (Function::Erfc, "0x1p+0"),
        (Function::Cbrt, "0x0p+0"),
        (Function::Sin, "0x0p+0"),
        (Function::Acospi, "0x1p-1"),
        (Function::Atanh, "0x0p+0"),
    ] {
        let r = compare(f, "binary32", from, to, 12, 4);
        assert_eq!(r.arguments, 16, "{f}");
        let zero: Vec<_> = r.exact_cases.iter().filter(|e| e.x == "0x0p+0").collect();
        assert_eq!(zero.len(), 1, "{f}: {:?}", r.exact_cases);
        assert_eq!(zero[0].value, value, "{f}");
    }
    for f in [Function::Sqrt, Function::Log1p] {
        let r = compare(f, "binary32", "0", to, 12, 4);
        assert!(r.exact_cases.iter().any(|e| e.x == "0x0p+0"), "{f}");
    }
    for f in [Function::Log, Function::Rsqrt, Function::Log2] {
        let r = compare(f, "binary32", "0", to, 12, 4);
        assert_eq!(r.skipped[0].reason, SkipReason::Pole, "{f}");
        assert_eq!(
            (r.skipped[0].first.as_str(), r.skipped[0].count),
            ("0x0p+0", 1)
        );
    }
    // acos(0) = pi/2 is judged like any argument: not exact.
    let r = compare(Function::Acos, "binary32", from, to, 12, 4);
    assert!(r.exact_cases.iter().all(|e| e.x != "0x0p+0"));

    // A bare precision: zero is a unit of its own (significand 0 of the smallest binade),
    // judged in argument order, where f is defined there.
    let fmt: Format = "p24".parse().unwrap();
    for (f, value) in [(Function::Exp, "0x1p+0"), (Function::Cbrt, "0x0p+0")] {
        let cfg = SearchConfig::in_format(f, fmt, 12);
        let units = split_range_in(f, fmt, "-0x1.00001p-126", "0x1.00001p-126", Some(16)).unwrap();
        let zero: Vec<_> = units.iter().filter(|u| u.first == 0).collect();
        assert_eq!(zero.len(), 1, "{f}: {units:?}");
        assert_eq!((zero[0].exponent, zero[0].count), (-126, 1), "{f}");
        let r = search_units(&cfg, &units, &Cpu, &|_| {}).unwrap();
        // -(1 + 8 ulps) 2^-126 up to -2^-126, zero, 2^-126 up to (1 + 7 ulps) 2^-126.
        assert_eq!(r.arguments, 9 + 1 + 8, "{f}");
        let i = r.exact_cases.iter().position(|e| e.x == "0x0p+0").unwrap();
        assert_eq!(r.exact_cases[i].value, value, "{f}");
        assert!(
            r.exact_cases[..i].iter().all(|e| e.x.starts_with('-')),
            "{f}"
        );
    }
    // log is not defined at 0 with an unbounded exponent: no zero unit (a named format lists
    // it as a pole, above).
    let units = split_range_in(Function::Log, fmt, "0", "0x1.00001p-126", Some(16)).unwrap();
    assert!(units.iter().all(|u| u.first != 0), "{units:?}");
    // A range that holds nothing but zero and numbers below the normal ones is refused.
    assert!(split_range_in(Function::Exp, fmt, "0", "0x1p-130", Some(16)).is_err());
}

/// Subnormal arguments of binary32 (the fixed-point grid of the binade 2^-126): the polynomial
/// path on 2^16-argument units where `f` is not trivial there, trivial runs where it rounds
/// like `x` or like `f(0)`, ranges across 2^-126 on both signs; all against the brute force.
#[test]
fn binary32_subnormal_arguments() {
    use Function::*;
    for f in [Log, Cbrt, Rsqrt, Erf, Sinpi, Exp2m1] {
        let r = compare(f, "binary32", "0x1p-140", "0x1p-135", 12, 16);
        // (rsqrt and cbrt change too fast there for a polynomial: exhaustive pieces.)
        assert!(
            r.stats.domains > 0 || matches!(f, Rsqrt | Cbrt),
            "{f}: the polynomial path runs"
        );
        assert!(!r.hr_cases.is_empty(), "{f}");
    }
    for f in [Erf, Sinpi, Atanpi] {
        let r = compare(f, "binary32", "-0x1p-135", "-0x1p-140", 12, 16);
        assert!(r.stats.domains > 0, "{f}: the polynomial path runs");
    }
    // Rounds like x or like 1 on every subnormal number: one run per sign (the units' runs
    // merged), zero exact between them.
    for (f, like) in [
        (Sin, "x"),
        (Atan, "x"),
        (Expm1, "x"),
        (Exp, "0x1p+0"),
        (Cos, "0x1p+0"),
    ] {
        let r = compare(f, "binary32", "-0x1p-138", "0x1p-138", 12, 10);
        let runs: Vec<_> = r
            .skipped
            .iter()
            .filter(|s| s.reason == SkipReason::Trivial)
            .collect();
        assert!(
            runs.len() == 2 && r.hr_cases.is_empty(),
            "{f}: {:?}",
            r.skipped
        );
        assert!(
            runs.iter()
                .all(|s| s.trivial.as_ref().unwrap().like == like),
            "{f}"
        );
        let listed: u64 = runs.iter().map(|s| s.count).sum();
        assert_eq!(
            listed,
            r.arguments - 1,
            "{f}: every argument but 0 in a run"
        );
    }
    // Across 2^-126, subnormal to normal, both signs (binade edges).
    for f in [Erf, Log, Exp2m1] {
        compare(f, "binary32", "0x1.ffp-127", "0x1.01p-126", 12, 12);
    }
    for f in [Erf, Sinpi] {
        compare(f, "binary32", "-0x1.01p-126", "-0x1.ffp-127", 12, 12);
    }
}

/// A small precision with an exponent range of the test's choosing (p10, exponents -20..=20):
/// every argument, subnormal numbers and zero included, against the brute force; trivial runs
/// near 0 proven argument by argument.
#[test]
fn small_precision_with_an_exponent_range_every_argument() {
    use tmd_kernels::numbers::format::{Exponents, Precision};
    let fmt = Format {
        precision: Precision::new(10).unwrap(),
        exponents: Some(Exponents {
            emin: -20,
            emax: 20,
        }),
    };
    let all = ("-0x1.ff8p+20", "0x1.ff8p+20");
    // (Not erf, tanh or expm1: far out they round like ±1 with d below 2^-65536, beyond this
    // brute force; tests/far_regions.rs judges those runs, docs/error-analysis.md §11.)
    for f in [Function::Sin, Function::Exp, Function::Atan, Function::Cosh] {
        let r = compare_in(f, fmt, all.0, all.1, 7, 8);
        assert!(!r.hr_cases.is_empty(), "{f}");
        assert!(
            r.skipped.iter().any(|s| s.reason == SkipReason::Trivial),
            "{f}: a trivial region near 0"
        );
    }
}

/// A bare precision has no subnormal numbers, and says so: its units start at binary64's (or
/// binary32's) smallest normal binade, and a range below it is refused with the reason.
#[test]
fn a_bare_precision_has_no_subnormal_arguments() {
    let bare: Format = "p24".parse().unwrap();
    assert!(bare.describe().contains("no subnormal arguments"));
    let units = split_range_in(Function::Sin, bare, "0", "0x1p-125", Some(16)).unwrap();
    // Zero, then the normal numbers of the binade 2^-126.
    assert_eq!(
        (units[0].exponent, units[0].first, units[0].count),
        (-126, 0, 1)
    );
    assert!(units[1..]
        .iter()
        .all(|u| u.exponent == -126 && u.first >= 1 << 23));
    let e = split_range_in(Function::Sin, bare, "0", "0x1p-126", Some(16)).unwrap_err();
    assert!(e.to_string().contains("no subnormal"), "{e}");
    // The named format holds 2^23 subnormal numbers and zero there.
    let named: Format = "binary32".parse().unwrap();
    let units = split_range_in(Function::Sin, named, "0", "0x1p-126", Some(16)).unwrap();
    assert_eq!(units.iter().map(|u| u.count).sum::<u64>(), 1 << 23);
}

/// `-log2 d` of `x` at 2048 bits, computed apart from `verify.rs`: the grid of
/// `max(e_y, emin)`, the nearest breakpoint by rounding half to even (§7's ties), the top
/// binade's `2^(emax+1)` replaced by the midpoint below it.
fn neg_log2_d_at_2048(f: Function, fmt: Format, x: &Float) -> Float {
    let r = fmt.exponents.expect("a named format");
    let pb = fmt.precision.bits() as i32;
    let (y, _) = f.eval(x, 2048);
    let e_y = y.get_exp().expect("nonzero") - 1;
    let mut g = Float::with_val(2048, y.abs_ref());
    g <<= pb - e_y.max(r.emin);
    let mut n = Float::with_val(2048, g.round_even_ref());
    if e_y == r.emax && n == Float::with_val(8, 1) << (pb + 1) {
        n -= 1;
    }
    -Float::with_val(2048, &g - &n).abs().log2()
}

/// The printed `neg_log2_d` is a lower bound of `-log2 d`, within `10^-4` of it, and
/// its floor is `bits`, for every HR-case (at 3 bits) of every argument of binary16 and
/// bfloat16 for a few functions (log2p1 in bfloat16 at 2^109 printed 106.4713 above the true
/// 106.471234, from a `d` known to 13 bits).
#[test]
fn neg_log2_d_is_a_lower_bound() {
    use tmd_kernels::oracle::verify::{classify_in, Verdict};
    let k = 3;
    use Function::*;
    let mut checked = 0;
    // Every argument where f is defined (log2p1 above -1, arguments to the largest finite).
    let (bf, b16) = (
        ("-0x1.fep+127", "0x1.fep+127"),
        ("-0x1.ffcp+15", "0x1.ffcp+15"),
    );
    for (format, f, (from, to)) in [
        ("bfloat16", Log2p1, ("-0x1.fep-1", bf.1)),
        ("bfloat16", Exp, bf),
        ("bfloat16", Sin, bf),
        ("binary16", Log2p1, ("-0x1.ffcp-1", b16.1)),
        ("binary16", Cbrt, b16),
        ("binary16", Atanpi, b16),
    ] {
        let fmt: Format = format.parse().unwrap();
        let p = fmt.precision;
        for u in split_range_in(f, fmt, from, to, Some(30)).unwrap() {
            for o in 0..u.count {
                let a = u.argument(o);
                let Ok(Verdict::Hard(c)) = classify_in(f, fmt, &a, k) else {
                    continue;
                };
                let truth = neg_log2_d_at_2048(f, fmt, &a.to_float(p));
                let printed = Float::with_val(64, c.neg_log2_d);
                let below = Float::with_val(2048, &truth - &printed);
                assert!(
                    below >= 0 && below < 1.001e-4,
                    "{f} {format} {}: printed {} true {}",
                    c.x,
                    c.neg_log2_d,
                    truth.to_string_radix(10, Some(12))
                );
                assert_eq!(c.neg_log2_d.floor() as u32, c.bits, "{f} {}", c.x);
                checked += 1;
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
}

/// sinpi and cospi where binary32's arguments are multiples of `2^-4` and
/// `2^-9` (a period of 32 and 1024 arguments) search the first period of each unit and copy
/// its cases: the same HR-cases and exact cases as the brute force, both signs, at a threshold
/// with cases (tanpi, whose poles this oracle calls overflows, against MPFR argument by
/// argument in `periodic::tests`); and half the binade `2^19` (2^22 arguments, 524,288 exact
/// cases), which took about 17 s of CPU through MPFR (over 8 s on two cores), now takes well
/// under a second of it (bounded at 6 s of wall time for a loaded machine).
#[test]
fn periodic_functions_on_coarse_grids() {
    for f in [Function::Sinpi, Function::Cospi] {
        for (from, to) in [("0x1p+19", "0x1.002p+19"), ("-0x1.802p+14", "-0x1.8p+14")] {
            let r = compare(f, "binary32", from, to, 6, 14);
            assert!(!r.exact_lattices.is_empty(), "{f} [{from}, {to})");
        }
    }
    let fmt: Format = "binary32".parse().unwrap();
    let t = std::time::Instant::now();
    let units = split_range_in(Function::Sinpi, fmt, "0x1p+19", "0x1.8p+19", None).unwrap();
    let cfg = SearchConfig::in_format(Function::Sinpi, fmt, 16);
    let r = search_units(&cfg, &units, &Cpu, &|_| {}).unwrap();
    assert_eq!((r.hr_cases.len(), r.exact_cases.len()), (0, 0));
    let counted: Vec<u64> = r.exact_lattices.iter().map(|l| l.count).collect();
    assert_eq!(counted, [1 << 19]);
    assert!(t.elapsed().as_secs() < 6, "{:?}", t.elapsed());
}
