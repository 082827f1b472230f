//! Hostile clients and identities against a real server and PostgreSQL: slow and
//! oversized connections, the unauthenticated metrics, Sybil identities and their remedies,
//! campaigns that could never finish, rate limits, and HTTPS.

mod common;

use common::{code_of, config, TestApp, ADMIN};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tmd_server::bench::WorkerClient;
use tmd_server::listen::ConnLimits;
use tmd_server::request::guard::RateLimit;
use tmd_server::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the peer closes (or `limit` passes); returns what came and when it closed.
async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (String, Option<Duration>) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(limit.saturating_sub(start.elapsed()), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (String::from_utf8_lossy(&got).into(), Some(start.elapsed()))
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into(), None),
        }
    }
}

/// Item 9: silent connections, half-sent headers and bodies sent too slowly used to stay open
/// for ever (still open after 330 s); a declared body of a terabyte was not refused up front.
#[tokio::test]
async fn slow_and_oversized_connections_are_cut() {
    let app = TestApp::with_config(Config {
        conn: ConnLimits {
            header_read: Duration::from_secs(1),
            ..ConnLimits::default()
        },
        request_timeout: Duration::from_secs(2),
        ..config()
    })
    .await;
    let addr = app.base.trim_start_matches("http://").to_string();
    let limit = Duration::from_secs(8);
    // Nothing at all.
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    let (_, closed) = read_until_closed(&mut silent, limit).await;
    assert!(closed.is_some(), "a silent connection stays open");
    // Half the headers.
    let mut half = TcpStream::connect(&addr).await.unwrap();
    half.write_all(b"POST /api/v1/leases HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (_, closed) = read_until_closed(&mut half, limit).await;
    assert!(closed.is_some(), "half-sent headers keep the connection");
    // The headers, then a body that never completes.
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(
        b"POST /api/v1/workers/register HTTP/1.1\r\nHost: x\r\n\
          Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":",
    )
    .await
    .unwrap();
    let (answer, closed) = read_until_closed(&mut slow, limit).await;
    assert!(
        closed.is_some(),
        "a body sent too slowly keeps the connection"
    );
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // A terabyte declared: refused at once, before any of it is sent.
    let mut huge = TcpStream::connect(&addr).await.unwrap();
    let started = Instant::now();
    huge.write_all(
        b"POST /api/v1/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 1000000000000\r\n\r\n",
    )
    .await
    .unwrap();
    let (answer, _) = read_until_closed(&mut huge, limit).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // The server still serves.
    let (status, _) = app.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK);
}

/// Item 4: made-up methods used to add a metric series each, for ever; each scrape scanned
/// the units table.
#[tokio::test]
async fn metrics_stay_bounded_and_cheap() {
    let app = TestApp::new().await;
    for i in 0..50 {
        let m = Method::from_bytes(format!("X{i}").as_bytes()).unwrap();
        app.http
            .request(m, app.url("/healthz"))
            .send()
            .await
            .unwrap();
    }
    let first = app.metrics().await;
    assert!(first.contains("method=\"other\""), "{first}");
    assert!(!first.contains("method=\"X1\""));
    // Units counted at the first scrape are served from memory for a while.
    app.small_campaign(3, 4).await;
    let second = app.metrics().await;
    assert!(
        !second.contains("tmd_units{state=\"pending\"} 3"),
        "{second}"
    );
}

