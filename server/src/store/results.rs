//! Storage of unit results: the recording of many units' results in one transaction, with
//! multi-row statements, after their first judgement (`precheck.rs`) and their MPFR
//! verification. A single post is a batch of one through the same code.
//!
//! Lock order, as everywhere in `store`: the batch's leases (in id order), then its units (in
//! id order), then workers' rows (in id order, in `store_trust::apply_records`), then the
//! campaigns that may have just completed (in id order).

use crate::domain::audit;
use crate::domain::trust::{self, ReplicationPolicy};
use crate::domain::{self, Judgement, LeaseRow, PriorResult, UnitRow};
use crate::error::{Error, Result};
use crate::store;
use crate::store::precheck::spec_of;
use crate::store::trust as store_trust;
use sqlx::types::Json;
use sqlx::PgPool;
use std::collections::{BTreeSet, HashMap, HashSet};
use tmd_wire::{HrCase, ResultAccepted, SkippedRun, UnitResult};

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
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {}, lease_id, digest, void \
         FROM results WHERE unit_id = ANY($1) ORDER BY unit_id, id",
        store::LIVE_RESULT_COLUMNS
    ))
    .bind(unit_ids)
    .fetch_all(ex)
    .await?;
    let wanted = lease_pairs(unit_ids, lease_ids);
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
    /// Whether the campaign derives cases from `verified` (its reduction): the result is then
    /// queued for the coordinator's background derivation (`pending_derivations`), whose
    /// cases count apart from every count of the worker's own (the audit, `hr_count`).
    pub derives: bool,
    /// The unit's skipped runs as the server computed them (equal to the posted ones).
    pub skipped: &'a [SkippedRun],
    /// The arguments the count audit judges (`engine::audited_arguments`); `None` where the
    /// unit is not audited.
    pub judged: Option<f64>,
    /// The unit's exact cases that an engine counts by its lattice's rule instead of listing
    /// them (`engine::lattice_count`): its counters admit that many more cases.
    pub lattice: u64,
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
    /// The poster's owner when the count audit found its totals improbable: why, to quarantine
    /// its workers.
    pub improbable_owner: Option<(String, String)>,
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
    /// The campaign's threshold, and the estimate's cases per argument of the binade: the count
    /// audit's expectation.
    min_bits: i32,
    cases_per_argument: Option<f64>,
    /// The operator trusts every worker of the campaign: no count audit.
    trust_all_workers: bool,
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
    owner: String,
    quarantined: bool,
    quarantine_reason: Option<String>,
    revoked: bool,
    since_last_result: Option<f64>,
    /// The units the worker computes at once (its last lease request's `units_in_flight`).
    slots: i32,
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
    let mut tx = super::begin(pool, Some(store::HOT_BEGIN)).await?;
    let locked = lock_leases_and_units(&mut tx, posts).await?;
    // Every result of these units, read once under the units' locks: the posts' priors (a
    // retry is answered as before) and each unit's live replicas, which settle it below.
    let post_units: Vec<i64> = posts.iter().map(|p| p.unit_id).collect();
    let post_leases: Vec<i64> = posts.iter().map(|p| p.lease_id).collect();
    let (priors, by_unit) = results_of_units(&mut *tx, &post_units, &post_leases).await?;
    let poster = poster(&mut tx, worker_id).await?;
    // Judge every post; the accepted ones are recorded below.
    let (mut outcomes, accepted) = judge_posts(worker_id, posts, &locked, &priors, &poster);
    // A batch with nothing to record ends the transaction at once: a dropped one keeps its
    // row locks until the connection is next used, which would hide the leases from expiry.
    if accepted.is_empty() {
        tx.rollback().await?;
        return Ok(nothing_recorded(outcomes));
    }

    // The result rows and their HR-cases, in one statement.
    let cols = Columns::of(posts, accepted, &locked.units)?;
    let accepted = &cols.accepted;
    // The verified cases already known in these units, read only for the few units that have
    // any (`proven`): a result that lacks one of them, or one the new result brings, is
    // refuted (see `trust::settle`). Most batches read nothing here.
    let proven: Vec<i64> = accepted
        .iter()
        .map(|&i| &locked.units[&posts[i].unit_id])
        .filter(|u| u.proven)
        .map(|u| u.unit.id)
        .collect();
    let facts = if proven.is_empty() {
        HashMap::new()
    } else {
        store::facts_by_unit(&mut *tx, &proven).await?
    };
    let mut settled = settle(worker_id, &poster, posts, &locked, &cols, by_unit, facts)?;
    let changes = &mut settled.changes;
    let new_verdicts = changes.take_new_verdicts();
    let r_verdict: Vec<&str> = (0..accepted.len())
        .map(|slot| {
            new_verdicts
                .get(&store_trust::new_result_id(slot))
                .unwrap_or(&trust::Verdict::Pending)
                .as_str()
        })
        .collect();

    let result_ids = insert_results(&mut tx, worker_id, &poster, &cols, &r_verdict).await?;
    insert_skipped_runs(&mut tx, posts, accepted, &locked.units, &result_ids).await?;

    // Speed is measured over the whole batch: its arguments in the worker's elapsed time (the
    // units' own times over the units it computes at once: a GPU's units run side by side), but
    // never faster than the server's clock allows since the worker's previous result or the
    // batch's oldest lease, whichever is later (a batch of one: exactly the single post's rule).
    let wall = poster
        .since_last_result
        .map_or(settled.oldest_lease, |s| s.min(settled.oldest_lease));
    {
        let own = changes.worker(worker_id);
        own.done += accepted.len() as i64;
        let slots = f64::from(poster.slots.max(1));
        own.speed = domain::speed_sample_work(settled.count, settled.elapsed / slots, wall);
    }
    store_trust::apply_verdicts(&mut tx, changes).await?;
    let records = store_trust::apply_records(&mut tx, changes).await?;
    let Some((speed, false)) = records.get(&worker_id).copied() else {
        // Quarantined since the judgement above (a concurrent forgery or outvote).
        tx.rollback().await?;
        let refused = store_trust::quarantined(worker_id, None);
        let mut outcomes = outcomes;
        for &i in accepted {
            outcomes[i] = Some(Recorded::Refused(Error::WorkerQuarantined(
                refused.to_string(),
            )));
        }
        return Ok(nothing_recorded(outcomes));
    };
    finish_units(&mut tx, &cols, &settled).await?;
    let done_campaigns: Vec<i64> = settled.done_campaigns.iter().copied().collect();
    let completed = store::complete_campaigns(&mut tx, &done_campaigns).await?;
    let improbable_owner = if poster.trusted {
        None
    } else {
        audit_owner(&mut tx, &poster.owner, posts, &cols, &locked).await?
    };
    tx.commit().await?;
    for (slot, &i) in accepted.iter().enumerate() {
        let p = &posts[i];
        outcomes[i] = Some(Recorded::Accepted(ResultAccepted {
            result_id: result_ids[&p.unit_id],
            unit_id: p.unit_id,
            hr_cases: cols.hr[slot] as u32,
        }));
    }
    Ok(BatchRecorded {
        outcomes: filled(outcomes),
        speed,
        outvoted_workers: settled.changes.outvoted_workers(),
        completed_campaigns: completed,
        improbable_owner,
    })
}

