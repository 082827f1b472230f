//! Whole functions: every finite argument of a named format where the function is defined,
//! planned as units, with the blocks where every argument is skipped (overflow, underflow,
//! trivial runs near 0 and far from it, exact regions) collapsed into one unit each.
//!
//! The domain is the format's finite numbers `[-max, max]` cut to where `f` is defined
//! (`Function::defined_at`), with zero kept where it is a pole (log, rsqrt: listed as skipped
//! by the search). What overflows or underflows is not cut away here: the search lists it as
//! skipped runs, as for any range, and the plan collapses it. A binade of binary64 holds 2^52
//! arguments: cut into units of 2^44 every binade of both signs would make about a million
//! units, most of them nothing but skipped runs; collapsed, whole exp is the units of its 128
//! binades that search something plus about 2,000 units that skip everything.

use crate::numbers::format::{float_to_hex, Format};
use crate::oracle::function::Function;
use crate::plan::reduce::{self, Derivation};
use crate::plan::{
    binade_pieces, cut, default_unit_bits, parse_range, PlanError, UnitSpec, MAX_UNITS,
    MAX_UNIT_BITS,
};
use crate::regions::exact::exact_run;
use crate::regions::skip::{skips, Skips};
use rug::Float;
use std::collections::BTreeSet;

/// log2 of the largest block collapsed into one unit: a binade of binary80 is 2^63
/// significands, and the coordinator stores a unit's count as a signed 64-bit integer.
pub const MAX_COLLAPSED_BITS: u32 = 62;

/// sin, cos and tan beyond `2^reach`, where consecutive arguments are `2^-REACH_SPACING_BITS`
/// or more apart: a polynomial in the argument's offset covers few arguments there, so the
/// progression route (`search::progression`) walks every argument along progressions of the
/// angle. In binary64 (from `2^20`) that is 62 to 82 H100-hours a binade at 43 bits (units of
/// `2^40`, BENCHMARKS.md), about 150,000 for its ~2,000 binades: a farm's months, planned.
/// A whole function is refused where the arguments beyond number more than
/// `2^REACH_FARM_BITS` (binary80: `2^78`, some `2^15` times binary64's).
pub const REACH_SPACING_BITS: u32 = 32;
/// See [`REACH_SPACING_BITS`].
pub const REACH_FARM_BITS: u32 = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WholeError {
    #[error(
        "a whole function needs a named format (binary16, bfloat16, binary32, binary64, \
         binary80): a bare precision ({0}) has no largest argument; give a range instead"
    )]
    Bare(String),
    #[error("{function} over every {format} argument is out of reach: {why}; it can do {ranges}")]
    OutOfReach {
        function: Function,
        format: String,
        why: String,
        /// The ranges within reach, as command-line flags.
        ranges: String,
    },
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("the skipped runs of a whole block: {0}")]
    Skip(String),
}

/// The arguments a whole function covers: `[from, to)` in C99 hex, and what of the format's
/// finite numbers is outside it or skipped, for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    pub from: String,
    pub to: String,
    pub notes: Vec<String>,
}

/// `2^a - 2^b` (exact at `prec` bits) in C99 hex, negated when `negative`.
fn hex(prec: u32, negative: bool, a: i32, b: Option<i32>) -> String {
    let mut x = Float::with_val(prec, 1) << a;
    if let Some(b) = b {
        x -= Float::with_val(prec, 1) << b;
    }
    if negative {
        x = -x;
    }
    float_to_hex(&x)
}

