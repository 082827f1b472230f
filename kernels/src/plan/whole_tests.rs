//! Tests of whole-function planning: every finite argument exactly once, collapsed blocks
//! that the search and the coordinator's check see as one skipped run, refusals.

use super::*;
use crate::numbers::format::Precision;
use crate::regions::skip::skipped_runs;
use crate::search::{search_unit, Cpu, SearchConfig};

/// Every finite binary16 number but -0 (the plan's zero is +0), as C99 hex.
fn every_binary16() -> Vec<Float> {
    let mut all = Vec::new();
    for bits in 0u32..=0xffff {
        let (sign, e, frac) = (bits >> 15, (bits >> 10) & 31, bits & 1023);
        if e == 31 || bits == 0x8000 {
            continue;
        }
        let mut v = if e == 0 {
            Float::with_val(16, frac) >> 24
        } else {
            Float::with_val(16, 1024 + frac) << (e as i32 - 25)
        };
        if sign == 1 {
            v = -v;
        }
        all.push(v);
    }
    all
}

fn arguments(fmt: Format, units: &[UnitSpec]) -> Vec<String> {
    let p = fmt.precision;
    let mut got: Vec<String> = units
        .iter()
        .flat_map(|u| (0..u.count).map(move |o| u.argument(o).to_hex(p)))
        .collect();
    got.sort();
    got
}

/// The whole plan of every function in binary16 holds every finite argument where the
/// function is defined (or has a pole), each exactly once; a unit larger than `2^U` is one
/// skipped run of all its arguments, as the coordinator recomputes it.
#[test]
fn binary16_whole_plans_cover_every_argument_once() {
    let fmt = Format::named("binary16").unwrap();
    let all = every_binary16();
    let u = 6;
    for &f in Function::ALL {
        let units = split_whole(f, fmt, 12, Some(u)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let mut want: Vec<String> = all
            .iter()
            .filter(|x| f.has_poles() || f.defined_at(x) || (x.is_zero() && f.pole_at_zero()))
            .map(float_to_hex)
            .collect();
        want.sort();
        let got = arguments(fmt, &units);
        assert_eq!(got.len(), want.len(), "{f}: count");
        assert_eq!(got, want, "{f}");
        for unit in units.iter().filter(|x| x.count > 1 << u) {
            let runs = skipped_runs(f, fmt, 12, *unit).unwrap();
            assert!(
                runs.len() == 1 && runs[0].count == unit.count,
                "{f}: a collapsed unit {unit:?} is not one skipped run: {runs:?}"
            );
        }
    }
}

/// A collapsed unit searched is one skipped run, the one the coordinator recomputes: the
/// worker's result for it is accepted.
#[test]
fn the_search_of_a_collapsed_unit_is_its_skipped_run() {
    for (name, f, min_bits, u) in [
        ("binary16", Function::Exp, 12, 6),
        ("binary16", Function::Tanh, 12, 6),
        ("binary16", Function::Sinpi, 12, 6),
        ("binary32", Function::Exp, 20, 16),
        ("binary32", Function::Erfc, 20, 16),
        ("bfloat16", Function::Exp2, 6, 4),
    ] {
        let fmt = Format::named(name).unwrap();
        let cfg = SearchConfig::in_format(f, fmt, min_bits);
        let units = split_whole(f, fmt, min_bits, Some(u)).unwrap();
        let collapsed: Vec<&UnitSpec> = units.iter().filter(|x| x.count > 1 << u).collect();
        assert!(!collapsed.is_empty(), "{f} {name}: nothing collapsed");
        for unit in collapsed {
            let r = search_unit(&cfg, *unit, &Cpu).unwrap();
            let want = skipped_runs(f, fmt, min_bits, *unit).unwrap();
            assert_eq!(r.skipped, want, "{f} {name} {unit:?}");
            assert!(r.hr_cases.is_empty() && r.exact_cases.is_empty());
        }
    }
}

/// Whole exp in binary64: the binades that search something cut into units, the rest
/// collapsed; a few thousand units more than the searched binades, not millions.
#[test]
fn whole_exp_binary64_is_sane() {
    let fmt = Format::named("binary64").unwrap();
    let p = fmt.precision;
    let units = split_whole(Function::Exp, fmt, 44, Some(44)).unwrap();
    let collapsed = units.iter().filter(|u| u.count > 1 << 44).count();
    let searched = units.len() - collapsed;
    // exp(x) is within 2^-44 half-ulps of 1 (trivial) below about 2^-97, and overflows or
    // underflows above 2^10 in magnitude: about 107 binades of each sign are cut into units,
    // 256 each.
    assert!(
        (200 * 256..230 * 256).contains(&searched),
        "{searched} units searched"
    );
    assert!(collapsed < 5000, "{collapsed} collapsed units");
    // A negative binade's significands grow towards -infinity.
    let first = units.first().unwrap();
    assert!(first.negative);
    assert_eq!(
        first.argument(first.count - 1).to_hex(p),
        "-0x1.fffffffffffffp+1023"
    );
    let last = units.last().unwrap();
    assert_eq!(
        last.argument(last.count - 1).to_hex(p),
        "0x1.fffffffffffffp+1023"
    );
    let arguments: u128 = units.iter().map(|u| u128::from(u.count)).sum();
    // Every finite binary64 number but -0: 2^64 - 2^53 (the infinities and NaNs) - 1.
    assert_eq!(arguments, (1u128 << 64) - (1u128 << 53) - 1);
}

/// binary80's default units of 2^50: a binade is 8,192 of them, and whole exp stays well
/// under the plan's limit; no unit is larger than a signed 64-bit count.
#[test]
fn whole_exp_binary80_fits() {
    let fmt = Format::named("binary80").unwrap();
    assert_eq!(default_unit_bits(fmt.precision), 50);
    let units = split_whole(Function::Exp, fmt, 54, None).unwrap();
    // About 132 binades of each sign, 8,192 units each.
    assert!(units.len() < 2_500_000, "{} units", units.len());
    assert!(units.iter().all(|u| u.count <= 1 << MAX_COLLAPSED_BITS));
}

#[test]
fn domains_end_where_functions_are_defined() {
    let b64 = Format::named("binary64").unwrap();
    let d = |f| whole_domain(f, b64).unwrap();
    assert_eq!(
        (d(Function::Log).from, d(Function::Log).to),
        ("0x0p+0".to_string(), "0x1p+1024".to_string())
    );
    assert_eq!(d(Function::Log1p).from, "-0x1.fffffffffffffp-1");
    assert_eq!(
        (d(Function::Asin).from, d(Function::Asin).to),
        ("-0x1p+0".to_string(), "0x1.0000000000001p+0".to_string())
    );
    assert_eq!(
        (d(Function::Atanh).from, d(Function::Atanh).to),
        ("-0x1.fffffffffffffp-1".to_string(), "0x1p+0".to_string())
    );
    assert_eq!(d(Function::Exp).from, "-0x1.fffffffffffffp+1023");
    let b80 = Format::named("binary80").unwrap();
    assert_eq!(
        whole_domain(Function::Exp, b80).unwrap().from,
        "-0x1.fffffffffffffffep+16383"
    );
    assert_eq!(
        whole_domain(Function::Log1p, b80).unwrap().from,
        "-0x1.fffffffffffffffep-1"
    );
}

/// sin, cos and tan of every binary64 argument are planned, with what the walk beyond 2^20
/// costs; binary80's (2^78 arguments beyond 2^31) are refused, naming the range the engine
/// can do; binary32's are within brute force, planned without a note.
#[test]
fn periodic_functions_of_huge_arguments_are_planned_where_a_farm_can_walk_them() {
    let b64 = Format::named("binary64").unwrap();
    let b80 = Format::named("binary80").unwrap();
    for f in [Function::Sin, Function::Cos, Function::Tan] {
        let d = whole_domain(f, b64).unwrap();
        assert_eq!(
            (d.from.as_str(), d.to.as_str()),
            ("-0x1.fffffffffffffp+1023", "0x1p+1024")
        );
        assert!(
            d.notes
                .iter()
                .any(|n| n.starts_with("|x| >= 0x1p+20: every argument walked")),
            "{:?}",
            d.notes
        );
        let e = whole_domain(f, b80).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, WholeError::OutOfReach { .. }), "{text}");
        assert!(text.contains("--from=-0x1p+31 --to 0x1p+31"), "{text}");
    }
    let b32 = Format::named("binary32").unwrap();
    let d = whole_domain(Function::Sin, b32).unwrap();
    assert!(
        !d.notes.iter().any(|n| n.contains("progressions")),
        "{:?}",
        d.notes
    );
    assert!(whole_domain(Function::Sinpi, b64).is_ok());
    let bare = Format::bare(Precision::BINARY64);
    assert!(matches!(
        whole_domain(Function::Exp, bare),
        Err(WholeError::Bare(_))
    ));
}

