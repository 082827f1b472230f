//! The spool's group commit: results off the engine wait here while the group before them is
//! written and synced on a blocking thread, one group at a time, so that the results that
//! arrive during one sync share the next. Once spooled, a result survives a crash and is
//! posted later.

use super::dispatch::{Finished, Work};
use super::misbehave::Misbehave;
use crate::state::{SpoolEntry, StateDir};
use anyhow::{anyhow, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tracing::info;

/// Results per slot a spool group takes before it is synced without waiting for more: half
/// of what may wait for the spool (`SPOOLING_PER_SLOT`), so the next group fills while one
/// syncs and no unit waits for a free place.
pub const SPOOL_GROUP_PER_SLOT: usize = super::dispatch::SPOOLING_PER_SLOT / 2;
/// The longest a result waits for others to share its group's sync. A sync per result cost
/// the CPU daemon 3-7% of its CPU; a result is posted in a batch seconds later, so
/// this delays nothing the server waits for.
const SPOOL_LINGER: Duration = Duration::from_millis(50);

/// What became of a unit off the engine.
pub enum Outcome {
    /// On disk, with its number of HR-cases.
    Spooled(SpoolEntry, usize),
    Failed(String),
    DeviceLost(String),
    SpoolFailed(String),
}

/// A unit off the engine, its result spooled or not.
pub struct Computed {
    pub lease_id: i64,
    pub unit_id: i64,
    pub arguments: u64,
    pub elapsed: f64,
    pub outcome: Outcome,
}

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

/// The results waiting for the spool and the group being synced.
pub struct GroupCommit {
    state: Arc<StateDir>,
    misbehave: Option<Misbehave>,
    syncing: JoinSet<(Vec<Computed>, Duration)>,
    waiting: Vec<Finished>,
    /// When the first result of `waiting` came.
    since: Instant,
    /// Results spooled, and the groups (synced writes) they took.
    spooled: u64,
    groups: u64,
    /// Time the groups took to write and sync, in all and the longest.
    sync: Duration,
    sync_max: Duration,
}

impl GroupCommit {
    pub fn new(state: Arc<StateDir>, misbehave: Option<Misbehave>) -> GroupCommit {
        GroupCommit {
            state,
            misbehave,
            syncing: JoinSet::new(),
            waiting: Vec::new(),
            since: Instant::now(),
            spooled: 0,
            groups: 0,
            sync: Duration::ZERO,
            sync_max: Duration::ZERO,
        }
    }

    /// A result off the engine joins the next group.
    pub fn add(&mut self, f: Finished) {
        if self.waiting.is_empty() {
            self.since = Instant::now();
        }
        self.waiting.push(f);
    }

    /// No group is being synced.
    pub fn is_idle(&self) -> bool {
        self.syncing.is_empty()
    }

    /// Starts syncing the waiting results if no group is syncing and they are ready (see
    /// [`group_ready`]).
    pub fn start_if_ready(&mut self, in_flight: usize, slots: usize, hurry: bool) {
        let ready = group_ready(
            self.waiting.len(),
            self.since.elapsed(),
            in_flight,
            slots,
            hurry,
        );
        if self.is_idle() && ready {
            let group = std::mem::take(&mut self.waiting);
            let (state, misbehave) = (self.state.clone(), self.misbehave);
            self.syncing.spawn(spool_blocking(group, state, misbehave));
        }
    }

    /// How long the loop may wait before the waiting results are due, if they wait for no
    /// group being synced.
    pub fn due_in(&self) -> Option<Duration> {
        (!self.waiting.is_empty() && self.is_idle())
            .then(|| SPOOL_LINGER.saturating_sub(self.since.elapsed()))
    }

    /// The group being synced, once it is on disk; pending while none is.
    pub async fn committed(&mut self) -> Result<Vec<Computed>> {
        let Some(joined) = self.syncing.join_next().await else {
            return std::future::pending().await;
        };
        let (group, took) = joined.map_err(|e| anyhow!("a unit's task failed: {e}"))?;
        self.groups += 1;
        self.sync += took;
        self.sync_max = self.sync_max.max(took);
        self.spooled += group
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Spooled(..)))
            .count() as u64;
        Ok(group)
    }

    /// Logs what the groups cost; `held_back` is how often the engine waited for the spool.
    pub fn log_summary(&self, held_back: u64) {
        if self.spooled > 0 {
            info!(
                results = self.spooled,
                groups = self.groups,
                sync_s = format!("{:.3}", self.sync.as_secs_f64()),
                longest_sync_ms = self.sync_max.as_millis() as u64,
                engine_held_back = held_back,
                "results spooled, in groups synced once each"
            );
        }
    }
}

/// Spools a group of results on a blocking thread (see [`spool`]); a thread that fails
/// leaves every result of the group unspooled.
async fn spool_blocking(
    group: Vec<Finished>,
    state: Arc<StateDir>,
    misbehave: Option<Misbehave>,
) -> (Vec<Computed>, Duration) {
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
                    outcome: Outcome::SpoolFailed(format!("spooling the result failed: {e}")),
                })
                .collect(),
            Duration::ZERO,
        ),
    }
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
