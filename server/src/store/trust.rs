//! Storage of trust: results' verdicts and workers' records, quarantining a worker and redoing
//! what it alone vouched for, and the admin's quarantine and reinstatement.
//!
//! Lock order, as in `store`: leases, then units (in id order when several), then worker rows
//! in id order. A deadlock with a concurrent post is still possible in principle (Postgres
//! detects it and aborts one side); both sides retry it.

use crate::domain::trust::{
    self, CaseSet, QuarantineBar, RecordDelta, Replica, Settlement, UnitFacts, Verdict,
};
use crate::error::{Error, Result};
use crate::store::LiveResult;
use sqlx::{PgPool, Postgres, Transaction};
use std::collections::{BTreeMap, HashMap, HashSet};
use tmd_wire::WorkerReputation;

/// The refusal a quarantined worker gets.
pub fn quarantined(worker_id: i64, reason: Option<&str>) -> Error {
    Error::WorkerQuarantined(format!(
        "worker {worker_id} is quarantined ({}); it gets no work and its results are refused \
         until an admin reinstates it (`tmd-server worker reinstate {worker_id}`)",
        reason.unwrap_or("see the server's log")
    ))
}

/// `e`, or the quarantine refusal when the worker is quarantined (its leases were revoked, so
/// every post of it is refused; it should learn why). Only asked on the refusal path.
pub async fn refusal(pool: &PgPool, worker_id: i64, e: Error) -> Error {
    let standing: std::result::Result<Option<(Option<String>,)>, _> = sqlx::query_as(
        "SELECT quarantine_reason FROM workers WHERE id = $1 AND quarantined_at IS NOT NULL",
    )
    .bind(worker_id)
    .fetch_optional(pool)
    .await;
    match standing {
        Ok(Some((reason,))) => quarantined(worker_id, reason.as_deref()),
        _ => e,
    }
}

/// What one transaction changes in workers' rows.
#[derive(Debug, Default, Clone, Copy)]
pub struct WorkerChange {
    pub record: RecordDelta,
    /// Units computed.
    pub done: i64,
    /// A new speed measurement (arguments per second).
    pub speed: Option<f64>,
}

/// Verdicts that changed and the workers' rows to update, gathered before writing.
#[derive(Debug, Default)]
pub struct Changes {
    verdicts: Vec<(i64, Verdict)>,
    workers: BTreeMap<i64, WorkerChange>,
}

impl Changes {
    pub fn worker(&mut self, id: i64) -> &mut WorkerChange {
        self.workers.entry(id).or_default()
    }

    /// Settles one unit from its live results (in arrival order) and its standing verified
    /// cases `facts`, judged as sets (`trust::missing_cases`), and notes what changed. Returns
    /// the settlement and, for a unit that must wait for a person, why.
    pub fn settle(
        &mut self,
        replicas: &[LiveResult],
        facts: &UnitFacts,
        needed: u32,
        quorum: u32,
    ) -> Result<(Settlement, Option<String>)> {
        let sets: Vec<Option<HashSet<String>>> = replicas
            .iter()
            .map(|r| r.case_xs.as_ref().map(|j| j.0.iter().cloned().collect()))
            .collect();
        let case_sets: Vec<CaseSet<'_>> = replicas
            .iter()
            .zip(&sets)
            .map(|(r, xs)| CaseSet {
                xs: xs.as_ref(),
                count: r.hr_count.max(0) as usize,
                trusted: r.by_trusted,
            })
            .collect();
        let missing = trust::missing_cases(&case_sets, facts);
        let judged: Vec<Replica<'_>> = replicas
            .iter()
            .zip(&missing)
            .map(|(r, &missing)| Replica {
                claim: r.claim.as_str(),
                cases: r.cases_claim.as_deref().unwrap_or(r.claim.as_str()),
                engine: r.engine,
                missing,
                trusted: r.by_trusted,
                implausible: r.implausible,
            })
            .collect();
        let (settlement, verdicts) = trust::settle(&judged, needed, quorum);
        for (r, new) in replicas.iter().zip(verdicts) {
            let old = Verdict::parse(&r.verdict).ok_or_else(|| {
                Error::Internal(format!("result {} has verdict {}", r.id, r.verdict))
            })?;
            if old != new {
                self.verdicts.push((r.id, new));
                let w = self.worker(r.worker_id);
                w.record = w.record.then(RecordDelta::of(old, new));
            }
        }
        let reason = hold_reason(&settlement, replicas, &sets, facts);
        Ok((settlement, reason))
    }

