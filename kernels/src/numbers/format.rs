//! Precisions, arguments as integers of a binade, and C99 hexadecimal input and output.

use rug::float::Round;
use rug::{Float, Integer};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// The precision `p` of the format searched, in bits (binary32: 24, binary64: 53).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(try_from = "u32", into = "u32")]
pub struct Precision(u32);

/// Errors of parsing formats, precisions and arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("precision {0} is outside 8..=64")]
    PrecisionOutOfRange(u32),
    #[error("unknown format '{0}': use binary16, bfloat16, binary32, binary64, binary80 or a precision in bits from 8 to 64 (p24)")]
    UnknownFormat(String),
    #[error("cannot read '{0}' as a number: use C99 hex (0x1.8p+0) or decimal (1.5, -2e-3)")]
    BadNumber(String),
    #[error("'{0}' is not finite")]
    NotFinite(String),
}

impl Precision {
    pub const MIN: u32 = 8;
    pub const MAX: u32 = 64;
    pub const BINARY32: Precision = Precision(24);
    pub const BINARY64: Precision = Precision(53);

    pub fn new(bits: u32) -> Result<Precision, FormatError> {
        if (Self::MIN..=Self::MAX).contains(&bits) {
            Ok(Precision(bits))
        } else {
            Err(FormatError::PrecisionOutOfRange(bits))
        }
    }

    pub fn bits(self) -> u32 {
        self.0
    }

    /// The conventional name: `binary32`, `binary64`, else `p<bits>`.
    pub fn name(self) -> String {
        match self.0 {
            24 => "binary32".into(),
            53 => "binary64".into(),
            b => format!("p{b}"),
        }
    }
}

impl From<Precision> for u32 {
    fn from(p: Precision) -> u32 {
        p.0
    }
}

impl TryFrom<u32> for Precision {
    type Error = FormatError;
    fn try_from(bits: u32) -> Result<Self, FormatError> {
        Precision::new(bits)
    }
}

impl FromStr for Precision {
    type Err = FormatError;
    /// Accepts `binary32`, `binary64`, `p24`, or a bare number of bits.
    fn from_str(s: &str) -> Result<Self, FormatError> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "binary32" | "float" | "single" => Ok(Precision::BINARY32),
            "binary64" | "double" => Ok(Precision::BINARY64),
            _ => {
                let digits = t.strip_prefix('p').unwrap_or(&t);
                digits
                    .parse::<u32>()
                    .map_err(|_| FormatError::UnknownFormat(s.to_string()))
                    .and_then(Precision::new)
            }
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The exponent range of a named format: its normal numbers have exponents `emin..=emax`,
/// below `2^emin` lie the subnormal numbers (multiples of `2^(emin - p + 1)`), and results of
/// magnitude `2^(emax + 1)` or more overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Exponents {
    pub emin: i32,
    pub emax: i32,
}

/// What a search is about: a precision and, for a named format, its exponent range. A bare
/// precision (`p24`, `24`) has an unbounded exponent: every result is judged as a
/// precision-`p` number, with no subnormal numbers and no overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Format {
    pub precision: Precision,
    pub exponents: Option<Exponents>,
}

/// The smallest and largest binade exponents searched for a bare precision `p` (the arguments
/// of a named format are its normal numbers: [`format_exponent_range`]).
pub fn exponent_range(p: Precision) -> (i32, i32) {
    if p == Precision::BINARY32 {
        (-126, 127)
    } else {
        (-1022, 1023)
    }
}

/// The binade exponents of the arguments searched in format `fmt`.
pub fn format_exponent_range(fmt: Format) -> (i32, i32) {
    match fmt.exponents {
        Some(x) => (x.emin, x.emax),
        None => exponent_range(fmt.precision),
    }
}

/// The named formats: name, precision, `emin`, `emax` (IEEE 754 binary16, binary32, binary64;
/// Google's bfloat16; the x87 extended format binary80 with its explicit leading bit, so
/// `p = 64`).
const NAMED: &[(&str, u32, i32, i32)] = &[
    ("binary16", 11, -14, 15),
    ("bfloat16", 8, -126, 127),
    ("binary32", 24, -126, 127),
    ("binary64", 53, -1022, 1023),
    ("binary80", 64, -16382, 16383),
];

