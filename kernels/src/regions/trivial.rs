//! Trivial regions: runs of arguments near 0 where `f(x)` provably lies within a tiny distance
//! of a breakpoint known in closed form, `g(x) = ±x` (sin, tan, asin, atan, sinh, tanh, asinh,
//! atanh, expm1, log1p) or the constant `g = f(0)` (exp, exp2, exp10, cos, cospi, cosh, erfc:
//! 1; acospi: 1/2). Every argument there is an HR-case near `g(x)` (or exact), so such runs are
//! listed once with their rule instead of case by case (`docs/error-analysis.md` §10).
//!
//! The rule is found, not tabulated: `f(0)` must be exact in MPFR, `g` is read off the Taylor
//! expansion at 0, and the bound `|f(x) - g(x)| <= b0 + b1 |x| + b2 x^2 + b3 |x|^3` comes from
//! the same ball arithmetic as generation (the order-2 expansion at the point 0, and the
//! Lagrange remainder from the coefficient of degree 3 on the ball `[-R, R]`). A run is trivial
//! only where that bound puts every `d` below `2^-k`; elsewhere the search goes on as usual.
//!
//! `partition.rs` cuts a unit with this rule and with `monotone.rs`'s enclosures.

use crate::numbers::ball::Ball;
use crate::numbers::format::{float_to_hex, Format, Precision};
use crate::numbers::series::Series;
use crate::oracle::function::Function;
use crate::plan::UnitSpec;
use crate::regions::runs::TrivialRun;
use rug::float::Round;
use rug::ops::AddAssignRound;
use rug::Float;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The rules computed so far, by function and `E` (`|x| <= 2^E`).
type Rules = Mutex<HashMap<(Function, i32), Option<Rule>>>;
static RULES: OnceLock<Rules> = OnceLock::new();

/// Working precision of the expansion at 0 (the radii it leaves, about `2^-PREC`, are part of
/// the bound).
const PREC: u32 = 320;

/// `floor(-log2 bound)` for `bound > 0`: the largest `K` with `bound <= 2^-K`, so every `d <=
/// bound` has at least `K` identical bits. A bound exactly `2^-K` gives `K`, not `K - 1`: the
/// threshold is inclusive (`d <= 2^-k` is an HR-case), and exp2m1 at `x = -(k + p + 1)` has
/// `d = 2^-k` exactly, the first argument of a run.
pub(crate) fn bits_within(bound: &Float) -> i32 {
    let e = bound.get_exp().expect("bound > 0");
    // bound in [2^(e-1), 2^e).
    let power_of_two = *bound == Float::with_val(8, 1) << (e - 1);
    if power_of_two {
        1 - e
    } else {
        -e
    }
}

/// `g(x)`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Like {
    /// `g(x) = x`, or `-x` when `negative`.
    X { negative: bool },
    /// `g(x) = a = f(0)`, exact and nonzero.
    Constant(Float),
}

/// A proven bound `|f(x) - g(x)| <= b[0] + b[1] |x| + b[2] x^2 + b[3] |x|^3` for `|x| <= reach`.
#[derive(Debug, Clone)]
pub struct Rule {
    pub(crate) like: Like,
    b: [Float; 4],
    reach: Float,
}

