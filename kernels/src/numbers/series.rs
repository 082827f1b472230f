//! Truncated power series with ball coefficients: the Taylor coefficients of `f(c + h t)`.
//!
//! Each operation is the classical recurrence on coefficients (exp, log, sin/cos, powers,
//! quotients, integration), evaluated in ball arithmetic, so every coefficient returned is a ball
//! that contains the exact Taylor coefficient of the composed function at every point of the
//! input's constant ball. Evaluated on a ball that covers a whole unit, coefficient `j` bounds
//! `f^(j)(xi) h^j / j!` for every `xi` there, which is the Lagrange remainder bound.

// The recurrences read several coefficient arrays at related indices; indices say it best.
#![allow(clippy::needless_range_loop)]

use crate::numbers::ball::{Ball, BallError};
use rug::float::Round;
use std::cmp::Ordering;

/// Coefficients `s[0..len]` of `sum s_j t^j`.
#[derive(Debug, Clone)]
pub struct Series {
    pub c: Vec<Ball>,
}

impl Series {
    /// The series `c0 + h t`.
    pub fn linear(c0: Ball, h: Ball, len: usize) -> Series {
        let prec = c0.prec();
        let mut c = vec![Ball::zero(prec); len];
        c[0] = c0;
        if len > 1 {
            c[1] = h;
        }
        Series { c }
    }

    pub fn len(&self) -> usize {
        self.c.len()
    }

    pub fn is_empty(&self) -> bool {
        self.c.is_empty()
    }

    fn prec(&self) -> u32 {
        self.c[0].prec()
    }

    pub fn add(&self, o: &Series) -> Series {
        Series {
            c: self.c.iter().zip(&o.c).map(|(a, b)| a.add(b)).collect(),
        }
    }

    pub fn sub(&self, o: &Series) -> Series {
        Series {
            c: self.c.iter().zip(&o.c).map(|(a, b)| a.sub(b)).collect(),
        }
    }

    pub fn neg(&self) -> Series {
        Series {
            c: self.c.iter().map(Ball::neg).collect(),
        }
    }

    pub fn scale(&self, k: &Ball) -> Series {
        Series {
            c: self.c.iter().map(|a| a.mul(k)).collect(),
        }
    }

    pub fn add_scalar(&self, k: &Ball) -> Series {
        let mut s = self.clone();
        s.c[0] = s.c[0].add(k);
        s
    }

    pub fn mul(&self, o: &Series) -> Series {
        let n = self.len().min(o.len());
        let prec = self.prec();
        let c = (0..n)
            .map(|k| {
                (0..=k).fold(Ball::zero(prec), |mut acc, j| {
                    acc.add_assign(&self.c[j].mul(&o.c[k - j]));
                    acc
                })
            })
            .collect();
        Series { c }
    }

    pub fn div(&self, o: &Series) -> Result<Series, BallError> {
        let n = self.len().min(o.len());
        let inv0 = o.c[0].recip()?;
        let mut q: Vec<Ball> = Vec::with_capacity(n);
        for k in 0..n {
            let mut acc = self.c[k].clone();
            for j in 1..=k {
                acc.sub_assign(&o.c[j].mul(&q[k - j]));
            }
            q.push(acc.mul(&inv0));
        }
        Ok(Series { c: q })
    }

    /// `j s_j` for every `j` (the first entry unused): the weights of the recurrences below,
    /// made once per series instead of once per term (the same balls).
    fn weighted(&self) -> Vec<Ball> {
        self.c
            .iter()
            .enumerate()
            .map(|(j, b)| b.mul_i64(j as i64))
            .collect()
    }

    /// The derivative, one coefficient shorter.
    pub fn derivative(&self) -> Series {
        Series {
            c: (1..self.len())
                .map(|k| self.c[k].mul_i64(k as i64))
                .collect(),
        }
    }

    /// The antiderivative with constant term `c0`, one coefficient longer.
    pub fn integral(&self, c0: Ball) -> Series {
        let mut c = Vec::with_capacity(self.len() + 1);
        c.push(c0);
        for (k, a) in self.c.iter().enumerate() {
            c.push(a.div_u64(k as u64 + 1));
        }
        Series { c }
    }

    /// `exp(s)`, with `e0` the ball of `exp(s_0)`.
    pub fn exp_with(&self, e0: Ball) -> Series {
        let n = self.len();
        let prec = self.prec();
        let mut e: Vec<Ball> = Vec::with_capacity(n);
        e.push(e0);
        let js = self.weighted();
        for k in 1..n {
            let mut acc = Ball::zero(prec);
            for j in 1..=k {
                if !adds_nothing(&js[j], &e[k - j], &acc) {
                    acc.add_assign(&js[j].mul(&e[k - j]));
                }
            }
            e.push(acc.div_u64(k as u64));
        }
        Series { c: e }
    }

    pub fn exp(&self) -> Result<Series, BallError> {
        Ok(self.exp_with(self.c[0].exp()?))
    }

