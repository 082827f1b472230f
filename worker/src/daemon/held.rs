//! The leases in hand, as the pipeline and the poster share them: in memory and written down
//! in the state directory, so that a unit enters its lease's `done` set before its accepted
//! result leaves the spool.

use crate::state::{LeaseState, StateDir, StateError};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tracing::error;

/// The leases in hand, shared by the computation and the poster: a unit enters its lease's
/// `done` set (on disk) before its accepted result leaves the spool.
pub struct Held {
    pub state: Arc<StateDir>,
    leases: Mutex<HashMap<i64, LeaseState>>,
}

impl Held {
    pub fn new(state: StateDir) -> Held {
        Held {
            state: Arc::new(state),
            leases: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, LeaseState>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a lease in hand (and writes it down).
    pub fn insert(&self, ls: LeaseState) -> Result<(), StateError> {
        self.state.save_lease(&ls)?;
        self.map().insert(ls.lease.lease_id, ls);
        Ok(())
    }

    /// Forgets a lease (finished, released or lost).
    pub fn remove(&self, lease_id: i64) -> Result<(), StateError> {
        self.map().remove(&lease_id);
        self.state.clear_lease(lease_id)
    }

    /// Writes the units down as finished in their leases still in hand; `false` if a lease
    /// file could not be written (the results then stay spooled).
    pub fn mark_done(&self, units: &[(i64, i64)]) -> bool {
        let mut by_lease: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for &(l, u) in units {
            by_lease.entry(l).or_default().push(u);
        }
        let mut map = self.map();
        let mut ok = true;
        for (l, us) in by_lease {
            if let Some(ls) = map.get_mut(&l) {
                ls.done.extend(us);
                if let Err(e) = self.state.save_lease(ls) {
                    error!(error = %e, lease.id = l, "cannot write the lease's finished units");
                    ok = false;
                }
            }
        }
        ok
    }
}
