//! The brute-force oracle's judgement of one value on a named format's grid, and the brute force
//! of a range built on it, shared by the integration tests that check the engine argument by
//! argument (`formats.rs`, `dense.rs`, `far_regions.rs`; `pipeline.rs` takes [`hardness`]).

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use rug::float::Round;
use rug::{Float, Integer};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use tmd_kernels::numbers::format::{Exponents, Format};
use tmd_kernels::oracle::verify::{Kind, SkipReason};
use tmd_kernels::plan::split_range_in;
use tmd_kernels::regions::lattice::Lattice;
use tmd_kernels::search::{search_units, Cpu, RangeResult, SearchConfig};
use tmd_kernels::Function;

/// What the brute force finds: HR-cases (bits, kind), exact cases (those on their binade's
/// lattice only counted, as the engine counts them), skipped arguments.
#[derive(Debug, Default)]
pub struct Truth {
    pub hard: BTreeMap<String, (u32, Kind)>,
    pub exact: Vec<String>,
    pub lattice: u64,
    pub skipped: Vec<(String, SkipReason)>,
}

/// `floor(-log2 d)` for `0 < d < 1`, from the exponent of `d` (exact).
pub fn hardness(d: &Float) -> u32 {
    let e = d.get_exp().expect("d > 0");
    let power_of_two = *d == Float::with_val(d.prec(), 1) << (e - 1);
    (if power_of_two { 1 - e } else { -e }) as u32
}

/// What a brute force judges values of `f` against: the grid of a named format (`pb` bits of
/// precision, exponents `x`) and the threshold `2^-k`.
pub struct Grid {
    /// Named in a failure.
    pub f: Function,
    pub x: Exponents,
    pub pb: i32,
    pub threshold: Float,
}

impl Grid {
    pub fn new(f: Function, fmt: Format, k: u32) -> Grid {
        Grid {
            f,
            x: fmt.exponents.expect("a named format"),
            pb: fmt.precision.bits() as i32,
            threshold: Float::with_val(64, 1) >> k,
        }
    }

    /// Judges `y = f(x)` (rounded to nearest with ternary `ord`) on this grid, and records the
    /// argument `hex` in `t`. The breakpoints of `y` are the multiples of
    /// `2^(max(e_y, emin) - p)`; `2^(emax+1)` is none; `|y| >= 2^(emax+1)` overflows,
    /// `|y| < 2^(emin-p-1)` underflows. Beyond MPFR's own exponent range an infinity is an
    /// overflow (a pole where `at_zero` and exact: log, rsqrt) and an inexact zero an underflow
    /// (erfc(27306) is about 2^(-1.07e9)).
    pub fn judge(&self, t: &mut Truth, hex: String, at_zero: bool, y: &Float, ord: Ordering) {
        let (f, x, pb, threshold) = (self.f, self.x, self.pb, &self.threshold);
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
}

/// Every argument of `[from, to)` through MPFR at 1024 bits (16384 where `y` came out on a
/// breakpoint without being exact), judged directly on the format's grid by [`Grid::judge`].
pub fn brute_force(f: Function, fmt: Format, from: &str, to: &str, k: u32) -> Truth {
    let grid = Grid::new(f, fmt, k);
    let (x, pb) = (grid.x, grid.pb);
    let p = fmt.precision;
    let units = split_range_in(f, fmt, from, to, Some(30)).unwrap();
    let mut t = Truth::default();
    for u in units {
        for o in 0..u.count {
            let a = u.argument(o);
            let hex = a.to_hex(p);
            // 1024 bits, or 16384 where y came out on a breakpoint without being exact.
            let eval = |prec: u32| {
                let mut y = a.to_float(p);
                y.set_prec(prec);
                let ord = f.eval_round(&mut y, Round::Nearest);
                (y, ord)
            };
            let (mut y, mut ord) = eval(1024);
            if ord != Ordering::Equal && y.is_finite() && !y.is_zero() {
                let mut s = Float::with_val(1024, y.abs_ref());
                s <<= pb - (y.get_exp().unwrap() - 1).max(x.emin);
                if s.is_integer() {
                    (y, ord) = eval(16384);
                }
            }
            let exact = t.exact.len();
            grid.judge(&mut t, hex, a.significand == 0, &y, ord);
            if t.exact.len() > exact
                && Lattice::of(f, fmt, u).is_some_and(|l| l.holds(a.significand))
            {
                t.exact.pop();
                t.lattice += 1;
            }
        }
    }
    t
}

/// The engine's result over `[from, to)` in units of `2^u`, on the CPU, with the configuration
/// of `(f, fmt, k)` changed by `set` (the test, the dense route).
pub fn engine(
    f: Function,
    fmt: Format,
    from: &str,
    to: &str,
    k: u32,
    u: u32,
    set: impl FnOnce(&mut SearchConfig),
) -> RangeResult {
    let units = split_range_in(f, fmt, from, to, Some(u)).unwrap();
    let mut cfg = SearchConfig::in_format(f, fmt, k);
    set(&mut cfg);
    search_units(&cfg, &units, &Cpu, &|_| {}).unwrap()
}
