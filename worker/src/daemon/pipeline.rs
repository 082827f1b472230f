//! The daemon's work loop: keeps the engine busy across leases, as a state machine whose
//! `run` waits for the next event and calls its handler: a result off the engine, a spooled
//! group, a lease answer, the back end ready, a lease closed, or a tick; each turn then hands
//! the queued units over and asks for the next lease when the work in hand runs low.
//!
//! The units of a lease are handed to the engine as soon as it is ready, and at most `slots`
//! jobs on the engine's thread pool take them one after the other (`dispatch.rs`: each unit on
//! the pool, as `tmd-worker search` runs them, so one unit's CPU stages overlap the others'
//! kernels on every device, and a job starts its next unit on its own thread the moment it
//! ends one). Each result is spooled (`spool.rs`: written and synced, with the results that
//! arrived during the previous group's sync) and queued for the poster. On the CPU one unit
//! per engine thread is in flight: more interleave on the same cores and cost CPU time
//! (docs/benchmarks-history.md). The next lease is asked for while the current one's last few
//! seconds of work run (its units queue behind the current ones), every lease in hand is
//! heartbeaten, and a lease whose units are all computed is closed in the background
//! (`lease.rs`).
//!
//! Start-up: the back end (a GPU's opening and self-test, about a second) comes as a task
//! that runs while the first lease is asked for; no unit starts before it is ready, so no
//! unit is computed on a device that has not passed its self-test. A back end that fails to
//! start, or a device whose context is lost later (a sticky CUDA error), stops the daemon:
//! nothing new starts, what is computed is posted, every unit in hand goes back unfinished,
//! and the run ends with an error ([`DeviceLost`] for the second) so that systemd starts a
//! fresh process, which tests the device again.

use super::ahead::compile_ahead;
use super::backoff::{self, Backoff};
use super::client::ClientError;
use super::coordinator::Coordinator;
use super::dispatch::{Dispatch, Finished};
use super::engine::{engine_unit, one_line, warm_up, SharedBackend};
use super::held::Held;
use super::lease::{self, Active, Leases};
use super::misbehave::Misbehave;
use super::post::{PostWatch, Poster};
use super::settings::Settings;
use super::spool::{Computed, GroupCommit, Outcome};
use super::{EngineRefused, Quarantined, Shared};
use crate::state::{LeaseState, StateError};
use anyhow::{anyhow, bail, Result};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tmd_wire::{codes, Lease, LeaseResponse, ReleaseLease};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::{JoinError, JoinHandle, JoinSet};
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

/// A lease request in flight.
type Asking = JoinHandle<Result<LeaseResponse, ClientError>>;

/// Ask for the next lease when the work in hand falls below this many seconds at the
/// measured speed: a lease request takes milliseconds, a unit on a GPU a fraction of a second.
pub const PREFETCH_SECONDS: f64 = 5.0;
/// Leases held at once: the one being computed and the next.
const MAX_HELD: usize = 2;
/// The longest a lease request waits for the results before it to be posted: a server that
/// does not take them now still gets the request.
const SETTLE_BEFORE_LEASE: Duration = Duration::from_secs(2);

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

impl Stop {
    /// Why a lease ends with units unfinished, for the release, when the engine failed on none.
    fn release_reason(stop: Option<&Stop>) -> String {
        match stop {
            Some(Stop::Signal) => "worker stopping".into(),
            Some(Stop::Limit) => "worker stopping: its unit limit is reached".into(),
            Some(Stop::DeviceLost(why)) => {
                one_line(&format!("worker stopping: its GPU is lost ({why})"))
            }
            Some(Stop::State(why)) => one_line(&format!(
                "worker stopping: its state directory failed ({why})"
            )),
            Some(Stop::Engine(why)) => one_line(&format!(
                "worker stopping: its back end did not start ({why})"
            )),
            _ => "campaign stopped".into(),
        }
    }

