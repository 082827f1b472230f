//! The REST API: thin axum handlers (extract, call one domain or storage function, map the
//! result), the router, and the OpenAPI document generated from the handlers' annotations.

pub mod admin;
mod errors_doc;
pub mod plan;
pub mod results;

use crate::domain;
use crate::error::{DatabaseUnavailable, Error, Result};
use crate::metrics::Metrics;
use crate::request::auth::{self, Admin, Worker};
use crate::request::ApiPath;
use crate::store;
use crate::store::trust as store_trust;
use crate::AppState;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use std::time::Instant;
use tmd_wire::{
    ApiError, Campaign, CampaignProgress, CampaignState, CreateCampaign, CreateEnrollmentToken,
    EnrollmentToken, Heartbeat, HeartbeatResponse, IdentifyWorker, LeaseRequest, LeaseResponse,
    QuarantineWorker, RegisterWorker, ReleaseLease, ReleaseResponse, WorkerIdentity, WorkerInfo,
    WorkerRegistered,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::flows::{enforce, expire, note_quarantine, rules};
use crate::request::ApiJson;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tmd-server",
        description = "Coordinator of tmd: campaigns, leases of units, results and verified \
                       hard-to-round cases. Errors are JSON {\"code\",\"message\"}."
    ),
    modifiers(&BearerAuth),
    components(schemas(ApiError))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        for name in ["admin", "worker"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

/// The application's routes and its OpenAPI document, built from the same list.
pub fn router(state: AppState) -> Router {
    let (router, mut api) = api_router().split_for_parts();
    errors_doc::document_errors(&mut api);
    let api = std::sync::Arc::new(api);
    let max_body = state.config.max_body_bytes;
    router
        .route(
            "/api/openapi.json",
            axum::routing::get(move || {
                let api = api.clone();
                async move { Json(api.as_ref().clone()) }
            }),
        )
        // The dashboard page at `/` (HTML, so not in the OpenAPI document).
        .merge(crate::views::dashboard::pages())
        .fallback(|| async { Error::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(ApiError {
                    code: tmd_wire::codes::BAD_REQUEST.into(),
                    message: "method not allowed on this route".into(),
                }),
            )
        })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::request::guard::gate,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// The routes with their OpenAPI operations.
pub fn api_router() -> OpenApiRouter<AppState> {
    let v1 = OpenApiRouter::new()
        .routes(routes!(create_campaign, list_campaigns))
        .routes(routes!(get_campaign))
        .routes(routes!(campaign_progress))
        .routes(routes!(pause_campaign))
        .routes(routes!(resume_campaign))
        .routes(routes!(cancel_campaign))
        .routes(routes!(create_enrollment_token))
        .routes(routes!(register_worker))
        .routes(routes!(worker_identity))
        .routes(routes!(identify_worker))
        .routes(routes!(list_workers))
        .routes(routes!(get_worker))
        .routes(routes!(quarantine_worker))
        .routes(routes!(reinstate_worker))
        .routes(routes!(request_lease))
        .routes(routes!(heartbeat))
        .routes(routes!(release_lease))
        // Results, single and batched: see results.rs.
        .merge(crate::api::results::routes())
        // The admin's remedies against hostile volunteers: see admin.rs.
        .merge(crate::api::admin::routes())
        .merge(crate::api::plan::routes())
        // Views of a campaign (exports, dashboard data): see export.rs and dashboard.rs.
        .merge(crate::views::export::routes())
        .merge(crate::views::dashboard::api_routes());
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .nest("/api/v1", v1)
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// The OpenAPI document (also served at `/api/openapi.json`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut api = api_router().split_for_parts().1;
    errors_doc::document_errors(&mut api);
    api
}

/// Records latency and status per route, and logs each request.
async fn observe(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = crate::metrics::method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let mut response = next.run(req).await;
    // JSON answers carry secrets (tokens at creation) and live data: never sniffed as
    // something else, never cached by a browser or a proxy.
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    if headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"))
    {
        headers.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
    }
    let seconds = start.elapsed().as_secs_f64();
    let status = response.status().as_u16();
    state.metrics.observe(method, &route, status, seconds);
    if let Some(DatabaseUnavailable(error)) = response.extensions().get() {
        state.outage.down(error);
    } else if response.status().is_success()
        && (route.starts_with("/api/v1/") || route == "/readyz")
    {
        // These routes read or write the database: it answered.
        state.outage.up();
    }
    tracing::debug!(
        http.method = %method,
        http.route = %route,
        http.status = status,
        duration_ms = seconds * 1e3,
        "request"
    );
    response
}

// ---------------------------------------------------------------------------------------------
// Campaigns (admin)

/// Creates a campaign and splits its ranges into units.
#[utoipa::path(post, path = "/campaigns", tag = "campaigns", request_body = CreateCampaign,
    security(("admin" = [])),
    responses((status = 201, body = Campaign), (status = 400, body = ApiError),
              (status = 401, body = ApiError), (status = 403, body = ApiError),
              (status = 413, body = ApiError)))]
