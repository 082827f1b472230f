//! `tmd-worker run`: the daemon. Registers once, then leases units, computes them with the
//! engine, heartbeats, spools each result to disk before posting it, and repeats. A server
//! that is down is waited for; a first SIGTERM/Ctrl-C finishes the current unit and releases
//! the rest of the lease, a second one exits at once (the lease then expires on the server).

use crate::backoff::{self, Backoff};
use crate::client::{Client, ClientError};
use crate::local::BackendArg;
use crate::misbehave::{self, Misbehave};
use crate::state::{Credentials, LeaseState, SpoolEntry, StateDir};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tmd_kernels::cuda::{self, Cuda, MemoryBudget};
use tmd_kernels::plan::UnitSpec as EngineUnit;
use tmd_kernels::search::{search_unit, Backend, Cpu, SearchConfig, SearchError};
use tmd_kernels::verify::Kind;
use tmd_kernels::{Function, Precision};
use tmd_wire::{codes, CampaignState, HrCase, HrKind, Lease, ReleaseLease, UnitResult, UnitStats};
use tokio::sync::Notify;
use tracing::{error, info, warn};

#[derive(Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// Base URL of the coordinator, e.g. http://coordinator:8080.
    #[arg(long, env = "TMD_SERVER")]
    pub server: Option<String>,
    /// Enrollment token from the admin (`tmd-server token create`), used once to register;
    /// the worker's own token is then kept in the state directory.
    #[arg(long, env = "TMD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Name shown to the admin [default: the host name].
    #[arg(long, env = "TMD_WORKER_NAME")]
    pub name: Option<String>,
    /// Where credentials, the current lease and unsent results are kept
    /// [default: ./tmd-worker-state].
    #[arg(long, env = "TMD_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Engine threads [default: all cores].
    #[arg(long, env = "TMD_THREADS")]
    pub threads: Option<usize>,
    /// About how many seconds of work to ask for per lease [default: the server's].
    #[arg(long, env = "TMD_LEASE_SECONDS")]
    pub lease_seconds: Option<u32>,
    /// A TOML file with any of: server, token, name, state_dir, threads, lease_seconds.
    /// Flags and environment variables take precedence over it.
    #[arg(long, env = "TMD_WORKER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Stop after computing this many units (default: run until stopped).
    #[arg(long)]
    pub max_units: Option<u64>,
    /// Exit when the server has no work, instead of waiting for more.
    #[arg(long)]
    pub exit_when_idle: bool,
    /// Seconds between status lines in the log.
    #[arg(long, default_value_t = 30)]
    pub status_seconds: u64,
    /// Print the settings (token redacted) and exit: checks a configuration.
    #[arg(long)]
    pub dry_run: bool,
    /// Where units are computed: auto (the GPUs that pass the self-test, else the CPU), cpu,
    /// or cuda (an error if no GPU passes) [default: auto].
    #[arg(long, value_enum, env = "TMD_BACKEND")]
    pub backend: Option<BackendArg>,
    /// CUDA devices to use, e.g. 0,1 [default: every device].
    #[arg(long, value_delimiter = ',', env = "TMD_DEVICES")]
    pub devices: Vec<usize>,
    /// Device memory the GPU back end may use per device: bytes with a unit (8G, 512M) or a
    /// share of the memory free at start (60%). Units with more work than fits are cut into
    /// chunks that do [default: auto, half the free memory].
    #[arg(long, env = "TMD_GPU_MEMORY")]
    pub gpu_memory: Option<MemoryBudget>,
    /// Allow a plain http:// server that is not on this machine: the worker's token would
    /// cross the network in clear. Off by default; use https:// instead.
    #[arg(long, env = "TMD_INSECURE_HTTP")]
    pub insecure_http: bool,
    /// An extra CA certificate (PEM) to trust for the server's HTTPS (a lab's own CA), besides
    /// the built-in web roots.
    #[arg(long, env = "TMD_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// For the trust tests only: misbehave (lazy, forge, flip, late) so they can check the
    /// server catches it. See misbehave.rs.
    #[arg(long, value_enum, env = "TMD_MISBEHAVE", hide = true)]
    pub misbehave: Option<Misbehave>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    server: Option<String>,
    token: Option<String>,
    name: Option<String>,
    state_dir: Option<PathBuf>,
    threads: Option<usize>,
    lease_seconds: Option<u32>,
    backend: Option<String>,
    devices: Option<Vec<usize>>,
    gpu_memory: Option<String>,
    insecure_http: Option<bool>,
    ca_cert: Option<PathBuf>,
}

