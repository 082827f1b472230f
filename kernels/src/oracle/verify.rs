//! MPFR verification: the exact hardness of one argument, with precision raised until certain.
//!
//! `G = 2M = |y| 2^(p - e_y)` puts the rounding breakpoints of `y = f(x)` on the integers (even:
//! a floating-point number; odd: a midpoint). The distance `d = |G - round(G)|` is computed from
//! `y` at a working precision `P`; `y` is within half an ulp, i.e. `2^(p-P)` in units of `G`, of
//! the truth. The answer is given only when that error cannot change it; otherwise `P` doubles.

use crate::numbers::format::{float_to_hex, parse_number, Argument, Format, Precision};
use crate::oracle::function::Function;
use rug::float::Round;
use rug::Float;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// Near a floating-point number (hard for directed roundings) or a midpoint (for nearest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Fp,
    Mid,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Fp => "fp",
            Kind::Mid => "mid",
        }
    }
}

/// An argument whose value lies within `2^-min_bits` half-ulps of a breakpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HrCase {
    /// The argument, C99 hex.
    pub x: String,
    /// Identical bits after the rounding bit: `floor(-log2 d)`.
    pub bits: u32,
    /// `-log2 d` truncated to four decimals, never above the truth (a lower bound, within
    /// `10^-4` of it).
    pub neg_log2_d: f64,
    pub kind: Kind,
    /// `f(x)` rounded to nearest in the format, C99 hex.
    pub rounded: String,
}

/// An argument whose value is exactly on the `(p+1)`-bit grid (or zero): not an HR-case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactCase {
    pub x: String,
    /// `f(x)`, exact, C99 hex.
    pub value: String,
}

/// Why an argument of a named format is not judged: its result leaves the format's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SkipReason {
    /// `|f(x)| >= 2^(emax+1)`: not a number of the format; not an HR-case.
    Overflow,
    /// `|f(x)| < 2^(emin-p-1)`, a quarter of the smallest subnormal: the nearest breakpoint
    /// is 0, at `d = |f(x)| 2^(p-emin)` half-ulps, and the hardness is `floor(-log2 d)`.
    Underflow,
    /// `x` is a pole of `f` (tanpi at half-integers, log at 0): `f(x)` is no number.
    Pole,
    /// A trivial region: `f(x)` lies so close to a breakpoint `g(x)` known in closed form
    /// (`x`, or the constant `f(0)`) that every argument of the run is an HR-case with at
    /// least the run's bits (or exact); listed as one run with its rule instead of case by
    /// case (`trivial.rs`).
    Trivial,
    /// An exact region: every argument of the run is an exact case (tanpi: or a pole), its
    /// value given by the run's rule (`exact.rs`: sinpi, cospi, tanpi, exp2 far from 0).
    Exact,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Overflow => "overflow",
            SkipReason::Underflow => "underflow",
            SkipReason::Pole => "pole",
            SkipReason::Trivial => "trivial",
            SkipReason::Exact => "exact",
        }
    }

    /// The rule for people: why these arguments are not listed one by one.
    pub fn rule(self) -> &'static str {
        match self {
            SkipReason::Overflow => "|f(x)| >= 2^(emax+1): overflows the format, not an HR-case",
            SkipReason::Underflow => {
                "|f(x)| < 2^(emin-p-1): rounds like 0; d = |f(x)| 2^(p-emin) half-ulps, \
                 hardness floor(-log2 d) (every such x is at least as hard as d says)"
            }
            SkipReason::Pole => "x is a pole of f: f(x) is infinite, no number to round",
            SkipReason::Trivial => {
                "f(x) rounds like g(x) (x or the constant f(0)): |f(x) - g(x)| bounded by ball \
                 arithmetic, so every x of the run is an HR-case near g(x) with at least the \
                 run's bits, or exact"
            }
            SkipReason::Exact => {
                "every x of the run is an exact case (or a pole of tanpi), its value given by \
                 the run's rule: not an HR-case"
            }
        }
    }
}

