//! `tmd-server bench`: a load benchmark of the lease protocol. It creates a throwaway database,
//! starts the server in this process on a loopback port, and runs simulated workers that each
//! loop lease → heartbeat → post result (one unit per lease, no HR-cases) over real HTTP.
//! With `--replication`, `--adaptive` and `--liars` it also measures what replication costs:
//! the work factor (results per done unit) and how fast lying workers are quarantined.

use crate::Config;
use anyhow::{bail, Context};
use clap::Args;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sqlx::{Connection, Executor, PgConnection};
use std::time::{Duration, Instant};
use tmd_wire::{
    ApiError, ArgRange, CreateCampaign, CreateEnrollmentToken, EnrollmentToken, Heartbeat,
    HeartbeatResponse, Lease, LeaseRequest, LeaseResponse, RegisterWorker, ReleaseLease,
    ReleaseResponse, ResultAccepted, UnitResult, UnitStats, WorkerRegistered,
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

/// `bench` options.
#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// A GPU farm posting result batches to real server processes (see `bench farm --help`).
    #[command(subcommand)]
    pub mode: Option<BenchMode>,
    #[command(flatten)]
    pub database: BenchDatabase,
    /// Simulated workers, each running cycles back to back.
    #[arg(long, default_value_t = 32)]
    pub workers: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Connections in the server's pool.
    #[arg(long, default_value_t = 16)]
    pub max_connections: u32,
    /// The campaign's replication (agreeing results per unit).
    #[arg(long, default_value_t = 1)]
    pub replication: u32,
    /// Adaptive replication (needs --replication 2 or more).
    #[arg(long)]
    pub adaptive: bool,
    /// With --adaptive: the audit rate.
    #[arg(long, default_value_t = 0.1)]
    pub audit_rate: f64,
    /// With --adaptive: agreed results in a row before a worker is trusted.
    #[arg(long, default_value_t = 20)]
    pub trust_after: u32,
    /// How many of the simulated workers lie (post results with wrong counters, each liar
    /// differently); they stop when they are quarantined.
    #[arg(long, default_value_t = 0)]
    pub liars: usize,
}