/// Adds the audited results of the batch to its owner's totals per campaign
/// (`owner_audit`) and tests them (`audit::owner_improbable`): why the owner's workers must be
/// quarantined, when its totals are improbable in some campaign.
async fn audit_owner(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    owner: &str,
    posts: &[Post<'_>],
    cols: &Columns<'_>,
    locked: &Locked,
) -> Result<Option<(String, String)>> {
    let mut per_campaign: std::collections::BTreeMap<i64, (f64, i64, i64)> = Default::default();
    for (slot, &i) in cols.accepted.iter().enumerate() {
        if let Some(lambda) = cols.expected[slot] {
            let c = locked.units[&posts[i].unit_id].unit.campaign_id;
            let e = per_campaign.entry(c).or_default();
            e.0 += lambda;
            e.1 += posts[i].verified.len() as i64;
            e.2 += 1;
        }
    }
    if per_campaign.is_empty() {
        return Ok(None);
    }
    let ids: Vec<i64> = per_campaign.keys().copied().collect();
    let expected: Vec<f64> = per_campaign.values().map(|v| v.0).collect();
    let observed: Vec<i64> = per_campaign.values().map(|v| v.1).collect();
    let results: Vec<i64> = per_campaign.values().map(|v| v.2).collect();
    let totals: Vec<(i64, f64, i64, i64)> = sqlx::query_as(
        "INSERT INTO owner_audit AS a (campaign_id, owner, expected, observed, results) \
         SELECT t.c, $2, t.e, t.o, t.r \
         FROM UNNEST($1::int8[], $3::float8[], $4::int8[], $5::int8[]) AS t(c, e, o, r) \
         ON CONFLICT (campaign_id, owner) DO UPDATE SET \
             expected = a.expected + EXCLUDED.expected, observed = a.observed + EXCLUDED.observed, \
             results = a.results + EXCLUDED.results \
         RETURNING campaign_id, expected, observed, results",
    )
    .bind(&ids)
    .bind(owner)
    .bind(&expected)
    .bind(&observed)
    .bind(&results)
    .fetch_all(&mut **tx)
    .await?;
    Ok(totals
        .into_iter()
        .find_map(|(campaign, expected, observed, results)| {
            audit::owner_improbable(observed as f64, expected).map(|z| {
                (
                    owner.to_string(),
                    format!(
                        "its owner's {results} audited results in campaign {campaign} hold \
                     {observed} HR-cases where about {expected:.0} were expected ({z:.1} \
                     standard deviations low): cases left out"
                    ),
                )
            })
        }))
}

/// The batch's leases and units, locked in that order (see the module's lock order).
struct Locked {
    leases: HashMap<i64, LeaseForResult>,
    units: HashMap<i64, UnitForResult>,
}

/// Reads and locks the batch's leases (in id order), then its units (in id order).
async fn lock_leases_and_units(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    posts: &[Post<'_>],
) -> Result<Locked> {
    let lease_ids: BTreeSet<i64> = posts.iter().map(|p| p.lease_id).collect();
    let lease_ids: Vec<i64> = lease_ids.into_iter().collect();
    let leases: Vec<LeaseForResult> = sqlx::query_as(&format!(
        "SELECT {}, extract(epoch FROM now() - created_at)::float8 AS age_seconds \
         FROM leases WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        store::LEASE_COLUMNS
    ))
    .bind(&lease_ids)
    .fetch_all(&mut **tx)
    .await?;
    // A post that comes before its lease's units were marked marks them, under the lease's
    // lock, before it reads them.
    let deferred: Vec<i64> = leases
        .iter()
        .filter(|l| l.lease.deferred)
        .map(|l| l.lease.id)
        .collect();
    store::deferred::mark(tx, &deferred).await?;
    let leases: HashMap<i64, LeaseForResult> =
        leases.into_iter().map(|l| (l.lease.id, l)).collect();
    let mut unit_ids: Vec<i64> = posts.iter().map(|p| p.unit_id).collect();
    unit_ids.sort_unstable();
    let units: Vec<UnitForResult> = sqlx::query_as(
        "SELECT u.id, u.campaign_id, u.seq, u.state, u.lease_id, u.fence, u.count, u.negative, \
                u.exponent, u.first::text AS first, c.replication, c.adaptive, c.audit_rate, \
                c.trust_after, u.replicas_needed, u.proven, COALESCE(k.weight, 1) AS weight, \
                c.min_bits, k.cases_per_argument, c.trust_all_workers \
         FROM units u JOIN campaigns c ON c.id = u.campaign_id \
         LEFT JOIN campaign_costs k ON k.campaign_id = u.campaign_id \
              AND k.negative = u.negative AND k.exponent = u.exponent \
         WHERE u.id = ANY($1) ORDER BY u.id FOR UPDATE OF u",
    )
    .bind(&unit_ids)
    .fetch_all(&mut **tx)
    .await?;
    let units: HashMap<i64, UnitForResult> = units.into_iter().map(|u| (u.unit.id, u)).collect();
    Ok(Locked { leases, units })
}

/// The posting worker's row (not locked: `apply_records` locks it last).
async fn poster(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, worker_id: i64) -> Result<Poster> {
    let poster: Option<Poster> = sqlx::query_as(
        "SELECT streak, trusted, owner, quarantined_at IS NOT NULL AS quarantined, \
                quarantine_reason, \
                revoked_at IS NOT NULL AS revoked, \
                extract(epoch FROM now() - last_result_at)::float8 AS since_last_result, \
                slots \
         FROM workers WHERE id = $1",
    )
    .bind(worker_id)
    .fetch_optional(&mut **tx)
    .await?;
    poster.ok_or_else(|| Error::Internal(format!("no worker {worker_id}")))
}

/// Judges every post against its lease, its unit and its prior result: each one's outcome
/// where it is decided (a replay, a refusal), and the indices of the accepted ones.
fn judge_posts(
    worker_id: i64,
    posts: &[Post<'_>],
    locked: &Locked,
    priors: &HashMap<(i64, i64), PriorResult>,
    poster: &Poster,
) -> (Vec<Option<Recorded>>, Vec<usize>) {
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

    let mut outcomes: Vec<Option<Recorded>> = Vec::with_capacity(posts.len());
    let mut accepted: Vec<usize> = Vec::new();
    for (i, p) in posts.iter().enumerate() {
        let row = locked.units.get(&p.unit_id);
        let judgement = domain::judge_post(
            worker_id,
            p.result.fencing_token,
            locked.leases.get(&p.lease_id).map(|l| &l.lease),
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
    (outcomes, accepted)
}

/// The accepted posts' columns for the multi-row statements, in the order of `accepted`.
struct Columns<'p> {
    accepted: Vec<usize>,
    /// Each result's claim digest (`trust::claim_digest`), and that of its cases alone
    /// (`trust::cases_digest`).
    claims: Vec<String>,
    cases_claims: Vec<String>,
    /// Each result's verified arguments.
    case_xs: Vec<Json<Vec<&'p str>>>,
    /// The count audit: each result's expected cases (`None` where not audited), and whether
    /// its count is implausible.
    expected: Vec<Option<f64>>,
    implausible: Vec<bool>,
    unit: Vec<i64>,
    lease: Vec<i64>,
    token: Vec<i64>,
    digest: Vec<String>,
    /// The engine version of each result (0 where the worker does not say).
    engine: Vec<i32>,
    stats: Vec<Json<&'p tmd_wire::UnitStats>>,
    exact: Vec<Json<&'p Vec<String>>>,
    elapsed: Vec<f64>,
    /// Each result's verified HR-cases.
    hr: Vec<i32>,
    proven: Vec<bool>,
    /// The HR-cases' rows: unit, campaign, x, bits, -log2 d, kind, rounded.
    case_unit: Vec<i64>,
    case_campaign: Vec<i64>,
    case_x: Vec<&'p str>,
    case_bits: Vec<i32>,
    case_d: Vec<f64>,
    case_kind: Vec<&'p str>,
    case_rounded: Vec<&'p str>,
    /// Each result's unit where its cases are to be derived (queued), in no order.
    derive_units: Vec<i64>,
}

impl<'p> Columns<'p> {
    fn of(
        posts: &'p [Post<'_>],
        accepted: Vec<usize>,
        units: &HashMap<i64, UnitForResult>,
    ) -> Result<Columns<'p>> {
        let mut claims = Vec::with_capacity(accepted.len());
        let mut cases_claims = Vec::with_capacity(accepted.len());
        let (mut expected, mut implausible) = (Vec::new(), Vec::new());
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
            cases_claims.push(trust::cases_digest(
                &spec,
                p.verified,
                &p.result.exact_cases,
                p.skipped,
            ));
            // A campaign that trusts every worker audits none (the operator's own farm).
            let lambda = p.judged.filter(|_| !row.trust_all_workers).map(|judged| {
                audit::expected_cases(judged, row.min_bits.max(1) as u32, row.cases_per_argument)
            });
            let listed = p.verified.len() + p.result.exact_cases.len() + p.lattice as usize;
            let admits =
                !row.trust_all_workers && audit::counters_admit_omission(&p.result.stats, listed);
            implausible.push(
                admits
                    || lambda.is_some_and(|l| audit::implausibly_low(p.verified.len() as u64, l)),
            );
            expected.push(lambda);
        }
        let case_xs: Vec<Json<Vec<&str>>> = accepted
            .iter()
            .map(|&i| Json(posts[i].verified.iter().map(|c| c.x.as_str()).collect()))
            .collect();
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
        let r_engine: Vec<i32> = accepted
            .iter()
            // Accepted versions fit the column (`ServeArgs::config` refuses larger ones).
            .map(|&i| tmd_wire::engine_version(posts[i].result.engine) as i32)
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
        let derive_units: Vec<i64> = accepted
            .iter()
            .map(|&i| &posts[i])
            .filter(|p| p.derives && !p.verified.is_empty())
            .map(|p| p.unit_id)
            .collect();
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
        Ok(Columns {
            claims,
            cases_claims,
            case_xs,
            expected,
            implausible,
            unit: r_unit,
            lease: r_lease,
            token: r_token,
            digest: r_digest,
            engine: r_engine,
            stats: r_stats,
            exact: r_exact,
            elapsed: r_elapsed,
            hr: r_hr,
            proven: u_proven,
            case_unit: h_unit,
            case_campaign: h_campaign,
            case_x: h_x,
            case_bits: h_bits,
            case_d: h_d,
            case_kind: h_kind,
            case_rounded: h_rounded,
            derive_units,
            accepted,
        })
    }
}

/// How the accepted results settle their units, in the batch's order.
struct Settled {
    changes: store_trust::Changes,
    /// Per accepted post: its unit's live results, the replicas it needs, its new state.
    live: Vec<i32>,
    needed: Vec<i32>,
    state: Vec<&'static str>,
    /// Why a unit waits for a person (held or quarantined), else `None`.
    reason: Vec<Option<String>>,
    /// The batch's weighted arguments, the worker's elapsed time over them, and the age of the
    /// batch's oldest lease.
    count: f64,
    elapsed: f64,
    oldest_lease: f64,
    /// The campaigns of the units now done.
    done_campaigns: BTreeSet<i64>,
}

/// Settles each accepted post's unit with its live results (`by_unit`) and verified cases
/// (`facts`), the new result among them.
fn settle(
    worker_id: i64,
    poster: &Poster,
    posts: &[Post<'_>],
    locked: &Locked,
    cols: &Columns<'_>,
    mut by_unit: HashMap<i64, Vec<store::LiveResult>>,
    mut facts: HashMap<i64, trust::UnitFacts>,
) -> Result<Settled> {
    // Each unit's live results, the new one last (it will have the highest id), settled in the
    // batch's order: the worker's streak as it grows decides how many replicas each next unit
    // needs, as it would between single posts. The new result is settled before it is
    // inserted, so it is written once, with its verdict (its stand-in id is negative).
    let mut changes = store_trust::Changes::default();
    let (mut u_live, mut u_needed, mut u_state, mut u_reason) = (vec![], vec![], vec![], vec![]);
    let (mut count, mut elapsed, mut oldest_lease) = (0f64, 0f64, 0f64);
    let mut done_campaigns = BTreeSet::new();
    for (slot, &i) in cols.accepted.iter().enumerate() {
        let p = &posts[i];
        let row = &locked.units[&p.unit_id];
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
            claim: cols.claims[slot].clone(),
            cases_claim: Some(cols.cases_claims[slot].clone()),
            engine: cols.engine[slot],
            verdict: trust::Verdict::Pending.as_str().to_string(),
            hr_count: p.verified.len() as i32,
            case_xs: Some(Json(p.verified.iter().map(|c| c.x.clone()).collect())),
            by_trusted: poster.trusted,
            implausible: cols.implausible[slot],
        });
        let mut known = facts.remove(&p.unit_id).unwrap_or_default();
        known.all.extend(p.verified.iter().map(|c| c.x.clone()));
        let (settlement, reason) = changes.settle(&replicas, &known, needed, policy.quorum)?;
        let state = store_trust::unit_state(&settlement);
        if state == "done" {
            done_campaigns.insert(row.unit.campaign_id);
        }
        u_live.push(replicas.len() as i32);
        u_needed.push(needed as i32);
        u_state.push(state);
        u_reason.push(reason);
        count += row.unit.count as f64 * row.weight;
        elapsed += p.result.elapsed;
        oldest_lease = oldest_lease.max(locked.leases[&p.lease_id].age_seconds);
    }
    Ok(Settled {
        changes,
        live: u_live,
        needed: u_needed,
        state: u_state,
        reason: u_reason,
        count,
        elapsed,
        oldest_lease,
        done_campaigns,
    })
}

