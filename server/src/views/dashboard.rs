//! The web dashboard: one self-contained HTML page at `/` (inline CSS and JavaScript, allowed
//! by their SHA-256 in the CSP rather than by `'unsafe-inline'`; hand-drawn SVG charts, nothing
//! fetched from elsewhere, so it works offline), and the JSON routes only it needs besides the
//! existing ones: every campaign's progress at once, coverage by binade and the hardness
//! histogram.
//!
//! The page holds no secret: it asks for the admin token once, keeps it in `sessionStorage`
//! and sends it as `Authorization: Bearer` to the admin API, like any other client.

use crate::error::{Error, Result};
use crate::request::auth::Admin;
use crate::request::ApiPath;
use crate::request::ApiQuery;
use crate::store;
use crate::store::export as store_export;
use crate::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use tmd_wire::{ApiError, BinadeCoverage, CampaignProgress, HardnessBin};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The page, embedded in the binary.
const PAGE: &str = include_str!("../../static/dashboard.html");

/// What the page may load: only itself and the API of this server. The policy makes any
/// accidental external resource fail loudly in the browser (and in the Chromium test). The
/// page's one `<script>` and one `<style>` are allowed by their hashes, so an injected script
/// or style (were a name ever to escape `textContent`) would not run.
static CSP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "default-src 'none'; script-src '{}'; style-src '{}'; \
         connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
         form-action 'none'; frame-ancestors 'none'",
        inline_hash(PAGE, "script"),
        inline_hash(PAGE, "style")
    )
});

/// `sha256-...` of the content of the first `<tag>` element of `page`.
fn inline_hash(page: &str, tag: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = page.find(&open).map_or(0, |i| i + open.len());
    let end = page[start..].find(&close).map_or(start, |i| start + i);
    let digest = sha2::Sha256::digest(&page.as_bytes()[start..end]);
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The page routes (not part of the OpenAPI document: they serve HTML).
pub fn pages() -> Router<AppState> {
    Router::new().route("/", get(page))
}

/// The JSON routes of the dashboard, with their OpenAPI operations (nested under `/api/v1`).
pub fn api_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(all_progress))
        .routes(routes!(coverage))
        .routes(routes!(hardness))
        .merge(super::history::routes())
}

/// How many campaigns the list shows (and [`all_progress`] reports), newest first.
const LIST_LIMIT: usize = 100;

/// The progress of the newest 100 campaigns, newest first: the campaign list's one request
/// per refresh, instead of one per campaign.
#[utoipa::path(get, path = "/campaigns/progress", tag = "campaigns",
    security(("admin" = [])),
    responses((status = 200, body = Vec<CampaignProgress>), (status = 401, body = ApiError)))]
async fn all_progress(State(s): State<AppState>, _: Admin) -> Result<Json<Vec<CampaignProgress>>> {
    let mut all = Vec::new();
    for c in store::list_campaigns(&s.pool)
        .await?
        .iter()
        .take(LIST_LIMIT)
    {
        all.push(store::campaign_progress(&s.pool, c.id).await?);
    }
    Ok(Json(all))
}

async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP.as_str()),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        PAGE,
    )
}

/// A page of coverage: binades from `offset` (0 when absent), at most `limit` of them
/// (1024 when absent, and at most 1024).
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CoverageQuery {
    /// The first binade of the page, counted in value order from 0.
    #[param(minimum = 0)]
    pub offset: Option<i64>,
    /// Binades in the page (1 to 1024).
    #[param(minimum = 1, maximum = 1024)]
    pub limit: Option<i64>,
}

/// Coverage of a campaign by binade: units and arguments done per (sign, exponent), in value
/// order, a page at a time (a whole binary64 function has over 4,000 binades). Read from the
/// binades' maintained counters, not from the units. `X-Tmd-Binades` gives the number of
/// binades in all.
#[utoipa::path(get, path = "/campaigns/{id}/coverage", tag = "campaigns",
    security(("admin" = [])),
    params(("id" = i64, Path, description = "campaign id"), CoverageQuery),
    responses((status = 200, body = Vec<BinadeCoverage>,
               headers(("x-tmd-binades" = u64, description = "binades of the campaign in all"))),
              (status = 400, body = ApiError), (status = 401, body = ApiError),
              (status = 404, body = ApiError)))]
async fn coverage(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<CoverageQuery>,
) -> Result<impl IntoResponse> {
    let offset = q.offset.unwrap_or(0);
    let limit = q.limit.unwrap_or(store::tallies::COVERAGE_PAGE_MAX);
    if offset < 0 || !(1..=store::tallies::COVERAGE_PAGE_MAX).contains(&limit) {
        return Err(Error::BadRequest(format!(
            "offset must be at least 0 and limit in 1..={}",
            store::tallies::COVERAGE_PAGE_MAX
        )));
    }
    // A campaign always has units, so an empty answer would only hide a wrong id.
    store::get_campaign(&s.pool, id).await?;
    let (page, total) = store::tallies::coverage_page(&s.pool, id, offset, limit).await?;
    Ok((
        [(
            header::HeaderName::from_static("x-tmd-binades"),
            header::HeaderValue::from(total.max(0) as u64),
        )],
        Json(page),
    ))
}

/// Histogram of hardness: HR-cases per number of identical bits, per kind.
#[utoipa::path(get, path = "/campaigns/{id}/hardness", tag = "campaigns",
    security(("admin" = [])),
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = Vec<HardnessBin>), (status = 401, body = ApiError),
              (status = 404, body = ApiError)))]
async fn hardness(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Vec<HardnessBin>>> {
    store::get_campaign(&s.pool, id).await?;
    Ok(Json(store_export::hardness_histogram(&s.pool, id).await?))
}
