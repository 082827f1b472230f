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
use tmd_kernels::plan::collapse::collapse_skipped;
use tmd_kernels::plan::reduce::{self, DerivationRecord, DerivedRun};
use tmd_kernels::plan::whole::{split_whole, split_whole_reduced, whole_domain};
use tmd_kernels::plan::{split_range_in, UnitSpec as EngineUnit};
use tmd_kernels::regions::runs::TrivialRun;
use tmd_kernels::regions::skip::{runs_are_pointwise, skipped_whole};
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
    /// What the plan derives instead of searching (the function's reduction), `None` where
    /// nothing is derived.
    pub derivation: Option<DerivationRecord>,
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

/// Resolves the function and precision and cuts every range into units of one binade each,
/// a run of units the search would skip whole merged into one (as a whole plan has them).
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
    let mut derivation = None;
    if c.whole {
        let bad = |e: tmd_kernels::plan::whole::WholeError| Error::BadRequest(e.to_string());
        let d = whole_domain(function, fmt).map_err(bad)?;
        let whole = if c.reduction {
            split_whole_reduced(function, fmt, c.min_bits, Some(unit_bits)).map_err(bad)?
        } else {
            let units = split_whole(function, fmt, c.min_bits, Some(unit_bits)).map_err(bad)?;
            (units, reduce::Derivation::default())
        };
        units = whole.0.into_iter().map(wire).collect();
        derivation = whole.1.record();
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
        // Units the search would skip whole become one unit per run, as a whole plan has them:
        // wider than the unit size, a unit costs nothing in the weights, leases and ETA.
        let specs = collapse_skipped(function, fmt, c.min_bits, specs);
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
    if c.reduction && !c.whole {
        // The ranges' units together: a base binade may come from one range, the binades it
        // derives from others.
        let specs = units.iter().map(engine_unit).collect();
        let (kept, d) = reduce::reduce(function, fmt, c.min_bits, specs);
        units = kept.into_iter().map(wire).collect();
        derivation = d.record();
    }
    Ok(Plan {
        function: function.name().to_string(),
        precision: precision.bits(),
        format: fmt.exponents.map(|_| fmt.name()),
        unit_bits,
        ranges,
        units,
        derivation,
    })
}

/// Derived runs as the REST answers show them.
pub fn wire_runs(runs: Vec<DerivedRun>) -> Vec<tmd_wire::DerivedRun> {
    runs.into_iter()
        .map(|r| tmd_wire::DerivedRun {
            first: r.first,
            last: r.last,
            arguments: r.count.to_string(),
            base: r.base,
            rule: r.rule,
        })
        .collect()
}

/// One binade of a campaign as the plan's weights sample it: sign, exponent, its arguments,
/// those of its units the engine searches (not collapsed blocks) and up to
/// [`sample::PROBES`](super::sample::PROBES) of those units, spread over them, to draw its
/// sample from (none: every argument collapsed, costing nothing).
#[derive(Debug, Clone)]
pub struct BinadeSample {
    pub negative: bool,
    pub exponent: i32,
    pub arguments: u128,
    pub searched: u128,
    pub probes: Vec<UnitSpec>,
}

/// Each binade of `units` with its arguments and its probes, in (sign, exponent) order.
pub fn binade_samples(units: &[UnitSpec], unit_bits: u32) -> Vec<BinadeSample> {
    use super::sample::{probe_indices, searched, PROBES};
    let mut binades: std::collections::BTreeMap<(bool, i32), Vec<&UnitSpec>> = Default::default();
    for u in units {
        binades.entry((u.negative, u.exponent)).or_default().push(u);
    }
    binades
        .into_iter()
        .map(|((negative, exponent), mut us)| {
            us.sort_by_key(|u| u.first);
            let probes = probe_indices(&us, unit_bits, PROBES);
            BinadeSample {
                negative,
                exponent,
                arguments: us.iter().map(|u| u128::from(u.count)).sum(),
                searched: us
                    .iter()
                    .filter(|u| searched(u, unit_bits))
                    .map(|u| u128::from(u.count))
                    .sum(),
                probes: probes.into_iter().map(|i| us[i].clone()).collect(),
            }
        })
        .collect()
}

