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
use crate::search::backend::{SearchError, Stats};
use rug::float::Round;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

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

/// What a search found, as the search lists it.
#[derive(Debug, Default)]
pub struct Cases {
    pub hr_cases: Vec<HrCase>,
    pub exact_cases: Vec<ExactCase>,
    pub skipped: Vec<Skipped>,
}

/// The first period of `unit`'s binade (of its sign): the significands `[2^(p-1), 2^(p-1) + l)`.
/// Every unit of the binade is searched through this one, wherever it starts, so two units'
/// counters never depend on which of them a worker met first.
pub fn base_unit(fmt: Format, unit: UnitSpec, l: u64) -> UnitSpec {
    UnitSpec {
        first: 1 << (fmt.precision.bits() - 1),
        count: l,
        ..unit
    }
}

/// The search of a binade's first period, its cases by offset in it (residues modulo `l`).
#[derive(Debug)]
pub struct Base {
    pub stats: Stats,
    hr: Vec<(u64, HrCase)>,
    exact: Vec<(u64, ExactCase)>,
    /// Skipped runs by their first offset, in order.
    skipped: Vec<(u64, Skipped)>,
}

impl Base {
    /// The base of `unit` (from [`base_unit`]) from what its search found.
    pub fn new(
        fmt: Format,
        unit: UnitSpec,
        stats: Stats,
        cases: Cases,
    ) -> Result<Base, SearchError> {
        let at = |x: &str| offset_of(fmt, unit, x);
        let mut skipped = Vec::with_capacity(cases.skipped.len());
        for r in cases.skipped {
            let first = at(&r.first)?.min(at(&r.last)?);
            skipped.push((first, r));
        }
        Ok(Base {
            stats,
            hr: cases
                .hr_cases
                .into_iter()
                .map(|c| Ok((at(&c.x)?, c)))
                .collect::<Result<_, SearchError>>()?,
            exact: cases
                .exact_cases
                .into_iter()
                .map(|c| Ok((at(&c.x)?, c)))
                .collect::<Result<_, SearchError>>()?,
            skipped,
        })
    }
}

/// Bases searched by this process, by search configuration, sign and binade: every unit of a
/// binade after the first one a worker meets costs only its copies. Units searched side by
/// side may each search the base once (nothing waits here: a thread of rayon that waited could
/// hold, below its waiting frame, a job the base's own search waits for).
static BASES: LazyLock<Mutex<HashMap<String, Arc<Base>>>> = LazyLock::new(Default::default);

/// The most bases kept: a whole function's binades with a period, several times over.
const MAX_BASES: usize = 1 << 14;

/// The keys whose base a caller of [`claim`] is searching now.
static SEARCHING: LazyLock<Mutex<std::collections::HashSet<String>>> =
    LazyLock::new(Default::default);

/// Who searches a base: the one caller that got [`Claim::Mine`] (until its guard drops);
/// the others see [`Claim::Busy`] meanwhile.
#[derive(Debug)]
pub enum Claim {
    Mine(Searching),
    Busy,
}

/// A claim on searching a base, released when dropped (searched or not).
#[derive(Debug)]
pub struct Searching(String);

impl Drop for Searching {
    fn drop(&mut self) {
        if let Ok(mut s) = SEARCHING.lock() {
            s.remove(&self.0);
        }
    }
}

/// Claims the search of `key`'s base, atomically: `Mine` for the first caller, `Busy` for the
/// others until it drops its claim.
pub fn claim(key: &str) -> Claim {
    let mut s = SEARCHING.lock().unwrap_or_else(|e| e.into_inner());
    if s.insert(key.to_string()) {
        Claim::Mine(Searching(key.to_string()))
    } else {
        Claim::Busy
    }
}

/// The base of `key` if this process searched it.
pub fn cached(key: &str) -> Option<Arc<Base>> {
    BASES.lock().ok()?.get(key).cloned()
}

