//! Storage of leases: the claim of a contiguous run of units, heartbeats, releases and the
//! expiry pass. Locks are taken lease first, then units (see the module above).

use super::*;
use crate::domain::trust::ReplicaPreference;

/// Expires the leases past their expiry: their unfinished units go back to the pool, with one
/// more attempt where the lease's worker (a trusted one) or owner (an untrusted one) had none on
/// the unit yet, or to quarantine at `max_attempts`: one worker cannot quarantine a unit by
/// letting it expire again and again. One statement, so one transaction; leases
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
         lost AS ( \
             SELECT u.id AS unit_id, ended.worker_id FROM units u \
             JOIN ended ON u.lease_id = ended.id WHERE u.state = 'leased'), \
         tried AS ( \
             INSERT INTO unit_attempts (unit_id, actor, worker_id, kind) \
             SELECT lost.unit_id, \
                    CASE WHEN w.trusted THEN 'w' || w.id ELSE 'o:' || w.owner END, \
                    lost.worker_id, 'expired' \
             FROM lost JOIN workers w ON w.id = lost.worker_id \
             ON CONFLICT (unit_id, actor) DO NOTHING RETURNING unit_id), \
         back AS ( \
             UPDATE units u SET \
                 state = CASE WHEN u.id IN (SELECT unit_id FROM tried) AND u.attempts + 1 >= $1 \
                              THEN 'quarantined' ELSE 'pending' END, \
                 hold_reason = CASE WHEN u.id IN (SELECT unit_id FROM tried) \
                                         AND u.attempts + 1 >= $1 \
                                    THEN 'failed or left to expire by ' || (u.attempts + 1) \
                                         || ' different workers or owners' \
                                    ELSE u.hold_reason END, \
                 attempts = u.attempts \
                            + CASE WHEN u.id IN (SELECT unit_id FROM tried) THEN 1 ELSE 0 END, \
                 lease_id = NULL \
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

/// This process's claims, one at a time (see [`claim_lease`]).
static CLAIM_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(sqlx::FromRow)]
struct ActiveCampaign {
    id: i64,
    function: String,
    precision: i32,
    format: Option<String>,
    min_bits: i32,
    unit_bits: i32,
    replication: i32,
    distinct_owners: bool,
    units_total: i64,
    trust_all_workers: bool,
    min_weight: f64,
    fresh_from: i32,
    units_pending: i64,
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

/// Who asks for a lease, and the server's limits on it.
#[derive(Debug, Clone, Copy)]
pub struct LeaseAsk {
    pub worker_id: i64,
    /// Whether the worker declared the formats it judges in (see [`claim_lease`]).
    pub formats: bool,
    pub ttl_seconds: u32,
    /// Largest share of a campaign one owner's untrusted workers may hold.
    pub owner_share: f64,
    /// Largest share of a campaign's pending units one lease takes.
    pub pending_share: f64,
    /// The units the worker computes at once (its `units_in_flight`).
    pub slots: u32,
    /// The claim lanes a campaign is cut into at its first claim (see [`lane_count`]).
    pub lanes: u32,
}

/// Leases pending units of the active campaign with the highest priority that has any, of
/// `size(unit_bits, speed, held)` units: the worker's measured speed and what it holds in its
/// active leases are read here, from the database, so every coordinator sharing it sizes
/// leases alike. `None` when there is no work, or when the worker holds its share already
/// (`size` is 0). A quarantined or revoked worker is refused. A worker that did not declare
/// `formats` (an older one, which would judge on an unbounded exponent) gets only
/// bare-precision campaigns.
///
/// A lease takes, in this order: the units the coordinator reserved for the worker's next
/// replicas ([`draw_replicas`]), units back from expired or released leases, and units never
/// leased (in seq order from the cursor of the claim's lane, or of a replicated campaign,
/// or from a random place for a volunteer of a replicated campaign, so that where a unit
/// lies says nothing of whether someone computed it). A replicated campaign's claims take
/// turns; another's run side by side in its lanes ([`Lane`]), each on its own stripe.
/// Concurrent claims never share a unit: candidate rows are locked `FOR UPDATE SKIP
/// LOCKED`, so a concurrent claim skips them and takes the next ones. Picking, creating the
/// lease and marking its units is one statement, so one transaction.
pub async fn claim_lease(
    pool: &PgPool,
    ask: &LeaseAsk,
    size: impl Fn(u32, Option<f64>, domain::Held, f64) -> domain::work::LeaseSize,
) -> Result<Option<Lease>> {
    let LeaseAsk {
        worker_id,
        formats,
        ttl_seconds,
        owner_share,
        pending_share,
        slots,
        lanes,
    } = *ask;
    let standing = standing(pool, worker_id).await?;
    let held = domain::Held {
        units: standing.held_units,
        arguments: standing.held_arguments,
    };
    // Pending units from the campaigns' counters (see `store::UNITS_WAITING`).
    let campaigns: Vec<ActiveCampaign> = sqlx::query_as(
        "SELECT * FROM ( \
             SELECT id, function, precision, format, min_bits, unit_bits, replication, \
                    distinct_owners, units_total, trust_all_workers, min_weight, fresh_from, \
                    priority, \
                    (SELECT COALESCE(sum(t.units_pending), 0)::int8 FROM campaign_tallies t \
                     WHERE t.campaign_id = c.id) AS units_pending \
             FROM campaigns c WHERE state = 'active' AND ($1 OR format IS NULL)) a \
         WHERE units_pending > 0 ORDER BY priority DESC, id LIMIT 32",
    )
    .bind(formats)
    .fetch_all(pool)
    .await?;
    for c in campaigns {
        let lease = size(c.unit_bits as u32, standing.speed, held, c.min_weight);
        let mut want = i64::from(lease.max_units);
        if want == 0 {
            return Ok(None);
        }
        want = want.min(domain::pending_cap(c.units_pending, pending_share));
        // A campaign that trusts every worker has no volunteers to hold apart.
        if !standing.trusted && !c.trust_all_workers {
            want = want.min(owner_room(pool, worker_id, c.id, c.units_total, owner_share).await?);
            if want == 0 {
                continue;
            }
        }
        let claim = Claim {
            worker_id,
            owner: &standing.owner,
            trusted: standing.trusted,
            want,
            ttl_seconds,
            work: lease.work,
            owner_share,
            slots: slots.clamp(1, 4096) as i32,
            lanes,
        };
        // A claim's tally updates can deadlock with a result post's (each locks counters of
        // both campaign and binade); the loser was rolled back whole, so it is claimed again.
        let units = super::retry_transient(3, || claim_run(pool, &c, &claim)).await?;
        let Some(head) = units.first() else {
            continue;
        };
        return Ok(Some(lease_of(c, head, &units, ttl_seconds)?));
    }
    Ok(None)
}

/// The claiming worker as a claim sees it: its standing and what it holds in active leases.
#[derive(sqlx::FromRow)]
struct Standing {
    trusted: bool,
    owner: String,
    quarantined: bool,
    quarantine_reason: Option<String>,
    revoked: bool,
    speed: Option<f64>,
    held_units: i64,
    held_arguments: f64,
}

/// The worker's [`Standing`]; a quarantined, revoked or unknown worker is refused.
async fn standing(pool: &PgPool, worker_id: i64) -> Result<Standing> {
    let standing: Option<Standing> = sqlx::query_as(
        "SELECT w.trusted, w.owner, w.quarantined_at IS NOT NULL AS quarantined, \
                w.quarantine_reason, \
                w.revoked_at IS NOT NULL AS revoked, w.speed, h.n AS held_units, \
                h.args AS held_arguments \
         FROM workers w, LATERAL ( \
             SELECT count(*) AS n, \
                    COALESCE(sum(u.count * COALESCE(k.weight, 1)), 0)::float8 AS args \
             FROM leases l JOIN units u ON u.lease_id = l.id \
             LEFT JOIN campaign_costs k ON k.campaign_id = u.campaign_id \
                  AND k.negative = u.negative AND k.exponent = u.exponent \
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
    Ok(standing)
}

/// A claim's worker and its budget.
struct Claim<'a> {
    worker_id: i64,
    owner: &'a str,
    trusted: bool,
    /// Most units, and most work (weighted arguments) before the last unit.
    want: i64,
    work: f64,
    ttl_seconds: u32,
    /// The share of a campaign's units one owner's settled results may reach before its
    /// replicas go to others first.
    owner_share: f64,
    /// The units the worker computes at once, recorded for its speed's measurement.
    slots: i32,
    /// The lanes a campaign is cut into at its first claim ([`lane_count`]).
    lanes: u32,
}

/// Claims for `claim`'s worker at most `want` pending units of campaign `c` (up to `work`
/// weighted arguments), as a lease of `ttl_seconds`: its units in seq order, none when
/// another claim took them first. See [`claim_lease`] for the order units are taken in.
async fn claim_run(
    pool: &PgPool,
    c: &ActiveCampaign,
    claim: &Claim<'_>,
) -> Result<Vec<ClaimedUnit>> {
    if c.replication > 1 {
        claim_in_turn(pool, c, claim).await
    } else {
        claim_in_lanes(pool, c, claim).await
    }
}

/// A replicated campaign's claim, in the campaign's one turn: its replicas are drawn
/// campaign-wide and a volunteer's fresh units come from anywhere in it.
async fn claim_in_turn(
    pool: &PgPool,
    c: &ActiveCampaign,
    claim: &Claim<'_>,
) -> Result<Vec<ClaimedUnit>> {
    // Claims of one campaign take turns (a transaction-scoped advisory lock, shared by
    // every coordinator on the database): two claims scanning the pending units at once
    // would each lock every other row the other skipped, so each kept only a few units and
    // released the rest, leaving the pool in fragments. One claim at a time takes the next
    // units; `SKIP LOCKED` still steps over units a result or an expiry is holding. Within
    // one process the turns are taken before a connection is: claims waiting on the
    // database's lock would hold the whole pool and starve the result posts.
    let _turn = CLAIM_TURN.lock().await;
    let mut tx = begin_claim(pool).await?;
    sqlx::query("SELECT pg_advisory_xact_lock(7313, ($1 % 2147483647)::int4)")
        .bind(c.id)
        .execute(&mut *tx)
        .await?;
    draw_replicas(&mut tx, c, claim.owner_share).await?;
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
    };
    let units = claim_units(&mut tx, c, claim, &span).await?;
    commit_claim(tx, c, !units.is_empty()).await?;
    Ok(units)
}

