//! `tmd-server bench farm`: a GPU farm against real coordinator processes. It creates a
//! throwaway database, starts `--servers` `tmd-server serve` processes on it, creates a campaign
//! with enough units, registers `--gpus` simulated GPU workers (spread over the servers), each
//! leasing about `--lease-seconds` of work and "finishing" units at `--units-per-second`,
//! posting them every `--batch-seconds` through `POST /api/v1/results` over real HTTP. Results
//! carry no HR-cases (nothing for MPFR to verify: the figure is the coordinator's bookkeeping)
//! but a valid digest and statistics, so they pass the real checks. With `--compare-single` the
//! same farm then posts each unit alone for as long, for the ratio.
//!
//! Each GPU posts at its own phase of the batch period (uniform at random, as GPUs started at
//! independent moments); `--aligned` makes every GPU post at the same instant (the worst case:
//! every batch of a period arrives at once). Likewise each GPU's first full lease covers a
//! random share of `--lease-seconds` (a full one with `--aligned`), so that lease renewals come
//! at the steady rate of a farm that has run a while (one per GPU per lease period), not all
//! together after the window. Latencies are reported for the whole window, for
//! its first `--warmup-seconds` and for the steady state after them; the leases taken before the
//! window (each GPU's calibration and first full lease, all at once) are reported apart. As in
//! the worker daemon, a GPU asks for its next lease in the background and goes on posting.
//!
//! A GPU finishes its units one after the other, each in its own time: `1 / --units-per-second`,
//! or with `--unit-costs ESTIMATE.json` a time drawn per unit from a whole function's cost
//! estimate (`costs.rs`), scaled to the same mean; a GPU waiting for a lease banks no time.

use super::client::{self as bench, empty_result, register, BenchDatabase, Refused, WorkerClient};
use super::costs::UnitCosts;
use super::phases;
use anyhow::{bail, Context};
use clap::Args;
use sqlx::{Connection, PgConnection};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tmd_wire::{BatchedResult, CreateEnrollmentToken, EnrollmentToken};

/// `bench farm` options.
#[derive(Debug, Clone, Args)]
pub struct FarmArgs {
    #[command(flatten)]
    pub database: BenchDatabase,
    /// Simulated GPUs (one worker each).
    #[arg(long, default_value_t = 100)]
    pub gpus: usize,
    /// Units each GPU finishes per second (one H100: about 90 units of 2^40 arguments).
    #[arg(long, default_value_t = 90.0)]
    pub units_per_second: f64,
    /// Seconds between a GPU's batches.
    #[arg(long, default_value_t = 1.0)]
    pub batch_seconds: f64,
    /// Seconds of work each lease asks for (the daemon's default).
    #[arg(long, default_value_t = 30)]
    pub lease_seconds: u32,
    /// Seconds to measure (after every GPU has its first full lease).
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Coordinator processes on the one database; GPU i talks to server i mod N.
    #[arg(long, default_value_t = 1)]
    pub servers: usize,
    /// Database connections per server process.
    #[arg(long, default_value_t = 16)]
    pub max_connections: u32,
    /// Then run the same farm posting each unit alone, for as long.
    #[arg(long)]
    pub compare_single: bool,
    /// Every GPU posts its batch at the same instant of each period (the worst case) instead of
    /// at its own random phase.
    #[arg(long)]
    pub aligned: bool,
    /// The first seconds of the window, reported apart from the steady state after them.
    #[arg(long, default_value_t = 3.0)]
    pub warmup_seconds: f64,
    /// The coordinator binary to start (default: this one). Another build's `tmd-server`
    /// measures that build's coordinator under this bench's farm, for an A/B in one session.
    #[arg(long, value_name = "PATH")]
    pub server_exe: Option<std::path::PathBuf>,
    /// The campaign has at least this many units (whole binades of 2^20 units of 2^32
    /// arguments, up to 1,000 binades), however few the window needs: the farm against a
    /// campaign of a binary80 binade's size. Creating ten million units takes minutes.
    #[arg(long, default_value_t = 0)]
    pub units: u64,
    /// Also print, for each second of the window, the result posts' count, p50, p99 and max
    /// latency and the lease requests sent in it: where in the window a tail comes from.
    #[arg(long)]
    pub timeline: bool,
    /// Draw each unit's time from this whole-function cost estimate (`tmd-worker estimate
    /// --output json`): the arguments' share of each binade that costs time, its cost relative
    /// to the mean, scaled so that a GPU still finishes `--units-per-second` on average.
    #[arg(long, value_name = "ESTIMATE.json")]
    pub unit_costs: Option<std::path::PathBuf>,
    /// The coordinators' `--claim-lanes` (default: theirs): with 1, the campaign's claims take
    /// one turn each, as before lanes.
    #[arg(long, value_name = "N")]
    pub claim_lanes: Option<u32>,
    /// The coordinators' `--defer-marking-min` (default: theirs); 0: every claim marks its
    /// own units.
    #[arg(long, value_name = "UNITS")]
    pub defer_marking_min: Option<u32>,
}

