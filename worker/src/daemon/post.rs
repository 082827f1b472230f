//! Posting results in batches, beside the computation: each result is spooled to disk first,
//! then queued here (a bounded channel); a task gathers the queue into `POST /api/v1/results`
//! requests of up to [`BATCH_MAX`] units, sent when the batch is full, a second after its
//! oldest result was queued, or at once when a lease ends and asks for its results to settle.
//!
//! Each unit's outcome is handled as the single post's answers were: accepted or replayed
//! leave the spool; refused with a code that waiting cannot change is dropped (and a result
//! the server finds unacceptable, 400 or 413, makes its unit one to release as failed);
//! `retry`, an unreachable server, an unknown token or a quarantine keep it, spooled and
//! queued, for a later batch. A coordinator without the batch route (404) gets single posts.

mod round;

use super::backoff::Backoff;
use super::coordinator::Coordinator;
use super::held::Held;
use crate::state::SpoolEntry;
use round::{post_round, Route, Verdict};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tracing::{error, warn};

/// Most units in one request (the server takes up to 1000).
pub const BATCH_MAX: usize = 256;
/// The longest a result waits in the queue for its batch to fill.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Results queued in memory before computing waits for the poster: the spool holds them all
/// anyway, this only bounds what a slow server lets pile up between two requests.
const QUEUE: usize = 4 * BATCH_MAX;

/// What the lease ends wait on: results not yet settled per lease, and the units whose
/// results were unacceptable.
#[derive(Default)]
struct Book {
    unsettled: HashMap<i64, usize>,
    unacceptable: HashMap<i64, Vec<i64>>,
    requests: u64,
    /// Results settled (taken, or refused for good) since the start.
    posted: u64,
    /// Results queued since the start.
    submitted: u64,
    /// Results the server took whose unit could not be written down as done (the state
    /// directory failed): they stay in the spool.
    unrecorded: u64,
}

struct Inner {
    flush: Notify,
    settled: Notify,
    book: Mutex<Book>,
    /// The coordinator's word that this worker is quarantined, from a refused post.
    quarantined: Mutex<Option<String>>,
}

impl Inner {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The view of the poster a lease's end needs.
#[derive(Clone)]
pub struct PostWatch(Arc<Inner>);

impl PostWatch {
    /// Asks for the lease's results to be posted now and waits until none is left unsettled,
    /// at most `limit`: `false` if some are still waiting (the server is away).
    pub async fn settle(&self, lease_id: i64, limit: Duration) -> bool {
        self.settle_until(limit, |b| !b.unsettled.contains_key(&lease_id))
            .await
    }

    /// Asks for the results queued so far to be posted now and waits until they are settled,
    /// at most `limit`: `false` if some are still waiting. Results queued meanwhile are not
    /// waited for: on a fast engine they would keep the wait going.
    pub async fn settle_queued(&self, limit: Duration) -> bool {
        let queued = self.0.book().submitted;
        self.settle_until(limit, |b| b.posted >= queued).await
    }

    async fn settle_until(&self, limit: Duration, done: impl Fn(&Book) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        self.0.flush.notify_one();
        loop {
            let settled = self.0.settled.notified();
            if done(&self.0.book()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, settled).await.is_err() {
                return done(&self.0.book());
            }
        }
    }

    /// The units of `lease_id` whose results the server found unacceptable (once).
    pub fn take_unacceptable(&self, lease_id: i64) -> Vec<i64> {
        self.0
            .book()
            .unacceptable
            .remove(&lease_id)
            .unwrap_or_default()
    }

