//! Posting unit results: the single post (`/leases/{lease}/units/{unit}/result`) and the batch
//! (`/results`), one pipeline for both so their rules cannot drift. A single post is a batch of
//! one. The pipeline: check each result's shape; judge the posts with cases without locks
//! (`store::precheck`); re-verify their HR-cases and exact cases with MPFR outside any
//! transaction, a few results at a time (`verify_permits`); then judge again and record every
//! remaining post in one transaction (`store_results::record_results`).

use crate::api::auth::Worker;
use crate::api::{self, ApiJson, ApiPath};
use crate::domain::engine;
use crate::domain::{self, Judgement};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::store::precheck::{self, PostContext, Posted};
use crate::store::results::{self as store_results, Post, Recorded};
use crate::store::trust as store_trust;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tmd_wire::{
    ApiError, BatchedResult, HrCase, ResultAccepted, ResultBatch, ResultBatchResponse, SkippedRun,
    UnitOutcome, UnitOutcomeStatus, UnitResult,
};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Most units in one batch.
pub const MAX_BATCH_UNITS: usize = 1000;

/// How long a result waits for a verification permit before it is answered "retry later".
const VERIFY_QUEUE_SECONDS: u64 = 30;

/// The routes, with their OpenAPI operations (nested under `/api/v1`).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(post_result))
        .routes(routes!(post_results))
}

/// Posts the result of one unit. Idempotent; every HR-case is re-verified with MPFR first.
#[utoipa::path(post, path = "/leases/{lease_id}/units/{unit_id}/result", tag = "leases",
    security(("worker" = [])), request_body = UnitResult,
    params(("lease_id" = i64, Path, description = "lease id"),
           ("unit_id" = i64, Path, description = "unit id")),
    responses((status = 200, body = ResultAccepted), (status = 400, body = ApiError),
              (status = 403, body = ApiError), (status = 404, body = ApiError),
              (status = 409, body = ApiError), (status = 413, body = ApiError),
              (status = 422, body = ApiError)))]
async fn post_result(
    State(s): State<AppState>,
    worker: Worker,
    ApiPath((lease_id, unit_id)): ApiPath<(i64, i64)>,
    ApiJson(result): ApiJson<UnitResult>,
) -> Result<Json<ResultAccepted>> {
    let batch = vec![BatchedResult {
        lease_id,
        unit_id,
        result,
    }];
    match record_posts(&s, &worker, &batch).await?.pop() {
        Some(Recorded::Accepted(a) | Recorded::Replayed(a)) => Ok(Json(a)),
        Some(Recorded::Refused(e)) => Err(e),
        None => Err(Error::Internal("a post got no outcome".into())),
    }
}

/// Posts the results of many finished units of the worker's leases (1 to 1000, of one or more
/// leases) in one request, recorded in one transaction. Each unit is judged as a single post of
/// it would be (fencing, MPFR re-verification, replication, trust) and gets its own outcome, in
/// order: `accepted`, `replayed` (recorded before: a retry of a partly accepted batch is safe),
/// `refused` with the code a single post would answer, or `retry` (the server is busy
/// verifying: post that unit again later). A refusal of one unit does not refuse the others.
#[utoipa::path(post, path = "/results", tag = "leases", security(("worker" = [])),
    request_body = ResultBatch,
    responses((status = 200, body = ResultBatchResponse), (status = 400, body = ApiError),
              (status = 401, body = ApiError), (status = 413, body = ApiError)))]
async fn post_results(
    State(s): State<AppState>,
    worker: Worker,
    ApiJson(batch): ApiJson<ResultBatch>,
) -> Result<Json<ResultBatchResponse>> {
    if batch.results.is_empty() || batch.results.len() > MAX_BATCH_UNITS {
        return Err(Error::BadRequest(format!(
            "a batch holds 1 to {MAX_BATCH_UNITS} results, got {}; split it",
            batch.results.len()
        )));
    }
    let recorded = record_posts(&s, &worker, &batch.results).await?;
    let outcomes = batch
        .results
        .iter()
        .zip(recorded)
        .map(|(b, r)| {
            let (status, accepted, error) = match r {
                Recorded::Accepted(a) => (UnitOutcomeStatus::Accepted, Some(a), None),
                Recorded::Replayed(a) => (UnitOutcomeStatus::Replayed, Some(a), None),
                Recorded::Refused(e @ Error::Unavailable(_)) => {
                    (UnitOutcomeStatus::Retry, None, Some(e.envelope()))
                }
                Recorded::Refused(e) => {
                    if e.status().is_server_error() {
                        tracing::error!(error = %e, unit.id = b.unit_id, "a batched post failed");
                    }
                    (UnitOutcomeStatus::Refused, None, Some(e.envelope()))
                }
            };
            UnitOutcome {
                lease_id: b.lease_id,
                unit_id: b.unit_id,
                status,
                result_id: accepted.as_ref().map(|a| a.result_id),
                hr_cases: accepted.as_ref().map(|a| a.hr_cases),
                error,
            }
        })
        .collect();
    Ok(Json(ResultBatchResponse { outcomes }))
}

