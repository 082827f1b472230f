//! Cutting argument ranges into units: consecutive significands of one binade and one sign.
//!
//! A range `[from, to)` is taken over the numbers of the format. For a named format these are
//! its normal numbers, its subnormal numbers and zero: the subnormal numbers `s 2^(emin-p+1)`,
//! `1 <= s < 2^(p-1)`, lie on the grid of the binade `2^emin`, so they are units of that binade
//! with significands below `2^(p-1)`, and zero is the positive one with significand 0. A bare
//! precision has no subnormal numbers: its arguments are the normal numbers of binary64's
//! exponent range (binary32's for precision 24) and zero, where `f` is defined there, a unit of
//! its own written as a named format writes it (significand 0 of the smallest binade). Units
//! are aligned on multiples of `2^U` significands, so the same argument always falls in the
//! same unit.

pub mod collapse;
pub mod reduce;
pub mod size;
pub mod whole;

use crate::numbers::format::{
    format_exponent_range, parse_number, Argument, Format, FormatError, Precision,
};
use crate::oracle::function::Function;
use rug::float::Round;
use rug::{Float, Integer};
use serde::{Deserialize, Serialize};

/// The significands `[first, first + count)` of the binade `[2^exponent, 2^(exponent+1))`,
/// negated when `negative`. In a named format's binade `emin`, significands below `2^(p-1)` are
/// the subnormal numbers (and 0 is zero): the same grid, `2^(emin-p+1)` apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UnitSpec {
    pub negative: bool,
    pub exponent: i32,
    pub first: u64,
    pub count: u64,
}

impl UnitSpec {
    /// The argument with significand `first + offset`.
    pub fn argument(&self, offset: u64) -> Argument {
        Argument {
            negative: self.negative,
            exponent: self.exponent,
            significand: self.first + offset,
        }
    }

    /// The unit as a half-open range of argument values `[lo, hi)` in C99 hex (for people).
    pub fn describe(&self, p: Precision) -> String {
        let a = self.argument(0).to_hex(p);
        let b = self.argument(self.count - 1).to_hex(p);
        format!("[{a}, {b}] ({} arguments)", self.count)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("the range [{from}, {to}) is empty: 'from' must be below 'to'")]
    Empty { from: String, to: String },
    #[error(
        "the range [{from}, {to}) holds no argument of precision {p} (a bare precision has no \
         subnormal numbers: name a format, binary32, for them)"
    )]
    NoArguments { from: String, to: String, p: u32 },
    #[error("{function} is not defined on all of [{from}, {to})")]
    OutsideDomain {
        function: Function,
        from: String,
        to: String,
    },
    #[error(
        "{function}({x}) {what} MPFR's exponent range (about 2^(±2^30)): the engine cannot \
         evaluate it there; end the range before it"
    )]
    BeyondMpfr {
        function: Function,
        x: String,
        what: &'static str,
    },
    #[error("unit size 2^{0} is outside 4..={max}", max = MAX_UNIT_BITS)]
    UnitBits(u32),
    #[error("the range would make {0} units; cut it into smaller campaigns or use larger units")]
    TooManyUnits(u64),
}

/// The default unit size `U` (2^U arguments): 40 for binary64 as published, smaller for small
/// precisions so that a binade still makes several units, each long enough for a polynomial to
/// pay, and larger above binary64 so that a unit still holds seconds of GPU work: binary80
/// (`p = 64`) takes 2.0 ms of one H100 per 2^40 arguments in [1, 2) at 54 bits, so
/// its units are 2^50 arguments (about 2 s there) and one of its binades is 8,192 units instead
/// of 8.4 million.
pub fn default_unit_bits(p: Precision) -> u32 {
    let b = p.bits();
    if b <= 53 {
        b.saturating_sub(4).clamp(12, 40)
    } else {
        (b - 14).min(50)
    }
}

/// The largest unit size `U`: a binade of binary80 is 2^63 significands, and the coordinator
/// stores a unit's count as a signed 64-bit integer.
pub const MAX_UNIT_BITS: u32 = 56;

