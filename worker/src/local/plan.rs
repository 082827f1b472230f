//! What a local command covers: a range `--from`/`--to`, or `--whole`, every finite argument
//! of the function in the format (`tmd_kernels::plan::whole`), planned into units once for `search`
//! and `estimate`.

use anyhow::{bail, Result};
use clap::Args;
use tmd_kernels::numbers::format::float_to_hex;
use tmd_kernels::plan::reduce::{self as reduction, Derivation, DerivedRun};
use tmd_kernels::plan::size::{
    campaign_unit_bits, choose_unit_bits, count_range_units, SizeChoice, SizeLimits,
};
use tmd_kernels::plan::whole::{split_whole, split_whole_reduced, whole_domain, WholeError};
use tmd_kernels::plan::{parse_range, split_range_in, UnitSpec};
use tmd_kernels::search::SearchConfig;

#[derive(Args, Debug, Clone)]
pub struct RangeArgs {
    /// Start of the range (included), C99 hex (0x1.8p+0) or decimal; negative as written
    /// (`--from -0x1p+3`).
    // Not `required` in clap: its message would not name --whole, the other way to say what
    // to cover; `plan` says both.
    #[arg(long, allow_hyphen_values = true)]
    pub from: Option<String>,
    /// End of the range (excluded), C99 hex or decimal.
    #[arg(long, allow_hyphen_values = true)]
    pub to: Option<String>,
    /// The whole function: every finite argument of --format where the function is defined
    /// (log: x >= 0 with 0 its pole; asin: [-1, 1]; ...). Overflow, underflow, poles, trivial,
    /// far and exact regions are skipped and listed as for a range; blocks where every
    /// argument is skipped are one unit each. Needs a named format. sin, cos and tan of
    /// binary64 walk every argument from 2^20 on (a farm's months: estimate first); binary80's
    /// are refused (huge arguments are out of reach), naming the range the engine can do.
    #[arg(long, conflicts_with_all = ["from", "to"])]
    pub whole: bool,
    /// Search every binade of exp2, cbrt, sqrt, rsqrt and log2. By default the binades whose
    /// cases follow exactly from a base region (exp2(m + b) = 2^m exp2(b), cbrt(8x) = 2 cbrt(x),
    /// sqrt(4x) = 2 sqrt(x), rsqrt(4x) = rsqrt(x) / 2, log2(2^j m) = j + log2(m) for the
    /// binades whose results share a binade), where the range covers them and their
    /// base whole, are not searched: their cases are computed from the base's, each judged
    /// again by MPFR, and listed with the others; the output names the derived runs.
    #[arg(long)]
    pub no_reduction: bool,
}

/// The limits of a coordinator with its default settings (`--max-units-per-campaign`, half of
/// `--max-cases-per-result`): an estimate's units are those its campaign would be cut into.
pub const CAMPAIGN_LIMITS: SizeLimits = SizeLimits {
    max_units: 2_000_000,
    max_cases_per_unit: 5_000.0,
};

/// A planned local command: its units, what it derives instead of searching, and the range
/// they cover, canonical (C99 hex).
pub struct Planned {
    pub units: Vec<UnitSpec>,
    pub derivation: Derivation,
    pub from: String,
    pub to: String,
}

impl RangeArgs {
    /// The unit size a coordinator would choose for this range or whole function as a
    /// campaign with no unit size: its default, or the smallest above it within
    /// [`CAMPAIGN_LIMITS`], with the reason.
    pub fn campaign_unit_bits(&self, cfg: &SearchConfig) -> Result<SizeChoice> {
        let fmt = cfg.format();
        if self.whole {
            // Out of reach (or a bare precision): refused before any unit size is named.
            whole_domain(cfg.function, fmt)?;
        }
        let default = campaign_unit_bits(fmt.precision, cfg.min_bits);
        let count = |u: u32| match (self.whole, &self.from, &self.to) {
            (true, _, _) => match split_whole(cfg.function, fmt, cfg.min_bits, Some(u)) {
                Ok(units) => Ok(units.len() as u64),
                Err(WholeError::Plan(e)) => Err(e),
                // Refused above: whole_domain takes the same decision.
                Err(_) => Ok(0),
            },
            (false, Some(from), Some(to)) => count_range_units(fmt, from, to, u),
            // No range: `plan` says what to give.
            _ => Ok(0),
        };
        Ok(choose_unit_bits(
            default,
            cfg.min_bits,
            CAMPAIGN_LIMITS,
            count,
        )?)
    }

