//! The REST API over real HTTP against a real PostgreSQL: every endpoint, its error cases and
//! bad input.

mod common;

use common::{assert_refused, code_of, work_through, TestApp, ADMIN};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::HashSet;
use tmd_server::bench::empty_result;

fn exp32(from: &str, to: &str) -> Value {
    json!({"function": "exp", "format": "binary32", "min_bits": 12,
           "ranges": [{"from": from, "to": to}], "unit_bits": 10})
}

#[tokio::test]
async fn operations_endpoints_and_unknown_routes() {
    let app = TestApp::new().await;
    let resp = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "ok");
    let resp = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(resp.status(), 200);

    let (status, v) = app
        .call(Method::GET, "/api/v1/nothing-here", None, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(v["code"], "not_found");
    let (status, v) = app
        .call(Method::DELETE, "/api/v1/campaigns", Some(ADMIN), None)
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(v["code"], "bad_request");

    // Metrics count what happened, including the unit gauge from the database.
    app.small_campaign(3, 4).await;
    let text = app.metrics().await;
    assert!(text.contains("tmd_units{state=\"pending\"} 3"), "{text}");
    assert!(text.contains("tmd_http_request_duration_seconds_count{method=\"POST\",route=\"/api/v1/campaigns\",status=\"201\"} 1"), "{text}");
}

/// A cancelled campaign's units are not pending; each campaign and each worker has its own
/// series, labelled by id.
#[tokio::test]
async fn metrics_have_series_per_campaign_and_worker_and_skip_cancelled_units() {
    let app = TestApp::new().await;
    let kept = app.small_campaign(3, 4).await["id"].as_i64().unwrap();
    let cancelled = app.small_campaign(5, 4).await["id"].as_i64().unwrap();
    let (status, v) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{cancelled}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let (worker, w) = app.worker("metered").await;
    // One lease of the kept campaign, its units done.
    assert_eq!(work_through(&w).await, 3);
    let text = app.metrics().await;
    assert!(text.contains("tmd_units{state=\"pending\"} 0"), "{text}");
    assert!(text.contains("tmd_units{state=\"cancelled\"} 5"), "{text}");
    assert!(text.contains("tmd_units{state=\"done\"} 3"), "{text}");
    assert!(
        text.contains(&format!(
            "tmd_campaign_units{{campaign=\"{kept}\",state=\"done\"}} 3"
        )),
        "{text}"
    );
    assert!(
        !text.contains(&format!("campaign=\"{cancelled}\"")),
        "a cancelled campaign has no series: {text}"
    );
    assert!(
        text.contains(&format!(
            "tmd_campaign_arguments_done_total{{campaign=\"{kept}\"}} 48"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "tmd_worker_units_done_total{{worker=\"{worker}\"}} 3"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "tmd_worker_last_seen_timestamp_seconds{{worker=\"{worker}\"}}"
        )),
        "{text}"
    );
}

