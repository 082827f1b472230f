//! Storage: every query of the server, as plain async functions over `&PgPool`.
//!
//! Each change of a unit's state happens in exactly one transaction (or one statement).
//! Locks are always taken in the order lease, then unit, so the claim, post, release and
//! expiry paths cannot deadlock one another; claims and expiry skip locked rows instead of
//! waiting. Times (lease expiry, last seen, throughput) come from the database clock `now()`.

pub mod admin;
mod claims;
pub mod deferred;
pub mod derivations;
pub mod export;
pub mod history;
pub mod known;
mod laps;
mod leases;
pub mod precheck;
pub mod results;
pub mod tallies;
pub mod trust;
mod workers;

pub use claims::{lane_count, LANE_UNITS_MIN, MAX_LANES};
pub use laps::Laps;
pub use leases::*;
pub use workers::*;

use self::trust as store_trust;
use crate::domain::{self, LeaseRow};
use crate::error::{Error, Result};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgPool, Postgres, Transaction};
use tmd_wire::{
    ArgRange, Campaign, CampaignProgress, CampaignState, EnrollmentToken, HrKind, Lease, LeaseTask,
    LeasedUnit, QuarantinedUnit, ReleaseResponse, ReplicationReport, StateCount, StoredHrCase,
    UnitSpec, WorkerInfo,
};

/// The migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// The coordinator's session settings on `options`: no JIT compilation. Its statements are
/// short and many; PostgreSQL compiles any whose estimated cost passes `jit_above_cost`, and
/// a 20,000-unit claim spent 70-96 ms of its 156-228 ms compiling (auto_explain, VM).
pub fn session_options(
    options: sqlx::postgres::PgConnectOptions,
) -> sqlx::postgres::PgConnectOptions {
    options.options([("jit", "off")])
}

/// Applies the migrations not yet applied.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    MIGRATOR
        .run(pool)
        .await
        .map_err(|e| Error::Internal(format!("migration failed: {e}")))
}

/// Whether the database answers.
pub async fn ping(pool: &PgPool) -> Result<()> {
    sqlx::query("SELECT 1").execute(pool).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Campaigns

#[derive(sqlx::FromRow)]
struct CampaignDb {
    id: i64,
    name: String,
    function: String,
    precision: i32,
    format: Option<String>,
    min_bits: i32,
    ranges: Json<Vec<ArgRange>>,
    unit_bits: i32,
    replication: i32,
    distinct_owners: bool,
    adaptive: bool,
    audit_rate: f64,
    trust_after: i32,
    trust_all_workers: bool,
    priority: i32,
    state: String,
    units_total: i64,
    arguments_total: String,
    created_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
    derived_runs: Option<Json<Vec<tmd_kernels::plan::reduce::DerivedRun>>>,
}

const CAMPAIGN_COLUMNS: &str = "id, name, function, precision, format, min_bits, ranges, unit_bits, \
     replication, distinct_owners, adaptive, audit_rate, trust_after, trust_all_workers, priority, state, units_total, arguments_total::text AS arguments_total, created_at, completed_at, derivation -> 'runs' AS derived_runs";

impl CampaignDb {
    fn into_wire(self) -> Result<Campaign> {
        Ok(Campaign {
            id: self.id,
            name: self.name,
            function: self.function,
            precision: self.precision as u32,
            judged_as: crate::domain::engine::describe_format(
                self.precision as u32,
                self.format.as_deref(),
            ),
            format: self.format,
            min_bits: self.min_bits as u32,
            ranges: self.ranges.0,
            unit_bits: self.unit_bits as u32,
            replication: self.replication as u32,
            trust_all_workers: self.trust_all_workers,
            distinct_owners: self.distinct_owners,
            adaptive: self.adaptive,
            audit_rate: self.audit_rate,
            trust_after: self.trust_after as u32,
            priority: self.priority,
            state: parse_state(&self.state)?,
            created_at: self.created_at,
            completed_at: self.completed_at,
            units_total: self.units_total,
            arguments_total: self.arguments_total,
            derived: crate::domain::engine::wire_runs(
                self.derived_runs.map(|r| r.0).unwrap_or_default(),
            ),
        })
    }
}

fn parse_state(s: &str) -> Result<CampaignState> {
    CampaignState::parse(s).ok_or_else(|| Error::Internal(format!("unknown campaign state {s}")))
}

/// A campaign ready to insert: validated fields and the units the engine cut.
pub struct CampaignInsert<'a> {
    pub name: &'a str,
    pub function: &'a str,
    pub precision: u32,
    /// The named format, or `None` for a bare precision.
    pub format: Option<&'a str>,
    pub min_bits: u32,
    pub ranges: &'a [ArgRange],
    pub unit_bits: u32,
    pub replication: u32,
    pub distinct_owners: bool,
    pub adaptive: bool,
    pub audit_rate: f64,
    pub trust_after: u32,
    pub trust_all_workers: bool,
    pub priority: i32,
    pub units: &'a [UnitSpec],
    /// The binades' weights from the plan (`None`: every weight 1 until an estimate).
    pub prior: Option<&'a crate::domain::work::PriorWeights>,
    /// What the campaign derives instead of searching (`None`: nothing).
    pub derivation: Option<&'a tmd_kernels::plan::reduce::DerivationRecord>,
}

