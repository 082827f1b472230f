//! The pipeline against an in-memory coordinator and a slowed-down CPU back end: every unit
//! posted once and in batches, the next lease asked for before the current one ends, results
//! kept through an unreachable server, single posts to a coordinator without the batch route,
//! `--exit-when-idle` waiting while units are still outstanding elsewhere, the first lease
//! asked for while the back end starts, and a back end that does not start or loses its
//! device giving every unit in hand back.

use super::client::ClientError;
use super::coordinator::Coordinator;
use super::engine::SharedBackend;
use super::fixtures;
use super::held::Held;
use super::pipeline::{DeviceLost, Opening, Pipeline};
use super::post::Poster;
use super::{EngineRefused, Quarantined, RunArgs, Settings, Shared};
use crate::state::StateDir;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tmd_kernels::search::existence::Test;
use tmd_kernels::search::generation::Generated;
use tmd_kernels::search::{Backend, Cpu, PieceOutcome, SearchError};
use tmd_wire::{
    codes, ApiError, CampaignState, HeartbeatResponse, LeaseResponse, LeasedUnit, ReleaseLease,
    ReleaseResponse, ResultAccepted, ResultBatch, ResultBatchResponse, UnitOutcome,
    UnitOutcomeStatus, UnitResult,
};

/// The CPU, slowed down per piece: units take long enough to overlap with posting.
struct Slow;

impl Backend for Slow {
    fn search_piece(
        &self,
        g: &Generated,
        test: Test,
        packet_domains: u64,
    ) -> Result<PieceOutcome, SearchError> {
        std::thread::sleep(Duration::from_millis(30));
        Cpu.search_piece(g, test, packet_domains)
    }

    fn name(&self) -> String {
        "slow cpu".into()
    }
}

#[derive(Default)]
struct Campaign {
    pending: VecDeque<LeasedUnit>,
    /// Lease id -> its units not yet posted.
    leased: BTreeMap<i64, Vec<i64>>,
    done: BTreeMap<i64, u32>,
    next_lease: i64,
    batches: Vec<usize>,
    singles: u32,
    /// At each lease request: units this worker held that were not posted yet.
    held_at_request: Vec<usize>,
    idle_answers: u32,
    /// Units reported failed in releases.
    released_failed: Vec<i64>,
    /// The releases' reasons.
    released_reasons: Vec<String>,
    /// When each lease request came.
    lease_times: Vec<Instant>,
    /// At each lease request: units whose results were posted.
    posted_at_request: Vec<usize>,
}

/// A coordinator in memory: leases of `per_lease` units, results recorded per unit.
#[derive(Clone)]
struct Fake {
    c: Arc<Mutex<Campaign>>,
    per_lease: usize,
    /// Batch requests to answer "unavailable" before taking any.
    unavailable: Arc<AtomicU32>,
    /// Answer 404 to batches, as a coordinator without the route does.
    no_batch_route: bool,
    /// Lease answers without work that still report units outstanding elsewhere.
    phantom_outstanding: Arc<AtomicU32>,
    /// Batches whose units are all answered `retry` before any is judged.
    retries: Arc<AtomicU32>,
    /// A unit whose result is refused as unacceptable (`bad_request`).
    unacceptable: Option<i64>,
    /// Lease requests answered with work before every later one is refused with
    /// `engine_version` (the coordinator was upgraded past this worker's engine).
    engine_served_leases: Option<u32>,
    /// Every post refused with `worker_quarantined` (the coordinator quarantined the worker
    /// while it computed).
    quarantined: bool,
}

impl Fake {
    fn new(units: u64, per_lease: usize) -> Fake {
        let pending = fixtures::units(units).into();
        Fake {
            c: Arc::new(Mutex::new(Campaign {
                pending,
                next_lease: 1,
                ..Campaign::default()
            })),
            per_lease,
            unavailable: Arc::new(AtomicU32::new(0)),
            no_batch_route: false,
            phantom_outstanding: Arc::new(AtomicU32::new(0)),
            retries: Arc::new(AtomicU32::new(0)),
            unacceptable: None,
            engine_served_leases: None,
            quarantined: false,
        }
    }

