//! Deferred marking: a trusted worker's large claim leaves its fresh units to be marked after
//! it answers, and every path that acts on such a lease before the marking (a result post,
//! the expiry, a revocation, the sweeper) sees the units as leased to it; no unit is leased
//! twice, and none is lost.

mod common;

use common::TestApp;
use reqwest::Method;
use serde_json::json;
use std::time::Duration;
use tmd_server::bench::{empty_batch, WorkerClient};
use tmd_server::{Config, LeasePolicy};
use tmd_wire::{Lease, UnitOutcomeStatus};

/// Units of the campaigns here: 4 lanes of 4,096 units.
const UNITS: u32 = 16_384;

/// The tests' server, where a claim of 64 fresh units or more defers their marking (the leases
/// here hold hundreds).
fn deferring(policy: LeasePolicy) -> Config {
    Config {
        policy: LeasePolicy {
            defer_marking_min: 64,
            ..policy
        },
        ..common::config()
    }
}

/// A lease of a fast worker: hundreds of units (5% of what is pending), over the deferring
/// threshold.
async fn big_lease(app: &TestApp, name: &str) -> (i64, WorkerClient, Lease) {
    let (wid, w) = app.worker(name).await;
    app.measured_fast(wid).await;
    let l = w.lease(Some(600)).await.unwrap().lease.unwrap();
    assert!(l.units.len() >= 64, "{} units", l.units.len());
    (wid, w, l)
}

