//! sin and cos (and sinpi, cospi) along a progression's line from the sine and cosine of a
//! piece's center: the Taylor coefficients of `sin(theta + u delta)` in `u` are `±sin theta` or
//! `±cos theta` times `delta^j / j!`, so a piece's forward differences are
//! `beta_m = sin theta U_m + cos theta V_m`, with `U` and `V` the same for every piece of one
//! length on a unit's line (`docs/error-analysis.md` §18, "Pieces from two numbers"). Two
//! products of balls per difference, where the general route evaluates two series of the
//! function and their differences for every piece. tan (and tanpi) from the same two numbers:
//! its Taylor coefficients at `theta` follow from `tan theta` by `T' = 1 + T^2`, and its
//! remainder from the derivative polynomials `P_j` (`tan^(j) = P_j(tan)`, nonnegative
//! coefficients).

use crate::numbers::ball::Ball;
use crate::numbers::format::Precision;
use crate::oracle::function::Function;
use crate::search::dense::DENSE_MAX_DEGREE;
use crate::search::generation::{
    ceil_fixed, fixed_width, output_binade, FixedPoly, GenConfig, GenError, MAX_LIMBS,
};
use rug::float::{Constant, Round};
use rug::ops::{AddAssignRound, DivAssignRound, MulAssignRound, Pow, SubAssignRound};
use rug::{Float, Integer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// `U_m`, `V_m` (`m <= degree`) of pieces of `count` offsets: the forward differences at 0 of
/// `cos((i - c) delta)` and `sin((i - c) delta)`'s Taylor polynomials of that degree,
/// `c = floor(count / 2)`, as balls. For tan, `delta^j` and `T_mj` instead (`delta^j T_mj`
/// are the forward differences of `((i - c) delta)^j`), `u` and `v` empty.
struct Basis {
    u: Vec<Ball>,
    v: Vec<Ball>,
    delta_pow: Vec<Ball>,
    t: Vec<Vec<Integer>>,
}

/// A basis's (count, degree, tan's threshold): the threshold sets tan's precision.
type BasisKey = (u64, usize, Option<u32>);

/// The bases of one unit's line (its step `delta`, an angle), by (count, degree): a unit's
/// pieces have a few lengths only.
pub(crate) struct Bases {
    step: Ball,
    /// sin and cos: the angles of the unit's first argument and of its grid's step, each
    /// reduced once, so that an offset's angle is two ball operations instead of a reduction
    /// at the argument's exponent.
    origin: Option<(Ball, Ball)>,
    map: Mutex<HashMap<BasisKey, Arc<Basis>>>,
}

/// Steps kept by a [`Rotor`]: a thread's run of initial pieces meets a few only (the pieces of
/// a progression, the jump to the next one).
const MAX_STEPS: usize = 64;

/// One thread's last center (its offset, sine and cosine) and the sines and cosines of the
/// steps between centers met so far, by offset: the next center's sine and cosine by one
/// rotation, four products of balls, against about five times that for a sine and cosine at
/// the angle's precision (565 bits for binary64), a fifth of a piece's time. Its user bounds
/// the rotations in a row ([`Rotor::restart`]; the progression route's chains of 16): each
/// adds a few units of the balls' last place to their radii (14 bits over 20,000 rotations at
/// 565 bits, measured), far below the bits the pieces' differences need.
#[derive(Default)]
pub(crate) struct Rotor {
    last: Option<(u64, Ball, Ball)>,
    steps: HashMap<i64, (Ball, Ball)>,
}

/// The functions taken here: sin, cos and tan of the angle itself, or of `pi x`.
pub(crate) fn takes(f: Function) -> bool {
    matches!(
        f,
        Function::Sin
            | Function::Cos
            | Function::Tan
            | Function::Sinpi
            | Function::Cospi
            | Function::Tanpi
    )
}

/// tan and tanpi: their pieces are built from `tan theta` (`tan_along`), not `U` and `V`.
pub(crate) fn is_tan(f: Function) -> bool {
    matches!(f, Function::Tan | Function::Tanpi)
}

impl Rotor {
    /// Forgets the last center: the next one is computed from its own angle. The steps' sines
    /// and cosines are kept (each is a function of its step alone).
    pub(crate) fn restart(&mut self) {
        self.last = None;
    }
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

    /// The sine and cosine of offset `o`'s angle, if the origin is set: rotated from `rotor`'s
    /// last offset by the angle between them (`sin(a + d) = sin a cos d + cos a sin d`, exact,
    /// so the balls hold the truth as the angle's own would), or from its own angle where
    /// `rotor` has no last center.
    pub(crate) fn sin_cos_at(&self, o: u64, rotor: &mut Rotor) -> Option<(Ball, Ball)> {
        let (_, grid) = self.origin.as_ref()?;
        let last = rotor.last.take();
        let rotated = last.and_then(|(prev, s, c)| {
            let delta = i64::try_from(o as i128 - prev as i128).ok()?;
            if rotor.steps.len() >= MAX_STEPS {
                rotor.steps.clear();
            }
            let (sd, cd) = rotor
                .steps
                .entry(delta)
                .or_insert_with(|| grid.mul_integer(&Integer::from(delta)).sin_cos());
            let sin = s.mul(cd).add(&c.mul(sd));
            let cos = c.mul(cd).sub(&s.mul(sd));
            Some((sin, cos))
        });
        let (sin, cos) = match rotated {
            Some(sc) => sc,
            None => self.angle_at(o)?.sin_cos(),
        };
        rotor.last = Some((o, sin.clone(), cos.clone()));
        Some((sin, cos))
    }

    /// `w >= |u|` on a piece of `count` offsets: its reach from the center, `count -
    /// floor(count / 2)` steps, times the step's magnitude, rounded upwards.
    fn half_width(&self, count: u64) -> Float {
        let mut w = self.step.mag();
        w.mul_assign_round(&Float::with_val(64, count - count / 2), Round::Up);
        w
    }

    /// The basis of pieces of `count` offsets at `degree`: sin and cos's (`tan_k` `None`), or
    /// tan's for threshold `tan_k`, rounded to [`tan_prec`].
    fn get(&self, count: u64, degree: usize, tan_k: Option<u32>) -> Arc<Basis> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry((count, degree, tan_k))
            .or_insert_with(|| {
                Arc::new(if let Some(k) = tan_k {
                    powers(&self.step, count, degree, tan_prec(count, degree, k))
                } else {
                    basis(&self.step, count, degree)
                })
            })
            .clone()
    }
}