/// Most binades whose units the plan's weights plan one by one; beyond it every k-th is
/// planned and the others take the cost of the nearest planned binade (a whole binary80
/// function has tens of thousands of binades, and its cost moves slowly from one to the next).
pub const MAX_PLANNED_BINADES: usize = 512;

/// Which of `n` binades are planned: all up to [`MAX_PLANNED_BINADES`], else every k-th and
/// the last, at most that many and one more.
pub fn planned_binades(n: usize) -> Vec<usize> {
    if n <= MAX_PLANNED_BINADES {
        return (0..n).collect();
    }
    let k = n.div_ceil(MAX_PLANNED_BINADES);
    let mut picked: Vec<usize> = (0..n).step_by(k).collect();
    if picked.last() != Some(&(n - 1)) {
        picked.push(n - 1);
    }
    picked
}

/// The index in `picked` (sorted, not empty) of the one nearest to `i` (the first of two as
/// near).
pub fn nearest_planned(picked: &[usize], i: usize) -> usize {
    let j = picked.partition_point(|&p| p < i);
    match (j.checked_sub(1), picked.get(j)) {
        (Some(a), Some(&c)) if i - picked[a] <= c - i => a,
        (Some(a), None) => a,
        _ => j,
    }
}

/// Each sampled binade as (sign, exponent, arguments, predicted cost per argument): the cost
/// of its sample unit as the engine's plan predicts it (`tmd_kernels::search::prior`) spread
/// over the share of its arguments that cost anything, then over all of them. The sample is
/// the middle probe the search runs, and the share is that of the probes it runs within the
/// searched units (a collapsed block, or a unit the search skips whole, costs nothing: an exp
/// binade that overflows from its middle on weighs its searched part, not zero). Binades in
/// parallel ([`planned_binades`] of them; the others take their nearest planned neighbour's
/// cost). A unit is planned, not searched: trivial regions, skipped runs and
/// generation only (about a millisecond a piece).
pub fn planned_costs(
    function: &str,
    fmt: Format,
    min_bits: u32,
    samples: &[BinadeSample],
) -> Result<Vec<(bool, i32, u128, f64)>> {
    use rayon::prelude::*;
    let f = Function::from_str(function).map_err(|e| Error::BadRequest(e.to_string()))?;
    let cfg = tmd_kernels::search::SearchConfig::in_format(f, fmt, min_bits);
    let picked = planned_binades(samples.len());
    let costs: Vec<f64> = picked
        .par_iter()
        .map(|&i| {
            let b = &samples[i];
            let runs: Vec<bool> = b
                .probes
                .iter()
                .map(|u| !skipped_whole(f, fmt, min_bits, engine_unit(u)))
                .collect();
            let Some((sample, share)) = super::sample::pick(&runs) else {
                return 0.0;
            };
            let unit = engine_unit(&b.probes[sample]);
            let per_argument =
                tmd_kernels::search::prior::planned_cost(&cfg, unit) / unit.count as f64;
            per_argument * b.searched as f64 * share / b.arguments as f64
        })
        .collect();
    Ok(samples
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let near = nearest_planned(&picked, i);
            (b.negative, b.exponent, b.arguments, costs[near])
        })
        .collect())
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

/// What bounds a result's re-verification besides the cases themselves: the unit's skipped runs
/// (no honest engine lists a case inside one: a trivial run's arguments are all hard, and are
/// reported as the run), the cases an admin removed from the campaign, and the time it may take.
#[derive(Debug, Clone, Copy, Default)]
pub struct CaseBounds<'a> {
    /// The unit's skipped runs as the server computed them ([`check_skipped`]).
    pub runs: &'a [SkippedRun],
    /// Canonical arguments of the unit's cases that an admin removed (planted ones).
    pub removed: &'a [String],
    /// The verification stops with [`Error::VerifyBudget`] once this instant has passed.
    pub deadline: Option<std::time::Instant>,
}