impl Format {
    /// A bare precision: unbounded exponent.
    pub fn bare(precision: Precision) -> Format {
        Format {
            precision,
            exponents: None,
        }
    }

    /// The named format `name` (`binary16`, `bfloat16`, `binary32`, `binary64`, `binary80`).
    pub fn named(name: &str) -> Option<Format> {
        NAMED
            .iter()
            .find(|n| n.0 == name)
            .map(|&(_, p, emin, emax)| Format {
                precision: Precision(p),
                exponents: Some(Exponents { emin, emax }),
            })
    }

    /// Every named format's name.
    pub fn names() -> impl Iterator<Item = &'static str> {
        NAMED.iter().map(|n| n.0)
    }

    /// The format's name: `binary32`, or `p24` for a bare precision.
    pub fn name(&self) -> String {
        match self.exponents {
            None => format!("p{}", self.precision.bits()),
            Some(x) => NAMED
                .iter()
                .find(|n| n.1 == self.precision.bits() && n.2 == x.emin && n.3 == x.emax)
                .map(|n| n.0.to_string())
                .unwrap_or_else(|| {
                    format!(
                        "p{} (exponents {}..={})",
                        self.precision.bits(),
                        x.emin,
                        x.emax
                    )
                }),
        }
    }

    /// The number of the format right above `x` (a number of the format): the next argument
    /// in value order, through the subnormal numbers and zero of a named format. For a bare
    /// precision the grid of each binade, with no subnormal numbers (`x` nonzero).
    pub fn next_up(&self, x: &Float) -> Float {
        let pb = self.precision.bits() as i32;
        let emin = self.exponents.map(|r| r.emin);
        // The spacing of the grid at a positive value v of binade e: 2^(max(e, emin) - p + 1).
        let ulp = |e: i32| {
            let e = emin.map_or(e, |m| e.max(m));
            Float::with_val(8, 1) << (e - pb + 1)
        };
        let prec = (pb as u32 + 2).max(x.prec());
        if x.is_zero() {
            return Float::with_val(prec, ulp(emin.unwrap_or(0)));
        }
        let e = x.get_exp().expect("finite nonzero") - 1;
        if x.is_sign_positive() {
            return Float::with_val(prec, x + &ulp(e));
        }
        // x < 0: towards zero, on the finer grid below a power of two.
        let a = Float::with_val(prec, x.abs_ref());
        let power = a == (Float::with_val(8, 1) << e);
        let step = if power && emin.is_none_or(|m| e > m) {
            ulp(e - 1)
        } else {
            ulp(e)
        };
        // (Both operands borrowed: an owned one would lend its 8-bit precision to the result.)
        -Float::with_val(prec, &a - &step)
    }

    /// One line for people on how results are judged.
    pub fn describe(&self) -> String {
        let p = self.precision.bits();
        match self.exponents {
            None => format!(
                "p{p}: precision {p}, exponent unbounded (results judged as precision-{p} \
                 numbers: no subnormal results, no overflow; arguments the normal numbers of \
                 {}'s exponent range, no subnormal arguments)",
                if p == 24 { "binary32" } else { "binary64" }
            ),
            Some(x) => format!(
                "{}: precision {p}, normal exponents {}..={}, zero and subnormal arguments \
                 searched, subnormal results judged on the subnormal grid, overflowing and \
                 underflowing results skipped and listed",
                self.name(),
                x.emin,
                x.emax
            ),
        }
    }
}