/// `T_mj = Delta^m [(i - c)^j](0) = sum_(i <= m) (-1)^(m-i) C(m, i) (i - c)^j`, exact.
fn t_mj(m: usize, j: usize, c: &Integer) -> Integer {
    let mut t = Integer::new();
    for i in 0..=m {
        let term =
            Integer::from(m as u32).binomial(i as u32) * (Integer::from(i) - c).pow(j as u32);
        if (m - i).is_multiple_of(2) {
            t += term;
        } else {
            t -= term;
        }
    }
    t
}

/// tan's basis: `delta^j` rounded to `to`, and `T_mj` for `m <= j <= degree`.
fn powers(step: &Ball, count: u64, degree: usize, to: u32) -> Basis {
    let c = Integer::from(count / 2);
    let mut d = vec![Ball::new(step.prec(), 1)];
    for j in 1..=degree {
        let next = d[j - 1].mul(step);
        d.push(next);
    }
    Basis {
        u: Vec::new(),
        v: Vec::new(),
        delta_pow: d.iter().map(|b| b.round_to(to)).collect(),
        t: (0..=degree)
            .map(|m| (0..=degree).map(|j| t_mj(m, j, &c)).collect())
            .collect(),
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
            let term = wj.mul_integer(&t_mj(m, j, &c));
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
    Basis {
        u,
        v,
        delta_pow: Vec::new(),
        t: Vec::new(),
    }
}

/// The angle of `x` for `f`: `x` itself for sin and cos (the caller has reduced it), `pi (x
/// mod 2)` for sinpi and cospi, at precision `prec`.
pub(crate) fn angle(f: Function, x: &Ball, prec: u32) -> Ball {
    match f {
        Function::Sinpi | Function::Cospi | Function::Tanpi => {
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
        Function::Sinpi | Function::Cospi | Function::Tanpi => {
            Ball::constant(prec, Constant::Pi).mul(step)
        }
        _ => step.clone(),
    }
}

/// Why a piece's polynomial is not had from two numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// `f` may vanish on the piece, or its values span more than two output binades: the
    /// general route's shape check fails there too (on 1,334 of 1,335 such pieces of sin at
    /// `2^1023` and `2^100`, each at the cost of about five pieces), so the piece is halved.
    Shape,
    /// No degree up to the maximum, words too wide, balls too wide at this precision, or a
    /// function not taken here: the general route decides.
    Other,
}

/// The fixed-point polynomial of `f` on the piece of `count` offsets whose center (offset
/// `floor(count / 2)`) has the angle `theta`, on the unit's line (`bases`): as
/// `generation::fixed_polynomial_along` builds it (§0-2: the same shape checks, degree rule,
/// width and rounding), from `sin theta` and `cos theta` alone; else why not ([`Miss`]; tan's
/// misses are all `Other`).
pub(crate) fn fixed_along(
    f: Function,
    p: Precision,
    cfg: &GenConfig,
    count: u64,
    theta: &Ball,
    bases: &Bases,
) -> Result<FixedPoly, Miss> {
    if is_tan(f) {
        return tan_along(p, cfg, count, theta, bases).ok_or(Miss::Other);
    }
    let (s, c) = theta.sin_cos();
    fixed_from_sin_cos(f, p, cfg, count, s, c, bases)
}

/// [`fixed_along`] for sin and cos (and sinpi, cospi) from `sin theta` and `cos theta`
/// themselves (`Bases::sin_cos_at`); tan's misses are `Other` here.
pub(crate) fn fixed_from_sin_cos(
    f: Function,
    p: Precision,
    cfg: &GenConfig,
    count: u64,
    s: Ball,
    c: Ball,
    bases: &Bases,
) -> Result<FixedPoly, Miss> {
    // f(theta + u) = a cos u + b sin u.
    let (a, b) = match f {
        Function::Sin | Function::Sinpi => (s, c),
        Function::Cos | Function::Cospi => (c, s.neg()),
        _ => return Err(Miss::Other),
    };
    let pb = p.bits() as i32;
    let k = cfg.min_bits;
    // |u| <= w on the piece, and |f - a| <= |b| w + w^2 / 2 there.
    let w = bases.half_width(count);
    let mut dev = Float::with_val_round(64, w.square_ref(), Round::Up).0;
    dev >>= 1;
    dev.add_assign_round(
        Float::with_val_round(64, &b.mag() * &w, Round::Up).0,
        Round::Up,
    );
    let mut lo = a.mig();
    lo.sub_assign_round(&dev, Round::Down);
    if lo <= 0 {
        return Err(Miss::Shape);
    }
    let mut hi = a.mag();
    hi.add_assign_round(&dev, Round::Up);
    let (q, crossing) = output_binade(cfg, pb, &lo, &hi).map_err(|e| match e {
        GenError::Shape => Miss::Shape,
        _ => Miss::Other,
    })?;
    let shift = pb - q;

    // Every derivative of sin and cos is at most 1.
    let (degree, taylor_rem) =
        smallest_degree(&w, shift, k, cfg.max_degree, |_| None).ok_or(Miss::Other)?;
    let basis = bases.get(count, degree, None);
    let negative = a.mid.is_sign_negative();
    let shape = Shape {
        count,
        degree,
        k,
        shift,
        crossing,
        negative,
    };
    fixed_poly(shape, &taylor_rem, |m| {
        a.mul(&basis.u[m]).add(&b.mul(&basis.v[m]))
    })
    .ok_or(Miss::Other)
}

/// The smallest degree `d <= max_degree` whose Lagrange remainder `B_(d+1) w^(d+1) / (d+1)!`,
/// scaled by `2^shift`, fits `2^-(k+10)`, with that scaled remainder: `bound(d)` is
/// `B_(d+1)`, a bound of `|f^(d+1)|` on the piece rounded upwards, or `None` for 1.
fn smallest_degree(
    w: &Float,
    shift: i32,
    k: u32,
    max_degree: usize,
    bound: impl Fn(usize) -> Option<Float>,
) -> Option<(usize, Float)> {
    let budget = Float::with_val(64, 1) >> (k + 10);
    let mut wpow = Float::with_val_round(64, w, Round::Up).0;
    for d in 1..=max_degree {
        // w^(d+1) / (d+1)!
        wpow.mul_assign_round(w, Round::Up);
        wpow.div_assign_round((d + 1) as u32, Round::Up);
        let rem = match bound(d) {
            Some(mut b) => {
                b.mul_assign_round(&wpow, Round::Up);
                b
            }
            None => wpow.clone(),
        };
        let scaled = Float::with_val(64, &rem) << shift;
        if scaled <= budget {
            return Some((d, scaled));
        }
    }
    None
}

/// What a piece's fixed-point polynomial is made of besides its differences.
struct Shape {
    count: u64,
    degree: usize,
    k: u32,
    /// `G = 2^shift |f|`.
    shift: i32,
    crossing: bool,
    /// `f < 0` on the piece: `G = -2^shift f`.
    negative: bool,
}

/// The piece's `FixedPoly` from its differences `diff(m)` (balls of `f`'s, before scaling)
/// and Taylor remainder (in units of `G`): the width of §2, each difference scaled to it and
/// rounded; `None` where the words would be too wide or a ball too wide to round.
fn fixed_poly(s: Shape, taylor_rem: &Float, diff: impl Fn(usize) -> Ball) -> Option<FixedPoly> {
    let (limbs, binom_sum) = fixed_width(s.count, s.degree, s.k);
    if limbs > MAX_LIMBS {
        return None;
    }
    let frac_bits = 64 * limbs as u32;
    let half = Float::with_val(64, 0.5);
    let mut beta = Vec::with_capacity(s.degree + 1);
    for m in 0..=s.degree {
        let g = diff(m).shl(s.shift + frac_bits as i32);
        if g.rad > half {
            return None;
        }
        let r = g.mid.round().to_integer().expect("finite");
        beta.push(if s.negative { -r } else { r });
    }
    let radius_shift = frac_bits as i64 - s.k as i64 + s.crossing as i64;
    Some(FixedPoly {
        degree: s.degree,
        limbs,
        crossing: s.crossing,
        beta,
        radius: Integer::from(1) << radius_shift as u32,
        taylor: ceil_fixed(taylor_rem, frac_bits),
        rounding: binom_sum,
        halves: Vec::new(),
    })
}

/// The coefficients of `P_j` (`tan^(j) = P_j(tan)`) for `j <= DENSE_MAX_DEGREE + 1`:
/// `P_0 = x`, `P_(j+1) = (1 + x^2) P_j'`. Every coefficient is a nonnegative integer.
fn derivative_polynomials() -> &'static [Vec<Integer>] {
    static P: OnceLock<Vec<Vec<Integer>>> = OnceLock::new();
    P.get_or_init(|| {
        let mut all = vec![vec![Integer::new(), Integer::from(1)]];
        for _ in 0..=DENSE_MAX_DEGREE {
            let prev = all.last().expect("P_0");
            // P' then (1 + x^2) P'.
            let der: Vec<Integer> = (1..prev.len())
                .map(|i| Integer::from(&prev[i] * i as u32))
                .collect();
            let mut next = vec![Integer::new(); der.len() + 2];
            for (i, c) in der.iter().enumerate() {
                next[i] += c;
                next[i + 2] += c;
            }
            all.push(next);
        }
        all
    })
}

