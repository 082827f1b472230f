//! sin and cos (and sinpi, cospi) along a progression's line from the sine and cosine of a
//! piece's center: the Taylor coefficients of `sin(theta + u delta)` in `u` are `±sin theta` or
//! `±cos theta` times `delta^j / j!`, so a piece's forward differences are
//! `beta_m = sin theta U_m + cos theta V_m`, with `U` and `V` the same for every piece of one
//! length on a unit's line (`docs/error-analysis.md` §18, "Pieces from two numbers"). Two
//! products of balls per difference, where the general route evaluates two series of the
//! function and their differences for every piece.

use crate::numbers::ball::Ball;
use crate::numbers::format::Precision;
use crate::oracle::function::Function;
use crate::search::generation::{
    ceil_fixed, fixed_width, output_binade, FixedPoly, GenConfig, MAX_LIMBS,
};
use rug::float::{Constant, Round};
use rug::ops::{AddAssignRound, DivAssignRound, MulAssignRound, Pow, SubAssignRound};
use rug::{Float, Integer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// `U_m`, `V_m` (`m <= degree`) of pieces of `count` offsets: the forward differences at 0 of
/// `cos((i - c) delta)` and `sin((i - c) delta)`'s Taylor polynomials of that degree,
/// `c = floor(count / 2)`, as balls.
struct Basis {
    u: Vec<Ball>,
    v: Vec<Ball>,
}

/// The bases of one unit's line (its step `delta`, an angle), by (count, degree): a unit's
/// pieces have a few lengths only.
pub(crate) struct Bases {
    step: Ball,
    /// sin and cos: the angles of the unit's first argument and of its grid's step, each
    /// reduced once, so that an offset's angle is two ball operations instead of a reduction
    /// at the argument's exponent.
    origin: Option<(Ball, Ball)>,
    map: Mutex<HashMap<(u64, usize), Arc<Basis>>>,
}

/// The functions taken here: sin and cos of the angle itself, or of `pi x`.
pub(crate) fn takes(f: Function) -> bool {
    matches!(
        f,
        Function::Sin | Function::Cos | Function::Sinpi | Function::Cospi
    )
}

impl Bases {
    /// For a unit whose line advances by the angle `step` (a ball) per offset.
    pub(crate) fn new(step: Ball) -> Bases {
        Bases {
            step,
            origin: None,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// With `first`, an angle congruent to the unit's first argument modulo `2 pi`, and
    /// `grid`, one congruent to its grid's step (signed): offset `o` then has the angle
    /// `first + o grid`, congruent to its argument `x_0 + o h`. Both balls should carry enough
    /// bits for `o` times `grid`'s radius and the sum's magnitude (`o < 2^64`).
    pub(crate) fn with_origin(mut self, first: Ball, grid: Ball) -> Bases {
        self.origin = Some((first, grid));
        self
    }

    /// The angle of offset `o` of the unit (see [`Bases::with_origin`]), if the origin is set.
    pub(crate) fn angle_at(&self, o: u64) -> Option<Ball> {
        let (first, grid) = self.origin.as_ref()?;
        Some(first.add(&grid.mul_integer(&Integer::from(o))))
    }

    fn get(&self, count: u64, degree: usize) -> Arc<Basis> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry((count, degree))
            .or_insert_with(|| Arc::new(basis(&self.step, count, degree)))
            .clone()
    }
}

/// `U_m = sum_(j even) (-1)^(j/2) W_j T_mj`, `V_m = sum_(j odd) (-1)^((j-1)/2) W_j T_mj`, with
/// `W_j = delta^j / j!` and `T_mj = Delta^m [(i - c)^j](0) = sum_(i <= m) (-1)^(m-i) C(m, i)
/// (i - c)^j`, exact (zero for `j < m`).
fn basis(step: &Ball, count: u64, degree: usize) -> Basis {
    let prec = step.prec();
    let c = Integer::from(count / 2);
    let mut w = vec![Ball::new(prec, 1)];
    for j in 1..=degree {
        let next = w[j - 1].mul(step).div_u64(j as u64);
        w.push(next);
    }
    let (mut u, mut v) = (
        Vec::with_capacity(degree + 1),
        Vec::with_capacity(degree + 1),
    );
    for m in 0..=degree {
        let (mut um, mut vm) = (Ball::zero(prec), Ball::zero(prec));
        for (j, wj) in w.iter().enumerate().skip(m) {
            let mut t = Integer::new();
            for i in 0..=m {
                let term = Integer::from(m as u32).binomial(i as u32)
                    * (Integer::from(i) - &c).pow(j as u32);
                if (m - i) % 2 == 0 {
                    t += term;
                } else {
                    t -= term;
                }
            }
            let term = wj.mul_integer(&t);
            match j % 4 {
                0 => um.add_assign(&term),
                1 => vm.add_assign(&term),
                2 => um.sub_assign(&term),
                _ => vm.sub_assign(&term),
            }
        }
        u.push(um);
        v.push(vm);
    }
    Basis { u, v }
}

/// The angle of `x` for `f`: `x` itself for sin and cos (the caller has reduced it), `pi (x
/// mod 2)` for sinpi and cospi, at precision `prec`.
pub(crate) fn angle(f: Function, x: &Ball, prec: u32) -> Ball {
    match f {
        Function::Sinpi | Function::Cospi => {
            // x is a format number, exact: x - 2 floor(x / 2) is exact at its precision.
            let x = &x.mid;
            let mut half = Float::with_val(x.prec(), x / 2u32);
            half.floor_mut();
            let r = Float::with_val(x.prec() + 2, x - Float::with_val(x.prec(), &half * 2u32));
            Ball::constant(prec, Constant::Pi).mul(&Ball::from_float(prec, &r))
        }
        _ => x.clone(),
    }
}

/// The step angle of a line whose step is `step` for `f` (`pi step` for sinpi and cospi).
pub(crate) fn step_angle(f: Function, step: &Ball, prec: u32) -> Ball {
    match f {
        Function::Sinpi | Function::Cospi => Ball::constant(prec, Constant::Pi).mul(step),
        _ => step.clone(),
    }
}

/// The fixed-point polynomial of `f` on the piece of `count` offsets whose center (offset
/// `floor(count / 2)`) has the angle `theta`, on the unit's line (`bases`): as
/// `generation::fixed_polynomial_along` builds it (§0-2: the same shape checks, degree rule,
/// width and rounding), from `sin theta` and `cos theta` alone. `None` where that polynomial
/// is not to be had this way (a zero of `f` on the piece, no degree up to the maximum, words
/// too wide, balls too wide at this precision): the general route then decides.
pub(crate) fn fixed_along(
    f: Function,
    p: Precision,
    cfg: &GenConfig,
    count: u64,
    theta: &Ball,
    bases: &Bases,
) -> Option<FixedPoly> {
    let (s, c) = theta.sin_cos();
    // f(theta + u) = a cos u + b sin u.
    let (a, b) = match f {
        Function::Sin | Function::Sinpi => (s, c),
        Function::Cos | Function::Cospi => (c, s.neg()),
        _ => return None,
    };
    let pb = p.bits() as i32;
    let k = cfg.min_bits;
    let reach = count - count / 2;
    // |u| <= w on the piece, and |f - a| <= |b| w + w^2 / 2 there.
    let mut w = bases.step.mag();
    w.mul_assign_round(&Float::with_val(64, reach), Round::Up);
    let mut dev = Float::with_val_round(64, w.square_ref(), Round::Up).0;
    dev >>= 1;
    dev.add_assign_round(
        Float::with_val_round(64, &b.mag() * &w, Round::Up).0,
        Round::Up,
    );
    let mut lo = a.mig();
    lo.sub_assign_round(&dev, Round::Down);
    if lo <= 0 {
        return None;
    }
    let mut hi = a.mag();
    hi.add_assign_round(&dev, Round::Up);
    let (q, crossing) = output_binade(cfg, pb, &lo, &hi).ok()?;
    let shift = pb - q;

    // The smallest degree whose remainder w^(d+1) / (d+1)! 2^shift fits 2^-(k+10): every
    // derivative of sin and cos is at most 1.
    let budget = Float::with_val(64, 1) >> (k + 10);
    let mut rem = Float::with_val_round(64, &w, Round::Up).0;
    let mut fit = None;
    for d in 1..=cfg.max_degree {
        rem.mul_assign_round(&w, Round::Up);
        rem.div_assign_round((d + 1) as u32, Round::Up);
        let scaled = Float::with_val(64, &rem) << shift;
        if scaled <= budget {
            fit = Some((d, scaled));
            break;
        }
    }
    let (degree, taylor_rem) = fit?;
    let (limbs, binom_sum) = fixed_width(count, degree, k);
    if limbs > MAX_LIMBS {
        return None;
    }
    let frac_bits = 64 * limbs as u32;
    let basis = bases.get(count, degree);
    let half = Float::with_val(64, 0.5);
    let negative = a.mid.is_sign_negative();
    let mut beta = Vec::with_capacity(degree + 1);
    for m in 0..=degree {
        let mut g = a.mul(&basis.u[m]).add(&b.mul(&basis.v[m]));
        g = g.shl(shift + frac_bits as i32);
        if g.rad > half {
            return None;
        }
        let r = g.mid.round().to_integer().expect("finite");
        beta.push(if negative { -r } else { r });
    }
    let radius_shift = frac_bits as i64 - k as i64 + crossing as i64;
    Some(FixedPoly {
        degree,
        limbs,
        crossing,
        beta,
        radius: Integer::from(1) << radius_shift as u32,
        taylor: ceil_fixed(&taylor_rem, frac_bits),
        rounding: binom_sum,
        halves: Vec::new(),
    })
}