/// The verdict on one argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Verdict {
    Hard(HrCase),
    /// A named format's result out of its range: skipped, for this reason.
    Skipped(SkipReason),
    /// Not within the threshold; `bits` is its hardness.
    NotHard {
        bits: u32,
    },
    Exact(ExactCase),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("{function} is not defined (or not finite) at {x}")]
    Undefined { function: Function, x: String },
    #[error("could not decide the hardness of {function}({x}) below {prec} bits")]
    Undecided {
        function: Function,
        x: String,
        prec: u32,
    },
    #[error("argument {x} is not a nonzero number of precision {precision}")]
    NotAnArgument { x: String, precision: u32 },
    #[error("{0}")]
    Format(#[from] crate::numbers::format::FormatError),
}

const MAX_PREC: u32 = 1 << 16;

/// Classifies argument `a`: hard (at least `min_bits` identical bits), not hard, or exact.
pub fn classify(
    f: Function,
    p: Precision,
    a: &Argument,
    min_bits: u32,
) -> Result<Verdict, VerifyError> {
    classify_in(f, Format::bare(p), a, min_bits)
}

/// As [`classify`], in format `fmt`: for a named format, results below `2^emin` are judged on
/// the subnormal grid, and results that overflow or round like 0 are [`Verdict::Skipped`].
pub fn classify_in(
    f: Function,
    fmt: Format,
    a: &Argument,
    min_bits: u32,
) -> Result<Verdict, VerifyError> {
    let x = a.to_float(fmt.precision);
    classify_float_in(f, fmt, &x, min_bits)
}

/// As [`classify`], for an argument given as an MPFR number of precision `p`.
pub fn classify_float(
    f: Function,
    p: Precision,
    x: &Float,
    min_bits: u32,
) -> Result<Verdict, VerifyError> {
    classify_float_in(f, Format::bare(p), x, min_bits)
}

/// As [`classify_in`], for an argument given as an MPFR number. Evaluates `f(x)` at a working
/// precision, places it on the format's grid ([`OnGrid`]) and decides the verdict where the
/// error of that precision cannot change it, else doubles the precision.
pub fn classify_float_in(
    f: Function,
    fmt: Format,
    x: &Float,
    min_bits: u32,
) -> Result<Verdict, VerifyError> {
    let pb = fmt.precision.bits();
    let hex = || float_to_hex(x);
    let mut prec = (pb + min_bits + 64).max(128);
    loop {
        let (y, ord) = f.eval(x, prec);
        if let Some(verdict) = off_the_grid(f, fmt, x, &y, ord) {
            return verdict;
        }
        let at = OnGrid::new(fmt, &y, ord, prec);
        match at.range(fmt) {
            InRange::Beyond(r) => return Ok(Verdict::Skipped(r)),
            InRange::Unsure => {}
            InRange::Yes => {
                if at.exact && at.d.is_zero() {
                    return Ok(Verdict::Exact(ExactCase {
                        x: hex(),
                        value: float_to_hex(&y),
                    }));
                }
                if !at.near_binade_edge || at.exact {
                    if let Some(verdict) = at.judge(f, fmt, x, &y, min_bits) {
                        return Ok(verdict);
                    }
                }
            }
        }
        if prec >= MAX_PREC {
            return Err(VerifyError::Undecided {
                function: f,
                x: hex(),
                prec,
            });
        }
        prec *= 2;
    }
}

/// The verdict where `y = f(x)` (with MPFR's ternary `ord`) has no place on the grid: a pole,
/// beyond MPFR's own exponent range, undefined, or zero; `None` for a finite nonzero `y`.
fn off_the_grid(
    f: Function,
    fmt: Format,
    x: &Float,
    y: &Float,
    ord: Ordering,
) -> Option<Result<Verdict, VerifyError>> {
    let hex = || float_to_hex(x);
    let pole = (f.has_poles() && !y.is_finite()) || (x.is_zero() && y.is_infinite());
    if pole && ord == Ordering::Equal {
        return Some(Ok(Verdict::Skipped(SkipReason::Pole)));
    }
    if fmt.exponents.is_some() && y.is_infinite() && !x.is_zero() {
        // MPFR's own exponent range (about 2^(2^30)) overflowed: far beyond any format's.
        return Some(Ok(Verdict::Skipped(SkipReason::Overflow)));
    }
    if fmt.exponents.is_some() && y.is_zero() && ord != Ordering::Equal {
        // Underflow below MPFR's exponent range: far below any format's subnormals.
        return Some(Ok(Verdict::Skipped(SkipReason::Underflow)));
    }
    if !y.is_finite() {
        return Some(Err(VerifyError::Undefined {
            function: f,
            x: hex(),
        }));
    }
    if y.is_zero() {
        if ord == Ordering::Equal {
            return Some(Ok(Verdict::Exact(ExactCase {
                x: hex(),
                value: float_to_hex(y),
            })));
        }
        return Some(Err(VerifyError::Undefined {
            function: f,
            x: hex(),
        }));
    }
    None
}

