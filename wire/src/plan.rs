//! A campaign's plan before it is created (`POST /api/v1/campaigns/plan`, `campaign create
//! --dry-run`): its units and their size with the reason, the blocks skipped whole, the
//! HR-cases to expect and, with a cost estimate, the time.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// `POST /api/v1/campaigns/plan`: the campaign as it would be created, and optionally its
/// cost estimate (`tmd-worker estimate --output json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PlanCampaign {
    pub campaign: crate::CreateCampaign,
    #[serde(default)]
    pub estimate: Option<crate::CostEstimate>,
}

/// What creating the campaign would make; nothing is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CampaignPlan {
    pub function: String,
    /// The format as the engine names it (`binary64`, `p24`).
    pub format: String,
    pub min_bits: u32,
    /// log2 of the arguments per unit.
    pub unit_bits: u32,
    /// The request gave no unit size and the coordinator chose this one.
    pub unit_bits_chosen: bool,
    /// Why this unit size, for people.
    pub unit_bits_reason: String,
    pub units: u64,
    /// Arguments in all (a decimal string: binary80 campaigns exceed 2^64).
    pub arguments: String,
    /// Binades (sign and exponent) with units.
    pub binades: u64,
    /// HR-cases a unit of this size is expected to hold at `min_bits`.
    pub expected_cases_per_unit: f64,
    /// HR-cases expected over the arguments searched (those not in blocks skipped whole).
    pub expected_hr_cases: f64,
    /// Arguments in blocks the plan skips whole (overflow, underflow, trivial, exact regions:
    /// one unit per run, in a range as in a whole function), merged where adjacent.
    pub skipped_arguments: String,
    /// Those blocks, merged, by argument (at most 100).
    pub skipped_blocks: Vec<SkippedBlock>,
    /// Seconds on the estimate's back end, when an estimate was given.
    #[serde(default)]
    pub estimated_seconds: Option<f64>,
    /// The estimate's back end, when an estimate was given.
    #[serde(default)]
    pub estimate_backend: Option<String>,
    /// The runs of arguments derived from the base binades instead of searched (the
    /// function's reduction); not among `units` nor `arguments`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub derived: Vec<crate::DerivedRun>,
}

/// Adjacent arguments a plan skips whole, `[first, last]` in C99 hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SkippedBlock {
    pub first: String,
    pub last: String,
    /// Arguments in the block (a decimal string).
    pub arguments: String,
}