/// An unreplicated campaign's claim, in one of its lanes ([`Lane`]): claims of the campaign
/// run side by side, each on its lane's stripe ([`take_lane`] says which). A lease does not
/// cross a stripe's end: each lane's last lease may be short.
async fn claim_in_lanes(
    pool: &PgPool,
    c: &ActiveCampaign,
    claim: &Claim<'_>,
) -> Result<Vec<ClaimedUnit>> {
    // As in a turn, claims wait for a lane before taking a connection; a process runs at
    // most as many at once as a campaign has lanes.
    let _permit = lane_permits(claim.lanes).acquire().await;
    let mut tried = Vec::new();
    loop {
        let mut tx = begin_claim(pool).await?;
        let Some(lane) = take_lane(&mut tx, c, claim, &tried).await? else {
            return Ok(Vec::new());
        };
        let span = Span {
            lo: lane.lo,
            hi: lane.hi,
            start: lane.fresh_from,
            scattered: false,
            lane: Some(lane.lane),
        };
        let units = claim_units(&mut tx, c, claim, &span).await?;
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
            tried.push(lane.lane);
            continue;
        }
        commit_claim(tx, c, true).await?;
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
    sqlx::query("SELECT pg_advisory_xact_lock(7313, ($1 % 2147483647)::int4)")
        .bind(c.id)
        .execute(&mut **tx)
        .await?;
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
}

