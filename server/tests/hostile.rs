//! Hostile volunteers against a real server and PostgreSQL: each test runs an
//! attack that used to work and shows the campaign unharmed.

mod common;

use common::{code_of, config, seed, TestApp, ADMIN};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;
use tmd_server::bench::empty_result;
use tmd_server::{Config, LeasePolicy};

/// exp in binary32 on [1, 1 + units * 16 ulps), units of 16 arguments.
async fn campaign(app: &TestApp, units: u64) -> i64 {
    let to = format!("0x{:x}p-23", (1u64 << 23) + units * 16);
    app.campaign(json!({
        "function": "exp", "format": "binary32", "min_bits": 12, "unit_bits": 4,
        "ranges": [{"from": "0x1p+0", "to": to}]
    }))
    .await["id"]
        .as_i64()
        .unwrap()
}

fn units(p: &Value, state: &str) -> i64 {
    p[state]["units"].as_i64().unwrap()
}

/// Item 1: five lease/release-all-as-failed cycles from one worker used to quarantine 511 of
/// 512 units. Now a worker adds at most one attempt per unit, its failures count against it,
/// and its quarantine takes them back.
#[tokio::test]
async fn one_worker_cannot_quarantine_the_campaign_by_reporting_failures() {
    let app = TestApp::new().await;
    let id = campaign(&app, 512).await;
    let (bad_id, bad) = app.worker("saboteur").await;
    // Calibrate its speed so that a lease is as large as allowed.
    let first = bad.lease(Some(1)).await.unwrap().lease.unwrap();
    let u = first.units[0].unit_id;
    bad.post(
        first.lease_id,
        u,
        &empty_result(first.fencing_token, u, 1e-3),
    )
    .await
    .unwrap();
    let mut refused = None;
    for _ in 0..5 {
        let lease = match bad.lease(Some(600)).await {
            Ok(r) => r.lease.unwrap(),
            Err(e) => {
                refused = Some(code_of::<()>(Err(e)));
                break;
            }
        };
        let ids: Vec<i64> = lease.units.iter().map(|u| u.unit_id).collect();
        assert!(ids.len() > 1, "a calibrated worker gets more than one unit");
        bad.release(&lease, &ids).await.unwrap();
    }
    assert_eq!(refused.as_deref(), Some("worker_quarantined"));
    let info = app.worker_info(bad_id).await;
    assert!(info["quarantine_reason"]
        .as_str()
        .unwrap()
        .contains("failed"));
    assert!(info["reputation"]["failed_units"].as_i64().unwrap() >= 5);
    let p = app.progress(id).await;
    assert_eq!(units(&p, "quarantined"), 0, "{p}");
    // Its one result is void too, so that unit is redone: all 512 wait for honest workers.
    assert_eq!(units(&p, "pending"), 512, "{p}");
    // The campaign goes on with an honest worker.
    let (_, honest) = app.worker("honest").await;
    assert!(honest.lease(Some(1)).await.unwrap().lease.is_some());
}

