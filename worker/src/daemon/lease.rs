//! A lease in hand, from its taking to its closing: the search its task asks for, its units
//! queued, on the engine, computed or failed, the heartbeat that keeps it and raises its flags
//! (lost, campaign stopped), and its end: its results settled, its unfinished or failed units
//! released, the lease forgotten.

use super::backoff::Backoff;
use super::client::ClientError;
use super::coordinator::Coordinator;
use super::dispatch::{Dispatch, Job};
use super::engine::failure_reason;
use super::held::Held;
use super::post::PostWatch;
use crate::state::LeaseState;
use anyhow::{Context, Result};
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tmd_kernels::numbers::format::Format;
use tmd_kernels::search::SearchConfig;
use tmd_kernels::{Function, Precision};
use tmd_wire::{CampaignState, Lease, LeaseTask, LeasedUnit, ReleaseLease};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

/// The longest a lease's end waits for its results to be taken before releasing it.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);

/// Flags the heartbeat task raises for its lease.
#[derive(Default)]
pub struct LeaseFlags {
    pub lost: AtomicBool,
    pub stop: AtomicBool,
}

/// The search a lease's task asks for.
pub fn search_config(task: &LeaseTask) -> Result<SearchConfig> {
    let function: Function = task
        .function
        .parse()
        .with_context(|| format!("the server leased an unknown function '{}'", task.function))?;
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
    Ok(SearchConfig::in_format(function, format, task.min_bits))
}

/// A lease in hand.
pub struct Active {
    pub lease: Arc<Lease>,
    pub cfg: SearchConfig,
    flags: Arc<LeaseFlags>,
    heartbeat: Option<JoinHandle<()>>,
    /// Units not started yet.
    pub queue: VecDeque<LeasedUnit>,
    /// Units from their hand-over to the engine to their result spooled.
    pub running: usize,
    /// Units computed (here or by an earlier run).
    pub finished: BTreeSet<i64>,
    failed: Vec<i64>,
    failures: Vec<String>,
}

impl Active {
    /// Takes a lease in hand: writes it down, with the units of its `done` set or in the spool
    /// as finished, and queues the others.
    pub fn take(mut ls: LeaseState, held: &Held, cfg: SearchConfig) -> Result<Active> {
        let lease = Arc::new(ls.lease.clone());
        ls.done.extend(held.state.spooled_units(lease.lease_id)?);
        let finished = ls.done.clone();
        held.insert(ls)?;
        let queue = lease
            .units
            .iter()
            .filter(|u| !finished.contains(&u.unit_id))
            .cloned()
            .collect();
        Ok(Active {
            lease,
            cfg,
            flags: Arc::new(LeaseFlags::default()),
            heartbeat: None,
            queue,
            running: 0,
            finished,
            failed: Vec::new(),
            failures: Vec::new(),
        })
    }

    pub fn id(&self) -> i64 {
        self.lease.lease_id
    }

    /// Starts heartbeating the lease (see [`heartbeat`]).
    pub fn start_heartbeat<C: Coordinator>(&mut self, coord: C) {
        let task = heartbeat(coord, &self.lease, self.flags.clone());
        self.heartbeat = Some(task);
    }

    /// Whether the heartbeat found the lease lost or its campaign stopped.
    pub fn stopped(&self) -> bool {
        self.flags.lost.load(Ordering::SeqCst) || self.flags.stop.load(Ordering::SeqCst)
    }

    /// Starts nothing more; the units handed over and not started come back from `dispatch`.
    pub fn withdraw(&mut self, dispatch: Option<&Dispatch>) {
        self.queue.clear();
        if let Some(d) = dispatch {
            self.running -= d.withdraw(self.id());
        }
    }

    /// Hands the first `n` queued units to the engine.
    pub fn hand_over(&mut self, dispatch: &Arc<Dispatch>, n: usize) {
        let (lease, cfg) = (self.lease.clone(), self.cfg);
        dispatch.push(self.queue.drain(..n).map(|unit| Job {
            lease: lease.clone(),
            cfg,
            unit,
        }));
        self.running += n;
    }

