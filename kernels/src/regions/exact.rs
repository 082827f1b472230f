//! Exact regions: whole binades where every argument of the format is an exact case (or, for
//! tanpi, a pole), so a unit there is listed as one run with its rule instead of case by case
//! (`docs/error-analysis.md` §11). In the binade `2^e` of precision `p` every argument is a
//! multiple of `2^s`, `s = e - p + 1`; where `s >= -1` (`|x| >= 2^(p-2)`) sinpi and cospi are 0
//! or ±1, where `s >= -2` tanpi is 0, ±1 or a pole, and where `s >= 0` exp2 is `2^x`, exact
//! wherever `2^x` is a number of the format.
//!
//! The rule depends on (function, format, unit) alone and takes no MPFR call, so the search
//! (`search::search_unit`) and the coordinator's recomputation of a worker's runs (`skip.rs`)
//! give the same run.

use crate::numbers::format::{Argument, Format};
use crate::oracle::function::Function;
use crate::oracle::verify::SkipReason;
use crate::plan::UnitSpec;
use crate::regions::runs::{ExactRun, Skipped};
use rug::Float;

/// The exact regions: a function and the spacing of the arguments of a binade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Region {
    /// sinpi at integers: signed zeros.
    SinpiInteger,
    /// sinpi at multiples of 1/2: 0 or ±1.
    SinpiHalf,
    /// cospi at even integers: 1.
    CospiEven,
    /// cospi at integers: ±1.
    CospiInteger,
    /// cospi at multiples of 1/2: +0 or ±1.
    CospiHalf,
    /// tanpi at integers: signed zeros.
    TanpiInteger,
    /// tanpi at multiples of 1/2: signed zeros and poles.
    TanpiHalf,
    /// tanpi at multiples of 1/4: signed zeros, ±1 and poles.
    TanpiQuarter,
    /// exp2 at integers where `2^x` is a number of the format.
    Exp2Integer,
}

impl Region {
    /// The region of `unit` in format `fmt`, where every argument of it is exact.
    fn of(f: Function, fmt: Format, unit: UnitSpec) -> Option<Region> {
        if unit.count == 0 || unit.first >> (fmt.precision.bits() - 1) == 0 {
            // Subnormal numbers and zero (the binade emin): far from every region.
            return None;
        }
        let s = unit.exponent - fmt.precision.bits() as i32 + 1;
        use Function::*;
        match f {
            Sinpi if s >= 0 => Some(Region::SinpiInteger),
            Sinpi if s == -1 => Some(Region::SinpiHalf),
            Cospi if s >= 1 => Some(Region::CospiEven),
            Cospi if s == 0 => Some(Region::CospiInteger),
            Cospi if s == -1 => Some(Region::CospiHalf),
            Tanpi if s >= 0 => Some(Region::TanpiInteger),
            Tanpi if s == -1 => Some(Region::TanpiHalf),
            Tanpi if s == -2 => Some(Region::TanpiQuarter),
            Exp2 if s >= 0 && exp2_exact_on(fmt, unit) => Some(Region::Exp2Integer),
            _ => None,
        }
    }

    fn values(self) -> &'static str {
        match self {
            Region::SinpiInteger => "x is an integer: sinpi(x) = 0 (+0 for x > 0, -0 for x < 0)",
            Region::SinpiHalf => {
                "x = k/2 for an integer k: sinpi(x) = 0 at even k (+0 for x > 0, -0 for x < 0), \
                 1 at k = 1 mod 4, -1 at k = 3 mod 4"
            }
            Region::CospiEven => "x is an even integer: cospi(x) = 1",
            Region::CospiInteger => "x is an integer: cospi(x) = (-1)^x",
            Region::CospiHalf => {
                "x = k/2 for an integer k: cospi(x) = +0 at odd k, (-1)^(k/2) at even k"
            }
            Region::TanpiInteger => {
                "x is an integer: tanpi(x) = 0 (+0 for even x > 0 and odd x < 0, -0 for odd \
                 x > 0 and even x < 0)"
            }
            Region::TanpiHalf => {
                "x = k/2 for an integer k: tanpi(x) = 0 at even k (+0 for even x > 0 and odd \
                 x < 0, -0 for odd x > 0 and even x < 0), a pole at odd k"
            }
            Region::TanpiQuarter => {
                "x = k/4 for an integer k: tanpi(x) = 0 at k = 0 mod 4 (+0 for even x > 0 and \
                 odd x < 0, -0 for odd x > 0 and even x < 0), 1 at k = 1 mod 4, a pole at \
                 k = 2 mod 4, -1 at k = 3 mod 4"
            }
            Region::Exp2Integer => "x is an integer: exp2(x) = 2^x, a number of the format",
        }
    }
}

