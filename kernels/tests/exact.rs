//! Exact regions against an MPFR brute force: the exact runs hold exactly the units whose every
//! argument is an exact case (tanpi: or a pole), for every function, over every argument of
//! binary16, of p10 with exponents -20..=20 and of slices of bare precisions; each argument's
//! value is the one the run's rule states; a binary64 range of 2^55 arguments finishes at once,
//! as one run per rule; the coordinator's recomputation (`skip.rs`) equals the search's runs.

use rug::float::Round;
use rug::Float;
use std::cmp::Ordering;
use std::time::Instant;
use tmd_kernels::numbers::format::{Argument, Exponents, Format, Precision};
use tmd_kernels::oracle::verify::SkipReason;
use tmd_kernels::plan::split_range_in;
use tmd_kernels::regions::exact::{exact_run, rule_value};
use tmd_kernels::regions::skip::skipped_runs;
use tmd_kernels::search::{search_unit, search_units, Cpu, SearchConfig};
use tmd_kernels::Function;

/// What MPFR says of one argument, judged directly on the format's grid.
#[derive(Debug, PartialEq)]
enum Truth {
    /// `f(x)` exact and a breakpoint of the format (a number or a midpoint), or zero.
    Exact(Float),
    /// An infinite or undefined value where `f` has poles.
    Pole,
    Other,
}

/// `f(x)` at 64 bits: a value exact there with its ternary value 0 is exact; one that is not
/// cannot be a breakpoint of a format of at most 11 bits either (exactness needs no more).
fn truth(f: Function, fmt: Format, a: &Argument) -> Truth {
    let p = fmt.precision.bits() as i32;
    let mut y = a.to_float(fmt.precision);
    y.set_prec(64);
    let ord = f.eval_round(&mut y, Round::Nearest);
    if !y.is_finite() {
        return if f.has_poles() && (y.is_nan() || ord == Ordering::Equal) {
            Truth::Pole
        } else {
            Truth::Other
        };
    }
    if ord != Ordering::Equal {
        return Truth::Other;
    }
    if y.is_zero() {
        return Truth::Exact(y);
    }
    let e_y = y.get_exp().unwrap() - 1;
    let e_g = match fmt.exponents {
        Some(r) if e_y > r.emax => return Truth::Other,
        Some(r) => e_y.max(r.emin),
        None => e_y,
    };
    let mut g = Float::with_val(64, y.abs_ref());
    g <<= p - e_g;
    if g.is_integer() && g >= 1 {
        Truth::Exact(y)
    } else {
        Truth::Other
    }
}

/// For every unit of `[from, to)` in the binade `2^binade` (units of `2^unit_bits`): the unit
/// is an exact run exactly when MPFR finds every argument of it exact (or a pole); in a run,
/// every value is the rule's, signed zeros included. Returns the number of runs.
fn check(f: Function, fmt: Format, from: &str, to: &str, binade: i32, unit_bits: u32) -> usize {
    let p = fmt.precision;
    let mut runs = 0;
    let units = split_range_in(f, fmt, from, to, Some(unit_bits)).unwrap();
    // (A negative range's first argument, a power of two, lies in the binade above: an
    // isolated argument, exact or not, is no region.)
    for u in units.into_iter().filter(|u| u.exponent == binade) {
        let run = exact_run(f, fmt, u);
        let mut all_exact = true;
        for o in 0..u.count {
            let a = u.argument(o);
            let t = truth(f, fmt, &a);
            all_exact &= t != Truth::Other;
            if run.is_some() {
                let want = rule_value(f, fmt, &a).expect("in a region");
                match (&t, &want) {
                    (Truth::Exact(y), Some(v)) => assert!(
                        y == v && y.is_sign_negative() == v.is_sign_negative(),
                        "{f} {fmt} {}: MPFR {y}, the rule {v}",
                        a.to_hex(p)
                    ),
                    (Truth::Pole, None) => {}
                    _ => panic!("{f} {fmt} {}: MPFR {t:?}, the rule {want:?}", a.to_hex(p)),
                }
            }
        }
        assert_eq!(
            run.is_some(),
            all_exact,
            "{f} {fmt} {}: a run exactly where every argument is exact",
            u.describe(p)
        );
        if let Some(r) = run {
            assert_eq!((r.count, r.reason), (u.count, SkipReason::Exact));
            runs += 1;
        }
    }
    runs
}

fn p10_with_exponents() -> Format {
    Format {
        precision: Precision::new(10).unwrap(),
        exponents: Some(Exponents {
            emin: -20,
            emax: 20,
        }),
    }
}

