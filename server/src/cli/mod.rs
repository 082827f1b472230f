//! The command line: `serve`, `migrate`, the admin commands (`campaign`, `token`), which talk
//! to a running server over its HTTP API with the admin token, and `bench`.

mod admin;
pub mod follow;

pub use admin::*;

use crate::domain::LeasePolicy;
use crate::Config;
use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::net::SocketAddr;
use std::time::Duration;
use tmd_wire::{
    ApiError, ArgRange, Campaign, CampaignPlan, CampaignProgress, CreateCampaign,
    CreateEnrollmentToken, EnrollmentToken, EnrollmentTokenInfo, KnownCasesLoaded, LoadKnownCases,
    PlanCampaign, QuarantineWorker, RequeueUnits, Requeued, WorkerInfo,
};

/// `--version`: the release and the engine version whose workers it serves by default.
static VERSION: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| tmd_kernels::version_line(env!("CARGO_PKG_VERSION")));

/// tmd-server: the coordinator of tmd (campaigns, leases, results in PostgreSQL).
#[derive(Debug, Parser)]
#[command(name = "tmd-server", version = VERSION.as_str(), about)]
pub struct Cli {
    /// Log filter (tracing-subscriber syntax), e.g. `info` or `tmd_server=debug`.
    #[arg(long, env = "TMD_LOG", default_value = "info", global = true)]
    pub log: String,
    /// Log lines as text for people, or as one JSON object per line for a log collector.
    #[arg(
        long,
        env = "TMD_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text,
        global = true
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text per event (colours only on a terminal).
    Text,
    /// One JSON object per event (timestamp, level, target, fields).
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Applies migrations and serves the API until SIGINT/SIGTERM.
    Serve(ServeArgs),
    /// Applies pending migrations and exits.
    Migrate(DbArgs),
    /// Manages campaigns through a running server (admin token needed).
    Campaign {
        #[command(flatten)]
        api: ApiArgs,
        #[command(subcommand)]
        command: CampaignCommand,
    },
    /// Manages enrollment tokens through a running server (admin token needed).
    Token {
        #[command(flatten)]
        api: ApiArgs,
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Lists workers with their records; quarantines or reinstates one (admin token needed).
    Worker {
        #[command(flatten)]
        api: ApiArgs,
        #[command(subcommand)]
        command: WorkerCommand,
    },
    /// Prints the OpenAPI document (the one served at /api/openapi.json).
    Openapi,
    /// Load benchmark: starts a server on a fresh database and runs simulated workers.
    Bench(crate::bench::BenchArgs),
}

/// Where the database is.
#[derive(Debug, Clone, Args)]
pub struct DbArgs {
    /// PostgreSQL URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Most connections in the pool.
    #[arg(long, env = "TMD_DB_MAX_CONNECTIONS", default_value_t = 32)]
    pub max_connections: u32,
    /// Seconds a request waits for a database connection before it is answered 503 (with
    /// Retry-After): while PostgreSQL is down, how long each request hangs first.
    #[arg(long, env = "TMD_DB_ACQUIRE_TIMEOUT_SECONDS", default_value_t = 5.0)]
    pub db_acquire_timeout_seconds: f64,
}

impl DbArgs {
    /// Connects a pool, after one connection of its own: a pool that cannot connect says only
    /// that it timed out, one connection says why (refused, unknown host, password).
    pub async fn connect(&self) -> anyhow::Result<sqlx::PgPool> {
        use sqlx::Connection;
        let t = self.db_acquire_timeout_seconds;
        if !(t.is_finite() && (0.1..=600.0).contains(&t)) {
            bail!("--db-acquire-timeout-seconds must be between 0.1 and 600");
        }
        let options = crate::store::session_options(postgres_options(&self.database_url)?);
        let place = format!(
            "PostgreSQL at {}:{} (database {})",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("named after the user")
        );
        let advice = "is it running there, and are DATABASE_URL's host, port, user, password \
                      and database right?";
        let wait = Duration::from_secs_f64(t.max(5.0));
        match tokio::time::timeout(wait, sqlx::PgConnection::connect_with(&options)).await {
            Ok(Ok(c)) => {
                let _ = c.close().await;
            }
            Ok(Err(e)) => {
                return Err(anyhow::Error::new(e))
                    .with_context(|| format!("cannot connect to {place}: {advice}"))
            }
            Err(_) => bail!(
                "cannot connect to {place}: no answer in {} s; {advice}",
                wait.as_secs()
            ),
        }
        sqlx::postgres::PgPoolOptions::new()
            // A failed connection shows on use anyway; a ping per acquire costs a round trip.
            .test_before_acquire(false)
            .max_connections(self.max_connections)
            .acquire_timeout(Duration::from_secs_f64(t))
            .connect_with(options)
            .await
            .with_context(|| format!("cannot connect to {place}"))
    }
}

/// The connection options of a PostgreSQL URL; anything else (another database's URL, a
/// path, a typo) refused with what is expected.
pub fn postgres_options(url: &str) -> anyhow::Result<sqlx::postgres::PgConnectOptions> {
    const EXPECTED: &str = "postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE";
    match url.split_once("://") {
        Some(("postgres" | "postgresql", _)) => {}
        Some((scheme, _)) => bail!(
            "DATABASE_URL is a {scheme}:// URL: tmd-server keeps its data in PostgreSQL \
             ({EXPECTED})"
        ),
        None => bail!("DATABASE_URL is not a URL: expected {EXPECTED}"),
    }
    url.parse()
        .with_context(|| format!("DATABASE_URL is not a valid PostgreSQL URL ({EXPECTED})"))
}

/// `serve` options; each has an environment variable and a default.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Address to listen on.
    #[arg(long, env = "TMD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Admin token; admin routes are refused without one. Prefer the environment or
    /// --admin-token-file: a command line shows in `ps`.
    #[arg(long, env = "TMD_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// A file holding the admin token (its first line).
    #[arg(long, env = "TMD_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<std::path::PathBuf>,
    /// A token that may read `/metrics` and nothing else (for Prometheus); the admin token
    /// may read it too. Without either, `/metrics` is refused.
    #[arg(long, env = "TMD_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, env = "TMD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, env = "TMD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Seconds a request may take until its response starts (its body read included).
    #[arg(long, env = "TMD_REQUEST_TIMEOUT_SECONDS", default_value_t = 120)]
    pub request_timeout_seconds: u64,
    /// Seconds a client has to send a request's headers (and an idle connection lives).
    #[arg(long, env = "TMD_HEADER_TIMEOUT_SECONDS", default_value_t = 10)]
    pub header_timeout_seconds: u64,
    /// Requests per second allowed per client address, on average (0: no limit). Loopback
    /// clients are not limited: a reverse proxy on the same machine should limit them.
    #[arg(long, env = "TMD_RATE_LIMIT_PER_SECOND", default_value_t = 50.0)]
    pub rate_limit_per_second: f64,
    /// Requests allowed at once per client address after a quiet period.
    #[arg(long, env = "TMD_RATE_LIMIT_BURST", default_value_t = 200.0)]
    pub rate_limit_burst: f64,
    /// Results verified with MPFR at once [default: the number of cores].
    #[arg(long, env = "TMD_VERIFY_CONCURRENCY")]
    pub verify_concurrency: Option<usize>,
    /// Background tasks that derive the cases of campaigns with a reduction (exp2, cbrt, sqrt,
    /// rsqrt, log2) from their base units' accepted results, each judged again by MPFR; a result
    /// post only queues them. 0: this process derives nothing (another coordinator on the same
    /// database does; such campaigns stay incomplete until one does). [default: half the
    /// cores, at least 2 and at most 8: each task's inserts keep a PostgreSQL backend busy,
    /// and past 8 they mostly wait on each other]
    #[arg(long, env = "TMD_DERIVE_TASKS")]
    pub derive_tasks: Option<usize>,
    /// Most seconds of MPFR verification the posts of one worker for one unit may cost, all
    /// its posts of that unit together (a post that times out is charged too). Past it the
    /// post is refused with `verification_budget`, which counts against the worker. An honest
    /// engine's unit costs milliseconds to a few seconds.
    #[arg(long, env = "TMD_VERIFY_SECONDS_PER_UNIT", default_value_t = 60.0)]
    pub verify_seconds_per_unit: f64,
    /// Most seconds of verification the posts of one worker under one lease may cost.
    #[arg(long, env = "TMD_VERIFY_SECONDS_PER_LEASE", default_value_t = 600.0)]
    pub verify_seconds_per_lease: f64,
    /// Most seconds of verification one worker's posts may cost per hour; past it its posts
    /// wait (`retry`, no penalty): one worker cannot take the coordinator's cores.
    #[arg(
        long,
        env = "TMD_VERIFY_SECONDS_PER_WORKER_HOUR",
        default_value_t = 3600.0
    )]
    pub verify_seconds_per_worker_hour: f64,
    /// Quarantine a worker once this many of its posts ran out of their unit's or lease's
    /// verification budget.
    #[arg(long, env = "TMD_MAX_VERIFY_OVERRUNS", default_value_t = 3)]
    pub max_verify_overruns: u32,
    /// Most HR-cases plus exact cases in one result; campaigns whose units would expect more
    /// than half of it are refused.
    #[arg(long, env = "TMD_MAX_CASES_PER_RESULT", default_value_t = 10_000)]
    pub max_cases_per_result: usize,
    /// Quarantined workers after which an enrollment token registers no more workers.
    #[arg(long, env = "TMD_MAX_QUARANTINED_PER_TOKEN", default_value_t = 2)]
    pub max_quarantined_per_token: u32,
    /// Lifetime of a lease and of each heartbeat's extension, in seconds.
    #[arg(long, env = "TMD_LEASE_TTL_SECONDS", default_value_t = 300)]
    pub lease_ttl_seconds: u32,
    /// Seconds of work leased when a worker does not say: a lease holds about this much work
    /// at the worker's measured speed (one unit until its first result measures it).
    #[arg(long, env = "TMD_DEFAULT_LEASE_SECONDS", default_value_t = 60)]
    pub default_lease_seconds: u32,
    /// Most units in one lease, whatever the worker's speed (one H100 finishes about 5,400
    /// units of 2^40 arguments in a minute).
    #[arg(long, env = "TMD_MAX_UNITS_PER_LEASE", default_value_t = 20_000)]
    pub max_units_per_lease: u32,
    /// Failures or expiries after which a unit is quarantined (a worker's failure reports
    /// count once per unit).
    #[arg(long, env = "TMD_MAX_ATTEMPTS", default_value_t = 5)]
    pub max_attempts: u32,
    /// Longest life of a lease in seconds, heartbeats included.
    #[arg(long, env = "TMD_MAX_LEASE_SECONDS", default_value_t = 21_600)]
    pub max_lease_seconds: u32,
    /// Most units a worker not yet measured (no result recorded) may hold in its active
    /// leases together; each of its leases holds one unit.
    #[arg(long, env = "TMD_MAX_UNITS_PER_WORKER", default_value_t = 128)]
    pub max_units_per_worker: u32,
    /// Most work a measured worker may hold in its active leases together, in seconds at its
    /// measured speed: the lease it computes and the next one it asks for early, not a hoard.
    /// Always at least one unit when it holds nothing.
    #[arg(long, env = "TMD_MAX_HELD_SECONDS_PER_WORKER", default_value_t = 600)]
    pub max_held_seconds_per_worker: u32,
    /// Largest share of a campaign's units (in (0, 1]) that the untrusted workers of one
    /// enrollment token, or of one owner, may hold in their active leases together (at least
    /// one unit). Workers of trusted tokens are exempt.
    #[arg(long, env = "TMD_MAX_OWNER_SHARE", default_value_t = 0.25)]
    pub max_owner_share: f64,
    /// Largest share (in (0, 1]) of a campaign's pending units that one lease takes, never
    /// fewer than 32 units: a worker that looks fast on cheap units cannot take most of a
    /// campaign at once, and the last units go out in small leases.
    #[arg(long, env = "TMD_MAX_LEASE_PENDING_SHARE", default_value_t = 0.05)]
    pub max_lease_pending_share: f64,
    /// Claim lanes (1 to 64) a campaign without replicas is cut into at its first claim:
    /// stripes of its units, each with its own cursor of fresh units, so that this many lease
    /// claims of one campaign run at once (one claim at a time with 1). A campaign keeps the
    /// lanes it was cut into; a lane holds at least 4,096 units, so a campaign of fewer than
    /// 8,192 units has one.
    #[arg(long, env = "TMD_CLAIM_LANES", default_value_t = 8)]
    pub claim_lanes: u32,
    /// Fewest fresh units a trusted worker's claim leaves to be marked leased after it has
    /// answered: such a claim writes its lease and its lane's cursor, not each unit's row,
    /// and the units are marked right after (by whatever acts on the lease first). Progress
    /// may count them pending for a few milliseconds. Large claims gain most (a few GPUs on a
    /// campaign); a farm of hundreds of GPUs claims hundreds of units at a time, where the
    /// second transaction costs the database more than it saves. 0: every claim marks its own.
    #[arg(long, env = "TMD_DEFER_MARKING_MIN", default_value_t = 1024)]
    pub defer_marking_min: u32,
    /// Largest request body in bytes.
    #[arg(long, env = "TMD_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Most units one campaign may be cut into.
    #[arg(long, env = "TMD_MAX_UNITS_PER_CAMPAIGN", default_value_t = 2_000_000)]
    pub max_units_per_campaign: usize,
    /// Seconds between background passes that expire leases.
    #[arg(long, env = "TMD_SWEEP_INTERVAL_SECONDS", default_value_t = 5)]
    pub sweep_interval_seconds: u64,
    /// Seconds a worker told "no work" waits before asking again (each worker adds up to a
    /// quarter at random): how soon a new campaign reaches idle workers.
    #[arg(long, env = "TMD_IDLE_RETRY_SECONDS", default_value_t = 10)]
    pub idle_retry_seconds: u32,
    /// Quarantine a worker when more than this fraction of its checked results (those a
    /// replica confirmed or outvoted) were outvoted. A forged case quarantines at once.
    #[arg(long, env = "TMD_MAX_INVALID_FRACTION", default_value_t = 0.05)]
    pub max_invalid_fraction: f64,
    /// Quarantine a worker once at least this many of its leases expired ...
    #[arg(long, env = "TMD_MIN_EXPIRED_LEASES", default_value_t = 5)]
    pub min_expired_leases: u32,
    /// ... and they are more than this fraction of its leases.
    #[arg(long, env = "TMD_MAX_EXPIRED_FRACTION", default_value_t = 0.5)]
    pub max_expired_fraction: f64,
    /// Outvoted results a worker needs before --max-invalid-fraction can quarantine it.
    #[arg(long, env = "TMD_MIN_OUTVOTED_RESULTS", default_value_t = 3)]
    pub min_outvoted_results: u32,
    /// Quarantine a worker once it reported at least this many units as failed ...
    #[arg(long, env = "TMD_MIN_FAILED_UNITS", default_value_t = 5)]
    pub min_failed_units: u32,
    /// ... and they are more than this fraction of the units it failed or finished.
    #[arg(long, env = "TMD_MAX_FAILED_FRACTION", default_value_t = 0.5)]
    pub max_failed_fraction: f64,
    /// Engine versions served besides this build's own (comma-separated; 0 is that of
    /// workers older than engine versions). Results of different versions count different
    /// domains, so they are never compared: each unit is settled by results of one version.
    /// Meant for the days of an upgrade; by default only workers of this build's engine
    /// version get work (`tmd-server --version` names it).
    #[arg(long, env = "TMD_ACCEPT_ENGINE", value_delimiter = ',')]
    pub accept_engine: Vec<u32>,
}