/// Item 1: failures from several workers still quarantine a unit (a real poison pill), an
/// admin's quarantine of one reporter takes its report back, and an admin can requeue.
#[tokio::test]
async fn failure_reports_need_several_workers_and_admins_can_requeue() {
    let mut c = config();
    c.policy.max_attempts = 2;
    let app = TestApp::with_config(c).await;
    let id = campaign(&app, 4).await;
    let (a_id, a) = app.worker("a").await;
    let (_, b) = app.worker("b").await;
    let lease = a.lease(Some(1)).await.unwrap().lease.unwrap();
    let unit = lease.units[0].unit_id;
    a.release(&lease, &[unit]).await.unwrap();
    // Reporting it again costs the unit nothing more.
    let again = a.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(again.units[0].unit_id, unit);
    let r = a.release(&again, &[unit]).await.unwrap();
    assert_eq!(
        r.quarantined, 0,
        "one worker cannot quarantine a unit alone"
    );
    let lease = b.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(lease.units[0].unit_id, unit);
    let r = b.release(&lease, &[unit]).await.unwrap();
    assert_eq!(r.quarantined, 1, "two workers failing it is evidence");
    assert_eq!(units(&app.progress(id).await, "quarantined"), 1);
    // The admin distrusts `a`: its report is taken back and the unit returns to the pool.
    let (status, _) = app.quarantine(a_id, "sabotage").await;
    assert_eq!(status, StatusCode::OK);
    let p = app.progress(id).await;
    assert_eq!(units(&p, "quarantined"), 0, "{p}");
    // A third reporter quarantines it again; the admin puts it back by hand.
    let (_, c) = app.worker("c").await;
    let lease = c.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(lease.units[0].unit_id, unit);
    assert_eq!(c.release(&lease, &[unit]).await.unwrap().quarantined, 1);
    let (status, r) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/requeue"),
            Some(json!({})),
        )
        .await;
    assert_eq!((status, r["requeued"].as_i64()), (StatusCode::OK, Some(1)));
    let p = app.progress(id).await;
    assert_eq!((units(&p, "quarantined"), units(&p, "pending")), (0, 4));
    let (status, _) = app
        .admin(
            Method::POST,
            "/api/v1/campaigns/999999/requeue",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Item 1: leases given back untouched do not count, so they cannot dilute the fraction of a
/// worker's leases that expired. They count as idle instead, and a worker that only
/// takes leases and gives them back untouched loses its standing at the fifth.
#[tokio::test]
async fn lease_release_cycles_do_not_dilute_the_expired_fraction() {
    let app = TestApp::new().await;
    campaign(&app, 8).await;
    let (id, w) = app.worker("diluter").await;
    for _ in 0..5 {
        let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
        w.release(&lease, &[]).await.unwrap();
    }
    let info = app.worker_info(id).await;
    assert_eq!(info["reputation"]["leases_total"], 0, "{info}");
    assert_eq!(info["reputation"]["leases_idle"], 5, "{info}");
    assert!(
        info["quarantine_reason"]
            .as_str()
            .is_some_and(|r| r.contains("untouched")),
        "{info}"
    );
    assert_eq!(code_of(w.lease(Some(1)).await), "worker_quarantined");
}

/// Item 2: one empty result with `elapsed` 1e-9 (or 5e-324) used to make a worker infinitely
/// fast, and 8 lease requests then took 511 of 512 units. Speeds are now bounded by the
/// server's clock and a worker holds at most its share: a few seconds of its measured work
/// (a share in time, so a fast GPU is not starved).
#[tokio::test]
async fn one_worker_cannot_hoard_the_pool() {
    let app = TestApp::with_config(Config {
        policy: LeasePolicy {
            max_units_per_worker: 48,
            max_held_seconds: 3,
            ..LeasePolicy::default()
        },
        ..config()
    })
    .await;
    let id = campaign(&app, 512).await;
    let (hoarder_id, hoarder) = app.worker("hoarder").await;
    for elapsed in [1e-9, 5e-324] {
        let lease = hoarder.lease(Some(1)).await.unwrap().lease.unwrap();
        let u = lease.units[0].unit_id;
        // By the server's clock a unit took at least this long: about 160 arguments/s.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        hoarder
            .post(
                lease.lease_id,
                u,
                &empty_result(lease.fencing_token, u, elapsed),
            )
            .await
            .unwrap();
        if lease.units.len() > 1 {
            hoarder.release(&lease, &[]).await.unwrap();
        }
        let speed = app.worker_info(hoarder_id).await["arguments_per_second"].clone();
        let speed = speed.as_f64().unwrap_or_else(|| panic!("speed {speed}"));
        assert!(
            speed.is_finite() && speed <= 16.0 / 1e-3,
            "elapsed {elapsed} gave speed {speed}"
        );
    }
    let mut held = 0;
    for _ in 0..8 {
        if let Some(l) = hoarder.lease(Some(604_800)).await.unwrap().lease {
            held += l.units.len();
        }
    }
    assert!(held <= 48, "the hoarder holds {held} units");
    let (_, honest) = app.worker("honest").await;
    assert!(honest.lease(Some(1)).await.unwrap().lease.is_some());
    let p = app.progress(id).await;
    assert!(units(&p, "pending") >= 512 - 2 - 48 - 1, "{p}");
}

/// Item 2: heartbeats extend a lease, but never past the server's maximum lifetime.
#[tokio::test]
async fn heartbeats_cannot_keep_a_lease_forever() {
    let app = TestApp::with_config(Config {
        policy: LeasePolicy {
            ttl_seconds: 2,
            max_lease_seconds: 3,
            ..LeasePolicy::default()
        },
        ..config()
    })
    .await;
    let id = campaign(&app, 2).await;
    let (_, w) = app.worker("squatter").await;
    let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
    let mut refused = None;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        if let Err(e) = w.heartbeat(&lease).await {
            refused = Some(code_of::<()>(Err(e)));
            break;
        }
    }
    assert_eq!(refused.as_deref(), Some("lease_expired"));
    // The unit went back to the pool for someone else.
    let (_, other) = app.worker("other").await;
    let l = other.lease(Some(1)).await.unwrap().lease.unwrap();
    assert!(l.units.iter().any(|u| u.unit_id == lease.units[0].unit_id));
    assert_eq!(units(&app.progress(id).await, "quarantined"), 0);
}

