//! The unlocked first judgement of posted results (four queries for any number of them),
//! before their MPFR verification; `results.rs` judges them again under locks when it records
//! them.

use crate::domain::{self, Judgement, LeaseRow, PriorResult, UnitRow};
use crate::error::{Error, Result};
use crate::store;
use crate::store::trust as store_trust;
use sqlx::PgPool;
use std::collections::HashMap;
use tmd_wire::{UnitResult, UnitSpec};

/// A posted result, as the first judgement sees it.
pub struct Posted<'a> {
    pub lease_id: i64,
    pub unit_id: i64,
    pub result: &'a UnitResult,
}

/// What the verifier needs to know about a post that passed the first check.
pub struct PostContext {
    pub judgement: Judgement,
    pub campaign_id: i64,
    pub function: String,
    pub precision: u32,
    /// The campaign's named format; `None` for a bare precision.
    pub format: Option<String>,
    pub min_bits: u32,
    pub unit: UnitSpec,
    /// The unit's cases an admin removed (canonical arguments): a result reporting one again
    /// is refused.
    pub removed: Vec<String>,
}

/// A unit row's range of arguments.
pub(super) fn spec_of(u: &UnitRow) -> Result<UnitSpec> {
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
/// verification can run outside any transaction; [`record_results`](super::results::record_results) judges again under locks.
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
    let mut tx = super::begin(pool, Some(store::HOT_BEGIN_READ_ONLY)).await?;
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
    // Cases an admin removed: a small table, read by unit.
    let removed_rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT unit_id, x FROM removed_cases WHERE unit_id = ANY($1)")
            .bind(&unit_ids)
            .fetch_all(&mut *tx)
            .await?;
    let mut removed: HashMap<i64, Vec<String>> = HashMap::new();
    for (unit, x) in removed_rows {
        removed.entry(unit).or_default().push(x);
    }
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
                campaign_id: unit.campaign_id,
                function: function.clone(),
                precision: *precision as u32,
                format: format.clone(),
                min_bits: *min_bits as u32,
                unit: spec_of(unit)?,
                removed: removed.get(&unit.id).cloned().unwrap_or_default(),
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
    let wanted = super::results::lease_pairs(unit_ids, lease_ids);
    Ok(rows
        .into_iter()
        .filter(|r| wanted.contains(&(r.unit_id, r.lease_id)))
        .map(|r| ((r.unit_id, r.lease_id), r.prior))
        .collect())
}