/// Inserts a campaign and all its units, in order, in one transaction.
pub async fn create_campaign(pool: &PgPool, c: &CampaignInsert<'_>) -> Result<Campaign> {
    let total: u128 = c.units.iter().map(|u| u128::from(u.count)).sum();
    if c.units.iter().any(|u| i64::try_from(u.count).is_err()) {
        return Err(Error::BadRequest(
            "a unit holds more than 2^63 arguments".into(),
        ));
    }
    let mut tx = begin(pool, None).await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO campaigns (name, function, precision, min_bits, ranges, unit_bits, \
         replication, priority, units_total, arguments_total, distinct_owners, adaptive, \
         audit_rate, trust_after, format, trust_all_workers, derivation) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::numeric, $11, $12, $13, $14, $15, \
                 $16, $17) \
         RETURNING id",
    )
    .bind(c.name)
    .bind(c.function)
    .bind(c.precision as i32)
    .bind(c.min_bits as i32)
    .bind(Json(c.ranges))
    .bind(c.unit_bits as i32)
    .bind(c.replication as i32)
    .bind(c.priority)
    .bind(c.units.len() as i64)
    .bind(total.to_string())
    .bind(c.distinct_owners)
    .bind(c.adaptive)
    .bind(c.audit_rate)
    .bind(c.trust_after as i32)
    .bind(c.format)
    .bind(c.trust_all_workers)
    .bind(c.derivation.map(Json))
    .fetch_one(&mut *tx)
    .await?;
    insert_units(&mut tx, id, c.unit_bits, c.units).await?;
    tallies::init(&mut tx, id, c.units).await?;
    if let Some(prior) = c.prior {
        tallies::set_prior(&mut tx, id, prior).await?;
    }
    let campaign = fetch_campaign(&mut *tx, id).await?;
    tx.commit().await?;
    // A large campaign changes the table's statistics at once, and autovacuum analyzes a
    // table only after a tenth of it changed: until then the planner plans claims for the
    // table as it was (20,000-unit claims took seconds on a fresh 10-million-unit
    // campaign). A sample of 30,000 rows, once per such creation.
    if c.units.len() >= 100_000 {
        sqlx::query("ANALYZE units").execute(pool).await?;
    }
    Ok(campaign)
}

/// A run of consecutive units of one binade that the database generates itself: the units
/// `[max(start, k 2^U), min(end, (k+1) 2^U))` for `k` from `start >> U` to `(end - 1) >> U`,
/// numbered from `seq0`. The engine cuts a binade's arguments exactly so, which makes a
/// campaign of millions of units a few hundred rows of parameters (one per binade) and one
/// `generate_series` statement, instead of millions of values sent over the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
struct UnitRun {
    seq0: i32,
    negative: bool,
    exponent: i32,
    start: u128,
    end: u128,
}

