//! The functions the engine searches, defined once: name, MPFR evaluation, series rule, domain.
//!
//! Adding a function means adding a variant here; the compiler then asks for its MPFR evaluation
//! (the oracle used by verification) and its series rule (used by generation), and the tests
//! compare the two on every function.

use crate::numbers::ball::{Ball, BallError};
use crate::numbers::series::Series;
use rug::float::{Constant, Round};
use rug::Float;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

macro_rules! functions {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// A univariate function with a correctly rounded MPFR implementation.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub enum Function { $($variant),* }

        impl Function {
            /// Every function, in a stable order.
            pub const ALL: &'static [Function] = &[$(Function::$variant),*];

            /// The name used on the command line and over the API.
            pub fn name(self) -> &'static str {
                match self { $(Function::$variant => $name),* }
            }
        }
    };
}

functions! {
    Exp => "exp", Exp2 => "exp2", Exp10 => "exp10",
    Expm1 => "expm1", Exp2m1 => "exp2m1", Exp10m1 => "exp10m1",
    Log => "log", Log2 => "log2", Log10 => "log10",
    Log1p => "log1p", Log2p1 => "log2p1", Log10p1 => "log10p1",
    Sin => "sin", Cos => "cos", Tan => "tan",
    Sinpi => "sinpi", Cospi => "cospi", Tanpi => "tanpi",
    Asin => "asin", Acos => "acos", Atan => "atan",
    Asinpi => "asinpi", Acospi => "acospi", Atanpi => "atanpi",
    Sinh => "sinh", Cosh => "cosh", Tanh => "tanh",
    Asinh => "asinh", Acosh => "acosh", Atanh => "atanh",
    Sqrt => "sqrt", Rsqrt => "rsqrt", Cbrt => "cbrt",
    Erf => "erf", Erfc => "erfc",
}

/// An unknown function name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown function '{name}'; known: {known}")]
pub struct UnknownFunction {
    pub name: String,
    pub known: String,
}