/// Inserts the accepted results (with their `verdicts`) and their HR-cases, one statement:
/// each unit's new result id.
async fn insert_results(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    worker_id: i64,
    poster: &Poster,
    cols: &Columns<'_>,
    verdicts: &[&str],
) -> Result<HashMap<i64, i64>> {
    let inserted: Vec<(i64, i64)> = sqlx::query_as(
        "WITH r AS ( \
             INSERT INTO results (unit_id, lease_id, worker_id, fencing_token, digest, stats, \
                                  exact_cases, elapsed_seconds, hr_count, claim, verdict, \
                                  by_trusted, engine, cases_claim, case_xs, owner, \
                                  expected_cases, implausible) \
             SELECT t.u, t.l, $1, t.f, t.d, t.s, t.e, t.el, t.h, t.c, t.v, $19, t.g, t.cc, \
                    t.cx, $21, t.ex, t.im \
             FROM UNNEST($2::int8[], $3::int8[], $4::int8[], $5::text[], $6::jsonb[], \
                         $7::jsonb[], $8::float8[], $9::int4[], $10::text[], $18::text[], \
                         $20::int4[], $22::text[], $23::jsonb[], $24::float8[], $25::bool[]) \
                  AS t(u, l, f, d, s, e, el, h, c, v, g, cc, cx, ex, im) \
             RETURNING id, unit_id), \
         h AS ( \
             INSERT INTO hr_cases (campaign_id, unit_id, result_id, x, bits, neg_log2_d, kind, \
                                   rounded) \
             SELECT t.c, t.u, r.id, t.x, t.b, t.d, t.k, t.rd \
             FROM UNNEST($11::int8[], $12::int8[], $13::text[], $14::int4[], $15::float8[], \
                         $16::text[], $17::text[]) AS t(u, c, x, b, d, k, rd) \
                  JOIN r ON r.unit_id = t.u \
             ON CONFLICT (campaign_id, x) DO NOTHING), \
         q AS ( \
             INSERT INTO pending_derivations (result_id, campaign_id) \
             SELECT r.id, u.campaign_id FROM r JOIN units u ON u.id = r.unit_id \
             WHERE r.unit_id = ANY($26)) \
         SELECT unit_id, id FROM r",
    )
    .bind(worker_id)
    .bind(&cols.unit)
    .bind(&cols.lease)
    .bind(&cols.token)
    .bind(&cols.digest)
    .bind(&cols.stats)
    .bind(&cols.exact)
    .bind(&cols.elapsed)
    .bind(&cols.hr)
    .bind(&cols.claims)
    .bind(&cols.case_unit)
    .bind(&cols.case_campaign)
    .bind(&cols.case_x)
    .bind(&cols.case_bits)
    .bind(&cols.case_d)
    .bind(&cols.case_kind)
    .bind(&cols.case_rounded)
    .bind(verdicts)
    .bind(poster.trusted)
    .bind(&cols.engine)
    .bind(&poster.owner)
    .bind(&cols.cases_claims)
    .bind(&cols.case_xs)
    .bind(&cols.expected)
    .bind(&cols.implausible)
    .bind(&cols.derive_units)
    .fetch_all(&mut **tx)
    .await?;
    Ok(inserted.into_iter().collect())
}