/// `P_j(x)` for `x >= 0`, rounded upwards: every term is nonnegative.
fn derivative_bound(j: usize, x: &Float) -> Float {
    let mut acc = Float::new(64);
    for c in derivative_polynomials()[j].iter().rev() {
        acc.mul_assign_round(x, Round::Up);
        acc.add_assign_round(c, Round::Up);
    }
    acc
}

/// `(a + b) / (1 - a b)` rounded upwards and `(a - b) / (1 + a b)` downwards, for `a, b >= 0`
/// and `a b < 1`: bounds of `|tan(theta + s)|` for `|tan theta|` in `[a_lo, a_hi]`,
/// `|tan s| <= b` (each increasing in `|tan theta|`, the first increasing and the second
/// decreasing in `tan s`).
fn tan_sum_up(a: &Float, b: &Float) -> Float {
    let num = Float::with_val_round(64, a + b, Round::Up).0;
    let ab = Float::with_val_round(64, a * b, Round::Up).0;
    let den = Float::with_val_round(64, 1 - ab, Round::Down).0;
    Float::with_val_round(64, &num / &den, Round::Up).0
}

fn tan_difference_down(a: &Float, b: &Float) -> Float {
    let num = Float::with_val_round(64, a - b, Round::Down).0;
    let ab = Float::with_val_round(64, a * b, Round::Up).0;
    let den = Float::with_val_round(64, 1 + ab, Round::Up).0;
    Float::with_val_round(64, &num / &den, Round::Down).0
}

