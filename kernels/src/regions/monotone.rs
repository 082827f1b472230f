//! Pieces decided whole by monotonicity (`docs/error-analysis.md` §12): where `f`, or
//! `f(x) - (±x)`, is monotone on a piece, every value lies between rigorous enclosures of the
//! piece's two ends. If those put every argument within `2^-k` of one breakpoint, the piece is a
//! trivial run (far from 0: tanh and erf near ±1, erfc near 2, expm1, exp2m1, exp10m1 near -1,
//! atanpi near ±1/2; near 0, the edges of `trivial.rs`'s regions); if they put every argument
//! strictly inside one gap between breakpoints, more than `2^-k` from both ends, the piece is
//! *clear*: it holds no HR-case and no exact case, proven without phases 1-3. That is what the
//! bands just beyond trivial regions are (d just above `2^-k` for every argument, where the
//! existence tests prove nothing and phase 3 would walk whole binades argument by argument).

use crate::numbers::ball::Ball;
use crate::numbers::format::{float_to_hex, Format};
use crate::numbers::series::Series;
use crate::oracle::function::Function;
use crate::plan::UnitSpec;
use crate::regions::runs::TrivialRun;
use crate::regions::trivial::bits_within;
use rug::float::Round;
use rug::ops::NegAssign;
use rug::Float;

/// What the enclosures of a piece say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Every argument within `2^-bits` of the breakpoint `like` (or exact).
    Trivial(TrivialRun),
    /// Every argument farther than `2^-k` from every breakpoint: no HR-case, no exact case.
    Clear,
    /// Neither. `split`: the values are few breakpoints wide and part of them lies in a gap or
    /// in a run, so halves may be decided; otherwise halves would not help (or cannot be
    /// certified) and the piece is searched.
    Undecided { split: bool },
}

/// What `f` is compared with on a piece.
#[derive(Debug, Clone, PartialEq)]
pub enum Reference {
    /// `f` itself, and the constant `c` it tends to (a trivial run rounds like `c`), if any.
    /// `known`: `f` is strictly monotone on the whole side of 0 (a fact of the function,
    /// [`asymptote`]); otherwise monotonicity is certified per piece by ball arithmetic.
    Flat { c: Option<Float>, known: bool },
    /// `f(x) - s x`, `s = -1` when `negative`: `x` is a breakpoint of the grids `e <= E + 1`
    /// (`E` the argument's binade), so `d(x)` is the distance of the scaled residual to `Z`.
    Residual { negative: bool },
}

/// The horizontal asymptote of `f` on one side (`negative`: `x -> -inf`), for the functions
/// strictly monotone on all of R: tanh (`tanh' = 1 - tanh^2 > 0`), erf (`erf' =
/// 2 exp(-x^2)/sqrt(pi) > 0`), erfc (`= 1 - erf`), expm1, exp2m1, exp10m1 (`(b^x - 1)' =
/// b^x ln b > 0`), atan and atanpi (`1/(1 + x^2)`, over pi). `c` is the limit where it is a
/// nonzero dyadic number: tanh, erf `±1`, erfc at `-inf` 2, the `m1` functions at `-inf` -1,
/// atanpi `±1/2`; `None` for atan (`±pi/2`: no trivial run, clear pieces only). Limits 0 or
/// infinite (erfc at `+inf`, the `m1` functions at `+inf`) have no entry: the grid follows the
/// value there. Checked against MPFR in the tests.
pub fn asymptote(f: Function, negative: bool) -> Option<Reference> {
    use Function::*;
    let c = |num: i32, shift: i32| Some(Float::with_val(8, num) << shift);
    let s = if negative { -1 } else { 1 };
    let c = match (f, negative) {
        (Tanh | Erf, _) => c(s, 0),
        (Erfc, true) => c(1, 1),
        (Expm1 | Exp2m1 | Exp10m1, true) => c(-1, 0),
        (Atanpi, _) => c(s, -1),
        (Atan, _) => None,
        _ => return None,
    };
    Some(Reference::Flat { c, known: true })
}