impl FromStr for Format {
    type Err = FormatError;
    /// A named format (also `half`, `single`, `float`, `double`, `extended`), or a bare
    /// precision `p24` / `24`.
    fn from_str(s: &str) -> Result<Format, FormatError> {
        let t = s.trim().to_ascii_lowercase();
        let alias = match t.as_str() {
            "half" => "binary16",
            "float" | "single" => "binary32",
            "double" => "binary64",
            "extended" => "binary80",
            other => other,
        };
        if let Some(f) = Format::named(alias) {
            return Ok(f);
        }
        let digits = t.strip_prefix('p').unwrap_or(&t);
        digits
            .parse::<u32>()
            .map_err(|_| FormatError::UnknownFormat(s.to_string()))
            .and_then(Precision::new)
            .map(Format::bare)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A nonzero argument `x = ±significand · 2^(exponent - p + 1)` with
/// `2^(p-1) <= significand < 2^p`: the binade `[2^exponent, 2^(exponent+1))` and its integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Argument {
    pub negative: bool,
    pub exponent: i32,
    pub significand: u64,
}

impl Argument {
    /// The argument as an exact MPFR number of precision `p`.
    pub fn to_float(self, p: Precision) -> Float {
        let mut x = Float::with_val(p.bits(), self.significand);
        x <<= self.exponent - p.bits() as i32 + 1;
        if self.negative {
            x = -x;
        }
        x
    }

    /// The argument of precision `p` equal to `x`, which must be a nonzero number with at most
    /// `p` significant bits.
    pub fn from_float(x: &Float, p: Precision) -> Option<Argument> {
        if !x.is_normal() {
            return None;
        }
        let (m, e) = x.to_integer_exp()?;
        // x = m 2^e; normalise m to exactly p bits.
        let negative = m < 0;
        let m = m.abs();
        let bits = m.significant_bits();
        let shift = p.bits() as i64 - bits as i64;
        let m = if shift >= 0 {
            m << shift as u32
        } else {
            let (q, r) = m.div_rem(Integer::from(1) << (-shift) as u32);
            if r != 0 {
                return None;
            }
            q
        };
        let exponent = (e as i64 - shift + p.bits() as i64 - 1) as i32;
        Some(Argument {
            negative,
            exponent,
            significand: m.to_u64()?,
        })
    }

    /// C99 hexadecimal, as printf's `%a` writes it (`0x1.8p+0`); a subnormal argument
    /// (significand below `2^(p-1)` in the binade `emin`) normalised (`0x1p-149`), zero
    /// `0x0p+0`.
    pub fn to_hex(self, p: Precision) -> String {
        if self.significand >> (p.bits() - 1) == 0 {
            return float_to_hex(&self.to_float(p));
        }
        hex_of_parts(self.negative, self.significand, p.bits(), self.exponent)
    }

    /// The argument of format `fmt` equal to `x`: as [`Argument::from_float`], and also zero
    /// (for a named format the subnormal numbers too), written as units write them (binade
    /// `emin`, the smallest of a bare precision, significand below `2^(p-1)`, zero positive
    /// with significand 0). `None` for a value that
    /// is no number of the format.
    pub fn from_float_in(x: &Float, fmt: Format) -> Option<Argument> {
        let p = fmt.precision;
        let Some(r) = fmt.exponents else {
            if x.is_zero() {
                // A bare precision's zero, as its plan writes it (`plan::split_range_in`).
                return Some(Argument {
                    negative: false,
                    exponent: exponent_range(p).0,
                    significand: 0,
                });
            }
            return Argument::from_float(x, p);
        };
        if !x.is_finite() {
            return None;
        }
        let mut s = Float::with_val(x.prec().max(p.bits()) + 2, x.abs_ref());
        s <<= p.bits() as i32 - 1 - r.emin;
        if s < (Float::with_val(8, 1) << (p.bits() - 1)) {
            // Zero or subnormal: an integer multiple of 2^(emin - p + 1).
            let m = s.to_integer().filter(|_| s.is_integer())?;
            return Some(Argument {
                negative: x.is_sign_negative() && !x.is_zero(),
                exponent: r.emin,
                significand: m.to_u64()?,
            });
        }
        Argument::from_float(x, p).filter(|a| a.exponent <= r.emax)
    }

    /// Orders arguments by value.
    pub fn cmp_value(&self, other: &Argument) -> Ordering {
        let key = |a: &Argument| (a.exponent, a.significand);
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => key(self).cmp(&key(other)),
            (true, true) => key(other).cmp(&key(self)),
        }
    }
}

