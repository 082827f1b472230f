//! The admin's remedies against hostile volunteers (thin handlers over [`crate::store::admin`]): put
//! quarantined units back in the pool, list and revoke enrollment tokens, revoke a worker, and
//! load known cases (ringers) that every result of their unit is judged by, and remove planted
//! cases.

use crate::domain::engine;
use crate::error::{Error, Result};
use crate::request::auth::Admin;
use crate::request::{ApiJson, ApiPath};
use crate::store;
use crate::store::admin as store_admin;
use crate::store::known as store_known;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use tmd_wire::{
    ApiError, CasesRemoved, CostEstimate, EnrollmentTokenInfo, EstimateApplied, KnownCaseRefused,
    KnownCasesLoaded, LoadKnownCases, RemoveCases, RequeueUnits, Requeued, WorkerInfo,
};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The routes, with their OpenAPI operations (nested under `/api/v1`).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(requeue_units))
        .routes(routes!(list_enrollment_tokens))
        .routes(routes!(revoke_enrollment_token))
        .routes(routes!(revoke_worker))
        .routes(routes!(load_known_cases))
        .routes(routes!(remove_cases))
        .routes(routes!(post_estimate))
}

/// Weighs a campaign's units by a cost estimate (`tmd-worker estimate`'s output): each
/// binade's cost per argument relative to the campaign's mean, so progress, the ETA and the
/// size of leases count expected work instead of units. The estimate must be of the
/// campaign's function, format and `min_bits`, and cover every binade it has units in; a
/// later estimate replaces an earlier one. Weights steer leases and the ETA only: no result
/// is judged by them.
#[utoipa::path(post, path = "/campaigns/{id}/estimate", tag = "campaigns",
    security(("admin" = [])), request_body = CostEstimate,
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = EstimateApplied), (status = 400, body = ApiError),
              (status = 401, body = ApiError), (status = 404, body = ApiError),
              (status = 413, body = ApiError), (status = 422, body = ApiError)))]
async fn post_estimate(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
    ApiJson(estimate): ApiJson<CostEstimate>,
) -> Result<Json<EstimateApplied>> {
    let applied = apply_estimate(&s.pool, id, &estimate).await?;
    tracing::info!(
        campaign.id = id,
        binades = applied.binades,
        seconds = applied.estimated_seconds_total,
        "cost estimate applied"
    );
    Ok(Json(applied))
}

/// Checks `estimate` against campaign `id` and weighs its binades (the HTTP route's and the
/// `campaign create --estimate` command's one path).
pub async fn apply_estimate(
    pool: &sqlx::PgPool,
    id: i64,
    estimate: &CostEstimate,
) -> Result<EstimateApplied> {
    let campaign = store::get_campaign(pool, id).await?;
    let format = engine::format_name(campaign.precision, campaign.format.as_deref())?;
    let (function, estimate_format) = engine::estimate_names(&estimate.function, &estimate.format)?;
    let canonical = CostEstimate {
        function,
        ..estimate.clone()
    };
    let (_, weights) =
        store::tallies::set_estimate(pool, id, &format, &canonical, &estimate_format).await?;
    let max_weight = weights.binades.iter().map(|b| b.weight).fold(0.0, f64::max);
    let args: f64 = campaign.arguments_total.parse().unwrap_or(0.0);
    Ok(EstimateApplied {
        campaign_id: id,
        binades: weights.binades.len() as u64,
        seconds_per_work: weights.seconds_per_work,
        min_weight: weights.min_weight,
        max_weight,
        estimated_seconds_total: weights.seconds_per_work * args,
    })
}

/// Loads known HR-cases (ringers) into a campaign: each is verified with MPFR on the
/// campaign's function, format and `min_bits`, and only verified ones inside a unit and
/// outside its skipped runs count (a trivial run's arguments are all hard, and an engine lists
/// the run, never a case inside it). A case of a binade the campaign derives is loaded as the
/// base case it is a copy of (verified too), in the base unit. Every result of their units is judged against them, those
/// recorded before included: a result without one is refuted, its worker quarantined, and a
/// unit that rested on it redone. Workers never see known cases.
#[utoipa::path(post, path = "/campaigns/{id}/known-cases", tag = "campaigns",
    security(("admin" = [])), request_body = LoadKnownCases,
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = KnownCasesLoaded), (status = 400, body = ApiError),
              (status = 401, body = ApiError), (status = 404, body = ApiError)))]
