//! Attacks by hostile volunteers against a real server and PostgreSQL, each as it was
//! reproduced, and what stops it now: a genuine case planted from a trivial run (in a result,
//! or loaded by an admin), a case only volunteers report against the lab's result, spare
//! identities of a suspended token, leases half computed and given back, one worker letting
//! the same units expire, verifications that time out or repeat, and results labelled with
//! another engine version in the upgrade window.

mod common;

use common::engine::{honest_runs, result, true_cases};
use common::{assert_refused, code_of, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;
use tmd_kernels::Function;
use tmd_server::bench::{empty_result, WorkerClient};
use tmd_server::{Config, LeasePolicy};
use tmd_wire::{HrCase, HrKind, Lease, UnitResult, UnitSpec};

/// Creates a campaign from `body` (the default trust policy unless it says more).
async fn create(app: &TestApp, body: Value) -> Value {
    let (status, c) = app
        .admin(Method::POST, "/api/v1/campaigns", Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{c}");
    c
}

/// The worker's record has nothing against it and it is not quarantined.
async fn assert_clean(app: &TestApp, id: i64) {
    let w = app.worker_info(id).await;
    let r = &w["reputation"];
    assert_eq!(
        (
            r["invalid"].as_i64(),
            r["refuted"].as_i64(),
            r["forged"].as_i64()
        ),
        (Some(0), Some(0), Some(0)),
        "{w}"
    );
    assert!(w["quarantined_at"].is_null(), "{w}");
}

async fn unit_row(app: &TestApp, unit: i64) -> (String, Option<String>) {
    sqlx::query_as("SELECT state, hold_reason FROM units WHERE id = $1")
        .bind(unit)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

/// Leases one unit: the lease and the unit's id and range.
async fn lease_one(w: &WorkerClient) -> (Lease, i64, UnitSpec) {
    let lease = w.lease(Some(1)).await.unwrap().lease.expect("work");
    let u = lease.units[0].clone();
    (lease, u.unit_id, u.spec)
}

/// expm1 in binary32 at 16 bits on [2^-40, 2^-39): one unit, every argument of which is in a
/// trivial run (expm1(x) rounds like x there, with at least 16 identical bits).
const TRIVIAL: &str = "0x1.000002p-40";

async fn trivial_campaign(app: &TestApp) -> i64 {
    let c = create(
        app,
        json!({"function": "expm1", "format": "binary32", "min_bits": 16, "unit_bits": 23,
               "ranges": [{"from": "0x1p-40", "to": "0x1p-39"}]}),
    )
    .await;
    assert_eq!(c["units_total"], 1, "{c}");
    c["id"].as_i64().unwrap()
}

/// A volunteer posts an honest result plus one argument of the unit's trivial run as an
/// HR-case. MPFR confirms it (it is hard), but no engine lists a case inside a trivial run:
/// it is refused as forged and counts against its poster. It used to be recorded as a fact of
/// the unit, after which every honest result, the lab's included, was refuted and its worker
/// quarantined.
#[tokio::test]
async fn a_case_planted_from_a_trivial_run_is_refused_and_the_lab_stays_clean() {
    let app = TestApp::new().await;
    let id = trivial_campaign(&app).await;
    let (mallory_id, mallory) = app.enroll(json!({"owner": "mallory"}), "mallory").await;
    let (honest_id, honest) = app.enroll(json!({"owner": "honest"}), "honest").await;
    let (lab_id, lab) = app
        .enroll(json!({"owner": "lab", "trusted": true}), "lab")
        .await;

    let (lease, unit, spec) = lease_one(&mallory).await;
    let runs = honest_runs(Function::Expm1, "binary32", 16, &spec);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].reason, "trivial");
    let planted = HrCase {
        x: TRIVIAL.into(),
        bits: 30,
        neg_log2_d: 60.0,
        kind: HrKind::Fp,
        rounded: TRIVIAL.into(),
    };
    let e = code_of(
        mallory
            .post(
                lease.lease_id,
                unit,
                &result(&lease, unit, &[planted], &runs),
            )
            .await,
    );
    assert_eq!(e, "forged_case");
    let m = app.worker_info(mallory_id).await;
    assert!(!m["quarantined_at"].is_null(), "{m}");

    // The honest volunteer and the lab post the honest result: the lab's settles the unit,
    // nobody honest is refuted.
    for w in [&honest, &lab] {
        let (lease, unit, _) = lease_one(w).await;
        w.post(lease.lease_id, unit, &result(&lease, unit, &[], &runs))
            .await
            .unwrap();
    }
    assert_eq!(unit_row(&app, unit).await.0, "done");
    assert_clean(&app, honest_id).await;
    assert_clean(&app, lab_id).await;
    assert_eq!(app.progress(id).await["hr_cases"], 0);
}

/// An admin who loads a known case lying inside a trivial run would spring the same trap on
/// the lab's own worker: such a case is refused, with the run named.
#[tokio::test]
async fn a_known_case_inside_a_trivial_run_is_refused() {
    let app = TestApp::new().await;
    let id = trivial_campaign(&app).await;
    let (status, r) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/known-cases"),
            Some(json!({"lines": [TRIVIAL]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        (r["loaded"].as_u64(), r["refused_total"].as_u64()),
        (Some(0), Some(1)),
        "{r}"
    );
    let why = r["refused"][0]["why"].as_str().unwrap();
    assert!(
        why.contains("skipped run") && why.contains("trivial"),
        "{why}"
    );

    let (lab_id, lab) = app
        .enroll(json!({"owner": "lab", "trusted": true}), "lab")
        .await;
    let (lease, unit, spec) = lease_one(&lab).await;
    let runs = honest_runs(Function::Expm1, "binary32", 16, &spec);
    lab.post(lease.lease_id, unit, &result(&lease, unit, &[], &runs))
        .await
        .unwrap();
    assert_eq!(unit_row(&app, unit).await.0, "done");
    assert_clean(&app, lab_id).await;
}

/// exp in binary32 at 8 bits, one unit of 1024 arguments from 1 (about a dozen cases).
async fn small_campaign(app: &TestApp, extra: Value) -> i64 {
    let mut body = json!({"function": "exp", "format": "binary32", "min_bits": 8,
        "unit_bits": 10, "ranges": [{"from": "0x1p+0", "to": "0x1.0008p+0"}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    create(app, body).await["id"].as_i64().unwrap()
}

/// A case only volunteers report, which the lab's result lacks: either the lab's engine is
/// broken or the case is planted. The lab is not quarantined before a person looks: the unit
/// is held with the reason. An admin who removes the case (planted) lets the lab's result
/// settle the unit; a later result reporting the removed case is refused as forged.
#[tokio::test]
async fn a_case_only_volunteers_report_holds_the_unit_for_an_admin_who_removes_it() {
    let app = TestApp::new().await;
    let id = small_campaign(&app, json!({})).await;
    let (planter_id, planter) = app.enroll(json!({"owner": "p"}), "planter").await;
    let (lab_id, lab) = app
        .enroll(json!({"owner": "lab", "trusted": true}), "lab")
        .await;

    let (lease, unit, spec) = lease_one(&planter).await;
    let cases = true_cases(Function::Exp, "binary32", 8, &spec);
    assert!(cases.len() > 2, "{}", cases.len());
    // The case the planter adds and that (we say) no engine reports.
    let planted = cases[0].clone();
    planter
        .post(lease.lease_id, unit, &result(&lease, unit, &cases, &[]))
        .await
        .unwrap();
    let (lease, unit2, _) = lease_one(&lab).await;
    assert_eq!(unit2, unit);
    lab.post(
        lease.lease_id,
        unit,
        &result(&lease, unit, &cases[1..], &[]),
    )
    .await
    .unwrap();
    // Held for a person, with the case named; nobody quarantined.
    let (state, reason) = unit_row(&app, unit).await;
    assert_eq!(state, "quarantined");
    let reason = reason.unwrap_or_default();
    assert!(
        reason.contains(&planted.x) && reason.contains("remove"),
        "{reason}"
    );
    assert_clean(&app, lab_id).await;
    assert_clean(&app, planter_id).await;

    // The admin removes it: the lab's result settles the unit, the planter's is outvoted.
    let (status, r) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/cases/remove"),
            Some(json!({"xs": [planted.x], "reason": "planted: no engine reports it"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        (r["removed"].as_u64(), r["units_done"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    assert_eq!(unit_row(&app, unit).await.0, "done");
    assert_clean(&app, lab_id).await;
    let p = app.worker_info(planter_id).await;
    assert_eq!(p["reputation"]["invalid"], 1, "{p}");
    assert_eq!(
        app.progress(id).await["hr_cases"].as_u64(),
        Some(cases.len() as u64 - 1)
    );
    // Removing it again finds nothing; bad input is refused.
    let (_, r) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/cases/remove"),
            Some(json!({"xs": [planted.x, "garbage"], "reason": "again"})),
        )
        .await;
    assert_eq!(r["removed"], 0, "{r}");
    assert_eq!(r["not_found"].as_array().unwrap().len(), 2, "{r}");
    assert_refused!(
        app.admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/cases/remove"),
            Some(json!({"xs": [], "reason": "x"}))
        )
        .await,
        BAD_REQUEST,
        "bad_request"
    );
}

/// A removed case reported again is refused as forged: an admin's removal stands.
#[tokio::test]
async fn a_removed_case_reported_again_is_refused() {
    let app = TestApp::new().await;
    let id = small_campaign(&app, json!({})).await;
    let (_, a) = app.enroll(json!({"owner": "a"}), "a").await;
    let (_, b) = app.enroll(json!({"owner": "b"}), "b").await;
    let (lease, unit, spec) = lease_one(&a).await;
    let cases = true_cases(Function::Exp, "binary32", 8, &spec);
    a.post(lease.lease_id, unit, &result(&lease, unit, &cases, &[]))
        .await
        .unwrap();
    let (status, r) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/cases/remove"),
            Some(json!({"xs": [cases[0].x], "reason": "planted"})),
        )
        .await;
    assert_eq!(
        (status, r["removed"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{r}"
    );
    let (lease, unit2, _) = lease_one(&b).await;
    assert_eq!(unit2, unit);
    let e = code_of(
        b.post(lease.lease_id, unit, &result(&lease, unit, &cases, &[]))
            .await,
    );
    assert_eq!(e, "forged_case");
}

/// A forged case quarantines its poster; at the token's second quarantined worker the token is
/// suspended, and with it the identities registered in advance: they used to lease and post on
/// (7 of 7), re-echoing their partners' lies.
#[tokio::test]
async fn a_suspended_token_suspends_its_spare_identities() {
    let app = TestApp::new().await;
    small_campaign(&app, json!({"replication": 1, "trust_all_workers": true})).await;
    let (status, t) = app
        .admin(
            Method::POST,
            "/api/v1/enrollment-tokens",
            Some(json!({"owner": "sybil", "uses": 5})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{t}");
    let token = t["token"].as_str().unwrap();
    let mut ids = Vec::new();
    let mut ws = Vec::new();
    for i in 0..4 {
        let (id, w) = app.register(token, &format!("sybil-{i}")).await;
        ids.push(id);
        ws.push(w);
    }
    let forged = HrCase {
        x: "0x1p+0".into(),
        bits: 30,
        neg_log2_d: 60.0,
        kind: HrKind::Fp,
        rounded: "0x1.5bf0a8p+1".into(),
    };
    for w in &ws[..2] {
        let (lease, unit, _) = lease_one(w).await;
        let e = code_of(
            w.post(
                lease.lease_id,
                unit,
                &result(&lease, unit, std::slice::from_ref(&forged), &[]),
            )
            .await,
        );
        assert_eq!(e, "forged_case");
    }
    for (id, w) in ids[2..].iter().zip(&ws[2..]) {
        let info = app.worker_info(*id).await;
        let why = info["quarantine_reason"].as_str().unwrap_or_default();
        assert!(why.contains("suspended"), "{info}");
        assert_eq!(code_of(w.lease(Some(1)).await), "worker_quarantined");
    }
    // The token registers no one more.
    let (status, _) = app
        .call(
            Method::POST,
            "/api/v1/workers/register",
            None,
            Some(json!({"enrollment_token": token, "name": "late"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// The idle rule counted leases given back whole: posting one unit of each lease and giving
/// the rest back (12 cycles holding 32 units) was never idle. It counts units now.
#[tokio::test]
async fn posting_one_unit_and_giving_the_rest_back_is_idle() {
    let app = TestApp::new().await;
    let to = format!("0x{:x}p-23", (1u64 << 23) + 1024 * 1024);
    create(
        &app,
        json!({"function": "exp", "format": "binary32", "min_bits": 12, "unit_bits": 10,
               "ranges": [{"from": "0x1p+0", "to": to}], "replication": 1,
               "trust_all_workers": true}),
    )
    .await;
    let (id, w) = app.enroll(json!({"owner": "hoarder"}), "hoarder").await;
    let mut cycles = 0;
    let mut held = 0;
    while cycles < 12 {
        let Ok(r) = w.lease(Some(30)).await else {
            break;
        };
        let lease = r.lease.expect("work");
        held = held.max(lease.units.len());
        let u = &lease.units[0];
        // A fast result, so that the next leases are sized for many units.
        w.post(
            lease.lease_id,
            u.unit_id,
            &empty_result(lease.fencing_token, u.unit_id, 0.01),
        )
        .await
        .unwrap();
        if lease.units.len() > 1 && w.release(&lease, &[]).await.is_err() {
            break;
        }
        cycles += 1;
    }
    assert!(held >= 16, "the hoarder held {held} units at once");
    let info = app.worker_info(id).await;
    let why = info["quarantine_reason"].as_str().unwrap_or_default();
    assert!(why.contains("untouched"), "{info}");
    assert!(cycles <= 8, "quarantined after {cycles} cycles");
    assert_eq!(code_of(w.lease(Some(1)).await), "worker_quarantined");
}

/// One worker could quarantine a unit by letting its lease expire four times and reporting it
/// failed once, keeping its own record clean. Attempts count once per worker (per owner, for
/// volunteers) and unit now.
#[tokio::test]
async fn one_worker_letting_a_unit_expire_cannot_quarantine_it() {
    let app = TestApp::with_config(Config {
        policy: LeasePolicy {
            ttl_seconds: 1,
            ..LeasePolicy::default()
        },
        ..common::config()
    })
    .await;
    let to = format!("0x{:x}p-23", (1u64 << 23) + 64 * 1024);
    let c = create(
        &app,
        json!({"function": "exp", "format": "binary32", "min_bits": 12, "unit_bits": 10,
               "ranges": [{"from": "0x1p+0", "to": to}], "replication": 1,
               "trust_all_workers": true}),
    )
    .await;
    let id = c["id"].as_i64().unwrap();
    let (wid, w) = app.enroll(json!({"owner": "saboteur"}), "saboteur").await;
    // A first unit finished, so that its record has a lease that did not expire.
    let first = w.lease(Some(1)).await.unwrap().lease.unwrap();
    let done = first.units[0].unit_id;
    w.post(
        first.lease_id,
        done,
        &empty_result(first.fencing_token, done, 0.5),
    )
    .await
    .unwrap();
    // Four leases of the same units left to expire (each request expires the one before).
    let mut target = None;
    for _ in 0..4 {
        let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
        let unit = lease.units[0].unit_id;
        assert_eq!(
            *target.get_or_insert(unit),
            unit,
            "the same unit comes back"
        );
        tokio::time::sleep(Duration::from_millis(1700)).await;
    }
    // Then reported failed: before, its fifth attempt quarantined it.
    let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
    let unit = lease.units[0].unit_id;
    assert_eq!(Some(unit), target);
    w.release(&lease, &[unit]).await.unwrap();
    let p = app.progress(id).await;
    assert_eq!(p["quarantined"]["units"], 0, "{p}");
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM units WHERE id = $1")
        .bind(unit)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(attempts, 1, "one attempt per unit for one owner");
    let info = app.worker_info(wid).await;
    assert_eq!(info["reputation"]["leases_expired"], 4, "{info}");
}

/// exp in binary32 at 9 bits on one unit of 2^20 arguments: about 4,000 HR-cases, whose
/// verification takes tens of milliseconds.
async fn heavy_unit(app: &TestApp) -> (i64, i64, Lease, Vec<HrCase>, WorkerClient, i64) {
    let c = create(
        app,
        json!({"function": "exp", "format": "binary32", "min_bits": 9, "unit_bits": 20,
               "ranges": [{"from": "0x1p+0", "to": "0x1.2p+0"}]}),
    )
    .await;
    let (wid, w) = app.enroll(json!({"owner": "heavy"}), "heavy").await;
    let (lease, unit, spec) = lease_one(&w).await;
    let cases = true_cases(Function::Exp, "binary32", 9, &spec);
    assert!(cases.len() > 3000, "{}", cases.len());
    (c["id"].as_i64().unwrap(), unit, lease, cases, w, wid)
}

/// The verification a unit's posts cost is bounded, whatever becomes of each post: the same
/// result posted again and again finds its unit's budget spent, is refused without MPFR, and
/// its worker is quarantined at the third overrun.
#[tokio::test]
async fn repeated_posts_find_their_verification_budget_spent() {
    let app = TestApp::with_config(Config {
        verify_budget: tmd_server::domain::budget::VerifyBudget {
            per_unit: 0.001,
            ..Default::default()
        },
        ..common::config()
    })
    .await;
    let (_, unit, lease, cases, w, wid) = heavy_unit(&app).await;
    let posted = result(&lease, unit, &cases, &[]);
    for _ in 0..3 {
        assert_eq!(
            code_of(w.post(lease.lease_id, unit, &posted).await),
            "verification_budget"
        );
    }
    let info = app.worker_info(wid).await;
    assert_eq!(info["reputation"]["verify_overruns"], 3, "{info}");
    assert!(info["verify_seconds"].as_f64().unwrap() > 0.0, "{info}");
    assert!(
        info["quarantine_reason"]
            .as_str()
            .is_some_and(|r| r.contains("verification")),
        "{info}"
    );
}

/// A post that hits the request timeout used to give its verification permit back while the
/// MPFR task ran on, and cost its worker nothing: the task now keeps its permit until it ends
/// (the server never verifies more at once than `--verify-concurrency`) and is charged.
#[tokio::test]
async fn a_timed_out_post_keeps_its_permit_and_is_charged() {
    let mut app = TestApp::with_config(Config {
        verify_concurrency: 1,
        ..common::config()
    })
    .await;
    let (_, unit, lease, cases, w, wid) = heavy_unit(&app).await;
    let posted = result(&lease, unit, &cases, &[]);
    // The same database behind a server whose requests time out fast.
    app.config.request_timeout = Duration::from_millis(20);
    app.restart().await;
    let w = w.with_base(&app.base);
    let mut charged = 0.0;
    for _ in 0..10 {
        let e = code_of(w.post(lease.lease_id, unit, &posted).await);
        assert_eq!(e, "timeout");
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            charged = app.worker_info(wid).await["verify_seconds"]
                .as_f64()
                .unwrap();
            if charged > 0.0 {
                break;
            }
        }
        if charged > 0.0 {
            break;
        }
    }
    assert!(
        charged > 0.0,
        "a timed-out verification is charged to its worker"
    );
    // The server's requests time out after 20 ms: under load a read of /metrics can too.
    let mut metrics = String::new();
    for _ in 0..50 {
        metrics = app.metrics().await;
        if metrics.contains("tmd_verifications_in_flight_max") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        metrics.contains("tmd_verifications_in_flight_max 1\n"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("in_flight"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A server in the upgrade window: it serves engine version 0 (workers older than versions)
/// beside its own.
async fn upgrade_window() -> TestApp {
    let mut config = common::config();
    config.engines = vec![0, tmd_kernels::ENGINE_VERSION];
    TestApp::with_config(config).await
}

/// A result labelled with engine version 0, whose counters are not the current engine's.
fn labelled_old(lease: &Lease, unit: i64, cases: &[HrCase]) -> UnitResult {
    UnitResult {
        engine: None,
        hr_cases: cases.to_vec(),
        stats: tmd_wire::UnitStats {
            units: 1,
            domains: 7,
            ..Default::default()
        },
        ..empty_result(lease.fencing_token, unit, 1.0)
    }
}

/// One unit of exp in binary32 at 6 bits (about 32 cases): claiming none is implausible.
async fn dense_unit(app: &TestApp) {
    create(
        app,
        json!({"function": "exp", "format": "binary32", "min_bits": 6, "unit_bits": 10,
               "ranges": [{"from": "0x1p+0", "to": "0x1.0008p+0"}]}),
    )
    .await;
}

/// In the upgrade window (`--accept-engine 0,...`) two colluders labelled with the old
/// version used to settle a lie that honest results of the current version never judged.
/// Results are compared by their cases across versions now, and an implausibly low count takes
/// a third replica, whose cases refute them.
#[tokio::test]
async fn an_old_engine_label_does_not_shield_a_lie() {
    let app = upgrade_window().await;
    dense_unit(&app).await;
    let (a_id, a) = app.enroll(json!({"owner": "a"}), "a").await;
    let (b_id, b) = app.enroll(json!({"owner": "b"}), "b").await;
    let (h_id, h) = app.enroll(json!({"owner": "h"}), "h").await;
    let (lease, unit, spec) = lease_one(&a).await;
    a.post(lease.lease_id, unit, &labelled_old(&lease, unit, &[]))
        .await
        .unwrap();
    let (lease, unit_b, _) = lease_one(&b).await;
    assert_eq!(unit_b, unit);
    b.post(lease.lease_id, unit, &labelled_old(&lease, unit, &[]))
        .await
        .unwrap();
    assert_ne!(
        unit_row(&app, unit).await.0,
        "done",
        "a lie of two settles nothing"
    );
    let cases = true_cases(Function::Exp, "binary32", 6, &spec);
    assert!(cases.len() > 16, "{}", cases.len());
    let (lease, unit_h, _) = lease_one(&h).await;
    assert_eq!(unit_h, unit);
    h.post(lease.lease_id, unit, &result(&lease, unit, &cases, &[]))
        .await
        .unwrap();
    for liar in [a_id, b_id] {
        let info = app.worker_info(liar).await;
        assert_eq!(info["reputation"]["refuted"], 1, "{info}");
    }
    assert_clean(&app, h_id).await;
}

/// An honest result labelled with the old version and a current one agree on the cases: the
/// unit settles with the two owners there are, instead of waiting for ever for a second
/// result of one version.
#[tokio::test]
async fn an_old_engine_label_does_not_stall_a_unit() {
    let app = upgrade_window().await;
    dense_unit(&app).await;
    let (old_id, old) = app.enroll(json!({"owner": "o"}), "old").await;
    let (h_id, h) = app.enroll(json!({"owner": "h"}), "h").await;
    let (lease, unit, spec) = lease_one(&old).await;
    let cases = true_cases(Function::Exp, "binary32", 6, &spec);
    old.post(lease.lease_id, unit, &labelled_old(&lease, unit, &cases))
        .await
        .unwrap();
    let (lease, unit_h, _) = lease_one(&h).await;
    assert_eq!(unit_h, unit);
    h.post(lease.lease_id, unit, &result(&lease, unit, &cases, &[]))
        .await
        .unwrap();
    assert_eq!(unit_row(&app, unit).await.0, "done");
    for id in [old_id, h_id] {
        assert_eq!(app.worker_info(id).await["reputation"]["valid"], 1);
    }
}