    /// Takes out the verdicts of results settled before they were inserted (their stand-in
    /// ids from [`new_result_id`]): those are written with the row, not updated after it.
    pub fn take_new_verdicts(&mut self) -> HashMap<i64, Verdict> {
        let (new, old) = std::mem::take(&mut self.verdicts)
            .into_iter()
            .partition(|(id, _)| *id < 0);
        self.verdicts = old;
        new.into_iter().collect()
    }

    /// Workers that gained an outvoted or refuted result: their records must be checked.
    pub fn outvoted_workers(&self) -> Vec<i64> {
        self.workers
            .iter()
            .filter(|(_, c)| c.record.invalid > 0 || c.record.refuted > 0)
            .map(|(id, _)| *id)
            .collect()
    }
}

/// The stand-in id of the `slot`-th new result of a batch while it is settled before its
/// insertion: negative, so it cannot be a row's id.
pub fn new_result_id(slot: usize) -> i64 {
    -1 - slot as i64
}

/// The unit state a settlement leads to (for a unit no other lease holds).
pub fn unit_state(s: &Settlement) -> &'static str {
    match s {
        Settlement::Done(_) => "done",
        Settlement::Open => "pending",
        Settlement::Undecidable | Settlement::Disputed => "quarantined",
    }
}

/// Why a unit settled so waits for a person, for the one who looks at it.
fn hold_reason(
    settlement: &Settlement,
    replicas: &[LiveResult],
    sets: &[Option<HashSet<String>>],
    facts: &UnitFacts,
) -> Option<String> {
    match settlement {
        Settlement::Undecidable => Some(format!(
            "its {} results disagree and no majority formed: look at them (`tmd-server \
             worker list`), quarantine the liar or requeue the unit",
            replicas.len()
        )),
        Settlement::Disputed => {
            let lab: Vec<(i64, &HashSet<String>)> = replicas
                .iter()
                .zip(sets)
                .filter(|(r, _)| r.by_trusted)
                .filter_map(|(r, xs)| xs.as_ref().map(|xs| (r.worker_id, xs)))
                .collect();
            let mut contested: Vec<&String> = facts
                .all
                .iter()
                .filter(|x| !facts.known.contains(*x))
                .filter(|x| lab.iter().any(|(_, xs)| !xs.contains(*x)))
                .filter(|x| !lab.iter().any(|(_, xs)| xs.contains(*x)))
                .collect();
            contested.sort();
            contested.truncate(5);
            let workers: Vec<String> = lab.iter().map(|(w, _)| w.to_string()).collect();
            Some(format!(
                "the trusted worker(s) {} found no HR-case at {} which only untrusted workers \
                 reported: if it is planted, remove it (`tmd-server campaign remove-cases`); \
                 if the trusted worker is wrong, load it as a known case (`campaign ringers`)",
                workers.join(", "),
                contested
                    .iter()
                    .map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
        _ => None,
    }
}

/// Writes the changed verdicts.
pub async fn apply_verdicts(tx: &mut Transaction<'_, Postgres>, c: &Changes) -> Result<()> {
    if c.verdicts.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = c.verdicts.iter().map(|(id, _)| *id).collect();
    let verdicts: Vec<&str> = c.verdicts.iter().map(|(_, v)| v.as_str()).collect();
    sqlx::query(
        "UPDATE results SET verdict = t.v FROM UNNEST($1::int8[], $2::text[]) AS t(id, v) \
         WHERE results.id = t.id AND results.id = ANY($1)",
    )
    .bind(&ids)
    .bind(&verdicts)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Updates the workers' rows, locked in id order. `NO KEY UPDATE`, not `UPDATE`: a transaction
/// that inserts a lease or a unit failure holds a key-share lock on its worker's row (their
/// foreign keys), which `FOR UPDATE` would wait on for no reason, and which would deadlock two
/// transactions each holding its own worker's key share. Returns each one's speed and whether
/// it is quarantined, as of under the lock.
pub async fn apply_records(
    tx: &mut Transaction<'_, Postgres>,
    c: &Changes,
) -> Result<HashMap<i64, (Option<f64>, bool)>> {
    if c.workers.is_empty() {
        return Ok(HashMap::new());
    }
    let ids: Vec<i64> = c.workers.keys().copied().collect();
    // One row (the common case: a batch of one worker's results, no other replica) is locked
    // by the update itself; several are locked first, in id order.
    if ids.len() > 1 {
        sqlx::query("SELECT id FROM workers WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE")
            .bind(&ids)
            .execute(&mut **tx)
            .await?;
    }
    let w: Vec<&WorkerChange> = c.workers.values().collect();
    let valid: Vec<i64> = w.iter().map(|c| c.record.valid).collect();
    let invalid: Vec<i64> = w.iter().map(|c| c.record.invalid).collect();
    let refuted: Vec<i64> = w.iter().map(|c| c.record.refuted).collect();
    let reset: Vec<bool> = w.iter().map(|c| c.record.streak_reset).collect();
    let add: Vec<i64> = w.iter().map(|c| c.record.streak_add).collect();
    let done: Vec<i64> = w.iter().map(|c| c.done).collect();
    let speed: Vec<Option<f64>> = w.iter().map(|c| c.speed).collect();
    let rows: Vec<(i64, Option<f64>, bool)> = sqlx::query_as(
        "UPDATE workers w SET valid = w.valid + t.dv, invalid = w.invalid + t.di, \
             streak = GREATEST(0, CASE WHEN t.reset THEN 0 ELSE w.streak END + t.add), \
             units_done = w.units_done + t.done, \
             last_result_at = CASE WHEN t.done > 0 THEN now() ELSE w.last_result_at END, \
             speed = CASE WHEN t.speed IS NULL THEN w.speed \
                          WHEN w.speed IS NULL OR NOT (w.speed < 'Infinity') THEN t.speed \
                          ELSE 0.7 * w.speed + 0.3 * t.speed END, \
             refuted = w.refuted + t.dr \
         FROM UNNEST($1::int8[], $2::int8[], $3::int8[], $4::bool[], $5::int8[], $6::int8[], \
                     $7::float8[], $8::int8[]) AS t(id, dv, di, reset, add, done, speed, dr) \
         WHERE w.id = t.id \
         RETURNING w.id, w.speed, w.quarantined_at IS NOT NULL",
    )
    .bind(&ids)
    .bind(&valid)
    .bind(&invalid)
    .bind(&reset)
    .bind(&add)
    .bind(&done)
    .bind(&speed)
    .bind(&refuted)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows.into_iter().map(|(id, s, q)| (id, (s, q))).collect())
}

/// A worker's record as stored; `WorkerRow` in `store` flattens it too.
#[derive(sqlx::FromRow)]
pub struct RecordRow {
    valid: i64,
    invalid: i64,
    forged: i64,
    leases_total: i64,
    leases_expired: i64,
    streak: i64,
    failed_units: i64,
    refuted: i64,
    leases_idle: i64,
    units_leased: i64,
    units_idle: i64,
    verify_overruns: i64,
}

/// The columns of [`RecordRow`], as a worker's row holds them.
pub const RECORD_COLUMNS: &str = "valid, invalid, forged, leases_total, leases_expired, streak, \
     units_failed AS failed_units, refuted, leases_idle, units_leased, units_idle, verify_overruns";

impl RecordRow {
    pub fn reputation(&self) -> WorkerReputation {
        WorkerReputation {
            valid: self.valid,
            invalid: self.invalid,
            forged: self.forged,
            leases_total: self.leases_total,
            leases_expired: self.leases_expired,
            streak: self.streak,
            failed_units: self.failed_units,
            refuted: self.refuted,
            leases_idle: self.leases_idle,
            units_leased: self.units_leased,
            units_idle: self.units_idle,
            verify_overruns: self.verify_overruns,
        }
    }
}

/// Adds a verification's seconds to the worker's record, and an overrun of its budget when
/// `overran`.
pub async fn charge_verification(
    pool: &PgPool,
    worker_id: i64,
    seconds: f64,
    overran: bool,
) -> Result<()> {
    sqlx::query(
        "UPDATE workers SET verify_seconds = verify_seconds + $2, \
             verify_overruns = verify_overruns + CASE WHEN $3 THEN 1 ELSE 0 END \
         WHERE id = $1",
    )
    .bind(worker_id)
    .bind(seconds)
    .bind(overran)
    .execute(pool)
    .await?;
    Ok(())
}

/// Counts a post with a refuted case against the worker.
pub async fn record_forgery(pool: &PgPool, worker_id: i64) -> Result<()> {
    sqlx::query("UPDATE workers SET forged = forged + 1 WHERE id = $1")
        .bind(worker_id)
        .execute(pool)
        .await?;
    Ok(())
}

/// A worker put in quarantine, and what that undid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    pub worker_id: i64,
    pub reason: String,
    pub purged: Purged,
}

/// What a quarantine must also take back: the units' attempts limit (see [`purge`]), and the
/// quarantined workers after which an enrollment token is suspended with its live identities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub max_attempts: u32,
    pub max_quarantined_per_token: u32,
}

/// Quarantines the workers (all, or those in `only`) whose record is below `bar`, and finishes
/// the purge of any quarantined worker whose purge a crash interrupted. The sweeper runs this
/// on every pass; the post and expiry paths run it for the workers they just marked.
pub async fn enforce(
    pool: &PgPool,
    bar: &QuarantineBar,
    only: Option<&[i64]>,
    rules: Rules,
) -> Result<Vec<Quarantined>> {
    #[derive(sqlx::FromRow)]
    struct Candidate {
        id: i64,
        units_done: i64,
        #[sqlx(flatten)]
        record: RecordRow,
    }
    let rows: Vec<Candidate> = sqlx::query_as(&format!(
        "SELECT id, units_done, {RECORD_COLUMNS} FROM workers \
         WHERE quarantined_at IS NULL \
           AND (forged > 0 OR invalid > 0 OR leases_expired >= $1 OR units_failed > 0 \
                OR refuted > 0 OR leases_idle > 0 OR verify_overruns > 0) \
           AND ($2::int8[] IS NULL OR id = ANY($2)) ORDER BY id"
    ))
    .bind(i64::from(bar.min_expired_leases))
    .bind(only)
    .fetch_all(pool)
    .await?;
    let mut out = Vec::new();
    for r in rows {
        if let Some(reason) = trust::quarantine_reason(&r.record.reputation(), r.units_done, bar) {
            out.extend(quarantine(pool, r.id, &reason, rules).await?);
        }
    }
    if only.is_none() {
        let unfinished: Vec<(i64,)> = sqlx::query_as(
            "SELECT w.id FROM workers w WHERE w.quarantined_at IS NOT NULL AND ( \
                 EXISTS (SELECT 1 FROM results r WHERE r.worker_id = w.id AND NOT r.void) \
                 OR EXISTS (SELECT 1 FROM leases l WHERE l.worker_id = w.id AND l.state = 'active'))",
        )
        .fetch_all(pool)
        .await?;
        for (id,) in unfinished {
            let purged = purge(pool, id, rules.max_attempts).await?;
            tracing::warn!(
                worker.id = id,
                ?purged,
                "finished purging a quarantined worker"
            );
        }
    }
    Ok(out)
}

/// Quarantines a worker and purges it: first the mark, in its own short transaction so the
/// worker is refused at once, then [`purge`]. Where its enrollment token now has
/// `rules.max_quarantined_per_token` quarantined workers, the token is suspended and its other
/// live identities are quarantined too: spares registered in advance must not go on where the
/// token's record is already bad. Returns every worker quarantined (none when this one
/// already was).
pub async fn quarantine(
    pool: &PgPool,
    worker_id: i64,
    reason: &str,
    rules: Rules,
) -> Result<Vec<Quarantined>> {
    let Some(first) = quarantine_one(pool, worker_id, reason, rules.max_attempts).await? else {
        return Ok(Vec::new());
    };
    let mut out = vec![first];
    let suspended: Option<(i64, i64)> = sqlx::query_as(
        "WITH t AS (SELECT enrollment_token_id AS id FROM workers WHERE id = $1), \
         n AS (SELECT count(*) AS q FROM workers w, t \
               WHERE w.enrollment_token_id = t.id AND w.quarantined_at IS NOT NULL) \
         UPDATE enrollment_tokens e SET suspended_at = now() FROM t, n \
         WHERE e.id = t.id AND n.q >= $2 AND e.suspended_at IS NULL \
         RETURNING e.id, n.q",
    )
    .bind(worker_id)
    .bind(i64::from(rules.max_quarantined_per_token.max(1)))
    .fetch_optional(pool)
    .await?;
    if let Some((token, n)) = suspended {
        let spares: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM workers WHERE enrollment_token_id = $1 AND quarantined_at IS NULL \
             ORDER BY id",
        )
        .bind(token)
        .fetch_all(pool)
        .await?;
        tracing::warn!(
            token.id = token,
            quarantined = n,
            spares = spares.len(),
            "enrollment token suspended with its live workers"
        );
        let why = format!(
            "its enrollment token {token} was suspended: {n} of its workers were quarantined"
        );
        for id in spares {
            out.extend(quarantine_one(pool, id, &why, rules.max_attempts).await?);
        }
    }
    Ok(out)
}