/// A claim's transaction. Custom plans: the claim's best plan depends on its size (a
/// one-unit calibration or thousands of units), and a generic plan made without it ran a
/// 20,000-unit claim on a 4-million-unit table in 1.05-1.10 s against 0.50-0.54 s custom.
/// `tmd.claim` puts its units' counters on the claims' own tally shards, so that it never
/// waits on a result post that waits on it (the migration that made lanes says how).
async fn begin_claim(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    super::begin(
        pool,
        Some("BEGIN; SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL tmd.claim = 'on'"),
    )
    .await
}

/// Commits a claim; when it `took` units, first marks when the campaign's work began.
async fn commit_claim(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    c: &ActiveCampaign,
    took: bool,
) -> Result<()> {
    if took {
        // When work began, for the ETA's pace: a campaign may wait long after its creation
        // (an estimate, a queue) and that wait is no measure of its workers' speed. A row
        // already started matches nothing and is not locked.
        sqlx::query("UPDATE campaigns SET started_at = now() WHERE id = $1 AND started_at IS NULL")
            .bind(c.id)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
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
    // Each source reads its next units by key from its partial index; `ahead` lists them in
    // the order they are taken (reserved, returned, fresh from `start`, then fresh before it
    // for a scattered claim), `within` keeps those the lease's units and work reach, `picked`
    // locks them one by one by key (a lookup per unit whatever the plan). Locked rows not
    // kept are released at the end of the statement. The fresh cursor moved is the lane's
    // ($12 its number) or, with no lane ($12 = -1), the campaign's.
    Ok(sqlx::query_as(
        "WITH reserved AS ( \
             SELECT id, seq, 1 AS src FROM units \
             WHERE campaign_id = $1 AND state = 'pending' AND reserved_for = ANY($6) \
             ORDER BY seq LIMIT $2), \
         returned AS ( \
             SELECT id, seq, 2 AS src FROM units \
             WHERE campaign_id = $1 AND state = 'pending' AND fence IS NOT NULL \
               AND replicas_done = 0 AND reserved_for IS NULL AND seq >= $10 AND seq < $11 \
             ORDER BY seq LIMIT $2), \
         fresh AS ( \
             SELECT id, seq, 3 AS src FROM units \
             WHERE campaign_id = $1 AND state = 'pending' AND fence IS NULL AND seq >= $7 \
               AND seq < $11 \
             ORDER BY seq LIMIT $2), \
         wrapped AS ( \
             SELECT id, seq, 4 AS src FROM units \
             WHERE $8 AND campaign_id = $1 AND state = 'pending' AND fence IS NULL \
               AND seq < $7 \
             ORDER BY seq LIMIT $2), \
         ahead AS ( \
             SELECT a.id, a.seq, a.src, \
                    u.count * COALESCE(k.weight, 1) AS work \
             FROM (SELECT * FROM reserved UNION ALL SELECT * FROM returned \
                   UNION ALL SELECT * FROM fresh UNION ALL SELECT * FROM wrapped) a \
             JOIN units u ON u.id = a.id \
             LEFT JOIN campaign_costs k ON k.campaign_id = u.campaign_id \
                  AND k.negative = u.negative AND k.exponent = u.exponent), \
         within AS ( \
             SELECT id, src FROM ( \
                 SELECT id, src, \
                        sum(work) OVER (ORDER BY src, seq) - work AS before, \
                        row_number() OVER (ORDER BY src, seq) AS n \
                 FROM ahead) t \
             WHERE before < $5 AND n <= $2), \
         picked AS ( \
             SELECT p.id, p.seq, within.src FROM within, LATERAL ( \
                 SELECT id, seq FROM units \
                 WHERE units.id = within.id AND units.state = 'pending' \
                 FOR UPDATE SKIP LOCKED) p), \
         l AS ( \
             INSERT INTO leases (worker_id, campaign_id, first_seq, unit_count, seqs, \
                                 expires_at) \
             SELECT $3, $1, min(seq), count(*), \
                    CASE WHEN max(seq) - min(seq) + 1 = count(*) THEN NULL \
                         ELSE array_agg(seq ORDER BY seq) END, \
                    now() + make_interval(secs => $4::float8) \
             FROM picked HAVING count(*) > 0 \
             RETURNING id, fencing_token, expires_at), \
         u AS ( \
             UPDATE units SET state = 'leased', lease_id = l.id, fence = l.fencing_token, \
                 reserved_for = NULL, reserved_at = NULL \
             FROM l, picked WHERE units.id = picked.id \
             RETURNING units.id, units.seq, units.negative, units.exponent, \
                       units.first::text AS first, units.count), \
         w AS ( \
             UPDATE workers SET leases_total = leases_total + 1, slots = $9, \
                 units_leased = units_leased + (SELECT count(*) FROM picked) \
             FROM l WHERE workers.id = $3), \
         cursor AS ( \
             UPDATE campaigns SET fresh_from = GREATEST(fresh_from, \
                 (SELECT max(seq) + 1 FROM picked WHERE src = 3)) \
             WHERE id = $1 AND $12 < 0 AND NOT $8 \
               AND EXISTS (SELECT 1 FROM picked WHERE src = 3)), \
         lane_cursor AS ( \
             UPDATE claim_lanes SET fresh_from = GREATEST(fresh_from, \
                 (SELECT max(seq) + 1 FROM picked WHERE src = 3)) \
             WHERE campaign_id = $1 AND lane = $12 \
               AND EXISTS (SELECT 1 FROM picked WHERE src = 3)) \
         SELECT l.id AS lease_id, l.fencing_token, l.expires_at, \
                u.id, u.negative, u.exponent, u.first, u.count \
         FROM l, u ORDER BY u.seq",
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
    .fetch_all(&mut **tx)
    .await?)
}

/// How long a worker counts as active after its last request: replicas are reserved only for
/// owners with a worker active, and a reservation whose owner has none any more is drawn again.
pub const ACTIVE_SECONDS: u32 = 600;

/// Chooses who computes the next replica of campaign `c`'s units that await one (a live
/// result, not settled, no reservation): for each, an owner (or worker, where the campaign does
/// not ask for distinct owners) drawn uniformly among those with a worker active now and no
/// result for the unit, preferring volunteers whose settled results are below `share` of the
/// campaign's units, then trusted owners ([`ReplicaPreference`]). The unit is then leased only to that owner's workers. The next claimant
/// in seq order no longer gets a replica because it asked first, and ten identities of one
/// owner are drawn as one: colluders cannot choose their partner's units.
async fn draw_replicas(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    c: &ActiveCampaign,
    share: f64,
) -> Result<()> {
    let waiting: Vec<(i64, Vec<String>)> = sqlx::query_as(
        "SELECT u.id, array_agg(DISTINCT CASE WHEN $2 THEN 'o:' || w.owner ELSE 'w' || w.id END) \
         FROM (SELECT id FROM units \
               WHERE campaign_id = $1 AND state = 'pending' AND replicas_done > 0 \
                 AND reserved_for IS NULL \
               ORDER BY id LIMIT 1000) u \
         JOIN results r ON r.unit_id = u.id JOIN workers w ON w.id = r.worker_id \
         GROUP BY u.id",
    )
    .bind(c.id)
    .bind(c.distinct_owners)
    .fetch_all(&mut **tx)
    .await?;
    if waiting.is_empty() {
        return Ok(());
    }
    let cap = ((c.units_total as f64 * share).floor() as i64).max(1);
    let active: Vec<(String, bool, bool)> = sqlx::query_as(
        "SELECT DISTINCT CASE WHEN $1 THEN 'o:' || w.owner ELSE 'w' || w.id END AS key, \
                w.trusted, \
                COALESCE((SELECT sum(settled) FROM owner_tallies o \
                          WHERE o.campaign_id = $2 AND o.owner = w.owner), 0) >= $3 AS over \
         FROM workers w LEFT JOIN enrollment_tokens t ON t.id = w.enrollment_token_id \
         WHERE w.last_seen > now() - make_interval(secs => $4::float8) \
           AND w.quarantined_at IS NULL AND w.revoked_at IS NULL AND t.suspended_at IS NULL",
    )
    .bind(c.distinct_owners)
    .bind(c.id)
    .bind(cap)
    .bind(f64::from(ACTIVE_SECONDS))
    .fetch_all(&mut **tx)
    .await?;
    let active: Vec<(String, ReplicaPreference)> = active
        .into_iter()
        .map(|(key, trusted, over)| {
            let pref = match (trusted, over) {
                (true, _) => ReplicaPreference::Trusted,
                (false, false) => ReplicaPreference::Volunteer,
                (false, true) => ReplicaPreference::OverShare,
            };
            (key, pref)
        })
        .collect();
    let (mut ids, mut keys) = (Vec::new(), Vec::new());
    for (unit, taken) in waiting {
        if let Some(key) = domain::trust::draw_replica(&active, &taken, rand::random()) {
            ids.push(unit);
            keys.push(key);
        }
    }
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE units u SET reserved_for = t.k, reserved_at = now() \
         FROM UNNEST($1::int8[], $2::text[]) AS t(id, k) \
         WHERE u.id = t.id AND u.id = ANY($1) AND u.state = 'pending' AND u.reserved_for IS NULL",
    )
    .bind(&ids)
    .bind(&keys)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Frees the reservations whose owner (or worker) has no worker active any more: the sweeper's
/// pass, and a quarantine's, after which the next claim draws them again. Returns how many.
pub async fn free_stale_reservations<'e, E: sqlx::PgExecutor<'e>>(db: E) -> Result<u64> {
    Ok(sqlx::query(
        "UPDATE units u SET reserved_for = NULL, reserved_at = NULL \
         WHERE u.state = 'pending' AND u.reserved_for IS NOT NULL \
           AND NOT EXISTS ( \
               SELECT 1 FROM workers w \
               WHERE w.last_seen > now() - make_interval(secs => $1::float8) \
                 AND w.quarantined_at IS NULL AND w.revoked_at IS NULL \
                 AND ('o:' || w.owner = u.reserved_for OR 'w' || w.id = u.reserved_for))",
    )
    .bind(f64::from(ACTIVE_SECONDS))
    .execute(db)
    .await?
    .rows_affected())
}

/// The lease of the claimed `units` of campaign `c` (`head` the first of them).
fn lease_of(
    c: ActiveCampaign,
    head: &ClaimedUnit,
    units: &[ClaimedUnit],
    ttl_seconds: u32,
) -> Result<Lease> {
    Ok(Lease {
        lease_id: head.lease_id,
        fencing_token: head.fencing_token,
        expires_at: head.expires_at,
        heartbeat_seconds: (ttl_seconds / 3).max(1),
        task: LeaseTask {
            campaign_id: c.id,
            function: c.function,
            precision: c.precision as u32,
            min_bits: c.min_bits as u32,
            format: c.format,
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
    })
}

/// How many more units of campaign `campaign_id` the workers of `worker_id`'s enrollment token
/// and owner may hold: `share` of the campaign's units (at least one) less what the not
/// trusted workers of either hold in their active leases of it now.
async fn owner_room(
    pool: &PgPool,
    worker_id: i64,
    campaign_id: i64,
    units_total: i64,
    share: f64,
) -> Result<i64> {
    let cap = ((units_total as f64 * share).floor() as i64).max(1);
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM workers me \
         JOIN workers w ON (w.owner = me.owner OR w.enrollment_token_id = me.enrollment_token_id) \
                       AND NOT w.trusted \
         JOIN leases l ON l.worker_id = w.id AND l.state = 'active' AND l.campaign_id = $2 \
         JOIN units u ON u.lease_id = l.id AND u.state = 'leased' \
         WHERE me.id = $1",
    )
    .bind(worker_id)
    .bind(campaign_id)
    .fetch_one(pool)
    .await?;
    Ok((cap - held).max(0))
}

/// Units pending or leased (to any worker) in the active campaigns: work that is not done
/// yet and could still come to a worker asking for it, through an expiry or a release. Paused
/// campaigns do not count: their units come back only when an admin resumes them, and a
/// daemon run with `--exit-when-idle` should not wait on a person for that.
///
/// Both parts follow partial indexes: `units_pending` for the pending units, and the active
/// leases (`leases_active_expiry`) with their units (`units_lease`) for the leased ones.
/// Without `formats`, only bare-precision campaigns count (all such a worker can get).
pub async fn units_outstanding(pool: &PgPool, formats: bool) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM units u JOIN campaigns c ON c.id = u.campaign_id \
                 WHERE c.state = 'active' AND u.state = 'pending' \
                   AND ($1 OR c.format IS NULL)) \
              + (SELECT count(*) FROM leases l \
                 JOIN units u ON u.lease_id = l.id AND u.state = 'leased' \
                 JOIN campaigns c ON c.id = l.campaign_id \
                 WHERE l.state = 'active' AND c.state = 'active' \
                   AND ($1 OR c.format IS NULL))",
    )
    .bind(formats)
    .fetch_one(pool)
    .await?)
}

