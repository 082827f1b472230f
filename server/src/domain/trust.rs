//! Trust rules with no I/O: when a unit's replicas settle it and who lost, how many replicas a
//! unit needs (adaptive replication), and when a worker's record puts it in quarantine.
//!
//! The contract (see `docs/trust.md`): a unit is done when `needed` results agree and, if any
//! disagree, when at least two agree and they are a strict majority of the live results. Live
//! means not void: a quarantined worker's results count for nothing.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use tmd_wire::{HrCase, UnitSpec, UnitStats, WorkerReputation};

/// The server's digest of what a result claims: the unit, the engine's counters, the HR-cases
/// as the server verified them (canonical argument, bits, kind) and the exact cases, each set
/// sorted. Replicas agree when these agree. The worker's own digest is not used for that: it
/// cannot be checked against what was posted, so a worker could send an honest digest with
/// cases left out.
pub fn claim_digest(
    unit: &UnitSpec,
    stats: &UnitStats,
    verified: &[HrCase],
    exact: &[String],
    skipped: &[tmd_wire::SkippedRun],
) -> String {
    let mut cases: Vec<(&str, u32, &str)> = verified
        .iter()
        .map(|c| (c.x.as_str(), c.bits, c.kind.as_str()))
        .collect();
    cases.sort_unstable();
    cases.dedup();
    let mut exact: Vec<&str> = exact.iter().map(String::as_str).collect();
    exact.sort_unstable();
    exact.dedup();
    let mut claim = serde_json::json!({
        "unit": [unit.negative, unit.exponent, unit.first.to_string(), unit.count.to_string()],
        "stats": stats,
        "hr_cases": cases,
        "exact_cases": exact,
    });
    // The server's own runs (equal to every accepted replica's); absent when there are none,
    // so the claims of results without skipped arguments stay what they were.
    if !skipped.is_empty() {
        let runs: Vec<(&str, &str, u64, &str)> = skipped
            .iter()
            .map(|s| {
                (
                    s.first.as_str(),
                    s.last.as_str(),
                    s.count,
                    s.reason.as_str(),
                )
            })
            .collect();
        claim["skipped"] = serde_json::json!(runs);
    }
    hex::encode(Sha256::digest(claim.to_string().as_bytes()))
}

/// A campaign's replication policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplicationPolicy {
    /// Agreeing results a unit needs from workers not (yet) trusted.
    pub quorum: u32,
    /// Trusted workers' results are replicated only at `audit_rate`.
    pub adaptive: bool,
    /// Probability that a trusted worker's result is replicated anyway.
    pub audit_rate: f64,
    /// Agreed results in a row after which a worker is trusted.
    pub trust_after: u32,
}

/// Live results beyond which a unit whose replicas still have no majority is quarantined for a
/// person to look at: something is wrong beyond one bad worker.
pub fn max_replicas(quorum: u32) -> usize {
    quorum as usize + 4
}

/// Whether a worker with `streak` agreed results in a row is trusted under `policy`.
pub fn trusted(policy: &ReplicationPolicy, streak: i64) -> bool {
    policy.adaptive && streak >= i64::from(policy.trust_after)
}

/// Agreeing results a unit needs, decided when its first result arrives. `audit_roll` is a
/// fresh uniform draw in [0, 1) made by the server after the result was posted, so a worker
/// cannot know whether its result will be checked. A trusted worker's (a lab token's) result
/// needs no replica: it stands alone.
pub fn replicas_needed(
    policy: &ReplicationPolicy,
    first_worker_trusted: bool,
    first_worker_streak: i64,
    audit_roll: f64,
) -> u32 {
    if first_worker_trusted
        || (trusted(policy, first_worker_streak) && audit_roll >= policy.audit_rate)
    {
        1
    } else {
        policy.quorum.max(1)
    }
}