/// Keeps `base` under `key` (the first one kept wins: every search of a base gives the same).
pub fn remember(key: String, base: Base) -> Arc<Base> {
    let Ok(mut bases) = BASES.lock() else {
        return Arc::new(base);
    };
    if bases.len() >= MAX_BASES {
        bases.clear();
    }
    bases.entry(key).or_insert_with(|| Arc::new(base)).clone()
}

/// The cases of `unit` from `base`, those of its binade's first period: the argument at offset
/// `t` of the unit is `x ± 2n` of the base's at offset `(first + t - 2^(p-1)) mod l`, with the
/// same value: the same hardness, kind, rounding, exact value or pole; only the argument's text
/// changes. In argument order.
pub fn repeat(fmt: Format, unit: UnitSpec, l: u64, base: &Base) -> Result<Cases, SearchError> {
    let p = fmt.precision;
    let periods = unit.count.div_ceil(l) + 1;
    let listed = (base.hr.len() + base.exact.len()) as u64;
    if listed.saturating_mul(periods) > MAX_COPIES {
        let class = base.hr.first().map(|c| c.1.x.clone());
        return Err(SearchError::TooManyCases(format!(
            "{}: its {listed} cases of a period (such as {}) repeat every 2 over {periods} \
             periods, more than {MAX_COPIES} cases to list; search smaller units",
            unit.describe(p),
            class.as_deref().unwrap_or("an exact case")
        )));
    }
    // The residue of the unit's offset 0.
    let phase = (unit.first - base_unit(fmt, unit, l).first) % l;
    // The unit's offsets of residue r: r - phase + k l, within the unit.
    let copies = move |r: u64| {
        let first = (r + l - phase) % l;
        (first..unit.count).step_by(l as usize)
    };
    let mut hr: Vec<(u64, HrCase)> = Vec::new();
    for (r, c) in &base.hr {
        hr.extend(copies(*r).map(|t| {
            let x = unit.argument(t).to_hex(p);
            (t, HrCase { x, ..c.clone() })
        }));
    }
    let mut exact: Vec<(u64, ExactCase)> = Vec::new();
    for (r, e) in &base.exact {
        exact.extend(copies(*r).map(|t| {
            let x = unit.argument(t).to_hex(p);
            (t, ExactCase { x, ..e.clone() })
        }));
    }
    hr.sort_unstable_by_key(|c| c.0);
    exact.sort_unstable_by_key(|c| c.0);
    Ok(Cases {
        hr_cases: hr.into_iter().map(|c| c.1).collect(),
        exact_cases: exact.into_iter().map(|c| c.1).collect(),
        skipped: repeat_runs(fmt, unit, l, phase, &base.skipped),
    })
}