/// The daemon's settings after flags, environment and the configuration file.
#[derive(Clone)]
pub struct Settings {
    pub server: String,
    pub enrollment_token: Option<String>,
    pub name: String,
    pub state_dir: PathBuf,
    pub threads: Option<usize>,
    pub lease_seconds: Option<u32>,
    pub max_units: Option<u64>,
    pub exit_when_idle: bool,
    pub status_every: Duration,
    pub backend: BackendArg,
    pub devices: Vec<usize>,
    pub gpu_memory: MemoryBudget,
    pub misbehave: Option<Misbehave>,
    pub ca_cert: Option<PathBuf>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("server", &self.server)
            .field(
                "enrollment_token",
                &self.enrollment_token.as_ref().map(|_| "<redacted>"),
            )
            .field("name", &self.name)
            .field("state_dir", &self.state_dir)
            .field("threads", &self.threads)
            .field("lease_seconds", &self.lease_seconds)
            .field("backend", &self.backend)
            .field("devices", &self.devices)
            .field("gpu_memory", &self.gpu_memory)
            .field("misbehave", &self.misbehave)
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

impl Settings {
    pub fn resolve(a: RunArgs) -> Result<Settings> {
        let file: FileConfig = match &a.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let Some(server) = a.server.or(file.server) else {
            bail!("no server: pass --server URL (or TMD_SERVER, or `server` in --config)");
        };
        if !(server.starts_with("http://") || server.starts_with("https://")) {
            bail!("--server must be an http:// or https:// URL, got '{server}'");
        }
        let insecure_http = a.insecure_http || file.insecure_http.unwrap_or(false);
        if server.starts_with("http://") && !insecure_http && !is_loopback_url(&server) {
            bail!(
                "--server {server} is plain HTTP to another machine: the worker's token would \
                 cross the network in clear. Use https:// (with --ca-cert for a private CA), or \
                 pass --insecure-http if the network is trusted"
            );
        }
        let name = a
            .name
            .or(file.name)
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "tmd-worker".into());
        let backend = match (a.backend, file.backend) {
            (Some(b), _) => b,
            (None, Some(text)) => BackendArg::from_str(&text, true)
                .map_err(|e| anyhow::anyhow!("backend = \"{text}\" in the configuration: {e}"))?,
            (None, None) => BackendArg::Auto,
        };
        let devices = if a.devices.is_empty() {
            file.devices.unwrap_or_default()
        } else {
            a.devices
        };
        let gpu_memory = match (a.gpu_memory, file.gpu_memory) {
            (Some(b), _) => b,
            (None, Some(text)) => text
                .parse()
                .with_context(|| format!("gpu_memory = \"{text}\" in the configuration"))?,
            (None, None) => MemoryBudget::default(),
        };
        Ok(Settings {
            backend,
            devices,
            gpu_memory,
            server,
            enrollment_token: a.token.or(file.token),
            name,
            state_dir: a
                .state_dir
                .or(file.state_dir)
                .unwrap_or_else(|| PathBuf::from("tmd-worker-state")),
            threads: a.threads.or(file.threads),
            lease_seconds: a.lease_seconds.or(file.lease_seconds),
            max_units: a.max_units,
            exit_when_idle: a.exit_when_idle,
            status_every: Duration::from_secs(a.status_seconds.max(1)),
            misbehave: a.misbehave,
            ca_cert: a.ca_cert.or(file.ca_cert),
        })
    }
}