impl ServeArgs {
    /// The server settings these options describe.
    pub fn config(&self) -> anyhow::Result<Config> {
        if self.lease_ttl_seconds == 0
            || self.max_units_per_lease == 0
            || self.max_attempts == 0
            || self.max_units_per_worker == 0
        {
            bail!("lease TTL, units per lease and per worker, and attempts must be at least 1");
        }
        if !(self.max_owner_share > 0.0 && self.max_owner_share <= 1.0) {
            bail!("--max-owner-share must be in (0, 1]");
        }
        if !(self.max_lease_pending_share > 0.0 && self.max_lease_pending_share <= 1.0) {
            bail!("--max-lease-pending-share must be in (0, 1]");
        }
        if !(1..=crate::store::MAX_LANES).contains(&self.claim_lanes) {
            bail!("--claim-lanes must be in 1..={}", crate::store::MAX_LANES);
        }
        if self.max_lease_seconds < self.lease_ttl_seconds {
            bail!("--max-lease-seconds must be at least --lease-ttl-seconds");
        }
        let mut c = Config {
            policy: LeasePolicy {
                ttl_seconds: self.lease_ttl_seconds,
                default_seconds: self.default_lease_seconds.max(1),
                max_units: self.max_units_per_lease,
                max_attempts: self.max_attempts,
                max_lease_seconds: self.max_lease_seconds,
                max_units_per_worker: self.max_units_per_worker,
                max_held_seconds: self.max_held_seconds_per_worker.max(1),
                max_owner_share: self.max_owner_share,
                max_pending_share: self.max_lease_pending_share,
                claim_lanes: self.claim_lanes,
                defer_marking_min: self.defer_marking_min,
            },
            max_body_bytes: self.max_body_bytes,
            max_units_per_campaign: self.max_units_per_campaign,
            max_cases_per_result: self.max_cases_per_result.max(1),
            max_quarantined_per_token: self.max_quarantined_per_token.max(1),
            request_timeout: Duration::from_secs(self.request_timeout_seconds.max(1)),
            conn: crate::listen::ConnLimits {
                header_read: Duration::from_secs(self.header_timeout_seconds.max(1)),
                tls_handshake: Duration::from_secs(self.header_timeout_seconds.max(1)),
            },
            rate_limit: (self.rate_limit_per_second > 0.0).then_some(
                crate::request::guard::RateLimit {
                    per_second: self.rate_limit_per_second,
                    burst: self.rate_limit_burst.max(1.0),
                    loopback: false,
                },
            ),
            sweep_interval: Duration::from_secs(self.sweep_interval_seconds.max(1)),
            retry_after_seconds: self.idle_retry_seconds.max(1),
            quarantine: crate::domain::trust::QuarantineBar {
                max_invalid_fraction: self.max_invalid_fraction,
                min_expired_leases: self.min_expired_leases,
                max_expired_fraction: self.max_expired_fraction,
                min_outvoted_results: self.min_outvoted_results,
                min_failed_units: self.min_failed_units,
                max_failed_fraction: self.max_failed_fraction,
                max_verify_overruns: self.max_verify_overruns.max(1),
                ..Default::default()
            },
            verify_budget: crate::domain::budget::VerifyBudget {
                per_unit: self.verify_seconds_per_unit,
                per_lease: self.verify_seconds_per_lease,
                per_worker_hour: self.verify_seconds_per_worker_hour,
            },
            ..Config::default()
        };
        let budget = [
            self.verify_seconds_per_unit,
            self.verify_seconds_per_lease,
            self.verify_seconds_per_worker_hour,
        ];
        if budget.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            bail!(
                "--verify-seconds-per-unit, --verify-seconds-per-lease and \
                 --verify-seconds-per-worker-hour must be positive numbers of seconds"
            );
        }
        let fraction = 0.0..=1.0;
        if !fraction.contains(&self.max_invalid_fraction)
            || !fraction.contains(&self.max_expired_fraction)
            || !fraction.contains(&self.max_failed_fraction)
        {
            bail!("--max-invalid-fraction, --max-expired-fraction and --max-failed-fraction must be in [0, 1]");
        }
        if self.min_expired_leases == 0 {
            bail!("--min-expired-leases must be at least 1");
        }
        if let Some(n) = self.verify_concurrency {
            c.verify_concurrency = n.max(1);
        }
        if let Some(n) = self.derive_tasks {
            c.derive_tasks = n;
        }
        if self
            .accept_engine
            .iter()
            .any(|&v| i32::try_from(v).is_err())
        {
            bail!("--accept-engine takes versions up to {}", i32::MAX);
        }
        c.engines.extend(&self.accept_engine);
        c.engines.sort_unstable();
        c.engines.dedup();
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            c.tls = Some(crate::listen::load_tls(cert, key)?);
        }
        let token = match &self.admin_token_file {
            Some(path) => Some(read_token_file(path)?),
            None => self.admin_token.clone(),
        };
        if let Some(t) = &token {
            check_admin_token(t)?;
            c = c.with_admin_token(t);
        }
        if let Some(t) = &self.metrics_token {
            check_admin_token(t).context("--metrics-token")?;
            c.metrics_token_hash = Some(crate::request::auth::hash_token(t));
        }
        Ok(c)
    }
}

