//! The verification budget: how much MPFR time the posts of one worker may cost a coordinator,
//! per unit, per lease and per hour. No I/O: the ledger is told what was spent and when.
//!
//! A result's cases are re-verified with MPFR before anything is recorded, so a worker decides
//! how much server CPU its posts take. An honest engine's result costs what its unit's cases
//! cost (milliseconds to seconds); a hostile one could post the same slow result again and
//! again (a post that times out records nothing). The ledger charges every verification to its
//! worker, unit and lease whatever became of the post, so repeats find their budget spent.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The limits, in seconds of verification (`tmd-server serve` flags).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerifyBudget {
    /// Most seconds the posts of one worker for one unit may cost, all posts together.
    pub per_unit: f64,
    /// Most seconds the posts of one worker under one lease may cost.
    pub per_lease: f64,
    /// Most seconds one worker's posts may cost per hour (refilled continuously): a bound on
    /// the share of the coordinator one worker takes, not evidence against it.
    pub per_worker_hour: f64,
}

impl Default for VerifyBudget {
    fn default() -> Self {
        VerifyBudget {
            per_unit: 60.0,
            per_lease: 600.0,
            per_worker_hour: 3600.0,
        }
    }
}

/// Why no verification may start now.
#[derive(Debug, Clone, PartialEq)]
pub enum Spent {
    /// The unit's or the lease's budget is spent: the posts are abnormal, they count against
    /// the worker.
    Unit {
        spent: f64,
        limit: f64,
    },
    Lease {
        spent: f64,
        limit: f64,
    },
    /// The worker's hourly budget is spent: it waits, as when the server is busy.
    Worker {
        retry_after: Duration,
    },
}

/// A worker's hourly allowance: a bucket of seconds refilled at `per_worker_hour / 3600` per
/// second, never above `per_worker_hour`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    seconds: f64,
    at: Instant,
}

/// What one coordinator spent verifying, per worker, unit and lease. Entries of units and
/// leases not charged for [`VerifyLedger::FORGET_AFTER`] are forgotten (their budgets are
/// for repeats, which come within a lease's life).
#[derive(Debug, Default)]
pub struct VerifyLedger {
    units: HashMap<(i64, i64), (f64, Instant)>,
    leases: HashMap<(i64, i64), (f64, Instant)>,
    workers: HashMap<i64, Bucket>,
    charges: u64,
}

impl VerifyLedger {
    /// How long an entry of a unit or a lease is kept after its last charge.
    pub const FORGET_AFTER: Duration = Duration::from_secs(6 * 3600);

    /// The seconds a verification of `worker`'s result for `unit` under `lease` may take now,
    /// or why none may start.
    pub fn allowance(
        &mut self,
        budget: &VerifyBudget,
        worker: i64,
        lease: i64,
        unit: i64,
        now: Instant,
    ) -> Result<f64, Spent> {
        let unit_spent = self.units.get(&(worker, unit)).map_or(0.0, |e| e.0);
        if unit_spent >= budget.per_unit {
            return Err(Spent::Unit {
                spent: unit_spent,
                limit: budget.per_unit,
            });
        }
        let lease_spent = self.leases.get(&(worker, lease)).map_or(0.0, |e| e.0);
        if lease_spent >= budget.per_lease {
            return Err(Spent::Lease {
                spent: lease_spent,
                limit: budget.per_lease,
            });
        }
        let bucket = self.bucket(budget, worker, now);
        if bucket <= 0.0 {
            let rate = budget.per_worker_hour / 3600.0;
            let wait = if rate > 0.0 {
                -bucket / rate + 1.0
            } else {
                3600.0
            };
            return Err(Spent::Worker {
                retry_after: Duration::from_secs_f64(wait.clamp(1.0, 3600.0)),
            });
        }
        Ok((budget.per_unit - unit_spent)
            .min(budget.per_lease - lease_spent)
            .min(bucket))
    }