async fn create_campaign(
    State(s): State<AppState>,
    _: Admin,
    ApiJson(req): ApiJson<CreateCampaign>,
) -> Result<(StatusCode, Json<Campaign>)> {
    let (new, plan, choice) = plan::plan(&s, &req).await?;
    if let Some(c) = &choice {
        tracing::info!(unit_bits = c.unit_bits, reason = %c.reason, "unit size chosen");
    }
    let prior = plan::prior(&plan, new.min_bits).await?;
    let campaign = store::create_campaign(
        &s.pool,
        &store::CampaignInsert {
            name: &new.name,
            function: &plan.function,
            precision: plan.precision,
            format: plan.format.as_deref(),
            min_bits: new.min_bits,
            ranges: &plan.ranges,
            unit_bits: plan.unit_bits,
            replication: new.replication,
            distinct_owners: new.distinct_owners,
            adaptive: new.adaptive,
            audit_rate: new.audit_rate,
            trust_after: new.trust_after,
            trust_all_workers: new.trust_all_workers,
            priority: new.priority,
            units: &plan.units,
            prior: prior.as_ref(),
            derivation: plan.derivation.as_ref(),
        },
    )
    .await?;
    tracing::info!(
        campaign.id = campaign.id,
        units = campaign.units_total,
        "campaign created"
    );
    Ok((StatusCode::CREATED, Json(campaign)))
}

/// Lists campaigns, newest first.
#[utoipa::path(get, path = "/campaigns", tag = "campaigns", security(("admin" = [])),
    responses((status = 200, body = Vec<Campaign>), (status = 401, body = ApiError)))]
async fn list_campaigns(State(s): State<AppState>, _: Admin) -> Result<Json<Vec<Campaign>>> {
    Ok(Json(store::list_campaigns(&s.pool).await?))
}

/// Shows one campaign.
#[utoipa::path(get, path = "/campaigns/{id}", tag = "campaigns", security(("admin" = [])),
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = Campaign), (status = 404, body = ApiError)))]
async fn get_campaign(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Campaign>> {
    Ok(Json(store::get_campaign(&s.pool, id).await?))
}

/// Progress of a campaign: counts, rate, ETA, hardest cases, quarantined units.
#[utoipa::path(get, path = "/campaigns/{id}/progress", tag = "campaigns", security(("admin" = [])),
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = CampaignProgress), (status = 404, body = ApiError)))]
async fn campaign_progress(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<CampaignProgress>> {
    Ok(Json(store::campaign_progress(&s.pool, id).await?))
}

async fn transition(s: &AppState, id: i64, to: CampaignState) -> Result<Json<Campaign>> {
    let c = store::set_campaign_state(&s.pool, id, to).await?;
    tracing::info!(
        campaign.id = id,
        state = to.as_str(),
        "campaign state changed"
    );
    Ok(Json(c))
}

/// Pauses a campaign: no new leases; leases out keep running.
#[utoipa::path(post, path = "/campaigns/{id}/pause", tag = "campaigns", security(("admin" = [])),
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = Campaign), (status = 404, body = ApiError),
              (status = 409, body = ApiError)))]
