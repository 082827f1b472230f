//! Periodic functions on coarse grids: sinpi, cospi and tanpi repeat with period 2 (tanpi's
//! signed zeros too: `tanpi(n)` is `+0` or `-0` by the parity of `n`), and where a unit's
//! arguments are spaced `2^s` the argument `±(m + 2^(1 - s)) 2^s` is `x ± 2`: its value, hence
//! its verdict, is that of `x`. A unit holding two periods or more is searched on its first
//! period only, by the ordinary search, and every case found there is copied to the arguments
//! `2, 4, ...` further (`docs/error-analysis.md` §11): sinpi in binary64 near `2^30` searches
//! `2^23` arguments of a unit of `2^44`, near `2^45` 256 of them.

use crate::numbers::format::{parse_number, Argument, Format};
use crate::oracle::function::Function;
use crate::oracle::verify::{ExactCase, HrCase};
use crate::plan::UnitSpec;
use crate::regions::runs::{Runs, Skipped};
use crate::search::backend::SearchError;
use rug::float::Round;

/// The most cases a unit may copy from its first period: a hard class near `2^60` would have
/// `2^59` copies in its binade, which no list holds; such a unit fails with the class named
/// rather than exhausting the memory (a result may carry 10,000 cases anyway).
pub const MAX_COPIES: u64 = 1 << 24;

/// The period `L` of `unit`'s arguments for `f` (the arguments at offsets `o` and `o + L` have
/// the same value): `2^(1 - s)` for sinpi, cospi and tanpi where the unit holds two periods at
/// least; `None` otherwise.
pub fn period(f: Function, fmt: Format, unit: UnitSpec) -> Option<u64> {
    if !matches!(f, Function::Sinpi | Function::Cospi | Function::Tanpi) {
        return None;
    }
    // x = ±m 2^s with m = first + o (subnormal numbers included, at emin's spacing).
    let s = unit.exponent - fmt.precision.bits() as i32 + 1;
    let shift = 1 - s;
    if !(0..63).contains(&shift) {
        return None;
    }
    let l = 1u64 << shift;
    (l <= unit.count / 2).then_some(l)
}

/// What the first period of a unit found, and what the whole unit holds once it is repeated.
#[derive(Debug, Default)]
pub struct Cases {
    pub hr_cases: Vec<HrCase>,
    pub exact_cases: Vec<ExactCase>,
    pub skipped: Vec<Skipped>,
}

/// The cases of `unit` from `base`, those of its first period `[first, first + l)`: every
/// case and skipped argument of the base copied to the offsets `l, 2l, ...` further (`x ± 2`,
/// the same value: the same hardness, kind, rounding, exact value or pole; only the argument's
/// text changes), in argument order.
pub fn repeat(fmt: Format, unit: UnitSpec, l: u64, base: Cases) -> Result<Cases, SearchError> {
    let p = fmt.precision;
    let periods = unit.count.div_ceil(l);
    let listed = (base.hr_cases.len() + base.exact_cases.len()) as u64;
    if listed.saturating_mul(periods) > MAX_COPIES {
        let class = base.hr_cases.first().map(|c| c.x.clone());
        return Err(SearchError::Backend(format!(
            "{}: its {listed} cases of the first period (such as {}) repeat every 2 over {periods} \
             periods, more than {MAX_COPIES} cases to list; search smaller units",
            unit.describe(p),
            class.as_deref().unwrap_or("an exact case")
        )));
    }
    let offset = |x: &str| offset_of(fmt, unit, x);
    let copies = |o: u64| (o..unit.count).step_by(l as usize);
    let mut hr: Vec<(u64, HrCase)> = Vec::new();
    for c in base.hr_cases {
        let o = offset(&c.x)?;
        hr.extend(copies(o).map(|t| {
            let x = unit.argument(t).to_hex(p);
            (t, HrCase { x, ..c.clone() })
        }));
    }
    let mut exact: Vec<(u64, ExactCase)> = Vec::new();
    for e in base.exact_cases {
        let o = offset(&e.x)?;
        exact.extend(copies(o).map(|t| {
            let x = unit.argument(t).to_hex(p);
            (t, ExactCase { x, ..e.clone() })
        }));
    }
    hr.sort_unstable_by_key(|c| c.0);
    exact.sort_unstable_by_key(|c| c.0);
    Ok(Cases {
        hr_cases: hr.into_iter().map(|c| c.1).collect(),
        exact_cases: exact.into_iter().map(|c| c.1).collect(),
        skipped: repeat_runs(fmt, unit, l, &base.skipped)?,
    })
}

