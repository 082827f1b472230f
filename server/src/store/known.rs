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

/// A known case and the unit it falls in.
pub struct Placed {
    pub unit_id: i64,
    pub unit: tmd_wire::UnitSpec,
    pub known: Known,
}

/// What loading known cases did.
#[derive(Debug, Default)]
pub struct Loaded {
    /// New known cases stored.
    pub loaded: u64,
    /// Known before (the same argument).
    pub already_known: u64,
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

/// The units of campaign `campaign_id` that `cases` fall in, and the arguments outside every
/// unit (returned apart, in order).
pub async fn place(
    pool: &PgPool,
    campaign_id: i64,
    cases: Vec<Known>,
) -> Result<(Vec<Placed>, Vec<String>)> {
    let found: Option<(i64,)> = sqlx::query_as("SELECT id FROM campaigns WHERE id = $1")
        .bind(campaign_id)
        .fetch_optional(pool)
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
    .fetch_all(pool)
    .await?;
    let key = |u: &UnitPlace| (u.negative, u.exponent, u.first.parse::<u64>().unwrap_or(0));
    units.sort_by_key(key);
    let (mut placed, mut outside) = (Vec::new(), Vec::new());
    for k in cases {
        let at = units.partition_point(|u| key(u) <= k.place);
        let unit = at.checked_sub(1).map(|i| &units[i]).filter(|u| {
            let (n, e, first) = key(u);
            (n, e) == (k.place.0, k.place.1)
                && u128::from(k.place.2) < u128::from(first) + u128::from(u.count as u64)
        });
        match unit {
            Some(u) => placed.push(Placed {
                unit_id: u.id,
                unit: tmd_wire::UnitSpec {
                    negative: u.negative,
                    exponent: u.exponent,
                    first: key(u).2,
                    count: u.count as u64,
                },
                known: k,
            }),
            None => outside.push(k.case.x),
        }
    }
    Ok((placed, outside))
}

/// Stores `cases` (placed by [`place`]) as known cases of campaign `campaign_id`, in one
/// transaction, and settles the units they fall in again: a result without one of them is
/// refuted, and a unit that rested on such results goes back to the pool.
pub async fn load(pool: &PgPool, campaign_id: i64, cases: &[Placed]) -> Result<Loaded> {
    let mut tx = super::begin(pool, None).await?;
    let mut loaded = Loaded::default();
    let (mut k_unit, mut k_x, mut k_bits, mut k_d, mut k_kind, mut k_rounded) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for p in cases {
        let c = &p.known.case;
        k_unit.push(p.unit_id);
        k_x.push(c.x.as_str());
        k_bits.push(c.bits as i32);
        k_d.push(c.neg_log2_d);
        k_kind.push(c.kind.as_str());
        k_rounded.push(c.rounded.as_str());
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
    // A post that waited on these locks reads `proven` after this commits, and so the cases.
    let (changes, reopened) = rejudge(&mut tx, &ids, true).await?;
    tx.commit().await?;
    loaded.units_reopened = reopened;
    loaded.workers = changes.outvoted_workers();
    Ok(loaded)
}

/// Settles `ids` again (locked here, in id order, before the workers' rows in `resettle`),
/// those with live results; marks them `proven` first when `proven`. Returns the changes and
/// how many done units reopened.
async fn rejudge(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    ids: &[i64],
    proven: bool,
) -> Result<(store_trust::Changes, u64)> {
    let touched = lock_units(tx, ids).await?;
    if proven {
        sqlx::query("UPDATE units SET proven = true WHERE id = ANY($1)")
            .bind(ids)
            .execute(&mut **tx)
            .await?;
    }
    resettle_judged(tx, touched).await
}

/// Locks `ids` in id order (the store's lock order: units before workers).
async fn lock_units(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    ids: &[i64],
) -> Result<Vec<TouchedUnit>> {
    Ok(sqlx::query_as(
        "SELECT u.id, u.state, u.lease_id, c.replication \
         FROM units u JOIN campaigns c ON c.id = u.campaign_id \
         WHERE u.id = ANY($1) ORDER BY u.id FOR UPDATE OF u",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await?)
}

/// Settles again those of the locked `touched` units that have live results.
async fn resettle_judged(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    mut touched: Vec<TouchedUnit>,
) -> Result<(store_trust::Changes, u64)> {
    let ids: Vec<i64> = touched.iter().map(|u| u.id).collect();
    let judged: Vec<(i64,)> =
        sqlx::query_as("SELECT DISTINCT unit_id FROM results WHERE unit_id = ANY($1) AND NOT void")
            .bind(&ids)
            .fetch_all(&mut **tx)
            .await?;
    let judged: std::collections::HashSet<i64> = judged.into_iter().map(|(u,)| u).collect();
    touched.retain(|u| judged.contains(&u.id));
    store_trust::resettle(tx, &touched).await
}

/// What removing cases did.
#[derive(Debug, Default)]
pub struct Removed {
    pub removed: u64,
    /// Arguments that are no case (recorded or known) of the campaign.
    pub not_found: Vec<String>,
    pub units_rejudged: u64,
    /// Units done after being judged again.
    pub units_done: u64,
}

/// Takes the cases `xs` (canonical arguments) out of campaign `campaign_id`'s recorded and known
/// cases into `removed_cases`, with `reason`, and judges their units again, in one
/// transaction: the units are locked first (before the cases' rows, as a post takes them). The
/// cases derived from a removed case go with it (they stand or fall with their base).
pub async fn remove(
    pool: &PgPool,
    campaign_id: i64,
    xs: &[String],
    reason: &str,
) -> Result<Removed> {
    let mut tx = super::begin(pool, None).await?;
    let found: Option<(i64,)> = sqlx::query_as("SELECT id FROM campaigns WHERE id = $1")
        .bind(campaign_id)
        .fetch_optional(&mut *tx)
        .await?;
    if found.is_none() {
        return Err(Error::NotFound(format!("no campaign {campaign_id}")));
    }
    let mut units: Vec<i64> = sqlx::query_scalar(
        "SELECT unit_id FROM hr_cases WHERE campaign_id = $1 AND x = ANY($2) \
         UNION SELECT unit_id FROM known_cases WHERE campaign_id = $1 AND x = ANY($2)",
    )
    .bind(campaign_id)
    .bind(xs)
    .fetch_all(&mut *tx)
    .await?;
    units.sort_unstable();
    let touched = lock_units(&mut tx, &units).await?;
    let moved: Vec<String> = sqlx::query_scalar(
        "WITH h AS (DELETE FROM hr_cases WHERE campaign_id = $1 \
                        AND (x = ANY($2) OR derived_from = ANY($2)) \
                    RETURNING unit_id, x, bits, neg_log2_d, kind, rounded), \
         k AS (DELETE FROM known_cases WHERE campaign_id = $1 AND x = ANY($2) \
               RETURNING unit_id, x, bits, neg_log2_d, kind, rounded), \
         a AS (SELECT * FROM h UNION SELECT * FROM k), \
         i AS (INSERT INTO removed_cases (campaign_id, unit_id, x, bits, neg_log2_d, kind, \
                                          rounded, reason) \
               SELECT DISTINCT ON (x) $1, unit_id, x, bits, neg_log2_d, kind, rounded, $3 \
               FROM a ORDER BY x \
               ON CONFLICT (campaign_id, x) DO NOTHING), \
         t AS (INSERT INTO campaign_tallies AS t (campaign_id, shard, hr_cases) \
               SELECT $1, 0, -count(*) FROM h \
               ON CONFLICT (campaign_id, shard) DO UPDATE SET hr_cases = t.hr_cases + EXCLUDED.hr_cases) \
         SELECT DISTINCT x FROM a",
    )
    .bind(campaign_id)
    .bind(xs)
    .bind(reason)
    .fetch_all(&mut *tx)
    .await?;
    let (_, _) = resettle_judged(&mut tx, touched).await?;
    let done: i64 =
        sqlx::query_scalar("SELECT count(*) FROM units WHERE id = ANY($1) AND state = 'done'")
            .bind(&units)
            .fetch_one(&mut *tx)
            .await?;
    tx.commit().await?;
    let moved_set: std::collections::HashSet<&String> = moved.iter().collect();
    Ok(Removed {
        removed: moved.len() as u64,
        not_found: xs
            .iter()
            .filter(|x| !moved_set.contains(x))
            .cloned()
            .collect(),
        units_rejudged: units.len() as u64,
        units_done: done as u64,
    })
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