/// Re-verifies every reported HR-case with MPFR: it must be an argument of the unit, outside
/// the unit's skipped runs and the cases an admin removed, and at least `min_bits` hard.
/// Returns the distinct cases as the server computed them (canonical `x`, its own bit count,
/// distance, kind and rounding), or `ForgedCase` naming the first that fails, or `VerifyBudget`
/// when `bounds.deadline` passes first. Reported exact cases must be arguments of the unit where
/// f(x) is exact.
///
/// A case reported twice (or spelled two ways, `0x1p+0` and `0x2p-1`) is verified and counted
/// once: MPFR's time is the server's, and a worker must not be able to spend it for free. The
/// checks that need no MPFR (the unit, the runs, the removed cases) come first.
pub fn verify_result(
    function: &str,
    fmt: Format,
    min_bits: u32,
    unit: &UnitSpec,
    cases: &[HrCase],
    exact: &[String],
    bounds: &CaseBounds<'_>,
) -> Result<Vec<HrCase>> {
    let function = Function::from_str(function).map_err(|e| Error::Internal(e.to_string()))?;
    let runs = located_runs(fmt, unit, bounds.runs);
    let removed: std::collections::HashSet<(bool, i32, u64)> = bounds
        .removed
        .iter()
        .filter_map(|x| locate(fmt, unit, x))
        .collect();
    let over = |done: usize| -> Result<()> {
        match bounds.deadline {
            Some(d) if std::time::Instant::now() >= d => Err(Error::VerifyBudget(format!(
                "verifying this result ran out of its time after {done} of its {} cases; a \
                 unit's results may not cost the coordinator more (`--verify-seconds-per-unit`)",
                cases.len() + exact.len()
            ))),
            _ => Ok(()),
        }
    };
    let mut seen = std::collections::HashSet::new();
    let mut keyed = Vec::with_capacity(cases.len());
    for case in cases {
        let forged = |why: &str| Error::ForgedCase(format!("HR-case x = {:?}: {why}", case.x));
        let Some(key) = locate(fmt, unit, &case.x) else {
            return Err(forged("not an argument of this unit"));
        };
        if let Some(run) = runs.iter().find(|r| r.holds(key.2)) {
            return Err(forged(&run.why()));
        }
        if removed.contains(&key) {
            return Err(forged(
                "an admin removed this case from the campaign: no engine reports it",
            ));
        }
        if seen.insert(key) {
            keyed.push(case);
        }
    }
    let mut out = Vec::with_capacity(keyed.len());
    for (done, case) in keyed.into_iter().enumerate() {
        over(done)?;
        let forged = |why: &str| Error::ForgedCase(format!("HR-case x = {:?}: {why}", case.x));
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
        over(out.len() + seen_exact.len())?;
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

/// A skipped run of a unit as significands of its binade, with what to say of a case in it.
struct LocatedRun<'a> {
    first: u64,
    last: u64,
    run: &'a SkippedRun,
}

impl LocatedRun<'_> {
    fn holds(&self, significand: u64) -> bool {
        (self.first..=self.last).contains(&significand)
    }

    fn why(&self) -> String {
        format!(
            "it lies in the unit's skipped run [{}, {}] ({}: {}); an engine lists such a run, \
             never a case inside it",
            self.run.first, self.run.last, self.run.reason, self.run.rule
        )
    }
}

/// The unit's runs located in its binade (runs the server computed always are).
fn located_runs<'a>(fmt: Format, unit: &UnitSpec, runs: &'a [SkippedRun]) -> Vec<LocatedRun<'a>> {
    runs.iter()
        .filter_map(|run| {
            let first = locate(fmt, unit, &run.first)?.2;
            let last = locate(fmt, unit, &run.last)?.2;
            Some(LocatedRun {
                first: first.min(last),
                last: first.max(last),
                run,
            })
        })
        .collect()
}

/// The skipped run of `unit` (as [`check_skipped`]'s `runs`) that holds the argument at
/// `significand` of its binade, described for the person who loaded it; `None` when no run
/// holds it.
pub fn run_holding(
    fmt: Format,
    unit: &UnitSpec,
    runs: &[SkippedRun],
    significand: u64,
) -> Option<String> {
    located_runs(fmt, unit, runs)
        .into_iter()
        .find(|r| r.holds(significand))
        .map(|r| r.why())
}