/// The other benches.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum BenchMode {
    /// Simulated GPUs finishing units at a rate and posting them in batches to one or more
    /// `tmd-server serve` processes on a throwaway database.
    Farm(crate::cli::bench_farm::FarmArgs),
    /// A campaign of millions of units (default 10 million) on a throwaway database: its
    /// creation time, the tables' sizes, and the latency and size of progress, dashboard,
    /// coverage and metrics requests.
    Scale(crate::cli::bench_scale::ScaleArgs),
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
        self.call(
            "/leases",
            &LeaseRequest {
                seconds,
                units_in_flight: None,
                engine: Some(tmd_kernels::ENGINE_VERSION),
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

/// The campaign the scale and farm benches create: exp in binary64 at 40 bits over the binades
/// `[1, 2^binades)`, units of 2^32 (2^20 per binade), every worker trusted.
pub(crate) fn exp_campaign(name: &str, binades: u64) -> CreateCampaign {
    CreateCampaign {
        name: Some(name.into()),
        function: "exp".into(),
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

/// Runs the benchmark and prints its figures.
pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    match &args.mode {
        Some(BenchMode::Farm(farm)) => return crate::cli::bench_farm::run(farm).await,
        Some(BenchMode::Scale(scale)) => return crate::cli::bench_scale::run(scale).await,
        None => {}
    }
    if args.workers == 0 || args.seconds == 0 {
        bail!("--workers and --seconds must be at least 1");
    }
    with_bench_database(
        &args.database.database_url,
        "tmd_bench",
        |name| async move { run_on(args, &name).await },
    )
    .await
}

async fn run_on(args: &BenchArgs, db: &str) -> anyhow::Result<()> {
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    use std::str::FromStr;
    let options = PgConnectOptions::from_str(&args.database.database_url)?.database(db);
    let pool = PgPoolOptions::new()
        // A failed connection shows on use anyway; a ping per acquire costs a round trip.
        .test_before_acquire(false)
        .max_connections(args.max_connections)
        .connect_with(options)
        .await?;
    let admin_token = crate::api::auth::new_token("bench_");
    let config = Config {
        sweep_interval: Duration::from_secs(5),
        ..Config::default()
    }
    .with_admin_token(&admin_token);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = crate::Server::start(pool, config, listener).await?;
    let base = server.url();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.workers)
        .build()?;
    let (campaign, token) = bench_campaign(&http, &base, &admin_token, args).await?;
    let mut clients = Vec::new();
    for i in 0..args.workers {
        let w = register(&http, &base, &token.token, &format!("bench-{i}")).await?;
        clients.push(WorkerClient::new(&base, &w.token, http.clone()));
    }
    eprintln!(
        "bench: {} workers for {} s against {base} (database {db})",
        args.workers, args.seconds
    );
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let liar = i < args.liars;
        tasks.push(tokio::spawn(simulate_worker(c, i, liar, deadline)));
    }
    let mut cycles = Vec::new();
    let mut by_kind: [Vec<f64>; 3] = Default::default();
    for t in tasks {
        let (c, r) = t.await??;
        cycles.extend(c);
        for (all, mine) in by_kind.iter_mut().zip(r) {
            all.extend(mine);
        }
    }
    let mut requests: Vec<f64> = by_kind.iter().flatten().copied().collect();
    let wall = started.elapsed().as_secs_f64();
    let progress: tmd_wire::CampaignProgress = http
        .get(format!("{base}/api/v1/campaigns/{}/progress", campaign.id))
        .bearer_auth(&admin_token)
        .send()
        .await?
        .json()
        .await?;
    let workers: Vec<tmd_wire::WorkerInfo> = http
        .get(format!("{base}/api/v1/workers"))
        .bearer_auth(&admin_token)
        .send()
        .await?
        .json()
        .await?;
    server.shutdown().await?;
    cycles.sort_by(f64::total_cmp);
    requests.sort_by(f64::total_cmp);
    for (name, v) in ["lease", "heartbeat", "result"]
        .iter()
        .zip(by_kind.iter_mut())
    {
        v.sort_by(f64::total_cmp);
        outln!(
            "{name}: p50_ms={:.2} p99_ms={:.2}",
            percentile(v, 0.5) * 1e3,
            percentile(v, 0.99) * 1e3
        )?;
    }
    outln!(
        "workers={} seconds={:.1} cycles={} cycles_per_s={:.0} \
         cycle_p50_ms={:.2} cycle_p99_ms={:.2} request_p50_ms={:.2} request_p99_ms={:.2}",
        args.workers,
        wall,
        cycles.len(),
        cycles.len() as f64 / wall,
        percentile(&cycles, 0.5) * 1e3,
        percentile(&cycles, 0.99) * 1e3,
        percentile(&requests, 0.5) * 1e3,
        percentile(&requests, 0.99) * 1e3,
    )?;
    let r = &progress.replication;
    let quarantined = |liar: bool| {
        workers
            .iter()
            .enumerate()
            .filter(|(i, w)| (*i < args.liars) == liar && w.quarantined_at.is_some())
            .count()
    };
    outln!(
        "replication={} adaptive={} units_done={} results={} work_factor={:.3} outvoted={} \
         void={} alone={} liars_quarantined={}/{} honest_quarantined={}",
        args.replication,
        args.adaptive,
        progress.done.units,
        r.results,
        r.work_factor,
        r.outvoted,
        r.void,
        r.alone,
        quarantined(true),
        args.liars,
        quarantined(false),
    )?;
    Ok(())
}

/// The bench's campaign (exp on [1, 2) in binary32, the replication of `args`) and an
/// enrollment token for its workers.
async fn bench_campaign(
    http: &reqwest::Client,
    base: &str,
    admin_token: &str,
    args: &BenchArgs,
) -> anyhow::Result<(tmd_wire::Campaign, EnrollmentToken)> {
    // exp on [1, 2) in binary32 with 64 arguments per unit: 131072 units, more than any run
    // here consumes.
    let resp = http
        .post(format!("{base}/api/v1/campaigns"))
        .bearer_auth(admin_token)
        .json(&CreateCampaign {
            name: Some("bench".into()),
            function: "exp".into(),
            format: Some("binary32".into()),
            precision: None,
            min_bits: 20,
            ranges: vec![ArgRange {
                from: "0x1p+0".into(),
                to: "0x1p+1".into(),
            }],
            unit_bits: Some(6),
            replication: Some(args.replication),
            trust_all_workers: (args.replication == 1).then_some(true),
            adaptive: args.adaptive.then_some(true),
            // The simulated workers share one owner (one enrollment token).
            distinct_owners: Some(false),
            audit_rate: args.adaptive.then_some(args.audit_rate),
            trust_after: args.adaptive.then_some(args.trust_after),
            ..Default::default()
        })
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("campaign: {}", resp.text().await?);
    }
    let campaign: tmd_wire::Campaign = resp.json().await?;
    let token: EnrollmentToken = http
        .post(format!("{base}/api/v1/enrollment-tokens"))
        .bearer_auth(admin_token)
        .json(&CreateEnrollmentToken {
            uses: Some(args.workers.max(1) as u32),
            ..CreateEnrollmentToken::default()
        })
        .send()
        .await?
        .json()
        .await?;
    Ok((campaign, token))
}