/// The skipped runs of the first period repeated over the unit, merged where they meet.
fn repeat_runs(
    fmt: Format,
    unit: UnitSpec,
    l: u64,
    base: &[Skipped],
) -> Result<Vec<Skipped>, SearchError> {
    let mut located = Vec::with_capacity(base.len());
    for r in base {
        let (a, b) = (
            offset_of(fmt, unit, &r.first)?,
            offset_of(fmt, unit, &r.last)?,
        );
        located.push((a.min(b), r));
    }
    let mut runs = Runs::default();
    for start in (0..unit.count).step_by(l as usize) {
        for &(o, r) in &located {
            let first = start + o;
            if first < unit.count {
                let count = r.count.min(unit.count - first);
                runs.push(first, count, r.reason, r.trivial.clone());
            }
        }
    }
    Ok(runs.into_skipped(unit, fmt.precision))
}

/// The offset in `unit` of the argument written `x` (one of the unit's own results).
fn offset_of(fmt: Format, unit: UnitSpec, x: &str) -> Result<u64, SearchError> {
    let lost = || SearchError::Backend(format!("{x}: not an argument of {unit:?}"));
    let v = parse_number(x, 256, Round::Nearest).map_err(|_| lost())?;
    let a = Argument::from_float_in(&v, fmt).ok_or_else(lost)?;
    let inside = a.negative == unit.negative
        && a.exponent == unit.exponent
        && (unit.first..unit.first + unit.count).contains(&a.significand);
    inside.then(|| a.significand - unit.first).ok_or_else(lost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::verify::{classify_in, SkipReason, Verdict};
    use crate::regions::lattice::Lattice;
    use crate::search::{search_unit, Cpu, SearchConfig};

    /// A unit searched by its first period equals MPFR argument by argument: sinpi, cospi and
    /// tanpi in binary32 and binary16 (where the periods are short), both signs, at thresholds
    /// with HR-cases, exact cases off the lattice, tanpi's poles and signed zeros; and the
    /// full search of the same unit (the route off) gives the same cases and runs.
    #[test]
    fn copied_cases_equal_mpfr_argument_by_argument() {
        let b32 = Format::named("binary32").unwrap();
        let b16 = Format::named("binary16").unwrap();
        let (mut repeated, mut hard, mut lattices) = (0, 0, 0);
        for f in [Function::Sinpi, Function::Cospi, Function::Tanpi] {
            for (fmt, exponent, first, count, k) in [
                (b32, 19, 0x80_1234, 4096, 4),
                (b32, 14, 0xab_0000, 1 << 11, 6),
                (b16, 7, 0x400, 1 << 10, 3),
                (b16, 9, 0x7f0, 16, 1),
            ] {
                for negative in [false, true] {
                    let unit = UnitSpec {
                        negative,
                        exponent,
                        first,
                        count,
                    };
                    assert!(period(f, fmt, unit).is_some(), "{f} {unit:?}");
                    // Whole exact regions are one run before any period (`exact.rs`).
                    if crate::regions::exact::exact_run(f, fmt, unit).is_some() {
                        continue;
                    }
                    let cfg = SearchConfig::in_format(f, fmt, k);
                    let got = search_unit(&cfg, unit, &Cpu).unwrap();
                    assert_eq!(
                        got.stats.periodic_arguments,
                        count - period(f, fmt, unit).unwrap()
                    );
                    let (mut cases, mut exact) = (got.hr_cases.iter(), got.exact_cases.iter());
                    let lattice = Lattice::of(f, fmt, unit);
                    for o in 0..count {
                        let x = unit.argument(o);
                        let truth = classify_in(f, fmt, &x, k).unwrap();
                        if lattice.is_some_and(|t| t.covers(first + o)) {
                            let pole = matches!(truth, Verdict::Skipped(SkipReason::Pole));
                            assert!(matches!(truth, Verdict::Exact(_)) || pole, "{f} {o}");
                            lattices += 1;
                            continue;
                        }
                        match truth {
                            Verdict::Hard(c) => {
                                assert_eq!(cases.next(), Some(&c), "{f} {unit:?} {o}");
                                hard += 1;
                            }
                            Verdict::Exact(e) => assert_eq!(exact.next(), Some(&e), "{o}"),
                            _ => {}
                        }
                    }
                    assert_eq!((cases.next(), exact.next()), (None, None), "{f} {unit:?}");
                    let mut off = cfg;
                    off.periodic = false;
                    let full = search_unit(&off, unit, &Cpu).unwrap();
                    assert_eq!(full.hr_cases, got.hr_cases, "{f} {unit:?}");
                    assert_eq!(full.exact_cases, got.exact_cases, "{f} {unit:?}");
                    assert_eq!(full.skipped, got.skipped, "{f} {unit:?}");
                    assert_eq!(full.exact_lattice, got.exact_lattice, "{f} {unit:?}");
                    repeated += 1;
                }
            }
        }
        assert!(repeated >= 16, "{repeated} units repeated");
        assert!(hard > 100, "{hard} HR-cases copied");
        assert!(lattices > 100, "{lattices} lattice points left out");
        // Tanpi's poles are lattice points, counted in its run: the search skips no run, nor
        // does the coordinator's recomputation.
        let unit = UnitSpec {
            negative: true,
            exponent: 19,
            first: 0x80_1230,
            count: 4096,
        };
        let cfg = SearchConfig::in_format(Function::Tanpi, b32, 8);
        let searched = search_unit(&cfg, unit, &Cpu).unwrap();
        let recomputed = crate::regions::skip::skipped_runs(Function::Tanpi, b32, 8, unit).unwrap();
        assert_eq!((searched.skipped.len(), recomputed.len()), (0, 0));
        // 2^19 in binary32: multiples of 1/16, a quarter every 4 arguments, a pole every 16.
        assert_eq!(
            searched.exact_lattice.map(|r| (r.count, r.poles)),
            Some((768, 256))
        );
    }

    /// Sin is not periodic on a dyadic grid; a unit shorter than two periods is searched whole.
    #[test]
    fn only_units_of_two_periods_repeat() {
        let b32 = Format::named("binary32").unwrap();
        let unit = |exponent, count| UnitSpec {
            negative: false,
            exponent,
            first: 1 << 23,
            count,
        };
        assert_eq!(period(Function::Sin, b32, unit(20, 1 << 20)), None);
        // 2^20: s = -3, a period of 16 arguments.
        assert_eq!(period(Function::Sinpi, b32, unit(20, 32)), Some(16));
        assert_eq!(period(Function::Tanpi, b32, unit(20, 31)), None);
        // 2^0: a period of 2^24 arguments, more than a binade holds.
        assert_eq!(period(Function::Cospi, b32, unit(0, 1 << 23)), None);
    }

    /// A unit whose first period lists more cases than may be copied fails, naming them.
    #[test]
    fn too_many_copies_fail_with_the_class_named() {
        let b64 = Format::named("binary64").unwrap();
        // 2^45: a period of 256 arguments; 2^40 of them hold 2^32 periods, and any exact
        // case or HR-case of the first period would be copied 2^32 times.
        let unit = UnitSpec {
            negative: false,
            exponent: 45,
            first: 1 << 52,
            count: 1 << 40,
        };
        let l = period(Function::Sinpi, b64, unit).unwrap();
        let base = Cases {
            exact_cases: vec![ExactCase {
                x: unit.argument(3).to_hex(b64.precision),
                value: "0x1p+0".into(),
            }],
            ..Cases::default()
        };
        let err = repeat(b64, unit, l, base).unwrap_err();
        assert!(err.to_string().contains("search smaller units"), "{err}");
    }
}
