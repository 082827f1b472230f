//! Storage of a campaign's maintained counters: the units, arguments and work of
//! each state, HR-cases and results, kept by the triggers of
//! `migrations/20261124100001_work_tallies.sql` in the transactions that change them; the
//! binades' weights from a posted estimate; the rate snapshots the sweeper takes. Progress,
//! the dashboard and `/metrics` read these few rows instead of scanning units.

use super::*;
use crate::domain::work::{self, EstimateTarget, Weights};
use tmd_wire::{BinadeCoverage, CostEstimate};

/// A campaign's counters, its shards summed.
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct Tally {
    pub units_pending: i64,
    pub units_leased: i64,
    pub units_done: i64,
    pub units_quarantined: i64,
    pub args_pending: String,
    pub args_leased: String,
    pub args_done: String,
    pub args_quarantined: String,
    pub work_pending: f64,
    pub work_leased: f64,
    pub work_done: f64,
    pub work_quarantined: f64,
    pub hr_cases: i64,
    pub results: i64,
    pub results_void: i64,
    pub results_outvoted: i64,
    pub results_alone: i64,
    pub results_alone_untrusted: i64,
    pub results_refuted: i64,
    pub results_arguments: String,
}

const SUMS: &str = "COALESCE(sum(units_pending), 0)::int8 AS units_pending, \
     COALESCE(sum(units_leased), 0)::int8 AS units_leased, \
     COALESCE(sum(units_done), 0)::int8 AS units_done, \
     COALESCE(sum(units_quarantined), 0)::int8 AS units_quarantined, \
     COALESCE(sum(args_pending), 0)::text AS args_pending, \
     COALESCE(sum(args_leased), 0)::text AS args_leased, \
     COALESCE(sum(args_done), 0)::text AS args_done, \
     COALESCE(sum(args_quarantined), 0)::text AS args_quarantined, \
     COALESCE(sum(work_pending), 0)::float8 AS work_pending, \
     COALESCE(sum(work_leased), 0)::float8 AS work_leased, \
     COALESCE(sum(work_done), 0)::float8 AS work_done, \
     COALESCE(sum(work_quarantined), 0)::float8 AS work_quarantined, \
     COALESCE(sum(hr_cases), 0)::int8 AS hr_cases, \
     COALESCE(sum(results), 0)::int8 AS results, \
     COALESCE(sum(results_void), 0)::int8 AS results_void, \
     COALESCE(sum(results_outvoted), 0)::int8 AS results_outvoted, \
     COALESCE(sum(results_alone), 0)::int8 AS results_alone, \
     COALESCE(sum(results_alone_untrusted), 0)::int8 AS results_alone_untrusted, \
     COALESCE(sum(results_refuted), 0)::int8 AS results_refuted, \
     COALESCE(sum(results_arguments), 0)::text AS results_arguments";

/// One campaign's counters: at most 16 rows read.
pub async fn campaign_tally<'e, E: sqlx::PgExecutor<'e>>(ex: E, id: i64) -> Result<Tally> {
    Ok(sqlx::query_as(&format!(
        "SELECT {SUMS} FROM campaign_tallies WHERE campaign_id = $1"
    ))
    .bind(id)
    .fetch_one(ex)
    .await?)
}

