//! The narrowed dense walk: each chunk of `2^CHUNK_BITS` offsets of a piece starts from its
//! exact differences, cut to two limbs and to the differences that still count over one chunk,
//! with the threshold widened by a written bound on what was cut (`docs/error-analysis.md` §20).
//!
//! A piece's words must absorb the rounding of `beta_m` times `C(n, m)` over its whole length
//! (four limbs for sin far out, pieces of `2^17` at degree 13), and the exact walk adds every
//! difference at that width at every offset. Over one chunk of 1,024 offsets from exact
//! differences, a difference cut to 128 bits errs by less than `C(1023, m) 2^-128`, and
//! the high differences of a piece far out (`beta_m` about `2^52 delta^m`) move the value by
//! less than `2^-64` over a chunk: walking 7 or 8 differences of two limbs instead of 14 of
//! four is the same test up to a threshold a few units of `2^-64` wider. The kept offsets are
//! then a superset of the exact walk's, the same on every back end (the CUDA kernel cuts the
//! same chunks the same way).

use crate::numbers::fixed::Word;
use crate::search::generation::FixedPoly;

/// Offsets per chunk: each starts from exact differences (on the GPU, one thread's chunk).
pub const CHUNK_BITS: u32 = 10;

/// Limbs a narrowed difference keeps: the top 128 bits of its fraction.
pub const NARROW_LIMBS: usize = 2;

/// The most differences a narrowed walk keeps (the kernel's largest instantiation).
pub const MAX_DIFFS: usize = 12;

/// What a narrowed walk of a piece walks: its first `diffs` differences, and the threshold
/// widened by the bound on what was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Narrow {
    pub diffs: usize,
    pub t: u64,
}

/// The widening allowed: at most `t / 2^WIDEN_SHARE` more units of `2^-64`, so at most that
/// share more candidates for MPFR.
const WIDEN_SHARE: u32 = 8;

/// The narrowed walk of the piece `fx` at threshold `t` over `count` offsets, or `None` where
/// the exact walk is to run (words already of two limbs or fewer, or no number of differences
/// up to [`MAX_DIFFS`] keeps the widening within `t / 2^WIDEN_SHARE`). The bound: with `M_m >= max_y |Delta^m R~(y)|`
/// over the piece (`sum_(j >= m) |beta_j| C(count - 1, j - m)`), a chunk's value at
/// `s < c = 2^CHUNK_BITS` from its differences `D_m` cut to `D'_m` (`0 <= D_m - D'_m < 2^-128`)
/// and to `m < diffs` is `R~ - sum_(m >= diffs) D_m C(s, m) - sum_(m < diffs) (D_m - D'_m)
/// C(s, m)` mod 1, within `E = sum_(m >= diffs) M_m C(c - 1, m) + sum_(m < diffs) C(c - 1, m)
/// 2^-128` of `R~`; an argument the exact walk keeps (`T <= t` or `T >= 2^64 - t`) is kept
/// under `t + ceil(E 2^64)`. `E` is summed in `f64` (a microsecond a piece, where integers
/// took tens): every term is positive and at most 60 roundings of `2^-53` each stand between
/// it and the exact sum, so `E (1 + 2^-30)` bounds it.
pub fn plan(fx: &FixedPoly, t: u64, count: u64) -> Option<Narrow> {
    if fx.limbs <= NARROW_LIMBS || count == 0 {
        return None;
    }
    let n = fx.beta.len();
    // |beta_j| in units of 2^-64 (a power-of-two scaling, exact but for to_f64's rounding).
    let scale = 64 - fx.frac_bits() as i32;
    let b: Vec<f64> = fx
        .beta
        .iter()
        .map(|v| v.to_f64().abs() * 2f64.powi(scale))
        .collect();
    let over_piece = binomials_f64((count - 1) as f64, n);
    let over_chunk = binomials_f64(((1u64 << CHUNK_BITS) - 1) as f64, n);
    let bound: Vec<f64> = (0..n)
        .map(|m| (m..n).map(|j| b[j] * over_piece[j - m]).sum())
        .collect();
    let budget = t >> WIDEN_SHARE;
    let cut = (-64f64).exp2();
    for diffs in 1..=n.min(MAX_DIFFS) {
        let tail: f64 = (diffs..n).map(|m| bound[m] * over_chunk[m]).sum();
        let truncation: f64 = over_chunk[..diffs].iter().map(|c| c * cut).sum();
        let err = (tail + truncation) * (1.0 + (-30f64).exp2());
        if err.is_finite() && err.ceil() <= budget as f64 {
            return Some(Narrow {
                diffs,
                t: t.checked_add(err.ceil() as u64)?,
            });
        }
    }
    None
}

/// `C(x, m)` for `m < n` in `f64`, from `C(x, m) = C(x, m - 1) (x - m + 1) / m`.
fn binomials_f64(x: f64, n: usize) -> Vec<f64> {
    let mut out = vec![1.0];
    for m in 1..n {
        let prev = *out.last().expect("C(x, 0)");
        out.push((prev * (x - m as f64 + 1.0) / m as f64).max(0.0));
    }
    out
}