    /// The run's outcome after a stop for this reason.
    fn outcome(stop: Option<Stop>) -> Result<()> {
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
}

async fn join_lease(h: &mut Option<Asking>) -> Result<LeaseResponse, ClientError> {
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

/// A lease closed: at the end of the work the next request waits for it.
fn closed(r: Result<(), JoinError>) {
    if let Err(e) = r {
        error!(error = %e, "closing a lease failed");
    }
}

impl<C: Coordinator> Pipeline<C> {
    /// Runs until the work is done or the daemon stops; `opening` is the back end, still
    /// starting: it is awaited in the loop while the first lease is asked for.
    pub async fn run(self, resumed: Vec<LeaseState>, opening: Opening) -> Result<()> {
        let mut l = Loop::new(&self, resumed, opening)?;
        while l.turn() {
            let tick = l.tick();
            tokio::select! {
                Some(f) = l.results.recv() => l.on_result(f),
                group = l.spool.committed() => l.on_spooled(group?).await,
                Some(r) = l.closing.join_next(), if !l.closing.is_empty() => closed(r),
                r = join_opening(&mut l.opening) => l.on_backend(r),
                r = join_lease(&mut l.asking) => l.on_lease_answer(r).await?,
                _ = tokio::time::sleep(tick) => {}
                _ = self.shared.wake.notified() => {}
            }
        }
        let (stop, backend) = l.finish().await;
        let watch = self.poster.watch();
        // What is still queued is posted now if the server takes it; the rest stays spooled.
        self.poster.close(Duration::from_secs(30)).await;
        // A quarantine learnt from the last posts outranks a stop at the unit limit or when
        // idle: the supervisor must not restart this worker.
        let stop = match watch.quarantined() {
            Some(why) if !matches!(stop, Some(Stop::Quarantined(_))) => {
                Some(Stop::Quarantined(why))
            }
            _ => stop,
        };
        if let Some(b) = &backend {
            log_device_use(b, &self.shared);
        }
        Stop::outcome(stop)
    }

    /// Takes a lease in hand: writes it down, starts its heartbeat, queues its units not yet
    /// finished (in its `done` set or in the spool).
    fn activate(&self, ls: LeaseState) -> Result<Active> {
        let cfg = lease::search_config(&ls.lease.task)?;
        let mut a = Active::take(ls, &self.held, cfg)?;
        if self.settings.misbehave != Some(Misbehave::Late) {
            a.start_heartbeat(self.coord.clone());
        }
        // The first lease's GPU modules compile while the GPU opens and self-tests; every
        // lease's, and the next binade's, while the units before them run.
        let first: Vec<_> = a.queue.iter().take(self.slots).map(engine_unit).collect();
        warm_up(&self.settings, &cfg, &first);
        let units: Vec<_> = a.queue.iter().map(engine_unit).collect();
        compile_ahead(&self.settings, &cfg, &units);
        Ok(a)
    }

    /// Asks for the next lease, the results computed so far posted first: the server sizes
    /// the lease by the speed they measure, and counts what this worker holds without the
    /// units they finish. Asked before them, a worker not yet measured got another small
    /// first lease, or none (its cap of units in hand), and its cores idled until the next
    /// request.
    fn ask(&self, watch: &PostWatch) -> Asking {
        let coord = self.coord.clone();
        let seconds = self.settings.lease_seconds;
        let slots = self.slots as u32;
        let watch = watch.clone();
        tokio::spawn(async move {
            watch.settle_queued(SETTLE_BEFORE_LEASE).await;
            coord.lease(Some(seconds), slots).await
        })
    }
}

fn log_device_use(backend: &SharedBackend, shared: &Shared) {
    for d in backend.device_use() {
        let uptime = shared.started.elapsed().as_secs_f64().max(1e-9);
        info!(
            device = d.device,
            pieces = d.pieces,
            busy_s = format!("{:.2}", d.busy_s),
            busy_percent = format!("{:.1}", 100.0 * d.busy_s / uptime),
            "device use"
        );
    }
}

/// The loop's state, which its handlers share. A unit is counted in its lease's `running`
/// from its hand-over to the engine to its result spooled: the engine's own threads take the
/// units handed over (`Dispatch`), one after the other, and send each result back on
/// `results`; the results wait in `spool` for their group's sync.
struct Loop<'p, C: Coordinator> {
    p: &'p Pipeline<C>,
    watch: PostWatch,
    leases: Leases,
    spool: GroupCommit,
    results_tx: UnboundedSender<Finished>,
    results: UnboundedReceiver<Finished>,
    opening: Option<Opening>,
    backend: Option<SharedBackend>,
    dispatch: Option<Arc<Dispatch>>,
    closing: JoinSet<()>,
    asking: Option<Asking>,
    next_ask: Instant,
    backoff: Backoff,
    stop: Option<Stop>,
    /// Units handed to the engine since the start (for `--max-units`).
    started: u64,
    /// Seconds one unit takes in its slot (a moving average): what the work in hand is worth
    /// in time.
    unit_secs: Option<f64>,
    last_tick: Instant,
    /// A lease request answered "no work" while work was in hand (the server caps what one
    /// worker holds, or the units left are this worker's own): asked again as soon as the
    /// work in hand is done and settled, not a whole retry interval later.
    refused_in_hand: bool,
}

impl<'p, C: Coordinator> Loop<'p, C> {
    fn new(p: &'p Pipeline<C>, resumed: Vec<LeaseState>, opening: Opening) -> Result<Self> {
        let mut leases = Leases::default();
        for ls in resumed {
            let a = p.activate(ls)?;
            info!(
                lease.id = a.id(),
                done = a.finished.len(),
                left = a.queue.len(),
                "resuming the lease in hand"
            );
            leases.push(a);
        }
        let (results_tx, results) = unbounded_channel();
        Ok(Loop {
            p,
            watch: p.poster.watch(),
            leases,
            spool: GroupCommit::new(p.held.state.clone(), p.settings.misbehave),
            results_tx,
            results,
            opening: Some(opening),
            backend: None,
            dispatch: None,
            closing: JoinSet::new(),
            asking: None,
            next_ask: Instant::now(),
            backoff: Backoff::new(),
            stop: None,
            started: 0,
            unit_secs: None,
            last_tick: Instant::now(),
            refused_in_hand: false,
        })
    }

