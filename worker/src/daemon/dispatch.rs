//! Units handed to the engine: one queue that at most `slots` jobs on the engine's thread pool
//! take units from themselves. A job that finishes a unit starts the next one on the same
//! thread, as `tmd-worker search`'s `par_iter` does, instead of waiting for the async loop to
//! be scheduled and start it: on a CPU whose cores all compute, that hop left a core idle (or
//! spinning in the pool) at every unit's end (docs/benchmarks-history.md, 2026-11-24). Results
//! go back to the loop through a channel; the loop writes them to the spool.

use super::engine::{compute_unit, engine_unit, to_wire, SharedBackend, UnitFailure};
use super::misbehave::{self, Misbehave};
use crate::state::SpoolEntry;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tmd_kernels::search::periodic::Claim;
use tmd_kernels::search::{claim_period, Backend, SearchConfig};
use tmd_wire::{Lease, LeasedUnit};
use tokio::sync::mpsc::UnboundedSender;

/// Results computed but not yet spooled, per slot, before no job takes a new unit: bounds what
/// a slow disk lets pile up in memory, and what a crash loses. Twice a spool group's size
/// (`spool::SPOOL_GROUP_PER_SLOT`): one group fills while the one before it syncs.
pub const SPOOLING_PER_SLOT: usize = 8;

/// A unit to compute, with what its lease says about it.
pub struct Job {
    pub lease: Arc<Lease>,
    pub cfg: SearchConfig,
    pub unit: LeasedUnit,
}

/// A unit's computation, its result not yet on disk.
pub enum Work {
    Done(SpoolEntry, usize),
    Failed(String),
    DeviceLost(String),
}

/// A unit off the engine, as the loop receives it.
pub struct Finished {
    pub lease: Arc<Lease>,
    pub unit_id: i64,
    pub arguments: u64,
    /// Seconds the unit took on the engine.
    pub elapsed: f64,
    pub work: Work,
}

struct Queue {
    jobs: VecDeque<Job>,
    /// Jobs on the pool taking units from `jobs`.
    takers: usize,
}

/// The queue of units handed to the engine, and the jobs that compute them.
pub struct Dispatch {
    queue: Mutex<Queue>,
    slots: usize,
    backend: SharedBackend,
    misbehave: Option<Misbehave>,
    results: UnboundedSender<Finished>,
    /// Results sent to the loop and not yet spooled.
    unspooled: AtomicUsize,
    /// Times a taker stopped with units queued because the spool was full: the disk held the
    /// engine back.
    full_stops: std::sync::atomic::AtomicU64,
    /// Raised when a device is lost: no job takes another unit.
    halted: AtomicBool,
}