async fn token(app: &TestApp, body: Value) -> Value {
    let (status, t) = app
        .admin(Method::POST, "/api/v1/enrollment-tokens", Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{t}");
    t
}

async fn register(app: &TestApp, t: &Value, name: &str) -> (StatusCode, Value) {
    app.call(
        Method::POST,
        "/api/v1/workers/register",
        None,
        Some(json!({"enrollment_token": t["token"], "name": name})),
    )
    .await
}

/// Item 5: tokens used to allow unlimited registrations for ever, could be neither listed nor
/// revoked, and a token whose workers were quarantined kept minting clean identities.
#[tokio::test]
async fn sybil_identities_are_limited_and_revocable() {
    let app = TestApp::new().await;
    let t = token(&app, json!({"owner": "lab"})).await;
    assert_eq!(t["uses_left"], 10, "{t}");
    assert!(t["expires_at"].is_string(), "{t}");
    // Two of its workers quarantined: the token registers no more.
    for name in ["s1", "s2"] {
        let (status, w) = register(&app, &t, name).await;
        assert_eq!(status, StatusCode::CREATED);
        let id = w["worker_id"].as_i64().unwrap();
        let (status, _) = app.quarantine(id, "sybil").await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, v) = register(&app, &t, "s3").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
    assert!(v["message"].as_str().unwrap().contains("suspended"));
    // Listed (never the token itself), and revocable.
    let other = token(&app, json!({"uses": 3})).await;
    let (status, list) = app
        .admin(Method::GET, "/api/v1/enrollment-tokens", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let listed = list.as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert!(!list.to_string().contains(t["token"].as_str().unwrap()));
    let lab = listed.iter().find(|x| x["id"] == t["id"]).unwrap();
    assert_eq!(
        (lab["workers"].as_i64(), lab["quarantined_workers"].as_i64()),
        (Some(2), Some(2))
    );
    let (status, r) = app
        .admin(
            Method::POST,
            &format!("/api/v1/enrollment-tokens/{}/revoke", other["id"]),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(r["revoked_at"].is_string());
    let (status, _) = register(&app, &other, "late").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A worker revoked: its token stops working at once, its lease ends.
    let c = app.small_campaign(2, 4).await;
    let (wid, w) = app.worker("retired").await;
    let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
    let (status, info) = app
        .admin(Method::POST, &format!("/api/v1/workers/{wid}/revoke"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{info}");
    assert!(info["revoked_at"].is_string());
    assert_eq!(code_of(w.lease(Some(1)).await), "unauthorized");
    assert_eq!(code_of(w.heartbeat(&lease).await), "unauthorized");
    let p = app.progress(c["id"].as_i64().unwrap()).await;
    assert_eq!(p["pending"]["units"], 2, "{p}");
    // Replicas from different owners by default.
    let (status, c) = app
        .admin(
            Method::POST,
            "/api/v1/campaigns",
            Some(
                json!({"function": "exp", "format": "binary32", "min_bits": 12,
                        "unit_bits": 4, "replication": 2,
                        "ranges": [{"from": "0x1p+0", "to": "0x1.00002p+0"}]}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(c["distinct_owners"], true);
}

/// Item 7: a campaign whose units expect more HR-cases than a result may hold could never
/// finish; it is refused when created.
#[tokio::test]
async fn campaigns_that_cannot_finish_are_refused() {
    let app = TestApp::new().await;
    let (status, v) = app
        .admin(
            Method::POST,
            "/api/v1/campaigns",
            Some(
                json!({"function": "exp", "format": "binary32", "min_bits": 1,
                        "unit_bits": 16, "ranges": [{"from": "1", "to": "2"}]}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["message"].as_str().unwrap().contains("min_bits"), "{v}");
    let mut c = config();
    c.max_cases_per_result = 1_000_000;
    let big = TestApp::with_config(c).await;
    let (status, v) = big
        .admin(
            Method::POST,
            "/api/v1/campaigns",
            Some(
                json!({"function": "exp", "format": "binary32", "min_bits": 1,
                        "unit_bits": 16, "ranges": [{"from": "1", "to": "2"}]}),
            ),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "with a larger limit it fits: {v}"
    );
}

/// Item 8: a client over its budget is told to slow down; other clients are not.
#[tokio::test]
async fn floods_are_rate_limited() {
    let app = TestApp::with_config(Config {
        rate_limit: Some(RateLimit {
            per_second: 1.0,
            burst: 5.0,
            loopback: true,
        }),
        ..config()
    })
    .await;
    let mut codes = Vec::new();
    for _ in 0..8 {
        let (status, v) = app.call(Method::GET, "/healthz", None, None).await;
        codes.push((status.as_u16(), v["code"].clone()));
    }
    assert!(codes[..5].iter().all(|(s, _)| *s == 200), "{codes:?}");
    assert_eq!(codes[7], (429, json!("rate_limited")), "{codes:?}");
    let _ = ADMIN;
}

/// Item 11: the coordinator serves HTTPS itself from PEM files; a client trusting the CA
/// talks to it, plain HTTP does not get through.
#[tokio::test]
async fn the_coordinator_serves_https() {
    let dir = std::env::temp_dir().join(format!("tmd-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A lab's own CA, and the coordinator's certificate signed by it.
    let pki = tmd_test_support::private_ca(&dir);
    let app = TestApp::with_config(Config {
        tls: Some(tmd_server::listen::load_tls(&pki.cert, &pki.key).unwrap()),
        ..config()
    })
    .await;
    assert!(app.base.starts_with("https://"), "{}", app.base);
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .unwrap();
    let resp = client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let w = WorkerClient::new(&app.base, "tmdw_unknown", client.clone());
    assert_eq!(code_of(w.lease(None).await), "unauthorized");
    // Without the CA the certificate is not trusted; plain HTTP is not spoken.
    assert!(reqwest::get(app.url("/healthz")).await.is_err());
    let plain = app.base.replace("https://", "http://");
    let refused = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("{plain}/healthz"))
        .send()
        .await;
    assert!(refused.map(|r| !r.status().is_success()).unwrap_or(true));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Item 8: an unknown worker token is refused from memory for a minute, so guessing tokens does
/// not cost a database query each. (Shown by making the token valid in the database behind the
/// server's back: it is still refused until the memory expires.)
#[tokio::test]
async fn unknown_tokens_do_not_reach_the_database_each_time() {
    let app = TestApp::new().await;
    let guess = "tmdw_0000000000000000000000000000000000000000000000000000000000000000";
    let w = WorkerClient::new(&app.base, guess, app.http.clone());
    assert_eq!(code_of(w.lease(None).await), "unauthorized");
    let hash = tmd_server::request::auth::hash_token(guess);
    sqlx::query("INSERT INTO workers (name, token_hash, owner) VALUES ('x', $1, 'x')")
        .bind(&hash[..])
        .execute(app.db.pool())
        .await
        .unwrap();
    assert_eq!(code_of(w.lease(None).await), "unauthorized");
    // A fresh server (no memory) finds it.
    let mut app = app;
    app.restart().await;
    let w = w.with_base(&app.base);
    assert!(w.lease(None).await.is_ok());
}
