//! One log line per database outage, not one per refused request: the first request refused
//! because PostgreSQL is unreachable logs a WARN, the rest are counted, and the first success
//! after a quiet spell logs the outage's end with its length and count.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long without a refusal before a success ends the outage: after a restart of
/// PostgreSQL, connections the pool still holds fail once each, and those belong to the same
/// outage.
const QUIET: Duration = Duration::from_secs(5);

/// The server's view of the database's availability.
#[derive(Default)]
pub struct Outage {
    /// Lets the common case (no outage) skip the lock.
    active: AtomicBool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    since: Option<Instant>,
    last_refusal: Option<Instant>,
    refused: u64,
}

impl Outage {
    /// Something failed because the database is unreachable: `error` says how.
    pub fn down(&self, error: &str) {
        let mut i = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        i.last_refusal = Some(now);
        i.refused += 1;
        if i.since.is_none() {
            i.since = Some(now);
            self.active.store(true, Ordering::SeqCst);
            tracing::warn!(
                %error,
                "the database is unavailable: requests get 503 with Retry-After until it is back (logged once per outage)"
            );
        }
    }

    /// The database answered. Ends the outage once no refusal came for [`QUIET`].
    pub fn up(&self) {
        if !self.active.load(Ordering::SeqCst) {
            return;
        }
        let mut i = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (Some(since), Some(last)) = (i.since, i.last_refusal) else {
            return;
        };
        if last.elapsed() < QUIET {
            return;
        }
        tracing::info!(
            outage_s = since.elapsed().as_secs(),
            refused = i.refused,
            "the database is back"
        );
        *i = Inner::default();
        self.active.store(false, Ordering::SeqCst);
    }

    /// Whether an outage is in progress.
    pub fn active(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }
}
