//! The existence tests of phases 1 and 2: is `min_{0 <= x < N} {b - a x} >= E`?
//!
//! `a = A / 2^64`, `b = B / 2^64`, `E` in units of `2^-64`. Both tests answer `true` ("no point
//! below E": the domain holds no HR-case) only when that is certain, and `false` ("maybe")
//! otherwise. They follow `shared/ALGORITHMS.md` section 4 line by line; the brute-force tests
//! below check soundness on random and adversarial inputs. No allocation, no floating point:
//! the same code runs in every CPU lane and is mirrored by the CUDA kernels.

pub mod quadratic;
mod simd;
pub use simd::{regular_lanes, regular_lanes_scalar, simd_available, LANES};

/// Which existence test to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Test {
    /// Lefevre's test (subtraction/division form).
    Lefevre,
    /// The regular test of Fortin, Gouicem and Graillat: one full quotient per iteration.
    Regular,
}

impl Test {
    pub fn name(self) -> &'static str {
        match self {
            Test::Lefevre => "lefevre",
            Test::Regular => "regular",
        }
    }

    #[inline]
    pub fn run(self, a: u64, b: u64, n: u64, e: u64) -> bool {
        match self {
            Test::Lefevre => lefevre(a, b, n, e),
            Test::Regular => regular(a, b, n, e),
        }
    }
}

impl std::str::FromStr for Test {
    type Err = String;
    fn from_str(s: &str) -> Result<Test, String> {
        match s {
            "lefevre" => Ok(Test::Lefevre),
            "regular" => Ok(Test::Regular),
            _ => Err(format!("unknown test '{s}': use regular or lefevre")),
        }
    }
}

/// The exact answer when the `N` points `a x mod 1` do not wrap around the circle (`|a| (N-1)`
/// below 1, with `a` taken in `(-1/2, 1/2]`): the line is then almost flat over the domain and
/// the continued-fraction tests would place far more than `N` points. `None` otherwise.
#[inline]
pub fn flat(a: u64, b: u64, n: u64, e: u64) -> Option<bool> {
    let span = n.saturating_sub(1) as u128;
    if (a as u128) * span < 1u128 << 64 {
        // b - a x decreases from b; it wraps once x exceeds b / a.
        let x = b.checked_div(a).map_or(span, |x| (x as u128).min(span));
        return Some(b as u128 - a as u128 * x >= e as u128);
    }
    let a_neg = a.wrapping_neg() as u128; // b - a x = b + a_neg x mod 2^64
    if a_neg * span < 1u128 << 64 {
        let b = b as u128;
        let mut min = b;
        // the first x whose value wraps past 2^64, if any
        let x_w = ((1u128 << 64) - b).div_ceil(a_neg);
        if x_w <= span {
            min = min.min(b + a_neg * x_w - (1u128 << 64));
        }
        return Some(min >= e as u128);
    }
    None
}