/// Whether `url`'s host is this machine (`localhost`, 127.0.0.0/8, ::1).
fn is_loopback_url(url: &str) -> bool {
    let Some(host) = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
    else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The coordinator quarantined this worker: restarting will not help (exit status
/// [`QUARANTINED_EXIT`], which the systemd unit does not restart on).
#[derive(Debug, thiserror::Error)]
#[error("the coordinator quarantined this worker; ask its admin to look and reinstate it. {0}")]
pub struct Quarantined(String);

/// Exit status of `tmd-worker run` when quarantined.
pub const QUARANTINED_EXIT: i32 = 3;

const RUNNING: u8 = 0;
const FINISHING: u8 = 1;

/// Shared between the loop, the heartbeat task and the signal handler.
struct Shared {
    phase: AtomicU8,
    wake: Notify,
    units_done: AtomicU64,
    arguments_done: AtomicU64,
    started: Instant,
}

impl Shared {
    fn finishing(&self) -> bool {
        self.phase.load(Ordering::SeqCst) != RUNNING
    }

    /// Sleeps, waking early when asked to finish.
    async fn sleep(&self, d: Duration) {
        if self.finishing() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = self.wake.notified() => {}
        }
    }
}

pub fn run(args: RunArgs) -> Result<()> {
    let dry_run = args.dry_run;
    let settings = Settings::resolve(args)?;
    if dry_run {
        println!("{settings:#?}");
        return Ok(());
    }
    if let Some(n) = settings.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global()
            .context("starting the engine's thread pool")?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(daemon(settings))
}

async fn daemon(settings: Settings) -> Result<()> {
    let state = StateDir::open(&settings.state_dir)?;
    info!(server = %settings.server, state_dir = %state.root().display(), name = %settings.name, "tmd-worker starting");
    let shared = Arc::new(Shared {
        phase: AtomicU8::new(RUNNING),
        wake: Notify::new(),
        units_done: AtomicU64::new(0),
        arguments_done: AtomicU64::new(0),
        started: Instant::now(),
    });
    spawn_signal_handler(shared.clone());
    spawn_status(shared.clone(), settings.status_every);

    let backend = {
        let s = settings.clone();
        tokio::task::spawn_blocking(move || open_backend(&s)).await??
    };
    let client = login(&settings, &state, &shared).await?;
    let Some(client) = client else {
        return Ok(());
    };
    flush_spool(&client, &state).await;
    if let Some(ls) = state.lease()? {
        info!(
            lease.id = ls.lease.lease_id,
            done = ls.done.len(),
            "resuming the lease in hand"
        );
        work_lease(&client, &state, &shared, &settings, &backend, ls).await?;
    }
    let mut backoff = Backoff::new();
    while !shared.finishing() && !limit_reached(&settings, &shared) {
        flush_spool(&client, &state).await;
        match client.lease(settings.lease_seconds).await {
            Ok(resp) => {
                backoff.reset();
                match resp.lease {
                    Some(lease) => {
                        info!(lease.id = lease.lease_id, campaign.id = lease.task.campaign_id, units = lease.units.len(), function = %lease.task.function, "leased");
                        let ls = LeaseState {
                            lease,
                            done: Default::default(),
                        };
                        state.save_lease(&ls)?;
                        work_lease(&client, &state, &shared, &settings, &backend, ls).await?;
                    }
                    None => {
                        if settings.exit_when_idle {
                            info!("no work on the server; exiting as asked");
                            break;
                        }
                        let wait = backoff::spread(Duration::from_secs(
                            resp.retry_after_seconds.max(1) as u64,
                        ));
                        info!(retry_in_ms = wait.as_millis() as u64, "no work now");
                        shared.sleep(wait).await;
                    }
                }
            }
            Err(ClientError::Unavailable {
                message,
                retry_after,
            }) => {
                let wait = backoff.next(retry_after);
                warn!(%message, retry_in_ms = wait.as_millis() as u64, "server unavailable");
                shared.sleep(wait).await;
            }
            Err(ClientError::Misconfigured(m)) => bail!("cannot lease work: {m}"),
            Err(e) if e.code() == Some(codes::WORKER_QUARANTINED) => {
                return Err(Quarantined(e.to_string()).into())
            }
            Err(e) => bail!("the server refused to lease: {e}"),
        }
    }
    flush_spool(&client, &state).await;
    let left = state.spool()?.len();
    if left > 0 {
        warn!(results = left, state_dir = %state.root().display(), "results not yet accepted stay in the spool and are posted at the next start");
    }
    info!(
        units = shared.units_done.load(Ordering::SeqCst),
        "tmd-worker stopped"
    );
    Ok(())
}

/// The back end for this daemon. GPU arithmetic is not taken on trust: each device runs the
/// self-test first and a device that fails any check is refused.
fn open_backend(settings: &Settings) -> Result<Arc<dyn Backend + Send + Sync>> {
    let want_gpu = settings.backend == BackendArg::Cuda;
    if settings.backend == BackendArg::Cpu {
        return Ok(Arc::new(Cpu));
    }
    let devices = if settings.devices.is_empty() {
        match Cuda::all(settings.gpu_memory) {
            Ok(c) => c.ordinals(),
            Err(e) if want_gpu => bail!("the CUDA back end: {e}"),
            Err(e) => {
                warn!(error = %e, "no usable GPU; computing on the CPU");
                return Ok(Arc::new(Cpu));
            }
        }
    } else {
        settings.devices.clone()
    };
    let mut passed = Vec::new();
    for d in devices {
        match cuda::selftest(d) {
            Ok(r) if r.passed() => {
                info!(device = d, name = %r.name, checks = r.checks.len(), "GPU self-test passed");
                passed.push(d);
            }
            Ok(r) => {
                let failed: Vec<&str> = r
                    .checks
                    .iter()
                    .filter(|c| !c.passed())
                    .map(|c| c.name.as_str())
                    .collect();
                error!(device = d, name = %r.name, failed = ?failed, "GPU self-test FAILED: refusing this device");
            }
            Err(e) => {
                error!(device = d, error = %e, "GPU self-test could not run: refusing this device")
            }
        }
    }
    if passed.is_empty() {
        if want_gpu {
            bail!("no CUDA device passed the self-test");
        }
        warn!("no GPU passed the self-test; computing on the CPU");
        return Ok(Arc::new(Cpu));
    }
    let c = Cuda::new(&passed, settings.gpu_memory)?;
    info!(backend = %c.name(), "computing on the GPU");
    Ok(Arc::new(c))
}

fn limit_reached(settings: &Settings, shared: &Shared) -> bool {
    settings
        .max_units
        .is_some_and(|m| shared.units_done.load(Ordering::SeqCst) >= m)
}

/// The client with this worker's own token: from the state directory, or by registering with
/// the enrollment token. `None` when asked to stop while waiting for the server.
async fn login(settings: &Settings, state: &StateDir, shared: &Shared) -> Result<Option<Client>> {
    let anonymous = Client::new(&settings.server, None, settings.ca_cert.as_deref())?;
    if let Some(c) = state.credentials()? {
        if c.server == settings.server {
            return Ok(Some(anonymous.with_token(c.token)));
        }
        warn!(old = %c.server, new = %settings.server, "credentials are for another server; registering again");
    }
    let Some(enrollment) = settings.enrollment_token.as_deref() else {
        bail!("this worker is not registered yet: pass --token with an enrollment token from the admin (`tmd-server token create`)");
    };
    let mut backoff = Backoff::new();
    loop {
        match anonymous.register(enrollment, &settings.name).await {
            Ok(reg) => {
                state.save_credentials(&Credentials {
                    server: settings.server.clone(),
                    worker_id: reg.worker_id,
                    token: reg.token.clone(),
                })?;
                info!(worker.id = reg.worker_id, "registered");
                return Ok(Some(anonymous.with_token(reg.token)));
            }
            Err(ClientError::Unavailable {
                message,
                retry_after,
            }) => {
                let wait = backoff.next(retry_after);
                warn!(%message, retry_in_ms = wait.as_millis() as u64, "server unavailable; waiting to register");
                shared.sleep(wait).await;
                if shared.finishing() {
                    return Ok(None);
                }
            }
            Err(ClientError::Misconfigured(m)) => bail!("cannot register: {m}"),
            Err(e) => bail!("registration refused: {e}"),
        }
    }
}

/// Posts every spooled result; keeps those the server could not be reached for.
async fn flush_spool(client: &Client, state: &StateDir) {
    let entries = match state.spool() {
        Ok(e) => e,
        Err(e) => {
            error!(error = %e, "cannot read the spool");
            return;
        }
    };
    for e in entries {
        if post_spooled(client, state, &e).await == Posted::Later {
            return;
        }
    }
}

/// What became of a spooled result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Posted {
    Accepted,
    /// The server could not take it now (unreachable, busy, quarantine): it stays spooled.
    Later,
    /// The server will never take it (the unit went to another lease, ...): dropped.
    Refused,
    /// The server found the result itself unacceptable (400, 413): dropped, and the unit is to
    /// be released as failed, so it is not left to expire under this worker's name.
    Unacceptable,
}

