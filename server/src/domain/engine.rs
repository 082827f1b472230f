//! The only place the server calls the engine (`tmd-kernels`): resolving functions and
//! precisions, cutting campaign ranges into units, and re-verifying reported cases with MPFR.

use crate::domain::NewCampaign;
use crate::error::{Error, Result};
use rug::float::Round;
use std::str::FromStr;
use tmd_kernels::format::parse_number;
use tmd_kernels::format::Format;
use tmd_kernels::plan::split_range;
use tmd_kernels::verify::{verify_case, Kind, Verdict};
use tmd_kernels::{Argument, Function, Precision};
use tmd_wire::{HrCase, HrKind, UnitSpec};

/// A campaign's resolved parameters and units, in argument order.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The function's canonical name.
    pub function: String,
    pub precision: u32,
    pub unit_bits: u32,
    pub units: Vec<UnitSpec>,
}

/// Campaigns take a precision: results are judged with an unbounded exponent (the coordinator
/// does not carry exponent ranges or skipped arguments yet). `binary32` and `binary64` mean p24
/// and p53 as before; the other named formats are refused rather than silently unbounded.
fn precision_of(c: &NewCampaign) -> Result<Precision> {
    match (&c.format, c.precision) {
        (Some(f), None) => {
            let fmt = Format::from_str(f).map_err(|e| Error::BadRequest(e.to_string()))?;
            let name = fmt.name();
            if fmt.exponents.is_some() && name != "binary32" && name != "binary64" {
                return Err(Error::BadRequest(format!(
                    "format {name}: campaigns judge results with an unbounded exponent for now; \
                     search {name} with its exponent range with `tmd-worker search --format {name}`, \
                     or give precision {} for a campaign",
                    fmt.precision.bits()
                )));
            }
            Ok(fmt.precision)
        }
        (None, Some(p)) => Precision::new(p).map_err(|e| Error::BadRequest(e.to_string())),
        _ => Err(Error::BadRequest("give either format or precision".into())),
    }
}

/// The unit size of a campaign created without `unit_bits`: the engine's default for small
/// formats, but 2^44 arguments at binary64 (the engine's own default there is 2^40), and small
/// enough that a unit expects at most 2^10 HR-cases at `min_bits`.
///
/// Why 2^44 for a farm: each unit is one result row, one unit update and one verdict, so the
/// coordinator's load is rows per second = GPUs x units/s per GPU. One H100 finishes about 90
/// units of 2^40 arguments per second (exp, binary64): 100 H100s would post 9,000 results per
/// second, 1,000 of them 90,000, more than one PostgreSQL records. At 2^44 one H100 does about
/// 5.6 units/s (0.18 s each, long enough to hide per-unit overheads), so 1,000 H100s post about
/// 5,600 results per second, and a whole binary64 binade is 256 units. A CPU core takes
/// minutes per such unit, which a lease of one unit and heartbeats handle.
pub fn default_unit_bits(precision: u32, min_bits: u32) -> u32 {
    let by_format = precision.saturating_sub(4).clamp(12, 44);
    by_format.min(min_bits + 9)
}