/// What the replicas say about a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// No decision yet.
    Pending,
    /// Part of a winning group of at least two agreeing results.
    Agreed,
    /// Accepted on its own: an unaudited trusted worker's result.
    Alone,
    /// The majority disagrees with it.
    Outvoted,
    /// It omits an HR-case the server verified in its unit: proven wrong, whatever the vote.
    Refuted,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pending => "pending",
            Verdict::Agreed => "agreed",
            Verdict::Alone => "alone",
            Verdict::Outvoted => "outvoted",
            Verdict::Refuted => "refuted",
        }
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        match s {
            "pending" => Some(Verdict::Pending),
            "agreed" => Some(Verdict::Agreed),
            "alone" => Some(Verdict::Alone),
            "outvoted" => Some(Verdict::Outvoted),
            "refuted" => Some(Verdict::Refuted),
            _ => None,
        }
    }
}

/// Where a unit stands after its live results are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Done; the winning claim.
    Done(String),
    /// Needs another replica.
    Open,
    /// Too many replicas without a majority: quarantined.
    Undecidable,
}

/// One live result of a unit, as settling sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replica<'a> {
    /// The server's digest of what it claims ([`claim_digest`]).
    pub claim: &'a str,
    /// The engine version that computed it (`tmd_kernels::ENGINE_VERSION`; 0 for results of
    /// workers that do not say): its counters mean something only next to the same version's.
    pub engine: i32,
    /// It holds every HR-case the server verified in its unit (reported by any replica or
    /// loaded as a known case). Its own cases are all verified, so this is a count.
    pub complete: bool,
    /// Posted by a worker of a trusted (lab) enrollment token.
    pub trusted: bool,
}

