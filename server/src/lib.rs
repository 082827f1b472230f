//! `tmd-server`: the coordinator. Campaigns are cut into units, leased to workers in contiguous
//! runs, and their results (with every HR-case re-verified by MPFR) recorded in PostgreSQL.
//!
//! Layers: [`api`] (thin handlers) → [`domain`] (rules, no I/O; `domain::engine` the only
//! caller of `tmd-kernels`) and [`store`] (all SQL); [`views`] serve people (dashboard,
//! exports); [`cli`] is the command line; [`bench`] the benchmarks, clients of the HTTP API.

#![forbid(unsafe_code)]

/// `println!` that returns the write's error instead of panicking: stdout may be a pipe whose
/// reader is gone (`tmd-server campaign list | head`). `main` ends quietly on a broken pipe.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

// Grouped by role: the HTTP surface, the rules without I/O, storage, views for people, and the
// command line, and the benchmarks.
pub mod api;
pub mod bench;
pub mod cli;
pub mod domain;
pub mod error;
pub mod flows;
pub mod listen;
pub mod metrics;
pub mod outage;
pub mod request;
pub mod store;
pub mod views;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use domain::LeasePolicy;

/// Settings of a running server (built from the command line by [`cli`]).
#[derive(Clone)]
pub struct Config {
    /// SHA-256 of the admin token; admin routes are refused when absent.
    pub admin_token_hash: Option<[u8; 32]>,
    /// SHA-256 of a token that may read `/metrics` (and nothing else); the admin token may too.
    pub metrics_token_hash: Option<[u8; 32]>,
    pub policy: LeasePolicy,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Most HR-cases plus exact cases in one result.
    pub max_cases_per_result: usize,
    /// Most units a campaign may be cut into.
    pub max_units_per_campaign: usize,
    /// How often the background sweeper expires leases.
    pub sweep_interval: Duration,
    /// What a worker told "no work" should wait.
    pub retry_after_seconds: u32,
    /// When a worker's record puts it in quarantine.
    pub quarantine: domain::trust::QuarantineBar,
    /// Results verified with MPFR at once; more posts wait (then get 503).
    pub verify_concurrency: usize,
    /// Background tasks deriving queued base results' cases (0: none in this process).
    pub derive_tasks: usize,
    /// How much verification one worker's posts may cost, per unit, lease and hour.
    pub verify_budget: domain::budget::VerifyBudget,
    /// Quarantined workers after which an enrollment token registers no more.
    pub max_quarantined_per_token: u32,
    /// Longest a request may take until its response starts (reading its body included).
    pub request_timeout: Duration,
    /// Deadlines of a connection (headers, TLS handshake).
    pub conn: listen::ConnLimits,
    /// HTTPS: the acceptor built from the certificate and key files; plain HTTP when absent.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Requests per second and burst allowed per client address (`None`: no limit).
    pub rate_limit: Option<request::guard::RateLimit>,
    /// Engine versions whose workers get work and whose results are taken (this build's
    /// `tmd_kernels::ENGINE_VERSION` by default; `--accept-engine` adds others).
    pub engines: Vec<u32>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field(
                "admin_token_hash",
                &self.admin_token_hash.map(|_| "<redacted>"),
            )
            .field(
                "metrics_token_hash",
                &self.metrics_token_hash.map(|_| "<redacted>"),
            )
            .field("policy", &self.policy)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_cases_per_result", &self.max_cases_per_result)
            .field("max_units_per_campaign", &self.max_units_per_campaign)
            .field("sweep_interval", &self.sweep_interval)
            .field("retry_after_seconds", &self.retry_after_seconds)
            .field("quarantine", &self.quarantine)
            .field("max_quarantined_per_token", &self.max_quarantined_per_token)
            .field("verify_concurrency", &self.verify_concurrency)
            .field("derive_tasks", &self.derive_tasks)
            .field("verify_budget", &self.verify_budget)
            .field("request_timeout", &self.request_timeout)
            .field("conn", &self.conn)
            .field("tls", &self.tls.is_some())
            .field("rate_limit", &self.rate_limit)
            .field("engines", &self.engines)
            .finish()
    }
}

/// Derive tasks for a machine of `cores`: half of them, between 2 and 8. A whole cbrt
/// campaign's derivation (2 million rows) on 16 cores took 62 s after the last result with 2
/// tasks, 17 s with 8 and 10 s with 16, but 16 logged three times the slow statements of 8
/// (BENCHMARKS.md, "The coordinator").
pub fn default_derive_tasks(cores: usize) -> usize {
    (cores / 2).clamp(2, 8)
}