/// Posts one spooled result.
async fn post_spooled(client: &Client, state: &StateDir, e: &SpoolEntry) -> Posted {
    match client.post_result(e.lease_id, e.unit_id, &e.result).await {
        Ok(acc) => {
            info!(
                unit.id = e.unit_id,
                lease.id = e.lease_id,
                hr_cases = acc.hr_cases,
                "result accepted"
            );
            if let Err(err) = state.spool_remove(e.lease_id, e.unit_id) {
                error!(error = %err, "cannot remove a posted result from the spool");
            }
            Posted::Accepted
        }
        Err(ClientError::Unavailable { message, .. }) => {
            warn!(%message, unit.id = e.unit_id, "server unavailable; the result stays in the spool");
            Posted::Later
        }
        Err(ClientError::Misconfigured(message)) => {
            error!(%message, unit.id = e.unit_id, "the result stays in the spool");
            Posted::Later
        }
        Err(err) => {
            // The server will never take this result (the unit went to another lease, the
            // lease ended, ...): nothing to retry. Keep a trace in the log.
            let code = err.code().unwrap_or("").to_string();
            if code == codes::UNAUTHORIZED {
                error!(error = %err, "the server does not know this worker's token");
                return Posted::Later;
            }
            if code == codes::WORKER_QUARANTINED {
                error!(error = %err, "the coordinator quarantined this worker; the result stays in the spool");
                return Posted::Later;
            }
            warn!(unit.id = e.unit_id, lease.id = e.lease_id, %code, error = %err, "result refused; dropping it");
            if let Err(err) = state.spool_remove(e.lease_id, e.unit_id) {
                error!(error = %err, "cannot remove a refused result from the spool");
            }
            if code == codes::BAD_REQUEST || code == codes::PAYLOAD_TOO_LARGE {
                Posted::Unacceptable
            } else {
                Posted::Refused
            }
        }
    }
}

