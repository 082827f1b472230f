//! What every bench shares: a worker-side client of the lease protocol (the simulated
//! workers, and the tests), a plausible empty result, the throwaway database and the campaign
//! the benches create.

use anyhow::{bail, Context};
use clap::Args;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sqlx::{Connection, Executor, PgConnection};
use tmd_wire::{
    ApiError, ArgRange, CreateCampaign, Heartbeat, HeartbeatResponse, Lease, LeaseRequest,
    LeaseResponse, RegisterWorker, ReleaseLease, ReleaseResponse, ResultAccepted, UnitResult,
    UnitStats, WorkerRegistered,
};

/// Where a bench (`bench`, `bench farm`) creates its throwaway database.
#[derive(Debug, Clone, Args)]
pub struct BenchDatabase {
    /// A PostgreSQL database on a server where the bench may create (and then drop) its own
    /// database.
    #[arg(
        long,
        env = "TMD_BENCH_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub database_url: String,
}

/// A worker-side client of the lease protocol (the bench's simulated workers, and tests).
#[derive(Clone)]
pub struct WorkerClient {
    base: String,
    token: String,
    http: reqwest::Client,
}

/// A refused call: the HTTP status and the error envelope.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub error: ApiError,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status, self.error.code, self.error.message
        )
    }
}

impl std::error::Error for Refused {}

impl WorkerClient {
    /// A client for `base` (e.g. `http://127.0.0.1:8080`) with a worker token.
    pub fn new(base: &str, token: &str, http: reqwest::Client) -> WorkerClient {
        WorkerClient {
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
            http,
        }
    }

    /// The worker's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The same worker against another server address (after a restart).
    pub fn with_base(&self, base: &str) -> WorkerClient {
        WorkerClient::new(base, &self.token, self.http.clone())
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        let resp = self
            .http
            .request(Method::POST, format!("{}/api/v1{path}", self.base))
            .bearer_auth(&self.token)
            .header(tmd_wire::FEATURES_HEADER, tmd_wire::FEATURE_FORMATS)
            .json(body)
            .send()
            .await?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp.json().await?);
        }
        let error: ApiError = resp.json().await.context("error without envelope")?;
        Err(Refused {
            status: status.as_u16(),
            error,
        }
        .into())
    }

    /// Asks for about `seconds` of work.
    pub async fn lease(&self, seconds: Option<u32>) -> anyhow::Result<LeaseResponse> {
        self.lease_with_slots(seconds, None).await
    }

    /// Asks for about `seconds` of work for a worker that computes `slots` units at once.
    pub async fn lease_with_slots(
        &self,
        seconds: Option<u32>,
        slots: Option<u32>,
    ) -> anyhow::Result<LeaseResponse> {
        self.call(
            "/leases",
            &LeaseRequest {
                seconds,
                units_in_flight: slots,
                engine: Some(tmd_kernels::ENGINE_VERSION),
                backend: Some("cpu".into()),
                device: Some("tmd-server bench client".into()),
            },
        )
        .await
    }

    /// Extends a lease.
    pub async fn heartbeat(&self, lease: &Lease) -> anyhow::Result<HeartbeatResponse> {
        self.call(
            &format!("/leases/{}/heartbeat", lease.lease_id),
            &Heartbeat {
                fencing_token: lease.fencing_token,
            },
        )
        .await
    }

    /// Gives a lease back, reporting `failed` units as failed.
    pub async fn release(&self, lease: &Lease, failed: &[i64]) -> anyhow::Result<ReleaseResponse> {
        self.call(
            &format!("/leases/{}/release", lease.lease_id),
            &ReleaseLease {
                fencing_token: lease.fencing_token,
                failed_units: failed.to_vec(),
                reason: None,
            },
        )
        .await
    }

    /// Posts the result of one unit of `lease_id`.
    pub async fn post(
        &self,
        lease_id: i64,
        unit_id: i64,
        result: &UnitResult,
    ) -> anyhow::Result<ResultAccepted> {
        self.call(
            &format!("/leases/{lease_id}/units/{unit_id}/result"),
            result,
        )
        .await
    }
}

impl WorkerClient {
    /// Posts the results of many units (of one or more of the worker's leases) in one request.
    pub async fn post_batch(
        &self,
        results: Vec<tmd_wire::BatchedResult>,
    ) -> anyhow::Result<tmd_wire::ResultBatchResponse> {
        self.call("/results", &tmd_wire::ResultBatch { results })
            .await
    }
}

/// Registers a worker with an enrollment token.
pub async fn register(
    http: &reqwest::Client,
    base: &str,
    enrollment_token: &str,
    name: &str,
) -> anyhow::Result<WorkerRegistered> {
    let resp = http
        .post(format!("{base}/api/v1/workers/register"))
        .json(&RegisterWorker {
            enrollment_token: enrollment_token.to_string(),
            name: name.to_string(),
        })
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("register: {}", resp.text().await?);
    }
    Ok(resp.json().await?)
}

/// A plausible result with no HR-cases; the digest is derived from the unit so retries match.
pub fn empty_result(fencing_token: i64, unit_id: i64, elapsed: f64) -> UnitResult {
    use sha2::{Digest, Sha256};
    UnitResult {
        fencing_token,
        stats: UnitStats {
            units: 1,
            domains: 1,
            ..UnitStats::default()
        },
        hr_cases: vec![],
        exact_cases: vec![],
        skipped: vec![],
        elapsed,
        digest: hex::encode(Sha256::digest(unit_id.to_le_bytes())),
        engine: Some(tmd_kernels::ENGINE_VERSION),
    }
}

/// One [`empty_result`] per unit of `lease`, as one batch (`POST /results`).
pub fn empty_batch(lease: &Lease, elapsed: f64) -> Vec<tmd_wire::BatchedResult> {
    lease
        .units
        .iter()
        .map(|u| tmd_wire::BatchedResult {
            lease_id: lease.lease_id,
            unit_id: u.unit_id,
            result: empty_result(lease.fencing_token, u.unit_id, elapsed),
        })
        .collect()
}

/// The `p` quantile (0 to 1) of sorted values, the nearest rank; NaN for none.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs `bench` on a throwaway database `{prefix}_<uuid>` of the PostgreSQL at `database_url`:
/// created first, dropped afterwards (with its connections) whatever the bench returns. `bench`
/// gets the database's name and must have ended its processes that use it when it returns.
pub(crate) async fn with_bench_database<T, F, Fut>(
    database_url: &str,
    prefix: &str,
    bench: F,
) -> anyhow::Result<T>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(database_url)
        .await
        .context("cannot connect to the benchmark's PostgreSQL")?;
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await?;
    let outcome = bench(name.clone()).await;
    admin
        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
        .await?;
    outcome
}

/// The campaign the scale and farm benches create: log in binary64 at 40 bits over the binades
/// `[1, 2^binades)`, units of 2^32 (2^20 per binade), every worker trusted. log, whose search
/// skips no unit whole there: exp overflows from 710, and a plan merges the units it would
/// skip whole into one.
pub(crate) fn bench_campaign(name: &str, binades: u64) -> CreateCampaign {
    CreateCampaign {
        name: Some(name.into()),
        function: "log".into(),
        format: Some("binary64".into()),
        min_bits: 40,
        ranges: vec![ArgRange {
            from: "0x1p+0".into(),
            to: format!("0x1p+{binades}"),
        }],
        unit_bits: Some(32),
        trust_all_workers: Some(true),
        ..Default::default()
    }
}