impl Dispatch {
    pub fn new(
        slots: usize,
        backend: SharedBackend,
        misbehave: Option<Misbehave>,
        results: UnboundedSender<Finished>,
    ) -> Arc<Dispatch> {
        Arc::new(Dispatch {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                takers: 0,
            }),
            slots: slots.max(1),
            backend,
            misbehave,
            results,
            unspooled: AtomicUsize::new(0),
            full_stops: std::sync::atomic::AtomicU64::new(0),
            halted: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `jobs` behind those already queued, and starts takers for them.
    pub fn push(self: &Arc<Self>, jobs: impl IntoIterator<Item = Job>) {
        let mut q = self.lock();
        q.jobs.extend(jobs);
        self.start_takers(&mut q);
    }

    /// Takes back the queued units of lease `lease_id` (not those on the engine): how many.
    pub fn withdraw(&self, lease_id: i64) -> usize {
        let mut q = self.lock();
        let before = q.jobs.len();
        q.jobs.retain(|j| j.lease.lease_id != lease_id);
        before - q.jobs.len()
    }

    /// Units queued and not yet on the engine.
    pub fn waiting(&self) -> usize {
        self.lock().jobs.len()
    }

    /// A result sent by a taker is on disk (or failed to get there): takers that stopped on a
    /// full spool start again.
    pub fn spooled(self: &Arc<Self>) {
        self.unspooled.fetch_sub(1, Ordering::SeqCst);
        let mut q = self.lock();
        self.start_takers(&mut q);
    }

    /// Times a taker stopped on a full spool with units queued.
    pub fn full_stops(&self) -> u64 {
        self.full_stops.load(Ordering::Relaxed)
    }

    fn spool_full(&self) -> bool {
        self.unspooled.load(Ordering::SeqCst) >= SPOOLING_PER_SLOT * self.slots
    }

    /// Starts takers up to `slots` while units are queued. Under the queue's lock, as a taker
    /// that finds the queue empty stops under it: no unit is left queued with no taker.
    fn start_takers(self: &Arc<Self>, q: &mut Queue) {
        // Every taker running is on a unit of its own: each queued unit may start one more.
        let mut wanted = q.jobs.len();
        while q.takers < self.slots && wanted > 0 && self.may_take() {
            q.takers += 1;
            wanted -= 1;
            let me = self.clone();
            rayon::spawn(move || me.take_one());
        }
    }

    fn may_take(&self) -> bool {
        !self.halted.load(Ordering::SeqCst) && !self.spool_full()
    }

    /// A taker: computes the next queued unit, then goes on with the one after as a new job on
    /// the pool. Spawned from a pool thread, that job goes to the same thread's own queue, so
    /// the thread starts it as soon as this one returns; and a thread that waits inside another
    /// unit for its stolen pieces may run it there, but then only one unit, not the rest of the
    /// queue (which would hold that other unit's result back until the queue is empty).
    fn take_one(self: Arc<Self>) {
        let (job, claim) = {
            let mut q = self.lock();
            // A unit whose binade's first period another job is searching now waits for it
            // (`claim_period`): every slot would otherwise search the same period side by side.
            // This taker stops; the one searching starts takers again when it is done.
            let claim = match q.jobs.front() {
                Some(j) if self.may_take() => match claim_period(&j.cfg, engine_unit(&j.unit)) {
                    Some(Claim::Busy) => {
                        q.takers -= 1;
                        return;
                    }
                    other => other,
                },
                _ => None,
            };
            // Halted or the spool full: the job stays queued (for the loop to withdraw, or for
            // a taker started once the spool has room).
            let job = match self.may_take().then(|| q.jobs.pop_front()).flatten() {
                Some(j) => j,
                None => {
                    if !q.jobs.is_empty() && self.spool_full() {
                        self.full_stops.fetch_add(1, Ordering::Relaxed);
                    }
                    q.takers -= 1;
                    return;
                }
            };
            (job, claim)
        };
        let t = Instant::now();
        let work = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            compute(
                &job.lease,
                &job.unit,
                &job.cfg,
                self.backend.as_ref(),
                self.misbehave,
            )
        }))
        .unwrap_or_else(|_| Work::Failed("the engine panicked".into()));
        let elapsed = t.elapsed().as_secs_f64();
        if matches!(work, Work::DeviceLost(_)) {
            self.halted.store(true, Ordering::SeqCst);
        }
        self.unspooled.fetch_add(1, Ordering::SeqCst);
        let done = Finished {
            lease: job.lease,
            unit_id: job.unit.unit_id,
            arguments: job.unit.spec.count,
            elapsed,
            work,
        };
        if self.results.send(done).is_err() {
            // The loop is gone: nothing would take another result.
            self.halted.store(true, Ordering::SeqCst);
        }
        // The period is searched (or failed): takers that stopped for it may go on.
        drop(claim);
        let mut q = self.lock();
        q.takers -= 1;
        self.start_takers(&mut q);
    }
}