/// Posts the spooled results of one lease again, a few times: a lease must not be released
/// while a result of it waits in the spool, or the server would hand its unit to someone else
/// and refuse the result later. `true` when none is left.
async fn settle_spool_of(client: &Client, state: &StateDir, lease_id: i64) -> bool {
    let mut backoff = Backoff::new();
    for attempt in 0..3 {
        let entries: Vec<SpoolEntry> = match state.spool() {
            Ok(e) => e.into_iter().filter(|e| e.lease_id == lease_id).collect(),
            Err(e) => {
                error!(error = %e, "cannot read the spool");
                return false;
            }
        };
        if entries.is_empty() {
            return true;
        }
        if attempt > 0 {
            tokio::time::sleep(backoff.next(None)).await;
        }
        for e in &entries {
            post_spooled(client, state, e).await;
        }
    }
    state
        .spool()
        .map(|s| s.iter().all(|e| e.lease_id != lease_id))
        .unwrap_or(false)
}

/// Flags the heartbeat task raises for the lease loop.
#[derive(Default)]
struct LeaseFlags {
    lost: AtomicBool,
    stop: AtomicBool,
}

fn spawn_heartbeat(
    client: Client,
    lease: &Lease,
    flags: Arc<LeaseFlags>,
) -> tokio::task::JoinHandle<()> {
    let (id, token) = (lease.lease_id, lease.fencing_token);
    let every = Duration::from_secs(lease.heartbeat_seconds.max(1) as u64);
    tokio::spawn(async move {
        let mut backoff = Backoff::new();
        let mut wait = every;
        loop {
            tokio::time::sleep(wait).await;
            match client.heartbeat(id, token).await {
                Ok(hb) => {
                    backoff.reset();
                    wait = every;
                    if matches!(
                        hb.campaign_state,
                        CampaignState::Cancelled | CampaignState::Paused
                    ) {
                        info!(
                            lease.id = id,
                            state = hb.campaign_state.as_str(),
                            "campaign stopped; finishing the current unit"
                        );
                        flags.stop.store(true, Ordering::SeqCst);
                    }
                }
                Err(ClientError::Unavailable {
                    message,
                    retry_after,
                }) => {
                    wait = backoff.next(retry_after).min(every);
                    warn!(%message, lease.id = id, "heartbeat failed; retrying");
                }
                Err(e) => {
                    warn!(lease.id = id, error = %e, "the lease is gone; finishing the current unit");
                    flags.lost.store(true, Ordering::SeqCst);
                    return;
                }
            }
        }
    })
}