/// Judges, verifies and records a worker's posts; one outcome per post, in order. An error is
/// a failure of the whole request (the database): nothing was recorded, a retry is safe.
pub(crate) async fn record_posts(
    s: &AppState,
    worker: &Worker,
    posts: &[BatchedResult],
) -> Result<Vec<Recorded>> {
    let n = posts.len();
    let (mut outcomes, copies) = screen(posts, s.config.max_cases_per_result, &s.config.engines);
    let mut verified: Vec<Vec<HrCase>> = vec![Vec::new(); n];
    let mut skipped: Vec<Vec<SkippedRun>> = vec![Vec::new(); n];
    verify_posts(s, worker, posts, &mut outcomes, &mut verified, &mut skipped).await?;
    record_verified(s, worker, posts, &mut outcomes, &verified, &skipped).await?;
    for (i, f) in copies {
        outcomes[i] = Some(match &outcomes[f] {
            Some(Recorded::Accepted(a) | Recorded::Replayed(a)) => Recorded::Replayed(a.clone()),
            Some(Recorded::Refused(e)) => Recorded::Refused(same_refusal(e)),
            None => Recorded::Refused(Error::Internal("a post got no outcome".into())),
        });
    }
    let replayed = outcomes
        .iter()
        .filter(|o| matches!(o, Some(Recorded::Replayed(_))))
        .count();
    Metrics::add(&s.metrics.results_replayed, replayed as u64);
    Ok(outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Recorded::Refused(Error::Internal("no outcome".into()))))
        .collect())
}

/// The posts' first screening, without the database: each one's outcome where it is already
/// decided (an invalid result, a unit posted twice), and the copies `(later, first)` of a post
/// that are answered as retries of it.
fn screen(
    posts: &[BatchedResult],
    max_cases: usize,
    engines: &[u32],
) -> (Vec<Option<Recorded>>, Vec<(usize, usize)>) {
    let n = posts.len();
    let mut outcomes: Vec<Option<Recorded>> = (0..n).map(|_| None).collect();
    for (i, p) in posts.iter().enumerate() {
        let valid = domain::check_engine(engines, p.result.engine)
            .and_then(|()| domain::validate_result(&p.result, max_cases));
        if let Err(e) = valid {
            outcomes[i] = Some(Recorded::Refused(e));
        }
    }
    // A unit posted twice in one batch: the later copy is answered as a retry of the first
    // (same lease and digest) or refused; it is never recorded twice.
    let mut first_of: HashMap<i64, usize> = HashMap::new();
    let mut copies: Vec<(usize, usize)> = Vec::new();
    for (i, p) in posts.iter().enumerate() {
        if outcomes[i].is_some() {
            continue;
        }
        match first_of.get(&p.unit_id) {
            None => {
                first_of.insert(p.unit_id, i);
            }
            Some(&f)
                if posts[f].lease_id == p.lease_id
                    && posts[f]
                        .result
                        .digest
                        .eq_ignore_ascii_case(&p.result.digest) =>
            {
                copies.push((i, f));
                outcomes[i] = Some(Recorded::Refused(Error::Internal("copy".into())));
            }
            Some(_) => {
                outcomes[i] = Some(Recorded::Refused(Error::Conflict(format!(
                    "unit {} appears twice in this batch with different results",
                    p.unit_id
                ))));
            }
        }
    }
    (outcomes, copies)
}