/// One simulated worker's cycles (lease, heartbeat, a result per unit) until `deadline`: each
/// cycle's seconds, and each request's by kind (lease, heartbeat, result). Worker `i` lies
/// when `liar`, and stops once it is quarantined.
async fn simulate_worker(
    c: WorkerClient,
    i: usize,
    liar: bool,
    deadline: Instant,
) -> anyhow::Result<(Vec<f64>, [Vec<f64>; 3])> {
    let mut cycles = Vec::new();
    let mut requests: [Vec<f64>; 3] = Default::default();
    // A liar's calls fail once it is quarantined (its lease revoked, or refused
    // outright): that ends its loop.
    let stopped = |e: &anyhow::Error| {
        liar && e.downcast_ref::<Refused>().is_some_and(|r| {
            r.error.code == tmd_wire::codes::WORKER_QUARANTINED
                || r.error.code == tmd_wire::codes::LEASE_EXPIRED
        })
    };
    while Instant::now() < deadline {
        let t0 = Instant::now();
        let lease = match c.lease(Some(1)).await {
            Ok(r) => r.lease,
            Err(e) if stopped(&e) => break,
            Err(e) => return Err(e),
        };
        let Some(lease) = lease else {
            break;
        };
        let t1 = Instant::now();
        match c.heartbeat(&lease).await {
            Ok(_) => {}
            Err(e) if stopped(&e) => break,
            Err(e) => return Err(e),
        }
        let t2 = Instant::now();
        for u in &lease.units {
            // 2 s per 64 arguments keeps the measured speed at one unit per lease.
            let mut result = empty_result(lease.fencing_token, u.unit_id, 2.0);
            if liar {
                // Each liar lies its own way (broken hardware, not a conspiracy): two
                // identical lies on both replicas of a unit would win its vote.
                result.stats.domains += 1 + i as u64;
            }
            match c.post(lease.lease_id, u.unit_id, &result).await {
                Ok(_) => {}
                Err(e) if stopped(&e) => return Ok((cycles, requests)),
                Err(e) => return Err(e),
            }
        }
        let t3 = Instant::now();
        for (i, d) in [t1 - t0, t2 - t1, t3 - t2].into_iter().enumerate() {
            requests[i].push(d.as_secs_f64());
        }
        cycles.push((t3 - t0).as_secs_f64());
    }
    anyhow::Ok((cycles, requests))
}
