//! The only place the server calls the engine (`tmd-kernels`): resolving functions and
//! formats, cutting campaign ranges into units, re-verifying reported cases with MPFR on the
//! format's grid, and recomputing the runs of arguments a unit must skip.

use crate::domain::NewCampaign;
use crate::error::{Error, Result};
use rug::float::Round;
use std::str::FromStr;
use tmd_kernels::numbers::format::parse_number;
use tmd_kernels::numbers::format::Format;
use tmd_kernels::oracle::verify::{verify_case_in, Kind, Verdict};
use tmd_kernels::plan::whole::{split_whole, whole_domain};
use tmd_kernels::plan::{split_range_in, UnitSpec as EngineUnit};
use tmd_kernels::regions::skip::runs_are_pointwise;
use tmd_kernels::{Argument, Function, Precision};
use tmd_wire::{ArgRange, HrCase, HrKind, SkippedRun, UnitSpec};

/// A campaign's resolved parameters and units, in argument order.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The function's canonical name.
    pub function: String,
    pub precision: u32,
    /// The named format (`binary32`), or `None` for a bare precision (exponent unbounded).
    pub format: Option<String>,
    pub unit_bits: u32,
    /// The ranges planned: the request's, or the whole function's domain (one range).
    pub ranges: Vec<ArgRange>,
    pub units: Vec<UnitSpec>,
}

/// The format a campaign asks for: a named format with its exponent range (`binary16`,
/// `bfloat16`, `binary32`, `binary64`, `binary80` and their aliases), or a bare precision
/// (`format: "p24"` or `precision: 24`) whose exponent is unbounded.
fn format_of(c: &NewCampaign) -> Result<Format> {
    match (&c.format, c.precision) {
        (Some(f), None) => Format::from_str(f).map_err(|e| Error::BadRequest(e.to_string())),
        (None, Some(p)) => Precision::new(p)
            .map(Format::bare)
            .map_err(|e| Error::BadRequest(e.to_string())),
        _ => Err(Error::BadRequest("give either format or precision".into())),
    }
}

/// A stored campaign's format: its named format, or a bare precision when `format` is NULL.
pub fn stored_format(precision: u32, format: Option<&str>) -> Result<Format> {
    match format {
        Some(name) => Format::named(name)
            .filter(|f| f.precision.bits() == precision)
            .ok_or_else(|| Error::Internal(format!("a campaign has an unknown format {name}"))),
        None => Precision::new(precision)
            .map(Format::bare)
            .map_err(|e| Error::Internal(e.to_string())),
    }
}

/// A stored campaign's format as the engine names it (`binary64`, `p24`).
pub fn format_name(precision: u32, format: Option<&str>) -> Result<String> {
    Ok(stored_format(precision, format)?.name())
}

/// An estimate's function and format as the engine names them (aliases resolved), or
/// `estimate_invalid` when the engine knows neither.
pub fn estimate_names(function: &str, format: &str) -> Result<(String, String)> {
    let f = Function::from_str(function)
        .map_err(|e| Error::EstimateInvalid(format!("the estimate's function: {e}")))?;
    let fmt = Format::from_str(format)
        .map_err(|e| Error::EstimateInvalid(format!("the estimate's format: {e}")))?;
    Ok((f.name().to_string(), fmt.name()))
}

/// How a campaign's results are judged, for people.
pub fn describe_format(precision: u32, format: Option<&str>) -> String {
    stored_format(precision, format)
        .map(|f| f.describe())
        .unwrap_or_else(|e| e.to_string())
}

/// The unit size of a campaign created without `unit_bits`: the engine's default for small
/// formats, but 2^44 arguments at binary64 (the engine's own default there is 2^40) and 2^50
/// at binary80 (the engine's default: a unit is then about 2 s of an H100 in [1, 2), not
/// milliseconds), and small enough that a unit expects at most 2^10 HR-cases at `min_bits`.
///
/// Why 2^44 for a farm: each unit is one result row, one unit update and one verdict, so the
/// coordinator's load is rows per second = GPUs x units/s per GPU. One H100 finishes about 90
/// units of 2^40 arguments per second (exp, binary64): 100 H100s would post 9,000 results per
/// second, 1,000 of them 90,000, more than one PostgreSQL records. At 2^44 one H100 does about
/// 5.6 units/s (0.18 s each, long enough to hide per-unit overheads), so 1,000 H100s post about
/// 5,600 results per second, and a whole binary64 binade is 256 units. A CPU core takes
/// minutes per such unit, which a lease of one unit and heartbeats handle.
pub fn default_unit_bits(precision: u32, min_bits: u32) -> u32 {
    let by_format = match Precision::new(precision) {
        Ok(p) if precision > 53 => tmd_kernels::plan::default_unit_bits(p),
        _ => precision.saturating_sub(4).clamp(12, 44),
    };
    by_format.min(min_bits + 9)
}

