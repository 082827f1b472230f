//! The unit size chosen for a user who gives none: the smallest `2^U` arguments per unit, from
//! a default up, that keeps a plan within its limits of units per campaign and of expected
//! HR-cases per unit, with the reason in words.

use super::{binade_pieces, parse_range, units_in, PlanError, MAX_UNIT_BITS};
use crate::numbers::format::{Format, Precision};

/// The default unit size of a coordinator's campaign: `2^(p - 4)` arguments, at most `2^44`
/// (binary64: 44, binary32: 20; at least 2^12), the engine's default above binary64 (binary80:
/// 50), and at most `2^(min_bits + 9)` (about 1,000 expected HR-cases per unit). Why 2^44 for
/// a farm: each unit is one result row, so the coordinator's load is GPUs x units per second
/// per GPU, and 2^44 keeps a thousand H100s within what one PostgreSQL records.
pub fn campaign_unit_bits(p: Precision, min_bits: u32) -> u32 {
    let b = p.bits();
    let by_format = if b > 53 {
        super::default_unit_bits(p)
    } else {
        b.saturating_sub(4).clamp(12, 44)
    };
    by_format.min(min_bits + 9)
}

/// HR-cases a unit of `2^unit_bits` arguments is expected to hold at `min_bits`: an argument
/// has `min_bits` identical bits after the rounding bit with probability about `2^-min_bits`,
/// next to a floating-point number or a midpoint, so twice that.
pub fn expected_cases_per_unit(unit_bits: u32, min_bits: u32) -> f64 {
    2f64.powi(unit_bits as i32 + 1 - min_bits as i32)
}

/// What a plan must stay within.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeLimits {
    /// Most units in the plan.
    pub max_units: u64,
    /// Most HR-cases a unit may be expected to hold.
    pub max_cases_per_unit: f64,
}

/// The unit size chosen, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeChoice {
    pub unit_bits: u32,
    pub units: u64,
    pub expected_cases_per_unit: f64,
    /// Whether `unit_bits` is the default (the limits did not move it).
    pub default: bool,
    /// The choice in words, for people.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SizeError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(
        "no unit size fits: units of 2^{unit_bits} arguments would make {units} units, more \
         than the limit of {max_units}, and larger units expect more than {max_cases} HR-cases \
         each at min_bits {min_bits}: raise min_bits, or cut the range into several campaigns"
    )]
    NoFit {
        unit_bits: u32,
        units: u64,
        max_units: u64,
        max_cases: f64,
        min_bits: u32,
    },
}

/// The smallest unit size from `default` up whose plan (`count(U)` units; an error of too
/// many units counts as too many) stays within `limits`. Larger units mean fewer of them but
/// more cases each, so the first size within the unit limit is the one with the fewest cases.
pub fn choose_unit_bits(
    default: u32,
    min_bits: u32,
    limits: SizeLimits,
    mut count: impl FnMut(u32) -> Result<u64, PlanError>,
) -> Result<SizeChoice, SizeError> {
    let mut first_over: Option<u64> = None;
    let mut last = (default, 0);
    for u in default..=MAX_UNIT_BITS {
        let cases = expected_cases_per_unit(u, min_bits);
        if u > default && cases > limits.max_cases_per_unit {
            break;
        }
        let units = match count(u) {
            Ok(n) => n,
            Err(PlanError::TooManyUnits(n)) => n.max(limits.max_units + 1),
            Err(e) => return Err(e.into()),
        };
        if units <= limits.max_units {
            let reason = match first_over {
                None => format!(
                    "units of 2^{u} arguments (the default): {units} units, about {} HR-cases \
                     each",
                    round(cases)
                ),
                Some(over) => format!(
                    "units of 2^{u} arguments: the default 2^{default} would make {over} units, \
                     more than the limit of {}; 2^{u} makes {units}, about {} HR-cases each \
                     (at most {})",
                    limits.max_units,
                    round(cases),
                    round(limits.max_cases_per_unit)
                ),
            };
            return Ok(SizeChoice {
                unit_bits: u,
                units,
                expected_cases_per_unit: cases,
                default: u == default,
                reason,
            });
        }
        first_over.get_or_insert(units);
        last = (u, units);
    }
    Err(SizeError::NoFit {
        unit_bits: last.0,
        units: last.1,
        max_units: limits.max_units,
        max_cases: limits.max_cases_per_unit,
        min_bits,
    })
}