/// `C(2^CHUNK_BITS, j)` for `j < n`: the shift of exact differences from one chunk's start to
/// the next. Below `2^128` up to `j = 16` (`DENSE_MAX_DEGREE`).
fn chunk_binomials(n: usize) -> Vec<u128> {
    let c = 1u128 << CHUNK_BITS;
    let mut out = vec![1u128];
    for j in 1..n as u128 {
        let prev = *out.last().expect("C(c, 0)");
        out.push(prev.checked_mul(c - j + 1).expect("C(1024, 16) < 2^128") / j);
    }
    out
}

/// The offsets the narrowed walk keeps, increasing: each chunk's exact differences (carried
/// from chunk to chunk at the piece's width by `D_m += sum_j C(c, j) D_(m+j)`), their top two
/// limbs walked over the chunk. `words` holds the piece's `beta_m` mod `2^(64 L)`, `L` limbs
/// each, least significant first (`Dense::words`).
pub fn walk<const L: usize>(words: &[u64], count: u64, nw: Narrow) -> Vec<u64> {
    let mut full: Vec<Word<L>> = words
        .chunks_exact(L)
        .map(|w| w.try_into().expect("L limbs"))
        .collect();
    let binom = chunk_binomials(full.len());
    let (low, high) = (nw.t, 0u64.wrapping_sub(nw.t));
    let c = 1u64 << CHUNK_BITS;
    let mut out = Vec::new();
    let mut w = [0u128; MAX_DIFFS];
    let mut y0 = 0;
    while y0 < count {
        for (m, slot) in w.iter_mut().enumerate().take(nw.diffs) {
            *slot = ((full[m][L - 1] as u128) << 64) | full[m][L - 2] as u128;
        }
        for y in y0..count.min(y0 + c) {
            let top = (w[0] >> 64) as u64;
            if top <= low || top >= high {
                out.push(y);
            }
            for m in 0..nw.diffs - 1 {
                w[m] = w[m].wrapping_add(w[m + 1]);
            }
        }
        y0 += c;
        if y0 < count {
            next_chunk(&mut full, &binom);
        }
    }
    out
}

