//! The ETA: the work left over the rate of work of the last few minutes, both counted over
//! the arguments that cost time, so that a block the plan collapsed (many units' worth that
//! overflows or underflows for free) neither fills the work left at the end nor makes the
//! rate jump when it is done.
//!
//! Why work and not the seconds results report: a result's `elapsed_seconds` over the
//! worker's slots is its share of a GPU that runs many units side by side, not its cost. A
//! unit run beside dearer ones, or in a daemon's first lease while its modules compile, was
//! charged up to 8 times its cost on whole exp on two GPUs, and an ETA built on each binade's
//! measured seconds read the time left 3 times too long (docs/benchmarks-history.md). The
//! estimate's weights are each binade's cost per argument; their scale is what the rate of
//! the last few minutes measures.

/// One binade of a campaign as its counters read: its arguments and units left (pending and
/// leased) and done, and its weight (the cost per argument the estimate or the plan gives
/// it, relative to the campaign's mean: its time spread over all its arguments).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BinadeWork {
    pub left: f64,
    pub done: f64,
    pub units_left: f64,
    pub units_done: f64,
    pub weight: f64,
}

impl BinadeWork {
    /// Arguments that cost time, of `args` in `units` units: a unit counts for at most one
    /// unit's arguments (a collapsed block is one unit).
    fn costly(args: f64, units: f64, unit_args: f64) -> f64 {
        args.min(units * unit_args)
    }

    /// The binade's work per costly argument: its weight times its arguments over its costly
    /// ones, so that its costly arguments weigh what all its arguments weigh.
    fn cost(&self, unit_args: f64) -> f64 {
        let weight = if self.weight.is_finite() && self.weight > 0.0 {
            self.weight
        } else {
            1.0
        };
        let all = self.left + self.done;
        let costly = Self::costly(self.left, self.units_left, unit_args)
            + Self::costly(self.done, self.units_done, unit_args);
        if costly > 0.0 && all > costly {
            weight * all / costly
        } else {
            weight
        }
    }
}

/// A campaign's work over its costly arguments: left (pending and leased) and done.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CostlyWork {
    pub left: f64,
    pub done: f64,
}

/// The work of `binades` counted over their costly arguments (`unit_args` arguments a unit
/// at most). Its total is the binades' weighted arguments, as the work counters say; only
/// where it lies differs.
pub fn costly_work(binades: &[BinadeWork], unit_args: f64) -> CostlyWork {
    let unit_args = unit_args.max(1.0);
    binades.iter().fold(CostlyWork::default(), |w, b| {
        let cost = b.cost(unit_args);
        CostlyWork {
            left: w.left + BinadeWork::costly(b.left, b.units_left, unit_args) * cost,
            done: w.done + BinadeWork::costly(b.done, b.units_done, unit_args) * cost,
        }
    })
}

/// The ETA of `work` at the rate of costly work over the recent window: `done_then` is the
/// costly work done at the window's start, `window` its length in seconds. `None` when
/// nothing was done in the window.
pub fn eta(work: CostlyWork, done_then: f64, window: f64) -> Option<f64> {
    let rate = super::work::rate(work.done, done_then, window);
    super::work::eta(work.left, rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exp's binade [512, 1024): 103 searched units and a collapsed block of 152 units' worth
    /// that overflows for free, its weight spreading its time over all 255 units' arguments.
    /// Counted over costly arguments the block is one unit, pending or done.
    #[test]
    fn a_collapsed_block_weighs_one_unit_whenever_it_is_done() {
        let unit = 100.0;
        let binade = |left_units: f64, left_block: bool| {
            let left = left_units * unit + if left_block { 152.0 * unit } else { 0.0 };
            let units_left = left_units + f64::from(u8::from(left_block));
            BinadeWork {
                left,
                done: 255.0 * unit - left,
                units_left,
                units_done: 104.0 - units_left,
                weight: 103.0 / 255.0,
            }
        };
        // The binade's work is 103 units' worth, each unit one 104th of it.
        let per_unit = 103.0 * unit / 104.0;
        let w = costly_work(&[binade(53.0, true)], unit);
        assert!((w.left - 54.0 * per_unit).abs() < 1e-9, "{w:?}");
        assert!((w.done - 50.0 * per_unit).abs() < 1e-9, "{w:?}");
        let w = costly_work(&[binade(53.0, false)], unit);
        assert!((w.left - 53.0 * per_unit).abs() < 1e-9, "{w:?}");
        assert!((w.done - 51.0 * per_unit).abs() < 1e-9, "{w:?}");
    }

    /// Without a collapsed block, costly work is the weighted arguments.
    #[test]
    fn without_collapsed_blocks_costly_work_is_weighted_arguments() {
        let bs = [
            BinadeWork {
                left: 300.0,
                done: 100.0,
                units_left: 3.0,
                units_done: 1.0,
                weight: 2.0,
            },
            // A partial unit (fewer arguments than a unit holds) counts as what it holds.
            BinadeWork {
                left: 30.0,
                done: 0.0,
                units_left: 1.0,
                units_done: 0.0,
                weight: 0.5,
            },
        ];
        let w = costly_work(&bs, 100.0);
        assert_eq!(
            w,
            CostlyWork {
                left: 615.0,
                done: 200.0
            }
        );
    }

    /// The rate is the costly work done in the window over its seconds.
    #[test]
    fn the_eta_is_the_work_left_over_the_recent_rate() {
        let w = CostlyWork {
            left: 600.0,
            done: 1120.0,
        };
        assert_eq!(eta(w, 1000.0, 60.0), Some(300.0));
        assert_eq!(eta(w, 1120.0, 60.0), None);
        assert_eq!(
            eta(
                CostlyWork {
                    left: 0.0,
                    done: 1120.0
                },
                1000.0,
                60.0
            ),
            Some(0.0)
        );
    }
}