/// The placeholder of `deploy/coordinator.env`: a server started with it would be open to
/// anyone who read the repository.
pub const PLACEHOLDER_ADMIN_TOKEN: &str = "change-me-to-a-long-random-secret";

/// Refuses admin tokens that are short, or the shipped placeholder.
pub fn check_admin_token(t: &str) -> anyhow::Result<()> {
    if t.len() < 16 {
        bail!("the admin token must be at least 16 characters");
    }
    if t == PLACEHOLDER_ADMIN_TOKEN || t.to_ascii_lowercase().contains("change-me") {
        bail!(
            "the admin token is the placeholder of deploy/coordinator.env: set a long random \
             one (e.g. `openssl rand -hex 32`)"
        );
    }
    Ok(())
}

/// The first line of a token file, trimmed.
pub fn read_token_file(path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    Ok(token)
}

/// How the admin commands reach the server.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Base URL of the server.
    #[arg(
        long,
        env = "TMD_SERVER",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub server: String,
    /// The admin token (required, here or in --admin-token-file). Prefer the environment or
    /// the file: a command line shows in `ps`.
    #[arg(long, env = "TMD_ADMIN_TOKEN", hide_env_values = true, global = true)]
    pub admin_token: Option<String>,
    /// A file holding the admin token (its first line).
    #[arg(long, env = "TMD_ADMIN_TOKEN_FILE", global = true)]
    pub admin_token_file: Option<std::path::PathBuf>,
    /// An extra CA certificate (PEM) to trust for an HTTPS server (a lab's own CA).
    #[arg(long, env = "TMD_CA_CERT", global = true)]
    pub ca_cert: Option<std::path::PathBuf>,
}

