//! Lease claims: picking a campaign's next units for a worker and leasing them in one
//! statement, in the campaign's one turn (replicated campaigns) or in one of its claim lanes.

use super::deferred;
use super::leases::{draw_replicas, ActiveCampaign, Claim, ClaimedUnit};
use super::*;

/// This process's claims in turns, one at a time (see [`claim_in_turn`]).
static CLAIM_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Claims for `claim`'s worker at most `want` pending units of campaign `c` (up to `work`
/// weighted arguments), as a lease of `ttl_seconds`: its units in seq order, none when
/// another claim took them first. See `store::claim_lease` for the order units are taken in.
pub(super) async fn claim_run(
    pool: &PgPool,
    c: &ActiveCampaign,
    claim: &Claim<'_>,
    laps: &Laps,
) -> Result<Vec<ClaimedUnit>> {
    if c.replication > 1 {
        claim_in_turn(pool, c, claim, laps).await
    } else {
        claim_in_lanes(pool, c, claim, laps).await
    }
}

/// A replicated campaign's claim, in the campaign's one turn: its replicas are drawn
/// campaign-wide and a volunteer's fresh units come from anywhere in it.
async fn claim_in_turn(
    pool: &PgPool,
    c: &ActiveCampaign,
    claim: &Claim<'_>,
    laps: &Laps,
) -> Result<Vec<ClaimedUnit>> {
    // Claims of one campaign take turns (a transaction-scoped advisory lock, shared by
    // every coordinator on the database): two claims scanning the pending units at once
    // would each lock every other row the other skipped, so each kept only a few units and
    // released the rest, leaving the pool in fragments. One claim at a time takes the next
    // units; `SKIP LOCKED` still steps over units a result or an expiry is holding. Within
    // one process the turns are taken before a connection is: claims waiting on the
    // database's lock would hold the whole pool and starve the result posts.
    let _turn = CLAIM_TURN.lock().await;
    laps.lap("turn");
    let mut tx = begin_claim(pool).await?;
    laps.lap("connection");
    campaign_turn(&mut tx, c.id).await?;
    draw_replicas(&mut tx, c, claim.owner_share).await?;
    laps.lap("lock");
    // A volunteer takes fresh units from a random place; everyone else from where the last
    // claim in seq order stopped.
    let scattered = !claim.trusted && !c.trust_all_workers;
    let start = if scattered {
        rand::random::<u32>() as i64 % c.units_total.max(1)
    } else {
        i64::from(c.fresh_from)
    };
    let span = Span {
        lo: 0,
        hi: i32::MAX,
        start: start as i32,
        scattered,
        lane: None,
        defer: false,
    };
    let units = claim_units(&mut tx, c, claim, &span).await?;
    laps.lap("statement");
    tx.commit().await?;
    laps.lap("commit");
    Ok(units)
}