/// The plan of a campaign that gives no unit size: the one size that fits the limits, and
/// why; nothing is created. The same request creates the campaign with that size.
#[tokio::test]
async fn a_plan_chooses_the_unit_size_and_creates_nothing() {
    let app = TestApp::new().await;
    let campaign = json!({"function": "exp", "format": "binary80", "min_bits": 32,
                          "ranges": [{"from": "1", "to": "2"}], "trust_all_workers": true});
    let (status, plan) = app
        .admin(
            Method::POST,
            "/api/v1/campaigns/plan",
            Some(json!({ "campaign": campaign })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["unit_bits"], 43, "{plan}");
    assert_eq!(plan["units"], 1 << 20, "{plan}");
    assert_eq!(plan["unit_bits_chosen"], true, "{plan}");
    assert_eq!(plan["arguments"], (1u64 << 63).to_string(), "{plan}");
    assert_eq!(plan["expected_cases_per_unit"], 4096.0, "{plan}");
    let why = plan["unit_bits_reason"].as_str().unwrap();
    assert!(why.contains("2^41") && why.contains("2000000"), "{why}");
    // With an estimate, the time: 2 s per unit of 2^43 arguments, 2^20 units.
    let estimate = json!({"version": 1, "function": "exp", "format": "binary80", "min_bits": 32,
        "unit_bits": 43, "backend": "cpu (test)", "seed": 1,
        "binades": [{"negative": false, "exponent": 0, "units": 1 << 20, "sampled": 3,
                     "seconds_per_unit": 2.0, "seconds_per_unit_stderr": 0.0,
                     "expected_hr_cases": 4.0e9, "expected_hr_cases_stderr": 0.0}],
        "total_seconds": 2097152.0, "total_seconds_stderr": 0.0,
        "total_hr_cases": 4.0e9, "total_hr_cases_stderr": 0.0});
    let (status, costed) = app
        .admin(
            Method::POST,
            "/api/v1/campaigns/plan",
            Some(json!({ "campaign": campaign, "estimate": estimate })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{costed}");
    assert_eq!(costed["estimated_seconds"], 2097152.0, "{costed}");
    assert_eq!(costed["estimate_backend"], "cpu (test)", "{costed}");
    let (_, list) = app.admin(Method::GET, "/api/v1/campaigns", None).await;
    assert_eq!(list, json!([]), "a plan creates nothing");
    // A size given is kept, and refused as creation would refuse it.
    let mut given = campaign.clone();
    given["unit_bits"] = json!(41);
    assert_refused!(
        app.admin(
            Method::POST,
            "/api/v1/campaigns/plan",
            Some(json!({ "campaign": given }))
        )
        .await,
        BAD_REQUEST,
        "bad_request"
    );
    // A whole function's blocks skipped entire are merged and listed.
    let whole = json!({"function": "exp", "format": "binary32", "min_bits": 20, "whole": true});
    let (status, plan) = app
        .admin(
            Method::POST,
            "/api/v1/campaigns/plan",
            Some(json!({ "campaign": whole })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    let blocks = plan["skipped_blocks"].as_array().unwrap();
    let ends = |b: &Value| {
        (
            b["first"].as_str().unwrap().to_string(),
            b["last"].as_str().unwrap().to_string(),
        )
    };
    // Overflow below and above, each one block over many binades, lowest value first.
    assert_eq!(
        ends(&blocks[0]),
        ("-0x1.fffffep+127".into(), "-0x1p+7".into()),
        "{plan}"
    );
    assert_eq!(
        ends(blocks.last().unwrap()),
        ("0x1.8p+6".into(), "0x1.fffffep+127".into()),
        "{plan}"
    );
    assert!(plan["skipped_arguments"].as_str().unwrap() != "0", "{plan}");
    assert!(plan["estimated_seconds"].is_null(), "{plan}");
}

#[tokio::test]
async fn openapi_document_lists_every_route() {
    let app = TestApp::new().await;
    let (status, doc) = app.call(Method::GET, "/api/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let paths = doc["paths"].as_object().unwrap();
    let expected = [
        ("/api/v1/campaigns", "post"),
        ("/api/v1/campaigns", "get"),
        ("/api/v1/campaigns/{id}", "get"),
        ("/api/v1/campaigns/{id}/progress", "get"),
        ("/api/v1/campaigns/progress", "get"),
        ("/api/v1/campaigns/{id}/pause", "post"),
        ("/api/v1/campaigns/{id}/resume", "post"),
        ("/api/v1/campaigns/{id}/cancel", "post"),
        ("/api/v1/enrollment-tokens", "post"),
        ("/api/v1/workers/register", "post"),
        ("/api/v1/workers", "get"),
        ("/api/v1/leases", "post"),
        ("/api/v1/leases/{id}/heartbeat", "post"),
        ("/api/v1/leases/{lease_id}/units/{unit_id}/result", "post"),
        ("/api/v1/leases/{id}/release", "post"),
        // Result batches (tests in batch.rs).
        ("/api/v1/results", "post"),
        // Views of a campaign (tests in export.rs and dashboard.rs).
        ("/api/v1/campaigns/{id}/hr-cases", "get"),
        ("/api/v1/campaigns/{id}/coverage", "get"),
        ("/api/v1/campaigns/{id}/hardness", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/metrics", "get"),
        ("/api/v1/workers/{id}", "get"),
        ("/api/v1/workers/{id}/quarantine", "post"),
        ("/api/v1/workers/{id}/reinstate", "post"),
        // The admin's remedies (tests in hostile.rs and hostile_net.rs).
        ("/api/v1/campaigns/{id}/requeue", "post"),
        ("/api/v1/enrollment-tokens", "get"),
        ("/api/v1/enrollment-tokens/{id}/revoke", "post"),
        ("/api/v1/workers/{id}/revoke", "post"),
        // Known cases (tests in trust_default.rs).
        ("/api/v1/campaigns/{id}/known-cases", "post"),
        // Planted cases removed (tests in attacks.rs).
        ("/api/v1/campaigns/{id}/cases/remove", "post"),
        // A worker's own identity (tests below and in tests/tests/operator.rs).
        ("/api/v1/workers/me", "get"),
        ("/api/v1/workers/identify", "post"),
        // Cost estimates (tests in work.rs).
        ("/api/v1/campaigns/{id}/estimate", "post"),
        // A campaign's plan, nothing created (tests below and in cli.rs).
        ("/api/v1/campaigns/plan", "post"),
        // The dashboard's views of time and the queue (tests in timeline.rs).
        ("/api/v1/campaigns/{id}/history", "get"),
        ("/api/v1/campaigns/{id}/times", "get"),
        ("/api/v1/campaigns/queue", "get"),
    ];
    for (path, method) in expected {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing"
        );
    }
    assert_eq!(
        paths.len(),
        36,
        "a route was added without a test here: {:?}",
        paths.keys()
    );
    for schema in [
        "UnitResult",
        "Lease",
        "CampaignProgress",
        "ApiError",
        "ResultBatch",
        "ResultBatchResponse",
    ] {
        assert!(
            doc["components"]["schemas"].get(schema).is_some(),
            "{schema} missing"
        );
    }
    // The committed snapshot must match the document the code generates.
    let committed: Value = serde_json::from_str(include_str!("../openapi.json")).unwrap();
    assert_eq!(committed, doc, "server/openapi.json is stale: run `cargo run -p tmd-server -- openapi > server/openapi.json`");
}

#[tokio::test]
async fn admin_routes_need_the_admin_token() {
    let app = TestApp::new().await;
    assert_refused!(
        app.call(Method::GET, "/api/v1/campaigns", None, None).await,
        UNAUTHORIZED,
        "unauthorized"
    );
    assert_refused!(
        app.call(Method::GET, "/api/v1/campaigns", Some("wrong-token"), None)
            .await,
        UNAUTHORIZED,
        "unauthorized"
    );
    let resp = app
        .http
        .get(app.url("/api/v1/workers"))
        .header("authorization", "Basic abc")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

    // A worker's token is valid but not enough.
    let (_, w) = app.worker("w").await;
    let _ = w;
    let (status, t) = app
        .admin(Method::POST, "/api/v1/enrollment-tokens", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, reg) = app
        .call(
            Method::POST,
            "/api/v1/workers/register",
            None,
            Some(json!({"enrollment_token": t["token"], "name": "w2"})),
        )
        .await;
    let worker_token = reg["token"].as_str().unwrap();
    // Its token says who it is; the admin's and unknown ones name no worker.
    let (status, me) = app
        .call(Method::GET, "/api/v1/workers/me", Some(worker_token), None)
        .await;
    assert_eq!(
        (status, &me["worker_id"]),
        (StatusCode::OK, &reg["worker_id"])
    );
    for token in [Some(ADMIN), Some("tmdw_unknown"), None] {
        assert_refused!(
            app.call(Method::GET, "/api/v1/workers/me", token, None)
                .await,
            UNAUTHORIZED,
            "unauthorized",
            "{token:?}"
        );
    }
    // Its token's SHA-256 names it too, without the token: how a worker repointed at another
    // URL asks whether that server is a replica of its coordinator (no token sent there).
    let sha = |t: &str| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(t.as_bytes()));
    let (status, me) = app
        .call(
            Method::POST,
            "/api/v1/workers/identify",
            None,
            Some(json!({"token_sha256": sha(worker_token)})),
        )
        .await;
    assert_eq!(
        (status, &me["worker_id"]),
        (StatusCode::OK, &reg["worker_id"])
    );
    for (body, status, code) in [
        (
            json!({"token_sha256": sha("tmdw_unknown")}),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            json!({"token_sha256": sha(ADMIN)}),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        // Twice: the second answer comes from the guard's memory.
        (
            json!({"token_sha256": sha("tmdw_unknown")}),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            json!({"token_sha256": "abc"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            json!({"token_sha256": worker_token}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
    ] {
        let (got, err) = app
            .call(
                Method::POST,
                "/api/v1/workers/identify",
                None,
                Some(body.clone()),
            )
            .await;
        assert_eq!((got, err["code"].as_str()), (status, Some(code)), "{body}");
    }
    assert_refused!(
        app.call(Method::GET, "/api/v1/campaigns", Some(worker_token), None)
            .await,
        FORBIDDEN,
        "forbidden"
    );

    // Worker routes refuse the admin token and unknown tokens.
    assert_refused!(
        app.call(Method::POST, "/api/v1/leases", Some(ADMIN), Some(json!({})))
            .await,
        UNAUTHORIZED,
        "unauthorized"
    );
    let (status, _) = app
        .call(Method::POST, "/api/v1/leases", None, Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_server_without_admin_token_refuses_admin_operations() {
    let app = TestApp::with_config(tmd_server::Config {
        admin_token_hash: None,
        ..common::config()
    })
    .await;
    assert_refused!(
        app.admin(Method::GET, "/api/v1/campaigns", None).await,
        FORBIDDEN,
        "forbidden"
    );
}

#[tokio::test]
async fn campaign_creation_validates_every_field() {
    let app = TestApp::new().await;
    let post = |body: reqwest::Body| {
        app.http
            .post(app.url("/api/v1/campaigns"))
            .bearer_auth(ADMIN)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let resp = post("{\"function\": ".into()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(resp.json::<Value>().await.unwrap()["code"], "bad_request");
    let resp = app
        .http
        .post(app.url("/api/v1/campaigns"))
        .bearer_auth(ADMIN)
        .body(exp32("1", "2").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "no content type");

    let huge = format!("{{\"function\": \"{}\"}}", "x".repeat(2 << 20));
    let resp = post(huge.into()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["code"],
        "payload_too_large"
    );

    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"function": "exp", "format": "binary32", "min_bits": 12,
                "ranges": [{"from": "1", "to": "2"}], "bogus": 1}),
            "unknown field",
        ),
        (
            {
                let mut v = exp32("1", "2");
                v["function"] = json!("nosuchfn");
                v
            },
            "exp",
        ),
        (exp32("1", "1"), ""),
        (exp32("2", "1"), ""),
        (exp32("one", "2"), ""),
        (
            {
                let mut v = exp32("1", "2");
                v["format"] = json!("binary99");
                v
            },
            "",
        ),
        (
            {
                let mut v = exp32("1", "2");
                v["precision"] = json!(24);
                v
            },
            "not both",
        ),
        (
            {
                let mut v = exp32("1", "2");
                v["min_bits"] = json!(0);
                v
            },
            "min_bits",
        ),
        (
            {
                let mut v = exp32("1", "2");
                v["ranges"] = json!([]);
                v
            },
            "ranges",
        ),
        (
            {
                let mut v = exp32("1", "2");
                v["replication"] = json!(0);
                v
            },
            "replication",
        ),
        (
            {
                let mut v = exp32("1", "2");
                v["min_bits"] = json!(-3);
                v
            },
            "",
        ),
        (
            {
                let mut v = exp32("1", "2");
                v["unit_bits"] = json!(2);
                v
            },
            "unit size",
        ),
        // Far more units than anyone may create at once.
        (
            json!({"function": "exp", "format": "binary64", "min_bits": 40, "unit_bits": 4,
                "ranges": [{"from": "-0x1p+9", "to": "0x1p+9"}]}),
            "units",
        ),
        (
            json!({"function": "log", "format": "binary32", "min_bits": 12,
                "ranges": [{"from": "-2", "to": "-1"}]}),
            "not defined",
        ),
        (
            json!({"function": "exp", "format": "binary32", "min_bits": 12,
                "ranges": [{"from": "1", "to": "1.5"}, {"from": "1.25", "to": "2"}]}),
            "overlap",
        ),
    ];
    for (body, needle) in cases {
        let (status, v) = app
            .admin(Method::POST, "/api/v1/campaigns", Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} -> {v}");
        assert_eq!(v["code"], "bad_request");
        assert!(
            v["message"].as_str().unwrap().contains(needle),
            "{body} -> {v}"
        );
    }
    let (_, list) = app.admin(Method::GET, "/api/v1/campaigns", None).await;
    assert_eq!(list, json!([]), "nothing was created by bad requests");
}

#[tokio::test]
async fn campaign_lifecycle_and_progress() {
    let app = TestApp::new().await;
    let c = app.small_campaign(5, 4).await;
    let id = c["id"].as_i64().unwrap();
    assert_eq!(c["units_total"], 5);
    assert_eq!(c["arguments_total"], "80");
    assert_eq!(c["precision"], 24);
    assert_eq!(c["state"], "active");
    assert_eq!(c["replication"], 1);

    let (status, list) = app.admin(Method::GET, "/api/v1/campaigns", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 1);
    let (status, shown) = app
        .admin(Method::GET, &format!("/api/v1/campaigns/{id}"), None)
        .await;
    assert_eq!((status, &shown), (StatusCode::OK, &c));

    let p = app.progress(id).await;
    assert_eq!(p["total"], json!({"units": 5, "arguments": "80"}));
    assert_eq!(p["pending"], json!({"units": 5, "arguments": "80"}));
    assert_eq!(p["done"]["units"], 0);
    assert_eq!(p["percent_done"], 0.0);
    assert_eq!(p["complete"], false);
    assert_eq!(p["eta_seconds"], Value::Null);

    let (_, w) = app.worker("w").await;
    let (status, paused) = app
        .admin(Method::POST, &format!("/api/v1/campaigns/{id}/pause"), None)
        .await;
    assert_eq!(
        (status, paused["state"].as_str()),
        (StatusCode::OK, Some("paused"))
    );
    assert!(
        w.lease(None).await.unwrap().lease.is_none(),
        "a paused campaign hands out nothing"
    );
    assert_refused!(
        app.admin(Method::POST, &format!("/api/v1/campaigns/{id}/pause"), None)
            .await,
        CONFLICT,
        "conflict"
    );
    let (status, _) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/resume"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    // Work through the whole campaign.
    assert_eq!(work_through(&w).await, 5);
    let p = app.progress(id).await;
    assert_eq!(p["done"], json!({"units": 5, "arguments": "80"}));
    assert_eq!(p["percent_done"], 100.0);
    assert_eq!(p["complete"], true);
    assert!(p["arguments_per_second_last_hour"].as_f64().unwrap() > 0.0);
    assert_eq!(p["eta_seconds"], 0.0);

    // Its last unit done, the campaign is complete, with the time; it takes no more changes.
    assert_eq!(p["state"], "complete", "{p}");
    assert!(p["completed_at"].is_string(), "{p}");
    let (_, shown) = app
        .admin(Method::GET, &format!("/api/v1/campaigns/{id}"), None)
        .await;
    assert_eq!(shown["state"], "complete");
    assert_eq!(shown["completed_at"], p["completed_at"]);
    for action in ["pause", "resume", "cancel"] {
        let (status, v) = app
            .admin(
                Method::POST,
                &format!("/api/v1/campaigns/{id}/{action}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{action}: {v}");
        assert_eq!(v["code"], "conflict");
        assert!(
            v["message"].as_str().unwrap().contains("is complete"),
            "{v}"
        );
    }

    let other = app.small_campaign(2, 4).await["id"].as_i64().unwrap();
    let (status, c2) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{other}/cancel"),
            None,
        )
        .await;
    assert_eq!(
        (status, c2["state"].as_str()),
        (StatusCode::OK, Some("cancelled"))
    );
    assert_refused!(
        app.admin(
            Method::POST,
            &format!("/api/v1/campaigns/{other}/resume"),
            None
        )
        .await,
        CONFLICT,
        "conflict"
    );

    assert_refused!(
        app.admin(Method::GET, "/api/v1/campaigns/999999", None)
            .await,
        NOT_FOUND,
        "not_found"
    );
    assert_refused!(
        app.admin(Method::POST, "/api/v1/campaigns/999999/pause", None)
            .await,
        NOT_FOUND,
        "not_found"
    );
    assert_refused!(
        app.admin(Method::GET, "/api/v1/campaigns/abc/progress", None)
            .await,
        BAD_REQUEST,
        "bad_request"
    );
}

#[tokio::test]
async fn higher_priority_campaigns_are_leased_first() {
    let app = TestApp::new().await;
    let low = app.small_campaign(2, 4).await;
    let mut body = exp32("0x1p+1", "0x1.0001p+1");
    body["priority"] = json!(5);
    body["unit_bits"] = json!(4);
    let high = app.campaign(body).await;
    let (_, w) = app.worker("w").await;
    let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(lease.task.campaign_id, high["id"].as_i64().unwrap());
    assert_ne!(lease.task.campaign_id, low["id"].as_i64().unwrap());
    assert_eq!(lease.task.function, "exp");
    assert_eq!(lease.units[0].spec.exponent, 1);
}

#[tokio::test]
async fn enrollment_tokens_and_worker_registration() {
    let app = TestApp::new().await;
    let (status, t) = app
        .admin(
            Method::POST,
            "/api/v1/enrollment-tokens",
            Some(json!({"uses": 1, "expires_in_seconds": 3600, "note": "rack 4"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{t}");
    assert_eq!(t["uses_left"], 1);
    assert!(t["token"].as_str().unwrap().starts_with("tmde_"));
    for bad in [
        json!({"uses": 0}),
        json!({"expires_in_seconds": 0}),
        json!({"whatever": 1}),
    ] {
        assert_refused!(
            app.admin(Method::POST, "/api/v1/enrollment-tokens", Some(bad))
                .await,
            BAD_REQUEST,
            "bad_request"
        );
    }

    let register = |token: Value, name: &str| {
        app.call(
            Method::POST,
            "/api/v1/workers/register",
            None,
            Some(json!({"enrollment_token": token, "name": name})),
        )
    };
    assert_refused!(
        register(t["token"].clone(), " ").await,
        BAD_REQUEST,
        "bad_request"
    );
    let (status, w) = register(t["token"].clone(), "gpu-01").await;
    assert_eq!(status, StatusCode::CREATED, "{w}");
    assert!(w["token"].as_str().unwrap().starts_with("tmdw_"));
    assert_refused!(
        register(t["token"].clone(), "gpu-02").await,
        UNAUTHORIZED,
        "unauthorized",
        "used up"
    );
    let (status, _) = register(json!("tmde_nonsense"), "gpu-03").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // The token is stored hashed: the clear text appears nowhere in the database.
    let clear: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM workers WHERE encode(token_hash, 'escape') LIKE '%' || $1 || '%'",
    )
    .bind(w["token"].as_str().unwrap())
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    assert_eq!(clear, 0);

    let (status, list) = app.admin(Method::GET, "/api/v1/workers", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list[0]["name"], "gpu-01");
    assert_eq!(list[0]["units_done"], 0);
    assert_eq!(list[0]["last_seen"], Value::Null);
    let worker = tmd_server::bench::WorkerClient::new(
        &app.base,
        w["token"].as_str().unwrap(),
        app.http.clone(),
    );
    assert!(worker.lease(None).await.unwrap().lease.is_none());
    let (_, list) = app.admin(Method::GET, "/api/v1/workers", None).await;
    assert!(
        list[0]["last_seen"].is_string(),
        "seen after its first request"
    );
}

#[tokio::test]
async fn lease_heartbeat_result_and_every_refusal() {
    let app = TestApp::new().await;
    let c = app.small_campaign(6, 4).await;
    let cid = c["id"].as_i64().unwrap();
    let (wid, w) = app.worker("a").await;
    let (_, other) = app.worker("b").await;

    for bad in [
        json!({"seconds": -1}),
        json!({"seconds": "ten"}),
        json!({"units": 3}),
    ] {
        assert_refused!(
            app.call(Method::POST, "/api/v1/leases", Some(w.token()), Some(bad))
                .await,
            BAD_REQUEST,
            "bad_request"
        );
    }
    let resp = w.lease(Some(0)).await;
    assert_eq!(code_of(resp), "bad_request");

    // A worker never measured gets one unit.
    let lease = w.lease(Some(600)).await.unwrap().lease.unwrap();
    assert_eq!(lease.units.len(), 1);
    assert_eq!(lease.task.campaign_id, cid);
    assert_eq!(lease.task.precision, 24);
    assert_eq!(lease.task.min_bits, 12);
    assert_eq!(lease.units[0].spec.first, 1 << 23);
    assert_eq!(lease.units[0].spec.count, 16);
    let unit = lease.units[0].unit_id;

    let hb = w.heartbeat(&lease).await.unwrap();
    assert!(hb.expires_at >= lease.expires_at);
    assert_eq!(hb.campaign_state, tmd_wire::CampaignState::Active);
    let mut stale = lease.clone();
    stale.fencing_token -= 1;
    assert_eq!(code_of(w.heartbeat(&stale).await), "stale_token");
    assert_eq!(code_of(other.heartbeat(&lease).await), "forbidden");
    let mut missing = lease.clone();
    missing.lease_id += 1000;
    assert_eq!(code_of(w.heartbeat(&missing).await), "not_found");

    let good = empty_result(lease.fencing_token, unit, 0.25);
    let mut bad_digest = good.clone();
    bad_digest.digest = "xyz".into();
    assert_eq!(
        code_of(w.post(lease.lease_id, unit, &bad_digest).await),
        "bad_request"
    );
    let mut nan = good.clone();
    nan.elapsed = -1.0;
    assert_eq!(
        code_of(w.post(lease.lease_id, unit, &nan).await),
        "bad_request"
    );
    let mut wrong_token = good.clone();
    wrong_token.fencing_token += 1;
    assert_eq!(
        code_of(w.post(lease.lease_id, unit, &wrong_token).await),
        "stale_token"
    );
    assert_eq!(
        code_of(other.post(lease.lease_id, unit, &good).await),
        "forbidden"
    );
    assert_eq!(
        code_of(w.post(lease.lease_id + 1000, unit, &good).await),
        "not_found"
    );
    assert_eq!(
        code_of(w.post(lease.lease_id, unit + 1, &good).await),
        "lease_mismatch"
    );
    assert_eq!(
        code_of(w.post(lease.lease_id, 987654, &good).await),
        "lease_mismatch"
    );
    // Malformed bodies and path parameters.
    assert_refused!(
        app.call(
            Method::POST,
            &format!("/api/v1/leases/{}/units/{unit}/result", lease.lease_id),
            Some(w.token()),
            Some(json!({"fencing_token": lease.fencing_token}))
        )
        .await,
        BAD_REQUEST,
        "bad_request"
    );
    assert_refused!(
        app.call(
            Method::POST,
            "/api/v1/leases/x/heartbeat",
            Some(w.token()),
            Some(json!({"fencing_token": 1}))
        )
        .await,
        BAD_REQUEST,
        "bad_request"
    );
    let p = app.progress(cid).await;
    assert_eq!(p["done"]["units"], 0, "no refusal recorded anything");
    assert_eq!(p["leased"]["units"], 1);

    let first = w.post(lease.lease_id, unit, &good).await.unwrap();
    assert_eq!(first.unit_id, unit);
    assert_eq!(first.hr_cases, 0);
    // A retry gets the same answer; a different result for the same unit is a conflict.
    assert_eq!(w.post(lease.lease_id, unit, &good).await.unwrap(), first);
    let mut different = good.clone();
    different.digest = "f".repeat(64);
    assert_eq!(
        code_of(w.post(lease.lease_id, unit, &different).await),
        "conflict"
    );
    // The lease is finished: heartbeats say so.
    assert_eq!(code_of(w.heartbeat(&lease).await), "lease_expired");

    let p = app.progress(cid).await;
    assert_eq!(p["done"], json!({"units": 1, "arguments": "16"}));
    let results: i64 = sqlx::query_scalar("SELECT count(*) FROM results")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(results, 1, "the retry recorded nothing");

    // The worker's speed is now known (16 arguments in 0.25 s); a long request gets more
    // units, contiguous.
    let (_, workers) = app.admin(Method::GET, "/api/v1/workers", None).await;
    let me = workers
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == wid)
        .unwrap();
    assert_eq!(me["units_done"], 1);
    assert_eq!(me["arguments_per_second"], 64.0);
    let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(
        lease.units.len(),
        4,
        "1 s at 64 arguments/s is 4 units of 16"
    );
    for pair in lease.units.windows(2) {
        assert_eq!(pair[1].spec.first, pair[0].spec.first + 16, "contiguous");
    }
}

#[tokio::test]
async fn release_returns_units_and_failures_count_towards_quarantine() {
    let app = TestApp::with_config(tmd_server::Config {
        policy: tmd_server::LeasePolicy {
            max_attempts: 2,
            ..Default::default()
        },
        ..common::config()
    })
    .await;
    let c = app.small_campaign(1, 4).await;
    let cid = c["id"].as_i64().unwrap();
    let (_, w) = app.worker("w").await;
    let release = |lease: &tmd_wire::Lease, failed: Vec<i64>| {
        let path = format!("/api/v1/leases/{}/release", lease.lease_id);
        let body =
            json!({"fencing_token": lease.fencing_token, "failed_units": failed, "reason": "test"});
        let (app, token) = (&app, w.token().to_string());
        async move {
            app.call(Method::POST, &path, Some(&token), Some(body))
                .await
        }
    };
    let lease = w.lease(None).await.unwrap().lease.unwrap();
    let unit = lease.units[0].unit_id;
    let (status, r) = release(&lease, vec![]).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r, json!({"returned": 1, "quarantined": 0}));
    assert_refused!(release(&lease, vec![]).await, CONFLICT, "lease_expired");
    assert_eq!(
        code_of(
            w.post(
                lease.lease_id,
                unit,
                &empty_result(lease.fencing_token, unit, 1.0)
            )
            .await
        ),
        "lease_expired"
    );

    // Failing for two workers quarantines it (max_attempts = 2; one worker's reports count
    // once), and it is shown, not handed out.
    let lease = w.lease(None).await.unwrap().lease.unwrap();
    let (_, r) = release(&lease, vec![unit]).await;
    assert_eq!(r, json!({"returned": 1, "quarantined": 0}));
    let lease = w.lease(None).await.unwrap().lease.unwrap();
    let (_, r) = release(&lease, vec![unit]).await;
    assert_eq!(
        r,
        json!({"returned": 1, "quarantined": 0}),
        "the same worker again"
    );
    let (_, w2) = app.worker("w2").await;
    let lease2 = w2.lease(None).await.unwrap().lease.unwrap();
    let r = w2.release(&lease2, &[unit]).await.unwrap();
    assert_eq!((r.returned, r.quarantined), (0, 1));
    assert!(w.lease(None).await.unwrap().lease.is_none());
    let p = app.progress(cid).await;
    assert_eq!(p["quarantined"]["units"], 1);
    assert_eq!(p["quarantined_units"][0]["unit_id"], unit);
    assert_eq!(p["quarantined_units"][0]["attempts"], 2);
    assert_eq!(p["complete"], false);

    assert_refused!(
        app.call(
            Method::POST,
            &format!("/api/v1/leases/{}/release", lease.lease_id),
            Some(w.token()),
            Some(json!({"fencing_token": lease.fencing_token, "failed_units": "all"}))
        )
        .await,
        BAD_REQUEST,
        "bad_request"
    );
}

#[tokio::test]
async fn concurrent_lease_requests_never_share_a_unit() {
    let app = TestApp::new().await;
    let c = app.small_campaign(300, 4).await;
    let cid = c["id"].as_i64().unwrap();
    let mut workers = Vec::new();
    for i in 0..24 {
        workers.push(app.worker(&format!("w{i}")).await.1);
    }
    let mut tasks = Vec::new();
    for w in workers {
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(lease) = w.lease(Some(600)).await.unwrap().lease {
                got.extend(lease.units.iter().map(|u| u.unit_id));
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let distinct: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "a unit was handed out twice");
    assert_eq!(all.len(), 300, "every unit was handed out");
    let p = app.progress(cid).await;
    assert_eq!(p["leased"]["units"], 300);
    let leases: i64 = sqlx::query_scalar("SELECT count(*) FROM leases")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(leases, 300, "unmeasured workers get one unit per lease");
}

#[tokio::test]
async fn readiness_follows_the_database_and_errors_stay_json() {
    let app = TestApp::new().await;
    let (_, w) = app.worker("w").await;
    app.db.pool().close().await;
    let resp = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "5");
    assert_eq!(resp.json::<Value>().await.unwrap()["code"], "unavailable");
    let resp = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "alive, if not ready");
    assert_eq!(code_of(w.lease(None).await), "unavailable");
}