impl<'a> Replica<'a> {
    /// A complete result of a worker not trusted: what every replica was before proofs.
    pub fn plain(claim: &'a str) -> Replica<'a> {
        Replica {
            claim,
            engine: 0,
            complete: true,
            trusted: false,
        }
    }
}

/// Settles a unit from its live results (in arrival order); returns the settlement and each
/// result's verdict, in the same order.
///
/// Proof comes before votes: a result that omits a verified case is `Refuted` and takes no
/// part in the vote, however many agree with it (the cases do not depend on the engine
/// version). Votes are counted among the results of one engine version at a time, the
/// versions in the order of their first result: two versions count domains differently, so
/// a result is never agreed or outvoted by another version's. The first version whose results
/// settle the unit decides it ([`settle_version`]); the results of the other versions stay
/// `Pending` (not judged). No version settling it: another replica, or `Undecidable` where one
/// version alone has had every replica it may.
pub fn settle(replicas: &[Replica<'_>], needed: u32, quorum: u32) -> (Settlement, Vec<Verdict>) {
    let mut versions: Vec<i32> = Vec::new();
    for r in replicas {
        if !versions.contains(&r.engine) {
            versions.push(r.engine);
        }
    }
    let mut verdicts = proof_verdicts(replicas);
    let mut undecidable = false;
    for v in versions {
        let at: Vec<usize> = (0..replicas.len())
            .filter(|&i| replicas[i].engine == v)
            .collect();
        let own: Vec<Replica<'_>> = at.iter().map(|&i| replicas[i]).collect();
        match settle_version(&own, needed, quorum) {
            (Settlement::Done(winner), judged) => {
                for (&i, j) in at.iter().zip(judged) {
                    verdicts[i] = j;
                }
                return (Settlement::Done(winner), verdicts);
            }
            (Settlement::Undecidable, _) => undecidable = true,
            (Settlement::Open, _) => {}
        }
    }
    let s = if undecidable {
        Settlement::Undecidable
    } else {
        Settlement::Open
    };
    (s, verdicts)
}

/// Each result's verdict before any vote: `Refuted` where it misses a verified case (whatever
/// its engine version), else `Pending`.
fn proof_verdicts(replicas: &[Replica<'_>]) -> Vec<Verdict> {
    replicas
        .iter()
        .map(|r| {
            if r.complete {
                Verdict::Pending
            } else {
                Verdict::Refuted
            }
        })
        .collect()
}

/// [`settle`] among the results of one engine version: the trusted results decide when they
/// agree with each other; otherwise a claim wins with `needed` agreeing results when all
/// agree, and with at least `max(needed, quorum, 2)` results that are a strict majority when
/// they do not. Anything less takes another replica: never a coin toss.
fn settle_version(
    replicas: &[Replica<'_>],
    needed: u32,
    quorum: u32,
) -> (Settlement, Vec<Verdict>) {
    let mut verdicts = proof_verdicts(replicas);
    let claims: Vec<&str> = replicas
        .iter()
        .filter(|r| r.complete)
        .map(|r| r.claim)
        .collect();
    let mut lab: Vec<&str> = replicas
        .iter()
        .filter(|r| r.complete && r.trusted)
        .map(|r| r.claim)
        .collect();
    lab.sort_unstable();
    lab.dedup();
    let winner = match lab.as_slice() {
        [one] => Some(*one),
        _ => majority(&claims, needed, quorum),
    };
    let Some(winner) = winner else {
        let s = if claims.len() >= max_replicas(quorum) {
            Settlement::Undecidable
        } else {
            Settlement::Open
        };
        return (s, verdicts);
    };
    let size = claims.iter().filter(|c| **c == winner).count();
    for (r, v) in replicas.iter().zip(verdicts.iter_mut()) {
        if r.complete {
            *v = match (r.claim == winner, size) {
                (true, 1) => Verdict::Alone,
                (true, _) => Verdict::Agreed,
                (false, _) => Verdict::Outvoted,
            };
        }
    }
    (Settlement::Done(winner.to_string()), verdicts)
}

/// The claim that wins a vote among `claims` (results with no proof against them), if any.
fn majority<'a>(claims: &[&'a str], needed: u32, quorum: u32) -> Option<&'a str> {
    let mut groups: HashMap<&str, usize> = HashMap::new();
    for c in claims {
        *groups.entry(c).or_default() += 1;
    }
    // The largest group; ties go to the claim seen first, which only matters when the
    // group cannot win anyway.
    let mut top: Option<(&str, usize)> = None;
    for c in claims {
        let n = groups[c];
        if top.is_none_or(|(_, m)| n > m) {
            top = Some((c, n));
        }
    }
    let (winner, size) = top?;
    let done = if groups.len() == 1 {
        size >= needed.max(1) as usize
    } else {
        // A dispute needs at least two agreeing results and a strict majority; the adaptive
        // discount (needed = 1) never settles one.
        size >= (needed.max(quorum).max(2)) as usize && 2 * size > claims.len()
    };
    done.then_some(winner)
}

/// The change a verdict's move makes to its worker's record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordDelta {
    pub valid: i64,
    pub invalid: i64,
    /// Results refuted by a verified case.
    pub refuted: i64,
    /// Agreed results to add to the streak (negative when an agreement is taken back; the
    /// streak never goes below zero).
    pub streak_add: i64,
    /// The streak starts again from zero (before `streak_add`).
    pub streak_reset: bool,
}

impl RecordDelta {
    /// What moving one result from `old` to `new` changes. `valid` and `invalid` count the
    /// results currently agreed and outvoted, so a verdict taken back is taken off; the streak
    /// only grows on a new agreement and breaks on a new defeat.
    pub fn of(old: Verdict, new: Verdict) -> RecordDelta {
        let mut d = RecordDelta::default();
        if old == new {
            return d;
        }
        // An agreement taken back (its partner was a liar) no longer counts towards the
        // streak either.
        match old {
            Verdict::Agreed => {
                d.valid -= 1;
                d.streak_add = -1;
            }
            Verdict::Outvoted => d.invalid -= 1,
            Verdict::Refuted => d.refuted -= 1,
            _ => {}
        }
        match new {
            Verdict::Agreed => {
                d.valid += 1;
                d.streak_add += 1;
            }
            Verdict::Outvoted => {
                d.invalid += 1;
                d.streak_reset = true;
            }
            Verdict::Refuted => {
                d.refuted += 1;
                d.streak_reset = true;
            }
            _ => {}
        }
        d
    }

    /// A streak after this change, as the workers' update in `store_trust` computes it.
    pub fn applied_to(self, streak: i64) -> i64 {
        ((if self.streak_reset { 0 } else { streak }) + self.streak_add).max(0)
    }