/// Quarantines the live workers of `owner` (its results' totals failed the count audit).
pub async fn quarantine_owner(
    pool: &PgPool,
    owner: &str,
    reason: &str,
    rules: Rules,
) -> Result<Vec<Quarantined>> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM workers WHERE owner = $1 AND NOT trusted AND quarantined_at IS NULL \
         ORDER BY id",
    )
    .bind(owner)
    .fetch_all(pool)
    .await?;
    let mut out = Vec::new();
    for id in ids {
        out.extend(quarantine(pool, id, reason, rules).await?);
    }
    Ok(out)
}

/// The mark and the purge of one worker (`None` if it already is quarantined).
async fn quarantine_one(
    pool: &PgPool,
    worker_id: i64,
    reason: &str,
    max_attempts: u32,
) -> Result<Option<Quarantined>> {
    let marked: Option<(i64,)> = sqlx::query_as(
        "UPDATE workers SET quarantined_at = now(), quarantine_reason = $2 \
         WHERE id = $1 AND quarantined_at IS NULL RETURNING id",
    )
    .bind(worker_id)
    .bind(reason)
    .fetch_optional(pool)
    .await?;
    if marked.is_none() {
        return Ok(None);
    }
    let purged = purge(pool, worker_id, max_attempts).await?;
    tracing::warn!(
        worker.id = worker_id,
        reason,
        leases_revoked = purged.leases_revoked,
        results_voided = purged.results_voided,
        units_reopened = purged.units_reopened,
        units_restored = purged.units_restored,
        "worker quarantined"
    );
    Ok(Some(Quarantined {
        worker_id,
        reason: reason.to_string(),
        purged,
    }))
}