/// Resolves the function and precision and cuts every range into units of one binade each.
/// Refuses ranges that are empty or reversed, overlapping ranges, and more than `max_units`
/// units in all.
pub fn plan(c: &NewCampaign, max_units: usize) -> Result<Plan> {
    let function = Function::from_str(&c.function).map_err(|e| Error::BadRequest(e.to_string()))?;
    let precision = precision_of(c)?;
    let unit_bits = c
        .unit_bits
        .unwrap_or_else(|| default_unit_bits(precision.bits(), c.min_bits));
    let mut units: Vec<UnitSpec> = Vec::new();
    for r in &c.ranges {
        let specs = split_range(function, precision, &r.from, &r.to, Some(unit_bits))
            .map_err(|e| Error::BadRequest(format!("range [{}, {}): {e}", r.from, r.to)))?;
        if specs.is_empty() {
            return Err(Error::BadRequest(format!(
                "range [{}, {}) holds no argument",
                r.from, r.to
            )));
        }
        units.extend(specs.into_iter().map(|u| UnitSpec {
            negative: u.negative,
            exponent: u.exponent,
            first: u.first,
            count: u.count,
        }));
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
        unit_bits,
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
    precision: u32,
    min_bits: u32,
    unit: &UnitSpec,
    cases: &[HrCase],
    exact: &[String],
) -> Result<Vec<HrCase>> {
    let function = Function::from_str(function).map_err(|e| Error::Internal(e.to_string()))?;
    let p = Precision::new(precision).map_err(|e| Error::Internal(e.to_string()))?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(cases.len());
    for case in cases {
        let forged = |why: &str| Error::ForgedCase(format!("HR-case x = {:?}: {why}", case.x));
        let Some(key) = locate(p, unit, &case.x) else {
            return Err(forged("not an argument of this unit"));
        };
        if !seen.insert(key) {
            continue;
        }
        match verify_case(function, p, min_bits, &case.x) {
            Ok(Verdict::Hard(v)) => {
                if v.bits != case.bits || v.kind.as_str() != case.kind.as_str() {
                    tracing::warn!(
                        x = %v.x,
                        reported.bits = case.bits,
                        verified.bits = v.bits,
                        "HR-case reported with other hardness than verified; keeping the verified one"
                    );
                }
                out.push(HrCase {
                    x: v.x,
                    bits: v.bits,
                    neg_log2_d: v.neg_log2_d,
                    kind: match v.kind {
                        Kind::Fp => HrKind::Fp,
                        Kind::Mid => HrKind::Mid,
                    },
                    rounded: v.rounded,
                });
            }
            Ok(Verdict::NotHard { bits }) => {
                return Err(forged(&format!(
                    "MPFR finds only {bits} identical bits, below {min_bits}"
                )))
            }
            Ok(Verdict::Exact(_)) => return Err(forged("f(x) is exact, not hard to round")),
            // Campaigns are bare precisions (exponent unbounded): nothing is skipped.
            Ok(Verdict::Skipped(r)) => return Err(forged(r.rule())),
            Err(e) => return Err(forged(&e.to_string())),
        }
    }
    let mut seen_exact = std::collections::HashSet::new();
    for x in exact {
        let forged = |why: &str| Error::ForgedCase(format!("exact case x = {x:?}: {why}"));
        let Some(key) = locate(p, unit, x) else {
            return Err(forged("not an argument of this unit"));
        };
        if !seen_exact.insert(key) {
            continue;
        }
        match verify_case(function, p, min_bits, x) {
            Ok(Verdict::Exact(_)) => {}
            Ok(_) => return Err(forged("MPFR finds f(x) not exact")),
            Err(e) => return Err(forged(&e.to_string())),
        }
    }
    Ok(out)
}

/// Whether `x` (C99 hex or decimal text) is exactly an argument of precision `p` in `unit`.
#[cfg(test)]
fn in_unit(p: Precision, unit: &UnitSpec, x: &str) -> bool {
    locate(p, unit, x).is_some()
}

/// The argument `x` (C99 hex or decimal text) as (sign, exponent, significand), when it is
/// exactly an argument of precision `p` in `unit`: one key however it is spelled.
fn locate(p: Precision, unit: &UnitSpec, x: &str) -> Option<(bool, i32, u64)> {
    // 256 bits hold any hex argument of precision <= 64 exactly; a decimal one that is not
    // exact at that precision is not an argument anyway.
    let v = parse_number(x, 256, Round::Nearest).ok()?;
    let a = Argument::from_float(&v, p)?;
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
            locate(p, &u, "0x1p+0"),
            locate(p, &u, "0x2p-1"),
            "one key per argument"
        );
        assert_eq!(locate(p, &u, "0x1p+0"), locate(p, &u, "1.0"));
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
        assert_eq!(default_unit_bits(64, 60), 44);
        assert_eq!(default_unit_bits(8, 30), 12);
        for p in 8..=64 {
            for k in 1..=64 {
                let u = default_unit_bits(p, k);
                assert!(u <= 44 && u <= k + 9, "p {p} k {k}: {u}");
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
            unit_bits: Some(20),
            replication: 1,
            distinct_owners: false,
            adaptive: false,
            audit_rate: 0.1,
            trust_after: 20,
            priority: 0,
        };
        let p = plan(&c, 100).unwrap();
        assert_eq!(
            (p.function.as_str(), p.precision, p.unit_bits),
            ("exp", 24, 20)
        );
        assert_eq!(p.units.len(), 8);
        assert!(plan(&c, 7).is_err(), "more units than allowed");
        // Formats with exponent ranges the farm does not carry yet are refused, saying why.
        for name in ["binary16", "bfloat16", "binary80"] {
            let e = plan(
                &NewCampaign {
                    format: Some(name.into()),
                    ..c.clone()
                },
                100,
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("unbounded exponent") && e.contains(name), "{e}");
        }
        let p16 = NewCampaign {
            format: Some("p11".into()),
            ..c.clone()
        };
        assert_eq!(plan(&p16, 100).unwrap().precision, 11);
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
}