    /// A turn of the loop before it waits: spools what is due, takes in the stops, hands the
    /// queued units over, closes the spent leases and asks for the next lease when the work
    /// in hand runs low. `false` once the daemon stopped and nothing is left in flight.
    fn turn(&mut self) -> bool {
        let now = Instant::now();
        let in_flight = self.leases.running();
        if in_flight > 0 {
            self.p.shared.add_busy(now - self.last_tick);
        }
        self.last_tick = now;
        let hurry = self.stop.is_some() || self.unit_secs.is_none();
        self.spool.start_if_ready(in_flight, self.p.slots, hurry);
        while let Some(r) = self.closing.try_join_next() {
            closed(r);
        }
        self.take_stops();
        self.withdraw_stopped();
        self.hand_over();
        self.close_spent();
        if self.stop.is_some()
            && self.leases.is_empty()
            && self.spool.is_idle()
            && self.asking.is_none()
        {
            return false;
        }
        self.ask_if_low();
        true
    }

    /// A signal, or a post refused because the coordinator quarantined this worker: nothing
    /// more is computed, whatever else was to end the run.
    fn take_stops(&mut self) {
        if self.stop.is_none() && self.p.shared.finishing() {
            self.stop = Some(Stop::Signal);
        }
        if !matches!(self.stop, Some(Stop::Quarantined(_))) {
            if let Some(why) = self.watch.quarantined() {
                error!(error = %why, "the coordinator quarantined this worker; stopping");
                self.stop = Some(Stop::Quarantined(why));
            }
        }
    }

