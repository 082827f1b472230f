//! The ETA from measured time: each binade's time left from the seconds its results took, the
//! estimate's (or the plan's) weights standing in where a binade has few results, divided by
//! the seconds of work the farm does per second now.
//!
//! Why not work over a rate of work: an estimate samples a few units per binade, one at a time,
//! and its weights are off by a factor that differs from binade to binade (a GPU runs a flat
//! binade's units side by side far better than the sample saw). A rate of weighted work
//! measured on one binade then says little of the next, and whole exp on two GPUs read the
//! time left 17% short to 58% long. Seconds are the same unit wherever they are measured.

/// One binade of a campaign as its counters read: its arguments left (pending and leased), its
/// arguments done, its weight (the cost per argument the estimate or the plan gives it, relative
/// to the campaign's mean) and the seconds its results took (`elapsed_seconds` over the
/// worker's slots, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BinadeTime {
    pub left: f64,
    pub done: f64,
    pub weight: f64,
    pub seconds: f64,
}

/// A binade's own results count for this many units' worth of arguments before they outweigh
/// the weight it was given: one unit of a binade may be its cheapest or its dearest.
pub const PRIOR_UNITS: f64 = 2.0;

/// How far a binade's measured seconds per argument may stray from what its weight predicts:
/// results' seconds are the workers' word, and one liar must not make the ETA absurd.
pub const MAX_STRAY: f64 = 16.0;

/// The seconds of work left in `binades`, at the speed measured so far: `None` until some
/// binade has both results and done arguments (nothing to scale the weights by).
///
/// `unit_args` is the campaign's arguments per unit. The weights are scaled to seconds by the
/// campaign's measured seconds per weighted argument; each binade's own seconds per argument
/// then replace its scaled weight as its results accumulate ([`PRIOR_UNITS`]), within
/// [`MAX_STRAY`] of it.
pub fn seconds_left(binades: &[BinadeTime], unit_args: f64) -> Option<f64> {
    let valid =
        |b: &&BinadeTime| b.done > 0.0 && b.seconds > 0.0 && b.weight.is_finite() && b.weight > 0.0;
    let (secs, work) = binades.iter().filter(valid).fold((0.0, 0.0), |(s, w), b| {
        (s + b.seconds, w + b.done * b.weight)
    });
    if !(secs > 0.0 && work > 0.0) {
        return None;
    }
    let per_work = secs / work;
    let prior = PRIOR_UNITS * unit_args.max(1.0);
    let left = binades
        .iter()
        .filter(|b| b.left > 0.0)
        .map(|b| {
            let weight = if b.weight.is_finite() && b.weight > 0.0 {
                b.weight
            } else {
                1.0
            };
            let predicted = weight * per_work;
            let measured = if b.done > 0.0 && b.seconds >= 0.0 {
                (b.seconds + prior * predicted) / (b.done + prior)
            } else {
                predicted
            };
            b.left * measured.clamp(predicted / MAX_STRAY, predicted * MAX_STRAY)
        })
        .sum::<f64>();
    Some(left)
}

/// The ETA of `seconds_left` at the farm's pace over the recent window: `seconds_now` and
/// `seconds_then` are the campaign's result seconds now and at the window's start, `window` its
/// length. The pace is the number of workers' slot-seconds done per second: about the number
/// of GPUs busy. `None` when nothing was done in the window.
pub fn eta(seconds_left: f64, seconds_now: f64, seconds_then: f64, window: f64) -> Option<f64> {
    let pace = super::work::rate(seconds_now, seconds_then, window);
    super::work::eta(seconds_left, pace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(left: f64, done: f64, weight: f64, seconds: f64) -> BinadeTime {
        BinadeTime {
            left,
            done,
            weight,
            seconds,
        }
    }

    /// A binade the estimate weighed 4 times too dear: once its results come in, its time left
    /// is what they took, not what the weight says; an unmeasured binade keeps its weight,
    /// scaled by the campaign's measured seconds per weighted argument.
    #[test]
    fn a_binade_measured_replaces_its_weight() {
        let unit = 10.0;
        // Binade A: weight 1, 1,000 done in 100 s (0.1 s an argument), 1,000 left.
        // Binade B: weight 4, 1,000 done in 100 s (the estimate said 400), 1,000 left.
        // Binade C: weight 2, nothing done, 500 left.
        let bs = [
            b(1000.0, 1000.0, 1.0, 100.0),
            b(1000.0, 1000.0, 4.0, 100.0),
            b(500.0, 0.0, 2.0, 0.0),
        ];
        let left = seconds_left(&bs, unit).unwrap();
        // Per weighted argument: 200 s over 5,000 = 0.04. A: (100 + 20 * 0.04) / 1020 per
        // argument; B: (100 + 20 * 0.16) / 1020; C: 2 * 0.04.
        let a = 1000.0 * (100.0 + 20.0 * 0.04) / 1020.0;
        let bb = 1000.0 * (100.0 + 20.0 * 0.16) / 1020.0;
        let c = 500.0 * 0.08;
        assert!((left - (a + bb + c)).abs() < 1e-9, "{left}");
        // B's time left is near its measured 100 s, not the weight's 4 * 0.04 * 1000 = 160 s.
        assert!((bb - 101.2).abs() < 0.1, "{bb}");
    }

    /// Nothing measured: no time left to say; seconds with no arguments done say nothing.
    #[test]
    fn without_results_there_is_no_measured_time() {
        assert_eq!(seconds_left(&[b(100.0, 0.0, 1.0, 0.0)], 1.0), None);
        assert_eq!(seconds_left(&[b(100.0, 0.0, 1.0, 50.0)], 1.0), None);
        assert_eq!(seconds_left(&[], 1.0), None);
        // A campaign with nothing left has none to do.
        assert_eq!(seconds_left(&[b(0.0, 10.0, 1.0, 5.0)], 1.0), Some(0.0));
    }

    /// A worker that reports absurd seconds on one binade moves that binade's time at most
    /// MAX_STRAY times from what the campaign's pace and its weight predict.
    #[test]
    fn one_binade_strays_at_most_max_stray_from_its_weight() {
        let bs = [
            b(0.0, 1e6, 1.0, 1e3),
            // A lie: 1e12 s for 10 arguments; it moves the campaign's scale too, so compare
            // with that scale.
            b(100.0, 10.0, 1.0, 1e12),
        ];
        let per_work = (1e3 + 1e12) / (1e6 + 10.0);
        let left = seconds_left(&bs, 1.0).unwrap();
        assert!(left <= 100.0 * per_work * MAX_STRAY * (1.0 + 1e-12));
        // A liar claiming no time at all pulls its binade down to the floor, not to zero.
        let bs = [b(0.0, 1e6, 1.0, 1e3), b(100.0, 1e6, 1.0, 0.0)];
        let left = seconds_left(&bs, 1.0).unwrap();
        // Seconds of 0 scale nothing: the campaign's pace is the first binade's.
        let per_work = 1e3 / 1e6;
        assert!(
            (left - 100.0 * per_work / MAX_STRAY).abs() < 1e-12,
            "{left}"
        );
    }

    /// The pace is slot-seconds per second: two GPUs busy for 60 s add 120 s of results.
    #[test]
    fn the_eta_divides_by_the_farms_pace() {
        assert_eq!(eta(600.0, 1120.0, 1000.0, 60.0), Some(300.0));
        assert_eq!(eta(600.0, 1000.0, 1000.0, 60.0), None);
        assert_eq!(eta(0.0, 1120.0, 1000.0, 60.0), Some(0.0));
    }
}
