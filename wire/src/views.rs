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