/// Lefevre's test. `p = A`, `q = 2^64 - A` are the two gaps of the three-distance structure of
/// the points `a x mod 1`, `u`, `v` how many points each gap takes to build, `d` the distance
/// from `b` to the nearest point on its left.
#[inline]
pub fn lefevre(a: u64, b: u64, n: u64, e: u64) -> bool {
    if let Some(answer) = flat(a, b, n, e) {
        return answer;
    }
    let mut p = a as u128;
    let mut q = (1u128 << 64) - a as u128;
    let mut d = b as u128;
    let (mut u, mut v) = (1u64, 1u64);
    let e = e as u128;
    let n = n as u128;
    if d < e {
        return false;
    }
    loop {
        if d < p {
            if p == 0 {
                return false;
            }
            // Turns whose quotient q / p is 0 only take q from p once each: the m turns that
            // stay in this branch with k = 0 and end in none of its returns, at once (one by
            // one they cost O(p / q) turns on a large partial quotient). Same states.
            if q < p {
                let uv = u as u128 + v as u128;
                let turns_n = if uv < n {
                    (n - 1 - uv) / u as u128 + 1
                } else {
                    0
                };
                let m = ((p - d - 1) / q + 1).min((p - 1) / q).min(turns_n);
                if m > 0 {
                    p -= m * q;
                    v = v.saturating_add((m as u64).saturating_mul(u));
                    continue;
                }
            }
            let k = q / p;
            q -= k * p;
            u = u.saturating_add((k as u64).saturating_mul(v));
            if u as u128 + v as u128 >= n {
                return true;
            }
            if q == 0 {
                // From here only v grows, by u per turn, with d < p unchanged: the loop would
                // end in the success above. Say it now instead of in O(N / u) turns.
                return true;
            }
            p -= q;
            v = v.saturating_add(u);
        } else {
            // Likewise the turns with p / q = 0: each takes p from d and from q once.
            if p < q {
                let m = ((d - e) / p)
                    .min((q - 1) / p)
                    .min((n - 1).saturating_sub(u as u128) / v as u128);
                if m > 0 {
                    d -= m * p;
                    q -= m * p;
                    u = u.saturating_add((m as u64).saturating_mul(v));
                    continue;
                }
            }
            d -= p;
            if d < e {
                return false;
            }
            if q == 0 {
                return false;
            }
            let k = p / q;
            p -= k * q;
            v = v.saturating_add((k as u64).saturating_mul(u));
            if u as u128 + v as u128 >= n {
                return true;
            }
            if p == 0 {
                // Likewise: only u grows, by v per turn, and d never drops below E again.
                return true;
            }
            q -= p;
            u = u.saturating_add(v);
        }
    }
}

/// `(x / y, x % y)` for `y > 0`, by subtraction when the quotient is below 3 (about 59% of the
/// partial quotients of a random number, by Gauss-Kuzmin), else by one hardware division.
#[inline(always)]
pub(crate) fn divrem(x: u64, y: u64) -> (u64, u64) {
    if x < y {
        return (0, x);
    }
    let r = x - y;
    if r < y {
        return (1, r);
    }
    let r2 = r - y;
    if r2 < y {
        return (2, r2);
    }
    (x / y, x % y)
}

/// The regular test: each iteration consumes one full partial quotient of the continued
/// fraction of `a`, so neighbouring lanes run the same number of iterations. With `p = A`,
/// `u = 1`, `v = 0`, `d = B`, the first step divides `1 = 2^64` by `p`; then each half-step
/// consumes a partial quotient, or only as many steps as bring `u + v` to `N` (the gap
/// structure is the same as after that many single steps of Lefevre's test). A zero divisor
/// means a rational `a` with a short expansion: "maybe".
///
/// Written for the branch predictor. The partial quotients depend on the slope `a`
/// alone, which neighbouring domains share to many bits, so their branches (subtraction for
/// quotients below 3) are predicted along a walk; the offset `d` is new in every domain, so
/// its reductions branch only on the quotient and select the rest without a branch (its
/// reduced quotient is below the partial quotient `k`). The cap on the last quotient is
/// checked by a multiplication and divided only where it applies. Same answers as before
/// (tested against the former code), about 2x faster in phase 1.
#[inline]
pub fn regular(a: u64, b: u64, n: u64, e: u64) -> bool {
    if n >> 32 != 0 {
        return regular_wide(a, b, n, e);
    }
    if let Some(answer) = flat(a, b, n, e) {
        return answer;
    }
    // Not flat, so a != 0. 2^64 = k p + q with 0 <= q < p: q = 2^64 mod p = (2^64 - p) mod p.
    let start = Narrow {
        p: a,
        q: divrem(a.wrapping_neg(), a).1,
        d: divrem(b, a).1,
        u: 1,
        v: 0,
    };
    regular_narrow(start, false, n, e)
}