pub(crate) const LEASE_COLUMNS: &str =
    "id, worker_id, campaign_id, fencing_token, first_seq, unit_count, seqs, \
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
    let lease = domain::lease_holder(lease, worker_id, fencing_token)?;
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

/// What a release did.
#[derive(Debug)]
pub struct Released {
    pub response: ReleaseResponse,
    /// Units were given back untouched (no result, no failure report): they count against the
    /// worker.
    pub idle: bool,
}

/// Ends a lease early: its unfinished units go back to the pool. Those in `failed` count one
/// attempt each, once per worker (an untrusted one: per owner) however often it reports them or
/// lets them expire (so one worker cannot quarantine a unit alone), and may be quarantined at
/// `max_attempts`; every unit reported counts against the worker (`units_failed`), every unit
/// given back without a report counts as idle (`units_idle`). A lease given back with no
/// result is taken off the worker's lease count, so lease/release cycles cannot dilute its
/// expired fraction.
pub async fn release_lease(
    pool: &PgPool,
    worker_id: i64,
    lease_id: i64,
    fencing_token: i64,
    failed: &[i64],
    max_attempts: u32,
) -> Result<Released> {
    let mut tx = super::begin(pool, None).await?;
    let lease = fetch_lease(&mut *tx, lease_id, true).await?;
    if let Err(e) = lease_refusal(lease.as_ref(), worker_id, fencing_token) {
        tx.rollback().await?;
        return Err(e);
    }
    let unit_count = lease.map_or(0, |l| l.unit_count);
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "WITH f AS ( \
             INSERT INTO unit_attempts (unit_id, actor, worker_id, kind) \
             SELECT u.id, CASE WHEN w.trusted THEN 'w' || w.id ELSE 'o:' || w.owner END, \
                    $4, 'failed' \
             FROM units u, workers w \
             WHERE u.lease_id = $1 AND u.state = 'leased' AND u.id = ANY($2) AND w.id = $4 \
             ON CONFLICT DO NOTHING RETURNING unit_id) \
         UPDATE units SET \
             attempts = attempts + CASE WHEN id IN (SELECT unit_id FROM f) THEN 1 ELSE 0 END, \
             state = CASE WHEN id IN (SELECT unit_id FROM f) AND attempts + 1 >= $3 \
                          THEN 'quarantined' ELSE 'pending' END, \
             hold_reason = CASE WHEN id IN (SELECT unit_id FROM f) AND attempts + 1 >= $3 \
                                THEN 'failed or left to expire by ' || (attempts + 1) \
                                     || ' different workers or owners' \
                                ELSE hold_reason END, \
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
    let given_back = rows.len() as i64 - reported;
    let untouched = rows.len() as i64 == i64::from(unit_count);
    // Units given back with neither a result nor a failure report were held for nothing: they
    // count against the worker (`units_idle`, and the release in `leases_idle`), so a hoarder
    // that posts one unit of each lease and gives the rest back is quarantined like one that
    // gives whole leases back (`trust::quarantine_reason`).
    let idle = given_back > 0;
    if reported > 0 || untouched || idle {
        sqlx::query(
            "UPDATE workers SET units_failed = units_failed + $2, \
                 leases_total = GREATEST(0, leases_total - CASE WHEN $3 THEN 1 ELSE 0 END), \
                 leases_idle = leases_idle + CASE WHEN $4 THEN 1 ELSE 0 END, \
                 units_idle = units_idle + $5 \
             WHERE id = $1",
        )
        .bind(worker_id)
        .bind(reported)
        .bind(untouched)
        .bind(idle)
        .bind(given_back)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    let quarantined = rows.iter().filter(|(s, _)| s == "quarantined").count() as u32;
    Ok(Released {
        response: ReleaseResponse {
            returned: rows.len() as u32 - quarantined,
            quarantined,
        },
        idle,
    })
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