/// Computes a unit, on the engine's thread pool.
fn compute(
    lease: &Lease,
    unit: &LeasedUnit,
    cfg: &SearchConfig,
    backend: &dyn Backend,
    misbehave: Option<Misbehave>,
) -> Work {
    let spec = engine_unit(unit);
    let t = Instant::now();
    let mut result = if misbehave == Some(Misbehave::Lazy) {
        misbehave::lazy_result(lease.fencing_token, &spec)
    } else {
        match compute_unit(cfg, spec, backend, unit.unit_id) {
            Ok(r) => to_wire(&r, lease.fencing_token, t.elapsed().as_secs_f64()),
            Err(UnitFailure::Unit(why)) => return Work::Failed(why),
            Err(UnitFailure::DeviceLost(why)) => return Work::DeviceLost(why),
        }
    };
    match misbehave {
        Some(Misbehave::Forge) => misbehave::forge(&mut result, &spec, cfg.precision),
        Some(Misbehave::Flip) => misbehave::flip(&mut result),
        _ => {}
    }
    let hr_cases = result.hr_cases.len();
    let entry = SpoolEntry {
        lease_id: lease.lease_id,
        unit_id: unit.unit_id,
        result,
    };
    Work::Done(entry, hr_cases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::fixtures;
    use std::time::Duration;
    use tmd_kernels::search::Cpu;
    use tmd_kernels::{Function, Precision};

    fn lease(units: u64) -> Arc<Lease> {
        Arc::new(fixtures::lease(7, fixtures::units(units)))
    }

    fn jobs(lease: &Arc<Lease>) -> Vec<Job> {
        let cfg = SearchConfig::new(Function::Exp, Precision::new(20).unwrap(), 12);
        lease
            .units
            .iter()
            .map(|u| Job {
                lease: lease.clone(),
                cfg,
                unit: u.clone(),
            })
            .collect()
    }

    fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Finished>) -> Finished {
        let t = Instant::now();
        loop {
            if let Ok(f) = rx.try_recv() {
                return f;
            }
            assert!(t.elapsed() < Duration::from_secs(60), "no result came");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The next `n` results, each computed and then spooled: their unit ids, sorted.
    fn done(
        d: &Arc<Dispatch>,
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<Finished>,
        n: usize,
    ) -> Vec<i64> {
        let mut ids: Vec<i64> = (0..n)
            .map(|_| {
                let f = next(rx);
                d.spooled();
                assert!(matches!(f.work, Work::Done(..)), "unit {}", f.unit_id);
                f.unit_id
            })
            .collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn takers_compute_every_unit_once_and_stop_when_the_queue_is_empty() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let d = Dispatch::new(3, Arc::new(Cpu), None, tx);
        let l = lease(10);
        d.push(jobs(&l).into_iter().take(4));
        assert!(d.lock().takers <= 3, "never more takers than slots");
        // More units while the first ones compute: they queue behind.
        d.push(jobs(&l).into_iter().skip(4));
        assert_eq!(done(&d, &mut rx, 10), (100..110).collect::<Vec<_>>());
        let t = Instant::now();
        while d.lock().takers > 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "takers left running");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(d.waiting(), 0);
        assert!(rx.try_recv().is_err(), "no unit computed twice");
    }

    /// The CPU back end, counting the arguments it walks on dense pieces.
    #[derive(Default)]
    struct CountingWalks(std::sync::atomic::AtomicU64);

    impl Backend for CountingWalks {
        fn search_piece(
            &self,
            g: &tmd_kernels::search::generation::Generated,
            test: tmd_kernels::search::existence::Test,
            packet_domains: u64,
        ) -> Result<tmd_kernels::search::PieceOutcome, tmd_kernels::search::SearchError> {
            Cpu.search_piece(g, test, packet_domains)
        }
        fn walk_dense(
            &self,
            pieces: &[(&tmd_kernels::search::dense::Dense, u64)],
        ) -> Result<(Vec<Vec<u64>>, f64), tmd_kernels::search::SearchError> {
            let n: u64 = pieces.iter().map(|p| p.1).sum();
            self.0.fetch_add(n, Ordering::SeqCst);
            Ok(tmd_kernels::search::dense::walk_on_host(pieces))
        }
        fn name(&self) -> String {
            "cpu (counting)".into()
        }
    }

    /// Four slots on eight units of one binade whose units copy its first period (sinpi in
    /// binary32 on [2^6, 2^7): a period of 2^18 arguments walked on its grid, units of 2^20):
    /// the period is searched once, by one slot, while the others wait for it, and every unit
    /// is computed once.
    #[test]
    fn slots_search_a_binades_first_period_once() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let backend = Arc::new(CountingWalks::default());
        let d = Dispatch::new(4, backend.clone(), None, tx);
        let fmt = tmd_kernels::numbers::format::Format::named("binary32").unwrap();
        // A threshold no other test uses: the period cache is the process's.
        let cfg = SearchConfig::in_format(Function::Sinpi, fmt, 13);
        let units: Vec<LeasedUnit> = (0..8u64)
            .map(|i| LeasedUnit {
                unit_id: 100 + i as i64,
                spec: tmd_wire::UnitSpec {
                    negative: false,
                    exponent: 6,
                    first: (1 << 23) + (i << 20),
                    count: 1 << 20,
                },
            })
            .collect();
        let l = Arc::new(fixtures::lease(9, units));
        d.push(l.units.iter().map(|u| Job {
            lease: l.clone(),
            cfg,
            unit: u.clone(),
        }));
        assert_eq!(done(&d, &mut rx, 8), (100..108).collect::<Vec<_>>());
        let walked = backend.0.load(Ordering::SeqCst);
        assert!(
            walked > 0 && walked <= 1 << 18,
            "{walked} arguments walked for one period of 2^18"
        );
    }

    #[test]
    fn a_full_spool_stops_the_takers_until_results_are_written() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let d = Dispatch::new(1, Arc::new(Cpu), None, tx);
        let full = SPOOLING_PER_SLOT as i64;
        let l = lease(full as u64 + 3);
        d.push(jobs(&l));
        // One slot: SPOOLING_PER_SLOT results may wait for the spool, then nothing starts.
        let first: Vec<i64> = (0..full).map(|_| next(&mut rx).unit_id).collect();
        assert_eq!(first, (100..100 + full).collect::<Vec<_>>());
        std::thread::sleep(Duration::from_millis(300));
        assert!(rx.try_recv().is_err(), "a unit started on a full spool");
        assert_eq!(d.waiting(), 3);
        d.spooled();
        assert_eq!(next(&mut rx).unit_id, 100 + full);
        std::thread::sleep(Duration::from_millis(300));
        // The lease stops: its units not started come back to the loop.
        assert_eq!(d.withdraw(l.lease_id), 2);
        d.spooled();
        d.spooled();
        std::thread::sleep(Duration::from_millis(100));
        assert!(rx.try_recv().is_err(), "a withdrawn unit was computed");
        assert_eq!(d.lock().takers, 0);
    }
}