/// `y = f(x)` (finite, nonzero) on the format's grid at working precision `prec`: `G = |y|
/// 2^(p - e_g)` puts the breakpoints on the integers, `d = |G - n|` from the nearest one `n`.
struct OnGrid {
    prec: u32,
    /// The binade of `y`, and that of its grid (the subnormal one below `2^emin`).
    e_y: i32,
    e_g: i32,
    g: Float,
    n: Float,
    d: Float,
    /// Whether `y` is exact.
    exact: bool,
    /// The error of `g` in units of `G`: half an ulp of `y` scaled, at most `2^(p - prec)`.
    err: Float,
    /// Whether `y` may have rounded across the power of two at the bottom of its binade.
    near_binade_edge: bool,
}

/// Whether `y` is a number of a named format's range ([`OnGrid::range`]).
enum InRange {
    Yes,
    /// Beyond it, decided: overflow or underflow.
    Beyond(SkipReason),
    /// Not decided at this precision.
    Unsure,
}

impl OnGrid {
    fn new(fmt: Format, y: &Float, ord: Ordering, prec: u32) -> OnGrid {
        let pb = fmt.precision.bits();
        let e_y = y.get_exp().expect("finite nonzero") - 1;
        // The grid: that of y's binade, or for a named format below 2^emin the subnormal one
        // (the grid of the binade 2^emin).
        let e_g = match fmt.exponents {
            Some(r) => e_y.max(r.emin),
            None => e_y,
        };
        let mut g = Float::with_val(prec, y.abs_ref());
        g <<= pb as i32 - e_g;
        // Ties (d = 1/2, G exactly between a number and a midpoint: exp2m1(13) = 8191 in
        // binary16) go to the even integer, the floating-point number: the kind is `fp`
        // (docs/error-analysis.md §7). A tie is exact (a dyadic value), so `g` is then exact.
        let mut n = Float::with_val(prec, g.round_even_ref());
        if let Some(r) = fmt.exponents {
            // 2^(emax+1) is no number of the format: near it, the nearest breakpoint is the
            // midpoint above the largest finite number.
            let top = Float::with_val(prec, 1) << (pb + 1);
            if e_y == r.emax && n == top {
                n -= 1;
            }
        }
        let d = Float::with_val(prec, &g - &n).abs();
        let exact = ord == Ordering::Equal;
        // Error of g in units of G: half an ulp of y scaled, at most 2^(p - prec).
        let err = if exact {
            Float::with_val(64, 0)
        } else {
            Float::with_val(64, 1) >> (prec as i32 - pb as i32)
        };
        // Near the bottom of the binade, y may have rounded across a power of two (which does
        // not matter at or below 2^emin: the grid is the subnormal one on both sides).
        let near_binade_edge = fmt.exponents.is_none_or(|r| e_y > r.emin) && {
            let bottom = Float::with_val(prec, 1) << pb;
            Float::with_val(prec, &g - &bottom) <= err
        };
        OnGrid {
            prec,
            e_y,
            e_g,
            g,
            n,
            d,
            exact,
            err,
            near_binade_edge,
        }
    }

    /// Whether `y` overflows or rounds like 0 in a named format (a bare precision has neither).
    fn range(&self, fmt: Format) -> InRange {
        let Some(r) = fmt.exponents else {
            return InRange::Yes;
        };
        let (prec, e_y) = (self.prec, self.e_y);
        let decidable = !self.near_binade_edge || self.exact;
        // Above 2^(emax+2) y cannot have rounded down across 2^(emax+1): no need to wait
        // for the precision that resolves the edge (2^66048 - 1 needs 66048 bits).
        if e_y > r.emax + 1 || (e_y > r.emax && decidable) {
            return InRange::Beyond(SkipReason::Overflow);
        }
        if decidable {
            // G < 1/2: rounds like 0, decided only when the error cannot cross 1/2.
            let half = Float::with_val(prec, 1) >> 1u32;
            let below = Float::with_val(prec, &self.g + &self.err) < half;
            let above = Float::with_val(prec, &self.g - &self.err) >= half;
            if below {
                return InRange::Beyond(SkipReason::Underflow);
            }
            if !above {
                return InRange::Unsure;
            }
        }
        InRange::Yes
    }

