//! `POST /campaigns/plan`: a campaign's plan without creating it (`campaign create
//! --dry-run`), and the planning that creation shares with it: the unit size chosen when the
//! request gives none.

use crate::domain::{self, engine, sizing};
use crate::error::{Error, Result};
use crate::request::auth::Admin;
use crate::request::ApiJson;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use tmd_kernels::plan::size::SizeChoice;
use tmd_wire::{ApiError, CampaignPlan, CreateCampaign, PlanCampaign};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The routes of this module (nested under `/api/v1`).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(plan_campaign))
}

/// Validates a campaign request and plans it, choosing its unit size when it gives none, on a
/// blocking thread (a whole binary80 function takes seconds). Refused as `POST /campaigns`
/// refuses it.
pub async fn plan(
    s: &AppState,
    req: &CreateCampaign,
) -> Result<(domain::NewCampaign, engine::Plan, Option<SizeChoice>)> {
    let mut new = domain::validate_campaign(req)?;
    let (max_units, max_cases) = (
        s.config.max_units_per_campaign,
        s.config.max_cases_per_result,
    );
    let planned = tokio::task::spawn_blocking(move || {
        let choice = sizing::choose(&new, max_units, max_cases)?;
        if let Some(c) = &choice {
            new.unit_bits = Some(c.unit_bits);
        }
        engine::plan(&new, max_units).map(|p| (new, p, choice))
    })
    .await
    .map_err(|e| Error::Internal(format!("planning task failed: {e}")))?;
    let (new, plan, choice) = planned?;
    domain::check_cases_fit(plan.unit_bits, new.min_bits, max_cases)?;
    Ok((new, plan, choice))
}

/// The binades' weights the engine's plan predicts for `plan` (one unit per binade planned,
/// on a blocking thread), or `None` where it predicts no cost anywhere.
pub async fn prior(
    plan: &engine::Plan,
    min_bits: u32,
) -> Result<Option<domain::work::PriorWeights>> {
    let fmt = engine::stored_format(plan.precision, plan.format.as_deref())?;
    let (function, samples) = (
        plan.function.clone(),
        engine::binade_samples(&plan.units, plan.unit_bits),
    );
    let started = std::time::Instant::now();
    let costs = tokio::task::spawn_blocking(move || {
        engine::planned_costs(&function, fmt, min_bits, &samples)
    })
    .await
    .map_err(|e| Error::Internal(format!("planning task failed: {e}")))??;
    let prior = domain::work::prior_weights(&costs);
    tracing::info!(
        binades = costs.len(),
        seconds = started.elapsed().as_secs_f64(),
        weighed = prior.is_some(),
        "binades weighed by the plan"
    );
    Ok(prior)
}

/// Plans a campaign without creating it: its units and their size (chosen when the request
/// gives none, saying why), the blocks a whole function skips entire, the HR-cases to expect
/// and, with a cost estimate, the time on the estimate's back end. Refused as `POST
/// /campaigns` would refuse the campaign.
#[utoipa::path(post, path = "/campaigns/plan", tag = "campaigns", request_body = PlanCampaign,
    security(("admin" = [])),
    responses((status = 200, body = CampaignPlan), (status = 400, body = ApiError),
              (status = 401, body = ApiError), (status = 413, body = ApiError),
              (status = 422, body = ApiError)))]
async fn plan_campaign(
    State(s): State<AppState>,
    _: Admin,
    ApiJson(req): ApiJson<PlanCampaign>,
) -> Result<Json<CampaignPlan>> {
    let (new, plan, choice) = plan(&s, &req.campaign).await?;
    let cost = match &req.estimate {
        None => None,
        Some(e) => {
            let format = engine::format_name(plan.precision, plan.format.as_deref())?;
            let (function, estimate_format) = engine::estimate_names(&e.function, &e.format)?;
            let mut binades: std::collections::BTreeMap<(bool, i32), u128> = Default::default();
            for u in &plan.units {
                *binades.entry((u.negative, u.exponent)).or_default() += u128::from(u.count);
            }
            let binades: Vec<(bool, i32, u128)> =
                binades.into_iter().map(|((n, x), c)| (n, x, c)).collect();
            let weights = domain::work::weigh(
                &domain::work::EstimateTarget {
                    function: &plan.function,
                    format: &format,
                    min_bits: new.min_bits,
                    binades: &binades,
                },
                &tmd_wire::CostEstimate {
                    function,
                    ..e.clone()
                },
                &estimate_format,
            )?;
            Some(sizing::Cost {
                backend: e.backend.clone(),
                seconds_per_argument: weights
                    .binades
                    .iter()
                    .map(|b| ((b.negative, b.exponent), b.seconds_per_argument))
                    .collect(),
            })
        }
    };
    Ok(Json(sizing::summary(
        &plan,
        new.min_bits,
        choice.as_ref(),
        cost.as_ref(),
    )?))
}