/// A unit in a GPU's hands: lease, fencing token, unit, the seconds it takes.
type Held = (i64, i64, i64, f64);

/// Latencies per route: (seconds since the window's start when sent, seconds), and the lease
/// requests made before the window (start-up: calibration and first full leases).
#[derive(Default)]
struct Tally {
    startup_lease: Vec<f64>,
    lease: Vec<(f64, f64)>,
    results: Vec<(f64, f64)>,
    single: Vec<(f64, f64)>,
    /// Requests refused with 503 or 429 and asked again, as the daemon does.
    retried: u64,
}

/// The `p` quantile of `v`, sorted here.
fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    bench::percentile(v, p)
}

/// CPU seconds (user + system) a process used so far, from `/proc`.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|u| u.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// The PostgreSQL processes that work for the bench's database: its backends and autovacuum
/// workers, and the instance's shared background processes (WAL writer, checkpointer, ...),
/// but not other databases' backends: on a machine shared with other users of the same
/// PostgreSQL the CPU figure is this bench's alone. (The database must be on this host for
/// `/proc` to see them; otherwise the figure is 0.)
async fn db_pids(db: &mut PgConnection) -> anyhow::Result<Vec<u32>> {
    let pids: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity \
         WHERE datname = current_database() OR datname IS NULL",
    )
    .fetch_all(&mut *db)
    .await?;
    Ok(pids.into_iter().map(|p| p as u32).collect())
}

/// The instance's WAL so far: records, full-page images, bytes (the whole instance).
async fn wal_totals(db: &mut PgConnection) -> anyhow::Result<(i64, i64, f64)> {
    Ok(
        sqlx::query_as("SELECT wal_records, wal_fpi, wal_bytes::float8 FROM pg_stat_wal")
            .fetch_one(&mut *db)
            .await?,
    )
}

