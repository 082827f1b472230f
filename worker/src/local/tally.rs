//! A local search's finished units added up as they come: which units are done (as runs of
//! neighbouring units, a few bytes however many), and their results summed into one
//! [`RangeResult`]. It is what the search keeps in memory instead of every unit's result, and
//! what its journal compacts to.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tmd_kernels::numbers::format::Format;
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::search::RangeResult;
use tmd_kernels::search::UnitResult;

/// Finished units and their results, summed.
#[derive(Debug, Clone, PartialEq)]
pub struct Tally {
    /// Runs of done significands: `(negative, exponent, first)` to the end (excluded) of
    /// the run; runs never touch (touching runs are merged).
    done: BTreeMap<(bool, i32, u64), u64>,
    /// Units added.
    pub units: u64,
    pub result: RangeResult,
}

/// A tally as the journal writes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TallyRecord {
    /// The runs of done units, each as one unit spanning the run.
    pub done: Vec<UnitSpec>,
    pub units: u64,
    pub result: RangeResult,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            done: BTreeMap::new(),
            units: 0,
            result: RangeResult::empty(),
        }
    }
}

impl Tally {
    /// Adds a finished unit (a unit added twice is counted once).
    pub fn add(&mut self, r: UnitResult) {
        if self.contains(&r.unit) {
            return;
        }
        self.mark(&r.unit);
        self.units += 1;
        self.result.add(r);
    }

    /// Whether every argument of `u` is in a done unit.
    pub fn contains(&self, u: &UnitSpec) -> bool {
        self.run_at(u.negative, u.exponent, u.first)
            .is_some_and(|(_, end)| end >= u.first + u.count)
    }

    /// The run holding significand `first`, if any: `(start, end)`.
    fn run_at(&self, negative: bool, exponent: i32, first: u64) -> Option<(u64, u64)> {
        self.done
            .range(..=(negative, exponent, first))
            .next_back()
            .filter(|((n, e, _), end)| *n == negative && *e == exponent && **end > first)
            .map(|((_, _, start), end)| (*start, *end))
    }

    fn mark(&mut self, u: &UnitSpec) {
        let (n, e) = (u.negative, u.exponent);
        let (mut start, mut end) = (u.first, u.first + u.count);
        // A run ending where this unit starts takes it in.
        if let Some((&(pn, pe, ps), &pend)) = self.done.range(..(n, e, start)).next_back() {
            if pn == n && pe == e && pend == start {
                self.done.remove(&(n, e, ps));
                start = ps;
            }
        }
        // And so does a run starting where it ends.
        if let Some(next_end) = self.done.remove(&(n, e, end)) {
            end = next_end;
        }
        self.done.insert((n, e, start), end);
    }

    /// The cases in argument order and the touching skipped runs merged: what is written
    /// down when the journal is compacted, and what the search prints at its end.
    pub fn finish_in(&mut self, fmt: Format) {
        let r = std::mem::replace(&mut self.result, RangeResult::empty());
        self.result = r.finish_in(fmt);
    }

    /// The units of `all` not done yet, in order.
    pub fn remaining(&self, all: &[UnitSpec]) -> Vec<UnitSpec> {
        all.iter().copied().filter(|u| !self.contains(u)).collect()
    }

    pub fn record(&self) -> TallyRecord {
        TallyRecord {
            done: self
                .done
                .iter()
                .map(|(&(negative, exponent, first), &end)| UnitSpec {
                    negative,
                    exponent,
                    first,
                    count: end - first,
                })
                .collect(),
            units: self.units,
            result: self.result.clone(),
        }
    }

    pub fn from_record(r: TallyRecord) -> Tally {
        let mut t = Tally {
            done: BTreeMap::new(),
            units: r.units,
            result: r.result,
        };
        for u in &r.done {
            t.mark(u);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tmd_kernels::search::{Stats, Timings};

    fn unit(negative: bool, first: u64, count: u64) -> UnitResult {
        UnitResult {
            unit: UnitSpec {
                negative,
                exponent: 0,
                first,
                count,
            },
            stats: Stats {
                units: 1,
                ..Stats::default()
            },
            hr_cases: vec![],
            exact_cases: vec![],
            skipped: Vec::new(),
            exact_lattice: None,
            timings: Timings::default(),
        }
    }

    proptest! {
        /// Units added in any order: the tally holds exactly the added ones, as few runs as
        /// touch, and survives its record.
        #[test]
        fn done_units_are_runs(order in Just((0u64..64).collect::<Vec<_>>()).prop_shuffle(), keep in proptest::collection::vec(any::<bool>(), 64)) {
            let mut t = Tally::default();
            for &k in &order {
                if keep[k as usize] {
                    t.add(unit(k % 2 == 1, (k / 2) * 16, 16));
                }
            }
            for k in 0..64u64 {
                let u = unit(k % 2 == 1, (k / 2) * 16, 16).unit;
                prop_assert_eq!(t.contains(&u), keep[k as usize]);
            }
            prop_assert_eq!(t.units, keep.iter().filter(|k| **k).count() as u64);
            // One run per maximal stretch of kept neighbours of one sign.
            let runs = (0..64usize).filter(|&k| keep[k] && (k < 2 || !keep[k - 2])).count();
            prop_assert_eq!(t.done.len(), runs);
            let back = Tally::from_record(t.record());
            prop_assert_eq!(back, t);
        }
    }

    #[test]
    fn a_unit_added_twice_counts_once_and_part_of_a_run_is_not_done() {
        let mut t = Tally::default();
        t.add(unit(false, 0, 16));
        t.add(unit(false, 0, 16));
        assert_eq!((t.units, t.result.arguments), (1, 16));
        assert!(!t.contains(&unit(false, 8, 16).unit));
        assert!(!t.contains(&unit(true, 0, 16).unit));
        let all: Vec<UnitSpec> = (0..3).map(|k| unit(false, k * 16, 16).unit).collect();
        assert_eq!(t.remaining(&all), all[1..].to_vec());
    }
}
