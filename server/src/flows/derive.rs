//! The background derivation: the cases of a campaign's derived binades (the function's
//! reduction) made from its base units' accepted results, each judged again by MPFR, and
//! recorded off the result posts' path. A post queues its result (`pending_derivations`, in
//! the post's own transaction); a batch here takes queued results under row locks, derives
//! their cases, records them and unqueues the results in one transaction, so a crash or a
//! shutdown at any point leaves the batch queued for the next pass.

use crate::domain::engine;
use crate::error::{Error, Result};
use crate::store;
use crate::store::derivations::Queued;
use crate::AppState;
use chrono::{DateTime, Utc};
use std::time::Instant;
use tmd_wire::HrCase;
use tokio::sync::watch;

/// Queued results taken at once: enough to fill an insert, few enough that one batch's rows
/// (a base case of binary64 cbrt is copied into about 2,000 binades) stay a few hundred
/// thousand.
const RESULTS_PER_BATCH: i64 = 32;

/// Derives queued results until `stopped`, waking on the posts' notice or every sweep
/// interval (other coordinators' posts, rows left by a crash). `began`: this process's start
/// (a row that failed before it is tried again).
pub async fn run(s: AppState, mut stopped: watch::Receiver<bool>, began: DateTime<Utc>) {
    loop {
        // Armed before the queue is read, so a post that queues meanwhile is not missed.
        let wake = s.derive_wake.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        let pass = tokio::select! {
            pass = derive_batch(&s, began) => pass,
            _ = stopped.wait_for(|s| *s) => return,
        };
        match pass {
            Ok(n) if n > 0 => continue,
            Ok(_) => {}
            Err(e) if e.is_unavailable() => s.outage.down(&e.to_string()),
            Err(e) => tracing::warn!(error = %e, "derivation pass failed"),
        }
        tokio::select! {
            _ = &mut wake => {}
            _ = tokio::time::sleep(s.config.sweep_interval) => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
    }
}

/// One batch: takes queued results, derives and records their cases. Returns how many results
/// it took (0: nothing queued that this process may take).
pub async fn derive_batch(s: &AppState, began: DateTime<Utc>) -> Result<usize> {
    // Its own tally shards: the batch holds its counter row until it commits, seconds later.
    let mut tx = store::begin(&s.pool, Some("BEGIN; SET LOCAL tmd.derive = 'on'")).await?;
    let queued = store::derivations::take_pending(&mut tx, RESULTS_PER_BATCH, began).await?;
    if queued.is_empty() {
        tx.rollback().await?;
        return Ok(0);
    }
    let started = Instant::now();
    let mut jobs = Vec::with_capacity(queued.len());
    for q in &queued {
        let fmt = engine::stored_format(q.precision, q.format.as_deref())?;
        jobs.push((fmt, s.derivations.get(&s.pool, q.campaign_id, fmt).await?));
    }
    let (queued, derived) = tokio::task::spawn_blocking(move || {
        let derived: Vec<Result<Vec<(String, HrCase)>>> = queued
            .iter()
            .zip(&jobs)
            .map(|(q, (fmt, d))| match d {
                // Only a campaign that derives queues results: nothing to add for any other.
                None => Ok(Vec::new()),
                Some(d) => engine::derive_cases(&q.function, *fmt, q.min_bits, d, &q.cases),
            })
            .collect();
        (queued, derived)
    })
    .await
    .map_err(|e| Error::Internal(format!("derivation task failed: {e}")))?;
    let derive_seconds = started.elapsed().as_secs_f64();
    let mut done: Vec<(&Queued, Vec<(String, HrCase)>)> = Vec::new();
    let mut failed: Vec<(i64, String)> = Vec::new();
    for (q, d) in queued.iter().zip(derived) {
        match d {
            Ok(cases) => done.push((q, cases)),
            Err(e) => failed.push((q.result_id, e.to_string())),
        }
    }
    let rows: usize = done.iter().map(|(_, c)| c.len()).sum();
    let completed = store::derivations::record_derived(&mut tx, &done).await?;
    tx.commit().await?;
    tracing::debug!(
        results = done.len(),
        hr_cases = rows,
        derive_seconds,
        seconds = started.elapsed().as_secs_f64(),
        "base results derived"
    );
    for id in completed {
        tracing::info!(
            campaign.id = id,
            "campaign complete: every unit is done and every derivation recorded"
        );
    }
    for (result, why) in &failed {
        // A derived case judged apart from its base: the reduction or the server is at fault,
        // never a worker. The campaign stays incomplete and its progress says so.
        tracing::error!(result.id = result, error = %why, "derivation failed");
        store::derivations::mark_failed(&s.pool, &[*result], why).await?;
    }
    Ok(queued.len())
}