async fn pause_campaign(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Campaign>> {
    transition(&s, id, CampaignState::Paused).await
}

/// Resumes a paused campaign.
#[utoipa::path(post, path = "/campaigns/{id}/resume", tag = "campaigns", security(("admin" = [])),
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = Campaign), (status = 404, body = ApiError),
              (status = 409, body = ApiError)))]
async fn resume_campaign(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Campaign>> {
    transition(&s, id, CampaignState::Active).await
}

/// Cancels a campaign for good: no new leases; heartbeats report `cancelled`.
#[utoipa::path(post, path = "/campaigns/{id}/cancel", tag = "campaigns", security(("admin" = [])),
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = Campaign), (status = 404, body = ApiError),
              (status = 409, body = ApiError)))]
async fn cancel_campaign(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Campaign>> {
    transition(&s, id, CampaignState::Cancelled).await
}

// ---------------------------------------------------------------------------------------------
// Tokens and workers

/// Registrations an enrollment token allows when the request does not say.
pub const DEFAULT_TOKEN_USES: u32 = 10;
/// Life of an enrollment token when the request does not say: a week.
pub const DEFAULT_TOKEN_SECONDS: u64 = 7 * 86_400;

/// Issues an enrollment token (shown once) with which workers register; by default it allows
/// 10 registrations within a week.
#[utoipa::path(post, path = "/enrollment-tokens", tag = "workers", security(("admin" = [])),
    request_body = CreateEnrollmentToken,
    responses((status = 201, body = EnrollmentToken), (status = 400, body = ApiError),
              (status = 401, body = ApiError)))]
async fn create_enrollment_token(
    State(s): State<AppState>,
    _: Admin,
    ApiJson(req): ApiJson<CreateEnrollmentToken>,
) -> Result<(StatusCode, Json<EnrollmentToken>)> {
    let note = req
        .note
        .as_deref()
        .map(|n| domain::check_text("note", n, 500))
        .transpose()?;
    let owner = req
        .owner
        .as_deref()
        .map(|o| domain::check_text("owner", o, 200))
        .transpose()?;
    if req.uses.is_some_and(|u| u == 0 || u > 1_000_000) {
        return Err(Error::BadRequest("uses must be in 1..=1000000".into()));
    }
    if req
        .expires_in_seconds
        .is_some_and(|e| e == 0 || e > 10 * 365 * 86_400)
    {
        return Err(Error::BadRequest(
            "expires_in_seconds must be in 1..=315360000".into(),
        ));
    }
    let token = auth::new_token(auth::ENROLLMENT_PREFIX);
    // A token that leaks should not mint identities forever: limited uses and a week's life
    // unless the admin asks for more.
    let t = store::create_enrollment_token(
        &s.pool,
        &token,
        &auth::hash_token(&token),
        &store::TokenTerms {
            uses: Some(req.uses.unwrap_or(DEFAULT_TOKEN_USES)),
            expires_in_seconds: Some(req.expires_in_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS)),
            note,
            owner,
            trusted: req.trusted.unwrap_or(false),
        },
    )
    .await?;
    tracing::info!(
        token.id = t.id,
        trusted = req.trusted.unwrap_or(false),
        "enrollment token created"
    );
    Ok((StatusCode::CREATED, Json(t)))
}

/// Registers a worker with an enrollment token; returns the worker's own token (shown once).
#[utoipa::path(post, path = "/workers/register", tag = "workers", request_body = RegisterWorker,
    responses((status = 201, body = WorkerRegistered), (status = 400, body = ApiError),
              (status = 401, body = ApiError)))]
