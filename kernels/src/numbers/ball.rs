//! Ball arithmetic on MPFR: a midpoint and a radius such that the true value lies within.
//!
//! Every operation returns a ball that contains every result of the operation on members of its
//! operands: the midpoint is rounded to nearest at the working precision and the rounding error is
//! added to the radius; radii are 64-bit MPFR numbers and every operation on them rounds upwards.
//! This is what makes the Taylor coefficients and the remainder bound of a unit rigorous.

use rug::float::{Constant, Round};
use rug::ops::{AddAssignRound, AssignRound, MulAssignRound, SubAssignRound};
use rug::{Assign, Float, Integer};
use std::cmp::Ordering;

const RAD_PREC: u32 = 64;

/// An error of ball arithmetic: the operation is undefined somewhere on the ball.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BallError {
    #[error("division by a ball that contains zero")]
    DivisionByZero,
    #[error("{0} is undefined somewhere on the ball")]
    Domain(&'static str),
}

/// `mid ± rad`.
#[derive(Debug, Clone)]
pub struct Ball {
    pub mid: Float,
    pub rad: Float,
}

fn up(x: Float) -> Float {
    Float::with_val_round(RAD_PREC, x, Round::Up).0
}

fn rad_zero() -> Float {
    Float::new(RAD_PREC)
}

/// Whether a value that MPFR rounded to nearest (`ord` is its ternary) has an error; if so,
/// `e` (a radius) becomes an upper bound on it.
fn error_into(e: &mut Float, value: &Float, ord: Ordering) -> bool {
    if ord == Ordering::Equal || value.is_zero() {
        return false;
    }
    // |value| < 2^exp, so half an ulp is below 2^(exp - prec).
    let exp = value.get_exp().expect("finite nonzero");
    e.assign(1u32);
    *e <<= exp - value.prec() as i32;
    true
}

/// An upper bound on the error of a value that MPFR rounded to nearest (`ord` is its ternary).
fn rounding_error(value: &Float, ord: Ordering) -> Float {
    let mut e = rad_zero();
    error_into(&mut e, value, ord);
    e
}

fn add_up(a: &Float, b: &Float) -> Float {
    let mut s = Float::with_val_round(RAD_PREC, a, Round::Up).0;
    s.add_assign_round(b, Round::Up);
    s
}

fn mul_up(a: &Float, b: &Float) -> Float {
    let mut s = Float::with_val_round(RAD_PREC, a, Round::Up).0;
    s.mul_assign_round(b, Round::Up);
    s
}

/// `rad + rounding_error(value, ord)`, rounded upwards, in place: the value of
/// `add_up(rad, &rounding_error(value, ord))` (adding an exact zero changes nothing), with
/// `scratch` (a radius) holding the error term. The series' inner loops make millions of
/// balls, and fresh temporaries for every radius were about a fifth of generation's time.
fn add_rounding_error_in(rad: &mut Float, scratch: &mut Float, value: &Float, ord: Ordering) {
    if error_into(scratch, value, ord) {
        rad.add_assign_round(&*scratch, Round::Up);
    }
}

/// [`add_rounding_error_in`] with a scratch radius made only where the error is not zero.
fn add_rounding_error_fresh(rad: &mut Float, value: &Float, ord: Ordering) {
    if ord != Ordering::Equal && !value.is_zero() {
        add_rounding_error_in(rad, &mut rad_zero(), value, ord);
    }
}

impl Ball {
    /// The ball holding the integer `v` at the given precision (exact for small `v`).
    pub fn new(prec: u32, v: i64) -> Ball {
        Ball::from_integer(prec, &Integer::from(v))
    }

    pub fn from_float(prec: u32, v: &Float) -> Ball {
        let (mid, ord) = Float::with_val_round(prec, v, Round::Nearest);
        let rad = rounding_error(&mid, ord);
        Ball { mid, rad }
    }

    pub fn from_integer(prec: u32, v: &Integer) -> Ball {
        let (mid, ord) = Float::with_val_round(prec, v, Round::Nearest);
        let rad = rounding_error(&mid, ord);
        Ball { mid, rad }
    }

    pub fn zero(prec: u32) -> Ball {
        Ball {
            mid: Float::new(prec),
            rad: rad_zero(),
        }
    }

    /// `mid ± rad` for an exact midpoint and an extra radius.
    pub fn with_radius(mid: Float, rad: &Float) -> Ball {
        Ball {
            mid,
            rad: up(Float::with_val(RAD_PREC, rad)),
        }
    }