/// What a purge undid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub leases_revoked: u64,
    /// Units of revoked leases put back in the pool.
    pub units_returned: u64,
    pub results_voided: u64,
    /// Done units that are no longer done: the worker was needed for their quorum.
    pub units_reopened: u64,
    /// Units whose failures it reported were taken back: back in the pool when those reports
    /// had quarantined them.
    pub units_restored: u64,
}

/// Takes everything from a quarantined worker, in one transaction: its active leases are
/// revoked and their units go back to the pool; its results become void; every unit it had a
/// result for is settled again from the remaining results with the full quorum (no adaptive
/// discount), so the units it alone vouched for are redone; the failures it reported are taken
/// back (one attempt each), and units they had quarantined (`max_attempts`) return to the pool.
pub async fn purge(pool: &PgPool, worker_id: i64, max_attempts: u32) -> Result<Purged> {
    crate::store::retry_transient(5, || purge_once(pool, worker_id, max_attempts)).await
}

/// A unit to settle again, as [`resettle`] needs it.
#[derive(sqlx::FromRow)]
pub(crate) struct TouchedUnit {
    pub id: i64,
    state: String,
    lease_id: Option<i64>,
    replication: i32,
}

async fn purge_once(pool: &PgPool, worker_id: i64, max_attempts: u32) -> Result<Purged> {
    let mut tx = super::begin(pool, None).await?;
    // Several coordinators may purge the same worker at once (each one's sweeper finishes
    // interrupted purges): one at a time per worker, the later one then finds little to do.
    sqlx::query("SELECT pg_advisory_xact_lock(7312, ($1 % 2147483647)::int4)")
        .bind(worker_id)
        .execute(&mut *tx)
        .await?;
    let revoked: Vec<(i64,)> = sqlx::query_as(
        "UPDATE leases SET state = 'revoked', ended_at = now() \
         WHERE worker_id = $1 AND state = 'active' RETURNING id",
    )
    .bind(worker_id)
    .fetch_all(&mut *tx)
    .await?;
    let revoked: Vec<i64> = revoked.into_iter().map(|(id,)| id).collect();
    // Units a claim left to be marked are marked first, so that they go back too.
    super::deferred::mark(&mut tx, &revoked).await?;
    let returned = sqlx::query(
        "UPDATE units SET state = 'pending', lease_id = NULL \
         WHERE lease_id = ANY($1) AND state = 'leased'",
    )
    .bind(&revoked)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    // Replicas drawn for it (or for its owner, where no other worker of the owner is live)
    // would otherwise wait for the sweeper's pass: the next claim draws them again.
    super::leases::free_stale_reservations(&mut *tx).await?;
    // Its failure reports and expiries cost the units nothing any more (a saboteur's reports
    // are lies).
    let restored: Vec<(bool,)> = sqlx::query_as(
        "WITH f AS (DELETE FROM unit_attempts WHERE worker_id = $1 RETURNING unit_id) \
         UPDATE units u SET attempts = GREATEST(0, u.attempts - 1), \
             state = CASE WHEN u.state = 'quarantined' AND u.attempts - 1 < $2 \
                          THEN 'pending' ELSE u.state END \
         FROM f WHERE u.id = f.unit_id \
         RETURNING u.state = 'pending' AND u.attempts + 1 >= $2",
    )
    .bind(worker_id)
    .bind(max_attempts as i32)
    .fetch_all(&mut *tx)
    .await?;
    let units: Vec<TouchedUnit> = sqlx::query_as(
        "SELECT u.id, u.state, u.lease_id, c.replication \
         FROM units u JOIN campaigns c ON c.id = u.campaign_id \
         WHERE u.id IN (SELECT unit_id FROM results WHERE worker_id = $1 AND NOT void) \
         ORDER BY u.id FOR UPDATE OF u",
    )
    .bind(worker_id)
    .fetch_all(&mut *tx)
    .await?;
    let voided = sqlx::query("UPDATE results SET void = true WHERE worker_id = $1 AND NOT void")
        .bind(worker_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    let (_, reopened) = resettle(&mut tx, &units).await?;
    tx.commit().await?;
    Ok(Purged {
        leases_revoked: revoked.len() as u64,
        units_returned: returned,
        results_voided: voided,
        units_reopened: reopened,
        units_restored: restored.iter().filter(|(r,)| *r).count() as u64,
    })
}

/// Settles `units` (locked by the caller) again from their live results and the verified
/// cases known in them, with the full quorum (no adaptive discount), and writes what changed:
/// units' states (a done unit whose quorum is gone is reopened, and its campaign with it),
/// leases left with no unit, verdicts and workers' records. Returns the changes (whose
/// `outvoted_workers` must be checked against the bar) and how many done units reopened.
pub(crate) async fn resettle(
    tx: &mut Transaction<'_, Postgres>,
    units: &[TouchedUnit],
) -> Result<(Changes, u64)> {
    let ids: Vec<i64> = units.iter().map(|u| u.id).collect();
    let mut by_unit = super::live_results_by_unit(tx, &ids).await?;
    let facts = super::facts_by_unit(&mut **tx, &ids).await?;
    let mut changes = Changes::default();
    let (mut states, mut needed, mut counts) = (Vec::new(), Vec::new(), Vec::new());
    let mut reopened = 0;
    // Leases of other workers that lose a unit settled here.
    let mut settled_under: Vec<i64> = Vec::new();
    let mut reasons: Vec<Option<String>> = Vec::new();
    let none = UnitFacts::default();
    for u in units {
        let quorum = u.replication.max(1) as u32;
        let replicas = by_unit.remove(&u.id).unwrap_or_default();
        let known = facts.get(&u.id).unwrap_or(&none);
        let (settlement, reason) = changes.settle(&replicas, known, quorum, quorum)?;
        // A unit another lease holds stays with it unless it is settled now.
        let state = match (&settlement, u.state.as_str()) {
            (Settlement::Open, "leased") => "leased",
            _ => unit_state(&settlement),
        };
        if u.state == "done" && state != "done" {
            reopened += 1;
        }
        if state != "leased" {
            settled_under.extend(u.lease_id);
        }
        states.push(state);
        needed.push(quorum as i32);
        counts.push(replicas.len() as i32);
        reasons.push(reason);
    }
    sqlx::query(
        "UPDATE units u SET state = t.state, \
             lease_id = CASE WHEN t.state = 'leased' THEN u.lease_id END, \
             done_at = CASE WHEN t.state = 'done' THEN COALESCE(u.done_at, now()) END, \
             replicas_needed = t.needed, replicas_done = t.live, hold_reason = t.reason, \
             reserved_for = NULL, reserved_at = NULL \
         FROM UNNEST($1::int8[], $2::text[], $3::int4[], $4::int4[], $5::text[]) \
              AS t(id, state, needed, live, reason) \
         WHERE u.id = t.id AND u.id = ANY($1)",
    )
    .bind(&ids)
    .bind(&states)
    .bind(&needed)
    .bind(&counts)
    .bind(&reasons)
    .execute(&mut **tx)
    .await?;
    // A complete campaign with a unit reopened here has work again.
    if reopened > 0 {
        crate::store::reopen_campaigns(tx, &ids).await?;
    }
    // A lease left with no unit is finished, as when its last result is posted: otherwise it
    // would expire and count against a worker that did nothing wrong.
    if !settled_under.is_empty() {
        sqlx::query(
            "UPDATE leases l SET state = 'finished', ended_at = now() \
             WHERE l.id = ANY($1) AND l.state = 'active' \
               AND NOT EXISTS (SELECT 1 FROM units WHERE lease_id = l.id)",
        )
        .bind(&settled_under)
        .execute(&mut **tx)
        .await?;
    }
    apply_verdicts(tx, &changes).await?;
    apply_records(tx, &changes).await?;
    Ok((changes, reopened))
}

/// Lifts a quarantine (admin): the worker starts again with a clean record, untrusted. Its
/// void results stay void: their units were redone by others.
pub async fn reinstate(pool: &PgPool, worker_id: i64) -> Result<()> {
    let row: Option<(bool,)> = sqlx::query_as(
        "WITH w AS (SELECT id, quarantined_at IS NOT NULL AS q FROM workers WHERE id = $1 FOR UPDATE), \
         u AS (UPDATE workers SET quarantined_at = NULL, quarantine_reason = NULL, valid = 0, \
                   invalid = 0, forged = 0, leases_total = 0, leases_expired = 0, streak = 0, \
                   units_failed = 0, refuted = 0, leases_idle = 0, units_leased = 0, \
                   units_idle = 0, verify_overruns = 0 \
               FROM w WHERE workers.id = w.id AND w.q) \
         SELECT q FROM w",
    )
    .bind(worker_id)
    .fetch_optional(pool)
    .await?;
    match row {
        None => Err(Error::NotFound(format!("no worker {worker_id}"))),
        Some((false,)) => Err(Error::Conflict(format!(
            "worker {worker_id} is not quarantined"
        ))),
        Some((true,)) => Ok(()),
    }
}
