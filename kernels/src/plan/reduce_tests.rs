//! Tests of the reductions: whole functions of small formats searched with and without them
//! give the same HR-cases, exact cases and skipped runs, and MPFR on every derived argument
//! finds exactly the derived cases.

use super::*;
use crate::plan::whole::split_whole;
use crate::search::{search_units, Cpu, RangeResult, SearchConfig};
use std::collections::BTreeSet;

/// A search of `units`, cases and runs in value order.
fn searched(cfg: &SearchConfig, units: &[UnitSpec]) -> RangeResult {
    search_units(cfg, units, &Cpu, &|_| {}).expect("the search runs")
}

/// What a comparison looks at: the HR-cases (argument, bits, kind), the exact cases, the runs.
type Lists = (Vec<(String, u32, &'static str)>, Vec<String>, Vec<String>);

fn lists(r: &RangeResult) -> Lists {
    (
        r.hr_cases
            .iter()
            .map(|c| (c.x.clone(), c.bits, c.kind.as_str()))
            .collect(),
        r.exact_cases.iter().map(|c| c.x.clone()).collect(),
        r.skipped
            .iter()
            .map(|s| format!("{} {} {}", s.first, s.last, s.count))
            .collect(),
    )
}

/// The whole of `f` in `fmt` at `min_bits`, searched unit by unit and reduced: both lists, and
/// the reduced plan.
fn both(f: Function, name: &str, min_bits: u32, u: u32) -> (Lists, Lists, Derivation) {
    both_in(f, Format::named(name).unwrap(), min_bits, u)
}

/// As [`both`], in any format.
fn both_in(f: Function, fmt: Format, min_bits: u32, u: u32) -> (Lists, Lists, Derivation) {
    let name = fmt.name();
    let cfg = SearchConfig::in_format(f, fmt, min_bits);
    let units = split_whole(f, fmt, min_bits, Some(u)).unwrap();
    let whole = searched(&cfg, &units);
    let (kept, plan) = reduce(f, fmt, min_bits, units);
    let base = searched(&cfg, &kept);
    let (hard, exact) = derive(f, fmt, min_bits, &plan, &base.hr_cases, &base.exact_cases)
        .unwrap_or_else(|e| panic!("{f} {name}: {e}"));
    let mut all = base.clone();
    all.hr_cases.extend(hard);
    all.exact_cases.extend(exact);
    let all = all.finish_in(fmt);
    (lists(&whole), lists(&all), plan)
}

/// Every function with a reduction, whole in binary16 and bfloat16 (each with subnormal
/// arguments), with and without it: the same lists, and a good share derived.
#[test]
fn small_formats_lose_nothing_by_the_reductions() {
    for (name, min_bits, u) in [("binary16", 4, 6), ("bfloat16", 3, 4)] {
        for f in [
            Function::Exp2,
            Function::Cbrt,
            Function::Sqrt,
            Function::Rsqrt,
            Function::Log2,
        ] {
            let (whole, reduced, plan) = both(f, name, min_bits, u);
            assert!(plan.derives(), "{f} {name}: nothing derived");
            assert!(!whole.0.is_empty(), "{f} {name}: no HR-case to compare");
            assert_eq!(whole.0.len(), reduced.0.len(), "{f} {name}: HR-case count");
            assert_eq!(whole, reduced, "{f} {name}");
        }
    }
}

/// The plan derives what it says: the runs' counts are the arguments taken out of the search,
/// subnormal arguments among them for the scalings, and each derived argument is judged by
/// MPFR as the derived lists say (no case derived that is not one, none missed).
#[test]
fn derived_runs_count_what_the_search_leaves_out() {
    let fmt = Format::named("binary16").unwrap();
    for f in [
        Function::Exp2,
        Function::Cbrt,
        Function::Sqrt,
        Function::Rsqrt,
        Function::Log2,
    ] {
        let units = split_whole(f, fmt, 4, Some(6)).unwrap();
        let all: u128 = units.iter().map(|u| u128::from(u.count)).sum();
        let (kept, plan) = reduce(f, fmt, 4, units);
        let searched_count: u128 = kept.iter().map(|u| u128::from(u.count)).sum();
        assert_eq!(searched_count + plan.derived_arguments(), all, "{f}");
        if f == Function::Log2 {
            // Results in [2^k, 2^(k+1)) from the binade 2^(2^k): binary16's bases go up to
            // 2^8 (results in [8, 16)), so the subnormal binades 2^-15 and 2^-16 (results in
            // (-16, -14)) are derived and those below (results beyond 16) searched.
            let bases: Vec<(&str, &str)> = plan
                .runs
                .iter()
                .map(|r| (r.first.as_str(), r.base.as_str()))
                .collect();
            assert_eq!(
                bases,
                [
                    ("0x1p-16", "[0x1p+8, 0x1p+9)"),
                    ("0x1p-8", "[0x1p+4, 0x1p+5)"),
                    ("0x1p-4", "[0x1p+2, 0x1p+3)"),
                    ("0x1p-2", "[0x1p+1, 0x1p+2)"),
                    ("0x1p+3", "[0x1p+2, 0x1p+3)"),
                    ("0x1p+5", "[0x1p+4, 0x1p+5)"),
                    ("0x1p+9", "[0x1p+8, 0x1p+9)"),
                ]
            );
            let below = kept
                .iter()
                .filter(|u| u.exponent == -14 && u.first >> 10 == 0)
                .all(|u| u.first + u.count <= 1 << 8);
            assert!(below, "log2: subnormal arguments of 2^-16 or more searched");
        } else if f != Function::Exp2 {
            // Subnormal arguments (binades below 2^-14) derived, every one: the unit holding
            // zero and the narrowest binades is cut at their bounds, and only zero is searched.
            assert!(
                plan.regions.keys().any(|b| b.exponent < -14),
                "{f}: no subnormal argument derived"
            );
            let subnormal_units = kept
                .iter()
                .filter(|u| u.exponent == -14 && u.first >> 10 == 0 && !u.negative)
                .map(|u| (u.first, u.count))
                .collect::<Vec<_>>();
            assert_eq!(subnormal_units, [(0, 1)], "{f}: subnormal units searched");
        }
        // Every argument of every derived binade, judged by MPFR: hard or exact exactly where
        // the derivation says.
        let cfg = SearchConfig::in_format(f, fmt, 4);
        let base = searched(&cfg, &kept);
        let (hard, exact) = derive(f, fmt, 4, &plan, &base.hr_cases, &base.exact_cases).unwrap();
        let hard: BTreeSet<String> = hard.into_iter().map(|c| c.x).collect();
        let exact: BTreeSet<String> = exact.into_iter().map(|c| c.x).collect();
        let mut judged = 0u64;
        for (b, ranges) in &plan.regions {
            for &(lo, hi) in ranges {
                for s in lo..hi {
                    let a = Argument {
                        negative: b.negative,
                        exponent: b.exponent.max(-14),
                        significand: s as u64,
                    };
                    let x = a.to_hex(fmt.precision);
                    match classify_in(f, fmt, &a, 4).unwrap() {
                        Verdict::Hard(_) => assert!(hard.contains(&x), "{f}: {x} missed"),
                        Verdict::Exact(_) => assert!(exact.contains(&x), "{f}: {x} missed"),
                        v => assert!(
                            !hard.contains(&x) && !exact.contains(&x),
                            "{f}: {x} derived, MPFR says {v:?}"
                        ),
                    }
                    judged += 1;
                }
            }
        }
        assert_eq!(u128::from(judged), plan.derived_arguments(), "{f}");
    }
}

/// A case that MPFR does not confirm stops the derivation: a base list with a forged case.
#[test]
fn a_forged_base_case_is_refused() {
    let fmt = Format::named("binary16").unwrap();
    let f = Function::Cbrt;
    let (_, plan) = reduce(f, fmt, 4, split_whole(f, fmt, 4, Some(6)).unwrap());
    // cbrt(0x1.004p+0) is no HR-case at 9 bits (its hardness is far below).
    let forged = HrCase {
        x: "0x1.004p+0".into(),
        bits: 9,
        neg_log2_d: 9.5,
        kind: crate::oracle::verify::Kind::Fp,
        rounded: "0x1p+0".into(),
    };
    let e = derive(f, fmt, 4, &plan, &[forged], &[]).unwrap_err();
    assert!(matches!(e, ReduceError::Disagrees { .. }), "{e}");
}

/// exp2 of `(-16, -8]` in binary16: results below `2^-14` (subnormal) for `x < -14`; the units
/// above are derived, those below searched, and the runs say which.
#[test]
fn part_of_a_binade_is_derived_where_every_result_is_normal() {
    let fmt = Format::named("binary16").unwrap();
    let f = Function::Exp2;
    let (kept, plan) = reduce(f, fmt, 4, split_whole(f, fmt, 4, Some(6)).unwrap());
    let b = Binade {
        negative: true,
        exponent: 3,
    };
    let ranges = &plan.regions[&b];
    let derived: u128 = ranges.iter().map(|r| r.1 - r.0).sum();
    // Units of 64 significands: those with |x| <= 14 (significands up to 1792) derived.
    assert_eq!(ranges, &vec![(1024, 1792)], "{ranges:?}");
    assert_eq!(derived, 768);
    let searched = kept
        .iter()
        .filter(|u| u.negative && u.exponent == 3 && u.first >= 1024)
        .map(|u| u.count)
        .sum::<u64>();
    assert_eq!(searched, 256);
    assert!(
        plan.runs.iter().any(|r| r.first == "-0x1.bfcp+3"),
        "{:?}",
        plan.runs
    );
}

/// Functions without a reduction, bare precisions and partial binades are left as planned.
#[test]
fn what_cannot_be_derived_is_searched() {
    let fmt = Format::named("binary16").unwrap();
    let units = split_whole(Function::Exp, fmt, 4, Some(6)).unwrap();
    let n = units.len();
    let (kept, plan) = reduce(Function::Exp, fmt, 4, units);
    assert_eq!((kept.len(), plan.derives()), (n, false));
    let bare = Format::bare(crate::numbers::format::Precision::new(11).unwrap());
    let units = crate::plan::split_range_in(Function::Sqrt, bare, "1", "64", Some(6)).unwrap();
    assert!(!reduce(Function::Sqrt, bare, 4, units).1.derives());
    // [1, 6): the base binades and half of [4, 8), which derives nothing; [1, 16) derives
    // [4, 16) from [1, 4).
    let units = crate::plan::split_range_in(Function::Sqrt, fmt, "1", "6", Some(6)).unwrap();
    assert!(!reduce(Function::Sqrt, fmt, 4, units).1.derives());
    let units = crate::plan::split_range_in(Function::Sqrt, fmt, "1", "16", Some(6)).unwrap();
    let (_, plan) = reduce(Function::Sqrt, fmt, 4, units);
    assert_eq!(plan.runs.len(), 1);
    assert_eq!(
        (plan.runs[0].first.as_str(), plan.runs[0].last.as_str()),
        ("0x1p+2", "0x1.ffcp+3")
    );
    assert_eq!(plan.runs[0].count, 2048);
}

/// The whole of bfloat16 at every threshold from 2 to 6 bits.
#[test]
fn bfloat16_at_every_threshold_loses_nothing() {
    for min_bits in 2..=6 {
        for f in [
            Function::Exp2,
            Function::Cbrt,
            Function::Sqrt,
            Function::Rsqrt,
            Function::Log2,
        ] {
            let (whole, reduced, _) = both_in(f, Format::named("bfloat16").unwrap(), min_bits, 4);
            assert_eq!(whole, reduced, "{f} at {min_bits} bits");
        }
    }
}

/// With `--long`: precisions 20 to 24 over the exponents -6 to 7 (every argument, subnormal
/// ones included, 2^24 to 2^28 of them), and the whole of binary32 for cbrt at 21 bits.
#[test]
#[ignore = "long: about a minute on 2 cores"]
fn wider_precisions_lose_nothing() {
    for bits in 20..=24 {
        let fmt = Format {
            precision: crate::numbers::format::Precision::new(bits).unwrap(),
            exponents: Some(crate::numbers::format::Exponents { emin: -6, emax: 7 }),
        };
        for f in [
            Function::Exp2,
            Function::Cbrt,
            Function::Sqrt,
            Function::Rsqrt,
            Function::Log2,
        ] {
            let (whole, reduced, plan) = both_in(f, fmt, bits / 2 + 2, bits - 6);
            assert!(plan.derives(), "{f} p{bits}");
            assert_eq!(whole, reduced, "{f} p{bits}");
        }
    }
    let fmt = Format::named("binary32").unwrap();
    let (whole, reduced, _) = both_in(Function::Cbrt, fmt, 21, 18);
    assert!(whole.0.len() > 1000, "{} HR-cases", whole.0.len());
    assert_eq!(whole, reduced, "cbrt binary32");
}

/// A whole plan reduced as it is cut (the derived binades never cut into units) is the whole
/// plan cut first and reduced after: the same units, the same derived regions and runs.
#[test]
fn a_whole_plan_reduced_as_it_is_cut_is_the_plan_reduced_after() {
    use crate::plan::whole::split_whole_reduced;
    for (name, min_bits, u) in [
        ("binary16", 4, 6),
        ("bfloat16", 3, 4),
        ("binary32", 12, 16),
        ("binary64", 44, 44),
    ] {
        let fmt = Format::named(name).unwrap();
        for f in [
            Function::Exp2,
            Function::Cbrt,
            Function::Sqrt,
            Function::Rsqrt,
            Function::Log2,
            Function::Exp,
        ] {
            let units = split_whole(f, fmt, min_bits, Some(u)).unwrap();
            let (after, plan_after) = reduce(f, fmt, min_bits, units);
            let (cut, plan_cut) = split_whole_reduced(f, fmt, min_bits, Some(u)).unwrap();
            assert_eq!(cut, after, "{f} {name}: the units");
            assert_eq!(plan_cut.regions, plan_after.regions, "{f} {name}");
            assert_eq!(plan_cut.runs, plan_after.runs, "{f} {name}");
            assert_eq!(plan_cut.derives(), f != Function::Exp, "{f} {name}");
        }
    }
}

/// The whole functions of binary80 with a reduction are planned in units of 2^50 without
/// cutting their thousands of binades first (cut, cbrt alone is 5 * 10^8 units, beyond the
/// plan's limit): what is searched is the base binades and zero, every subnormal argument
/// derived (the first unit of 2^50 subnormal significands holds 50 binades, each of them
/// almost an argument-by-argument search).
#[test]
fn whole_binary80_functions_with_a_reduction_fit_the_plan() {
    use crate::plan::whole::split_whole_reduced;
    let fmt = Format::named("binary80").unwrap();
    let x = fmt.exponents.unwrap();
    assert!(split_whole(Function::Cbrt, fmt, 54, Some(50)).is_err());
    for (f, bases) in [
        (Function::Cbrt, 0..=2),
        (Function::Sqrt, 0..=1),
        (Function::Rsqrt, 0..=1),
    ] {
        let (units, plan) = split_whole_reduced(f, fmt, 54, Some(50)).unwrap();
        let searched: BTreeSet<i32> = units
            .iter()
            .filter(|u| u.first >> 63 != 0)
            .map(|u| u.exponent)
            .collect();
        assert_eq!(
            searched,
            bases.clone().collect::<BTreeSet<i32>>(),
            "{f}: the normal binades searched"
        );
        assert!(units.iter().all(|u| u.count <= 1 << 50), "{f}");
        let subnormal: Vec<&UnitSpec> = units.iter().filter(|u| u.first >> 63 == 0).collect();
        assert!(
            subnormal.iter().all(|u| u.first == 0 && u.count == 1),
            "{f}: subnormal arguments searched: {subnormal:?}"
        );
        // Every normal binade of the defined signs but the bases is derived.
        let signs = if f == Function::Cbrt { 2 } else { 1 };
        let normal = (x.emax - x.emin + 1) as u128 - bases.count() as u128;
        assert!(
            plan.derived_arguments() >= (signs * normal) << 63,
            "{f}: {} derived",
            plan.derived_arguments()
        );
    }
}

/// Whole log2 in binary64 and binary80 searches one binade per output binade `2^k` (the
/// binade `2^(2^k)`), the binades 2^0 and 2^-1 (results spanning binades) and the subnormal
/// arguments whose results lie beyond the largest base's (below `2^-(2 emax' + 1)` with
/// `emax'` the largest power of two up to `emax`): 12 binades of binary64 instead of 2,046.
#[test]
fn whole_log2_searches_one_binade_per_output_binade() {
    use crate::plan::whole::split_whole_reduced;
    for (name, unit_bits, top) in [("binary64", 44, 9), ("binary80", 50, 13)] {
        let fmt = Format::named(name).unwrap();
        let p = fmt.precision.bits();
        let (units, plan) = split_whole_reduced(Function::Log2, fmt, 44, Some(unit_bits)).unwrap();
        let searched: BTreeSet<i32> = units
            .iter()
            .filter(|u| u.first >> (p - 1) != 0)
            .map(|u| u.exponent)
            .collect();
        let mut want: BTreeSet<i32> = (0..=top).map(|k| 1 << k).collect();
        want.extend([-1, 0]);
        assert_eq!(searched, want, "{name}: the normal binades searched");
        // Below 2^emin: the binades 2^(emin-1) and 2^(emin-2) derived (results of magnitude
        // under 2^(top+1)), those below searched.
        let edge = 1u64 << (p - 3);
        assert!(
            units
                .iter()
                .filter(|u| u.first >> (p - 1) == 0 && !u.negative)
                .all(|u| u.first + u.count <= edge),
            "{name}: subnormal arguments of 2^(emin-2) or more searched"
        );
        assert!(plan
            .regions
            .keys()
            .any(|b| b.exponent == fmt.exponents.unwrap().emin - 2));
        assert!(units.iter().all(|u| u.count <= 1 << unit_bits), "{name}");
    }
}

/// What a campaign keeps of a derivation gives it back whole (through JSON), derives the same
/// cases one base case at a time as [`derive`] does all at once, and a record that names a
/// binade no reduction derives, or a range outside its binade, is refused.
#[test]
fn a_kept_derivation_derives_the_same_cases() {
    for (f, name) in [
        (Function::Exp2, "binary16"),
        (Function::Cbrt, "bfloat16"),
        (Function::Log2, "bfloat16"),
    ] {
        let fmt = Format::named(name).unwrap();
        let cfg = SearchConfig::in_format(f, fmt, 4);
        let units = split_whole(f, fmt, 4, Some(6)).unwrap();
        let (kept, plan) = reduce(f, fmt, 4, units);
        let record = plan.record().expect("something derived");
        let json = serde_json::to_string(&record).unwrap();
        let back: DerivationRecord = serde_json::from_str(&json).unwrap();
        let again = Derivation::from_record(&back, fmt).unwrap();
        assert_eq!(again.regions, plan.regions, "{f} {name}");
        assert_eq!(again.runs, plan.runs, "{f} {name}");
        let base = searched(&cfg, &kept);
        let (all, _) = derive(f, fmt, 4, &plan, &base.hr_cases, &[]).unwrap();
        let each = derive_each(f, fmt, 4, &again, &base.hr_cases).unwrap();
        let xs = |v: Vec<String>| v.into_iter().collect::<BTreeSet<String>>();
        assert!(!all.is_empty(), "{f} {name}: nothing derived");
        assert_eq!(
            xs(each.iter().map(|(_, c)| c.x.clone()).collect()),
            xs(all.iter().map(|c| c.x.clone()).collect()),
            "{f} {name}"
        );
        let bases = xs(base.hr_cases.iter().map(|c| c.x.clone()).collect());
        assert!(each.iter().all(|(b, _)| bases.contains(b)), "{f} {name}");
        let mut bad = back.clone();
        bad.regions[0].exponent = 0;
        assert!(
            Derivation::from_record(&bad, fmt).is_err(),
            "{f} {name}: a base binade"
        );
        let mut bad = back.clone();
        bad.regions[0].ranges[0].1 = u128::MAX.to_string();
        assert!(
            Derivation::from_record(&bad, fmt).is_err(),
            "{f} {name}: a range"
        );
    }
    assert_eq!(Derivation::default().record(), None);
}

/// Every derived case maps back to the base case it was derived from, and no base or searched
/// argument maps anywhere.
#[test]
fn a_derived_argument_maps_back_to_its_base() {
    for (f, name) in [
        (Function::Exp2, "binary16"),
        (Function::Cbrt, "binary16"),
        (Function::Sqrt, "bfloat16"),
        (Function::Rsqrt, "binary16"),
        (Function::Log2, "binary16"),
    ] {
        let fmt = Format::named(name).unwrap();
        let cfg = SearchConfig::in_format(f, fmt, 4);
        let units = split_whole(f, fmt, 4, Some(6)).unwrap();
        let (kept, plan) = reduce(f, fmt, 4, units);
        let base = searched(&cfg, &kept);
        let each = derive_each(f, fmt, 4, &plan, &base.hr_cases).unwrap();
        assert!(!each.is_empty(), "{f} {name}: nothing derived");
        let arg = |x: &str| {
            let v = parse_number(x, fmt.precision.bits(), Round::Nearest).unwrap();
            Argument::from_float_in(&v, fmt).unwrap()
        };
        let mut subnormal = 0;
        for (from, c) in &each {
            let a = arg(&c.x);
            subnormal += usize::from(a.significand >> (fmt.precision.bits() - 1) == 0);
            let back = plan.base_argument(fmt, a);
            assert_eq!(
                back.map(|b| b.to_hex(fmt.precision)),
                Some(from.clone()),
                "{f} {name}: {}",
                c.x
            );
        }
        if f != Function::Exp2 {
            assert!(subnormal > 0, "{f} {name}: no subnormal case derived");
        }
        for c in &base.hr_cases {
            assert_eq!(
                plan.base_argument(fmt, arg(&c.x)),
                None,
                "{f} {name}: {}",
                c.x
            );
        }
    }
}