    fn record(&self, lease_id: i64, unit_id: i64) -> UnitOutcomeStatus {
        let mut c = self.c.lock().unwrap();
        let n = c.done.entry(unit_id).or_default();
        *n += 1;
        let first = *n == 1;
        if let Some(us) = c.leased.get_mut(&lease_id) {
            us.retain(|&u| u != unit_id);
        }
        if first {
            UnitOutcomeStatus::Accepted
        } else {
            UnitOutcomeStatus::Replayed
        }
    }
}

fn unavailable() -> ClientError {
    ClientError::Unavailable {
        message: "down".into(),
        retry_after: Some(Duration::from_millis(100)),
    }
}

impl Coordinator for Fake {
    async fn lease(
        &self,
        _seconds: Option<u32>,
        _units_in_flight: u32,
    ) -> Result<LeaseResponse, ClientError> {
        let mut c = self.c.lock().unwrap();
        if self
            .engine_served_leases
            .is_some_and(|n| c.lease_times.len() >= n as usize)
        {
            return Err(ClientError::Refused {
                status: 409,
                code: codes::ENGINE_VERSION.into(),
                message: "this worker runs engine version 1; this coordinator serves engine \
                          version 2"
                    .into(),
            });
        }
        c.lease_times.push(Instant::now());
        let held = c.leased.values().map(Vec::len).sum();
        c.held_at_request.push(held);
        let posted = c.done.len();
        c.posted_at_request.push(posted);
        let n = self.per_lease.min(c.pending.len());
        if n == 0 {
            let phantom = self.phantom_outstanding.load(Ordering::SeqCst);
            if phantom > 0 {
                self.phantom_outstanding.fetch_sub(1, Ordering::SeqCst);
            }
            c.idle_answers += 1;
            return Ok(LeaseResponse {
                lease: None,
                retry_after_seconds: 1,
                units_outstanding: held as i64 + i64::from(phantom),
                waiting: Vec::new(),
            });
        }
        let units: Vec<LeasedUnit> = c.pending.drain(..n).collect();
        let id = c.next_lease;
        c.next_lease += 1;
        c.leased
            .insert(id, units.iter().map(|u| u.unit_id).collect());
        Ok(LeaseResponse {
            lease: Some(fixtures::lease(id, units)),
            retry_after_seconds: 1,
            units_outstanding: 0,
            waiting: Vec::new(),
        })
    }

    async fn heartbeat(&self, _: i64, _: i64) -> Result<HeartbeatResponse, ClientError> {
        Ok(HeartbeatResponse {
            expires_at: chrono::Utc::now(),
            campaign_state: CampaignState::Active,
        })
    }

    async fn post_result(
        &self,
        lease_id: i64,
        unit_id: i64,
        _: &UnitResult,
    ) -> Result<ResultAccepted, ClientError> {
        self.c.lock().unwrap().singles += 1;
        self.record(lease_id, unit_id);
        Ok(ResultAccepted {
            result_id: unit_id,
            unit_id,
            hr_cases: 0,
        })
    }