/// Units per state over all campaigns, from the counters (for `/metrics`). The units of a
/// cancelled campaign that were not done are `cancelled`: none of them will be leased again,
/// and counted as pending they would hide the queue's real length.
pub async fn unit_state_counts(pool: &PgPool) -> Result<Vec<(String, i64)>> {
    let live = "campaign_id IN (SELECT id FROM campaigns WHERE state <> 'cancelled')";
    let t: Tally = sqlx::query_as(&format!("SELECT {SUMS} FROM campaign_tallies WHERE {live}"))
        .fetch_one(pool)
        .await?;
    let (cancelled, cancelled_done): (i64, i64) = sqlx::query_as(
        "SELECT COALESCE(sum(units_pending + units_leased + units_quarantined), 0)::int8, \
                COALESCE(sum(units_done), 0)::int8 \
         FROM campaign_tallies \
         WHERE campaign_id IN (SELECT id FROM campaigns WHERE state = 'cancelled')",
    )
    .fetch_one(pool)
    .await?;
    Ok(vec![
        ("cancelled".into(), cancelled),
        ("done".into(), t.units_done + cancelled_done),
        ("leased".into(), t.units_leased),
        ("pending".into(), t.units_pending),
        ("quarantined".into(), t.units_quarantined),
    ])
}

/// Pending units of campaign `id` that have a result and wait for their next replica, counted
/// on the two partial indexes that hold them (reserved for an owner, or not yet).
pub async fn awaiting_replica(pool: &PgPool, id: i64) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM units WHERE campaign_id = $1 AND state = 'pending' \
                 AND replicas_done > 0 AND reserved_for IS NULL) \
              + (SELECT count(*) FROM units WHERE campaign_id = $1 AND state = 'pending' \
                 AND reserved_for IS NOT NULL)",
    )
    .bind(id)
    .fetch_one(pool)
    .await?)
}

/// What keeps units from being leased over every campaign that is not cancelled: units
/// waiting for a replica and held units of active campaigns, pending units of paused ones.
pub async fn wait_counts(pool: &PgPool) -> Result<crate::domain::work::WaitCounts> {
    let (held, paused): (i64, i64) = sqlx::query_as(
        "SELECT COALESCE(sum(t.units_quarantined) FILTER (WHERE c.state = 'active'), 0)::int8, \
                COALESCE(sum(t.units_pending) FILTER (WHERE c.state = 'paused'), 0)::int8 \
         FROM campaign_tallies t JOIN campaigns c ON c.id = t.campaign_id",
    )
    .fetch_one(pool)
    .await?;
    // Campaign by campaign on the two partial indexes of such units (asked at every lease
    // request without work: never a scan of the units).
    let awaiting_replica: i64 = sqlx::query_scalar(
        "SELECT COALESCE(sum(a.n + b.n), 0)::int8 FROM campaigns c, \
           LATERAL (SELECT count(*) AS n FROM units WHERE campaign_id = c.id \
                    AND state = 'pending' AND replicas_done > 0 AND reserved_for IS NULL) a, \
           LATERAL (SELECT count(*) AS n FROM units WHERE campaign_id = c.id \
                    AND state = 'pending' AND reserved_for IS NOT NULL) b \
         WHERE c.state = 'active'",
    )
    .fetch_one(pool)
    .await?;
    Ok(crate::domain::work::WaitCounts {
        awaiting_replica,
        held,
        paused,
    })
}

/// One campaign's series of `/metrics`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CampaignSeries {
    pub id: i64,
    pub state: String,
    pub units_pending: i64,
    pub units_leased: i64,
    pub units_done: i64,
    pub units_quarantined: i64,
    pub arguments_done: f64,
    pub arguments_total: f64,
    pub hr_cases: i64,
}

