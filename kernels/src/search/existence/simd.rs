//! The regular test on `LANES` domains at once: AVX-512 lanes where the CPU has them, the scalar test elsewhere.
//!
//! Same answers as [`super::regular`] for every input (docs/error-analysis.md §6): each lane
//! runs the scalar test's states, one half-step per vector step; a partial quotient is found by
//! a floating-point estimate rounded towards zero (never above the true quotient, so `k q <= p`
//! without overflow) and one exact correction. Lanes whose quotient reaches `2^40` (where one
//! correction might not suffice) leave the vector loop and finish on the scalar loop from their
//! exact state; lanes the flat-line shortcut answers, and calls with `N < 2` or `N >= 2^32`,
//! run the scalar test from the start.

use super::regular;

/// Groups of 8 lanes interleaved in one vector loop: each half-step is a chain of about 40
/// cycles of latency (conversion, division, products), so two independent groups keep the
/// vector units busy.
const GROUPS: usize = 2;

/// Domains tested per call of [`regular_lanes`].
pub const LANES: usize = 8 * GROUPS;

/// Whether [`regular_lanes`] runs vector code here: an x86_64 CPU with AVX-512F and DQ, and
/// `TMD_CPU_SIMD` not set to `0` (the switch lets the same binary be timed without it).
pub fn simd_available() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let wanted = std::env::var("TMD_CPU_SIMD").map_or(true, |v| v != "0");
        wanted && detected()
    })
}

#[cfg(target_arch = "x86_64")]
fn detected() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512dq")
}

#[cfg(not(target_arch = "x86_64"))]
fn detected() -> bool {
    false
}

/// The regular test on `LANES` domains of the same length `n` and threshold `e`: bit `j` of
/// the answer is `regular(a[j], b[j], n, e)`.
pub fn regular_lanes(a: &[u64; LANES], b: &[u64; LANES], n: u64, e: u64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if n >= 2 && n >> 32 == 0 && simd_available() {
        // SAFETY: AVX-512F and DQ were detected at run time (`simd_available`).
        return unsafe { x86::regular_lanes(a, b, n, e) };
    }
    regular_lanes_scalar(a, b, n, e)
}

