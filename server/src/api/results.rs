//! Posting unit results: the single post (`/leases/{lease}/units/{unit}/result`) and the batch
//! (`/results`), one pipeline for both so their rules cannot drift. A single post is a batch of
//! one. The pipeline: check each result's shape; judge the posts with cases without locks
//! (`store::precheck`); re-verify their HR-cases and exact cases with MPFR outside any
//! transaction, a few results at a time (`verify_permits`); then judge again and record every
//! remaining post in one transaction (`store_results::record_results`).

use crate::domain::budget::Spent;
use crate::domain::engine;
use crate::domain::{self, Judgement};
use crate::error::{Error, Result};
use crate::flows;
use crate::metrics::Metrics;
use crate::request::auth::Worker;
use crate::request::{ApiJson, ApiPath};
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
    let mut verified: Vec<Verified> = (0..n).map(|_| Verified::default()).collect();
    verify_posts(s, worker, posts, &mut outcomes, &mut verified).await?;
    record_verified(s, worker, posts, &mut outcomes, &verified).await?;
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
/// (what each one's verification found into `verified`); the refused ones get their outcome.
/// A forged case quarantines the worker.
async fn verify_posts(
    s: &AppState,
    worker: &Worker,
    posts: &[BatchedResult],
    outcomes: &mut [Option<Recorded>],
    verified: &mut [Verified],
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
            .map(|(i, ctx)| async move { (i, verify(s, worker, &posts[i], ctx).await) });
        let mut forged = None;
        for (i, v) in futures_util::future::join_all(checks).await {
            match v {
                Ok(found) => verified[i] = found,
                Err(e) => {
                    if let Error::ForgedCase(why) = &e {
                        forged.get_or_insert_with(|| why.clone());
                    }
                    outcomes[i] = Some(Recorded::Refused(e));
                }
            }
        }
        let overran = outcomes
            .iter()
            .any(|o| matches!(o, Some(Recorded::Refused(Error::VerifyBudget(_)))));
        if overran && forged.is_none() {
            // Overruns count against the worker: held to the bar now.
            flows::enforce(s, Some(&[worker.id])).await?;
        }
        if let Some(why) = forged {
            // No honest engine reports a case MPFR refutes: the worker is quarantined at once
            // and what it alone vouched for is redone; the rest of its batch is refused below.
            store_trust::record_forgery(&s.pool, worker.id).await?;
            let reason = format!("reported a case MPFR refutes: {why}");
            for q in store_trust::quarantine(&s.pool, worker.id, &reason, flows::rules(s)).await? {
                flows::note_quarantine(s, &q);
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
    verified: &[Verified],
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
                verified: &verified[i].cases,
                derives: verified[i].derives,
                skipped: &verified[i].runs,
                judged: verified[i].judged,
                lattice: verified[i].lattice,
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
        if let Some((owner, why)) = &recorded.improbable_owner {
            tracing::warn!(owner = %owner, reason = %why, "count audit: quarantining an owner's workers");
            for q in store_trust::quarantine_owner(&s.pool, owner, why, flows::rules(s)).await? {
                flows::note_quarantine(s, &q);
            }
        }
        if !recorded.outvoted_workers.is_empty() {
            Metrics::add(
                &s.metrics.results_outvoted,
                recorded.outvoted_workers.len() as u64,
            );
            flows::enforce(s, Some(&recorded.outvoted_workers)).await?;
        }
        if accepted > 0 && verified.iter().any(|v| v.derives && !v.cases.is_empty()) {
            // Queued in the same transaction: the background derivation takes them now.
            s.derive_wake.notify_waiters();
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

/// Re-verifies one post's cases with MPFR on the campaign's format, and compares its skipped
/// runs with the server's, within its verification budget (`domain::budget`); returns the
/// verified cases and the server's runs. `Unavailable` when no permit came within
/// [`VERIFY_QUEUE_SECONDS`] or the worker's hourly budget is spent (the post is answered
/// "retry later"); `VerifyBudget` when its unit's or lease's budget is spent.
///
/// The MPFR work runs in a task of its own that holds its permit until it ends and charges its
/// time to the worker, its unit and its lease, whatever became of the request: a post that
/// times out or disconnects neither frees its permit early nor costs its worker nothing.
async fn verify(
    s: &AppState,
    worker: &Worker,
    post: &BatchedResult,
    ctx: PostContext,
) -> Result<Verified> {
    let result = &post.result;
    let fmt = engine::stored_format(ctx.precision, ctx.format.as_deref())?;
    if result.hr_cases.is_empty()
        && result.exact_cases.is_empty()
        && result.skipped.is_empty()
        && engine::skips_nothing(&ctx.function, fmt, ctx.min_bits, &ctx.unit)
    {
        return Ok(Verified {
            cases: Vec::new(),
            runs: Vec::new(),
            judged: engine::audited_arguments(&ctx.function, fmt, &ctx.unit, &[]),
            derives: false,
            lattice: 0,
        });
    }
    let budget = s.config.verify_budget;
    let (worker_id, lease_id, unit_id) = (worker.id, post.lease_id, post.unit_id);
    let allowed = s
        .verify_ledger
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .allowance(&budget, worker_id, lease_id, unit_id, Instant::now());
    let allowed = match allowed {
        Ok(seconds) => seconds,
        Err(spent) => return Err(budget_refusal(s, worker_id, spent).await),
    };
    // MPFR time is bounded: a few results at a time, the others wait their turn (and are told
    // to come back when the queue does not move).
    let permit = tokio::time::timeout(
        Duration::from_secs(VERIFY_QUEUE_SECONDS),
        s.verify_permits.clone().acquire_owned(),
    )
    .await
    .map_err(|_| Error::Unavailable("the server is busy verifying results; retry later".into()))?
    .map_err(|_| Error::Internal("the verification queue is closed".into()))?;
    let derives = s
        .derivations
        .get(&s.pool, ctx.campaign_id, fmt)
        .await?
        .is_some();
    let job = VerifyJob {
        cases: result.hr_cases.clone(),
        exact: result.exact_cases.clone(),
        posted_runs: result.skipped.clone(),
        ctx,
        fmt,
    };
    let metrics = s.metrics.clone();
    let task_state = s.clone();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let ran = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _in_flight = metrics.verification_started();
            let started = Instant::now();
            let out = job.run(started + Duration::from_secs_f64(allowed));
            (out, started.elapsed())
        })
        .await;
        let outcome = match ran {
            Ok((out, took)) => {
                charge(&task_state, worker_id, lease_id, unit_id, &out, took).await;
                out.map(|v| Verified { derives, ..v })
            }
            Err(e) => Err(Error::Internal(format!("verification task failed: {e}"))),
        };
        // The request may be gone (timed out, disconnected): the charge above stands anyway.
        let _ = done_tx.send(outcome);
    });
    let first = post.unit_id;
    match done_rx
        .await
        .map_err(|_| Error::Internal("the verification task ended without an answer".into()))?
    {
        Ok(v) => {
            tracing::debug!(
                unit.id = first,
                hr_cases = v.cases.len(),
                skipped_runs = v.runs.len(),
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

/// What a post's verification found: its cases as the server verified them, the unit's
/// skipped runs as the server computed them, and the arguments the count audit judges
/// (`engine::audited_arguments`).
#[derive(Debug, Default)]
pub(crate) struct Verified {
    pub cases: Vec<HrCase>,
    pub runs: Vec<SkippedRun>,
    pub judged: Option<f64>,
    /// Whether the campaign derives other binades' cases from `cases` (its reduction): the
    /// coordinator does it in the background, on its own time, not the worker's budget.
    pub derives: bool,
    /// The unit's exact cases counted by its lattice's rule (`engine::lattice_count`).
    pub lattice: u64,
}

/// One post's MPFR work, owned by its task.
struct VerifyJob {
    cases: Vec<HrCase>,
    exact: Vec<String>,
    posted_runs: Vec<SkippedRun>,
    ctx: PostContext,
    fmt: tmd_kernels::numbers::format::Format,
}

impl VerifyJob {
    /// The server's skipped runs of the unit (the posted ones must equal them), then the cases
    /// outside them verified until `deadline`.
    fn run(self, deadline: Instant) -> Result<Verified> {
        let (ctx, fmt) = (&self.ctx, self.fmt);
        // The next units of this binade may then skip the recomputation (same answer).
        engine::learn_binade(&ctx.function, fmt, ctx.min_bits, &ctx.unit);
        let runs = engine::check_skipped(
            &ctx.function,
            fmt,
            ctx.min_bits,
            &ctx.unit,
            &self.posted_runs,
        )?;
        let bounds = engine::CaseBounds {
            runs: &runs,
            removed: &ctx.removed,
            deadline: Some(deadline),
        };
        let cases = engine::verify_result(
            &ctx.function,
            fmt,
            ctx.min_bits,
            &ctx.unit,
            &self.cases,
            &self.exact,
            &bounds,
        )?;
        let judged = engine::audited_arguments(&ctx.function, fmt, &ctx.unit, &runs);
        Ok(Verified {
            cases,
            runs,
            judged,
            derives: false,
            lattice: engine::lattice_count(&ctx.function, fmt, &ctx.unit),
        })
    }
}

/// Charges a finished verification to its worker, unit and lease: in this coordinator's ledger,
/// and in the worker's record (its seconds, and an overrun of its budget).
async fn charge(
    s: &AppState,
    worker_id: i64,
    lease_id: i64,
    unit_id: i64,
    out: &Result<Verified>,
    took: Duration,
) {
    let seconds = took.as_secs_f64();
    s.verify_ledger
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .charge(
            &s.config.verify_budget,
            worker_id,
            lease_id,
            unit_id,
            seconds,
            Instant::now(),
        );
    let overran = matches!(out, Err(Error::VerifyBudget(_)));
    if let Err(e) = store_trust::charge_verification(&s.pool, worker_id, seconds, overran).await {
        tracing::warn!(worker.id = worker_id, error = %e, "could not record a verification's cost");
    }
}

/// The refusal of a post whose budget is spent before its verification starts: a unit's or a
/// lease's counts against the worker, the worker's hourly one makes it wait.
async fn budget_refusal(s: &AppState, worker_id: i64, spent: Spent) -> Error {
    let (what, spent_s, limit) = match spent {
        Spent::Worker { retry_after } => {
            return Error::Unavailable(format!(
                "this worker's posts used their hour's verification budget ({} s); retry in \
                 about {} s",
                s.config.verify_budget.per_worker_hour,
                retry_after.as_secs()
            ))
        }
        Spent::Unit { spent, limit } => ("unit", spent, limit),
        Spent::Lease { spent, limit } => ("lease", spent, limit),
    };
    if let Err(e) = store_trust::charge_verification(&s.pool, worker_id, 0.0, true).await {
        tracing::warn!(worker.id = worker_id, error = %e, "could not record a verification overrun");
    }
    Error::VerifyBudget(format!(
        "this worker's posts for this {what} already cost {spent_s:.1} s of verification, its \
         budget is {limit} s; an honest engine's results cost far less, so this counts against \
         the worker"
    ))
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
        Error::VerifyBudget(_) => Error::VerifyBudget(m),
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