/// The domain of `f` over the finite numbers of the named format `fmt`; refuses a bare
/// precision and the functions out of reach ([`REACH_SPACING_BITS`]).
pub fn whole_domain(f: Function, fmt: Format) -> Result<Domain, WholeError> {
    use Function::*;
    let Some(x) = fmt.exponents else {
        return Err(WholeError::Bare(fmt.name()));
    };
    let pb = fmt.precision.bits() as i32;
    let prec = pb as u32 + 2;
    // [-max, 2^(emax+1)): max = 2^(emax+1) - 2^(emax+1-p).
    let neg_max = hex(prec, true, x.emax + 1, Some(x.emax + 1 - pb));
    let top = hex(prec, false, x.emax + 1, None);
    // The numbers next to -1 (above it) and to 1 (above it).
    let below_one = hex(prec, true, 0, Some(-pb));
    let above_one =
        float_to_hex(&(Float::with_val(prec, 1) + (Float::with_val(prec, 1) << (1 - pb))));
    let name = f.name();
    let (from, to, notes): (String, String, Vec<String>) = match f {
        Log | Log2 | Log10 | Rsqrt => (
            "0x0p+0".into(),
            top,
            vec![
                format!("zero: {name}(0) is infinite, listed as a pole"),
                format!("negative arguments: outside the domain of {name}"),
            ],
        ),
        Sqrt => (
            "0x0p+0".into(),
            top,
            vec!["negative arguments: outside the domain of sqrt".into()],
        ),
        Log1p | Log2p1 | Log10p1 => (
            below_one,
            top,
            vec![format!(
                "x <= -1: outside the domain of {name} (-1 is its pole, not planned)"
            )],
        ),
        Asin | Acos | Asinpi | Acospi => (
            "-0x1p+0".into(),
            above_one,
            vec![format!("|x| > 1: outside the domain of {name}")],
        ),
        Acosh => (
            "0x1p+0".into(),
            top,
            vec!["x < 1: outside the domain of acosh".into()],
        ),
        Atanh => (
            below_one,
            "0x1p+0".into(),
            vec!["|x| >= 1: outside the domain of atanh (±1 are its poles, not planned)".into()],
        ),
        Sin | Cos | Tan => {
            let reach = pb - 1 - REACH_SPACING_BITS as i32;
            // Arguments with |x| >= 2^reach, both signs.
            let beyond_bits = (x.emax - reach + 1).max(1) as f64;
            let beyond = 2.0 * beyond_bits * 2f64.powi(pb - 1);
            let bound = hex(prec, false, reach, None);
            if beyond > 2f64.powi(REACH_FARM_BITS as i32) {
                return Err(WholeError::OutOfReach {
                    function: f,
                    format: fmt.name(),
                    why: format!(
                        "from |x| = 2^{reach} on, consecutive arguments are 2^-{REACH_SPACING_BITS} \
                         or more apart, so the search walks every one of them along progressions \
                         of the angle ({beyond:.2e} arguments there; binary64's 9.0e18 cost about \
                         150,000 H100-hours)"
                    ),
                    ranges: format!("--from=-{bound} --to {bound}"),
                });
            }
            // Beyond a brute force's reach (binary64): say what it costs.
            let notes = (beyond > 2f64.powi(32)).then(|| {
                format!(
                    "|x| >= {bound}: every argument walked along progressions of the angle \
                     ({beyond:.2e} arguments; in binary64 62 to 82 H100-hours a binade at 43 \
                     bits: estimate before committing a farm)"
                )
            });
            (neg_max, top, notes.into_iter().collect())
        }
        _ => (neg_max, top, Vec::new()),
    };
    let mut notes = notes;
    notes.push(
        "overflow, underflow, poles, trivial, far and exact regions: skipped and listed".into(),
    );
    Ok(Domain { from, to, notes })
}

/// What the plan knows about a block without searching it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// Every argument is skipped, in one run: one unit.
    AllSkipped,
    /// No argument is skipped: cut into units.
    NoneSkipped,
    /// Some are: halve it.
    Mixed,
}

/// The units of every argument of `f` in format `fmt` ([`whole_domain`]) at `min_bits`: blocks
/// of `2^k` aligned significands (`k` from [`MAX_COLLAPSED_BITS`] down to the unit size)
/// whose skipped runs (`skip::skipped_runs`, what the coordinator recomputes for each unit)
/// are one run of all their arguments become one unit; the rest are cut into units of
/// `2^unit_bits` as `plan::split_range_in` cuts a range.
pub fn split_whole(
    f: Function,
    fmt: Format,
    min_bits: u32,
    unit_bits: Option<u32>,
) -> Result<Vec<UnitSpec>, WholeError> {
    split_whole_keeping(f, fmt, min_bits, unit_bits, &BTreeSet::new())
}

/// The whole plan of `f` with its reduction ([`reduce::reduce`]): the units to search and what
/// they derive. The binades the reduction derives whole are never cut into units, so that the
/// whole functions of binary80 stay within the plan's unit limit; one that the reduction,
/// judging the plan itself, does not derive after all is cut then.
pub fn split_whole_reduced(
    f: Function,
    fmt: Format,
    min_bits: u32,
    unit_bits: Option<u32>,
) -> Result<(Vec<UnitSpec>, Derivation), WholeError> {
    let whole = reduce::whole_derivable(f, fmt, min_bits);
    let units = split_whole_keeping(f, fmt, min_bits, unit_bits, &whole)?;
    let (kept, derivation) = reduce::reduce(f, fmt, min_bits, units);
    let u = unit_bits.unwrap_or_else(|| default_unit_bits(fmt.precision));
    let mut out = Vec::with_capacity(kept.len());
    for unit in kept {
        if !whole.contains(&(unit.negative, unit.exponent)) {
            out.push(unit);
            continue;
        }
        let last = unit.first + (unit.count - 1);
        let n = crate::plan::units_in(unit.first, last, u);
        if out.len() as u64 + n > MAX_UNITS {
            return Err(PlanError::TooManyUnits(out.len() as u64 + n).into());
        }
        cut(unit.negative, unit.exponent, unit.first, last, u, &mut out);
    }
    Ok((out, derivation))
}