/// The settled units' new states, and the leases whose last unit this was finished.
async fn finish_units(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    cols: &Columns<'_>,
    settled: &Settled,
) -> Result<()> {
    sqlx::query(
        "UPDATE units u SET replicas_done = t.live, replicas_needed = t.needed, lease_id = NULL, \
             state = t.state, proven = u.proven OR t.proven, hold_reason = t.reason, \
             reserved_for = NULL, reserved_at = NULL, \
             done_at = CASE WHEN t.state = 'done' THEN COALESCE(u.done_at, now()) END \
         FROM UNNEST($1::int8[], $2::int4[], $3::int4[], $4::text[], $5::bool[], $6::text[]) \
              AS t(id, live, needed, state, proven, reason) \
         WHERE u.id = t.id AND u.id = ANY($1)",
    )
    .bind(&cols.unit)
    .bind(&settled.live)
    .bind(&settled.needed)
    .bind(&settled.state)
    .bind(&cols.proven)
    .bind(&settled.reason)
    .execute(&mut **tx)
    .await?;
    // A lease whose last unit this was is finished (this statement sees the update above).
    sqlx::query(
        "UPDATE leases l SET state = 'finished', ended_at = now() \
         WHERE l.id = ANY($1) AND l.state = 'active' \
           AND NOT EXISTS (SELECT 1 FROM units WHERE lease_id = l.id)",
    )
    .bind(&cols.lease)
    .execute(&mut **tx)
    .await?;
    Ok(())
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
fn filled(outcomes: Vec<Option<Recorded>>) -> Vec<Recorded> {
    outcomes
        .into_iter()
        .map(|o| {
            o.unwrap_or_else(|| {
                Recorded::Refused(Error::Internal("a post of the batch got no outcome".into()))
            })
        })
        .collect()
}

/// The answer to a batch of which nothing was recorded: its outcomes alone.
fn nothing_recorded(outcomes: Vec<Option<Recorded>>) -> BatchRecorded {
    BatchRecorded {
        outcomes: filled(outcomes),
        ..BatchRecorded::default()
    }
}

/// The (unit, lease) pairs of a batch's posts.
pub(super) fn lease_pairs(unit_ids: &[i64], lease_ids: &[i64]) -> HashSet<(i64, i64)> {
    unit_ids
        .iter()
        .copied()
        .zip(lease_ids.iter().copied())
        .collect()
}