impl ApiArgs {
    /// The admin token, from the file or the option (or environment).
    pub fn token(&self) -> anyhow::Result<String> {
        match (&self.admin_token_file, &self.admin_token) {
            (Some(path), _) => read_token_file(path),
            (None, Some(t)) => Ok(t.clone()),
            (None, None) => bail!(
                "no admin token: set TMD_ADMIN_TOKEN, or pass --admin-token-file (or --admin-token)"
            ),
        }
    }

    /// An HTTP client builder that trusts the extra CA, if any.
    pub fn http(&self) -> anyhow::Result<reqwest::ClientBuilder> {
        let mut http = reqwest::Client::builder();
        if let Some(ca) = &self.ca_cert {
            let pem = std::fs::read(ca)
                .with_context(|| format!("cannot read the CA certificate {}", ca.display()))?;
            http = http.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
        }
        Ok(http)
    }
}

#[derive(Debug, Subcommand)]
pub enum CampaignCommand {
    /// Creates a campaign; prints it as JSON. With --dry-run, prints its plan instead.
    Create(CreateArgs),
    /// Lists campaigns: a table, or JSON with --output json.
    List(ListArgs),
    /// Shows a campaign and its progress as JSON.
    Show { id: i64 },
    /// Stops handing out the campaign's units.
    Pause { id: i64 },
    /// Hands out the campaign's units again.
    Resume { id: i64 },
    /// Cancels the campaign for good.
    Cancel { id: i64 },
    /// Puts quarantined units back in the pool (all of the campaign's, or those given).
    Requeue {
        id: i64,
        /// A unit to put back (repeatable); all quarantined units when absent.
        #[arg(long = "unit")]
        units: Vec<i64>,
    },
    /// Loads known HR-cases (ringers) from a CORE-MATH `.wc` file or a list of C99 hex
    /// arguments, one a line: the server verifies each with MPFR and judges every result of
    /// their units by them. Prints what it loaded as JSON.
    Ringers {
        id: i64,
        /// The file (`-`: standard input).
        #[arg(long)]
        file: std::path::PathBuf,
    },
    /// Weighs a campaign's units by a cost estimate (`tmd-worker estimate --output json` output,
    /// a `CostEstimate`): progress, ETA and leases then count expected work, not units.
    /// Prints what the server made of it as JSON.
    Estimate {
        id: i64,
        /// The estimate's JSON file (`-`: standard input).
        file: std::path::PathBuf,
    },
    /// Streams the campaign's HR-cases (json, csv or wc) to stdout or a file.
    Export(crate::cli::follow::ExportArgs),
    /// Shows live progress until the campaign completes or is cancelled.
    Watch(crate::cli::follow::WatchArgs),
}

