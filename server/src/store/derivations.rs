//! What each campaign derives instead of searching (its `derivation` column, read once per
//! process: the record never changes after the campaign's creation), and the queue of base
//! results whose cases wait to be derived (`pending_derivations`).

use crate::error::{Error, Result};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgPool, Postgres, Transaction};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tmd_kernels::numbers::format::Format;
use tmd_kernels::plan::reduce::{Derivation, DerivationRecord};
use tmd_wire::{HrCase, HrKind};

/// The campaigns' derivations met so far (`None`: the campaign derives nothing).
#[derive(Debug, Default)]
pub struct DerivationCache {
    known: Mutex<HashMap<i64, Option<Arc<Derivation>>>>,
}

impl DerivationCache {
    /// Campaign `campaign_id`'s derivation on its format `fmt`, from the database the first
    /// time.
    pub async fn get(
        &self,
        pool: &PgPool,
        campaign_id: i64,
        fmt: Format,
    ) -> Result<Option<Arc<Derivation>>> {
        if let Some(d) = self.lock().get(&campaign_id) {
            return Ok(d.clone());
        }
        let record: Option<Json<DerivationRecord>> =
            sqlx::query_scalar("SELECT derivation FROM campaigns WHERE id = $1")
                .bind(campaign_id)
                .fetch_one(pool)
                .await?;
        let derivation = match record {
            None => None,
            Some(Json(r)) => Some(Arc::new(Derivation::from_record(&r, fmt).map_err(|e| {
                Error::Internal(format!("campaign {campaign_id}'s derivation: {e}"))
            })?)),
        };
        self.lock().insert(campaign_id, derivation.clone());
        Ok(derivation)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Option<Arc<Derivation>>>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A queued result whose base cases wait to be derived: where they go and what they are.
#[derive(Debug)]
pub struct Queued {
    pub result_id: i64,
    pub campaign_id: i64,
    pub unit_id: i64,
    pub function: String,
    pub precision: u32,
    pub format: Option<String>,
    pub min_bits: u32,
    /// The result's own cases as the server stored them (never derived ones).
    pub cases: Vec<HrCase>,
}

/// A queued result's row, with its campaign's terms.
#[derive(sqlx::FromRow)]
struct QueuedRow {
    result_id: i64,
    campaign_id: i64,
    unit_id: i64,
    function: String,
    precision: i32,
    format: Option<String>,
    min_bits: i32,
}

/// Takes up to `limit` queued results that no other transaction holds, oldest first, locked
/// by `tx` until it ends, with their stored base cases. A row that failed since `since` (this
/// process's start) is left for the next process.
pub async fn take_pending(
    tx: &mut Transaction<'_, Postgres>,
    limit: i64,
    since: DateTime<Utc>,
) -> Result<Vec<Queued>> {
    let rows: Vec<QueuedRow> = sqlx::query_as(
        "SELECT q.result_id, q.campaign_id, r.unit_id, c.function, c.precision, c.format, \
                c.min_bits \
         FROM pending_derivations q JOIN results r ON r.id = q.result_id \
              JOIN campaigns c ON c.id = q.campaign_id \
         WHERE q.failed_at IS NULL OR q.failed_at < $2 \
         ORDER BY q.queued_at, q.result_id LIMIT $1 FOR UPDATE OF q SKIP LOCKED",
    )
    .bind(limit)
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    let (results, units): (Vec<i64>, Vec<i64>) =
        rows.iter().map(|r| (r.result_id, r.unit_id)).unzip();
    // A case removed meanwhile (`known::remove` locks the units first) must not come back as
    // derived copies: the base cases are read under a share lock of their units.
    sqlx::query("SELECT 1 FROM units WHERE id = ANY($1) ORDER BY id FOR SHARE")
        .bind(&units)
        .execute(&mut **tx)
        .await?;
    let cases: Vec<(i64, String, i32, f64, String, String)> = sqlx::query_as(
        "SELECT result_id, x, bits, neg_log2_d, kind, rounded FROM hr_cases \
         WHERE unit_id = ANY($1) AND result_id = ANY($2) AND derived_from IS NULL ORDER BY id",
    )
    .bind(&units)
    .bind(&results)
    .fetch_all(&mut **tx)
    .await?;
    let mut by_result: HashMap<i64, Vec<HrCase>> = HashMap::new();
    for (result, x, bits, neg_log2_d, kind, rounded) in cases {
        let kind = HrKind::parse(&kind)
            .ok_or_else(|| Error::Internal(format!("a stored HR-case has kind {kind}")))?;
        by_result.entry(result).or_default().push(HrCase {
            x,
            bits: bits as u32,
            neg_log2_d,
            kind,
            rounded,
        });
    }
    Ok(rows
        .into_iter()
        .map(|r| Queued {
            cases: by_result.remove(&r.result_id).unwrap_or_default(),
            result_id: r.result_id,
            campaign_id: r.campaign_id,
            unit_id: r.unit_id,
            function: r.function,
            precision: r.precision as u32,
            format: r.format,
            min_bits: r.min_bits.max(0) as u32,
        })
        .collect())
}

/// Rows per insert statement: a result of many cases derived into hundreds of binades is
/// hundreds of thousands of rows, whose parameters are better sent in pieces; 20,000 rows took
/// 1.0-1.4 s on an H100 machine's PostgreSQL, each logged as a slow statement.
const ROWS_PER_INSERT: usize = 5_000;

/// Records, in `tx`, the derived cases of the results `done` took (each with its base case),
/// removes them from the queue, and completes the campaigns this leaves finished. Returns the
/// campaigns completed.
pub async fn record_derived(
    tx: &mut Transaction<'_, Postgres>,
    done: &[(&Queued, Vec<(String, HrCase)>)],
) -> Result<Vec<i64>> {
    let rows: Vec<(&Queued, &String, &HrCase)> = done
        .iter()
        .flat_map(|(q, derived)| derived.iter().map(move |(from, c)| (*q, from, c)))
        .collect();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let col = |f: &dyn Fn(&Queued) -> i64| chunk.iter().map(|r| f(r.0)).collect::<Vec<_>>();
        let (campaign, unit, result) = (
            col(&|q| q.campaign_id),
            col(&|q| q.unit_id),
            col(&|q| q.result_id),
        );
        let from: Vec<&str> = chunk.iter().map(|r| r.1.as_str()).collect();
        let x: Vec<&str> = chunk.iter().map(|r| r.2.x.as_str()).collect();
        let bits: Vec<i32> = chunk.iter().map(|r| r.2.bits as i32).collect();
        let d: Vec<f64> = chunk.iter().map(|r| r.2.neg_log2_d).collect();
        let kind: Vec<&str> = chunk.iter().map(|r| r.2.kind.as_str()).collect();
        let rounded: Vec<&str> = chunk.iter().map(|r| r.2.rounded.as_str()).collect();
        sqlx::query(
            "INSERT INTO hr_cases (campaign_id, unit_id, result_id, x, bits, neg_log2_d, kind, \
                                   rounded, derived_from) \
             SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::int8[], $4::text[], $5::int4[], \
                                  $6::float8[], $7::text[], $8::text[], $9::text[]) \
             ON CONFLICT (campaign_id, x) DO NOTHING",
        )
        .bind(&campaign)
        .bind(&unit)
        .bind(&result)
        .bind(&x)
        .bind(&bits)
        .bind(&d)
        .bind(&kind)
        .bind(&rounded)
        .bind(&from)
        .execute(&mut **tx)
        .await?;
    }
    let results: Vec<i64> = done.iter().map(|(q, _)| q.result_id).collect();
    sqlx::query("DELETE FROM pending_derivations WHERE result_id = ANY($1)")
        .bind(&results)
        .execute(&mut **tx)
        .await?;
    let mut campaigns: Vec<i64> = done.iter().map(|(q, _)| q.campaign_id).collect();
    campaigns.sort_unstable();
    campaigns.dedup();
    super::complete_campaigns(tx, &campaigns).await
}

/// Marks queued results as failed (`why`); they wait for the next process.
pub async fn mark_failed(pool: &PgPool, results: &[i64], why: &str) -> Result<()> {
    sqlx::query(
        "UPDATE pending_derivations SET failure = $2, failed_at = now() \
         WHERE result_id = ANY($1)",
    )
    .bind(results)
    .bind(why)
    .execute(pool)
    .await?;
    Ok(())
}

/// A campaign's queued results: how many, and how many of them failed.
pub async fn pending_counts(pool: &PgPool, campaign_id: i64) -> Result<(i64, i64)> {
    Ok(sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE failure IS NOT NULL) \
         FROM pending_derivations WHERE campaign_id = $1",
    )
    .bind(campaign_id)
    .fetch_one(pool)
    .await?)
}
