//! A binade's sample unit: the one the plan's weights price the binade by, before any
//! estimate.
//!
//! Why not simply its middle unit: where a binade overflows or underflows from its middle on
//! (exp's [512, 1024) from 709.78), the plan collapses those units into one block that costs
//! nothing, and a binade priced by it weighed almost nothing however dear its searched half.

use tmd_wire::UnitSpec;

/// Whether a unit is one the engine searches as a unit: a block wider than the unit size is
/// the plan's collapse of a run of units that cost nothing (overflow, underflow, trivial),
/// which says nothing of its binade's cost.
pub fn searched(u: &UnitSpec, unit_bits: u32) -> bool {
    unit_bits >= 64 || u.count <= 1u64 << unit_bits
}

/// The index in `us` (one binade's units in argument order) of its sample unit: the middle
/// one of the units it searches, or `None` when it searches none (every argument collapsed).
pub fn sample_index(us: &[&UnitSpec], unit_bits: u32) -> Option<usize> {
    let searched: Vec<usize> = (0..us.len())
        .filter(|&i| searched(us[i], unit_bits))
        .collect();
    searched.get(searched.len() / 2).copied()
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

    /// The middle of the searched units, never a collapsed block; none where all collapsed.
    #[test]
    fn the_sample_is_the_middle_searched_unit() {
        // A collapsed block of 64 and four searched units of 16: the middle of the searched
        // ones (unit 3), not the middle of all five (unit 2).
        let units = [u(0, 64), u(64, 16), u(80, 16), u(96, 16), u(112, 16)];
        let refs: Vec<&UnitSpec> = units.iter().collect();
        assert_eq!(sample_index(&refs, 4), Some(3));
        // Exp's [512, 1024) in small: three searched units and a block wider than all.
        let units = [u(0, 16), u(16, 16), u(32, 16), u(48, 200)];
        let refs: Vec<&UnitSpec> = units.iter().collect();
        assert_eq!(sample_index(&refs, 4), Some(1));
        assert_eq!(sample_index(&refs[3..], 4), None);
        // A partial unit is searched.
        assert_eq!(sample_index(&[&u(7, 3)], 4), Some(0));
        assert!(searched(&u(0, u64::MAX), 64));
    }
}