/// The undecided posts judged against their leases and units, then re-verified with MPFR
/// (their cases into `verified`, the server's skipped runs into `skipped`); the refused ones
/// get their outcome. A forged case quarantines the worker.
async fn verify_posts(
    s: &AppState,
    worker: &Worker,
    posts: &[BatchedResult],
    outcomes: &mut [Option<Recorded>],
    verified: &mut [Vec<HrCase>],
    skipped: &mut [Vec<SkippedRun>],
) -> Result<()> {
    let n = posts.len();
    // Every result needs its campaign and a first judgement before the slow MPFR work, which
    // runs outside any transaction: its cases are re-verified, and its skipped runs compared
    // with the server's own (a result without any must still be one whose unit skips
    // nothing; that costs no MPFR for a bare precision without poles).
    let with_cases: Vec<usize> = (0..n).filter(|&i| outcomes[i].is_none()).collect();
    if !with_cases.is_empty() {
        let posted: Vec<Posted<'_>> = with_cases
            .iter()
            .map(|&i| Posted {
                lease_id: posts[i].lease_id,
                unit_id: posts[i].unit_id,
                result: &posts[i].result,
            })
            .collect();
        let judged = precheck::precheck(&s.pool, worker.id, &posted).await?;
        let mut to_verify = Vec::new();
        for (&i, j) in with_cases.iter().zip(judged) {
            match j {
                Err(e) => outcomes[i] = Some(Recorded::Refused(e)),
                Ok(ctx) => match ctx.judgement {
                    Judgement::Replay {
                        result_id,
                        hr_cases,
                    } => {
                        outcomes[i] = Some(Recorded::Replayed(ResultAccepted {
                            result_id,
                            unit_id: posts[i].unit_id,
                            hr_cases,
                        }))
                    }
                    Judgement::Accept => to_verify.push((i, ctx)),
                },
            }
        }
        let checks = to_verify
            .into_iter()
            .map(|(i, ctx)| async move { (i, verify(s, worker, &posts[i].result, ctx).await) });
        let mut forged = None;
        for (i, v) in futures_util::future::join_all(checks).await {
            match v {
                Ok((cases, runs)) => {
                    verified[i] = cases;
                    skipped[i] = runs;
                }
                Err(e) => {
                    if let Error::ForgedCase(why) = &e {
                        forged.get_or_insert_with(|| why.clone());
                    }
                    outcomes[i] = Some(Recorded::Refused(e));
                }
            }
        }
        if let Some(why) = forged {
            // No honest engine reports a case MPFR refutes: the worker is quarantined at once
            // and what it alone vouched for is redone; the rest of its batch is refused below.
            store_trust::record_forgery(&s.pool, worker.id).await?;
            let reason = format!("reported a case MPFR refutes: {why}");
            let max_attempts = s.config.policy.max_attempts;
            if let Some(q) =
                store_trust::quarantine(&s.pool, worker.id, &reason, max_attempts).await?
            {
                api::note_quarantine(s, &q);
            }
            for o in outcomes.iter_mut().flatten() {
                if let Recorded::Refused(Error::ForgedCase(why)) = o {
                    *o = Recorded::Refused(Error::ForgedCase(format!(
                        "{why}; this worker is now quarantined"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The posts still undecided after verification recorded in one batch, with their outcomes,
/// the metrics and the enforcement on the workers they outvoted.
async fn record_verified(
    s: &AppState,
    worker: &Worker,
    posts: &[BatchedResult],
    outcomes: &mut [Option<Recorded>],
    verified: &[Vec<HrCase>],
    skipped: &[Vec<SkippedRun>],
) -> Result<()> {
    let n = posts.len();
    let pending: Vec<usize> = (0..n).filter(|&i| outcomes[i].is_none()).collect();
    if !pending.is_empty() {
        let batch: Vec<Post<'_>> = pending
            .iter()
            .map(|&i| Post {
                lease_id: posts[i].lease_id,
                unit_id: posts[i].unit_id,
                result: &posts[i].result,
                verified: &verified[i],
                skipped: &skipped[i],
                audit_roll: rand::random(),
            })
            .collect();
        let recorded = store_results::record_results(&s.pool, worker.id, &batch).await?;
        let mut accepted = 0u64;
        let mut hr_cases = 0u64;
        for (&i, r) in pending.iter().zip(recorded.outcomes) {
            if let Recorded::Accepted(a) = &r {
                accepted += 1;
                hr_cases += u64::from(a.hr_cases);
            }
            outcomes[i] = Some(r);
        }
        if !recorded.outvoted_workers.is_empty() {
            Metrics::add(
                &s.metrics.results_outvoted,
                recorded.outvoted_workers.len() as u64,
            );
            api::enforce(s, Some(&recorded.outvoted_workers)).await?;
        }
        if accepted > 0 {
            s.workers.set_speed(&worker.token_hash, recorded.speed);
        }
        Metrics::add(&s.metrics.results_accepted, accepted);
        Metrics::add(&s.metrics.hr_cases_verified, hr_cases);
        for c in &recorded.completed_campaigns {
            Metrics::add(&s.metrics.campaigns_completed, 1);
            tracing::info!(campaign.id = c, "campaign complete: every unit is done");
        }
        tracing::debug!(
            worker.id = worker.id,
            results = pending.len(),
            accepted,
            hr_cases,
            "results recorded"
        );
    }
    Ok(())
}

/// Re-verifies one result's cases with MPFR on the campaign's format, and compares its skipped
/// runs with the server's, under a verification permit; returns the verified cases and the
/// server's runs. `Unavailable` when no permit came within [`VERIFY_QUEUE_SECONDS`]: the post
/// is answered "retry later".
async fn verify(
    s: &AppState,
    worker: &Worker,
    result: &UnitResult,
    ctx: PostContext,
) -> Result<(Vec<HrCase>, Vec<SkippedRun>)> {
    let fmt = engine::stored_format(ctx.precision, ctx.format.as_deref())?;
    if result.hr_cases.is_empty()
        && result.exact_cases.is_empty()
        && result.skipped.is_empty()
        && engine::skips_nothing(&ctx.function, fmt, ctx.min_bits, &ctx.unit)
    {
        return Ok((Vec::new(), Vec::new()));
    }
    // MPFR time is bounded: a few results at a time, the others wait their turn (and are told
    // to come back when the queue does not move).
    let _permit = tokio::time::timeout(
        Duration::from_secs(VERIFY_QUEUE_SECONDS),
        s.verify_permits.clone().acquire_owned(),
    )
    .await
    .map_err(|_| Error::Unavailable("the server is busy verifying results; retry later".into()))?
    .map_err(|_| Error::Internal("the verification queue is closed".into()))?;
    let started = Instant::now();
    let cases = result.hr_cases.clone();
    let exact = result.exact_cases.clone();
    let posted_runs = result.skipped.clone();
    let first = ctx.unit.first;
    let in_flight = s.metrics.verification_started();
    let verified = tokio::task::spawn_blocking(move || {
        // The next units of this binade may then skip the recomputation (same answer).
        engine::learn_binade(&ctx.function, fmt, ctx.min_bits, &ctx.unit);
        let runs =
            engine::check_skipped(&ctx.function, fmt, ctx.min_bits, &ctx.unit, &posted_runs)?;
        let cases =
            engine::verify_result(&ctx.function, fmt, ctx.min_bits, &ctx.unit, &cases, &exact)?;
        Ok::<_, Error>((cases, runs))
    })
    .await
    .map_err(|e| Error::Internal(format!("verification task failed: {e}")));
    drop(in_flight);
    match verified? {
        Ok(v) => {
            tracing::debug!(
                unit.first = first,
                hr_cases = v.0.len(),
                skipped_runs = v.1.len(),
                duration_ms = started.elapsed().as_secs_f64() * 1e3,
                "cases verified"
            );
            Ok(v)
        }
        Err(e) => {
            if matches!(e, Error::ForgedCase(_)) {
                Metrics::add(&s.metrics.forged_cases, 1);
                tracing::warn!(worker.id = worker.id, error = %e, "forged case refused");
            }
            Err(e)
        }
    }
}

/// The refusal of a copy: the same code and message as its first.
fn same_refusal(e: &Error) -> Error {
    let m = e.to_string();
    match e {
        Error::NotFound(_) => Error::NotFound(m),
        Error::BadRequest(_) => Error::BadRequest(m),
        Error::Unauthorized(_) => Error::Unauthorized(m),
        Error::Forbidden(_) => Error::Forbidden(m),
        Error::LeaseExpired(_) => Error::LeaseExpired(m),
        Error::StaleToken(_) => Error::StaleToken(m),
        Error::UnitDone(_) => Error::UnitDone(m),
        Error::LeaseMismatch(_) => Error::LeaseMismatch(m),
        Error::Conflict(_) => Error::Conflict(m),
        Error::ForgedCase(_) => Error::ForgedCase(m),
        Error::EstimateInvalid(_) => Error::EstimateInvalid(m),
        Error::EstimateMismatch(_) => Error::EstimateMismatch(m),
        Error::PayloadTooLarge(_) => Error::PayloadTooLarge(m),
        Error::EngineVersion(_) => Error::EngineVersion(m),
        Error::WorkerQuarantined(_) => Error::WorkerQuarantined(m),
        Error::Unavailable(_) => Error::Unavailable(m),
        Error::Timeout(_) => Error::Timeout(m),
        Error::RateLimited(_) => Error::RateLimited(m),
        Error::Database(_) | Error::Internal(_) => Error::Internal(m),
    }
}