async fn register_worker(
    State(s): State<AppState>,
    ApiJson(req): ApiJson<RegisterWorker>,
) -> Result<(StatusCode, Json<WorkerRegistered>)> {
    let name = domain::check_text("name", &req.name, 200)?;
    if req.enrollment_token.len() > 200 {
        return Err(Error::Unauthorized("unknown enrollment token".into()));
    }
    // An enrollment token found unknown a moment ago is refused from memory, like a worker's.
    let enrollment_hash = auth::hash_token(req.enrollment_token.trim());
    if s.guard.known_unknown(&enrollment_hash) {
        return Err(Error::Unauthorized(
            "unknown, expired, revoked or used-up enrollment token".into(),
        ));
    }
    let token = auth::new_token(auth::WORKER_PREFIX);
    let worker_id = store::register_worker(
        &s.pool,
        &enrollment_hash,
        name,
        &auth::hash_token(&token),
        s.config.max_quarantined_per_token,
    )
    .await
    .inspect_err(|e| {
        if matches!(e, Error::Unauthorized(_)) {
            s.guard.note_unknown(enrollment_hash);
        }
    })?;
    tracing::info!(
        worker.id = worker_id,
        worker.name = name,
        "worker registered"
    );
    Ok((
        StatusCode::CREATED,
        Json(WorkerRegistered { worker_id, token }),
    ))
}

/// Who the worker's token says it is: how a worker pointed at another replica of its
/// coordinator learns that it need not register again.
#[utoipa::path(get, path = "/workers/me", tag = "workers", security(("worker" = [])),
    responses((status = 200, body = WorkerIdentity), (status = 401, body = ApiError)))]
async fn worker_identity(w: Worker) -> Json<WorkerIdentity> {
    Json(WorkerIdentity { worker_id: w.id })
}

/// Which worker holds the token of this SHA-256: how a worker pointed at another URL learns
/// that it reached a replica of its coordinator, without sending its token to a server that
/// might not be one. The hash proves nothing here: tokens are checked by their preimage.
#[utoipa::path(post, path = "/workers/identify", tag = "workers", request_body = IdentifyWorker,
    responses((status = 200, body = WorkerIdentity), (status = 400, body = ApiError),
              (status = 404, body = ApiError)))]
async fn identify_worker(
    State(s): State<AppState>,
    ApiJson(req): ApiJson<IdentifyWorker>,
) -> Result<Json<WorkerIdentity>> {
    let hash: [u8; 32] = hex::decode(req.token_sha256.trim())
        .ok()
        .and_then(|v| v.try_into().ok())
        .ok_or_else(|| {
            Error::BadRequest("token_sha256 must be 64 hexadecimal digits (a SHA-256)".into())
        })?;
    match auth::worker_by_hash(&s, &hash).await? {
        Some((id, _)) => Ok(Json(WorkerIdentity { worker_id: id })),
        None => Err(Error::NotFound(
            "no worker holds a token with this SHA-256".into(),
        )),
    }
}

/// Lists workers with last seen, measured speed, units done, owner, record and quarantine.
#[utoipa::path(get, path = "/workers", tag = "workers", security(("admin" = [])),
    responses((status = 200, body = Vec<WorkerInfo>), (status = 401, body = ApiError)))]
async fn list_workers(State(s): State<AppState>, _: Admin) -> Result<Json<Vec<WorkerInfo>>> {
    Ok(Json(
        store::list_workers(&s.pool, s.config.policy.ttl_seconds).await?,
    ))
}

/// One worker, with its record.
#[utoipa::path(get, path = "/workers/{id}", tag = "workers", security(("admin" = [])),
    params(("id" = i64, Path, description = "worker id")),
    responses((status = 200, body = WorkerInfo), (status = 401, body = ApiError),
              (status = 404, body = ApiError)))]