/// Resolves the function and precision and cuts every range into units of one binade each.
/// Refuses ranges that are empty or reversed, overlapping ranges, and more than `max_units`
/// units in all.
pub fn plan(c: &NewCampaign, max_units: usize) -> Result<Plan> {
    let function = Function::from_str(&c.function).map_err(|e| Error::BadRequest(e.to_string()))?;
    let fmt = format_of(c)?;
    let precision = fmt.precision;
    let unit_bits = c
        .unit_bits
        .unwrap_or_else(|| default_unit_bits(precision.bits(), c.min_bits));
    let mut units: Vec<UnitSpec> = Vec::new();
    let wire = |u: EngineUnit| UnitSpec {
        negative: u.negative,
        exponent: u.exponent,
        first: u.first,
        count: u.count,
    };
    let mut ranges = c.ranges.clone();
    if c.whole {
        let bad = |e: tmd_kernels::plan::whole::WholeError| Error::BadRequest(e.to_string());
        let d = whole_domain(function, fmt).map_err(bad)?;
        units = split_whole(function, fmt, c.min_bits, Some(unit_bits))
            .map_err(bad)?
            .into_iter()
            .map(wire)
            .collect();
        ranges = vec![ArgRange {
            from: d.from,
            to: d.to,
        }];
        if units.len() > max_units {
            return Err(Error::BadRequest(format!(
                "the campaign would have more than {max_units} units: use a larger unit_bits"
            )));
        }
    }
    for r in &c.ranges {
        // A named format's arguments are its normal numbers (its exponent range).
        let specs = split_range_in(function, fmt, &r.from, &r.to, Some(unit_bits))
            .map_err(|e| Error::BadRequest(format!("range [{}, {}): {e}", r.from, r.to)))?;
        if specs.is_empty() {
            return Err(Error::BadRequest(format!(
                "range [{}, {}) holds no argument",
                r.from, r.to
            )));
        }
        units.extend(specs.into_iter().map(wire));
        if units.len() > max_units {
            return Err(Error::BadRequest(format!(
                "the campaign would have more than {max_units} units: use a larger unit_bits"
            )));
        }
    }
    reject_overlaps(&units)?;
    Ok(Plan {
        function: function.name().to_string(),
        precision: precision.bits(),
        format: fmt.exponents.map(|_| fmt.name()),
        unit_bits,
        ranges,
        units,
    })
}

/// Two ranges that share arguments would search (and count) them twice.
fn reject_overlaps(units: &[UnitSpec]) -> Result<()> {
    let mut keys: Vec<(bool, i32, u64, u64)> = units
        .iter()
        .map(|u| {
            (
                u.negative,
                u.exponent,
                u.first,
                u.first.saturating_add(u.count),
            )
        })
        .collect();
    keys.sort_unstable();
    for w in keys.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.0 == b.0 && a.1 == b.1 && b.2 < a.3 {
            return Err(Error::BadRequest("the ranges overlap".into()));
        }
    }
    Ok(())
}

