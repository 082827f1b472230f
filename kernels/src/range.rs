//! A search over many units: their results added up in argument order (skipped runs of
//! neighbouring units merged).

use crate::format::{Format, Precision};
use crate::plan::UnitSpec;
use crate::search::{
    search_unit, Backend, SearchConfig, SearchError, Skipped, Stats, Timings, UnitResult,
};
use crate::verify::{ExactCase, HrCase};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// The aggregated result of a search over many units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeResult {
    pub arguments: u64,
    pub stats: Stats,
    pub hr_cases: Vec<HrCase>,
    pub exact_cases: Vec<ExactCase>,
    /// Skipped runs (named formats), sorted by their first argument's value.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    pub timings: Timings,
}

/// Searches `units` (in parallel), calling `progress(arguments_done)` after each unit, and
/// returns the cases sorted by argument value.
pub fn search_units(
    cfg: &SearchConfig,
    units: &[UnitSpec],
    backend: &dyn Backend,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<RangeResult, SearchError> {
    let results: Vec<Result<UnitResult, SearchError>> = units
        .par_iter()
        .map(|&u| {
            let r = search_unit(cfg, u, backend);
            progress(u.count);
            r
        })
        .collect();
    let results = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(RangeResult::from_units_in(results, cfg.format()))
}

impl RangeResult {
    /// The units' results added up, cases sorted by the value of their argument.
    pub fn from_units(units: impl IntoIterator<Item = UnitResult>, p: Precision) -> RangeResult {
        RangeResult::from_units_in(units, Format::bare(p))
    }

    /// As [`RangeResult::from_units`] in format `fmt`, whose grid says which skipped runs of
    /// neighbouring units touch: those are merged (a trivial run keeps the fewest bits).
    pub fn from_units_in(units: impl IntoIterator<Item = UnitResult>, fmt: Format) -> RangeResult {
        let mut out = RangeResult::sum_units(units, fmt.precision);
        let p = fmt.precision.bits();
        let value = |x: &str| {
            crate::format::parse_number(x, p, rug::float::Round::Nearest)
                .expect("our own output parses")
        };
        let mut merged: Vec<Skipped> = Vec::with_capacity(out.skipped.len());
        for s in out.skipped.drain(..) {
            if let Some(last) = merged.last_mut() {
                let like = |r: &Skipped| r.trivial.as_ref().map(|t| t.like.clone());
                if last.reason == s.reason
                    && like(last) == like(&s)
                    && last.exact == s.exact
                    && fmt.next_up(&value(&last.last)) == value(&s.first)
                {
                    last.last = s.last;
                    last.count += s.count;
                    if let (Some(a), Some(b)) = (&mut last.trivial, s.trivial) {
                        a.bits = a.bits.min(b.bits);
                    }
                    continue;
                }
            }
            merged.push(s);
        }
        out.skipped = merged;
        out
    }

    fn sum_units(units: impl IntoIterator<Item = UnitResult>, p: Precision) -> RangeResult {
        let mut out = RangeResult {
            arguments: 0,
            stats: Stats::default(),
            hr_cases: Vec::new(),
            exact_cases: Vec::new(),
            skipped: Vec::new(),
            timings: Timings::default(),
        };
        for r in units {
            out.arguments += r.unit.count;
            out.stats.add(&r.stats);
            out.timings.add(&r.timings);
            out.hr_cases.extend(r.hr_cases);
            out.exact_cases.extend(r.exact_cases);
            out.skipped.extend(r.skipped);
        }
        sort_by_argument(&mut out.hr_cases, p, |c| &c.x);
        sort_by_argument(&mut out.exact_cases, p, |c| &c.x);
        sort_by_argument(&mut out.skipped, p, |c| &c.first);
        out
    }
}

/// Sorts cases by the value of their argument, parsing each argument once, on all threads (a
/// binade at 32 bits has two million cases: seconds on one thread, at the end of the search).
fn sort_by_argument<T: Send>(
    cases: &mut Vec<T>,
    p: Precision,
    x: impl Fn(&T) -> &str + Sync + Send,
) {
    // By value (zero and subnormal numbers included), exact at precision p.
    let mut keyed: Vec<(rug::Float, T)> = cases
        .par_drain(..)
        .map(|c| {
            let v = crate::format::parse_number(x(&c), p.bits(), rug::float::Round::Nearest)
                .expect("our own output parses");
            (v, c)
        })
        .collect();
    keyed.par_sort_by(|a, b| a.0.partial_cmp(&b.0).expect("finite arguments"));
    cases.extend(keyed.into_iter().map(|(_, c)| c));
}