    pub fn constant(prec: u32, c: Constant) -> Ball {
        let (mid, ord) = Float::with_val_round(prec, c, Round::Nearest);
        let rad = rounding_error(&mid, ord);
        Ball { mid, rad }
    }

    /// The same ball at precision `prec`: the midpoint rounded to nearest, its rounding
    /// added to the radius.
    pub fn round_to(&self, prec: u32) -> Ball {
        let (mid, ord) = Float::with_val_round(prec, &self.mid, Round::Nearest);
        let rad = add_up(&self.rad, &rounding_error(&mid, ord));
        Ball { mid, rad }
    }

    pub fn prec(&self) -> u32 {
        self.mid.prec()
    }

    /// Upper bound of `|x|` over the ball.
    pub fn mag(&self) -> Float {
        let a = Float::with_val_round(RAD_PREC, self.mid.abs_ref(), Round::Up).0;
        add_up(&a, &self.rad)
    }

    /// Lower bound of `|x|` over the ball (zero if the ball contains zero).
    pub fn mig(&self) -> Float {
        let a = Float::with_val_round(RAD_PREC, self.mid.abs_ref(), Round::Down).0;
        let mut d = a;
        d.sub_assign_round(&self.rad, Round::Down);
        if d.is_sign_negative() {
            rad_zero()
        } else {
            d
        }
    }

    pub fn contains_zero(&self) -> bool {
        self.mig().is_zero()
    }

    /// The interval `[lo, hi]` the ball covers, rounded outwards at precision `prec`.
    pub fn bounds(&self, prec: u32) -> (Float, Float) {
        let mut lo = Float::with_val(prec, &self.mid);
        lo.sub_assign_round(&self.rad, Round::Down);
        let mut hi = Float::with_val(prec, &self.mid);
        hi.add_assign_round(&self.rad, Round::Up);
        (lo, hi)
    }

    /// The smallest ball holding `[lo, hi]`, at precision `prec`.
    pub fn from_bounds(prec: u32, lo: &Float, hi: &Float) -> Ball {
        let mut mid = Float::with_val(prec, lo + hi);
        mid >>= 1;
        let r1 = Float::with_val_round(RAD_PREC, hi - &mid, Round::Up).0;
        let r2 = Float::with_val_round(RAD_PREC, &mid - lo, Round::Up).0;
        let rad = if r1 > r2 { r1 } else { r2 };
        Ball { mid, rad }
    }

    pub fn add(&self, o: &Ball) -> Ball {
        let mut s = self.clone();
        s.accumulate(o, false);
        s
    }

    /// The same midpoint and radius as `self.add(&o.neg())`, without the negated copy.
    pub fn sub(&self, o: &Ball) -> Ball {
        let mut s = self.clone();
        s.accumulate(o, true);
        s
    }

    /// `*self = self.add(o)` without a new midpoint or radius, for the series' accumulators.
    pub fn add_assign(&mut self, o: &Ball) {
        self.accumulate(o, false);
    }

    /// `*self = self.sub(o)` in place, as [`Ball::add_assign`].
    pub fn sub_assign(&mut self, o: &Ball) {
        self.accumulate(o, true);
    }

    /// The sum (or difference) rounded once to nearest at the larger precision, the radii
    /// summed upwards with that rounding's error.
    fn accumulate(&mut self, o: &Ball, minus: bool) {
        let prec = self.prec().max(o.prec());
        if self.mid.prec() < prec {
            // Exact: a value keeps its bits at a higher precision.
            self.mid.set_prec(prec);
        }
        let ord = if minus {
            self.mid.sub_assign_round(&o.mid, Round::Nearest)
        } else {
            self.mid.add_assign_round(&o.mid, Round::Nearest)
        };
        if self.rad.prec() != RAD_PREC {
            self.rad.set_prec_round(RAD_PREC, Round::Up);
        }
        self.rad.add_assign_round(&o.rad, Round::Up);
        add_rounding_error_fresh(&mut self.rad, &self.mid, ord);
    }

    pub fn neg(&self) -> Ball {
        Ball {
            mid: -self.mid.clone(),
            rad: self.rad.clone(),
        }
    }

