//! Phase 1's quadratic screen (issue 26): where `f` is steep, a domain's line leaves a residual
//! too wide for the line test alone, so the screen lists the few arguments whose line value lies
//! within the line's threshold and checks each against the domain's quadratic.
//!
//! The arguments `x < N` with `y(x) = (B - A x) mod 2^64 < E` are found in order from one of
//! them by the three-gap structure of return times (Slater): from a hit `y`, the next one is
//! `g_down` steps on (moving `y` down by `d_down`) if `y >= d_down`, `g_up` steps on (up by
//! `d_up`) if `y + d_up < E`, the nearer where both are, else `g_down + g_up`. `g_down` is the
//! least `g >= 1` with `A g mod 2^64` in `(0, E)` and `g_up` the least with `-A g mod 2^64` in
//! `(0, E)`: the subtractive continued fraction of Lefevre's test passes through every one-sided
//! record of `A g mod 2^64` (the three-distance structure), so both are read off its states. The
//! first hit is the point where Lefevre's test would answer "maybe". Integer arithmetic only,
//! mirrored by `tmd_quadratic_screen` in `kernels/cuda/tmd.cu`; docs/error-analysis.md §16.

use super::flat;

/// Hits beyond which a domain is handed to phase 2 without checking the rest.
pub const MAX_HITS: u32 = 64;

/// A return gap: `g` steps move `y` by `disp` (down for `g_down`, up for `g_up`); `g = u64::MAX`
/// where no such step is shorter than the domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub g: u64,
    pub disp: u64,
}

const NONE: Gap = Gap {
    g: u64::MAX,
    disp: 0,
};

/// Records the first state of a gap below `e`: `gap` becomes `(index, value)` of the first of
/// the `k` single steps `value -= step, index += w` that takes `value` below `e`.
#[inline(always)]
fn record(gap: &mut Gap, value: u64, index: u64, step: u64, w: u64, k: u64, e: u64) {
    if gap.g != u64::MAX || value.saturating_sub(k.saturating_mul(step)) >= e {
        return;
    }
    // value >= e here (else the gap was recorded when value was reached); the least j with
    // value - j step < e is (value - e) / step + 1 <= k.
    let j = (value - e) / step + 1;
    gap.g = index.saturating_add(j.saturating_mul(w));
    gap.disp = value - j * step;
}

/// What the continued fraction found: a first hit `(x, y)` and the return gaps, or an answer.
enum Start {
    Clear,
    Fail,
    Hit { x: u64, y: u64, down: Gap, up: Gap },
}

/// Lefevre's test (`super::lefevre`, the same states) with the index `x` of `d`, continued after
/// its first point below `e` until both return gaps are known or reach `n`.
fn start(a: u64, b: u64, n: u64, e: u64) -> Start {
    // Not flat, so 0 < a: q = 2^64 - a fits.
    let (mut p, mut q) = (a, a.wrapping_neg());
    let (mut u, mut v) = (1u64, 1u64);
    let (mut d, mut x) = (b, 0u64);
    let mut down = NONE;
    let mut up = NONE;
    if p < e {
        down = Gap { g: 1, disp: p };
    }
    if q < e {
        up = Gap { g: 1, disp: q };
    }
    let mut hit = d < e;
    while !hit {
        if d < p {
            if p == 0 {
                return Start::Fail;
            }
            // Turns whose quotient q / p is 0 only subtract q from p once each: take the m
            // that stay in this branch with k = 0 and end in none of its returns at once, as
            // Lefevre's loop would one by one (it takes O(p / q) turns on a large partial
            // quotient).
            if q < p {
                // (The turn's check u + v >= n comes before its v += u.)
                let turns_n = match u.saturating_add(v) < n {
                    true => (n - 1 - u - v) / u + 1,
                    false => 0,
                };
                let m = ((p - d - 1) / q + 1).min((p - 1) / q).min(turns_n);
                if m > 0 {
                    record(&mut down, p, v, q, u, m, e);
                    p -= m * q;
                    v += m * u;
                    continue;
                }
            }
            let k = q / p;
            record(&mut up, q, u, p, v, k, e);
            q -= k * p;
            u = u.saturating_add(k.saturating_mul(v));
            if u.saturating_add(v) >= n || q == 0 {
                return Start::Clear;
            }
            p -= q;
            v = v.saturating_add(u);
            record(&mut down, p + q, v - u, q, u, 1, e);
        } else {
            // Likewise the turns with p / q = 0: each takes p from d and from q once.
            if p < q {
                let m = ((d - e) / p)
                    .min((q - 1) / p)
                    .min((n - 1).saturating_sub(u) / v);
                if m > 0 {
                    record(&mut up, q, u, p, v, m, e);
                    d -= m * p;
                    x = x.saturating_add(m * v);
                    q -= m * p;
                    u += m * v;
                    continue;
                }
            }
            d -= p;
            x = x.saturating_add(v);
            if d < e {
                hit = true;
                break;
            }
            if q == 0 {
                return Start::Fail;
            }
            let k = p / q;
            record(&mut down, p, v, q, u, k, e);
            p -= k * q;
            v = v.saturating_add(k.saturating_mul(u));
            if u.saturating_add(v) >= n || p == 0 {
                return Start::Clear;
            }
            q -= p;
            u = u.saturating_add(v);
            record(&mut up, q + p, u - v, p, v, 1, e);
        }
    }
    debug_assert!(hit);
    // The gaps not yet below e: the same reductions, the larger by the smaller.
    while (down.g == u64::MAX || up.g == u64::MAX) && u.saturating_add(v) < n {
        if p == 0 || q == 0 {
            return Start::Fail;
        }
        if p >= q {
            let k = p / q;
            record(&mut down, p, v, q, u, k, e);
            p -= k * q;
            v = v.saturating_add(k.saturating_mul(u));
        } else {
            let k = q / p;
            record(&mut up, q, u, p, v, k, e);
            q -= k * p;
            u = u.saturating_add(k.saturating_mul(v));
        }
    }
    Start::Hit { x, y: d, down, up }
}