/// Waits, in `tx`, for campaign `id`'s turn (a transaction-scoped advisory lock shared by
/// every coordinator on the database): a replicated campaign's claims, and the first claim
/// that cuts a campaign into lanes.
async fn campaign_turn(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, id: i64) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(7313, ($1 % 2147483647)::int4)")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// An unreplicated campaign's claim, in one of its lanes ([`Lane`]): claims of the campaign
/// run side by side, each on its lane's stripe ([`take_lane`] says which). A lease does not
/// cross a stripe's end: each lane's last lease may be short.
async fn claim_in_lanes(
    pool: &PgPool,
    c: &ActiveCampaign,
    claim: &Claim<'_>,
    laps: &Laps,
) -> Result<Vec<ClaimedUnit>> {
    // As in a turn, claims wait for a lane before taking a connection; a process runs at
    // most as many at once as a campaign has lanes.
    let _permit = lane_permits(claim.lanes).acquire().await;
    laps.lap("turn");
    let mut tried = Vec::new();
    loop {
        let mut tx = begin_claim(pool).await?;
        laps.lap("connection");
        let lane = take_lane(&mut tx, c, claim, &tried).await?;
        laps.lap("lock");
        let Some(lane) = lane else {
            return Ok(Vec::new());
        };
        let span = Span {
            lo: lane.lo,
            hi: lane.hi,
            start: lane.fresh_from,
            scattered: false,
            lane: Some(lane.lane),
            // Not for a volunteer: what its owner holds is counted from marked units
            // (`owner_room`), and a burst of its claims must not outrun that count.
            defer: claim.defer_min > 0 && (claim.trusted || c.trust_all_workers),
        };
        let units = claim_units(&mut tx, c, claim, &span).await?;
        laps.lap("statement");
        if units.is_empty() {
            // Nothing to take here: what is left is held by a result or an expiry (it comes
            // back as returned work). With no fresh unit left in the stripe, its cursor goes
            // to the end, so the lane counts as open only for returned units.
            sqlx::query(
                "UPDATE claim_lanes SET fresh_from = hi \
                 WHERE campaign_id = $1 AND lane = $2 AND NOT EXISTS ( \
                     SELECT 1 FROM units WHERE campaign_id = $1 AND state = 'pending' \
                       AND fence IS NULL AND seq >= $3 AND seq < $4)",
            )
            .bind(c.id)
            .bind(lane.lane)
            .bind(lane.fresh_from)
            .bind(lane.hi)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            laps.lap("commit");
            tried.push(lane.lane);
            continue;
        }
        tx.commit().await?;
        laps.lap("commit");
        if let Some(head) = units.first().filter(|u| u.deferred) {
            deferred::mark_after_claim(pool, head.lease_id);
        }
        return Ok(units);
    }
}

/// The claims one process runs at once in lanes (the first claim's lane count sizes it).
static LANE_PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();

fn lane_permits(lanes: u32) -> &'static tokio::sync::Semaphore {
    LANE_PERMITS.get_or_init(|| tokio::sync::Semaphore::new(lanes.clamp(1, MAX_LANES) as usize))
}

/// Most lanes a campaign is cut into.
pub const MAX_LANES: u32 = 64;

/// Fewest units of a lane: a smaller campaign has fewer lanes (one below twice this), so
/// that leases cut short by a stripe's end stay rare.
pub const LANE_UNITS_MIN: i64 = 4096;

/// The lanes a campaign of `units` units is cut into, for a coordinator asking for `lanes`.
pub fn lane_count(units: i64, lanes: u32) -> i64 {
    i64::from(lanes.clamp(1, MAX_LANES)).min((units / LANE_UNITS_MIN).max(1))
}

/// A claim lane: a stripe `[lo, hi)` of a campaign's seqs with its own cursor of fresh
/// units; claims in different lanes take disjoint units, so they need not take turns.
#[derive(sqlx::FromRow, Debug, Clone, Copy)]
struct Lane {
    lane: i32,
    lo: i32,
    hi: i32,
    fresh_from: i32,
}