    pub fn mul(&self, o: &Ball) -> Ball {
        let prec = self.prec().max(o.prec());
        let (mid, ord) = Float::with_val_round(prec, &self.mid * &o.mid, Round::Nearest);
        // |ab - a'b'| <= |a| rb + |b| ra + ra rb, each term and sum rounded upwards (in place:
        // the values of `mul_up` and `add_up` on the same operands).
        let mut rad = Float::with_val_round(RAD_PREC, self.mid.abs_ref(), Round::Up).0;
        rad.mul_assign_round(&o.rad, Round::Up);
        let mut t = Float::with_val_round(RAD_PREC, o.mid.abs_ref(), Round::Up).0;
        t.mul_assign_round(&self.rad, Round::Up);
        rad.add_assign_round(&t, Round::Up);
        t.assign_round(&self.rad, Round::Up);
        t.mul_assign_round(&o.rad, Round::Up);
        rad.add_assign_round(&t, Round::Up);
        add_rounding_error_in(&mut rad, &mut t, &mid, ord);
        Ball { mid, rad }
    }

    /// Multiplication by an exact integer.
    pub fn mul_integer(&self, k: &Integer) -> Ball {
        self.mul(&Ball::from_integer(
            self.prec().max(k.significant_bits() + 1),
            k,
        ))
    }

    pub fn mul_i64(&self, k: i64) -> Ball {
        self.mul_integer(&Integer::from(k))
    }

    /// Exact multiplication by `2^e`.
    pub fn shl(&self, e: i32) -> Ball {
        let mut mid = self.mid.clone();
        mid <<= e;
        let mut rad = self.rad.clone();
        rad <<= e;
        Ball { mid, rad }
    }

    pub fn recip(&self) -> Result<Ball, BallError> {
        let m = self.mig();
        if m.is_zero() {
            return Err(BallError::DivisionByZero);
        }
        let prec = self.prec();
        let (mid, ord) = Float::with_val_round(prec, self.mid.recip_ref(), Round::Nearest);
        // |1/x - 1/m| <= r / (|m| (|m| - r)) <= r / mig^2 (mig = |m| - r)
        let mut den = Float::with_val(RAD_PREC, &m);
        den.mul_assign_round(&m, Round::Down);
        let mut rad = Float::with_val_round(RAD_PREC, &self.rad / &den, Round::Up).0;
        add_rounding_error_fresh(&mut rad, &mid, ord);
        Ok(Ball { mid, rad })
    }

    pub fn div(&self, o: &Ball) -> Result<Ball, BallError> {
        Ok(self.mul(&o.recip()?))
    }

    pub fn div_u64(&self, k: u64) -> Ball {
        let prec = self.prec();
        let (mid, ord) = Float::with_val_round(prec, &self.mid / k, Round::Nearest);
        let mut rad = Float::with_val_round(RAD_PREC, &self.rad / k, Round::Up).0;
        add_rounding_error_fresh(&mut rad, &mid, ord);
        Ball { mid, rad }
    }

    /// `f` applied to the ball, for `f` monotonic on it: evaluates the end points with directed
    /// rounding. `f` must return MPFR's ternary value for the rounding it was given.
    pub fn monotonic(
        &self,
        increasing: bool,
        f: impl Fn(&mut Float, Round) -> Ordering,
    ) -> Result<Ball, BallError> {
        let prec = self.prec();
        let (lo, hi) = self.bounds(prec + 16);
        let mut flo = Float::with_val(prec, &lo);
        let mut fhi = Float::with_val(prec, &hi);
        let (r_lo, r_hi) = if increasing {
            (Round::Down, Round::Up)
        } else {
            (Round::Up, Round::Down)
        };
        // Evaluate at full input precision: assign first (exactly, at a wider precision), then
        // round only through f.
        let mut a = Float::with_val(prec + 16, &lo);
        f(&mut a, r_lo);
        flo.assign_round_from(&a, r_lo);
        let mut b = Float::with_val(prec + 16, &hi);
        f(&mut b, r_hi);
        fhi.assign_round_from(&b, r_hi);
        if !flo.is_finite() || !fhi.is_finite() {
            return Err(BallError::Domain("function"));
        }
        let (l, h) = if increasing { (flo, fhi) } else { (fhi, flo) };
        Ok(Ball::from_bounds(prec, &l, &h))
    }

    /// `f` applied to the ball for `f` with `|f'| <= lipschitz` on it: `f(mid) ± (lipschitz rad)`.
    pub fn lipschitz(&self, lipschitz: &Float, f: impl Fn(&mut Float, Round) -> Ordering) -> Ball {
        let mut mid = self.mid.clone();
        let ord = f(&mut mid, Round::Nearest);
        let mut rad = mul_up(lipschitz, &self.rad);
        add_rounding_error_fresh(&mut rad, &mid, ord);
        Ball { mid, rad }
    }