/// The next hit after `(x, y)` going forward (`back = false`) or backward, or `None` past the
/// domain's ends.
#[inline(always)]
fn next(x: u64, y: u64, down: Gap, up: Gap, e: u64, n: u64, back: bool) -> Option<(u64, u64)> {
    // Going backward, g_down moves y up and g_up moves it down.
    let (lo, hi) = if back { (up, down) } else { (down, up) };
    let can_lo = lo.g != u64::MAX && y >= lo.disp;
    let can_hi = hi.g != u64::MAX && hi.disp < e - y;
    let (g, y) = match (can_lo, can_hi) {
        (true, true) if lo.g < hi.g => (lo.g, y - lo.disp),
        (true, true) => (hi.g, y + hi.disp),
        (true, false) => (lo.g, y - lo.disp),
        (false, true) => (hi.g, y + hi.disp),
        (false, false) if lo.g != u64::MAX && hi.g != u64::MAX => {
            // y < lo.disp and y + hi.disp >= e > lo.disp: the sum lands in [0, e).
            (lo.g.saturating_add(hi.g), hi.disp - (lo.disp - y))
        }
        (false, false) => return None,
    };
    if back {
        x.checked_sub(g).map(|x| (x, y))
    } else {
        let x = x.saturating_add(g);
        (x < n).then_some((x, y))
    }
}

/// Visits every `x < n` with `(b - a x) mod 2^64 < e`, in no fixed order, until `visit` says
/// stop (returns `true`) or more than `max_hits` were visited. Returns `true` ("clear") only
/// when every such `x` was visited and none stopped it; `false` otherwise, and where the line
/// is flat or its slope a short rational (then nothing is enumerated).
pub fn screen_with(
    a: u64,
    b: u64,
    n: u64,
    e: u64,
    max_hits: u32,
    mut visit: impl FnMut(u64) -> bool,
) -> bool {
    if let Some(clear) = flat(a, b, n, e) {
        return clear;
    }
    let (x0, y0, down, up) = match start(a, b, n, e) {
        Start::Clear => return true,
        Start::Fail => return false,
        Start::Hit { x, y, down, up } => (x, y, down, up),
    };
    // Lefevre's point may lie past the domain (its last turn places points up to u + v): then
    // only the walk backward enters it. The gaps not found are longer than u + v > x0, so a
    // step of theirs leaves the domain from either side.
    let mut hits = 0u32;
    let mut take = |x: u64| {
        hits += 1;
        hits > max_hits || visit(x)
    };
    if x0 < n && take(x0) {
        return false;
    }
    for back in [false, true] {
        if !back && x0 >= n {
            continue;
        }
        let mut at = (x0, y0);
        while let Some((x, y)) = next(at.0, at.1, down, up, e, n, back) {
            if x < n && take(x) {
                return false;
            }
            at = (x, y);
        }
    }
    true
}

