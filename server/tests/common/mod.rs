//! Test harness: a fresh database per test, the real server on `127.0.0.1:0`, a real HTTP
//! client, and helpers to create campaigns and register workers.

#![allow(dead_code)]

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;
use tmd_server::bench::WorkerClient;
use tmd_server::{Config, Server};
use tmd_test_support::TestDb;

// An honest engine's view of a unit, for tests that play workers.
pub mod engine;
// The seeded campaign of the dashboard and export tests.
pub mod seed;

pub const ADMIN: &str = "admin-token-for-tests-0123456789";

pub struct TestApp {
    pub db: TestDb,
    pub server: Option<Server>,
    pub config: Config,
    pub http: reqwest::Client,
    pub base: String,
}

/// The defaults of the tests: an admin token, and no background sweeper in the way (expiry
/// then happens only lazily, on lease requests, so tests control it).
pub fn config() -> Config {
    Config {
        sweep_interval: Duration::from_secs(3600),
        ..Config::default()
    }
    .with_admin_token(ADMIN)
}

impl TestApp {
    pub async fn new() -> TestApp {
        TestApp::with_config(config()).await
    }

    pub async fn with_config(config: Config) -> TestApp {
        let db = TestDb::new().await;
        let server = start(&db, config.clone()).await;
        let base = server.url();
        TestApp {
            db,
            server: Some(server),
            config,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            base,
        }
    }

    /// Stops the server and starts a new one on the same database (a new port).
    pub async fn restart(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await.unwrap();
        }
        let server = start(&self.db, self.config.clone()).await;
        self.base = server.url();
        self.server = Some(server);
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with an optional bearer token and JSON body; returns status and JSON body
    /// (`Value::Null` when the body is not JSON).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        // As a current worker: it declares that it runs the engine in named formats.
        let mut req = self
            .http
            .request(method, self.url(path))
            .header(tmd_wire::FEATURES_HEADER, tmd_wire::FEATURE_FORMATS);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// An admin quarantines worker `id`: the answer's status and body.
    pub async fn quarantine(&self, id: i64, reason: &str) -> (StatusCode, Value) {
        self.admin(
            Method::POST,
            &format!("/api/v1/workers/{id}/quarantine"),
            Some(serde_json::json!({ "reason": reason })),
        )
        .await
    }