/// A count for people: whole above 10, two significant digits below.
fn round(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// The units `split_range_in` would cut `[from, to)` into at `2^unit_bits`, counted without
/// making them (a bare precision's zero, a unit of its own, included where the range holds
/// it, whether or not the function is defined there).
pub fn count_range_units(
    fmt: Format,
    from: &str,
    to: &str,
    unit_bits: u32,
) -> Result<u64, PlanError> {
    if !(4..=MAX_UNIT_BITS).contains(&unit_bits) {
        return Err(PlanError::UnitBits(unit_bits));
    }
    let (lo, hi) = parse_range(fmt.precision, from, to)?;
    let zero = u64::from(fmt.exponents.is_none() && lo <= 0 && hi > 0);
    Ok(binade_pieces(fmt, &lo, &hi)
        .iter()
        .map(|&(_, _, first, last)| units_in(first, last, unit_bits))
        .sum::<u64>()
        + zero)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::function::Function;
    use std::str::FromStr;

    const SERVER: SizeLimits = SizeLimits {
        max_units: 2_000_000,
        max_cases_per_unit: 5_000.0,
    };

    /// exp in binary80 on [1, 2) at 32 bits: the default (2^41) makes 4,194,304 units, 2^42
    /// 2,097,152, both over 2,000,000; 2^43 makes 1,048,576 of about 4,096 cases each; 2^44
    /// would expect 8,192.
    #[test]
    fn binary80_on_one_binade_gets_the_one_size_that_fits() {
        let fmt = Format::from_str("binary80").unwrap();
        let default = campaign_unit_bits(fmt.precision, 32);
        assert_eq!(default, 41);
        let c =
            choose_unit_bits(default, 32, SERVER, |u| count_range_units(fmt, "1", "2", u)).unwrap();
        assert_eq!((c.unit_bits, c.units), (43, 1 << 20));
        assert!(!c.default);
        assert!(c.reason.contains("4194304 units"), "{}", c.reason);
        assert_eq!(c.expected_cases_per_unit, 4096.0);
        // The count matches the units the plan makes.
        let units =
            super::super::split_range_in(Function::Exp, fmt, "1", "0x1.004p+0", Some(50)).unwrap();
        assert_eq!(
            count_range_units(fmt, "1", "0x1.004p+0", 50).unwrap(),
            units.len() as u64
        );
    }

    #[test]
    fn the_default_stays_when_it_fits_and_a_hopeless_plan_says_what_to_do() {
        let fmt = Format::from_str("binary64").unwrap();
        let c = choose_unit_bits(44, 44, SERVER, |u| count_range_units(fmt, "1", "2", u)).unwrap();
        assert_eq!((c.unit_bits, c.units, c.default), (44, 256, true));
        assert!(c.reason.contains("the default"), "{}", c.reason);
        let e = choose_unit_bits(20, 12, SERVER, |u| {
            count_range_units(fmt, "1", "0x1p+60", u)
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("raise min_bits"), "{e}");
    }

    #[test]
    fn counts_agree_with_the_units_made() {
        for (fmt, from, to, u) in [
            ("binary32", "-0x1p+3", "0x1.8p+1", 16),
            ("binary16", "-1", "1", 6),
            ("p24", "-0x1p-2", "0x1p-2", 16),
        ] {
            let f = Format::from_str(fmt).unwrap();
            let made = super::super::split_range_in(Function::Exp, f, from, to, Some(u)).unwrap();
            assert_eq!(
                count_range_units(f, from, to, u).unwrap(),
                made.len() as u64,
                "{fmt} [{from}, {to}) at 2^{u}"
            );
        }
    }
}