/// The state of the regular test: the gaps `p`, `q`, the offset `d`, and how many points each
/// gap takes to build, `u` and `v`, counted in `C` ([`Count`]).
#[derive(Debug, Clone, Copy)]
struct Gaps<C> {
    p: u64,
    q: u64,
    d: u64,
    u: C,
    v: C,
}

/// The state where `N < 2^32`: 32-bit counts.
type Narrow = Gaps<u32>;

/// The counts `u`, `v` of the regular test. For `N < 2^32`, `u32`: `u` and `v` stay below `N`
/// (a capped quotient keeps `u + v <= N`, and `k u < m + u` for any quotient within the cap), so
/// nothing saturates and the cap test is one 64-bit product, fewer instructions (the
/// GPU's `regular` does the same). For any `N`, `u64` counts that saturate.
trait Count: Copy {
    /// Whether the count is 0.
    fn is_zero(self) -> bool;
    /// Whether `u + v` reached `N`.
    fn done(u: Self, v: Self, n: u64) -> bool;
    /// `N - u - v`, where `u + v < N`.
    fn rest(n: u64, u: Self, v: Self) -> Self;
    /// Whether the full quotient `k` is at most `ceil(m / w)`, `w >= 1`.
    fn fits(m: Self, w: Self, k: u64) -> bool;
    /// `ceil(m / w)`.
    fn cap(m: Self, w: Self) -> u64;
    /// `x + k w`.
    fn grow(x: Self, k: u64, w: Self) -> Self;
}

impl Count for u32 {
    #[inline(always)]
    fn is_zero(self) -> bool {
        self == 0
    }
    #[inline(always)]
    fn done(u: u32, v: u32, n: u64) -> bool {
        u as u64 + v as u64 >= n
    }
    #[inline(always)]
    fn rest(n: u64, u: u32, v: u32) -> u32 {
        n as u32 - u - v
    }
    /// `k <= m` is necessary since `w >= 1`, then `(k - 1) w < m` is a product below 2^64.
    #[inline(always)]
    fn fits(m: u32, w: u32, k: u64) -> bool {
        k == 0 || (k <= m as u64 && (k - 1) * (w as u64) < m as u64)
    }
    #[inline(always)]
    fn cap(m: u32, w: u32) -> u64 {
        m.div_ceil(w) as u64
    }
    /// `k w < m + w`: below `N`, no overflow.
    #[inline(always)]
    fn grow(x: u32, k: u64, w: u32) -> u32 {
        x + k as u32 * w
    }
}

impl Count for u64 {
    #[inline(always)]
    fn is_zero(self) -> bool {
        self == 0
    }
    #[inline(always)]
    fn done(u: u64, v: u64, n: u64) -> bool {
        u as u128 + v as u128 >= n as u128
    }
    #[inline(always)]
    fn rest(n: u64, u: u64, v: u64) -> u64 {
        n - u - v
    }
    /// `(k - 1) w < m`: one multiplication instead of a division.
    #[inline(always)]
    fn fits(m: u64, w: u64, k: u64) -> bool {
        k == 0 || ((k - 1) as u128 * w as u128) < m as u128
    }
    #[inline(always)]
    fn cap(m: u64, w: u64) -> u64 {
        m.div_ceil(w)
    }
    #[inline(always)]
    fn grow(x: u64, k: u64, w: u64) -> u64 {
        x.saturating_add(k.saturating_mul(w))
    }
}