async fn get_worker(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<WorkerInfo>> {
    Ok(Json(
        store::get_worker(&s.pool, id, s.config.policy.ttl_seconds).await?,
    ))
}

/// Quarantines a worker by hand (a machine known to be broken): it gets no more work, its
/// leases are revoked, its results become void and the units it alone vouched for are redone.
#[utoipa::path(post, path = "/workers/{id}/quarantine", tag = "workers",
    security(("admin" = [])), request_body = QuarantineWorker,
    params(("id" = i64, Path, description = "worker id")),
    responses((status = 200, body = WorkerInfo), (status = 400, body = ApiError),
              (status = 401, body = ApiError), (status = 404, body = ApiError),
              (status = 409, body = ApiError)))]
async fn quarantine_worker(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
    ApiJson(req): ApiJson<QuarantineWorker>,
) -> Result<Json<WorkerInfo>> {
    let reason = domain::check_text("reason", &req.reason, 500)?;
    store::get_worker(&s.pool, id, s.config.policy.ttl_seconds).await?;
    let reason = format!("by an admin: {reason}");
    let quarantined = store_trust::quarantine(&s.pool, id, &reason, rules(&s)).await?;
    if quarantined.is_empty() {
        return Err(Error::Conflict(format!(
            "worker {id} is already quarantined"
        )));
    }
    for q in &quarantined {
        note_quarantine(&s, q);
    }
    Ok(Json(
        store::get_worker(&s.pool, id, s.config.policy.ttl_seconds).await?,
    ))
}

