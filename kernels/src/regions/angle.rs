//! How near the arguments of one binade come to the multiples of `pi/2` (the zeros and poles of
//! sin, cos and tan): a lower bound from the best rational approximations of `pi/2` on the
//! binade's grid, so that a binade's results are proven within the format's range at once.
//!
//! Far out, consecutive arguments are many periods apart: a ball of `f` over any two of them
//! holds a zero, and proving by bisection that no result underflows (`skip.rs`) would take every
//! argument. Instead: the arguments of the binade `[2^e, 2^(e+1))` are `x = m 2^h`, `h = e - p + 1`,
//! `m < 2^p` an integer, and a multiple `j pi/2` lies at `x - j pi/2 = 2^h (m - j g)` with
//! `g = (pi/2) 2^-h`, so `|x - j pi/2| >= 2^h ||j g||` (`||.||` the distance to the nearest
//! integer). Only `j <= J = floor(2^p / g) + 1` come within `pi/2` of the binade, and by the
//! best-approximation property of continued fractions `||j g|| >= ||q_N g||` for every
//! `0 < j < q_(N+1)`, where `q_N <= J < q_(N+1)` are consecutive convergents' denominators of `g`.
//! The bound `D = 2^h ||q_N g||` then holds for every argument of the binade and every multiple.
//! Every step is done on the ends of an interval that holds `g`, rounded outwards; where two
//! ends disagree on a partial quotient the bound is not claimed.

use rug::float::{Constant, Round};
use rug::{Float, Integer};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The bounds computed so far, by precision and exponent.
type Distances = HashMap<(u32, i32), Option<i64>>;

/// `D`, a lower bound of `|x - j pi/2|` over the binade's arguments `x` and integers `j`, as
/// its `log2` rounded down (an integer `d` with `D >= 2^d`), for precision `p` and exponent
/// `e >= 1` (there `|x| >= 2`, so `j = 0` is farther than `pi/2`). Cached: a few milliseconds
/// a binade of binary64. `None` where the interval arithmetic could not certify it.
pub fn distance_log2(p: u32, e: i32) -> Option<i64> {
    static CACHE: OnceLock<Mutex<Distances>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(d) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&(p, e)) {
        return *d;
    }
    let d = compute(p, e);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((p, e), d);
    d
}

fn compute(p: u32, e: i32) -> Option<i64> {
    if e < 1 {
        return None;
    }
    let h = e - p as i32 + 1;
    // J <= 2^(e+1) needs about 2 (e + 1) bits after g's point, g itself about h bits above it
    // or below it: generous room for both, and 128 bits of slack.
    let prec = 2 * (e.unsigned_abs() + p) + h.unsigned_abs() + 128;
    let half_pi = |r: Round| Float::with_val_round(prec, Constant::Pi, r).0 >> 1u32;
    let (g_lo, g_hi) = (half_pi(Round::Down) >> h, half_pi(Round::Up) >> h);
    // J = floor(2^p / g) + 1, from g's lower end: an upper bound of the true J.
    let j_max = Float::with_val_round(prec, (Float::with_val(prec, 1) << p) / &g_lo, Round::Up)
        .0
        .floor()
        .to_integer()?
        + 1u32;
    // ||j g|| over the interval for one j: j g - round(j g) keeps one sign on it, else nothing
    // is claimed (the subtraction is exact: both are on the product's grid).
    let distance = |j: &Integer| -> Option<Float> {
        let near = Float::with_val(prec, &g_lo * j).round().to_integer()?;
        let at = |g: &Float, r: Round| Float::with_val_round(prec, g * j, r).0 - &near;
        let (v_lo, v_hi) = (at(&g_lo, Round::Down), at(&g_hi, Round::Up));
        if v_lo > 0 {
            Some(v_lo)
        } else if v_hi < 0 {
            Some(-v_hi)
        } else {
            None
        }
    };
    let v = if j_max <= FEW_MULTIPLES {
        // Few multiples (binades near 2): each one, rather than the convergents' rule, which
        // needs two convergents below J.
        let mut least: Option<Float> = None;
        let mut j = Integer::from(1);
        while j <= j_max {
            let v = distance(&j)?;
            least = Some(least.map_or(v.clone(), |l| l.min(&v)));
            j += 1u32;
        }
        least?
    } else {
        distance(&last_convergent(&g_lo, &g_hi, &j_max, prec)?)?
    };
    // D = 2^h v; floor(log2 v) from v's exponent (v in [2^(x-1), 2^x)).
    Some(i64::from(v.get_exp()?) - 1 + i64::from(h))
}

/// Up to this many multiples of `pi/2` met by a binade, each is measured.
const FEW_MULTIPLES: u32 = 1 << 12;