    /// Nothing queued and nothing on the engine: the lease is to be closed.
    pub fn is_spent(&self) -> bool {
        self.queue.is_empty() && self.running == 0
    }

    /// The engine failed on a unit: it is released as failed.
    pub fn unit_failed(&mut self, unit_id: i64, why: &str) {
        self.failed.push(unit_id);
        self.failures.push(format!("unit {unit_id}: {why}"));
    }

    /// Why the lease ends with units unfinished when the engine failed on some.
    pub fn failure_reason(&self) -> Option<String> {
        (!self.failures.is_empty()).then(|| failure_reason(&self.failures))
    }

    /// Ends the lease, every unit computed or given up: waits (a bounded time) for its results
    /// to be taken, releases its unfinished and failed units, and forgets it.
    pub async fn close<C: Coordinator>(
        mut self,
        coord: C,
        held: Arc<Held>,
        watch: PostWatch,
        reason: String,
    ) {
        // Every unit is computed or abandoned: the lease needs no more heartbeats, and one sent
        // after the last post would find the lease finished and report it lost.
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        let id = self.id();
        let settled = watch.settle(id, SETTLE_LIMIT).await;
        let unacceptable = watch.take_unacceptable(id);
        let reason = if self.failures.is_empty() && !unacceptable.is_empty() {
            "the server refused these units' results as unacceptable".to_string()
        } else {
            reason
        };
        self.failed.extend(unacceptable);
        if self.has_unfinished() && !self.flags.lost.load(Ordering::SeqCst) {
            if settled {
                self.release(&coord, reason).await;
            } else {
                // Releasing now would lose the spooled results: the lease is left to expire
                // instead, after which the server still accepts them.
                warn!(
                    lease.id = id,
                    "results of this lease are still spooled; not releasing it"
                );
            }
        }
        if let Err(e) = held.remove(id) {
            error!(lease.id = id, error = %e, "cannot forget the lease");
        }
    }

    /// Units neither computed nor failed, or failed ones: what a release gives back.
    fn has_unfinished(&self) -> bool {
        let (finished, failed) = (&self.finished, &self.failed);
        !failed.is_empty()
            || self
                .lease
                .units
                .iter()
                .any(|u| !finished.contains(&u.unit_id) && !failed.contains(&u.unit_id))
    }

    async fn release<C: Coordinator>(&self, coord: &C, reason: String) {
        let id = self.id();
        let body = ReleaseLease {
            fencing_token: self.lease.fencing_token,
            failed_units: self.failed.clone(),
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

/// Heartbeats `lease` until it is aborted or the lease is gone: raises `flags.stop` when its
/// campaign is cancelled or paused, `flags.lost` when the server no longer knows the lease.
fn heartbeat<C: Coordinator>(coord: C, lease: &Lease, flags: Arc<LeaseFlags>) -> JoinHandle<()> {
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

/// The leases in hand: the one being computed and the next.
#[derive(Default)]
pub struct Leases(Vec<Active>);

impl Leases {
    pub fn push(&mut self, a: Active) {
        self.0.push(a);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Active> {
        self.0.iter_mut()
    }

    /// The lease of a unit in flight.
    pub fn get_mut(&mut self, lease_id: i64) -> &mut Active {
        self.0
            .iter_mut()
            .find(|a| a.id() == lease_id)
            .expect("a lease with units in flight is held")
    }

    /// Units between their hand-over to the engine and their result spooled.
    pub fn running(&self) -> usize {
        self.0.iter().map(|a| a.running).sum()
    }

    /// Units not handed over yet.
    pub fn queued(&self) -> usize {
        self.0.iter().map(|a| a.queue.len()).sum()
    }

    /// Units not computed yet.
    pub fn in_hand(&self) -> usize {
        self.queued() + self.running()
    }

    /// Takes out the leases with nothing queued or running, in order.
    pub fn take_spent(&mut self) -> Vec<Active> {
        let (spent, kept) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(Active::is_spent);
        self.0 = kept;
        spent
    }
}
