//! Deferred marking: a trusted worker's claim leaves its fresh units unmarked, and they are
//! marked leased right after it commits, or by whatever acts on the lease first.
//!
//! Why it is sound: a fresh unit lies past its lane's cursor, which only the claim holding
//! the lane's row can move, so once a claim has moved the cursor over it no other claim can
//! reach it (every source of a claim asks for a fence or a place past a cursor). Until it is
//! marked, such a unit reads `pending` with no fence, and the lease that holds it is the one
//! lease whose seqs hold it and whose `deferred` flag is set. Every path that acts on a
//! lease's units (a result post, a release, the expiry, a revocation or a purge) locks the
//! lease and calls [`mark`] first, so it sees the rows a marking claim would have left.

use super::*;

/// Marks, in `tx`, the fresh units of those `lease_ids` that are still deferred, as leased
/// under them. Waits for the leases' locks (a caller that holds them already goes through).
/// Returns how many units it marked.
pub(crate) async fn mark(tx: &mut Transaction<'_, Postgres>, lease_ids: &[i64]) -> Result<u64> {
    if lease_ids.is_empty() {
        return Ok(0);
    }
    let deferred = lock_deferred(tx, lease_ids, true).await?;
    if deferred.is_empty() {
        return Ok(0);
    }
    // The units' counters move on the claims' tally shards, in the claims' order (binade, then
    // campaign): on a post's own shards they would be taken in the other order than the
    // post's results take them (see the migration that made claim lanes).
    sqlx::query("SET LOCAL tmd.claim = 'on'")
        .execute(&mut **tx)
        .await?;
    let marked = mark_locked(tx, &deferred).await?;
    sqlx::query("SET LOCAL tmd.claim = 'off'")
        .execute(&mut **tx)
        .await?;
    Ok(marked)
}

/// Those of `lease_ids` still deferred, locked in id order: waiting for another transaction's
/// lock (`wait`), or skipping the leases another transaction holds.
async fn lock_deferred(
    tx: &mut Transaction<'_, Postgres>,
    lease_ids: &[i64],
    wait: bool,
) -> Result<Vec<i64>> {
    let skip = if wait { "" } else { " SKIP LOCKED" };
    Ok(sqlx::query_scalar(&format!(
        "SELECT id FROM leases WHERE id = ANY($1) AND deferred ORDER BY id FOR UPDATE{skip}"
    ))
    .bind(lease_ids)
    .fetch_all(&mut **tx)
    .await?)
}

/// The marking proper, for leases the caller locked: each deferred lease's units that are
/// still pending and never fenced, among its seqs, become leased under it, and the lease is
/// deferred no more.
async fn mark_locked(tx: &mut Transaction<'_, Postgres>, lease_ids: &[i64]) -> Result<u64> {
    // A lease's seqs are its run `[first_seq, first_seq + unit_count)` or its list; the units'
    // fresh index is walked from its first seq to its last, and a listed lease keeps only its
    // own seqs (another deferred lease's fresh units may lie between them).
    let marked = sqlx::query(
        "WITH l AS ( \
             UPDATE leases SET deferred = false \
             WHERE id = ANY($1) AND deferred \
             RETURNING id, campaign_id, fencing_token, first_seq, seqs, \
                       COALESCE(seqs[array_upper(seqs, 1)], first_seq + unit_count - 1) \
                           AS last_seq) \
         UPDATE units u SET state = 'leased', lease_id = l.id, fence = l.fencing_token, \
             reserved_for = NULL, reserved_at = NULL \
         FROM l \
         WHERE u.campaign_id = l.campaign_id AND u.state = 'pending' AND u.fence IS NULL \
           AND u.seq >= l.first_seq AND u.seq <= l.last_seq \
           AND (l.seqs IS NULL OR u.seq = ANY(l.seqs))",
    )
    .bind(lease_ids)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(marked)
}

/// Marks the deferred units of `lease_ids` in a transaction of its own, skipping a lease that
/// another transaction holds (a result post or the expiry, which marks it itself).
pub(crate) async fn mark_now(pool: &PgPool, lease_ids: &[i64]) -> Result<u64> {
    let mut tx = super::begin(
        pool,
        Some("BEGIN; SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL tmd.claim = 'on'"),
    )
    .await?;
    let free = lock_deferred(&mut tx, lease_ids, false).await?;
    let marked = if free.is_empty() {
        0
    } else {
        mark_locked(&mut tx, &free).await?
    };
    tx.commit().await?;
    Ok(marked)
}

/// Marks a claim's deferred units once it has answered; a failure is logged and left to the
/// next path that acts on the lease, or to the sweeper ([`mark_stale`]).
pub(crate) fn mark_after_claim(pool: &PgPool, lease_id: i64) {
    let pool = pool.clone();
    tokio::spawn(async move {
        let ids = [lease_id];
        let marked = super::retry_transient(3, || mark_now(&pool, &ids)).await;
        if let Err(e) = marked {
            tracing::warn!(lease.id = lease_id, error = %e, "marking a lease's units failed");
        }
    });
}

/// Leases deferred for longer than this are the sweeper's to mark: their claim's coordinator
/// stopped before it marked them, or its marking failed.
pub const STALE_SECONDS: f64 = 10.0;

/// Marks the units of leases left deferred for over [`STALE_SECONDS`] (at most 1,000 a pass).
pub async fn mark_stale(pool: &PgPool) -> Result<u64> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM leases WHERE deferred \
           AND created_at < now() - make_interval(secs => $1::float8) \
         ORDER BY created_at LIMIT 1000",
    )
    .bind(STALE_SECONDS)
    .fetch_all(pool)
    .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    mark_now(pool, &ids).await
}