/// The loop of the regular test from state `s` (at the top of an iteration, or before its
/// second half with `second`), for either width of counts: the same states for both.
#[inline]
fn regular_loop<C: Count>(s: Gaps<C>, second: bool, n: u64, e: u64) -> bool {
    let Gaps {
        mut p,
        mut q,
        mut d,
        mut u,
        mut v,
    } = s;
    let mut skip_first = second;
    loop {
        if !skip_first {
            if C::done(u, v, n) {
                return d >= e;
            }
            if q == 0 {
                return false;
            }
            // The p-gaps split into a p'-gap followed by k q-gaps.
            let m = C::rest(n, u, v);
            let (mut k, rem) = divrem(p, q);
            if C::fits(m, u, k) {
                p = rem;
            } else {
                k = C::cap(m, u);
                p -= k * q;
            }
            v = C::grow(v, k, u);
            // d < p + k q, so where d >= p, (d - p) / q < k.
            if k <= 2 {
                let t = d.wrapping_sub(p);
                let t = if t >= q { t - q } else { t };
                d = if d >= p { t } else { d };
            } else if d >= p {
                d = (d - p) % q;
            }
        }
        skip_first = false;
        if C::done(u, v, n) {
            return d >= e;
        }
        if p == 0 {
            return false;
        }
        // The q-gaps split into k p-gaps followed by a q'-gap; with v = 0 every quotient fits
        // and u does not move.
        let m = C::rest(n, u, v);
        let (mut k, rem) = divrem(q, p);
        if v.is_zero() || C::fits(m, v, k) {
            q = rem;
        } else {
            k = C::cap(m, v);
            q -= k * p;
        }
        u = if v.is_zero() { u } else { C::grow(u, k, v) };
        // d < k p + q: d - k p where that is >= 0, else d mod p, whose quotient is below k.
        let kp = k * p;
        d = if k <= 2 {
            let r = if d >= p { d - p } else { d };
            if d < kp {
                r
            } else {
                d - kp
            }
        } else if d < kp {
            d % p
        } else {
            d - kp
        };
    }
}

/// The loop of the regular test for `N < 2^32` ([`regular_loop`] on 32-bit counts).
#[inline]
fn regular_narrow(s: Narrow, second: bool, n: u64, e: u64) -> bool {
    regular_loop(s, second, n, e)
}

/// The regular test for any `N` (`u`, `v` saturating 64-bit counts): `regular` where
/// `N >= 2^32`.
#[inline]
pub fn regular_wide(a: u64, b: u64, n: u64, e: u64) -> bool {
    if let Some(answer) = flat(a, b, n, e) {
        return answer;
    }
    // Not flat, so a != 0. 2^64 = k p + q with 0 <= q < p: q = 2^64 mod p = (2^64 - p) mod p.
    let start = Gaps {
        p: a,
        q: divrem(a.wrapping_neg(), a).1,
        d: b % a,
        u: 1u64,
        v: 0,
    };
    regular_loop(start, false, n, e)
}

/// splitmix64: the reproducible random slopes and offsets of [`bare_loop`].
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bare loop: the regular test alone on `domains` random slopes and offsets
/// (domains of `n` arguments, threshold `e`), on the calling thread, with no walk, no
/// generation and no other phase: the floor that phase 1 is measured against. The test runs
/// as phase 1 runs it, `LANES` domains at a time ([`regular_lanes`]). Returns how many domains
/// failed, so that the work cannot be optimised away.
pub fn bare_loop(domains: u64, n: u64, e: u64, seed: u64) -> u64 {
    let mut state = seed;
    let mut failed = 0;
    let (mut a, mut b) = ([0u64; LANES], [0u64; LANES]);
    for _ in 0..domains / LANES as u64 {
        for j in 0..LANES {
            a[j] = splitmix(&mut state);
            b[j] = splitmix(&mut state);
        }
        failed += LANES as u64 - regular_lanes(&a, &b, n, e).count_ones() as u64;
    }
    for _ in 0..domains % LANES as u64 {
        let a = splitmix(&mut state);
        let b = splitmix(&mut state);
        failed += !regular(a, b, n, e) as u64;
    }
    failed
}

