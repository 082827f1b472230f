//! Storage of leases: which campaign a claim takes units from and how many (its statement is
//! in `claims.rs`), heartbeats, releases and the expiry pass. Locks are taken lease first,
//! then units (see the module above).

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
    // Most passes find nothing due (a claim runs one every 500 ms): one probe of the active
    // leases' expiry index then, before a transaction's three round trips.
    let due: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM leases WHERE state = 'active' AND expires_at <= now())",
    )
    .fetch_one(pool)
    .await?;
    if !due {
        return Ok(Expired::default());
    }
    let mut tx = super::begin(pool, None).await?;
    let due: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT id, deferred FROM leases WHERE state = 'active' AND expires_at <= now() \
         ORDER BY expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED",
    )
    .fetch_all(&mut *tx)
    .await?;
    if due.is_empty() {
        tx.rollback().await?;
        return Ok(Expired::default());
    }
    let deferred: Vec<i64> = due.iter().filter(|d| d.1).map(|d| d.0).collect();
    super::deferred::mark(&mut tx, &deferred).await?;
    let due: Vec<i64> = due.into_iter().map(|d| d.0).collect();
    let (returned, quarantined, workers): (i64, i64, Option<Vec<i64>>) = sqlx::query_as(
        "WITH due AS (SELECT unnest($2::int8[]) AS id), \
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
    .bind(&due)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
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
pub(super) struct ActiveCampaign {
    pub(super) id: i64,
    pub(super) function: String,
    pub(super) precision: i32,
    pub(super) format: Option<String>,
    pub(super) min_bits: i32,
    pub(super) unit_bits: i32,
    pub(super) replication: i32,
    pub(super) distinct_owners: bool,
    pub(super) units_total: i64,
    pub(super) trust_all_workers: bool,
    pub(super) min_weight: f64,
    pub(super) fresh_from: i32,
    pub(super) units_pending: i64,
}

#[derive(sqlx::FromRow)]
pub(super) struct ClaimedUnit {
    pub(super) lease_id: i64,
    fencing_token: i64,
    expires_at: DateTime<Utc>,
    /// Whether the lease's fresh units are left to be marked (`store::deferred`).
    pub(super) deferred: bool,
    pub(super) seq: i32,
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
    /// The claim lanes a campaign is cut into at its first claim (see `store::lane_count`).
    pub lanes: u32,
    /// Fewest fresh units a trusted claim leaves to be marked after it answers (0: none).
    pub defer_min: u32,
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
/// turns; another's run side by side in its claim lanes (`store::claims`), each on its own
/// stripe.
/// Concurrent claims never share a unit: candidate rows are locked `FOR UPDATE SKIP
/// LOCKED`, so a concurrent claim skips them and takes the next ones. Picking, creating the
/// lease and marking its units is one statement, so one transaction.
pub async fn claim_lease(
    pool: &PgPool,
    ask: &LeaseAsk,
    laps: &Laps,
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
        defer_min,
    } = *ask;
    // One pooled connection for both reads: under load each acquisition may wait its turn
    // behind result posts.
    let mut conn = pool.acquire().await?;
    let standing = standing(&mut conn, worker_id).await?;
    laps.lap("standing");
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
    .fetch_all(&mut *conn)
    .await?;
    drop(conn);
    laps.lap("campaigns");
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
            laps.lap("owner_room");
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
            defer_min,
        };
        // A claim's tally updates can deadlock with a result post's (each locks counters of
        // both campaign and binade); the loser was rolled back whole, so it is claimed again.
        let units = super::retry_transient(3, || claims::claim_run(pool, &c, &claim, laps)).await?;
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

/// The worker's [`Standing`]; a quarantined, revoked or unknown worker is refused. Its held
/// units are looked up by its active leases' ids: joined on them, a farm's fast-growing units
/// outran the statistics, and the planner, expecting no leased unit, read every leased unit
/// of the campaign for each claim (66,212 rows for 51 held; 80 ms of a claim at 200 GPUs).
async fn standing(conn: &mut sqlx::PgConnection, worker_id: i64) -> Result<Standing> {
    let standing: Option<Standing> = sqlx::query_as(
        "SELECT w.trusted, w.owner, w.quarantined_at IS NOT NULL AS quarantined, \
                w.quarantine_reason, \
                w.revoked_at IS NOT NULL AS revoked, w.speed, h.n AS held_units, \
                h.args AS held_arguments \
         FROM workers w, LATERAL ( \
             SELECT count(*) AS n, \
                    COALESCE(sum(u.count * COALESCE(k.weight, 1)), 0)::float8 AS args \
             FROM units u \
             LEFT JOIN campaign_costs k ON k.campaign_id = u.campaign_id \
                  AND k.negative = u.negative AND k.exponent = u.exponent \
             WHERE u.lease_id = ANY (ARRAY( \
                       SELECT l.id FROM leases l \
                       WHERE l.worker_id = w.id AND l.state = 'active')) \
               AND u.state = 'leased') h \
         WHERE w.id = $1",
    )
    .bind(worker_id)
    .fetch_optional(conn)
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
pub(super) struct Claim<'a> {
    pub(super) worker_id: i64,
    pub(super) owner: &'a str,
    pub(super) trusted: bool,
    /// Most units, and most work (weighted arguments) before the last unit.
    pub(super) want: i64,
    pub(super) work: f64,
    pub(super) ttl_seconds: u32,
    /// The share of a campaign's units one owner's settled results may reach before its
    /// replicas go to others first.
    pub(super) owner_share: f64,
    /// The units the worker computes at once, recorded for its speed's measurement.
    pub(super) slots: i32,
    /// The lanes a campaign is cut into at its first claim (`store::lane_count`).
    pub(super) lanes: u32,
    /// Fewest fresh units the claim leaves to be marked after it answers (0: none).
    pub(super) defer_min: u32,
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
pub(super) async fn draw_replicas(
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
/// trusted workers of either hold in their active leases of it now. Their units are looked up
/// by the leases' ids, as in [`standing`], which a stale plan otherwise turns into a scan of
/// every leased unit.
async fn owner_room(
    pool: &PgPool,
    worker_id: i64,
    campaign_id: i64,
    units_total: i64,
    share: f64,
) -> Result<i64> {
    let cap = ((units_total as f64 * share).floor() as i64).max(1);
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM units u \
         WHERE u.state = 'leased' AND u.lease_id = ANY (ARRAY( \
             SELECT l.id FROM workers me \
             JOIN workers w ON (w.owner = me.owner \
                                OR w.enrollment_token_id = me.enrollment_token_id) \
                           AND NOT w.trusted \
             JOIN leases l ON l.worker_id = w.id AND l.state = 'active' \
                          AND l.campaign_id = $2 \
             WHERE me.id = $1))",
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
     state, expires_at <= now() AS expired, deferred";

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
    if lease.as_ref().is_some_and(|l| l.deferred) {
        super::deferred::mark(&mut tx, &[lease_id]).await?;
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
