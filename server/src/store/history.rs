//! Storage of what the dashboard shows of a campaign's life: its done work over time (the
//! sweeper's snapshots, thinned to one an hour into `campaign_history` once they are two hours
//! old), the time its binades took against the estimate's, and the queue of campaigns.

use super::*;
use tmd_wire::{BinadeTime, HistoryPoint};

/// Snapshots older than this are thinned into the history (the rate reads the last hour).
pub const SNAPSHOT_KEEP_SECONDS: f64 = 2.0 * 3600.0;

/// Moves the snapshots older than `older_than_seconds` (of campaign `id` only, or of every
/// campaign) into `campaign_history`: the first snapshot of each hour, unless that hour already
/// has a reading; the others are dropped. One statement, so the rows folded are exactly the rows
/// dropped even while snapshots are written beside it (two statements under READ COMMITTED
/// could drop a row the fold did not see).
pub(crate) async fn fold_snapshots<'e, E: sqlx::PgExecutor<'e>>(
    ex: E,
    id: Option<i64>,
    older_than_seconds: f64,
) -> Result<u64> {
    // The done fraction, with the work in all the snapshot recorded (older snapshots have
    // none: the campaign's work now stands in, which differs only if an estimate came since).
    let r = sqlx::query(
        "WITH gone AS ( \
             DELETE FROM campaign_snapshots \
             WHERE taken_at < now() - make_interval(secs => $2) \
               AND ($1::int8 IS NULL OR campaign_id = $1) \
             RETURNING campaign_id, taken_at, args_done, work_done, work_total) \
         INSERT INTO campaign_history (campaign_id, hour, taken_at, args_done, fraction_done) \
         SELECT DISTINCT ON (s.campaign_id, date_trunc('hour', s.taken_at)) \
                s.campaign_id, date_trunc('hour', s.taken_at), s.taken_at, s.args_done, \
                COALESCE(LEAST(1, s.work_done::float8 \
                    / NULLIF(COALESCE(s.work_total, w.total)::float8, 0)), 0) \
         FROM gone s LEFT JOIN LATERAL ( \
             SELECT sum(work_pending + work_leased + work_done + work_quarantined) AS total \
             FROM campaign_tallies t WHERE t.campaign_id = s.campaign_id) w ON true \
         ORDER BY s.campaign_id, date_trunc('hour', s.taken_at), s.taken_at \
         ON CONFLICT (campaign_id, hour) DO NOTHING",
    )
    .bind(id)
    .bind(older_than_seconds)
    .execute(ex)
    .await?;
    Ok(r.rows_affected())
}

/// Campaign `id`'s readings in time order: the hourly history, then the snapshots of the last
/// two hours, then its counters now (at its completion, when complete).
pub async fn history(pool: &PgPool, id: i64) -> Result<Vec<HistoryPoint>> {
    let rows: Vec<(DateTime<Utc>, f64, String)> = sqlx::query_as(
        "WITH w AS (SELECT sum(work_pending + work_leased + work_done + work_quarantined) \
                           AS total FROM campaign_tallies WHERE campaign_id = $1) \
         SELECT taken_at, fraction_done, args_done::text FROM campaign_history \
         WHERE campaign_id = $1 \
         UNION ALL \
         SELECT s.taken_at, COALESCE(LEAST(1, s.work_done::float8 \
                    / NULLIF(COALESCE(s.work_total, w.total)::float8, 0)), 0), \
                s.args_done::text \
         FROM campaign_snapshots s, w WHERE s.campaign_id = $1 \
         ORDER BY 1",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    let mut points: Vec<HistoryPoint> = rows
        .into_iter()
        .map(|(at, fraction_done, arguments_done)| HistoryPoint {
            at,
            fraction_done,
            arguments_done,
        })
        .collect();
    let t = tallies::campaign_tally(pool, id).await?;
    let (now, completed): (DateTime<Utc>, Option<DateTime<Utc>>) =
        sqlx::query_as("SELECT now(), completed_at FROM campaigns WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    let total = t.work_pending + t.work_leased + t.work_done + t.work_quarantined;
    points.push(HistoryPoint {
        at: completed.unwrap_or(now),
        fraction_done: if total > 0.0 {
            (t.work_done / total).min(1.0)
        } else {
            0.0
        },
        arguments_done: t.args_done,
    });
    Ok(points)
}

/// One binade's counters and estimate, as [`binade_times`] reads them.
#[derive(sqlx::FromRow)]
struct TimeRow {
    negative: bool,
    exponent: i32,
    arguments_total: String,
    arguments_done: String,
    seconds_per_argument: Option<f64>,
    seconds: f64,
    results: i64,
}

/// Campaign `id`'s binades in value order, each with the estimate's seconds (absent for a
/// weight from the engine's plan) and the seconds its results reported.
pub async fn binade_times(pool: &PgPool, id: i64) -> Result<Vec<BinadeTime>> {
    let rows: Vec<TimeRow> = sqlx::query_as(
        "SELECT b.negative, b.exponent, b.arguments_total, b.arguments_done, \
                k.seconds_per_argument, b.seconds, b.results \
         FROM ( \
             SELECT negative, exponent, \
                    (sum(args_pending) + sum(args_leased) + sum(args_done) \
                     + sum(args_quarantined))::text AS arguments_total, \
                    sum(args_done)::text AS arguments_done, \
                    sum(seconds)::float8 AS seconds, sum(results)::int8 AS results \
             FROM binade_tallies WHERE campaign_id = $1 GROUP BY negative, exponent) b \
         LEFT JOIN campaign_costs k ON k.campaign_id = $1 AND k.negative = b.negative \
              AND k.exponent = b.exponent \
         ORDER BY b.negative DESC, CASE WHEN b.negative THEN -b.exponent ELSE b.exponent END",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let total: f64 = r.arguments_total.parse().unwrap_or(0.0);
            let done: f64 = r.arguments_done.parse().unwrap_or(0.0);
            BinadeTime {
                negative: r.negative,
                exponent: r.exponent,
                estimated_seconds: r.seconds_per_argument.map(|s| s * total),
                estimated_seconds_done: r.seconds_per_argument.map(|s| s * done),
                arguments_total: r.arguments_total,
                arguments_done: r.arguments_done,
                measured_seconds: r.seconds,
                results: r.results,
            }
        })
        .collect())
}

/// The campaigns of the queue, active and paused, in the order the claim takes them: highest
/// priority first, then oldest (`store::leases::claim_lease`'s order).
pub async fn queue(pool: &PgPool) -> Result<Vec<Campaign>> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM campaigns WHERE state IN ('active', 'paused') \
         ORDER BY priority DESC, id LIMIT 100",
    )
    .fetch_all(pool)
    .await?;
    let mut all = Vec::with_capacity(ids.len());
    for id in ids {
        all.push(get_campaign(pool, id).await?);
    }
    Ok(all)
}

/// The estimate posted for campaign `id`, if any.
pub async fn estimate(pool: &PgPool, id: i64) -> Result<Option<tmd_wire::CostEstimate>> {
    let e: Option<Option<Json<tmd_wire::CostEstimate>>> =
        sqlx::query_scalar("SELECT estimate FROM campaigns WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?;
    Ok(e.flatten().map(|j| j.0))
}