    /// The `/metrics` page as text (Prometheus exposition format).
    pub async fn metrics(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn admin(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.call(method, path, Some(ADMIN), body).await
    }

    /// Creates a campaign, asserting success. A body that asks no replication above 1 gets
    /// `trust_all_workers` (the tests' farm of one process); the new defaults are tested on
    /// their own (tests/trust_default.rs).
    pub async fn campaign(&self, mut body: Value) -> Value {
        let single = body
            .get("replication")
            .is_none_or(|r| r.as_u64().is_some_and(|r| r <= 1));
        if single && body.get("trust_all_workers").is_none() {
            body["trust_all_workers"] = json!(true);
        }
        let (status, v) = self
            .admin(Method::POST, "/api/v1/campaigns", Some(body))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        v
    }

    /// exp in binary32 on [1, 1 + units * 2^-23 * 2^unit_bits): `units` units.
    pub async fn small_campaign(&self, units: u32, unit_bits: u32) -> Value {
        let to = format!("0x{:x}p-23", (1u64 << 23) + (u64::from(units) << unit_bits));
        self.campaign(json!({
            "function": "exp", "format": "binary32", "min_bits": 12,
            "ranges": [{"from": "0x1p+0", "to": to}], "unit_bits": unit_bits
        }))
        .await
    }

    /// Registers a worker through an enrollment token; returns its id and client.
    pub async fn worker(&self, name: &str) -> (i64, WorkerClient) {
        let (status, t) = self
            .admin(Method::POST, "/api/v1/enrollment-tokens", Some(json!({})))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{t}");
        let (status, w) = self
            .call(
                Method::POST,
                "/api/v1/workers/register",
                None,
                Some(json!({"enrollment_token": t["token"], "name": name})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{w}");
        let client = WorkerClient::new(&self.base, w["token"].as_str().unwrap(), self.http.clone());
        (w["worker_id"].as_i64().unwrap(), client)
    }

    /// A worker registered with a token of its own created with `token` (owner, trusted, uses).
    pub async fn enroll(&self, token: Value, name: &str) -> (i64, WorkerClient) {
        let (status, t) = self
            .admin(Method::POST, "/api/v1/enrollment-tokens", Some(token))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{t}");
        self.register(t["token"].as_str().unwrap(), name).await
    }

    /// A worker registered with the enrollment token `token`.
    pub async fn register(&self, token: &str, name: &str) -> (i64, WorkerClient) {
        let (status, w) = self
            .call(
                Method::POST,
                "/api/v1/workers/register",
                None,
                Some(json!({"enrollment_token": token, "name": name})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{w}");
        let client = WorkerClient::new(&self.base, w["token"].as_str().unwrap(), self.http.clone());
        (w["worker_id"].as_i64().unwrap(), client)
    }

    /// Marks worker `id` as measured fast: its leases are sized by the pending-share cap.
    pub async fn measured_fast(&self, id: i64) {
        sqlx::query("UPDATE workers SET speed = 1e12 WHERE id = $1")
            .bind(id)
            .execute(self.db.pool())
            .await
            .unwrap();
    }

    /// A worker as the admin sees it (`GET /api/v1/workers/{id}`).
    pub async fn worker_info(&self, id: i64) -> Value {
        let (status, v) = self
            .admin(Method::GET, &format!("/api/v1/workers/{id}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    }

    pub async fn progress(&self, campaign: i64) -> Value {
        let (status, p) = self
            .admin(
                Method::GET,
                &format!("/api/v1/campaigns/{campaign}/progress"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{p}");
        p
    }
}

async fn start(db: &TestDb, config: Config) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    Server::start(db.pool().clone(), config, listener)
        .await
        .unwrap()
}

/// Runs the `tmd-server` binary with `args`, without the admin token or server of the
/// environment: whether it succeeded, its stdout and its stderr.
pub async fn tmd<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tmd-server"))
        .args(args)
        .env_remove("TMD_ADMIN_TOKEN")
        .env_remove("TMD_SERVER")
        .env("TMD_LOG", "warn")
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Leases and posts empty results (half a second each) until `w` gets no more work: the
/// units it posted.
pub async fn work_through(w: &WorkerClient) -> usize {
    let mut done = 0;
    while let Some(lease) = w.lease(Some(3600)).await.unwrap().lease {
        for u in &lease.units {
            w.post(
                lease.lease_id,
                u.unit_id,
                &tmd_server::bench::empty_result(lease.fencing_token, u.unit_id, 0.5),
            )
            .await
            .unwrap();
            done += 1;
        }
    }
    done
}

/// Asserts that an answer `(status, body)` is a refusal with this status (a `StatusCode`
/// constant's name) and error code; the body, and any further format arguments, go into the
/// failure's message. Evaluates to the body.
// Not every test file refuses something.
#[allow(unused_macros)]
macro_rules! assert_refused {
    ($answer:expr, $status:ident, $code:expr) => {
        assert_refused!($answer, $status, $code, "")
    };
    ($answer:expr, $status:ident, $code:expr, $($context:tt)+) => {{
        let (status, body): (reqwest::StatusCode, serde_json::Value) = $answer;
        assert_eq!(
            (status, body["code"].as_str()),
            (reqwest::StatusCode::$status, Some($code)),
            "{}: {body}",
            format_args!($($context)+)
        );
        body
    }};
}
// Not every test file refuses something.
#[allow(unused_imports)]
pub(crate) use assert_refused;

/// The error code of a refused worker call.
pub fn code_of<T: std::fmt::Debug>(r: anyhow::Result<T>) -> String {
    match r {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(e) => match e.downcast_ref::<tmd_server::bench::Refused>() {
            Some(refused) => refused.error.code.clone(),
            None => panic!("not a refusal: {e:#}"),
        },
    }
}