    /// The verdict on `d` where the error cannot change it: not hard (`d` above `2^-min_bits`
    /// even at its lowest), or hard with its bits known exactly; `None` otherwise.
    fn judge(
        &self,
        f: Function,
        fmt: Format,
        x: &Float,
        y: &Float,
        min_bits: u32,
    ) -> Option<Verdict> {
        let (prec, d, err, n) = (self.prec, &self.d, &self.err, &self.n);
        let pb = fmt.precision.bits();
        // At the working precision: rounded to 64 bits, a d just above a power of two
        // (within 2^-64 relative: exp(2^-126) at 8 bits) had d_lo on the power itself, and
        // the two floors never agreed at any precision.
        let d_lo = Float::with_val_round(prec, d - err, Round::Down).0;
        let d_hi = Float::with_val_round(prec, d + err, Round::Up).0;
        let threshold = Float::with_val(64, 1) >> min_bits;
        let bits_of = |v: &Float| -> u32 {
            // floor(-log2 v) for 0 < v <= 1/2
            let e = v.get_exp().expect("nonzero");
            // v in [2^(e-1), 2^e): -log2 v in (-e, 1-e]; floor is -e unless v is 2^(e-1).
            let is_pow2 = *v == (Float::with_val(64, 1) << (e - 1));
            if is_pow2 {
                (1 - e) as u32
            } else {
                (-e) as u32
            }
        };
        if d_lo > threshold {
            let bits = if d.is_zero() { u32::MAX } else { bits_of(d) };
            return Some(Verdict::NotHard { bits });
        }
        // -log2 d is printed from d_hi (a lower bound), so y must be close enough that
        // the bound loses at most 2^-30 relative: about 1.4e-9 in -log2 d, far below the
        // four decimals printed (log2p1(2^109) in bfloat16 printed 106.4713
        // above the true 106.471234 from the midpoint of a d known to 2^-13 relative).
        let sharp = self.exact || prec >= MAX_PREC || Float::with_val(64, &d_lo >> 30u32) >= *err;
        if d_hi <= threshold && d_lo.is_sign_positive() && !d_lo.is_zero() && sharp {
            let (b_lo, b_hi) = (bits_of(&d_hi), bits_of(&d_lo));
            if b_lo == b_hi {
                let n_int = n.to_integer().expect("finite");
                let kind = if n_int.is_even() { Kind::Fp } else { Kind::Mid };
                let neg_log2_d = truncated_neg_log2(&d_hi, b_lo);
                let rounded = match fmt.exponents {
                    None => float_to_hex(&f.eval(x, pb).0),
                    Some(r) => rounded_on_grid(y, &self.g, &n_int, self.e_g, pb, r.emax),
                };
                return Some(Verdict::Hard(HrCase {
                    x: float_to_hex(x),
                    bits: b_lo,
                    neg_log2_d,
                    kind,
                    rounded,
                }));
            }
        }
        None
    }
}

/// `f(x)` rounded to nearest on a named format's grid, for a decided HR-case: `n` is the
/// nearest breakpoint of `G` (`e_g` the grid's binade); near a floating-point number (`n` even)
/// that number, near a midpoint the neighbour on `y`'s side (the verdict guarantees `y` is not
/// on the midpoint). `inf` where that neighbour is `2^(emax+1)`.
fn rounded_on_grid(y: &Float, g: &Float, n: &rug::Integer, e_g: i32, pb: u32, emax: i32) -> String {
    let mut m = n.clone();
    if m.is_odd() {
        if Float::with_val(g.prec(), g - n) > 0 {
            m += 1;
        } else {
            m -= 1;
        }
    }
    let sign = if y.is_sign_negative() { "-" } else { "" };
    if e_g == emax && m == (rug::Integer::from(1) << (pb + 1)) {
        return format!("{sign}inf");
    }
    let mut v = Float::with_val(pb + 2, &m);
    v <<= e_g - pb as i32;
    if y.is_sign_negative() {
        v = -v;
    }
    float_to_hex(&v)
}

