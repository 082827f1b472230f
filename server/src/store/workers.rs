//! Storage of enrollment tokens and workers: registration, authentication, their records.

use super::*;
/// What an enrollment token allows, as the admin asked (defaults already applied).
#[derive(Debug, Clone, Copy)]
pub struct TokenTerms<'a> {
    pub uses: Option<u32>,
    pub expires_in_seconds: Option<u64>,
    pub note: Option<&'a str>,
    pub owner: Option<&'a str>,
    /// Its workers are the operator's own machines.
    pub trusted: bool,
}

/// Records a new enrollment token (its hash only).
pub async fn create_enrollment_token(
    pool: &PgPool,
    token: &str,
    token_hash: &[u8],
    terms: &TokenTerms<'_>,
) -> Result<EnrollmentToken> {
    let TokenTerms {
        uses,
        expires_in_seconds,
        note,
        owner,
        trusted,
    } = *terms;
    let (id, expires_at): (i64, Option<DateTime<Utc>>) = sqlx::query_as(
        "INSERT INTO enrollment_tokens (token_hash, uses_left, expires_at, note, owner, trusted) \
         VALUES ($1, $2, now() + make_interval(secs => $3::float8), $4, $5, $6) \
         RETURNING id, expires_at",
    )
    .bind(token_hash)
    .bind(uses.map(|u| u as i32))
    .bind(expires_in_seconds.map(|s| s as f64))
    .bind(note)
    .bind(owner)
    .bind(trusted)
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
    let mut tx = super::begin(pool, None).await?;
    let standing: Option<(i64, i64, bool)> = sqlx::query_as(
        "SELECT t.id, (SELECT count(*) FROM workers w \
                       WHERE w.enrollment_token_id = t.id AND w.quarantined_at IS NOT NULL), \
                t.suspended_at IS NOT NULL \
         FROM enrollment_tokens t WHERE t.token_hash = $1 AND t.revoked_at IS NULL FOR UPDATE",
    )
    .bind(enrollment_hash)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some((id, quarantined, suspended)) = standing {
        if suspended || quarantined >= i64::from(max_quarantined) {
            tx.rollback().await?;
            return Err(Error::Forbidden(format!(
                "enrollment token {id} is suspended: {quarantined} of its workers are quarantined; \
                 ask the coordinator's admin for a new token"
            )));
        }
    }
    let enrollment: Option<(i64, String, bool)> = sqlx::query_as(
        "UPDATE enrollment_tokens SET uses_left = uses_left - 1 \
         WHERE token_hash = $1 AND revoked_at IS NULL \
           AND (expires_at IS NULL OR expires_at > now()) \
           AND (uses_left IS NULL OR uses_left > 0) \
         RETURNING id, COALESCE(owner, 'token-' || id), trusted",
    )
    .bind(enrollment_hash)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((enrollment, owner, trusted)) = enrollment else {
        tx.rollback().await?;
        return Err(Error::Unauthorized(
            "unknown, expired, revoked or used-up enrollment token".into(),
        ));
    };
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO workers (name, token_hash, enrollment_token_id, owner, trusted) \
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(name)
    .bind(worker_hash)
    .bind(enrollment)
    .bind(owner)
    .bind(trusted)
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
pub async fn list_workers(pool: &PgPool, ttl_seconds: u32) -> Result<Vec<WorkerInfo>> {
    let rows: Vec<WorkerRow> =
        sqlx::query_as(&format!("SELECT {WORKER_COLUMNS} FROM workers ORDER BY id"))
            .fetch_all(pool)
            .await?;
    let now = Utc::now();
    Ok(rows
        .into_iter()
        .map(|r| r.into_wire(now, ttl_seconds))
        .collect())
}

/// One worker.
pub async fn get_worker(pool: &PgPool, id: i64, ttl_seconds: u32) -> Result<WorkerInfo> {
    let row: Option<WorkerRow> = sqlx::query_as(&format!(
        "SELECT {WORKER_COLUMNS} FROM workers WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?;
    row.map(|r| r.into_wire(Utc::now(), ttl_seconds))
        .ok_or_else(|| Error::NotFound(format!("no worker {id}")))
}

const WORKER_COLUMNS: &str = "id, name, created_at, last_seen, speed, units_done, owner, \
     trusted, valid, invalid, forged, leases_total, leases_expired, streak, \
     units_failed AS failed_units, refuted, leases_idle, units_leased, units_idle, \
     verify_overruns, verify_seconds, quarantined_at, quarantine_reason, revoked_at, backend, \
     device";

#[derive(sqlx::FromRow)]
struct WorkerRow {
    id: i64,
    name: String,
    created_at: DateTime<Utc>,
    last_seen: Option<DateTime<Utc>>,
    speed: Option<f64>,
    units_done: i64,
    owner: String,
    trusted: bool,
    #[sqlx(flatten)]
    record: store_trust::RecordRow,
    verify_seconds: f64,
    quarantined_at: Option<DateTime<Utc>>,
    quarantine_reason: Option<String>,
    revoked_at: Option<DateTime<Utc>>,
    backend: Option<String>,
    device: Option<String>,
}

impl WorkerRow {
    /// The wire's worker, its state judged at `now` for leases of `ttl_seconds`.
    fn into_wire(self, now: DateTime<Utc>, ttl_seconds: u32) -> WorkerInfo {
        WorkerInfo {
            state: crate::domain::worker_state(
                self.last_seen,
                self.revoked_at.is_some(),
                now,
                ttl_seconds,
            ),
            backend: self.backend,
            device: self.device,
            id: self.id,
            name: self.name,
            created_at: self.created_at,
            last_seen: self.last_seen,
            arguments_per_second: self.speed,
            units_done: self.units_done,
            owner: self.owner,
            trusted: self.trusted,
            reputation: self.record.reputation(),
            verify_seconds: self.verify_seconds,
            quarantined_at: self.quarantined_at,
            quarantine_reason: self.quarantine_reason,
            revoked_at: self.revoked_at,
        }
    }
}

/// Records what worker `id` computes on, as its lease request says; writes only when that
/// changed, so the lease requests of a worker that says the same cost one indexed read.
pub async fn note_device(
    pool: &PgPool,
    id: i64,
    backend: Option<&str>,
    device: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "UPDATE workers SET backend = $2, device = $3 \
         WHERE id = $1 AND (backend IS DISTINCT FROM $2 OR device IS DISTINCT FROM $3)",
    )
    .bind(id)
    .bind(backend)
    .bind(device)
    .execute(pool)
    .await?;
    Ok(())
}