/// Cuts `units` into [`UnitRun`]s; a unit that does not fit the pattern (none the engine
/// makes) is a run of its own only if it lies in one aligned block, else it is returned apart
/// with its seq, to be inserted as it is.
fn unit_runs(unit_bits: u32, units: &[UnitSpec]) -> (Vec<UnitRun>, Vec<(i32, UnitSpec)>) {
    let size = 1u128 << unit_bits.min(64);
    let (mut runs, mut literal): (Vec<UnitRun>, Vec<(i32, UnitSpec)>) = (vec![], vec![]);
    for (seq, u) in units.iter().enumerate() {
        let seq = seq as i32;
        let (first, end) = (
            u128::from(u.first),
            u128::from(u.first) + u128::from(u.count),
        );
        let one_block = first / size == (end - 1) / size;
        if let Some(r) = runs.last_mut() {
            let next_seq = r.seq0 as i64 + ((r.end - 1) / size - r.start / size) as i64 + 1;
            if r.negative == u.negative
                && r.exponent == u.exponent
                && r.end == first
                && r.end % size == 0
                && one_block
                && next_seq == i64::from(seq)
            {
                r.end = end;
                continue;
            }
        }
        if one_block {
            runs.push(UnitRun {
                seq0: seq,
                negative: u.negative,
                exponent: u.exponent,
                start: first,
                end,
            });
        } else {
            literal.push((seq, u.clone()));
        }
    }
    (runs, literal)
}