#[test]
fn exact_runs_are_the_units_of_exact_arguments_every_function() {
    use rayon::prelude::*;
    let b16: Format = "binary16".parse().unwrap();
    let p10 = p10_with_exponents();
    let bare: Format = "p10".parse().unwrap();
    // Every normal argument of binary16 and of p10 -20..=20 (zero and the subnormal numbers
    // lie in no region), and a bare precision's from 2^-3 to 2^29 (2^x stays within MPFR's
    // range), both signs, binade by binade where f is defined on the whole binade.
    let mut binades: Vec<(Format, i32)> = Vec::new();
    for fmt in [b16, p10] {
        let r = fmt.exponents.unwrap();
        binades.extend((r.emin..=r.emax).map(|e| (fmt, e)));
    }
    binades.extend((-3..29).map(|e| (bare, e)));
    let runs: Vec<usize> = Function::ALL
        .par_iter()
        .map(|&f| {
            let mut runs = 0;
            for &(fmt, e) in &binades {
                let (lo, hi) = (format!("0x1p{e:+}"), format!("0x1p{:+}", e + 1));
                for (from, to) in [(format!("-{hi}"), format!("-{lo}")), (lo, hi)] {
                    if split_range_in(f, fmt, &from, &to, Some(4)).is_ok() {
                        runs += check(f, fmt, &from, &to, e, 4);
                    }
                }
            }
            runs
        })
        .collect();
    for (&f, runs) in Function::ALL.iter().zip(runs) {
        let expected = matches!(
            f,
            Function::Sinpi | Function::Cospi | Function::Tanpi | Function::Exp2
        );
        assert_eq!(runs > 0, expected, "{f}: {runs} exact runs");
    }
}

/// The search lists a unit of an exact region as its run, nothing else, and the coordinator's
/// recomputation gives the same list; neighbouring units' runs merge per rule.
#[test]
fn the_search_and_skip_rs_list_the_same_exact_runs() {
    let b16: Format = "binary16".parse().unwrap();
    for f in [Function::Sinpi, Function::Cospi, Function::Tanpi] {
        for (from, to) in [("0x1p+7", "0x1p+12"), ("-0x1p+12", "-0x1p+7")] {
            let cfg = SearchConfig::in_format(f, b16, 10);
            let units = split_range_in(f, b16, from, to, Some(6)).unwrap();
            for &u in &units {
                let r = search_unit(&cfg, u, &Cpu).unwrap();
                assert_eq!(r.skipped, skipped_runs(f, b16, 10, u).unwrap(), "{f} {u:?}");
                if r.skipped.iter().any(|s| s.reason == SkipReason::Exact) {
                    assert!(r.hr_cases.is_empty() && r.exact_cases.is_empty());
                    assert_eq!(r.stats.exhaustive_arguments + r.stats.pieces, 0);
                }
            }
            // Binades 9..=11 of binary16 are exact regions of all three (tanpi from 8 on):
            // one run per binade where the rule changes with the spacing.
            let r = search_units(&cfg, &units, &Cpu, &|_| {}).unwrap();
            let exact: Vec<_> = r
                .skipped
                .iter()
                .filter(|s| s.reason == SkipReason::Exact)
                .collect();
            let want = match f {
                Function::Sinpi => 2, // halves; integers
                Function::Cospi => 3, // halves; integers; even integers
                _ => 3,               // quarters; halves; integers
            };
            assert_eq!(exact.len(), want, "{f} [{from}, {to}): {exact:?}");
        }
    }
}

/// A binary64 range of 2^55 arguments where every argument is exact finishes at once (no
/// argument evaluated), one run per rule: "sinpi(x) = 0 on [2^52, 2^60)".
#[test]
fn a_binary64_exact_range_finishes_quickly() {
    let b64: Format = "binary64".parse().unwrap();
    let start = Instant::now();
    for (f, from, to, want) in [
        (Function::Sinpi, "0x1p+52", "0x1p+60", 1),
        (Function::Sinpi, "-0x1p+60", "-0x1p+51", 2),
        (Function::Cospi, "0x1p+51", "0x1p+60", 3),
        (Function::Tanpi, "0x1p+50", "0x1p+60", 3),
    ] {
        let cfg = SearchConfig::in_format(f, b64, 40);
        let units = split_range_in(f, b64, from, to, Some(40)).unwrap();
        let r = search_units(&cfg, &units, &Cpu, &|_| {}).unwrap();
        assert_eq!(r.skipped.len(), want, "{f}: {:?}", r.skipped);
        assert!(r.skipped.iter().all(|s| s.reason == SkipReason::Exact));
        let listed: u64 = r.skipped.iter().map(|s| s.count).sum();
        assert_eq!(listed, r.arguments);
        assert_eq!(r.stats.exhaustive_arguments + r.stats.pieces, 0);
        assert!(r.hr_cases.is_empty() && r.exact_cases.is_empty());
        if f == Function::Sinpi && want == 1 {
            let s = &r.skipped[0];
            assert_eq!(
                (s.first.as_str(), s.last.as_str(), s.count),
                ("0x1p+52", "0x1.fffffffffffffp+59", 1 << 55)
            );
            assert!(s.rule().contains("sinpi(x) = 0"), "{}", s.rule());
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    println!("2^55 + 2^55 + 2^56 + 2^57 binary64 arguments in {seconds:.2} s");
    assert!(seconds < 60.0, "{seconds} s");
}
