//! Storage: every query of the server, as plain async functions over `&PgPool`.
//!
//! Each change of a unit's state happens in exactly one transaction (or one statement).
//! Locks are always taken in the order lease, then unit, so the claim, post, release and
//! expiry paths cannot deadlock one another; claims and expiry skip locked rows instead of
//! waiting. Times (lease expiry, last seen, throughput) come from the database clock `now()`.

pub mod admin;
pub mod export;
pub mod results;
pub mod trust;

use self::trust as store_trust;
use crate::domain::{self, LeaseRow};
use crate::error::{Error, Result};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgPool, Postgres, Transaction};
use tmd_wire::{
    ArgRange, Campaign, CampaignProgress, CampaignState, EnrollmentToken, HrKind, Lease, LeaseTask,
    LeasedUnit, QuarantinedUnit, ReleaseResponse, ReplicationReport, StateCount, StoredHrCase,
    UnitSpec, WorkerInfo,
};

/// The migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Applies the migrations not yet applied.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    MIGRATOR
        .run(pool)
        .await
        .map_err(|e| Error::Internal(format!("migration failed: {e}")))
}

/// Whether the database answers.
pub async fn ping(pool: &PgPool) -> Result<()> {
    sqlx::query("SELECT 1").execute(pool).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Campaigns

#[derive(sqlx::FromRow)]
struct CampaignDb {
    id: i64,
    name: String,
    function: String,
    precision: i32,
    min_bits: i32,
    ranges: Json<Vec<ArgRange>>,
    unit_bits: i32,
    replication: i32,
    distinct_owners: bool,
    adaptive: bool,
    audit_rate: f64,
    trust_after: i32,
    priority: i32,
    state: String,
    units_total: i64,
    arguments_total: String,
    created_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
}

const CAMPAIGN_COLUMNS: &str = "id, name, function, precision, min_bits, ranges, unit_bits, \
     replication, distinct_owners, adaptive, audit_rate, trust_after, priority, state, units_total, arguments_total::text AS arguments_total, created_at, completed_at";

impl CampaignDb {
    fn into_wire(self) -> Result<Campaign> {
        Ok(Campaign {
            id: self.id,
            name: self.name,
            function: self.function,
            precision: self.precision as u32,
            min_bits: self.min_bits as u32,
            ranges: self.ranges.0,
            unit_bits: self.unit_bits as u32,
            replication: self.replication as u32,
            distinct_owners: self.distinct_owners,
            adaptive: self.adaptive,
            audit_rate: self.audit_rate,
            trust_after: self.trust_after as u32,
            priority: self.priority,
            state: parse_state(&self.state)?,
            created_at: self.created_at,
            completed_at: self.completed_at,
            units_total: self.units_total,
            arguments_total: self.arguments_total,
        })
    }
}

fn parse_state(s: &str) -> Result<CampaignState> {
    CampaignState::parse(s).ok_or_else(|| Error::Internal(format!("unknown campaign state {s}")))
}

/// A campaign ready to insert: validated fields and the units the engine cut.
pub struct CampaignInsert<'a> {
    pub name: &'a str,
    pub function: &'a str,
    pub precision: u32,
    pub min_bits: u32,
    pub ranges: &'a [ArgRange],
    pub unit_bits: u32,
    pub replication: u32,
    pub distinct_owners: bool,
    pub adaptive: bool,
    pub audit_rate: f64,
    pub trust_after: u32,
    pub priority: i32,
    pub units: &'a [UnitSpec],
}

/// Inserts a campaign and all its units, in order, in one transaction.
pub async fn create_campaign(pool: &PgPool, c: &CampaignInsert<'_>) -> Result<Campaign> {
    let total: u128 = c.units.iter().map(|u| u128::from(u.count)).sum();
    if c.units.iter().any(|u| i64::try_from(u.count).is_err()) {
        return Err(Error::BadRequest(
            "a unit holds more than 2^63 arguments".into(),
        ));
    }
    let mut tx = pool.begin().await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO campaigns (name, function, precision, min_bits, ranges, unit_bits, \
         replication, priority, units_total, arguments_total, distinct_owners, adaptive, \
         audit_rate, trust_after) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::numeric, $11, $12, $13, $14) RETURNING id",
    )
    .bind(c.name)
    .bind(c.function)
    .bind(c.precision as i32)
    .bind(c.min_bits as i32)
    .bind(Json(c.ranges))
    .bind(c.unit_bits as i32)
    .bind(c.replication as i32)
    .bind(c.priority)
    .bind(c.units.len() as i64)
    .bind(total.to_string())
    .bind(c.distinct_owners)
    .bind(c.adaptive)
    .bind(c.audit_rate)
    .bind(c.trust_after as i32)
    .fetch_one(&mut *tx)
    .await?;
    // Bulk insert in chunks: one round trip per 10k units instead of one per unit.
    for (chunk_no, chunk) in c.units.chunks(10_000).enumerate() {
        let base = chunk_no * 10_000;
        let seq: Vec<i32> = (0..chunk.len()).map(|i| (base + i) as i32).collect();
        let neg: Vec<bool> = chunk.iter().map(|u| u.negative).collect();
        let exp: Vec<i32> = chunk.iter().map(|u| u.exponent).collect();
        let first: Vec<String> = chunk.iter().map(|u| u.first.to_string()).collect();
        let count: Vec<i64> = chunk.iter().map(|u| u.count as i64).collect();
        sqlx::query(
            "INSERT INTO units (campaign_id, seq, negative, exponent, first, count) \
             SELECT $1, s, n, e, f::numeric, k \
             FROM UNNEST($2::int4[], $3::bool[], $4::int4[], $5::text[], $6::int8[]) AS t(s, n, e, f, k)",
        )
        .bind(id)
        .bind(&seq)
        .bind(&neg)
        .bind(&exp)
        .bind(&first)
        .bind(&count)
        .execute(&mut *tx)
        .await?;
    }
    let campaign = fetch_campaign(&mut *tx, id).await?;
    tx.commit().await?;
    Ok(campaign)
}