impl Default for Config {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Config {
            admin_token_hash: None,
            metrics_token_hash: None,
            policy: LeasePolicy::default(),
            max_body_bytes: 1 << 20,
            max_cases_per_result: 10_000,
            max_units_per_campaign: 2_000_000,
            sweep_interval: Duration::from_secs(5),
            retry_after_seconds: 10,
            quarantine: domain::trust::QuarantineBar::default(),
            max_quarantined_per_token: 2,
            verify_concurrency: cores,
            derive_tasks: default_derive_tasks(cores),
            verify_budget: domain::budget::VerifyBudget::default(),
            request_timeout: Duration::from_secs(120),
            conn: listen::ConnLimits::default(),
            tls: None,
            rate_limit: None,
            engines: vec![tmd_kernels::ENGINE_VERSION],
        }
    }
}

impl Config {
    /// Sets the admin token (only its hash is kept).
    pub fn with_admin_token(mut self, token: &str) -> Self {
        self.admin_token_hash = Some(request::auth::hash_token(token));
        self
    }
}

/// What every handler gets.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    /// The same database with `synchronous_commit = off`, for writes whose loss in a crash is
    /// harmless: heartbeats (a lost one only shortens a lease, and fencing keeps that safe)
    /// and `last_seen`. Sparing them the WAL flush keeps the flush for what must survive:
    /// lease grants and results.
    pub relaxed_pool: PgPool,
    pub config: Arc<Config>,
    pub metrics: Arc<metrics::Metrics>,
    /// Worker tokens seen recently.
    pub workers: Arc<request::auth::WorkerCache>,
    /// When a lease request last ran an expiry pass.
    pub last_expiry: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    /// Whether the database is reachable, for one log line per outage.
    pub outage: Arc<outage::Outage>,
    /// Permits to verify a result with MPFR, so posts cannot take every core. A permit is held
    /// by the verification task itself, until it ends, whatever became of its request.
    pub verify_permits: Arc<tokio::sync::Semaphore>,
    /// The verification each worker's posts cost this coordinator (`domain::budget`).
    pub verify_ledger: Arc<std::sync::Mutex<domain::budget::VerifyLedger>>,
    /// Per-address request budgets and tokens recently refused.
    pub guard: Arc<request::guard::Guard>,
    /// What each campaign derives instead of searching, read once.
    pub derivations: Arc<store::derivations::DerivationCache>,
    /// Wakes the background derivation: a post queued base results.
    pub derive_wake: Arc<tokio::sync::Notify>,
}

/// A running server: the HTTP listener, the lease sweeper and the background derivation.
pub struct Server {
    addr: SocketAddr,
    scheme: &'static str,
    stop: watch::Sender<bool>,
    http: JoinHandle<std::io::Result<()>>,
    sweeper: JoinHandle<()>,
    derivers: Vec<JoinHandle<()>>,
    relaxed_pool: PgPool,
}