/// The largest number of units one call may produce.
pub const MAX_UNITS: u64 = 50_000_000;

/// Parses `[from, to)` for precision `p`: both ends rounded upwards to the format, so that the
/// arguments `x` with `from <= x < to` are those with `from' <= x < to'`.
pub fn parse_range(p: Precision, from: &str, to: &str) -> Result<(Float, Float), PlanError> {
    let lo = parse_number(from, p.bits(), Round::Up)?;
    let hi = parse_number(to, p.bits(), Round::Up)?;
    if lo >= hi {
        return Err(PlanError::Empty {
            from: from.into(),
            to: to.into(),
        });
    }
    Ok((lo, hi))
}

/// The arguments of `[lo, hi)` in format `fmt` (both ends numbers of the format, `lo < hi`) as
/// runs of significands `(negative, exponent, first, last)` of one binade each, `last`
/// included, in increasing order of value; a bare precision's zero is not among them.
pub(crate) fn binade_pieces(fmt: Format, lo: &Float, hi: &Float) -> Vec<(bool, i32, u64, u64)> {
    let p = fmt.precision;
    let pb = p.bits();
    let (emin, emax) = format_exponent_range(fmt);
    // Collect (negative, exponent, first, last) per binade, in increasing order of value.
    let mut pieces: Vec<(bool, i32, u64, u64)> = Vec::new();
    let top = Integer::from((1u128 << pb) - 1);
    let bottom = Integer::from(1u64 << (pb - 1));
    // Significand of a value in binade e, exact (a value of precision p shifted).
    let sig = |x: &Float, e: i32| -> Float {
        let mut v = Float::with_val(pb + 8, x.abs_ref());
        v <<= pb as i32 - 1 - e;
        v
    };
    // Directed conversions only: an inclusive bound is floored or ceiled, never rounded to
    // nearest (which took -1 into a range ending just below it).
    let floor = |x: &Float| x.to_integer_round(Round::Down).expect("finite").0;
    let ceil = |x: &Float| x.to_integer_round(Round::Up).expect("finite").0;
    // The subnormal numbers (and zero) of a named format: significands below 2^(p-1) of the
    // binade emin.
    let subnormal = fmt.exponents.is_some();
    let sub_top = Integer::from(&bottom - 1u32);
    let mut push = |neg: bool, e: i32, first: Integer, last: Integer, low: &Integer| {
        let high = if low < &bottom { &sub_top } else { &top };
        let first = first.max(low.clone());
        let last = last.min(high.clone());
        if first <= last {
            pieces.push((
                neg,
                e,
                first.to_u64().expect("a significand"),
                last.to_u64().expect("a significand"),
            ));
        }
    };
    // Negative arguments: x in [lo, min(hi, 0)) means |x| in (|min(hi,0)|, |lo|].
    if lo.is_sign_negative() && !lo.is_zero() {
        let hi_neg = if hi.is_sign_negative() {
            hi.clone()
        } else {
            Float::with_val(pb, 0)
        };
        for e in (emin..=emax).rev() {
            // |x| in (|hi_neg|, |lo|] within binade e: significands in (s_lo, s_hi].
            let first = floor(&sig(&hi_neg, e)) + 1u32;
            let last = floor(&sig(lo, e));
            push(true, e, first, last, &bottom);
        }
        if subnormal {
            let first = floor(&sig(&hi_neg, emin)) + 1u32;
            let last = floor(&sig(lo, emin));
            push(true, emin, first, last, &Integer::from(1));
        }
    }
    if !hi.is_sign_negative() && !hi.is_zero() {
        let lo_pos = if lo.is_sign_positive() && !lo.is_zero() {
            lo.clone()
        } else {
            Float::with_val(pb, 0)
        };
        if subnormal {
            // Zero (significand 0) where lo <= 0, then the positive subnormal numbers.
            let first = ceil(&sig(&lo_pos, emin));
            let last = ceil(&sig(hi, emin)) - 1u32;
            push(false, emin, first, last, &Integer::new());
        }
        for e in emin..=emax {
            // x in [lo_pos, hi) within binade e: significands in [s_lo, s_hi).
            let first = ceil(&sig(&lo_pos, e));
            let last = ceil(&sig(hi, e)) - 1u32;
            push(false, e, first, last, &bottom);
        }
    }
    pieces
}