/// A campaign whose units hold real HR-cases (as the seeded one of the export tests).
async fn hard_campaign(app: &TestApp) -> i64 {
    app.campaign(json!({
        "function": "exp", "format": "binary32", "min_bits": seed::MIN_BITS, "unit_bits": 10,
        "ranges": [{"from": "0x1p+0", "to": "0x1.001p+0"}]
    }))
    .await["id"]
        .as_i64()
        .unwrap()
}

async fn verified_total(app: &TestApp) -> u64 {
    let text = app.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix("tmd_hr_cases_verified_total "))
        .unwrap()
        .parse()
        .unwrap()
}

/// Item 6: the same case 10,000 times (or spelled several ways) used to be verified 10,000
/// times and stored as 10,000 HR-cases. It is verified and counted once.
#[tokio::test]
async fn duplicate_cases_are_verified_and_counted_once() {
    let app = TestApp::new().await;
    let id = hard_campaign(&app).await;
    let (_, w) = app.worker("repeater").await;
    let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
    let unit = &lease.units[0];
    let cases = seed::hard_cases(&unit.spec);
    assert!(!cases.is_empty());
    let case = cases[0].clone();
    let mut r = empty_result(lease.fencing_token, unit.unit_id, 1.0);
    r.hr_cases = vec![case.clone(); 9_999];
    // The same argument with a trailing zero: another spelling of one case.
    let mut respelled = case.clone();
    let (mantissa, exponent) = case.x.split_once('p').unwrap();
    let dot = if mantissa.contains('.') { "" } else { "." };
    respelled.x = format!("{mantissa}{dot}0p{exponent}");
    assert_ne!(respelled.x, case.x);
    r.hr_cases.push(respelled);
    let accepted = w.post(lease.lease_id, unit.unit_id, &r).await.unwrap();
    assert_eq!(accepted.hr_cases, 1);
    assert_eq!(app.progress(id).await["hr_cases"], 1);
    assert_eq!(verified_total(&app).await, 1);
}

/// Item 6: a quarantined worker's post under a lease that merely expired never reaches MPFR.
#[tokio::test]
async fn a_quarantined_worker_does_not_reach_verification() {
    let app = TestApp::with_config(Config {
        policy: LeasePolicy {
            ttl_seconds: 1,
            ..LeasePolicy::default()
        },
        ..config()
    })
    .await;
    hard_campaign(&app).await;
    let (id, w) = app.worker("expelled").await;
    let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
    let unit = &lease.units[0];
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Someone asks for work: the expiry pass ends the lease as `expired`.
    let (_, other) = app.worker("other").await;
    other.lease(Some(1)).await.unwrap();
    let (status, _) = app.quarantine(id, "known bad").await;
    assert_eq!(status, StatusCode::OK);
    let mut r = empty_result(lease.fencing_token, unit.unit_id, 1.0);
    r.hr_cases = seed::hard_cases(&unit.spec);
    let code = code_of(w.post(lease.lease_id, unit.unit_id, &r).await);
    assert_eq!(code, "worker_quarantined");
    assert_eq!(verified_total(&app).await, 0);
}

