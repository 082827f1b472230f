//! Types exchanged between `tmd-server` and `tmd-worker` over HTTP.
//!
//! This crate has no I/O and no server-side dependencies, so the worker can use it without
//! pulling in axum or sqlx. The optional `openapi` feature derives OpenAPI schemas (utoipa) for
//! the server's generated document; the worker leaves it off.
//!
//! Conventions: ids are integers; timestamps are RFC 3339 UTC; arguments are C99 hexadecimal
//! strings; argument counts that may exceed 2^64 (whole campaigns) are decimal strings.
//!
//! The types by subject, each re-exported here (`tmd_wire::Lease`): the error envelope and its
//! codes (`errors.rs`), campaigns and their progress (`campaigns.rs`), the admin's remedies on
//! a campaign (`admin.rs`), workers and enrollment (`workers.rs`), leases (`leases.rs`),
//! results (`results.rs`), the exports and the dashboard's figures (`views.rs`), the cost
//! estimate (`estimate.rs`), a campaign's plan before it is created (`plan.rs`). The serde contracts that old and new peers rely on are tested in
//! `tests.rs`.

#![forbid(unsafe_code)]

mod admin;
mod campaigns;
mod errors;
mod estimate;
mod leases;
mod plan;
mod results;
mod views;
mod workers;

pub use admin::*;
pub use campaigns::*;
pub use errors::*;
pub use estimate::{BinadeCost, CostEstimate, COST_ESTIMATE_VERSION};
pub use leases::*;
pub use plan::{CampaignPlan, PlanCampaign, SkippedBlock};
pub use results::*;
pub use views::*;
pub use workers::*;

#[cfg(test)]
mod tests;
