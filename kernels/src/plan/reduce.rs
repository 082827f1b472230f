//! Reductions: functions whose HR-cases in some binades follow exactly from those of a base
//! region, so a plan searches the base and derives the rest (docs/error-analysis.md §17).
//!
//! - exp2: `x = m + b` with `|b|` in `[1, 2)` and `m` an integer of the sign of `x` gives
//!   `exp2(x) = 2^m exp2(b)`: the same significand, so the same hardness, wherever both results
//!   are normal. An argument of the binade `2^e` (`1 <= e <= p - 2`) is on the grid of `[1, 2)`,
//!   `2^e` times coarser.
//! - cbrt (`cbrt(8x) = 2 cbrt(x)`), sqrt (`sqrt(4x) = 2 sqrt(x)`) and rsqrt
//!   (`rsqrt(4x) = rsqrt(x) / 2`): binades `period` apart hold the same significands with the
//!   same hardness; a subnormal argument is a base argument whose significand ends in as many
//!   zeros as it lost bits.
//! - log2 (`log2(2^j m) = j + log2(m)`): the results of the binades `j` whose results all lie
//!   in one output binade `2^k` are judged on one grid, where the integer `j` shifts nothing
//!   but the breakpoint's index (and a negative result mirrors them): every such binade holds
//!   its base's cases, the base being the binade `2^(2^k)` (results in `[2^k, 2^k + 1)`).
//!   Subnormal arguments are scaled copies as for the scalings.
//!
//! A binade is derived only where every one of its arguments and of its base's is covered by
//! the plan, none is skipped (`skip::skipped_runs`), and every result is normal; where some
//! results of a binade are not, the units whose results all are. Every derived case is judged
//! again by MPFR and must agree with its base case, else [`derive`] fails.

use crate::numbers::format::{parse_number, Argument, Exponents, Format};
use crate::oracle::function::Function;
use crate::oracle::verify::{classify_in, ExactCase, HrCase, Verdict};
use crate::plan::UnitSpec;
use crate::regions::skip::{self, Skips};
use rayon::prelude::*;
use rug::float::Round;
use rug::Float;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// How a function's cases repeat across binades.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reduction {
    /// exp2 of `|x| >= 2` from `|x|` in `[1, 2)`.
    Exp2Integer,
    /// `f(2^period x) = 2^(±1) f(x)`: cbrt (period 3), sqrt and rsqrt (period 2).
    Scale { period: u32 },
    /// log2 of the binades whose results share the output binade `2^k` (`k >= 0`) from the
    /// binade `2^(2^k)`.
    Log2Exponent,
}

impl Reduction {
    /// The reduction of `f`, if it has one.
    pub fn of(f: Function) -> Option<Reduction> {
        match f {
            Function::Exp2 => Some(Reduction::Exp2Integer),
            Function::Cbrt => Some(Reduction::Scale { period: 3 }),
            Function::Sqrt | Function::Rsqrt => Some(Reduction::Scale { period: 2 }),
            Function::Log2 => Some(Reduction::Log2Exponent),
            _ => None,
        }
    }

