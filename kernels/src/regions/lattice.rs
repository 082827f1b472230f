//! Exact lattices: in a binade where the arguments of sinpi or cospi are spaced finer than 1/2
//! (tanpi: finer than 1/4), those that are multiples of 1/2 (1/4) are exact cases by the rules of
//! the exact regions (`exact.rs`), tanpi's at odd multiples of 1/2 poles. A unit counts them
//! under one rule instead of listing each, and never asks MPFR about them: a unit of `2^44`
//! arguments of binary64 near `2^30` holds `2^23` of them, more than a result may list
//! (`docs/error-analysis.md` §11). Any other exact case would still be listed one by one (by
//! Niven's theorem there is none: a rational `x` gives a rational `sin(pi x)` only at `0, ±1/2,
//! ±1`, and `±1/2` needs `x = ±1/6 mod 2`, no dyadic number; `tan(pi x)` only at `0` and `±1`).
//! Tanpi's poles on the lattice are counted apart in the same run, not listed one by one as
//! skipped runs: off the lattice every result of such a binade lies in the format's range.

use crate::numbers::format::{parse_number, Format, Precision};
use crate::oracle::function::Function;
use crate::plan::UnitSpec;
use crate::regions::exact::in_exact_region;
use serde::{Deserialize, Serialize};

/// The exact lattice of one binade: significands `m` (`|x| = m 2^s`) that are multiples of
/// `modulus`, for tanpi less the poles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lattice {
    function: Function,
    /// `2^(-1 - s)` (sinpi, cospi: `x` a multiple of 1/2) or `2^(-2 - s)` (tanpi: of 1/4).
    modulus: u64,
}

impl Lattice {
    /// The lattice of `unit`'s binade in `fmt`: normal binades of sinpi, cospi and tanpi whose
    /// spacing `2^s` is finer than the lattice and that are no exact region whole; `None`
    /// elsewhere (also where the binade holds no lattice point, below 1/2 or 1/4).
    pub fn of(f: Function, fmt: Format, unit: UnitSpec) -> Option<Lattice> {
        let p = fmt.precision.bits() as i32;
        if unit.count == 0 || unit.first >> (p - 1) == 0 || in_exact_region(f, fmt, unit) {
            return None;
        }
        let s = unit.exponent - p + 1;
        let shift = match f {
            Function::Sinpi | Function::Cospi => -1 - s,
            Function::Tanpi => -2 - s,
            _ => return None,
        };
        // 2^shift <= 2^(p-1) <= m: the binade reaches the lattice's first point.
        if !(1..p).contains(&shift) || !rest_in_range(fmt, s) {
            return None;
        }
        Some(Lattice {
            function: f,
            modulus: 1 << shift,
        })
    }

    /// Whether the argument of significand `m` (either sign) is an exact case of the lattice.
    pub fn holds(&self, m: u64) -> bool {
        self.covers(m) && !(self.function == Function::Tanpi && self.pole(m))
    }

    /// Whether the argument of significand `m` lies on the lattice: an exact case, or one of
    /// tanpi's poles. The search judges none of them.
    pub fn covers(&self, m: u64) -> bool {
        m.is_multiple_of(self.modulus)
    }

    /// tanpi at `x = k/4` with `k = 2 mod 4`: a pole, not an exact case.
    fn pole(&self, m: u64) -> bool {
        (m / self.modulus) % 4 == 2
    }

    /// How many significands of `[first, first + count)` are exact cases of the lattice.
    pub fn count(&self, first: u64, count: u64) -> u64 {
        let (lo, hi) = (first, first + count);
        let on = multiples_below(hi, self.modulus, 0) - multiples_below(lo, self.modulus, 0);
        on - self.poles(first, count)
    }

    /// How many significands of `[first, first + count)` are poles of the lattice (tanpi).
    pub fn poles(&self, first: u64, count: u64) -> u64 {
        if self.function != Function::Tanpi {
            return 0;
        }
        let (lo, hi) = (first, first + count);
        let (step, r) = (4 * self.modulus, 2 * self.modulus);
        multiples_below(hi, step, r) - multiples_below(lo, step, r)
    }