    /// Leases that stopped (lost, campaign stopped) or a daemon that stops: nothing new
    /// starts; their units on the engine finish, those handed over and not started come back.
    /// At the unit limit the units handed over are within the limit: they run.
    fn withdraw_stopped(&mut self) {
        let stopping = self.stop.is_some();
        let limit = matches!(self.stop, Some(Stop::Limit));
        let dispatch = self.dispatch.as_deref().filter(|_| !limit);
        for a in self.leases.iter_mut() {
            if stopping || a.stopped() {
                a.withdraw(dispatch);
            }
        }
    }

    /// Nothing starts before the back end has passed its self-test; then every queued unit is
    /// handed over at once, up to the unit limit.
    fn hand_over(&mut self) {
        if self.stop.is_some() {
            return;
        }
        let Some(d) = &self.dispatch else {
            return;
        };
        let max_units = self.p.settings.max_units;
        for a in self.leases.iter_mut() {
            let room = max_units.map_or(usize::MAX, |m| m.saturating_sub(self.started) as usize);
            let n = a.queue.len().min(room);
            if n > 0 {
                a.hand_over(d, n);
                self.started += n as u64;
            }
        }
        if max_units.is_some_and(|m| self.started >= m) {
            self.stop = Some(Stop::Limit);
        }
    }

    /// Leases with nothing queued or running are closed in the background.
    fn close_spent(&mut self) {
        for a in self.leases.take_spent() {
            let reason = a
                .failure_reason()
                .unwrap_or_else(|| Stop::release_reason(self.stop.as_ref()));
            let p = self.p;
            let closing = a.close(p.coord.clone(), p.held.clone(), self.watch.clone(), reason);
            self.closing.spawn(closing);
        }
    }

    /// Asks for the next lease when the work in hand runs low and none is being asked for.
    fn ask_if_low(&mut self) {
        if self.refused_in_hand
            && self.leases.is_empty()
            && self.spool.is_idle()
            && self.closing.is_empty()
        {
            self.refused_in_hand = false;
            self.next_ask = Instant::now();
        }
        if self.stop.is_none()
            && self.asking.is_none()
            && self.leases.len() < MAX_HELD
            && self.low()
            && Instant::now() >= self.next_ask
        {
            self.asking = Some(self.p.ask(&self.watch));
        }
    }

    /// Whether the work in hand runs low. Before its first result the worker is not measured,
    /// and the server would answer with another small first lease: it asks once that result
    /// is queued (and posted first), unless what it holds cannot fill its slots.
    fn low(&self) -> bool {
        let in_hand = self.leases.in_hand();
        match self.unit_secs {
            Some(s) => in_hand as f64 * s / self.p.slots as f64 <= PREFETCH_SECONDS,
            None => {
                let waiting = self.dispatch.as_ref().map_or(0, |d| d.waiting());
                self.leases.queued() + waiting == 0 && in_hand < self.p.slots
            }
        }
    }

    /// How long the loop waits for an event at most: soon enough to see a lost lease, to
    /// spool a group that lingered long enough, and to ask for the next lease on time.
    fn tick(&self) -> Duration {
        let until_ask = self.next_ask.saturating_duration_since(Instant::now());
        let tick = if until_ask.is_zero() {
            Duration::from_millis(250)
        } else {
            until_ask.clamp(Duration::from_millis(10), Duration::from_millis(250))
        };
        match self.spool.due_in() {
            Some(linger) => tick.min(linger.max(Duration::from_millis(1))),
            None => tick,
        }
    }

    /// Results off the engine join the next spool group.
    fn on_result(&mut self, f: Finished) {
        self.spool.add(f);
        while let Ok(f) = self.results.try_recv() {
            self.spool.add(f);
        }
    }

