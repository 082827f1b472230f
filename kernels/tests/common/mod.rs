//! The brute-force oracle's judgement of one value on a named format's grid, shared by the
//! integration tests that check the engine argument by argument (`formats.rs`, `far_regions.rs`).

use rug::{Float, Integer};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use tmd_kernels::numbers::format::Exponents;
use tmd_kernels::oracle::verify::{Kind, SkipReason};
use tmd_kernels::Function;

/// What the brute force finds: HR-cases (bits, kind), exact cases, skipped arguments.
#[derive(Debug, Default)]
pub struct Truth {
    pub hard: BTreeMap<String, (u32, Kind)>,
    pub exact: Vec<String>,
    pub skipped: Vec<(String, SkipReason)>,
}

/// `floor(-log2 d)` for `0 < d < 1`, from the exponent of `d` (exact).
pub fn hardness(d: &Float) -> u32 {
    let e = d.get_exp().expect("d > 0");
    let power_of_two = *d == Float::with_val(d.prec(), 1) << (e - 1);
    (if power_of_two { 1 - e } else { -e }) as u32
}

/// Judges `y = f(x)` (`f` names it in a failure; rounded to nearest with ternary `ord`) on the grid of a format of `pb`
/// bits and exponents `x`, at threshold `2^-k` (`threshold`), and records the argument `hex`
/// in `t`. The breakpoints of `y` are the multiples of `2^(max(e_y, emin) - p)`; `2^(emax+1)` is
/// none; `|y| >= 2^(emax+1)` overflows, `|y| < 2^(emin-p-1)` underflows. Beyond MPFR's own
/// exponent range an infinity is an overflow (a pole where `at_zero` and exact: log, rsqrt) and
/// an inexact zero an underflow (erfc(27306) is about 2^(-1.07e9)).
#[allow(clippy::too_many_arguments)]
pub fn judge(
    t: &mut Truth,
    f: Function,
    x: Exponents,
    pb: i32,
    threshold: &Float,
    hex: String,
    at_zero: bool,
    y: &Float,
    ord: Ordering,
) {
    if y.is_infinite() {
        let pole = at_zero && ord == Ordering::Equal;
        let reason = if pole {
            SkipReason::Pole
        } else {
            SkipReason::Overflow
        };
        t.skipped.push((hex, reason));
        return;
    }
    if y.is_zero() {
        if ord == Ordering::Equal {
            t.exact.push(hex);
        } else {
            t.skipped.push((hex, SkipReason::Underflow));
        }
        return;
    }
    let e_y = y.get_exp().unwrap() - 1;
    if e_y > x.emax {
        t.skipped.push((hex, SkipReason::Overflow));
        return;
    }
    let e_g = e_y.max(x.emin);
    let mut g = Float::with_val(y.prec(), y.abs_ref());
    g <<= pb - e_g;
    if g < 0.5 {
        t.skipped.push((hex, SkipReason::Underflow));
        return;
    }
    // Ties (d = 1/2) to the even integer, the floating-point number (error-analysis §7).
    let mut n = g.clone().round_even().to_integer().unwrap();
    if e_y == x.emax && n == Integer::from(1) << (pb as u32 + 1) {
        n -= 1;
    }
    let d = Float::with_val(y.prec(), &g - &n).abs();
    if d.is_zero() && ord == Ordering::Equal {
        t.exact.push(hex);
    } else if d <= *threshold {
        assert!(!d.is_zero(), "{f}({hex}) = {y}: on a breakpoint, inexact");
        let kind = if n.is_even() { Kind::Fp } else { Kind::Mid };
        t.hard.insert(hex, (hardness(&d), kind));
    }
}