async fn fetch_campaign<'e, E: sqlx::PgExecutor<'e>>(ex: E, id: i64) -> Result<Campaign> {
    let row: Option<CampaignDb> = sqlx::query_as(&format!(
        "SELECT {CAMPAIGN_COLUMNS} FROM campaigns WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(ex)
    .await?;
    row.ok_or_else(|| Error::NotFound(format!("no campaign {id}")))?
        .into_wire()
}

/// One campaign.
pub async fn get_campaign(pool: &PgPool, id: i64) -> Result<Campaign> {
    fetch_campaign(pool, id).await
}

/// All campaigns, newest first.
pub async fn list_campaigns(pool: &PgPool) -> Result<Vec<Campaign>> {
    let rows: Vec<CampaignDb> = sqlx::query_as(&format!(
        "SELECT {CAMPAIGN_COLUMNS} FROM campaigns ORDER BY id DESC"
    ))
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(CampaignDb::into_wire).collect()
}

/// Moves a campaign to `to` if the transition is allowed (pause, resume, cancel).
pub async fn set_campaign_state(pool: &PgPool, id: i64, to: CampaignState) -> Result<Campaign> {
    let mut tx = pool.begin().await?;
    let current: Option<String> =
        sqlx::query_scalar("SELECT state FROM campaigns WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some(current) = current else {
        tx.rollback().await?;
        return Err(Error::NotFound(format!("no campaign {id}")));
    };
    let current = parse_state(&current)?;
    if !domain::transition_allowed(current, to) {
        tx.rollback().await?;
        return Err(Error::Conflict(if current == CampaignState::Complete {
            format!(
                "campaign {id} is complete: every unit is done, there is nothing to {}",
                match to {
                    CampaignState::Paused => "pause",
                    CampaignState::Active => "resume",
                    CampaignState::Cancelled => "cancel",
                    CampaignState::Complete => "complete",
                }
            )
        } else {
            format!(
                "campaign {id} is {}; it cannot become {}",
                current.as_str(),
                to.as_str()
            )
        }));
    }
    sqlx::query("UPDATE campaigns SET state = $2 WHERE id = $1")
        .bind(id)
        .bind(to.as_str())
        .execute(&mut *tx)
        .await?;
    let c = fetch_campaign(&mut *tx, id).await?;
    tx.commit().await?;
    Ok(c)
}

fn parse_u128(s: &str) -> u128 {
    s.parse().unwrap_or(0)
}

/// Progress of a campaign: counts per state, rate over the last hour, ETA, hardest cases.
pub async fn campaign_progress(pool: &PgPool, id: i64) -> Result<CampaignProgress> {
    let campaign = fetch_campaign(pool, id).await?;
    let rows: Vec<(String, i64, String)> = sqlx::query_as(
        "SELECT state, count(*), COALESCE(sum(count), 0)::text FROM units \
         WHERE campaign_id = $1 GROUP BY state",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    let mut by_state = std::collections::HashMap::new();
    for (state, units, args) in rows {
        by_state.insert(
            state,
            StateCount {
                units,
                arguments: args,
            },
        );
    }
    let get = |s: &str| {
        by_state.get(s).cloned().unwrap_or(StateCount {
            units: 0,
            arguments: "0".into(),
        })
    };
    let (done, leased, pending, quarantined) = (
        get("done"),
        get("leased"),
        get("pending"),
        get("quarantined"),
    );
    // The window is the last hour, or the campaign's age if younger, so a new campaign's rate
    // is not diluted by an hour it did not exist.
    let rate: f64 = sqlx::query_scalar(
        "SELECT COALESCE(sum(u.count), 0)::float8 \
              / GREATEST(1.0, LEAST(3600.0, extract(epoch FROM now() - c.created_at)::float8)) \
         FROM campaigns c LEFT JOIN units u ON u.campaign_id = c.id AND u.state = 'done' \
              AND u.done_at > now() - interval '1 hour' \
         WHERE c.id = $1 GROUP BY c.created_at",
    )
    .bind(id)
    .fetch_one(pool)
    .await?;
    let hr_cases: i64 = sqlx::query_scalar("SELECT count(*) FROM hr_cases WHERE campaign_id = $1")
        .bind(id)
        .fetch_one(pool)
        .await?;
    let hardest = hardest_cases(pool, id, 10).await?;
    let quarantined_rows: Vec<(i64, bool, i32, String, i64, i32)> = sqlx::query_as(
        "SELECT id, negative, exponent, first::text, count, attempts FROM units \
         WHERE campaign_id = $1 AND state = 'quarantined' ORDER BY seq LIMIT 100",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    let (results, void, outvoted, alone, computed): (i64, i64, i64, i64, f64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE r.void), \
                count(*) FILTER (WHERE r.verdict = 'outvoted'), \
                count(*) FILTER (WHERE r.verdict = 'alone' AND NOT r.void), \
                COALESCE(sum(u.count), 0)::float8 \
         FROM results r JOIN units u ON u.id = r.unit_id WHERE u.campaign_id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await?;
    let total_args = parse_u128(&campaign.arguments_total);
    let done_args = parse_u128(&done.arguments);
    let remaining = total_args
        .saturating_sub(done_args)
        .saturating_sub(parse_u128(&quarantined.arguments));
    let percent_done = if total_args == 0 {
        100.0
    } else {
        done_args as f64 * 100.0 / total_args as f64
    };
    Ok(CampaignProgress {
        campaign_id: id,
        state: campaign.state,
        total: StateCount {
            units: campaign.units_total,
            arguments: campaign.arguments_total.clone(),
        },
        complete: done.units == campaign.units_total,
        completed_at: campaign.completed_at,
        done,
        leased,
        pending,
        quarantined,
        percent_done,
        arguments_per_second_last_hour: rate,
        eta_seconds: (rate > 0.0).then(|| remaining as f64 / rate),
        hr_cases,
        hardest,
        quarantined_units: quarantined_rows
            .into_iter()
            .map(
                |(unit_id, negative, exponent, first, count, attempts)| QuarantinedUnit {
                    unit_id,
                    spec: UnitSpec {
                        negative,
                        exponent,
                        first: first.parse().unwrap_or(0),
                        count: count as u64,
                    },
                    attempts,
                },
            )
            .collect(),
        replication: ReplicationReport {
            results,
            void,
            outvoted,
            alone,
            work_factor: if done_args == 0 {
                0.0
            } else {
                computed / done_args as f64
            },
        },
    })
}

/// The `limit` hardest cases of a campaign: most identical bits, then smallest distance.
pub async fn hardest_cases(
    pool: &PgPool,
    campaign_id: i64,
    limit: i64,
) -> Result<Vec<StoredHrCase>> {
    let rows: Vec<HrRow> = sqlx::query_as(
        "SELECT x, bits, neg_log2_d, kind, rounded, unit_id, found_at FROM hr_cases \
         WHERE campaign_id = $1 ORDER BY bits DESC, neg_log2_d DESC, id LIMIT $2",
    )
    .bind(campaign_id)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(StoredHrCase {
                kind: HrKind::parse(&r.kind)
                    .ok_or_else(|| Error::Internal(format!("unknown HR kind {}", r.kind)))?,
                x: r.x,
                bits: r.bits as u32,
                neg_log2_d: r.neg_log2_d,
                rounded: r.rounded,
                unit_id: r.unit_id,
                found_at: r.found_at,
            })
        })
        .collect()
}

#[derive(sqlx::FromRow)]
struct HrRow {
    x: String,
    bits: i32,
    neg_log2_d: f64,
    kind: String,
    rounded: String,
    unit_id: i64,
    found_at: DateTime<Utc>,
}

// ---------------------------------------------------------------------------------------------
// Tokens and workers

/// Records a new enrollment token (its hash only).
pub async fn create_enrollment_token(
    pool: &PgPool,
    token: &str,
    token_hash: &[u8],
    uses: Option<u32>,
    expires_in_seconds: Option<u64>,
    note: Option<&str>,
    owner: Option<&str>,
) -> Result<EnrollmentToken> {
    let (id, expires_at): (i64, Option<DateTime<Utc>>) = sqlx::query_as(
        "INSERT INTO enrollment_tokens (token_hash, uses_left, expires_at, note, owner) \
         VALUES ($1, $2, now() + make_interval(secs => $3::float8), $4, $5) RETURNING id, expires_at",
    )
    .bind(token_hash)
    .bind(uses.map(|u| u as i32))
    .bind(expires_in_seconds.map(|s| s as f64))
    .bind(note)
    .bind(owner)
    .fetch_one(pool)
    .await?;
    Ok(EnrollmentToken {
        id,
        token: token.to_string(),
        uses_left: uses,
        expires_at,
    })
}

/// Spends one use of an enrollment token and records the worker, in one transaction. The
/// worker's owner is the token's (`token-{id}` when the token names none). A revoked token, or
/// one with `max_quarantined` of its workers quarantined, registers no one: whoever holds it
/// would only mint fresh identities for a record that is already bad.
pub async fn register_worker(
    pool: &PgPool,
    enrollment_hash: &[u8],
    name: &str,
    worker_hash: &[u8],
    max_quarantined: u32,
) -> Result<i64> {
    let mut tx = pool.begin().await?;
    let standing: Option<(i64, i64)> = sqlx::query_as(
        "SELECT t.id, (SELECT count(*) FROM workers w \
                       WHERE w.enrollment_token_id = t.id AND w.quarantined_at IS NOT NULL) \
         FROM enrollment_tokens t WHERE t.token_hash = $1 AND t.revoked_at IS NULL FOR UPDATE",
    )
    .bind(enrollment_hash)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some((id, quarantined)) = standing {
        if quarantined >= i64::from(max_quarantined) {
            tx.rollback().await?;
            return Err(Error::Forbidden(format!(
                "enrollment token {id} is suspended: {quarantined} of its workers are quarantined; \
                 ask the coordinator's admin for a new token"
            )));
        }
    }
    let enrollment: Option<(i64, String)> = sqlx::query_as(
        "UPDATE enrollment_tokens SET uses_left = uses_left - 1 \
         WHERE token_hash = $1 AND revoked_at IS NULL \
           AND (expires_at IS NULL OR expires_at > now()) \
           AND (uses_left IS NULL OR uses_left > 0) \
         RETURNING id, COALESCE(owner, 'token-' || id)",
    )
    .bind(enrollment_hash)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((enrollment, owner)) = enrollment else {
        tx.rollback().await?;
        return Err(Error::Unauthorized(
            "unknown, expired, revoked or used-up enrollment token".into(),
        ));
    };
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO workers (name, token_hash, enrollment_token_id, owner) \
         VALUES ($1, $2, $3, $4) RETURNING id",
    )
    .bind(name)
    .bind(worker_hash)
    .bind(enrollment)
    .bind(owner)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(id)
}

/// The worker a token belongs to, marking it seen now; with its measured speed.
pub async fn authenticate_worker(
    pool: &PgPool,
    token_hash: &[u8],
) -> Result<Option<(i64, Option<f64>)>> {
    // `last_seen` is written at most every 10 s per worker: a read-only statement commits
    // without a WAL flush. (The server also caches this answer for 10 s.)
    Ok(sqlx::query_as(
        "WITH w AS (SELECT id, speed, last_seen FROM workers \
                    WHERE token_hash = $1 AND revoked_at IS NULL), \
         seen AS ( \
             UPDATE workers SET last_seen = now() FROM w \
             WHERE workers.id = w.id \
               AND (w.last_seen IS NULL OR w.last_seen < now() - interval '10 seconds')) \
         SELECT id, speed FROM w",
    )
    .bind(token_hash)
    .fetch_optional(pool)
    .await?)
}

/// All workers with last seen, speed, units done and their record.
pub async fn list_workers(pool: &PgPool) -> Result<Vec<WorkerInfo>> {
    let rows: Vec<WorkerRow> =
        sqlx::query_as(&format!("SELECT {WORKER_COLUMNS} FROM workers ORDER BY id"))
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().map(WorkerRow::into_wire).collect())
}