/// The runs of `unit` that must be skipped in `fmt`, computed here, with their rules (what a
/// known case is checked against: none may lie inside one).
pub fn unit_runs(
    function: &str,
    fmt: Format,
    min_bits: u32,
    unit: &UnitSpec,
) -> Result<Vec<SkippedRun>> {
    let f = Function::from_str(function).map_err(|e| Error::Internal(e.to_string()))?;
    let runs = tmd_kernels::regions::skip::skipped_runs(f, fmt, min_bits, engine_unit(unit))
        .map_err(|e| Error::Internal(format!("computing the unit's skipped runs: {e}")))?;
    Ok(runs
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

/// The HR-cases that campaign derivation `d` derives from a base unit's verified `cases`,
/// each judged again by MPFR, with the base case it comes from: `(base x, derived case)`.
/// None for a unit outside the base binades. A derived case MPFR does not confirm is the
/// server's own fault (a wrong reduction), never the worker's: an internal error.
pub fn derive_cases(
    function: &str,
    fmt: Format,
    min_bits: u32,
    d: &reduce::Derivation,
    cases: &[HrCase],
) -> Result<Vec<(String, HrCase)>> {
    let f = Function::from_str(function).map_err(|e| Error::Internal(e.to_string()))?;
    let base: Vec<tmd_kernels::oracle::verify::HrCase> = cases
        .iter()
        .map(|c| tmd_kernels::oracle::verify::HrCase {
            x: c.x.clone(),
            bits: c.bits,
            neg_log2_d: c.neg_log2_d,
            kind: match c.kind {
                HrKind::Fp => Kind::Fp,
                HrKind::Mid => Kind::Mid,
            },
            rounded: c.rounded.clone(),
        })
        .collect();
    let derived = reduce::derive_each(f, fmt, min_bits, d, &base)
        .map_err(|e| Error::Internal(format!("deriving HR-cases: {e}")))?;
    Ok(derived
        .into_iter()
        .map(|(from, c)| (from, wire_case(c)))
        .collect())
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

/// A verified case and where it lies (sign, exponent, significand in the units' writing).
pub type PlacedCase = ((bool, i32, u64), HrCase);

/// The base case a known case of a derived binade stands for (`place`: where it lies, in the
/// units' writing), verified by MPFR like any known case, with the same hardness as the
/// derived one: `None` where the case is not derived.
pub fn known_base(
    function: &str,
    fmt: Format,
    min_bits: u32,
    d: &reduce::Derivation,
    derived: &HrCase,
    place: (bool, i32, u64),
) -> Option<std::result::Result<PlacedCase, String>> {
    let (negative, exponent, significand) = place;
    let base = d.base_argument(
        fmt,
        Argument {
            negative,
            exponent,
            significand,
        },
    )?;
    let x = base.to_hex(fmt.precision);
    Some(
        verify_known(function, fmt, min_bits, &x).and_then(|(place, case)| {
            if (case.bits, case.kind) == (derived.bits, derived.kind) {
                Ok((place, case))
            } else {
                Err(format!(
                    "its base case {x} has {} bits ({}), not {} ({}): the reduction fails \
                     here; report it",
                    case.bits,
                    case.kind.as_str(),
                    derived.bits,
                    derived.kind.as_str()
                ))
            }
        }),
    )
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
    let expected = unit_runs(function, fmt, min_bits, unit)?;
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
                .find(|e| !posted.iter().any(|s| s.reason == e.reason))
                .map(|e| format!(" (such as [{}, {}], {})", e.first, e.last, e.reason))
                .unwrap_or_default()
        )));
    }
    for (s, e) in posted.iter().zip(&expected) {
        let same = s.count == e.count
            && s.reason == e.reason
            && locate(fmt, unit, &s.first).is_some()
            && locate(fmt, unit, &s.first) == locate(fmt, unit, &e.first)
            && locate(fmt, unit, &s.last) == locate(fmt, unit, &e.last);
        if !same {
            return Err(forged(format!(
                "[{}, {}] ({} arguments, {}) where the unit has [{}, {}] ({} arguments, {})",
                s.first, s.last, s.count, s.reason, e.first, e.last, e.count, e.reason
            )));
        }
    }
    Ok(expected)
}

