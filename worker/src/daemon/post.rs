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

use super::backoff::Backoff;
use super::client::ClientError;
use super::coordinator::Coordinator;
use super::held::Held;
use crate::state::SpoolEntry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tmd_wire::{codes, BatchedResult, ResultBatch, UnitOutcomeStatus};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

/// Most units in one request (the server takes up to 1000).
pub const BATCH_MAX: usize = 256;
/// The longest a result waits in the queue for its batch to fill.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Results queued in memory before computing waits for the poster: the spool holds them all
/// anyway, this only bounds what a slow server lets pile up between two requests.
const QUEUE: usize = 4 * BATCH_MAX;

/// What became of one posted result.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Accepted,
    /// Not taken now (server unreachable or busy, token unknown, quarantine): kept.
    Later,
    /// Never to be taken (the unit went to another lease, ...): dropped.
    Refused(String),
    /// The result itself is unacceptable (400, 413): dropped, its unit released as failed.
    Unacceptable(String),
}

fn verdict_of_code(code: &str) -> Verdict {
    match code {
        codes::UNAUTHORIZED | codes::WORKER_QUARANTINED => Verdict::Later,
        codes::BAD_REQUEST | codes::PAYLOAD_TOO_LARGE => Verdict::Unacceptable(code.into()),
        _ => Verdict::Refused(code.into()),
    }
}

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

