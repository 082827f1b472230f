//! `tmd-worker run`: the daemon. Registers once, then leases units, computes them with the
//! engine, heartbeats, spools each result to disk before posting it, and repeats, keeping the
//! engine busy: units are computed several at a time while earlier results are posted in
//! batches (`post.rs`) and the next lease is asked for before the current one runs out
//! (`pipeline.rs`). The back end starts (a GPU's self-test) while the first lease is asked
//! for. A server that is down is waited for; a first SIGTERM/Ctrl-C finishes the
//! units in flight and releases the rest of the leases, a second one exits at once (the
//! leases then expire on the server).

mod ahead;
mod backoff;
mod client;
mod coordinator;
mod dispatch;
mod engine;
#[cfg(test)]
mod fixtures;
mod held;
mod lease;
mod misbehave;
mod pipeline;
mod post;
mod settings;
mod spool;
#[cfg(test)]
mod tests;

use crate::state::{Credentials, LeaseState, StateDir, StateError};
use anyhow::{bail, Context, Result};
use backoff::Backoff;
use client::{Client, ClientError};
use held::Held;
use pipeline::Pipeline;
pub use pipeline::{DeviceLost, DEVICE_LOST_EXIT};
use post::{PostWatch, Poster};
pub use settings::{RunArgs, Settings};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::{error, info, warn};

/// The coordinator quarantined this worker: restarting will not help (exit status
/// [`QUARANTINED_EXIT`], which the systemd unit does not restart on).
#[derive(Debug, thiserror::Error)]
#[error("the coordinator quarantined this worker; ask its admin to look and reinstate it. {0}")]
pub struct Quarantined(String);

/// Exit status of `tmd-worker run` when quarantined.
pub const QUARANTINED_EXIT: i32 = 3;

/// The coordinator does not serve this worker's engine version: restarting the same build
/// will not help (exit status [`ENGINE_REFUSED_EXIT`], which the systemd unit does not
/// restart on).
#[derive(Debug, thiserror::Error)]
#[error("the coordinator does not serve this worker's engine version: {0}")]
pub struct EngineRefused(String);

/// Exit status of `tmd-worker run` when its engine version is refused.
pub const ENGINE_REFUSED_EXIT: i32 = 5;

const RUNNING: u8 = 0;
const FINISHING: u8 = 1;

/// Shared between the loop, the signal handler and the status line.
pub struct Shared {
    phase: AtomicU8,
    wake: Notify,
    units_done: AtomicU64,
    arguments_done: AtomicU64,
    /// Nanoseconds with at least one unit in the engine.
    busy_ns: AtomicU64,
    /// Nanoseconds of units in their slots, added up.
    unit_ns: AtomicU64,
    /// Units computed at once (the pipeline may raise it once the back end is known).
    slots: AtomicUsize,
    started: Instant,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            phase: AtomicU8::new(RUNNING),
            wake: Notify::new(),
            units_done: AtomicU64::new(0),
            arguments_done: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            unit_ns: AtomicU64::new(0),
            slots: AtomicUsize::new(1),
            started: Instant::now(),
        }
    }

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

    fn add_busy(&self, d: Duration) {
        self.busy_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    fn unit_done(&self, arguments: u64, seconds: f64) {
        self.units_done.fetch_add(1, Ordering::SeqCst);
        self.arguments_done.fetch_add(arguments, Ordering::SeqCst);
        self.unit_ns
            .fetch_add((seconds * 1e9) as u64, Ordering::Relaxed);
    }

    /// Percent of `slots` × the time since start that units spent in their slots.
    fn slot_percent(&self, slots: usize) -> f64 {
        let wall = self.started.elapsed().as_secs_f64().max(1e-9) * slots.max(1) as f64;
        100.0 * self.unit_ns.load(Ordering::Relaxed) as f64 * 1e-9 / wall
    }

    /// Percent of the time since start with a unit in the engine.
    fn busy_percent(&self) -> f64 {
        let wall = self.started.elapsed().as_nanos().max(1) as f64;
        100.0 * self.busy_ns.load(Ordering::Relaxed) as f64 / wall
    }
}