    async fn post_results(&self, batch: &ResultBatch) -> Result<ResultBatchResponse, ClientError> {
        if self.no_batch_route {
            return Err(ClientError::Refused {
                status: 404,
                code: "not_found".into(),
                message: "no such route".into(),
            });
        }
        if self.unavailable.load(Ordering::SeqCst) > 0 {
            self.unavailable.fetch_sub(1, Ordering::SeqCst);
            return Err(unavailable());
        }
        self.c.lock().unwrap().batches.push(batch.results.len());
        let retry = self.retries.load(Ordering::SeqCst) > 0;
        if retry {
            self.retries.fetch_sub(1, Ordering::SeqCst);
        }
        let outcomes = batch
            .results
            .iter()
            .map(|r| {
                let refused = |status, code: &str| UnitOutcome {
                    lease_id: r.lease_id,
                    unit_id: r.unit_id,
                    status,
                    result_id: None,
                    hr_cases: None,
                    error: Some(ApiError {
                        code: code.into(),
                        message: code.into(),
                    }),
                };
                if self.quarantined {
                    refused(UnitOutcomeStatus::Refused, codes::WORKER_QUARANTINED)
                } else if retry {
                    refused(UnitOutcomeStatus::Retry, "unavailable")
                } else if self.unacceptable == Some(r.unit_id) {
                    refused(UnitOutcomeStatus::Refused, "bad_request")
                } else {
                    UnitOutcome {
                        lease_id: r.lease_id,
                        unit_id: r.unit_id,
                        status: self.record(r.lease_id, r.unit_id),
                        result_id: Some(r.unit_id),
                        hr_cases: Some(0),
                        error: None,
                    }
                }
            })
            .collect();
        Ok(ResultBatchResponse { outcomes })
    }

    async fn release(
        &self,
        lease_id: i64,
        body: &ReleaseLease,
    ) -> Result<ReleaseResponse, ClientError> {
        let mut c = self.c.lock().unwrap();
        c.released_failed.extend(&body.failed_units);
        c.released_reasons
            .push(body.reason.clone().unwrap_or_default());
        let back = c.leased.remove(&lease_id).unwrap_or_default();
        Ok(ReleaseResponse {
            returned: back.len() as u32,
            quarantined: 0,
        })
    }
}

/// A back end that is ready at once.
fn ready(b: SharedBackend) -> Opening {
    tokio::spawn(async move { Ok(b) })
}

/// Runs the daemon's pipeline against `fake` until the server has no work left.
async fn run(fake: Fake, name: &str, slots: usize) -> (Arc<Shared>, std::path::PathBuf) {
    let (outcome, shared, dir, held) = run_with(fake, name, slots, ready(Arc::new(Slow))).await;
    outcome.unwrap();
    nothing_held(&held);
    (shared, dir)
}

/// No result is left spooled and no lease in hand.
fn nothing_held(held: &Held) {
    assert!(
        held.state.spool().unwrap().is_empty(),
        "nothing left spooled"
    );
    assert!(
        held.state.leases().unwrap().is_empty(),
        "no lease left in hand"
    );
}

/// Runs the pipeline with the back end `opening` and gives back how it ended.
async fn run_with(
    fake: Fake,
    name: &str,
    slots: usize,
    opening: Opening,
) -> (
    anyhow::Result<()>,
    Arc<Shared>,
    std::path::PathBuf,
    Arc<Held>,
) {
    run_set(fake, name, slots, opening, |_| {}).await
}

/// [`run_with`], the daemon's settings changed by `tweak` first.
async fn run_set(
    fake: Fake,
    name: &str,
    slots: usize,
    opening: Opening,
    tweak: impl FnOnce(&mut Settings),
) -> (
    anyhow::Result<()>,
    Arc<Shared>,
    std::path::PathBuf,
    Arc<Held>,
) {
    let dir = std::env::temp_dir().join(format!("tmd-pipeline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut settings = Settings::resolve(RunArgs {
        server: Some("http://127.0.0.1:9".into()),
        exit_when_idle: true,
        ..RunArgs::default()
    })
    .unwrap();
    settings.lease_seconds = 1;
    tweak(&mut settings);
    let held = Arc::new(Held::new(StateDir::open(&dir).unwrap()));
    let shared = Arc::new(Shared::new());
    let poster = Poster::start(fake.clone(), held.clone());
    let pipeline = Pipeline {
        coord: fake,
        held: held.clone(),
        poster,
        shared: shared.clone(),
        settings,
        slots,
    };
    let outcome = tokio::time::timeout(Duration::from_secs(120), pipeline.run(Vec::new(), opening))
        .await
        .expect("the pipeline ends");
    (outcome, shared, dir, held)
}