    /// The run of `unit` (of this lattice's binade, precision `p`), when it holds a point of
    /// the lattice.
    pub fn run(&self, unit: UnitSpec, p: Precision) -> Option<LatticeRun> {
        let count = self.count(unit.first, unit.count);
        let poles = self.poles(unit.first, unit.count);
        if count + poles == 0 {
            return None;
        }
        let m = self.modulus;
        // The first and last multiples of the modulus in the unit.
        let lo = unit.first.div_ceil(m) * m;
        let hi = (unit.first + unit.count - 1) / m * m;
        let at = |sig: u64| unit.argument(sig - unit.first).to_hex(p);
        let (a, b) = (at(lo), at(hi));
        // A negative unit's significands grow towards -infinity.
        let (first, last) = if unit.negative { (b, a) } else { (a, b) };
        Some(LatticeRun {
            first,
            last,
            count,
            poles,
            values: self.values().to_string(),
        })
    }

    /// The arguments of the lattice and `f`'s value at each, for people.
    pub fn values(&self) -> &'static str {
        match self.function {
            Function::Sinpi => {
                "x = k/2 for an integer k: sinpi(x) = 0 at even k (+0 for x > 0, -0 for x < 0), \
                 1 at k = 1 mod 4, -1 at k = 3 mod 4"
            }
            Function::Cospi => {
                "x = k/2 for an integer k: cospi(x) = +0 at odd k, (-1)^(k/2) at even k"
            }
            _ => {
                "x = k/4 for an integer k, k not 2 mod 4: tanpi(x) = 0 at k = 0 mod 4 (+0 for \
                 even x > 0 and odd x < 0, -0 for odd x > 0 and even x < 0), 1 at k = 1 mod 4, \
                 -1 at k = 3 mod 4; at k = 2 mod 4 a pole (tanpi(x) infinite: no number to \
                 round), counted apart"
            }
        }
    }
}

/// How many `m < n` with `m = r mod step`.
fn multiples_below(n: u64, step: u64, r: u64) -> u64 {
    if n <= r {
        0
    } else {
        (n - r - 1) / step + 1
    }
}

