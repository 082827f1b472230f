//! `tmd-server bench`: a load benchmark of the lease protocol. It creates a throwaway database,
//! starts the server in this process on a loopback port, and runs simulated workers that each
//! loop lease → heartbeat → post result (one unit per lease, no HR-cases) over real HTTP.
//! With `--replication`, `--adaptive` and `--liars` it also measures what replication costs:
//! the work factor (results per done unit) and how fast lying workers are quarantined.

use super::client::*;
use crate::Config;
use anyhow::bail;
use clap::Args;
use std::time::{Duration, Instant};
use tmd_wire::{ArgRange, CreateCampaign, CreateEnrollmentToken, EnrollmentToken};

/// The cycles bench's options (`bench` without a subcommand).
#[derive(Debug, Clone, Args)]
pub struct CyclesArgs {
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

/// Runs the cycles bench on a throwaway database and prints its figures.
pub async fn run(args: &CyclesArgs) -> anyhow::Result<()> {
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

async fn run_on(args: &CyclesArgs, db: &str) -> anyhow::Result<()> {
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    use std::str::FromStr;
    let options = PgConnectOptions::from_str(&args.database.database_url)?.database(db);
    let pool = PgPoolOptions::new()
        // A failed connection shows on use anyway; a ping per acquire costs a round trip.
        .test_before_acquire(false)
        .max_connections(args.max_connections)
        .connect_with(options)
        .await?;
    let admin_token = crate::request::auth::new_token("bench_");
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
    args: &CyclesArgs,
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