async fn work_lease(
    client: &Client,
    state: &StateDir,
    shared: &Arc<Shared>,
    settings: &Settings,
    backend: &Arc<dyn Backend + Send + Sync>,
    mut ls: LeaseState,
) -> Result<()> {
    let lease = ls.lease.clone();
    let task = &lease.task;
    let function: Function = task
        .function
        .parse()
        .with_context(|| format!("the server leased an unknown function '{}'", task.function))?;
    let precision = Precision::new(task.precision)?;
    let cfg = SearchConfig::new(function, precision, task.min_bits);
    let flags = Arc::new(LeaseFlags::default());
    let late = settings.misbehave == Some(Misbehave::Late);
    let mut heartbeat = (!late).then(|| spawn_heartbeat(client.clone(), &lease, flags.clone()));
    let mut failed = Vec::new();
    let mut failures = Vec::new();
    for unit in &lease.units {
        if ls.done.contains(&unit.unit_id) {
            continue;
        }
        if shared.finishing()
            || flags.lost.load(Ordering::SeqCst)
            || flags.stop.load(Ordering::SeqCst)
            || limit_reached(settings, shared)
        {
            break;
        }
        let spec = EngineUnit {
            negative: unit.spec.negative,
            exponent: unit.spec.exponent,
            first: unit.spec.first,
            count: unit.spec.count,
        };
        let t = Instant::now();
        let result = if settings.misbehave == Some(Misbehave::Lazy) {
            misbehave::lazy_result(lease.fencing_token, &spec)
        } else {
            let engine = backend.clone();
            let id = unit.unit_id;
            let computed =
                tokio::task::spawn_blocking(move || compute_unit(&cfg, spec, engine.as_ref(), id))
                    .await
                    .unwrap_or_else(|e| Err(format!("the engine panicked: {e}")))
                    .and_then(refuse_skipped);
            match computed {
                Ok(r) => to_wire(&r, lease.fencing_token, t.elapsed().as_secs_f64()),
                Err(why) => {
                    error!(unit.id = unit.unit_id, error = %why, "the engine failed on this unit; giving it back");
                    failed.push(unit.unit_id);
                    failures.push(format!("unit {}: {why}", unit.unit_id));
                    continue;
                }
            }
        };
        let mut result = result;
        match settings.misbehave {
            Some(Misbehave::Forge) => misbehave::forge(&mut result, &spec, precision),
            Some(Misbehave::Flip) => misbehave::flip(&mut result),
            _ => {}
        }
        let elapsed = t.elapsed().as_secs_f64();
        let hr_cases = result.hr_cases.len();
        let entry = SpoolEntry {
            lease_id: lease.lease_id,
            unit_id: unit.unit_id,
            result,
        };
        // Disk first: once spooled, the result survives a crash and is posted later.
        state.spool_put(&entry)?;
        ls.done.insert(unit.unit_id);
        state.save_lease(&ls)?;
        shared.units_done.fetch_add(1, Ordering::SeqCst);
        shared
            .arguments_done
            .fetch_add(spec.count, Ordering::SeqCst);
        info!(
            unit.id = unit.unit_id,
            duration_ms = (elapsed * 1e3) as u64,
            hr_cases,
            "unit computed"
        );
        if lease.units.iter().all(|u| ls.done.contains(&u.unit_id)) {
            // Every unit is spooled: the lease needs no more heartbeats, and one sent after
            // the last post would find the lease finished and report it lost.
            if let Some(h) = heartbeat.take() {
                h.abort();
            }
        }
        if late {
            let overdue = (lease.expires_at - chrono::Utc::now()).num_milliseconds() + 1000;
            tokio::time::sleep(Duration::from_millis(overdue.max(0) as u64)).await;
        }
        if post_spooled(client, state, &entry).await == Posted::Unacceptable {
            failed.push(unit.unit_id);
        }
    }
    if let Some(h) = heartbeat {
        h.abort();
    }
    let remaining = lease
        .units
        .iter()
        .filter(|u| !ls.done.contains(&u.unit_id))
        .count();
    if (remaining > 0 || !failed.is_empty())
        && !flags.lost.load(Ordering::SeqCst)
        && !settle_spool_of(client, state, lease.lease_id).await
    {
        // Releasing now would lose the spooled results: the lease is left to expire instead,
        // after which the server still accepts them.
        warn!(
            lease.id = lease.lease_id,
            "results of this lease are still spooled; not releasing it"
        );
        state.clear_lease()?;
        return Ok(());
    }
    if (remaining > 0 || !failed.is_empty()) && !flags.lost.load(Ordering::SeqCst) {
        let body = ReleaseLease {
            fencing_token: lease.fencing_token,
            failed_units: failed.clone(),
            reason: Some(if shared.finishing() {
                "worker stopping".into()
            } else if !failed.is_empty() {
                failure_reason(&failures)
            } else {
                "campaign stopped".into()
            }),
        };
        match client.release(lease.lease_id, &body).await {
            Ok(r) => info!(
                lease.id = lease.lease_id,
                returned = r.returned,
                quarantined = r.quarantined,
                "lease released"
            ),
            Err(e) => {
                warn!(lease.id = lease.lease_id, error = %e, "could not release the lease; it will expire on the server")
            }
        }
    }
    state.clear_lease()?;
    Ok(())
}

/// Computes one unit. A failure of the back end (not MPFR's, which would fail again) is tried
/// again with smaller GPU lists, then on the CPU, before the unit is given up: the error then
/// says what each try met.
/// A unit with skipped arguments (a pole of tanpi) cannot be reported whole: results carry no
/// skipped runs yet, and dropping them would be silent. The unit goes back with the reason.
fn refuse_skipped(
    r: tmd_kernels::search::UnitResult,
) -> std::result::Result<tmd_kernels::search::UnitResult, String> {
    match r.skipped.first() {
        None => Ok(r),
        Some(s) => Err(format!(
            "{} runs of arguments skipped ([{}, {}]: {}), which a result cannot carry yet",
            r.skipped.len(),
            s.first,
            s.last,
            s.reason.as_str()
        )),
    }
}

fn compute_unit(
    cfg: &SearchConfig,
    spec: EngineUnit,
    backend: &dyn Backend,
    unit_id: i64,
) -> std::result::Result<tmd_kernels::search::UnitResult, String> {
    let mut tries = Vec::new();
    let mut err = match search_unit(cfg, spec, backend) {
        Ok(r) => return Ok(r),
        Err(e) => e,
    };
    if let SearchError::Backend(_) = err {
        if backend.recover(&err) {
            warn!(unit.id = unit_id, error = %err, "the GPU failed on this unit; trying again with smaller lists");
            tries.push(format!("on {}: {err}", backend.name()));
            match search_unit(cfg, spec, backend) {
                Ok(r) => return Ok(r),
                Err(e) => err = e,
            }
        }
    }
    // The CPU back end raises no back-end errors: one still here came from the GPU.
    if let SearchError::Backend(_) = err {
        warn!(unit.id = unit_id, error = %err, "the GPU failed on this unit; computing it on the CPU");
        tries.push(format!("on {}: {err}", backend.name()));
        match search_unit(cfg, spec, &Cpu) {
            Ok(r) => return Ok(r),
            Err(e) => err = e,
        }
        tries.push(format!("on the CPU: {err}"));
    } else {
        tries.push(err.to_string());
    }
    Err(tries.join("; "))
}

