//! Storage for the views of a campaign (exports, dashboard): the HR-cases as a row stream,
//! coverage per binade and the hardness histogram. Read-only queries over `&PgPool`, kept apart
//! from [`crate::store`] so that the lease and result paths stay in one place.

use crate::domain::engine;
use crate::error::{Error, Result};
use futures_util::stream::{BoxStream, StreamExt};
use sqlx::PgPool;
use std::sync::LazyLock;
use tmd_wire::{ExportedHrCase, HardnessBin, HrKind, SkippedRun, SkippedSummary};

/// Which HR-cases of a campaign to list, and in which order.
#[derive(Debug, Clone)]
pub struct HrFilter {
    pub campaign_id: i64,
    /// Only cases with at least this many identical bits.
    pub min_bits: u32,
    /// Only cases of this kind (both when absent).
    pub kind: Option<HrKind>,
    pub order: HrOrder,
    /// At most this many (all when absent).
    pub limit: Option<i64>,
}

/// The order of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HrOrder {
    /// By the value of the argument, smallest first (negative arguments first).
    Argument,
    /// Hardest first: most identical bits, then smallest distance, then by argument.
    Hardness,
}

/// The order of arguments by value, derived from the stored hex text itself.
///
/// Every stored `x` is the engine's canonical form `[-]0x1[.<frac>]p<±exp>` (the server
/// re-verifies and rewrites each case before storing it), with lowercase digits. So the value
/// order is: sign (negative first), then the exponent (descending for negatives), then the
/// fraction digits padded to 16 hex digits and compared bytewise (`COLLATE "C"`, where
/// `0-9a-f` sort as the digits they are; descending for negatives). No stored sort key means
/// no migration, and the order cannot drift from `x`. `id` breaks ties (there are none: `x`
/// is unique per campaign) so the order is total.
const ARGUMENT_ORDER: &str = r#"
    (left(x, 1) = '-') DESC,
    CASE WHEN left(x, 1) = '-' THEN -substring(x FROM 'p([+-][0-9]+)$')::int
         ELSE substring(x FROM 'p([+-][0-9]+)$')::int END,
    CASE WHEN left(x, 1) = '-' THEN NULL
         ELSE rpad(COALESCE(substring(x FROM '\.([0-9a-f]+)p'), ''), 16, '0') COLLATE "C" END ASC,
    CASE WHEN left(x, 1) = '-'
         THEN rpad(COALESCE(substring(x FROM '\.([0-9a-f]+)p'), ''), 16, '0') COLLATE "C" END DESC,
    id"#;

/// A campaign's skipped runs in argument order, merged where adjacent with one reason and
/// rule (`engine::merge_runs`: whole binades of underflow or of a trivial region are one
/// run), at most `limit` of them. With a limit, at most [`MERGE_WINDOW`] stored runs are read
/// (a progress page); without, all of them (an export).
pub async fn skipped_runs(
    pool: &PgPool,
    campaign_id: i64,
    limit: Option<i64>,
) -> Result<Vec<SkippedRun>> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT x AS first, last, count, reason, rule FROM ( \
                 SELECT first AS x, last, count, reason, rule, unit_id AS id \
                 FROM skipped_runs WHERE campaign_id = $1) s \
             ORDER BY {ARGUMENT_ORDER} LIMIT $2"
        )
    });
    let (precision, format): (i32, Option<String>) =
        sqlx::query_as("SELECT precision, format FROM campaigns WHERE id = $1")
            .bind(campaign_id)
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no campaign {campaign_id}")))?;
    let rows: Vec<(String, String, i64, String, String)> = sqlx::query_as(&SQL)
        .bind(campaign_id)
        .bind(limit.map(|_| MERGE_WINDOW))
        .fetch_all(pool)
        .await?;
    let runs = rows
        .into_iter()
        .map(|(first, last, count, reason, rule)| SkippedRun {
            first,
            last,
            count: count as u64,
            reason,
            rule,
        })
        .collect();
    let mut runs = match engine::stored_format(precision.max(0) as u32, format.as_deref()) {
        Ok(fmt) => engine::merge_runs(fmt, runs),
        Err(_) => runs,
    };
    if let Some(limit) = limit {
        runs.truncate(limit.max(0) as usize);
    }
    Ok(runs)
}