/// `-log2 d_hi` truncated to four decimals, in `[bits, bits + 1)` where `bits = floor(-log2
/// d)`: `d_hi >= d` is the computed `d` plus its error bound, so `-log2 d_hi` (log2 rounded
/// upwards, then negated) times 10^4, floored, is a lower bound of `-log2 d` times 10^4: the
/// printed decimals never exceed the truth. And `floor(neg_log2_d) == bits` always (rounding to
/// nearest printed 46.0 beside bits 45).
fn truncated_neg_log2(d_hi: &Float, bits: u32) -> f64 {
    let d = d_hi;
    let log2_up = Float::with_val_round(d.prec(), d.log2_ref(), Round::Up).0;
    let neg = -log2_up;
    let scaled = Float::with_val_round(d.prec() + 16, &neg * 10_000u32, Round::Down).0;
    let ticks = scaled
        .to_integer_round(Round::Down)
        .expect("finite")
        .0
        .to_f64();
    // The bounds hold mathematically; the clamp only guards the conversions to f64.
    let lo = f64::from(bits);
    (ticks / 1e4).clamp(lo, lo + 0.9999)
}

/// Re-verifies a reported HR-case given as C99 hex text (what the coordinator does with every
/// case a worker reports).
pub fn verify_case(
    f: Function,
    p: Precision,
    min_bits: u32,
    x: &str,
) -> Result<Verdict, VerifyError> {
    verify_case_in(f, Format::bare(p), min_bits, x)
}

/// As [`verify_case`], in format `fmt`.
pub fn verify_case_in(
    f: Function,
    fmt: Format,
    min_bits: u32,
    x: &str,
) -> Result<Verdict, VerifyError> {
    let p = fmt.precision;
    let v = parse_number(x, p.bits(), Round::Nearest)?;
    let exact = parse_number(x, 256, Round::Nearest)?;
    // A named format's arguments include zero and its subnormal numbers (and nothing off its
    // grid, however few its bits).
    if v != exact || Argument::from_float_in(&v, fmt).is_none() {
        return Err(VerifyError::NotAnArgument {
            x: x.to_string(),
            precision: p.bits(),
        });
    }
    let pole_at_zero = v.is_zero() && fmt.exponents.is_some() && f.pole_at_zero();
    if !(f.defined_at(&v) || pole_at_zero) {
        return Err(VerifyError::Undefined {
            function: f,
            x: x.to_string(),
        });
    }
    classify_float_in(f, fmt, &v, min_bits)
}