/// The release's reason for the units given up: what failed, on one line (the server refuses
/// control characters, and an NVRTC log or a driver message may hold newlines) and within its
/// 2000 bytes.
fn failure_reason(failures: &[String]) -> String {
    let joined = failures.join(" | ");
    let one_line: Vec<&str> = joined
        .split(char::is_control)
        .filter(|s| !s.is_empty())
        .collect();
    let mut reason = format!("engine failure: {}", one_line.join(" "));
    if reason.len() > 2000 {
        let mut cut = 1990;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
        reason.push_str(" …");
    }
    reason
}

#[cfg(test)]
mod retry_tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use tmd_kernels::existence::Test;
    use tmd_kernels::generation::Generated;
    use tmd_kernels::search::PieceOutcome;

    /// A back end whose device fails the first `fail` pieces; `recover` says whether shrinking
    /// is still possible.
    struct Flaky {
        fail: AtomicU32,
        can_recover: bool,
        recovered: AtomicU32,
    }

    impl Backend for Flaky {
        fn search_piece(
            &self,
            g: &Generated,
            test: Test,
            packet_domains: u64,
        ) -> std::result::Result<PieceOutcome, SearchError> {
            if self.fail.load(Ordering::SeqCst) > 0 {
                self.fail.fetch_sub(1, Ordering::SeqCst);
                return Err(SearchError::Backend(
                    "CUDA driver: CUDA_ERROR_ILLEGAL_ADDRESS".into(),
                ));
            }
            Cpu.search_piece(g, test, packet_domains)
        }

        fn name(&self) -> String {
            "flaky".into()
        }

        fn recover(&self, _err: &SearchError) -> bool {
            self.recovered.fetch_add(1, Ordering::SeqCst);
            self.can_recover
        }
    }

    fn unit() -> (SearchConfig, EngineUnit) {
        let cfg = SearchConfig::new(Function::Exp, Precision::new(20).unwrap(), 12);
        let spec = EngineUnit {
            negative: false,
            exponent: 0,
            first: 1 << 19,
            count: 1 << 14,
        };
        (cfg, spec)
    }

    #[test]
    fn a_device_failure_is_retried_smaller_then_on_the_cpu() {
        let (cfg, spec) = unit();
        let want = search_unit(&cfg, spec, &Cpu).unwrap();
        // Recovers on the second try, on the device.
        let b = Flaky {
            fail: AtomicU32::new(1),
            can_recover: true,
            recovered: AtomicU32::new(0),
        };
        let got = compute_unit(&cfg, spec, &b, 7).unwrap();
        assert_eq!(
            (got.stats, got.hr_cases),
            (want.stats, want.hr_cases.clone())
        );
        assert_eq!(b.recovered.load(Ordering::SeqCst), 1);
        // The device keeps failing: the CPU computes the unit.
        let b = Flaky {
            fail: AtomicU32::new(u32::MAX),
            can_recover: true,
            recovered: AtomicU32::new(0),
        };
        let got = compute_unit(&cfg, spec, &b, 7).unwrap();
        assert_eq!(got.hr_cases, want.hr_cases);
        // Nothing to shrink: straight to the CPU.
        let b = Flaky {
            fail: AtomicU32::new(u32::MAX),
            can_recover: false,
            recovered: AtomicU32::new(0),
        };
        assert_eq!(
            compute_unit(&cfg, spec, &b, 7).unwrap().hr_cases,
            want.hr_cases
        );
    }

    #[test]
    fn a_failure_reason_fits_the_server() {
        let many: Vec<String> = (0..100)
            .map(|i| format!("unit {i}: {}", "é".repeat(40)))
            .collect();
        let r = failure_reason(&many);
        assert!(r.len() <= 2000, "{}", r.len());
        assert!(r.starts_with("engine failure: unit 0: é"));
        assert_eq!(
            failure_reason(&["unit 3: boom".into()]),
            "engine failure: unit 3: boom"
        );
        let log = failure_reason(&["unit 4: NVRTC: line 1\nline 2\r\n\tline 3\u{0}".into()]);
        assert_eq!(log, "engine failure: unit 4: NVRTC: line 1 line 2 line 3");
        assert!(!log.chars().any(char::is_control));
    }
}