/// The stored runs a limited listing reads and merges.
pub const MERGE_WINDOW: i64 = 20_000;

/// A campaign's skipped arguments per reason.
pub async fn skipped_summary(pool: &PgPool, campaign_id: i64) -> Result<Vec<SkippedSummary>> {
    let rows: Vec<(String, String, i64, String)> = sqlx::query_as(
        "SELECT reason, min(rule), count(*), sum(count)::text FROM skipped_runs \
         WHERE campaign_id = $1 GROUP BY reason ORDER BY reason",
    )
    .bind(campaign_id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(reason, rule, runs, arguments)| SkippedSummary {
            reason,
            rule,
            runs,
            arguments,
        })
        .collect())
}

#[derive(sqlx::FromRow)]
struct ExportRow {
    x: String,
    bits: i32,
    neg_log2_d: f64,
    kind: String,
    rounded: String,
    unit_id: i64,
}

impl ExportRow {
    fn into_wire(self) -> Result<ExportedHrCase> {
        Ok(ExportedHrCase {
            kind: HrKind::parse(&self.kind)
                .ok_or_else(|| Error::Internal(format!("unknown HR kind {}", self.kind)))?,
            x: self.x,
            bits: self.bits as u32,
            neg_log2_d: self.neg_log2_d,
            rounded: self.rounded,
            unit_id: self.unit_id,
        })
    }
}

/// The SQL of [`hr_cases`] for an order, built once.
fn hr_cases_sql(order: HrOrder) -> &'static str {
    static BY_ARGUMENT: LazyLock<String> = LazyLock::new(|| select_ordered_by(ARGUMENT_ORDER));
    static BY_HARDNESS: LazyLock<String> = LazyLock::new(|| {
        select_ordered_by(&format!("bits DESC, neg_log2_d DESC, {ARGUMENT_ORDER}"))
    });
    match order {
        HrOrder::Argument => &BY_ARGUMENT,
        HrOrder::Hardness => &BY_HARDNESS,
    }
}

fn select_ordered_by(order: &str) -> String {
    // `LIMIT NULL` is no limit.
    format!(
        "SELECT x, bits, neg_log2_d, kind, rounded, unit_id FROM hr_cases \
         WHERE campaign_id = $1 AND bits >= $2 AND ($3::text IS NULL OR kind = $3) \
         ORDER BY {order} LIMIT $4"
    )
}

/// The HR-cases matching `filter`, as a stream of rows read from the database as the consumer
/// pulls them, so a large export never sits in memory.
pub fn hr_cases<'p>(pool: &'p PgPool, filter: &HrFilter) -> BoxStream<'p, Result<ExportedHrCase>> {
    sqlx::query_as::<_, ExportRow>(hr_cases_sql(filter.order))
        .bind(filter.campaign_id)
        .bind(i32::try_from(filter.min_bits).unwrap_or(i32::MAX))
        .bind(filter.kind.map(HrKind::as_str))
        .bind(filter.limit)
        .fetch(pool)
        .map(|row| row.map_err(Error::from).and_then(ExportRow::into_wire))
        .boxed()
}

/// How many HR-cases of a campaign have each number of identical bits, per kind.
pub async fn hardness_histogram(pool: &PgPool, campaign_id: i64) -> Result<Vec<HardnessBin>> {
    let rows: Vec<(i32, i64, i64)> = sqlx::query_as(
        "SELECT bits, count(*) FILTER (WHERE kind = 'fp'), count(*) FILTER (WHERE kind = 'mid') \
         FROM hr_cases WHERE campaign_id = $1 GROUP BY bits ORDER BY bits",
    )
    .bind(campaign_id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(bits, fp, mid)| HardnessBin {
            bits: bits as u32,
            fp,
            mid,
        })
        .collect())
}