/// [`regular_lanes`] lane by lane with the scalar test.
pub fn regular_lanes_scalar(a: &[u64; LANES], b: &[u64; LANES], n: u64, e: u64) -> u32 {
    (0..LANES).fold(0, |m, j| m | (regular(a[j], b[j], n, e) as u32) << j)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::{flat, regular_narrow, Narrow};
    use super::{GROUPS, LANES};
    use std::arch::x86_64::*;

    const RZ: i32 = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
    const RU: i32 = _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC;
    /// Quotients estimated at or above this leave the vector loop: below it one correction is
    /// enough (the estimate is within `1 + 2^-50 x / y` below `x / y`).
    const BIG: f64 = (1u64 << 40) as f64;

    /// Eight lanes of the scalar test's state (`u`, `v` below `2^32` in 64-bit lanes), with
    /// masks: still in the loop, answered "no point below E", left for the scalar loop (and
    /// whether before a second half-step).
    #[derive(Clone, Copy)]
    struct Group {
        p: __m512i,
        q: __m512i,
        d: __m512i,
        u: __m512i,
        v: __m512i,
        active: __mmask8,
        pass: __mmask8,
        out: __mmask8,
        out_second: __mmask8,
    }

    /// `fl(1 / y)` rounded so that it is at most `1 / y` (`y` rounded up, then the quotient
    /// towards zero).
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn recip(y: __m512i) -> __m512d {
        let yf = _mm512_cvt_roundepu64_pd::<RU>(y);
        _mm512_div_round_pd::<RZ>(_mm512_set1_pd(1.0), yf)
    }

    /// An estimate of `x / y` from `r = recip(y)`, at most `x / y`: `x` and the product rounded
    /// towards zero.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn estimate(x: __m512i, r: __m512d) -> __m512d {
        _mm512_mul_round_pd::<RZ>(_mm512_cvt_roundepu64_pd::<RZ>(x), r)
    }

    /// `x mod y` where the estimate `z` of `x / y` is at most the quotient and at most one
    /// below it, with the quotient: `k y <= x` does not overflow, one correction.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn divrem(x: __m512i, y: __m512i, z: __m512d) -> (__m512i, __m512i) {
        let k = _mm512_cvttpd_epu64(z);
        let rem = _mm512_sub_epi64(x, _mm512_mullo_epi64(k, y));
        let over = _mm512_cmpge_epu64_mask(rem, y);
        (
            _mm512_mask_add_epi64(k, over, k, _mm512_set1_epi64(1)),
            _mm512_mask_sub_epi64(rem, over, rem, y),
        )
    }

    /// `ceil(m / w)` for `m, w < 2^32`, `w >= 1`: the correctly rounded quotient is exact or
    /// strictly between the same two integers as `m / w` (its error is below `1 / w`), so
    /// rounding it up is exact.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn div_ceil(m: __m512i, w: __m512i) -> __m512i {
        let qf = _mm512_div_pd(_mm512_cvtepu64_pd(m), _mm512_cvtepu64_pd(w));
        _mm512_cvt_roundpd_epu64::<RU>(qf)
    }

    /// The lanes of `k` that pass the cap test `fits_cap(m, w, k)`: `k == 0`, or `k <= m` and
    /// `(k - 1) w < m` (a product below `2^64` where `k <= m`).
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn fits_cap(m: __m512i, w: __m512i, k: __m512i) -> __mmask8 {
        let prod = _mm512_mullo_epi64(_mm512_sub_epi64(k, _mm512_set1_epi64(1)), w);
        _mm512_testn_epi64_mask(k, k)
            | (_mm512_cmple_epu64_mask(k, m) & _mm512_cmplt_epu64_mask(prod, m))
    }

    /// The checks at the top of a half-step: lanes with `u + v >= N` answer `d >= E`, lanes
    /// whose divisor `y` is 0 answer "maybe"; both leave the loop.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn top(g: &mut Group, y: __m512i, n: __m512i, e: __m512i) {
        let s = _mm512_add_epi64(g.u, g.v);
        let done = _mm512_mask_cmpge_epu64_mask(g.active, s, n);
        g.pass |= _mm512_mask_cmpge_epu64_mask(done, g.d, e);
        g.active &= !done;
        g.active &= !_mm512_mask_testn_epi64_mask(g.active, y, y);
    }

    /// The first half-step after `top`: `k = p / q` (capped), `p -= k q`, `v += k u`, and where
    /// `d >= p`, `d = (d - p) mod q` (a quotient below `k`).
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn first(g: &mut Group, n: __m512i) {
        let r = recip(g.q);
        let z = estimate(g.p, r);
        let big = _mm512_mask_cmp_pd_mask::<_CMP_GE_OQ>(g.active, z, _mm512_set1_pd(BIG));
        g.out |= big;
        g.active &= !big;
        let (mut k, mut rem) = divrem(g.p, g.q, z);
        let m = _mm512_sub_epi64(n, _mm512_add_epi64(g.u, g.v));
        let capped = g.active & !fits_cap(m, g.u, k);
        if capped != 0 {
            let kc = div_ceil(m, g.u);
            k = _mm512_mask_mov_epi64(k, capped, kc);
            rem = _mm512_mask_sub_epi64(rem, capped, g.p, _mm512_mullo_epi64(kc, g.q));
        }
        g.p = _mm512_mask_mov_epi64(g.p, g.active, rem);
        g.v = _mm512_mask_add_epi64(g.v, g.active, g.v, _mm512_mullo_epi64(k, g.u));
        let reduce = _mm512_mask_cmpge_epu64_mask(g.active, g.d, g.p);
        let t = _mm512_sub_epi64(g.d, g.p);
        let (_, t) = divrem(t, g.q, estimate(t, r));
        g.d = _mm512_mask_mov_epi64(g.d, reduce, t);
    }

    /// The second half-step after `top`: `k = q / p` (capped; every quotient fits where
    /// `v = 0`), `q -= k p`, `u += k v`, then `d - k p` where that is not negative, else
    /// `d mod p` (a quotient below `k`).
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn second(g: &mut Group, n: __m512i) {
        let r = recip(g.p);
        let z = estimate(g.q, r);
        let big = _mm512_mask_cmp_pd_mask::<_CMP_GE_OQ>(g.active, z, _mm512_set1_pd(BIG));
        g.out |= big;
        g.out_second |= big;
        g.active &= !big;
        let (mut k, mut rem) = divrem(g.q, g.p, z);
        let m = _mm512_sub_epi64(n, _mm512_add_epi64(g.u, g.v));
        let fits = _mm512_testn_epi64_mask(g.v, g.v) | fits_cap(m, g.v, k);
        let capped = g.active & !fits;
        if capped != 0 {
            let kc = div_ceil(m, g.v);
            k = _mm512_mask_mov_epi64(k, capped, kc);
            rem = _mm512_mask_sub_epi64(rem, capped, g.q, _mm512_mullo_epi64(kc, g.p));
        }
        g.q = _mm512_mask_mov_epi64(g.q, g.active, rem);
        g.u = _mm512_mask_add_epi64(g.u, g.active, g.u, _mm512_mullo_epi64(k, g.v));
        let kp = _mm512_mullo_epi64(k, g.p);
        let below = _mm512_mask_cmplt_epu64_mask(g.active, g.d, kp);
        let (_, dm) = divrem(g.d, g.p, estimate(g.d, r));
        g.d = _mm512_mask_sub_epi64(g.d, g.active & !below, g.d, kp);
        g.d = _mm512_mask_mov_epi64(g.d, below, dm);
    }

    /// Whether any group still has lanes in the loop.
    #[inline(always)]
    fn any_active(gs: &[Group; GROUPS]) -> bool {
        gs.iter().any(|g| g.active != 0)
    }

    /// See [`super::regular_lanes`]; `2 <= n < 2^32`.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) fn regular_lanes(a: &[u64; LANES], b: &[u64; LANES], n: u64, e: u64) -> u32 {
        let span = n - 1;
        let lim = _mm512_set1_epi64((u64::MAX / span) as i64);
        let nv = _mm512_set1_epi64(n as i64);
        let ev = _mm512_set1_epi64(e as i64);
        let mut gs = [0usize; GROUPS].map(|_| Group {
            p: _mm512_setzero_si512(),
            q: _mm512_setzero_si512(),
            d: _mm512_setzero_si512(),
            u: _mm512_setzero_si512(),
            v: _mm512_setzero_si512(),
            active: 0,
            pass: 0,
            out: 0,
            out_second: 0,
        });
        let mut flat_lanes = 0u32;
        for (i, g) in gs.iter_mut().enumerate() {
            // SAFETY: `a[8 i..8 i + 8]` and `b[8 i..8 i + 8]` are in bounds (`i < GROUPS`,
            // `LANES = 8 GROUPS`); unaligned loads.
            let (av, bv) = unsafe {
                (
                    _mm512_loadu_si512(a[8 * i..].as_ptr().cast()),
                    _mm512_loadu_si512(b[8 * i..].as_ptr().cast()),
                )
            };
            // Flat where `a (N-1) < 2^64` or `(2^64 - a) (N-1) < 2^64`: `a <= (2^64-1) / (N-1)`.
            let neg = _mm512_sub_epi64(_mm512_setzero_si512(), av);
            let flat = _mm512_cmple_epu64_mask(av, lim) | _mm512_cmple_epu64_mask(neg, lim);
            flat_lanes |= (flat as u32) << (8 * i);
            // Not flat: a > 2^64 / 2^32, so both quotients below are below 2^32.
            let r = recip(av);
            let (_, q) = divrem(neg, av, estimate(neg, r));
            let (_, d) = divrem(bv, av, estimate(bv, r));
            *g = Group {
                p: av,
                q,
                d,
                u: _mm512_set1_epi64(1),
                v: _mm512_setzero_si512(),
                active: !flat,
                pass: 0,
                out: 0,
                out_second: 0,
            };
        }
        loop {
            for g in gs.iter_mut() {
                top(g, g.q, nv, ev);
            }
            if !any_active(&gs) {
                break;
            }
            for g in gs.iter_mut() {
                first(g, nv);
            }
            for g in gs.iter_mut() {
                top(g, g.p, nv, ev);
            }
            if !any_active(&gs) {
                break;
            }
            for g in gs.iter_mut() {
                second(g, nv);
            }
        }
        let mut pass = 0u32;
        for (i, g) in gs.iter().enumerate() {
            pass |= (g.pass as u32) << (8 * i);
            if g.out == 0 {
                continue;
            }
            let mut s = [[0u64; 8]; 5];
            for (lane, v) in s.iter_mut().zip([g.p, g.q, g.d, g.u, g.v]) {
                // SAFETY: `lane` is 8 u64, 64 bytes; unaligned store.
                unsafe { _mm512_storeu_si512(lane.as_mut_ptr().cast(), v) };
            }
            for j in (0..8).filter(|j| g.out >> j & 1 != 0) {
                let state = Narrow {
                    p: s[0][j],
                    q: s[1][j],
                    d: s[2][j],
                    u: s[3][j] as u32,
                    v: s[4][j] as u32,
                };
                let second = g.out_second >> j & 1 != 0;
                pass |= (regular_narrow(state, second, n, e) as u32) << (8 * i + j);
                #[cfg(test)]
                super::tests::count_out(second);
            }
        }
        for j in (0..LANES).filter(|j| flat_lanes >> j & 1 != 0) {
            // The flat shortcut answers exactly where it applies, as in `regular`.
            if let Some(answer) = flat(a[j], b[j], n, e) {
                pass |= (answer as u32) << j;
            }
        }
        pass
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::{brute_force_min, regular};
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Lanes that left the vector loop for the scalar one, before a first and a second
    /// half-step: the tests check that both paths were taken.
    static OUT: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

    #[allow(dead_code)]
    pub(super) fn count_out(second: bool) {
        OUT[second as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn check(a: &[u64; LANES], b: &[u64; LANES], n: u64, e: u64) {
        let got = regular_lanes(a, b, n, e);
        for j in 0..LANES {
            assert_eq!(
                got >> j & 1 != 0,
                regular(a[j], b[j], n, e),
                "lane {j}: a={:#x} b={:#x} n={n} e={e:#x}",
                a[j],
                b[j]
            );
        }
    }

    /// `a` near `num / den`: huge partial quotients, lanes that leave the vector loop.
    fn near_rational(rng: &mut impl Rng) -> u64 {
        let den = rng.gen_range(1u64..200);
        let num = rng.gen_range(0..=den);
        let base = ((num as u128) << 64) / den as u128;
        let (below, above) = (rng.gen_range(0..50), rng.gen_range(0..50));
        let jitter = rng.gen_range(-(1i64 << below)..=1 << above);
        (base as i128 + jitter as i128).rem_euclid(1i128 << 64) as u64
    }

    fn slope(rng: &mut impl Rng, kind: u32) -> u64 {
        match kind % 6 {
            0 => rng.gen(),
            1 => near_rational(rng),
            2 => rng.gen::<u64>() >> rng.gen_range(0..64),
            3 => u64::MAX - (rng.gen::<u64>() >> rng.gen_range(0..64)),
            4 => rng.gen_range(0..4),
            _ => (rng.gen::<u64>() >> rng.gen_range(0..64)).wrapping_neg(),
        }
    }

    #[test]
    fn the_lanes_answer_as_the_scalar_test() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x51_3d);
        for i in 0..60_000u32 {
            let n = match i % 7 {
                0 => rng.gen_range(0..16),
                1 => rng.gen_range(16..4096),
                2 => 1 << rng.gen_range(1..32),
                3 => (1u64 << 32) - rng.gen_range(1..1000),
                4 => (1u64 << 32) + rng.gen_range(0..1000),
                5 => rng.gen::<u64>() >> rng.gen_range(0..64),
                _ => 1 << 15,
            };
            // Neighbouring slopes as along a walk, or unrelated lanes.
            let base = slope(&mut rng, i / 7);
            let walk = i % 2 == 0;
            let step = rng.gen::<u64>() >> rng.gen_range(20..64);
            let a: [u64; LANES] = std::array::from_fn(|j| {
                if walk {
                    base.wrapping_add(step.wrapping_mul(j as u64))
                } else {
                    slope(&mut rng, i / 7 + j as u32)
                }
            });
            let b: [u64; LANES] = std::array::from_fn(|_| match rng.gen_range(0..4) {
                0 => rng.gen(),
                1 => rng.gen_range(0..1 << 20),
                2 => u64::MAX - rng.gen_range(0..1 << 20),
                _ => 0,
            });
            let e = match i % 5 {
                0 => 0,
                1 => u64::MAX,
                2 => rng.gen::<u64>() >> rng.gen_range(0..64),
                3 if n > 0 && n <= 4096 => {
                    brute_force_min(a[0], b[0], n).saturating_add(rng.gen_range(0..2))
                }
                _ => rng.gen(),
            };
            check(&a, &b, n, e);
        }
        if simd_available() {
            let out = [0, 1].map(|s| OUT[s].load(Ordering::Relaxed));
            assert!(
                out[0] > 0 && out[1] > 0,
                "lanes left the vector loop before first / second half-steps: {out:?}"
            );
        }
    }

    #[test]
    fn the_lanes_answer_as_the_scalar_test_in_a_phase_one_like_walk() {
        // Slopes of neighbouring domains differ by about 2^-36, offsets are unrelated; a
        // threshold of the phase's size.
        let mut rng = rand::rngs::StdRng::seed_from_u64(36);
        for _ in 0..20_000 {
            let a0: u64 = if rng.gen() {
                rng.gen()
            } else {
                near_rational(&mut rng)
            };
            let da = rng.gen_range(1u64 << 26..1 << 30);
            let a: [u64; LANES] =
                std::array::from_fn(|j| a0.wrapping_add(da.wrapping_mul(j as u64)));
            let b: [u64; LANES] = std::array::from_fn(|_| rng.gen());
            check(&a, &b, 1 << 15, rng.gen_range(1 << 40..1 << 52));
        }
    }

    #[test]
    fn the_lanes_are_sound_against_brute_force() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        for i in 0..3_000u32 {
            let n = rng.gen_range(2..1024);
            let a: [u64; LANES] = std::array::from_fn(|j| slope(&mut rng, i + j as u32));
            let b: [u64; LANES] = std::array::from_fn(|_| rng.gen());
            let e = brute_force_min(a[0], b[0], n);
            let got = regular_lanes(&a, &b, n, e);
            for j in 0..LANES {
                if got >> j & 1 != 0 {
                    assert!(brute_force_min(a[j], b[j], n) >= e, "lane {j}");
                }
            }
        }
    }

    #[test]
    fn the_scalar_lanes_are_the_scalar_test() {
        let a: [u64; LANES] = std::array::from_fn(|j| 0x9e37_79b9_7f4a_7c15 * (j as u64 + 1));
        let b: [u64; LANES] = std::array::from_fn(|j| 0x1234_5678_9abc_def0 ^ j as u64);
        let want = regular_lanes_scalar(&a, &b, 1000, 1 << 50);
        assert_eq!(regular_lanes(&a, &b, 1000, 1 << 50), want);
    }

    proptest! {
        #[test]
        fn lanes_property(
            a in proptest::array::uniform16(any::<u64>()),
            b in proptest::array::uniform16(any::<u64>()),
            n in 0u64..1 << 33,
            e: u64,
        ) {
            check(&a, &b, n, e);
        }

        #[test]
        fn lanes_property_near_rationals(
            num in 0u64..64, den in 1u64..64, jit in proptest::array::uniform16(any::<i32>()),
            b in proptest::array::uniform16(any::<u64>()),
            n in 2u64..1 << 20,
            e in 0u64..1 << 60,
        ) {
            let base = ((num.min(den) as u128) << 64) / den as u128;
            let a: [u64; LANES] = std::array::from_fn(|j| (base as u64).wrapping_add(jit[j] as u64));
            check(&a, &b, n, e);
        }
    }
}