/// `tan x` of a ball, as `sin x / cos x` (`None` where the cosine's ball holds 0).
fn tan_of(x: &Ball) -> Option<Ball> {
    let (s, c) = x.sin_cos();
    s.div(&c).ok()
}

/// The precision tan's differences are computed at on pieces of `count` offsets at `degree`
/// for `k` bits: their words' fractional bits (`fixed_width`) and 128 more, which covers `G`'s
/// 2^(p+2) and the sums' rounding with room to spare.
fn tan_prec(count: u64, degree: usize, k: u32) -> u32 {
    64 * fixed_width(count, degree, k).0 as u32 + 128
}

/// tan's piece (see [`fixed_along`]): `t = tan theta` from `sin theta / cos theta`, the Taylor
/// coefficients `c_0 = t`, `c_1 = 1 + t^2`, `(j + 1) c_(j+1) = sum_(i <= j) c_i c_(j-i)`
/// (`T' = 1 + T^2`), the differences `beta_m = sum_j c_j delta^j T_mj`. On the piece
/// `|s| <= w < 1/2` and `|tan s| <= u = w / (1 - w^2 / 2)`; where `|t| u < 1` no pole lies on
/// it, `|tan|` stays within `[(|t| - u) / (1 + |t| u), (|t| + u) / (1 - |t| u)] = [lo, M]`, and
/// the remainder is at most `P_(d+1)(M) w^(d+1) / (d+1)!`.
fn tan_along(
    p: Precision,
    cfg: &GenConfig,
    count: u64,
    theta: &Ball,
    bases: &Bases,
) -> Option<FixedPoly> {
    // Bounds, the output binade and the degree need `tan theta` to a few bits only; the
    // differences to their words' width and a margin (`g.rad <= 1/2` is checked below).
    let t = tan_of(&theta.round_to(128))?;
    let pb = p.bits() as i32;
    let k = cfg.min_bits;
    let w = bases.half_width(count);
    if w >= 0.5 {
        return None;
    }
    let mut den = Float::with_val_round(64, w.square_ref(), Round::Up).0;
    den >>= 1;
    let den = Float::with_val_round(64, 1 - den, Round::Down).0;
    let u = Float::with_val_round(64, &w / &den, Round::Up).0;
    let (t_lo, t_hi) = (t.mig(), t.mag());
    if t_lo <= u || Float::with_val_round(64, &t_hi * &u, Round::Up).0 >= 1 {
        return None;
    }
    let hi = tan_sum_up(&t_hi, &u);
    let lo = tan_difference_down(&t_lo, &u);
    if lo <= 0 || !hi.is_finite() {
        return None;
    }
    let (q, crossing) = output_binade(cfg, pb, &lo, &hi).ok()?;
    let shift = pb - q;

    let max_degree = cfg.max_degree.min(DENSE_MAX_DEGREE);
    let (degree, taylor_rem) = smallest_degree(&w, shift, k, max_degree, |d| {
        Some(derivative_bound(d + 1, &hi))
    })?;
    let prec = tan_prec(count, degree, k);
    let t = tan_of(&theta.round_to(prec))?;
    let mut coef = vec![t.clone(), Ball::new(prec, 1).add(&t.mul(&t))];
    for j in 1..degree {
        // sum_(i <= j) c_i c_(j-i): the pairs i < j - i twice, the middle term once.
        let mut sum = Ball::zero(prec);
        for i in 0..j.div_ceil(2) {
            sum = sum.add(&coef[i].mul(&coef[j - i]));
        }
        sum = sum.shl(1);
        if j % 2 == 0 {
            sum = sum.add(&coef[j / 2].mul(&coef[j / 2]));
        }
        coef.push(sum.div_u64(j as u64 + 1));
    }
    let basis = bases.get(count, degree, Some(k));
    let shape = Shape {
        count,
        degree,
        k,
        shift,
        crossing,
        negative: t.mid.is_sign_negative(),
    };
    // e_j = c_j delta^j, then beta_m = sum_j e_j T_mj: products by exact integers.
    let e: Vec<Ball> = coef
        .iter()
        .zip(&basis.delta_pow)
        .map(|(c, d)| c.mul(d))
        .collect();
    fixed_poly(shape, &taylor_rem, |m| {
        let mut g = Ball::zero(prec);
        for (j, ej) in e.iter().enumerate().skip(m) {
            g = g.add(&ej.mul_integer(&basis.t[m][j]));
        }
        g
    })
}