    /// The identity behind it, for people.
    pub fn rule(self, f: Function) -> &'static str {
        match (self, f) {
            (Reduction::Exp2Integer, _) => {
                "exp2(m + b) = 2^m exp2(b) for an integer m and |b| in [1, 2): the same \
                 significand, the same hardness"
            }
            (Reduction::Log2Exponent, _) => {
                "log2(2^j m) = j + log2(m): binades whose results lie in one binade 2^k share \
                 their cases (a negative result mirrors them)"
            }
            (_, Function::Cbrt) => "cbrt(8x) = 2 cbrt(x): binades 3 apart share their cases",
            (_, Function::Sqrt) => "sqrt(4x) = 2 sqrt(x): binades 2 apart share their cases",
            _ => "rsqrt(4x) = rsqrt(x) / 2: binades 2 apart share their cases",
        }
    }

    /// The base binade of the derived binade `e` (`e` below `emin` for subnormal arguments:
    /// see [`Binade`]), `None` where `e` is a base binade or cannot be derived. A base may lie
    /// outside the format (log2's `2^(2^k)` beyond `emax`): [`reduce`] checks it is searched.
    fn base_of(self, e: i32, p: u32) -> Option<i32> {
        match self {
            Reduction::Exp2Integer => (1..=p as i32 - 2).contains(&e).then_some(0),
            Reduction::Scale { period } => {
                let b = e.rem_euclid(period as i32);
                (b != e).then_some(b)
            }
            Reduction::Log2Exponent => {
                let b = 1i32 << log2_output_binade(e)?;
                // The breakpoints of 2^k are 2^(k+1-p) apart: an integer j is a multiple.
                (b != e && b.ilog2() < p).then_some(b)
            }
        }
    }

    /// The base binades of a format whose largest exponent is `emax`.
    fn bases(self, emax: i32) -> Vec<i32> {
        match self {
            Reduction::Exp2Integer => vec![0],
            Reduction::Scale { period } => (0..period as i32).collect(),
            Reduction::Log2Exponent => (0..31)
                .map(|k| 1i32 << k)
                .take_while(|&b| b <= emax)
                .collect(),
        }
    }

    /// The base binades of a format of exponents `x` for which `ok` holds (searched whole, no
    /// argument skipped, every result normal): the bases a binade may be derived from.
    fn clean_bases(self, x: Exponents, ok: impl Fn(i32) -> bool) -> BTreeSet<i32> {
        self.bases(x.emax)
            .into_iter()
            .filter(|&e| e >= x.emin && e <= x.emax && ok(e))
            .collect()
    }
}

/// The output binade `k` (results of magnitude in `[2^k, 2^(k+1))`) of log2 on every
/// argument of the binade `2^j` but `2^j` itself, where that is one binade: `log2(2^j m)` lies
/// in `[j, j + 1)` for `j >= 1` and in `(j, j + 1)` for `j <= -2`; `None` for `j` of 0 or -1,
/// whose results span binades.
fn log2_output_binade(j: i32) -> Option<u32> {
    match j {
        1.. => Some(j.ilog2()),
        ..=-2 => Some((j.unsigned_abs() - 1).ilog2()),
        _ => None,
    }
}

/// A binade of one sign. Below `emin`, the subnormal arguments of the same width: exponent
/// `emin - k` holds the significands `[2^(p-1-k), 2^(p-k))` of the binade `emin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Binade {
    negative: bool,
    exponent: i32,
}

/// A run of derived binades for people: its smallest and largest argument, how many
/// arguments, and where they come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DerivedRun {
    /// The smallest and largest argument of the run by value, C99 hex (both included).
    pub first: String,
    pub last: String,
    /// A JSON number up to `2^64 - 1`, a decimal string beyond (binades of binary80 hold
    /// `2^63` arguments each).
    #[serde(serialize_with = "count_as_json", deserialize_with = "count_from_json")]
    pub count: u128,
    /// The base region, `[1, 2)` say.
    pub base: String,
    pub rule: String,
}

/// What a reduced plan derives instead of searching: the part of each derived binade that is
/// derived, and the runs they make.
#[derive(Debug, Clone, Default)]
pub struct Derivation {
    pub reduction: Option<Reduction>,
    /// The significands `[lo, hi)` derived in each derived binade (in the units' writing),
    /// sorted: the whole binade, or those of its units whose every result is normal (exp2 of
    /// `(-1024, -512]` in binary64 but the unit whose results turn subnormal).
    regions: BTreeMap<Binade, Vec<(u128, u128)>>,
    pub runs: Vec<DerivedRun>,
}

/// A count of arguments in JSON: a number where it fits 64 bits, else a decimal string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Count(#[serde(serialize_with = "count_as_json")] pub u128);

/// A count as a JSON number where it fits 64 bits, else as a decimal string (JSON readers
/// and `serde_json`'s values stop at 64-bit integers).
fn count_as_json<S: serde::Serializer>(n: &u128, s: S) -> Result<S::Ok, S::Error> {
    match u64::try_from(*n) {
        Ok(v) => s.serialize_u64(v),
        Err(_) => s.serialize_str(&n.to_string()),
    }
}

/// A count written by [`count_as_json`]: a number or a decimal string.
fn count_from_json<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Number(u64),
        Text(String),
    }
    match Written::deserialize(d)? {
        Written::Number(n) => Ok(u128::from(n)),
        Written::Text(t) => t.parse().map_err(serde::de::Error::custom),
    }
}