/// The units covering the arguments of `[from, to)` for a bare precision `p`.
pub fn split_range(
    f: Function,
    p: Precision,
    from: &str,
    to: &str,
    unit_bits: Option<u32>,
) -> Result<Vec<UnitSpec>, PlanError> {
    split_range_in(f, Format::bare(p), from, to, unit_bits)
}

/// The units covering the arguments of `[from, to)` in format `fmt`.
pub fn split_range_in(
    f: Function,
    fmt: Format,
    from: &str,
    to: &str,
    unit_bits: Option<u32>,
) -> Result<Vec<UnitSpec>, PlanError> {
    let p = fmt.precision;
    let u = unit_bits.unwrap_or_else(|| default_unit_bits(p));
    if !(4..=MAX_UNIT_BITS).contains(&u) {
        return Err(PlanError::UnitBits(u));
    }
    let (lo, hi) = parse_range(p, from, to)?;
    let pb = p.bits();
    let (emin, _) = format_exponent_range(fmt);
    let subnormal = fmt.exponents.is_some();
    let mut pieces = binade_pieces(fmt, &lo, &hi);
    if pieces.is_empty() {
        return Err(PlanError::NoArguments {
            from: from.into(),
            to: to.into(),
            p: pb,
        });
    }
    // A bare precision's zero, where the range holds it and f is defined there: a unit of its
    // own, written as a named format writes it (significand 0 of the smallest binade), between
    // the negative and the positive arguments.
    let zero = Float::new(pb);
    if !subnormal && lo <= 0 && hi > 0 && f.defined_at(&zero) {
        let at = pieces.iter().take_while(|piece| piece.0).count();
        pieces.insert(at, (false, emin, 0, 0));
    }
    let total: u64 = pieces
        .iter()
        .map(|&(_, _, first, last)| units_in(first, last, u))
        .sum();
    if total > MAX_UNITS {
        return Err(PlanError::TooManyUnits(total));
    }
    // The domain check: the function must be defined at both ends of each piece (the domains
    // of our functions are intervals; poles inside are skipped and listed by the search), and
    // for a bare precision MPFR must be able to evaluate it there: beyond its exponent range
    // (exp above about 7.4e8, erfc above about 3e4) every piece would be split down to single
    // arguments before failing. Our functions are monotonic on each binade piece wherever they
    // get that large or small, so the ends decide. A named format skips such arguments as
    // overflowing or underflowing (generation decides whole pieces from their ends).
    for &(neg, e, first, last) in &pieces {
        for s in [first, last] {
            let a = Argument {
                negative: neg,
                exponent: e,
                significand: s,
            };
            let x = a.to_float(p);
            // Zero where f has a pole (log, rsqrt): listed as skipped by the search.
            let pole_at_zero = x.is_zero() && f.pole_at_zero();
            if !(f.has_poles() || f.defined_at(&x) || pole_at_zero) {
                return Err(PlanError::OutsideDomain {
                    function: f,
                    from: from.into(),
                    to: to.into(),
                });
            }
            let (y, ord) = f.eval(&x, p.bits() + 64);
            let what = if fmt.exponents.is_some() {
                None
            } else if y.is_infinite() && !f.has_poles() {
                Some("overflows")
            } else if y.is_zero() && ord != std::cmp::Ordering::Equal {
                Some("underflows")
            } else {
                None
            };
            if let Some(what) = what {
                return Err(PlanError::BeyondMpfr {
                    function: f,
                    x: a.to_hex(p),
                    what,
                });
            }
        }
    }
    let mut units = Vec::with_capacity(total as usize);
    for (neg, e, first, last) in pieces {
        cut(neg, e, first, last, u, &mut units);
    }
    Ok(units)
}

