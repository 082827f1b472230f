//! The domain size of flat pieces: whether domains larger than the published size
//! pay on a piece, judged from phase 1's test on a sample of its domains.

use crate::numbers::fixed::{self, MAX_LIMBS};
use crate::search::existence;
use rug::Integer;

/// Domains sampled by [`rise_pays`].
const RISE_SAMPLES: u64 = 128;

/// Whether domains of `2^domain_bits` arguments pay on a piece of `count` arguments (its walks
/// `walk_b` and `walk_slope`, `frac_bits` fractional, phase 1's threshold `e1`) where they rose
/// above the published size. Phase 1's test, run exactly as the phases run it on
/// `RISE_SAMPLES` domains spread evenly over the piece, gives the share `P` of failing domains.
/// Per argument, a size costs `(1 + P c) / N`, with `c = 2^kappa + 4` phase-1 tests for a
/// failing domain (phase 2's test of each of its `2^kappa` subdomains, its exact words), and
/// halving `N` divides `P` by about 8 (the quadratic residual over `N` points): the size pays
/// where `P (c - c'/4) < 1`, `c'` the half's, i.e. `P (7/8 2^kappa + 3) < 1`. The line test
/// fails far more often than its threshold predicts where `f` is close to a line of dyadic
/// slope (sin, expm1 and log1p near 0, exp near the ends of its binades: up to half the domains
/// of `2^18`, 10 to 40 times the prediction), and there the published size is faster. A route
/// only: the sample is a function of the piece and the configuration, never of a back end, and
/// no bound depends on it.
pub(crate) fn rise_pays(
    walk_b: &[Integer],
    walk_slope: &[Integer],
    frac_bits: u32,
    count: u64,
    domain_bits: u32,
    sub_bits: u32,
    e1: u64,
) -> bool {
    let full = count >> domain_bits;
    let samples = RISE_SAMPLES.min(full);
    if samples == 0 {
        return true;
    }
    // A word of the widest kind holding the value's fraction in its top `frac_bits` bits: the
    // limbs below are zero, so `fixed::ceil64` and `fixed::neg_floor64` read it as the
    // piece's own words (the walks' `b` and `a`).
    let word =
        |v: Integer| fixed::from_integer::<MAX_LIMBS>(&(v << (64 * MAX_LIMBS as u32 - frac_bits)));
    let failures = (0..samples)
        .filter(|&s| {
            let i = ((2 * s + 1) as u128 * full as u128 / (2 * samples) as u128) as u64;
            // Both walks at domain i: sum_l C(i, l) Delta^l w(0), the binomials shared.
            let binomials: Vec<Integer> = (0..walk_b.len().max(walk_slope.len()) as u32)
                .map(|l| Integer::from(i).binomial(l))
                .collect();
            let at = |walk: &[Integer]| -> Integer {
                walk.iter()
                    .zip(&binomials)
                    .map(|(w, c)| Integer::from(w * c))
                    .sum()
            };
            let b = fixed::ceil64(&word(at(walk_b)));
            let a = fixed::neg_floor64(&word(at(walk_slope)));
            !existence::regular(a, b, 1 << domain_bits, e1)
        })
        .count() as u64;
    let kappa = domain_bits - sub_bits;
    failures * (7 * (1u64 << kappa) + 24) < 8 * samples
}
