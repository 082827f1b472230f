//! A binade's sample unit: the one the plan's weights price the binade by, before any
//! estimate.
//!
//! Why not simply its middle unit: where a binade overflows or underflows from its middle on
//! (exp's [512, 1024) from 709.78), those units cost nothing. A whole function's plan collapses
//! them into one block; a range's plan cuts them into units like any other, which the engine
//! then skips whole. A binade priced by such a unit weighed almost nothing however dear its
//! searched part.

use tmd_wire::UnitSpec;

/// Units of a binade looked at for its sample: the searched part is known to about a ninth.
pub const PROBES: usize = 9;

/// Whether a unit is one the engine searches as a unit: a block wider than the unit size is
/// the plan's collapse of a run of units that cost nothing (overflow, underflow, trivial),
/// which says nothing of its binade's cost.
pub fn searched(u: &UnitSpec, unit_bits: u32) -> bool {
    unit_bits >= 64 || u.count <= 1u64 << unit_bits
}

/// The indices in `us` (one binade's units in argument order) of up to `n` of the units it
/// searches, spread evenly (the middles of `n` equal shares of them), in argument order; all
/// of them where there are fewer; none where every argument is collapsed.
pub fn probe_indices(us: &[&UnitSpec], unit_bits: u32, n: usize) -> Vec<usize> {
    let searched: Vec<usize> = (0..us.len())
        .filter(|&i| searched(us[i], unit_bits))
        .collect();
    if searched.len() <= n {
        return searched;
    }
    (0..n)
        .map(|k| searched[(2 * k + 1) * searched.len() / (2 * n)])
        .collect()
}

/// The sample among a binade's probes, `runs[i]` telling whether the search runs probe `i`
/// (false: it would skip every argument of it): the middle of those it runs, and their share
/// of the probes (the share of the binade's searched arguments that cost anything). `None`
/// where it runs none.
pub fn pick(runs: &[bool]) -> Option<(usize, f64)> {
    let live: Vec<usize> = (0..runs.len()).filter(|&i| runs[i]).collect();
    let middle = *live.get(live.len() / 2)?;
    Some((middle, live.len() as f64 / runs.len() as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(first: u64, count: u64) -> UnitSpec {
        UnitSpec {
            negative: false,
            exponent: 9,
            first,
            count,
        }
    }

    /// Probes spread over the searched units, never a collapsed block; none where all
    /// collapsed; the middle probe is the middle searched unit.
    #[test]
    fn probes_are_spread_over_the_searched_units() {
        // A collapsed block of 64 and four searched units of 16: all four probed.
        let units = [u(0, 64), u(64, 16), u(80, 16), u(96, 16), u(112, 16)];
        let refs: Vec<&UnitSpec> = units.iter().collect();
        assert_eq!(probe_indices(&refs, 4, PROBES), [1, 2, 3, 4]);
        assert_eq!(probe_indices(&refs, 4, 1), [3]);
        // Exp's [512, 1024) in small: three searched units and a block wider than all.
        let units = [u(0, 16), u(16, 16), u(32, 16), u(48, 200)];
        let refs: Vec<&UnitSpec> = units.iter().collect();
        assert_eq!(probe_indices(&refs, 4, 1), [1]);
        assert!(probe_indices(&refs[3..], 4, PROBES).is_empty());
        // 100 searched units, 9 probes: the middles of 9 shares, the fifth the middle unit.
        let units: Vec<UnitSpec> = (0..100).map(|i| u(16 * i, 16)).collect();
        let refs: Vec<&UnitSpec> = units.iter().collect();
        let probes = probe_indices(&refs, 4, PROBES);
        assert_eq!(probes, [5, 16, 27, 38, 50, 61, 72, 83, 94]);
        // A partial unit is searched.
        assert_eq!(probe_indices(&[&u(7, 3)], 4, PROBES), [0]);
        assert!(searched(&u(0, u64::MAX), 64));
    }

    /// The sample is the middle probe the search runs, with the share of those it runs.
    #[test]
    fn the_sample_is_the_middle_probe_that_runs() {
        assert_eq!(pick(&[true; 9]), Some((4, 1.0)));
        // Overflowing from the fourth probe on: the second of the first three.
        let runs = [true, true, true, false, false, false, false, false, false];
        assert_eq!(pick(&runs), Some((1, 3.0 / 9.0)));
        assert_eq!(pick(&[false; 9]), None);
        assert_eq!(pick(&[]), None);
        assert_eq!(pick(&[true]), Some((0, 1.0)));
    }
}
