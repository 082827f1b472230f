//! A campaign's unit size when its request gives none (the smallest from the default up that
//! keeps the campaign within the server's limits of units and of cases per result), and the
//! summary of a plan that `POST /campaigns/plan` answers. With `engine.rs`, the callers of the
//! kernels' planner.

use super::engine::{self, Plan};
use super::NewCampaign;
use crate::error::{Error, Result};
use std::str::FromStr;
use tmd_kernels::numbers::format::{Format, Precision};
use tmd_kernels::plan::size::{
    choose_unit_bits, count_range_units, expected_cases_per_unit, SizeChoice, SizeLimits,
};
use tmd_kernels::plan::whole::split_whole;
use tmd_kernels::{Argument, Function};
use tmd_wire::{CampaignPlan, SkippedBlock, UnitSpec};

/// The argument at `offset` in `u`, in C99 hex.
fn hex(u: &UnitSpec, offset: u64, p: Precision) -> String {
    Argument {
        negative: u.negative,
        exponent: u.exponent,
        significand: u.first + offset,
    }
    .to_hex(p)
}

/// The ends of a block of units by value, `[lowest, highest]` in C99 hex: the units of a
/// negative binade run from high to low values, so either unit's either end may be one.
fn ends(a: &UnitSpec, b: &UnitSpec, p: Precision) -> (String, String) {
    // A key ordered as the values: sign, then magnitude (reversed for negatives).
    let key = |u: &UnitSpec, offset: u64| {
        // Exponents offset to be positive: every magnitude's key is then positive.
        let magnitude = ((i128::from(u.exponent) + (1 << 20)) << 64) + i128::from(u.first + offset);
        if u.negative {
            -magnitude - 1
        } else {
            magnitude
        }
    };
    let mut points = [
        (key(a, 0), a, 0),
        (key(a, a.count - 1), a, a.count - 1),
        (key(b, 0), b, 0),
        (key(b, b.count - 1), b, b.count - 1),
    ];
    points.sort_by_key(|t| t.0);
    let (lo, hi) = (&points[0], &points[3]);
    (hex(lo.1, lo.2, p), hex(hi.1, hi.2, p))
}

/// Blocks skipped whole listed in a plan; the rest are counted.
pub const MAX_SKIPPED_BLOCKS: usize = 100;

/// The format a request names (a named format, or a bare precision).
fn format_of(new: &NewCampaign) -> Result<Format> {
    let bad = |e: String| Error::BadRequest(e);
    match (&new.format, new.precision) {
        (Some(f), None) => Format::from_str(f).map_err(|e| bad(e.to_string())),
        (None, Some(p)) => Precision::new(p)
            .map(Format::bare)
            .map_err(|e| bad(e.to_string())),
        _ => Err(bad("give either format or precision".into())),
    }
}

/// The unit size for a request that gives none, and why; `None` when it gives one. Limits:
/// `max_units` units, and half of `max_cases` expected HR-cases per unit (the rule
/// `check_cases_fit` holds a campaign to).
pub fn choose(new: &NewCampaign, max_units: usize, max_cases: usize) -> Result<Option<SizeChoice>> {
    if new.unit_bits.is_some() {
        return Ok(None);
    }
    let bad = |e: String| Error::BadRequest(e);
    let function = Function::from_str(&new.function).map_err(|e| bad(e.to_string()))?;
    let fmt = format_of(new)?;
    let default = engine::default_unit_bits(fmt.precision.bits(), new.min_bits);
    let limits = SizeLimits {
        max_units: max_units as u64,
        max_cases_per_unit: max_cases as f64 / 2.0,
    };
    let count = |u: u32| -> std::result::Result<u64, tmd_kernels::plan::PlanError> {
        if new.whole {
            return match split_whole(function, fmt, new.min_bits, Some(u)) {
                Ok(units) => Ok(units.len() as u64),
                Err(tmd_kernels::plan::whole::WholeError::Plan(e)) => Err(e),
                // The domain's refusal (sin of binary64) is the plan's to say, with its reason.
                Err(_) => Ok(0),
            };
        }
        let mut n = 0;
        for r in &new.ranges {
            n += count_range_units(fmt, &r.from, &r.to, u)?;
        }
        Ok(n)
    };
    choose_unit_bits(default, new.min_bits, limits, count)
        .map(Some)
        .map_err(|e| bad(e.to_string()))
}