/// Whether `2^x` is a number of the format for every argument `x` of `unit` (integers, `s >= 0`):
/// `emin - p + 1 <= x <= emax` for a named format (no overflow, no underflow, no rounding on
/// the subnormal grid); for a bare precision within MPFR's exponent range (`2^x` has MPFR
/// exponent `x + 1`). `2^x` grows with `x`, so the unit's two ends decide.
fn exp2_exact_on(fmt: Format, unit: UnitSpec) -> bool {
    let value = |o: u64| -> Option<i64> {
        let a = unit.argument(o);
        let s = a.exponent - fmt.precision.bits() as i32 + 1;
        // |x| = significand 2^s; beyond 2^62 no format holds 2^x anyway.
        let m = i64::try_from(a.significand).ok()?;
        let x = m.checked_mul(1i64.checked_shl(s as u32)?)?;
        (x >> s == m).then_some(if a.negative { -x } else { x })
    };
    let (Some(a), Some(b)) = (value(0), value(unit.count - 1)) else {
        return false;
    };
    let (lo, hi) = (a.min(b), a.max(b));
    let pb = fmt.precision.bits() as i64;
    match fmt.exponents {
        // The smallest subnormal number is 2^(emin - p + 1).
        Some(r) => lo > i64::from(r.emin) - pb && hi <= i64::from(r.emax),
        // MPFR writes 2^x with exponent x + 1, which must lie in [exp_min, exp_max].
        None => lo + 1 >= i64::from(rug::float::exp_min()) && hi < i64::from(rug::float::exp_max()),
    }
}

/// Whether some unit of `f` can be an exact run ([`exact_run`]) in some format.
pub fn has_exact_regions(f: Function) -> bool {
    use Function::*;
    matches!(f, Sinpi | Cospi | Tanpi | Exp2)
}

/// Whether every argument of `unit` is exact (tanpi: exact or a pole): [`exact_run`] without
/// writing the run.
pub fn in_exact_region(f: Function, fmt: Format, unit: UnitSpec) -> bool {
    Region::of(f, fmt, unit).is_some()
}

/// The exact run of `unit` in format `fmt` when every argument of it is exact (tanpi: exact or
/// a pole): the whole unit, one run, with reason [`SkipReason::Exact`] and its rule.
pub fn exact_run(f: Function, fmt: Format, unit: UnitSpec) -> Option<Skipped> {
    let region = Region::of(f, fmt, unit)?;
    let p = fmt.precision;
    let (a, b) = (unit.argument(0), unit.argument(unit.count - 1));
    // A negative unit's significands grow towards -infinity.
    let (lo, hi) = if unit.negative { (b, a) } else { (a, b) };
    Some(Skipped {
        first: lo.to_hex(p),
        last: hi.to_hex(p),
        count: unit.count,
        reason: SkipReason::Exact,
        trivial: None,
        exact: Some(ExactRun {
            values: region.values().to_string(),
        }),
    })
}

