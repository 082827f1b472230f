//! How long a simulated GPU of `bench farm` takes over each unit: one rate for every unit, or
//! times drawn from a whole-function cost estimate (`tmd-worker estimate --output json`), whose
//! binades differ in cost per argument by orders of magnitude, as a lab's farm meets them.

use anyhow::{bail, Context};
use std::path::Path;
use tmd_wire::CostEstimate;

/// The seconds a simulated GPU spends on a unit.
#[derive(Debug, Clone)]
pub enum UnitCosts {
    /// Every unit alike.
    Constant(f64),
    /// Drawn per unit from a cost distribution: `cumulative[i]` is the share of the arguments
    /// in the first `i + 1` costly binades of the estimate, `seconds[i]` a unit's time there.
    Drawn {
        cumulative: Vec<f64>,
        seconds: Vec<f64>,
        /// Where the figures come from, for the report.
        source: String,
    },
}

impl UnitCosts {
    /// Times drawn from the estimate in the file `path`, scaled so that their mean over the
    /// arguments is `mean_seconds` (the farm's `--units-per-second` keeps its meaning: a GPU's
    /// speed on average, as the lab's unit size sets it). Binades the estimate prices at
    /// nothing (collapsed, skipped) are left out: a campaign plans them as units that cost
    /// nothing, not as work.
    pub fn from_estimate_file(path: &Path, mean_seconds: f64) -> anyhow::Result<UnitCosts> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the estimate {}", path.display()))?;
        let estimate: CostEstimate = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a cost estimate (tmd-worker estimate --output json)",
                path.display()
            )
        })?;
        Self::from_estimate(&estimate, mean_seconds)
    }

    /// As [`UnitCosts::from_estimate_file`], from the estimate itself.
    pub fn from_estimate(e: &CostEstimate, mean_seconds: f64) -> anyhow::Result<UnitCosts> {
        if !(mean_seconds.is_finite() && mean_seconds > 0.0) {
            bail!("the mean time of a unit must be positive");
        }
        let per_unit = 2f64.powi(e.unit_bits as i32);
        // (arguments, seconds per argument) of each binade that costs time.
        let mut rows: Vec<(f64, f64)> = Vec::new();
        for b in &e.binades {
            let arguments = match &b.arguments {
                Some(text) => text.parse::<f64>().with_context(|| {
                    format!(
                        "binade 2^{}: arguments {text:?} is not a number",
                        b.exponent
                    )
                })?,
                None => b.units as f64 * per_unit,
            };
            let seconds = b.seconds_per_unit * b.units as f64;
            if !(seconds.is_finite() && arguments.is_finite() && arguments > 0.0) {
                bail!("binade 2^{}: its cost is not a finite number", b.exponent);
            }
            if seconds > 0.0 {
                rows.push((arguments, seconds / arguments));
            }
        }
        let arguments: f64 = rows.iter().map(|r| r.0).sum();
        let mean = rows.iter().map(|r| r.0 * r.1).sum::<f64>() / arguments;
        if rows.is_empty() || !(mean.is_finite() && mean > 0.0) {
            bail!("the estimate puts no cost on any binade");
        }
        let mut cumulative = Vec::with_capacity(rows.len());
        let mut seen = 0.0;
        for r in &rows {
            seen += r.0;
            cumulative.push(seen / arguments);
        }
        let seconds = rows.iter().map(|r| r.1 / mean * mean_seconds).collect();
        Ok(UnitCosts::Drawn {
            cumulative,
            seconds,
            source: format!(
                "{} in {} at {} bits ({} binades that cost time of {})",
                e.function,
                e.format,
                e.min_bits,
                rows.len(),
                e.binades.len()
            ),
        })
    }

    /// The seconds unit `unit_id` takes: the same for a unit at every call (a retried post
    /// reports what the first did).
    pub fn seconds(&self, unit_id: i64) -> f64 {
        match self {
            UnitCosts::Constant(s) => *s,
            UnitCosts::Drawn {
                cumulative,
                seconds,
                ..
            } => {
                let q = (splitmix64(unit_id as u64) >> 11) as f64 / (1u64 << 53) as f64;
                let i = cumulative.partition_point(|&c| c <= q);
                seconds[i.min(seconds.len() - 1)]
            }
        }
    }

    /// One line on the distribution: its source and a unit's seconds at quantiles over the
    /// arguments.
    pub fn describe(&self) -> String {
        match self {
            UnitCosts::Constant(s) => format!("every unit {:.4} s", s),
            UnitCosts::Drawn {
                cumulative,
                seconds,
                source,
            } => {
                // (seconds, share of the arguments), cheapest first.
                let mut by_cost: Vec<(f64, f64)> = seconds
                    .iter()
                    .zip(cumulative)
                    .scan(0.0, |before, (&s, &c)| {
                        let share = c - *before;
                        *before = c;
                        Some((s, share))
                    })
                    .collect();
                by_cost.sort_by(|a, b| a.0.total_cmp(&b.0));
                let at = |q: f64| {
                    let mut seen = 0.0;
                    for &(s, share) in &by_cost {
                        seen += share;
                        if seen >= q {
                            return s;
                        }
                    }
                    by_cost.last().map_or(0.0, |b| b.0)
                };
                format!(
                    "drawn from {source}: a unit's seconds p10 {:.4}, p50 {:.4}, p90 {:.4}, \
                     p99 {:.4}, max {:.4}",
                    at(0.1),
                    at(0.5),
                    at(0.9),
                    at(0.99),
                    at(1.0)
                )
            }
        }
    }
}