/// Inserts a new campaign's units: runs generated in the database, in statements of at most
/// about a million units (bounded memory on both sides), and the odd unit as it is.
async fn insert_units(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    unit_bits: u32,
    units: &[UnitSpec],
) -> Result<()> {
    let (runs, literal) = unit_runs(unit_bits, units);
    let size = 1u128 << unit_bits.min(64);
    let mut batch: Vec<UnitRun> = Vec::new();
    let mut in_batch = 0u128;
    for r in runs {
        in_batch += (r.end - 1) / size - r.start / size + 1;
        batch.push(r);
        if in_batch >= 1 << 20 {
            insert_runs(tx, id, size, &batch).await?;
            batch.clear();
            in_batch = 0;
        }
    }
    if !batch.is_empty() {
        insert_runs(tx, id, size, &batch).await?;
    }
    for chunk in literal.chunks(10_000) {
        let seq: Vec<i32> = chunk.iter().map(|(s, _)| *s).collect();
        let neg: Vec<bool> = chunk.iter().map(|(_, u)| u.negative).collect();
        let exp: Vec<i32> = chunk.iter().map(|(_, u)| u.exponent).collect();
        let first: Vec<String> = chunk.iter().map(|(_, u)| u.first.to_string()).collect();
        let count: Vec<i64> = chunk.iter().map(|(_, u)| u.count as i64).collect();
        sqlx::query(
            "INSERT INTO units (campaign_id, seq, negative, exponent, first, count) \
             SELECT $1, s, n, e, f::numeric, k \
             FROM UNNEST($2::int4[], $3::bool[], $4::int4[], $5::text[], $6::int8[]) \
                  AS t(s, n, e, f, k)",
        )
        .bind(id)
        .bind(&seq)
        .bind(&neg)
        .bind(&exp)
        .bind(&first)
        .bind(&count)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// One statement generating the units of `runs`.
async fn insert_runs(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    size: u128,
    runs: &[UnitRun],
) -> Result<()> {
    let seq0: Vec<i32> = runs.iter().map(|r| r.seq0).collect();
    let neg: Vec<bool> = runs.iter().map(|r| r.negative).collect();
    let exp: Vec<i32> = runs.iter().map(|r| r.exponent).collect();
    let start: Vec<String> = runs.iter().map(|r| r.start.to_string()).collect();
    let end: Vec<String> = runs.iter().map(|r| r.end.to_string()).collect();
    let k0: Vec<i64> = runs.iter().map(|r| (r.start / size) as i64).collect();
    let k1: Vec<i64> = runs.iter().map(|r| ((r.end - 1) / size) as i64).collect();
    // Significands below 2^63 (every precision but 64) are computed in int8, the rest in
    // numeric (several times slower).
    let wide = runs.iter().any(|r| r.end > i64::MAX as u128);
    let sql = if wide {
        "INSERT INTO units (campaign_id, seq, negative, exponent, first, count) \
         SELECT $1, r.seq0 + (k - r.k0)::int4, r.neg, r.exp, \
                GREATEST(r.st, k::numeric * $2::numeric), \
                (LEAST(r.en, (k + 1)::numeric * $2::numeric) \
                 - GREATEST(r.st, k::numeric * $2::numeric))::int8 \
         FROM UNNEST($3::int4[], $4::bool[], $5::int4[], $6::numeric[], $7::numeric[], \
                     $8::int8[], $9::int8[]) AS r(seq0, neg, exp, st, en, k0, k1), \
              LATERAL generate_series(r.k0, r.k1) AS k"
    } else {
        "INSERT INTO units (campaign_id, seq, negative, exponent, first, count) \
         SELECT $1, r.seq0 + (k - r.k0)::int4, r.neg, r.exp, \
                GREATEST(r.st, k * $2::int8)::numeric, \
                LEAST(r.en, (k + 1) * $2::int8) - GREATEST(r.st, k * $2::int8) \
         FROM UNNEST($3::int4[], $4::bool[], $5::int4[], $6::int8[], $7::int8[], \
                     $8::int8[], $9::int8[]) AS r(seq0, neg, exp, st, en, k0, k1), \
              LATERAL generate_series(r.k0, r.k1) AS k"
    };
    let q = sqlx::query(sql).bind(id).bind(size.to_string());
    let q = if wide {
        q.bind(&seq0).bind(&neg).bind(&exp).bind(&start).bind(&end)
    } else {
        let st: Vec<i64> = runs.iter().map(|r| r.start as i64).collect();
        let en: Vec<i64> = runs.iter().map(|r| r.end as i64).collect();
        q.bind(&seq0).bind(&neg).bind(&exp).bind(st).bind(en)
    };
    q.bind(&k0).bind(&k1).execute(&mut **tx).await?;
    Ok(())
}

async fn fetch_campaign<'e, E: sqlx::PgExecutor<'e>>(ex: E, id: i64) -> Result<Campaign> {
    let row: Option<CampaignDb> = sqlx::query_as(&format!(
        "SELECT {CAMPAIGN_COLUMNS} FROM campaigns WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(ex)
    .await?;
    row.ok_or_else(|| Error::NotFound(format!("no campaign {id}")))?
        .into_wire()
}

/// One campaign.
pub async fn get_campaign(pool: &PgPool, id: i64) -> Result<Campaign> {
    fetch_campaign(pool, id).await
}

/// All campaigns, newest first.
pub async fn list_campaigns(pool: &PgPool) -> Result<Vec<Campaign>> {
    let rows: Vec<CampaignDb> = sqlx::query_as(&format!(
        "SELECT {CAMPAIGN_COLUMNS} FROM campaigns ORDER BY id DESC"
    ))
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(CampaignDb::into_wire).collect()
}

/// Moves a campaign to `to` if the transition is allowed (pause, resume, cancel).
pub async fn set_campaign_state(pool: &PgPool, id: i64, to: CampaignState) -> Result<Campaign> {
    let mut tx = begin(pool, None).await?;
    let current: Option<String> =
        sqlx::query_scalar("SELECT state FROM campaigns WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some(current) = current else {
        tx.rollback().await?;
        return Err(Error::NotFound(format!("no campaign {id}")));
    };
    let current = parse_state(&current)?;
    if !domain::transition_allowed(current, to) {
        tx.rollback().await?;
        return Err(Error::Conflict(if current == CampaignState::Complete {
            format!(
                "campaign {id} is complete: every unit is done, there is nothing to {}",
                match to {
                    CampaignState::Paused => "pause",
                    CampaignState::Active => "resume",
                    CampaignState::Cancelled => "cancel",
                    CampaignState::Complete => "complete",
                }
            )
        } else {
            format!(
                "campaign {id} is {}; it cannot become {}",
                current.as_str(),
                to.as_str()
            )
        }));
    }
    sqlx::query("UPDATE campaigns SET state = $2 WHERE id = $1")
        .bind(id)
        .bind(to.as_str())
        .execute(&mut *tx)
        .await?;
    let c = fetch_campaign(&mut *tx, id).await?;
    tx.commit().await?;
    Ok(c)
}

fn parse_u128(s: &str) -> u128 {
    s.parse().unwrap_or(0)
}

/// Progress of a campaign: counts per state, work, rate over the last hour, ETA, hardest
/// cases. Reads the maintained counters (`tallies`), one rate snapshot and a few indexed rows,
/// never the campaign's units: its cost does not grow with the campaign.
pub async fn campaign_progress(pool: &PgPool, id: i64) -> Result<CampaignProgress> {
    let campaign = fetch_campaign(pool, id).await?;
    // Read before the counts: when nothing is left to derive, every derived case is counted.
    let (derivations_pending, derivations_failed) = if campaign.derived.is_empty() {
        (0, 0)
    } else {
        derivations::pending_counts(pool, id).await?
    };
    let t = tallies::campaign_tally(pool, id).await?;
    let info = tallies::estimate_info(pool, id).await?;
    let base = tallies::rate_base(pool, id).await?;
    let hardest = hardest_cases(pool, id, 10).await?;
    let skipped = export::skipped_summary(pool, id).await?;
    let skipped_runs = export::skipped_runs(pool, id, Some(100)).await?;
    let hr_cases_derived: i64 = if campaign.derived.is_empty() {
        0
    } else {
        sqlx::query_scalar(
            "SELECT count(*) FROM hr_cases WHERE campaign_id = $1 AND derived_from IS NOT NULL",
        )
        .bind(id)
        .fetch_one(pool)
        .await?
    };
    let quarantined_rows: Vec<(i64, bool, i32, String, i64, i32)> = sqlx::query_as(
        "SELECT id, negative, exponent, first::text, count, attempts FROM units \
         WHERE campaign_id = $1 AND state = 'quarantined' ORDER BY seq LIMIT 100",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    let count = |units: i64, args: &str| StateCount {
        units,
        arguments: args.to_string(),
    };
    let (done, leased, pending, quarantined) = (
        count(t.units_done, &t.args_done),
        count(t.units_leased, &t.args_leased),
        count(t.units_pending, &t.args_pending),
        count(t.units_quarantined, &t.args_quarantined),
    );
    let done_args = parse_u128(&t.args_done);
    let recent = tallies::window_base(pool, id, domain::work::RECENT_SECONDS).await?;
    let binades = tallies::binade_work(pool, id).await?;
    let work = domain::work::progress(&domain::work::Readings {
        total: t.work_pending + t.work_leased + t.work_done + t.work_quarantined,
        done: t.work_done,
        leased: t.work_leased,
        pending: t.work_pending,
        quarantined: t.work_quarantined,
        base: base.map(|(w, _, secs)| (w, secs)),
        seconds_per_work: info.seconds_per_work,
        backend: info.backend,
        plan_weights: info.plan_weights,
        recent: recent.map(|b| (b.work_done, b.seconds)),
        binades,
        unit_args: 2f64.powi(campaign.unit_bits as i32),
        recent_costly: recent.and_then(|b| b.costly_done),
        derivations_pending,
    });
    let rate = base.map_or(0.0, |(_, args, secs)| {
        domain::work::rate(done_args as f64, args, secs)
    });
    let waits = domain::work::WaitCounts {
        awaiting_replica: tallies::awaiting_replica(pool, id).await?,
        held: t.units_quarantined,
        paused: if campaign.state == CampaignState::Paused {
            t.units_pending
        } else {
            0
        },
    };
    let waiting = domain::work::waiting(
        waits,
        Some((id, campaign.replication, campaign.distinct_owners)),
    );
    Ok(CampaignProgress {
        campaign_id: id,
        state: campaign.state,
        total: StateCount {
            units: campaign.units_total,
            arguments: campaign.arguments_total.clone(),
        },
        complete: done.units == campaign.units_total && derivations_pending == 0,
        completed_at: campaign.completed_at,
        done,
        leased,
        pending,
        quarantined,
        percent_done: work.percent_done,
        arguments_per_second_last_hour: rate,
        eta_seconds: work.eta_seconds,
        hr_cases: t.hr_cases,
        hr_cases_derived,
        derived: campaign.derived.clone(),
        derivations_pending,
        derivations_failed,
        skipped,
        skipped_runs,
        hardest,
        quarantined_units: quarantined_rows
            .into_iter()
            .map(
                |(unit_id, negative, exponent, first, count, attempts)| QuarantinedUnit {
                    unit_id,
                    spec: UnitSpec {
                        negative,
                        exponent,
                        first: first.parse().unwrap_or(0),
                        count: count as u64,
                    },
                    attempts,
                },
            )
            .collect(),
        replication: ReplicationReport {
            results: t.results,
            void: t.results_void,
            outvoted: t.results_outvoted,
            alone: t.results_alone,
            single_untrusted: t.results_alone_untrusted,
            refuted: t.results_refuted,
            work_factor: if done_args == 0 {
                0.0
            } else {
                parse_u128(&t.results_arguments) as f64 / done_args as f64
            },
        },
        work,
        waiting,
    })
}

/// The `limit` hardest cases of a campaign: most identical bits, then smallest distance.
pub async fn hardest_cases(
    pool: &PgPool,
    campaign_id: i64,
    limit: i64,
) -> Result<Vec<StoredHrCase>> {
    let rows: Vec<HrRow> = sqlx::query_as(
        "SELECT x, bits, neg_log2_d, kind, rounded, unit_id, found_at, derived_from \
         FROM hr_cases WHERE campaign_id = $1 ORDER BY bits DESC, neg_log2_d DESC, id LIMIT $2",
    )
    .bind(campaign_id)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(StoredHrCase {
                kind: HrKind::parse(&r.kind)
                    .ok_or_else(|| Error::Internal(format!("unknown HR kind {}", r.kind)))?,
                x: r.x,
                bits: r.bits as u32,
                neg_log2_d: r.neg_log2_d,
                rounded: r.rounded,
                unit_id: r.unit_id,
                found_at: r.found_at,
                derived_from: r.derived_from,
            })
        })
        .collect()
}

#[derive(sqlx::FromRow)]
struct HrRow {
    x: String,
    bits: i32,
    neg_log2_d: f64,
    kind: String,
    rounded: String,
    unit_id: i64,
    found_at: DateTime<Utc>,
    derived_from: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Results (their recording is in `store_results`)

pub(crate) const UNIT_COLUMNS: &str = "id, campaign_id, seq, state, lease_id, fence, count, \
     negative, exponent, first::text AS first";

/// One live (not void) result of a unit.
#[derive(sqlx::FromRow)]
pub struct LiveResult {
    pub id: i64,
    pub unit_id: i64,
    pub worker_id: i64,
    pub claim: String,
    /// The digest of its cases alone (`trust::cases_digest`); `None` for results recorded
    /// before it was kept (their `claim` stands for it).
    pub cases_claim: Option<String>,
    /// The engine version that computed it: only results of one version are compared.
    pub engine: i32,
    pub verdict: String,
    /// Its verified HR-cases (distinct, all in its unit).
    pub hr_count: i32,
    /// Their canonical arguments; `None` for results recorded before they were kept.
    pub case_xs: Option<Json<Vec<String>>>,
    /// Posted by a worker of a trusted (lab) token.
    pub by_trusted: bool,
    /// Its count is improbably low for its unit (`domain::audit`).
    pub implausible: bool,
}

/// The columns of [`LiveResult`].
pub(crate) const LIVE_RESULT_COLUMNS: &str = "id, unit_id, worker_id, claim, cases_claim, engine, \
     verdict, hr_count, case_xs, by_trusted, implausible";

/// The live results of `units`, grouped by unit, each unit's in id order (the newest last):
/// what settling a unit's replicas reads, after a post and after a quarantine alike.
pub(crate) async fn live_results_by_unit(
    tx: &mut Transaction<'_, Postgres>,
    units: &[i64],
) -> Result<std::collections::HashMap<i64, Vec<LiveResult>>> {
    let live: Vec<LiveResult> = sqlx::query_as(&format!(
        "SELECT {LIVE_RESULT_COLUMNS} FROM results \
         WHERE unit_id = ANY($1) AND NOT void ORDER BY unit_id, id"
    ))
    .bind(units)
    .fetch_all(&mut **tx)
    .await?;
    let mut by_unit: std::collections::HashMap<i64, Vec<LiveResult>> =
        std::collections::HashMap::new();
    for r in live {
        by_unit.entry(r.unit_id).or_default().push(r);
    }
    Ok(by_unit)
}

/// The verified HR-cases standing in each of `units`: those any result reported (void or not:
/// MPFR confirmed them; an admin's removals are gone from them) and the known cases the admin
/// loaded, by canonical argument; not the cases derived from them (arguments of other
/// binades, which no result of the unit lists). A unit without any is absent.
pub(crate) async fn facts_by_unit<'e, E: sqlx::PgExecutor<'e>>(
    ex: E,
    units: &[i64],
) -> Result<std::collections::HashMap<i64, crate::domain::trust::UnitFacts>> {
    let rows: Vec<(i64, String, bool)> = sqlx::query_as(
        "SELECT unit_id, x, false FROM hr_cases WHERE unit_id = ANY($1) AND derived_from IS NULL \
         UNION ALL SELECT unit_id, x, true FROM known_cases WHERE unit_id = ANY($1)",
    )
    .bind(units)
    .fetch_all(ex)
    .await?;
    let mut by_unit: std::collections::HashMap<i64, crate::domain::trust::UnitFacts> =
        std::collections::HashMap::new();
    for (unit, x, known) in rows {
        let f = by_unit.entry(unit).or_default();
        if known {
            f.known.insert(x.clone());
        }
        f.all.insert(x);
    }
    Ok(by_unit)
}

/// Begins a transaction on `pool` (`statement` in place of `BEGIN`), safe to cancel. sqlx
/// leaves a connection inside the transaction when the future is dropped between sending
/// `BEGIN` and its answer (its guard rolls back only a transaction it has counted), and that
/// connection then runs its next users' statements inside it, holding their locks until some
/// later user commits. A request cut off by its deadline or by its client drops its future
/// anywhere (seen as "there is already a transaction in progress" under a thousand GPUs'
/// start), so the `BEGIN` runs in a task of its own: it finishes, and the transaction nobody
/// waits for any more is dropped, rolled back, and its connection returned clean.
pub async fn begin(
    pool: &PgPool,
    statement: Option<&'static str>,
) -> Result<Transaction<'static, Postgres>> {
    let pool = pool.clone();
    let task = tokio::spawn(async move {
        match statement {
            Some(s) => pool.begin_with(s).await,
            None => pool.begin().await,
        }
    });
    match task.await {
        Ok(tx) => Ok(tx?),
        Err(e) => Err(Error::Internal(format!("beginning a transaction: {e}"))),
    }
}

/// Runs `attempt` again, at most `retries` more times, while it fails with a deadlock or a
/// serialization failure: the transaction was rolled back, so running it again is safe.
pub(crate) async fn retry_transient<T, F, Fut>(retries: u32, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(Error::Database(e)) if crate::error::is_transient(&e) && tries < retries => {
                tries += 1;
                tracing::debug!(error = %e, "retrying a transaction after a deadlock");
            }
            other => return other,
        }
    }
}

/// How the transactions of a result post begin: index plans only (see `record_results`), and
/// generic plans. Their statements read and write a batch's rows by key through `= ANY($1)`,
/// whose best plan does not depend on the arrays' contents; PostgreSQL would otherwise make a
/// custom plan for most executions (a profile at 10,000 unit results/s: 7% of its CPU in the
/// planner and the plan cache).
pub(crate) const HOT_BEGIN: &str =
    "BEGIN; SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan";

/// [`HOT_BEGIN`], read-only (the pre-check of a post).
pub(crate) const HOT_BEGIN_READ_ONLY: &str = "BEGIN READ ONLY; SET LOCAL enable_seqscan = off; \
     SET LOCAL plan_cache_mode = force_generic_plan";

/// Units of campaign `c` pending or quarantined, from its maintained counters (a few rows by
/// key, whatever the campaign's size): "is it near its end" for the completion checks and
/// "has it work" for claims. Probing the units' own indexes for it stepped over the entries of
/// every unit claimed or finished since the last vacuum (the pending index's front, or its
/// end once a campaign's last lane is leased; the open-units index as a whole): the
/// sweeper's completion pass took 5 s a campaign of ten million units in the farm bench.
pub(crate) const UNITS_WAITING: &str = "(SELECT COALESCE(sum(t.units_pending \
     + t.units_quarantined), 0) FROM campaign_tallies t WHERE t.campaign_id = c.id)";

/// Marks complete, in the caller's transaction, those of `campaigns` (active or paused) whose
/// units are all done and whose base results' cases are all derived (none queued in
/// `pending_derivations`), as this transaction sees them; returns their ids.
///
/// Two transactions that finish a campaign's last two units at once must not both miss it
/// (each seeing the other's unit still leased): so when no unit of a campaign is pending or
/// quarantined any more, the campaign's row is locked (in id order) before the final check,
/// which then runs after the other transaction committed. While units are still pending the
/// lock is skipped, so the campaign row is not a point every result waits on; the sweeper
/// ([`complete_finished_campaigns`]) catches the rare campaign finished by a transaction that
/// saw a pending unit which another finished in the meantime.
pub async fn complete_campaigns(
    tx: &mut Transaction<'_, Postgres>,
    campaigns: &[i64],
) -> Result<Vec<i64>> {
    if campaigns.is_empty() {
        return Ok(Vec::new());
    }
    // Every batch that finishes a unit asks this, so it reads the counters ([`UNITS_WAITING`]).
    let near_end: Vec<(i64,)> = sqlx::query_as(&format!(
        "SELECT c.id FROM campaigns c WHERE c.id = ANY($1) AND c.state IN ('active', 'paused') \
           AND {UNITS_WAITING} = 0 \
         ORDER BY c.id FOR NO KEY UPDATE"
    ))
    .bind(campaigns)
    .fetch_all(&mut **tx)
    .await?;
    if near_end.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = near_end.into_iter().map(|(id,)| id).collect();
    // The clock, not `now()`: a transaction's start, seconds early for a derivation batch
    // (or a large post) that ends the campaign.
    let done: Vec<(i64,)> = sqlx::query_as(
        "UPDATE campaigns c SET state = 'complete', completed_at = clock_timestamp() \
         WHERE c.id = ANY($1) AND c.state IN ('active', 'paused') \
           AND NOT EXISTS (SELECT 1 FROM units u WHERE u.campaign_id = c.id AND u.state <> 'done') \
           AND NOT EXISTS (SELECT 1 FROM pending_derivations p WHERE p.campaign_id = c.id) \
         RETURNING c.id",
    )
    .bind(&ids)
    .fetch_all(&mut **tx)
    .await?;
    Ok(done.into_iter().map(|(id,)| id).collect())
}

/// Makes active again, in the caller's transaction, the complete campaigns of `units` that
/// have a unit not done any more (reopened by a quarantine's purge, or requeued by an admin),
/// and clears their completion time.
pub async fn reopen_campaigns(tx: &mut Transaction<'_, Postgres>, units: &[i64]) -> Result<()> {
    let reopened: Vec<(i64,)> = sqlx::query_as(
        "UPDATE campaigns c SET state = 'active', completed_at = NULL \
         WHERE c.state = 'complete' AND c.id IN ( \
             SELECT campaign_id FROM units WHERE id = ANY($1) AND state <> 'done') \
         RETURNING c.id",
    )
    .bind(units)
    .fetch_all(&mut **tx)
    .await?;
    for (id,) in reopened {
        tracing::info!(
            campaign.id = id,
            "complete campaign active again: a unit was reopened"
        );
    }
    Ok(())
}

/// Marks complete every active or paused campaign whose units are all done and whose
/// derivations are all recorded (the sweeper's backstop of [`complete_campaigns`]); returns
/// their ids. The completion time is when its last unit was done, or now for a campaign that
/// derives (its last derivation ended just now).
pub async fn complete_finished_campaigns(pool: &PgPool) -> Result<Vec<i64>> {
    // Only campaigns near their end ([`UNITS_WAITING`]) are checked unit by unit.
    let done: Vec<(i64,)> = sqlx::query_as(&format!(
        "WITH near_end AS MATERIALIZED ( \
             SELECT c.id FROM campaigns c \
             WHERE c.state IN ('active', 'paused') AND {UNITS_WAITING} = 0) \
         UPDATE campaigns c SET state = 'complete', \
             completed_at = CASE WHEN c.derivation IS NOT NULL THEN clock_timestamp() \
                 ELSE COALESCE((SELECT max(done_at) FROM units u \
                                WHERE u.campaign_id = c.id AND u.state = 'done'), now()) END \
         FROM near_end WHERE c.id = near_end.id AND c.state IN ('active', 'paused') \
           AND NOT EXISTS (SELECT 1 FROM units u WHERE u.campaign_id = c.id AND u.state <> 'done') \
           AND NOT EXISTS (SELECT 1 FROM pending_derivations p WHERE p.campaign_id = c.id) \
         RETURNING c.id"
    ))
    .fetch_all(pool)
    .await?;
    Ok(done.into_iter().map(|(id,)| id).collect())
}

/// Units per state over all campaigns, for `/metrics`: from the maintained counters.
pub async fn unit_state_counts(pool: &PgPool) -> Result<Vec<(String, i64)>> {
    tallies::unit_state_counts(pool).await
}