/// Lifts a worker's quarantine: it starts again with a clean record, untrusted.
#[utoipa::path(post, path = "/workers/{id}/reinstate", tag = "workers",
    security(("admin" = [])), params(("id" = i64, Path, description = "worker id")),
    responses((status = 200, body = WorkerInfo), (status = 401, body = ApiError),
              (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn reinstate_worker(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<WorkerInfo>> {
    store_trust::reinstate(&s.pool, id).await?;
    tracing::info!(worker.id = id, "worker reinstated");
    Ok(Json(
        store::get_worker(&s.pool, id, s.config.policy.ttl_seconds).await?,
    ))
}

// ---------------------------------------------------------------------------------------------
// Leases (worker)

/// Asks for work: a contiguous run of units of one campaign, sized from the worker's speed.
/// A worker that does not send `tmd-worker-features: formats` gets only bare-precision
/// campaigns (it would judge a named format's results on an unbounded exponent).
#[utoipa::path(post, path = "/leases", tag = "leases", security(("worker" = [])),
    request_body = LeaseRequest,
    params(("tmd-worker-features" = Option<String>, Header,
        description = "what the worker understands, comma-separated: `formats` (it runs the \
                       engine in the lease's named format and reports skipped runs)")),
    responses((status = 200, body = LeaseResponse), (status = 400, body = ApiError),
              (status = 401, body = ApiError), (status = 409, body = ApiError)))]
async fn request_lease(
    State(s): State<AppState>,
    worker: Worker,
    headers: axum::http::HeaderMap,
    ApiJson(req): ApiJson<LeaseRequest>,
) -> Result<Json<LeaseResponse>> {
    let laps = store::Laps::start();
    let formats = domain::declares_feature(
        headers
            .get(tmd_wire::FEATURES_HEADER)
            .and_then(|v| v.to_str().ok()),
        tmd_wire::FEATURE_FORMATS,
    );
    let policy = &s.config.policy;
    let seconds = req.seconds.unwrap_or(policy.default_seconds);
    if !(1..=7 * 86_400).contains(&seconds) {
        return Err(Error::BadRequest("seconds must be in 1..=604800".into()));
    }
    // No lease outlives the server's maximum, so no more work than that is handed out at once.
    let seconds = seconds.min(policy.max_lease_seconds);
    if req
        .units_in_flight
        .is_some_and(|n| !(1..=4096).contains(&n))
    {
        return Err(Error::BadRequest(
            "units_in_flight must be in 1..=4096".into(),
        ));
    }
    domain::check_engine(&s.config.engines, req.engine)?;
    let backend = req
        .backend
        .as_deref()
        .map(|b| domain::check_text("backend", b, 200));
    let device = req
        .device
        .as_deref()
        .map(|d| domain::check_text("device", d, 200));
    if backend.is_some() || device.is_some() {
        // For people only, and rewritten by the next request: a lost write is harmless.
        store::note_device(
            &s.relaxed_pool,
            worker.id,
            backend.transpose()?,
            device.transpose()?,
        )
        .await?;
    }
    laps.lap("checks");
    let first = domain::first_lease_units(req.units_in_flight);
    // Lazy expiry: whoever asks for work first returns the expired units to the pool, so
    // work is never stuck waiting for the sweeper; at most one pass per 500 ms, so a busy
    // server does not pay for it on every request.
    let due = {
        let mut last = s.last_expiry.lock().unwrap_or_else(|e| e.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_millis(500));
        if due {
            *last = Some(Instant::now());
        }
        due
    };
    if due {
        expire(&s).await?;
        laps.lap("expiry");
    }
    let ask = store::LeaseAsk {
        worker_id: worker.id,
        formats,
        ttl_seconds: policy.ttl_seconds.min(policy.max_lease_seconds),
        owner_share: policy.max_owner_share,
        pending_share: policy.max_pending_share,
        slots: req.units_in_flight.unwrap_or(1),
        lanes: policy.claim_lanes,
        defer_min: policy.defer_marking_min,
    };
    let lease = store::claim_lease(
        &s.pool,
        &ask,
        &laps,
        |unit_bits, speed, held, min_weight| {
            domain::work::lease_work(policy, seconds, speed, unit_bits, held, min_weight, first)
        },
    )
    .await?;
    match &lease {
        Some(l) => {
            Metrics::add(&s.metrics.leases_granted, 1);
            Metrics::add(&s.metrics.units_leased, l.units.len() as u64);
            tracing::debug!(
                worker.id = worker.id,
                lease.id = l.lease_id,
                units = l.units.len(),
                "lease granted"
            );
        }
        None => Metrics::add(&s.metrics.lease_requests_without_work, 1),
    }
    // Only asked when no work is handed out: a worker told 0 may stop (`--exit-when-idle`),
    // one told more waits, as a lease held elsewhere may expire and return its units.
    let units_outstanding = match lease {
        Some(_) => 0,
        None => store::units_outstanding(&s.pool, formats).await?,
    };
    // Said to a worker that gets none: why (replicas, held units, paused campaigns).
    let waiting = match &lease {
        None => domain::work::waiting(store::tallies::wait_counts(&s.pool).await?, None),
        Some(_) => Vec::new(),
    };
    laps.lap("answer");
    s.metrics.observe_claim(&laps.phases());
    Ok(Json(LeaseResponse {
        lease,
        retry_after_seconds: s.config.retry_after_seconds,
        units_outstanding,
        waiting,
    }))
}

/// Extends a lease.
#[utoipa::path(post, path = "/leases/{id}/heartbeat", tag = "leases", security(("worker" = [])),
    params(("id" = i64, Path, description = "lease id")), request_body = Heartbeat,
    responses((status = 200, body = HeartbeatResponse), (status = 403, body = ApiError),
              (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn heartbeat(
    State(s): State<AppState>,
    worker: Worker,
    ApiPath(id): ApiPath<i64>,
    ApiJson(req): ApiJson<Heartbeat>,
) -> Result<Json<HeartbeatResponse>> {
    let (expires_at, campaign_state) = store::heartbeat(
        &s.relaxed_pool,
        worker.id,
        id,
        req.fencing_token,
        s.config.policy.ttl_seconds,
        s.config.policy.max_lease_seconds,
    )
    .await?;
    Metrics::add(&s.metrics.heartbeats, 1);
    Ok(Json(HeartbeatResponse {
        expires_at,
        campaign_state,
    }))
}

/// Gives back a lease's unfinished units; failed ones count an attempt.
#[utoipa::path(post, path = "/leases/{id}/release", tag = "leases", security(("worker" = [])),
    params(("id" = i64, Path, description = "lease id")), request_body = ReleaseLease,
    responses((status = 200, body = ReleaseResponse), (status = 403, body = ApiError),
              (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn release_lease(
    State(s): State<AppState>,
    worker: Worker,
    ApiPath(id): ApiPath<i64>,
    ApiJson(req): ApiJson<ReleaseLease>,
) -> Result<Json<ReleaseResponse>> {
    if req.failed_units.len() > 100_000 {
        return Err(Error::BadRequest("at most 100000 failed_units".into()));
    }
    if let Some(r) = &req.reason {
        if !r.trim().is_empty() {
            domain::check_text("reason", r, 2000)?;
        }
    }
    let r = store::release_lease(
        &s.pool,
        worker.id,
        id,
        req.fencing_token,
        &req.failed_units,
        s.config.policy.max_attempts,
    )
    .await?;
    Metrics::add(&s.metrics.leases_released, 1);
    Metrics::add(
        &s.metrics.units_quarantined,
        u64::from(r.response.quarantined),
    );
    tracing::info!(
        worker.id = worker.id,
        lease.id = id,
        units.returned = r.response.returned,
        units.quarantined = r.response.quarantined,
        reason = req.reason.as_deref().unwrap_or(""),
        "lease released"
    );
    if !req.failed_units.is_empty() || r.idle {
        // Failures, and leases given back untouched, count against the worker.
        enforce(&s, Some(&[worker.id])).await?;
    }
    Ok(Json(r.response))
}

// ---------------------------------------------------------------------------------------------
// Operations

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "alive", body = String)))]
async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the database answers.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, description = "ready", body = String),
              (status = 503, body = ApiError)))]
