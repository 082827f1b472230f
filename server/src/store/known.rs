//! Storage of known cases (ringers): HR-cases the admin loads and the server verified, kept
//! from workers, against which every result of their unit is judged. Loading them judges the
//! results already recorded in those units again (`store::trust::resettle`).

use crate::error::{Error, Result};
use crate::store::trust::{self as store_trust, TouchedUnit};
use sqlx::PgPool;
use tmd_wire::HrCase;

/// A verified known case and where its argument lies: (sign, exponent, significand).
pub struct Known {
    pub place: (bool, i32, u64),
    pub case: HrCase,
}

/// What loading known cases did.
#[derive(Debug, Default)]
pub struct Loaded {
    /// New known cases stored.
    pub loaded: u64,
    /// Known before (the same argument).
    pub already_known: u64,
    /// Arguments verified but outside every unit of the campaign.
    pub outside: Vec<String>,
    /// Done units that are no longer done: their results lacked a known case.
    pub units_reopened: u64,
    /// Workers whose results a known case refuted: to check against the bar.
    pub workers: Vec<i64>,
}

#[derive(sqlx::FromRow)]
struct UnitPlace {
    id: i64,
    negative: bool,
    exponent: i32,
    first: String,
    count: i64,
}

/// Stores `cases` as known cases of campaign `campaign_id`, in one transaction, and settles
/// the units they fall in again: a result without one of them is refuted, and a unit that
/// rested on such results goes back to the pool.
pub async fn load(pool: &PgPool, campaign_id: i64, cases: &[Known]) -> Result<Loaded> {
    let mut tx = pool.begin().await?;
    let found: Option<(i64,)> = sqlx::query_as("SELECT id FROM campaigns WHERE id = $1")
        .bind(campaign_id)
        .fetch_optional(&mut *tx)
        .await?;
    if found.is_none() {
        return Err(Error::NotFound(format!("no campaign {campaign_id}")));
    }
    // Only the binades that hold a case are read, and searched here: units have no index by
    // argument, and a known case is rare enough that this costs little.
    let (neg, exp): (Vec<bool>, Vec<i32>) = cases.iter().map(|k| (k.place.0, k.place.1)).unzip();
    let mut units: Vec<UnitPlace> = sqlx::query_as(
        "SELECT id, negative, exponent, first::text AS first, count FROM units \
         WHERE campaign_id = $1 AND (negative, exponent) IN \
               (SELECT * FROM UNNEST($2::bool[], $3::int4[]))",
    )
    .bind(campaign_id)
    .bind(&neg)
    .bind(&exp)
    .fetch_all(&mut *tx)
    .await?;
    let key = |u: &UnitPlace| (u.negative, u.exponent, u.first.parse::<u64>().unwrap_or(0));
    units.sort_by_key(key);
    let mut loaded = Loaded::default();
    let (mut k_unit, mut k_x, mut k_bits, mut k_d, mut k_kind, mut k_rounded) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for k in cases {
        let at = units.partition_point(|u| key(u) <= k.place);
        let unit = at.checked_sub(1).map(|i| &units[i]).filter(|u| {
            let (n, e, first) = key(u);
            (n, e) == (k.place.0, k.place.1)
                && u128::from(k.place.2) < u128::from(first) + u128::from(u.count as u64)
        });
        let Some(unit) = unit else {
            loaded.outside.push(k.case.x.clone());
            continue;
        };
        k_unit.push(unit.id);
        k_x.push(k.case.x.as_str());
        k_bits.push(k.case.bits as i32);
        k_d.push(k.case.neg_log2_d);
        k_kind.push(k.case.kind.as_str());
        k_rounded.push(k.case.rounded.as_str());
    }
    let new_units: Vec<(i64,)> = sqlx::query_as(
        "INSERT INTO known_cases (campaign_id, unit_id, x, bits, neg_log2_d, kind, rounded) \
         SELECT $1, * FROM UNNEST($2::int8[], $3::text[], $4::int4[], $5::float8[], \
                                  $6::text[], $7::text[]) \
         ON CONFLICT (campaign_id, x) DO NOTHING RETURNING unit_id",
    )
    .bind(campaign_id)
    .bind(&k_unit)
    .bind(&k_x)
    .bind(&k_bits)
    .bind(&k_d)
    .bind(&k_kind)
    .bind(&k_rounded)
    .fetch_all(&mut *tx)
    .await?;
    loaded.loaded = new_units.len() as u64;
    loaded.already_known = (k_unit.len() - new_units.len()) as u64;
    let mut ids: Vec<i64> = new_units.into_iter().map(|(u,)| u).collect();
    ids.sort_unstable();
    ids.dedup();
    // Lock order as everywhere: units in id order, then workers (in `resettle`).
    let mut touched: Vec<TouchedUnit> = sqlx::query_as(
        "SELECT u.id, u.state, u.lease_id, c.replication \
         FROM units u JOIN campaigns c ON c.id = u.campaign_id \
         WHERE u.id = ANY($1) ORDER BY u.id FOR UPDATE OF u",
    )
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    // A post that waited on these locks reads `proven` after this commits, and so the cases.
    sqlx::query("UPDATE units SET proven = true WHERE id = ANY($1)")
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
    // Only units with results have anything to judge again.
    let judged: Vec<(i64,)> =
        sqlx::query_as("SELECT DISTINCT unit_id FROM results WHERE unit_id = ANY($1) AND NOT void")
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await?;
    let judged: std::collections::HashSet<i64> = judged.into_iter().map(|(u,)| u).collect();
    touched.retain(|u| judged.contains(&u.id));
    let (changes, reopened) = store_trust::resettle(&mut tx, &touched).await?;
    tx.commit().await?;
    loaded.units_reopened = reopened;
    loaded.workers = changes.outvoted_workers();
    Ok(loaded)
}

/// How many known cases a campaign holds.
pub async fn count(pool: &PgPool, campaign_id: i64) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM known_cases WHERE campaign_id = $1")
            .bind(campaign_id)
            .fetch_one(pool)
            .await?,
    )
}
