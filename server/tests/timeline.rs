//! The dashboard's views of time and of the farm, through the REST API against the real
//! server and database: a campaign's history thinned to an hour a reading beyond two hours and
//! kept across an estimate; the time of its binades estimated and measured, with the HR-cases
//! the estimate expects; the queue in the claim's order with why units wait (and `campaign
//! list` saying it); workers' back end, device and state from their last contact.

mod common;

use common::{tmd, work_through, TestApp, ADMIN};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// exp in binary32 over [1, 2) and [2, 4), units of 2^16 arguments: 128 units per binade.
fn two_binades(extra: Value) -> Value {
    // At 22 bits a unit of 2^16 arguments expects 1/32 of a case: empty results are
    // plausible to the count audit.
    let mut body = json!({"function": "exp", "format": "binary32", "min_bits": 22,
        "ranges": [{"from": "0x1p+0", "to": "0x1p+2"}], "unit_bits": 16});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// An estimate of [`two_binades`]: `ms` milliseconds per unit and `cases` HR-cases expected
/// in each binade.
fn estimate(ms: [f64; 2], cases: [f64; 2]) -> Value {
    let binade = |e: i32, i: usize| {
        json!({"negative": false, "exponent": e, "units": 128, "sampled": 4,
               "seconds_per_unit": ms[i] / 1e3, "seconds_per_unit_stderr": 0.0,
               "expected_hr_cases": cases[i], "expected_hr_cases_stderr": 0.0})
    };
    json!({
        "version": 1, "function": "exp", "format": "binary32", "min_bits": 22,
        "unit_bits": 16, "backend": "cuda (1 device: test)", "seed": 1,
        "binades": [binade(0, 0), binade(1, 1)],
        "total_seconds": 128.0 * (ms[0] + ms[1]) / 1e3, "total_seconds_stderr": 0.0,
        "total_hr_cases": cases[0] + cases[1], "total_hr_cases_stderr": 0.0
    })
}

async fn get(app: &TestApp, path: &str) -> Value {
    let (status, v) = app.admin(Method::GET, path, None).await;
    assert_eq!(status, StatusCode::OK, "{path}: {v}");
    v
}

/// Snapshots older than two hours become one reading an hour (the first of each hour), the
/// recent ones stay for the rate, and an estimate folds the campaign's snapshots into the
/// history instead of losing them.
#[tokio::test]
async fn history_thins_old_snapshots_to_one_an_hour_and_survives_an_estimate() {
    let app = TestApp::new().await;
    let id = app.campaign(two_binades(json!({}))).await["id"]
        .as_i64()
        .unwrap();
    let pool = app.db.pool();
    // Two readings in the hour five hours back, one four hours back, one 30 minutes ago; a
    // quarter, a half, three quarters and all of the work done (of a total of 4).
    sqlx::query(
        "INSERT INTO campaign_snapshots (campaign_id, taken_at, work_done, args_done, work_total) \
         SELECT $1, date_trunc('hour', now()) - t.ago, t.w, t.a, 4 \
         FROM (VALUES (interval '5 hours' - interval '10 minutes', 1, 100), \
                      (interval '5 hours' - interval '40 minutes', 2, 200), \
                      (interval '4 hours' - interval '5 minutes', 3, 300)) AS t(ago, w, a)",
    )
    .bind(id)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO campaign_snapshots (campaign_id, taken_at, work_done, args_done, work_total) \
         VALUES ($1, now() - interval '30 minutes', 4, 400, 4)",
    )
    .bind(id)
    .execute(pool)
    .await
    .unwrap();

    tmd_server::store::tallies::snapshot(pool).await.unwrap();
    let kept: Vec<(f64, String)> = sqlx::query_as(
        "SELECT fraction_done, args_done::text FROM campaign_history \
         WHERE campaign_id = $1 ORDER BY hour",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        kept,
        vec![(0.25, "100".to_string()), (0.75, "300".to_string())],
        "the first reading of each hour beyond two hours"
    );
    let recent: i64 =
        sqlx::query_scalar("SELECT count(*) FROM campaign_snapshots WHERE campaign_id = $1")
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(
        recent, 2,
        "the 30-minute-old snapshot and the one just taken"
    );

    let h = get(&app, &format!("/api/v1/campaigns/{id}/history")).await;
    assert_eq!(h["estimated_seconds"], Value::Null, "{h}");
    let points = h["points"].as_array().unwrap();
    let fractions: Vec<f64> = points
        .iter()
        .map(|p| p["fraction_done"].as_f64().unwrap())
        .collect();
    // Two hourly readings, the two snapshots, and now (nothing is done in the counters).
    assert_eq!(fractions, vec![0.25, 0.75, 1.0, 0.0, 0.0], "{h}");
    let times: Vec<&str> = points.iter().map(|p| p["at"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    let (status, v) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/estimate"),
            Some(estimate([1.0, 3.0], [0.0, 0.0])),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let h = get(&app, &format!("/api/v1/campaigns/{id}/history")).await;
    assert_eq!(
        h["estimated_seconds"].as_f64(),
        Some(128.0 * 4.0 / 1e3),
        "{h}"
    );
    assert_eq!(h["estimate_backend"], "cuda (1 device: test)");
    let points = h["points"].as_array().unwrap();
    assert!(
        points.len() >= 4 && points[2]["fraction_done"] == 1.0,
        "the recent snapshots' hours are kept in the history: {h}"
    );

    let (status, v) = app
        .admin(Method::GET, "/api/v1/campaigns/999999/history", None)
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
}

/// Before an estimate the plan's weights give no seconds; after one, each binade's seconds
/// stand beside the seconds its results reported, and the HR-cases found beside those the
/// estimate expects of the arguments done.
#[tokio::test]
async fn binade_times_set_the_estimate_against_the_results() {
    let app = TestApp::new().await;
    let id = app.campaign(two_binades(json!({}))).await["id"]
        .as_i64()
        .unwrap();
    let path = format!("/api/v1/campaigns/{id}/times");
    let t = get(&app, &path).await;
    let binades = t["binades"].as_array().unwrap();
    assert_eq!(binades.len(), 2, "{t}");
    assert!(
        binades
            .iter()
            .all(|b| b["estimated_seconds"].is_null() && b["results"] == 0),
        "weights from the plan predict no seconds: {t}"
    );
    assert_eq!(t["expected_hr_cases"], Value::Null);

    let (status, v) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/estimate"),
            Some(estimate([1.0, 3.0], [0.5, 1.5])),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let t = get(&app, &path).await;
    assert_eq!(t["expected_hr_cases"].as_f64(), Some(2.0), "{t}");
    assert_eq!(t["expected_hr_cases_so_far"].as_f64(), Some(0.0), "{t}");

    let (_, w) = app.worker("w").await;
    // Each result reports half a second (`work_through`).
    assert_eq!(work_through(&w).await, 256);
    let t = get(&app, &path).await;
    let b = |i: usize, k: &str| t["binades"][i][k].as_f64().unwrap();
    assert_eq!(t["binades"][0]["exponent"], 0);
    assert!((b(0, "estimated_seconds") - 0.128).abs() < 1e-12, "{t}");
    assert!((b(1, "estimated_seconds") - 0.384).abs() < 1e-12, "{t}");
    assert!(
        (b(1, "estimated_seconds_done") - 0.384).abs() < 1e-12,
        "{t}"
    );
    assert_eq!(
        (b(0, "measured_seconds"), b(1, "measured_seconds")),
        (64.0, 64.0),
        "{t}"
    );
    assert_eq!(t["binades"][1]["results"], 128);
    assert_eq!(t["expected_hr_cases_so_far"].as_f64(), Some(2.0), "{t}");
    assert_eq!(t["hr_cases"], 0);
}

/// The queue lists active and paused campaigns, highest priority first then oldest, with why
/// units wait; `campaign list` shows the same reasons.
#[tokio::test]
async fn the_queue_follows_priority_and_says_why_units_wait() {
    let app = TestApp::new().await;
    let low = app.campaign(two_binades(json!({"name": "low"}))).await["id"]
        .as_i64()
        .unwrap();
    let high = app
        .campaign(two_binades(json!({"name": "high", "priority": 5})))
        .await["id"]
        .as_i64()
        .unwrap();
    let paused = app
        .campaign(two_binades(json!({"name": "paused", "priority": 5})))
        .await["id"]
        .as_i64()
        .unwrap();
    let gone = app
        .campaign(two_binades(json!({"name": "gone", "priority": 9})))
        .await["id"]
        .as_i64()
        .unwrap();
    for (id, action) in [(paused, "pause"), (gone, "cancel")] {
        let (status, v) = app
            .admin(
                Method::POST,
                &format!("/api/v1/campaigns/{id}/{action}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let (status, v) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{high}/estimate"),
            Some(estimate([1.0, 3.0], [0.0, 0.0])),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");

    let q = get(&app, "/api/v1/campaigns/queue").await;
    let ids: Vec<i64> = q
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![high, paused, low], "{q}");
    assert_eq!(q[0]["priority"], 5);
    assert_eq!(q[0]["estimated_seconds"].as_f64(), Some(0.512), "{q}");
    assert_eq!(q[2]["estimated_seconds"], Value::Null);
    assert_eq!(q[0]["percent_done"].as_f64(), Some(0.0));
    assert_eq!(q[1]["state"], "paused");
    assert_eq!(q[1]["waiting"][0]["reason"], "paused", "{q}");
    assert_eq!(q[1]["waiting"][0]["units"], 256, "{q}");
    assert!(q[0]["waiting"].as_array().unwrap().is_empty(), "{q}");

    let (ok, out, err) = tmd(&[
        "campaign",
        "list",
        "--server",
        &app.base,
        "--admin-token",
        ADMIN,
    ])
    .await;
    assert!(ok, "{err}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.ends_with(name))
            .unwrap_or_else(|| panic!("{name} missing: {out}"))
            .to_string()
    };
    assert!(out.lines().next().unwrap().contains("waiting"), "{out}");
    assert!(line("paused").contains("paused 256"), "{out}");
    assert!(!line("high").contains("paused"), "{out}");
}

/// Workers show what they said they compute on, and their state follows their last contact:
/// active, then stale past a heartbeat's interval, then offline; a revoked one is offline.
#[tokio::test]
async fn workers_show_their_device_and_state_from_last_contact() {
    let app = TestApp::new().await;
    app.small_campaign(4, 10).await;
    let (id, w) = app.worker("gpu-box").await;
    w.lease(Some(60)).await.unwrap();
    let info = app.worker_info(id).await;
    assert_eq!(
        (&info["backend"], &info["device"], &info["state"]),
        (
            &json!("cpu"),
            &json!("tmd-server bench client"),
            &json!("active")
        ),
        "{info}"
    );
    let state = |ago: i64| {
        let app = &app;
        async move {
            sqlx::query(
                "UPDATE workers SET last_seen = now() - make_interval(secs => $2) WHERE id = $1",
            )
            .bind(id)
            .bind(ago as f64)
            .execute(app.db.pool())
            .await
            .unwrap();
            let list = get(app, "/api/v1/workers").await;
            let me = list
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["id"] == id)
                .unwrap()
                .clone();
            me["state"].as_str().unwrap().to_string()
        }
    };
    // The default lease lives 300 s: heartbeats every 100 s.
    assert_eq!(state(30).await, "active");
    assert_eq!(
        state(200).await,
        "stale",
        "a worker silent past a heartbeat is not active"
    );
    assert_eq!(state(700).await, "offline");
    assert_eq!(state(1).await, "active");
    let (status, v) = app
        .admin(Method::POST, &format!("/api/v1/workers/{id}/revoke"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "offline", "{v}");

    // A device name past 200 bytes is refused like any other field.
    let (_, w2) = app.worker("other").await;
    let (status, v) = app
        .call(
            Method::POST,
            "/api/v1/leases",
            Some(w2.token()),
            Some(json!({"seconds": 60, "engine": tmd_kernels::ENGINE_VERSION,
                        "device": "x".repeat(201)})),
        )
        .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request")),
        "{v}"
    );
}