/// The skipped runs of a period repeated over the unit (residues `[r, r + count)` at the unit's
/// offsets `r - phase + k l`, cut at its ends), merged where they meet.
fn repeat_runs(
    fmt: Format,
    unit: UnitSpec,
    l: u64,
    phase: u64,
    base: &[(u64, Skipped)],
) -> Vec<Skipped> {
    let mut runs = Runs::default();
    // Period k of the unit starts at k l - phase (the first one before the unit's start).
    let mut start = -(phase as i128);
    while start < i128::from(unit.count) {
        for (r, run) in base {
            let a = start + i128::from(*r);
            let b = (a + i128::from(run.count)).min(i128::from(unit.count));
            let a = a.max(0);
            if a < b {
                runs.push(a as u64, (b - a) as u64, run.reason, run.trivial.clone());
            }
        }
        start += i128::from(l);
    }
    runs.into_skipped(unit, fmt.precision)
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
                    // Searched again: from this process's cache, the same result.
                    let again = search_unit(&cfg, unit, &Cpu).unwrap();
                    assert_eq!((&again.hr_cases, &again.stats), (&got.hr_cases, &got.stats));
                    assert_eq!(again.skipped, got.skipped);
                    assert_eq!(again.timings, crate::search::Timings::default());
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

    /// A skipped run of the base repeats at every period of the unit, cut at the unit's ends
    /// where the unit starts mid-period, and merged where copies meet.
    #[test]
    fn skipped_runs_repeat_by_residue() {
        let b32 = Format::named("binary32").unwrap();
        // 2^19: a period of 32 arguments; the unit starts at residue 20 and holds 3 periods.
        let unit = UnitSpec {
            negative: false,
            exponent: 19,
            first: (1 << 23) + 20,
            count: 96,
        };
        let l = period(Function::Sinpi, b32, unit).unwrap();
        let first = base_unit(b32, unit, l);
        let run = |a: u64, n: u64| Skipped {
            first: first.argument(a).to_hex(b32.precision),
            last: first.argument(a + n - 1).to_hex(b32.precision),
            count: n,
            reason: SkipReason::Overflow,
            trivial: None,
            exact: None,
        };
        // Residues [18, 24) and [30, 32) + [0, 2) (two runs meeting across the period).
        let cases = Cases {
            skipped: vec![run(0, 2), run(18, 6), run(30, 2)],
            ..Cases::default()
        };
        let base = Base::new(b32, first, Stats::default(), cases).unwrap();
        let got: Vec<(String, u64)> = repeat(b32, unit, l, &base)
            .unwrap()
            .skipped
            .into_iter()
            .map(|r| (r.first, r.count))
            .collect();
        // Unit offset t has residue (t + 20) mod 32: residues [18, 24) at t = 0..4, 30..36,
        // 62..68, 94..96; [30, 34) at t = 10..14, 42..46, 74..78.
        let want: Vec<(String, u64)> =
            [(0, 4), (10, 4), (30, 6), (42, 4), (62, 6), (74, 4), (94, 2)]
                .into_iter()
                .map(|(t, n)| (unit.argument(t).to_hex(b32.precision), n))
                .collect();
        assert_eq!(got, want);
    }

    /// `warm_period` searches a binade's first period once, and the units then only copy it:
    /// the same result as a unit that searches the period itself.
    #[test]
    fn a_warmed_period_is_searched_once() {
        use crate::search::warm_period;
        let b32 = Format::named("binary32").unwrap();
        // A threshold no other test uses: this process's cache is shared between tests.
        let cfg = SearchConfig::in_format(Function::Cospi, b32, 9);
        let unit = |first: u64| UnitSpec {
            negative: true,
            exponent: 9,
            first: (1 << 23) + first,
            count: 1 << 17,
        };
        let mut direct = cfg;
        direct.periodic = false;
        let truth = search_unit(&direct, unit(1 << 18), &Cpu).unwrap();
        let secs = warm_period(&cfg, unit(0), &Cpu).unwrap();
        assert!(secs.is_some_and(|s| s >= 0.0), "{secs:?}");
        assert_eq!(warm_period(&cfg, unit(1 << 18), &Cpu).unwrap(), None);
        let warm = search_unit(&cfg, unit(1 << 18), &Cpu).unwrap();
        assert_eq!(
            warm.timings.generation_s, 0.0,
            "the period is not searched again"
        );
        assert_eq!(warm.stats.periodic_arguments, 3 << 15);
        assert!(!warm.hr_cases.is_empty());
        assert_eq!(warm.hr_cases, truth.hr_cases);
        assert_eq!(warm.exact_cases, truth.exact_cases);
        // No period: nothing to warm.
        let short = UnitSpec {
            count: 1 << 10,
            ..unit(0)
        };
        assert_eq!(warm_period(&cfg, short, &Cpu).unwrap(), None);
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
        let first = base_unit(b64, unit, l);
        let cases = Cases {
            exact_cases: vec![ExactCase {
                x: first.argument(3).to_hex(b64.precision),
                value: "0x1p+0".into(),
            }],
            ..Cases::default()
        };
        let base = Base::new(b64, first, Stats::default(), cases).unwrap();
        let err = repeat(b64, unit, l, &base).unwrap_err();
        assert!(matches!(err, SearchError::TooManyCases(_)), "{err:?}");
        assert!(err.to_string().contains("search smaller units"), "{err}");
    }
}
