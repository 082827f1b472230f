//! Phase 1's walk of 8 neighbouring domains at once: step-8 difference tables, one domain per lane.
//!
//! Lane `l` walks the domains `i + l`, `i + l + 8`, ... of a packet from the exact step-8
//! differences `Delta_8^m w(i + l) = sum_(r >= m) T[m][r] Delta^r w(i + l)`, where `T[m][r]` is the
//! coefficient of `x^r` in `((1 + x)^8 - 1)^m` (as the GPU's striped walk, docs/error-analysis.md
//! §6): each step adds words limb by limb across the lanes, which the compiler turns into vector
//! additions where AVX-512 is detected. The words are exact mod `2^(64 L)`, so every domain's `a`,
//! `b` and words are those of the unit-step walk.

use crate::numbers::fixed::{self, Word};
use crate::search::existence::{self, simd_available, LANES};
use crate::search::generation::Generated;

/// Lanes of a stripe: consecutive domains walked together.
pub const WIDTH: usize = 8;

/// A table of step-8 differences, lane-minor: `[m][k][l]` is limb `k` of the `m`-th difference
/// of lane `l`.
type Table<const L: usize> = Vec<[[u64; WIDTH]; L]>;

/// The walked `b` and slope of 8 consecutive domains.
pub struct Stripes<const L: usize> {
    b: Table<L>,
    s: Table<L>,
}

impl<const L: usize> Stripes<L> {
    /// From the unit-step tables at domain `i` (walked forward 7 steps for lanes 1 to 7). `None`
    /// where the tables are too long for 64-bit coefficients `T[m][r]` (more than 9 words).
    pub fn new(wb: &[Word<L>], ws: &[Word<L>]) -> Option<Stripes<L>> {
        Some(Stripes {
            b: stripe_table(wb)?,
            s: stripe_table(ws)?,
        })
    }

    /// The current words of the lanes, lane-minor: `(b, slope)`.
    #[inline(always)]
    pub fn words(&self) -> ([[u64; WIDTH]; L], [[u64; WIDTH]; L]) {
        (self.b[0], self.s[0])
    }

    /// The test's `a` and `b` of the current domains, as `fixed::neg_floor64` and
    /// `fixed::ceil64` take them from the words, lane by lane.
    #[inline(always)]
    pub fn test_inputs(&self, a: &mut [u64], b: &mut [u64]) {
        let (wb, ws) = (&self.b[0], &self.s[0]);
        for l in 0..WIDTH {
            let low_b = (0..L - 1).fold(0, |x, k| x | wb[k][l]);
            let low_s = (0..L - 1).fold(0, |x, k| x | ws[k][l]);
            b[l] = wb[L - 1][l].wrapping_add((low_b != 0) as u64);
            a[l] = match low_s != 0 {
                true => !ws[L - 1][l],
                false => ws[L - 1][l].wrapping_neg(),
            };
        }
    }

    /// Every lane 8 domains on.
    #[inline]
    pub fn step(&mut self) {
        #[cfg(target_arch = "x86_64")]
        if simd_available() {
            // SAFETY: AVX-512F and DQ were detected at run time (`simd_available`).
            unsafe { step_avx512(&mut self.b, &mut self.s) };
            return;
        }
        step_lanes(&mut self.b);
        step_lanes(&mut self.s);
    }
}