    /// Why the coordinator quarantined this worker, when a post was refused so: the daemon
    /// stops, and exits with the quarantine's status whatever else ended its run.
    pub fn quarantined(&self) -> Option<String> {
        self.0
            .quarantined
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Requests made and results posted so far.
    pub fn counts(&self) -> (u64, u64) {
        let b = self.0.book();
        (b.requests, b.posted)
    }

    /// Results the server took that stay in the spool (their units could not be written down
    /// as done).
    pub fn unrecorded(&self) -> u64 {
        self.0.book().unrecorded
    }
}

/// The posting task and its queue.
pub struct Poster {
    tx: mpsc::Sender<SpoolEntry>,
    watch: PostWatch,
    task: tokio::task::JoinHandle<()>,
}

impl Poster {
    pub fn start<C: Coordinator>(coord: C, held: Arc<Held>) -> Poster {
        let (tx, rx) = mpsc::channel(QUEUE);
        let inner = Arc::new(Inner {
            flush: Notify::new(),
            settled: Notify::new(),
            book: Mutex::new(Book::default()),
            quarantined: Mutex::new(None),
        });
        let task = tokio::spawn(post_loop(coord, held, rx, inner.clone()));
        Poster {
            tx,
            watch: PostWatch(inner),
            task,
        }
    }

    pub fn watch(&self) -> PostWatch {
        self.watch.clone()
    }

    /// Queues a spooled result; waits while the queue is full.
    pub async fn submit(&self, e: SpoolEntry) {
        {
            let mut book = self.watch.0.book();
            *book.unsettled.entry(e.lease_id).or_default() += 1;
            book.submitted += 1;
        }
        if self.tx.send(e).await.is_err() {
            error!("the poster stopped; the result stays in the spool");
        }
    }