/// Re-verifies every reported HR-case with MPFR: it must be an argument of the unit and at
/// least `min_bits` hard. Returns the distinct cases as the server computed them (canonical
/// `x`, its own bit count, distance, kind and rounding), or `ForgedCase` naming the first that
/// fails. Reported exact cases must be arguments of the unit where f(x) is exact.
///
/// A case reported twice (or spelled two ways, `0x1p+0` and `0x2p-1`) is verified and counted
/// once: MPFR's time is the server's, and a worker must not be able to spend it for free.
pub fn verify_result(
    function: &str,
    fmt: Format,
    min_bits: u32,
    unit: &UnitSpec,
    cases: &[HrCase],
    exact: &[String],
) -> Result<Vec<HrCase>> {
    let function = Function::from_str(function).map_err(|e| Error::Internal(e.to_string()))?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(cases.len());
    for case in cases {
        let forged = |why: &str| Error::ForgedCase(format!("HR-case x = {:?}: {why}", case.x));
        let Some(key) = locate(fmt, unit, &case.x) else {
            return Err(forged("not an argument of this unit"));
        };
        if !seen.insert(key) {
            continue;
        }
        match verify_case_in(function, fmt, min_bits, &case.x) {
            Ok(Verdict::Hard(v)) => {
                if v.bits != case.bits || v.kind.as_str() != case.kind.as_str() {
                    tracing::warn!(
                        x = %v.x,
                        reported.bits = case.bits,
                        verified.bits = v.bits,
                        "HR-case reported with other hardness than verified; keeping the verified one"
                    );
                }
                out.push(wire_case(v));
            }
            Ok(Verdict::NotHard { bits }) => {
                return Err(forged(&format!(
                    "MPFR finds only {bits} identical bits, below {min_bits}"
                )))
            }
            Ok(Verdict::Exact(_)) => return Err(forged("f(x) is exact, not hard to round")),
            // A skipped argument (overflow, underflow, pole) is no HR-case.
            Ok(Verdict::Skipped(r)) => return Err(forged(r.rule())),
            Err(e) => return Err(forged(&e.to_string())),
        }
    }
    let mut seen_exact = std::collections::HashSet::new();
    for x in exact {
        let forged = |why: &str| Error::ForgedCase(format!("exact case x = {x:?}: {why}"));
        let Some(key) = locate(fmt, unit, x) else {
            return Err(forged("not an argument of this unit"));
        };
        if !seen_exact.insert(key) {
            continue;
        }
        match verify_case_in(function, fmt, min_bits, x) {
            Ok(Verdict::Exact(_)) => {}
            Ok(_) => return Err(forged("MPFR finds f(x) not exact")),
            Err(e) => return Err(forged(&e.to_string())),
        }
    }
    Ok(out)
}

/// A case as MPFR verified it, in the wire's terms: what the server records, whoever
/// reported it.
fn wire_case(v: tmd_kernels::oracle::verify::HrCase) -> HrCase {
    HrCase {
        x: v.x,
        bits: v.bits,
        neg_log2_d: v.neg_log2_d,
        kind: match v.kind {
            Kind::Fp => HrKind::Fp,
            Kind::Mid => HrKind::Mid,
        },
        rounded: v.rounded,
    }
}