/// Phase 1's regular test on the domains `i0..` of a packet ending at `i1`, from the unit-step
/// tables `wb`, `ws` at `i0`, `LANES` domains at a time while they have one length; `fail` is
/// called on each failing domain in order with its index and words. Returns the first domain
/// not tested. Striped where the CPU has AVX-512 (`Stripes`), else walked domain by domain.
pub fn phase1_lanes<const L: usize>(
    g: &Generated,
    i0: u64,
    i1: u64,
    wb: &[Word<L>],
    ws: &[Word<L>],
    mut fail: impl FnMut(u64, Word<L>, Word<L>),
) -> u64 {
    const { assert!(LANES.is_multiple_of(WIDTH)) };
    let lanes = LANES as u64;
    // Only the last domain of a piece may be shorter: groups of one length.
    let full = |i: u64| i + lanes <= i1 && g.domain_len(i + lanes - 1) == g.domain_len(i);
    let stripes = match simd_available() && full(i0) {
        true => Stripes::new(wb, ws),
        false => None,
    };
    let (mut a, mut b) = ([0u64; LANES], [0u64; LANES]);
    let mut i = i0;
    if let Some(mut st) = stripes {
        let mut words = [([[0u64; WIDTH]; L], [[0u64; WIDTH]; L]); LANES / WIDTH];
        while full(i) {
            for (h, w) in words.iter_mut().enumerate() {
                st.test_inputs(&mut a[h * WIDTH..], &mut b[h * WIDTH..]);
                *w = st.words();
                st.step();
            }
            let pass = existence::regular_lanes(&a, &b, g.domain_len(i), g.e1);
            for j in (0..LANES).filter(|j| pass >> j & 1 == 0) {
                let (wb, ws) = &words[j / WIDTH];
                let lane = |w: &[[u64; WIDTH]; L]| std::array::from_fn(|k| w[k][j % WIDTH]);
                fail(i + j as u64, lane(wb), lane(ws));
            }
            i += lanes;
        }
        return i;
    }
    let (mut ub, mut us) = (wb.to_vec(), ws.to_vec());
    let mut words = [([0u64; L], [0u64; L]); LANES];
    while full(i) {
        for (j, w) in words.iter_mut().enumerate() {
            *w = (ub[0], us[0]);
            a[j] = fixed::neg_floor64(&w.1);
            b[j] = fixed::ceil64(&w.0);
            unit_step(&mut ub);
            unit_step(&mut us);
        }
        let pass = existence::regular_lanes(&a, &b, g.domain_len(i), g.e1);
        for (j, &(bw, sw)) in words.iter().enumerate() {
            if pass >> j & 1 == 0 {
                fail(i + j as u64, bw, sw);
            }
        }
        i += lanes;
    }
    i
}

/// One unit step of a table.
#[inline(always)]
fn unit_step<const L: usize>(w: &mut [Word<L>]) {
    for m in 0..w.len().saturating_sub(1) {
        let next = w[m + 1];
        fixed::add(&mut w[m], &next);
    }
}

/// The unit-step walk's `Delta^l w += Delta^(l+1) w`, low `l` first, on the 8 lanes at once.
#[inline(always)]
fn step_lanes<const L: usize>(t: &mut [[[u64; WIDTH]; L]]) {
    for m in 0..t.len().saturating_sub(1) {
        let next = t[m + 1];
        let cur = &mut t[m];
        let mut carry = [0u64; WIDTH];
        for k in 0..L {
            for l in 0..WIDTH {
                let s = cur[k][l].wrapping_add(next[k][l]);
                let s2 = s.wrapping_add(carry[l]);
                carry[l] = ((s < next[k][l]) | (s2 < carry[l])) as u64;
                cur[k][l] = s2;
            }
        }
    }
}

/// `step_lanes` on both tables in AVX-512 registers: one addition and a carry mask per limb.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn step_avx512<const L: usize>(b: &mut [[[u64; WIDTH]; L]], s: &mut [[[u64; WIDTH]; L]]) {
    use std::arch::x86_64::*;
    for t in [b, s] {
        if t.is_empty() {
            continue;
        }
        // Row `m`'s limbs before the step: loaded once, as the previous row's addend.
        let mut cur: [__m512i; L] = std::array::from_fn(|k| {
            // SAFETY: row 0 exists; a limb row is 8 u64 (64 bytes), unaligned load.
            unsafe { _mm512_loadu_si512(t[0][k].as_ptr().cast()) }
        });
        for m in 0..t.len() - 1 {
            let mut carry = _mm512_setzero_si512();
            for k in 0..L {
                // SAFETY: row `m + 1` exists; a limb row is 64 bytes, unaligned load.
                let next = unsafe { _mm512_loadu_si512(t[m + 1][k].as_ptr().cast()) };
                let sum = _mm512_add_epi64(_mm512_add_epi64(cur[k], next), carry);
                // The carry out of `cur + next + carry` is the top bit of
                // `(cur & next) | ((cur | next) & !sum)` (0xd4: that function of the three).
                let out = _mm512_ternarylogic_epi64::<0xd4>(cur[k], next, sum);
                carry = _mm512_srli_epi64::<63>(out);
                // SAFETY: row `m` exists; a limb row is 64 bytes, unaligned store.
                unsafe { _mm512_storeu_si512(t[m][k].as_mut_ptr().cast(), sum) };
                cur[k] = next;
            }
        }
    }
}