/// The number of aligned units of `2^u` significands that `[first, last]` touches.
pub(crate) fn units_in(first: u64, last: u64, u: u32) -> u64 {
    (last >> u) - (first >> u) + 1
}

/// Cuts the significands `[first, last]` of one binade into units aligned on multiples of
/// `2^u`, appended to `out` in significand order.
pub(crate) fn cut(neg: bool, e: i32, first: u64, last: u64, u: u32, out: &mut Vec<UnitSpec>) {
    let mut s = first;
    loop {
        let block_end = ((s >> u) << u).saturating_add((1u64 << u) - 1);
        let end = block_end.min(last);
        out.push(UnitSpec {
            negative: neg,
            exponent: e,
            first: s,
            count: end - s + 1,
        });
        if end == last {
            break;
        }
        s = end + 1;
    }
}

/// Splits a piece in two near its middle, on a multiple of 1024 arguments where possible.
pub fn split(piece: UnitSpec) -> (UnitSpec, UnitSpec) {
    let mut half = piece.count / 2;
    if half > 1024 {
        half &= !1023;
    }
    (
        UnitSpec {
            count: half,
            ..piece
        },
        UnitSpec {
            first: piece.first + half,
            count: piece.count - half,
            ..piece
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::format::exponent_range;

    fn count(units: &[UnitSpec]) -> u64 {
        units.iter().map(|u| u.count).sum()
    }

    #[test]
    fn a_binade_is_cut_into_aligned_units() {
        let p = Precision::BINARY64;
        let units = split_range(Function::Exp, p, "0x1p+0", "0x1p+1", None).unwrap();
        assert_eq!(units.len(), 4096);
        assert!(units.iter().all(|u| u.count == 1 << 40 && u.exponent == 0));
        assert_eq!(units[0].first, 1 << 52);
    }

    #[test]
    fn ranges_across_binades_and_signs_count_every_argument_once() {
        let p = Precision::new(12).unwrap();
        // [-2, 3): negative binades down to the smallest exponent, then positive ones.
        let units = split_range(Function::Exp, p, "-2", "3", Some(6)).unwrap();
        let (emin, _) = exponent_range(p);
        let binades_below_1 = (0 - emin) as u64; // exponents emin..=-1
        let per_binade = 1u64 << 11;
        // negatives: |x| in (0, 2]: binades emin..=0 full, plus x = -2.
        // positives: [0, 3): binades emin..=0 full, plus [2, 3) = half of binade 1; and zero.
        let want = (binades_below_1 + 1) * per_binade * 2 + 1 + per_binade / 2 + 1;
        assert_eq!(count(&units), want);
        let zero = units.iter().position(|u| u.first == 0).unwrap();
        assert_eq!((units[zero].exponent, units[zero].count), (emin, 1));
        assert!(units[..zero].iter().all(|u| u.negative));
        assert!(units[zero..].iter().all(|u| !u.negative));
        // Ordered by value: the first unit is the most negative.
        assert!(units[0].negative && units[0].exponent == 1 && units[0].count == 1);
    }

    #[test]
    fn bounds_are_half_open_and_rounded_upwards() {
        let p = Precision::BINARY32;
        let units = split_range(Function::Exp, p, "0x1p+0", "0x1.000008p+0", Some(10)).unwrap();
        assert_eq!(count(&units), 4);
        let units = split_range(Function::Exp, p, "1", "1.0000005", Some(10)).unwrap();
        // 1.0000005 rounds up to 1 + 5 ulps (ulp 2^-23 ~ 1.19e-7).
        assert_eq!(count(&units), 5);
    }

    #[test]
    fn bad_ranges_are_refused_with_reasons() {
        let p = Precision::BINARY64;
        assert!(matches!(
            split_range(Function::Exp, p, "2", "1", None),
            Err(PlanError::Empty { .. })
        ));
        assert!(matches!(
            split_range(Function::Exp, p, "1", "1", None),
            Err(PlanError::Empty { .. })
        ));
        assert!(matches!(
            split_range(Function::Log, p, "-1", "2", None),
            Err(PlanError::OutsideDomain { .. })
        ));
        assert!(matches!(
            split_range(Function::Exp, p, "0", "0x1p-1074", None),
            Err(PlanError::NoArguments { .. })
        ));
        assert!(matches!(
            split_range(Function::Exp, p, "-1e300", "1e300", Some(20)),
            Err(PlanError::TooManyUnits(_))
        ));
        assert!(split_range(Function::Exp, p, "x", "1", None).is_err());
        // Beyond MPFR's exponent range: refused at once, naming the argument.
        for (f, from, to) in [
            (Function::Exp, "7e8", "8e8"),
            (Function::Erfc, "3e4", "4e4"),
            (Function::Exp, "-8e8", "-7e8"),
        ] {
            match split_range(f, p, from, to, None) {
                Err(e @ PlanError::BeyondMpfr { .. }) => assert!(e.to_string().contains(f.name())),
                other => panic!("{f} [{from}, {to}): {other:?}"),
            }
        }
        // Poles are no reason to refuse a range: tanpi over [1, 2) holds 1.5.
        assert!(split_range(Function::Tanpi, p, "1", "2", None).is_ok());
    }

    /// The inclusive end of a negative range was rounded to nearest in the
    /// binades above it, so a range just below -1 took -1 as well (and atanh refused it).
    #[test]
    fn negative_ranges_take_no_argument_outside_them() {
        let p = Precision::BINARY64;
        let (from, to) = ("-0x1.fffffffffffffp-1", "-0x1.ffffffffffffep-1");
        let units = split_range(Function::Exp, p, from, to, None).unwrap();
        assert_eq!(count(&units), 1, "{units:?}");
        assert_eq!(units[0].argument(0).to_hex(p), from);
        for f in [
            Function::Atanh,
            Function::Log1p,
            Function::Log2p1,
            Function::Log10p1,
        ] {
            assert_eq!(count(&split_range(f, p, from, to, None).unwrap()), 1, "{f}");
        }
    }

    /// Every argument of `[from, to)` exactly once, at a precision small enough to list them
    /// all: both signs, ends on and off binade edges.
    #[test]
    fn small_ranges_match_an_enumeration() {
        let p = Precision::new(8).unwrap();
        // Every nonzero value of precision 8 with exponent in -3..=3, in increasing order.
        let mut all: Vec<Float> = Vec::new();
        for e in -3..=3 {
            for s in 128u32..256 {
                let mut v = Float::with_val(8, s);
                v <<= e - 7;
                all.push(v.clone());
                all.push(-v);
            }
        }
        all.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let ends = [
            "-0x1.fep+3",
            "-0x1p+3",
            "-0x1.02p+2",
            "-0x1.fep+1",
            "-0x1p+1",
            "-0x1.fep-1",
            "-0x1p-1",
            "-0x1.02p-2",
            "0x1.02p-2",
            "0x1p-1",
            "0x1.fep-1",
            "0x1p+0",
            "0x1.02p+0",
            "0x1.fep+1",
            "0x1p+2",
            "0x1.fep+3",
        ];
        for (i, from) in ends.iter().enumerate() {
            for to in &ends[i + 1..] {
                let lo = parse_number(from, 8, Round::Up).unwrap();
                let hi = parse_number(to, 8, Round::Up).unwrap();
                let mut want: Vec<String> = all
                    .iter()
                    .filter(|v| **v >= lo && **v < hi)
                    .map(crate::numbers::format::float_to_hex)
                    .collect();
                let units = split_range(Function::Exp, p, from, to, Some(4)).unwrap();
                let mut got: Vec<String> = units
                    .iter()
                    .flat_map(|u| (0..u.count).map(move |o| u.argument(o)))
                    .filter(|a| (-3..=3).contains(&a.exponent))
                    .map(|a| a.to_hex(p))
                    .collect();
                // Units of a negative binade run towards larger |x|: compare as sorted lists
                // (duplicates would show).
                got.sort();
                want.sort();
                assert_eq!(got, want, "[{from}, {to})");
            }
        }
    }
}