    /// Posts what is queued (until the server fails to take it, at most `limit`) and stops.
    pub async fn close(self, limit: Duration) {
        drop(self.tx);
        self.watch.0.flush.notify_one();
        let mut task = self.task;
        if tokio::time::timeout(limit, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// The poster's state between two requests.
struct PostLoop<C: Coordinator> {
    coord: C,
    held: Arc<Held>,
    inner: Arc<Inner>,
    /// Results queued and not settled yet, oldest first.
    pending: Vec<SpoolEntry>,
    /// When the oldest of `pending` started waiting.
    oldest: Instant,
    /// Whether the daemon may still queue results.
    open: bool,
    /// A lease's end or a lease request asked for the results now.
    urgent: bool,
    /// No request before this: the server did not take the last one.
    not_before: Option<Instant>,
    backoff: Backoff,
    route: Route,
}

async fn post_loop<C: Coordinator>(
    coord: C,
    held: Arc<Held>,
    mut rx: mpsc::Receiver<SpoolEntry>,
    inner: Arc<Inner>,
) {
    let mut l = PostLoop {
        coord,
        held,
        inner,
        pending: Vec::new(),
        oldest: Instant::now(),
        open: true,
        urgent: false,
        not_before: None,
        backoff: Backoff::new(),
        route: Route::default(),
    };
    loop {
        while let Ok(e) = rx.try_recv() {
            l.queue(e);
        }
        if !l.open && l.pending.is_empty() {
            return;
        }
        let now = Instant::now();
        let due = l.due(now);
        if due.is_some_and(|d| d <= now) {
            if !l.post_next().await {
                return;
            }
            continue;
        }
        tokio::select! {
            m = rx.recv(), if l.open => match m {
                Some(e) => l.queue(e),
                None => l.open = false,
            },
            _ = l.inner.flush.notified() => l.urgent = true,
            _ = sleep_until_some(due) => {}
        }
    }
}

async fn sleep_until_some(due: Option<Instant>) {
    match due {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// A round's results sorted by what becomes of them.
#[derive(Default)]
struct Sorted {
    /// Taken, or refused for good: out of the queue (and, once written down, of the spool).
    settled: Vec<(i64, i64)>,
    /// Settled, and their units to be released as failed.
    unacceptable: Vec<(i64, i64)>,
    /// Some were not taken now: they stay queued, and the next request waits.
    later: bool,
}

impl Sorted {
    fn of(chunk: Vec<SpoolEntry>, verdicts: Vec<Verdict>) -> Sorted {
        let mut s = Sorted::default();
        for (e, v) in chunk.into_iter().zip(verdicts) {
            let key = (e.lease_id, e.unit_id);
            match v {
                Verdict::Later => s.later = true,
                Verdict::Accepted => s.settled.push(key),
                Verdict::Refused(code) => {
                    warn!(unit.id = e.unit_id, lease.id = e.lease_id, %code, "result refused; dropping it");
                    s.settled.push(key);
                }
                Verdict::Unacceptable(code) => {
                    warn!(unit.id = e.unit_id, lease.id = e.lease_id, %code, "result refused as unacceptable; its unit is given back as failed");
                    s.settled.push(key);
                    s.unacceptable.push(key);
                }
            }
        }
        s
    }
}

impl<C: Coordinator> PostLoop<C> {
    fn queue(&mut self, e: SpoolEntry) {
        if self.pending.is_empty() {
            self.oldest = Instant::now();
        }
        self.pending.push(e);
    }

    /// When the next request goes: at once for a full batch, an urgent one or at the close,
    /// else a flush interval after the oldest result, and never before `not_before`.
    fn due(&self, now: Instant) -> Option<Instant> {
        (!self.pending.is_empty()).then(|| {
            let want = if self.urgent || !self.open || self.pending.len() >= self.route.batch_max {
                now
            } else {
                self.oldest + FLUSH_EVERY
            };
            self.not_before.map_or(want, |n| want.max(n))
        })
    }

    /// Posts the oldest results and settles what the server took or refused for good;
    /// `false` when the poster stops (closed, and the server did not take them now: they
    /// stay spooled and are posted at the next start).
    async fn post_next(&mut self) -> bool {
        self.urgent = false;
        let n = self.pending.len().min(self.route.batch_max);
        let chunk: Vec<SpoolEntry> = self.pending[..n].to_vec();
        let round = post_round(&self.coord, &chunk, &mut self.route).await;
        if let Some(why) = round.quarantined {
            *self
                .inner
                .quarantined
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(why);
        }
        let sorted = Sorted::of(chunk, round.verdicts);
        let recorded = forget(&self.held, &sorted.settled);
        self.inner.book().account(round.requests, &sorted, recorded);
        self.inner.settled.notify_waiters();
        let gone: HashSet<(i64, i64)> = sorted.settled.into_iter().collect();
        self.pending
            .retain(|e| !gone.contains(&(e.lease_id, e.unit_id)));
        // What is left waited already: at most another interval.
        self.oldest = Instant::now();
        if !sorted.later {
            self.backoff.reset();
            self.not_before = None;
        } else if self.open {
            self.not_before = Some(Instant::now() + self.backoff.next(round.hint));
        } else {
            return false;
        }
        true
    }
}

/// Writes the settled units down as finished first, then takes them out of the spool: a crash
/// in between posts them again and gets `replayed`. Where the state directory cannot be
/// written (deleted, disk full) they stay in the spool, but the server has them: they are
/// settled all the same, not posted again and again, and a next start that finds them gets
/// `replayed`. `false` in that case.
fn forget(held: &Held, settled: &[(i64, i64)]) -> bool {
    let recorded = held.mark_done(settled);
    if recorded {
        for &(l, u) in settled {
            if let Err(err) = held.state.spool_remove(l, u) {
                error!(error = %err, "cannot remove a posted result from the spool");
            }
        }
    }
    recorded
}

impl Book {
    /// Counts a round: its requests, its settled results (`recorded` if their units were
    /// written down as done) and the units whose results were unacceptable.
    fn account(&mut self, requests: u64, sorted: &Sorted, recorded: bool) {
        self.requests += requests;
        self.posted += sorted.settled.len() as u64;
        if !recorded {
            self.unrecorded += sorted.settled.len() as u64;
        }
        for &(l, _) in &sorted.settled {
            if let Some(n) = self.unsettled.get_mut(&l) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.unsettled.remove(&l);
                }
            }
        }
        for &(l, u) in &sorted.unacceptable {
            self.unacceptable.entry(l).or_default().push(u);
        }
    }
}