pub fn run(args: RunArgs) -> Result<()> {
    let dry_run = args.dry_run;
    let settings = Settings::resolve(args)?;
    if dry_run {
        print!("{}", settings.describe());
        return settings.check_token();
    }
    // Before any request: a placeholder or missing token is said here, not as the server's 401.
    settings.check_token()?;
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

/// Opens the state directory, waiting (a bounded time, saying why) for a predecessor that
/// still holds it.
async fn open_state(settings: &Settings) -> Result<StateDir> {
    let root = settings.state_dir.clone();
    let wait = settings.state_lock_wait;
    let opened = tokio::task::spawn_blocking(move || {
        StateDir::open_waiting(&root, wait, Duration::from_secs(5), |waited| {
            warn!(
                state_dir = %root.display(),
                waited_s = waited.as_secs(),
                limit_s = wait.as_secs(),
                "another tmd-worker holds the state directory (a predecessor still exiting?); waiting for it"
            )
        })
    })
    .await?;
    match opened {
        Err(e @ StateError::Locked(_)) => Err(anyhow::Error::new(e).context(format!(
            "gave up after waiting {} s (--state-lock-wait)",
            wait.as_secs()
        ))),
        other => Ok(other?),
    }
}

async fn daemon(settings: Settings) -> Result<()> {
    // Signals are taken in hand first: a SIGTERM while the state directory is still held by a
    // predecessor (a restart right after a crash) must end this process cleanly, not kill it.
    let shared = Arc::new(Shared::new());
    spawn_signal_handler(shared.clone());
    let state = open_state(&settings).await?;
    if shared.finishing() {
        info!("asked to stop before starting; nothing was taken");
        return Ok(());
    }
    info!(server = %settings.server, state_dir = %state.root().display(), name = %settings.name, engine_version = tmd_kernels::ENGINE_VERSION, "tmd-worker starting");
    spawn_status(shared.clone(), settings.status_every);

    // The back end (a GPU's opening and self-test) starts now and is awaited by the pipeline
    // while it registers and asks for the first lease: start-up off the critical path. No
    // unit starts before it is ready.
    let opening = {
        let s = settings.clone();
        tokio::task::spawn_blocking(move || engine::open_backend(&s))
    };
    let client = login(&settings, &state, &shared).await?;
    let Some(client) = client else {
        return Ok(());
    };
    let held = Arc::new(Held::new(state));
    let poster = Poster::start(client.clone(), held.clone());
    let watch = poster.watch();
    let resumed = resume(&held, &poster).await?;
    let slots = settings
        .units_in_flight
        .unwrap_or_else(rayon::current_num_threads)
        .max(1);
    info!(
        units_in_flight = slots,
        lease_seconds = settings.lease_seconds,
        "computing"
    );
    shared.slots.store(slots, Ordering::SeqCst);
    let pipeline = Pipeline {
        coord: client,
        held: held.clone(),
        poster,
        shared: shared.clone(),
        settings,
        slots,
    };
    let outcome = pipeline.run(resumed, opening).await;
    // Said after the run, never instead of its outcome: a state directory that failed is the
    // pipeline's error to report, not this count's.
    report_spool(&held, &watch);
    report_stopped(&shared, &watch);
    outcome
}

/// The run's account: units computed, results posted and how busy the engine was.
fn report_stopped(shared: &Shared, watch: &PostWatch) {
    let (requests, posted) = watch.counts();
    info!(
        units = shared.units_done.load(Ordering::SeqCst),
        results_posted = posted,
        result_requests = requests,
        engine_busy_percent = format!("{:.1}", shared.busy_percent()),
        slot_use_percent = format!(
            "{:.1}",
            shared.slot_percent(shared.slots.load(Ordering::SeqCst))
        ),
        uptime_s = format!("{:.1}", shared.started.elapsed().as_secs_f64()),
        "tmd-worker stopped"
    );
}

/// Takes the leases of an earlier run in hand before its spooled results are queued for the
/// poster: an accepted result then enters its lease's `done` set before it leaves the spool.
async fn resume(held: &Held, poster: &Poster) -> Result<Vec<LeaseState>> {
    let mut resumed = held.state.leases()?;
    for ls in &mut resumed {
        let spooled = held.state.spooled_units(ls.lease.lease_id)?;
        ls.done.extend(spooled);
        held.insert(ls.clone())?;
    }
    for e in held.state.spool()? {
        poster.submit(e).await;
    }
    Ok(resumed)
}

/// Says what stays in the spool at the end: results not accepted yet, and results accepted
/// whose units could not be written down as done.
fn report_spool(held: &Held, watch: &PostWatch) {
    let spool = match held.state.spool() {
        Ok(spool) => spool,
        Err(e) => {
            warn!(error = %e, "cannot read the spool");
            return;
        }
    };
    let accepted = watch.unrecorded().min(spool.len() as u64);
    let waiting = spool.len() as u64 - accepted;
    if waiting > 0 {
        warn!(results = waiting, state_dir = %held.state.root().display(), "results the server has not accepted yet stay in the spool and are posted at the next start");
    }
    if accepted > 0 {
        warn!(results = accepted, state_dir = %held.state.root().display(), "results the server accepted stay in the spool (their units could not be written down as done); the next start posts them again and they are answered replayed");
    }
}

/// The client with this worker's own token: from the state directory, or by registering with
/// the enrollment token. `None` when asked to stop while waiting for the server.
async fn login(settings: &Settings, state: &StateDir, shared: &Shared) -> Result<Option<Client>> {
    let anonymous = Client::new(&settings.server, None, settings.ca_cert.as_deref())?;
    if let Some(c) = state.credentials()? {
        if c.server == settings.server {
            return Ok(Some(anonymous.with_token(c.token)));
        }
        let Some(known) = known_at(&anonymous, &c, shared).await? else {
            return Ok(None);
        };
        if known {
            // Another replica of the same coordinator (one database): the same worker, with
            // its leases and its spooled results.
            info!(worker.id = c.worker_id, old = %c.server, new = %settings.server, "the server knows this worker: keeping its identity, leases and spooled results");
            state.save_credentials(&Credentials {
                server: settings.server.clone(),
                ..c.clone()
            })?;
            return Ok(Some(anonymous.with_token(c.token)));
        }
        let (leases, spooled) = (state.leases()?.len(), state.spool()?.len());
        if leases + spooled > 0 {
            bail!(
                "{} does not know this worker (registered at {}), and the state directory {} holds \
                 {leases} leases and {spooled} results not yet accepted there: point --server back \
                 at {} (or at another replica on its database) until they are posted, or give \
                 this worker another --state-dir",
                settings.server,
                c.server,
                state.root().display(),
                c.server
            );
        }
        warn!(old = %c.server, new = %settings.server, "the server does not know this worker; registering again");
    }
    register(settings, state, &anonymous, shared).await
}

/// Registers with the enrollment token and keeps the worker's own token. `None` when asked to
/// stop while waiting for the server.
async fn register(
    settings: &Settings,
    state: &StateDir,
    anonymous: &Client,
    shared: &Shared,
) -> Result<Option<Client>> {
    let Some(enrollment) = settings.enrollment_token.as_deref() else {
        bail!("this worker is not registered yet: pass --token with an enrollment token from the admin (`tmd-server token create`)");
    };
    settings::check_enrollment_token(enrollment)?;
    let answer = until_answered(shared, "register", || {
        anonymous.register(enrollment, &settings.name)
    });
    let reg = match answer.await {
        None => return Ok(None),
        Some(Ok(reg)) => reg,
        Some(Err(ClientError::Misconfigured(m))) => bail!("cannot register: {m}"),
        Some(Err(e)) => bail!("registration refused: {e}"),
    };
    state.save_credentials(&Credentials {
        server: settings.server.clone(),
        worker_id: reg.worker_id,
        token: reg.token.clone(),
    })?;
    info!(worker.id = reg.worker_id, "registered");
    Ok(Some(anonymous.with_token(reg.token)))
}

/// Whether the server of `anonymous` knows the worker of credentials `c` (made at another
/// URL): `Some(true)` when its token names the same worker there, `Some(false)` when the token
/// is unknown, `None` when asked to stop while waiting for the server. Asked with the token's
/// SHA-256 only: until the server shows it knows this worker, it may be any server (a typo,
/// or a hostile one), and the token would let it post results as this worker.
async fn known_at(anonymous: &Client, c: &Credentials, shared: &Shared) -> Result<Option<bool>> {
    let answer = until_answered(shared, "ask whether it knows this worker", || {
        anonymous.identify_token(&c.token)
    });
    match answer.await {
        None => Ok(None),
        Some(Ok(me)) => Ok(Some(me.is_some_and(|me| me.worker_id == c.worker_id))),
        Some(Err(e)) => bail!("cannot ask {} whether it knows this worker: {e}", c.server),
    }
}

/// Asks the server until it answers, waiting while it is unavailable (the log says what for):
/// `None` when asked to stop meanwhile.
async fn until_answered<T, F: Future<Output = Result<T, ClientError>>>(
    shared: &Shared,
    waiting_to: &str,
    mut ask: impl FnMut() -> F,
) -> Option<Result<T, ClientError>> {
    let mut backoff = Backoff::new();
    loop {
        match ask().await {
            Err(ClientError::Unavailable {
                message,
                retry_after,
            }) => {
                let wait = backoff.next(retry_after);
                warn!(%message, retry_in_ms = wait.as_millis() as u64, "server unavailable; waiting to {waiting_to}");
                shared.sleep(wait).await;
                if shared.finishing() {
                    return None;
                }
            }
            answer => return Some(answer),
        }
    }
}

/// Listens for SIGTERM and Ctrl-C. The SIGTERM handler is installed before this returns (not
/// in the spawned task), so no signal in between falls to the default action.
fn spawn_signal_handler(shared: Arc<Shared>) {
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    tokio::spawn(async move {
        let mut term = match term {
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
        let mut last = Snapshot::of(&shared);
        loop {
            tokio::time::sleep(every).await;
            let now = Snapshot::of(&shared);
            let (arguments_per_s, busy_percent) = now.rates_since(&last);
            info!(
                units_done = now.units,
                arguments_per_s = format!("{arguments_per_s:.3e}"),
                engine_busy_percent = format!("{busy_percent:.1}"),
                over_s = format!("{:.0}", now.at.duration_since(last.at).as_secs_f64()),
                uptime_s = shared.started.elapsed().as_secs(),
                "status"
            );
            last = now;
        }
    });
}

/// The counters at one status line: the next line's rates are those of the time between
/// them, not averages since start (which mix a day's idle hours into a busy minute).
struct Snapshot {
    at: Instant,
    units: u64,
    arguments: u64,
    busy_ns: u64,
}

impl Snapshot {
    fn of(shared: &Shared) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            units: shared.units_done.load(Ordering::SeqCst),
            arguments: shared.arguments_done.load(Ordering::SeqCst),
            busy_ns: shared.busy_ns.load(Ordering::Relaxed),
        }
    }

    /// Arguments per second and percent of the time busy since `earlier`.
    fn rates_since(&self, earlier: &Snapshot) -> (f64, f64) {
        let secs = self.at.duration_since(earlier.at).as_secs_f64().max(1e-9);
        let arguments = self.arguments.saturating_sub(earlier.arguments) as f64;
        let busy = self.busy_ns.saturating_sub(earlier.busy_ns) as f64 * 1e-9;
        (arguments / secs, (100.0 * busy / secs).min(100.0))
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;

    #[test]
    fn status_rates_are_those_of_the_last_interval() {
        let t0 = Instant::now();
        // An hour idle, then a fully busy minute: the line after that minute says 100%, not
        // the 1.6% an average since start would.
        let idle = Snapshot {
            at: t0 + Duration::from_secs(3600),
            units: 0,
            arguments: 0,
            busy_ns: 0,
        };
        let busy = Snapshot {
            at: t0 + Duration::from_secs(3660),
            units: 60,
            arguments: 60 << 40,
            busy_ns: 60_000_000_000,
        };
        let (rate, percent) = busy.rates_since(&idle);
        assert_eq!(percent, 100.0);
        assert!((rate - (1u64 << 40) as f64).abs() < 1.0, "{rate}");
        assert_eq!(idle.rates_since(&idle).0, 0.0);
    }
}