/// Locks, for the claim in `tx`, a lane of `c` with work (fresh units, or units back from
/// expired leases) not among `tried`: the first that no other claim holds, so that without
/// contention the campaign is leased in seq order as with one lane; when all are held, waits
/// for one of them (by the worker's id, so waiting claims spread over the lanes). None when
/// no lane has work. Makes the campaign's lanes at its first claim.
async fn take_lane(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    c: &ActiveCampaign,
    claim: &Claim<'_>,
    tried: &[i32],
) -> Result<Option<Lane>> {
    // Most claims find a lane free at once: one statement picks and locks it.
    let free: Option<Lane> = sqlx::query_as(
        "SELECT l.lane, l.lo, l.hi, l.fresh_from FROM claim_lanes l \
         WHERE l.campaign_id = $1 AND NOT (l.lane = ANY($2)) AND (l.fresh_from < l.hi OR EXISTS ( \
             SELECT 1 FROM units u \
             WHERE u.campaign_id = $1 AND u.state = 'pending' AND u.fence IS NOT NULL \
               AND u.replicas_done = 0 AND u.seq >= l.lo AND u.seq < l.hi)) \
         ORDER BY l.lane LIMIT 1 FOR UPDATE SKIP LOCKED",
    )
    .bind(c.id)
    .bind(tried)
    .fetch_optional(&mut **tx)
    .await?;
    if free.is_some() {
        return Ok(free);
    }
    let mut lanes = open_lanes(tx, c.id).await?;
    if lanes.is_empty() {
        make_lanes(tx, c, claim.lanes).await?;
        lanes = open_lanes(tx, c.id).await?;
    }
    let order: Vec<i32> = lanes
        .into_iter()
        .filter(|(lane, open)| *open && !tried.contains(lane))
        .map(|(lane, _)| lane)
        .collect();
    if order.is_empty() {
        return Ok(None);
    }
    let free: Option<Lane> = sqlx::query_as(
        "SELECT lane, lo, hi, fresh_from FROM claim_lanes \
         WHERE campaign_id = $1 AND lane = ANY($2) \
         ORDER BY array_position($2, lane) LIMIT 1 FOR UPDATE SKIP LOCKED",
    )
    .bind(c.id)
    .bind(&order)
    .fetch_optional(&mut **tx)
    .await?;
    if free.is_some() {
        return Ok(free);
    }
    Ok(sqlx::query_as(
        "SELECT lane, lo, hi, fresh_from FROM claim_lanes \
         WHERE campaign_id = $1 AND lane = $2 FOR UPDATE",
    )
    .bind(c.id)
    .bind(order[claim.worker_id.rem_euclid(order.len() as i64) as usize])
    .fetch_optional(&mut **tx)
    .await?)
}

/// Every lane of campaign `id`, and whether it has work: fresh units left in its stripe, or
/// units back from expired leases.
async fn open_lanes(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    id: i64,
) -> Result<Vec<(i32, bool)>> {
    Ok(sqlx::query_as(
        "SELECT l.lane, l.fresh_from < l.hi OR EXISTS ( \
                    SELECT 1 FROM units u \
                    WHERE u.campaign_id = $1 AND u.state = 'pending' AND u.fence IS NOT NULL \
                      AND u.replicas_done = 0 AND u.seq >= l.lo AND u.seq < l.hi) \
         FROM claim_lanes l WHERE l.campaign_id = $1 ORDER BY l.lane",
    )
    .bind(id)
    .fetch_all(&mut **tx)
    .await?)
}