/// `far_beyond` decides by a factor 2 beyond the format's limits, none near them: exp in
/// binary64 between its overflow threshold and MPFR's (where a ball over a wide piece is too
/// wide to decide) is skipped at once, and a whole binade there is one run in milliseconds.
#[test]
fn far_beyond_the_format_is_decided_at_once() {
    use crate::oracle::verify::{far_beyond, SkipReason};
    let b64 = Format::named("binary64").unwrap();
    let x =
        |s: &str| crate::numbers::format::parse_number(s, 53, rug::float::Round::Nearest).unwrap();
    let exp = Function::Exp;
    assert_eq!(
        far_beyond(exp, b64, &x("0x1p+25")),
        Some(SkipReason::Overflow)
    );
    assert_eq!(
        far_beyond(exp, b64, &x("-0x1p+25")),
        Some(SkipReason::Underflow)
    );
    // exp(709.8) is about 2^1024.0: beyond, but not by a factor 2; 711 is.
    assert_eq!(far_beyond(exp, b64, &x("709.8")), None);
    assert_eq!(far_beyond(exp, b64, &x("711")), Some(SkipReason::Overflow));
    assert_eq!(far_beyond(exp, b64, &x("1")), None);
    assert_eq!(
        far_beyond(exp, Format::bare(Precision::BINARY64), &x("0x1p+25")),
        None
    );
    let t = std::time::Instant::now();
    let unit = UnitSpec {
        negative: false,
        exponent: 25,
        first: 1 << 52,
        count: 1 << 52,
    };
    let runs = skipped_runs(exp, b64, 44, unit).unwrap();
    assert!(runs.len() == 1 && runs[0].count == 1 << 52, "{runs:?}");
    assert!(t.elapsed().as_secs_f64() < 1.0, "{:?}", t.elapsed());
}