/// A chunk's exact differences into the next's: `D_m += sum_(j >= 1) C(c, j) D_(m+j)`,
/// ascending (each reads the old `D_(m+j)`), exact mod `2^(64 L)`.
fn next_chunk<const L: usize>(full: &mut [Word<L>], binom: &[u128]) {
    use crate::numbers::fixed::{add, mul_u128};
    for m in 0..full.len() {
        let mut acc = full[m];
        for j in 1..full.len() - m {
            add(&mut acc, &mul_u128(&full[m + j], binom[j]));
        }
        full[m] = acc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::dense::Dense;
    use proptest::prelude::*;
    use rug::Integer;

    /// A dense piece of `limbs` limbs with the given coefficients (fixed units) and threshold
    /// (made for no offsets: each walk plans its own).
    fn piece(limbs: usize, beta: Vec<Integer>, t: u64) -> Dense {
        Dense::new(
            FixedPoly {
                degree: beta.len() - 1,
                limbs,
                crossing: false,
                beta,
                radius: Integer::new(),
                taylor: Integer::new(),
                rounding: Integer::new(),
                halves: Vec::new(),
            },
            t,
            0,
        )
    }

    /// The exact walk's `R~(y)` mod 1 as its top 64 bits, from the coefficients.
    fn exact_top(d: &Dense, y: u64) -> u64 {
        let f = d.fx().frac_bits();
        let v: Integer = d
            .fx()
            .beta
            .iter()
            .enumerate()
            .map(|(m, b)| b * Integer::from(y).binomial(m as u32))
            .sum();
        let frac = Integer::from(v.keep_bits_ref(f)) >> (f - 64);
        frac.to_u64().expect("64 bits")
    }

    /// Coefficients like a piece of sin far out: `beta_m` about `2^(F + 52 - s m)`, the step's
    /// angle `2^-s`, signs and digits from the seed.
    fn far_out(limbs: usize, s: u32, degree: usize, seed: u64) -> Vec<Integer> {
        let f = 64 * limbs as i64;
        let mut x = seed | 1;
        (0..=degree)
            .map(|m| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let e = f + 52 - s as i64 * m as i64;
                let mag = if e > 64 {
                    Integer::from(x | (1 << 63)) << (e - 64) as u32
                } else if e > 0 {
                    Integer::from((x | (1 << 63)) >> (64 - e))
                } else {
                    Integer::new()
                };
                if x & 2 == 0 {
                    -mag
                } else {
                    mag
                }
            })
            .collect()
    }

    fn kept_exactly(d: &Dense, count: u64, t: u64) -> Vec<u64> {
        (0..count)
            .filter(|&y| {
                let top = exact_top(d, y);
                top <= t || top >= 0u64.wrapping_sub(t)
            })
            .collect()
    }

    /// A piece like sin far out walks 7 to 9 differences instead of 14, and the threshold
    /// grows by a few units of `2^-64` only.
    #[test]
    fn far_out_pieces_walk_few_differences_of_two_limbs() {
        let d = piece(4, far_out(4, 25, 13, 7), 1 << 21);
        let nw = plan(d.fx(), d.t(), 1 << 17).expect("narrowed");
        assert!((6..=9).contains(&nw.diffs), "{nw:?}");
        assert!(nw.t - d.t() <= 16, "{nw:?}");
        // Two limbs or fewer: nothing to narrow; a threshold of 0 leaves no budget.
        assert_eq!(
            plan(
                piece(2, far_out(2, 25, 13, 7), 1 << 21).fx(),
                1 << 21,
                1 << 17
            ),
            None
        );
        assert_eq!(
            plan(piece(4, far_out(4, 25, 13, 7), 0).fx(), 0, 1 << 17),
            None
        );
    }

    /// Every offset the exact walk keeps at `t`, the narrowed one keeps (and it keeps what its
    /// own values say, checked against the exact value within the widening), on pieces whose
    /// chunks start from carried differences.
    #[test]
    fn the_narrowed_walk_keeps_what_the_exact_walk_keeps() {
        for (seed, s, t) in [
            (1u64, 20u32, 1u64 << 56),
            (2, 25, 1 << 55),
            (3, 18, 1 << 57),
        ] {
            let d = piece(4, far_out(4, s, 13, seed), t);
            let count = 5 * 1024 + 77;
            let nw = plan(d.fx(), d.t(), count).expect("narrowed");
            let kept = walk::<4>(d.words(), count, nw);
            let exact = kept_exactly(&d, count, d.t());
            assert!(!exact.is_empty(), "seed {seed}: the test keeps some");
            for y in &exact {
                assert!(kept.binary_search(y).is_ok(), "seed {seed}: {y} dropped");
            }
            let wide = kept_exactly(&d, count, nw.t + (nw.t - d.t()));
            for y in &kept {
                assert!(
                    wide.binary_search(y).is_ok(),
                    "seed {seed}: {y} kept, far off"
                );
            }
        }
    }

    /// The carried differences are `Delta^m R~(y0)` mod 1 exactly at every chunk's start.
    #[test]
    fn carried_differences_are_exact_at_every_chunk() {
        use crate::numbers::fixed::{from_integer, Word};
        let beta = far_out(4, 15, 16, 5);
        let n = beta.len();
        let mut full: Vec<Word<4>> = beta.iter().map(from_integer::<4>).collect();
        let binom = chunk_binomials(n);
        for chunk in 1..6u64 {
            next_chunk(&mut full, &binom);
            let y0 = Integer::from(chunk << CHUNK_BITS);
            for (m, word) in full.iter().enumerate() {
                let exact: Integer = (m..n)
                    .map(|j| &beta[j] * y0.clone().binomial((j - m) as u32))
                    .sum();
                assert_eq!(
                    *word,
                    from_integer::<4>(&exact),
                    "chunk {chunk}, difference {m}"
                );
            }
        }
    }

    /// The kept offsets with every difference walked: within the low limbs' cut of the exact.
    #[test]
    fn carried_chunk_starts_are_exact() {
        let beta = far_out(3, 15, 8, 11);
        let d = piece(3, beta, 1 << 57);
        let nw = Narrow {
            diffs: 9,
            t: 1 << 57,
        };
        let kept = walk::<3>(d.words(), 4 * 1024, nw);
        // With every difference walked the cut is the low limb only: the top 64 bits never
        // differ from the exact value's by more than the carried error, one unit.
        let exact = kept_exactly(&d, 4 * 1024, (1 << 57) + 9);
        let inner = kept_exactly(&d, 4 * 1024, (1 << 57) - 9);
        assert!(!inner.is_empty());
        for y in &inner {
            assert!(kept.binary_search(y).is_ok(), "{y}");
        }
        for y in &kept {
            assert!(exact.binary_search(y).is_ok(), "{y}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Random steps, degrees and thresholds: nothing the exact walk keeps is dropped.
        #[test]
        fn nothing_kept_exactly_is_dropped(seed in any::<u64>(), s in 12u32..30, degree in 4usize..14,
                                           tbits in 40u32..58, extra in 0u64..3000) {
            let d = piece(4, far_out(4, s, degree, seed), 1 << tbits);
            let count = 2048 + extra;
            if let Some(nw) = plan(d.fx(), d.t(), count) {
                let kept = walk::<4>(d.words(), count, nw);
                for y in kept_exactly(&d, count, d.t()) {
                    prop_assert!(kept.binary_search(&y).is_ok(), "{} dropped, {:?}", y, nw);
                }
            }
        }
    }
}