/// One worker.
pub async fn get_worker(pool: &PgPool, id: i64) -> Result<WorkerInfo> {
    let row: Option<WorkerRow> = sqlx::query_as(&format!(
        "SELECT {WORKER_COLUMNS} FROM workers WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?;
    row.map(WorkerRow::into_wire)
        .ok_or_else(|| Error::NotFound(format!("no worker {id}")))
}

const WORKER_COLUMNS: &str = "id, name, created_at, last_seen, speed, units_done, owner, valid, \
     invalid, forged, leases_total, leases_expired, streak, units_failed AS failed_units, \
     quarantined_at, quarantine_reason, revoked_at";

#[derive(sqlx::FromRow)]
struct WorkerRow {
    id: i64,
    name: String,
    created_at: DateTime<Utc>,
    last_seen: Option<DateTime<Utc>>,
    speed: Option<f64>,
    units_done: i64,
    owner: String,
    #[sqlx(flatten)]
    record: store_trust::RecordRow,
    quarantined_at: Option<DateTime<Utc>>,
    quarantine_reason: Option<String>,
    revoked_at: Option<DateTime<Utc>>,
}

impl WorkerRow {
    fn into_wire(self) -> WorkerInfo {
        WorkerInfo {
            id: self.id,
            name: self.name,
            created_at: self.created_at,
            last_seen: self.last_seen,
            arguments_per_second: self.speed,
            units_done: self.units_done,
            owner: self.owner,
            reputation: self.record.reputation(),
            quarantined_at: self.quarantined_at,
            quarantine_reason: self.quarantine_reason,
            revoked_at: self.revoked_at,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Leases

/// Expires the leases past their expiry: their unfinished units go back to the pool with one
/// more attempt, or to quarantine at `max_attempts`. One statement, so one transaction; leases
/// another transaction holds (a result being posted) are skipped and caught next time.
/// The expired leases count against their workers (in a second statement, so the worker rows
/// are not locked with the units; a crash between the two loses only that count).
pub async fn expire_leases(pool: &PgPool, max_attempts: u32) -> Result<Expired> {
    let (returned, quarantined, workers): (i64, i64, Option<Vec<i64>>) = sqlx::query_as(
        "WITH due AS ( \
             SELECT id FROM leases WHERE state = 'active' AND expires_at <= now() \
             ORDER BY expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED), \
         ended AS ( \
             UPDATE leases l SET state = 'expired', ended_at = now() FROM due \
             WHERE l.id = due.id RETURNING l.id, l.worker_id), \
         back AS ( \
             UPDATE units u SET \
                 state = CASE WHEN u.attempts + 1 >= $1 THEN 'quarantined' ELSE 'pending' END, \
                 attempts = u.attempts + 1, lease_id = NULL \
             FROM ended WHERE u.lease_id = ended.id AND u.state = 'leased' \
             RETURNING u.state) \
         SELECT (SELECT count(*) FROM back WHERE state = 'pending'), \
                (SELECT count(*) FROM back WHERE state = 'quarantined'), \
                (SELECT array_agg(worker_id) FROM ended)",
    )
    .bind(max_attempts as i32)
    .fetch_one(pool)
    .await?;
    let workers = workers.unwrap_or_default();
    let mut per_worker: std::collections::BTreeMap<i64, i64> = Default::default();
    for w in &workers {
        *per_worker.entry(*w).or_default() += 1;
    }
    if !per_worker.is_empty() {
        let ids: Vec<i64> = per_worker.keys().copied().collect();
        let counts: Vec<i64> = per_worker.values().copied().collect();
        sqlx::query(
            "UPDATE workers w SET leases_expired = w.leases_expired + t.n \
             FROM UNNEST($1::int8[], $2::int8[]) AS t(id, n) WHERE w.id = t.id",
        )
        .bind(&ids)
        .bind(&counts)
        .execute(pool)
        .await?;
    }
    Ok(Expired {
        units_returned: returned as u64,
        units_quarantined: quarantined as u64,
        leases: workers.len() as u64,
        workers: per_worker.into_keys().collect(),
    })
}

/// What one expiry pass did.
#[derive(Debug, Default)]
pub struct Expired {
    pub units_returned: u64,
    pub units_quarantined: u64,
    pub leases: u64,
    /// The workers whose leases expired.
    pub workers: Vec<i64>,
}

#[derive(sqlx::FromRow)]
struct ActiveCampaign {
    id: i64,
    function: String,
    precision: i32,
    min_bits: i32,
    unit_bits: i32,
    replication: i32,
    distinct_owners: bool,
}

#[derive(sqlx::FromRow)]
struct ClaimedUnit {
    lease_id: i64,
    fencing_token: i64,
    expires_at: DateTime<Utc>,
    id: i64,
    negative: bool,
    exponent: i32,
    first: String,
    count: i64,
}

/// Leases a contiguous run of pending units of the active campaign with the highest priority
/// that has any, of `size(unit_bits, speed, held)` units: the worker's measured speed and what
/// it holds in its active leases are read here, from the database, so every coordinator
/// sharing it sizes leases alike. `None` when there is no work, or when the worker holds its
/// share already (`size` is 0). A quarantined or revoked worker is refused.
///
/// Concurrent claims never share a unit: candidate rows are locked `FOR UPDATE SKIP LOCKED`,
/// so a concurrent claim skips them and takes the next ones. Picking, keeping the contiguous
/// prefix, creating the lease and marking its units is one statement, so one transaction.
pub async fn claim_lease(
    pool: &PgPool,
    worker_id: i64,
    ttl_seconds: u32,
    size: impl Fn(u32, Option<f64>, domain::Held) -> u32,
) -> Result<Option<Lease>> {
    #[derive(sqlx::FromRow)]
    struct Standing {
        quarantined: bool,
        quarantine_reason: Option<String>,
        revoked: bool,
        speed: Option<f64>,
        held_units: i64,
        held_arguments: f64,
    }
    let standing: Option<Standing> = sqlx::query_as(
        "SELECT w.quarantined_at IS NOT NULL AS quarantined, w.quarantine_reason, \
                w.revoked_at IS NOT NULL AS revoked, w.speed, h.n AS held_units, \
                h.args AS held_arguments \
         FROM workers w, LATERAL ( \
             SELECT count(*) AS n, COALESCE(sum(u.count), 0)::float8 AS args \
             FROM leases l JOIN units u ON u.lease_id = l.id \
             WHERE l.worker_id = w.id AND l.state = 'active' AND u.state = 'leased') h \
         WHERE w.id = $1",
    )
    .bind(worker_id)
    .fetch_optional(pool)
    .await?;
    let Some(standing) = standing else {
        return Err(Error::Unauthorized(format!("no worker {worker_id}")));
    };
    if standing.quarantined {
        return Err(store_trust::quarantined(
            worker_id,
            standing.quarantine_reason.as_deref(),
        ));
    }
    if standing.revoked {
        // Another coordinator may still hold the token in its cache for a few seconds.
        return Err(Error::Unauthorized(
            "this worker's token was revoked".into(),
        ));
    }
    let held = domain::Held {
        units: standing.held_units,
        arguments: standing.held_arguments,
    };
    let campaigns: Vec<ActiveCampaign> = sqlx::query_as(
        "SELECT id, function, precision, min_bits, unit_bits, replication, distinct_owners \
         FROM campaigns c \
         WHERE state = 'active' \
           AND EXISTS (SELECT 1 FROM units u WHERE u.campaign_id = c.id AND u.state = 'pending') \
         ORDER BY priority DESC, id LIMIT 32",
    )
    .fetch_all(pool)
    .await?;
    for c in campaigns {
        let want = i64::from(size(c.unit_bits as u32, standing.speed, held));
        if want == 0 {
            return Ok(None);
        }
        // With replication, a worker must not get a unit it already computed: its replicas
        // have to come from other workers (and other owners, where the campaign asks).
        let replica_filter = match (c.replication > 1, c.distinct_owners) {
            (false, _) => "",
            (true, false) => {
                "AND NOT EXISTS (SELECT 1 FROM results r WHERE r.unit_id = units.id AND r.worker_id = $3)"
            }
            (true, true) => {
                "AND NOT EXISTS (SELECT 1 FROM results r WHERE r.unit_id = units.id AND r.worker_id = $3) \
                 AND NOT EXISTS (SELECT 1 FROM results r JOIN workers w ON w.id = r.worker_id \
                     WHERE r.unit_id = units.id AND NOT r.void \
                       AND w.owner = (SELECT owner FROM workers WHERE id = $3))"
            }
        };
        // `run` keeps the rows whose seq is consecutive from the first: seq - row_number()
        // is constant along a contiguous run. Locked rows not in it are released at the end
        // of the statement.
        let units: Vec<ClaimedUnit> = sqlx::query_as(&format!(
            "WITH picked AS ( \
                 SELECT id, seq FROM units \
                 WHERE campaign_id = $1 AND state = 'pending' {replica_filter} \
                 ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED), \
             run AS ( \
                 SELECT id, seq FROM ( \
                     SELECT id, seq, seq - row_number() OVER (ORDER BY seq) AS g FROM picked) t \
                 WHERE g = (SELECT min(seq) - 1 FROM picked)), \
             l AS ( \
                 INSERT INTO leases (worker_id, campaign_id, first_seq, unit_count, expires_at) \
                 SELECT $3, $1, min(seq), count(*), now() + make_interval(secs => $4::float8) \
                 FROM run HAVING count(*) > 0 \
                 RETURNING id, fencing_token, expires_at), \
             u AS ( \
                 UPDATE units SET state = 'leased', lease_id = l.id, fence = l.fencing_token \
                 FROM l, run WHERE units.id = run.id \
                 RETURNING units.id, units.seq, units.negative, units.exponent, \
                           units.first::text AS first, units.count), \
             w AS ( \
                 UPDATE workers SET leases_total = leases_total + 1 FROM l WHERE workers.id = $3) \
             SELECT l.id AS lease_id, l.fencing_token, l.expires_at, \
                    u.id, u.negative, u.exponent, u.first, u.count \
             FROM l, u ORDER BY u.seq"
        ))
        .bind(c.id)
        .bind(want)
        .bind(worker_id)
        .bind(f64::from(ttl_seconds))
        .fetch_all(pool)
        .await?;
        let Some(head) = units.first() else {
            continue;
        };
        return Ok(Some(Lease {
            lease_id: head.lease_id,
            fencing_token: head.fencing_token,
            expires_at: head.expires_at,
            heartbeat_seconds: (ttl_seconds / 3).max(1),
            task: LeaseTask {
                campaign_id: c.id,
                function: c.function,
                precision: c.precision as u32,
                min_bits: c.min_bits as u32,
            },
            units: units
                .iter()
                .map(|u| {
                    Ok(LeasedUnit {
                        unit_id: u.id,
                        spec: UnitSpec {
                            negative: u.negative,
                            exponent: u.exponent,
                            first: u.first.parse().map_err(|_| {
                                Error::Internal(format!("unit {} has first {}", u.id, u.first))
                            })?,
                            count: u.count as u64,
                        },
                    })
                })
                .collect::<Result<_>>()?,
        }));
    }
    Ok(None)
}

/// Units pending or leased (to any worker) in the active campaigns: work that is not done
/// yet and could still come to a worker asking for it, through an expiry or a release. Paused
/// campaigns do not count: their units come back only when an admin resumes them, and a
/// daemon run with `--exit-when-idle` should not wait on a person for that.
///
/// Both parts follow partial indexes: `units_pending` for the pending units, and the active
/// leases (`leases_active_expiry`) with their units (`units_lease`) for the leased ones.
pub async fn units_outstanding(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM units u JOIN campaigns c ON c.id = u.campaign_id \
                 WHERE c.state = 'active' AND u.state = 'pending') \
              + (SELECT count(*) FROM leases l \
                 JOIN units u ON u.lease_id = l.id AND u.state = 'leased' \
                 JOIN campaigns c ON c.id = l.campaign_id \
                 WHERE l.state = 'active' AND c.state = 'active')",
    )
    .fetch_one(pool)
    .await?)
}

pub(crate) const LEASE_COLUMNS: &str =
    "id, worker_id, campaign_id, fencing_token, first_seq, unit_count, \
     state, expires_at <= now() AS expired";

async fn fetch_lease<'e, E: sqlx::PgExecutor<'e>>(
    ex: E,
    id: i64,
    lock: bool,
) -> Result<Option<LeaseRow>> {
    let lock = if lock { " FOR UPDATE" } else { "" };
    Ok(sqlx::query_as(&format!(
        "SELECT {LEASE_COLUMNS} FROM leases WHERE id = $1{lock}"
    ))
    .bind(id)
    .fetch_optional(ex)
    .await?)
}

/// Why a lease operation other than a post cannot proceed.
fn lease_refusal(lease: Option<&LeaseRow>, worker_id: i64, fencing_token: i64) -> Result<()> {
    let lease = lease.ok_or_else(|| Error::NotFound("no such lease".into()))?;
    if lease.worker_id != worker_id {
        return Err(Error::Forbidden(
            "the lease belongs to another worker".into(),
        ));
    }
    if lease.fencing_token != fencing_token {
        return Err(Error::StaleToken(
            "the fencing token is not this lease's".into(),
        ));
    }
    if lease.state != "active" || lease.expired {
        return Err(Error::LeaseExpired(format!(
            "the lease is {}; ask for new work",
            if lease.state == "active" {
                "expired"
            } else {
                &lease.state
            }
        )));
    }
    Ok(())
}

/// Extends a live lease by `ttl_seconds` from now, but never past `max_seconds` after it was
/// granted; returns the new expiry and the campaign's state. (The expiry test is written
/// `expires_at - now() > 0` so the planner takes the primary key, not a scan of the
/// active-lease index.)
pub async fn heartbeat(
    pool: &PgPool,
    worker_id: i64,
    lease_id: i64,
    fencing_token: i64,
    ttl_seconds: u32,
    max_seconds: u32,
) -> Result<(DateTime<Utc>, CampaignState)> {
    let row: Option<(DateTime<Utc>, String)> = sqlx::query_as(
        "UPDATE leases l SET expires_at = LEAST(now() + make_interval(secs => $4::float8), \
                                                l.created_at + make_interval(secs => $5::float8)) \
         FROM campaigns c \
         WHERE l.id = $1 AND l.worker_id = $2 AND l.fencing_token = $3 AND l.state = 'active' \
           AND l.expires_at - now() > interval '0' AND c.id = l.campaign_id \
         RETURNING l.expires_at, c.state",
    )
    .bind(lease_id)
    .bind(worker_id)
    .bind(fencing_token)
    .bind(f64::from(ttl_seconds))
    .bind(f64::from(max_seconds))
    .fetch_optional(pool)
    .await?;
    match row {
        Some((expires_at, state)) => Ok((expires_at, parse_state(&state)?)),
        None => {
            let lease = fetch_lease(pool, lease_id, false).await?;
            lease_refusal(lease.as_ref(), worker_id, fencing_token)?;
            Err(Error::LeaseExpired(
                "the lease expired; ask for new work".into(),
            ))
        }
    }
}

/// Ends a lease early: its unfinished units go back to the pool. Those in `failed` count one
/// attempt each, once per worker however often it reports them (so one worker cannot
/// quarantine a unit alone), and may be quarantined at `max_attempts`; every unit reported
/// counts against the worker (`units_failed`). A lease given back with no result is taken off
/// the worker's lease count, so lease/release cycles cannot dilute its expired fraction.
pub async fn release_lease(
    pool: &PgPool,
    worker_id: i64,
    lease_id: i64,
    fencing_token: i64,
    failed: &[i64],
    max_attempts: u32,
) -> Result<ReleaseResponse> {
    let mut tx = pool.begin().await?;
    let lease = fetch_lease(&mut *tx, lease_id, true).await?;
    if let Err(e) = lease_refusal(lease.as_ref(), worker_id, fencing_token) {
        tx.rollback().await?;
        return Err(e);
    }
    let unit_count = lease.map_or(0, |l| l.unit_count);
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "WITH f AS ( \
             INSERT INTO unit_failures (unit_id, worker_id) \
             SELECT id, $4 FROM units WHERE lease_id = $1 AND state = 'leased' AND id = ANY($2) \
             ON CONFLICT DO NOTHING RETURNING unit_id) \
         UPDATE units SET \
             attempts = attempts + CASE WHEN id IN (SELECT unit_id FROM f) THEN 1 ELSE 0 END, \
             state = CASE WHEN id IN (SELECT unit_id FROM f) AND attempts + 1 >= $3 \
                          THEN 'quarantined' ELSE 'pending' END, \
             lease_id = NULL \
         WHERE lease_id = $1 AND state = 'leased' RETURNING state, id = ANY($2)",
    )
    .bind(lease_id)
    .bind(failed)
    .bind(max_attempts as i32)
    .bind(worker_id)
    .fetch_all(&mut *tx)
    .await?;
    sqlx::query("UPDATE leases SET state = 'released', ended_at = now() WHERE id = $1")
        .bind(lease_id)
        .execute(&mut *tx)
        .await?;
    let reported = rows.iter().filter(|(_, f)| *f).count() as i64;
    let untouched = rows.len() as i64 == i64::from(unit_count);
    if reported > 0 || untouched {
        sqlx::query(
            "UPDATE workers SET units_failed = units_failed + $2, \
                 leases_total = GREATEST(0, leases_total - CASE WHEN $3 THEN 1 ELSE 0 END) \
             WHERE id = $1",
        )
        .bind(worker_id)
        .bind(reported)
        .bind(untouched)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    let quarantined = rows.iter().filter(|(s, _)| s == "quarantined").count() as u32;
    Ok(ReleaseResponse {
        returned: rows.len() as u32 - quarantined,
        quarantined,
    })
}

// ---------------------------------------------------------------------------------------------
// Results (their recording is in `store_results`)

pub(crate) const UNIT_COLUMNS: &str = "id, campaign_id, seq, state, lease_id, fence, count, \
     negative, exponent, first::text AS first";

/// One live (not void) result of a unit.
#[derive(sqlx::FromRow)]
pub struct LiveResult {
    pub id: i64,
    pub unit_id: i64,
    pub worker_id: i64,
    pub claim: String,
    pub verdict: String,
}

/// Runs `attempt` again, at most `retries` more times, while it fails with a deadlock or a
/// serialization failure: the transaction was rolled back, so running it again is safe.
pub(crate) async fn retry_transient<T, F, Fut>(retries: u32, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(Error::Database(e)) if crate::error::is_transient(&e) && tries < retries => {
                tries += 1;
                tracing::debug!(error = %e, "retrying a transaction after a deadlock");
            }
            other => return other,
        }
    }
}