/// Whether the lease is still deferred.
async fn deferred(app: &TestApp, lease: i64) -> bool {
    sqlx::query_scalar("SELECT deferred FROM leases WHERE id = $1")
        .bind(lease)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

/// Waits (at most 10 s) until the claim's own marking has run.
async fn marked(app: &TestApp, lease: i64) {
    for _ in 0..1000 {
        if !deferred(app, lease).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("lease {lease} still deferred after 10 s");
}

/// The units bound to the lease: (state, fence) of each, in seq order.
async fn bound(app: &TestApp, lease: i64) -> Vec<(String, Option<i64>)> {
    sqlx::query_as("SELECT state, fence FROM units WHERE lease_id = $1 ORDER BY seq")
        .bind(lease)
        .fetch_all(app.db.pool())
        .await
        .unwrap()
}

/// Puts the lease back as its claim left it, as if its coordinator had stopped before the
/// marking: its units pending and never fenced, the lease deferred (the tallies follow).
async fn unmark(app: &TestApp, lease: i64) {
    let n = sqlx::query(
        "UPDATE units SET state = 'pending', lease_id = NULL, fence = NULL WHERE lease_id = $1",
    )
    .bind(lease)
    .execute(app.db.pool())
    .await
    .unwrap()
    .rows_affected();
    assert!(n > 0);
    sqlx::query("UPDATE leases SET deferred = true WHERE id = $1")
        .bind(lease)
        .execute(app.db.pool())
        .await
        .unwrap();
}

fn seq_ids(l: &Lease) -> std::collections::BTreeSet<i64> {
    l.units.iter().map(|u| u.unit_id).collect()
}

#[tokio::test]
async fn a_large_claims_units_are_marked_once_it_has_answered() {
    let app = TestApp::with_config(deferring(LeasePolicy::default())).await;
    let c = app.small_campaign(UNITS, 4).await;
    let (_, _, l) = big_lease(&app, "w").await;
    marked(&app, l.lease_id).await;
    let units = bound(&app, l.lease_id).await;
    assert_eq!(units.len(), l.units.len());
    assert!(units
        .iter()
        .all(|(s, f)| s == "leased" && *f == Some(l.fencing_token)));
    let p = app.progress(c["id"].as_i64().unwrap()).await;
    assert_eq!(p["leased"]["units"], l.units.len(), "{p}");
}

#[tokio::test]
async fn a_post_before_the_marking_is_recorded_and_nobody_else_gets_its_units() {
    let app = TestApp::with_config(deferring(LeasePolicy::default())).await;
    let c = app.small_campaign(UNITS, 4).await;
    let id = c["id"].as_i64().unwrap();
    let (_, w, l) = big_lease(&app, "first").await;
    marked(&app, l.lease_id).await;
    unmark(&app, l.lease_id).await;
    // Another claim goes past the unmarked units (they lie behind the lane's cursor).
    let (_, _, other) = big_lease(&app, "second").await;
    assert!(seq_ids(&l).is_disjoint(&seq_ids(&other)));
    // Half of its results first: the lease stays active and holds the other half, marked.
    let mut first = empty_batch(&l, 1e-6);
    let rest = first.split_off(first.len() / 2);
    let (first_n, rest_n) = (first.len(), rest.len());
    for (half, n, left, state) in [
        (first, first_n, rest_n, "active"),
        (rest, rest_n, 0, "finished"),
    ] {
        let out = w.post_batch(half).await.unwrap();
        assert_eq!(out.outcomes.len(), n);
        for o in &out.outcomes {
            assert_eq!(o.status, UnitOutcomeStatus::Accepted, "{o:?}");
        }
        assert!(!deferred(&app, l.lease_id).await);
        let now: String = sqlx::query_scalar("SELECT state FROM leases WHERE id = $1")
            .bind(l.lease_id)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
        assert_eq!(now, state);
        let bound = bound(&app, l.lease_id).await;
        assert_eq!(bound.len(), left);
        assert!(bound.iter().all(|(s, _)| s == "leased"));
    }
    marked(&app, other.lease_id).await;
    let p = app.progress(id).await;
    assert_eq!(p["done"]["units"], l.units.len(), "{p}");
    assert_eq!(p["leased"]["units"], other.units.len(), "{p}");
}

#[tokio::test]
async fn an_expired_unmarked_lease_gives_its_units_back() {
    let app = TestApp::with_config(deferring(LeasePolicy {
        ttl_seconds: 3,
        ..LeasePolicy::default()
    }))
    .await;
    let c = app.small_campaign(UNITS, 4).await;
    let id = c["id"].as_i64().unwrap();
    let (_, _, dead) = big_lease(&app, "dies").await;
    marked(&app, dead.lease_id).await;
    unmark(&app, dead.lease_id).await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    // The expiry runs on this lease request: the dead lease's units come back first.
    let (_, w, l) = big_lease(&app, "next").await;
    assert!(
        seq_ids(&dead).is_subset(&seq_ids(&l)),
        "the returned units first"
    );
    let returned: i64 =
        sqlx::query_scalar("SELECT count(*) FROM units WHERE id = ANY($1) AND lease_id = $2")
            .bind(seq_ids(&dead).into_iter().collect::<Vec<_>>())
            .bind(l.lease_id)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(
        returned as usize,
        dead.units.len(),
        "marked by the claim itself"
    );
    let out = w.post_batch(empty_batch(&l, 1e-6)).await.unwrap();
    assert!(out
        .outcomes
        .iter()
        .all(|o| o.status == UnitOutcomeStatus::Accepted));
    let p = app.progress(id).await;
    assert_eq!(p["done"]["units"], l.units.len(), "{p}");
    assert_eq!(p["leased"]["units"], 0, "{p}");
    assert_eq!(
        p["pending"]["units"].as_u64().unwrap() as usize,
        UNITS as usize - l.units.len(),
        "{p}"
    );
}

#[tokio::test]
async fn a_revoked_workers_unmarked_lease_gives_its_units_back() {
    let app = TestApp::with_config(deferring(LeasePolicy::default())).await;
    let c = app.small_campaign(UNITS, 4).await;
    let id = c["id"].as_i64().unwrap();
    let (wid, _, l) = big_lease(&app, "retired").await;
    marked(&app, l.lease_id).await;
    unmark(&app, l.lease_id).await;
    let (status, v) = app
        .admin(Method::POST, &format!("/api/v1/workers/{wid}/revoke"), None)
        .await;
    assert!(status.is_success(), "{v}");
    let back: Vec<(String, Option<i64>)> =
        sqlx::query_as("SELECT state, fence FROM units WHERE id = ANY($1) AND lease_id IS NULL")
            .bind(seq_ids(&l).into_iter().collect::<Vec<_>>())
            .fetch_all(app.db.pool())
            .await
            .unwrap();
    assert_eq!(back.len(), l.units.len());
    assert!(back
        .iter()
        .all(|(s, f)| s == "pending" && *f == Some(l.fencing_token)));
    assert!(!deferred(&app, l.lease_id).await);
    // They are claimed again, first.
    let (_, _, again) = big_lease(&app, "next").await;
    assert!(seq_ids(&l).is_subset(&seq_ids(&again)));
    marked(&app, again.lease_id).await;
    let p = app.progress(id).await;
    assert_eq!(p["leased"]["units"], again.units.len(), "{p}");
}

#[tokio::test]
async fn the_sweeper_marks_a_lease_its_coordinator_left_deferred() {
    let app = TestApp::with_config(deferring(LeasePolicy::default())).await;
    app.small_campaign(UNITS, 4).await;
    let (_, _, l) = big_lease(&app, "w").await;
    marked(&app, l.lease_id).await;
    unmark(&app, l.lease_id).await;
    // A young deferred lease is its claim's to mark, not the sweeper's.
    let pool = app.db.pool();
    assert_eq!(
        tmd_server::store::deferred::mark_stale(pool).await.unwrap(),
        0
    );
    sqlx::query("UPDATE leases SET created_at = now() - interval '1 minute' WHERE id = $1")
        .bind(l.lease_id)
        .execute(pool)
        .await
        .unwrap();
    let n = tmd_server::store::deferred::mark_stale(pool).await.unwrap();
    assert_eq!(n as usize, l.units.len());
    assert_eq!(bound(&app, l.lease_id).await.len(), l.units.len());
    assert!(!deferred(&app, l.lease_id).await);
}

#[tokio::test]
async fn a_volunteers_claim_marks_its_units_itself() {
    let app = TestApp::with_config(deferring(LeasePolicy::default())).await;
    let to = format!("0x{:x}p-23", (1u64 << 23) + (u64::from(UNITS) << 4));
    app.campaign(json!({
        "function": "exp", "format": "binary32", "min_bits": 12,
        "ranges": [{"from": "0x1p+0", "to": to}], "unit_bits": 4,
        "trust_all_workers": false
    }))
    .await;
    let (wid, w) = app.worker("volunteer").await;
    assert_eq!(app.worker_info(wid).await["trusted"], false);
    app.measured_fast(wid).await;
    let l = w.lease(Some(600)).await.unwrap().lease.unwrap();
    assert!(l.units.len() >= 64, "{} units", l.units.len());
    // Read at once: nothing is left to mark.
    assert!(!deferred(&app, l.lease_id).await);
    assert_eq!(bound(&app, l.lease_id).await.len(), l.units.len());
}
