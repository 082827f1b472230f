//! The daemon's work loop: keeps the engine busy across leases. The units of a lease are handed
//! to the engine as soon as it is ready, and at most `slots` jobs on the engine's thread pool
//! take them one after the other (`dispatch.rs`: each unit on the pool, as `tmd-worker search`
//! runs them, so one unit's CPU stages overlap the others' kernels on every device, and a job
//! starts its next unit on its own thread the moment it ends one). Each result is spooled
//! (written and synced, with the results that arrived during the previous group's sync) on a
//! blocking thread and queued for the poster. On the CPU one unit per engine thread is in
//! flight: more interleave on the same cores and cost CPU time (docs/benchmarks-history.md).
//! The next lease is asked for while the current one's last few seconds of work
//! run (its units queue behind the current ones), every lease in hand is heartbeaten, and a
//! lease whose units are all computed is closed in the background: its results settled, its
//! unfinished or failed units released.
//!
//! Start-up: the back end (a GPU's opening and self-test, about a second) comes as a task
//! that runs while the first lease is asked for; no unit starts before it is ready, so no
//! unit is computed on a device that has not passed its self-test. A back end that fails to
//! start, or a device whose context is lost later (a sticky CUDA error), stops the daemon:
//! nothing new starts, what is computed is posted, every unit in hand goes back unfinished,
//! and the run ends with an error ([`DeviceLost`] for the second) so that systemd starts a
//! fresh process, which tests the device again.

use super::coordinator::Coordinator;
use super::dispatch::{Dispatch, Finished, Job, Work};
use super::engine::{engine_unit, failure_reason, one_line, warm_up, SharedBackend};
use super::post::{Held, PostWatch, Poster};
use super::settings::Settings;
use super::{EngineRefused, Quarantined, Shared};
use crate::backoff::{self, Backoff};
use crate::client::ClientError;
use crate::misbehave::Misbehave;
use crate::state::{LeaseState, SpoolEntry, StateDir};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tmd_kernels::numbers::format::Format;
use tmd_kernels::search::SearchConfig;
use tmd_kernels::{Function, Precision};
use tmd_wire::{codes, CampaignState, Lease, LeaseResponse, LeasedUnit, ReleaseLease};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, error, info, warn};

/// A device's context was lost while computing (exit status [`DEVICE_LOST_EXIT`]): the units
/// in hand were given back, and a new process may test and use the device again.
#[derive(Debug, thiserror::Error)]
#[error("a GPU was lost while computing, its units given back: {0}")]
pub struct DeviceLost(pub String);

/// Exit status of `tmd-worker run` after a lost device (the systemd unit restarts it).
pub const DEVICE_LOST_EXIT: i32 = 4;

/// The back end being opened and self-tested, as the pipeline receives it.
pub type Opening = JoinHandle<Result<SharedBackend>>;

/// Ask for the next lease when the work in hand falls below this many seconds at the
/// measured speed: a lease request takes milliseconds, a unit on a GPU a fraction of a second.
pub const PREFETCH_SECONDS: f64 = 5.0;
/// Leases held at once: the one being computed and the next.
const MAX_HELD: usize = 2;
/// The longest a lease's end waits for its results to be taken before releasing it.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);
/// The longest a lease request waits for the results before it to be posted: a server that
/// does not take them now still gets the request.
const SETTLE_BEFORE_LEASE: Duration = Duration::from_secs(2);

/// Results per slot a spool group takes before it is synced without waiting for more: half
/// of what may wait for the spool (`SPOOLING_PER_SLOT`), so the next group fills while one
/// syncs and no unit waits for a free place.
pub const SPOOL_GROUP_PER_SLOT: usize = super::dispatch::SPOOLING_PER_SLOT / 2;
/// The longest a result waits for others to share its group's sync. A sync per result cost
/// the CPU daemon 3-7% of its CPU; a result is posted in a batch seconds later, so
/// this delays nothing the server waits for.
const SPOOL_LINGER: Duration = Duration::from_millis(50);