    /// Both changes, `self` first.
    pub fn then(self, o: RecordDelta) -> RecordDelta {
        RecordDelta {
            valid: self.valid + o.valid,
            invalid: self.invalid + o.invalid,
            refuted: self.refuted + o.refuted,
            streak_add: if o.streak_reset {
                o.streak_add
            } else {
                self.streak_add + o.streak_add
            },
            streak_reset: self.streak_reset || o.streak_reset,
        }
    }
}

/// When a worker's record puts it in quarantine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuarantineBar {
    /// Quarantine when more than this fraction of its checked results were outvoted.
    pub max_invalid_fraction: f64,
    /// ... or when at least this many of its leases expired,
    pub min_expired_leases: u32,
    /// ... and they are more than this fraction of its leases.
    pub max_expired_fraction: f64,
    /// Outvoted results needed before the invalid fraction can quarantine: one vote lost by a
    /// new honest worker to two colluders is not evidence enough.
    pub min_outvoted_results: u32,
    /// Quarantine a worker once it reported at least this many units as failed ...
    pub min_failed_units: u32,
    /// ... and they are more than this fraction of the units it failed or finished.
    pub max_failed_fraction: f64,
    /// Quarantine a worker once it gave back at least this many leases untouched ...
    pub min_idle_leases: u32,
    /// ... and they are more than this fraction of all its leases: it holds work it never does.
    pub max_idle_fraction: f64,
}

impl Default for QuarantineBar {
    fn default() -> Self {
        QuarantineBar {
            max_invalid_fraction: 0.05,
            min_expired_leases: 5,
            max_expired_fraction: 0.5,
            min_outvoted_results: 3,
            min_failed_units: 5,
            max_failed_fraction: 0.5,
            min_idle_leases: 5,
            max_idle_fraction: 0.5,
        }
    }
}

/// Why `r` (a worker with `units_done` results) must be quarantined under `bar`, or `None`. A
/// forged case is enough on its own: MPFR refuted it, so no honest engine produced it.
pub fn quarantine_reason(
    r: &WorkerReputation,
    units_done: i64,
    bar: &QuarantineBar,
) -> Option<String> {
    if r.forged > 0 {
        return Some(format!(
            "reported {} result(s) with a case MPFR refutes",
            r.forged
        ));
    }
    // An honest engine finds every case a sound search must report: a result without a case
    // MPFR confirmed in its unit is no honest engine's either.
    if r.refuted > 0 {
        return Some(format!(
            "{} of its results left out an HR-case the server verified in their unit",
            r.refuted
        ));
    }
    let checked = r.valid + r.invalid;
    if r.invalid >= i64::from(bar.min_outvoted_results.max(1))
        && r.invalid as f64 > bar.max_invalid_fraction * checked as f64
    {
        return Some(format!(
            "{} of its {} checked results were outvoted by other workers (the bar is {}%)",
            r.invalid,
            checked,
            bar.max_invalid_fraction * 100.0
        ));
    }
    if r.leases_expired >= i64::from(bar.min_expired_leases)
        && r.leases_expired as f64 > bar.max_expired_fraction * r.leases_total as f64
    {
        return Some(format!(
            "{} of its {} leases expired before it returned their results",
            r.leases_expired, r.leases_total
        ));
    }
    let leases = r.leases_total + r.leases_idle;
    if r.leases_idle >= i64::from(bar.min_idle_leases.max(1))
        && r.leases_idle as f64 > bar.max_idle_fraction * leases as f64
    {
        return Some(format!(
            "it gave back {} of its {} leases without computing any of their units",
            r.leases_idle, leases
        ));
    }
    // Failures are counted against the units the worker finished, not its leases: releasing
    // leases untouched cannot dilute them.
    if r.failed_units >= i64::from(bar.min_failed_units.max(1))
        && r.failed_units as f64 > bar.max_failed_fraction * (r.failed_units + units_done) as f64
    {
        return Some(format!(
            "it reported {} units as failed and finished {}",
            r.failed_units, units_done
        ));
    }
    None
}

#[cfg(test)]
#[path = "trust_tests.rs"]
mod tests;