    /// `log(s)`, with `l0` the ball of `log(s_0)`.
    pub fn ln_with(&self, l0: Ball) -> Result<Series, BallError> {
        let n = self.len();
        let prec = self.prec();
        let inv0 = self.c[0].recip()?;
        let mut l: Vec<Ball> = Vec::with_capacity(n);
        l.push(l0);
        // j l_j, each made once (as `weighted`).
        let mut jl: Vec<Ball> = vec![Ball::zero(prec)];
        for k in 1..n {
            let mut acc = Ball::zero(prec);
            for j in 1..k {
                acc.add_assign(&jl[j].mul(&self.c[k - j]));
            }
            let v = self.c[k].sub(&acc.div_u64(k as u64)).mul(&inv0);
            jl.push(v.mul_i64(k as i64));
            l.push(v);
        }
        Ok(Series { c: l })
    }

    pub fn ln(&self) -> Result<Series, BallError> {
        let l0 = self.c[0].ln()?;
        self.ln_with(l0)
    }

    /// `(sin(s), cos(s))` with the balls of `sin(s_0)`, `cos(s_0)`.
    pub fn sin_cos_with(&self, s0: Ball, c0: Ball) -> (Series, Series) {
        let n = self.len();
        let prec = self.prec();
        let mut s: Vec<Ball> = Vec::with_capacity(n);
        let mut c: Vec<Ball> = Vec::with_capacity(n);
        s.push(s0);
        c.push(c0);
        let js = self.weighted();
        for k in 1..n {
            let mut acc_s = Ball::zero(prec);
            let mut acc_c = Ball::zero(prec);
            for j in 1..=k {
                if adds_nothing(&js[j], &c[k - j], &acc_s)
                    && adds_nothing(&js[j], &s[k - j], &acc_c)
                {
                    continue;
                }
                acc_s.add_assign(&js[j].mul(&c[k - j]));
                acc_c.sub_assign(&js[j].mul(&s[k - j]));
            }
            s.push(acc_s.div_u64(k as u64));
            c.push(acc_c.div_u64(k as u64));
        }
        (Series { c: s }, Series { c })
    }

    /// `s^alpha` with `p0` the ball of `s_0^alpha`, for `s_0` away from zero.
    pub fn pow_with(&self, alpha: &Ball, p0: Ball) -> Result<Series, BallError> {
        let n = self.len();
        let prec = self.prec();
        let inv0 = self.c[0].recip()?;
        let mut p: Vec<Ball> = Vec::with_capacity(n);
        p.push(p0);
        for k in 1..n {
            let mut acc = Ball::zero(prec);
            for j in 1..=k {
                // (alpha j - (k - j)) s_j p_(k-j)
                let w = alpha
                    .mul_i64(j as i64)
                    .sub(&Ball::new(prec, (k - j) as i64));
                acc.add_assign(&w.mul(&self.c[j]).mul(&p[k - j]));
            }
            p.push(acc.mul(&inv0).div_u64(k as u64));
        }
        Ok(Series { c: p })
    }

    /// `f(s_0)` for a monotonic `f`, as a ball (a helper for constant terms).
    pub fn monotonic0(
        &self,
        increasing: bool,
        f: impl Fn(&mut rug::Float, Round) -> Ordering,
    ) -> Result<Ball, BallError> {
        self.c[0].monotonic(increasing, f)
    }
}