impl FromStr for Function {
    type Err = UnknownFunction;
    fn from_str(s: &str) -> Result<Function, UnknownFunction> {
        let t = s.trim().to_ascii_lowercase();
        let t = match t.as_str() {
            "ln" => "log",
            "log1p" | "lnp1" => "log1p",
            "rootn3" => "cbrt",
            "invsqrt" => "rsqrt",
            other => other,
        };
        Function::ALL
            .iter()
            .copied()
            .find(|f| f.name() == t)
            .ok_or_else(|| UnknownFunction {
                name: s.to_string(),
                known: Function::ALL
                    .iter()
                    .map(|f| f.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl TryFrom<String> for Function {
    type Error = UnknownFunction;
    fn try_from(s: String) -> Result<Function, UnknownFunction> {
        s.parse()
    }
}

impl From<Function> for String {
    fn from(f: Function) -> String {
        f.name().to_string()
    }
}

impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Function {
    /// `f(x)` in place, rounded with `r`, returning MPFR's ternary value: the oracle.
    pub fn eval_round(self, x: &mut Float, r: Round) -> Ordering {
        use Function::*;
        match self {
            Exp => x.exp_round(r),
            Exp2 => x.exp2_round(r),
            Exp10 => x.exp10_round(r),
            Expm1 => x.exp_m1_round(r),
            Exp2m1 => x.exp2_m1_round(r),
            Exp10m1 => x.exp10_m1_round(r),
            Log => x.ln_round(r),
            Log2 => x.log2_round(r),
            Log10 => x.log10_round(r),
            Log1p => x.ln_1p_round(r),
            Log2p1 => x.log2_1p_round(r),
            Log10p1 => x.log10_1p_round(r),
            Sin => x.sin_round(r),
            Cos => x.cos_round(r),
            Tan => x.tan_round(r),
            Sinpi => x.sin_pi_round(r),
            Cospi => x.cos_pi_round(r),
            Tanpi => x.tan_pi_round(r),
            Asin => x.asin_round(r),
            Acos => x.acos_round(r),
            Atan => x.atan_round(r),
            Asinpi => x.asin_pi_round(r),
            Acospi => x.acos_pi_round(r),
            Atanpi => x.atan_pi_round(r),
            Sinh => x.sinh_round(r),
            Cosh => x.cosh_round(r),
            Tanh => x.tanh_round(r),
            Asinh => x.asinh_round(r),
            Acosh => x.acosh_round(r),
            Atanh => x.atanh_round(r),
            Sqrt => x.sqrt_round(r),
            Rsqrt => x.recip_sqrt_round(r),
            Cbrt => x.cbrt_round(r),
            Erf => x.erf_round(r),
            Erfc => x.erfc_round(r),
        }
    }

    /// `f(x)` at precision `prec` (at least `x`'s), rounded to nearest once, with its ternary
    /// value.
    pub fn eval(self, x: &Float, prec: u32) -> (Float, Ordering) {
        assert!(
            x.prec() <= prec,
            "evaluation below the argument's precision"
        );
        // The copy is exact since prec >= x.prec(); f then rounds once.
        let mut y = Float::with_val(prec, x);
        let ord = self.eval_round(&mut y, Round::Nearest);
        (y, ord)
    }

    /// Whether `f` has poles at finite arguments of a format (tanpi at half-integers; tan's
    /// poles are irrational): a range may hold them, and they are skipped and listed.
    pub fn has_poles(self) -> bool {
        matches!(self, Function::Tan | Function::Tanpi)
    }

    /// Whether `f(0)` is an exact infinity (log, log2, log10, rsqrt): zero, when a named
    /// format's range holds it, is then listed as a pole rather than refused.
    pub fn pole_at_zero(self) -> bool {
        let (y, ord) = self.eval(&Float::new(8), 64);
        y.is_infinite() && ord == Ordering::Equal
    }

    /// Whether `f` is defined (and finite) at `x`; arguments outside are refused up front.
    pub fn defined_at(self, x: &Float) -> bool {
        use Function::*;
        let one = || Float::with_val(8, 1);
        match self {
            Log | Log2 | Log10 | Rsqrt => x.is_sign_positive() && !x.is_zero(),
            Sqrt => x.is_sign_positive() || x.is_zero(),
            Log1p | Log2p1 | Log10p1 => *x > -one(),
            Asin | Acos | Asinpi | Acospi => x.clone().abs() <= one(),
            Acosh => *x >= one(),
            Atanh => x.clone().abs() < one(),
            Tan | Tanpi => {
                let mut y = Float::with_val(x.prec() + 64, x);
                let ord = self.eval_round(&mut y, Round::Nearest);
                y.is_finite() || ord != Ordering::Equal
            }
            _ => true,
        }
    }

    /// The Taylor series of `f(u)` where `u` is a series whose constant term is a ball; the
    /// result has `u.len()` coefficients.
    pub fn series(self, u: &Series) -> Result<Series, BallError> {
        use Function::*;
        let prec = u.c[0].prec();
        let ln2 = || Ball::constant(prec, Constant::Log2);
        let ln10 = || Ball::new(prec, 10).ln();
        let pi = || Ball::constant(prec, Constant::Pi);
        let u0 = &u.c[0];
        let one = Ball::new(prec, 1);
        Ok(match self {
            Exp => u.exp()?,
            Exp2 => u
                .scale(&ln2())
                .exp_with(u0.monotonic(true, |x, r| x.exp2_round(r))?),
            Exp10 => u
                .scale(&ln10()?)
                .exp_with(u0.monotonic(true, |x, r| x.exp10_round(r))?),
            Expm1 => {
                let mut e = u.exp()?;
                e.c[0] = u0.monotonic(true, |x, r| x.exp_m1_round(r))?;
                e
            }
            Exp2m1 => {
                let mut e = u.scale(&ln2()).exp()?;
                e.c[0] = u0.monotonic(true, |x, r| x.exp2_m1_round(r))?;
                e
            }
            Exp10m1 => {
                let mut e = u.scale(&ln10()?).exp()?;
                e.c[0] = u0.monotonic(true, |x, r| x.exp10_m1_round(r))?;
                e
            }
            Log => u.ln()?,
            Log2 | Log10 => {
                let base = if self == Log2 { ln2() } else { ln10()? };
                let mut l = u.ln()?.scale(&base.recip()?);
                l.c[0] = if self == Log2 {
                    u0.monotonic(true, |x, r| x.log2_round(r))?
                } else {
                    u0.monotonic(true, |x, r| x.log10_round(r))?
                };
                l
            }
            Log1p | Log2p1 | Log10p1 => {
                let v = u.add_scalar(&one);
                let l0 = match self {
                    Log1p => u0.monotonic(true, |x, r| x.ln_1p_round(r))?,
                    Log2p1 => u0.monotonic(true, |x, r| x.log2_1p_round(r))?,
                    _ => u0.monotonic(true, |x, r| x.log10_1p_round(r))?,
                };
                let mut l = match self {
                    Log1p => v.ln_with(l0.clone())?,
                    Log2p1 => v.ln_with(l0.clone())?.scale(&ln2().recip()?),
                    _ => v.ln_with(l0.clone())?.scale(&ln10()?.recip()?),
                };
                l.c[0] = l0;
                l
            }
            Sin | Cos | Tan => {
                let (s0, c0) = u0.sin_cos();
                let (s, c) = u.sin_cos_with(s0, c0);
                match self {
                    Sin => s,
                    Cos => c,
                    _ => s.div(&c)?,
                }
            }
            Sinpi | Cospi | Tanpi => {
                let (s0, c0) = u0.sin_cos_pi();
                let (s, c) = u.scale(&pi()).sin_cos_with(s0, c0);
                match self {
                    Sinpi => s,
                    Cospi => c,
                    _ => s.div(&c)?,
                }
            }
            Atan | Atanpi => {
                // atan' = u' / (1 + u^2)
                let d = u.derivative().div(&u.mul(u).add_scalar(&one))?;
                let c0 = u0.monotonic(true, |x, r| x.atan_round(r))?;
                let s = d.integral(c0);
                if self == Atan {
                    s
                } else {
                    let mut s = s.scale(&pi().recip()?);
                    s.c[0] = u0.monotonic(true, |x, r| x.atan_pi_round(r))?;
                    s
                }
            }
            Asin | Acos | Asinpi | Acospi => {
                // asin' = u' (1 - u^2)^(-1/2)
                let w = u.mul(u).neg().add_scalar(&one);
                let w0 = w.c[0].clone();
                let p0 = w0.monotonic(false, |x, r| x.recip_sqrt_round(r))?;
                let minus_half = Ball::new(prec, -1).div_u64(2);
                let d = u.derivative().mul(&w.pow_with(&minus_half, p0)?);
                let (d, c0) = match self {
                    Asin => (d, u0.monotonic(true, |x, r| x.asin_round(r))?),
                    Acos => (d.neg(), u0.monotonic(false, |x, r| x.acos_round(r))?),
                    Asinpi => (
                        d.scale(&pi().recip()?),
                        u0.monotonic(true, |x, r| x.asin_pi_round(r))?,
                    ),
                    _ => (
                        d.scale(&pi().recip()?).neg(),
                        u0.monotonic(false, |x, r| x.acos_pi_round(r))?,
                    ),
                };
                d.integral(c0)
            }
            Sinh | Cosh | Tanh => {
                let e = u.exp()?;
                let ei = u.neg().exp()?;
                let half = |s: Series| Series {
                    c: s.c.iter().map(|b| b.div_u64(2)).collect(),
                };
                let mut sh = half(e.sub(&ei));
                let mut ch = half(e.add(&ei));
                sh.c[0] = u0.monotonic(true, |x, r| x.sinh_round(r))?;
                // cosh is even: evaluate on |u0| where it increases.
                let (lo, hi) = u0.bounds(prec + 16);
                if !(lo.is_sign_negative() && hi.is_sign_positive()) {
                    let a = if u0.mid.is_sign_negative() {
                        u0.neg()
                    } else {
                        u0.clone()
                    };
                    ch.c[0] = a.monotonic(true, |x, r| x.cosh_round(r))?;
                }
                match self {
                    Sinh => sh,
                    Cosh => ch,
                    _ => {
                        let mut t = sh.div(&ch)?;
                        t.c[0] = u0.monotonic(true, |x, r| x.tanh_round(r))?;
                        t
                    }
                }
            }
            Asinh | Acosh => {
                // asinh' = u' (u^2 + 1)^(-1/2), acosh' = u' (u^2 - 1)^(-1/2)
                let sign = if self == Asinh { 1 } else { -1 };
                let w = u.mul(u).add_scalar(&Ball::new(prec, sign));
                let p0 = w.c[0].monotonic(false, |x, r| x.recip_sqrt_round(r))?;
                let minus_half = Ball::new(prec, -1).div_u64(2);
                let d = u.derivative().mul(&w.pow_with(&minus_half, p0)?);
                let c0 = if self == Asinh {
                    u0.monotonic(true, |x, r| x.asinh_round(r))?
                } else {
                    u0.monotonic(true, |x, r| x.acosh_round(r))?
                };
                d.integral(c0)
            }
            Atanh => {
                let d = u.derivative().div(&u.mul(u).neg().add_scalar(&one))?;
                d.integral(u0.monotonic(true, |x, r| x.atanh_round(r))?)
            }
            Sqrt => {
                let p0 = u0.monotonic(true, |x, r| x.sqrt_round(r))?;
                u.pow_with(&Ball::new(prec, 1).div_u64(2), p0)?
            }
            Rsqrt => {
                let p0 = u0.monotonic(false, |x, r| x.recip_sqrt_round(r))?;
                u.pow_with(&Ball::new(prec, -1).div_u64(2), p0)?
            }
            Cbrt => {
                let p0 = u0.monotonic(true, |x, r| x.cbrt_round(r))?;
                u.pow_with(&Ball::new(prec, 1).div_u64(3), p0)?
            }
            Erf | Erfc => {
                // erf' = 2/sqrt(pi) exp(-u^2) u'
                let k = pi()
                    .monotonic(false, |x, r| x.recip_sqrt_round(r))?
                    .mul_i64(2);
                let g = u.mul(u).neg().exp()?.mul(&u.derivative()).scale(&k);
                if self == Erf {
                    g.integral(u0.monotonic(true, |x, r| x.erf_round(r))?)
                } else {
                    g.neg()
                        .integral(u0.monotonic(false, |x, r| x.erfc_round(r))?)
                }
            }
        })
        .map(|s| truncate(s, u.len()))
    }
}

fn truncate(mut s: Series, len: usize) -> Series {
    s.c.truncate(len);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known_ones() {
        for f in Function::ALL {
            assert_eq!(f.name().parse::<Function>().unwrap(), *f);
        }
        let e = "expp".parse::<Function>().unwrap_err();
        assert!(e.to_string().contains("exp, exp2"));
        assert_eq!("LN".parse::<Function>().unwrap(), Function::Log);
    }

    fn sample_point(f: Function) -> f64 {
        use Function::*;
        match f {
            Asin | Acos | Asinpi | Acospi | Atanh => 0.375,
            Acosh => 1.75,
            Tanpi => 0.1875,
            _ => 0.8125,
        }
    }

    /// The series rule of every function agrees with MPFR: the constant term with `f`, and the
    /// first coefficients with finite differences of MPFR values at a tiny step.
    #[test]
    fn series_rules_agree_with_mpfr_for_every_function() {
        let prec = 256;
        for &f in Function::ALL {
            let x0 = sample_point(f);
            let h = Float::with_val(prec, 1) >> 40u32;
            let u = Series::linear(
                Ball::from_float(prec, &Float::with_val(prec, x0)),
                Ball::from_float(prec, &h),
                5,
            );
            let s = f.series(&u).unwrap_or_else(|e| panic!("{f}: {e}"));
            // g(t) = f(x0 + h t): compare sum_j s_j t^j with MPFR at t = 1, 2, 3.
            for t in 1..=3i32 {
                let x = Float::with_val(prec, x0) + Float::with_val(prec, &h * t);
                let (want, _) = f.eval(&Float::with_val(prec, x), prec);
                let mut acc = Float::with_val(prec, 0);
                let mut tp = Float::with_val(prec, 1);
                for c in &s.c {
                    acc += Float::with_val(prec, &c.mid * &tp);
                    tp *= t;
                }
                let err = Float::with_val(prec, &acc - &want).abs();
                let scale = want.clone().abs().max(&Float::with_val(prec, 1e-30));
                let rel = Float::with_val(prec, &err / &scale).to_f64();
                assert!(rel < 1e-55, "{f} at t={t}: relative error {rel:e}");
            }
            // The radii stay tiny at this precision.
            for c in &s.c {
                assert!(c.rad.to_f64() < 1e-60, "{f}: radius {}", c.rad);
            }
        }
    }
}