/// The bench database's size on disk, in bytes.
pub(crate) async fn database_bytes<'e, E: sqlx::PgExecutor<'e>>(db: E) -> anyhow::Result<f64> {
    let b: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(db)
        .await?;
    Ok(b as f64)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Runs the farm bench and prints its figures.
pub async fn run(args: &FarmArgs) -> anyhow::Result<()> {
    if args.gpus == 0 || args.servers == 0 || args.duration == 0 {
        bail!("--gpus, --servers and --duration must be at least 1");
    }
    if !(args.units_per_second > 0.0 && args.batch_seconds > 0.0) {
        bail!("--units-per-second and --batch-seconds must be positive");
    }
    let mean = 1.0 / args.units_per_second;
    let costs = Arc::new(match &args.unit_costs {
        Some(path) => UnitCosts::from_estimate_file(path, mean)?,
        None => UnitCosts::Constant(mean),
    });
    eprintln!("farm: unit times {}", costs.describe());
    let costs = &costs;
    let database_url = &args.database.database_url;
    bench::with_bench_database(database_url, "tmd_farm", |name| async move {
        let mut url = reqwest::Url::parse(database_url)?;
        url.set_path(&format!("/{name}"));
        let mut children = Vec::new();
        let outcome = run_on(args, costs, url.as_str(), &mut children).await;
        // The servers hold connections to the database: they end before it is dropped.
        for c in &mut children {
            let _ = c.kill().await;
        }
        outcome
    })
    .await
}

async fn run_on(
    args: &FarmArgs,
    costs: &Arc<UnitCosts>,
    db_url: &str,
    children: &mut Vec<tokio::process::Child>,
) -> anyhow::Result<()> {
    let admin_token = crate::request::auth::new_token("bench_");
    let exe = match &args.server_exe {
        Some(path) => path.clone(),
        None => std::env::current_exe()?,
    };
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.gpus + 8)
        .timeout(Duration::from_secs(120))
        .build()?;
    let mut bases = Vec::new();
    for i in 0..args.servers {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut serve = tokio::process::Command::new(&exe);
        serve
            .args(["--log", "warn", "serve", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["--database-url", db_url, "--max-connections"])
            .arg(args.max_connections.to_string())
            .args(["--rate-limit-per-second", "0", "--max-units-per-campaign"])
            .arg("1100000000")
            // Creating millions of units outlasts the default request deadline.
            .args(["--request-timeout-seconds", "1800"])
            .env("TMD_ADMIN_TOKEN", &admin_token)
            .kill_on_drop(true);
        if let Some(lanes) = args.claim_lanes {
            serve.args(["--claim-lanes", &lanes.to_string()]);
        }
        if let Some(min) = args.defer_marking_min {
            serve.args(["--defer-marking-min", &min.to_string()]);
        }
        let child = serve.spawn().context("cannot start tmd-server serve")?;
        children.push(child);
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        // The first applies the migrations; the others wait on sqlx's migration lock.
        loop {
            if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
                if r.status().is_success() {
                    break;
                }
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!("server {i} did not become ready");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bases.push(base);
    }
    // Enough units for every GPU's first lease and the measured window, twice over when the
    // single posts run too; units of 2^32 arguments of log in binary64 (the simulated GPUs
    // report their own speed, so the unit size does not matter to the coordinator).
    let phases = if args.compare_single { 2.0 } else { 1.0 };
    let per_gpu = args.units_per_second
        * (f64::from(args.lease_seconds) + phases * args.duration as f64 + 10.0);
    let units = ((args.gpus as f64 * per_gpu * 1.1) as u64 + 1000).max(args.units);
    let binades = units.div_ceil(1 << 20).max(1);
    if binades > 1000 {
        bail!("{units} units needed: at most 1,000 binades of 2^20 units; fewer --units, --gpus or --duration");
    }
    let t = Instant::now();
    // The farm is the operator's own GPUs: one result settles a unit. A coordinator older than
    // trust by default (`--server-exe`, for comparisons) knows no such field and settled on one
    // result anyway: it is asked again without it.
    let mut request = bench::bench_campaign("farm", binades);
    let mut resp = http
        .post(format!("{}/api/v1/campaigns", bases[0]))
        .bearer_auth(&admin_token)
        .timeout(Duration::from_secs(1800))
        .json(&request)
        .send()
        .await?;
    if resp.status() == reqwest::StatusCode::BAD_REQUEST {
        let text = resp.text().await?;
        if !text.contains("trust_all_workers") {
            bail!("campaign: {text}");
        }
        request.trust_all_workers = None;
        resp = http
            .post(format!("{}/api/v1/campaigns", bases[0]))
            .bearer_auth(&admin_token)
            .timeout(Duration::from_secs(1800))
            .json(&request)
            .send()
            .await?;
    }
    if !resp.status().is_success() {
        bail!("campaign: {}", resp.text().await?);
    }
    let campaign: tmd_wire::Campaign = resp.json().await?;
    let mut db = PgConnection::connect(db_url).await?;
    let created = database_bytes(&mut db).await?;
    eprintln!(
        "farm: campaign of {} units created in {:.1} s; database {:.1} MiB ({:.1} MiB per million units)",
        campaign.units_total,
        t.elapsed().as_secs_f64(),
        created / 1048576.0,
        created / 1048576.0 / (campaign.units_total as f64 / 1e6),
    );
    let token: EnrollmentToken = http
        .post(format!("{}/api/v1/enrollment-tokens", bases[0]))
        .bearer_auth(&admin_token)
        .json(&CreateEnrollmentToken {
            uses: Some(args.gpus as u32),
            ..CreateEnrollmentToken::default()
        })
        .send()
        .await?
        .json()
        .await?;
    let mut gpus = Vec::new();
    for i in 0..args.gpus {
        let base = &bases[i % bases.len()];
        let w = register(&http, base, &token.token, &format!("gpu-{i}")).await?;
        gpus.push(WorkerClient::new(base, &w.token, http.clone()));
    }
    for single in [false, true] {
        if single && !args.compare_single {
            break;
        }
        let metrics = (&http, &bases[..], admin_token.as_str());
        phase(args, costs, &gpus, single, &children[..], metrics, &mut db).await?;
    }
    Ok(())
}

/// One measured run of every GPU: batches, or single posts.
async fn phase(
    args: &FarmArgs,
    costs: &Arc<UnitCosts>,
    gpus: &[WorkerClient],
    single: bool,
    servers: &[tokio::process::Child],
    (http, bases, admin_token): (&reqwest::Client, &[String], &str),
    db: &mut PgConnection,
) -> anyhow::Result<()> {
    let ready = Arc::new(tokio::sync::Barrier::new(gpus.len() + 1));
    let go = Arc::new(tokio::sync::Notify::new());
    let start_at = Arc::new(std::sync::OnceLock::<Instant>::new());
    let posted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for g in gpus.iter().cloned() {
        let (ready, go, start_at, posted) =
            (ready.clone(), go.clone(), start_at.clone(), posted.clone());
        let (args, costs) = (args.clone(), costs.clone());
        tasks.push(tokio::spawn(async move {
            gpu(g, args, costs, single, ready, go, start_at, posted).await
        }));
    }
    ready.wait().await;
    let pids: Vec<u32> = servers.iter().filter_map(|c| c.id()).collect();
    let cpu0: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let pg_pids0 = db_pids(db).await?;
    let pg0: Vec<(u32, f64)> = pg_pids0.iter().map(|&p| (p, cpu_seconds(p))).collect();
    let wal0 = wal_totals(db).await?;
    let db_bytes0 = database_bytes(&mut *db).await?;
    let me0 = cpu_seconds(std::process::id());
    let load0 = loadavg();
    let phases0 = phases::scrape(http, bases, admin_token).await?;
    let started = Instant::now();
    let _ = start_at.set(started);
    go.notify_waiters();
    let mut tally = Tally::default();
    let mut failures = 0u64;
    let (mut gpus_failed, mut first_error) = (0usize, None);
    for t in tasks {
        let (mine, f, stopped) = match t.await? {
            Ok(done) => done,
            Err(e) => (Tally::default(), 0, Some(format!("{e:#}"))),
        };
        if let Some(e) = stopped {
            gpus_failed += 1;
            first_error.get_or_insert(e);
        }
        tally.startup_lease.extend(mine.startup_lease);
        tally.lease.extend(mine.lease);
        tally.results.extend(mine.results);
        tally.single.extend(mine.single);
        tally.retried += mine.retried;
        failures += f;
    }
    let wall = started.elapsed().as_secs_f64();
    let units = posted.load(Ordering::Relaxed);
    let claim_phases = phases::since(&phases::scrape(http, bases, admin_token).await?, &phases0);
    let server_cpu: f64 = pids
        .iter()
        .zip(&cpu0)
        .map(|(p, c)| cpu_seconds(*p) - c)
        .sum();
    // Processes that started during the run (pool connections) count from zero.
    let pg_cpu: f64 = db_pids(db)
        .await?
        .iter()
        .map(|&p| {
            let before = pg0.iter().find(|(q, _)| *q == p).map_or(0.0, |(_, c)| *c);
            cpu_seconds(p) - before
        })
        .sum();
    let wal1 = wal_totals(db).await?;
    let db_bytes1 = database_bytes(&mut *db).await?;
    let me_cpu = cpu_seconds(std::process::id()) - me0;
    let rate = units as f64 / wall;
    let offered = gpus.len() as f64 * args.units_per_second;
    outln!(
        "mode={} phases={} servers={} gpus={} units_per_second_per_gpu={} batch_seconds={} \
         wall_s={wall:.1} unit_results={units} unit_results_per_s={rate:.0} offered_per_s={offered:.0} \
         refused_or_failed={failures}",
        if single { "single" } else { "batch" },
        if args.aligned || single { "aligned" } else { "random" },
        args.servers,
        gpus.len(),
        args.units_per_second,
        args.batch_seconds,
    )?;
    outln!(
        "  requests refused with 503 or 429 and asked again: {}; GPUs that stopped on an error: {gpus_failed}{}",
        tally.retried,
        first_error.map_or(String::new(), |e| format!(" (the first: {e})")),
    )?;
    if !tally.startup_lease.is_empty() {
        let v = &mut tally.startup_lease;
        outln!(
            "  start-up (before the window) POST /api/v1/leases: requests={} p50_ms={:.1} p99_ms={:.1} max_ms={:.1}",
            v.len(),
            percentile(v, 0.5) * 1e3,
            percentile(v, 0.99) * 1e3,
            percentile(v, 1.0) * 1e3
        )?;
    }
    let warm = args.warmup_seconds;
    for (route, v) in [
        ("POST /api/v1/leases", &tally.lease),
        ("POST /api/v1/results", &tally.results),
        (
            "POST /api/v1/leases/{lease_id}/units/{unit_id}/result",
            &tally.single,
        ),
    ] {
        if v.is_empty() {
            continue;
        }
        for (part, keep) in [
            ("window", &(|_: f64| true) as &dyn Fn(f64) -> bool),
            ("first_s", &|t: f64| t < warm),
            ("steady", &|t: f64| t >= warm),
        ] {
            let mut lat: Vec<f64> = v
                .iter()
                .filter(|(t, _)| keep(*t))
                .map(|(_, l)| *l)
                .collect();
            if lat.is_empty() {
                continue;
            }
            let n = lat.len();
            let label = match part {
                "first_s" => format!("first {warm} s"),
                "steady" => format!("steady (after {warm} s)"),
                _ => "whole window".to_string(),
            };
            outln!(
                "  {route} [{label}]: requests={n} p50_ms={:.1} p90_ms={:.1} p99_ms={:.1} max_ms={:.1}",
                percentile(&mut lat, 0.5) * 1e3,
                percentile(&mut lat, 0.9) * 1e3,
                percentile(&mut lat, 0.99) * 1e3,
                percentile(&mut lat, 1.0) * 1e3
            )?;
        }
    }
    // The coordinators' own account of the window's claims (whole window, start-up excluded).
    for line in phases::report(&claim_phases) {
        outln!("  {line}")?;
    }
    if args.timeline {
        timeline(&tally)?;
    }
    outln!(
        "  cpu_s: servers={server_cpu:.1} postgres={pg_cpu:.1} bench_client={me_cpu:.1} \
         (over {wall:.1} s on {} cores); load before: {load0}; after: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    )?;
    let per_unit = |x: f64| x / (units.max(1) as f64);
    outln!(
        "  per_unit_result: postgres_cpu_ms={:.3} server_cpu_ms={:.3} wal_records={:.1} \
         wal_fpi={:.2} wal_bytes={:.0} (WAL: the whole instance)",
        per_unit(pg_cpu) * 1e3,
        per_unit(server_cpu) * 1e3,
        per_unit((wal1.0 - wal0.0) as f64),
        per_unit((wal1.1 - wal0.1) as f64),
        per_unit(wal1.2 - wal0.2),
    )?;
    outln!(
        "  database: {:.1} MiB after the window, grew {:.1} MiB ({:.0} MiB per million unit results)",
        db_bytes1 / 1048576.0,
        (db_bytes1 - db_bytes0) / 1048576.0,
        per_unit(db_bytes1 - db_bytes0) * 1e6 / 1048576.0,
    )?;
    outln!(
        "  gpus_served_per_coordinator={:.0} (unit results/s per server / units/s per GPU)",
        rate / args.servers as f64 / args.units_per_second
    )?;
    Ok(())
}

/// Per second of the window: result posts sent in it (count, p50, p99, max latency) and lease
/// requests sent in it (count, max latency).
fn timeline(tally: &Tally) -> anyhow::Result<()> {
    let last = tally
        .results
        .iter()
        .chain(&tally.lease)
        .map(|(t, _)| *t as usize)
        .max()
        .unwrap_or(0);
    for s in 0..=last {
        let in_second = |v: &[(f64, f64)]| -> Vec<f64> {
            v.iter()
                .filter(|(t, _)| *t as usize == s)
                .map(|(_, l)| *l)
                .collect()
        };
        let mut posts = in_second(&tally.results);
        let mut leases = in_second(&tally.lease);
        outln!(
            "  timeline s={s} result_posts={} p50_ms={:.1} p99_ms={:.1} max_ms={:.1} \
             lease_requests={} lease_max_ms={:.1}",
            posts.len(),
            percentile(&mut posts, 0.5) * 1e3,
            percentile(&mut posts, 0.99) * 1e3,
            percentile(&mut posts, 1.0) * 1e3,
            leases.len(),
            percentile(&mut leases, 1.0) * 1e3,
        )?;
    }
    Ok(())
}

/// One simulated GPU: its first lease (one unit, which measures its speed), its full lease,
/// then units finished each in its time and posted in batches (or one by one) until the end.
/// With why it could not start, if it could not.
#[allow(clippy::too_many_arguments)]
async fn gpu(
    g: WorkerClient,
    args: FarmArgs,
    costs: Arc<UnitCosts>,
    single: bool,
    ready: Arc<tokio::sync::Barrier>,
    go: Arc<tokio::sync::Notify>,
    start_at: Arc<std::sync::OnceLock<Instant>>,
    posted: Arc<AtomicU64>,
) -> anyhow::Result<(Tally, u64, Option<String>)> {
    let per_unit = 1.0 / args.units_per_second;
    let mut tally = Tally::default();
    let mut failures = 0;
    let notified = go.notified();
    let first = first_leases(&g, &args, &costs, single, &mut tally).await;
    // A GPU that could not start still reaches the barrier: the others must not wait on it.
    ready.wait().await;
    let mut queue = match first {
        Ok(queue) => queue,
        // Its refusals asked again still count.
        Err(e) => {
            return Ok((
                tally,
                failures,
                Some(format!("a GPU's first leases: {e:#}")),
            ))
        }
    };
    notified.await;
    let start = *start_at.get().expect("the start is set before the signal");
    let deadline = start + Duration::from_secs(args.duration);
    // The simulated time this GPU's finished units took, from the window's start.
    let mut clock = 0.0f64;
    // This GPU's phase in the batch period: its batches are due at phase + k * period.
    let phase = if args.aligned || single {
        0.0
    } else {
        rand::random::<f64>() * args.batch_seconds
    };
    if phase > 0.0 {
        tokio::time::sleep_until((start + Duration::from_secs_f64(phase)).into()).await;
    }
    // The next lease is asked for in the background, as the daemon does (its poster does not
    // wait on its lease requests): a slow claim idles the GPU only once its queue runs dry.
    let mut next_lease: Option<tokio::task::JoinHandle<anyhow::Result<LeaseTaken>>> = None;
    while Instant::now() < deadline {
        let now = start.elapsed().as_secs_f64();
        if queue.is_empty() {
            // Waiting for a lease is idle time, not banked work.
            clock = clock.max(now);
        }
        let mut n = 0usize;
        let mut until = clock;
        for &(.., seconds) in queue.iter().take(1000) {
            if until + seconds > now {
                break;
            }
            until += seconds;
            n += 1;
        }
        // Ask for the next lease while a tenth of a lease's work is left.
        let low =
            (queue.len() as f64) < args.units_per_second * f64::from(args.lease_seconds) * 0.1;
        if next_lease.is_none() && low {
            let (g, seconds) = (g.clone(), args.lease_seconds);
            next_lease = Some(tokio::spawn(
                async move { lease_rec(&g, seconds, start).await },
            ));
        }
        // A GPU with an empty queue waits here (n is 0) until its lease request answers.
        if let Some(h) = next_lease.take_if(|h| h.is_finished()) {
            let (sent, latency, lease) = h.await??;
            tally.lease.push((sent, latency));
            if lease.is_none() && queue.is_empty() {
                bail!("a GPU ran out of leased units");
            }
            for (l, u) in lease
                .iter()
                .flat_map(|l| l.units.iter().map(move |u| (l, u)))
            {
                let seconds = costs.seconds(u.unit_id);
                queue.push_back((l.lease_id, l.fencing_token, u.unit_id, seconds));
            }
        }
        if n == 0 {
            let wait = if single { per_unit } else { args.batch_seconds };
            tokio::time::sleep(Duration::from_secs_f64(wait.clamp(0.001, 0.05))).await;
            continue;
        }
        let take: Vec<Held> = (0..n).filter_map(|_| queue.pop_front()).collect();
        clock = until;
        if single {
            for (l, f, u, elapsed) in &take {
                let t0 = Instant::now();
                match g.post(*l, *u, &empty_result(*f, *u, *elapsed)).await {
                    Ok(_) => {
                        posted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) if e.downcast_ref::<Refused>().is_some() => failures += 1,
                    Err(e) => return Err(e),
                }
                tally.single.push((
                    t0.duration_since(start).as_secs_f64(),
                    t0.elapsed().as_secs_f64(),
                ));
                if Instant::now() >= deadline {
                    break;
                }
            }
        } else {
            let batch: Vec<BatchedResult> = take
                .iter()
                .map(|(l, f, u, elapsed)| BatchedResult {
                    lease_id: *l,
                    unit_id: *u,
                    result: empty_result(*f, *u, *elapsed),
                })
                .collect();
            let t0 = Instant::now();
            let out = g.post_batch(batch).await?;
            tally.results.push((
                t0.duration_since(start).as_secs_f64(),
                t0.elapsed().as_secs_f64(),
            ));
            let ok = out
                .outcomes
                .iter()
                .filter(|o| o.status == tmd_wire::UnitOutcomeStatus::Accepted)
                .count() as u64;
            posted.fetch_add(ok, Ordering::Relaxed);
            failures += out.outcomes.len() as u64 - ok;
            // The next instant of this GPU's phase.
            let since = start.elapsed().as_secs_f64() - phase;
            let next = start
                + Duration::from_secs_f64(
                    phase
                        + ((since / args.batch_seconds).floor() + 1.0).max(0.0)
                            * args.batch_seconds,
                );
            tokio::time::sleep_until(next.min(deadline).into()).await;
        }
    }
    // A lease still on its way is not waited for: the window is over.
    if let Some(h) = next_lease {
        h.abort();
    }
    Ok((tally, failures, None))
}

/// A GPU's first leases: one unit that measures its speed (posted after the time a unit
/// takes), then its first full lease; the units in hand, in order.
async fn first_leases(
    g: &WorkerClient,
    args: &FarmArgs,
    costs: &UnitCosts,
    single: bool,
    tally: &mut Tally,
) -> anyhow::Result<std::collections::VecDeque<Held>> {
    // Calibration: one unit, posted after the time a unit takes.
    let mut queue: std::collections::VecDeque<Held> = Default::default();
    // The first full lease covers a random share of a lease's work (unless `--aligned`): GPUs
    // of a farm that has run a while renew their leases at independent moments, about one
    // renewal per lease period each, so the window sees that steady rate of claims. Full
    // first leases would all run out together, after the window.
    let first_seconds = if args.aligned || single {
        args.lease_seconds
    } else {
        ((f64::from(args.lease_seconds) * rand::random::<f64>()).ceil() as u32).max(1)
    };
    loop {
        let t0 = Instant::now();
        let lease = retrying(&mut tally.retried, || g.lease(Some(first_seconds)))
            .await?
            .lease;
        tally.startup_lease.push(t0.elapsed().as_secs_f64());
        let Some(lease) = lease else {
            bail!("no work for a GPU: the campaign is too small");
        };
        let calibrating = lease.units.len() == 1 && queue.is_empty();
        for u in &lease.units {
            let seconds = costs.seconds(u.unit_id);
            queue.push_back((lease.lease_id, lease.fencing_token, u.unit_id, seconds));
        }
        if !calibrating || queue.len() > 1 {
            break;
        }
        let (l, f, u, seconds) = queue.pop_front().expect("one unit");
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        retrying(&mut tally.retried, || {
            g.post_batch(vec![BatchedResult {
                lease_id: l,
                unit_id: u,
                result: empty_result(f, u, seconds),
            }])
        })
        .await?;
    }
    Ok(queue)
}

/// Runs `call` until it is not refused with 503 (the coordinator busy or its database
/// away) or 429, waiting as the daemon does (a second, doubling to 16, with jitter), at most
/// ten times; counts the refusals in `retried`.
async fn retrying<T, F, Fut>(retried: &mut u64, mut call: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut wait = 1.0f64;
    for _ in 0..10 {
        match call().await {
            Err(e)
                if e.downcast_ref::<Refused>()
                    .is_some_and(|r| matches!(r.status, 429 | 503)) =>
            {
                *retried += 1;
                let jitter = 0.5 + rand::random::<f64>();
                tokio::time::sleep(Duration::from_secs_f64(wait * jitter)).await;
                wait = (wait * 2.0).min(16.0);
            }
            other => return other,
        }
    }
    call().await
}

/// A lease request: when it was sent (seconds since the window's start), its latency, the lease.
type LeaseTaken = (f64, f64, Option<tmd_wire::Lease>);

/// Asks for a lease, with when it was sent and its latency.
async fn lease_rec(g: &WorkerClient, seconds: u32, start: Instant) -> anyhow::Result<LeaseTaken> {
    let t0 = Instant::now();
    let r = g.lease(Some(seconds)).await;
    Ok((
        t0.duration_since(start).as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        r?.lease,
    ))
}