/// Whether the results waiting for the spool (`waiting`, the first of them for `oldest`) are
/// synced now, with `in_flight` units between their hand-over and their spooling: the group
/// is full, its first result has waited long enough, no other result is coming (every unit
/// in flight is waiting), or `hurry`: the daemon stops, or no result is spooled yet (the
/// next lease is asked for once a first result measures the speed, and the cores would idle
/// at the end of the small first lease while it lingered).
fn group_ready(
    waiting: usize,
    oldest: Duration,
    in_flight: usize,
    slots: usize,
    hurry: bool,
) -> bool {
    waiting > 0
        && (waiting >= SPOOL_GROUP_PER_SLOT * slots
            || oldest >= SPOOL_LINGER
            || waiting >= in_flight
            || hurry)
}

/// Flags the heartbeat task raises for its lease.
#[derive(Default)]
pub struct LeaseFlags {
    pub lost: AtomicBool,
    pub stop: AtomicBool,
}

fn spawn_heartbeat<C: Coordinator>(
    coord: C,
    lease: &Lease,
    flags: Arc<LeaseFlags>,
) -> JoinHandle<()> {
    let (id, token) = (lease.lease_id, lease.fencing_token);
    let every = Duration::from_secs(lease.heartbeat_seconds.max(1) as u64);
    tokio::spawn(async move {
        let mut backoff = Backoff::new();
        let mut wait = every;
        loop {
            tokio::time::sleep(wait).await;
            match coord.heartbeat(id, token).await {
                Ok(hb) => {
                    backoff.reset();
                    wait = every;
                    if matches!(
                        hb.campaign_state,
                        CampaignState::Cancelled | CampaignState::Paused
                    ) && !flags.stop.swap(true, Ordering::SeqCst)
                    {
                        info!(
                            lease.id = id,
                            state = hb.campaign_state.as_str(),
                            "campaign stopped; finishing the units in flight"
                        );
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
                    warn!(lease.id = id, error = %e, "the lease is gone; finishing the units in flight");
                    flags.lost.store(true, Ordering::SeqCst);
                    return;
                }
            }
        }
    })
}

/// A lease in hand.
struct Active {
    lease: Arc<Lease>,
    cfg: SearchConfig,
    flags: Arc<LeaseFlags>,
    heartbeat: Option<JoinHandle<()>>,
    /// Units not started yet.
    queue: VecDeque<LeasedUnit>,
    running: usize,
    /// Units computed (here or by an earlier run).
    finished: BTreeSet<i64>,
    failed: Vec<i64>,
    failures: Vec<String>,
}

enum Outcome {
    Spooled(SpoolEntry, usize),
    Failed(String),
    DeviceLost(String),
    SpoolFailed(String),
}

struct Computed {
    lease_id: i64,
    unit_id: i64,
    arguments: u64,
    elapsed: f64,
    outcome: Outcome,
}

/// Writes computed results to the spool as one group: disk first (one file, one sync), so
/// that once spooled a result survives a crash and is posted later. Runs on a blocking
/// thread, not the engine's pool: a write and its fsync must not hold a core the next unit
/// could compute on. Results that failed to compute pass through as they are.
fn spool(
    group: Vec<Finished>,
    state: &StateDir,
    misbehave: Option<Misbehave>,
) -> (Vec<Computed>, Duration) {
    let t = Instant::now();
    let entries: Vec<&SpoolEntry> = group
        .iter()
        .filter_map(|f| match &f.work {
            Work::Done(entry, _) => Some(entry),
            _ => None,
        })
        .collect();
    let written = state.spool_put_all(&entries).map_err(|e| e.to_string());
    let took = t.elapsed();
    if written.is_ok() && misbehave == Some(Misbehave::Late) {
        if let Some(expires_at) = group.iter().map(|f| f.lease.expires_at).max() {
            let overdue = (expires_at - chrono::Utc::now()).num_milliseconds() + 1000;
            std::thread::sleep(Duration::from_millis(overdue.max(0) as u64));
        }
    }
    let computed = group
        .into_iter()
        .map(|f| {
            let outcome = match (f.work, &written) {
                (Work::Done(entry, hr_cases), Ok(())) => Outcome::Spooled(entry, hr_cases),
                (Work::Done(..), Err(e)) => Outcome::SpoolFailed(e.clone()),
                (Work::Failed(why), _) => Outcome::Failed(why),
                (Work::DeviceLost(why), _) => Outcome::DeviceLost(why),
            };
            Computed {
                lease_id: f.lease.lease_id,
                unit_id: f.unit_id,
                arguments: f.arguments,
                elapsed: f.elapsed,
                outcome,
            }
        })
        .collect();
    (computed, took)
}

pub struct Pipeline<C: Coordinator> {
    pub coord: C,
    pub held: Arc<Held>,
    pub poster: Poster,
    pub shared: Arc<Shared>,
    pub settings: Settings,
    /// Units computed at once.
    pub slots: usize,
}

/// Why the loop stops taking new work.
#[derive(Debug, Clone, PartialEq)]
enum Stop {
    Signal,
    Limit,
    Idle,
    Quarantined(String),
    /// The coordinator does not serve this engine version.
    EngineRefused(String),
    /// The back end did not start.
    Engine(String),
    /// A device's context was lost.
    DeviceLost(String),
    /// The state directory failed (deleted, disk full): a result could not be spooled.
    State(String),
}

async fn join_lease(
    h: &mut Option<JoinHandle<Result<LeaseResponse, ClientError>>>,
) -> Result<LeaseResponse, ClientError> {
    match h {
        Some(h) => h.await.unwrap_or_else(|e| {
            Err(ClientError::Protocol(format!(
                "the lease request failed: {e}"
            )))
        }),
        None => std::future::pending().await,
    }
}

async fn join_opening(h: &mut Option<Opening>) -> Result<SharedBackend> {
    match h {
        Some(h) => h
            .await
            .unwrap_or_else(|e| Err(anyhow!("starting the back end failed: {e}"))),
        None => std::future::pending().await,
    }
}

impl<C: Coordinator> Pipeline<C> {
    /// Takes a lease in hand: writes it down, starts its heartbeat, queues its units not yet
    /// finished (in its `done` set or in the spool).
    fn activate(&self, mut ls: LeaseState) -> Result<Active> {
        let lease = Arc::new(ls.lease.clone());
        let task = &lease.task;
        let function: Function = task.function.parse().with_context(|| {
            format!("the server leased an unknown function '{}'", task.function)
        })?;
        let precision = Precision::new(task.precision)?;
        // A named format judges results on its real grid (subnormal results, overflow and
        // underflow skipped and reported); without one the exponent is unbounded.
        let format = match &task.format {
            None => Format::bare(precision),
            Some(name) => Format::named(name)
                .filter(|f| f.precision == precision)
                .with_context(|| {
                    format!(
                        "the server leased format '{name}' with precision {}, which this worker \
                         does not know",
                        task.precision
                    )
                })?,
        };
        let cfg = SearchConfig::in_format(function, format, task.min_bits);
        let spooled = self.held.state.spooled_units(lease.lease_id)?;
        ls.done.extend(spooled);
        let finished = ls.done.clone();
        self.held.insert(ls)?;
        let flags = Arc::new(LeaseFlags::default());
        let late = self.settings.misbehave == Some(Misbehave::Late);
        let heartbeat = (!late).then(|| spawn_heartbeat(self.coord.clone(), &lease, flags.clone()));
        let queue = lease
            .units
            .iter()
            .filter(|u| !finished.contains(&u.unit_id))
            .cloned()
            .collect::<VecDeque<_>>();
        // The first lease's GPU modules compile while the GPU opens and self-tests.
        let first: Vec<_> = queue.iter().take(self.slots).map(engine_unit).collect();
        warm_up(&self.settings, &cfg, &first);
        Ok(Active {
            lease,
            cfg,
            flags,
            heartbeat,
            queue,
            running: 0,
            finished,
            failed: Vec::new(),
            failures: Vec::new(),
        })
    }

    /// Runs until the work is done or the daemon stops; `opening` is the back end, still
    /// starting: it is awaited in the loop while the first lease is asked for.
    pub async fn run(self, resumed: Vec<LeaseState>, opening: Opening) -> Result<()> {
        let mut opening = Some(opening);
        let mut backend: Option<SharedBackend> = None;
        let mut leases: Vec<Active> = Vec::new();
        for ls in resumed {
            let a = self.activate(ls)?;
            info!(
                lease.id = a.lease.lease_id,
                done = a.finished.len(),
                left = a.queue.len(),
                "resuming the lease in hand"
            );
            leases.push(a);
        }
        let watch = self.poster.watch();
        // Units from their hand-over to the engine to their result spooled are counted in their
        // lease's `running`. The engine's own threads take the units handed over (`Dispatch`),
        // one after the other, and send each result back on `results`. Results wait in
        // `unspooled` while `spooling` writes and syncs the group before them: one group at a
        // time, so the results that arrive during one sync share the next (group commit).
        let mut spooling: JoinSet<(Vec<Computed>, Duration)> = JoinSet::new();
        let mut unspooled: Vec<Finished> = Vec::new();
        let mut unspooled_since = Instant::now();
        let (results_tx, mut results) = tokio::sync::mpsc::unbounded_channel::<Finished>();
        let mut dispatch: Option<Arc<Dispatch>> = None;
        let mut closing: JoinSet<()> = JoinSet::new();
        let mut asking: Option<JoinHandle<Result<LeaseResponse, ClientError>>> = None;
        let mut next_ask = Instant::now();
        let mut backoff = Backoff::new();
        let mut stop: Option<Stop> = None;
        let mut started: u64 = 0;
        // Seconds one unit takes in its slot (a moving average): what the work in hand is
        // worth in time.
        let mut unit_secs: Option<f64> = None;
        let mut last_tick = Instant::now();
        // A lease request answered "no work" while work was in hand (the server caps what one
        // worker holds, or the units left are this worker's own): asked again as soon as the
        // work in hand is done and settled, not a whole retry interval later.
        let mut refused_in_hand = false;
        // Results spooled, and the groups (synced writes) they took.
        let (mut spooled, mut spool_groups) = (0u64, 0u64);
        // Time the groups took to write and sync, in all and the longest.
        let (mut spool_sync, mut spool_sync_max) = (Duration::ZERO, Duration::ZERO);
        loop {
            let now = Instant::now();
            let in_flight: usize = leases.iter().map(|a| a.running).sum();
            if in_flight > 0 {
                self.shared.add_busy(now - last_tick);
            }
            last_tick = now;
            if spooling.is_empty()
                && group_ready(
                    unspooled.len(),
                    unspooled_since.elapsed(),
                    in_flight,
                    self.slots,
                    stop.is_some() || unit_secs.is_none(),
                )
            {
                spooling.spawn(self.spool_group(std::mem::take(&mut unspooled)));
            }
            while let Some(r) = closing.try_join_next() {
                if let Err(e) = r {
                    error!(error = %e, "closing a lease failed");
                }
            }
            if stop.is_none() && self.shared.finishing() {
                stop = Some(Stop::Signal);
            }
            // A post refused because the coordinator quarantined this worker: nothing more is
            // computed, whatever else was to end the run.
            if !matches!(stop, Some(Stop::Quarantined(_))) {
                if let Some(why) = watch.quarantined() {
                    error!(error = %why, "the coordinator quarantined this worker; stopping");
                    stop = Some(Stop::Quarantined(why));
                }
            }
            // Leases that stopped (lost, campaign stopped) or a daemon that stops: nothing new
            // starts; their units on the engine finish, those handed over and not started come
            // back. At the unit limit the units handed over are within the limit: they run.
            for a in &mut leases {
                let limit = matches!(stop, Some(Stop::Limit));
                if stop.is_some()
                    || a.flags.lost.load(Ordering::SeqCst)
                    || a.flags.stop.load(Ordering::SeqCst)
                {
                    a.queue.clear();
                    if let (Some(d), false) = (&dispatch, limit) {
                        a.running -= d.withdraw(a.lease.lease_id);
                    }
                }
            }
            // Nothing starts before the back end has passed its self-test; then every queued
            // unit is handed over at once, up to the unit limit.
            if let (Some(d), None) = (&dispatch, &stop) {
                for a in &mut leases {
                    let room = self
                        .settings
                        .max_units
                        .map_or(usize::MAX, |m| m.saturating_sub(started) as usize);
                    let n = a.queue.len().min(room);
                    if n == 0 {
                        continue;
                    }
                    let (lease, cfg) = (a.lease.clone(), a.cfg);
                    d.push(a.queue.drain(..n).map(|unit| Job {
                        lease: lease.clone(),
                        cfg,
                        unit,
                    }));
                    a.running += n;
                    started += n as u64;
                }
                if self.settings.max_units.is_some_and(|m| started >= m) {
                    stop = Some(Stop::Limit);
                }
            }
            // Leases with nothing queued or running are closed in the background.
            let mut i = 0;
            while i < leases.len() {
                if leases[i].queue.is_empty() && leases[i].running == 0 {
                    let a = leases.remove(i);
                    let reason = close_reason(&a, stop.as_ref());
                    closing.spawn(close_lease(
                        self.coord.clone(),
                        self.held.clone(),
                        watch.clone(),
                        a,
                        reason,
                    ));
                } else {
                    i += 1;
                }
            }
            if stop.is_some() && leases.is_empty() && spooling.is_empty() && asking.is_none() {
                break;
            }
            let queued: usize = leases.iter().map(|a| a.queue.len()).sum::<usize>()
                + dispatch.as_ref().map_or(0, |d| d.waiting());
            let in_hand: usize = leases.iter().map(|a| a.queue.len() + a.running).sum();
            if refused_in_hand && leases.is_empty() && spooling.is_empty() && closing.is_empty() {
                refused_in_hand = false;
                next_ask = Instant::now();
            }
            // Before its first result the worker is not measured, and the server would answer
            // with another small first lease: it asks once that result is queued (and posted
            // first, below), unless what it holds cannot fill its slots.
            let low = match unit_secs {
                Some(s) => in_hand as f64 * s / self.slots as f64 <= PREFETCH_SECONDS,
                None => queued == 0 && in_hand < self.slots,
            };
            if stop.is_none()
                && asking.is_none()
                && leases.len() < MAX_HELD
                && low
                && Instant::now() >= next_ask
            {
                let coord = self.coord.clone();
                let seconds = self.settings.lease_seconds;
                let slots = self.slots as u32;
                let watch = watch.clone();
                asking = Some(tokio::spawn(async move {
                    // The results computed so far go first: the server sizes the lease by the
                    // speed they measure, and counts what this worker holds without the units
                    // they finish. Asked before them, a worker not yet measured got another
                    // small first lease, or none (its cap of units in hand), and its cores
                    // idled until the next request.
                    watch.settle_queued(SETTLE_BEFORE_LEASE).await;
                    coord.lease(Some(seconds), slots).await
                }));
            }
            // Woken by a unit, a lease answer or closed, the back end ready or a signal;
            // otherwise soon enough to see a lost lease, and at the time the next lease may be
            // asked for.
            let until_ask = next_ask.saturating_duration_since(Instant::now());
            let mut tick = if until_ask.is_zero() {
                Duration::from_millis(250)
            } else {
                until_ask.clamp(Duration::from_millis(10), Duration::from_millis(250))
            };
            if !unspooled.is_empty() && spooling.is_empty() {
                let linger = SPOOL_LINGER.saturating_sub(unspooled_since.elapsed());
                tick = tick.min(linger.max(Duration::from_millis(1)));
            }
            tokio::select! {
                Some(f) = results.recv() => {
                    if unspooled.is_empty() {
                        unspooled_since = Instant::now();
                    }
                    unspooled.push(f);
                    while let Ok(f) = results.try_recv() {
                        unspooled.push(f);
                    }
                }
                Some(joined) = spooling.join_next(), if !spooling.is_empty() => {
                    let (group, took) = joined.map_err(|e| anyhow!("a unit's task failed: {e}"))?;
                    spool_groups += 1;
                    spool_sync += took;
                    spool_sync_max = spool_sync_max.max(took);
                    for c in group {
                        if let Some(d) = &dispatch {
                            d.spooled();
                        }
                        let a = leases
                            .iter_mut()
                            .find(|a| a.lease.lease_id == c.lease_id)
                            .expect("a lease with units in flight is held");
                        a.running -= 1;
                        match c.outcome {
                            Outcome::Spooled(entry, hr_cases) => {
                                spooled += 1;
                                a.finished.insert(c.unit_id);
                                self.shared.unit_done(c.arguments, c.elapsed);
                                // Debug: one line per unit is hundreds of thousands a day
                                // per GPU; the status line sums them.
                                debug!(
                                    unit.id = c.unit_id,
                                    duration_ms = (c.elapsed * 1e3) as u64,
                                    hr_cases,
                                    "unit computed"
                                );
                                unit_secs = Some(match unit_secs {
                                    Some(s) => 0.8 * s + 0.2 * c.elapsed,
                                    None => c.elapsed,
                                });
                                self.poster.submit(entry).await;
                            }
                            Outcome::Failed(why) => {
                                error!(unit.id = c.unit_id, error = %why, "the engine failed on this unit; giving it back");
                                a.failed.push(c.unit_id);
                                a.failures.push(format!("unit {}: {why}", c.unit_id));
                            }
                            Outcome::DeviceLost(why) => {
                                // Neither finished nor failed: released unfinished with the rest.
                                if !matches!(stop, Some(Stop::DeviceLost(_) | Stop::Quarantined(_) | Stop::EngineRefused(_))) {
                                    error!(unit.id = c.unit_id, error = %why, "a GPU is lost: stopping, and giving back every unit in hand");
                                    stop = Some(Stop::DeviceLost(why));
                                }
                            }
                            Outcome::SpoolFailed(e) => {
                                // Nothing computed from now on could survive a crash: stop, post
                                // what is queued, and give every unit in hand back (this one too),
                                // instead of leaving them to the lease's expiry.
                                if !matches!(stop, Some(Stop::State(_))) {
                                    error!(unit.id = c.unit_id, error = %e, "cannot spool a result: stopping, and giving back every unit in hand");
                                    stop = Some(Stop::State(format!("cannot spool the result of unit {}: {e}", c.unit_id)));
                                }
                            }
                        }
                    }
                }
                // A lease closed: at the end of the work the next request waits for it.
                Some(r) = closing.join_next(), if !closing.is_empty() => {
                    if let Err(e) = r {
                        error!(error = %e, "closing a lease failed");
                    }
                }
                r = join_opening(&mut opening) => {
                    opening = None;
                    match r {
                        Ok(b) => {
                            info!(backend = %b.name(), "engine ready");
                            dispatch = Some(Dispatch::new(
                                self.slots,
                                b.clone(),
                                self.settings.misbehave,
                                results_tx.clone(),
                            ));
                            backend = Some(b);
                        }
                        Err(e) => {
                            error!(error = %e, "the back end did not start: giving back every unit in hand");
                            stop = Some(Stop::Engine(format!("{e:#}")));
                        }
                    }
                }
                r = join_lease(&mut asking) => {
                    asking = None;
                    match r {
                        Ok(resp) => {
                            backoff.reset();
                            match resp.lease {
                                Some(lease) => {
                                    info!(lease.id = lease.lease_id, campaign.id = lease.task.campaign_id, units = lease.units.len(), function = %lease.task.function, "leased");
                                    let (id, fencing_token) = (lease.lease_id, lease.fencing_token);
                                    match self.activate(LeaseState { lease, done: BTreeSet::new() }) {
                                        Ok(a) => leases.push(a),
                                        Err(e) => {
                                            // Not taken in hand: given back at once rather than
                                            // left to expire.
                                            // A state error says its cause itself.
                                            let why = one_line(&match e.downcast_ref::<crate::state::StateError>() {
                                                Some(s) => s.to_string(),
                                                None => format!("{e:#}"),
                                            });
                                            error!(lease.id = id, error = %why, "cannot take the lease in hand: giving it back");
                                            let body = ReleaseLease { fencing_token, failed_units: Vec::new(), reason: Some(format!("worker stopping: {why}")) };
                                            if let Err(r) = self.coord.release(id, &body).await {
                                                warn!(lease.id = id, error = %r, "could not release the lease; it will expire on the server");
                                            }
                                            if e.downcast_ref::<crate::state::StateError>().is_none() {
                                                return Err(e);
                                            }
                                            stop.get_or_insert(Stop::State(why));
                                        }
                                    }
                                }
                                None => {
                                    // Leases still closing hold units the server counts
                                    // as outstanding: not idle until they are settled.
                                    let idle = leases.is_empty() && spooling.is_empty() && closing.is_empty();
                                    if idle && self.settings.exit_when_idle && resp.units_outstanding == 0 {
                                        info!("no work left on the server; exiting as asked");
                                        stop = Some(Stop::Idle);
                                    } else {
                                        let wait = backoff::spread(Duration::from_secs(
                                            resp.retry_after_seconds.max(1) as u64,
                                        ));
                                        if idle {
                                            let why: Vec<&str> = resp.waiting.iter().map(|w| w.message.as_str()).collect();
                                            info!(retry_in_ms = wait.as_millis() as u64, units_outstanding = resp.units_outstanding, why = %why.join("; "), "no work now");
                                        } else {
                                            refused_in_hand = true;
                                        }
                                        next_ask = Instant::now() + wait;
                                    }
                                }
                            }
                        }
                        Err(ClientError::Unavailable { message, retry_after }) => {
                            let wait = backoff.next(retry_after);
                            warn!(%message, retry_in_ms = wait.as_millis() as u64, "server unavailable");
                            next_ask = Instant::now() + wait;
                        }
                        Err(ClientError::Misconfigured(m)) => bail!("cannot lease work: {m}"),
                        Err(e) if e.code() == Some(codes::WORKER_QUARANTINED) => {
                            error!(error = %e, "the coordinator quarantined this worker; stopping");
                            stop = Some(Stop::Quarantined(e.to_string()));
                        }
                        Err(e) if e.code() == Some(codes::ENGINE_VERSION) => {
                            error!(error = %e, "the coordinator does not serve this engine version; stopping");
                            stop = Some(Stop::EngineRefused(e.to_string()));
                        }
                        Err(e) => bail!("the server refused to lease: {e}"),
                    }
                }
                _ = tokio::time::sleep(tick) => {}
                _ = self.shared.wake.notified() => {}
            }
        }
        while let Some(r) = closing.join_next().await {
            if let Err(e) = r {
                error!(error = %e, "closing a lease failed");
            }
        }
        if spooled > 0 {
            info!(
                results = spooled,
                groups = spool_groups,
                sync_s = format!("{:.3}", spool_sync.as_secs_f64()),
                longest_sync_ms = spool_sync_max.as_millis() as u64,
                engine_held_back = dispatch.as_ref().map_or(0, |d| d.full_stops()),
                "results spooled, in groups synced once each"
            );
        }
        // What is still queued is posted now if the server takes it; the rest stays spooled.
        self.poster.close(Duration::from_secs(30)).await;
        // A quarantine learnt from the last posts outranks a stop at the unit limit or when
        // idle: the supervisor must not restart this worker.
        if !matches!(stop, Some(Stop::Quarantined(_))) {
            if let Some(why) = watch.quarantined() {
                stop = Some(Stop::Quarantined(why));
            }
        }
        if let Some(b) = &backend {
            for d in b.device_use() {
                let uptime = self.shared.started.elapsed().as_secs_f64().max(1e-9);
                info!(
                    device = d.device,
                    pieces = d.pieces,
                    busy_s = format!("{:.2}", d.busy_s),
                    busy_percent = format!("{:.1}", 100.0 * d.busy_s / uptime),
                    "device use"
                );
            }
        }
        match stop {
            Some(Stop::Quarantined(m)) => Err(Quarantined(m).into()),
            Some(Stop::EngineRefused(m)) => Err(EngineRefused(m).into()),
            Some(Stop::DeviceLost(m)) => Err(DeviceLost(m).into()),
            Some(Stop::Engine(m)) => Err(anyhow!("the back end did not start: {m}")),
            Some(Stop::State(m)) => Err(anyhow!(
                "{m}; the units in hand were given back (fix the state directory, then restart)"
            )),
            _ => Ok(()),
        }
    }

    /// Spools a group of results on a blocking thread (see [`spool`]).
    fn spool_group(
        &self,
        group: Vec<Finished>,
    ) -> impl std::future::Future<Output = (Vec<Computed>, Duration)> {
        let state = self.held.state.clone();
        let misbehave = self.settings.misbehave;
        async move {
            let keys: Vec<(i64, i64, u64, f64)> = group
                .iter()
                .map(|f| (f.lease.lease_id, f.unit_id, f.arguments, f.elapsed))
                .collect();
            match tokio::task::spawn_blocking(move || spool(group, &state, misbehave)).await {
                Ok(c) => c,
                Err(e) => (
                    keys.into_iter()
                        .map(|(lease_id, unit_id, arguments, elapsed)| Computed {
                            lease_id,
                            unit_id,
                            arguments,
                            elapsed,
                            outcome: Outcome::SpoolFailed(format!(
                                "spooling the result failed: {e}"
                            )),
                        })
                        .collect(),
                    Duration::ZERO,
                ),
            }
        }
    }
}

/// Why a lease ends with units unfinished, for the release.
fn close_reason(a: &Active, stop: Option<&Stop>) -> String {
    if !a.failures.is_empty() {
        failure_reason(&a.failures)
    } else if matches!(stop, Some(Stop::Signal)) {
        "worker stopping".into()
    } else if matches!(stop, Some(Stop::Limit)) {
        "worker stopping: its unit limit is reached".into()
    } else if let Some(Stop::DeviceLost(why)) = stop {
        one_line(&format!("worker stopping: its GPU is lost ({why})"))
    } else if let Some(Stop::State(why)) = stop {
        one_line(&format!(
            "worker stopping: its state directory failed ({why})"
        ))
    } else if let Some(Stop::Engine(why)) = stop {
        one_line(&format!(
            "worker stopping: its back end did not start ({why})"
        ))
    } else {
        "campaign stopped".into()
    }
}

/// Ends a lease whose units are all computed or given up: waits (a bounded time) for its
/// results to be taken, releases its unfinished and failed units, and forgets it.
async fn close_lease<C: Coordinator>(
    coord: C,
    held: Arc<Held>,
    watch: PostWatch,
    mut a: Active,
    reason: String,
) {
    // Every unit is computed or abandoned: the lease needs no more heartbeats, and one sent
    // after the last post would find the lease finished and report it lost.
    if let Some(h) = a.heartbeat.take() {
        h.abort();
    }
    let id = a.lease.lease_id;
    let settled = watch.settle(id, SETTLE_LIMIT).await;
    let unacceptable = watch.take_unacceptable(id);
    let reason = if a.failures.is_empty() && !unacceptable.is_empty() {
        "the server refused these units' results as unacceptable".to_string()
    } else {
        reason
    };
    a.failed.extend(unacceptable);
    let remaining = a
        .lease
        .units
        .iter()
        .filter(|u| !a.finished.contains(&u.unit_id) && !a.failed.contains(&u.unit_id))
        .count();
    let lost = a.flags.lost.load(Ordering::SeqCst);
    if (remaining > 0 || !a.failed.is_empty()) && !lost {
        if !settled {
            // Releasing now would lose the spooled results: the lease is left to expire
            // instead, after which the server still accepts them.
            warn!(
                lease.id = id,
                "results of this lease are still spooled; not releasing it"
            );
        } else {
            let body = ReleaseLease {
                fencing_token: a.lease.fencing_token,
                failed_units: a.failed.clone(),
                reason: Some(reason),
            };
            match coord.release(id, &body).await {
                Ok(r) => info!(
                    lease.id = id,
                    returned = r.returned,
                    quarantined = r.quarantined,
                    "lease released"
                ),
                Err(e) => {
                    warn!(lease.id = id, error = %e, "could not release the lease; it will expire on the server")
                }
            }
        }
    }
    if let Err(e) = held.remove(id) {
        error!(lease.id = id, error = %e, "cannot forget the lease");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spool_group_syncs_when_full_when_old_when_nothing_else_comes_or_in_a_hurry() {
        let young = Duration::from_millis(1);
        let full = SPOOL_GROUP_PER_SLOT * 4;
        // Nothing waiting: nothing to sync, even in a hurry.
        assert!(!group_ready(0, SPOOL_LINGER, 8, 4, true));
        // A young group with units still computing waits for more results.
        assert!(!group_ready(3, young, 32, 4, false));
        assert!(!group_ready(full - 1, young, 32, 4, false));
        assert!(group_ready(full, young, 32, 4, false));
        assert!(group_ready(3, SPOOL_LINGER, 32, 4, false));
        // Every unit in flight is waiting: no result will join them.
        assert!(group_ready(3, young, 3, 4, false));
        assert!(group_ready(1, young, 32, 4, true));
    }
}
