//! A search over many units: their results added up in argument order (skipped runs of
//! neighbouring units merged).

use crate::numbers::format::{Format, Precision};
use crate::oracle::verify::{ExactCase, HrCase};
use crate::plan::UnitSpec;
use crate::regions::lattice::{merge_runs, LatticeRun};
use crate::regions::runs::Skipped;
use crate::search::backend::{Backend, SearchError, Stats, Timings};
use crate::search::config::SearchConfig;
use crate::search::unit::{search_unit, UnitResult};
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
    /// Exact cases counted by the rule of their binade's lattice instead of listed (sinpi,
    /// cospi, tanpi), sorted by value, neighbouring runs merged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exact_lattices: Vec<LatticeRun>,
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
        let mut out = RangeResult::empty();
        for r in units {
            out.add(r);
        }
        out.finish_in(fmt)
    }

    /// Nothing searched yet.
    pub fn empty() -> RangeResult {
        RangeResult {
            arguments: 0,
            stats: Stats::default(),
            hr_cases: Vec::new(),
            exact_cases: Vec::new(),
            skipped: Vec::new(),
            exact_lattices: Vec::new(),
            timings: Timings::default(),
        }
    }

    /// Adds one unit's result as it comes (its cases and runs appended in arrival order:
    /// [`RangeResult::finish_in`] puts them in argument order). A long search keeps this
    /// instead of every unit's result: its memory is the cases', not the units'.
    pub fn add(&mut self, r: UnitResult) {
        self.arguments += r.unit.count;
        self.stats.add(&r.stats);
        self.timings.add(&r.timings);
        self.hr_cases.extend(r.hr_cases);
        self.exact_cases.extend(r.exact_cases);
        self.skipped.extend(r.skipped);
        self.exact_lattices.extend(r.exact_lattice);
    }

    /// The cases and skipped runs sorted by the value of their argument in format `fmt`,
    /// and the runs that touch on its grid merged (a trivial run keeps the fewest bits).
    /// Finishing a finished result changes nothing, so a result may be finished, added to
    /// and finished again.
    pub fn finish_in(mut self, fmt: Format) -> RangeResult {
        let p = fmt.precision;
        sort_by_argument(&mut self.hr_cases, p, |c| &c.x);
        sort_by_argument(&mut self.exact_cases, p, |c| &c.x);
        sort_by_argument(&mut self.skipped, p, |c| &c.first);
        sort_by_argument(&mut self.exact_lattices, p, |c| &c.first);
        merge_runs(&mut self.exact_lattices, p);
        let value = |x: &str| {
            crate::numbers::format::parse_number(x, p.bits(), rug::float::Round::Nearest)
                .expect("our own output parses")
        };
        let mut merged: Vec<Skipped> = Vec::with_capacity(self.skipped.len());
        for s in self.skipped.drain(..) {
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
        self.skipped = merged;
        self
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
            let v =
                crate::numbers::format::parse_number(x(&c), p.bits(), rug::float::Round::Nearest)
                    .expect("our own output parses");
            (v, c)
        })
        .collect();
    keyed.par_sort_by(|a, b| a.0.partial_cmp(&b.0).expect("finite arguments"));
    cases.extend(keyed.into_iter().map(|(_, c)| c));
}