    /// The units of the range or of the whole function, at `unit_bits` (the engine's default
    /// for the format when `None`), reduced where `reduce` and the function has a reduction
    /// (unless `--no-reduction`).
    pub fn plan(
        &self,
        cfg: &SearchConfig,
        unit_bits: Option<u32>,
        reduce: bool,
    ) -> Result<Planned> {
        let fmt = cfg.format();
        let p = cfg.precision;
        let reduce = reduce && !self.no_reduction;
        let (units, from, to, reduced) = if self.whole {
            let d = whole_domain(cfg.function, fmt)?;
            for note in &d.notes {
                eprintln!("tmd: whole {}: {note}", cfg.function);
            }
            // Reduced as it is cut: the binades it derives are never cut into units.
            let (units, reduced) = if reduce {
                let (units, derivation) =
                    split_whole_reduced(cfg.function, fmt, cfg.min_bits, unit_bits)?;
                (units, Some(derivation))
            } else {
                (
                    split_whole(cfg.function, fmt, cfg.min_bits, unit_bits)?,
                    None,
                )
            };
            (units, d.from, d.to, reduced)
        } else {
            let (Some(from), Some(to)) = (&self.from, &self.to) else {
                bail!(
                    "no range: give --from and --to (a range, e.g. --from 1 --to 2), or --whole \
                     (every finite argument of the format)"
                );
            };
            let units = split_range_in(cfg.function, fmt, from, to, unit_bits)?;
            (units, from.clone(), to.clone(), None)
        };
        let (lo, hi) = parse_range(p, &from, &to)?;
        let (units, derivation) = match reduced {
            Some(derivation) => (units, derivation),
            None if reduce => reduction::reduce(cfg.function, fmt, cfg.min_bits, units),
            None => (units, Derivation::default()),
        };
        for run in &derivation.runs {
            eprintln!("tmd: {}", derived_line(run));
        }
        Ok(Planned {
            units,
            derivation,
            from: float_to_hex(&lo),
            to: float_to_hex(&hi),
        })
    }
}

/// A derived run for people: `derived [first, last] (count arguments) from base: rule`.
pub fn derived_line(run: &DerivedRun) -> String {
    format!(
        "derived [{}, {}] ({} arguments) from {}: {}",
        run.first, run.last, run.count, run.base, run.rule
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;
    use tmd_kernels::numbers::format::Format;
    use tmd_kernels::Function;

    /// exp in binary80 over 9,611 negative binades (and -2^13 alone in the next): 78,733,313
    /// units at the default 2^50, more than a campaign may hold; an estimate samples them at
    /// 2^56, 128 units a binade.
    #[test]
    fn a_wide_binary80_range_gets_units_an_estimate_can_plan() {
        let cfg = SearchConfig::in_format(Function::Exp, Format::from_str("binary80").unwrap(), 64);
        let range = RangeArgs {
            from: Some("-0x1p+13".into()),
            to: Some("-0x1p-9598".into()),
            whole: false,
            no_reduction: false,
        };
        let c = range.campaign_unit_bits(&cfg).unwrap();
        assert_eq!((c.unit_bits, c.units), (56, 9611 * 128 + 1));
        assert!(
            c.reason.contains("the default 2^50 would make"),
            "{}",
            c.reason
        );
    }

    /// A whole function out of reach is refused before a unit size is chosen (it used to
    /// print "0 units" first), with the range the engine can do.
    #[test]
    fn a_whole_function_out_of_reach_names_no_unit_size() {
        let cfg = SearchConfig::in_format(Function::Sin, Format::from_str("binary80").unwrap(), 64);
        let range = RangeArgs {
            from: None,
            to: None,
            whole: true,
            no_reduction: false,
        };
        let e = range.campaign_unit_bits(&cfg).expect_err("refused");
        assert!(e.to_string().contains("out of reach"), "{e}");
        assert!(e.to_string().contains("--from=-0x1p+31"), "{e}");
    }
}
