//! Cutting argument ranges into units: consecutive significands of one binade and one sign.
//!
//! A range `[from, to)` is taken over the normal numbers of precision `p` with the exponent range
//! of binary64 (binary32's for precision 24): zero and subnormal arguments are not searched, and
//! this is said in the error when a range holds nothing else. Units are aligned on multiples of
//! `2^U` significands, so the same argument always falls in the same unit.

use crate::format::{parse_number, Argument, FormatError, Precision};
use crate::function::Function;
use rug::float::Round;
use rug::Float;
use serde::{Deserialize, Serialize};

/// The significands `[first, first + count)` of the binade `[2^exponent, 2^(exponent+1))`,
/// negated when `negative`.
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
    #[error("the range [{from}, {to}) holds no normal number of precision {p}")]
    NoArguments { from: String, to: String, p: u32 },
    #[error("{function} is not defined on all of [{from}, {to})")]
    OutsideDomain {
        function: Function,
        from: String,
        to: String,
    },
    #[error("unit size 2^{0} is outside 4..=48")]
    UnitBits(u32),
    #[error("the range would make {0} units; cut it into smaller campaigns or use larger units")]
    TooManyUnits(u64),
}

/// The smallest and largest binade exponents searched for precision `p`.
pub fn exponent_range(p: Precision) -> (i32, i32) {
    if p == Precision::BINARY32 {
        (-126, 127)
    } else {
        (-1022, 1023)
    }
}

/// The default unit size `U` (2^U arguments): 40 for binary64 as published, smaller for small
/// precisions so that a binade still makes several units, each long enough for a polynomial to
/// pay.
pub fn default_unit_bits(p: Precision) -> u32 {
    (p.bits().saturating_sub(4)).clamp(12, 40)
}

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

/// The units covering the arguments of `[from, to)`.
pub fn split_range(
    f: Function,
    p: Precision,
    from: &str,
    to: &str,
    unit_bits: Option<u32>,
) -> Result<Vec<UnitSpec>, PlanError> {
    let u = unit_bits.unwrap_or_else(|| default_unit_bits(p));
    if !(4..=48).contains(&u) {
        return Err(PlanError::UnitBits(u));
    }
    let (lo, hi) = parse_range(p, from, to)?;
    let pb = p.bits();
    let (emin, emax) = exponent_range(p);
    // Collect (negative, exponent, first, last) per binade, in increasing order of value.
    let mut pieces: Vec<(bool, i32, u64, u64)> = Vec::new();
    let top = (1u128 << pb) - 1;
    let bottom = 1u64 << (pb - 1);
    // Significand of a value in binade e, rounded toward zero or away from zero.
    let sig = |x: &Float, e: i32| -> Float {
        let mut v = Float::with_val(pb + 8, x.abs_ref());
        v <<= pb as i32 - 1 - e;
        v
    };
    // Negative arguments: x in [lo, min(hi, 0)) means |x| in (|min(hi,0)|, |lo|].
    if lo.is_sign_negative() && !lo.is_zero() {
        let hi_neg = if hi.is_sign_negative() {
            hi.clone()
        } else {
            Float::with_val(pb, 0)
        };
        for e in (emin..=emax).rev() {
            // |x| in (|hi_neg|, |lo|] within binade e.
            let s_lo = sig(&hi_neg, e); // exclusive lower bound on the significand
            let s_hi = sig(&lo, e); // inclusive upper bound
            let first = if s_lo < bottom {
                bottom as u128
            } else {
                s_lo.to_integer()
                    .expect("finite")
                    .to_u128()
                    .unwrap_or(u128::MAX)
                    + 1
            };
            let last = if s_hi.to_integer().expect("finite") > top {
                top
            } else {
                s_hi.to_integer().expect("finite").to_u128().unwrap_or(0)
            };
            if first <= last && first >= bottom as u128 {
                pieces.push((true, e, first as u64, last as u64));
            }
        }
    }
    if !hi.is_sign_negative() && !hi.is_zero() {
        let lo_pos = if lo.is_sign_positive() && !lo.is_zero() {
            lo.clone()
        } else {
            Float::with_val(pb, 0)
        };
        for e in emin..=emax {
            // x in [lo_pos, hi) within binade e.
            let s_lo = sig(&lo_pos, e); // inclusive lower bound (ceil; values are exact)
            let s_hi = sig(&hi, e); // exclusive upper bound
            let first = if s_lo < bottom {
                bottom as u128
            } else {
                s_lo.to_integer()
                    .expect("finite")
                    .to_u128()
                    .unwrap_or(u128::MAX)
            };
            let hi_int = s_hi.to_integer().expect("finite");
            let last = if hi_int > top {
                top
            } else if hi_int < bottom {
                continue;
            } else {
                hi_int.to_u128().expect("fits") - 1
            };
            if first <= last && last <= top {
                pieces.push((false, e, first as u64, last as u64));
            }
        }
    }
    if pieces.is_empty() {
        return Err(PlanError::NoArguments {
            from: from.into(),
            to: to.into(),
            p: pb,
        });
    }
    // The domain check: the function must be defined at both ends of each piece (the domains
    // of our functions are intervals).
    for &(neg, e, first, last) in &pieces {
        for s in [first, last] {
            let a = Argument {
                negative: neg,
                exponent: e,
                significand: s,
            };
            if !f.defined_at(&a.to_float(p)) {
                return Err(PlanError::OutsideDomain {
                    function: f,
                    from: from.into(),
                    to: to.into(),
                });
            }
        }
    }
    let total: u64 = pieces
        .iter()
        .map(|&(_, _, first, last)| (last >> u) - (first >> u) + 1)
        .sum();
    if total > MAX_UNITS {
        return Err(PlanError::TooManyUnits(total));
    }
    let mut units = Vec::with_capacity(total as usize);
    for (neg, e, first, last) in pieces {
        let mut s = first;
        loop {
            let block_end = ((s >> u) << u).saturating_add((1u64 << u) - 1);
            let end = block_end.min(last);
            units.push(UnitSpec {
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
    Ok(units)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // positives: [0, 3): binades emin..=0 full, plus [2, 3) = half of binade 1.
        let want = (binades_below_1 + 1) * per_binade * 2 + 1 + per_binade / 2;
        assert_eq!(count(&units), want);
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
    }
}
