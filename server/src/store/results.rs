//! Storage of unit results: the unlocked first judgement of posts (before their MPFR
//! verification) and the recording of many units' results in one transaction, with multi-row
//! statements. A single post is a batch of one through the same code.
//!
//! Lock order, as everywhere in `store`: the batch's leases (in id order), then its units (in
//! id order), then workers' rows (in id order, in `store_trust::apply_records`), then the
//! campaigns that may have just completed (in id order).

use crate::domain::trust::{self, ReplicationPolicy};
use crate::domain::{self, Judgement, LeaseRow, PriorResult, UnitRow};
use crate::error::{Error, Result};
use crate::store;
use crate::store::trust as store_trust;
use sqlx::types::Json;
use sqlx::PgPool;
use std::collections::{BTreeSet, HashMap};
use tmd_wire::{HrCase, ResultAccepted, SkippedRun, UnitResult, UnitSpec};

/// A posted result, as the first judgement sees it.
pub struct Posted<'a> {
    pub lease_id: i64,
    pub unit_id: i64,
    pub result: &'a UnitResult,
}

/// What the verifier needs to know about a post that passed the first check.
pub struct PostContext {
    pub judgement: Judgement,
    pub function: String,
    pub precision: u32,
    /// The campaign's named format; `None` for a bare precision.
    pub format: Option<String>,
    pub min_bits: u32,
    pub unit: UnitSpec,
}

fn spec_of(u: &UnitRow) -> Result<UnitSpec> {
    Ok(UnitSpec {
        negative: u.negative,
        exponent: u.exponent,
        first: u
            .first
            .parse()
            .map_err(|_| Error::Internal(format!("unit {} has first {}", u.id, u.first)))?,
        count: u.count as u64,
    })
}

/// Judges posts without locking (four queries for any number of them), so the slow MPFR
/// verification can run outside any transaction; [`record_results`] judges again under locks.
/// A quarantined worker's posts never reach MPFR, even under a lease that merely expired.
pub async fn precheck(
    pool: &PgPool,
    worker_id: i64,
    posts: &[Posted<'_>],
) -> Result<Vec<Result<PostContext>>> {
    // One read-only transaction without sequential scans and with generic plans, as in
    // `record_results`: a plan prepared while `results` was small (a seq scan) would stay
    // cached as it grows, and every batch passes here (its skipped runs are checked even when
    // it has no case).
    let mut tx = pool.begin_with(store::HOT_BEGIN_READ_ONLY).await?;
    let standing: Option<(Option<String>,)> = sqlx::query_as(
        "SELECT quarantine_reason FROM workers WHERE id = $1 AND quarantined_at IS NOT NULL",
    )
    .bind(worker_id)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some((reason,)) = standing {
        return Ok(posts
            .iter()
            .map(|_| Err(store_trust::quarantined(worker_id, reason.as_deref())))
            .collect());
    }
    let lease_ids: Vec<i64> = posts.iter().map(|p| p.lease_id).collect();
    let unit_ids: Vec<i64> = posts.iter().map(|p| p.unit_id).collect();
    let leases: Vec<LeaseRow> = sqlx::query_as(&format!(
        "SELECT {} FROM leases WHERE id = ANY($1)",
        store::LEASE_COLUMNS
    ))
    .bind(&lease_ids)
    .fetch_all(&mut *tx)
    .await?;
    let units: Vec<UnitRow> = sqlx::query_as(&format!(
        "SELECT {} FROM units WHERE id = ANY($1)",
        store::UNIT_COLUMNS
    ))
    .bind(&unit_ids)
    .fetch_all(&mut *tx)
    .await?;
    let priors = fetch_priors(&mut *tx, &unit_ids, &lease_ids).await?;
    let campaign_ids: Vec<i64> = units.iter().map(|u| u.campaign_id).collect();
    let campaigns: Vec<(i64, String, i32, i32, Option<String>)> = sqlx::query_as(
        "SELECT id, function, precision, min_bits, format FROM campaigns WHERE id = ANY($1)",
    )
    .bind(&campaign_ids)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let leases: HashMap<i64, LeaseRow> = leases.into_iter().map(|l| (l.id, l)).collect();
    let units: HashMap<i64, UnitRow> = units.into_iter().map(|u| (u.id, u)).collect();
    let campaigns: HashMap<i64, (String, i32, i32, Option<String>)> = campaigns
        .into_iter()
        .map(|(id, f, p, m, fmt)| (id, (f, p, m, fmt)))
        .collect();
    let mut out = Vec::with_capacity(posts.len());
    for p in posts {
        let unit = units.get(&p.unit_id);
        let judged = domain::judge_post(
            worker_id,
            p.result.fencing_token,
            leases.get(&p.lease_id),
            unit,
            priors.get(&(p.unit_id, p.lease_id)),
            &p.result.digest,
        );
        out.push(judged.and_then(|judgement| {
            let unit = unit.ok_or_else(|| Error::Internal("judged unit vanished".into()))?;
            let (function, precision, min_bits, format) = campaigns
                .get(&unit.campaign_id)
                .ok_or_else(|| Error::Internal("a unit's campaign vanished".into()))?;
            Ok(PostContext {
                judgement,
                function: function.clone(),
                precision: *precision as u32,
                format: format.clone(),
                min_bits: *min_bits as u32,
                unit: spec_of(unit)?,
            })
        }));
    }
    Ok(out)
}

/// The results already recorded for these (unit, lease) pairs.
async fn fetch_priors<'e, E: sqlx::PgExecutor<'e>>(
    ex: E,
    unit_ids: &[i64],
    lease_ids: &[i64],
) -> Result<HashMap<(i64, i64), PriorResult>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        unit_id: i64,
        lease_id: i64,
        #[sqlx(flatten)]
        prior: PriorResult,
    }
    // `unit_id = ANY` probes the (unit_id, lease_id) index; a join with the pairs made the
    // planner hash the whole table (the bench farm's costliest statement), so the lease is
    // matched here (a unit has a few results at most).
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT r.unit_id, r.lease_id, r.id, r.digest, r.hr_count \
         FROM results r WHERE r.unit_id = ANY($1)",
    )
    .bind(unit_ids)
    .fetch_all(ex)
    .await?;
    let wanted: std::collections::HashSet<(i64, i64)> = unit_ids
        .iter()
        .copied()
        .zip(lease_ids.iter().copied())
        .collect();
    Ok(rows
        .into_iter()
        .filter(|r| wanted.contains(&(r.unit_id, r.lease_id)))
        .map(|r| ((r.unit_id, r.lease_id), r.prior))
        .collect())
}