/// `q_N`: the denominator of the last convergent of every real in `[lo, hi]` that is at most
/// `j_max`, certified by the next partial quotient (so `q_(N+1) > j_max` for every such real),
/// with `N >= 1`; `None` where the interval's ends part before that, or the expansion ends.
fn last_convergent(lo: &Float, hi: &Float, j_max: &Integer, prec: u32) -> Option<Integer> {
    let (mut x_lo, mut x_hi) = (lo.clone(), hi.clone());
    // q_(n-1) and q_(n-2), from the convention q_-1 = 0, q_-2 = 1.
    let (mut q1, mut q2) = (Integer::new(), Integer::from(1));
    for n in 0.. {
        let a = x_lo.clone().floor().to_integer()?;
        if x_hi.clone().floor().to_integer()? != a {
            return None;
        }
        let q = Integer::from(&a * &q1) + &q2;
        if q > *j_max {
            // The best-approximation property from the first convergent on.
            return (n >= 2).then_some(q1);
        }
        (q2, q1) = (q1, q);
        // x <- 1 / (x - a): the interval's ends swap, each rounded outwards.
        let (d_lo, d_hi) = (
            Float::with_val(prec, &x_lo - &a),
            Float::with_val(prec, &x_hi - &a),
        );
        if d_lo <= 0 {
            return None;
        }
        let one = Float::with_val(prec, 1);
        x_lo = Float::with_val_round(prec, &one / &d_hi, Round::Down).0;
        x_hi = Float::with_val_round(prec, &one / &d_lo, Round::Up).0;
    }
    unreachable!("the loop returns")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a brute force of its own: in the binade `[2^e, 2^(e+1))` with `e` small enough
    /// to list every multiple of `pi/2` it meets, no argument comes nearer to one than the
    /// bound, and the nearest comes within a factor of 8 of it (binades of few multiples,
    /// measured each, and of many, through the convergents).
    #[test]
    fn the_bound_holds_and_is_tight_where_every_multiple_can_be_listed() {
        for (p, e) in [
            (53u32, 1),
            (53, 2),
            (53, 5),
            (53, 12),
            (53, 14),
            (53, 16),
            (24, 3),
            (24, 16),
            (24, 19),
            (11, 15),
        ] {
            let d = distance_log2(p, e).expect("certified");
            let h = e - p as i32 + 1;
            let prec = 4 * p + 64;
            let half_pi = Float::with_val(prec, Constant::Pi) >> 1u32;
            let lo = Float::with_val(prec, 1) << e;
            let hi = Float::with_val(prec, 1) << (e + 1);
            let mut nearest = Float::with_val(prec, f64::INFINITY);
            let first = Float::with_val(prec, &lo / &half_pi)
                .floor()
                .to_integer()
                .unwrap();
            let last = Float::with_val(prec, &hi / &half_pi)
                .ceil()
                .to_integer()
                .unwrap();
            let mut j = first;
            while j <= last {
                let c = Float::with_val(prec, &half_pi * &j);
                // The grid's two neighbours of j pi/2, inside the binade.
                let m = Float::with_val(prec, &c >> h).floor();
                for m in [m.clone(), m + 1u32] {
                    let x = m << h;
                    if x >= lo && x < hi {
                        let dist = Float::with_val(prec, &x - &c).abs();
                        if dist < nearest {
                            nearest = dist;
                        }
                    }
                }
                j += 1u32;
            }
            let truth = nearest.log2().to_f64();
            assert!((d as f64) <= truth, "p {p} e {e}: 2^{d} > 2^{truth}");
            assert!(
                (d as f64) > truth - 3.0,
                "p {p} e {e}: 2^{d} far below 2^{truth}"
            );
        }
    }

    /// Every binade of binary64 from 2 on is certified, far above what sin, cos and tan need to
    /// stay in range (results of `2^-1076` or more, tan's below `2^1024`), and binary80's far
    /// out too.
    #[test]
    fn binary64_and_binary80_far_out_are_certified() {
        let d: Vec<i64> = (1..=1023)
            .map(|e| distance_log2(53, e).unwrap_or_else(|| panic!("2^{e} not certified")))
            .collect();
        let (lo, hi) = (d.iter().min().unwrap(), d.iter().max().unwrap());
        println!("binary64, binades 2^1 to 2^1023: d from {lo} to {hi}");
        assert!(*lo >= -80 && *hi < 0, "{lo} {hi}");
        for e in [64, 1000, 5000] {
            let d = distance_log2(64, e).expect("certified");
            assert!(d > -16000 && d < -20, "binary80 2^{e}: 2^{d}");
        }
    }
}