/// What a `list` command prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ListOutput {
    /// Aligned columns for people.
    Table,
    /// The server's JSON, for scripts.
    Json,
}

/// The options of every `list` command.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// A table for people, or JSON for scripts.
    #[arg(long, value_enum, default_value_t = ListOutput::Table)]
    pub output: ListOutput,
}

/// `campaign create` options.
#[derive(Debug, Clone, Args)]
pub struct CreateArgs {
    /// Function name, e.g. `exp`; several, comma-separated (`exp,log,sinh`), queue one
    /// campaign each with the same settings, in that order: the first gets --priority
    /// (default 0), each next one less, so a farm finishes them one after the other.
    #[arg(long)]
    pub function: String,
    /// The number format: binary16, bfloat16, binary32, binary64, binary80 (each with its
    /// exponent range: overflow and underflow skipped, subnormal results on the subnormal
    /// grid), or a bare precision in bits, p8 to p64 (exponent unbounded; or --precision).
    #[arg(long, default_value = "binary64")]
    pub format: String,
    /// A bare precision in bits, 8..=64, instead of --format (exponent unbounded).
    #[arg(long)]
    pub precision: Option<u32>,
    /// Report cases with at least this many identical bits after the rounding bit.
    #[arg(long)]
    pub min_bits: u32,
    /// Start of a range (C99 hex or decimal; negative as written: --from -0x1p+3); repeat
    /// with --to for several ranges. Without ranges, --whole.
    // Not `required` in clap: its message would not name --whole; `ranges` says both.
    #[arg(long = "from", allow_hyphen_values = true)]
    pub from: Vec<String>,
    /// End (excluded) of a range; one per --from.
    #[arg(long = "to", allow_hyphen_values = true)]
    pub to: Vec<String>,
    /// The whole function: every finite argument of --format (a named format) where the
    /// function is defined, instead of --from/--to. Overflow, underflow, poles, trivial, far
    /// and exact regions are skipped runs as for a range; a block where every argument is
    /// skipped is one unit (whole exp in binary64 at 44 bits: about 55,000 units of 2^44 in the
    /// binades that search something, a few thousand that skip everything). sin, cos and tan
    /// of binary64 walk every argument from 2^20 on (about 8 million units of 2^40 each: a
    /// farm's months, estimate first); binary80's are refused (huge arguments are out of
    /// reach), naming the range the engine can do.
    #[arg(long, conflicts_with_all = ["from", "to"])]
    pub whole: bool,
    /// Search every binade, even those the function's reduction derives. By default a
    /// campaign of exp2, cbrt, sqrt, rsqrt or log2 searches only the base binades (exp2: [1, 2)
    /// and (-2, -1] for |x| >= 2; cbrt: three binades, sqrt and rsqrt: two; log2: one per
    /// binade of results, 2^(2^k), beside [1/2, 2)) and carries each base case over to the
    /// binades it stands for (exp2(m + b) = 2^m exp2(b), cbrt(8x) = 2 cbrt(x),
    /// sqrt(4x) = 2 sqrt(x), log2(2^j m) = j + log2(m)), each derived case judged again by MPFR and listed as an HR-case
    /// of its own; the campaign and its exports name the derived runs.
    #[arg(long)]
    pub no_reduction: bool,
    /// log2 of the arguments per unit: each unit is one lease entry and one result row. Without
    /// it the coordinator chooses: the default below, or the smallest size above it that keeps
    /// the campaign within its limits of units and of cases per unit (said on stderr).
    ///
    /// For GPU farms pick it from the rows per second the coordinator must record: GPUs x
    /// units per second per GPU. One H100 finishes about 90 units of 2^40 arguments per second
    /// (exp, binary64), so 2^44 gives about 5.6 units/s per H100 and 1,000 H100s about 5,600
    /// results/s, within what one coordinator records (BENCHMARKS.md); 2^40 would be 90,000.
    /// Keep units big enough that a GPU spends at least about 0.1 s on one, and small enough
    /// that one expects well under the server's 10,000 cases per result at --min-bits
    /// (about 2^(U+1-K) cases per unit).
    ///
    /// Default: 2^(precision - 4) arguments, at most 2^44 (binary64: 44, binary32: 20), and
    /// at most 2^(min_bits + 9) (about 1,000 expected cases per unit).
    #[arg(long, verbatim_doc_comment)]
    pub unit_bits: Option<u32>,
    /// Agreeing results needed per unit from workers whose token is not trusted, from
    /// different workers and owners [default: 2]. Workers of a trusted token (`token create
    /// --trusted`) settle a unit alone.
    #[arg(long)]
    pub replication: Option<u32>,
    /// Any one worker's result settles a unit (replication 1): only for a farm of machines you
    /// control. Without it, a volunteer's result never stands alone.
    #[arg(long, conflicts_with = "replication")]
    pub trust_all_workers: bool,
    /// Replicas of a unit must come from different owners too (see `token create --owner`);
    /// the default with replication 2 or more.
    #[arg(long)]
    pub distinct_owners: bool,
    /// Adaptive replication: trusted workers are replicated only at --audit-rate.
    #[arg(long)]
    pub adaptive: bool,
    /// With --adaptive: probability that a trusted worker's result is replicated anyway
    /// [default: 0.1].
    #[arg(long, requires = "adaptive")]
    pub audit_rate: Option<f64>,
    /// With --adaptive: agreed results in a row after which a worker is trusted [default: 20].
    #[arg(long, requires = "adaptive")]
    pub trust_after: Option<u32>,
    /// Higher runs first.
    #[arg(long)]
    pub priority: Option<i32>,
    /// Label.
    #[arg(long)]
    pub name: Option<String>,
    /// A cost estimate's JSON file (`tmd-worker estimate --output json`), posted once the campaign
    /// is created (as `campaign estimate` does); without one, work is counted in arguments.
    #[arg(long)]
    pub estimate: Option<std::path::PathBuf>,
    /// Print the plan (units and their size, blocks skipped whole, HR-cases expected, and the
    /// time with --estimate) and create nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl CreateArgs {
    /// The ranges of --from/--to, or none with --whole; refuses neither and mismatched pairs.
    pub fn ranges(&self) -> anyhow::Result<Vec<ArgRange>> {
        if self.from.is_empty() && self.to.is_empty() && !self.whole {
            bail!(
                "no range: give --from and --to (a range, e.g. --from 1 --to 2; repeat for \
                 several), or --whole (every finite argument of --format)"
            );
        }
        if self.from.len() != self.to.len() {
            bail!("give one --to per --from");
        }
        Ok(self
            .from
            .iter()
            .zip(&self.to)
            .map(|(f, t)| ArgRange {
                from: f.clone(),
                to: t.clone(),
            })
            .collect())
    }
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Creates an enrollment token for workers; prints it as JSON (shown once).
    Create {
        /// Number of workers that may register with it [default: 10].
        #[arg(long)]
        uses: Option<u32>,
        /// Hours until it expires [default: a week].
        #[arg(long)]
        expires_in_hours: Option<u64>,
        /// A note for people.
        #[arg(long)]
        note: Option<String>,
        /// Who stands behind the workers that register with it (a lab, a volunteer)
        /// [default: token-ID].
        #[arg(long)]
        owner: Option<String>,
        /// The machines that register with it are yours (a lab's): their results settle units
        /// alone and decide disputes, and they are not held to an owner's share.
        #[arg(long)]
        trusted: bool,
    },
    /// Lists enrollment tokens (never the tokens themselves) with their workers: a table, or
    /// JSON with --output json.
    List(ListArgs),
    /// Revokes an enrollment token: no worker registers with it any more.
    Revoke { id: i64 },
}

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Lists workers with their records: a table, or JSON with --output json.
    List(ListArgs),
    /// Shows one worker as JSON.
    Show { id: i64 },
    /// Quarantines a worker: no more work, its leases revoked, its results void, and the units
    /// it alone vouched for redone.
    Quarantine {
        id: i64,
        /// Why (kept with the worker and shown to it).
        #[arg(long)]
        reason: String,
    },
    /// Lifts a quarantine: the worker starts again with a clean record, untrusted.
    Reinstate { id: i64 },
    /// Revokes a worker's token: it cannot authenticate any more; its leases end now.
    Revoke { id: i64 },
}

#[cfg(test)]
mod tests;
