//! What both the router's handlers and the background tasks do to the shared state: a pass of
//! lease expiry, the quarantine bar, and the counting of what a quarantine took back. Here so
//! that the running service (the crate's root) never calls into the handlers' room.

use crate::error::Result;
use crate::metrics::Metrics;
use crate::store;
use crate::store::trust as store_trust;
use crate::AppState;

pub mod derive;

/// Runs one expiry pass and counts what it did; the workers whose leases expired are held to
/// the quarantine bar.
pub async fn expire(s: &AppState) -> Result<()> {
    let e = store::expire_leases(&s.pool, s.config.policy.max_attempts).await?;
    let (returned, quarantined) = (e.units_returned, e.units_quarantined);
    if returned + quarantined > 0 {
        Metrics::add(&s.metrics.units_expired, returned + quarantined);
        Metrics::add(&s.metrics.units_quarantined, quarantined);
        tracing::info!(
            leases = e.leases,
            units.returned = returned,
            units.quarantined = quarantined,
            "expired leases"
        );
    }
    if !e.workers.is_empty() {
        enforce(s, Some(&e.workers)).await?;
    }
    Ok(())
}

/// Quarantines the workers (all, or `only`) whose record fell below the bar.
pub async fn enforce(s: &AppState, only: Option<&[i64]>) -> Result<()> {
    for q in store_trust::enforce(&s.pool, &s.config.quarantine, only, rules(s)).await? {
        note_quarantine(s, &q);
    }
    Ok(())
}

/// What a quarantine takes back with it, from the server's settings.
pub fn rules(s: &AppState) -> store_trust::Rules {
    store_trust::Rules {
        max_attempts: s.config.policy.max_attempts,
        max_quarantined_per_token: s.config.max_quarantined_per_token,
    }
}

pub fn note_quarantine(s: &AppState, q: &store_trust::Quarantined) {
    Metrics::add(&s.metrics.workers_quarantined, 1);
    Metrics::add(&s.metrics.units_reopened, q.purged.units_reopened);
}