fn hex_of_parts(negative: bool, significand: u64, bits: u32, exponent: i32) -> String {
    let sign = if negative { "-" } else { "" };
    let frac_bits = bits - 1;
    let frac = significand & ((1u64 << frac_bits) - 1);
    let digits = frac_bits.div_ceil(4);
    let aligned = (frac as u128) << (digits * 4 - frac_bits);
    let mut hex = format!("{:0width$x}", aligned, width = digits as usize);
    while hex.ends_with('0') {
        hex.pop();
    }
    let dot = if hex.is_empty() { "" } else { "." };
    let esign = if exponent >= 0 { "+" } else { "-" };
    format!("{sign}0x1{dot}{hex}p{esign}{}", exponent.unsigned_abs())
}

/// C99 hexadecimal of a finite MPFR number, exact (all its significant bits).
pub fn float_to_hex(x: &Float) -> String {
    if x.is_zero() {
        return if x.is_sign_negative() {
            "-0x0p+0".into()
        } else {
            "0x0p+0".into()
        };
    }
    if !x.is_finite() {
        return x.to_string();
    }
    let (m, e) = x.to_integer_exp().expect("finite");
    let sign = if m < 0 { "-" } else { "" };
    let m = m.abs();
    let bits = m.significant_bits();
    let exponent = e as i64 + bits as i64 - 1;
    // 1.fff...: the bits after the leading one, padded to whole hex digits.
    let frac_bits = bits - 1;
    let digits = frac_bits.div_ceil(4);
    let frac = Integer::from(m.keep_bits_ref(frac_bits)) << (digits * 4 - frac_bits);
    let mut hex = if digits == 0 {
        String::new()
    } else {
        format!(
            "{:0>width$}",
            frac.to_string_radix(16),
            width = digits as usize
        )
    };
    while hex.ends_with('0') {
        hex.pop();
    }
    let dot = if hex.is_empty() { "" } else { "." };
    let esign = if exponent >= 0 { "+" } else { "-" };
    format!("{sign}0x1{dot}{hex}p{esign}{}", exponent.unsigned_abs())
}