    /// A group is on disk: each result goes to the poster, each failure to its lease.
    async fn on_spooled(&mut self, group: Vec<Computed>) {
        for c in group {
            if let Some(d) = &self.dispatch {
                d.spooled();
            }
            self.leases.get_mut(c.lease_id).running -= 1;
            match c.outcome {
                Outcome::Spooled(entry, hr_cases) => {
                    self.leases.get_mut(c.lease_id).finished.insert(c.unit_id);
                    self.measured(c.unit_id, c.arguments, c.elapsed, hr_cases);
                    self.p.poster.submit(entry).await;
                }
                Outcome::Failed(why) => {
                    error!(unit.id = c.unit_id, error = %why, "the engine failed on this unit; giving it back");
                    self.leases.get_mut(c.lease_id).unit_failed(c.unit_id, &why);
                }
                Outcome::DeviceLost(why) => self.device_lost(c.unit_id, why),
                Outcome::SpoolFailed(e) => self.spool_failed(c.unit_id, e),
            }
        }
    }

    /// A unit computed and spooled: counted, and its time taken into the unit's average.
    fn measured(&mut self, unit_id: i64, arguments: u64, elapsed: f64, hr_cases: usize) {
        self.p.shared.unit_done(arguments, elapsed);
        // Debug: one line per unit is hundreds of thousands a day per GPU; the status line
        // sums them.
        debug!(
            unit.id = unit_id,
            duration_ms = (elapsed * 1e3) as u64,
            hr_cases,
            "unit computed"
        );
        self.unit_secs = Some(match self.unit_secs {
            Some(s) => 0.8 * s + 0.2 * elapsed,
            None => elapsed,
        });
    }

    /// The unit is neither finished nor failed: released unfinished with the rest.
    fn device_lost(&mut self, unit_id: i64, why: String) {
        if !matches!(
            self.stop,
            Some(Stop::DeviceLost(_) | Stop::Quarantined(_) | Stop::EngineRefused(_))
        ) {
            error!(unit.id = unit_id, error = %why, "a GPU is lost: stopping, and giving back every unit in hand");
            self.stop = Some(Stop::DeviceLost(why));
        }
    }

    /// Nothing computed from now on could survive a crash: stop, post what is queued, and
    /// give every unit in hand back (this one too), instead of leaving them to the lease's
    /// expiry.
    fn spool_failed(&mut self, unit_id: i64, e: String) {
        if !matches!(self.stop, Some(Stop::State(_))) {
            error!(unit.id = unit_id, error = %e, "cannot spool a result: stopping, and giving back every unit in hand");
            self.stop = Some(Stop::State(format!(
                "cannot spool the result of unit {unit_id}: {e}"
            )));
        }
    }

    /// The back end passed its self-test (units may start) or did not start (the daemon
    /// stops).
    fn on_backend(&mut self, r: Result<SharedBackend>) {
        self.opening = None;
        match r {
            Ok(b) => {
                info!(backend = %b.name(), "engine ready");
                // The CPU back end names itself `cpu (...)`; the other one is CUDA's.
                let name = b.name();
                let kind = if name.starts_with("cpu") {
                    "cpu"
                } else {
                    "cuda"
                };
                self.p.coord.set_device(kind, &name);
                let (slots, misbehave) = (self.p.slots, self.p.settings.misbehave);
                let results = self.results_tx.clone();
                self.dispatch = Some(Dispatch::new(slots, b.clone(), misbehave, results));
                self.backend = Some(b);
            }
            Err(e) => {
                error!(error = %e, "the back end did not start: giving back every unit in hand");
                self.stop = Some(Stop::Engine(format!("{e:#}")));
            }
        }
    }

