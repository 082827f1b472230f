//! The admin's remedies against hostile volunteers (thin handlers over [`crate::store::admin`]): put
//! quarantined units back in the pool, list and revoke enrollment tokens, revoke a worker.

use crate::api::auth::Admin;
use crate::api::{ApiJson, ApiPath};
use crate::error::{Error, Result};
use crate::store;
use crate::store::admin as store_admin;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use tmd_wire::{ApiError, EnrollmentTokenInfo, RequeueUnits, Requeued, WorkerInfo};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The routes, with their OpenAPI operations (nested under `/api/v1`).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(requeue_units))
        .routes(routes!(list_enrollment_tokens))
        .routes(routes!(revoke_enrollment_token))
        .routes(routes!(revoke_worker))
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
    Ok(Json(store::get_worker(&s.pool, id).await?))
}
