//! Trust rules with no I/O: when a unit's replicas settle it and who lost, how many replicas a
//! unit needs (adaptive replication), and when a worker's record puts it in quarantine.
//!
//! The contract (see `docs/trust.md`): a unit is done when `needed` results agree and, if any
//! disagree, when at least two agree and they are a strict majority of the live results. Live
//! means not void: a quarantined worker's results count for nothing.

use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
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

/// The digest of a result's cases alone (the verified HR-cases as in [`claim_digest`], the
/// exact cases and the skipped runs), without the engine's counters: what results of different
/// engine versions are compared by, since every version must find the same cases.
pub fn cases_digest(
    unit: &UnitSpec,
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
    let claim = serde_json::json!({
        "unit": [unit.negative, unit.exponent, unit.first.to_string(), unit.count.to_string()],
        "hr_cases": cases,
        "exact_cases": exact,
        "skipped": runs,
    });
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

/// What a result lacks of its unit's standing verified cases (those reported by any replica
/// and the known cases an admin loaded, less the cases an admin removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Missing {
    /// It holds every one of them.
    #[default]
    None,
    /// It lacks only cases that untrusted workers alone reported and that a trusted worker's
    /// result lacks too: either the trusted worker's engine is broken, or the case is one no
    /// engine reports (planted). A person decides (`campaign cases remove`, or the case loaded
    /// as a known case); until then the case refutes nobody.
    Contested,
    /// It lacks a case no trusted result contests: it is provably wrong.
    Proven,
}

/// One live result of a unit, as settling sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replica<'a> {
    /// The server's digest of what it claims ([`claim_digest`]): cases and the engine's
    /// counters, compared between results of one engine version.
    pub claim: &'a str,
    /// The digest of its cases alone ([`cases_digest`]), compared across engine versions:
    /// every version must find the same cases.
    pub cases: &'a str,
    /// The engine version that computed it (`tmd_kernels::ENGINE_VERSION`; 0 for results of
    /// workers that do not say): its counters mean something only next to the same version's.
    pub engine: i32,
    /// The verified cases of its unit it lacks.
    pub missing: Missing,
    /// Posted by a worker of a trusted (lab) enrollment token.
    pub trusted: bool,
    /// Its count of cases is improbably low for its unit (`audit`): it settles nothing without
    /// a trusted result or one more agreeing replica.
    pub implausible: bool,
}

impl<'a> Replica<'a> {
    /// A complete, plausible result of a worker not trusted, whose cases claim is its claim:
    /// what every replica was before proofs and audits.
    pub fn plain(claim: &'a str) -> Replica<'a> {
        Replica {
            claim,
            cases: claim,
            engine: 0,
            missing: Missing::None,
            trusted: false,
            implausible: false,
        }
    }
}

/// Where a unit stands after its live results are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Done; the winning cases claim.
    Done(String),
    /// Needs another replica.
    Open,
    /// Too many replicas without a majority: quarantined.
    Undecidable,
    /// A trusted result lacks a case only untrusted workers reported: held for a person.
    Disputed,
}

/// The standing verified cases of a unit (canonical arguments): those its results reported
/// (less any an admin removed) and the known cases an admin loaded, which are confirmed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitFacts {
    pub all: HashSet<String>,
    pub known: HashSet<String>,
}

/// A result's cases as completeness needs them: its verified arguments (`None` for results
/// recorded before they were kept, judged by their `count`), and whether a trusted worker
/// posted it.
#[derive(Debug, Clone, Copy)]
pub struct CaseSet<'a> {
    pub xs: Option<&'a HashSet<String>>,
    pub count: usize,
    pub trusted: bool,
}