/// [`split_whole`], with the normal binades `whole` names (sign, exponent) kept as one unit
/// each wherever the domain holds all of them.
fn split_whole_keeping(
    f: Function,
    fmt: Format,
    min_bits: u32,
    unit_bits: Option<u32>,
    whole: &BTreeSet<(bool, i32)>,
) -> Result<Vec<UnitSpec>, WholeError> {
    let u = unit_bits.unwrap_or_else(|| default_unit_bits(fmt.precision));
    if !(4..=MAX_UNIT_BITS).contains(&u) {
        return Err(PlanError::UnitBits(u).into());
    }
    let d = whole_domain(f, fmt)?;
    let (lo, hi) = parse_range(fmt.precision, &d.from, &d.to)?;
    let plan = Planner {
        f,
        fmt,
        min_bits,
        u,
    };
    let mut units = Vec::new();
    let k = MAX_COLLAPSED_BITS;
    let p = fmt.precision.bits();
    let (bottom, top) = (1u64 << (p - 1), ((1u128 << p) - 1) as u64);
    for (neg, e, first, last) in binade_pieces(fmt, &lo, &hi) {
        if first == bottom && last == top && whole.contains(&(neg, e)) {
            units.push(UnitSpec {
                negative: neg,
                exponent: e,
                first,
                count: last - first + 1,
            });
            continue;
        }
        let mut s = first;
        loop {
            let end = (((s >> k) << k) + ((1u64 << k) - 1)).min(last);
            plan.place(neg, e, s, end, k, &mut units)?;
            if units.len() as u64 > MAX_UNITS {
                return Err(PlanError::TooManyUnits(units.len() as u64).into());
            }
            if end == last {
                break;
            }
            s = end + 1;
        }
    }
    Ok(units)
}

struct Planner {
    f: Function,
    fmt: Format,
    min_bits: u32,
    u: u32,
}

impl Planner {
    /// Plans `[first, last]`, inside one aligned block of `2^k` significands.
    fn place(
        &self,
        neg: bool,
        e: i32,
        first: u64,
        last: u64,
        k: u32,
        out: &mut Vec<UnitSpec>,
    ) -> Result<(), WholeError> {
        let unit = UnitSpec {
            negative: neg,
            exponent: e,
            first,
            count: last - first + 1,
        };
        if k <= self.u {
            out.push(unit);
            return Ok(());
        }
        match self.block(unit)? {
            Block::AllSkipped => out.push(unit),
            Block::NoneSkipped => {
                // Refuse before allocating: a whole binade of binary80 in small units is
                // billions of them.
                let n = crate::plan::units_in(first, last, self.u);
                if out.len() as u64 + n > MAX_UNITS {
                    return Err(PlanError::TooManyUnits(out.len() as u64 + n).into());
                }
                cut(neg, e, first, last, self.u, out)
            }
            Block::Mixed => {
                let mid = ((first >> k) << k) + (1u64 << (k - 1));
                if first < mid {
                    self.place(neg, e, first, last.min(mid - 1), k - 1, out)?;
                }
                if last >= mid {
                    self.place(neg, e, first.max(mid), last, k - 1, out)?;
                }
            }
        }
        Ok(())
    }

    fn block(&self, unit: UnitSpec) -> Result<Block, WholeError> {
        if exact_run(self.f, self.fmt, unit).is_some() {
            return Ok(Block::AllSkipped);
        }
        // Poles are single arguments: a block holding one is never skipped whole, and finding
        // them by bisection over a whole binade of tan would take minutes. Cut it as a range.
        if self.f.has_poles() {
            return Ok(Block::NoneSkipped);
        }
        let skips = skips(self.f, self.fmt, self.min_bits, unit)
            .map_err(|e| WholeError::Skip(e.to_string()))?;
        Ok(match skips {
            Skips::Nothing => Block::NoneSkipped,
            Skips::Everything => Block::AllSkipped,
            Skips::Part => Block::Mixed,
        })
    }
}

#[cfg(test)]
#[path = "whole_tests.rs"]
mod tests;