async fn post_loop<C: Coordinator>(
    coord: C,
    held: Arc<Held>,
    mut rx: mpsc::Receiver<SpoolEntry>,
    inner: Arc<Inner>,
) {
    let mut pending: Vec<SpoolEntry> = Vec::new();
    let mut oldest = Instant::now();
    let mut open = true;
    let mut urgent = false;
    let mut not_before: Option<Instant> = None;
    let mut backoff = Backoff::new();
    let mut single = false;
    let mut batch_max = BATCH_MAX;
    loop {
        while let Ok(e) = rx.try_recv() {
            if pending.is_empty() {
                oldest = Instant::now();
            }
            pending.push(e);
        }
        if !open && pending.is_empty() {
            return;
        }
        let now = Instant::now();
        let due = (!pending.is_empty()).then(|| {
            let want = if urgent || !open || pending.len() >= batch_max {
                now
            } else {
                oldest + FLUSH_EVERY
            };
            not_before.map_or(want, |n| want.max(n))
        });
        if due.is_some_and(|d| d <= now) {
            urgent = false;
            let n = pending.len().min(batch_max);
            let chunk: Vec<SpoolEntry> = pending[..n].to_vec();
            let round = post_round(&coord, &chunk, &mut single, &mut batch_max).await;
            if let Some(why) = &round.quarantined {
                *inner.quarantined.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
            }
            let mut kept = Vec::new();
            let mut failed = false;
            let mut settled: Vec<(i64, i64)> = Vec::new();
            let mut unacceptable: Vec<(i64, i64)> = Vec::new();
            for (e, v) in chunk.into_iter().zip(round.verdicts) {
                match v {
                    Verdict::Later => {
                        failed = true;
                        kept.push(e);
                    }
                    Verdict::Accepted => settled.push((e.lease_id, e.unit_id)),
                    Verdict::Refused(code) => {
                        warn!(unit.id = e.unit_id, lease.id = e.lease_id, %code, "result refused; dropping it");
                        settled.push((e.lease_id, e.unit_id));
                    }
                    Verdict::Unacceptable(code) => {
                        warn!(unit.id = e.unit_id, lease.id = e.lease_id, %code, "result refused as unacceptable; its unit is given back as failed");
                        settled.push((e.lease_id, e.unit_id));
                        unacceptable.push((e.lease_id, e.unit_id));
                    }
                }
            }
            // Written down as finished first, then out of the spool: a crash in between
            // posts them again and gets `replayed`. Where the state directory cannot be
            // written (deleted, disk full) they stay in the spool, but the server has them:
            // they are settled all the same, not posted again and again, and a next start
            // that finds them gets `replayed`.
            let recorded = held.mark_done(&settled);
            if recorded {
                for &(l, u) in &settled {
                    if let Err(err) = held.state.spool_remove(l, u) {
                        error!(error = %err, "cannot remove a posted result from the spool");
                    }
                }
            }
            let gone = settled;
            {
                let mut book = inner.book();
                book.requests += round.requests;
                book.posted += gone.len() as u64;
                if !recorded {
                    book.unrecorded += gone.len() as u64;
                }
                for &(l, _) in &gone {
                    if let Some(n) = book.unsettled.get_mut(&l) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            book.unsettled.remove(&l);
                        }
                    }
                }
                for &(l, u) in &unacceptable {
                    book.unacceptable.entry(l).or_default().push(u);
                }
            }
            inner.settled.notify_waiters();
            let gone: std::collections::HashSet<(i64, i64)> = gone.into_iter().collect();
            pending.retain(|e| !gone.contains(&(e.lease_id, e.unit_id)));
            // What is left waited already: at most another interval.
            oldest = Instant::now();
            if failed {
                if !open {
                    // Stopping, and the server does not take them now: they stay spooled
                    // and are posted at the next start.
                    return;
                }
                not_before = Some(Instant::now() + backoff.next(round.hint));
            } else {
                backoff.reset();
                not_before = None;
            }
            continue;
        }
        tokio::select! {
            m = rx.recv(), if open => match m {
                Some(e) => {
                    if pending.is_empty() {
                        oldest = Instant::now();
                    }
                    pending.push(e);
                }
                None => open = false,
            },
            _ = inner.flush.notified() => urgent = true,
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

struct Round {
    verdicts: Vec<Verdict>,
    requests: u64,
    hint: Option<Duration>,
    /// The coordinator's message where it refused a post because the worker is quarantined.
    quarantined: Option<String>,
}

/// Posts `chunk` (one request, or one per unit where the server has no batch route or
/// refuses the batch as a whole) and says what became of each unit, in order.
async fn post_round<C: Coordinator>(
    coord: &C,
    chunk: &[SpoolEntry],
    single: &mut bool,
    batch_max: &mut usize,
) -> Round {
    if !*single {
        let batch = ResultBatch {
            results: chunk
                .iter()
                .map(|e| BatchedResult {
                    lease_id: e.lease_id,
                    unit_id: e.unit_id,
                    result: e.result.clone(),
                })
                .collect(),
        };
        match coord.post_results(&batch).await {
            Ok(resp) => {
                let by_unit: HashMap<(i64, i64), _> = resp
                    .outcomes
                    .iter()
                    .map(|o| ((o.lease_id, o.unit_id), o))
                    .collect();
                let (mut accepted, mut replayed, mut other) = (0, 0, 0);
                let quarantined = resp
                    .outcomes
                    .iter()
                    .filter_map(|o| o.error.as_ref())
                    .find(|e| e.code == codes::WORKER_QUARANTINED)
                    .map(|e| e.message.clone());
                let verdicts = chunk
                    .iter()
                    .map(|e| match by_unit.get(&(e.lease_id, e.unit_id)) {
                        Some(o) => match o.status {
                            UnitOutcomeStatus::Accepted => {
                                accepted += 1;
                                debug!(unit.id = e.unit_id, hr_cases = ?o.hr_cases, "result accepted");
                                Verdict::Accepted
                            }
                            UnitOutcomeStatus::Replayed => {
                                replayed += 1;
                                Verdict::Accepted
                            }
                            UnitOutcomeStatus::Refused => {
                                other += 1;
                                let code = o.error.as_ref().map_or("", |e| e.code.as_str());
                                verdict_of_code(code)
                            }
                            UnitOutcomeStatus::Retry => {
                                other += 1;
                                Verdict::Later
                            }
                        },
                        // An answer without this unit: keep it, a later batch asks again.
                        None => Verdict::Later,
                    })
                    .collect();
                info!(
                    units = chunk.len(),
                    accepted, replayed, other, "results posted"
                );
                return Round {
                    verdicts,
                    requests: 1,
                    hint: None,
                    quarantined,
                };
            }
            Err(ClientError::Refused { status: 404, .. }) => {
                warn!("the coordinator has no batch route (an older tmd-server); posting one result per request");
                *single = true;
            }
            Err(ClientError::Refused { code, .. })
                if code == codes::PAYLOAD_TOO_LARGE && chunk.len() > 1 =>
            {
                *batch_max = (chunk.len() / 2).max(1);
                warn!(
                    batch_max = *batch_max,
                    "a batch of results was too large for the server; sending smaller ones"
                );
                return Round {
                    verdicts: vec![Verdict::Later; chunk.len()],
                    requests: 1,
                    hint: Some(Duration::from_millis(100)),
                    quarantined: None,
                };
            }
            Err(e)
                if e.code()
                    .is_some_and(|c| verdict_of_code(c) == Verdict::Later) =>
            {
                error!(error = %e, "results not taken now; they stay in the spool");
                let mut round = later(chunk.len(), None);
                if e.code() == Some(codes::WORKER_QUARANTINED) {
                    round.quarantined = Some(e.to_string());
                }
                return round;
            }
            Err(ClientError::Refused { code, message, .. }) => {
                // Refused as a whole: each unit posted alone gets its own answer.
                warn!(%code, %message, "the batch was refused as a whole; posting its units one by one");
            }
            Err(ClientError::Unavailable {
                message,
                retry_after,
            }) => {
                warn!(%message, results = chunk.len(), "server unavailable; the results stay in the spool");
                return later(chunk.len(), retry_after);
            }
            Err(e) => {
                error!(error = %e, results = chunk.len(), "results not posted; they stay in the spool");
                return later(chunk.len(), None);
            }
        }
    }
    let mut verdicts = Vec::with_capacity(chunk.len());
    let mut hint = None;
    let mut quarantined = None;
    for e in chunk {
        let v = match coord.post_result(e.lease_id, e.unit_id, &e.result).await {
            Ok(acc) => {
                info!(
                    unit.id = e.unit_id,
                    lease.id = e.lease_id,
                    hr_cases = acc.hr_cases,
                    "result accepted"
                );
                Verdict::Accepted
            }
            Err(ClientError::Unavailable {
                message,
                retry_after,
            }) => {
                warn!(%message, unit.id = e.unit_id, "server unavailable; the result stays in the spool");
                hint = retry_after;
                Verdict::Later
            }
            Err(ClientError::Refused { code, message, .. }) => {
                let v = verdict_of_code(&code);
                if v == Verdict::Later {
                    error!(%code, %message, "the result stays in the spool");
                }
                if code == codes::WORKER_QUARANTINED {
                    quarantined = Some(message);
                }
                v
            }
            Err(err) => {
                error!(error = %err, unit.id = e.unit_id, "the result stays in the spool");
                Verdict::Later
            }
        };
        let stop = v == Verdict::Later;
        verdicts.push(v);
        if stop {
            // The server is away: the rest waits too, without a request each.
            verdicts.resize(chunk.len(), Verdict::Later);
            break;
        }
    }
    Round {
        requests: verdicts.len() as u64,
        verdicts,
        hint,
        quarantined,
    }
}

fn later(n: usize, hint: Option<Duration>) -> Round {
    Round {
        verdicts: vec![Verdict::Later; n],
        requests: 1,
        hint,
        quarantined: None,
    }
}