fn to_wire(r: &tmd_kernels::search::UnitResult, fencing_token: i64, elapsed: f64) -> UnitResult {
    let s = &r.stats;
    UnitResult {
        fencing_token,
        stats: UnitStats {
            units: s.units,
            domains: s.domains,
            phase1_failures: s.phase1_failures,
            subdomains: s.subdomains,
            phase2_failures: s.phase2_failures,
            phase3_arguments: s.phase3_arguments,
            candidates: s.candidates,
            false_positives: s.false_positives,
        },
        hr_cases: r
            .hr_cases
            .iter()
            .map(|c| HrCase {
                x: c.x.clone(),
                bits: c.bits,
                neg_log2_d: c.neg_log2_d,
                kind: match c.kind {
                    Kind::Fp => HrKind::Fp,
                    Kind::Mid => HrKind::Mid,
                },
                rounded: c.rounded.clone(),
            })
            .collect(),
        exact_cases: r.exact_cases.iter().map(|e| e.x.clone()).collect(),
        elapsed,
        digest: r.digest(),
    }
}

fn spawn_signal_handler(shared: Arc<Shared>) {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    error!(error = %e, "cannot listen for SIGTERM");
                    return;
                }
            };
        let mut count = 0;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            count += 1;
            if count == 1 {
                warn!("stopping: finishing the current unit and releasing the rest of the lease (signal again to stop at once)");
                shared.phase.store(FINISHING, Ordering::SeqCst);
                shared.wake.notify_waiters();
            } else {
                warn!("stopping at once; the lease will expire on the server");
                std::process::exit(130);
            }
        }
    });
}

fn spawn_status(shared: Arc<Shared>, every: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let secs = shared.started.elapsed().as_secs_f64();
            let args = shared.arguments_done.load(Ordering::SeqCst) as f64;
            info!(
                units_done = shared.units_done.load(Ordering::SeqCst),
                arguments_per_s = format!("{:.3e}", args / secs.max(1e-9)),
                uptime_s = secs as u64,
                "status"
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_flags_then_the_file() {
        let dir = std::env::temp_dir().join(format!("tmd-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("worker.toml");
        std::fs::write(
            &file,
            "server = \"http://from-file:8080\"\nname = \"filename\"\nthreads = 3\ntoken = \"tok\"\ninsecure_http = true\n",
        )
        .unwrap();
        let s = Settings::resolve(RunArgs {
            config: Some(file.clone()),
            name: Some("flagname".into()),
            ..RunArgs::default()
        })
        .unwrap();
        assert_eq!(s.server, "http://from-file:8080");
        assert_eq!(s.name, "flagname");
        assert_eq!(s.threads, Some(3));
        assert!(!format!("{s:?}").contains("tok\""));
        assert_eq!(s.gpu_memory, MemoryBudget::default());
        std::fs::write(
            &file,
            "server = \"https://from-file:8080\"\ngpu_memory = \"6G\"\n",
        )
        .unwrap();
        let from_file = |gpu_memory| {
            Settings::resolve(RunArgs {
                config: Some(file.clone()),
                gpu_memory,
                ..RunArgs::default()
            })
        };
        assert_eq!(
            from_file(None).unwrap().gpu_memory,
            MemoryBudget::Bytes(6 << 30)
        );
        assert_eq!(
            from_file(Some(MemoryBudget::FreeShare(0.25)))
                .unwrap()
                .gpu_memory,
            MemoryBudget::FreeShare(0.25)
        );
        std::fs::write(&file, "server = \"https://x\"\ngpu_memory = \"lots\"\n").unwrap();
        let e = format!("{:#}", from_file(None).unwrap_err());
        assert!(
            e.contains("gpu_memory") && e.contains("not a memory budget"),
            "{e}"
        );
        std::fs::write(&file, "sever = \"typo\"\n").unwrap();
        assert!(Settings::resolve(RunArgs {
            config: Some(file.clone()),
            server: Some("http://x".into()),
            ..RunArgs::default()
        })
        .is_err());
        assert!(Settings::resolve(RunArgs::default()).is_err());
        assert!(Settings::resolve(RunArgs {
            server: Some("ftp://x".into()),
            ..RunArgs::default()
        })
        .is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plain_http_is_refused_off_this_machine_unless_asked() {
        let with = |server: &str, insecure_http: bool| {
            Settings::resolve(RunArgs {
                server: Some(server.into()),
                insecure_http,
                ..RunArgs::default()
            })
        };
        let err = with("http://coordinator.example:8080", false).unwrap_err();
        assert!(err.to_string().contains("--insecure-http"), "{err}");
        assert!(with("http://coordinator.example:8080", true).is_ok());
        assert!(with("https://coordinator.example", false).is_ok());
        for local in [
            "http://127.0.0.1:8080",
            "http://localhost:8080",
            "http://[::1]:8080",
        ] {
            assert!(with(local, false).is_ok(), "{local}");
        }
    }
}