impl Server {
    /// Applies pending migrations, then serves on `listener` until [`Server::shutdown`] (or
    /// the future returned by [`Server::wait`] ends on a signal).
    pub async fn start(
        pool: PgPool,
        config: Config,
        listener: TcpListener,
    ) -> anyhow::Result<Server> {
        store::migrate(&pool).await?;
        let addr = listener.local_addr()?;
        let relaxed_options = (*pool.connect_options())
            .clone()
            .options([("synchronous_commit", "off")]);
        let relaxed_pool = sqlx::postgres::PgPoolOptions::new()
            // A failed connection shows on use anyway; a ping per acquire costs a round trip.
            .test_before_acquire(false)
            .max_connections((pool.options().get_max_connections() / 2).max(2))
            .acquire_timeout(pool.options().get_acquire_timeout())
            .connect_lazy_with(relaxed_options);
        let state = AppState {
            pool,
            relaxed_pool,
            verify_permits: Arc::new(tokio::sync::Semaphore::new(
                config.verify_concurrency.max(1),
            )),
            guard: Arc::new(request::guard::Guard::new(config.rate_limit)),
            verify_ledger: Arc::default(),
            config: Arc::new(config),
            metrics: Arc::new(metrics::Metrics::default()),
            workers: Arc::default(),
            last_expiry: Arc::default(),
            outage: Arc::default(),
            derivations: Arc::default(),
            derive_wake: Arc::default(),
        };
        let (stop, stopped) = watch::channel(false);
        let sweeper = tokio::spawn(sweep(state.clone(), stopped.clone()));
        // Rows that failed before this process began are tried once more.
        let began = chrono::Utc::now();
        let derivers = (0..state.config.derive_tasks)
            .map(|_| tokio::spawn(flows::derive::run(state.clone(), stopped.clone(), began)))
            .collect();
        let relaxed_pool = state.relaxed_pool.clone();
        let tls = state.config.tls.clone();
        let limits = state.config.conn;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let app = api::router(state);
        let http = tokio::spawn(listen::serve(listener, app, tls, limits, stopped));
        tracing::info!(%addr, scheme, "listening");
        Ok(Server {
            addr,
            scheme,
            stop,
            http,
            sweeper,
            derivers,
            relaxed_pool,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, e.g. `http://127.0.0.1:8080` (`https://` when serving TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Stops accepting connections, lets requests in flight finish, stops the sweeper and
    /// the derivation (a batch in flight is rolled back, and stays queued).
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        self.http.await??;
        self.sweeper.await?;
        for d in self.derivers {
            d.await?;
        }
        // The main pool belongs to the caller; the relaxed one is ours.
        self.relaxed_pool.close().await;
        tracing::info!("stopped");
        Ok(())
    }

    /// Serves until SIGINT or SIGTERM, then shuts down gracefully.
    pub async fn wait_for_signal(self) -> anyhow::Result<()> {
        shutdown_signal().await;
        tracing::info!("signal received, shutting down");
        self.shutdown().await
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Expires leases every `sweep_interval`, so units return to the pool even when no worker
/// asks for work; and holds every worker to the quarantine bar (which also finishes a purge a
/// crash interrupted).
async fn sweep(state: AppState, mut stopped: watch::Receiver<bool>) {
    // The first sweep one interval after the start, not at once: a start is no reason to sweep
    // early (leases outlive a restart by their expiry), and a test that sets a long interval
    // then has no sweeper racing its own calls.
    let period = state.config.sweep_interval;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = async move {
        // An error means the server was dropped: stop as well.
        let _ = stopped.wait_for(|s| *s).await;
    };
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                // The sweep doubles as the probe that ends a database outage.
                match flows::expire(&state).await {
                    Ok(()) => state.outage.up(),
                    Err(e) if e.is_unavailable() => state.outage.down(&e.to_string()),
                    Err(e) => tracing::warn!(error = %e, "lease sweep failed"),
                }
                if !state.outage.active() {
                    match store::complete_finished_campaigns(&state.pool).await {
                        Ok(ids) => {
                            for id in ids {
                                tracing::info!(campaign.id = id, "campaign complete: every unit is done");
                            }
                        }
                        Err(e) if e.is_unavailable() => state.outage.down(&e.to_string()),
                        Err(e) => tracing::warn!(error = %e, "completion sweep failed"),
                    }
                    // The rate's readings, about one a minute per campaign.
                    match store::tallies::snapshot(&state.pool).await {
                        Err(e) if e.is_unavailable() => state.outage.down(&e.to_string()),
                        Err(e) => tracing::warn!(error = %e, "progress snapshot failed"),
                        Ok(()) => {}
                    }
                    match flows::enforce(&state, None).await {
                        Err(e) if e.is_unavailable() => state.outage.down(&e.to_string()),
                        Err(e) => tracing::warn!(error = %e, "quarantine sweep failed"),
                        Ok(()) => {}
                    }
                    // Replicas reserved for owners that went away are drawn again.
                    match store::free_stale_reservations(&state.pool).await {
                        Err(e) if e.is_unavailable() => state.outage.down(&e.to_string()),
                        Err(e) => tracing::warn!(error = %e, "reservation sweep failed"),
                        Ok(0) => {}
                        Ok(n) => tracing::info!(units = n, "replica reservations of idle owners freed"),
                    }
                    // Leases whose claim's coordinator stopped before marking their units.
                    match store::deferred::mark_stale(&state.pool).await {
                        Err(e) if e.is_unavailable() => state.outage.down(&e.to_string()),
                        Err(e) => tracing::warn!(error = %e, "marking deferred leases failed"),
                        Ok(0) => {}
                        Ok(n) => tracing::info!(units = n, "units of deferred leases marked"),
                    }
                }
            }
            _ = &mut stop => return,
        }
    }
}
