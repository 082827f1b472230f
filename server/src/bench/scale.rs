//! `tmd-server bench scale`: a campaign of millions of units, end to end through one in-process
//! coordinator on a throwaway database. It creates the campaign over HTTP (planning,
//! units generated in the database, counters), posts a cost estimate, has a worker lease and post
//! a sample of units, then measures what people and dashboards ask for: progress, every
//! campaign's progress, a coverage page, `/metrics`. It prints the creation time, the process's
//! peak memory, the tables' sizes and each request's latency (p50/p99) and response size.

use super::client::{
    bench_campaign, empty_batch, percentile, register, with_bench_database, BenchDatabase,
    WorkerClient,
};
use crate::Config;
use anyhow::bail;
use clap::Args;
use sqlx::PgPool;
use std::time::{Duration, Instant};
use tmd_wire::{
    BinadeCost, CostEstimate, CreateEnrollmentToken, EnrollmentToken, COST_ESTIMATE_VERSION,
};

/// `bench scale` options.
#[derive(Debug, Clone, Args)]
pub struct ScaleArgs {
    #[command(flatten)]
    pub database: BenchDatabase,
    /// Units of the campaign (rounded up to whole binades of 2^20 units: log in binary64,
    /// units of 2^32 arguments, from 1 up).
    #[arg(long, default_value_t = 10_000_000)]
    pub units: u64,
    /// Leases the worker takes (each followed by a batch of results for all its units).
    #[arg(long, default_value_t = 20)]
    pub leases: usize,
    /// Seconds of work each lease asks for.
    #[arg(long, default_value_t = 60)]
    pub lease_seconds: u32,
    /// Requests of each kind measured (progress, all progress, coverage, metrics).
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    /// The coordinator's `--defer-marking-min` (0: every claim marks its own units).
    #[arg(long, value_name = "UNITS", default_value_t = crate::LeasePolicy::default().defer_marking_min)]
    pub defer_marking_min: u32,
}

/// Runs the bench on a throwaway database, dropped afterwards.
pub async fn run(args: &ScaleArgs) -> anyhow::Result<()> {
    with_bench_database(
        &args.database.database_url,
        "tmd_bench",
        |name| async move { run_on(args, &name).await },
    )
    .await
}

/// Peak resident memory of this process (Linux), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// GETs `path` `n` times; prints p50/p99 latency and the response's size.
async fn measure(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    n: usize,
    label: &str,
) -> anyhow::Result<()> {
    let mut times = Vec::with_capacity(n);
    let mut bytes = 0;
    for _ in 0..n.max(1) {
        let t = Instant::now();
        let resp = http.get(url).bearer_auth(token).send().await?;
        if !resp.status().is_success() {
            bail!("{label}: {}", resp.status());
        }
        bytes = resp.bytes().await?.len();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{label:<28} p50 {:>8.2} ms  p99 {:>8.2} ms  {:>9} bytes",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        bytes
    );
    Ok(())
}

/// A synthetic estimate of the bench's campaign: the cost per unit doubles with each binade
/// (as exp's does above 1, roughly; a spread of costs to weigh, whatever log's are).
fn estimate(binades: u32) -> CostEstimate {
    let binades: Vec<BinadeCost> = (0..binades as i32)
        .map(|e| BinadeCost {
            negative: false,
            exponent: e,
            units: 1 << 20,
            sampled: 16,
            seconds_per_unit: 0.004 * 2f64.powi(e),
            seconds_per_unit_stderr: 0.0,
            expected_hr_cases: 0.0,
            expected_hr_cases_stderr: 0.0,
            arguments: None,
        })
        .collect();
    let total_seconds = binades
        .iter()
        .map(|b| b.units as f64 * b.seconds_per_unit)
        .sum();
    CostEstimate {
        version: COST_ESTIMATE_VERSION,
        function: "log".into(),
        format: "binary64".into(),
        min_bits: 40,
        unit_bits: 32,
        backend: "synthetic (bench scale)".into(),
        seed: 0,
        binades,
        total_seconds,
        total_seconds_stderr: 0.0,
        total_hr_cases: 0.0,
        total_hr_cases_stderr: 0.0,
    }
}

async fn sizes(pool: &PgPool) -> anyhow::Result<()> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT t, pg_total_relation_size(t::regclass) FROM unnest(ARRAY['units', 'leases', \
         'results', 'campaign_tallies', 'binade_tallies', 'campaign_costs', \
         'campaign_snapshots']) AS t",
    )
    .fetch_all(pool)
    .await?;
    for (t, b) in rows {
        println!("size {t:<22} {:>10.1} MiB", b as f64 / 1048576.0);
    }
    let db = super::farm::database_bytes(pool).await?;
    println!("size {:<22} {:>10.1} MiB", "(database)", db / 1048576.0);
    Ok(())
}