fn every_unit_once(fake: &Fake, units: i64) {
    let c = fake.c.lock().unwrap();
    assert_eq!(c.done.len() as i64, units, "{:?}", c.done);
    assert!(c.done.values().all(|&n| n == 1), "{:?}", c.done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_are_posted_in_batches_and_the_next_lease_comes_early() {
    let fake = Fake::new(12, 3);
    let (shared, dir) = run(fake.clone(), "batches", 2).await;
    every_unit_once(&fake, 12);
    let c = fake.c.lock().unwrap();
    assert!(
        c.batches.len() < 12 && c.batches.iter().sum::<usize>() == 12,
        "{:?}",
        c.batches
    );
    assert!(
        c.held_at_request.iter().filter(|&&h| h > 0).count() >= 2,
        "leases are asked for while work is in hand: {:?}",
        c.held_at_request
    );
    assert_eq!(shared.units_done.load(Ordering::SeqCst), 12);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_lease_is_asked_for_once_a_result_is_posted() {
    // Leases of 2 units on one slot: the first lease fills the slot, so the second is asked
    // for once the first result is in, and that result is posted before it (a server sizes
    // a worker's leases by the speed its results measure). Before, the request came while
    // the result waited a second for its batch.
    let fake = Fake::new(6, 2);
    let (_, dir) = run(fake.clone(), "measured", 1).await;
    every_unit_once(&fake, 6);
    let posted = fake.c.lock().unwrap().posted_at_request.clone();
    assert!(
        posted.len() >= 3 && posted[0] == 0 && posted[1] >= 1,
        "results posted at each lease request: {posted:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_wait_for_a_server_that_is_away() {
    let fake = Fake::new(6, 3);
    fake.unavailable.store(3, Ordering::SeqCst);
    let (_, dir) = run(fake.clone(), "away", 2).await;
    every_unit_once(&fake, 6);
    assert_eq!(fake.unavailable.load(Ordering::SeqCst), 0);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_without_the_batch_route_gets_single_posts() {
    let mut fake = Fake::new(4, 2);
    fake.no_batch_route = true;
    let (_, dir) = run(fake.clone(), "single", 1).await;
    every_unit_once(&fake, 4);
    assert_eq!(fake.c.lock().unwrap().singles, 4);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_when_idle_waits_while_units_are_outstanding() {
    let fake = Fake::new(2, 2);
    fake.phantom_outstanding.store(2, Ordering::SeqCst);
    let (_, dir) = run(fake.clone(), "idle", 1).await;
    every_unit_once(&fake, 2);
    assert_eq!(fake.phantom_outstanding.load(Ordering::SeqCst), 0);
    assert!(fake.c.lock().unwrap().idle_answers >= 3);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_units_are_posted_again_and_unacceptable_ones_released_as_failed() {
    let mut fake = Fake::new(4, 4);
    fake.retries.store(1, Ordering::SeqCst);
    fake.unacceptable = Some(102);
    let (_, dir) = run(fake.clone(), "outcomes", 2).await;
    let c = fake.c.lock().unwrap();
    assert_eq!(
        c.done.keys().copied().collect::<Vec<_>>(),
        vec![100, 101, 103]
    );
    assert!(c.done.values().all(|&n| n == 1), "{:?}", c.done);
    assert_eq!(
        c.released_failed,
        vec![102],
        "the refused unit is given back as failed"
    );
    assert_eq!(fake.retries.load(Ordering::SeqCst), 0);
    drop(c);
    let _ = std::fs::remove_dir_all(dir);
}

/// The slow CPU, noting when each piece starts.
struct Stamped(Arc<Mutex<Vec<Instant>>>);

impl Backend for Stamped {
    fn search_piece(
        &self,
        g: &Generated,
        test: Test,
        packet_domains: u64,
    ) -> Result<PieceOutcome, SearchError> {
        self.0.lock().unwrap().push(Instant::now());
        Slow.search_piece(g, test, packet_domains)
    }

    fn name(&self) -> String {
        "stamped slow cpu".into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_lease_is_asked_for_while_the_back_end_starts() {
    let fake = Fake::new(6, 3);
    let pieces = Arc::new(Mutex::new(Vec::new()));
    let ready_at = Arc::new(Mutex::new(None));
    // A self-test of 400 ms, on a blocking thread as the daemon runs it.
    let opening: Opening = {
        let (pieces, ready_at) = (pieces.clone(), ready_at.clone());
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_millis(400));
            *ready_at.lock().unwrap() = Some(Instant::now());
            Ok(Arc::new(Stamped(pieces)) as SharedBackend)
        })
    };
    let (outcome, _, dir, _) = run_with(fake.clone(), "startup", 2, opening).await;
    outcome.unwrap();
    every_unit_once(&fake, 6);
    let ready_at = ready_at.lock().unwrap().expect("the back end started");
    let first_lease = fake.c.lock().unwrap().lease_times[0];
    assert!(
        first_lease < ready_at,
        "the first lease is asked for while the back end starts"
    );
    let pieces = pieces.lock().unwrap();
    assert!(!pieces.is_empty());
    assert!(
        pieces.iter().all(|&t| t >= ready_at),
        "no piece runs before the back end is ready (self-tested)"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_back_end_that_does_not_start_computes_nothing_and_gives_the_lease_back() {
    let fake = Fake::new(6, 3);
    let opening: Opening = tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Err(anyhow::anyhow!("no CUDA device passed the self-test"))
    });
    let (outcome, _, dir, held) = run_with(fake.clone(), "nostart", 2, opening).await;
    let e = outcome.unwrap_err();
    assert!(
        format!("{e:#}").contains("no CUDA device passed the self-test"),
        "{e:#}"
    );
    let c = fake.c.lock().unwrap();
    assert!(!c.lease_times.is_empty(), "a lease was asked for meanwhile");
    assert!(c.done.is_empty(), "nothing posted: {:?}", c.done);
    assert!(c.batches.is_empty() && c.singles == 0);
    assert!(
        c.leased.is_empty(),
        "the lease is given back: {:?}",
        c.leased
    );
    assert!(c.released_failed.is_empty(), "its units are not blamed");
    assert!(
        c.released_reasons
            .iter()
            .all(|r| r.contains("back end did not start")),
        "{:?}",
        c.released_reasons
    );
    nothing_held(&held);
    drop(c);
    let _ = std::fs::remove_dir_all(dir);
}

/// The slow CPU on a device that is lost (a sticky error) after `ok` pieces: every later
/// piece fails, as a lost CUDA context fails every call.
struct Breaks {
    ok: Mutex<u32>,
    lost: AtomicBool,
    failed_calls: AtomicU32,
}

impl Backend for Breaks {
    fn search_piece(
        &self,
        g: &Generated,
        test: Test,
        packet_domains: u64,
    ) -> Result<PieceOutcome, SearchError> {
        {
            let mut ok = self.ok.lock().unwrap();
            if *ok == 0 {
                self.lost.store(true, Ordering::SeqCst);
                self.failed_calls.fetch_add(1, Ordering::SeqCst);
                return Err(SearchError::Backend(
                    "CUDA driver: CUDA_ERROR_ILLEGAL_ADDRESS".into(),
                ));
            }
            *ok -= 1;
        }
        Slow.search_piece(g, test, packet_domains)
    }

    fn name(&self) -> String {
        "breaking slow cpu".into()
    }

    fn lost(&self) -> Option<String> {
        self.lost
            .load(Ordering::SeqCst)
            .then(|| "CUDA device 0: CUDA_ERROR_ILLEGAL_ADDRESS".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_device_gives_the_units_in_hand_back_and_stops_the_daemon() {
    let fake = Fake::new(16, 4);
    let slots = 2;
    let backend = Arc::new(Breaks {
        ok: Mutex::new(3),
        lost: AtomicBool::new(false),
        failed_calls: AtomicU32::new(0),
    });
    let (outcome, _, dir, held) =
        run_with(fake.clone(), "lost", slots, ready(backend.clone())).await;
    let e = outcome.unwrap_err();
    assert!(e.downcast_ref::<DeviceLost>().is_some(), "{e:#}");
    assert!(format!("{e}").contains("ILLEGAL_ADDRESS"), "{e}");
    // The units in flight at the loss fail once each; nothing new starts, nothing is
    // computed on the CPU instead.
    let failed = backend.failed_calls.load(Ordering::SeqCst) as usize;
    assert!((1..=2 * slots).contains(&failed), "{failed} failed calls");
    let c = fake.c.lock().unwrap();
    // What was computed before the loss is posted, once; no unit of the lost device is.
    assert!(c.done.len() <= 3, "{:?}", c.done);
    assert!(c.done.values().all(|&n| n == 1), "{:?}", c.done);
    assert!(
        c.leased.values().all(Vec::is_empty),
        "every unit in hand is back on the server: {:?}",
        c.leased
    );
    assert!(c.released_failed.is_empty(), "the units are not blamed");
    assert!(!c.released_reasons.is_empty());
    assert!(
        c.released_reasons.iter().all(|r| r.contains("GPU is lost")),
        "{:?}",
        c.released_reasons
    );
    nothing_held(&held);
    drop(c);
    let _ = std::fs::remove_dir_all(dir);
}

/// A coordinator upgraded to another engine version while the worker held a lease: the worker
/// stops asking, posts what it computed, gives the rest back, and ends with [`EngineRefused`]
/// (exit status 5, which the systemd unit does not restart on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_that_does_not_serve_this_engine_version_stops_the_daemon() {
    let fake = Fake {
        engine_served_leases: Some(1),
        ..Fake::new(8, 4)
    };
    let (outcome, _, dir, held) = run_with(fake.clone(), "engine", 2, ready(Arc::new(Slow))).await;
    let e = outcome.unwrap_err();
    assert!(e.downcast_ref::<EngineRefused>().is_some(), "{e:#}");
    assert!(format!("{e}").contains("serves engine version 2"), "{e}");
    let c = fake.c.lock().unwrap();
    assert_eq!(
        c.lease_times.len(),
        1,
        "one lease granted, no more asked after the refusal"
    );
    assert!(
        c.leased.values().all(Vec::is_empty),
        "the units in hand are posted or given back: {:?}",
        c.leased
    );
    assert!(c.released_failed.is_empty(), "the units are not blamed");
    nothing_held(&held);
    drop(c);
    let _ = std::fs::remove_dir_all(dir);
}

/// A worker quarantined while it computes up to its `--max-units`: its posts are refused with
/// `worker_quarantined`, and it ends with [`Quarantined`] (exit status 3, which the systemd
/// unit does not restart on), not as a worker that merely reached its limit (status 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_refusing_the_last_posts_outranks_the_unit_limit() {
    let fake = Fake {
        quarantined: true,
        ..Fake::new(8, 4)
    };
    let (outcome, _, dir, _) = run_set(
        fake.clone(),
        "quarantined-limit",
        2,
        ready(Arc::new(Slow)),
        |s| s.max_units = Some(2),
    )
    .await;
    let e = outcome.unwrap_err();
    assert!(e.downcast_ref::<Quarantined>().is_some(), "{e:#}");
    assert!(fake.c.lock().unwrap().done.is_empty(), "nothing was taken");
    let _ = std::fs::remove_dir_all(dir);
}

/// A device's name as the coordinator takes it: one line, no control character (a NUL or a
/// newline would have the whole lease request refused), within 200 bytes cut at a character's
/// boundary.
#[test]
fn a_device_name_is_one_line_within_the_coordinators_limit() {
    use super::engine::one_line_within;
    assert_eq!(
        one_line_within("NVIDIA\0H100\n80GB", 200),
        "NVIDIA H100 80GB"
    );
    let long = "é".repeat(150);
    let cut = one_line_within(&long, 200);
    assert!(cut.len() <= 200 && cut.ends_with(" …"), "{}", cut.len());
    assert!(cut.chars().all(|c| !c.is_control()));
    assert_eq!(one_line_within("short", 200), "short");
}