/// Whether every argument `x = ±m 2^s` of a binade with a lattice, off the lattice, has a
/// result in `fmt`'s range (no overflow, no underflow: `SkipReason`'s rules), so the poles are
/// the only arguments the binade skips. Off the lattice `x` lies at least `2^s` from every
/// multiple of 1/2 (tanpi: of 1/4), so `|sinpi(x)|`, `|cospi(x)|` lie in `[2^(s+1), 1]`
/// (`|sin(pi d)| >= 2d` for `d <= 1/2`) and `|tanpi(x)|` in `[2^(s+1), 2^(-s-1))`
/// (`tan(pi d) >= pi d`, `cot(pi d) <= 1 / (pi d)`): within any format whose exponents reach
/// both (every named one: `|s| <= p + 1` there).
fn rest_in_range(fmt: Format, s: i32) -> bool {
    fmt.exponents.is_none_or(|x| {
        let p = fmt.precision.bits() as i32;
        x.emax + 1 >= -s - 1 && x.emin - p - 1 <= s + 1
    })
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The widest gap between consecutive lattice points of any lattice: 1/2 (tanpi: 1/4, or 1/2
/// across a pole).
const WIDEST_GAP: f64 = 0.5;

/// The exact cases of a unit, or of a range of units, that lie on their binades' lattices:
/// counted under their rule instead of listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatticeRun {
    /// The smallest and largest lattice argument, C99 hex (both exact cases).
    pub first: String,
    pub last: String,
    /// Exact cases of the lattice in `[first, last]`.
    pub count: u64,
    /// Poles of the lattice in `[first, last]` (tanpi): skipped, no number to round. Absent
    /// from the JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub poles: u64,
    /// Which arguments and `f`'s value at each ([`Lattice::values`]).
    pub values: String,
}

impl LatticeRun {
    /// The rule for people.
    pub fn rule(&self) -> String {
        format!(
            "{}: every such x of the run is an exact case (or a pole where this says so), \
             counted by this rule and not listed (docs/error-analysis.md §11)",
            self.values
        )
    }

    /// The run for people: `prefix [first, last] (count exact cases[, poles poles]): rule`.
    pub fn line(&self, prefix: &str) -> String {
        let poles = match self.poles {
            0 => String::new(),
            n => format!(", {n} poles"),
        };
        format!(
            "{prefix} [{}, {}] ({} exact cases{poles}): {}",
            self.first,
            self.last,
            self.count,
            self.rule()
        )
    }
}

/// How many exact cases of `unit` its lattice run counts (0 without one): what an honest
/// result leaves out of its list.
pub fn lattice_count(f: Function, fmt: Format, unit: UnitSpec) -> u64 {
    Lattice::of(f, fmt, unit).map_or(0, |l| l.count(unit.first, unit.count))
}

/// Lattice runs sorted by the value of their first argument: those of one rule and one sign
/// whose ends are consecutive lattice points merged (no lattice point lies between them, so
/// the run's count is still that of the lattice points of `[first, last]`).
pub fn merge_runs(runs: &mut Vec<LatticeRun>, p: Precision) {
    let value = |x: &str| {
        parse_number(x, p.bits(), rug::float::Round::Nearest).expect("our own output parses")
    };
    // Lattices lie below 2^(p-1), where two arguments differ exactly at this precision.
    let wide = p.bits() + 8;
    let mut merged: Vec<LatticeRun> = Vec::with_capacity(runs.len());
    for r in runs.drain(..) {
        if let Some(last) = merged.last_mut() {
            let gap = rug::Float::with_val(wide, value(&r.first) - value(&last.last));
            // Never across 0: it is no lattice point (`Lattice::of` leaves its binade out).
            let same_sign = last.last.starts_with('-') == r.first.starts_with('-');
            if last.values == r.values && same_sign && gap > 0 && gap <= WIDEST_GAP {
                last.last = r.last;
                last.count += r.count;
                last.poles += r.poles;
                continue;
            }
        }
        merged.push(r);
    }
    *runs = merged;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::verify::{classify_in, SkipReason, Verdict};
    use std::str::FromStr;

    fn lattice_run(f: Function, fmt: Format, unit: UnitSpec) -> Option<LatticeRun> {
        Lattice::of(f, fmt, unit)?.run(unit, fmt.precision)
    }

    /// Every normal argument of binary16 and bfloat16: on the lattice exactly where MPFR says
    /// exact (tanpi: exact, its poles off the lattice), and each unit's count is the number of
    /// its arguments on it.
    #[test]
    fn the_lattice_is_the_exact_cases_of_small_formats() {
        for name in ["binary16", "bfloat16"] {
            let fmt = Format::from_str(name).unwrap();
            let p = fmt.precision.bits();
            let r = fmt.exponents.unwrap();
            for f in [Function::Sinpi, Function::Cospi, Function::Tanpi] {
                let mut on = 0;
                for negative in [false, true] {
                    for exponent in r.emin..=r.emax {
                        let binade = UnitSpec {
                            negative,
                            exponent,
                            first: 1 << (p - 1),
                            count: 1 << (p - 1),
                        };
                        let l = Lattice::of(f, fmt, binade);
                        let (mut counted, mut poles) = (0, 0);
                        for o in 0..binade.count {
                            let a = binade.argument(o);
                            let v = classify_in(f, fmt, &a, 1).unwrap();
                            let holds = l.is_some_and(|l| l.holds(a.significand));
                            let covers = l.is_some_and(|l| l.covers(a.significand));
                            if holds {
                                counted += 1;
                                assert!(matches!(v, Verdict::Exact(_)), "{f} {a:?} {v:?}");
                            } else if covers {
                                poles += 1;
                                let pole = Verdict::Skipped(SkipReason::Pole);
                                assert_eq!(v, pole, "{f} {a:?}");
                            } else if !in_exact_region(f, fmt, binade) {
                                assert!(!matches!(v, Verdict::Exact(_)), "{f} {a:?} exact off");
                            }
                            // Off the lattice of a binade with one, nothing is skipped: the
                            // coordinator recomputes no run there (`skip.rs`).
                            if l.is_some() && !covers {
                                assert!(!matches!(v, Verdict::Skipped(_)), "{f} {a:?} {v:?}");
                            }
                        }
                        let count = l.map_or(0, |l| l.count(binade.first, binade.count));
                        assert_eq!(count, counted, "{f} {name} {exponent}");
                        let counted_poles = l.map_or(0, |l| l.poles(binade.first, binade.count));
                        assert_eq!(counted_poles, poles, "{f} {name} {exponent}");
                        on += counted;
                        // Any part of the binade counts its own points.
                        if let Some(l) = l {
                            let (a, n) = (binade.first + 3, binade.count / 3);
                            let own = (a..a + n).filter(|&m| l.holds(m)).count() as u64;
                            assert_eq!(l.count(a, n), own);
                        }
                    }
                }
                assert!(on > 0, "{f} {name}: some lattice points");
            }
        }
    }

    #[test]
    fn a_unit_names_its_first_and_last_lattice_points() {
        let b64 = Format::from_str("binary64").unwrap();
        let unit = UnitSpec {
            negative: false,
            exponent: 30,
            first: 1 << 52,
            count: 1 << 24,
        };
        let r = lattice_run(Function::Sinpi, b64, unit).unwrap();
        assert_eq!(
            (r.first.as_str(), r.last.as_str(), r.count),
            ("0x1p+30", "0x1.0000000ep+30", 8)
        );
        let neg = lattice_run(
            Function::Tanpi,
            b64,
            UnitSpec {
                negative: true,
                ..unit
            },
        )
        .unwrap();
        // Multiples of 1/4 in [2^30, 2^30 + 4): 16, of which 4 poles.
        assert_eq!((neg.count, neg.poles), (12, 4));
        assert_eq!(neg.first, "-0x1.0000000fp+30");
        assert_eq!(neg.last, "-0x1p+30");
        // Merged with the next unit's run: one rule, consecutive points.
        let next = UnitSpec {
            first: unit.first + unit.count,
            ..unit
        };
        let mut runs = vec![r.clone(), lattice_run(Function::Sinpi, b64, next).unwrap()];
        merge_runs(&mut runs, b64.precision);
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].first.as_str(), runs[0].count), ("0x1p+30", 16));
        // Not across 0 (tanpi's -1/4 and 1/4 are 1/2 apart).
        let quarter = |negative| UnitSpec {
            negative,
            exponent: -2,
            first: 1 << 52,
            count: 1,
        };
        let mut runs: Vec<LatticeRun> = [true, false]
            .into_iter()
            .map(|n| lattice_run(Function::Tanpi, b64, quarter(n)).unwrap())
            .collect();
        merge_runs(&mut runs, b64.precision);
        assert_eq!(runs.len(), 2);
        // No lattice where the binade is an exact region or too fine to reach 1/2.
        let at = |exponent| UnitSpec { exponent, ..unit };
        assert!(Lattice::of(Function::Sinpi, b64, at(51)).is_none());
        assert!(Lattice::of(Function::Sinpi, b64, at(50)).is_some());
        assert!(Lattice::of(Function::Sinpi, b64, at(-1)).is_some());
        assert!(Lattice::of(Function::Sinpi, b64, at(-2)).is_none());
        assert!(Lattice::of(Function::Tanpi, b64, at(-2)).is_some());
        assert!(Lattice::of(Function::Sin, b64, at(3)).is_none());
    }
}