    pub fn exp(&self) -> Result<Ball, BallError> {
        self.monotonic(true, |x, r| x.exp_round(r))
    }

    pub fn ln(&self) -> Result<Ball, BallError> {
        if self.mid.is_sign_negative() || self.contains_zero() {
            return Err(BallError::Domain("log"));
        }
        self.monotonic(true, |x, r| x.ln_round(r))
    }

    /// `(sin, cos)` of the ball: both from one MPFR call (each correctly rounded, so the same
    /// balls as two [`Ball::lipschitz`] calls with the constant 1).
    pub fn sin_cos(&self) -> (Ball, Ball) {
        let one = Float::with_val(RAD_PREC, 1);
        let mut sin = self.mid.clone();
        let mut cos = Float::new(sin.prec());
        let (os, oc) = sin.sin_cos_round(&mut cos, Round::Nearest);
        let mut rs = mul_up(&one, &self.rad);
        let mut rc = rs.clone();
        add_rounding_error_fresh(&mut rs, &sin, os);
        add_rounding_error_fresh(&mut rc, &cos, oc);
        (Ball { mid: sin, rad: rs }, Ball { mid: cos, rad: rc })
    }

    /// `(sin(pi x), cos(pi x))` of the ball.
    pub fn sin_cos_pi(&self) -> (Ball, Ball) {
        let pi = Float::with_val_round(RAD_PREC, Constant::Pi, Round::Up).0;
        (
            self.lipschitz(&pi, |x, r| x.sin_pi_round(r)),
            self.lipschitz(&pi, |x, r| x.cos_pi_round(r)),
        )
    }
}

trait AssignRoundFrom {
    fn assign_round_from(&mut self, src: &Float, round: Round);
}