/// Every result of `unit_ids`, in one query: the prior results of the posts' (unit, lease)
/// pairs (void or not: a retry is answered however the result fared since), and each unit's
/// live results in id order (the newest last), as [`store::live_results_by_unit`] gives them.
async fn results_of_units<'e, E: sqlx::PgExecutor<'e>>(
    ex: E,
    unit_ids: &[i64],
    lease_ids: &[i64],
) -> Result<(
    HashMap<(i64, i64), PriorResult>,
    HashMap<i64, Vec<store::LiveResult>>,
)> {
    #[derive(sqlx::FromRow)]
    struct Row {
        lease_id: i64,
        digest: String,
        void: bool,
        #[sqlx(flatten)]
        live: store::LiveResult,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, unit_id, lease_id, worker_id, digest, hr_count, claim, verdict, void, \
                by_trusted \
         FROM results WHERE unit_id = ANY($1) ORDER BY unit_id, id",
    )
    .bind(unit_ids)
    .fetch_all(ex)
    .await?;
    let wanted: std::collections::HashSet<(i64, i64)> = unit_ids
        .iter()
        .copied()
        .zip(lease_ids.iter().copied())
        .collect();
    let mut priors = HashMap::new();
    let mut live: HashMap<i64, Vec<store::LiveResult>> = HashMap::new();
    for r in rows {
        if wanted.contains(&(r.live.unit_id, r.lease_id)) {
            priors.insert(
                (r.live.unit_id, r.lease_id),
                PriorResult {
                    id: r.live.id,
                    digest: r.digest,
                    hr_count: r.live.hr_count,
                },
            );
        }
        if !r.void {
            live.entry(r.live.unit_id).or_default().push(r.live);
        }
    }
    Ok((priors, live))
}