/// A [`Derivation`] as a campaign keeps it (JSON): the reduction, the derived significands of
/// each derived binade (decimal strings: binary80's reach `2^64`) and the runs for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DerivationRecord {
    pub reduction: Reduction,
    pub regions: Vec<RegionRecord>,
    pub runs: Vec<DerivedRun>,
}

/// The derived significands `[lo, hi)` of one binade (exponent below `emin`: subnormal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionRecord {
    pub negative: bool,
    pub exponent: i32,
    pub ranges: Vec<(String, String)>,
}

impl Derivation {
    /// The record a campaign keeps, `None` where nothing is derived.
    pub fn record(&self) -> Option<DerivationRecord> {
        let reduction = self.reduction.filter(|_| self.derives())?;
        let regions = self
            .regions
            .iter()
            .map(|(b, rs)| RegionRecord {
                negative: b.negative,
                exponent: b.exponent,
                ranges: rs
                    .iter()
                    .map(|(lo, hi)| (lo.to_string(), hi.to_string()))
                    .collect(),
            })
            .collect();
        Some(DerivationRecord {
            reduction,
            regions,
            runs: self.runs.clone(),
        })
    }

    /// The derivation of a record, checked against `fmt`: every region inside its binade and
    /// derived by the reduction from a base binade of the format.
    pub fn from_record(r: &DerivationRecord, fmt: Format) -> Result<Derivation, String> {
        let x = fmt
            .exponents
            .ok_or("a bare precision derives nothing: it has no binades to derive")?;
        let p = fmt.precision.bits();
        let mut regions = BTreeMap::new();
        for g in &r.regions {
            let b = Binade {
                negative: g.negative,
                exponent: g.exponent,
            };
            if g.exponent < x.emin - (p as i32 - 1)
                || g.exponent > x.emax
                || r.reduction.base_of(g.exponent, p).is_none()
            {
                return Err(format!("binade 2^{} is not derived", g.exponent));
            }
            let (a, z) = significands(b, p, x.emin);
            let mut ranges = Vec::with_capacity(g.ranges.len());
            for (lo, hi) in &g.ranges {
                let (lo, hi): (u128, u128) = match (lo.parse(), hi.parse()) {
                    (Ok(lo), Ok(hi)) => (lo, hi),
                    _ => return Err(format!("binade 2^{}: range [{lo}, {hi})", g.exponent)),
                };
                if !(a <= lo && lo < hi && hi <= z) {
                    return Err(format!("binade 2^{}: range [{lo}, {hi})", g.exponent));
                }
                ranges.push((lo, hi));
            }
            regions.insert(b, merged(ranges));
        }
        Ok(Derivation {
            reduction: Some(r.reduction),
            regions,
            runs: r.runs.clone(),
        })
    }

    /// The arguments derived instead of searched.
    pub fn derived_arguments(&self) -> u128 {
        self.runs.iter().map(|r| r.count).sum()
    }

    /// Whether anything is derived.
    pub fn derives(&self) -> bool {
        !self.runs.is_empty()
    }