/// Marks complete, in the caller's transaction, those of `campaigns` (active or paused) whose
/// units are all done, as this transaction sees them; returns their ids.
///
/// Two transactions that finish a campaign's last two units at once must not both miss it
/// (each seeing the other's unit still leased): so when no unit of a campaign is pending or
/// quarantined any more, the campaign's row is locked (in id order) before the final check,
/// which then runs after the other transaction committed. While units are still pending the
/// lock is skipped, so the campaign row is not a point every result waits on; the sweeper
/// ([`complete_finished_campaigns`]) catches the rare campaign finished by a transaction that
/// saw a pending unit which another finished in the meantime.
pub async fn complete_campaigns(
    tx: &mut Transaction<'_, Postgres>,
    campaigns: &[i64],
) -> Result<Vec<i64>> {
    if campaigns.is_empty() {
        return Ok(Vec::new());
    }
    let near_end: Vec<(i64,)> = sqlx::query_as(
        "SELECT c.id FROM campaigns c WHERE c.id = ANY($1) AND c.state IN ('active', 'paused') \
           AND NOT EXISTS (SELECT 1 FROM units u WHERE u.campaign_id = c.id AND u.state = 'pending') \
           AND NOT EXISTS (SELECT 1 FROM units u WHERE u.campaign_id = c.id \
                           AND u.state = 'quarantined') \
         ORDER BY c.id FOR NO KEY UPDATE",
    )
    .bind(campaigns)
    .fetch_all(&mut **tx)
    .await?;
    if near_end.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = near_end.into_iter().map(|(id,)| id).collect();
    let done: Vec<(i64,)> = sqlx::query_as(
        "UPDATE campaigns c SET state = 'complete', completed_at = now() \
         WHERE c.id = ANY($1) AND c.state IN ('active', 'paused') \
           AND NOT EXISTS (SELECT 1 FROM units u WHERE u.campaign_id = c.id AND u.state <> 'done') \
         RETURNING c.id",
    )
    .bind(&ids)
    .fetch_all(&mut **tx)
    .await?;
    Ok(done.into_iter().map(|(id,)| id).collect())
}