impl AssignRoundFrom for Float {
    fn assign_round_from(&mut self, src: &Float, round: Round) {
        <Float as AssignRound<&Float>>::assign_round(self, src, round);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contains(b: &Ball, v: &Float) -> bool {
        let (lo, hi) = b.bounds(1024);
        &lo <= v && v <= &hi
    }

    /// One MPFR call for both gives the balls of two calls, bit for bit, at several
    /// precisions, signs and magnitudes (2^40 included: MPFR reduces it itself).
    #[test]
    fn sin_cos_in_one_call_are_the_lipschitz_balls() {
        let one = Float::with_val(RAD_PREC, 1);
        for (prec, v, rad) in [
            (80, 0.5f64, 0.0f64),
            (437, -2.75, 1e-120),
            (501, 1.0995e12, 1e-100),
            (64, -3.0e-9, 1e-30),
        ] {
            let b = Ball::with_radius(Float::with_val(prec, v), &Float::with_val(64, rad));
            let (s, c) = b.sin_cos();
            let ws = b.lipschitz(&one, |x, r| x.sin_round(r));
            let wc = b.lipschitz(&one, |x, r| x.cos_round(r));
            for (got, want) in [(s, ws), (c, wc)] {
                assert_eq!(got.mid.prec(), want.mid.prec());
                assert_eq!(got.mid, want.mid, "{v} at {prec}");
                assert_eq!(got.rad, want.rad, "{v} at {prec}");
            }
        }
    }

    #[test]
    fn arithmetic_contains_the_exact_result() {
        let p = 80;
        let third = Ball::new(p, 1).div(&Ball::new(p, 3)).unwrap();
        let exact = Float::with_val(2000, Float::with_val(2000, 1) / 3);
        assert!(contains(&third, &exact));
        let sq = third.mul(&third);
        assert!(contains(&sq, &Float::with_val(2000, &exact * &exact)));
        let s = third.add(&third).sub(&Ball::new(p, 1));
        let t = Float::with_val(2000, &exact * 2u32) - 1u32;
        assert!(contains(&s, &Float::with_val(2000, t)));
    }

    #[test]
    fn elementary_functions_contain_the_truth_on_wide_balls() {
        let p = 100;
        let b = Ball::with_radius(Float::with_val(p, 1.25), &Float::with_val(64, 0.01));
        let e = b.exp().unwrap();
        let l = b.ln().unwrap();
        let (s, c) = b.sin_cos();
        for t in [1.2401, 1.245, 1.25, 1.2577, 1.2599] {
            let x = Float::with_val(2000, t);
            assert!(contains(&e, &Float::with_val(2000, x.exp_ref())));
            assert!(contains(&l, &Float::with_val(2000, x.ln_ref())));
            assert!(contains(&s, &Float::with_val(2000, x.sin_ref())));
            assert!(contains(&c, &Float::with_val(2000, x.cos_ref())));
        }
        assert!(Ball::new(p, 0).recip().is_err());
        assert!(Ball::new(p, -1).ln().is_err());
    }

    /// The operations as first written, one temporary per step.
    mod former {
        use super::*;
        pub fn add(a: &Ball, o: &Ball) -> Ball {
            let prec = a.prec().max(o.prec());
            let (mid, ord) = Float::with_val_round(prec, &a.mid + &o.mid, Round::Nearest);
            let rad = add_up(&add_up(&a.rad, &o.rad), &rounding_error(&mid, ord));
            Ball { mid, rad }
        }
        pub fn mul(a: &Ball, o: &Ball) -> Ball {
            let prec = a.prec().max(o.prec());
            let (mid, ord) = Float::with_val_round(prec, &a.mid * &o.mid, Round::Nearest);
            let x = Float::with_val_round(RAD_PREC, a.mid.abs_ref(), Round::Up).0;
            let y = Float::with_val_round(RAD_PREC, o.mid.abs_ref(), Round::Up).0;
            let mut rad = mul_up(&x, &o.rad);
            rad = add_up(&rad, &mul_up(&y, &a.rad));
            rad = add_up(&rad, &mul_up(&a.rad, &o.rad));
            rad = add_up(&rad, &rounding_error(&mid, ord));
            Ball { mid, rad }
        }
        pub fn div_u64(a: &Ball, k: u64) -> Ball {
            let (mid, ord) = Float::with_val_round(a.prec(), &a.mid / k, Round::Nearest);
            let rad = Float::with_val_round(RAD_PREC, &a.rad / k, Round::Up).0;
            Ball {
                rad: add_up(&rad, &rounding_error(&mid, ord)),
                mid,
            }
        }
    }

    /// The same bits: midpoint (value and precision) and radius.
    fn same(a: &Ball, b: &Ball) -> bool {
        let bits = |x: &Float| (x.prec(), x.to_string_radix(16, None));
        bits(&a.mid) == bits(&b.mid) && bits(&a.rad) == bits(&b.rad)
    }

    fn ball(prec: u32, m: i64, e: i32, r: u64, re: i32) -> Ball {
        let mut mid = Float::with_val(prec, m);
        mid <<= e;
        // Some midpoints with more bits than fit a 64-bit integer.
        mid = Float::with_val(prec, &mid / 3u32);
        let mut rad = Float::with_val(RAD_PREC, r);
        rad <<= re;
        Ball { mid, rad: up(rad) }
    }

    proptest::proptest! {
        /// The in-place radii are the former ones, bit for bit: sums, differences, products and
        /// quotients by integers, exact and inexact, at the working precisions generation uses.
        #[test]
        fn in_place_radii_are_the_former_ones(
            pa in 64u32..900, pb in 64u32..900,
            ma in proptest::num::i64::ANY, mb in proptest::num::i64::ANY,
            ea in -300i32..300, eb in -300i32..300,
            ra in proptest::num::u64::ANY, rb in 0u64..4, rea in -900i32..300, reb in -900i32..300,
            rc in proptest::num::u64::ANY,
            k in 1u64..1 << 40,
        ) {
            let a = ball(pa, ma, ea, ra, rea);
            // Radii of every width: zero, a few bits (exact products), all 64.
            let b = ball(pb, mb, eb, if rb == 3 { rc } else { rb }, reb);
            proptest::prop_assert!(same(&a.add(&b), &former::add(&a, &b)));
            proptest::prop_assert!(same(&a.sub(&b), &former::add(&a, &b.neg())));
            proptest::prop_assert!(same(&a.mul(&b), &former::mul(&a, &b)));
            proptest::prop_assert!(same(&a.div_u64(k), &former::div_u64(&a, k)));
            let mut acc = a.clone();
            acc.add_assign(&b);
            proptest::prop_assert!(same(&acc, &former::add(&a, &b)));
            let mut acc = b.clone();
            acc.sub_assign(&a);
            proptest::prop_assert!(same(&acc, &former::add(&b, &a.neg())));
            let exact = Ball::new(pa, ma >> 8);
            proptest::prop_assert!(same(&exact.mul(&b), &former::mul(&exact, &b)));
            proptest::prop_assert!(same(&exact.add(&exact), &former::add(&exact, &exact)));
        }
    }
}