/// The arguments of `unit` the count audit judges (`domain::audit`): its arguments less its
/// skipped `runs`, where the unit lies in an ordinary binade (no pole, exact region, trivial
/// run or asymptote can reach it: `skip::runs_are_pointwise`); `None` elsewhere, where counts
/// do not follow the model.
pub fn audited_arguments(
    function: &str,
    fmt: Format,
    unit: &UnitSpec,
    runs: &[SkippedRun],
) -> Option<f64> {
    let f = Function::from_str(function).ok()?;
    if !runs_are_pointwise(f, fmt, engine_unit(unit)) {
        return None;
    }
    let skipped: u64 = runs.iter().map(|r| r.count).sum();
    Some(unit.count.saturating_sub(skipped) as f64)
}

/// The exact cases of `unit` on its binade's lattice (sinpi, cospi, tanpi): an engine counts
/// them by their rule and does not list them (`regions::lattice`), so a result's counters may
/// admit that many more cases than it lists.
pub fn lattice_count(function: &str, fmt: Format, unit: &UnitSpec) -> u64 {
    Function::from_str(function).map_or(0, |f| {
        tmd_kernels::regions::lattice::lattice_count(f, fmt, engine_unit(unit))
    })
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

/// The canonical spelling of `x` (what the server records cases under), when it is a number of
/// the format.
pub fn canonical_argument(fmt: Format, x: &str) -> Option<String> {
    let v = parse_number(x, 256, Round::Nearest).ok()?;
    Argument::from_float_in(&v, fmt)?;
    Some(tmd_kernels::numbers::format::float_to_hex(&v))
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

/// Skipped runs listed in value order (a campaign's, unit by unit), merged where one ends on
/// the number before the next begins with the same reason and rule: whole binades of
/// underflow, overflow or a trivial region read as one run, with its argument count, as
/// `search --whole` lists them. Trivial runs merge when they round like the same `g(x)`,
/// keeping the fewest bits of the two. Runs of `fmt` only; a run whose ends do not parse
/// stays as it is.
pub fn merge_runs(fmt: Format, runs: Vec<SkippedRun>) -> Vec<SkippedRun> {
    let arg = |x: &str| {
        let v = parse_number(x, 256, Round::Nearest).ok()?;
        Argument::from_float_in(&v, fmt)
    };
    let mut out: Vec<(SkippedRun, Option<Argument>)> = Vec::with_capacity(runs.len());
    for run in runs {
        let first = arg(&run.first);
        let last = arg(&run.last);
        if let Some((prev, prev_last)) = out.last_mut() {
            let adjacent = match (prev_last.as_ref(), first.as_ref()) {
                (Some(a), Some(b)) => next_in_value(fmt.precision, a, b),
                _ => false,
            };
            if adjacent && prev.reason == run.reason {
                if let Some(rule) = merged_rule(&prev.rule, &run.rule) {
                    prev.rule = rule;
                    prev.last = run.last;
                    prev.count = prev.count.saturating_add(run.count);
                    *prev_last = last;
                    continue;
                }
            }
        }
        out.push((run, last));
    }
    out.into_iter().map(|(r, _)| r).collect()
}

/// The rule of two adjacent runs of one reason read as one, when they say the same thing.
fn merged_rule(a: &str, b: &str) -> Option<String> {
    if a == b {
        return Some(a.to_string());
    }
    let (ta, tb) = (TrivialRun::from_rule(a)?, TrivialRun::from_rule(b)?);
    (ta.like == tb.like).then(|| {
        TrivialRun {
            like: ta.like,
            bits: ta.bits.min(tb.bits),
        }
        .rule()
    })
}

/// Whether `b` is the number right after `a` in value order, both of precision `p` (a binade
/// holds significands `[2^(p-1), 2^p)`, the lowest one its subnormals below; a negative
/// number's significand grows towards -infinity). Not across zero.
fn next_in_value(p: Precision, a: &Argument, b: &Argument) -> bool {
    if a.negative != b.negative || a.significand == 0 || b.significand == 0 {
        return false;
    }
    let bits = p.bits();
    let (low, high) = (1u64 << (bits - 1), (1u128 << bits) - 1);
    // Away from zero, in magnitude, from `from` to `to`.
    let up = |from: &Argument, to: &Argument| {
        (to.exponent == from.exponent
            && u128::from(to.significand) == u128::from(from.significand) + 1)
            || (to.exponent == from.exponent + 1
                && u128::from(from.significand) == high
                && to.significand == low)
    };
    if a.negative {
        up(b, a)
    } else {
        up(a, b)
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