/// Cuts campaign `c` into [`lane_count`] lanes of about equal units, each starting at the
/// campaign's own cursor where it lies in the stripe (a campaign claimed in one turn before).
/// In the campaign's turn, so two first claims cannot cut it twice.
async fn make_lanes(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    c: &ActiveCampaign,
    lanes: u32,
) -> Result<()> {
    campaign_turn(tx, c.id).await?;
    let n = lane_count(c.units_total, lanes);
    sqlx::query(
        "INSERT INTO claim_lanes (campaign_id, lane, lo, hi, fresh_from) \
         SELECT $1, i, s.lo, s.hi, GREATEST(s.lo, LEAST(s.hi, c.fresh_from)) \
         FROM campaigns c, generate_series(0, $2 - 1) AS i, LATERAL ( \
             SELECT CASE WHEN i = 0 THEN 0 ELSE (i * $3 / $2)::int4 END AS lo, \
                    CASE WHEN i = $2 - 1 THEN 2147483647 ELSE ((i + 1) * $3 / $2)::int4 END \
                        AS hi) s \
         WHERE c.id = $1 AND NOT EXISTS (SELECT 1 FROM claim_lanes WHERE campaign_id = $1)",
    )
    .bind(c.id)
    .bind(n)
    .bind(c.units_total)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Where a claim takes its units: returned and fresh units of seqs in `[lo, hi)`, fresh ones
/// from `start` (and, `scattered`, before it too); the cursor it moves is the lane's, or the
/// campaign's where `lane` is None.
struct Span {
    lo: i32,
    hi: i32,
    start: i32,
    scattered: bool,
    lane: Option<i32>,
    /// Whether the claim leaves its fresh units to be marked after it commits.
    defer: bool,
}

/// A claim's transaction. Custom plans: the claim's best plan depends on its size (a
/// one-unit calibration or thousands of units), and a generic plan made without it ran a
/// 20,000-unit claim on a 4-million-unit table in 1.05-1.10 s against 0.50-0.54 s custom.
/// `tmd.claim` puts its units' counters on the claims' own tally shards, so that it never
/// waits on a result post that waits on it (the migration that made lanes says how). No JIT
/// (see `store::session_options`), whoever made the pool.
async fn begin_claim(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    super::begin(
        pool,
        Some(
            "BEGIN; SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL tmd.claim = 'on'; \
             SET LOCAL jit = off",
        ),
    )
    .await
}

/// Picks, locks and leases the units of `claim` in `span` of campaign `c`, in `tx`.
async fn claim_units(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    c: &ActiveCampaign,
    claim: &Claim<'_>,
    span: &Span,
) -> Result<Vec<ClaimedUnit>> {
    let keys = vec![
        format!("o:{}", claim.owner),
        format!("w{}", claim.worker_id),
    ];
    // Each source reads its next units (with what the lease tells of them) from its partial
    // index; `ahead` lists them in the order they are taken (reserved, returned, fresh from
    // `start`, then fresh before it for a scattered claim), `within` keeps those the lease's
    // units and work reach, `picked` locks them one by one by key (a lookup per unit whatever
    // the plan). Locked rows not kept are released at the end of the statement. The fresh
    // cursor moved is the lane's ($12 its number) or, with no lane ($12 = -1), the campaign's.
    // The campaign's first claim also says when its work began, for the ETA's pace (a campaign
    // may wait long after its creation, and that wait is no measure of its workers' speed); a
    // lane's claim leaves the campaign's row alone after that.
    // A deferring claim ($13) neither locks nor marks its fresh units: past the lane's cursor,
    // which it holds, no other claim reaches them; the lease is marked `deferred` (see
    // `store::deferred`). A claim of fewer fresh units ($14) marks them itself: deferring saves
    // it little.
    let mut units: Vec<ClaimedUnit> = sqlx::query_as(
        "WITH reserved AS ( \
             SELECT id, seq, 1 AS src, negative, exponent, first, count FROM units \
             WHERE campaign_id = $1 AND state = 'pending' AND reserved_for = ANY($6) \
             ORDER BY seq LIMIT $2), \
         returned AS ( \
             SELECT id, seq, 2 AS src, negative, exponent, first, count FROM units \
             WHERE campaign_id = $1 AND state = 'pending' AND fence IS NOT NULL \
               AND replicas_done = 0 AND reserved_for IS NULL AND seq >= $10 AND seq < $11 \
             ORDER BY seq LIMIT $2), \
         fresh AS ( \
             SELECT id, seq, 3 AS src, negative, exponent, first, count FROM units \
             WHERE campaign_id = $1 AND state = 'pending' AND fence IS NULL AND seq >= $7 \
               AND seq < $11 \
             ORDER BY seq LIMIT $2), \
         wrapped AS ( \
             SELECT id, seq, 4 AS src, negative, exponent, first, count FROM units \
             WHERE $8 AND campaign_id = $1 AND state = 'pending' AND fence IS NULL \
               AND seq < $7 \
             ORDER BY seq LIMIT $2), \
         ahead AS ( \
             SELECT a.*, a.count * COALESCE(k.weight, 1) AS work \
             FROM (SELECT * FROM reserved UNION ALL SELECT * FROM returned \
                   UNION ALL SELECT * FROM fresh UNION ALL SELECT * FROM wrapped) a \
             LEFT JOIN campaign_costs k ON k.campaign_id = $1 \
                  AND k.negative = a.negative AND k.exponent = a.exponent), \
         within AS ( \
             SELECT id, seq, src, negative, exponent, first, count FROM ( \
                 SELECT id, seq, src, negative, exponent, first, count, \
                        sum(work) OVER (ORDER BY src, seq) - work AS before, \
                        row_number() OVER (ORDER BY src, seq) AS n \
                 FROM ahead) t \
             WHERE before < $5 AND n <= $2), \
         d AS ( \
             SELECT $13 AND count(*) FILTER (WHERE src = 3) >= $14 AS fresh_later FROM within), \
         picked AS ( \
             SELECT within.* FROM d, within, LATERAL ( \
                 SELECT 1 FROM units \
                 WHERE units.id = within.id AND units.state = 'pending' \
                 FOR UPDATE SKIP LOCKED) p \
             WHERE NOT (d.fresh_later AND within.src = 3) \
             UNION ALL \
             SELECT within.* FROM d, within WHERE d.fresh_later AND src = 3), \
         l AS ( \
             INSERT INTO leases (worker_id, campaign_id, first_seq, unit_count, seqs, \
                                 expires_at, deferred) \
             SELECT $3, $1, min(seq), count(*), \
                    CASE WHEN max(seq) - min(seq) + 1 = count(*) THEN NULL \
                         ELSE array_agg(seq ORDER BY seq) END, \
                    now() + make_interval(secs => $4::float8), \
                    (SELECT fresh_later FROM d) AND bool_or(src = 3) \
             FROM picked HAVING count(*) > 0 \
             RETURNING id, fencing_token, expires_at, deferred), \
         u AS ( \
             UPDATE units SET state = 'leased', lease_id = l.id, fence = l.fencing_token, \
                 reserved_for = NULL, reserved_at = NULL \
             FROM l, d, picked \
             WHERE units.id = picked.id AND NOT (d.fresh_later AND picked.src = 3)), \
         w AS ( \
             UPDATE workers SET leases_total = leases_total + 1, slots = $9, \
                 units_leased = units_leased + (SELECT count(*) FROM picked) \
             FROM l WHERE workers.id = $3), \
         moved AS ( \
             SELECT $12 < 0 AND NOT $8 AND EXISTS (SELECT 1 FROM picked WHERE src = 3) AS yes), \
         cursor AS ( \
             UPDATE campaigns SET fresh_from = CASE WHEN moved.yes THEN GREATEST(fresh_from, \
                     (SELECT max(seq) + 1 FROM picked WHERE src = 3)) ELSE fresh_from END, \
                 started_at = COALESCE(started_at, now()) \
             FROM moved \
             WHERE id = $1 AND EXISTS (SELECT 1 FROM picked) \
               AND (moved.yes OR started_at IS NULL)), \
         lane_cursor AS ( \
             UPDATE claim_lanes SET fresh_from = GREATEST(fresh_from, \
                 (SELECT max(seq) + 1 FROM picked WHERE src = 3)) \
             WHERE campaign_id = $1 AND lane = $12 \
               AND EXISTS (SELECT 1 FROM picked WHERE src = 3)) \
         SELECT l.id AS lease_id, l.fencing_token, l.expires_at, l.deferred, \
                p.seq, p.id, p.negative, p.exponent, p.first::text AS first, p.count \
         FROM l, picked p",
    )
    .bind(c.id)
    .bind(claim.want)
    .bind(claim.worker_id)
    .bind(f64::from(claim.ttl_seconds))
    .bind(claim.work)
    .bind(&keys)
    .bind(span.start)
    .bind(span.scattered)
    .bind(claim.slots)
    .bind(span.lo)
    .bind(span.hi)
    .bind(span.lane.unwrap_or(-1))
    .bind(span.defer)
    .bind(i64::from(claim.defer_min))
    .fetch_all(&mut **tx)
    .await?;
    // In seq order, as the lease lists them; sorted here rather than by the statement, where
    // sorting a 20,000-unit claim's rows took a tenth of it.
    units.sort_unstable_by_key(|u| u.seq);
    Ok(units)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_campaign_has_as_many_lanes_as_asked_where_each_holds_enough_units() {
        assert_eq!(lane_count(100, 8), 1);
        assert_eq!(lane_count(2 * LANE_UNITS_MIN - 1, 8), 1);
        assert_eq!(lane_count(2 * LANE_UNITS_MIN, 8), 2);
        assert_eq!(lane_count(58_640, 8), 8);
        assert_eq!(lane_count(10_485_760, 8), 8);
        assert_eq!(lane_count(10_485_760, 1), 1);
        assert_eq!(lane_count(10_485_760, 0), 1);
        assert_eq!(lane_count(10_485_760, 1000), i64::from(MAX_LANES));
    }
}
