//! Views of a campaign for people: exports, coverage, hardness histogram (dashboard, CLI).

use crate::results::{HrKind, SkippedRun};
use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// One HR-case as `GET /api/v1/campaigns/{id}/hr-cases?format=json` lists it (the `csv` and
/// `wc` formats carry the same cases, in the same order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ExportedHrCase {
    /// The argument, C99 hexadecimal.
    pub x: String,
    /// Identical bits after the rounding bit.
    pub bits: u32,
    /// -log2 of the relative distance to the breakpoint.
    pub neg_log2_d: f64,
    pub kind: HrKind,
    /// f(x) rounded to nearest, C99 hexadecimal.
    pub rounded: String,
    pub unit_id: i64,
}

/// `GET /api/v1/campaigns/{id}/hr-cases?format=json&shape=object`: the campaign's HR-cases
/// with its skipped runs (overflow, underflow, pole, trivial and exact runs) in one document;
/// `shape=array` (the default) is the bare array of cases older readers take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HrCasesDocument {
    /// The shape's version: 1. A reader refuses a version it does not know.
    pub version: u32,
    pub campaign_id: i64,
    pub function: String,
    pub precision: u32,
    /// The named format, absent for a bare precision (exponent unbounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// How results are judged, for people.
    pub judged_as: String,
    /// The campaign's threshold (the cases' filter may ask for more).
    pub min_bits: u32,
    /// The runs of arguments derived from the base binades instead of searched (their cases
    /// are among `cases`, judged by MPFR as every case); absent where nothing is derived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub derived_runs: Vec<crate::DerivedRun>,
    /// The runs of arguments not listed case by case, per unit, by argument (not filtered).
    pub skipped_runs: Vec<SkippedRun>,
    /// The cases, filtered and ordered as asked, as the array shape lists them.
    pub cases: Vec<ExportedHrCase>,
}

/// How far one binade (sign and exponent) of a campaign is covered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct BinadeCoverage {
    pub negative: bool,
    /// Arguments are `±1.f × 2^exponent`.
    pub exponent: i32,
    pub units_total: i64,
    pub units_done: i64,
    pub units_leased: i64,
    pub units_quarantined: i64,
    /// Decimal strings, as elsewhere: a binade of binary64 holds 2^52 arguments.
    pub arguments_total: String,
    pub arguments_done: String,
    /// The binade's cost per argument relative to the campaign's mean (1 without an
    /// estimate).
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

/// HR-cases with exactly `bits` identical bits after the rounding bit, per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HardnessBin {
    pub bits: u32,
    pub fp: i64,
    pub mid: i64,
}

/// `GET /api/v1/campaigns/{id}/history` (admin): a campaign's done work over its life, for a
/// burn-up chart, with the estimate's projection when one was posted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CampaignHistory {
    pub campaign_id: i64,
    /// Where the chart starts: nothing was done then.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When the last unit was done; absent while units remain.
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The posted estimate's total seconds on its back end: the projection is a straight line
    /// from nothing done at `created_at` to all done this many seconds later. Absent without
    /// an estimate (the engine's plan weighs binades but predicts no seconds).
    pub estimated_seconds: Option<f64>,
    /// The back end the estimate's seconds are of.
    pub estimate_backend: Option<String>,
    /// Readings in time order: one per hour older than two hours, one a minute since, and the
    /// counters now last.
    pub points: Vec<HistoryPoint>,
}

/// One reading of a campaign's done work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HistoryPoint {
    pub at: chrono::DateTime<chrono::Utc>,
    /// Done work over work in all, 0 to 1 (work as the weights of the time counted it).
    pub fraction_done: f64,
    /// Arguments of done units, a decimal string.
    pub arguments_done: String,
}

/// `GET /api/v1/campaigns/{id}/times` (admin): per binade, the estimate's seconds against the
/// seconds results reported; and HR-cases found against the estimate's expectation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CampaignTimes {
    pub campaign_id: i64,
    /// The estimate's back end; absent without an estimate.
    pub estimate_backend: Option<String>,
    /// HR-cases found (recorded, each once).
    pub hr_cases: i64,
    /// HR-cases the estimate expects over the whole campaign, and over the arguments done so
    /// far (each binade's expected rate per argument times its arguments); absent without an
    /// estimate.
    pub expected_hr_cases: Option<f64>,
    pub expected_hr_cases_so_far: Option<f64>,
    /// The binades, in value order.
    pub binades: Vec<BinadeTime>,
}

/// One binade's time, estimated and measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct BinadeTime {
    pub negative: bool,
    pub exponent: i32,
    /// Decimal strings.
    pub arguments_total: String,
    pub arguments_done: String,
    /// The estimate's seconds for the whole binade (`seconds_per_argument × arguments`) and for
    /// its done arguments; absent when the binade's weight comes from the engine's plan (which
    /// predicts relative cost, not seconds) or without any weight.
    pub estimated_seconds: Option<f64>,
    pub estimated_seconds_done: Option<f64>,
    /// Seconds the results of its units reported (each worker's wall clock on a unit over the
    /// units it computes at once, summed over every result, replicas included), and how many
    /// results that is.
    pub measured_seconds: f64,
    pub results: i64,
}

/// `GET /api/v1/campaigns/queue` (admin): one active or paused campaign of the queue, in the
/// order work is handed out (highest priority first, then oldest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct QueuedCampaign {
    pub id: i64,
    pub name: String,
    pub state: crate::CampaignState,
    pub priority: i32,
    /// Work done over work in all, in percent.
    pub percent_done: f64,
    /// The posted estimate's seconds in all, on its back end; absent without an estimate.
    pub estimated_seconds: Option<f64>,
    /// Seconds left at the recent rate; absent when nothing was done lately.
    pub eta_seconds: Option<f64>,
    /// Why units wait instead of being leased; empty when none do.
    pub waiting: Vec<crate::Waiting>,
}
