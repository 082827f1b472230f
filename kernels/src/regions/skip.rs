//! The skipped runs of a unit computed without searching it: what `search::search_unit` must
//! list as skipped (overflow, underflow, pole, trivial), for a coordinator that does not trust
//! the worker's list. Cheap where nothing is skipped: one ball evaluation of `f` over the unit.
//!
//! An argument is skipped exactly when [`classify_in`] says [`Verdict::Skipped`] (the search
//! skips a generated piece only when every argument of it is out of range, and generates a
//! piece only when none is; its exhaustive pieces classify each argument). So this module
//! bisects the unit: a piece whose ball of `|f|` lies within the format's range skips nothing,
//! one whose ball lies wholly beyond it skips everything for that reason, and single arguments
//! left undecided are classified with MPFR. Adjacent runs of one reason are merged, as the
//! search merges them, so the two lists are equal as lists.

use crate::numbers::ball::Ball;
use crate::numbers::format::Format;
use crate::numbers::series::Series;
use crate::oracle::function::Function;
use crate::oracle::verify::{classify_in, far_beyond, SkipReason, Verdict, VerifyError};
use crate::plan::{split, UnitSpec};
use crate::regions::exact::{exact_run, has_exact_regions};
use crate::regions::lattice::Lattice;
use crate::regions::monotone::asymptote;
use crate::regions::partition::{partition, Part};
use crate::regions::runs::{Runs, Skipped};
use crate::regions::trivial::Rule;
use rug::Float;

/// The working precision of the ball evaluations: the ends of a piece are exact at it.
fn ball_prec(fmt: Format) -> u32 {
    fmt.precision.bits() + 64
}

/// What a piece's ball says about every argument of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    /// No argument is skipped.
    InRange,
    /// Every argument is skipped, for this reason.
    All(SkipReason),
    /// Cannot tell: split (or classify a single argument).
    Unknown,
}

/// Whether the runs [`skipped_runs`] gives for `unit`, and for every unit inside it, are exactly
/// its arguments beyond the format's range: a property of each argument, so a range that
/// skips nothing has no part that skips something. That holds where no rule that depends on
/// the cut can reach: no pole, no exact region (`exact.rs`), no trivial run near 0
/// (`trivial::Rule`) and no asymptote far from it (`monotone::asymptote`). The coordinator
/// answers for all the units of such a binade at once; a new kind of run must be added here.
pub fn runs_are_pointwise(f: Function, fmt: Format, unit: UnitSpec) -> bool {
    !f.has_poles()
        && !has_exact_regions(f)
        && asymptote(f, unit.negative).is_none()
        && Rule::for_unit(f, fmt.precision, unit).is_none()
}

/// The skipped runs of `unit` in format `fmt` at threshold `min_bits`, in the order of
/// `search_unit` (significand order, adjacent runs of one reason merged; `first`/`last` the
/// smallest and largest value): a unit of an exact region whole (`exact::exact_run`, the
/// search's own rule), else the trivial runs of `partition::partition` (the search's own cut),
/// then, between them, what overflows, underflows or is a pole. A bare precision skips only
/// poles, exact and trivial runs.
pub fn skipped_runs(
    f: Function,
    fmt: Format,
    min_bits: u32,
    unit: UnitSpec,
) -> Result<Vec<Skipped>, VerifyError> {
    if let Some(run) = exact_run(f, fmt, unit) {
        return Ok(vec![run]);
    }
    // Off its lattice every result of such a binade is in range, and tanpi's poles lie on
    // it: the lattice run counts them (`lattice.rs`), so nothing is searched for here. Else
    // the zeros of sinpi and the poles of tanpi, every 2^(-1-s) arguments, would each cost a
    // bisection of the unit.
    let lattice = Lattice::of(f, fmt, unit).is_some();
    let mut runs = Runs::default();
    for (part, kind) in partition(f, fmt, min_bits, unit, split) {
        match kind {
            Part::Trivial(t) => runs.push(
                part.first - unit.first,
                part.count,
                SkipReason::Trivial,
                Some(t),
            ),
            // Normal results of a finite, monotone f: nothing beyond the range, no pole.
            Part::Clear => {}
            Part::Search if !lattice && (fmt.exponents.is_some() || f.has_poles()) => {
                beyond_range(f, fmt, unit, part, &mut runs)?
            }
            Part::Search => {}
        }
    }
    Ok(runs.into_skipped(unit, fmt.precision))
}

/// How much of a unit its search skips, by [`skipped_runs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skips {
    /// No argument.
    Nothing,
    /// Every argument, in one run: the search lists the unit as that run and runs nothing.
    Everything,
    /// Some of them (or all of them in several runs).
    Part,
}