/// A well-mixed 64-bit hash (SplitMix64's finaliser): unit ids in order draw independent
/// quantiles.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmd_wire::BinadeCost;

    fn binade(exponent: i32, units: u64, seconds_per_unit: f64) -> BinadeCost {
        BinadeCost {
            negative: false,
            exponent,
            units,
            sampled: 3,
            seconds_per_unit,
            seconds_per_unit_stderr: 0.0,
            expected_hr_cases: 0.0,
            expected_hr_cases_stderr: 0.0,
            arguments: None,
        }
    }

    fn estimate(binades: Vec<BinadeCost>) -> CostEstimate {
        CostEstimate {
            version: tmd_wire::COST_ESTIMATE_VERSION,
            function: "exp".into(),
            format: "binary64".into(),
            min_bits: 44,
            unit_bits: 44,
            backend: "cuda".into(),
            seed: 1,
            binades,
            total_seconds: 0.0,
            total_seconds_stderr: 0.0,
            total_hr_cases: 0.0,
            total_hr_cases_stderr: 0.0,
        }
    }

    /// Three binades: a cheap one of 3 parts in 4 of the arguments, a costly one 100 times
    /// dearer, and one that costs nothing (left out). Drawn over many units, the shares and
    /// the mean come out as the estimate says.
    #[test]
    fn units_are_drawn_by_the_estimate_s_shares_of_arguments_and_scaled_to_the_mean() {
        let e = estimate(vec![
            binade(0, 300, 0.01),
            binade(1, 100, 1.0),
            binade(2, 500, 0.0),
        ]);
        let costs = UnitCosts::from_estimate(&e, 0.1).unwrap();
        // Mean per argument: (300 x 0.01 + 100 x 1) / 400 = 0.2575 per unit; scaled to 0.1.
        let (cheap, dear) = (0.01 / 0.2575 * 0.1, 1.0 / 0.2575 * 0.1);
        let n = 200_000;
        let drawn: Vec<f64> = (0..n).map(|u| costs.seconds(u)).collect();
        assert!(drawn
            .iter()
            .all(|&s| (s - cheap).abs() < 1e-12 || (s - dear).abs() < 1e-12));
        let share_dear = drawn.iter().filter(|&&s| s > cheap * 2.0).count() as f64 / n as f64;
        assert!((share_dear - 0.25).abs() < 0.01, "{share_dear}");
        let mean = drawn.iter().sum::<f64>() / n as f64;
        assert!((mean - 0.1).abs() < 0.003, "{mean}");
        // The same unit, the same time.
        assert_eq!(costs.seconds(12345), costs.seconds(12345));
        let line = costs.describe();
        assert!(line.contains("2 binades that cost time of 3"), "{line}");
        // Three quarters of the arguments are cheap: p10 and p50 cheap, p90 and max dear.
        assert!(
            line.contains(&format!("p50 {cheap:.4}, p90 {dear:.4}")),
            "{line}"
        );
        // In argument order the dear binade may come first: the quantiles are by cost.
        let first_dear = estimate(vec![binade(1, 100, 1.0), binade(0, 300, 0.01)]);
        let line = UnitCosts::from_estimate(&first_dear, 0.1)
            .unwrap()
            .describe();
        assert!(
            line.contains(&format!("p10 {cheap:.4}, p50 {cheap:.4}")),
            "{line}"
        );
    }

    #[test]
    fn an_estimate_without_cost_or_a_bad_mean_is_refused() {
        let free = estimate(vec![binade(0, 10, 0.0)]);
        assert!(UnitCosts::from_estimate(&free, 0.1).is_err());
        let one = estimate(vec![binade(0, 10, 1.0)]);
        assert!(UnitCosts::from_estimate(&one, 0.0).is_err());
        let mut odd = estimate(vec![binade(0, 10, 1.0)]);
        odd.binades[0].arguments = Some("many".into());
        assert!(UnitCosts::from_estimate(&odd, 0.1).is_err());
        let path = std::env::temp_dir().join(format!("tmd-costs-{}.json", std::process::id()));
        std::fs::write(&path, "{\"not\": 1}").unwrap();
        let err = UnitCosts::from_estimate_file(&path, 0.1).unwrap_err();
        assert!(format!("{err:#}").contains("not a cost estimate"));
        std::fs::remove_file(&path).unwrap();
    }
}