async fn load_known_cases(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
    ApiJson(req): ApiJson<LoadKnownCases>,
) -> Result<Json<KnownCasesLoaded>> {
    let xs = crate::domain::known::parse_lines(&req.lines)?;
    let campaign = store::get_campaign(&s.pool, id).await?;
    let fmt = engine::stored_format(campaign.precision, campaign.format.as_deref())?;
    let (function, min_bits) = (campaign.function.clone(), campaign.min_bits);
    let derivation = s.derivations.get(&s.pool, id, fmt).await?;
    let submitted = xs.len() as u64;
    let mut refused = Vec::new();
    let mut known = Vec::new();
    let mut derived_to_base = 0;
    for (x, v, mapped) in mpfr(&s, move || {
        xs.into_iter()
            .map(|x| {
                let v = engine::verify_known(&function, fmt, min_bits, &x);
                // A case of a derived binade is no unit's: its base case is.
                let base = match (&v, &derivation) {
                    (Ok((place, case)), Some(d)) => {
                        engine::known_base(&function, fmt, min_bits, d, case, *place)
                    }
                    _ => None,
                };
                let mapped = base.is_some();
                (x, base.unwrap_or(v), mapped)
            })
            .collect::<Vec<_>>()
    })
    .await?
    {
        match v {
            Ok((place, case)) => {
                derived_to_base += u64::from(mapped);
                known.push(store_known::Known { place, case })
            }
            Err(why) => refused.push(KnownCaseRefused { x, why }),
        }
    }
    let (placed, outside) = store_known::place(&s.pool, id, known).await?;
    refused.extend(outside.into_iter().map(|x| KnownCaseRefused {
        x,
        why: "outside every unit of the campaign".into(),
    }));
    let function = campaign.function.clone();
    let (placed, in_runs) =
        mpfr(&s, move || outside_runs(&function, fmt, min_bits, placed)).await?;
    refused.extend(in_runs);
    let loaded = store_known::load(&s.pool, id, &placed).await?;
    if !loaded.workers.is_empty() {
        crate::flows::enforce(&s, Some(&loaded.workers)).await?;
    }
    tracing::info!(
        campaign.id = id,
        submitted,
        loaded = loaded.loaded,
        refused = refused.len(),
        units_reopened = loaded.units_reopened,
        workers_caught = loaded.workers.len(),
        "known cases loaded"
    );
    let refused_total = refused.len() as u64;
    refused.truncate(100);
    Ok(Json(KnownCasesLoaded {
        submitted,
        loaded: loaded.loaded,
        already_known: loaded.already_known,
        derived_to_base,
        refused,
        refused_total,
        units_reopened: loaded.units_reopened,
        workers_caught: loaded.workers,
        known_total: store_known::count(&s.pool, id).await?,
    }))
}

/// Runs MPFR work off the async threads, under a verification permit.
async fn mpfr<T: Send + 'static>(
    s: &AppState,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    let permit = s
        .verify_permits
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| Error::Internal("the verification queue is closed".into()))?;
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work()
    })
    .await
    .map_err(|e| Error::Internal(format!("verification task failed: {e}")))
}

/// The placed known cases outside their units' skipped runs, and those inside one, refused
/// with the run (each unit's runs computed once).
fn outside_runs(
    function: &str,
    fmt: tmd_kernels::numbers::format::Format,
    min_bits: u32,
    placed: Vec<store_known::Placed>,
) -> (Vec<store_known::Placed>, Vec<KnownCaseRefused>) {
    let mut runs: std::collections::HashMap<i64, Vec<tmd_wire::SkippedRun>> = Default::default();
    let (mut kept, mut refused) = (Vec::new(), Vec::new());
    for p in placed {
        let unit_runs = runs.entry(p.unit_id).or_insert_with(|| {
            engine::unit_runs(function, fmt, min_bits, &p.unit).unwrap_or_default()
        });
        match engine::run_holding(fmt, &p.unit, unit_runs, p.known.place.2) {
            Some(why) => refused.push(KnownCaseRefused {
                x: p.known.case.x.clone(),
                why,
            }),
            None => kept.push(p),
        }
    }
    (kept, refused)
}

/// Takes HR-cases out of a campaign: a case MPFR confirms but that no engine reports (planted
/// by a hostile worker) would refute every honest result of its unit. The cases are kept in the
/// record (`removed_cases`), every later result that reports one is refused as forged, and
/// their units are judged again without them (a unit held for a person may then settle).
#[utoipa::path(post, path = "/campaigns/{id}/cases/remove", tag = "campaigns",
    security(("admin" = [])), request_body = RemoveCases,
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = CasesRemoved), (status = 400, body = ApiError),
              (status = 401, body = ApiError), (status = 404, body = ApiError)))]