/// `[f(x) rounded down, f(x) rounded up]` at `prec` bits, if finite.
fn enclose(f: Function, x: &Float, prec: u32) -> Option<(Float, Float)> {
    let mut lo = Float::with_val(prec, x);
    f.eval_round(&mut lo, Round::Down);
    let mut hi = Float::with_val(prec, x);
    f.eval_round(&mut hi, Round::Up);
    (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
}

/// `v - floor(v)`, exact (v has a bounded exponent and `prec` bits).
fn frac(v: &Float) -> Float {
    let fl = Float::with_val(v.prec(), v.floor_ref());
    Float::with_val(v.prec(), v - &fl)
}

/// Whether `f'` (and `f' - s` for a residual) keeps one sign on `[a, b]`. By Taylor at the
/// middle `m`, for `|xi - m| <= rad`: `f'(xi) = f'(m) + f''(m) (xi - m) + f'''(eta) (xi - m)^2 / 2`,
/// so `|f'(xi) - f'(m)| <= 2 |c2(m)| rad + 3 |c3| rad^2`, with `c2(m)` from the series of `f` at
/// the point `m` and `c3` from its series on the ball holding `[a, b]` (which contains
/// `f'''(eta)/6` for every `eta` there, `series.rs`). The plain ball `f'([a, b])` is too wide
/// here: `f' - s` is of the order of `x` or `x^2` while a ball of radius `rad` spreads `f'` by
/// about `rad`. The precision grows as `|x|` shrinks, for the same reason.
fn monotone_on(f: Function, a: &Float, b: &Float, exponent: i32, slope: Option<i64>) -> bool {
    let prec = (192 + 3 * (-exponent).max(0) as u32).min(8192);
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    let wide = Ball::from_bounds(prec, lo, hi);
    let one = Ball::new(prec, 1);
    let point = Ball::from_float(prec, &wide.mid);
    let (Ok(p), Ok(w)) = (
        f.series(&Series::linear(point, one.clone(), 3)),
        f.series(&Series::linear(wide.clone(), one, 4)),
    ) else {
        return false;
    };
    let finite = |b: &Ball| b.mid.is_finite() && b.rad.is_finite();
    if !(finite(&p.c[1]) && finite(&p.c[2]) && finite(&w.c[3])) {
        return false;
    }
    // spread = 2 |c2(m)| rad + 3 |c3| rad^2, rounded upwards.
    let rad = &wide.rad;
    let t1 = Float::with_val_round(64, p.c[2].mag() * rad, Round::Up).0 << 1u32;
    let r2 = Float::with_val_round(64, rad * rad, Round::Up).0;
    let t2 = Float::with_val_round(64, w.c[3].mag() * &r2, Round::Up).0;
    let t2 = Float::with_val_round(64, t2 * 3u32, Round::Up).0;
    let spread = Float::with_val_round(64, &t1 + &t2, Round::Up).0;
    let clear_of_zero = |d: &Ball| d.mig() > spread;
    clear_of_zero(&p.c[1]) && slope.is_none_or(|s| clear_of_zero(&p.c[1].sub(&Ball::new(prec, s))))
}

/// The decision on `piece` (of one binade and one sign) against `reference`, in format `fmt`
/// at threshold `min_bits` (`docs/error-analysis.md` §12).
pub fn judge(
    f: Function,
    fmt: Format,
    min_bits: u32,
    piece: UnitSpec,
    reference: &Reference,
) -> Decision {
    let no = Decision::Undecided { split: false };
    // Zero (significand 0, in a named format's subnormal binade) is judged apart: f(0) = c is
    // an exact case (exp, cos), never part of a run, and g(0) = 0 is no residual.
    if piece.count == 0 || piece.first == 0 {
        return no;
    }
    let p = fmt.precision;
    let pb = p.bits() as i32;
    // Enough bits that the enclosures are far narrower than 2^-k half-ulps, even for the
    // residual f(x) - x (it cancels the leading bits of f(x)).
    let prec = p.bits() + min_bits + 96;
    let a = piece.argument(0).to_float(p);
    let b = piece.argument(piece.count - 1).to_float(p);
    let slope = match reference {
        Reference::Residual { negative } => Some(if *negative { -1 } else { 1 }),
        Reference::Flat { .. } => None,
    };
    let known = matches!(reference, Reference::Flat { known: true, .. });
    if !known && !monotone_on(f, &a, &b, piece.exponent, slope) {
        return no;
    }
    let (Some((alo, ahi)), Some((blo, bhi))) = (enclose(f, &a, prec), enclose(f, &b, prec)) else {
        return no;
    };
    // f is monotone: f(piece) lies in [ylo, yhi]; |f| in [m, mm], one sign.
    let ylo = alo.clone().min(&blo);
    let yhi = ahi.clone().max(&bhi);
    let (m, mm) = if ylo.is_sign_positive() && !ylo.is_zero() {
        (ylo.clone(), yhi.clone())
    } else if yhi.is_sign_negative() && !yhi.is_zero() {
        (-yhi.clone(), -ylo.clone())
    } else {
        return no;
    };
    let e_lo = m.get_exp().expect("nonzero") - 1;
    let e_hi = mm.get_exp().expect("nonzero") - 1;
    if let Some(r) = fmt.exponents {
        // Normal results below the top binade only: the subnormal grid, underflow, overflow
        // and the top binade's missing breakpoint are other rules' business.
        if e_lo < r.emin || e_hi >= r.emax {
            return no;
        }
    }
    let eps = Float::with_val(8, 1) >> min_bits;
    // The values (Flat) or residuals (Residual) of the piece lie in [lo, hi], on the grid e_lo
    // (units of its half-ulp, where breakpoints are the integers).
    let scale = pb - e_lo;
    let (lo, hi) = match (reference, slope) {
        (Reference::Residual { .. }, Some(s)) => {
            // x is a breakpoint of the grid e only if e <= E + 1. Where f crosses a power of
            // two inside the piece (e_lo < e_hi: sin just below 2^E), the residual scaled to
            // the finer grid only decides whether to split.
            if e_hi > piece.exponent + 1 {
                return no;
            }
            let res = |y: &Float, x: &Float, round: Round| {
                let mut sx = Float::with_val(x.prec(), x);
                if s < 0 {
                    sx.neg_assign();
                }
                let mut r = Float::with_val_round(prec + 64, y - &sx, round).0;
                r <<= scale;
                r
            };
            let rlo = res(&alo, &a, Round::Down).min(&res(&blo, &b, Round::Down));
            let rhi = res(&ahi, &a, Round::Up).max(&res(&bhi, &b, Round::Up));
            (rlo, rhi)
        }
        _ => {
            // |f| scaled; a trivial run first where f tends to a constant on the grid.
            if let Reference::Flat { c: Some(c), .. } = reference {
                if let Some(t) = near_constant(c, &ylo, &yhi, pb, e_lo, e_hi, min_bits) {
                    return Decision::Trivial(t);
                }
            }
            (
                Float::with_val(prec, &m) << scale,
                Float::with_val(prec, &mm) << scale,
            )
        }
    };
    let width = Float::with_val(prec + 64, &hi - &lo);
    if e_lo == e_hi {
        if let Reference::Residual { negative } = reference {
            // Within 2^-k of x itself: a trivial run (the edge of trivial.rs's region).
            let big = lo.clone().abs().max(&hi.clone().abs());
            if big <= eps && !big.is_zero() {
                let bits = bits_within(&big);
                return Decision::Trivial(TrivialRun {
                    like: if *negative { "-x" } else { "x" }.into(),
                    bits: bits as u32,
                });
            }
        }
        let n = Float::with_val(prec, lo.floor_ref());
        let (flo, fhi) = (frac(&lo), frac(&hi));
        let one_gap = Float::with_val(prec, hi.floor_ref()) == n;
        if one_gap && flo > eps && Float::with_val(prec, 1 - &fhi) > eps {
            return Decision::Clear;
        }
        // Wholly within 2^-k of one breakpoint: halves would be no better.
        let r = Float::with_val(prec, lo.round_ref());
        let near = |v: &Float| Float::with_val(prec + 64, v - &r).abs() <= eps;
        if near(&lo) && near(&hi) {
            return no;
        }
    }
    // Split only at the edge of the reference's own run: a few breakpoints wide and within
    // 2^(1-k) of the reference's breakpoint (0 for a residual, |c| on the grid e_lo for Flat), so the
    // halves down to the edge cost O(log count) pieces; elsewhere (an isolated HR-case in a flat
    // stretch) the piece is searched as before.
    let reference_point = match reference {
        Reference::Residual { .. } => Some(Float::new(prec)),
        Reference::Flat { c: Some(c), .. } => Some(Float::with_val(prec, c.abs_ref()) << scale),
        Reference::Flat { c: None, .. } => None,
    };
    // A piece holding the edge holds a value within 2^-k of the breakpoint (its run's side).
    let near_edge = reference_point.is_some_and(|n| {
        let below = Float::with_val(prec + 64, &lo - &n);
        let above = Float::with_val(prec + 64, &n - &hi);
        let slack = Float::with_val(8, &eps * 2u32);
        below <= slack && above <= slack
    });
    // Or where f crosses a power of two inside the piece (one point: sin just below 2^E).
    Decision::Undecided {
        split: piece.count > 1 && width < 4 && (near_edge || e_lo != e_hi),
    }
}

/// The trivial run where every value in `[ylo, yhi]` (grids `e_lo..=e_hi`) lies within
/// `2^-min_bits` of `c`, a breakpoint of the grid `e_hi` (hence of every finer one): `d(x) <=
/// |f(x) - c| 2^(p - e_g) <= max(|ylo - c|, |yhi - c|) 2^(p - e_lo)`.
fn near_constant(
    c: &Float,
    ylo: &Float,
    yhi: &Float,
    pb: i32,
    e_lo: i32,
    e_hi: i32,
    min_bits: u32,
) -> Option<TrivialRun> {
    let on_grid = (Float::with_val(c.prec(), c.abs_ref()) << (pb - e_hi)).is_integer();
    if !on_grid {
        return None;
    }
    // |y - c| rounded upwards.
    let dist = |y: &Float| {
        if y >= c {
            Float::with_val_round(64, y - c, Round::Up).0
        } else {
            Float::with_val_round(64, c - y, Round::Up).0
        }
    };
    let mut bound = dist(ylo).max(&dist(yhi));
    if bound.is_zero() {
        return None;
    }
    bound <<= pb - e_lo;
    // d <= bound <= 2^-bits (inclusive: a bound of exactly 2^-k is a run of k bits).
    let bits = bits_within(&bound);
    (bits >= min_bits.max(1) as i32).then(|| TrivialRun {
        like: float_to_hex(c),
        bits: bits as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::split_range_in;
    use std::str::FromStr;

    /// Each tabulated limit is what MPFR gives far out: `f(±2^40)` within `2^-1000` of `c`
    /// (atan, atanpi: within `2^-38` of `±pi/2`, `±1/2`), approached from the side of 0.
    #[test]
    fn the_asymptotes_are_the_limits() {
        let far: Float = Float::with_val(64, 1) << 40;
        let mut seen = 0;
        for &f in Function::ALL {
            for negative in [false, true] {
                let Some(Reference::Flat { c, known: true }) = asymptote(f, negative) else {
                    assert!(asymptote(f, negative).is_none());
                    continue;
                };
                seen += 1;
                let x = if negative { -far.clone() } else { far.clone() };
                let (y, _) = f.eval(&x, 1200);
                let limit = c
                    .clone()
                    .map(|c| Float::with_val(1200, c))
                    .unwrap_or_else(|| {
                        let half_pi = Float::with_val(1200, rug::float::Constant::Pi) >> 1u32;
                        if negative {
                            -half_pi
                        } else {
                            half_pi
                        }
                    });
                let gap = Float::with_val(1200, &limit - &y);
                // atan and atanpi approach theirs like 1/x, the others like e^(-|x|).
                let tol = match f {
                    Function::Atan | Function::Atanpi => 38u32,
                    _ => 1000,
                };
                assert!(
                    gap.clone().abs() < Float::with_val(64, 1) >> tol,
                    "{f} {negative}: {gap}"
                );
                // From the side of 0: |f| < |c|.
                assert!(y.clone().abs() <= limit.clone().abs(), "{f} {negative}");
                if let Some(c) = c {
                    assert!(c.is_finite() && !c.is_zero());
                }
            }
        }
        assert_eq!(seen, 12);
    }

    fn unit_of(f: Function, format: &str, from: &str, to: &str, bits: u32) -> (Format, UnitSpec) {
        let fmt = Format::from_str(format).unwrap();
        let units = split_range_in(f, fmt, from, to, Some(bits)).unwrap();
        (fmt, units[0])
    }

    #[test]
    fn tanh_in_binary64_is_clear_then_trivial() {
        let r = asymptote(Function::Tanh, false).unwrap();
        // d = 2^54 (1 - tanh x), about 2^-2.7 at 20 and 2^-44 near 34.3.
        let (fmt, u) = unit_of(Function::Tanh, "binary64", "20", "21", 40);
        assert_eq!(judge(Function::Tanh, fmt, 44, u, &r), Decision::Clear);
        let (fmt, u) = unit_of(Function::Tanh, "binary64", "36", "37", 40);
        match judge(Function::Tanh, fmt, 44, u, &r) {
            Decision::Trivial(t) => assert!(t.like == "0x1p+0" && t.bits >= 44, "{t:?}"),
            d => panic!("{d:?}"),
        }
        // Far beyond MPFR's reach for 1 - tanh: still trivial, with bits below P - p.
        let (fmt, u) = unit_of(Function::Tanh, "binary64", "0x1p+1000", "0x1.1p+1000", 40);
        match judge(Function::Tanh, fmt, 44, u, &r) {
            Decision::Trivial(t) => assert!(t.bits >= 44 && t.bits <= 44 + 96, "{t:?}"),
            d => panic!("{d:?}"),
        }
        // Where tanh changes fast, nothing is decided and nothing is split.
        let (fmt, u) = unit_of(Function::Tanh, "binary64", "1", "2", 40);
        assert_eq!(
            judge(Function::Tanh, fmt, 44, u, &r),
            Decision::Undecided { split: false }
        );
    }

    #[test]
    fn the_band_beyond_sin_and_exp_near_zero_is_clear() {
        // sin: r = 2^(53-E) x^3/6 is within (2^-44, 1 - 2^-44) on the binade 2^-40.
        let (fmt, u) = unit_of(Function::Sin, "binary64", "0x1.1p-40", "0x1.2p-40", 40);
        let r = Reference::Residual { negative: false };
        assert_eq!(judge(Function::Sin, fmt, 44, u, &r), Decision::Clear);
        // The binade's first unit holds 2^-40, whose sine lies in the binade below: split.
        let (fmt, u) = unit_of(Function::Sin, "binary64", "0x1p-40", "0x1.1p-40", 40);
        assert_eq!(
            judge(Function::Sin, fmt, 44, u, &r),
            Decision::Undecided { split: true }
        );
        // exp: G = 2^53 (1 + x), x in [2^-90, 2^-89]: frac(G) about 2^-37.
        let (fmt, u) = unit_of(Function::Exp, "binary64", "0x1p-90", "0x1.1p-90", 40);
        let r = Reference::Flat {
            c: Some(Float::with_val(8, 1)),
            known: false,
        };
        assert_eq!(judge(Function::Exp, fmt, 44, u, &r), Decision::Clear);
        // Negative side: exp below 1, on the grid 2^-1.
        let (fmt, u) = unit_of(Function::Exp, "binary64", "-0x1.1p-90", "-0x1p-90", 40);
        assert_eq!(judge(Function::Exp, fmt, 44, u, &r), Decision::Clear);
    }
}