/// [`screen_with`] with [`MAX_HITS`]: `true` when no `x < n` within the line's threshold `e`
/// is flagged by `flag`, the domain's quadratic check.
#[inline]
pub fn screen(a: u64, b: u64, n: u64, e: u64, flag: impl FnMut(u64) -> bool) -> bool {
    screen_with(a, b, n, e, MAX_HITS, flag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    fn brute_hits(a: u64, b: u64, n: u64, e: u64) -> Vec<u64> {
        (0..n)
            .filter(|&x| b.wrapping_sub(a.wrapping_mul(x)) < e)
            .collect()
    }

    /// The screen's hits are exactly brute force's, or it says "fail" without claiming clear.
    fn check(a: u64, b: u64, n: u64, e: u64) -> bool {
        let truth = brute_hits(a, b, n, e);
        let mut seen = Vec::new();
        let clear = screen_with(a, b, n, e, u32::MAX, |x| {
            seen.push(x);
            false
        });
        seen.sort_unstable();
        if clear {
            assert_eq!(
                seen, truth,
                "a={a:#x} b={b:#x} n={n} e={e:#x}: enumerated hits differ"
            );
        }
        clear
    }

    fn adversarial_a(rng: &mut impl Rng) -> u64 {
        let den = rng.gen_range(1u64..64);
        let num = rng.gen_range(0..den);
        let base = ((num as u128) << 64) / den as u128;
        let spread = rng.gen_range(0..40);
        let jitter = rng.gen_range(-(1i64 << spread)..=(1i64 << 20));
        (base as i128 + jitter as i128).rem_euclid(1i128 << 64) as u64
    }

    #[test]
    fn hits_are_exactly_brute_forces_on_random_and_adversarial_inputs() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5c2_2026);
        let (mut enumerated, mut failed) = (0u32, 0u32);
        for i in 0..60_000u32 {
            let n = match i % 3 {
                0 => rng.gen_range(1..64),
                1 => 1 << rng.gen_range(1..13),
                _ => rng.gen_range(64..4096),
            };
            let a = match i % 4 {
                0 | 1 => rng.gen(),
                2 => adversarial_a(&mut rng),
                _ => {
                    let s = rng.gen_range(0..63);
                    rng.gen::<u64>() >> s
                }
            };
            let b = rng.gen();
            // Thresholds from none to dozens of hits expected.
            let e = match i % 3 {
                0 => {
                    let s = rng.gen_range(0..64);
                    rng.gen::<u64>() >> s
                }
                _ => (((rng.gen_range(1..48u64) as u128) << 64) / (2 * n as u128)) as u64,
            };
            if check(a, b, n, e) {
                enumerated += 1;
            } else {
                failed += 1;
                // A fail is only allowed where hits exist or the slope is degenerate.
                let degenerate = flat(a, b, n, e).is_some() || a.trailing_zeros() >= 40;
                assert!(
                    degenerate || !brute_hits(a, b, n, e).is_empty(),
                    "a={a:#x} b={b:#x} n={n} e={e:#x}: fail without a hit"
                );
            }
        }
        assert!(
            enumerated > 50_000,
            "{enumerated} enumerated, {failed} failed"
        );
    }

    #[test]
    fn too_many_hits_and_a_flag_fail_the_domain() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..2_000 {
            let (a, b, n) = (rng.gen::<u64>(), rng.gen::<u64>(), 4096u64);
            let e = (((rng.gen_range(1..200u64) as u128) << 64) / n as u128) as u64;
            if flat(a, b, n, e).is_some() {
                continue;
            }
            let truth = brute_hits(a, b, n, e);
            let clear = screen_with(a, b, n, e, 8, |_| false);
            assert_eq!(clear, truth.len() <= 8, "a={a:#x} b={b:#x} e={e:#x}");
            if let Some(&t) = truth.get(truth.len() / 2) {
                assert!(
                    !screen(a, b, n, e, |x| x == t),
                    "the flagged hit {t} was missed"
                );
                assert_eq!(
                    screen(a, b, n, e, |x| x == n),
                    truth.len() <= MAX_HITS as usize,
                    "a={a:#x} b={b:#x} e={e:#x} hits={}",
                    truth.len()
                );
            }
        }
    }

    proptest! {
        #[test]
        fn hits_match_brute_force(a: u64, b: u64, n in 1u64..2048, shift in 0u32..64) {
            let e = u64::MAX >> shift;
            check(a, b, n, e);
        }
    }
}