/// A cost estimate as a plan reads it.
#[derive(Debug, Clone, Default)]
pub struct Cost {
    /// The estimate's back end, as it names itself.
    pub backend: String,
    /// Seconds per argument by binade `(negative, exponent)`.
    pub seconds_per_argument: std::collections::HashMap<(bool, i32), f64>,
}

/// What `plan` makes, for people and scripts; with `cost`, its time on the estimate's back
/// end.
pub fn summary(
    plan: &Plan,
    min_bits: u32,
    choice: Option<&SizeChoice>,
    cost: Option<&Cost>,
) -> Result<CampaignPlan> {
    let fmt = engine::stored_format(plan.precision, plan.format.as_deref())?;
    let p = fmt.precision;
    let full = 1u64 << plan.unit_bits;
    let mut arguments: u128 = 0;
    let mut skipped: u128 = 0;
    let mut blocks: Vec<(UnitSpec, UnitSpec, u128)> = Vec::new();
    let mut binades = std::collections::BTreeSet::new();
    let mut seconds = 0.0;
    // Whether the unit before was a skipped block: blocks next to each other in the plan
    // (argument order), of one sign, are one block for people.
    let mut after_block = false;
    for u in &plan.units {
        arguments += u128::from(u.count);
        binades.insert((u.negative, u.exponent));
        if let Some(c) = cost {
            let per = c.seconds_per_argument.get(&(u.negative, u.exponent));
            seconds += per.copied().unwrap_or(0.0) * u.count as f64;
        }
        // A unit larger than the unit size is a block the planner found skipped whole.
        if u.count <= full {
            after_block = false;
            continue;
        }
        skipped += u128::from(u.count);
        match blocks.last_mut() {
            Some((_, last, n))
                if after_block
                    && last.negative == u.negative
                    && (last.exponent - u.exponent).abs() <= 1 =>
            {
                *last = u.clone();
                *n += u128::from(u.count);
            }
            _ => blocks.push((u.clone(), u.clone(), u128::from(u.count))),
        }
        after_block = true;
    }
    let per_unit = expected_cases_per_unit(plan.unit_bits, min_bits);
    let searched = (arguments - skipped) as f64;
    Ok(CampaignPlan {
        function: plan.function.clone(),
        format: fmt.name(),
        min_bits,
        unit_bits: plan.unit_bits,
        unit_bits_chosen: choice.is_some(),
        unit_bits_reason: match choice {
            Some(c) => c.reason.clone(),
            None => format!("units of 2^{} arguments, as asked", plan.unit_bits),
        },
        units: plan.units.len() as u64,
        arguments: arguments.to_string(),
        binades: binades.len() as u64,
        expected_cases_per_unit: per_unit,
        expected_hr_cases: searched * 2f64.powi(1 - min_bits as i32),
        skipped_arguments: skipped.to_string(),
        skipped_blocks: blocks
            .iter()
            .take(MAX_SKIPPED_BLOCKS)
            .map(|(a, b, n)| {
                let (first, last) = ends(a, b, p);
                SkippedBlock {
                    first,
                    last,
                    arguments: n.to_string(),
                }
            })
            .collect(),
        estimated_seconds: cost.map(|_| seconds),
        estimate_backend: cost.map(|c| c.backend.clone()),
        derived: super::engine::wire_runs(
            plan.derivation
                .as_ref()
                .map(|d| d.runs.clone())
                .unwrap_or_default(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tmd-worker estimate` sizes units with the kernels' copy of the campaign default: it
    /// must be the coordinator's, or an estimate would weigh other units than a campaign's.
    #[test]
    fn the_estimates_default_unit_size_is_the_coordinators() {
        for p in 8..=64 {
            for k in 1..=60 {
                assert_eq!(
                    engine::default_unit_bits(p, k),
                    tmd_kernels::plan::size::campaign_unit_bits(Precision::new(p).unwrap(), k),
                    "precision {p}, min_bits {k}"
                );
            }
        }
    }
}
