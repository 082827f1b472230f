//! Storage of the admin's remedies against hostile volunteers: quarantined units back to the
//! pool, enrollment tokens listed and revoked, workers' tokens revoked.

use crate::error::{Error, Result};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tmd_wire::EnrollmentTokenInfo;

/// Puts a campaign's quarantined units (all, or those in `unit_ids`) back in the pool with no
/// attempts and no failure reports; returns how many. Units that are not quarantined, or not
/// the campaign's, are left alone.
pub async fn requeue_units(
    pool: &PgPool,
    campaign_id: i64,
    unit_ids: Option<&[i64]>,
) -> Result<u64> {
    let mut tx = super::begin(pool, None).await?;
    let exists: Option<(i64,)> = sqlx::query_as("SELECT id FROM campaigns WHERE id = $1")
        .bind(campaign_id)
        .fetch_optional(&mut *tx)
        .await?;
    if exists.is_none() {
        tx.rollback().await?;
        return Err(Error::NotFound(format!("no campaign {campaign_id}")));
    }
    let ids: Vec<(i64,)> = sqlx::query_as(
        "UPDATE units SET state = 'pending', attempts = 0, hold_reason = NULL \
         WHERE campaign_id = $1 AND state = 'quarantined' \
           AND ($2::int8[] IS NULL OR id = ANY($2)) RETURNING id",
    )
    .bind(campaign_id)
    .bind(unit_ids)
    .fetch_all(&mut *tx)
    .await?;
    let ids: Vec<i64> = ids.into_iter().map(|(id,)| id).collect();
    sqlx::query("DELETE FROM unit_attempts WHERE unit_id = ANY($1)")
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
    crate::store::reopen_campaigns(&mut tx, &ids).await?;
    tx.commit().await?;
    Ok(ids.len() as u64)
}

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: i64,
    note: Option<String>,
    owner: Option<String>,
    trusted: bool,
    uses_left: Option<i32>,
    expires_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
    workers: i64,
    quarantined_workers: i64,
}

impl From<TokenRow> for EnrollmentTokenInfo {
    fn from(r: TokenRow) -> Self {
        EnrollmentTokenInfo {
            id: r.id,
            note: r.note,
            owner: r.owner,
            trusted: r.trusted,
            uses_left: r.uses_left.map(|u| u.max(0) as u32),
            expires_at: r.expires_at,
            created_at: r.created_at,
            revoked_at: r.revoked_at,
            workers: r.workers,
            quarantined_workers: r.quarantined_workers,
        }
    }
}

const TOKEN_QUERY: &str =
    "SELECT t.id, t.note, t.owner, t.trusted, t.uses_left, t.expires_at, t.created_at, \
     t.revoked_at, count(w.id) AS workers, \
     count(w.id) FILTER (WHERE w.quarantined_at IS NOT NULL) AS quarantined_workers \
     FROM enrollment_tokens t LEFT JOIN workers w ON w.enrollment_token_id = t.id";

/// Every enrollment token, newest first, with its workers counted.
pub async fn list_enrollment_tokens(pool: &PgPool) -> Result<Vec<EnrollmentTokenInfo>> {
    let rows: Vec<TokenRow> =
        sqlx::query_as(&format!("{TOKEN_QUERY} GROUP BY t.id ORDER BY t.id DESC"))
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Revokes an enrollment token: it registers no worker from now on (the workers it registered
/// keep their own tokens; revoke those one by one).
pub async fn revoke_enrollment_token(pool: &PgPool, id: i64) -> Result<EnrollmentTokenInfo> {
    let done = sqlx::query(
        "UPDATE enrollment_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1",
    )
    .bind(id)
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(Error::NotFound(format!("no enrollment token {id}")));
    }
    let row: TokenRow = sqlx::query_as(&format!("{TOKEN_QUERY} WHERE t.id = $1 GROUP BY t.id"))
        .bind(id)
        .fetch_one(pool)
        .await?;
    Ok(row.into())
}

/// Revokes a worker's token: it cannot authenticate any more, and its active leases end now
/// (their units go back to the pool, costing them no attempt). Its results stand: revoking is
/// retiring a machine, not distrusting it (that is quarantine).
pub async fn revoke_worker(pool: &PgPool, worker_id: i64) -> Result<()> {
    let mut tx = super::begin(pool, None).await?;
    let marked =
        sqlx::query("UPDATE workers SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1")
            .bind(worker_id)
            .execute(&mut *tx)
            .await?;
    if marked.rows_affected() == 0 {
        tx.rollback().await?;
        return Err(Error::NotFound(format!("no worker {worker_id}")));
    }
    let ended: Vec<i64> = sqlx::query_scalar(
        "UPDATE leases SET state = 'revoked', ended_at = now() \
         WHERE worker_id = $1 AND state = 'active' RETURNING id",
    )
    .bind(worker_id)
    .fetch_all(&mut *tx)
    .await?;
    // Units a claim left to be marked are marked first, so that they go back too.
    super::deferred::mark(&mut tx, &ended).await?;
    sqlx::query(
        "UPDATE units SET state = 'pending', lease_id = NULL \
         WHERE lease_id = ANY($1) AND state = 'leased'",
    )
    .bind(&ended)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}
