//! The lease protocol under failure: expiry and re-issue, stale posts, quarantine by expiry,
//! replication, and a server restart in the middle of leased work.

mod common;

use common::{code_of, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::time::Duration;
use tmd_server::bench::empty_result;
use tmd_server::{Config, LeasePolicy};

fn short_leases(max_attempts: u32) -> Config {
    Config {
        policy: LeasePolicy {
            ttl_seconds: 1,
            max_attempts,
            ..LeasePolicy::default()
        },
        ..common::config()
    }
}

#[tokio::test]
async fn expired_leases_are_reissued_and_the_old_holder_is_fenced_off() {
    let app = TestApp::with_config(short_leases(5)).await;
    let c = app.small_campaign(1, 4).await;
    let cid = c["id"].as_i64().unwrap();
    let (_, old) = app.worker("old").await;
    let (_, new) = app.worker("new").await;
    let first = old.lease(None).await.unwrap().lease.unwrap();
    let unit = first.units[0].unit_id;
    assert!(
        new.lease(None).await.unwrap().lease.is_none(),
        "the only unit is leased"
    );

    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(code_of(old.heartbeat(&first).await), "lease_expired");
    let late = empty_result(first.fencing_token, unit, 1.0);

    // The next request reclaims it (lazily) and re-issues it with a newer fencing token.
    let second = new.lease(None).await.unwrap().lease.unwrap();
    assert_eq!(second.units[0].unit_id, unit);
    assert!(second.fencing_token > first.fencing_token);
    assert_eq!(
        code_of(old.post(first.lease_id, unit, &late).await),
        "stale_token"
    );
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM units WHERE id = $1")
        .bind(unit)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(attempts, 1, "an expiry counts as an attempt");

    new.post(
        second.lease_id,
        unit,
        &empty_result(second.fencing_token, unit, 1.0),
    )
    .await
    .unwrap();
    // Another lease finished it: the old holder is told so, and nothing changes.
    assert_eq!(
        code_of(old.post(first.lease_id, unit, &late).await),
        "unit_done"
    );
    let p = app.progress(cid).await;
    assert_eq!(p["done"]["units"], 1);
    let (owner,): (i64,) = sqlx::query_as("SELECT lease_id FROM results WHERE unit_id = $1")
        .bind(unit)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(owner, second.lease_id);
}

/// A worker cut off from the server past its lease's expiry posts its spooled result later: it
/// is taken while nobody else has leased the unit, and the unit is done, not computed again.
#[tokio::test]
async fn a_late_result_is_taken_while_nobody_else_has_the_unit() {
    let app = TestApp::with_config(short_leases(5)).await;
    let c = app.small_campaign(1, 4).await;
    let cid = c["id"].as_i64().unwrap();
    let (_, old) = app.worker("old").await;
    let (_, other) = app.worker("other").await;
    let first = old.lease(None).await.unwrap().lease.unwrap();
    let unit = first.units[0].unit_id;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(code_of(old.heartbeat(&first).await), "lease_expired");
    // The sweeper or a lease request returns the unit to the pool; nobody takes it yet.
    sqlx::query("UPDATE units SET state = 'pending', lease_id = NULL WHERE id = $1")
        .bind(unit)
        .execute(app.db.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE leases SET state = 'expired' WHERE id = $1")
        .bind(first.lease_id)
        .execute(app.db.pool())
        .await
        .unwrap();
    let late = empty_result(first.fencing_token, unit, 1.0);
    old.post(first.lease_id, unit, &late).await.unwrap();
    let p = app.progress(cid).await;
    assert_eq!(p["done"]["units"], 1);
    assert!(
        other.lease(None).await.unwrap().lease.is_none(),
        "the unit is done: nothing to lease"
    );
    let state: String = sqlx::query_scalar("SELECT state FROM leases WHERE id = $1")
        .bind(first.lease_id)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(state, "expired", "an expired lease stays expired");
    // A retry gets the same answer.
    old.post(first.lease_id, unit, &late).await.unwrap();
}

#[tokio::test]
async fn heartbeats_keep_a_lease_alive_past_its_first_expiry() {
    let app = TestApp::with_config(short_leases(5)).await;
    app.small_campaign(1, 4).await;
    let (_, w) = app.worker("w").await;
    let (_, thief) = app.worker("thief").await;
    let lease = w.lease(None).await.unwrap().lease.unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        w.heartbeat(&lease).await.unwrap();
        assert!(thief.lease(None).await.unwrap().lease.is_none());
    }
    let unit = lease.units[0].unit_id;
    w.post(
        lease.lease_id,
        unit,
        &empty_result(lease.fencing_token, unit, 1.0),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_unit_that_keeps_expiring_is_quarantined_by_the_sweeper() {
    let app = TestApp::with_config(Config {
        sweep_interval: Duration::from_millis(200),
        ..short_leases(2)
    })
    .await;
    let c = app.small_campaign(1, 4).await;
    let cid = c["id"].as_i64().unwrap();
    let (_, w) = app.worker("w").await;
    // Attempts count once per worker (per owner) and unit: a second worker lets it expire.
    let (_, w2) = app.worker("w2").await;
    let first = w.lease(None).await.unwrap().lease.unwrap();
    tokio::time::sleep(Duration::from_millis(1600)).await;
    // The sweeper, not a lease request, put it back.
    let p = app.progress(cid).await;
    assert_eq!(p["pending"]["units"], 1, "{p}");
    let second = w2.lease(None).await.unwrap().lease.unwrap();
    assert_eq!(second.units[0].unit_id, first.units[0].unit_id);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let p = app.progress(cid).await;
    assert_eq!(p["quarantined"]["units"], 1, "{p}");
    assert_eq!(p["quarantined_units"][0]["attempts"], 2);
    assert!(
        w.lease(None).await.unwrap().lease.is_none(),
        "not retried forever"
    );
    let text = app.metrics().await;
    assert!(text.contains("tmd_units_quarantined_total 1"), "{text}");
    assert!(
        text.contains("tmd_units{state=\"quarantined\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn a_restart_in_the_middle_of_leased_work_loses_nothing() {
    let mut app = TestApp::new().await;
    let c = app.small_campaign(4, 4).await;
    let cid = c["id"].as_i64().unwrap();
    let (_, w) = app.worker("w").await;
    let a = w.lease(None).await.unwrap().lease.unwrap();
    let b = w.lease(None).await.unwrap().lease.unwrap();
    let done = w
        .post(
            a.lease_id,
            a.units[0].unit_id,
            &empty_result(a.fencing_token, a.units[0].unit_id, 0.0),
        )
        .await
        .unwrap();

    app.restart().await;
    let w = w.with_base(&app.base);
    // The recorded result survived and its retry is still answered the same.
    assert_eq!(
        w.post(
            a.lease_id,
            a.units[0].unit_id,
            &empty_result(a.fencing_token, a.units[0].unit_id, 0.0)
        )
        .await
        .unwrap(),
        done
    );
    // The lease held across the restart is still alive and completes.
    w.heartbeat(&b).await.unwrap();
    let unit = b.units[0].unit_id;
    w.post(b.lease_id, unit, &empty_result(b.fencing_token, unit, 0.0))
        .await
        .unwrap();
    let mut rest = 0;
    while let Some(l) = w.lease(None).await.unwrap().lease {
        for u in &l.units {
            w.post(
                l.lease_id,
                u.unit_id,
                &empty_result(l.fencing_token, u.unit_id, 0.0),
            )
            .await
            .unwrap();
            rest += 1;
        }
    }
    assert_eq!(rest, 2);
    let p = app.progress(cid).await;
    assert_eq!(p["done"]["units"], 4);
    assert_eq!(p["complete"], true);
}

#[tokio::test]
async fn replicated_units_need_agreeing_results_from_different_workers() {
    // One outvoted result is evidence enough here (the default asks for 3, hostile.rs).
    let mut config = common::config();
    config.quarantine.min_outvoted_results = 1;
    let app = TestApp::with_config(config).await;
    let c = app
        .campaign(json!({
            "function": "exp", "format": "binary32", "min_bits": 12, "unit_bits": 4,
            "ranges": [{"from": "0x1p+0", "to": "0x1.00004p+0"}], "replication": 2
        }))
        .await;
    let cid = c["id"].as_i64().unwrap();
    assert_eq!(c["units_total"], 2);
    let (_, a) = app.worker("a").await;
    let (_, b) = app.worker("b").await;

    let la = a.lease(None).await.unwrap().lease.unwrap();
    let u0 = la.units[0].unit_id;
    a.post(la.lease_id, u0, &empty_result(la.fencing_token, u0, 1.0))
        .await
        .unwrap();
    assert_eq!(
        app.progress(cid).await["done"]["units"],
        0,
        "one replica is not enough"
    );
    // a never gets its own unit again; b gets it.
    let la2 = a.lease(None).await.unwrap().lease.unwrap();
    assert_ne!(la2.units[0].unit_id, u0);
    let lb = b.lease(None).await.unwrap().lease.unwrap();
    assert_eq!(lb.units[0].unit_id, u0);
    b.post(lb.lease_id, u0, &empty_result(lb.fencing_token, u0, 1.0))
        .await
        .unwrap();
    assert_eq!(
        app.progress(cid).await["done"]["units"],
        1,
        "two agreeing replicas"
    );

    // Disagreeing replicas take another replica from a third worker; the majority wins and
    // the loser is recorded against its worker.
    let u1 = la2.units[0].unit_id;
    a.post(la2.lease_id, u1, &empty_result(la2.fencing_token, u1, 1.0))
        .await
        .unwrap();
    let lb2 = b.lease(None).await.unwrap().lease.unwrap();
    assert_eq!(lb2.units[0].unit_id, u1);
    let mut other = empty_result(lb2.fencing_token, u1, 1.0);
    other.stats.phase1_failures = 3;
    b.post(lb2.lease_id, u1, &other).await.unwrap();
    let p = app.progress(cid).await;
    assert_eq!(
        (p["done"]["units"].as_i64(), p["pending"]["units"].as_i64()),
        (Some(1), Some(1)),
        "a dispute needs another replica"
    );
    let (_, c) = app.worker("c").await;
    let lc = c.lease(None).await.unwrap().lease.unwrap();
    assert_eq!(lc.units[0].unit_id, u1);
    c.post(lc.lease_id, u1, &empty_result(lc.fencing_token, u1, 1.0))
        .await
        .unwrap();
    // b is outvoted on half its checked results, far over the bar: it is quarantined, its
    // results become void, and u0, which it vouched for with a, needs another replica.
    let p = app.progress(cid).await;
    assert_eq!(
        (p["done"]["units"].as_i64(), p["pending"]["units"].as_i64()),
        (Some(1), Some(1)),
        "{p}"
    );
    let (_, workers) = app.admin(Method::GET, "/api/v1/workers", None).await;
    let rec = |w: &serde_json::Value, i: usize| w[i]["reputation"].clone();
    assert_eq!(rec(&workers, 0)["valid"], 1, "u0 no longer counts for a");
    assert_eq!(rec(&workers, 0)["streak"], 1);
    assert_eq!(rec(&workers, 1)["invalid"], 1);
    assert_eq!(rec(&workers, 1)["streak"], 0);
    assert!(workers[1]["quarantined_at"].is_string(), "{workers}");
    assert!(workers[0]["quarantined_at"].is_null() && workers[2]["quarantined_at"].is_null());
    assert_eq!(code_of(b.lease(None).await), "worker_quarantined");
    let lc2 = c.lease(None).await.unwrap().lease.unwrap();
    assert_eq!(lc2.units[0].unit_id, u0);
    c.post(lc2.lease_id, u0, &empty_result(lc2.fencing_token, u0, 1.0))
        .await
        .unwrap();
    let p = app.progress(cid).await;
    assert_eq!(p["complete"], true, "{p}");
    let r = &p["replication"];
    assert_eq!(
        (
            r["results"].as_i64(),
            r["void"].as_i64(),
            r["outvoted"].as_i64()
        ),
        (Some(6), Some(2), Some(1)),
        "{p}"
    );
    assert_eq!(r["work_factor"], 3.0);
    let (_, workers) = app.admin(Method::GET, "/api/v1/workers", None).await;
    assert_eq!(rec(&workers, 0)["valid"], 2);
    assert_eq!(rec(&workers, 0)["streak"], 2);
    assert_eq!(rec(&workers, 2)["valid"], 2);

    let (status, _) = app
        .admin(Method::GET, &format!("/api/v1/campaigns/{cid}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
}