    /// Charges `seconds` of verification to `worker`, its `unit` and its `lease`.
    pub fn charge(
        &mut self,
        budget: &VerifyBudget,
        worker: i64,
        lease: i64,
        unit: i64,
        seconds: f64,
        now: Instant,
    ) {
        let seconds = if seconds.is_finite() {
            seconds.max(0.0)
        } else {
            0.0
        };
        let u = self.units.entry((worker, unit)).or_insert((0.0, now));
        *u = (u.0 + seconds, now);
        let l = self.leases.entry((worker, lease)).or_insert((0.0, now));
        *l = (l.0 + seconds, now);
        let left = self.bucket(budget, worker, now);
        self.workers.insert(
            worker,
            Bucket {
                seconds: left - seconds,
                at: now,
            },
        );
        self.charges += 1;
        if self.charges.is_multiple_of(1024) {
            self.forget(now);
        }
    }

    /// The worker's allowance now, refilled since its last charge.
    fn bucket(&self, budget: &VerifyBudget, worker: i64, now: Instant) -> f64 {
        let cap = budget.per_worker_hour;
        match self.workers.get(&worker) {
            None => cap,
            Some(b) => {
                let refill = now.saturating_duration_since(b.at).as_secs_f64() * cap / 3600.0;
                (b.seconds + refill).min(cap)
            }
        }
    }

    /// Drops the entries not charged for [`Self::FORGET_AFTER`].
    fn forget(&mut self, now: Instant) {
        let fresh = |at: &Instant| now.saturating_duration_since(*at) < Self::FORGET_AFTER;
        self.units.retain(|_, (_, at)| fresh(at));
        self.leases.retain(|_, (_, at)| fresh(at));
        self.workers.retain(|_, b| fresh(&b.at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_s_budget_bounds_every_post_of_it_together() {
        let b = VerifyBudget {
            per_unit: 2.0,
            per_lease: 10.0,
            per_worker_hour: 3600.0,
        };
        let mut l = VerifyLedger::default();
        let t = Instant::now();
        assert_eq!(l.allowance(&b, 1, 10, 100, t), Ok(2.0));
        l.charge(&b, 1, 10, 100, 1.5, t);
        assert_eq!(l.allowance(&b, 1, 10, 100, t), Ok(0.5));
        l.charge(&b, 1, 10, 100, 0.6, t);
        assert!(matches!(
            l.allowance(&b, 1, 10, 100, t),
            Err(Spent::Unit { .. })
        ));
        // Another unit of the lease, and the same unit for another worker, have their own.
        assert_eq!(l.allowance(&b, 1, 10, 101, t), Ok(2.0));
        assert_eq!(l.allowance(&b, 2, 11, 100, t), Ok(2.0));
        // The lease's budget bounds its units together.
        for u in 0..4 {
            l.charge(&b, 1, 10, 200 + u, 2.0, t);
        }
        assert!(matches!(
            l.allowance(&b, 1, 10, 300, t),
            Err(Spent::Lease { .. })
        ));
    }

    #[test]
    fn a_worker_s_hourly_budget_refills_and_tells_when() {
        let b = VerifyBudget {
            per_unit: 1e9,
            per_lease: 1e9,
            per_worker_hour: 36.0,
        };
        let mut l = VerifyLedger::default();
        let t = Instant::now();
        l.charge(&b, 1, 10, 100, 40.0, t);
        match l.allowance(&b, 1, 10, 101, t) {
            Err(Spent::Worker { retry_after }) => {
                // 4 s owed at 0.01 s per second: 400 s, plus a second.
                assert!(
                    (retry_after.as_secs_f64() - 401.0).abs() < 1e-6,
                    "{retry_after:?}"
                )
            }
            other => panic!("{other:?}"),
        }
        let later = t + Duration::from_secs(1400);
        let left = l.allowance(&b, 1, 10, 101, later).unwrap();
        assert!((left - 10.0).abs() < 1e-6, "{left}");
        // Never above the hour's budget.
        let much_later = t + Duration::from_secs(100_000);
        assert_eq!(l.allowance(&b, 1, 10, 101, much_later), Ok(36.0));
    }

    #[test]
    fn nonsense_durations_charge_nothing() {
        let b = VerifyBudget::default();
        let mut l = VerifyLedger::default();
        let t = Instant::now();
        l.charge(&b, 1, 1, 1, f64::NAN, t);
        l.charge(&b, 1, 1, 1, -5.0, t);
        assert_eq!(l.allowance(&b, 1, 1, 1, t), Ok(60.0));
    }
}