    /// The base argument that the derived argument `a` (written as units write it: a
    /// subnormal one in the binade `emin`) is a copy of, the inverse of the derivation;
    /// `None` where `a` is not derived. A known case in a derived binade stands for its base
    /// case: the reduction gives them the same hardness.
    pub fn base_argument(&self, fmt: Format, a: Argument) -> Option<Argument> {
        let r = self.reduction?;
        let p = fmt.precision.bits();
        let emin = fmt.exponents.map_or(i32::MIN, |x| x.emin);
        let subnormal = a.exponent == emin && a.significand >> (p - 1) == 0;
        // A subnormal argument's binade, as the regions name it: `emin - k` for the
        // significands `[2^(p-1-k), 2^(p-k))`.
        let k = if subnormal {
            p.checked_sub(64 - a.significand.leading_zeros())?
        } else {
            0
        };
        let e = a.exponent - k as i32;
        let b = Binade {
            negative: a.negative,
            exponent: e,
        };
        if !inside(&self.regions, b, u128::from(a.significand)) {
            return None;
        }
        let base_e = r.base_of(e, p)?;
        let significand = match r {
            Reduction::Scale { .. } | Reduction::Log2Exponent => a.significand << k,
            // |x| = m + |b| with |b| in [1, 2): |b|'s fraction is |x|'s, on the grid of 2^-e.
            Reduction::Exp2Integer => {
                let fraction = a.significand & ((1u64 << (p - 1 - e as u32)) - 1);
                (1u64 << (p - 1)) | (fraction << e)
            }
        };
        let base = Argument {
            negative: a.negative,
            exponent: base_e,
            significand,
        };
        // The inverse checked against the derivation itself.
        copies_of(r, fmt, base, &[e])
            .iter()
            .any(|&(_, c)| c == a)
            .then_some(base)
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReduceError {
    #[error("a derived case disagrees with its base case {base}: {derived} ({why}); search without the reduction and report this")]
    Disagrees {
        base: String,
        derived: String,
        why: String,
    },
    #[error("judging a derived case: {0}")]
    Verify(String),
}

/// The plan of `units` (each inside one binade, as `plan` cuts them) with the binades that
/// `f`'s reduction derives taken out, and what they are derived from. Without a reduction, or
/// for a bare precision, the units unchanged.
pub fn reduce(
    f: Function,
    fmt: Format,
    min_bits: u32,
    units: Vec<UnitSpec>,
) -> (Vec<UnitSpec>, Derivation) {
    let (Some(r), Some(x)) = (Reduction::of(f), fmt.exponents) else {
        return (units, Derivation::default());
    };
    let p = fmt.precision.bits();
    let units = cut_at_subnormal_binades(units, p, x.emin);
    let covered = coverage(&units, p, x.emin);
    let full = |b: Binade| covered.get(&b).copied() == Some(binade_size(b, p, x.emin));
    let clean = |u: UnitSpec| clean(f, fmt, min_bits, u);
    let mut by_binade: BTreeMap<Binade, Vec<UnitSpec>> = BTreeMap::new();
    for u in units.iter().filter(|u| u.first >> (p - 1) != 0) {
        by_binade.entry(binade_of(u)).or_default().push(*u);
    }
    let mut regions: BTreeMap<Binade, Vec<(u128, u128)>> = BTreeMap::new();
    for negative in [false, true] {
        // A binade is derived from its own base, searched whole and clean.
        let clean_bases = r.clean_bases(x, |exponent| {
            let b = Binade { negative, exponent };
            full(b) && clean(as_unit(b, p, x.emin))
        });
        for exponent in x.emin - (p as i32 - 1)..=x.emax {
            let b = Binade { negative, exponent };
            let based = r
                .base_of(exponent, p)
                .is_some_and(|e| clean_bases.contains(&e));
            if !based || !full(b) {
                continue;
            }
            if clean(as_unit(b, p, x.emin)) {
                regions.insert(b, vec![significands(b, p, x.emin)]);
            } else if let Some(parts) = by_binade.get(&b) {
                // Part of a binade: its units whose results are all normal, none skipped.
                let derived: Vec<(u128, u128)> = parts
                    .par_iter()
                    .filter(|u| clean(**u))
                    .map(|u| {
                        (
                            u128::from(u.first),
                            u128::from(u.first) + u128::from(u.count),
                        )
                    })
                    .collect();
                if !derived.is_empty() {
                    regions.insert(b, merged(derived));
                }
            }
        }
    }
    let kept: Vec<UnitSpec> = units
        .into_iter()
        .filter(|u| !derived_whole(u, p, x.emin, &regions))
        .collect();
    let runs = runs(f, fmt, r, &regions);
    let derivation = Derivation {
        reduction: Some(r),
        regions,
        runs,
    };
    (kept, derivation)
}

/// `units` with each unit of subnormal arguments that holds zero or more than one of their
/// binades cut at the binades' bounds (zero alone), so that each piece is derived with its
/// binade or searched, and a binade is derived whatever its neighbours. Uncut, the first unit
/// of a plan holds zero and every binade narrower than the unit (whole binary80 sqrt in units
/// of 2^50: 50 binades of up to 50 bits), and all of it would be searched: a search of a
/// binade that narrow is almost argument by argument (sqrt in binary80 at 54 bits: 90 s on one
/// core for the 2^30 arguments of 31 bits), months for the unit.
fn cut_at_subnormal_binades(units: Vec<UnitSpec>, p: u32, emin: i32) -> Vec<UnitSpec> {
    let mut out = Vec::with_capacity(units.len());
    for u in units {
        let touched = touches(&u, p, emin);
        if touched.len() <= 1 {
            out.push(u);
            continue;
        }
        let (lo, hi) = (
            u128::from(u.first),
            u128::from(u.first) + u128::from(u.count),
        );
        let mut pieces: Vec<(u128, u128)> = touched
            .into_iter()
            .map(|b| match b {
                None => (0, 1),
                Some(b) => {
                    let (a, z) = significands(b, p, emin);
                    (lo.max(a), hi.min(z))
                }
            })
            .collect();
        pieces.sort_unstable();
        out.extend(pieces.into_iter().map(|(a, z)| UnitSpec {
            first: a as u64,
            count: (z - a) as u64,
            ..u
        }));
    }
    out
}

/// Whether every result of unit `u` is normal and none of its arguments is skipped: the units
/// a reduction may derive. Cheapest first: two evaluations, then the skipped runs' bisection.
fn clean(f: Function, fmt: Format, min_bits: u32, u: UnitSpec) -> bool {
    normal(f, fmt, u) && !skips(f, fmt, min_bits, u)
}

/// The normal binades, by sign and exponent, that [`reduce`] derives whole from a plan that
/// covers every binade of `f` (a whole plan), worked out without the plan's units: a whole
/// plan keeps them as one unit each instead of cutting them (binary80 has 32,766 binades of
/// 2^13 units of 2^50 arguments each, more units than a plan holds). [`reduce`] judges them
/// again on the plan itself.
pub fn whole_derivable(f: Function, fmt: Format, min_bits: u32) -> BTreeSet<(bool, i32)> {
    let (Some(r), Some(x)) = (Reduction::of(f), fmt.exponents) else {
        return BTreeSet::new();
    };
    let p = fmt.precision.bits();
    let clean = |b: Binade| clean(f, fmt, min_bits, as_unit(b, p, x.emin));
    let mut out = BTreeSet::new();
    for negative in [false, true] {
        let clean_bases = r.clean_bases(x, |exponent| clean(Binade { negative, exponent }));
        let derived: Vec<i32> = (x.emin..=x.emax)
            .into_par_iter()
            .filter(|&exponent| {
                r.base_of(exponent, p)
                    .is_some_and(|e| clean_bases.contains(&e))
                    && clean(Binade { negative, exponent })
            })
            .collect();
        out.extend(derived.into_iter().map(|e| (negative, e)));
    }
    out
}

/// The binade of a unit of normal arguments.
fn binade_of(u: &UnitSpec) -> Binade {
    Binade {
        negative: u.negative,
        exponent: u.exponent,
    }
}

/// Sorted ranges with the touching ones joined.
fn merged(mut ranges: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    ranges.sort_unstable();
    let mut out: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some(last) if last.1 == lo => last.1 = hi,
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// Whether significand `s` of binade `b` is derived.
fn inside(regions: &BTreeMap<Binade, Vec<(u128, u128)>>, b: Binade, s: u128) -> bool {
    regions.get(&b).is_some_and(|rs| {
        let i = rs.partition_point(|r| r.1 <= s);
        rs.get(i).is_some_and(|r| r.0 <= s)
    })
}

/// Whether every argument of unit `u` is derived.
fn derived_whole(
    u: &UnitSpec,
    p: u32,
    emin: i32,
    regions: &BTreeMap<Binade, Vec<(u128, u128)>>,
) -> bool {
    let lo = u128::from(u.first);
    let hi = lo + u128::from(u.count);
    touches(u, p, emin).into_iter().all(|b| {
        b.is_some_and(|b| {
            let (a, z) = significands(b, p, emin);
            let (lo, hi) = (lo.max(a), hi.min(z));
            regions
                .get(&b)
                .is_some_and(|rs| rs.iter().any(|r| r.0 <= lo && hi <= r.1))
        })
    })
}

/// The number of arguments of binade `b`.
fn binade_size(b: Binade, p: u32, emin: i32) -> u128 {
    if b.exponent >= emin {
        1u128 << (p - 1)
    } else {
        1u128 << (p as i32 - 1 - (emin - b.exponent))
    }
}

/// The significands `[lo, hi)` of binade `b` in the units' writing (binade `emin` below it).
fn significands(b: Binade, p: u32, emin: i32) -> (u128, u128) {
    if b.exponent >= emin {
        (1u128 << (p - 1), 1u128 << p)
    } else {
        let k = (emin - b.exponent) as u32;
        (1u128 << (p - 1 - k), 1u128 << (p - k))
    }
}

/// The binades a unit touches; `None` for zero.
fn touches(u: &UnitSpec, p: u32, emin: i32) -> Vec<Option<Binade>> {
    let lo = u128::from(u.first);
    let hi = lo + u128::from(u.count);
    if u.exponent > emin || lo >> (p - 1) != 0 {
        return vec![Some(Binade {
            negative: u.negative,
            exponent: u.exponent,
        })];
    }
    let mut out = Vec::new();
    if lo == 0 {
        out.push(None);
    }
    for k in 1..p {
        let b = Binade {
            negative: u.negative,
            exponent: emin - k as i32,
        };
        let (a, z) = significands(b, p, emin);
        if a < hi && lo < z {
            out.push(Some(b));
        }
    }
    out
}

/// The arguments of each binade that the units cover.
fn coverage(units: &[UnitSpec], p: u32, emin: i32) -> BTreeMap<Binade, u128> {
    let mut covered: BTreeMap<Binade, u128> = BTreeMap::new();
    for u in units {
        let lo = u128::from(u.first);
        let hi = lo + u128::from(u.count);
        for b in touches(u, p, emin).into_iter().flatten() {
            let (a, z) = significands(b, p, emin);
            *covered.entry(b).or_default() += hi.min(z) - lo.max(a);
        }
    }
    covered
}

/// The binade `b` as one unit in the plan's writing.
fn as_unit(b: Binade, p: u32, emin: i32) -> UnitSpec {
    let (a, z) = significands(b, p, emin);
    UnitSpec {
        negative: b.negative,
        exponent: b.exponent.max(emin),
        first: a as u64,
        count: (z - a) as u64,
    }
}

/// Whether the search would skip any argument of unit `u` (or cannot tell).
fn skips(f: Function, fmt: Format, min_bits: u32, u: UnitSpec) -> bool {
    !matches!(skip::skips(f, fmt, min_bits, u), Ok(Skips::Nothing))
}

/// Whether every result of unit `u` is a normal number: `2^emin <= |f(x)| < 2^(emax+1)` at
/// both ends (the functions with reductions are monotone), from an evaluation at `p + 64`
/// bits held `2^-(p+32)` inside the bounds, so that its error cannot cross them.
fn normal(f: Function, fmt: Format, u: UnitSpec) -> bool {
    let Some(x) = fmt.exponents else {
        return false;
    };
    let p = fmt.precision;
    let prec = p.bits() + 64;
    let margin = Float::with_val(prec, 1) >> (p.bits() + 32);
    let lo = (Float::with_val(prec, 1) + &margin) << x.emin;
    let hi = (Float::with_val(prec, 1) - &margin) << (x.emax + 1);
    [0, u.count - 1].iter().all(|&o| {
        let (y, _) = f.eval(&u.argument(o).to_float(p), prec);
        y.is_finite() && *y.as_abs() >= lo && *y.as_abs() <= hi
    })
}

/// The derived regions as runs of one sign, each as long as they touch, in value order.
fn runs(
    f: Function,
    fmt: Format,
    r: Reduction,
    regions: &BTreeMap<Binade, Vec<(u128, u128)>>,
) -> Vec<DerivedRun> {
    let p = fmt.precision;
    let emin = fmt.exponents.map_or(0, |x| x.emin);
    // log2's runs stop where the base changes: each names its own.
    let base_exponent = |e: i32| match r {
        Reduction::Log2Exponent => r.base_of(e, p.bits()),
        _ => None,
    };
    // (negative, first exponent, first significand, last exponent, end significand, count,
    // log2's base)
    type Group = (bool, i32, u128, i32, u128, u128, Option<i32>);
    let mut groups: Vec<Group> = Vec::new();
    for (b, ranges) in regions {
        let (start, end) = significands(*b, p.bits(), emin);
        for &(lo, hi) in ranges {
            match groups.last_mut() {
                Some(g)
                    if g.0 == b.negative
                        && g.6 == base_exponent(b.exponent)
                        && ((g.3 == b.exponent && g.4 == lo)
                            || (g.3 + 1 == b.exponent
                                && g.4
                                    == significands(
                                        Binade {
                                            negative: g.0,
                                            exponent: g.3,
                                        },
                                        p.bits(),
                                        emin,
                                    )
                                    .1
                                && lo == start)) =>
                {
                    g.3 = b.exponent;
                    g.4 = hi;
                    g.5 += hi - lo;
                }
                _ => groups.push((
                    b.negative,
                    b.exponent,
                    lo,
                    b.exponent,
                    hi,
                    hi - lo,
                    base_exponent(b.exponent),
                )),
            }
            debug_assert!(hi <= end);
        }
    }
    let base = |negative: bool, log2_base: Option<i32>| {
        if let Some(b) = log2_base {
            return format!("[0x1p+{b}, 0x1p+{})", b + 1);
        }
        let top = match r {
            Reduction::Scale { period } => period,
            Reduction::Exp2Integer | Reduction::Log2Exponent => 1,
        };
        match negative {
            false => format!("[1, {})", 1u64 << top),
            true => format!("(-{}, -1]", 1u64 << top),
        }
    };
    let arg = |negative: bool, e: i32, s: u128| {
        Argument {
            negative,
            exponent: e.max(emin),
            significand: s as u64,
        }
        .to_hex(p)
    };
    let mut out: Vec<DerivedRun> = groups
        .into_iter()
        .map(|(negative, e0, lo, e1, hi, count, log2_base)| {
            let (a, z) = (arg(negative, e0, lo), arg(negative, e1, hi - 1));
            let (first, last) = if negative { (z, a) } else { (a, z) };
            DerivedRun {
                first,
                last,
                count,
                base: base(negative, log2_base),
                rule: r.rule(f).to_string(),
            }
        })
        .collect();
    // Negative runs first, the largest magnitude first: value order.
    out.sort_by_key(|run| !run.first.starts_with('-'));
    let negatives = out.iter().filter(|r| r.first.starts_with('-')).count();
    out[..negatives].reverse();
    out
}

/// The cases the plan derives from the base cases among `hr_cases` and `exact_cases` (the
/// search's, in any order), each judged again by MPFR: the derived HR-cases and exact cases.
pub fn derive(
    f: Function,
    fmt: Format,
    min_bits: u32,
    plan: &Derivation,
    hr_cases: &[HrCase],
    exact_cases: &[ExactCase],
) -> Result<(Vec<HrCase>, Vec<ExactCase>), ReduceError> {
    let Some(r) = plan.reduction else {
        return Ok((Vec::new(), Vec::new()));
    };
    let p = fmt.precision.bits();
    // The derived binades by their base binade.
    let mut by_base: BTreeMap<Binade, Vec<i32>> = BTreeMap::new();
    for b in plan.regions.keys() {
        let base = r
            .base_of(b.exponent, p)
            .expect("derived binades have a base");
        let base = Binade {
            negative: b.negative,
            exponent: base,
        };
        by_base.entry(base).or_default().push(b.exponent);
    }
    let base = |x: &str| -> Option<(Argument, &Vec<i32>)> {
        let v = parse_number(x, fmt.precision.bits(), Round::Nearest).ok()?;
        let a = Argument::from_float_in(&v, fmt)?;
        let b = Binade {
            negative: a.negative,
            exponent: a.exponent,
        };
        (a.significand >> (fmt.precision.bits() - 1) != 0)
            .then(|| by_base.get(&b).map(|d| (a, d)))
            .flatten()
    };
    // In parallel over the base cases: a scaling gives each one or two copies, so the work
    // is in their number (a sqrt binade holds 2^26 exact cases at binary64).
    let wants: Vec<(Argument, &Vec<i32>, Verdict)> = hr_cases
        .par_iter()
        .filter_map(|c| base(&c.x).map(|(a, d)| (a, d, Verdict::Hard(c.clone()))))
        .chain(
            exact_cases
                .par_iter()
                .filter_map(|c| base(&c.x).map(|(a, d)| (a, d, Verdict::Exact(c.clone())))),
        )
        .collect();
    let judged: Vec<Vec<Verdict>> = wants
        .par_iter()
        .map(|(a, copies, want)| {
            copies_of(r, fmt, *a, copies)
                .into_iter()
                .filter(|(b, c)| inside(&plan.regions, *b, u128::from(c.significand)))
                .map(|(_, c)| c)
                .map(|c| {
                    let v = classify_in(f, fmt, &c, min_bits)
                        .map_err(|e| ReduceError::Verify(e.to_string()))?;
                    agrees(want, &v).map_err(|why| ReduceError::Disagrees {
                        base: verdict_x(want),
                        derived: c.to_hex(fmt.precision),
                        why,
                    })?;
                    Ok(v)
                })
                .collect()
        })
        .collect::<Result<_, ReduceError>>()?;
    let (mut hard, mut exact) = (Vec::new(), Vec::new());
    for v in judged.into_iter().flatten() {
        match v {
            Verdict::Hard(h) => hard.push(h),
            Verdict::Exact(e) => exact.push(e),
            _ => unreachable!("agrees() admits hard and exact verdicts alone"),
        }
    }
    Ok((hard, exact))
}

/// The HR-cases the plan derives from each of `hr_cases` (a case outside the base binades
/// gives none), each judged again by MPFR, with the base case it comes from: `(base x,
/// derived case)`. What a coordinator records with a base unit's result.
pub fn derive_each(
    f: Function,
    fmt: Format,
    min_bits: u32,
    plan: &Derivation,
    hr_cases: &[HrCase],
) -> Result<Vec<(String, HrCase)>, ReduceError> {
    let each: Vec<Vec<(String, HrCase)>> = hr_cases
        .par_iter()
        .map(|c| {
            let (hard, _) = derive(f, fmt, min_bits, plan, std::slice::from_ref(c), &[])?;
            Ok(hard.into_iter().map(|h| (c.x.clone(), h)).collect())
        })
        .collect::<Result<_, ReduceError>>()?;
    Ok(each.into_iter().flatten().collect())
}

fn verdict_x(v: &Verdict) -> String {
    match v {
        Verdict::Hard(c) => c.x.clone(),
        Verdict::Exact(c) => c.x.clone(),
        other => format!("{other:?}"),
    }
}

/// Whether a derived verdict is its base's: hard with the same bits and kind, or exact.
fn agrees(base: &Verdict, derived: &Verdict) -> Result<(), String> {
    match (base, derived) {
        (Verdict::Hard(a), Verdict::Hard(b)) if a.bits == b.bits && a.kind == b.kind => Ok(()),
        (Verdict::Exact(_), Verdict::Exact(_)) => Ok(()),
        (_, other) => Err(format!("MPFR finds {other:?}")),
    }
}

/// The arguments of the binades `copies` that base argument `a` stands for, each with its
/// binade (below `emin` for a subnormal one).
fn copies_of(r: Reduction, fmt: Format, a: Argument, copies: &[i32]) -> Vec<(Binade, Argument)> {
    let p = fmt.precision.bits();
    let emin = fmt.exponents.map_or(i32::MIN, |x| x.emin);
    let mut out = Vec::new();
    for &e in copies {
        let b = Binade {
            negative: a.negative,
            exponent: e,
        };
        match r {
            Reduction::Scale { .. } | Reduction::Log2Exponent if e >= emin => {
                out.push((b, Argument { exponent: e, ..a }))
            }
            Reduction::Scale { .. } | Reduction::Log2Exponent => {
                // A subnormal argument: the base significand without its k lowest bits, which
                // must be zeros.
                let k = (emin - e) as u32;
                if a.significand.trailing_zeros() >= k {
                    let c = Argument {
                        exponent: emin,
                        significand: a.significand >> k,
                        ..a
                    };
                    out.push((b, c));
                }
            }
            Reduction::Exp2Integer => {
                // |x| = m + |a| in the binade 2^e: |a| = s 2^(1-p) must be on its grid,
                // 2^e times coarser; the significand is m 2^(p-1-e) + s 2^-e.
                let e = e as u32;
                if a.significand.trailing_zeros() < e {
                    continue;
                }
                let s = u128::from(a.significand) >> e;
                for m in (1u128 << e) - 1..=(2u128 << e) - 2 {
                    let sig = (m << (p - 1 - e)) + s;
                    debug_assert!(sig >> (p - 1) == 1, "in the binade 2^{e}");
                    let c = Argument {
                        negative: a.negative,
                        exponent: e as i32,
                        significand: sig as u64,
                    };
                    out.push((b, c));
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "reduce_tests.rs"]
mod tests;