impl Rule {
    /// The rule of `f` on the arguments of `unit`, when `f(0)` is exact and `f` is `C^3` on
    /// `[-R, R]`, `R` the unit's largest `|x|`; `None` where no run of it can be trivial (an
    /// argument of magnitude `1/4` or more is never: `d` is then at least about `2^(p-6)`).
    pub fn for_unit(f: Function, p: Precision, unit: UnitSpec) -> Option<Rule> {
        let near = if unit.first == 0 { 1 } else { 0 };
        if unit.count <= near {
            return None;
        }
        let rmin = unit.argument(near).to_float(p).abs();
        if rmin >= 0.25 {
            return None;
        }
        // The rule on [-2^E, 2^E] with 2^E >= R holds on [-R, R]: one per function and E,
        // computed once (a range near 0 has millions of units, a series costs tens of µs).
        let reach = unit.argument(unit.count - 1).to_float(p);
        let e = reach.get_exp().expect("nonzero");
        let cache = RULES.get_or_init(Default::default);
        if let Some(rule) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&(f, e)) {
            return rule.clone();
        }
        let rule = Rule::on(f, Float::with_val(8, 1) << e);
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((f, e), rule.clone());
        rule
    }

    /// The rule of `f` for `|x| <= reach`.
    fn on(f: Function, reach: Float) -> Option<Rule> {
        let (a, ord) = f.eval(&Float::new(8), PREC);
        if !a.is_finite() || ord != Ordering::Equal {
            return None;
        }
        let one = Ball::new(PREC, 1);
        let point = f
            .series(&Series::linear(Ball::zero(PREC), one.clone(), 3))
            .ok()?;
        let wide = f
            .series(&Series::linear(
                Ball::with_radius(Float::new(PREC), &reach),
                one,
                4,
            ))
            .ok()?;
        // g: x or -x where f(0) = 0 and f'(0) = ±1, else the constant f(0).
        let (like, slope) = if a.is_zero() {
            let s = point.c[1].mid.to_f64().round();
            if s.abs() != 1.0 {
                return None;
            }
            (Like::X { negative: s < 0.0 }, s as i64)
        } else {
            (Like::Constant(a.clone()), 0)
        };
        let b = [
            point.c[0].sub(&Ball::from_float(PREC, &a)).mag(),
            point.c[1].sub(&Ball::new(PREC, slope)).mag(),
            point.c[2].mag(),
            wide.c[3].mag(),
        ];
        Some(Rule { like, b, reach })
    }

    /// `g(x)` for people.
    fn like_text(&self) -> String {
        match &self.like {
            Like::X { negative: false } => "x".into(),
            Like::X { negative: true } => "-x".into(),
            Like::Constant(a) => float_to_hex(a),
        }
    }

    /// Whether every argument of `piece` is within `2^-min_bits` of the breakpoint `g(x)` in
    /// format `fmt` (the whole piece a trivial run): the run, with the bits it guarantees.
    pub fn judge(&self, fmt: Format, min_bits: u32, piece: UnitSpec) -> Option<TrivialRun> {
        let p = fmt.precision;
        let pb = p.bits() as i32;
        if piece.first == 0 || piece.count == 0 {
            // Zero: f(0) = g(0) is an exact case, not an HR-case.
            return None;
        }
        let rmin = piece.argument(0).to_float(p).abs();
        let rmax = piece.argument(piece.count - 1).to_float(p).abs();
        if rmax > self.reach {
            return None;
        }
        // B = b0 + b1 r + b2 r^2 + b3 r^3 at r = rmax, rounded upwards (B grows with r).
        let mut bound = self.b[3].clone();
        for c in self.b[..3].iter().rev() {
            // Horner, every operation rounded upwards.
            bound = Float::with_val_round(64, &bound * &rmax, Round::Up).0;
            bound.add_assign_round(c, Round::Up);
        }
        if bound.is_zero() {
            return None;
        }
        let (gmin, gmax) = match &self.like {
            Like::X { .. } => (rmin, rmax),
            Like::Constant(a) => (a.clone().abs(), a.clone().abs()),
        };
        // |f(x)| lies in [gmin - B, gmax + B]: its grid's exponent in [e_lo, e_hi].
        let ylo = Float::with_val_round(64, &gmin - &bound, Round::Down).0;
        if ylo <= 0 {
            return None;
        }
        let yhi = Float::with_val_round(64, &gmax + &bound, Round::Up).0;
        let mut e_lo = ylo.get_exp().expect("positive") - 1;
        let mut e_hi = yhi.get_exp().expect("positive") - 1;
        if let Some(r) = fmt.exponents {
            e_lo = e_lo.max(r.emin);
            e_hi = e_hi.max(r.emin);
            if e_hi > r.emax {
                return None;
            }
        }
        // g(x) must be a breakpoint, a multiple of 2^(e - p), on every grid e <= e_hi: x is a
        // multiple of 2^(exponent - p + 1) (subnormal numbers included, exponent = emin).
        let on_grid = match &self.like {
            Like::X { .. } => e_hi <= piece.exponent + 1,
            Like::Constant(a) => {
                (Float::with_val(a.prec(), a.abs_ref()) << (pb - e_hi)).is_integer()
            }
        };
        if !on_grid {
            return None;
        }
        // d <= |f(x) - g(x)| 2^(p - e_g) <= B 2^(p - e_lo).
        let d = bound << (pb - e_lo);
        let bits = bits_within(&d);
        (bits >= min_bits.max(1) as i32).then(|| TrivialRun {
            like: self.like_text(),
            bits: bits as u32,
        })
    }
}
