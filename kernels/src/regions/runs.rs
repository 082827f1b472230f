//! A unit's skipped runs: consecutive arguments not judged one by one (overflow, underflow,
//! pole, trivial and exact regions), what each kind of run says of its arguments, and how the
//! runs of a unit merge. The search (`search::unit`), the exact regions (`exact.rs`) and the
//! coordinator's recomputation (`skip.rs`) all build their lists from these.

use crate::numbers::format::Precision;
use crate::oracle::verify::SkipReason;
use crate::plan::UnitSpec;
use serde::{Deserialize, Serialize};

/// Consecutive arguments of a unit not judged one by one, and why: `f` overflows there,
/// rounds like 0, has a pole, or the run is a trivial region whose every argument is an
/// HR-case by a proven rule (see [`Skipped::rule`]). Never silent: listed in every output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The smallest and largest argument, C99 hex (both included).
    pub first: String,
    pub last: String,
    pub count: u64,
    pub reason: SkipReason,
    /// For a trivial region: what `f` rounds like and the bits every argument has at least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trivial: Option<TrivialRun>,
    /// For an exact region: the value of `f` at every argument of the run (`exact.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<ExactRun>,
}

impl Skipped {
    /// The rule of the run for people (a trivial run's with its `g(x)` and bits, an exact
    /// run's with its values).
    pub fn rule(&self) -> String {
        match (&self.trivial, &self.exact) {
            (Some(t), _) => t.rule(),
            (None, Some(e)) => e.rule(),
            (None, None) => self.reason.rule().to_string(),
        }
    }
}

/// What a trivial run rounds like, and how hard each of its arguments is at least.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrivialRun {
    /// `g(x)`: `x`, `-x`, or the constant (`f(0)`, or the limit far from 0) in C99 hex.
    pub like: String,
    /// Every argument of the run has `d <= 2^-bits` (at least `bits` identical bits).
    pub bits: u32,
}

impl TrivialRun {
    /// The rule for people.
    pub fn rule(&self) -> String {
        let g = &self.like;
        format!(
            "f(x) rounds like {g}: |f(x) - {g}| bounded on the run by ball arithmetic \
             (docs/error-analysis.md §10) or by enclosures of a monotone f at the run's ends \
             (§12), so d <= 2^-{b} half-ulps: every x is an HR-case near \
             {g} with at least {b} identical bits after the rounding bit, or exact",
            b = self.bits
        )
    }
}

impl TrivialRun {
    /// The trivial run whose rule for people ([`TrivialRun::rule`]) is `rule`, when it is one:
    /// how a reader of stored runs (the coordinator's merged lists) gets `g(x)` and the bits
    /// back.
    pub fn from_rule(rule: &str) -> Option<TrivialRun> {
        let like = rule.strip_prefix("f(x) rounds like ")?.split(':').next()?;
        let bits = rule
            .split("d <= 2^-")
            .nth(1)?
            .split(' ')
            .next()?
            .parse()
            .ok()?;
        let t = TrivialRun {
            like: like.to_string(),
            bits,
        };
        (t.rule() == rule).then_some(t)
    }
}

/// What `f` is on an exact run, for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactRun {
    /// Which numbers the arguments are and the value of `f` at each, e.g. `x is an integer:
    /// sinpi(x) = 0 (+0 for x > 0, -0 for x < 0)`.
    pub values: String,
}

impl ExactRun {
    /// The rule of the run for people.
    pub fn rule(&self) -> String {
        format!(
            "{}: every x of the run is an exact case (or a pole where the rule says so), not an \
             HR-case (docs/error-analysis.md §11)",
            self.values
        )
    }
}

/// A unit's skipped runs as (offset in the unit, count, reason, trivial rule), merged when
/// adjacent with the same reason (and the same `g(x)`: a trivial run keeps the fewest bits of
/// the two). `skip.rs` builds the coordinator's list with it, so the two lists merge alike.
#[derive(Debug, Default)]
pub(crate) struct Runs(Vec<(u64, u64, SkipReason, Option<TrivialRun>)>);

impl Runs {
    pub(crate) fn push(
        &mut self,
        first: u64,
        count: u64,
        reason: SkipReason,
        t: Option<TrivialRun>,
    ) {
        match self.0.last_mut() {
            Some(last)
                if last.2 == reason
                    && last.0 + last.1 == first
                    && last.3.as_ref().map(|r| &r.like) == t.as_ref().map(|r| &r.like) =>
            {
                last.1 += count;
                if let (Some(a), Some(b)) = (&mut last.3, t) {
                    a.bits = a.bits.min(b.bits);
                }
            }
            _ => self.0.push((first, count, reason, t)),
        }
    }

    /// The runs with their ends as C99 hex, in value order within each run.
    pub(crate) fn into_skipped(self, unit: UnitSpec, p: Precision) -> Vec<Skipped> {
        self.0
            .into_iter()
            .map(|(o, count, reason, trivial)| {
                // A negative unit's significands grow towards -infinity.
                let (a, b) = (unit.argument(o), unit.argument(o + count - 1));
                let (lo, hi) = if unit.negative { (b, a) } else { (a, b) };
                Skipped {
                    first: lo.to_hex(p),
                    last: hi.to_hex(p),
                    count,
                    reason,
                    trivial,
                    exact: None,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod rule_tests {
    use super::*;

    #[test]
    fn a_trivial_rule_reads_back() {
        let t = TrivialRun {
            like: "-0x1.8p-3".into(),
            bits: 57,
        };
        assert_eq!(TrivialRun::from_rule(&t.rule()), Some(t));
        assert_eq!(TrivialRun::from_rule(SkipReason::Underflow.rule()), None);
        assert_eq!(TrivialRun::from_rule("f(x) rounds like x: garbage"), None);
    }
}
