//! The cost of a unit as its plan predicts it, before anything is measured: what a coordinator
//! weighs a campaign's binades by until a measured estimate is posted, so that a lease holds
//! about the time it is meant to hold from the first claim on.
//!
//! The plan is the search's own (the same trivial regions, skipped runs, pieces, generation and
//! steep splits as [`search_unit`](super::search_unit)); only the phases are not run. A piece's
//! cost is counted in *domain tests*: phase 1 walks a domain's polynomial (its degree times its
//! limbs in word additions) and runs one existence test; a generated piece costs its domains
//! plus its generation; a piece judged argument by argument costs what MPFR takes per argument.
//! The constants are ratios of the CPU back end's costs (one domain test about 0.1 us, one MPFR
//! evaluation about 2 us, one generation about 1 ms) and only rank binades: the GPU's absolute
//! speed comes from the worker's measured rate.

use super::backend::{Stats, Timings};
use super::config::SearchConfig;
use super::unit::{plan_pieces, PiecePlan};
use crate::plan::UnitSpec;
use crate::regions::exact::exact_run;

/// Domain tests one MPFR evaluation of an argument costs.
pub const MPFR_PER_ARGUMENT: f64 = 20.0;
/// Domain tests the dense route spends per argument (a walk of tabulated differences).
pub const DENSE_PER_ARGUMENT: f64 = 0.1;
/// Domain tests one piece's generation costs (MPFR Taylor coefficients, exact scaling).
pub const PER_GENERATION: f64 = 10_000.0;
/// Word additions per domain that cost as much as the existence test itself.
const WALK_PER_TEST: f64 = 16.0;

/// A unit's predicted cost in domain tests (0 for a unit that is all trivial, skipped or
/// exact: nothing is walked there).
pub fn planned_cost(cfg: &SearchConfig, unit: UnitSpec) -> f64 {
    if exact_run(cfg.function, cfg.format(), unit).is_some() {
        return 0.0;
    }
    let pieces = plan_pieces(cfg, unit, &mut Stats::default(), &mut Timings::default());
    pieces
        .iter()
        .map(|(piece, plan)| match plan {
            PiecePlan::Generated(g) => {
                let walk = (g.degree * g.limbs) as f64 / WALK_PER_TEST;
                PER_GENERATION + g.domains as f64 * (1.0 + walk)
            }
            PiecePlan::Dense(_) => PER_GENERATION + piece.count as f64 * DENSE_PER_ARGUMENT,
            PiecePlan::Exhaustive => piece.count as f64 * MPFR_PER_ARGUMENT,
            // One generation per piece, every argument walked.
            PiecePlan::Progressions(pr) => {
                (pr.q.min(piece.count) * pr.per_class) as f64 * PER_GENERATION
                    + piece.count as f64 * DENSE_PER_ARGUMENT
            }
            PiecePlan::Skip(_) | PiecePlan::Trivial(_) => 0.0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::format::Format;
    use crate::oracle::function::Function;
    use crate::plan::split_range_in;

    fn cost_per_argument(f: Function, from: &str, to: &str, unit_bits: u32) -> f64 {
        let fmt = Format::named("binary64").unwrap();
        let cfg = SearchConfig::in_format(f, fmt, 44);
        let units = split_range_in(f, fmt, from, to, Some(unit_bits)).unwrap();
        let u = units[units.len() / 2];
        planned_cost(&cfg, u) / u.count as f64
    }

    /// exp is steeper on the grid the larger its binade: [256, 512) walks smaller domains
    /// than [1, 2), and both cost more per argument than a binade far below 1, where the
    /// function is a trivial region and nothing is walked.
    #[test]
    fn steep_binades_cost_more_and_trivial_ones_nothing() {
        let steep = cost_per_argument(Function::Exp, "256", "512", 36);
        let one = cost_per_argument(Function::Exp, "1", "2", 36);
        let tiny = cost_per_argument(Function::Exp, "0x1p-60", "0x1p-59", 36);
        assert!(steep > 2.0 * one, "steep {steep:e}, [1, 2) {one:e}");
        assert!(one > 0.0);
        assert_eq!(tiny, 0.0);
    }
}
