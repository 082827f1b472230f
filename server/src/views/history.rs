//! The dashboard's views of time: a campaign's burn-up (done work over its life against the
//! estimate's projection), the time of its binades estimated and measured with the HR-cases
//! expected, and the queue of campaigns in the order work is handed out.

use crate::domain::audit;
use crate::error::Result;
use crate::request::auth::Admin;
use crate::request::ApiPath;
use crate::store;
use crate::store::history as store_history;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use tmd_wire::{ApiError, CampaignHistory, CampaignTimes, QueuedCampaign};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The routes, nested under `/api/v1` with the dashboard's.
pub fn routes() -> OpenApiRouter<crate::AppState> {
    OpenApiRouter::new()
        .routes(routes!(history))
        .routes(routes!(times))
        .routes(routes!(queue))
}

/// A campaign's done work over its whole life, for a burn-up chart: one reading an hour
/// beyond the last two hours, one a minute within them, the counters now last; with the
/// estimate's total seconds, the projection's slope, when one was posted.
#[utoipa::path(get, path = "/campaigns/{id}/history", tag = "campaigns",
    security(("admin" = [])),
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = CampaignHistory), (status = 401, body = ApiError),
              (status = 404, body = ApiError)))]
async fn history(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<CampaignHistory>> {
    let c = store::get_campaign(&s.pool, id).await?;
    let estimate = store_history::estimate(&s.pool, id).await?;
    Ok(Json(CampaignHistory {
        campaign_id: id,
        created_at: c.created_at,
        completed_at: c.completed_at,
        estimated_seconds: estimate.as_ref().map(|e| e.total_seconds),
        estimate_backend: estimate.map(|e| e.backend),
        points: store_history::history(&s.pool, id).await?,
    }))
}

/// Per binade of a campaign, in value order: the estimate's seconds (absent where the weight
/// comes from the engine's plan) against the seconds its results reported; and the HR-cases
/// found against those the estimate expects.
#[utoipa::path(get, path = "/campaigns/{id}/times", tag = "campaigns",
    security(("admin" = [])),
    params(("id" = i64, Path, description = "campaign id")),
    responses((status = 200, body = CampaignTimes), (status = 401, body = ApiError),
              (status = 404, body = ApiError)))]
async fn times(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<CampaignTimes>> {
    store::get_campaign(&s.pool, id).await?;
    let estimate = store_history::estimate(&s.pool, id).await?;
    let binades = store_history::binade_times(&s.pool, id).await?;
    let hr_cases = store::tallies::campaign_tally(&s.pool, id).await?.hr_cases;
    let expected = estimate.as_ref().map(|e| {
        let counts: Vec<(bool, i32, f64, f64)> = binades
            .iter()
            .map(|b| {
                let n = |s: &str| s.parse::<f64>().unwrap_or(0.0);
                (
                    b.negative,
                    b.exponent,
                    n(&b.arguments_total),
                    n(&b.arguments_done),
                )
            })
            .collect();
        audit::estimate_expects(e, &counts)
    });
    Ok(Json(CampaignTimes {
        campaign_id: id,
        estimate_backend: estimate.map(|e| e.backend),
        hr_cases,
        expected_hr_cases: expected.map(|e| e.0),
        expected_hr_cases_so_far: expected.map(|e| e.1),
        binades,
    }))
}

/// The queue: active and paused campaigns (at most 100) in the order the claim takes them,
/// highest priority first, then oldest; each with its work done, the estimate's seconds, its
/// time left and why units wait.
#[utoipa::path(get, path = "/campaigns/queue", tag = "campaigns",
    security(("admin" = [])),
    responses((status = 200, body = Vec<QueuedCampaign>), (status = 401, body = ApiError)))]
async fn queue(State(s): State<AppState>, _: Admin) -> Result<Json<Vec<QueuedCampaign>>> {
    let mut all = Vec::new();
    for c in store_history::queue(&s.pool).await? {
        let p = store::campaign_progress(&s.pool, c.id).await?;
        all.push(QueuedCampaign {
            id: c.id,
            name: c.name,
            state: c.state,
            priority: c.priority,
            percent_done: p.work.percent_done,
            estimated_seconds: p.work.estimated_seconds_total,
            eta_seconds: p.work.eta_seconds,
            waiting: p.waiting,
        });
    }
    Ok(Json(all))
}