/// `min_{0 <= x < n} (b - a x) mod 2^64`, by brute force: the reference for the tests.
pub fn brute_force_min(a: u64, b: u64, n: u64) -> u64 {
    (0..n)
        .map(|x| b.wrapping_sub(a.wrapping_mul(x)))
        .min()
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    fn check(a: u64, b: u64, n: u64, e: u64) {
        let truth = brute_force_min(a, b, n) >= e;
        for t in [Test::Lefevre, Test::Regular] {
            let said = t.run(a, b, n, e);
            assert!(
                !said || truth,
                "{}: said 'no point below E' for a={a:#x} b={b:#x} n={n} e={e:#x}, min={:#x}",
                t.name(),
                brute_force_min(a, b, n)
            );
        }
    }

    /// `a` close to a rational with small denominator: huge partial quotients.
    fn adversarial_a(rng: &mut impl Rng) -> u64 {
        let den = rng.gen_range(1u64..64);
        let num = rng.gen_range(0..den);
        let base = ((num as u128) << 64) / den as u128;
        let spread = rng.gen_range(0..40);
        let jitter = rng.gen_range(-(1i64 << spread)..=(1i64 << 20));
        (base as i128 + jitter as i128).rem_euclid(1i128 << 64) as u64
    }

    #[test]
    fn both_tests_are_sound_on_random_and_adversarial_inputs() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x7d_2016);
        for i in 0..300_000u32 {
            let n = match i % 4 {
                0 => rng.gen_range(1..16),
                1 => rng.gen_range(16..512),
                2 => 1 << rng.gen_range(1..12),
                _ => rng.gen_range(512..4096),
            };
            let a = match i % 5 {
                0 => rng.gen(),
                1 => adversarial_a(&mut rng),
                2 => rng.gen_range(0..1 << 20),
                3 => u64::MAX - rng.gen_range(0..1 << 20),
                _ => {
                    let s = rng.gen_range(0..63);
                    rng.gen::<u64>() >> s
                }
            };
            let b = match i % 3 {
                0 => rng.gen(),
                1 => rng.gen_range(0..1 << 30),
                _ => u64::MAX - rng.gen_range(0..1 << 30),
            };
            // A threshold around the true minimum, where a wrong answer would show.
            let m = brute_force_min(a, b, n);
            let e = match i % 4 {
                0 => m,
                1 => m.saturating_add(1),
                2 => m.saturating_sub(rng.gen_range(0..1000)),
                _ => {
                    let s = rng.gen_range(0..64);
                    rng.gen::<u64>() >> s
                }
            };
            check(a, b, n, e);
        }
    }

    #[test]
    fn the_tests_succeed_where_the_answer_is_clear() {
        // a = golden ratio fraction: well spread points; a small threshold must pass.
        let a = 0x9e37_79b9_7f4a_7c15u64;
        let n = 1024;
        let mut passed = [0u32; 2];
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for _ in 0..1000 {
            let b: u64 = rng.gen();
            // Below the minimum over 4N points, which covers every point either test places.
            let e = brute_force_min(a, b, 4 * n);
            for (i, t) in [Test::Lefevre, Test::Regular].iter().enumerate() {
                if t.run(a, b, n, e) {
                    passed[i] += 1;
                }
            }
        }
        assert_eq!(
            passed,
            [1000, 1000],
            "a clear 'no point below E' was refused"
        );
    }

    #[test]
    fn flat_lines_are_answered_exactly() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(77);
        for _ in 0..20_000 {
            let n = rng.gen_range(1..4096u64);
            let lim = u64::MAX / n.max(2);
            let a = if rng.gen() {
                rng.gen_range(0..lim)
            } else {
                0u64.wrapping_sub(rng.gen_range(0..lim))
            };
            let b: u64 = rng.gen();
            let m = brute_force_min(a, b, n);
            for e in [m, m.saturating_add(1)] {
                assert_eq!(flat(a, b, n, e), Some(m >= e), "a={a:#x} b={b:#x} n={n}");
                assert_eq!(regular(a, b, n, e), m >= e);
                assert_eq!(lefevre(a, b, n, e), m >= e);
            }
        }
    }

    /// The regular test as it was first written (quotients below 3 by subtraction,
    /// a division for the cap on every half-step): the answers must not change.
    fn regular_before(a: u64, b: u64, n: u64, e: u64) -> bool {
        fn divrem(x: u64, y: u64) -> (u64, u64) {
            if x < y {
                return (0, x);
            }
            let r = x - y;
            if r < y {
                return (1, r);
            }
            let r2 = r - y;
            if r2 < y {
                return (2, r2);
            }
            (x / y, x % y)
        }
        if let Some(answer) = flat(a, b, n, e) {
            return answer;
        }
        let mut p = a;
        let r = divrem(u64::MAX, a).1 + 1;
        let mut q = if r == a { 0 } else { r };
        let mut d = divrem(b, a).1;
        let (mut u, mut v) = (1u64, 0u64);
        let done = |u: u64, v: u64| u as u128 + v as u128 >= n as u128;
        loop {
            if done(u, v) {
                return d >= e;
            }
            if q == 0 {
                return false;
            }
            let (k_full, rem) = divrem(p, q);
            let k_need = (n - u - v).div_ceil(u);
            let k = if k_full <= k_need {
                p = rem;
                k_full
            } else {
                p -= k_need * q;
                k_need
            };
            v = v.saturating_add(k.saturating_mul(u));
            if d >= p {
                d = divrem(d - p, q).1;
            }
            if done(u, v) {
                return d >= e;
            }
            if p == 0 {
                return false;
            }
            let (k_full, rem) = divrem(q, p);
            let k_need = (n - u - v).div_ceil(v);
            let k = if k_full <= k_need {
                q = rem;
                k_full
            } else {
                q -= k_need * p;
                k_need
            };
            u = u.saturating_add(k.saturating_mul(v));
            d = if d < k * p { divrem(d, p).1 } else { d - k * p };
        }
    }

    /// Lefevre's test as first written: every turn one by one, zero quotients included.
    #[allow(clippy::all)]
    fn lefevre_turn_by_turn(a: u64, b: u64, n: u64, e: u64) -> bool {
        if let Some(answer) = flat(a, b, n, e) {
            return answer;
        }
        let mut p = a as u128;
        let mut q = (1u128 << 64) - a as u128;
        let mut d = b as u128;
        let (mut u, mut v) = (1u64, 1u64);
        let e = e as u128;
        let n = n as u128;
        if d < e {
            return false;
        }
        loop {
            if d < p {
                if p == 0 {
                    return false;
                }
                let k = q / p;
                q -= k * p;
                u = u.saturating_add((k as u64).saturating_mul(v));
                if u as u128 + v as u128 >= n {
                    return true;
                }
                if q == 0 {
                    // From here only v grows, by u per turn, with d < p unchanged: the loop would
                    // end in the success above. Say it now instead of in O(N / u) turns.
                    return true;
                }
                p -= q;
                v = v.saturating_add(u);
            } else {
                d -= p;
                if d < e {
                    return false;
                }
                if q == 0 {
                    return false;
                }
                let k = p / q;
                p -= k * q;
                v = v.saturating_add((k as u64).saturating_mul(u));
                if u as u128 + v as u128 >= n {
                    return true;
                }
                if p == 0 {
                    // Likewise: only u grows, by v per turn, and d never drops below E again.
                    return true;
                }
                q -= p;
                u = u.saturating_add(v);
            }
        }
    }

    /// The turns with a zero quotient taken at once give the same answers as one by
    /// one, on random and adversarial inputs (near-rational slopes: large partial quotients).
    #[test]
    fn lefevres_test_answers_as_turn_by_turn() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(26);
        for i in 0..400_000u32 {
            let a = match i % 4 {
                0 => adversarial_a(&mut rng),
                1 => rng.gen::<u64>() >> rng.gen_range(0..64),
                2 => u64::MAX - rng.gen_range(0..1 << 24),
                _ => rng.gen(),
            };
            let b: u64 = rng.gen();
            let n = match i % 3 {
                0 => rng.gen_range(1..64),
                1 => 1 << rng.gen_range(1..16),
                _ => rng.gen_range(1..1 << 20),
            };
            let e = match i % 2 {
                0 => rng.gen::<u64>() >> rng.gen_range(8..64),
                _ => brute_force_min(a, b, n.min(4096)).saturating_add(rng.gen_range(0..3)),
            };
            assert_eq!(
                lefevre(a, b, n, e),
                lefevre_turn_by_turn(a, b, n, e),
                "a={a:#x} b={b:#x} n={n} e={e:#x}"
            );
        }
    }

    #[test]
    fn the_regular_test_answers_as_before_issue_15() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(15);
        for i in 0..400_000u32 {
            let a = match i % 4 {
                0 => adversarial_a(&mut rng),
                1 => rng.gen::<u64>() >> rng.gen_range(0..64),
                2 => u64::MAX - rng.gen_range(0..1 << 24),
                _ => rng.gen(),
            };
            let b: u64 = rng.gen();
            let n = match i % 3 {
                0 => rng.gen_range(1..64),
                1 => 1 << rng.gen_range(1..16),
                _ => rng.gen_range(1..1 << 20),
            };
            let e = match i % 2 {
                0 => rng.gen::<u64>() >> rng.gen_range(8..64),
                _ => brute_force_min(a, b, n.min(4096)).saturating_add(rng.gen_range(0..3)),
            };
            let before = regular_before(a, b, n, e);
            assert_eq!(
                regular(a, b, n, e),
                before,
                "a={a:#x} b={b:#x} n={n} e={e:#x}"
            );
            // The loop on 64-bit counts holds for any N: the same answers here too.
            assert_eq!(
                regular_wide(a, b, n, e),
                before,
                "a={a:#x} b={b:#x} n={n} e={e:#x}"
            );
        }
    }

    #[test]
    fn the_bare_loop_fails_as_often_as_the_test_says() {
        // Same inputs, same count; and with a threshold of 0 nothing fails.
        let (n, e) = (1 << 10, 1 << 50);
        let mut state = 9u64;
        let mut want = 0;
        for _ in 0..5000 {
            let a = splitmix(&mut state);
            let b = splitmix(&mut state);
            want += !regular(a, b, n, e) as u64;
        }
        assert_eq!(bare_loop(5000, n, e, 9), want);
        assert!(want > 0);
        assert_eq!(bare_loop(5000, n, 0, 9), 0);
    }

    #[test]
    fn lefevre_ends_at_once_on_rational_slopes_with_huge_n() {
        // a = 2^64 / 3 exactly (rounded): q reaches 0 early; N = 2^40 must not take 2^40 turns.
        let t = std::time::Instant::now();
        for (a, b) in [
            (1u64 << 62, 12345u64),
            (3u64 << 61, 1 << 40),
            (1u64 << 63 | 1 << 62, 99),
        ] {
            let _ = lefevre(a, b, 1 << 40, 1);
            for n in [2u64, 17, 1000, 4096] {
                check(a, b, n, 1);
                check(a, b, n, brute_force_min(a, b, n));
            }
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn degenerate_slopes() {
        for n in [1, 2, 100] {
            check(0, 5, n, 6);
            check(0, 5, n, 5);
            check(1 << 63, 5, n, 3);
            check(u64::MAX, 0, n, 1);
        }
        assert!(!lefevre(0, 5, 10, 6) && lefevre(0, 5, 10, 5));
        assert!(!regular(0, 5, 10, 6) && regular(0, 5, 10, 5));
    }

    proptest! {
        #[test]
        fn soundness_property(a: u64, b: u64, n in 1u64..2048, e: u64) {
            check(a, b, n, e);
        }

        #[test]
        fn soundness_near_the_minimum(a: u64, b: u64, n in 1u64..2048, delta in 0u64..64) {
            let m = brute_force_min(a, b, n);
            check(a, b, n, m.saturating_add(delta));
            check(a, b, n, m.saturating_sub(delta));
        }
    }
}