async fn run_on(args: &ScaleArgs, db: &str) -> anyhow::Result<()> {
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    use std::str::FromStr;
    // Without JIT, as the coordinator's own pool (`serve`) opens its connections.
    let options = PgConnectOptions::from_str(&args.database.database_url)?
        .database(db)
        .options([("jit", "off")]);
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    let admin_token = crate::request::auth::new_token("bench_");
    let binades = args.units.div_ceil(1 << 20).max(1);
    if binades > 1000 {
        bail!(
            "--units {} is more than 1000 binades of 2^20 units",
            args.units
        );
    }
    let config = Config {
        sweep_interval: Duration::from_secs(5),
        max_units_per_campaign: (binades as usize) << 20,
        max_body_bytes: 16 << 20,
        // The creation of millions of units is what is measured, on machines of any load: not
        // cut by the deadline a request gets in service.
        request_timeout: Duration::from_secs(1800),
        policy: crate::LeasePolicy {
            defer_marking_min: args.defer_marking_min,
            ..crate::LeasePolicy::default()
        },
        ..Config::default()
    }
    .with_admin_token(&admin_token);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = crate::Server::start(pool.clone(), config, listener).await?;
    let base = server.url();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let rss_before = peak_rss_mib();
    let t = Instant::now();
    let resp = http
        .post(format!("{base}/api/v1/campaigns"))
        .bearer_auth(&admin_token)
        .json(&bench_campaign("scale", binades))
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("campaign: {}", resp.text().await?);
    }
    let campaign: tmd_wire::Campaign = resp.json().await?;
    let created = t.elapsed().as_secs_f64();
    println!(
        "created campaign {} of {} units in {created:.1} s; peak RSS {:.0} MiB (before: {:.0} MiB)",
        campaign.id,
        campaign.units_total,
        peak_rss_mib().unwrap_or(f64::NAN),
        rss_before.unwrap_or(f64::NAN)
    );
    sizes(&pool).await?;
    let t = Instant::now();
    let resp = http
        .post(format!("{base}/api/v1/campaigns/{}/estimate", campaign.id))
        .bearer_auth(&admin_token)
        .json(&estimate(binades as u32))
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("estimate: {}", resp.text().await?);
    }
    println!(
        "estimate posted in {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let token: EnrollmentToken = http
        .post(format!("{base}/api/v1/enrollment-tokens"))
        .bearer_auth(&admin_token)
        .json(&CreateEnrollmentToken {
            uses: Some(1),
            trusted: Some(true),
            ..CreateEnrollmentToken::default()
        })
        .send()
        .await?
        .json()
        .await?;
    let w = register(&http, &base, &token.token, "scale-0").await?;
    let worker = WorkerClient::new(&base, &w.token, http.clone());
    lease_and_post(&worker, args).await?;
    let claimed = super::phases::scrape(&http, std::slice::from_ref(&base), &admin_token).await?;
    for line in super::phases::report(&claimed) {
        println!("{line}");
    }
    read_latencies(&http, &base, &admin_token, campaign.id, args.requests).await?;
    let api = format!("{base}/api/v1");
    let id = campaign.id;
    let p: tmd_wire::CampaignProgress = http
        .get(format!("{api}/campaigns/{id}/progress"))
        .bearer_auth(&admin_token)
        .send()
        .await?
        .json()
        .await?;
    println!(
        "progress: {}/{} units done, {:.4}% of the work ({}), estimated left {:.0} s",
        p.done.units,
        p.total.units,
        p.percent_done,
        p.work.basis,
        p.work.estimated_seconds_left.unwrap_or(f64::NAN)
    );
    sizes(&pool).await?;
    server.shutdown().await?;
    Ok(())
}

/// `args.leases` leases claimed by one worker and their results posted in batches of 1000:
/// prints the claims' and the posts' latencies.
async fn lease_and_post(worker: &WorkerClient, args: &ScaleArgs) -> anyhow::Result<()> {
    // The first lease calibrates the worker (one unit); its result, posted as if computed in
    // a second, sets its speed, and the next leases hold about --lease-seconds of work.
    let (mut claims, mut posts, mut units) = (Vec::new(), Vec::new(), 0usize);
    for _ in 0..args.leases {
        let t = Instant::now();
        let Some(lease) = worker.lease(Some(args.lease_seconds)).await?.lease else {
            bail!("no lease");
        };
        claims.push(t.elapsed().as_secs_f64() * 1e3);
        units += lease.units.len();
        let results = empty_batch(&lease, 1.0 / 1024.0);
        let t = Instant::now();
        for chunk in results.chunks(1000) {
            worker.post_batch(chunk.to_vec()).await?;
        }
        posts.push(t.elapsed().as_secs_f64() * 1e3);
    }
    claims.sort_by(f64::total_cmp);
    posts.sort_by(f64::total_cmp);
    println!(
        "{} leases, {units} units: claim p50 {:.1} ms p99 {:.1} ms; posting a lease's results \
         p50 {:.1} ms p99 {:.1} ms",
        claims.len(),
        percentile(&claims, 0.5),
        percentile(&claims, 0.99),
        percentile(&posts, 0.5),
        percentile(&posts, 0.99)
    );
    Ok(())
}

/// The latency of `n` reads of each of the campaign's views (progress, all progress, coverage,
/// metrics), printed.
async fn read_latencies(
    http: &reqwest::Client,
    base: &str,
    admin_token: &str,
    id: i64,
    n: usize,
) -> anyhow::Result<()> {
    let api = format!("{base}/api/v1");
    measure(
        http,
        &format!("{api}/campaigns/{id}/progress"),
        admin_token,
        n,
        "progress",
    )
    .await?;
    measure(
        http,
        &format!("{api}/campaigns/progress"),
        admin_token,
        n,
        "all progress (dashboard)",
    )
    .await?;
    measure(
        http,
        &format!("{api}/campaigns/{id}/coverage"),
        admin_token,
        n,
        "coverage (first page)",
    )
    .await?;
    measure(http, &format!("{base}/metrics"), admin_token, n, "metrics").await?;
    Ok(())
}