/// The step-8 table of lanes `0..8` from the unit-step table `w` at lane 0's domain.
fn stripe_table<const L: usize>(w: &[Word<L>]) -> Option<Table<L>> {
    let t = coefficients(w.len())?;
    let mut lanes = w.to_vec();
    let mut out = vec![[[0u64; WIDTH]; L]; w.len()];
    for l in 0..WIDTH {
        for (m, row) in t.iter().enumerate() {
            let mut acc = [0u64; L];
            for (r, &c) in row.iter().enumerate().skip(m) {
                fixed::add(&mut acc, &fixed::mul_small(&lanes[r], c));
            }
            for (limb, &v) in out[m].iter_mut().zip(&acc) {
                limb[l] = v;
            }
        }
        unit_step(&mut lanes);
    }
    Some(out)
}

/// `T[m][r]`, the coefficient of `x^r` in `((1 + x)^8 - 1)^m`, for `m, r < len`; `None` where
/// one would not fit in 64 bits (never for `len <= 9`: at most `C(64, 8)`).
fn coefficients(len: usize) -> Option<Vec<Vec<u64>>> {
    if len > 9 {
        return None;
    }
    let step: Vec<u64> = (0..len)
        .map(|r| if r == 0 { 0 } else { binomial8(r) })
        .collect();
    let mut rows = vec![(0..len).map(|r| (r == 0) as u64).collect::<Vec<u64>>()];
    for m in 1..len {
        let prev = &rows[m - 1];
        let mut row = vec![0u64; len];
        for (i, &p) in prev.iter().enumerate() {
            for (j, &s) in step.iter().enumerate().take(len - i) {
                row[i + j] = row[i + j].checked_add(p.checked_mul(s)?)?;
            }
        }
        rows.push(row);
    }
    Some(rows)
}

/// `C(8, r)` (0 beyond 8).
fn binomial8(r: usize) -> u64 {
    [1, 8, 28, 56, 70, 56, 28, 8, 1]
        .get(r)
        .copied()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stripes_walk_the_unit_step_words() {
        let mut next = fixed::test_limbs();
        for len in 1..=9 {
            let wb: Vec<Word<3>> = (0..len).map(|_| [next(), next(), next()]).collect();
            let ws: Vec<Word<3>> = (0..len).map(|_| [next(), next(), next()]).collect();
            let mut stripes = Stripes::new(&wb, &ws).unwrap();
            let (mut ub, mut us) = (wb.clone(), ws.clone());
            for i in 0..400 {
                let (wb, ws) = stripes.words();
                let lane = |w: &[[u64; WIDTH]; 3]| std::array::from_fn(|k| w[k][i % WIDTH]);
                assert_eq!(
                    (lane(&wb), lane(&ws)),
                    (ub[0], us[0]),
                    "len {len}, domain {i}"
                );
                let (mut a, mut b) = ([0u64; WIDTH], [0u64; WIDTH]);
                stripes.test_inputs(&mut a, &mut b);
                assert_eq!(a[i % WIDTH], fixed::neg_floor64(&us[0]));
                assert_eq!(b[i % WIDTH], fixed::ceil64(&ub[0]));
                unit_step(&mut ub);
                unit_step(&mut us);
                if i % WIDTH == WIDTH - 1 {
                    stripes.step();
                }
            }
        }
        assert!(coefficients(10).is_none());
    }
}