/// Whether adding `w` times `x` to `acc` leaves `acc` as it is, bit for bit: `w` is an exact
/// zero (so is the product, radius included) and the product's precision does not exceed the
/// sum's (which would raise it). The recurrences skip such terms: for the linear series that
/// generation's lines are, all but one term of each coefficient.
fn adds_nothing(w: &Ball, x: &Ball, acc: &Ball) -> bool {
    w.mid.is_zero() && w.rad.is_zero() && w.prec().max(x.prec()) <= acc.prec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rug::Float;

    fn close(b: &Ball, v: f64) -> bool {
        let (lo, hi) = b.bounds(200);
        let tol = 1e-12 * v.abs().max(1.0);
        lo.to_f64() - tol <= v && v <= hi.to_f64() + tol && (hi.to_f64() - lo.to_f64()) < 1e-20
    }

    /// The recurrences as they were before exact-zero terms were left out: every term added.
    fn every_term(u: &Series, e0: Ball, s0: Ball, c0: Ball) -> (Vec<Ball>, Vec<Ball>, Vec<Ball>) {
        let (n, prec, js) = (u.len(), u.prec(), u.weighted());
        let (mut e, mut s, mut c) = (vec![e0], vec![s0], vec![c0]);
        for k in 1..n {
            let (mut ae, mut as_, mut ac) = (Ball::zero(prec), Ball::zero(prec), Ball::zero(prec));
            for j in 1..=k {
                ae.add_assign(&js[j].mul(&e[k - j]));
                as_.add_assign(&js[j].mul(&c[k - j]));
                ac.sub_assign(&js[j].mul(&s[k - j]));
            }
            e.push(ae.div_u64(k as u64));
            s.push(as_.div_u64(k as u64));
            c.push(ac.div_u64(k as u64));
        }
        (e, s, c)
    }

    fn same_bits(a: &[Ball], b: &[Ball]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                x.mid.prec() == y.mid.prec()
                    && x.mid.to_string_radix(16, None) == y.mid.to_string_radix(16, None)
                    && x.mid.is_sign_negative() == y.mid.is_sign_negative()
                    && x.rad.to_string_radix(16, None) == y.rad.to_string_radix(16, None)
            })
    }

    /// Leaving out the terms of exact-zero weight changes no bit of any coefficient, radius or
    /// precision: on lines (generation's), on series with zero coefficients between others, and
    /// with first coefficients more precise than the series (which raise the sums' precision,
    /// so a zero term that would raise it is kept).
    #[test]
    fn exact_zero_terms_change_no_bit() {
        let x = Float::with_val(300, 0.7390851332151607f64) + (Float::with_val(300, 1) >> 250u32);
        let h = Ball::from_float(300, &(Float::with_val(300, 3) >> 40u32));
        let line = |n| Series::linear(Ball::from_float(300, &x), h.clone(), n);
        let mut gapped = line(9);
        gapped.c[3] = Ball::from_float(300, &(Float::with_val(300, -5) >> 90u32));
        gapped.c[6] = Ball::with_radius(Float::with_val(300, 1e-30), &Float::with_val(64, 1e-80));
        let mut flat = gapped.clone();
        flat.c[1] = Ball::zero(300);
        for (u, extra) in [
            (line(18), 0),
            (gapped.clone(), 0),
            (line(12), 200),
            (gapped, 200),
            (flat, 200),
        ] {
            let p0 = u.prec() + extra;
            let x0 = Float::with_val(p0, &u.c[0].mid);
            let e0 = Ball::from_float(p0, &Float::with_val(p0, x0.exp_ref()));
            let s0 = Ball::from_float(p0, &Float::with_val(p0, x0.sin_ref()));
            let c0 = Ball::from_float(p0, &Float::with_val(p0, x0.cos_ref()));
            let (we, ws, wc) = every_term(&u, e0.clone(), s0.clone(), c0.clone());
            let (gs, gc) = u.sin_cos_with(s0, c0);
            assert!(same_bits(&u.exp_with(e0).c, &we), "exp, extra {extra}");
            assert!(same_bits(&gs.c, &ws), "sin, extra {extra}");
            assert!(same_bits(&gc.c, &wc), "cos, extra {extra}");
        }
    }

    #[test]
    fn exp_series_coefficients_are_exp_over_factorials() {
        let s = Series::linear(Ball::new(200, 1), Ball::new(200, 1), 8);
        let e = s.exp().unwrap();
        let mut fact = 1.0;
        for (k, c) in e.c.iter().enumerate() {
            if k > 0 {
                fact *= k as f64;
            }
            assert!(close(c, std::f64::consts::E / fact), "k={k}");
        }
    }

    #[test]
    fn log_sin_cos_pow_div_agree_with_known_series() {
        // log(1 + t) = t - t^2/2 + t^3/3 ...
        let s = Series::linear(Ball::new(200, 1), Ball::new(200, 1), 6);
        let l = s.ln().unwrap();
        for (k, want) in [0.0, 1.0, -0.5, 1.0 / 3.0, -0.25, 0.2].iter().enumerate() {
            assert!(close(&l.c[k], *want), "log k={k}");
        }
        // sin t, cos t at 0
        let t = Series::linear(Ball::new(200, 0), Ball::new(200, 1), 6);
        let (sn, cs) = t.sin_cos_with(Ball::new(200, 0), Ball::new(200, 1));
        for (k, want) in [0.0, 1.0, 0.0, -1.0 / 6.0, 0.0, 1.0 / 120.0]
            .iter()
            .enumerate()
        {
            assert!(close(&sn.c[k], *want), "sin k={k}");
        }
        assert!(close(&cs.c[2], -0.5));
        // sqrt(1 + t) = 1 + t/2 - t^2/8 + t^3/16
        let half = Ball::new(200, 1).div_u64(2);
        let r = s.pow_with(&half, Ball::new(200, 1)).unwrap();
        for (k, want) in [1.0, 0.5, -0.125, 0.0625].iter().enumerate() {
            assert!(close(&r.c[k], *want), "sqrt k={k}");
        }
        // 1 / (1 + t) = 1 - t + t^2 ...
        let one = Series::linear(Ball::new(200, 1), Ball::new(200, 0), 6);
        let q = one.div(&s).unwrap();
        for k in 0..6 {
            let want = if k % 2 == 0 { 1.0 } else { -1.0 };
            assert!(close(&q.c[k], want), "div k={k}");
        }
        let d = q.derivative();
        assert!(close(&d.c[0], -1.0) && close(&d.c[1], 2.0));
        let i = d.integral(Ball::new(200, 1));
        assert!(close(&i.c[3], -1.0));
        let _ = Float::new(2);
    }
}