/// Whether `f` at `x` (an argument of the named format `fmt`, `f` without poles) is beyond the
/// format's range by a factor 2 at least, from one MPFR evaluation at `p + 64` bits (relative
/// error below `2^-(p+64)`, so the factor decides): `Overflow` where `|f(x)| >= 2^(emax+2)`,
/// `Underflow` where `|f(x)| < 2^(emin-p-2)` or `f(x)` rounds to 0 inexactly (beyond MPFR's
/// range). Both ends of a piece of one sign beyond for the same reason put the whole piece
/// beyond (our functions are monotonic there; docs/error-analysis.md §2): the search and
/// `skip.rs` then skip it without bisecting the band between the format's limit and MPFR's,
/// where a ball over a wide piece is too wide to decide (exp above 2^18 in binary64 took
/// 2^(e-18) pieces per binade). `None` near the limits (the ball and bisection decide) and
/// for a bare precision.
pub fn far_beyond(f: Function, fmt: Format, x: &Float) -> Option<SkipReason> {
    let r = fmt.exponents?;
    let pb = fmt.precision.bits();
    let (y, ord) = f.eval(x, pb + 64);
    if y.is_infinite() && !f.has_poles() {
        return Some(SkipReason::Overflow);
    }
    if y.is_zero() {
        return (ord != Ordering::Equal).then_some(SkipReason::Underflow);
    }
    if !y.is_finite() || f.has_poles() {
        return None;
    }
    let e = y.get_exp().expect("finite nonzero") - 1; // 2^e <= |y| < 2^(e+1)
    if e >= r.emax + 2 {
        Some(SkipReason::Overflow)
    } else if e < r.emin - pb as i32 - 2 {
        // |y| < 2^(e+1) <= 2^(emin-p-2).
        Some(SkipReason::Underflow)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hard(f: Function, x: &str, min_bits: u32) -> HrCase {
        match verify_case(f, Precision::BINARY64, min_bits, x).unwrap() {
            Verdict::Hard(c) => c,
            v => panic!("{f}({x}): {v:?}"),
        }
    }

    /// The published binary64 worst cases (Lefevre and Muller; CORE-MATH).
    #[test]
    fn published_binary64_cases_have_their_published_hardness() {
        let c = hard(Function::Exp, "-0x1.e8bdbfcd9144ep+3", 40);
        assert_eq!((c.bits, c.kind), (54, Kind::Fp));
        let c = hard(Function::Exp, "-0x1.71e0b869b5e79p+2", 40);
        assert_eq!((c.bits, c.kind), (52, Kind::Mid));
        let c = hard(Function::Log, "0x1.ac50b409c8aeep+8", 40);
        assert_eq!((c.bits, c.kind), (60, Kind::Fp));
        let c = hard(Function::Exp, "0x1.9e9cbbfd6080bp-31", 40);
        assert_eq!((c.bits, c.kind), (57, Kind::Mid));
        assert!(c.neg_log2_d >= 57.0 && c.neg_log2_d < 58.0);
    }

    #[test]
    fn exact_cases_are_reported_as_exact() {
        let p = Precision::BINARY64;
        assert!(matches!(
            verify_case(Function::Log, p, 20, "0x1p+0").unwrap(),
            Verdict::Exact(_)
        ));
        assert!(matches!(
            verify_case(Function::Cbrt, p, 20, "0x1p+3").unwrap(),
            Verdict::Exact(_)
        ));
        match verify_case(Function::Sqrt, p, 20, "0x1.2p+3").unwrap() {
            Verdict::Exact(e) => assert_eq!(e.value, "0x1.8p+1"),
            v => panic!("sqrt(9): {v:?}"),
        }
    }

    #[test]
    fn an_easy_argument_is_not_hard_and_bad_input_is_refused() {
        let p = Precision::BINARY64;
        assert!(matches!(
            verify_case(Function::Exp, p, 40, "0x1.8p+0").unwrap(),
            Verdict::NotHard { .. }
        ));
        assert!(verify_case(Function::Log, p, 40, "-0x1p+0").is_err());
        assert!(verify_case(Function::Exp, p, 40, "0x1.00000000000001p+0").is_err());
        assert!(verify_case(Function::Exp, p, 40, "zz").is_err());
    }

    /// `d = 1/2` exactly (an exact `y` halfway between a floating-point
    /// number and a midpoint) is a case of kind `fp` by convention (docs/error-analysis.md §7),
    /// with `bits` 1 and `neg_log2_d` 1.
    #[test]
    fn ties_at_one_half_are_fp() {
        let b16 = Format::named("binary16").unwrap();
        let bf16 = Format::named("bfloat16").unwrap();
        for (f, fmt, x, rounded) in [
            // 2^-26 on binary16's subnormal grid: G = 1/2, between 0 and 2^-25.
            (Function::Exp2, b16, "-0x1.ap+4", "0x0p+0"),
            // 8191: G = 4095.5; 1 - 2^-13: G = 4095.5 on the grid of [1/2, 1).
            (Function::Exp2m1, b16, "0x1.ap+3", "0x1p+13"),
            (Function::Exp2m1, b16, "-0x1.ap+3", "-0x1p+0"),
            // 999 in bfloat16: G = 499.5.
            (Function::Exp10m1, bf16, "0x1.8p+1", "0x1.f4p+9"),
        ] {
            match verify_case_in(f, fmt, 1, x).unwrap() {
                Verdict::Hard(c) => {
                    assert_eq!((c.bits, c.kind), (1, Kind::Fp), "{f}({x}): {c:?}");
                    assert_eq!(c.neg_log2_d, 1.0, "{f}({x})");
                    assert_eq!(c.rounded, rounded, "{f}({x})");
                }
                v => panic!("{f}({x}): {v:?}"),
            }
        }
    }

    /// `bits` is `floor(-log2 d)` and `neg_log2_d` is truncated, never
    /// rounded up to the next integer (this case printed bits 45 with -log2 d 46.0).
    #[test]
    fn bits_and_neg_log2_d_agree() {
        let c = hard(Function::Cbrt, "-0x1.fffffffffffe8p+2", 40);
        assert_eq!(c.bits, 45, "{c:?}");
        assert_eq!(c.neg_log2_d.floor() as u32, c.bits, "{c:?}");
        assert!(c.neg_log2_d > 45.999, "{c:?}");
    }
}