async fn remove_cases(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
    ApiJson(req): ApiJson<RemoveCases>,
) -> Result<Json<CasesRemoved>> {
    let reason = crate::domain::check_text("reason", &req.reason, 500)?;
    if req.xs.is_empty() || req.xs.len() > 10_000 {
        return Err(Error::BadRequest(
            "xs must hold 1 to 10000 arguments".into(),
        ));
    }
    let campaign = store::get_campaign(&s.pool, id).await?;
    let fmt = engine::stored_format(campaign.precision, campaign.format.as_deref())?;
    let mut xs = Vec::with_capacity(req.xs.len());
    let mut not_found = Vec::new();
    for x in &req.xs {
        match engine::canonical_argument(fmt, x) {
            Some(c) => xs.push(c),
            None => not_found.push(x.clone()),
        }
    }
    let removed = store_known::remove(&s.pool, id, &xs, reason).await?;
    not_found.extend(removed.not_found);
    tracing::warn!(
        campaign.id = id,
        removed = removed.removed,
        units = removed.units_rejudged,
        reason,
        "HR-cases removed by an admin"
    );
    not_found.truncate(100);
    Ok(Json(CasesRemoved {
        removed: removed.removed,
        not_found,
        units_rejudged: removed.units_rejudged,
        units_done: removed.units_done,
    }))
}

/// Puts quarantined units of a campaign back in the pool (all of them, or those listed), with
/// their attempts and failure reports cleared.
#[utoipa::path(post, path = "/campaigns/{id}/requeue", tag = "campaigns",
    security(("admin" = [])), request_body = RequeueUnits,
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = Requeued), (status = 400, body = ApiError),
              (status = 401, body = ApiError), (status = 404, body = ApiError)))]
async fn requeue_units(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
    ApiJson(req): ApiJson<RequeueUnits>,
) -> Result<Json<Requeued>> {
    if req.unit_ids.as_ref().is_some_and(|u| u.len() > 100_000) {
        return Err(Error::BadRequest("at most 100000 unit_ids".into()));
    }
    let n = store_admin::requeue_units(&s.pool, id, req.unit_ids.as_deref()).await?;
    tracing::info!(campaign.id = id, units = n, "quarantined units requeued");
    Ok(Json(Requeued { requeued: n as u32 }))
}

/// Lists enrollment tokens (never the tokens themselves), newest first, with their workers.
#[utoipa::path(get, path = "/enrollment-tokens", tag = "workers", security(("admin" = [])),
    responses((status = 200, body = Vec<EnrollmentTokenInfo>), (status = 401, body = ApiError)))]
async fn list_enrollment_tokens(
    State(s): State<AppState>,
    _: Admin,
) -> Result<Json<Vec<EnrollmentTokenInfo>>> {
    Ok(Json(store_admin::list_enrollment_tokens(&s.pool).await?))
}

/// Revokes an enrollment token: no worker registers with it any more.
#[utoipa::path(post, path = "/enrollment-tokens/{id}/revoke", tag = "workers",
    security(("admin" = [])), params(("id" = i64, Path, description = "enrollment token id")),
    responses((status = 200, body = EnrollmentTokenInfo), (status = 401, body = ApiError),
              (status = 404, body = ApiError)))]
async fn revoke_enrollment_token(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<EnrollmentTokenInfo>> {
    let t = store_admin::revoke_enrollment_token(&s.pool, id).await?;
    tracing::info!(token.id = id, "enrollment token revoked");
    Ok(Json(t))
}

/// Revokes a worker's token: it cannot authenticate any more and its leases end now (their
/// units return to the pool). Its results stand; to distrust them, quarantine it.
#[utoipa::path(post, path = "/workers/{id}/revoke", tag = "workers",
    security(("admin" = [])), params(("id" = i64, Path, description = "worker id")),
    responses((status = 200, body = WorkerInfo), (status = 401, body = ApiError),
              (status = 404, body = ApiError)))]
async fn revoke_worker(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<WorkerInfo>> {
    store_admin::revoke_worker(&s.pool, id).await?;
    // Tokens are trusted from memory for a few seconds: forget them all, so the revoked one is
    // refused from the next request on.
    s.workers.clear();
    tracing::info!(worker.id = id, "worker revoked");
    Ok(Json(
        store::get_worker(&s.pool, id, s.config.policy.ttl_seconds).await?,
    ))
}