/// A known case checked for a campaign: where its argument lies, (sign, exponent,
/// significand) as units hold it, and the case as MPFR verifies it on the campaign's format;
/// or why it is no HR-case of the campaign.
pub fn verify_known(
    function: &str,
    fmt: Format,
    min_bits: u32,
    x: &str,
) -> std::result::Result<((bool, i32, u64), HrCase), String> {
    let function = Function::from_str(function).map_err(|e| e.to_string())?;
    let v = parse_number(x, 256, Round::Nearest).map_err(|e| e.to_string())?;
    let a = Argument::from_float_in(&v, fmt)
        .ok_or_else(|| "not an argument of the campaign's format".to_string())?;
    match verify_case_in(function, fmt, min_bits, x) {
        Ok(Verdict::Hard(v)) => Ok(((a.negative, a.exponent, a.significand), wire_case(v))),
        Ok(Verdict::NotHard { bits }) => Err(format!(
            "MPFR finds only {bits} identical bits, below the campaign's {min_bits}"
        )),
        Ok(Verdict::Exact(_)) => Err("f(x) is exact, not hard to round".into()),
        Ok(Verdict::Skipped(r)) => Err(r.rule().to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Most skipped runs one result may carry (as many as cases): a unit where many arguments
/// apart are skipped (tanpi where the format's arguments are multiples of 1/8: a pole every
/// fourth; coarser grids are one exact run) cannot be reported whole and is quarantined with
/// the reason.
pub const MAX_SKIPPED_RUNS: usize = 10_000;

/// The runs of `unit`'s arguments that must be skipped in `fmt` (overflow, underflow, pole,
/// trivial, exact), computed here (`tmd_kernels::regions::skip`), not taken from the worker: the
/// worker's `posted` runs must equal them (first and last as arguments of the unit, count,
/// reason code), else the result is refused as forged. Returns the server's runs, with their
/// rules, to store.
pub fn check_skipped(
    function: &str,
    fmt: Format,
    min_bits: u32,
    unit: &UnitSpec,
    posted: &[SkippedRun],
) -> Result<Vec<SkippedRun>> {
    let function = Function::from_str(function).map_err(|e| Error::Internal(e.to_string()))?;
    let expected =
        tmd_kernels::regions::skip::skipped_runs(function, fmt, min_bits, engine_unit(unit))
            .map_err(|e| Error::Internal(format!("computing the unit's skipped runs: {e}")))?;
    let forged = |why: String| Error::ForgedCase(format!("skipped runs: {why}"));
    if expected.len() > MAX_SKIPPED_RUNS {
        return Err(Error::BadRequest(format!(
            "this unit has {} runs of skipped arguments, more than {MAX_SKIPPED_RUNS}: a \
             campaign with smaller units can report them",
            expected.len()
        )));
    }
    if posted.len() != expected.len() {
        return Err(forged(format!(
            "the result lists {} runs, the unit has {}{}",
            posted.len(),
            expected.len(),
            expected
                .iter()
                .find(|e| !posted.iter().any(|s| s.reason == e.reason.as_str()))
                .map(|e| format!(
                    " (such as [{}, {}], {})",
                    e.first,
                    e.last,
                    e.reason.as_str()
                ))
                .unwrap_or_default()
        )));
    }
    for (s, e) in posted.iter().zip(&expected) {
        let same = s.count == e.count
            && s.reason == e.reason.as_str()
            && locate(fmt, unit, &s.first).is_some()
            && locate(fmt, unit, &s.first) == locate(fmt, unit, &e.first)
            && locate(fmt, unit, &s.last) == locate(fmt, unit, &e.last);
        if !same {
            return Err(forged(format!(
                "[{}, {}] ({} arguments, {}) where the unit has [{}, {}] ({} arguments, {})",
                s.first,
                s.last,
                s.count,
                s.reason,
                e.first,
                e.last,
                e.count,
                e.reason.as_str()
            )));
        }
    }
    Ok(expected
        .into_iter()
        .map(|e| SkippedRun {
            rule: e.rule(),
            first: e.first,
            last: e.last,
            count: e.count,
            reason: e.reason.as_str().to_string(),
        })
        .collect())
}

/// Whether the runs a unit must skip are known to be none without computing them. Only where
/// its runs can be nothing but arguments beyond the range (`skip::runs_are_pointwise`: no
/// pole, exact region, or trivial run near 0 or far from it): then a bare precision skips
/// nothing, and a unit of a named format skips nothing inside a binade the engine found to
/// skip nothing ([`learn_binade`]).
pub fn skips_nothing(function: &str, fmt: Format, min_bits: u32, unit: &UnitSpec) -> bool {
    let Ok(f) = Function::from_str(function) else {
        return false;
    };
    if !runs_are_pointwise(f, fmt, engine_unit(unit)) {
        return false;
    }
    if fmt.exponents.is_none() {
        return true;
    }
    binade_key(f, fmt, min_bits, unit).is_some_and(|key| {
        calm_binades()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            == Some(&Some(true))
    })
}

/// A binade (function, format, `min_bits`, sign, exponent) and whether every argument of its
/// normal significands skips nothing (`None` while one thread computes it).
type BinadeKey = (Function, Format, u32, bool, i32);
type CalmBinades = std::sync::Mutex<std::collections::HashMap<BinadeKey, Option<bool>>>;

fn calm_binades() -> &'static CalmBinades {
    static CALM: std::sync::OnceLock<CalmBinades> = std::sync::OnceLock::new();
    CALM.get_or_init(Default::default)
}

/// The normal significands `[2^(p-1), 2^p)` of the unit's binade, when the unit lies in them.
fn binade_of(fmt: Format, unit: &UnitSpec) -> Option<EngineUnit> {
    let p = fmt.precision.bits();
    let lead = 1u64.checked_shl(p.checked_sub(1)?)?;
    let end = 2 * u128::from(lead);
    (unit.first >= lead && u128::from(unit.first) + u128::from(unit.count) <= end).then_some(
        EngineUnit {
            negative: unit.negative,
            exponent: unit.exponent,
            first: lead,
            count: lead,
        },
    )
}

fn binade_key(f: Function, fmt: Format, min_bits: u32, unit: &UnitSpec) -> Option<BinadeKey> {
    binade_of(fmt, unit).map(|_| (f, fmt, min_bits, unit.negative, unit.exponent))
}

/// Computes once (MPFR: call it off the async threads) whether the binade of `unit` skips
/// nothing, for [`skips_nothing`]. It does when its runs can only be arguments beyond the range
/// (`skip::runs_are_pointwise` of the whole binade, hence of each unit in it: no pole, exact
/// region or trivial rule reaches it) and the engine's runs of the whole binade are none. The
/// runs a unit skips are then exactly its arguments beyond the format's range (a property of
/// each argument, which `skipped_runs` decides exactly), so a unit inside such a binade has
/// none: the same answer its own recomputation gives, without two MPFR evaluations and a ball
/// series per unit.
pub fn learn_binade(function: &str, fmt: Format, min_bits: u32, unit: &UnitSpec) {
    let Ok(f) = Function::from_str(function) else {
        return;
    };
    let (Some(binade), Some(key)) = (binade_of(fmt, unit), binade_key(f, fmt, min_bits, unit))
    else {
        return;
    };
    if fmt.exponents.is_none() || !runs_are_pointwise(f, fmt, binade) {
        return;
    }
    {
        let mut map = calm_binades().lock().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(&key) {
            return;
        }
        map.insert(key, None);
    }
    let calm = tmd_kernels::regions::skip::skipped_runs(f, fmt, min_bits, binade)
        .is_ok_and(|r| r.is_empty());
    calm_binades()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, Some(calm));
}

/// The engine's spelling of a stored unit.
fn engine_unit(unit: &UnitSpec) -> EngineUnit {
    EngineUnit {
        negative: unit.negative,
        exponent: unit.exponent,
        first: unit.first,
        count: unit.count,
    }
}

/// Whether `x` (C99 hex or decimal text) is exactly an argument of precision `p` in `unit`.
#[cfg(test)]
fn in_unit(p: Precision, unit: &UnitSpec, x: &str) -> bool {
    locate(Format::bare(p), unit, x).is_some()
}

/// The argument `x` (C99 hex or decimal text) as (sign, exponent, significand), when it is
/// exactly an argument of format `fmt` in `unit`: one key however it is spelled. Zero and the
/// subnormal numbers of a named format are located as units hold them (binade `emin`).
fn locate(fmt: Format, unit: &UnitSpec, x: &str) -> Option<(bool, i32, u64)> {
    // 256 bits hold any hex argument of precision <= 64 exactly; a decimal one that is not
    // exact at that precision is not an argument anyway.
    let v = parse_number(x, 256, Round::Nearest).ok()?;
    let a = Argument::from_float_in(&v, fmt)?;
    (a.negative == unit.negative
        && a.exponent == unit.exponent
        && a.significand >= unit.first
        && u128::from(a.significand) < u128::from(unit.first) + u128::from(unit.count))
    .then_some((a.negative, a.exponent, a.significand))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit_at_one(count: u64) -> UnitSpec {
        UnitSpec {
            negative: false,
            exponent: 0,
            first: 1 << 23,
            count,
        }
    }

    #[test]
    fn arguments_are_located_in_their_unit_exactly() {
        let p = Precision::BINARY32;
        let u = unit_at_one(16);
        assert!(in_unit(p, &u, "0x1p+0"));
        assert!(in_unit(p, &u, "0x1.00001ep+0"));
        assert!(!in_unit(p, &u, "0x1.00002p+0"), "one past the unit");
        assert!(!in_unit(p, &u, "-0x1p+0"), "other sign");
        assert!(!in_unit(p, &u, "0x1p+1"), "other binade");
        assert!(!in_unit(p, &u, "0x1.000001p+0"), "not a binary32 number");
        assert!(!in_unit(p, &u, "garbage"));
        assert_eq!(
            locate(Format::bare(p), &u, "0x1p+0"),
            locate(Format::bare(p), &u, "0x2p-1"),
            "one key per argument"
        );
        assert_eq!(
            locate(Format::bare(p), &u, "0x1p+0"),
            locate(Format::bare(p), &u, "1.0")
        );
    }

    #[test]
    fn farm_units_are_2_44_at_binary64_and_bounded_by_their_cases() {
        assert_eq!(default_unit_bits(53, 44), 44);
        assert_eq!(
            default_unit_bits(53, 32),
            41,
            "at most 2^10 expected HR-cases"
        );
        assert_eq!(
            default_unit_bits(24, 20),
            20,
            "binary32 as the engine's default"
        );
        // binary80: units of 2^50 (about 2 s of an H100 in [1, 2) at 54 bits, issue 25).
        assert_eq!(default_unit_bits(64, 60), 50);
        assert_eq!(default_unit_bits(64, 54), 50);
        assert_eq!(default_unit_bits(8, 30), 12);
        for p in 8..=64 {
            for k in 1..=64 {
                let u = default_unit_bits(p, k);
                let most = if p > 53 { 50 } else { 44 };
                assert!(u <= most && u <= k + 9, "p {p} k {k}: {u}");
                // The server's refusal of campaigns whose results would overflow never fires
                // on a default.
                assert!(
                    crate::domain::check_cases_fit(u, k, 10_000).is_ok(),
                    "p {p} k {k}"
                );
            }
        }
    }

    #[test]
    fn planning_resolves_names_and_refuses_overlaps() {
        let c = NewCampaign {
            name: "t".into(),
            function: "EXP".into(),
            format: Some("binary32".into()),
            precision: None,
            min_bits: 10,
            ranges: vec![tmd_wire::ArgRange {
                from: "1".into(),
                to: "2".into(),
            }],
            whole: false,
            unit_bits: Some(20),
            replication: 1,
            distinct_owners: false,
            adaptive: false,
            audit_rate: 0.1,
            trust_after: 20,
            trust_all_workers: false,
            priority: 0,
        };
        let p = plan(&c, 100).unwrap();
        assert_eq!(
            (p.function.as_str(), p.precision, p.unit_bits),
            ("exp", 24, 20)
        );
        assert_eq!(p.units.len(), 8);
        assert!(plan(&c, 7).is_err(), "more units than allowed");
        assert_eq!(p.format.as_deref(), Some("binary32"));
        // Every named format is accepted with its precision, and keeps its name.
        for (name, bits, unit_bits) in [
            ("binary16", 11, 6),
            ("bfloat16", 8, 4),
            ("binary32", 24, 12),
            ("binary64", 53, 40),
            ("binary80", 64, 44),
            ("half", 11, 6),
            ("extended", 64, 44),
        ] {
            let p = plan(
                &NewCampaign {
                    format: Some(name.into()),
                    unit_bits: Some(unit_bits),
                    ranges: vec![tmd_wire::ArgRange {
                        from: "1".into(),
                        to: "1.0625".into(),
                    }],
                    ..c.clone()
                },
                1 << 16,
            )
            .unwrap();
            assert_eq!(p.precision, bits, "{name}");
            let named = p.format.expect("a named format");
            assert_eq!(Format::named(&named).unwrap().precision.bits(), bits);
            assert!(stored_format(bits, Some(&named)).is_ok());
        }
        // A bare precision has no format: its exponent is unbounded, and says so.
        let p11 = NewCampaign {
            format: Some("p11".into()),
            ..c.clone()
        };
        let p = plan(&p11, 100).unwrap();
        assert_eq!((p.precision, p.format), (11, None));
        assert!(describe_format(11, None).contains("unbounded"));
        assert!(describe_format(11, Some("binary16")).contains("subnormal"));
        // Arguments of a named format are its normal numbers: beyond binary16's largest
        // binade nothing is left.
        let big = NewCampaign {
            format: Some("binary16".into()),
            ranges: vec![tmd_wire::ArgRange {
                from: "0x1p+16".into(),
                to: "0x1p+17".into(),
            }],
            unit_bits: Some(8),
            ..c.clone()
        };
        assert!(plan(&big, 100).is_err());
        let mut twice = c.clone();
        twice.ranges.push(tmd_wire::ArgRange {
            from: "1.5".into(),
            to: "3".into(),
        });
        assert!(plan(&twice, 100)
            .unwrap_err()
            .to_string()
            .contains("overlap"));
        let default = NewCampaign {
            unit_bits: None,
            ..c
        };
        assert_eq!(
            plan(&default, 1000).unwrap().unit_bits,
            tmd_kernels::plan::default_unit_bits(Precision::BINARY32).min(10 + 9)
        );
    }

    /// Issue 25: a whole campaign plans every finite argument of its format, stores the
    /// domain as its one range, and refuses what is out of reach.
    #[test]
    fn whole_campaigns_plan_the_format_and_refuse_what_is_out_of_reach() {
        let c = NewCampaign {
            name: "w".into(),
            function: "exp".into(),
            format: Some("binary16".into()),
            precision: None,
            min_bits: 8,
            ranges: Vec::new(),
            whole: true,
            unit_bits: Some(6),
            replication: 1,
            distinct_owners: false,
            adaptive: false,
            audit_rate: 0.1,
            trust_after: 20,
            trust_all_workers: false,
            priority: 0,
        };
        let p = plan(&c, 1 << 20).unwrap();
        let (from, to) = (&p.ranges[0].from, &p.ranges[0].to);
        assert_eq!((from.as_str(), to.as_str()), ("-0x1.ffcp+15", "0x1p+16"));
        // Every finite binary16 number but -0: 2^16 - 2^11 (infinities, NaNs) - 1.
        let arguments: u64 = p.units.iter().map(|u| u.count).sum();
        assert_eq!(arguments, (1 << 16) - (1 << 11) - 1);
        assert!(
            p.units.iter().any(|u| u.count > 1 << 6),
            "nothing collapsed"
        );
        let sin64 = NewCampaign {
            function: "sin".into(),
            format: Some("binary64".into()),
            ..c.clone()
        };
        let e = plan(&sin64, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("out of reach") && e.contains("0x1p+20"), "{e}");
        let bare = NewCampaign {
            format: Some("p24".into()),
            ..c
        };
        assert!(plan(&bare, 1 << 20)
            .unwrap_err()
            .to_string()
            .contains("named format"));
    }

    /// The unit of binary16 significands `[first, first + count)` at `2^exponent`.
    #[test]
    fn a_binade_that_skips_nothing_answers_for_its_units() {
        let b64 = Format::named("binary64").unwrap();
        let lead = 1u64 << 52;
        let in_one = half_unit(false, 0, lead + (5 << 32), 1 << 32);
        // Unknown until learned (the first unit is recomputed), then answered for any unit.
        assert!(!skips_nothing("exp", b64, 40, &in_one));
        learn_binade("exp", b64, 40, &in_one);
        assert!(skips_nothing("exp", b64, 40, &in_one));
        assert!(check_skipped("exp", b64, 40, &in_one, &[])
            .unwrap()
            .is_empty());
        // The same binade for another function or min_bits is learned apart.
        assert!(!skips_nothing("sin", b64, 40, &in_one));
        assert!(!skips_nothing("exp", b64, 44, &in_one));
        // [512, 1024): exp overflows binary64 from about 709.78 on, so no unit there is answered
        // from the binade, and one beyond the edge has its run.
        let edge = half_unit(false, 9, lead + (lead >> 1), 1 << 32);
        learn_binade("exp", b64, 40, &edge);
        assert!(!skips_nothing("exp", b64, 40, &edge));
        let runs = check_skipped("exp", b64, 40, &edge, &[]);
        assert!(
            runs.is_err(),
            "a unit beyond 709.78 must list its overflow run"
        );
        // Near 0 a trivial rule reaches: never answered from the binade.
        let tiny = half_unit(false, -30, lead, 1 << 32);
        learn_binade("exp", b64, 40, &tiny);
        assert!(!skips_nothing("exp", b64, 40, &tiny));
        // Subnormal significands (below 2^(p-1) in binade emin) are outside the binade key.
        let sub = half_unit(false, -1022, 0, 1 << 32);
        learn_binade("exp", b64, 40, &sub);
        assert!(!skips_nothing("exp", b64, 40, &sub));
        // A function with poles is always recomputed.
        let t = half_unit(false, 0, lead, 1 << 32);
        learn_binade("tan", b64, 40, &t);
        assert!(!skips_nothing("tan", b64, 40, &t));
        // Far trivial runs depend on the cut (tanh near 1 in [64, 128)), and so do exact runs
        // (sinpi in [2^51, 2^52), every argument a half-integer): never answered from the
        // binade, and a unit there without its run is refused.
        for (f, e) in [("tanh", 6), ("sinpi", 51), ("exp2", 60)] {
            let far = half_unit(false, e, lead, 1 << 32);
            learn_binade(f, b64, 40, &far);
            assert!(!skips_nothing(f, b64, 40, &far), "{f}");
            assert!(
                !skips_nothing(f, Format::bare(Precision::new(53).unwrap()), 40, &far),
                "{f}"
            );
        }
        let far = half_unit(false, 6, lead, 1 << 32);
        assert!(
            check_skipped("tanh", b64, 40, &far, &[]).is_err(),
            "tanh's far run is required"
        );
    }

    fn half_unit(negative: bool, exponent: i32, first: u64, count: u64) -> UnitSpec {
        UnitSpec {
            negative,
            exponent,
            first,
            count,
        }
    }

    fn run(first: &str, last: &str, count: u64, reason: &str) -> SkippedRun {
        SkippedRun {
            first: first.into(),
            last: last.into(),
            count,
            reason: reason.into(),
            rule: String::new(),
        }
    }

    #[test]
    fn skipped_runs_are_recomputed_and_a_forged_or_missing_run_is_refused() {
        let fmt = Format::named("binary16").unwrap();
        // exp on [8, 16) in binary16: overflow from log(2^16) = 11.09 on.
        let unit = half_unit(false, 3, 1024, 1024);
        let expected = check_skipped("exp", fmt, 10, &unit, &[]).unwrap_err();
        assert!(
            matches!(&expected, Error::ForgedCase(m) if m.contains("lists 0 runs") && m.contains("overflow")),
            "a missing run is refused: {expected}"
        );
        let engine = tmd_kernels::regions::skip::skipped_runs(
            Function::Exp,
            fmt,
            10,
            EngineUnit {
                negative: false,
                exponent: 3,
                first: 1024,
                count: 1024,
            },
        )
        .unwrap();
        assert_eq!(engine.len(), 1);
        let honest = run(
            &engine[0].first,
            &engine[0].last,
            engine[0].count,
            "overflow",
        );
        assert_eq!(honest.last, "0x1.ffcp+3");
        let stored = check_skipped("exp", fmt, 10, &unit, std::slice::from_ref(&honest)).unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].reason, "overflow");
        assert!(stored[0].rule.contains("emax"), "{}", stored[0].rule);
        // The same run spelled another way is the same run.
        let respelled = SkippedRun {
            last: "0x3.ff8p+2".into(),
            ..honest.clone()
        };
        let r = check_skipped("exp", fmt, 10, &unit, &[respelled]);
        assert!(r.is_ok(), "{r:?}");
        // Forged: one argument fewer, another reason, a run that starts elsewhere, an extra run.
        for forged in [
            vec![SkippedRun {
                count: honest.count - 1,
                ..honest.clone()
            }],
            vec![SkippedRun {
                reason: "underflow".into(),
                ..honest.clone()
            }],
            vec![SkippedRun {
                first: "0x1.8p+3".into(),
                ..honest.clone()
            }],
            vec![honest.clone(), run("0x1p+3", "0x1p+3", 1, "pole")],
        ] {
            let e = check_skipped("exp", fmt, 10, &unit, &forged).unwrap_err();
            assert!(matches!(e, Error::ForgedCase(_)), "{forged:?}: {e}");
        }
        // A unit in range skips nothing, and a run claimed there is refused.
        let calm = half_unit(false, 0, 1024, 1024);
        assert!(check_skipped("exp", fmt, 10, &calm, &[])
            .unwrap()
            .is_empty());
        assert!(check_skipped(
            "exp",
            fmt,
            10,
            &calm,
            &[run("0x1p+0", "0x1p+0", 1, "overflow")]
        )
        .is_err());
        // A bare precision of the same function has an unbounded exponent: nothing skipped.
        let bare = Format::bare(Precision::new(11).unwrap());
        assert!(skips_nothing("exp", bare, 10, &unit));
        assert!(!skips_nothing("exp", fmt, 10, &unit));
        assert!(
            !skips_nothing("tanpi", bare, 10, &unit),
            "poles are skipped in any format"
        );
        assert!(check_skipped("exp", bare, 10, &unit, &[])
            .unwrap()
            .is_empty());
    }

    /// Issue 29: a tie at `d = 1/2` (exp2(-26) = 2^-26 in binary16, halfway between 0 and the
    /// midpoint 2^-25) is stored as `fp`, the convention of the engine's verification
    /// (docs/error-analysis.md §7), whatever the worker said.
    #[test]
    fn ties_at_one_half_are_stored_as_fp() {
        let b16 = Format::named("binary16").unwrap();
        let unit = half_unit(true, 4, 0x680, 1);
        let case = HrCase {
            x: "-0x1.ap+4".into(),
            bits: 1,
            neg_log2_d: 1.0,
            kind: HrKind::Mid,
            rounded: "0x0p+0".into(),
        };
        let v = verify_result("exp2", b16, 1, &unit, &[case], &[]).unwrap();
        assert_eq!(
            (v[0].bits, v[0].kind, v[0].neg_log2_d),
            (1, HrKind::Fp, 1.0)
        );
    }

    #[test]
    fn subnormal_results_are_verified_on_the_subnormal_grid() {
        // Issue 14's example: exp(-0x1.8feebp+6) is about 16.3 bits hard on binary32's
        // subnormal grid, and -0x1.8ff9eap+6 (hard only with an unbounded exponent) is not.
        let b32 = Format::named("binary32").unwrap();
        let unit = UnitSpec {
            negative: true,
            exponent: 6,
            first: 0xc7f000,
            count: 4096,
        };
        let case = |x: &str| HrCase {
            x: x.into(),
            bits: 16,
            neg_log2_d: 40.0,
            kind: HrKind::Fp,
            rounded: "0x1p-140".into(),
        };
        let v = verify_result("exp", b32, 12, &unit, &[case("-0x1.8feebp+6")], &[]).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].bits, 16);
        let e = verify_result("exp", b32, 12, &unit, &[case("-0x1.8ff9eap+6")], &[]).unwrap_err();
        assert!(matches!(e, Error::ForgedCase(_)), "{e}");
        let p24 = Format::bare(Precision::BINARY32);
        assert!(verify_result("exp", p24, 12, &unit, &[case("-0x1.8ff9eap+6")], &[]).is_ok());
    }
}