async fn readyz(State(s): State<AppState>) -> Result<&'static str> {
    store::ping(&s.pool).await.map_err(|e| match e {
        Error::Database(_) => Error::Database(sqlx::Error::PoolTimedOut),
        other => other,
    })?;
    Ok("ready")
}

/// Prometheus metrics (text exposition format), for the admin token or `--metrics-token`.
#[utoipa::path(get, path = "/metrics", tag = "operations", security(("admin" = [])),
    responses((status = 200, description = "Prometheus text", body = String),
              (status = 401, body = ApiError)))]
async fn metrics(State(s): State<AppState>, _: auth::MetricsReader) -> Result<Response> {
    // Concurrent scrapes wait for one query; the counts are at most a few seconds old.
    let mut cached = s.metrics.unit_counts.lock().await;
    let fresh = cached.as_ref().is_some_and(|(at, _)| {
        at.elapsed() < std::time::Duration::from_secs(crate::metrics::UNIT_COUNTS_SECONDS)
    });
    if !fresh {
        use crate::metrics::{Scrape, MAX_CAMPAIGN_SERIES, MAX_WORKER_SERIES};
        use crate::store::tallies;
        let pool = &s.relaxed_pool;
        let scrape = Scrape {
            units_by_state: store::unit_state_counts(pool).await?,
            campaigns: tallies::campaign_series(pool, MAX_CAMPAIGN_SERIES).await?,
            workers: tallies::worker_series(pool, MAX_WORKER_SERIES).await?,
        };
        *cached = Some((Instant::now(), scrape));
    }
    let scrape = cached.as_ref().map(|(_, u)| u.clone()).unwrap_or_default();
    drop(cached);
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(&scrape),
    )
        .into_response())
}
