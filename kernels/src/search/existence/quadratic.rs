//! Phase 1's quadratic screen: where `f` is steep, a domain's line leaves a residual
//! too wide for the line test alone, so the screen lists the few arguments whose line value lies
//! within the line's threshold and checks each against the domain's quadratic.
//!
//! The arguments `x < N` with `y(x) = (B - A x) mod 2^64 < E` are found in order from one of
//! them by the three-gap structure of return times (Slater): from a hit `y`, the next one is
//! `g_down` steps on (moving `y` down by `d_down`) if `y >= d_down`, `g_up` steps on (up by
//! `d_up`) if `y + d_up < E`, the nearer where both are, else `g_down + g_up`. `g_down` is the
//! least `g >= 1` with `A g mod 2^64` in `(0, E)` and `g_up` the least with `-A g mod 2^64` in
//! `(0, E)`: the continued fraction of `A` passes through every one-sided record of
//! `A g mod 2^64` (the three-distance structure), so both are read off its states. The first hit
//! is the least `y` over the points the continued fraction has placed, kept with its index
//! through the regular test's turns (full partial quotients, the same number of turns in
//! neighbouring lanes). Integer arithmetic only, mirrored by `screen_start`, `screen_next` and
//! `screen` in `kernels/cuda/tmd.cu`; docs/error-analysis.md §16.

use super::{divrem, flat, Count};

/// Hits beyond which a domain is handed to phase 2 without checking the rest.
pub const MAX_HITS: u32 = 64;

/// The screen's route, which a search journal records: bumped whenever which domains the screen
/// fails can change (3: the screen wherever the line's domains stay below the largest size, up
/// to `flat_domain_bits`; 2: the regular turns, on steep pieces only, and domains whose
/// left-out terms reach `2^SCREEN_LEFT_OUT_BITS` radii; 1: Lefevre's turns, opt-in).
pub const ROUTE: u32 = 3;

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

/// `(x / y, x mod y)` for `x >= y > 0`, the quotient capped as the regular test caps its last
/// one (`Count::fits`, `Count::cap`): at most `ceil(rest / w)`, the splits that bring `m` to
/// `n` when each adds `w` points (`rest >= 1` of them missing); the remainder then `x - k y`.
#[inline(always)]
fn capped_divrem(x: u64, y: u64, w: u64, rest: u64) -> (u64, u64) {
    let (k, r) = divrem(x, y);
    if u64::fits(rest, w, k) {
        (k, r)
    } else {
        let k = u64::cap(rest, w);
        (k, x - k * y)
    }
}

/// The points `z(x) = A x mod 2^64` for `x < m = jp + jq` split the circle into gaps of two
/// lengths (the three-distance theorem with two): a P-gap of `p` runs from a point `x` up to
/// `x + jp`, a Q-gap of `q` from `x` up to `x - jq`. As in the regular test (`super::regular`),
/// the first step divides `2^64` by `a` (the points `0..=k0`), then the halves alternate: every
/// P-gap split by a full partial quotient `k` of `q`, then every Q-gap by one of `p`, the last
/// quotient capped where `m` reaches `n`, so that neighbouring lanes run the same turns; every
/// state on the way is one of Lefevre's single steps. Besides the gaps it keeps `b`'s own gap:
/// its lower point `xd` at `d = (b - z(xd)) mod 2^64`, the least of `y(x) = (b - A x) mod 2^64`
/// over `x < m`, and whether it is a Q-gap (`inq`). The one-sided records of `A g mod 2^64` and
/// `-A g mod 2^64` are the values `p - j q` and `q - j p` passed on the way (`record`).
fn start(a: u64, b: u64, n: u64, e: u64) -> Start {
    // Not flat, so 0 < a. 2^64 = k0 a + q with 0 <= q < a: k0 P-gaps of a, one Q-gap of q
    // from k0 a up to 2^64, whose upper point 0 is k0 before its lower one.
    let (k, q) = divrem(a.wrapping_neg(), a);
    let k0 = k + 1;
    let (mut p, mut q) = (a, q);
    let (mut jp, mut jq) = (1u64, k0);
    // b lies k0 a + d with d < q in the Q-gap where its quotient is k0.
    let (xd, d) = divrem(b, a);
    let (mut d, mut xd, mut inq) = (d, xd, xd == k0);
    let mut down = NONE;
    let mut up = NONE;
    if p < e {
        down = Gap { g: 1, disp: p };
    }
    // -A g mod 2^64 = 2^64 - g a for g <= k0.
    if a.wrapping_neg() < e {
        up = Gap {
            g: 1,
            disp: a.wrapping_neg(),
        };
    }
    record(&mut up, a.wrapping_neg(), 1, a, 1, k, e);
    // Done at n points, or once b's gap holds a hit and both gaps are known: any hit starts
    // the walk (`screen_with` goes both ways from it).
    let done = |jp: u64, jq: u64, d: u64, down: Gap, up: Gap| {
        jp.saturating_add(jq) >= n || (d < e && down.g != u64::MAX && up.g != u64::MAX)
    };
    loop {
        if done(jp, jq, d, down, up) {
            break;
        }
        if q == 0 {
            return Start::Fail;
        }
        // Each P-gap takes k new points, at p - j q (j = 1..k) above its lower point: jq more
        // points per split, the last quotient stopping where m reaches n.
        let (k, p1) = capped_divrem(p, q, jq, n - jp - jq);
        record(&mut down, p, jp, q, jq, k, e);
        if !inq && d >= p1 {
            // b's P-gap: its new lower point is the first of them at or below b, the j-th
            // with k - j = (d - p1) / q. b is now in a Q-gap: the Q-half below says so.
            let (i, r) = divrem(d - p1, q);
            d = r;
            xd += jp + (k - i) * jq;
        }
        p = p1;
        jp += k * jq;
        if done(jp, jq, d, down, up) {
            break;
        }
        if p == 0 {
            return Start::Fail;
        }
        // Each Q-gap takes k new points, at j p (j = 1..k) above its lower point.
        let (k, q1) = capped_divrem(q, p, jp, n - jp - jq);
        record(&mut up, q, jq, p, jp, k, e);
        // In b's gap (a P-gap has d < p <= k p, so none of them moves it, and b stays in a
        // P-gap; in a Q-gap it stays in one where d >= k p).
        let kp = k * p;
        if d >= kp {
            d -= kp;
            xd += k * jp;
            inq = true;
        } else {
            let (i, r) = divrem(d, p);
            d = r;
            xd += i * jp;
            inq = false;
        }
        q = q1;
        jq += k * jp;
    }
    if d >= e {
        return Start::Clear;
    }
    // A return of zero displacement: a short rational slope, whose points repeat.
    if (down.g != u64::MAX && down.disp == 0) || (up.g != u64::MAX && up.disp == 0) {
        return Start::Fail;
    }
    Start::Hit {
        x: xd,
        y: d,
        down,
        up,
    }
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
    // The start's hit may lie past the domain (its last quotient places points up to
    // m = jp + jq < 2 n): then only the walk backward enters it. A gap not found is at least
    // m > x0, so a step of it leaves the domain from either side.
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