/// What each result lacks of the unit's `facts`, judged as sets. A fact is confirmed when it is
/// a known case or a trusted result holds it; an unconfirmed fact that a trusted result lacks
/// is contested (see [`Missing::Contested`]). A result lacking a confirmed fact, or an
/// uncontested one, lacks a proven case; one lacking only contested facts waits for a person,
/// and so does a trusted result lacking any unconfirmed fact (which it thereby contests).
pub fn missing_cases(results: &[CaseSet<'_>], facts: &UnitFacts) -> Vec<Missing> {
    let trusted_sets: Vec<&HashSet<String>> = results
        .iter()
        .filter(|r| r.trusted)
        .filter_map(|r| r.xs)
        .collect();
    let confirmed =
        |x: &String| facts.known.contains(x) || trusted_sets.iter().any(|s| s.contains(x));
    let contested = |x: &String| !confirmed(x) && trusted_sets.iter().any(|s| !s.contains(x));
    results
        .iter()
        .map(|r| match r.xs {
            None if r.count >= facts.all.len() => Missing::None,
            None => Missing::Proven,
            Some(xs) => {
                let lacks: Vec<&String> = facts.all.iter().filter(|x| !xs.contains(*x)).collect();
                if lacks.is_empty() {
                    Missing::None
                } else if lacks.iter().any(|x| confirmed(x)) {
                    Missing::Proven
                } else if r.trusted || lacks.iter().all(|x| contested(x)) {
                    Missing::Contested
                } else {
                    Missing::Proven
                }
            }
        })
        .collect()
}

/// Settles a unit from its live results (in arrival order); returns the settlement and each
/// result's verdict, in the same order.
///
/// Proof comes before votes: a result that lacks a verified case no trusted result contests is
/// `Refuted` and takes no part in the vote, however many agree with it; a contested case holds
/// the unit for a person ([`Settlement::Disputed`]). The vote is on the cases, across engine
/// versions (every version finds the same cases): the trusted results decide when they agree
/// with each other, else a claim wins with `needed` agreeing results when all agree, and with
/// at least `max(needed, quorum, 2)` results that are a strict majority when they do not; a
/// winning group with an implausible count needs one result more (or a trusted one). Then the
/// winners' counters are compared within each engine version: a result whose counters differ
/// from its version's strict majority (or from a trusted result's) is outvoted, and without
/// such a majority the unit takes another replica. Never a coin toss.
pub fn settle(replicas: &[Replica<'_>], needed: u32, quorum: u32) -> (Settlement, Vec<Verdict>) {
    let mut verdicts = proof_verdicts(replicas);
    if replicas.iter().any(|r| r.missing == Missing::Contested) {
        return (Settlement::Disputed, verdicts);
    }
    let live: Vec<usize> = (0..replicas.len())
        .filter(|&i| replicas[i].missing == Missing::None)
        .collect();
    let open = |verdicts: Vec<Verdict>| {
        let s = if live.len() >= max_replicas(quorum) {
            Settlement::Undecidable
        } else {
            Settlement::Open
        };
        (s, verdicts)
    };
    let Some(winner) = cases_winner(replicas, &live, needed, quorum) else {
        return open(verdicts);
    };
    let mut members: Vec<usize> = live
        .iter()
        .copied()
        .filter(|&i| replicas[i].cases == winner)
        .collect();
    let Some(outvoted) = counter_minorities(replicas, &members) else {
        return open(verdicts);
    };
    members.retain(|i| !outvoted.contains(i));
    if !group_settles(replicas, &live, &members, needed, quorum) {
        return open(verdicts);
    }
    for &i in &live {
        verdicts[i] = match (members.contains(&i), members.len()) {
            (true, 1) => Verdict::Alone,
            (true, _) => Verdict::Agreed,
            (false, _) => Verdict::Outvoted,
        };
    }
    (Settlement::Done(winner.to_string()), verdicts)
}

/// Each result's verdict before any vote: `Refuted` where it lacks a verified case no trusted
/// result contests (whatever its engine version), else `Pending`.
fn proof_verdicts(replicas: &[Replica<'_>]) -> Vec<Verdict> {
    replicas
        .iter()
        .map(|r| {
            if r.missing == Missing::Proven {
                Verdict::Refuted
            } else {
                Verdict::Pending
            }
        })
        .collect()
}

/// The cases claim that wins among the `live` results: the trusted results' when they agree
/// with each other, else the majority's ([`majority`]).
fn cases_winner<'a>(
    replicas: &[Replica<'a>],
    live: &[usize],
    needed: u32,
    quorum: u32,
) -> Option<&'a str> {
    let mut lab: Vec<&str> = live
        .iter()
        .filter(|&&i| replicas[i].trusted)
        .map(|&i| replicas[i].cases)
        .collect();
    lab.sort_unstable();
    lab.dedup();
    if let [one] = lab.as_slice() {
        return Some(one);
    }
    let claims: Vec<&str> = live.iter().map(|&i| replicas[i].cases).collect();
    majority(&claims, needed, quorum)
}

/// Whether the winning `members` (after the counters' check) settle the unit: a trusted member
/// does; otherwise the group needs what [`majority`] asks of it among the `live` results, and
/// one result more when a member's count is implausible.
fn group_settles(
    replicas: &[Replica<'_>],
    live: &[usize],
    members: &[usize],
    needed: u32,
    quorum: u32,
) -> bool {
    if members.iter().any(|&i| replicas[i].trusted) {
        return true;
    }
    let size = members.len();
    let all_agree = members.len() == live.len();
    let least = if all_agree {
        needed.max(1) as usize
    } else {
        needed.max(quorum).max(2) as usize
    };
    let least = if members.iter().any(|&i| replicas[i].implausible) {
        (least + 1).max(2)
    } else {
        least
    };
    size >= least && (all_agree || 2 * size > live.len())
}

/// The members whose counters differ from their engine version's among the winning `members`:
/// those outvoted, or `None` when a version has no strict majority of counters (another
/// replica decides). A trusted member's counters are its version's.
fn counter_minorities(replicas: &[Replica<'_>], members: &[usize]) -> Option<Vec<usize>> {
    let mut versions: Vec<i32> = members.iter().map(|&i| replicas[i].engine).collect();
    versions.sort_unstable();
    versions.dedup();
    let mut outvoted = Vec::new();
    for v in versions {
        let own: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&i| replicas[i].engine == v)
            .collect();
        let lab = own.iter().find(|&&i| replicas[i].trusted);
        let reference = match lab {
            Some(&i) => replicas[i].claim,
            None => {
                let claims: Vec<&str> = own.iter().map(|&i| replicas[i].claim).collect();
                let top = claims
                    .iter()
                    .max_by_key(|c| claims.iter().filter(|d| d == c).count())?;
                let n = claims.iter().filter(|c| *c == top).count();
                if 2 * n <= claims.len() {
                    return None;
                }
                *top
            }
        };
        outvoted.extend(own.into_iter().filter(|&i| replicas[i].claim != reference));
    }
    Some(outvoted)
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

/// How much a key is preferred as a unit's next replica, best first: a volunteer owner still
/// under its share of the campaign, then a trusted one (its result settles the unit alone, but
/// its time settles more units on fresh ones while volunteers can check each other), then a
/// volunteer owner whose settled results already reached its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReplicaPreference {
    Volunteer,
    Trusted,
    OverShare,
}

/// Who computes a unit's next replica: among the `active` keys (an owner's, or a worker's, with
/// its preference; a key listed more than once counts at its best), those not in `taken` (the
/// keys of the unit's results), drawn uniformly among the most preferred with `roll` uniform in
/// [0, 1). `None` when nobody is eligible.
pub fn draw_replica(
    active: &[(String, ReplicaPreference)],
    taken: &[String],
    roll: f64,
) -> Option<String> {
    let mut eligible: Vec<(&str, ReplicaPreference)> = Vec::new();
    for (key, pref) in active {
        if taken.contains(key) {
            continue;
        }
        match eligible.iter_mut().find(|(k, _)| k == key) {
            Some(e) => e.1 = e.1.min(*pref),
            None => eligible.push((key, *pref)),
        }
    }
    let best = eligible.iter().map(|e| e.1).min()?;
    let mut pool: Vec<&str> = eligible
        .iter()
        .filter(|e| e.1 == best)
        .map(|e| e.0)
        .collect();
    pool.sort_unstable();
    let i = ((roll.clamp(0.0, 1.0) * pool.len() as f64) as usize).min(pool.len() - 1);
    Some(pool[i].to_string())
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
    /// Quarantine a worker once at least this many of its releases gave units back untouched
    /// (neither computed nor reported as failed) ...
    pub min_idle_leases: u32,
    /// ... and those units are more than this fraction of all the units it leased: it holds
    /// work it never does.
    pub max_idle_fraction: f64,
    /// Quarantine a worker once this many of its posts ran out of their unit's or lease's
    /// verification budget.
    pub max_verify_overruns: u32,
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
            max_verify_overruns: 3,
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
    // Counted in units, not leases: posting one unit of each lease and giving the rest back
    // holds as much work for nothing as giving whole leases back.
    if r.leases_idle >= i64::from(bar.min_idle_leases.max(1))
        && r.units_idle as f64 > bar.max_idle_fraction * r.units_leased.max(r.units_idle) as f64
    {
        return Some(format!(
            "it gave back {} of the {} units it leased untouched, in {} releases",
            r.units_idle, r.units_leased, r.leases_idle
        ));
    }
    if r.verify_overruns >= i64::from(bar.max_verify_overruns.max(1)) {
        return Some(format!(
            "{} of its posts cost more verification than a unit's or a lease's budget allows",
            r.verify_overruns
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