/// Item 10: NUL characters, control characters and newlines in stored or logged text are
/// refused with 400 (they were 500s, or forged log lines); arrays are not objects; the
/// scheme of `Authorization` is case-insensitive.
#[tokio::test]
async fn bad_text_and_shapes_are_refused_with_400() {
    let app = TestApp::new().await;
    let bodies = [
        (
            "/api/v1/campaigns",
            json!({"function": "exp", "format": "binary32", "min_bits": 12, "name": "a\u{0}b",
                   "ranges": [{"from": "1", "to": "2"}]}),
        ),
        (
            "/api/v1/campaigns",
            json!({"function": "exp", "format": "binary32", "min_bits": 12,
                   "ranges": [{"from": "1\u{0}", "to": "2"}]}),
        ),
        ("/api/v1/enrollment-tokens", json!({"note": "x\u{0}"})),
        (
            "/api/v1/enrollment-tokens",
            json!({"owner": "\u{1b}[31mred"}),
        ),
    ];
    for (path, body) in bodies {
        let (status, v) = app.admin(Method::POST, path, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}: {v}");
        assert_eq!(v["code"], "bad_request");
    }
    let (_, t) = app
        .admin(Method::POST, "/api/v1/enrollment-tokens", Some(json!({})))
        .await;
    let (status, _) = app
        .call(
            Method::POST,
            "/api/v1/workers/register",
            None,
            Some(json!({"enrollment_token": t["token"], "name": "evil\u{0}\u{1b}]0;owned\u{7}"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    hard_campaign(&app).await;
    let (wid, w) = app.worker("forger").await;
    let (status, _) = app.quarantine(wid, "r\u{0}").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
    let unit = &lease.units[0];
    for x in ["0x1p+0\u{0}", "0x1p+0\nINFO forged line", ""] {
        let mut r = empty_result(lease.fencing_token, unit.unit_id, 1.0);
        let mut case = seed::hard_cases(&unit.spec)[0].clone();
        case.x = x.to_string();
        r.hr_cases = vec![case];
        assert_eq!(
            code_of(w.post(lease.lease_id, unit.unit_id, &r).await),
            "bad_request",
            "x = {x:?}"
        );
    }
    // `[1]` used to be read as `{"seconds": 1}` and granted a lease.
    for body in [json!([1]), json!("x"), json!(null)] {
        let (status, v) = app
            .call(Method::POST, "/api/v1/leases", Some(w.token()), Some(body))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    }
    // `bearer` in lower case is the same scheme.
    let resp = app
        .http
        .get(app.url("/api/v1/campaigns"))
        .header("authorization", format!("bearer {ADMIN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

/// Item 6: however many results arrive at once, at most `verify_concurrency` are verified with
/// MPFR at the same time; the others wait their turn and are recorded.
#[tokio::test]
async fn verification_is_bounded() {
    let app = TestApp::with_config(Config {
        verify_concurrency: 2,
        ..config()
    })
    .await;
    let id = app
        .campaign(json!({
            "function": "exp", "format": "binary32", "min_bits": seed::MIN_BITS,
            "unit_bits": 14, "ranges": [{"from": "0x1p+0", "to": "0x1.03p+0"}]
        }))
        .await["id"]
        .as_i64()
        .unwrap();
    let mut posts = Vec::new();
    for i in 0..6 {
        let (_, w) = app.worker(&format!("w{i}")).await;
        let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
        let unit = lease.units[0].clone();
        let mut r = empty_result(lease.fencing_token, unit.unit_id, 1.0);
        r.hr_cases = seed::hard_cases(&unit.spec);
        assert!(r.hr_cases.len() > 50);
        posts.push((w, lease.lease_id, unit.unit_id, r));
    }
    let tasks: Vec<_> = posts
        .into_iter()
        .map(|(w, lease, unit, r)| tokio::spawn(async move { w.post(lease, unit, &r).await }))
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let text = app.metrics().await;
    let max: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("tmd_verifications_in_flight_max "))
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&max), "{max} verifications at once");
    assert_eq!(app.progress(id).await["done"]["units"], 6);
}