/// The series of at most `limit` campaigns that are not cancelled, unfinished ones first, then
/// by priority and newest: a farm's own queue, with a bounded number of label values.
pub async fn campaign_series(pool: &PgPool, limit: i64) -> Result<Vec<CampaignSeries>> {
    Ok(sqlx::query_as(
        "SELECT c.id, c.state, \
                COALESCE(sum(t.units_pending), 0)::int8 AS units_pending, \
                COALESCE(sum(t.units_leased), 0)::int8 AS units_leased, \
                COALESCE(sum(t.units_done), 0)::int8 AS units_done, \
                COALESCE(sum(t.units_quarantined), 0)::int8 AS units_quarantined, \
                COALESCE(sum(t.args_done), 0)::float8 AS arguments_done, \
                c.arguments_total::float8 AS arguments_total, \
                COALESCE(sum(t.hr_cases), 0)::int8 AS hr_cases \
         FROM campaigns c LEFT JOIN campaign_tallies t ON t.campaign_id = c.id \
         WHERE c.state <> 'cancelled' \
         GROUP BY c.id \
         ORDER BY COALESCE(sum(t.units_done), 0) < c.units_total DESC, c.priority DESC, c.id DESC \
         LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// One worker's series of `/metrics`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct WorkerSeries {
    pub id: i64,
    pub units_done: i64,
    pub last_seen_seconds: f64,
    pub quarantined: bool,
}

/// The series of at most `limit` workers seen in the last hour, the most recently seen first.
pub async fn worker_series(pool: &PgPool, limit: i64) -> Result<Vec<WorkerSeries>> {
    Ok(sqlx::query_as(
        "SELECT id, units_done, extract(epoch FROM last_seen)::float8 AS last_seen_seconds, \
                quarantined_at IS NOT NULL AS quarantined \
         FROM workers WHERE last_seen > now() - interval '1 hour' \
         ORDER BY last_seen DESC, id LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// The counters of a new campaign's units, all pending, written by the transaction that
/// inserts them (there is no insert trigger on `units`): one row per binade, one per campaign.
pub(crate) async fn init(
    tx: &mut Transaction<'_, Postgres>,
    campaign_id: i64,
    units: &[UnitSpec],
) -> Result<()> {
    let mut per: std::collections::BTreeMap<(bool, i32), (i64, u128)> = Default::default();
    for u in units {
        let e = per.entry((u.negative, u.exponent)).or_default();
        e.0 += 1;
        e.1 += u128::from(u.count);
    }
    let neg: Vec<bool> = per.keys().map(|k| k.0).collect();
    let exp: Vec<i32> = per.keys().map(|k| k.1).collect();
    let n: Vec<i64> = per.values().map(|v| v.0).collect();
    let args: Vec<String> = per.values().map(|v| v.1.to_string()).collect();
    sqlx::query(
        "WITH b AS ( \
             INSERT INTO binade_tallies (campaign_id, negative, exponent, shard, units_pending, \
                                         args_pending) \
             SELECT $1, t.neg, t.exp, 0, t.n, t.a::numeric \
             FROM UNNEST($2::bool[], $3::int4[], $4::int8[], $5::text[]) AS t(neg, exp, n, a) \
             RETURNING units_pending, args_pending) \
         INSERT INTO campaign_tallies (campaign_id, shard, units_pending, args_pending, \
                                       work_pending) \
         SELECT $1, 0, COALESCE(sum(units_pending), 0), COALESCE(sum(args_pending), 0), \
                COALESCE(sum(args_pending), 0) FROM b",
    )
    .bind(campaign_id)
    .bind(&neg)
    .bind(&exp)
    .bind(&n)
    .bind(&args)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Each binade of a campaign with its arguments in all, in value order.
async fn binades<'e, E: sqlx::PgExecutor<'e>>(ex: E, id: i64) -> Result<Vec<(bool, i32, u128)>> {
    let rows: Vec<(bool, i32, String)> = sqlx::query_as(
        "SELECT negative, exponent, \
                (sum(args_pending) + sum(args_leased) + sum(args_done) \
                 + sum(args_quarantined))::text \
         FROM binade_tallies WHERE campaign_id = $1 GROUP BY negative, exponent \
         ORDER BY negative DESC, CASE WHEN negative THEN -exponent ELSE exponent END",
    )
    .bind(id)
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(n, e, a)| (n, e, a.parse().unwrap_or(0)))
        .collect())
}

/// Weighs campaign `id`'s binades by `estimate` (checked against the campaign, see
/// [`work::weigh`]; `estimate_format` is its format as the engine names it, `format` the
/// campaign's) and recounts the work of every state under the new weights, in one
/// transaction. Replaces an earlier estimate.
///
/// The counters' writers (every statement that changes a unit's state) wait while this runs,
/// for every campaign: the counters are locked against writes, so no transaction adds work
/// counted under the old weights after the recount. The recount reads the binades' counters,
/// not the units: a few thousand rows at most (a format's binades times 16 shards), so the
/// wait is milliseconds whatever the campaign's size. The rate's snapshots of the campaign
/// are dropped (work before and after would not compare), their hours kept in its history.
pub async fn set_estimate(
    pool: &PgPool,
    id: i64,
    format: &str,
    estimate: &CostEstimate,
    estimate_format: &str,
) -> Result<(Campaign, Weights)> {
    let campaign = get_campaign(pool, id).await?;
    let mut tx = super::begin(pool, None).await?;
    sqlx::query("LOCK TABLE campaign_tallies, binade_tallies IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    let binades = binades(&mut *tx, id).await?;
    let weights = work::weigh(
        &EstimateTarget {
            function: &campaign.function,
            format,
            min_bits: campaign.min_bits,
            binades: &binades,
        },
        estimate,
        estimate_format,
    )?;
    let neg: Vec<bool> = weights.binades.iter().map(|b| b.negative).collect();
    let exp: Vec<i32> = weights.binades.iter().map(|b| b.exponent).collect();
    let w: Vec<f64> = weights.binades.iter().map(|b| b.weight).collect();
    let spa: Vec<f64> = weights
        .binades
        .iter()
        .map(|b| b.seconds_per_argument)
        .collect();
    sqlx::query("DELETE FROM campaign_costs WHERE campaign_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO campaign_costs (campaign_id, negative, exponent, weight, \
                                     seconds_per_argument) \
         SELECT $1, * FROM UNNEST($2::bool[], $3::int4[], $4::float8[], $5::float8[])",
    )
    .bind(id)
    .bind(&neg)
    .bind(&exp)
    .bind(&w)
    .bind(&spa)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE campaigns SET estimate = $2, seconds_per_work = $3, min_weight = $4 \
         WHERE id = $1",
    )
    .bind(id)
    .bind(Json(estimate))
    .bind(weights.seconds_per_work)
    .bind(weights.min_weight)
    .execute(&mut *tx)
    .await?;
    // The history keeps their hours (as done fractions, which compare across weights), folded
    // before the recount so that a snapshot without its own work in all is read under the
    // weights it was taken with.
    super::history::fold_snapshots(&mut *tx, Some(id), -1.0).await?;
    recount_work(&mut tx, id).await?;
    let campaign = fetch_campaign(&mut *tx, id).await?;
    tx.commit().await?;
    Ok((campaign, weights))
}

/// Weighs a new campaign's binades by the plan's prediction (`domain::work::prior_weights`),
/// in the transaction that creates it: no measured seconds (`seconds_per_argument` NULL), and
/// the work of each state recounted under the weights. An estimate posted later replaces them.
pub(crate) async fn set_prior(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    id: i64,
    prior: &work::PriorWeights,
) -> Result<()> {
    let neg: Vec<bool> = prior.binades.iter().map(|b| b.0).collect();
    let exp: Vec<i32> = prior.binades.iter().map(|b| b.1).collect();
    let w: Vec<f64> = prior.binades.iter().map(|b| b.2).collect();
    sqlx::query(
        "INSERT INTO campaign_costs (campaign_id, negative, exponent, weight) \
         SELECT $1, * FROM UNNEST($2::bool[], $3::int4[], $4::float8[])",
    )
    .bind(id)
    .bind(&neg)
    .bind(&exp)
    .bind(&w)
    .execute(&mut **tx)
    .await?;
    sqlx::query("UPDATE campaigns SET min_weight = $2 WHERE id = $1")
        .bind(id)
        .bind(prior.min_weight)
        .execute(&mut **tx)
        .await?;
    recount_work(tx, id).await
}

/// The work of each state of campaign `id`, recounted from its binades' arguments under the
/// weights in `campaign_costs`; the campaign's shards fold into shard 0.
async fn recount_work(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, id: i64) -> Result<()> {
    sqlx::query(
        "WITH w AS ( \
             SELECT sum(b.args_pending * k.weight::numeric) AS p, \
                    sum(b.args_leased * k.weight::numeric) AS l, \
                    sum(b.args_done * k.weight::numeric) AS d, \
                    sum(b.args_quarantined * k.weight::numeric) AS q \
             FROM binade_tallies b JOIN campaign_costs k ON k.campaign_id = b.campaign_id \
                  AND k.negative = b.negative AND k.exponent = b.exponent \
             WHERE b.campaign_id = $1) \
         UPDATE campaign_tallies t SET \
             work_pending = CASE WHEN t.shard = 0 THEN COALESCE(w.p, 0) ELSE 0 END, \
             work_leased = CASE WHEN t.shard = 0 THEN COALESCE(w.l, 0) ELSE 0 END, \
             work_done = CASE WHEN t.shard = 0 THEN COALESCE(w.d, 0) ELSE 0 END, \
             work_quarantined = CASE WHEN t.shard = 0 THEN COALESCE(w.q, 0) ELSE 0 END \
         FROM w WHERE t.campaign_id = $1",
    )
    .bind(id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// What the progress shows of a campaign's estimate.
#[derive(Debug, Clone, Default)]
pub struct EstimateInfo {
    pub seconds_per_work: Option<f64>,
    pub backend: Option<String>,
    /// Weights from the engine's plan and no estimate.
    pub plan_weights: bool,
}

/// The estimate's scale and back end, if one was posted.
pub async fn estimate_info<'e, E: sqlx::PgExecutor<'e>>(ex: E, id: i64) -> Result<EstimateInfo> {
    let row: Option<(Option<f64>, Option<String>, bool)> = sqlx::query_as(
        "SELECT seconds_per_work, estimate->>'backend', \
                EXISTS (SELECT 1 FROM campaign_costs k WHERE k.campaign_id = c.id) \
         FROM campaigns c WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(ex)
    .await?;
    let (seconds_per_work, backend, weighed) = row.unwrap_or_default();
    Ok(EstimateInfo {
        plan_weights: weighed && seconds_per_work.is_none(),
        seconds_per_work,
        backend,
    })
}

/// The done work and arguments of campaign `id` at the start of the rate's window: the
/// oldest snapshot of the last hour, or the campaign's start (its first lease, nothing done
/// before it; its creation while none was claimed) when that is less than an hour ago; with
/// the window's length in seconds. `None`: no reading in the window.
pub async fn rate_base<'e, E: sqlx::PgExecutor<'e>>(
    ex: E,
    id: i64,
) -> Result<Option<(f64, f64, f64)>> {
    Ok(window_base(ex, id, 3600.0)
        .await?
        .map(|b| (b.work_done, b.args_done, b.seconds)))
}

/// A campaign's counters at the start of a window, and the window's length.
#[derive(Debug, Clone, Copy)]
pub struct WindowBase {
    pub work_done: f64,
    pub args_done: f64,
    /// Its costly work then (`domain::eta::costly_work`; absent in a snapshot older than
    /// that counter).
    pub costly_done: Option<f64>,
    /// The window's length in seconds.
    pub seconds: f64,
}

/// [`rate_base`] over the last `seconds` instead of the last hour (snapshots come about a
/// minute apart, so a window of a few minutes holds one or more), with the costly work of
/// the window's start.
pub async fn window_base<'e, E: sqlx::PgExecutor<'e>>(
    ex: E,
    id: i64,
    seconds: f64,
) -> Result<Option<WindowBase>> {
    #[allow(clippy::type_complexity)]
    let row: Option<(Option<f64>, Option<f64>, Option<f64>, Option<f64>)> = sqlx::query_as(
        "WITH c AS ( \
             SELECT id, COALESCE(started_at, created_at) AS began, \
                    COALESCE(started_at, created_at) > now() - make_interval(secs => $2) AS young \
             FROM campaigns WHERE id = $1) \
         SELECT CASE WHEN c.young THEN 0 ELSE s.work_done::float8 END, \
                CASE WHEN c.young THEN 0 ELSE s.args_done::float8 END, \
                CASE WHEN c.young THEN extract(epoch FROM now() - c.began)::float8 \
                     ELSE extract(epoch FROM now() - s.taken_at)::float8 END, \
                CASE WHEN c.young THEN 0 ELSE s.costly_done END \
         FROM c LEFT JOIN LATERAL ( \
             SELECT taken_at, work_done, args_done, costly_done FROM campaign_snapshots \
             WHERE campaign_id = c.id AND taken_at >= now() - make_interval(secs => $2) \
             ORDER BY taken_at LIMIT 1) s ON true",
    )
    .bind(id)
    .bind(seconds)
    .fetch_optional(ex)
    .await?;
    Ok(match row {
        Some((Some(work_done), Some(args_done), Some(seconds), costly_done)) => Some(WindowBase {
            work_done,
            args_done,
            costly_done,
            seconds,
        }),
        _ => None,
    })
}

/// Campaign `id`'s binades as the ETA reads them (`domain::eta`): arguments and units left
/// and done, and weight, from the binades' counters. O(binades).
pub async fn binade_work<'e, E: sqlx::PgExecutor<'e>>(
    ex: E,
    id: i64,
) -> Result<Vec<crate::domain::eta::BinadeWork>> {
    let rows: Vec<(f64, f64, f64, f64, f64)> = sqlx::query_as(
        "SELECT (sum(b.args_pending) + sum(b.args_leased))::float8, sum(b.args_done)::float8, \
                (sum(b.units_pending) + sum(b.units_leased))::float8, \
                sum(b.units_done)::float8, COALESCE(k.weight, 1)::float8 \
         FROM binade_tallies b LEFT JOIN campaign_costs k ON k.campaign_id = b.campaign_id \
              AND k.negative = b.negative AND k.exponent = b.exponent \
         WHERE b.campaign_id = $1 GROUP BY b.negative, b.exponent, k.weight",
    )
    .bind(id)
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(left, done, units_left, units_done, weight)| crate::domain::eta::BinadeWork {
                left,
                done,
                units_left,
                units_done,
                weight,
            },
        )
        .collect())
}

/// Takes a snapshot of each active campaign's done work whose latest is older than 50 s
/// (several coordinators sweeping add one a minute between them), and thins those older than
/// two hours into the campaign's hourly history (`store::history`) before dropping them.
/// O(campaigns), and each new snapshot's binade counters for its work over costly arguments
/// (`domain::eta`; read once a minute, off the result posts' path).
pub async fn snapshot(pool: &PgPool) -> Result<()> {
    let taken: Vec<(i64, chrono::DateTime<chrono::Utc>, i32)> = sqlx::query_as(
        "WITH s AS ( \
             INSERT INTO campaign_snapshots (campaign_id, work_done, args_done, work_total) \
             SELECT c.id, COALESCE(sum(t.work_done), 0), COALESCE(sum(t.args_done), 0), \
                    COALESCE(sum(t.work_pending + t.work_leased + t.work_done \
                                 + t.work_quarantined), 0) \
             FROM campaigns c LEFT JOIN campaign_tallies t ON t.campaign_id = c.id \
             WHERE c.state = 'active' AND NOT EXISTS ( \
                 SELECT 1 FROM campaign_snapshots s \
                 WHERE s.campaign_id = c.id AND s.taken_at > now() - interval '50 seconds') \
             GROUP BY c.id ON CONFLICT DO NOTHING \
             RETURNING campaign_id, taken_at) \
         SELECT s.campaign_id, s.taken_at, c.unit_bits FROM s JOIN campaigns c \
              ON c.id = s.campaign_id",
    )
    .fetch_all(pool)
    .await?;
    for (id, at, unit_bits) in taken {
        let binades = binade_work(pool, id).await?;
        let work = crate::domain::eta::costly_work(&binades, 2f64.powi(unit_bits));
        sqlx::query(
            "UPDATE campaign_snapshots SET costly_done = $3 \
             WHERE campaign_id = $1 AND taken_at = $2",
        )
        .bind(id)
        .bind(at)
        .bind(work.done)
        .execute(pool)
        .await?;
    }
    super::history::fold_snapshots(pool, None, super::history::SNAPSHOT_KEEP_SECONDS).await?;
    Ok(())
}

/// At most this many binades per coverage page.
pub const COVERAGE_PAGE_MAX: i64 = 1024;

/// A page of a campaign's coverage by binade, in value order (negative binades first,
/// largest magnitude first; then positive ones, smallest first), from the binades' counters:
/// `limit` binades from the `offset`-th, with the number of binades in all.
pub async fn coverage_page(
    pool: &PgPool,
    campaign_id: i64,
    offset: i64,
    limit: i64,
) -> Result<(Vec<BinadeCoverage>, i64)> {
    #[derive(sqlx::FromRow)]
    struct Row {
        negative: bool,
        exponent: i32,
        units_total: i64,
        units_done: i64,
        units_leased: i64,
        units_quarantined: i64,
        arguments_total: String,
        arguments_done: String,
        weight: f64,
        binades: i64,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT b.negative, b.exponent, b.units_total, b.units_done, b.units_leased, \
                b.units_quarantined, b.arguments_total, b.arguments_done, \
                COALESCE(k.weight, 1) AS weight, count(*) OVER () AS binades \
         FROM ( \
             SELECT negative, exponent, \
                    sum(units_pending + units_leased + units_done + units_quarantined)::int8 \
                        AS units_total, \
                    sum(units_done)::int8 AS units_done, sum(units_leased)::int8 AS units_leased, \
                    sum(units_quarantined)::int8 AS units_quarantined, \
                    (sum(args_pending) + sum(args_leased) + sum(args_done) \
                     + sum(args_quarantined))::text AS arguments_total, \
                    sum(args_done)::text AS arguments_done \
             FROM binade_tallies WHERE campaign_id = $1 GROUP BY negative, exponent) b \
         LEFT JOIN campaign_costs k ON k.campaign_id = $1 AND k.negative = b.negative \
              AND k.exponent = b.exponent \
         ORDER BY b.negative DESC, CASE WHEN b.negative THEN -b.exponent ELSE b.exponent END \
         OFFSET $2 LIMIT $3",
    )
    .bind(campaign_id)
    .bind(offset.max(0))
    .bind(limit.clamp(1, COVERAGE_PAGE_MAX))
    .fetch_all(pool)
    .await?;
    let total = match rows.first() {
        Some(r) => r.binades,
        None => {
            sqlx::query_scalar(
                "SELECT count(DISTINCT (negative, exponent)) FROM binade_tallies \
                 WHERE campaign_id = $1",
            )
            .bind(campaign_id)
            .fetch_one(pool)
            .await?
        }
    };
    Ok((
        rows.into_iter()
            .map(|r| BinadeCoverage {
                negative: r.negative,
                exponent: r.exponent,
                units_total: r.units_total,
                units_done: r.units_done,
                units_leased: r.units_leased,
                units_quarantined: r.units_quarantined,
                arguments_total: r.arguments_total,
                arguments_done: r.arguments_done,
                weight: r.weight,
            })
            .collect(),
        total,
    ))
}