/// What the rule of an exact region says `f(a)` is, where `a` lies in one: `Some(Some(v))` the
/// exact value, `Some(None)` a pole; `None` outside every region. The rule text says the same
/// in words; the tests compare this with MPFR argument by argument.
pub fn rule_value(f: Function, fmt: Format, a: &Argument) -> Option<Option<Float>> {
    let unit = UnitSpec {
        negative: a.negative,
        exponent: a.exponent,
        first: a.significand,
        count: 1,
    };
    let region = Region::of(f, fmt, unit)?;
    let s = a.exponent - fmt.precision.bits() as i32 + 1;
    // k = x 2^-s, when x = k 2^s fits (s < 0); its residue mod 4 with x's sign.
    let k_mod4 = || -> u32 {
        let m = (a.significand % 4) as u32;
        if a.negative {
            (4 - m) % 4
        } else {
            m
        }
    };
    let float = |v: i32| Float::with_val(8, v);
    // A signed zero: +0 or -0.
    let zero = |negative: bool| {
        let z = Float::new(8);
        if negative {
            -z
        } else {
            z
        }
    };
    // x an integer: whether it is odd.
    let odd_integer = |shift: i32| shift == 0 && a.significand % 2 == 1;
    // tanpi at an integer x = k 2^s (s >= 0, or k shifted down to it).
    let tanpi_zero = |odd: bool| zero(a.negative != odd);
    let v = match region {
        Region::SinpiInteger => Some(zero(a.negative)),
        Region::SinpiHalf => Some(match k_mod4() {
            0 | 2 => zero(a.negative),
            1 => float(1),
            _ => float(-1),
        }),
        Region::CospiEven => Some(float(1)),
        Region::CospiInteger => Some(float(if a.significand % 2 == 1 { -1 } else { 1 })),
        Region::CospiHalf => Some(match a.significand % 4 {
            1 | 3 => zero(false),
            // x = k/2, k = significand (the sign does not matter: cospi is even).
            0 => float(1),
            _ => float(-1),
        }),
        Region::TanpiInteger => Some(tanpi_zero(odd_integer(s))),
        Region::TanpiHalf => match a.significand % 2 {
            0 => Some(tanpi_zero(a.significand % 4 == 2)),
            _ => None,
        },
        Region::TanpiQuarter => match k_mod4() {
            0 => Some(tanpi_zero(a.significand % 8 == 4)),
            1 => Some(float(1)),
            2 => None,
            _ => Some(float(-1)),
        },
        Region::Exp2Integer => {
            let x = a.to_float(fmt.precision).to_integer().expect("an integer");
            let e = x.to_i32().expect("within MPFR's exponent range");
            Some(Float::with_val(8, 1) << e)
        }
    };
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn regions_start_where_the_spacing_allows() {
        let b64 = Format::from_str("binary64").unwrap();
        let unit = |exponent: i32| UnitSpec {
            negative: false,
            exponent,
            first: 1 << 52,
            count: 1 << 40,
        };
        assert!(exact_run(Function::Sinpi, b64, unit(51)).is_some());
        assert!(exact_run(Function::Sinpi, b64, unit(50)).is_none());
        assert!(exact_run(Function::Cospi, b64, unit(1023)).is_some());
        assert!(exact_run(Function::Tanpi, b64, unit(50)).is_some());
        assert!(exact_run(Function::Tanpi, b64, unit(49)).is_none());
        // exp2 overflows binary64 there; a bare precision holds 2^x up to MPFR's range.
        assert!(exact_run(Function::Exp2, b64, unit(52)).is_none());
        assert!(exact_run(Function::Exp, b64, unit(60)).is_none());
        let p24 = Format::from_str("p24").unwrap();
        let u24 = |exponent: i32| UnitSpec {
            negative: true,
            exponent,
            first: 1 << 23,
            count: 1 << 12,
        };
        assert!(exact_run(Function::Exp2, p24, u24(23)).is_some());
        assert!(exact_run(Function::Exp2, p24, u24(22)).is_none());
        assert!(
            exact_run(Function::Exp2, p24, u24(40)).is_none(),
            "beyond MPFR"
        );
        let r = exact_run(Function::Sinpi, b64, unit(52)).unwrap();
        assert_eq!((r.first.as_str(), r.count), ("0x1p+52", 1 << 40));
        assert!(r.rule().contains("sinpi(x) = 0"), "{}", r.rule());
    }
}