/// How much of `unit` its search skips.
pub fn skips(
    f: Function,
    fmt: Format,
    min_bits: u32,
    unit: UnitSpec,
) -> Result<Skips, VerifyError> {
    Ok(match skipped_runs(f, fmt, min_bits, unit)?.as_slice() {
        [] => Skips::Nothing,
        [one] if one.count == unit.count => Skips::Everything,
        _ => Skips::Part,
    })
}

/// Whether the search of `unit` lists it as one skipped run and runs nothing (an error: it
/// cannot tell, so no). Never for a function with poles: a pole is one argument, and finding
/// one over a wide unit costs a bisection, so such units are run, not asked.
pub fn skipped_whole(f: Function, fmt: Format, min_bits: u32, unit: UnitSpec) -> bool {
    !f.has_poles() && matches!(skips(f, fmt, min_bits, unit), Ok(Skips::Everything))
}

/// The runs of `part` (of `unit`) out of the format's range or at a pole, by bisection.
fn beyond_range(
    f: Function,
    fmt: Format,
    unit: UnitSpec,
    part: UnitSpec,
    runs: &mut Runs,
) -> Result<(), VerifyError> {
    let mut stack = vec![part];
    // Depth-first, left to right: runs come out in significand order.
    while let Some(piece) = stack.pop() {
        let verdict = if piece.count == 1 {
            match classify_in(f, fmt, &piece.argument(0), 0)? {
                Verdict::Skipped(r) => Piece::All(r),
                _ => Piece::InRange,
            }
        } else {
            judge_piece(f, fmt, piece)
        };
        match verdict {
            Piece::InRange => {}
            Piece::All(reason) => runs.push(piece.first - unit.first, piece.count, reason, None),
            Piece::Unknown => {
                // The search's own cut; any cut gives the same runs (an argument is skipped
                // exactly when `classify_in` says so, and adjacent runs merge).
                let (left, right) = split(piece);
                stack.push(right);
                stack.push(left);
            }
        }
    }
    Ok(())
}

/// The ball of `|f|` over a piece of at least two arguments, against the format's range.
fn judge_piece(f: Function, fmt: Format, piece: UnitSpec) -> Piece {
    if periodic_in_range(f, fmt, piece) {
        return Piece::InRange;
    }
    let p = fmt.precision;
    let prec = ball_prec(fmt);
    if fmt.exponents.is_some() {
        // Far beyond the format's range (or MPFR's, where no ball can be evaluated), as in
        // generation: our functions are monotonic on a piece of one sign wherever they get
        // that large or small, so both ends beyond it put the whole piece beyond it.
        let beyond = |t: u64| far_beyond(f, fmt, &piece.argument(t).to_float(p));
        match (beyond(0), beyond(piece.count - 1)) {
            (None, None) => {}
            (Some(a), Some(b)) if a == b => return Piece::All(a),
            _ => return Piece::Unknown,
        }
    }
    // The ball of every argument of the piece: its middle and half its width.
    let h_exp = piece.exponent - p.bits() as i32 + 1;
    let last = piece.first + (piece.count - 1);
    let mut lo = Float::with_val(prec, piece.first);
    lo <<= h_exp;
    let mut hi = Float::with_val(prec, last);
    hi <<= h_exp;
    if piece.negative {
        lo = -lo;
        hi = -hi;
    }
    let ball = Ball::from_bounds(prec, &lo.clone().min(&hi), &lo.max(&hi));
    let one = Ball::new(prec, 1);
    let Ok(s) = f.series(&Series::linear(ball, one, 2)) else {
        return Piece::Unknown; // a pole, or a ball too wide for the series rule
    };
    let v = &s.c[0];
    if !v.mid.is_finite() || !v.rad.is_finite() {
        return Piece::Unknown;
    }
    let Some(x) = fmt.exponents else {
        // A bare precision skips only poles, and f is finite on this ball.
        return Piece::InRange;
    };
    let pb = p.bits() as i32;
    // Overflow: |f| >= 2^(emax+1). Underflow: |f| < 2^(emin-p-1) (`SkipReason`'s rules,
    // which `classify_in` decides exactly).
    let top = Float::with_val(prec, 1) << (x.emax + 1);
    let tiny = Float::with_val(prec, 1) << (x.emin - pb - 1);
    let (mig, mag) = (v.mig(), v.mag());
    if mig >= top {
        Piece::All(SkipReason::Overflow)
    } else if mag < tiny {
        Piece::All(SkipReason::Underflow)
    } else if mag < top && mig >= tiny {
        Piece::InRange
    } else {
        Piece::Unknown
    }
}