/// Parses a C99 hexadecimal or decimal number into an exact rational-free MPFR value:
/// hexadecimal input is exact; decimal input is rounded to `prec` bits with `round`.
pub fn parse_number(text: &str, prec: u32, round: Round) -> Result<Float, FormatError> {
    let s = text.trim();
    let bad = || FormatError::BadNumber(text.to_string());
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        let (mantissa, exp) = match hex.split_once('p') {
            Some((m, e)) => (m, e.parse::<i64>().map_err(|_| bad())?),
            None => (hex, 0),
        };
        let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad());
        }
        let all = format!("{int_part}{frac_part}");
        if !all.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let m = Integer::from_str_radix(&all, 16).map_err(|_| bad())?;
        let e = exp - 4 * frac_part.len() as i64;
        let e = i32::try_from(e).map_err(|_| bad())?;
        let need = m.significant_bits().max(1);
        // Hex input is exact: take as many bits as it has, then round to the asked precision.
        let mut exact = Float::with_val(need, &m);
        exact <<= e;
        if negative {
            exact = -exact;
        }
        return Ok(Float::with_val_round(prec, &exact, round).0);
    }
    if lower.contains("inf") || lower.contains("nan") {
        return Err(FormatError::NotFinite(text.to_string()));
    }
    if !lower
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-'))
        || !lower.chars().any(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    let parsed = Float::parse(s).map_err(|_| bad())?;
    Ok(Float::with_val_round(prec, parsed, round).0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse() {
        assert_eq!("binary64".parse::<Precision>().unwrap().bits(), 53);
        assert_eq!("binary32".parse::<Precision>().unwrap().bits(), 24);
        assert_eq!("20".parse::<Precision>().unwrap().bits(), 20);
        assert_eq!("p16".parse::<Precision>().unwrap().bits(), 16);
        assert!("7".parse::<Precision>().is_err());
        assert!("65".parse::<Precision>().is_err());
        assert!("binary128".parse::<Precision>().is_err());
    }

    #[test]
    fn hex_round_trips_binary64_cases() {
        let p = Precision::BINARY64;
        for text in [
            "-0x1.e8bdbfcd9144ep+3",
            "0x1.ac50b409c8aeep+8",
            "0x1.9e9cbbfd6080bp-31",
            "0x1p+0",
            "0x1.8p-1",
        ] {
            let x = parse_number(text, 53, Round::Nearest).unwrap();
            let a = Argument::from_float(&x, p).unwrap();
            assert_eq!(a.to_hex(p), text);
            assert_eq!(a.to_float(p), x);
            assert_eq!(float_to_hex(&x), text);
        }
        // Values wider than 64 bits keep every bit.
        let wide = parse_number("0x1.0000000000000000000000001p+0", 200, Round::Nearest).unwrap();
        assert_eq!(float_to_hex(&wide), "0x1.0000000000000000000000001p+0");
        assert_eq!(float_to_hex(&Float::with_val(10, -3)), "-0x1.8p+1");
    }

    #[test]
    fn argument_fields() {
        let p = Precision::BINARY32;
        let x = parse_number("-0x1.8p+2", 24, Round::Nearest).unwrap();
        let a = Argument::from_float(&x, p).unwrap();
        assert!(a.negative);
        assert_eq!(a.exponent, 2);
        assert_eq!(a.significand, 3 << 22);
    }

    /// `next_up` walks every number of bfloat16 in order, through the subnormal numbers and
    /// zero, both signs; and a bare precision's binade edges.
    #[test]
    fn next_up_walks_every_number_of_a_format() {
        let fmt = Format::named("bfloat16").unwrap();
        let mut all: Vec<Float> = Vec::new();
        for bits in 0u32..0x7f80 {
            // bfloat16 is binary32's top half.
            let v = Float::with_val(24, f32::from_bits(bits << 16));
            all.push(v.clone());
            if !v.is_zero() {
                all.push(-v);
            }
        }
        all.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for w in all.windows(2) {
            assert_eq!(fmt.next_up(&w[0]), w[1], "after {}", float_to_hex(&w[0]));
            let a = Argument::from_float_in(&w[0], fmt).unwrap();
            assert_eq!(a.to_float(fmt.precision), w[0]);
            assert_eq!(
                parse_number(&a.to_hex(fmt.precision), 24, Round::Nearest).unwrap(),
                w[0]
            );
        }
        // binary32's subnormal numbers with more bits than the 8 of a power of two's Float.
        let b32 = Format::named("binary32").unwrap();
        for (x, y) in [
            ("-0x1.1p-141", "-0x1.0fp-141"),
            ("0x1.0fp-141", "0x1.1p-141"),
            ("-0x1p-140", "-0x1.ffp-141"),
            ("0x1.fffffep-1", "0x1p+0"),
            ("-0x1p+0", "-0x1.fffffep-1"),
        ] {
            let v = parse_number(x, 24, Round::Nearest).unwrap();
            assert_eq!(float_to_hex(&b32.next_up(&v)), y, "{x}");
        }
        let bare = Format::bare(Precision::new(8).unwrap());
        let x = parse_number("-0x1p-200", 8, Round::Nearest).unwrap();
        assert_eq!(float_to_hex(&bare.next_up(&x)), "-0x1.fep-201");
        // More bits than the format, or off its subnormal grid: no argument.
        assert!(Argument::from_float_in(&Float::with_val(24, 0.1f32), fmt).is_none());
        let below = parse_number("0x1.8p-133", 8, Round::Nearest).unwrap();
        assert!(Argument::from_float_in(&below, fmt).is_none());
    }

    #[test]
    fn decimal_is_rounded_as_asked() {
        let up = parse_number("0.1", 24, Round::Up).unwrap();
        let down = parse_number("0.1", 24, Round::Down).unwrap();
        assert!(up > down);
        assert_eq!(parse_number("1.5", 24, Round::Up).unwrap(), 1.5);
        assert!(parse_number("abc", 24, Round::Up).is_err());
        assert!(parse_number("0x1.gp0", 24, Round::Up).is_err());
        assert!(parse_number("inf", 24, Round::Up).is_err());
    }
}