/// A result to record: the post, its HR-cases as the server verified them, and a fresh
/// uniform draw in [0, 1) for adaptive replication.
pub struct Post<'a> {
    pub lease_id: i64,
    pub unit_id: i64,
    pub result: &'a UnitResult,
    pub verified: &'a [HrCase],
    /// The unit's skipped runs as the server computed them (equal to the posted ones).
    pub skipped: &'a [SkippedRun],
    pub audit_roll: f64,
}

/// What became of one post: recorded now, recorded before (a retry), or refused.
#[derive(Debug)]
pub enum Recorded {
    Accepted(ResultAccepted),
    Replayed(ResultAccepted),
    Refused(Error),
}

/// What [`record_results`] did.
#[derive(Debug, Default)]
pub struct BatchRecorded {
    /// One per post, in order.
    pub outcomes: Vec<Recorded>,
    /// The worker's speed after these results (when any was accepted).
    pub speed: Option<f64>,
    /// Workers whose results these outvoted: their records must be checked against the bar.
    pub outvoted_workers: Vec<i64>,
    /// Campaigns whose last unit these results finished.
    pub completed_campaigns: Vec<i64>,
}

/// Records verified results of one worker in one transaction: the result rows and their
/// HR-cases, the verdicts of each unit's replicas (`trust::settle`) and the records of their
/// workers, each unit's new state (done, pending for another replica, or quarantined when
/// replicas never reach a majority), the worker's speed, the end of each lease whose last unit
/// this was, and the completion of a campaign whose last unit this was. Each post is judged
/// again under the leases' and the units' row locks, so a retry is answered as before. The
/// units of `posts` must be distinct (the handler answers a repeated unit itself).
///
/// A deadlock with a concurrent quarantine is retried here (twice) before it reaches the
/// worker as "unavailable".
pub async fn record_results(
    pool: &PgPool,
    worker_id: i64,
    posts: &[Post<'_>],
) -> Result<BatchRecorded> {
    store::retry_transient(2, || record_once(pool, worker_id, posts)).await
}

/// A unit locked for recording, with its campaign's replication rule.
#[derive(sqlx::FromRow)]
struct UnitForResult {
    #[sqlx(flatten)]
    unit: UnitRow,
    replication: i32,
    adaptive: bool,
    audit_rate: f64,
    trust_after: i32,
    replicas_needed: Option<i32>,
    /// Some verified case lies in the unit: its facts must be read.
    proven: bool,
    /// Its binade's weight (1 without an estimate): the worker's speed is in weighted
    /// arguments per second, the measure leases are sized in.
    weight: f64,
}

/// A lease locked for recording, with its age on the database clock.
#[derive(sqlx::FromRow)]
struct LeaseForResult {
    #[sqlx(flatten)]
    lease: LeaseRow,
    age_seconds: f64,
}

/// The posting worker as the recording sees it (not locked: `apply_records` locks it last).
#[derive(sqlx::FromRow)]
struct Poster {
    streak: i64,
    trusted: bool,
    quarantined: bool,
    quarantine_reason: Option<String>,
    revoked: bool,
    since_last_result: Option<f64>,
}

async fn record_once(pool: &PgPool, worker_id: i64, posts: &[Post<'_>]) -> Result<BatchRecorded> {
    // Every statement here reads a few rows by key. A prepared statement's generic plan is
    // made once per connection, and made while `results` was still nearly empty (a new
    // campaign, or tables autovacuum has not analyzed yet) it is a sequential scan, which then
    // stays cached as the table grows: in the farm bench a batch's read of its units' results
    // took 1,150 block reads and 127 ms instead of a few hundred index probes (sub-millisecond).
    // Without sequential scans (same round trip as BEGIN) every plan here is an index plan,
    // and with generic plans it is planned once per connection, not at every batch
    // (`store::HOT_BEGIN`).
    let mut tx = pool.begin_with(store::HOT_BEGIN).await?;
    let lease_ids: BTreeSet<i64> = posts.iter().map(|p| p.lease_id).collect();
    let lease_ids: Vec<i64> = lease_ids.into_iter().collect();
    let leases: Vec<LeaseForResult> = sqlx::query_as(&format!(
        "SELECT {}, extract(epoch FROM now() - created_at)::float8 AS age_seconds \
         FROM leases WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        store::LEASE_COLUMNS
    ))
    .bind(&lease_ids)
    .fetch_all(&mut *tx)
    .await?;
    let leases: HashMap<i64, LeaseForResult> =
        leases.into_iter().map(|l| (l.lease.id, l)).collect();
    let mut unit_ids: Vec<i64> = posts.iter().map(|p| p.unit_id).collect();
    unit_ids.sort_unstable();
    let units: Vec<UnitForResult> = sqlx::query_as(
        "SELECT u.id, u.campaign_id, u.seq, u.state, u.lease_id, u.fence, u.count, u.negative, \
                u.exponent, u.first::text AS first, c.replication, c.adaptive, c.audit_rate, \
                c.trust_after, u.replicas_needed, u.proven, COALESCE(k.weight, 1) AS weight \
         FROM units u JOIN campaigns c ON c.id = u.campaign_id \
         LEFT JOIN campaign_costs k ON k.campaign_id = u.campaign_id \
              AND k.negative = u.negative AND k.exponent = u.exponent \
         WHERE u.id = ANY($1) ORDER BY u.id FOR UPDATE OF u",
    )
    .bind(&unit_ids)
    .fetch_all(&mut *tx)
    .await?;
    let units: HashMap<i64, UnitForResult> = units.into_iter().map(|u| (u.unit.id, u)).collect();
    // Every result of these units, read once under the units' locks: the posts' priors (a
    // retry is answered as before) and each unit's live replicas, which settle it below.
    let post_units: Vec<i64> = posts.iter().map(|p| p.unit_id).collect();
    let post_leases: Vec<i64> = posts.iter().map(|p| p.lease_id).collect();
    let (priors, mut by_unit) = results_of_units(&mut *tx, &post_units, &post_leases).await?;
    let poster: Option<Poster> = sqlx::query_as(
        "SELECT streak, trusted, quarantined_at IS NOT NULL AS quarantined, quarantine_reason, \
                revoked_at IS NOT NULL AS revoked, \
                extract(epoch FROM now() - last_result_at)::float8 AS since_last_result \
         FROM workers WHERE id = $1",
    )
    .bind(worker_id)
    .fetch_optional(&mut *tx)
    .await?;
    let poster = poster.ok_or_else(|| Error::Internal(format!("no worker {worker_id}")))?;
    // A quarantined worker is told that, rather than why one post is refused (its leases
    // were revoked); a revoked one (still in another coordinator's token cache) likewise.
    let barred = || -> Option<Error> {
        if poster.quarantined {
            Some(store_trust::quarantined(
                worker_id,
                poster.quarantine_reason.as_deref(),
            ))
        } else if poster.revoked {
            Some(Error::Unauthorized(
                "this worker's token was revoked".into(),
            ))
        } else {
            None
        }
    };

    // Judge every post; the accepted ones are recorded below.
    let mut outcomes: Vec<Option<Recorded>> = Vec::with_capacity(posts.len());
    let mut accepted: Vec<usize> = Vec::new();
    for (i, p) in posts.iter().enumerate() {
        let row = units.get(&p.unit_id);
        let judgement = domain::judge_post(
            worker_id,
            p.result.fencing_token,
            leases.get(&p.lease_id).map(|l| &l.lease),
            row.map(|r| &r.unit),
            priors.get(&(p.unit_id, p.lease_id)),
            &p.result.digest,
        );
        outcomes.push(match judgement {
            Ok(Judgement::Replay {
                result_id,
                hr_cases,
            }) => Some(Recorded::Replayed(ResultAccepted {
                result_id,
                unit_id: p.unit_id,
                hr_cases,
            })),
            Err(e) => Some(Recorded::Refused(barred().unwrap_or(e))),
            Ok(Judgement::Accept) => match barred() {
                Some(e) => Some(Recorded::Refused(e)),
                None => {
                    accepted.push(i);
                    None
                }
            },
        });
    }
    // A batch with nothing to record ends the transaction at once: a dropped one keeps its
    // row locks until the connection is next used, which would hide the leases from expiry.
    if accepted.is_empty() {
        tx.rollback().await?;
        return Ok(BatchRecorded {
            outcomes: outcomes
                .into_iter()
                .map(Option::unwrap_or_else_refused)
                .collect(),
            ..BatchRecorded::default()
        });
    }

    // The result rows and their HR-cases, in one statement.
    let mut claims = Vec::with_capacity(accepted.len());
    let mut specs = Vec::with_capacity(accepted.len());
    for &i in &accepted {
        let p = &posts[i];
        let row = &units[&p.unit_id];
        let spec = spec_of(&row.unit)?;
        claims.push(trust::claim_digest(
            &spec,
            &p.result.stats,
            p.verified,
            &p.result.exact_cases,
            p.skipped,
        ));
        specs.push(spec);
    }
    let col = |f: &dyn Fn(&Post<'_>) -> i64| -> Vec<i64> {
        accepted.iter().map(|&i| f(&posts[i])).collect()
    };
    let r_unit = col(&|p| p.unit_id);
    let r_lease = col(&|p| p.lease_id);
    let r_token = col(&|p| p.result.fencing_token);
    let r_digest: Vec<String> = accepted
        .iter()
        .map(|&i| posts[i].result.digest.to_ascii_lowercase())
        .collect();
    let r_stats: Vec<Json<&tmd_wire::UnitStats>> = accepted
        .iter()
        .map(|&i| Json(&posts[i].result.stats))
        .collect();
    let r_exact: Vec<Json<&Vec<String>>> = accepted
        .iter()
        .map(|&i| Json(&posts[i].result.exact_cases))
        .collect();
    let r_elapsed: Vec<f64> = accepted.iter().map(|&i| posts[i].result.elapsed).collect();
    let r_hr: Vec<i32> = accepted
        .iter()
        .map(|&i| posts[i].verified.len() as i32)
        .collect();
    let u_proven: Vec<bool> = r_hr.iter().map(|&h| h > 0).collect();
    let (mut h_unit, mut h_campaign, mut h_x, mut h_bits, mut h_d, mut h_kind, mut h_rounded) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for &i in &accepted {
        let p = &posts[i];
        let campaign = units[&p.unit_id].unit.campaign_id;
        for c in p.verified {
            h_unit.push(p.unit_id);
            h_campaign.push(campaign);
            h_x.push(c.x.as_str());
            h_bits.push(c.bits as i32);
            h_d.push(c.neg_log2_d);
            h_kind.push(c.kind.as_str());
            h_rounded.push(c.rounded.as_str());
        }
    }
    // The verified cases already known in these units, read only for the few units that have
    // any (`proven`): a result that lacks one of them, or one the new result brings, is
    // refuted (see `trust::settle`). Most batches read nothing here.
    let proven: Vec<i64> = accepted
        .iter()
        .map(|&i| &units[&posts[i].unit_id])
        .filter(|u| u.proven)
        .map(|u| u.unit.id)
        .collect();
    let mut facts = if proven.is_empty() {
        HashMap::new()
    } else {
        store::facts_by_unit(&mut *tx, &proven).await?
    };
    // Each unit's live results, the new one last (it will have the highest id), settled in the
    // batch's order: the worker's streak as it grows decides how many replicas each next unit
    // needs, as it would between single posts. The new result is settled before it is
    // inserted, so it is written once, with its verdict (its stand-in id is negative).
    let mut changes = store_trust::Changes::default();
    let (mut u_live, mut u_needed, mut u_state) = (vec![], vec![], vec![]);
    let (mut count, mut elapsed, mut oldest_lease) = (0f64, 0f64, 0f64);
    let mut done_campaigns = BTreeSet::new();
    for (slot, &i) in accepted.iter().enumerate() {
        let p = &posts[i];
        let row = &units[&p.unit_id];
        let policy = ReplicationPolicy {
            quorum: row.replication.max(1) as u32,
            adaptive: row.adaptive,
            audit_rate: row.audit_rate,
            trust_after: row.trust_after.max(1) as u32,
        };
        // The number of agreeing results is fixed by the unit's first result.
        let needed = match row.replicas_needed {
            Some(n) => n.max(1) as u32,
            None => {
                let streak = changes.worker(worker_id).record.applied_to(poster.streak);
                trust::replicas_needed(&policy, poster.trusted, streak, p.audit_roll)
            }
        };
        let mut replicas = by_unit.remove(&p.unit_id).unwrap_or_default();
        replicas.push(store::LiveResult {
            id: store_trust::new_result_id(slot),
            unit_id: p.unit_id,
            worker_id,
            claim: claims[slot].clone(),
            verdict: trust::Verdict::Pending.as_str().to_string(),
            hr_count: p.verified.len() as i32,
            by_trusted: poster.trusted,
        });
        let mut known = facts.remove(&p.unit_id).unwrap_or_default();
        known.extend(p.verified.iter().map(|c| c.x.clone()));
        let settlement = changes.settle(&replicas, known.len(), needed, policy.quorum)?;
        let state = store_trust::unit_state(&settlement);
        if state == "done" {
            done_campaigns.insert(row.unit.campaign_id);
        }
        u_live.push(replicas.len() as i32);
        u_needed.push(needed as i32);
        u_state.push(state);
        count += row.unit.count as f64 * row.weight;
        elapsed += p.result.elapsed;
        oldest_lease = oldest_lease.max(leases[&p.lease_id].age_seconds);
    }
    let new_verdicts = changes.take_new_verdicts();
    let r_verdict: Vec<&str> = (0..accepted.len())
        .map(|slot| {
            new_verdicts
                .get(&store_trust::new_result_id(slot))
                .unwrap_or(&trust::Verdict::Pending)
                .as_str()
        })
        .collect();

    let inserted: Vec<(i64, i64)> = sqlx::query_as(
        "WITH r AS ( \
             INSERT INTO results (unit_id, lease_id, worker_id, fencing_token, digest, stats, \
                                  exact_cases, elapsed_seconds, hr_count, claim, verdict, \
                                  by_trusted) \
             SELECT t.u, t.l, $1, t.f, t.d, t.s, t.e, t.el, t.h, t.c, t.v, $19 \
             FROM UNNEST($2::int8[], $3::int8[], $4::int8[], $5::text[], $6::jsonb[], \
                         $7::jsonb[], $8::float8[], $9::int4[], $10::text[], $18::text[]) \
                  AS t(u, l, f, d, s, e, el, h, c, v) \
             RETURNING id, unit_id), \
         h AS ( \
             INSERT INTO hr_cases (campaign_id, unit_id, result_id, x, bits, neg_log2_d, kind, \
                                   rounded) \
             SELECT t.c, t.u, r.id, t.x, t.b, t.d, t.k, t.rd \
             FROM UNNEST($11::int8[], $12::int8[], $13::text[], $14::int4[], $15::float8[], \
                         $16::text[], $17::text[]) AS t(u, c, x, b, d, k, rd) \
                  JOIN r ON r.unit_id = t.u \
             ON CONFLICT (campaign_id, x) DO NOTHING) \
         SELECT unit_id, id FROM r",
    )
    .bind(worker_id)
    .bind(&r_unit)
    .bind(&r_lease)
    .bind(&r_token)
    .bind(&r_digest)
    .bind(&r_stats)
    .bind(&r_exact)
    .bind(&r_elapsed)
    .bind(&r_hr)
    .bind(&claims)
    .bind(&h_unit)
    .bind(&h_campaign)
    .bind(&h_x)
    .bind(&h_bits)
    .bind(&h_d)
    .bind(&h_kind)
    .bind(&h_rounded)
    .bind(&r_verdict)
    .bind(poster.trusted)
    .fetch_all(&mut *tx)
    .await?;
    let result_ids: HashMap<i64, i64> = inserted.into_iter().collect();
    insert_skipped_runs(&mut tx, posts, &accepted, &units, &result_ids).await?;

    // Speed is measured over the whole batch: its arguments in the worker's elapsed time, but
    // never faster than the server's clock allows since the worker's previous result or the
    // batch's oldest lease, whichever is later (a batch of one: exactly the single post's rule).
    let wall = poster
        .since_last_result
        .map_or(oldest_lease, |s| s.min(oldest_lease));
    {
        let own = changes.worker(worker_id);
        own.done += accepted.len() as i64;
        own.speed = domain::speed_sample_work(count, elapsed, wall);
    }
    store_trust::apply_verdicts(&mut tx, &changes).await?;
    let records = store_trust::apply_records(&mut tx, &changes).await?;
    let Some((speed, false)) = records.get(&worker_id).copied() else {
        // Quarantined since the judgement above (a concurrent forgery or outvote).
        tx.rollback().await?;
        let refused = store_trust::quarantined(worker_id, None);
        let mut outcomes = outcomes;
        for &i in &accepted {
            outcomes[i] = Some(Recorded::Refused(Error::WorkerQuarantined(
                refused.to_string(),
            )));
        }
        return Ok(BatchRecorded {
            outcomes: outcomes
                .into_iter()
                .map(Option::unwrap_or_else_refused)
                .collect(),
            ..BatchRecorded::default()
        });
    };
    sqlx::query(
        "UPDATE units u SET replicas_done = t.live, replicas_needed = t.needed, lease_id = NULL, \
             state = t.state, proven = u.proven OR t.proven, \
             done_at = CASE WHEN t.state = 'done' THEN COALESCE(u.done_at, now()) END \
         FROM UNNEST($1::int8[], $2::int4[], $3::int4[], $4::text[], $5::bool[]) \
              AS t(id, live, needed, state, proven) \
         WHERE u.id = t.id AND u.id = ANY($1)",
    )
    .bind(&r_unit)
    .bind(&u_live)
    .bind(&u_needed)
    .bind(&u_state)
    .bind(&u_proven)
    .execute(&mut *tx)
    .await?;
    // A lease whose last unit this was is finished (this statement sees the update above).
    sqlx::query(
        "UPDATE leases l SET state = 'finished', ended_at = now() \
         WHERE l.id = ANY($1) AND l.state = 'active' \
           AND NOT EXISTS (SELECT 1 FROM units WHERE lease_id = l.id)",
    )
    .bind(&r_lease)
    .execute(&mut *tx)
    .await?;
    let done_campaigns: Vec<i64> = done_campaigns.into_iter().collect();
    let completed = store::complete_campaigns(&mut tx, &done_campaigns).await?;
    tx.commit().await?;
    for (slot, &i) in accepted.iter().enumerate() {
        let p = &posts[i];
        outcomes[i] = Some(Recorded::Accepted(ResultAccepted {
            result_id: result_ids[&p.unit_id],
            unit_id: p.unit_id,
            hr_cases: r_hr[slot] as u32,
        }));
    }
    Ok(BatchRecorded {
        outcomes: outcomes
            .into_iter()
            .map(Option::unwrap_or_else_refused)
            .collect(),
        speed,
        outvoted_workers: changes.outvoted_workers(),
        completed_campaigns: completed,
    })
}

/// The server's skipped runs of the accepted posts, one statement; a replica's runs are
/// already there (the same runs: the server computed both).
async fn insert_skipped_runs(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    posts: &[Post<'_>],
    accepted: &[usize],
    units: &HashMap<i64, UnitForResult>,
    result_ids: &HashMap<i64, i64>,
) -> Result<()> {
    let (mut campaign, mut unit, mut result) = (vec![], vec![], vec![]);
    let (mut first, mut last, mut count, mut reason, mut rule) =
        (vec![], vec![], vec![], vec![], vec![]);
    for &i in accepted {
        let p = &posts[i];
        for s in p.skipped {
            campaign.push(units[&p.unit_id].unit.campaign_id);
            unit.push(p.unit_id);
            result.push(result_ids[&p.unit_id]);
            first.push(s.first.as_str());
            last.push(s.last.as_str());
            count.push(s.count as i64);
            reason.push(s.reason.as_str());
            rule.push(s.rule.as_str());
        }
    }
    if unit.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO skipped_runs (campaign_id, unit_id, result_id, first, last, count, reason, \
                                   rule) \
         SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::int8[], $4::text[], $5::text[], \
                              $6::int8[], $7::text[], $8::text[]) \
         ON CONFLICT (campaign_id, first) DO NOTHING",
    )
    .bind(&campaign)
    .bind(&unit)
    .bind(&result)
    .bind(&first)
    .bind(&last)
    .bind(&count)
    .bind(&reason)
    .bind(&rule)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Every slot of a batch gets an outcome; a missing one would be a bug, answered as such.
trait Filled {
    fn unwrap_or_else_refused(self) -> Recorded;
}

impl Filled for Option<Recorded> {
    fn unwrap_or_else_refused(self) -> Recorded {
        self.unwrap_or_else(|| {
            Recorded::Refused(Error::Internal("a post of the batch got no outcome".into()))
        })
    }
}
