//! Trust by default, each attack against a real server and PostgreSQL: a lazy
//! volunteer under the default settings, two colluders against a verified case, colluders
//! holding every replica of a unit with a known case (ringer), ten identities of one token;
//! and the honest worker's standing after each. Also the lab's trusted token and the explicit
//! opt-out.

mod common;

use common::seed::hard_cases;
use common::{code_of, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tmd_server::bench::{empty_result, WorkerClient};
use tmd_wire::{HrCase, Lease};

/// exp in binary32 at 8 bits, units of 1024 arguments from 1 (a dozen HR-cases each), with
/// the default policy unless `extra` says more. Created the way `deploy/README.md` shows: no
/// replication field.
async fn campaign(app: &TestApp, units: u64, extra: Value) -> Value {
    let to = format!("0x{:x}p-23", (1u64 << 23) + units * 1024);
    let mut body = json!({
        "function": "exp", "format": "binary32", "min_bits": common::seed::MIN_BITS,
        "unit_bits": 10, "ranges": [{"from": "0x1p+0", "to": to}]
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, c) = app
        .admin(Method::POST, "/api/v1/campaigns", Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{c}");
    c
}

/// The honest worker's standing: nothing against it, not quarantined.
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

/// Leases one unit; posts its real HR-cases (`honest`) or none; returns the unit and its cases.
async fn post_one(w: &WorkerClient, honest: bool) -> (i64, Vec<HrCase>) {
    let lease = w.lease(Some(1)).await.unwrap().lease.expect("work");
    let u = &lease.units[0];
    let cases = hard_cases(&u.spec);
    assert!(!cases.is_empty(), "the unit holds HR-cases");
    let mut r = empty_result(lease.fencing_token, u.unit_id, 1.0);
    if honest {
        r.hr_cases = cases.clone();
    }
    w.post(lease.lease_id, u.unit_id, &r).await.unwrap();
    (u.unit_id, cases)
}

async fn unit_state(app: &TestApp, unit: i64) -> String {
    sqlx::query_scalar("SELECT state FROM units WHERE id = $1")
        .bind(unit)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_lazy_volunteer_cannot_settle_a_unit_alone_under_the_defaults() {
    let app = TestApp::new().await;
    let c = campaign(&app, 1, json!({})).await;
    assert_eq!(
        (
            &c["replication"],
            &c["distinct_owners"],
            &c["trust_all_workers"]
        ),
        (&json!(2), &json!(true), &json!(false)),
        "{c}"
    );
    let id = c["id"].as_i64().unwrap();
    let (lazy_id, lazy) = app.enroll(json!({}), "lazy").await;
    let (unit, cases) = post_one(&lazy, false).await;
    // Accepted, but it settles nothing alone.
    assert_eq!(unit_state(&app, unit).await, "pending");
    let (h1_id, h1) = app.enroll(json!({}), "honest-1").await;
    assert_eq!(post_one(&h1, true).await.0, unit);
    // The honest result proves the lazy one wrong: refuted, its worker quarantined.
    let lazy_info = app.worker_info(lazy_id).await;
    assert_eq!(lazy_info["reputation"]["refuted"], 1, "{lazy_info}");
    assert!(lazy_info["quarantined_at"].is_string(), "{lazy_info}");
    assert_eq!(code_of(lazy.lease(Some(1)).await), "worker_quarantined");
    // One honest result does not stand alone either: a second one settles the unit.
    assert_eq!(unit_state(&app, unit).await, "pending");
    let (h2_id, h2) = app.enroll(json!({}), "honest-2").await;
    assert_eq!(post_one(&h2, true).await.0, unit);
    let p = app.progress(id).await;
    assert_eq!(p["complete"], true, "{p}");
    assert_eq!(p["hr_cases"], cases.len(), "{p}");
    assert_eq!(p["replication"]["single_untrusted"], 0, "{p}");
    for h in [h1_id, h2_id] {
        assert_clean(&app, h).await;
        assert_eq!(app.worker_info(h).await["reputation"]["valid"], 1);
    }
}

#[tokio::test]
async fn two_colluders_cannot_outvote_a_verified_case() {
    let app = TestApp::new().await;
    let id = campaign(&app, 3, json!({}))
        .await
        .pipe(|c| c["id"].as_i64().unwrap());
    let (honest_id, honest) = app.enroll(json!({"owner": "honest"}), "honest").await;
    let (c1_id, c1) = app.enroll(json!({"owner": "mallory"}), "c1").await;
    let (c2_id, c2) = app.enroll(json!({"owner": "trudy"}), "c2").await;
    let (unit, _) = post_one(&honest, true).await;
    // Both colluders get the unit the honest worker computed (the lowest pending) and post
    // the same empty result: two agreeing votes, and both proven wrong.
    for c in [&c1, &c2] {
        assert_eq!(post_one(c, false).await.0, unit);
    }
    for id in [c1_id, c2_id] {
        let w = app.worker_info(id).await;
        assert!(
            w["quarantine_reason"]
                .as_str()
                .is_some_and(|r| r.contains("left out an HR-case")),
            "{w}"
        );
    }
    // The honest result is never outvoted: it waits for an honest partner.
    assert_clean(&app, honest_id).await;
    assert_eq!(unit_state(&app, unit).await, "pending");
    let (_, partner) = app.enroll(json!({"owner": "partner"}), "partner").await;
    assert_eq!(post_one(&partner, true).await.0, unit);
    assert_eq!(unit_state(&app, unit).await, "done");
    let p = app.progress(id).await;
    assert_eq!(p["replication"]["refuted"], 2, "{p}");
    assert_eq!(p["replication"]["outvoted"], 0, "{p}");
    assert_clean(&app, honest_id).await;
    // The verdicts as stored: the colluders' results refuted (and void), the honest agreed.
    let verdicts: Vec<(i64, String)> =
        sqlx::query_as("SELECT worker_id, verdict FROM results WHERE unit_id = $1 ORDER BY id")
            .bind(unit)
            .fetch_all(app.db.pool())
            .await
            .unwrap();
    assert_eq!(verdicts[0], (honest_id, "agreed".to_string()));
    assert_eq!(verdicts[1].1, "refuted");
    assert_eq!(verdicts[2].1, "refuted");
}

#[tokio::test]
async fn colluders_holding_every_replica_are_caught_by_a_known_case() {
    let app = TestApp::new().await;
    let id = campaign(&app, 2, json!({}))
        .await
        .pipe(|c| c["id"].as_i64().unwrap());
    let (c1_id, c1) = app.enroll(json!({"owner": "mallory"}), "c1").await;
    let (c2_id, c2) = app.enroll(json!({"owner": "trudy"}), "c2").await;
    let (unit, cases) = post_one(&c1, false).await;
    assert_eq!(post_one(&c2, false).await.0, unit);
    // They held both replicas and agreed: the vote alone cannot see it.
    assert_eq!(unit_state(&app, unit).await, "done");
    // The admin loads known cases (a CORE-MATH .wc file): one of this unit, one that is no
    // HR-case at 8 bits (refused), one outside the campaign.
    let lines = vec![
        "# exp, binary32: known hard cases".to_string(),
        format!("{}  # ringer", cases[0].x),
        "0x1.000002p+0".into(),
        "0x1.8p+5".into(),
    ];
    let (status, loaded) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/known-cases"),
            Some(json!({ "lines": lines })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{loaded}");
    assert_eq!(
        (
            &loaded["submitted"],
            &loaded["loaded"],
            &loaded["units_reopened"]
        ),
        (&json!(3), &json!(1), &json!(1)),
        "{loaded}"
    );
    assert_eq!(loaded["refused_total"], 2, "{loaded}");
    let mut caught: Vec<i64> = serde_json::from_value(loaded["workers_caught"].clone()).unwrap();
    caught.sort_unstable();
    assert_eq!(caught, vec![c1_id, c2_id], "{loaded}");
    for w in [c1_id, c2_id] {
        assert!(app.worker_info(w).await["quarantined_at"].is_string());
    }
    // The unit is redone by honest workers; the known case alone never appears as found.
    assert_eq!(unit_state(&app, unit).await, "pending");
    let (h1_id, h1) = app.enroll(json!({"owner": "alice"}), "h1").await;
    let (h2_id, h2) = app.enroll(json!({"owner": "bob"}), "h2").await;
    assert_eq!(post_one(&h1, true).await.0, unit);
    // A new liar meets the known case at once, on its first post.
    let (liar_id, liar) = app.enroll(json!({"owner": "eve"}), "liar").await;
    assert_eq!(post_one(&liar, false).await.0, unit);
    assert!(app.worker_info(liar_id).await["quarantined_at"].is_string());
    assert_eq!(post_one(&h2, true).await.0, unit);
    assert_eq!(unit_state(&app, unit).await, "done");
    for h in [h1_id, h2_id] {
        assert_clean(&app, h).await;
    }
    // Loading the same file again adds nothing and catches no one.
    let (_, again) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/known-cases"),
            Some(json!({ "lines": lines })),
        )
        .await;
    assert_eq!(
        (
            &again["loaded"],
            &again["already_known"],
            &again["known_total"]
        ),
        (&json!(0), &json!(1), &json!(1)),
        "{again}"
    );
    // Workers cannot load known cases.
    let (status, _) = app
        .call(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/known-cases"),
            Some(h1.token()),
            Some(json!({ "lines": lines })),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn ten_identities_of_one_token_cannot_hold_a_campaign() {
    let app = TestApp::new().await;
    let c = campaign(&app, 128, json!({})).await;
    let (status, t) = app
        .admin(Method::POST, "/api/v1/enrollment-tokens", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let token = t["token"].as_str().unwrap().to_string();
    let mut sybils = Vec::new();
    for i in 0..10 {
        sybils.push(app.register(&token, &format!("sybil-{i}")).await);
    }
    // Each asks again and again: together they hold at most a quarter of the campaign.
    let mut leases: Vec<Vec<Lease>> = vec![Vec::new(); sybils.len()];
    for _ in 0..8 {
        for (i, (_, w)) in sybils.iter().enumerate() {
            if let Some(l) = w.lease(Some(1)).await.unwrap().lease {
                leases[i].push(l);
            }
        }
    }
    let held: usize = leases.iter().flatten().map(|l| l.units.len()).sum();
    let units = c["units_total"].as_u64().unwrap() as usize;
    assert_eq!(held, units / 4, "the token's share");
    let (honest_id, honest) = app.enroll(json!({"owner": "honest"}), "honest").await;
    let l = honest.lease(Some(1)).await.unwrap().lease;
    assert!(l.is_some(), "the honest worker gets work");
    // They give their leases back untouched, again and again: each loses its standing at its
    // fifth idle lease, and the token registers no one after two quarantines.
    for (i, (_, w)) in sybils.iter().enumerate() {
        for _ in 0..5 {
            let lease = match leases[i].pop() {
                Some(l) => l,
                None => match w.lease(Some(1)).await {
                    Ok(r) => r.lease.expect("room under the share again"),
                    Err(_) => break,
                },
            };
            if w.release(&lease, &[]).await.is_err() {
                break;
            }
        }
        assert_eq!(code_of(w.lease(Some(1)).await), "worker_quarantined");
    }
    for (id, _) in &sybils {
        assert!(app.worker_info(*id).await["quarantined_at"].is_string());
    }
    let (status, e) = app
        .call(
            Method::POST,
            "/api/v1/workers/register",
            None,
            Some(json!({"enrollment_token": token, "name": "sybil-11"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{e}");
    assert_clean(&app, honest_id).await;
}

#[tokio::test]
async fn a_lab_token_settles_alone_and_decides_disputes() {
    let app = TestApp::new().await;
    let id = campaign(&app, 2, json!({}))
        .await
        .pipe(|c| c["id"].as_i64().unwrap());
    let (lab_id, lab) = app
        .enroll(json!({"trusted": true, "owner": "lab"}), "lab")
        .await;
    let w = app.worker_info(lab_id).await;
    assert_eq!(w["trusted"], true, "{w}");
    let (unit, _) = post_one(&lab, true).await;
    assert_eq!(unit_state(&app, unit).await, "done");
    // Two volunteers disagree on the next unit (both with every case, different counters):
    // no coin toss; the lab's result decides.
    let (v1_id, v1) = app.enroll(json!({"owner": "v1"}), "v1").await;
    let (_, v2) = app.enroll(json!({"owner": "v2"}), "v2").await;
    let post = |w: WorkerClient, domains: u64| async move {
        let lease = w.lease(Some(1)).await.unwrap().lease.expect("work");
        let u = &lease.units[0];
        let mut r = empty_result(lease.fencing_token, u.unit_id, 1.0);
        r.hr_cases = hard_cases(&u.spec);
        r.stats.domains = domains;
        w.post(lease.lease_id, u.unit_id, &r).await.unwrap();
        u.unit_id
    };
    let second = post(v1.clone(), 3).await;
    assert_eq!(post(v2.clone(), 5).await, second);
    assert_eq!(unit_state(&app, second).await, "pending");
    assert_eq!(post(lab.clone(), 5).await, second);
    assert_eq!(unit_state(&app, second).await, "done");
    assert_eq!(app.worker_info(v1_id).await["reputation"]["invalid"], 1);
    let p = app.progress(id).await;
    assert_eq!(p["complete"], true, "{p}");
    assert_eq!(p["replication"]["alone"], 1, "{p}");
    assert_eq!(p["replication"]["single_untrusted"], 0, "{p}");
}

#[tokio::test]
async fn a_campaign_that_trusts_all_workers_says_so_and_counts_what_rests_on_one() {
    let app = TestApp::new().await;
    let c = campaign(&app, 2, json!({"trust_all_workers": true})).await;
    assert_eq!(
        (&c["trust_all_workers"], &c["replication"]),
        (&json!(true), &json!(1)),
        "{c}"
    );
    let id = c["id"].as_i64().unwrap();
    let (_, w) = app.enroll(json!({}), "farm").await;
    post_one(&w, true).await;
    post_one(&w, true).await;
    let p = app.progress(id).await;
    assert_eq!(p["complete"], true, "{p}");
    assert_eq!(p["replication"]["single_untrusted"], 2, "{p}");
}

#[tokio::test]
async fn answers_are_not_sniffed_nor_cached_metrics_need_a_token_and_names_stay_visible() {
    let app = TestApp::new().await;
    let resp = app
        .http
        .post(app.url("/api/v1/enrollment-tokens"))
        .bearer_auth(common::ADMIN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let h = resp.headers();
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["cache-control"], "no-store");
    let anonymous = app.http.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert!(app.metrics().await.contains("tmd_results_accepted_total"));
    // Invisible characters in what people read are refused with a JSON 400.
    for body in [
        json!({"owner": "hon\u{200b}est"}),
        json!({"note": "a\u{202e}b"}),
        json!({"owner": "x\u{e0041}"}),
    ] {
        let (status, e) = app
            .admin(Method::POST, "/api/v1/enrollment-tokens", Some(body))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
        assert_eq!(e["code"], "bad_request", "{e}");
    }
    // The OpenAPI document states the real defaults.
    let (_, doc) = app.call(Method::GET, "/api/openapi.json", None, None).await;
    let schemas = &doc["components"]["schemas"];
    let text = |s: &str, f: &str| {
        schemas[s]["properties"][f]["description"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(text("CreateCampaign", "distinct_owners").contains("default true"));
    assert!(text("CreateCampaign", "replication").contains("default 2"));
    assert!(text("CreateEnrollmentToken", "uses").contains("10"));
    assert!(text("CreateEnrollmentToken", "expires_in_seconds").contains("7 days"));
}

/// `x.pipe(f)`: `f(x)`, to keep a chain of awaits readable.
trait Pipe: Sized {
    fn pipe<T>(self, f: impl FnOnce(Self) -> T) -> T {
        f(self)
    }
}
impl<S> Pipe for S {}

/// A campaign under the default replication worked by one owner alone stays at 0%: progress,
/// the answer to the worker's lease request and `campaign watch` say that its units wait for
/// a second owner.
#[tokio::test]
async fn units_waiting_for_a_second_owner_say_so() {
    use tokio::io::AsyncBufReadExt;
    let app = TestApp::new().await;
    let id = campaign(&app, 2, json!({})).await["id"].as_i64().unwrap();
    let (_, w) = app.worker("lone").await;
    for _ in 0..2 {
        post_one(&w, true).await;
    }
    let resp = w.lease(Some(1)).await.unwrap();
    assert!(resp.lease.is_none(), "{resp:?}");
    assert!(
        resp.waiting
            .iter()
            .any(|x| x.reason == "replica" && x.units == 2),
        "{resp:?}"
    );
    let p = app.progress(id).await;
    assert_eq!(p["done"]["units"], 0, "{p}");
    let why = &p["waiting"][0];
    assert_eq!(
        (&why["reason"], &why["units"]),
        (&json!("replica"), &json!(2)),
        "{p}"
    );
    let message = why["message"].as_str().unwrap();
    assert!(
        message.starts_with("2 units wait for a second owner (replication 2, distinct owners)"),
        "{message}"
    );
    // `campaign watch` (plain lines when not on a terminal) says it on its first line.
    let mut watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_tmd-server"))
        .args(["campaign", "watch", &id.to_string(), "--interval", "0.2"])
        .args(["--server", &app.base, "--admin-token", common::ADMIN])
        .env("TMD_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
        .await
        .expect("a line within 30 s")
        .unwrap()
        .expect("a line");
    assert!(line.contains("wait for a second owner"), "{line}");
    watch.kill().await.unwrap();
}