/// sin, cos and tan on a binade from 2 on whose arguments keep at least `D = 2^d` away from
/// every multiple of `pi/2` (`angle.rs`): with `y <= pi/4` the distance to the nearest one,
/// `|f|` is `sin y >= (2/pi) y` or `cos y > 1/2` for sin and cos, and `tan y` or `1/tan y`, with
/// `y <= tan y <= 1`, for tan; so `|f| >= 2^(d-1)` for all three, and tan's `|f| <= 2^-d`. Where
/// that lies within the format's range, no argument of the binade is skipped: far out, where
/// any two consecutive arguments are periods apart, the balls of `skip.rs` never decide.
fn periodic_in_range(f: Function, fmt: Format, piece: UnitSpec) -> bool {
    let Some(x) = fmt.exponents else {
        return false;
    };
    if !matches!(f, Function::Sin | Function::Cos | Function::Tan) {
        return false;
    }
    let p = fmt.precision.bits();
    let Some(d) = crate::regions::angle::distance_log2(p, piece.exponent) else {
        return false;
    };
    // Underflow is |f| < 2^(emin - p - 1), so 2^(d-1) is in range for d - 1 >= emin - p - 1;
    // overflow is |f| >= 2^(emax + 1).
    let tiny = i64::from(x.emin) - i64::from(p) - 1;
    d > tiny && (f != Function::Tan || -d <= i64::from(x.emax))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::split_range_in;
    use crate::search::{search_unit, Cpu, SearchConfig};
    use std::str::FromStr;

    /// The skipped runs of every unit of a range, as the search finds them and as computed here.
    fn compare(f: Function, format: &str, from: &str, to: &str, unit_bits: u32) -> usize {
        let fmt = Format::from_str(format).unwrap();
        let cfg = SearchConfig::in_format(f, fmt, 8);
        let mut runs = 0;
        for u in split_range_in(f, fmt, from, to, Some(unit_bits)).unwrap() {
            let searched = search_unit(&cfg, u, &Cpu).unwrap().skipped;
            let computed = skipped_runs(f, fmt, 8, u).unwrap();
            assert_eq!(
                computed,
                searched,
                "{f} {format} {}",
                u.describe(fmt.precision)
            );
            runs += computed.len();
        }
        runs
    }

    #[test]
    fn skipped_runs_equal_the_searchs_at_overflow_and_underflow() {
        // exp in binary16 over its whole overflow and subnormal thresholds, both signs.
        assert!(compare(Function::Exp, "binary16", "-20", "-8", 8) > 0);
        assert!(compare(Function::Exp, "binary16", "8", "16", 8) > 0);
        // binary32: across log(2^128) (88.72) and log(2^-151) (-104.67), where results round
        // like 0; subnormal results just above skip nothing.
        assert!(compare(Function::Exp, "binary32", "0x1.62p+6", "0x1.64p+6", 12) > 0);
        assert!(compare(Function::Exp, "binary32", "-0x1.a4p+6", "-0x1.a2p+6", 12) > 0);
        assert_eq!(
            compare(Function::Exp, "binary32", "-0x1.9p+6", "-0x1.8fe8p+6", 10),
            0
        );
        // Functions that never leave the range of binary16 here skip nothing.
        assert_eq!(compare(Function::Sin, "binary16", "1", "4", 8), 0);
        assert_eq!(compare(Function::Log, "binary16", "0.5", "4", 8), 0);
        // cosh and erfc run off both ends.
        assert!(compare(Function::Cosh, "binary16", "-16", "-8", 8) > 0);
        assert!(compare(Function::Erfc, "binary16", "2", "8", 8) > 0);
        // bfloat16 and a bare precision (nothing skipped without poles).
        assert!(compare(Function::Exp2, "bfloat16", "100", "200", 6) > 0);
        assert_eq!(compare(Function::Exp, "p11", "8", "16", 8), 0);
    }

    #[test]
    fn trivial_runs_equal_the_searchs() {
        // Through 0, subnormal arguments included: sin rounds like x, cos and exp like 1.
        assert!(compare(Function::Sin, "binary16", "-0x1p-8", "0x1p-8", 6) > 0);
        assert!(compare(Function::Cos, "binary16", "-0x1p-6", "0x1p-6", 6) > 0);
        assert!(compare(Function::Exp, "bfloat16", "-0x1p-6", "0x1p-5", 6) > 0);
        // A bare precision has trivial runs too (no subnormals there).
        assert!(compare(Function::Sinh, "p11", "0x1p-12", "0x1p-6", 6) > 0);
        // Far from 0 and in the bands beyond trivial regions (monotone.rs): runs near the
        // limits, clear pieces cut the same way.
        assert!(compare(Function::Tanh, "binary16", "2", "0x1.ffcp+15", 8) > 0);
        assert!(compare(Function::Expm1, "bfloat16", "-0x1.fep+127", "-2", 6) > 0);
        assert!(compare(Function::Erfc, "bfloat16", "-0x1.fep+127", "-1", 6) > 0);
        assert!(compare(Function::Exp, "binary32", "0x1.fep-33", "0x1.01p-32", 14) > 0);
        assert!(compare(Function::Sin, "binary32", "0x1.ap-16", "0x1.fp-16", 14) > 0);
        assert!(compare(Function::Tanh, "binary64", "20", "24", 40) > 0);
        assert!(compare(Function::Atanpi, "p24", "0x1p+30", "0x1p+40", 20) > 0);
    }

    #[test]
    fn exact_runs_equal_the_searchs() {
        // binary16's integers and half-integers (tanpi: quarters too), a bare precision's exp2
        // at integers; the units just below, searched as usual, list no exact run.
        for f in [Function::Sinpi, Function::Cospi, Function::Tanpi] {
            assert!(compare(f, "binary16", "0x1p+7", "0x1p+11", 7) > 0, "{f}");
            assert!(compare(f, "binary16", "-0x1p+11", "-0x1p+7", 7) > 0, "{f}");
        }
        assert!(compare(Function::Exp2, "p11", "-0x1p+12", "-0x1p+10", 8) > 0);
        assert!(compare(Function::Exp2, "p11", "0x1p+10", "0x1p+12", 8) > 0);
    }

    /// Tanpi's poles lie on its lattice: neither the search nor the coordinator lists a run
    /// for them, in any format, and the search's lattice runs count them (1/2 and 3/2).
    #[test]
    fn poles_are_counted_on_the_lattice_in_any_format() {
        for name in ["p11", "binary16"] {
            assert_eq!(compare(Function::Tanpi, name, "0.25", "2", 8), 0);
            let fmt = Format::from_str(name).unwrap();
            let units = split_range_in(Function::Tanpi, fmt, "0.25", "2", Some(8)).unwrap();
            let cfg = SearchConfig::in_format(Function::Tanpi, fmt, 8);
            let r = crate::search::search_units(&cfg, &units, &Cpu, &|_| {}).unwrap();
            let poles: u64 = r.exact_lattices.iter().map(|l| l.poles).sum();
            assert_eq!(poles, 2, "{name}");
        }
    }

    #[test]
    fn a_unit_far_from_the_thresholds_takes_one_ball() {
        let fmt = Format::from_str("binary64").unwrap();
        let unit = UnitSpec {
            negative: false,
            exponent: 0,
            first: 1 << 52,
            count: 1 << 44,
        };
        assert_eq!(judge_piece(Function::Exp, fmt, unit), Piece::InRange);
        assert!(skipped_runs(Function::Exp, fmt, 44, unit)
            .unwrap()
            .is_empty());
    }
    /// sin, cos and tan far out skip nothing, proven per binade at once (`angle.rs`): whole
    /// binades of binary64 up to 2^1023 and of binary80 at 2^5000, where any two consecutive
    /// arguments are periods apart, and the search of a unit there lists no run either.
    #[test]
    fn sin_cos_and_tan_far_out_skip_nothing_at_once() {
        for (name, e) in [
            ("binary64", 2),
            ("binary64", 30),
            ("binary64", 100),
            ("binary64", 1023),
            ("binary80", 5000),
        ] {
            let fmt = Format::from_str(name).unwrap();
            let p = fmt.precision.bits();
            for f in [Function::Sin, Function::Cos, Function::Tan] {
                for negative in [false, true] {
                    let binade = UnitSpec {
                        negative,
                        exponent: e,
                        first: 1 << (p - 1),
                        count: 1 << (p - 1),
                    };
                    assert_eq!(
                        judge_piece(f, fmt, binade),
                        Piece::InRange,
                        "{f} {name} 2^{e}"
                    );
                    assert!(skipped_runs(f, fmt, 40, binade).unwrap().is_empty());
                }
            }
        }
        // The search's own list, on a small unit at 2^100.
        assert_eq!(
            compare(
                Function::Cos,
                "binary64",
                "0x1p+100",
                "0x1.0000000000100p+100",
                8
            ),
            0
        );
    }
}
