//! Trust over real HTTP and PostgreSQL: adaptive replication, quarantine by the bar and by an
//! admin with the units a worker vouched for redone, owners, expiries, reinstatement.

mod common;

use common::{assert_refused, code_of, config, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;
use tmd_server::bench::{empty_result, WorkerClient};
use tmd_server::domain::trust::QuarantineBar;
use tmd_server::{Config, LeasePolicy};

/// exp in binary32 on [1, 1 + units * 16 ulps) in units of 16 arguments, with `policy` merged
/// into the request.
async fn campaign(app: &TestApp, units: u64, policy: Value) -> i64 {
    let to = format!("0x{:x}p-23", (1u64 << 23) + units * 16);
    let mut body = json!({
        "function": "exp", "format": "binary32", "min_bits": 12, "unit_bits": 4,
        "ranges": [{"from": "0x1p+0", "to": to}]
    });
    for (k, v) in policy.as_object().unwrap() {
        body[k] = v.clone();
    }
    app.campaign(body).await["id"].as_i64().unwrap()
}

/// Leases one unit and posts the honest (empty) result for it; returns the unit, or `None`
/// when there is no work for this worker.
async fn try_one(w: &WorkerClient) -> Option<i64> {
    let lease = w.lease(Some(1)).await.unwrap().lease?;
    assert_eq!(lease.units.len(), 1);
    let u = lease.units[0].unit_id;
    w.post(
        lease.lease_id,
        u,
        &empty_result(lease.fencing_token, u, 1.0),
    )
    .await
    .unwrap();
    Some(u)
}

/// [`try_one`] where there must be work.
async fn compute_one(w: &WorkerClient) -> i64 {
    try_one(w).await.expect("work")
}

#[tokio::test]
async fn trusted_workers_skip_replicas_until_caught_and_then_their_units_are_redone() {
    let app = TestApp::new().await;
    // An audit rate this small never audits in a test: what is measured is the mechanism.
    let cid = campaign(
        &app,
        6,
        json!({"replication": 2, "adaptive": true, "trust_after": 2, "audit_rate": 1e-9}),
    )
    .await;
    let (a_id, a) = app.worker("a").await;
    let (b_id, b) = app.worker("b").await;
    for _ in 0..2 {
        let u = compute_one(&a).await;
        assert_eq!(compute_one(&b).await, u, "b replicates a's unit");
    }
    assert_eq!(app.worker_info(a_id).await["reputation"]["streak"], 2);
    // a is trusted now: its next result settles a unit on its own.
    compute_one(&a).await;
    let p = app.progress(cid).await;
    assert_eq!(p["done"]["units"], 3, "{p}");
    assert_eq!(p["replication"]["alone"], 1, "{p}");
    assert_eq!(p["replication"]["results"], 5, "{p}");

    // An admin learns a's GPU is broken: every unit a counted for (all three: the two it
    // shared with b need a quorum of 2) goes back to the pool, and its lease is revoked.
    let lease = a.lease(Some(1)).await.unwrap().lease.unwrap();
    let (status, info) = app.quarantine(a_id, "fan failure").await;
    assert_eq!(status, StatusCode::OK, "{info}");
    assert!(info["quarantine_reason"]
        .as_str()
        .unwrap()
        .contains("fan failure"));
    let p = app.progress(cid).await;
    assert_eq!(
        (
            p["done"]["units"].as_i64(),
            p["leased"]["units"].as_i64(),
            p["replication"]["void"].as_i64()
        ),
        (Some(0), Some(0), Some(3)),
        "{p}"
    );
    let u = lease.units[0].unit_id;
    assert_eq!(
        code_of(
            a.post(
                lease.lease_id,
                u,
                &empty_result(lease.fencing_token, u, 1.0)
            )
            .await
        ),
        "worker_quarantined"
    );
    assert_eq!(code_of(a.lease(Some(1)).await), "worker_quarantined");
    assert_refused!(app.quarantine(a_id, "twice").await, CONFLICT, "conflict");
    // b's agreements with a no longer count.
    let rb = app.worker_info(b_id).await;
    assert_eq!(
        (
            rb["reputation"]["valid"].as_i64(),
            rb["reputation"]["streak"].as_i64()
        ),
        (Some(0), Some(0)),
        "{rb}"
    );

    // b and a new worker finish the campaign, every unit with two agreeing results.
    let (_, c) = app.worker("c").await;
    for _ in 0..12 {
        for w in [&b, &c] {
            try_one(w).await;
        }
    }
    let p = app.progress(cid).await;
    assert_eq!(p["complete"], true, "{p}");
    assert_eq!(p["replication"]["void"], 3, "{p}");

    // Reinstated, a starts again with a clean record.
    let (status, info) = app
        .admin(
            Method::POST,
            &format!("/api/v1/workers/{a_id}/reinstate"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{info}");
    assert!(info["quarantined_at"].is_null(), "{info}");
    assert_eq!(info["reputation"]["streak"], 0);
    let (status, _) = app
        .admin(
            Method::POST,
            &format!("/api/v1/workers/{a_id}/reinstate"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = app
        .admin(Method::POST, "/api/v1/workers/999999/reinstate", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        a.lease(Some(1)).await.unwrap().lease.is_none(),
        "no work left"
    );
}

#[tokio::test]
async fn replicas_come_from_other_owners_when_the_campaign_asks() {
    let app = TestApp::new().await;
    campaign(&app, 1, json!({"replication": 2, "distinct_owners": true})).await;
    let token = |owner: &str| {
        let app = &app;
        let owner = owner.to_string();
        async move {
            let (status, t) = app
                .admin(
                    Method::POST,
                    "/api/v1/enrollment-tokens",
                    Some(json!({"owner": owner})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{t}");
            t["token"].as_str().unwrap().to_string()
        }
    };
    let lab = token("lab").await;
    let volunteer = token("volunteer").await;
    let register = |t: String, name: &str| {
        let app = &app;
        let name = name.to_string();
        async move {
            let (status, w) = app
                .call(
                    Method::POST,
                    "/api/v1/workers/register",
                    None,
                    Some(json!({"enrollment_token": t, "name": name})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{w}");
            (
                w["worker_id"].as_i64().unwrap(),
                WorkerClient::new(&app.base, w["token"].as_str().unwrap(), app.http.clone()),
            )
        }
    };
    let (lab1_id, lab1) = register(lab.clone(), "lab-1").await;
    let (_, lab2) = register(lab, "lab-2").await;
    let (_, vol) = register(volunteer, "vol").await;
    assert_eq!(app.worker_info(lab1_id).await["owner"], "lab");
    compute_one(&lab1).await;
    assert!(
        lab2.lease(Some(1)).await.unwrap().lease.is_none(),
        "the same owner may not replicate its own unit"
    );
    compute_one(&vol).await;
    assert_refused!(
        app.admin(
            Method::POST,
            "/api/v1/enrollment-tokens",
            Some(json!({"owner": " "}))
        )
        .await,
        BAD_REQUEST,
        "bad_request"
    );
}

#[tokio::test]
async fn a_worker_whose_leases_keep_expiring_is_quarantined() {
    let app = TestApp::with_config(Config {
        policy: LeasePolicy {
            ttl_seconds: 1,
            ..LeasePolicy::default()
        },
        quarantine: QuarantineBar {
            min_expired_leases: 2,
            ..QuarantineBar::default()
        },
        ..config()
    })
    .await;
    campaign(&app, 2, json!({})).await;
    let (id, w) = app.worker("sleepy").await;
    let (_, other) = app.worker("other").await;
    w.lease(Some(1)).await.unwrap().lease.unwrap();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    // The next lease request expires the first lease: one expiry is not over the bar.
    w.lease(Some(1)).await.unwrap().lease.unwrap();
    assert!(app.worker_info(id).await["quarantined_at"].is_null());
    tokio::time::sleep(Duration::from_millis(1300)).await;
    // Another worker's request runs the expiry pass: two of two leases expired.
    other.lease(Some(1)).await.unwrap().lease.unwrap();
    let info = app.worker_info(id).await;
    assert_eq!(info["reputation"]["leases_expired"], 2, "{info}");
    assert!(
        info["quarantine_reason"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{info}"
    );
    assert_eq!(code_of(w.lease(Some(1)).await), "worker_quarantined");
}

#[tokio::test]
async fn bad_policies_are_refused_with_the_field_named() {
    let app = TestApp::new().await;
    for (policy, field) in [
        (
            json!({"adaptive": true, "trust_all_workers": true}),
            "replication",
        ),
        (json!({"replication": 1}), "trust_all_workers"),
        (
            json!({"replication": 2, "adaptive": true, "audit_rate": 0}),
            "audit_rate",
        ),
        (
            json!({"replication": 2, "adaptive": true, "audit_rate": 1.5}),
            "audit_rate",
        ),
        (json!({"replication": 2, "trust_after": 0}), "trust_after"),
    ] {
        let mut body = json!({
            "function": "exp", "format": "binary32", "min_bits": 12,
            "ranges": [{"from": "1", "to": "2"}]
        });
        for (k, v) in policy.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, e) = app
            .admin(Method::POST, "/api/v1/campaigns", Some(body))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
        assert!(e["message"].as_str().unwrap().contains(field), "{e}");
    }
    let cid = campaign(&app, 1, json!({"replication": 3, "adaptive": true})).await;
    let (_, c) = app
        .admin(Method::GET, &format!("/api/v1/campaigns/{cid}"), None)
        .await;
    assert_eq!(
        (
            c["replication"].as_i64(),
            c["adaptive"].as_bool(),
            c["audit_rate"].as_f64(),
            c["trust_after"].as_i64()
        ),
        (Some(3), Some(true), Some(0.1), Some(20))
    );
}

#[tokio::test]
async fn a_dispute_settled_by_a_quarantine_ends_the_lease_that_held_the_unit() {
    let app = TestApp::new().await;
    let cid = campaign(&app, 1, json!({"replication": 2})).await;
    let post = |w: WorkerClient, domains: u64| async move {
        let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
        let u = lease.units[0].unit_id;
        let mut r = empty_result(lease.fencing_token, u, 1.0);
        r.stats.domains = domains;
        w.post(lease.lease_id, u, &r).await.unwrap();
    };
    let (_, a) = app.worker("a").await;
    let (x_id, x) = app.worker("x").await;
    let (_, y) = app.worker("y").await;
    let (_, b) = app.worker("b").await;
    let (_, z) = app.worker("z").await;
    // a and b agree; x and y each say something else: 2 of 4 is no majority yet.
    post(a, 1).await;
    post(x, 7).await;
    post(y, 9).await;
    post(b, 1).await;
    assert_eq!(app.progress(cid).await["pending"]["units"], 1);
    let held = z.lease(Some(1)).await.unwrap().lease.unwrap();
    let (status, _) = app.quarantine(x_id, "known bad").await;
    assert_eq!(status, StatusCode::OK);
    // Without x, a and b are 2 of 3: the unit is done, and z's lease ends with it.
    let p = app.progress(cid).await;
    assert_eq!(p["complete"], true, "{p}");
    let state: String = sqlx::query_scalar("SELECT state FROM leases WHERE id = $1")
        .bind(held.lease_id)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(state, "finished");
    let u = held.units[0].unit_id;
    assert_eq!(
        code_of(
            z.post(held.lease_id, u, &empty_result(held.fencing_token, u, 1.0))
                .await
        ),
        "unit_done"
    );
}

/// Upgrades: a worker of an engine version the coordinator does not serve (another build's, or
/// one too old to say) gets no work, and a result it computed is refused; the same result of
/// this build's version is taken.
#[tokio::test]
async fn a_worker_of_an_engine_version_not_served_gets_no_work() {
    let app = TestApp::new().await;
    app.small_campaign(6, 4).await;
    let (_, w) = app.worker("a").await;
    let other = tmd_kernels::ENGINE_VERSION + 1;
    for (body, says) in [
        (json!({"seconds": 60}), "version 0 (it does not say)"),
        (
            json!({"seconds": 60, "engine": other}),
            &*format!("version {other}"),
        ),
    ] {
        let (status, v) = app
            .call(Method::POST, "/api/v1/leases", Some(w.token()), Some(body))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{v}");
        assert_eq!(v["code"], "engine_version", "{v}");
        let m = v["message"].as_str().unwrap();
        assert!(m.contains(&format!("engine {says}")), "{m}");
        assert!(
            m.contains(&format!(
                "serves engine version {}",
                tmd_kernels::ENGINE_VERSION
            )),
            "{m}"
        );
    }
    let lease = w.lease(Some(60)).await.unwrap().lease.unwrap();
    let u = lease.units[0].unit_id;
    let mut r = empty_result(lease.fencing_token, u, 1.0);
    r.engine = Some(other);
    assert_eq!(
        code_of(w.post(lease.lease_id, u, &r).await),
        "engine_version"
    );
    r.engine = None;
    assert_eq!(
        code_of(w.post(lease.lease_id, u, &r).await),
        "engine_version"
    );
    r.engine = Some(tmd_kernels::ENGINE_VERSION);
    w.post(lease.lease_id, u, &r).await.unwrap();
}

/// During an upgrade (`--accept-engine 0`), an honest worker of the old version counts other
/// domains than the new version's workers: results of different versions are compared by
/// their cases, never by their counters. One result of each version that agree on the cases
/// settle the unit, both agreed; nobody is outvoted for counting differently.
#[tokio::test]
async fn results_of_two_engine_versions_are_compared_by_their_cases_only() {
    let app = TestApp::with_config(Config {
        engines: vec![0, tmd_kernels::ENGINE_VERSION],
        ..config()
    })
    .await;
    let cid = campaign(&app, 1, json!({"replication": 2})).await;
    let (old_id, old) = app.worker("old").await;
    let (b_id, b) = app.worker("b").await;
    let lease = old.lease(Some(1)).await.unwrap().lease.unwrap();
    let u = lease.units[0].unit_id;
    let mut r = empty_result(lease.fencing_token, u, 1.0);
    r.engine = None;
    r.stats.domains = 2;
    old.post(lease.lease_id, u, &r).await.unwrap();
    assert_eq!(compute_one(&b).await, u);
    let p = app.progress(cid).await;
    assert_eq!(p["done"]["units"], 1, "{p}");
    assert_eq!(p["replication"]["outvoted"], 0, "{p}");
    for id in [old_id, b_id] {
        let rec = &app.worker_info(id).await["reputation"];
        assert_eq!(
            (rec["valid"].as_i64(), rec["invalid"].as_i64()),
            (Some(1), Some(0)),
            "{rec}"
        );
    }
    let verdicts: Vec<(i32, String)> =
        sqlx::query_as("SELECT engine, verdict FROM results WHERE unit_id = $1 ORDER BY id")
            .bind(u)
            .fetch_all(app.db.pool())
            .await
            .unwrap();
    let v = tmd_kernels::ENGINE_VERSION as i32;
    assert_eq!(
        verdicts,
        vec![(0, "agreed".to_string()), (v, "agreed".to_string())]
    );
}