/// Makes active again, in the caller's transaction, the complete campaigns of `units` that
/// have a unit not done any more (reopened by a quarantine's purge, or requeued by an admin),
/// and clears their completion time.
pub async fn reopen_campaigns(tx: &mut Transaction<'_, Postgres>, units: &[i64]) -> Result<()> {
    let reopened: Vec<(i64,)> = sqlx::query_as(
        "UPDATE campaigns c SET state = 'active', completed_at = NULL \
         WHERE c.state = 'complete' AND c.id IN ( \
             SELECT campaign_id FROM units WHERE id = ANY($1) AND state <> 'done') \
         RETURNING c.id",
    )
    .bind(units)
    .fetch_all(&mut **tx)
    .await?;
    for (id,) in reopened {
        tracing::info!(
            campaign.id = id,
            "complete campaign active again: a unit was reopened"
        );
    }
    Ok(())
}

/// Marks complete every active or paused campaign whose units are all done (the sweeper's
/// backstop of [`complete_campaigns`]); returns their ids. The completion time is when its
/// last unit was done.
pub async fn complete_finished_campaigns(pool: &PgPool) -> Result<Vec<i64>> {
    let done: Vec<(i64,)> = sqlx::query_as(
        "UPDATE campaigns c SET state = 'complete', \
             completed_at = COALESCE((SELECT max(done_at) FROM units u \
                                      WHERE u.campaign_id = c.id AND u.state = 'done'), now()) \
         WHERE c.state IN ('active', 'paused') \
           AND NOT EXISTS (SELECT 1 FROM units u WHERE u.campaign_id = c.id AND u.state <> 'done') \
         RETURNING c.id",
    )
    .fetch_all(pool)
    .await?;
    Ok(done.into_iter().map(|(id,)| id).collect())
}

/// Units per state over all campaigns, for `/metrics`.
pub async fn unit_state_counts(pool: &PgPool) -> Result<Vec<(String, i64)>> {
    Ok(
        sqlx::query_as("SELECT state, count(*) FROM units GROUP BY state ORDER BY state")
            .fetch_all(pool)
            .await?,
    )
}
