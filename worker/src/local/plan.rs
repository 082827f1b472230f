//! What a local command covers: a range `--from`/`--to`, or `--whole`, every finite argument
//! of the function in the format (`tmd_kernels::plan::whole`), planned into units once for `search`
//! and `estimate`.

use anyhow::{bail, Result};
use clap::Args;
use tmd_kernels::numbers::format::float_to_hex;
use tmd_kernels::plan::whole::{split_whole, whole_domain};
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
    /// binary64 and binary80 are refused (huge arguments are out of reach), naming the range
    /// the engine can do.
    #[arg(long, conflicts_with_all = ["from", "to"])]
    pub whole: bool,
}

/// A planned local command: its units and the range they cover, canonical (C99 hex).
pub struct Planned {
    pub units: Vec<UnitSpec>,
    pub from: String,
    pub to: String,
}

impl RangeArgs {
    /// The units of the range or of the whole function, at `unit_bits` (the engine's default
    /// for the format when `None`).
    pub fn plan(&self, cfg: &SearchConfig, unit_bits: Option<u32>) -> Result<Planned> {
        let fmt = cfg.format();
        let p = cfg.precision;
        let (units, from, to) = if self.whole {
            let d = whole_domain(cfg.function, fmt)?;
            for note in &d.notes {
                eprintln!("tmd: whole {}: {note}", cfg.function);
            }
            let units = split_whole(cfg.function, fmt, cfg.min_bits, unit_bits)?;
            (units, d.from, d.to)
        } else {
            let (Some(from), Some(to)) = (&self.from, &self.to) else {
                bail!(
                    "no range: give --from and --to (a range, e.g. --from 1 --to 2), or --whole \
                     (every finite argument of the format)"
                );
            };
            let units = split_range_in(cfg.function, fmt, from, to, unit_bits)?;
            (units, from.clone(), to.clone())
        };
        let (lo, hi) = parse_range(p, &from, &to)?;
        Ok(Planned {
            units,
            from: float_to_hex(&lo),
            to: float_to_hex(&hi),
        })
    }
}