    /// The server's answer to a lease request. An error ends the run where waiting cannot
    /// help.
    async fn on_lease_answer(&mut self, r: Result<LeaseResponse, ClientError>) -> Result<()> {
        self.asking = None;
        match r {
            Ok(resp) => {
                self.backoff.reset();
                match resp.lease {
                    Some(lease) => self.leased(lease).await?,
                    None => self.no_work(&resp),
                }
            }
            Err(ClientError::Unavailable {
                message,
                retry_after,
            }) => {
                let wait = self.backoff.next(retry_after);
                warn!(%message, retry_in_ms = wait.as_millis() as u64, "server unavailable");
                self.next_ask = Instant::now() + wait;
            }
            Err(ClientError::Misconfigured(m)) => bail!("cannot lease work: {m}"),
            Err(e) if e.code() == Some(codes::WORKER_QUARANTINED) => {
                error!(error = %e, "the coordinator quarantined this worker; stopping");
                self.stop = Some(Stop::Quarantined(e.to_string()));
            }
            Err(e) if e.code() == Some(codes::ENGINE_VERSION) => {
                error!(error = %e, "the coordinator does not serve this engine version; stopping");
                self.stop = Some(Stop::EngineRefused(e.to_string()));
            }
            Err(e) => bail!("the server refused to lease: {e}"),
        }
        Ok(())
    }

    /// A new lease: taken in hand, or given back at once rather than left to expire.
    async fn leased(&mut self, lease: Lease) -> Result<()> {
        info!(lease.id = lease.lease_id, campaign.id = lease.task.campaign_id, units = lease.units.len(), function = %lease.task.function, "leased");
        let (id, fencing_token) = (lease.lease_id, lease.fencing_token);
        let e = match self.p.activate(LeaseState {
            lease,
            done: BTreeSet::new(),
        }) {
            Ok(a) => {
                self.leases.push(a);
                return Ok(());
            }
            Err(e) => e,
        };
        // A state error says its cause itself.
        let state_error = e.downcast_ref::<StateError>();
        let why = one_line(&match state_error {
            Some(s) => s.to_string(),
            None => format!("{e:#}"),
        });
        error!(lease.id = id, error = %why, "cannot take the lease in hand: giving it back");
        let body = ReleaseLease {
            fencing_token,
            failed_units: Vec::new(),
            reason: Some(format!("worker stopping: {why}")),
        };
        if let Err(r) = self.p.coord.release(id, &body).await {
            warn!(lease.id = id, error = %r, "could not release the lease; it will expire on the server");
        }
        if state_error.is_none() {
            return Err(e);
        }
        self.stop.get_or_insert(Stop::State(why));
        Ok(())
    }

    /// No work now: the daemon stops if asked to when idle, or asks again later. Leases still
    /// closing hold units the server counts as outstanding: not idle until they are settled.
    fn no_work(&mut self, resp: &LeaseResponse) {
        let idle = self.leases.is_empty() && self.spool.is_idle() && self.closing.is_empty();
        if idle && self.p.settings.exit_when_idle && resp.units_outstanding == 0 {
            info!("no work left on the server; exiting as asked");
            self.stop = Some(Stop::Idle);
            return;
        }
        let wait = backoff::spread(Duration::from_secs(resp.retry_after_seconds.max(1) as u64));
        if idle {
            let why: Vec<&str> = resp.waiting.iter().map(|w| w.message.as_str()).collect();
            info!(
                retry_in_ms = wait.as_millis() as u64,
                units_outstanding = resp.units_outstanding,
                why = %why.join("; "),
                "no work now"
            );
        } else {
            self.refused_in_hand = true;
        }
        self.next_ask = Instant::now() + wait;
    }

    /// The loop ended: waits for the leases closing and says what spooling cost; the reason
    /// it stopped and the back end, if it started.
    async fn finish(mut self) -> (Option<Stop>, Option<SharedBackend>) {
        while let Some(r) = self.closing.join_next().await {
            closed(r);
        }
        let held_back = self.dispatch.as_ref().map_or(0, |d| d.full_stops());
        self.spool.log_summary(held_back);
        (self.stop, self.backend)
    }
}
